/*
 * test_host_histo.c - host/lib/histo.c (merging exponential histograms, quantiles, variance) and
 * host/lib/stats.c (incomplete beta, Student t tail, Welch's test).
 *
 * Samples are bucketed (samples.h) at scale 6 as the agent does (bucket i holds (2^(i/64),
 * 2^((i+1)/64)]) with libm and a boundary fix-up, independent of the code under test. Reference
 * values for the statistics come from closed forms: I_x(1,1) = x, I_x(a,1) = x^a,
 * I_x(1,b) = 1-(1-x)^b, I_1/2(a,a) = 1/2; Student t with 1 df is Cauchy,
 * p = 1 - 2 atan(|t|)/pi; with 2 df p = 1 - |t|/sqrt(t^2+2); for large df the normal
 * erfc(|t|/sqrt 2).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <histo.h>
#include <math.h>
#include <stats.h>
#include <stdlib.h>
#include <string.h>

#include "samples.h"

#define PI          3.14159265358979323846
#define MAX_SAMPLES 20000
#define MAX_BUCKETS 4096

/* ---- Helpers: windows (samples and their buckets: samples.h) ---- */

/* A stage window of values[0..n) at `scale`, buckets in caller storage `b` (MAX_BUCKETS). */
static em_stage_t window_of(const uint64_t *values, size_t n, int32_t scale, em_bucket_t *b) {
  em_stage_t s = {.name = "infer", .scale = scale, .buckets = b};
  s.min_ns = UINT64_MAX;
  for (size_t k = 0; k < n; k++) {
    uint64_t d = values[k];
    s.count++;
    s.sum_ns += d;
    s.min_ns = d < s.min_ns ? d : s.min_ns;
    s.max_ns = d > s.max_ns ? d : s.max_ns;
    if (d == 0) {
      s.zero_count++;
      continue;
    }
    int32_t i = em_samples_bucket_of(d, scale);
    size_t j = 0;
    while (j < s.n_buckets && b[j].index < i) {
      j++;
    }
    if (j < s.n_buckets && b[j].index == i) {
      b[j].count++;
      continue;
    }
    assert_true(s.n_buckets < MAX_BUCKETS);
    memmove(&b[j + 1], &b[j], (s.n_buckets - j) * sizeof(*b));
    b[j] = (em_bucket_t){.index = i, .count = 1};
    s.n_buckets++;
  }
  return s;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* What em_histo_each reports, for comparing two histograms bucket by bucket. */
typedef struct {
  size_t n;
  double upper[MAX_BUCKETS];
  uint64_t count[MAX_BUCKETS];
} dump_t;

static void dump_fn(void *ctx, double upper, uint64_t count) {
  dump_t *d = ctx;
  assert_true(d->n < MAX_BUCKETS);
  d->upper[d->n] = upper;
  d->count[d->n] = count;
  d->n++;
}

static void assert_same_histo(const em_histo_t *x, const em_histo_t *y) {
  assert_int_equal(em_histo_count(x), em_histo_count(y));
  assert_int_equal(em_histo_sum_ns(x), em_histo_sum_ns(y));
  assert_int_equal(em_histo_min_ns(x), em_histo_min_ns(y));
  assert_int_equal(em_histo_max_ns(x), em_histo_max_ns(y));
  assert_int_equal(em_histo_scale(x), em_histo_scale(y));
  static dump_t dx, dy;
  memset(&dx, 0, sizeof(dx));
  memset(&dy, 0, sizeof(dy));
  em_histo_each(x, dump_fn, &dx);
  em_histo_each(y, dump_fn, &dy);
  assert_int_equal(dx.n, dy.n);
  for (size_t k = 0; k < dx.n; k++) {
    assert_true(dx.upper[k] == dy.upper[k]);
    assert_int_equal(dx.count[k], dy.count[k]);
  }
  static const double qs[] = {0, 0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1};
  for (size_t k = 0; k < sizeof(qs) / sizeof(qs[0]); k++) {
    assert_true(em_histo_quantile_ns(x, qs[k]) == em_histo_quantile_ns(y, qs[k]));
  }
  assert_true(em_histo_variance_ns2(x) == em_histo_variance_ns2(y));
}

static uint64_t samples[MAX_SAMPLES];
static em_bucket_t bufs[2][MAX_BUCKETS];

/* ---- Histograms ---- */

static void histo_merge_of_windows_equals_histo_of_union(void **state) {
  (void)state;
  em_samples_seed(1);
  size_t n = 5000;
  for (size_t k = 0; k < n; k++) {
    samples[k] =
        k % 97 == 0 ? 0 : em_samples_lognormal_ns(8e6, 0.3); /* some zero-length spans too */
  }
  em_histo_t *parts = NULL, *whole = NULL, *left = NULL, *right = NULL;
  assert_int_equal(em_histo_new(&parts), 0);
  assert_int_equal(em_histo_new(&whole), 0);
  assert_int_equal(em_histo_new(&left), 0);
  assert_int_equal(em_histo_new(&right), 0);
  for (size_t off = 0; off < n; off += 250) { /* 20 windows of 250 */
    em_stage_t w = window_of(&samples[off], 250, 6, bufs[0]);
    assert_int_equal(em_histo_add_stage(parts, &w), 0);
    assert_int_equal(em_histo_add_stage(off < n / 2 ? left : right, &w), 0);
  }
  em_stage_t all = window_of(samples, n, 6, bufs[0]);
  assert_int_equal(em_histo_add_stage(whole, &all), 0);
  assert_same_histo(parts, whole);
  assert_int_equal(em_histo_merge(left, right), 0); /* histogram + histogram */
  assert_same_histo(left, whole);
  assert_int_equal(em_histo_count(whole), n);
  em_histo_free(parts);
  em_histo_free(whole);
  em_histo_free(left);
  em_histo_free(right);
}

static void histo_quantiles_within_bucket_error_of_exact(void **state) {
  (void)state;
  static const struct {
    double median, sigma;
    size_t n;
  } cases[] = {{130e3, 0.1, 10000}, {8e6, 0.5, 20000}, {32e3, 1.5, 3000}, {50, 0.8, 1000}};
  static const double qs[] = {0.001, 0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 1};
  double rel = exp2(1.0 / 64) - 1; /* the width of a scale-6 bucket: 1.09% */
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    em_samples_seed(100 + c);
    size_t n = cases[c].n;
    for (size_t k = 0; k < n; k++) {
      samples[k] = em_samples_lognormal_ns(cases[c].median, cases[c].sigma);
    }
    em_histo_t *h = NULL;
    assert_int_equal(em_histo_new(&h), 0);
    for (size_t off = 0; off < n; off += 500) {
      em_stage_t w = window_of(&samples[off], n - off < 500 ? n - off : 500, 6, bufs[0]);
      assert_int_equal(em_histo_add_stage(h, &w), 0);
    }
    qsort(samples, n, sizeof(samples[0]), cmp_u64);
    for (size_t k = 0; k < sizeof(qs) / sizeof(qs[0]); k++) {
      size_t rank = (size_t)ceil(qs[k] * (double)n);
      double exact = (double)samples[(rank ? rank : 1) - 1];
      double got = em_histo_quantile_ns(h, qs[k]);
      assert_true(fabs(got / exact - 1) <= rel + 1e-12);
    }
    assert_true(em_histo_quantile_ns(h, 0) >= (double)samples[0]); /* within [min, max] */
    assert_true(em_histo_quantile_ns(h, 1) <= (double)samples[n - 1]);
    em_histo_free(h);
  }
}

static void histo_downscale_merge_of_different_scales(void **state) {
  (void)state;
  em_samples_seed(7);
  size_t n = 4000;
  for (size_t k = 0; k < n; k++) {
    samples[k] =
        k % 50 == 0 ? 1 : em_samples_lognormal_ns(2000, 1.0); /* 1 ns: bucket -1, a negative */
  }
  em_histo_t *mixed = NULL, *direct = NULL;
  assert_int_equal(em_histo_new(&mixed), 0);
  assert_int_equal(em_histo_new(&direct), 0);
  em_stage_t fine = window_of(samples, n / 2, 6, bufs[0]);
  em_stage_t coarse = window_of(&samples[n / 2], n / 2, 3, bufs[1]);
  assert_int_equal(em_histo_add_stage(mixed, &fine), 0);
  assert_int_equal(em_histo_scale(mixed), 6);
  assert_int_equal(em_histo_add_stage(mixed, &coarse), 0);
  assert_int_equal(em_histo_scale(mixed), 3);
  em_stage_t all = window_of(samples, n, 3, bufs[0]);
  assert_int_equal(em_histo_add_stage(direct, &all), 0);
  assert_same_histo(mixed, direct);
  em_histo_free(mixed);
  em_histo_free(direct);

  /* Negative indices floor: index -5 at scale 2 is (2^-1.25, 2^-1] -> index -2 at scale 0. */
  em_histo_t *h = NULL;
  assert_int_equal(em_histo_new(&h), 0);
  em_bucket_t b2[] = {{-5, 1}}, b0[] = {{3, 2}};
  em_stage_t s2 = {.name = "x", .count = 1, .sum_ns = 0, .scale = 2, .buckets = b2, .n_buckets = 1};
  em_stage_t s0 = {.name = "x",
                   .count = 2,
                   .sum_ns = 20,
                   .min_ns = 10,
                   .max_ns = 10,
                   .scale = 0,
                   .buckets = b0,
                   .n_buckets = 1};
  assert_int_equal(em_histo_add_stage(h, &s2), 0);
  assert_int_equal(em_histo_add_stage(h, &s0), 0);
  static dump_t d;
  memset(&d, 0, sizeof(d));
  em_histo_each(h, dump_fn, &d);
  assert_int_equal(d.n, 2);
  assert_true(d.upper[0] == 0.5 && d.count[0] == 1); /* index -2 at scale 0: (1/4, 1/2] */
  assert_true(d.upper[1] == 16 && d.count[1] == 2);  /* index 3: (8, 16] */
  em_histo_free(h);
}

static void histo_wide_range_lowers_scale_to_fit_span_cap(void **state) {
  (void)state;
  em_histo_t *h = NULL;
  assert_int_equal(em_histo_new(&h), 0);
  em_bucket_t b[] = {{0, 1}, {20000, 1}};
  em_stage_t s = {.name = "x",
                  .count = 2,
                  .sum_ns = 3,
                  .min_ns = 1,
                  .max_ns = 2,
                  .scale = 6,
                  .buckets = b,
                  .n_buckets = 2};
  assert_int_equal(em_histo_add_stage(h, &s), 0);
  /* span 20001 at scale 6, 10001 at 5, 5001 at 4 <= EM_HISTO_MAX_SPAN */
  assert_int_equal(em_histo_scale(h), 4);
  assert_int_equal(em_histo_count(h), 2);
  em_histo_free(h);
}

static void histo_variance_from_buckets_close_to_true_variance(void **state) {
  (void)state;
  /* Bucket midpoints move each value by at most 0.54%: for spreads of 5% and more the
   * variance estimate stays within 2% of the sample variance. */
  static const double sigmas[] = {0.05, 0.1, 0.3, 1.0};
  for (size_t c = 0; c < sizeof(sigmas) / sizeof(sigmas[0]); c++) {
    em_samples_seed(1000 + c);
    size_t n = 10000;
    double mean = 0, m2 = 0;
    for (size_t k = 0; k < n; k++) {
      samples[k] = em_samples_lognormal_ns(1e6, sigmas[c]);
      double delta = (double)samples[k] - mean;
      mean += delta / (double)(k + 1);
      m2 += delta * ((double)samples[k] - mean);
    }
    double var = m2 / (double)(n - 1);
    em_histo_t *h = NULL;
    assert_int_equal(em_histo_new(&h), 0);
    em_stage_t w = window_of(samples, n, 6, bufs[0]);
    assert_int_equal(em_histo_add_stage(h, &w), 0);
    assert_true(fabs(em_histo_variance_ns2(h) / var - 1) < 0.02);
    assert_true(fabs(em_histo_mean_ns(h) - mean) < 1e-6 * mean); /* the mean is exact */
    em_histo_free(h);
  }
}

static void histo_empty_and_idle_windows_report_zero(void **state) {
  (void)state;
  em_histo_t *h = NULL;
  assert_int_equal(em_histo_new(&h), 0);
  em_stage_t idle = {.name = "x", .count = 0, .scale = 99}; /* idle: nothing else looked at */
  assert_int_equal(em_histo_add_stage(h, &idle), 0);
  assert_int_equal(em_histo_count(h), 0);
  assert_int_equal(em_histo_min_ns(h), 0);
  assert_int_equal(em_histo_max_ns(h), 0);
  assert_true(em_histo_mean_ns(h) == 0 && em_histo_variance_ns2(h) == 0);
  assert_true(em_histo_quantile_ns(h, 0.5) == 0);
  em_histo_free(h);
  em_histo_free(NULL);
}

static void histo_invalid_windows_are_refused_and_change_nothing(void **state) {
  (void)state;
  em_histo_t *h = NULL;
  assert_int_equal(em_histo_new(&h), 0);
  em_bucket_t good[] = {{10, 2}};
  em_stage_t ok = {.name = "x",
                   .count = 2,
                   .sum_ns = 4000,
                   .min_ns = 1000,
                   .max_ns = 3000,
                   .scale = 0,
                   .buckets = good,
                   .n_buckets = 1};
  assert_int_equal(em_histo_add_stage(h, &ok), 0);
  em_bucket_t desc[] = {{12, 1}, {11, 1}};
  em_bucket_t zero[] = {{12, 0}, {13, 2}};
  em_bucket_t far[] = {{-2000000000, 1}, {2000000000, 1}};
  struct {
    const char *what;
    em_stage_t s;
  } bad[] = {
      {"counts do not add up", {.count = 3, .scale = 0, .buckets = good, .n_buckets = 1}},
      {"scale too fine", {.count = 2, .scale = 21, .buckets = good, .n_buckets = 1}},
      {"scale too coarse", {.count = 2, .scale = -11, .buckets = good, .n_buckets = 1}},
      {"indices descending", {.count = 2, .scale = 0, .buckets = desc, .n_buckets = 2}},
      {"empty bucket", {.count = 2, .scale = 0, .buckets = zero, .n_buckets = 2}},
      {"no bucket array", {.count = 2, .scale = 0, .buckets = NULL, .n_buckets = 1}},
      {"min above max", {.count = 2, .min_ns = 5, .max_ns = 4, .buckets = good, .n_buckets = 1}},
      {"range beyond any scale", {.count = 2, .scale = -10, .buckets = far, .n_buckets = 2}},
  };
  for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
    bad[k].s.name = "x";
    if (bad[k].s.max_ns == 0) {
      bad[k].s.max_ns = 1;
    }
    int rc = em_histo_add_stage(h, &bad[k].s);
    if (rc != -EINVAL) {
      fail_msg("%s: got %d", bad[k].what, rc);
    }
    assert_int_equal(em_histo_count(h), 2);
    assert_int_equal(em_histo_scale(h), 0);
  }
  assert_int_equal(em_histo_add_stage(NULL, &ok), -EINVAL);
  assert_int_equal(em_histo_add_stage(h, NULL), -EINVAL);
  assert_int_equal(em_histo_new(NULL), -EINVAL);
  em_histo_free(h);
}

/* ---- Statistics ---- */

static void stats_betainc_matches_closed_forms(void **state) {
  (void)state;
  static const double xs[] = {0, 1e-9, 0.01, 0.2, 0.5, 0.7, 0.99, 1 - 1e-9, 1};
  for (size_t k = 0; k < sizeof(xs) / sizeof(xs[0]); k++) {
    double x = xs[k];
    assert_true(fabs(em_stats_betainc(1, 1, x) - x) < 1e-13);
    assert_true(fabs(em_stats_betainc(3.5, 1, x) - pow(x, 3.5)) < 1e-13);
    assert_true(fabs(em_stats_betainc(1, 4, x) - (1 - pow(1 - x, 4))) < 1e-13);
  }
  static const double as[] = {0.5, 1, 2.5, 10, 99, 300};
  for (size_t k = 0; k < sizeof(as) / sizeof(as[0]); k++) {
    assert_true(fabs(em_stats_betainc(as[k], as[k], 0.5) - 0.5) < 1e-11);
  }
  /* I_x(1/2, 1/2) = (2/pi) asin(sqrt x): the arcsine distribution. */
  for (double x = 0.05; x < 1; x += 0.1) {
    assert_true(fabs(em_stats_betainc(0.5, 0.5, x) - 2 / PI * asin(sqrt(x))) < 1e-12);
  }
}

static void stats_t_tail_matches_cauchy_df2_and_normal(void **state) {
  (void)state;
  static const double ts[] = {0, 0.1, 0.5, 1, 1.96, 3, 10, 100, 1e4, -2.5};
  for (size_t k = 0; k < sizeof(ts) / sizeof(ts[0]); k++) {
    double t = fabs(ts[k]);
    double cauchy = 1 - 2 * atan(t) / PI;
    double df2 = 1 - t / sqrt(t * t + 2);
    double p1 = em_stats_t_two_sided(ts[k], 1), p2 = em_stats_t_two_sided(ts[k], 2);
    assert_true(fabs(p1 - cauchy) <= 1e-12 * (cauchy > 1e-3 ? 1 : 1e-3 / cauchy) * cauchy + 1e-15);
    assert_true(fabs(p2 - df2) <= 1e-10 * df2 + 1e-15);
  }
  /* Large df: the normal tail; the t tail exceeds it by O(1/df). */
  static const double zs[] = {0.5, 1.96, 2.576, 4};
  for (size_t k = 0; k < sizeof(zs) / sizeof(zs[0]); k++) {
    double normal = erfc(zs[k] / sqrt(2.0));
    assert_true(fabs(em_stats_t_two_sided(zs[k], 1e6) / normal - 1) < 1e-4);
    assert_true(fabs(em_stats_t_two_sided(zs[k], 1e9) / normal - 1) < 1e-7);
    assert_true(em_stats_t_two_sided(zs[k], INFINITY) == normal);
  }
  assert_true(em_stats_t_two_sided(INFINITY, 5) == 0);
  assert_true(em_stats_t_two_sided(0, 5) == 1);
}

static void stats_welch_matches_hand_computed_examples(void **state) {
  (void)state;
  em_welch_t w;
  /* n 10, mean 20, var 4 against n 12, mean 22, var 9:
   * se^2 = 4/10 + 9/12 = 1.15, t = 2/sqrt(1.15) = 1.8650096,
   * df = 1.15^2 / (0.4^2/9 + 0.75^2/11) = 19.190546,
   * pooled sd = sqrt((9*4 + 11*9)/20) = sqrt(6.75), d = 2/sqrt(6.75) = 0.7698004. */
  assert_int_equal(em_stats_welch(10, 20, 4, 12, 22, 9, &w), 0);
  assert_true(fabs(w.t - 1.8650096) < 1e-6);
  assert_true(fabs(w.df - 19.190546) < 1e-5);
  assert_true(fabs(w.d - 0.7698004) < 1e-6);
  assert_true(w.p == em_stats_t_two_sided(w.t, w.df));
  assert_true(w.p > 0.05 && w.p < 0.1); /* between the 5% (2.09) and 10% (1.73) criticals */
  /* Equal sizes and variances, n = 2: df = 2(n-1) = 2, where p has a closed form.
   * t = (13-10)/sqrt(2/2 + 2/2) = 3/sqrt 2, p = 1 - t/sqrt(t^2+2), d = 3/sqrt 2. */
  assert_int_equal(em_stats_welch(2, 10, 2, 2, 13, 2, &w), 0);
  double t = 3 / sqrt(2.0);
  assert_true(fabs(w.t - t) < 1e-12 && fabs(w.df - 2) < 1e-12 && fabs(w.d - t) < 1e-12);
  assert_true(fabs(w.p - (1 - t / sqrt(t * t + 2))) < 1e-12);
  /* B smaller: t and d negative, same p. */
  em_welch_t v;
  assert_int_equal(em_stats_welch(2, 13, 2, 2, 10, 2, &v), 0);
  assert_true(v.t == -w.t && v.d == -w.d && v.p == w.p);
  /* No spread at all: p is 0 or 1. */
  assert_int_equal(em_stats_welch(5, 1, 0, 5, 2, 0, &w), 0);
  assert_true(w.p == 0 && isinf(w.t) && w.t > 0);
  assert_int_equal(em_stats_welch(5, 1, 0, 5, 1, 0, &w), 0);
  assert_true(w.p == 1 && w.t == 0 && w.d == 0);
}

static void stats_invalid_inputs_are_refused(void **state) {
  (void)state;
  em_welch_t w;
  assert_int_equal(em_stats_welch(1, 0, 1, 5, 0, 1, &w), -EINVAL);
  assert_int_equal(em_stats_welch(5, 0, 1, 0, 0, 1, &w), -EINVAL);
  assert_int_equal(em_stats_welch(5, 0, -1, 5, 0, 1, &w), -EINVAL);
  assert_int_equal(em_stats_welch(5, NAN, 1, 5, 0, 1, &w), -EINVAL);
  assert_int_equal(em_stats_welch(5, 0, 1, 5, INFINITY, 1, &w), -EINVAL);
  assert_int_equal(em_stats_welch(5, 0, 1, 5, 0, NAN, &w), -EINVAL);
  assert_int_equal(em_stats_welch(5, 0, 1, 5, 0, 1, NULL), -EINVAL);
  assert_true(isnan(em_stats_betainc(0, 1, 0.5)));
  assert_true(isnan(em_stats_betainc(1, -1, 0.5)));
  assert_true(isnan(em_stats_betainc(1, 1, 1.5)));
  assert_true(isnan(em_stats_betainc(1, 1, -0.1)));
  assert_true(isnan(em_stats_betainc(1, 1, NAN)));
  assert_true(isnan(em_stats_t_two_sided(1, 0)));
  assert_true(isnan(em_stats_t_two_sided(1, -3)));
  assert_true(isnan(em_stats_t_two_sided(NAN, 3)));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(histo_merge_of_windows_equals_histo_of_union),
      cmocka_unit_test(histo_quantiles_within_bucket_error_of_exact),
      cmocka_unit_test(histo_downscale_merge_of_different_scales),
      cmocka_unit_test(histo_wide_range_lowers_scale_to_fit_span_cap),
      cmocka_unit_test(histo_variance_from_buckets_close_to_true_variance),
      cmocka_unit_test(histo_empty_and_idle_windows_report_zero),
      cmocka_unit_test(histo_invalid_windows_are_refused_and_change_nothing),
      cmocka_unit_test(stats_betainc_matches_closed_forms),
      cmocka_unit_test(stats_t_tail_matches_cauchy_df2_and_normal),
      cmocka_unit_test(stats_welch_matches_hand_computed_examples),
      cmocka_unit_test(stats_invalid_inputs_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
