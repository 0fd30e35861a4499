/*
 * test_agg_lane.c - the API lane (lane.h): at most workers + waiting jobs admitted, the rest
 * refused and counted; each worker runs with its own context; the waiting jobs run oldest
 * first; em_lane_free() refuses new jobs, runs every admitted one (those not started with
 * `stopping`) and joins. Jobs block on a gate the test opens, so "running" and "waiting" are
 * states the test holds, not races it hopes to win.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lane.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#define MAX_JOBS 64

typedef struct {
  em_lane_job_t link; /* First. */
  int id;
  int ran; /* Times run. */
  int ctx; /* The worker context it ran with. */
  bool stopping;
  int order; /* Place among the jobs run, from 1. */
} job_t;

/* What the jobs share: a gate they wait on, and what they report. */
static struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool open;
  int started; /* Jobs inside run() now or done. */
  int done;
  int at_once; /* Most jobs inside run() at the same time. */
  int inside;
  int seq;
} g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0, 0, 0, 0, 0};

static void reset(bool open) {
  pthread_mutex_lock(&g.lock);
  g.open = open;
  g.started = g.done = g.at_once = g.inside = g.seq = 0;
  pthread_mutex_unlock(&g.lock);
}

static void open_gate(void) {
  pthread_mutex_lock(&g.lock);
  g.open = true;
  pthread_cond_broadcast(&g.cond);
  pthread_mutex_unlock(&g.lock);
}

/* Waits (5 s at most) until *counter reaches want; returns its value. */
static int wait_count(const int *counter, int want) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 5;
  pthread_mutex_lock(&g.lock);
  while (*counter < want && pthread_cond_timedwait(&g.cond, &g.lock, &until) == 0) {
  }
  int got = *counter;
  pthread_mutex_unlock(&g.lock);
  return got;
}

static void run(void *ctx, em_lane_job_t *link, bool stopping) {
  job_t *j = (job_t *)(void *)link;
  pthread_mutex_lock(&g.lock);
  j->ran++;
  j->ctx = *(int *)ctx;
  j->stopping = stopping;
  j->order = ++g.seq;
  g.started++;
  g.inside++;
  if (g.inside > g.at_once) {
    g.at_once = g.inside;
  }
  pthread_cond_broadcast(&g.cond);
  while (!g.open && !stopping) {
    pthread_cond_wait(&g.cond, &g.lock);
  }
  g.inside--;
  g.done++;
  pthread_cond_broadcast(&g.cond);
  pthread_mutex_unlock(&g.lock);
}

static int ctx_ids[EM_LANE_MAX_WORKERS];
static void *ctxs[EM_LANE_MAX_WORKERS];

static int setup(void **state) {
  (void)state;
  for (unsigned i = 0; i < EM_LANE_MAX_WORKERS; i++) {
    ctx_ids[i] = (int)i + 1;
    ctxs[i] = &ctx_ids[i];
  }
  return 0;
}

static void admit(em_lane_t *l, job_t *jobs, int n) {
  for (int i = 0; i < n; i++) {
    jobs[i].id = i;
    assert_int_equal(em_lane_reserve(l), 0);
    em_lane_push(l, &jobs[i].link);
  }
}

static void lane_refuses_past_workers_plus_waiting(void **state) {
  (void)state;
  const unsigned workers = 2;
  const unsigned waiting = 3;
  reset(false);
  em_lane_t *l = NULL;
  assert_int_equal(em_lane_new(&l, workers, waiting, ctxs, run), 0);
  job_t jobs[MAX_JOBS];
  memset(jobs, 0, sizeof(jobs));
  admit(l, jobs, (int)(workers + waiting));
  assert_int_equal(wait_count(&g.started, (int)workers), (int)workers);
  em_lane_stats_t st;
  em_lane_stats(l, &st);
  assert_int_equal(st.admitted, workers + waiting);
  assert_int_equal(st.running, workers);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(em_lane_reserve(l), -EBUSY);
  }
  em_lane_stats(l, &st);
  assert_int_equal(st.refused_total, 3);
  assert_int_equal(st.admitted, workers + waiting);
  open_gate();
  assert_int_equal(wait_count(&g.done, (int)(workers + waiting)), (int)(workers + waiting));
  /* The lane has room again once the jobs are done. */
  for (int tries = 0; tries < 500; tries++) {
    em_lane_stats(l, &st);
    if (st.admitted == 0) {
      break;
    }
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  assert_int_equal(st.admitted, 0);
  assert_int_equal(st.finished_total, workers + waiting);
  assert_int_equal(g.at_once, (int)workers);
  job_t more = {0};
  assert_int_equal(em_lane_reserve(l), 0);
  em_lane_push(l, &more.link);
  em_lane_free(l);
  assert_int_equal(more.ran, 1);
  for (unsigned i = 0; i < workers + waiting; i++) {
    assert_int_equal(jobs[i].ran, 1);
    assert_false(jobs[i].stopping);
  }
}

static void lane_runs_the_oldest_jobs_each_worker_with_its_own_context(void **state) {
  (void)state;
  const unsigned workers = 3;
  reset(false);
  em_lane_t *l = NULL;
  assert_int_equal(em_lane_new(&l, workers, 10, ctxs, run), 0);
  job_t jobs[MAX_JOBS];
  memset(jobs, 0, sizeof(jobs));
  admit(l, jobs, 10);
  assert_int_equal(wait_count(&g.started, (int)workers), (int)workers);
  /* The three running jobs are the three oldest, one per context. */
  bool seen[4] = {false};
  for (unsigned i = 0; i < workers; i++) {
    assert_int_equal(jobs[i].ran, 1);
    assert_true(jobs[i].ctx >= 1 && jobs[i].ctx <= (int)workers);
    assert_false(seen[jobs[i].ctx]);
    seen[jobs[i].ctx] = true;
  }
  for (int i = (int)workers; i < 10; i++) {
    assert_int_equal(jobs[i].ran, 0);
  }
  open_gate();
  em_lane_free(l);
  for (int i = (int)workers; i < 10; i++) {
    assert_int_equal(jobs[i].ran, 1);
  }
}

typedef struct {
  em_lane_t *lane;
} freer_t;

static void *freer(void *arg) {
  em_lane_free(((freer_t *)arg)->lane);
  return NULL;
}

static void lane_free_runs_every_admitted_job_oldest_first_and_refuses_new_ones(void **state) {
  (void)state;
  reset(false);
  em_lane_t *l = NULL;
  assert_int_equal(em_lane_new(&l, 1, MAX_JOBS, ctxs, run), 0);
  job_t jobs[MAX_JOBS];
  memset(jobs, 0, sizeof(jobs));
  admit(l, jobs, 4);
  assert_int_equal(wait_count(&g.started, 1), 1);
  /* Free while the first job holds the only worker: it stops admitting at once. */
  freer_t f = {l};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, freer, &f), 0);
  int n = 4;
  for (;;) {
    int rc = em_lane_reserve(l);
    if (rc == -ESHUTDOWN) {
      break;
    }
    assert_int_equal(rc, 0); /* Admitted before the stop: it must be pushed, and is run. */
    jobs[n].id = n;
    em_lane_push(l, &jobs[n].link);
    n++;
    if (n == MAX_JOBS) {
      open_gate(); /* Let the freer finish before failing, so no thread outlives the test. */
      pthread_join(t, NULL);
      fail_msg("em_lane_free() did not stop admitting");
    }
    struct timespec pause = {0, 1000000L * n}; /* Give the freer time, more and more. */
    nanosleep(&pause, NULL);
  }
  open_gate();
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(jobs[0].ran, 1);
  assert_false(jobs[0].stopping);
  for (int i = 1; i < n; i++) {
    assert_int_equal(jobs[i].ran, 1);
    assert_true(jobs[i].stopping);
    assert_int_equal(jobs[i].order, i + 1); /* One worker: oldest first. */
  }
  assert_int_equal(g.done, n);
}

static void lane_new_refuses_bad_arguments(void **state) {
  (void)state;
  em_lane_t *l = NULL;
  assert_int_equal(em_lane_new(&l, 0, 1, ctxs, run), -EINVAL);
  assert_int_equal(em_lane_new(&l, EM_LANE_MAX_WORKERS + 1, 1, ctxs, run), -EINVAL);
  assert_int_equal(em_lane_new(&l, 1, 1, ctxs, NULL), -EINVAL);
  assert_int_equal(em_lane_new(&l, 1, 1, NULL, run), -EINVAL);
  assert_null(l);
  em_lane_free(NULL);
  em_lane_stats_t st;
  em_lane_stats(NULL, &st);
  assert_int_equal(st.admitted + st.refused_total, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(lane_refuses_past_workers_plus_waiting, setup),
      cmocka_unit_test_setup(lane_runs_the_oldest_jobs_each_worker_with_its_own_context, setup),
      cmocka_unit_test_setup(lane_free_runs_every_admitted_job_oldest_first_and_refuses_new_ones,
                             setup),
      cmocka_unit_test(lane_new_refuses_bad_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
