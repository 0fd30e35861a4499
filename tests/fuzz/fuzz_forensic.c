/*
 * fuzz_forensic.c - libFuzzer harness for the two forensic documents' decoders: the flight
 * recording (edgemon/flight.h; built as fuzz_flight) and, with FUZZ_PROFILE defined, the stack
 * profile (edgemon/profile.h; built as fuzz_profile). Both run the same checks on their own API.
 *
 * Any input: the decoder must return without reading outside the input, allocating, or
 * tripping a sanitizer, and errors are negative with an offset inside the input (a profile's
 * never ESCRATCH with the scratch its bound asks for). An input that decodes must survive the
 * trip back: the encoder accepts the document, decoding its encoding gives the same JSON and
 * encoding that again the same bytes; its historical form decodes as historical; and fitting
 * it under half its size gives a document within the cap that decodes and accounts for every
 * tick and span (recording) or stack (profile) it left out.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "edgemon/flight.h"
#include "edgemon/profile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* DOC(decode) is em_flight_decode or em_profile_decode, and so on for the whole API. */
#ifdef FUZZ_PROFILE
#define DOC(name)      em_profile_##name
#define MAX_BYTES      EM_PROFILE_MAX_BYTES
#define SCRATCH        (10u * EM_PROFILE_MAX_BYTES + 256u)
#define JSON           (16u * EM_PROFILE_MAX_BYTES) /* A frame index: 1 wire byte, 11 of JSON. */
#define STRICT_SCRATCH 1

/* What the document holds or says it cut: stacks. */
static void accounted(const em_profile_t *d, uint64_t out[2]) {
  out[0] = d->n_stacks + d->truncated.stacks_cut;
  out[1] = 0;
}
#else
#define DOC(name)      em_flight_##name
#define MAX_BYTES      EM_FLIGHT_MAX_BYTES
#define SCRATCH        EM_FLIGHT_SCRATCH_MAX
#define JSON           (64u * EM_FLIGHT_MAX_BYTES) /* 2 wire bytes of a figure: ~70 of JSON. */
#define STRICT_SCRATCH 0

/* What the recording holds or says it cut: ticks, spans. */
static void accounted(const em_flight_t *d, uint64_t out[2]) {
  out[0] = d->n_ticks + d->truncated.ticks_cut;
  out[1] = d->n_spans + d->truncated.spans_cut;
}
#endif

typedef DOC(t) doc_t;

static uint8_t scratch[SCRATCH];
static uint8_t scratch2[SCRATCH];
static uint8_t again[MAX_BYTES];
static uint8_t twice[MAX_BYTES];
static char json1[JSON];
static char json2[JSON];

/* Decodes buf[0..len) into *d (scratch2) or aborts. */
static void must_decode(const uint8_t *buf, size_t len, doc_t *d) {
  if (DOC(decode)(buf, len, d, scratch2, sizeof(scratch2), NULL) != 0) {
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  doc_t f, g;
  size_t off = 0, len = 0, len2 = 0, j1 = 0, j2 = 0;
  int rc = DOC(decode)(data, size, &f, scratch, DOC(scratch_bytes)(size), &off);
  if (rc != 0) {
    if (rc >= 0 || off > size || (STRICT_SCRATCH && rc == EM_PROTO_ESCRATCH)) {
      abort(); /* ESCRATCH: the scratch bound is wrong. */
    }
    return 0;
  }
  if (DOC(to_json)(&f, json1, sizeof(json1), &j1) != 0) {
    abort();
  }
  rc = DOC(encode)(&f, again, sizeof(again), &len);
  if (rc == EM_PROTO_ETOOBIG) {
    /* A document at the limit may grow: a recording's half floats re-encode as binary32. */
    return 0;
  }
  if (rc != 0) {
    abort();
  }
  must_decode(again, len, &g);
  if (DOC(to_json)(&g, json2, sizeof(json2), &j2) != 0 || j1 != j2 ||
      memcmp(json1, json2, j1) != 0 || DOC(encode)(&g, twice, sizeof(twice), &len2) != 0 ||
      len2 != len || memcmp(again, twice, len) != 0) {
    abort();
  }
  if (!g.historical) {
    if (DOC(mark_historical)(again, len, twice, sizeof(twice), &len2) == 0) {
      must_decode(twice, len2, &g);
      if (!g.historical) {
        abort();
      }
    } else if (len + 2 <= MAX_BYTES) {
      abort();
    }
  }
  /* f still points into scratch: fit it under half its size. */
  size_t cap = len / 2;
  uint64_t before[2], after[2];
  accounted(&f, before);
  rc = DOC(encode_fit)(&f, twice, cap, &len2);
  if (rc == EM_PROTO_ENOSPACE) {
    return 0; /* Not even the document without ticks and spans (stacks) fits. */
  }
  if (rc != 0 || len2 > cap) {
    abort();
  }
  must_decode(twice, len2, &g);
  accounted(&g, after);
  if (after[0] != before[0] || after[1] != before[1]) {
    abort();
  }
  return 0;
}
