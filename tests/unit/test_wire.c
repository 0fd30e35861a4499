/*
 * test_wire.c - unit tests of proto/src/wire.c: the span datagram, the level push datagram
 * and the state page, as proto/WIRE.md describes them.
 *
 * Covered: round trips; the documented byte layout; every wrong length; the order of the
 * checks; the stage name alphabet; pack and unpack refusing the same records with the same
 * codes; the golden vectors in proto/vectors/wire (pack of each row gives the committed bytes,
 * unpack of the bytes gives the row, every truncation is refused, every single-byte change is
 * refused or re-packs to exactly the changed bytes); and the state page seqlock, including a
 * writer process racing a reader on a MAP_SHARED page to catch torn reads.
 *
 * The model datagram v2 (em_model_dgram_pack / _unpack / _view, WIRE.md "Model identity"):
 * round trips with 0 and 8 labels, the layout, every wrong length, each check and the order
 * they are reported in, pack refusing exactly what em_proto_model_check() refuses, its golden
 * vectors and their single-byte changes.
 *
 * The profile request page v1 and the Python stacks datagram v2: golden vectors pack and unpack
 * to their rows, every truncation and every extension refused with ESIZE, each garbled field's
 * code, pack's ENOSPACE (with the size needed), ETOOBIG, ESTRING and ERANGE, and every
 * single-byte change of the datagram refused or re-packed to exactly the changed bytes.
 */
#define _GNU_SOURCE /* mmap MAP_ANONYMOUS, fork, alarm, sched_setaffinity under -std=c11. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "edgemon/wire.h"
#include "wire_file.h"
#include "wire_vectors.h"

#ifndef EM_VECTORS_DIR
#error "EM_VECTORS_DIR (absolute path of proto/vectors) must be defined"
#endif

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- Helpers ---- */

static uint64_t double_bits(double v) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  return bits;
}

static void assert_span_equal(const em_span_t *want, const em_span_t *got) {
  assert_int_equal(want->kind, got->kind);
  assert_int_equal(want->pid, got->pid);
  assert_true(want->frame_id == got->frame_id);
  assert_true(want->start_ns == got->start_ns);
  assert_true(want->duration_ns == got->duration_ns);
  assert_memory_equal(want->stage, got->stage, EM_STAGE_FIELD_BYTES);
}

/* Exact equality: doubles by bit pattern (NaN included), text fields padding included. */
static void assert_record_equal(const em_state_record_t *want, const em_state_record_t *got) {
  assert_int_equal(want->level, got->level);
  assert_int_equal(want->prev_level, got->prev_level);
  assert_int_equal(want->changes, got->changes);
  assert_true(want->since_mono_ns == got->since_mono_ns);
  assert_true(want->since_wall_ns == got->since_wall_ns);
  assert_true(double_bits(want->value) == double_bits(got->value));
  assert_true(double_bits(want->bound) == double_bits(got->bound));
  assert_memory_equal(want->rule, got->rule, EM_RULE_FIELD_BYTES);
  assert_memory_equal(want->stage, got->stage, EM_STAGE_FIELD_BYTES);
  assert_memory_equal(want->reason, got->reason, EM_REASON_FIELD_BYTES);
}

/* A page as the agent gets one from mmap: 8-byte aligned, zeroed. */
static uint8_t *new_page(void) {
  uint8_t *page = aligned_alloc(8, EM_STATE_PAGE_BYTES);
  assert_non_null(page);
  memset(page, 0, EM_STATE_PAGE_BYTES);
  return page;
}

static const em_span_t valid_span = {EM_DGRAM_SPAN, 100, 7, 1000, 250, "infer"};

static const em_state_record_t valid_record = {
    EM_LEVEL_WARN, EM_LEVEL_NOMINAL, 1, 10, 20, 1.5, 1.0, "infer.p99", "infer", "too slow"};

/* A byte set to another value, and the code a reader must refuse the result with. */
typedef struct {
  size_t off;
  uint8_t byte;
  int rc;
} byte_change_t;

/* The page reads back `want`, its counter at `seq`. */
static void assert_page_holds(const uint8_t *page, const em_state_record_t *want, uint32_t seq) {
  em_state_record_t out;
  uint32_t got = seq + 1;
  assert_int_equal(em_state_page_read(page, &out, &got), 0);
  assert_int_equal(got, seq);
  assert_record_equal(want, &out);
}

/* A fresh page of agent pid 77 holding valid_record (em_state_page_init must accept it). */
static uint8_t *valid_page(void) {
  uint8_t *page = new_page();
  assert_int_equal(em_state_page_init(page, 77, &valid_record), 0);
  return page;
}

/* ---- Golden vectors (the rows of tests/tools/wire_vectors.c) ---- */

/* The state page row of the wire vectors (the one with is_page). */
static const em_wire_state_vector_t *page_row(void) {
  for (size_t i = 0; i < em_wire_state_vector_count; i++) {
    if (em_wire_state_vectors[i].is_page) {
      return &em_wire_state_vectors[i];
    }
  }
  fail_msg("no state page row in wire_vectors.c");
  return NULL;
}

/* ---- Stage names ---- */

static void stage_name_rules(void **state) {
  (void)state;
  static const struct {
    const char *name;
    bool valid;
  } rows[] = {
      {"infer", true},
      {"a", true},
      {"camera.rx", true},
      {"net:backbone-1_v2", true},
      {"ABCDEFGHIJKLMNOPQRSTUVWXYZabcde", true},   /* 31 bytes */
      {"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef", false}, /* 32 bytes */
      {"0123456789012345678901234567890123456789", false},
      {"", false},
      {"in fer", false},
      {"infer/1", false},
      {"infer\n", false},
      {"\t", false},
      {"stage#", false},
      {"caf\xc3\xa9", false}, /* UTF-8 is outside the alphabet. */
      {"\x7f", false},
      {"a,b", false},
      {"a=b", false},
  };
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    if (em_stage_name_valid(rows[i].name) != rows[i].valid) {
      print_error("row %zu \"%s\": expected %d\n", i, rows[i].name, rows[i].valid);
      fail();
    }
  }
  assert_false(em_stage_name_valid(NULL));
}

/* ---- Span datagram ---- */

static void span_roundtrip_preserves_every_field(void **state) {
  (void)state;
  static const em_span_t rows[] = {
      {EM_DGRAM_SPAN, 1, 2, 3, 4, "x"},
      {EM_DGRAM_SPAN, 0x01020304u, 0x0102030405060708u, 0x1112131415161718u, 0x2122232425262728u,
       "pre:resize.v2-a_b"},
      {EM_DGRAM_HEARTBEAT, 0, 0, 0, 0, "infer"},
      {EM_DGRAM_HEARTBEAT, UINT32_MAX, UINT64_MAX, UINT64_MAX, 17,
       "0123456789012345678901234567890"},
      {EM_DGRAM_SUBSCRIBE, 55, 0, 99, 0, ""},
      {EM_DGRAM_UNSUBSCRIBE, 55, 1, 100, 0, ""},
  };
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    uint8_t buf[EM_SPAN_DGRAM_BYTES];
    em_span_t out;
    memset(&out, 0xa5, sizeof out);
    assert_int_equal(em_span_pack(&rows[i], buf), 0);
    assert_int_equal(em_span_unpack(buf, sizeof buf, &out), 0);
    assert_span_equal(&rows[i], &out);
  }
}

static void span_pack_writes_documented_layout(void **state) {
  (void)state;
  const em_span_t span = {EM_DGRAM_SPAN,       0x04030201u,         0x1817161514131211u,
                          0x2827262524232221u, 0x3837363534333231u, "ab"};
  uint8_t want[EM_SPAN_DGRAM_BYTES] = {
      0x45, 0x4d, 0x01, 0x01, 0x01, 0x02, 0x03, 0x04, /* magic, version, kind, pid */
      0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, /* frame_id */
      0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, /* start_ns */
      0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, /* duration_ns */
      'a',  'b',                                      /* stage, then 30 NULs */
  };
  uint8_t buf[EM_SPAN_DGRAM_BYTES];
  memset(buf, 0xcc, sizeof buf);
  assert_int_equal(em_span_pack(&span, buf), 0);
  assert_memory_equal(want, buf, sizeof buf);
}

/* Any garbage after the stage name's NUL in the caller's struct is not sent. */
static void span_pack_sends_zero_padding_whatever_follows_the_nul(void **state) {
  (void)state;
  em_span_t span = valid_span;
  memset(span.stage, 'z', sizeof span.stage);
  memcpy(span.stage, "ok", 3);
  uint8_t buf[EM_SPAN_DGRAM_BYTES];
  assert_int_equal(em_span_pack(&span, buf), 0);
  for (size_t i = 32 + 2; i < sizeof buf; i++) {
    assert_int_equal(buf[i], 0);
  }
}

static void span_pack_rejects_invalid_spans(void **state) {
  (void)state;
  static const struct {
    em_span_t span;
    int rc;
  } rows[] = {
      {{(em_dgram_kind_t)0, 1, 0, 0, 0, "infer"}, EM_PROTO_EKIND},
      {{(em_dgram_kind_t)5, 1, 0, 0, 0, "infer"}, EM_PROTO_EKIND},
      {{EM_DGRAM_LEVEL_PUSH, 1, 0, 0, 0, "infer"}, EM_PROTO_EKIND},
      {{(em_dgram_kind_t)-1, 1, 0, 0, 0, "infer"}, EM_PROTO_EKIND},
      {{EM_DGRAM_SPAN, 1, 0, 0, 0, ""}, EM_PROTO_ESTRING},
      {{EM_DGRAM_HEARTBEAT, 1, 0, 0, 0, ""}, EM_PROTO_ESTRING},
      {{EM_DGRAM_SPAN, 1, 0, 0, 0, "bad name"}, EM_PROTO_ESTRING},
      {{EM_DGRAM_SPAN, 1, 0, 0, 0, "tab\t"}, EM_PROTO_ESTRING},
      {{EM_DGRAM_SUBSCRIBE, 1, 0, 0, 0, "infer"}, EM_PROTO_ESTRING},
      {{EM_DGRAM_UNSUBSCRIBE, 1, 0, 0, 0, "x"}, EM_PROTO_ESTRING},
  };
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    uint8_t buf[EM_SPAN_DGRAM_BYTES];
    memset(buf, 0xcc, sizeof buf);
    assert_int_equal(em_span_pack(&rows[i].span, buf), rows[i].rc);
    for (size_t j = 0; j < sizeof buf; j++) {
      assert_int_equal(buf[j], 0xcc); /* Untouched on failure. */
    }
  }
  /* A name filling all 32 bytes has no NUL: too long, never truncated. */
  em_span_t full = valid_span;
  memset(full.stage, 'a', sizeof full.stage);
  uint8_t buf[EM_SPAN_DGRAM_BYTES];
  assert_int_equal(em_span_pack(&full, buf), EM_PROTO_ESTRING);
  assert_int_equal(em_span_pack(NULL, buf), EM_PROTO_EINVAL);
  assert_int_equal(em_span_pack(&valid_span, NULL), EM_PROTO_EINVAL);
}

static void span_unpack_rejects_each_bad_length(void **state) {
  (void)state;
  uint8_t buf[201];
  memset(buf, 0, sizeof buf);
  assert_int_equal(em_span_pack(&valid_span, buf), 0);
  for (size_t len = 0; len <= 200; len++) {
    em_span_t out;
    int want = len == EM_SPAN_DGRAM_BYTES ? 0 : EM_PROTO_ESIZE;
    if (em_span_unpack(buf, len, &out) != want) {
      print_error("length %zu: expected %d\n", len, want);
      fail();
    }
  }
}

/* A datagram wrong in every way reports the first check; fixing each reveals the next. */
static void span_unpack_error_order(void **state) {
  (void)state;
  uint8_t good[EM_SPAN_DGRAM_BYTES + 1] = {0};
  assert_int_equal(em_span_pack(&valid_span, good), 0);
  uint8_t bad[EM_SPAN_DGRAM_BYTES + 1];
  memcpy(bad, good, sizeof bad);
  bad[0] = 'X';   /* magic */
  bad[2] = 9;     /* version */
  bad[3] = 77;    /* kind */
  bad[32] = '\n'; /* stage */
  size_t len = EM_SPAN_DGRAM_BYTES + 1;
  em_span_t out;

  assert_int_equal(em_span_unpack(bad, len, &out), EM_PROTO_ESIZE);
  len = EM_SPAN_DGRAM_BYTES;
  assert_int_equal(em_span_unpack(bad, len, &out), EM_PROTO_EMAGIC);
  bad[0] = good[0];
  assert_int_equal(em_span_unpack(bad, len, &out), EM_PROTO_EVERSION);
  bad[2] = good[2];
  assert_int_equal(em_span_unpack(bad, len, &out), EM_PROTO_EKIND);
  bad[3] = good[3];
  assert_int_equal(em_span_unpack(bad, len, &out), EM_PROTO_ESTRING);
  bad[32] = good[32];
  assert_int_equal(em_span_unpack(bad, len, &out), 0);
  assert_span_equal(&valid_span, &out);
}

static void span_unpack_checks_magic_version_and_kind_bytes(void **state) {
  (void)state;
  static const byte_change_t rows[] = {
      {0, 0x00, EM_PROTO_EMAGIC},   {0, 0x4d, EM_PROTO_EMAGIC}, {1, 0x45, EM_PROTO_EMAGIC},
      {1, 0xff, EM_PROTO_EMAGIC},   {2, 0, EM_PROTO_EVERSION},  {2, 2, EM_PROTO_EVERSION},
      {2, 0xff, EM_PROTO_EVERSION}, {3, 0, EM_PROTO_EKIND},     {3, 5, EM_PROTO_EKIND},
      {3, 15, EM_PROTO_EKIND},      {3, 16, EM_PROTO_EKIND},    {3, 0xff, EM_PROTO_EKIND},
  };
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    uint8_t buf[EM_SPAN_DGRAM_BYTES];
    em_span_t out;
    assert_int_equal(em_span_pack(&valid_span, buf), 0);
    buf[rows[i].off] = rows[i].byte;
    assert_int_equal(em_span_unpack(buf, sizeof buf, &out), rows[i].rc);
  }
}

/* The 32-byte stage field as received, per kind. */
static void span_unpack_stage_field_rules(void **state) {
  (void)state;
  static const struct {
    em_dgram_kind_t kind;
    const char *field; /* The first bytes of the field; the rest are zero... */
    size_t field_len;  /* ...unless this covers them. */
    int rc;
  } rows[] = {
      {EM_DGRAM_SPAN, "infer", 5, 0},
      {EM_DGRAM_SPAN, "", 0, EM_PROTO_ESTRING},         /* empty name */
      {EM_DGRAM_SPAN, "in fer", 6, EM_PROTO_ESTRING},   /* bad byte */
      {EM_DGRAM_SPAN, "infer\0x", 7, EM_PROTO_ESTRING}, /* garbage after the NUL */
      {EM_DGRAM_SPAN, "a\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x01", 32,
       EM_PROTO_ESTRING}, /* garbage in the last byte */
      {EM_DGRAM_SPAN, "abcdefghijklmnopqrstuvwxyz012345", 32, EM_PROTO_ESTRING}, /* no NUL */
      {EM_DGRAM_SPAN, "abcdefghijklmnopqrstuvwxyz01234", 31, 0}, /* 31 bytes + NUL */
      {EM_DGRAM_HEARTBEAT, "", 0, EM_PROTO_ESTRING},
      {EM_DGRAM_HEARTBEAT, "cam\x80", 4, EM_PROTO_ESTRING},
      {EM_DGRAM_HEARTBEAT, "cam", 3, 0},
      {EM_DGRAM_SUBSCRIBE, "", 0, 0},
      {EM_DGRAM_SUBSCRIBE, "infer", 5, EM_PROTO_ESTRING},
      {EM_DGRAM_SUBSCRIBE, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0x", 32,
       EM_PROTO_ESTRING},
      {EM_DGRAM_UNSUBSCRIBE, "", 0, 0},
      {EM_DGRAM_UNSUBSCRIBE, "\0a", 2, EM_PROTO_ESTRING},
  };
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    uint8_t buf[EM_SPAN_DGRAM_BYTES];
    em_span_t sub = valid_span;
    sub.kind = EM_DGRAM_SUBSCRIBE;
    sub.stage[0] = '\0';
    assert_int_equal(em_span_pack(&sub, buf), 0);
    buf[3] = (uint8_t)rows[i].kind;
    memcpy(buf + 32, rows[i].field, rows[i].field_len);
    em_span_t out;
    int rc = em_span_unpack(buf, sizeof buf, &out);
    if (rc != rows[i].rc) {
      print_error("row %zu: got %d, expected %d\n", i, rc, rows[i].rc);
      fail();
    }
    if (rc == 0) {
      assert_memory_equal(buf + 32, out.stage, EM_STAGE_FIELD_BYTES);
    }
  }
}

static void span_unpack_leaves_output_untouched_on_error(void **state) {
  (void)state;
  uint8_t buf[EM_SPAN_DGRAM_BYTES];
  assert_int_equal(em_span_pack(&valid_span, buf), 0);
  buf[40] = '!';
  em_span_t out;
  memset(&out, 0x5a, sizeof out);
  assert_int_equal(em_span_unpack(buf, sizeof buf, &out), EM_PROTO_ESTRING);
  const uint8_t *bytes = (const uint8_t *)&out;
  for (size_t i = 0; i < sizeof out; i++) {
    assert_int_equal(bytes[i], 0x5a);
  }
  assert_int_equal(em_span_unpack(NULL, 64, &out), EM_PROTO_EINVAL);
  assert_int_equal(em_span_unpack(buf, sizeof buf, NULL), EM_PROTO_EINVAL);
}

/* ---- State record and level push datagram ---- */

static void push_roundtrip(void **state) {
  (void)state;
  static const em_state_record_t rows[] = {
      {EM_LEVEL_NOMINAL, EM_LEVEL_NOMINAL, 0, 0, 0, 0.0, 0.0, "", "", ""},
      {EM_LEVEL_WARN, EM_LEVEL_NOMINAL, 1, 2, 3, -0.0, -1.25, "r", "s", "x"},
      {EM_LEVEL_CRITICAL, EM_LEVEL_DEGRADED, UINT32_MAX, UINT64_MAX, UINT64_MAX, INFINITY,
       -INFINITY, "rss_cap", "", "RSS 900 MiB > cap 800 MiB"},
      {EM_LEVEL_DEGRADED, EM_LEVEL_CRITICAL, 7, 8, 9, NAN, NAN, "infer.deadline", "infer",
       "frame 12 took 51 ms > 40 ms"},
      {EM_LEVEL_DEGRADED, EM_LEVEL_WARN, 7, 8, 9, 5e-324, 1.7976931348623157e308,
       "0123456789012345678901234567890", "0123456789012345678901234567890",
       "0123456789012345678901234567890123456789012345678901234567890123456789"
       "0123456789012345678901234567890123456789012345678901234567890123"},
  };
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    uint8_t buf[EM_PUSH_DGRAM_BYTES];
    em_state_record_t out;
    uint32_t pid = 0;
    memset(&out, 0xa5, sizeof out);
    assert_int_equal(em_push_pack(&rows[i], 4000 + (uint32_t)i, buf), 0);
    assert_int_equal(em_push_unpack(buf, sizeof buf, &out, &pid), 0);
    assert_record_equal(&rows[i], &out);
    assert_int_equal(pid, 4000 + i);
    assert_int_equal(em_push_unpack(buf, sizeof buf, &out, NULL), 0); /* pid is optional */
  }
}

static void push_pack_writes_documented_layout(void **state) {
  (void)state;
  const em_state_record_t rec = {EM_LEVEL_DEGRADED,
                                 EM_LEVEL_WARN,
                                 0x0d0c0b0au,
                                 0x1817161514131211u,
                                 0x2827262524232221u,
                                 1.0,
                                 -2.0,
                                 "R",
                                 "S",
                                 "T"};
  uint8_t buf[EM_PUSH_DGRAM_BYTES];
  memset(buf, 0xcc, sizeof buf);
  assert_int_equal(em_push_pack(&rec, 0x04030201u, buf), 0);
  static const uint8_t head[56] = {
      0x45, 0x4d, 0x01, 0x10, 0x01, 0x02, 0x03, 0x04, /* magic, version, kind 16, pid */
      0,    0,    0,    0,    0,    0,    0,    0,    /* reserved */
      0x02, 0x01, 0x00, 0x00, 0x0a, 0x0b, 0x0c, 0x0d, /* level, prev, reserved, changes */
      0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, /* since_mono_ns */
      0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, /* since_wall_ns */
      0,    0,    0,    0,    0,    0,    0xf0, 0x3f, /* value 1.0 */
      0,    0,    0,    0,    0,    0,    0x00, 0xc0, /* bound -2.0 */
  };
  assert_memory_equal(head, buf, sizeof head);
  assert_int_equal(buf[16 + 40], 'R');
  assert_int_equal(buf[16 + 72], 'S');
  assert_int_equal(buf[16 + 104], 'T');
  for (size_t i = sizeof head; i < sizeof buf; i++) {
    if (i != 16 + 40 && i != 16 + 72 && i != 16 + 104) {
      assert_int_equal(buf[i], 0);
    }
  }
}

static void rec_level_4(em_state_record_t *r) {
  r->level = (em_level_t)4;
}
static void rec_level_none(em_state_record_t *r) {
  r->level = EM_LEVEL_NONE;
}
static void rec_prev_level_4(em_state_record_t *r) {
  r->prev_level = (em_level_t)4;
}
static void rec_rule_unterminated(em_state_record_t *r) {
  memset(r->rule, 'a', sizeof r->rule);
}
static void rec_rule_tab(em_state_record_t *r) {
  r->rule[0] = '\t';
}
static void rec_rule_del(em_state_record_t *r) {
  r->rule[0] = 0x7f;
}
static void rec_rule_high(em_state_record_t *r) {
  r->rule[0] = (char)0x80;
}
static void rec_stage_space(em_state_record_t *r) {
  r->stage[0] = ' ';
}
static void rec_stage_unterminated(em_state_record_t *r) {
  memset(r->stage, 'a', sizeof r->stage);
}
static void rec_reason_unterminated(em_state_record_t *r) {
  memset(r->reason, 'a', sizeof r->reason);
}
static void rec_reason_escape(em_state_record_t *r) {
  r->reason[0] = 0x1b;
}
static void rec_reason_newline(em_state_record_t *r) {
  r->reason[0] = '\n';
}

/*
 * Each row is one fault, made twice: in a record (mutate; NULL when a struct cannot carry it)
 * and in the packed body bytes (fill body[off..off+len) with `byte`). em_push_pack() must
 * refuse the record and em_push_unpack() the bytes, with the same code; so must the page.
 */
static const struct {
  const char *what;
  void (*mutate)(em_state_record_t *);
  size_t off;
  size_t len;
  uint8_t byte;
  int rc;
} bad_records[] = {
    {"level 4", rec_level_4, 0, 1, 4, EM_PROTO_ERANGE},
    {"level 255 / NONE", rec_level_none, 0, 1, 0xff, EM_PROTO_ERANGE},
    {"prev_level 4", rec_prev_level_4, 1, 1, 4, EM_PROTO_ERANGE},
    {"reserved u16", NULL, 2, 1, 1, EM_PROTO_ERANGE},
    {"reserved u16 high", NULL, 3, 1, 0x80, EM_PROTO_ERANGE},
    {"rule without NUL", rec_rule_unterminated, 40, 32, 'a', EM_PROTO_ESTRING},
    {"rule tab", rec_rule_tab, 40, 1, '\t', EM_PROTO_ESTRING},
    {"rule DEL", rec_rule_del, 40, 1, 0x7f, EM_PROTO_ESTRING},
    {"rule high byte", rec_rule_high, 40, 1, 0x80, EM_PROTO_ESTRING},
    {"rule garbage after NUL", NULL, 71, 1, 'a', EM_PROTO_ESTRING},
    {"stage space", rec_stage_space, 72, 1, ' ', EM_PROTO_ESTRING},
    {"stage without NUL", rec_stage_unterminated, 72, 32, 'a', EM_PROTO_ESTRING},
    {"stage garbage after NUL", NULL, 103, 1, 'a', EM_PROTO_ESTRING},
    {"reason without NUL", rec_reason_unterminated, 104, 136, 'a', EM_PROTO_ESTRING},
    {"reason escape", rec_reason_escape, 104, 1, 0x1b, EM_PROTO_ESTRING},
    {"reason newline", rec_reason_newline, 104, 1, '\n', EM_PROTO_ESTRING},
    {"reason garbage after NUL", NULL, 239, 1, ' ', EM_PROTO_ESTRING},
};

static void push_pack_and_unpack_refuse_the_same_records(void **state) {
  (void)state;
  for (size_t i = 0; i < ARRAY_LEN(bad_records); i++) {
    uint8_t buf[EM_PUSH_DGRAM_BYTES];
    if (bad_records[i].mutate != NULL) {
      em_state_record_t rec = valid_record;
      bad_records[i].mutate(&rec);
      memset(buf, 0xcc, sizeof buf);
      int rc = em_push_pack(&rec, 1, buf);
      if (rc != bad_records[i].rc) {
        print_error("pack %s: got %d, expected %d\n", bad_records[i].what, rc, bad_records[i].rc);
        fail();
      }
      for (size_t j = 0; j < sizeof buf; j++) {
        assert_int_equal(buf[j], 0xcc);
      }
    }
    assert_int_equal(em_push_pack(&valid_record, 1, buf), 0);
    memset(buf + 16 + bad_records[i].off, bad_records[i].byte, bad_records[i].len);
    em_state_record_t out;
    memset(&out, 0x5a, sizeof out);
    int rc = em_push_unpack(buf, sizeof buf, &out, NULL);
    if (rc != bad_records[i].rc) {
      print_error("unpack %s: got %d, expected %d\n", bad_records[i].what, rc, bad_records[i].rc);
      fail();
    }
    const uint8_t *bytes = (const uint8_t *)&out;
    for (size_t j = 0; j < sizeof out; j++) {
      assert_int_equal(bytes[j], 0x5a);
    }
  }
}

/* Longest strings fit exactly; one byte more is ESTRING, never silently truncated. */
static void push_pack_refuses_too_long_strings(void **state) {
  (void)state;
  em_state_record_t rec = valid_record;
  uint8_t buf[EM_PUSH_DGRAM_BYTES];
  em_state_record_t out;
  memset(rec.rule, 'r', 31);
  rec.rule[31] = '\0';
  memset(rec.stage, 's', 31);
  rec.stage[31] = '\0';
  memset(rec.reason, 'x', 135);
  rec.reason[135] = '\0';
  assert_int_equal(em_push_pack(&rec, 1, buf), 0);
  assert_int_equal(em_push_unpack(buf, sizeof buf, &out, NULL), 0);
  assert_record_equal(&rec, &out);

  em_state_record_t longer = rec;
  longer.rule[31] = 'r';
  assert_int_equal(em_push_pack(&longer, 1, buf), EM_PROTO_ESTRING);
  longer = rec;
  longer.stage[31] = 's';
  assert_int_equal(em_push_pack(&longer, 1, buf), EM_PROTO_ESTRING);
  longer = rec;
  longer.reason[135] = 'x';
  assert_int_equal(em_push_pack(&longer, 1, buf), EM_PROTO_ESTRING);
  assert_int_equal(em_push_pack(NULL, 1, buf), EM_PROTO_EINVAL);
  assert_int_equal(em_push_pack(&rec, 1, NULL), EM_PROTO_EINVAL);
}

static void push_unpack_rejects_each_bad_length(void **state) {
  (void)state;
  uint8_t buf[301];
  memset(buf, 0, sizeof buf);
  assert_int_equal(em_push_pack(&valid_record, 1, buf), 0);
  for (size_t len = 0; len <= 300; len++) {
    em_state_record_t out;
    int want = len == EM_PUSH_DGRAM_BYTES ? 0 : EM_PROTO_ESIZE;
    if (em_push_unpack(buf, len, &out, NULL) != want) {
      print_error("length %zu: expected %d\n", len, want);
      fail();
    }
  }
}

static void push_unpack_error_order(void **state) {
  (void)state;
  uint8_t good[EM_PUSH_DGRAM_BYTES];
  assert_int_equal(em_push_pack(&valid_record, 1, good), 0);
  uint8_t bad[EM_PUSH_DGRAM_BYTES];
  memcpy(bad, good, sizeof bad);
  bad[1] = 'X';           /* magic */
  bad[2] = 2;             /* version */
  bad[3] = EM_DGRAM_SPAN; /* kind: a client kind is not a push */
  bad[15] = 1;            /* reserved u64 */
  bad[16 + 0] = 9;        /* level */
  bad[16 + 40] = '\r';    /* rule */
  em_state_record_t out;

  assert_int_equal(em_push_unpack(bad, sizeof bad - 1, &out, NULL), EM_PROTO_ESIZE);
  assert_int_equal(em_push_unpack(bad, sizeof bad, &out, NULL), EM_PROTO_EMAGIC);
  bad[1] = good[1];
  assert_int_equal(em_push_unpack(bad, sizeof bad, &out, NULL), EM_PROTO_EVERSION);
  bad[2] = good[2];
  assert_int_equal(em_push_unpack(bad, sizeof bad, &out, NULL), EM_PROTO_EKIND);
  bad[3] = good[3];
  assert_int_equal(em_push_unpack(bad, sizeof bad, &out, NULL), EM_PROTO_ERANGE);
  bad[15] = good[15];
  assert_int_equal(em_push_unpack(bad, sizeof bad, &out, NULL), EM_PROTO_ERANGE);
  bad[16] = good[16];
  assert_int_equal(em_push_unpack(bad, sizeof bad, &out, NULL), EM_PROTO_ESTRING);
  bad[16 + 40] = good[16 + 40];
  assert_int_equal(em_push_unpack(bad, sizeof bad, &out, NULL), 0);
  assert_record_equal(&valid_record, &out);
  assert_int_equal(em_push_unpack(NULL, sizeof bad, &out, NULL), EM_PROTO_EINVAL);
  assert_int_equal(em_push_unpack(bad, sizeof bad, NULL, NULL), EM_PROTO_EINVAL);
}

/* ---- State page ---- */

static void page_init_writes_header_seq_zero_and_record(void **state) {
  (void)state;
  uint8_t *page = new_page();
  memset(page, 0xee, EM_STATE_PAGE_BYTES);
  assert_int_equal(em_state_page_init(page, 0x04030201u, &valid_record), 0);
  static const uint8_t head[16] = {'E', 'M', 'S', 'T', 1, 0, 0, 1, 0, 0, 0, 0, 1, 2, 3, 4};
  assert_memory_equal(head, page, sizeof head);
  uint8_t push[EM_PUSH_DGRAM_BYTES];
  assert_int_equal(em_push_pack(&valid_record, 1, push), 0);
  assert_memory_equal(push + 16, page + 16, EM_STATE_BODY_BYTES); /* Same body as the push. */
  assert_page_holds(page, &valid_record, 0);
  free(page);
}

static void page_read_sees_last_write(void **state) {
  (void)state;
  uint8_t *page = valid_page();
  for (uint32_t i = 1; i <= 10; i++) {
    em_state_record_t rec = valid_record;
    rec.level = (em_level_t)(i % 4);
    rec.prev_level = (em_level_t)((i - 1) % 4);
    rec.changes = i;
    rec.since_mono_ns = 1000u * i;
    rec.value = i / 3.0;
    snprintf(rec.reason, sizeof rec.reason, "change %u", (unsigned)i);
    assert_int_equal(em_state_page_write(page, &rec), 0);
    assert_page_holds(page, &rec, 2 * i);
    em_state_record_t out;
    assert_int_equal(em_state_page_read(page, &out, NULL), 0); /* seq_out is optional */
    assert_record_equal(&rec, &out);
  }
  free(page);
}

static void page_read_returns_busy_while_writer_holds_odd_seq(void **state) {
  (void)state;
  uint8_t *page = valid_page();
  assert_int_equal(em_state_page_write(page, &valid_record), 0);
  page[8] = 3; /* A writer stopped between its two counter stores (LE u32 = 3). */
  em_state_record_t out;
  memset(&out, 0x5a, sizeof out);
  uint32_t seq = 12345;
  assert_int_equal(em_state_page_read(page, &out, &seq), EM_PROTO_EBUSY);
  assert_int_equal(seq, 12345);
  assert_int_equal(((const uint8_t *)&out)[0], 0x5a);
  page[8] = 4; /* The write completed. */
  assert_page_holds(page, &valid_record, 4);
  free(page);
}

static void page_counter_wraps_through_zero(void **state) {
  (void)state;
  uint8_t *page = valid_page();
  page[8] = 0xfe; /* seq = 0xfffffffe */
  page[9] = 0xff;
  page[10] = 0xff;
  page[11] = 0xff;
  assert_int_equal(em_state_page_write(page, &valid_record), 0);
  em_state_record_t out;
  uint32_t seq = 1;
  assert_int_equal(em_state_page_read(page, &out, &seq), 0);
  assert_int_equal(seq, 0);
  free(page);
}

static void page_read_rejects_pages_that_are_not_v1(void **state) {
  (void)state;
  static const byte_change_t rows[] = {
      {0, 'X', EM_PROTO_EMAGIC}, {3, 'T' + 1, EM_PROTO_EMAGIC}, {4, 2, EM_PROTO_EVERSION},
      {5, 1, EM_PROTO_EVERSION}, {4, 0, EM_PROTO_EVERSION},     {6, 1, EM_PROTO_ESIZE},
      {7, 0x10, EM_PROTO_ESIZE}, {7, 0, EM_PROTO_ESIZE},
  };
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    uint8_t *page = valid_page();
    page[rows[i].off] = rows[i].byte;
    em_state_record_t out;
    assert_int_equal(em_state_page_read(page, &out, NULL), rows[i].rc);
    free(page);
  }
  /* A zeroed file (created but never formatted) is not a page. */
  uint8_t *page = new_page();
  em_state_record_t out;
  assert_int_equal(em_state_page_read(page, &out, NULL), EM_PROTO_EMAGIC);
  /* A header error wins over an odd counter: a foreign file is not "busy". */
  memset(page, 0xff, EM_STATE_PAGE_BYTES);
  assert_int_equal(em_state_page_read(page, &out, NULL), EM_PROTO_EMAGIC);
  free(page);
}

/* The same faults as the push, planted in a page's record bytes. */
static void page_write_and_read_refuse_the_same_records(void **state) {
  (void)state;
  for (size_t i = 0; i < ARRAY_LEN(bad_records); i++) {
    uint8_t *page = valid_page();
    uint8_t before[EM_STATE_PAGE_BYTES];
    memcpy(before, page, sizeof before);
    if (bad_records[i].mutate != NULL) {
      em_state_record_t rec = valid_record;
      bad_records[i].mutate(&rec);
      assert_int_equal(em_state_page_write(page, &rec), bad_records[i].rc);
      assert_memory_equal(before, page, sizeof before); /* Counter and record untouched. */
      uint8_t *fresh = new_page();
      assert_int_equal(em_state_page_init(fresh, 77, &rec), bad_records[i].rc);
      free(fresh);
    }
    memset(page + 16 + bad_records[i].off, bad_records[i].byte, bad_records[i].len);
    em_state_record_t out;
    assert_int_equal(em_state_page_read(page, &out, NULL), bad_records[i].rc);
    free(page);
  }
}

static void page_functions_reject_null_and_misaligned_pages(void **state) {
  (void)state;
  uint8_t *buf = aligned_alloc(8, 2 * EM_STATE_PAGE_BYTES);
  assert_non_null(buf);
  em_state_record_t out;
  assert_int_equal(em_state_page_init(buf, 1, &valid_record), 0);
  for (size_t shift = 1; shift < 8; shift++) {
    assert_int_equal(em_state_page_init(buf + shift, 1, &valid_record), EM_PROTO_EINVAL);
    assert_int_equal(em_state_page_write(buf + shift, &valid_record), EM_PROTO_EINVAL);
    assert_int_equal(em_state_page_read(buf + shift, &out, NULL), EM_PROTO_EINVAL);
  }
  assert_int_equal(em_state_page_init(NULL, 1, &valid_record), EM_PROTO_EINVAL);
  assert_int_equal(em_state_page_init(buf, 1, NULL), EM_PROTO_EINVAL);
  assert_int_equal(em_state_page_write(NULL, &valid_record), EM_PROTO_EINVAL);
  assert_int_equal(em_state_page_write(buf, NULL), EM_PROTO_EINVAL);
  assert_int_equal(em_state_page_read(NULL, &out, NULL), EM_PROTO_EINVAL);
  assert_int_equal(em_state_page_read(buf, NULL, NULL), EM_PROTO_EINVAL);
  free(buf);
}

/*
 * Torn-read check. Every record the writer publishes is derived from one counter n, including
 * string lengths (so a record mixed from two writes has misplaced NULs or mismatched fields).
 * A child process writes as fast as it can to a MAP_SHARED page while the parent reads it
 * 100000 times. Every read must return 0 or EBUSY, and every record read must be exactly
 * make_torn_record(changes), with seq == 2 * changes, both never going backwards. When the
 * writer stops, the next read must see its last record. (Mutation check: dropping either the
 * odd-counter test or the s1 != s2 test from em_state_page_read() makes this test fail.)
 */
#define TORN_READS 100000

typedef struct {
  uint32_t started; /* Child: 1 once its first write is done. */
  uint32_t stop;    /* Parent: 1 to stop the writer. */
  uint32_t last_n;  /* Child: the n of its last write, stored before it exits. */
  uint32_t pad;
} torn_ctl_t;

static void make_torn_record(uint32_t n, em_state_record_t *rec) {
  memset(rec, 0, sizeof *rec);
  rec->level = (em_level_t)(n % 4);
  rec->prev_level = (em_level_t)((n + 1) % 4);
  rec->changes = n;
  rec->since_mono_ns = (uint64_t)n * 1000003u;
  rec->since_wall_ns = ~(uint64_t)n;
  rec->value = (double)n;
  rec->bound = -(double)n / 4.0;
  memset(rec->rule, 'a' + (int)(n % 26), 1 + n % 31);
  memset(rec->stage, 'A' + (int)(n % 26), 1 + (n / 7) % 31);
  memset(rec->reason, '0' + (int)(n % 10), 1 + n % 135);
}

/*
 * Picks two different CPUs this process may run on, so the writer and the reader really run
 * at the same time (fork leaves both on one CPU for a while, and on one CPU a read overlaps a
 * write only when the writer is preempted mid-write). Returns false on a 1-CPU machine.
 */
static bool pick_two_cpus(int *reader_cpu, int *writer_cpu) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    return false;
  }
  int found = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE && found < 2; cpu++) {
    if (CPU_ISSET(cpu, &set)) {
      *(found == 0 ? reader_cpu : writer_cpu) = cpu;
      found++;
    }
  }
  return found == 2;
}

static void pin_to_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)sched_setaffinity(0, sizeof set, &set); /* Best effort: only makes overlaps likelier. */
}

static void torn_writer(uint8_t *page, torn_ctl_t *ctl, int cpu) {
  alarm(20); /* Never outlive a parent that failed to stop us. */
  if (cpu >= 0) {
    pin_to_cpu(cpu);
  }
  em_state_record_t rec;
  uint32_t n = 1;
  for (;; n++) {
    make_torn_record(n, &rec);
    if (em_state_page_write(page, &rec) != 0) {
      _exit(3);
    }
    if (n == 1) {
      __atomic_store_n(&ctl->started, 1u, __ATOMIC_RELEASE);
    }
    if (__atomic_load_n(&ctl->stop, __ATOMIC_ACQUIRE) != 0) {
      break;
    }
  }
  __atomic_store_n(&ctl->last_n, n, __ATOMIC_RELEASE);
  _exit(0);
}

static void page_read_never_returns_a_torn_record(void **state) {
  (void)state;
  size_t map_len = 4096;
  uint8_t *map = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(map != MAP_FAILED);
  uint8_t *page = map;
  torn_ctl_t *ctl = (torn_ctl_t *)(void *)(map + 1024);
  em_state_record_t rec;
  make_torn_record(0, &rec);
  assert_int_equal(em_state_page_init(page, (uint32_t)getpid(), &rec), 0);

  cpu_set_t saved_affinity;
  assert_int_equal(sched_getaffinity(0, sizeof saved_affinity, &saved_affinity), 0);
  int reader_cpu = -1;
  int writer_cpu = -1;
  if (pick_two_cpus(&reader_cpu, &writer_cpu)) {
    pin_to_cpu(reader_cpu);
  }

  fflush(NULL);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    torn_writer(page, ctl, writer_cpu);
  }
  int status = 0;
  while (__atomic_load_n(&ctl->started, __ATOMIC_ACQUIRE) == 0) {
    /* The writer is running before the first read (unless it died: then fail). */
    assert_int_equal(waitpid(child, &status, WNOHANG), 0);
  }

  unsigned ok = 0;
  unsigned busy = 0;
  unsigned bad = 0;
  uint32_t last_seq = 0;
  uint32_t last_changes = 0;
  for (unsigned i = 0; i < TORN_READS; i++) {
    em_state_record_t got;
    uint32_t seq = 0;
    int rc = em_state_page_read(page, &got, &seq);
    if (rc == EM_PROTO_EBUSY) {
      busy++;
      sched_yield(); /* The writer may be preempted mid-write on a busy or 1-CPU machine. */
      continue;
    }
    if (rc != 0) {
      bad++;
      continue;
    }
    em_state_record_t want;
    make_torn_record(got.changes, &want);
    bool same = got.level == want.level && got.prev_level == want.prev_level &&
                got.since_mono_ns == want.since_mono_ns &&
                got.since_wall_ns == want.since_wall_ns &&
                double_bits(got.value) == double_bits(want.value) &&
                double_bits(got.bound) == double_bits(want.bound) &&
                memcmp(got.rule, want.rule, sizeof got.rule) == 0 &&
                memcmp(got.stage, want.stage, sizeof got.stage) == 0 &&
                memcmp(got.reason, want.reason, sizeof got.reason) == 0;
    /* One writer, so both the counter and the record only move forward, together. */
    bool ordered = (seq & 1u) == 0 && seq >= last_seq && got.changes >= last_changes &&
                   seq == 2u * got.changes;
    if (!same || !ordered) {
      bad++;
      continue;
    }
    last_seq = seq;
    last_changes = got.changes;
    ok++;
  }

  __atomic_store_n(&ctl->stop, 1u, __ATOMIC_RELEASE);
  (void)sched_setaffinity(0, sizeof saved_affinity, &saved_affinity);
  assert_int_equal(waitpid(child, &status, 0), child);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);

  print_message("torn-read check: %u consistent, %u busy, %u bad reads, %u writes\n", ok, busy, bad,
                __atomic_load_n(&ctl->last_n, __ATOMIC_ACQUIRE));
  /*
   * How many reads succeed depends on scheduling (a writer preempted while the counter is odd
   * makes every read EBUSY until it runs again), so only the outcome of each read is asserted.
   */
  assert_int_equal(bad, 0);
  assert_int_equal(ok + busy, TORN_READS);

  em_state_record_t got;
  em_state_record_t want;
  uint32_t seq = 0;
  uint32_t last_n = __atomic_load_n(&ctl->last_n, __ATOMIC_ACQUIRE);
  assert_int_equal(em_state_page_read(page, &got, &seq), 0);
  make_torn_record(last_n, &want);
  assert_record_equal(&want, &got);
  assert_int_equal(seq, 2u * last_n);
  assert_int_equal(munmap(map, map_len), 0);
}

/* ---- Golden vectors ---- */

/* Each span vector's file is its row packed, and unpacks to its row. */
static void golden_span_vectors_are_their_rows_packed(void **state) {
  (void)state;
  for (size_t i = 0; i < em_wire_span_vector_count; i++) {
    uint8_t file[512], buf[EM_SPAN_DGRAM_BYTES];
    em_span_t out;
    size_t len = wire_file_read(em_wire_span_vectors[i].name, file, sizeof file);
    assert_int_equal(len, EM_SPAN_DGRAM_BYTES);
    assert_int_equal(em_span_pack(&em_wire_span_vectors[i].span, buf), 0);
    assert_memory_equal(file, buf, sizeof buf);
    assert_int_equal(em_span_unpack(file, len, &out), 0);
    assert_span_equal(&em_wire_span_vectors[i].span, &out);
  }
}

/* Each push vector's file is its row and agent pid packed, and unpacks to both. */
static void golden_push_vectors_are_their_rows_packed(void **state) {
  (void)state;
  for (size_t i = 0; i < em_wire_state_vector_count; i++) {
    const em_wire_state_vector_t *v = &em_wire_state_vectors[i];
    if (v->is_page) {
      continue;
    }
    uint8_t file[512], buf[EM_PUSH_DGRAM_BYTES];
    size_t len = wire_file_read(v->name, file, sizeof file);
    assert_int_equal(len, EM_PUSH_DGRAM_BYTES);
    assert_int_equal(em_push_pack(&v->rec, v->agent_pid, buf), 0);
    assert_memory_equal(file, buf, sizeof buf);
    em_state_record_t out;
    uint32_t pid = 0;
    assert_int_equal(em_push_unpack(file, len, &out, &pid), 0);
    assert_record_equal(&v->rec, &out);
    assert_int_equal(pid, v->agent_pid);
  }
}

/* page.bin is a page formatted with any record, then written once with the row: seq 2. */
static void golden_page_vector_is_init_plus_one_write(void **state) {
  (void)state;
  const em_wire_state_vector_t *page_vector = page_row();
  uint8_t file[512];
  size_t len = wire_file_read(page_vector->name, file, sizeof file);
  assert_int_equal(len, EM_STATE_PAGE_BYTES);
  uint8_t *page = new_page();
  assert_int_equal(em_state_page_init(page, page_vector->agent_pid, &valid_record), 0);
  assert_int_equal(em_state_page_write(page, &page_vector->rec), 0);
  assert_memory_equal(file, page, EM_STATE_PAGE_BYTES);
  free(page);
}

static void golden_page_vector_reads_back_its_row_at_seq_2(void **state) {
  (void)state;
  const em_wire_state_vector_t *page_vector = page_row();
  uint8_t *page = new_page();
  size_t len = wire_file_read(page_vector->name, page, EM_STATE_PAGE_BYTES);
  assert_int_equal(len, EM_STATE_PAGE_BYTES);
  assert_page_holds(page, &page_vector->rec, 2);
  assert_int_equal(page[12] | page[13] << 8 | page[14] << 16 | (uint32_t)page[15] << 24,
                   page_vector->agent_pid);
  free(page);
}

/* The datagram vectors cut at every shorter length (and one byte longer) are ESIZE. */
static void golden_vectors_truncated_at_every_length_fail_with_esize(void **state) {
  (void)state;
  for (size_t i = 0; i < em_wire_span_vector_count; i++) {
    uint8_t file[512] = {0};
    size_t len = wire_file_read(em_wire_span_vectors[i].name, file, sizeof file);
    for (size_t cut = 0; cut <= len + 1; cut++) {
      em_span_t out;
      assert_int_equal(em_span_unpack(file, cut, &out), cut == len ? 0 : EM_PROTO_ESIZE);
    }
  }
  for (size_t i = 0; i < em_wire_state_vector_count; i++) {
    if (em_wire_state_vectors[i].is_page) {
      continue;
    }
    uint8_t file[512] = {0};
    size_t len = wire_file_read(em_wire_state_vectors[i].name, file, sizeof file);
    for (size_t cut = 0; cut <= len + 1; cut++) {
      em_state_record_t out;
      assert_int_equal(em_push_unpack(file, cut, &out, NULL), cut == len ? 0 : EM_PROTO_ESIZE);
    }
  }
}

/* Unpacks the `bytes` bytes at m and packs what it read into `again`; false when unpack
 * refuses them. */
typedef bool (*repack_fn)(const uint8_t *m, size_t bytes, uint8_t *again);

static bool repack_span(const uint8_t *m, size_t bytes, uint8_t *again) {
  em_span_t out;
  if (em_span_unpack(m, bytes, &out) != 0) {
    return false;
  }
  assert_int_equal(em_span_pack(&out, again), 0);
  return true;
}

static bool repack_push(const uint8_t *m, size_t bytes, uint8_t *again) {
  em_state_record_t out;
  uint32_t pid = 0;
  if (em_push_unpack(m, bytes, &out, &pid) != 0) {
    return false;
  }
  assert_int_equal(em_push_pack(&out, pid, again), 0);
  return true;
}

/* Every single-byte change of vector `name` (a datagram of `bytes` bytes) to every value is
 * refused, or repacks to exactly the changed bytes. */
static void check_every_byte_change(const char *name, size_t bytes, repack_fn repack) {
  uint8_t file[512], m[512], again[512];
  size_t len = wire_file_read(name, file, sizeof file);
  assert_true(bytes <= sizeof m);
  for (size_t off = 0; off < len; off++) {
    for (unsigned v = 0; v < 256; v++) {
      memcpy(m, file, bytes);
      m[off] = (uint8_t)v;
      if (repack(m, bytes, again)) {
        assert_memory_equal(m, again, bytes);
      }
    }
  }
}

/*
 * Strictness: no byte is ignored. Change any single byte of a datagram vector to any value:
 * either unpack refuses it, or packing what it decoded gives back exactly the changed bytes.
 */
static void golden_vectors_with_any_byte_changed_fail_or_repack_identically(void **state) {
  (void)state;
  for (size_t i = 0; i < em_wire_span_vector_count; i++) {
    check_every_byte_change(em_wire_span_vectors[i].name, EM_SPAN_DGRAM_BYTES, repack_span);
  }
  for (size_t i = 0; i < em_wire_state_vector_count; i++) {
    if (em_wire_state_vectors[i].is_page) {
      continue;
    }
    check_every_byte_change(em_wire_state_vectors[i].name, EM_PUSH_DGRAM_BYTES, repack_push);
  }
}

/* ---- Model datagram v2 ---- */

#define LABELS_AT  112u
#define SLOT_BYTES 48u

static const em_label_t two_labels[] = {{"site", "lab-3"}, {"variant", "full"}};
static const em_model_t model_row = {"mobilenet_v3_small", "1.4", two_labels, 2};

static void pack_row(uint8_t out[EM_MODEL_DGRAM_BYTES]) {
  assert_int_equal(em_model_dgram_pack(&model_row, 4242, 1, out), 0);
}

static void assert_same_model(const em_model_t *want, const em_model_dgram_t *got) {
  em_label_t labels[EM_PROTO_MAX_MODEL_LABELS];
  em_model_t view;
  em_model_dgram_view(got, labels, &view);
  assert_true(em_proto_model_equal(want, &view));
}

/* ---- Layout and round trips ---- */

static void model_pack_writes_documented_layout(void **state) {
  (void)state;
  uint8_t b[EM_MODEL_DGRAM_BYTES];
  memset(b, 0xaa, sizeof b);
  pack_row(b);
  assert_memory_equal(b, "EM\x02\x07", 4);
  assert_memory_equal(b + 4, "\x92\x10\x00\x00", 4); /* pid 4242, little-endian */
  assert_memory_equal(b + 8, "\x01\x00\x00\x00", 4); /* generation 1 */
  assert_int_equal(b[12], 2);
  assert_memory_equal(b + 13, "\0\0\0", 3);
  assert_string_equal((const char *)b + 16, "mobilenet_v3_small");
  assert_string_equal((const char *)b + 80, "1.4");
  assert_string_equal((const char *)b + LABELS_AT, "site");
  assert_string_equal((const char *)b + LABELS_AT + 16, "lab-3");
  assert_string_equal((const char *)b + LABELS_AT + SLOT_BYTES, "variant");
  assert_string_equal((const char *)b + LABELS_AT + SLOT_BYTES + 16, "full");
  for (size_t i = LABELS_AT + 2 * SLOT_BYTES; i < EM_MODEL_DGRAM_BYTES; i++) {
    assert_int_equal(b[i], 0); /* Unused slots and the reserved tail: zero, not 0xaa. */
  }
  for (size_t i = 16 + 18; i < 80; i++) {
    assert_int_equal(b[i], 0); /* NUL padding of the name. */
  }
}

static void model_roundtrip_keeps_every_field(void **state) {
  (void)state;
  uint8_t b[EM_MODEL_DGRAM_BYTES];
  pack_row(b);
  em_model_dgram_t d;
  assert_int_equal(em_model_dgram_unpack(b, sizeof b, &d), 0);
  assert_int_equal(d.pid, 4242);
  assert_int_equal(d.generation, 1);
  assert_int_equal(d.n_labels, 2);
  assert_same_model(&model_row, &d);

  static const em_model_t bare = {"resnet18", "2", NULL, 0};
  assert_int_equal(em_model_dgram_pack(&bare, 1, UINT32_MAX, b), 0);
  assert_int_equal(em_model_dgram_unpack(b, sizeof b, &d), 0);
  assert_int_equal(d.n_labels, 0);
  assert_int_equal(d.generation, UINT32_MAX);
  assert_same_model(&bare, &d);
}

/* ---- Pack refuses what the schema refuses ---- */

static const em_label_t unsorted[] = {{"variant", "full"}, {"site", "lab"}};
static const em_label_t twice[] = {{"site", "a"}, {"site", "b"}};
static const em_label_t bad_key[] = {{"1site", "a"}};
static const em_label_t dunder_key[] = {{"__site", "a"}};
static const em_label_t long_key[] = {{"abcdefghijklmnop", "a"}}; /* 16 bytes */
static const em_label_t empty_value[] = {{"site", ""}};
static const em_label_t long_value[] = {{"site", "0123456789012345678901234567890x"}};
static const em_label_t nine[] = {{"a", "1"}, {"b", "1"}, {"c", "1"}, {"d", "1"}, {"e", "1"},
                                  {"f", "1"}, {"g", "1"}, {"h", "1"}, {"i", "1"}};

static const struct {
  const char *what;
  em_model_t m;
  int code;
} bad_models[] = {
    {"no name", {NULL, "1", NULL, 0}, EM_PROTO_EINVAL},
    {"empty name", {"", "1", NULL, 0}, EM_PROTO_ESTRING},
    {"name of 64 bytes",
     {"0123456789012345678901234567890123456789012345678901234567890123", "1", NULL, 0},
     EM_PROTO_ESTRING},
    {"newline in the name", {"mobile\nnet", "1", NULL, 0}, EM_PROTO_ESTRING},
    {"no version", {"m", NULL, NULL, 0}, EM_PROTO_ESTRING},
    {"empty version", {"m", "", NULL, 0}, EM_PROTO_ESTRING},
    {"version of 32 bytes", {"m", "01234567890123456789012345678901", NULL, 0}, EM_PROTO_ESTRING},
    {"keys not ascending", {"m", "1", unsorted, 2}, EM_PROTO_EINVAL},
    {"a key twice", {"m", "1", twice, 2}, EM_PROTO_EDUPLICATE},
    {"key starting with a digit", {"m", "1", bad_key, 1}, EM_PROTO_ESTRING},
    {"key starting with __", {"m", "1", dunder_key, 1}, EM_PROTO_ESTRING},
    {"key of 16 bytes", {"m", "1", long_key, 1}, EM_PROTO_ESTRING},
    {"empty value", {"m", "1", empty_value, 1}, EM_PROTO_ESTRING},
    {"value of 32 bytes", {"m", "1", long_value, 1}, EM_PROTO_ESTRING},
    {"9 labels", {"m", "1", nine, 9}, EM_PROTO_ELIMIT},
    {"labels NULL with a count", {"m", "1", NULL, 1}, EM_PROTO_EINVAL},
};

static void model_pack_refuses_what_the_schema_refuses(void **state) {
  (void)state;
  for (size_t i = 0; i < ARRAY_LEN(bad_models); i++) {
    uint8_t b[EM_MODEL_DGRAM_BYTES];
    memset(b, 0x5a, sizeof b);
    int rc = em_model_dgram_pack(&bad_models[i].m, 1, 1, b);
    if (rc != bad_models[i].code) {
      print_error("%s: got %d, want %d\n", bad_models[i].what, rc, bad_models[i].code);
      fail();
    }
    for (size_t k = 0; k < sizeof b; k++) {
      assert_int_equal(b[k], 0x5a); /* Untouched. */
    }
  }
  uint8_t b[EM_MODEL_DGRAM_BYTES];
  assert_int_equal(em_model_dgram_pack(NULL, 1, 1, b), EM_PROTO_EINVAL);
  assert_int_equal(em_model_dgram_pack(&model_row, 1, 1, NULL), EM_PROTO_EINVAL);
}

/* ---- Unpack: every check and its order ---- */

static void model_unpack_refuses_every_other_length(void **state) {
  (void)state;
  uint8_t b[EM_MODEL_DGRAM_BYTES + 1] = {0};
  pack_row(b);
  em_model_dgram_t d;
  for (size_t len = 0; len <= sizeof b; len++) {
    int want = len == EM_MODEL_DGRAM_BYTES ? 0 : EM_PROTO_ESIZE;
    assert_int_equal(em_model_dgram_unpack(b, len, &d), want);
  }
  assert_int_equal(em_model_dgram_unpack(NULL, EM_MODEL_DGRAM_BYTES, &d), EM_PROTO_EINVAL);
  assert_int_equal(em_model_dgram_unpack(b, EM_MODEL_DGRAM_BYTES, NULL), EM_PROTO_EINVAL);
}

typedef struct {
  const char *what;
  size_t offset;
  const char *bytes; /* Written at offset (strlen bytes, or n when n is set). */
  size_t n;
  int code;
} garble_t;

static const garble_t garbles[] = {
    {"magic", 0, "EN", 0, EM_PROTO_EMAGIC},
    {"version 1", 2, "\x01", 0, EM_PROTO_EVERSION},
    {"kind 5", 3, "\x05", 0, EM_PROTO_EKIND},
    {"9 labels", 12, "\x09", 0, EM_PROTO_ELIMIT},
    {"255 labels", 12, "\xff", 0, EM_PROTO_ELIMIT},
    {"reserved after n_labels", 15, "\x01", 0, EM_PROTO_ERANGE},
    {"reserved tail", 511, "\x80", 0, EM_PROTO_ERANGE},
    {"a byte in an unused slot", LABELS_AT + 2 * SLOT_BYTES + 20, "x", 0, EM_PROTO_ERANGE},
    {"name without NUL", 16, "0123456789012345678901234567890123456789012345678901234567890123", 0,
     EM_PROTO_ESTRING},
    {"a byte after the name's NUL", 16 + 63, "x", 0, EM_PROTO_ESTRING},
    {"empty name", 16, "\0", 1, EM_PROTO_ESTRING},
    {"tab in the version", 80, "1\t4", 0, EM_PROTO_ESTRING},
    {"DEL in a value", LABELS_AT + 16, "lab\x7f", 0, EM_PROTO_ESTRING},
    {"byte 0x80 in the name", 16, "\x80", 0, EM_PROTO_ESTRING},
    {"key without NUL", LABELS_AT, "abcdefghijklmnop", 0, EM_PROTO_ESTRING},
    {"key with a dash", LABELS_AT, "si-e", 0, EM_PROTO_ESTRING},
    {"key starting with __", LABELS_AT, "__te", 0, EM_PROTO_ESTRING},
    {"empty value", LABELS_AT + 16, "\0\0\0\0\0", 5, EM_PROTO_ESTRING},
    {"keys not ascending", LABELS_AT, "wite", 0, EM_PROTO_EINVAL},
    {"a key twice", LABELS_AT, "variant", 0, EM_PROTO_EDUPLICATE},
};

static void model_unpack_refuses_each_garbled_field(void **state) {
  (void)state;
  for (size_t i = 0; i < ARRAY_LEN(garbles); i++) {
    uint8_t b[EM_MODEL_DGRAM_BYTES];
    pack_row(b);
    size_t n = garbles[i].n ? garbles[i].n : strlen(garbles[i].bytes);
    memcpy(b + garbles[i].offset, garbles[i].bytes, n);
    em_model_dgram_t d;
    memset(&d, 0x33, sizeof d);
    int rc = em_model_dgram_unpack(b, sizeof b, &d);
    if (rc != garbles[i].code) {
      print_error("%s: got %d, want %d\n", garbles[i].what, rc, garbles[i].code);
      fail();
    }
    assert_int_equal(d.pid, 0x33333333u); /* Untouched on failure. */
  }
}

/* Every check broken at once; fixing the reported one reveals the next, in WIRE.md's order. */
static void model_unpack_reports_the_first_failure_in_order(void **state) {
  (void)state;
  uint8_t b[EM_MODEL_DGRAM_BYTES];
  pack_row(b);
  uint8_t good[EM_MODEL_DGRAM_BYTES];
  memcpy(good, b, sizeof b);
  memcpy(b + LABELS_AT, "wite", 4);                 /* EINVAL (order), found last */
  memcpy(b + LABELS_AT + SLOT_BYTES + 16, "\t", 1); /* ESTRING (class) */
  b[80 + 31] = 'x';                                 /* ESTRING (framing) */
  b[500] = 1;                                       /* ERANGE */
  b[12] = 9;                                        /* ELIMIT */
  b[3] = 1;                                         /* EKIND */
  b[2] = 3;                                         /* EVERSION */
  b[0] = 0;                                         /* EMAGIC */
  static const struct {
    size_t offset;
    int code;
  } order[] = {{0, EM_PROTO_EMAGIC},
               {2, EM_PROTO_EVERSION},
               {3, EM_PROTO_EKIND},
               {12, EM_PROTO_ELIMIT},
               {500, EM_PROTO_ERANGE},
               {80 + 31, EM_PROTO_ESTRING},
               {LABELS_AT + SLOT_BYTES + 16, EM_PROTO_ESTRING}};
  em_model_dgram_t d;
  for (size_t i = 0; i < ARRAY_LEN(order); i++) {
    assert_int_equal(em_model_dgram_unpack(b, sizeof b, &d), order[i].code);
    b[order[i].offset] = good[order[i].offset];
  }
  assert_int_equal(em_model_dgram_unpack(b, sizeof b, &d), EM_PROTO_EINVAL);
  memcpy(b + LABELS_AT, good + LABELS_AT, 4);
  assert_int_equal(em_model_dgram_unpack(b, sizeof b, &d), 0);
}

/* ---- Golden vectors ---- */

static void golden_model_vectors_pack_and_unpack_to_their_rows(void **state) {
  (void)state;
  for (size_t i = 0; i < em_wire_model_vector_count; i++) {
    uint8_t file[EM_MODEL_DGRAM_BYTES + 1];
    size_t len = wire_file_read(em_wire_model_vectors[i].name, file, sizeof file);
    assert_int_equal(len, EM_MODEL_DGRAM_BYTES);
    uint8_t b[EM_MODEL_DGRAM_BYTES];
    assert_int_equal(em_model_dgram_pack(&em_wire_model_vectors[i].model,
                                         em_wire_model_vectors[i].pid,
                                         em_wire_model_vectors[i].generation, b),
                     0);
    assert_memory_equal(b, file, EM_MODEL_DGRAM_BYTES);
    em_model_dgram_t d;
    assert_int_equal(em_model_dgram_unpack(file, len, &d), 0);
    assert_int_equal(d.pid, em_wire_model_vectors[i].pid);
    assert_int_equal(d.generation, em_wire_model_vectors[i].generation);
    assert_same_model(&em_wire_model_vectors[i].model, &d);
  }
}

/* A changed byte is refused, or what it unpacks to packs back to exactly the changed bytes. */
static void golden_model_vectors_with_any_byte_changed_fail_or_repack_identically(void **state) {
  (void)state;
  static const uint8_t values[] = {0x00, 0x01, 0x09, 0x20, 0x2d, 0x5f, 0x61, 0x7f, 0xff};
  for (size_t v = 0; v < em_wire_model_vector_count; v++) {
    uint8_t file[EM_MODEL_DGRAM_BYTES + 1];
    assert_int_equal(wire_file_read(em_wire_model_vectors[v].name, file, sizeof file),
                     EM_MODEL_DGRAM_BYTES);
    for (size_t at = 0; at < EM_MODEL_DGRAM_BYTES; at++) {
      for (size_t k = 0; k < ARRAY_LEN(values); k++) {
        uint8_t b[EM_MODEL_DGRAM_BYTES];
        memcpy(b, file, sizeof b);
        b[at] = values[k];
        em_model_dgram_t d;
        if (em_model_dgram_unpack(b, sizeof b, &d) != 0) {
          continue;
        }
        em_label_t labels[EM_PROTO_MAX_MODEL_LABELS];
        em_model_t view;
        em_model_dgram_view(&d, labels, &view);
        uint8_t again[EM_MODEL_DGRAM_BYTES];
        assert_int_equal(em_model_dgram_pack(&view, d.pid, d.generation, again), 0);
        assert_memory_equal(again, b, sizeof b);
      }
    }
  }
}

/* ---- Profile request page v1, Python stacks datagram v2 ---- */

static const char *const py_strings[] = {"<module> (/app/serve.py:40)", "main (/app/serve.py:31)",
                                         "Model.infer (/app/model.py:12)",
                                         "slow_checksum (/app/model.py:5)",
                                         "\xc3\xbc"
                                         "ber (/app/\xc3\xbc"
                                         ".py:1)"};
static const em_pysample_t py_samples[] = {
    {.tid = 4242, .time_ns = 1500000000ull, .depth = 4, .frames = {0, 1, 2, 3}},
    {.tid = 4242, .time_ns = 1510101010ull, .depth = 3, .frames = {0, 1, 2}},
    {.tid = 4250, .time_ns = 1520202020ull, .depth = 2, .frames = {0, 4}},
};

static void profile_page_vector_packs_and_unpacks_to_its_row(void **state) {
  (void)state;
  const em_profile_page_t row = {3, 99, 1000000000ull, 3000000000ull};
  uint8_t file[128], out[EM_PROFILE_PAGE_BYTES];
  size_t len = wire_file_read("profile_page", file, sizeof file);
  assert_int_equal(len, EM_PROFILE_PAGE_BYTES);
  assert_int_equal(em_profile_page_pack(&row, out), 0);
  assert_memory_equal(out, file, len);
  em_profile_page_t got;
  assert_int_equal(em_profile_page_unpack(file, len, &got), 0);
  assert_memory_equal(&got, &row, sizeof row);
  for (size_t cut = 0; cut < len; cut++) {
    assert_int_equal(em_profile_page_unpack(file, cut, &got), EM_PROTO_ESIZE);
  }
  assert_int_equal(em_profile_page_unpack(file, len + 1, &got), EM_PROTO_ESIZE);
  const em_profile_page_t bad_hz = {3, 0, 1, 2}, backwards = {3, 99, 2, 1};
  assert_int_equal(em_profile_page_pack(&bad_hz, out), EM_PROTO_ERANGE);
  assert_int_equal(em_profile_page_pack(&backwards, out), EM_PROTO_ERANGE);
  struct {
    size_t off;
    uint8_t val;
    int code;
  } rows[] = {{0, 'X', EM_PROTO_EMAGIC}, {4, 2, EM_PROTO_EVERSION}, {6, 65, EM_PROTO_ERANGE},
              {12, 0, EM_PROTO_ERANGE},  {13, 4, EM_PROTO_ERANGE},  {63, 1, EM_PROTO_ERANGE}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    uint8_t bad[EM_PROFILE_PAGE_BYTES];
    memcpy(bad, file, sizeof bad);
    bad[rows[i].off] = rows[i].val;
    assert_int_equal(em_profile_page_unpack(bad, sizeof bad, &got), rows[i].code);
  }
}

static void pystacks_vector_packs_and_unpacks_to_its_rows(void **state) {
  (void)state;
  uint8_t file[1024], out[1024];
  size_t len = wire_file_read("pystacks", file, sizeof file), out_len = 0;
  assert_int_equal(
      em_pystacks_pack(4242, 3, 7, py_strings, 5, py_samples, 3, out, sizeof out, &out_len), 0);
  assert_int_equal(out_len, len);
  assert_memory_equal(out, file, len);
  static em_pystacks_t v;
  assert_int_equal(em_pystacks_unpack(file, len, &v), 0);
  assert_int_equal(v.pid, 4242);
  assert_int_equal(v.window, 3);
  assert_int_equal(v.samples_cut, 7);
  assert_int_equal(v.n_strings, 5);
  assert_int_equal(v.n_samples, 3);
  for (uint16_t i = 0; i < 5; i++) {
    size_t n = 0;
    const uint8_t *t = em_pystacks_string(&v, i, &n);
    assert_int_equal(n, strlen(py_strings[i]));
    assert_memory_equal(t, py_strings[i], n);
  }
  size_t cursor = v.samples_off;
  em_pysample_t s;
  for (size_t i = 0; i < 3; i++) {
    assert_true(em_pystacks_next(&v, &cursor, &s));
    assert_int_equal(s.tid, py_samples[i].tid);
    assert_int_equal(s.time_ns, py_samples[i].time_ns);
    assert_int_equal(s.depth, py_samples[i].depth);
    assert_memory_equal(s.frames, py_samples[i].frames, s.depth * sizeof(s.frames[0]));
  }
  assert_false(em_pystacks_next(&v, &cursor, &s));
}

static void pystacks_unpack_refuses_every_truncation_and_each_garbled_field(void **state) {
  (void)state;
  uint8_t file[1024];
  size_t len = wire_file_read("pystacks", file, sizeof file);
  static em_pystacks_t v;
  for (size_t cut = 0; cut < len; cut++) {
    assert_int_equal(em_pystacks_unpack(file, cut, &v), EM_PROTO_ESIZE);
  }
  assert_int_equal(em_pystacks_unpack(file, len + 1, &v), EM_PROTO_ESIZE);
  struct {
    size_t off; /* From the end when >= 1000: len - (off - 1000). */
    uint8_t b0, b1;
    int code;
  } rows[] = {
      {0, 'X', 'M', EM_PROTO_EMAGIC},     {2, 1, 8, EM_PROTO_EVERSION},
      {2, 2, 7, EM_PROTO_EKIND},          {30, 1, 0, EM_PROTO_ERANGE},
      {16, 0x01, 0x10, EM_PROTO_ELIMIT},  {20, 0xff, 0xff, EM_PROTO_ESIZE},
      {32, 0, '<', EM_PROTO_ESTRING},     {33, '\n', 'm', EM_PROTO_ESTRING},
      {33, 0xc0, 0xaf, EM_PROTO_ESTRING}, {16, 4, 0, EM_PROTO_ESIZE},
      {18, 4, 0, EM_PROTO_ESIZE},         {18, 2, 0, EM_PROTO_ESIZE},
      {1002, 5, 0, EM_PROTO_ERANGE},      {1006, 0, 0, EM_PROTO_ERANGE},
      {1006, 1, 1, EM_PROTO_ERANGE},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    uint8_t bad[1024];
    memcpy(bad, file, len);
    size_t off = rows[i].off >= 1000 ? len - (rows[i].off - 1000) : rows[i].off;
    bad[off] = rows[i].b0;
    bad[off + 1] = rows[i].b1;
    assert_int_equal(em_pystacks_unpack(bad, len, &v), rows[i].code);
  }
}

static void pystacks_pack_reports_size_needed_and_refuses_bad_input(void **state) {
  (void)state;
  uint8_t out[1024];
  size_t need = 0, len = 0;
  assert_int_equal(em_pystacks_pack(1, 0, 0, py_strings, 5, py_samples, 3, out, 40, &need),
                   EM_PROTO_ENOSPACE);
  assert_int_equal(em_pystacks_pack(1, 0, 0, py_strings, 5, py_samples, 3, out, need, &len), 0);
  assert_int_equal(len, need);
  const char *const ctl[] = {"a\tb"}, *const empty[] = {""};
  em_pysample_t one = {.tid = 1, .time_ns = 1, .depth = 1, .frames = {0}};
  assert_int_equal(em_pystacks_pack(1, 0, 0, ctl, 1, &one, 1, out, sizeof out, &len),
                   EM_PROTO_ESTRING);
  assert_int_equal(em_pystacks_pack(1, 0, 0, empty, 1, &one, 1, out, sizeof out, &len),
                   EM_PROTO_ESTRING);
  one.frames[0] = 5;
  assert_int_equal(em_pystacks_pack(1, 0, 0, py_strings, 5, &one, 1, out, sizeof out, &len),
                   EM_PROTO_ERANGE);
  one.frames[0] = 0;
  one.depth = 0;
  assert_int_equal(em_pystacks_pack(1, 0, 0, py_strings, 5, &one, 1, out, sizeof out, &len),
                   EM_PROTO_ERANGE);
  /* 300 samples of depth 256 need 300 * 526 bytes: more than a datagram holds. */
  static em_pysample_t deep[300];
  for (size_t i = 0; i < 300; i++) {
    deep[i] = (em_pysample_t){.tid = 1, .time_ns = i, .depth = EM_PYSTACKS_MAX_DEPTH};
  }
  assert_int_equal(em_pystacks_pack(1, 0, 0, py_strings, 5, deep, 300, out, sizeof out, &len),
                   EM_PROTO_ETOOBIG);
  assert_true(len > EM_PYSTACKS_MAX_BYTES);
}

static void pystacks_vector_with_any_byte_changed_fails_or_repacks_identically(void **state) {
  (void)state;
  uint8_t file[1024];
  size_t len = wire_file_read("pystacks", file, sizeof file);
  static em_pystacks_t v;
  const uint8_t values[] = {0x00, 0x01, 0x20, 0x41, 0x7e, 0x7f, 0x80, 0xff};
  for (size_t off = 0; off < len; off++) {
    for (size_t k = 0; k <= sizeof values; k++) {
      uint8_t bad[1024];
      memcpy(bad, file, len);
      bad[off] = k < sizeof values ? values[k] : (uint8_t)(file[off] ^ 1u);
      if (em_pystacks_unpack(bad, len, &v) != 0) {
        continue;
      }
      char texts[EM_PYSTACKS_MAX_STRINGS][256];
      const char *ptrs[8];
      assert_true(v.n_strings <= 8);
      for (uint16_t i = 0; i < v.n_strings; i++) {
        size_t n = 0;
        const uint8_t *t = em_pystacks_string(&v, i, &n);
        memcpy(texts[i], t, n);
        texts[i][n] = '\0';
        ptrs[i] = texts[i];
      }
      em_pysample_t samples[8];
      size_t cursor = v.samples_off, n_samples = 0;
      while (n_samples < 8 && em_pystacks_next(&v, &cursor, &samples[n_samples])) {
        n_samples++;
      }
      assert_int_equal(n_samples, v.n_samples);
      uint8_t out[1024];
      size_t out_len = 0;
      assert_int_equal(em_pystacks_pack(v.pid, v.window, v.samples_cut, ptrs, v.n_strings, samples,
                                        n_samples, out, sizeof out, &out_len),
                       0);
      assert_int_equal(out_len, len);
      assert_memory_equal(out, bad, len);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(stage_name_rules),
      cmocka_unit_test(span_roundtrip_preserves_every_field),
      cmocka_unit_test(span_pack_writes_documented_layout),
      cmocka_unit_test(span_pack_sends_zero_padding_whatever_follows_the_nul),
      cmocka_unit_test(span_pack_rejects_invalid_spans),
      cmocka_unit_test(span_unpack_rejects_each_bad_length),
      cmocka_unit_test(span_unpack_error_order),
      cmocka_unit_test(span_unpack_checks_magic_version_and_kind_bytes),
      cmocka_unit_test(span_unpack_stage_field_rules),
      cmocka_unit_test(span_unpack_leaves_output_untouched_on_error),
      cmocka_unit_test(push_roundtrip),
      cmocka_unit_test(push_pack_writes_documented_layout),
      cmocka_unit_test(push_pack_and_unpack_refuse_the_same_records),
      cmocka_unit_test(push_pack_refuses_too_long_strings),
      cmocka_unit_test(push_unpack_rejects_each_bad_length),
      cmocka_unit_test(push_unpack_error_order),
      cmocka_unit_test(page_init_writes_header_seq_zero_and_record),
      cmocka_unit_test(page_read_sees_last_write),
      cmocka_unit_test(page_read_returns_busy_while_writer_holds_odd_seq),
      cmocka_unit_test(page_counter_wraps_through_zero),
      cmocka_unit_test(page_read_rejects_pages_that_are_not_v1),
      cmocka_unit_test(page_write_and_read_refuse_the_same_records),
      cmocka_unit_test(page_functions_reject_null_and_misaligned_pages),
      cmocka_unit_test(page_read_never_returns_a_torn_record),
      cmocka_unit_test(golden_span_vectors_are_their_rows_packed),
      cmocka_unit_test(golden_push_vectors_are_their_rows_packed),
      cmocka_unit_test(golden_page_vector_is_init_plus_one_write),
      cmocka_unit_test(golden_page_vector_reads_back_its_row_at_seq_2),
      cmocka_unit_test(golden_vectors_truncated_at_every_length_fail_with_esize),
      cmocka_unit_test(golden_vectors_with_any_byte_changed_fail_or_repack_identically),

      cmocka_unit_test(model_pack_writes_documented_layout),
      cmocka_unit_test(model_roundtrip_keeps_every_field),
      cmocka_unit_test(model_pack_refuses_what_the_schema_refuses),
      cmocka_unit_test(model_unpack_refuses_every_other_length),
      cmocka_unit_test(model_unpack_refuses_each_garbled_field),
      cmocka_unit_test(model_unpack_reports_the_first_failure_in_order),
      cmocka_unit_test(golden_model_vectors_pack_and_unpack_to_their_rows),
      cmocka_unit_test(golden_model_vectors_with_any_byte_changed_fail_or_repack_identically),

      cmocka_unit_test(profile_page_vector_packs_and_unpacks_to_its_row),
      cmocka_unit_test(pystacks_vector_packs_and_unpacks_to_its_rows),
      cmocka_unit_test(pystacks_unpack_refuses_every_truncation_and_each_garbled_field),
      cmocka_unit_test(pystacks_pack_reports_size_needed_and_refuses_bad_input),
      cmocka_unit_test(pystacks_vector_with_any_byte_changed_fails_or_repacks_identically),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
