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

/* Scans the pids under root for the oldest match. */
static pid_t scan(const em_target_spec_t *t, const char *proc_root, char *why, size_t why_cap) {
  DIR *dir = opendir(proc_root);
  if (!dir) {
    return -errno;
  }
  pid_t self = getpid(), best = 0;
  unsigned long long best_start = ULLONG_MAX;
  for (struct dirent *e = readdir(dir); e != NULL; e = readdir(dir)) {
    pid_t pid = parse_pid(e->d_name);
    if (pid <= 0 || pid == self || !matches(t, proc_root, pid)) {
      continue;
    }
    unsigned long long start = 0;
    if (em_target_start_time(proc_root, pid, &start) != 0) {
      continue; /* Exited while we looked. */
    }
    if (start < best_start || (start == best_start && pid < best)) {
      best = pid;
      best_start = start;
    }
  }
  closedir(dir);
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
