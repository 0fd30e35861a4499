/*
 * store_query.h - one value from an SQL query over an independent, read-only SQLite connection,
 * for the tests of the aggregator's store: they check what was committed, never what the
 * store's own connection sees. A query that does not prepare fails the test.
 */
#ifndef EM_TEST_STORE_QUERY_H
#define EM_TEST_STORE_QUERY_H

#include <stdint.h>

/* The first column of the first row as an integer, or -1 when there is no row. */
int64_t q_int(const char *path, const char *sql);

/* The first column of the first row as a double, or -1.0 when there is no row. */
double q_double(const char *path, const char *sql);

#endif /* EM_TEST_STORE_QUERY_H */
