/*
 * test_agg_buckets.c - the store's bucket blob codec (host/aggregator/store/buckets.c): a window's
 * buckets survive encode and decode, negative indexes included; the bytes are the layout
 * SCHEMA.md documents; every malformed blob or figure the decoder must refuse is refused with
 * -EINVAL; a decoded blob merges with em_histo like the window it came from.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "buckets.h"

#include <errno.h>
#include <histo.h>
#include <string.h>

static const em_bucket_t some[] = {
    {.index = INT32_MIN, .count = 1}, {.index = -3, .count = 2}, {.index = 40, .count = 5}};

static em_stage_t window_of(const em_bucket_t *b, size_t n, uint64_t zeros) {
  uint64_t count = zeros;
  for (size_t i = 0; i < n; i++) {
    count += b[i].count;
  }
  return (em_stage_t){.name = "infer",
                      .count = count,
                      .sum_ns = 12345,
                      .min_ns = 0,
                      .max_ns = 9000,
                      .scale = 3,
                      .zero_count = zeros,
                      .buckets = b,
                      .n_buckets = n};
}

static em_buckets_figures_t figures_of(const em_stage_t *w) {
  return (em_buckets_figures_t){.scale = w->scale,
                                .zero_count = w->zero_count,
                                .count = w->count,
                                .sum_ns = w->sum_ns,
                                .min_ns = w->min_ns,
                                .max_ns = w->max_ns};
}

static void buckets_round_trip(void **state) {
  (void)state;
  static uint8_t blob[EM_BUCKETS_BLOB_MAX];
  static em_bucket_t storage[EM_PROTO_MAX_BUCKETS];
  em_stage_t w = window_of(some, 3, 4);
  size_t len = em_buckets_encode(blob, &w);
  assert_int_equal(len, 36);
  /* Layout: int32 index then uint64 count, little-endian. */
  static const uint8_t second[12] = {0xfd, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 0, 0, 0};
  assert_memory_equal(blob + 12, second, 12);
  em_buckets_figures_t fig = figures_of(&w);
  em_stage_t out;
  assert_int_equal(em_buckets_decode(blob, len, &fig, storage, &out), 0);
  assert_int_equal(out.n_buckets, 3);
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(out.buckets[i].index, some[i].index);
    assert_int_equal(out.buckets[i].count, some[i].count);
  }
  assert_int_equal(out.count, 12);
  assert_int_equal(out.zero_count, 4);
  assert_int_equal(out.sum_ns, 12345);
  assert_int_equal(out.max_ns, 9000);
  assert_int_equal(out.scale, 3);
  assert_null(out.name);
}

static void buckets_empty_blob_of_zeros_only(void **state) {
  (void)state;
  static em_bucket_t storage[EM_PROTO_MAX_BUCKETS];
  em_buckets_figures_t fig = {.scale = 0, .zero_count = 7, .count = 7};
  em_stage_t out;
  assert_int_equal(em_buckets_decode(NULL, 0, &fig, storage, &out), 0);
  assert_int_equal(out.n_buckets, 0);
  assert_int_equal(out.count, 7);
  fig.count = 8; /* One span unaccounted for. */
  assert_int_equal(em_buckets_decode(NULL, 0, &fig, storage, &out), -EINVAL);
}

static void buckets_malformed_is_refused(void **state) {
  (void)state;
  static uint8_t blob[EM_BUCKETS_BLOB_MAX + 12];
  static em_bucket_t storage[EM_PROTO_MAX_BUCKETS];
  em_stage_t w = window_of(some, 3, 0);
  size_t len = em_buckets_encode(blob, &w);
  em_buckets_figures_t fig = figures_of(&w);
  em_stage_t out;
  assert_int_equal(em_buckets_decode(blob, len - 1, &fig, storage, &out), -EINVAL);
  assert_int_equal(em_buckets_decode(blob, len + 1, &fig, storage, &out), -EINVAL);
  assert_int_equal(em_buckets_decode(NULL, 12, &fig, storage, &out), -EINVAL);
  em_buckets_figures_t bad = fig;
  bad.count = 0;
  assert_int_equal(em_buckets_decode(blob, len, &bad, storage, &out), -EINVAL);
  bad = fig;
  bad.count++;
  assert_int_equal(em_buckets_decode(blob, len, &bad, storage, &out), -EINVAL);
  bad = fig;
  bad.scale = EM_PROTO_MAX_SCALE + 1;
  assert_int_equal(em_buckets_decode(blob, len, &bad, storage, &out), -EINVAL);

  const em_bucket_t unordered[] = {{.index = 5, .count = 1}, {.index = 5, .count = 1}};
  w = window_of(unordered, 2, 0);
  len = em_buckets_encode(blob, &w);
  fig = figures_of(&w);
  assert_int_equal(em_buckets_decode(blob, len, &fig, storage, &out), -EINVAL);

  const em_bucket_t empty_bucket[] = {{.index = 1, .count = 0}, {.index = 2, .count = 3}};
  w = window_of(empty_bucket, 2, 0);
  len = em_buckets_encode(blob, &w);
  fig = figures_of(&w);
  assert_int_equal(em_buckets_decode(blob, len, &fig, storage, &out), -EINVAL);

  /* Counts that wrap uint64 must not add up to count by overflow. */
  const em_bucket_t wrapping[] = {{.index = 1, .count = UINT64_MAX}, {.index = 2, .count = 2}};
  w = window_of(wrapping, 2, 0);
  len = em_buckets_encode(blob, &w);
  fig = figures_of(&w);
  fig.count = 1;
  assert_int_equal(em_buckets_decode(blob, len, &fig, storage, &out), -EINVAL);

  /* One bucket more than EM_PROTO_MAX_BUCKETS. */
  memset(blob, 0, sizeof(blob));
  for (size_t i = 0; i <= EM_PROTO_MAX_BUCKETS; i++) {
    blob[i * 12] = (uint8_t)i;
    blob[i * 12 + 1] = (uint8_t)(i >> 8);
    blob[i * 12 + 4] = 1;
  }
  fig = (em_buckets_figures_t){.scale = 0, .count = EM_PROTO_MAX_BUCKETS + 1};
  assert_int_equal(em_buckets_decode(blob, (EM_PROTO_MAX_BUCKETS + 1) * 12, &fig, storage, &out),
                   -EINVAL);
  fig.count = EM_PROTO_MAX_BUCKETS;
  assert_int_equal(em_buckets_decode(blob, EM_PROTO_MAX_BUCKETS * 12, &fig, storage, &out), 0);
}

static void buckets_decoded_merges_like_the_window(void **state) {
  (void)state;
  static uint8_t blob[EM_BUCKETS_BLOB_MAX];
  static em_bucket_t storage[EM_PROTO_MAX_BUCKETS];
  const em_bucket_t b[] = {
      {.index = 10, .count = 50}, {.index = 20, .count = 49}, {.index = 30, .count = 1}};
  em_stage_t w = window_of(b, 3, 0);
  w.min_ns = 2;
  w.max_ns = 14000;
  em_buckets_figures_t fig = figures_of(&w);
  em_stage_t out;
  assert_int_equal(em_buckets_decode(blob, em_buckets_encode(blob, &w), &fig, storage, &out), 0);
  em_histo_t *direct;
  em_histo_t *decoded;
  assert_int_equal(em_histo_new(&direct), 0);
  assert_int_equal(em_histo_new(&decoded), 0);
  assert_int_equal(em_histo_add_stage(direct, &w), 0);
  assert_int_equal(em_histo_add_stage(decoded, &out), 0);
  const double q[] = {0.5, 0.9, 0.99, 1.0};
  for (size_t i = 0; i < 4; i++) {
    assert_true(em_histo_quantile_ns(direct, q[i]) == em_histo_quantile_ns(decoded, q[i]));
  }
  assert_int_equal(em_histo_count(decoded), 100);
  em_histo_free(direct);
  em_histo_free(decoded);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(buckets_round_trip),
      cmocka_unit_test(buckets_empty_blob_of_zeros_only),
      cmocka_unit_test(buckets_malformed_is_refused),
      cmocka_unit_test(buckets_decoded_merges_like_the_window),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
