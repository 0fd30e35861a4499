/*
 * target.h - finds the process the agent watches: by pid, by pid file, by process name (the
 * comm) or by a substring of its command line, under a procfs root. A cgroup target needs no
 * lookup: the PMU counts the cgroup itself.
 *
 * Lookups by name or command line scan <root>/[0-9]*; several matches pick the process that
 * started first (the parent of a worker pool; inherited counters then cover the workers),
 * except a wrapper: a match that is an ancestor of another match and runs another program
 * (`su app -c "python3 loop.py"`, `sudo -u`, `sh -c`: its command line holds the same words)
 * is passed over for the process it started, the one that writes the spans.
 * The agent's own pid never matches. The scan runs only while the agent has no target, never
 * in a tick that already has one.
 *
 * Owns nothing between calls; no allocation. Single-threaded.
 */
#ifndef EDGEMON_AGENT_TARGET_H
#define EDGEMON_AGENT_TARGET_H

#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

#define EM_TARGET_MAX_VALUE 256 /* A pid file, name, cmdline text or cgroup path, NUL included. */

typedef enum {
  EM_TARGET_NONE = 0, /* Not configured: an error for the agent, fine for --check of parts. */
  EM_TARGET_PID,      /* [target] pid */
  EM_TARGET_PIDFILE,  /* [target] pid_file */
  EM_TARGET_COMM,     /* [target] process_name: exact match on /proc/PID/comm */
  EM_TARGET_CMDLINE,  /* [target] cmdline: substring of the NUL-joined-by-space cmdline */
  EM_TARGET_CGROUP,   /* [target] cgroup: a cgroup v2 directory */
} em_target_kind_t;

/* What [target] names: exactly one kind. */
typedef struct {
  em_target_kind_t kind;
  int32_t pid;                     /* EM_TARGET_PID */
  char value[EM_TARGET_MAX_VALUE]; /* The others' pid file, name, cmdline text or cgroup. */
} em_target_spec_t;

/*
 * Looks for the target `t` names under proc_root. Returns the pid (> 0) when found, 0 when no
 * process matches now (the target is not running: not an error), or a negative errno when the
 * lookup itself cannot work (-EINVAL: the config has no process target; -ENOENT: proc_root
 * missing). `why` (may be NULL) receives a short reason when 0 is returned.
 */
pid_t em_target_find(const em_target_spec_t *t, const char *proc_root, char *why, size_t why_cap);

/*
 * Start time of `pid` in clock ticks since boot (field 22 of <root>/<pid>/stat), so a pid
 * reused by another process can be told apart. Returns 0 and *out, or a negative errno.
 */
int em_target_start_time(const char *proc_root, pid_t pid, unsigned long long *out);

/* The process that a matched target turned out to wrap: a child of pid that matches the name
 * or command line too and runs another program (su's shell, the shell's python3), started
 * after the lookup found pid. 0 when there is none, or for a target not found by a scan. Reads
 * <root>/<pid>/task/<pid>/children and the matching children's files; cheap enough for a 1 s
 * cadence. */
pid_t em_target_successor(const em_target_spec_t *t, const char *proc_root, pid_t pid);

/* A short description of the target for logs, e.g. "process name 'python3'". */
void em_target_describe(const em_target_spec_t *t, char *buf, size_t cap);

#endif /* EDGEMON_AGENT_TARGET_H */
