/*
 * forensic_store.c - the store and the checks the forensic store tests share (see
 * forensic_store.h).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "forensic_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

em_store_t *forensic_store_open(const store_fixture_t *f, forensic_table_t table,
                                uint64_t retention_s, uint64_t max_bytes) {
  em_store_opts_t o = {.path = f->path,
                       .batch_ms = 1000,
                       .batch_rows = 1000,
                       .rollup_manual = true,
                       .retention_s = retention_s};
  if (table == FORENSIC_FLIGHTS) {
    o.flight_max_bytes = max_bytes;
  } else {
    o.profile_max_bytes = max_bytes;
  }
  em_store_t *s = NULL;
  char err[512];
  if (em_store_open(&s, &o, NULL, err, sizeof(err)) != 0) {
    fail_msg("em_store_open: %s", err);
  }
  return s;
}

/* A test's state: the store fixture, and the kind it stores. */
typedef struct {
  store_fixture_t *store;
  const forensic_kind_t *kind;
} fixture_t;

int forensic_setup(void **state) {
  fixture_t *t = calloc(1, sizeof(*t));
  assert_non_null(t);
  t->kind = *state;
  void *store = NULL;
  assert_int_equal(store_fixture_setup(&store), 0);
  t->store = store;
  *state = t;
  return 0;
}

int forensic_teardown(void **state) {
  fixture_t *t = *state;
  void *store = t->store;
  free(t);
  return store_fixture_teardown(&store);
}

/* The test's store, opened with retention_s and the kind's byte bound max_bytes. */
static em_store_t *open_store(const fixture_t *t, uint64_t retention_s, uint64_t max_bytes) {
  return forensic_store_open(t->store, t->kind->table, retention_s, max_bytes);
}

static const char *table_name(const fixture_t *t) {
  return t->kind->table == FORENSIC_FLIGHTS ? "flights" : "profiles";
}

/* q_int() of "<select> FROM <the kind's table><rest>". */
static int64_t q_table(const fixture_t *t, const char *select, const char *rest) {
  char sql[512];
  snprintf(sql, sizeof(sql), "%s FROM %s%s", select, table_name(t), rest);
  return q_int(t->store->path, sql);
}

static int64_t count(const fixture_t *t) {
  return q_table(t, "SELECT count(*)", "");
}

/* What the store's stats count of table `table`: entries stored (duplicates not counted), and
 * entries deleted to keep a device within the byte bound. */
static uint64_t stored(const em_store_stats_t *st, forensic_table_t table) {
  return table == FORENSIC_FLIGHTS ? st->flights : st->profiles;
}

static uint64_t dropped(const em_store_stats_t *st, forensic_table_t table) {
  return table == FORENSIC_FLIGHTS ? st->flights_dropped : st->profiles_dropped;
}

static forensic_table_t other(forensic_table_t table) {
  return table == FORENSIC_FLIGHTS ? FORENSIC_PROFILES : FORENSIC_FLIGHTS;
}

void forensic_row_holds_the_summary_and_the_cbor(void **state) {
  const fixture_t *t = *state;
  em_store_t *s = open_store(t, 0, 0);
  forensic_entry_t r = {.session = 42, .number = 0, .time_ns = T0_NS};
  t->kind->add(s, "dev-1", &r);
  assert_int_equal(em_store_flush(s), 0);
  assert_int_equal(q_int(t->store->path, "PRAGMA user_version"), t->kind->user_version);
  assert_int_equal(count(t), 1);
  char sql[2 * sizeof(r.cbor) + 1024];
  int n = snprintf(sql, sizeof(sql),
                   "SELECT count(*) FROM %s e JOIN devices d ON d.id = e.device WHERE "
                   "d.name = 'dev-1' AND e.session = 42 AND e.number = 0 AND e.time_ns = %llu AND "
                   "e.recv_ns = %llu AND e.historical = 0 AND e.bytes = %zu AND %s AND cbor = x'",
                   table_name(t), (unsigned long long)T0_NS, (unsigned long long)T0_NS, r.len,
                   t->kind->summary);
  for (size_t i = 0; i < r.len; i++) {
    n += snprintf(sql + n, sizeof(sql) - (size_t)n, "%02x", r.cbor[i]);
  }
  snprintf(sql + n, sizeof(sql) - (size_t)n, "'");
  assert_int_equal(q_int(t->store->path, sql), 1);
  em_store_stats_t st;
  em_store_stats(s, &st);
  assert_int_equal(stored(&st, t->kind->table), 1);
  assert_int_equal(stored(&st, other(t->kind->table)), 0);
  assert_int_equal(em_store_close(s), 0);
}

void forensic_replay_is_stored_once(void **state) {
  const fixture_t *t = *state;
  em_store_t *s = open_store(t, 0, 0);
  forensic_entry_t r = {.session = 42, .number = 0, .time_ns = T0_NS};
  t->kind->add(s, "dev-1", &r);
  t->kind->add(s, "dev-1", &r); /* A QoS 1 redelivery. */
  forensic_entry_t h = {.session = 42, .number = 0, .time_ns = T0_NS, .historical = true};
  t->kind->add(s, "dev-1", &h); /* The spool's replay. */
  assert_int_equal(em_store_flush(s), 0);
  forensic_entry_t next = {.session = 42, .number = 1, .time_ns = T0_NS + S_NS};
  t->kind->add(s, "dev-1", &next);
  t->kind->add(s, "dev-1", &r); /* A later batch: still a duplicate. */
  t->kind->add(s, "dev-2", &r); /* Same session and number, another device: its own. */
  assert_int_equal(em_store_flush(s), 0);
  assert_int_equal(count(t), 3);
  assert_int_equal(q_table(t, "SELECT sum(historical)", ""), 0);
  em_store_stats_t st;
  em_store_stats(s, &st);
  assert_int_equal(st.duplicates, 3);
  assert_int_equal(stored(&st, t->kind->table), 3);
  assert_int_equal(em_store_close(s), 0);
}

void forensic_retention_deletes_old_entries(void **state) {
  const fixture_t *t = *state;
  em_store_t *s = open_store(t, 3600, 0);
  forensic_entry_t old = {.session = 1, .number = 0, .time_ns = T0_NS - 7200 * S_NS};
  forensic_entry_t fresh = {.session = 1, .number = 1, .time_ns = T0_NS - 60 * S_NS};
  t->kind->add(s, "dev-1", &old);
  t->kind->add(s, "dev-1", &fresh);
  assert_int_equal(em_store_retain(s, T0_NS), 0);
  assert_int_equal(count(t), 1);
  assert_int_equal(q_table(t, "SELECT number", ""), 1);
  assert_int_equal(em_store_close(s), 0);
}

void forensic_byte_bound_keeps_the_newest_per_device(void **state) {
  const fixture_t *t = *state;
  /* Another device's entry first, stored without a bound: its size sets the bound. */
  forensic_entry_t r = {.session = 1, .number = 0, .time_ns = T0_NS};
  em_store_t *s = open_store(t, 0, 0);
  t->kind->add(s, "dev-2", &r);
  assert_int_equal(em_store_close(s), 0);
  s = open_store(t, 0, r.len * 2 + r.len / 2);
  for (uint32_t i = 0; i < 4; i++) {
    forensic_entry_t x = {.session = 1, .number = i, .time_ns = T0_NS + i * S_NS};
    t->kind->add(s, "dev-1", &x);
  }
  assert_int_equal(em_store_flush(s), 0);
  assert_int_equal(count(t), 3);
  assert_int_equal(q_table(t, "SELECT min(number)",
                           " e JOIN devices d ON d.id = e.device WHERE d.name = 'dev-1'"),
                   2);
  em_store_stats_t st;
  em_store_stats(s, &st);
  assert_int_equal(dropped(&st, t->kind->table), 2);
  assert_int_equal(dropped(&st, other(t->kind->table)), 0);
  assert_int_equal(em_store_close(s), 0);
}
