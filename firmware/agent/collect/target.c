/*
 * target.c - see target.h. Reads small procfs files (and the pid file) with common/'s bounded
 * small-file reader (edgemon/common/file.h) into stack buffers; nothing is kept open and
 * nothing allocated.
 */
#define _POSIX_C_SOURCE 200809L

#include "target.h"

#include "edgemon/common/file.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Reads <root>/<pid>/<name> (or the file `name` when pid is 0) into buf, NUL-terminated, with
 * common/'s small-file reader (a regular file only); returns its length or -errno. */
static ssize_t read_small(const char *root, pid_t pid, const char *name, char *buf, size_t cap) {
  char path[PATH_MAX];
  int n = pid > 0 ? snprintf(path, sizeof(path), "%s/%ld/%s", root, (long)pid, name)
                  : snprintf(path, sizeof(path), "%s", name);
  if (n < 0 || (size_t)n >= sizeof(path)) {
    return -ENAMETOOLONG;
  }
  return em_file_read_small(path, buf, cap, NULL);
}

/* Parses a decimal pid in 1..INT_MAX from text (leading/trailing blanks allowed). */
static pid_t parse_pid(const char *text) {
  while (*text == ' ' || *text == '\t') {
    text++;
  }
  if (!isdigit((unsigned char)*text)) {
    return -EINVAL;
  }
  errno = 0;
  char *end = NULL;
  long v = strtol(text, &end, 10);
  while (*end == ' ' || *end == '\t' || *end == '\n') {
    end++;
  }
  if (errno || *end != '\0' || v <= 0 || v > INT_MAX) {
    return -EINVAL;
  }
  return (pid_t)v;
}

int em_target_start_time(const char *proc_root, pid_t pid, unsigned long long *out) {
  char buf[1024];
  ssize_t n = read_small(proc_root, pid, "stat", buf, sizeof(buf));
  if (n < 0) {
    return (int)n;
  }
  /* The comm field may hold spaces and ')': fields resume after the last ')'. */
  char *p = strrchr(buf, ')');
  if (!p) {
    return -EINVAL;
  }
  p++;
  /* After ") " come fields 3.. ; start time is field 22, the 20th from here. */
  for (int field = 3; field < 22; field++) {
    p = strchr(p + 1, ' ');
    if (!p) {
      return -EINVAL;
    }
  }
  errno = 0;
  char *end = NULL;
  unsigned long long v = strtoull(p + 1, &end, 10);
  if (errno || end == p + 1) {
    return -EINVAL;
  }
  *out = v;
  return 0;
}

/* True when the process `pid` under root matches the name or cmdline target. */
static bool matches(const em_target_spec_t *t, const char *proc_root, pid_t pid) {
  char buf[4096];
  if (t->kind == EM_TARGET_COMM) {
    ssize_t n = read_small(proc_root, pid, "comm", buf, sizeof(buf));
    if (n <= 0) {
      return false;
    }
    if (buf[n - 1] == '\n') {
      buf[n - 1] = '\0';
    }
    return strcmp(buf, t->value) == 0;
  }
  ssize_t n = read_small(proc_root, pid, "cmdline", buf, sizeof(buf));
  if (n <= 0) {
    return false; /* Kernel threads and zombies have an empty cmdline. */
  }
  for (ssize_t i = 0; i < n - 1; i++) {
    if (buf[i] == '\0') {
      buf[i] = ' '; /* Arguments joined by one space, as ps shows them. */
    }
  }
  return strstr(buf, t->value) != NULL;
}

/* The parent of pid (field 4 of its stat), or 0. */
static pid_t parent_of(const char *proc_root, pid_t pid) {
  char buf[1024];
  if (read_small(proc_root, pid, "stat", buf, sizeof(buf)) < 0) {
    return 0;
  }
  const char *p = strrchr(buf, ')'); /* The comm may hold spaces and ')'. */
  char state = 0;
  long ppid = 0;
  if (!p || sscanf(p + 1, " %c %ld", &state, &ppid) != 2 || ppid <= 0 || ppid > INT_MAX) {
    return 0;
  }
  return (pid_t)ppid;
}

/* The program pid runs, into buf: the target of its exe link, else (no permission, a
 * fixture tree) its comm. Empty when neither can be read. */
static void program_of(const char *proc_root, pid_t pid, char *buf, size_t cap) {
  char path[PATH_MAX];
  buf[0] = '\0';
  if (snprintf(path, sizeof(path), "%s/%ld/exe", proc_root, (long)pid) < (int)sizeof(path)) {
    ssize_t n = readlink(path, buf, cap - 1);
    if (n > 0) {
      buf[n] = '\0';
      return;
    }
  }
  ssize_t n = read_small(proc_root, pid, "comm", buf, cap);
  if (n <= 0) {
    buf[0] = '\0';
  } else if (buf[n - 1] == '\n') {
    buf[n - 1] = '\0';
  }
}

#define MAX_MATCHES   64 /* Matches weighed at once; more are rare and the rest are skipped. */
#define MAX_ANCESTORS 32 /* How far up a match's parents are looked at for a wrapper. */

typedef struct {
  pid_t pid;
  unsigned long long start;
  bool wrapper;
} match_t;

/* Marks every match that is an ancestor of another match and runs another program than it:
 * a wrapper (su, sudo -u, sh -c, a launcher script) whose command line holds the same words
 * as the process it started. An ancestor running the same program (a worker pool's parent,
 * whose workers it forked) stays a candidate. */
static void mark_wrappers(const char *proc_root, match_t *m, size_t n) {
  char prog[PATH_MAX], up_prog[PATH_MAX];
  for (size_t i = 0; i < n; i++) {
    prog[0] = '\0';
    pid_t up = m[i].pid;
    for (int depth = 0; depth < MAX_ANCESTORS; depth++) {
      up = parent_of(proc_root, up);
      if (up <= 1) {
        break;
      }
      for (size_t j = 0; j < n; j++) {
        if (m[j].pid != up || m[j].wrapper) {
          continue;
        }
        if (!prog[0]) {
          program_of(proc_root, m[i].pid, prog, sizeof(prog));
        }
        program_of(proc_root, up, up_prog, sizeof(up_prog));
        m[j].wrapper = strcmp(prog, up_prog) != 0;
      }
    }
  }
}

/* Scans the pids under root for the oldest match that is not a wrapper of another. */
static pid_t scan(const em_target_spec_t *t, const char *proc_root, char *why, size_t why_cap) {
  DIR *dir = opendir(proc_root);
  if (!dir) {
    return -errno;
  }
  match_t m[MAX_MATCHES];
  size_t n = 0;
  pid_t self = getpid();
  for (struct dirent *e = readdir(dir); e != NULL && n < MAX_MATCHES; e = readdir(dir)) {
    pid_t pid = parse_pid(e->d_name);
    if (pid <= 0 || pid == self || !matches(t, proc_root, pid)) {
      continue;
    }
    if (em_target_start_time(proc_root, pid, &m[n].start) != 0) {
      continue; /* Exited while we looked. */
    }
    m[n].pid = pid;
    m[n].wrapper = false;
    n++;
  }
  closedir(dir);
  mark_wrappers(proc_root, m, n);
  pid_t best = 0;
  unsigned long long best_start = ULLONG_MAX;
  for (size_t i = 0; i < n; i++) {
    if (!m[i].wrapper &&
        (m[i].start < best_start || (m[i].start == best_start && m[i].pid < best))) {
      best = m[i].pid;
      best_start = m[i].start;
    }
  }
  if (best == 0 && why) {
    snprintf(why, why_cap, "no process matches");
  }
  return best;
}

/* True when <root>/<pid> exists. */
static bool pid_exists(const char *root, pid_t pid) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/%ld", root, (long)pid);
  return access(path, F_OK) == 0;
}

pid_t em_target_find(const em_target_spec_t *t, const char *proc_root, char *why, size_t why_cap) {
  char buf[64];
  pid_t pid;
  if (why && why_cap) {
    why[0] = '\0';
  }
  switch (t->kind) {
  case EM_TARGET_PID:
    if (!pid_exists(proc_root, t->pid)) {
      if (why) {
        snprintf(why, why_cap, "pid %ld does not exist", (long)t->pid);
      }
      return 0;
    }
    return t->pid;
  case EM_TARGET_PIDFILE: {
    ssize_t n = read_small(proc_root, 0, t->value, buf, sizeof(buf));
    if (n < 0) {
      if (why) { /* -EINVAL: a FIFO, a directory...: refused unread, never blocking */
        snprintf(why, why_cap, "pid file: %s",
                 n == -EINVAL ? "not a regular file (refused)" : strerror((int)-n));
      }
      return 0;
    }
    pid = parse_pid(buf);
    if (pid <= 0) {
      if (why) {
        snprintf(why, why_cap, "pid file holds no pid");
      }
      return 0;
    }
    if (!pid_exists(proc_root, pid)) {
      if (why) {
        snprintf(why, why_cap, "pid %ld from the pid file is not running", (long)pid);
      }
      return 0;
    }
    return pid;
  }
  case EM_TARGET_COMM:
  case EM_TARGET_CMDLINE:
    return scan(t, proc_root, why, why_cap);
  case EM_TARGET_CGROUP:
  case EM_TARGET_NONE:
    break;
  }
  return -EINVAL;
}

pid_t em_target_successor(const em_target_spec_t *t, const char *proc_root, pid_t pid) {
  if ((t->kind != EM_TARGET_COMM && t->kind != EM_TARGET_CMDLINE) || pid <= 0) {
    return 0;
  }
  char name[64], list[512];
  snprintf(name, sizeof(name), "task/%ld/children", (long)pid);
  ssize_t n = read_small(proc_root, pid, name, list, sizeof(list));
  if (n <= 0) {
    return 0; /* No child, or a kernel without CONFIG_PROC_CHILDREN. */
  }
  char prog[PATH_MAX], child_prog[PATH_MAX];
  prog[0] = '\0';
  for (char *tok = strtok(list, " \n"); tok != NULL; tok = strtok(NULL, " \n")) {
    pid_t child = parse_pid(tok);
    if (child <= 0 || !matches(t, proc_root, child)) {
      continue;
    }
    if (!prog[0]) {
      program_of(proc_root, pid, prog, sizeof(prog));
    }
    program_of(proc_root, child, child_prog, sizeof(child_prog));
    if (strcmp(prog, child_prog) != 0) {
      return child;
    }
  }
  return 0;
}

void em_target_describe(const em_target_spec_t *t, char *buf, size_t cap) {
  switch (t->kind) {
  case EM_TARGET_PID:
    snprintf(buf, cap, "pid %ld", (long)t->pid);
    return;
  case EM_TARGET_PIDFILE:
    snprintf(buf, cap, "pid file %s", t->value);
    return;
  case EM_TARGET_COMM:
    snprintf(buf, cap, "process name '%s'", t->value);
    return;
  case EM_TARGET_CMDLINE:
    snprintf(buf, cap, "command line containing '%s'", t->value);
    return;
  case EM_TARGET_CGROUP:
    snprintf(buf, cap, "cgroup %s", t->value);
    return;
  case EM_TARGET_NONE:
    break;
  }
  snprintf(buf, cap, "no target");
}
