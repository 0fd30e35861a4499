/*
 * test_service.c - the agent's own sd_notify(3) against real AF_UNIX datagram sockets: messages
 * reach a path socket and an abstract one ('@' in NOTIFY_SOCKET), a socket name systemd would
 * refuse is -EINVAL, nobody listening is an error and not a hang, a full queue is -EAGAIN at
 * once, and the watchdog interval follows WATCHDOG_USEC and WATCHDOG_PID as
 * sd_watchdog_enabled(3) reads them (another process's pid: not ours, off).
 */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "service.h"
#include "tmp_dir.h"

/* A receiving socket: bound to a path in a temp dir, or to an abstract name. */
typedef struct {
  int fd;
  char dir[64];
  char path[128];
  char env[128]; /* What NOTIFY_SOCKET is set to. */
} listener_t;

static void listen_path(listener_t *l) {
  em_tmp_dir_make(l->dir, sizeof(l->dir), "em-service", l->path, sizeof(l->path), "notify");
  l->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  assert_true(l->fd >= 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  assert_true(strlen(l->path) < sizeof(a.sun_path));
  memcpy(a.sun_path, l->path, strlen(l->path) + 1);
  assert_int_equal(bind(l->fd, (struct sockaddr *)&a, sizeof(a)), 0);
  snprintf(l->env, sizeof(l->env), "%s", l->path);
  assert_int_equal(setenv("NOTIFY_SOCKET", l->env, 1), 0);
}

/* Binds the abstract name "edgemon-test-notify-<pid>"; NOTIFY_SOCKET gets it with '@' first. */
static void listen_abstract(listener_t *l) {
  l->dir[0] = '\0';
  l->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  assert_true(l->fd >= 0);
  char name[64];
  int n = snprintf(name, sizeof(name), "edgemon-test-notify-%ld", (long)getpid());
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  memcpy(a.sun_path + 1, name, (size_t)n); /* sun_path[0] stays NUL: abstract. */
  socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
  assert_int_equal(bind(l->fd, (struct sockaddr *)&a, len), 0);
  snprintf(l->env, sizeof(l->env), "@%s", name);
  assert_int_equal(setenv("NOTIFY_SOCKET", l->env, 1), 0);
}

static void listener_close(listener_t *l) {
  close(l->fd);
  if (l->dir[0] != '\0') {
    unlink(l->path);
    rmdir(l->dir);
  }
  unsetenv("NOTIFY_SOCKET");
}

/* The next datagram, whole, as a string; fails the test when none is waiting. */
static void receive(listener_t *l, char *buf, size_t cap) {
  ssize_t n = recv(l->fd, buf, cap - 1, 0);
  assert_true(n >= 0);
  buf[n] = '\0';
}

static void nothing_waiting(listener_t *l) {
  char buf[16];
  assert_int_equal(recv(l->fd, buf, sizeof(buf), 0), -1);
  assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
}

static void without_notify_socket_nothing_is_sent(void **state) {
  (void)state;
  unsetenv("NOTIFY_SOCKET");
  assert_int_equal(em_service_notify("READY=1"), 0);
  em_service_t s;
  em_service_init(&s);
  assert_int_equal(em_service_ready(&s, "up"), 0);
  assert_true(s.ready);
  assert_int_equal(em_service_notify(NULL), -EINVAL);
}

static void messages_reach_a_path_socket_whole(void **state) {
  (void)state;
  unsetenv("WATCHDOG_USEC");
  listener_t l;
  listen_path(&l);
  char buf[512];
  em_service_t s;
  em_service_init(&s);

  assert_int_equal(em_service_sampling(&s, "cam-7", 250000000u), 1);
  receive(&l, buf, sizeof(buf));
  assert_string_equal(buf, "READY=1\nSTATUS=device cam-7: sampling every 250 ms");
  assert_int_equal(em_service_ready(&s, "again"), 0); /* Once only. */
  nothing_waiting(&l);

  assert_int_equal(em_service_reloading(&s, 12345678901ull), 1);
  receive(&l, buf, sizeof(buf));
  assert_string_equal(buf, "RELOADING=1\nMONOTONIC_USEC=12345678");
  assert_int_equal(em_service_reloaded(&s, NULL), 1);
  receive(&l, buf, sizeof(buf));
  assert_string_equal(buf, "READY=1\nSTATUS=running");
  assert_int_equal(em_service_notifyf("STATUS=level %s since %s", "warn", "p99 of infer"), 1);
  receive(&l, buf, sizeof(buf));
  assert_string_equal(buf, "STATUS=level warn since p99 of infer");
  assert_int_equal(em_service_stopping(&s), 1);
  receive(&l, buf, sizeof(buf));
  assert_string_equal(buf, "STOPPING=1\nSTATUS=stopping");

  /* No watchdog in the environment: ticks send nothing. */
  assert_int_equal(em_service_tick(&s, 1000000000u, true), 0);
  nothing_waiting(&l);
  listener_close(&l);
}

static void an_abstract_socket_is_named_with_a_leading_at(void **state) {
  (void)state;
  listener_t l;
  listen_abstract(&l);
  char buf[256];
  assert_int_equal(em_service_notify("READY=1\nSTATUS=abstract"), 1);
  receive(&l, buf, sizeof(buf));
  assert_string_equal(buf, "READY=1\nSTATUS=abstract");
  /* The same name as a path is another socket, which nobody binds. */
  char path[160];
  snprintf(path, sizeof(path), "/%s", l.env + 1);
  assert_int_equal(setenv("NOTIFY_SOCKET", path, 1), 0);
  assert_true(em_service_notify("READY=1") < 0);
  nothing_waiting(&l);
  listener_close(&l);
}

static void names_systemd_refuses_are_einval(void **state) {
  (void)state;
  char longest_abstract[110];
  memset(longest_abstract, 'a', sizeof(longest_abstract) - 1);
  longest_abstract[0] = '@';
  longest_abstract[sizeof(longest_abstract) - 1] = '\0'; /* 109 bytes: past sun_path's 108. */
  char long_path[109];
  memset(long_path, 'p', sizeof(long_path) - 1);
  long_path[0] = '/';
  long_path[sizeof(long_path) - 1] = '\0'; /* 108 bytes: no room for the NUL. */
  const char *bad[] = {"", "@", "/", "relative/notify", "notify", longest_abstract, long_path};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    assert_int_equal(setenv("NOTIFY_SOCKET", bad[i], 1), 0);
    assert_int_equal(em_service_notify("READY=1"), -EINVAL);
  }
  unsetenv("NOTIFY_SOCKET");
}

static void nobody_listening_is_an_error_not_a_hang(void **state) {
  (void)state;
  assert_int_equal(setenv("NOTIFY_SOCKET", "/nonexistent-edgemon-dir/notify", 1), 0);
  assert_int_equal(em_service_notify("READY=1"), -ENOENT);
  /* A bound socket that was closed: the path is there, nobody reads it. */
  listener_t l;
  listen_path(&l);
  close(l.fd);
  l.fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  assert_int_equal(em_service_notify("READY=1"), -ECONNREFUSED);
  listener_close(&l);
}

static void a_full_queue_fails_at_once_with_eagain(void **state) {
  (void)state;
  listener_t l;
  listen_path(&l);
  /* Fill the receiver's queue; the sender does not block, the call reports it. */
  int rc = 1;
  int sent = 0;
  while (rc == 1 && sent < 100000) {
    rc = em_service_notify("WATCHDOG=1");
    sent += rc == 1;
  }
  assert_int_equal(rc, -EAGAIN);
  assert_true(sent > 0);
  char buf[64];
  receive(&l, buf, sizeof(buf));
  assert_string_equal(buf, "WATCHDOG=1");
  listener_close(&l);
}

static void a_message_too_long_is_not_sent(void **state) {
  (void)state;
  listener_t l;
  listen_path(&l);
  char big[EM_SERVICE_MESSAGE_BYTES];
  memset(big, 'x', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  assert_int_equal(em_service_notifyf("STATUS=%s", big), -EMSGSIZE);
  nothing_waiting(&l);
  assert_int_equal(em_service_notify(big), 1); /* Unformatted: sent as it is. */
  listener_close(&l);
}

/* WATCHDOG_USEC and WATCHDOG_PID as sd_watchdog_enabled(3) reads them. */
static void the_watchdog_follows_watchdog_usec_and_pid(void **state) {
  (void)state;
  char me[32];
  snprintf(me, sizeof(me), "%ld", (long)getpid());
  char other[32];
  snprintf(other, sizeof(other), "%ld", (long)getppid());
  static const struct {
    const char *usec;
    const char *pid; /* "me", "other" or a literal; NULL: unset. */
    int rc;
    uint64_t want;
  } rows[] = {
      {NULL, NULL, 0, 0},
      {"2000000", NULL, 1, 2000000},
      {"2000000", "me", 1, 2000000},
      {"2000000", "other", 0, 0},
      {"0", NULL, -EINVAL, 0},
      {"18446744073709551615", NULL, -EINVAL, 0}, /* infinity */
      {"18446744073709551616", NULL, -EINVAL, 0}, /* past 64 bits */
      {"", NULL, -EINVAL, 0},
      {"-5", NULL, -EINVAL, 0},
      {"5s", NULL, -EINVAL, 0},
      {"2000000", "0", -EINVAL, 0},
      {"2000000", "x1", -EINVAL, 0},
      {"2000000", "", -EINVAL, 0},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    if (rows[i].usec != NULL) {
      setenv("WATCHDOG_USEC", rows[i].usec, 1);
    } else {
      unsetenv("WATCHDOG_USEC");
    }
    const char *pid = rows[i].pid;
    if (pid != NULL && strcmp(pid, "me") == 0) {
      pid = me;
    } else if (pid != NULL && strcmp(pid, "other") == 0) {
      pid = other;
    }
    if (pid != NULL) {
      setenv("WATCHDOG_PID", pid, 1);
    } else {
      unsetenv("WATCHDOG_PID");
    }
    uint64_t usec = 7;
    int rc = em_service_watchdog_usec(&usec);
    if (rc != rows[i].rc) {
      fail_msg("row %zu (%s, %s): %d, want %d", i, rows[i].usec ? rows[i].usec : "unset",
               rows[i].pid ? rows[i].pid : "unset", rc, rows[i].rc);
    }
    assert_int_equal(usec, rows[i].rc == 1 ? rows[i].want : 7);
    em_service_t s;
    em_service_init(&s);
    assert_int_equal(s.watchdog_ns, rows[i].want * 1000u);
  }
  unsetenv("WATCHDOG_USEC");
  unsetenv("WATCHDOG_PID");
}

/* With the watchdog on: WATCHDOG=1 from on-time ticks, at most every quarter interval; late
 * ticks are withheld. With WATCHDOG_PID naming another process the same ticks send nothing. */
static void ticks_ping_only_when_the_watchdog_is_ours(void **state) {
  (void)state;
  listener_t l;
  listen_path(&l);
  char buf[64];
  setenv("WATCHDOG_USEC", "4000000", 1); /* 4 s: a ping at most every 1 s. */
  char me[32];
  snprintf(me, sizeof(me), "%ld", (long)getpid());
  setenv("WATCHDOG_PID", me, 1);
  em_service_t s;
  em_service_init(&s);
  assert_int_equal(s.watchdog_ns, 4000000000ull);
  assert_int_equal(em_service_tick(&s, 10000000000ull, true), 1);
  receive(&l, buf, sizeof(buf));
  assert_string_equal(buf, "WATCHDOG=1");
  assert_int_equal(em_service_tick(&s, 10500000000ull, true), 0);  /* Within the quarter. */
  assert_int_equal(em_service_tick(&s, 11200000000ull, false), 0); /* Late: withheld. */
  nothing_waiting(&l);
  assert_int_equal(em_service_tick(&s, 11300000000ull, true), 1);
  receive(&l, buf, sizeof(buf));
  assert_string_equal(buf, "WATCHDOG=1");
  assert_int_equal(s.pings, 2);
  assert_int_equal(s.withheld, 1);

  char other[32];
  snprintf(other, sizeof(other), "%ld", (long)getppid());
  setenv("WATCHDOG_PID", other, 1);
  em_service_init(&s);
  assert_int_equal(s.watchdog_ns, 0);
  assert_int_equal(em_service_tick(&s, 20000000000ull, true), 0);
  assert_int_equal(em_service_tick(&s, 30000000000ull, true), 0);
  nothing_waiting(&l);
  assert_int_equal(s.pings, 0);
  unsetenv("WATCHDOG_USEC");
  unsetenv("WATCHDOG_PID");
  listener_close(&l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(without_notify_socket_nothing_is_sent),
      cmocka_unit_test(messages_reach_a_path_socket_whole),
      cmocka_unit_test(an_abstract_socket_is_named_with_a_leading_at),
      cmocka_unit_test(names_systemd_refuses_are_einval),
      cmocka_unit_test(nobody_listening_is_an_error_not_a_hang),
      cmocka_unit_test(a_full_queue_fails_at_once_with_eagain),
      cmocka_unit_test(a_message_too_long_is_not_sent),
      cmocka_unit_test(the_watchdog_follows_watchdog_usec_and_pid),
      cmocka_unit_test(ticks_ping_only_when_the_watchdog_is_ours),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
