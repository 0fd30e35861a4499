/*
 * history.c - /api/fleet, /api/devices/<id>/history and /api/latency (see history.h).
 *
 * Resolution. A range [from, to) is cut into a grid of points whose step is the smallest of a
 * fixed ladder (1 s .. 1 d) that gives at most the points asked for. A step under a minute is
 * answered from the raw rows (stage_windows, data), a step of minutes from the 1-minute
 * rollups, a step of hours from the 1-hour rollups (stage_rollups, data_rollups). A rollup
 * level covers times below its watermark (meta rollup_1m_ns, rollup_1h_ns); the rest of the
 * range is read from the next finer level, down to the raw rows, so a point is always the merge
 * of everything stored in it. A store without rollups (schema before v5) answers from raw rows.
 * Rows are assigned to the point holding their time_ns (a raw window's end, a rollup's step
 * start), and every point's histogram is the exact merge (em_histo_add_stage) of its rows.
 *
 * Bounds: every statement runs under a progress handler that interrupts it past the request's
 * deadline (503); the answer's size is bounded by the points, the 64 stages and metrics, the
 * 1000 level changes and the device limit.
 */
#define _POSIX_C_SOURCE 200809L
#include "history.h"

#include "buckets.h"

#include <buf.h>
#include <edgemon/json_write.h>
#include <errno.h>
#include <fnmatch.h>
#include <histo.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NS_PER_S       1000000000ull
#define MAX_BODY_BYTES (64u * 1024u * 1024u)

struct em_history {
  sqlite3 *db;
  struct em_history *twin; /* A second reader on the same file, for a worker thread. */
  uint64_t deadline_ns;    /* CLOCK_MONOTONIC; the progress handler interrupts past it. */
  bool timed_out;
  em_bucket_t buckets[EM_PROTO_MAX_BUCKETS]; /* Decode scratch. */
};

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

static int progress(void *ctx) {
  em_history_t *h = ctx;
  if (mono_ns() > h->deadline_ns) {
    h->timed_out = true;
    return 1;
  }
  return 0;
}

static void begin_request(em_history_t *h) {
  h->deadline_ns = mono_ns() + (uint64_t)EM_HISTORY_DEADLINE_MS * 1000000u;
  h->timed_out = false;
}

/* Index of the entry whose leading int64_t id is `id` in base[0..n) of `size` bytes each, or n
 * when none has it. */
static size_t find_id(const void *base, size_t n, size_t size, int64_t id) {
  const char *p = base;
  for (size_t i = 0; i < n; i++, p += size) {
    int64_t x;
    memcpy(&x, p, sizeof(x));
    if (x == id) {
      return i;
    }
  }
  return n;
}

/* ---- JSON output ---------------------------------------------------------------------- */

/* The body: an em_buf_t (buf.h) of at most MAX_BODY_BYTES with its NUL. A write that fails
 * (past the cap, out of memory) leaves w->error set, and later writes are dropped. */
typedef em_buf_t jw_t;

static jw_t jw_new(void) {
  jw_t w;
  em_buf_init(&w, MAX_BODY_BYTES - 1);
  return w;
}

/* Fails the body for something other than a write (an allocation of the caller's). */
static void jw_fail(jw_t *w) {
  if (!w->error) {
    w->error = -ENOMEM;
  }
}

static void jw_put(jw_t *w, const char *s, size_t n) {
  (void)em_buf_add(w, s, n);
}

static void jw_s(jw_t *w, const char *s) {
  jw_put(w, s, strlen(s));
}

__attribute__((format(printf, 2, 3))) static void jw_fmt(jw_t *w, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  (void)em_buf_vprintf(w, fmt, ap);
  va_end(ap);
}

static void jw_sink(void *ctx, const char *s, size_t n) {
  jw_put(ctx, s, n);
}

/* A JSON string; control characters escaped, other bytes as they are. */
static void jw_str(jw_t *w, const char *s) {
  jw_put(w, "\"", 1);
  em_json_escape(s, strlen(s), 0, jw_sink, w);
  jw_put(w, "\"", 1);
}

static void jw_str_or_null(jw_t *w, const char *s) {
  if (s) {
    jw_str(w, s);
  } else {
    jw_s(w, "null");
  }
}

/* A number: integral values without a fraction, NaN and infinities as null. */
static void jw_num(jw_t *w, double v) {
  if (!isfinite(v)) {
    jw_s(w, "null");
  } else if (v == floor(v) && fabs(v) < 9e15) {
    jw_fmt(w, "%.0f", v);
  } else {
    jw_fmt(w, "%.17g", v);
  }
}

static void jw_u64(jw_t *w, uint64_t v) {
  jw_fmt(w, "%llu", (unsigned long long)v);
}

/* Hands the body over as the reply (or a 500 when writing it failed). */
static void reply_body(em_history_reply_t *out, jw_t *w) {
  if (w->error) {
    em_buf_free(w);
    em_history_error(out, 500, "answer too large or out of memory");
    return;
  }
  out->status = 200;
  out->body = em_buf_take(w, &out->len);
}

void em_history_error(em_history_reply_t *out, unsigned status, const char *msg) {
  jw_t w = jw_new();
  jw_s(&w, "{\"error\":");
  jw_str(&w, msg);
  jw_s(&w, "}");
  out->status = w.error ? 500 : status;
  if (w.error) {
    em_buf_free(&w);
  }
  out->body = em_buf_take(&w, &out->len);
}

static const char *level_name(long long level) {
  static const char *const names[] = {"NOMINAL", "WARN", "DEGRADED", "CRITICAL"};
  return level >= 0 && level <= 3 ? names[level] : NULL;
}

/* ---- SQLite helpers ------------------------------------------------------------------- */

static int open_reader(em_history_t **out, const char *db_path, char *err, size_t err_cap) {
  *out = NULL;
  em_history_t *h = calloc(1, sizeof(*h));
  if (!h) {
    snprintf(err, err_cap, "history: out of memory");
    return -ENOMEM;
  }
  int rc = sqlite3_open_v2(db_path, &h->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc != SQLITE_OK) {
    snprintf(err, err_cap, "history: cannot open %s read-only: %s", db_path,
             h->db ? sqlite3_errmsg(h->db) : sqlite3_errstr(rc));
    em_history_close(h);
    return -EIO;
  }
  sqlite3_busy_timeout(h->db, (int)EM_HISTORY_DEADLINE_MS);
  /* A page cache of its own (64 MiB). No memory map: the writer grows the file all the time,
   * and SQLite maps it again after every growth, so each query faulted the whole map back in
   * (a 7-day latency over 200 devices took over 2 s mapped, 1.1 s with plain reads). */
  (void)sqlite3_exec(h->db, "PRAGMA cache_size = -65536", NULL, NULL, NULL);
  sqlite3_progress_handler(h->db, 1000, progress, h);
  *out = h;
  return 0;
}

int em_history_open(em_history_t **out, const char *db_path, char *err, size_t err_cap) {
  int rc = open_reader(out, db_path, err, err_cap);
  if (rc == 0 && open_reader(&(*out)->twin, db_path, err, err_cap) != 0) {
    em_history_close(*out);
    *out = NULL;
    return -EIO;
  }
  return rc;
}

struct sqlite3 *em_history_reader(em_history_t *h) {
  begin_request(h);
  return h->db;
}

void em_history_close(em_history_t *h) {
  if (!h) {
    return;
  }
  em_history_close(h->twin);
  sqlite3_close_v2(h->db);
  free(h);
}

/* Prepares sql; false (with the reply set) on failure. */
static bool prepare(em_history_t *h, const char *sql, sqlite3_stmt **st, em_history_reply_t *out) {
  if (sqlite3_prepare_v2(h->db, sql, -1, st, NULL) == SQLITE_OK) {
    return true;
  }
  char msg[256];
  snprintf(msg, sizeof(msg), "store: %s", sqlite3_errmsg(h->db));
  em_history_error(out, 500, msg);
  *st = NULL;
  return false;
}

/* The reply for a statement that ended with rc (not SQLITE_DONE). */
static void step_failed(em_history_t *h, int rc, em_history_reply_t *out) {
  if (h->timed_out || rc == SQLITE_INTERRUPT) {
    em_history_error(out, 503, "query took too long");
    return;
  }
  char msg[256];
  snprintf(msg, sizeof(msg), "store: %s", sqlite3_errmsg(h->db));
  em_history_error(out, rc == SQLITE_BUSY ? 503 : 500, msg);
}

static const char *col_text(sqlite3_stmt *st, int i) {
  return (const char *)sqlite3_column_text(st, i);
}

static bool table_exists(em_history_t *h, const char *name) {
  sqlite3_stmt *st = NULL;
  bool yes = false;
  if (sqlite3_prepare_v2(h->db, "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?1", -1,
                         &st, NULL) == SQLITE_OK) {
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    yes = sqlite3_step(st) == SQLITE_ROW;
  }
  sqlite3_finalize(st);
  return yes;
}

/* Rollup watermarks: times below them are rolled up (0: no rollups). */
typedef struct {
  uint64_t m1;
  uint64_t h1;
} marks_t;

static marks_t read_marks(em_history_t *h) {
  marks_t m = {0, 0};
  if (!table_exists(h, "stage_rollups")) {
    return m;
  }
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(h->db,
                         "SELECT key, CAST(value AS INTEGER) FROM meta WHERE key IN "
                         "('rollup_1m_ns', 'rollup_1h_ns')",
                         -1, &st, NULL) == SQLITE_OK) {
    while (sqlite3_step(st) == SQLITE_ROW) {
      sqlite3_int64 v = sqlite3_column_int64(st, 1);
      uint64_t u = v > 0 ? (uint64_t)v : 0;
      if (strcmp(col_text(st, 0), "rollup_1m_ns") == 0) {
        m.m1 = u;
      } else {
        m.h1 = u;
      }
    }
  }
  sqlite3_finalize(st);
  if (m.h1 > m.m1) { /* An hour is rolled from its minutes: never ahead of them. */
    m.h1 = m.m1;
  }
  return m;
}

/* ---- resolution ----------------------------------------------------------------------- */

enum { SRC_RAW = 0, SRC_1M = 1, SRC_1H = 2 };
static const char *const src_names[] = {"raw", "1m", "1h"};
static const unsigned src_step_s[] = {0, 60, 3600};

typedef struct {
  int src;
  uint64_t from;
  uint64_t to;
} seg_t;

typedef struct {
  uint64_t from; /* Grid start: the request's from, down to a multiple of step. */
  uint64_t to;   /* The request's to (exclusive). */
  uint64_t step;
  size_t n; /* Points. */
  int src;  /* Resolution the step calls for. */
  seg_t segs[3];
  size_t n_segs;
} grid_t;

/* The smallest step of the ladder giving at most `points` points over [from, to), at least
 * min_step_s seconds. */
static void make_grid(grid_t *g, uint64_t from, uint64_t to, unsigned points, unsigned min_step_s,
                      const marks_t *m) {
  static const unsigned ladder_s[] = {1,   2,   5,    10,   15,   30,    60,    120,   300,
                                      600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400};
  size_t nl = sizeof(ladder_s) / sizeof(ladder_s[0]);
  for (size_t i = 0; i < nl; i++) {
    uint64_t step = (uint64_t)ladder_s[i] * NS_PER_S;
    if (ladder_s[i] < min_step_s && i + 1 < nl) {
      continue;
    }
    g->step = step;
    g->from = from / step * step;
    g->n = (size_t)((to - 1) / step - g->from / step + 1);
    if (g->n <= points) {
      break;
    }
  }
  g->to = to;
  g->src = g->step >= 3600u * NS_PER_S ? SRC_1H : g->step >= 60u * NS_PER_S ? SRC_1M : SRC_RAW;
  /* Segments, coarse to fine: each rollup level up to its watermark, then the finer one. */
  g->n_segs = 0;
  uint64_t at = g->from;
  uint64_t marks[3] = {0, m->m1, m->h1};
  for (int src = g->src; src >= SRC_RAW && at < to; src--) {
    uint64_t end = src == SRC_RAW ? to : (marks[src] < to ? marks[src] : to);
    if (end > at) {
      g->segs[g->n_segs++] = (seg_t){src, at, end};
      at = end;
    }
  }
}

/* The source to name: the resolution of the first segment (raw for an empty range). */
static const char *grid_source(const grid_t *g) {
  return g->n_segs ? src_names[g->segs[0].src] : "raw";
}

/* ---- stage rows ----------------------------------------------------------------------- */

typedef int (*window_fn)(void *ctx, int64_t device, int64_t stage, uint64_t time_ns,
                         const em_stage_t *s);

#define STAGE_COLS                                                                                 \
  "device, stage, time_ns, count, sum_ns, min_ns, max_ns, scale, zero_count, buckets"

/* Called per result row of run_query(); nonzero stops it (out of memory). */
typedef int (*row_fn)(void *ctx, sqlite3_stmt *st);

/* Runs a query bound with ?1 step_s, ?2 device, ?3 from, ?4 to once per device of
 * devs[0..n_devs) (prepared once) and calls fn per row. Returns 0 or an SQLite code (the reply
 * is set then). */
static int run_query_devs(em_history_t *h, const char *sql, unsigned step_s, const int64_t *devs,
                          size_t n_devs, uint64_t from, uint64_t to, row_fn fn, void *ctx,
                          em_history_reply_t *out) {
  sqlite3_stmt *st;
  if (!prepare(h, sql, &st, out)) {
    return SQLITE_ERROR;
  }
  int rc = SQLITE_DONE;
  for (size_t d = 0; d < n_devs && rc == SQLITE_DONE; d++) {
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, step_s);
    sqlite3_bind_int64(st, 2, devs[d]);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)from);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)to);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
      if (fn(ctx, st) != 0) {
        sqlite3_finalize(st);
        em_history_error(out, 500, "out of memory");
        return SQLITE_NOMEM;
      }
    }
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    step_failed(h, rc, out);
    return rc;
  }
  return 0;
}

static int run_query(em_history_t *h, const char *sql, unsigned step_s, int64_t device,
                     uint64_t from, uint64_t to, row_fn fn, void *ctx, em_history_reply_t *out) {
  return run_query_devs(h, sql, step_s, &device, 1, from, to, fn, ctx, out);
}

/* Devices whose stage rows are read side by side (run_query_grouped). */
#define GROUP_DEVICES 32

/*
 * As run_query_devs() for a query of stage rows (STAGE_COLS: time_ns is column 2), but reading
 * up to GROUP_DEVICES devices at once, each through a statement of its own, a grid point at a
 * time: the group's rows of one point (times below lim, lim advancing by the grid's step from
 * grid_from), then those of the next. The rows merged into a point's histogram then come one
 * after the other instead of a device's whole range apart, so the point's counts stay in the
 * cache (a 7-day fleet latency merges each of its 168 hourly points from every device). The
 * rows, and so the exact merges, are the same as device by device.
 */
static int run_query_grouped(em_history_t *h, const char *sql, unsigned step_s, const int64_t *devs,
                             size_t n_devs, uint64_t from, uint64_t to, uint64_t grid_from,
                             uint64_t step, row_fn fn, void *ctx, em_history_reply_t *out) {
  sqlite3_stmt *st[GROUP_DEVICES] = {NULL};
  int state[GROUP_DEVICES];
  size_t n_st = n_devs < GROUP_DEVICES ? n_devs : GROUP_DEVICES;
  int rc = 0;
  for (size_t i = 0; i < n_st && rc == 0; i++) {
    rc = prepare(h, sql, &st[i], out) ? 0 : SQLITE_ERROR;
  }
  for (size_t d0 = 0; d0 < n_devs && rc == 0; d0 += n_st) {
    size_t n = n_devs - d0 < n_st ? n_devs - d0 : n_st;
    for (size_t i = 0; i < n; i++) {
      sqlite3_reset(st[i]);
      sqlite3_bind_int64(st[i], 1, step_s);
      sqlite3_bind_int64(st[i], 2, devs[d0 + i]);
      sqlite3_bind_int64(st[i], 3, (sqlite3_int64)from);
      sqlite3_bind_int64(st[i], 4, (sqlite3_int64)to);
      state[i] = sqlite3_step(st[i]);
    }
    bool more = true;
    for (uint64_t lim = grid_from + step; more && rc == 0; lim += step) {
      more = false;
      for (size_t i = 0; i < n && rc == 0; i++) {
        while (state[i] == SQLITE_ROW && (uint64_t)sqlite3_column_int64(st[i], 2) < lim) {
          if (fn(ctx, st[i]) != 0) {
            em_history_error(out, 500, "out of memory");
            rc = SQLITE_NOMEM;
            break;
          }
          state[i] = sqlite3_step(st[i]);
        }
        if (rc == 0 && state[i] == SQLITE_ROW) {
          more = true;
        } else if (rc == 0 && state[i] != SQLITE_DONE) {
          rc = state[i];
          step_failed(h, rc, out);
        }
      }
    }
  }
  for (size_t i = 0; i < n_st; i++) {
    sqlite3_finalize(st[i]);
  }
  return rc;
}

typedef struct {
  em_history_t *h;
  window_fn fn;
  void *ctx;
} window_rows_t;

/* A stage row (STAGE_COLS) decoded into an em_stage_t for the window callback; a malformed row
 * is left out. */
static int window_row(void *ctx, sqlite3_stmt *st) {
  window_rows_t *wr = ctx;
  em_buckets_figures_t fig = {.count = (uint64_t)sqlite3_column_int64(st, 3),
                              .sum_ns = (uint64_t)sqlite3_column_int64(st, 4),
                              .min_ns = (uint64_t)sqlite3_column_int64(st, 5),
                              .max_ns = (uint64_t)sqlite3_column_int64(st, 6),
                              .scale = (int32_t)sqlite3_column_int(st, 7),
                              .zero_count = (uint64_t)sqlite3_column_int64(st, 8)};
  em_stage_t s;
  const void *blob = sqlite3_column_blob(st, 9);
  int blen = sqlite3_column_bytes(st, 9);
  if (blen < 0 || em_buckets_decode(blob, (size_t)blen, &fig, wr->h->buckets, &s) != 0) {
    return 0;
  }
  return wr->fn(wr->ctx, sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1),
                (uint64_t)sqlite3_column_int64(st, 2), &s);
}

/* Every stage row of the grid's segments of the devices devs[0..n_devs), each device's rows
 * through the primary key or index that starts with the device, in time order. Raw rows are
 * read only up to max_raw_devices devices (*data_to is where the answer's data ends then: the
 * minute watermark). */
static int each_window(em_history_t *h, const grid_t *g, const int64_t *devs, size_t n_devs,
                       size_t max_raw_devices, uint64_t *data_to, window_fn fn, void *ctx,
                       em_history_reply_t *out) {
  static const char *const rollup = "SELECT " STAGE_COLS " FROM stage_rollups WHERE step_s = ?1 "
                                    "AND device = ?2 AND time_ns >= ?3 AND time_ns < ?4 "
                                    "ORDER BY time_ns";
  static const char *const raw = "SELECT " STAGE_COLS " FROM stage_windows WHERE device = ?2 "
                                 "AND time_ns >= ?3 AND time_ns < ?4 AND ?1 = 0 "
                                 "ORDER BY time_ns";
  window_rows_t wr = {h, fn, ctx};
  *data_to = g->to;
  for (size_t i = 0; i < g->n_segs; i++) {
    const seg_t *sg = &g->segs[i];
    if (sg->src == SRC_RAW && n_devs > max_raw_devices) {
      *data_to = sg->from;
      break;
    }
    int rc = run_query_grouped(h, sg->src == SRC_RAW ? raw : rollup, src_step_s[sg->src], devs,
                               n_devs, sg->from, sg->to, g->from, g->step, window_row, &wr, out);
    if (rc != 0) {
      return rc;
    }
  }
  return 0;
}

/* ---- /api/fleet ----------------------------------------------------------------------- */

typedef struct {
  char id[EM_PROTO_MAX_NAME_BYTES + 1];
  int level;
  int online; /* -1 unknown */
  uint64_t last_seen_ns;
  bool have_birth;
  char board[EM_PROTO_MAX_NAME_BYTES + 1];
  char version[EM_PROTO_MAX_NAME_BYTES + 1];
  bool have_worst;
  char stage[EM_PROTO_MAX_STAGE_BYTES + 1];
  uint64_t p99_ns;
  bool have_budget;
  uint64_t budget_ns;
  double ratio;
  char rule[EM_PROTO_MAX_NAME_BYTES + 1];
} fleet_row_t;

/* A budget's bound in ns (positive), from whichever number type the birth used. */
static bool value_ns(const em_value_t *v, uint64_t *ns) {
  double x = v->type == EM_VALUE_UINT    ? (double)v->as.u
             : v->type == EM_VALUE_INT   ? (double)v->as.i
             : v->type == EM_VALUE_FLOAT ? v->as.f
                                         : NAN;
  if (!(x >= 1.0)) {
    return false;
  }
  *ns = x >= 1.8e19 ? UINT64_MAX : (uint64_t)x;
  return true;
}

/* The stage whose latest window's p99 is highest against its budget (without any budget, the
 * highest p99). */
static void worst_stage(const em_agg_device_t *d, fleet_row_t *row) {
  bool budgeted = false;
  for (size_t i = 0; i < d->n_stages; i++) {
    const em_agg_stage_t *s = &d->stages[i];
    if (s->windows == 0 || s->last.count == 0) {
      continue;
    }
    const em_dict_budget_t *b = em_dict_stage_budget(d->dev, s->name);
    uint64_t bns = 0;
    bool has = b && value_ns(&b->bound, &bns) && bns > 0;
    double ratio = has ? (double)s->last.p99_ns / (double)bns : 0.0;
    bool better;
    if (!row->have_worst) {
      better = true;
    } else if (has != budgeted) {
      better = has;
    } else {
      better = has ? ratio > row->ratio : s->last.p99_ns > row->p99_ns;
    }
    if (!better) {
      continue;
    }
    row->have_worst = true;
    budgeted = has;
    snprintf(row->stage, sizeof(row->stage), "%s", s->name);
    row->p99_ns = s->last.p99_ns;
    row->have_budget = has;
    row->budget_ns = bns;
    row->ratio = ratio;
    snprintf(row->rule, sizeof(row->rule), "%s", b ? b->id : "");
  }
}

/* {"time_ns", "level", "prev_level", "rule", "stage", "value", "bound", "reason", and the
 * ninth column under its SQL name} of a level_changes row whose columns start at `c`: LEVEL_COLS
 * give "verdict", the JSON object the store kept (proto's printer wrote it), FLEET_LEVEL_COLS
 * "top_cause", the verdict's first cause and share only; null without one. */
static void level_change_json(jw_t *w, sqlite3_stmt *st, int c) {
  jw_s(w, "{\"time_ns\":");
  jw_fmt(w, "%lld", (long long)sqlite3_column_int64(st, c));
  jw_s(w, ",\"level\":");
  jw_str_or_null(w, level_name(sqlite3_column_int64(st, c + 1)));
  jw_s(w, ",\"prev_level\":");
  jw_str_or_null(w, level_name(sqlite3_column_int64(st, c + 2)));
  static const char *const keys[] = {
      ",\"rule\":", ",\"stage\":", ",\"value\":", ",\"bound\":", ",\"reason\":"};
  for (int k = 0; k < 5; k++) {
    jw_s(w, keys[k]);
    int col = c + 3 + k;
    if (sqlite3_column_type(st, col) == SQLITE_NULL) {
      jw_s(w, "null");
    } else if (k == 2 || k == 3) {
      jw_num(w, sqlite3_column_double(st, col));
    } else {
      jw_str(w, col_text(st, col));
    }
  }
  jw_fmt(w, ",\"%s\":", sqlite3_column_name(st, c + 8));
  const char *verdict = (const char *)sqlite3_column_text(st, c + 8);
  jw_s(w, verdict && *verdict ? verdict : "null");
  jw_s(w, "}");
}

#define LEVEL_COLS "time_ns, level, prev_level, rule, stage, value, bound, reason, verdict"
/* The fleet's last change: the verdict's first cause, not the whole verdict (the fleet lists
 * thousands of devices every 2 s). */
#define FLEET_LEVEL_COLS                                                                           \
  "time_ns, level, prev_level, rule, stage, value, bound, reason, CASE WHEN"                       \
  " json_array_length(verdict, '$.causes') > 0 THEN json_object('cause', json_extract(verdict,"    \
  " '$.causes[0].cause'), 'share', json_extract(verdict, '$.causes[0].share')) END AS top_cause"

void em_history_fleet(em_history_t *h, em_registry_t *reg, const em_query_t *q, uint64_t now_ns,
                      em_history_reply_t *out) {
  fleet_row_t *rows = calloc(q->limit, sizeof(*rows));
  if (!rows) {
    em_history_error(out, 500, "out of memory");
    return;
  }
  size_t n = 0;
  size_t total = 0;
  em_registry_lock(reg);
  for (size_t i = 0; i < reg->n_devices; i++) {
    const em_agg_device_t *d = reg->devices[i];
    const em_device_t *dev = d->dev;
    if ((q->have_name && fnmatch(q->name, dev->id, 0) != 0) ||
        !em_query_level_ok(q->level_mask, (int)dev->level)) {
      continue;
    }
    total++;
    if (n >= q->limit) {
      continue;
    }
    fleet_row_t *r = &rows[n++];
    snprintf(r->id, sizeof(r->id), "%s", dev->id);
    r->level = (int)dev->level;
    r->online = dev->have_status ? (dev->online ? 1 : 0) : -1;
    r->last_seen_ns = dev->last_seen_ns;
    r->have_birth = dev->have_birth;
    snprintf(r->board, sizeof(r->board), "%s", dev->board);
    snprintf(r->version, sizeof(r->version), "%s", dev->agent_version);
    worst_stage(d, r);
  }
  em_registry_unlock(reg);

  sqlite3_stmt *st = NULL;
  if (h) {
    begin_request(h);
    if (sqlite3_prepare_v2(h->db,
                           "SELECT " FLEET_LEVEL_COLS " FROM level_changes WHERE device = "
                           "(SELECT id FROM devices WHERE name = ?1) ORDER BY time_ns DESC LIMIT 1",
                           -1, &st, NULL) != SQLITE_OK) {
      st = NULL;
    }
  }
  jw_t w = jw_new();
  jw_s(&w, "{\"now_ns\":");
  jw_u64(&w, now_ns);
  jw_s(&w, ",\"total\":");
  jw_u64(&w, total);
  jw_fmt(&w, ",\"truncated\":%s,\"devices\":[", total > n ? "true" : "false");
  for (size_t i = 0; i < n; i++) {
    const fleet_row_t *r = &rows[i];
    jw_s(&w, i ? ",{\"id\":" : "{\"id\":");
    jw_str(&w, r->id);
    jw_s(&w, ",\"level\":");
    jw_str_or_null(&w, level_name(r->level));
    jw_s(&w, ",\"online\":");
    jw_s(&w, r->online < 0 ? "null" : r->online ? "true" : "false");
    jw_s(&w, ",\"last_seen_ns\":");
    if (r->last_seen_ns) {
      jw_u64(&w, r->last_seen_ns);
    } else {
      jw_s(&w, "null");
    }
    jw_s(&w, ",\"board\":");
    jw_str_or_null(&w, r->have_birth ? r->board : NULL);
    jw_s(&w, ",\"agent_version\":");
    jw_str_or_null(&w, r->have_birth ? r->version : NULL);
    jw_s(&w, ",\"worst_stage\":");
    if (r->have_worst) {
      jw_s(&w, "{\"stage\":");
      jw_str(&w, r->stage);
      jw_s(&w, ",\"p99_ns\":");
      jw_u64(&w, r->p99_ns);
      jw_s(&w, ",\"budget_ns\":");
      if (r->have_budget) {
        jw_u64(&w, r->budget_ns);
        jw_s(&w, ",\"ratio\":");
        jw_num(&w, r->ratio);
        jw_s(&w, ",\"rule\":");
        jw_str(&w, r->rule);
      } else {
        jw_s(&w, "null,\"ratio\":null,\"rule\":");
        jw_str_or_null(&w, r->rule[0] ? r->rule : NULL);
      }
      jw_s(&w, "}");
    } else {
      jw_s(&w, "null");
    }
    jw_s(&w, ",\"last_change\":");
    bool found = false;
    if (st) {
      sqlite3_reset(st);
      sqlite3_bind_text(st, 1, r->id, -1, SQLITE_STATIC);
      if (sqlite3_step(st) == SQLITE_ROW) {
        level_change_json(&w, st, 0);
        found = true;
      }
    }
    if (!found) {
      jw_s(&w, "null");
    }
    jw_s(&w, "}");
  }
  jw_s(&w, "]}");
  sqlite3_finalize(st);
  free(rows);
  reply_body(out, &w);
}

/* ---- /api/devices/<id>/history -------------------------------------------------------- */

typedef struct {
  int64_t id;
  char name[EM_PROTO_MAX_STAGE_BYTES + 1];
  bool have_budget;
  uint64_t budget_ns;
  size_t cur; /* Point being merged into hist. */
  em_histo_t *hist;
  uint64_t *count; /* Per point. */
  double *p50;
  double *p99;
  double *max;
} stage_series_t;

typedef struct {
  const grid_t *g;
  stage_series_t stages[EM_HISTORY_MAX_STAGES];
  size_t n_stages;
} device_windows_t;

static void series_flush(stage_series_t *s) {
  if (!s->hist) {
    return;
  }
  if (em_histo_count(s->hist) > 0) {
    s->count[s->cur] = em_histo_count(s->hist);
    s->p50[s->cur] = em_histo_quantile_ns(s->hist, 0.5);
    s->p99[s->cur] = em_histo_quantile_ns(s->hist, 0.99);
    s->max[s->cur] = (double)em_histo_max_ns(s->hist);
  }
  em_histo_free(s->hist);
  s->hist = NULL;
}

static void series_free(stage_series_t *s) {
  em_histo_free(s->hist);
  free(s->count);
  free(s->p50);
  free(s->p99);
  free(s->max);
}

static int device_window(void *ctx, int64_t device, int64_t stage, uint64_t time_ns,
                         const em_stage_t *w) {
  (void)device;
  device_windows_t *dw = ctx;
  const grid_t *g = dw->g;
  if (time_ns < g->from || time_ns >= g->to || w->count == 0) {
    return 0;
  }
  size_t pt = (size_t)((time_ns - g->from) / g->step);
  size_t at = find_id(dw->stages, dw->n_stages, sizeof(dw->stages[0]), stage);
  if (at == EM_HISTORY_MAX_STAGES) {
    return 0; /* Past the stage limit: left out. */
  }
  stage_series_t *s = &dw->stages[at];
  if (at == dw->n_stages) {
    memset(s, 0, sizeof(*s));
    s->id = stage;
    s->count = calloc(g->n, sizeof(*s->count));
    s->p50 = malloc(g->n * sizeof(double));
    s->p99 = malloc(g->n * sizeof(double));
    s->max = malloc(g->n * sizeof(double));
    if (!s->count || !s->p50 || !s->p99 || !s->max) {
      series_free(s);
      return -ENOMEM;
    }
    dw->n_stages++;
    for (size_t i = 0; i < g->n; i++) {
      s->p50[i] = s->p99[i] = s->max[i] = NAN;
    }
  }
  if (s->hist && s->cur != pt) {
    series_flush(s);
  }
  if (!s->hist) {
    if (em_histo_new(&s->hist) != 0) {
      return -ENOMEM;
    }
    s->cur = pt;
  }
  int rc = em_histo_add_stage(s->hist, w);
  return rc == -ENOMEM ? rc : 0;
}

/* A metric's per-point mean (weighted by the samples behind each value) and max. */
typedef struct {
  int64_t id;
  double *sum;
  double *weight;
  double *max;
} metric_series_t;

typedef struct {
  metric_series_t m[EM_HISTORY_MAX_METRICS];
  size_t n;
} metrics_t;

static int metric_add(metrics_t *ms, const grid_t *g, uint64_t time_ns, int64_t id, double mean,
                      double weight, double max) {
  if (time_ns < g->from || time_ns >= g->to || !isfinite(mean) || !(weight > 0)) {
    return 0;
  }
  size_t at = find_id(ms->m, ms->n, sizeof(ms->m[0]), id);
  if (at == EM_HISTORY_MAX_METRICS) {
    return 0; /* Past the metric limit: left out. */
  }
  metric_series_t *m = &ms->m[at];
  if (at == ms->n) {
    m->id = id;
    m->sum = calloc(g->n, sizeof(double));
    m->weight = calloc(g->n, sizeof(double));
    m->max = malloc(g->n * sizeof(double));
    if (!m->sum || !m->weight || !m->max) {
      free(m->sum);
      free(m->weight);
      free(m->max);
      return -ENOMEM;
    }
    for (size_t i = 0; i < g->n; i++) {
      m->max[i] = -INFINITY;
    }
    ms->n++;
  }
  size_t pt = (size_t)((time_ns - g->from) / g->step);
  m->sum[pt] += mean * weight;
  m->weight[pt] += weight;
  if (isfinite(max) && max > m->max[pt]) {
    m->max[pt] = max;
  } else if (!isfinite(max) && mean > m->max[pt]) {
    m->max[pt] = mean;
  }
  return 0;
}

typedef struct {
  metrics_t *ms;
  const grid_t *g;
} metric_rows_t;

/* A row of time_ns, metric id, mean, samples behind it, max (NULL: the mean). */
static int metric_row(void *ctx, sqlite3_stmt *st) {
  metric_rows_t *mr = ctx;
  double max = sqlite3_column_type(st, 4) == SQLITE_NULL ? NAN : sqlite3_column_double(st, 4);
  return metric_add(mr->ms, mr->g, (uint64_t)sqlite3_column_int64(st, 0),
                    sqlite3_column_int64(st, 1), sqlite3_column_double(st, 2),
                    sqlite3_column_double(st, 3), max);
}

/* Reads the data rows (raw or rolled up) of the grid's segments into ms. */
static int read_metrics(em_history_t *h, const grid_t *g, int64_t device, metrics_t *ms,
                        em_history_reply_t *out) {
  static const char *const raw =
      "SELECT d.time_ns, CAST(j.key AS INTEGER), j.value, "
      "CASE WHEN d.counts IS NULL THEN 1 ELSE coalesce(json_extract(d.counts, '$.\"' || j.key "
      "|| '\"'), d.n) END, NULL FROM data d, json_each(d.vals) j WHERE d.device = ?2 AND "
      "d.time_ns >= ?3 AND d.time_ns < ?4 AND ?1 = 0 AND j.type IN ('integer', 'real')";
  static const char *const rolled =
      "SELECT r.time_ns, CAST(j.key AS INTEGER), j.value, "
      "coalesce(json_extract(r.counts, '$.\"' || j.key || '\"'), r.n), "
      "json_extract(r.max, '$.\"' || j.key || '\"') FROM data_rollups r, json_each(r.mean) j "
      "WHERE r.step_s = ?1 AND r.device = ?2 AND r.time_ns >= ?3 AND r.time_ns < ?4 AND "
      "j.type IN ('integer', 'real')";
  metric_rows_t mr = {ms, g};
  for (size_t i = 0; i < g->n_segs; i++) {
    const seg_t *sg = &g->segs[i];
    int rc = run_query(h, sg->src == SRC_RAW ? raw : rolled, src_step_s[sg->src], device, sg->from,
                       sg->to, metric_row, &mr, out);
    if (rc != 0) {
      return rc;
    }
  }
  return 0;
}

/* Name of a row of a dictionary table (metrics or stages) into buf; "" when unknown. */
static void dict_name(em_history_t *h, const char *table, int64_t id, char *buf, size_t cap) {
  char sql[64];
  snprintf(sql, sizeof(sql), "SELECT name FROM %s WHERE id = ?1", table);
  sqlite3_stmt *st = NULL;
  buf[0] = '\0';
  if (sqlite3_prepare_v2(h->db, sql, -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_int64(st, 1, id);
    if (sqlite3_step(st) == SQLITE_ROW && col_text(st, 0)) {
      snprintf(buf, cap, "%s", col_text(st, 0));
    }
  }
  sqlite3_finalize(st);
}

static void jw_grid_times(jw_t *w, const grid_t *g) {
  jw_s(w, "\"t\":[");
  for (size_t i = 0; i < g->n; i++) {
    if (i) {
      jw_s(w, ",");
    }
    jw_u64(w, g->from + i * g->step);
  }
  jw_s(w, "]");
}

static void jw_doubles(jw_t *w, const char *key, const double *v, size_t n) {
  jw_fmt(w, ",\"%s\":[", key);
  for (size_t i = 0; i < n; i++) {
    if (i) {
      jw_s(w, ",");
    }
    jw_num(w, v[i]);
  }
  jw_s(w, "]");
}

/* Least-squares slope (per second) of a metric's point means; NaN with fewer than 2 points. */
static double slope_per_s(const grid_t *g, const metric_series_t *m) {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < g->n; i++) {
    if (m->weight[i] > 0) {
      double x = (double)i * (double)g->step / 1e9;
      double y = m->sum[i] / m->weight[i];
      n += 1;
      sx += x;
      sy += y;
      sxx += x * x;
      sxy += x * y;
    }
  }
  double den = n * sxx - sx * sx;
  return n >= 2 && den > 0 ? (n * sxy - sx * sy) / den : NAN;
}

/* Writes `key` and what put() makes of the one row of `sql` (bound: ?1 device, ?2 ns when it
 * has one), or null when there is none. Returns 0 or the failed statement's code (out says). */
static int one_row(em_history_t *h, const char *sql, int64_t device, int64_t ns, const char *key,
                   void (*put)(jw_t *w, sqlite3_stmt *st), jw_t *w, em_history_reply_t *out) {
  sqlite3_stmt *st;
  if (!prepare(h, sql, &st, out)) {
    return SQLITE_ERROR;
  }
  sqlite3_bind_int64(st, 1, device);
  if (sqlite3_bind_parameter_count(st) >= 2) {
    sqlite3_bind_int64(st, 2, ns);
  }
  int rc = sqlite3_step(st);
  jw_s(w, key);
  if (rc == SQLITE_ROW) {
    put(w, st);
  } else {
    jw_s(w, "null");
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
    step_failed(h, rc, out);
    return rc;
  }
  return 0;
}

static void put_level(jw_t *w, sqlite3_stmt *st) {
  jw_str_or_null(w, level_name(sqlite3_column_int64(st, 0)));
}

static void put_change(jw_t *w, sqlite3_stmt *st) {
  level_change_json(w, st, 0);
}

static int device_levels(em_history_t *h, int64_t device, const em_query_t *q, jw_t *w,
                         em_history_reply_t *out) {
  int rc = one_row(h,
                   "SELECT level FROM level_changes WHERE device = ?1 AND time_ns < ?2 "
                   "ORDER BY time_ns DESC LIMIT 1",
                   device, (int64_t)q->from_ns, ",\"level_at_from\":", put_level, w, out);
  if (rc != 0) {
    return rc;
  }
  sqlite3_stmt *st;
  if (!prepare(h,
               "SELECT " LEVEL_COLS " FROM level_changes WHERE device = ?1 AND time_ns >= ?2 "
               "AND time_ns < ?3 ORDER BY time_ns LIMIT ?4",
               &st, out)) {
    return SQLITE_ERROR;
  }
  sqlite3_bind_int64(st, 1, device);
  sqlite3_bind_int64(st, 2, (sqlite3_int64)q->from_ns);
  sqlite3_bind_int64(st, 3, (sqlite3_int64)q->to_ns);
  sqlite3_bind_int64(st, 4, EM_HISTORY_MAX_LEVELS + 1);
  jw_s(w, ",\"levels\":[");
  size_t n = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (n == EM_HISTORY_MAX_LEVELS) {
      n++;
      continue;
    }
    if (n++) {
      jw_s(w, ",");
    }
    level_change_json(w, st, 0);
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    step_failed(h, rc, out);
    return rc;
  }
  jw_fmt(w, "],\"levels_truncated\":%s", n > EM_HISTORY_MAX_LEVELS ? "true" : "false");
  /* The device's newest change with a verdict, whatever the range: the breach the device view
   * explains at its top. */
  return one_row(h,
                 "SELECT " LEVEL_COLS " FROM level_changes WHERE device = ?1 AND verdict IS NOT "
                 "NULL ORDER BY time_ns DESC LIMIT 1",
                 device, 0, ",\"latest_verdict\":", put_change, w, out);
}

static void render_history(em_history_t *h, const char *device, const em_query_t *q,
                           const grid_t *g, device_windows_t *dw, const metrics_t *ms,
                           int64_t dev_id, em_history_reply_t *out) {
  jw_t w = jw_new();
  jw_s(&w, "{\"device\":");
  jw_str(&w, device);
  jw_fmt(&w, ",\"from_ns\":%llu,\"to_ns\":%llu,\"step_ns\":%llu,\"source\":",
         (unsigned long long)q->from_ns, (unsigned long long)q->to_ns, (unsigned long long)g->step);
  jw_str(&w, grid_source(g));
  jw_s(&w, ",\"stages\":[");
  for (size_t i = 0; i < dw->n_stages; i++) {
    stage_series_t *s = &dw->stages[i];
    jw_s(&w, i ? ",{\"stage\":" : "{\"stage\":");
    jw_str(&w, s->name);
    jw_s(&w, ",\"budget_ns\":");
    if (s->have_budget) {
      jw_u64(&w, s->budget_ns);
    } else {
      jw_s(&w, "null");
    }
    jw_s(&w, ",");
    jw_grid_times(&w, g);
    jw_s(&w, ",\"count\":[");
    for (size_t k = 0; k < g->n; k++) {
      if (k) {
        jw_s(&w, ",");
      }
      jw_u64(&w, s->count[k]);
    }
    jw_s(&w, "]");
    jw_doubles(&w, "p50_ns", s->p50, g->n);
    jw_doubles(&w, "p99_ns", s->p99, g->n);
    jw_doubles(&w, "max_ns", s->max, g->n);
    jw_s(&w, "}");
  }
  jw_s(&w, "],\"metrics\":[");
  double slope = NAN;
  double *v = malloc(g->n * sizeof(double));
  for (size_t i = 0; i < ms->n && v; i++) {
    const metric_series_t *m = &ms->m[i];
    char name[EM_PROTO_MAX_NAME_BYTES + 1];
    dict_name(h, "metrics", m->id, name, sizeof(name));
    if (strcmp(name, EM_HISTORY_RSS_METRIC) == 0) {
      slope = slope_per_s(g, m);
    }
    jw_s(&w, i ? ",{\"name\":" : "{\"name\":");
    jw_str(&w, name);
    jw_s(&w, ",");
    jw_grid_times(&w, g);
    for (size_t k = 0; k < g->n; k++) {
      v[k] = m->weight[k] > 0 ? m->sum[k] / m->weight[k] : NAN;
    }
    jw_doubles(&w, "mean", v, g->n);
    for (size_t k = 0; k < g->n; k++) {
      v[k] = m->weight[k] > 0 ? m->max[k] : NAN;
    }
    jw_doubles(&w, "max", v, g->n);
    jw_s(&w, "}");
  }
  if (!v) {
    jw_fail(&w);
  }
  free(v);
  jw_s(&w, "],\"rss_slope_bytes_per_s\":");
  jw_num(&w, slope);
  if (device_levels(h, dev_id, q, &w, out) != 0) {
    em_buf_free(&w);
    return;
  }
  jw_s(&w, "}");
  reply_body(out, &w);
}

/* Names the stages, with their budgets from the device's birth in the registry. */
static void name_stages(em_history_t *h, em_registry_t *reg, const char *device,
                        device_windows_t *dw) {
  for (size_t i = 0; i < dw->n_stages; i++) {
    dict_name(h, "stages", dw->stages[i].id, dw->stages[i].name, sizeof(dw->stages[i].name));
  }
  if (!reg) {
    return;
  }
  em_registry_lock(reg);
  const em_agg_device_t *d = em_registry_find(reg, device);
  for (size_t i = 0; d && i < dw->n_stages; i++) {
    stage_series_t *s = &dw->stages[i];
    const em_dict_budget_t *b = em_dict_stage_budget(d->dev, s->name);
    s->have_budget = b && value_ns(&b->bound, &s->budget_ns) && s->budget_ns > 0;
  }
  em_registry_unlock(reg);
}

void em_history_device(em_history_t *h, em_registry_t *reg, const char *device, const em_query_t *q,
                       em_history_reply_t *out) {
  begin_request(h);
  sqlite3_stmt *st;
  if (!prepare(h, "SELECT id FROM devices WHERE name = ?1", &st, out)) {
    return;
  }
  sqlite3_bind_text(st, 1, device, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  int64_t dev_id = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW) {
    if (rc == SQLITE_DONE) {
      em_history_error(out, 404, "no such device");
    } else {
      step_failed(h, rc, out);
    }
    return;
  }
  marks_t marks = read_marks(h);
  grid_t g;
  make_grid(&g, q->from_ns, q->to_ns, q->points, 0, &marks);
  device_windows_t *dw = calloc(1, sizeof(*dw));
  metrics_t *ms = calloc(1, sizeof(*ms));
  if (!dw || !ms) {
    free(dw);
    free(ms);
    em_history_error(out, 500, "out of memory");
    return;
  }
  dw->g = &g;
  uint64_t data_to;
  if (each_window(h, &g, &dev_id, 1, 1, &data_to, device_window, dw, out) == 0 &&
      read_metrics(h, &g, dev_id, ms, out) == 0) {
    for (size_t i = 0; i < dw->n_stages; i++) {
      series_flush(&dw->stages[i]);
    }
    name_stages(h, reg, device, dw);
    render_history(h, device, q, &g, dw, ms, dev_id, out);
  }
  for (size_t i = 0; i < dw->n_stages; i++) {
    series_free(&dw->stages[i]);
  }
  for (size_t i = 0; i < ms->n; i++) {
    free(ms->m[i].sum);
    free(ms->m[i].weight);
    free(ms->m[i].max);
  }
  free(dw);
  free(ms);
}

/* ---- /api/latency --------------------------------------------------------------------- */

typedef struct {
  int64_t id;
  char name[EM_PROTO_MAX_STAGE_BYTES + 1];
  em_histo_t **points; /* Per series point. */
  em_histo_t **devs;   /* Per listed device. */
} fleet_stage_t;

/* A matched device: its id and its place in name order (listed when below n_listed). */
typedef struct {
  int64_t id;
  size_t slot;
} dev_slot_t;

typedef struct {
  const grid_t *g;
  dev_slot_t *map; /* Matched devices, ascending ids. */
  size_t n_ids;
  size_t n_listed;
  int64_t only_stage; /* >= 0: that stage only. */
  uint64_t data_to;   /* The merged data ends here (to_ns, or the minute watermark). */
  fleet_stage_t stages[EM_HISTORY_MAX_STAGES];
  size_t n_stages;
} fleet_windows_t;

static int cmp_slot(const void *a, const void *b) {
  int64_t x = ((const dev_slot_t *)a)->id;
  int64_t y = ((const dev_slot_t *)b)->id;
  return x < y ? -1 : x > y;
}

static int fleet_window(void *ctx, int64_t device, int64_t stage, uint64_t time_ns,
                        const em_stage_t *w) {
  fleet_windows_t *fw = ctx;
  const grid_t *g = fw->g;
  if (time_ns < g->from || time_ns >= g->to || w->count == 0 ||
      (fw->only_stage >= 0 && stage != fw->only_stage)) {
    return 0;
  }
  dev_slot_t key = {device, 0};
  const dev_slot_t *hit = bsearch(&key, fw->map, fw->n_ids, sizeof(key), cmp_slot);
  if (!hit) {
    return 0;
  }
  size_t slot = hit->slot;
  size_t at = find_id(fw->stages, fw->n_stages, sizeof(fw->stages[0]), stage);
  if (at == EM_HISTORY_MAX_STAGES) {
    return 0; /* Past the stage limit: left out. */
  }
  fleet_stage_t *s = &fw->stages[at];
  if (at == fw->n_stages) {
    s->id = stage;
    s->points = calloc(g->n, sizeof(*s->points));
    s->devs = calloc(fw->n_listed ? fw->n_listed : 1, sizeof(*s->devs));
    if (!s->points || !s->devs) {
      free(s->points);
      free(s->devs);
      return -ENOMEM;
    }
    fw->n_stages++;
  }
  size_t pt = (size_t)((time_ns - g->from) / g->step);
  em_histo_t **targets[2] = {&s->points[pt], slot < fw->n_listed ? &s->devs[slot] : NULL};
  em_histo_t *into[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    if (targets[k] && !*targets[k] && em_histo_new(targets[k]) != 0) {
      return -ENOMEM;
    }
    into[k] = targets[k] ? *targets[k] : NULL;
  }
  /* One check of the window for both: the fleet series point and the device's total. */
  return em_histo_add_stage_each(into, 2, w) == -ENOMEM ? -ENOMEM : 0;
}

/* Frees what fw holds (not fw itself); NULL is a no-op. */
static void fleet_windows_free(fleet_windows_t *fw, size_t n_points) {
  if (!fw) {
    return;
  }
  for (size_t i = 0; i < fw->n_stages; i++) {
    for (size_t p = 0; fw->stages[i].points && p < n_points; p++) {
      em_histo_free(fw->stages[i].points[p]);
    }
    for (size_t d = 0; fw->stages[i].devs && d < fw->n_listed; d++) {
      em_histo_free(fw->stages[i].devs[d]);
    }
    free(fw->stages[i].points);
    free(fw->stages[i].devs);
  }
  free(fw->map);
  fw->map = NULL;
  fw->n_stages = 0;
}

/* Moves or merges *src into *dst (src is NULL after). Returns 0 or -ENOMEM. */
static int take_histo(em_histo_t **dst, em_histo_t **src) {
  int rc = 0;
  if (!*dst) {
    *dst = *src;
  } else if (*src) {
    rc = em_histo_merge(*dst, *src);
    em_histo_free(*src);
  }
  *src = NULL;
  return rc;
}

/* Merges the stages of `from` into `into` (same grid and devices). Returns 0 or -ENOMEM. */
static int fleet_windows_merge(fleet_windows_t *into, fleet_windows_t *from) {
  for (size_t i = 0; i < from->n_stages; i++) {
    fleet_stage_t *s = &from->stages[i];
    size_t at = find_id(into->stages, into->n_stages, sizeof(into->stages[0]), s->id);
    if (at == EM_HISTORY_MAX_STAGES) {
      continue; /* Past the stage limit: left out. */
    }
    fleet_stage_t *d = &into->stages[at];
    if (at == into->n_stages) { /* A stage only the other half saw: moved whole. */
      *d = *s;
      s->points = NULL;
      s->devs = NULL;
      into->n_stages++;
      continue;
    }
    for (size_t p = 0; p < into->g->n; p++) {
      if (take_histo(&d->points[p], &s->points[p]) != 0) {
        return -ENOMEM;
      }
    }
    for (size_t k = 0; k < into->n_listed; k++) {
      if (take_histo(&d->devs[k], &s->devs[k]) != 0) {
        return -ENOMEM;
      }
    }
  }
  return 0;
}

/* The second half of the devices, read on the twin connection by a worker thread. */
typedef struct {
  em_history_t *twin;
  const int64_t *devs;
  size_t n_devs;
  size_t max_raw;
  fleet_windows_t fw;
  em_history_reply_t out;
  int rc;
} fleet_half_t;

static void *fleet_half_run(void *arg) {
  fleet_half_t *w = arg;
  w->rc = each_window(w->twin, w->fw.g, w->devs, w->n_devs, w->max_raw, &w->fw.data_to,
                      fleet_window, &w->fw, &w->out);
  return NULL;
}

/*
 * Every stage row of the matched devices ids[0..n) merged into fw. Past 2 * GROUP_DEVICES
 * devices the second half is read on the twin connection by a thread of its own while this one
 * reads the first (the bytes of a 7-day fleet answer, ~700 MB of hour rows at 1000 devices,
 * are read and merged on two cores), then its histograms are merged into fw: counts add, so
 * the answer is the same as one reader's. Each device's rows are read by one statement, as
 * with one reader. Returns 0 or nonzero with the reply set.
 */
static int fleet_windows_read(em_history_t *h, const grid_t *g, const int64_t *ids, size_t n,
                              fleet_windows_t *fw, em_history_reply_t *out) {
  size_t max_raw = n > EM_HISTORY_LATENCY_RAW_DEVICES ? 0 : EM_HISTORY_LATENCY_RAW_DEVICES;
  fleet_half_t *w = n >= 2 * GROUP_DEVICES && h->twin ? calloc(1, sizeof(*w)) : NULL;
  pthread_t tid;
  if (w) {
    size_t half = n / 2;
    w->twin = h->twin;
    w->devs = ids + half;
    w->n_devs = n - half;
    w->max_raw = max_raw;
    w->fw = *fw;
    w->fw.n_stages = 0;
    w->twin->deadline_ns = h->deadline_ns;
    w->twin->timed_out = false;
    if (pthread_create(&tid, NULL, fleet_half_run, w) == 0) {
      n = half;
    } else {
      free(w);
      w = NULL;
    }
  }
  int rc = each_window(h, g, ids, n, max_raw, &fw->data_to, fleet_window, fw, out);
  if (w) {
    pthread_join(tid, NULL);
    if (rc == 0 && w->rc != 0) {
      *out = w->out;
      w->out.body = NULL;
      rc = w->rc;
    } else if (rc == 0 && fleet_windows_merge(fw, &w->fw) != 0) {
      em_history_error(out, 500, "out of memory");
      rc = SQLITE_NOMEM;
    }
    free(w->out.body);
    w->fw.map = NULL; /* Shared with fw. */
    fleet_windows_free(&w->fw, g->n);
    free(w);
  }
  return rc;
}

/* The matched devices (ids ascending, names) from the store's devices table. */
static int match_devices(em_history_t *h, const em_query_t *q, int64_t **ids, char (**names)[64],
                         size_t *n, em_history_reply_t *out) {
  sqlite3_stmt *st;
  if (!prepare(h, "SELECT id, name, level FROM devices ORDER BY name", &st, out)) {
    return SQLITE_ERROR;
  }
  size_t cap = 0;
  *n = 0;
  *ids = NULL;
  *names = NULL;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *name = col_text(st, 1);
    int level = sqlite3_column_type(st, 2) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 2);
    if (!name || (q->have_name && fnmatch(q->name, name, 0) != 0) ||
        !em_query_level_ok(q->level_mask, level)) {
      continue;
    }
    if (*n == cap) {
      cap = cap ? cap * 2 : 256;
      int64_t *ni = realloc(*ids, cap * sizeof(**ids));
      if (ni) {
        *ids = ni;
      }
      char(*nn)[64] = realloc(*names, cap * sizeof(**names));
      if (nn) {
        *names = nn;
      }
      if (!ni || !nn) {
        sqlite3_finalize(st);
        em_history_error(out, 500, "out of memory");
        return SQLITE_NOMEM;
      }
    }
    (*ids)[*n] = sqlite3_column_int64(st, 0);
    snprintf((*names)[*n], 64, "%s", name);
    (*n)++;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    step_failed(h, rc, out);
    return rc;
  }
  return 0;
}

static void jw_histo_figures(jw_t *w, const em_histo_t *x) {
  jw_s(w, "\"count\":");
  jw_u64(w, em_histo_count(x));
  jw_s(w, ",\"p50_ns\":");
  jw_num(w, em_histo_quantile_ns(x, 0.5));
  jw_s(w, ",\"p99_ns\":");
  jw_num(w, em_histo_quantile_ns(x, 0.99));
  jw_s(w, ",\"max_ns\":");
  jw_u64(w, em_histo_max_ns(x));
}

static void render_latency(em_history_t *h, const em_query_t *q, const grid_t *g,
                           fleet_windows_t *fw, char (*names)[64], em_history_reply_t *out) {
  jw_t w = jw_new();
  jw_fmt(&w, "{\"from_ns\":%llu,\"to_ns\":%llu,\"step_ns\":%llu,\"source\":",
         (unsigned long long)q->from_ns, (unsigned long long)q->to_ns, (unsigned long long)g->step);
  jw_str(&w, grid_source(g));
  jw_fmt(&w, ",\"data_to_ns\":%llu", (unsigned long long)fw->data_to);
  jw_fmt(&w, ",\"devices_matched\":%zu,\"truncated\":%s,\"stages\":[", fw->n_ids,
         fw->n_ids > fw->n_listed ? "true" : "false");
  em_histo_t *total = NULL;
  bool first = true;
  for (size_t i = 0; i < fw->n_stages; i++) {
    fleet_stage_t *s = &fw->stages[i];
    em_histo_free(total);
    total = NULL;
    if (em_histo_new(&total) != 0) {
      jw_fail(&w);
      break;
    }
    for (size_t p = 0; p < g->n; p++) {
      if (s->points[p] && em_histo_merge(total, s->points[p]) != 0) {
        jw_fail(&w);
      }
    }
    if (em_histo_count(total) == 0) {
      continue;
    }
    dict_name(h, "stages", s->id, s->name, sizeof(s->name));
    jw_s(&w, first ? "{\"stage\":" : ",{\"stage\":");
    first = false;
    jw_str(&w, s->name);
    jw_s(&w, ",\"fleet\":{");
    jw_histo_figures(&w, total);
    jw_s(&w, ",\"p90_ns\":");
    jw_num(&w, em_histo_quantile_ns(total, 0.9));
    jw_s(&w, ",\"p999_ns\":");
    jw_num(&w, em_histo_quantile_ns(total, 0.999));
    jw_s(&w, "},\"series\":{");
    jw_grid_times(&w, g);
    double *v = malloc(g->n * sizeof(double));
    if (!v) {
      jw_fail(&w);
      break;
    }
    const double qs[2] = {0.5, 0.99};
    const char *keys[2] = {"p50_ns", "p99_ns"};
    for (int k = 0; k < 2; k++) {
      for (size_t p = 0; p < g->n; p++) {
        v[p] = s->points[p] ? em_histo_quantile_ns(s->points[p], qs[k]) : NAN;
      }
      jw_doubles(&w, keys[k], v, g->n);
    }
    free(v);
    jw_s(&w, "},\"devices\":[");
    bool dfirst = true;
    for (size_t d = 0; d < fw->n_listed; d++) {
      if (!s->devs[d]) {
        continue;
      }
      jw_s(&w, dfirst ? "{\"id\":" : ",{\"id\":");
      dfirst = false;
      jw_str(&w, names[d]);
      jw_s(&w, ",");
      jw_histo_figures(&w, s->devs[d]);
      jw_s(&w, "}");
    }
    jw_s(&w, "]}");
  }
  em_histo_free(total);
  jw_s(&w, "]}");
  reply_body(out, &w);
}

void em_history_latency(em_history_t *h, const em_query_t *q, em_history_reply_t *out) {
  begin_request(h);
  int64_t *ids = NULL;
  char(*names)[64] = NULL;
  size_t n = 0;
  grid_t g;
  memset(&g, 0, sizeof(g));
  fleet_windows_t *fw = NULL;
  if (match_devices(h, q, &ids, &names, &n, out) != 0) {
    goto done;
  }
  fw = calloc(1, sizeof(*fw));
  if (fw) {
    fw->map = malloc((n ? n : 1) * sizeof(*fw->map));
  }
  if (!fw || !fw->map) {
    em_history_error(out, 500, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    fw->map[i] = (dev_slot_t){ids[i], i};
  }
  qsort(fw->map, n, sizeof(*fw->map), cmp_slot);
  fw->n_ids = n;
  fw->n_listed = n < q->limit ? n : q->limit;
  fw->only_stage = -1;
  if (q->have_stage) {
    sqlite3_stmt *st;
    if (!prepare(h, "SELECT id FROM stages WHERE name = ?1", &st, out)) {
      goto done;
    }
    sqlite3_bind_text(st, 1, q->stage, -1, SQLITE_STATIC);
    fw->only_stage = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : INT64_MAX;
    sqlite3_finalize(st);
  }
  marks_t marks = read_marks(h);
  make_grid(&g, q->from_ns, q->to_ns, EM_HISTORY_LATENCY_POINTS, 60, &marks);
  fw->g = &g;
  if (fleet_windows_read(h, &g, ids, n, fw, out) == 0) {
    render_latency(h, q, &g, fw, names, out);
  }
done:
  fleet_windows_free(fw, g.n);
  free(fw);
  free(ids);
  free(names);
}
