/*
 * history.h - the dashboard's JSON API over the fleet's history: /api/fleet (the registry's live
 * view plus each device's last level change), /api/devices/<id>/history (a device's per-stage
 * percentiles, metrics and level changes over a time range) and /api/latency (fleet percentiles
 * merged exactly from the histograms of every matching device). host/README.md documents the
 * answers.
 *
 * Reads SQLite through read-only connections of its own (WAL lets them read while the store
 * writes), used by one of the HTTP API lane's workers (http.c opens one em_history_t per
 * worker), and for /api/latency over many devices by a thread of its own that reads half of them
 * on the second connection for the length of the request. A range is
 * answered from the finest stored resolution that fits the points asked for: raw stage windows and
 * data rows, or the 1-minute or 1-hour rollups (schema v5, SCHEMA.md), with the part past a
 * rollup's watermark filled from the finer level so the newest data is never missing. Percentiles
 * per point and for the fleet are merged from the histograms (histo.h), never averaged. Every query
 * runs under a deadline (EM_HISTORY_DEADLINE_MS): past it the answer is 503 {"error": "query took
 * too long"}.
 *
 * Owns the connections and their prepared statements. Not thread-safe: one caller at a time.
 */
#ifndef EM_AGG_HISTORY_H
#define EM_AGG_HISTORY_H

#include "query.h"
#include "registry.h"

#include <stddef.h>
#include <stdint.h>

#define EM_HISTORY_DEADLINE_MS    2000u
#define EM_HISTORY_MAX_METRICS    64u   /* Metrics a history answer lists. */
#define EM_HISTORY_MAX_STAGES     64u   /* Stages a history or latency answer lists. */
#define EM_HISTORY_MAX_LEVELS     1000u /* Level changes a history answer lists. */
#define EM_HISTORY_LATENCY_POINTS 300u  /* Points of the fleet series of /api/latency. */
#define EM_HISTORY_RSS_METRIC     "mem.rss"
/* /api/latency reads raw rows (past the minute rollups' watermark) for at most this many
 * matching devices; for more, its answer ends at the watermark ("data_to_ns"). */
#define EM_HISTORY_LATENCY_RAW_DEVICES 64u

typedef struct em_history em_history_t;

/* An answer: HTTP status and a JSON body (malloc'd; the caller frees it). */
typedef struct {
  unsigned status;
  char *body;
  size_t len;
} em_history_reply_t;

/* Opens db_path read-only. Returns 0, or -EIO with a message in err. */
int em_history_open(em_history_t **out, const char *db_path, char *err, size_t err_cap);
void em_history_close(em_history_t *h); /* NULL is a no-op. */

/* GET /api/fleet. reg is locked and unlocked here. h may be NULL (no last_change then). */
void em_history_fleet(em_history_t *h, em_registry_t *reg, const em_query_t *q, uint64_t now_ns,
                      em_history_reply_t *out);

/* GET /api/devices/<device>/history. 404 for a device the store does not know. Stage budgets
 * come from the device's birth in reg (locked here; NULL: none). */
void em_history_device(em_history_t *h, em_registry_t *reg, const char *device, const em_query_t *q,
                       em_history_reply_t *out);

/* GET /api/latency. */
void em_history_latency(em_history_t *h, const em_query_t *q, em_history_reply_t *out);

/* The read connection, for the API's other readers (flight_api.h), with the deadline of a new
 * request started. Valid until em_history_close(); same thread rule. */
struct sqlite3 *em_history_reader(em_history_t *h);

/* An error reply {"error": msg} with `status` (out of memory becomes a 500 without a body). */
void em_history_error(em_history_reply_t *out, unsigned status, const char *msg);

#endif /* EM_AGG_HISTORY_H */
