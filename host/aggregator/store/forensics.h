/*
 * forensics.h - the store's per-device forensic blobs (SCHEMA.md, "Flight recordings" and
 * "Stack profiles"): one `flights` row per recording a device published on
 * edgemon/v1/<device>/flight and one `profiles` row per stack profile it published on
 * edgemon/v1/<device>/profile, each holding what the API lists (session, number, trigger,
 * counts, truncation, size) beside the CBOR as it came.
 *
 * Both kinds follow one set of rules: a blob already stored (same device, session and number:
 * a replay from the agent's spool, a QoS 1 redelivery) writes nothing; after each new row the
 * device's blobs of that kind are cut back, oldest first (by the device's time_ns), to the
 * bytes the store keeps per device for the kind, and then the kind's blobs of every device are
 * cut back to the bytes the store keeps of the kind in all: the oldest received first (recv_ns,
 * the aggregator's clock: a device's clock cannot keep its blobs past everyone else's). The
 * kind's total is the row of table forensic_bytes that the tables' triggers keep (SCHEMA.md),
 * so it is never summed on the hot path and rolls back with the batch. forensic_api.h reads
 * the blobs back.
 *
 * This module owns both tables' rows and their statements. It runs on the store's connection,
 * inside the batch the store opens and commits (store.c), which counts its failures. Not
 * thread-safe (the store's thread uses it).
 */
#ifndef EM_AGG_FORENSICS_H
#define EM_AGG_FORENSICS_H

#include <edgemon/flight.h>
#include <edgemon/profile.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Encoded bytes of flight recordings the store keeps per device when not configured. */
#define EM_FLIGHTS_DEFAULT_MAX_BYTES (64ull * 1024 * 1024)
/* Encoded bytes of stack profiles the store keeps per device when not configured. */
#define EM_PROFILES_DEFAULT_MAX_BYTES (64ull * 1024 * 1024)
/* Encoded bytes of each kind the store keeps of all devices together when not configured
 * (flight recordings 1 GiB, stack profiles 1 GiB). */
#define EM_FORENSICS_DEFAULT_TOTAL_MAX_BYTES (1024ull * 1024 * 1024)

/* The blobs' kinds; each is a table of its own. */
typedef enum {
  EM_FORENSIC_FLIGHT = 0,  /* Flight recordings (edgemon/flight.h), table `flights`. */
  EM_FORENSIC_PROFILE = 1, /* Stack profiles (edgemon/profile.h), table `profiles`. */
} em_forensic_kind_t;
#define EM_FORENSIC_KINDS 2

/* The bytes of one kind the store keeps. */
typedef struct {
  uint64_t device_max_bytes; /* Per device; 0: the kind's EM_*_DEFAULT_MAX_BYTES. */
  uint64_t total_max_bytes;  /* All devices together; 0: EM_FORENSICS_DEFAULT_TOTAL_MAX_BYTES. */
} em_forensics_caps_t;

/* What one add did. */
typedef struct {
  bool stored;      /* False when the blob was stored already (nothing written). */
  uint64_t dropped; /* The device's oldest blobs of the kind deleted to stay within its cap. */
  uint64_t evicted; /* Any device's oldest blobs of the kind deleted to stay within the total. */
} em_forensics_result_t;

typedef struct em_forensics em_forensics_t;

/* Prepares the statements on db (the schema must exist). Returns an SQLite result code. */
int em_forensics_new(em_forensics_t **out, sqlite3 *db);
void em_forensics_free(em_forensics_t *fo); /* NULL is a no-op. */

/*
 * Inserts the recording f, decoded from cbor[0..len) (borrowed for the call), of device dev_id,
 * then deletes the device's oldest recordings while they hold more than caps->device_max_bytes,
 * then em_forensics_trim() to caps->total_max_bytes. Returns SQLITE_OK or the failed
 * statement's result code.
 */
int em_forensics_add_flight(em_forensics_t *fo, int64_t dev_id, const em_flight_t *f,
                            const uint8_t *cbor, size_t len, uint64_t recv_ns,
                            const em_forensics_caps_t *caps, em_forensics_result_t *res);

/* The same for the stack profile p. */
int em_forensics_add_profile(em_forensics_t *fo, int64_t dev_id, const em_profile_t *p,
                             const uint8_t *cbor, size_t len, uint64_t recv_ns,
                             const em_forensics_caps_t *caps, em_forensics_result_t *res);

/* Deletes the oldest received blobs of kind k of any device (recv_ns, then id) while the kind
 * holds more than total_max_bytes (0: EM_FORENSICS_DEFAULT_TOTAL_MAX_BYTES); *evicted: how
 * many. Returns SQLITE_OK or the failed statement's result code. */
int em_forensics_trim(em_forensics_t *fo, em_forensic_kind_t k, uint64_t total_max_bytes,
                      uint64_t *evicted);

/* The encoded bytes of kind k stored now (the open transaction's rows included) into *bytes.
 * Returns SQLITE_OK or the statement's result code. */
int em_forensics_bytes(em_forensics_t *fo, em_forensic_kind_t k, uint64_t *bytes);

#endif /* EM_AGG_FORENSICS_H */
