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

/* The sample recording (forensic_kind_t.add): the vectors' flight_verdict (flight_basic with the
 * breach's verdict, its top cause cpu_contention, 0.81) as e's session, number and time, with 4
 * spans cut; the spool's replay re-encoded with historical set. */
static void add(em_store_t *s, const char *device, forensic_entry_t *e) {
  size_t n = 0;
  const em_flight_vector_t *row = &em_flight_vectors(&n)[3];
  assert_string_equal(row->name, "flight_verdict");
  em_flight_t fl = row->flight;
  assert_ptr_equal(fl.verdict, &em_vector_verdict);
  fl.head = (em_msg_head_t){.time_ns = e->time_ns, .session = e->session};
  fl.number = e->number;
  fl.truncated.spans_cut = 4;
  fl.historical = e->historical;
  assert_int_equal(em_flight_encode(&fl, e->cbor, sizeof(e->cbor), &e->len), 0);
  assert_int_equal(em_store_add_flight(s, device, &fl, e->cbor, e->len, forensic_recv_ns(e)), 0);
}

static const forensic_kind_t flights = {
    .table = FORENSIC_FLIGHTS,
    .add = add,
    .summary = "e.cause = 0 AND e.level = 2 AND e.prev_level = 0 AND e.rule = 'infer.p99' AND "
               "e.stage = 'infer' AND e.value = 61200000 AND e.bound = 40000000 AND e.ticks = 4 "
               "AND e.spans = 7 AND e.stages = 2 AND e.columns = 4 AND e.spans_cut = 4 AND "
               "e.ticks_cut = 0 AND e.top_cause = 'cpu_contention' AND e.top_share = 0.81",
    .user_version = 11,
};

int main(void) {
  const struct CMUnitTest tests[] = {
      FORENSIC_STORE_TESTS(flights),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
