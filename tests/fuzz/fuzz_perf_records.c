/*
 * fuzz_perf_records.c - the perf ring record reader and the stack table behind it: the input's
 * first byte picks the samples' layout (bit 0: user registers and stack copies, bits 1-6 the
 * register count), the rest is read as a run of records the way the sampler drains a ring
 * (each record's header size, stopping at the first one the reader refuses), every sample
 * folded into a small stack table, its registers and stack read whole and kept in a small
 * unwinder pool (as the window keeps them), and every switch charged. Nothing may read past the
 * input or crash.
 */
#include <stddef.h>
#include <stdint.h>

#include "perf_records.h"
#include "stacks.h"
#include "unwind.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void keep(void *ctx, uint32_t log_index, const em_perf_rec_t *r) {
  (void)em_unwind_keep(ctx, log_index, r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static em_stacks_t *stacks;
  static em_unwind_t *unwind;
  if (!stacks && (em_stacks_new(&stacks, 64, 1024) != 0 || em_stacks_log_alloc(stacks, 256) != 0)) {
    return 0;
  }
  if (!unwind && em_unwind_new(&unwind, 65536) == 0) {
    em_stacks_on_sample(stacks, keep, unwind);
  }
  em_stacks_reset(stacks);
  em_unwind_reset(unwind);
  if (size == 0) {
    return 0;
  }
  em_perf_layout_t layout = {0};
  if (data[0] & 1u) {
    layout = (em_perf_layout_t){.n_regs = 1u + ((data[0] >> 1) & 63u), .stack = true};
  }
  size_t off = 1;
  while (off < size) {
    size_t len = em_perf_rec_size(data + off, size - off);
    if (len == 0 || len > size - off) {
      break;
    }
    em_perf_rec_t r;
    if (em_perf_rec_parse(data + off, len, &layout, &r) != 0) {
      break;
    }
    if (r.kind == EM_PERF_REC_SAMPLE) {
      uint64_t sum = 0;
      for (uint32_t i = 0; i < r.n_regs; i++) {
        sum += em_perf_rec_reg(&r, i);
      }
      for (uint64_t i = 0; i < r.stack_len; i++) {
        sum += r.stack[i];
      }
      (void)sum;
      (void)em_stacks_add(stacks, &r);
    } else if (r.kind == EM_PERF_REC_SWITCH) {
      em_stacks_switch(stacks, &r);
    }
    off += len;
  }
  em_stacks_close(stacks, UINT64_MAX);
  return 0;
}
