/*
 * perf_records.h - a strict reader of the records the kernel writes into a perf_event mmap
 * ring for the profiler's sampling events: PERF_RECORD_SAMPLE with sample_type
 * PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CALLCHAIN, and for DWARF unwinding also
 * PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER (the layout says which), PERF_RECORD_LOST and
 * PERF_RECORD_SWITCH (both with sample_id_all, so they carry pid, tid and time). Every other
 * record type is reported as EM_PERF_REC_OTHER and skipped by its size.
 *
 * The ring is memory the kernel writes, but a parser that trusts sizes is one bug away from
 * reading past a buffer, so every length is checked against the record's own header size and
 * the caller's buffer: a short, oversized or garbled record is refused, never read past.
 *
 * Owns nothing; pure functions over borrowed bytes (any alignment); reentrant.
 */
#ifndef EDGEMON_AGENT_PERF_RECORDS_H
#define EDGEMON_AGENT_PERF_RECORDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EM_PERF_HEADER_BYTES 8u /* struct perf_event_header: u32 type, u16 misc, u16 size. */

typedef enum {
  EM_PERF_REC_SAMPLE = 0, /* A call chain sampled on CPU. */
  EM_PERF_REC_LOST = 1,   /* The kernel dropped `lost` samples: the ring was full. */
  EM_PERF_REC_SWITCH = 2, /* The thread was switched in or out (context_switch). */
  EM_PERF_REC_OTHER = 3,  /* Any other record: skipped. */
} em_perf_rec_kind_t;

typedef struct {
  em_perf_rec_kind_t kind;
  uint32_t pid, tid;    /* Sample and switch; lost when it carries its sample_id. */
  uint64_t time_ns;     /* The event's clock (CLOCK_MONOTONIC with use_clockid). */
  const uint8_t *chain; /* Sample: nr u64 call chain entries, leaf first, context markers
                           (PERF_CONTEXT_KERNEL, PERF_CONTEXT_USER, ...) included; unaligned. */
  uint64_t n_chain;
  /* Sample, with a user-stack layout: the user registers (regs[0..n_regs), in the order of the
   * attr's sample_regs_user bits; 0 of them when the sample caught no user context) and the
   * bytes of user stack the kernel copied from the stack pointer on (stack[0..stack_len)). */
  const uint8_t *regs; /* Unaligned u64s. */
  uint32_t n_regs;
  const uint8_t *stack;
  uint64_t stack_len;
  uint64_t lost;   /* Lost: samples dropped. */
  bool switch_out; /* Switch: PERF_RECORD_MISC_SWITCH_OUT (out) or in. */
} em_perf_rec_t;

/*
 * The header of the record at buf[0..len): its size in bytes (>= EM_PERF_HEADER_BYTES), or 0
 * when fewer than EM_PERF_HEADER_BYTES bytes are given or the size field is below the header.
 */
size_t em_perf_rec_size(const uint8_t *buf, size_t len);

/* What a sample carries after its call chain: nothing (n_regs 0, stack false), or the user
 * registers (n_regs of them, 1..64: the bits set in sample_regs_user) and the user stack copy. */
typedef struct {
  uint32_t n_regs;
  bool stack;
} em_perf_layout_t;

/*
 * Reads the one record occupying buf[0..len) (len is the header's size) into *out, chain, regs
 * and stack pointing into buf; a sample's fields past the call chain as `layout` says (NULL:
 * none). Returns 0, or -EINVAL (NULL, len below the header or not its size, a layout with more
 * than 64 registers) or -EBADMSG (a sample, lost or switch record whose fields do not fit its
 * size, a call chain longer than the record, a user register set or stack copy that does not
 * fit, or a stack's dyn_size above its size).
 */
int em_perf_rec_parse(const uint8_t *buf, size_t len, const em_perf_layout_t *layout,
                      em_perf_rec_t *out);

/* User register i of a sample (i < n_regs). */
uint64_t em_perf_rec_reg(const em_perf_rec_t *r, size_t i);

/* Entry i of a sample's call chain (i < n_chain). */
uint64_t em_perf_rec_ip(const em_perf_rec_t *r, size_t i);

#endif /* EDGEMON_AGENT_PERF_RECORDS_H */
