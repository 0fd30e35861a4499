/*
 * window.h - the profiling window: when one opens (an escalation or a cmd/profile, at most one
 * at a time and min_gap between two starts), sampling the target for its time (sampler.h into
 * stacks.h on every tick), its end (its time is up, or the target exited: what was taken is
 * kept, the duration shortened), the resolution of its addresses to frames off the loop
 * (symbols.h, on a libuv worker) and the assembly of one em_profile_t (edgemon/profile.h):
 * a frame table without duplicates, the Python client's frames spliced in place of the
 * interpreter's where its samples match (pymerge.h), each sample's stage from the span its
 * thread was in (spanlog.h: the target's ring spans, handed in by em_window_span), stacks that
 * became equal merged, stacks in descending samples, and notes saying what the profile cannot
 * show and why.
 *
 *   IDLE ----em_window_trigger----> OPEN           (-EBUSY / -EAGAIN: suppressed, counted)
 *   OPEN ----em_window_tick: time up----> AWAIT     (sampling stopped; the client's Python
 *                                                    stacks may still come: em_window_pystacks)
 *   OPEN/AWAIT --em_window_tick: target gone, or span_settle_ns past the end and the Python
 *                stacks held or EM_WINDOW_PY_WAIT_NS past the end----> CLOSED (returns true)
 *   IDLE ----em_window_baseline----> OPEN           (a baseline: no min_gap, not published)
 *   OPEN/AWAIT --em_window_abort----> IDLE           (a baseline an escalation overrides)
 *   CLOSED --em_window_resolve (worker)--> RESOLVED
 *   RESOLVED --em_window_take--> em_profile_t --em_window_done--> IDLE
 *
 * Memory: everything at em_window_new() from the options (stack table and its sample log,
 * address and frame arrays, the maps snapshot, the symbol arena, the Python merger's 64 KiB
 * datagram buffer and index, the span log, the encode buffer of max_bytes);
 * em_window_bytes() says how much. Nothing is allocated on the tick (a window's open reads
 * /proc/PID/maps once and maps a perf ring per thread; the worker's kallsyms pass allocates
 * one array of its kernel addresses).
 *
 * Owns: the sampler, the stack table (with its sample log), the symbolizer, the Python merger,
 * the span log.
 * Single-threaded except em_window_resolve(), which runs on a worker while the loop leaves the
 * window alone (state CLOSED: tick, trigger and take do nothing with it but count).
 */
#ifndef EDGEMON_AGENT_WINDOW_H
#define EDGEMON_AGENT_WINDOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "edgemon/profile.h"
#include "edgemon/wire.h"
#include "sampler.h"

#define EM_WINDOW_MAX_ADDRS 65536u /* Addresses in the stack table (all stacks together). */
#define EM_WINDOW_MAX_LOG   65536u /* Samples logged per window (tid, time) for the merge. */
#define EM_WINDOW_BASELINE_BIT                                                                     \
  0x80000000u /* A baseline window's request number: this bit, then its count. */
#define EM_WINDOW_PY_WAIT_NS                                                                       \
  1000000000ull /* How long past its end a window waits for the                                    \
                   client's Python stacks. */

typedef struct {
  uint32_t hz; /* 1..1000 */
  em_sampler_clock_t clock;
  uint64_t seconds_ns;     /* Window length when the trigger names none (> 0). */
  uint64_t max_seconds_ns; /* Longest window (>= seconds_ns). */
  uint64_t min_gap_ns;     /* Least time between two windows' starts. */
  uint32_t max_bytes;      /* Encode buffer, 4096..EM_PROFILE_MAX_BYTES. */
  uint32_t max_stacks;     /* 1..EM_PROFILE_MAX_STACKS */
  bool dwarf;              /* Unwind user stacks by DWARF CFI (unwind.h), not frame pointers. */
  uint64_t span_settle_ns; /* How long past its end a window still takes spans: the rings hand
                              a span over a tick or two after it ends (two tick intervals). */
  const char *proc_root;   /* "/proc"; copied. */
} em_window_opts_t;

typedef struct {
  uint64_t taken;      /* Windows opened. */
  uint64_t suppressed; /* Triggers while one was open or resolving, or within min_gap. */
  uint64_t failed;     /* Triggers that could not open a window (no target, perf refused). */
  uint64_t lost;       /* Samples the kernel lost, all windows. */
  uint64_t cut;        /* Samples not kept: the stack table was full, all windows. */
  uint64_t py_taken;   /* Python stacks datagrams kept (one per window at most). */
  uint64_t py_refused; /* Refused: no window, another process or window, invalid, a second. */
} em_window_stats_t;

typedef enum {
  EM_WINDOW_IDLE,
  EM_WINDOW_OPEN,
  EM_WINDOW_AWAIT,
  EM_WINDOW_CLOSED,
  EM_WINDOW_RESOLVED
} em_window_state_t;

typedef struct em_window em_window_t;

int em_window_new(em_window_t **out, const em_window_opts_t *opts);
void em_window_free(em_window_t *w); /* Not while em_window_resolve() runs. NULL: no-op. */
uint64_t em_window_bytes(const em_window_t *w);
void em_window_set_min_gap(em_window_t *w, uint64_t min_gap_ns);

/*
 * Opens a window on pid at mono_ns (wall_ns its CLOCK_REALTIME) for seconds (0: the
 * configured length; capped at max_seconds). The trigger's strings are copied. Returns 0,
 * -EBUSY (one is open or not yet published), -EAGAIN (within min_gap of the last start): both
 * counted as suppressed; -ESRCH (no target) or the sampler's error: counted as failed.
 */
int em_window_trigger(em_window_t *w, const em_profile_trigger_t *t, pid_t pid, uint32_t seconds,
                      uint64_t mono_ns, uint64_t wall_ns);

/*
 * Opens a baseline window on pid at mono_ns for len_ns (the profiler's, while the level is
 * NOMINAL: profiling.h): like a trigger's, but outside min_gap (it neither waits for it nor
 * delays the next trigger), not counted in taken, and numbered apart: its request page and
 * Python stacks carry EM_WINDOW_BASELINE_BIT | the baselines opened before it, and the
 * published windows' numbers go on without it. Returns 0, -EINVAL, -EBUSY (a window is open
 * or being resolved), or the sampler's error.
 */
int em_window_baseline(em_window_t *w, pid_t pid, uint64_t len_ns, uint64_t mono_ns,
                       uint64_t wall_ns);

/* The open, closed or resolved window is a baseline. */
bool em_window_is_baseline(const em_window_t *w);

/* An OPEN or AWAIT window is dropped (sampling stopped, nothing resolved): IDLE. Returns
 * false in any other state (nothing done). */
bool em_window_abort(em_window_t *w);

/*
 * The tick at now_ns: drains the rings; ends the window when its time is up or target_gone.
 * Returns true when the window has just closed: em_window_resolve() is due.
 */
bool em_window_tick(em_window_t *w, uint64_t now_ns, bool target_gone);

/*
 * The open window's request page (WIRE.md "Profile request page v1"): its number, the
 * configured hz, its start and planned end. Returns 0, or -ENOENT when no window is open.
 */
int em_window_request(const em_window_t *w, em_profile_page_t *out);

/*
 * A span the rings delivered (em_rings_span_fn): kept while a window is OPEN or AWAIT when pid
 * is the target's and it starts before the window's end.
 */
void em_window_span(em_window_t *w, uint32_t pid, uint32_t tid, const char *stage,
                    uint64_t start_ns, uint64_t duration_ns);

/*
 * A Python stacks datagram (buf[0..len), borrowed for the call) from process `sender` (its
 * credentials): kept when a window is OPEN or AWAIT, the sender is the target and the datagram
 * is valid and names this window. Returns 0, -ENOENT (no window), -EPERM (another process), or
 * em_pymerge_take()'s codes; every refusal is counted in py_refused.
 */
int em_window_pystacks(em_window_t *w, const uint8_t *buf, size_t len, pid_t sender);

/* Resolves and assembles the closed window (on a worker thread). */
void em_window_resolve(em_window_t *w);

/* The resolved window's profile (valid until em_window_done), number and head.time_ns set,
 * head.session not; NULL in any other state. */
em_profile_t *em_window_take(em_window_t *w);
uint8_t *em_window_buffer(em_window_t *w, size_t *cap);
/* RESOLVED -> IDLE; CLOSED -> IDLE too (a window whose assembly never ran is dropped). */
void em_window_done(em_window_t *w);

em_window_state_t em_window_state(const em_window_t *w);
const em_window_stats_t *em_window_stats(const em_window_t *w);

#endif /* EDGEMON_AGENT_WINDOW_H */
