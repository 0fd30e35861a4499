/*
 * lane.h - a bounded lane for expensive work: a fixed set of worker threads, each with a context
 * of its own (the HTTP layer gives each one its own read-only SQLite connections), and a FIFO of
 * jobs waiting for them. At most `workers` jobs run at once and at most `waiting` more wait;
 * past that a new job is refused at once, so the caller can answer "busy" instead of queueing
 * without bound.
 *
 * Admission is two steps so that the caller can park the request between them:
 * em_lane_reserve() takes a place or refuses, and em_lane_push() (which cannot fail) puts the
 * job in that place. A reservation must be pushed; the lane cannot be freed while one is open.
 *
 *   job:  reserve ──▶ RESERVED ──push──▶ WAITING ──a worker takes it──▶ RUNNING ──run()──▶ gone
 *
 *   edge                   function
 *   -> RESERVED            em_lane_reserve() (-EBUSY: full, -ESHUTDOWN: stopping; no job)
 *   RESERVED -> WAITING    em_lane_push()
 *   WAITING -> RUNNING     worker() in lane.c, oldest first
 *   RUNNING -> gone        the run callback returns (the lane never touches the job again)
 *
 * Threading: reserve, push and stats may be called from any thread; run() is called on a worker
 * thread with that worker's context, never on two threads for the same context. em_lane_free()
 * stops admitting, lets every job already admitted run (with `stopping` true for those that had
 * not started, so they can be answered without the expensive work) and joins the workers.
 * Owns the threads and the lock; the jobs belong to the caller (intrusive: the caller embeds an
 * em_lane_job_t in its own job).
 */
#ifndef EM_AGG_LANE_H
#define EM_AGG_LANE_H

#include <stdbool.h>
#include <stdint.h>

#define EM_LANE_MAX_WORKERS 64u

typedef struct em_lane em_lane_t;

/* The caller's job embeds this; the lane uses `next` while the job waits. */
typedef struct em_lane_job {
  struct em_lane_job *next;
} em_lane_job_t;

/* Runs job on a worker thread with that worker's context. stopping: the lane is being freed
 * and the job had not started; do the least (answer it) and return. The job may be freed by
 * the caller's side as soon as this returns, or earlier if run() hands it on. */
typedef void (*em_lane_run_fn)(void *worker_ctx, em_lane_job_t *job, bool stopping);

/* What the lane did since its start. */
typedef struct {
  uint64_t admitted;       /* Reserved now: running, waiting or about to be pushed (a gauge). */
  uint64_t running;        /* Running now (a gauge). */
  uint64_t refused_total;  /* em_lane_reserve() calls refused because the lane was full. */
  uint64_t finished_total; /* Jobs run to the end (stopping or not). */
} em_lane_stats_t;

/*
 * Starts `workers` threads (1..EM_LANE_MAX_WORKERS), worker i getting worker_ctx[i] (borrowed:
 * must outlive the lane; the array itself is copied), with room for `waiting` jobs besides the
 * running ones. The threads block every signal. Returns 0, -EINVAL, -ENOMEM, or the negative
 * error of pthread_create() (the threads started are joined first).
 */
int em_lane_new(em_lane_t **out, unsigned workers, unsigned waiting, void *const *worker_ctx,
                em_lane_run_fn run);

/* Takes a place for one job. Returns 0 (push a job now), -EBUSY when workers + waiting jobs
 * are admitted already (counted in refused_total), or -ESHUTDOWN once em_lane_free() began. */
int em_lane_reserve(em_lane_t *l);

/* Puts job (borrowed until run() is called for it) in the place a successful
 * em_lane_reserve() took; a worker runs it, the oldest waiting first. */
void em_lane_push(em_lane_t *l, em_lane_job_t *job);

/* The figures now (each read under the lock). A NULL l gives zeros. */
void em_lane_stats(em_lane_t *l, em_lane_stats_t *out);

/* Stops admitting, runs what was admitted (see above), joins the workers and frees. NULL is a
 * no-op. Must not be called while a reservation of the caller's own thread is open. */
void em_lane_free(em_lane_t *l);

#endif /* EM_AGG_LANE_H */
