/*
 * rollup.c - minute and hour rollups of the store's raw rows (see rollup.h; the tables and
 * their rules are in SCHEMA.md, "Rollups").
 *
 * Design notes.
 *  1. One step of one device is rolled by roll_step(): a minute reads the device's raw
 *     stage_windows and data rows of the minute through their (device, time_ns) indexes, an
 *     hour reads the device's 60 minute rollups through the rollup tables' primary keys. Both
 *     sources have the same columns, so one code path merges either: stage rows are decoded
 *     (buckets.h) and merged per stage with em_histo (exact: counts added index by index at the
 *     common scale), data rows' values are summed per metric with their sample counts.
 *  2. Steps are walked in time order with a skip-ahead: the next step rolled is the one
 *     holding the earliest row at or after the watermark (one index seek per device and
 *     table), so a gap (an outage, a device whose clock said 1970) costs nothing.
 *  3. A rolled bucket list longer than EM_PROTO_MAX_BUCKETS (the blob's bound) is downscaled,
 *     index i to i >> 1 per scale step, as OpenTelemetry merges; percentiles then keep the
 *     error of the coarser scale.
 *  4. Values objects are parsed by a small strict parser: an object of "<integer id>": value
 *     members; a number is used, a string or literal skipped, anything else (a nested value,
 *     bad syntax) makes the row malformed and left out (counted in the report).
 *
 * Owns its prepared statements and scratch buffers; the connection is the store's.
 */
#define _POSIX_C_SOURCE 200809L
#include "rollup.h"

#include "buckets.h"

#include <buf.h>
#include <errno.h>
#include <histo.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
  Q_DEVICES,
  Q_FIRST_DATA,
  Q_FIRST_WINDOW,
  Q_FIRST_MIN_DATA,
  Q_FIRST_MIN_STAGE,
  Q_RAW_DATA,
  Q_RAW_WINDOWS,
  Q_MIN_DATA,
  Q_MIN_STAGES,
  Q_PUT_STAGE,
  Q_PUT_DATA,
  Q_DEL_STAGE,
  Q_DEL_DATA,
  Q_DIRTY_LIST,
  Q_DIRTY_DEL,
  Q_DIRTY_ADD,
  Q_META_GET,
  Q_META_SET,
  Q_COUNT
};

/* Data sources return (n, values, counts, max); stage sources (stage, count, sum_ns, min_ns,
 * max_ns, scale, zero_count, buckets). */
static const char *const q_sql[Q_COUNT] = {
    [Q_DEVICES] = "SELECT id FROM devices ORDER BY id",
    [Q_FIRST_DATA] = "SELECT min(time_ns) FROM data WHERE device = ?1 AND time_ns >= ?2",
    [Q_FIRST_WINDOW] = "SELECT min(time_ns) FROM stage_windows WHERE device = ?1 AND time_ns >= ?2",
    [Q_FIRST_MIN_DATA] = "SELECT min(time_ns) FROM data_rollups WHERE step_s = 60 AND device = ?1"
                         " AND time_ns >= ?2",
    [Q_FIRST_MIN_STAGE] = "SELECT min(time_ns) FROM stage_rollups WHERE step_s = 60 AND device = ?1"
                          " AND time_ns >= ?2",
    [Q_RAW_DATA] = "SELECT n, vals, counts, NULL FROM data WHERE device = ?1 AND time_ns >= ?2"
                   " AND time_ns < ?3",
    [Q_RAW_WINDOWS] = "SELECT stage, count, sum_ns, min_ns, max_ns, scale, zero_count, buckets"
                      " FROM stage_windows WHERE device = ?1 AND time_ns >= ?2 AND time_ns < ?3",
    [Q_MIN_DATA] = "SELECT n, mean, counts, max FROM data_rollups WHERE step_s = 60"
                   " AND device = ?1 AND time_ns >= ?2 AND time_ns < ?3",
    [Q_MIN_STAGES] = "SELECT stage, count, sum_ns, min_ns, max_ns, scale, zero_count, buckets"
                     " FROM stage_rollups WHERE step_s = 60 AND device = ?1 AND time_ns >= ?2"
                     " AND time_ns < ?3",
    [Q_PUT_STAGE] = "INSERT OR REPLACE INTO stage_rollups(step_s, device, stage, time_ns, count,"
                    " sum_ns, min_ns, max_ns, scale, zero_count, buckets)"
                    " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    [Q_PUT_DATA] = "INSERT OR REPLACE INTO data_rollups(step_s, device, time_ns, n, mean, max,"
                   " counts) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [Q_DEL_STAGE] = "DELETE FROM stage_rollups WHERE step_s = ?1 AND device = ?2 AND time_ns = ?3",
    [Q_DEL_DATA] = "DELETE FROM data_rollups WHERE step_s = ?1 AND device = ?2 AND time_ns = ?3",
    [Q_DIRTY_LIST] = "SELECT device, time_ns FROM rollup_dirty ORDER BY device, time_ns LIMIT ?1",
    [Q_DIRTY_DEL] = "DELETE FROM rollup_dirty WHERE device = ?1 AND time_ns = ?2",
    [Q_DIRTY_ADD] =
        "INSERT INTO rollup_dirty(device, time_ns) VALUES(?1, ?2) ON CONFLICT DO NOTHING",
    [Q_META_GET] = "SELECT value FROM meta WHERE key = ?1",
    [Q_META_SET] = "INSERT INTO meta(key, value) VALUES(?1, ?2) ON CONFLICT(key) DO UPDATE SET"
                   " value = excluded.value",
};

/* One metric of one step: sum of value x samples, samples, max. */
typedef struct {
  int64_t id;
  double sum;
  double weight;
  double max;
} metric_acc_t;

/* One stage of one step. */
typedef struct {
  int64_t stage;
  em_histo_t *h;
} stage_acc_t;

/* A parsed (id, number) pair of a values object. */
typedef struct {
  int64_t id;
  double v;
} pair_t;

#define MAX_PAIRS 512 /* Members of one values object kept; more make the row malformed. */
/* A data rollup's three values objects with their NULs: each member at most 48 bytes
 * (,"<int64>":<%.17g>), braces and NUL 3 more per object. */
#define JSON_MAX_BYTES (3u * (EM_ROLLUP_MAX_METRICS * 48u + 4u))

struct em_rollup {
  sqlite3 *db;
  sqlite3_stmt *q[Q_COUNT];
  bool wm_known;  /* The committed minute watermark exists. */
  int64_t wm_1m;  /* Committed: minutes before it are rolled, */
  int64_t cur_1m; /* and of the minute at it, the devices with id <= cur_1m. */
  int64_t *devices;
  size_t n_devices, cap_devices;
  metric_acc_t metrics[EM_ROLLUP_MAX_METRICS];
  size_t n_metrics;
  stage_acc_t *stages;
  size_t n_stages, cap_stages;
  pair_t vals[MAX_PAIRS], counts[MAX_PAIRS], maxes[MAX_PAIRS];
  em_bucket_t decoded[EM_PROTO_MAX_BUCKETS];
  em_bucket_t out[EM_HISTO_MAX_SPAN];
  size_t n_out;
  uint8_t blob[EM_BUCKETS_BLOB_MAX];
  em_buf_t json; /* The three values objects of a data rollup, NUL-separated. */
  /* Idle: the last committed pass left nothing to do, at closed minute idle_closed, and no
   * dirty minute was noted since (em_rollup_has_work()). */
  bool idle, pass_idle;
  int64_t idle_closed, pass_closed;
  uint64_t noted; /* Dirty minutes noted since the last pass began. */
  int64_t t_end;  /* The pass's budget ends (CLOCK_MONOTONIC), */
  bool worked;    /* once it has rolled at least one device's step. */
};

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* Whether the pass should stop: its budget is spent, and it did something (so that every pass
 * makes progress, whatever the budget). */
static bool spent(const em_rollup_t *r) {
  return r->worked && mono_ns() >= r->t_end;
}

static int64_t floor_to(int64_t t, int64_t step) {
  return t >= 0 ? t / step * step : -((-t + step - 1) / step) * step;
}

static int64_t clamp_u64(uint64_t v) {
  return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
}

/* --- statements -------------------------------------------------------------------------- */

/* Steps a write statement to completion and resets it. Returns 0 or an SQLite code. */
static int exec_stmt(sqlite3_stmt *st) {
  int rc = sqlite3_step(st);
  while (rc == SQLITE_ROW) {
    rc = sqlite3_step(st);
  }
  int rrc = sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  return rc == SQLITE_DONE ? 0 : (rrc != SQLITE_OK ? rrc : rc);
}

static int meta_get(em_rollup_t *r, const char *key, int64_t *value, bool *found) {
  sqlite3_stmt *st = r->q[Q_META_GET];
  sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  *found = rc == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER;
  if (rc == SQLITE_ROW) {
    *value = sqlite3_column_int64(st, 0);
    rc = sqlite3_step(st);
  }
  int rrc = sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  return rc == SQLITE_DONE ? 0 : (rrc != SQLITE_OK ? rrc : rc);
}

static int meta_set(em_rollup_t *r, const char *key, int64_t value) {
  sqlite3_stmt *st = r->q[Q_META_SET];
  sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, value);
  return exec_stmt(st);
}

int em_rollup_reload(em_rollup_t *r, bool committed) {
  r->idle = committed && r->pass_idle && r->noted == 0;
  r->idle_closed = r->pass_closed;
  r->pass_idle = false;
  bool found;
  r->cur_1m = 0;
  int rc = meta_get(r, "rollup_1m_ns", &r->wm_1m, &r->wm_known);
  return rc ? rc : meta_get(r, "rollup_1m_device", &r->cur_1m, &found);
}

int em_rollup_new(em_rollup_t **out, sqlite3 *db) {
  *out = NULL;
  em_rollup_t *r = calloc(1, sizeof(*r));
  if (!r) {
    return -ENOMEM;
  }
  r->db = db;
  em_buf_init(&r->json, JSON_MAX_BYTES);
  for (int i = 0; i < Q_COUNT; i++) {
    if (sqlite3_prepare_v3(db, q_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &r->q[i], NULL) !=
        SQLITE_OK) {
      em_rollup_free(r);
      return -EIO;
    }
  }
  if (em_rollup_reload(r, false) != 0) {
    em_rollup_free(r);
    return -EIO;
  }
  *out = r;
  return 0;
}

void em_rollup_free(em_rollup_t *r) {
  if (!r) {
    return;
  }
  for (int i = 0; i < Q_COUNT; i++) {
    sqlite3_finalize(r->q[i]);
  }
  for (size_t i = 0; i < r->cap_stages; i++) {
    em_histo_free(r->stages[i].h);
  }
  free(r->stages);
  free(r->devices);
  em_buf_free(&r->json);
  free(r);
}

int em_rollup_note_raw(em_rollup_t *r, int64_t device, int64_t time_ns) {
  int64_t t0 = floor_to(time_ns, EM_ROLLUP_MINUTE_NS);
  if (!r->wm_known || t0 > r->wm_1m || (t0 == r->wm_1m && device > r->cur_1m)) {
    return 0;
  }
  sqlite3_stmt *st = r->q[Q_DIRTY_ADD];
  sqlite3_bind_int64(st, 1, device);
  sqlite3_bind_int64(st, 2, t0);
  r->noted++;
  r->idle = false;
  return exec_stmt(st);
}

static int64_t closed_minute(int64_t now_real_ns) {
  return floor_to(now_real_ns - (int64_t)EM_ROLLUP_GRACE_NS, EM_ROLLUP_MINUTE_NS);
}

bool em_rollup_has_work(const em_rollup_t *r, int64_t now_real_ns) {
  return !r->idle || closed_minute(now_real_ns) != r->idle_closed;
}

/* --- values objects ---------------------------------------------------------------------- */

static const char *skip_ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) {
    p++;
  }
  return p;
}

/* Reads a JSON string at *pp (its opening quote). *id and *is_id: its text as a decimal
 * integer id, when it is one. Returns false on bad syntax. */
static bool read_string(const char **pp, const char *end, int64_t *id, bool *is_id) {
  const char *p = *pp + 1;
  int64_t v = 0;
  size_t digits = 0;
  bool only_digits = true;
  while (p < end && *p != '"') {
    if ((unsigned char)*p < 0x20) {
      return false;
    }
    if (*p == '\\') {
      only_digits = false;
      if (++p >= end) {
        return false;
      }
      if (*p == 'u') {
        for (int i = 0; i < 4; i++) {
          if (++p >= end ||
              !((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F'))) {
            return false;
          }
        }
      } else if (!strchr("\"\\/bfnrt", *p)) {
        return false;
      }
    } else if (*p >= '0' && *p <= '9' && digits < 18) {
      v = v * 10 + (*p - '0');
      digits++;
    } else {
      only_digits = false;
    }
    p++;
  }
  if (p >= end) {
    return false;
  }
  *pp = p + 1;
  *id = v;
  *is_id = only_digits && digits > 0;
  return true;
}

/* Reads a JSON number at *pp (strict grammar). Returns false on bad syntax. */
static bool read_number(const char **pp, const char *end, double *out) {
  const char *p = *pp;
  const char *start = p;
  if (p < end && *p == '-') {
    p++;
  }
  if (p < end && *p == '0') {
    p++;
  } else if (p < end && *p >= '1' && *p <= '9') {
    while (p < end && *p >= '0' && *p <= '9') {
      p++;
    }
  } else {
    return false;
  }
  if (p < end && *p == '.') {
    const char *f = ++p;
    while (p < end && *p >= '0' && *p <= '9') {
      p++;
    }
    if (p == f) {
      return false;
    }
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    p++;
    if (p < end && (*p == '+' || *p == '-')) {
      p++;
    }
    const char *e = p;
    while (p < end && *p >= '0' && *p <= '9') {
      p++;
    }
    if (p == e) {
      return false;
    }
  }
  char buf[64];
  size_t len = (size_t)(p - start);
  if (len >= sizeof(buf)) {
    return false;
  }
  memcpy(buf, start, len);
  buf[len] = '\0';
  *out = strtod(buf, NULL);
  *pp = p;
  return true;
}

/*
 * Parses a values object {"<id>": value, ...} into pairs (at most MAX_PAIRS): members whose
 * key is a decimal id and whose value is a finite number; strings, true, false and null are
 * skipped. Returns the number of pairs, or -1 for anything else (bad syntax, nested values,
 * too many members). NULL text is an empty object.
 */
static int parse_values(const char *text, size_t len, pair_t *pairs) {
  if (!text) {
    return 0;
  }
  const char *p = skip_ws(text, text + len);
  const char *end = text + len;
  if (p >= end || *p != '{') {
    return -1;
  }
  p = skip_ws(p + 1, end);
  int n = 0;
  if (p < end && *p == '}') {
    return skip_ws(p + 1, end) == end ? 0 : -1;
  }
  for (;;) {
    int64_t id = 0;
    bool is_id = false;
    if (p >= end || *p != '"' || !read_string(&p, end, &id, &is_id)) {
      return -1;
    }
    p = skip_ws(p, end);
    if (p >= end || *p != ':') {
      return -1;
    }
    p = skip_ws(p + 1, end);
    if (p >= end) {
      return -1;
    }
    double v = 0;
    bool number = false;
    if (*p == '"') {
      int64_t ignored;
      bool ignored_id;
      if (!read_string(&p, end, &ignored, &ignored_id)) {
        return -1;
      }
    } else if ((size_t)(end - p) >= 4 && (memcmp(p, "true", 4) == 0 || memcmp(p, "null", 4) == 0)) {
      p += 4;
    } else if ((size_t)(end - p) >= 5 && memcmp(p, "false", 5) == 0) {
      p += 5;
    } else if (read_number(&p, end, &v)) {
      number = isfinite(v);
    } else {
      return -1;
    }
    if (number && is_id) {
      if (n >= MAX_PAIRS) {
        return -1;
      }
      pairs[n++] = (pair_t){.id = id, .v = v};
    }
    p = skip_ws(p, end);
    if (p < end && *p == ',') {
      p = skip_ws(p + 1, end);
      continue;
    }
    if (p < end && *p == '}') {
      return skip_ws(p + 1, end) == end ? n : -1;
    }
    return -1;
  }
}

static const pair_t *pair_find(const pair_t *pairs, int n, int64_t id) {
  for (int i = 0; i < n; i++) {
    if (pairs[i].id == id) {
      return &pairs[i];
    }
  }
  return NULL;
}

/* The step's accumulator of metric id, inserted in id order; NULL when full. */
static metric_acc_t *metric_acc(em_rollup_t *r, int64_t id) {
  size_t lo = 0;
  size_t hi = r->n_metrics;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (r->metrics[mid].id == id) {
      return &r->metrics[mid];
    }
    if (r->metrics[mid].id < id) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (r->n_metrics >= EM_ROLLUP_MAX_METRICS) {
    return NULL;
  }
  memmove(&r->metrics[lo + 1], &r->metrics[lo], (r->n_metrics - lo) * sizeof(r->metrics[0]));
  r->metrics[lo] = (metric_acc_t){.id = id, .max = -INFINITY};
  r->n_metrics++;
  return &r->metrics[lo];
}

/* Adds one data source row: n rows behind it, its values (means when counts is not NULL),
 * per-metric sample counts (NULL: n each), per-metric max (NULL: the values). Returns false
 * when the row is malformed (nothing of it added). */
static bool add_data_row(em_rollup_t *r, int64_t n, const char *vals, size_t vals_len,
                         const char *counts, size_t counts_len, const char *max, size_t max_len) {
  int nv = parse_values(vals, vals_len, r->vals);
  int nc = parse_values(counts, counts_len, r->counts);
  int nm = max ? parse_values(max, max_len, r->maxes) : 0;
  if (nv < 0 || nc < 0 || nm < 0 || n < 1) {
    return false;
  }
  for (int i = 0; i < nv; i++) {
    const pair_t *c = counts ? pair_find(r->counts, nc, r->vals[i].id) : NULL;
    double w = c ? c->v : (double)n;
    if (!(w > 0)) {
      continue;
    }
    const pair_t *m = max ? pair_find(r->maxes, nm, r->vals[i].id) : NULL;
    double hi = m ? m->v : r->vals[i].v;
    metric_acc_t *a = metric_acc(r, r->vals[i].id);
    if (!a) {
      continue;
    }
    a->sum += r->vals[i].v * w;
    a->weight += w;
    a->max = hi > a->max ? hi : a->max;
  }
  return true;
}

/* Writes the three objects (mean, max, counts) of the step's metrics into r->json, NUL
 * separated; lens get their lengths. Returns false when out of memory. */
static bool write_objects(em_rollup_t *r, size_t lens[3]) {
  em_buf_t *b = &r->json;
  em_buf_reset(b);
  for (int k = 0; k < 3; k++) {
    size_t start = b->len;
    em_buf_add(b, "{", 1);
    bool first = true;
    for (size_t i = 0; i < r->n_metrics; i++) {
      const metric_acc_t *a = &r->metrics[i];
      double v = k == 0 ? a->sum / a->weight : k == 1 ? a->max : a->weight;
      if (!(a->weight > 0) || !isfinite(a->sum / a->weight)) {
        continue; /* JSON has no spelling for an overflowed mean: absent. */
      }
      em_buf_printf(b, "%s\"%lld\":%.17g", first ? "" : ",", (long long)a->id, v);
      first = false;
    }
    em_buf_add(b, "}", 1);
    lens[k] = b->len - start;
    em_buf_add(b, "", 1); /* The NUL between objects. */
  }
  return b->error == 0;
}

/* --- stages ------------------------------------------------------------------------------ */

/* The step's histogram of stage, created on first use; NULL when out of memory. */
static em_histo_t *stage_histo(em_rollup_t *r, int64_t stage) {
  for (size_t i = 0; i < r->n_stages; i++) {
    if (r->stages[i].stage == stage) {
      return r->stages[i].h;
    }
  }
  if (r->n_stages == r->cap_stages) {
    size_t cap = r->cap_stages ? r->cap_stages * 2 : 8;
    stage_acc_t *v = realloc(r->stages, cap * sizeof(*v));
    if (!v) {
      return NULL;
    }
    memset(v + r->cap_stages, 0, (cap - r->cap_stages) * sizeof(*v));
    r->stages = v;
    r->cap_stages = cap;
  }
  stage_acc_t *a = &r->stages[r->n_stages];
  em_histo_free(a->h); /* A histogram of an earlier step: start afresh. */
  a->h = NULL;
  if (em_histo_new(&a->h) != 0) {
    return NULL;
  }
  a->stage = stage;
  r->n_stages++;
  return a->h;
}

static void collect_bucket(void *ctx, int32_t index, uint64_t count) {
  em_rollup_t *r = ctx;
  if (r->n_out < EM_HISTO_MAX_SPAN) {
    r->out[r->n_out++] = (em_bucket_t){.index = index, .count = count};
  }
}

/* Brings r->out to at most EM_PROTO_MAX_BUCKETS buckets by lowering *scale. */
static void fit_buckets(em_rollup_t *r, int32_t *scale) {
  while (r->n_out > EM_PROTO_MAX_BUCKETS && *scale > EM_PROTO_MIN_SCALE) {
    size_t n = 0;
    for (size_t i = 0; i < r->n_out; i++) {
      int32_t idx = r->out[i].index >> 1;
      if (n > 0 && r->out[n - 1].index == idx) {
        r->out[n - 1].count += r->out[i].count;
      } else {
        r->out[n++] = (em_bucket_t){.index = idx, .count = r->out[i].count};
      }
    }
    r->n_out = n;
    (*scale)--;
  }
}

/* Writes the stage_rollups row of one stage's merged histogram. */
static int put_stage(em_rollup_t *r, int64_t step_s, int64_t device, int64_t t0, int64_t stage,
                     const em_histo_t *h) {
  r->n_out = 0;
  em_histo_each_index(h, collect_bucket, r);
  int32_t scale = em_histo_scale(h);
  fit_buckets(r, &scale);
  em_stage_t w = {.buckets = r->out,
                  .n_buckets = r->n_out < EM_PROTO_MAX_BUCKETS ? r->n_out : EM_PROTO_MAX_BUCKETS};
  size_t len = em_buckets_encode(r->blob, &w);
  sqlite3_stmt *st = r->q[Q_PUT_STAGE];
  sqlite3_bind_int64(st, 1, step_s);
  sqlite3_bind_int64(st, 2, device);
  sqlite3_bind_int64(st, 3, stage);
  sqlite3_bind_int64(st, 4, t0);
  sqlite3_bind_int64(st, 5, clamp_u64(em_histo_count(h)));
  sqlite3_bind_int64(st, 6, clamp_u64(em_histo_sum_ns(h)));
  sqlite3_bind_int64(st, 7, clamp_u64(em_histo_min_ns(h)));
  sqlite3_bind_int64(st, 8, clamp_u64(em_histo_max_ns(h)));
  sqlite3_bind_int(st, 9, scale);
  sqlite3_bind_int64(st, 10, clamp_u64(em_histo_zero_count(h)));
  sqlite3_bind_blob(st, 11, r->blob, (int)len, SQLITE_STATIC);
  return exec_stmt(st);
}

/* Merges the rows of a stage source query (bound, not yet stepped). */
static int merge_stage_rows(em_rollup_t *r, sqlite3_stmt *st, em_rollup_report_t *rep) {
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t figures[6];
    for (int i = 0; i < 6; i++) {
      figures[i] = sqlite3_column_int64(st, 1 + i);
    }
    em_buckets_figures_t fig = {.count = (uint64_t)figures[0],
                                .sum_ns = (uint64_t)figures[1],
                                .min_ns = (uint64_t)figures[2],
                                .max_ns = (uint64_t)figures[3],
                                .scale = (int32_t)figures[4],
                                .zero_count = (uint64_t)figures[5]};
    const uint8_t *blob = sqlite3_column_blob(st, 7);
    size_t len = (size_t)sqlite3_column_bytes(st, 7);
    em_stage_t w;
    bool ok = figures[0] > 0 && figures[1] >= 0 && figures[2] >= 0 && figures[3] >= 0 &&
              figures[4] >= INT32_MIN && figures[4] <= INT32_MAX && figures[5] >= 0 &&
              em_buckets_decode(blob, len, &fig, r->decoded, &w) == 0;
    em_histo_t *h = ok ? stage_histo(r, sqlite3_column_int64(st, 0)) : NULL;
    if (ok && !h) {
      sqlite3_reset(st);
      return -ENOMEM;
    }
    int arc = ok ? em_histo_add_stage(h, &w) : -EINVAL;
    if (arc == -ENOMEM) {
      sqlite3_reset(st);
      return -ENOMEM;
    }
    if (arc != 0) {
      rep->bad_rows++;
    }
  }
  int rrc = sqlite3_reset(st);
  return rc == SQLITE_DONE ? 0 : (rrc != SQLITE_OK ? rrc : rc);
}

/* Merges the rows of a data source query (bound, not yet stepped); *n gets the rows behind. */
static int merge_data_rows(em_rollup_t *r, sqlite3_stmt *st, int64_t *n, em_rollup_report_t *rep) {
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t rows = sqlite3_column_int64(st, 0);
    const char *text[3];
    size_t lens[3];
    for (int i = 0; i < 3; i++) {
      text[i] = (const char *)sqlite3_column_text(st, 1 + i);
      lens[i] = (size_t)sqlite3_column_bytes(st, 1 + i);
    }
    if (!text[0] || !add_data_row(r, rows, text[0], lens[0], text[1], lens[1], text[2], lens[2])) {
      rep->bad_rows++;
      continue;
    }
    *n += rows;
  }
  int rrc = sqlite3_reset(st);
  return rc == SQLITE_DONE ? 0 : (rrc != SQLITE_OK ? rrc : rc);
}

/* Rolls one step (60: a minute from raw rows; 3600: an hour from minute rollups) of one device
 * starting at t0. A step without rows writes nothing. */
static int roll_step(em_rollup_t *r, int64_t step_s, int64_t device, int64_t t0,
                     em_rollup_report_t *rep) {
  int64_t t1 = t0 + step_s * 1000000000ll;
  bool minute = step_s == 60;
  sqlite3_stmt *qs = r->q[minute ? Q_RAW_WINDOWS : Q_MIN_STAGES];
  sqlite3_stmt *qd = r->q[minute ? Q_RAW_DATA : Q_MIN_DATA];
  r->n_stages = 0;
  r->n_metrics = 0;
  r->worked = true;
  int64_t n = 0;
  sqlite3_stmt *both[2] = {qs, qd};
  for (int i = 0; i < 2; i++) {
    sqlite3_bind_int64(both[i], 1, device);
    sqlite3_bind_int64(both[i], 2, t0);
    sqlite3_bind_int64(both[i], 3, t1);
  }
  int rc = merge_stage_rows(r, qs, rep);
  if (rc == 0) {
    rc = merge_data_rows(r, qd, &n, rep);
  }
  sqlite3_clear_bindings(qs);
  sqlite3_clear_bindings(qd);
  for (size_t i = 0; rc == 0 && i < r->n_stages; i++) {
    if (em_histo_count(r->stages[i].h) == 0) {
      continue; /* Only malformed windows: no row (absent is not zero). */
    }
    rc = put_stage(r, step_s, device, t0, r->stages[i].stage, r->stages[i].h);
    rep->rows += rc == 0;
  }
  if (rc == 0 && n > 0) {
    size_t lens[3];
    if (!write_objects(r, lens)) {
      return -ENOMEM;
    }
    sqlite3_stmt *st = r->q[Q_PUT_DATA];
    sqlite3_bind_int64(st, 1, step_s);
    sqlite3_bind_int64(st, 2, device);
    sqlite3_bind_int64(st, 3, t0);
    sqlite3_bind_int64(st, 4, n);
    const char *p = r->json.data;
    for (int k = 0; k < 3; k++) {
      sqlite3_bind_text(st, 5 + k, p, (int)lens[k], SQLITE_STATIC);
      p += lens[k] + 1;
    }
    rc = exec_stmt(st);
    rep->rows += rc == 0;
  }
  return rc;
}

/* Deletes one device's rollup rows of one step. */
static int clear_step(em_rollup_t *r, int64_t step_s, int64_t device, int64_t t0) {
  int rc = 0;
  for (int q = Q_DEL_STAGE; rc == 0 && q <= Q_DEL_DATA; q++) {
    sqlite3_bind_int64(r->q[q], 1, step_s);
    sqlite3_bind_int64(r->q[q], 2, device);
    sqlite3_bind_int64(r->q[q], 3, t0);
    rc = exec_stmt(r->q[q]);
  }
  return rc;
}

/* --- the run ----------------------------------------------------------------------------- */

/* How far one step size is rolled: every step before `wm`, and of the step at `wm` the devices
 * with id <= `cur` (0: none yet). Kept in meta as <key>_ns and <key>_device. */
typedef struct {
  const char *key_ns;
  const char *key_device;
  bool known;
  int64_t wm;
  int64_t cur;
} progress_t;

/* Whether (device, step start t0) is already rolled. */
static bool progress_covers(const progress_t *p, int64_t device, int64_t t0) {
  return p->known && (t0 < p->wm || (t0 == p->wm && device <= p->cur));
}

static int progress_read(em_rollup_t *r, progress_t *p) {
  bool found;
  p->wm = 0;
  p->cur = 0;
  int rc = meta_get(r, p->key_ns, &p->wm, &p->known);
  return rc ? rc : meta_get(r, p->key_device, &p->cur, &found);
}

static int progress_write(em_rollup_t *r, const progress_t *p) {
  int rc = meta_set(r, p->key_ns, p->wm);
  return rc ? rc : meta_set(r, p->key_device, p->cur);
}

static int load_devices(em_rollup_t *r) {
  sqlite3_stmt *st = r->q[Q_DEVICES];
  r->n_devices = 0;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (r->n_devices == r->cap_devices) {
      size_t cap = r->cap_devices ? r->cap_devices * 2 : 256;
      int64_t *v = realloc(r->devices, cap * sizeof(*v));
      if (!v) {
        sqlite3_reset(st);
        return -ENOMEM;
      }
      r->devices = v;
      r->cap_devices = cap;
    }
    r->devices[r->n_devices++] = sqlite3_column_int64(st, 0);
  }
  int rrc = sqlite3_reset(st);
  return rc == SQLITE_DONE ? 0 : (rrc != SQLITE_OK ? rrc : rc);
}

/* The earliest time_ns >= from of any device in the two tables of qa and qb; *found false
 * when there is none. One index seek per device and table. */
static int first_time(em_rollup_t *r, int qa, int qb, int64_t from, int64_t *out, bool *found) {
  *found = false;
  for (size_t i = 0; i < r->n_devices; i++) {
    for (int k = 0; k < 2; k++) {
      sqlite3_stmt *st = r->q[k == 0 ? qa : qb];
      sqlite3_bind_int64(st, 1, r->devices[i]);
      sqlite3_bind_int64(st, 2, from);
      int rc = sqlite3_step(st);
      if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER) {
        int64_t t = sqlite3_column_int64(st, 0);
        if (!*found || t < *out) {
          *out = t;
          *found = true;
        }
      }
      int rrc = sqlite3_reset(st);
      sqlite3_clear_bindings(st);
      if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        return rrc != SQLITE_OK ? rrc : rc;
      }
    }
  }
  return 0;
}

/* Recomputes the dirty minutes (at most EM_ROLLUP_MAX_DIRTY, within the budget) and the
 * rolled hours above them. A dirty minute not rolled yet is only forgotten: its turn comes. */
static int roll_dirty(em_rollup_t *r, const progress_t *p1m, const progress_t *p1h,
                      em_rollup_report_t *rep) {
  sqlite3_stmt *st = r->q[Q_DIRTY_LIST];
  sqlite3_bind_int(st, 1, EM_ROLLUP_MAX_DIRTY + 1);
  int64_t(*dirty)[2] = malloc((EM_ROLLUP_MAX_DIRTY + 1) * sizeof(*dirty));
  if (!dirty) {
    sqlite3_reset(st);
    return -ENOMEM;
  }
  size_t n = 0;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    dirty[n][0] = sqlite3_column_int64(st, 0);
    dirty[n][1] = sqlite3_column_int64(st, 1);
    n++;
  }
  int rrc = sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  rc = rc == SQLITE_DONE ? 0 : (rrc != SQLITE_OK ? rrc : rc);
  if (n > EM_ROLLUP_MAX_DIRTY) {
    n = EM_ROLLUP_MAX_DIRTY;
    rep->more = true;
  }
  /* Sorted by (device, time): the hour above is recomputed after its last dirty minute. */
  for (size_t i = 0; rc == 0 && i < n; i++) {
    if (spent(r)) {
      rep->more = true;
      break;
    }
    int64_t dev = dirty[i][0];
    int64_t t0 = dirty[i][1];
    if (progress_covers(p1m, dev, t0)) {
      rc = clear_step(r, 60, dev, t0);
      if (rc == 0) {
        rc = roll_step(r, 60, dev, t0, rep);
      }
    }
    int64_t h0 = floor_to(t0, EM_ROLLUP_HOUR_NS);
    bool last_of_hour =
        i + 1 == n || dirty[i + 1][0] != dev || floor_to(dirty[i + 1][1], EM_ROLLUP_HOUR_NS) != h0;
    if (rc == 0 && last_of_hour && progress_covers(p1h, dev, h0)) {
      rc = clear_step(r, 3600, dev, h0);
      if (rc == 0) {
        rc = roll_step(r, 3600, dev, h0, rep);
      }
    }
    if (rc == 0) {
      sqlite3_stmt *del = r->q[Q_DIRTY_DEL];
      sqlite3_bind_int64(del, 1, dev);
      sqlite3_bind_int64(del, 2, t0);
      rc = exec_stmt(del);
      rep->dirty += rc == 0;
    }
  }
  free(dirty);
  return rc;
}

/* Rolls new steps of one size from p up to end (exclusive), device by device, walking with
 * the skip-ahead; stops at max_steps whole steps or when the budget is spent, leaving p where
 * it stopped (possibly inside a step). */
static int roll_new(em_rollup_t *r, int64_t step_s, progress_t *p, int64_t end, int max_steps,
                    uint64_t *done, em_rollup_report_t *rep) {
  int64_t step_ns = step_s * 1000000000ll;
  bool minute = step_s == 60;
  int steps = 0;
  for (;;) {
    if (p->cur == 0) { /* At a step's start: find the next step holding rows. */
      if (p->wm >= end) {
        return 0;
      }
      if (steps >= max_steps || spent(r)) {
        rep->more = true;
        return 0;
      }
      int64_t next = 0;
      bool found = false;
      int rc = first_time(r, minute ? Q_FIRST_WINDOW : Q_FIRST_MIN_STAGE,
                          minute ? Q_FIRST_DATA : Q_FIRST_MIN_DATA, p->wm, &next, &found);
      if (rc != 0) {
        return rc;
      }
      if (!found || next >= end) {
        p->wm = end;
        return 0;
      }
      p->wm = floor_to(next, step_ns);
    }
    for (size_t i = 0; i < r->n_devices; i++) {
      if (r->devices[i] <= p->cur) {
        continue;
      }
      if (spent(r)) {
        rep->more = true;
        return 0;
      }
      int rc = roll_step(r, step_s, r->devices[i], p->wm, rep);
      if (rc != 0) {
        return rc;
      }
      p->cur = r->devices[i];
    }
    p->wm += step_ns;
    p->cur = 0;
    (*done)++;
    steps++;
  }
}

int em_rollup_run(em_rollup_t *r, int64_t now_real_ns, int64_t budget_ns,
                  em_rollup_report_t *report) {
  em_rollup_report_t rep = {0};
  r->t_end = mono_ns() + budget_ns;
  r->worked = false;
  r->noted = 0;
  progress_t p1m = {.key_ns = "rollup_1m_ns", .key_device = "rollup_1m_device"};
  progress_t p1h = {.key_ns = "rollup_1h_ns", .key_device = "rollup_1h_device"};
  int rc = load_devices(r);
  if (rc == 0) {
    rc = progress_read(r, &p1m);
  }
  if (rc == 0) {
    rc = progress_read(r, &p1h);
  }
  if (rc == 0 && p1m.known) {
    rc = roll_dirty(r, &p1m, &p1h, &rep);
  }
  /* Minutes whose end is at least the grace before now; hours whose minutes are all rolled. */
  int64_t closed = closed_minute(now_real_ns);
  progress_t was = p1m;
  if (rc == 0) {
    rc = roll_new(r, 60, &p1m, closed, EM_ROLLUP_MAX_STEPS, &rep.minutes, &rep);
  }
  if (rc == 0 && (!was.known || was.wm != p1m.wm || was.cur != p1m.cur)) {
    rc = progress_write(r, &p1m);
  }
  was = p1h;
  if (rc == 0) {
    rc = roll_new(r, 3600, &p1h, floor_to(p1m.wm, EM_ROLLUP_HOUR_NS), EM_ROLLUP_MAX_HOURS,
                  &rep.hours, &rep);
  }
  if (rc == 0 && (!was.known || was.wm != p1h.wm || was.cur != p1h.cur)) {
    rc = progress_write(r, &p1h);
  }
  r->pass_idle = rc == 0 && !rep.more;
  r->pass_closed = closed;
  rep.watermark_1m = p1m.wm;
  rep.watermark_1h = p1h.wm;
  if (report) {
    *report = rep;
  }
  return rc;
}
