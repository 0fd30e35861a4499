/*
 * syncer.h - the spool's fdatasync on a thread of its own, so a sync never waits behind other
 * work off the loop.
 *
 * Why a thread of its own and not libuv's worker pool: the agent runs its pool with one
 * thread (main.c: UV_THREADPOOL_SIZE=1, so the agent stays small), and that thread also runs
 * the smaps_rollup walk (~9.5 ms per GiB resident), the sensor reads (milliseconds each on a
 * board's I2C rails) and a profile window's resolution (symbols and assembly, ~100 ms of CPU
 * per window, more with DWARF unwinding). A sync queued behind a resolution waited for all of
 * it: the spool's durability promise (what was appended a sync interval ago is on disk) then
 * depended on the profiler. A second pool thread would not help either: the pool is FIFO and
 * a second profile or smaps job can take it. A dedicated thread that does nothing but
 * fdatasync starts each sync as soon as it is asked, and nothing else can delay, cancel or
 * reorder it. tests/bench/bench_sync_delay measures the time from the ask to the start under
 * a profile window's load (30 s per mode on a 2-core machine): on the pool the worst was
 * 97-98 ms (p99 89-90 ms), on this thread 0.5-2 ms (p99 0.15-1 ms). It costs one mostly
 * sleeping thread (its stack is untouched memory) and one uv_async_t to hand the result back
 * to the loop.
 *
 *   IDLE --em_syncer_sync (loop)--> ASKED --thread wakes--> SYNCING --fdatasync returns-->
 *   DONE --uv_async on the loop--> done(ctx, rc), IDLE
 *   em_syncer_close: the thread ends after the sync in hand, the handle closes, closed(ctx)
 *
 * At most one sync is in flight (the spool is one file; a second ask while one runs is
 * -EBUSY, and the caller asks again on its next interval).
 *
 * Owns: the thread, its mutex and condition variable, the uv_async_t (closed by
 * em_syncer_close). The thread touches only the request slot under the mutex and calls
 * fdatasync on the fd it was handed; the fd stays the caller's and must stay open until the
 * done callback (or the close's callback) has run.
 */
#ifndef EDGEMON_AGENT_SYNCER_H
#define EDGEMON_AGENT_SYNCER_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

typedef struct em_syncer em_syncer_t;

/* What the syncer measured since it started. */
typedef struct {
  uint64_t syncs;        /* fdatasync calls made. */
  uint64_t failed;       /* Those that returned an error. */
  uint64_t wait_max_ns;  /* Longest time from em_syncer_sync to the fdatasync's start. */
  uint64_t wait_last_ns; /* That time for the last sync. */
} em_syncer_stats_t;

/* Makes a syncer for `loop`; nothing runs yet. Returns 0 and *out, -EINVAL or -ENOMEM. */
int em_syncer_new(em_syncer_t **out, uv_loop_t *loop);

/* Starts the thread and the loop's handle. Returns 0, -EINVAL (started or closed already), or
 * the negative errno of the handle's or the thread's creation (then em_syncer_close still
 * ends it: the handle made is closed through the loop). */
int em_syncer_start(em_syncer_t *s);

/*
 * Asks for fdatasync(fd). done(ctx, rc) is called on the loop once it has run (rc 0 or a
 * negative errno). Returns 0, -EBUSY (one is in flight: done will not be called for this
 * ask), or -EINVAL (also before em_syncer_start and after em_syncer_close).
 */
int em_syncer_sync(em_syncer_t *s, int fd, void (*done)(void *ctx, int rc), void *ctx);

/* True while a sync is asked or running. */
bool em_syncer_busy(const em_syncer_t *s);

/* Fills *out (read on the loop's thread). */
void em_syncer_stats(const em_syncer_t *s, em_syncer_stats_t *out);

/*
 * Ends the thread (after the sync in hand, whose done is still called) and closes the handle;
 * closed(ctx) is called from the loop when both are gone (at once when it never started).
 * Never blocks the loop on the disk.
 */
void em_syncer_close(em_syncer_t *s, void (*closed)(void *ctx), void *ctx);

/* Frees after close's callback, or one never started. NULL is a no-op. */
void em_syncer_free(em_syncer_t *s);

#endif /* EDGEMON_AGENT_SYNCER_H */
