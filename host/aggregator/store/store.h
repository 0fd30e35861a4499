/*
 * store.h - the aggregator's history in SQLite: devices, metric samples, per-stage latency
 * windows with their histogram buckets, level changes, flight recordings and stack
 * profiles (forensics.h).
 *
 * Writes are batched: em_store_add() queues rows into an open transaction that commits every
 * batch_ms or batch_rows rows (em_store_tick()), or when the caller asks (em_store_flush(): the
 * aggregator commits before it acknowledges QoS 1 messages), so a crash loses at most the open
 * batch, which then holds nothing acknowledged. The
 * database runs in WAL mode with synchronous=NORMAL: a committed batch survives a crash of the
 * process (kill -9); a power loss may lose the last committed batches but never corrupts the
 * file. WAL checkpoints run on a thread of their own (checkpoint.h), which keeps PATH-wal under
 * the bound SCHEMA.md states. The schema is documented
 * in host/aggregator/store/SCHEMA.md and created when missing.
 * Retention deletes rows older than retention_s and downsamples samples older than
 * downsample_after_s to one row per metric per downsample_step_s (the mean).
 *
 * Clean-stop detection: a row in table `meta` says whether the last run closed the store; at
 * open, a store that was not closed reports it (report->unclean) so the aggregator can say
 * that the last batch (at most batch_rows rows or batch_ms of data) was not committed.
 *
 * Owns one sqlite3 connection and its prepared statements. Not thread-safe: one thread (the
 * aggregator's MQTT thread) uses it.
 */
#ifndef EM_AGG_STORE_H
#define EM_AGG_STORE_H

#include "checkpoint.h"
#include "rollup.h"

#include <dict.h>
#include <edgemon/flight.h>
#include <edgemon/profile.h>
#include <edgemon/proto.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct {
  const char *path;            /* Database file (created with its directory's permissions). */
  uint32_t batch_ms;           /* Commit at least this often while rows are pending (> 0). */
  uint32_t batch_rows;         /* ... or when this many rows are pending (> 0). */
  uint64_t retention_s;        /* Delete rows older than this; 0 keeps everything. */
  uint64_t downsample_after_s; /* Downsample samples older than this; 0 never. */
  uint64_t downsample_step_s;  /* Bucket width of downsampled samples (> 0 when used). */
  /* Rollups run only when em_store_rollup() or em_store_retain() is called, not from
   * em_store_tick() (for tests that drive the clock). */
  bool rollup_manual;
  /* CLOCK_MONOTONIC ms a rollup pass starts work in: 0 is EM_ROLLUP_BUDGET_NS (200 ms); < 0
   * one device's step a pass (tests). A pass always rolls at least one step. */
  int32_t rollup_budget_ms;
  /* Encoded bytes of flight recordings kept per device, the oldest deleted first; 0:
   * EM_FLIGHTS_DEFAULT_MAX_BYTES (forensics.h). */
  uint64_t flight_max_bytes;
  /* Encoded bytes of stack profiles kept per device, the oldest deleted first; 0:
   * EM_PROFILES_DEFAULT_MAX_BYTES (forensics.h). */
  uint64_t profile_max_bytes;
  /* Encoded bytes of flight recordings, and of stack profiles, kept of all devices together,
   * the oldest received deleted first whichever device sent them; 0:
   * EM_FORENSICS_DEFAULT_TOTAL_MAX_BYTES (forensics.h). */
  uint64_t flight_total_max_bytes;
  uint64_t profile_total_max_bytes;
  /* Rows of `models` kept at most, in all and first named by one device (models.h); 0:
   * EM_MODELS_DEFAULT_MAX, EM_MODELS_DEFAULT_PER_DEVICE_MAX. An identity past either is stored
   * as no model (em_store_stats_t.models_refused). */
  uint32_t models_max;
  uint32_t models_per_device_max;
} em_store_opts_t;

typedef struct {
  bool created;            /* The file was new. */
  bool unclean;            /* The previous run did not close the store. */
  uint64_t last_commit_ns; /* CLOCK_REALTIME of the previous run's last commit, 0 unknown. */
  bool integrity_ok;       /* PRAGMA quick_check passed at open. */
} em_store_report_t;

typedef struct em_store em_store_t;

/* Opens or creates the database. Returns 0, or -EIO with a message in err (SQLite's text and
 * the path) when it cannot be opened, is not an edgemon database, or fails its check. */
int em_store_open(em_store_t **out, const em_store_opts_t *opts, em_store_report_t *report,
                  char *err, size_t err_cap);

/*
 * Queues the rows of one decoded message of `device`: birth -> devices row upserted; status,
 * state -> devices row updated (state also a level_changes row); data -> one data row holding
 * every present value (metrics named through dev's birth when it knows the session, else
 * "alias.N"), one stage_windows row per stage with count > 0, and the device's level and
 * last_seen, written at commit. A data message whose (device, session, seq) is stored already,
 * or a state message whose (device, session, time_ns, level) is, writes nothing and is counted
 * (em_store_stats_t.duplicates); it returns 0. recv_ns is CLOCK_REALTIME at receipt. Returns 0,
 * -EAGAIN when a row failed for a reason that may pass (SQLite busy or locked, disk full, I/O
 * error, out of memory: the caller should not acknowledge the message, so that it comes again),
 * or -EIO for another failure (the error is counted and the row dropped; the store stays
 * usable either way).
 */
int em_store_add(em_store_t *s, const char *device, const em_device_t *dev, const em_msg_t *msg,
                 uint64_t recv_ns);

/*
 * Queues one flight recording of `device`: f as em_flight_decode() read it from cbor[0..len),
 * which is stored as it came (forensics.h). A recording whose (device, session, number) is
 * stored already writes nothing and is counted (em_store_stats_t.duplicates); a new one may
 * delete the device's oldest recordings to keep it within opts.flight_max_bytes, then the
 * oldest received recordings of any device to keep them all within opts.flight_total_max_bytes.
 * Retention (em_store_retain()) deletes recordings whose time is older than retention_s.
 * Returns 0, -EAGAIN or -EIO as em_store_add() does, -EINVAL for missing arguments.
 */
int em_store_add_flight(em_store_t *s, const char *device, const em_flight_t *f,
                        const uint8_t *cbor, size_t len, uint64_t recv_ns);

/*
 * Queues one stack profile of `device`: p as em_profile_decode() read it from cbor[0..len),
 * which is stored as it came (forensics.h), with em_store_add_flight()'s rules: a profile
 * whose (device, session, number) is stored already writes nothing and is counted as a
 * duplicate, a new one may delete the device's oldest profiles to keep it within
 * opts.profile_max_bytes and then any device's oldest received to keep all within
 * opts.profile_total_max_bytes, retention deletes profiles whose time is older than retention_s.
 * Returns 0, -EAGAIN, -EIO or -EINVAL as em_store_add_flight() does.
 */
int em_store_add_profile(em_store_t *s, const char *device, const em_profile_t *p,
                         const uint8_t *cbor, size_t len, uint64_t recv_ns);

/* Commits the open batch when batch_ms passed since it began or batch_rows are pending.
 * now_ns is CLOCK_MONOTONIC. Unless opts.rollup_manual, also runs a rollup pass
 * (em_store_rollup(), with CLOCK_REALTIME) on the first tick and then every
 * EM_STORE_ROLLUP_EVERY_MS of now_ns, unless the last pass finished everything and neither a
 * minute has closed nor a late row come since: the rollups' periodic maintenance. Returns 0 or
 * -EIO. */
int em_store_tick(em_store_t *s, uint64_t now_ns);

/* Commits whatever is pending. Returns 0 or -EIO. */
int em_store_flush(em_store_t *s);

/* Applies retention and downsampling relative to now_real_ns (run it every minute or so;
 * it commits first), then em_store_rollup(): the aggregator's periodic maintenance. Retention
 * also deletes rollup rows (and dirty minutes) older than retention_s. Then the models rows no
 * row names any more are deleted (models.h; without retention only those no data was written
 * with) and forgotten by the store's id cache: an identity named again gets a new row. Last,
 * flight recordings and stack profiles are cut to their total bounds (a bound lowered since the
 * store was last written holds from the first pass, before any new recording). Returns 0 or
 * -EIO. */
int em_store_retain(em_store_t *s, uint64_t now_real_ns);

#define EM_STORE_ROLLUP_EVERY_MS 1000u /* em_store_tick()'s rollup pass period. */

/* Commits the open batch, then runs one rollup pass (rollup.h) in a transaction of its own:
 * dirty minutes, then closed minutes and hours device by device, at most EM_ROLLUP_MAX_STEPS
 * minutes and EM_ROLLUP_MAX_HOURS hours, starting a device's step only within
 * EM_ROLLUP_BUDGET_NS (200 ms) of the call: at most that plus one device's step (a few ms) of
 * ingest waits. A backlog catches up over successive calls (report->more). em_store_tick()
 * calls it every second and em_store_retain() every time.
 * Returns 0 or -EIO (counted as a failure of table "rollups"; nothing of the pass is kept). */
int em_store_rollup(em_store_t *s, uint64_t now_real_ns, em_rollup_report_t *report);

/* Failed writes of one table for one reason. table: "devices", "metrics", "stages", "models",
 * "data", "stage_windows", "level_changes", "meta", "transaction" (BEGIN/COMMIT), "retention",
 * "rollups", "rollup_dirty", "flights", "profiles"; reason:
 * SQLite's primary result code as a word ("constraint", "busy", "full", "ioerr", "nomem", ...,
 * "other"). */
typedef struct {
  char table[16];
  char reason[16];
  uint64_t count;
} em_store_failure_count_t;

#define EM_STORE_FAILURE_KINDS 16  /* Kinds kept; once full, the last one counts the rest. */
#define EM_STORE_FAILURE_TEXT  320 /* Bytes of the latest failure's text, NUL included. */

typedef struct {
  uint64_t rows;    /* Rows committed since open. */
  uint64_t batches; /* Transactions committed. */
  uint64_t errors;  /* Failed statements or commits (the sum of failures[].count). */
  uint64_t pending; /* Rows in the open batch. */
  /* Data messages not stored because their (device, session, seq) was already, and state
   * messages because their (device, session, time_ns, level) was (a QoS 1 redelivery, an
   * agent's write-ahead replay). Counted when seen, also in a batch that is later rolled back. */
  uint64_t duplicates;
  em_store_failure_count_t failures[EM_STORE_FAILURE_KINDS]; /* In order of first sight. */
  size_t n_failures;
  uint64_t wal_restarts;     /* Commits after which the writer copied the last frames itself. */
  uint64_t wal_restart_busy; /* Of which could not copy every frame (a reader held them). */
  em_ckpt_stats_t ckpt;      /* The WAL checkpointer's figures (checkpoint.h). */
  uint64_t rollup_runs;      /* Rollup passes committed. */
  uint64_t rollup_rows;      /* Rollup rows they wrote. */
  uint64_t rollup_bad_rows;  /* Raw rows they left out as malformed. */
  uint64_t flights;          /* Flight recordings stored (not counting duplicates). */
  uint64_t flights_dropped;  /* Recordings deleted to keep a device within flight_max_bytes. */
  uint64_t profiles;         /* Stack profiles stored (not counting duplicates). */
  uint64_t profiles_dropped; /* Profiles deleted to keep a device within profile_max_bytes. */
  /* Recordings and profiles deleted to keep all devices' within flight_total_max_bytes and
   * profile_total_max_bytes. These four are counted when done, also in a batch that is later
   * rolled back. */
  uint64_t flights_evicted;
  uint64_t profiles_evicted;
  /* Encoded bytes of flight recordings and of stack profiles stored now, all devices (the
   * open batch included; read after each one added, each maintenance pass and rollback). */
  uint64_t flight_bytes;
  uint64_t profile_bytes;
  /* Messages whose model identity got no models row (opts.models_max or
   * models_per_device_max reached): their rows are stored without a model. */
  uint64_t models_refused;
  uint64_t models_deleted; /* Models rows em_store_retain() deleted: nothing named them. */
} em_store_stats_t;

void em_store_stats(const em_store_t *s, em_store_stats_t *out);

/* Failures since the previous call (0 when none), and the text of the latest one copied into
 * text[0..cap) when there was one: "table T, device D: SQLite's message (reason, SQLite code
 * N)". For a rate-limited log: call it at most every so often. */
uint64_t em_store_take_failure(em_store_t *s, char *text, size_t cap);

/* Flushes, marks the store closed cleanly, and frees. NULL is a no-op. Returns 0 or -EIO. */
int em_store_close(em_store_t *s);

/* Frees without marking the store closed and without committing the open batch (what a crash
 * leaves: the next open reports unclean). For tests. NULL is a no-op. */
void em_store_abandon(em_store_t *s);

#endif /* EM_AGG_STORE_H */
