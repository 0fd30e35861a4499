/*
 * native.c - em_histo_t to Prometheus native histogram (see native.h).
 *
 * Index. OpenTelemetry's bucket i at scale s holds (base^i, base^(i+1)], base = 2^(2^-s)
 * (histo.h). Prometheus's bucket idx at schema s has the upper bound base^idx: getBound() in
 * model/histogram/generic.go of Prometheus v2.42.0 returns frac * 2^exp with exp =
 * (idx >> s) + 1 and frac the (idx mod 2^s)-th entry of the bounds in [0.5, 1), so idx 0 ends
 * at 1 ("1 is a bucket boundary in each case", io/prometheus/client/metrics.proto), and bucket
 * idx holds (base^(idx-1), base^idx]. Hence idx = i + 1 at the same scale.
 *
 * Schema. Prometheus accepts -4..8. A finer scale s > 8 maps index i to floor(i / 2^(s-8)),
 * summing the 2^(s-8) buckets of each coarse bucket (the OpenTelemetry downscale, exact). A
 * coarser scale than -4 cannot be refined (a bucket would have to be split): -ERANGE, and the
 * caller keeps to the classic buckets. em_histo_t only goes below -4 for a range wider than
 * EM_HISTO_MAX_SPAN buckets at -4, i.e. never for durations that fit in 64 bits.
 *
 * Spans. Buckets are visited in ascending index; a bucket within EM_NATIVE_MAX_GAP empty
 * buckets of the previous one extends the current span (the empty buckets become 0 counts),
 * a farther one opens a span whose offset is the gap. Deltas run across spans: each count
 * minus the previous bucket's, the first minus 0.
 *
 * Unit, in full. The values are integer ns. Exposed in seconds, bucket idx would have to cover
 * (1e-9 base^(idx-1), 1e-9 base^idx], and 1e-9 = base^(-29.897... * 2^s) falls on no bucket
 * boundary at any schema, so each ns bucket overlaps two seconds buckets. (a) Moving each
 * count into one of them displaces values by up to one bucket: the seconds histogram's
 * quantile could then be two buckets from the exact one, outside the one-bucket error the
 * agent's scale promises. Splitting counts proportionally would need float histograms and
 * would make histogram_count non-integer. (b) In ns the native buckets are the merged buckets
 * themselves: the first bucket whose cumulative count reaches q*count (Prometheus's rank) is
 * the bucket holding the nearest-rank quantile ceil(q*count), so histogram_quantile answers
 * inside the bucket that holds the exact quantile, and histogram_count and histogram_sum are
 * exact. (b) it is; a query divides by 1e9 for seconds. It also lets the classic seconds
 * histogram keep its own name in the same scrape: Prometheus 2.42 ingests a histogram as
 * native or classic, not both.
 *
 * Owns: the spans and deltas arrays of each em_native_t. Not thread-safe.
 */
#include "native.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* State of one conversion walk over em_histo_each_index. */
typedef struct {
  em_native_t *n;
  int32_t shift;      /* scale - schema: finer buckets merged per native bucket, log2. */
  bool have_cur;      /* A native bucket is being summed. */
  int64_t cur_index;  /* Its Prometheus index. */
  uint64_t cur_count; /* Its count so far. */
  bool have_last;     /* A bucket was emitted. */
  int64_t last_index; /* Index of the last emitted bucket. */
  int64_t last_count; /* Its count. */
  int err;
} walk_t;

void em_native_init(em_native_t *n) {
  if (!n) {
    return;
  }
  memset(n, 0, sizeof(*n));
  n->schema = EM_NATIVE_MAX_SCHEMA;
  n->zero_threshold = EM_NATIVE_ZERO_THRESHOLD;
}

void em_native_deinit(em_native_t *n) {
  if (!n) {
    return;
  }
  free(n->spans);
  free(n->deltas);
  em_native_init(n);
}

/* floor(i / 2^k) for 0 <= k < 63, without shifting a negative value. */
static int64_t shift_floor(int64_t i, int32_t k) {
  return i >= 0 ? i >> k : -((-i - 1) >> k) - 1;
}

/* Room for one more span and `more` deltas. Returns 0, -EOVERFLOW or -ENOMEM. */
static int grow(em_native_t *n, size_t more) {
  size_t need = n->n_deltas + more;
  if (need <= n->cap && n->n_spans < n->cap) {
    return 0;
  }
  if (need > EM_NATIVE_MAX_BUCKETS) {
    return -EOVERFLOW;
  }
  size_t cap = n->cap > 0 ? n->cap : 64;
  while (cap < need || cap <= n->n_spans) {
    cap *= 2;
  }
  if (cap > EM_NATIVE_MAX_BUCKETS) {
    cap = EM_NATIVE_MAX_BUCKETS;
  }
  em_native_span_t *spans = realloc(n->spans, cap * sizeof(*spans));
  if (!spans) {
    return -ENOMEM;
  }
  n->spans = spans;
  int64_t *deltas = realloc(n->deltas, cap * sizeof(*deltas));
  if (!deltas) {
    return -ENOMEM; /* spans grew alone: harmless, cap stays the smaller */
  }
  n->deltas = deltas;
  n->cap = cap;
  return 0;
}

/* Appends one native bucket (index, count > 0) after the last one. */
static int emit(walk_t *w, int64_t index, uint64_t count) {
  em_native_t *n = w->n;
  if (count > (uint64_t)INT64_MAX) {
    return -ERANGE;
  }
  int64_t gap = w->have_last ? index - w->last_index - 1 : 0;
  bool bridge = w->have_last && gap <= EM_NATIVE_MAX_GAP;
  int64_t offset = w->have_last ? gap : index;
  if (!bridge && (offset < INT32_MIN || offset > INT32_MAX)) {
    return -ERANGE;
  }
  size_t zeros = bridge ? (size_t)gap : 0;
  int rc = grow(n, zeros + 1);
  if (rc != 0) {
    return rc;
  }
  if (bridge) {
    for (size_t z = 0; z < zeros; z++) {
      n->deltas[n->n_deltas++] = -w->last_count;
      w->last_count = 0;
    }
    n->spans[n->n_spans - 1].length += (uint32_t)zeros + 1;
  } else {
    n->spans[n->n_spans++] = (em_native_span_t){.offset = (int32_t)offset, .length = 1};
  }
  n->deltas[n->n_deltas++] = (int64_t)count - w->last_count;
  w->have_last = true;
  w->last_index = index;
  w->last_count = (int64_t)count;
  return 0;
}

static void visit(void *ctx, int32_t index, uint64_t count) {
  walk_t *w = ctx;
  if (w->err != 0) {
    return;
  }
  int64_t p = shift_floor(index, w->shift) + 1; /* Prometheus index = OpenTelemetry + 1 */
  if (w->have_cur && p == w->cur_index) {
    w->cur_count = w->cur_count + count < w->cur_count ? UINT64_MAX : w->cur_count + count;
    return;
  }
  if (w->have_cur) {
    w->err = emit(w, w->cur_index, w->cur_count);
  }
  w->have_cur = true;
  w->cur_index = p;
  w->cur_count = count;
}

/* Leaves n as an empty histogram (arrays kept). */
static void clear(em_native_t *n) {
  n->schema = EM_NATIVE_MAX_SCHEMA;
  n->zero_threshold = EM_NATIVE_ZERO_THRESHOLD;
  n->zero_count = 0;
  n->count = 0;
  n->sum_ns = 0;
  n->n_spans = 0;
  n->n_deltas = 0;
}

int em_native_from_histo(em_native_t *n, const em_histo_t *h) {
  if (!n || !h) {
    return -EINVAL;
  }
  clear(n);
  int32_t scale = em_histo_scale(h);
  if (scale < EM_NATIVE_MIN_SCHEMA) {
    return -ERANGE;
  }
  int32_t schema = scale > EM_NATIVE_MAX_SCHEMA ? EM_NATIVE_MAX_SCHEMA : scale;
  walk_t w = {.n = n, .shift = scale - schema};
  em_histo_each_index(h, visit, &w);
  if (w.err == 0 && w.have_cur) {
    w.err = emit(&w, w.cur_index, w.cur_count);
  }
  if (w.err != 0) {
    clear(n);
    return w.err;
  }
  n->schema = schema;
  n->zero_count = em_histo_zero_count(h);
  n->count = em_histo_count(h);
  n->sum_ns = (double)em_histo_sum_ns(h);
  return 0;
}
