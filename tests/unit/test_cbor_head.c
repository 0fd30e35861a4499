/*
 * test_cbor_head.c - proto's CBOR item heads (proto/src/cbor_head.c) against RFC 8949, and
 * what the pull parser (cbor_read.c) makes of each head form inside a message.
 *
 * The expectations come from the RFC's rules, written out here as data: section 3's argument
 * widths (additional information 24..27: 1, 2, 4, 8 bytes; 28..30 reserved; 31 indefinite for
 * major types 2..5 and break for 7, nothing for 0, 1 and 6), section 3.3's one-byte simple
 * values (below 32 not well-formed), appendix A's examples, appendix D's half-precision
 * decoder, and section 4.2.1's shortest forms. Every input is copied into a buffer of its
 * exact size, so AddressSanitizer sees any read past it.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cbor_head.h"
#include "edgemon/proto.h"

/* RFC 8949 section 3: bytes of the argument after the initial byte, for info 0..27. */
static size_t rfc_arg_bytes(unsigned info) {
  static const size_t widths[] = {1, 2, 4, 8}; /* info 24, 25, 26, 27 */
  return info < 24 ? 0 : widths[info - 24];
}

/* RFC 8949 section 3: additional information 31 has a meaning for major types 2..5 and 7. */
static bool rfc_indefinite_allowed(unsigned major) {
  return (major >= 2 && major <= 5) || major == 7;
}

/* em__head_read on a private copy of in[0..len) (NULL when len is 0). */
static int read_copy(const uint8_t *in, size_t len, em__head_t *h) {
  uint8_t *copy = len ? malloc(len) : NULL;
  if (len) {
    assert_non_null(copy);
    memcpy(copy, in, len);
  }
  int rc = em__head_read(copy, len, h);
  free(copy);
  return rc;
}

/*
 * Every initial byte, with an argument of bytes 0x81.. after it: the head's major type,
 * additional information, length and argument (big-endian) as section 3 says, the reserved
 * and forbidden forms refused, and every cut of a well-formed head reported as truncated.
 */
static void every_initial_byte_reads_as_rfc8949_section_3_says(void **state) {
  (void)state;
  static const uint8_t tail[8] = {0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88};
  for (unsigned b = 0; b < 256; b++) {
    unsigned major = b >> 5, info = b & 31u;
    uint8_t in[9] = {(uint8_t)b};
    memcpy(in + 1, tail, sizeof(tail));
    em__head_t h = {0};
    int rc = read_copy(in, sizeof(in), &h);
    if (info >= 28 && info <= 30) {
      assert_int_equal(rc, EM_PROTO_EMALFORMED);
      assert_int_equal(read_copy(in, 1, &h), EM_PROTO_EMALFORMED); /* Refused before any cut. */
      continue;
    }
    if (info == 31 && !rfc_indefinite_allowed(major)) {
      assert_int_equal(rc, EM_PROTO_EMALFORMED);
      continue;
    }
    size_t n = info == 31 ? 0 : rfc_arg_bytes(info);
    uint64_t want = info < 24 ? info : 0;
    for (size_t i = 0; i < n; i++) {
      want = want * 256u + tail[i];
    }
    if (rc != 0 || h.major != major || h.info != info || h.len != 1 + n || h.arg != want) {
      fail_msg("0x%02x: rc %d major %u info %u len %u arg %llu", b, rc, h.major, h.info, h.len,
               (unsigned long long)h.arg);
    }
    for (size_t cut = 0; cut < 1 + n; cut++) {
      assert_int_equal(read_copy(in, cut, &h), EM_PROTO_ETRUNCATED);
    }
  }
}

/* Section 3.3: 0xf8 carries simple values 32..255 only; 0..31 in that form is malformed. */
static void one_byte_simple_values_below_32_are_malformed(void **state) {
  (void)state;
  for (unsigned v = 0; v < 256; v++) {
    uint8_t in[2] = {0xf8, (uint8_t)v};
    em__head_t h = {0};
    int rc = read_copy(in, sizeof(in), &h);
    if (v < 32) {
      assert_int_equal(rc, EM_PROTO_EMALFORMED);
    } else {
      assert_int_equal(rc, 0);
      assert_int_equal(h.major, 7);
      assert_int_equal(h.info, 24);
      assert_int_equal(h.len, 2);
      assert_int_equal(h.arg, v);
    }
  }
}

typedef struct {
  uint8_t bytes[9];
  size_t len;
  unsigned major;
  uint64_t arg; /* For floats: unused; `f` is the value. */
  double f;
} example_t;

/* RFC 8949 appendix A: encodings and what they stand for. */
static const example_t examples[] = {
    {{0x00}, 1, 0, 0, 0},
    {{0x17}, 1, 0, 23, 0},
    {{0x18, 0x18}, 2, 0, 24, 0},
    {{0x19, 0x03, 0xe8}, 3, 0, 1000, 0},
    {{0x1a, 0x00, 0x0f, 0x42, 0x40}, 5, 0, 1000000, 0},
    {{0x1b, 0x00, 0x00, 0x00, 0xe8, 0xd4, 0xa5, 0x10, 0x00}, 9, 0, UINT64_C(1000000000000), 0},
    {{0x1b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 9, 0, UINT64_MAX, 0},
    {{0x20}, 1, 1, 0, 0},               /* -1 */
    {{0x38, 0x63}, 2, 1, 99, 0},        /* -100 */
    {{0x39, 0x03, 0xe7}, 3, 1, 999, 0}, /* -1000 */
    {{0x40}, 1, 2, 0, 0},               /* h'' */
    {{0x44, 0x01}, 1, 2, 4, 0},         /* h'01020304': the head announces 4 bytes */
    {{0x60}, 1, 3, 0, 0},               /* "" */
    {{0x64, 0x49}, 1, 3, 4, 0},         /* "IETF" */
    {{0x80}, 1, 4, 0, 0},               /* [] */
    {{0x98, 0x19}, 2, 4, 25, 0},        /* [1, 2, ..., 25] */
    {{0xa0}, 1, 5, 0, 0},               /* {} */
    {{0xa2, 0x01}, 1, 5, 2, 0},         /* {1: 2, 3: 4} */
    {{0xc0, 0x74}, 1, 6, 0, 0},         /* 0("2013-03-21T20:04:00Z") */
    {{0xc1, 0x1a}, 1, 6, 1, 0},         /* 1(1363896240) */
    {{0xd7, 0x44}, 1, 6, 23, 0},        /* 23(h'01020304') */
    {{0xd8, 0x18}, 2, 6, 24, 0},        /* 24(h'6449455446') */
    {{0xd8, 0x20}, 2, 6, 32, 0},        /* 32("http://www.example.com") */
    {{0xf4}, 1, 7, 20, 0},              /* false */
    {{0xf5}, 1, 7, 21, 0},              /* true */
    {{0xf6}, 1, 7, 22, 0},              /* null */
    {{0xf7}, 1, 7, 23, 0},              /* undefined */
    {{0xf0}, 1, 7, 16, 0},              /* simple(16) */
    {{0xf8, 0xff}, 2, 7, 255, 0},       /* simple(255) */
    {{0x5f}, 1, 2, 0, 0},               /* (_ h'0102', h'030405') */
    {{0x7f}, 1, 3, 0, 0},               /* (_ "strea", "ming") */
    {{0x9f}, 1, 4, 0, 0},               /* [_ ] */
    {{0xbf}, 1, 5, 0, 0},               /* {_ "a": 1, "b": [_ 2, 3]} */
    {{0xff}, 1, 7, 0, 0},               /* break */
};

/* Appendix A's floats, each with the value it stands for. */
static const example_t float_examples[] = {
    {{0xf9, 0x00, 0x00}, 3, 7, 0, 0.0},
    {{0xf9, 0x80, 0x00}, 3, 7, 0, -0.0},
    {{0xf9, 0x3c, 0x00}, 3, 7, 0, 1.0},
    {{0xfb, 0x3f, 0xf1, 0x99, 0x99, 0x99, 0x99, 0x99, 0x9a}, 9, 7, 0, 1.1},
    {{0xf9, 0x3e, 0x00}, 3, 7, 0, 1.5},
    {{0xf9, 0x7b, 0xff}, 3, 7, 0, 65504.0},
    {{0xfa, 0x47, 0xc3, 0x50, 0x00}, 5, 7, 0, 100000.0},
    {{0xfa, 0x7f, 0x7f, 0xff, 0xff}, 5, 7, 0, 3.4028234663852886e+38},
    {{0xfb, 0x7e, 0x37, 0xe4, 0x3c, 0x88, 0x00, 0x75, 0x9c}, 9, 7, 0, 1.0e+300},
    {{0xf9, 0x00, 0x01}, 3, 7, 0, 5.960464477539063e-8},
    {{0xf9, 0x04, 0x00}, 3, 7, 0, 0.00006103515625},
    {{0xf9, 0xc4, 0x00}, 3, 7, 0, -4.0},
    {{0xfb, 0xc0, 0x10, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66}, 9, 7, 0, -4.1},
    {{0xf9, 0x7c, 0x00}, 3, 7, 0, INFINITY},
    {{0xf9, 0xfc, 0x00}, 3, 7, 0, -INFINITY},
    {{0xfa, 0x7f, 0x80, 0x00, 0x00}, 5, 7, 0, INFINITY},
    {{0xfa, 0xff, 0x80, 0x00, 0x00}, 5, 7, 0, -INFINITY},
    {{0xfb, 0x7f, 0xf0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, 9, 7, 0, INFINITY},
    {{0xfb, 0xff, 0xf0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, 9, 7, 0, -INFINITY},
};

static void rfc8949_appendix_a_examples_read_as_listed(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(examples) / sizeof(examples[0]); i++) {
    const example_t *e = &examples[i];
    em__head_t h = {0};
    assert_int_equal(read_copy(e->bytes, e->len, &h), 0);
    if (h.major != e->major || h.arg != e->arg || h.len != e->len) {
      fail_msg("example %zu (0x%02x): major %u arg %llu len %u", i, e->bytes[0], h.major,
               (unsigned long long)h.arg, h.len);
    }
  }
  for (size_t i = 0; i < sizeof(float_examples) / sizeof(float_examples[0]); i++) {
    const example_t *e = &float_examples[i];
    em__head_t h = {0};
    assert_int_equal(read_copy(e->bytes, e->len, &h), 0);
    double got = em__head_float(&h);
    if (h.major != 7 || h.len != e->len || memcmp(&got, &e->f, sizeof(got)) != 0) {
      fail_msg("float example %zu: got %a, want %a", i, got, e->f);
    }
  }
  /* NaN in each width: a NaN, whatever its payload. */
  static const example_t nans[] = {
      {{0xf9, 0x7e, 0x00}, 3, 7, 0, 0},
      {{0xfa, 0x7f, 0xc0, 0x00, 0x00}, 5, 7, 0, 0},
      {{0xfb, 0x7f, 0xf8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, 9, 7, 0, 0},
  };
  for (size_t i = 0; i < sizeof(nans) / sizeof(nans[0]); i++) {
    em__head_t h = {0};
    assert_int_equal(read_copy(nans[i].bytes, nans[i].len, &h), 0);
    assert_true(isnan(em__head_float(&h)));
  }
}

/* RFC 8949 appendix D: the reference decoder of a half-precision float. */
static double rfc_decode_half(const uint8_t *halfp) {
  unsigned half = ((unsigned)halfp[0] << 8) + halfp[1];
  unsigned exp = (half >> 10) & 0x1f;
  unsigned mant = half & 0x3ff;
  double val;
  if (exp == 0) {
    val = ldexp(mant, -24);
  } else if (exp != 31) {
    val = ldexp(mant + 1024, (int)exp - 25);
  } else {
    val = mant == 0 ? INFINITY : NAN;
  }
  return half & 0x8000 ? -val : val;
}

static void every_half_float_reads_as_rfc8949_appendix_d(void **state) {
  (void)state;
  for (unsigned v = 0; v < 65536; v++) {
    uint8_t in[3] = {0xf9, (uint8_t)(v >> 8), (uint8_t)v};
    em__head_t h = {0};
    assert_int_equal(read_copy(in, sizeof(in), &h), 0);
    double got = em__head_float(&h), want = rfc_decode_half(in + 1);
    bool same = isnan(want) ? isnan(got) && signbit(got) == signbit(want)
                            : memcmp(&got, &want, sizeof(got)) == 0;
    if (!same) {
      fail_msg("half 0x%04x: got %a, want %a", v, got, want);
    }
  }
}

/*
 * Section 4.2.1's shortest form at each width's edges, for major types 0..6 (7's arguments
 * above 23 are floats and simple values, which proto writes only as fixed-width floats):
 * the size the rule gives, and the head reads back as written.
 */
static void heads_are_written_in_the_shortest_form_and_read_back(void **state) {
  (void)state;
  static const struct {
    uint64_t arg;
    size_t len;
  } edges[] = {{0, 1},
               {23, 1},
               {24, 2},
               {UINT8_MAX, 2},
               {UINT8_MAX + 1u, 3},
               {UINT16_MAX, 3},
               {UINT16_MAX + 1u, 5},
               {UINT32_MAX, 5},
               {UINT64_C(1) << 32, 9},
               {UINT64_MAX, 9}};
  for (unsigned major = 0; major < 7; major++) {
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) {
      uint8_t out[EM_CBOR_HEAD_MAX];
      size_t n = em__head_write(out, major, edges[i].arg);
      assert_int_equal(n, edges[i].len);
      em__head_t h = {0};
      assert_int_equal(read_copy(out, n, &h), 0);
      assert_int_equal(h.major, major);
      assert_int_equal(h.arg, edges[i].arg);
      assert_int_equal(h.len, n);
    }
  }
  /* Fixed widths: a binary32 and a binary64 of appendix A, bit for bit. */
  uint8_t out[EM_CBOR_HEAD_MAX];
  assert_int_equal(em__head_write_fixed(out, 7, 4, 0x47c35000u), 5);
  assert_memory_equal(out, float_examples[6].bytes, 5);
  assert_int_equal(em__head_write_fixed(out, 7, 8, UINT64_C(0x3ff199999999999a)), 9);
  assert_memory_equal(out, float_examples[3].bytes, 9);
}

/* --- the pull parser: each head form as the value of an unknown key -------------------- */

/* status {0: 1, 1: 3, 2: 0, 3: 7, 4: true, 40: <value>}; the value starts at offset 13. */
static const uint8_t status_prefix[] = {0xa6, 0x00, 0x01, 0x01, 0x03, 0x02, 0x00,
                                        0x03, 0x07, 0x04, 0xf5, 0x18, 0x28};

/* Decodes status_prefix + value[0..n) and returns the code; *off is the error offset. */
static int decode_with_value(const uint8_t *value, size_t n, size_t *off) {
  size_t len = sizeof(status_prefix) + n;
  uint8_t *in = malloc(len);
  assert_non_null(in);
  memcpy(in, status_prefix, sizeof(status_prefix));
  memcpy(in + sizeof(status_prefix), value, n);
  static uint8_t scratch[EM_PROTO_SCRATCH_MAX];
  em_msg_t m;
  *off = SIZE_MAX;
  int rc = em_proto_decode(in, len, &m, scratch, sizeof(scratch), off);
  free(in);
  return rc;
}

/*
 * Every initial byte as an unknown key's value, with a complete argument and whatever an item
 * of that head needs after it (string bytes, array and map elements, a tagged item): the
 * well-formed ones are skipped, whatever their tag number or simple value; the reserved
 * forms, integers and tags with info 31, and the break are malformed; indefinite lengths are
 * refused as such; each error points at the value.
 */
static void every_head_form_is_skipped_or_refused_as_an_unknown_value(void **state) {
  (void)state;
  for (unsigned b = 0; b < 256; b++) {
    unsigned major = b >> 5, info = b & 31u;
    uint8_t value[64] = {(uint8_t)b};
    size_t n = 1, arg_bytes = info < 28 ? rfc_arg_bytes(info) : 0;
    uint64_t arg = info < 24 ? info : 0;
    for (size_t i = 0; i < arg_bytes; i++) {
      value[n++] = 0x00; /* Argument 0 (or simple value 0 for 0xf8, which is malformed). */
    }
    int want = 0;
    if (info >= 28 && info <= 30) {
      want = EM_PROTO_EMALFORMED;
    } else if (info == 31) {
      want = major >= 2 && major <= 5 ? EM_PROTO_EINDEFINITE : EM_PROTO_EMALFORMED;
    } else if (major == 7 && info == 24) {
      want = EM_PROTO_EMALFORMED; /* 0xf8 0x00 */
    } else if (major == 2 || major == 3) {
      memset(value + n, 'a', (size_t)arg);
      n += (size_t)arg;
    } else if (major == 4 || major == 5) {
      memset(value + n, 0x00, (size_t)(major == 5 ? 2 * arg : arg));
      n += (size_t)(major == 5 ? 2 * arg : arg);
    } else if (major == 6) {
      value[n++] = 0x00; /* The tagged item. */
    }
    size_t off;
    int rc = decode_with_value(value, n, &off);
    if (rc != want || (rc != 0 && off != sizeof(status_prefix))) {
      fail_msg("0x%02x: want %d (%s), got %d (%s) at %zu", b, want, em_proto_strerror(want), rc,
               em_proto_strerror(rc), off);
    }
    if (rc == 0 && arg_bytes > 0) {
      assert_int_equal(decode_with_value(value, 1 + arg_bytes - 1, &off), EM_PROTO_ETRUNCATED);
      assert_int_equal(off, sizeof(status_prefix));
    }
  }
  /* 0xf8 with every simple value from 32 up is skipped too. */
  for (unsigned v = 32; v < 256; v++) {
    uint8_t value[2] = {0xf8, (uint8_t)v};
    size_t off;
    assert_int_equal(decode_with_value(value, sizeof(value), &off), 0);
  }
}

/* Where the schema wants a type, a tag or an unassigned simple value is the wrong type. */
static void tags_and_simple_values_where_a_type_is_wanted_are_the_wrong_type(void **state) {
  (void)state;
  static const struct {
    uint8_t bytes[3];
    size_t len;
  } online[] = {
      {{0xc6, 0xf5}, 2},       /* 6(true) */
      {{0xd4, 0xf5}, 2},       /* 20(true) */
      {{0xf0}, 1},             /* simple(16) */
      {{0xf8, 0xff}, 2},       /* simple(255) */
      {{0xf7}, 1},             /* undefined */
      {{0xf9, 0x3c, 0x00}, 3}, /* 1.0 */
  };
  /* status {0: 1, 1: 3, 2: 0, 3: 7, 4: <online>} */
  static const uint8_t prefix[] = {0xa5, 0x00, 0x01, 0x01, 0x03, 0x02, 0x00, 0x03, 0x07, 0x04};
  static uint8_t scratch[EM_PROTO_SCRATCH_MAX];
  for (size_t i = 0; i < sizeof(online) / sizeof(online[0]); i++) {
    uint8_t in[sizeof(prefix) + 3];
    memcpy(in, prefix, sizeof(prefix));
    memcpy(in + sizeof(prefix), online[i].bytes, online[i].len);
    em_msg_t m;
    size_t off = SIZE_MAX;
    int rc =
        em_proto_decode(in, sizeof(prefix) + online[i].len, &m, scratch, sizeof(scratch), &off);
    assert_int_equal(rc, EM_PROTO_ETYPE);
    assert_true(off >= sizeof(prefix));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_initial_byte_reads_as_rfc8949_section_3_says),
      cmocka_unit_test(one_byte_simple_values_below_32_are_malformed),
      cmocka_unit_test(rfc8949_appendix_a_examples_read_as_listed),
      cmocka_unit_test(every_half_float_reads_as_rfc8949_appendix_d),
      cmocka_unit_test(heads_are_written_in_the_shortest_form_and_read_back),
      cmocka_unit_test(every_head_form_is_skipped_or_refused_as_an_unknown_value),
      cmocka_unit_test(tags_and_simple_values_where_a_type_is_wanted_are_the_wrong_type),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
