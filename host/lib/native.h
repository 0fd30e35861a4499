/*
 * native.h - an em_histo_t as a Prometheus native histogram: schema, zero bucket, positive
 * spans and delta-encoded counts, ready for the protobuf exposition (prom_expo.h) or remote
 * write.
 *
 * Unit: nanoseconds. The histogram's values are durations in ns and the native histogram keeps
 * them in ns (expose it under a name ending in _nanoseconds; PromQL answers divide by 1e9).
 * Seconds would need bucket boundaries scaled by 1e-9, and log_base(1e-9) =
 * -9 log2(10) 2^schema is not an integer at any schema, so every ns bucket straddles two
 * seconds buckets: moving its count into one of them shifts values by up to one bucket and a
 * seconds p99 could be two buckets from the exact one, while the ns buckets are the merged
 * buckets themselves, so Prometheus's histogram_quantile lands in the bucket that holds the
 * exact quantile and histogram_count and histogram_sum are exact (native.c has the argument
 * in full).
 *
 * Caller-owned value (em_native_init/em_native_deinit), reused across conversions: its arrays
 * grow to the largest histogram converted, at most EM_NATIVE_MAX_BUCKETS entries each. Not
 * thread-safe.
 */
#ifndef EM_NATIVE_H
#define EM_NATIVE_H

#include <stddef.h>
#include <stdint.h>

#include "histo.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EM_NATIVE_MIN_SCHEMA  (-4) /* The schemas Prometheus accepts (metrics.proto). */
#define EM_NATIVE_MAX_SCHEMA  8
#define EM_NATIVE_MAX_GAP     2 /* Empty buckets a span bridges (as client_golang). */
#define EM_NATIVE_MAX_BUCKETS EM_HISTO_MAX_SPAN /* Cap on spans and on deltas. */
/* Breadth of the zero bucket: below every bucket that holds a value >= 1 ns at any schema, a
 * bucket boundary itself (2^-128, client_golang's default), and > 0 so that Prometheus takes
 * even an empty histogram for a native one. */
#define EM_NATIVE_ZERO_THRESHOLD 0x1p-128

typedef struct {
  int32_t offset;  /* Gap to the previous span; the first bucket's index for the first span. */
  uint32_t length; /* Consecutive buckets (their counts are the next `length` deltas). */
} em_native_span_t;

typedef struct {
  int32_t schema;          /* EM_NATIVE_MIN_SCHEMA..EM_NATIVE_MAX_SCHEMA. */
  double zero_threshold;   /* EM_NATIVE_ZERO_THRESHOLD. */
  uint64_t zero_count;     /* Values of 0 ns. */
  uint64_t count;          /* All values, zero bucket included. */
  double sum_ns;           /* Sum of the values in ns (exact below 2^53 ns). */
  em_native_span_t *spans; /* n_spans spans, heap (owned). */
  size_t n_spans;
  int64_t *deltas; /* n_deltas counts, each minus the previous one (the first minus 0). */
  size_t n_deltas;
  size_t cap; /* Entries allocated in spans and in deltas. */
} em_native_t;

/* Empties n (no allocation). */
void em_native_init(em_native_t *n);

/* Frees n's arrays; n is empty afterwards. n may be NULL. */
void em_native_deinit(em_native_t *n);

/*
 * Fills n from h. Prometheus bucket index = OpenTelemetry index + 1. A scale above
 * EM_NATIVE_MAX_SCHEMA is reduced to it by merging 2^(scale - 8) adjacent buckets (exact:
 * every finer bucket lies inside one coarser bucket). Returns 0; -ERANGE when h's scale is
 * below EM_NATIVE_MIN_SCHEMA (a bucket would have to be split: no native histogram exists for
 * it, expose the classic buckets only) or a bucket count exceeds INT64_MAX (no sint64 delta);
 * -EOVERFLOW past EM_NATIVE_MAX_BUCKETS; -ENOMEM; -EINVAL for NULL. On failure n holds an
 * empty histogram (no spans, count 0).
 */
int em_native_from_histo(em_native_t *n, const em_histo_t *h);

#ifdef __cplusplus
}
#endif

#endif /* EM_NATIVE_H */
