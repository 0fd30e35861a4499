/*
 * bench_rollups.c - what a rollup pass of the aggregator's store costs (host/aggregator/
 * rollup.c through em_store_rollup): a store is synthesized with the store's own schema
 * (em_store_open), then filled over a connection of its own with `--minutes` minutes of raw
 * rows as a fleet of `--devices` devices at `--hz` data messages a second writes them (one
 * `data` row of 16 metric values, three `stage_windows` rows of 6 buckets each, per message),
 * then rolled up pass by pass. Prints, per pass, the minutes and hours rolled, the rows written,
 * the CPU time (CLOCK_PROCESS_CPUTIME_ID) and the wall time, and the CPU time per minute of
 * data. Then the hour pass, and a pass over one dirty minute per device (as rows replayed below
 * the watermark mark them), recomputed with the hours above them.
 *
 *   bench_rollups [--devices N] [--minutes N] [--hz N] [--db PATH]
 */
#define _POSIX_C_SOURCE 200809L
#include "buckets.h"
#include "store.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define S_NS   1000000000ll
#define MIN_NS (60 * S_NS)
#define T0_NS  1699999200000000000ll /* A whole hour. */

static double clock_s(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die_sql(sqlite3 *db, const char *what) {
  fprintf(stderr, "bench_rollups: %s: %s\n", what, sqlite3_errmsg(db));
  exit(1);
}

static void exec(sqlite3 *db, const char *sql) {
  if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
    die_sql(db, sql);
  }
}

static sqlite3_stmt *prepare(sqlite3 *db, const char *sql) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
    die_sql(db, sql);
  }
  return st;
}

static void step(sqlite3 *db, sqlite3_stmt *st) {
  if (sqlite3_step(st) != SQLITE_DONE) {
    die_sql(db, "insert");
  }
  sqlite3_reset(st);
}

/* Writes one data message of device dev at t (k varies the figures). */
static void write_message(sqlite3 *db, sqlite3_stmt *data, sqlite3_stmt *win, int dev, int64_t t,
                          uint32_t k, int64_t seq) {
  static uint8_t blob[EM_BUCKETS_BLOB_MAX];
  char vals[640];
  size_t len = 0;
  for (int m = 1; m <= 16; m++) {
    len += (size_t)snprintf(vals + len, sizeof(vals) - len, "%s\"%d\":%.17g", m > 1 ? "," : "{", m,
                            (double)((k * 2654435761u + (uint32_t)m * 97u) % 100000u) / 7.0);
  }
  snprintf(vals + len, sizeof(vals) - len, "}");
  sqlite3_bind_int(data, 1, dev);
  sqlite3_bind_int64(data, 2, t);
  sqlite3_bind_text(data, 3, vals, -1, SQLITE_STATIC);
  sqlite3_bind_int64(data, 4, seq);
  step(db, data);
  for (int s = 1; s <= 3; s++) {
    em_bucket_t b[6];
    uint64_t count = 0;
    for (int i = 0; i < 6; i++) {
      b[i] = (em_bucket_t){.index = 60 + s * 8 + i * 2 + (int32_t)((k + (uint32_t)i) % 2),
                           .count = 1 + (k + (uint32_t)i * 3) % 4};
      count += b[i].count;
    }
    em_stage_t w = {.buckets = b, .n_buckets = 6};
    size_t blen = em_buckets_encode(blob, &w);
    int64_t figures[] = {
        (int64_t)count, (int64_t)count * 300000, 150000, 900000, 300000, 600000, 800000, 900000};
    sqlite3_bind_int(win, 1, dev);
    sqlite3_bind_int64(win, 2, t);
    sqlite3_bind_int(win, 3, s);
    sqlite3_bind_int64(win, 4, S_NS / 10);
    for (int i = 0; i < 8; i++) {
      sqlite3_bind_int64(win, 5 + i, figures[i]);
    }
    sqlite3_bind_int(win, 13, 3);
    sqlite3_bind_int(win, 14, 0);
    sqlite3_bind_blob(win, 15, blob, (int)blen, SQLITE_STATIC);
    step(db, win);
  }
}

static void fill(const char *path, int devices, int minutes, int hz) {
  sqlite3 *db = NULL;
  if (sqlite3_open(path, &db) != SQLITE_OK) {
    die_sql(db, path);
  }
  exec(db, "PRAGMA synchronous=OFF; PRAGMA cache_size=-262144; BEGIN");
  sqlite3_stmt *dev = prepare(db, "INSERT INTO devices(id, name) VALUES(?1, ?2)");
  for (int d = 1; d <= devices; d++) {
    char name[32];
    snprintf(name, sizeof(name), "sim-%04d", d);
    sqlite3_bind_int(dev, 1, d);
    sqlite3_bind_text(dev, 2, name, -1, SQLITE_TRANSIENT);
    step(db, dev);
  }
  sqlite3_finalize(dev);
  exec(db, "INSERT INTO stages(id, name) VALUES(1, 'pre'), (2, 'infer'), (3, 'post')");
  sqlite3_stmt *data =
      prepare(db, "INSERT INTO data(device, time_ns, n, vals, session, seq) VALUES(?1, ?2, 1, ?3,"
                  " 1, ?4)");
  sqlite3_stmt *win = prepare(
      db, "INSERT INTO stage_windows(device, time_ns, stage, window_ns, count, sum_ns, min_ns,"
          " max_ns, p50_ns, p90_ns, p99_ns, p999_ns, scale, zero_count, buckets)"
          " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)");
  int64_t period = S_NS / hz;
  int64_t per_minute = 60ll * hz;
  for (int64_t i = 0; i < per_minute * minutes; i++) {
    for (int d = 1; d <= devices; d++) {
      write_message(db, data, win, d, T0_NS + i * period + d * 1000, (uint32_t)(i + d), i);
    }
    if (i % per_minute == per_minute - 1) {
      exec(db, "COMMIT; BEGIN");
    }
  }
  exec(db, "COMMIT");
  sqlite3_finalize(data);
  sqlite3_finalize(win);
  sqlite3_close(db);
}

static em_store_t *open_store(const char *path) {
  em_store_opts_t o = {.path = path, .batch_ms = 1000, .batch_rows = 10000, .rollup_manual = true};
  em_store_t *s = NULL;
  char err[512];
  if (em_store_open(&s, &o, NULL, err, sizeof(err)) != 0) {
    fprintf(stderr, "bench_rollups: %s\n", err);
    exit(1);
  }
  return s;
}

/* Runs passes until none is left; prints what they did. Returns the CPU seconds of all. */
static double roll(em_store_t *s, int64_t now, const char *what) {
  double cpu_all = 0;
  double wall_all = 0;
  double wall_max = 0;
  int passes = 0;
  uint64_t minutes = 0, hours = 0, dirty = 0, rows = 0;
  em_rollup_report_t rep;
  do {
    double c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    double w0 = clock_s(CLOCK_MONOTONIC);
    if (em_store_rollup(s, (uint64_t)now, &rep) != 0) {
      fprintf(stderr, "bench_rollups: a rollup pass failed\n");
      exit(1);
    }
    double wall = clock_s(CLOCK_MONOTONIC) - w0;
    cpu_all += clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    wall_all += wall;
    wall_max = wall > wall_max ? wall : wall_max;
    passes++;
    minutes += rep.minutes;
    hours += rep.hours;
    dirty += rep.dirty;
    rows += rep.rows;
  } while (rep.more);
  printf("%s: %d pass(es), %llu minute(s), %llu hour(s), %llu dirty, %llu rows written;"
         " cpu %.3f s, wall %.3f s, longest pass %.3f s\n",
         what, passes, (unsigned long long)minutes, (unsigned long long)hours,
         (unsigned long long)dirty, (unsigned long long)rows, cpu_all, wall_all, wall_max);
  return cpu_all;
}

int main(int argc, char **argv) {
  int devices = 1000;
  int minutes = 2;
  int hz = 10;
  const char *path = NULL;
  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && strcmp(argv[i], "--devices") == 0) {
      devices = atoi(argv[++i]);
    } else if (i + 1 < argc && strcmp(argv[i], "--minutes") == 0) {
      minutes = atoi(argv[++i]);
    } else if (i + 1 < argc && strcmp(argv[i], "--hz") == 0) {
      hz = atoi(argv[++i]);
    } else if (i + 1 < argc && strcmp(argv[i], "--db") == 0) {
      path = argv[++i];
    } else {
      fprintf(stderr, "usage: bench_rollups [--devices N] [--minutes N] [--hz N] [--db PATH]\n");
      return 2;
    }
  }
  if (devices < 1 || minutes < 1 || minutes > 60 || hz < 1 || hz > 1000) {
    fprintf(stderr, "bench_rollups: devices >= 1, minutes 1..60, hz 1..1000\n");
    return 2;
  }
  char tmp[64];
  if (!path) {
    snprintf(tmp, sizeof(tmp), "/tmp/bench-rollups-%d.db", (int)getpid());
    path = tmp;
  }
  em_store_close(open_store(path)); /* The schema, as the aggregator creates it. */
  double f0 = clock_s(CLOCK_MONOTONIC);
  fill(path, devices, minutes, hz);
  printf("filled %d devices x %d Hz x %d min: %lld data rows, %lld stage_windows rows in %.1f s\n",
         devices, hz, minutes, (long long)devices * hz * 60 * minutes,
         (long long)devices * hz * 60 * minutes * 3, clock_s(CLOCK_MONOTONIC) - f0);

  em_store_t *s = open_store(path);
  /* Every minute closed; the hour not (its minutes after the data are not rolled yet). */
  int64_t now = T0_NS + (int64_t)minutes * MIN_NS + 11 * S_NS;
  double cpu = roll(s, now, "minutes");
  printf("cpu per minute of data: %.3f s (%d devices x %d Hz x 3 stages)\n", cpu / minutes, devices,
         hz);
  cpu = roll(s, T0_NS + 3600 * S_NS + 11 * S_NS, "hour");
  printf("cpu of the hour (from %d minute(s) of rollups): %.3f s\n", minutes, cpu);

  /* One dirty minute per device, the first, below both watermarks (as a replay marks it). */
  em_store_close(s);
  sqlite3 *db = NULL;
  if (sqlite3_open(path, &db) != SQLITE_OK) {
    die_sql(db, path);
  }
  exec(db, "INSERT INTO rollup_dirty(device, time_ns) SELECT id, 1699999200000000000 FROM devices");
  sqlite3_close(db);
  s = open_store(path);
  cpu = roll(s, T0_NS + 3600 * S_NS + 11 * S_NS, "dirty");
  printf("cpu of %d dirty minutes and their hours: %.3f s\n", devices, cpu);
  em_store_close(s);
  if (path == tmp) {
    static const char *const suffix[] = {"", "-wal", "-shm"};
    for (size_t i = 0; i < 3; i++) {
      char p[80];
      snprintf(p, sizeof(p), "%s%s", path, suffix[i]);
      unlink(p);
    }
  }
  return 0;
}
