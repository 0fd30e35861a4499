/*
 * models.c - the store's `models` table (see models.h; the table is in SCHEMA.md).
 *
 * An identity the store has not cached costs one SELECT through the table's unique index; only
 * a new one costs more: the bounds (the row count, kept in memory and counted again after a
 * rollback; the device's rows, through models_device) and the INSERT. The sweep is one DELETE
 * over `models` (small: max_rows at most) and `devices.model`, never the big tables.
 */
#define _POSIX_C_SOURCE 200809L
#include "models.h"

#include <stdlib.h>

enum { ST_FIND, ST_ADD, ST_COUNT_ALL, ST_COUNT_DEVICE, ST_TOUCH, ST_SWEEP_LIST, ST_SWEEP, ST_N };

/* The rows a sweep deletes: listed first, then deleted with the same condition (no RETURNING,
 * SQLite 3.35: Debian 11 has 3.34, Ubuntu 20.04 3.31). */
#define SWEPT_ROWS                                                                                 \
  "FROM models WHERE (last_ns IS NULL OR last_ns < ?1)"                                            \
  " AND id NOT IN (SELECT model FROM devices WHERE model IS NOT NULL)"

static const char *const stmt_sql[ST_N] = {
    [ST_FIND] = "SELECT id FROM models WHERE name = ?1 AND version = ?2 AND labels = ?3",
    [ST_ADD] = "INSERT INTO models(name, version, labels, device) VALUES(?1, ?2, ?3, ?4)",
    [ST_COUNT_ALL] = "SELECT count(*) FROM models",
    [ST_COUNT_DEVICE] = "SELECT count(*) FROM models WHERE device = ?1",
    /* max() of SQLite is NULL when an argument is: a first use sets last_ns. */
    [ST_TOUCH] = "UPDATE models SET last_ns = max(coalesce(last_ns, ?2), ?2) WHERE id = ?1",
    [ST_SWEEP_LIST] = "SELECT id " SWEPT_ROWS,
    [ST_SWEEP] = "DELETE " SWEPT_ROWS,
};

struct em_models {
  sqlite3 *db;
  sqlite3_stmt *st[ST_N];
  uint32_t max_rows;
  uint32_t per_device_max;
  bool rows_known; /* rows holds the table's row count (false after a rollback). */
  int64_t rows;
};

int em_models_new(em_models_t **out, sqlite3 *db, uint32_t max_rows, uint32_t per_device_max) {
  *out = NULL;
  em_models_t *m = calloc(1, sizeof(*m));
  if (!m) {
    return SQLITE_NOMEM;
  }
  m->db = db;
  m->max_rows = max_rows ? max_rows : EM_MODELS_DEFAULT_MAX;
  m->per_device_max = per_device_max ? per_device_max : EM_MODELS_DEFAULT_PER_DEVICE_MAX;
  int rc = SQLITE_OK;
  for (int i = 0; i < ST_N && rc == SQLITE_OK; i++) {
    rc = sqlite3_prepare_v3(db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &m->st[i], NULL);
  }
  if (rc != SQLITE_OK) {
    em_models_free(m);
    return rc;
  }
  *out = m;
  return SQLITE_OK;
}

void em_models_free(em_models_t *m) {
  if (!m) {
    return;
  }
  for (int i = 0; i < ST_N; i++) {
    sqlite3_finalize(m->st[i]);
  }
  free(m);
}

void em_models_forget(em_models_t *m) {
  if (m) {
    m->rows_known = false;
  }
}

/* Steps st, which answers at most one integer row, into *value (untouched when it answers
 * none), then resets it and clears its bindings. Returns SQLITE_OK or its result code. */
static int step_int(sqlite3_stmt *st, int64_t *value) {
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *value = sqlite3_column_int64(st, 0);
    rc = sqlite3_step(st);
  }
  int reset = sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  return rc == SQLITE_DONE ? SQLITE_OK : reset != SQLITE_OK ? reset : rc;
}

/* Whether one more row is within the bounds, for a row first named by dev_id. Returns
 * SQLITE_OK or a statement's result code. */
static int room_for(em_models_t *m, int64_t dev_id, bool *room) {
  *room = false;
  if (!m->rows_known) {
    int rc = step_int(m->st[ST_COUNT_ALL], &m->rows);
    if (rc != SQLITE_OK) {
      return rc;
    }
    m->rows_known = true;
  }
  if (m->rows >= (int64_t)m->max_rows) {
    return SQLITE_OK;
  }
  int64_t mine = 0;
  sqlite3_bind_int64(m->st[ST_COUNT_DEVICE], 1, dev_id);
  int rc = step_int(m->st[ST_COUNT_DEVICE], &mine);
  *room = rc == SQLITE_OK && mine < (int64_t)m->per_device_max;
  return rc;
}

/* Binds the identity to ?1..?3 of st. */
static void bind_identity(sqlite3_stmt *st, const char *name, const char *version,
                          const char *labels, size_t labels_len) {
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, version, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 3, labels, (int)labels_len, SQLITE_STATIC);
}

int em_models_find(em_models_t *m, const char *name, const char *version, const char *labels,
                   size_t labels_len, int64_t dev_id, int64_t *id, bool *refused) {
  *id = 0;
  *refused = false;
  bind_identity(m->st[ST_FIND], name, version, labels, labels_len);
  int rc = step_int(m->st[ST_FIND], id);
  if (rc != SQLITE_OK || *id > 0) {
    return rc;
  }
  bool room;
  rc = room_for(m, dev_id, &room);
  if (rc != SQLITE_OK || !room) {
    *refused = rc == SQLITE_OK;
    return rc;
  }
  sqlite3_stmt *st = m->st[ST_ADD];
  bind_identity(st, name, version, labels, labels_len);
  sqlite3_bind_int64(st, 4, dev_id);
  int64_t none = 0;
  rc = step_int(st, &none);
  if (rc != SQLITE_OK) {
    return rc;
  }
  *id = sqlite3_last_insert_rowid(m->db);
  m->rows++;
  return SQLITE_OK;
}

int em_models_touch(em_models_t *m, int64_t id, int64_t time_ns) {
  sqlite3_stmt *st = m->st[ST_TOUCH];
  sqlite3_bind_int64(st, 1, id);
  sqlite3_bind_int64(st, 2, time_ns);
  int64_t none = 0;
  return step_int(st, &none);
}

int em_models_sweep(em_models_t *m, int64_t cut_ns, em_models_swept_t *out) {
  *out = (em_models_swept_t){0};
  sqlite3_stmt *st = m->st[ST_SWEEP_LIST];
  sqlite3_bind_int64(st, 1, cut_ns);
  size_t cap = 0, listed = 0;
  bool lost = false; /* An id did not fit: out->ids is dropped, the caller forgets them all. */
  int rc = sqlite3_step(st);
  for (; rc == SQLITE_ROW; rc = sqlite3_step(st)) {
    if (!lost && listed == cap) {
      cap = cap ? cap * 2 : 64;
      int64_t *ids = realloc(out->ids, cap * sizeof(*ids));
      lost = !ids;
      out->ids = ids ? ids : out->ids;
    }
    if (!lost) {
      out->ids[listed] = sqlite3_column_int64(st, 0);
    }
    listed++;
  }
  int reset = sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  if (rc == SQLITE_DONE && reset == SQLITE_OK) {
    st = m->st[ST_SWEEP];
    sqlite3_bind_int64(st, 1, cut_ns);
    rc = sqlite3_step(st);
    reset = sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    out->deleted = (size_t)sqlite3_changes(m->db);
    /* The same condition on the one writing connection: the same rows. Were they not, the
     * caller forgets every id. */
    lost = lost || out->deleted != listed;
  }
  if (rc != SQLITE_DONE) {
    free(out->ids);
    *out = (em_models_swept_t){0};
    return reset != SQLITE_OK ? reset : rc;
  }
  if (lost || out->deleted == 0) {
    free(out->ids);
    out->ids = NULL;
  }
  if (m->rows_known) {
    m->rows -= (int64_t)out->deleted;
  }
  return SQLITE_OK;
}
