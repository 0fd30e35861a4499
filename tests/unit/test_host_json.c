/*
 * test_host_json.c - the one JSON escaper and writer (proto/src/json_write.c,
 * edgemon/json_write.h) as the host's printers call it: each row is a string, the flags one of
 * the printers passes, and the bytes that printer has always written; the writer's buffer
 * counting, its sink and its separators.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <edgemon/json_write.h>

typedef struct {
  char text[256];
  size_t len;
  size_t calls; /* Calls of the sink, to see that runs are passed whole. */
} out_t;

static void sink(void *ctx, const char *s, size_t n) {
  out_t *o = ctx;
  assert_true(o->len + n < sizeof(o->text));
  memcpy(o->text + o->len, s, n);
  o->len += n;
  o->text[o->len] = '\0';
  o->calls++;
}

/* The flags of each printer that escapes a string. */
#define PROTO   0u                                           /* proto's, forensic_api, history */
#define VIEW    EM_JSON_ESC_DEL                              /* cli/view.c, identity.c */
#define DECODE  (EM_JSON_ESC_DEL | EM_JSON_UTF8_ESCAPE)      /* cli/decode.c */
#define METRICS (EM_JSON_ESC_NEWLINE | EM_JSON_UTF8_REPLACE) /* api/metrics.c, JSON */
#define PROM    (EM_JSON_ESC_NEWLINE | EM_JSON_UTF8_REPLACE | EM_JSON_CTRL_RAW) /* label values */
#define DIAG    (EM_JSON_ESC_SHORT | EM_JSON_ESC_DEL)                           /* lib/diag.c */

typedef struct {
  const char *in;
  size_t n; /* 0: strlen(in). */
  unsigned flags;
  const char *want;
} row_t;

static const row_t rows[] = {
    {"plain", 0, PROTO, "plain"},
    {"", 0, PROTO, ""},
    {"a\"b\\c", 0, PROTO, "a\\\"b\\\\c"},
    {"tab\there\nnl", 0, PROTO, "tab\\u0009here\\u000anl"},
    {"\x01\x1f", 0, PROTO, "\\u0001\\u001f"},
    {"del\x7f", 0, PROTO, "del\x7f"},
    {"caf\xc3\xa9 \xff", 0, PROTO, "caf\xc3\xa9 \xff"}, /* Bytes as they are. */
    {"del\x7f", 0, VIEW, "del\\u007f"},
    {"q\"\n", 0, VIEW, "q\\\"\\u000a"},
    {"nul\0in", 6, DECODE, "nul\\u0000in"},
    {"caf\xc3\xa9", 0, DECODE, "caf\xc3\xa9"},
    {"bad\xff!", 0, DECODE, "bad\\ufffd!"},
    {"\xc0\xaf", 0, DECODE, "\\ufffd\\ufffd"},                       /* Overlong. */
    {"\xed\xa0\x80", 0, DECODE, "\\ufffd\\ufffd\\ufffd"},            /* Surrogate. */
    {"\xf4\x90\x80\x80", 0, DECODE, "\\ufffd\\ufffd\\ufffd\\ufffd"}, /* Past U+10FFFF. */
    {"\xf0\x9f\x98\x80\x7f", 0, DECODE, "\xf0\x9f\x98\x80\\u007f"},
    {"\xe2\x82", 0, DECODE, "\\ufffd\\ufffd"}, /* Cut short. */
    {"a\nb\tc", 0, METRICS, "a\\nb\\u0009c"},
    {"x\xffy", 0, METRICS, "x\xef\xbf\xbdy"},
    {"q\"\\\x7f", 0, METRICS, "q\\\"\\\\\x7f"},
    {"a\nb\tc\x01", 0, PROM, "a\\nb\tc\x01"},
    {"v\"\\\xfe", 0, PROM, "v\\\"\\\\\xef\xbf\xbd"},
    {"\b\f\n\r\t\x0b", 0, DIAG, "\\b\\f\\n\\r\\t\\u000b"},
    {"\xc3\xa9\x7f", 0, DIAG, "\xc3\xa9\\u007f"},
};

static void escape_rows_keep_each_printers_bytes(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    const row_t *r = &rows[i];
    out_t o = {.len = 0};
    em_json_escape(r->in, r->n ? r->n : strlen(r->in), r->flags, sink, &o);
    if (strcmp(o.text, r->want) != 0) {
      fail_msg("row %zu: got \"%s\", want \"%s\"", i, o.text, r->want);
    }
  }
}

static void escape_passes_unescaped_runs_whole(void **state) {
  (void)state;
  out_t o = {.len = 0};
  em_json_escape("abcdef\"ghijkl", 13, 0, sink, &o);
  assert_string_equal(o.text, "abcdef\\\"ghijkl");
  assert_int_equal(o.calls, 3); /* "abcdef", the escape, "ghijkl". */
}

static void utf8_len_bounds(void **state) {
  (void)state;
  assert_int_equal(em_json_utf8_len((const uint8_t *)"a", 1), 1);
  assert_int_equal(em_json_utf8_len((const uint8_t *)"\xc2\x80", 2), 2);
  assert_int_equal(em_json_utf8_len((const uint8_t *)"\xc2\x80", 1), 0);
  assert_int_equal(em_json_utf8_len((const uint8_t *)"\xe0\xa0\x80", 3), 3);
  assert_int_equal(em_json_utf8_len((const uint8_t *)"\xe0\x9f\xbf", 3), 0);
  assert_int_equal(em_json_utf8_len((const uint8_t *)"\xf4\x8f\xbf\xbf", 4), 4);
  assert_int_equal(em_json_utf8_len((const uint8_t *)"\xf5\x80\x80\x80", 4), 0);
  assert_int_equal(em_json_utf8_len((const uint8_t *)"\x80", 1), 0);
}

static void writer_counts_past_its_buffer(void **state) {
  (void)state;
  char buf[8];
  em_json_t w = {.buf = buf, .cap = sizeof(buf), .first = true};
  em_json_open(&w, '{');
  em_json_key(&w, "name");
  em_json_str(&w, "value");
  em_json_close(&w, '}');
  size_t len = 0;
  assert_false(em_json_finish(&w, &len));
  assert_int_equal(len, strlen("{\"name\":\"value\"}"));
  assert_string_equal(buf, "{\"name\""); /* Cut at cap - 1, NUL-terminated. */

  char big[64];
  w = (em_json_t){.buf = big, .cap = sizeof(big), .first = true};
  em_json_open(&w, '[');
  em_json_elem(&w);
  em_json_double(&w, 1.0);
  em_json_elem(&w);
  em_json_double(&w, 0.1);
  em_json_elem(&w);
  em_json_fmt(&w, "%d", -3);
  em_json_close(&w, ']');
  assert_true(em_json_finish(&w, &len));
  assert_string_equal(big, "[1.0,0.1,-3]");
  assert_int_equal(len, strlen(big));
}

static void writer_through_a_sink_uses_its_flags(void **state) {
  (void)state;
  out_t o = {.len = 0};
  em_json_t w = {.first = true, .flags = EM_JSON_ESC_DEL, .sink = sink, .ctx = &o};
  em_json_open(&w, '{');
  em_json_key(&w, "k\x7f");
  em_json_strn(&w, "a\0b", 3);
  em_json_key(&w, "n");
  em_json_raw(&w, "null", 4);
  em_json_close(&w, '}');
  assert_string_equal(o.text, "{\"k\\u007f\":\"a\\u0000b\",\"n\":null}");
  assert_int_equal(w.pos, o.len);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(escape_rows_keep_each_printers_bytes),
      cmocka_unit_test(escape_passes_unescaped_runs_whole),
      cmocka_unit_test(utf8_len_bounds),
      cmocka_unit_test(writer_counts_past_its_buffer),
      cmocka_unit_test(writer_through_a_sink_uses_its_flags),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
