/*
 * forensic_api.h - the JSON API over the stored forensic blobs (forensics.h), one pair of
 * routes per kind:
 *
 *   GET /api/devices/<id>/flights             GET /api/devices/<id>/profiles
 *   GET /api/devices/<id>/flights/<key>       GET /api/devices/<id>/profiles/<key>
 *
 * A list gives a device's blobs of the kind newest first (limit, since, until: query.h,
 * EM_QUERY_FLIGHTS), each entry linking the blob of the other kind taken for the same event
 * (same device, session and trigger cause, times within EM_FORENSIC_LINK_NS: a flight entry's
 * "profile", a profile entry's "flight", else null). A key is "<session>-<number>"; one blob
 * is answered as JSON (em_flight_to_json() or em_profile_to_json() of the stored CBOR) or, with
 * ?format=cbor, the CBOR exactly as the device published it. host/README.md documents them.
 *
 * Reads through the history's read connection (em_history_reader()), on an HTTP API lane
 * worker (http.c), under the history's deadline. Owns nothing between calls.
 */
#ifndef EM_AGG_FORENSIC_API_H
#define EM_AGG_FORENSIC_API_H

#include "forensics.h"
#include "history.h"
#include "query.h"

#include <stddef.h>

/* Largest distance in time (ns) between a flight recording and a stack profile linked as
 * taken for the same event. */
#define EM_FORENSIC_LINK_NS 1000000000ull

/* An answer: status, body (malloc'd; the caller frees it; NULL: out of memory) and its type. */
typedef struct {
  unsigned status;
  char *body;
  size_t len;
  const char *type; /* "application/json" or "application/cbor". */
} em_forensic_reply_t;

/* The path segment, list array and table name of a kind: "flights" or "profiles". */
const char *em_forensic_api_name(em_forensic_kind_t kind);

/* GET /api/devices/<device>/<kind's name> with the parameters as they came. 404 for a device
 * the store does not know, 400 naming a bad parameter. */
void em_forensic_api_list(em_history_t *h, em_forensic_kind_t kind, const char *device,
                          const em_query_param_t *params, size_t n, em_forensic_reply_t *out);

/* GET /api/devices/<device>/<kind's name>/<key> (key as it came in the path, percent-decoded).
 * Takes one parameter, format=json (default) or cbor. 404 for an unknown device or key. */
void em_forensic_api_get(em_history_t *h, em_forensic_kind_t kind, const char *device,
                         const char *key, const em_query_param_t *params, size_t n,
                         em_forensic_reply_t *out);

#endif /* EM_AGG_FORENSIC_API_H */
