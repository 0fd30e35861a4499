/*
 * test_spans.c - span ingest (firmware/agent/spans/spans.c) on a real libuv loop with a real
 * unix datagram socket: a span folds into its stage with the sender's credentials from the
 * kernel; every kind of bad datagram is dropped and counted under its own reason and folds
 * nothing; a sender outside the allow-lists is refused; a stage past the table is overflow;
 * descriptors sent with a span (as many as a client likes) are all closed; a subscribe
 * reports the sender's address. Each test ends with the loop closed cleanly.
 *
 * Through the system call table (em_spans_sys_t), over the same real socket: a failing
 * recvmmsg (EBADF, ENOMEM, ECONNREFUSED, ...) is counted, logged once per errno, ends its
 * wake-up after one call and the next wake-up reads again, while EAGAIN and EINTR are not
 * errors; a flood is read in at most EM_SPANS_ROUNDS calls per wake-up; a short batch ends the
 * wake-up; MSG_TRUNC on one message of a batch drops that one only; MSG_CTRUNC is counted,
 * logged once, and a ring register cut so gets no descriptor (closed through the table).
 *
 * A Python stacks datagram (27 KB, and one just over 512 bytes) reaches on_pystacks whole with
 * its sender, spans still fold after it, and a big datagram of another kind or version is
 * dropped under size or version.
 */
#define _GNU_SOURCE

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "log_capture.h"
#include "span_client.h"
#include "spans.h"
#include "unit_fx.h"

/*
 * The system call table the seam tests give span ingest: each recvmmsg call is counted and
 * either fails, fabricates a full batch, or is the real call with flags added to chosen
 * messages; closes are recorded, then made.
 */
typedef struct {
  unsigned calls;      /* recvmmsg calls. */
  unsigned fail_calls; /* The next this many calls fail with fail_errno. */
  int fail_errno;
  unsigned flood_calls;       /* Then this many calls return a full batch of spans. */
  int flags_at;               /* Message index of the next real batch given add_flags; -1: none. */
  int add_flags;              /* MSG_TRUNC, MSG_CTRUNC. */
  int closed[EM_SPANS_BATCH]; /* Descriptors closed through the table, in order. */
  size_t n_closed;
} fake_sys_t;

typedef struct {
  char dir[64];
  char sock[96];
  uv_loop_t loop;
  em_spans_t *spans;
  int client; /* Autobound datagram socket connected to the span socket. */
  unsigned spans_seen;
  pid_t last_pid;
  unsigned subscribes;
  bool last_subscribe;
  struct sockaddr_un sub_addr;
  socklen_t sub_len;
  unsigned closed;
  fake_sys_t fake;
  int reg_fd; /* The descriptor on_register was given; -2 before any register. */
  unsigned registers;
  unsigned pystacks;   /* on_pystacks calls. */
  size_t pystacks_len; /* The last one's length and bytes. */
  uint8_t pystacks_buf[EM_PYSTACKS_MAX_BYTES];
} fx_t;

static void on_pystacks(void *ctx, const uint8_t *buf, size_t len, pid_t sender) {
  fx_t *fx = ctx;
  fx->pystacks++;
  fx->last_pid = sender;
  fx->pystacks_len = len;
  memcpy(fx->pystacks_buf, buf, len);
}

static void on_span(void *ctx, const em_span_t *span, const struct ucred *sender,
                    em_stage_stats_t *stage) {
  fx_t *fx = ctx;
  (void)span;
  (void)stage;
  fx->spans_seen++;
  fx->last_pid = sender ? sender->pid : -1;
}

static void on_subscribe(void *ctx, bool subscribe, const struct sockaddr_un *addr,
                         socklen_t addr_len, const struct ucred *sender) {
  fx_t *fx = ctx;
  (void)sender;
  fx->subscribes++;
  fx->last_subscribe = subscribe;
  memcpy(&fx->sub_addr, addr, addr_len);
  fx->sub_len = addr_len;
}

static void on_register(void *ctx, const em_ring_dgram_t *reg, int fd, bool allowed,
                        const struct ucred *sender, const struct sockaddr_un *from,
                        socklen_t from_len) {
  fx_t *fx = ctx;
  (void)reg;
  (void)allowed;
  (void)sender;
  (void)from;
  (void)from_len;
  fx->registers++;
  fx->reg_fd = fd;
  if (fd >= 0) {
    close(fd);
  }
}

static void on_closed(void *ctx) {
  ((fx_t *)ctx)->closed++;
}

static int setup(void **state) {
  fx_t *fx = calloc(1, sizeof(*fx));
  assert_non_null(fx);
  span_client_begin("em-spans", fx->dir, sizeof(fx->dir), fx->sock, sizeof(fx->sock), &fx->loop);
  fx->client = -1;
  fx->reg_fd = -2;
  fx->fake.flags_at = -1;
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  fx_t *fx = *state;
  if (fx->spans) {
    em_spans_close(fx->spans, on_closed, fx);
    uv_run(&fx->loop, UV_RUN_DEFAULT);
    assert_int_equal(fx->closed, 1);
    em_spans_free(fx->spans);
  }
  span_client_finish(fx->client, &fx->loop, fx->dir);
  free(fx);
  return 0;
}

/* Starts span ingest with these allow-listed uids and `max_stages`, a system call table (NULL:
 * the real one), and a connected client. */
static void start_with(fx_t *fx, const uint32_t *uids, size_t n_uids, size_t max_stages,
                       const em_spans_sys_t *sys) {
  em_spans_opts_t so = {.path = fx->sock,
                        .mode = 0600,
                        .gid = -1,
                        .allow_uids = uids,
                        .n_allow_uids = n_uids,
                        .max_stages = max_stages,
                        .on_span = on_span,
                        .on_subscribe = on_subscribe,
                        .on_register = on_register,
                        .on_pystacks = on_pystacks,
                        .ctx = fx,
                        .sys = sys};
  assert_int_equal(em_spans_new(&fx->spans, &fx->loop, &so), 0);
  fx->client = span_client_connect(fx->sock);
}

static void start(fx_t *fx, const uint32_t *uids, size_t n_uids, size_t max_stages) {
  start_with(fx, uids, n_uids, max_stages, NULL);
}

/* Everything the socket took so far: accepted, and dropped for any reason. */
static uint64_t handled(const fx_t *fx) {
  uint64_t n = em_spans_counts(fx->spans)->received;
  for (int why = 0; why < EM_SPANS_DROP_COUNT; why++) {
    n += em_spans_dropped(fx->spans, (em_spans_drop_t)why);
  }
  return n + fx->subscribes;
}

/*
 * Sends buf[0..len) with the descriptors fds[0..n_fds) attached, then runs the loop until the
 * agent has handled it (at most 5 s).
 */
static void send_and_wait(fx_t *fx, const void *buf, size_t len, const int *fds, size_t n_fds) {
  uint64_t before = handled(fx);
  assert_int_equal(span_client_send(fx->client, buf, len, fds, n_fds), (ssize_t)len);
  for (int i = 0; i < 5000 && handled(fx) == before; i++) {
    uv_run(&fx->loop, UV_RUN_NOWAIT);
    nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
  }
  assert_int_equal(handled(fx), before + 1);
}

static void pack_span(uint8_t out[EM_SPAN_DGRAM_BYTES], em_dgram_kind_t kind, const char *stage,
                      uint64_t duration_ns) {
  em_span_t s = {.kind = kind,
                 .pid = (uint32_t)getpid(),
                 .frame_id = 1,
                 .start_ns = 1000,
                 .duration_ns = duration_ns};
  snprintf(s.stage, sizeof(s.stage), "%s", stage);
  assert_int_equal(em_span_pack(&s, out), 0);
}

/* Descriptors open in this process (among the first 4096). */
static int open_fds(void) {
  int n = 0;
  for (int fd = 0; fd < 4096; fd++) {
    n += fcntl(fd, F_GETFD) != -1;
  }
  return n;
}

static void a_span_folds_into_its_stage_with_the_kernels_credentials(void **state) {
  fx_t *fx = *state;
  start(fx, NULL, 0, 8);
  uint8_t buf[EM_SPAN_DGRAM_BYTES];
  pack_span(buf, EM_DGRAM_SPAN, "infer", 5000);
  buf[4] ^= 0x7f; /* The datagram's own pid field lies: the kernel's credentials win. */
  send_and_wait(fx, buf, sizeof(buf), NULL, 0);
  pack_span(buf, EM_DGRAM_HEARTBEAT, "infer", 0);
  send_and_wait(fx, buf, sizeof(buf), NULL, 0);
  em_stage_stats_t *st = span_stage_named(fx->spans, "infer");
  assert_non_null(st);
  assert_int_equal(st->total, 1); /* The span; a heartbeat is a sign of life only. */
  assert_int_equal(em_spans_counts(fx->spans)->received, 2);
  assert_int_equal(em_spans_counts(fx->spans)->datagram_spans, 1);
  assert_int_equal(fx->spans_seen, 2);
  assert_int_equal(fx->last_pid, getpid());
}

typedef struct {
  const char *what;
  size_t len;    /* Bytes sent. */
  size_t at;     /* Byte changed in a valid span datagram, or SIZE_MAX for none. */
  uint8_t value; /* Its new value. */
  em_spans_drop_t why;
} bad_row_t;

static const bad_row_t bad_rows[] = {
    {"empty datagram", 0, SIZE_MAX, 0, EM_SPANS_DROP_SIZE},
    {"one byte short", EM_SPAN_DGRAM_BYTES - 1, SIZE_MAX, 0, EM_SPANS_DROP_SIZE},
    {"one byte long", EM_SPAN_DGRAM_BYTES + 1, SIZE_MAX, 0, EM_SPANS_DROP_SIZE},
    {"far too long", 4096, SIZE_MAX, 0, EM_SPANS_DROP_SIZE},
    {"bad magic", EM_SPAN_DGRAM_BYTES, 0, 'X', EM_SPANS_DROP_MALFORMED},
    {"version 3", EM_SPAN_DGRAM_BYTES, 2, 3, EM_SPANS_DROP_VERSION},
    {"a v1 span marked version 2", EM_SPAN_DGRAM_BYTES, 2, 2, EM_SPANS_DROP_VERSION},
    {"unknown kind", EM_SPAN_DGRAM_BYTES, 3, 15, EM_SPANS_DROP_MALFORMED},
    {"agent-to-client kind", EM_SPAN_DGRAM_BYTES, 3, EM_DGRAM_LEVEL_PUSH, EM_SPANS_DROP_MALFORMED},
};

/* Offset of the stage field in a span datagram v1 (proto/WIRE.md). */
#define STAGE_AT (EM_SPAN_DGRAM_BYTES - EM_STAGE_FIELD_BYTES)

static void each_bad_datagram_is_dropped_under_its_reason(void **state) {
  fx_t *fx = *state;
  start(fx, NULL, 0, 8);
  static uint8_t buf[4096];
  for (size_t i = 0; i < sizeof(bad_rows) / sizeof(bad_rows[0]); i++) {
    const bad_row_t *r = &bad_rows[i];
    memset(buf, 0, sizeof(buf));
    pack_span(buf, EM_DGRAM_SPAN, "infer", 5000);
    if (r->at != SIZE_MAX) {
      buf[r->at] = r->value;
    }
    uint64_t before = em_spans_dropped(fx->spans, r->why);
    send_and_wait(fx, buf, r->len, NULL, 0);
    if (em_spans_dropped(fx->spans, r->why) != before + 1) {
      fail_msg("%s: not dropped as %s", r->what, em_spans_drop_name(r->why));
    }
  }
  /* Stage names: one with a space, one not NUL-padded after its end. */
  pack_span(buf, EM_DGRAM_SPAN, "infer", 5000);
  buf[STAGE_AT + 2] = ' ';
  send_and_wait(fx, buf, EM_SPAN_DGRAM_BYTES, NULL, 0);
  pack_span(buf, EM_DGRAM_SPAN, "infer", 5000);
  buf[EM_SPAN_DGRAM_BYTES - 1] = 'x';
  send_and_wait(fx, buf, EM_SPAN_DGRAM_BYTES, NULL, 0);
  assert_int_equal(em_spans_dropped(fx->spans, EM_SPANS_DROP_MALFORMED), 5);
  assert_int_equal(em_spans_counts(fx->spans)->received, 0); /* Nothing folded in. */
  assert_int_equal(em_spans_stage_count(fx->spans), 0);
  assert_int_equal(fx->spans_seen, 0);
}

static void a_sender_outside_the_allow_lists_is_refused(void **state) {
  fx_t *fx = *state;
  const uint32_t others[] = {(uint32_t)getuid() + 1};
  start(fx, others, 1, 8);
  uint8_t buf[EM_SPAN_DGRAM_BYTES];
  pack_span(buf, EM_DGRAM_SPAN, "infer", 5000);
  send_and_wait(fx, buf, sizeof(buf), NULL, 0);
  assert_int_equal(em_spans_dropped(fx->spans, EM_SPANS_DROP_DISALLOWED), 1);
  assert_int_equal(em_spans_counts(fx->spans)->received, 0);
  assert_int_equal(fx->spans_seen, 0);
}

static void a_stage_past_the_table_is_overflow(void **state) {
  fx_t *fx = *state;
  start(fx, NULL, 0, 2);
  uint8_t buf[EM_SPAN_DGRAM_BYTES];
  const char *names[] = {"a", "b", "c", "a"};
  for (size_t i = 0; i < 4; i++) {
    pack_span(buf, EM_DGRAM_SPAN, names[i], 5000);
    send_and_wait(fx, buf, sizeof(buf), NULL, 0);
  }
  assert_int_equal(em_spans_stage_count(fx->spans), 2);
  assert_null(span_stage_named(fx->spans, "c"));
  assert_int_equal(span_stage_named(fx->spans, "a")->total, 2);
  assert_int_equal(em_spans_dropped(fx->spans, EM_SPANS_DROP_OVERFLOW), 1);
  assert_int_equal(em_spans_counts(fx->spans)->received, 3);
}

/* Sends a span with n descriptors, one dropped for its size with 3: none stays open here. */
static void check_descriptors_closed(fx_t *fx, size_t n) {
  start(fx, NULL, 0, 8);
  int open_before = open_fds();
  int fds[16];
  assert_true(n <= 16);
  for (size_t i = 0; i < n; i++) {
    fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    assert_true(fds[i] >= 0);
  }
  uint8_t buf[EM_SPAN_DGRAM_BYTES];
  pack_span(buf, EM_DGRAM_SPAN, "infer", 5000);
  send_and_wait(fx, buf, sizeof(buf), fds, n);
  send_and_wait(fx, buf, EM_SPAN_DGRAM_BYTES - 1, fds, 3); /* Dropped, with descriptors. */
  for (size_t i = 0; i < n; i++) {
    close(fds[i]);
  }
  /* Every copy the agent received is closed; any the kernel cut off never arrived. */
  assert_true(em_spans_counts(fx->spans)->fds_closed >= 1 + 3);
  assert_int_equal(open_fds(), open_before);
  assert_int_equal(em_spans_counts(fx->spans)->received, 1);
  assert_int_equal(em_spans_dropped(fx->spans, EM_SPANS_DROP_SIZE), 1);
}

static void descriptors_sent_with_spans_are_all_closed(void **state) {
  check_descriptors_closed(*state, 3);
}

/*
 * More descriptors than the agent's control buffer holds: the kernel discards the rest
 * (MSG_CTRUNC). qemu-user receives them all into the process and hands on only what fits, so
 * this runs in the live group.
 */
static void descriptors_past_the_control_buffer_never_stay_open(void **state) {
  check_descriptors_closed(*state, 16);
}

static void a_subscribe_reports_the_senders_address(void **state) {
  fx_t *fx = *state;
  start(fx, NULL, 0, 8);
  struct sockaddr_un me;
  socklen_t me_len = sizeof(me);
  assert_int_equal(getsockname(fx->client, (struct sockaddr *)&me, &me_len), 0);
  uint8_t buf[EM_SPAN_DGRAM_BYTES];
  pack_span(buf, EM_DGRAM_SUBSCRIBE, "", 0);
  send_and_wait(fx, buf, sizeof(buf), NULL, 0);
  assert_int_equal(fx->subscribes, 1);
  assert_true(fx->last_subscribe);
  assert_int_equal(fx->sub_len, me_len);
  assert_memory_equal(&fx->sub_addr, &me, me_len);
  pack_span(buf, EM_DGRAM_UNSUBSCRIBE, "", 0);
  send_and_wait(fx, buf, sizeof(buf), NULL, 0);
  assert_int_equal(fx->subscribes, 2);
  assert_false(fx->last_subscribe);
  assert_int_equal(em_spans_counts(fx->spans)->received, 0); /* Not spans. */
}

/* ---- Through the system call table ---- */

/* A full batch of valid spans with this process's credentials, as the kernel would fill it. */
static int flood_batch(struct mmsghdr *msgs, unsigned n) {
  for (unsigned i = 0; i < n; i++) {
    struct msghdr *h = &msgs[i].msg_hdr;
    pack_span(h->msg_iov[0].iov_base, EM_DGRAM_SPAN, "flood", 1000);
    struct ucred cred = {.pid = getpid(), .uid = getuid(), .gid = getgid()};
    assert_true(h->msg_controllen >= CMSG_SPACE(sizeof(cred)));
    struct cmsghdr *c = CMSG_FIRSTHDR(h);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_CREDENTIALS;
    c->cmsg_len = CMSG_LEN(sizeof(cred));
    memcpy(CMSG_DATA(c), &cred, sizeof(cred));
    h->msg_controllen = CMSG_SPACE(sizeof(cred));
    h->msg_namelen = 0;
    h->msg_flags = 0;
    msgs[i].msg_len = EM_SPAN_DGRAM_BYTES;
  }
  return (int)n;
}

static int fake_recvmmsg(void *ctx, int fd, struct mmsghdr *msgs, unsigned n, int flags) {
  fake_sys_t *f = ctx;
  f->calls++;
  if (f->calls > 4 * EM_SPANS_ROUNDS) {
    fail_msg("%u recvmmsg calls in one test: the ingest does not stop", f->calls);
  }
  if (f->fail_calls > 0) {
    f->fail_calls--;
    errno = f->fail_errno;
    return -1;
  }
  if (f->flood_calls > 0) {
    f->flood_calls--;
    return flood_batch(msgs, n);
  }
  int got = em_spans_sys_linux.recvmmsg(NULL, fd, msgs, n, flags);
  if (got > f->flags_at && f->flags_at >= 0) {
    msgs[f->flags_at].msg_hdr.msg_flags |= f->add_flags;
    f->flags_at = -1;
  }
  return got;
}

static int fake_close(void *ctx, int fd) {
  fake_sys_t *f = ctx;
  assert_true(f->n_closed < EM_SPANS_BATCH);
  f->closed[f->n_closed++] = fd;
  return em_spans_sys_linux.close(NULL, fd);
}

static void start_faked(fx_t *fx) {
  em_spans_sys_t sys = {fake_recvmmsg, fake_close, &fx->fake};
  start_with(fx, NULL, 0, 8, &sys); /* The table is copied. */
}

/* Sends one valid span on the client without running the loop: the socket is readable. */
static void send_span(fx_t *fx) {
  uint8_t buf[EM_SPAN_DGRAM_BYTES];
  pack_span(buf, EM_DGRAM_SPAN, "infer", 5000);
  assert_int_equal(span_client_send(fx->client, buf, sizeof(buf), NULL, 0), (ssize_t)sizeof(buf));
}

/* One wake-up of the loop with the span socket readable; the recvmmsg calls it made. */
static unsigned one_wakeup(fx_t *fx) {
  unsigned before = fx->fake.calls;
  uv_run(&fx->loop, UV_RUN_NOWAIT);
  return fx->fake.calls - before;
}

typedef struct {
  int err;
  bool counted; /* false: EAGAIN and EINTR, the socket's ordinary answers. */
} recv_error_row_t;

static const recv_error_row_t recv_error_rows[] = {
    {EBADF, true},  {ENOMEM, true},  {ECONNREFUSED, true}, {ENOBUFS, true},    {EFAULT, true},
    {EINVAL, true}, {EAGAIN, false}, {EINTR, false},       {ECONNRESET, true},
};

static void a_failing_receive_is_counted_logged_once_and_ends_the_wakeup(void **state) {
  fx_t *fx = *state;
  start_faked(fx);
  send_span(fx); /* Stays queued while the calls fail: every wake-up finds it readable. */
  uint64_t errors = 0;
  for (size_t i = 0; i < sizeof(recv_error_rows) / sizeof(recv_error_rows[0]); i++) {
    const recv_error_row_t *r = &recv_error_rows[i];
    fx->fake.fail_calls = 3;
    fx->fake.fail_errno = r->err;
    log_capture_t cap;
    log_capture_start(&cap);
    unsigned calls[3];
    for (int w = 0; w < 3; w++) {
      calls[w] = one_wakeup(fx);
    }
    char logged[4096];
    log_capture_end(&cap, logged, sizeof(logged));
    for (int w = 0; w < 3; w++) {
      if (calls[w] != 1) {
        fail_msg("%s: wake-up %d made %u recvmmsg calls, not 1", strerror(r->err), w, calls[w]);
      }
    }
    errors += r->counted ? 3 : 0;
    if (em_spans_counts(fx->spans)->recv_errors != errors) {
      fail_msg("%s: %llu receive errors counted, want %llu", strerror(r->err),
               (unsigned long long)em_spans_counts(fx->spans)->recv_errors,
               (unsigned long long)errors);
    }
    size_t lines = log_capture_count(logged, strerror(r->err));
    if (lines != (r->counted ? 1u : 0u)) {
      fail_msg("%s: logged %zu times, want %d:\n%s", strerror(r->err), lines, r->counted, logged);
    }
  }
  assert_int_equal(em_spans_counts(fx->spans)->received, 0);
  one_wakeup(fx); /* The calls work again: the queued span is read. */
  assert_int_equal(em_spans_counts(fx->spans)->received, 1);
  assert_int_equal(em_spans_counts(fx->spans)->recv_errors, errors);
}

static void a_flood_is_read_in_bounded_batches_per_wakeup(void **state) {
  fx_t *fx = *state;
  start_faked(fx);
  send_span(fx);
  fx->fake.flood_calls = 2 * EM_SPANS_ROUNDS; /* Every call a full batch, for two wake-ups. */
  assert_int_equal(one_wakeup(fx), EM_SPANS_ROUNDS);
  assert_int_equal(em_spans_counts(fx->spans)->received, EM_SPANS_ROUNDS * EM_SPANS_BATCH);
  assert_int_equal(one_wakeup(fx), EM_SPANS_ROUNDS); /* The rest waits for the next one. */
  assert_int_equal(em_spans_counts(fx->spans)->received, 2 * EM_SPANS_ROUNDS * EM_SPANS_BATCH);
  assert_int_equal(one_wakeup(fx), 1); /* The real span: a short batch ends the wake-up. */
  assert_int_equal(em_spans_counts(fx->spans)->received, 2 * EM_SPANS_ROUNDS * EM_SPANS_BATCH + 1);
  assert_int_equal(span_stage_named(fx->spans, "flood")->total,
                   2 * EM_SPANS_ROUNDS * EM_SPANS_BATCH);
  assert_int_equal(em_spans_counts(fx->spans)->recv_errors, 0);
}

static void a_truncated_message_in_a_batch_is_dropped_alone(void **state) {
  fx_t *fx = *state;
  start_faked(fx);
  for (int i = 0; i < 3; i++) {
    send_span(fx);
  }
  fx->fake.flags_at = 1;
  fx->fake.add_flags = MSG_TRUNC;      /* The middle one: its length still says 64 bytes. */
  assert_int_equal(one_wakeup(fx), 1); /* A short batch (3) ends the wake-up. */
  assert_int_equal(em_spans_dropped(fx->spans, EM_SPANS_DROP_SIZE), 1);
  assert_int_equal(em_spans_counts(fx->spans)->received, 2);
  assert_int_equal(span_stage_named(fx->spans, "infer")->total, 2);
  assert_int_equal(em_spans_counts(fx->spans)->ctrl_truncated, 0);
}

/* Sends a ring register carrying `fd` and runs one wake-up with MSG_CTRUNC added to it. */
static void send_cut_register(fx_t *fx, int fd) {
  em_ring_dgram_t reg = {.kind = EM_DGRAM_RING_REGISTER, .pid = (uint32_t)getpid()};
  uint8_t buf[EM_SPAN_DGRAM_BYTES];
  assert_int_equal(em_ring_dgram_pack(&reg, buf), 0);
  assert_int_equal(span_client_send(fx->client, buf, sizeof(buf), &fd, 1), (ssize_t)sizeof(buf));
  fx->fake.flags_at = 0;
  fx->fake.add_flags = MSG_CTRUNC;
  assert_int_equal(one_wakeup(fx), 1);
}

static void a_cut_control_message_is_counted_once_logged_and_gives_no_descriptor(void **state) {
  fx_t *fx = *state;
  start_faked(fx);
  int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  assert_true(fd >= 0);
  log_capture_t cap;
  log_capture_start(&cap);
  send_cut_register(fx, fd);
  send_cut_register(fx, fd);
  char logged[4096];
  log_capture_end(&cap, logged, sizeof(logged));
  close(fd);
  assert_int_equal(fx->registers, 2);
  assert_int_equal(fx->reg_fd, -1); /* Cut: it carried more than the one a register may. */
  assert_int_equal(em_spans_counts(fx->spans)->ctrl_truncated, 2);
  assert_int_equal(log_capture_count(logged, "discarded the rest"), 1);
  /* The copies that did arrive were closed, through the table. */
  assert_int_equal(fx->fake.n_closed, 2);
  assert_int_equal(em_spans_counts(fx->spans)->fds_closed, 2);
  for (size_t i = 0; i < fx->fake.n_closed; i++) {
    assert_int_equal(fcntl(fx->fake.closed[i], F_GETFD), -1);
  }
}

/* A Python stacks datagram of `len_hint` bytes or so (one long frame text repeated). */
static size_t pack_pystacks(uint8_t *out, size_t cap, size_t n_samples) {
  static char text[200];
  memset(text, 'f', sizeof(text) - 1);
  const char *const strings[] = {text, "main (/app/serve.py:1)"};
  static em_pysample_t samples[2000];
  for (size_t i = 0; i < n_samples; i++) {
    samples[i] = (em_pysample_t){.tid = 7, .time_ns = i, .depth = 2, .frames = {1, 0}};
  }
  size_t len = 0;
  assert_int_equal(
      em_pystacks_pack((uint32_t)getpid(), 1, 0, strings, 2, samples, n_samples, out, cap, &len),
      0);
  return len;
}

static void wait_pystacks(fx_t *fx, unsigned want) {
  for (int i = 0; i < 5000 && fx->pystacks < want; i++) {
    uv_run(&fx->loop, UV_RUN_NOWAIT);
    nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
  }
  assert_int_equal(fx->pystacks, want);
}

static void a_python_stacks_datagram_arrives_whole_and_spans_still_fold(void **state) {
  fx_t *fx = *state;
  start(fx, NULL, 0, 8);
  static uint8_t buf[EM_PYSTACKS_MAX_BYTES];
  /* 1500 samples of 18 bytes: about 27 KB, across all three receive buffers. */
  size_t len = pack_pystacks(buf, sizeof(buf), 1500);
  assert_true(len > 20000);
  assert_int_equal(span_client_send(fx->client, buf, len, NULL, 0), (ssize_t)len);
  wait_pystacks(fx, 1);
  assert_int_equal(fx->pystacks_len, len);
  assert_memory_equal(fx->pystacks_buf, buf, len);
  assert_int_equal(fx->last_pid, getpid());
  assert_int_equal(em_spans_counts(fx->spans)->pystacks_passed, 1);
  /* One just over the model datagram's size, then a span: both taken. */
  size_t small = pack_pystacks(buf, sizeof(buf), 1);
  while (small <= EM_MODEL_DGRAM_BYTES) {
    small = pack_pystacks(buf, sizeof(buf), (small < 300 ? 20 : 30));
  }
  assert_int_equal(span_client_send(fx->client, buf, small, NULL, 0), (ssize_t)small);
  wait_pystacks(fx, 2);
  assert_memory_equal(fx->pystacks_buf, buf, small);
  uint8_t span[EM_SPAN_DGRAM_BYTES];
  pack_span(span, EM_DGRAM_SPAN, "infer", 5000);
  send_and_wait(fx, span, sizeof(span), NULL, 0);
  assert_int_equal(fx->spans_seen, 1);
  /* Big but another kind, or another version: dropped, never handed on. */
  pack_pystacks(buf, sizeof(buf), 1500);
  buf[3] = EM_DGRAM_MODEL;
  uint64_t size_before = em_spans_dropped(fx->spans, EM_SPANS_DROP_SIZE);
  send_and_wait(fx, buf, len, NULL, 0);
  assert_int_equal(em_spans_dropped(fx->spans, EM_SPANS_DROP_SIZE), size_before + 1);
  buf[3] = EM_DGRAM_PYSTACKS;
  buf[2] = 3;
  send_and_wait(fx, buf, len, NULL, 0);
  assert_int_equal(em_spans_dropped(fx->spans, EM_SPANS_DROP_VERSION), 1);
  assert_int_equal(fx->pystacks, 2);
}

int main(int argc, char **argv) {
  const struct CMUnitTest unit[] = {
      EM_FX(a_span_folds_into_its_stage_with_the_kernels_credentials),
      EM_FX(each_bad_datagram_is_dropped_under_its_reason),
      EM_FX(a_sender_outside_the_allow_lists_is_refused),
      EM_FX(a_stage_past_the_table_is_overflow),
      EM_FX(descriptors_sent_with_spans_are_all_closed),
      EM_FX(a_subscribe_reports_the_senders_address),
      EM_FX(a_failing_receive_is_counted_logged_once_and_ends_the_wakeup),
      EM_FX(a_flood_is_read_in_bounded_batches_per_wakeup),
      EM_FX(a_truncated_message_in_a_batch_is_dropped_alone),
      EM_FX(a_cut_control_message_is_counted_once_logged_and_gives_no_descriptor),
      EM_FX(a_python_stacks_datagram_arrives_whole_and_spans_still_fold),
  };
  /* The live kernel: its truncation of SCM_RIGHTS. Run with --live, labelled integration. */
  const struct CMUnitTest live[] = {
      EM_FX(descriptors_past_the_control_buffer_never_stay_open),
  };
  return EM_RUN_UNIT_OR_LIVE(argc, argv, unit, live);
}
