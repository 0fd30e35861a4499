/*
 * fuzz_flight.c - libFuzzer harness for the flight recording's decoder (edgemon/flight.h).
 *
 * Any input: the decoder must return without reading outside the input, allocating, or
 * tripping a sanitizer, and errors are negative with an offset inside the input. An input that
 * decodes must survive the trip back: the encoder accepts the recording, decoding its encoding
 * gives the same JSON and encoding that again the same bytes; its historical form decodes as
 * historical; and fitting it under half its size gives a recording within the cap that decodes
 * and says how many ticks and spans it left out.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "edgemon/flight.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SCRATCH (12u * EM_FLIGHT_MAX_BYTES + 256u)
#define JSON    (64u * EM_FLIGHT_MAX_BYTES) /* 2 wire bytes of a figure: ~70 of JSON at most. */

static uint8_t scratch[SCRATCH];
static uint8_t scratch2[SCRATCH];
static uint8_t again[EM_FLIGHT_MAX_BYTES];
static uint8_t twice[EM_FLIGHT_MAX_BYTES];
static char json1[JSON];
static char json2[JSON];

/* Decodes buf[0..len) into *f (scratch2) or aborts. */
static void must_decode(const uint8_t *buf, size_t len, em_flight_t *f) {
  if (em_flight_decode(buf, len, f, scratch2, sizeof(scratch2), NULL) != 0) {
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  em_flight_t f, g;
  size_t off = 0, len = 0, len2 = 0, j1 = 0, j2 = 0;
  int rc = em_flight_decode(data, size, &f, scratch, em_flight_scratch_bytes(size), &off);
  if (rc != 0) {
    if (rc >= 0 || off > size) {
      abort();
    }
    return 0;
  }
  if (em_flight_to_json(&f, json1, sizeof(json1), &j1) != 0) {
    abort();
  }
  rc = em_flight_encode(&f, again, sizeof(again), &len);
  if (rc == EM_PROTO_ETOOBIG) {
    return 0; /* Half floats re-encode as binary32, so a recording at the limit may grow. */
  }
  if (rc != 0) {
    abort();
  }
  must_decode(again, len, &g);
  if (em_flight_to_json(&g, json2, sizeof(json2), &j2) != 0 || j1 != j2 ||
      memcmp(json1, json2, j1) != 0 || em_flight_encode(&g, twice, sizeof(twice), &len2) != 0 ||
      len2 != len || memcmp(again, twice, len) != 0) {
    abort();
  }
  if (!g.historical) {
    if (em_flight_mark_historical(again, len, twice, sizeof(twice), &len2) == 0) {
      must_decode(twice, len2, &g);
      if (!g.historical) {
        abort();
      }
    } else if (len + 2 <= EM_FLIGHT_MAX_BYTES) {
      abort();
    }
  }
  /* f still points into scratch: fit it under half its size. */
  size_t cap = len / 2;
  uint64_t ticks = f.n_ticks + f.truncated.ticks_cut, spans = f.n_spans + f.truncated.spans_cut;
  rc = em_flight_encode_fit(&f, twice, cap, &len2);
  if (rc == EM_PROTO_ENOSPACE) {
    return 0; /* Not even the recording without ticks and spans fits. */
  }
  if (rc != 0 || len2 > cap) {
    abort();
  }
  must_decode(twice, len2, &g);
  if (g.n_ticks + g.truncated.ticks_cut != ticks || g.n_spans + g.truncated.spans_cut != spans) {
    abort();
  }
  return 0;
}
