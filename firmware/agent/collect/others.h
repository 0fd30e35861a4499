/*
 * others.h - who else ran: the few processes that used the most CPU on the target's CPUs over
 * the last seconds, the evidence of a cpu_contention verdict. One scan reads <proc>/<pid>/stat
 * of at most EM_OTHERS_MAX_SCAN processes (utime + stime, the command name, the CPU it last ran
 * on) and diffs each against the previous scan (a bounded table, keyed by pid and start time so
 * a reused pid is a new process); the result is the EM_OTHERS_MAX processes with the largest
 * CPU time in between, each with its share of one CPU over the time between the two scans. The
 * target and the agent are never listed; a process whose last CPU is outside the target's
 * affinity is not either (it did not compete for the target's CPUs when it last ran).
 *
 * The scan opens one file per process (a few ms for a few hundred processes), so it never runs
 * on the tick: sampling.c runs it on libuv's worker on a slow cadence and at a trigger, and
 * hands the loop a copy of the list. The first scan has nothing to diff against: an empty list.
 *
 * Owns: one allocation (two tables of EM_OTHERS_MAX_SCAN entries, swapped per scan); no fds
 * between calls. One thread at a time (the worker's while a scan runs).
 */
#ifndef EDGEMON_AGENT_OTHERS_H
#define EDGEMON_AGENT_OTHERS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define EM_OTHERS_MAX 8 /* Processes listed. */
/* Processes read per scan: a Jetson under JetPack runs 300-600; at ~10 us per stat read a
 * scan of this many costs ~20 ms of the worker, and two tables of it are 96 KiB. */
#define EM_OTHERS_MAX_SCAN 2048

typedef struct {
  pid_t pid;
  char comm[16]; /* The command name, NUL-terminated. */
  double share;  /* CPU time over the window / the window: 0..1 of one CPU (more: threads). */
} em_others_proc_t;

typedef struct {
  uint64_t window_ns; /* Between the two scans; 0: no previous scan, n is 0. */
  uint64_t at_ns;     /* When the later scan ran (the caller's clock). */
  size_t n;           /* 0..EM_OTHERS_MAX, the largest share first. */
  em_others_proc_t procs[EM_OTHERS_MAX];
} em_others_list_t;

typedef struct em_others em_others_t;

/* A scanner of proc_root ("/proc" or a fixture; copied). 0 and *out, -EINVAL or -ENOMEM. */
int em_others_new(em_others_t **out, const char *proc_root);

/* Frees. NULL is a no-op. */
void em_others_free(em_others_t *o);

/*
 * Scans now (now_ns: the caller's monotonic clock) and fills *out with who ran since the last
 * scan, leaving out `target` (its processes' CPUs define "the target's CPUs"; 0 for a cgroup
 * target: every CPU) and `self`. Returns 0, or -ENOENT when proc_root does not open.
 */
int em_others_scan(em_others_t *o, pid_t target, pid_t self, uint64_t now_ns,
                   em_others_list_t *out);

#endif /* EDGEMON_AGENT_OTHERS_H */
