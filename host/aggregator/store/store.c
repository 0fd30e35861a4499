/*
 * store.c - the aggregator's history in SQLite (see store.h; the schema is in SCHEMA.md).
 *
 * Design notes.
 *  1. One connection, opened in WAL mode with synchronous=NORMAL and a busy timeout, so readers
 *     (the JSON API, sqlite3 on the command line, backups) never block the writer for long.
 *  2. Every statement is prepared once in em_store_open() and reset after each use; strings are
 *     bound with their lengths (SQLITE_STATIC: they live for the step), numbers as int64 or
 *     double. A uint64 above INT64_MAX is stored as INT64_MAX (ns since the epoch stay below it
 *     until 2262).
 *  3. Devices, metric names and stages are small dictionary tables (integer ids); the ids are
 *     cached in sorted arrays so the hot path does one INSERT per row. Names first seen in a
 *     batch are inserted inside it: a rolled-back batch may take them with it, so a rollback
 *     empties the caches.
 *  4. Rows per message are what limits ingest (measured: 25 rows per data message capped the
 *     aggregator at ~6k msg/s). A data message is therefore ONE `data` row whose values are a
 *     JSON object keyed by metric id (the `samples` view unfolds it with json_each), plus one
 *     stage_windows row per active stage. The device's last_seen_ns and level from data are
 *     kept in the device cache and written once per device per batch, at commit (or before any
 *     other update of that device, so order is kept). The hot tables have one index each,
 *     (device, time_ns); retention walks it per device.
 *  5. Checkpoints run on a thread of their own (checkpoint.h), so a COMMIT only appends to the
 *     WAL. The writer's automatic checkpoint is only a backstop (EM_STORE_WAL_BACKSTOP_BYTES) for
 *     a stalled checkpointer, and its journal_size_limit cuts the file back when the log
 *     restarts after a complete checkpoint.
 *  6. Batches: the first row opens a transaction (BEGIN); em_store_tick() commits when
 *     batch_rows rows are pending or batch_ms have passed since the first tick that saw the
 *     batch (the caller's clock, so tests drive time). Each commit also writes
 *     meta.last_commit_ns (CLOCK_REALTIME) inside the batch.
 *  7. Errors: a failed row statement counts an error and drops that row (em_store_add() says
 *     -EAGAIN when its reason may pass: busy, locked, full, I/O, out of memory, so that the
 *     caller does not acknowledge the message and gets it again); a failed COMMIT counts an
 *     error, rolls back and returns -EIO. The store stays usable after both. Every failure is
 *     counted by table and SQLite reason (em_store_stats_t.failures) and its text (table, device,
 *     SQLite's message) kept for the caller's rate-limited log (em_store_take_failure()).
 *  8. Model identities (models.h): ids cached like the dictionary names (at most
 *     EM_STORE_MODEL_CACHE_MAX); a data message raises its model's last_ns in the cache entry,
 *     written once per model per batch at commit, and a batch whose last_ns writes fail does not
 *     commit. The retention pass sweeps the models rows nothing names any more and drops their
 *     ids from the cache, so a cached id always has its row.
 *
 * States of the connection:
 *
 *     open --em_store_add--> in batch --em_store_tick/flush (COMMIT)--> idle
 *       ^                        |  \--COMMIT fails--> ROLLBACK --> idle
 *     idle <---------------------+
 *     idle/in batch --em_store_close--> meta.clean=1, closed
 *     idle/in batch --em_store_abandon--> closed, meta.clean stays 0 (a crash)
 *
 * Owns the sqlite3 handle, its statements and the name caches. Not thread-safe.
 */
#define _POSIX_C_SOURCE 200809L
#include "store.h"

#include "buckets.h"
#include "buf.h"
#include "checkpoint.h"
#include "forensics.h"
#include "identity.h"
#include "models.h"
#include "rollup.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* PRAGMA application_id of an edgemon store: "EDGM" as a big-endian int32. */
#define EM_STORE_APP_ID       0x4544474d
#define EM_STORE_USER_VERSION 11
/* The oldest layout this aggregator still opens: version 2 gains data.session and data.seq
 * (ALTER TABLE, its old rows keep NULL there) and the unique index on them; versions 2 and 3
 * gain the unique index of level_changes (their repeated rows deleted first, the first kept). */
#define EM_STORE_MIGRATES_FROM 2
#define EM_STORE_CACHE_KIB     32768 /* SQLite page cache: keeps the hot index pages. */
/* Page size of a new store: a 1-hour rollup row (~1.4 KB) fits in a 16 KiB page of the
 * WITHOUT ROWID stage_rollups, where at 4 KiB (local payload ~1 KB) it continued on an overflow
 * page and a 7-day scan read every row from two pages (SCHEMA.md, "Page size"). */
#define EM_STORE_PAGE_BYTES 16384u
#define EM_STORE_CKPT_MS    1000 /* WAL checkpoint period (checkpoint.h). */
/* A data row's values object: at most EM_PROTO_MAX_METRICS members of 48 bytes each
 * (,"<int64>":<number>) and its braces. */
#define VALUES_JSON_MAX_BYTES (EM_PROTO_MAX_METRICS * 48u + 2u)
/* The WAL's bounds (SCHEMA.md, "WAL bound"). After a commit that leaves the WAL file above
 * EM_STORE_WAL_RESTART_BYTES the writer checkpoints what the checkpointer has not yet copied,
 * so that its next batch starts the log over; the log restart cuts the file back to that size
 * (journal_size_limit). Past EM_STORE_WAL_TRUNCATE_BYTES the checkpointer runs TRUNCATE. Should
 * both stall, the writer's automatic checkpoint runs past EM_STORE_WAL_BACKSTOP_BYTES of WAL
 * (in pages of the store's own size: 16 KiB for a new store, 4 KiB for an older one). */
#define EM_STORE_WAL_RESTART_BYTES  (4ull * 1024 * 1024)
#define EM_STORE_WAL_TRUNCATE_BYTES (16ull * 1024 * 1024)
#define EM_STORE_WAL_BACKSTOP_BYTES (32ull * 1024 * 1024)
#define EM_STORE_BUSY_MS            5000
#define EM_STORE_CACHE_MAX          1000000u /* Names cached per dictionary table. */
/* Model identities cached (canonical key -> models.id); past it, an identity not cached costs
 * one SELECT per message that carries it, and a data message one UPDATE of its last_ns. */
#define EM_STORE_MODEL_CACHE_MAX 4096u
#define NS_PER_S                 1000000000ull
/* A verdict's JSON printed on the stack when it fits (most do: a few causes of a few figures);
 * a larger one, up to what proto's limits allow, is printed into a malloc'd buffer. */
#define VERDICT_JSON_STACK_BYTES 4096u

typedef struct {
  char *name;
  int64_t id;
  /* Devices: last_seen_ns, level and model from data not yet written (seen_dirty). Models:
   * seen_ns is the latest time_ns of the rows written with it in the open batch, not yet in
   * its models.last_ns while seen_dirty (models.h, the invariant). */
  bool seen_dirty;
  int8_t level; /* -1: the data carried none. */
  bool model_dirty;
  int64_t model; /* models.id of the latest live data's model; 0: none named. */
  uint64_t seen_ns;
} name_id_t;

/* Sorted name -> id cache of one dictionary table. */
typedef struct {
  name_id_t *v;
  size_t n;
  size_t cap;
  size_t max; /* Entries kept at most; 0: EM_STORE_CACHE_MAX. */
} name_cache_t;

enum {
  ST_BEGIN,
  ST_COMMIT,
  ST_ROLLBACK,
  ST_DEVICE_ID,
  ST_METRIC_ID,
  ST_STAGE_ID,
  ST_DEVICE_GET, /* ST_*_ID + ST_GET_AFTER_ID: the id that the insert before it made or kept */
  ST_METRIC_GET,
  ST_STAGE_GET,
  ST_BIRTH,
  ST_STATUS,
  ST_STATE,
  ST_MODEL_SET,
  ST_SEEN,
  ST_DATA,
  ST_WINDOW,
  ST_LEVEL,
  ST_META_SET,
  ST_META_GET,
  ST_COUNT
};

enum { ST_GET_AFTER_ID = ST_DEVICE_GET - ST_DEVICE_ID };
_Static_assert(ST_METRIC_GET - ST_METRIC_ID == ST_GET_AFTER_ID &&
                   ST_STAGE_GET - ST_STAGE_ID == ST_GET_AFTER_ID,
               "each name table's id lookup follows its insert by the same distance");

static const char *const stmt_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    /* No RETURNING (SQLite 3.35): Debian 11 has 3.34, Ubuntu 20.04 3.31. */
    [ST_DEVICE_ID] = "INSERT INTO devices(name) VALUES(?1) ON CONFLICT(name) DO NOTHING",
    [ST_METRIC_ID] = "INSERT INTO metrics(name) VALUES(?1) ON CONFLICT(name) DO NOTHING",
    [ST_STAGE_ID] = "INSERT INTO stages(name) VALUES(?1) ON CONFLICT(name) DO NOTHING",
    [ST_DEVICE_GET] = "SELECT id FROM devices WHERE name = ?1",
    [ST_METRIC_GET] = "SELECT id FROM metrics WHERE name = ?1",
    [ST_STAGE_GET] = "SELECT id FROM stages WHERE name = ?1",
    [ST_BIRTH] = "UPDATE devices SET session = ?2, birth_time_ns = ?3, agent_version = ?4, "
                 "board = ?5, period_ns = ?6, last_seen_ns = max(coalesce(last_seen_ns, 0), ?3), "
                 "model = ?7 WHERE id = ?1",
    [ST_STATUS] = "UPDATE devices SET online = ?2, status_time_ns = ?3, "
                  "last_seen_ns = max(coalesce(last_seen_ns, 0), ?3) WHERE id = ?1",
    [ST_STATE] = "UPDATE devices SET level = ?2, reason = ?3, state_time_ns = ?4, "
                 "last_seen_ns = max(coalesce(last_seen_ns, 0), ?4), model = ?5 WHERE id = ?1",
    /* A state message whose level is its previous level: a change of model only. */
    [ST_MODEL_SET] = "UPDATE devices SET model = ?2, "
                     "last_seen_ns = max(coalesce(last_seen_ns, 0), ?3) WHERE id = ?1",
    [ST_SEEN] = "UPDATE devices SET level = coalesce(?2, level), "
                "last_seen_ns = max(coalesce(last_seen_ns, 0), ?3), "
                "model = CASE WHEN ?4 THEN ?5 ELSE model END WHERE id = ?1",
    /* Idempotent on (device, session, seq): a repeated delivery (QoS 1 redelivery, an agent's
     * write-ahead replay) changes nothing. ON CONFLICT only skips uniqueness conflicts. */
    [ST_DATA] = "INSERT INTO data(device, time_ns, n, vals, session, seq, level, model) "
                "VALUES(?1, ?2, 1, ?3, ?4, ?5, ?6, ?7) ON CONFLICT DO NOTHING",
    [ST_WINDOW] = "INSERT INTO stage_windows(device, time_ns, stage, window_ns, count, sum_ns, "
                  "min_ns, max_ns, p50_ns, p90_ns, p99_ns, p999_ns, scale, zero_count, buckets, "
                  "model) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, "
                  "?16)",
    /* Idempotent on (device, session, time_ns, level): a state message carries no seq, and
     * one change of one session at one time to one level is one change. */
    [ST_LEVEL] = "INSERT INTO level_changes(device, time_ns, session, level, prev_level, rule, "
                 "stage, value, bound, reason, verdict) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
                 "?10, ?11) ON CONFLICT DO NOTHING",
    [ST_META_SET] = "INSERT INTO meta(key, value) VALUES(?1, ?2) ON CONFLICT(key) DO UPDATE SET "
                    "value = excluded.value",
    [ST_META_GET] = "SELECT value FROM meta WHERE key = ?1",
};

/* The table each statement writes, for the failure counters ("transaction": BEGIN, COMMIT). */
static const char *const stmt_table[ST_COUNT] = {
    [ST_BEGIN] = "transaction",    [ST_COMMIT] = "transaction",  [ST_ROLLBACK] = "transaction",
    [ST_DEVICE_ID] = "devices",    [ST_METRIC_ID] = "metrics",   [ST_STAGE_ID] = "stages",
    [ST_DEVICE_GET] = "devices",   [ST_METRIC_GET] = "metrics",  [ST_STAGE_GET] = "stages",
    [ST_MODEL_SET] = "devices",    [ST_BIRTH] = "devices",       [ST_STATUS] = "devices",
    [ST_STATE] = "devices",        [ST_SEEN] = "devices",        [ST_DATA] = "data",
    [ST_WINDOW] = "stage_windows", [ST_LEVEL] = "level_changes", [ST_META_SET] = "meta",
    [ST_META_GET] = "meta",
};

/* The schema (SCHEMA.md explains every column). IF NOT EXISTS: also completes a store whose
 * creation was interrupted. */
static const char schema_sql[] =
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS devices ("
    " id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, session INTEGER,"
    " birth_time_ns INTEGER, agent_version TEXT, board TEXT, period_ns INTEGER,"
    " online INTEGER, status_time_ns INTEGER, level INTEGER, reason TEXT,"
    " state_time_ns INTEGER, last_seen_ns INTEGER, model INTEGER);"
    "CREATE TABLE IF NOT EXISTS metrics (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);"
    "CREATE TABLE IF NOT EXISTS stages (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);"
    "CREATE TABLE IF NOT EXISTS data ("
    " device INTEGER NOT NULL, time_ns INTEGER NOT NULL, n INTEGER NOT NULL DEFAULT 1,"
    " vals TEXT NOT NULL, counts TEXT, session INTEGER, seq INTEGER, level INTEGER,"
    " model INTEGER);"
    "CREATE INDEX IF NOT EXISTS data_device_time ON data(device, time_ns);"
    "CREATE UNIQUE INDEX IF NOT EXISTS data_device_session_seq ON data(device, session, seq)"
    " WHERE seq IS NOT NULL;"
    "CREATE VIEW IF NOT EXISTS samples AS"
    " SELECT d.device AS device, d.time_ns AS time_ns, CAST(j.key AS INTEGER) AS metric,"
    " j.value AS value,"
    " CASE WHEN d.counts IS NULL THEN 1"
    " ELSE json_extract(d.counts, '$.\"' || j.key || '\"') END AS n"
    " FROM data d, json_each(d.vals) j;"
    "CREATE TABLE IF NOT EXISTS stage_windows ("
    " device INTEGER NOT NULL, time_ns INTEGER NOT NULL, stage INTEGER NOT NULL,"
    " window_ns INTEGER NOT NULL, count INTEGER NOT NULL, sum_ns INTEGER NOT NULL,"
    " min_ns INTEGER NOT NULL, max_ns INTEGER NOT NULL, p50_ns INTEGER NOT NULL,"
    " p90_ns INTEGER NOT NULL, p99_ns INTEGER NOT NULL, p999_ns INTEGER NOT NULL,"
    " scale INTEGER NOT NULL, zero_count INTEGER NOT NULL, buckets BLOB NOT NULL,"
    " model INTEGER);"
    "CREATE INDEX IF NOT EXISTS stage_windows_device_time ON stage_windows(device, time_ns);"
    "CREATE TABLE IF NOT EXISTS level_changes ("
    " device INTEGER NOT NULL, time_ns INTEGER NOT NULL, session INTEGER NOT NULL,"
    " level INTEGER NOT NULL, prev_level INTEGER NOT NULL, rule TEXT, stage TEXT,"
    " value REAL, bound REAL, reason TEXT, verdict TEXT);"
    "CREATE INDEX IF NOT EXISTS level_changes_device_time ON level_changes(device, time_ns);"
    "CREATE INDEX IF NOT EXISTS level_changes_time ON level_changes(time_ns);"
    "CREATE UNIQUE INDEX IF NOT EXISTS level_changes_device_session_time_level"
    " ON level_changes(device, session, time_ns, level);"
    /* Version 5: the rollups (rollup.h). Created empty; the maintenance fills them. */
    "CREATE TABLE IF NOT EXISTS stage_rollups ("
    " step_s INTEGER NOT NULL, device INTEGER NOT NULL, stage INTEGER NOT NULL,"
    " time_ns INTEGER NOT NULL, count INTEGER NOT NULL, sum_ns INTEGER NOT NULL,"
    " min_ns INTEGER NOT NULL, max_ns INTEGER NOT NULL, scale INTEGER NOT NULL,"
    " zero_count INTEGER NOT NULL, buckets BLOB NOT NULL,"
    " PRIMARY KEY (step_s, device, time_ns, stage)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS stage_rollups_time ON stage_rollups(step_s, time_ns);"
    "CREATE TABLE IF NOT EXISTS data_rollups ("
    " step_s INTEGER NOT NULL, device INTEGER NOT NULL, time_ns INTEGER NOT NULL,"
    " n INTEGER NOT NULL, mean TEXT NOT NULL, max TEXT NOT NULL, counts TEXT,"
    " PRIMARY KEY (step_s, device, time_ns)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS rollup_dirty ("
    " device INTEGER NOT NULL, time_ns INTEGER NOT NULL,"
    " PRIMARY KEY (device, time_ns)) WITHOUT ROWID;"
    /* Version 6: flight recordings (flights.h), the CBOR as it came beside what the API lists. */
    "CREATE TABLE IF NOT EXISTS flights ("
    " id INTEGER PRIMARY KEY, device INTEGER NOT NULL, session INTEGER NOT NULL,"
    " number INTEGER NOT NULL, time_ns INTEGER NOT NULL, recv_ns INTEGER NOT NULL,"
    " cause INTEGER NOT NULL, level INTEGER, prev_level INTEGER, rule TEXT, stage TEXT,"
    " value REAL, bound REAL, reason TEXT, trigger_mono_ns INTEGER NOT NULL,"
    " pre_ns INTEGER NOT NULL, post_ns INTEGER NOT NULL, period_ns INTEGER NOT NULL,"
    " stages INTEGER NOT NULL, columns INTEGER NOT NULL, ticks INTEGER NOT NULL,"
    " spans INTEGER NOT NULL, spans_cut INTEGER NOT NULL, ticks_cut INTEGER NOT NULL,"
    " spans_overwritten INTEGER NOT NULL, historical INTEGER NOT NULL, bytes INTEGER NOT NULL,"
    " cbor BLOB NOT NULL, top_cause TEXT, top_share REAL);"
    "CREATE UNIQUE INDEX IF NOT EXISTS flights_device_session_number"
    " ON flights(device, session, number);"
    "CREATE INDEX IF NOT EXISTS flights_device_time ON flights(device, time_ns);";

/* Version 7: model identities (identity.h), referenced by data, stage_windows and devices.
 * Version 9 adds last_ns and device (models.h) and the index of device. */
static const char schema_v7_sql[] =
    "CREATE TABLE IF NOT EXISTS models ("
    " id INTEGER PRIMARY KEY, name TEXT NOT NULL, version TEXT NOT NULL, labels TEXT NOT NULL,"
    " last_ns INTEGER, device INTEGER, UNIQUE (name, version, labels));";

/* Version 8: stack profiles (forensics.h), the CBOR as it came beside what the API lists. */
static const char schema_v8_sql[] =
    "CREATE TABLE IF NOT EXISTS profiles ("
    " id INTEGER PRIMARY KEY, device INTEGER NOT NULL, session INTEGER NOT NULL,"
    " number INTEGER NOT NULL, time_ns INTEGER NOT NULL, recv_ns INTEGER NOT NULL,"
    " cause INTEGER NOT NULL, level INTEGER, prev_level INTEGER, rule TEXT, stage TEXT,"
    " reason TEXT, start_mono_ns INTEGER NOT NULL, duration_ns INTEGER NOT NULL,"
    " hz INTEGER NOT NULL, clock TEXT, samples INTEGER NOT NULL, lost INTEGER NOT NULL,"
    " stages INTEGER NOT NULL, frames INTEGER NOT NULL, stacks INTEGER NOT NULL,"
    " stacks_cut INTEGER NOT NULL, samples_cut INTEGER NOT NULL, historical INTEGER NOT NULL,"
    " bytes INTEGER NOT NULL, cbor BLOB NOT NULL);"
    "CREATE UNIQUE INDEX IF NOT EXISTS profiles_device_session_number"
    " ON profiles(device, session, number);"
    "CREATE INDEX IF NOT EXISTS profiles_device_time ON profiles(device, time_ns);";

/* Version 9: the index the per-device bound of models counts through (models.h). */
static const char schema_v9_sql[] = "CREATE INDEX IF NOT EXISTS models_device ON models(device);";

/* Version 10: the total bound of flight recordings and stack profiles (forensics.h): each kind's
 * bytes in all, kept by triggers in the transaction that changes the table (a rolled-back batch
 * takes its changes with it), and the index of the oldest received. A kind's row is written
 * with the sum of the table's bytes only when it is missing: at creation and migration. */
#define FORENSIC_TOTAL_SQL(t)                                                                      \
  "INSERT INTO forensic_bytes(kind, bytes) SELECT '" t "', (SELECT coalesce(sum(bytes), 0)"        \
  " FROM " t ") WHERE NOT EXISTS (SELECT 1 FROM forensic_bytes WHERE kind = '" t "');"             \
  "CREATE TRIGGER IF NOT EXISTS " t "_bytes_insert AFTER INSERT ON " t " BEGIN"                    \
  " UPDATE forensic_bytes SET bytes = bytes + new.bytes WHERE kind = '" t "'; END;"                \
  "CREATE TRIGGER IF NOT EXISTS " t "_bytes_delete AFTER DELETE ON " t " BEGIN"                    \
  " UPDATE forensic_bytes SET bytes = bytes - old.bytes WHERE kind = '" t "'; END;"                \
  "CREATE TRIGGER IF NOT EXISTS " t "_bytes_update AFTER UPDATE OF bytes ON " t " BEGIN"           \
  " UPDATE forensic_bytes SET bytes = bytes - old.bytes + new.bytes WHERE kind = '" t "'; END;"    \
  "CREATE INDEX IF NOT EXISTS " t "_recv ON " t "(recv_ns);"
static const char schema_v10_sql[] =
    "CREATE TABLE IF NOT EXISTS forensic_bytes ("
    " kind TEXT PRIMARY KEY, bytes INTEGER NOT NULL) WITHOUT ROWID;" FORENSIC_TOTAL_SQL("flights")
        FORENSIC_TOTAL_SQL("profiles");

struct em_store {
  sqlite3 *db;
  sqlite3_stmt *st[ST_COUNT];
  em_store_opts_t opts;
  char *path;
  name_cache_t devices, metrics, stages;
  name_cache_t models;     /* Key: name, version and labels JSON joined by '\x1f'. */
  em_models_t *model_rows; /* The models table's statements, bounds and sweep. */
  bool models_unsaved;     /* A last_ns write of the open batch failed: it must not commit. */
  bool in_batch;
  bool batch_t0_set;
  uint64_t batch_t0_ns; /* CLOCK_MONOTONIC (the caller's) of the first tick that saw the batch. */
  bool rollup_t_set;
  uint64_t rollup_t_ns; /* The caller's CLOCK_MONOTONIC of the tick's latest rollup pass. */
  uint8_t *blob;        /* Scratch for bucket blobs: EM_BUCKETS_BLOB_MAX bytes. */
  em_buf_t json;        /* Scratch for a data row's values. */
  em_store_stats_t stats;
  em_ckpt_t *ckpt;
  em_rollup_t *rollup;
  em_forensics_t *forensics;
  char *wal_path;          /* PATH-wal */
  const char *device;      /* Device of the message being added (borrowed for the call). */
  uint64_t failed_untold;  /* Failures since em_store_take_failure() last reported. */
  uint64_t failed_passing; /* Failures whose reason may pass (busy, full, I/O), since open. */
  char last_failure[EM_STORE_FAILURE_TEXT];
};

__attribute__((format(printf, 3, 4))) static void set_err(char *err, size_t cap, const char *fmt,
                                                          ...) {
  if (!err || cap == 0) {
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, cap, fmt, ap);
  va_end(ap);
}

static uint64_t realtime_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

static sqlite3_int64 clamp_i64(uint64_t v) {
  return v > (uint64_t)INT64_MAX ? INT64_MAX : (sqlite3_int64)v;
}

/* --- name caches ------------------------------------------------------------------------- */

static void cache_clear(name_cache_t *c) {
  for (size_t i = 0; i < c->n; i++) {
    free(c->v[i].name);
  }
  free(c->v);
  c->v = NULL;
  c->n = 0;
  c->cap = 0;
}

/* The name of entry i of a name_id_t array. */
static const char *cached_name_at(const void *v, size_t i) {
  return ((const name_id_t *)v)[i].name;
}

static size_t cache_find(const name_cache_t *c, const char *name, bool *found) {
  return em_buf_find_name(c->v, c->n, cached_name_at, name, found);
}

/* Remembers name -> id at position pos; a full cache or no memory just skips caching. */
static void cache_put(name_cache_t *c, size_t pos, const char *name, int64_t id) {
  if (c->n >= (c->max ? c->max : EM_STORE_CACHE_MAX)) {
    return;
  }
  if (em_buf_grow_items(&c->v, &c->cap, c->n, sizeof(*c->v), 64) != 0) {
    return;
  }
  char *copy = strdup(name);
  if (!copy) {
    return;
  }
  memmove(&c->v[pos + 1], &c->v[pos], (c->n - pos) * sizeof(c->v[0]));
  c->v[pos] = (name_id_t){.name = copy, .id = id, .level = -1};
  c->n++;
}

static void caches_clear(em_store_t *s) {
  cache_clear(&s->devices);
  cache_clear(&s->metrics);
  cache_clear(&s->stages);
  cache_clear(&s->models);
  em_models_forget(s->model_rows); /* A rollback may have taken rows it counted. */
}

static int cmp_id(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a;
  int64_t y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Drops from c the entries whose id is in ids[0..n) (ascending), keeping the order. */
static void cache_drop_ids(name_cache_t *c, const int64_t *ids, size_t n) {
  size_t kept = 0;
  for (size_t i = 0; i < c->n; i++) {
    if (bsearch(&c->v[i].id, ids, n, sizeof(ids[0]), cmp_id)) {
      free(c->v[i].name);
    } else {
      c->v[kept++] = c->v[i];
    }
  }
  c->n = kept;
}

/* --- failures --------------------------------------------------------------------------- */

/* A short label for SQLite's primary result code. */
static const char *reason_of(int rc) {
  static const struct {
    int code;
    const char *name;
  } names[] = {
      {SQLITE_ERROR, "error"},           {SQLITE_BUSY, "busy"},
      {SQLITE_LOCKED, "locked"},         {SQLITE_NOMEM, "nomem"},
      {SQLITE_READONLY, "readonly"},     {SQLITE_IOERR, "ioerr"},
      {SQLITE_CORRUPT, "corrupt"},       {SQLITE_FULL, "full"},
      {SQLITE_CANTOPEN, "cantopen"},     {SQLITE_TOOBIG, "toobig"},
      {SQLITE_CONSTRAINT, "constraint"}, {SQLITE_MISMATCH, "mismatch"},
      {SQLITE_MISUSE, "misuse"},         {SQLITE_RANGE, "range"},
      {SQLITE_NOTADB, "notadb"},
  };
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    if (names[i].code == (rc & 0xff)) {
      return names[i].name;
    }
  }
  return "other";
}

/* Counts one failed write of `table` for SQLite result rc (or -ENOMEM for the store's own
 * allocation), by table and reason, and keeps its text for em_store_take_failure(). */
static void note_failure(em_store_t *s, const char *table, int rc) {
  const char *reason = rc == -ENOMEM ? "nomem" : reason_of(rc);
  s->stats.errors++;
  switch (rc == -ENOMEM ? SQLITE_NOMEM : rc & 0xff) {
  case SQLITE_BUSY:
  case SQLITE_LOCKED:
  case SQLITE_NOMEM:
  case SQLITE_IOERR:
  case SQLITE_FULL:
  case SQLITE_CANTOPEN:
  case SQLITE_READONLY:
  case SQLITE_PROTOCOL:
    s->failed_passing++;
    break;
  default:
    break;
  }
  s->failed_untold++;
  em_store_failure_count_t *slot = NULL;
  for (size_t i = 0; i < s->stats.n_failures; i++) {
    em_store_failure_count_t *f = &s->stats.failures[i];
    if (strcmp(f->table, table) == 0 && strcmp(f->reason, reason) == 0) {
      slot = f;
      break;
    }
  }
  if (!slot && s->stats.n_failures < EM_STORE_FAILURE_KINDS) {
    slot = &s->stats.failures[s->stats.n_failures++];
    snprintf(slot->table, sizeof(slot->table), "%s", table);
    snprintf(slot->reason, sizeof(slot->reason), "%s", reason);
  } else if (!slot) {
    slot = &s->stats.failures[EM_STORE_FAILURE_KINDS - 1]; /* Full: the last kind takes it. */
  }
  slot->count++;
  const char *text = rc == -ENOMEM ? "out of memory" : sqlite3_errmsg(s->db);
  snprintf(s->last_failure, sizeof(s->last_failure), "table %s, device %s: %s (%s, SQLite code %d)",
           table, s->device ? s->device : "(none)", text, reason,
           rc == -ENOMEM ? SQLITE_NOMEM : rc);
}

/* The table a prepared statement of the store writes; "retention" for one-off statements. */
static const char *table_of(const em_store_t *s, const sqlite3_stmt *st) {
  for (int i = 0; i < ST_COUNT; i++) {
    if (s->st[i] == st) {
      return stmt_table[i];
    }
  }
  return "retention";
}

uint64_t em_store_take_failure(em_store_t *s, char *text, size_t cap) {
  if (!s) {
    return 0;
  }
  uint64_t n = s->failed_untold;
  if (n > 0 && text && cap > 0) {
    snprintf(text, cap, "%s", s->last_failure);
  }
  s->failed_untold = 0;
  return n;
}

/* --- statements -------------------------------------------------------------------------- */

static void bind_text(sqlite3_stmt *st, int i, const char *text) {
  if (text) {
    sqlite3_bind_text(st, i, text, (int)strnlen(text, EM_PROTO_MAX_MESSAGE_BYTES), SQLITE_STATIC);
  } else {
    sqlite3_bind_null(st, i);
  }
}

static void bind_value(sqlite3_stmt *st, int i, const em_value_t *v) {
  switch (v->type) {
  case EM_VALUE_UINT:
    sqlite3_bind_double(st, i, (double)v->as.u);
    break;
  case EM_VALUE_INT:
    sqlite3_bind_double(st, i, (double)v->as.i);
    break;
  case EM_VALUE_FLOAT:
    sqlite3_bind_double(st, i, v->as.f);
    break;
  default:
    sqlite3_bind_null(st, i);
    break;
  }
}

static void bind_level(sqlite3_stmt *st, int i, em_level_t level) {
  if (level < EM_LEVEL_NOMINAL || level > EM_LEVEL_CRITICAL) {
    sqlite3_bind_null(st, i);
  } else {
    sqlite3_bind_int(st, i, (int)level);
  }
}

/* Steps a bound write statement to completion and resets it. Returns 0 or -EIO (counted). */
static int step_done(em_store_t *s, sqlite3_stmt *st) {
  int rc = sqlite3_step(st);
  while (rc == SQLITE_ROW) {
    rc = sqlite3_step(st);
  }
  if (rc != SQLITE_DONE) {
    rc = sqlite3_reset(st); /* The statement's own result code, extended. */
    note_failure(s, table_of(s, st), rc);
    sqlite3_clear_bindings(st);
    return -EIO;
  }
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  return 0;
}

static int exec_simple(em_store_t *s, int which) {
  int rc = sqlite3_step(s->st[which]);
  if (rc != SQLITE_DONE) {
    note_failure(s, stmt_table[which], sqlite3_reset(s->st[which]));
    return -EIO;
  }
  sqlite3_reset(s->st[which]);
  return 0;
}

static int meta_set_int(em_store_t *s, const char *key, int64_t value) {
  sqlite3_stmt *st = s->st[ST_META_SET];
  bind_text(st, 1, key);
  sqlite3_bind_int64(st, 2, value);
  return step_done(s, st);
}

/* Reads meta.key as an integer; *found false when the row is missing. Returns 0 or -EIO. */
static int meta_get_int(em_store_t *s, const char *key, int64_t *value, bool *found) {
  sqlite3_stmt *st = s->st[ST_META_GET];
  bind_text(st, 1, key);
  int rc = sqlite3_step(st);
  *found = rc == SQLITE_ROW;
  if (*found) {
    *value = sqlite3_column_int64(st, 0);
    rc = sqlite3_step(st);
  }
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  return rc == SQLITE_DONE ? 0 : -EIO;
}

/* --- forensic totals -------------------------------------------------------------------- */

static const char *table_of_kind(em_forensic_kind_t kind) {
  return kind == EM_FORENSIC_FLIGHT ? "flights" : "profiles";
}

/* Reads kind's bytes in all (the open batch included) into the stats; a failed read leaves the
 * figure as it was (the next add or maintenance reads it again). */
static void forensic_bytes_refresh(em_store_t *s, em_forensic_kind_t kind) {
  uint64_t bytes = 0;
  if (em_forensics_bytes(s->forensics, kind, &bytes) == SQLITE_OK) {
    *(kind == EM_FORENSIC_FLIGHT ? &s->stats.flight_bytes : &s->stats.profile_bytes) = bytes;
  }
}

/* Cuts both kinds to their total bounds (em_forensics_trim()), counting what it deleted.
 * Returns 0 or -EIO (counted). */
static int forensic_trim(em_store_t *s) {
  int rc = 0;
  for (int k = 0; k < EM_FORENSIC_KINDS && rc == 0; k++) {
    bool flight = k == EM_FORENSIC_FLIGHT;
    uint64_t evicted = 0;
    int src = em_forensics_trim(
        s->forensics, (em_forensic_kind_t)k,
        flight ? s->opts.flight_total_max_bytes : s->opts.profile_total_max_bytes, &evicted);
    *(flight ? &s->stats.flights_evicted : &s->stats.profiles_evicted) += evicted;
    if (src != SQLITE_OK) {
      note_failure(s, table_of_kind((em_forensic_kind_t)k), src);
      rc = -EIO;
    }
  }
  return rc;
}

static int seen_flush(em_store_t *s, name_id_t *e);
static int models_flush(em_store_t *s);

/* Opens the batch transaction if none is open. Returns 0 or -EIO. */
static int batch_begin(em_store_t *s) {
  if (s->in_batch) {
    return 0;
  }
  if (exec_simple(s, ST_BEGIN) != 0) {
    return -EIO;
  }
  s->in_batch = true;
  s->batch_t0_set = false;
  s->stats.pending = 0;
  return 0;
}

/* After a commit: when the WAL file is above EM_STORE_WAL_RESTART_BYTES, copies the frames the
 * checkpointer has not copied yet (those of the latest batches: the checkpointer runs while a
 * batch is open, so it never sees the log complete when the next batch begins). With every
 * frame copied, the next batch's first write starts the log over from its beginning. */
static void wal_restart(em_store_t *s) {
  struct stat sb;
  if (stat(s->wal_path, &sb) != 0 || (uint64_t)sb.st_size <= EM_STORE_WAL_RESTART_BYTES) {
    return;
  }
  int log_frames = 0;
  int done_frames = 0;
  int rc =
      sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_PASSIVE, &log_frames, &done_frames);
  s->stats.wal_restarts++;
  if (rc != SQLITE_OK) {
    s->stats.wal_restart_busy++; /* Counted, not a failed write: no row is lost. */
  } else if (done_frames < log_frames) {
    s->stats.wal_restart_busy++; /* A reader holds older frames; the next commit tries again. */
  }
}

/* Commits the open batch (with meta.last_commit_ns); on failure rolls back, empties the name
 * caches and returns -EIO. */
static int batch_commit(em_store_t *s) {
  if (!s->in_batch) {
    return 0;
  }
  for (size_t i = 0; i < s->devices.n; i++) {
    seen_flush(s, &s->devices.v[i]);
  }
  int rc = s->models_unsaved ? -EIO : models_flush(s);
  if (rc == 0) {
    rc = meta_set_int(s, "last_commit_ns", clamp_i64(realtime_ns()));
  }
  if (rc == 0) {
    rc = exec_simple(s, ST_COMMIT);
  }
  s->in_batch = false;
  s->batch_t0_set = false;
  s->models_unsaved = false; /* Committed, or rolled back below. */
  if (rc != 0) {
    if (!sqlite3_get_autocommit(s->db)) {
      sqlite3_step(s->st[ST_ROLLBACK]);
      sqlite3_reset(s->st[ST_ROLLBACK]);
    }
    caches_clear(s);
    s->stats.pending = 0;
    forensic_bytes_refresh(s, EM_FORENSIC_FLIGHT); /* What the rollback left. */
    forensic_bytes_refresh(s, EM_FORENSIC_PROFILE);
    return -EIO;
  }
  s->stats.rows += s->stats.pending;
  s->stats.batches++;
  s->stats.pending = 0;
  wal_restart(s);
  return 0;
}

/* The id of `name` in a dictionary table, inserted when new; *entry (when asked) is its cache
 * entry, valid until the next insertion, or NULL when the cache could not take it. Returns 0
 * or -EIO. */
static int name_entry(em_store_t *s, name_cache_t *c, int which, const char *name, int64_t *id,
                      name_id_t **entry) {
  bool found;
  size_t pos = cache_find(c, name, &found);
  if (entry) {
    *entry = NULL;
  }
  if (found) {
    *id = c->v[pos].id;
    if (entry) {
      *entry = &c->v[pos];
    }
    return 0;
  }
  /* The insert (kept when the name is there), then the id: one row, or the store failed. */
  for (int step = 0; step < 2; step++) {
    int stmt = step == 0 ? which : which + ST_GET_AFTER_ID;
    sqlite3_stmt *st = s->st[stmt];
    bind_text(st, 1, name);
    int rc = sqlite3_step(st);
    bool row = rc == SQLITE_ROW;
    if (row) {
      *id = sqlite3_column_int64(st, 0);
      rc = sqlite3_step(st);
    }
    if (rc != SQLITE_DONE || row != (step == 1)) {
      int reset = sqlite3_reset(st);
      note_failure(s, stmt_table[stmt], reset != SQLITE_OK ? reset : SQLITE_CORRUPT);
      sqlite3_clear_bindings(st);
      return -EIO;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
  }
  size_t before = c->n;
  cache_put(c, pos, name, *id);
  if (entry && c->n > before) {
    *entry = &c->v[pos];
  }
  return 0;
}

static int name_id(em_store_t *s, name_cache_t *c, int which, const char *name, int64_t *id) {
  return name_entry(s, c, which, name, id, NULL);
}

/* Counts a row that went into the batch. */
static int row_done(em_store_t *s, int rc) {
  if (rc == 0) {
    s->stats.pending++;
  }
  return rc;
}

/* Binds a models.id, or NULL for 0 (none named). */
static void bind_model(sqlite3_stmt *st, int i, int64_t model) {
  if (model > 0) {
    sqlite3_bind_int64(st, i, model);
  } else {
    sqlite3_bind_null(st, i);
  }
}

/* The models.id of m, named by device dev_id, into *id (inserted when new, models.h); 0 for
 * none named (m->name NULL) and for an identity the table's bounds refuse (counted in
 * stats.models_refused: the rows are stored without it). *entry (when asked) is its cache
 * entry, valid until the next insertion into s->models, or NULL when it is not cached. The id
 * is looked up in s->models first, so a known identity costs no statement. Returns 0 or -EIO. */
static int model_entry(em_store_t *s, const em_model_t *m, int64_t dev_id, int64_t *id,
                       name_id_t **entry) {
  *id = 0;
  if (entry) {
    *entry = NULL;
  }
  if (!m->name) {
    return 0;
  }
  char labels[EM_IDENTITY_JSON_MAX];
  char key[EM_IDENTITY_JSON_MAX + EM_PROTO_MAX_NAME_BYTES + EM_PROTO_MAX_MODEL_VERSION + 4];
  size_t n = em_identity_labels_json(m, labels, sizeof(labels));
  if (n == 0 || !m->version) {
    note_failure(s, "models", SQLITE_MISMATCH); /* The decoder refuses such an identity. */
    return -EIO;
  }
  snprintf(key, sizeof(key), "%s\x1f%s\x1f%s", m->name, m->version, labels);
  bool found;
  size_t pos = cache_find(&s->models, key, &found);
  if (found) {
    *id = s->models.v[pos].id;
    if (entry) {
      *entry = &s->models.v[pos];
    }
    return 0;
  }
  bool refused;
  int rc = em_models_find(s->model_rows, m->name, m->version, labels, n, dev_id, id, &refused);
  if (rc != SQLITE_OK) {
    note_failure(s, "models", rc);
    return -EIO;
  }
  if (refused) {
    s->stats.models_refused++;
    return 0;
  }
  size_t before = s->models.n;
  cache_put(&s->models, pos, key, *id);
  if (entry && s->models.n > before) {
    *entry = &s->models.v[pos];
  }
  return 0;
}

static int model_id(em_store_t *s, const em_model_t *m, int64_t dev_id, int64_t *id) {
  return model_entry(s, m, dev_id, id, NULL);
}

/* Rows naming model id (its cache entry, or NULL when not cached) at time_ns were written in
 * the open batch: raises its models.last_ns, at the commit for a cached one (models.h). Returns
 * 0 or -EIO. */
static int model_used(em_store_t *s, int64_t id, name_id_t *entry, uint64_t time_ns) {
  if (id <= 0) {
    return 0;
  }
  if (entry) {
    if (!entry->seen_dirty || time_ns > entry->seen_ns) {
      entry->seen_ns = time_ns;
    }
    entry->seen_dirty = true;
    return 0;
  }
  int rc = em_models_touch(s->model_rows, id, clamp_i64(time_ns));
  if (rc != SQLITE_OK) {
    note_failure(s, "models", rc);
    s->models_unsaved = true; /* The rows are in the batch: it rolls back at commit. */
    return -EIO;
  }
  return 0;
}

/* Writes the last_ns that the open batch raised (model_used()). Returns 0 or -EIO: the batch
 * must not commit without them (models.h, the invariant). */
static int models_flush(em_store_t *s) {
  for (size_t i = 0; i < s->models.n; i++) {
    name_id_t *e = &s->models.v[i];
    if (!e->seen_dirty) {
      continue;
    }
    e->seen_dirty = false;
    if (model_used(s, e->id, NULL, e->seen_ns) != 0) {
      return -EIO;
    }
  }
  return 0;
}

/* Writes a device's last_seen_ns, level and model from data (ST_SEEN); level < 0 keeps the
 * stored level, set_model false the stored model (model 0: none named). Returns 0 or -EIO. */
static int write_seen(em_store_t *s, int64_t dev_id, int level, uint64_t seen_ns, bool set_model,
                      int64_t model) {
  sqlite3_stmt *st = s->st[ST_SEEN];
  sqlite3_bind_int64(st, 1, dev_id);
  if (level >= 0) {
    sqlite3_bind_int(st, 2, level);
  } else {
    sqlite3_bind_null(st, 2);
  }
  sqlite3_bind_int64(st, 3, clamp_i64(seen_ns));
  sqlite3_bind_int(st, 4, set_model ? 1 : 0);
  bind_model(st, 5, model);
  return row_done(s, step_done(s, st));
}

/* Writes what data left pending on a cached device. Returns 0 or -EIO. */
static int seen_flush(em_store_t *s, name_id_t *e) {
  if (!e || !e->seen_dirty) {
    return 0;
  }
  e->seen_dirty = false;
  int level = e->level;
  e->level = -1;
  bool set_model = e->model_dirty;
  e->model_dirty = false;
  return write_seen(s, e->id, level, e->seen_ns, set_model, e->model);
}

/* --- messages ---------------------------------------------------------------------------- */

static int add_birth(em_store_t *s, int64_t dev_id, const em_birth_t *b) {
  int64_t model;
  if (model_id(s, &b->model, dev_id, &model) != 0) {
    return -EIO;
  }
  sqlite3_stmt *st = s->st[ST_BIRTH];
  sqlite3_bind_int64(st, 1, dev_id);
  sqlite3_bind_int64(st, 2, b->head.session);
  sqlite3_bind_int64(st, 3, clamp_i64(b->head.time_ns));
  bind_text(st, 4, b->agent_version);
  bind_text(st, 5, b->board);
  sqlite3_bind_int64(st, 6, clamp_i64(b->period_ns));
  bind_model(st, 7, model); /* A new session has the model its birth names, or none yet. */
  return row_done(s, step_done(s, st));
}

static int add_status(em_store_t *s, int64_t dev_id, const em_status_t *m) {
  sqlite3_stmt *st = s->st[ST_STATUS];
  sqlite3_bind_int64(st, 1, dev_id);
  sqlite3_bind_int(st, 2, m->online ? 1 : 0);
  sqlite3_bind_int64(st, 3, clamp_i64(m->head.time_ns));
  return row_done(s, step_done(s, st));
}

/* A state message whose level is its previous level: the device's model changed, its level
 * did not. No level_changes row; a live one sets devices.model. */
static int add_model_change(em_store_t *s, int64_t dev_id, const em_state_t *m) {
  if (m->historical) {
    return 0; /* History of a model is in the data rows; the current one follows live only. */
  }
  int64_t model;
  if (model_id(s, &m->model, dev_id, &model) != 0) {
    return -EIO;
  }
  sqlite3_stmt *st = s->st[ST_MODEL_SET];
  sqlite3_bind_int64(st, 1, dev_id);
  bind_model(st, 2, model);
  sqlite3_bind_int64(st, 3, clamp_i64(m->head.time_ns));
  return row_done(s, step_done(s, st));
}

/* The verdict's JSON object as proto prints it: the state's own printer run on a message that
 * carries nothing else printable (no text fields, so the first "verdict": is the key; it prints
 * last, before the closing brace). Into stack[0..cap) when it fits, else a malloc'd buffer;
 * *out and *len name it. Returns 0, -ENOMEM, or -EINVAL when proto refuses the verdict. */
static int verdict_json(const em_state_t *m, char *stack, size_t cap, char **out, size_t *len) {
  em_msg_t only = {.kind = EM_MSG_STATE};
  only.u.state =
      (em_state_t){.level = m->level, .prev_level = m->prev_level, .verdict = m->verdict};
  char *buf = stack;
  size_t n = 0;
  int rc = em_proto_to_json(&only, buf, cap, &n);
  if (rc == EM_PROTO_ENOSPACE) {
    buf = malloc(n + 1);
    if (!buf) {
      return -ENOMEM;
    }
    rc = em_proto_to_json(&only, buf, n + 1, &n);
  }
  static const char key[] = "\"verdict\":";
  char *at = rc == 0 ? strstr(buf, key) : NULL;
  if (!at || n < 2 || buf[n - 1] != '}') {
    if (buf != stack) {
      free(buf);
    }
    return -EINVAL;
  }
  at += sizeof(key) - 1;
  *len = (size_t)(buf + n - 1 - at);
  memmove(buf, at, *len);
  buf[*len] = '\0';
  *out = buf;
  return 0;
}

static int add_state(em_store_t *s, int64_t dev_id, const em_state_t *m) {
  if (m->model_change) {
    return add_model_change(s, dev_id, m);
  }
  int64_t model = 0;
  if (!m->historical && model_id(s, &m->model, dev_id, &model) != 0) {
    return -EIO;
  }
  sqlite3_stmt *st = s->st[ST_LEVEL];
  sqlite3_bind_int64(st, 1, dev_id);
  sqlite3_bind_int64(st, 2, clamp_i64(m->head.time_ns));
  sqlite3_bind_int64(st, 3, m->head.session);
  sqlite3_bind_int(st, 4, (int)m->level);
  sqlite3_bind_int(st, 5, (int)m->prev_level);
  bind_text(st, 6, m->rule);
  bind_text(st, 7, m->stage);
  bind_value(st, 8, &m->value);
  bind_value(st, 9, &m->bound);
  bind_text(st, 10, m->reason);
  char stack[VERDICT_JSON_STACK_BYTES];
  char *verdict = NULL;
  size_t verdict_len = 0;
  int vrc = m->verdict ? verdict_json(m, stack, sizeof(stack), &verdict, &verdict_len) : 0;
  if (vrc != 0) { /* Dropped and counted like a row whose statement failed. */
    sqlite3_clear_bindings(st);
    note_failure(s, stmt_table[ST_LEVEL], vrc == -ENOMEM ? -ENOMEM : SQLITE_MISMATCH);
    return -EIO;
  }
  if (verdict) {
    sqlite3_bind_text(st, 11, verdict, (int)verdict_len, SQLITE_STATIC);
  } else {
    sqlite3_bind_null(st, 11);
  }
  int rc = step_done(s, st);
  if (verdict != stack) {
    free(verdict);
  }
  if (rc == 0 && sqlite3_changes(s->db) == 0) {
    s->stats.duplicates++; /* Stored already, and the device's level set by it then. */
    return 0;
  }
  rc = row_done(s, rc);
  if (!m->historical) { /* A replayed change goes to level_changes only. */
    st = s->st[ST_STATE];
    sqlite3_bind_int64(st, 1, dev_id);
    bind_level(st, 2, m->level);
    bind_text(st, 3, m->reason);
    sqlite3_bind_int64(st, 4, clamp_i64(m->head.time_ns));
    bind_model(st, 5, model);
    int rc2 = row_done(s, step_done(s, st));
    rc = rc ? rc : rc2;
  }
  return rc;
}

static int add_window(em_store_t *s, int64_t dev_id, uint64_t time_ns, uint64_t window_ns,
                      const em_stage_t *w, int64_t model) {
  int64_t stage_id;
  if (!w->name || name_id(s, &s->stages, ST_STAGE_ID, w->name, &stage_id) != 0) {
    return -EIO;
  }
  size_t blob_len = em_buckets_encode(s->blob, w);
  sqlite3_stmt *st = s->st[ST_WINDOW];
  sqlite3_bind_int64(st, 1, dev_id);
  sqlite3_bind_int64(st, 2, clamp_i64(time_ns));
  sqlite3_bind_int64(st, 3, stage_id);
  sqlite3_bind_int64(st, 4, clamp_i64(window_ns));
  const uint64_t figures[] = {w->count,  w->sum_ns, w->min_ns, w->max_ns,
                              w->p50_ns, w->p90_ns, w->p99_ns, w->p999_ns};
  for (int i = 0; i < 8; i++) {
    sqlite3_bind_int64(st, 5 + i, clamp_i64(figures[i]));
  }
  sqlite3_bind_int(st, 13, w->scale);
  sqlite3_bind_int64(st, 14, clamp_i64(w->zero_count));
  sqlite3_bind_blob(st, 15, s->blob, (int)blob_len, SQLITE_STATIC);
  bind_model(st, 16, model);
  return row_done(s, step_done(s, st));
}

/* Appends "id":value to the values object in s->json (the opening brace first). Returns false
 * when out of memory. Non-finite floats are not stored (JSON has
 * no NaN): they read as absent. */
static bool json_put(em_store_t *s, int64_t metric_id, const em_value_t *v) {
  char num[40];
  switch (v->type) {
  case EM_VALUE_UINT:
    snprintf(num, sizeof(num), "%llu", (unsigned long long)v->as.u);
    break;
  case EM_VALUE_INT:
    snprintf(num, sizeof(num), "%lld", (long long)v->as.i);
    break;
  case EM_VALUE_FLOAT:
    if (!isfinite(v->as.f)) {
      return true;
    }
    snprintf(num, sizeof(num), "%.17g", v->as.f);
    break;
  default:
    return true; /* Absent is not zero: no entry. */
  }
  return em_buf_printf(&s->json, "%s\"%lld\":%s", s->json.len > 1 ? "," : "", (long long)metric_id,
                       num) == 0;
}

/* Writes the data row of one data message; a message already stored (same device, session and
 * seq) is counted in stats.duplicates and changes nothing. Then its stage windows, and the
 * device's last_seen_ns and level (deferred to the commit when entry is given). */
static int add_data(em_store_t *s, int64_t dev_id, name_id_t *entry, const em_device_t *dev,
                    const em_data_t *d) {
  int result = 0;
  bool named = dev && em_dict_knows_session(dev, d->head.session);
  /* A replayed (historical) message is history: it never sets the current level. */
  int level = !d->historical && d->level >= EM_LEVEL_NOMINAL && d->level <= EM_LEVEL_CRITICAL
                  ? (int)d->level
                  : -1;
  int64_t model = 0;
  name_id_t *model_e = NULL;
  if (model_entry(s, &d->model, dev_id, &model, &model_e) != 0) {
    result = -EIO; /* The rows are stored all the same, without their model. */
  }

  em_buf_reset(&s->json);
  bool ok = em_buf_add(&s->json, "{", 1) == 0;
  for (size_t i = 0; ok && d->samples && i < d->n_samples; i++) {
    const em_sample_t *smp = &d->samples[i];
    if (smp->value.type == EM_VALUE_ABSENT) {
      continue;
    }
    char fallback[32];
    const char *name = named ? em_dict_name(dev, smp->alias) : NULL;
    if (!name) {
      snprintf(fallback, sizeof(fallback), "alias.%u", (unsigned)smp->alias);
      name = fallback;
    }
    int64_t metric_id;
    if (name_id(s, &s->metrics, ST_METRIC_ID, name, &metric_id) != 0) {
      result = -EIO;
      continue;
    }
    ok = json_put(s, metric_id, &smp->value);
  }
  ok = ok && em_buf_add(&s->json, "}", 1) == 0;
  if (!ok) {
    /* Neither the data row nor its windows (-EAGAIN): delivered again, it writes them once. */
    note_failure(s, "data", s->json.error);
    return s->json.error;
  } else {
    sqlite3_stmt *st = s->st[ST_DATA];
    sqlite3_bind_int64(st, 1, dev_id);
    sqlite3_bind_int64(st, 2, clamp_i64(d->head.time_ns));
    sqlite3_bind_text(st, 3, s->json.data, (int)s->json.len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, d->head.session);
    sqlite3_bind_int64(st, 5, d->seq);
    bind_level(st, 6, d->level); /* Also of a replayed window: it is that window's level. */
    bind_model(st, 7, model);
    if (step_done(s, st) != 0) {
      result = -EIO;
    } else if (sqlite3_changes(s->db) == 0) {
      s->stats.duplicates++; /* Stored already: its windows and level are too. */
      return result;
    } else {
      s->stats.pending++;
      /* Below the minute watermark (a replay, a slow clock): its minute is rolled again. */
      int drc = em_rollup_note_raw(s->rollup, dev_id, clamp_i64(d->head.time_ns));
      if (drc != 0) {
        note_failure(s, "rollup_dirty", drc);
        result = -EIO;
      }
    }
  }
  /* Not a repeat: the data row and the windows below name the model at the message's time. */
  if (model_used(s, model, model_e, d->head.time_ns) != 0) {
    result = -EIO;
  }

  if (entry) {
    /* Deferred to the commit: one devices UPDATE per device per batch. */
    if (!entry->seen_dirty || d->head.time_ns > entry->seen_ns) {
      entry->seen_ns = d->head.time_ns;
    }
    if (level >= 0) {
      entry->level = (int8_t)level;
    }
    if (!d->historical) { /* The model at the end of a live window is the current one. */
      entry->model_dirty = true;
      entry->model = model;
    }
    entry->seen_dirty = true;
  } else if (write_seen(s, dev_id, level, d->head.time_ns, !d->historical, model) != 0) {
    result = -EIO;
  }

  for (size_t i = 0; d->stages && i < d->n_stages; i++) {
    if (d->stages[i].count == 0) {
      continue;
    }
    if (add_window(s, dev_id, d->head.time_ns, d->window_ns, &d->stages[i], model) != 0) {
      result = -EIO;
    }
  }
  return result;
}

/* em_store_add() once its arguments are checked. */
static int add_message(em_store_t *s, const char *device, const em_device_t *dev,
                       const em_msg_t *msg) {
  if (batch_begin(s) != 0) {
    return -EIO;
  }
  int64_t dev_id;
  name_id_t *entry;
  if (name_entry(s, &s->devices, ST_DEVICE_ID, device, &dev_id, &entry) != 0) {
    return -EIO;
  }
  if (msg->kind != EM_MSG_DATA && seen_flush(s, entry) != 0) {
    return -EIO; /* Keep the order: data's level before a later state's. */
  }
  switch (msg->kind) {
  case EM_MSG_BIRTH:
    return add_birth(s, dev_id, &msg->u.birth);
  case EM_MSG_STATUS:
    return add_status(s, dev_id, &msg->u.status);
  case EM_MSG_STATE:
    return add_state(s, dev_id, &msg->u.state);
  case EM_MSG_DATA:
    return add_data(s, dev_id, entry, dev, &msg->u.data);
  default:
    return 0;
  }
}

int em_store_add(em_store_t *s, const char *device, const em_device_t *dev, const em_msg_t *msg,
                 uint64_t recv_ns) {
  (void)recv_ns; /* Rows carry the device's time; receipt time is not stored in v1. */
  if (!s || !device || !*device || !msg) {
    return -EINVAL;
  }
  if (msg->kind == EM_MSG_CMD) {
    return 0;
  }
  if (msg->kind > EM_MSG_STATUS) {
    return -EINVAL;
  }
  s->device = device;
  uint64_t passing = s->failed_passing;
  int rc = add_message(s, device, dev, msg);
  s->device = NULL;
  return rc < 0 && s->failed_passing > passing ? -EAGAIN : rc;
}

/* Queues one forensic blob of `device`: the decoded flight recording or stack profile msg
 * (by kind) read from cbor[0..len). */
static int add_forensic(em_store_t *s, const char *device, em_forensic_kind_t kind, const void *msg,
                        const uint8_t *cbor, size_t len, uint64_t recv_ns) {
  if (!s || !device || !*device || !msg || !cbor || len == 0) {
    return -EINVAL;
  }
  s->device = device;
  uint64_t passing = s->failed_passing;
  int rc = batch_begin(s);
  int64_t dev_id = 0;
  name_id_t *entry = NULL;
  if (rc == 0) {
    rc = name_entry(s, &s->devices, ST_DEVICE_ID, device, &dev_id, &entry);
  }
  if (rc == 0) {
    rc = seen_flush(s, entry);
  }
  if (rc == 0) {
    em_forensics_result_t res;
    bool flight = kind == EM_FORENSIC_FLIGHT;
    em_forensics_caps_t caps = {flight ? s->opts.flight_max_bytes : s->opts.profile_max_bytes,
                                flight ? s->opts.flight_total_max_bytes
                                       : s->opts.profile_total_max_bytes};
    int src =
        flight
            ? em_forensics_add_flight(s->forensics, dev_id, msg, cbor, len, recv_ns, &caps, &res)
            : em_forensics_add_profile(s->forensics, dev_id, msg, cbor, len, recv_ns, &caps, &res);
    if (src != SQLITE_OK) {
      note_failure(s, table_of_kind(kind), src);
      rc = -EIO;
    } else if (!res.stored) {
      s->stats.duplicates++;
    } else {
      s->stats.pending++;
      *(flight ? &s->stats.flights : &s->stats.profiles) += 1;
      *(flight ? &s->stats.flights_dropped : &s->stats.profiles_dropped) += res.dropped;
      *(flight ? &s->stats.flights_evicted : &s->stats.profiles_evicted) += res.evicted;
    }
    forensic_bytes_refresh(s, kind);
  }
  s->device = NULL;
  return rc < 0 && s->failed_passing > passing ? -EAGAIN : rc;
}

int em_store_add_flight(em_store_t *s, const char *device, const em_flight_t *f,
                        const uint8_t *cbor, size_t len, uint64_t recv_ns) {
  return add_forensic(s, device, EM_FORENSIC_FLIGHT, f, cbor, len, recv_ns);
}

int em_store_add_profile(em_store_t *s, const char *device, const em_profile_t *p,
                         const uint8_t *cbor, size_t len, uint64_t recv_ns) {
  return add_forensic(s, device, EM_FORENSIC_PROFILE, p, cbor, len, recv_ns);
}

int em_store_tick(em_store_t *s, uint64_t now_ns) {
  if (!s) {
    return -EINVAL;
  }
  if (!s->opts.rollup_manual &&
      (!s->rollup_t_set || now_ns - s->rollup_t_ns >= EM_STORE_ROLLUP_EVERY_MS * 1000000ull)) {
    s->rollup_t_set = true;
    s->rollup_t_ns = now_ns;
    uint64_t real = realtime_ns();
    if (em_rollup_has_work(s->rollup, clamp_i64(real))) {
      return em_store_rollup(s, real, NULL); /* Commits the batch first. */
    }
  }
  if (!s->in_batch) {
    return 0;
  }
  if (!s->batch_t0_set) {
    s->batch_t0_set = true;
    s->batch_t0_ns = now_ns;
  }
  uint64_t age_ns = now_ns >= s->batch_t0_ns ? now_ns - s->batch_t0_ns : 0;
  if (s->stats.pending >= s->opts.batch_rows || age_ns >= (uint64_t)s->opts.batch_ms * 1000000u) {
    return batch_commit(s);
  }
  return 0;
}

int em_store_flush(em_store_t *s) {
  if (!s) {
    return -EINVAL;
  }
  return batch_commit(s);
}

static int em_store_prune(em_store_t *s, uint64_t now_real_ns);

/* Runs one SQL statement with up to two int64 parameters. Returns 0 or -EIO (counted). */
static int run_sql(em_store_t *s, const char *sql, int n_params, int64_t a, int64_t b) {
  sqlite3_stmt *st = NULL;
  int prc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
  if (prc != SQLITE_OK) {
    note_failure(s, "retention", prc);
    return -EIO;
  }
  if (n_params > 0) {
    sqlite3_bind_int64(st, 1, a);
  }
  if (n_params > 1) {
    sqlite3_bind_int64(st, 2, b);
  }
  int rc = step_done(s, st);
  sqlite3_finalize(st);
  return rc;
}

/* Rolls back the open batch after a failed maintenance statement. Returns -EIO. */
static int maintenance_failed(em_store_t *s) {
  sqlite3_step(s->st[ST_ROLLBACK]);
  sqlite3_reset(s->st[ST_ROLLBACK]);
  s->in_batch = false;
  s->models_unsaved = false;
  s->stats.pending = 0;
  caches_clear(s);
  forensic_bytes_refresh(s, EM_FORENSIC_FLIGHT);
  forensic_bytes_refresh(s, EM_FORENSIC_PROFILE);
  return -EIO;
}

int em_store_rollup(em_store_t *s, uint64_t now_real_ns, em_rollup_report_t *report) {
  if (!s) {
    return -EINVAL;
  }
  if (batch_commit(s) != 0 || batch_begin(s) != 0) {
    return -EIO;
  }
  em_rollup_report_t rep = {0};
  int32_t ms = s->opts.rollup_budget_ms;
  int64_t budget = ms == 0 ? EM_ROLLUP_BUDGET_NS : ms < 0 ? -1 : (int64_t)ms * 1000000;
  int rc = em_rollup_run(s->rollup, clamp_i64(now_real_ns), budget, &rep);
  if (rc != 0) {
    note_failure(s, "rollups", rc);
    maintenance_failed(s);
  } else {
    rc = batch_commit(s);
  }
  (void)em_rollup_reload(s->rollup, rc == 0); /* The committed watermark, either way. */
  if (rc != 0) {
    return -EIO;
  }
  s->stats.rollup_runs++;
  s->stats.rollup_rows += rep.rows;
  s->stats.rollup_bad_rows += rep.bad_rows;
  if (report) {
    *report = rep;
  }
  return 0;
}

int em_store_retain(em_store_t *s, uint64_t now_real_ns) {
  if (!s) {
    return -EINVAL;
  }
  if (batch_commit(s) != 0) {
    return -EIO;
  }
  int rrc = em_store_prune(s, now_real_ns);
  int urc = em_store_rollup(s, now_real_ns, NULL);
  return rrc ? rrc : urc;
}

/* Deletes the models rows nothing names any more (em_models_sweep(): those no device names
 * whose last_ns is below cut, NULL among them) and drops their ids from the cache, so that it
 * never answers a deleted id: an identity named again gets a new row. Returns 0 or -EIO. */
static int models_sweep(em_store_t *s, int64_t cut) {
  em_models_swept_t swept;
  int rc = em_models_sweep(s->model_rows, cut, &swept);
  if (rc != SQLITE_OK) {
    note_failure(s, "models", rc);
    return -EIO;
  }
  if (swept.ids) {
    qsort(swept.ids, swept.deleted, sizeof(swept.ids[0]), cmp_id);
    cache_drop_ids(&s->models, swept.ids, swept.deleted);
  } else if (swept.deleted > 0) {
    cache_clear(&s->models); /* No memory to list them: forget every id. */
  }
  free(swept.ids);
  s->stats.models_deleted += swept.deleted;
  return 0;
}

/* Retention, downsampling and the sweep of unnamed models (em_store_retain()), in one
 * transaction. */
static int em_store_prune(em_store_t *s, uint64_t now_real_ns) {
  const em_store_opts_t *o = &s->opts;
  int64_t now = clamp_i64(now_real_ns);
  bool retain = o->retention_s > 0 && o->retention_s < (uint64_t)INT64_MAX / NS_PER_S;
  bool down = o->downsample_after_s > 0 && o->downsample_step_s > 0 &&
              o->downsample_after_s < (uint64_t)INT64_MAX / NS_PER_S &&
              o->downsample_step_s < (uint64_t)INT64_MAX / NS_PER_S;
  if (batch_begin(s) != 0) {
    return -EIO;
  }
  int rc = 0;
  /* Without retention no row goes by age: only models no row was ever written with do. */
  int64_t cut = retain ? now - (int64_t)(o->retention_s * NS_PER_S) : INT64_MIN;
  if (retain) {
    /* Per device, through the (device, time_ns) indexes; level_changes has a time index. */
    static const char *const del[] = {
        "DELETE FROM data WHERE device IN (SELECT id FROM devices) AND time_ns < ?1",
        "DELETE FROM stage_windows WHERE device IN (SELECT id FROM devices) AND time_ns < ?1",
        "DELETE FROM level_changes WHERE time_ns < ?1",
        /* A rollup row goes once its whole step is older than the cut. */
        "DELETE FROM stage_rollups WHERE step_s = 60 AND time_ns <= ?1 - 60000000000",
        "DELETE FROM stage_rollups WHERE step_s = 3600 AND time_ns <= ?1 - 3600000000000",
        "DELETE FROM data_rollups WHERE step_s = 60 AND device IN (SELECT id FROM devices)"
        " AND time_ns <= ?1 - 60000000000",
        "DELETE FROM data_rollups WHERE step_s = 3600 AND device IN (SELECT id FROM devices)"
        " AND time_ns <= ?1 - 3600000000000",
        "DELETE FROM rollup_dirty WHERE device IN (SELECT id FROM devices) AND time_ns < ?1",
        "DELETE FROM flights WHERE device IN (SELECT id FROM devices) AND time_ns < ?1",
        "DELETE FROM profiles WHERE device IN (SELECT id FROM devices) AND time_ns < ?1",
    };
    for (size_t i = 0; rc == 0 && i < sizeof(del) / sizeof(del[0]); i++) {
      rc = run_sql(s, del[i], 1, cut, 0);
    }
  }
  if (down && rc == 0) {
    /* Only whole steps older than the cut: the cut is aligned down to the step. A step that is
     * already one row at its start is left alone, so a second run changes nothing. Values are
     * summed with total(), never sum(): sum() of integers fails the whole statement on an
     * int64 overflow (two large counter values from one device in one step did), and retention
     * would then fail every run, keeping every row forever. */
    int64_t step = (int64_t)(o->downsample_step_s * NS_PER_S);
    int64_t ds_cut = now - (int64_t)(o->downsample_after_s * NS_PER_S);
    ds_cut = ds_cut > 0 ? ds_cut / step * step : 0;
    static const char *const ds[] = {
        "DROP TABLE IF EXISTS temp.em_ds_steps",
        "DROP TABLE IF EXISTS temp.em_ds_rows",
        /* A step keeps its rows' model when they all had the same one (NULL otherwise). */
        "CREATE TEMP TABLE em_ds_steps AS SELECT device, time_ns / ?2 * ?2 AS t, sum(n) AS n,"
        " CASE WHEN min(coalesce(model, 0)) = max(coalesce(model, 0)) THEN max(model) END"
        " AS model"
        " FROM data WHERE device IN (SELECT id FROM devices) AND time_ns < ?1"
        " GROUP BY device, t HAVING count(*) > 1 OR max(time_ns) != t",
        "CREATE TEMP TABLE em_ds_rows AS SELECT d.rowid AS r, k.device, k.t FROM em_ds_steps k"
        " JOIN data d ON d.device = k.device AND d.time_ns >= k.t AND d.time_ns < k.t + ?2",
        "INSERT INTO data(device, time_ns, n, vals, counts, model)"
        " SELECT k.device, k.t, k.n,"
        " coalesce(json_group_object(v.metric, v.value) FILTER (WHERE v.metric IS NOT NULL), '{}'),"
        " coalesce(json_group_object(v.metric, v.n) FILTER (WHERE v.metric IS NOT NULL), '{}'),"
        " k.model"
        " FROM em_ds_steps k LEFT JOIN ("
        "  SELECT r.device, r.t, s.key AS metric,"
        "  total(s.value * (CASE WHEN d.counts IS NULL THEN 1"
        "   ELSE json_extract(d.counts, '$.\"' || s.key || '\"') END))"
        "  / sum(CASE WHEN d.counts IS NULL THEN 1"
        "   ELSE json_extract(d.counts, '$.\"' || s.key || '\"') END) AS value,"
        "  sum(CASE WHEN d.counts IS NULL THEN 1"
        "   ELSE json_extract(d.counts, '$.\"' || s.key || '\"') END) AS n"
        "  FROM em_ds_rows r JOIN data d ON d.rowid = r.r, json_each(d.vals) s"
        "  GROUP BY r.device, r.t, s.key"
        " ) v ON v.device = k.device AND v.t = k.t"
        " GROUP BY k.device, k.t",
        "DELETE FROM data WHERE rowid IN (SELECT r FROM em_ds_rows)",
        "DROP TABLE temp.em_ds_steps",
        "DROP TABLE temp.em_ds_rows",
    };
    for (size_t i = 0; rc == 0 && i < sizeof(ds) / sizeof(ds[0]); i++) {
      rc = run_sql(s, ds[i], 2, ds_cut, step);
    }
  }
  if (rc == 0) {
    rc = models_sweep(s, cut);
  }
  if (rc == 0) {
    rc = forensic_trim(s); /* A bound lowered at a restart holds from the first pass. */
  }
  if (rc != 0) {
    return maintenance_failed(s);
  }
  forensic_bytes_refresh(s, EM_FORENSIC_FLIGHT);
  forensic_bytes_refresh(s, EM_FORENSIC_PROFILE);
  return batch_commit(s);
}

void em_store_stats(const em_store_t *s, em_store_stats_t *out) {
  if (!out) {
    return;
  }
  if (!s) {
    memset(out, 0, sizeof(*out));
    return;
  }
  *out = s->stats;
  em_ckpt_stats(s->ckpt, &out->ckpt);
}

/* --- open / close ------------------------------------------------------------------------ */

static void release(em_store_t *s) {
  em_ckpt_stop(s->ckpt);
  em_rollup_free(s->rollup);
  em_forensics_free(s->forensics);
  em_models_free(s->model_rows);
  s->model_rows = NULL; /* caches_clear() below must not reach it. */
  for (int i = 0; i < ST_COUNT; i++) {
    sqlite3_finalize(s->st[i]);
  }
  sqlite3_close(s->db); /* Rolls back an open batch, as a crash would. */
  caches_clear(s);
  free(s->blob);
  em_buf_free(&s->json);
  free(s->wal_path);
  free(s->path);
  free(s);
}

/* Runs a query returning one integer (PRAGMA ...). Returns the SQLite result code. */
static int query_int(sqlite3 *db, const char *sql, int64_t *out) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  if (rc != SQLITE_OK) {
    return rc;
  }
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *out = sqlite3_column_int64(st, 0);
    rc = SQLITE_OK;
  } else if (rc == SQLITE_DONE) {
    *out = 0;
    rc = SQLITE_OK;
  }
  sqlite3_finalize(st);
  return rc;
}

/* Runs a query returning one text (PRAGMA journal_mode, quick_check) into buf. */
static int query_text(sqlite3 *db, const char *sql, char *buf, size_t cap) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  if (rc != SQLITE_OK) {
    return rc;
  }
  buf[0] = '\0';
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    const unsigned char *t = sqlite3_column_text(st, 0);
    snprintf(buf, cap, "%s", t ? (const char *)t : "");
    rc = SQLITE_OK;
  } else if (rc == SQLITE_DONE) {
    rc = SQLITE_OK;
  }
  sqlite3_finalize(st);
  return rc;
}

/* The columns versions 7, 9 and 11 add to tables of older versions, with their types. */
static const struct {
  const char *table;
  const char *column;
  const char *type;
} added_columns[] = {
    {"devices", "model", "INTEGER"},      {"data", "level", "INTEGER"},
    {"data", "model", "INTEGER"},         {"stage_windows", "model", "INTEGER"},
    {"models", "last_ns", "INTEGER"},     {"models", "device", "INTEGER"},
    {"level_changes", "verdict", "TEXT"}, {"flights", "top_cause", "TEXT"},
    {"flights", "top_share", "REAL"},
};

/* Writes into sql[0..cap) the ALTER TABLE statements that add the columns of added_columns an
 * older store's tables lack (a column there already, as in a store whose user_version was set
 * back, is left; a table not there yet, models before version 7, is created whole by the
 * schema). Returns the SQLite result code. */
static int column_migration(sqlite3 *db, char *sql, size_t cap) {
  size_t len = 0;
  sql[0] = '\0';
  for (size_t i = 0; i < sizeof(added_columns) / sizeof(added_columns[0]); i++) {
    char q[160];
    int64_t missing = 0; /* The table is there, the column is not. */
    snprintf(q, sizeof(q),
             "SELECT count(*) > 0 AND sum(name = '%s') = 0 FROM pragma_table_info('%s')",
             added_columns[i].column, added_columns[i].table);
    int rc = query_int(db, q, &missing);
    if (rc != SQLITE_OK) {
      return rc;
    }
    if (missing) {
      len +=
          (size_t)snprintf(sql + len, cap - len, "ALTER TABLE %s ADD COLUMN %s %s;",
                           added_columns[i].table, added_columns[i].column, added_columns[i].type);
    }
  }
  return SQLITE_OK;
}

/* Checks that the file is an edgemon store (or empty), then creates or completes the schema. */
static int check_and_create(em_store_t *s, char *err, size_t err_cap) {
  const char *path = s->path;
  int64_t app_id = 0;
  int64_t user_version = 0;
  int64_t n_tables = 0;
  int rc = query_int(s->db, "PRAGMA application_id", &app_id);
  if (rc == SQLITE_OK) {
    rc = query_int(s->db, "PRAGMA user_version", &user_version);
  }
  if (rc == SQLITE_OK) {
    rc = query_int(s->db, "SELECT count(*) FROM sqlite_schema", &n_tables);
  }
  if (rc != SQLITE_OK) {
    set_err(err, err_cap, "%s: cannot read the database: %s", path, sqlite3_errmsg(s->db));
    return -EIO;
  }
  if (app_id != EM_STORE_APP_ID && (app_id != 0 || n_tables > 0)) {
    set_err(err, err_cap,
            "%s: not an edgemon database (SQLite application_id 0x%08llx, %lld objects); "
            "refusing to write into it",
            path, (unsigned long long)(uint32_t)app_id, (long long)n_tables);
    return -EIO;
  }
  if (app_id == EM_STORE_APP_ID && user_version < EM_STORE_MIGRATES_FROM) {
    set_err(err, err_cap,
            "%s: edgemon database schema version %lld is older than this aggregator's %d "
            "(samples were one row per metric); move the file aside or give another --db",
            path, (long long)user_version, EM_STORE_USER_VERSION);
    return -EIO;
  }
  if (user_version > EM_STORE_USER_VERSION) {
    set_err(err, err_cap, "%s: edgemon database schema version %lld is newer than this %d", path,
            (long long)user_version, EM_STORE_USER_VERSION);
    return -EIO;
  }

  /* A new store gets EM_STORE_PAGE_BYTES pages; SQLite takes the size only before the first
   * table and before WAL mode, so an existing store keeps the size it was created with. */
  if (n_tables == 0) {
    char page[48];
    snprintf(page, sizeof(page), "PRAGMA page_size=%u", EM_STORE_PAGE_BYTES);
    (void)sqlite3_exec(s->db, page, NULL, NULL, NULL);
  }
  char mode[32];
  rc = query_text(s->db, "PRAGMA journal_mode=WAL", mode, sizeof(mode));
  if (rc != SQLITE_OK || strcmp(mode, "wal") != 0) {
    set_err(err, err_cap, "%s: cannot switch to WAL mode: %s", path,
            rc != SQLITE_OK ? sqlite3_errmsg(s->db) : mode);
    return -EIO;
  }
  char page_size[32];
  unsigned long long page_bytes = 0;
  if (query_text(s->db, "PRAGMA page_size", page_size, sizeof(page_size)) == SQLITE_OK) {
    page_bytes = strtoull(page_size, NULL, 10);
  }
  if (page_bytes < 512) {
    page_bytes = 4096; /* SQLite's default, should the pragma not answer */
  }
  char *msg = NULL;
  char pragmas[160];
  snprintf(pragmas, sizeof(pragmas),
           "PRAGMA synchronous=NORMAL;PRAGMA cache_size=-%d;PRAGMA wal_autocheckpoint=%llu;"
           "PRAGMA journal_size_limit=%llu",
           EM_STORE_CACHE_KIB, EM_STORE_WAL_BACKSTOP_BYTES / page_bytes,
           (unsigned long long)EM_STORE_WAL_RESTART_BYTES);
  if (sqlite3_exec(s->db, pragmas, NULL, NULL, &msg) != SQLITE_OK) {
    set_err(err, err_cap, "%s: %s", path, msg ? msg : sqlite3_errmsg(s->db));
    sqlite3_free(msg);
    return -EIO;
  }

  char check[256];
  rc = query_text(s->db, "PRAGMA quick_check", check, sizeof(check));
  if (rc != SQLITE_OK || strcmp(check, "ok") != 0) {
    set_err(err, err_cap, "%s: integrity check failed: %s", path,
            rc != SQLITE_OK ? sqlite3_errmsg(s->db) : check);
    return -EIO;
  }

  /* Version 2 -> 3: the data columns the unique index needs. Versions 2 and 3 -> 4: a state
   * message stored more than once keeps its first row, so that the unique index of
   * level_changes can be created. Version 4 -> 5: the rollup tables, created empty by schema_sql
   * (the maintenance rolls up the raw rows already there, em_store_rollup()). Version 5 -> 6:
   * the flights table, created empty by schema_sql. Versions 2 to 6 -> 7: the model columns of
   * devices, data and stage_windows and the level of data rows (NULL in the old rows: no model
   * named, level not stored), and the models table, created empty by schema_sql. Version 7 ->
   * 8: the profiles table, created empty by schema_v8_sql. Versions 7 and 8 -> 9: models.last_ns
   * and models.device; last_ns of the rows there becomes the newest time of any data or window
   * row (per device, through the (device, time_ns) indexes; a scan for each model's own would
   * read the whole tables): later than each model's own, so the invariant of models.h holds and
   * a model unused since goes once retention passes that time. Versions 2 to 9 -> 10: the
   * forensic_bytes table, its rows the sums of the flights' and profiles' bytes, the triggers
   * that keep them and the recv_ns indexes (schema_v10_sql). Versions 2 to 10 -> 11:
   * level_changes.verdict and flights.top_cause and top_share, NULL in the old rows (a change
   * or recording stored before carries no verdict there; a recording's CBOR still has its
   * own). All in the schema's transaction. */
  static const char migrate_v2[] =
      "ALTER TABLE data ADD COLUMN session INTEGER;ALTER TABLE data ADD COLUMN seq INTEGER;";
  static const char migrate_v3[] =
      "DELETE FROM level_changes WHERE rowid NOT IN (SELECT min(rowid) FROM level_changes"
      " GROUP BY device, session, time_ns, level);";
  static const char migrate_v8[] =
      "UPDATE models SET last_ns = (SELECT max(t) FROM ("
      " SELECT (SELECT time_ns FROM data WHERE device = d.id ORDER BY time_ns DESC LIMIT 1) AS t"
      " FROM devices d UNION ALL"
      " SELECT (SELECT time_ns FROM stage_windows WHERE device = d.id ORDER BY time_ns DESC"
      " LIMIT 1) FROM devices d)) WHERE last_ns IS NULL;";
  bool ours = app_id == EM_STORE_APP_ID;
  bool from_v2 = ours && user_version == EM_STORE_MIGRATES_FROM;
  bool from_v3 = ours && user_version >= EM_STORE_MIGRATES_FROM && user_version < 4;
  bool from_v8 = ours && user_version >= EM_STORE_MIGRATES_FROM && user_version < 9;
  bool from_v10 = ours && user_version >= EM_STORE_MIGRATES_FROM && user_version < 11;
  char migrate_columns[sizeof(added_columns) / sizeof(added_columns[0]) * 64] = "";
  if (from_v10 && column_migration(s->db, migrate_columns, sizeof(migrate_columns)) != SQLITE_OK) {
    set_err(err, err_cap, "%s: cannot read the schema: %s", path, sqlite3_errmsg(s->db));
    return -EIO;
  }
  char create[sizeof(schema_sql) + sizeof(schema_v7_sql) + sizeof(schema_v8_sql) +
              sizeof(schema_v9_sql) + sizeof(schema_v10_sql) + sizeof(migrate_v2) +
              sizeof(migrate_v3) + sizeof(migrate_columns) + sizeof(migrate_v8) + 128];
  snprintf(create, sizeof(create),
           "BEGIN;%s%s%s%s%s%s%s%s%sPRAGMA application_id=%d;PRAGMA user_version=%d;COMMIT",
           from_v2 ? migrate_v2 : "", from_v3 ? migrate_v3 : "", migrate_columns, schema_sql,
           schema_v7_sql, schema_v8_sql, schema_v9_sql, schema_v10_sql, from_v8 ? migrate_v8 : "",
           EM_STORE_APP_ID, EM_STORE_USER_VERSION);
  if (sqlite3_exec(s->db, create, NULL, NULL, &msg) != SQLITE_OK) {
    set_err(err, err_cap, "%s: cannot create the schema: %s", path,
            msg ? msg : sqlite3_errmsg(s->db));
    sqlite3_free(msg);
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return -EIO;
  }
  return 0;
}

/* Reads the previous run's clean flag into the report and marks this run as open. */
static int mark_open(em_store_t *s, em_store_report_t *report) {
  int64_t clean = 1;
  int64_t last = 0;
  bool have_clean;
  bool have_last;
  if (meta_get_int(s, "clean", &clean, &have_clean) != 0 ||
      meta_get_int(s, "last_commit_ns", &last, &have_last) != 0) {
    return -EIO;
  }
  report->unclean = have_clean && clean == 0;
  report->last_commit_ns = have_last && last > 0 ? (uint64_t)last : 0;
  if (batch_begin(s) != 0) {
    return -EIO;
  }
  int rc = meta_set_int(s, "clean", 0);
  if (rc == 0) {
    rc = meta_set_int(s, "opened_ns", clamp_i64(realtime_ns()));
  }
  if (rc == 0) {
    rc = meta_set_int(s, "schema_version", EM_STORE_USER_VERSION);
  }
  if (rc != 0) {
    sqlite3_step(s->st[ST_ROLLBACK]);
    sqlite3_reset(s->st[ST_ROLLBACK]);
    s->in_batch = false;
    return -EIO;
  }
  /* Keep last_commit_ns as the previous run left it until this run commits. */
  s->stats.pending = 0;
  rc = exec_simple(s, ST_COMMIT);
  s->in_batch = false;
  return rc;
}

int em_store_open(em_store_t **out, const em_store_opts_t *opts, em_store_report_t *report,
                  char *err, size_t err_cap) {
  if (err && err_cap > 0) {
    err[0] = '\0';
  }
  if (!out || !opts || !opts->path || !*opts->path || opts->batch_ms == 0 ||
      opts->batch_rows == 0 || (opts->downsample_after_s > 0 && opts->downsample_step_s == 0)) {
    set_err(err, err_cap, "invalid store options");
    return -EINVAL;
  }
  *out = NULL;
  em_store_report_t rep = {0};
  struct stat sb;
  rep.created = stat(opts->path, &sb) != 0 || sb.st_size == 0;

  em_store_t *s = calloc(1, sizeof(*s));
  if (!s) {
    set_err(err, err_cap, "%s: out of memory", opts->path);
    return -ENOMEM;
  }
  s->opts = *opts;
  em_buf_init(&s->json, VALUES_JSON_MAX_BYTES);
  s->models.max = EM_STORE_MODEL_CACHE_MAX;
  s->path = strdup(opts->path);
  s->blob = malloc(EM_BUCKETS_BLOB_MAX);
  s->wal_path = malloc(strlen(opts->path) + 5);
  if (s->wal_path) {
    snprintf(s->wal_path, strlen(opts->path) + 5, "%s-wal", opts->path);
  }
  if (!s->path || !s->blob || !s->wal_path) {
    set_err(err, err_cap, "%s: out of memory", opts->path);
    release(s);
    return -ENOMEM;
  }
  s->opts.path = s->path;

  int rc = sqlite3_open_v2(s->path, &s->db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc != SQLITE_OK) {
    set_err(err, err_cap, "%s: cannot open: %s", s->path,
            s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
    release(s);
    return -EIO;
  }
  sqlite3_extended_result_codes(s->db, 1);
  sqlite3_busy_timeout(s->db, EM_STORE_BUSY_MS);
  if (check_and_create(s, err, err_cap) != 0) {
    release(s);
    return -EIO;
  }
  rep.integrity_ok = true;
  if (em_ckpt_start(&s->ckpt, s->path, EM_STORE_CKPT_MS, EM_STORE_WAL_TRUNCATE_BYTES, err,
                    err_cap) != 0) {
    release(s);
    return -EIO;
  }
  for (int i = 0; i < ST_COUNT; i++) {
    if (sqlite3_prepare_v3(s->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &s->st[i], NULL) !=
        SQLITE_OK) {
      set_err(err, err_cap, "%s: cannot prepare a statement: %s", s->path, sqlite3_errmsg(s->db));
      release(s);
      return -EIO;
    }
  }
  if (em_rollup_new(&s->rollup, s->db) != 0) {
    set_err(err, err_cap, "%s: cannot prepare the rollups: %s", s->path, sqlite3_errmsg(s->db));
    release(s);
    return -EIO;
  }
  if (em_forensics_new(&s->forensics, s->db) != SQLITE_OK) {
    set_err(err, err_cap, "%s: cannot prepare the flights and profiles tables: %s", s->path,
            sqlite3_errmsg(s->db));
    release(s);
    return -EIO;
  }
  if (em_models_new(&s->model_rows, s->db, opts->models_max, opts->models_per_device_max) !=
      SQLITE_OK) {
    set_err(err, err_cap, "%s: cannot prepare the models table: %s", s->path,
            sqlite3_errmsg(s->db));
    release(s);
    return -EIO;
  }
  if (mark_open(s, &rep) != 0) {
    set_err(err, err_cap, "%s: cannot write the meta table: %s", s->path, sqlite3_errmsg(s->db));
    release(s);
    return -EIO;
  }
  memset(&s->stats, 0, sizeof(s->stats)); /* Counted from here on. */
  forensic_bytes_refresh(s, EM_FORENSIC_FLIGHT);
  forensic_bytes_refresh(s, EM_FORENSIC_PROFILE);
  s->failed_untold = 0;
  if (report) {
    *report = rep;
  }
  *out = s;
  return 0;
}

int em_store_close(em_store_t *s) {
  if (!s) {
    return 0;
  }
  int rc = batch_commit(s);
  int rc2 = batch_begin(s);
  if (rc2 == 0) {
    rc2 = meta_set_int(s, "clean", 1);
  }
  if (rc2 == 0) {
    rc2 = batch_commit(s);
  }
  release(s);
  return rc ? rc : rc2;
}

void em_store_abandon(em_store_t *s) {
  if (!s) {
    return;
  }
  release(s);
}
