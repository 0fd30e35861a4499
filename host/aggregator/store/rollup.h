/*
 * rollup.h - the store's rollups (SCHEMA.md, "Rollups"): per device, one row per minute and
 * per hour that merges the stage windows of that step exactly (stage_rollups: count, sum, min,
 * max and the histogram buckets of every window, merged with em_histo) and the mean and max of
 * each metric of its data rows (data_rollups). Minutes are computed from the raw rows only
 * (stage_windows, data), hours from the hour's minute rollups, so a crash loses nothing: a
 * watermark per step size in `meta` (rollup_1m_ns, rollup_1h_ns: every step before it is rolled;
 * rollup_1m_device, rollup_1h_device: of the step at it, the devices with id up to that one) is
 * written in the same transaction as the rows it covers. Work goes device by device, so a pass
 * can stop inside a step and the next one goes on from there. A raw data row written
 * below the minute watermark (an agent's spool replay, a slow clock) marks its (device, minute)
 * in rollup_dirty; a run recomputes those minutes and the hours above them.
 *
 * This module owns the rollup tables' contents, the watermarks and rollup_dirty. It runs on the
 * store's connection, inside a transaction the store opens and commits (store.c), and never
 * scans a table by time alone: it walks the devices table and the (device, time_ns) indexes.
 * Not thread-safe (the store's thread uses it).
 */
#ifndef EM_AGG_ROLLUP_H
#define EM_AGG_ROLLUP_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

#define EM_ROLLUP_GRACE_NS    (10ull * 1000000000ull) /* A step is closed this long after its end. */
#define EM_ROLLUP_MINUTE_NS   (60ll * 1000000000ll)
#define EM_ROLLUP_HOUR_NS     (3600ll * 1000000000ll)
#define EM_ROLLUP_MAX_STEPS   30    /* New minutes rolled per run (a backlog takes several runs). */
#define EM_ROLLUP_MAX_HOURS   24    /* New hours rolled per run. */
#define EM_ROLLUP_MAX_DIRTY   10000 /* Dirty (device, minute) recomputed per run. */
#define EM_ROLLUP_BUDGET_NS   (200ll * 1000000ll) /* CLOCK_MONOTONIC a pass starts work in. */
#define EM_ROLLUP_MAX_METRICS 256 /* Metrics per device and step kept; more are left out. */

typedef struct em_rollup em_rollup_t;

/* What one run did. */
typedef struct {
  uint64_t minutes;     /* Minute steps finished (for every device). */
  uint64_t hours;       /* Hour steps finished. */
  uint64_t dirty;       /* Dirty (device, minute) recomputed. */
  uint64_t rows;        /* Rollup rows written. */
  uint64_t bad_rows;    /* Raw rows left out: a malformed bucket blob or values object. */
  bool more;            /* Closed steps or dirty minutes remain for the next run. */
  int64_t watermark_1m; /* After the run (in its transaction): minutes before it are rolled. */
  int64_t watermark_1h;
} em_rollup_report_t;

/* Prepares the statements on db (whose schema has the rollup tables) and reads the minute
 * watermark. Returns 0, -ENOMEM, or -EIO (SQLite's message is on db). */
int em_rollup_new(em_rollup_t **out, sqlite3 *db);
void em_rollup_free(em_rollup_t *r); /* NULL is a no-op. */

/* Rolls closed steps (end older than now_real_ns - EM_ROLLUP_GRACE_NS) and dirty minutes,
 * within the limits above: the next device's step starts only while less than budget_ns of
 * CLOCK_MONOTONIC has passed since the call, so a pass takes the budget plus one device's step
 * (its raw rows of one minute, or its 60 minute rollups of one hour) at most. Must run inside an
 * open transaction; the caller commits, then calls em_rollup_reload() either way. Returns 0,
 * -ENOMEM, or an SQLite result code (> 0): the caller rolls back. */
int em_rollup_run(em_rollup_t *r, int64_t now_real_ns, int64_t budget_ns,
                  em_rollup_report_t *report);

/* Re-reads the committed minute watermark after a run's COMMIT (committed true) or ROLLBACK.
 * Returns 0 or an SQLite result code. */
int em_rollup_reload(em_rollup_t *r, bool committed);

/* False when a pass now would find nothing to do: the last committed pass finished everything,
 * no minute has closed since, and no dirty minute was noted since. */
bool em_rollup_has_work(const em_rollup_t *r, int64_t now_real_ns);

/* For a raw row of device at time_ns just written in the open transaction: when time_ns is
 * below the minute watermark, records its (device, minute) in rollup_dirty. Returns 0 or an
 * SQLite result code. */
int em_rollup_note_raw(em_rollup_t *r, int64_t device, int64_t time_ns);

#endif /* EM_AGG_ROLLUP_H */
