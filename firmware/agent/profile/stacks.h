/*
 * stacks.h - the stack table of one profiling window: every sampled call chain folded into a
 * distinct stack of addresses (root first, user frames then kernel frames) with its sample
 * count and the off-CPU time its thread spent switched out after it was last sampled on it.
 * Bounded: at most max_stacks stacks and max_addrs addresses in all, sized at em_stacks_new();
 * a sample that finds no room is counted as cut, never stored. Nothing is allocated after
 * em_stacks_new(); em_stacks_reset() starts the next window.
 *
 * Addresses as stored: perf's call chain gives return addresses for every frame but the first
 * of each context (the interrupted instruction), so those are stored minus 1 (inside the call
 * instruction, the way perf report and pprof do), ready for symbol lookup.
 *
 * Off-CPU time: a switch-out record starts the thread's off-CPU interval, the next switch-in
 * (or the window's end) ends it; the interval is charged to the stack the thread was last
 * sampled with (an approximation: the switch record carries no call chain). Threads tracked:
 * EM_STACKS_MAX_THREADS; past that, their switches are not charged.
 *
 * Sample log (optional, em_stacks_log_alloc): each stored sample's (tid, time, stack) in the
 * order taken, and each off-CPU interval charged (tid, its start, stack, length), for what pairs
 * samples by thread and time: the merge of the Python client's samples and the stage of each
 * sample (spanlog.h). Bounded at its allocation; samples past it are stored in their stack as
 * before but counted in log_cut, not logged; off-CPU intervals past it are charged, not logged.
 *
 * Owns its tables. Single-threaded: the loop fills it; a libuv worker reads it after the
 * window closed (the loop does not touch it until the worker is done).
 */
#ifndef EDGEMON_AGENT_STACKS_H
#define EDGEMON_AGENT_STACKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "perf_records.h"

#define EM_STACKS_MAX_THREADS 1024u

typedef struct {
  uint64_t samples;  /* Samples stored. */
  uint64_t cut;      /* Samples not stored: the stack or address table was full. */
  uint64_t deep;     /* Samples whose chain was longer than EM_PROFILE_MAX_DEPTH (root side cut). */
  uint64_t empty;    /* Samples with no address in their chain (not stored). */
  uint64_t kernel;   /* Samples with kernel frames. */
  uint64_t switches; /* Switch records seen. */
  uint64_t off_cpu_ns; /* Off-CPU time charged to stacks. */
  uint64_t log_cut;    /* Samples stored but not logged: the sample log was full (or none). */
} em_stacks_stats_t;

/* One logged sample, or one off-CPU interval. */
typedef struct {
  uint32_t tid;
  uint32_t stack;      /* Its stack, as em_stacks_get() numbers them. */
  uint64_t time_ns;    /* The sample's time (CLOCK_MONOTONIC with use_clockid), or the
                          interval's start (the switch out). */
  uint64_t off_cpu_ns; /* 0: an on-CPU sample; else the off-CPU interval's length. */
  uint32_t from;       /* Off-CPU: the log entry of the thread's last sample before it, or
                          UINT32_MAX (not logged). */
} em_stacks_log_entry_t;

/* One stack as stored: addrs[0..n_user) user root..leaf, then n_kernel kernel root..leaf. */
typedef struct {
  const uint64_t *addrs;
  uint32_t n_user;
  uint32_t n_kernel;
  uint64_t samples;
  uint64_t off_cpu_ns;
} em_stacks_entry_t;

typedef struct em_stacks em_stacks_t;

/* Allocates a table of max_stacks (1..EM_PROFILE_MAX_STACKS) stacks and max_addrs (>= 1)
 * addresses. Returns 0 and *out, -EINVAL or -ENOMEM. */
int em_stacks_new(em_stacks_t **out, uint32_t max_stacks, uint32_t max_addrs);
void em_stacks_free(em_stacks_t *s);
uint64_t em_stacks_bytes(const em_stacks_t *s);

/* Allocates the sample log of max_samples (>= 1) entries, once. Returns 0, -EINVAL, -EEXIST
 * (one is there) or -ENOMEM. */
int em_stacks_log_alloc(em_stacks_t *s, uint32_t max_samples);

/* Entries logged in this window, and entry i (< that count). */
size_t em_stacks_log_count(const em_stacks_t *s);
em_stacks_log_entry_t em_stacks_log_get(const em_stacks_t *s, size_t i);

/* Empties it for a new window. */
void em_stacks_reset(em_stacks_t *s);

/*
 * Folds one sample record (kind EM_PERF_REC_SAMPLE) in. Returns 0 when stored, -ENOSPC when
 * cut, -ENODATA when its chain holds no address. Chains are read leaf first with perf's
 * context markers: PERF_CONTEXT_KERNEL switches to kernel frames, PERF_CONTEXT_USER to user
 * frames, other markers (guest, hypervisor) end the chain.
 */
int em_stacks_add(em_stacks_t *s, const em_perf_rec_t *sample);

/* A switch record (kind EM_PERF_REC_SWITCH). */
void em_stacks_switch(em_stacks_t *s, const em_perf_rec_t *sw);

/* Ends every open off-CPU interval at end_ns (the window's end). */
void em_stacks_close(em_stacks_t *s, uint64_t end_ns);

/* Called for every logged sample as it is stored (its log entry and its record, borrowed for the
 * call): what else the assembly needs of it is kept there (the unwinder's registers and stack
 * copy). fn NULL: none. */
typedef void (*em_stacks_sample_fn)(void *ctx, uint32_t log_index, const em_perf_rec_t *r);
void em_stacks_on_sample(em_stacks_t *s, em_stacks_sample_fn fn, void *ctx);

/*
 * Moves logged sample log_index to the stack of user addresses user[0..n_user) (root first, as
 * stored: return addresses minus 1) and the kernel frames it had, the root side cut past
 * EM_PROFILE_MAX_DEPTH. For the assembly, after the window closed. Returns 0, -EINVAL (no such
 * sample, an off-CPU entry, no address) or -ENOSPC (a new stack with no room: it stays).
 */
int em_stacks_rechain(em_stacks_t *s, size_t log_index, const uint64_t *user, uint32_t n_user);

/* After the rechains: every logged off-CPU interval moves to the stack its thread's last sample
 * before it is on now. */
void em_stacks_rechain_off_cpu(em_stacks_t *s);

size_t em_stacks_count(const em_stacks_t *s);
/* Stack i (< em_stacks_count), in the order first seen. */
em_stacks_entry_t em_stacks_get(const em_stacks_t *s, size_t i);
const em_stacks_stats_t *em_stacks_stats(const em_stacks_t *s);

#endif /* EDGEMON_AGENT_STACKS_H */
