/*
 * test_agg_flights.c - flight recordings in the aggregator's store (host/aggregator/forensics.c
 * through em_store_add_flight()) against a real SQLite database in a temporary directory: the
 * row's summary columns and its CBOR as given, a replay (same device, session and number, live
 * or historical) stored once and counted as a duplicate, retention by the recording's time, and
 * the per-device byte bound keeping the newest recordings. Rows are read through an
 * independent connection (store_query.h), so only committed rows count.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "store.h"
#include "store_query.h"

#include <edgemon/flight.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T0_NS 1700000000000000000ull
#define S_NS  1000000000ull

typedef store_fixture_t fixture_t;
#define setup    store_fixture_setup
#define teardown store_fixture_teardown

static em_store_t *open_store(const fixture_t *f, uint64_t retention_s, uint64_t max_bytes) {
  em_store_opts_t o = {.path = f->path,
                       .batch_ms = 1000,
                       .batch_rows = 1000,
                       .rollup_manual = true,
                       .retention_s = retention_s,
                       .flight_max_bytes = max_bytes};
  em_store_t *s = NULL;
  char err[512];
  if (em_store_open(&s, &o, NULL, err, sizeof(err)) != 0) {
    fail_msg("em_store_open: %s", err);
  }
  return s;
}

/* A small recording: 2 stages, a counter column, 2 ticks, 3 spans of 2 frames. */
typedef struct {
  uint8_t buf[4096];
  size_t len;
  em_flight_t fl;
} rec_t;

static const char *const stages[] = {"pre", "infer"};
static const em_flight_column_t columns[] = {{"pmu.context-switches", "1", EM_METRIC_COUNTER}};

static void make(rec_t *r, uint32_t session, uint32_t number, uint64_t time_ns) {
  static em_flight_value_t v0 = {0, {.type = EM_VALUE_UINT, .as.u = 1000}};
  static em_flight_value_t v1 = {0, {.type = EM_VALUE_UINT, .as.u = 1300}};
  static const em_flight_tick_t ticks[] = {{.mono_ns = 900 * S_NS, .values = &v0, .n_values = 1},
                                           {.mono_ns = 1000 * S_NS, .values = &v1, .n_values = 1}};
  static const em_flight_span_t spans[] = {
      {.stage = 0, .frame_id = 7, .start_ns = 950 * S_NS, .duration_ns = 2000000},
      {.stage = 1, .frame_id = 7, .start_ns = 950 * S_NS + 3000000, .duration_ns = 45000000},
      {.stage = 0, .frame_id = 8, .start_ns = 951 * S_NS, .duration_ns = 2100000},
  };
  memset(r, 0, sizeof(*r));
  r->fl = (em_flight_t){
      .head = {.time_ns = time_ns, .session = session},
      .number = number,
      .trigger = {.cause = EM_FLIGHT_ESCALATION,
                  .level = EM_LEVEL_DEGRADED,
                  .prev_level = EM_LEVEL_NOMINAL,
                  .rule = "infer.p99",
                  .stage = "infer",
                  .value = {.type = EM_VALUE_UINT, .as.u = 45000000},
                  .bound = {.type = EM_VALUE_UINT, .as.u = 40000000},
                  .reason = "p99 over budget"},
      .trigger_mono_ns = 950 * S_NS,
      .pre_ns = 2 * S_NS,
      .post_ns = S_NS,
      .period_ns = 100 * S_NS,
      .stages = stages,
      .n_stages = 2,
      .columns = columns,
      .n_columns = 1,
      .ticks = ticks,
      .n_ticks = 2,
      .spans = spans,
      .n_spans = 3,
      .truncated = {.spans_cut = 4},
  };
  assert_int_equal(em_flight_encode(&r->fl, r->buf, sizeof(r->buf), &r->len), 0);
}

static void add(em_store_t *s, const char *device, const rec_t *r) {
  assert_int_equal(em_store_add_flight(s, device, &r->fl, r->buf, r->len, T0_NS), 0);
}

static int64_t count(const fixture_t *f) {
  return q_int(f->path, "SELECT count(*) FROM flights");
}

static void flights_row_holds_the_summary_and_the_cbor(void **state) {
  fixture_t *f = *state;
  em_store_t *s = open_store(f, 0, 0);
  rec_t r;
  make(&r, 42, 0, T0_NS);
  add(s, "dev-1", &r);
  assert_int_equal(em_store_flush(s), 0);
  assert_int_equal(q_int(f->path, "PRAGMA user_version"), 9);
  assert_int_equal(count(f), 1);
  char sql[2 * sizeof(r.buf) + 200];
  int n = snprintf(
      sql, sizeof(sql),
      "SELECT count(*) FROM flights f JOIN devices d ON d.id = f.device WHERE "
      "d.name = 'dev-1' AND f.session = 42 AND f.number = 0 AND f.time_ns = %llu AND "
      "f.cause = 0 AND f.level = 2 AND f.prev_level = 0 AND f.rule = 'infer.p99' AND "
      "f.stage = 'infer' AND f.value = 45000000 AND f.bound = 40000000 AND f.ticks = 2 AND "
      "f.spans = 3 AND f.stages = 2 AND f.columns = 1 AND f.spans_cut = 4 AND f.ticks_cut = 0 "
      "AND f.historical = 0 AND f.bytes = %zu AND cbor = x'",
      (unsigned long long)T0_NS, r.len);
  for (size_t i = 0; i < r.len; i++) {
    n += snprintf(sql + n, sizeof(sql) - (size_t)n, "%02x", r.buf[i]);
  }
  snprintf(sql + n, sizeof(sql) - (size_t)n, "'");
  assert_int_equal(q_int(f->path, sql), 1);
  em_store_stats_t st;
  em_store_stats(s, &st);
  assert_int_equal(st.flights, 1);
  assert_int_equal(em_store_close(s), 0);
}

static void flights_replay_is_stored_once(void **state) {
  fixture_t *f = *state;
  em_store_t *s = open_store(f, 0, 0);
  rec_t r;
  make(&r, 42, 0, T0_NS);
  add(s, "dev-1", &r);
  add(s, "dev-1", &r); /* A QoS 1 redelivery. */
  rec_t h;
  make(&h, 42, 0, T0_NS);
  h.fl.historical = true;
  assert_int_equal(em_flight_encode(&h.fl, h.buf, sizeof(h.buf), &h.len), 0);
  add(s, "dev-1", &h); /* The spool's replay. */
  rec_t other;
  make(&other, 42, 1, T0_NS + S_NS);
  add(s, "dev-1", &other);
  add(s, "dev-2", &r); /* Same session and number, another device: its own. */
  assert_int_equal(em_store_flush(s), 0);
  assert_int_equal(count(f), 3);
  assert_int_equal(q_int(f->path, "SELECT sum(historical) FROM flights"), 0);
  em_store_stats_t st;
  em_store_stats(s, &st);
  assert_int_equal(st.duplicates, 2);
  assert_int_equal(st.flights, 3);
  assert_int_equal(em_store_close(s), 0);
}

static void flights_retention_deletes_old_recordings(void **state) {
  fixture_t *f = *state;
  em_store_t *s = open_store(f, 3600, 0);
  rec_t old, fresh;
  make(&old, 1, 0, T0_NS - 7200 * S_NS);
  make(&fresh, 1, 1, T0_NS - 60 * S_NS);
  add(s, "dev-1", &old);
  add(s, "dev-1", &fresh);
  assert_int_equal(em_store_retain(s, T0_NS), 0);
  assert_int_equal(count(f), 1);
  assert_int_equal(q_int(f->path, "SELECT number FROM flights"), 1);
  assert_int_equal(em_store_close(s), 0);
}

static void flights_byte_bound_keeps_the_newest_per_device(void **state) {
  fixture_t *f = *state;
  rec_t r;
  make(&r, 1, 0, T0_NS);
  em_store_t *s = open_store(f, 0, r.len * 2 + r.len / 2);
  for (uint32_t i = 0; i < 4; i++) {
    rec_t x;
    make(&x, 1, i, T0_NS + i * S_NS);
    add(s, "dev-1", &x);
  }
  add(s, "dev-2", &r); /* Another device's bytes do not count against dev-1. */
  assert_int_equal(em_store_flush(s), 0);
  assert_int_equal(count(f), 3);
  assert_int_equal(q_int(f->path, "SELECT min(number) FROM flights f JOIN devices d ON "
                                  "d.id = f.device WHERE d.name = 'dev-1'"),
                   2);
  em_store_stats_t st;
  em_store_stats(s, &st);
  assert_int_equal(st.flights_dropped, 2);
  assert_int_equal(em_store_close(s), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(flights_row_holds_the_summary_and_the_cbor, setup, teardown),
      cmocka_unit_test_setup_teardown(flights_replay_is_stored_once, setup, teardown),
      cmocka_unit_test_setup_teardown(flights_retention_deletes_old_recordings, setup, teardown),
      cmocka_unit_test_setup_teardown(flights_byte_bound_keeps_the_newest_per_device, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
