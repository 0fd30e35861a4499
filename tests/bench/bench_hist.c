/*
 * bench_hist.c - what the agent's latency histograms (firmware/agent/spans/hist.c) cost on the
 * span hot path and at the end of each window.
 *
 * Figures, each as min/median/max over 7 rounds:
 *   record     ns per em_hist_record, over 2^20 precomputed lognormal durations (median
 *              8 ms, sigma 0.5, so the index is not always the same bucket);
 *   to_stage   ns per em_hist_to_stage (cap EM_PROTO_MAX_BUCKETS) of a window of 30 spans
 *              (a 30 fps stage over 1 s) and of one of 10^4 spans;
 *   reset      ns per em_hist_reset of a histogram holding a 30-span window: 32 such
 *              histograms are reset back to back between two clock reads, then refilled
 *              (untimed) with the next 30 spans.
 * The durations come from a fixed-seed generator, so every run times the same data.
 *
 *   bench_hist
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "hist.h"
#include "bench_clock.h"

#define ROUNDS        7
#define RECORD_N      (1u << 20)
#define WINDOW_SMALL  30
#define WINDOW_LARGE  10000
#define STAGE_REPEAT  20000 /* to_stage calls per round, 30-span window */
#define STAGE_REPEAT2 2000  /* to_stage calls per round, 10^4-span window */
#define POOL          32    /* histograms reset per timed batch (330 KiB) */
#define RESET_BATCHES 2000

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* xorshift64*, fixed seed. */
static uint64_t rng_state = UINT64_C(0x9e3779b97f4a7c15);
static double unit(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (double)((rng_state * UINT64_C(2685821657736338717)) >> 11) * 0x1p-53;
}

static uint64_t lognormal_ns(double median_ns, double sigma) {
  double z = sqrt(-2.0 * log(1.0 - unit())) * cos(6.283185307179586 * unit());
  return (uint64_t)llround(median_ns * exp(sigma * z));
}

static void report(const char *what, double per[ROUNDS]) {
  qsort(per, ROUNDS, sizeof(per[0]), cmp_double);
  printf("%-36s %8.2f %8.2f %8.2f\n", what, per[0], per[ROUNDS / 2], per[ROUNDS - 1]);
}

static volatile uint64_t sink; /* keeps results alive */

int main(void) {
  uint64_t *spans = malloc(RECORD_N * sizeof(*spans));
  em_hist_t *h = malloc(sizeof(*h));
  em_hist_t *small = malloc(sizeof(*small));
  em_hist_t *large = malloc(sizeof(*large));
  em_hist_t *pool = malloc(POOL * sizeof(*pool));
  em_bucket_t *buckets = malloc(EM_PROTO_MAX_BUCKETS * sizeof(*buckets));
  if (!spans || !h || !small || !large || !pool || !buckets) {
    fprintf(stderr, "bench_hist: out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < RECORD_N; i++) {
    spans[i] = lognormal_ns(8e6, 0.5);
  }
  em_hist_init(h);
  em_hist_init(small);
  em_hist_init(large);
  for (size_t p = 0; p < POOL; p++) {
    em_hist_init(&pool[p]);
  }
  for (size_t i = 0; i < WINDOW_SMALL; i++) {
    em_hist_record(small, spans[i]);
  }
  for (size_t i = 0; i < WINDOW_LARGE; i++) {
    em_hist_record(large, spans[i]);
  }

  em_stage_t st;
  int n_small = em_hist_to_stage(small, "infer", buckets, EM_PROTO_MAX_BUCKETS, &st);
  int n_large = em_hist_to_stage(large, "infer", buckets, EM_PROTO_MAX_BUCKETS, &st);
  printf("bench_hist: scale %d, %d index slots; windows of %d spans -> %d buckets, %d spans -> "
         "%d buckets\n",
         EM_HIST_SCALE, EM_HIST_BUCKETS, WINDOW_SMALL, n_small, WINDOW_LARGE, n_large);
  printf("%-36s %8s %8s %8s\n", "ns per call", "min", "median", "max");

  double per[ROUNDS];
  for (int r = 0; r < ROUNDS; r++) {
    em_hist_reset(h);
    uint64_t t0 = bench_now_ns();
    for (size_t i = 0; i < RECORD_N; i++) {
      em_hist_record(h, spans[i]);
    }
    per[r] = (double)(bench_now_ns() - t0) / RECORD_N;
    sink += h->count;
  }
  report("em_hist_record", per);

  const struct {
    const em_hist_t *h;
    int repeat; /* to_stage calls per round */
    const char *name;
  } windows[] = {
      {small, STAGE_REPEAT, "em_hist_to_stage, 30 spans"},
      {large, STAGE_REPEAT2, "em_hist_to_stage, 10^4 spans"},
  };
  for (size_t w = 0; w < sizeof(windows) / sizeof(windows[0]); w++) {
    for (int r = 0; r < ROUNDS; r++) {
      uint64_t t0 = bench_now_ns();
      for (int i = 0; i < windows[w].repeat; i++) {
        sink +=
            (uint64_t)em_hist_to_stage(windows[w].h, "infer", buckets, EM_PROTO_MAX_BUCKETS, &st);
        sink += st.p99_ns;
      }
      per[r] = (double)(bench_now_ns() - t0) / windows[w].repeat;
    }
    report(windows[w].name, per);
  }

  /*
   * reset: POOL histograms each hold the same 30-span window; only their resets are timed,
   * in batches of POOL, and the windows are recorded again between batches.
   */
  for (int r = 0; r < ROUNDS; r++) {
    uint64_t timed = 0;
    for (int batch = 0; batch < RESET_BATCHES; batch++) {
      for (size_t p = 0; p < POOL; p++) {
        for (size_t k = 0; k < WINDOW_SMALL; k++) {
          em_hist_record(&pool[p], spans[(size_t)batch * 7 + k]);
        }
      }
      uint64_t t0 = bench_now_ns();
      for (size_t p = 0; p < POOL; p++) {
        em_hist_reset(&pool[p]);
      }
      timed += bench_now_ns() - t0;
    }
    sink += pool[0].count;
    per[r] = (double)timed / ((double)RESET_BATCHES * POOL);
  }
  report("em_hist_reset after 30 spans", per);

  free(buckets);
  free(pool);
  free(large);
  free(small);
  free(h);
  free(spans);
  return 0;
}
