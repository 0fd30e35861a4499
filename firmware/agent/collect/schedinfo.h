/*
 * schedinfo.h - the target's scheduling evidence, what a diagnosis of a slow stage needs besides
 * the PMU and memory: how long its threads waited runnable for a CPU, how often they switched out
 * (voluntarily: waiting inside the process; involuntarily: preempted), the CPU time it got, its
 * major page faults, and how much its cgroup's CPU quota throttled it.
 *
 *   proc.cpu, mem.major_faults      <proc>/<pid>/stat: utime + stime (clock ticks), majflt
 *   sched.runq_delay                sum of <proc>/<pid>/task/<tid>/schedstat field 2 (ns); for
 *                                   a cgroup target its cpu.pressure "some ... total=" (us)
 *   sched.ctxsw.{voluntary,involuntary}  sum of task/<tid>/status *_ctxt_switches
 *   cgroup.cpu.throttled, .nr_throttled  the target's cgroup cpu.stat: v2 throttled_usec, v1
 *                                   throttled_time (ns); nr_throttled in both
 *
 * The cgroup is found from <proc>/<pid>/cgroup: the v1 line whose controllers include "cpu"
 * ("4:cpu,cpuacct:/a"), looked up under <cgroup_root>/<controllers>, else the v2 line ("0::/a")
 * under <cgroup_root> (pure v2) or <cgroup_root>/unified (hybrid). A v1 cpu controller wins for
 * the throttling: on a hybrid mount the v2 tree has no cpu controller and its cpu.stat no
 * throttled_usec. A figure whose file or key is missing is absent, never 0 (`have` bits).
 *
 * Cost, and why this design. The per-thread pass is the expensive part: task/ and two files
 * per thread. Measured on the reference VM (tests/bench/bench_schedinfo.c): an open of a
 * thread's file is ~8 us, a pread of schedstat ~1 us, of status ~15 us (the kernel formats
 * some 50 lines). So: (1) the pass runs on the caller's slower cadence (sampling.c:
 * system_period, 1 s by default), never every tick; (2) each thread's schedstat and status stay
 * open between passes (the first EM_SCHEDINFO_MAX_OPEN_THREADS threads; later ones are opened
 * relative to the open task/ directory each pass) and are re-read with pread; (3) status is
 * read only for a thread whose schedstat slice count moved since the last pass: a thread that
 * did not run did not switch, so its counts stand. A mostly idle thread pool then costs ~2 us
 * per thread per pass. /proc/<pid>/stat (proc.cpu, majflt) is one pread of a file kept open,
 * cheap enough for every tick (~3.5 us). Threads come and go: a thread's last reading is kept
 * in a bounded table (EM_SCHEDINFO_MAX_THREADS) and, when the thread is gone, added to a
 * carried sum, so the counters never go backwards when a worker thread exits (what it did
 * after the last pass is lost; the kernel keeps no per-thread figures of dead threads). A
 * process with more threads than the table counts the first EM_SCHEDINFO_MAX_THREADS that
 * task/ lists; should that set change between passes, a thread that left it is counted as gone
 * and again, whole, when it comes back: the sums may then jump (not go backwards).
 *
 * Parsers are pure functions over (text, len) like procfs.h's: text need not be NUL-terminated,
 * nothing past text[len-1] is read, *out is zeroed first, -EINVAL for text not in the format.
 *
 * Owns: the open fds of an em_schedinfo_t (stat, task/ directory, cgroup cpu.stat and
 * cpu.pressure, and two per followed thread, at most 2 * EM_SCHEDINFO_MAX_OPEN_THREADS)
 * and its one allocation (the thread table). Single-threaded: the loop's thread.
 */
#ifndef EDGEMON_AGENT_SCHEDINFO_H
#define EDGEMON_AGENT_SCHEDINFO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Threads followed per pass: a pytorch process runs a few dozen, a thread pool some hundreds. */
#define EM_SCHEDINFO_MAX_THREADS 1024
/* Threads whose schedstat and status stay open between passes (two fds each, as the PMU keeps
 * its counters' per thread): a pread of a kept file is ~1 us, an open ~8 us. */
#define EM_SCHEDINFO_MAX_OPEN_THREADS 256
#define EM_SCHEDINFO_PATH_BYTES       512 /* A cgroup path, as /proc/<pid>/cgroup prints it. */

/* The `have` bits of em_schedinfo_reading_t. */
enum {
  EM_SCHEDINFO_RUNQ = 1u << 0,         /* runq_delay_ns */
  EM_SCHEDINFO_CTXSW = 1u << 1,        /* ctxsw_voluntary, ctxsw_involuntary */
  EM_SCHEDINFO_CPU = 1u << 2,          /* cpu_ns */
  EM_SCHEDINFO_MAJFLT = 1u << 3,       /* major_faults */
  EM_SCHEDINFO_THROTTLED = 1u << 4,    /* throttled_ns */
  EM_SCHEDINFO_NR_THROTTLED = 1u << 5, /* nr_throttled */
};

typedef struct {
  unsigned have;          /* EM_SCHEDINFO_* of the fields read. */
  uint64_t runq_delay_ns; /* Runnable, waiting for a CPU. */
  uint64_t ctxsw_voluntary;
  uint64_t ctxsw_involuntary;
  uint64_t cpu_ns; /* user + system */
  uint64_t major_faults;
  uint64_t throttled_ns; /* CPU quota throttled time of the cgroup. */
  uint64_t nr_throttled; /* Periods throttled. */
} em_schedinfo_reading_t;

/* /proc/<pid>/stat: the fields after the command name's closing parenthesis. */
typedef struct {
  char state;           /* field 3 */
  uint64_t majflt;      /* field 12 */
  uint64_t utime_ticks; /* field 14 */
  uint64_t stime_ticks; /* field 15 */
  uint64_t starttime;   /* field 22, clock ticks since boot */
  int processor;        /* field 39, the CPU it last ran on; -1 when the line is shorter */
  char comm[16];        /* field 2, truncated to 15 bytes and NUL-terminated */
} em_schedinfo_stat_t;

/* The cpu controller's cgroup of a process (empty strings: no such line). */
typedef struct {
  char v1_controllers[64];               /* "cpu,cpuacct" or "cpu" as the line names them */
  char v1_path[EM_SCHEDINFO_PATH_BYTES]; /* "/a/b" */
  char v2_path[EM_SCHEDINFO_PATH_BYTES]; /* "/a/b" of the "0::" line */
} em_schedinfo_cgroup_t;

/* cpu.stat (EM_SCHEDINFO_THROTTLED, EM_SCHEDINFO_NR_THROTTLED in have; throttled in ns). */
typedef struct {
  unsigned have;
  uint64_t throttled_ns;
  uint64_t nr_throttled;
} em_schedinfo_cpu_stat_t;

int em_schedinfo_parse_stat(const char *text, size_t len, em_schedinfo_stat_t *out);
/* "<run ns> <wait ns> <slices>\n": the wait (field 2) in *wait_ns, the times the thread got a
 * CPU (field 3) in *slices. */
int em_schedinfo_parse_schedstat(const char *text, size_t len, uint64_t *wait_ns, uint64_t *slices);
/* status: *have gets EM_SCHEDINFO_CTXSW when both ctxt_switches lines were there. */
int em_schedinfo_parse_status(const char *text, size_t len, unsigned *have, uint64_t *voluntary,
                              uint64_t *involuntary);
int em_schedinfo_parse_cgroup(const char *text, size_t len, em_schedinfo_cgroup_t *out);
int em_schedinfo_parse_cpu_stat(const char *text, size_t len, em_schedinfo_cpu_stat_t *out);
/* A PSI file's "some ... total=<us>" in ns; *have false when there is no "some" line. */
int em_schedinfo_parse_pressure_total(const char *text, size_t len, bool *have, uint64_t *some_ns);

typedef struct em_schedinfo em_schedinfo_t;

/*
 * The reader of one target: a process (pid > 0; cgroup NULL) or a cgroup directory (pid 0,
 * cgroup a path such as "/sys/fs/cgroup/app"). proc_root is "/proc" or a fixture, cgroup_root
 * "/sys/fs/cgroup" or a fixture; both copied. Returns 0 and *out, -EINVAL, -ENOMEM, or -ESRCH
 * when the process's stat does not open. Missing cgroup files or schedstat are not errors.
 */
int em_schedinfo_new(em_schedinfo_t **out, const char *proc_root, const char *cgroup_root,
                     pid_t pid, const char *cgroup);

/* Closes every fd and frees. NULL is a no-op. */
void em_schedinfo_free(em_schedinfo_t *s);

/* Every tick: proc.cpu and mem.major_faults into *r (EM_SCHEDINFO_CPU | EM_SCHEDINFO_MAJFLT);
 * -ESRCH when the process is gone, -ENOENT for a cgroup target (nothing to read). */
int em_schedinfo_read_stat(em_schedinfo_t *s, em_schedinfo_reading_t *r);

/* The slower pass: runq delay, context switches and throttling into *r (have bits of what was
 * there). Returns 0, or -ESRCH when the process is gone. */
int em_schedinfo_read_threads(em_schedinfo_t *s, em_schedinfo_reading_t *r);

/* Why figures a pass cannot give are absent (static strings; NULL when present), for the birth:
 * runq (schedstat or cpu.pressure), ctxsw, throttling. Valid after the first pass. */
const char *em_schedinfo_absent_runq(const em_schedinfo_t *s);
const char *em_schedinfo_absent_ctxsw(const em_schedinfo_t *s);
const char *em_schedinfo_absent_throttle(const em_schedinfo_t *s);

#endif /* EDGEMON_AGENT_SCHEDINFO_H */
