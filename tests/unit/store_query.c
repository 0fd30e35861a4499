/*
 * store_query.c - read-only queries for the store tests (see store_query.h).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "store_query.h"

#include <sqlite3.h>

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

int64_t q_int(const char *path, const char *sql) {
  sqlite3 *db;
  int rc;
  sqlite3_stmt *st = first_row(path, sql, &db, &rc);
  int64_t v = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

double q_double(const char *path, const char *sql) {
  sqlite3 *db;
  int rc;
  sqlite3_stmt *st = first_row(path, sql, &db, &rc);
  double v = rc == SQLITE_ROW ? sqlite3_column_double(st, 0) : -1.0;
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}
