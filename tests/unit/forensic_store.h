/*
 * forensic_store.h - what the tests of the forensic entries in the aggregator's store
 * (test_agg_flights.c, test_agg_profiles.c) share: the store they open (manual rollups, large
 * batches, a retention and the per-device byte bound of their kind), and the checks that hold
 * for flight recordings and stack profiles alike, run against a kind the test file describes
 * (forensic_kind_t): the row's summary columns and CBOR as given, a replay stored once and
 * counted as a duplicate, retention by the entry's time, the byte bound keeping the newest
 * per device, the total bound of all devices evicting the oldest received whichever device
 * sent them, and the store's running total of the kind's bytes. The fixture (a store in a fresh
 * temporary directory) and the queries on an independent connection, so only committed rows count,
 * are store_query.h's.
 *
 * Owns, for a test: its fixture (forensic_setup() to forensic_teardown()); each check opens
 * and closes its store.
 */
#ifndef EM_TEST_FORENSIC_STORE_H
#define EM_TEST_FORENSIC_STORE_H

#include "store.h"
#include "store_query.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define T0_NS 1700000000000000000ull /* "Now": when entries arrive, and retention's clock. */
#define S_NS  1000000000ull

/* The store's two tables of forensic entries. */
typedef enum {
  FORENSIC_FLIGHTS, /* em_store_add_flight(), opts.flight_max_bytes. */
  FORENSIC_PROFILES /* em_store_add_profile(), opts.profile_max_bytes. */
} forensic_table_t;

/* One entry a check stores: which one, and its CBOR as the store was given it. */
typedef struct {
  uint32_t session;
  uint32_t number;
  uint64_t time_ns;
  uint64_t recv_ns; /* When the store receives it; 0: T0_NS. */
  bool historical;  /* The spool's replayed form. */
  uint8_t cbor[4096];
  size_t len;
} forensic_entry_t;

/* A kind of entry, as its test file makes them. */
typedef struct {
  forensic_table_t table;
  /* Encodes the file's sample entry with e's session, number, time and form into e->cbor and
   * e->len, and adds it to s for device at e's recv_ns, asserting success. */
  void (*add)(em_store_t *s, const char *device, forensic_entry_t *e);
  /* What the sample entry's summary columns hold, as SQL conditions on the row `e` (beyond
   * the device, session, number, times, historical, bytes and CBOR, which the check tests). */
  const char *summary;
  int64_t user_version; /* The schema version a new store is at. */
} forensic_kind_t;

/* Opens a store at f->path (manual rollups, batches of 1000 rows or 1 s) with retention_s
 * (0: none) and max_bytes the table's per-device byte bound (0: the default). Fails the test
 * when it does not open. */
em_store_t *forensic_store_open(const store_fixture_t *f, forensic_table_t table,
                                uint64_t retention_s, uint64_t max_bytes);

/* The received time of entry e (forensic_entry_t.recv_ns, 0 meaning T0_NS). */
uint64_t forensic_recv_ns(const forensic_entry_t *e);

/* The checks, as cmocka tests of one kind, for a test file's table: FORENSIC_STORE_TESTS(kind)
 * with kind a forensic_kind_t it defines. Each runs on a fresh store fixture (store_query.h)
 * made by forensic_setup(), which takes the kind as the test's initial state. */
#define FORENSIC_STORE_TESTS(kind)                                                                 \
  FORENSIC_STORE_TEST(forensic_row_holds_the_summary_and_the_cbor, kind),                          \
      FORENSIC_STORE_TEST(forensic_replay_is_stored_once, kind),                                   \
      FORENSIC_STORE_TEST(forensic_retention_deletes_old_entries, kind),                           \
      FORENSIC_STORE_TEST(forensic_byte_bound_keeps_the_newest_per_device, kind),                  \
      FORENSIC_STORE_TEST(forensic_total_bound_evicts_the_oldest_received_of_any_device, kind),    \
      FORENSIC_STORE_TEST(forensic_version_9_store_gets_its_total_at_open, kind)
#define FORENSIC_STORE_TEST(check, kind)                                                           \
  cmocka_unit_test_prestate_setup_teardown(check, forensic_setup, forensic_teardown,               \
                                           (void *)&(kind))

int forensic_setup(void **state);
int forensic_teardown(void **state);

/* Entry 42-0 of dev-1 is one row of the kind's table holding its summary and its CBOR as
 * given, in a store at the kind's user_version; the store's stats count it, and nothing in
 * the other table. */
void forensic_row_holds_the_summary_and_the_cbor(void **state);

/* A QoS 1 redelivery, the spool's replay and a redelivery in a later batch are stored once
 * and counted as duplicates; another device's entry of the same session and number is its
 * own. */
void forensic_replay_is_stored_once(void **state);

/* Retention of 1 h at T0_NS deletes the entry 2 h old and keeps the one 1 min old. */
void forensic_retention_deletes_old_entries(void **state);

/* A bound of two and a half entries keeps dev-1's newest two of four (the oldest two dropped
 * and counted), and another device's bytes do not count against dev-1. */
void forensic_byte_bound_keeps_the_newest_per_device(void **state);

/* A total bound of three and a half entries over three devices, each sending two in turn
 * (each later one received later but timed earlier), keeps the three received last, one per
 * device: the other three are evicted oldest received first and counted, none dropped by the
 * per-device bound; the kind's running total is the sum of its rows' bytes throughout, and
 * the other kind's is 0. Reopened with a bound of one and a half entries, the maintenance pass
 * evicts two more, before any new entry, keeping the one received last. */
void forensic_total_bound_evicts_the_oldest_received_of_any_device(void **state);

/* A version 9 store (no forensic_bytes table, triggers or recv_ns index) with entries opens
 * as the current version with the kind's total the sum of the bytes already stored, and the
 * total follows entries added and deleted after. */
void forensic_version_9_store_gets_its_total_at_open(void **state);

#endif /* EM_TEST_FORENSIC_STORE_H */
