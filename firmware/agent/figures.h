/*
 * figures.h - the agent's metric dictionary: every figure a data message may carry, with the
 * name, unit and kind the birth message announces and the alias (a small integer) data
 * messages use instead of the name. The fixed figures are one table, EM_FIGURES below: the
 * enum the agent indexes with, the names budget rules look figures up by (psi.*.avg10) and the
 * dictionary the birth carries all come from it, so a figure is named in one place.
 *
 * Aliases, fixed at start-up (em_figures_new) and never changed while the agent runs:
 *
 *   0 .. E-1            pmu.<event>            the configured PMU events, in config order
 *   E .. E+F-1          the fixed figures      EM_FIGURES, in table order (F = EM_FIG_COUNT)
 *   E+F .. E+F+A-1      budget.<stage>.anomaly one per stage the budget rules name
 *   E+F+A .. count-1    sensors.h figures      the board's sensors, in discovery order
 *
 * Each alias carries an absent reason the birth announces ("target not attached yet", "no
 * /proc/pressure: kernel without PSI"), set at start from the options and changed by the
 * agent as things appear and go (em_figures_note_absent).
 *
 * Why at the top of firmware/agent/ and not in a folder: the table names figures of every
 * folder (collect/: memory, PSI, sensors; spans/: span and ring counters; supervise/: push
 * subscribers and anomaly scores; transport/: the spool) and the agent's own cost; no folder
 * owns them all, and folders never call sideways, so the dictionary sits beside agent.c. The
 * rooms that read a figure write its value themselves, by alias, with the setters at the end
 * of this header. It calls collect/sensors.h (the sensor figures' names) and proto/.
 *
 * Owns: the dictionary (definitions, the names it builds, the absent reasons), allocated once
 * in em_figures_new(); nothing per tick. Single-threaded (the loop's thread).
 */
#ifndef EDGEMON_AGENT_FIGURES_H
#define EDGEMON_AGENT_FIGURES_H

#include <stdbool.h>
#include <stddef.h>

#include "edgemon/proto.h"
#include "sensors.h"

#define EM_FIGURES_MAX_EVENTS   16  /* PMU events (EM_CONFIG_MAX_EVENTS). */
#define EM_FIGURES_MAX_STAGES   64  /* Stages named by budget rules (EM_CONFIG_MAX_RULES). */
#define EM_FIGURES_NAME_BYTES   80  /* A built name ("pmu.<event>", "budget.<stage>.anomaly"). */
#define EM_FIGURES_REASON_BYTES 128 /* An absent reason, with the NUL; longer is truncated. */

/*
 * When a figure is read, which decides when it is in a data message:
 *   TICK    every tick (counters, gauges kept between reads such as sensors);
 *   TARGET  the target's, every tick while attached; absent while detached;
 *   SMAPS   the target's smaps_rollup, only in the window after a read (smaps_period);
 *   SYSTEM  MemAvailable and PSI, only in the window they were read (system_period).
 */
typedef enum {
  EM_FIGURE_TICK,
  EM_FIGURE_TARGET,
  EM_FIGURE_SMAPS,
  EM_FIGURE_SYSTEM,
} em_figure_group_t;

/*
 * The fixed figures: X(ID, name, unit (UCUM), kind, group). The PSI rows follow em_psi_res_t
 * (cpu, memory, io; some then full each) and the spans.dropped rows em_spans_drop_t:
 * collect/sampling.c and spans/report.c index them from their first row and check both orders
 * with static asserts.
 */
#define EM_FIGURES(X)                                                                              \
  X(PMU_HW_RUNNING, "pmu.hw.running_ratio", "1", GAUGE, TARGET)                                    \
  X(PMU_SW_RUNNING, "pmu.sw.running_ratio", "1", GAUGE, TARGET)                                    \
  X(IPC, "pmu.ipc", "1", GAUGE, TARGET)                                                            \
  X(CACHE_MISS_RATIO, "pmu.cache_miss_ratio", "1", GAUGE, TARGET)                                  \
  X(BRANCH_MISS_RATIO, "pmu.branch_miss_ratio", "1", GAUGE, TARGET)                                \
  X(RSS, "mem.rss", "By", GAUGE, TARGET)                                                           \
  X(SHARED, "mem.shared", "By", GAUGE, TARGET)                                                     \
  X(VSIZE, "mem.vsize", "By", GAUGE, TARGET)                                                       \
  X(PSS, "mem.pss", "By", GAUGE, SMAPS)                                                            \
  X(ANON, "mem.anon", "By", GAUGE, SMAPS)                                                          \
  X(SWAP, "mem.swap", "By", GAUGE, SMAPS)                                                          \
  X(MEM_AVAILABLE, "sys.mem.available", "By", GAUGE, SYSTEM)                                       \
  X(PSI_CPU_SOME, "psi.cpu.some.avg10", "%", GAUGE, SYSTEM)                                        \
  X(PSI_CPU_FULL, "psi.cpu.full.avg10", "%", GAUGE, SYSTEM)                                        \
  X(PSI_MEMORY_SOME, "psi.memory.some.avg10", "%", GAUGE, SYSTEM)                                  \
  X(PSI_MEMORY_FULL, "psi.memory.full.avg10", "%", GAUGE, SYSTEM)                                  \
  X(PSI_IO_SOME, "psi.io.some.avg10", "%", GAUGE, SYSTEM)                                          \
  X(PSI_IO_FULL, "psi.io.full.avg10", "%", GAUGE, SYSTEM)                                          \
  X(TARGET_PID, "target.pid", "1", GAUGE, TICK)                                                    \
  X(TARGET_UP, "target.up", "1", GAUGE, TICK)                                                      \
  X(TARGET_ATTACHES, "target.attaches", "1", COUNTER, TICK)                                        \
  X(TARGET_THREADS, "target.threads_counted", "1", GAUGE, TICK)                                    \
  X(AGENT_CPU, "agent.cpu", "ns", COUNTER, TICK)                                                   \
  X(AGENT_RSS, "agent.rss", "By", GAUGE, TICK)                                                     \
  X(AGENT_NOT_SENT, "agent.mqtt.not_sent", "1", COUNTER, TICK)                                     \
  X(AGENT_OVERSIZE, "agent.mqtt.oversize", "1", COUNTER, TICK)                                     \
  X(AGENT_LATE_TICKS, "agent.late_ticks", "1", COUNTER, TICK)                                      \
  X(SPANS_RECEIVED, "spans.received", "1", COUNTER, TICK)                                          \
  X(SPANS_DROPPED_MALFORMED, "spans.dropped.malformed", "1", COUNTER, TICK)                        \
  X(SPANS_DROPPED_VERSION, "spans.dropped.version", "1", COUNTER, TICK)                            \
  X(SPANS_DROPPED_SIZE, "spans.dropped.size", "1", COUNTER, TICK)                                  \
  X(SPANS_DROPPED_DISALLOWED, "spans.dropped.disallowed", "1", COUNTER, TICK)                      \
  X(SPANS_DROPPED_OVERFLOW, "spans.dropped.overflow", "1", COUNTER, TICK)                          \
  X(SPANS_STAGES, "spans.stages", "1", GAUGE, TICK)                                                \
  X(SPANS_EVICTED, "spans.stages.evicted", "1", COUNTER, TICK)                                     \
  X(SPANS_RING, "spans.ring", "1", COUNTER, TICK)                                                  \
  X(SPANS_DATAGRAM, "spans.datagram", "1", COUNTER, TICK)                                          \
  X(RING_LOST_OVERWRITTEN, "spans.ring_lost.overwritten", "1", COUNTER, TICK)                      \
  X(RING_LOST_BAD_SLOT, "spans.ring_lost.bad_slot", "1", COUNTER, TICK)                            \
  X(RING_LOST_BAD_HEAD, "spans.ring_lost.bad_head", "1", COUNTER, TICK)                            \
  X(RING_LOST_SKIPPED, "spans.ring_lost.skipped", "1", COUNTER, TICK)                              \
  X(RINGS_ACTIVE, "rings.active", "1", GAUGE, TICK)                                                \
  X(RINGS_REFUSED, "rings.refused", "1", COUNTER, TICK)                                            \
  X(SPANS_FDS_CLOSED, "spans.fds_closed", "1", COUNTER, TICK)                                      \
  X(PUSH_SUBSCRIBERS, "push.subscribers", "1", GAUGE, TICK)                                        \
  X(PUSH_REFUSED, "push.subscribe_refused", "1", COUNTER, TICK)                                    \
  X(PUSH_GONE, "push.subscribers_gone", "1", COUNTER, TICK)                                        \
  X(AGENT_REBIRTHS_SUPPRESSED, "agent.rebirths_suppressed", "1", COUNTER, TICK)                    \
  X(MODEL_RECEIVED, "model.received", "1", COUNTER, TICK)                                          \
  X(MODEL_CHANGES, "model.changes", "1", COUNTER, TICK)                                            \
  X(MODEL_REFUSED, "model.refused", "1", COUNTER, TICK)                                            \
  X(SPOOL_PENDING, "spool.pending", "1", GAUGE, TICK)                                              \
  X(SPOOL_DROPPED, "spool.dropped", "1", COUNTER, TICK)                                            \
  X(SPOOL_CORRUPT, "spool.corrupt", "1", COUNTER, TICK)                                            \
  X(SPOOL_WRITE_ERRORS, "spool.write_errors", "1", COUNTER, TICK)                                  \
  X(SPOOL_REPLAYED, "spool.replayed", "1", COUNTER, TICK)                                          \
  X(SPOOL_INFLIGHT, "spool.inflight", "1", GAUGE, TICK)                                            \
  X(SPOOL_EVICTED_INFLIGHT, "spool.evicted_inflight", "1", COUNTER, TICK)                          \
  X(SPOOL_LOST, "spool.lost", "1", COUNTER, TICK)                                                  \
  X(FLIGHT_RECORDINGS, "flight.recordings", "1", COUNTER, TICK)                                    \
  X(FLIGHT_SUPPRESSED, "flight.suppressed", "1", COUNTER, TICK)                                    \
  X(FLIGHT_CUT, "flight.cut", "1", COUNTER, TICK)                                                  \
  X(FLIGHT_OVERWRITTEN, "flight.overwritten", "1", COUNTER, TICK)                                  \
  X(FLIGHT_UNNAMED, "flight.unnamed", "1", COUNTER, TICK)                                          \
  X(PROFILE_TAKEN, "profile.taken", "1", COUNTER, TICK)                                            \
  X(PROFILE_SUPPRESSED, "profile.suppressed", "1", COUNTER, TICK)                                  \
  X(PROFILE_LOST, "profile.lost", "1", COUNTER, TICK)                                              \
  X(SCHED_RUNQ_DELAY, "sched.runq_delay", "ns", COUNTER, TARGET)                                   \
  X(SCHED_CTXSW_VOLUNTARY, "sched.ctxsw.voluntary", "1", COUNTER, TARGET)                          \
  X(SCHED_CTXSW_INVOLUNTARY, "sched.ctxsw.involuntary", "1", COUNTER, TARGET)                      \
  X(PROC_CPU, "proc.cpu", "ns", COUNTER, TARGET)                                                   \
  X(MAJOR_FAULTS, "mem.major_faults", "1", COUNTER, TARGET)                                        \
  X(CGROUP_CPU_THROTTLED, "cgroup.cpu.throttled", "ns", COUNTER, TARGET)                           \
  X(CGROUP_CPU_NR_THROTTLED, "cgroup.cpu.nr_throttled", "1", COUNTER, TARGET)                      \
  X(GPU_MEM_PROCESS, "gpu.mem.process", "By", GAUGE, TARGET)                                       \
  X(IO_READ_BYTES, "io.read_bytes", "By", COUNTER, TARGET)                                         \
  X(IO_WRITE_BYTES, "io.write_bytes", "By", COUNTER, TARGET)

/* The fixed figures' ids: EM_FIG_<ID>, in table order. */
typedef enum {
#define EM_FIGURES_ID(id, name, unit, kind, group) EM_FIG_##id,
  EM_FIGURES(EM_FIGURES_ID)
#undef EM_FIGURES_ID
      EM_FIG_COUNT
} em_figure_t;

/* One row of the table. Strings are static. */
typedef struct {
  const char *name;
  const char *unit;
  em_metric_kind_t kind;
  em_figure_group_t group;
} em_figure_info_t;

/* Row `f` of the table, or NULL when f >= EM_FIG_COUNT. */
const em_figure_info_t *em_figures_info(em_figure_t f);

/* The fixed figure named `name`: its id, or -ENOENT (also for NULL). */
int em_figures_find(const char *name);

/* What the dictionary holds besides the fixed figures. Everything is borrowed for the call of
 * em_figures_new() except `sensors`, whose figure names the dictionary points to: it must
 * outlive the dictionary. */
typedef struct {
  const char *const *events;   /* PMU event names, config order; n_events entries. */
  size_t n_events;             /* 0..EM_FIGURES_MAX_EVENTS */
  const char *const *stages;   /* Stages of the budget rules: "" and repeats are skipped. */
  size_t n_stages;             /* 0..EM_FIGURES_MAX_STAGES */
  const em_sensors_t *sensors; /* NULL: no sensor figures. */
  bool psi;                    /* /proc/pressure exists: else PSI is absent, with that reason. */
  bool process_memory;         /* Per-process memory is sampled (false: a cgroup target). */
  bool smaps;                  /* smaps_rollup is read (smaps_period is not 0). */
  bool flight;                 /* The flight recorder is on: else its figures are absent. */
  bool profile;                /* The stack profiler is on: else its figures are absent. */
} em_figures_opts_t;

typedef struct em_figures em_figures_t;

/*
 * Builds the dictionary. Initial absent reasons: PMU events "target not attached yet",
 * sensor figures "not read yet", PSI without /proc/pressure, per-process memory of a cgroup
 * target, smaps figures with smaps off (the last wins for PSS, anon and swap). Returns 0 and
 * *out, -EINVAL (NULL argument, too many events or stages, a NULL name), -ENAMETOOLONG (a
 * name that does not fit EM_FIGURES_NAME_BYTES with its prefix), or -ENOMEM.
 */
int em_figures_new(em_figures_t **out, const em_figures_opts_t *opts);

/* Frees. NULL is a no-op. */
void em_figures_free(em_figures_t *d);

/* Every alias: events, fixed figures, anomaly scores, sensor figures. */
size_t em_figures_count(const em_figures_t *d);

/* Alias of fixed figure f. */
size_t em_figures_alias(const em_figures_t *d, em_figure_t f);

/* Anomaly scores: how many, the alias of the k-th, and its stage (borrowed until free). */
size_t em_figures_anomalies(const em_figures_t *d);
size_t em_figures_anomaly_alias(const em_figures_t *d, size_t k);
const char *em_figures_anomaly_stage(const em_figures_t *d, size_t k);

/* Alias of sensor figure i (em_sensors_figure(sensors, i)). */
size_t em_figures_sensor_alias(const em_figures_t *d, unsigned i);

/* When alias is read (PMU events: TARGET; anomaly scores and sensors: TICK). */
em_figure_group_t em_figures_group(const em_figures_t *d, size_t alias);

/* Sets why `alias` is absent ("" or NULL: it is not), copied and truncated to fit. Out of range
 * aliases are ignored. */
void em_figures_note_absent(em_figures_t *d, size_t alias, const char *why);

/*
 * The definitions for a birth message, em_figures_count() of them, in alias order, each with
 * its current absent reason. Borrowed until the next call or em_figures_free().
 */
const em_metric_def_t *em_figures_defs(em_figures_t *d);

/*
 * The samples of a data message from samples[0..count) (by alias), in alias order: the groups
 * read on slower cadences (smaps, system) only when `smaps` / `system` says they were read in
 * this window (a value missing from a data message means "not sampled this window"). Returns
 * the count written to out (room for em_figures_count()).
 */
size_t em_figures_window(const em_figures_t *d, const em_sample_t *samples, bool smaps, bool system,
                         em_sample_t *out);

/*
 * A tick's values are one em_sample_t per alias (samples[alias]), written by the module that
 * read the figure: a value, or absent ("not read", "not attached"). `have` false: absent.
 */
static inline void em_figures_set_u(em_sample_t *s, size_t alias, uint64_t v) {
  s[alias].value = (em_value_t){.type = EM_VALUE_UINT, .as.u = v};
}
static inline void em_figures_set_f(em_sample_t *s, size_t alias, double v) {
  s[alias].value = (em_value_t){.type = EM_VALUE_FLOAT, .as.f = v};
}
static inline void em_figures_set_absent(em_sample_t *s, size_t alias) {
  s[alias].value = (em_value_t){.type = EM_VALUE_ABSENT};
}
static inline void em_figures_set_u_if(em_sample_t *s, size_t alias, bool have, uint64_t v) {
  have ? em_figures_set_u(s, alias, v) : em_figures_set_absent(s, alias);
}
static inline void em_figures_set_f_if(em_sample_t *s, size_t alias, bool have, double v) {
  have ? em_figures_set_f(s, alias, v) : em_figures_set_absent(s, alias);
}

#endif /* EDGEMON_AGENT_FIGURES_H */
