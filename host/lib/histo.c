/*
 * histo.c - host-side merge of base-2 exponential histograms (em_histo_t), see histo.h.
 *
 * Layout. counts[k] holds bucket index `offset + k` at `scale`, for k < len; the array covers
 * exactly the index range seen so far (both ends hold a non-empty bucket, or were non-empty
 * before a fold). Bucket i at scale s covers (base^i, base^(i+1)], base = 2^(2^-s).
 *
 * Merging. A source (a stage window or another em_histo_t) at scale s_src merges at
 * S = min(scale, s_src); an index i at a finer scale s maps to floor(i / 2^(s - S)), an
 * arithmetic shift right (floor for negatives too), which is exact: every bucket at scale s
 * lies inside one bucket at scale S. When the union of both index ranges at S would exceed
 * EM_HISTO_MAX_SPAN buckets, S is lowered one step at a time (each step halves the span)
 * down to EM_PROTO_MIN_SCALE. Every merge first computes the target scale and range, then
 * (re)builds the array, then adds: a failure (-EINVAL, -ENOMEM) leaves the histogram as it was.
 *
 * Values. Quantiles walk the zero bucket then the buckets to the one holding the nearest rank
 * ceil(q * count) (the agent's convention, firmware/agent/spans/hist.c), and interpolate inside it
 * log-linearly: the r-th of c values in bucket i is reported as base^(i + (r - 0.5) / c), the
 * geometric midpoint when c == 1 (what the agent reports), clamped to [min, max]. The variance
 * places each bucket's values at its geometric midpoint base^(i + 0.5) (clamped to [min, max])
 * and the zero bucket's at 0.
 *
 * Owns: one heap array per histogram (at most EM_HISTO_MAX_SPAN counts). Not thread-safe.
 */
#include "histo.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct em_histo {
  uint64_t count;      /* Values merged, zero bucket included (saturating). */
  uint64_t sum_ns;     /* Exact sum, saturating at UINT64_MAX. */
  uint64_t min_ns;     /* UINT64_MAX while empty. */
  uint64_t max_ns;     /* 0 while empty. */
  uint64_t zero_count; /* Values of 0 ns. */
  int32_t scale;       /* Common scale of counts[]; EM_PROTO_MAX_SCALE while len == 0. */
  int32_t offset;      /* Bucket index of counts[0]. */
  size_t len;          /* Buckets in counts[]; 0 when no bucket is held. */
  uint64_t *counts;    /* len counts, heap. */
};

/* A source of buckets to merge: either a window's sparse list or a histogram's dense array. */
typedef struct {
  int32_t scale;
  int64_t lo, hi; /* Index range at `scale`; lo > hi when there is no bucket. */
  const em_bucket_t *sparse;
  size_t n_sparse;
  const em_histo_t *dense;
} source_t;

static uint64_t add_sat(uint64_t a, uint64_t b) {
  uint64_t s = a + b;
  return s < a ? UINT64_MAX : s;
}

/* floor(i / 2^k) for k >= 0, without relying on the sign behaviour of >> on negatives. */
static int64_t shift_floor(int64_t i, int32_t k) {
  if (k <= 0) {
    return i;
  }
  if (k > 62) {
    return i < 0 ? -1 : 0;
  }
  return i >= 0 ? i >> k : -((-i - 1) >> k) - 1;
}

/* base^x at `scale`: 2^(x * 2^-scale). */
static double pow_base(int32_t scale, double x) {
  return exp2(ldexp(x, -scale));
}

int em_histo_new(em_histo_t **out) {
  if (!out) {
    return -EINVAL;
  }
  em_histo_t *h = calloc(1, sizeof(*h));
  if (!h) {
    return -ENOMEM;
  }
  h->min_ns = UINT64_MAX;
  h->scale = EM_PROTO_MAX_SCALE;
  *out = h;
  return 0;
}

void em_histo_free(em_histo_t *h) {
  if (!h) {
    return;
  }
  free(h->counts);
  free(h);
}

/*
 * The scale and index range the histogram must have to hold both itself and `src`: the
 * coarser of the two scales, lowered until the union of the ranges spans at most
 * EM_HISTO_MAX_SPAN buckets. Returns 0, or -EINVAL when even EM_PROTO_MIN_SCALE is too fine
 * (indices no real duration reaches).
 */
static int plan(const em_histo_t *h, const source_t *src, int32_t *scale, int64_t *lo,
                int64_t *hi) {
  int32_t s = h->len > 0 && h->scale < src->scale ? h->scale : src->scale;
  for (;; s--) {
    int64_t l = INT64_MAX, u = INT64_MIN;
    if (h->len > 0) {
      l = shift_floor(h->offset, h->scale - s);
      u = shift_floor((int64_t)h->offset + (int64_t)h->len - 1, h->scale - s);
    }
    if (src->lo <= src->hi) {
      int64_t sl = shift_floor(src->lo, src->scale - s);
      int64_t su = shift_floor(src->hi, src->scale - s);
      l = sl < l ? sl : l;
      u = su > u ? su : u;
    }
    if (u - l + 1 <= (int64_t)EM_HISTO_MAX_SPAN) {
      *scale = s;
      *lo = l;
      *hi = u;
      return 0;
    }
    if (s <= EM_PROTO_MIN_SCALE) {
      return -EINVAL;
    }
  }
}

/*
 * Makes counts[] cover [lo, hi] at `scale` (scale <= h->scale), folding the buckets held.
 * Reuses the array when nothing changes. Returns 0 or -ENOMEM (h unchanged).
 */
static int reshape(em_histo_t *h, int32_t scale, int64_t lo, int64_t hi) {
  size_t len = (size_t)(hi - lo + 1);
  if (h->len > 0 && scale == h->scale && lo == h->offset && len == h->len) {
    return 0;
  }
  uint64_t *counts = calloc(len, sizeof(*counts));
  if (!counts) {
    return -ENOMEM;
  }
  for (size_t k = 0; k < h->len; k++) {
    int64_t i = shift_floor((int64_t)h->offset + (int64_t)k, h->scale - scale);
    counts[i - lo] = add_sat(counts[i - lo], h->counts[k]);
  }
  free(h->counts);
  h->counts = counts;
  h->len = len;
  h->offset = (int32_t)lo;
  h->scale = scale;
  return 0;
}

/* Adds the summary figures of a source with count > 0. */
static void add_summary(em_histo_t *h, uint64_t count, uint64_t sum_ns, uint64_t min_ns,
                        uint64_t max_ns, uint64_t zero_count) {
  h->count = add_sat(h->count, count);
  h->sum_ns = add_sat(h->sum_ns, sum_ns);
  h->zero_count = add_sat(h->zero_count, zero_count);
  if (min_ns < h->min_ns) {
    h->min_ns = min_ns;
  }
  if (max_ns > h->max_ns) {
    h->max_ns = max_ns;
  }
}

/* Plans, reshapes and adds src's buckets. Returns 0, -EINVAL or -ENOMEM (h unchanged). */
static int absorb(em_histo_t *h, const source_t *src) {
  if (src->lo > src->hi) {
    return 0; /* only the zero bucket: nothing to place */
  }
  int32_t scale = 0;
  int64_t lo = 0, hi = 0;
  int rc = plan(h, src, &scale, &lo, &hi);
  if (rc != 0) {
    return rc;
  }
  rc = reshape(h, scale, lo, hi);
  if (rc != 0) {
    return rc;
  }
  int32_t k = src->scale - scale;
  if (src->sparse && k == 0) { /* Same scale (the common case): no index mapping. */
    uint64_t *counts = h->counts;
    for (size_t j = 0; j < src->n_sparse; j++) {
      size_t i = (size_t)((int64_t)src->sparse[j].index - lo);
      counts[i] = add_sat(counts[i], src->sparse[j].count);
    }
  } else if (src->sparse) {
    for (size_t j = 0; j < src->n_sparse; j++) {
      int64_t i = shift_floor(src->sparse[j].index, k) - lo;
      h->counts[i] = add_sat(h->counts[i], src->sparse[j].count);
    }
  } else {
    const em_histo_t *d = src->dense;
    for (size_t j = 0; j < d->len; j++) {
      int64_t i = shift_floor((int64_t)d->offset + (int64_t)j, k) - lo;
      h->counts[i] = add_sat(h->counts[i], d->counts[j]);
    }
  }
  return 0;
}

/*
 * Checks a window before anything changes: scale in range, buckets strictly ascending with
 * counts >= 1, zero_count + bucket counts == count (without overflow), min <= max.
 */
static int check_stage(const em_stage_t *s) {
  if (s->scale < EM_PROTO_MIN_SCALE || s->scale > EM_PROTO_MAX_SCALE) {
    return -EINVAL;
  }
  if (s->n_buckets > 0 && !s->buckets) {
    return -EINVAL;
  }
  if (s->min_ns > s->max_ns) {
    return -EINVAL;
  }
  uint64_t total = s->zero_count;
  for (size_t j = 0; j < s->n_buckets; j++) {
    const em_bucket_t *b = &s->buckets[j];
    if (b->count == 0 || (j > 0 && b->index <= s->buckets[j - 1].index)) {
      return -EINVAL;
    }
    if (total + b->count < total) {
      return -EINVAL;
    }
    total += b->count;
  }
  return total == s->count ? 0 : -EINVAL;
}

int em_histo_add_stage(em_histo_t *h, const em_stage_t *s) {
  if (!h) {
    return -EINVAL;
  }
  return em_histo_add_stage_each(&h, 1, s);
}

int em_histo_add_stage_each(em_histo_t *const *hs, size_t n, const em_stage_t *s) {
  if (!hs || !s) {
    return -EINVAL;
  }
  if (s->count == 0) {
    return 0;
  }
  int rc = check_stage(s);
  if (rc != 0) {
    return rc;
  }
  source_t src = {
      .scale = s->scale, .lo = 1, .hi = 0, .sparse = s->buckets, .n_sparse = s->n_buckets};
  if (s->n_buckets > 0) {
    src.lo = s->buckets[0].index;
    src.hi = s->buckets[s->n_buckets - 1].index;
  }
  for (size_t i = 0; i < n; i++) {
    if (!hs[i]) {
      continue;
    }
    rc = absorb(hs[i], &src);
    if (rc != 0) {
      return rc;
    }
    add_summary(hs[i], s->count, s->sum_ns, s->min_ns, s->max_ns, s->zero_count);
  }
  return 0;
}

int em_histo_merge(em_histo_t *dst, const em_histo_t *src) {
  if (!dst || !src) {
    return -EINVAL;
  }
  if (src->count == 0) {
    return 0;
  }
  if (dst == src) { /* doubling: same scale and range, no allocation */
    for (size_t k = 0; k < dst->len; k++) {
      dst->counts[k] = add_sat(dst->counts[k], dst->counts[k]);
    }
    add_summary(dst, dst->count, dst->sum_ns, dst->min_ns, dst->max_ns, dst->zero_count);
    return 0;
  }
  source_t s = {.scale = src->scale, .lo = 1, .hi = 0, .dense = src};
  if (src->len > 0) {
    s.lo = src->offset;
    s.hi = (int64_t)src->offset + (int64_t)src->len - 1;
  }
  int rc = absorb(dst, &s);
  if (rc != 0) {
    return rc;
  }
  add_summary(dst, src->count, src->sum_ns, src->min_ns, src->max_ns, src->zero_count);
  return 0;
}

uint64_t em_histo_count(const em_histo_t *h) {
  return h ? h->count : 0;
}

uint64_t em_histo_sum_ns(const em_histo_t *h) {
  return h ? h->sum_ns : 0;
}

uint64_t em_histo_min_ns(const em_histo_t *h) {
  return h && h->count > 0 ? h->min_ns : 0;
}

uint64_t em_histo_max_ns(const em_histo_t *h) {
  return h && h->count > 0 ? h->max_ns : 0;
}

int32_t em_histo_scale(const em_histo_t *h) {
  return h ? h->scale : EM_PROTO_MAX_SCALE;
}

uint64_t em_histo_zero_count(const em_histo_t *h) {
  return h ? h->zero_count : 0;
}

double em_histo_mean_ns(const em_histo_t *h) {
  if (!h || h->count == 0) {
    return 0;
  }
  return (double)h->sum_ns / (double)h->count;
}

static double clamp(const em_histo_t *h, double v) {
  if (v < (double)h->min_ns) {
    return (double)h->min_ns;
  }
  if (v > (double)h->max_ns) {
    return (double)h->max_ns;
  }
  return v;
}

/* The value standing for bucket slot k in the variance: its geometric midpoint, clamped. */
static double bucket_mid(const em_histo_t *h, size_t k) {
  return clamp(h, pow_base(h->scale, (double)h->offset + (double)k + 0.5));
}

double em_histo_variance_ns2(const em_histo_t *h) {
  if (!h || h->count < 2) {
    return 0;
  }
  /* Two passes over the discretised distribution: its mean, then the squared deviations. */
  double n = (double)h->count;
  double total = 0;
  for (size_t k = 0; k < h->len; k++) {
    if (h->counts[k] > 0) {
      total += (double)h->counts[k] * bucket_mid(h, k);
    }
  }
  double mean = total / n;
  double ss = (double)h->zero_count * mean * mean;
  for (size_t k = 0; k < h->len; k++) {
    if (h->counts[k] > 0) {
      double dev = bucket_mid(h, k) - mean;
      ss += (double)h->counts[k] * dev * dev;
    }
  }
  return ss / (n - 1);
}

/*
 * The nearest rank ceil(q * n) in [1, n]. A product within a few ulps above an integer counts
 * as that integer (0.035 * 200 is 7.000000000000001 in binary64 but means rank 7).
 */
static uint64_t nearest_rank(double q, uint64_t n) {
  double r = q * (double)n;
  if (!(r > 1.0)) {
    return 1;
  }
  if (r >= (double)n) {
    return n;
  }
  double whole = floor(r);
  uint64_t rank = (uint64_t)whole;
  return r - whole <= r * 0x1p-50 ? rank : rank + 1;
}

double em_histo_quantile_ns(const em_histo_t *h, double q) {
  if (!h || h->count == 0) {
    return 0;
  }
  if (!(q >= 0)) {
    q = 0; /* NaN and negatives: the minimum */
  }
  if (q > 1) {
    q = 1;
  }
  uint64_t rank = nearest_rank(q, h->count);
  uint64_t seen = h->zero_count;
  if (seen >= rank) {
    return clamp(h, 0);
  }
  for (size_t k = 0; k < h->len; k++) {
    uint64_t c = h->counts[k];
    if (c == 0) {
      continue;
    }
    if (seen + c >= rank) {
      double frac = ((double)(rank - seen) - 0.5) / (double)c;
      return clamp(h, pow_base(h->scale, (double)h->offset + (double)k + frac));
    }
    seen += c;
  }
  return (double)h->max_ns; /* counts saturated: the walk fell short */
}

void em_histo_each(const em_histo_t *h, void (*fn)(void *ctx, double upper_ns, uint64_t count),
                   void *ctx) {
  if (!h || !fn) {
    return;
  }
  if (h->zero_count > 0) {
    fn(ctx, 0, h->zero_count);
  }
  for (size_t k = 0; k < h->len; k++) {
    if (h->counts[k] > 0) {
      fn(ctx, pow_base(h->scale, (double)h->offset + (double)k + 1), h->counts[k]);
    }
  }
}

void em_histo_each_index(const em_histo_t *h, void (*fn)(void *ctx, int32_t index, uint64_t count),
                         void *ctx) {
  if (!h || !fn) {
    return;
  }
  for (size_t k = 0; k < h->len; k++) {
    if (h->counts[k] > 0) {
      fn(ctx, (int32_t)((int64_t)h->offset + (int64_t)k), h->counts[k]);
    }
  }
}
