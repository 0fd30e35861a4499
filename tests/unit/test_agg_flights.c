/*
 * test_agg_flights.c - flight recordings in the aggregator's store
 * (host/aggregator/store/forensics.c through em_store_add_flight()) against a real SQLite database
 * in a temporary directory: the row's summary columns and its CBOR as given, a replay (same device,
 * session and number, live or historical) stored once and counted as a duplicate, retention by the
 * recording's time, and the per-device byte bound keeping the newest recordings. The checks are the
 * profiles' too (forensic_store.h); this file gives them its recording. Rows are read through an
 * independent connection (store_query.h), so only committed rows count.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "forensic_store.h"

#include "vectors.h"

#include <edgemon/flight.h>

static const char *const stages[] = {"pre", "infer"};
static const em_flight_column_t columns[] = {{"pmu.context-switches", "1", EM_METRIC_COUNTER}};

/* The sample recording (forensic_kind_t.add): 2 stages, a counter column, 2 ticks, 3 spans of
 * 2 frames, 4 spans cut, the vectors' verdict (its top cause cpu_contention, 0.81); the spool's
 * replay re-encoded with historical set. */
static void add(em_store_t *s, const char *device, forensic_entry_t *e) {
  static em_flight_value_t v0 = {0, {.type = EM_VALUE_UINT, .as.u = 1000}};
  static em_flight_value_t v1 = {0, {.type = EM_VALUE_UINT, .as.u = 1300}};
  static const em_flight_tick_t ticks[] = {{.mono_ns = 900 * S_NS, .values = &v0, .n_values = 1},
                                           {.mono_ns = 1000 * S_NS, .values = &v1, .n_values = 1}};
  static const em_flight_span_t spans[] = {
      {.stage = 0, .frame_id = 7, .start_ns = 950 * S_NS, .duration_ns = 2000000},
      {.stage = 1, .frame_id = 7, .start_ns = 950 * S_NS + 3000000, .duration_ns = 45000000},
      {.stage = 0, .frame_id = 8, .start_ns = 951 * S_NS, .duration_ns = 2100000},
  };
  const em_flight_t fl = {
      .head = {.time_ns = e->time_ns, .session = e->session},
      .number = e->number,
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
      .historical = e->historical,
      .verdict = &em_vector_verdict,
  };
  assert_int_equal(em_flight_encode(&fl, e->cbor, sizeof(e->cbor), &e->len), 0);
  assert_int_equal(em_store_add_flight(s, device, &fl, e->cbor, e->len, forensic_recv_ns(e)), 0);
}

static const forensic_kind_t flights = {
    .table = FORENSIC_FLIGHTS,
    .add = add,
    .summary = "e.cause = 0 AND e.level = 2 AND e.prev_level = 0 AND e.rule = 'infer.p99' AND "
               "e.stage = 'infer' AND e.value = 45000000 AND e.bound = 40000000 AND e.ticks = 2 "
               "AND e.spans = 3 AND e.stages = 2 AND e.columns = 1 AND e.spans_cut = 4 AND "
               "e.ticks_cut = 0 AND e.top_cause = 'cpu_contention' AND e.top_share = 0.81",
    .user_version = 11,
};

int main(void) {
  const struct CMUnitTest tests[] = {
      FORENSIC_STORE_TESTS(flights),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
