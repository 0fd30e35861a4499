/*
 * fuzz_perf_records.c - the perf ring record reader and the stack table behind it: the input
 * is read as a run of records the way the sampler drains a ring (each record's header size,
 * stopping at the first one the reader refuses), every sample folded into a small stack table
 * and every switch charged. Nothing may read past the input or crash.
 */
#include <stddef.h>
#include <stdint.h>

#include "perf_records.h"
#include "stacks.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static em_stacks_t *stacks;
  if (!stacks && em_stacks_new(&stacks, 64, 1024) != 0) {
    return 0;
  }
  em_stacks_reset(stacks);
  size_t off = 0;
  while (off < size) {
    size_t len = em_perf_rec_size(data + off, size - off);
    if (len == 0 || len > size - off) {
      break;
    }
    em_perf_rec_t r;
    if (em_perf_rec_parse(data + off, len, &r) != 0) {
      break;
    }
    if (r.kind == EM_PERF_REC_SAMPLE) {
      (void)em_stacks_add(stacks, &r);
    } else if (r.kind == EM_PERF_REC_SWITCH) {
      em_stacks_switch(stacks, &r);
    }
    off += len;
  }
  em_stacks_close(stacks, UINT64_MAX);
  return 0;
}
