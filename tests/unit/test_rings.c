/*
 * test_rings.c - span rings v2 in the agent, on a real libuv loop with a real span socket:
 * real sealed memfds written with em_ring_write are registered over the socket with
 * SCM_RIGHTS and answered with an ack; each registration check refuses what it must (allow
 * lists, seals, size, pid, start time, caps); the drain folds ring spans into the stage table
 * one tick late and all of them when the ring closes; descriptors sent on any other datagram
 * are closed; a hard miss reaches its hook without entering the window.
 */
#define _GNU_SOURCE

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rings.h"
#include "span_client.h"
#include "spans.h"
#include "unit_fx.h"

typedef struct {
  char dir[64];
  char sock[96];
  uv_loop_t loop;
  em_spans_t *spans;
  em_rings_t *rings;
  int client; /* Autobound datagram socket connected to the span socket. */
  unsigned hard_misses;
  unsigned closed;
} fx_t;

static void on_register(void *ctx, const em_ring_dgram_t *reg, int fd, bool allowed,
                        const struct ucred *sender, const struct sockaddr_un *from,
                        socklen_t from_len) {
  fx_t *fx = ctx;
  em_rings_register(fx->rings, reg, fd, allowed, sender, from, from_len);
}

static void on_hard_miss(void *ctx, const em_span_t *span, const struct ucred *sender,
                         em_stage_stats_t *stage) {
  (void)span;
  (void)sender;
  (void)stage;
  ((fx_t *)ctx)->hard_misses++;
}

static void on_closed(void *ctx) {
  ((fx_t *)ctx)->closed++;
}

static void start_with(fx_t *fx, uint32_t max_rings, uint32_t per_process, const uint32_t *uids,
                       size_t n_uids, bool no_pidfd) {
  em_spans_opts_t so = {.path = fx->sock,
                        .mode = 0600,
                        .gid = -1,
                        .allow_uids = uids,
                        .n_allow_uids = n_uids,
                        .max_stages = 8,
                        .stage_idle_ns = 0,
                        .on_register = on_register,
                        .on_hard_miss = on_hard_miss,
                        .ctx = fx};
  assert_int_equal(em_spans_new(&fx->spans, &fx->loop, &so), 0);
  em_rings_opts_t ro = {
      .max_rings = max_rings, .max_per_process = per_process, .no_pidfd = no_pidfd};
  assert_int_equal(em_rings_new(&fx->rings, &fx->loop, fx->spans, &ro), 0);
  fx->client = span_client_connect(fx->sock);
}

static void start(fx_t *fx, uint32_t max_rings, uint32_t per_process, const uint32_t *uids,
                  size_t n_uids) {
  start_with(fx, max_rings, per_process, uids, n_uids, false);
}

static int setup(void **state) {
  fx_t *fx = calloc(1, sizeof(*fx));
  assert_non_null(fx);
  span_client_begin("em-rings", fx->dir, sizeof(fx->dir), fx->sock, sizeof(fx->sock), &fx->loop);
  fx->client = -1;
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  fx_t *fx = *state;
  unsigned open = 0;
  if (fx->rings) {
    em_rings_close(fx->rings, on_closed, fx);
    open++;
  }
  if (fx->spans) {
    em_spans_close(fx->spans, on_closed, fx);
    open++;
  }
  uv_run(&fx->loop, UV_RUN_DEFAULT);
  assert_int_equal(fx->closed, open);
  em_rings_free(fx->rings);
  em_spans_free(fx->spans);
  span_client_finish(fx->client, &fx->loop, fx->dir);
  free(fx);
  return 0;
}

/* Field 22 of /proc/<what>/stat. */
static uint64_t start_time_of(const char *what) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%s/stat", what);
  char buf[1024];
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')') + 2;
  for (int field = 3; field < 22; field++) {
    p = strchr(p, ' ') + 1;
  }
  return strtoull(p, NULL, 10);
}

static uint64_t my_start_time(void) {
  return start_time_of("self");
}

/*
 * True when a process reads its own start time as others read it. Under qemu-user a process's
 * own /proc/self/stat is emulated and need not agree with what another process reads for its
 * pid: a ring writer's header then cannot match, so the writer tests cannot run there.
 */
static bool own_stat_agrees_with_others(void) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    uint64_t mine = my_start_time();
    ssize_t w = write(fds[1], &mine, sizeof(mine));
    if (w == (ssize_t)sizeof(mine)) {
      pause(); /* Alive until the parent has read its stat and kills it. */
    }
    _exit(1);
  }
  uint64_t childs = 0;
  assert_int_equal(read(fds[0], &childs, sizeof(childs)), (ssize_t)sizeof(childs));
  char pidtext[32];
  snprintf(pidtext, sizeof(pidtext), "%d", (int)pid);
  uint64_t seen = start_time_of(pidtext);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  close(fds[0]);
  close(fds[1]);
  return childs == seen;
}

static size_t open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  assert_non_null(d);
  size_t n = 0;
  while (readdir(d)) {
    n++;
  }
  closedir(d);
  return n;
}

typedef struct {
  int fd;
  void *mem;
  size_t len;
  uint32_t slots;
  uint64_t pos;
} ring_fx_t;

/* A ring of `slots` slots in a memfd of len + extra bytes, its header naming pid and
 * start_time, sealed when `seal`. */
static ring_fx_t make_ring(uint32_t slots, uint32_t pid, uint64_t start_time, bool seal,
                           size_t extra) {
  ring_fx_t r = {.slots = slots, .len = em_ring_bytes(slots) + extra};
  r.fd = memfd_create("em-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  assert_true(r.fd >= 0);
  assert_int_equal(ftruncate(r.fd, (off_t)r.len), 0);
  r.mem = mmap(NULL, r.len, PROT_READ | PROT_WRITE, MAP_SHARED, r.fd, 0);
  assert_true(r.mem != MAP_FAILED);
  assert_int_equal(em_ring_init(r.mem, slots, pid, (uint32_t)gettid(), start_time), 0);
  if (seal) {
    assert_int_equal(fcntl(r.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
  }
  return r;
}

static ring_fx_t my_ring(void) {
  return make_ring(64, (uint32_t)getpid(), my_start_time(), true, 0);
}

static void free_ring(ring_fx_t *r) {
  munmap(r->mem, r->len);
  close(r->fd);
}

/* n spans (1000 ns to 6000 ns) or heartbeats (at 9000 ns) of `stage`. */
static void write_spans(ring_fx_t *r, const char *stage, unsigned n, uint8_t kind) {
  for (unsigned i = 0; i < n; i++) {
    em_span_t s = {.kind = kind,
                   .frame_id = r->pos + 1,
                   .start_ns = kind == EM_DGRAM_SPAN ? 1000 : 9000,
                   .duration_ns = kind == EM_DGRAM_SPAN ? 5000 : 0};
    snprintf(s.stage, sizeof(s.stage), "%s", stage);
    assert_int_equal(em_ring_write(r->mem, r->slots, &r->pos, &s), 0);
  }
}

/* Sends buf with `fd` attached (-1: none), running the loop while the socket's queue is full. */
static void send_with_fd(fx_t *fx, const uint8_t *buf, size_t len, int fd) {
  for (int tries = 0; tries < 10000; tries++) {
    if (span_client_send(fx->client, buf, len, &fd, fd >= 0 ? 1 : 0) == (ssize_t)len) {
      return;
    }
    assert_int_equal(errno, EAGAIN);
    uv_run(&fx->loop, UV_RUN_NOWAIT);
  }
  fail_msg("the span socket never drained");
}

/* Registers ring r from position start; runs the loop until the ack; returns its status. */
static int64_t register_ring(fx_t *fx, int fd, uint64_t start, uint64_t *ring_id) {
  em_ring_dgram_t reg = {.kind = EM_DGRAM_RING_REGISTER, .pid = (uint32_t)getpid(), .start = start};
  uint8_t buf[EM_SPAN_DGRAM_BYTES];
  assert_int_equal(em_ring_dgram_pack(&reg, buf), 0);
  send_with_fd(fx, buf, sizeof(buf), fd);
  for (int tries = 0; tries < 20000; tries++) {
    uv_run(&fx->loop, UV_RUN_NOWAIT);
    uint8_t in[EM_SPAN_DGRAM_BYTES + 1];
    ssize_t n = recv(fx->client, in, sizeof(in), MSG_DONTWAIT);
    if (n < 0) {
      assert_int_equal(errno, EAGAIN);
      usleep(100);
      continue;
    }
    em_ring_dgram_t ack;
    assert_int_equal(em_ring_dgram_unpack(in, (size_t)n, &ack), 0);
    assert_int_equal(ack.kind, EM_DGRAM_RING_ACK);
    assert_int_equal(ack.pid, (uint32_t)getpid());
    assert_int_equal(ack.start, start);
    if (ring_id) {
      *ring_id = ack.ring_id;
    }
    return ack.status;
  }
  fail_msg("no ack");
  return 1;
}

static void a_sealed_ring_is_accepted_and_acked(void **state) {
  fx_t *fx = *state;
  start(fx, 4, 4, NULL, 0);
  ring_fx_t r = my_ring();
  uint64_t id = 0;
  assert_int_equal(register_ring(fx, r.fd, 7, &id), 0);
  assert_true(id > 0);
  assert_int_equal(em_rings_active(fx->rings), 1);
  assert_int_equal(em_rings_stats(fx->rings)->accepted, 1);
  assert_int_equal(em_rings_stats(fx->rings)->refused, 0);
  free_ring(&r);
}

static void an_unsealed_memfd_is_refused_and_closed(void **state) {
  fx_t *fx = *state;
  start(fx, 4, 4, NULL, 0);
  ring_fx_t r = make_ring(64, (uint32_t)getpid(), my_start_time(), false, 0);
  size_t before = open_fds();
  assert_int_equal(register_ring(fx, r.fd, 0, NULL), -EINVAL);
  assert_int_equal(open_fds(), before); /* The agent's copy of the descriptor is closed. */
  assert_int_equal(em_rings_active(fx->rings), 0);
  assert_int_equal(em_rings_stats(fx->rings)->refused, 1);
  free_ring(&r);
}

static void a_size_other_than_the_headers_is_refused(void **state) {
  fx_t *fx = *state;
  start(fx, 4, 4, NULL, 0);
  ring_fx_t r = make_ring(64, (uint32_t)getpid(), my_start_time(), true, 4096);
  assert_int_equal(register_ring(fx, r.fd, 0, NULL), -EINVAL);
  assert_int_equal(em_rings_active(fx->rings), 0);
  free_ring(&r);
}

static void a_header_naming_another_process_is_refused(void **state) {
  fx_t *fx = *state;
  start(fx, 4, 4, NULL, 0);
  ring_fx_t other_pid = make_ring(64, (uint32_t)getpid() + 1, my_start_time(), true, 0);
  assert_int_equal(register_ring(fx, other_pid.fd, 0, NULL), -EINVAL);
  ring_fx_t other_start = make_ring(64, (uint32_t)getpid(), my_start_time() + 1, true, 0);
  assert_int_equal(register_ring(fx, other_start.fd, 0, NULL), -EINVAL); /* A reused pid. */
  assert_int_equal(em_rings_stats(fx->rings)->refused, 2);
  assert_int_equal(em_rings_active(fx->rings), 0);
  free_ring(&other_pid);
  free_ring(&other_start);
}

static void a_register_without_a_descriptor_is_refused(void **state) {
  fx_t *fx = *state;
  start(fx, 4, 4, NULL, 0);
  assert_int_equal(register_ring(fx, -1, 0, NULL), -EINVAL);
  assert_int_equal(em_rings_stats(fx->rings)->refused, 1);
}

static void a_sender_outside_the_allow_lists_is_refused(void **state) {
  fx_t *fx = *state;
  uint32_t someone_else = (uint32_t)getuid() + 1;
  start(fx, 4, 4, &someone_else, 1);
  ring_fx_t r = my_ring();
  size_t before = open_fds();
  assert_int_equal(register_ring(fx, r.fd, 0, NULL), -EPERM);
  assert_int_equal(open_fds(), before);
  assert_int_equal(em_rings_stats(fx->rings)->refused, 1);
  free_ring(&r);
}

static void the_caps_refuse_per_process_then_in_all(void **state) {
  fx_t *fx = *state;
  start(fx, 3, 2, NULL, 0);
  ring_fx_t r[4];
  for (int i = 0; i < 4; i++) {
    r[i] = my_ring();
  }
  assert_int_equal(register_ring(fx, r[0].fd, 0, NULL), 0);
  assert_int_equal(register_ring(fx, r[1].fd, 0, NULL), 0);
  assert_int_equal(register_ring(fx, r[2].fd, 0, NULL), -EMFILE); /* 2 per process */
  assert_int_equal(em_rings_active(fx->rings), 2);
  em_rings_close(fx->rings, on_closed, fx);
  while (fx->closed < 1) {
    uv_run(&fx->loop, UV_RUN_ONCE);
  }
  em_rings_free(fx->rings);
  fx->rings = NULL;
  fx->closed = 0;
  em_rings_opts_t ro = {.max_rings = 1, .max_per_process = 4};
  assert_int_equal(em_rings_new(&fx->rings, &fx->loop, fx->spans, &ro), 0);
  assert_int_equal(register_ring(fx, r[3].fd, 0, NULL), 0);
  assert_int_equal(register_ring(fx, r[2].fd, 0, NULL), -ENOSPC); /* 1 in all */
  for (int i = 0; i < 4; i++) {
    free_ring(&r[i]);
  }
}

static void the_drain_folds_ring_spans_one_tick_late(void **state) {
  fx_t *fx = *state;
  start(fx, 4, 4, NULL, 0);
  ring_fx_t r = my_ring();
  write_spans(&r, "infer", 3, EM_DGRAM_SPAN); /* Before registration: not read. */
  assert_int_equal(register_ring(fx, r.fd, r.pos, NULL), 0);
  write_spans(&r, "infer", 10, EM_DGRAM_SPAN);
  write_spans(&r, "infer", 2, EM_DGRAM_HEARTBEAT);
  em_rings_drain(fx->rings, 1000000000u); /* Sees the head; consumes nothing yet. */
  assert_null(span_stage_named(fx->spans, "infer"));
  em_rings_drain(fx->rings, 1000000000u);
  em_stage_stats_t *st = span_stage_named(fx->spans, "infer");
  assert_non_null(st);
  assert_int_equal(st->total, 10);
  assert_int_equal(st->window.count, 10);
  assert_int_equal(st->last_seen_ns, 9000);   /* The last heartbeat, not the drain's time. */
  write_spans(&r, "infer", 1, EM_DGRAM_SPAN); /* Ends at 6000: older than the heartbeats. */
  em_rings_drain(fx->rings, 1000000000u);
  em_rings_drain(fx->rings, 1000000000u);
  assert_int_equal(st->total, 11);
  assert_int_equal(st->last_seen_ns, 9000); /* Never moved back. */
  assert_int_equal(em_rings_stats(fx->rings)->spans, 11);
  assert_int_equal(em_spans_counts(fx->spans)->datagram_spans, 0);
  free_ring(&r);
}

typedef struct {
  unsigned spans;
  uint32_t pid, tid;
  char stage[EM_STAGE_FIELD_BYTES];
} observed_t;

static void observe(void *ctx, uint32_t pid, uint32_t tid, const em_span_t *span) {
  observed_t *o = ctx;
  o->spans++;
  o->pid = pid;
  o->tid = tid;
  snprintf(o->stage, sizeof(o->stage), "%s", span->stage);
}

static void the_observer_hears_each_span_with_its_writer_thread(void **state) {
  fx_t *fx = *state;
  start(fx, 4, 4, NULL, 0);
  observed_t o = {0};
  em_rings_observe(fx->rings, observe, &o);
  ring_fx_t r = my_ring(); /* Its header names this thread. */
  assert_int_equal(register_ring(fx, r.fd, 0, NULL), 0);
  write_spans(&r, "infer", 3, EM_DGRAM_SPAN);
  write_spans(&r, "infer", 2, EM_DGRAM_HEARTBEAT); /* Heartbeats are not spans. */
  em_rings_drain(fx->rings, 1000000000u);
  em_rings_drain(fx->rings, 1000000000u);
  assert_int_equal(o.spans, 3);
  assert_int_equal(o.pid, (uint32_t)getpid());
  assert_int_equal(o.tid, (uint32_t)gettid());
  assert_string_equal(o.stage, "infer");

  /* A header naming a thread that is not the writer's: its spans come with tid 0. */
  ring_fx_t bad = my_ring();
  em_ring_header_t h;
  assert_int_equal(em_ring_header_read(bad.mem, bad.len, &h), 0);
  ((uint32_t *)bad.mem)[5] = 0x7ffffff0u; /* The tid field, offset 20. */
  assert_int_equal(register_ring(fx, bad.fd, 0, NULL), 0);
  write_spans(&bad, "pre", 2, EM_DGRAM_SPAN);
  em_rings_drain(fx->rings, 1000000000u);
  em_rings_drain(fx->rings, 1000000000u);
  assert_int_equal(o.spans, 5);
  assert_int_equal(o.tid, 0);
  assert_string_equal(o.stage, "pre");

  em_rings_observe(fx->rings, NULL, NULL);
  write_spans(&r, "infer", 1, EM_DGRAM_SPAN);
  em_rings_drain(fx->rings, 1000000000u);
  em_rings_drain(fx->rings, 1000000000u);
  assert_int_equal(o.spans, 5); /* Cleared: nothing heard. */
  free_ring(&r);
  free_ring(&bad);
}

static void a_closed_ring_is_drained_to_its_head_and_dropped(void **state) {
  fx_t *fx = *state;
  start(fx, 4, 4, NULL, 0);
  ring_fx_t r = my_ring();
  assert_int_equal(register_ring(fx, r.fd, 0, NULL), 0);
  write_spans(&r, "pre", 100, EM_DGRAM_SPAN); /* More than the 64 slots: 36 overwritten. */
  em_ring_close(r.mem);
  em_rings_drain(fx->rings, 2000000000u);
  const em_rings_stats_t *s = em_rings_stats(fx->rings);
  assert_int_equal(s->spans, 64);
  assert_int_equal(s->overwritten, 36);
  assert_int_equal(s->spans + s->overwritten + s->bad_slot, 100);
  assert_int_equal(em_rings_active(fx->rings), 0);
  assert_int_equal(span_stage_named(fx->spans, "pre")->total, 64);
  free_ring(&r);
}

static void descriptors_on_other_datagrams_are_closed(void **state) {
  fx_t *fx = *state;
  start(fx, 4, 4, NULL, 0);
  ring_fx_t r = my_ring();
  em_span_t s = {.kind = EM_DGRAM_SPAN, .frame_id = 1, .start_ns = 1, .duration_ns = 2};
  snprintf(s.stage, sizeof(s.stage), "flood");
  uint8_t span[EM_SPAN_DGRAM_BYTES];
  assert_int_equal(em_span_pack(&s, span), 0);
  uint8_t junk[EM_SPAN_DGRAM_BYTES + 7] = {0};
  em_ring_dgram_t miss = {.kind = EM_DGRAM_HARD_MISS, .pid = (uint32_t)getpid(), .span = s};
  uint8_t missbuf[EM_SPAN_DGRAM_BYTES];
  assert_int_equal(em_ring_dgram_pack(&miss, missbuf), 0);
  size_t before = open_fds();
  for (int i = 0; i < 300; i++) {
    if (i % 3 == 0) {
      send_with_fd(fx, span, sizeof(span), r.fd); /* A v1 span. */
    } else if (i % 3 == 1) {
      send_with_fd(fx, junk, sizeof(junk), r.fd); /* Oversized. */
    } else {
      send_with_fd(fx, missbuf, sizeof(missbuf), r.fd); /* A v2 hard miss. */
    }
  }
  for (int i = 0; i < 1000 && em_spans_counts(fx->spans)->fds_closed < 300; i++) {
    uv_run(&fx->loop, UV_RUN_NOWAIT);
  }
  assert_int_equal(em_spans_counts(fx->spans)->fds_closed, 300);
  assert_int_equal(open_fds(), before);
  assert_int_equal(em_spans_counts(fx->spans)->datagram_spans, 100);
  assert_int_equal(fx->hard_misses, 100);
  free_ring(&r);
}

static void a_hard_miss_reaches_its_hook_without_entering_the_window(void **state) {
  fx_t *fx = *state;
  start(fx, 4, 4, NULL, 0);
  em_ring_dgram_t miss = {.kind = EM_DGRAM_HARD_MISS, .pid = (uint32_t)getpid()};
  miss.span =
      (em_span_t){.kind = EM_DGRAM_SPAN, .frame_id = 3, .start_ns = 1, .duration_ns = 90000000};
  snprintf(miss.span.stage, sizeof(miss.span.stage), "infer");
  uint8_t buf[EM_SPAN_DGRAM_BYTES];
  assert_int_equal(em_ring_dgram_pack(&miss, buf), 0);
  send_with_fd(fx, buf, sizeof(buf), -1);
  for (int i = 0; i < 1000 && fx->hard_misses == 0; i++) {
    uv_run(&fx->loop, UV_RUN_NOWAIT);
    usleep(100);
  }
  assert_int_equal(fx->hard_misses, 1);
  em_stage_stats_t *st = span_stage_named(fx->spans, "infer");
  assert_non_null(st);
  assert_int_equal(st->total, 0);
  assert_int_equal(st->window.count, 0);
}

/*
 * The writer process of the exit tests (plain code, no cmocka: it runs in a child): makes a
 * 64-slot ring, registers it from its own socket, waits for the ack, writes n spans of
 * "child" and exits without closing the ring. Exit status: 0, or which step failed.
 */
static void child_writes_and_exits(const char *sock, unsigned n) {
  int c = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un me = {.sun_family = AF_UNIX};
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
  if (c < 0 || bind(c, (struct sockaddr *)&me, sizeof(sa_family_t)) != 0 ||
      connect(c, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    _exit(10);
  }
  size_t len = em_ring_bytes(64);
  int fd = memfd_create("em-ring-child", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  void *mem = MAP_FAILED;
  if (fd >= 0 && ftruncate(fd, (off_t)len) == 0) {
    mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (mem == MAP_FAILED ||
      em_ring_init(mem, 64, (uint32_t)getpid(), (uint32_t)gettid(), my_start_time()) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    _exit(11);
  }
  em_ring_dgram_t reg = {.kind = EM_DGRAM_RING_REGISTER, .pid = (uint32_t)getpid()};
  uint8_t buf[EM_SPAN_DGRAM_BYTES];
  _Alignas(struct cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))];
  struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
  struct msghdr m = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl, .msg_controllen = sizeof(ctrl)};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &fd, sizeof(int));
  struct timeval tv = {.tv_sec = 10};
  setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  em_ring_dgram_t ack;
  if (em_ring_dgram_pack(&reg, buf) != 0 || sendmsg(c, &m, 0) != (ssize_t)sizeof(buf) ||
      recv(c, buf, sizeof(buf), 0) != (ssize_t)sizeof(buf) ||
      em_ring_dgram_unpack(buf, sizeof(buf), &ack) != 0 || ack.status != 0) {
    _exit(12);
  }
  uint64_t pos = 0;
  for (unsigned i = 0; i < n; i++) {
    em_span_t sp = {.kind = EM_DGRAM_SPAN, .frame_id = i + 1, .start_ns = 1, .duration_ns = 2};
    snprintf(sp.stage, sizeof(sp.stage), "child");
    if (em_ring_write(mem, 64, &pos, &sp) != 0) {
      _exit(13);
    }
  }
  _exit(0);
}

/* Forks a writer of n spans, runs the loop (draining as ticks would, each a tick later than
 * the last when `tick`) until its ring is dropped, and checks every span is accounted. */
static void run_exiting_writer(fx_t *fx, unsigned n, bool tick) {
  if (!own_stat_agrees_with_others()) {
    print_message("/proc/self/stat is emulated here (qemu-user); skipping\n");
    skip();
  }
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    child_writes_and_exits(fx->sock, n);
  }
  uint64_t now_ns = uv_hrtime();
  for (int i = 0; i < 100000 && em_rings_stats(fx->rings)->dropped == 0; i++) {
    uv_run(&fx->loop, UV_RUN_NOWAIT);
    if (tick) {
      now_ns += 2000000000u; /* Past the once-a-second check every time. */
      em_rings_drain(fx->rings, now_ns);
    }
    usleep(100);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  const em_rings_stats_t *s = em_rings_stats(fx->rings);
  assert_int_equal(s->dropped, 1);
  assert_int_equal(em_rings_active(fx->rings), 0);
  assert_int_equal(s->spans + s->overwritten + s->bad_slot, n);
  assert_true(s->spans > 0);
  assert_int_equal(span_stage_named(fx->spans, "child")->total, s->spans);
}

static void a_writer_that_exits_is_drained_through_its_pidfd(void **state) {
  fx_t *fx = *state;
  start(fx, 4, 4, NULL, 0);
  run_exiting_writer(fx, 100, false);
}

static void without_pidfds_an_exited_writer_is_found_by_its_start_time(void **state) {
  fx_t *fx = *state;
  start_with(fx, 4, 4, NULL, 0, true);
  run_exiting_writer(fx, 100, true);
}

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#if defined(__x86_64__)
#define TEST_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define TEST_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

/* Makes pidfd_open fail with err in this process from now on (a seccomp filter cannot be
 * removed), as a kernel before 5.3 (ENOSYS) or a container's older seccomp profile (EPERM)
 * does. False where seccomp filters cannot be installed (qemu-user, no CONFIG_SECCOMP). */
static bool refuse_pidfd_open(int err) {
#ifdef TEST_AUDIT_ARCH
  struct sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TEST_AUDIT_ARCH, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_open, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((unsigned)err & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {.len = (unsigned short)(sizeof(code) / sizeof(code[0])),
                            .filter = code};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    return false;
  }
  errno = 0;
  return syscall(SYS_pidfd_open, getpid(), 0u) < 0 && errno == err;
#else
  (void)err;
  return false;
#endif
}

/* Last in the group: it leaves pidfd_open refused for the rest of the process. A kernel that
 * refuses pidfd_open (EPERM from a seccomp filter here) is a kernel without pidfds: the rings
 * fall back to the start-time check instead of refusing every registration. */
static void a_refused_pidfd_open_falls_back_to_the_start_time_check(void **state) {
  fx_t *fx = *state;
  if (!refuse_pidfd_open(EPERM)) {
    print_message("seccomp filters cannot be installed here; skipping\n");
    skip();
  }
  start(fx, 4, 4, NULL, 0);
  run_exiting_writer(fx, 100, true);
}

static void the_deadline_page_is_renamed_into_place_and_updated_in_place(void **state) {
  fx_t *fx = *state;
  /* A runtime directory of 240 bytes, as long as the config allows with room for the name. */
  char dir[300];
  int n = snprintf(dir, sizeof(dir), "%s/", fx->dir);
  while (n < 240) {
    n += snprintf(dir + n, sizeof(dir) - (size_t)n, "d");
  }
  assert_int_equal(mkdir(dir, 0755), 0);
  char path[320];
  snprintf(path, sizeof(path), "%s/deadlines", dir);
  em_deadline_t in[2] = {{.stage = "infer", .deadline_ns = 50000000},
                         {.stage = "pre", .deadline_ns = 5000000}};
  em_deadlines_t d;
  assert_int_equal(em_deadlines_open(&d, path, 4242, 256, in, 2), 0);
  char tmp[340];
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  assert_int_equal(access(tmp, F_OK), -1); /* Renamed into place. */
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  assert_true(fd >= 0);
  const uint8_t *page = mmap(NULL, EM_DEADLINE_PAGE_BYTES, PROT_READ, MAP_SHARED, fd, 0);
  assert_true(page != MAP_FAILED);
  em_deadline_t out[EM_DEADLINE_MAX_ENTRIES];
  size_t count = 0;
  uint32_t slots = 0, seq = 0, seq2 = 0;
  assert_int_equal(em_deadline_page_read(page, out, &count, &slots, &seq), 0);
  assert_int_equal(count, 2);
  assert_int_equal(slots, 256);
  assert_string_equal(out[1].stage, "pre");
  assert_int_equal(out[1].deadline_ns, 5000000);
  assert_int_equal(em_deadlines_update(&d, 4096, in, 1), 0); /* A reload, seen by a reader
                                                                 that keeps its mapping. */
  assert_int_equal(em_deadline_page_read(page, out, &count, &slots, &seq2), 0);
  assert_int_equal(count, 1);
  assert_int_equal(slots, 4096);
  assert_true(seq2 > seq);
  in[0].stage[0] = ' '; /* Not a stage name: refused, the page unchanged. */
  assert_int_equal(em_deadlines_update(&d, 4096, in, 1), -EINVAL);
  assert_int_equal(em_deadline_page_read(page, out, &count, &slots, &seq), 0);
  assert_string_equal(out[0].stage, "infer");
  munmap((void *)page, EM_DEADLINE_PAGE_BYTES);
  close(fd);
  em_deadlines_close(&d, true);
  assert_int_equal(access(path, F_OK), -1);
  assert_int_equal(rmdir(dir), 0);
}

int main(int argc, char **argv) {
  const struct CMUnitTest unit[] = {
      EM_FX(a_sealed_ring_is_accepted_and_acked),
      EM_FX(the_observer_hears_each_span_with_its_writer_thread),
      EM_FX(an_unsealed_memfd_is_refused_and_closed),
      EM_FX(a_size_other_than_the_headers_is_refused),
      EM_FX(a_header_naming_another_process_is_refused),
      EM_FX(a_register_without_a_descriptor_is_refused),
      EM_FX(a_sender_outside_the_allow_lists_is_refused),
      EM_FX(the_caps_refuse_per_process_then_in_all),
      EM_FX(the_drain_folds_ring_spans_one_tick_late),
      EM_FX(a_closed_ring_is_drained_to_its_head_and_dropped),
      EM_FX(descriptors_on_other_datagrams_are_closed),
      EM_FX(a_hard_miss_reaches_its_hook_without_entering_the_window),
      EM_FX(the_deadline_page_is_renamed_into_place_and_updated_in_place),
  };
  /* The live kernel: a real child's pidfd and its start time in the real /proc. Run with --live,
   * labelled integration (CMakeLists.txt). */
  const struct CMUnitTest live[] = {
      EM_FX(a_writer_that_exits_is_drained_through_its_pidfd),
      EM_FX(without_pidfds_an_exited_writer_is_found_by_its_start_time),
      EM_FX(a_refused_pidfd_open_falls_back_to_the_start_time_check),
  };
  return EM_RUN_UNIT_OR_LIVE(argc, argv, unit, live);
}
