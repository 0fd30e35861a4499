/*
 * test_pb.c - host/lib/pb.c, the protobuf writer: varint and zigzag edge values, each field
 * encoding against bytes worked out by hand from the protocol buffers encoding rules (the
 * 150 -> 08 96 01 and "testing" examples are the specification's own), nested and delimited
 * submessages with one- and multi-byte lengths, the size cap, misuse, and allocation failure.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pb.h>
#include <string.h>

#include "failing_alloc.h"

/* Asserts that pb holds exactly want[0..n). */
static void assert_bytes(const em_pb_t *pb, const uint8_t *want, size_t n) {
  size_t len = 0;
  const uint8_t *got = em_pb_data(pb, &len);
  assert_int_equal(len, n);
  if (n > 0) {
    assert_memory_equal(got, want, n);
  }
}

static void varint_edge_values(void **state) {
  (void)state;
  static const struct {
    uint64_t v;
    size_t n;
    uint8_t bytes[10];
  } rows[] = {
      {0, 1, {0x00}},
      {1, 1, {0x01}},
      {127, 1, {0x7f}},
      {128, 2, {0x80, 0x01}},
      {150, 2, {0x96, 0x01}},
      {300, 2, {0xac, 0x02}},
      {16383, 2, {0xff, 0x7f}},
      {16384, 3, {0x80, 0x80, 0x01}},
      {UINT32_MAX, 5, {0xff, 0xff, 0xff, 0xff, 0x0f}},
      {(uint64_t)1 << 35, 6, {0x80, 0x80, 0x80, 0x80, 0x80, 0x01}},
      {(uint64_t)1 << 63, 10, {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}},
      {UINT64_MAX, 10, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
  };
  for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
    uint8_t out[EM_PB_VARINT_MAX];
    memset(out, 0xAA, sizeof(out));
    size_t n = em_pb_varint_encode(out, rows[k].v);
    assert_int_equal(n, rows[k].n);
    assert_memory_equal(out, rows[k].bytes, n);
  }
}

static void zigzag_edge_values(void **state) {
  (void)state;
  static const struct {
    int64_t v;
    uint64_t z;
  } rows[] = {
      {0, 0},
      {-1, 1},
      {1, 2},
      {-2, 3},
      {2147483647, 4294967294u},
      {-2147483647 - 1, 4294967295u},
      {INT64_MAX, UINT64_MAX - 1},
      {INT64_MIN, UINT64_MAX},
  };
  for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
    assert_int_equal(em_pb_zigzag(rows[k].v), rows[k].z);
  }
}

static void fields_encode_as_specified(void **state) {
  (void)state;
  em_pb_t pb;
  assert_int_equal(em_pb_init(&pb, 1024), 0);
  assert_null(em_pb_data(&pb, NULL));

  assert_int_equal(em_pb_uint(&pb, 1, 150), 0);
  assert_bytes(&pb, (const uint8_t[]){0x08, 0x96, 0x01}, 3);

  em_pb_reset(&pb);
  assert_int_equal(em_pb_string(&pb, 2, "testing"), 0);
  assert_bytes(&pb, (const uint8_t[]){0x12, 0x07, 't', 'e', 's', 't', 'i', 'n', 'g'}, 9);

  em_pb_reset(&pb);
  assert_int_equal(em_pb_double(&pb, 1, 1.0), 0);  /* 0x3FF0000000000000, little-endian */
  assert_int_equal(em_pb_double(&pb, 6, -0.5), 0); /* 0xBFE0000000000000 */
  assert_bytes(
      &pb,
      (const uint8_t[]){0x09, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0x31, 0, 0, 0, 0, 0, 0, 0xe0, 0xbf},
      18);

  em_pb_reset(&pb);
  assert_int_equal(em_pb_sint(&pb, 5, -1), 0);  /* zigzag 1 */
  assert_int_equal(em_pb_sint(&pb, 13, 64), 0); /* zigzag 128, tag 13<<3 = 0x68 */
  assert_int_equal(em_pb_int(&pb, 16, -1), 0);  /* tag 128: two bytes; -1: ten */
  assert_bytes(&pb,
               (const uint8_t[]){0x28, 0x01, 0x68, 0x80, 0x01, 0x80, 0x01, 0xff, 0xff, 0xff, 0xff,
                                 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
               17);

  em_pb_reset(&pb);
  assert_int_equal(em_pb_string(&pb, 1, NULL), 0); /* "" */
  assert_int_equal(em_pb_bytes(&pb, EM_PB_MAX_FIELD, "", 0), 0);
  assert_bytes(&pb, (const uint8_t[]){0x0a, 0x00, 0xfa, 0xff, 0xff, 0xff, 0x0f, 0x00}, 8);
  em_pb_deinit(&pb);
}

static void submessages_nest_and_delimit(void **state) {
  (void)state;
  em_pb_t pb;
  assert_int_equal(em_pb_init(&pb, 4096), 0);
  /* The specification's Test3 { c: Test1 { a: 150 } } as field 3, inside a delimited frame. */
  assert_int_equal(em_pb_begin(&pb, 0), 0);
  assert_int_equal(em_pb_begin(&pb, 3), 0);
  assert_int_equal(em_pb_uint(&pb, 1, 150), 0);
  assert_int_equal(em_pb_end(&pb), 0);
  assert_int_equal(em_pb_end(&pb), 0);
  assert_bytes(&pb, (const uint8_t[]){0x05, 0x1a, 0x03, 0x08, 0x96, 0x01}, 6);

  /* An empty submessage is its tag and a zero length. */
  em_pb_reset(&pb);
  assert_int_equal(em_pb_begin(&pb, 4), 0);
  assert_int_equal(em_pb_end(&pb), 0);
  assert_bytes(&pb, (const uint8_t[]){0x22, 0x00}, 2);

  /* Bodies of 200 bytes inside 203: two-byte lengths at two levels, the body moved intact. */
  em_pb_reset(&pb);
  uint8_t blob[197];
  for (size_t k = 0; k < sizeof(blob); k++) {
    blob[k] = (uint8_t)(k * 7 + 1);
  }
  assert_int_equal(em_pb_begin(&pb, 0), 0);
  assert_int_equal(em_pb_begin(&pb, 2), 0);
  assert_int_equal(em_pb_bytes(&pb, 1, blob, sizeof(blob)), 0); /* 1 + 2 + 197 = 200 */
  assert_int_equal(em_pb_end(&pb), 0);                          /* 1 + 2 + 200 = 203 */
  assert_int_equal(em_pb_end(&pb), 0);
  uint8_t want[2 + 203];
  size_t n = 0;
  want[n++] = 0xcb, want[n++] = 0x01;                   /* 203 */
  want[n++] = 0x12, want[n++] = 0xc8, want[n++] = 0x01; /* field 2, 200 */
  want[n++] = 0x0a, want[n++] = 0xc5, want[n++] = 0x01; /* field 1, 197 */
  memcpy(want + n, blob, sizeof(blob));
  n += sizeof(blob);
  assert_bytes(&pb, want, n);

  /* Two frames back to back: a delimited stream. */
  em_pb_reset(&pb);
  for (int k = 0; k < 2; k++) {
    assert_int_equal(em_pb_begin(&pb, 0), 0);
    assert_int_equal(em_pb_uint(&pb, 3, (uint64_t)k), 0);
    assert_int_equal(em_pb_end(&pb), 0);
  }
  assert_bytes(&pb, (const uint8_t[]){0x02, 0x18, 0x00, 0x02, 0x18, 0x01}, 6);
  em_pb_deinit(&pb);
}

static void cap_is_enforced_and_errors_stick(void **state) {
  (void)state;
  em_pb_t pb;
  assert_int_equal(em_pb_init(&pb, 10), 0);
  assert_int_equal(em_pb_uint(&pb, 1, 150), 0);                 /* 3 bytes */
  assert_int_equal(em_pb_string(&pb, 2, "abcdef"), -EOVERFLOW); /* 8 more: 11 > 10 */
  assert_bytes(&pb, (const uint8_t[]){0x08, 0x96, 0x01}, 3);    /* kept, nothing partial */
  assert_int_equal(em_pb_uint(&pb, 1, 1), -EOVERFLOW);          /* sticky */
  assert_int_equal(em_pb_begin(&pb, 1), -EOVERFLOW);
  assert_int_equal(em_pb_error(&pb), -EOVERFLOW);
  assert_int_equal(pb.len_bytes, 3);

  em_pb_reset(&pb); /* clears the error, keeps the cap */
  assert_int_equal(em_pb_error(&pb), 0);
  assert_int_equal(em_pb_bytes(&pb, 1, "12345678", 8), 0); /* exactly 10 */
  assert_int_equal(pb.len_bytes, 10);
  assert_true(pb.cap_bytes <= 10);

  /* The length varint of a closing submessage counts against the cap too. */
  em_pb_reset(&pb);
  assert_int_equal(em_pb_begin(&pb, 1), 0);
  assert_int_equal(em_pb_bytes(&pb, 2, "1234567", 7), 0); /* 1 + 9 = 10 */
  assert_int_equal(em_pb_end(&pb), -EOVERFLOW);
  em_pb_deinit(&pb);

  assert_int_equal(em_pb_init(&pb, 0), -EINVAL);
  assert_int_equal(em_pb_init(NULL, 10), -EINVAL);
  em_pb_deinit(NULL);
  em_pb_reset(NULL);
}

static void misuse_is_refused(void **state) {
  (void)state;
  em_pb_t pb;
  assert_int_equal(em_pb_init(&pb, 1024), 0);
  assert_int_equal(em_pb_uint(&pb, 0, 1), -EINVAL);
  em_pb_reset(&pb);
  assert_int_equal(em_pb_uint(&pb, EM_PB_MAX_FIELD + 1, 1), -EINVAL);
  em_pb_reset(&pb);
  assert_int_equal(em_pb_bytes(&pb, 1, NULL, 3), -EINVAL);
  em_pb_reset(&pb);
  assert_int_equal(em_pb_end(&pb), -EINVAL);
  em_pb_reset(&pb);
  assert_int_equal(em_pb_begin(&pb, EM_PB_MAX_FIELD + 1), -EINVAL);
  em_pb_reset(&pb);
  for (int k = 0; k < EM_PB_MAX_DEPTH; k++) {
    assert_int_equal(em_pb_begin(&pb, 1), 0);
  }
  assert_int_equal(em_pb_begin(&pb, 1), -EOVERFLOW);
  assert_int_equal(em_pb_uint(NULL, 1, 1), -EINVAL);
  assert_int_equal(em_pb_double(NULL, 1, 1), -EINVAL);
  assert_int_equal(em_pb_bytes(NULL, 1, "", 0), -EINVAL);
  assert_int_equal(em_pb_begin(NULL, 1), -EINVAL);
  assert_int_equal(em_pb_end(NULL), -EINVAL);
  assert_int_equal(em_pb_error(NULL), -EINVAL);
  em_pb_deinit(&pb);
}

static void allocation_failure_is_enomem(void **state) {
  (void)state;
  em_pb_t pb;
  assert_int_equal(em_pb_init(&pb, 1 << 20), 0);
  em_failing_alloc_arm(1, true);
  assert_int_equal(em_pb_uint(&pb, 1, 1), -ENOMEM);
  em_failing_alloc_disarm();
  assert_null(em_pb_data(&pb, NULL));
  em_pb_reset(&pb);

  /* Growth past the first allocation fails cleanly, what was written stays. */
  uint8_t blob[300] = {0};
  assert_int_equal(em_pb_bytes(&pb, 1, blob, 100), 0);
  em_failing_alloc_arm(1, true);
  assert_int_equal(em_pb_bytes(&pb, 1, blob, sizeof(blob)), -ENOMEM);
  assert_int_equal(em_failing_alloc_disarm(), 1);
  assert_int_equal(pb.len_bytes, 102);
  em_pb_deinit(&pb);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(varint_edge_values),
      cmocka_unit_test(zigzag_edge_values),
      cmocka_unit_test(fields_encode_as_specified),
      cmocka_unit_test(submessages_nest_and_delimit),
      cmocka_unit_test(cap_is_enforced_and_errors_stick),
      cmocka_unit_test(misuse_is_refused),
      cmocka_unit_test(allocation_failure_is_enomem),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
