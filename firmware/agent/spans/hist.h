/*
 * hist.h - per-stage latency histograms: base-2 exponential buckets with OpenTelemetry's
 * layout, so the host can merge windows, stages and devices exactly.
 *
 * Scale 6: base = 2^(2^-6) = 2^(1/64), each bucket 1.09% wide, so reporting a bucket by its
 * geometric midpoint is off by at most 0.54% (the "about 1%" of the design). Bucket i holds
 * durations d (ns) with base^i < d <= base^(i+1); d == 0 goes to zero_count. The index range
 * is fixed: EM_HIST_MIN_INDEX..EM_HIST_MAX_INDEX covers 1 ns to about 2^40 ns (18 min);
 * longer spans land in the last bucket (max_ns stays exact). Memory is fixed per histogram
 * (a u32 count per bucket), recording is O(1) with no allocation, and a window is cleared in
 * time proportional to the buckets it touched.
 *
 * Caller-owned values (em_hist_init/em_hist_reset); no global state; single-threaded.
 */
#ifndef EDGEMON_AGENT_HIST_H
#define EDGEMON_AGENT_HIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "edgemon/proto.h"

#define EM_HIST_SCALE     6
#define EM_HIST_MIN_INDEX (-1)          /* (2^(-1/64), 1]: 1 ns */
#define EM_HIST_MAX_INDEX (40 * 64 - 1) /* up to 2^40 ns */
#define EM_HIST_BUCKETS   (EM_HIST_MAX_INDEX - EM_HIST_MIN_INDEX + 1)

typedef struct {
  uint64_t count;  /* Spans recorded, zero_count included. */
  uint64_t sum_ns; /* Saturates at UINT64_MAX instead of wrapping. */
  uint64_t min_ns; /* Meaningful when count > 0. */
  uint64_t max_ns;
  uint64_t zero_count;              /* Spans of 0 ns. */
  int32_t lo, hi;                   /* Touched bucket index range; lo > hi when none. */
  uint32_t counts[EM_HIST_BUCKETS]; /* counts[i - EM_HIST_MIN_INDEX] for bucket i. */
} em_hist_t;

/* Empties h. */
void em_hist_init(em_hist_t *h);

/* Empties h in time proportional to the buckets touched since the last reset. */
void em_hist_reset(em_hist_t *h);

/* The bucket index of a duration > 0, clamped to the fixed range. */
int32_t em_hist_index(uint64_t ns);

/* Records one duration. O(1). A bucket count at UINT32_MAX stays there (saturates). */
void em_hist_record(em_hist_t *h, uint64_t ns);

/* Adds src into dst: the result is the histogram of the union of their durations. */
void em_hist_merge(em_hist_t *dst, const em_hist_t *src);

/*
 * The value at quantile q (0 < q <= 1): the geometric midpoint of the bucket that holds the
 * rank ceil(q * count), clamped to [min_ns, max_ns]. 0 for an empty histogram.
 */
uint64_t em_hist_quantile(const em_hist_t *h, double q);

/*
 * Fills a proto stage window from h: count, sum, min, max, p50/p90/p99/p99.9 (from the
 * scale-6 buckets), zero count, and the non-empty buckets into buckets[0..cap), ascending.
 * When more than `cap` buckets are non-empty the buckets are exported at a lower scale
 * (OpenTelemetry's downscaling: each step maps index i to i >> 1, halving the resolution)
 * until they fit; out->scale says which. `name` is borrowed. Returns the number of buckets
 * written; -EINVAL when cap is 0 and h is not empty; -ENOSPC when cap is 1 and the window
 * holds a 1 ns span beside longer ones (bucket -1 stays -1 at every scale, so two buckets
 * remain).
 */
int em_hist_to_stage(const em_hist_t *h, const char *name, em_bucket_t *buckets, size_t cap,
                     em_stage_t *out);

#endif /* EDGEMON_AGENT_HIST_H */
