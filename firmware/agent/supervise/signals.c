/*
 * signals.c - see signals.h.
 */
#define _POSIX_C_SOURCE 200809L

#include "signals.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "edgemon/common/file.h"
#include "log.h"

typedef struct {
  struct sockaddr_un addr;
  socklen_t len;
  uint32_t pid; /* The subscribing process (its credentials), 0 when unknown. */
} subscriber_t;

struct em_signals {
  em_log_limit_t refused_log; /* Refusal lines: a peer can cause them at will. */
  char path[256];
  int fd;
  uint8_t *page; /* EM_STATE_PAGE_BYTES, MAP_SHARED. */
  uint32_t agent_pid;
  em_signals_send_fn send;
  void *send_ctx;
  int probe_fd; /* Unbound AF_UNIX datagram socket: connect() only, never sends. */
  subscriber_t subs[EM_SIGNALS_MAX_SUBSCRIBERS];
  size_t n_subs;
  em_signals_stats_t stats;
};

/* Makes the page whole as "<path>.tmp" (em_file_begin), formats it, maps it and renames it. */
static int create_page(em_signals_t *s, const em_state_record_t *initial) {
  char tmp[sizeof(s->path) + 8];
  s->fd = em_file_begin(s->path, EM_STATE_PAGE_BYTES, tmp, sizeof(tmp));
  if (s->fd < 0) {
    return s->fd;
  }
  int rc = 0;
  void *m = mmap(NULL, EM_STATE_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
  if (m == MAP_FAILED) {
    rc = -errno;
  } else {
    s->page = m;
    rc = em_state_page_init(s->page, s->agent_pid, initial);
  }
  return em_file_finish(tmp, s->path, rc);
}

int em_signals_new(em_signals_t **out, const char *page_path, uint32_t agent_pid,
                   const em_state_record_t *initial, em_signals_send_fn send, void *send_ctx) {
  if (!out || !page_path || !initial || !send ||
      strlen(page_path) >= sizeof(((em_signals_t *)0)->path)) {
    return -EINVAL;
  }
  em_signals_t *s = calloc(1, sizeof(*s));
  if (!s) {
    return -ENOMEM;
  }
  snprintf(s->path, sizeof(s->path), "%s", page_path);
  s->fd = -1;
  s->probe_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  s->agent_pid = agent_pid;
  s->send = send;
  s->send_ctx = send_ctx;
  int rc = s->probe_fd < 0 ? -errno : create_page(s, initial);
  if (rc) {
    em_signals_free(s, false);
    return rc;
  }
  *out = s;
  return 0;
}

int em_signals_publish(em_signals_t *s, const em_state_record_t *rec) {
  uint8_t push[EM_PUSH_DGRAM_BYTES];
  int rc = em_push_pack(rec, s->agent_pid, push);
  if (!rc) {
    rc = em_state_page_write(s->page, rec);
  }
  if (rc) {
    return rc;
  }
  for (size_t i = 0; i < s->n_subs;) {
    int src = s->send(s->send_ctx, &s->subs[i].addr, s->subs[i].len, push, sizeof(push));
    if (src == -ECONNREFUSED || src == -ENOENT || src == -ENOTCONN || src == -EPERM) {
      /* Gone (EPERM: its socket is now connected to another peer, so no push can reach it
       * again): drop it, look at the one moved here. */
      s->subs[i] = s->subs[--s->n_subs];
      s->stats.dropped++;
      continue;
    }
    if (src == -EAGAIN || src == -EWOULDBLOCK) {
      s->stats.push_full++;
    } else if (src == 0) {
      s->stats.pushes++;
    }
    i++;
  }
  return 0;
}

static bool same_addr(const subscriber_t *a, const struct sockaddr_un *addr, socklen_t len) {
  return a->len == len && memcmp(&a->addr, addr, (size_t)len) == 0;
}

/*
 * Whether the socket behind a subscriber's address is gone: connect() of the probe socket,
 * which sends nothing. ECONNREFUSED: no socket is bound there any more (closed); ENOENT: the
 * socket file was removed. Success or any other error (EPERM: it is alive and connected to
 * another socket, the agent's) counts as alive.
 */
static bool peer_gone(const em_signals_t *s, const subscriber_t *sub) {
  if (connect(s->probe_fd, (const struct sockaddr *)&sub->addr, sub->len) == 0) {
    return false;
  }
  return errno == ECONNREFUSED || errno == ENOENT;
}

/*
 * Probes the held subscribers (those of `pid` only when only_pid) and frees the slots of the
 * gone ones. Returns the number freed.
 */
static size_t reap(em_signals_t *s, bool only_pid, uint32_t pid) {
  size_t freed = 0;
  for (size_t i = 0; i < s->n_subs;) {
    if ((!only_pid || s->subs[i].pid == pid) && peer_gone(s, &s->subs[i])) {
      s->subs[i] = s->subs[--s->n_subs]; /* Look at the one moved here next. */
      freed++;
      continue;
    }
    i++;
  }
  /* Dissolve the probe's last association (connect to AF_UNSPEC), so it holds no reference
   * to a subscriber's socket. */
  struct sockaddr unspec = {.sa_family = AF_UNSPEC};
  (void)connect(s->probe_fd, &unspec, sizeof(unspec));
  s->stats.reaped += freed;
  return freed;
}

static size_t held_by(const em_signals_t *s, uint32_t pid) {
  size_t n = 0;
  for (size_t i = 0; i < s->n_subs; i++) {
    n += s->subs[i].pid == pid;
  }
  return n;
}

/* CLOCK_MONOTONIC in ns, the clock of the loop's now (uv_hrtime). */
static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int subscribe_addr(em_signals_t *s, bool subscribe, const struct sockaddr_un *addr,
                          socklen_t len, uint32_t pid) {
  if (!addr || len <= (socklen_t)sizeof(sa_family_t) || len > (socklen_t)sizeof(*addr)) {
    s->stats.refused += subscribe;
    return -EINVAL; /* Unnamed: the client did not bind, so nothing can reach it. */
  }
  for (size_t i = 0; i < s->n_subs; i++) {
    if (same_addr(&s->subs[i], addr, len)) {
      if (!subscribe) {
        s->subs[i] = s->subs[--s->n_subs];
      }
      return 0;
    }
  }
  if (!subscribe) {
    return 0;
  }
  if (held_by(s, pid) >= EM_SIGNALS_MAX_PER_PID && reap(s, true, pid) == 0) {
    s->stats.refused++;
    s->stats.refused_pid++;
    return -EDQUOT;
  }
  if (s->n_subs == EM_SIGNALS_MAX_SUBSCRIBERS && reap(s, false, 0) == 0) {
    s->stats.refused++;
    return -ENOSPC;
  }
  subscriber_t *n = &s->subs[s->n_subs++];
  memset(n, 0, sizeof(*n));
  memcpy(&n->addr, addr, (size_t)len);
  n->len = len;
  n->pid = pid;
  return 0;
}

int em_signals_subscribe(em_signals_t *s, bool subscribe, const struct sockaddr_un *addr,
                         socklen_t len, uint32_t pid) {
  int rc = subscribe_addr(s, subscribe, addr, len, pid);
  if (!rc || !em_log_limit_pass(&s->refused_log, mono_ns(), EM_LOG_LIMIT_NS)) {
    return rc;
  }
  const char *why = "the client's socket has no address";
  if (rc == -ENOSPC) {
    why = "all " EM_LOG_STR(EM_SIGNALS_MAX_SUBSCRIBERS) " subscribers are alive";
  } else if (rc == -EDQUOT) {
    why = "the process holds " EM_LOG_STR(EM_SIGNALS_MAX_PER_PID) " live subscribers already";
  }
  EM_WARN("spans: %s from pid %lu refused: %s (further refusals within %u s are counted in "
          "push.subscribe_refused, not logged one by one)",
          subscribe ? "subscribe" : "unsubscribe", (unsigned long)pid, why,
          (unsigned)EM_LOG_LIMIT_S);
  return rc;
}

void em_signals_flush_log(em_signals_t *s, uint64_t now_ns) {
  em_log_limit_report(&s->refused_log, now_ns, "spans", "subscribe requests refused",
                      " (push.subscribe_refused)");
}

size_t em_signals_subscribers(const em_signals_t *s) {
  return s->n_subs;
}

const em_signals_stats_t *em_signals_stats(const em_signals_t *s) {
  return &s->stats;
}

void em_signals_free(em_signals_t *s, bool remove_page) {
  if (!s) {
    return;
  }
  if (s->page) {
    munmap(s->page, EM_STATE_PAGE_BYTES);
  }
  if (s->fd >= 0) {
    close(s->fd);
  }
  if (s->probe_fd >= 0) {
    close(s->probe_fd);
  }
  if (remove_page && s->page) {
    unlink(s->path);
  }
  free(s);
}
