/*
 * test_ring.c - unit tests of proto/src/ring.c: span ring v2, its v2 datagrams and the
 * deadline page, as proto/WIRE.md ("Span ring v2", "Deadline page v1") describes them.
 *
 * Covered: header init and read, the documented layout and the read's refusals in order; the
 * writer's refusals; the reader's previous-head rule (a drain consumes only what the previous
 * drain saw, a final drain up to the current head); the accounting identity against a model
 * of WIRE.md's reader for random writes and drains, the writer lapping the reader included;
 * scribbled slots and heads (counted, never folded, bounded work per drain); a writer racing
 * the reader between two batches; the v2 datagrams and the deadline page (round trips,
 * layout, refusals, seqlock); the golden vectors in proto/vectors/wire; and a writer thread
 * racing the reader on one ring, which must never hand on a torn slot.
 */
#define _GNU_SOURCE /* aligned_alloc, pthread under -std=c11. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edgemon/ring.h"
#include "wire_file.h"

#ifndef EM_VECTORS_DIR
#error "EM_VECTORS_DIR (absolute path of proto/vectors) must be defined"
#endif

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#define HDR_OFF_HEAD  32u
#define HDR_OFF_STATE 48u

/* ---- Helpers ---- */

static void put_le32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) {
    p[i] = (uint8_t)(v >> (8 * i));
  }
}

static void put_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) {
    p[i] = (uint8_t)(v >> (8 * i));
  }
}

static uint32_t get_le32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint64_t get_le64(const uint8_t *p) {
  return (uint64_t)get_le32(p) | ((uint64_t)get_le32(p + 4) << 32);
}

/* Memory for a ring of slot_count slots as mmap gives it: 8-byte aligned, zeroed. */
static uint8_t *alloc_ring(uint32_t slot_count) {
  size_t len = em_ring_bytes(slot_count);
  uint8_t *mem = aligned_alloc(8, (len + 7u) & ~(size_t)7u);
  assert_non_null(mem);
  memset(mem, 0, len);
  return mem;
}

static uint8_t *new_ring(uint32_t slot_count) {
  uint8_t *mem = alloc_ring(slot_count);
  assert_int_equal(em_ring_init(mem, slot_count, 4242, 4243, 987654), 0);
  return mem;
}

/* A new ring (new_ring()) and *r a reader of it registered at position 0; free() the ring. */
static uint8_t *new_ring_and_reader(em_ring_reader_t *r, uint32_t slot_count) {
  assert_int_equal(em_ring_reader_init(r, slot_count, 0), 0);
  return new_ring(slot_count);
}

static uint8_t *slot_at(uint8_t *mem, uint32_t slot_count, uint64_t pos) {
  return mem + EM_RING_HEADER_BYTES + (pos & (slot_count - 1u)) * EM_RING_SLOT_BYTES;
}

/* The stage a test span of frame f carries. */
static const char *stage_for(uint64_t frame) {
  static const char *const stages[] = {"infer", "camera.rx", "pre.process", "net:b-1_v2"};
  return stages[frame % ARRAY_LEN(stages)];
}

/*
 * The test span of frame f: every 7th frame a heartbeat, the others spans with start 10 f and
 * duration 3 f, so a reader can tell from any span alone whether its fields belong together.
 */
static em_span_t span_for(uint64_t frame) {
  em_span_t s = {.kind = frame % 7 == 0 ? EM_DGRAM_HEARTBEAT : EM_DGRAM_SPAN,
                 .frame_id = frame,
                 .start_ns = frame * 10u,
                 .duration_ns = frame % 7 == 0 ? 0 : frame * 3u};
  strcpy(s.stage, stage_for(frame));
  return s;
}

static bool span_consistent(const em_span_t *s) {
  em_span_t want = span_for(s->frame_id);
  return s->kind == want.kind && s->start_ns == want.start_ns &&
         s->duration_ns == want.duration_ns &&
         memcmp(s->stage, want.stage, EM_STAGE_FIELD_BYTES) == 0;
}

/* Writes frames pos + 1 .. pos + n at the writer's position *pos. */
static void write_frames(uint8_t *mem, uint32_t slot_count, uint64_t *pos, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) {
    em_span_t s = span_for(*pos + 1u);
    assert_int_equal(em_ring_write(mem, slot_count, pos, &s), 0);
  }
}

/* What a drain handed on. */
typedef struct {
  size_t n;
  uint64_t last_frame;
  uint64_t frame_sum;
  size_t inconsistent; /* Spans whose fields do not belong together, or out of order. */
  em_span_t spans[256];
} collect_t;

static void collect(void *ctx, const em_span_t *span) {
  collect_t *c = ctx;
  if (!span_consistent(span) || (c->n > 0 && span->frame_id <= c->last_frame)) {
    c->inconsistent++;
  }
  if (c->n < ARRAY_LEN(c->spans)) {
    c->spans[c->n] = *span;
  }
  c->n++;
  c->last_frame = span->frame_id;
  c->frame_sum += span->frame_id;
}

static uint64_t classified(const em_ring_counts_t *c) {
  return c->folded + c->overwritten + c->bad_slot;
}

/* ---- Header ---- */

static void ring_init_then_header_read_round_trips(void **state) {
  (void)state;
  static const uint32_t counts[] = {EM_RING_MIN_SLOTS, 128, EM_RING_DEFAULT_SLOTS,
                                    EM_RING_MAX_SLOTS};
  for (size_t i = 0; i < ARRAY_LEN(counts); i++) {
    uint8_t *mem = alloc_ring(counts[i]);
    assert_int_equal(em_ring_init(mem, counts[i], 0xfffffffeu, 77, UINT64_MAX - 1), 0);
    static const uint8_t layout[12] = {'E', 'M', 'R', 'G', 2, 0, 128, 0, 64, 0, 0, 0};
    assert_memory_equal(mem, layout, sizeof layout);
    assert_int_equal(get_le32(mem + 12), counts[i]);
    em_ring_header_t h;
    assert_int_equal(em_ring_header_read(mem, em_ring_bytes(counts[i]), &h), 0);
    assert_int_equal(h.slot_count, counts[i]);
    assert_int_equal(h.pid, 0xfffffffeu);
    assert_int_equal(h.tid, 77);
    assert_true(h.start_time == UINT64_MAX - 1);
    assert_true(h.head == 0 && h.lost == 0);
    assert_int_equal(h.state, EM_RING_STATE_OPEN);

    uint64_t pos = 0;
    write_frames(mem, counts[i], &pos, 3);
    em_ring_close(mem);
    assert_int_equal(em_ring_header_read(mem, em_ring_bytes(counts[i]), &h), 0);
    assert_true(h.head == 3 && pos == 3);
    assert_int_equal(h.state, EM_RING_STATE_CLOSED);
    assert_int_equal(get_le32(mem + HDR_OFF_STATE), EM_RING_STATE_CLOSED);
    free(mem);
  }
}

static void ring_init_refuses_bad_arguments(void **state) {
  (void)state;
  uint8_t *mem = alloc_ring(1024);
  assert_int_equal(em_ring_init(NULL, 64, 1, 1, 1), EM_PROTO_EINVAL);
  assert_int_equal(em_ring_init(mem + 4, 64, 1, 1, 1), EM_PROTO_EINVAL);
  static const uint32_t bad[] = {0, 1, 32, 63, 96, 100, 65535, 65537, 131072, UINT32_MAX};
  for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
    assert_int_equal(em_ring_init(mem, bad[i], 1, 1, 1), EM_PROTO_ERANGE);
  }
  free(mem);
}

/* One header change and the code header_read must answer. */
typedef struct {
  const char *what;
  size_t offset;
  uint8_t bytes[4];
  size_t n;
  long len_delta; /* Added to the ring's length. */
  int code;
} header_row_t;

static void header_read_refuses_each_bad_field(void **state) {
  (void)state;
  static const header_row_t rows[] = {
      {"magic byte 0", 0, {'X'}, 1, 0, EM_PROTO_EMAGIC},
      {"magic byte 3", 3, {'S'}, 1, 0, EM_PROTO_EMAGIC},
      {"version 1", 4, {1, 0}, 2, 0, EM_PROTO_EVERSION},
      {"version 3", 4, {3, 0}, 2, 0, EM_PROTO_EVERSION},
      {"version 0x0102", 4, {2, 1}, 2, 0, EM_PROTO_EVERSION},
      {"header_size 64", 6, {64, 0}, 2, 0, EM_PROTO_ESIZE},
      {"header_size 0x180", 6, {128, 1}, 2, 0, EM_PROTO_ESIZE},
      {"slot_size 32", 8, {32, 0}, 2, 0, EM_PROTO_ESIZE},
      {"slot_size 0x140", 8, {64, 1}, 2, 0, EM_PROTO_ESIZE},
      {"len one short", 0, {'E'}, 1, -1, EM_PROTO_ESIZE},
      {"len one slot short", 0, {'E'}, 1, -64, EM_PROTO_ESIZE},
      {"len one long", 0, {'E'}, 1, 1, EM_PROTO_ESIZE},
      {"len one slot long", 0, {'E'}, 1, 64, EM_PROTO_ESIZE},
      {"len header only", 0, {'E'}, 1, -(long)(64 * EM_RING_SLOT_BYTES), EM_PROTO_ESIZE},
      {"len 0", 0, {'E'}, 1, -(long)(128 + 64 * 64), EM_PROTO_ESIZE},
      {"slot_count 128 for a 64-slot length", 12, {128, 0, 0, 0}, 4, 0, EM_PROTO_ESIZE},
      {"reserved u16 low", 10, {1}, 1, 0, EM_PROTO_ERANGE},
      {"reserved u16 high", 11, {0x80}, 1, 0, EM_PROTO_ERANGE},
      {"reserved tail first byte", 52, {1}, 1, 0, EM_PROTO_ERANGE},
      {"reserved tail middle", 90, {0x20}, 1, 0, EM_PROTO_ERANGE},
      {"reserved tail last byte", 127, {0xff}, 1, 0, EM_PROTO_ERANGE},
      {"state 0", 48, {0, 0, 0, 0}, 4, 0, EM_PROTO_ERANGE},
      {"state 3", 48, {3, 0, 0, 0}, 4, 0, EM_PROTO_ERANGE},
      {"state 0x101", 48, {1, 1, 0, 0}, 4, 0, EM_PROTO_ERANGE},
      {"state high byte", 48, {1, 0, 0, 0x80}, 4, 0, EM_PROTO_ERANGE},
  };
  const uint32_t slots = 64;
  uint8_t *good = new_ring(slots);
  uint8_t *mem = alloc_ring(slots * 2); /* Room for the longer lengths. */
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    memcpy(mem, good, em_ring_bytes(slots));
    memcpy(mem + rows[i].offset, rows[i].bytes, rows[i].n);
    em_ring_header_t h = {.slot_count = 12345};
    size_t len = (size_t)((long)em_ring_bytes(slots) + rows[i].len_delta);
    int rc = em_ring_header_read(mem, len, &h);
    if (rc != rows[i].code) {
      print_error("%s: got %d, want %d\n", rows[i].what, rc, rows[i].code);
      fail();
    }
    assert_int_equal(h.slot_count, 12345); /* Untouched on error. */
  }
  free(mem);
  free(good);
}

/* A slot count that is no power of two, or out of range, with a length that matches it. */
static void header_read_refuses_slot_count_out_of_range(void **state) {
  (void)state;
  static const uint32_t bad[] = {32, 63, 65, 96, 100, 1000, 65535, 131072};
  for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
    uint8_t *mem = alloc_ring(bad[i]);
    uint8_t *good = new_ring(64);
    memcpy(mem, good, EM_RING_HEADER_BYTES);
    put_le32(mem + 12, bad[i]);
    em_ring_header_t h;
    int rc = em_ring_header_read(mem, em_ring_bytes(bad[i]), &h);
    if (rc != EM_PROTO_ERANGE) {
      print_error("slot_count %u: got %d, want ERANGE\n", bad[i], rc);
      fail();
    }
    free(good);
    free(mem);
  }
}

/* Every field bad at once: the codes come in WIRE.md's order as each is fixed in turn. */
static void header_read_checks_in_documented_order(void **state) {
  (void)state;
  uint8_t *good = new_ring(64);
  uint8_t *mem = alloc_ring(64);
  memcpy(mem, good, em_ring_bytes(64));
  mem[0] = 'X';
  mem[4] = 1;
  mem[6] = 64;
  mem[10] = 1;
  mem[48] = 7;
  struct {
    size_t offset;
    int code;
  } steps[] = {{0, EM_PROTO_EMAGIC},
               {4, EM_PROTO_EVERSION},
               {6, EM_PROTO_ESIZE},
               {10, EM_PROTO_ERANGE},
               {48, EM_PROTO_ERANGE}};
  em_ring_header_t h;
  for (size_t i = 0; i < ARRAY_LEN(steps); i++) {
    assert_int_equal(em_ring_header_read(mem, em_ring_bytes(64), &h), steps[i].code);
    mem[steps[i].offset] = good[steps[i].offset];
  }
  assert_int_equal(em_ring_header_read(mem, em_ring_bytes(64), &h), 0);
  assert_int_equal(em_ring_header_read(NULL, em_ring_bytes(64), &h), EM_PROTO_EINVAL);
  assert_int_equal(em_ring_header_read(mem, em_ring_bytes(64), NULL), EM_PROTO_EINVAL);
  free(mem);
  free(good);
}

/* ---- Writer ---- */

static void ring_write_lays_out_the_slot_and_publishes_head(void **state) {
  (void)state;
  uint8_t *mem = new_ring(64);
  uint64_t pos = 0;
  write_frames(mem, 64, &pos, 65); /* Position 64 lands in slot 0 again. */
  assert_true(pos == 65);
  assert_true(get_le64(mem + HDR_OFF_HEAD) == 65);
  const uint8_t *s = slot_at(mem, 64, 64);
  em_span_t want = span_for(65);
  assert_int_equal(get_le32(s), 65);
  assert_int_equal(s[4], want.kind);
  assert_int_equal(s[5] | s[6] | s[7], 0);
  assert_true(get_le64(s + 8) == 65 && get_le64(s + 16) == 650 && get_le64(s + 24) == 195);
  assert_memory_equal(s + 32, want.stage, EM_STAGE_FIELD_BYTES);
  /* A heartbeat's duration travels as 0 whatever the caller left in it. */
  em_span_t hb = span_for(70);
  hb.duration_ns = 99;
  assert_int_equal(em_ring_write(mem, 64, &pos, &hb), 0);
  assert_true(get_le64(slot_at(mem, 64, 65) + 24) == 0);
  free(mem);
}

static void ring_write_refuses_bad_spans_and_writes_nothing(void **state) {
  (void)state;
  uint8_t *mem = new_ring(64);
  uint64_t pos = 5;
  em_span_t s = span_for(1);
  struct {
    const char *what;
    int kind;
    const char *stage;
    int code;
  } rows[] = {
      {"subscribe", EM_DGRAM_SUBSCRIBE, "infer", EM_PROTO_EKIND},
      {"unsubscribe", EM_DGRAM_UNSUBSCRIBE, "infer", EM_PROTO_EKIND},
      {"level push", EM_DGRAM_LEVEL_PUSH, "infer", EM_PROTO_EKIND},
      {"kind 0", 0, "infer", EM_PROTO_EKIND},
      {"empty stage", EM_DGRAM_SPAN, "", EM_PROTO_ESTRING},
      {"space in stage", EM_DGRAM_SPAN, "in fer", EM_PROTO_ESTRING},
      {"slash in stage", EM_DGRAM_HEARTBEAT, "a/b", EM_PROTO_ESTRING},
  };
  uint8_t before[64 * 64 + 128];
  memcpy(before, mem, sizeof before);
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    s.kind = (em_dgram_kind_t)rows[i].kind;
    strcpy(s.stage, rows[i].stage);
    assert_int_equal(em_ring_write(mem, 64, &pos, &s), rows[i].code);
  }
  s = span_for(1);
  memset(s.stage, 'a', sizeof s.stage); /* No NUL at all. */
  assert_int_equal(em_ring_write(mem, 64, &pos, &s), EM_PROTO_ESTRING);
  assert_true(pos == 5);
  assert_memory_equal(before, mem, sizeof before);
  s = span_for(1);
  assert_int_equal(em_ring_write(NULL, 64, &pos, &s), EM_PROTO_EINVAL);
  assert_int_equal(em_ring_write(mem, 64, NULL, &s), EM_PROTO_EINVAL);
  assert_int_equal(em_ring_write(mem, 64, &pos, NULL), EM_PROTO_EINVAL);
  assert_true(pos == 5);
  free(mem);
}

/* ---- Reader: preconditions and the stage alphabet ---- */

static void drain_of_an_unaligned_mapping_folds_nothing(void **state) {
  (void)state;
  em_ring_reader_t r;
  uint8_t *mem = new_ring_and_reader(&r, 64);
  uint64_t pos = 0;
  collect_t c = {0};
  write_frames(mem, 64, &pos, 5);
  assert_int_equal(em_ring_reader_drain(&r, mem + 4, true, collect, &c), 0);
  assert_int_equal(c.n, 0);
  assert_true(classified(&r.counts) == 0 && r.next == 0);
  assert_int_equal(em_ring_reader_drain(&r, mem, true, collect, &c), 5); /* aligned: all */
  free(mem);
}

/* Every byte value against WIRE.md's stage alphabet [A-Za-z0-9_.:-], one-byte names. */
static void stage_alphabet_is_exactly_the_documented_one(void **state) {
  (void)state;
  for (int b = 1; b < 256; b++) {
    bool want = (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') ||
                b == '_' || b == '.' || b == ':' || b == '-';
    char name[2] = {(char)b, 0};
    if (em_stage_name_valid(name) != want) {
      print_error("byte 0x%02x: valid %d, want %d\n", b, !want, want);
      fail();
    }
  }
}

/* ---- Reader: the previous-head rule ---- */

static void drain_consumes_only_up_to_the_previous_head(void **state) {
  (void)state;
  em_ring_reader_t r;
  uint8_t *mem = new_ring_and_reader(&r, 64);
  uint64_t pos = 0;
  collect_t c = {0};

  write_frames(mem, 64, &pos, 7); /* Frame 7 is a heartbeat. */
  assert_int_equal(em_ring_reader_drain(&r, mem, false, collect, &c), 0);
  assert_int_equal(c.n, 0);
  assert_true(classified(&r.counts) == 0 && r.seen == 7);

  write_frames(mem, 64, &pos, 3); /* Written after that drain: not consumed by the next. */
  assert_int_equal(em_ring_reader_drain(&r, mem, false, collect, &c), 7);
  assert_int_equal(c.n, 7);
  for (size_t i = 0; i < 7; i++) {
    em_span_t want = span_for(i + 1);
    assert_true(c.spans[i].frame_id == i + 1);
    assert_int_equal(c.spans[i].kind, want.kind);
    assert_true(c.spans[i].start_ns == want.start_ns);
    assert_true(c.spans[i].duration_ns == want.duration_ns);
    assert_string_equal(c.spans[i].stage, want.stage);
  }
  assert_int_equal(c.spans[6].kind, EM_DGRAM_HEARTBEAT);
  assert_true(c.spans[6].duration_ns == 0);

  write_frames(mem, 64, &pos, 2);
  assert_int_equal(em_ring_reader_drain(&r, mem, false, collect, &c), 3);
  assert_true(c.last_frame == 10);
  /* The final drain reads up to the current head. */
  assert_int_equal(em_ring_reader_drain(&r, mem, true, collect, &c), 2);
  assert_true(c.last_frame == 12 && c.n == 12 && c.inconsistent == 0);
  assert_true(r.counts.folded == 12 && r.counts.overwritten == 0 && r.counts.bad_slot == 0);
  /* Nothing more: drains are idempotent once caught up. */
  assert_int_equal(em_ring_reader_drain(&r, mem, true, collect, &c), 0);
  assert_int_equal(em_ring_reader_drain(&r, mem, false, collect, &c), 0);
  assert_true(r.counts.folded == 12 && r.counts.bad_head == 0);
  free(mem);
}

/* A ring registered at head 100 (the writer wrote before): reading starts there. */
static void drain_starts_at_the_registration_position(void **state) {
  (void)state;
  uint8_t *mem = new_ring(64);
  uint64_t pos = 0;
  write_frames(mem, 64, &pos, 100);
  em_ring_reader_t r;
  assert_int_equal(em_ring_reader_init(&r, 64, pos), 0);
  write_frames(mem, 64, &pos, 5);
  collect_t c = {0};
  assert_int_equal(em_ring_reader_drain(&r, mem, false, collect, &c), 0);
  assert_int_equal(em_ring_reader_drain(&r, mem, false, collect, &c), 5);
  assert_true(c.spans[0].frame_id == 101 && c.last_frame == 105 && c.inconsistent == 0);
  assert_true(classified(&r.counts) == 5);
  free(mem);
}

static void reader_init_refuses_bad_slot_counts(void **state) {
  (void)state;
  em_ring_reader_t r;
  assert_int_equal(em_ring_reader_init(NULL, 64, 0), EM_PROTO_EINVAL);
  static const uint32_t bad[] = {0, 32, 100, 131072};
  for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
    assert_int_equal(em_ring_reader_init(&r, bad[i], 0), EM_PROTO_ERANGE);
  }
}

/* ---- Reader: accounting against a model of WIRE.md's reader ---- */

typedef struct {
  uint64_t next, seen, folded, overwritten, frame_sum;
} model_t;

/*
 * WIRE.md's drain on a ring whose head does not move during the drain (h2 == h), with the
 * one exception ring.c makes: a final drain (the writer has exited) counts no position as
 * possibly being overwritten. Returns the number of positions it folds.
 */
static uint64_t model_drain(model_t *m, uint64_t n, uint64_t h, bool final) {
  uint64_t limit = final ? h : m->seen;
  if (limit - m->next > n) {
    m->overwritten += limit - n - m->next;
    m->next = limit - n;
  }
  uint64_t folded = 0;
  for (uint64_t q = m->next; q < limit; q++) {
    if (!final && q + n <= h + 1) {
      m->overwritten++;
    } else {
      folded++;
      m->frame_sum += q + 1;
    }
  }
  m->folded += folded;
  m->next = limit;
  m->seen = h;
  return folded;
}

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void accounting_holds_for_random_writes_and_drains(void **state) {
  (void)state;
  static const uint32_t counts[] = {64, 128, 1024};
  for (size_t ci = 0; ci < ARRAY_LEN(counts); ci++) {
    const uint32_t n = counts[ci];
    uint8_t *mem = new_ring(n);
    uint64_t seed = 0x9e3779b97f4a7c15u + ci;
    uint64_t pos = 0;
    write_frames(mem, n, &pos, rng_next(&seed) % (3u * n)); /* Before registration. */
    const uint64_t start = pos;
    em_ring_reader_t r;
    assert_int_equal(em_ring_reader_init(&r, n, start), 0);
    model_t m = {.next = start, .seen = start};
    collect_t c = {0};
    for (int step = 0; step < 400; step++) {
      uint64_t pick = rng_next(&seed) % 10;
      uint64_t k = pick < 5   ? rng_next(&seed) % 8
                   : pick < 8 ? rng_next(&seed) % (n + 2)
                              : rng_next(&seed) % (5u * n); /* Laps the reader. */
      write_frames(mem, n, &pos, k);
      uint64_t want = model_drain(&m, n, pos, false);
      size_t got = em_ring_reader_drain(&r, mem, false, collect, &c);
      assert_true(got == want);
      assert_true(got <= n);
      assert_true(r.next == m.next && r.seen == m.seen);
      assert_true(r.counts.folded == m.folded && r.counts.overwritten == m.overwritten);
      assert_true(classified(&r.counts) == r.next - start);
    }
    write_frames(mem, n, &pos, rng_next(&seed) % (3u * n));
    uint64_t want = model_drain(&m, n, pos, true);
    assert_true(em_ring_reader_drain(&r, mem, true, collect, &c) == want);
    assert_true(r.counts.folded == m.folded && r.counts.overwritten == m.overwritten);
    assert_true(r.counts.bad_slot == 0 && r.counts.bad_head == 0 && r.counts.skipped == 0);
    assert_true(classified(&r.counts) == pos - start);
    assert_true(c.n == m.folded && c.frame_sum == m.frame_sum && c.inconsistent == 0);
    assert_true(m.overwritten > 0); /* The sequence did lap the reader. */
    free(mem);
  }
}

/* Written 64 ahead of the previous head: the oldest positions are counted, not read. */
static void writer_lapping_the_reader_counts_overwritten(void **state) {
  (void)state;
  em_ring_reader_t r;
  uint8_t *mem = new_ring_and_reader(&r, 64);
  uint64_t pos = 0;
  collect_t c = {0};
  write_frames(mem, 64, &pos, 64);
  assert_int_equal(em_ring_reader_drain(&r, mem, false, collect, &c), 0);
  write_frames(mem, 64, &pos, 1); /* head 65: position 0 is gone, 1 and 2 may be going. */
  assert_int_equal(em_ring_reader_drain(&r, mem, false, collect, &c), 61);
  assert_true(r.counts.overwritten == 3 && c.spans[0].frame_id == 4 && c.last_frame == 64);

  write_frames(mem, 64, &pos, 200); /* head 265, previous head 65. */
  assert_int_equal(em_ring_reader_drain(&r, mem, false, collect, &c), 0);
  assert_true(r.counts.overwritten == 3 + 1);
  /* 265 - 64 - 65 lapped, then 201 and 202 within the margin, 203..264 folded. */
  assert_int_equal(em_ring_reader_drain(&r, mem, false, collect, &c), 62);
  assert_true(r.counts.overwritten == 4 + 136 + 2);
  assert_true(classified(&r.counts) == 265 && c.inconsistent == 0 && c.last_frame == 265);
  free(mem);
}

/* A writer that runs between two batches of one drain (from the span callback). */
typedef struct {
  collect_t c;
  uint8_t *mem;
  uint32_t slot_count;
  uint64_t *pos;
  uint64_t write_at_frame; /* When this frame is handed on, write `burst` frames. */
  uint64_t burst;
} racing_t;

static void collect_and_race(void *ctx, const em_span_t *span) {
  racing_t *rc = ctx;
  collect(&rc->c, span);
  if (span->frame_id == rc->write_at_frame) {
    for (uint64_t i = 0; i < rc->burst; i++) {
      em_span_t s = span_for(*rc->pos + 1u);
      if (em_ring_write(rc->mem, rc->slot_count, rc->pos, &s) != 0) {
        rc->c.inconsistent++;
      }
    }
  }
}

/*
 * 128 slots, two batches. After the first batch is classified the writer writes 100 more
 * spans, overwriting positions 0..99; the second batch (64..127) is copied after that, and
 * the head re-read after its copy says which of its slots may be torn: 64..101 overwritten
 * (one position of margin), 102..127 folded. None is counted bad and none is folded torn.
 */
static void writer_racing_between_batches_is_counted_overwritten(void **state) {
  (void)state;
  const uint32_t n = 128;
  uint8_t *mem = new_ring(n);
  uint64_t pos = 0;
  write_frames(mem, n, &pos, 128);
  em_ring_reader_t r;
  assert_int_equal(em_ring_reader_init(&r, n, 0), 0);
  racing_t rc = {.mem = mem, .slot_count = n, .pos = &pos, .write_at_frame = 64, .burst = 100};
  assert_int_equal(em_ring_reader_drain(&r, mem, false, collect_and_race, &rc), 0);
  size_t got = em_ring_reader_drain(&r, mem, false, collect_and_race, &rc);
  assert_true(pos == 228);
  /* First batch: h2 = 128, positions 0 and 1 within the margin, 2..63 folded. */
  assert_int_equal(got, 62 + 26);
  assert_true(r.counts.overwritten == 2 + 38);
  assert_true(r.counts.bad_slot == 0);
  assert_true(rc.c.inconsistent == 0 && rc.c.last_frame == 128);
  assert_true(classified(&r.counts) == 128);
  free(mem);
}

/* ---- Reader: scribbled slots and heads ---- */

typedef struct {
  const char *what;
  size_t offset; /* In the slot. */
  uint8_t bytes[32];
  size_t n;
} slot_row_t;

static void scribbled_slots_are_counted_bad_never_folded(void **state) {
  (void)state;
  /* Position 67 of a 64-slot ring: its seq is 68; the previous lap's was 4. */
  static const slot_row_t rows[] = {
      {"seq of the previous lap", 0, {4, 0, 0, 0}, 4},
      {"seq of the next lap", 0, {68 + 64, 0, 0, 0}, 4},
      {"seq 0 (never written)", 0, {0, 0, 0, 0}, 4},
      {"seq one ahead", 0, {69, 0, 0, 0}, 4},
      {"seq high byte", 0, {68, 0, 0, 1}, 4},
      {"kind 0", 4, {0}, 1},
      {"kind 3", 4, {3}, 1},
      {"kind 5", 4, {5}, 1},
      {"kind 16", 4, {16}, 1},
      {"kind 255", 4, {255}, 1},
      {"reserved byte 5", 5, {1}, 1},
      {"reserved byte 6", 6, {0x80}, 1},
      {"reserved byte 7", 7, {0xff}, 1},
      {"empty stage", 32, {0}, 1},
      {"space in stage", 32, {' '}, 1},
      {"slash in stage", 33, {'/'}, 1},
      {"high byte in stage", 34, {0xc3}, 1},
      {"junk after the NUL", 63, {'x'}, 1},
      {"junk right after the NUL", 38, {'a'}, 1}, /* "infer" + NUL ends at 37 */
      {"stage without NUL",
       32,
       {'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a',
        'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a'},
       32},
  };
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    uint8_t *mem = new_ring(64);
    uint64_t pos = 0;
    write_frames(mem, 64, &pos, 64);
    em_ring_reader_t r;
    assert_int_equal(em_ring_reader_init(&r, 64, 64), 0);
    /* Frames whose stage is "infer" (frame % 4 == 0) keep the row offsets meaningful. */
    em_span_t s;
    while (pos < 72) {
      s = span_for(68);
      s.frame_id = pos + 1;
      assert_int_equal(em_ring_write(mem, 64, &pos, &s), 0);
    }
    uint8_t *slot = slot_at(mem, 64, 67);
    memcpy(slot + rows[i].offset, rows[i].bytes, rows[i].n);
    collect_t c = {0};
    assert_int_equal(em_ring_reader_drain(&r, mem, false, collect, &c), 0);
    size_t got = em_ring_reader_drain(&r, mem, true, collect, &c);
    if (got != 7 || r.counts.bad_slot != 1) {
      print_error("%s: folded %zu, bad %llu\n", rows[i].what, got,
                  (unsigned long long)r.counts.bad_slot);
      fail();
    }
    for (size_t j = 0; j < c.n; j++) {
      assert_true(c.spans[j].frame_id != 68);
    }
    assert_true(r.counts.overwritten == 0 && classified(&r.counts) == 8);
    free(mem);
  }
}

static void set_head(uint8_t *mem, uint64_t head) {
  put_le64(mem + HDR_OFF_HEAD, head);
}

/* A head that moves backwards, or forward by more than 2^32, is counted and resynchronised. */
static void scribbled_head_is_counted_and_resynced(void **state) {
  (void)state;
  struct {
    const char *what;
    uint64_t head;
    bool final;
  } rows[] = {
      {"backwards by one", 9, false},
      {"backwards to 0", 0, true},
      {"forward by 2^32 + 1", 10 + (1ull << 32) + 1, false},
      {"forward to the maximum", UINT64_MAX, true},
  };
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    em_ring_reader_t r;
    uint8_t *mem = new_ring_and_reader(&r, 64);
    uint64_t pos = 0;
    collect_t c = {0};
    write_frames(mem, 64, &pos, 10);
    assert_int_equal(em_ring_reader_drain(&r, mem, false, collect, &c), 0);
    write_frames(mem, 64, &pos, 10); /* next 0, seen 10, head 20: set below seen or far above */
    set_head(mem, rows[i].head);
    assert_int_equal(em_ring_reader_drain(&r, mem, rows[i].final, collect, &c), 0);
    assert_true(r.counts.bad_head == 1);
    assert_true(r.counts.skipped == 10); /* Positions 0..9, published and never read. */
    assert_true(classified(&r.counts) == 0 && c.n == 0);
    assert_true(r.next == rows[i].head && r.seen == rows[i].head);
    /* Reading goes on from there, bounded whatever the ring holds. */
    size_t got = em_ring_reader_drain(&r, mem, rows[i].final, collect, &c);
    assert_true(got <= 64 && c.inconsistent == 0);
    free(mem);
  }
}

/* A head jump of exactly 2^32 is not scribbled; the lapped positions are counted, not read. */
static void head_jump_of_2_pow_32_is_bounded(void **state) {
  (void)state;
  em_ring_reader_t r;
  uint8_t *mem = new_ring_and_reader(&r, 64);
  uint64_t pos = 0;
  write_frames(mem, 64, &pos, 10);
  assert_int_equal(em_ring_reader_drain(&r, mem, false, NULL, NULL), 0);
  set_head(mem, 10 + (1ull << 32));
  /* Every position below the previous head may have been written over since. */
  assert_int_equal(em_ring_reader_drain(&r, mem, false, NULL, NULL), 0);
  assert_true(r.counts.bad_head == 0 && r.counts.overwritten == 10);
  size_t got = em_ring_reader_drain(&r, mem, true, NULL, NULL);
  assert_true(got <= 64);
  assert_true(r.counts.overwritten + r.counts.bad_slot + r.counts.folded == 10 + (1ull << 32));
  assert_true(r.next == 10 + (1ull << 32));
  free(mem);
}

/* ---- v2 datagrams ---- */

typedef struct {
  const char *name;
  em_ring_dgram_t dgram;
} dgram_row_t;

/* The same rows as tests/tools/gen_wire_vectors.c. */
static const dgram_row_t dgram_rows[] = {
    {"ring_register", {.kind = EM_DGRAM_RING_REGISTER, .pid = 4242, .start = 3}},
    {"ring_hard_miss",
     {.kind = EM_DGRAM_HARD_MISS,
      .pid = 4242,
      .span = {EM_DGRAM_SPAN, 4242, 1002, 123456822000000u, 41000000, "infer"}}},
    {"ring_ack", {.kind = EM_DGRAM_RING_ACK, .pid = 777, .start = 3, .status = 0, .ring_id = 1}},
    {"ring_ack_refused",
     {.kind = EM_DGRAM_RING_ACK, .pid = 777, .start = 3, .status = -24, .ring_id = 0}},
};

static void assert_dgram_equal(const em_ring_dgram_t *want, const em_ring_dgram_t *got) {
  assert_int_equal(want->kind, got->kind);
  assert_int_equal(want->pid, got->pid);
  if (want->kind == EM_DGRAM_HARD_MISS) {
    assert_int_equal(got->span.kind, EM_DGRAM_SPAN);
    assert_true(want->span.frame_id == got->span.frame_id);
    assert_true(want->span.start_ns == got->span.start_ns);
    assert_true(want->span.duration_ns == got->span.duration_ns);
    assert_memory_equal(want->span.stage, got->span.stage, EM_STAGE_FIELD_BYTES);
    return;
  }
  assert_true(want->start == got->start);
  if (want->kind == EM_DGRAM_RING_ACK) {
    assert_true(want->status == got->status);
    assert_true(want->ring_id == got->ring_id);
  }
}

static void ring_dgrams_round_trip_with_documented_layout(void **state) {
  (void)state;
  em_ring_dgram_t extremes[] = {
      {.kind = EM_DGRAM_RING_REGISTER, .pid = UINT32_MAX, .start = UINT64_MAX},
      {.kind = EM_DGRAM_HARD_MISS,
       .pid = UINT32_MAX,
       .span = {EM_DGRAM_SPAN, UINT32_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX,
                "Stage_0123456789.abcdefghi:XY-z"}},
      {.kind = EM_DGRAM_RING_ACK, .pid = 1, .start = 0, .status = INT64_MIN, .ring_id = 9},
  };
  for (size_t i = 0; i < ARRAY_LEN(dgram_rows) + ARRAY_LEN(extremes); i++) {
    const em_ring_dgram_t *d =
        i < ARRAY_LEN(dgram_rows) ? &dgram_rows[i].dgram : &extremes[i - ARRAY_LEN(dgram_rows)];
    uint8_t buf[EM_SPAN_DGRAM_BYTES];
    assert_int_equal(em_ring_dgram_pack(d, buf), 0);
    assert_int_equal(buf[0], 'E');
    assert_int_equal(buf[1], 'M');
    assert_int_equal(buf[2], 2);
    assert_int_equal(buf[3], d->kind);
    assert_int_equal(get_le32(buf + 4), d->pid);
    if (d->kind == EM_DGRAM_HARD_MISS) {
      assert_true(get_le64(buf + 8) == d->span.frame_id);
      assert_true(get_le64(buf + 16) == d->span.start_ns);
      assert_true(get_le64(buf + 24) == d->span.duration_ns);
      assert_memory_equal(buf + 32, d->span.stage, strlen(d->span.stage) + 1);
    } else {
      assert_true(get_le64(buf + 8) == d->start);
      assert_true(get_le64(buf + 16) == (d->kind == EM_DGRAM_RING_ACK ? (uint64_t)d->status : 0));
      assert_true(get_le64(buf + 24) == (d->kind == EM_DGRAM_RING_ACK ? d->ring_id : 0));
      static const uint8_t zeros[32] = {0};
      assert_memory_equal(buf + 32, zeros, sizeof zeros);
    }
    em_ring_dgram_t out;
    assert_int_equal(em_ring_dgram_unpack(buf, sizeof buf, &out), 0);
    assert_dgram_equal(d, &out);
  }
}

static void ring_dgram_pack_refuses_bad_records(void **state) {
  (void)state;
  uint8_t buf[EM_SPAN_DGRAM_BYTES];
  static const int kinds[] = {0, 1, 2, 3, 4, 7, 16, 18, 255};
  for (size_t i = 0; i < ARRAY_LEN(kinds); i++) {
    em_ring_dgram_t d = {.kind = (uint8_t)kinds[i]};
    assert_int_equal(em_ring_dgram_pack(&d, buf), EM_PROTO_EKIND);
  }
  em_ring_dgram_t miss = dgram_rows[1].dgram;
  strcpy(miss.span.stage, "no way");
  assert_int_equal(em_ring_dgram_pack(&miss, buf), EM_PROTO_ESTRING);
  miss.span.stage[0] = '\0';
  assert_int_equal(em_ring_dgram_pack(&miss, buf), EM_PROTO_ESTRING);
  assert_int_equal(em_ring_dgram_pack(NULL, buf), EM_PROTO_EINVAL);
  assert_int_equal(em_ring_dgram_pack(&dgram_rows[0].dgram, NULL), EM_PROTO_EINVAL);
}

typedef struct {
  const char *what;
  size_t row; /* In dgram_rows. */
  size_t offset;
  uint8_t byte;
  int code;
} dgram_garble_t;

static void ring_dgram_unpack_refuses_bad_datagrams(void **state) {
  (void)state;
  static const dgram_garble_t rows[] = {
      {"magic 0", 0, 0, 'X', EM_PROTO_EMAGIC},
      {"magic 1", 1, 1, 'E', EM_PROTO_EMAGIC},
      {"version 1 (a v1 span datagram)", 0, 2, 1, EM_PROTO_EVERSION},
      {"version 1 on a miss", 1, 2, 1, EM_PROTO_EVERSION},
      {"version 0", 2, 2, 0, EM_PROTO_EVERSION},
      {"version 3", 2, 2, 3, EM_PROTO_EVERSION},
      {"kind 1", 1, 3, 1, EM_PROTO_EKIND},
      {"kind 4", 0, 3, 4, EM_PROTO_EKIND},
      {"kind 7", 0, 3, 7, EM_PROTO_EKIND},
      {"kind 16", 2, 3, 16, EM_PROTO_EKIND},
      {"kind 18", 2, 3, 18, EM_PROTO_EKIND},
      {"register reserved u64 at 16", 0, 16, 1, EM_PROTO_ERANGE},
      {"register reserved u64 at 24", 0, 31, 0x80, EM_PROTO_ERANGE},
      {"register stage field not zero", 0, 32, 'a', EM_PROTO_ERANGE},
      {"register stage field last byte", 0, 63, 1, EM_PROTO_ERANGE},
      {"ack stage field not zero", 2, 40, 1, EM_PROTO_ERANGE},
      {"ack stage field last byte", 2, 63, 0xff, EM_PROTO_ERANGE},
      {"miss empty stage", 1, 32, 0, EM_PROTO_ESTRING},
      {"miss space in stage", 1, 33, ' ', EM_PROTO_ESTRING},
      {"miss junk after the NUL", 1, 63, 'x', EM_PROTO_ESTRING},
  };
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    uint8_t buf[EM_SPAN_DGRAM_BYTES];
    assert_int_equal(em_ring_dgram_pack(&dgram_rows[rows[i].row].dgram, buf), 0);
    buf[rows[i].offset] = rows[i].byte;
    em_ring_dgram_t out = {.kind = 99};
    int rc = em_ring_dgram_unpack(buf, sizeof buf, &out);
    if (rc != rows[i].code) {
      print_error("%s: got %d, want %d\n", rows[i].what, rc, rows[i].code);
      fail();
    }
    assert_int_equal(out.kind, 99); /* Untouched on error. */
  }
  uint8_t big[EM_SPAN_DGRAM_BYTES + 1];
  assert_int_equal(em_ring_dgram_pack(&dgram_rows[0].dgram, big), 0);
  big[EM_SPAN_DGRAM_BYTES] = 0;
  em_ring_dgram_t out;
  for (size_t len = 0; len <= sizeof big; len++) {
    if (len != EM_SPAN_DGRAM_BYTES) {
      assert_int_equal(em_ring_dgram_unpack(big, len, &out), EM_PROTO_ESIZE);
    }
  }
  /* A v1 span datagram is not a v2 one. */
  em_span_t v1 = span_for(1);
  uint8_t v1buf[EM_SPAN_DGRAM_BYTES];
  assert_int_equal(em_span_pack(&v1, v1buf), 0);
  assert_int_equal(em_ring_dgram_unpack(v1buf, sizeof v1buf, &out), EM_PROTO_EVERSION);
  assert_int_equal(em_ring_dgram_unpack(NULL, 64, &out), EM_PROTO_EINVAL);
}

/* ---- Deadline page ---- */

static uint8_t *new_deadline_page(void) {
  uint8_t *page = aligned_alloc(8, EM_DEADLINE_PAGE_BYTES);
  assert_non_null(page);
  memset(page, 0xa5, EM_DEADLINE_PAGE_BYTES);
  assert_int_equal(em_deadline_page_init(page, 777, 1024), 0);
  return page;
}

static void deadline_page_round_trips_with_documented_layout(void **state) {
  (void)state;
  uint8_t *page = new_deadline_page();
  static const uint8_t head[8] = {'E', 'M', 'D', 'L', 1, 0, 0, 0};
  assert_memory_equal(page, head, sizeof head);
  assert_int_equal(get_le32(page + 8), 0);
  assert_int_equal(get_le32(page + 12), 777);
  assert_int_equal(get_le32(page + 16), 1024);

  em_deadline_t in[EM_DEADLINE_MAX_ENTRIES];
  for (size_t i = 0; i < ARRAY_LEN(in); i++) {
    memset(&in[i], 0, sizeof in[i]);
    snprintf(in[i].stage, sizeof in[i].stage, "stage.%zu", i);
    in[i].deadline_ns = i == 63 ? UINT64_MAX : (i + 1) * 1000000u;
  }
  em_deadline_t out[EM_DEADLINE_MAX_ENTRIES];
  size_t n = 99;
  uint32_t slots = 0, seq = 1;
  assert_int_equal(em_deadline_page_read(page, out, &n, &slots, &seq), 0);
  assert_true(n == 0 && slots == 1024 && seq == 0);

  static const size_t sizes[] = {2, 64, 0, 1, 63};
  for (size_t k = 0; k < ARRAY_LEN(sizes); k++) {
    assert_int_equal(em_deadline_page_write(page, in, sizes[k]), 0);
    assert_int_equal(get_le32(page + 8), 2 * (k + 1)); /* seq moves by 2 per write */
    assert_int_equal(page[6] | (page[7] << 8), sizes[k]);
    for (size_t i = 0; i < sizes[k]; i++) {
      assert_memory_equal(page + 64 + 40 * i, in[i].stage, EM_STAGE_FIELD_BYTES);
      assert_true(get_le64(page + 96 + 40 * i) == in[i].deadline_ns);
    }
    assert_int_equal(em_deadline_page_read(page, out, &n, &slots, &seq), 0);
    assert_true(n == sizes[k] && seq == 2 * (k + 1));
    for (size_t i = 0; i < n; i++) {
      assert_string_equal(out[i].stage, in[i].stage);
      assert_true(out[i].deadline_ns == in[i].deadline_ns);
    }
  }
  free(page);
}

static void deadline_page_write_refuses_and_leaves_page_alone(void **state) {
  (void)state;
  uint8_t *page = new_deadline_page();
  em_deadline_t in[EM_DEADLINE_MAX_ENTRIES + 1];
  memset(in, 0, sizeof in);
  for (size_t i = 0; i < ARRAY_LEN(in); i++) {
    strcpy(in[i].stage, "infer");
  }
  assert_int_equal(em_deadline_page_write(page, in, 2), 0);
  uint8_t before[EM_DEADLINE_PAGE_BYTES];
  memcpy(before, page, sizeof before);
  assert_int_equal(em_deadline_page_write(page, in, 65), EM_PROTO_ELIMIT);
  assert_int_equal(em_deadline_page_write(page, in, SIZE_MAX), EM_PROTO_ELIMIT);
  static const char *const bad[] = {"", "in fer", "a/b", "0123456789012345678901234567890x"};
  for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
    memset(in[1].stage, 0, sizeof in[1].stage);
    memcpy(in[1].stage, bad[i], strlen(bad[i]) < 31 ? strlen(bad[i]) : 31);
    if (strlen(bad[i]) >= 31) {
      memset(in[1].stage, 'a', sizeof in[1].stage); /* no NUL */
    }
    assert_int_equal(em_deadline_page_write(page, in, 2), EM_PROTO_ESTRING);
  }
  assert_memory_equal(before, page, sizeof before);
  assert_int_equal(em_deadline_page_write(NULL, in, 1), EM_PROTO_EINVAL);
  assert_int_equal(em_deadline_page_write(page, NULL, 1), EM_PROTO_EINVAL);
  assert_int_equal(em_deadline_page_init(page + 4, 1, 1), EM_PROTO_EINVAL);
  free(page);
}

static void deadline_page_read_refuses_bad_pages(void **state) {
  (void)state;
  uint8_t *page = new_deadline_page();
  em_deadline_t in[2] = {{"infer", 5}, {"camera.rx", 6}};
  assert_int_equal(em_deadline_page_write(page, in, 2), 0);
  em_deadline_t out[EM_DEADLINE_MAX_ENTRIES];
  size_t n = 0;
  uint32_t slots, seq;
  struct {
    const char *what;
    size_t offset;
    uint8_t byte;
    int code;
  } rows[] = {
      {"odd seq (a write in progress)", 8, 3, EM_PROTO_EBUSY},
      {"magic", 0, 'X', EM_PROTO_EMAGIC},
      {"version 2", 4, 2, EM_PROTO_EVERSION},
      {"version high byte", 5, 1, EM_PROTO_EVERSION},
      {"count 65", 6, 65, EM_PROTO_ERANGE},
      {"count 0x1002", 7, 0x10, EM_PROTO_ERANGE},
      {"entry 1 empty stage", 64 + 40, 0, EM_PROTO_ESTRING},
      {"entry 0 bad byte", 64, ' ', EM_PROTO_ESTRING},
      {"entry 0 junk after NUL", 64 + 31, 'x', EM_PROTO_ESTRING},
  };
  uint8_t *copy = aligned_alloc(8, EM_DEADLINE_PAGE_BYTES);
  assert_non_null(copy);
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    memcpy(copy, page, EM_DEADLINE_PAGE_BYTES);
    copy[rows[i].offset] = rows[i].byte;
    n = 1234;
    int rc = em_deadline_page_read(copy, out, &n, &slots, &seq);
    if (rc != rows[i].code) {
      print_error("%s: got %d, want %d\n", rows[i].what, rc, rows[i].code);
      fail();
    }
    assert_true(n == 1234);
  }
  /* The odd seq made the reader give up (EBUSY, bounded); once even again it reads. */
  memcpy(copy, page, EM_DEADLINE_PAGE_BYTES);
  put_le32(copy + 8, 5);
  assert_int_equal(em_deadline_page_read(copy, out, &n, &slots, &seq), EM_PROTO_EBUSY);
  put_le32(copy + 8, 6);
  assert_int_equal(em_deadline_page_read(copy, out, &n, &slots, &seq), 0);
  assert_true(n == 2 && seq == 6 && out[1].deadline_ns == 6);
  assert_int_equal(em_deadline_page_read(NULL, out, &n, &slots, &seq), EM_PROTO_EINVAL);
  free(copy);
  free(page);
}

/* ---- Golden vectors (the same rows as tests/tools/gen_wire_vectors.c) ---- */

static void golden_ring_vectors_are_what_init_and_write_make(void **state) {
  (void)state;
  uint8_t *file = alloc_ring(EM_RING_DEFAULT_SLOTS);
  uint8_t *mem = alloc_ring(EM_RING_DEFAULT_SLOTS);
  assert_int_equal(em_ring_init(mem, EM_RING_DEFAULT_SLOTS, 4242, 4243, 987654), 0);
  size_t len = wire_file_read("ring_header", file, em_ring_bytes(EM_RING_DEFAULT_SLOTS));
  assert_int_equal(len, EM_RING_HEADER_BYTES);
  assert_memory_equal(file, mem, EM_RING_HEADER_BYTES);

  static const em_span_t rows[] = {
      {EM_DGRAM_SPAN, 4242, 1001, 123456789012345u, 8250000, "infer"},
      {EM_DGRAM_HEARTBEAT, 4242, 0, 123456800000000u, 0, "camera.rx"},
      {EM_DGRAM_SPAN, 4242, UINT64_MAX, UINT64_MAX, UINT64_MAX, "Stage_0123456789.abcdefghi:XY-z"},
  };
  memset(mem, 0, em_ring_bytes(64));
  assert_int_equal(em_ring_init(mem, 64, 4242, 4243, 987654), 0);
  uint64_t pos = 0;
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    assert_int_equal(em_ring_write(mem, 64, &pos, &rows[i]), 0);
  }
  len = wire_file_read("ring_3_slots", file, em_ring_bytes(EM_RING_DEFAULT_SLOTS));
  assert_int_equal(len, em_ring_bytes(64));
  assert_memory_equal(file, mem, len);

  /* The committed ring reads back: header, then the three slots on a final drain. */
  em_ring_header_t h;
  assert_int_equal(em_ring_header_read(file, len, &h), 0);
  assert_true(h.slot_count == 64 && h.head == 3 && h.pid == 4242 && h.tid == 4243);
  em_ring_reader_t r;
  assert_int_equal(em_ring_reader_init(&r, 64, 0), 0);
  collect_t c = {0};
  assert_int_equal(em_ring_reader_drain(&r, file, true, collect, &c), 3);
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    assert_int_equal(c.spans[i].kind, rows[i].kind);
    assert_true(c.spans[i].frame_id == rows[i].frame_id);
    assert_true(c.spans[i].start_ns == rows[i].start_ns);
    assert_true(c.spans[i].duration_ns == rows[i].duration_ns);
    assert_memory_equal(c.spans[i].stage, rows[i].stage, EM_STAGE_FIELD_BYTES);
  }
  free(mem);
  free(file);
}

static void golden_dgram_vectors_pack_and_unpack_to_their_rows(void **state) {
  (void)state;
  for (size_t i = 0; i < ARRAY_LEN(dgram_rows); i++) {
    uint8_t file[EM_SPAN_DGRAM_BYTES + 1], buf[EM_SPAN_DGRAM_BYTES];
    size_t len = wire_file_read(dgram_rows[i].name, file, sizeof file);
    assert_int_equal(len, EM_SPAN_DGRAM_BYTES);
    assert_int_equal(em_ring_dgram_pack(&dgram_rows[i].dgram, buf), 0);
    assert_memory_equal(file, buf, sizeof buf);
    em_ring_dgram_t out;
    assert_int_equal(em_ring_dgram_unpack(file, len, &out), 0);
    assert_dgram_equal(&dgram_rows[i].dgram, &out);
  }
}

static void golden_deadline_page_is_init_plus_one_write(void **state) {
  (void)state;
  static const em_deadline_t rows[] = {{"infer", 33000000u}, {"camera.rx", 100000000u}};
  uint8_t *page = new_deadline_page();
  assert_int_equal(em_deadline_page_write(page, rows, 2), 0);
  uint8_t *file = aligned_alloc(8, EM_DEADLINE_PAGE_BYTES + 8);
  assert_non_null(file);
  size_t len = wire_file_read("deadline_page", file, EM_DEADLINE_PAGE_BYTES + 8);
  assert_int_equal(len, EM_DEADLINE_PAGE_BYTES);
  assert_memory_equal(file, page, len);
  em_deadline_t out[EM_DEADLINE_MAX_ENTRIES];
  size_t n;
  uint32_t slots, seq;
  assert_int_equal(em_deadline_page_read(file, out, &n, &slots, &seq), 0);
  assert_true(n == 2 && slots == 1024 && seq == 2);
  assert_string_equal(out[1].stage, "camera.rx");
  assert_true(out[1].deadline_ns == 100000000u);
  free(file);
  free(page);
}

/* ---- A writer thread racing the reader ---- */

#define RACE_SPANS 200000u
#define RACE_SLOTS 1024u

typedef struct {
  uint8_t *mem;
  int failures;
  int done;
} race_writer_t;

static void *race_writer(void *arg) {
  race_writer_t *w = arg;
  uint64_t pos = 0;
  for (uint64_t f = 1; f <= RACE_SPANS; f++) {
    em_span_t s = span_for(f);
    if (em_ring_write(w->mem, RACE_SLOTS, &pos, &s) != 0) {
      w->failures++;
    }
  }
  __atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

/*
 * One thread writes 200000 spans as fast as it can into 1024 slots while this one drains in a
 * loop, then once more finally. Every position is classified exactly once, no slot is ever
 * bad (the reader only reads published positions), and every span handed on is whole: its
 * fields belong to its frame and frames only increase.
 */
static void writer_thread_racing_reader_never_folds_a_torn_slot(void **state) {
  (void)state;
  race_writer_t w = {.mem = new_ring(RACE_SLOTS)};
  em_ring_reader_t r;
  assert_int_equal(em_ring_reader_init(&r, RACE_SLOTS, 0), 0);
  collect_t c = {0};
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, race_writer, &w), 0);
  size_t drains = 0;
  while (!__atomic_load_n(&w.done, __ATOMIC_ACQUIRE)) {
    assert_true(em_ring_reader_drain(&r, w.mem, false, collect, &c) <= RACE_SLOTS);
    drains++;
  }
  assert_int_equal(pthread_join(thread, NULL), 0);
  assert_int_equal(w.failures, 0);
  em_ring_reader_drain(&r, w.mem, false, collect, &c);
  em_ring_reader_drain(&r, w.mem, true, collect, &c);
  assert_true(classified(&r.counts) == RACE_SPANS);
  assert_true(r.counts.bad_slot == 0 && r.counts.bad_head == 0);
  assert_true(c.n == r.counts.folded && c.inconsistent == 0);
  assert_true(c.n > 0 && c.last_frame == RACE_SPANS); /* The final drain got the last span. */
  print_message("race: %zu drains, %llu folded, %llu overwritten\n", drains,
                (unsigned long long)r.counts.folded, (unsigned long long)r.counts.overwritten);
  free(w.mem);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(ring_init_then_header_read_round_trips),
      cmocka_unit_test(ring_init_refuses_bad_arguments),
      cmocka_unit_test(header_read_refuses_each_bad_field),
      cmocka_unit_test(header_read_refuses_slot_count_out_of_range),
      cmocka_unit_test(header_read_checks_in_documented_order),
      cmocka_unit_test(ring_write_lays_out_the_slot_and_publishes_head),
      cmocka_unit_test(ring_write_refuses_bad_spans_and_writes_nothing),
      cmocka_unit_test(drain_consumes_only_up_to_the_previous_head),
      cmocka_unit_test(drain_starts_at_the_registration_position),
      cmocka_unit_test(reader_init_refuses_bad_slot_counts),
      cmocka_unit_test(accounting_holds_for_random_writes_and_drains),
      cmocka_unit_test(writer_lapping_the_reader_counts_overwritten),
      cmocka_unit_test(writer_racing_between_batches_is_counted_overwritten),
      cmocka_unit_test(scribbled_slots_are_counted_bad_never_folded),
      cmocka_unit_test(scribbled_head_is_counted_and_resynced),
      cmocka_unit_test(head_jump_of_2_pow_32_is_bounded),
      cmocka_unit_test(ring_dgrams_round_trip_with_documented_layout),
      cmocka_unit_test(ring_dgram_pack_refuses_bad_records),
      cmocka_unit_test(ring_dgram_unpack_refuses_bad_datagrams),
      cmocka_unit_test(deadline_page_round_trips_with_documented_layout),
      cmocka_unit_test(deadline_page_write_refuses_and_leaves_page_alone),
      cmocka_unit_test(deadline_page_read_refuses_bad_pages),
      cmocka_unit_test(golden_ring_vectors_are_what_init_and_write_make),
      cmocka_unit_test(golden_dgram_vectors_pack_and_unpack_to_their_rows),
      cmocka_unit_test(golden_deadline_page_is_init_plus_one_write),
      cmocka_unit_test(writer_thread_racing_reader_never_folds_a_torn_slot),
      cmocka_unit_test(drain_of_an_unaligned_mapping_folds_nothing),
      cmocka_unit_test(stage_alphabet_is_exactly_the_documented_one),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
