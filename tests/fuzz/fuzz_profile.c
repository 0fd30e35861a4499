/*
 * fuzz_profile.c - libFuzzer harness for the stack profile's decoder (edgemon/profile.h).
 *
 * Any input: the decoder must return without reading outside the input, allocating, or
 * tripping a sanitizer, and errors are negative with an offset inside the input. An input that
 * decodes must survive the trip back: the encoder accepts the profile, decoding its encoding
 * gives the same JSON and encoding that again the same bytes; its historical form decodes as
 * historical; and fitting it under half its size gives a profile within the cap that decodes
 * and accounts for every stack it left out.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "edgemon/profile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SCRATCH (10u * EM_PROFILE_MAX_BYTES + 256u)
#define JSON    (16u * EM_PROFILE_MAX_BYTES) /* A frame index: 1 wire byte, 11 of JSON at most. */

static uint8_t scratch[SCRATCH];
static uint8_t scratch2[SCRATCH];
static uint8_t again[EM_PROFILE_MAX_BYTES];
static uint8_t twice[EM_PROFILE_MAX_BYTES];
static char json1[JSON];
static char json2[JSON];

/* Decodes buf[0..len) into *p (scratch2) or aborts. */
static void must_decode(const uint8_t *buf, size_t len, em_profile_t *p) {
  if (em_profile_decode(buf, len, p, scratch2, sizeof(scratch2), NULL) != 0) {
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  em_profile_t p, q;
  size_t off = 0, len = 0, len2 = 0, j1 = 0, j2 = 0;
  int rc = em_profile_decode(data, size, &p, scratch, em_profile_scratch_bytes(size), &off);
  if (rc != 0) {
    if (rc >= 0 || off > size || rc == EM_PROTO_ESCRATCH) {
      abort(); /* ESCRATCH: the scratch bound is wrong. */
    }
    return 0;
  }
  if (em_profile_to_json(&p, json1, sizeof(json1), &j1) != 0) {
    abort();
  }
  rc = em_profile_encode(&p, again, sizeof(again), &len);
  if (rc == EM_PROTO_ETOOBIG) {
    return 0; /* Non-minimal integer heads re-encode shorter; only a few may grow. */
  }
  if (rc != 0) {
    abort();
  }
  must_decode(again, len, &q);
  if (em_profile_to_json(&q, json2, sizeof(json2), &j2) != 0 || j1 != j2 ||
      memcmp(json1, json2, j1) != 0 || em_profile_encode(&q, twice, sizeof(twice), &len2) != 0 ||
      len2 != len || memcmp(again, twice, len) != 0) {
    abort();
  }
  if (!q.historical) {
    if (em_profile_mark_historical(again, len, twice, sizeof(twice), &len2) == 0) {
      must_decode(twice, len2, &q);
      if (!q.historical) {
        abort();
      }
    } else if (len + 2 <= EM_PROFILE_MAX_BYTES) {
      abort();
    }
  }
  /* p still points into scratch: fit it under half its size. */
  size_t cap = len / 2;
  uint64_t stacks = p.n_stacks + p.truncated.stacks_cut;
  rc = em_profile_encode_fit(&p, twice, cap, &len2);
  if (rc == EM_PROTO_ENOSPACE) {
    return 0; /* Not even the profile without stacks fits. */
  }
  if (rc != 0 || len2 > cap) {
    abort();
  }
  must_decode(twice, len2, &q);
  if (q.n_stacks + q.truncated.stacks_cut != stacks) {
    abort();
  }
  return 0;
}
