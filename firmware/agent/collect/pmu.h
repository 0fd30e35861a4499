/*
 * pmu.h - performance counters of the target with perf_event_open(2).
 *
 * Events are named as perf names them: the generic hardware events (cycles, instructions,
 * cache-references, cache-misses, branch-instructions, branch-misses, stalled-cycles-frontend,
 * stalled-cycles-backend, ref-cycles, bus-cycles) and the software events (task-clock,
 * cpu-clock, context-switches, cpu-migrations, page-faults, minor-faults, major-faults).
 * Raw and PMU-named events (pmu_events.h) come as em_pmu_event_t with their PMU's type,
 * config1/config2 and, for an event several PMUs have, one part per PMU.
 *
 * Counting, not sampling: hardware events form one group and software events another, each
 * read with one read() (PERF_FORMAT_GROUP | TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING) and
 * scaled by enabled/running when the kernel multiplexed them. A hardware event that does not
 * fit beside its group (the kernel refuses it as a member with EINVAL, as ARM PMUs do when a
 * group needs more counters than the core has) leads a second hardware group, which the
 * kernel multiplexes with the first.
 *
 * A process target is counted the way `perf stat -p PID` counts one: em_pmu_new() lists the
 * threads the process has (<proc>/<pid>/task, through em_pmu_sys_t.list_threads) and opens
 * the events on EACH of them (inherit=1, any CPU), the pid itself first. The kernel attaches
 * an event to one task and inherit only reaches tasks created after the open (checked on
 * Linux 6.18: a thread spinning since before a single open adds nothing), so one event set
 * per existing thread is what counts a process that is already running its thread pools.
 * Threads and child processes created later by any counted thread are counted through
 * inherit. Not counted: child processes that already exist at em_pmu_new() (use a cgroup
 * target), and a thread created between the listing and the open of the thread that created
 * it (the listing comes first so that nothing is ever counted twice). Details:
 *
 *   - A listed thread that exits before its events are opened (ESRCH) is skipped silently.
 *   - At most EM_PMU_MAX_THREADS threads (and EM_PMU_MAX_FDS counters) are opened, the pid
 *     itself always among them; with more, or when another thread's open fails (EMFILE: each
 *     thread holds one fd per event part),
 *     the counts are partial: logged once at warning level, and em_pmu_threads() says how
 *     many threads are counted. A cgroup target has no such limit.
 *   - When the threads cannot be listed, only the pid itself is opened, with a warning: its
 *     other existing threads are not counted.
 *   - A reading sums each event over the threads: each thread's group is scaled by its own
 *     enabled/running first, then added, as for the CPUs of a cgroup target.
 *   - A thread that exits keeps its final counts in the sum (the kernel keeps answering its
 *     read() with them), so the process total never goes backwards.
 *
 * Cost per tick: one read() per group per counted thread (a group holds the events of one
 * kind: typically one hardware and one software group, plus one per other PMU type that
 * parts use). For a process with many threads the cgroup target is cheaper: one read() per
 * group per CPU, however many threads there are.
 *
 * Parts (an event several CPU PMUs have: big.LITTLE, a TX2's Denver and A57 clusters, hybrid
 * x86): each part is a counter of its own PMU type, in the group of that type. A task counter
 * on such a PMU counts only while the task runs on that PMU's CPUs (the kernel filters it
 * out elsewhere), so the parts of one thread add up to the thread's whole count:
 *
 *   - Process target: every part is opened on every counted thread (cpu -1). The kernel keeps
 *     a part "enabled" while its task runs on ANY CPU and "running" only on its own PMU's
 *     CPUs, so one part's running/enabled is the task's share of time on that core type, not
 *     multiplexing. Scaling each part by its own enabled/running would extrapolate each to
 *     the whole run time (perf stat's "cpu_atom/instructions/ (2%)" lines, summed, overcount).
 *     So the parts of an event on one thread are scaled together as one counter: the sum of
 *     their raw counts * enabled / the sum of their running times (enabled: the largest of
 *     the parts'), which is the plain sum when nothing is multiplexed and corrects for
 *     multiplexing otherwise. running_ratio is sum(running) / enabled for such a thread.
 *   - Cgroup target: each part is opened only on the CPUs of its PMU (em_pmu_part_t.cpus;
 *     empty: every CPU); a CPU's counter is scaled on its own and the CPUs summed, so the
 *     reading is the sum of the parts' scaled values.
 *   - An event is present when at least one part opened; a part that fails is logged once
 *     (info) with its reason and the others count. Its CPUs are then not covered: for a
 *     process target the share of time there shows as running_ratio < 1 and the value is
 *     extrapolated to the whole time; a cgroup target counts those CPUs as 0. When every
 *     part fails the event is absent with the first part's reason.
 *
 * File descriptors: one per part per counted thread (parts x threads for each event), or
 * per CPU of its PMU for a cgroup target. A process target opens at most EM_PMU_MAX_FDS
 * counters: threads beyond that many are not opened (partial counts, logged as for the
 * thread cap); e.g. 16 events on 2 PMUs count at most 128 threads.
 *
 * A cgroup target opens each event on every CPU with PERF_FLAG_PID_CGROUP (each part only on
 * the CPUs of its PMU; CPUs that are offline at open, ENODEV, are skipped), scales each CPU's
 * counts and sums them. Where a
 * kernel refuses a group read of inherited events (before 4.13: EINVAL), each event is opened
 * and read on its own instead; the readings are the same.
 *
 * Kernel and user space are counted where permitted. Where the kernel refuses kernel counting
 * (perf_event_paranoid >= 2 without CAP_PERFMON: EACCES), events count user space only
 * (exclude_kernel=1), except context-switches and cpu-migrations, which happen only in the
 * kernel and stay absent with the EACCES reason rather than read 0 forever.
 *
 * An event the machine or kernel does not support, or that perf_event_paranoid forbids, is
 * absent with a reason (never 0) and the others keep counting. Before the target has run at
 * all since the open (time_enabled 0) an event is present with its count, 0.
 *
 * The target's death: the kernel keeps answering read() of a dead task's events (zombie or
 * reaped) with the final counts, frozen; it does not fail with ESRCH (checked on Linux 6.18).
 * So em_pmu_read() keeps returning 0 with values that stop growing, and cannot tell that the
 * process exited. Noticing the death and re-attaching is the caller's job: edgemon-agent
 * does it through the target's procfs statm (em_procfs_read_statm() says -ESRCH).
 *
 * Owns: the perf fds (one per event part per counted thread, or per CPU of the part's PMU for
 * a cgroup target).
 * Single-threaded. The system calls and the thread listing go through em_pmu_sys_t so the
 * tests can replay recorded kernel answers of machines with a hardware PMU
 * (tests/fixtures/pmu/).
 * perf_event_paranoid (quoted in reasons) is read from /proc directly, once per em_pmu_new().
 */
#ifndef EDGEMON_AGENT_PMU_H
#define EDGEMON_AGENT_PMU_H

#include <stdbool.h>
#include <stddef.h>
#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

struct perf_event_attr;

#define EM_PMU_MAX_EVENTS   16
#define EM_PMU_REASON_BYTES 128
#define EM_PMU_MAX_THREADS  256  /* Threads of a process target opened, at most. */
#define EM_PMU_MAX_PARTS    8    /* PMUs one event counts on (EM_PMU_EVENTS_MAX_ENTRIES). */
#define EM_PMU_MAX_CPUS     1024 /* CPUs 0..1023 in an em_pmu_cpus_t. */
#define EM_PMU_MAX_FDS                                                                             \
  4096 /* Counters (fds) of a process target, at most: see the file                                \
          comment (EM_PMU_MAX_THREADS x EM_PMU_MAX_EVENTS). */

/* A set of CPUs: bit (cpu % 64) of word (cpu / 64). The empty set means every CPU. */
typedef struct {
  uint64_t bits[EM_PMU_MAX_CPUS / 64];
} em_pmu_cpus_t;

/* One more PMU's encoding of an event: see em_pmu_event_t.parts. */
typedef struct {
  uint32_t type;      /* perf_event_attr.type: that PMU's (dynamic) type. */
  uint64_t config;    /* perf_event_attr.config */
  uint64_t config1;   /* perf_event_attr.config1 */
  uint64_t config2;   /* perf_event_attr.config2 */
  em_pmu_cpus_t cpus; /* That PMU's CPUs (a cgroup target opens it there only); empty: all. */
} em_pmu_part_t;

/*
 * A resolved event: what perf_event_attr.type/.config/.config1/.config2 get. Zero-initialised
 * fields past config mean one PMU and every CPU, so {name, type, config} is a complete event.
 *
 * An event that several PMUs have (big.LITTLE, the Denver and A57 clusters of a TX2, hybrid
 * x86: one entry per PMU from em_pmu_events_resolve()) counts on all of them: the fields
 * above `parts` are its first part, parts[0..n_parts) the others, each on a different PMU
 * type. Each part is opened as its own counter (per thread, or per CPU of its PMU for a
 * cgroup target) and the reading is their sum; see "Parts" in the file comment.
 */
typedef struct {
  char name[48];      /* As configured, e.g. "cycles". */
  uint32_t type;      /* PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE, a PMU's dynamic type, ... */
  uint64_t config;    /* PERF_COUNT_HW_*, PERF_COUNT_SW_*, a raw code, ... */
  uint64_t config1;   /* perf_event_attr.config1 (PMU format terms), usually 0. */
  uint64_t config2;   /* perf_event_attr.config2, usually 0. */
  em_pmu_cpus_t cpus; /* CPUs of the PMU of `type` (a cgroup target opens it there only);
                         empty: every CPU. */
  size_t n_parts;     /* Further parts in parts[], 0..EM_PMU_MAX_PARTS - 1. */
  em_pmu_part_t parts[EM_PMU_MAX_PARTS - 1];
} em_pmu_event_t;

/* Adds `cpu` (< EM_PMU_MAX_CPUS, else nothing) to the set. */
void em_pmu_cpus_add(em_pmu_cpus_t *set, unsigned cpu);

/* Whether the set holds `cpu`; true for every CPU when the set is empty (every CPU). */
bool em_pmu_cpus_has(const em_pmu_cpus_t *set, unsigned cpu);

/* Resolves a generic perf event name. Returns 0, or -ENOENT for a name it does not know. */
int em_pmu_resolve(const char *name, em_pmu_event_t *out);

/*
 * The i-th generic event name em_pmu_resolve() knows (i from 0), or NULL past the last: the
 * canonical names in the order the agent lists them, each followed by perf's aliases of it
 * (cpu-cycles, branches, cs, faults, ...), for which *alias (may be NULL) is set.
 */
const char *em_pmu_generic_name(size_t i, bool *alias);

/* Whether em_pmu_resolve() knows `name` (a canonical name or an alias). */
bool em_pmu_is_generic(const char *name);

/*
 * The kernel interface, replaceable in tests. Each returns like the system call. Every
 * function is required. `ctx` is passed to each; em_pmu_sys_linux ignores it.
 */
typedef struct {
  int (*open)(void *ctx, struct perf_event_attr *attr, pid_t pid, int cpu, int group_fd,
              unsigned long flags);                          /* fd, or -errno */
  ssize_t (*read)(void *ctx, int fd, void *buf, size_t len); /* bytes, or -errno */
  int (*close)(void *ctx, int fd);
  /* The thread ids of process `pid`, in any order (Linux: the entries of /proc/<pid>/task).
     Writes the first min(count, cap) to out[] and returns count, which may exceed cap; or
     -errno (-ENOENT: no such process, or no procfs). */
  int (*list_threads)(void *ctx, pid_t pid, pid_t *out, size_t cap);
  void *ctx;
} em_pmu_sys_t;

/* The real system calls. */
extern const em_pmu_sys_t em_pmu_sys_linux;

/* Where to count. */
typedef struct {
  pid_t pid;          /* > 0: this process: its threads at the open and the threads and
                         children they create afterwards; see the file comment. */
  const char *cgroup; /* Else: a cgroup v2 directory (counted on every online CPU). */
  int n_cpus;         /* CPUs 0..n_cpus-1 for cgroup mode; 0 = ask sysconf
                         (_SC_NPROCESSORS_CONF; offline ones are skipped). */
} em_pmu_target_t;

/* One event's figures after a read. */
typedef struct {
  bool present;                     /* false: absent, see reason. */
  uint64_t value;                   /* Scaled count since the events were opened, summed over
                                       the threads (or CPUs) and parts. */
  double running_ratio;             /* Sum of time_running / sum of time_enabled over its
                                       threads (or CPUs): the mean of their ratios weighted
                                       by their time_enabled, 0..1 (1 = never multiplexed);
                                       0 when it never ran. A thread's running is the sum
                                       over the parts, its enabled their largest. A thread
                                       that exited keeps its share. */
  char reason[EM_PMU_REASON_BYTES]; /* Why absent, e.g. "not supported by this CPU
                                       (ENOENT)"; empty when present. */
} em_pmu_reading_t;

typedef struct em_pmu em_pmu_t;

/*
 * Opens `events` (n <= EM_PMU_MAX_EVENTS) for `target`: on each thread of a process target
 * (listed first, at most EM_PMU_MAX_THREADS and EM_PMU_MAX_FDS counters), on each CPU of a
 * cgroup target; every part of an event (on a cgroup target: on the CPUs of its PMU). Events
 * that fail are absent with a reason, and logged once each; that is not an error, nor is a
 * part that fails while another part of its event opens (logged once). A thread other
 * than the pid that exits meanwhile is skipped; partial counts (the thread cap, a failing
 * open on another thread, an unreadable thread list) are a warning, not an error. Returns 0
 * and *out, -ENOMEM, -EINVAL (bad arguments: also n_parts > EM_PMU_MAX_PARTS - 1, or two
 * parts of one event with the same type), or -ESRCH when the target process does not
 * exist (or the pid itself exits while the events are opened) or the cgroup directory does
 * not exist; another errno of opening the cgroup directory is returned as is. `events`,
 * `target` and `sys` are copied.
 */
int em_pmu_new(em_pmu_t **out, const em_pmu_event_t *events, size_t n,
               const em_pmu_target_t *target, const em_pmu_sys_t *sys);

/* Closes every fd and frees. NULL is a no-op. */
void em_pmu_free(em_pmu_t *p);

#define EM_PMU_PARANOID_UNKNOWN INT_MIN /* No perf_event_paranoid to read. */
#define EM_CAP_SYS_ADMIN        21      /* Capability numbers, as in linux/capability.h. */
#define EM_CAP_PERFMON          38

/* Why perf_event_open refused with err (EACCES or EPERM, positive), in words that say what is
 * really missing: a distribution's paranoid level above 2 (Debian's and Ubuntu's kernels:
 * CAP_PERFMON is not enough there), CAP_PERFMON, or, with it held, CAP_SYS_PTRACE or a
 * security module. paranoid is kernel.perf_event_paranoid (EM_PMU_PARANOID_UNKNOWN when
 * unreadable), cap_eff the effective capability mask. */
void em_pmu_refusal_reason(int paranoid, uint64_t cap_eff, int err, char *dst, size_t cap);

/* The same for this process now: reads the sysctl and /proc/self/status. */
void em_pmu_refusal(int err, char *dst, size_t cap);

/*
 * Reads every group (one read() each: per group per thread, or per group per CPU) into
 * out[0..n) in the order of the events given to em_pmu_new(); entries past the events opened
 * are absent. Values are cumulative since em_pmu_new(). A group whose read() fails or returns
 * bytes that are not its layout (short, wrong nr) leaves its events absent for this read,
 * with the reason; except that ESRCH or end of file from a group of a thread other than the
 * pid means that thread is gone: its last counts stay in the sums and it is not read again.
 * Returns 0, -EINVAL (p NULL), or -ESRCH when a read() of the pid's own groups (or of a
 * cgroup's) says ESRCH or end of file, or every group's read() fails. A dead process target
 * is not reported here: see the file comment. Allocates nothing.
 */
int em_pmu_read(em_pmu_t *p, em_pmu_reading_t *out, size_t n);

/* Number of events that opened (a read may still find some of them absent). */
size_t em_pmu_present(const em_pmu_t *p);

/*
 * Number of threads of a process target whose events em_pmu_new() opened: at most
 * EM_PMU_MAX_THREADS, fewer than the process had when the counts are partial. Threads created
 * later are counted through inherit and are not included. 0 for NULL, a cgroup target, or
 * when no event opened.
 */
size_t em_pmu_threads(const em_pmu_t *p);

/*
 * Multiplexing correction: raw * enabled / running, rounded down, without overflow
 * (saturates at UINT64_MAX); raw as is when enabled <= running (clock skew never scales
 * down). Returns false (absent, *out = 0) when running is 0: the counter never ran, so its
 * count means nothing.
 */
bool em_pmu_scale(uint64_t raw, uint64_t enabled, uint64_t running, uint64_t *out);

/*
 * A derived ratio of two counter deltas (IPC = instructions / cycles, miss ratios): false
 * (absent) when either input is absent or the denominator is 0.
 */
bool em_pmu_ratio(bool num_present, uint64_t num, bool den_present, uint64_t den, double *out);

#endif /* EDGEMON_AGENT_PMU_H */
