/*
 * histo.h - host-side merge of the base-2 exponential histograms that data messages carry.
 *
 * An em_histo_t accumulates any number of stage windows (em_stage_t from proto/), from one
 * device or many, into one distribution: bucket counts added index by index at a common scale
 * (a window with a finer scale is downscaled to the coarsest seen, as OpenTelemetry merges),
 * count, exact sum, min, max, zero count. From it: the mean (exact, sum/count), quantiles
 * (within the bucket error of the scale), and a variance estimated from bucket midpoints, for
 * the statistics in stats.h.
 *
 * Unlike the agent's fixed-memory histogram this one grows: it holds a dense array covering
 * the index range seen, capped at EM_HISTO_MAX_SPAN buckets (the scale is lowered when a
 * merge would exceed it). Not thread-safe.
 */
#ifndef EM_HISTO_H
#define EM_HISTO_H

#include <edgemon/proto.h>
#include <stddef.h>
#include <stdint.h>

#define EM_HISTO_MAX_SPAN 8192u

typedef struct em_histo em_histo_t;

/* Returns 0 or -ENOMEM. */
int em_histo_new(em_histo_t **out);
void em_histo_free(em_histo_t *h); /* NULL is a no-op. */

/* Merges one stage window (its count, sum, min, max, zero count and buckets). A window with
 * count 0 changes nothing. Returns 0, -EINVAL for a window whose buckets do not add up to its
 * count or whose scale is out of range, or -ENOMEM. */
int em_histo_add_stage(em_histo_t *h, const em_stage_t *s);

/* Merges one stage window into each non-NULL histogram of hs[0..n), as em_histo_add_stage()
 * on each but checking the window once. Returns 0, -EINVAL for a malformed window (none
 * changed), or the -EINVAL or -ENOMEM of the merge into one of them (those before it hold the
 * window; it and the rest are as they were). */
int em_histo_add_stage_each(em_histo_t *const *hs, size_t n, const em_stage_t *s);

/* Merges `src` into `dst`. Returns 0 or -ENOMEM. */
int em_histo_merge(em_histo_t *dst, const em_histo_t *src);

uint64_t em_histo_count(const em_histo_t *h);
uint64_t em_histo_sum_ns(const em_histo_t *h);     /* Saturates at UINT64_MAX. */
uint64_t em_histo_min_ns(const em_histo_t *h);     /* 0 when empty. */
uint64_t em_histo_max_ns(const em_histo_t *h);     /* 0 when empty. */
int32_t em_histo_scale(const em_histo_t *h);       /* Current common scale. */
uint64_t em_histo_zero_count(const em_histo_t *h); /* Values of 0 ns (the zero bucket). */

/* sum/count in ns, or 0 when empty. */
double em_histo_mean_ns(const em_histo_t *h);

/* Sample variance (n-1 denominator) in ns^2 estimated with each bucket's values at its
 * midpoint, clamped to [min, max]; 0 when count < 2. */
double em_histo_variance_ns2(const em_histo_t *h);

/* The q-quantile (0 <= q <= 1) in ns: the bucket holding the rank ceil(q*count) (at least 1),
 * its value interpolated log-linearly inside the bucket and clamped to [min, max]. 0 when
 * empty. */
double em_histo_quantile_ns(const em_histo_t *h, double q);

/* Calls fn for each non-empty bucket in ascending index order, with the bucket's upper bound
 * in ns (base^(index+1)) and its count; zero_count comes first with upper bound 0. For
 * Prometheus histograms. */
void em_histo_each(const em_histo_t *h, void (*fn)(void *ctx, double upper_ns, uint64_t count),
                   void *ctx);

/* Calls fn for each non-empty bucket in ascending index order with its OpenTelemetry index at
 * em_histo_scale(h) (bucket i holds (base^i, base^(i+1)] ns) and its count; the zero bucket is
 * not visited (em_histo_zero_count). For exports that keep the bucket layout (native.h). */
void em_histo_each_index(const em_histo_t *h, void (*fn)(void *ctx, int32_t index, uint64_t count),
                         void *ctx);

#endif /* EM_HISTO_H */
