/*
 * test_host_diag.c - host/lib/diag.c: CBOR diagnostic notation.
 *
 * Table-driven. The well-formed rows are RFC 8949 Appendix A (encoding and the diagnostic
 * text the RFC prints for it, byte for byte, floats included) plus a few of our own; each row
 * is reused for its truncation variants (every proper prefix must be ETRUNCATED at a sane
 * offset, never a crash) and its trailing-byte variant. The malformed rows give the expected
 * error code and offset.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "diag.h"

typedef struct {
  const char *hex;  /* Encoding. */
  const char *diag; /* Expected notation. */
} good_row_t;

static const good_row_t good_rows[] = {
    /* RFC 8949 Appendix A, in its order. */
    {"00", "0"},
    {"01", "1"},
    {"0a", "10"},
    {"17", "23"},
    {"1818", "24"},
    {"1819", "25"},
    {"1864", "100"},
    {"1903e8", "1000"},
    {"1a000f4240", "1000000"},
    {"1b000000e8d4a51000", "1000000000000"},
    {"1bffffffffffffffff", "18446744073709551615"},
    {"c249010000000000000000", "2(h'010000000000000000')"},
    {"3bffffffffffffffff", "-18446744073709551616"},
    {"c349010000000000000000", "3(h'010000000000000000')"},
    {"20", "-1"},
    {"29", "-10"},
    {"3863", "-100"},
    {"3903e7", "-1000"},
    {"f90000", "0.0"},
    {"f98000", "-0.0"},
    {"f93c00", "1.0"},
    {"fb3ff199999999999a", "1.1"},
    {"f93e00", "1.5"},
    {"f97bff", "65504.0"},
    {"fa47c35000", "100000.0"},
    {"fa7f7fffff", "3.4028234663852886e+38"},
    {"fb7e37e43c8800759c", "1.0e+300"},
    {"f90001", "5.960464477539063e-8"},
    {"f90400", "0.00006103515625"},
    {"f9c400", "-4.0"},
    {"fbc010666666666666", "-4.1"},
    {"f97c00", "Infinity"},
    {"f97e00", "NaN"},
    {"f9fc00", "-Infinity"},
    {"fa7f800000", "Infinity"},
    {"fa7fc00000", "NaN"},
    {"faff800000", "-Infinity"},
    {"fb7ff0000000000000", "Infinity"},
    {"fb7ff8000000000000", "NaN"},
    {"fbfff0000000000000", "-Infinity"},
    {"f4", "false"},
    {"f5", "true"},
    {"f6", "null"},
    {"f7", "undefined"},
    {"f0", "simple(16)"},
    {"f8ff", "simple(255)"},
    {"c074323031332d30332d32315432303a30343a30305a", "0(\"2013-03-21T20:04:00Z\")"},
    {"c11a514b67b0", "1(1363896240)"},
    {"c1fb41d452d9ec200000", "1(1363896240.5)"},
    {"d74401020304", "23(h'01020304')"},
    {"d818456449455446", "24(h'6449455446')"},
    {"d82076687474703a2f2f7777772e6578616d706c652e636f6d", "32(\"http://www.example.com\")"},
    {"40", "h''"},
    {"4401020304", "h'01020304'"},
    {"60", "\"\""},
    {"6161", "\"a\""},
    {"6449455446", "\"IETF\""},
    {"62225c", "\"\\\"\\\\\""},
    {"62c3bc", "\"\xc3\xbc\""},
    {"63e6b0b4", "\"\xe6\xb0\xb4\""},
    {"64f0908591", "\"\xf0\x90\x85\x91\""},
    {"80", "[]"},
    {"83010203", "[1, 2, 3]"},
    {"8301820203820405", "[1, [2, 3], [4, 5]]"},
    {"98190102030405060708090a0b0c0d0e0f101112131415161718181819",
     "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, "
     "25]"},
    {"a0", "{}"},
    {"a201020304", "{1: 2, 3: 4}"},
    {"a26161016162820203", "{\"a\": 1, \"b\": [2, 3]}"},
    {"826161a161626163", "[\"a\", {\"b\": \"c\"}]"},
    {"a56161614161626142616361436164614461656145",
     "{\"a\": \"A\", \"b\": \"B\", \"c\": \"C\", \"d\": \"D\", \"e\": \"E\"}"},
    {"5f42010243030405ff", "(_ h'0102', h'030405')"},
    {"7f657374726561646d696e67ff", "(_ \"strea\", \"ming\")"},
    {"9fff", "[_ ]"},
    {"9f018202039f0405ffff", "[_ 1, [2, 3], [_ 4, 5]]"},
    {"9f01820203820405ff", "[_ 1, [2, 3], [4, 5]]"},
    {"83018202039f0405ff", "[1, [2, 3], [_ 4, 5]]"},
    {"83019f0203ff820405", "[1, [_ 2, 3], [4, 5]]"},
    {"9f0102030405060708090a0b0c0d0e0f101112131415161718181819ff",
     "[_ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, "
     "25]"},
    {"bf61610161629f0203ffff", "{_ \"a\": 1, \"b\": [_ 2, 3]}"},
    {"826161bf61626163ff", "[\"a\", {_ \"b\": \"c\"}]"},
    {"bf6346756ef563416d7421ff", "{_ \"Fun\": true, \"Amt\": -2}"},

    /* Beyond the appendix. */
    {"5fff", "''_"},        /* Indefinite byte string without chunks (RFC 8949 8.1). */
    {"7fff", "\"\"_"},      /* Same for text. */
    {"5f40ff", "(_ h'')"},  /* One empty chunk keeps its structure. */
    {"bfff", "{_ }"},       /* Empty indefinite map. */
    {"f820", "simple(32)"}, /* Smallest two-byte simple value. */
    {"e0", "simple(0)"},    /* One-byte simple value 0. */
    {"fb444b1ae4d6e2ef50", "1.0e+21"},
    {"fb4415af1d78b58c40", "100000000000000000000.0"},
    {"fb3eb0c6f7a0b5ed8d", "0.000001"},
    {"fb3e7ad7f29abcaf48", "1.0e-7"},
    {"fb405edd2f1a9fbe77", "123.456"},
    {"fb80000000000013c4", "-2.5e-320"}, /* Subnormal double. */
    {"fb4340000000000000", "9007199254740992.0"},
    {"fa3dcccccd", "0.10000000149011612"}, /* float32 0.1, exactly as a double reads it. */
    {"f9fe00", "NaN"},                     /* Negative NaN: still NaN. */
    {"f98001", "-5.960464477539063e-8"},   /* Smallest negative half subnormal. */
    {"630a0901", "\"\\n\\t\\u0001\""},     /* JSON escapes. */
    {"617f", "\"\\u007f\""},
    {"3b7fffffffffffffff", "-9223372036854775808"},
    {"dbffffffffffffffff00", "18446744073709551615(0)"},
    {"c6c600", "6(6(0))"},
    {"a1a10102f6", "{{1: 2}: null}"}, /* Any item may be a key. */
};

typedef struct {
  const char *name;
  const char *hex;
  int rc;
  size_t off;
} bad_row_t;

static const bad_row_t bad_rows[] = {
    {"empty input", "", EM_DIAG_ETRUNCATED, 0},
    {"one-byte argument missing", "18", EM_DIAG_ETRUNCATED, 0},
    {"two-byte argument short", "1900", EM_DIAG_ETRUNCATED, 0},
    {"eight-byte argument short", "1b00000000000000", EM_DIAG_ETRUNCATED, 0},
    {"float64 short", "fb3ff19999", EM_DIAG_ETRUNCATED, 0},
    {"text shorter than its length", "62", EM_DIAG_ETRUNCATED, 0},
    {"byte string shorter than its length", "44010203", EM_DIAG_ETRUNCATED, 0},
    {"string of 2^64-1 bytes", "5bffffffffffffffff00", EM_DIAG_ETRUNCATED, 0},
    {"array missing its second item", "8201", EM_DIAG_ETRUNCATED, 2},
    {"array of 2^64-1 items", "9bffffffffffffffff0102", EM_DIAG_ETRUNCATED, 11},
    {"map missing a value", "a101", EM_DIAG_ETRUNCATED, 2},
    {"tag without content", "c1", EM_DIAG_ETRUNCATED, 1},
    {"indefinite array without break", "9f01", EM_DIAG_ETRUNCATED, 2},
    {"indefinite string without break", "7f6161", EM_DIAG_ETRUNCATED, 3},
    {"truncated item inside an array", "82011a0000", EM_DIAG_ETRUNCATED, 2},
    {"break at top level", "ff", EM_DIAG_EMALFORMED, 0},
    {"break in a definite array", "8301ff", EM_DIAG_EMALFORMED, 2},
    {"break in a definite map", "a1ff", EM_DIAG_EMALFORMED, 1},
    {"break in place of a map value", "bf01ff", EM_DIAG_EMALFORMED, 2},
    {"break after a tag", "c1ff", EM_DIAG_EMALFORMED, 1},
    {"reserved ai 28, uint", "1c", EM_DIAG_EMALFORMED, 0},
    {"reserved ai 29, negint", "3d", EM_DIAG_EMALFORMED, 0},
    {"reserved ai 30, bytes", "5e", EM_DIAG_EMALFORMED, 0},
    {"reserved ai 28, text", "7c", EM_DIAG_EMALFORMED, 0},
    {"reserved ai 29, array", "9d", EM_DIAG_EMALFORMED, 0},
    {"reserved ai 30, map", "be", EM_DIAG_EMALFORMED, 0},
    {"reserved ai 28, tag", "dc", EM_DIAG_EMALFORMED, 0},
    {"reserved ai 30, simple", "fe", EM_DIAG_EMALFORMED, 0},
    {"reserved ai inside an array", "82011d", EM_DIAG_EMALFORMED, 2},
    {"indefinite uint", "1f", EM_DIAG_EMALFORMED, 0},
    {"indefinite negint", "3f", EM_DIAG_EMALFORMED, 0},
    {"indefinite tag", "df", EM_DIAG_EMALFORMED, 0},
    {"two-byte simple below 32", "f818", EM_DIAG_EMALFORMED, 0},
    {"two-byte simple 0", "f800", EM_DIAG_EMALFORMED, 0},
    {"text chunk in a byte string", "5f6161ff", EM_DIAG_EMALFORMED, 1},
    {"byte chunk in a text string", "7f4101ff", EM_DIAG_EMALFORMED, 1},
    {"integer chunk", "5f01ff", EM_DIAG_EMALFORMED, 1},
    {"nested indefinite chunk", "5f5fffff", EM_DIAG_EMALFORMED, 1},
    {"UTF-8: bad continuation", "62c328", EM_DIAG_EMALFORMED, 1},
    {"UTF-8: lone continuation", "63616280", EM_DIAG_EMALFORMED, 3},
    {"UTF-8: overlong 2-byte", "62c0af", EM_DIAG_EMALFORMED, 1},
    {"UTF-8: overlong 3-byte", "63e080af", EM_DIAG_EMALFORMED, 1},
    {"UTF-8: surrogate", "6461eda080", EM_DIAG_EMALFORMED, 2},
    {"UTF-8: past U+10FFFF", "64f4908080", EM_DIAG_EMALFORMED, 1},
    {"UTF-8: 0xff", "61ff", EM_DIAG_EMALFORMED, 1},
    {"UTF-8: sequence cut by the string end", "6261e6", EM_DIAG_EMALFORMED, 2},
    {"UTF-8: invalid in a chunk",
     "7f6161"
     "62c328"
     "ff",
     EM_DIAG_EMALFORMED, 4},
    {"UTF-8: invalid in a map key", "a162c3280f", EM_DIAG_EMALFORMED, 2},
    {"trailing byte", "0000", EM_DIAG_ETRAILING, 1},
    {"trailing after array", "820102ff", EM_DIAG_ETRAILING, 3},
    {"second item", "80a0", EM_DIAG_ETRAILING, 1},
};

/* Parses a hex string into a malloc'd buffer; *len set. */
static uint8_t *from_hex(const char *hex, size_t *len) {
  size_t n = strlen(hex) / 2;
  uint8_t *b = malloc(n ? n : 1);
  assert_non_null(b);
  for (size_t i = 0; i < n; i++) {
    unsigned v = 0;
    assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
    b[i] = (uint8_t)v;
  }
  *len = n;
  return b;
}

/* Runs em_diag_print into memory; returns rc, the text in *text (caller frees). */
static int diag(const uint8_t *buf, size_t len, char **text, size_t *off) {
  size_t tlen = 0;
  FILE *f = open_memstream(text, &tlen);
  assert_non_null(f);
  int rc = em_diag_print(buf, len, f, off);
  assert_int_equal(fclose(f), 0);
  return rc;
}

/* diag() with the text dropped: the code, and *off (SIZE_MAX before the call). */
static int diag_rc(const uint8_t *buf, size_t len, size_t *off) {
  char *text = NULL;
  *off = SIZE_MAX;
  int rc = diag(buf, len, &text, off);
  free(text);
  return rc;
}

/* The first n bytes of b in a buffer of exactly `room` bytes (at least 1), so ASan catches any
 * read past it; the caller frees. */
static uint8_t *copy_exact(const uint8_t *b, size_t n, size_t room) {
  uint8_t *p = malloc(room ? room : 1);
  assert_non_null(p);
  memcpy(p, b, n);
  return p;
}

static void rfc8949_appendix_a_prints_as_the_rfc(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(good_rows) / sizeof(good_rows[0]); i++) {
    size_t len = 0;
    uint8_t *b = from_hex(good_rows[i].hex, &len);
    char *text = NULL;
    size_t off = 12345;
    int rc = diag(b, len, &text, &off);
    if (rc != 0 || strcmp(text, good_rows[i].diag) != 0) {
      fail_msg("row %zu (%s): rc %d (%s) off %zu, got '%s', want '%s'", i, good_rows[i].hex, rc,
               em_diag_strerror(rc), off, text, good_rows[i].diag);
    }
    free(text);
    free(b);
  }
}

static void every_prefix_is_truncated_not_read_past(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(good_rows) / sizeof(good_rows[0]); i++) {
    size_t len = 0;
    uint8_t *b = from_hex(good_rows[i].hex, &len);
    for (size_t cut = 0; cut < len; cut++) {
      uint8_t *p = copy_exact(b, cut, cut);
      size_t off;
      int rc = diag_rc(p, cut, &off);
      if (rc != EM_DIAG_ETRUNCATED || off > cut) {
        fail_msg("row %zu (%s) cut at %zu: rc %d off %zu", i, good_rows[i].hex, cut, rc, off);
      }
      free(p);
    }
    free(b);
  }
}

static void a_byte_after_the_item_is_trailing(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(good_rows) / sizeof(good_rows[0]); i++) {
    size_t len = 0;
    uint8_t *b = from_hex(good_rows[i].hex, &len);
    uint8_t *p = copy_exact(b, len, len + 1);
    p[len] = 0x00;
    size_t off;
    assert_int_equal(diag_rc(p, len + 1, &off), EM_DIAG_ETRAILING);
    assert_int_equal(off, len);
    free(p);
    free(b);
  }
}

static void malformed_input_gives_code_and_offset(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(bad_rows) / sizeof(bad_rows[0]); i++) {
    size_t len = 0;
    uint8_t *b = from_hex(bad_rows[i].hex, &len);
    size_t off;
    int rc = diag_rc(b, len, &off);
    if (rc != bad_rows[i].rc || off != bad_rows[i].off) {
      fail_msg("%s (%s): rc %d (%s) off %zu, want rc %d off %zu", bad_rows[i].name, bad_rows[i].hex,
               rc, em_diag_strerror(rc), off, bad_rows[i].rc, bad_rows[i].off);
    }
    free(b);
  }
}

/* n nested one-element arrays around an empty array, or n tags around 0. */
static uint8_t *nest(size_t n, uint8_t opener, uint8_t inner, size_t *len) {
  uint8_t *b = malloc(n + 1);
  assert_non_null(b);
  memset(b, opener, n);
  b[n] = inner;
  *len = n + 1;
  return b;
}

static void nesting_is_bounded_by_max_depth(void **state) {
  (void)state;
  size_t len = 0;
  char *text = NULL;
  size_t off = 0;

  /* EM_DIAG_MAX_DEPTH arrays (the innermost empty one included) are fine. */
  uint8_t *b = nest(EM_DIAG_MAX_DEPTH - 1, 0x81, 0x80, &len);
  assert_int_equal(diag(b, len, &text, &off), 0);
  assert_int_equal(strlen(text), 2 * EM_DIAG_MAX_DEPTH);
  assert_int_equal(text[EM_DIAG_MAX_DEPTH - 1], '[');
  assert_int_equal(text[EM_DIAG_MAX_DEPTH], ']');
  free(text);
  free(b);

  /* One more is refused at the byte that opens it. */
  b = nest(EM_DIAG_MAX_DEPTH, 0x81, 0x80, &len);
  assert_int_equal(diag(b, len, &text, &off), EM_DIAG_EDEPTH);
  assert_int_equal(off, EM_DIAG_MAX_DEPTH);
  free(text);
  free(b);

  /* Tags count as a level too, so a chain of them cannot grow anything. */
  b = nest(EM_DIAG_MAX_DEPTH + 1, 0xc6, 0x00, &len);
  assert_int_equal(diag(b, len, &text, &off), EM_DIAG_EDEPTH);
  assert_int_equal(off, EM_DIAG_MAX_DEPTH);
  free(text);
  free(b);

  /* A hostile depth far past the bound is refused just the same, without recursion. */
  b = nest(1000000, 0x9f, 0xff, &len);
  assert_int_equal(diag(b, len, &text, &off), EM_DIAG_EDEPTH);
  assert_int_equal(off, EM_DIAG_MAX_DEPTH);
  free(text);
  free(b);
}

static void long_flat_input_is_linear(void **state) {
  (void)state;
  /* An indefinite array of 100000 zeros: one pass, the right count of separators. */
  size_t n = 100000;
  uint8_t *b = malloc(n + 2);
  assert_non_null(b);
  b[0] = 0x9f;
  memset(b + 1, 0x00, n);
  b[n + 1] = 0xff;
  char *text = NULL;
  size_t off = 0;
  assert_int_equal(diag(b, n + 2, &text, &off), 0);
  assert_int_equal(strlen(text), strlen("[_ ]") + n + 2 * (n - 1));
  free(text);
  free(b);
}

static void bad_arguments_are_einval(void **state) {
  (void)state;
  size_t off = 7;
  assert_int_equal(em_diag_print(NULL, 1, stdout, &off), -EINVAL);
  const uint8_t zero = 0;
  assert_int_equal(em_diag_print(&zero, 1, NULL, NULL), -EINVAL);
}

static void strerror_names_every_code(void **state) {
  (void)state;
  const int codes[] = {EM_DIAG_EMALFORMED, EM_DIAG_ETRUNCATED, EM_DIAG_EDEPTH, EM_DIAG_ETRAILING};
  for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
    const char *s = em_diag_strerror(codes[i]);
    assert_non_null(s);
    assert_string_not_equal(s, "unknown error");
    for (size_t j = 0; j < i; j++) {
      assert_string_not_equal(s, em_diag_strerror(codes[j]));
    }
  }
  assert_string_equal(em_diag_strerror(-ENOMEM), strerror(ENOMEM));
  assert_string_equal(em_diag_strerror(-999999), "unknown error");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(rfc8949_appendix_a_prints_as_the_rfc),
      cmocka_unit_test(every_prefix_is_truncated_not_read_past),
      cmocka_unit_test(a_byte_after_the_item_is_trailing),
      cmocka_unit_test(malformed_input_gives_code_and_offset),
      cmocka_unit_test(nesting_is_bounded_by_max_depth),
      cmocka_unit_test(long_flat_input_is_linear),
      cmocka_unit_test(bad_arguments_are_einval),
      cmocka_unit_test(strerror_names_every_code),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
