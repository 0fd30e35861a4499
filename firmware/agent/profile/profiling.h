/*
 * profiling.h - the profiler's plumbing between the agent's loop and a window (window.h):
 * triggers (an escalation, a cmd/profile) open a window on the attached target and write the
 * profile request page (<runtime_dir>/profile, WIRE.md "Profile request page v1") the Python
 * client reads; each tick drains the open window and, once it has closed, queues its
 * resolution (symbols and assembly, ~100 ms of CPU) on libuv's worker pool; back on the loop
 * the profile is encoded under max_bytes and handed to the caller's publish callback. It also
 * takes the target's ring spans and the client's Python stacks for the open window, and writes
 * the profile.* figures.
 *
 *   IDLE --em_profiling_trigger--> window OPEN --em_profiling_tick: closed--> RESOLVING
 *   RESOLVING --worker done (loop)--> encoded, published --> IDLE
 *
 * Baselines (docs/DIAGNOSIS.md "Which functions grew"): once the target has been attached and
 * the level NOMINAL (em_feed_nominal_since) for EM_PROFILING_BASE_SETTLE_NS, and then every
 * EM_PROFILING_BASE_EVERY_NS while it stays so, a window of EM_PROFILING_BASE_NS opens on its
 * own (window.h em_window_baseline: outside min_gap, not counted, not published); resolved, it
 * leaves the functions' shares of each stage (growth.h) in memory. An escalation's window on a
 * stage the baseline has, whose verdict names more_work, then makes the escalation's recording
 * wait (em_feed_await_functions) for the functions whose share grew, handed over when the
 * window resolves (em_feed_functions). An escalation that finds a baseline window sampling drops
 * it and opens its own; one that finds it resolving is suppressed like any trigger then.
 *
 * With [profile] enabled false it exists but holds no window: its figures are absent and a
 * cmd/profile is refused with one rate-limited line.
 *
 * Owns: the window, the worker request, the rate limits of its refusal lines. Runs on the
 * loop's thread, except the window's resolution, which runs on libuv's worker while the loop
 * leaves the window alone (RESOLVING).
 */
#ifndef EDGEMON_AGENT_PROFILING_H
#define EDGEMON_AGENT_PROFILING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "edgemon/profile.h"
#include "edgemon/proto.h"
#include "edgemon/wire.h"
#include "feed.h"
#include "figures.h"

/* A baseline waits for this much NOMINAL after the attach (and after the last change of level):
 * past the target's warm-up (first frames, caches, lazy loading) and several budget windows
 * judged NOMINAL, so the shares are those of the pipeline's steady work. */
#define EM_PROFILING_BASE_SETTLE_NS (10ull * 1000000000ull)
/* Then a new one every 10 minutes while NOMINAL lasts: what a stage calls changes with a model
 * or input change, seldom faster; 2 s of sampling every 600 s is a 0.3 % duty cycle. */
#define EM_PROFILING_BASE_EVERY_NS (600ull * 1000000000ull)
/* A baseline window's length: about 200 samples of a busy thread at 99 Hz, enough for the
 * shares of a stage's main functions to a few points (growth.h EM_GROWTH_MIN_POINTS). */
#define EM_PROFILING_BASE_NS (2ull * 1000000000ull)

/* Hands an encoded profile on (`buf` borrowed for the call). Returns 0, or a negative errno
 * when it was lost. */
typedef int (*em_profiling_publish_fn)(void *ctx, const uint8_t *buf, size_t len);

typedef struct {
  bool enabled;            /* [profile] enabled: false, no window. */
  uv_loop_t *loop;         /* Where the resolution is queued (its worker pool). */
  em_figures_t *figs;      /* The dictionary: borrowed, outlives this. */
  const char *runtime_dir; /* Where the request page goes; copied. */
  const char *proc_root;   /* "/proc" or a fixture; copied by the window. */
  uint32_t hz;             /* [profile] hz. */
  bool task_clock;         /* [profile] clock = task (else cpu). */
  uint64_t seconds_ns;     /* [profile] seconds. */
  uint64_t max_seconds_ns; /* [profile] max_seconds. */
  uint64_t min_gap_ns;     /* [profile] min_gap_seconds. */
  uint32_t max_bytes;      /* [profile] max_bytes. */
  bool dwarf;              /* [profile] unwind = dwarf. */
  uint64_t period_ns;      /* The tick period (how long spans take to reach the window). */
  uint32_t session;        /* The agent's session, stamped on each profile. */
  em_feed_t *feed; /* The level (baselines wait for NOMINAL) and the recording that waits for
                      the functions of its more_work cause; borrowed, outlives this. NULL: no
                      baselines. */
  em_profiling_publish_fn publish;
  void *ctx; /* publish's. */
} em_profiling_opts_t;

typedef struct em_profiling em_profiling_t;

/* Builds it (and the window when enabled; a previous agent's request page is removed).
 * Returns 0 and *out, -EINVAL, -ENOMEM, or the window's error (logged). */
int em_profiling_new(em_profiling_t **out, const em_profiling_opts_t *opts);

/* Frees. Not while a resolution runs (em_profiling_cancel's done first). NULL is a no-op. */
void em_profiling_free(em_profiling_t *p);

/* The profiler as the birth announces it ({.on = false} when off). */
em_profiler_t em_profiling_describe(const em_profiling_t *p);

/* [profile] min_gap_seconds after a reload. */
void em_profiling_set_min_gap(em_profiling_t *p, uint64_t min_gap_ns);

/* A trigger at mono_ns: a window on `pid` (0: none attached) for `seconds` (0: the configured
 * length, capped at max_seconds) when the rate limit allows, else counted and said. */
void em_profiling_trigger(em_profiling_t *p, const em_profile_trigger_t *t, pid_t pid,
                          uint32_t seconds, uint64_t mono_ns);

/* A ring span (rings.h observer; ctx is the em_profiling_t): the open window keeps the
 * target's, for the stage of its samples. */
void em_profiling_span(void *ctx, uint32_t pid, uint32_t tid, const em_span_t *span);

/* A Python stacks datagram from `sender`: kept by the open window when it is for it. */
void em_profiling_pystacks(em_profiling_t *p, const uint8_t *buf, size_t len, pid_t sender);

/* This tick's share: drain the open window; when it has closed (its time is up, or `pid`, the
 * attached target, is no longer the one it samples), its resolution is queued. */
void em_profiling_tick(em_profiling_t *p, uint64_t now_ns, pid_t pid);

/* The profile.* figures into samples[alias] (absent with the profiler off). */
void em_profiling_figures(em_profiling_t *p, em_sample_t *samples);

/* Once per tick: the counts of refusal lines held back, when their interval is over. */
void em_profiling_flush_log(em_profiling_t *p, uint64_t now_ns);

/*
 * At stop: cancels a queued resolution. Returns true when one was queued or running: done(ctx)
 * is then called once from the loop when it has ended (a resolved window is still published);
 * false: nothing runs, done is never called.
 */
bool em_profiling_cancel(em_profiling_t *p, void (*done)(void *), void *ctx);

#endif /* EDGEMON_AGENT_PROFILING_H */
