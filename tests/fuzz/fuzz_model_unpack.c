/*
 * fuzz_model_unpack.c - libFuzzer harness for the model datagram v2 parser
 * (em_model_dgram_unpack, proto/src/wire.c), which the agent runs on datagrams another process
 * sends it.
 *
 * Any bytes: unpack returns a code without reading past `size`. The same bytes are unpacked a
 * second time as a 512-byte datagram with a valid header and a label count of 0..8 (so the
 * fuzzer spends its time on the texts and the label rules, not on the magic). Whatever unpacks
 * satisfies em_proto_model_check() and packs again to exactly the same 512 bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "edgemon/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const uint8_t *buf, size_t size) {
  em_model_dgram_t d;
  if (em_model_dgram_unpack(buf, size, &d) != 0) {
    return;
  }
  em_label_t labels[EM_PROTO_MAX_MODEL_LABELS];
  em_model_t view;
  em_model_dgram_view(&d, labels, &view);
  uint8_t out[EM_MODEL_DGRAM_BYTES];
  if (em_proto_model_check(&view) != 0 ||
      em_model_dgram_pack(&view, d.pid, d.generation, out) != 0 ||
      memcmp(out, buf, sizeof out) != 0) {
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check(data, size);
  uint8_t buf[EM_MODEL_DGRAM_BYTES] = {0};
  memcpy(buf, data, size < sizeof buf ? size : sizeof buf);
  buf[0] = EM_WIRE_MAGIC0;
  buf[1] = EM_WIRE_MAGIC1;
  buf[2] = EM_MODEL_DGRAM_VERSION;
  buf[3] = EM_DGRAM_MODEL;
  buf[12] = (uint8_t)(buf[12] % (EM_PROTO_MAX_MODEL_LABELS + 1));
  check(buf, sizeof buf);
  return 0;
}
