/*
 * test_signals.c - the state page and the push subscribers, with real files and real unix
 * datagram sockets: what a client maps is what was published, every subscriber gets the
 * push, gone subscribers are dropped (on a push, or by the probe a full table makes), full
 * ones never block the publisher, one process cannot take every slot.
 */
#define _GNU_SOURCE

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "signals.h"
#include "tmp_dir.h"
#include "unit_fx.h"
#include "tmp_tree.h"

typedef struct {
  char dir[64];
  char page[128];
  int tx; /* The agent side's socket (bound to <dir>/agent, as the span socket is). */
  struct sockaddr_un tx_addr;
  socklen_t tx_len;
} fx_t;

static int send_real(void *ctx, const struct sockaddr_un *addr, socklen_t len, const void *buf,
                     size_t n) {
  fx_t *fx = ctx;
  ssize_t w =
      sendto(fx->tx, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr *)addr, len);
  return w < 0 ? -errno : 0;
}

static int setup(void **state) {
  fx_t *fx = calloc(1, sizeof(*fx));
  assert_non_null(fx);
  em_tmp_dir_make(fx->dir, sizeof(fx->dir), "em-signals", fx->page, sizeof(fx->page), "state");
  fx->tx = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  assert_true(fx->tx >= 0);
  fx->tx_addr.sun_family = AF_UNIX;
  snprintf(fx->tx_addr.sun_path, sizeof(fx->tx_addr.sun_path), "%s/agent", fx->dir);
  fx->tx_len =
      (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(fx->tx_addr.sun_path) + 1);
  assert_int_equal(bind(fx->tx, (struct sockaddr *)&fx->tx_addr, fx->tx_len), 0);
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  fx_t *fx = *state;
  close(fx->tx);
  assert_int_equal(em_tmp_tree_remove(fx->dir), 0);
  free(fx);
  return 0;
}

static em_state_record_t record(em_level_t level, em_level_t prev, uint32_t changes) {
  em_state_record_t r = {.level = level,
                         .prev_level = prev,
                         .changes = changes,
                         .since_mono_ns = 1000u * changes,
                         .since_wall_ns = 2000u * changes,
                         .value = 52.5,
                         .bound = 40.0};
  snprintf(r.rule, sizeof(r.rule), "infer.p99");
  snprintf(r.stage, sizeof(r.stage), "infer");
  snprintf(r.reason, sizeof(r.reason), "infer p99 52.5 ms > 40 ms");
  return r;
}

/* Signals on fx's page for agent `pid`, started NOMINAL with no change yet, pushing for real. */
static em_signals_t *signals_nominal(fx_t *fx, uint32_t pid) {
  em_signals_t *s = NULL;
  em_state_record_t init = record(EM_LEVEL_NOMINAL, EM_LEVEL_NOMINAL, 0);
  assert_int_equal(em_signals_new(&s, fx->page, pid, &init, send_real, fx), 0);
  return s;
}

/* Maps the page file as a client does and reads it with the seqlock. */
static int client_read(const char *path, em_state_record_t *out, uint32_t *seq) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return -errno;
  }
  void *m = mmap(NULL, EM_STATE_PAGE_BYTES, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  assert_true(m != MAP_FAILED);
  int rc = em_state_page_read(m, out, seq);
  munmap(m, EM_STATE_PAGE_BYTES);
  return rc;
}

/* The record on fx's page as a client reads it, which must be at sequence want_seq and level
 * want_level (the sequence read over a different starting value). */
static em_state_record_t page_record(const fx_t *fx, uint32_t want_seq, em_level_t want_level) {
  em_state_record_t got;
  uint32_t seq = want_seq + 1;
  assert_int_equal(client_read(fx->page, &got, &seq), 0);
  assert_int_equal(seq, want_seq);
  assert_int_equal(got.level, want_level);
  return got;
}

/* A client socket bound to <dir>/<name>, as a subscriber would be. */
static int client_socket(fx_t *fx, const char *name, struct sockaddr_un *addr, socklen_t *len) {
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  snprintf(addr->sun_path, sizeof(addr->sun_path), "%s/%s", fx->dir, name);
  *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(addr->sun_path) + 1);
  assert_int_equal(bind(fd, (struct sockaddr *)addr, *len), 0);
  return fd;
}

/* A client as the Python one makes it: an autobound (abstract) address, connected to the
 * agent's socket, so only the agent may send to it. */
static int autobound_client(fx_t *fx, struct sockaddr_un *addr, socklen_t *len) {
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_un any = {.sun_family = AF_UNIX};
  assert_int_equal(bind(fd, (struct sockaddr *)&any, sizeof(sa_family_t)), 0);
  assert_int_equal(connect(fd, (struct sockaddr *)&fx->tx_addr, fx->tx_len), 0);
  *len = sizeof(*addr);
  assert_int_equal(getsockname(fd, (struct sockaddr *)addr, len), 0);
  return fd;
}

/* A subscriber's socket and the address it subscribes with. */
typedef struct {
  int fd;
  struct sockaddr_un addr;
  socklen_t len;
} client_t;

/* A client subscribed to s for process pid: bound to <dir>/<name>, or autobound when name is
 * NULL; the subscription must succeed. */
static client_t subscribed(fx_t *fx, em_signals_t *s, const char *name, uint32_t pid) {
  client_t c;
  c.fd = name ? client_socket(fx, name, &c.addr, &c.len) : autobound_client(fx, &c.addr, &c.len);
  assert_int_equal(em_signals_subscribe(s, true, &c.addr, c.len, pid), 0);
  return c;
}

static void page_is_created_whole_with_the_initial_record(void **state) {
  fx_t *fx = *state;
  em_signals_t *s = signals_nominal(fx, 4242);
  struct stat st;
  assert_int_equal(stat(fx->page, &st), 0);
  assert_int_equal(st.st_size, EM_STATE_PAGE_BYTES);
  assert_int_equal(st.st_mode & 0777, 0644);
  char tmp[160];
  snprintf(tmp, sizeof(tmp), "%s.tmp", fx->page);
  assert_int_equal(access(tmp, F_OK), -1);
  assert_string_equal(page_record(fx, 0, EM_LEVEL_NOMINAL).rule, "infer.p99");
  em_signals_free(s, true);
  assert_int_equal(access(fx->page, F_OK), -1);
}

static void publish_updates_the_page_and_pushes_to_every_subscriber(void **state) {
  fx_t *fx = *state;
  em_signals_t *s = signals_nominal(fx, 4242);
  client_t c1 = subscribed(fx, s, "c1", 100), c2 = subscribed(fx, s, "c2", 100);
  assert_int_equal(em_signals_subscribe(s, true, &c2.addr, c2.len, 100), 0); /* once only */
  assert_int_equal(em_signals_subscribers(s), 2);

  em_state_record_t deg = record(EM_LEVEL_DEGRADED, EM_LEVEL_NOMINAL, 1);
  assert_int_equal(em_signals_publish(s, &deg), 0);
  assert_int_equal(page_record(fx, 2, EM_LEVEL_DEGRADED).changes, 1);
  for (int i = 0; i < 2; i++) {
    uint8_t buf[512];
    ssize_t n = recv(i ? c2.fd : c1.fd, buf, sizeof(buf), MSG_DONTWAIT);
    assert_int_equal(n, EM_PUSH_DGRAM_BYTES);
    em_state_record_t push;
    uint32_t pid = 0;
    assert_int_equal(em_push_unpack(buf, (size_t)n, &push, &pid), 0);
    assert_int_equal(pid, 4242);
    assert_int_equal(push.level, EM_LEVEL_DEGRADED);
    assert_int_equal(push.prev_level, EM_LEVEL_NOMINAL);
    assert_true(fabs(push.value - 52.5) < 1e-9);
    assert_string_equal(push.reason, deg.reason);
  }
  assert_int_equal(em_signals_stats(s)->pushes, 2);
  assert_int_equal(em_signals_subscribe(s, false, &c1.addr, c1.len, 100), 0);
  assert_int_equal(em_signals_subscribers(s), 1);
  close(c1.fd);
  close(c2.fd);
  em_signals_free(s, true);
}

static void gone_subscribers_are_dropped_and_full_ones_never_block(void **state) {
  fx_t *fx = *state;
  em_signals_t *s = signals_nominal(fx, 1);
  client_t gone = subscribed(fx, s, "gone", 100), full = subscribed(fx, s, "full", 101);
  close(gone.fd);
  unlink(gone.addr.sun_path);           /* The client exited. */
  for (uint32_t i = 1; i <= 200; i++) { /* The full one never reads. */
    em_state_record_t r = record(i % 2 ? EM_LEVEL_WARN : EM_LEVEL_NOMINAL,
                                 i % 2 ? EM_LEVEL_NOMINAL : EM_LEVEL_WARN, i);
    assert_int_equal(em_signals_publish(s, &r), 0);
  }
  const em_signals_stats_t *st = em_signals_stats(s);
  assert_int_equal(st->dropped, 1);
  assert_int_equal(em_signals_subscribers(s), 1);
  assert_true(st->push_full > 0);
  assert_int_equal(st->pushes + st->push_full, 200);
  close(full.fd);
  em_signals_free(s, true);
}

/* Whether fd has a push waiting: the level it carries, or -1. */
static int push_level(int fd) {
  uint8_t buf[512];
  ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
  em_state_record_t push;
  uint32_t pid = 0;
  if (n != EM_PUSH_DGRAM_BYTES || em_push_unpack(buf, (size_t)n, &push, &pid) != 0) {
    return -1;
  }
  return (int)push.level;
}

static void unnamed_or_excess_live_subscribers_are_refused(void **state) {
  fx_t *fx = *state;
  em_signals_t *s = signals_nominal(fx, 1);
  struct sockaddr_un unnamed = {.sun_family = AF_UNIX};
  assert_int_equal(em_signals_subscribe(s, true, &unnamed, sizeof(sa_family_t), 5), -EINVAL);
  int fds[EM_SIGNALS_MAX_SUBSCRIBERS + 1];
  for (int i = 0; i < EM_SIGNALS_MAX_SUBSCRIBERS + 1; i++) {
    struct sockaddr_un a;
    socklen_t len;
    fds[i] = autobound_client(fx, &a, &len);
    assert_int_equal(em_signals_subscribe(s, true, &a, len, (uint32_t)(1000 + i)),
                     i < EM_SIGNALS_MAX_SUBSCRIBERS ? 0 : -ENOSPC);
  }
  const em_signals_stats_t *st = em_signals_stats(s);
  assert_int_equal(st->refused, 2);
  assert_int_equal(st->reaped, 0); /* All alive: the probe took none. */
  assert_int_equal(em_signals_subscribers(s), EM_SIGNALS_MAX_SUBSCRIBERS);
  em_state_record_t warn = record(EM_LEVEL_WARN, EM_LEVEL_NOMINAL, 1);
  assert_int_equal(em_signals_publish(s, &warn), 0);
  for (int i = 0; i < EM_SIGNALS_MAX_SUBSCRIBERS + 1; i++) {
    assert_int_equal(push_level(fds[i]), i < EM_SIGNALS_MAX_SUBSCRIBERS ? EM_LEVEL_WARN : -1);
    close(fds[i]);
  }
  em_signals_free(s, true);
}

/* 300 clients subscribe and close their sockets; the table never stays full of them: a new
 * subscriber gets a slot and its push, and the live ones among them keep theirs. */
static void dead_subscribers_give_their_slots_to_new_ones(void **state) {
  fx_t *fx = *state;
  em_signals_t *s = signals_nominal(fx, 1);
  int live[5];
  for (int i = 0; i < 5; i++) {
    live[i] = subscribed(fx, s, NULL, (uint32_t)(500 + i)).fd;
  }
  for (int i = 0; i < 300; i++) {
    char name[16];
    snprintf(name, sizeof(name), "dead%d", i);
    client_t c = subscribed(fx, s, i % 2 ? NULL : name, (uint32_t)(2000 + i));
    close(c.fd);
    if (i % 2 == 0) {
      unlink(c.addr.sun_path); /* A pathname client that removed its file: ENOENT. */
    }
  }
  const em_signals_stats_t *st = em_signals_stats(s);
  assert_int_equal(st->refused, 0);
  assert_true(st->reaped >= 300 - EM_SIGNALS_MAX_SUBSCRIBERS + 5);
  assert_true(em_signals_subscribers(s) <= EM_SIGNALS_MAX_SUBSCRIBERS);

  int fresh = subscribed(fx, s, NULL, 4242).fd;
  em_state_record_t crit = record(EM_LEVEL_CRITICAL, EM_LEVEL_NOMINAL, 1);
  assert_int_equal(em_signals_publish(s, &crit), 0);
  assert_int_equal(push_level(fresh), EM_LEVEL_CRITICAL);
  for (int i = 0; i < 5; i++) {
    assert_int_equal(push_level(live[i]), EM_LEVEL_CRITICAL);
    close(live[i]);
  }
  /* The push found the remaining dead ones gone and dropped them. */
  assert_int_equal(em_signals_subscribers(s), 6);
  assert_int_equal(st->pushes, 6);
  close(fresh);
  em_signals_free(s, true);
}

/* One process holds at most EM_SIGNALS_MAX_PER_PID subscribers; others still get theirs. */
static void one_process_cannot_take_every_slot(void **state) {
  fx_t *fx = *state;
  em_signals_t *s = signals_nominal(fx, 1);
  int fds[EM_SIGNALS_MAX_PER_PID];
  for (int i = 0; i < EM_SIGNALS_MAX_PER_PID; i++) {
    fds[i] = subscribed(fx, s, NULL, 77).fd;
  }
  struct sockaddr_un a;
  socklen_t len;
  int extra = autobound_client(fx, &a, &len);
  assert_int_equal(em_signals_subscribe(s, true, &a, len, 77), -EDQUOT);
  assert_int_equal(em_signals_stats(s)->refused_pid, 1);
  int other = subscribed(fx, s, NULL, 78).fd;
  close(fds[3]); /* One of pid 77's goes away: its slot is reaped for the next request. */
  assert_int_equal(em_signals_subscribe(s, true, &a, len, 77), 0);
  assert_int_equal(em_signals_stats(s)->reaped, 1);
  assert_int_equal(em_signals_subscribers(s), EM_SIGNALS_MAX_PER_PID + 1);
  for (int i = 0; i < EM_SIGNALS_MAX_PER_PID; i++) {
    if (i != 3) {
      close(fds[i]);
    }
  }
  close(extra);
  close(other);
  em_signals_free(s, true);
}

static void a_bad_record_publishes_nothing(void **state) {
  fx_t *fx = *state;
  em_signals_t *s = NULL;
  em_state_record_t init = record(EM_LEVEL_WARN, EM_LEVEL_NOMINAL, 3);
  assert_int_equal(em_signals_new(&s, fx->page, 1, &init, send_real, fx), 0);
  em_state_record_t bad = record((em_level_t)7, EM_LEVEL_NOMINAL, 4);
  assert_true(em_signals_publish(s, &bad) < 0);
  assert_int_equal(page_record(fx, 0, EM_LEVEL_WARN).changes, 3);
  em_signals_free(s, false);
  assert_int_equal(access(fx->page, F_OK), 0); /* kept when not asked to remove */
}

static void a_missing_directory_is_an_error(void **state) {
  fx_t *fx = *state;
  char path[160];
  snprintf(path, sizeof(path), "%s/missing/state", fx->dir);
  em_signals_t *s = NULL;
  em_state_record_t init = record(EM_LEVEL_NOMINAL, EM_LEVEL_NOMINAL, 0);
  assert_int_equal(em_signals_new(&s, path, 1, &init, send_real, fx), -ENOENT);
  assert_null(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      EM_FX(page_is_created_whole_with_the_initial_record),
      EM_FX(publish_updates_the_page_and_pushes_to_every_subscriber),
      EM_FX(gone_subscribers_are_dropped_and_full_ones_never_block),
      EM_FX(unnamed_or_excess_live_subscribers_are_refused),
      EM_FX(dead_subscribers_give_their_slots_to_new_ones),
      EM_FX(one_process_cannot_take_every_slot),
      EM_FX(a_bad_record_publishes_nothing),
      EM_FX(a_missing_directory_is_an_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
