/*
 * test_c_client_ring.c - the header-only C client's span rings v2 (firmware/client/c/
 * edgemon_client.h; proto/WIRE.md "Span ring v2", "Deadline page v1") against a test peer that
 * plays the agent's registration side on a real AF_UNIX socket: it writes a deadline page with
 * proto's em_deadline_page_*, receives the register datagram and its memfd (SCM_RIGHTS), checks
 * the seals and the size, maps the ring read-only and acks it (or does not).
 *
 * What the client wrote is read back with proto's reference code (em_ring_header_read,
 * em_ring_reader_drain, em_ring_dgram_unpack, em_span_unpack), independent of the header's own
 * packing, and the first slot is also checked byte by byte against WIRE.md's table.
 * Covered: ring bytes; datagrams before the ack, the ring only after it; no ack and a refused
 * ack fall back to datagrams; a hard deadline miss goes to the ring and as a kind-6 datagram;
 * four threads make four rings, closed (state 2) when their threads end, every span
 * accounted for; a new agent (another deadline page inode) gets the ring registered again at
 * its head; a forked child forgets the parent's ring and registers its own.
 */
#define _GNU_SOURCE /* mkdtemp, fork, gettid, F_GET_SEALS under -std=c11. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "edgemon/ring.h"
#include "edgemon/wire.h"
#include "edgemon_client.h"

#include "bound_socket.h"

#define RING_SLOTS        64u /* The slot count the page suggests (the smallest WIRE.md allows). */
#define THREADS           4
#define THREAD_SPANS      500u /* Per thread, after the ack: fits a ring of THREAD_RING_SLOTS. */
#define THREAD_RING_SLOTS 1024u
#define LIVE_TRIES        5000 /* Bounded waits: spans tried (1 ms apart) before giving up. */

/* ---- The peer: the agent's span socket and deadline page ---- */

typedef struct {
  char dir[64];
  char path[EM_CLIENT_PATH_BYTES];
  char page_path[128];
  int fd;
} peer_t;

/* A ring the peer received: mapped read-only as the agent maps it. */
typedef struct {
  const uint8_t *mem;
  size_t bytes;
  int memfd;
  uint32_t slots;
  uint64_t start;
  struct sockaddr_un from;
  socklen_t from_len;
  em_ring_header_t header;
} peer_ring_t;

static void peer_write_page(const peer_t *p, uint32_t slots, const em_deadline_t *entries,
                            size_t n) {
  static _Alignas(8) uint8_t page[EM_DEADLINE_PAGE_BYTES];
  char tmp[160];
  FILE *f;
  assert_int_equal(em_deadline_page_init(page, (uint32_t)getpid(), slots), 0);
  assert_int_equal(em_deadline_page_write(page, entries, n), 0);
  snprintf(tmp, sizeof(tmp), "%s.tmp", p->page_path);
  f = fopen(tmp, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(page, 1, sizeof(page), f), sizeof(page));
  assert_int_equal(fclose(f), 0);
  assert_int_equal(rename(tmp, p->page_path), 0);
}

/* Binds the span socket and writes a deadline page with `n` hard deadlines. */
static void peer_open(peer_t *p, uint32_t slots, const em_deadline_t *entries, size_t n) {
  unsetenv("EDGEMON_DEADLINE_PAGE");
  snprintf(p->dir, sizeof(p->dir), "/tmp/em-c-ring-XXXXXX");
  assert_non_null(mkdtemp(p->dir));
  snprintf(p->path, sizeof(p->path), "%s/spans.sock", p->dir);
  snprintf(p->page_path, sizeof(p->page_path), "%s/deadlines", p->dir);
  p->fd = bound_socket(p->path, SOCK_DGRAM);
  peer_write_page(p, slots, entries, n);
}

static void peer_close(peer_t *p) {
  close(p->fd);
  unlink(p->path);
  unlink(p->page_path);
  rmdir(p->dir);
}

/* A peer (peer_open(): RING_SLOTS, no deadline) and a client opened on its socket. */
static void peer_client_open(peer_t *p, em_client_t *c) {
  peer_open(p, RING_SLOTS, NULL, 0);
  assert_int_equal(em_client_open(c, p->path), 0);
}

/* One datagram (waits up to 5 s, or not at all when `dontwait`): its length, its source and
 * the descriptor it carried (-1: none). -1 when nothing came. */
static ssize_t peer_recv(const peer_t *p, uint8_t *buf, size_t cap, int dontwait, int *fd_out,
                         struct sockaddr_un *from, socklen_t *from_len) {
  union {
    struct cmsghdr align;
    char bytes[CMSG_SPACE(sizeof(int) * 4)];
  } control;
  struct iovec iov = {buf, cap};
  struct sockaddr_un src = {0};
  struct msghdr msg = {.msg_name = &src,
                       .msg_namelen = sizeof(src),
                       .msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = control.bytes,
                       .msg_controllen = sizeof(control.bytes)};
  ssize_t n;
  *fd_out = -1;
  n = recvmsg(p->fd, &msg, MSG_CMSG_CLOEXEC | (dontwait ? MSG_DONTWAIT : 0));
  if (n < 0) {
    return -1;
  }
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm != NULL; cm = CMSG_NXTHDR(&msg, cm)) {
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
      assert_int_equal(cm->cmsg_len, CMSG_LEN(sizeof(int))); /* exactly one descriptor */
      memcpy(fd_out, CMSG_DATA(cm), sizeof(int));
    }
  }
  if (from != NULL) {
    *from = src;
    *from_len = msg.msg_namelen;
  }
  return n;
}

/* Receives one datagram v1 (waits up to 5 s) and decodes it with the reference decoder. */
static void peer_recv_span(const peer_t *p, em_span_t *span) {
  uint8_t buf[128];
  int fd;
  ssize_t n = peer_recv(p, buf, sizeof(buf), 0, &fd, NULL, NULL);
  assert_int_equal(n, EM_SPAN_DGRAM_BYTES);
  assert_int_equal(fd, -1);
  assert_int_equal(em_span_unpack(buf, (size_t)n, span), 0);
}

/* Checks a received ring descriptor as the agent does and maps it read-only. */
static void peer_map_ring(int memfd, uint32_t pid, peer_ring_t *ring) {
  struct stat st;
  int seals = fcntl(memfd, F_GET_SEALS);
  void *map;
  assert_true(seals >= 0);
  assert_true((seals & F_SEAL_SHRINK) && (seals & F_SEAL_GROW) && (seals & F_SEAL_SEAL));
  assert_int_equal(fstat(memfd, &st), 0);
  map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, memfd, 0);
  assert_true(map != MAP_FAILED);
  ring->mem = (const uint8_t *)map;
  ring->bytes = (size_t)st.st_size;
  ring->memfd = memfd;
  assert_int_equal(em_ring_header_read(ring->mem, ring->bytes, &ring->header), 0);
  assert_int_equal(ring->bytes, em_ring_bytes(ring->header.slot_count));
  assert_int_equal(ring->header.pid, pid);
  assert_true(ring->header.start_time > 0);
  assert_int_equal(ring->header.state, EM_RING_STATE_OPEN);
  ring->slots = ring->header.slot_count;
}

/* Receives datagrams until a register comes: checks it and its ring, counts the v1 spans
 * received before it in *spans_before (may be NULL when none are expected). */
static void peer_expect_register(const peer_t *p, uint32_t pid, peer_ring_t *ring,
                                 size_t *spans_before) {
  for (;;) {
    uint8_t buf[128];
    int memfd;
    em_ring_dgram_t d;
    ssize_t n = peer_recv(p, buf, sizeof(buf), 0, &memfd, &ring->from, &ring->from_len);
    assert_int_equal(n, EM_SPAN_DGRAM_BYTES);
    if (buf[2] == 1) {
      em_span_t span;
      assert_int_equal(memfd, -1);
      assert_int_equal(em_span_unpack(buf, (size_t)n, &span), 0);
      assert_non_null(spans_before);
      (*spans_before)++;
      continue;
    }
    assert_int_equal(em_ring_dgram_unpack(buf, (size_t)n, &d), 0);
    assert_int_equal(d.kind, EM_DGRAM_RING_REGISTER);
    assert_true(memfd >= 0);
    assert_true(ring->from_len > sizeof(sa_family_t)); /* sent from a bound (autobound) socket */
    ring->start = d.start;
    peer_map_ring(memfd, pid, ring);
    assert_true(ring->header.head == d.start);
    return;
  }
}

static void peer_ack(const peer_t *p, const peer_ring_t *ring, int64_t status) {
  em_ring_dgram_t d;
  uint8_t buf[EM_SPAN_DGRAM_BYTES];
  memset(&d, 0, sizeof(d));
  d.kind = EM_DGRAM_RING_ACK;
  d.pid = (uint32_t)getpid();
  d.start = ring->start;
  d.status = status;
  d.ring_id = 1;
  assert_int_equal(em_ring_dgram_pack(&d, buf), 0);
  assert_int_equal(
      sendto(p->fd, buf, sizeof(buf), 0, (const struct sockaddr *)&ring->from, ring->from_len),
      (ssize_t)sizeof(buf));
}

static void peer_ring_unmap(peer_ring_t *ring) {
  munmap((void *)(uintptr_t)ring->mem, ring->bytes);
  close(ring->memfd);
}

/* The end of a test with one ring: the client closed, the ring unmapped, the peer gone. */
static void peer_client_close(peer_t *p, em_client_t *c, peer_ring_t *ring) {
  em_client_close(c);
  peer_ring_unmap(ring);
  peer_close(p);
}

/* What the reader folds in, kept for checking. */
typedef struct {
  em_span_t spans[THREAD_SPANS + 8];
  size_t n;
} folded_t;

static void fold(void *ctx, const em_span_t *span) {
  folded_t *f = (folded_t *)ctx;
  if (f->n < sizeof(f->spans) / sizeof(f->spans[0])) {
    f->spans[f->n] = *span;
  }
  f->n++;
}

/* Drains the whole ring from its registration's start (final: every published slot). */
static em_ring_counts_t drain_all(const peer_ring_t *ring, folded_t *out) {
  static em_ring_reader_t reader;
  assert_int_equal(em_ring_reader_init(&reader, ring->slots, ring->start), 0);
  out->n = 0;
  (void)em_ring_reader_drain(&reader, ring->mem, true, fold, out);
  return reader.counts;
}

static uint64_t head_of(const peer_ring_t *ring) {
  em_ring_header_t h;
  assert_int_equal(em_ring_header_read(ring->mem, ring->bytes, &h), 0);
  return h.head;
}

static uint32_t state_of(const peer_ring_t *ring) {
  em_ring_header_t h;
  assert_int_equal(em_ring_header_read(ring->mem, ring->bytes, &h), 0);
  return h.state;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Records spans of `stage` (1 ms apart) until the thread's ring is live; each went as a
 * datagram. Returns how many it took (the ack is already queued, so normally 1). */
/* The span that found the ack went to the ring. */
static unsigned spans_until_live(em_client_t *c, const char *stage) {
  unsigned n = 0;
  uint64_t accepted = c->ring_counters[EM_CLIENT_RING_ACCEPTED];
  while (c->ring_counters[EM_CLIENT_RING_ACCEPTED] == accepted && n < LIVE_TRIES) {
    (void)em_client_record(c, stage, em_client_now_ns(), 10);
    n++;
    if (c->ring_counters[EM_CLIENT_RING_ACCEPTED] == accepted) {
      sleep_ms(1);
    }
  }
  return n;
}

/* ---- Tests ---- */

static void ring_bytes_match_wire_md(void **state) {
  peer_t p = {0};
  peer_ring_t ring;
  em_client_t c;
  folded_t got;
  em_ring_counts_t counts;
  size_t before = 0;
  const uint8_t *slot;
  (void)state;
  peer_client_open(&p, &c);
  em_client_set_frame(&c, 7);

  /* The first span registers the ring and goes as a datagram (the ring is pending). */
  assert_int_equal(em_client_record(&c, "infer", 1000, 250), 0);
  peer_expect_register(&p, (uint32_t)getpid(), &ring, &before);
  assert_int_equal(ring.slots, RING_SLOTS); /* the page's suggestion */
  assert_true(ring.start == 0);
  assert_int_equal(c.ring_counters[EM_CLIENT_RING_REGISTRATIONS], 1);
  assert_int_equal(c.ring_counters[EM_CLIENT_RING_CREATED], 1);
  peer_ack(&p, &ring, 0);

  /* From the ack on: the ring, no datagram. Timestamps are monotonic-like so the once a
   * second agent check is not due on every span. */
  uint64_t now = em_client_now_ns();
  assert_int_equal(em_client_record_frame(&c, "infer", 9, now, 250), 0);
  assert_int_equal(em_client_heartbeat(&c, "camera.rx"), 0);
  assert_int_equal(
      em_client_record_frame(&c, "a.b:c-d_0123456789ABCDEFGHIJKLM", UINT64_MAX, now, 1000000), 0);
  assert_int_equal(c.ring_counters[EM_CLIENT_RING_ACCEPTED], 1);
  assert_int_equal(c.ring_counters[EM_CLIENT_RING_WRITTEN], 3);

  /* The span before the ack came as a datagram v1, nothing after it. */
  {
    uint8_t buf[128];
    int fd;
    em_span_t span;
    peer_recv_span(&p, &span);
    assert_string_equal(span.stage, "infer");
    assert_true(span.start_ns == 1000 && span.duration_ns == 250 && span.frame_id == 7);
    assert_int_equal(peer_recv(&p, buf, sizeof(buf), 1, &fd, NULL, NULL), -1);
  }
  assert_int_equal(c.sent, 1);

  /* Header and slots as the reference reader sees them. */
  assert_true(head_of(&ring) == 3);
  counts = drain_all(&ring, &got);
  assert_true(counts.folded == 3 && counts.bad_slot == 0 && counts.overwritten == 0);
  assert_int_equal(got.n, 3);
  assert_int_equal(got.spans[0].kind, EM_DGRAM_SPAN);
  assert_true(got.spans[0].frame_id == 9 && got.spans[0].start_ns == now &&
              got.spans[0].duration_ns == 250);
  assert_string_equal(got.spans[0].stage, "infer");
  assert_int_equal(got.spans[1].kind, EM_DGRAM_HEARTBEAT);
  assert_true(got.spans[1].frame_id == 7 && got.spans[1].duration_ns == 0);
  assert_string_equal(got.spans[1].stage, "camera.rx");
  assert_true(got.spans[2].frame_id == UINT64_MAX && got.spans[2].duration_ns == 1000000);
  assert_string_equal(got.spans[2].stage, "a.b:c-d_0123456789ABCDEFGHIJKLM");

  /* Slot 0 byte by byte (WIRE.md's table): seq 1, kind 1, reserved 0, little-endian fields,
   * the stage NUL-padded. */
  slot = ring.mem + 128;
  {
    static const uint8_t expect_head[8] = {1, 0, 0, 0, 1, 0, 0, 0};
    uint8_t expect_stage[32] = {0};
    memcpy(expect_stage, "infer", 5);
    assert_memory_equal(slot, expect_head, sizeof(expect_head));
    assert_int_equal(slot[8], 9);
    for (int i = 9; i < 16; i++) {
      assert_int_equal(slot[i], 0);
    }
    assert_int_equal(slot[24], 250);
    assert_memory_equal(slot + 32, expect_stage, sizeof(expect_stage));
    assert_int_equal(slot[64], 2); /* seq of slot 1 */
    assert_int_equal(slot[64 + 4], 2);
    /* Header: magic, version, sizes, head 3 little-endian at 32, state 1 at 48. */
    assert_memory_equal(ring.mem, "EMRG", 4);
    assert_int_equal(ring.mem[4], 2);
    assert_int_equal(ring.mem[6], 128);
    assert_int_equal(ring.mem[8], 64);
    assert_int_equal(ring.mem[32], 3);
    assert_int_equal(ring.mem[48], 1);
  }

  /* Closing the client closes its ring: state 2. */
  em_client_close(&c);
  assert_int_equal(state_of(&ring), EM_RING_STATE_CLOSED);
  assert_int_equal(c.ring_counters[EM_CLIENT_RING_CLOSED], 1);
  peer_ring_unmap(&ring);
  peer_close(&p);
}

static void ring_datagrams_until_the_ack_then_ring_only(void **state) {
  peer_t p = {0};
  peer_ring_t ring;
  em_client_t c;
  size_t before = 0;
  uint8_t buf[128];
  int fd;
  (void)state;
  peer_client_open(&p, &c);
  for (int i = 0; i < 5; i++) {
    assert_int_equal(em_client_record(&c, "pre", em_client_now_ns(), 10), 0);
  }
  peer_expect_register(&p, (uint32_t)getpid(), &ring, &before);
  assert_int_equal(before, 0); /* the register goes out before the first span's datagram */
  for (int i = 0; i < 5; i++) {
    em_span_t span;
    peer_recv_span(&p, &span);
    assert_string_equal(span.stage, "pre");
  }
  assert_int_equal(c.sent, 5);
  assert_true(head_of(&ring) == 0);
  assert_int_equal(c.ring_counters[EM_CLIENT_RING_REGISTRATIONS], 1); /* pending: not again */

  peer_ack(&p, &ring, 0);
  for (int i = 0; i < 20; i++) {
    assert_int_equal(em_client_record(&c, "post", em_client_now_ns(), 10), 0);
  }
  assert_int_equal(peer_recv(&p, buf, sizeof(buf), 1, &fd, NULL, NULL), -1);
  assert_int_equal(c.sent, 5);
  assert_true(head_of(&ring) == 20);
  assert_int_equal(c.ring_counters[EM_CLIENT_RING_WRITTEN], 20);
  assert_true(em_client_dropped_total(&c) == 0);
  peer_client_close(&p, &c, &ring);
}

/* No ack within a second (a v1 agent), or a refusal: datagrams, the ring never written. */
static void ring_unanswered_or_refused_falls_back_to_datagrams(void **state) {
  for (int refuse = 0; refuse < 2; refuse++) {
    peer_t p = {0};
    peer_ring_t ring;
    em_client_t c;
    size_t before = 0;
    unsigned spans = 0;
    int counter = refuse ? EM_CLIENT_RING_REFUSED : EM_CLIENT_RING_UNANSWERED;
    (void)state;
    peer_client_open(&p, &c);
    assert_int_equal(em_client_record(&c, "infer", em_client_now_ns(), 10), 0);
    spans++;
    peer_expect_register(&p, (uint32_t)getpid(), &ring, &before);
    if (refuse) {
      peer_ack(&p, &ring, -EMFILE);
    }
    while (c.ring_counters[counter] == 0 && spans < LIVE_TRIES) { /* bounded: ~50 s */
      int rc = em_client_record(&c, "infer", em_client_now_ns(), 10);
      assert_true(rc == 0 || rc == -EAGAIN); /* the peer reads nothing meanwhile */
      spans++;
      sleep_ms(10);
    }
    assert_int_equal(c.ring_counters[counter], 1);
    for (int i = 0; i < 10; i++) {
      int rc = em_client_record(&c, "infer", em_client_now_ns(), 10);
      assert_true(rc == 0 || rc == -EAGAIN);
      spans++;
    }
    assert_int_equal(c.ring_counters[EM_CLIENT_RING_ACCEPTED], 0);
    assert_int_equal(c.ring_counters[EM_CLIENT_RING_WRITTEN], 0);
    assert_int_equal(c.ring_counters[EM_CLIENT_RING_REGISTRATIONS], 1);
    assert_int_equal(c.sent + c.dropped[EM_CLIENT_DROP_QUEUE_FULL], spans);
    assert_true(em_client_dropped_total(&c) == c.dropped[EM_CLIENT_DROP_QUEUE_FULL]);
    assert_true(head_of(&ring) == 0);
    for (unsigned i = 0; i < c.sent; i++) {
      em_span_t span;
      peer_recv_span(&p, &span);
    }
    peer_client_close(&p, &c, &ring);
  }
}

/* The agent's socket is not bound yet at the first span: the register cannot be sent, no agent
 * saw it, so it goes out again a second later (never sooner) and the ring goes live. */
static void ring_unsent_register_is_sent_again_a_second_later(void **state) {
  peer_t p = {0};
  peer_ring_t ring;
  em_client_t c;
  size_t before = 0;
  unsigned spans = 0;
  uint64_t t0;
  (void)state;
  peer_open(&p, RING_SLOTS, NULL, 0);
  close(p.fd); /* the page stays: an agent is announced, its socket is not there yet */
  assert_int_equal(unlink(p.path), 0);
  assert_int_equal(em_client_open(&c, p.path), 0);
  t0 = em_client_now_ns();
  (void)em_client_record(&c, "infer", em_client_now_ns(), 10);
  assert_int_equal(c.ring_counters[EM_CLIENT_RING_UNSENT], 1);
  assert_int_equal(c.ring_counters[EM_CLIENT_RING_REGISTRATIONS], 0);

  p.fd = bound_socket(p.path, SOCK_DGRAM);
  while (c.ring_counters[EM_CLIENT_RING_REGISTRATIONS] == 0 && spans < LIVE_TRIES) {
    (void)em_client_record(&c, "infer", em_client_now_ns(), 10);
    spans++;
    sleep_ms(1);
  }
  assert_int_equal(c.ring_counters[EM_CLIENT_RING_REGISTRATIONS], 1);
  assert_true(em_client_now_ns() - t0 >= 1000000000ull);
  assert_int_equal(c.ring_counters[EM_CLIENT_RING_UNSENT], 1);
  peer_expect_register(&p, (uint32_t)getpid(), &ring, &before);
  assert_true(ring.start == 0);
  peer_ack(&p, &ring, 0);
  (void)spans_until_live(&c, "infer");
  assert_int_equal(c.ring_counters[EM_CLIENT_RING_ACCEPTED], 1);
  assert_int_equal(em_client_record(&c, "infer", em_client_now_ns(), 10), 0);
  assert_true(head_of(&ring) == 2); /* the span that found the ack, and this one */
  peer_client_close(&p, &c, &ring);
}

/* A span over its stage's hard deadline: in the ring and as a kind-6 datagram; one under it
 * and a stage with no deadline: the ring only. */
static void ring_hard_miss_also_sends_kind_6(void **state) {
  peer_t p = {0};
  peer_ring_t ring;
  em_client_t c;
  em_deadline_t deadlines[2];
  folded_t got;
  size_t before = 0;
  uint8_t buf[128];
  int fd;
  em_ring_dgram_t d;
  uint64_t now;
  (void)state;
  memset(deadlines, 0, sizeof(deadlines));
  snprintf(deadlines[0].stage, sizeof(deadlines[0].stage), "infer");
  deadlines[0].deadline_ns = 5000;
  snprintf(deadlines[1].stage, sizeof(deadlines[1].stage), "post");
  deadlines[1].deadline_ns = 100;
  peer_open(&p, RING_SLOTS, deadlines, 2);
  assert_int_equal(em_client_open(&c, p.path), 0);
  assert_int_equal(em_client_record(&c, "warmup", em_client_now_ns(), 1), 0);
  peer_expect_register(&p, (uint32_t)getpid(), &ring, &before);
  peer_ack(&p, &ring, 0);
  assert_int_equal(peer_recv(&p, buf, sizeof(buf), 0, &fd, NULL, NULL), EM_SPAN_DGRAM_BYTES);

  now = em_client_now_ns();
  assert_int_equal(em_client_record_frame(&c, "infer", 11, now, 4000), 0);  /* under */
  assert_int_equal(em_client_record_frame(&c, "infer", 12, now, 9000), 0);  /* over */
  assert_int_equal(em_client_record_frame(&c, "other", 13, now, 99999), 0); /* no deadline */
  assert_int_equal(em_client_record_frame(&c, "infer", 14, now, 5000), 0);  /* at: not over */

  ssize_t n = peer_recv(&p, buf, sizeof(buf), 0, &fd, NULL, NULL);
  assert_int_equal(n, EM_SPAN_DGRAM_BYTES);
  assert_int_equal(em_ring_dgram_unpack(buf, (size_t)n, &d), 0);
  assert_int_equal(d.kind, EM_DGRAM_HARD_MISS);
  assert_true(d.span.frame_id == 12 && d.span.start_ns == now && d.span.duration_ns == 9000);
  assert_string_equal(d.span.stage, "infer");
  assert_int_equal(peer_recv(&p, buf, sizeof(buf), 1, &fd, NULL, NULL), -1);
  assert_int_equal(c.ring_counters[EM_CLIENT_RING_HARD_MISS], 1);

  (void)drain_all(&ring, &got);
  assert_int_equal(got.n, 4); /* the miss is in the ring too */
  assert_true(got.spans[1].frame_id == 12 && got.spans[1].duration_ns == 9000);
  peer_client_close(&p, &c, &ring);
}

/* A new agent (the deadline page renamed into place: another inode): the ring registers
 * again at its current head, and the spans since the old agent was last seen are counted. */
static void ring_new_agent_registers_again_at_the_head(void **state) {
  peer_t p = {0};
  peer_ring_t ring;
  peer_ring_t again;
  em_client_t c;
  size_t before = 0;
  unsigned spans = 0;
  uint64_t head;
  (void)state;
  peer_client_open(&p, &c);
  assert_int_equal(em_client_record(&c, "infer", em_client_now_ns(), 1), 0);
  peer_expect_register(&p, (uint32_t)getpid(), &ring, &before);
  peer_ack(&p, &ring, 0);
  (void)spans_until_live(&c, "infer");
  assert_int_equal(c.ring_counters[EM_CLIENT_RING_REGISTRATIONS], 1);

  peer_write_page(&p, RING_SLOTS, NULL, 0); /* a new file: a new agent */
  while (c.ring_counters[EM_CLIENT_RING_REGISTRATIONS] == 1 && spans < LIVE_TRIES) {
    assert_int_equal(em_client_record(&c, "infer", em_client_now_ns(), 1), 0);
    spans++; /* one a ms: the page is checked once a second */
    sleep_ms(1);
  }
  assert_int_equal(c.ring_counters[EM_CLIENT_RING_REGISTRATIONS], 2);
  head = head_of(&ring);
  peer_expect_register(&p, (uint32_t)getpid(), &again, &before);
  assert_true(again.start == head); /* at the current head, the same memfd's memory */
  assert_true(again.header.head == head);
  assert_true(head > 1);
  assert_true(c.ring_counters[EM_CLIENT_RING_AGENT_RESTART] >= 1);
  assert_true(c.ring_counters[EM_CLIENT_RING_AGENT_RESTART] <= head);
  peer_ack(&p, &again, 0);
  (void)spans_until_live(&c, "infer");
  assert_true(head_of(&again) == head + 1); /* the span that found the second ack */
  em_client_close(&c);
  peer_ring_unmap(&again);
  peer_ring_unmap(&ring);
  peer_close(&p);
}

/* ---- Four writer threads ---- */

typedef struct {
  const char *path;
  pthread_t thread;
  uint32_t tid;
  unsigned attempts;
  em_client_t client; /* Closed by the main thread after the join. */
} writer_t;

static void *writer_main(void *arg) {
  writer_t *w = (writer_t *)arg;
  char stage[16];
  w->tid = (uint32_t)gettid();
  snprintf(stage, sizeof(stage), "t%u", w->tid % 1000u);
  if (em_client_open(&w->client, w->path) != 0) {
    return NULL;
  }
  w->attempts = spans_until_live(&w->client, stage);
  for (unsigned i = 0; i < THREAD_SPANS; i++) {
    (void)em_client_record(&w->client, stage, em_client_now_ns(), i);
    w->attempts++;
  }
  return NULL; /* thread exit: the key destructor closes the ring (state 2) */
}

static void ring_four_threads_four_rings_every_span_counted(void **state) {
  peer_t p = {0};
  writer_t writers[THREADS];
  peer_ring_t rings[THREADS];
  size_t datagrams = 0;
  uint64_t written = 0;
  uint64_t sent = 0;
  uint64_t dropped = 0;
  uint64_t attempts = 0;
  uint64_t folded = 0;
  (void)state;
  peer_open(&p, THREAD_RING_SLOTS, NULL, 0);
  memset(writers, 0, sizeof(writers));
  for (int i = 0; i < THREADS; i++) {
    writers[i].path = p.path;
    assert_int_equal(pthread_create(&writers[i].thread, NULL, writer_main, &writers[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) {
    peer_expect_register(&p, (uint32_t)getpid(), &rings[i], &datagrams);
    peer_ack(&p, &rings[i], 0);
  }
  for (int i = 0; i < THREADS; i++) {
    assert_int_equal(pthread_join(writers[i].thread, NULL), 0);
  }
  for (;;) {
    uint8_t buf[128];
    int fd;
    ssize_t n = peer_recv(&p, buf, sizeof(buf), 1, &fd, NULL, NULL);
    if (n < 0) {
      break;
    }
    assert_int_equal(n, EM_SPAN_DGRAM_BYTES);
    assert_int_equal(buf[2], 1);
    datagrams++;
  }
  for (int i = 0; i < THREADS; i++) {
    em_client_t *c = &writers[i].client;
    folded_t got;
    em_ring_counts_t counts;
    int matched = 0;
    assert_int_equal(c->ring_counters[EM_CLIENT_RING_ACCEPTED], 1);
    assert_int_equal(c->ring_counters[EM_CLIENT_RING_WRITTEN],
                     THREAD_SPANS + 1); /* + the acked one */
    written += c->ring_counters[EM_CLIENT_RING_WRITTEN];
    sent += c->sent;
    dropped += em_client_dropped_total(c);
    attempts += writers[i].attempts;
    /* Each ring: its own thread, closed when the thread ended, every slot valid. */
    assert_int_equal(state_of(&rings[i]), EM_RING_STATE_CLOSED);
    counts = drain_all(&rings[i], &got);
    assert_true(counts.overwritten == 0 && counts.bad_slot == 0);
    folded += counts.folded;
    for (int j = 0; j < THREADS; j++) {
      matched += rings[i].header.tid == writers[j].tid;
      if (j != i) {
        assert_true(rings[i].memfd != rings[j].memfd);
      }
    }
    assert_int_equal(matched, 1);
    em_client_close(c); /* another thread's ring: nothing of it is closed here */
    assert_int_equal(c->ring_counters[EM_CLIENT_RING_CLOSED], 0);
  }
  assert_true(written == THREADS * (THREAD_SPANS + 1));
  assert_true(folded == written);
  assert_true(datagrams == sent);
  assert_true(attempts == written + sent + dropped);
  for (int i = 0; i < THREADS; i++) {
    peer_ring_unmap(&rings[i]);
  }
  peer_close(&p);
}

/* A forked child forgets the parent's ring (never writes it) and registers its own. */
static void ring_forked_child_registers_its_own(void **state) {
  peer_t p = {0};
  peer_ring_t parent_ring;
  peer_ring_t child_ring;
  em_client_t c;
  size_t before = 0;
  pid_t child;
  int status;
  folded_t got;
  (void)state;
  peer_client_open(&p, &c);
  assert_int_equal(em_client_record(&c, "parent", em_client_now_ns(), 1), 0);
  peer_expect_register(&p, (uint32_t)getpid(), &parent_ring, &before);
  peer_ack(&p, &parent_ring, 0);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(em_client_record(&c, "parent", em_client_now_ns(), 1), 0);
  }
  assert_true(head_of(&parent_ring) == 3);

  child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    /* The child: its first span registers a new ring; once acked, 11 spans go to it. */
    unsigned tries = spans_until_live(&c, "child");
    for (int i = 0; i < 10; i++) {
      (void)em_client_record(&c, "child", em_client_now_ns(), 2);
    }
    _exit(tries < LIVE_TRIES && c.ring_counters[EM_CLIENT_RING_REGISTRATIONS] == 2 ? 0 : 1);
  }
  peer_expect_register(&p, (uint32_t)child, &child_ring, &before);
  {
    struct stat a;
    struct stat b;
    assert_int_equal(fstat(parent_ring.memfd, &a), 0);
    assert_int_equal(fstat(child_ring.memfd, &b), 0);
    assert_true(a.st_ino != b.st_ino); /* another memfd */
  }
  peer_ack(&p, &child_ring, 0);
  assert_int_equal(waitpid(child, &status, 0), child);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  assert_true(head_of(&child_ring) == 11); /* 10 + the span that found the ack */
  (void)drain_all(&child_ring, &got);
  assert_int_equal(got.n, 11);
  assert_string_equal(got.spans[0].stage, "child");
  assert_true(head_of(&parent_ring) == 3); /* untouched by the child */
  assert_int_equal(state_of(&parent_ring), EM_RING_STATE_OPEN);

  /* The parent's ring is still live for the parent. */
  assert_int_equal(em_client_record(&c, "parent", em_client_now_ns(), 1), 0);
  assert_true(head_of(&parent_ring) == 4);
  em_client_close(&c);
  while (peer_recv(&p, (uint8_t[128]){0}, 128, 1, &status, NULL, NULL) >= 0) {
  }
  peer_ring_unmap(&parent_ring);
  peer_ring_unmap(&child_ring);
  peer_close(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(ring_bytes_match_wire_md),
      cmocka_unit_test(ring_datagrams_until_the_ack_then_ring_only),
      cmocka_unit_test(ring_unanswered_or_refused_falls_back_to_datagrams),
      cmocka_unit_test(ring_unsent_register_is_sent_again_a_second_later),
      cmocka_unit_test(ring_hard_miss_also_sends_kind_6),
      cmocka_unit_test(ring_new_agent_registers_again_at_the_head),
      cmocka_unit_test(ring_four_threads_four_rings_every_span_counted),
      cmocka_unit_test(ring_forked_child_registers_its_own),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
