/*
 * service.c - sd_notify(3) messages for systemd (see service.h), spoken without libsystemd.
 *
 * A message is one datagram to the AF_UNIX socket $NOTIFY_SOCKET names: a filesystem path
 * ("/run/systemd/notify") or, when the name starts with '@', an abstract socket (the '@'
 * becomes the leading NUL of sun_path). The watchdog is two environment variables:
 * WATCHDOG_USEC (the interval, decimal microseconds) and WATCHDOG_PID (when set, the only
 * process the interval is for). The rules are sd_notify(3)'s and sd_watchdog_enabled(3)'s; the
 * environment is read, never unset.
 *
 * Each message opens a SOCK_DGRAM socket, sends with MSG_DONTWAIT (a manager whose queue is
 * full makes the call fail with -EAGAIN, it never blocks the loop) and MSG_NOSIGNAL, and closes
 * it: the module holds no fd between calls, only the counters of em_service_t.
 * Single-threaded (the loop's thread); getenv() is read on every call.
 */
#define _POSIX_C_SOURCE 200809L
#include "service.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/*
 * Parses TEXT as an unsigned decimal with no sign, no spaces and nothing after it into *out.
 * Returns 0, or -EINVAL for anything else and for a value past UINT64_MAX.
 */
static int parse_decimal(const char *text, uint64_t *out) {
  if (text == NULL || *text == '\0') {
    return -EINVAL;
  }
  uint64_t v = 0;
  for (const char *p = text; *p != '\0'; p++) {
    if (*p < '0' || *p > '9') {
      return -EINVAL;
    }
    uint64_t digit = (uint64_t)(*p - '0');
    if (v > (UINT64_MAX - digit) / 10u) {
      return -EINVAL;
    }
    v = v * 10u + digit;
  }
  *out = v;
  return 0;
}

/*
 * Fills *addr from NAME ($NOTIFY_SOCKET) and returns the address length to pass to sendto():
 * a path keeps its terminating NUL, an abstract name ('@' first) is exactly its bytes.
 * Returns -EINVAL for a name that is neither, is a bare "/" or "@", or does not fit sun_path.
 */
static int notify_address(const char *name, struct sockaddr_un *addr) {
  size_t len = strlen(name);
  if (len < 2 || (name[0] != '/' && name[0] != '@')) {
    return -EINVAL;
  }
  bool abstract = name[0] == '@';
  /* The kernel's rule: an abstract name may fill sun_path, a path needs room for its NUL. */
  if (len > sizeof(addr->sun_path) - (abstract ? 0 : 1)) {
    return -EINVAL;
  }
  memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  memcpy(addr->sun_path, name, len);
  if (abstract) {
    addr->sun_path[0] = '\0';
    return (int)(offsetof(struct sockaddr_un, sun_path) + len);
  }
  return (int)(offsetof(struct sockaddr_un, sun_path) + len + 1);
}

int em_service_notify(const char *state) {
  if (state == NULL) {
    return -EINVAL;
  }
  const char *name = getenv("NOTIFY_SOCKET");
  if (name == NULL) {
    return 0;
  }
  struct sockaddr_un addr;
  int addr_len = notify_address(name, &addr);
  if (addr_len < 0) {
    return addr_len;
  }
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return -errno;
  }
  size_t len = strlen(state);
  int rc = 1;
  ssize_t n = sendto(fd, state, len, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr *)&addr,
                     (socklen_t)addr_len);
  if (n < 0) {
    rc = -errno;
  } else if ((size_t)n != len) {
    rc = -EIO; /* A datagram goes whole or not at all; never seen, but not a success. */
  }
  close(fd);
  return rc;
}

int em_service_notifyf(const char *format, ...) {
  if (format == NULL) {
    return -EINVAL;
  }
  char msg[EM_SERVICE_MESSAGE_BYTES];
  va_list ap;
  va_start(ap, format);
  int n = vsnprintf(msg, sizeof(msg), format, ap);
  va_end(ap);
  if (n < 0) {
    return -EINVAL;
  }
  if ((size_t)n >= sizeof(msg)) {
    return -EMSGSIZE;
  }
  return em_service_notify(msg);
}

int em_service_watchdog_usec(uint64_t *usec) {
  const char *text = getenv("WATCHDOG_USEC");
  if (text == NULL) {
    return 0;
  }
  uint64_t u = 0;
  int rc = parse_decimal(text, &u);
  if (rc < 0) {
    return rc;
  }
  if (u == 0 || u == UINT64_MAX) { /* Not set, or infinity: systemd's USEC_INFINITY. */
    return -EINVAL;
  }
  const char *pid_text = getenv("WATCHDOG_PID");
  if (pid_text != NULL) {
    uint64_t pid = 0;
    rc = parse_decimal(pid_text, &pid);
    if (rc < 0 || pid == 0 || pid > (uint64_t)INT32_MAX) {
      return -EINVAL;
    }
    if ((pid_t)pid != getpid()) {
      return 0; /* The interval is for another process (a wrapper's child, say). */
    }
  }
  if (usec != NULL) {
    *usec = u;
  }
  return 1;
}

void em_service_init(em_service_t *s) {
  *s = (em_service_t){0};
  uint64_t usec = 0;
  if (em_service_watchdog_usec(&usec) > 0) {
    s->watchdog_ns = usec > UINT64_MAX / 1000u ? UINT64_MAX : usec * 1000u;
  }
}

int em_service_ready(em_service_t *s, const char *status) {
  if (s->ready) {
    return 0;
  }
  s->ready = true;
  return em_service_notifyf("READY=1\nSTATUS=%s", status ? status : "running");
}

int em_service_sampling(em_service_t *s, const char *device, uint64_t period_ns) {
  if (s->ready) {
    return 0;
  }
  char status[128];
  snprintf(status, sizeof(status), "device %s: sampling every %llu ms", device,
           (unsigned long long)(period_ns / 1000000u));
  return em_service_ready(s, status);
}

int em_service_tick(em_service_t *s, uint64_t now_ns, bool on_time) {
  if (s->watchdog_ns == 0) {
    return 0;
  }
  if (!on_time) {
    s->withheld++;
    return 0;
  }
  if (s->last_ping_ns != 0 && now_ns - s->last_ping_ns < s->watchdog_ns / 4) {
    return 0;
  }
  s->last_ping_ns = now_ns;
  s->pings++;
  return em_service_notify("WATCHDOG=1");
}

int em_service_reloading(em_service_t *s, uint64_t now_ns) {
  (void)s;
  return em_service_notifyf("RELOADING=1\nMONOTONIC_USEC=%llu",
                            (unsigned long long)(now_ns / 1000u));
}

int em_service_reloaded(em_service_t *s, const char *status) {
  (void)s;
  return em_service_notifyf("READY=1\nSTATUS=%s", status ? status : "running");
}

int em_service_stopping(em_service_t *s) {
  (void)s;
  return em_service_notify("STOPPING=1\nSTATUS=stopping");
}
