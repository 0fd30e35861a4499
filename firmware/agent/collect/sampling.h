/*
 * sampling.h - what the agent reads on its tick, and the worker jobs behind it: the target's
 * PMU counters (and the IPC, cache-miss and branch-miss ratios of their deltas), its memory
 * (statm every tick, smaps_rollup every smaps_period on libuv's worker: it walks the target's
 * page tables, ~9.5 ms per GiB resident), MemAvailable and PSI every system_period, the
 * agent's own CPU time and RSS, and the board's sensors every sensors period on the worker
 * (an INA3221 or a thermal zone read can take milliseconds), the target's scheduling evidence
 * (schedinfo.h: CPU time and major faults every tick, the per-thread runq delay and context
 * switches and the cgroup's throttling every system_period), who else ran (others.h: a
 * /proc scan on the worker every EM_SAMPLING_OTHERS_PERIOD_NS and at a trigger), and the
 * target's own GPU memory (gpumem.h: nvmap or NVML on the worker every system_period, the
 * figure holding the last reading between reads). Each reading
 * is written into the
 * tick's samples by alias (figures.h); a group read on a slower cadence says so
 * (em_sampling_fresh) so the data message and the flight recorder carry it only then.
 *
 *   em_sampling_new -> (the dictionary is built from its events, sensors and PSI) ->
 *   em_sampling_bind -> em_sampling_attach / em_sampling_detach (attach.h) as the target
 *   comes and goes -> per tick: em_sampling_target, em_sampling_system, em_sampling_self,
 *   em_sampling_read_sensors -> em_sampling_cancel at stop -> em_sampling_free
 *
 * Owns: the procfs and sched readers, the others scanner, the PMU groups, the sensors, the GPU
 * memory reader, the agent's own statm fd, the four worker requests and what they fill. Runs on
 * the loop's thread except smaps_rollup, the sensor reads, the others scan and the GPU memory
 * read, which libuv's worker runs;
 * while the smaps read runs the procfs reader's target files do not change (a detach then is
 * finished by the job's end).
 */
#ifndef EDGEMON_AGENT_SAMPLING_H
#define EDGEMON_AGENT_SAMPLING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "board.h"
#include "edgemon/proto.h"
#include "figures.h"
#include "others.h"
#include "pmu.h"
#include "sensors.h"

#define EM_SAMPLING_MAX_EVENTS 16 /* PMU events (EM_CONFIG_MAX_EVENTS). */

/* The groups read on their own cadence (em_sampling_fresh). */
#define EM_SAMPLING_SMAPS   1u /* smaps_rollup: PSS, anon, swap. */
#define EM_SAMPLING_SYSTEM  2u /* MemAvailable and PSI. */
#define EM_SAMPLING_SENSORS 4u /* The board's sensors. */

/* Who else ran: the scan's cadence while attached. A scan reads every process's stat (~1 ms
 * for ~300 processes on the reference VM, on the worker): every 30 s it costs the agent ~33 us
 * a second, a sixth of one 100 ms tick. While the target is contended (its threads waited
 * runnable more than 1/EM_SAMPLING_CONTENDED_PARTS of the time between two scheduling passes)
 * it scans every 2 s, so the list an escalation reads (em_sampling_others) covers the seconds
 * before it when CPU contention is the cause; a trigger may also ask for a scan at once. */
#define EM_SAMPLING_OTHERS_PERIOD_NS    (UINT64_C(30) * 1000000000u)
#define EM_SAMPLING_OTHERS_CONTENDED_NS (UINT64_C(2) * 1000000000u)
#define EM_SAMPLING_CONTENDED_PARTS     20u /* 5 % of the time waiting for a CPU. */

typedef struct {
  uv_loop_t *loop;                 /* Where the worker jobs are queued. */
  const char *proc_root;           /* "/proc" or a fixture; copied by the reader. */
  const char *sys_root;            /* "/sys" or a fixture (events, sensors); borrowed here. */
  const char *const *events;       /* PMU event names, config order; borrowed for the call. */
  size_t n_events;                 /* 0..EM_SAMPLING_MAX_EVENTS */
  uint64_t smaps_period_ns;        /* 0: smaps_rollup is not read. */
  uint64_t system_period_ns;       /* MemAvailable and PSI. */
  uint64_t sensors_period_ns;      /* [agent] sensors_period; 0: the board's, else 1 s. */
  const em_board_profile_t *board; /* Which sensors (NULL: every one probed); borrowed. */
} em_sampling_opts_t;

typedef struct em_sampling em_sampling_t;

/* Opens the procfs reader, resolves the events (one the machine lacks stays, absent with its
 * reason) and finds the sensors (none: a warning). Returns 0 and *out, -EINVAL, -ENOMEM, or
 * the procfs reader's error. */
int em_sampling_new(em_sampling_t **out, const em_sampling_opts_t *opts);

/* Frees. Not while a worker job runs (em_sampling_cancel's done first). NULL is a no-op. */
void em_sampling_free(em_sampling_t *s);

/* What the dictionary is built from: the sensors (NULL: none; borrowed until free), whether
 * /proc/pressure exists, the resolved events (n of them; borrowed until free). */
const em_sensors_t *em_sampling_sensors(const em_sampling_t *s);
bool em_sampling_has_psi(const em_sampling_t *s);
const em_pmu_event_t *em_sampling_events(const em_sampling_t *s, size_t *n);

/* The dictionary and the samples (samples[alias]) every reading is written into; both
 * borrowed, outliving the sampling. Call it once, before the first tick. */
void em_sampling_bind(em_sampling_t *s, em_figures_t *figs, em_sample_t *samples);

/*
 * Opens the PMU and the target's procfs files for `pid` (> 0), or the PMU for `cgroup` (pid
 * -1). Sets the events' absent reasons. Returns 0 (*present: counters that opened), -ESRCH
 * (gone meanwhile), -EBUSY (the last target's smaps read still runs), or the procfs error.
 */
int em_sampling_attach(em_sampling_t *s, pid_t pid, const char *cgroup, size_t *present);

/* Closes the PMU and the target's files (the running smaps read finishes it). */
void em_sampling_detach(em_sampling_t *s);

/* True while an smaps read runs: the target's files must not change (attach.h waits). */
bool em_sampling_busy(const em_sampling_t *s);

/* The tick's target figures: PMU counters and ratios, statm, and the smaps read queued when
 * due. Returns false when the target is gone (statm says ESRCH). */
bool em_sampling_target(em_sampling_t *s, uint64_t now_ns);

/* The target's per-tick figures as absent (detached). */
void em_sampling_detached(em_sampling_t *s);

/* The counted threads (*n) when the PMU is open; false when not. */
bool em_sampling_threads(const em_sampling_t *s, uint64_t *n);

/* MemAvailable and PSI when system_period is due. */
void em_sampling_system(em_sampling_t *s, uint64_t now_ns);

/* The agent's own CPU time and RSS. */
void em_sampling_self(em_sampling_t *s);

/* Queues the sensors' read when its period is due (none queued while one runs). */
void em_sampling_read_sensors(em_sampling_t *s, uint64_t now_ns);

/* EM_SAMPLING_* groups read since the last em_sampling_sent (smaps, sensors) or this tick
 * (system). */
unsigned em_sampling_fresh(const em_sampling_t *s);

/* The data message carried the fresh groups: smaps and sensors wait for their next reading. */
void em_sampling_sent(em_sampling_t *s);

/* Queues a scan of who else ran now (at a trigger, or the end of its window), diffed against the
 * scan before; its list replaces em_sampling_others()'s when it ends (on the loop), a few ms
 * later. Nothing is queued while a scan runs. */
void em_sampling_others_refresh(em_sampling_t *s, uint64_t now_ns);

/* The latest list of who else ran (others.h), largest share first; n 0 before two scans.
 * Borrowed: valid until the next tick. */
const em_others_list_t *em_sampling_others(const em_sampling_t *s);

/* What the temp_max and throttle rules judge: the hottest zone (degrees C; absent when none),
 * throttled (1 or 0; absent before the first read) and why (borrowed; NULL when not). */
void em_sampling_thermal(const em_sampling_t *s, em_value_t *temp_max, em_value_t *throttled,
                         const char **why);

/*
 * At stop: cancels the queued worker jobs. Returns how many were queued or running: done(ctx)
 * is then called that many times from the loop, once as each ends; 0: never called.
 */
unsigned em_sampling_cancel(em_sampling_t *s, void (*done)(void *), void *ctx);

#endif /* EDGEMON_AGENT_SAMPLING_H */
