/*
 * test_agg_rollup.c - the store's minute and hour rollups (host/aggregator/store/rollup.c through
 * store.c) on a real SQLite file: every rollup row's count, sum, min and max equals its raw
 * windows', its merged histogram gives the percentiles of merging the raw windows, its metric
 * means, maxima and sample counts equal the raw samples'; a replayed (historical) row updates
 * its rolled minute and hour; a version 4 store migrates and is rolled up over several passes;
 * retention deletes old rollups; a process killed with SIGKILL in the middle of rolling loses
 * no rollup once a later run goes on.
 *
 * Expectations are computed with SQL over the raw tables, through a second connection.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "buckets.h"
#include "store.h"
#include "store_query.h"

#include <errno.h>
#include <histo.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define T0_NS  1699999200000000000ull /* A CLOCK_REALTIME in 2023, a whole hour. */
#define S_NS   1000000000ull
#define MIN_NS (60 * S_NS)
#define H_NS   (3600 * S_NS)

/* Each test's store (store_query.h's fixture). */
typedef store_fixture_t fixture_t;

/* The seq of the last data message add_data wrote in this test; setup sets it back to 0. */
static uint32_t last_seq;

static int setup(void **state) {
  last_seq = 0;
  return store_fixture_setup(state);
}

static em_store_t *open_opts(const fixture_t *f, em_store_opts_t *o) {
  em_store_t *s = NULL;
  char err[512];
  o->path = f->path;
  o->batch_ms = 1000;
  o->batch_rows = 1000;
  if (em_store_open(&s, o, NULL, err, sizeof(err)) != 0) {
    fail_msg("em_store_open: %s", err);
  }
  return s;
}

static em_store_t *open_store_with(const fixture_t *f, uint64_t retention_s,
                                   uint64_t downsample_after_s) {
  em_store_opts_t o = {.path = f->path,
                       .batch_ms = 1000,
                       .batch_rows = 1000,
                       .retention_s = retention_s,
                       .downsample_after_s = downsample_after_s,
                       .downsample_step_s = 60,
                       .rollup_manual = true};
  em_store_t *s = NULL;
  char err[512];
  if (em_store_open(&s, &o, NULL, err, sizeof(err)) != 0) {
    fail_msg("em_store_open: %s", err);
  }
  return s;
}

static em_store_t *open_store(const fixture_t *f, uint64_t retention_s) {
  return open_store_with(f, retention_s, 0);
}

/* --- rows -------------------------------------------------------------------------------- */

/* Adds one data message of device dev at t: two stages whose buckets, scale and zero count
 * vary with k, and metrics 0..2 (metric 2 only every third message: absent is not zero). */
static void add_data(em_store_t *s, const char *dev, uint64_t t, uint32_t k, bool historical) {
  em_bucket_t infer[2] = {{.index = 10 + (int32_t)(k % 7), .count = 1 + k % 3},
                          {.index = 30 + (int32_t)(k % 5), .count = 2}};
  em_bucket_t pre[2] = {{.index = -4 + (int32_t)(k % 3), .count = 1},
                        {.index = 40 + (int32_t)(k % 11), .count = 1 + k % 4}};
  em_stage_t stages[2] = {
      {.name = "infer",
       .count = infer[0].count + infer[1].count + k % 2,
       .sum_ns = 1000 + k,
       .min_ns = k % 2 ? 0 : 3 + k % 50,
       .max_ns = 9000 + k % 100,
       .scale = 3,
       .zero_count = k % 2,
       .buckets = infer,
       .n_buckets = 2},
      {.name = "pre",
       .count = pre[0].count + pre[1].count,
       .sum_ns = 5000 + 3 * k,
       .min_ns = 1,
       .max_ns = 70000 + k % 1000,
       .scale = k % 4 == 0 ? 1 : 2, /* Windows of two scales: merged at the coarser. */
       .buckets = pre,
       .n_buckets = 2},
  };
  em_sample_t smp[3] = {
      {.alias = 0, .value = {.type = EM_VALUE_UINT, .as.u = 1000 + (k * 37) % 101}},
      {.alias = 1, .value = {.type = EM_VALUE_FLOAT, .as.f = 0.25 * (double)(k % 13) - 1.0}},
      {.alias = 2, .value = {.type = EM_VALUE_INT, .as.i = -(int64_t)(k % 9)}},
  };
  em_msg_t m = {.kind = EM_MSG_DATA};
  m.u.data = (em_data_t){.head = {.time_ns = t, .session = 1},
                         .seq = ++last_seq,
                         .window_ns = S_NS,
                         .level = EM_LEVEL_NOMINAL,
                         .historical = historical,
                         .samples = smp,
                         .n_samples = k % 3 == 0 ? 3 : 2,
                         .stages = stages,
                         .n_stages = 2};
  assert_int_equal(em_store_add(s, dev, NULL, &m, t), 0);
  assert_int_equal(em_store_tick(s, 0), 0);
}

/* Two devices, one message every `every` s from `from` for `seconds`. */
static void add_span(em_store_t *s, uint64_t from, uint64_t seconds, uint64_t every) {
  static const char *const devs[] = {"dev-a", "dev-b"};
  uint32_t k = 0;
  for (uint64_t t = 0; t < seconds; t += every) {
    for (int d = 0; d < 2; d++) {
      add_data(s, devs[d], from + t * S_NS + (uint64_t)d * 123456789u, k++, false);
    }
  }
  assert_int_equal(em_store_flush(s), 0);
}

/* Runs rollup passes at now until none is left to do; returns the passes. */
static int roll_all(em_store_t *s, uint64_t now) {
  em_rollup_report_t rep;
  int passes = 0;
  do {
    assert_int_equal(em_store_rollup(s, now, &rep), 0);
    assert_int_equal(rep.bad_rows, 0);
    passes++;
    assert_true(passes < 1000);
  } while (rep.more);
  return passes;
}

/* --- checks ------------------------------------------------------------------------------ */

/* Rollup rows of step step_s that disagree with their raw rows, or raw groups without one. */
static void assert_stages_exact(const char *path, int step_s) {
  char sql[1600];
  snprintf(sql, sizeof(sql),
           "SELECT count(*) FROM (SELECT device, stage, time_ns / %d000000000 * %d000000000 AS t,"
           " sum(count) AS c, sum(sum_ns) AS s, min(min_ns) AS lo, max(max_ns) AS hi,"
           " sum(zero_count) AS z FROM stage_windows GROUP BY 1, 2, 3) w"
           " LEFT JOIN stage_rollups r ON r.step_s = %d AND r.device = w.device"
           " AND r.stage = w.stage AND r.time_ns = w.t"
           " WHERE r.count IS NOT w.c OR r.sum_ns IS NOT w.s OR r.min_ns IS NOT w.lo"
           " OR r.max_ns IS NOT w.hi OR r.zero_count IS NOT w.z",
           step_s, step_s, step_s);
  assert_int_equal(q_int(path, sql), 0);
  snprintf(sql, sizeof(sql),
           "SELECT (SELECT count(*) FROM stage_rollups WHERE step_s = %d) - (SELECT count(*) FROM"
           " (SELECT DISTINCT device, stage, time_ns / %d000000000 FROM stage_windows))",
           step_s, step_s);
  assert_int_equal(q_int(path, sql), 0);
}

static void assert_data_exact(const char *path, int step_s) {
  char sql[2000];
  snprintf(sql, sizeof(sql),
           "SELECT count(*) FROM (SELECT device, time_ns / %d000000000 * %d000000000 AS t, metric,"
           " total(value * n) / sum(n) AS m, max(value) AS x, sum(n) AS c FROM samples"
           " GROUP BY 1, 2, 3) v LEFT JOIN data_rollups r ON r.step_s = %d"
           " AND r.device = v.device AND r.time_ns = v.t"
           " WHERE r.n IS NULL OR abs(json_extract(r.mean, '$.\"' || v.metric || '\"') - v.m)"
           " > 1e-9 * (1 + abs(v.m))"
           " OR json_extract(r.max, '$.\"' || v.metric || '\"') IS NOT v.x"
           " OR json_extract(r.counts, '$.\"' || v.metric || '\"') IS NOT v.c",
           step_s, step_s, step_s);
  assert_int_equal(q_int(path, sql), 0);
  /* Both ways, as a FULL JOIN would (SQLite 3.39; the arm64 tests run on Debian 11's 3.34):
   * every bucket of data has its rollup with its count, and every rollup its bucket. */
  snprintf(sql, sizeof(sql),
           "SELECT count(*) FROM (SELECT device, time_ns / %d000000000 * %d000000000 AS t,"
           " sum(n) AS n FROM data GROUP BY 1, 2) d LEFT JOIN (SELECT * FROM data_rollups"
           " WHERE step_s = %d) r ON r.device = d.device AND r.time_ns = d.t"
           " WHERE r.n IS NOT d.n",
           step_s, step_s, step_s);
  assert_int_equal(q_int(path, sql), 0);
  snprintf(sql, sizeof(sql),
           "SELECT count(*) FROM data_rollups r WHERE step_s = %d AND NOT EXISTS (SELECT 1"
           " FROM data d WHERE d.device = r.device AND d.time_ns / %d000000000 * %d000000000"
           " = r.time_ns)",
           step_s, step_s, step_s);
  assert_int_equal(q_int(path, sql), 0);
}

/* Merges the stage rows a query returns (stage, count, sum_ns, min_ns, max_ns, scale,
 * zero_count, buckets) into h. Returns the rows. */
static int merge_rows(sqlite3 *db, const char *sql, em_histo_t *h) {
  static em_bucket_t storage[EM_PROTO_MAX_BUCKETS];
  sqlite3_stmt *st = NULL;
  assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
  int n = 0;
  while (sqlite3_step(st) == SQLITE_ROW) {
    em_buckets_figures_t fig = {.count = (uint64_t)sqlite3_column_int64(st, 1),
                                .sum_ns = (uint64_t)sqlite3_column_int64(st, 2),
                                .min_ns = (uint64_t)sqlite3_column_int64(st, 3),
                                .max_ns = (uint64_t)sqlite3_column_int64(st, 4),
                                .scale = sqlite3_column_int(st, 5),
                                .zero_count = (uint64_t)sqlite3_column_int64(st, 6)};
    em_stage_t w;
    assert_int_equal(em_buckets_decode(sqlite3_column_blob(st, 7),
                                       (size_t)sqlite3_column_bytes(st, 7), &fig, storage, &w),
                     0);
    assert_int_equal(em_histo_add_stage(h, &w), 0);
    n++;
  }
  sqlite3_finalize(st);
  return n;
}

/* Percentiles of every rollup row of step_s equal those of merging its raw windows. */
static void assert_percentiles_exact(const char *path, int step_s) {
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  sqlite3_stmt *keys = NULL;
  char sql[600];
  snprintf(sql, sizeof(sql),
           "SELECT device, stage, time_ns FROM stage_rollups WHERE step_s = %d ORDER BY 1, 2, 3",
           step_s);
  assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &keys, NULL), SQLITE_OK);
  int checked = 0;
  static const double q[] = {0.5, 0.9, 0.99, 0.999};
  while (sqlite3_step(keys) == SQLITE_ROW) {
    long long dev = sqlite3_column_int64(keys, 0);
    long long stage = sqlite3_column_int64(keys, 1);
    long long t = sqlite3_column_int64(keys, 2);
    em_histo_t *raw;
    em_histo_t *rolled;
    assert_int_equal(em_histo_new(&raw), 0);
    assert_int_equal(em_histo_new(&rolled), 0);
    snprintf(sql, sizeof(sql),
             "SELECT stage, count, sum_ns, min_ns, max_ns, scale, zero_count, buckets FROM"
             " stage_windows WHERE device = %lld AND stage = %lld AND time_ns >= %lld"
             " AND time_ns < %lld + %d000000000",
             dev, stage, t, t, step_s);
    assert_true(merge_rows(db, sql, raw) > 0);
    snprintf(sql, sizeof(sql),
             "SELECT stage, count, sum_ns, min_ns, max_ns, scale, zero_count, buckets FROM"
             " stage_rollups WHERE step_s = %d AND device = %lld AND stage = %lld"
             " AND time_ns = %lld",
             step_s, dev, stage, t);
    assert_int_equal(merge_rows(db, sql, rolled), 1);
    assert_int_equal(em_histo_count(raw), em_histo_count(rolled));
    assert_int_equal(em_histo_scale(raw), em_histo_scale(rolled));
    for (size_t i = 0; i < 4; i++) {
      assert_true(em_histo_quantile_ns(raw, q[i]) == em_histo_quantile_ns(rolled, q[i]));
    }
    em_histo_free(raw);
    em_histo_free(rolled);
    checked++;
  }
  sqlite3_finalize(keys);
  sqlite3_close(db);
  assert_true(checked > 0);
}

static void assert_all_exact(const char *path) {
  assert_stages_exact(path, 60);
  assert_stages_exact(path, 3600);
  assert_data_exact(path, 60);
  assert_data_exact(path, 3600);
}

/* --- tests ------------------------------------------------------------------------------- */

/* 2.5 hours of two devices: minutes and hours equal their raw rows, percentiles included;
 * a step is rolled only once closed (its end at least 10 s old). */
static void rollup_minutes_and_hours_are_exact(void **state) {
  fixture_t *f = *state;
  em_store_t *s = open_store(f, 0);
  add_span(s, T0_NS, 150 * 60, 5);
  uint64_t end = T0_NS + 150 * MIN_NS;
  /* Minute 149 ends at `end`: not closed 5 s later, closed 10 s later. */
  int passes = roll_all(s, end + 5 * S_NS);
  assert_true(passes >= 5); /* 149 minutes at most 30 per pass. */
  assert_int_equal(q_int(f->path, "SELECT value FROM meta WHERE key = 'rollup_1m_ns'"),
                   (int64_t)(end - MIN_NS));
  assert_int_equal(q_int(f->path, "SELECT value FROM meta WHERE key = 'rollup_1h_ns'"),
                   (int64_t)(T0_NS + 2 * H_NS));
  assert_int_equal(q_int(f->path, "SELECT count(*) FROM stage_rollups WHERE step_s = 3600"), 8);
  roll_all(s, end + 10 * S_NS);
  assert_int_equal(q_int(f->path, "SELECT value FROM meta WHERE key = 'rollup_1m_ns'"),
                   (int64_t)end);
  /* Hour 2 is not whole until minute 180 is rolled: only hours 0 and 1, all of minutes. */
  assert_int_equal(q_int(f->path, "SELECT count(*) FROM stage_rollups WHERE step_s = 60"),
                   150 * 2 * 2);
  roll_all(s, T0_NS + 3 * H_NS + 10 * S_NS);
  assert_all_exact(f->path);
  assert_percentiles_exact(f->path, 60);
  assert_percentiles_exact(f->path, 3600);
  /* Absent is not zero: metric 2 is in one message of three, and its counts say so. */
  assert_int_equal(q_int(f->path, "SELECT count(*) FROM data_rollups WHERE step_s = 60 AND"
                                  " json_extract(counts, '$.\"3\"') * 3 >"
                                  " json_extract(counts, '$.\"1\"') + 2"),
                   0);
  em_store_stats_t st;
  em_store_stats(s, &st);
  assert_true(st.rollup_rows > 0);
  assert_int_equal(st.rollup_bad_rows, 0);
  assert_int_equal(em_store_close(s), 0);
}

/* A replayed message for a minute and hour already rolled marks the minute dirty; the next
 * pass recomputes the minute and the hour above it. */
static void rollup_late_row_updates_its_minute_and_hour(void **state) {
  fixture_t *f = *state;
  em_store_t *s = open_store(f, 0);
  add_span(s, T0_NS, 2 * 3600, 10);
  uint64_t now = T0_NS + 2 * H_NS + 10 * S_NS;
  roll_all(s, now);
  int64_t before_m = q_int(f->path, "SELECT count FROM stage_rollups s JOIN stages t ON"
                                    " t.id = s.stage AND t.name = 'infer' WHERE step_s = 60"
                                    " AND device = 1 AND time_ns = 1699999200000000000 + 5 * "
                                    "60000000000");
  int64_t before_h = q_int(f->path, "SELECT count FROM stage_rollups s JOIN stages t ON"
                                    " t.id = s.stage AND t.name = 'infer' WHERE step_s = 3600"
                                    " AND device = 1 AND time_ns = 1699999200000000000");
  assert_true(before_m > 0);
  add_data(s, "dev-a", T0_NS + 5 * MIN_NS + 30 * S_NS, 1, true); /* infer count 5 */
  assert_int_equal(em_store_flush(s), 0);
  assert_int_equal(q_int(f->path, "SELECT count(*) FROM rollup_dirty WHERE device = 1 AND"
                                  " time_ns = 1699999200000000000 + 5 * 60000000000"),
                   1);
  roll_all(s, now);
  assert_int_equal(q_int(f->path, "SELECT count(*) FROM rollup_dirty"), 0);
  assert_int_equal(q_int(f->path, "SELECT count FROM stage_rollups s JOIN stages t ON"
                                  " t.id = s.stage AND t.name = 'infer' WHERE step_s = 60"
                                  " AND device = 1 AND time_ns = 1699999200000000000 + 5 * "
                                  "60000000000"),
                   before_m + 5);
  assert_int_equal(q_int(f->path, "SELECT count FROM stage_rollups s JOIN stages t ON"
                                  " t.id = s.stage AND t.name = 'infer' WHERE step_s = 3600"
                                  " AND device = 1 AND time_ns = 1699999200000000000"),
                   before_h + 5);
  assert_all_exact(f->path);
  /* A row at or after the watermark is not dirty: the normal pass takes it. */
  add_data(s, "dev-a", now + 20 * S_NS, 2, false);
  assert_int_equal(em_store_flush(s), 0);
  assert_int_equal(q_int(f->path, "SELECT count(*) FROM rollup_dirty"), 0);
  assert_int_equal(em_store_close(s), 0);
}

/* A version 4 store (no rollup tables) migrates to 5 at open; its raw rows are rolled up over
 * several passes, 30 minutes at most each. */
static void rollup_version_4_store_migrates_and_catches_up(void **state) {
  fixture_t *f = *state;
  em_store_t *s = open_store(f, 0);
  add_span(s, T0_NS, 3 * 3600, 20);
  assert_int_equal(em_store_close(s), 0);
  q_exec(f->path, "DROP TABLE stage_rollups; DROP TABLE data_rollups;"
                  " DROP TABLE rollup_dirty; PRAGMA user_version=4");
  s = open_store(f, 0);
  assert_int_equal(q_int(f->path, "PRAGMA user_version"), 11);
  assert_int_equal(q_int(f->path, "SELECT count(*) FROM stage_rollups"), 0);
  em_rollup_report_t rep;
  assert_int_equal(em_store_rollup(s, T0_NS + 4 * H_NS, &rep), 0);
  assert_int_equal(rep.minutes, 30);
  assert_true(rep.more);
  int passes = 1 + roll_all(s, T0_NS + 4 * H_NS);
  assert_true(passes >= 6); /* 180 minutes, 30 a pass. */
  assert_int_equal(q_int(f->path, "SELECT count(*) FROM stage_rollups WHERE step_s = 3600"),
                   3 * 2 * 2);
  assert_all_exact(f->path);
  assert_int_equal(em_store_close(s), 0);
}

/* Retention deletes rollup rows older than retention_s, as it deletes raw rows. */
static void rollup_retention_deletes_old_rollups(void **state) {
  fixture_t *f = *state;
  em_store_t *s = open_store(f, 2 * 3600);
  add_span(s, T0_NS, 3 * 3600, 30);
  uint64_t now = T0_NS + 3 * H_NS + 10 * S_NS;
  roll_all(s, now);
  assert_int_equal(q_int(f->path, "SELECT min(time_ns) FROM stage_rollups WHERE step_s = 60"),
                   (int64_t)T0_NS);
  uint64_t later = T0_NS + 3 * H_NS + 30 * MIN_NS; /* Cut at T0 + 1.5 h. */
  assert_int_equal(em_store_retain(s, later), 0);
  int64_t cut = (int64_t)(T0_NS + 90 * MIN_NS);
  char sql[200];
  snprintf(sql, sizeof(sql), "SELECT min(time_ns) >= %lld FROM stage_rollups WHERE step_s = 60",
           (long long)cut);
  assert_int_equal(q_int(f->path, sql), 1);
  snprintf(sql, sizeof(sql), "SELECT min(time_ns) >= %lld FROM data_rollups WHERE step_s = 60",
           (long long)cut);
  assert_int_equal(q_int(f->path, sql), 1);
  /* Hour 0 started before the cut and went; hours 1 and 2 stay. */
  assert_int_equal(q_int(f->path, "SELECT count(DISTINCT time_ns) FROM stage_rollups"
                                  " WHERE step_s = 3600"),
                   2);
  assert_int_equal(q_int(f->path, "SELECT count(DISTINCT time_ns) FROM data_rollups"
                                  " WHERE step_s = 3600"),
                   2);
  assert_int_equal(em_store_close(s), 0);
}

/* A pass that spends its budget stops inside a minute, after a device: the watermark says which
 * devices of that minute are rolled, a late row of one of them marks the minute dirty, a row of
 * a device not rolled yet does not, and the passes that follow finish every step exactly. */
static void rollup_goes_device_by_device(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = {.rollup_manual = true, .rollup_budget_ms = -1}; /* One step a pass. */
  em_store_t *s = open_opts(f, &o);
  static const char *const devs[] = {"dev-a", "dev-b", "dev-c"};
  uint32_t k = 0;
  for (uint64_t t = 0; t < 3 * 60; t += 10) {
    for (int d = 0; d < 3; d++) {
      add_data(s, devs[d], T0_NS + t * S_NS, k++, false);
    }
  }
  assert_int_equal(em_store_flush(s), 0);
  uint64_t now = T0_NS + H_NS + 10 * S_NS;
  em_rollup_report_t rep;
  assert_int_equal(em_store_rollup(s, now, &rep), 0);
  assert_true(rep.more);
  assert_int_equal(rep.minutes, 0);
  assert_int_equal(q_int(f->path, "SELECT value FROM meta WHERE key = 'rollup_1m_ns'"),
                   (int64_t)T0_NS);
  assert_int_equal(q_int(f->path, "SELECT value FROM meta WHERE key = 'rollup_1m_device'"), 1);
  assert_int_equal(q_int(f->path, "SELECT count(DISTINCT device) FROM stage_rollups"), 1);
  add_data(s, "dev-a", T0_NS + 55 * S_NS, k++, true); /* Rolled: dirty. */
  add_data(s, "dev-c", T0_NS + 56 * S_NS, k++, true); /* Not rolled yet: not dirty. */
  assert_int_equal(em_store_flush(s), 0);
  assert_int_equal(q_int(f->path, "SELECT count(*) FROM rollup_dirty"), 1);
  assert_int_equal(q_int(f->path, "SELECT device FROM rollup_dirty"), 1);
  int passes = 1 + roll_all(s, now);
  assert_true(passes >= 3 * 3 + 3); /* A step a pass: 3 devices x 3 minutes, 3 hours' rows. */
  assert_int_equal(q_int(f->path, "SELECT count(*) FROM rollup_dirty"), 0);
  assert_all_exact(f->path);
  assert_int_equal(em_store_close(s), 0);
}

/* Without rollup_manual, em_store_tick() runs a pass on its first call and then once a second
 * of its clock while there is work: a late row waits for the next second's pass; with nothing
 * to do, no pass runs. */
static void rollup_tick_runs_a_pass_every_second(void **state) {
  fixture_t *f = *state;
  em_store_opts_t o = {0};
  em_store_t *s = open_opts(f, &o);
  em_msg_t d = {.kind = EM_MSG_DATA};
  em_stage_t w = {
      .name = "infer", .count = 1, .sum_ns = 5, .min_ns = 5, .max_ns = 5, .zero_count = 1};
  d.u.data =
      (em_data_t){.head = {.time_ns = T0_NS, .session = 1}, .seq = 1, .stages = &w, .n_stages = 1};
  assert_int_equal(em_store_add(s, "dev-a", NULL, &d, T0_NS), 0);
  assert_int_equal(em_store_tick(s, 5 * S_NS), 0); /* The first tick: commits, then a pass. */
  assert_int_equal(q_int(f->path, "SELECT count(*) FROM stage_rollups WHERE step_s = 60"), 1);
  d.u.data.head.time_ns = T0_NS + 10 * MIN_NS; /* Below the watermark (now, in 2026 or later). */
  d.u.data.seq = 2;
  assert_int_equal(em_store_add(s, "dev-a", NULL, &d, T0_NS), 0);
  assert_int_equal(em_store_tick(s, 5 * S_NS + 999000000), 0);
  assert_int_equal(em_store_flush(s), 0);
  assert_int_equal(q_int(f->path, "SELECT count(*) FROM rollup_dirty"), 1);
  assert_int_equal(em_store_tick(s, 6 * S_NS), 0);
  assert_int_equal(q_int(f->path, "SELECT count(*) FROM rollup_dirty"), 0);
  assert_int_equal(q_int(f->path, "SELECT count(*) FROM stage_rollups WHERE step_s = 60"), 2);
  /* Nothing left, no minute closed since (within a minute of the pass), no late row: the next
   * second's tick runs no pass, so an idle store writes nothing. */
  em_store_stats_t st;
  em_store_stats(s, &st);
  uint64_t runs = st.rollup_runs;
  assert_int_equal(em_store_tick(s, 7 * S_NS), 0);
  em_store_stats(s, &st);
  assert_true(st.rollup_runs == runs || st.rollup_runs == runs + 1); /* +1: a minute closed. */
  assert_int_equal(em_store_tick(s, 8 * S_NS), 0);
  em_store_stats(s, &st);
  assert_true(st.rollup_runs <= runs + 1);
  assert_int_equal(em_store_close(s), 0);
}

/* Malformed raw rows (a blob of one byte, a values object with an array in it) are left out
 * and counted; a string value is skipped and the number beside it kept; the step's other rows
 * roll up as always. */
static void rollup_leaves_out_malformed_rows(void **state) {
  fixture_t *f = *state;
  em_store_t *s = open_store(f, 0);
  add_span(s, T0_NS, 120, 10);
  char sql[600];
  snprintf(
      sql, sizeof(sql),
      "INSERT INTO stage_windows VALUES(1, %llu, 1, 1, 3, 1, 1, 1, 1, 1, 1, 1, 3, 0, x'00', NULL);"
      "INSERT INTO data(device, time_ns, vals) VALUES(1, %llu, '{\"1\": [1]}');"
      "INSERT INTO data(device, time_ns, vals) VALUES(1, %llu, '{\"1\": \"x\", \"2\": 5}')",
      (unsigned long long)(T0_NS + 5 * S_NS), (unsigned long long)(T0_NS + 6 * S_NS),
      (unsigned long long)(T0_NS + 7 * S_NS));
  q_exec(f->path, sql);
  em_rollup_report_t rep;
  uint64_t bad = 0;
  do {
    assert_int_equal(em_store_rollup(s, T0_NS + 2 * H_NS, &rep), 0);
    bad += rep.bad_rows;
  } while (rep.more);
  assert_int_equal(bad, 2);
  assert_int_equal(q_int(f->path, "SELECT count FROM stage_rollups WHERE step_s = 60 AND"
                                  " device = 1 AND stage = 1 AND time_ns = 1699999200000000000"),
                   q_int(f->path, "SELECT sum(count) FROM stage_windows WHERE device = 1 AND"
                                  " stage = 1 AND time_ns < 1699999260000000000"
                                  " AND length(buckets) != 1"));
  assert_int_equal(q_int(f->path, "SELECT json_extract(max, '$.\"2\"') FROM data_rollups"
                                  " WHERE step_s = 60 AND device = 1"
                                  " AND time_ns = 1699999200000000000"),
                   5);
  assert_int_equal(em_store_close(s), 0);
}

/* Data rows already downsampled to one row per minute (n > 1, means) roll up as n samples
 * with that mean: the same figures as the raw rows would have given. */
static void rollup_downsampled_rows_count_as_their_samples(void **state) {
  fixture_t *f = *state;
  em_store_t *s = open_store_with(f, 0, 600);
  add_span(s, T0_NS, 3600, 5);
  assert_int_equal(em_store_retain(s, T0_NS + H_NS + 11 * MIN_NS), 0); /* Downsamples first. */
  assert_true(q_int(f->path, "SELECT count(*) FROM data WHERE n = 12") > 100);
  roll_all(s, T0_NS + 2 * H_NS);
  assert_int_equal(q_int(f->path, "SELECT count(*) FROM data_rollups WHERE step_s = 60"
                                  " AND n != 12"),
                   0);
  assert_data_exact(f->path, 60);
  assert_data_exact(f->path, 3600);
  assert_int_equal(em_store_close(s), 0);
}

/* A child rolls a backlog pass after pass and is killed with SIGKILL while at it; the next
 * process's passes complete the rollups, every row exact, none twice. */
static void rollup_kill_9_while_rolling_loses_nothing(void **state) {
  fixture_t *f = *state;
  em_store_t *s = open_store(f, 0);
  add_span(s, T0_NS, 4 * 3600, 2);
  assert_int_equal(em_store_close(s), 0);
  uint64_t now = T0_NS + 5 * H_NS;
  int ready[2];
  assert_int_equal(pipe(ready), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    em_store_t *c = open_store(f, 0);
    em_rollup_report_t rep;
    if (em_store_rollup(c, now, &rep) != 0) {
      _exit(2);
    }
    (void)!write(ready[1], "r", 1); /* One pass committed; more to do. */
    for (;;) {
      if (em_store_rollup(c, now, &rep) != 0) {
        _exit(3);
      }
    }
  }
  close(ready[1]);
  char b;
  assert_int_equal(read(ready[0], &b, 1), 1);
  close(ready[0]);
  kill(pid, SIGKILL);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  /* The first pass's rows are committed, with their watermark. */
  assert_true(q_int(f->path, "SELECT count(*) FROM stage_rollups") > 0);
  int64_t rolled = q_int(f->path, "SELECT value FROM meta WHERE key = 'rollup_1m_ns'");
  assert_true(rolled >= (int64_t)T0_NS);
  printf("killed with minutes rolled up to T0 + %lld min\n",
         (long long)((rolled - (int64_t)T0_NS) / (int64_t)MIN_NS));
  s = open_store(f, 0);
  roll_all(s, now);
  assert_all_exact(f->path);
  assert_int_equal(em_store_close(s), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(rollup_minutes_and_hours_are_exact, setup,
                                      store_fixture_teardown),
      cmocka_unit_test_setup_teardown(rollup_late_row_updates_its_minute_and_hour, setup,
                                      store_fixture_teardown),
      cmocka_unit_test_setup_teardown(rollup_version_4_store_migrates_and_catches_up, setup,
                                      store_fixture_teardown),
      cmocka_unit_test_setup_teardown(rollup_retention_deletes_old_rollups, setup,
                                      store_fixture_teardown),
      cmocka_unit_test_setup_teardown(rollup_downsampled_rows_count_as_their_samples, setup,
                                      store_fixture_teardown),
      cmocka_unit_test_setup_teardown(rollup_goes_device_by_device, setup, store_fixture_teardown),
      cmocka_unit_test_setup_teardown(rollup_leaves_out_malformed_rows, setup,
                                      store_fixture_teardown),
      cmocka_unit_test_setup_teardown(rollup_tick_runs_a_pass_every_second, setup,
                                      store_fixture_teardown),
      cmocka_unit_test_setup_teardown(rollup_kill_9_while_rolling_loses_nothing, setup,
                                      store_fixture_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
