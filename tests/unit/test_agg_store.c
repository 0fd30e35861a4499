/*
 * test_agg_store.c - the aggregator's SQLite store (host/aggregator/store/store.c) against a real
 * SQLite database in a temporary directory: schema and application_id, rows with names and
 * values, absent values, batching by rows and by time, clean/unclean detection, retention,
 * downsampling (also of values whose sum passes int64), failures counted by table and reason
 * with their text, the WAL checkpointed into the database and started over under its bound,
 * refusing files that are not edgemon stores, and model identities: their rows, the sweep
 * that deletes those nothing names any more, and the bounds on how many there are.
 *
 * Rows are checked through a second, independent sqlite3 connection, so only committed rows
 * are visible to the checks.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "store.h"
#include "store_query.h"
#include "vectors.h"

#include <dict.h>
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define T0_NS 1700000000000000000ull /* A CLOCK_REALTIME in 2023. */
#define S_NS  1000000000ull

typedef struct {
  char dir[256];
  char path[300];
  em_dict_t *dict;
  em_device_t *dev;
} fixture_t;

static void rm_store_files(const char *path) {
  static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
  for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
    char p[400];
    snprintf(p, sizeof(p), "%s%s", path, suffix[i]);
    unlink(p);
  }
}

/* Each test's temporary directory, its store path and a dictionary that knows dev-1. */
static int setup(void **state) {
  static fixture_t fixture;
  fixture_t *f = &fixture;
  *f = (fixture_t){.dir = "/tmp/em-store-test-XXXXXX"};
  assert_non_null(mkdtemp(f->dir));
  snprintf(f->path, sizeof(f->path), "%s/history.db", f->dir);
  assert_int_equal(em_dict_new(&f->dict), 0);
  f->dev = em_dict_device(f->dict, "dev-1", true);
  assert_non_null(f->dev);
  *state = f;
  return 0;
}

/* Removes what any test leaves in the directory: two stores and a read-only subdirectory. */
static int teardown(void **state) {
  fixture_t *f = *state;
  static const char *const left[] = {"history.db", "other.db"};
  char path[400];
  for (size_t i = 0; i < sizeof(left) / sizeof(left[0]); i++) {
    snprintf(path, sizeof(path), "%s/%s", f->dir, left[i]);
    rm_store_files(path);
  }
  snprintf(path, sizeof(path), "%s/ro", f->dir);
  chmod(path, 0700);
  rmdir(path);
  rmdir(f->dir);
  em_dict_free(f->dict);
  return 0;
}

static em_store_opts_t opts_for(const fixture_t *f) {
  em_store_opts_t o = {
      .path = f->path, .batch_ms = 1000, .batch_rows = 1000, .rollup_manual = true};
  return o;
}

static em_store_t *open_ok(const fixture_t *f, const em_store_opts_t *o, em_store_report_t *rep) {
  em_store_t *s = NULL;
  char err[512];
  em_store_report_t local;
  int rc = em_store_open(&s, o, rep ? rep : &local, err, sizeof(err));
  if (rc != 0) {
    fail_msg("em_store_open(%s): %d %s", f->path, rc, err);
  }
  assert_non_null(s);
  return s;
}

/* A query of the store and the integer it must answer. */
typedef struct {
  const char *sql;
  int64_t want;
} q_want_t;

/* Each query of want[0..n) against the store at `path` answers its integer (q_int). */
static void q_wants(const char *path, const q_want_t *want, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int64_t got = q_int(path, want[i].sql);
    if (got != want[i].want) {
      fail_msg("%s: want %lld, got %lld", want[i].sql, (long long)want[i].want, (long long)got);
    }
  }
}

/* Q_WANTS(path, {sql, want}, ...): the rows of a table of queries, checked in order. */
#define Q_WANTS(path, ...)                                                                         \
  q_wants((path), (const q_want_t[]){__VA_ARGS__},                                                 \
          sizeof((const q_want_t[]){__VA_ARGS__}) / sizeof(q_want_t))

/* --- messages ---------------------------------------------------------------------------- */

/* `.name = arr, .n_name = its length`: a message's table and its count from one array. */
#define TABLE(name, arr) .name = (arr), .n_##name = sizeof(arr) / sizeof((arr)[0])

static const em_metric_def_t defs[] = {
    {.alias = 0, .name = "pmu.cycles", .unit = "1", .kind = EM_METRIC_DELTA},
    {.alias = 1, .name = "mem.rss", .unit = "By", .kind = EM_METRIC_GAUGE},
    {.alias = 2,
     .name = "psi.cpu.some.avg10",
     .unit = "%",
     .kind = EM_METRIC_GAUGE,
     .absent_reason = "no PSI"},
};

static em_msg_t birth_msg(uint32_t session) {
  em_msg_t m = {.kind = EM_MSG_BIRTH};
  m.u.birth = (em_birth_t){.head = {.time_ns = T0_NS, .session = session},
                           .device = "dev-1",
                           .agent_version = "1.2.3",
                           .board = "rpi4",
                           .period_ns = 100000000,
                           TABLE(metrics, defs)};
  return m;
}

static const em_bucket_t buckets[] = {{.index = -3, .count = 2}, {.index = 40, .count = 5}};
static const em_stage_t stages[] = {
    {.name = "infer",
     .count = 7,
     .sum_ns = 7000,
     .min_ns = 100,
     .max_ns = 2000,
     .p50_ns = 900,
     .p90_ns = 1500,
     .p99_ns = 1900,
     .p999_ns = 2000,
     .scale = 3,
     .zero_count = 0,
     TABLE(buckets, buckets)},
    {.name = "idle-stage", .count = 0},
};

/* Each data message gets the next seq: the store keeps one row per (device, session, seq). */
static uint32_t next_seq;

static em_msg_t data_msg(uint32_t session, uint64_t time_ns, em_sample_t *samples, size_t n) {
  em_msg_t m = {.kind = EM_MSG_DATA};
  m.u.data = (em_data_t){.head = {.time_ns = time_ns, .session = session},
                         .seq = ++next_seq,
                         .window_ns = 100000000,
                         .level = EM_LEVEL_WARN,
                         .samples = samples,
                         .n_samples = n,
                         TABLE(stages, stages)};
  return m;
}

static void add_birth(fixture_t *f, em_store_t *s, uint32_t session) {
  em_msg_t b = birth_msg(session);
  assert_int_equal(em_dict_set_birth(f->dev, &b.u.birth), 0);
  assert_int_equal(em_store_add(s, "dev-1", f->dev, &b, T0_NS), 0);
}

/* --- tests ------------------------------------------------------------------------------- */

static void store_create_makes_tables_and_application_id(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  em_store_report_t rep;
  em_store_t *s = open_ok(f, &o, &rep);
  assert_true(rep.created);
  assert_false(rep.unclean);
  assert_true(rep.integrity_ok);
  assert_int_equal(em_store_close(s), 0);

  Q_WANTS(f->path, {"PRAGMA application_id", 0x4544474d}, {"PRAGMA user_version", 11},
          {"SELECT journal_mode = 'wal' FROM pragma_journal_mode", 1});
  static const char *const tables[] = {"meta", "devices",       "metrics",      "stages",
                                       "data", "stage_windows", "level_changes"};
  for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
    char sql[200];
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM sqlite_schema WHERE type='table' AND name='%s'", tables[i]);
    assert_int_equal(q_int(f->path, sql), 1);
  }
  Q_WANTS(
      f->path,
      {"SELECT count(*) FROM sqlite_schema WHERE type='index' AND name='data_device_time'", 1},
      {"SELECT count(*) FROM sqlite_schema WHERE type='index' AND name='data_device_session_seq'",
       1},
      /* Every index is paid on every insert: (device, time_ns) on both hot tables, and data's
       * unique (device, session, seq) that makes a repeated delivery store nothing. */
      {"SELECT count(*) FROM sqlite_schema WHERE type='index' AND tbl_name IN ('data', "
       "'stage_windows')",
       3},
      {"SELECT count(*) FROM sqlite_schema WHERE type='view' AND name='samples'", 1});
}

static void store_rows_carry_names_and_values(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  em_store_t *s = open_ok(f, &o, NULL);
  add_birth(f, s, 7);

  em_sample_t smp[] = {
      {.alias = 0, .value = {.type = EM_VALUE_UINT, .as.u = 123456}},
      {.alias = 1, .value = {.type = EM_VALUE_FLOAT, .as.f = 2.5}},
      {.alias = 2, .value = {.type = EM_VALUE_ABSENT}},
      {.alias = 9, .value = {.type = EM_VALUE_INT, .as.i = -4}},
  };
  em_msg_t d = data_msg(7, T0_NS + S_NS, smp, 4);
  assert_int_equal(em_store_add(s, "dev-1", f->dev, &d, T0_NS), 0);

  em_msg_t st = {.kind = EM_MSG_STATE};
  st.u.state = (em_state_t){.head = {.time_ns = T0_NS + 2 * S_NS, .session = 7},
                            .level = EM_LEVEL_DEGRADED,
                            .prev_level = EM_LEVEL_WARN,
                            .rule = "infer.p99",
                            .stage = "infer",
                            .value = {.type = EM_VALUE_UINT, .as.u = 1900},
                            .bound = {.type = EM_VALUE_ABSENT},
                            .reason = "p99 over budget"};
  assert_int_equal(em_store_add(s, "dev-1", f->dev, &st, T0_NS), 0);
  em_msg_t status = {.kind = EM_MSG_STATUS};
  status.u.status =
      (em_status_t){.head = {.time_ns = T0_NS + 3 * S_NS, .session = 7}, .online = true};
  assert_int_equal(em_store_add(s, "dev-1", f->dev, &status, T0_NS), 0);

  /* Nothing is visible before the batch commits. */
  Q_WANTS(f->path, {"SELECT count(*) FROM samples", 0});
  assert_int_equal(em_store_flush(s), 0);

  Q_WANTS(f->path, {"SELECT count(*) FROM samples", 3}, /* null not stored */
          {"SELECT value FROM samples JOIN metrics m ON m.id = metric WHERE m.name = 'pmu.cycles'",
           123456});
  assert_true(q_double(f->path, "SELECT value FROM samples JOIN metrics m ON m.id = metric "
                                "WHERE m.name = 'mem.rss'") == 2.5);
  Q_WANTS(
      f->path,
      {"SELECT value FROM samples JOIN metrics m ON m.id = metric WHERE m.name = 'alias.9'", -4},
      {"SELECT count(*) FROM samples JOIN metrics m ON m.id = metric WHERE m.name = "
       "'psi.cpu.some.avg10'",
       0},
      {"SELECT min(n) FROM samples", 1},
      {"SELECT count(*) FROM samples JOIN devices d ON d.id = device WHERE d.name = 'dev-1' AND "
       "time_ns = 1700000001000000000",
       3});

  /* One window row: the idle stage has none. The blob holds 12-byte little-endian pairs. */
  Q_WANTS(f->path, {"SELECT count(*) FROM stage_windows", 1},
          {"SELECT p99_ns FROM stage_windows JOIN stages t ON t.id = stage WHERE t.name = 'infer'",
           1900},
          {"SELECT length(buckets) FROM stage_windows", 24},
          {"SELECT hex(buckets) = 'FDFFFFFF' || '0200000000000000' || '28000000' || "
           "'0500000000000000' FROM stage_windows",
           1});

  Q_WANTS(f->path,
          {"SELECT count(*) FROM level_changes WHERE level = 2 AND prev_level = 1 AND rule = "
           "'infer.p99' AND stage = 'infer' AND value = 1900 AND bound IS NULL AND reason = 'p99 "
           "over budget'",
           1},
          {"SELECT count(*) FROM devices WHERE name = 'dev-1' AND session = 7 AND board = 'rpi4' "
           "AND agent_version = '1.2.3' AND online = 1 AND level = 2 AND period_ns = 100000000",
           1});

  em_store_stats_t stats;
  em_store_stats(s, &stats);
  assert_int_equal(stats.errors, 0);
  assert_int_equal(stats.pending, 0);
  assert_int_equal(stats.batches, 1);
  assert_true(stats.rows >= 7);
  assert_int_equal(em_store_close(s), 0);
}

static void store_data_without_birth_uses_alias_names(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  em_store_t *s = open_ok(f, &o, NULL);
  add_birth(f, s, 7);
  em_sample_t smp[] = {{.alias = 0, .value = {.type = EM_VALUE_UINT, .as.u = 1}}};
  em_msg_t d = data_msg(8, T0_NS, smp, 1); /* Session 8: the birth is of session 7. */
  assert_int_equal(em_store_add(s, "dev-1", f->dev, &d, T0_NS), 0);
  assert_int_equal(em_store_add(s, "dev-2", NULL, &d, T0_NS), 0);
  assert_int_equal(em_store_flush(s), 0);
  Q_WANTS(
      f->path,
      {"SELECT count(*) FROM samples JOIN metrics m ON m.id = metric WHERE m.name = 'alias.0'", 2},
      {"SELECT count(*) FROM devices", 2});
  assert_int_equal(em_store_close(s), 0);
}

static void store_tick_commits_when_batch_rows_pending(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  o.batch_rows = 10;
  o.batch_ms = 3600000;
  em_store_t *s = open_ok(f, &o, NULL);
  em_sample_t smp[] = {{.alias = 0, .value = {.type = EM_VALUE_UINT, .as.u = 1}}};
  /* Each message: one data row and one window row; the device's last_seen is written once,
   * at commit. */
  em_msg_t d = data_msg(1, T0_NS, smp, 1);
  em_store_stats_t stats;
  for (int i = 0; i < 4; i++) {
    assert_int_equal(em_store_add(s, "dev-1", NULL, &d, T0_NS), 0);
    assert_int_equal(em_store_tick(s, 5 * S_NS), 0);
    d.u.data.seq++;
  }
  Q_WANTS(f->path, {"SELECT count(*) FROM samples", 0});
  em_store_stats(s, &stats);
  assert_int_equal(stats.pending, 8);
  assert_int_equal(em_store_add(s, "dev-1", NULL, &d, T0_NS), 0);
  assert_int_equal(em_store_tick(s, 5 * S_NS), 0);
  Q_WANTS(f->path, {"SELECT count(*) FROM samples", 5}, {"SELECT count(*) FROM data", 5});
  em_store_stats(s, &stats);
  assert_int_equal(stats.pending, 0);
  assert_int_equal(stats.batches, 1);
  assert_int_equal(stats.rows, 11); /* 5 data, 5 windows, 1 devices update. */
  assert_int_equal(em_store_close(s), 0);
}

static void store_tick_commits_when_batch_ms_passed(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  o.batch_rows = 1000000;
  o.batch_ms = 250;
  em_store_t *s = open_ok(f, &o, NULL);
  assert_int_equal(em_store_tick(s, 1 * S_NS), 0); /* Nothing pending: nothing to do. */
  em_sample_t smp[] = {{.alias = 0, .value = {.type = EM_VALUE_UINT, .as.u = 1}}};
  em_msg_t d = data_msg(1, T0_NS, smp, 1);
  assert_int_equal(em_store_add(s, "dev-1", NULL, &d, T0_NS), 0);
  assert_int_equal(em_store_tick(s, 2 * S_NS), 0);
  assert_int_equal(em_store_tick(s, 2 * S_NS + 249000000), 0);
  Q_WANTS(f->path, {"SELECT count(*) FROM samples", 0});
  assert_int_equal(em_store_tick(s, 2 * S_NS + 250000000), 0);
  Q_WANTS(f->path, {"SELECT count(*) FROM samples", 1});
  assert_int_equal(em_store_close(s), 0);
}

static void store_abandoned_store_reopens_unclean(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  em_store_t *s = open_ok(f, &o, NULL);
  em_sample_t smp[] = {{.alias = 0, .value = {.type = EM_VALUE_UINT, .as.u = 1}}};
  em_msg_t d = data_msg(1, T0_NS, smp, 1);
  assert_int_equal(em_store_add(s, "dev-1", NULL, &d, T0_NS), 0);
  assert_int_equal(em_store_flush(s), 0);
  assert_int_equal(em_store_add(s, "dev-1", NULL, &d, T0_NS + S_NS), 0); /* Open batch. */
  em_store_abandon(s);

  em_store_report_t rep;
  s = open_ok(f, &o, &rep);
  assert_false(rep.created);
  assert_true(rep.unclean);
  assert_true(rep.last_commit_ns > T0_NS);
  assert_true(rep.integrity_ok);
  /* The committed batch survived; the open one is gone. */
  Q_WANTS(f->path, {"SELECT count(*) FROM samples", 1});
  assert_int_equal(em_store_close(s), 0);

  s = open_ok(f, &o, &rep);
  assert_false(rep.unclean);
  assert_true(rep.last_commit_ns > T0_NS);
  assert_int_equal(em_store_close(s), 0);
}

static void store_clean_close_reopens_clean(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  em_store_t *s = open_ok(f, &o, NULL);
  em_sample_t smp[] = {{.alias = 0, .value = {.type = EM_VALUE_UINT, .as.u = 1}}};
  em_msg_t d = data_msg(1, T0_NS, smp, 1);
  assert_int_equal(em_store_add(s, "dev-1", NULL, &d, T0_NS), 0);
  assert_int_equal(em_store_close(s), 0); /* Close commits the pending batch. */
  em_store_report_t rep;
  s = open_ok(f, &o, &rep);
  assert_false(rep.created);
  assert_false(rep.unclean);
  Q_WANTS(f->path, {"SELECT count(*) FROM samples", 1});
  assert_int_equal(em_store_close(s), 0);
  assert_int_equal(em_store_close(NULL), 0);
  em_store_abandon(NULL);
}

static void store_retention_deletes_old_rows(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  o.retention_s = 3600;
  em_store_t *s = open_ok(f, &o, NULL);
  em_sample_t smp[] = {{.alias = 0, .value = {.type = EM_VALUE_UINT, .as.u = 1}}};
  uint64_t now = T0_NS + 10000 * S_NS;
  const uint64_t times[] = {T0_NS, now - 3601 * S_NS, now - 3599 * S_NS, now};
  for (size_t i = 0; i < 4; i++) {
    em_msg_t d = data_msg(1, times[i], smp, 1);
    assert_int_equal(em_store_add(s, "dev-1", NULL, &d, times[i]), 0);
  }
  em_msg_t st = {.kind = EM_MSG_STATE};
  st.u.state = (em_state_t){.head = {.time_ns = T0_NS}, .level = EM_LEVEL_WARN};
  assert_int_equal(em_store_add(s, "dev-1", NULL, &st, T0_NS), 0);
  assert_int_equal(em_store_retain(s, now), 0);
  Q_WANTS(f->path, {"SELECT count(*) FROM samples", 2}, {"SELECT count(*) FROM stage_windows", 2},
          {"SELECT count(*) FROM level_changes", 0},
          {"SELECT min(time_ns) FROM samples", (int64_t)(now - 3599 * S_NS)});
  assert_int_equal(em_store_close(s), 0);
}

static void store_downsampling_averages_one_row_per_step(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  o.downsample_after_s = 3600;
  o.downsample_step_s = 60;
  em_store_t *s = open_ok(f, &o, NULL);
  add_birth(f, s, 1);
  uint64_t base = T0_NS / (60 * S_NS) * (60 * S_NS); /* Aligned to a step. */
  /* 6 samples 10 s apart in the old step, values 1..6 of pmu.cycles; 2 of mem.rss. */
  for (uint64_t i = 0; i < 6; i++) {
    em_sample_t smp[] = {{.alias = 0, .value = {.type = EM_VALUE_UINT, .as.u = i + 1}},
                         {.alias = 1, .value = {.type = EM_VALUE_FLOAT, .as.f = 10.0 * (double)i}}};
    em_msg_t d = data_msg(1, base + i * 10 * S_NS + 1, smp, i < 2 ? 2 : 1);
    assert_int_equal(em_store_add(s, "dev-1", f->dev, &d, 0), 0);
  }
  uint64_t now = base + 7200 * S_NS;
  em_sample_t recent[] = {{.alias = 0, .value = {.type = EM_VALUE_UINT, .as.u = 100}}};
  em_msg_t d = data_msg(1, now - 10 * S_NS, recent, 1);
  assert_int_equal(em_store_add(s, "dev-1", f->dev, &d, 0), 0);

  assert_int_equal(em_store_retain(s, now), 0);
  Q_WANTS(f->path, {"SELECT count(*) FROM samples", 3});
  char sql[300];
  snprintf(sql, sizeof(sql),
           "SELECT n FROM samples JOIN metrics m ON m.id = metric WHERE m.name = 'pmu.cycles' "
           "AND time_ns = %llu",
           (unsigned long long)base);
  assert_int_equal(q_int(f->path, sql), 6);
  snprintf(sql, sizeof(sql),
           "SELECT value FROM samples JOIN metrics m ON m.id = metric WHERE m.name = 'pmu.cycles' "
           "AND time_ns = %llu",
           (unsigned long long)base);
  assert_true(q_double(f->path, sql) == 3.5);
  assert_true(q_double(f->path, "SELECT value FROM samples JOIN metrics m ON m.id = metric "
                                "WHERE m.name = 'mem.rss'") == 5.0);
  Q_WANTS(f->path, {"SELECT n FROM samples WHERE value = 100", 1});

  /* Running it again changes nothing: the downsampled rows are already one per step. */
  assert_int_equal(em_store_retain(s, now), 0);
  Q_WANTS(f->path, {"SELECT count(*) FROM samples", 3}, {"SELECT sum(n) FROM samples", 9});
  assert_int_equal(em_store_close(s), 0);
}

/* A statement that fails (a trigger injects the error) drops its row, counts an error, and
 * leaves the store usable: the other rows of the batch commit. */
static void store_failed_row_is_dropped_and_counted(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  em_store_t *s = open_ok(f, &o, NULL);
  q_exec(f->path,
         "CREATE TRIGGER inject BEFORE INSERT ON data WHEN NEW.time_ns = 1700000000000000000 "
         "BEGIN SELECT RAISE(ABORT, 'injected'); END");
  em_sample_t smp[] = {{.alias = 0, .value = {.type = EM_VALUE_UINT, .as.u = 13}},
                       {.alias = 1, .value = {.type = EM_VALUE_UINT, .as.u = 14}}};
  em_msg_t d = data_msg(1, T0_NS, smp, 2);
  assert_int_equal(em_store_add(s, "dev-1", NULL, &d, T0_NS), -EIO);
  em_msg_t later = data_msg(1, T0_NS + S_NS, smp, 2);
  assert_int_equal(em_store_add(s, "dev-1", NULL, &later, T0_NS), 0);
  assert_int_equal(em_store_flush(s), 0);
  em_store_stats_t stats;
  em_store_stats(s, &stats);
  assert_int_equal(stats.errors, 1);
  Q_WANTS(f->path, {"SELECT count(*) FROM samples", 2}, {"SELECT sum(value) FROM samples", 27},
          {"SELECT count(*) FROM stage_windows", 2},
          {"SELECT last_seen_ns FROM devices", 1700000001000000000});
  assert_int_equal(em_store_close(s), 0);
}

/* Two counter values of one device in one old step whose sum passes INT64_MAX: downsampling
 * once failed its whole statement on sum()'s integer overflow, so every retention run failed
 * (a "failed write" each minute) and no row was ever deleted or downsampled again. */
static void store_downsampling_survives_values_whose_sum_passes_int64(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  o.retention_s = 7 * 86400;
  o.downsample_after_s = 3600;
  o.downsample_step_s = 60;
  em_store_t *s = open_ok(f, &o, NULL);
  add_birth(f, s, 1);
  uint64_t base = T0_NS / (60 * S_NS) * (60 * S_NS);
  for (uint64_t i = 0; i < 2; i++) {
    em_sample_t smp[] = {{.alias = 0, .value = {.type = EM_VALUE_UINT, .as.u = INT64_MAX - 1}}};
    em_msg_t d = data_msg(1, base + i * 10 * S_NS + 1, smp, 1);
    assert_int_equal(em_store_add(s, "dev-1", f->dev, &d, 0), 0);
  }
  uint64_t now = base + 7200 * S_NS;
  assert_int_equal(em_store_retain(s, now), 0);
  em_store_stats_t st;
  em_store_stats(s, &st);
  assert_int_equal(st.errors, 0);
  Q_WANTS(f->path, {"SELECT count(*) FROM data", 1}, {"SELECT n FROM samples", 2});
  assert_true(q_double(f->path, "SELECT value FROM samples") > 9.2e18);
  assert_int_equal(em_store_close(s), 0);
}

/* A failed write is counted under its table and SQLite's reason, and its text (table, device,
 * SQLite's message) is handed out once for the log. */
static void store_failure_is_counted_by_table_and_reason_with_its_text(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  em_store_t *s = open_ok(f, &o, NULL);
  q_exec(f->path, "CREATE TRIGGER inject BEFORE INSERT ON stage_windows "
                  "BEGIN SELECT RAISE(ABORT, 'injected window failure'); END");
  char text[EM_STORE_FAILURE_TEXT];
  assert_int_equal(em_store_take_failure(s, text, sizeof(text)), 0);
  em_sample_t smp[] = {{.alias = 0, .value = {.type = EM_VALUE_UINT, .as.u = 13}}};
  for (int i = 0; i < 3; i++) {
    em_msg_t d = data_msg(1, T0_NS + (uint64_t)i, smp, 1);
    assert_int_equal(em_store_add(s, "dev-1", NULL, &d, T0_NS), -EIO);
  }
  assert_int_equal(em_store_flush(s), 0);
  em_store_stats_t st;
  em_store_stats(s, &st);
  assert_int_equal(st.errors, 3);
  assert_int_equal(st.n_failures, 1);
  assert_string_equal(st.failures[0].table, "stage_windows");
  assert_string_equal(st.failures[0].reason, "constraint");
  assert_int_equal(st.failures[0].count, 3);
  assert_int_equal(em_store_take_failure(s, text, sizeof(text)), 3);
  assert_non_null(strstr(text, "table stage_windows"));
  assert_non_null(strstr(text, "device dev-1"));
  assert_non_null(strstr(text, "injected window failure"));
  assert_int_equal(em_store_take_failure(s, text, sizeof(text)), 0);
  /* The data rows themselves were kept. */
  Q_WANTS(f->path, {"SELECT count(*) FROM data", 3});
  assert_int_equal(em_store_close(s), 0);
}

static int64_t file_bytes(const char *path, const char *suffix) {
  char p[400];
  snprintf(p, sizeof(p), "%s%s", path, suffix);
  struct stat sb;
  return stat(p, &sb) == 0 ? (int64_t)sb.st_size : 0;
}

/* The checkpointer copies the WAL into the database while the store runs (it once reported
 * log = -1 and copied nothing, so PATH stayed at 4096 bytes), and the WAL starts over instead
 * of growing: past 4 MiB the writer finishes the copy and the file is cut back. */
static void store_wal_is_checkpointed_and_stays_bounded(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  em_store_t *s = open_ok(f, &o, NULL);
  add_birth(f, s, 1);
  em_sample_t smp[] = {{.alias = 0, .value = {.type = EM_VALUE_UINT, .as.u = 1}},
                       {.alias = 1, .value = {.type = EM_VALUE_FLOAT, .as.f = 0.5}}};
  int64_t wal_max = 0;
  em_store_stats_t st = {0};
  /* Batches until the writer has started the log over twice, or the WAL passed 12 MiB. */
  for (int batch = 0; batch < 4000 && st.wal_restarts < 2 && wal_max < 12 * 1024 * 1024; batch++) {
    for (uint64_t i = 0; i < 200; i++) {
      em_msg_t d = data_msg(1, T0_NS + (uint64_t)batch * 1000 + i, smp, 2);
      assert_int_equal(em_store_add(s, "dev-1", f->dev, &d, 0), 0);
    }
    assert_int_equal(em_store_flush(s), 0);
    int64_t wal = file_bytes(f->path, "-wal");
    wal_max = wal > wal_max ? wal : wal_max;
    em_store_stats(s, &st);
  }
  assert_true(st.wal_restarts >= 2);
  assert_true(wal_max < 6 * 1024 * 1024); /* The 4 MiB bound plus a batch or two. */
  /* Bounded wait (no timing asserted) for the checkpoint thread's pass: it copies frames. */
  for (int i = 0; i < 200 && st.ckpt.frames == 0; i++) {
    struct timespec nap = {0, 50000000};
    nanosleep(&nap, NULL);
    em_store_stats(s, &st);
  }
  assert_true(st.ckpt.runs > 0);
  assert_true(st.ckpt.frames > 0);
  assert_int_equal(st.ckpt.errors, 0);
  assert_true(file_bytes(f->path, "") > 1024 * 1024); /* The rows reached PATH itself. */
  assert_int_equal(st.errors, 0);
  assert_int_equal(em_store_close(s), 0);
}

/* --- refusing what is not a store ----------------------------------------------------------- */

typedef enum { BAD_FOREIGN, BAD_GARBAGE, BAD_PARENT_IS_FILE, BAD_READONLY_DIR } bad_kind_t;

static void make_bad(fixture_t *f, bad_kind_t kind, char *path, size_t cap) {
  switch (kind) {
  case BAD_FOREIGN: {
    snprintf(path, cap, "%s/other.db", f->dir);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "CREATE TABLE accounts(id INTEGER, owner TEXT);"
                                  "INSERT INTO accounts VALUES(1, 'x')",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    break;
  }
  case BAD_GARBAGE: {
    snprintf(path, cap, "%s/other.db", f->dir);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    for (int i = 0; i < 8192; i++) {
      fputc((i * 131 + 7) & 0xff, fp);
    }
    fclose(fp);
    break;
  }
  case BAD_PARENT_IS_FILE: {
    char parent[320];
    snprintf(parent, sizeof(parent), "%s/other.db", f->dir);
    FILE *fp = fopen(parent, "wb");
    assert_non_null(fp);
    fclose(fp);
    snprintf(path, cap, "%s/store.db", parent);
    break;
  }
  case BAD_READONLY_DIR: {
    char ro[320];
    snprintf(ro, sizeof(ro), "%s/ro", f->dir);
    assert_int_equal(mkdir(ro, 0500), 0);
    snprintf(path, cap, "%s/store.db", ro);
    break;
  }
  }
}

/* Data's level and last_seen are written at commit, yet a state message after the data in
 * the same batch still wins, and last_seen is the latest time of either. */
static void store_deferred_level_keeps_message_order(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  em_store_t *s = open_ok(f, &o, NULL);
  em_sample_t smp[] = {{.alias = 0, .value = {.type = EM_VALUE_UINT, .as.u = 1}}};
  em_msg_t d = data_msg(1, T0_NS + 5 * S_NS, smp, 1); /* Level WARN. */
  assert_int_equal(em_store_add(s, "dev-1", NULL, &d, T0_NS), 0);
  em_msg_t st = {.kind = EM_MSG_STATE};
  st.u.state = (em_state_t){.head = {.time_ns = T0_NS + 6 * S_NS}, .level = EM_LEVEL_CRITICAL};
  assert_int_equal(em_store_add(s, "dev-1", NULL, &st, T0_NS), 0);
  em_msg_t older = data_msg(1, T0_NS + S_NS, smp, 1);
  older.u.data.level = EM_LEVEL_NONE; /* Carries no level: keeps CRITICAL. */
  assert_int_equal(em_store_add(s, "dev-1", NULL, &older, T0_NS), 0);
  assert_int_equal(em_store_flush(s), 0);
  Q_WANTS(f->path, {"SELECT level FROM devices", EM_LEVEL_CRITICAL},
          {"SELECT last_seen_ns FROM devices", (int64_t)(T0_NS + 6 * S_NS)});

  d.u.data.head.time_ns = T0_NS + 7 * S_NS; /* A later data message with a level: it wins. */
  d.u.data.seq = ++next_seq;
  assert_int_equal(em_store_add(s, "dev-1", NULL, &d, T0_NS), 0);
  assert_int_equal(em_store_close(s), 0);
  Q_WANTS(f->path, {"SELECT level FROM devices", EM_LEVEL_WARN},
          {"SELECT last_seen_ns FROM devices", (int64_t)(T0_NS + 7 * S_NS)});
}

/* Messages the agent replayed from its spool (historical) are history: their level change is
 * recorded, but the device's current level stays what live messages said. */
static void store_historical_messages_do_not_set_the_current_level(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  em_store_t *s = open_ok(f, &o, NULL);
  em_msg_t live = {.kind = EM_MSG_STATE};
  live.u.state = (em_state_t){.head = {.time_ns = T0_NS + 9 * S_NS}, .level = EM_LEVEL_NOMINAL};
  assert_int_equal(em_store_add(s, "dev-1", NULL, &live, T0_NS), 0);
  em_msg_t old = {.kind = EM_MSG_STATE};
  old.u.state = (em_state_t){.head = {.time_ns = T0_NS + S_NS},
                             .level = EM_LEVEL_CRITICAL,
                             .prev_level = EM_LEVEL_NOMINAL,
                             .historical = true};
  assert_int_equal(em_store_add(s, "dev-1", NULL, &old, T0_NS), 0);
  em_sample_t smp[] = {{.alias = 0, .value = {.type = EM_VALUE_UINT, .as.u = 1}}};
  em_msg_t d = data_msg(1, T0_NS + 2 * S_NS, smp, 1);
  d.u.data.level = EM_LEVEL_CRITICAL;
  d.u.data.historical = true;
  assert_int_equal(em_store_add(s, "dev-1", NULL, &d, T0_NS), 0);
  assert_int_equal(em_store_close(s), 0);
  Q_WANTS(f->path, {"SELECT level FROM devices", EM_LEVEL_NOMINAL},
          {"SELECT count(*) FROM level_changes WHERE level = 3", 1},
          {"SELECT count(*) FROM samples", 1});
}

/* Creates a store at f->path, closes it and runs sql on it over a connection of its own (a
 * store as an older aggregator left it). */
static void make_store_then(fixture_t *f, const char *sql) {
  em_store_opts_t o = opts_for(f);
  assert_int_equal(em_store_close(open_ok(f, &o, NULL)), 0);
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
  char *msg = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
    fail_msg("%s: %s", sql, msg ? msg : "?");
  }
  sqlite3_close(db);
}

/* A store of schema version 1 (one samples row per metric) is refused with a clear message. */
static void store_open_refuses_older_schema(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  em_store_t *s = NULL;
  make_store_then(f, "PRAGMA user_version=1");
  char err[512];
  assert_int_equal(em_store_open(&s, &o, NULL, err, sizeof(err)), -EIO);
  assert_null(s);
  assert_non_null(strstr(err, "schema version 1 is older"));
  assert_non_null(strstr(err, f->path));
}

/* A data message delivered again (QoS 1 redelivery, an agent's replay), in the same batch or a
 * later one, stores no row and is counted; the same seq of another session or device is a
 * message of its own. */
static void store_repeated_data_message_is_stored_once_and_counted(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  em_store_t *s = open_ok(f, &o, NULL);
  add_birth(f, s, 7);
  em_sample_t smp[] = {{.alias = 1, .value = {.type = EM_VALUE_UINT, .as.u = 42}}};
  em_msg_t m = data_msg(7, T0_NS + 1000, smp, 1);
  assert_int_equal(em_store_add(s, "dev-1", f->dev, &m, T0_NS), 0);
  assert_int_equal(em_store_add(s, "dev-1", f->dev, &m, T0_NS), 0); /* Same batch. */
  assert_int_equal(em_store_flush(s), 0);
  assert_int_equal(em_store_add(s, "dev-1", f->dev, &m, T0_NS), 0); /* A later batch. */
  em_msg_t other_session = m;
  other_session.u.data.head.session = 8;
  assert_int_equal(em_store_add(s, "dev-1", f->dev, &other_session, T0_NS), 0);
  assert_int_equal(em_store_add(s, "dev-2", NULL, &m, T0_NS), 0);
  em_store_stats_t st;
  em_store_stats(s, &st);
  assert_int_equal(st.duplicates, 2);
  assert_int_equal(em_store_close(s), 0);

  Q_WANTS(f->path, {"SELECT count(*) FROM data", 3},
          {"SELECT count(*) FROM data d JOIN devices v ON v.id = d.device WHERE v.name = 'dev-1' "
           "AND d.session = 7",
           1});
  char sql[200];
  snprintf(sql, sizeof(sql), "SELECT count(*) FROM data WHERE seq = %u", (unsigned)m.u.data.seq);
  assert_int_equal(q_int(f->path, sql), 3);
  /* The repeated message's stage windows are not stored again either. */
  Q_WANTS(f->path, {"SELECT count(*) FROM stage_windows", 3});
}

/* A state message delivered again (QoS 1 redelivery, an agent's write-ahead replay), in the same
 * batch or a later one, stores no level_changes row, does not set the device's level back, and
 * is counted; another level at the same time, or the same level at another time or in another
 * session, is a change of its own. */
static void store_repeated_state_message_is_stored_once_and_counted(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  em_store_t *s = open_ok(f, &o, NULL);
  em_msg_t up = {.kind = EM_MSG_STATE};
  up.u.state = (em_state_t){.head = {.time_ns = T0_NS + S_NS, .session = 7},
                            .level = EM_LEVEL_DEGRADED,
                            .prev_level = EM_LEVEL_NOMINAL,
                            .reason = "up"};
  em_msg_t down = up;
  down.u.state.head.time_ns = T0_NS + 2 * S_NS;
  down.u.state.level = EM_LEVEL_NOMINAL;
  down.u.state.prev_level = EM_LEVEL_DEGRADED;
  down.u.state.reason = "down";
  assert_int_equal(em_store_add(s, "dev-1", NULL, &up, T0_NS), 0);
  assert_int_equal(em_store_add(s, "dev-1", NULL, &up, T0_NS), 0); /* Same batch. */
  assert_int_equal(em_store_add(s, "dev-1", NULL, &down, T0_NS), 0);
  assert_int_equal(em_store_flush(s), 0);
  assert_int_equal(em_store_add(s, "dev-1", NULL, &up, T0_NS), 0); /* A later batch. */
  assert_int_equal(em_store_flush(s), 0);
  /* The repeat of `up` after `down` left the device at the level `down` set. */
  Q_WANTS(f->path, {"SELECT level FROM devices WHERE name = 'dev-1'", EM_LEVEL_NOMINAL});
  em_msg_t other_level = up;
  other_level.u.state.level = EM_LEVEL_CRITICAL;
  em_msg_t other_session = up;
  other_session.u.state.head.session = 8;
  em_msg_t later = up;
  later.u.state.head.time_ns = T0_NS + 3 * S_NS;
  assert_int_equal(em_store_add(s, "dev-1", NULL, &other_level, T0_NS), 0);
  assert_int_equal(em_store_add(s, "dev-1", NULL, &other_session, T0_NS), 0);
  assert_int_equal(em_store_add(s, "dev-2", NULL, &up, T0_NS), 0);
  em_store_stats_t st;
  em_store_stats(s, &st);
  assert_int_equal(st.duplicates, 2);
  assert_int_equal(em_store_add(s, "dev-1", NULL, &later, T0_NS), 0);
  assert_int_equal(em_store_close(s), 0);
  Q_WANTS(f->path, {"SELECT count(*) FROM level_changes", 6},
          {"SELECT count(*) FROM level_changes l JOIN devices v ON v.id = l.device WHERE v.name = "
           "'dev-1' AND l.session = 7 AND l.level = 2 AND l.time_ns = 1700000001000000000",
           1});
}

/* A store of schema version 2 (data without session and seq) is migrated at open: its rows
 * stay, the columns and the unique indexes are added, user_version becomes 11. */
static void store_open_migrates_version_2(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  make_store_then(f, "DROP INDEX data_device_session_seq;"
                     "ALTER TABLE data DROP COLUMN seq;ALTER TABLE data DROP COLUMN session;"
                     "INSERT INTO devices(id, name) VALUES(1, 'dev-1');"
                     "INSERT INTO data(device, time_ns, vals) VALUES(1, 5, '{}');"
                     "INSERT INTO data(device, time_ns, vals) VALUES(1, 5, '{}');"
                     "PRAGMA user_version=2");

  em_store_t *s = open_ok(f, &o, NULL);
  em_sample_t smp[] = {{.alias = 1, .value = {.type = EM_VALUE_UINT, .as.u = 42}}};
  em_msg_t m = data_msg(7, T0_NS, smp, 1);
  assert_int_equal(em_store_add(s, "dev-1", NULL, &m, T0_NS), 0);
  assert_int_equal(em_store_add(s, "dev-1", NULL, &m, T0_NS), 0);
  assert_int_equal(em_store_close(s), 0);
  Q_WANTS(
      f->path, {"PRAGMA user_version", 11},
      {"SELECT count(*) FROM sqlite_schema WHERE type='index' AND name='data_device_session_seq'",
       1},
      {"SELECT count(*) FROM sqlite_schema WHERE type='index' AND "
       "name='level_changes_device_session_time_level'",
       1},
      {"SELECT count(*) FROM data WHERE seq IS NULL", 2},
      {"SELECT count(*) FROM data WHERE seq IS NOT NULL", 1},
      {"SELECT integrity_check = 'ok' FROM pragma_integrity_check", 1});
}

/* A store of schema version 3 (level_changes without its unique index, a state message stored
 * once per delivery) is migrated at open: of the rows of one change the first stays, the
 * others go, the index is added, and a further repeat is counted instead of stored. */
static void store_open_migrates_version_3(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  make_store_then(f, "DROP INDEX level_changes_device_session_time_level;"
                     "INSERT INTO devices(id, name) VALUES(1, 'dev-1');"
                     "INSERT INTO level_changes(device, time_ns, session, level, prev_level, "
                     "reason) VALUES(1, 5, 7, 2, 0, 'first'), (1, 5, 7, 2, 0, 'again'), "
                     "(1, 5, 7, 2, 0, 'again'), (1, 6, 7, 0, 2, 'other');"
                     "PRAGMA user_version=3");
  em_store_t *s = open_ok(f, &o, NULL);
  em_msg_t m = {.kind = EM_MSG_STATE};
  m.u.state = (em_state_t){.head = {.time_ns = 5, .session = 7},
                           .level = EM_LEVEL_DEGRADED,
                           .prev_level = EM_LEVEL_NOMINAL};
  assert_int_equal(em_store_add(s, "dev-1", NULL, &m, T0_NS), 0);
  em_store_stats_t st;
  em_store_stats(s, &st);
  assert_int_equal(st.duplicates, 1);
  assert_int_equal(em_store_close(s), 0);
  Q_WANTS(f->path, {"PRAGMA user_version", 11}, {"SELECT count(*) FROM level_changes", 2},
          {"SELECT count(*) FROM level_changes WHERE reason = 'first'", 1},
          {"SELECT integrity_check = 'ok' FROM pragma_integrity_check", 1});
}

/* A row that fails for a reason that may pass (another connection holds the write lock past
 * the busy timeout) says -EAGAIN, so the aggregator does not acknowledge its message; once the
 * lock is gone the same message is stored. */
static void store_row_failing_for_a_passing_reason_says_eagain(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  em_store_t *s = open_ok(f, &o, NULL);
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
  assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
  em_sample_t smp[] = {{.alias = 0, .value = {.type = EM_VALUE_UINT, .as.u = 13}}};
  em_msg_t d = data_msg(1, T0_NS, smp, 1);
  assert_int_equal(em_store_add(s, "dev-1", NULL, &d, T0_NS), -EAGAIN);
  assert_int_equal(em_store_flush(s), -EIO); /* Its meta row waits for the lock too. */
  assert_int_equal(sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  assert_int_equal(em_store_add(s, "dev-1", NULL, &d, T0_NS), 0);
  assert_int_equal(em_store_close(s), 0);
  Q_WANTS(f->path, {"SELECT count(*) FROM data", 1});
}

static void store_open_refuses_what_is_not_a_store(void **state) {
  fixture_t *f = *state;
  static const struct {
    bad_kind_t kind;
    const char *says; /* Part of the message besides the path. */
  } rows[] = {
      {BAD_FOREIGN, "not an edgemon database"},
      {BAD_GARBAGE, "not a database"},
      {BAD_PARENT_IS_FILE, "cannot open"},
      {BAD_READONLY_DIR, "cannot open"},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    if (rows[i].kind == BAD_READONLY_DIR && geteuid() == 0) {
      continue; /* root writes into read-only directories. */
    }
    char path[400];
    make_bad(f, rows[i].kind, path, sizeof(path));
    em_store_opts_t o = opts_for(f);
    o.path = path;
    em_store_t *s = (em_store_t *)&o; /* Must be reset to NULL. */
    em_store_report_t rep;
    char err[512] = "";
    assert_int_equal(em_store_open(&s, &o, &rep, err, sizeof(err)), -EIO);
    assert_null(s);
    if (!strstr(err, path) || !strstr(err, rows[i].says)) {
      fail_msg("row %zu: message \"%s\" lacks the path or \"%s\"", i, err, rows[i].says);
    }
    if (rows[i].kind == BAD_FOREIGN) {
      /* Untouched: still only its own table, not in WAL mode. */
      assert_int_equal(q_int(path, "SELECT count(*) FROM sqlite_schema"), 1);
      assert_int_equal(q_int(path, "PRAGMA application_id"), 0);
    }
    char other[400];
    snprintf(other, sizeof(other), "%s/other.db", f->dir);
    rm_store_files(other);
  }
}

static void store_open_rejects_bad_options(void **state) {
  fixture_t *f = *state;
  em_store_t *s = NULL;
  char err[128];
  em_store_opts_t o = opts_for(f);
  o.batch_rows = 0;
  assert_int_equal(em_store_open(&s, &o, NULL, err, sizeof(err)), -EINVAL);
  o = opts_for(f);
  o.downsample_after_s = 10;
  assert_int_equal(em_store_open(&s, &o, NULL, err, sizeof(err)), -EINVAL);
  assert_int_equal(em_store_open(&s, NULL, NULL, err, sizeof(err)), -EINVAL);
  assert_int_equal(em_store_add(NULL, "d", NULL, NULL, 0), -EINVAL);
}

/* --- model identities (schema version 7) ------------------------------------------------- */

static const em_label_t model_labels[] = {{"input", "224x224"}, {"variant", "full"}};

/* Each identity is one models row (labels as canonical JSON), each data and window row names
 * the model its message carried, devices.model follows the birth, live data and a change of
 * model (a state marked model_change), which writes no level_changes row, unlike the level a
 * device announces at agent start (level == prev_level too, unmarked); a replayed message
 * leaves the current model alone. */
static void store_models_are_rows_and_follow_the_device(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  em_store_t *s = open_ok(f, &o, NULL);
  em_model_t a = {"mobilenet", "1.4", model_labels, 2};
  em_model_t b = {"mobilenet", "1.5", model_labels, 2};
  em_model_t c = {"mobilenet", "1.5", model_labels, 1};
  em_msg_t birth = birth_msg(7);
  birth.u.birth.model = a;
  assert_int_equal(em_dict_set_birth(f->dev, &birth.u.birth), 0);
  assert_int_equal(em_store_add(s, "dev-1", f->dev, &birth, T0_NS), 0);
  for (int i = 0; i < 3; i++) {
    em_msg_t m = data_msg(7, T0_NS + (uint64_t)i * 100000000u, NULL, 0);
    m.u.data.model = i < 2 ? a : b;
    assert_int_equal(em_store_add(s, "dev-1", f->dev, &m, T0_NS), 0);
  }
  em_msg_t other = data_msg(1, T0_NS, NULL, 0);
  other.u.data.model = a;
  assert_int_equal(em_store_add(s, "dev-2", NULL, &other, T0_NS), 0);
  assert_int_equal(em_store_flush(s), 0);
  Q_WANTS(f->path, {"SELECT m.version = '1.5' FROM devices d JOIN models m ON m.id = d.model WHERE "
                    "d.name = 'dev-1'",
                    1});
  em_msg_t change = {.kind = EM_MSG_STATE};
  change.u.state = (em_state_t){.head = {.time_ns = T0_NS + 1000000000u, .session = 7},
                                .level = EM_LEVEL_WARN,
                                .prev_level = EM_LEVEL_WARN,
                                .reason = "model: light",
                                .model = c,
                                .model_change = true};
  assert_int_equal(em_store_add(s, "dev-1", f->dev, &change, T0_NS), 0);
  em_msg_t start = {.kind = EM_MSG_STATE};
  start.u.state = (em_state_t){.head = {.time_ns = T0_NS, .session = 1},
                               .level = EM_LEVEL_NOMINAL,
                               .prev_level = EM_LEVEL_NOMINAL,
                               .reason = "level at agent start",
                               .model = a};
  assert_int_equal(em_store_add(s, "dev-2", NULL, &start, T0_NS), 0);
  em_msg_t replay = data_msg(7, T0_NS + 2000000000u, NULL, 0);
  replay.u.data.historical = true;
  replay.u.data.model = a;
  assert_int_equal(em_store_add(s, "dev-1", f->dev, &replay, T0_NS), 0);
  assert_int_equal(em_store_close(s), 0);

  Q_WANTS(
      f->path, {"SELECT count(*) FROM models", 3},
      {"SELECT count(*) FROM models WHERE name = 'mobilenet' AND version = '1.4' AND labels = "
       "'{\"input\":\"224x224\",\"variant\":\"full\"}'",
       1},
      {"SELECT count(*) FROM models WHERE labels = '{\"input\":\"224x224\"}'", 1},
      /* dev-1: two windows of 1.4 and the replayed one, one of 1.5; dev-2 one of 1.4. */
      {"SELECT count(*) FROM data d JOIN models m ON m.id = d.model WHERE m.version = '1.4'", 4},
      {"SELECT count(*) FROM stage_windows w JOIN models m ON m.id = w.model WHERE m.version = "
       "'1.5'",
       1},
      {"SELECT count(*) FROM data WHERE level = 1", 5},
      /* The change of model, not the replay, is the current model; no level change was stored. */
      {"SELECT m.labels = '{\"input\":\"224x224\"}' FROM devices d JOIN models m ON m.id = d.model "
       "WHERE d.name = 'dev-1'",
       1},
      {"SELECT count(*) FROM level_changes l JOIN devices d ON d.id = l.device WHERE d.name = "
       "'dev-1'",
       0},
      {"SELECT reason IS NULL FROM devices WHERE name = 'dev-1'", 1},
      {"SELECT count(*) FROM level_changes l JOIN devices d ON d.id = l.device WHERE d.name = "
       "'dev-2' AND l.level = 0 AND l.prev_level = 0",
       1});
}

/* A version 6 store (no models) migrates at open: its rows stay with NULL models and levels,
 * the columns and the models table are added, and new rows carry their model. */
static void store_open_migrates_version_6(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  make_store_then(f, "DROP TABLE models;ALTER TABLE devices DROP COLUMN model;"
                     "ALTER TABLE data DROP COLUMN level;ALTER TABLE data DROP COLUMN model;"
                     "ALTER TABLE stage_windows DROP COLUMN model;"
                     "INSERT INTO devices(id, name) VALUES(1, 'dev-1');"
                     "INSERT INTO data(device, time_ns, vals, session, seq) "
                     "VALUES(1, 5, '{}', 1, 1);"
                     "PRAGMA user_version=6");
  em_store_t *s = open_ok(f, &o, NULL);
  em_msg_t m = data_msg(7, T0_NS, NULL, 0);
  m.u.data.model = (em_model_t){"mobilenet", "1.4", model_labels, 2};
  assert_int_equal(em_store_add(s, "dev-1", NULL, &m, T0_NS), 0);
  assert_int_equal(em_store_close(s), 0);
  Q_WANTS(f->path, {"PRAGMA user_version", 11},
          {"SELECT count(*) FROM data WHERE model IS NULL AND level IS NULL AND time_ns = 5", 1},
          {"SELECT count(*) FROM data d JOIN models m ON m.id = d.model WHERE m.version = '1.4' "
           "AND d.level = 1",
           1},
          {"SELECT count(*) FROM stage_windows WHERE model IS NOT NULL", 1},
          {"SELECT m.name = 'mobilenet' FROM devices d JOIN models m ON m.id = d.model", 1},
          {"SELECT integrity_check = 'ok' FROM pragma_integrity_check", 1});
}
/* A data message of device `dev` at time_ns naming the model (name, version), no labels. */
static void add_model_data(em_store_t *s, const char *dev, uint64_t time_ns, const char *name,
                           const char *version) {
  em_msg_t m = data_msg(1, time_ns, NULL, 0);
  m.u.data.model = (em_model_t){name, version, NULL, 0};
  assert_int_equal(em_store_add(s, dev, NULL, &m, time_ns), 0);
}

/* n data messages of `dev`, the i-th at t0_ns + i * step_ns naming model "net" version
 * PREFIX<i>: a new identity each. */
static void add_model_versions(em_store_t *s, const char *dev, const char *prefix, int n,
                               uint64_t t0_ns, uint64_t step_ns) {
  for (int i = 0; i < n; i++) {
    char version[16];
    snprintf(version, sizeof(version), "%s%d", prefix, i);
    add_model_data(s, dev, t0_ns + (uint64_t)i * step_ns, "net", version);
  }
}

/* Rows of data or stage_windows naming a model id that has no models row. */
static int64_t dangling_models(const char *path) {
  return q_int(path, "SELECT (SELECT count(*) FROM data WHERE model IS NOT NULL AND model NOT IN "
                     "(SELECT id FROM models)) + (SELECT count(*) FROM stage_windows WHERE "
                     "model IS NOT NULL AND model NOT IN (SELECT id FROM models))");
}

/* A device naming a new version in every message grows `models` by a row each; retention
 * deletes the rows of the old messages and then the models rows nothing names any more: the
 * table shrinks to the identities of the rows kept and of the devices' current models. The id
 * cache forgets the deleted ids: an identity named again gets a row of its own, and its rows
 * name it (a cached stale id would name a row that is gone). */
static void store_retention_deletes_models_no_row_names(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  o.retention_s = 3600;
  o.models_per_device_max = 5000;
  em_store_t *s = open_ok(f, &o, NULL);
  enum { N = 1000 };
  add_model_versions(s, "hostile", "v", N, T0_NS, 1000000u);
  uint64_t now = T0_NS + 10000 * S_NS;
  em_msg_t birth = birth_msg(1);
  birth.u.birth.head.time_ns = T0_NS; /* As old as the rest: its model is current all the same. */
  birth.u.birth.model = (em_model_t){"current", "1", NULL, 0};
  assert_int_equal(em_store_add(s, "dev-1", NULL, &birth, T0_NS), 0);
  add_model_data(s, "dev-2", now - 60 * S_NS, "recent", "2");
  assert_int_equal(em_store_flush(s), 0);
  Q_WANTS(
      f->path, {"SELECT count(*) FROM models", N + 2},
      /* Rows name their model no later than its last_ns (models.h). */
      {"SELECT count(*) FROM data d JOIN models m ON m.id = d.model WHERE d.time_ns > m.last_ns",
       0});

  assert_int_equal(em_store_retain(s, now), 0);
  em_store_stats_t st;
  em_store_stats(s, &st);
  assert_int_equal(st.models_deleted, N - 1);
  assert_int_equal(st.errors, 0);
  /* Left: the hostile device's current model (its last), dev-1's and dev-2's. */
  Q_WANTS(
      f->path, {"SELECT count(*) FROM models", 3},
      {"SELECT count(*) FROM models WHERE name IN ('current', 'recent') OR version = 'v999'", 3});
  assert_int_equal(dangling_models(f->path), 0);

  /* Named again: a new row, cached again (a second message costs no new row). */
  add_model_data(s, "hostile", now, "net", "v5");
  add_model_data(s, "hostile", now + 1, "net", "v5");
  assert_int_equal(em_store_flush(s), 0);
  Q_WANTS(f->path, {"SELECT count(*) FROM models", 4},
          {"SELECT count(*) FROM data d JOIN models m ON m.id = d.model WHERE m.name = 'net' AND "
           "m.version = 'v5'",
           2},
          {"SELECT count(*) FROM stage_windows w JOIN models m ON m.id = w.model WHERE m.version = "
           "'v5'",
           2});
  assert_int_equal(dangling_models(f->path), 0);
  /* The next pass keeps what is named: rows within the retention, devices' current models
   * (v999 is no longer the hostile device's). */
  assert_int_equal(em_store_retain(s, now + 1), 0);
  Q_WANTS(f->path, {"SELECT count(*) FROM models", 3},
          {"SELECT count(*) FROM models WHERE version = 'v999'", 0});
  assert_int_equal(em_store_close(s), 0);
}

/* Without retention no row goes by age, but the identities only births and changes of model
 * named (devices.model, which keeps one per device) go once the device names another; those
 * rows name data were written with stay. */
static void store_models_only_devices_named_go_without_retention(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  em_store_t *s = open_ok(f, &o, NULL);
  for (int i = 0; i < 50; i++) {
    char version[16];
    snprintf(version, sizeof(version), "b%d", i);
    em_msg_t birth = birth_msg((uint32_t)i + 1);
    birth.u.birth.model = (em_model_t){"net", version, NULL, 0};
    assert_int_equal(em_store_add(s, "dev-1", NULL, &birth, T0_NS), 0);
  }
  add_model_data(s, "dev-2", T0_NS, "net", "data");
  add_model_data(s, "dev-2", T0_NS + 1, "net", "now"); /* dev-2's current model. */
  assert_int_equal(em_store_retain(s, T0_NS + 86400 * S_NS), 0);
  Q_WANTS(f->path, {"SELECT count(*) FROM models", 3},
          {"SELECT count(*) FROM models WHERE version IN ('b49', 'data', 'now')", 3});
  assert_int_equal(dangling_models(f->path), 0);
  assert_int_equal(em_store_close(s), 0);
}

/* Between sweeps the table is bounded: a device may be first to name models_per_device_max
 * identities, all devices models_max. An identity past a bound is stored as no model and
 * counted; one with a row already is found whoever names it; rows the sweep frees make room. */
static void store_models_bounds_refuse_new_identities(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  o.retention_s = 3600;
  o.models_max = 6;
  o.models_per_device_max = 4;
  em_store_t *s = open_ok(f, &o, NULL);
  add_model_versions(s, "dev-a", "a", 6, T0_NS, 1);
  add_model_versions(s, "dev-b", "b", 3, T0_NS, 1);
  add_model_data(s, "dev-b", T0_NS + 9, "net", "a0"); /* Found: no new row. */
  assert_int_equal(em_store_flush(s), 0);
  em_store_stats_t st;
  em_store_stats(s, &st);
  assert_int_equal(st.models_refused, 3); /* a4, a5 (dev-a's bound), b2 (the table's). */
  assert_int_equal(st.errors, 0);
  Q_WANTS(
      f->path, {"SELECT count(*) FROM models", 6}, {"SELECT count(*) FROM data", 10},
      {"SELECT count(*) FROM data WHERE model IS NULL", 3},
      {"SELECT count(*) FROM data d JOIN models m ON m.id = d.model WHERE m.version = 'a0'", 2});

  /* Retention takes the old rows, the sweep their models but the devices' current ones: dev-b's
   * a0 (dev-a's last message named a refused one, so it has none). */
  uint64_t now = T0_NS + 7200 * S_NS;
  assert_int_equal(em_store_retain(s, now), 0);
  Q_WANTS(f->path, {"SELECT count(*) FROM models", 1}, {"SELECT version = 'a0' FROM models", 1});
  add_model_data(s, "dev-a", now, "net", "a5");
  assert_int_equal(em_store_flush(s), 0);
  em_store_stats(s, &st);
  assert_int_equal(st.models_refused, 3);
  Q_WANTS(
      f->path,
      {"SELECT count(*) FROM data d JOIN models m ON m.id = d.model WHERE m.version = 'a5'", 1});
  assert_int_equal(em_store_close(s), 0);
}

/* A batch whose models.last_ns write fails (a trigger injects it) is not committed: its rows
 * would name a model that the sweep could delete. Nothing of it is kept; the same message
 * once the failure is gone is. */
static void store_batch_whose_model_last_ns_fails_does_not_commit(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  em_store_t *s = open_ok(f, &o, NULL);
  q_exec(f->path, "CREATE TRIGGER inject BEFORE UPDATE OF last_ns ON models "
                  "BEGIN SELECT RAISE(ABORT, 'injected'); END");
  add_model_data(s, "dev-1", T0_NS, "net", "1");
  assert_int_equal(em_store_flush(s), -EIO);
  Q_WANTS(f->path, {"SELECT count(*) FROM data", 0}, {"SELECT count(*) FROM models", 0});
  em_store_stats_t st;
  em_store_stats(s, &st);
  assert_int_equal(st.failures[0].count, 1);
  assert_string_equal(st.failures[0].table, "models");

  q_exec(f->path, "DROP TRIGGER inject");
  add_model_data(s, "dev-1", T0_NS, "net", "1");
  assert_int_equal(em_store_flush(s), 0);
  Q_WANTS(
      f->path,
      {"SELECT count(*) FROM data d JOIN models m ON m.id = d.model WHERE m.last_ns = d.time_ns",
       1});
  assert_int_equal(em_store_close(s), 0);
}

/* A version 8 store (models without last_ns and device) migrates at open: its models rows get
 * the newest time of any data or window row as last_ns, later than their own, so none goes
 * before retention has passed that time; then the ones nothing names go. */
static void store_open_migrates_version_8(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  o.retention_s = 3600;
  char sql[1024];
  snprintf(sql, sizeof(sql),
           "DROP INDEX models_device;ALTER TABLE models DROP COLUMN last_ns;"
           "ALTER TABLE models DROP COLUMN device;"
           "INSERT INTO devices(id, name) VALUES(1, 'dev-1');"
           "INSERT INTO models(id, name, version, labels) VALUES(1, 'net', '1', '{}'),"
           " (2, 'net', '2', '{}');"
           "INSERT INTO data(device, time_ns, vals, session, seq, model) "
           "VALUES(1, %llu, '{}', 1, 1, 1), (1, %llu, '{}', 1, 2, NULL);"
           "PRAGMA user_version=8",
           (unsigned long long)T0_NS, (unsigned long long)(T0_NS + 100 * S_NS));
  make_store_then(f, sql);
  em_store_t *s = open_ok(f, &o, NULL);
  Q_WANTS(
      f->path, {"PRAGMA user_version", 11},
      {"SELECT count(*) FROM models WHERE last_ns = 1700000100000000000 AND device IS NULL", 2},
      {"SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = 'models_device'", 1});
  assert_int_equal(em_store_retain(s, T0_NS + 3650 * S_NS), 0);
  Q_WANTS(f->path, {"SELECT count(*) FROM data", 1}, {"SELECT count(*) FROM models", 2});
  assert_int_equal(em_store_retain(s, T0_NS + 3750 * S_NS), 0);
  Q_WANTS(f->path, {"SELECT count(*) FROM models", 0});
  assert_int_equal(em_store_close(s), 0);
  Q_WANTS(f->path, {"SELECT integrity_check = 'ok' FROM pragma_integrity_check", 1});
}

/* A state message of dev-1 at T0_NS + i s: NOMINAL -> DEGRADED with verdict v (NULL: none). */
static em_msg_t verdict_state(int i, const em_proto_verdict_t *v) {
  em_msg_t m = {.kind = EM_MSG_STATE};
  m.u.state = (em_state_t){.head = {.time_ns = T0_NS + (uint64_t)i * S_NS, .session = 7},
                           .level = EM_LEVEL_DEGRADED,
                           .prev_level = EM_LEVEL_NOMINAL,
                           .rule = "infer.p99",
                           .stage = "infer",
                           .verdict = v};
  return m;
}

/* A level change keeps its verdict as the JSON object proto prints (the vector's: every member
 * read back through SQLite's JSON functions); a change without one keeps NULL; a verdict larger
 * than the stack buffer (8 causes of 16 figures with 63-byte names, ~10 KB) is kept whole. */
static void store_level_change_keeps_its_verdict_as_json(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  em_store_t *s = open_ok(f, &o, NULL);
  em_msg_t with = verdict_state(1, &em_vector_verdict);
  em_msg_t without = verdict_state(2, NULL);
  static em_proto_verdict_t big = {
      .stage = "infer", .statistic = "max", .baseline_ns = 1, .breach_ns = 2, .n_causes = 8};
  static char names[EM_PROTO_VERDICT_MAX_EVIDENCE][64];
  for (size_t e = 0; e < EM_PROTO_VERDICT_MAX_EVIDENCE; e++) {
    snprintf(names[e], sizeof(names[e]), "%02zu%061d", e, 0);
  }
  for (size_t c = 0; c < big.n_causes; c++) {
    big.causes[c].code = (uint32_t)c;
    big.causes[c].share = 0.125;
    big.causes[c].n_evidence = EM_PROTO_VERDICT_MAX_EVIDENCE;
    for (size_t e = 0; e < EM_PROTO_VERDICT_MAX_EVIDENCE; e++) {
      big.causes[c].evidence[e] =
          (em_proto_evidence_t){names[e], {.type = EM_VALUE_UINT, .as.u = c * 100 + e}};
    }
  }
  em_msg_t large = verdict_state(3, &big);
  assert_int_equal(em_store_add(s, "dev-1", f->dev, &with, T0_NS), 0);
  assert_int_equal(em_store_add(s, "dev-1", f->dev, &without, T0_NS), 0);
  assert_int_equal(em_store_add(s, "dev-1", f->dev, &large, T0_NS), 0);
  assert_int_equal(em_store_close(s), 0);
  Q_WANTS(f->path, {"SELECT count(*) FROM level_changes", 3},
          {"SELECT verdict IS NULL FROM level_changes WHERE time_ns = 1700000002000000000", 1},
          {"SELECT json_valid(verdict) FROM level_changes WHERE time_ns = 1700000001000000000", 1},
          {"SELECT json_extract(verdict, '$.stage') = 'infer' AND json_extract(verdict, "
           "'$.statistic') = 'p99' AND json_extract(verdict, '$.baseline_ns') = 26000000 AND "
           "json_extract(verdict, '$.breach_ns') = 61200000 AND json_extract(verdict, "
           "'$.nominal_windows') = 12 AND json_array_length(verdict, '$.causes') = 4 FROM "
           "level_changes WHERE time_ns = 1700000001000000000",
           1},
          {"SELECT json_extract(verdict, '$.causes[0].cause') = 'cpu_contention' AND "
           "json_extract(verdict, '$.causes[0].share') = 0.81 AND json_extract(verdict, "
           "'$.causes[0].evidence.runq_delay_ms_per_frame') = 28.4 AND json_extract(verdict, "
           "'$.causes[0].processes[0].comm') = 'stress-ng' AND json_extract(verdict, "
           "'$.causes[2].functions[0].name') = 'sgemm_' AND json_extract(verdict, "
           "'$.causes[3].cause') = 'memory_pressure' FROM level_changes WHERE time_ns = "
           "1700000001000000000",
           1},
          {"SELECT length(verdict) > 8192 AND json_array_length(verdict, '$.causes') = 8 AND "
           "json_extract(verdict, '$.causes[7].cause') = 'unexplained' FROM level_changes WHERE "
           "time_ns = 1700000003000000000",
           1},
          {"SELECT j.value FROM level_changes, json_each(verdict, '$.causes[7].evidence') j "
           "WHERE time_ns = 1700000003000000000 AND length(j.key) = 63 AND j.key LIKE '15%'",
           715});
}

/* A version 10 store (level changes and flights without a verdict) migrates at open: the
 * columns are added, the old rows keep NULL there, and new changes carry their verdict. */
static void store_open_migrates_version_10(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = opts_for(f);
  make_store_then(f, "ALTER TABLE level_changes DROP COLUMN verdict;"
                     "ALTER TABLE flights DROP COLUMN top_cause;"
                     "ALTER TABLE flights DROP COLUMN top_share;"
                     "INSERT INTO devices(id, name) VALUES(1, 'dev-1');"
                     "INSERT INTO level_changes(device, time_ns, session, level, prev_level) "
                     "VALUES(1, 5, 1, 2, 0);"
                     "PRAGMA user_version=10");
  Q_WANTS(f->path,
          {"SELECT count(*) FROM pragma_table_info('level_changes') WHERE name = 'verdict'", 0});
  em_store_t *s = open_ok(f, &o, NULL);
  em_msg_t m = verdict_state(1, &em_vector_verdict);
  assert_int_equal(em_store_add(s, "dev-1", f->dev, &m, T0_NS), 0);
  assert_int_equal(em_store_close(s), 0);
  Q_WANTS(
      f->path, {"PRAGMA user_version", 11},
      {"SELECT type = 'TEXT' FROM pragma_table_info('level_changes') WHERE name = 'verdict'", 1},
      {"SELECT count(*) FROM pragma_table_info('flights') WHERE name IN ('top_cause', "
       "'top_share')",
       2},
      {"SELECT verdict IS NULL FROM level_changes WHERE time_ns = 5", 1},
      {"SELECT json_extract(verdict, '$.causes[0].cause') = 'cpu_contention' FROM "
       "level_changes WHERE time_ns = 1700000001000000000",
       1},
      {"SELECT integrity_check = 'ok' FROM pragma_integrity_check", 1});
}

int main(void) {
  struct CMUnitTest tests[] = {
      cmocka_unit_test(store_create_makes_tables_and_application_id),
      cmocka_unit_test(store_rows_carry_names_and_values),
      cmocka_unit_test(store_data_without_birth_uses_alias_names),
      cmocka_unit_test(store_tick_commits_when_batch_rows_pending),
      cmocka_unit_test(store_tick_commits_when_batch_ms_passed),
      cmocka_unit_test(store_abandoned_store_reopens_unclean),
      cmocka_unit_test(store_clean_close_reopens_clean),
      cmocka_unit_test(store_retention_deletes_old_rows),
      cmocka_unit_test(store_downsampling_averages_one_row_per_step),
      cmocka_unit_test(store_failed_row_is_dropped_and_counted),
      cmocka_unit_test(store_downsampling_survives_values_whose_sum_passes_int64),
      cmocka_unit_test(store_failure_is_counted_by_table_and_reason_with_its_text),
      cmocka_unit_test(store_wal_is_checkpointed_and_stays_bounded),
      cmocka_unit_test(store_deferred_level_keeps_message_order),
      cmocka_unit_test(store_open_refuses_older_schema),
      cmocka_unit_test(store_historical_messages_do_not_set_the_current_level),
      cmocka_unit_test(store_open_refuses_what_is_not_a_store),
      cmocka_unit_test(store_repeated_data_message_is_stored_once_and_counted),
      cmocka_unit_test(store_open_migrates_version_2),
      cmocka_unit_test(store_repeated_state_message_is_stored_once_and_counted),
      cmocka_unit_test(store_open_migrates_version_3),
      cmocka_unit_test(store_open_migrates_version_6),
      cmocka_unit_test(store_models_are_rows_and_follow_the_device),
      cmocka_unit_test(store_retention_deletes_models_no_row_names),
      cmocka_unit_test(store_models_only_devices_named_go_without_retention),
      cmocka_unit_test(store_models_bounds_refuse_new_identities),
      cmocka_unit_test(store_open_migrates_version_8),
      cmocka_unit_test(store_level_change_keeps_its_verdict_as_json),
      cmocka_unit_test(store_open_migrates_version_10),
      cmocka_unit_test(store_batch_whose_model_last_ns_fails_does_not_commit),
      cmocka_unit_test(store_row_failing_for_a_passing_reason_says_eagain),
      cmocka_unit_test(store_open_rejects_bad_options),
  };
  for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
    tests[i].setup_func = setup; /* Every test gets a fresh directory and dictionary. */
    tests[i].teardown_func = teardown;
  }
  return cmocka_run_group_tests(tests, NULL, NULL);
}
