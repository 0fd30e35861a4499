/*
 * store_query.h - one value from an SQL query over an independent, read-only SQLite connection,
 * for the tests of the aggregator's store: they check what was committed, never what the
 * store's own connection sees. A query that does not prepare fails the test. Also statements run
 * behind the store's back (q_exec), and the fixture
 * of a store in a fresh temporary directory, removed with its WAL files after the test.
 */
#ifndef EM_TEST_STORE_QUERY_H
#define EM_TEST_STORE_QUERY_H

#include <stdint.h>

/* The first column of the first row as an integer, or -1 when there is no row. */
int64_t q_int(const char *path, const char *sql);

/* The first column of the first row as a double, or -1.0 when there is no row. */
double q_double(const char *path, const char *sql);

/* Runs sql (any number of statements) on the store at path over a read-write connection of its
 * own, for what a test does behind the store's back (an older schema, a trigger that fails);
 * fails the test when a statement fails. */
void q_exec(const char *path, const char *sql);

/* A store's path in a temporary directory of its own. */
typedef struct {
  char dir[256];
  char path[300];
} store_fixture_t;

/* cmocka setup and teardown: *state becomes a store_fixture_t whose directory exists and holds
 * no store; teardown deletes the store, its -wal and -shm files and the directory. */
int store_fixture_setup(void **state);
int store_fixture_teardown(void **state);

#endif /* EM_TEST_STORE_QUERY_H */
