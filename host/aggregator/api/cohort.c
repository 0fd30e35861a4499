/*
 * cohort.c - /api/models and /api/cohort (see cohort.h).
 *
 * /api/models sorts the registry's devices that have a model by identity (name, version,
 * labels) and writes one entry per run of equal identities.
 *
 * /api/cohort:
 *  1. the selection becomes one SELECT over `models` (name = ?, version = ?,
 *     json_extract(labels, '$."k"') = ?); the matching ids go to the row queries as a JSON
 *     array (model IN (SELECT value FROM json_each(?))), so nothing is written, not even a
 *     temporary table, on the read-only connection;
 *  2. the devices whose name passes the glob, in name order; per device its data rows and its
 *     stage windows of the range and the cohort, in time order, through the (device, time_ns)
 *     indexes;
 *  3. a data row counts its n windows (1 raw, n downsampled) and its level; mem.rss and pmu.ipc
 *     come from its values by metric id (the store names values through the birth);
 *  4. a stage window is merged into its stage's cohort histogram and into the histogram of its
 *     unit [S, S + unit) (S = time_ns rounded down to a multiple of the unit, from the epoch);
 *     rows come in time order, so a stage's unit is complete when a window of a later unit of
 *     that stage arrives or the device ends, and its count, mean and p99 are taken then.
 * Memory: one histogram per stage for the cohort and one open per stage for the unit, plus the
 * units (at most EM_COHORT_MAX_UNITS; one more aborts with 413).
 */
#define _POSIX_C_SOURCE 200809L
#include "cohort.h"

#include "buckets.h"
#include "buf.h"
#include "identity.h"

#include <errno.h>
#include <fnmatch.h>
#include <histo.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NS_PER_S 1000000000ull

/* ---- select= ------------------------------------------------------------------------------ */

__attribute__((format(printf, 3, 4))) static int bad(char *err, size_t cap, const char *fmt, ...) {
  if (err && cap > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
  }
  return -EINVAL;
}

static bool label_key_valid(const char *k, size_t n) {
  if (n == 0 || n > EM_PROTO_MAX_LABEL_KEY || (k[0] >= '0' && k[0] <= '9') ||
      (n >= 2 && k[0] == '_' && k[1] == '_')) {
    return false;
  }
  for (size_t i = 0; i < n; i++) {
    char c = k[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) {
      return false;
    }
  }
  return true;
}

/* Parses one "k=v" of text[0..n) into *t. */
static int parse_term(const char *text, size_t n, em_cohort_term_t *t, char *err, size_t cap) {
  const char *eq = memchr(text, '=', n);
  if (!eq) {
    return bad(err, cap, "select: '%.*s' is not key=value", (int)(n > 40 ? 40 : n), text);
  }
  size_t klen = (size_t)(eq - text);
  size_t vlen = n - klen - 1;
  const char *v = eq + 1;
  if (klen == 5 && memcmp(text, "model", 5) == 0) {
    t->kind = EM_COHORT_TERM_NAME;
  } else if (klen == 7 && memcmp(text, "version", 7) == 0) {
    t->kind = EM_COHORT_TERM_VERSION;
  } else if (label_key_valid(text, klen)) {
    t->kind = EM_COHORT_TERM_LABEL;
  } else {
    return bad(err, cap,
               "select: '%.*s' is neither model, version nor a label key ([A-Za-z_][A-Za-z0-9_]*, "
               "at most %u bytes)",
               (int)(klen > 40 ? 40 : klen), text, EM_PROTO_MAX_LABEL_KEY);
  }
  size_t max = t->kind == EM_COHORT_TERM_NAME
                   ? EM_PROTO_MAX_NAME_BYTES
                   : (t->kind == EM_COHORT_TERM_VERSION ? EM_PROTO_MAX_MODEL_VERSION
                                                        : EM_PROTO_MAX_LABEL_VALUE);
  if (vlen == 0 || vlen > max) {
    return bad(err, cap, "select: the value of '%.*s' must be 1 to %zu bytes",
               (int)(klen > 40 ? 40 : klen), text, max);
  }
  for (size_t i = 0; i < vlen; i++) {
    if (v[i] < 0x20 || v[i] > 0x7e) {
      return bad(err, cap, "select: the value of '%.*s' is not printable ASCII",
                 (int)(klen > 40 ? 40 : klen), text);
    }
  }
  memcpy(t->key, text, t->kind == EM_COHORT_TERM_LABEL ? klen : 0);
  t->key[t->kind == EM_COHORT_TERM_LABEL ? klen : 0] = '\0';
  memcpy(t->value, v, vlen);
  t->value[vlen] = '\0';
  return 0;
}

int em_cohort_select_parse(const char *text, em_cohort_select_t *out, char *err, size_t err_cap) {
  memset(out, 0, sizeof(*out));
  if (!text || !*text) {
    return bad(err, err_cap, "select: required (e.g. select=version=1.5)");
  }
  const char *p = text;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);
    if (out->n == EM_COHORT_MAX_TERMS) {
      return bad(err, err_cap, "select: more than %u terms", EM_COHORT_MAX_TERMS);
    }
    em_cohort_term_t *t = &out->terms[out->n];
    int rc = parse_term(p, n, t, err, err_cap);
    if (rc != 0) {
      return rc;
    }
    for (size_t i = 0; i < out->n; i++) {
      if (out->terms[i].kind == t->kind && strcmp(out->terms[i].key, t->key) == 0) {
        return bad(err, err_cap, "select: '%s' given more than once",
                   t->kind == EM_COHORT_TERM_LABEL
                       ? t->key
                       : (t->kind == EM_COHORT_TERM_NAME ? "model" : "version"));
      }
    }
    out->n++;
    if (!comma) {
      return 0;
    }
    p = comma + 1;
  }
}

bool em_cohort_select_match(const em_cohort_select_t *sel, const em_model_t *m) {
  if (!sel || !m || !m->name) {
    return false;
  }
  for (size_t i = 0; i < sel->n; i++) {
    const em_cohort_term_t *t = &sel->terms[i];
    const char *have = NULL;
    if (t->kind == EM_COHORT_TERM_NAME) {
      have = m->name;
    } else if (t->kind == EM_COHORT_TERM_VERSION) {
      have = m->version;
    } else {
      for (size_t k = 0; m->labels && k < m->n_labels; k++) {
        if (strcmp(m->labels[k].key, t->key) == 0) {
          have = m->labels[k].value;
        }
      }
    }
    if (!have || strcmp(have, t->value) != 0) {
      return false;
    }
  }
  return true;
}

/* ---- JSON writing ---------------------------------------------------------------------------- */

/* A JSON string (s at most EM_QUERY_SELECT_BYTES: a select, a device id, a stage name). */
static void put_str(FILE *f, const char *s) {
  char buf[6 * EM_QUERY_SELECT_BYTES + 3];
  fwrite(buf, 1, em_identity_json_str(s, buf, sizeof(buf)), f);
}

/* A number: integral values without a fraction, NaN and infinities as null. */
static void put_num(FILE *f, double v) {
  if (!isfinite(v)) {
    fputs("null", f);
  } else if (v == floor(v) && fabs(v) < 9e15) {
    fprintf(f, "%.0f", v);
  } else {
    fprintf(f, "%.17g", v);
  }
}

/* Hands the memstream's body over as a 200 answer (or a 500). */
static void reply_stream(em_history_reply_t *out, FILE *f, char **buf, size_t *len) {
  if (fclose(f) != 0 || !*buf) {
    free(*buf);
    em_history_error(out, 500, "out of memory");
    return;
  }
  out->status = 200;
  out->body = *buf;
  out->len = *len;
}

/* ---- /api/models ------------------------------------------------------------------------------
 */

static int cmp_identity(const em_identity_t *a, const em_identity_t *b) {
  int c = strcmp(a->name, b->name);
  if (c == 0) {
    c = strcmp(a->version, b->version);
  }
  for (size_t i = 0; c == 0 && i < a->n_labels && i < b->n_labels; i++) {
    c = strcmp(a->keys[i], b->keys[i]);
    if (c == 0) {
      c = strcmp(a->values[i], b->values[i]);
    }
  }
  if (c == 0) {
    c = (a->n_labels > b->n_labels) - (a->n_labels < b->n_labels);
  }
  return c;
}

static int cmp_devices(const void *pa, const void *pb) {
  const em_agg_device_t *a = *(const em_agg_device_t *const *)pa;
  const em_agg_device_t *b = *(const em_agg_device_t *const *)pb;
  int c = cmp_identity(&a->dev->model, &b->dev->model);
  return c ? c : strcmp(a->dev->id, b->dev->id);
}

/* The identity's JSON object without its closing brace, so that "devices" can follow. */
static void put_identity_open(FILE *f, const em_identity_t *id) {
  em_label_t labels[EM_PROTO_MAX_MODEL_LABELS];
  em_model_t m = em_identity_view(id, labels);
  char json[EM_IDENTITY_JSON_MAX];
  size_t n = em_identity_json(&m, json, sizeof(json));
  fwrite(json, 1, n > 0 ? n - 1 : 0, f);
}

void em_cohort_models(em_registry_t *reg, const em_query_t *q, em_history_reply_t *out) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) {
    em_history_error(out, 500, "out of memory");
    return;
  }
  em_registry_lock(reg);
  em_agg_device_t **devs = malloc((reg->n_devices ? reg->n_devices : 1) * sizeof(*devs));
  size_t n = 0;
  for (size_t i = 0; devs && i < reg->n_devices; i++) {
    em_agg_device_t *d = reg->devices[i];
    if (!d->dev || !d->dev->model.named ||
        (q->have_model && strcmp(d->dev->model.name, q->model) != 0) ||
        (q->have_version && strcmp(d->dev->model.version, q->version) != 0)) {
      continue;
    }
    devs[n++] = d;
  }
  if (devs) {
    qsort(devs, n, sizeof(*devs), cmp_devices);
    fputs("{\"models\":[", f);
    for (size_t i = 0; i < n; i++) {
      bool first = i == 0 || cmp_identity(&devs[i - 1]->dev->model, &devs[i]->dev->model) != 0;
      bool last = i + 1 == n || cmp_identity(&devs[i]->dev->model, &devs[i + 1]->dev->model) != 0;
      if (first) {
        fputs(i ? "," : "", f);
        put_identity_open(f, &devs[i]->dev->model);
        fputs(",\"devices\":[", f);
      } else {
        fputc(',', f);
      }
      put_str(f, devs[i]->dev->id);
      if (last) {
        fputs("]}", f);
      }
    }
    fputs("]}", f);
  }
  em_registry_unlock(reg);
  if (!devs) {
    fclose(f);
    free(buf);
    em_history_error(out, 500, "out of memory");
    return;
  }
  free(devs);
  reply_stream(out, f, &buf, &len);
}

/* ---- /api/cohort ------------------------------------------------------------------------------
 */

typedef struct {
  size_t dev;       /* Index into the cohort's device list. */
  int64_t start_ns; /* Start of the unit. */
  uint64_t count;
  uint64_t sum_ns;
  double p99_ns;
} unit_t;

typedef struct {
  int64_t id; /* stages.id */
  char name[EM_PROTO_MAX_STAGE_BYTES + 1];
  em_histo_t *total;
  em_histo_t *open; /* The unit being merged: of device open_dev from open_start_ns. */
  bool have_open;
  size_t open_dev;
  int64_t open_start_ns;
  unit_t *units;
  size_t n_units;
  size_t cap_units;
} stage_t;

typedef struct {
  int64_t id;
  char *name;
} device_t;

typedef struct {
  bool present;
  double bytes_per_s;
  uint64_t points;
} slope_t;

typedef struct {
  sqlite3 *db;
  const em_query_t *q;
  int64_t unit_ns;
  char *ids;         /* JSON array of the matching models.id. */
  char rss_path[32]; /* json_extract path of mem.rss's id in data.vals; "" when none. */
  char ipc_path[32]; /* Of pmu.ipc. */
  device_t *devices; /* Passing the glob, by name. */
  size_t n_devices;
  bool *in_cohort; /* Per device: it has a window of the cohort in the range. */
  slope_t *slopes; /* Per device. */
  uint64_t windows;
  uint64_t levels[4];
  double ipc_sum; /* Of value * n. */
  uint64_t ipc_windows;
  stage_t stages[EM_COHORT_MAX_STAGES];
  size_t n_stages;
  size_t units;    /* In all stages. */
  unsigned status; /* 0 while fine; else the answer's status with msg. */
  char msg[200];
} cohort_t;

__attribute__((format(printf, 3, 4))) static void fail(cohort_t *c, unsigned status,
                                                       const char *fmt, ...) {
  if (c->status) {
    return;
  }
  c->status = status;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->msg, sizeof(c->msg), fmt, ap);
  va_end(ap);
}

/* A failed SQLite call: 503 past the deadline, else 500. */
static void fail_sql(cohort_t *c, int rc) {
  if (rc == SQLITE_INTERRUPT) {
    fail(c, 503, "query took too long");
  } else {
    fail(c, 500, "reading the store failed");
  }
}

/* Fills c->ids with the ids of the models matching sel; false (and c->status) on failure. An
 * empty list is no failure: the cohort is empty. */
static bool match_models(cohort_t *c, const em_cohort_select_t *sel) {
  char sql[160 + EM_COHORT_MAX_TERMS * 48] = "SELECT id FROM models WHERE 1";
  size_t len = strlen(sql);
  int param = 1;
  for (size_t i = 0; i < sel->n; i++) {
    const em_cohort_term_t *t = &sel->terms[i];
    if (t->kind == EM_COHORT_TERM_LABEL) {
      len += (size_t)snprintf(sql + len, sizeof(sql) - len, " AND json_extract(labels, ?%d) = ?%d",
                              param, param + 1);
      param += 2;
    } else {
      len += (size_t)snprintf(sql + len, sizeof(sql) - len, " AND %s = ?%d",
                              t->kind == EM_COHORT_TERM_NAME ? "name" : "version", param++);
    }
  }
  strcat(sql, " ORDER BY id");
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(c->db, sql, -1, &st, NULL);
  if (rc != SQLITE_OK) {
    fail_sql(c, rc);
    return false;
  }
  char paths[EM_COHORT_MAX_TERMS][EM_PROTO_MAX_LABEL_KEY + 8];
  param = 1;
  for (size_t i = 0; i < sel->n; i++) {
    const em_cohort_term_t *t = &sel->terms[i];
    if (t->kind == EM_COHORT_TERM_LABEL) {
      snprintf(paths[i], sizeof(paths[i]), "$.\"%s\"", t->key); /* keys are [A-Za-z0-9_] */
      sqlite3_bind_text(st, param++, paths[i], -1, SQLITE_STATIC);
    }
    sqlite3_bind_text(st, param++, t->value, -1, SQLITE_STATIC);
  }
  size_t n = 0;
  FILE *f = open_memstream(&c->ids, &n);
  if (!f) {
    sqlite3_finalize(st);
    fail(c, 500, "out of memory");
    return false;
  }
  fputc('[', f);
  size_t k = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    fprintf(f, "%s%lld", k++ ? "," : "", (long long)sqlite3_column_int64(st, 0));
  }
  fputc(']', f);
  sqlite3_finalize(st);
  if (fclose(f) != 0 || !c->ids) {
    fail(c, 500, "out of memory");
    return false;
  }
  if (rc != SQLITE_DONE) {
    fail_sql(c, rc);
    return false;
  }
  return true;
}

/* The json_extract path of metric `name`'s id in data.vals into path ("" when the store has no
 * such metric). */
static bool metric_path(cohort_t *c, const char *name, char *path, size_t cap) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(c->db, "SELECT id FROM metrics WHERE name = ?1", -1, &st, NULL);
  path[0] = '\0';
  if (rc == SQLITE_OK) {
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
      snprintf(path, cap, "$.\"%lld\"", (long long)sqlite3_column_int64(st, 0));
      rc = SQLITE_DONE;
    }
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    fail_sql(c, rc);
    return false;
  }
  return true;
}

/* The devices whose name passes the glob, in name order. */
static bool load_devices(cohort_t *c) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(c->db, "SELECT id, name FROM devices ORDER BY name", -1, &st, NULL);
  if (rc != SQLITE_OK) {
    fail_sql(c, rc);
    return false;
  }
  size_t cap = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(st, 1);
    if (!name || (c->q->have_name && fnmatch(c->q->name, name, 0) != 0)) {
      continue;
    }
    if (em_buf_grow_items(&c->devices, &cap, c->n_devices, sizeof(*c->devices), 64) != 0) {
      break;
    }
    char *copy = strdup(name);
    if (!copy) {
      break;
    }
    c->devices[c->n_devices++] = (device_t){sqlite3_column_int64(st, 0), copy};
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
    fail_sql(c, rc);
    return false;
  }
  if (rc == SQLITE_ROW) {
    fail(c, 500, "out of memory");
    return false;
  }
  c->in_cohort = calloc(c->n_devices ? c->n_devices : 1, sizeof(*c->in_cohort));
  c->slopes = calloc(c->n_devices ? c->n_devices : 1, sizeof(*c->slopes));
  if (!c->in_cohort || !c->slopes) {
    fail(c, 500, "out of memory");
    return false;
  }
  return true;
}

/* Prepares sql over the rows of device i with ?1 its id, ?2 and ?3 the range, ?4 the cohort's
 * model ids. NULL (and c->status) on failure. */
static sqlite3_stmt *rows_of(cohort_t *c, size_t i, const char *sql) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(c->db, sql, -1, &st, NULL);
  if (rc != SQLITE_OK) {
    fail_sql(c, rc);
    return NULL;
  }
  sqlite3_bind_int64(st, 1, c->devices[i].id);
  sqlite3_bind_int64(st, 2, (sqlite3_int64)c->q->from_ns);
  sqlite3_bind_int64(st, 3, (sqlite3_int64)c->q->to_ns);
  sqlite3_bind_text(st, 4, c->ids, -1, SQLITE_STATIC);
  return st;
}

/* The data rows of device i: windows, levels, RSS slope, IPC. */
static void read_data(cohort_t *c, size_t i) {
  sqlite3_stmt *st =
      rows_of(c, i,
              "SELECT time_ns, n, level, json_extract(vals, ?5), json_extract(vals, ?6) FROM data"
              " WHERE device = ?1 AND time_ns >= ?2 AND time_ns < ?3"
              " AND model IN (SELECT value FROM json_each(?4)) ORDER BY time_ns");
  if (!st) {
    return;
  }
  if (c->rss_path[0]) {
    sqlite3_bind_text(st, 5, c->rss_path, -1, SQLITE_STATIC);
  }
  if (c->ipc_path[0]) {
    sqlite3_bind_text(st, 6, c->ipc_path, -1, SQLITE_STATIC);
  }
  int rc;
  /* Least squares online (Welford): means of t and y, co-moment and second moment of t. */
  double mt = 0;
  double my = 0;
  double cty = 0;
  double m2t = 0;
  uint64_t points = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t t_ns = sqlite3_column_int64(st, 0);
    int64_t n = sqlite3_column_int64(st, 1);
    uint64_t w = n > 0 ? (uint64_t)n : 1;
    c->in_cohort[i] = true;
    c->windows += w;
    if (sqlite3_column_type(st, 2) == SQLITE_INTEGER) {
      int level = sqlite3_column_int(st, 2);
      if (level >= 0 && level <= 3) {
        c->levels[level] += w;
      }
    }
    int rss_type = sqlite3_column_type(st, 3);
    if (rss_type == SQLITE_INTEGER || rss_type == SQLITE_FLOAT) {
      double t = (double)(t_ns - (int64_t)c->q->from_ns) / (double)NS_PER_S;
      double y = sqlite3_column_double(st, 3);
      points++;
      double dt = t - mt;
      mt += dt / (double)points;
      my += (y - my) / (double)points;
      cty += dt * (y - my);
      m2t += dt * (t - mt);
    }
    int ipc_type = sqlite3_column_type(st, 4);
    double ipc = sqlite3_column_double(st, 4);
    if ((ipc_type == SQLITE_INTEGER || ipc_type == SQLITE_FLOAT) && isfinite(ipc)) {
      c->ipc_sum += ipc * (double)w;
      c->ipc_windows += w;
    }
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    fail_sql(c, rc);
    return;
  }
  if (points >= 3 && m2t > 0) {
    c->slopes[i] = (slope_t){true, cty / m2t, points};
  }
}

/* The slot of stage id `stage` (its name read once), or NULL past EM_COHORT_MAX_STAGES. */
static stage_t *stage_slot(cohort_t *c, int64_t stage) {
  for (size_t k = 0; k < c->n_stages; k++) {
    if (c->stages[k].id == stage) {
      return &c->stages[k];
    }
  }
  if (c->n_stages == EM_COHORT_MAX_STAGES) {
    return NULL;
  }
  stage_t *s = &c->stages[c->n_stages];
  memset(s, 0, sizeof(*s));
  s->id = stage;
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(c->db, "SELECT name FROM stages WHERE id = ?1", -1, &st, NULL);
  if (rc == SQLITE_OK) {
    sqlite3_bind_int64(st, 1, stage);
    rc = sqlite3_step(st);
    const char *name = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
    snprintf(s->name, sizeof(s->name), "%s", name ? name : "?");
    rc = rc == SQLITE_ROW ? SQLITE_DONE : rc;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    fail_sql(c, rc);
    return NULL;
  }
  if (em_histo_new(&s->total) != 0) {
    fail(c, 500, "out of memory");
    return NULL;
  }
  c->n_stages++;
  return s;
}

/* Closes the stage's open unit into its list of units (413 past the cap). */
static void close_unit(cohort_t *c, stage_t *s) {
  if (!s->have_open) {
    return;
  }
  s->have_open = false;
  if (++c->units > EM_COHORT_MAX_UNITS) {
    fail(c, 413,
         "the answer would hold more than %u units (device, stage and unit); give a larger unit "
         "or a shorter range, or narrow select or device",
         EM_COHORT_MAX_UNITS);
    return;
  }
  if (s->n_units == s->cap_units) {
    size_t cap = s->cap_units ? s->cap_units * 2 : 64;
    unit_t *v = realloc(s->units, cap * sizeof(*v));
    if (!v) {
      fail(c, 500, "out of memory");
      return;
    }
    s->units = v;
    s->cap_units = cap;
  }
  s->units[s->n_units++] = (unit_t){s->open_dev, s->open_start_ns, em_histo_count(s->open),
                                    em_histo_sum_ns(s->open), em_histo_quantile_ns(s->open, 0.99)};
  em_histo_free(s->open);
  s->open = NULL;
}

/* One stage window row (columns: stage, time_ns, count, sum_ns, min_ns, max_ns, scale,
 * zero_count, buckets) of device i, merged into its stage and its unit. */
static void add_window(cohort_t *c, size_t i, sqlite3_stmt *st, em_bucket_t *storage) {
  stage_t *s = stage_slot(c, sqlite3_column_int64(st, 0));
  if (!s) {
    return; /* Past the stages listed (or failed: c->status says). */
  }
  int64_t t = sqlite3_column_int64(st, 1);
  em_buckets_figures_t fig = {
      .count = (uint64_t)sqlite3_column_int64(st, 2),
      .sum_ns = (uint64_t)sqlite3_column_int64(st, 3),
      .min_ns = (uint64_t)sqlite3_column_int64(st, 4),
      .max_ns = (uint64_t)sqlite3_column_int64(st, 5),
      .scale = sqlite3_column_int(st, 6),
      .zero_count = (uint64_t)sqlite3_column_int64(st, 7),
  };
  em_stage_t w;
  const uint8_t *blob = sqlite3_column_blob(st, 8);
  if (em_buckets_decode(blob, (size_t)sqlite3_column_bytes(st, 8), &fig, storage, &w) != 0) {
    return; /* A malformed row is left out, as the history's readers do. */
  }
  int64_t start = t - t % c->unit_ns;
  if (s->have_open && (s->open_dev != i || s->open_start_ns != start)) {
    close_unit(c, s);
  }
  if (!s->have_open) {
    if (c->status || em_histo_new(&s->open) != 0) {
      fail(c, 500, "out of memory");
      return;
    }
    s->have_open = true;
    s->open_dev = i;
    s->open_start_ns = start;
  }
  em_histo_t *both[2] = {s->total, s->open};
  if (em_histo_add_stage_each(both, 2, &w) == -ENOMEM) {
    fail(c, 500, "out of memory");
  }
}

/* The stage windows of device i. */
static void read_windows(cohort_t *c, size_t i, em_bucket_t *storage) {
  sqlite3_stmt *st =
      rows_of(c, i,
              "SELECT stage, time_ns, count, sum_ns, min_ns, max_ns, scale, zero_count, buckets"
              " FROM stage_windows WHERE device = ?1 AND time_ns >= ?2 AND time_ns < ?3"
              " AND model IN (SELECT value FROM json_each(?4)) ORDER BY time_ns");
  if (!st) {
    return;
  }
  int rc = SQLITE_DONE;
  while (!c->status && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    c->in_cohort[i] = true;
    add_window(c, i, st, storage);
  }
  sqlite3_finalize(st);
  if (!c->status && rc != SQLITE_DONE) {
    fail_sql(c, rc);
    return;
  }
  for (size_t k = 0; k < c->n_stages && !c->status; k++) {
    close_unit(c, &c->stages[k]);
  }
}

static int cmp_stage(const void *a, const void *b) {
  return strcmp(((const stage_t *)a)->name, ((const stage_t *)b)->name);
}

static void write_answer(cohort_t *c, FILE *f) {
  const em_query_t *q = c->q;
  fputs("{\"select\":", f);
  put_str(f, q->select);
  fprintf(f, ",\"from_ns\":%llu,\"to_ns\":%llu,\"unit_s\":%u,\"devices\":[",
          (unsigned long long)q->from_ns, (unsigned long long)q->to_ns, q->unit_s);
  size_t k = 0;
  for (size_t i = 0; i < c->n_devices; i++) {
    if (c->in_cohort[i]) {
      fputs(k++ ? "," : "", f);
      put_str(f, c->devices[i].name);
    }
  }
  fprintf(f, "],\"windows\":%llu,\"levels\":{", (unsigned long long)c->windows);
  static const char *const names[4] = {"NOMINAL", "WARN", "DEGRADED", "CRITICAL"};
  for (int l = 0; l < 4; l++) {
    fprintf(f, "%s\"%s\":%llu", l ? "," : "", names[l], (unsigned long long)c->levels[l]);
  }
  fputs("},\"stages\":[", f);
  qsort(c->stages, c->n_stages, sizeof(c->stages[0]), cmp_stage);
  for (size_t s = 0; s < c->n_stages; s++) {
    const stage_t *st = &c->stages[s];
    uint64_t count = em_histo_count(st->total);
    fputs(s ? ",{\"stage\":" : "{\"stage\":", f);
    put_str(f, st->name);
    fprintf(f, ",\"count\":%llu,\"mean_ns\":", (unsigned long long)count);
    put_num(f, em_histo_mean_ns(st->total));
    static const struct {
      const char *key;
      double q;
    } qs[] = {{"p50_ns", 0.5}, {"p95_ns", 0.95}, {"p99_ns", 0.99}};
    for (size_t j = 0; j < 3; j++) {
      fprintf(f, ",\"%s\":", qs[j].key);
      put_num(f, round(em_histo_quantile_ns(st->total, qs[j].q)));
    }
    fputs(",\"units\":[", f);
    for (size_t u = 0; u < st->n_units; u++) {
      const unit_t *x = &st->units[u];
      fputs(u ? ",{\"device\":" : "{\"device\":", f);
      put_str(f, c->devices[x->dev].name);
      fprintf(f, ",\"start_ns\":%lld,\"count\":%llu,\"mean_ns\":", (long long)x->start_ns,
              (unsigned long long)x->count);
      put_num(f, x->count ? (double)x->sum_ns / (double)x->count : 0);
      fputs(",\"p99_ns\":", f);
      put_num(f, round(x->p99_ns));
      fputc('}', f);
    }
    fputs("]}", f);
  }
  fputs("],\"rss_slope\":[", f);
  k = 0;
  for (size_t i = 0; i < c->n_devices; i++) {
    if (c->slopes[i].present) {
      fputs(k++ ? ",{\"device\":" : "{\"device\":", f);
      put_str(f, c->devices[i].name);
      fputs(",\"bytes_per_s\":", f);
      put_num(f, c->slopes[i].bytes_per_s);
      fprintf(f, ",\"points\":%llu}", (unsigned long long)c->slopes[i].points);
    }
  }
  fputs("],\"ipc\":", f);
  if (c->ipc_windows > 0) {
    fputs("{\"mean\":", f);
    put_num(f, c->ipc_sum / (double)c->ipc_windows);
    fprintf(f, ",\"windows\":%llu}", (unsigned long long)c->ipc_windows);
  } else {
    fputs("null", f);
  }
  fputc('}', f);
}

static void cohort_free(cohort_t *c) {
  for (size_t k = 0; k < c->n_stages; k++) {
    em_histo_free(c->stages[k].total);
    em_histo_free(c->stages[k].open);
    free(c->stages[k].units);
  }
  for (size_t i = 0; i < c->n_devices; i++) {
    free(c->devices[i].name);
  }
  free(c->devices);
  free(c->in_cohort);
  free(c->slopes);
  free(c->ids);
}

void em_cohort_query(em_history_t *h, const em_query_t *q, em_history_reply_t *out) {
  char err[200];
  em_cohort_select_t sel;
  if (em_cohort_select_parse(q->select, &sel, err, sizeof(err)) != 0) {
    em_history_error(out, 400, err);
    return;
  }
  cohort_t c = {0};
  c.db = em_history_reader(h);
  c.q = q;
  c.unit_ns = (int64_t)q->unit_s * (int64_t)NS_PER_S;
  em_bucket_t *storage = malloc(EM_PROTO_MAX_BUCKETS * sizeof(*storage));
  if (!storage) {
    fail(&c, 500, "out of memory");
  }
  if (!c.status && match_models(&c, &sel) && metric_path(&c, "mem.rss", c.rss_path, 32) &&
      metric_path(&c, "pmu.ipc", c.ipc_path, 32) && load_devices(&c)) {
    for (size_t i = 0; i < c.n_devices && !c.status; i++) {
      read_data(&c, i);
      if (!c.status) {
        read_windows(&c, i, storage);
      }
    }
  }
  free(storage);
  if (c.status) {
    em_history_error(out, c.status, c.msg);
    cohort_free(&c);
    return;
  }
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) {
    cohort_free(&c);
    em_history_error(out, 500, "out of memory");
    return;
  }
  write_answer(&c, f);
  cohort_free(&c);
  reply_stream(out, f, &buf, &len);
}
