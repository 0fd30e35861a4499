/*
 * bench_clock.h - what the C benches share to time and rank their samples: CLOCK_MONOTONIC in
 * ns, a qsort() comparator of uint64_t and the nearest-rank percentile of sorted samples.
 *
 * Header-only (static inline); owns nothing, keeps no state. The including file defines the
 * feature macros that expose clock_gettime() (_POSIX_C_SOURCE 199309 or later).
 */
#ifndef EDGEMON_TESTS_BENCH_CLOCK_H
#define EDGEMON_TESTS_BENCH_CLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC now, in ns. */
static inline uint64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* qsort() comparator: ascending uint64_t. */
static inline int bench_cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a;
  uint64_t y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Nearest rank of sorted[0..n), n >= 1, p in (0, 1]: the smallest sample with at least p of
 * the samples at or below it. */
static inline uint64_t bench_percentile(const uint64_t *sorted, size_t n, double p) {
  size_t rank = (size_t)(p * (double)n + 0.999999);
  if (rank < 1) {
    rank = 1;
  }
  return sorted[(rank > n ? n : rank) - 1];
}

#endif /* EDGEMON_TESTS_BENCH_CLOCK_H */
