/*
 * flights.h - the store's flight recordings (SCHEMA.md, "Flight recordings"): one `flights`
 * row per recording a device published on edgemon/v1/<device>/flight, holding what the API
 * lists (session, number, trigger, counts, truncation, size) beside the CBOR as it came.
 * A recording already stored (same device, session and number: a replay from the agent's
 * spool, a QoS 1 redelivery) writes nothing. After each new row the device's recordings are
 * cut back, oldest first, to the bytes the store keeps per device.
 *
 * This module owns the flights table's rows and its statements. It runs on the store's
 * connection, inside the batch the store opens and commits (store.c), which counts its
 * failures. Not thread-safe (the store's thread uses it).
 */
#ifndef EM_AGG_FLIGHTS_H
#define EM_AGG_FLIGHTS_H

#include <edgemon/flight.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Encoded bytes of recordings the store keeps per device when not configured. */
#define EM_FLIGHTS_DEFAULT_MAX_BYTES (64ull * 1024 * 1024)

typedef struct em_flights em_flights_t;

/* Prepares the statements on db (the schema must exist). Returns an SQLite result code. */
int em_flights_new(em_flights_t **out, sqlite3 *db);
void em_flights_free(em_flights_t *fl); /* NULL is a no-op. */

/*
 * Inserts the recording f, decoded from cbor[0..len), of device dev_id; *stored false when it
 * was stored already (nothing written). Then deletes the device's oldest recordings while its
 * recordings hold more than max_bytes (0: EM_FLIGHTS_DEFAULT_MAX_BYTES); *dropped counts them.
 * Returns SQLITE_OK or the failed statement's result code.
 */
int em_flights_add(em_flights_t *fl, int64_t dev_id, const em_flight_t *f, const uint8_t *cbor,
                   size_t len, uint64_t recv_ns, uint64_t max_bytes, bool *stored,
                   uint64_t *dropped);

#endif /* EM_AGG_FLIGHTS_H */
