/*
 * lane.c - a bounded lane of worker threads for expensive jobs (see lane.h).
 *
 * One mutex guards the FIFO and the counts; one condition variable wakes the workers, both for
 * a pushed job and for the stop. Invariants, under the lock:
 *   1. running <= admitted <= workers + waiting, and the FIFO holds at most admitted - running
 *      jobs (the rest of the admitted are reservations not yet pushed);
 *   2. once stopping is set it is never cleared, and em_lane_reserve() admits nothing more;
 *   3. a worker leaves only when stopping is set and admitted is 0, so every job admitted
 *      before the stop is run, and em_lane_free() returns with no job left behind.
 */
#define _POSIX_C_SOURCE 200809L
#include "lane.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

struct em_lane {
  pthread_mutex_t lock;
  pthread_cond_t wake;
  em_lane_run_fn run;
  unsigned workers;
  unsigned capacity; /* workers + waiting. */
  unsigned started;  /* Threads started (joined at free). */
  pthread_t *threads;
  void **ctx; /* Per worker, borrowed. */

  /* Under lock. */
  em_lane_job_t *head; /* Oldest waiting job. */
  em_lane_job_t *tail;
  bool stopping;
  uint64_t admitted;
  uint64_t running;
  uint64_t refused_total;
  uint64_t finished_total;
};

typedef struct {
  em_lane_t *lane;
  void *ctx;
} worker_arg_t;

static void *worker(void *arg) {
  worker_arg_t wa = *(worker_arg_t *)arg;
  free(arg);
  em_lane_t *l = wa.lane;
  pthread_mutex_lock(&l->lock);
  for (;;) {
    em_lane_job_t *job = l->head;
    if (job) {
      l->head = job->next;
      if (!l->head) {
        l->tail = NULL;
      }
      job->next = NULL;
      l->running++;
      bool stopping = l->stopping;
      pthread_mutex_unlock(&l->lock);
      l->run(wa.ctx, job, stopping); /* The job is not touched past this call. */
      pthread_mutex_lock(&l->lock);
      l->running--;
      l->admitted--;
      l->finished_total++;
      if (l->stopping && l->admitted == 0) {
        pthread_cond_broadcast(&l->wake); /* The idle workers may leave now. */
      }
      continue;
    }
    if (l->stopping && l->admitted == 0) {
      break;
    }
    pthread_cond_wait(&l->wake, &l->lock);
  }
  pthread_mutex_unlock(&l->lock);
  return NULL;
}

/* Stops admitting and joins the started threads; frees everything. */
static void lane_destroy(em_lane_t *l) {
  pthread_mutex_lock(&l->lock);
  l->stopping = true;
  pthread_cond_broadcast(&l->wake);
  pthread_mutex_unlock(&l->lock);
  for (unsigned i = 0; i < l->started; i++) {
    pthread_join(l->threads[i], NULL);
  }
  pthread_cond_destroy(&l->wake);
  pthread_mutex_destroy(&l->lock);
  free(l->threads);
  free(l->ctx);
  free(l);
}

int em_lane_new(em_lane_t **out, unsigned workers, unsigned waiting, void *const *worker_ctx,
                em_lane_run_fn run) {
  if (!out || !run || !worker_ctx || workers == 0 || workers > EM_LANE_MAX_WORKERS ||
      waiting > UINT32_MAX - workers) {
    return -EINVAL;
  }
  *out = NULL;
  em_lane_t *l = calloc(1, sizeof(*l));
  if (!l) {
    return -ENOMEM;
  }
  l->threads = calloc(workers, sizeof(*l->threads));
  l->ctx = calloc(workers, sizeof(*l->ctx));
  if (!l->threads || !l->ctx) {
    free(l->threads);
    free(l->ctx);
    free(l);
    return -ENOMEM;
  }
  if (pthread_mutex_init(&l->lock, NULL) != 0) {
    free(l->threads);
    free(l->ctx);
    free(l);
    return -ENOMEM;
  }
  if (pthread_cond_init(&l->wake, NULL) != 0) {
    pthread_mutex_destroy(&l->lock);
    free(l->threads);
    free(l->ctx);
    free(l);
    return -ENOMEM;
  }
  memcpy(l->ctx, worker_ctx, workers * sizeof(*l->ctx));
  l->run = run;
  l->workers = workers;
  l->capacity = workers + waiting;
  /* The workers take no signals: they stay with the caller's loop. */
  sigset_t all;
  sigset_t old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = 0;
  for (unsigned i = 0; i < workers; i++) {
    worker_arg_t *wa = malloc(sizeof(*wa));
    if (!wa) {
      rc = -ENOMEM;
      break;
    }
    *wa = (worker_arg_t){l, l->ctx[i]};
    int err = pthread_create(&l->threads[i], NULL, worker, wa);
    if (err != 0) {
      free(wa);
      rc = -err;
      break;
    }
    l->started++;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    lane_destroy(l);
    return rc;
  }
  *out = l;
  return 0;
}

int em_lane_reserve(em_lane_t *l) {
  pthread_mutex_lock(&l->lock);
  int rc = 0;
  if (l->stopping) {
    rc = -ESHUTDOWN;
  } else if (l->admitted >= l->capacity) {
    l->refused_total++;
    rc = -EBUSY;
  } else {
    l->admitted++;
  }
  pthread_mutex_unlock(&l->lock);
  return rc;
}

void em_lane_push(em_lane_t *l, em_lane_job_t *job) {
  job->next = NULL;
  pthread_mutex_lock(&l->lock);
  if (l->tail) {
    l->tail->next = job;
  } else {
    l->head = job;
  }
  l->tail = job;
  pthread_cond_signal(&l->wake);
  pthread_mutex_unlock(&l->lock);
}

void em_lane_stats(em_lane_t *l, em_lane_stats_t *out) {
  memset(out, 0, sizeof(*out));
  if (!l) {
    return;
  }
  pthread_mutex_lock(&l->lock);
  out->admitted = l->admitted;
  out->running = l->running;
  out->refused_total = l->refused_total;
  out->finished_total = l->finished_total;
  pthread_mutex_unlock(&l->lock);
}

void em_lane_free(em_lane_t *l) {
  if (l) {
    lane_destroy(l);
  }
}
