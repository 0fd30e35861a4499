/*
 * bench_sync_delay.c - how long the spool's fdatasync waits to start while the agent's worker
 * jobs run: libuv's worker pool with one thread (the agent's UV_THREADPOOL_SIZE=1), as the
 * spool's sync ran before, against the syncer's own thread (firmware/agent/transport/syncer.h).
 *
 * The load is the agent's during a profile window, on one loop: a 100 ms tick that appends a
 * data message (~4 KiB) to a file and queues a sensor read (2 ms on the worker), a profile
 * resolution (100 ms of CPU on the worker) once a second, and a sync asked every 230 ms (not a
 * divisor of a second, so the asks fall at every phase of a resolution and outside them). The
 * figure is the delay from the ask to the fdatasync's start, per mode: median, p99 and worst, over
 * the run.
 *
 *   bench_sync_delay [seconds per mode (10)] [resolution ms (100)] [file (./bench_sync.spool)]
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "syncer.h"
#include "bench_clock.h"

#define TICK_MS       100u
#define SYNC_MS       230u /* Not a divisor of the resolutions' 1 s: asks fall at every phase. */
#define SENSOR_US     2000u
#define PROFILE_EVERY 10u /* ticks */
#define APPEND_BYTES  4096u
#define MAX_SAMPLES   4096u

typedef struct {
  uv_loop_t *loop;
  bool use_syncer;
  em_syncer_t *syncer;
  int fd;
  uint64_t resolve_ns;
  uint64_t end_ns;
  unsigned ticks;
  uv_timer_t tick;
  uv_timer_t sync;
  /* Worker jobs: at most one of each kind queued, as in the agent. */
  uv_work_t sensor_work, profile_work, pool_sync_work;
  bool sensor_busy, profile_busy, sync_busy;
  uint64_t asked_ns;        /* The pool's sync: when it was asked (loop). */
  uint64_t pool_started_ns; /* When the worker began it. */
  uint64_t waits[MAX_SAMPLES];
  size_t n_waits;
  uint64_t syncer_seen; /* Syncs the syncer's stats have reported. */
} bench_t;

static void spin_ns(uint64_t ns) {
  uint64_t until = uv_hrtime() + ns;
  volatile uint64_t x = 0;
  while (uv_hrtime() < until) {
    x++;
  }
}

static void sensor_run(uv_work_t *w) {
  (void)w;
  spin_ns((uint64_t)SENSOR_US * 1000u);
}

static void sensor_done(uv_work_t *w, int status) {
  (void)status;
  ((bench_t *)w->data)->sensor_busy = false;
}

static void profile_run(uv_work_t *w) {
  spin_ns(((bench_t *)w->data)->resolve_ns);
}

static void profile_done(uv_work_t *w, int status) {
  (void)status;
  ((bench_t *)w->data)->profile_busy = false;
}

static void record_wait(bench_t *b, uint64_t wait) {
  if (b->n_waits < MAX_SAMPLES) {
    b->waits[b->n_waits++] = wait;
  }
}

/* The pool's path: what uv_fs_fdatasync does on the worker, with its start noted. */
static void pool_sync_run(uv_work_t *w) {
  bench_t *b = w->data;
  b->pool_started_ns = uv_hrtime();
  (void)fdatasync(b->fd);
}

static void pool_sync_done(uv_work_t *w, int status) {
  bench_t *b = w->data;
  b->sync_busy = false;
  if (status == 0) {
    record_wait(b, b->pool_started_ns - b->asked_ns);
  }
}

static void syncer_done(void *ctx, int rc) {
  bench_t *b = ctx;
  (void)rc;
  b->sync_busy = false;
  em_syncer_stats_t st;
  em_syncer_stats(b->syncer, &st);
  if (st.syncs > b->syncer_seen) {
    b->syncer_seen = st.syncs;
    record_wait(b, st.wait_last_ns);
  }
}

static void on_sync(uv_timer_t *t) {
  bench_t *b = t->data;
  if (b->sync_busy) {
    return; /* As the forwarder: nothing while one is in flight. */
  }
  if (b->use_syncer) {
    b->sync_busy = em_syncer_sync(b->syncer, b->fd, syncer_done, b) == 0;
    return;
  }
  b->asked_ns = uv_hrtime();
  b->sync_busy = uv_queue_work(b->loop, &b->pool_sync_work, pool_sync_run, pool_sync_done) == 0;
}

static void on_syncer_closed(void *ctx) {
  (void)ctx;
}

static void on_tick(uv_timer_t *t) {
  bench_t *b = t->data;
  static uint8_t msg[APPEND_BYTES];
  memset(msg, (int)(b->ticks & 0xffu), sizeof(msg));
  if (write(b->fd, msg, sizeof(msg)) != (ssize_t)sizeof(msg)) {
    perror("write");
  }
  if (!b->sensor_busy) {
    b->sensor_busy = uv_queue_work(b->loop, &b->sensor_work, sensor_run, sensor_done) == 0;
  }
  if (b->ticks % PROFILE_EVERY == 0 && !b->profile_busy) {
    b->profile_busy = uv_queue_work(b->loop, &b->profile_work, profile_run, profile_done) == 0;
  }
  b->ticks++;
  if (uv_hrtime() >= b->end_ns) {
    uv_timer_stop(&b->tick);
    uv_timer_stop(&b->sync);
    uv_close((uv_handle_t *)&b->tick, NULL);
    uv_close((uv_handle_t *)&b->sync, NULL);
    if (b->syncer) {
      em_syncer_close(b->syncer, on_syncer_closed, b);
    }
  }
}

static int run_mode(bool use_syncer, unsigned seconds, uint64_t resolve_ns, const char *path) {
  uv_loop_t loop;
  if (uv_loop_init(&loop) != 0) {
    return 1;
  }
  bench_t *b = calloc(1, sizeof(*b));
  if (!b) {
    return 1;
  }
  b->loop = &loop;
  b->use_syncer = use_syncer;
  b->resolve_ns = resolve_ns;
  b->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (b->fd < 0) {
    fprintf(stderr, "%s: %s\n", path, strerror(errno));
    free(b);
    return 1;
  }
  if (use_syncer && (em_syncer_new(&b->syncer, &loop) != 0 || em_syncer_start(b->syncer) != 0)) {
    fprintf(stderr, "cannot start the syncer\n");
    return 1;
  }
  b->sensor_work.data = b->profile_work.data = b->pool_sync_work.data = b;
  uv_timer_init(&loop, &b->tick);
  uv_timer_init(&loop, &b->sync);
  b->tick.data = b->sync.data = b;
  b->end_ns = uv_hrtime() + (uint64_t)seconds * 1000000000u;
  uv_timer_start(&b->tick, on_tick, TICK_MS, TICK_MS);
  uv_timer_start(&b->sync, on_sync, SYNC_MS, SYNC_MS);
  uv_run(&loop, UV_RUN_DEFAULT);
  int rc = uv_loop_close(&loop);
  em_syncer_free(b->syncer);
  close(b->fd);
  unlink(path);
  if (rc != 0 || b->n_waits == 0) {
    fprintf(stderr, "%s: loop not closed (%d) or no syncs\n", use_syncer ? "syncer" : "pool", rc);
    free(b);
    return 1;
  }
  qsort(b->waits, b->n_waits, sizeof(b->waits[0]), bench_cmp_u64);
  printf("%-7s %4zu syncs  ask->start median %8.3f ms  p99 %8.3f ms  max %8.3f ms\n",
         use_syncer ? "syncer" : "pool", b->n_waits, (double)b->waits[b->n_waits / 2] / 1e6,
         (double)b->waits[(b->n_waits * 99) / 100] / 1e6, (double)b->waits[b->n_waits - 1] / 1e6);
  free(b);
  return 0;
}

int main(int argc, char **argv) {
  unsigned seconds = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 10u;
  uint64_t resolve_ms = argc > 2 ? strtoull(argv[2], NULL, 10) : 100u;
  const char *path = argc > 3 ? argv[3] : "./bench_sync.spool";
  setenv("UV_THREADPOOL_SIZE", "1", 1); /* As main.c: before the pool's first use. */
  printf("bench_sync_delay: %u s per mode, tick %u ms (4 KiB append, 2 ms sensor read), "
         "profile resolution %llu ms every %u ticks, sync asked every %u ms\n",
         seconds, TICK_MS, (unsigned long long)resolve_ms, PROFILE_EVERY, SYNC_MS);
  int rc = run_mode(false, seconds, resolve_ms * 1000000u, path);
  rc |= run_mode(true, seconds, resolve_ms * 1000000u, path);
  return rc;
}
