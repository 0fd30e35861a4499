/*
 * test_proto_codec.c - the CBOR codec against the golden vectors and a table of bad inputs.
 *
 * Every golden vector row must encode to the committed bytes, and the committed bytes must
 * decode to the committed JSON; every prefix of every vector must fail as truncated; each
 * class of bad input must give its own error code at the right offset; the encoder must
 * report the size it needs and refuse what the decoder would refuse.
 */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "failing_alloc.h"
#include "vectors.h"

#define SCRATCH_BYTES EM_PROTO_SCRATCH_MAX

static uint8_t scratch[SCRATCH_BYTES];
static uint8_t out[EM_PROTO_MAX_MESSAGE_BYTES + 16];
static char json[16 * EM_PROTO_MAX_MESSAGE_BYTES];

/* Reads proto/vectors/<stem>.<ext> into a malloc'd buffer. */
static uint8_t *read_vector(const char *stem, const char *ext, size_t *len) {
  uint8_t *data = em_vector_file(EM_VECTORS_DIR, stem, ext, len);
  if (!data) {
    fail_msg("cannot read %s/%s.%s", EM_VECTORS_DIR, stem, ext);
  }
  return data;
}

/* Runs check(v) for every golden vector v (vectors.h), the same rows the files were made from. */
static void each_vector(void (*check)(const em_vector_t *v)) {
  size_t n;
  const em_vector_t *v = em_vectors(&n);
  for (size_t i = 0; i < n; i++) {
    check(&v[i]);
  }
}

static void encodes_to_its_file(const em_vector_t *v) {
  size_t want_len, len = 0;
  uint8_t *want = read_vector(v->name, "cbor", &want_len);
  int rc = em_proto_encode(&v->msg, out, sizeof(out), &len);
  if (rc != 0 || len != want_len || memcmp(out, want, len) != 0) {
    fail_msg("%s: encoder output differs from the golden file (rc %d, %zu vs %zu bytes)", v->name,
             rc, len, want_len);
  }
  free(want);
}

static void vectors_encode_to_the_golden_bytes(void **state) {
  (void)state;
  each_vector(encodes_to_its_file);
}

static void decodes_to_its_json(const em_vector_t *v) {
  size_t len, want_len, jlen = 0, off = 99;
  uint8_t *bytes = read_vector(v->name, "cbor", &len);
  char *want = (char *)read_vector(v->name, "json", &want_len);
  em_msg_t m;
  int rc = em_proto_decode(bytes, len, &m, scratch, em_proto_scratch_bytes(len), &off);
  if (rc) {
    fail_msg("%s: %s at byte %zu", v->name, em_proto_strerror(rc), off);
  }
  assert_int_equal(em_proto_to_json(&m, json, sizeof(json), &jlen), 0);
  assert_true(want_len > 0 && want[want_len - 1] == '\n');
  want[want_len - 1] = '\0';
  assert_string_equal(json, want);
  /* Decoded then encoded again gives the same bytes. */
  size_t again = 0;
  assert_int_equal(em_proto_encode(&m, out, sizeof(out), &again), 0);
  assert_int_equal(again, len);
  assert_memory_equal(out, bytes, len);
  free(bytes);
  free(want);
}

static void vectors_decode_to_the_golden_json(void **state) {
  (void)state;
  each_vector(decodes_to_its_json);
}

/*
 * Every proper prefix of a vector is truncated. For the 64 KiB vector every length in the
 * first and last 1 KiB and every 101st in between, to keep the test quick under sanitizers.
 */
static void fails_as_truncated_when_cut(const em_vector_t *v) {
  size_t len;
  uint8_t *bytes = read_vector(v->name, "cbor", &len);
  for (size_t cut = 0; cut < len; cut++) {
    if (len > 8192 && cut > 1024 && cut + 1024 < len && cut % 101 != 0) {
      continue;
    }
    uint8_t *copy = malloc(cut ? cut : 1); /* Exact size: ASan sees any read past it. */
    assert_non_null(copy);
    memcpy(copy, bytes, cut);
    em_msg_t m;
    size_t off = SIZE_MAX;
    int rc = em_proto_decode(copy, cut, &m, scratch, sizeof(scratch), &off);
    if (rc != EM_PROTO_ETRUNCATED || off > cut) {
      fail_msg("%s cut at %zu: got %d (%s) at %zu", v->name, cut, rc, em_proto_strerror(rc), off);
    }
    free(copy);
  }
  free(bytes);
}

static void vectors_truncated_at_every_length_fail_as_truncated(void **state) {
  (void)state;
  each_vector(fails_as_truncated_when_cut);
}

typedef struct {
  const char *what;
  const char *hex;
  int rc;
  int offset; /* -1: not checked */
} bad_row_t;

static const bad_row_t bad_rows[] = {
    {"empty input", "", EM_PROTO_ETRUNCATED, 0},
    {"lone break", "ff", EM_PROTO_EMALFORMED, 0},
    {"reserved additional info", "1c", EM_PROTO_EMALFORMED, 0},
    {"indefinite map", "bf0001ff", EM_PROTO_EINDEFINITE, 0},
    {"top level is an array", "8100", EM_PROTO_ETYPE, 0},
    {"map with one key", "a10001", EM_PROTO_EMISSING, 0},
    {"version 2", "a500020103021b18ea0da41e9d8000030704f5", EM_PROTO_EVERSION, 2},
    {"kind 9", "a200010109", EM_PROTO_EKIND, 4},
    {"kind before version", "a201030001", EM_PROTO_EMISSING, 1},
    {"text key", "a500010103021b18ea0da41e9d800003076178f5", EM_PROTO_EKEY, -1},
    {"duplicate key", "a500010103021b18ea0da41e9d8000020704f5", EM_PROTO_EDUPLICATE, -1},
    {"status without online", "a400010103021b18ea0da41e9d80000307", EM_PROTO_EMISSING, 0},
    {"status without session", "a400010103021b18ea0da41e9d800004f5", EM_PROTO_EMISSING, 0},
    {"status without time", "a400010103030704f5", EM_PROTO_EMISSING, 0},
    {"cmd without time", "a3000101040401", EM_PROTO_EMISSING, 0},
    {"cmd carries no session: its key 3 is skipped as unknown",
     "a500010104021b18ea0da41e9d80000361780401", 0, -1},
    {"status online is a uint", "a500010103021b18ea0da41e9d800003070401", EM_PROTO_ETYPE, -1},
    {"trailing byte", "a500010103021b18ea0da41e9d8000030704f500", EM_PROTO_ETRAILING, -1},
    {"session over 32 bits", "a500010103021b18ea0da41e9d8000031b000000010000000004f5",
     EM_PROTO_ERANGE, -1},
    {"time is negative", "a5000101030220030704f5", EM_PROTO_ETYPE, -1},
    {"tagged time", "a50001010302c11b18ea0da41e9d8000030704f5", EM_PROTO_ETYPE, -1},
    {"unknown key nested 9 deep", "a600010103021b18ea0da41e9d8000030704f51828818181818181818101",
     EM_PROTO_EDEPTH, -1},
    {"unknown key nested 8 deep is skipped",
     "a600010103021b18ea0da41e9d8000030704f51828a1616181818181818101", 0, -1},
    {"unknown key with a tag is skipped", "a600010103021b18ea0da41e9d8000030704f51829d9d9f7427879",
     0, -1},
    {"string length past the end", "a500010103021b18ea0da41e9d80000307047bffffffffffffffff",
     EM_PROTO_ETRUNCATED, -1},
    {"array count past the end",
     "a800010101021b18ea0da41e9d800003010400051a05f5e10006a0079a00ffffff", EM_PROTO_ETRUNCATED, -1},
    {"data level 4", "a900010101021b18ea0da41e9d800003010400051a05f5e10006a007800804",
     EM_PROTO_ERANGE, -1},
    {"data historical is 1", "a900010101021b18ea0da41e9d800003010400051a05f5e10006a007800901",
     EM_PROTO_ETYPE, -1},
    {"data without stages", "a700010101021b18ea0da41e9d800003010400051a05f5e10006a0",
     EM_PROTO_EMISSING, 0},
    {"values alias over 65535",
     "a800010101021b18ea0da41e9d800003010400051a05f5e10006a11a00010000010780", EM_PROTO_ERANGE, -1},
    {"values key is text",
     "a800010101021b18ea0da41e9d800003010400051a05f5e10006a1666379636c6573010780", EM_PROTO_EKEY,
     -1},
    {"values holds a string", "a800010101021b18ea0da41e9d800003010400051a05f5e10006a10161780780",
     EM_PROTO_ETYPE, -1},
    {"values holds NaN", "a800010101021b18ea0da41e9d800003010400051a05f5e10006a101f97e000780",
     EM_PROTO_ERANGE, -1},
    {"values holds infinity", "a800010101021b18ea0da41e9d800003010400051a05f5e10006a101f97c000780",
     EM_PROTO_ERANGE, -1},
    {"values holds a negative beyond int64",
     "a800010101021b18ea0da41e9d800003010400051a05f5e10006a1013bffffffffffffffff0780",
     EM_PROTO_ERANGE, -1},
    {"stage name 32 bytes",
     "a800010101021b18ea0da41e9d800003010400051a05f5e10006a00781ab007820616161616161616161616161616"
     "1616161616161616161616161616161616161010302181e0305040f050a060e070f080f09060b841864010102",
     EM_PROTO_ESTRING, -1},
    {"stage name with a slash",
     "a800010101021b18ea0da41e9d800003010400051a05f5e10006a00781ab0063612f62010302181e0305040f050a0"
     "60e070f080f09060b841864010102",
     EM_PROTO_ESTRING, -1},
    {"stage name empty",
     "a800010101021b18ea0da41e9d800003010400051a05f5e10006a00781ab0060010302181e0305040f050a060e070"
     "f080f09060b841864010102",
     EM_PROTO_ESTRING, -1},
    {"stage counts disagree",
     "a800010101021b18ea0da41e9d800003010400051a05f5e10006a00781ab0065696e666572010402181e0305040f0"
     "50a060e070f080f09060b841864010102",
     EM_PROTO_EINCONSISTENT, -1},
    {"stage percentiles out of order",
     "a800010101021b18ea0da41e9d800003010400051a05f5e10006a00781ab0065696e666572010302181e0305040f0"
     "50e060a070f080f09060b841864010102",
     EM_PROTO_EINCONSISTENT, -1},
    {"stage bucket gap 0",
     "a800010101021b18ea0da41e9d800003010400051a05f5e10006a00781ab0065696e666572010302181e0305040f0"
     "50a060e070f080f09060b841864010002",
     EM_PROTO_EINCONSISTENT, -1},
    {"stage odd bucket array",
     "a800010101021b18ea0da41e9d800003010400051a05f5e10006a00781ab0065696e666572010302181e0305040f0"
     "50a060e070f080f09060b8318640101",
     EM_PROTO_EINCONSISTENT, -1},
    {"stage scale 21",
     "a800010101021b18ea0da41e9d800003010400051a05f5e10006a00781ab0065696e666572010302181e0305040f0"
     "50a060e070f080f09150b841864010102",
     EM_PROTO_ERANGE, -1},
    {"stage without buckets",
     "a800010101021b18ea0da41e9d800003010400051a05f5e10006a00781aa0065696e666572010302181e0305040f0"
     "50a060e070f080f0906",
     EM_PROTO_EMISSING, -1},
    {"idle stage with a sum",
     "a800010101021b18ea0da41e9d800003010400051a05f5e10006a00781a3006469646c6501000205",
     EM_PROTO_EINCONSISTENT, -1},
    {"stage bucket count 0",
     "a800010101021b18ea0da41e9d800003010400051a05f5e10006a00781ab0065696e666572010302181e0305040f0"
     "50a060e070f080f09060b841864000103",
     EM_PROTO_ERANGE, -1},
    {"stage index past int32",
     "a800010101021b18ea0da41e9d800003010400051a05f5e10006a00781ab0065696e666572010302181e0305040f0"
     "50a060e070f080f09060b821a8000000003",
     EM_PROTO_ERANGE, -1},
    {"65 stages",
     "a800010101021b18ea0da41e9d800003010400051a05f5e10006a0079841a20061730100a20061730100a20061730"
     "100a20061730100a20061730100a20061730100a20061730100a20061730100a20061730100a20061730100a20061"
     "730100a20061730100a20061730100a20061730100a20061730100a20061730100a20061730100a20061730100a20"
     "061730100a20061730100a20061730100a20061730100a20061730100a20061730100a20061730100a20061730100"
     "a20061730100a20061730100a20061730100a20061730100a20061730100a20061730100a20061730100a20061730"
     "100a20061730100a20061730100a20061730100a20061730100a20061730100a20061730100a20061730100a20061"
     "730100a20061730100a20061730100a20061730100a20061730100a20061730100a20061730100a20061730100a20"
     "061730100a20061730100a20061730100a20061730100a20061730100a20061730100a20061730100a20061730100"
     "a20061730100a20061730100a20061730100a20061730100a20061730100a20061730100a20061730100a20061730"
     "100",
     EM_PROTO_ELIMIT, -1},
    {"state reason with a control character",
     "a800010102021b18ea0da41e9d800003010402050006050b686261640762656c6c", EM_PROTO_ESTRING, -1},
    {"state reason with invalid UTF-8", "a800010102021b18ea0da41e9d800003010402050006050b62c328",
     EM_PROTO_ESTRING, -1},
    {"state without mono_ns", "a600010102021b18ea0da41e9d8000030104020500", EM_PROTO_EMISSING, 0},
    {"birth device with a plus",
     "aa00010100021b18ea0da41e9d8000030104656465762b310563302e3106616207186408800980",
     EM_PROTO_ESTRING, -1},
    {"birth duplicate alias",
     "aa00010100021b18ea0da41e9d8000030104636465760563302e310661620718640882a400010161610261310300a"
     "4000101616202613103000980",
     EM_PROTO_EDUPLICATE, -1},
    {"birth metric kind 3",
     "aa00010100021b18ea0da41e9d8000030104636465760563302e310661620718640881a4000101616102613103030"
     "980",
     EM_PROTO_ERANGE, -1},
    {"birth budget level nominal",
     "aa00010100021b18ea0da41e9d8000030104636465760563302e3106616207186408800981a400617201686465616"
     "46c696e6502000305",
     EM_PROTO_ERANGE, -1},
    {"birth budget bound null",
     "aa00010100021b18ea0da41e9d8000030104636465760563302e3106616207186408800981a400617201686465616"
     "46c696e65020203f6",
     EM_PROTO_ETYPE, -1},
    {"cmd unknown command", "a400010104021b18ea0da41e9d80000409", EM_PROTO_ERANGE, -1},
};

static size_t unhex(const char *hex, uint8_t *buf, size_t cap) {
  size_t n = strlen(hex) / 2;
  assert_true(n <= cap);
  for (size_t i = 0; i < n; i++) {
    unsigned v;
    assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
    buf[i] = (uint8_t)v;
  }
  return n;
}

static void each_bad_input_gets_its_own_error(void **state) {
  (void)state;
  static uint8_t in[4096];
  for (size_t i = 0; i < sizeof(bad_rows) / sizeof(bad_rows[0]); i++) {
    const bad_row_t *r = &bad_rows[i];
    size_t len = unhex(r->hex, in, sizeof(in));
    em_msg_t m;
    size_t off = SIZE_MAX;
    int rc = em_proto_decode(in, len, &m, scratch, sizeof(scratch), &off);
    if (rc != r->rc) {
      fail_msg("%s: want %d (%s), got %d (%s) at %zu", r->what, r->rc, em_proto_strerror(r->rc), rc,
               em_proto_strerror(rc), off);
    }
    if (rc != 0 && (off > len || (r->offset >= 0 && off != (size_t)r->offset))) {
      fail_msg("%s: error offset %zu, want %d", r->what, off, r->offset);
    }
  }
}

/* A data message whose values map announces `count` entries, each `alias: 0`. */
static size_t data_with_values(uint8_t *buf, size_t count) {
  size_t n = unhex("a800010101020003010400050006", buf, 32); /* ..., key 6, then the map */
  buf[n++] = 0xb9;
  buf[n++] = (uint8_t)(count >> 8);
  buf[n++] = (uint8_t)count;
  for (size_t i = 0; i < count; i++) {
    buf[n++] = 0x19;
    buf[n++] = (uint8_t)(i >> 8);
    buf[n++] = (uint8_t)i;
    buf[n++] = 0x00;
  }
  buf[n++] = 0x07;
  buf[n++] = 0x80;
  return n;
}

static void item_counts_past_the_schema_limits_are_refused(void **state) {
  (void)state;
  static uint8_t in[8192];
  em_msg_t m;
  size_t len = data_with_values(in, EM_PROTO_MAX_METRICS);
  assert_int_equal(em_proto_decode(in, len, &m, scratch, sizeof(scratch), NULL), 0);
  assert_int_equal(m.u.data.n_samples, EM_PROTO_MAX_METRICS);
  len = data_with_values(in, EM_PROTO_MAX_METRICS + 1);
  assert_int_equal(em_proto_decode(in, len, &m, scratch, sizeof(scratch), NULL), EM_PROTO_ELIMIT);
}

static void messages_over_64k_are_too_big(void **state) {
  (void)state;
  size_t len;
  uint8_t *bytes = read_vector("data_largest", "cbor", &len);
  assert_int_equal(len, EM_PROTO_MAX_MESSAGE_BYTES);
  uint8_t *big = calloc(len + 1, 1);
  assert_non_null(big);
  memcpy(big, bytes, len);
  em_msg_t m;
  assert_int_equal(em_proto_decode(big, len + 1, &m, scratch, sizeof(scratch), NULL),
                   EM_PROTO_ETOOBIG);
  /* One more bucket on the largest message: the encoder refuses it too. */
  assert_int_equal(em_proto_decode(bytes, len, &m, scratch, sizeof(scratch), NULL), 0);
  em_stage_t stages[EM_PROTO_MAX_STAGES];
  memcpy(stages, m.u.data.stages, m.u.data.n_stages * sizeof(stages[0]));
  em_bucket_t more[EM_PROTO_MAX_BUCKETS + 1];
  memcpy(more, stages[0].buckets, stages[0].n_buckets * sizeof(more[0]));
  more[stages[0].n_buckets] = (em_bucket_t){.index = INT32_MAX, .count = 1};
  stages[0].buckets = more;
  stages[0].n_buckets++;
  stages[0].count++;
  m.u.data.stages = stages;
  size_t need = 0;
  assert_int_equal(em_proto_encode(&m, out, sizeof(out), &need), EM_PROTO_ETOOBIG);
  assert_true(need > EM_PROTO_MAX_MESSAGE_BYTES);
  free(big);
  free(bytes);
}

/* A long chain of tags on an unknown key: skipped without recursion (found by the fuzzer). */
static void long_tag_chains_are_skipped_without_recursion(void **state) {
  (void)state;
  static uint8_t in[70000];
  /* status {0:1, 1:3, 2:0, 3:7, 4:true, 40: tag(1)(tag(1)(...(0)))} */
  size_t n = unhex("a6000101030200030704f51828", in, 32);
  size_t tags = sizeof(in) - n - 1;
  memset(in + n, 0xc1, tags);
  in[n + tags] = 0x00;
  em_msg_t m;
  assert_int_equal(em_proto_decode(in, n + tags + 1, &m, scratch, sizeof(scratch), NULL),
                   EM_PROTO_ETOOBIG);
  size_t len = EM_PROTO_MAX_MESSAGE_BYTES;
  in[len - 1] = 0x00;
  assert_int_equal(em_proto_decode(in, len, &m, scratch, sizeof(scratch), NULL), 0);
  assert_true(m.u.status.online);
  assert_int_equal(em_proto_decode(in, len - 1, &m, scratch, sizeof(scratch), NULL),
                   EM_PROTO_ETRUNCATED);
}

static void decoding_with_too_little_scratch_says_so(void **state) {
  (void)state;
  size_t len;
  uint8_t *bytes = read_vector("data_basic", "cbor", &len);
  em_msg_t m;
  assert_int_equal(em_proto_decode(bytes, len, &m, scratch, 64, NULL), EM_PROTO_ESCRATCH);
  assert_int_equal(em_proto_decode(bytes, len, &m, scratch, em_proto_scratch_bytes(len), NULL), 0);
  free(bytes);
}

/* The densest inputs: idle stages with 1-byte names, and samples that are all null. */
static void scratch_bound_holds_for_the_densest_inputs(void **state) {
  (void)state;
  static em_stage_t idle[EM_PROTO_MAX_STAGES];
  static em_sample_t nulls[EM_PROTO_MAX_METRICS];
  for (size_t i = 0; i < EM_PROTO_MAX_STAGES; i++) {
    idle[i] = (em_stage_t){.name = "x", .count = 0};
  }
  for (size_t i = 0; i < EM_PROTO_MAX_METRICS; i++) {
    nulls[i] = (em_sample_t){.alias = (uint32_t)i};
  }
  em_msg_t rows[] = {
      {.kind = EM_MSG_DATA, .u.data = {.stages = idle, .n_stages = EM_PROTO_MAX_STAGES}},
      {.kind = EM_MSG_DATA, .u.data = {.samples = nulls, .n_samples = 24}},
      {.kind = EM_MSG_DATA, .u.data = {.samples = nulls, .n_samples = EM_PROTO_MAX_METRICS}},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    size_t len = 0;
    em_msg_t m;
    assert_int_equal(em_proto_encode(&rows[i], out, sizeof(out), &len), 0);
    assert_int_equal(em_proto_decode(out, len, &m, scratch, em_proto_scratch_bytes(len), NULL), 0);
  }
}

static void reports_its_size_for_every_short_buffer(const em_vector_t *v) {
  size_t full = 0;
  assert_int_equal(em_proto_encode(&v->msg, out, sizeof(out), &full), 0);
  size_t step = full > 4096 ? 997 : 1;
  for (size_t cap = 0; cap < full; cap += step) {
    uint8_t *small = malloc(cap ? cap : 1);
    assert_non_null(small);
    size_t need = 0;
    int rc = em_proto_encode(&v->msg, cap ? small : NULL, cap, &need);
    if (rc != EM_PROTO_ENOSPACE || need != full) {
      fail_msg("%s cap %zu: rc %d need %zu, want ENOSPACE and %zu", v->name, cap, rc, need, full);
    }
    free(small);
  }
}

static void encoder_reports_the_size_it_needs_for_every_short_buffer(void **state) {
  (void)state;
  each_vector(reports_its_size_for_every_short_buffer);
}

static void encoder_refuses_what_the_decoder_would_refuse(void **state) {
  (void)state;
  static const em_bucket_t two[] = {{.index = 5, .count = 1}, {.index = 5, .count = 1}};
  em_sample_t unsorted[] = {{.alias = 2}, {.alias = 1}};
  em_sample_t dup[] = {{.alias = 1}, {.alias = 1}};
  em_sample_t nan[] = {{.alias = 1, .value = {.type = EM_VALUE_FLOAT, .as.f = 0.0 / 0.0}}};
  em_stage_t bad_order = {.name = "s",
                          .count = 2,
                          .sum_ns = 10,
                          .min_ns = 1,
                          .max_ns = 9,
                          .p50_ns = 5,
                          .p90_ns = 9,
                          .p99_ns = 9,
                          .p999_ns = 9,
                          .scale = 0,
                          .buckets = two,
                          .n_buckets = 2};
  em_stage_t long_name = {.name = "abcdefghijklmnopqrstuvwxyz012345", .count = 0};
  struct {
    const char *what;
    em_msg_t msg;
    int rc;
  } rows[] = {
      {"unsorted aliases",
       {.kind = EM_MSG_DATA, .u.data = {.samples = unsorted, .n_samples = 2}},
       EM_PROTO_EINVAL},
      {"duplicate aliases",
       {.kind = EM_MSG_DATA, .u.data = {.samples = dup, .n_samples = 2}},
       EM_PROTO_EDUPLICATE},
      {"NaN value",
       {.kind = EM_MSG_DATA, .u.data = {.samples = nan, .n_samples = 1}},
       EM_PROTO_ERANGE},
      {"bucket indices not ascending",
       {.kind = EM_MSG_DATA, .u.data = {.stages = &bad_order, .n_stages = 1}},
       EM_PROTO_EINCONSISTENT},
      {"stage name of 32 bytes",
       {.kind = EM_MSG_DATA, .u.data = {.stages = &long_name, .n_stages = 1}},
       EM_PROTO_ESTRING},
      {"too many samples",
       {.kind = EM_MSG_DATA, .u.data = {.samples = dup, .n_samples = EM_PROTO_MAX_METRICS + 1}},
       EM_PROTO_ELIMIT},
      {"data level 7", {.kind = EM_MSG_DATA, .u.data = {.level = (em_level_t)7}}, EM_PROTO_ERANGE},
      {"state level -1",
       {.kind = EM_MSG_STATE, .u.state = {.level = EM_LEVEL_NONE}},
       EM_PROTO_ERANGE},
      {"device id with a slash",
       {.kind = EM_MSG_BIRTH, .u.birth = {.device = "a/b", .agent_version = "1", .board = "b"}},
       EM_PROTO_ESTRING},
      {"birth without a board",
       {.kind = EM_MSG_BIRTH, .u.birth = {.device = "a", .agent_version = "1"}},
       EM_PROTO_ESTRING},
      {"cmd 0", {.kind = EM_MSG_CMD, .u.cmd = {.command = (em_cmd_code_t)0}}, EM_PROTO_ERANGE},
      {"kind 9", {.kind = (em_msg_kind_t)9}, EM_PROTO_EINVAL},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    size_t len = 0;
    int rc = em_proto_encode(&rows[i].msg, out, sizeof(out), &len);
    if (rc != rows[i].rc) {
      fail_msg("%s: want %d, got %d (%s)", rows[i].what, rows[i].rc, rc, em_proto_strerror(rc));
    }
  }
}

static void every_error_code_has_its_own_text(void **state) {
  (void)state;
  static const int codes[] = {
#define X(name, value, text) name,
      EM_PROTO_ERRORS(X)
#undef X
  };
  for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
    for (size_t j = 0; j < i; j++) {
      assert_int_not_equal(codes[i], codes[j]);
      assert_string_not_equal(em_proto_strerror(codes[i]), em_proto_strerror(codes[j]));
    }
  }
  assert_string_equal(em_proto_strerror(0), "success");
  assert_string_equal(em_level_name(EM_LEVEL_DEGRADED), "DEGRADED");
  assert_string_equal(em_level_name((em_level_t)9), "NONE");
}

/* A state replayed from the spool says so (key 12), in CBOR and in JSON; a live one carries
 * no key 12 at all, so v1 readers see exactly what they saw before. */
static void state_historical_round_trips_and_is_absent_when_live(void **state) {
  (void)state;
  em_msg_t m = {.kind = EM_MSG_STATE};
  m.u.state = (em_state_t){.head = {.time_ns = 1700000000000000000ull, .session = 3},
                           .level = EM_LEVEL_DEGRADED,
                           .prev_level = EM_LEVEL_NOMINAL,
                           .mono_ns = 42,
                           .historical = true};
  uint8_t buf[256];
  size_t len = 0;
  assert_int_equal(em_proto_encode(&m, buf, sizeof(buf), &len), 0);
  assert_int_equal(buf[len - 2], 0x0c); /* Key 12, then true. */
  assert_int_equal(buf[len - 1], 0xf5);
  static uint8_t work[4096];
  em_msg_t got;
  assert_int_equal(em_proto_decode(buf, len, &got, work, sizeof(work), NULL), 0);
  assert_true(got.u.state.historical);
  char text[512];
  size_t jlen = 0;
  assert_int_equal(em_proto_to_json(&got, text, sizeof(text), &jlen), 0);
  assert_non_null(strstr(text, "\"historical\":true"));

  m.u.state.historical = false;
  size_t live_len = 0;
  assert_int_equal(em_proto_encode(&m, buf, sizeof(buf), &live_len), 0);
  assert_int_equal(live_len, len - 2);
  assert_int_equal(em_proto_decode(buf, live_len, &got, work, sizeof(work), NULL), 0);
  assert_false(got.u.state.historical);
  assert_int_equal(em_proto_to_json(&got, text, sizeof(text), &jlen), 0);
  assert_null(strstr(text, "historical"));
}

/* em_proto_mark_historical(): for every golden data and state message, the live bytes turned
 * historical are exactly what the encoder writes with historical set; other kinds, bytes the
 * encoder did not write and a short buffer are refused. */
static void model_identities_are_checked_and_compared(void **state) {
  (void)state;
  em_label_t l[9] = {{"input", "224x224"}, {"variant", "full"}};
  em_model_t m = {.name = "mobilenet_v3_small", .version = "1.4", .labels = l, .n_labels = 2};
  assert_int_equal(em_proto_model_check(&m), 0);
  assert_int_equal(em_proto_model_check(&(em_model_t){0}), 0); /* None named. */
  assert_int_equal(em_proto_model_check(NULL), EM_PROTO_EINVAL);
  static const struct {
    const char *key, *value;
    int rc;
  } one[] = {
      {"_site", "b", 0},
      {"a9", "x", 0},
      {"9a", "x", EM_PROTO_ESTRING},                               /* A leading digit. */
      {"__name__", "x", EM_PROTO_ESTRING},                         /* Prometheus reserves "__". */
      {"a-b", "x", EM_PROTO_ESTRING},                              /* Not a label name character. */
      {"abcdefghijklmnop", "x", EM_PROTO_ESTRING},                 /* 16 bytes. */
      {"k", "", EM_PROTO_ESTRING},                                 /* Empty value. */
      {"k", "caf\xc3\xa9", EM_PROTO_ESTRING},                      /* Not ASCII. */
      {"k", "0123456789012345678901234567890x", EM_PROTO_ESTRING}, /* 32 bytes. */
  };
  for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++) {
    em_label_t single = {one[i].key, one[i].value};
    em_model_t x = {.name = "m", .version = "v", .labels = &single, .n_labels = 1};
    if (em_proto_model_check(&x) != one[i].rc) {
      fail_msg("label %s=%s: %d, want %d", one[i].key, one[i].value, em_proto_model_check(&x),
               one[i].rc);
    }
  }
  em_model_t bad = m;
  bad.version = "0123456789012345678901234567890x";
  assert_int_equal(em_proto_model_check(&bad), EM_PROTO_ESTRING);
  bad.version = NULL;
  assert_int_equal(em_proto_model_check(&bad), EM_PROTO_ESTRING);
  bad = m;
  bad.labels = NULL;
  assert_int_equal(em_proto_model_check(&bad), EM_PROTO_EINVAL);
  em_label_t swapped[2] = {l[1], l[0]};
  bad.labels = swapped;
  assert_int_equal(em_proto_model_check(&bad), EM_PROTO_EINVAL);
  em_label_t twice[2] = {l[0], l[0]};
  bad.labels = twice;
  assert_int_equal(em_proto_model_check(&bad), EM_PROTO_EDUPLICATE);
  char keys[9][4];
  for (int i = 0; i < 9; i++) {
    snprintf(keys[i], sizeof(keys[i]), "k%d", i);
    l[i] = (em_label_t){keys[i], "x"};
  }
  bad = (em_model_t){.name = "m", .version = "v", .labels = l, .n_labels = 9};
  assert_int_equal(em_proto_model_check(&bad), EM_PROTO_ELIMIT);
  bad.n_labels = 8;
  assert_int_equal(em_proto_model_check(&bad), 0);

  /* The encoder refuses what the check refuses, in every kind that carries a model. */
  em_msg_t msg = {.kind = EM_MSG_STATE,
                  .u.state = {.level = EM_LEVEL_WARN, .prev_level = EM_LEVEL_WARN, .model = m}};
  msg.u.state.model.labels = swapped;
  size_t len = 0;
  assert_int_equal(em_proto_encode(&msg, out, sizeof(out), &len), EM_PROTO_EINVAL);
  msg = (em_msg_t){.kind = EM_MSG_DATA, .u.data = {.level = EM_LEVEL_NONE, .model = bad}};
  msg.u.data.model.n_labels = 9;
  assert_int_equal(em_proto_encode(&msg, out, sizeof(out), &len), EM_PROTO_ELIMIT);

  /* Equality: name, version and every label. */
  em_label_t a[2] = {{"input", "224x224"}, {"variant", "full"}};
  em_label_t b[2] = {{"input", "224x224"}, {"variant", "light"}};
  em_model_t ma = {.name = "m", .version = "1", .labels = a, .n_labels = 2};
  em_model_t mb = ma;
  assert_true(em_proto_model_equal(&ma, &mb));
  mb.labels = b;
  assert_false(em_proto_model_equal(&ma, &mb));
  mb = ma;
  mb.n_labels = 1;
  assert_false(em_proto_model_equal(&ma, &mb));
  mb = ma;
  mb.version = "2";
  assert_false(em_proto_model_equal(&ma, &mb));
  assert_false(em_proto_model_equal(&ma, &(em_model_t){0}));
  assert_true(em_proto_model_equal(&(em_model_t){0}, &(em_model_t){0}));
}

static void marking_historical_equals_encoding_it_historical(void **state) {
  (void)state;
  size_t n, marked = 0;
  const em_vector_t *v = em_vectors(&n);
  static uint8_t live[EM_PROTO_MAX_MESSAGE_BYTES], want[EM_PROTO_MAX_MESSAGE_BYTES];
  for (size_t i = 0; i < n; i++) {
    em_msg_t m = v[i].msg;
    bool *historical = m.kind == EM_MSG_DATA    ? &m.u.data.historical
                       : m.kind == EM_MSG_STATE ? &m.u.state.historical
                                                : NULL;
    if (historical) {
      *historical = false;
    }
    size_t live_len = 0, want_len = 0, len = 0;
    assert_int_equal(em_proto_encode(&m, live, sizeof(live), &live_len), 0);
    int rc = em_proto_mark_historical(live, live_len, out, sizeof(out), &len);
    if (!historical) {
      assert_int_equal(rc, EM_PROTO_EKIND);
      continue;
    }
    *historical = true;
    assert_int_equal(em_proto_encode(&m, want, sizeof(want), &want_len), 0);
    if (rc != 0 || len != want_len || memcmp(out, want, len) != 0) {
      fail_msg("%s: marked historical differs from encoded historical (rc %d)", v[i].name, rc);
    }
    /* One byte short: the size needed, nothing claimed written. */
    assert_int_equal(em_proto_mark_historical(live, live_len, out, want_len - 1, &len),
                     EM_PROTO_ENOSPACE);
    assert_int_equal(len, want_len);
    marked++;
  }
  assert_true(marked >= 2);
  const uint8_t not_ours[][5] = {
      {0xa3, 0x00, 0x01, 0x01, 0x02}, /* Too few entries for a data or state message. */
      {0xb7, 0x00, 0x01, 0x01, 0x02}, /* 23 entries: the new one would not fit the head byte. */
      {0xa5, 0x01, 0x01, 0x00, 0x02}, /* Kind before version. */
      {0xa5, 0x00, 0x18, 0x01, 0x02}, /* A two-byte version. */
      {0x85, 0x00, 0x01, 0x01, 0x02}, /* An array. */
  };
  for (size_t i = 0; i < sizeof(not_ours) / sizeof(not_ours[0]); i++) {
    size_t len = 0;
    assert_int_equal(em_proto_mark_historical(not_ours[i], 5, out, sizeof(out), &len),
                     EM_PROTO_EMALFORMED);
  }
  size_t len = 0;
  assert_int_equal(em_proto_mark_historical(not_ours[0], 4, out, sizeof(out), &len),
                   EM_PROTO_EMALFORMED);
  assert_int_equal(em_proto_mark_historical(NULL, 5, out, sizeof(out), &len), EM_PROTO_EINVAL);
}

/* --- the breach's verdict (state key 15) ------------------------------------------------ */

/* A state (level 2 from 0) whose key 15 follows: the verdict's hex goes after it. */
#define V_STATE                                                                                    \
  "a8"                                                                                             \
  "0001"                                                                                           \
  "0102"                                                                                           \
  "0201"                                                                                           \
  "0301"                                                                                           \
  "0402"                                                                                           \
  "0500"                                                                                           \
  "0601"                                                                                           \
  "0f"
/* Verdict keys 0..4 (stage "infer", "p99", 1 ns against 2 ns, 12 windows), then key 5. */
#define V_HEAD                                                                                     \
  "0065696e666572"                                                                                 \
  "0163703939"                                                                                     \
  "0201"                                                                                           \
  "0302"                                                                                           \
  "040c"                                                                                           \
  "05"
#define V_OPEN V_STATE "a6" V_HEAD
/* A cause: cpu_contention with the share that follows and no evidence. */
#define V_CAUSE(share)                                                                             \
  "a30000"                                                                                         \
  "01" share "02a0"
#define HALF      "f93800"
#define QUARTER   "f93400"
#define V_NINE(x) x x x x x x x x x

static const bad_row_t verdict_rows[] = {
    {"one cause", V_OPEN "81" V_CAUSE(HALF), 0, -1},
    {"unknown integer keys skipped",
     V_STATE "a7" V_HEAD "81a4000001" HALF "02a01864f6"
             "186300",
     0, -1},
    {"an unknown cause code",
     V_OPEN "81a3001863"
            "01" HALF "02a0",
     0, -1},
    {"share above 1", V_OPEN "81" V_CAUSE("f93e00"), EM_PROTO_ERANGE, 41},
    {"share below 0", V_OPEN "81" V_CAUSE("20"), EM_PROTO_ERANGE, 41},
    {"share null", V_OPEN "81" V_CAUSE("f6"), EM_PROTO_ETYPE, 41},
    {"causes not in descending share", V_OPEN "82" V_CAUSE(QUARTER) V_CAUSE(HALF),
     EM_PROTO_EINCONSISTENT, 46},
    {"nine causes", V_OPEN "89" V_NINE(V_CAUSE(HALF)), EM_PROTO_ELIMIT, 36},
    {"seventeen figures of evidence",
     V_OPEN "81a30000"
            "01" HALF "02b1" V_NINE("617800") "617900617a00616100616200616300616400"
                                              "616500616600",
     EM_PROTO_ELIMIT, 45},
    {"an evidence name twice",
     V_OPEN "81a30000"
            "01" HALF "02a2617800617801",
     EM_PROTO_EDUPLICATE, 45},
    {"evidence keyed by a number",
     V_OPEN "81a30000"
            "01" HALF "02a10000",
     EM_PROTO_EKEY, 46},
    {"evidence null",
     V_OPEN "81a30000"
            "01" HALF "02a16178f6",
     EM_PROTO_ETYPE, 48},
    {"a text key in the verdict", V_STATE "a7" V_HEAD "81" V_CAUSE(HALF) "617800", EM_PROTO_EKEY,
     -1},
    {"a text key in a cause",
     V_OPEN "81a40000"
            "01" HALF "02a0617800",
     EM_PROTO_EKEY, 46},
    {"no causes",
     V_STATE "a5"
             "0065696e666572"
             "0163703939"
             "0201"
             "0302"
             "040c",
     EM_PROTO_EMISSING, 16},
    {"a cause without its share", V_OPEN "81a2000002a0", EM_PROTO_EMISSING, 37},
    {"a process of two items",
     V_OPEN "81a40000"
            "01" HALF "02a0"
            "0381821910106161",
     EM_PROTO_ETYPE, -1},
    {"a process's share above 1",
     V_OPEN "81a40000"
            "01" HALF "02a0"
            "0381831910106161f93e00",
     EM_PROTO_ERANGE, -1},
    {"an empty comm",
     V_OPEN "81a40000"
            "01" HALF "02a0"
            "03818301"
            "60" HALF,
     EM_PROTO_ESTRING, -1},
    {"nine processes",
     V_OPEN "81a40000"
            "01" HALF "02a0"
            "0389" V_NINE("83016161" HALF),
     EM_PROTO_ELIMIT, -1},
    {"a NaN growth",
     V_OPEN "81a40000"
            "01" HALF "02a0"
            "0481826161f97e00",
     EM_PROTO_ERANGE, -1},
    {"nine functions",
     V_OPEN "81a40000"
            "01" HALF "02a0"
            "0489" V_NINE("82616101"),
     EM_PROTO_ELIMIT, -1},
    {"a stage name with a space",
     V_STATE "a6"
             "0063612062"
             "0163703939"
             "0201"
             "0302"
             "040c"
             "0580",
     EM_PROTO_ESTRING, -1},
    {"nominal windows past uint32",
     V_STATE "a6"
             "0065696e666572"
             "0163703939"
             "0201"
             "0302"
             "041b0000000100000000"
             "0580",
     EM_PROTO_ERANGE, -1},
    {"a verdict that is not a map", V_STATE "80", EM_PROTO_ETYPE, 16},
};

/* Each verdict breaking one of its rules (V1..V4 in the CDDL) is refused with its own code at
 * the item at fault; unknown integer keys are skipped and an unknown cause code kept. */
static void verdicts_breaking_a_rule_are_refused_at_the_item(void **state) {
  (void)state;
  static uint8_t in[4096];
  for (size_t i = 0; i < sizeof(verdict_rows) / sizeof(verdict_rows[0]); i++) {
    const bad_row_t *r = &verdict_rows[i];
    size_t len = unhex(r->hex, in, sizeof(in)), off = SIZE_MAX;
    em_msg_t m;
    int rc = em_proto_decode(in, len, &m, scratch, em_proto_scratch_bytes(len), &off);
    if (rc != r->rc) {
      fail_msg("%s: want %s, got %s at %zu", r->what, em_proto_strerror(r->rc),
               em_proto_strerror(rc), off);
    }
    if (rc != 0 && (off > len || (r->offset >= 0 && off != (size_t)r->offset))) {
      fail_msg("%s: error offset %zu, want %d", r->what, off, r->offset);
    }
    if (rc == 0) {
      const em_proto_verdict_t *v = m.u.state.verdict;
      assert_non_null(v);
      assert_string_equal(v->stage, "infer");
      assert_string_equal(v->statistic, "p99");
      assert_int_equal(v->baseline_ns, 1);
      assert_int_equal(v->breach_ns, 2);
      assert_int_equal(v->nominal_windows, 12);
      assert_int_equal(v->n_causes, 1);
      assert_true(v->causes[0].share == 0.5);
      size_t jlen = 0;
      assert_int_equal(em_proto_to_json(&m, json, sizeof(json), &jlen), 0);
      bool unknown = v->causes[0].code == 99;
      assert_non_null(strstr(json, unknown ? "\"cause\":\"unknown\",\"code\":99,\"share\":0.5"
                                           : "\"cause\":\"cpu_contention\",\"share\":0.5"));
    }
  }
}

/* One way to break the golden verdict, and the code both encoders then return. */
typedef struct {
  const char *what;
  void (*breaks)(em_proto_verdict_t *v);
  int rc;
} verdict_break_t;

static void share_above_1(em_proto_verdict_t *v) {
  v->causes[0].share = 1.5;
}
static void share_nan(em_proto_verdict_t *v) {
  v->causes[3].share = 0.0 / 0.0;
}
static void shares_ascending(em_proto_verdict_t *v) {
  v->causes[0].share = 0.05;
}
static void nine_causes(em_proto_verdict_t *v) {
  v->n_causes = 9;
}
static void seventeen_figures(em_proto_verdict_t *v) {
  v->causes[0].n_evidence = 17;
}
static void a_figure_twice(em_proto_verdict_t *v) {
  v->causes[0].evidence[1].name = v->causes[0].evidence[0].name;
}
static void an_absent_figure(em_proto_verdict_t *v) {
  v->causes[1].evidence[0].value.type = EM_VALUE_ABSENT;
}
static void an_infinite_figure(em_proto_verdict_t *v) {
  v->causes[1].evidence[0].value.as.f = 1.0 / 0.0;
}
static void a_stage_with_a_space(em_proto_verdict_t *v) {
  v->stage = "in fer";
}
static void no_statistic(em_proto_verdict_t *v) {
  v->statistic = NULL;
}
static void a_process_share_below_0(em_proto_verdict_t *v) {
  v->causes[0].processes[1].share = -0.1;
}
static void an_empty_comm(em_proto_verdict_t *v) {
  v->causes[0].processes[0].comm = "";
}
static void nine_processes(em_proto_verdict_t *v) {
  v->causes[0].n_processes = 9;
}
static void an_infinite_growth(em_proto_verdict_t *v) {
  v->causes[2].functions[0].growth = -1.0 / 0.0;
}
static void a_function_without_a_name(em_proto_verdict_t *v) {
  v->causes[2].functions[1].name = NULL;
}
static void nine_functions(em_proto_verdict_t *v) {
  v->causes[2].n_functions = 9;
}

static const verdict_break_t verdict_breaks[] = {
    {"share above 1", share_above_1, EM_PROTO_ERANGE},
    {"share NaN", share_nan, EM_PROTO_ERANGE},
    {"shares ascending", shares_ascending, EM_PROTO_EINCONSISTENT},
    {"nine causes", nine_causes, EM_PROTO_ELIMIT},
    {"seventeen figures", seventeen_figures, EM_PROTO_ELIMIT},
    {"a figure twice", a_figure_twice, EM_PROTO_EDUPLICATE},
    {"an absent figure", an_absent_figure, EM_PROTO_ETYPE},
    {"an infinite figure", an_infinite_figure, EM_PROTO_ERANGE},
    {"a stage with a space", a_stage_with_a_space, EM_PROTO_ESTRING},
    {"no statistic", no_statistic, EM_PROTO_ESTRING},
    {"a process share below 0", a_process_share_below_0, EM_PROTO_ERANGE},
    {"an empty comm", an_empty_comm, EM_PROTO_ESTRING},
    {"nine processes", nine_processes, EM_PROTO_ELIMIT},
    {"an infinite growth", an_infinite_growth, EM_PROTO_ERANGE},
    {"a function without a name", a_function_without_a_name, EM_PROTO_ESTRING},
    {"nine functions", nine_functions, EM_PROTO_ELIMIT},
};

/* The state and flight encoders and em_proto_verdict_check() refuse each broken verdict with
 * the decoder's code, and write nothing of a verdict when there is none. */
static void encoders_refuse_a_verdict_the_decoder_would_refuse(void **state) {
  (void)state;
  size_t n = 0, nf = 0, len = 0;
  const em_vector_t *rows = em_vectors(&n);
  const em_flight_vector_t *flights = em_flight_vectors(&nf);
  const em_msg_t *with = NULL;
  const em_flight_t *flight = NULL;
  for (size_t i = 0; i < n; i++) {
    with = strcmp(rows[i].name, "state_verdict") == 0 ? &rows[i].msg : with;
  }
  for (size_t i = 0; i < nf; i++) {
    flight = flights[i].flight.verdict ? &flights[i].flight : flight;
  }
  assert_non_null(with);
  assert_non_null(flight);
  assert_int_equal(em_proto_verdict_check(&em_vector_verdict), 0);
  assert_int_equal(em_proto_verdict_check(NULL), EM_PROTO_EINVAL);
  for (size_t i = 0; i < sizeof(verdict_breaks) / sizeof(verdict_breaks[0]); i++) {
    const verdict_break_t *b = &verdict_breaks[i];
    em_proto_verdict_t v = em_vector_verdict;
    b->breaks(&v);
    em_msg_t m = *with;
    m.u.state.verdict = &v;
    em_flight_t f = *flight;
    f.verdict = &v;
    int rc[3] = {em_proto_verdict_check(&v), em_proto_encode(&m, out, sizeof(out), &len),
                 em_flight_encode(&f, out, sizeof(out), &len)};
    for (size_t k = 0; k < 3; k++) {
      if (rc[k] != b->rc) {
        fail_msg("%s: want %s, got %s (%zu)", b->what, em_proto_strerror(b->rc),
                 em_proto_strerror(rc[k]), k);
      }
    }
  }
  /* Without its verdict the state is state_degraded's shape: no key 15. */
  em_msg_t m = *with;
  m.u.state.verdict = NULL;
  assert_int_equal(em_proto_encode(&m, out, sizeof(out), &len), 0);
  em_msg_t back;
  assert_int_equal(em_proto_decode(out, len, &back, scratch, sizeof(scratch), NULL), 0);
  assert_null(back.u.state.verdict);
  size_t jlen = 0;
  assert_int_equal(em_proto_to_json(&back, json, sizeof(json), &jlen), 0);
  assert_null(strstr(json, "verdict"));
}

/* The causes' names, and "unknown" past them. */
static void verdict_causes_have_their_names(void **state) {
  (void)state;
  const char *want[] = {
      "cpu_contention", "cpu_throttling", "frequency_cap", "memory_pressure", "io",
      "waiting",        "more_work",      "unexplained",   "unknown"};
  for (uint32_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    assert_string_equal(em_proto_verdict_cause_name(i), want[i]);
  }
  assert_string_equal(em_proto_verdict_cause_name(UINT32_MAX), "unknown");
}

/*
 * The codec never reaches the heap (proto.h): with every allocation failing, every golden
 * vector still encodes to its bytes, decodes, prints as JSON and encodes again, a bad input
 * still gets its error, and not one allocation was attempted.
 */
static void the_codec_works_with_every_allocation_failing(void **state) {
  (void)state;
  size_t n;
  const em_vector_t *v = em_vectors(&n);
  for (size_t i = 0; i < n; i++) {
    size_t want_len, len = 0, jlen = 0;
    uint8_t *want = read_vector(v[i].name, "cbor", &want_len);
    em_failing_alloc_arm(1, true);
    int enc = em_proto_encode(&v[i].msg, out, sizeof(out), &len);
    bool same = enc == 0 && len == want_len && memcmp(out, want, len) == 0;
    em_msg_t m;
    int dec = em_proto_decode(want, want_len, &m, scratch, em_proto_scratch_bytes(want_len), NULL);
    int js = dec ? dec : em_proto_to_json(&m, json, sizeof(json), &jlen);
    size_t again = 0;
    int reenc = dec ? dec : em_proto_encode(&m, out, sizeof(out), &again);
    int bad = em_proto_decode(want, want_len - 1, &m, scratch, sizeof(scratch), NULL);
    unsigned long tried = em_failing_alloc_disarm();
    free(want);
    if (!same || dec || js || reenc || again != want_len) {
      fail_msg("%s: encode %d (same bytes: %d), decode %d, json %d, encode again %d", v[i].name,
               enc, same, dec, js, reenc);
    }
    assert_int_equal(bad, EM_PROTO_ETRUNCATED);
    if (tried != 0) {
      fail_msg("%s: the codec tried %lu allocations", v[i].name, tried);
    }
  }
}

/* The head is one struct every kind begins with; time_ns and session name its fields too. */
static void the_head_and_its_direct_names_are_the_same_fields(void **state) {
  (void)state;
  em_msg_t m = {.kind = EM_MSG_DATA, .u.data = {.head = {.time_ns = 11, .session = 7}, .seq = 3}};
  assert_int_equal(m.u.data.head.time_ns, 11);
  assert_int_equal(m.u.data.head.session, 7);
  m.u.data.head.session = 8;
  assert_int_equal(m.u.data.head.session, 8);
  em_msg_t c = {.kind = EM_MSG_CMD, .u.cmd = {.head = {.time_ns = 5}, .command = EM_CMD_REBIRTH}};
  assert_int_equal(c.u.cmd.head.time_ns, 5);
  /* A cmd's session is not written: the encoding is the same whatever it holds. */
  size_t a = 0, b = 0;
  uint8_t first[64];
  assert_int_equal(em_proto_encode(&c, first, sizeof(first), &a), 0);
  c.u.cmd.head.session = 99;
  assert_int_equal(em_proto_encode(&c, out, sizeof(out), &b), 0);
  assert_int_equal(a, b);
  assert_memory_equal(first, out, a);
}

static int disarm(void **state) {
  (void)state;
  em_failing_alloc_disarm();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(vectors_encode_to_the_golden_bytes),
      cmocka_unit_test(vectors_decode_to_the_golden_json),
      cmocka_unit_test(vectors_truncated_at_every_length_fail_as_truncated),
      cmocka_unit_test(each_bad_input_gets_its_own_error),
      cmocka_unit_test(item_counts_past_the_schema_limits_are_refused),
      cmocka_unit_test(messages_over_64k_are_too_big),
      cmocka_unit_test(long_tag_chains_are_skipped_without_recursion),
      cmocka_unit_test(decoding_with_too_little_scratch_says_so),
      cmocka_unit_test(scratch_bound_holds_for_the_densest_inputs),
      cmocka_unit_test(encoder_reports_the_size_it_needs_for_every_short_buffer),
      cmocka_unit_test(encoder_refuses_what_the_decoder_would_refuse),
      cmocka_unit_test(every_error_code_has_its_own_text),
      cmocka_unit_test(state_historical_round_trips_and_is_absent_when_live),
      cmocka_unit_test(marking_historical_equals_encoding_it_historical),
      cmocka_unit_test(model_identities_are_checked_and_compared),
      cmocka_unit_test_teardown(the_codec_works_with_every_allocation_failing, disarm),
      cmocka_unit_test(the_head_and_its_direct_names_are_the_same_fields),
      cmocka_unit_test(verdicts_breaking_a_rule_are_refused_at_the_item),
      cmocka_unit_test(encoders_refuse_a_verdict_the_decoder_would_refuse),
      cmocka_unit_test(verdict_causes_have_their_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
