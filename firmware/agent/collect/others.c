/*
 * others.c - see others.h. The tables hold (pid, start time, CPU ticks) sorted by pid, so the
 * previous scan's entry of a pid is a binary search; /proc lists pids in ascending order, so
 * the sort after a scan is nearly free. The stat line is parsed by schedinfo.h's parser.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_ISSET */

#include "others.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "schedinfo.h"

#define ROOT_BYTES 256

typedef struct {
  pid_t pid;
  uint64_t starttime; /* Clock ticks since boot: a reused pid differs. */
  uint64_t ticks;     /* utime + stime */
  bool on_cpus;       /* It last ran on one of the target's CPUs. */
  char comm[16];
} entry_t;

struct em_others {
  char root[ROOT_BYTES];
  long clk_tck;
  bool have_prev;      /* A previous scan exists. */
  bool prev_truncated; /* It stopped at EM_OTHERS_MAX_SCAN: a pid missing there may be old. */
  uint64_t prev_ns;
  size_t n_prev;
  entry_t *prev, *cur; /* EM_OTHERS_MAX_SCAN each. */
  char buf[1024];
};

int em_others_new(em_others_t **out, const char *proc_root) {
  if (!out || !proc_root || strlen(proc_root) >= ROOT_BYTES) {
    return -EINVAL;
  }
  em_others_t *o = calloc(1, sizeof(*o));
  entry_t *tables = calloc(2 * EM_OTHERS_MAX_SCAN, sizeof(*tables));
  if (!o || !tables) {
    free(o);
    free(tables);
    return -ENOMEM;
  }
  snprintf(o->root, sizeof(o->root), "%s", proc_root);
  o->clk_tck = sysconf(_SC_CLK_TCK);
  o->prev = tables;
  o->cur = tables + EM_OTHERS_MAX_SCAN;
  *out = o;
  return 0;
}

void em_others_free(em_others_t *o) {
  if (!o) {
    return;
  }
  free(o->prev < o->cur ? o->prev : o->cur);
  free(o);
}

static int by_pid(const void *a, const void *b) {
  pid_t x = ((const entry_t *)a)->pid, y = ((const entry_t *)b)->pid;
  return (x > y) - (x < y);
}

/* The previous scan's entry of pid, or NULL. */
static const entry_t *find_prev(const em_others_t *o, pid_t pid) {
  size_t lo = 0, hi = o->n_prev;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (o->prev[mid].pid == pid) {
      return &o->prev[mid];
    }
    if (o->prev[mid].pid < pid) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return NULL;
}

/* One process's stat into *e; false when it is gone or unreadable. Every process is kept (a
 * process that moves onto the target's CPUs needs its baseline); on_cpus says where it ran. */
static bool read_process(em_others_t *o, int proc_fd, const char *name, const cpu_set_t *cpus,
                         entry_t *e) {
  char rel[32];
  snprintf(rel, sizeof(rel), "%s/stat", name);
  int fd = openat(proc_fd, rel, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return false;
  }
  ssize_t n = pread(fd, o->buf, sizeof(o->buf), 0);
  close(fd);
  em_schedinfo_stat_t st;
  if (n <= 0 || (size_t)n >= sizeof(o->buf) ||
      em_schedinfo_parse_stat(o->buf, (size_t)n, &st) != 0) {
    return false;
  }
  e->on_cpus =
      !cpus || st.processor < 0 || st.processor >= CPU_SETSIZE || CPU_ISSET(st.processor, cpus);
  e->pid = (pid_t)atoi(name);
  e->starttime = st.starttime;
  e->ticks = st.utime_ticks + st.stime_ticks;
  memcpy(e->comm, st.comm, sizeof(e->comm));
  return true;
}

/* Inserts candidate (pid, ns) into the top list kept in out (largest first). */
static void keep_top(em_others_list_t *out, const entry_t *e, uint64_t ns) {
  double share = (double)ns / (double)out->window_ns;
  size_t i = out->n < EM_OTHERS_MAX ? out->n : EM_OTHERS_MAX;
  if (i == EM_OTHERS_MAX && out->procs[EM_OTHERS_MAX - 1].share >= share) {
    return;
  }
  if (i == EM_OTHERS_MAX) {
    i--;
  } else {
    out->n++;
  }
  while (i > 0 && out->procs[i - 1].share < share) {
    out->procs[i] = out->procs[i - 1];
    i--;
  }
  out->procs[i] = (em_others_proc_t){.pid = e->pid, .share = share};
  memcpy(out->procs[i].comm, e->comm, sizeof(e->comm));
}

int em_others_scan(em_others_t *o, pid_t target, pid_t self, uint64_t now_ns,
                   em_others_list_t *out) {
  if (!o || !out) {
    return -EINVAL;
  }
  memset(out, 0, sizeof(*out));
  out->at_ns = now_ns;
  DIR *d = opendir(o->root);
  if (!d) {
    return -ENOENT;
  }
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  bool affinity = target > 0 && sched_getaffinity(target, sizeof(cpus), &cpus) == 0;
  size_t n = 0;
  bool truncated = false;
  for (struct dirent *e = readdir(d); e; e = readdir(d)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9' || strlen(e->d_name) > 10) {
      continue;
    }
    if (n == EM_OTHERS_MAX_SCAN) {
      truncated = true;
      break;
    }
    entry_t *c = &o->cur[n];
    if (read_process(o, dirfd(d), e->d_name, affinity ? &cpus : NULL, c) && c->pid != target &&
        c->pid != self) {
      n++;
    }
  }
  closedir(d);
  qsort(o->cur, n, sizeof(*o->cur), by_pid);
  uint64_t ns_per_tick = o->clk_tck > 0 ? UINT64_C(1000000000) / (uint64_t)o->clk_tck : 0;
  if (o->have_prev && now_ns > o->prev_ns) {
    out->window_ns = now_ns - o->prev_ns;
    for (size_t i = 0; i < n; i++) {
      const entry_t *c = &o->cur[i];
      if (!c->on_cpus) {
        continue;
      }
      const entry_t *p = find_prev(o, c->pid);
      uint64_t ticks;
      if (p && p->starttime == c->starttime) {
        ticks = c->ticks >= p->ticks ? c->ticks - p->ticks : 0;
      } else if (!p && !o->prev_truncated) {
        ticks = c->ticks; /* Started since the last scan: all its CPU time is in the window. */
      } else {
        continue; /* A reused pid or one the last scan did not reach: no baseline. */
      }
      if (ticks) {
        keep_top(out, c, ticks * ns_per_tick);
      }
    }
  }
  entry_t *swap = o->prev;
  o->prev = o->cur;
  o->cur = swap;
  o->n_prev = n;
  o->have_prev = true;
  o->prev_truncated = truncated;
  o->prev_ns = now_ns;
  return 0;
}
