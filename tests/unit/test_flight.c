/*
 * test_flight.c - the flight recording's codec (edgemon/flight.h): a recording assembled by
 * hand byte for byte (every delta path), round trips of fixed and random recordings, a table
 * of bad inputs each with its error code and offset, the encoder refusing what the decoder
 * would refuse, the scratch bound on the densest inputs, the fit under a cap against a
 * brute-force reference, the historical form, and the JSON.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "edgemon/common/rng.h"
#include "edgemon/flight.h"
#include "vectors.h"

static uint8_t buf[EM_FLIGHT_MAX_BYTES + 64];
static uint8_t buf2[EM_FLIGHT_MAX_BYTES + 64];
static uint8_t scratch[EM_FLIGHT_SCRATCH_MAX];
static char json[8u * 1024 * 1024];
static char json2[8u * 1024 * 1024];

static size_t unhex(const char *hex, uint8_t *out, size_t cap) {
  size_t n = 0;
  for (const char *p = hex; p[0] && p[1] && n < cap; p += 2) {
    unsigned v;
    sscanf(p, "%2x", &v);
    out[n++] = (uint8_t)v;
  }
  return n;
}

static void assert_flight_equal(const em_flight_t *a, const em_flight_t *b);

/* `.name = arr, .n_name = its length`: a recording's table and its count from one array. */
#define TABLE(name, arr) .name = (arr), .n_##name = sizeof(arr) / sizeof((arr)[0])

/* --- the small recording, by hand --------------------------------------------------------- */

/*
 * Trigger at mono 100. Ticks at 90 (counter total 7) and 95 (total 5: an increase of -2).
 * Spans: frame 3 at 97 (start -3 from the trigger), frame 2 at 99 (frame delta -1, start +2).
 */
static const char *const small_stages[] = {"a"};
static const em_flight_column_t small_columns[] = {{"c", "1", EM_METRIC_COUNTER}};
static const em_flight_value_t small_v0[] = {{0, U(7)}};
static const em_flight_value_t small_v1[] = {{0, U(5)}};
static const em_flight_tick_t small_ticks[] = {{90, small_v0, 1}, {95, small_v1, 1}};
static const em_flight_span_t small_spans[] = {{0, 3, 97, 4}, {0, 2, 99, 1}};

static em_flight_t small(void) {
  em_flight_t f = {
      .head = {.time_ns = 1, .session = 2},
      .number = 0,
      .trigger = {.cause = EM_FLIGHT_ESCALATION,
                  .level = EM_LEVEL_WARN,
                  .prev_level = EM_LEVEL_NOMINAL},
      .trigger_mono_ns = 100,
      .pre_ns = 10,
      .post_ns = 20,
      .period_ns = 5,
      TABLE(stages, small_stages),
      TABLE(columns, small_columns),
      TABLE(ticks, small_ticks),
      TABLE(spans, small_spans),
  };
  return f;
}

#define S_HEAD                                                                                     \
  "ae"                                                                                             \
  "0001"                                                                                           \
  "0105"                                                                                           \
  "0201"                                                                                           \
  "0302"                                                                                           \
  "0400"
#define S_TRIG                                                                                     \
  "05a3"                                                                                           \
  "0000"                                                                                           \
  "0101"                                                                                           \
  "0200"
#define S_TIMES                                                                                    \
  "061864"                                                                                         \
  "070a"                                                                                           \
  "0814"                                                                                           \
  "0905"
#define S_STAGES "0a816161"
#define S_COLS                                                                                     \
  "0b81"                                                                                           \
  "83616361"                                                                                       \
  "3101"
#define S_TICKS                                                                                    \
  "0c82"                                                                                           \
  "8229a10007"                                                                                     \
  "8205a10021"
#define S_SPANS                                                                                    \
  "0d88"                                                                                           \
  "00032204"                                                                                       \
  "00200201"
#define SMALL S_HEAD S_TRIG S_TIMES S_STAGES S_COLS S_TICKS S_SPANS

static void encodes_to_the_hand_assembled_bytes(void **state) {
  (void)state;
  uint8_t want[128];
  size_t want_len = unhex(SMALL, want, sizeof(want));
  em_flight_t f = small();
  size_t len = 0;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), 0);
  assert_int_equal(len, want_len);
  assert_memory_equal(buf, want, len);
  assert_int_equal(len, 62);
}

static void decodes_the_hand_assembled_bytes_to_absolute_figures(void **state) {
  (void)state;
  uint8_t in[128];
  size_t len = unhex(SMALL, in, sizeof(in));
  em_flight_t f;
  assert_int_equal(em_flight_decode(in, len, &f, scratch, sizeof(scratch), NULL), 0);
  assert_int_equal(f.head.time_ns, 1);
  assert_int_equal(f.head.session, 2);
  assert_int_equal(f.trigger.cause, EM_FLIGHT_ESCALATION);
  assert_int_equal(f.trigger.level, EM_LEVEL_WARN);
  assert_int_equal(f.trigger.prev_level, EM_LEVEL_NOMINAL);
  assert_null(f.trigger.rule);
  assert_int_equal(f.trigger.value.type, EM_VALUE_ABSENT);
  assert_int_equal(f.n_ticks, 2);
  assert_int_equal(f.ticks[0].mono_ns, 90);
  assert_int_equal(f.ticks[1].mono_ns, 95);
  assert_int_equal(f.ticks[0].values[0].value.as.u, 7);
  assert_int_equal(f.ticks[1].values[0].value.type, EM_VALUE_UINT);
  assert_int_equal(f.ticks[1].values[0].value.as.u, 5);
  assert_int_equal(f.n_spans, 2);
  assert_int_equal(f.spans[0].frame_id, 3);
  assert_int_equal(f.spans[0].start_ns, 97);
  assert_int_equal(f.spans[1].frame_id, 2);
  assert_int_equal(f.spans[1].start_ns, 99);
  assert_int_equal(f.spans[1].duration_ns, 1);
  assert_string_equal(f.stages[0], "a");
  assert_string_equal(f.columns[0].name, "c");
  assert_int_equal(f.columns[0].kind, EM_METRIC_COUNTER);
  assert_false(f.historical);
}

/* Keys in another order than the encoder's (ticks and spans before the tables they index),
 * unknown keys at every level: the same recording. */
static void key_order_and_unknown_keys_do_not_matter(void **state) {
  (void)state;
  uint8_t in[256];
  size_t len = unhex("b0"
                     "0001"
                     "0105"
                     "0201"
                     "0302"
                     "0400"
                     "05a4"
                     "0000"
                     "0101"
                     "0200"
                     "1863"
                     "82f6f5" /* unknown trigger key 99 */
                     S_TIMES S_SPANS S_TICKS S_COLS S_STAGES "0ea1"
                     "07"
                     "00" /* truncation: unknown key 7 */
                     "1864"
                     "a1"
                     "01"
                     "9f"
                     "ff", /* unknown key 100, wrong below */
                     in, sizeof(in));
  /* The last unknown value is an indefinite array: refused even though the key is unknown. */
  em_flight_t f;
  assert_int_equal(em_flight_decode(in, len, &f, scratch, sizeof(scratch), NULL),
                   EM_PROTO_EINDEFINITE);
  in[len - 2] = 0x80; /* [] */
  len--;
  assert_int_equal(em_flight_decode(in, len, &f, scratch, sizeof(scratch), NULL), 0);
  assert_int_equal(f.n_ticks, 2);
  assert_int_equal(f.ticks[1].values[0].value.as.u, 5);
  assert_int_equal(f.spans[1].frame_id, 2);
  assert_int_equal(f.truncated.spans_cut, 0);
  em_flight_t want = small();
  size_t a = 0, b = 0;
  assert_int_equal(em_flight_to_json(&f, json, sizeof(json), &a), 0);
  assert_int_equal(em_flight_to_json(&want, json2, sizeof(json2), &b), 0);
  assert_string_equal(json, json2);
}

/* --- golden vectors ------------------------------------------------------------------------ */

/* Every flight row encodes to its committed bytes, which decode to its committed JSON (less
 * the newline), and every prefix of them is truncated. */
static void vectors_match_the_golden_files(void **state) {
  (void)state;
  size_t n = 0;
  const em_flight_vector_t *v = em_flight_vectors(&n);
  assert_int_equal(n, 4);
  for (size_t i = 0; i < n; i++) {
    size_t want_len = 0, json_len = 0, len = 0, off = 0;
    uint8_t *want = em_vector_file(EM_VECTORS_DIR, v[i].name, "cbor", &want_len);
    char *want_json = (char *)em_vector_file(EM_VECTORS_DIR, v[i].name, "json", &json_len);
    assert_non_null(want);
    assert_non_null(want_json);
    assert_int_equal(em_flight_encode(&v[i].flight, buf, sizeof(buf), &len), 0);
    if (len != want_len || memcmp(buf, want, len) != 0) {
      fail_msg("%s: the encoder's bytes differ from the golden file", v[i].name);
    }
    em_flight_t f;
    int rc = em_flight_decode(want, want_len, &f, scratch, em_flight_scratch_bytes(want_len), &off);
    if (rc) {
      fail_msg("%s: %s at %zu", v[i].name, em_proto_strerror(rc), off);
    }
    assert_flight_equal(&v[i].flight, &f);
    assert_int_equal(em_flight_to_json(&f, json, sizeof(json), &len), 0);
    assert_true(json_len > 0 && want_json[json_len - 1] == '\n');
    want_json[json_len - 1] = '\0';
    assert_string_equal(json, want_json);
    for (size_t cut = 0; cut < want_len; cut++) {
      assert_int_equal(em_flight_decode(want, cut, &f, scratch, sizeof(scratch), &off),
                       EM_PROTO_ETRUNCATED);
    }
    free(want);
    free(want_json);
  }
}

/* --- bad inputs --------------------------------------------------------------------------- */

typedef struct {
  const char *what;
  const char *hex;
  int rc;
  int offset; /* -1: not checked (beyond being inside the input). */
} bad_row_t;

static const bad_row_t bad_rows[] = {
    {"another kind",
     "ae"
     "0001"
     "0104"
     "0201"
     "0302"
     "0400" S_TRIG S_TIMES S_STAGES S_COLS S_TICKS S_SPANS,
     EM_PROTO_EKIND, 4},
    {"version 2",
     "ae"
     "0002"
     "0105"
     "0201"
     "0302"
     "0400" S_TRIG S_TIMES S_STAGES S_COLS S_TICKS S_SPANS,
     EM_PROTO_EVERSION, 2},
    {"kind not second",
     "a2"
     "0001"
     "0201",
     EM_PROTO_EMISSING, 3},
    {"truncated", SMALL "", EM_PROTO_ETRUNCATED, -1}, /* the row's last byte is dropped below */
    {"trailing byte", SMALL "00", EM_PROTO_ETRAILING, 62},
    {"malformed item",
     S_HEAD "05a3"
            "00fc"
            "0101"
            "0200" S_TIMES S_STAGES S_COLS S_TICKS S_SPANS,
     EM_PROTO_EMALFORMED, 14},
    {"indefinite stages", S_HEAD S_TRIG S_TIMES "0a9f6161ff" S_COLS S_TICKS S_SPANS,
     EM_PROTO_EINDEFINITE, 29},
    {"duplicate key",
     S_HEAD S_TRIG "061864"
                   "070a"
                   "0814"
                   "0805" S_STAGES S_COLS S_TICKS S_SPANS,
     EM_PROTO_EDUPLICATE, 26},
    {"missing spans",
     "ad"
     "0001"
     "0105"
     "0201"
     "0302"
     "0400" S_TRIG S_TIMES S_STAGES S_COLS S_TICKS,
     EM_PROTO_EMISSING, 0},
    {"text key",
     "ae"
     "0001"
     "0105"
     "0201"
     "0302"
     "6178"
     "00" S_TRIG S_TIMES S_STAGES S_COLS S_TICKS S_SPANS,
     EM_PROTO_EKEY, 9},
    {"stage name with a space", S_HEAD S_TRIG S_TIMES "0a8163612062" S_COLS S_TICKS S_SPANS,
     EM_PROTO_ESTRING, 30},
    {"stage named twice", S_HEAD S_TRIG S_TIMES "0a8261616161" S_COLS S_TICKS S_SPANS,
     EM_PROTO_EDUPLICATE, 29},
    {"span stage past the table",
     S_HEAD S_TRIG S_TIMES S_STAGES S_COLS S_TICKS "0d88"
                                                   "01032204"
                                                   "00200201",
     EM_PROTO_ERANGE, 54},
    {"tick column past the table",
     S_HEAD S_TRIG S_TIMES S_STAGES S_COLS "0c82"
                                           "8229a10107"
                                           "8205a10021" S_SPANS,
     EM_PROTO_ERANGE, 45},
    {"tick before the previous one",
     S_HEAD S_TRIG S_TIMES S_STAGES S_COLS "0c82"
                                           "8229a10007"
                                           "8224a10021" S_SPANS,
     EM_PROTO_EINCONSISTENT, 48},
    {"span before the previous one",
     S_HEAD S_TRIG S_TIMES S_STAGES S_COLS S_TICKS "0d88"
                                                   "00032204"
                                                   "00202101",
     EM_PROTO_EINCONSISTENT, 60},
    {"counter total below 0",
     S_HEAD S_TRIG S_TIMES S_STAGES S_COLS "0c82"
                                           "8229a10020"
                                           "8205a10021" S_SPANS,
     EM_PROTO_ERANGE, 46},
    {"counter total past uint64",
     S_HEAD S_TRIG S_TIMES S_STAGES S_COLS "0c82"
                                           "8229a1001bffffffffffffffff"
                                           "8205a10001" S_SPANS,
     EM_PROTO_ERANGE, 59},
    {"counter as a float",
     S_HEAD S_TRIG S_TIMES S_STAGES S_COLS "0c82"
                                           "8229a100f93c00"
                                           "8205a10021" S_SPANS,
     EM_PROTO_ETYPE, 46},
    {"spans not in fours",
     S_HEAD S_TRIG S_TIMES S_STAGES S_COLS S_TICKS "0d87"
                                                   "00032204"
                                                   "002002",
     EM_PROTO_EINCONSISTENT, 53},
    {"tick of three items",
     S_HEAD S_TRIG S_TIMES S_STAGES S_COLS "0c82"
                                           "8329a1000700"
                                           "8205a10021" S_SPANS,
     EM_PROTO_ETYPE, 42},
    {"tick time as text",
     S_HEAD S_TRIG S_TIMES S_STAGES S_COLS "0c82"
                                           "826178a10007"
                                           "8205a10021" S_SPANS,
     EM_PROTO_ETYPE, 43},
    {"trigger value NaN",
     S_HEAD "05a3"
            "0000"
            "0101"
            "05f97e00" S_TIMES S_STAGES S_COLS S_TICKS S_SPANS,
     EM_PROTO_ERANGE, 18},
    {"trigger level 4",
     S_HEAD "05a3"
            "0000"
            "0104"
            "0200" S_TIMES S_STAGES S_COLS S_TICKS S_SPANS,
     EM_PROTO_ERANGE, 16},
    {"trigger cause 2",
     S_HEAD "05a3"
            "0002"
            "0101"
            "0200" S_TIMES S_STAGES S_COLS S_TICKS S_SPANS,
     EM_PROTO_ERANGE, 14},
    {"trigger without a cause",
     S_HEAD "05a2"
            "0101"
            "0200" S_TIMES S_STAGES S_COLS S_TICKS S_SPANS,
     EM_PROTO_EMISSING, 12},
    {"column kind 3",
     S_HEAD S_TRIG S_TIMES S_STAGES "0b81"
                                    "83616361"
                                    "3103" S_TICKS S_SPANS,
     EM_PROTO_ERANGE, 39},
    {"column of two items",
     S_HEAD S_TRIG S_TIMES S_STAGES "0b81"
                                    "82616361"
                                    "31" S_TICKS S_SPANS,
     EM_PROTO_ETYPE, 34},
    {"number past uint32",
     S_HEAD ""
            "05a3"
            "0000"
            "0101"
            "0200" S_TIMES S_STAGES S_COLS S_TICKS S_SPANS,
     0, -1}, /* replaced below: key 4 = 2^32 */
    {"figure keyed by text",
     S_HEAD S_TRIG S_TIMES S_STAGES S_COLS "0c82"
                                           "8229a16178"
                                           "07"
                                           "8205a10021" S_SPANS,
     EM_PROTO_EKEY, 45},
    {"column twice in a tick",
     S_HEAD S_TRIG S_TIMES S_STAGES "0b82"
                                    "83616361"
                                    "3101"
                                    "83616461"
                                    "3100"
                                    "0c82"
                                    "8229a2"
                                    "0007"
                                    "0008"
                                    "8205a10021" S_SPANS,
     EM_PROTO_EDUPLICATE, 50},
    {"first frame below 0",
     S_HEAD S_TRIG S_TIMES S_STAGES S_COLS S_TICKS "0d88"
                                                   "00202204"
                                                   "00200201",
     EM_PROTO_ERANGE, 55},
    {"first tick before time 0",
     S_HEAD S_TRIG S_TIMES S_STAGES S_COLS "0c82"
                                           "823864a10007"
                                           "8205a10021" S_SPANS,
     EM_PROTO_ERANGE, 43},
    {"nested too deep", S_HEAD S_TRIG S_TIMES S_STAGES S_COLS S_TICKS S_SPANS, EM_PROTO_EDEPTH,
     -1}, /* replaced below */
    {"historical not a bool",
     "af"
     "0001"
     "0105"
     "0201"
     "0302"
     "0400" S_TRIG S_TIMES S_STAGES S_COLS S_TICKS S_SPANS "0f01",
     EM_PROTO_ETYPE, 63},
    {"forged array count", S_HEAD S_TRIG S_TIMES S_STAGES S_COLS "0c9a7fffffff",
     EM_PROTO_ETRUNCATED, 41},
    {"truncation count not a uint",
     "af"
     "0001"
     "0105"
     "0201"
     "0302"
     "0400" S_TRIG S_TIMES S_STAGES S_COLS S_TICKS S_SPANS "0ea10020",
     EM_PROTO_ETYPE, 65},
};

static void each_bad_input_gets_its_own_error(void **state) {
  (void)state;
  static uint8_t in[4096];
  for (const bad_row_t *r = bad_rows; r < bad_rows + sizeof(bad_rows) / sizeof(bad_rows[0]); r++) {
    size_t len = unhex(r->hex, in, sizeof(in));
    int want = r->rc;
    if (strcmp(r->what, "truncated") == 0) {
      len--;
    } else if (strcmp(r->what, "number past uint32") == 0) {
      /* key 4's value 0 becomes 1a 00 00 00 00 ... no: 1b 00 00 00 01 00 00 00 00 (2^32). */
      static const uint8_t big[] = {0x1b, 0, 0, 0, 1, 0, 0, 0, 0};
      memmove(in + 10 + sizeof(big), in + 11, len - 11);
      memcpy(in + 10, big, sizeof(big));
      len += sizeof(big) - 1;
      want = EM_PROTO_ERANGE;
    } else if (strcmp(r->what, "nested too deep") == 0) {
      /* An unknown key 20 holding [[[[[[[[0]]]]]]]]: level 9 with the top map at 1. */
      in[0]++;
      static const uint8_t deep[] = {0x14, 0x81, 0x81, 0x81, 0x81, 0x81, 0x81, 0x81, 0x81, 0x00};
      memcpy(in + len, deep, sizeof(deep));
      len += sizeof(deep);
    }
    em_flight_t f;
    size_t off = SIZE_MAX;
    int rc = em_flight_decode(in, len, &f, scratch, sizeof(scratch), &off);
    if (rc != want) {
      fail_msg("%s: want %d (%s), got %d (%s) at %zu", r->what, want, em_proto_strerror(want), rc,
               em_proto_strerror(rc), off);
    }
    if (off > len || (r->offset >= 0 && off != (size_t)r->offset)) {
      fail_msg("%s: error offset %zu, want %d", r->what, off, r->offset);
    }
  }
  assert_true(sizeof(bad_rows) / sizeof(bad_rows[0]) >= 20);
}

/* Appends hex to in[*len..]: the pieces of a recording assembled item by item. */
static void put(uint8_t *in, size_t *len, const char *hex) {
  *len += unhex(hex, in + *len, 512);
}

/*
 * A recording (SMALL with its tables and ticks replaced) with `stages` one-letter stage names,
 * `columns` gauge columns, `ticks` empty ticks and one tick of `figures` figures.
 */
static size_t with_counts(uint8_t *in, unsigned stages, unsigned columns, unsigned ticks,
                          unsigned figures) {
  static const char letters[] =
      "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_-.:";
  char hex[16];
  size_t len = 0;
  put(in, &len, S_HEAD S_TRIG S_TIMES "0a99");
  snprintf(hex, sizeof(hex), "%04x", stages);
  put(in, &len, hex);
  for (unsigned i = 0; i < stages; i++) {
    snprintf(hex, sizeof(hex), "61%02x", (unsigned)letters[i % (sizeof(letters) - 1)]);
    put(in, &len, hex);
  }
  snprintf(hex, sizeof(hex), "0b99%04x", columns);
  put(in, &len, hex);
  for (unsigned i = 0; i < columns; i++) {
    put(in, &len,
        "83616361"
        "3100");
  }
  snprintf(hex, sizeof(hex), "0c99%04x", ticks + 1);
  put(in, &len, hex);
  for (unsigned i = 0; i < ticks; i++) {
    put(in, &len, "8200a0");
  }
  snprintf(hex, sizeof(hex), "8200b9%04x", figures);
  put(in, &len, hex);
  for (unsigned i = 0; i < figures; i++) {
    snprintf(hex, sizeof(hex), "19%04x00", i);
    put(in, &len, hex);
  }
  put(in, &len, "0d80");
  return len;
}

/* Each table one past its limit (stages, columns, ticks, a tick's figures): ELIMIT; all at
 * their limits: it decodes. */
static void tables_past_their_limits_are_refused(void **state) {
  (void)state;
  static uint8_t in[64 * 1024];
  static const struct {
    unsigned stages, columns, ticks, figures;
    int rc;
  } rows[] = {
      {64, 256, 4095, 256, 0},           {65, 1, 0, 0, EM_PROTO_ELIMIT},
      {1, 257, 0, 0, EM_PROTO_ELIMIT},   {1, 1, 4096, 0, EM_PROTO_ELIMIT},
      {1, 257, 0, 257, EM_PROTO_ELIMIT}, {1, 256, 0, 257, EM_PROTO_ELIMIT},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    size_t len = with_counts(in, rows[i].stages, rows[i].columns, rows[i].ticks, rows[i].figures);
    em_flight_t f;
    size_t off = SIZE_MAX;
    int rc = em_flight_decode(in, len, &f, scratch, em_flight_scratch_bytes(len), &off);
    if (rc != rows[i].rc) {
      fail_msg("row %zu: want %d, got %d (%s) at %zu", i, rows[i].rc, rc, em_proto_strerror(rc),
               off);
    }
    if (rc == 0) {
      assert_int_equal(f.n_stages, 64);
      assert_int_equal(f.n_columns, 256);
      assert_int_equal(f.n_ticks, EM_FLIGHT_MAX_TICKS);
      assert_int_equal(f.ticks[4095].n_values, 256);
      assert_int_equal(f.ticks[4095].values[255].column, 255);
    }
  }
}

static void every_prefix_is_truncated(void **state) {
  (void)state;
  uint8_t in[128];
  size_t len = unhex(SMALL, in, sizeof(in));
  for (size_t n = 0; n < len; n++) {
    em_flight_t f;
    size_t off = SIZE_MAX;
    assert_int_equal(em_flight_decode(in, n, &f, scratch, sizeof(scratch), &off),
                     EM_PROTO_ETRUNCATED);
    assert_true(off <= n);
  }
}

static void too_big_too_little_scratch_and_null_arguments(void **state) {
  (void)state;
  em_flight_t f;
  assert_int_equal(
      em_flight_decode(buf, EM_FLIGHT_MAX_BYTES + 1, &f, scratch, sizeof(scratch), NULL),
      EM_PROTO_ETOOBIG);
  uint8_t in[128];
  size_t len = unhex(SMALL, in, sizeof(in));
  assert_int_equal(em_flight_decode(in, len, &f, scratch, 16, NULL), EM_PROTO_ESCRATCH);
  assert_int_equal(em_flight_decode(in, len, NULL, scratch, sizeof(scratch), NULL),
                   EM_PROTO_EINVAL);
  assert_int_equal(em_flight_decode(NULL, len, &f, scratch, sizeof(scratch), NULL),
                   EM_PROTO_EINVAL);
  size_t out = 0;
  em_flight_t s = small();
  assert_int_equal(em_flight_encode(NULL, buf, sizeof(buf), &out), EM_PROTO_EINVAL);
  assert_int_equal(em_flight_encode(&s, NULL, 10, &out), EM_PROTO_EINVAL);
  assert_int_equal(em_flight_to_json(&s, NULL, 10, &out), EM_PROTO_EINVAL);
  /* A short buffer: ENOSPACE and the size needed, for every length. */
  for (size_t cap = 0; cap < 62; cap++) {
    out = 0;
    assert_int_equal(em_flight_encode(&s, buf, cap, &out), EM_PROTO_ENOSPACE);
    assert_int_equal(out, 62);
  }
}

/* --- the encoder refuses what the decoder would --------------------------------------------- */

static void encoder_refuses_what_the_decoder_would_refuse(void **state) {
  (void)state;
  size_t len;
  em_flight_t f;
  static const char *const two_same[] = {"a", "a"};
  static const char *const bad_name[] = {"a b"};
  static const em_flight_value_t float_counter[] = {{0, F(1.5)}};
  static const em_flight_value_t neg_counter[] = {{0, I(-1)}};
  static const em_flight_value_t past_column[] = {{1, U(1)}};
  static const em_flight_value_t twice[] = {{0, U(1)}, {0, U(2)}};
  static const em_flight_value_t nan_gauge[] = {{0, F(NAN)}};
  static const em_flight_column_t gauge[] = {{"g", "1", EM_METRIC_GAUGE}};
  static const em_flight_column_t bad_kind[] = {{"g", "1", (em_metric_kind_t)3}};
  static const em_flight_column_t long_unit[] = {{"g", "0123456789abcdef", EM_METRIC_GAUGE}};
  em_flight_tick_t ticks[2] = {{90, float_counter, 1}};
  em_flight_span_t spans[2] = {{0, 1, 99, 1}, {0, 2, 98, 1}};

  f = small(), f.stages = two_same, f.n_stages = 2;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), EM_PROTO_EDUPLICATE);
  f = small(), f.stages = bad_name;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), EM_PROTO_ESTRING);
  f = small(), f.ticks = ticks, f.n_ticks = 1;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), EM_PROTO_ETYPE);
  ticks[0].values = neg_counter;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), EM_PROTO_ERANGE);
  ticks[0].values = past_column;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), EM_PROTO_ERANGE);
  ticks[0].values = twice, ticks[0].n_values = 2;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), EM_PROTO_EDUPLICATE);
  ticks[0].values = nan_gauge, ticks[0].n_values = 1;
  f.columns = gauge;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), EM_PROTO_ERANGE);
  f = small(), f.columns = bad_kind;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), EM_PROTO_ERANGE);
  f = small(), f.columns = long_unit;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), EM_PROTO_ESTRING);
  f = small(), ticks[0] = small_ticks[1], ticks[1] = small_ticks[0];
  f.ticks = ticks, f.n_ticks = 2;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), EM_PROTO_EINCONSISTENT);
  f = small(), f.spans = spans;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), EM_PROTO_EINCONSISTENT);
  spans[1].start_ns = 100, spans[1].stage = 1;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), EM_PROTO_ERANGE);
  f = small(), f.trigger.level = EM_LEVEL_NONE;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), EM_PROTO_ERANGE);
  f = small(), f.trigger.cause = (em_flight_cause_t)2;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), EM_PROTO_ERANGE);
  f = small(), f.trigger.reason = "line\nbreak";
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), EM_PROTO_ESTRING);
  f = small(), f.trigger.bound.type = EM_VALUE_FLOAT, f.trigger.bound.as.f = INFINITY;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), EM_PROTO_ERANGE);
  f = small(), f.n_stages = EM_FLIGHT_MAX_STAGES + 1;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), EM_PROTO_ELIMIT);
  f = small(), f.n_spans = EM_FLIGHT_MAX_SPANS + 1;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), EM_PROTO_ELIMIT);
  f = small(), f.ticks = NULL;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), EM_PROTO_EINVAL);
  /* What the JSON printer would index out of its tables is refused there too. */
  f = small(), f.spans = spans;
  assert_int_equal(em_flight_to_json(&f, json, sizeof(json), &len), EM_PROTO_ERANGE);
}

/* --- round trips -------------------------------------------------------------------------- */

/* Equal numbers: an INT >= 0 goes out as an unsigned integer and comes back UINT. */
static em_value_t normal(const em_value_t *v) {
  em_value_t n = *v;
  if (n.type == EM_VALUE_INT && n.as.i >= 0) {
    n.type = EM_VALUE_UINT;
    n.as.u = (uint64_t)v->as.i;
  }
  return n;
}

static void assert_value_equal(const em_value_t *x, const em_value_t *y) {
  em_value_t a = normal(x), b = normal(y);
  assert_int_equal(a.type, b.type);
  if (a.type == EM_VALUE_FLOAT) {
    assert_true(a.as.f == b.as.f);
  } else if (a.type != EM_VALUE_ABSENT) {
    assert_int_equal(a.as.u, b.as.u);
  }
}

static void assert_str_or_null(const char *a, const char *b) {
  if (!a || !b) {
    assert_true(a == b);
  } else {
    assert_string_equal(a, b);
  }
}

/* Field by field. */
static void assert_flight_equal(const em_flight_t *a, const em_flight_t *b) {
  assert_int_equal(a->head.time_ns, b->head.time_ns);
  assert_int_equal(a->head.session, b->head.session);
  assert_int_equal(a->number, b->number);
  assert_int_equal(a->trigger.cause, b->trigger.cause);
  assert_int_equal(a->trigger.level, b->trigger.level);
  assert_int_equal(a->trigger.prev_level, b->trigger.prev_level);
  assert_str_or_null(a->trigger.rule, b->trigger.rule);
  assert_str_or_null(a->trigger.stage, b->trigger.stage);
  assert_str_or_null(a->trigger.reason, b->trigger.reason);
  assert_value_equal(&a->trigger.value, &b->trigger.value);
  assert_value_equal(&a->trigger.bound, &b->trigger.bound);
  assert_int_equal(a->trigger_mono_ns, b->trigger_mono_ns);
  assert_int_equal(a->pre_ns, b->pre_ns);
  assert_int_equal(a->post_ns, b->post_ns);
  assert_int_equal(a->period_ns, b->period_ns);
  assert_int_equal(a->n_stages, b->n_stages);
  for (size_t i = 0; i < a->n_stages; i++) {
    assert_string_equal(a->stages[i], b->stages[i]);
  }
  assert_int_equal(a->n_columns, b->n_columns);
  for (size_t i = 0; i < a->n_columns; i++) {
    assert_string_equal(a->columns[i].name, b->columns[i].name);
    assert_string_equal(a->columns[i].unit, b->columns[i].unit);
    assert_int_equal(a->columns[i].kind, b->columns[i].kind);
  }
  assert_int_equal(a->n_ticks, b->n_ticks);
  for (size_t i = 0; i < a->n_ticks; i++) {
    assert_int_equal(a->ticks[i].mono_ns, b->ticks[i].mono_ns);
    assert_int_equal(a->ticks[i].n_values, b->ticks[i].n_values);
    for (size_t j = 0; j < a->ticks[i].n_values; j++) {
      const em_flight_value_t *x = &a->ticks[i].values[j], *y = &b->ticks[i].values[j];
      assert_int_equal(x->column, y->column);
      assert_value_equal(&x->value, &y->value);
    }
  }
  assert_int_equal(a->n_spans, b->n_spans);
  for (size_t i = 0; i < a->n_spans; i++) {
    assert_int_equal(a->spans[i].stage, b->spans[i].stage);
    assert_int_equal(a->spans[i].frame_id, b->spans[i].frame_id);
    assert_int_equal(a->spans[i].start_ns, b->spans[i].start_ns);
    assert_int_equal(a->spans[i].duration_ns, b->spans[i].duration_ns);
  }
  assert_int_equal(a->truncated.spans_cut, b->truncated.spans_cut);
  assert_int_equal(a->truncated.ticks_cut, b->truncated.ticks_cut);
  assert_int_equal(a->truncated.spans_overwritten, b->truncated.spans_overwritten);
  assert_int_equal(a->verdict != NULL, b->verdict != NULL);
  if (a->verdict) { /* The JSON compares every member; the heads here. */
    assert_string_equal(a->verdict->stage, b->verdict->stage);
    assert_int_equal(a->verdict->breach_ns, b->verdict->breach_ns);
    assert_int_equal(a->verdict->n_causes, b->verdict->n_causes);
  }
  assert_int_equal(a->historical, b->historical);
}

/* Encodes, decodes, compares; the decoded recording encodes to the same bytes. */
static size_t round_trip(const em_flight_t *f) {
  size_t len = 0, len2 = 0, off = 0;
  assert_int_equal(em_flight_encode(f, buf, sizeof(buf), &len), 0);
  em_flight_t d;
  int rc = em_flight_decode(buf, len, &d, scratch, em_flight_scratch_bytes(len), &off);
  if (rc) {
    fail_msg("decode: %s at %zu of %zu", em_proto_strerror(rc), off, len);
  }
  assert_flight_equal(f, &d);
  assert_int_equal(em_flight_encode(&d, buf2, sizeof(buf2), &len2), 0);
  assert_int_equal(len, len2);
  assert_memory_equal(buf, buf2, len);
  size_t j1 = 0, j2 = 0;
  assert_int_equal(em_flight_to_json(f, json, sizeof(json), &j1), 0);
  assert_int_equal(em_flight_to_json(&d, json2, sizeof(json2), &j2), 0);
  assert_string_equal(json, json2);
  return len;
}

/* The random recordings' stream (edgemon/common/rng.h): each test that draws from it seeds it
 * with RNG_SEED first, so a failure reproduces on its own. */
#define RNG_SEED UINT64_C(88172645463325252)
static em_rng_t rng;
static uint64_t below(uint64_t n) {
  return n ? em_rng_next(&rng) % n : 0;
}
/* Small, large and extreme figures alike. */
static uint64_t any_u64(void) {
  switch (below(4)) {
  case 0:
    return below(30);
  case 1:
    return UINT64_MAX - below(30);
  default:
    return em_rng_next(&rng) >> below(64);
  }
}

static char r_stage_names[EM_FLIGHT_MAX_STAGES][16];
static const char *r_stages[EM_FLIGHT_MAX_STAGES];
static char r_col_names[40][16];
static em_flight_column_t r_columns[40];
static em_flight_tick_t r_ticks[300];
static em_flight_value_t r_values[300][40];
static em_flight_span_t r_spans[2000];
static uint64_t r_times[2300];

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* A random valid recording; times spread over all of uint64 or tight around the trigger. */
static em_flight_t random_flight(size_t max_ticks, size_t max_spans) {
  em_flight_t f = {.head = {.time_ns = em_rng_next(&rng), .session = (uint32_t)em_rng_next(&rng)},
                   .number = (uint32_t)em_rng_next(&rng),
                   .trigger = {.cause = (em_flight_cause_t)below(2),
                               .level = (em_level_t)below(4),
                               .prev_level = (em_level_t)((int)below(5) - 1)},
                   .trigger_mono_ns = any_u64(),
                   .pre_ns = em_rng_next(&rng),
                   .post_ns = em_rng_next(&rng),
                   .period_ns = em_rng_next(&rng),
                   .historical = below(2)};
  if (below(2)) {
    f.trigger.rule = "infer.p99";
    f.trigger.stage = "infer";
    f.trigger.value = (em_value_t)F(41.5);
    f.trigger.bound = (em_value_t)I(-40);
    f.trigger.reason = "p99 41.5 ms > 40 ms";
  }
  f.truncated.spans_overwritten = below(2) ? any_u64() : 0;
  f.truncated.spans_cut = below(3) == 0 ? any_u64() : 0;
  f.n_stages = 1 + below(EM_FLIGHT_MAX_STAGES);
  for (size_t i = 0; i < f.n_stages; i++) {
    snprintf(r_stage_names[i], sizeof(r_stage_names[i]), "s%zu", i);
    r_stages[i] = r_stage_names[i];
  }
  f.stages = r_stages;
  f.n_columns = below(40);
  for (size_t i = 0; i < f.n_columns; i++) {
    snprintf(r_col_names[i], sizeof(r_col_names[i]), "col.%zu", i);
    r_columns[i] = (em_flight_column_t){r_col_names[i], "1", (em_metric_kind_t)below(3)};
  }
  f.columns = r_columns;
  bool tight = below(2);
  f.n_ticks = below(max_ticks + 1);
  f.n_spans = below(max_spans + 1);
  size_t n_times = f.n_ticks + f.n_spans;
  for (size_t i = 0; i < n_times; i++) {
    r_times[i] = tight && f.trigger_mono_ns > 1000000 && f.trigger_mono_ns < UINT64_MAX / 2
                     ? f.trigger_mono_ns - 1000000 + below(3000000)
                     : any_u64();
  }
  qsort(r_times, f.n_ticks, sizeof(uint64_t), cmp_u64);
  qsort(r_times + f.n_ticks, f.n_spans, sizeof(uint64_t), cmp_u64);
  for (size_t i = 0; i < f.n_ticks; i++) {
    size_t k = 0;
    for (uint32_t c = 0; c < f.n_columns; c++) {
      if (below(4) == 0) {
        continue; /* not read on this tick */
      }
      em_value_t v = ABSENT;
      switch (below(5)) {
      case 0:
        break;
      case 1:
        v = (em_value_t)U(any_u64());
        break;
      case 2:
        v = (em_value_t)I((int64_t)(any_u64() >> 1));
        break;
      default:
        if (r_columns[c].kind == EM_METRIC_COUNTER) {
          v = (em_value_t)U(any_u64());
        } else if (below(2)) {
          v = (em_value_t)I(-(int64_t)(any_u64() >> 1) - 1);
        } else {
          v = (em_value_t)F((double)em_rng_next(&rng) / 3.0 - 1e18);
        }
      }
      r_values[i][k++] = (em_flight_value_t){c, v};
    }
    r_ticks[i] = (em_flight_tick_t){r_times[i], r_values[i], k};
  }
  f.ticks = r_ticks;
  for (size_t i = 0; i < f.n_spans; i++) {
    r_spans[i] = (em_flight_span_t){(uint32_t)below(f.n_stages), any_u64(), r_times[f.n_ticks + i],
                                    any_u64()};
  }
  f.spans = r_spans;
  return f;
}

static void random_recordings_round_trip(void **state) {
  (void)state;
  em_rng_seed(&rng, RNG_SEED);
  for (int i = 0; i < 300; i++) {
    em_flight_t f = random_flight(40, 200);
    round_trip(&f);
  }
}

static void empty_and_extreme_recordings_round_trip(void **state) {
  (void)state;
  em_flight_t f = small();
  f.n_ticks = f.n_spans = f.n_stages = f.n_columns = 0;
  f.trigger = (em_flight_trigger_t){
      .cause = EM_FLIGHT_COMMAND, .level = EM_LEVEL_NOMINAL, .prev_level = EM_LEVEL_NONE};
  round_trip(&f);
  /* Deltas of 65 bits: from 0 to UINT64_MAX and back, in every delta-encoded field. */
  static const em_flight_value_t v_max[] = {{0, U(UINT64_MAX)}};
  static const em_flight_value_t v_zero[] = {{0, U(0)}};
  static const em_flight_tick_t t[] = {{0, v_max, 1}, {UINT64_MAX, v_zero, 1}};
  static const em_flight_span_t s[] = {{0, UINT64_MAX, 0, UINT64_MAX}, {0, 0, UINT64_MAX, 0}};
  f = small();
  f.trigger_mono_ns = UINT64_MAX;
  f.ticks = t, f.spans = s;
  size_t len = round_trip(&f);
  /* The second tick's counter: 0 - UINT64_MAX, CBOR -1 - (2^64 - 2). */
  static const uint8_t neg65[] = {0x3b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe};
  bool found = false;
  for (size_t i = 0; i + sizeof(neg65) <= len; i++) {
    found = found || memcmp(buf + i, neg65, sizeof(neg65)) == 0;
  }
  assert_true(found);
  f.trigger_mono_ns = 0;
  round_trip(&f);
}

/* --- scratch bound -------------------------------------------------------------------------- */

/* Decoding with exactly em_flight_scratch_bytes() works; what it needs is within the bound. */
static void decode_in_bound(const uint8_t *in, size_t len) {
  em_flight_t f;
  size_t off = 0;
  int rc = em_flight_decode(in, len, &f, scratch, em_flight_scratch_bytes(len), &off);
  if (rc) {
    fail_msg("%s at %zu of %zu", em_proto_strerror(rc), off, len);
  }
}

static void scratch_bound_holds_for_the_densest_inputs(void **state) {
  (void)state;
  static em_flight_value_t vals[EM_FLIGHT_MAX_TICKS][24];
  static em_flight_tick_t ticks[EM_FLIGHT_MAX_TICKS];
  static em_flight_column_t cols[24];
  static char names[24][4];
  static em_flight_span_t spans[EM_FLIGHT_MAX_SPANS];
  static const char *stages[EM_FLIGHT_MAX_STAGES];
  static char stage_names[EM_FLIGHT_MAX_STAGES][4];
  for (size_t c = 0; c < 24; c++) {
    snprintf(names[c], sizeof(names[c]), "%c", (char)('A' + c));
    cols[c] = (em_flight_column_t){names[c], "1", EM_METRIC_GAUGE};
  }
  static const char letters[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_-";
  for (size_t s = 0; s < EM_FLIGHT_MAX_STAGES; s++) {
    stage_names[s][0] = letters[s];
    stages[s] = stage_names[s];
  }
  em_flight_t f = small();
  f.columns = cols, f.n_columns = 24;
  /* 1. Ticks full of one-byte figures {column < 24: small}: 2 bytes per figure. */
  for (size_t i = 0; i < EM_FLIGHT_MAX_TICKS; i++) {
    for (uint32_t c = 0; c < 24; c++) {
      vals[i][c] = (em_flight_value_t){c, U(1)};
    }
    ticks[i] = (em_flight_tick_t){100, vals[i], 24};
  }
  f.ticks = ticks, f.n_ticks = 4000, f.n_spans = 0;
  size_t len = 0;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), 0);
  decode_in_bound(buf, len);
  /* 1b. The same with a verdict at its limits, of one-letter names: its fixed arrays come on
   * top of the bytes' bound. */
  static em_proto_verdict_t v = {.stage = "a", .statistic = "p", .n_causes = 8};
  static const char *const letter[] = {"a", "b", "c", "d", "e", "f", "g", "h",
                                       "i", "j", "k", "l", "m", "n", "o", "p"};
  for (size_t c = 0; c < v.n_causes; c++) {
    em_proto_verdict_cause_t *vc = &v.causes[c];
    vc->n_evidence = EM_PROTO_VERDICT_MAX_EVIDENCE;
    vc->n_processes = EM_PROTO_VERDICT_MAX_PROCESSES;
    vc->n_functions = EM_PROTO_VERDICT_MAX_FUNCTIONS;
    for (size_t i = 0; i < vc->n_evidence; i++) {
      vc->evidence[i] = (em_proto_evidence_t){letter[i], U(1)};
    }
    for (size_t i = 0; i < vc->n_processes; i++) {
      vc->processes[i] = (em_proto_verdict_process_t){1, letter[i], 0.0};
      vc->functions[i] = (em_proto_verdict_function_t){letter[i], 0.0};
    }
  }
  f.verdict = &v;
  f.n_ticks = 3900;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), 0);
  decode_in_bound(buf, len);
  f.verdict = NULL;
  /* 2. Empty ticks [0, {}]. */
  for (size_t i = 0; i < EM_FLIGHT_MAX_TICKS; i++) {
    ticks[i].n_values = 0;
  }
  f.n_ticks = EM_FLIGHT_MAX_TICKS;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), 0);
  decode_in_bound(buf, len);
  /* 3. Spans of four one-byte items, and 64 one-letter stages. */
  for (size_t i = 0; i < EM_FLIGHT_MAX_SPANS; i++) {
    spans[i] = (em_flight_span_t){0, 0, 100, 0};
  }
  f.n_ticks = 0, f.spans = spans, f.n_spans = 60000;
  f.stages = stages, f.n_stages = EM_FLIGHT_MAX_STAGES;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), 0);
  decode_in_bound(buf, len);
  /* More spans than the byte limit allows: ETOOBIG, with the size. */
  f.n_spans = EM_FLIGHT_MAX_SPANS;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), EM_PROTO_ETOOBIG);
  assert_true(len > EM_FLIGHT_MAX_BYTES);
}

/* --- fit under a cap ------------------------------------------------------------------------ */

static uint64_t dist(uint64_t t, uint64_t trigger) {
  return t >= trigger ? t - trigger : trigger - t;
}

/*
 * The reference: the m items nearest the trigger (ties: ticks first, then the earlier one),
 * for the largest m whose encoding fits, found by encoding every m.
 */
static size_t reference_fit(const em_flight_t *f, size_t cap, em_flight_t *out) {
  size_t n = f->n_ticks + f->n_spans;
  static uint64_t key[4096 + 2000];
  for (size_t i = 0; i < n; i++) {
    key[i] = i < f->n_ticks ? f->ticks[i].mono_ns : f->spans[i - f->n_ticks].start_ns;
  }
  for (size_t m = n + 1; m-- > 0;) {
    /* Keep the m nearest: walk outwards from the trigger in each list like a merge. */
    size_t tl = 0, tr = 0, sl = 0, sr = 0;
    while (tl < f->n_ticks && f->ticks[tl].mono_ns < f->trigger_mono_ns) {
      tl++;
    }
    while (sl < f->n_spans && f->spans[sl].start_ns < f->trigger_mono_ns) {
      sl++;
    }
    tr = tl, sr = sl;
    for (size_t k = 0; k < m; k++) {
      uint64_t best = UINT64_MAX;
      int pick = -1;
      if (tl > 0 && dist(key[tl - 1], f->trigger_mono_ns) <= best) {
        best = dist(key[tl - 1], f->trigger_mono_ns), pick = 0;
      }
      if (tr < f->n_ticks && (pick < 0 || dist(key[tr], f->trigger_mono_ns) < best)) {
        best = dist(key[tr], f->trigger_mono_ns), pick = 1;
      }
      if (sl > 0 && (pick < 0 || dist(key[f->n_ticks + sl - 1], f->trigger_mono_ns) < best)) {
        best = dist(key[f->n_ticks + sl - 1], f->trigger_mono_ns), pick = 2;
      }
      if (sr < f->n_spans && (pick < 0 || dist(key[f->n_ticks + sr], f->trigger_mono_ns) < best)) {
        pick = 3;
      }
      tl -= pick == 0, tr += pick == 1, sl -= pick == 2, sr += pick == 3;
    }
    em_flight_t g = *f;
    g.ticks = f->ticks + tl, g.n_ticks = tr - tl;
    g.spans = f->spans + sl, g.n_spans = sr - sl;
    g.truncated.ticks_cut += f->n_ticks - g.n_ticks;
    g.truncated.spans_cut += f->n_spans - g.n_spans;
    size_t len = 0;
    if (em_flight_encode(&g, buf2, sizeof(buf2), &len) == 0 && len <= cap) {
      *out = g;
      return len;
    }
  }
  return 0;
}

static void fit_leaves_out_the_farthest_first_and_says_so(void **state) {
  (void)state;
  em_rng_seed(&rng, RNG_SEED);
  int cut = 0;
  for (int round = 0; round < 60; round++) {
    em_flight_t f = random_flight(30, 120);
    size_t whole = 0;
    assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &whole), 0);
    em_flight_t bare = f;
    bare.n_ticks = bare.n_spans = 0;
    size_t floor = 0;
    assert_int_equal(em_flight_encode(&bare, buf, sizeof(buf), &floor), 0);
    size_t cap = floor + 20 + below(whole > floor ? whole - floor : 1);
    em_flight_t want;
    size_t want_len = reference_fit(&f, cap, &want);
    em_flight_t got = f;
    size_t len = 0;
    int rc = em_flight_encode_fit(&got, buf, cap, &len);
    if (want_len == 0) {
      assert_int_equal(rc, EM_PROTO_ENOSPACE);
      continue;
    }
    assert_int_equal(rc, 0);
    assert_true(len <= cap);
    assert_int_equal(len, want_len);
    assert_flight_equal(&want, &got);
    /* The recording says what it left out. */
    em_flight_t d;
    assert_int_equal(em_flight_decode(buf, len, &d, scratch, sizeof(scratch), NULL), 0);
    assert_int_equal(d.truncated.ticks_cut, f.truncated.ticks_cut + f.n_ticks - got.n_ticks);
    assert_int_equal(d.truncated.spans_cut, f.truncated.spans_cut + f.n_spans - got.n_spans);
    assert_int_equal(d.truncated.spans_overwritten, f.truncated.spans_overwritten);
    cut += got.n_ticks < f.n_ticks && got.n_spans < f.n_spans && got.n_ticks + got.n_spans > 0;
  }
  assert_true(cut >= 10); /* Most rounds cut both kinds and keep some. */
}

static void fit_keeps_a_recording_that_fits_and_refuses_when_nothing_does(void **state) {
  (void)state;
  em_flight_t f = small(), g = small();
  size_t len = 0, len2 = 0;
  assert_int_equal(em_flight_encode_fit(&g, buf, sizeof(buf), &len), 0);
  assert_int_equal(em_flight_encode(&f, buf2, sizeof(buf2), &len2), 0);
  assert_int_equal(len, len2);
  assert_memory_equal(buf, buf2, len);
  assert_int_equal(g.n_ticks, 2);
  assert_int_equal(g.truncated.ticks_cut, 0);
  /* Items leave farthest first: the tick at 90 (10 from the trigger at 100), the tick at 95,
   * the span at 97, the span at 99. 62 bytes whole; without the tick at 90, 61 (5 bytes less,
   * 4 more for {1: 1} in key 14); without both ticks 56; with the span at 99 alone, 54; bare
   * 50. */
  g = small();
  assert_int_equal(em_flight_encode_fit(&g, buf, 61, &len), 0);
  assert_int_equal(len, 61);
  assert_int_equal(g.n_ticks, 1);
  assert_int_equal(g.ticks[0].mono_ns, 95);
  assert_int_equal(g.truncated.ticks_cut, 1);
  assert_int_equal(g.n_spans, 2);
  g = small();
  assert_int_equal(em_flight_encode_fit(&g, buf, 60, &len), 0);
  assert_int_equal(len, 56);
  assert_int_equal(g.n_ticks, 0);
  assert_int_equal(g.n_spans, 2);
  g = small();
  assert_int_equal(em_flight_encode_fit(&g, buf, 55, &len), 0);
  assert_int_equal(len, 54);
  assert_int_equal(g.n_ticks, 0);
  assert_int_equal(g.n_spans, 1);
  assert_int_equal(g.spans[0].start_ns, 99);
  em_flight_t d;
  assert_int_equal(em_flight_decode(buf, len, &d, scratch, sizeof(scratch), NULL), 0);
  assert_int_equal(d.spans[0].frame_id, 2); /* the kept span's deltas are now from 0 */
  assert_int_equal(d.spans[0].start_ns, 99);
  assert_int_equal(d.truncated.ticks_cut, 2);
  assert_int_equal(d.truncated.spans_cut, 1);
  g = small();
  assert_int_equal(em_flight_encode_fit(&g, buf, 53, &len), 0);
  assert_int_equal(len, 50);
  assert_int_equal(g.n_spans, 0);
  /* Not even the bare recording fits: ENOSPACE, the size it needs, f untouched. */
  g = small();
  assert_int_equal(em_flight_encode_fit(&g, buf, 49, &len), EM_PROTO_ENOSPACE);
  assert_int_equal(len, 50);
  assert_int_equal(g.n_ticks, 2);
  assert_int_equal(g.n_spans, 2);
  /* Invalid recordings are refused as by em_flight_encode. */
  g = small(), g.n_stages = 0;
  assert_int_equal(em_flight_encode_fit(&g, buf, sizeof(buf), &len), EM_PROTO_ERANGE);
}

/* A cap above EM_FLIGHT_MAX_BYTES is the limit: a recording larger than it is cut to fit. */
static void fit_caps_at_the_largest_recording(void **state) {
  (void)state;
  static em_flight_span_t spans[EM_FLIGHT_MAX_SPANS];
  for (size_t i = 0; i < EM_FLIGHT_MAX_SPANS; i++) {
    spans[i] = (em_flight_span_t){0, i, 1000 + 1000 * i, 5000};
  }
  em_flight_t f = small();
  f.n_ticks = 0;
  f.trigger_mono_ns = 1000 + 1000 * 30000;
  f.spans = spans, f.n_spans = EM_FLIGHT_MAX_SPANS;
  size_t len = 0;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), EM_PROTO_ETOOBIG);
  assert_int_equal(em_flight_encode_fit(&f, buf, sizeof(buf), &len), 0);
  assert_true(len <= EM_FLIGHT_MAX_BYTES);
  assert_true(len > EM_FLIGHT_MAX_BYTES - 16);
  assert_true(f.truncated.spans_cut > 0);
  assert_int_equal(f.n_spans + f.truncated.spans_cut, EM_FLIGHT_MAX_SPANS);
  /* Cut farthest first: the kept spans are around the trigger, more of them after it (the
   * spans run out 30000 before it). */
  assert_true(f.spans[0].start_ns <= f.trigger_mono_ns);
  assert_true(f.spans[f.n_spans - 1].start_ns >= f.trigger_mono_ns);
  uint64_t before = f.trigger_mono_ns - f.spans[0].start_ns;
  uint64_t after = f.spans[f.n_spans - 1].start_ns - f.trigger_mono_ns;
  assert_true(before <= after + 1000 && after <= before + 1000);
}

/* --- historical ----------------------------------------------------------------------------- */

static void marking_historical_equals_encoding_it_historical(void **state) {
  (void)state;
  em_rng_seed(&rng, RNG_SEED);
  for (int i = 0; i < 50; i++) {
    em_flight_t f = random_flight(10, 30);
    f.historical = false;
    size_t live = 0, marked = 0, want = 0;
    assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &live), 0);
    assert_int_equal(em_flight_mark_historical(buf, live, buf2, sizeof(buf2), &marked), 0);
    f.historical = true;
    assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &want), 0);
    assert_int_equal(marked, want);
    assert_memory_equal(buf, buf2, want);
    em_flight_t d;
    assert_int_equal(em_flight_decode(buf2, marked, &d, scratch, sizeof(scratch), NULL), 0);
    assert_true(d.historical);
  }
  em_flight_t f = small();
  size_t live = 0, out = 0;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &live), 0);
  /* In place, short of room, and bytes that are not a live recording. */
  assert_int_equal(em_flight_mark_historical(buf, live, buf, sizeof(buf), &out), 0);
  assert_int_equal(out, live + 2);
  assert_int_equal(em_flight_mark_historical(buf, live, buf2, live + 1, &out), EM_PROTO_ENOSPACE);
  assert_int_equal(out, live + 2);
  assert_int_equal(em_flight_mark_historical(buf, 4, buf2, sizeof(buf2), &out),
                   EM_PROTO_EMALFORMED);
  buf[4] = EM_MSG_STATE;
  assert_int_equal(em_flight_mark_historical(buf, live, buf2, sizeof(buf2), &out),
                   EM_PROTO_EMALFORMED);
  buf[4] = EM_MSG_FLIGHT, buf[0] = 0xa5;
  assert_int_equal(em_flight_mark_historical(buf, live, buf2, sizeof(buf2), &out),
                   EM_PROTO_EMALFORMED);
  assert_int_equal(em_flight_mark_historical(NULL, live, buf2, sizeof(buf2), &out),
                   EM_PROTO_EINVAL);
}

/* --- JSON ----------------------------------------------------------------------------------- */

static void json_names_fields_and_gives_counter_increases(void **state) {
  (void)state;
  static const char *const stages[] = {"capture", "infer"};
  static const em_flight_column_t cols[] = {
      {"pmu.context-switches", "1", EM_METRIC_COUNTER},
      {"mem.rss", "By", EM_METRIC_GAUGE},
  };
  static const em_flight_value_t v0[] = {{0, U(1000)}, {1, U(734003200)}};
  static const em_flight_value_t v1[] = {{0, ABSENT}, {1, F(1.5)}};
  static const em_flight_value_t v2[] = {{0, U(1012)}};
  static const em_flight_tick_t ticks[] = {{900, v0, 2}, {1000, v1, 2}, {1100, v2, 1}};
  static const em_flight_span_t spans[] = {{1, 7, 950, 40}};
  em_flight_t f = {.head = {.time_ns = 5, .session = 6},
                   .number = 3,
                   .trigger = {.cause = EM_FLIGHT_COMMAND,
                               .level = EM_LEVEL_DEGRADED,
                               .prev_level = EM_LEVEL_NONE,
                               .reason = "cmd/flight"},
                   .trigger_mono_ns = 1000,
                   .pre_ns = 2,
                   .post_ns = 1,
                   .period_ns = 100,
                   TABLE(stages, stages),
                   TABLE(columns, cols),
                   TABLE(ticks, ticks),
                   TABLE(spans, spans),
                   .truncated = {.spans_overwritten = 4},
                   .historical = true};
  size_t len = 0;
  assert_int_equal(em_flight_to_json(&f, json, sizeof(json), &len), 0);
  assert_int_equal(strlen(json), len);
  assert_string_equal(
      json,
      "{\"v\":1,\"kind\":\"flight\",\"time_ns\":5,\"session\":6,\"number\":3,"
      "\"trigger\":{\"cause\":\"command\",\"level\":\"DEGRADED\",\"reason\":\"cmd/flight\"},"
      "\"trigger_mono_ns\":1000,\"pre_ns\":2,\"post_ns\":1,\"period_ns\":100,"
      "\"stages\":[\"capture\",\"infer\"],"
      "\"columns\":[{\"name\":\"pmu.context-switches\",\"unit\":\"1\",\"kind\":\"counter\"},"
      "{\"name\":\"mem.rss\",\"unit\":\"By\",\"kind\":\"gauge\"}],"
      "\"ticks\":[{\"mono_ns\":900,\"t_ns\":-100,\"values\":{\"pmu.context-switches\":1000,"
      "\"mem.rss\":734003200}},"
      "{\"mono_ns\":1000,\"t_ns\":0,\"values\":{\"pmu.context-switches\":null,\"mem.rss\":1.5}},"
      "{\"mono_ns\":1100,\"t_ns\":100,\"values\":{\"pmu.context-switches\":12}}],"
      "\"spans\":[{\"stage\":\"infer\",\"frame\":7,\"start_ns\":950,\"t_ns\":-50,"
      "\"duration_ns\":40}],"
      "\"truncated\":{\"spans_cut\":0,\"ticks_cut\":0,\"spans_overwritten\":4},"
      "\"historical\":true}");
  /* Short buffers: ENOSPACE, the length needed, NUL-terminated. */
  size_t need = len;
  assert_int_equal(em_flight_to_json(&f, json2, 10, &len), EM_PROTO_ENOSPACE);
  assert_int_equal(len, need);
  assert_int_equal(strlen(json2), 9);
  assert_string_equal(em_flight_cause_name(EM_FLIGHT_ESCALATION), "escalation");
  assert_string_equal(em_flight_cause_name((em_flight_cause_t)7), "unknown");
  assert_string_equal(em_msg_kind_name(EM_MSG_FLIGHT), "flight");
}

/* --- proto.h's side: birth key 10, cmd/flight, kind 5 refused ------------------------------- */

static void proto_carries_the_recorder_and_the_command_and_refuses_kind_5(void **state) {
  (void)state;
  static uint8_t s[EM_PROTO_SCRATCH_MAX];
  em_msg_t m = {.kind = EM_MSG_BIRTH,
                .u.birth = {.head = {.time_ns = 1, .session = 2},
                            .device = "d",
                            .agent_version = "v",
                            .board = "b",
                            .period_ns = 100,
                            .flight = {.on = true,
                                       .pre_ns = 5000000000u,
                                       .post_ns = 1000000000u,
                                       .ticks = 60,
                                       .spans = 4096,
                                       .bytes = 300000}}};
  size_t len = 0, off = 0;
  assert_int_equal(em_proto_encode(&m, buf, sizeof(buf), &len), 0);
  em_msg_t d;
  assert_int_equal(em_proto_decode(buf, len, &d, s, sizeof(s), NULL), 0);
  assert_true(d.u.birth.flight.on);
  assert_int_equal(d.u.birth.flight.pre_ns, 5000000000u);
  assert_int_equal(d.u.birth.flight.post_ns, 1000000000u);
  assert_int_equal(d.u.birth.flight.ticks, 60);
  assert_int_equal(d.u.birth.flight.spans, 4096);
  assert_int_equal(d.u.birth.flight.bytes, 300000);
  assert_int_equal(em_proto_to_json(&d, json, sizeof(json), &len), 0);
  assert_non_null(strstr(json, ",\"flight_recorder\":{\"pre_ns\":5000000000,\"post_ns\":1000000000,"
                               "\"ticks\":60,\"spans\":4096,\"bytes\":300000}}"));
  /* Off: the key is absent, and decodes as off. */
  m.u.birth.flight.on = false;
  size_t off_len = 0;
  assert_int_equal(em_proto_encode(&m, buf, sizeof(buf), &off_len), 0);
  assert_int_equal(buf[0], 0xaa); /* 10 entries: no key 10 */
  assert_int_equal(em_proto_decode(buf, off_len, &d, s, sizeof(s), NULL), 0);
  assert_false(d.u.birth.flight.on);
  /* A recorder missing one of its sizes. */
  m.u.birth.flight.on = true;
  assert_int_equal(em_proto_encode(&m, buf, sizeof(buf), &len), 0);
  assert_int_equal(buf[len - 6], 0x04); /* key 4 (bytes): 1a 00 04 93 e0 */
  buf[len - 6] = 0x05;                  /* the unknown key 5: bytes missing */
  assert_int_equal(em_proto_decode(buf, len, &d, s, sizeof(s), &off), EM_PROTO_EMISSING);
  /* cmd/flight */
  em_msg_t c = {.kind = EM_MSG_CMD, .u.cmd = {.head = {.time_ns = 9}, .command = EM_CMD_FLIGHT}};
  assert_int_equal(em_proto_encode(&c, buf, sizeof(buf), &len), 0);
  assert_int_equal(em_proto_decode(buf, len, &d, s, sizeof(s), NULL), 0);
  assert_int_equal(d.u.cmd.command, EM_CMD_FLIGHT);
  assert_int_equal(em_proto_to_json(&d, json, sizeof(json), &len), 0);
  assert_string_equal(json, "{\"v\":1,\"kind\":\"cmd\",\"time_ns\":9,\"command\":\"flight\"}");
  /* A flight recording is not for em_proto_decode. */
  em_flight_t f = small();
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), 0);
  assert_int_equal(em_proto_decode(buf, len, &d, s, sizeof(s), &off), EM_PROTO_EKIND);
  assert_int_equal(off, 4);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(encodes_to_the_hand_assembled_bytes),
      cmocka_unit_test(decodes_the_hand_assembled_bytes_to_absolute_figures),
      cmocka_unit_test(key_order_and_unknown_keys_do_not_matter),
      cmocka_unit_test(vectors_match_the_golden_files),
      cmocka_unit_test(each_bad_input_gets_its_own_error),
      cmocka_unit_test(tables_past_their_limits_are_refused),
      cmocka_unit_test(every_prefix_is_truncated),
      cmocka_unit_test(too_big_too_little_scratch_and_null_arguments),
      cmocka_unit_test(encoder_refuses_what_the_decoder_would_refuse),
      cmocka_unit_test(random_recordings_round_trip),
      cmocka_unit_test(empty_and_extreme_recordings_round_trip),
      cmocka_unit_test(scratch_bound_holds_for_the_densest_inputs),
      cmocka_unit_test(fit_leaves_out_the_farthest_first_and_says_so),
      cmocka_unit_test(fit_keeps_a_recording_that_fits_and_refuses_when_nothing_does),
      cmocka_unit_test(fit_caps_at_the_largest_recording),
      cmocka_unit_test(marking_historical_equals_encoding_it_historical),
      cmocka_unit_test(json_names_fields_and_gives_counter_increases),
      cmocka_unit_test(proto_carries_the_recorder_and_the_command_and_refuses_kind_5),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
