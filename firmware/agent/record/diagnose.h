/*
 * diagnose.h - the verdict on an escalation: why a stage got slow. Given the flight recorder's
 * ticks and spans (flight.h), the stage and the statistic its rule judges, the breach window
 * (the last budget window before the trigger) and the NOMINAL stretch before it, the engine
 * compares the two per frame (the stage's span count in each) and attributes the excess of the
 * statistic (breach - baseline) to causes, each with its evidence as numbers, in descending
 * share (em_proto_verdict_t, proto/edgemon.cddl "verdict"). docs/DIAGNOSIS.md states each
 * cause's test, its thresholds and their reasons, and the limits of the method.
 *
 *   cpu_contention   sched.runq_delay per frame grew (or, without it, involuntary switches
 *                    took a part of the off-CPU growth)
 *   cpu_throttling   cgroup.cpu.throttled per frame grew
 *   frequency_cap    CPU time per frame grew while instructions per frame did not (cycles per
 *                    instruction unchanged), or the CPU frequency dropped
 *   more_work        CPU time per frame grew (with the instructions, where counted)
 *   memory_pressure  off-CPU growth while major faults per frame and psi.memory.some grew
 *   io               off-CPU growth while psi.io.some and voluntary switches per frame grew
 *   waiting          off-CPU growth without I/O pressure
 *   unexplained      what remains of the excess; the only cause when there is no baseline
 *
 * A figure absent from either window skips the causes that need it; it is never read as 0.
 *
 * Pure: plain arrays in, one em_diagnosis_t out; no I/O, no clock, no allocation. Work:
 * O(ticks x columns + spans log spans) (the stage's durations are sorted in the caller's
 * scratch). Reentrant.
 */
#ifndef EDGEMON_AGENT_DIAGNOSE_H
#define EDGEMON_AGENT_DIAGNOSE_H

#include <stddef.h>
#include <stdint.h>

#include "edgemon/flight.h"
#include "edgemon/proto.h"
#include "edgemon/wire.h"

/* A cause explaining less than this share of the excess is left out: a counter read on a tick
 * covers frames on both sides of a window's edge, so a few percent of growth per frame is
 * within what the windowing itself moves. */
#define EM_DIAGNOSE_MIN_SHARE 0.10
/* A PSI avg10 figure "grew" when it rose by at least this many points: avg10 decays over 10 s,
 * so a window's reading carries the seconds before it; below a point it is the board's noise. */
#define EM_DIAGNOSE_PSI_POINTS 1.0
/* Instructions per frame or the CPU frequency "changed" past this relative step: counters
 * multiplexed by perf and the cpufreq governor's own steps move them by a few percent. */
#define EM_DIAGNOSE_REL_STEP 0.05
/* Bytes of a process command name kept (the kernel's TASK_COMM_LEN). */
#define EM_DIAGNOSE_COMM_BYTES 16u

/* Another process that used the target's CPUs around the trigger (cpu_contention). */
typedef struct {
  uint32_t pid;
  const char *comm; /* Borrowed for the call; copied (truncated to 15 bytes). */
  double share;     /* Its share of the contended CPU time, 0..1. */
} em_diagnose_process_t;

typedef struct {
  const em_flight_column_t *columns; /* The recording's columns (names the engine looks for). */
  size_t n_columns;
  const em_flight_tick_t *ticks; /* Ascending mono_ns; counters as running totals. */
  size_t n_ticks;
  const em_flight_span_t *spans; /* Any order. */
  size_t n_spans;
  uint32_t stage;           /* The spans' stage index of the stage to explain. */
  const char *stage_name;   /* Its name: a stage-name (copied). */
  const char *statistic;    /* "p50", "p90", "p99", "p999", "max" or "mean" (copied). */
  uint64_t trigger_ns;      /* CLOCK_MONOTONIC of the escalation: the breach window ends here. */
  uint64_t window_ns;       /* The budget window (> 0): the breach window's length. */
  uint64_t nominal_from_ns; /* Start of the NOMINAL stretch before the breach window; the
                               stretch ends where the breach window starts (or at
                               nominal_to_ns when the level left NOMINAL before it). */
  uint64_t nominal_to_ns;   /* End of the NOMINAL stretch (UINT64_MAX: still NOMINAL when the
                               breach window started). */
  uint64_t bound_ns;        /* The rule's bound on the statistic, ns (0: none known). The
                               windows just before the breach window whose statistic already
                               passed it (NOMINAL while the rule waited for its enter_windows)
                               are the breach's start, not the baseline: they are left out. */
  const em_diagnose_process_t *others; /* Who else ran (cpu_contention), or NULL. */
  size_t n_others;
} em_diagnose_in_t;

/* A verdict and the storage its strings point into. Copy with em_diagnosis_copy, not '='. */
typedef struct {
  em_proto_verdict_t v;
  char stage[EM_STAGE_FIELD_BYTES];
  char statistic[8];
  char comm[EM_PROTO_VERDICT_MAX_PROCESSES][EM_DIAGNOSE_COMM_BYTES];
  /* The more_work cause's function names, filled after the engine (em_feed_functions). */
  char fn[EM_PROTO_VERDICT_MAX_FUNCTIONS][EM_PROTO_MAX_TEXT_BYTES + 1];
} em_diagnosis_t;

/*
 * Fills *out from `in`. `scratch` holds scratch_cap durations (the stage's spans in the
 * breach window and in the baseline, each sorted there in turn; spans past scratch_cap are
 * left out of the statistic). Returns 0 and a verdict that em_proto_verdict_check accepts;
 * -EINVAL (NULL, a window of 0, a stage or statistic name out of its class), or -ENOENT when
 * the breach window holds no span of the stage (nothing to explain; *out untouched).
 */
int em_diagnose(const em_diagnose_in_t *in, uint64_t *scratch, size_t scratch_cap,
                em_diagnosis_t *out);

/* Copies src to dst, its strings pointing into dst. */
void em_diagnosis_copy(em_diagnosis_t *dst, const em_diagnosis_t *src);

#endif /* EDGEMON_AGENT_DIAGNOSE_H */
