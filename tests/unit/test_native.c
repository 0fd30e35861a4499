/*
 * test_native.c - host/lib/native.c, em_histo_t to Prometheus native histogram: spans and
 * deltas of known histograms worked out by hand (Prometheus index = OpenTelemetry index + 1),
 * schema reduction keeps every count, schemas below -4 refused, the quantile Prometheus
 * computes from the result (its histogramQuantile: rank q*count, linear inside the bucket)
 * within the bucket of the exact quantile, reuse and allocation failure.
 *
 * Samples are bucketed with samples.h (libm and a boundary fix-up), independent of the code
 * under test.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <native.h>
#include <stdlib.h>
#include <string.h>

#include "failing_alloc.h"
#include "samples.h"

#define MAX_SAMPLES 6000
#define MAX_BUCKETS 4096

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Adds values[0..n) to h as one window at `scale`. */
static void add_values(em_histo_t *h, const uint64_t *values, size_t n, int32_t scale) {
  static em_bucket_t b[MAX_BUCKETS];
  static uint64_t sorted[MAX_SAMPLES];
  assert_true(n <= MAX_SAMPLES);
  memcpy(sorted, values, n * sizeof(*values));
  qsort(sorted, n, sizeof(*sorted), cmp_u64);
  em_stage_t s = {.name = "infer", .scale = scale, .buckets = b, .count = n};
  s.min_ns = sorted[0];
  s.max_ns = sorted[n - 1];
  for (size_t k = 0; k < n; k++) {
    s.sum_ns += sorted[k];
    if (sorted[k] == 0) {
      s.zero_count++;
      continue;
    }
    int32_t i = em_samples_bucket_of(sorted[k], scale);
    if (s.n_buckets > 0 && b[s.n_buckets - 1].index == i) {
      b[s.n_buckets - 1].count++;
    } else {
      assert_true(s.n_buckets < MAX_BUCKETS);
      b[s.n_buckets++] = (em_bucket_t){.index = i, .count = 1};
    }
  }
  assert_int_equal(em_histo_add_stage(h, &s), 0);
}

/* Adds a window given as (OpenTelemetry index, count) pairs, no zeros. */
static void add_buckets(em_histo_t *h, int32_t scale, const em_bucket_t *b, size_t n) {
  em_stage_t s = {
      .name = "x", .scale = scale, .buckets = b, .n_buckets = n, .min_ns = 1, .max_ns = 1};
  for (size_t k = 0; k < n; k++) {
    s.count += b[k].count;
    s.sum_ns += b[k].count;
  }
  assert_int_equal(em_histo_add_stage(h, &s), 0);
}

/* Decodes n's spans and deltas into absolute (Prometheus index, count) pairs; returns how
 * many, checking the structure on the way. */
static size_t decode(const em_native_t *n, int64_t *index, int64_t *count, size_t cap) {
  size_t out = 0, d = 0;
  int64_t idx = 0, c = 0;
  for (size_t s = 0; s < n->n_spans; s++) {
    idx += n->spans[s].offset;
    if (s > 0) {
      assert_true(n->spans[s].offset > EM_NATIVE_MAX_GAP); /* else the span would bridge */
    }
    assert_true(n->spans[s].length > 0);
    for (uint32_t k = 0; k < n->spans[s].length; k++) {
      assert_true(d < n->n_deltas && out < cap);
      c += n->deltas[d++];
      assert_true(c >= 0);
      index[out] = idx++;
      count[out++] = c;
    }
  }
  assert_int_equal(d, n->n_deltas);
  return out;
}

/* Prometheus's histogramQuantile (promql/quantile.go, v2.42) over the decoded buckets. */
static double prom_quantile(const em_native_t *n, double q) {
  static int64_t idx[MAX_BUCKETS * 2], cnt[MAX_BUCKETS * 2];
  size_t m = decode(n, idx, cnt, MAX_BUCKETS * 2);
  double rank = q * (double)n->count, seen = (double)n->zero_count;
  if (seen >= rank) {
    return 0;
  }
  double per = ldexp(1.0, n->schema);
  for (size_t k = 0; k < m; k++) {
    if (cnt[k] == 0) {
      continue;
    }
    if (seen + (double)cnt[k] >= rank) {
      double lo = exp2((double)(idx[k] - 1) / per), hi = exp2((double)idx[k] / per);
      return lo + (hi - lo) * ((rank - seen) / (double)cnt[k]);
    }
    seen += (double)cnt[k];
  }
  return NAN;
}

static void spans_and_deltas_of_a_known_histogram(void **state) {
  (void)state;
  em_histo_t *h = NULL;
  assert_int_equal(em_histo_new(&h), 0);
  /* OpenTelemetry buckets 10:3 11:5 13:1 20:4 at scale 6, and two 0 ns values. */
  static const em_bucket_t b[] = {{10, 3}, {11, 5}, {13, 1}, {20, 4}};
  em_stage_t s = {.name = "x",
                  .scale = 6,
                  .buckets = b,
                  .n_buckets = 4,
                  .count = 15,
                  .zero_count = 2,
                  .sum_ns = 1234,
                  .min_ns = 0,
                  .max_ns = 200};
  assert_int_equal(em_histo_add_stage(h, &s), 0);

  em_native_t n;
  em_native_init(&n);
  assert_int_equal(em_native_from_histo(&n, h), 0);
  assert_int_equal(n.schema, 6);
  assert_true(n.zero_threshold == EM_NATIVE_ZERO_THRESHOLD);
  assert_int_equal(n.zero_count, 2);
  assert_int_equal(n.count, 15);
  assert_true(n.sum_ns == 1234.0);
  /* Prometheus 11 12 [13 empty, bridged] 14, then 21 after a gap of 6. */
  assert_int_equal(n.n_spans, 2);
  assert_int_equal(n.spans[0].offset, 11);
  assert_int_equal(n.spans[0].length, 4);
  assert_int_equal(n.spans[1].offset, 6);
  assert_int_equal(n.spans[1].length, 1);
  static const int64_t deltas[] = {3, 2, -5, 1, 3};
  assert_int_equal(n.n_deltas, 5);
  assert_memory_equal(n.deltas, deltas, sizeof(deltas));

  /* A gap of exactly EM_NATIVE_MAX_GAP is bridged, one more opens a span; 1 ns (OpenTelemetry
   * -1) is Prometheus 0; negative offsets for the first span. */
  em_histo_free(h);
  assert_int_equal(em_histo_new(&h), 0);
  static const em_bucket_t c[] = {{-4, 1}, {-1, 2}, {3, 7}};
  add_buckets(h, 6, c, 3);
  assert_int_equal(em_native_from_histo(&n, h), 0);
  assert_int_equal(n.n_spans, 2);
  assert_int_equal(n.spans[0].offset, -3);
  assert_int_equal(n.spans[0].length, 4); /* -3, then -2 and -1 empty, 0 */
  assert_int_equal(n.spans[1].offset, 3); /* 1, 2, 3 empty; then 4 */
  assert_int_equal(n.spans[1].length, 1);
  static const int64_t deltas2[] = {1, -1, 0, 2, 5};
  assert_int_equal(n.n_deltas, 5);
  assert_memory_equal(n.deltas, deltas2, sizeof(deltas2));
  em_native_deinit(&n);
  em_histo_free(h);
}

static void schema_reduction_keeps_counts(void **state) {
  (void)state;
  /* Scale 10 -> schema 8: OpenTelemetry i -> floor(i / 4), then + 1. */
  em_histo_t *h = NULL;
  assert_int_equal(em_histo_new(&h), 0);
  static const em_bucket_t b[] = {{-9, 1}, {-5, 2}, {-1, 3}, {0, 4},  {3, 5},
                                  {4, 6},  {7, 7},  {8, 8},  {40, 9}, {41, 10}};
  add_buckets(h, 10, b, 10);
  assert_int_equal(em_histo_scale(h), 10);
  em_native_t n;
  em_native_init(&n);
  assert_int_equal(em_native_from_histo(&n, h), 0);
  assert_int_equal(n.schema, 8);
  assert_int_equal(n.count, 55);
  /* Schema 8 buckets: -3:1 -2:2 -1:3 0:9 1:13 2:8 10:19 -> Prometheus -2..3 and 11. */
  int64_t idx[16], cnt[16];
  size_t m = decode(&n, idx, cnt, 16);
  static const int64_t want_idx[] = {-2, -1, 0, 1, 2, 3, 11};
  static const int64_t want_cnt[] = {1, 2, 3, 9, 13, 8, 19};
  assert_int_equal(m, 7);
  assert_memory_equal(idx, want_idx, sizeof(want_idx));
  assert_memory_equal(cnt, want_cnt, sizeof(want_cnt));

  /* Random values at scales 9..14 (and 6): the reduced histogram holds every value, in the
   * schema-8 bucket the value belongs to. */
  static uint64_t values[MAX_SAMPLES];
  for (int32_t scale = 6; scale <= 14; scale++) {
    if (scale == 7 || scale == 8) {
      continue;
    }
    em_samples_seed(1000 + (uint64_t)scale);
    em_histo_free(h);
    assert_int_equal(em_histo_new(&h), 0);
    size_t nv = 2000;
    for (size_t k = 0; k < nv; k++) {
      values[k] = em_samples_lognormal_ns(3e6, 1.0);
    }
    add_values(h, values, nv, scale);
    assert_int_equal(em_native_from_histo(&n, h), 0);
    int32_t schema = scale > 8 ? 8 : scale;
    assert_int_equal(n.schema, schema);
    static int64_t di[MAX_BUCKETS], dc[MAX_BUCKETS];
    size_t dm = decode(&n, di, dc, MAX_BUCKETS);
    static int64_t want[MAX_BUCKETS];
    int64_t lo = di[0];
    memset(want, 0, sizeof(want));
    uint64_t total = 0;
    for (size_t k = 0; k < nv; k++) {
      int64_t p = (int64_t)em_samples_bucket_of(values[k], schema) + 1;
      assert_true(p >= lo && p - lo < MAX_BUCKETS);
      want[p - lo]++;
    }
    for (size_t k = 0; k < dm; k++) {
      assert_int_equal(dc[k], want[di[k] - lo]);
      total += (uint64_t)dc[k];
    }
    assert_int_equal(total, nv);
    assert_int_equal(n.count, nv);
  }
  em_native_deinit(&n);
  em_histo_free(h);
}

static void quantiles_within_one_bucket(void **state) {
  (void)state;
  static uint64_t values[MAX_SAMPLES], sorted[MAX_SAMPLES];
  static const int32_t scales[] = {0, 3, 6, 11};
  static const double qs[] = {0.5, 0.9, 0.99, 0.999};
  em_native_t n;
  em_native_init(&n);
  for (size_t si = 0; si < sizeof(scales) / sizeof(scales[0]); si++) {
    int32_t scale = scales[si];
    em_samples_seed(77 + (uint64_t)si);
    em_histo_t *h = NULL;
    assert_int_equal(em_histo_new(&h), 0);
    size_t nv = 0;
    /* Windows of 500 from two devices, one four times slower; a few 0 ns values. */
    for (int w = 0; w < 10; w++) {
      for (size_t k = 0; k < 500; k++) {
        values[nv + k] = k % 97 == 0 ? 0 : em_samples_lognormal_ns(w % 2 ? 48e6 : 12e6, 0.3);
      }
      add_values(h, values + nv, 500, scale);
      nv += 500;
    }
    assert_int_equal(em_native_from_histo(&n, h), 0);
    int32_t schema = scale > 8 ? 8 : scale;
    double per = ldexp(1.0, schema);
    memcpy(sorted, values, nv * sizeof(*values));
    qsort(sorted, nv, sizeof(*sorted), cmp_u64);
    for (size_t qi = 0; qi < sizeof(qs) / sizeof(qs[0]); qi++) {
      double rank = qs[qi] * (double)nv; /* Prometheus's rank */
      uint64_t exact = sorted[(size_t)ceil(rank) - 1];
      double got = prom_quantile(&n, qs[qi]);
      int64_t p = (int64_t)em_samples_bucket_of(exact, schema) + 1;
      double lo = exp2((double)(p - 1) / per), hi = exp2((double)p / per);
      if (!(lo < got && got <= hi * (1 + 1e-12))) {
        fail_msg("scale %d q %g: %g outside (%g, %g] holding the exact %llu", scale, qs[qi], got,
                 lo, hi, (unsigned long long)exact);
      }
    }
    em_histo_free(h);
  }
  em_native_deinit(&n);
}

static void empty_histogram_stays_native(void **state) {
  (void)state;
  em_histo_t *h = NULL;
  assert_int_equal(em_histo_new(&h), 0);
  em_native_t n;
  em_native_init(&n);
  assert_int_equal(em_native_from_histo(&n, h), 0);
  assert_int_equal(n.count, 0);
  assert_int_equal(n.n_spans, 0);
  assert_int_equal(n.n_deltas, 0);
  assert_true(n.zero_threshold > 0); /* what marks it native for Prometheus 2.42 */
  assert_true(n.schema >= EM_NATIVE_MIN_SCHEMA && n.schema <= EM_NATIVE_MAX_SCHEMA);

  /* Only 0 ns values: the zero bucket alone. */
  static const uint64_t zeros[] = {0, 0, 0};
  add_values(h, zeros, 3, 6);
  assert_int_equal(em_native_from_histo(&n, h), 0);
  assert_int_equal(n.zero_count, 3);
  assert_int_equal(n.count, 3);
  assert_int_equal(n.n_spans, 0);
  em_native_deinit(&n);
  em_histo_free(h);
}

static void coarse_scales_are_refused(void **state) {
  (void)state;
  em_native_t n;
  em_native_init(&n);
  for (int32_t scale = -6; scale <= -4; scale++) {
    em_histo_t *h = NULL;
    assert_int_equal(em_histo_new(&h), 0);
    static const em_bucket_t b[] = {{0, 2}};
    add_buckets(h, scale, b, 1);
    int rc = em_native_from_histo(&n, h);
    if (scale < EM_NATIVE_MIN_SCHEMA) {
      assert_int_equal(rc, -ERANGE);
      assert_int_equal(n.count, 0);
      assert_int_equal(n.n_spans, 0);
    } else {
      assert_int_equal(rc, 0);
      assert_int_equal(n.schema, -4);
      assert_int_equal(n.spans[0].offset, 1);
    }
    em_histo_free(h);
  }
  assert_int_equal(em_native_from_histo(NULL, NULL), -EINVAL);
  assert_int_equal(em_native_from_histo(&n, NULL), -EINVAL);
  em_native_deinit(&n);
  em_native_deinit(NULL);
}

static void reuse_and_allocation_failure(void **state) {
  (void)state;
  static uint64_t values[MAX_SAMPLES];
  em_samples_seed(5);
  for (size_t k = 0; k < 3000; k++) {
    values[k] = em_samples_lognormal_ns(1e6, 2.0); /* wide: hundreds of buckets */
  }
  em_histo_t *wide = NULL, *narrow = NULL;
  assert_int_equal(em_histo_new(&wide), 0);
  assert_int_equal(em_histo_new(&narrow), 0);
  add_values(wide, values, 3000, 6);
  static const em_bucket_t b[] = {{100, 4}};
  add_buckets(narrow, 6, b, 1);

  em_native_t n;
  em_native_init(&n);
  em_failing_alloc_arm(1, true);
  assert_int_equal(em_native_from_histo(&n, wide), -ENOMEM);
  em_failing_alloc_disarm();
  assert_int_equal(n.count, 0);
  assert_int_equal(n.n_spans, 0);

  assert_int_equal(em_native_from_histo(&n, wide), 0);
  assert_true(n.n_deltas > 64); /* grew past the first allocation */
  assert_int_equal(em_native_from_histo(&n, narrow), 0);
  assert_int_equal(n.n_spans, 1);
  assert_int_equal(n.n_deltas, 1);
  assert_int_equal(n.spans[0].offset, 101);
  assert_int_equal(n.deltas[0], 4);
  assert_int_equal(n.count, 4);
  em_native_deinit(&n);
  em_histo_free(wide);
  em_histo_free(narrow);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(spans_and_deltas_of_a_known_histogram),
      cmocka_unit_test(schema_reduction_keeps_counts),
      cmocka_unit_test(quantiles_within_one_bucket),
      cmocka_unit_test(empty_histogram_stays_native),
      cmocka_unit_test(coarse_scales_are_refused),
      cmocka_unit_test(reuse_and_allocation_failure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
