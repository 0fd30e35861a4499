/*
 * fuzz_pystacks_unpack.c - libFuzzer harness for the Python stacks datagram v2 parser
 * (em_pystacks_unpack, proto/src/wire.c), which the agent runs on datagrams of up to 65507
 * bytes another process sends it.
 *
 * Any bytes: unpack returns a code without reading past `size`. The same bytes are unpacked a
 * second time behind a valid header whose counts and strings_bytes come from the input (so the
 * fuzzer spends its time on the string table and the samples, not on the magic). Whatever
 * unpacks is walked whole (every string, every sample, every index below n_strings) and packs
 * again to exactly the same bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "edgemon/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static em_pystacks_t view;
static em_pysample_t samples[UINT16_MAX];
static char texts[EM_PYSTACKS_MAX_STRINGS][EM_PYSTACKS_MAX_STRING_BYTES + 1];
static const char *ptrs[EM_PYSTACKS_MAX_STRINGS];
static uint8_t out[EM_PYSTACKS_MAX_BYTES];
static uint8_t framed[EM_PYSTACKS_MAX_BYTES];

static void check(const uint8_t *buf, size_t size) {
  if (em_pystacks_unpack(buf, size, &view) != 0) {
    return;
  }
  for (uint16_t i = 0; i < view.n_strings; i++) {
    size_t n = 0;
    const uint8_t *t = em_pystacks_string(&view, i, &n);
    if (t == NULL || n == 0 || n > EM_PYSTACKS_MAX_STRING_BYTES) {
      abort();
    }
    memcpy(texts[i], t, n);
    texts[i][n] = '\0';
    ptrs[i] = texts[i];
  }
  size_t cursor = view.samples_off, n = 0;
  while (em_pystacks_next(&view, &cursor, &samples[n])) {
    for (uint16_t k = 0; k < samples[n].depth; k++) {
      if (samples[n].frames[k] >= view.n_strings) {
        abort();
      }
    }
    n++;
  }
  size_t len = 0;
  if (n != view.n_samples || cursor != size ||
      em_pystacks_pack(view.pid, view.window, view.samples_cut, ptrs, view.n_strings, samples, n,
                       out, sizeof out, &len) != 0 ||
      len != size || memcmp(out, buf, size) != 0) {
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check(data, size);
  if (size < 6 || size - 6 > sizeof framed - EM_PYSTACKS_HEADER_BYTES) {
    return 0;
  }
  /* data[0..6): n_strings (mod 64), n_samples (mod 256), strings_bytes; the rest the body. */
  memset(framed, 0, EM_PYSTACKS_HEADER_BYTES);
  framed[0] = EM_WIRE_MAGIC0;
  framed[1] = EM_WIRE_MAGIC1;
  framed[2] = EM_PYSTACKS_VERSION;
  framed[3] = EM_DGRAM_PYSTACKS;
  framed[16] = (uint8_t)(data[0] % 64u);
  framed[18] = data[1];
  memcpy(framed + 20, data + 2, 4);
  memcpy(framed + EM_PYSTACKS_HEADER_BYTES, data + 6, size - 6);
  check(framed, EM_PYSTACKS_HEADER_BYTES + size - 6);
  return 0;
}
