/*
 * fuzz_span_unpack.c - libFuzzer harness for the span datagram and level push parsers.
 *
 * Any bytes: unpack returns a code without reading past `size`; what unpacks packs again to
 * the same 64 (or 256) bytes, so the parser and the packer agree on every accepted datagram.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "edgemon/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  em_span_t span;
  if (em_span_unpack(data, size, &span) == 0) {
    uint8_t out[EM_SPAN_DGRAM_BYTES];
    if (em_span_pack(&span, out) != 0 || memcmp(out, data, sizeof(out)) != 0) {
      abort();
    }
  }
  em_state_record_t rec;
  uint32_t pid = 0;
  if (em_push_unpack(data, size, &rec, &pid) == 0) {
    uint8_t out[EM_PUSH_DGRAM_BYTES];
    if (em_push_pack(&rec, pid, out) != 0 || memcmp(out, data, sizeof(out)) != 0) {
      abort();
    }
  }
  return 0;
}
