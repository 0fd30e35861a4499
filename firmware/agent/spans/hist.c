/*
 * hist.c - per-stage latency histograms (em_hist_t): OpenTelemetry's base-2 exponential
 * buckets at scale 6, recorded on the span hot path and exported into proto stage windows.
 *
 * Bucket index. Bucket i holds durations d (ns) with 2^(i/64) < d <= 2^((i+1)/64), so
 * index(d) = ceil(64 * log2(d)) - 1. The mapping is computed exactly with integers, no libm:
 *
 *   1. Octave: k = floor(log2(d)), the position of the highest set bit.
 *   2. Mantissa: x = d << (63 - k), a 64-bit fixed-point number in [2^63, 2^64) standing for
 *      d / 2^k in [1, 2).
 *   3. Sub-bucket: j = the number of boundaries t in 1..63 with 2^(t/64) < d / 2^k, i.e. with
 *      x >= bound[t], where bound[t] = ceil(2^(63 + t/64)). For t in 1..63, 2^(t/64) is
 *      irrational and x / 2^63 rational, so x is never equal to a boundary and "x > exact
 *      boundary" is exactly "x >= its ceiling". bound[] was computed with exact integer
 *      arithmetic (bound[t] is the least C with C^64 >= 2^(63 * 64 + t)).
 *      j is found with one table load and one compare: the top 7 bits of the fraction pick
 *      one of 128 cells of width 1/128 (0.78%); every bucket is wider (1.09%), so a cell holds
 *      at most one boundary, first[cell] counts the boundaries below the cell and one compare
 *      against bound[first[cell] + 1] adds the one inside it.
 *   4. index = 64 * k + j, except for an exact power of two (x == 2^63), which is the upper
 *      edge of bucket 64k - 1.
 *
 * So 1 -> -1, 2 -> 63, 3 -> 101, 4 -> 127, 5 -> 148, 2^k -> 64k - 1, and 2^k + 1 -> 64k for
 * k >= 7 (below that, 1 + 2^-k >= 2^(1/64) and 2^k + 1 lies past the first sub-bucket).
 * Durations above 2^40 ns (18 min) go to EM_HIST_MAX_INDEX = 64 * 40 - 1, whose upper edge is
 * 2^40; 0 has no bucket (em_hist_record counts it in zero_count) and em_hist_index(0) answers
 * EM_HIST_MIN_INDEX. tests/unit/test_hist.c checks the mapping at every bucket boundary of
 * the range against a big-integer reference (index = bit length of d^64, minus 1, minus 1
 * more for a power of two). The table replaced ceil(64 * log2(d)) - 1 with libm, which was
 * about 4x slower and not exact next to some boundaries (docs/BENCHMARKS.md has the figures).
 *
 * Quantiles report the geometric midpoint 2^((i + 0.5)/64) of the bucket holding the rank,
 * rounded to ns and clamped to [min_ns, max_ns]: the true value lies in the same bucket, so
 * the relative error is at most 2^(1/128) - 1 = 0.543% (plus 0.5 ns of rounding).
 *
 * Owns: nothing beyond the caller's em_hist_t (about 10 KiB). No allocation, no global state
 * except constant tables; single-threaded per histogram.
 */
#include "hist.h"

#include <errno.h>
#include <string.h>

/* The slot of bucket index i in counts[]. */
#define SLOT(i) ((size_t)((i)-EM_HIST_MIN_INDEX))

/* Durations above this go to the last bucket: 2^40 ns is the upper edge of EM_HIST_MAX_INDEX. */
#define MAX_EXACT_NS (UINT64_C(1) << 40)

/*
 * bound[t] = ceil(2^(63 + t/64)) for t in 1..63: the lower edges (exclusive) of the 64
 * sub-buckets of an octave, as the fixed-point mantissa x compares against them. bound[0] is
 * 2^63 (unused) and bound[64] a sentinel no mantissa reaches (x has at least 23 trailing zero
 * bits since d <= 2^40, so x < 2^64 - 1).
 */
static const uint64_t bound[65] = {
    UINT64_C(0x8000000000000000), UINT64_C(0x8164d1f3bc030774), UINT64_C(0x82cd8698ac2ba1d8),
    UINT64_C(0x843a28c3acde4047), UINT64_C(0x85aac367cc487b15), UINT64_C(0x871f61969e8d1011),
    UINT64_C(0x88980e8092da8528), UINT64_C(0x8a14d575496efd9b), UINT64_C(0x8b95c1e3ea8bd6e7),
    UINT64_C(0x8d1adf5b7e5ba9e6), UINT64_C(0x8ea4398b45cd53c1), UINT64_C(0x9031dc431466b1dd),
    UINT64_C(0x91c3d373ab11c337), UINT64_C(0x935a2b2f13e6e92c), UINT64_C(0x94f4efa8fef70962),
    UINT64_C(0x96942d3720185a01), UINT64_C(0x9837f0518db8a970), UINT64_C(0x99e0459320b7fa65),
    UINT64_C(0x9b8d39b9d54e5539), UINT64_C(0x9d3ed9a72cffb751), UINT64_C(0x9ef5326091a111ae),
    UINT64_C(0xa0b0510fb9714fc3), UINT64_C(0xa27043030c496819), UINT64_C(0xa43515ae09e6809f),
    UINT64_C(0xa5fed6a9b15138eb), UINT64_C(0xa7cd93b4e965356a), UINT64_C(0xa9a15ab4ea7c0ef9),
    UINT64_C(0xab7a39b5a93ed338), UINT64_C(0xad583eea42a14ac7), UINT64_C(0xaf3b78ad690a4375),
    UINT64_C(0xb123f581d2ac2590), UINT64_C(0xb311c412a911248a), UINT64_C(0xb504f333f9de6485),
    UINT64_C(0xb6fd91e328d17792), UINT64_C(0xb8fbaf4762fb9eea), UINT64_C(0xbaff5ab2133e45fc),
    UINT64_C(0xbd08a39f580c36bf), UINT64_C(0xbf1799b67a731083), UINT64_C(0xc12c4cca66709457),
    UINT64_C(0xc346ccda24976408), UINT64_C(0xc5672a115506dade), UINT64_C(0xc78d74c8abb9b15d),
    UINT64_C(0xc9b9bd866e2f27a3), UINT64_C(0xcbec14fef2727c5d), UINT64_C(0xce248c151f8480e4),
    UINT64_C(0xd06333daef2b2595), UINT64_C(0xd2a81d91f12ae45b), UINT64_C(0xd4f35aabcfedfa20),
    UINT64_C(0xd744fccad69d6af5), UINT64_C(0xd99d15c278afd7b6), UINT64_C(0xdbfbb797daf23756),
    UINT64_C(0xde60f4825e0e9124), UINT64_C(0xe0ccdeec2a94e112), UINT64_C(0xe33f8972be8a5a52),
    UINT64_C(0xe5b906e77c8348a9), UINT64_C(0xe8396a503c4bdc69), UINT64_C(0xeac0c6e7dd24392f),
    UINT64_C(0xed4f301ed9942b85), UINT64_C(0xefe4b99bdcdaf5cc), UINT64_C(0xf281773c59ffb13a),
    UINT64_C(0xf5257d152486cc2d), UINT64_C(0xf7d0df730ad13bb9), UINT64_C(0xfa83b2db722a033b),
    UINT64_C(0xfd3e0c0cf486c175), UINT64_C(0xffffffffffffffff),
};

/*
 * first[c]: the number of boundaries bound[1..63] at or below the start of cell c, the
 * mantissas x with x >> 56 == 128 + c. At most one more boundary lies inside the cell.
 */
static const uint8_t first[128] = {
    0,  0,  1,  2,  2,  3,  4,  4,  5,  6,  6,  7,  8,  8,  9,  10, 10, 11, 12, 12, 13, 14,
    14, 15, 15, 16, 17, 17, 18, 18, 19, 20, 20, 21, 21, 22, 22, 23, 24, 24, 25, 25, 26, 26,
    27, 27, 28, 28, 29, 29, 30, 30, 31, 31, 32, 33, 33, 34, 34, 35, 35, 35, 36, 36, 37, 37,
    38, 38, 39, 39, 40, 40, 41, 41, 42, 42, 43, 43, 43, 44, 44, 45, 45, 46, 46, 47, 47, 47,
    48, 48, 49, 49, 50, 50, 50, 51, 51, 52, 52, 52, 53, 53, 54, 54, 54, 55, 55, 56, 56, 56,
    57, 57, 58, 58, 58, 59, 59, 59, 60, 60, 61, 61, 61, 62, 62, 62, 63, 63,
};

/* mid[j] = 2^((j + 0.5)/64), the geometric midpoint of sub-bucket j of octave [1, 2). */
static const double mid[64] = {
    1.00542990111280282, 1.01637831491095304, 1.02744594911876370, 1.03863410196137879,
    1.04994408580068727, 1.06137722728926208, 1.07293486752597555, 1.08461836221330924,
    1.09642908181637682, 1.10836841172367864, 1.12043775240960668, 1.13263851959871923,
    1.14497214443180422, 1.15744007363375103, 1.17004376968325019, 1.18278471098434103,
    1.19566439203982737, 1.20868432362658158, 1.22184603297275752, 1.23515106393693331,
    1.24860097718920474, 1.26219735039425071, 1.27594177839639210, 1.28983587340666581,
    1.30388126519193590, 1.31807960126606399, 1.33243254708316145, 1.34694178623294584,
    1.36160902063822476, 1.37643597075453010, 1.39142437577192619, 1.40657599381901544,
    1.42189260216916556, 1.43737599744898233, 1.45302799584905256, 1.46885043333698193,
    1.48484516587275250, 1.50101406962642552, 1.51735904119821470, 1.53388199784095600,
    1.55058487768499996, 1.56746963996555289, 1.58453826525249373, 1.60179275568269335,
    1.61923513519486375, 1.63686744976696449, 1.65469176765619440, 1.67271017964159657,
    1.69092479926930518, 1.70933776310046283, 1.72795123096183756, 1.74676738619916894,
    1.76578843593327282, 1.78501661131893498, 1.80445416780662388, 1.82410338540705331,
    1.84396656895862593, 1.86404604839778904, 1.88434417903233445, 1.90486334181767420,
    1.92560594363612493, 1.94657441757923329, 1.96777122323317578, 1.98919884696726635,
};

/* ---- Small integer helpers ---- */

/* The position of the highest set bit of v > 0 (floor(log2(v))). */
static inline int top_bit(uint64_t v) {
#if defined(__GNUC__) || defined(__clang__)
  return 63 - __builtin_clzll(v);
#else
  int k = 0;
  for (int s = 32; s > 0; s >>= 1) {
    if (v >> s) {
      v >>= s;
      k += s;
    }
  }
  return k;
#endif
}

static inline uint64_t add_sat_u64(uint64_t a, uint64_t b) {
  uint64_t s = a + b;
  return s < a ? UINT64_MAX : s;
}

static inline uint32_t add_sat_u32(uint32_t a, uint32_t b) {
  uint32_t s = a + b;
  return s < a ? UINT32_MAX : s;
}

/* ---- Lifecycle ---- */

/* The scalar fields of an empty histogram; counts[] is left alone. */
static void clear_summary(em_hist_t *h) {
  h->count = 0;
  h->sum_ns = 0;
  h->min_ns = UINT64_MAX; /* So the first record or merge needs no special case. */
  h->max_ns = 0;
  h->zero_count = 0;
  h->lo = EM_HIST_MAX_INDEX + 1;
  h->hi = EM_HIST_MIN_INDEX - 1;
}

void em_hist_init(em_hist_t *h) {
  memset(h->counts, 0, sizeof(h->counts));
  clear_summary(h);
}

/*
 * Clears counts[lo..hi] only: every bucket that record or merge touched since the last reset
 * lies in that range, so the rest is already zero. Leaves h equal to a fresh em_hist_init.
 */
void em_hist_reset(em_hist_t *h) {
  if (h->lo <= h->hi) {
    memset(&h->counts[SLOT(h->lo)], 0, (size_t)(h->hi - h->lo + 1) * sizeof(h->counts[0]));
  }
  clear_summary(h);
}

/* ---- Recording ---- */

/* em_hist_index, inlined into em_hist_record (gcc does not inline the extern one). */
static inline int32_t index_of(uint64_t ns) {
  if (ns <= 1) {
    return EM_HIST_MIN_INDEX; /* 1 ns is the top of bucket -1; 0 has no bucket. */
  }
  if (ns >= MAX_EXACT_NS) {
    return EM_HIST_MAX_INDEX; /* 2^40 is the top of the last bucket; longer spans clamp. */
  }
  int k = top_bit(ns);
  uint64_t x = ns << (63 - k);                         /* [2^63, 2^64): d / 2^k, 63 bits */
  unsigned j = first[(x >> 56) & 127u];                /* boundaries below the cell */
  j += x >= bound[j + 1];                              /* and the one inside it, if passed */
  return (int32_t)(64 * k + (int)j) - (x == bound[0]); /* 2^k is the top of bucket 64k-1 */
}

int32_t em_hist_index(uint64_t ns) {
  return index_of(ns);
}

/*
 * Counts one span: count, sum (saturating), min, max, and either zero_count (0 ns) or its
 * bucket (saturating at UINT32_MAX), widening [lo, hi] to cover the bucket.
 */
void em_hist_record(em_hist_t *h, uint64_t ns) {
  h->count++;
  h->sum_ns = add_sat_u64(h->sum_ns, ns);
  if (ns < h->min_ns) {
    h->min_ns = ns;
  }
  if (ns > h->max_ns) {
    h->max_ns = ns;
  }
  if (ns == 0) {
    h->zero_count++;
    return;
  }
  int32_t i = index_of(ns);
  uint32_t *c = &h->counts[SLOT(i)];
  *c += *c != UINT32_MAX;
  if (i < h->lo) {
    h->lo = i;
  }
  if (i > h->hi) {
    h->hi = i;
  }
}

/* Adds src's summary and counts[src->lo..src->hi] into dst, saturating. dst may be src. */
void em_hist_merge(em_hist_t *dst, const em_hist_t *src) {
  if (src->count == 0) {
    return;
  }
  dst->count = add_sat_u64(dst->count, src->count);
  dst->sum_ns = add_sat_u64(dst->sum_ns, src->sum_ns);
  dst->zero_count = add_sat_u64(dst->zero_count, src->zero_count);
  if (src->min_ns < dst->min_ns) {
    dst->min_ns = src->min_ns;
  }
  if (src->max_ns > dst->max_ns) {
    dst->max_ns = src->max_ns;
  }
  int32_t lo = src->lo, hi = src->hi; /* read before dst's range changes (dst == src) */
  for (int32_t i = lo; i <= hi; i++) {
    dst->counts[SLOT(i)] = add_sat_u32(dst->counts[SLOT(i)], src->counts[SLOT(i)]);
  }
  if (lo < dst->lo) {
    dst->lo = lo;
  }
  if (hi > dst->hi) {
    dst->hi = hi;
  }
}

/* ---- Quantiles and export ---- */

/*
 * The nearest rank of quantile q among n values: ceil(q * n), within [1, n]. A product within
 * a few ulps of an integer counts as that integer, so that q = 0.035 with n = 200 is rank 7
 * although 0.035 * 200 evaluates to 7.000000000000001 in binary64.
 */
static uint64_t rank_of(double q, uint64_t n) {
  double r = q * (double)n;
  if (!(r > 1.0)) { /* also NaN */
    return 1;
  }
  if (r >= (double)n) {
    return n;
  }
  double f = (double)(uint64_t)r; /* floor: r > 1 */
  uint64_t rank = (uint64_t)f;
  return r - f <= r * 0x1p-50 ? rank : rank + 1;
}

/* 2^((i + 0.5)/64) rounded to ns: the geometric midpoint of bucket i. */
static uint64_t midpoint_ns(int32_t i) {
  int32_t k = i >= 0 ? i / 64 : -((63 - i) / 64); /* floor(i / 64) */
  double m = mid[i - 64 * k];
  m = k >= 0 ? m * (double)(UINT64_C(1) << k) : m / (double)(UINT64_C(1) << -k);
  return (uint64_t)(m + 0.5);
}

/*
 * Fills out[k] with the value at quantile qs[k] for k < n, qs ascending, in one walk: the
 * zero bucket, then buckets lo..hi, up to the bucket holding rank ceil(qs[k] * count); its
 * midpoint (0 for the zero bucket), clamped to [min_ns, max_ns]. When bucket counts saturated
 * and the walk falls short of a rank, that value is max_ns. h is not empty.
 */
static void quantiles(const em_hist_t *h, const double *qs, size_t n /* <= 4 */, uint64_t *out) {
  uint64_t rank[4];
  for (size_t k = 0; k < n; k++) {
    rank[k] = rank_of(qs[k], h->count);
    out[k] = h->max_ns;
  }
  size_t k = 0;
  uint64_t seen = h->zero_count;
  while (k < n && seen >= rank[k]) {
    out[k++] = 0;
  }
  for (int32_t i = h->lo; i <= h->hi && k < n; i++) {
    uint32_t c = h->counts[SLOT(i)];
    if (c == 0) {
      continue;
    }
    seen += c;
    if (seen >= rank[k]) {
      uint64_t v = midpoint_ns(i);
      while (k < n && seen >= rank[k]) {
        out[k++] = v;
      }
    }
  }
  for (k = 0; k < n; k++) {
    out[k] = out[k] < h->min_ns ? h->min_ns : out[k] > h->max_ns ? h->max_ns : out[k];
  }
}

uint64_t em_hist_quantile(const em_hist_t *h, double q) {
  if (h->count == 0) {
    return 0;
  }
  uint64_t v;
  quantiles(h, &q, 1, &v);
  return v;
}

/*
 * Writes the non-empty buckets of h at scale 6 - steps into b[0..cap), bucket i of scale 6
 * adding its count into bucket i >> steps (an arithmetic shift: floor division, as
 * OpenTelemetry downscales). Returns the number written, or cap + 1 as soon as they do not
 * fit. *total gets zero_count plus the counts written.
 */
static size_t export_at(const em_hist_t *h, int steps, em_bucket_t *b, size_t cap,
                        uint64_t *total) {
  size_t n = 0;
  uint64_t t = h->zero_count;
  for (int32_t i = h->lo; i <= h->hi; i++) {
    uint32_t c = h->counts[SLOT(i)];
    if (c == 0) {
      continue;
    }
    int32_t d = i >> steps;
    if (n > 0 && b[n - 1].index == d) {
      b[n - 1].count = add_sat_u64(b[n - 1].count, c);
    } else if (n == cap) {
      return cap + 1;
    } else {
      b[n].index = d;
      b[n].count = c;
      n++;
    }
    t = add_sat_u64(t, c);
  }
  *total = t;
  return n;
}

/*
 * Exports h as a stage window. Percentiles come from the scale-6 buckets as em_hist_quantile
 * reports them (ordered and within [min, max] by construction; sum >= max since sum
 * saturates). Buckets go out at the highest scale 6 - steps (steps = 0, 1, ...) at which the
 * non-empty ones fit in cap; a window that fits at scale 6 is walked once.
 *
 * out->count is zero_count plus the exported bucket counts, which is h->count unless a bucket
 * count saturated at UINT32_MAX (then the window stays self-consistent, as the schema requires,
 * and the spans past the saturation are not reported).
 *
 * Returns the number of buckets written; 0 for an empty h (out then carries the name and
 * count 0 only). -EINVAL for NULL h, name or out, NULL buckets with cap > 0, or cap 0 with a
 * non-empty h. -ENOSPC when even EM_PROTO_MIN_SCALE needs more than cap buckets: only cap 1
 * with spans of both 1 ns and more than 1 ns, since 1 ns is the upper edge of bucket -1 at
 * every scale (-1 >> s stays -1 while every positive index reaches 0).
 */
int em_hist_to_stage(const em_hist_t *h, const char *name, em_bucket_t *buckets, size_t cap,
                     em_stage_t *out) {
  if (!h || !name || !out || (cap > 0 && !buckets)) {
    return -EINVAL;
  }
  memset(out, 0, sizeof(*out));
  out->name = name;
  if (h->count == 0) {
    return 0;
  }
  if (cap == 0) {
    return -EINVAL;
  }
  int steps = 0;
  uint64_t total = 0;
  size_t n = export_at(h, steps, buckets, cap, &total);
  while (n > cap) {
    if (EM_HIST_SCALE - steps == EM_PROTO_MIN_SCALE) {
      return -ENOSPC;
    }
    steps++;
    n = export_at(h, steps, buckets, cap, &total);
  }
  static const double qs[4] = {0.5, 0.9, 0.99, 0.999};
  uint64_t p[4];
  quantiles(h, qs, 4, p);
  out->count = total;
  out->sum_ns = h->sum_ns;
  out->min_ns = h->min_ns;
  out->max_ns = h->max_ns;
  out->p50_ns = p[0];
  out->p90_ns = p[1];
  out->p99_ns = p[2];
  out->p999_ns = p[3];
  out->scale = EM_HIST_SCALE - steps;
  out->zero_count = h->zero_count;
  out->buckets = n > 0 ? buckets : NULL;
  out->n_buckets = n;
  return (int)n;
}
