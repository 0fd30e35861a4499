/*
 * forensics.c - the store's per-device forensic blobs (see forensics.h; the tables are in
 * SCHEMA.md).
 *
 * Five statements per kind: the insert, idempotent on (device, session, number) through the
 * kind's unique index (ON CONFLICT DO NOTHING, so sqlite3_changes() tells a repeat); the
 * per-device byte bound, which walks the device's rows newest first through the kind's
 * (device, time_ns) index with a running sum of their sizes and deletes those past the bound;
 * and for the total bound the kind's forensic_bytes row (kept by the table's triggers), its
 * oldest received row (the kind's recv_ns index: one index step, however many rows) and the
 * delete of one row. The total bound deletes one oldest row at a time until the total is
 * within it: each step costs two index lookups, and a new blob (at most 256 KiB) displaces few.
 * The kinds differ only in their summary columns: add_flight() and add_profile() bind those,
 * commit() runs what both share.
 */
#define _POSIX_C_SOURCE 200809L
#include "forensics.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct em_forensics {
  sqlite3 *db;
  sqlite3_stmt *insert[EM_FORENSIC_KINDS];
  sqlite3_stmt *bound[EM_FORENSIC_KINDS];
  sqlite3_stmt *total[EM_FORENSIC_KINDS];  /* The kind's bytes in all. */
  sqlite3_stmt *oldest[EM_FORENSIC_KINDS]; /* id and bytes of the oldest received row. */
  sqlite3_stmt *evict[EM_FORENSIC_KINDS];  /* Deletes the row ?1. */
};

static const char *const insert_sql[EM_FORENSIC_KINDS] = {
    [EM_FORENSIC_FLIGHT] =
        "INSERT INTO flights(device, session, number, time_ns, recv_ns, cause, level,"
        " prev_level, rule, stage, value, bound, reason, trigger_mono_ns, pre_ns, post_ns,"
        " period_ns, stages, columns, ticks, spans, spans_cut, ticks_cut, spans_overwritten,"
        " historical, bytes, cbor, top_cause, top_share) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8,"
        " ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26,"
        " ?27, ?28, ?29) ON CONFLICT DO NOTHING",
    [EM_FORENSIC_PROFILE] =
        "INSERT INTO profiles(device, session, number, time_ns, recv_ns, cause, level,"
        " prev_level, rule, stage, reason, start_mono_ns, duration_ns, hz, clock, samples, lost,"
        " stages, frames, stacks, stacks_cut, samples_cut, historical, bytes, cbor)"
        " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,"
        " ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25) ON CONFLICT DO NOTHING",
};

static const char *const table[EM_FORENSIC_KINDS] = {
    [EM_FORENSIC_FLIGHT] = "flights", [EM_FORENSIC_PROFILE] = "profiles"};

static const uint64_t default_max_bytes[EM_FORENSIC_KINDS] = {
    [EM_FORENSIC_FLIGHT] = EM_FLIGHTS_DEFAULT_MAX_BYTES,
    [EM_FORENSIC_PROFILE] = EM_PROFILES_DEFAULT_MAX_BYTES};

/* Keeps the newest blobs whose sizes add up to at most ?2 bytes. */
static const char bound_fmt[] =
    "DELETE FROM %s WHERE id IN (SELECT id FROM (SELECT id, sum(bytes) OVER"
    " (ORDER BY time_ns DESC, id DESC) AS kept FROM %s WHERE device = ?1) WHERE kept > ?2)";
static const char total_fmt[] = "SELECT bytes FROM forensic_bytes WHERE kind = '%s'";
static const char oldest_fmt[] = "SELECT id, bytes FROM %s ORDER BY recv_ns, id LIMIT 1";
static const char evict_fmt[] = "DELETE FROM %s WHERE id = ?1";

int em_forensics_new(em_forensics_t **out, sqlite3 *db) {
  *out = NULL;
  em_forensics_t *fo = calloc(1, sizeof(*fo));
  if (!fo) {
    return SQLITE_NOMEM;
  }
  fo->db = db;
  int rc = SQLITE_OK;
  for (int k = 0; k < EM_FORENSIC_KINDS && rc == SQLITE_OK; k++) {
    char sql[4][sizeof(bound_fmt) + 32];
    snprintf(sql[0], sizeof(sql[0]), bound_fmt, table[k], table[k]);
    snprintf(sql[1], sizeof(sql[1]), total_fmt, table[k]);
    snprintf(sql[2], sizeof(sql[2]), oldest_fmt, table[k]);
    snprintf(sql[3], sizeof(sql[3]), evict_fmt, table[k]);
    sqlite3_stmt **st[5] = {&fo->insert[k], &fo->bound[k], &fo->total[k], &fo->oldest[k],
                            &fo->evict[k]};
    for (int i = 0; i < 5 && rc == SQLITE_OK; i++) {
      rc = sqlite3_prepare_v3(db, i == 0 ? insert_sql[k] : sql[i - 1], -1,
                              SQLITE_PREPARE_PERSISTENT, st[i], NULL);
    }
  }
  if (rc != SQLITE_OK) {
    em_forensics_free(fo);
    return rc;
  }
  *out = fo;
  return SQLITE_OK;
}

void em_forensics_free(em_forensics_t *fo) {
  if (!fo) {
    return;
  }
  for (int k = 0; k < EM_FORENSIC_KINDS; k++) {
    sqlite3_finalize(fo->insert[k]);
    sqlite3_finalize(fo->bound[k]);
    sqlite3_finalize(fo->total[k]);
    sqlite3_finalize(fo->oldest[k]);
    sqlite3_finalize(fo->evict[k]);
  }
  free(fo);
}

static sqlite3_int64 clamp(uint64_t v) {
  return v > (uint64_t)INT64_MAX ? INT64_MAX : (sqlite3_int64)v;
}

static void bind_str(sqlite3_stmt *st, int i, const char *s) {
  if (s) {
    sqlite3_bind_text(st, i, s, (int)strnlen(s, 4096), SQLITE_STATIC);
  } else {
    sqlite3_bind_null(st, i);
  }
}

/* A number as a REAL, absent (or not a number) as NULL. */
static void bind_num(sqlite3_stmt *st, int i, const em_value_t *v) {
  bool num = v->type == EM_VALUE_UINT || v->type == EM_VALUE_INT || v->type == EM_VALUE_FLOAT;
  double x = v->type == EM_VALUE_UINT  ? (double)v->as.u
             : v->type == EM_VALUE_INT ? (double)v->as.i
                                       : v->as.f;
  (void)(num ? sqlite3_bind_double(st, i, x) : sqlite3_bind_null(st, i));
}

/* A level 0..3 as an INTEGER, anything else (EM_LEVEL_NONE: not carried) as NULL. */
static void bind_level(sqlite3_stmt *st, int i, em_level_t level) {
  bool known = level >= EM_LEVEL_NOMINAL && level <= EM_LEVEL_CRITICAL;
  (void)(known ? sqlite3_bind_int(st, i, (int)level) : sqlite3_bind_null(st, i));
}

/* Steps st to its end and resets it. Returns SQLITE_OK or the statement's result code. */
static int run(sqlite3_stmt *st) {
  int rc = sqlite3_step(st);
  while (rc == SQLITE_ROW) {
    rc = sqlite3_step(st);
  }
  rc = rc == SQLITE_DONE ? SQLITE_OK : sqlite3_reset(st);
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  return rc;
}

/* Binds what every kind's row starts with: ?1 device, ?2 session, ?3 number, ?4 time_ns,
 * ?5 recv_ns, ?6 cause, ?7 level, ?8 prev_level, ?9 rule, ?10 stage. */
static void bind_head(sqlite3_stmt *st, int64_t dev_id, const em_msg_head_t *head, uint32_t number,
                      uint64_t recv_ns, int cause, em_level_t level, em_level_t prev_level,
                      const char *rule, const char *stage) {
  sqlite3_bind_int64(st, 1, dev_id);
  sqlite3_bind_int64(st, 2, head->session);
  sqlite3_bind_int64(st, 3, number);
  sqlite3_bind_int64(st, 4, clamp(head->time_ns));
  sqlite3_bind_int64(st, 5, clamp(recv_ns));
  sqlite3_bind_int(st, 6, cause);
  bind_level(st, 7, level);
  bind_level(st, 8, prev_level);
  bind_str(st, 9, rule);
  bind_str(st, 10, stage);
}

/* Steps st for its one row: *found, and columns 0 and 1 into a and b (NULL: not wanted).
 * Returns SQLITE_OK or the statement's result code. */
static int row(sqlite3_stmt *st, bool *found, int64_t *a, int64_t *b) {
  int rc = sqlite3_step(st);
  *found = rc == SQLITE_ROW;
  if (*found) {
    *a = sqlite3_column_int64(st, 0);
    if (b) {
      *b = sqlite3_column_int64(st, 1);
    }
  }
  rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : sqlite3_reset(st);
  sqlite3_reset(st);
  return rc;
}

int em_forensics_bytes(em_forensics_t *fo, em_forensic_kind_t k, uint64_t *bytes) {
  bool found = false;
  int64_t v = 0;
  int rc = row(fo->total[k], &found, &v, NULL);
  *bytes = found && v > 0 ? (uint64_t)v : 0;
  return rc;
}

int em_forensics_trim(em_forensics_t *fo, em_forensic_kind_t k, uint64_t total_max_bytes,
                      uint64_t *evicted) {
  *evicted = 0;
  uint64_t cap = total_max_bytes ? total_max_bytes : EM_FORENSICS_DEFAULT_TOTAL_MAX_BYTES;
  uint64_t total = 0;
  int rc = em_forensics_bytes(fo, k, &total);
  while (rc == SQLITE_OK && total > cap) {
    bool found = false;
    int64_t id = 0;
    int64_t bytes = 0;
    rc = row(fo->oldest[k], &found, &id, &bytes);
    if (rc != SQLITE_OK || !found) {
      break; /* No row left: nothing more to delete, whatever the total says. */
    }
    sqlite3_bind_int64(fo->evict[k], 1, id);
    rc = run(fo->evict[k]);
    if (rc == SQLITE_OK) {
      (*evicted)++;
      total = bytes > 0 && (uint64_t)bytes < total ? total - (uint64_t)bytes : 0;
    }
  }
  return rc;
}

/* Runs kind k's bound insert (its columns bound, the last three being historical, bytes and
 * cbor at `tail`..tail+2), and after a new row the device's byte bound and the kind's total
 * bound. */
static int commit(em_forensics_t *fo, em_forensic_kind_t k, int64_t dev_id, bool historical,
                  const uint8_t *cbor, size_t len, int tail, const em_forensics_caps_t *caps,
                  em_forensics_result_t *res) {
  *res = (em_forensics_result_t){false, 0, 0};
  sqlite3_stmt *st = fo->insert[k];
  sqlite3_bind_int(st, tail, historical ? 1 : 0);
  sqlite3_bind_int64(st, tail + 1, (sqlite3_int64)len);
  sqlite3_bind_blob(st, tail + 2, cbor, (int)len, SQLITE_STATIC);
  int rc = run(st);
  if (rc != SQLITE_OK || sqlite3_changes(fo->db) == 0) {
    return rc;
  }
  res->stored = true;
  st = fo->bound[k];
  sqlite3_bind_int64(st, 1, dev_id);
  uint64_t max_bytes = caps->device_max_bytes;
  sqlite3_bind_int64(st, 2, clamp(max_bytes ? max_bytes : default_max_bytes[k]));
  rc = run(st);
  if (rc == SQLITE_OK) {
    res->dropped = (uint64_t)sqlite3_changes(fo->db);
    rc = em_forensics_trim(fo, k, caps->total_max_bytes, &res->evicted);
  }
  return rc;
}

/* Binds figures[0..n) to the columns from `first` on; returns the column after them. */
static int bind_figures(sqlite3_stmt *st, int first, const uint64_t *figures, size_t n) {
  for (size_t i = 0; i < n; i++) {
    sqlite3_bind_int64(st, first + (int)i, clamp(figures[i]));
  }
  return first + (int)n;
}

int em_forensics_add_flight(em_forensics_t *fo, int64_t dev_id, const em_flight_t *f,
                            const uint8_t *cbor, size_t len, uint64_t recv_ns,
                            const em_forensics_caps_t *caps, em_forensics_result_t *res) {
  sqlite3_stmt *st = fo->insert[EM_FORENSIC_FLIGHT];
  const em_flight_trigger_t *t = &f->trigger;
  bind_head(st, dev_id, &f->head, f->number, recv_ns, (int)t->cause, t->level, t->prev_level,
            t->rule, t->stage);
  bind_num(st, 11, &t->value);
  bind_num(st, 12, &t->bound);
  bind_str(st, 13, t->reason);
  const uint64_t figures[] = {f->trigger_mono_ns,
                              f->pre_ns,
                              f->post_ns,
                              f->period_ns,
                              f->n_stages,
                              f->n_columns,
                              f->n_ticks,
                              f->n_spans,
                              f->truncated.spans_cut,
                              f->truncated.ticks_cut,
                              f->truncated.spans_overwritten};
  int blob_col = bind_figures(st, 14, figures, sizeof(figures) / sizeof(figures[0]));
  /* The verdict's top cause (its causes come in descending share); the whole verdict stays in
   * the CBOR. None: NULL. */
  if (f->verdict && f->verdict->n_causes > 0) {
    bind_str(st, 28, em_proto_verdict_cause_name(f->verdict->causes[0].code));
    sqlite3_bind_double(st, 29, f->verdict->causes[0].share);
  }
  return commit(fo, EM_FORENSIC_FLIGHT, dev_id, f->historical, cbor, len, blob_col, caps, res);
}

int em_forensics_add_profile(em_forensics_t *fo, int64_t dev_id, const em_profile_t *p,
                             const uint8_t *cbor, size_t len, uint64_t recv_ns,
                             const em_forensics_caps_t *caps, em_forensics_result_t *res) {
  sqlite3_stmt *st = fo->insert[EM_FORENSIC_PROFILE];
  const em_profile_trigger_t *t = &p->trigger;
  bind_head(st, dev_id, &p->head, p->number, recv_ns, (int)t->cause, t->level, t->prev_level,
            t->rule, t->stage);
  bind_str(st, 11, t->reason);
  sqlite3_bind_int64(st, 12, clamp(p->start_mono_ns));
  sqlite3_bind_int64(st, 13, clamp(p->duration_ns));
  sqlite3_bind_int64(st, 14, p->hz);
  bind_str(st, 15, p->clock);
  const uint64_t figures[] = {p->samples,
                              p->lost,
                              p->n_stages,
                              p->n_frames,
                              p->n_stacks,
                              p->truncated.stacks_cut,
                              p->truncated.samples_cut};
  int blob_col = bind_figures(st, 16, figures, sizeof(figures) / sizeof(figures[0]));
  return commit(fo, EM_FORENSIC_PROFILE, dev_id, p->historical, cbor, len, blob_col, caps, res);
}
