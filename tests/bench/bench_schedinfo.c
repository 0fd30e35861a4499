/*
 * bench_schedinfo.c - what the scheduling evidence costs the agent: the every-tick read of the
 * target's stat (em_schedinfo_read_stat), the per-thread pass (em_schedinfo_read_threads:
 * task/ plus schedstat and status of each thread, and the cgroup's cpu.stat) against the
 * target's thread count, and one who-else-ran scan of /proc (em_others_scan, on the worker).
 *
 * The target is this process, with 1, 8, 32 and 128 threads (the extra ones asleep on a
 * condition variable); each figure is the median of ROUNDS rounds of N calls, in ns per call.
 * docs/BENCHMARKS.md ("agent: scheduling evidence") turns them into a share of the tick.
 *
 *   bench_schedinfo [--reads N]
 */
#define _DEFAULT_SOURCE /* usleep */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_clock.h"
#include "others.h"
#include "schedinfo.h"

#define ROUNDS      7
#define MAX_THREADS 128

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static int stopping;

static void *sleeper(void *arg) {
  (void)arg;
  pthread_mutex_lock(&lock);
  while (!stopping) {
    pthread_cond_wait(&wake, &lock);
  }
  pthread_mutex_unlock(&lock);
  return NULL;
}

typedef enum { STAT, THREADS, OTHERS } what_t;

/* Median over ROUNDS of the mean ns per call of n calls. */
static uint64_t time_calls(em_schedinfo_t *s, em_others_t *o, what_t what, int n) {
  uint64_t per[ROUNDS];
  for (int r = 0; r < ROUNDS; r++) {
    uint64_t t0 = bench_now_ns();
    for (int i = 0; i < n; i++) {
      em_schedinfo_reading_t v = {0};
      em_others_list_t list;
      int rc = what == STAT      ? em_schedinfo_read_stat(s, &v)
               : what == THREADS ? em_schedinfo_read_threads(s, &v)
                                 : em_others_scan(o, getpid(), getpid(), bench_now_ns(), &list);
      if (rc != 0) {
        fprintf(stderr, "bench_schedinfo: read failed: %d\n", rc);
        exit(1);
      }
    }
    per[r] = (bench_now_ns() - t0) / (uint64_t)n;
  }
  qsort(per, ROUNDS, sizeof(per[0]), bench_cmp_u64);
  return per[ROUNDS / 2];
}

int main(int argc, char **argv) {
  int reads = 200;
  if (argc == 3 && strcmp(argv[1], "--reads") == 0) {
    reads = atoi(argv[2]);
  }
  if (reads < 1) {
    fprintf(stderr, "usage: bench_schedinfo [--reads N]\n");
    return 2;
  }
  em_schedinfo_t *s = NULL;
  em_others_t *o = NULL;
  if (em_schedinfo_new(&s, "/proc", "/sys/fs/cgroup", getpid(), NULL) != 0 ||
      em_others_new(&o, "/proc") != 0) {
    fprintf(stderr, "bench_schedinfo: cannot open /proc\n");
    return 1;
  }
  printf("stat read (every tick): %llu ns\n", (unsigned long long)time_calls(s, o, STAT, reads));
  static const int counts[] = {1, 8, 32, MAX_THREADS};
  pthread_t threads[MAX_THREADS];
  int running = 1;
  for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
    for (; running < counts[k]; running++) {
      pthread_create(&threads[running - 1], NULL, sleeper, NULL);
    }
    usleep(10000);
    printf("per-thread pass, %3d threads: %llu ns\n", counts[k],
           (unsigned long long)time_calls(s, o, THREADS, reads / 4 + 1));
  }
  int procs = 0;
  em_others_list_t list;
  em_others_scan(o, getpid(), getpid(), bench_now_ns(), &list);
  printf("others scan of /proc: %llu ns", (unsigned long long)time_calls(s, o, OTHERS, 10));
  for (size_t i = 0; i < list.n; i++) {
    procs += list.procs[i].pid > 0;
  }
  printf(" (%d listed)\n", procs);
  pthread_mutex_lock(&lock);
  stopping = 1;
  pthread_cond_broadcast(&wake);
  pthread_mutex_unlock(&lock);
  for (int i = 0; i < running - 1; i++) {
    pthread_join(threads[i], NULL);
  }
  em_others_free(o);
  em_schedinfo_free(s);
  return 0;
}
