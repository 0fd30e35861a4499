/*
 * store_query.c - read-only queries, and statements run behind the store's back, for the store
 * tests (see store_query.h).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "store_query.h"
#include "tmp_dir.h"

#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Prepares sql on a new read-only connection to path and steps it once. */
static sqlite3_stmt *first_row(const char *path, const char *sql, sqlite3 **db, int *rc) {
  *db = NULL;
  assert_int_equal(sqlite3_open_v2(path, db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(*db, sql, -1, &st, NULL) != SQLITE_OK) {
    fail_msg("%s: %s", sql, sqlite3_errmsg(*db));
  }
  *rc = sqlite3_step(st);
  return st;
}

/* The first column of the first row as an integer (*i) and as a double (*d); false when the
 * query has no row (*i and *d untouched). */
static bool first_value(const char *path, const char *sql, int64_t *i, double *d) {
  sqlite3 *db;
  int rc;
  sqlite3_stmt *st = first_row(path, sql, &db, &rc);
  if (rc == SQLITE_ROW) {
    *i = sqlite3_column_int64(st, 0);
    *d = sqlite3_column_double(st, 0);
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return rc == SQLITE_ROW;
}

int64_t q_int(const char *path, const char *sql) {
  int64_t i = -1;
  double d;
  (void)first_value(path, sql, &i, &d);
  return i;
}

void q_exec(const char *path, const char *sql) {
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
}

double q_double(const char *path, const char *sql) {
  int64_t i;
  double d = -1.0;
  (void)first_value(path, sql, &i, &d);
  return d;
}

int store_fixture_setup(void **state) {
  store_fixture_t *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  em_tmp_dir_make(f->dir, sizeof(f->dir), "em-store-test", f->path, sizeof(f->path), "history.db");
  *state = f;
  return 0;
}

int store_fixture_teardown(void **state) {
  store_fixture_t *f = *state;
  static const char *const suffix[] = {"", "-wal", "-shm"};
  for (size_t i = 0; i < 3; i++) {
    char p[400];
    snprintf(p, sizeof(p), "%s%s", f->path, suffix[i]);
    unlink(p);
  }
  rmdir(f->dir);
  free(f);
  return 0;
}
