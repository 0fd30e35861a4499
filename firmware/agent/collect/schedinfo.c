/*
 * schedinfo.c - see schedinfo.h. The parsers share procfs.c's discipline (bounded scanning, no
 * strto*, a complete text ends with its newline). The reader keeps <pid>/stat and the task/
 * directory open for the target's life, and the cgroup's cpu.stat (and cpu.pressure for a cgroup
 * target) once found; each read is a pread at offset 0 into the reader's buffer. The thread table
 * is two arrays of EM_SCHEDINFO_MAX_THREADS, the last pass and the one being built, swapped at the
 * end of a pass; a thread of the last pass missing from this one has its counts carried.
 */
#define _POSIX_C_SOURCE 200809L /* pread, openat, fdopendir, O_CLOEXEC under -std=c11. */

#include "schedinfo.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "procfs.h"

#define NS_PER_US      UINT64_C(1000)
#define BUF_BYTES      4096 /* status is ~1.4 KiB, stat ~300 bytes, cpu.stat a few lines. */
#define ROOT_BYTES     256
#define STAT_FIELD_MAX 39 /* The last field of stat we read (processor). */

/* ---- Bounded scanning ---- */

/* The index of the newline ending the line at start, or len when there is none. */
static size_t line_end(const char *text, size_t len, size_t start) {
  const char *nl = memchr(text + start, '\n', len - start);
  return nl ? (size_t)(nl - text) : len;
}

static bool starts_with(const char *text, size_t pos, size_t eol, const char *lit) {
  size_t n = strlen(lit);
  return eol - pos >= n && memcmp(text + pos, lit, n) == 0;
}

static bool complete(const char *text, size_t len) {
  return text != NULL && len > 0 && text[len - 1] == '\n';
}

/* "<key><spaces or tabs><number>" ending exactly at eol; the value in *v. */
static int key_value(const char *text, size_t pos, size_t eol, uint64_t *v) {
  size_t i = pos;
  while (i < eol && (text[i] == ' ' || text[i] == '\t')) {
    i++;
  }
  if (i == pos || em_procfs_scan_u64(text, eol, &i, v) != 0 || i != eol) {
    return -EINVAL;
  }
  return 0;
}

/* ---- Parsers ---- */

/* A parser's first step: zeroes the record (when there is one) and says whether text is a
 * complete file to parse. */
static bool begin(void *out, size_t bytes, const char *text, size_t len) {
  if (!out) {
    return false;
  }
  memset(out, 0, bytes);
  return complete(text, len);
}

int em_schedinfo_parse_stat(const char *text, size_t len, em_schedinfo_stat_t *out) {
  if (!out) {
    return -EINVAL;
  }
  memset(out, 0, sizeof(*out));
  out->processor = -1;
  if (!complete(text, len)) {
    return -EINVAL;
  }
  /* "pid (comm) S ...": comm may hold spaces and parentheses, so its end is the last ')'. */
  const char *open = memchr(text, '(', len);
  size_t close = len;
  while (close > 0 && text[close - 1] != ')') {
    close--;
  }
  if (!open || close == 0 || text + close - 1 <= open) {
    return -EINVAL;
  }
  size_t comm_len = (size_t)(text + close - 1 - (open + 1));
  if (comm_len >= sizeof(out->comm)) {
    comm_len = sizeof(out->comm) - 1;
  }
  memcpy(out->comm, open + 1, comm_len);
  size_t i = close;
  if (len - i < 3 || text[i] != ' ' || text[i + 2] != ' ') {
    return -EINVAL;
  }
  out->state = text[i + 1];
  i += 3;
  unsigned field = 4;
  for (; field <= STAT_FIELD_MAX && i < len && text[i] != '\n'; field++) {
    uint64_t v = 0;
    bool wanted = field == 12 || field == 14 || field == 15 || field == 22 || field == 39;
    if (wanted) {
      if (em_procfs_scan_u64(text, len, &i, &v) != 0) {
        goto bad;
      }
    } else {
      size_t start = i;
      while (i < len && text[i] != ' ' && text[i] != '\n') {
        i++;
      }
      if (i == start) {
        goto bad;
      }
    }
    if (field == 12) {
      out->majflt = v;
    } else if (field == 14) {
      out->utime_ticks = v;
    } else if (field == 15) {
      out->stime_ticks = v;
    } else if (field == 22) {
      out->starttime = v;
    } else if (field == 39) {
      out->processor = v < 4096u ? (int)v : -1;
    }
    if (i < len && text[i] == ' ') {
      i++;
    } else if (i >= len || text[i] != '\n') {
      goto bad;
    }
  }
  if (field > 22) {
    return 0;
  }
  /* Too short to be a stat line of any kernel since 2.6, or not in the format: nothing. */
bad:
  memset(out, 0, sizeof(*out));
  out->processor = -1;
  return -EINVAL;
}

int em_schedinfo_parse_schedstat(const char *text, size_t len, uint64_t *wait_ns,
                                 uint64_t *slices) {
  if (!wait_ns || !slices) {
    return -EINVAL;
  }
  *wait_ns = 0;
  *slices = 0;
  if (!complete(text, len)) {
    return -EINVAL;
  }
  uint64_t run = 0, wait = 0, count = 0;
  size_t i = 0;
  if (em_procfs_scan_u64(text, len, &i, &run) || i >= len || text[i++] != ' ' ||
      em_procfs_scan_u64(text, len, &i, &wait) || i >= len || text[i++] != ' ' ||
      em_procfs_scan_u64(text, len, &i, &count) || i != len - 1) {
    return -EINVAL;
  }
  *wait_ns = wait;
  *slices = count;
  return 0;
}

int em_schedinfo_parse_status(const char *text, size_t len, unsigned *have, uint64_t *voluntary,
                              uint64_t *involuntary) {
  if (!have || !voluntary || !involuntary) {
    return -EINVAL;
  }
  *have = 0;
  *voluntary = *involuntary = 0;
  if (!complete(text, len)) {
    return -EINVAL;
  }
  static const char *const keys[2] = {"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"};
  uint64_t v[2] = {0, 0};
  bool seen[2] = {false, false};
  for (size_t pos = 0; pos < len;) {
    size_t eol = line_end(text, len, pos);
    for (int k = 0; k < 2; k++) {
      if (!starts_with(text, pos, eol, keys[k])) {
        continue;
      }
      if (seen[k] || key_value(text, pos + strlen(keys[k]), eol, &v[k]) != 0) {
        return -EINVAL;
      }
      seen[k] = true;
    }
    pos = eol + 1;
  }
  if (seen[0] && seen[1]) {
    *have = EM_SCHEDINFO_CTXSW;
    *voluntary = v[0];
    *involuntary = v[1];
  }
  return 0;
}

/* Whether the comma-separated list text[a..b) has the item "cpu". */
static bool has_cpu_controller(const char *text, size_t a, size_t b) {
  while (a < b) {
    const char *comma = memchr(text + a, ',', b - a);
    size_t end = comma ? (size_t)(comma - text) : b;
    if (end - a == 3 && memcmp(text + a, "cpu", 3) == 0) {
      return true;
    }
    a = end + 1;
  }
  return false;
}

int em_schedinfo_parse_cgroup(const char *text, size_t len, em_schedinfo_cgroup_t *out) {
  if (!begin(out, sizeof(*out), text, len)) {
    return -EINVAL;
  }
  for (size_t pos = 0; pos < len;) {
    size_t eol = line_end(text, len, pos);
    const char *c1 = memchr(text + pos, ':', eol - pos);
    const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(text + eol - (c1 + 1))) : NULL;
    if (!c1 || !c2 || c1 == text + pos) {
      memset(out, 0, sizeof(*out));
      return -EINVAL;
    }
    size_t ctl_a = (size_t)(c1 + 1 - text), ctl_b = (size_t)(c2 - text);
    size_t path_a = ctl_b + 1, path_len = eol - path_a;
    bool v2 = c1 - (text + pos) == 1 && text[pos] == '0' && ctl_a == ctl_b;
    bool v1 = !v2 && has_cpu_controller(text, ctl_a, ctl_b);
    char *path = v2 ? out->v2_path : v1 ? out->v1_path : NULL;
    if (path) {
      if (path_len == 0 || path_len >= EM_SCHEDINFO_PATH_BYTES || text[path_a] != '/' ||
          (v1 && ctl_b - ctl_a >= sizeof(out->v1_controllers))) {
        memset(out, 0, sizeof(*out));
        return -EINVAL;
      }
      memcpy(path, text + path_a, path_len);
      path[path_len] = '\0';
      if (v1) {
        memcpy(out->v1_controllers, text + ctl_a, ctl_b - ctl_a);
        out->v1_controllers[ctl_b - ctl_a] = '\0';
      }
    }
    pos = eol + 1;
  }
  return 0;
}

int em_schedinfo_parse_cpu_stat(const char *text, size_t len, em_schedinfo_cpu_stat_t *out) {
  if (!begin(out, sizeof(*out), text, len)) {
    return -EINVAL;
  }
  for (size_t pos = 0; pos < len;) {
    size_t eol = line_end(text, len, pos);
    uint64_t v = 0;
    unsigned bit = 0;
    uint64_t scale = 1;
    size_t key = 0;
    if (starts_with(text, pos, eol, "nr_throttled ")) {
      bit = EM_SCHEDINFO_NR_THROTTLED;
      key = strlen("nr_throttled");
    } else if (starts_with(text, pos, eol, "throttled_usec ")) {
      bit = EM_SCHEDINFO_THROTTLED;
      key = strlen("throttled_usec");
      scale = NS_PER_US;
    } else if (starts_with(text, pos, eol, "throttled_time ")) {
      bit = EM_SCHEDINFO_THROTTLED;
      key = strlen("throttled_time");
    }
    if (bit) {
      if ((out->have & bit) || key_value(text, pos + key, eol, &v) != 0 ||
          (v && scale > UINT64_MAX / v)) {
        memset(out, 0, sizeof(*out));
        return -EINVAL;
      }
      out->have |= bit;
      if (bit == EM_SCHEDINFO_NR_THROTTLED) {
        out->nr_throttled = v;
      } else {
        out->throttled_ns = v * scale;
      }
    }
    pos = eol + 1;
  }
  return 0;
}

int em_schedinfo_parse_pressure_total(const char *text, size_t len, bool *have, uint64_t *some_ns) {
  if (!have || !some_ns) {
    return -EINVAL;
  }
  *have = false;
  *some_ns = 0;
  if (!complete(text, len)) {
    return -EINVAL;
  }
  for (size_t pos = 0; pos < len;) {
    size_t eol = line_end(text, len, pos);
    if (starts_with(text, pos, eol, "some ")) {
      size_t i = pos;
      while (i < eol && !starts_with(text, i, eol, " total=")) {
        i++;
      }
      uint64_t us = 0;
      i += strlen(" total=");
      if (i > eol || em_procfs_scan_u64(text, eol, &i, &us) != 0 || i != eol ||
          us > UINT64_MAX / NS_PER_US) {
        return -EINVAL;
      }
      *have = true;
      *some_ns = us * NS_PER_US;
      return 0;
    }
    pos = eol + 1;
  }
  return 0;
}

/* ---- Reader ---- */

typedef struct {
  pid_t tid;
  bool seen;        /* Found again in the pass being built. */
  int schedstat_fd; /* Kept open between passes (the first EM_SCHEDINFO_MAX_OPEN_THREADS). */
  int status_fd;    /* Likewise, opened the first time the thread ran between two passes. */
  uint64_t slices;  /* schedstat field 3: times it got a CPU; unchanged, it did not run. */
  uint64_t wait_ns, voluntary, involuntary;
} thread_t;

struct em_schedinfo {
  pid_t pid;       /* 0: a cgroup target. */
  int stat_fd;     /* <proc>/<pid>/stat; -1 for a cgroup target. */
  DIR *task_dir;   /* <proc>/<pid>/task; NULL for a cgroup target. */
  int cpu_stat_fd; /* The cgroup's cpu.stat; -1 when not found. */
  int pressure_fd; /* The cgroup target's cpu.pressure; -1 when not found or a process. */
  long clk_tck;
  const char *why_runq, *why_ctxsw, *why_throttle;
  uint64_t carried_wait_ns, carried_voluntary, carried_involuntary; /* Threads gone. */
  size_t n_last;
  thread_t *last; /* The last pass, EM_SCHEDINFO_MAX_THREADS. */
  thread_t *next; /* The pass being built. */
  char buf[BUF_BYTES];
};

static void close_thread(thread_t *t) {
  if (t->schedstat_fd >= 0) {
    close(t->schedstat_fd);
  }
  if (t->status_fd >= 0) {
    close(t->status_fd);
  }
  t->schedstat_fd = t->status_fd = -1;
}

static ssize_t read_fd(int fd, char *buf, size_t cap) {
  ssize_t n = pread(fd, buf, cap, 0);
  return n >= (ssize_t)cap ? -1 : n; /* A file that fills the buffer is not trusted. */
}

/* Opens the concatenation a b c d (read-only, close-on-exec); -1 when it does not fit or open. */
static int open_join(char *path, size_t cap, const char *a, const char *b, const char *c,
                     const char *d) {
  int n = snprintf(path, cap, "%s%s%s%s", a, b, c, d);
  if (n < 0 || (size_t)n >= cap) {
    return -1;
  }
  return open(path, O_RDONLY | O_CLOEXEC);
}

/* The cpu.stat of the process's cgroup: its v1 cpu controller, else its v2 cgroup. */
static void open_process_cgroup(em_schedinfo_t *s, const char *proc_root, const char *cgroup_root) {
  char path[ROOT_BYTES + 2 * EM_SCHEDINFO_PATH_BYTES];
  char pid_s[24];
  snprintf(pid_s, sizeof(pid_s), "/%d", (int)s->pid);
  int fd = open_join(path, sizeof(path), proc_root, pid_s, "/cgroup", "");
  ssize_t n = fd >= 0 ? read_fd(fd, s->buf, sizeof(s->buf)) : -1;
  if (fd >= 0) {
    close(fd);
  }
  em_schedinfo_cgroup_t cg;
  if (n <= 0 || em_schedinfo_parse_cgroup(s->buf, (size_t)n, &cg) != 0) {
    s->why_throttle = "the target's /proc/PID/cgroup did not read";
    return;
  }
  if (cg.v1_path[0]) {
    const char *v1_path = strcmp(cg.v1_path, "/") ? cg.v1_path : "";
    char controllers[sizeof(cg.v1_controllers) + 1];
    snprintf(controllers, sizeof(controllers), "/%s", cg.v1_controllers);
    s->cpu_stat_fd = open_join(path, sizeof(path), cgroup_root, controllers, v1_path, "/cpu.stat");
    if (s->cpu_stat_fd < 0) { /* Mounted as "cpu" without the "cpu,cpuacct" name. */
      s->cpu_stat_fd = open_join(path, sizeof(path), cgroup_root, "/cpu", v1_path, "/cpu.stat");
    }
  }
  if (s->cpu_stat_fd < 0 && cg.v2_path[0]) {
    const char *v2_path = strcmp(cg.v2_path, "/") ? cg.v2_path : "";
    s->cpu_stat_fd = open_join(path, sizeof(path), cgroup_root, v2_path, "/cpu.stat", "");
    if (s->cpu_stat_fd < 0) { /* Hybrid: the v2 tree is mounted at unified/. */
      s->cpu_stat_fd = open_join(path, sizeof(path), cgroup_root, "/unified", v2_path, "/cpu.stat");
    }
  }
  if (s->cpu_stat_fd < 0) {
    s->why_throttle = "no cpu.stat for the target's cgroup (no cpu controller mounted)";
  }
}

int em_schedinfo_new(em_schedinfo_t **out, const char *proc_root, const char *cgroup_root,
                     pid_t pid, const char *cgroup) {
  if (!out || !proc_root || !cgroup_root || (pid > 0) == (cgroup != NULL) || pid < 0 ||
      strlen(proc_root) >= ROOT_BYTES || strlen(cgroup_root) >= ROOT_BYTES) {
    return -EINVAL;
  }
  em_schedinfo_t *s = calloc(1, sizeof(*s));
  thread_t *tables = calloc(2 * EM_SCHEDINFO_MAX_THREADS, sizeof(*tables));
  if (!s || !tables) {
    free(s);
    free(tables);
    return -ENOMEM;
  }
  s->last = tables;
  s->next = tables + EM_SCHEDINFO_MAX_THREADS;
  s->pid = pid;
  s->stat_fd = s->cpu_stat_fd = s->pressure_fd = -1;
  s->clk_tck = sysconf(_SC_CLK_TCK);
  char path[ROOT_BYTES + EM_SCHEDINFO_PATH_BYTES + 32];
  if (cgroup) {
    s->why_ctxsw = "cgroup target: per-thread figures are not read";
    s->cpu_stat_fd = open_join(path, sizeof(path), cgroup, "/cpu.stat", "", "");
    s->pressure_fd = open_join(path, sizeof(path), cgroup, "/cpu.pressure", "", "");
    s->why_runq = s->pressure_fd < 0 ? "no cpu.pressure in the target cgroup: kernel without PSI "
                                       "(4.20+) or PSI off at boot"
                                     : NULL;
    s->why_throttle = s->cpu_stat_fd < 0 ? "no cpu.stat in the target cgroup" : NULL;
    *out = s;
    return 0;
  }
  char pid_s[24];
  snprintf(pid_s, sizeof(pid_s), "/%d", (int)pid);
  s->stat_fd = open_join(path, sizeof(path), proc_root, pid_s, "/stat", "");
  int task_fd = open_join(path, sizeof(path), proc_root, pid_s, "/task", "");
  s->task_dir = task_fd >= 0 ? fdopendir(task_fd) : NULL;
  if (s->stat_fd < 0 || !s->task_dir) {
    if (task_fd >= 0 && !s->task_dir) {
      close(task_fd);
    }
    em_schedinfo_free(s);
    return -ESRCH;
  }
  open_process_cgroup(s, proc_root, cgroup_root);
  *out = s;
  return 0;
}

void em_schedinfo_free(em_schedinfo_t *s) {
  if (!s) {
    return;
  }
  int fds[3] = {s->stat_fd, s->cpu_stat_fd, s->pressure_fd};
  for (int i = 0; i < 3; i++) {
    if (fds[i] >= 0) {
      close(fds[i]);
    }
  }
  if (s->task_dir) {
    closedir(s->task_dir);
  }
  for (size_t i = 0; i < s->n_last; i++) {
    close_thread(&s->last[i]);
  }
  free(s->last < s->next ? s->last : s->next);
  free(s);
}

int em_schedinfo_read_stat(em_schedinfo_t *s, em_schedinfo_reading_t *r) {
  if (s->stat_fd < 0) {
    return -ENOENT;
  }
  ssize_t n = read_fd(s->stat_fd, s->buf, sizeof(s->buf));
  em_schedinfo_stat_t st;
  if (n <= 0 || em_schedinfo_parse_stat(s->buf, (size_t)n, &st) != 0 || st.state == 'Z' ||
      st.state == 'X') {
    return -ESRCH;
  }
  uint64_t ns_per_tick = s->clk_tck > 0 ? UINT64_C(1000000000) / (uint64_t)s->clk_tck : 0;
  r->cpu_ns = (st.utime_ticks + st.stime_ticks) * ns_per_tick;
  r->major_faults = st.majflt;
  r->have |= EM_SCHEDINFO_CPU | EM_SCHEDINFO_MAJFLT;
  return 0;
}

/* Reads fd (opening rel under task/ when it is -1) into the buffer; -1 when the thread is gone
 * or the file does not open (*enoent says whether it does not exist). */
static ssize_t read_kept(em_schedinfo_t *s, int *fd, const char *tid, const char *file,
                         bool *enoent) {
  if (*fd < 0) {
    char rel[48];
    snprintf(rel, sizeof(rel), "%s/%s", tid, file);
    *fd = openat(dirfd(s->task_dir), rel, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) {
      *enoent = errno == ENOENT;
      return -1;
    }
  }
  return read_fd(*fd, s->buf, sizeof(s->buf));
}

/*
 * One thread: its schedstat, and its status only when it ran since the last pass (its slice
 * count moved, or no schedstat to tell): a thread that did not run did not switch either, and
 * status costs ~15x schedstat. `old` is its entry of the last pass (NULL: new), whose fds move
 * to *t. False when it is gone.
 */
static bool read_thread(em_schedinfo_t *s, const char *tid, thread_t *old, thread_t *t,
                        bool *schedstat) {
  bool enoent = false;
  if (old) {
    t->schedstat_fd = old->schedstat_fd;
    t->status_fd = old->status_fd;
    old->schedstat_fd = old->status_fd = -1;
  }
  ssize_t n = read_kept(s, &t->schedstat_fd, tid, "schedstat", &enoent);
  *schedstat =
      n > 0 && em_schedinfo_parse_schedstat(s->buf, (size_t)n, &t->wait_ns, &t->slices) == 0;
  if (n < 0 && !enoent && t->schedstat_fd >= 0) {
    return false; /* Kept open, now ESRCH: the thread exited. */
  }
  if (old && *schedstat && t->slices == old->slices) {
    t->voluntary = old->voluntary;
    t->involuntary = old->involuntary;
    return true;
  }
  n = read_kept(s, &t->status_fd, tid, "status", &enoent);
  unsigned have = 0;
  return n > 0 &&
         em_schedinfo_parse_status(s->buf, (size_t)n, &have, &t->voluntary, &t->involuntary) == 0 &&
         have == EM_SCHEDINFO_CTXSW;
}

/* The last pass's entry for tid (searched from *hint, the directory's order being stable). */
static thread_t *find_last(em_schedinfo_t *s, pid_t tid, size_t *hint) {
  for (size_t k = 0; k < s->n_last; k++) {
    size_t i = (*hint + k) % s->n_last;
    if (s->last[i].tid == tid && !s->last[i].seen) {
      *hint = i + 1;
      return &s->last[i];
    }
  }
  return NULL;
}

/* The per-thread pass: sums into *r with the threads gone carried. */
static int read_task_dir(em_schedinfo_t *s, em_schedinfo_reading_t *r) {
  size_t n = 0, hint = 0;
  bool any_schedstat = false;
  rewinddir(s->task_dir);
  for (struct dirent *e = readdir(s->task_dir); e && n < EM_SCHEDINFO_MAX_THREADS;
       e = readdir(s->task_dir)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9' || strlen(e->d_name) > 10) {
      continue;
    }
    thread_t t = {.tid = (pid_t)atoi(e->d_name), .schedstat_fd = -1, .status_fd = -1};
    thread_t *old = find_last(s, t.tid, &hint);
    bool schedstat = false;
    bool alive = read_thread(s, e->d_name, old, &t, &schedstat);
    if (old) {
      old->seen = true;
    }
    if (!alive || n >= EM_SCHEDINFO_MAX_OPEN_THREADS) {
      close_thread(&t); /* Gone, or past the threads whose files stay open. */
    }
    if (!alive) {
      if (old) {
        old->seen = false; /* Exited: its counts are carried below. */
      }
      continue;
    }
    any_schedstat |= schedstat;
    s->next[n++] = t;
  }
  if (n == 0) {
    return -ESRCH;
  }
  for (size_t i = 0; i < s->n_last; i++) {
    thread_t *old = &s->last[i];
    if (!old->seen) {
      close_thread(old);
      s->carried_wait_ns += old->wait_ns;
      s->carried_voluntary += old->voluntary;
      s->carried_involuntary += old->involuntary;
    }
  }
  r->runq_delay_ns = s->carried_wait_ns;
  r->ctxsw_voluntary = s->carried_voluntary;
  r->ctxsw_involuntary = s->carried_involuntary;
  for (size_t i = 0; i < n; i++) {
    s->next[i].seen = false;
    r->runq_delay_ns += s->next[i].wait_ns;
    r->ctxsw_voluntary += s->next[i].voluntary;
    r->ctxsw_involuntary += s->next[i].involuntary;
  }
  thread_t *swap = s->last;
  s->last = s->next;
  s->next = swap;
  s->n_last = n;
  r->have |= EM_SCHEDINFO_CTXSW | (any_schedstat ? EM_SCHEDINFO_RUNQ : 0u);
  s->why_runq = any_schedstat ? NULL
                              : "no /proc/PID/task/TID/schedstat: kernel without "
                                "CONFIG_SCHED_INFO (CONFIG_SCHEDSTATS or CONFIG_TASK_DELAY_ACCT)";
  return 0;
}

int em_schedinfo_read_threads(em_schedinfo_t *s, em_schedinfo_reading_t *r) {
  if (s->task_dir) {
    int rc = read_task_dir(s, r);
    if (rc) {
      return rc;
    }
  }
  ssize_t n;
  if (s->pressure_fd >= 0 && (n = read_fd(s->pressure_fd, s->buf, sizeof(s->buf))) > 0) {
    bool have = false;
    if (em_schedinfo_parse_pressure_total(s->buf, (size_t)n, &have, &r->runq_delay_ns) == 0 &&
        have) {
      r->have |= EM_SCHEDINFO_RUNQ;
    }
  }
  if (s->cpu_stat_fd >= 0 && (n = read_fd(s->cpu_stat_fd, s->buf, sizeof(s->buf))) > 0) {
    em_schedinfo_cpu_stat_t cs;
    if (em_schedinfo_parse_cpu_stat(s->buf, (size_t)n, &cs) == 0) {
      r->have |= cs.have;
      r->throttled_ns = cs.throttled_ns;
      r->nr_throttled = cs.nr_throttled;
      s->why_throttle = cs.have & EM_SCHEDINFO_THROTTLED
                            ? NULL
                            : "cpu.stat without throttled_usec: the cpu controller is not "
                              "enabled for the target's cgroup";
    }
  }
  return 0;
}

const char *em_schedinfo_absent_runq(const em_schedinfo_t *s) {
  return s->why_runq;
}

const char *em_schedinfo_absent_ctxsw(const em_schedinfo_t *s) {
  return s->why_ctxsw;
}

const char *em_schedinfo_absent_throttle(const em_schedinfo_t *s) {
  return s->why_throttle;
}
