/*
 * flight_api.h - the JSON API over the stored flight recordings (flights.h):
 * GET /api/devices/<id>/flights lists a device's recordings newest first (limit, since, until:
 * query.h, EM_QUERY_FLIGHTS), and GET /api/devices/<id>/flights/<key> answers one recording,
 * <key> being "<session>-<number>", as JSON (em_flight_to_json() of the stored CBOR) or, with
 * ?format=cbor, the CBOR exactly as the device published it. host/README.md documents both.
 *
 * Reads through the history's read connection (em_history_reader()), on the HTTP thread, under
 * the history's deadline. Owns nothing between calls.
 */
#ifndef EM_AGG_FLIGHT_API_H
#define EM_AGG_FLIGHT_API_H

#include "history.h"
#include "query.h"

#include <stddef.h>

/* An answer: status, body (malloc'd; the caller frees it; NULL: out of memory) and its type. */
typedef struct {
  unsigned status;
  char *body;
  size_t len;
  const char *type; /* "application/json" or "application/cbor". */
} em_flight_reply_t;

/* GET /api/devices/<device>/flights with the parameters as they came. 404 for a device the
 * store does not know, 400 naming a bad parameter. */
void em_flight_api_list(em_history_t *h, const char *device, const em_query_param_t *params,
                        size_t n, em_flight_reply_t *out);

/* GET /api/devices/<device>/flights/<key> (key as it came in the path, percent-decoded).
 * Takes one parameter, format=json (default) or cbor. 404 for an unknown device or key. */
void em_flight_api_get(em_history_t *h, const char *device, const char *key,
                       const em_query_param_t *params, size_t n, em_flight_reply_t *out);

#endif /* EM_AGG_FLIGHT_API_H */
