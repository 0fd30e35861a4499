/*
 * flights.c - the store's flight recordings (see flights.h; the table is in SCHEMA.md).
 *
 * Two statements: the insert, idempotent on (device, session, number) through the unique index
 * flights_device_session_number (ON CONFLICT DO NOTHING, so sqlite3_changes() tells a repeat),
 * and the per-device byte bound, which walks the device's rows newest first through
 * flights_device_time with a running sum of their sizes and deletes those past the bound.
 */
#define _POSIX_C_SOURCE 200809L
#include "flights.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

struct em_flights {
  sqlite3 *db;
  sqlite3_stmt *insert;
  sqlite3_stmt *bound;
};

static const char insert_sql[] =
    "INSERT INTO flights(device, session, number, time_ns, recv_ns, cause, level, prev_level,"
    " rule, stage, value, bound, reason, trigger_mono_ns, pre_ns, post_ns, period_ns, stages,"
    " columns, ticks, spans, spans_cut, ticks_cut, spans_overwritten, historical, bytes, cbor)"
    " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,"
    " ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27) ON CONFLICT DO NOTHING";

/* Keeps the newest recordings whose sizes add up to at most ?2 bytes. */
static const char bound_sql[] =
    "DELETE FROM flights WHERE id IN (SELECT id FROM (SELECT id, sum(bytes) OVER"
    " (ORDER BY time_ns DESC, id DESC) AS kept FROM flights WHERE device = ?1) WHERE kept > ?2)";

int em_flights_new(em_flights_t **out, sqlite3 *db) {
  *out = NULL;
  em_flights_t *fl = calloc(1, sizeof(*fl));
  if (!fl) {
    return SQLITE_NOMEM;
  }
  fl->db = db;
  int rc = sqlite3_prepare_v3(db, insert_sql, -1, SQLITE_PREPARE_PERSISTENT, &fl->insert, NULL);
  if (rc == SQLITE_OK) {
    rc = sqlite3_prepare_v3(db, bound_sql, -1, SQLITE_PREPARE_PERSISTENT, &fl->bound, NULL);
  }
  if (rc != SQLITE_OK) {
    em_flights_free(fl);
    return rc;
  }
  *out = fl;
  return SQLITE_OK;
}

void em_flights_free(em_flights_t *fl) {
  if (!fl) {
    return;
  }
  sqlite3_finalize(fl->insert);
  sqlite3_finalize(fl->bound);
  free(fl);
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

int em_flights_add(em_flights_t *fl, int64_t dev_id, const em_flight_t *f, const uint8_t *cbor,
                   size_t len, uint64_t recv_ns, uint64_t max_bytes, bool *stored,
                   uint64_t *dropped) {
  *stored = false;
  *dropped = 0;
  sqlite3_stmt *st = fl->insert;
  const em_flight_trigger_t *t = &f->trigger;
  sqlite3_bind_int64(st, 1, dev_id);
  sqlite3_bind_int64(st, 2, f->head.session);
  sqlite3_bind_int64(st, 3, f->number);
  sqlite3_bind_int64(st, 4, clamp(f->head.time_ns));
  sqlite3_bind_int64(st, 5, clamp(recv_ns));
  sqlite3_bind_int(st, 6, (int)t->cause);
  bind_level(st, 7, t->level);
  bind_level(st, 8, t->prev_level);
  bind_str(st, 9, t->rule);
  bind_str(st, 10, t->stage);
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
  for (int i = 0; i < 11; i++) {
    sqlite3_bind_int64(st, 14 + i, clamp(figures[i]));
  }
  sqlite3_bind_int(st, 25, f->historical ? 1 : 0);
  sqlite3_bind_int64(st, 26, (sqlite3_int64)len);
  sqlite3_bind_blob(st, 27, cbor, (int)len, SQLITE_STATIC);
  int rc = run(st);
  if (rc != SQLITE_OK || sqlite3_changes(fl->db) == 0) {
    return rc;
  }
  *stored = true;
  st = fl->bound;
  sqlite3_bind_int64(st, 1, dev_id);
  sqlite3_bind_int64(st, 2, clamp(max_bytes ? max_bytes : EM_FLIGHTS_DEFAULT_MAX_BYTES));
  rc = run(st);
  if (rc == SQLITE_OK) {
    *dropped = (uint64_t)sqlite3_changes(fl->db);
  }
  return rc;
}
