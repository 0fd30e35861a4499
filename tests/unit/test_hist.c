/*
 * test_hist.c - unit tests of firmware/agent/spans/hist.c: the scale-6 bucket index, recording,
 * merge, reset, quantiles and the export into a proto stage window.
 *
 * Covered: the index at a table of known values and at every bucket boundary of the range,
 * checked against an exact big-integer reference (bucket i holds d with 2^i < d^64 <= 2^(i+1),
 * so index(d) = bitlen(d^64) - 1, minus 1 more when d is a power of two); monotonic over a
 * sweep; clamped at both ends. Percentiles on 10^6 samples of three distributions against the
 * exact nearest-rank percentile of the sorted samples. Merge equal to the histogram of the
 * union, field by field; reset equal to a fresh histogram and touching only [lo, hi]. The
 * export: fields, ordering, downscaling compared with the histogram of the same samples at
 * the lower scale computed from the samples by the reference (not by shifting), and a CBOR
 * round trip through em_proto_encode / em_proto_decode. Zero-duration spans, one-sample
 * histograms, and saturation of the sum and of bucket counts.
 *
 * Samples come from a fixed-seed xoshiro256** generator, so every run sees the same data.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edgemon/common/rng.h"
#include "edgemon/proto.h"
#include "hist.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define MS           UINT64_C(1000000)
#define P2(k)        (UINT64_C(1) << (k))

/*
 * The stated accuracy: a reported percentile is the geometric midpoint of the bucket that
 * holds the exact one, and a scale-6 bucket spans a factor 2^(1/64), so the midpoint is within
 * a factor 2^(1/128) (0.543%) of any value in it; rounding to whole ns adds at most 0.5 ns
 * (1e-7 relative at 5 ms). Clamping to [min, max] only moves it closer.
 */
#define MAX_REL_ERROR 0.0055

/* ---- Fixed-seed generator (xoshiro256**, seeded by splitmix64) ---- */

/* Uniform in [0, 1). */
static double rng_unit(em_rng_t *r) {
  return (double)(em_rng_next(r) >> 11) * 0x1p-53;
}

/* Standard normal (Box-Muller, one value per call). */
static double rng_normal(em_rng_t *r) {
  double u1 = 1.0 - rng_unit(r); /* (0, 1] */
  double u2 = rng_unit(r);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static uint64_t lognormal_ns(em_rng_t *r, double median_ns, double sigma) {
  return (uint64_t)llround(median_ns * exp(sigma * rng_normal(r)));
}

/* Durations of the three workloads of the percentile test. */
static uint64_t draw_uniform(em_rng_t *r) {
  return (uint64_t)llround(1e6 + rng_unit(r) * 49e6); /* 1 ms .. 50 ms */
}
static uint64_t draw_lognormal(em_rng_t *r) {
  return lognormal_ns(r, 8e6, 0.5); /* median 8 ms */
}
static uint64_t draw_bimodal(em_rng_t *r) {
  return rng_unit(r) < 0.9 ? lognormal_ns(r, 5e6, 0.1) : lognormal_ns(r, 40e6, 0.1);
}

/* Log-uniform in [1, 2^40]. */
static uint64_t draw_log_uniform(em_rng_t *r) {
  uint64_t v = (uint64_t)llround(exp2(rng_unit(r) * 40.0));
  return v < 1 ? 1 : v;
}

/* ---- Exact reference for the bucket index ---- */

/* An unsigned big integer, 32-bit limbs, least significant first: (2^40)^64 needs 81. */
#define BIG_LIMBS 84
typedef struct {
  uint32_t w[BIG_LIMBS];
  size_t n;
} big_t;

static void big_set(big_t *b, uint64_t v) {
  memset(b, 0, sizeof(*b));
  b->w[0] = (uint32_t)v;
  b->w[1] = (uint32_t)(v >> 32);
  b->n = b->w[1] ? 2 : 1;
}

/* r = a * a (r != a). */
static void big_square(big_t *r, const big_t *a) {
  assert_true(2 * a->n <= BIG_LIMBS);
  memset(r, 0, sizeof(*r));
  for (size_t i = 0; i < a->n; i++) {
    uint64_t carry = 0;
    for (size_t j = 0; j < a->n; j++) {
      uint64_t t = (uint64_t)a->w[i] * a->w[j] + r->w[i + j] + carry;
      r->w[i + j] = (uint32_t)t;
      carry = t >> 32;
    }
    r->w[i + a->n] = (uint32_t)carry;
  }
  r->n = 2 * a->n;
  while (r->n > 1 && r->w[r->n - 1] == 0) {
    r->n--;
  }
}

static int big_bitlen(const big_t *b) {
  uint32_t top = b->w[b->n - 1];
  int bits = 0;
  while (top) {
    bits++;
    top >>= 1;
  }
  return (int)(b->n - 1) * 32 + bits;
}

static int bitlen_u64(uint64_t v) {
  int bits = 0;
  while (v) {
    bits++;
    v >>= 1;
  }
  return bits;
}

/*
 * ref[s] = the OpenTelemetry bucket index of ns >= 1 at scale s (bucket i: base^i < ns <=
 * base^(i+1), base = 2^(2^-s)), for s = 0..6, exactly: with p = ns^(2^s), base^i < ns is
 * 2^i < p, so the index is bitlen(p) - 1, or bitlen(p) - 2 when p (so ns) is a power of two.
 */
static void ref_indices(uint64_t ns, int32_t ref[7]) {
  big_t a, b;
  big_set(&a, ns);
  int pow2 = (ns & (ns - 1)) == 0;
  for (int s = 0; s <= 6; s++) {
    ref[s] = big_bitlen(&a) - 1 - pow2;
    if (s < 6) {
      big_square(&b, &a);
      a = b;
    }
  }
}

/* The reference indices of one sample at scales 0..6. */
typedef struct {
  int32_t at[7];
} ref_idx_t;

static int32_t ref_index6(uint64_t ns) {
  int32_t ref[7];
  ref_indices(ns, ref);
  return ref[6];
}

/*
 * The index of ns >= 1 at scale s, -10 <= s <= 6. For s < 0, base = 2^(2^m) with m = -s, and
 * with e = ceil(log2(ns)) - 1 = bitlen(ns - 1) - 1 (the scale-0 index), ns lies in bucket
 * floor(e / 2^m).
 */
static int32_t ref_index_at(uint64_t ns, int scale) {
  if (scale >= 0) {
    int32_t ref[7];
    ref_indices(ns, ref);
    return ref[scale];
  }
  int32_t e = bitlen_u64(ns - 1) - 1;
  int32_t d = (int32_t)1 << -scale;
  return e >= 0 ? e / d : -1;
}

/* ---- Helpers ---- */

static em_hist_t *new_hist(void) {
  em_hist_t *h = malloc(sizeof(*h));
  assert_non_null(h);
  em_hist_init(h);
  return h;
}

/* Every field equal, counts[] included. */
static void assert_hist_equal(const em_hist_t *a, const em_hist_t *b) {
  assert_int_equal(a->count, b->count);
  assert_int_equal(a->sum_ns, b->sum_ns);
  assert_int_equal(a->min_ns, b->min_ns);
  assert_int_equal(a->max_ns, b->max_ns);
  assert_int_equal(a->zero_count, b->zero_count);
  assert_int_equal(a->lo, b->lo);
  assert_int_equal(a->hi, b->hi);
  assert_memory_equal(a->counts, b->counts, sizeof(a->counts));
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* The nearest rank ceil(q * n), as hist.c defines it (a product within ulps of an integer is
 * that integer). */
static size_t nearest_rank(double q, size_t n) {
  double r = q * (double)n;
  double f = floor(r);
  size_t rank = (size_t)f + (r - f > r * 0x1p-50);
  return rank < 1 ? 1 : rank > n ? n : rank;
}

/* The schema's rules for a busy stage window, beside the encoder's own check. */
static void assert_stage_consistent(const em_stage_t *s) {
  assert_true(s->count > 0);
  assert_true(s->min_ns <= s->p50_ns);
  assert_true(s->p50_ns <= s->p90_ns);
  assert_true(s->p90_ns <= s->p99_ns);
  assert_true(s->p99_ns <= s->p999_ns);
  assert_true(s->p999_ns <= s->max_ns);
  assert_true(s->max_ns <= s->sum_ns);
  assert_true(s->scale >= EM_PROTO_MIN_SCALE && s->scale <= EM_HIST_SCALE);
  uint64_t total = s->zero_count;
  for (size_t i = 0; i < s->n_buckets; i++) {
    assert_true(s->buckets[i].count >= 1);
    if (i > 0) {
      assert_true(s->buckets[i].index > s->buckets[i - 1].index);
    }
    total += s->buckets[i].count;
  }
  assert_int_equal(total, s->count);
}

/* Encodes the stage in a data message, decodes it and checks every field came back. */
static void assert_stage_round_trips(const em_stage_t *s) {
  em_msg_t msg = {.kind = EM_MSG_DATA};
  msg.u.data.head.time_ns = UINT64_C(1795256100123456789);
  msg.u.data.head.session = 7;
  msg.u.data.seq = 1;
  msg.u.data.window_ns = 1000 * MS;
  msg.u.data.level = EM_LEVEL_NOMINAL;
  msg.u.data.stages = s;
  msg.u.data.n_stages = 1;
  uint8_t *buf = malloc(EM_PROTO_MAX_MESSAGE_BYTES);
  void *scratch = malloc(EM_PROTO_SCRATCH_MAX);
  assert_non_null(buf);
  assert_non_null(scratch);
  size_t len = 0;
  int rc = em_proto_encode(&msg, buf, EM_PROTO_MAX_MESSAGE_BYTES, &len);
  if (rc != 0) {
    print_error("em_proto_encode: %s\n", em_proto_strerror(rc));
  }
  assert_int_equal(rc, 0);
  em_msg_t back;
  size_t err_at = 0;
  rc = em_proto_decode(buf, len, &back, scratch, EM_PROTO_SCRATCH_MAX, &err_at);
  assert_int_equal(rc, 0);
  assert_int_equal(back.kind, EM_MSG_DATA);
  assert_int_equal(back.u.data.n_stages, 1);
  const em_stage_t *d = &back.u.data.stages[0];
  assert_string_equal(d->name, s->name);
  assert_int_equal(d->count, s->count);
  if (s->count > 0) {
    assert_int_equal(d->sum_ns, s->sum_ns);
    assert_int_equal(d->min_ns, s->min_ns);
    assert_int_equal(d->max_ns, s->max_ns);
    assert_int_equal(d->p50_ns, s->p50_ns);
    assert_int_equal(d->p90_ns, s->p90_ns);
    assert_int_equal(d->p99_ns, s->p99_ns);
    assert_int_equal(d->p999_ns, s->p999_ns);
    assert_int_equal(d->scale, s->scale);
    assert_int_equal(d->zero_count, s->zero_count);
  }
  assert_int_equal(d->n_buckets, s->n_buckets);
  for (size_t i = 0; i < s->n_buckets; i++) {
    assert_int_equal(d->buckets[i].index, s->buckets[i].index);
    assert_int_equal(d->buckets[i].count, s->buckets[i].count);
  }
  free(scratch);
  free(buf);
}

/* assert_stage_consistent() and assert_stage_round_trips(): a window as the agent sends it. */
static void assert_stage_sound(const em_stage_t *s) {
  assert_stage_consistent(s);
  assert_stage_round_trips(s);
}

/* ---- Index ---- */

typedef struct {
  uint64_t ns;
  int32_t index;
} index_case_t;

/* Values from ceil(64 * log2(ns)) - 1, computed exactly (Python integers: bitlen(ns^64)). */
static const index_case_t index_cases[] = {
    {1, -1},
    {2, 63},
    {3, 101},
    {4, 127},
    {5, 148},
    {6, 165},
    {7, 179},
    {8, 191},
    {9, 202},
    {100, 425},
    {127, 447},
    {128, 447},
    {129, 448},
    {1000, 637},
    {1023, 639},
    {1024, 639},
    {1025, 640},
    {1000000, 1275},
    {8000000, 1467},
    {1000000000, 1913},
    {P2(40) - 1, 2559},
    {P2(40), 2559},
};

static void hist_index_maps_known_values(void **state) {
  (void)state;
  for (size_t i = 0; i < ARRAY_LEN(index_cases); i++) {
    int32_t got = em_hist_index(index_cases[i].ns);
    if (got != index_cases[i].index) {
      print_error("index(%llu) = %d, want %d\n", (unsigned long long)index_cases[i].ns, got,
                  index_cases[i].index);
    }
    assert_int_equal(got, index_cases[i].index);
  }
}

/*
 * 2^k is the upper edge of bucket 64k - 1 (an exact boundary, handled with integers), and
 * 2^k + 1 the first value of bucket 64k once it is inside the first sub-bucket, i.e. for
 * k >= 7 (1 + 2^-k < 2^(1/64)); below that 2^k + 1 lands further up (5 -> 148, 9 -> 202).
 */
static void hist_index_puts_powers_of_two_at_bucket_tops(void **state) {
  (void)state;
  for (int k = 0; k <= 40; k++) {
    assert_int_equal(em_hist_index(P2(k)), 64 * k - 1);
    if (k >= 7 && k < 40) {
      assert_int_equal(em_hist_index(P2(k) + 1), 64 * k);
      assert_int_equal(em_hist_index(P2(k) - 1), 64 * k - 1);
    }
  }
}

/*
 * At every bucket boundary 2^(i/64) of the range, the integers around it map as the exact
 * reference says. exp2() only picks the candidates; the reference decides.
 */
static void hist_index_is_exact_at_every_boundary(void **state) {
  (void)state;
  size_t checked = 0;
  for (int32_t i = EM_HIST_MIN_INDEX + 1; i <= EM_HIST_MAX_INDEX + 1; i++) {
    double b = floor(exp2((double)i / 64.0));
    for (int delta = -1; delta <= 2; delta++) {
      double v = b + delta;
      if (v < 1 || v > (double)P2(40)) {
        continue;
      }
      uint64_t ns = (uint64_t)v;
      int32_t want = ref_index6(ns);
      int32_t got = em_hist_index(ns);
      if (got != want) {
        print_error("index(%llu) = %d, want %d\n", (unsigned long long)ns, got, want);
      }
      assert_int_equal(got, want);
      checked++;
    }
  }
  assert_true(checked > 4 * 2000);
}

static void hist_index_matches_reference_on_random_values(void **state) {
  (void)state;
  em_rng_t r;
  em_rng_seed(&r, 11);
  for (int n = 0; n < 20000; n++) {
    uint64_t ns = draw_log_uniform(&r);
    assert_int_equal(em_hist_index(ns), ref_index6(ns));
  }
}

static void hist_index_is_monotonic_over_a_sweep(void **state) {
  (void)state;
  int32_t prev = em_hist_index(1);
  for (uint64_t ns = 2; ns <= P2(22); ns++) {
    int32_t i = em_hist_index(ns);
    assert_true(i >= prev);
    assert_true(ns < 128 || i <= prev + 1); /* past 2^7 consecutive integers skip no bucket */
    prev = i;
  }
  for (double v = (double)P2(22); v < (double)P2(42); v *= 1.0001) {
    int32_t i = em_hist_index((uint64_t)v);
    assert_true(i >= prev);
    assert_true(i <= EM_HIST_MAX_INDEX);
    prev = i;
  }
  assert_int_equal(prev, EM_HIST_MAX_INDEX);
}

static void hist_index_clamps_at_both_ends(void **state) {
  (void)state;
  static const index_case_t cases[] = {
      {0, EM_HIST_MIN_INDEX},          {1, EM_HIST_MIN_INDEX},      {P2(40), EM_HIST_MAX_INDEX},
      {P2(40) + 1, EM_HIST_MAX_INDEX}, {P2(41), EM_HIST_MAX_INDEX}, {P2(63), EM_HIST_MAX_INDEX},
      {UINT64_MAX, EM_HIST_MAX_INDEX},
  };
  for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
    assert_int_equal(em_hist_index(cases[i].ns), cases[i].index);
  }
  em_hist_t *h = new_hist();
  em_hist_record(h, UINT64_MAX);
  em_hist_record(h, P2(50));
  assert_int_equal(h->counts[EM_HIST_BUCKETS - 1], 2);
  assert_int_equal(h->lo, EM_HIST_MAX_INDEX);
  assert_int_equal(h->hi, EM_HIST_MAX_INDEX);
  assert_int_equal(h->max_ns, UINT64_MAX); /* max stays exact */
  /* Both are in the last bucket, whose midpoint (2^(2559.5/64), below 2^40) clamps to min. */
  assert_int_equal(em_hist_quantile(h, 0.5), P2(50));
  assert_int_equal(em_hist_quantile(h, 1.0), P2(50));
  free(h);
}

/* ---- Percentiles ---- */

typedef struct {
  const char *name;
  uint64_t (*draw)(em_rng_t *r);
  uint64_t seed;
} workload_t;

static const workload_t workloads[] = {
    {"uniform 1..50 ms", draw_uniform, 1},
    {"lognormal median 8 ms sigma 0.5", draw_lognormal, 2},
    {"bimodal 90% 5 ms / 10% 40 ms", draw_bimodal, 3},
};

#define PCT_SAMPLES 1000000

static void hist_percentiles_within_half_percent_of_exact(void **state) {
  (void)state;
  static const double qs[] = {0.5, 0.9, 0.99, 0.999};
  uint64_t *v = malloc(PCT_SAMPLES * sizeof(*v));
  assert_non_null(v);
  em_hist_t *h = new_hist();
  for (size_t w = 0; w < ARRAY_LEN(workloads); w++) {
    em_rng_t r;
    em_rng_seed(&r, workloads[w].seed);
    em_hist_reset(h);
    for (size_t i = 0; i < PCT_SAMPLES; i++) {
      v[i] = workloads[w].draw(&r);
      em_hist_record(h, v[i]);
    }
    qsort(v, PCT_SAMPLES, sizeof(*v), cmp_u64);
    assert_int_equal(h->count, PCT_SAMPLES);
    assert_int_equal(h->min_ns, v[0]);
    assert_int_equal(h->max_ns, v[PCT_SAMPLES - 1]);
    for (size_t k = 0; k < ARRAY_LEN(qs); k++) {
      uint64_t exact = v[nearest_rank(qs[k], PCT_SAMPLES) - 1];
      uint64_t got = em_hist_quantile(h, qs[k]);
      double err = fabs((double)got - (double)exact) / (double)exact;
      print_message("%-32s p%-5g exact %10llu got %10llu rel.err %.4f%%\n", workloads[w].name,
                    qs[k] * 100, (unsigned long long)exact, (unsigned long long)got, err * 100);
      assert_true(err <= MAX_REL_ERROR);
      /* Stronger: the reported value is in the exact value's bucket. */
      assert_int_equal(em_hist_index(got), em_hist_index(exact));
    }
  }
  free(h);
  free(v);
}

typedef struct {
  double q;
  size_t rank; /* 1-based, among 200 values in distinct buckets */
} rank_case_t;

/* The nearest rank ceil(q * n): binary rounding of q must not move it (0.035 * 200 = 7). */
static void hist_quantile_uses_nearest_rank(void **state) {
  (void)state;
  static const rank_case_t cases[] = {
      {1e-9, 1},  {0.005, 1},  {0.0051, 2},  {0.035, 7},   {0.5, 100},
      {0.9, 180}, {0.99, 198}, {0.995, 199}, {0.999, 200}, {1.0, 200},
  };
  uint64_t v[200];
  em_hist_t *h = new_hist();
  for (size_t i = 0; i < ARRAY_LEN(v); i++) {
    v[i] = (uint64_t)llround(1000.0 * pow(1.02, (double)i)); /* ratio 1.02: distinct buckets */
    if (i > 0) {
      assert_true(em_hist_index(v[i]) > em_hist_index(v[i - 1]));
    }
    em_hist_record(h, v[i]);
  }
  for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
    uint64_t got = em_hist_quantile(h, cases[i].q);
    assert_int_equal(em_hist_index(got), em_hist_index(v[cases[i].rank - 1]));
    assert_true(got >= v[0] && got <= v[199]);
  }
  free(h);
}

static void hist_quantile_of_empty_is_zero(void **state) {
  (void)state;
  em_hist_t *h = new_hist();
  assert_int_equal(em_hist_quantile(h, 0.5), 0);
  assert_int_equal(em_hist_quantile(h, 1.0), 0);
  free(h);
}

/* ---- Merge and reset ---- */

static void record_workload(em_hist_t *h, em_rng_t *r, size_t n, uint64_t (*draw)(em_rng_t *)) {
  for (size_t i = 0; i < n; i++) {
    em_hist_record(h, draw(r));
  }
}

static void hist_merge_equals_union(void **state) {
  (void)state;
  em_hist_t *a = new_hist(), *b = new_hist(), *u = new_hist(), *e = new_hist();
  em_rng_t ra, rb;
  em_rng_seed(&ra, 21);
  em_rng_seed(&rb, 22);
  for (int i = 0; i < 20000; i++) {
    uint64_t x = draw_lognormal(&ra);
    em_hist_record(a, x);
    em_hist_record(u, x);
  }
  static const uint64_t extremes[] = {0, 0, 1, 2, P2(40), UINT64_MAX};
  for (size_t i = 0; i < ARRAY_LEN(extremes); i++) {
    em_hist_record(b, extremes[i]);
    em_hist_record(u, extremes[i]);
  }
  for (int i = 0; i < 20000; i++) {
    uint64_t x = draw_log_uniform(&rb);
    em_hist_record(b, x);
    em_hist_record(u, x);
  }
  em_hist_merge(a, b);
  assert_hist_equal(a, u);

  /* Merging into an empty histogram copies; merging an empty one changes nothing. */
  em_hist_merge(e, u);
  assert_hist_equal(e, u);
  em_hist_t *empty = new_hist();
  em_hist_merge(e, empty);
  assert_hist_equal(e, u);

  /* A histogram merged into itself is the histogram of every span twice. */
  em_hist_t *twice = new_hist(), *self = new_hist();
  em_rng_seed(&ra, 23);
  for (int i = 0; i < 5000; i++) {
    uint64_t x = draw_bimodal(&ra);
    em_hist_record(self, x);
    em_hist_record(twice, x);
    em_hist_record(twice, x);
  }
  em_hist_merge(self, self);
  assert_hist_equal(self, twice);
  free(self);
  free(twice);
  free(empty);
  free(a);
  free(b);
  free(u);
  free(e);
}

static void hist_merge_saturates_bucket_counts(void **state) {
  (void)state;
  em_hist_t *a = new_hist(), *b = new_hist();
  em_hist_record(a, 1000);
  em_hist_record(b, 1000);
  size_t slot = (size_t)(em_hist_index(1000) - EM_HIST_MIN_INDEX);
  a->counts[slot] = UINT32_MAX - 1;
  b->counts[slot] = 5;
  em_hist_merge(a, b);
  assert_int_equal(a->counts[slot], UINT32_MAX);
  free(a);
  free(b);
}

static void hist_reset_equals_fresh(void **state) {
  (void)state;
  em_hist_t *h = new_hist(), *fresh = new_hist();
  em_rng_t r;
  em_rng_seed(&r, 31);
  record_workload(h, &r, 100000, draw_log_uniform);
  em_hist_record(h, 0);
  em_hist_record(h, 1);
  em_hist_record(h, UINT64_MAX);
  assert_int_equal(h->lo, EM_HIST_MIN_INDEX);
  assert_int_equal(h->hi, EM_HIST_MAX_INDEX);
  em_hist_reset(h);
  assert_hist_equal(h, fresh);
  /* Merged buckets are covered too. */
  em_hist_t *other = new_hist();
  record_workload(other, &r, 1000, draw_bimodal);
  em_hist_merge(h, other);
  em_hist_reset(h);
  assert_hist_equal(h, fresh);
  /* And a reset of a reset (lo > hi) is fine. */
  em_hist_reset(h);
  assert_hist_equal(h, fresh);
  free(other);
  free(h);
  free(fresh);
}

/* Poisons every bucket outside [lo, hi]: reset must clear [lo, hi] and leave the rest. */
static void hist_reset_touches_only_lo_hi(void **state) {
  (void)state;
  em_hist_t *h = new_hist();
  em_rng_t r;
  em_rng_seed(&r, 32);
  record_workload(h, &r, 1000, draw_bimodal);
  int32_t lo = h->lo, hi = h->hi;
  assert_true(lo > EM_HIST_MIN_INDEX && hi < EM_HIST_MAX_INDEX && lo <= hi);
  const uint32_t poison = 0xa5a5a5a5u;
  for (int32_t i = EM_HIST_MIN_INDEX; i <= EM_HIST_MAX_INDEX; i++) {
    if (i < lo || i > hi) {
      h->counts[i - EM_HIST_MIN_INDEX] = poison;
    }
  }
  em_hist_reset(h);
  for (int32_t i = EM_HIST_MIN_INDEX; i <= EM_HIST_MAX_INDEX; i++) {
    uint32_t want = (i < lo || i > hi) ? poison : 0;
    assert_int_equal(h->counts[i - EM_HIST_MIN_INDEX], want);
  }
  assert_int_equal(h->count, 0);
  assert_true(h->lo > h->hi);
  free(h);
}

/* ---- Export ---- */

static void hist_to_stage_fills_fields_in_order(void **state) {
  (void)state;
  static const uint64_t spans[] = {3000, 1000, 0, 8 * MS, 2000, 1000};
  em_hist_t *h = new_hist();
  uint64_t sum = 0;
  for (size_t i = 0; i < ARRAY_LEN(spans); i++) {
    em_hist_record(h, spans[i]);
    sum += spans[i];
  }
  em_bucket_t b[16];
  em_stage_t s;
  int n = em_hist_to_stage(h, "infer", b, ARRAY_LEN(b), &s);
  assert_int_equal(n, 4);
  assert_string_equal(s.name, "infer");
  assert_int_equal(s.count, 6);
  assert_int_equal(s.sum_ns, sum);
  assert_int_equal(s.min_ns, 0);
  assert_int_equal(s.max_ns, 8 * MS);
  assert_int_equal(s.zero_count, 1);
  assert_int_equal(s.scale, 6);
  assert_ptr_equal(s.buckets, b);
  assert_int_equal(s.n_buckets, 4);
  static const struct {
    uint64_t ns;
    uint64_t count;
  } want[] = {{1000, 2}, {2000, 1}, {3000, 1}, {8 * MS, 1}};
  for (size_t i = 0; i < ARRAY_LEN(want); i++) {
    assert_int_equal(b[i].index, em_hist_index(want[i].ns));
    assert_int_equal(b[i].count, want[i].count);
  }
  /* Ranks: p50 is the 3rd of 6 (0, 1000, 1000, ...): a 1000 ns bucket; the rest the 6th. */
  assert_int_equal(s.p50_ns, em_hist_quantile(h, 0.5));
  assert_int_equal(em_hist_index(s.p50_ns), em_hist_index(1000));
  assert_int_equal(s.p90_ns, em_hist_quantile(h, 0.9));
  assert_int_equal(s.p99_ns, em_hist_quantile(h, 0.99));
  assert_int_equal(s.p999_ns, em_hist_quantile(h, 0.999));
  assert_int_equal(em_hist_index(s.p90_ns), em_hist_index(8 * MS));
  assert_true(s.p999_ns <= 8 * MS);
  assert_stage_sound(&s);
  free(h);
}

static void hist_to_stage_of_empty_has_name_and_zero_count(void **state) {
  (void)state;
  em_hist_t *h = new_hist();
  em_bucket_t b[4];
  em_stage_t s;
  memset(&s, 0xff, sizeof(s));
  assert_int_equal(em_hist_to_stage(h, "idle", b, ARRAY_LEN(b), &s), 0);
  assert_string_equal(s.name, "idle");
  assert_int_equal(s.count, 0);
  assert_int_equal(s.n_buckets, 0);
  assert_int_equal(s.sum_ns, 0);
  assert_int_equal(s.zero_count, 0);
  assert_stage_round_trips(&s);
  /* cap 0 is fine for an empty window. */
  assert_int_equal(em_hist_to_stage(h, "idle", NULL, 0, &s), 0);
  free(h);
}

static void hist_to_stage_refuses_bad_arguments(void **state) {
  (void)state;
  em_hist_t *h = new_hist();
  em_bucket_t b[4];
  em_stage_t s;
  em_hist_record(h, 1000);
  assert_int_equal(em_hist_to_stage(h, "x", b, 0, &s), -EINVAL);
  assert_int_equal(em_hist_to_stage(h, "x", NULL, 4, &s), -EINVAL);
  assert_int_equal(em_hist_to_stage(NULL, "x", b, 4, &s), -EINVAL);
  assert_int_equal(em_hist_to_stage(h, NULL, b, 4, &s), -EINVAL);
  assert_int_equal(em_hist_to_stage(h, "x", b, 4, NULL), -EINVAL);
  /* 1 ns is the top of bucket -1 at every scale: with longer spans, cap 1 cannot fit. */
  em_hist_record(h, 1);
  assert_int_equal(em_hist_to_stage(h, "x", b, 1, &s), -ENOSPC);
  assert_int_equal(em_hist_to_stage(h, "x", b, 2, &s), 2);
  free(h);
}

/*
 * The histogram of `samples` at `scale`, from the reference index of each sample (not from
 * the scale-6 buckets): sorted (index, count) pairs into out; returns how many.
 */
static size_t ref_buckets(const uint64_t *samples, size_t n, const ref_idx_t *idx, int scale,
                          em_bucket_t *out) {
  size_t m = 0;
  int32_t *keys = malloc(n * sizeof(*keys));
  assert_non_null(keys);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (samples[i] == 0) {
      continue;
    }
    if (scale >= 0) {
      keys[k++] = idx[i].at[scale];
    } else {
      keys[k++] = ref_index_at(samples[i], scale);
    }
  }
  qsort(keys, k, sizeof(*keys), cmp_i32);
  for (size_t i = 0; i < k; i++) {
    if (m > 0 && out[m - 1].index == keys[i]) {
      out[m - 1].count++;
    } else {
      out[m].index = keys[i];
      out[m].count = 1;
      m++;
    }
  }
  free(keys);
  return m;
}

#define DS_SAMPLES 20000

/*
 * For each cap, to_stage picks the highest scale whose histogram fits, and its buckets are
 * exactly the reference histogram of the same samples at that scale.
 */
static void hist_to_stage_downscales_to_fit_cap(void **state) {
  (void)state;
  static const size_t caps[] = {2048, 1000, 500, 200, 100, 50, 30, 20, 10, 5, 3, 2, 1};
  uint64_t *samples = malloc(DS_SAMPLES * sizeof(*samples));
  ref_idx_t *idx = malloc(DS_SAMPLES * sizeof(*idx));
  em_bucket_t *ref = malloc(DS_SAMPLES * sizeof(*ref));
  em_bucket_t *got = malloc(EM_PROTO_MAX_BUCKETS * sizeof(*got));
  assert_non_null(samples);
  assert_non_null(idx);
  assert_non_null(ref);
  assert_non_null(got);
  em_hist_t *h = new_hist();
  em_rng_t r;
  em_rng_seed(&r, 41);
  for (size_t i = 0; i < DS_SAMPLES; i++) {
    samples[i] = i % 97 == 0 ? 0 : lognormal_ns(&r, 1e6, 1.5); /* a few zeros, 2^11..2^29 */
    em_hist_record(h, samples[i]);
    if (samples[i] > 0) {
      ref_indices(samples[i], idx[i].at);
    }
  }
  for (size_t c = 0; c < ARRAY_LEN(caps); c++) {
    /* The expected scale: the highest with at most caps[c] reference buckets. */
    int scale = EM_HIST_SCALE;
    size_t m = ref_buckets(samples, DS_SAMPLES, idx, scale, ref);
    while (m > caps[c]) {
      scale--;
      assert_true(scale >= EM_PROTO_MIN_SCALE);
      m = ref_buckets(samples, DS_SAMPLES, idx, scale, ref);
    }
    em_stage_t s;
    int n = em_hist_to_stage(h, "pre", got, caps[c], &s);
    print_message("cap %4zu: scale %3d, %4d buckets\n", caps[c], s.scale, n);
    assert_int_equal(n, (int)m);
    assert_int_equal(s.scale, scale);
    assert_int_equal(s.count, DS_SAMPLES);
    assert_int_equal(s.zero_count, (DS_SAMPLES + 96) / 97);
    for (size_t i = 0; i < m; i++) {
      assert_int_equal(got[i].index, ref[i].index);
      assert_int_equal(got[i].count, ref[i].count);
    }
    assert_stage_sound(&s);
  }
  free(h);
  free(got);
  free(ref);
  free(idx);
  free(samples);
}

/* A window with more non-empty buckets than the schema carries goes out one scale lower. */
static void hist_to_stage_fits_every_bucket_into_the_schema(void **state) {
  (void)state;
  em_hist_t *h = new_hist();
  for (uint64_t ns = 1; ns <= P2(13); ns++) {
    em_hist_record(h, ns);
  }
  for (int32_t i = 64 * 13; i <= EM_HIST_MAX_INDEX; i++) {
    em_hist_record(h, (uint64_t)floor(exp2(((double)i + 0.5) / 64.0)));
  }
  size_t nonempty = 0;
  for (size_t i = 0; i < EM_HIST_BUCKETS; i++) {
    nonempty += h->counts[i] != 0;
  }
  assert_true(nonempty > EM_PROTO_MAX_BUCKETS);
  em_bucket_t *b = malloc(EM_PROTO_MAX_BUCKETS * sizeof(*b));
  assert_non_null(b);
  em_stage_t s;
  int n = em_hist_to_stage(h, "all", b, EM_PROTO_MAX_BUCKETS, &s);
  assert_true(n > 0 && n <= (int)EM_PROTO_MAX_BUCKETS);
  assert_int_equal(s.scale, EM_HIST_SCALE - 1);
  assert_int_equal(s.count, h->count);
  assert_stage_sound(&s);
  free(b);
  free(h);
}

/* ---- Edge cases ---- */

static void hist_records_zero_duration_spans(void **state) {
  (void)state;
  em_hist_t *h = new_hist();
  for (int i = 0; i < 3; i++) {
    em_hist_record(h, 0);
  }
  assert_int_equal(h->count, 3);
  assert_int_equal(h->zero_count, 3);
  assert_int_equal(h->sum_ns, 0);
  assert_int_equal(h->min_ns, 0);
  assert_int_equal(h->max_ns, 0);
  assert_true(h->lo > h->hi);
  assert_int_equal(em_hist_quantile(h, 0.5), 0);
  assert_int_equal(em_hist_quantile(h, 1.0), 0);
  em_bucket_t b[4];
  em_stage_t s;
  assert_int_equal(em_hist_to_stage(h, "z", b, ARRAY_LEN(b), &s), 0);
  assert_int_equal(s.count, 3);
  assert_int_equal(s.zero_count, 3);
  assert_int_equal(s.n_buckets, 0);
  assert_stage_sound(&s);
  /* With longer spans: ranks within the zeros report 0, above them the spans' buckets. */
  em_hist_record(h, 5 * MS);
  em_hist_record(h, 5 * MS);
  assert_int_equal(em_hist_quantile(h, 0.6), 0);       /* rank 3 of 5 */
  assert_int_equal(em_hist_quantile(h, 0.61), 5 * MS); /* rank 4: midpoint clamped to max */
  assert_int_equal(em_hist_to_stage(h, "z", b, ARRAY_LEN(b), &s), 1);
  assert_int_equal(s.p50_ns, 0);
  assert_stage_sound(&s);
  free(h);
}

static void hist_one_sample_reports_it_at_every_percentile(void **state) {
  (void)state;
  static const uint64_t values[] = {
      0, 1, 2, 3, 999, 1000, 8 * MS, P2(40) - 1, P2(40), P2(40) + 12345, P2(62), UINT64_MAX};
  em_hist_t *h = new_hist();
  for (size_t i = 0; i < ARRAY_LEN(values); i++) {
    em_hist_reset(h);
    em_hist_record(h, values[i]);
    em_bucket_t b[2];
    em_stage_t s;
    int n = em_hist_to_stage(h, "one", b, ARRAY_LEN(b), &s);
    assert_int_equal(n, values[i] == 0 ? 0 : 1);
    assert_int_equal(s.count, 1);
    assert_int_equal(s.sum_ns, values[i]);
    assert_int_equal(s.min_ns, values[i]);
    assert_int_equal(s.max_ns, values[i]);
    assert_int_equal(s.p50_ns, values[i]);
    assert_int_equal(s.p90_ns, values[i]);
    assert_int_equal(s.p99_ns, values[i]);
    assert_int_equal(s.p999_ns, values[i]);
    assert_stage_round_trips(&s);
  }
  free(h);
}

static void hist_sum_saturates(void **state) {
  (void)state;
  em_hist_t *h = new_hist();
  em_hist_record(h, UINT64_MAX / 2);
  em_hist_record(h, UINT64_MAX / 2);
  assert_int_equal(h->sum_ns, UINT64_MAX - 1);
  em_hist_record(h, UINT64_MAX / 2);
  assert_int_equal(h->sum_ns, UINT64_MAX);
  em_hist_record(h, 1);
  assert_int_equal(h->sum_ns, UINT64_MAX);
  /* Merging saturates too. */
  em_hist_t *g = new_hist();
  em_hist_record(g, 5);
  em_hist_merge(g, h);
  assert_int_equal(g->sum_ns, UINT64_MAX);
  em_bucket_t b[4];
  em_stage_t s;
  assert_true(em_hist_to_stage(g, "sat", b, ARRAY_LEN(b), &s) > 0);
  assert_true(s.sum_ns >= s.max_ns);
  assert_stage_sound(&s);
  free(g);
  free(h);
}

/*
 * A bucket at UINT32_MAX stays there; the exported window then counts what the buckets hold,
 * so it stays self-consistent (zero_count + sum of counts == count) and encodes.
 */
static void hist_bucket_count_saturates(void **state) {
  (void)state;
  em_hist_t *h = new_hist();
  em_hist_record(h, 1000);
  size_t slot = (size_t)(em_hist_index(1000) - EM_HIST_MIN_INDEX);
  h->counts[slot] = UINT32_MAX - 1; /* as if 2^32 - 2 spans of 1000 ns */
  h->count = UINT32_MAX - 1;
  em_hist_record(h, 1000);
  assert_int_equal(h->counts[slot], UINT32_MAX);
  em_hist_record(h, 1000);
  assert_int_equal(h->counts[slot], UINT32_MAX);
  assert_int_equal(h->count, (uint64_t)UINT32_MAX + 1);
  em_hist_record(h, 0);
  em_bucket_t b[4];
  em_stage_t s;
  assert_int_equal(em_hist_to_stage(h, "sat", b, ARRAY_LEN(b), &s), 1);
  assert_int_equal(b[0].count, UINT32_MAX);
  assert_int_equal(s.count, (uint64_t)UINT32_MAX + 1);
  assert_stage_sound(&s);
  free(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(hist_index_maps_known_values),
      cmocka_unit_test(hist_index_puts_powers_of_two_at_bucket_tops),
      cmocka_unit_test(hist_index_is_exact_at_every_boundary),
      cmocka_unit_test(hist_index_matches_reference_on_random_values),
      cmocka_unit_test(hist_index_is_monotonic_over_a_sweep),
      cmocka_unit_test(hist_index_clamps_at_both_ends),
      cmocka_unit_test(hist_percentiles_within_half_percent_of_exact),
      cmocka_unit_test(hist_quantile_uses_nearest_rank),
      cmocka_unit_test(hist_quantile_of_empty_is_zero),
      cmocka_unit_test(hist_merge_equals_union),
      cmocka_unit_test(hist_merge_saturates_bucket_counts),
      cmocka_unit_test(hist_reset_equals_fresh),
      cmocka_unit_test(hist_reset_touches_only_lo_hi),
      cmocka_unit_test(hist_to_stage_fills_fields_in_order),
      cmocka_unit_test(hist_to_stage_of_empty_has_name_and_zero_count),
      cmocka_unit_test(hist_to_stage_refuses_bad_arguments),
      cmocka_unit_test(hist_to_stage_downscales_to_fit_cap),
      cmocka_unit_test(hist_to_stage_fits_every_bucket_into_the_schema),
      cmocka_unit_test(hist_records_zero_duration_spans),
      cmocka_unit_test(hist_one_sample_reports_it_at_every_percentile),
      cmocka_unit_test(hist_sum_saturates),
      cmocka_unit_test(hist_bucket_count_saturates),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
