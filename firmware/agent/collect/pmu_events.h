/*
 * pmu_events.h - event names resolved as perf resolves them, against a sysfs tree.
 *
 * An event string from a board profile or the config becomes one or more perf_event_attr
 * settings (type, config, config1, config2) and the CPUs each applies to:
 *
 *   - "r<hex>" (1..16 hex digits, e.g. r0011): PERF_TYPE_RAW, config = the number. No PMU is
 *     named and no CPU list applies. On a system with several CPU PMUs (big.LITTLE, TX2) the
 *     kernel does not pick "the right" PMU for a raw code: an event opened on one CPU goes to
 *     the PMU of that CPU (arm_pmu refuses CPUs outside its supported_cpus), and an event
 *     opened for a task on any CPU (cpu -1) goes to the first CPU PMU that accepts it and
 *     counts only while the task runs on that PMU's CPUs. So a raw code counts on one core
 *     type; name the PMU ("pmu/event=0x11/") or use a kernel event name to count on all.
 *   - a generic perf name known to em_pmu_resolve() (cycles, instructions, task-clock, ...):
 *     PERF_TYPE_HARDWARE or PERF_TYPE_SOFTWARE. The same caveat as raw codes applies to the
 *     hardware ones on heterogeneous systems.
 *   - a bare kernel event name (l1d_cache_refill, cpu-cycles on x86): looked up in
 *     events/<name> of every CPU PMU under <root>/sys/bus/event_source/devices (a CPU PMU is
 *     named "cpu", or has a "cpus" file: the arm_pmu and hybrid x86 convention); one entry
 *     per PMU that has it, each with that PMU's dynamic type and its CPUs. Names are matched
 *     in lower case.
 *   - "pmu/terms/": that PMU only. Terms are comma-separated: "name=value" with a format of
 *     the PMU (format/<name>, e.g. "config:0-15") or config/config1/config2 set whole; a bare
 *     term is an event alias of the PMU (events/<term>) or, failing that, a format flag set
 *     to 1 (perf's rule). "armv8_pmuv3_0/inst_retired/", "cpu/event=0x3c,umask=0x0/".
 *
 * Format files ("config:0-7", "config1:0-31,32-63", "config:18") are bit sets of one of
 * config/config1/config2; a value is spread over the set bits from the lowest upwards, and a
 * value that needs more bits than the format has is an error (-ERANGE). Event files hold the
 * same "term=value" list; a "term=?" (a parameter the user must supply) is refused.
 *
 * Errors are negative errno with a one-line message naming the problem (and the file, for a
 * file that cannot be parsed): -ENOENT unknown event or PMU (the message lists the PMUs
 * searched), -EINVAL malformed event string or file, -ERANGE value too wide, -E2BIG more
 * PMUs match than EM_PMU_EVENTS_MAX_ENTRIES. Nothing here crashes or hangs on garbage:
 * files are read with a size cap, names are checked before they become paths.
 *
 * Owns nothing between calls (each call opens and closes its files). Single-threaded use;
 * no global state.
 */
#ifndef EDGEMON_AGENT_PMU_EVENTS_H
#define EDGEMON_AGENT_PMU_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pmu.h"

#define EM_PMU_EVENTS_MAX_ENTRIES 8    /* PMUs one event may resolve to. */
#define EM_PMU_EVENTS_MAX_CPUS    1024 /* CPUs 0..1023 in a CPU set. */
#define EM_PMU_EVENTS_NAME_BYTES  64   /* PMU and event names, with the NUL. */
#define EM_PMU_EVENTS_ERROR_BYTES 512  /* One error message, with the NUL. */
#define EM_PMU_EVENTS_FILE_BYTES  4096 /* A sysfs file larger than this is malformed. */

/* A set of CPUs: bit (cpu % 64) of word (cpu / 64). */
typedef struct {
  uint64_t bits[EM_PMU_EVENTS_MAX_CPUS / 64];
} em_pmu_events_cpus_t;

/* One perf_event_attr setting an event resolves to. */
typedef struct {
  char pmu[EM_PMU_EVENTS_NAME_BYTES]; /* PMU directory name; "" for raw and generic events. */
  uint32_t type;                      /* perf_event_attr.type: PERF_TYPE_* or the PMU's
                                         dynamic type (its "type" file). */
  uint64_t config;                    /* perf_event_attr.config */
  uint64_t config1;                   /* perf_event_attr.config1 */
  uint64_t config2;                   /* perf_event_attr.config2 */
  bool any_cpu;                       /* true: no CPU list applies (raw, generic, or a PMU
                                         without a cpus/cpumask file); cpus is empty. */
  em_pmu_events_cpus_t cpus;          /* The PMU's "cpus" (or "cpumask") file. */
} em_pmu_events_entry_t;

/* What em_pmu_events_resolve() produced. */
typedef struct {
  size_t n; /* Entries in e[], >= 1 on success. */
  em_pmu_events_entry_t e[EM_PMU_EVENTS_MAX_ENTRIES];
  char error[EM_PMU_EVENTS_ERROR_BYTES]; /* Set on failure; "" on success. */
} em_pmu_events_t;

/*
 * Resolves `event` against the sysfs/procfs tree at `root` ("/" on a board, a fixture tree
 * in tests). Returns 0 with out->n >= 1 entries, or a negative errno with out->n = 0 and
 * out->error set (see the file comment). `root` and `event` are borrowed for the call.
 * -EINVAL as well for NULL arguments (out->error set when out is not NULL).
 */
int em_pmu_events_resolve(const char *root, const char *event, em_pmu_events_t *out);

/* A parsed format file: which config word and which of its bits. */
typedef struct {
  int word;      /* 0: config, 1: config1, 2: config2. */
  uint64_t mask; /* Bits the value is spread over, lowest first; never 0. */
} em_pmu_events_format_t;

/*
 * Parses the text of a format file ("config:0-15", "config1:0-31,32-63", "config:18", a
 * trailing newline allowed). Returns 0, or -EINVAL for anything else (bit > 63, a > b in
 * "a-b", empty list, unknown word). `text` is NUL-terminated and borrowed.
 */
int em_pmu_events_parse_format(const char *text, em_pmu_events_format_t *out);

/*
 * Puts `value` into the bits of `fmt` in config[fmt->word], lowest format bit first, leaving
 * the other bits of config[] as they are. Returns 0, or -ERANGE when value has a bit set
 * beyond the format's width (nothing is changed then).
 */
int em_pmu_events_encode(const em_pmu_events_format_t *fmt, uint64_t value, uint64_t config[3]);

/*
 * Parses a CPU list as in sysfs "cpus" files ("0-3,6", "0", a trailing newline allowed) into
 * *out. Returns 0, or -EINVAL (malformed, empty, a CPU >= EM_PMU_EVENTS_MAX_CPUS).
 */
int em_pmu_events_parse_cpus(const char *text, em_pmu_events_cpus_t *out);

/* Whether `cpu` is in the set (false for cpu out of range). */
bool em_pmu_events_cpu_isset(const em_pmu_events_cpus_t *set, unsigned cpu);

/* Number of CPUs in the set. */
unsigned em_pmu_events_cpu_count(const em_pmu_events_cpus_t *set);

/* The type of an event nothing resolves: no PMU has it, so perf_event_open(2) refuses it with
 * ENOENT and the counter is absent with that reason. */
#define EM_PMU_EVENTS_ABSENT_TYPE UINT32_MAX

/*
 * The event em_pmu_new() opens for a configured name: a generic perf name (em_pmu_resolve()),
 * else what em_pmu_events_resolve() finds under `root`, every entry a part of the event (on a
 * heterogeneous system one per CPU PMU that has it, counted on all of them: pmu.h) with its
 * config1/config2 and its PMU's CPUs. Entries past EM_PMU_MAX_PARTS, and an entry repeating a
 * type already taken (a broken sysfs), are left out (the latter with a warning in the log).
 * Returns 0, or the negative errno of em_pmu_events_resolve() with its message logged at
 * error; *out is filled either way: on failure it is `name` with EM_PMU_EVENTS_ABSENT_TYPE, an
 * event the machine does not have. -EINVAL for a NULL name (out absent) or a NULL out.
 * `root` and `name` are borrowed for the call.
 */
int em_pmu_events_event(const char *root, const char *name, em_pmu_event_t *out);

#endif /* EDGEMON_AGENT_PMU_EVENTS_H */
