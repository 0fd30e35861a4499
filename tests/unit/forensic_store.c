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

uint64_t forensic_recv_ns(const forensic_entry_t *e) {
  return e->recv_ns ? e->recv_ns : T0_NS;
}

static const char *name_of(forensic_table_t table) {
  return table == FORENSIC_FLIGHTS ? "flights" : "profiles";
}

/* The kind's running total as committed (its forensic_bytes row), and the sum of its rows'
 * bytes it must equal. */
static int64_t total_row(const fixture_t *t, forensic_table_t table) {
  char sql[128];
  snprintf(sql, sizeof(sql), "SELECT bytes FROM forensic_bytes WHERE kind = '%s'", name_of(table));
  return q_int(t->store->path, sql);
}

static int64_t bytes_sum(const fixture_t *t, forensic_table_t table) {
  char sql[128];
  snprintf(sql, sizeof(sql), "SELECT coalesce(sum(bytes), 0) FROM %s", name_of(table));
  return q_int(t->store->path, sql);
}

/* What the store's stats say of `table`: entries evicted by the total bound, bytes now. */
static uint64_t evicted(const em_store_stats_t *st, forensic_table_t table) {
  return table == FORENSIC_FLIGHTS ? st->flights_evicted : st->profiles_evicted;
}

static uint64_t bytes_now(const em_store_stats_t *st, forensic_table_t table) {
  return table == FORENSIC_FLIGHTS ? st->flight_bytes : st->profile_bytes;
}

/* The store at f->path with the kind's total bound total_max_bytes (no retention, the
 * per-device bound the default). */
static em_store_t *open_total(const fixture_t *t, uint64_t total_max_bytes) {
  em_store_opts_t o = {
      .path = t->store->path, .batch_ms = 1000, .batch_rows = 1000, .rollup_manual = true};
  *(t->kind->table == FORENSIC_FLIGHTS ? &o.flight_total_max_bytes : &o.profile_total_max_bytes) =
      total_max_bytes;
  em_store_t *s = NULL;
  char err[512];
  if (em_store_open(&s, &o, NULL, err, sizeof(err)) != 0) {
    fail_msg("em_store_open: %s", err);
  }
  return s;
}

void forensic_total_bound_evicts_the_oldest_received_of_any_device(void **state) {
  const fixture_t *t = *state;
  static const char *const devices[] = {"dev-a", "dev-b", "dev-c"};
  enum { N = 6 };
  /* Device i % 3's entry number i / 3, received i s after T0_NS but timed i s before it: the
   * received order is the reverse of the devices' times. The same size each. */
  forensic_entry_t e[N];
  for (uint32_t i = 0; i < N; i++) {
    e[i] = (forensic_entry_t){
        .session = 1, .number = i / 3, .time_ns = T0_NS - i * S_NS, .recv_ns = T0_NS + i * S_NS};
  }
  /* The first entry without a bound: its size sets the bound. */
  em_store_t *s = open_total(t, 0);
  t->kind->add(s, devices[0], &e[0]);
  assert_int_equal(em_store_close(s), 0);
  uint64_t cap = e[0].len * 3 + e[0].len / 2;
  s = open_total(t, cap);
  em_store_stats_t st;
  for (size_t i = 1; i < N; i++) {
    t->kind->add(s, devices[i % 3], &e[i]);
    em_store_stats(s, &st);
    assert_true(bytes_now(&st, t->kind->table) <= cap);
  }
  assert_int_equal(em_store_flush(s), 0);
  assert_int_equal(q_table(t, "SELECT count(DISTINCT bytes)", ""), 1);
  /* The three received last, one of each device, are left. */
  assert_int_equal(count(t), 3);
  assert_int_equal(q_table(t, "SELECT count(DISTINCT device)", " WHERE number = 1"), 3);
  assert_int_equal(q_table(t, "SELECT min(recv_ns)", ""), (int64_t)e[3].recv_ns);
  em_store_stats(s, &st);
  assert_int_equal(evicted(&st, t->kind->table), N - count(t));
  assert_int_equal(dropped(&st, t->kind->table), 0);
  assert_int_equal(evicted(&st, other(t->kind->table)), 0);
  assert_int_equal(total_row(t, t->kind->table), bytes_sum(t, t->kind->table));
  assert_int_equal(bytes_now(&st, t->kind->table), bytes_sum(t, t->kind->table));
  assert_int_equal(total_row(t, other(t->kind->table)), 0);
  assert_int_equal(bytes_now(&st, other(t->kind->table)), 0);
  assert_int_equal(em_store_close(s), 0);

  /* A lower bound holds from the first maintenance pass, before any new entry. */
  s = open_total(t, e[0].len + e[0].len / 2);
  int64_t before = count(t);
  assert_int_equal(em_store_retain(s, T0_NS + N * S_NS), 0);
  assert_int_equal(count(t), 1);
  assert_int_equal(q_table(t, "SELECT count(*)",
                           " e JOIN devices d ON d.id = e.device WHERE d.name = 'dev-c'"
                           " AND e.number = 1"),
                   1);
  em_store_stats(s, &st);
  assert_int_equal(evicted(&st, t->kind->table), before - count(t));
  assert_int_equal(bytes_now(&st, t->kind->table), bytes_sum(t, t->kind->table));
  assert_int_equal(total_row(t, t->kind->table), bytes_sum(t, t->kind->table));
  assert_int_equal(em_store_close(s), 0);
}

void forensic_version_9_store_gets_its_total_at_open(void **state) {
  const fixture_t *t = *state;
  const char *name = name_of(t->kind->table);
  em_store_t *s = open_store(t, 0, 0);
  forensic_entry_t e[3];
  for (uint32_t i = 0; i < 3; i++) {
    e[i] = (forensic_entry_t){.session = 1, .number = i, .time_ns = T0_NS + i * S_NS};
  }
  t->kind->add(s, "dev-1", &e[0]);
  t->kind->add(s, "dev-2", &e[1]);
  assert_int_equal(em_store_close(s), 0);
  /* Back to version 9: no table of totals, no triggers, no recv_ns indexes. */
  static const char *const tables[] = {"flights", "profiles"};
  for (size_t i = 0; i < 2; i++) {
    char sql[512];
    snprintf(sql, sizeof(sql),
             "DROP TRIGGER %s_bytes_insert;DROP TRIGGER %s_bytes_delete;"
             "DROP TRIGGER %s_bytes_update;DROP INDEX %s_recv",
             tables[i], tables[i], tables[i], tables[i]);
    q_exec(t->store->path, sql);
  }
  q_exec(t->store->path, "DROP TABLE forensic_bytes;PRAGMA user_version=9");
  assert_int_equal(
      q_int(t->store->path, "SELECT count(*) FROM sqlite_master WHERE type = 'trigger'"), 0);
  s = open_store(t, 0, 0);
  assert_int_equal(q_int(t->store->path, "PRAGMA user_version"), t->kind->user_version);
  assert_int_equal(total_row(t, t->kind->table), (int64_t)(e[0].len + e[1].len));
  assert_int_equal(total_row(t, other(t->kind->table)), 0);
  em_store_stats_t st;
  em_store_stats(s, &st);
  assert_int_equal(bytes_now(&st, t->kind->table), bytes_sum(t, t->kind->table));
  char sql[256];
  snprintf(sql, sizeof(sql),
           "SELECT count(*) FROM sqlite_master WHERE tbl_name = '%s' AND (type = 'trigger' OR "
           "name = '%s_recv')",
           name, name);
  assert_int_equal(q_int(t->store->path, sql), 4);
  /* The total follows what is added after, and what retention deletes. */
  t->kind->add(s, "dev-1", &e[2]);
  assert_int_equal(em_store_close(s), 0);
  assert_int_equal(count(t), 3);
  assert_int_equal(total_row(t, t->kind->table), bytes_sum(t, t->kind->table));
  assert_int_equal(total_row(t, t->kind->table), (int64_t)(e[0].len + e[1].len + e[2].len));
  s = open_store(t, 3600, 0);
  assert_int_equal(em_store_retain(s, T0_NS + 7200 * S_NS), 0);
  em_store_stats(s, &st);
  assert_int_equal(em_store_close(s), 0);
  assert_int_equal(count(t), 0);
  assert_int_equal(total_row(t, t->kind->table), 0);
  assert_int_equal(bytes_now(&st, t->kind->table), 0);
}
