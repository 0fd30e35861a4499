/*
 * sampler.h - the perf_event side of a profiling window: one sampling event per thread of the
 * target (cpu-clock or task-clock at sample_freq hz, PERF_SAMPLE_TID | TIME | CALLCHAIN on
 * CLOCK_MONOTONIC, user and kernel frames, context-switch records), each with a small mmap'd
 * ring the loop drains on its tick without blocking. Threads that appear during the window
 * (/proc/PID/task, opened once per window, listed again on each drain) get an event too.
 *
 * What the kernel refuses is degraded, not fatal, and said: kernel frames refused by
 * perf_event_paranoid (the events are opened with exclude_kernel), context-switch records
 * not supported (no off-CPU time), a thread whose event or ring cannot be opened (counted).
 *
 *   IDLE --em_sampler_open--> OPEN --em_sampler_drain (each tick)--> OPEN
 *   OPEN --em_sampler_close--> IDLE (events disabled, rings unmapped, fds closed)
 *
 * Owns: per thread one perf fd and its ring mapping (1 + EM_SAMPLER_RING_PAGES pages), the
 * slots for EM_SAMPLER_MAX_THREADS threads allocated at em_sampler_new() (a ring is mapped when
 * its thread is found: that is kernel memory), a bounce buffer for a record that wraps the
 * ring's end. Single-threaded (the loop's).
 */
#ifndef EDGEMON_AGENT_SAMPLER_H
#define EDGEMON_AGENT_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "stacks.h"

#define EM_SAMPLER_MAX_THREADS 256u
#define EM_SAMPLER_RING_PAGES  8u /* Data pages per thread's ring (a power of two). */
#define EM_SAMPLER_STACK_PAGES                                                                     \
  32u /* Data pages with user stacks: ~14 samples of 8 KiB,                                        \
         more than a tick's at 99 Hz. */

typedef enum { EM_SAMPLER_CPU_CLOCK = 0, EM_SAMPLER_TASK_CLOCK = 1 } em_sampler_clock_t;

typedef struct {
  uint32_t threads;        /* Threads with an event. */
  uint32_t threads_failed; /* Threads whose event or ring could not be opened. */
  uint32_t threads_over;   /* Threads past EM_SAMPLER_MAX_THREADS, not sampled. */
  bool kernel_refused;     /* Kernel frames refused (exclude_kernel). */
  bool no_switch;          /* Context-switch records not supported: no off-CPU time. */
  uint64_t lost;           /* Samples the kernel lost (PERF_RECORD_LOST). */
  uint64_t bad_records;    /* Records refused by the parser (the rest of that ring skipped). */
  int open_errno;          /* The first thread's perf_event_open error, 0 when none. */
  bool no_user_stacks;     /* User registers and stacks refused: frame-pointer chains only. */
  uint32_t small_rings;    /* Threads whose larger ring for user stacks was refused (locked
                              memory: perf_event_mlock_kb) and got EM_SAMPLER_RING_PAGES. */
} em_sampler_stats_t;

/* What each sample copies for DWARF unwinding (unwind.h): the user registers in regs_mask
 * (sample_regs_user) and stack_bytes of user stack. */
typedef struct {
  uint64_t regs_mask;
  uint32_t stack_bytes;
} em_sampler_user_t;

typedef struct em_sampler em_sampler_t;

/* Allocates the slots; proc_root is copied ("/proc"). Returns 0, -EINVAL or -ENOMEM. */
int em_sampler_new(em_sampler_t **out, const char *proc_root);
void em_sampler_free(em_sampler_t *s); /* Closes an open window first. NULL: no-op. */

/*
 * Opens events on every thread of pid, sampling at hz with the clock, each sample copying what
 * `user` asks (NULL or a 0 mask: call chains only). Returns 0 when at least one thread has an
 * event, else a negative errno (-ESRCH: no such process; perf_event_open's error otherwise).
 * The stats are reset.
 */
int em_sampler_open(em_sampler_t *s, pid_t pid, uint32_t hz, em_sampler_clock_t clock,
                    const em_sampler_user_t *user);

/*
 * Reads every record the rings hold into `stacks` (samples and switches), counts losses,
 * and opens events on the target's new threads. Never blocks.
 */
void em_sampler_drain(em_sampler_t *s, em_stacks_t *stacks);

/* Disables the events, drains the rings a last time into `stacks`, and releases them. */
void em_sampler_close(em_sampler_t *s, em_stacks_t *stacks);

bool em_sampler_is_open(const em_sampler_t *s);
const em_sampler_stats_t *em_sampler_stats(const em_sampler_t *s);

#endif /* EDGEMON_AGENT_SAMPLER_H */
