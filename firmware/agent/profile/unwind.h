/*
 * unwind.h - DWARF unwinding of the user stacks a profiling window sampled. Frame-pointer call
 * chains stop, or read garbage, at the first function built without frame pointers (Debian's
 * python3.11, OpenBLAS, most of glibc); the call frame information every binary carries
 * (.eh_frame) unwinds through them. The sampler asks the kernel for each sample's user
 * registers and a copy of its user stack (PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER,
 * EM_UNWIND_STACK_BYTES from the stack pointer, as perf record --call-graph dwarf does); the
 * loop keeps them in a pool as the rings are drained, and the worker, once the window closed,
 * unwinds each one with elfutils' libdwfl over the session the symbols use (registers and
 * stack from the copy, CFI from the target's binaries) and hands the chain to the caller.
 *
 * Bounded: the pool (pool_bytes, mapped at em_unwind_new and given back to the kernel with
 * MADV_DONTNEED at each reset, so it is resident only while a window's copies are in it); a
 * sample that finds no room keeps its frame-pointer chain and is counted. Architectures:
 * x86-64 and arm64 (em_unwind_regs_mask() says 0 elsewhere: frame pointers only).
 *
 * libdw is not linked: unwinding calls it through the symbols' table (symbols.h,
 * em_symbols_dw()), loaded at the first window; without it no session exists and every kept
 * sample keeps its frame-pointer chain (counted as failed).
 *
 * Owns the pool. em_unwind_keep runs on the loop while the window samples; em_unwind_run on a
 * worker after it closed (the loop keeps nothing then).
 */
#ifndef EDGEMON_AGENT_UNWIND_H
#define EDGEMON_AGENT_UNWIND_H

#include <elfutils/libdwfl.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "perf_records.h"

#define EM_UNWIND_STACK_BYTES 8192u /* User stack copied per sample. */

typedef struct {
  uint64_t kept;      /* Samples whose registers and stack copy were kept. */
  uint64_t pool_full; /* Samples not kept: the pool was full. */
  uint64_t unwound;   /* Kept samples given a DWARF chain of two frames or more. */
  uint64_t failed;    /* Kept samples unwinding got no further than their pc with. */
} em_unwind_stats_t;

typedef struct em_unwind em_unwind_t;

/* The sample_regs_user mask this architecture's unwinding needs, and *n_regs its bit count;
 * 0 (and 0) where DWARF unwinding is not supported. */
uint64_t em_unwind_regs_mask(uint32_t *n_regs);

/* Maps a pool of pool_bytes (>= 64 KiB). Returns 0 and *out, -EINVAL, -ENOMEM or -ENOTSUP
 * (an architecture without DWARF unwinding). */
int em_unwind_new(em_unwind_t **out, size_t pool_bytes);
void em_unwind_free(em_unwind_t *u);
uint64_t em_unwind_bytes(const em_unwind_t *u);

/* Empties the pool for a new window and gives its pages back. */
void em_unwind_reset(em_unwind_t *u);

/*
 * Keeps sample r's registers and stack copy for the entry `log_index` of the window's sample
 * log. Returns 0, -ENODATA (the sample has no user registers or stack), -ENOSPC (the pool is
 * full: counted).
 */
int em_unwind_keep(em_unwind_t *u, uint32_t log_index, const em_perf_rec_t *r);

/* One unwound sample: its log entry and its user addresses, root first (the sampled pc as it
 * was, every return address minus 1: inside its call, as stacks.h stores them). */
typedef void (*em_unwind_chain_fn)(void *ctx, uint32_t log_index, const uint64_t *addrs,
                                   uint32_t n);

/*
 * Unwinds every kept sample of process pid in dwfl's modules (the symbols' session; NULL: none
 * unwinds) and hands each chain of two frames or more to fn. On the worker thread.
 */
void em_unwind_run(em_unwind_t *u, Dwfl *dwfl, pid_t pid, em_unwind_chain_fn fn, void *ctx);

const em_unwind_stats_t *em_unwind_stats(const em_unwind_t *u);

#endif /* EDGEMON_AGENT_UNWIND_H */
