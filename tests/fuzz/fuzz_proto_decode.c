/*
 * fuzz_proto_decode.c - libFuzzer harness for the CBOR decoder.
 *
 * Any input: the decoder must return without reading outside the input, allocating, or
 * tripping a sanitizer. An input that decodes must also survive the trip back: the encoder
 * accepts the decoded message, and decoding its encoding gives the same JSON. The input's
 * first item head is also read directly (proto/src/cbor_head.c), and must agree with the
 * decoder and with the head writer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cbor_head.h"
#include "edgemon/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t scratch[EM_PROTO_SCRATCH_MAX];
static uint8_t scratch2[EM_PROTO_SCRATCH_MAX];
static uint8_t again[EM_PROTO_MAX_MESSAGE_BYTES];
static char json1[16u * EM_PROTO_MAX_MESSAGE_BYTES];
static char json2[16u * EM_PROTO_MAX_MESSAGE_BYTES];

/*
 * The first head, read on its own: a refused one makes the decoder fail for the same reason at
 * offset 0 (when the input is not over the size limit, which is checked first); an accepted
 * one lies inside the input, and writing its argument back at the same width gives its bytes.
 */
static void check_first_head(const uint8_t *data, size_t size, int rc, size_t off) {
  em__head_t h;
  int head_rc = em__head_read(data, size, &h);
  if (head_rc != 0) {
    if (size <= EM_PROTO_MAX_MESSAGE_BYTES && (rc != head_rc || off != 0)) {
      abort();
    }
    return;
  }
  uint8_t out[EM_CBOR_HEAD_MAX];
  size_t n = 1;
  out[0] = (uint8_t)((h.major << 5) | h.info);
  if (h.len > 1) {
    n = em__head_write_fixed(out, h.major, h.len - 1u, h.arg);
  }
  if (h.len > size || n != h.len || memcmp(out, data, n) != 0) {
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  em_msg_t m, m2;
  size_t off = 0, len = 0, j1 = 0, j2 = 0;
  int rc = em_proto_decode(data, size, &m, scratch, em_proto_scratch_bytes(size), &off);
  check_first_head(data, size, rc, off);
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
