/*
 * fuzz_proto_decode.c - libFuzzer harness for the CBOR decoder.
 *
 * Any input: the decoder must return without reading outside the input, allocating, or
 * tripping a sanitizer. An input that decodes must also survive the trip back: the encoder
 * accepts the decoded message, and decoding its encoding gives the same JSON.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "edgemon/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t scratch[EM_PROTO_SCRATCH_MAX];
static uint8_t scratch2[EM_PROTO_SCRATCH_MAX];
static uint8_t again[EM_PROTO_MAX_MESSAGE_BYTES];
static char json1[16u * EM_PROTO_MAX_MESSAGE_BYTES];
static char json2[16u * EM_PROTO_MAX_MESSAGE_BYTES];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  em_msg_t m, m2;
  size_t off = 0, len = 0, j1 = 0, j2 = 0;
  int rc = em_proto_decode(data, size, &m, scratch, em_proto_scratch_bytes(size), &off);
  if (rc != 0) {
    if (rc >= 0 || off > size) {
      abort(); /* Errors are negative and point inside the input. */
    }
    return 0;
  }
  if (em_proto_to_json(&m, json1, sizeof(json1), &j1) != 0) {
    abort();
  }
  rc = em_proto_encode(&m, again, sizeof(again), &len);
  if (rc == EM_PROTO_ETOOBIG) {
    return 0; /* Half floats re-encode as binary32, so a message at the limit may grow. */
  }
  if (rc != 0 || em_proto_decode(again, len, &m2, scratch2, sizeof(scratch2), NULL) != 0 ||
      em_proto_to_json(&m2, json2, sizeof(json2), &j2) != 0 || j1 != j2 ||
      memcmp(json1, json2, j1) != 0) {
    abort();
  }
  return 0;
}
