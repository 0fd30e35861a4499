/*
 * test_pmu.c - unit tests of firmware/agent/collect/pmu.c.
 *
 * Covered: em_pmu_scale and em_pmu_ratio (tables, overflow, clock skew); em_pmu_resolve of
 * every generic name; em_pmu_new argument checks; replays of recorded-form kernel answers of
 * machines with a hardware PMU (tests/fixtures/pmu/, format in its README.md) through a fake
 * kernel: multiplexed groups, a group that has not run, a refused leader, paranoid 3,
 * user-only counting, the pre-4.13 per-event fallback, cgroup targets on several CPUs, short,
 * garbled and failing reads, every truncation of a group read; process targets with several
 * threads (per-thread scaling then sums, a thread gone between listing and opening, a thread
 * whose read says it is gone, a failing thread listing, a failing open on another thread,
 * more threads than EM_PMU_MAX_THREADS); events on several PMUs (a TX2's A57 and Denver
 * parts: one counter per part per thread in the group of its PMU type, a thread's parts
 * scaled together, a cgroup target opening each part on its PMU's CPUs only and summing the
 * scaled values, one part or every part refused, config1/config2 in perf_event_attr, bad
 * parts refused); the CPU set helpers; the Linux thread listing of this process; and the
 * real perf_event_open of this machine against a child process: software events count,
 * hardware events are absent with the kernel's reason, a thread that existed before the open
 * is counted, inherit counts a thread created after the open, a thread that exits keeps its
 * counts in the sum, a dead target's counts freeze, a cgroup target counts its member.
 *
 * The real-perf tests skip (with the reason) where perf_event_open is not usable at all.
 */
#define _GNU_SOURCE /* fork, pipe2, strtok_r, kill, nanosleep under -std=c11. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/perf_event.h>

#include "log.h"
#include "log_capture.h"
#include "pmu.h"
#include "unit_fx.h"

#ifndef EM_FIXTURES_DIR
#error "EM_FIXTURES_DIR (absolute path of tests/fixtures) must be defined"
#endif
#define PMU_FIXTURES EM_FIXTURES_DIR "/pmu"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define MS           (UINT64_C(1000000)) /* ns */

static const uint64_t GROUP_FORMAT =
    PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;

/* ---- Helpers ---- */

static void assert_contains(const char *hay, const char *needle) {
  if (strstr(hay, needle) == NULL) {
    fail_msg("\"%s\" does not contain \"%s\"", hay, needle);
  }
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Resolves names[0..n) into ev, asserting each is known. */
static void resolve_all(const char *const *names, size_t n, em_pmu_event_t *ev) {
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(em_pmu_resolve(names[i], &ev[i]), 0);
  }
}

static size_t count_open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  assert_non_null(d);
  size_t n = 0;
  while (readdir(d) != NULL) {
    n++;
  }
  closedir(d);
  return n;
}

/* ---- em_pmu_scale ---- */

static void scale_table(void **state) {
  (void)state;
  static const struct {
    const char *what;
    uint64_t raw, enabled, running;
    bool ok;
    uint64_t want;
  } rows[] = {
      {"no multiplexing: as counted", 1000, 500, 500, true, 1000},
      {"half running doubles", 1000, 1000, 500, true, 2000},
      {"rounds down", 7, 3, 2, true, 10},
      {"zero count stays zero", 0, 1000, 10, true, 0},
      {"running 0 is absent", 1000, 1000, 0, false, 0},
      {"never enabled, never ran is absent", 0, 0, 0, false, 0},
      {"enabled < running (clock skew): never scaled down", 1000, 900, 1000, true, 1000},
      {"enabled 0 < running: as counted", 1000, 0, 1000, true, 1000},
      {"huge raw * 3 / 2 needs 128 bits", UINT64_MAX / 3, 3, 2, true,
       UINT64_C(9223372036854775807)},
      {"huge raw and times", (UINT64_C(1) << 62) + 12345, (UINT64_C(1) << 40) + 7,
       (UINT64_C(1) << 39) + 3, true, UINT64_C(9223372036863189105)},
      {"huge times, small count", 1000, UINT64_MAX, UINT64_MAX / 2, true, 2000},
      {"max * max / (max - 1) fits exactly", UINT64_MAX - 1, UINT64_MAX, UINT64_MAX - 1, true,
       UINT64_MAX},
      {"result past 2^64 saturates", UINT64_C(1) << 63, 2, 1, true, UINT64_MAX},
      {"max count, max ratio saturates", UINT64_MAX, UINT64_MAX, 1, true, UINT64_MAX},
  };
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    uint64_t got = 12345;
    bool ok = em_pmu_scale(rows[i].raw, rows[i].enabled, rows[i].running, &got);
    if (ok != rows[i].ok || got != rows[i].want) {
      fail_msg("%s: got %d %" PRIu64 ", want %d %" PRIu64, rows[i].what, ok, got, rows[i].ok,
               rows[i].want);
    }
  }
  assert_false(em_pmu_scale(1, 1, 1, NULL));
}

/* ---- em_pmu_ratio ---- */

static void ratio_table(void **state) {
  (void)state;
  static const struct {
    const char *what;
    bool num_present;
    uint64_t num;
    bool den_present;
    uint64_t den;
    bool ok;
    double want;
  } rows[] = {
      {"IPC", true, 300, true, 200, true, 1.5},
      {"zero numerator is a ratio", true, 0, true, 200, true, 0.0},
      {"numerator absent", false, 300, true, 200, false, 0.0},
      {"denominator absent", true, 300, false, 200, false, 0.0},
      {"both absent", false, 0, false, 0, false, 0.0},
      {"zero denominator", true, 300, true, 0, false, 0.0},
      {"zero over zero", true, 0, true, 0, false, 0.0},
      {"huge values", true, UINT64_MAX, true, UINT64_MAX, true, 1.0},
  };
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    double got = -1.0;
    bool ok =
        em_pmu_ratio(rows[i].num_present, rows[i].num, rows[i].den_present, rows[i].den, &got);
    if (ok != rows[i].ok || got != rows[i].want) {
      fail_msg("%s: got %d %g, want %d %g", rows[i].what, ok, got, rows[i].ok, rows[i].want);
    }
  }
  assert_false(em_pmu_ratio(true, 1, true, 1, NULL));
}

/* ---- em_pmu_resolve ---- */

static void resolve_every_generic_name(void **state) {
  (void)state;
  static const struct {
    const char *name;
    uint32_t type;
    uint64_t config;
  } rows[] = {
      {"cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
      {"cpu-cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
      {"instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS},
      {"cache-references", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES},
      {"cache-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES},
      {"branch-instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_INSTRUCTIONS},
      {"branches", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_INSTRUCTIONS},
      {"branch-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES},
      {"stalled-cycles-frontend", PERF_TYPE_HARDWARE, PERF_COUNT_HW_STALLED_CYCLES_FRONTEND},
      {"idle-cycles-frontend", PERF_TYPE_HARDWARE, PERF_COUNT_HW_STALLED_CYCLES_FRONTEND},
      {"stalled-cycles-backend", PERF_TYPE_HARDWARE, PERF_COUNT_HW_STALLED_CYCLES_BACKEND},
      {"idle-cycles-backend", PERF_TYPE_HARDWARE, PERF_COUNT_HW_STALLED_CYCLES_BACKEND},
      {"ref-cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_REF_CPU_CYCLES},
      {"bus-cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BUS_CYCLES},
      {"task-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK},
      {"cpu-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK},
      {"context-switches", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES},
      {"cs", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES},
      {"cpu-migrations", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS},
      {"migrations", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS},
      {"page-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS},
      {"faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS},
      {"minor-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MIN},
      {"major-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MAJ},
  };
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    em_pmu_event_t ev;
    memset(&ev, 0xa5, sizeof(ev));
    if (em_pmu_resolve(rows[i].name, &ev) != 0) {
      fail_msg("%s: not resolved", rows[i].name);
    }
    assert_string_equal(ev.name, rows[i].name);
    if (ev.type != rows[i].type || ev.config != rows[i].config) {
      fail_msg("%s: type %u config %" PRIu64, rows[i].name, ev.type, ev.config);
    }
  }
}

static void resolve_unknown_name_is_enoent(void **state) {
  (void)state;
  static const char *const unknown[] = {"",        "cycle",     "CYCLES",
                                        "cycles ", "l1d-loads", "task-clock:u"};
  em_pmu_event_t ev;
  for (size_t i = 0; i < ARRAY_LEN(unknown); i++) {
    if (em_pmu_resolve(unknown[i], &ev) != -ENOENT) {
      fail_msg("\"%s\" resolved", unknown[i]);
    }
  }
  assert_int_equal(em_pmu_resolve(NULL, &ev), -EINVAL);
  assert_int_equal(em_pmu_resolve("cycles", NULL), -EINVAL);
}

/* ---- The fixture-driven fake kernel ---- */

#define FX_NAME_BYTES  48
#define FX_MAX_READS   96
#define FX_MAX_CPUS    64
#define FX_MAX_THREADS 512

typedef enum { FX_VALUES, FX_ERRNO, FX_EOF, FX_BYTES } fx_kind_t;

typedef struct {
  char leader[FX_NAME_BYTES];
  int cpu;   /* -1: any. */
  pid_t tid; /* 0: any. */
  fx_kind_t kind;
  int err;
  uint64_t enabled, running;
  size_t n_vals;
  char names[EM_PMU_MAX_EVENTS][FX_NAME_BYTES];
  uint64_t vals[EM_PMU_MAX_EVENTS];
  uint8_t bytes[256];
  size_t n_bytes;
} fx_read_t;

typedef struct {
  char name[FX_NAME_BYTES];
  pid_t tid;      /* 0: opens on any thread. */
  int answers[8]; /* 0 = ok, else a positive errno. */
  size_t n_answers;
} fx_open_t;

typedef struct {
  int paranoid;
  pid_t pid;
  pid_t threads[FX_MAX_THREADS]; /* What list_threads answers; none: the pid alone. */
  size_t n_threads;
  int threads_err; /* list_threads fails with it (positive errno); 0: it works. */
  bool cgroup;
  int cpus;
  bool offline[FX_MAX_CPUS];
  bool rule_group_einval;
  bool rule_kernel_eacces;
  int default_answer;
  em_pmu_event_t request[EM_PMU_MAX_EVENTS];
  size_t n_request;
  /* Name of part k of request i in `open` and `read` lines; "": part 0 is the request's
     name. Inline fixtures of events with parts set them. */
  char part_names[EM_PMU_MAX_EVENTS][EM_PMU_MAX_PARTS][FX_NAME_BYTES];
  fx_open_t opens[EM_PMU_MAX_EVENTS];
  size_t n_opens;
  fx_read_t reads[FX_MAX_READS];
  size_t n_reads;
} fixture_t;

static const struct {
  const char *name;
  int err;
} errnos[] = {{"ENOENT", ENOENT}, {"EOPNOTSUPP", EOPNOTSUPP}, {"EACCES", EACCES},
              {"EPERM", EPERM},   {"EINVAL", EINVAL},         {"ESRCH", ESRCH},
              {"EBUSY", EBUSY},   {"ENODEV", ENODEV},         {"EBADF", EBADF},
              {"EIO", EIO},       {"EMFILE", EMFILE}};

static int errno_by_name(const char *name, unsigned line) {
  for (size_t i = 0; i < ARRAY_LEN(errnos); i++) {
    if (strcmp(name, errnos[i].name) == 0) {
      return errnos[i].err;
    }
  }
  fail_msg("line %u: unknown errno %s", line, name);
  return 0;
}

static uint64_t parse_u64(const char *text, unsigned line) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') {
    fail_msg("line %u: bad number %s", line, text);
  }
  return (uint64_t)v;
}

static void parse_read(fixture_t *fx, char *save, unsigned line) {
  assert_true(fx->n_reads < FX_MAX_READS);
  fx_read_t *r = &fx->reads[fx->n_reads++];
  memset(r, 0, sizeof(*r));
  r->cpu = -1;
  const char *leader = strtok_r(NULL, " \t", &save);
  assert_non_null(leader);
  snprintf(r->leader, sizeof(r->leader), "%s", leader);
  for (char *tok = strtok_r(NULL, " \t", &save); tok != NULL; tok = strtok_r(NULL, " \t", &save)) {
    char *eq = strchr(tok, '=');
    if (strcmp(tok, "eof") == 0) {
      r->kind = FX_EOF;
      continue;
    }
    if (eq == NULL) {
      fail_msg("line %u: bad read token %s", line, tok);
    }
    *eq = '\0';
    const char *val = eq + 1;
    if (strcmp(tok, "cpu") == 0) {
      r->cpu = (int)parse_u64(val, line);
    } else if (strcmp(tok, "tid") == 0) {
      r->tid = (pid_t)parse_u64(val, line);
    } else if (strcmp(tok, "enabled") == 0) {
      r->enabled = parse_u64(val, line);
    } else if (strcmp(tok, "running") == 0) {
      r->running = parse_u64(val, line);
    } else if (strcmp(tok, "errno") == 0) {
      r->kind = FX_ERRNO;
      r->err = errno_by_name(val, line);
    } else if (strcmp(tok, "bytes") == 0) {
      r->kind = FX_BYTES;
      size_t len = strlen(val);
      assert_true(len % 2 == 0 && len / 2 <= sizeof(r->bytes));
      for (size_t i = 0; i < len / 2; i++) {
        unsigned byte = 0;
        assert_int_equal(sscanf(val + 2 * i, "%2x", &byte), 1);
        r->bytes[i] = (uint8_t)byte;
      }
      r->n_bytes = len / 2;
    } else {
      assert_true(r->n_vals < EM_PMU_MAX_EVENTS);
      snprintf(r->names[r->n_vals], FX_NAME_BYTES, "%s", tok);
      r->vals[r->n_vals++] = parse_u64(val, line);
    }
  }
}

/* Loads tests/fixtures/pmu/<file>. The caller frees it. */
static fixture_t *fx_load(const char *file) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", PMU_FIXTURES, file);
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    fail_msg("cannot open %s: %s", path, strerror(errno));
  }
  fixture_t *fx = calloc(1, sizeof(*fx));
  assert_non_null(fx);
  char text[4096];
  unsigned line = 0;
  while (fgets(text, sizeof(text), f) != NULL) {
    line++;
    char *hash = strchr(text, '#');
    if (hash != NULL) {
      *hash = '\0';
    }
    text[strcspn(text, "\r\n")] = '\0';
    char *save = NULL;
    const char *word = strtok_r(text, " \t", &save);
    if (word == NULL || strcmp(word, "machine") == 0 || strcmp(word, "kernel") == 0) {
      continue;
    }
    if (strcmp(word, "paranoid") == 0) {
      fx->paranoid = (int)parse_u64(strtok_r(NULL, " \t", &save), line);
    } else if (strcmp(word, "target") == 0) {
      const char *kind = strtok_r(NULL, " \t", &save);
      if (strcmp(kind, "pid") == 0) {
        fx->pid = (pid_t)parse_u64(strtok_r(NULL, " \t", &save), line);
      } else {
        fx->cgroup = true;
        (void)strtok_r(NULL, " \t", &save); /* The board's path: the test uses a local dir. */
        (void)strtok_r(NULL, " \t", &save); /* "cpus" */
        fx->cpus = (int)parse_u64(strtok_r(NULL, " \t", &save), line);
      }
    } else if (strcmp(word, "threads") == 0) {
      for (char *t = strtok_r(NULL, " \t", &save); t != NULL; t = strtok_r(NULL, " \t", &save)) {
        assert_true(fx->n_threads < FX_MAX_THREADS);
        fx->threads[fx->n_threads++] = (pid_t)parse_u64(t, line);
      }
    } else if (strcmp(word, "threads-error") == 0) {
      fx->threads_err = errno_by_name(strtok_r(NULL, " \t", &save), line);
    } else if (strcmp(word, "offline") == 0) {
      for (char *t = strtok_r(NULL, " \t", &save); t != NULL; t = strtok_r(NULL, " \t", &save)) {
        uint64_t cpu = parse_u64(t, line);
        assert_true(cpu < FX_MAX_CPUS);
        fx->offline[cpu] = true;
      }
    } else if (strcmp(word, "rule") == 0) {
      const char *rule = strtok_r(NULL, " \t", &save);
      if (strcmp(rule, "inherit-group-einval") == 0) {
        fx->rule_group_einval = true;
      } else if (strcmp(rule, "kernel-counting-eacces") == 0) {
        fx->rule_kernel_eacces = true;
      } else {
        fail_msg("line %u: unknown rule %s", line, rule);
      }
    } else if (strcmp(word, "default-open") == 0) {
      const char *a = strtok_r(NULL, " \t", &save);
      fx->default_answer = strcmp(a, "ok") == 0 ? 0 : errno_by_name(a, line);
    } else if (strcmp(word, "request") == 0) {
      for (char *t = strtok_r(NULL, " \t", &save); t != NULL; t = strtok_r(NULL, " \t", &save)) {
        assert_true(fx->n_request < EM_PMU_MAX_EVENTS);
        assert_int_equal(em_pmu_resolve(t, &fx->request[fx->n_request++]), 0);
      }
    } else if (strcmp(word, "open") == 0) {
      assert_true(fx->n_opens < EM_PMU_MAX_EVENTS);
      fx_open_t *o = &fx->opens[fx->n_opens++];
      snprintf(o->name, sizeof(o->name), "%s", strtok_r(NULL, " \t", &save));
      for (char *t = strtok_r(NULL, " \t", &save); t != NULL; t = strtok_r(NULL, " \t", &save)) {
        if (strncmp(t, "tid=", 4) == 0) {
          o->tid = (pid_t)parse_u64(t + 4, line);
          continue;
        }
        assert_true(o->n_answers < ARRAY_LEN(o->answers));
        o->answers[o->n_answers++] = strcmp(t, "ok") == 0 ? 0 : errno_by_name(t, line);
      }
    } else if (strcmp(word, "read") == 0) {
      parse_read(fx, save, line);
    } else {
      fail_msg("%s line %u: unknown directive %s", file, line, word);
    }
  }
  fclose(f);
  return fx;
}

#define FAKE_FD0       1000
#define FAKE_MAX_FDS   1024
#define FAKE_MAX_CALLS 1024

typedef struct {
  bool used, open;
  size_t req;  /* Index into fixture request[]. */
  size_t part; /* Part of that request. */
  uint32_t type;
  int cpu;
  pid_t tid; /* Thread of a process target; 0 for a cgroup. */
  bool grouped;
  int leader; /* Its leader's fd (itself for a leader). */
  size_t reads;
  int members[EM_PMU_MAX_EVENTS]; /* For a leader: member fds, itself first. */
  size_t n_members;
} fake_fd_t;

typedef struct {
  struct perf_event_attr attr;
  pid_t pid;
  int cpu, group_fd;
  unsigned long flags;
  bool pid_is_dir; /* For PERF_FLAG_PID_CGROUP: pid was an open directory fd. */
  size_t req, part;
  int result;
} fake_call_t;

typedef struct {
  const fixture_t *fx;
  fake_fd_t fds[FAKE_MAX_FDS];
  fake_call_t calls[FAKE_MAX_CALLS];
  size_t n_calls;
  size_t n_lists;           /* list_threads calls. */
  size_t calls_before_list; /* Opens made before the (first) list_threads call. */
  size_t answers_used[EM_PMU_MAX_EVENTS];
  size_t truncate_to; /* Reads return at most this many bytes; SIZE_MAX: off. */
  size_t n_reads;
  int errors; /* Misuse seen by the fake: bad fd, double close, missing fixture line. */
} fake_t;

/* The name of part `part` of request `req` in the fixture's lines. */
static const char *fx_part_name(const fixture_t *fx, size_t req, size_t part) {
  const char *name = fx->part_names[req][part];
  return name[0] != '\0' ? name : fx->request[req].name;
}

/* The request and part (*part) whose type, config, config1 and config2 are attr's. */
static size_t fake_request_of(const fake_t *f, const struct perf_event_attr *attr, size_t *part) {
  for (size_t i = 0; i < f->fx->n_request; i++) {
    const em_pmu_event_t *e = &f->fx->request[i];
    for (size_t k = 0; k <= e->n_parts; k++) {
      uint32_t type = k == 0 ? e->type : e->parts[k - 1].type;
      uint64_t c0 = k == 0 ? e->config : e->parts[k - 1].config;
      uint64_t c1 = k == 0 ? e->config1 : e->parts[k - 1].config1;
      uint64_t c2 = k == 0 ? e->config2 : e->parts[k - 1].config2;
      if (type == attr->type && c0 == attr->config && c1 == attr->config1 && c2 == attr->config2) {
        *part = k;
        return i;
      }
    }
  }
  return SIZE_MAX;
}

/* The CPUs of part `part` of request `req` (empty: every CPU). */
static const em_pmu_cpus_t *fx_part_cpus(const fixture_t *fx, size_t req, size_t part) {
  const em_pmu_event_t *e = &fx->request[req];
  return part == 0 ? &e->cpus : &e->parts[part - 1].cpus;
}

/* Groups span one PMU: the generic hardware, cache and raw types are the core PMU's. */
static uint32_t fake_pmu_of(uint32_t type) {
  return type == PERF_TYPE_HW_CACHE || type == PERF_TYPE_RAW ? PERF_TYPE_HARDWARE : type;
}

static fake_fd_t *fake_slot(fake_t *f, int fd) {
  if (fd < FAKE_FD0 || fd >= FAKE_FD0 + FAKE_MAX_FDS || !f->fds[fd - FAKE_FD0].open) {
    return NULL;
  }
  return &f->fds[fd - FAKE_FD0];
}

/* Whether the fixture's process has thread `tid` (the pid, or one list_threads names). */
static bool fake_has_thread(const fixture_t *fx, pid_t tid) {
  if (tid == fx->pid) {
    return true;
  }
  for (size_t t = 0; t < fx->n_threads; t++) {
    if (fx->threads[t] == tid) {
      return true;
    }
  }
  return false;
}

static int fake_answer(fake_t *f, size_t req, size_t part, const struct perf_event_attr *attr,
                       int cpu, pid_t tid) {
  const fixture_t *fx = f->fx;
  if (cpu >= 0 && cpu < FX_MAX_CPUS && fx->offline[cpu]) {
    return ENODEV;
  }
  if (fx->rule_kernel_eacces && !attr->exclude_kernel) {
    return EACCES;
  }
  if (fx->rule_group_einval && attr->inherit && (attr->read_format & PERF_FORMAT_GROUP)) {
    return EINVAL;
  }
  for (size_t o = 0; o < fx->n_opens; o++) {
    if (strcmp(fx->opens[o].name, fx_part_name(fx, req, part)) != 0 ||
        (fx->opens[o].tid != 0 && fx->opens[o].tid != tid)) {
      continue;
    }
    if (f->answers_used[o] < fx->opens[o].n_answers) {
      return fx->opens[o].answers[f->answers_used[o]++];
    }
  }
  return fx->default_answer;
}

static int fake_open(void *ctx, struct perf_event_attr *attr, pid_t pid, int cpu, int group_fd,
                     unsigned long flags) {
  fake_t *f = ctx;
  assert_true(f->n_calls < FAKE_MAX_CALLS);
  fake_call_t *call = &f->calls[f->n_calls++];
  memset(call, 0, sizeof(*call));
  call->attr = *attr;
  call->pid = pid;
  call->cpu = cpu;
  call->group_fd = group_fd;
  call->flags = flags;
  pid_t tid = 0;
  if (flags & PERF_FLAG_PID_CGROUP) {
    struct stat st;
    call->pid_is_dir = fstat(pid, &st) == 0 && S_ISDIR(st.st_mode);
  } else if (!fake_has_thread(f->fx, pid)) {
    f->errors++; /* An open on a thread the process never had. */
    return call->result = -ESRCH;
  } else {
    tid = pid;
  }
  call->req = fake_request_of(f, attr, &call->part);
  if (call->req == SIZE_MAX) {
    f->errors++;
    return call->result = -ENOENT;
  }
  if (cpu >= 0 && !em_pmu_cpus_has(fx_part_cpus(f->fx, call->req, call->part), (unsigned)cpu)) {
    f->errors++; /* arm_pmu refuses a CPU its PMU does not have; the module must not try. */
    return call->result = -ENOENT;
  }
  fake_fd_t *leader = NULL;
  if (group_fd != -1) {
    leader = fake_slot(f, group_fd);
    if (leader == NULL || leader->leader != group_fd || leader->cpu != cpu) {
      f->errors++;
      return call->result = -EBADF;
    }
    if (fake_pmu_of(leader->type) != fake_pmu_of(attr->type)) {
      f->errors++; /* A group of two PMUs: the kernel says EINVAL; the module must not try. */
      return call->result = -EINVAL;
    }
  }
  int answer = fake_answer(f, call->req, call->part, attr, cpu, tid);
  if (answer != 0) {
    return call->result = -answer;
  }
  size_t idx = 0;
  while (idx < FAKE_MAX_FDS && f->fds[idx].used) {
    idx++;
  }
  assert_true(idx < FAKE_MAX_FDS);
  int fd = FAKE_FD0 + (int)idx;
  fake_fd_t *s = &f->fds[idx];
  memset(s, 0, sizeof(*s));
  s->used = s->open = true;
  s->req = call->req;
  s->part = call->part;
  s->type = attr->type;
  s->cpu = cpu;
  s->tid = tid;
  s->grouped = (attr->read_format & PERF_FORMAT_GROUP) != 0;
  s->leader = leader != NULL ? group_fd : fd;
  s->members[s->n_members++] = fd;
  if (leader != NULL) {
    leader->members[leader->n_members++] = fd;
  }
  return call->result = fd;
}

/* The k-th fixture read line that mentions event `name` (for `cpu` and `tid`), or NULL. */
static const fx_read_t *fake_record(const fixture_t *fx, const char *name, int cpu, pid_t tid,
                                    size_t k) {
  for (size_t i = 0; i < fx->n_reads; i++) {
    const fx_read_t *r = &fx->reads[i];
    if ((r->cpu >= 0 && r->cpu != cpu) || (r->tid != 0 && r->tid != tid)) {
      continue;
    }
    bool mentions = strcmp(r->leader, name) == 0;
    for (size_t v = 0; v < r->n_vals && !mentions; v++) {
      mentions = strcmp(r->names[v], name) == 0;
    }
    if (mentions && k-- == 0) {
      return r;
    }
  }
  return NULL;
}

static bool fake_value(const fx_read_t *r, const char *name, uint64_t *out) {
  for (size_t v = 0; v < r->n_vals; v++) {
    if (strcmp(r->names[v], name) == 0) {
      *out = r->vals[v];
      return true;
    }
  }
  return false;
}

static ssize_t fake_read(void *ctx, int fd, void *buf, size_t len) {
  fake_t *f = ctx;
  f->n_reads++;
  fake_fd_t *s = fake_slot(f, fd);
  if (s == NULL || s->leader != fd) {
    f->errors++;
    return -EBADF;
  }
  const fixture_t *fx = f->fx;
  const fx_read_t *r =
      fake_record(fx, fx_part_name(fx, s->req, s->part), s->cpu, s->tid, s->reads++);
  if (r == NULL) {
    f->errors++; /* The fixture has no more answers for this fd. */
    return -EIO;
  }
  uint64_t words[3 + EM_PMU_MAX_EVENTS];
  size_t size = 0;
  switch (r->kind) {
  case FX_ERRNO:
    return -r->err;
  case FX_EOF:
    return 0;
  case FX_BYTES:
    size = r->n_bytes < len ? r->n_bytes : len;
    memcpy(buf, r->bytes, size);
    return (ssize_t)size;
  case FX_VALUES:
    break;
  }
  if (s->grouped) {
    words[0] = s->n_members;
    words[1] = r->enabled;
    words[2] = r->running;
    for (size_t m = 0; m < s->n_members; m++) {
      const fake_fd_t *member = &f->fds[s->members[m] - FAKE_FD0];
      const char *name = fx_part_name(fx, member->req, member->part);
      if (!fake_value(r, name, &words[3 + m])) {
        f->errors++;
        words[3 + m] = 0;
      }
    }
    size = (3 + s->n_members) * sizeof(uint64_t);
  } else {
    if (!fake_value(r, fx_part_name(fx, s->req, s->part), &words[0])) {
      f->errors++;
      words[0] = 0;
    }
    words[1] = r->enabled;
    words[2] = r->running;
    size = 3 * sizeof(uint64_t);
  }
  if (len < size) {
    return -ENOSPC; /* As the kernel answers a buffer too small for the group. */
  }
  if (f->truncate_to < size) {
    size = f->truncate_to;
  }
  memcpy(buf, words, size);
  return (ssize_t)size;
}

static int fake_close(void *ctx, int fd) {
  fake_t *f = ctx;
  fake_fd_t *s = fake_slot(f, fd);
  if (s == NULL) {
    f->errors++;
    return -EBADF;
  }
  s->open = false;
  return 0;
}

static int fake_list_threads(void *ctx, pid_t pid, pid_t *out, size_t cap) {
  fake_t *f = ctx;
  const fixture_t *fx = f->fx;
  if (f->n_lists++ == 0) {
    f->calls_before_list = f->n_calls;
  }
  if (pid != fx->pid) {
    f->errors++;
    return -ENOENT;
  }
  if (fx->threads_err != 0) {
    return -fx->threads_err;
  }
  if (fx->n_threads == 0) {
    if (cap > 0) {
      out[0] = pid;
    }
    return 1;
  }
  for (size_t t = 0; t < fx->n_threads && t < cap; t++) {
    out[t] = fx->threads[t];
  }
  return (int)fx->n_threads;
}

static fake_t *fake_new(const fixture_t *fx) {
  fake_t *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  f->fx = fx;
  f->truncate_to = SIZE_MAX;
  return f;
}

static em_pmu_sys_t fake_sys(fake_t *f) {
  em_pmu_sys_t sys = {fake_open, fake_read, fake_close, fake_list_threads, f};
  return sys;
}

/* em_pmu_new() for the fixture's request and target. */
static int fx_pmu_new(const fixture_t *fx, fake_t *f, em_pmu_t **out) {
  em_pmu_target_t target = {0};
  if (fx->cgroup) {
    target.cgroup = PMU_FIXTURES; /* Any directory: the fake kernel only checks it is one. */
    target.n_cpus = fx->cpus;
  } else {
    target.pid = fx->pid;
  }
  em_pmu_sys_t sys = fake_sys(f);
  return em_pmu_new(out, fx->request, fx->n_request, &target, &sys);
}

static size_t fake_open_fds(const fake_t *f) {
  size_t n = 0;
  for (size_t i = 0; i < FAKE_MAX_FDS; i++) {
    n += f->fds[i].open;
  }
  return n;
}

/* Frees p and checks that it closed every fd the fake kernel handed out, once; frees f. */
static void free_and_check(em_pmu_t *p, fake_t *f) {
  em_pmu_free(p);
  assert_int_equal(fake_open_fds(f), 0);
  assert_int_equal(f->errors, 0);
  free(f);
}

/* Makes the fixture's one refused open: `name` on thread `tid` (0: any) fails with `err`. */
static void fx_refuse(fixture_t *fx, const char *name, pid_t tid, int err) {
  snprintf(fx->opens[0].name, FX_NAME_BYTES, "%s", name);
  fx->opens[0].tid = tid;
  fx->opens[0].answers[0] = err;
  fx->opens[0].n_answers = 1;
  fx->n_opens = 1;
}

/* fx_pmu_new(), which must succeed: the open counters. */
static em_pmu_t *open_ok(const fixture_t *fx, fake_t *f) {
  em_pmu_t *p = NULL;
  assert_int_equal(fx_pmu_new(fx, f, &p), 0);
  assert_non_null(p);
  return p;
}

/*
 * fx_pmu_new(), which must succeed, with what it logs captured into logged[0..cap): nothing
 * when `warning` is NULL, else one line of the module's that contains `warning`.
 */
static em_pmu_t *open_warned(const fixture_t *fx, fake_t *f, char *logged, size_t cap,
                             const char *warning) {
  em_pmu_t *p = NULL;
  log_capture_t capture;
  log_capture_start(&capture);
  int rc = fx_pmu_new(fx, f, &p);
  log_capture_end(&capture, logged, cap);
  assert_int_equal(rc, 0);
  if (warning) {
    assert_int_equal(log_capture_count(logged, "pmu: "), 1);
    assert_contains(logged, warning);
  } else {
    assert_string_equal(logged, "");
  }
  return p;
}

/* fx_pmu_new() with what it logs captured into logged[0..cap). */
static int new_logged(const fixture_t *fx, fake_t *f, em_pmu_t **p, char *logged, size_t cap) {
  log_capture_t capture;
  log_capture_start(&capture);
  int rc = fx_pmu_new(fx, f, p);
  log_capture_end(&capture, logged, cap);
  return rc;
}

/* fx_pmu_new(), which must succeed, logging at info (absent events and parts are said there). */
static em_pmu_t *open_at_info(const fixture_t *fx, fake_t *f, char *logged, size_t cap) {
  em_pmu_t *p = NULL;
  em_log_set_level(EM_LOG_INFO);
  int rc = new_logged(fx, f, &p, logged, cap);
  em_log_set_level(EM_LOG_WARN);
  assert_int_equal(rc, 0);
  return p;
}

/* The successful open call of request `req` (the last one for it). */
static const fake_call_t *call_of(const fake_t *f, size_t req) {
  const fake_call_t *found = NULL;
  for (size_t i = 0; i < f->n_calls; i++) {
    if (f->calls[i].req == req && f->calls[i].result >= 0) {
      found = &f->calls[i];
    }
  }
  assert_non_null(found);
  return found;
}

/* Open calls made for thread `tid`, and how many of them gave an fd. */
static size_t calls_on(const fake_t *f, pid_t tid, size_t *opened) {
  size_t n = 0, ok = 0;
  for (size_t i = 0; i < f->n_calls; i++) {
    if (f->calls[i].pid == tid) {
      n++;
      ok += f->calls[i].result >= 0;
    }
  }
  if (opened != NULL) {
    *opened = ok;
  }
  return n;
}

static size_t calls_of(const fake_t *f, size_t req) {
  size_t n = 0;
  for (size_t i = 0; i < f->n_calls; i++) {
    n += f->calls[i].req == req;
  }
  return n;
}

static void assert_present(const em_pmu_reading_t *r, uint64_t value) {
  if (!r->present || r->value != value || r->reason[0] != '\0') {
    fail_msg("want present %" PRIu64 ", got present=%d value=%" PRIu64 " reason \"%s\"", value,
             r->present, r->value, r->reason);
  }
}

static void assert_absent(const em_pmu_reading_t *r, const char *reason_part) {
  if (r->present || r->value != 0) {
    fail_msg("want absent (%s), got present value %" PRIu64, reason_part, r->value);
  }
  assert_contains(r->reason, reason_part);
}

/* ---- Fixture replays ---- */

enum { O_CYC, O_INS, O_REF, O_MISS, O_BR, O_BRM, O_SCF, O_SCB, O_TC, O_CS, O_N };

static void orin_opens_two_hw_groups_with_documented_attributes(void **state) {
  (void)state;
  fixture_t *fx = fx_load("jetson-orin-group-read.txt");
  fake_t *f = fake_new(fx);
  em_pmu_t *p = open_ok(fx, f);
  assert_int_equal(em_pmu_present(p), O_N);

  for (size_t i = 0; i < f->n_calls; i++) {
    const fake_call_t *c = &f->calls[i];
    assert_int_equal(c->attr.size, sizeof(struct perf_event_attr));
    assert_int_equal(c->attr.disabled, 0);
    assert_int_equal(c->attr.inherit, 1);
    assert_int_equal(c->attr.exclude_hv, 1);
    assert_int_equal(c->attr.exclude_kernel, 0);
    assert_int_equal(c->attr.read_format, GROUP_FORMAT);
    assert_int_equal(c->pid, 4242);
    assert_int_equal(c->cpu, -1);
    assert_true(c->flags & PERF_FLAG_FD_CLOEXEC);
    assert_false(c->flags & PERF_FLAG_PID_CGROUP);
  }
  /* cycles leads; the next six join it; the 8th is refused as a member, then leads. */
  int cyc = call_of(f, O_CYC)->result;
  assert_int_equal(call_of(f, O_CYC)->group_fd, -1);
  for (size_t e = O_INS; e <= O_SCF; e++) {
    assert_int_equal(call_of(f, e)->group_fd, cyc);
  }
  assert_int_equal(calls_of(f, O_SCB), 2);
  assert_int_equal(call_of(f, O_SCB)->group_fd, -1);
  int tc = call_of(f, O_TC)->result;
  assert_int_equal(call_of(f, O_TC)->group_fd, -1);
  assert_int_equal(call_of(f, O_CS)->group_fd, tc);
  assert_int_equal(f->n_calls, O_N + 1);

  free_and_check(p, f);
  free(fx);
}

static void orin_multiplexed_groups_are_scaled_and_unrun_group_is_absent(void **state) {
  (void)state;
  fixture_t *fx = fx_load("jetson-orin-group-read.txt");
  fake_t *f = fake_new(fx);
  em_pmu_t *p = open_ok(fx, f);
  em_pmu_reading_t r[O_N];

  /* Tick 1: the second hardware group has not had the PMU yet. */
  assert_int_equal(em_pmu_read(p, r, O_N), 0);
  assert_int_equal(f->n_reads, 3); /* One read() per group. */
  assert_present(&r[O_CYC], 8607808);
  assert_present(&r[O_SCF], 1205093);
  assert_true(r[O_CYC].running_ratio == 1.0);
  assert_absent(&r[O_SCB], "time_running 0");
  assert_present(&r[O_TC], 3912640);
  assert_present(&r[O_CS], 3);

  /* Tick 2: both hardware groups multiplexed; values scaled by enabled/running. */
  assert_int_equal(em_pmu_read(p, r, O_N), 0);
  assert_present(&r[O_CYC], UINT64_C(332659712)); /* 169689344 * 151208960 / 77131520 */
  assert_present(&r[O_INS], UINT64_C(412498041)); /* 210414786 * 151208960 / 77131520 */
  assert_present(&r[O_SCB], UINT64_C(126410688)); /* 61928739 * 151208960 / 74077440 */
  assert_true(r[O_CYC].running_ratio > 0.50 && r[O_CYC].running_ratio < 0.52);
  assert_true(r[O_SCB].running_ratio > 0.48 && r[O_SCB].running_ratio < 0.50);
  assert_present(&r[O_TC], 151208960);
  assert_true(r[O_TC].running_ratio == 1.0);
  em_pmu_reading_t prev[O_N];
  memcpy(prev, r, sizeof(r));

  /* Tick 3: cumulative since the open. */
  assert_int_equal(em_pmu_read(p, r, O_N), 0);
  assert_present(&r[O_CYC], UINT64_C(666259966));
  assert_present(&r[O_SCB], UINT64_C(253178786));
  for (size_t i = 0; i < O_N; i++) {
    assert_true(r[i].present && r[i].value >= prev[i].value);
  }
  assert_int_equal(f->n_reads, 9);
  free_and_check(p, f);
  free(fx);
}

static void paranoid3_every_event_absent_with_eacces_reason(void **state) {
  (void)state;
  fixture_t *fx = fx_load("debian12-rpi4-paranoid3.txt");
  fake_t *f = fake_new(fx);
  em_pmu_t *p = open_ok(fx, f);
  assert_int_equal(em_pmu_present(p), 0);
  em_pmu_reading_t r[10];
  assert_int_equal(em_pmu_read(p, r, fx->n_request), 0);
  assert_int_equal(f->n_reads, 0);
  for (size_t i = 0; i < fx->n_request; i++) {
    assert_absent(&r[i], "not permitted");
    assert_contains(r[i].reason, "(EACCES)"); /* The words: refusal_names_what_is_missing. */
  }
  /* Each event is retried once user-only, except the kernel-only ones (cs, migrations). */
  for (size_t i = 0; i < fx->n_request; i++) {
    bool kernel_only = strcmp(fx->request[i].name, "context-switches") == 0 ||
                       strcmp(fx->request[i].name, "cpu-migrations") == 0;
    assert_int_equal(calls_of(f, i), kernel_only ? 1 : 2);
  }
  free_and_check(p, f);
  free(fx);
}

static void kernel_counting_refused_counts_user_only_and_drops_kernel_only_events(void **state) {
  (void)state;
  fixture_t *fx = fx_load("jetson-orin-paranoid2-user.txt");
  enum { TC, CS, MIG, PF, CYC, INS };
  fake_t *f = fake_new(fx);
  em_pmu_t *p = open_ok(fx, f);
  assert_int_equal(em_pmu_present(p), 4);
  for (size_t e = 0; e < fx->n_request; e++) {
    if (e == CS || e == MIG) {
      assert_int_equal(calls_of(f, e), 1); /* Never retried: 0 forever in user space. */
      continue;
    }
    assert_int_equal(call_of(f, e)->attr.exclude_kernel, 1);
  }
  em_pmu_reading_t r[6];
  assert_int_equal(em_pmu_read(p, r, 6), 0);
  assert_present(&r[TC], 98304000);
  assert_present(&r[PF], 212);
  assert_present(&r[CYC], 191692800);
  assert_present(&r[INS], 241612677);
  assert_absent(&r[CS], "(EACCES)");
  assert_absent(&r[MIG], "not permitted");
  free_and_check(p, f);
  free(fx);
}

/* A refusal says what is really missing: a distribution's level above 2 refuses even a holder
 * of CAP_PERFMON (Debian 12 booted: paranoid 3, CapEff 0x4000080000), CAP_PERFMON itself, or,
 * held, CAP_SYS_PTRACE or a security module; never "grant CAP_PERFMON" to a holder. */
static void refusal_names_what_is_missing(void **state) {
  (void)state;
  char why[EM_PMU_REASON_BYTES];
  const uint64_t perfmon = UINT64_C(1) << EM_CAP_PERFMON, ptrace = UINT64_C(1) << 19;
  em_pmu_refusal_reason(3, perfmon | ptrace, EACCES, why, sizeof(why));
  assert_contains(why, "perf_event_paranoid 3 (distribution level) refuses it even with "
                       "CAP_PERFMON; set it to 2 (EACCES)");
  em_pmu_refusal_reason(4, 0, EACCES, why, sizeof(why));
  assert_contains(why, "perf_event_paranoid 4 (distribution level) refuses it; set it to 2");
  em_pmu_refusal_reason(3, UINT64_C(1) << EM_CAP_SYS_ADMIN, EPERM, why, sizeof(why));
  assert_contains(why, "not permitted with CAP_PERFMON (paranoid 3)");
  em_pmu_refusal_reason(2, 0, EACCES, why, sizeof(why));
  assert_contains(why, "perf_event_paranoid 2 and no CAP_PERFMON; grant it (EACCES)");
  em_pmu_refusal_reason(2, perfmon, EACCES, why, sizeof(why));
  assert_contains(why, "needs CAP_SYS_PTRACE, or a security module refused (EACCES)");
  assert_null(strstr(why, "grant"));
  em_pmu_refusal_reason(EM_PMU_PARANOID_UNKNOWN, perfmon, EPERM, why, sizeof(why));
  assert_contains(why, "perf_event_paranoid unreadable, CAP_PERFMON held (EPERM)");
  assert_true(strlen(why) < sizeof(why) - 1);
}

/* Replays the Xavier fixture, with or without its EINVAL rule; returns the readings. */
static void replay_xavier(bool rule, em_pmu_reading_t r[2][10], size_t *reads_per_tick,
                          bool *all_alone) {
  fixture_t *fx = fx_load("jetson-xavier-l4t32-inherit-group-einval.txt");
  assert_true(fx->rule_group_einval);
  fx->rule_group_einval = rule;
  fake_t *f = fake_new(fx);
  em_pmu_t *p = open_ok(fx, f);
  assert_int_equal(em_pmu_present(p), 10);
  *all_alone = true;
  for (size_t e = 0; e < 10; e++) {
    const fake_call_t *c = call_of(f, e);
    *all_alone = *all_alone && c->group_fd == -1 && !(c->attr.read_format & PERF_FORMAT_GROUP) &&
                 c->attr.inherit == 1;
  }
  for (size_t t = 0; t < 2; t++) {
    size_t before = f->n_reads;
    assert_int_equal(em_pmu_read(p, r[t], 10), 0);
    *reads_per_tick = f->n_reads - before;
  }
  free_and_check(p, f);
  free(fx);
}

static void old_kernel_group_einval_falls_back_to_per_event_reads_with_same_readings(void **state) {
  (void)state;
  em_pmu_reading_t alone[2][10], grouped[2][10];
  size_t reads_alone = 0, reads_grouped = 0;
  bool all_alone = false, none_alone = true;
  replay_xavier(true, alone, &reads_alone, &all_alone);
  replay_xavier(false, grouped, &reads_grouped, &none_alone);
  assert_true(all_alone);
  assert_false(none_alone);
  assert_int_equal(reads_alone, 10);  /* One read() per event... */
  assert_int_equal(reads_grouped, 2); /* ...instead of one per group. */
  for (size_t t = 0; t < 2; t++) {
    for (size_t e = 0; e < 10; e++) {
      assert_true(alone[t][e].present);
      assert_memory_equal(&alone[t][e], &grouped[t][e], sizeof(em_pmu_reading_t));
    }
  }
  assert_present(&alone[1][0], 454996098);
  assert_present(&alone[1][9], 88);
}

static void refused_leader_lets_next_event_lead(void **state) {
  (void)state;
  fixture_t *fx = fx_load("jetson-orin-ref-cycles.txt");
  enum { REF, INS, CYC, MISS, TC };
  fake_t *f = fake_new(fx);
  em_pmu_t *p = open_ok(fx, f);
  assert_int_equal(em_pmu_present(p), 4);
  assert_int_equal(call_of(f, INS)->group_fd, -1);
  assert_int_equal(call_of(f, CYC)->group_fd, call_of(f, INS)->result);
  assert_int_equal(call_of(f, MISS)->group_fd, call_of(f, INS)->result);
  em_pmu_reading_t r[5];
  assert_int_equal(em_pmu_read(p, r, 5), 0);
  assert_absent(&r[REF], "not supported by this CPU or kernel (ENOENT)");
  assert_present(&r[INS], 271664200);
  assert_present(&r[CYC], 219728396);
  assert_present(&r[MISS], 1702114);
  assert_present(&r[TC], 99876544);
  free_and_check(p, f);
  free(fx);
}

static void cgroup_target_scales_per_cpu_sums_and_skips_offline_cpus(void **state) {
  (void)state;
  fixture_t *fx = fx_load("jetson-orin-nano-cgroup.txt");
  enum { CYC, INS, TC };
  fake_t *f = fake_new(fx);
  em_pmu_t *p = NULL;
  size_t fds_before = count_open_fds();
  assert_int_equal(fx_pmu_new(fx, f, &p), 0);
  assert_int_equal(count_open_fds(), fds_before); /* The cgroup dir fd is closed again. */
  assert_int_equal(em_pmu_present(p), 3);
  bool seen_cpu[6] = {false};
  for (size_t i = 0; i < f->n_calls; i++) {
    const fake_call_t *c = &f->calls[i];
    assert_true(c->flags & PERF_FLAG_PID_CGROUP);
    assert_true(c->flags & PERF_FLAG_FD_CLOEXEC);
    assert_true(c->pid_is_dir);
    assert_int_equal(c->attr.inherit, 0);
    assert_in_range(c->cpu, 0, 5);
    seen_cpu[c->cpu] = true;
    if (c->cpu >= 4) {
      assert_int_equal(c->result, -ENODEV);
    }
  }
  for (size_t c = 0; c < 6; c++) {
    assert_true(seen_cpu[c]);
  }
  em_pmu_reading_t r[3];
  assert_int_equal(em_pmu_read(p, r, 3), 0);
  assert_int_equal(f->n_reads, 8); /* 4 online CPUs x 2 groups. */
  /* Scaled per CPU, then summed: 135M + 40M*60/30 + 3M + 0 (CPU 3 never ran). */
  assert_present(&r[CYC], UINT64_C(218000000));
  assert_present(&r[INS], UINT64_C(261600000));
  assert_true(r[CYC].running_ratio > 0.802 && r[CYC].running_ratio < 0.803); /* 122/152 */
  assert_present(&r[TC], UINT64_C(152000000));
  assert_true(r[TC].running_ratio == 1.0);
  free_and_check(p, f);
  free(fx);
}

static void garbled_short_and_failing_reads_are_absent_for_that_read(void **state) {
  (void)state;
  fixture_t *fx = fx_load("synthetic-garbled-reads.txt");
  enum { CYC, INS, TC };
  fake_t *f = fake_new(fx);
  em_pmu_t *p = open_ok(fx, f);
  em_pmu_reading_t r[3];

  assert_int_equal(em_pmu_read(p, r, 3), 0); /* 1: healthy. */
  assert_present(&r[CYC], 10);
  assert_present(&r[INS], 20);

  assert_int_equal(em_pmu_read(p, r, 3), 0); /* 2: 20 bytes. */
  assert_absent(&r[CYC], "bad read: 20 bytes, expected 40");
  assert_absent(&r[INS], "bad read: 20 bytes, expected 40");
  assert_present(&r[TC], 2000);

  assert_int_equal(em_pmu_read(p, r, 3), 0); /* 3: nr 3 for a group of 2. */
  assert_absent(&r[CYC], "bad group read: nr 3, expected 2");
  assert_present(&r[TC], 3000);

  assert_int_equal(em_pmu_read(p, r, 3), 0); /* 4: EIO from one group. */
  assert_absent(&r[INS], "read failed: Input/output error (EIO)");
  assert_present(&r[TC], 4000);

  assert_int_equal(em_pmu_read(p, r, 3), 0); /* 5: healthy again. */
  assert_present(&r[CYC], 50);
  assert_present(&r[INS], 100);

  assert_int_equal(em_pmu_read(p, r, 3), -ESRCH); /* 6: every group fails. */
  assert_absent(&r[CYC], "(EIO)");
  assert_absent(&r[TC], "(EIO)");

  assert_int_equal(em_pmu_read(p, r, 3), -ESRCH); /* 7: end of file. */
  assert_absent(&r[CYC], "target gone");
  assert_present(&r[TC], 7000);

  assert_int_equal(em_pmu_read(p, r, 3), -ESRCH); /* 8: ESRCH. */
  assert_present(&r[CYC], 80);
  assert_absent(&r[TC], "target gone (ESRCH)");
  free_and_check(p, f);
  free(fx);
}

/* Every truncation of a healthy read: the cut group is absent for that read, never a crash. */
static void every_truncated_group_read_is_absent_without_crash(void **state) {
  (void)state;
  fixture_t *fx = fx_load("synthetic-garbled-reads.txt");
  const size_t hw_bytes = 5 * 8, sw_bytes = 4 * 8; /* nr+times+2 values; nr+times+1 value. */
  for (size_t cut = 0; cut <= hw_bytes; cut++) {
    fake_t *f = fake_new(fx);
    f->truncate_to = cut;
    em_pmu_t *p = NULL;
    assert_int_equal(fx_pmu_new(fx, f, &p), 0);
    em_pmu_reading_t r[3];
    int rc = em_pmu_read(p, r, 3);
    assert_int_equal(rc, cut == 0 ? -ESRCH : 0); /* 0 bytes is end of file: target gone. */
    for (size_t e = 0; e < 3; e++) {
      size_t whole = e == 2 ? sw_bytes : hw_bytes;
      if (cut >= whole) {
        assert_true(r[e].present);
        continue;
      }
      assert_false(r[e].present);
      assert_true(r[e].reason[0] != '\0');
      assert_true(strlen(r[e].reason) < EM_PMU_REASON_BYTES);
    }
    free_and_check(p, f);
  }
  free(fx);
}

/* A fixture built in code, for the cases no machine file covers. */
static fixture_t *fx_inline(const char *const *names, size_t n) {
  fixture_t *fx = calloc(1, sizeof(*fx));
  assert_non_null(fx);
  fx->pid = 4242;
  resolve_all(names, n, fx->request);
  fx->n_request = n;
  return fx;
}

static void target_gone_during_open_returns_esrch_and_closes_all(void **state) {
  (void)state;
  static const char *const names[] = {"cycles", "instructions", "task-clock"};
  fixture_t *fx = fx_inline(names, 3);
  fx_refuse(fx, "task-clock", 0, ESRCH);
  fake_t *f = fake_new(fx);
  em_pmu_t *p = (em_pmu_t *)f; /* Must be reset to NULL. */
  assert_int_equal(fx_pmu_new(fx, f, &p), -ESRCH);
  assert_null(p);
  assert_int_equal(fake_open_fds(f), 0); /* cycles and instructions were opened, then closed. */
  assert_int_equal(f->errors, 0);
  free(f);
  free(fx);
}

static void new_rejects_bad_arguments(void **state) {
  (void)state;
  static const char *const names[] = {"task-clock"};
  fixture_t *fx = fx_inline(names, 1);
  fake_t *f = fake_new(fx);
  em_pmu_sys_t sys = fake_sys(f);
  em_pmu_sys_t no_read = sys;
  no_read.read = NULL;
  em_pmu_sys_t no_list = sys;
  no_list.list_threads = NULL;
  em_pmu_target_t pid = {.pid = 4242};
  em_pmu_target_t none = {.pid = 0, .cgroup = NULL};
  em_pmu_target_t empty = {.pid = 0, .cgroup = ""};
  em_pmu_event_t many[EM_PMU_MAX_EVENTS + 1];
  for (size_t i = 0; i < ARRAY_LEN(many); i++) {
    many[i] = fx->request[0];
  }
  em_pmu_t *p = NULL;
  const struct {
    const char *what;
    em_pmu_t **out;
    const em_pmu_event_t *events;
    size_t n;
    const em_pmu_target_t *target;
    const em_pmu_sys_t *sys;
  } rows[] = {
      {"no out", NULL, fx->request, 1, &pid, &sys},
      {"no events", &p, NULL, 1, &pid, &sys},
      {"too many events", &p, many, EM_PMU_MAX_EVENTS + 1, &pid, &sys},
      {"no target", &p, fx->request, 1, NULL, &sys},
      {"neither pid nor cgroup", &p, fx->request, 1, &none, &sys},
      {"empty cgroup path", &p, fx->request, 1, &empty, &sys},
      {"no sys", &p, fx->request, 1, &pid, NULL},
      {"sys without read", &p, fx->request, 1, &pid, &no_read},
      {"sys without list_threads", &p, fx->request, 1, &pid, &no_list},
  };
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    if (em_pmu_new(rows[i].out, rows[i].events, rows[i].n, rows[i].target, rows[i].sys) !=
        -EINVAL) {
      fail_msg("%s: not -EINVAL", rows[i].what);
    }
  }
  assert_int_equal(f->n_calls, 0);
  em_pmu_target_t missing = {.cgroup = "/nonexistent/edgemon/cgroup"};
  assert_int_equal(em_pmu_new(&p, fx->request, 1, &missing, &sys), -ESRCH);
  em_pmu_free(NULL);
  assert_int_equal(em_pmu_present(NULL), 0);
  assert_int_equal(em_pmu_threads(NULL), 0);
  assert_int_equal(em_pmu_read(NULL, NULL, 0), -EINVAL);
  free(f);
  free(fx);
}

static void read_fills_exactly_the_readings_asked_for(void **state) {
  (void)state;
  fixture_t *fx = fx_load("synthetic-garbled-reads.txt");
  fake_t *f = fake_new(fx);
  em_pmu_t *p = open_ok(fx, f);
  em_pmu_reading_t r[5];
  memset(r, 0x5a, sizeof(r));
  assert_int_equal(em_pmu_read(p, r, 2), 0); /* Fewer than opened: only those two. */
  assert_present(&r[0], 10);
  assert_present(&r[1], 20);
  uint8_t untouched[sizeof(r[2])];
  memset(untouched, 0x5a, sizeof(untouched));
  assert_memory_equal(&r[2], untouched, sizeof(untouched));
  assert_int_equal(em_pmu_read(p, r, 5), 0); /* More than opened: the extra ones absent. */
  assert_present(&r[2], 2000);
  assert_absent(&r[3], "no such event");
  assert_absent(&r[4], "no such event");
  free_and_check(p, f);
  free(fx);
}

/* ---- Process targets with several threads ---- */

/* Adds a `read` line (the text after "read") to an inline fixture. */
static void fx_add_read(fixture_t *fx, const char *text) {
  char line[512];
  snprintf(line, sizeof(line), "%s", text);
  parse_read(fx, line, 0);
}

/* The pid 4242 with threads 4242..4242+n-1, listed in that order. */
static void fx_threads(fixture_t *fx, size_t n) {
  assert_true(n <= FX_MAX_THREADS);
  for (size_t t = 0; t < n; t++) {
    fx->threads[t] = (pid_t)(4242 + t);
  }
  fx->n_threads = n;
}

enum { T_CYC, T_INS, T_TC, T_CS, T_N };

static void three_threads_replay_sums_per_thread_scaled_counts_exactly(void **state) {
  (void)state;
  fixture_t *fx = fx_load("jetson-orin-pytorch-threads.txt");
  assert_int_equal(fx->n_threads, 3);
  fake_t *f = fake_new(fx);
  em_pmu_t *p = open_ok(fx, f);
  assert_int_equal(em_pmu_present(p), T_N);
  assert_int_equal(em_pmu_threads(p), 3);
  /* Listed once, before any open: a thread created after an open is inherited, listed after
     it would be counted twice. */
  assert_int_equal(f->n_lists, 1);
  assert_int_equal(f->calls_before_list, 0);
  /* The pid first (the kernel listed it second), then each thread: its own two groups. */
  assert_int_equal(f->calls[0].pid, 4242);
  assert_int_equal(f->n_calls, 3 * T_N);
  for (size_t i = 0; i < f->n_calls; i++) {
    const fake_call_t *c = &f->calls[i];
    assert_true(c->result >= 0);
    assert_int_equal(c->attr.inherit, 1);
    assert_int_equal(c->cpu, -1);
    assert_int_equal(c->attr.read_format, GROUP_FORMAT);
    if (c->req == T_CYC || c->req == T_TC) {
      assert_int_equal(c->group_fd, -1);
    } else { /* instructions joins the cycles of its thread, context-switches its task-clock. */
      const fake_call_t *lead = &f->calls[i - 1];
      assert_int_equal(c->group_fd, lead->result);
      assert_int_equal(lead->pid, c->pid);
    }
  }
  static const pid_t tids[] = {4242, 4250, 4251};
  for (size_t t = 0; t < ARRAY_LEN(tids); t++) {
    size_t opened = 0;
    assert_int_equal(calls_on(f, tids[t], &opened), T_N);
    assert_int_equal(opened, T_N);
  }

  em_pmu_reading_t r[T_N];
  /* Tick 1: 4251's hardware group ran half the time: scaled on its own, then summed.
     9000000 + 215600000 + 105600000 * 96/48; scaling the sums would give 435150993. */
  assert_int_equal(em_pmu_read(p, r, T_N), 0);
  assert_int_equal(f->n_reads, 6); /* One read() per group per thread. */
  assert_present(&r[T_CYC], UINT64_C(435800000));
  assert_present(&r[T_INS], UINT64_C(860800000)); /* 7200000 + 431200000 + 211200000 * 2 */
  assert_present(&r[T_TC], UINT64_C(199000000));
  assert_present(&r[T_CS], 48);
  /* Enabled-weighted: (5 + 98 + 48) / (5 + 98 + 96) ms. */
  assert_true(r[T_CYC].running_ratio > 151.0 / 199 - 1e-9 &&
              r[T_CYC].running_ratio < 151.0 / 199 + 1e-9);
  assert_true(r[T_TC].running_ratio == 1.0);

  /* Tick 2: 4251 has exited; its fds answer its final counts, which stay in the sums. */
  em_pmu_reading_t prev[T_N];
  memcpy(prev, r, sizeof(r));
  assert_int_equal(em_pmu_read(p, r, T_N), 0);
  assert_present(&r[T_CYC], UINT64_C(744400000));
  assert_present(&r[T_INS], UINT64_C(1469360000));
  assert_present(&r[T_TC], UINT64_C(340000000));
  assert_present(&r[T_CS], 94);
  assert_true(r[T_CYC].running_ratio > 273.0 / 340 - 1e-9 &&
              r[T_CYC].running_ratio < 273.0 / 340 + 1e-9);
  for (size_t e = 0; e < T_N; e++) {
    assert_true(r[e].value >= prev[e].value);
  }

  /* Tick 3: the pid's inherited replacement worker shows in the pid's groups. */
  memcpy(prev, r, sizeof(r));
  assert_int_equal(em_pmu_read(p, r, T_N), 0);
  assert_present(&r[T_CYC], UINT64_C(1178200000));
  assert_present(&r[T_INS], UINT64_C(2347400000));
  assert_present(&r[T_TC], UINT64_C(538000000));
  assert_present(&r[T_CS], 113);
  for (size_t e = 0; e < T_N; e++) {
    assert_true(r[e].value >= prev[e].value);
  }
  assert_int_equal(f->n_reads, 18);
  free_and_check(p, f);
  free(fx);
}

static void thread_gone_after_open_keeps_its_last_counts_and_is_not_read_again(void **state) {
  (void)state;
  fixture_t *fx = fx_load("synthetic-thread-gone.txt");
  fake_t *f = fake_new(fx);
  em_pmu_t *p = open_ok(fx, f);
  assert_int_equal(em_pmu_threads(p), 4);
  em_pmu_reading_t r[1];
  const struct {
    int rc;
    bool present;
    uint64_t value;
    const char *reason;
    size_t reads;
  } ticks[] = {
      {0, true, 6110, NULL, 4},  /* 1000 + 5000 + 100 + 10 */
      {0, true, 7120, NULL, 4},  /* 4243 ESRCH, 4244 end of file: their last counts stay. */
      {0, false, 0, "(EIO)", 2}, /* 4245 fails: absent for this read, as for a CPU. */
      {0, true, 9140, NULL, 2},  /* 4000 + 5000 + 100 + 40 */
      {-ESRCH, false, 0, "target gone (ESRCH)", 2}, /* The pid's own group says ESRCH. */
  };
  for (size_t t = 0; t < ARRAY_LEN(ticks); t++) {
    size_t before = f->n_reads;
    assert_int_equal(em_pmu_read(p, r, 1), ticks[t].rc);
    assert_int_equal(f->n_reads - before, ticks[t].reads);
    if (ticks[t].present) {
      assert_present(&r[0], ticks[t].value);
    } else {
      assert_absent(&r[0], ticks[t].reason);
    }
  }
  free_and_check(p, f);
  free(fx);
}

static void thread_gone_between_listing_and_open_is_skipped_silently(void **state) {
  (void)state;
  static const char *const names[] = {"cycles", "instructions", "task-clock"};
  fixture_t *fx = fx_inline(names, 3);
  fx_threads(fx, 4);
  /* 4244 exits after its cycles opened: instructions gets ESRCH. */
  fx_refuse(fx, "instructions", 4244, ESRCH);
  fx_add_read(fx, "cycles enabled=100 running=100 cycles=10 instructions=20");
  fx_add_read(fx, "task-clock enabled=100 running=100 task-clock=100");
  fake_t *f = fake_new(fx);
  char logged[4096];
  em_pmu_t *p = open_warned(fx, f, logged, sizeof(logged), NULL); /* Silently. */
  assert_int_equal(em_pmu_present(p), 3);
  assert_int_equal(em_pmu_threads(p), 3);
  size_t opened = 0;
  assert_int_equal(calls_on(f, 4244, &opened), 2);
  assert_int_equal(opened, 1);
  assert_int_equal(fake_open_fds(f), 9);           /* 4244's cycles is closed again. */
  assert_int_equal(calls_on(f, 4245, &opened), 3); /* The threads after it are opened. */
  em_pmu_reading_t r[3];
  assert_int_equal(em_pmu_read(p, r, 3), 0);
  assert_int_equal(f->n_reads, 6);
  assert_present(&r[0], 30);
  assert_present(&r[1], 60);
  assert_present(&r[2], 300);
  free_and_check(p, f);
  free(fx);
}

static void failing_thread_listing_counts_the_pid_alone_with_a_warning(void **state) {
  (void)state;
  static const char *const names[] = {"cycles", "task-clock"};
  fixture_t *fx = fx_inline(names, 2);
  fx_threads(fx, 3);
  fx->threads_err = EACCES;
  fake_t *f = fake_new(fx);
  char logged[4096];
  em_pmu_t *p = open_warned(fx, f, logged, sizeof(logged),
                            "warning: pmu: cannot list the threads of pid 4242");
  assert_contains(logged, "(EACCES)");
  assert_int_equal(em_pmu_present(p), 2);
  assert_int_equal(em_pmu_threads(p), 1);
  assert_int_equal(f->n_calls, 2);
  assert_int_equal(calls_on(f, 4242, NULL), 2);
  free_and_check(p, f);

  /* The process is gone: the open of the pid says so, and nothing is logged. */
  fx->threads_err = ENOENT;
  fx_refuse(fx, "cycles", 0, ESRCH);
  f = fake_new(fx);
  int rc = new_logged(fx, f, &p, logged, sizeof(logged));
  assert_int_equal(rc, -ESRCH);
  assert_null(p);
  assert_string_equal(logged, "");
  assert_int_equal(fake_open_fds(f), 0);
  free(f);
  free(fx);
}

static void failing_open_on_another_thread_stops_there_with_partial_counts(void **state) {
  (void)state;
  static const char *const names[] = {"task-clock", "context-switches"};
  fixture_t *fx = fx_inline(names, 2);
  fx_threads(fx, 4);
  /* Out of fds: every later thread would fail too. */
  fx_refuse(fx, "context-switches", 4244, EMFILE);
  fx_add_read(fx, "task-clock enabled=100 running=100 task-clock=100 context-switches=1");
  fake_t *f = fake_new(fx);
  char logged[4096];
  em_pmu_t *p = open_warned(fx, f, logged, sizeof(logged),
                            "warning: pmu: counts are partial: 2 of the 4 threads of pid 4242");
  assert_contains(logged, "(EMFILE)");
  assert_contains(logged, "cgroup target");
  assert_int_equal(em_pmu_threads(p), 2);
  assert_int_equal(em_pmu_present(p), 2);
  assert_int_equal(fake_open_fds(f), 4);
  assert_int_equal(calls_on(f, 4245, NULL), 0);
  em_pmu_reading_t r[2];
  assert_int_equal(em_pmu_read(p, r, 2), 0);
  assert_present(&r[0], 200);
  assert_present(&r[1], 2);
  free_and_check(p, f);
  free(fx);
}

static void more_threads_than_the_cap_counts_the_cap_and_warns_once(void **state) {
  (void)state;
  static const char *const names[] = {"task-clock"};
  fixture_t *fx = fx_inline(names, 1);
  fx_threads(fx, EM_PMU_MAX_THREADS + 44);
  fx->threads[0] = 4242 + EM_PMU_MAX_THREADS + 44; /* The pid listed last, past the cap. */
  fx->threads[EM_PMU_MAX_THREADS + 43] = 4242;
  fx_add_read(fx, "task-clock enabled=1000 running=1000 task-clock=1000");
  fx_add_read(fx, "task-clock enabled=2000 running=1000 task-clock=1000");
  fake_t *f = fake_new(fx);
  char logged[4096];
  char want[128];
  snprintf(want, sizeof(want), "warning: pmu: counts are partial: %d of the %d threads",
           EM_PMU_MAX_THREADS, EM_PMU_MAX_THREADS + 44);
  em_pmu_t *p = open_warned(fx, f, logged, sizeof(logged), want);
  assert_contains(logged, "cgroup target");
  assert_int_equal(em_pmu_threads(p), EM_PMU_MAX_THREADS);
  assert_int_equal(f->n_calls, EM_PMU_MAX_THREADS);
  assert_int_equal(f->calls[0].pid, 4242); /* The pid is always counted. */
  em_pmu_reading_t r[1];
  assert_int_equal(em_pmu_read(p, r, 1), 0);
  assert_int_equal(f->n_reads, EM_PMU_MAX_THREADS);
  assert_present(&r[0], UINT64_C(1000) * EM_PMU_MAX_THREADS);
  assert_int_equal(em_pmu_read(p, r, 1), 0);
  assert_present(&r[0], UINT64_C(2000) * EM_PMU_MAX_THREADS);
  assert_true(r[0].running_ratio == 0.5);
  free_and_check(p, f);
  free(fx);
}

static void event_absent_on_the_pid_is_not_tried_on_its_other_threads(void **state) {
  (void)state;
  static const char *const names[] = {"ref-cycles", "task-clock"};
  fixture_t *fx = fx_inline(names, 2);
  fx_threads(fx, 3);
  fx_refuse(fx, "ref-cycles", 0, ENOENT);
  fake_t *f = fake_new(fx);
  em_pmu_t *p = open_ok(fx, f);
  assert_int_equal(em_pmu_threads(p), 3);
  assert_int_equal(em_pmu_present(p), 1);
  assert_int_equal(calls_of(f, 0), 1);
  assert_int_equal(calls_of(f, 1), 3);
  free_and_check(p, f);

  /* Nothing opens on the pid: no thread is counted, and no other thread is tried. */
  fx->default_answer = EACCES;
  f = fake_new(fx);
  assert_int_equal(fx_pmu_new(fx, f, &p), 0);
  assert_int_equal(em_pmu_threads(p), 0);
  assert_int_equal(em_pmu_present(p), 0);
  assert_int_equal(calls_on(f, 4243, NULL), 0);
  free_and_check(p, f);
  free(fx);
}

/* ---- Events on several PMUs (parts) ---- */

/* A Jetson TX2: armv8_cortex_a57 (dynamic type 8, CPUs 0 and 3-5) and armv8_nvidia_denver
   (type 9, CPUs 1-2), as em_pmu_events_resolve() finds them (tests/fixtures/boards). */
enum { TX2_A57 = 8, TX2_DENVER = 9 };

/* Event `name` on both TX2 PMUs, with `config` on each; its parts are named
   "<short>@a57" and "<short>@denver" in the fixture's lines. */
static void fx_tx2_event(fixture_t *fx, const char *name, const char *short_name, uint64_t config) {
  assert_true(fx->n_request < EM_PMU_MAX_EVENTS);
  size_t i = fx->n_request++;
  em_pmu_event_t *e = &fx->request[i];
  memset(e, 0, sizeof(*e));
  snprintf(e->name, sizeof(e->name), "%s", name);
  e->type = TX2_A57;
  e->config = config;
  static const unsigned a57[] = {0, 3, 4, 5};
  for (size_t c = 0; c < ARRAY_LEN(a57); c++) {
    em_pmu_cpus_add(&e->cpus, a57[c]);
  }
  e->n_parts = 1;
  e->parts[0].type = TX2_DENVER;
  e->parts[0].config = config;
  em_pmu_cpus_add(&e->parts[0].cpus, 1);
  em_pmu_cpus_add(&e->parts[0].cpus, 2);
  snprintf(fx->part_names[i][0], FX_NAME_BYTES, "%s@a57", short_name);
  snprintf(fx->part_names[i][1], FX_NAME_BYTES, "%s@denver", short_name);
}

/* A process target (pid 4242) counting l1d_cache_refill and cpu_cycles on both TX2 PMUs,
   then task-clock. */
enum { X_REFILL, X_CYC, X_TC, X_N };

static fixture_t *fx_tx2(void) {
  fixture_t *fx = calloc(1, sizeof(*fx));
  assert_non_null(fx);
  fx->pid = 4242;
  fx_tx2_event(fx, "l1d_cache_refill", "refill", 0x03);
  fx_tx2_event(fx, "cpu_cycles", "cycles", 0x11);
  assert_int_equal(em_pmu_resolve("task-clock", &fx->request[fx->n_request++]), 0);
  return fx;
}

/* The successful open of part `part` of request `req` on thread `tid`. */
static const fake_call_t *part_call(const fake_t *f, size_t req, size_t part, pid_t tid) {
  const fake_call_t *found = NULL;
  for (size_t i = 0; i < f->n_calls; i++) {
    const fake_call_t *c = &f->calls[i];
    if (c->req == req && c->part == part && c->pid == tid && c->result >= 0) {
      assert_null(found); /* One counter per part per thread. */
      found = c;
    }
  }
  assert_non_null(found);
  return found;
}

static void
two_part_event_counts_on_both_pmus_and_scales_each_threads_parts_together(void **state) {
  (void)state;
  fixture_t *fx = fx_tx2();
  fx_threads(fx, 2);
  /* Thread 4242 ran 100 ms: 40 on the A57 cluster, 60 on Denver, nothing multiplexed. */
  fx_add_read(fx, "refill@a57 tid=4242 enabled=100000000 running=40000000 refill@a57=4000 "
                  "cycles@a57=40000");
  fx_add_read(fx, "refill@denver tid=4242 enabled=100000000 running=60000000 "
                  "refill@denver=3000 cycles@denver=90000");
  fx_add_read(fx, "task-clock tid=4242 enabled=100000000 running=100000000 "
                  "task-clock=100000000");
  /* Thread 4243 ran 50 ms, 20 on each cluster, both multiplexed by half: 10 + 15 counted. */
  fx_add_read(fx, "refill@a57 tid=4243 enabled=50000000 running=10000000 refill@a57=1000 "
                  "cycles@a57=10000");
  fx_add_read(fx, "refill@denver tid=4243 enabled=50000000 running=15000000 "
                  "refill@denver=600 cycles@denver=20000");
  fx_add_read(fx, "task-clock tid=4243 enabled=50000000 running=50000000 task-clock=50000000");
  fake_t *f = fake_new(fx);
  em_pmu_t *p = open_ok(fx, f);
  assert_int_equal(em_pmu_present(p), X_N);
  assert_int_equal(em_pmu_threads(p), 2);
  /* On each thread: one counter per part, on any CPU (the kernel counts a part only while the
     thread runs on its PMU's CPUs), each part in the group of its own PMU type. */
  assert_int_equal(f->n_calls, 2 * 5);
  assert_int_equal(fake_open_fds(f), 2 * 5);
  for (pid_t tid = 4242; tid <= 4243; tid++) {
    const fake_call_t *ra = part_call(f, X_REFILL, 0, tid);
    const fake_call_t *rd = part_call(f, X_REFILL, 1, tid);
    const fake_call_t *ca = part_call(f, X_CYC, 0, tid);
    const fake_call_t *cd = part_call(f, X_CYC, 1, tid);
    assert_int_equal(ra->attr.type, TX2_A57);
    assert_int_equal(rd->attr.type, TX2_DENVER);
    assert_int_equal(ra->attr.config, 0x03);
    assert_int_equal(cd->attr.config, 0x11);
    assert_int_equal(ra->cpu, -1);
    assert_int_equal(rd->cpu, -1);
    assert_int_equal(ra->group_fd, -1); /* Leaders: parts never share a group. */
    assert_int_equal(rd->group_fd, -1);
    assert_int_equal(ca->group_fd, ra->result); /* cpu_cycles joins by PMU type. */
    assert_int_equal(cd->group_fd, rd->result);
    assert_int_equal(ra->attr.read_format, GROUP_FORMAT);
    assert_int_equal(ra->attr.inherit, 1);
  }
  em_pmu_reading_t r[X_N];
  assert_int_equal(em_pmu_read(p, r, X_N), 0);
  assert_int_equal(f->n_reads, 2 * 3); /* Per thread: the a57, denver and software groups. */
  /* 4242: (4000 + 3000) * 100/(40 + 60) = 7000. 4243: (1000 + 600) * 50/(10 + 15) = 3200.
     Scaling each part by its own times would say 4000*100/40 + 3000*100/60 + ... = 22000. */
  assert_present(&r[X_REFILL], 10200);
  assert_present(&r[X_CYC], (40000 + 90000) + (10000 + 20000) * 2);
  double want = (100.0 + 25.0) / (100.0 + 50.0);
  assert_true(r[X_REFILL].running_ratio > want - 1e-9 && r[X_REFILL].running_ratio < want + 1e-9);
  assert_present(&r[X_TC], 150000000);
  assert_true(r[X_TC].running_ratio == 1.0);
  free_and_check(p, f);
  free(fx);
}

static void
cgroup_target_opens_each_part_on_its_pmus_cpus_and_sums_the_scaled_values(void **state) {
  (void)state;
  fixture_t *fx = fx_tx2();
  fx->n_request = 1; /* l1d_cache_refill alone. */
  fx->pid = 0;
  fx->cgroup = true;
  fx->cpus = 6;
  fx->offline[5] = true; /* An A57 core hot-unplugged. */
  fx_add_read(fx, "refill@a57 cpu=0 enabled=100000000 running=50000000 refill@a57=1000");
  fx_add_read(fx, "refill@denver cpu=1 enabled=100000000 running=25000000 refill@denver=300");
  fx_add_read(fx, "refill@denver cpu=2 enabled=100000000 running=100000000 "
                  "refill@denver=700");
  fx_add_read(fx, "refill@a57 cpu=3 enabled=100000000 running=100000000 refill@a57=500");
  fx_add_read(fx, "refill@a57 cpu=4 enabled=0 running=0 refill@a57=0"); /* Never ran there. */
  fake_t *f = fake_new(fx);
  em_pmu_t *p = open_ok(fx, f);
  assert_int_equal(em_pmu_present(p), 1);
  /* Each part on the CPUs of its PMU only (the fake counts any other CPU as an error). */
  assert_int_equal(f->n_calls, 6);
  for (size_t i = 0; i < f->n_calls; i++) {
    const fake_call_t *c = &f->calls[i];
    bool denver_cpu = c->cpu == 1 || c->cpu == 2;
    assert_int_equal(c->part, denver_cpu ? 1 : 0);
    assert_int_equal(c->attr.type, denver_cpu ? TX2_DENVER : TX2_A57);
    assert_int_equal(c->attr.inherit, 0);
    assert_true(c->flags & PERF_FLAG_PID_CGROUP);
    assert_int_equal(c->result >= 0, c->cpu != 5);
  }
  em_pmu_reading_t r[1];
  assert_int_equal(em_pmu_read(p, r, 1), 0);
  assert_int_equal(f->n_reads, 5);
  /* The sum of the parts' per-CPU scaled values: 1000*2 + 300*4 + 700 + 500 + 0. */
  assert_present(&r[0], 2000 + 1200 + 700 + 500);
  double want = (50.0 + 25.0 + 100.0 + 100.0) / 400.0;
  assert_true(r[0].running_ratio > want - 1e-9 && r[0].running_ratio < want + 1e-9);
  free_and_check(p, f);
  free(fx);
}

static void one_part_refused_counts_on_the_other_and_says_which(void **state) {
  (void)state;
  fixture_t *fx = fx_tx2();
  fx_threads(fx, 2);
  /* This Denver PMU lacks the event. */
  fx_refuse(fx, "refill@denver", 0, ENOENT);
  /* Thread 4242 ran 100 ms, 40 of them on the A57 cluster: only those are counted. */
  fx_add_read(fx, "refill@a57 tid=4242 enabled=100000000 running=40000000 refill@a57=4000 "
                  "cycles@a57=40000");
  fx_add_read(fx, "cycles@denver tid=4242 enabled=100000000 running=60000000 "
                  "cycles@denver=90000");
  fx_add_read(fx, "refill@a57 tid=4243 enabled=50000000 running=50000000 refill@a57=500 "
                  "cycles@a57=5000");
  fx_add_read(fx, "cycles@denver tid=4243 enabled=50000000 running=0 cycles@denver=0");
  fx_add_read(fx, "task-clock enabled=100000000 running=100000000 task-clock=100000000");
  fake_t *f = fake_new(fx);
  char log[4096];
  em_pmu_t *p = open_at_info(fx, f, log, sizeof(log));
  assert_int_equal(em_pmu_present(p), X_N);
  assert_int_equal(em_pmu_threads(p), 2);
  assert_contains(log, "l1d_cache_refill: part 2 of 2 (type 9) absent: not supported");
  assert_int_equal(log_capture_count(log, "part 2 of 2"), 1);
  /* Not tried on the other thread: it opens what the pid has. cpu_cycles keeps both. */
  size_t denver_refill = 0;
  for (size_t i = 0; i < f->n_calls; i++) {
    denver_refill += f->calls[i].req == X_REFILL && f->calls[i].part == 1;
  }
  assert_int_equal(denver_refill, 1);
  part_call(f, X_CYC, 1, 4243);
  em_pmu_reading_t r[X_N];
  assert_int_equal(em_pmu_read(p, r, X_N), 0);
  /* Present from the A57 part: 4000 in 40 of 100 ms (extrapolated to 10000; running_ratio
     says 0.4 of it was counted) plus 500 in all of 4243's 50 ms. */
  assert_present(&r[X_REFILL], 10000 + 500);
  double want = (40.0 + 50.0) / (100.0 + 50.0);
  assert_true(r[X_REFILL].running_ratio > want - 1e-9 && r[X_REFILL].running_ratio < want + 1e-9);
  /* Both parts: 4243 never ran on Denver (running 0 there): its A57 part alone counts. */
  assert_present(&r[X_CYC], 40000 + 90000 + 5000);
  assert_true(r[X_CYC].running_ratio == 1.0);
  free_and_check(p, f);
  free(fx);
}

static void every_part_refused_is_absent_with_the_reason(void **state) {
  (void)state;
  fixture_t *fx = fx_tx2();
  snprintf(fx->opens[0].name, FX_NAME_BYTES, "refill@a57");
  fx->opens[0].answers[0] = ENOENT;
  fx->opens[0].n_answers = 1;
  snprintf(fx->opens[1].name, FX_NAME_BYTES, "refill@denver");
  fx->opens[1].answers[0] = ENOENT;
  fx->opens[1].n_answers = 1;
  fx->n_opens = 2;
  fx_add_read(fx, "cycles@a57 enabled=100 running=100 cycles@a57=7");
  fx_add_read(fx, "cycles@denver enabled=100 running=0 cycles@denver=0");
  fx_add_read(fx, "task-clock enabled=100 running=100 task-clock=100");
  fake_t *f = fake_new(fx);
  char log[4096];
  em_pmu_t *p = open_at_info(fx, f, log, sizeof(log));
  assert_int_equal(em_pmu_present(p), 2);
  assert_contains(log, "l1d_cache_refill absent: not supported by this CPU or kernel (ENOENT)");
  assert_int_equal(log_capture_count(log, "part "), 0); /* Absent as a whole, said once. */
  em_pmu_reading_t r[X_N];
  assert_int_equal(em_pmu_read(p, r, X_N), 0);
  assert_absent(&r[X_REFILL], "not supported by this CPU or kernel (ENOENT)");
  assert_present(&r[X_CYC], 7);
  assert_present(&r[X_TC], 100);
  free_and_check(p, f);
  free(fx);
}

static void config1_and_config2_of_each_part_reach_perf_event_attr(void **state) {
  (void)state;
  fixture_t *fx = fx_tx2();
  fx->n_request = 1;
  em_pmu_event_t *e = &fx->request[0];
  e->config1 = 0x7;
  e->config2 = UINT64_C(0xdead00000000beef);
  e->parts[0].config1 = 0x8;
  e->parts[0].config2 = 0x9;
  fx_add_read(fx, "refill@a57 enabled=10 running=10 refill@a57=1");
  fx_add_read(fx, "refill@denver enabled=10 running=0 refill@denver=0");
  fake_t *f = fake_new(fx);
  em_pmu_t *p = open_ok(fx, f);
  assert_int_equal(em_pmu_present(p), 1);
  const fake_call_t *a = part_call(f, 0, 0, 4242);
  const fake_call_t *d = part_call(f, 0, 1, 4242);
  assert_int_equal(a->attr.config1, 0x7);
  assert_int_equal(a->attr.config2, UINT64_C(0xdead00000000beef));
  assert_int_equal(d->attr.config1, 0x8);
  assert_int_equal(d->attr.config2, 0x9);
  em_pmu_reading_t r[1];
  assert_int_equal(em_pmu_read(p, r, 1), 0);
  assert_present(&r[0], 1);
  free_and_check(p, f);

  /* A repeated type (two counters on one PMU would count twice) or too many parts. */
  em_pmu_target_t pid = {.pid = 4242};
  f = fake_new(fx);
  em_pmu_sys_t sys = fake_sys(f);
  em_pmu_event_t bad = fx->request[0];
  bad.parts[0].type = TX2_A57;
  assert_int_equal(em_pmu_new(&p, &bad, 1, &pid, &sys), -EINVAL);
  bad = fx->request[0];
  bad.n_parts = 2;
  bad.parts[1] = bad.parts[0];
  bad.parts[1].type = 10;
  bad.parts[0].type = 10;
  assert_int_equal(em_pmu_new(&p, &bad, 1, &pid, &sys), -EINVAL);
  bad = fx->request[0];
  bad.n_parts = EM_PMU_MAX_PARTS;
  assert_int_equal(em_pmu_new(&p, &bad, 1, &pid, &sys), -EINVAL);
  assert_int_equal(f->n_calls, 0);
  free(f);
  free(fx);
}

static void cpu_set_helpers(void **state) {
  (void)state;
  em_pmu_cpus_t set;
  memset(&set, 0, sizeof(set));
  assert_true(em_pmu_cpus_has(&set, 0)); /* Empty: every CPU. */
  assert_true(em_pmu_cpus_has(&set, EM_PMU_MAX_CPUS + 5));
  em_pmu_cpus_add(&set, 65);
  em_pmu_cpus_add(&set, EM_PMU_MAX_CPUS); /* Out of range: ignored. */
  em_pmu_cpus_add(NULL, 1);
  assert_true(em_pmu_cpus_has(&set, 65));
  assert_false(em_pmu_cpus_has(&set, 64));
  assert_false(em_pmu_cpus_has(&set, 0));
  assert_false(em_pmu_cpus_has(&set, EM_PMU_MAX_CPUS));
  assert_false(em_pmu_cpus_has(NULL, 0));
}

/* ---- The Linux thread listing ---- */

typedef struct {
  int fd; /* Read end of a pipe: the thread blocks on it until it closes. */
  atomic_int tid;
} parked_t;

static void *parked_thread(void *arg) {
  parked_t *t = arg;
  atomic_store(&t->tid, (int)syscall(SYS_gettid));
  char byte;
  while (read(t->fd, &byte, 1) < 0 && errno == EINTR) {
  }
  return NULL;
}

static bool has_tid(const pid_t *tids, size_t n, pid_t tid) {
  for (size_t i = 0; i < n; i++) {
    if (tids[i] == tid) {
      return true;
    }
  }
  return false;
}

static void linux_list_threads_names_every_thread_and_counts_past_the_cap(void **state) {
  (void)state;
  int wake[2];
  assert_int_equal(pipe2(wake, O_CLOEXEC), 0);
  parked_t parked[3];
  pthread_t threads[3];
  for (size_t t = 0; t < 3; t++) {
    parked[t].fd = wake[0];
    atomic_init(&parked[t].tid, 0);
    assert_int_equal(pthread_create(&threads[t], NULL, parked_thread, &parked[t]), 0);
  }
  for (size_t t = 0; t < 3; t++) {
    while (atomic_load(&parked[t].tid) == 0) {
      sleep_ms(1);
    }
  }
  pid_t tids[64];
  int n = em_pmu_sys_linux.list_threads(NULL, getpid(), tids, ARRAY_LEN(tids));
  assert_true(n >= 4); /* This thread and the three parked ones (a sanitizer may add one). */
  assert_true(has_tid(tids, (size_t)n, getpid()));
  for (size_t t = 0; t < 3; t++) {
    assert_true(has_tid(tids, (size_t)n, (pid_t)atomic_load(&parked[t].tid)));
  }
  pid_t two[3] = {-7, -7, -7};
  assert_int_equal(em_pmu_sys_linux.list_threads(NULL, getpid(), two, 2), n);
  assert_true(two[0] > 0 && two[1] > 0);
  assert_int_equal(two[2], -7); /* Past the cap: counted, not written. */
  close(wake[1]);
  for (size_t t = 0; t < 3; t++) {
    pthread_join(threads[t], NULL);
  }
  close(wake[0]);

  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    _exit(0);
  }
  waitpid(child, NULL, 0); /* Reaped: gone from /proc. */
  assert_int_equal(em_pmu_sys_linux.list_threads(NULL, child, tids, ARRAY_LEN(tids)), -ENOENT);
}

/* ---- Real perf_event_open on this machine ---- */

static const char *const default_names[] = {
    "cycles",        "instructions", "cache-references", "cache-misses",   "branch-instructions",
    "branch-misses", "task-clock",   "context-switches", "cpu-migrations", "page-faults"};
enum { R_HW_N = 6, R_TC = 6, R_CS = 7, R_N = 10 };

/* Skips the test when this machine refuses perf_event_open outright. */
static void require_perf(void) {
  struct perf_event_attr attr;
  memset(&attr, 0, sizeof(attr));
  attr.size = sizeof(attr);
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_TASK_CLOCK;
  attr.exclude_kernel = 1;
  attr.exclude_hv = 1;
  int fd = em_pmu_sys_linux.open(NULL, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
  if (fd < 0) {
    print_message("perf_event_open unusable here: %s; skipping\n", strerror(-fd));
    skip();
  }
  em_pmu_sys_linux.close(NULL, fd);
}

static volatile unsigned long spin_sink;

static void *spin_thread(void *arg) {
  (void)arg;
  for (;;) {
    spin_sink++;
  }
  return NULL;
}

static atomic_int spin_stop; /* In a child: the stoppable thread returns once set. */

static void *spin_until_stopped(void *arg) {
  (void)arg;
  while (atomic_load_explicit(&spin_stop, memory_order_relaxed) == 0) {
    spin_sink++;
  }
  return NULL;
}

typedef enum {
  CHILD_SPIN,              /* The main thread spins. */
  CHILD_THREAD_ON_COMMAND, /* Waits for a byte, starts a spinning thread, acks, sleeps. */
  CHILD_THREAD_FIRST,      /* Starts a spinning thread, acks, sleeps. */
  CHILD_THREAD_STOPS,      /* Starts a spinning thread, acks; on a byte, ends and joins it,
                              acks; sleeps all along. */
} child_mode_t;

typedef struct {
  pid_t pid;
  int cmd; /* Parent writes. */
  int ack; /* Parent reads. */
} child_t;

static child_t child_start(child_mode_t mode) {
  int down[2], up[2];
  assert_int_equal(pipe2(down, O_CLOEXEC), 0);
  assert_int_equal(pipe2(up, O_CLOEXEC), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    alarm(30); /* Never outlive a broken test. */
    char byte = 0;
    if (mode == CHILD_SPIN) {
      spin_thread(NULL);
    }
    if (mode == CHILD_THREAD_ON_COMMAND && read(down[0], &byte, 1) != 1) {
      _exit(1);
    }
    pthread_t t;
    void *(*body)(void *) = mode == CHILD_THREAD_STOPS ? spin_until_stopped : spin_thread;
    if (pthread_create(&t, NULL, body, NULL) != 0 || write(up[1], "k", 1) != 1) {
      _exit(1);
    }
    if (mode == CHILD_THREAD_STOPS) {
      if (read(down[0], &byte, 1) != 1) {
        _exit(1);
      }
      atomic_store(&spin_stop, 1);
      if (pthread_join(t, NULL) != 0 || write(up[1], "k", 1) != 1) {
        _exit(1);
      }
    }
    for (;;) {
      if (read(down[0], &byte, 1) <= 0) { /* Sleeps: only the thread runs. */
        pause();
      }
    }
  }
  close(down[0]);
  close(up[1]);
  child_t c = {pid, down[1], up[0]};
  return c;
}

static void child_wait_ack(const child_t *c) {
  char byte = 0;
  assert_int_equal(read(c->ack, &byte, 1), 1);
}

static void child_kill(child_t *c) {
  if (c->pid > 0) {
    kill(c->pid, SIGKILL);
    waitpid(c->pid, NULL, 0);
    c->pid = 0;
  }
  close(c->cmd);
  close(c->ack);
}

/* CPU time of process `pid`, all its threads (utime + stime of /proc/<pid>/stat), in ns. */
static uint64_t proc_cpu_ns(pid_t pid) {
  char path[64], text[1024];
  snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  fclose(f);
  text[n] = '\0';
  const char *after = strrchr(text, ')'); /* comm may hold spaces and parentheses. */
  assert_non_null(after);
  unsigned long long utime = 0, stime = 0;
  assert_int_equal(
      sscanf(after + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime),
      2);
  long hz = sysconf(_SC_CLK_TCK);
  assert_true(hz > 0);
  return (uint64_t)(utime + stime) * 1000000000u / (uint64_t)hz;
}

/*
 * Sleeps at least `min_ms`, then until process `pid` has used `want_ns` of CPU since it had
 * used `from_ns` (at most 5 s more): on a loaded machine a spinning thread gets less than
 * its wall time, and the real-perf tests compare counts with CPU the child really got.
 */
static void wait_cpu(pid_t pid, uint64_t from_ns, uint64_t want_ns, long min_ms) {
  sleep_ms(min_ms);
  for (int i = 0; i < 100 && proc_cpu_ns(pid) - from_ns < want_ns; i++) {
    sleep_ms(50);
  }
}

static em_pmu_t *real_pmu_new(pid_t pid, const char *const *names, size_t n) {
  em_pmu_event_t ev[EM_PMU_MAX_EVENTS];
  resolve_all(names, n, ev);
  em_pmu_target_t target = {.pid = pid};
  em_pmu_t *p = NULL;
  assert_int_equal(em_pmu_new(&p, ev, n, &target, &em_pmu_sys_linux), 0);
  return p;
}

static void real_default_list_software_counts_hardware_absent_with_reason(void **state) {
  (void)state;
  require_perf();
  child_t c = child_start(CHILD_SPIN);
  em_pmu_t *p = real_pmu_new(c.pid, default_names, R_N);
  assert_int_equal(em_pmu_present(p), R_N - R_HW_N);
  em_pmu_reading_t r[3][R_N];
  for (size_t k = 0; k < 3; k++) {
    sleep_ms(100);
    assert_int_equal(em_pmu_read(p, r[k], R_N), 0);
    for (size_t e = 0; e < R_HW_N; e++) {
      assert_false(r[k][e].present); /* Never present with 0. */
      assert_int_equal(r[k][e].value, 0);
      if (strstr(r[k][e].reason, "(ENOENT)") == NULL &&
          strstr(r[k][e].reason, "(EOPNOTSUPP)") == NULL) {
        fail_msg("%s: reason \"%s\"", default_names[e], r[k][e].reason);
      }
    }
    for (size_t e = R_HW_N; e < R_N; e++) {
      if (!r[k][e].present) {
        fail_msg("%s absent: %s", default_names[e], r[k][e].reason);
      }
    }
    assert_true(r[k][R_TC].running_ratio == 1.0); /* Software events are never multiplexed. */
    if (k > 0) {
      assert_true(r[k][R_TC].value >= r[k - 1][R_TC].value);
    }
  }
  assert_true(r[0][R_TC].value > 0);
  assert_true(r[2][R_TC].value > r[0][R_TC].value); /* The child spins all along. */
  child_kill(&c);
  em_pmu_free(p);
}

static void real_inherit_counts_thread_created_after_open(void **state) {
  (void)state;
  require_perf();
  static const char *const names[] = {"task-clock", "context-switches"};
  child_t c = child_start(CHILD_THREAD_ON_COMMAND);
  em_pmu_t *p = real_pmu_new(c.pid, names, 2);
  assert_int_equal(em_pmu_threads(p), 1); /* The thread does not exist yet. */
  assert_int_equal(write(c.cmd, "t", 1), 1);
  child_wait_ack(&c); /* The thread spins; the main thread goes back to sleep in read(). */
  em_pmu_reading_t r0[2], r1[2];
  uint64_t cpu0 = proc_cpu_ns(c.pid);
  assert_int_equal(em_pmu_read(p, r0, 2), 0);
  wait_cpu(c.pid, cpu0, 100 * MS, 300);
  assert_int_equal(em_pmu_read(p, r1, 2), 0);
  assert_true(r0[0].present && r1[0].present);
  uint64_t grew = r1[0].value - r0[0].value;
  if (grew < 20 * MS) {
    fail_msg("task-clock grew %" PRIu64 " ns in 300 ms of a spinning inherited thread", grew);
  }
  child_kill(&c);
  em_pmu_free(p);
}

/*
 * The kernel attaches an event to one task and inherit only reaches threads created after the
 * open: a thread that already spins when the agent attaches was counted 0 ns before
 * em_pmu_new() opened every listed thread. The child's main thread sleeps; all its CPU time
 * is the pre-existing thread's.
 */
static void real_thread_existing_before_open_is_counted(void **state) {
  (void)state;
  require_perf();
  static const char *const names[] = {"task-clock"};
  child_t c = child_start(CHILD_THREAD_FIRST);
  child_wait_ack(&c);
  em_pmu_t *p = real_pmu_new(c.pid, names, 1);
  assert_int_equal(em_pmu_threads(p), 2);
  em_pmu_reading_t r0[1], r1[1];
  uint64_t cpu0 = proc_cpu_ns(c.pid);
  assert_int_equal(em_pmu_read(p, r0, 1), 0);
  wait_cpu(c.pid, cpu0, 200 * MS, 300); /* 300 ms when the machine is idle. */
  uint64_t cpu = proc_cpu_ns(c.pid) - cpu0;
  assert_int_equal(em_pmu_read(p, r1, 1), 0);
  assert_true(r0[0].present && r1[0].present);
  uint64_t grew = r1[0].value - r0[0].value;
  print_message("pre-existing spinning thread: task-clock %" PRIu64 " ns, CPU %" PRIu64
                " ns (procfs)\n",
                grew, cpu);
  if (grew < 150 * MS) {
    fail_msg("task-clock grew %" PRIu64 " ns while a thread spinning since before the open "
             "used %" PRIu64 " ns of CPU",
             grew, cpu);
  }
  child_kill(&c);
  em_pmu_free(p);
}

/* Threads of `pid` now, through the Linux listing. */
static int threads_of(pid_t pid) {
  pid_t tids[16];
  return em_pmu_sys_linux.list_threads(NULL, pid, tids, ARRAY_LEN(tids));
}

/*
 * A counted thread that exits: its fds keep answering its final counts, so the process sum
 * keeps its share and never goes down.
 */
static void real_exited_thread_keeps_its_counts_in_the_sum(void **state) {
  (void)state;
  require_perf();
  static const char *const names[] = {"task-clock", "context-switches"};
  child_t c = child_start(CHILD_THREAD_STOPS);
  child_wait_ack(&c);
  em_pmu_t *p = real_pmu_new(c.pid, names, 2);
  assert_int_equal(em_pmu_threads(p), 2);
  uint64_t cpu0 = proc_cpu_ns(c.pid);
  wait_cpu(c.pid, cpu0, 150 * MS, 200);
  em_pmu_reading_t r[4][2];
  assert_int_equal(em_pmu_read(p, r[0], 2), 0);
  assert_true(r[0][0].present && r[0][0].value >= 100 * MS);
  assert_int_equal(write(c.cmd, "s", 1), 1);
  child_wait_ack(&c); /* Joined; the kernel may still be finishing its exit. */
  for (int tries = 0; threads_of(c.pid) != 1 && tries < 500; tries++) {
    sleep_ms(2);
  }
  assert_int_equal(threads_of(c.pid), 1);
  for (size_t k = 1; k < 4; k++) {
    sleep_ms(50);
    assert_int_equal(em_pmu_read(p, r[k], 2), 0);
    for (size_t e = 0; e < 2; e++) {
      assert_true(r[k][e].present);
      if (r[k][e].value < r[k - 1][e].value) {
        fail_msg("%s went down from %" PRIu64 " to %" PRIu64 " after the thread exited", names[e],
                 r[k - 1][e].value, r[k][e].value);
      }
    }
  }
  /* Only the sleeping main thread is left: the sum stays put, and includes the thread. */
  assert_true(r[3][0].value - r[1][0].value < 20 * MS);
  child_kill(&c);
  em_pmu_free(p);
}

/*
 * What the kernel does once the target dies (Linux 6.x, checked here): read() of its
 * inherited group keeps succeeding with the final counts, frozen, zombie or reaped; it never
 * fails with ESRCH. em_pmu_read() returns 0 and the readings stop growing. Opening a dead pid
 * (zombie or reaped) fails with ESRCH.
 */
static void real_dead_target_reads_frozen_counts_and_cannot_be_opened(void **state) {
  (void)state;
  require_perf();
  static const char *const names[] = {"task-clock", "context-switches", "page-faults"};
  child_t c = child_start(CHILD_SPIN);
  pid_t pid = c.pid;
  em_pmu_t *p = real_pmu_new(pid, names, 3);
  sleep_ms(100);
  em_pmu_reading_t live[3], zombie[3], dead[3], later[3];
  assert_int_equal(em_pmu_read(p, live, 3), 0);
  assert_true(live[0].present && live[0].value > 0);

  assert_int_equal(kill(pid, SIGKILL), 0);
  siginfo_t info;
  assert_int_equal(waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT), 0); /* A zombie now. */
  assert_int_equal(em_pmu_read(p, zombie, 3), 0);
  em_pmu_event_t ev;
  assert_int_equal(em_pmu_resolve("task-clock", &ev), 0);
  em_pmu_target_t target = {.pid = pid};
  em_pmu_t *q = NULL;
  assert_int_equal(em_pmu_new(&q, &ev, 1, &target, &em_pmu_sys_linux), -ESRCH);

  child_kill(&c); /* Reaped. */
  assert_int_equal(em_pmu_read(p, dead, 3), 0);
  sleep_ms(50);
  assert_int_equal(em_pmu_read(p, later, 3), 0);
  for (size_t e = 0; e < 3; e++) {
    assert_true(zombie[e].present && dead[e].present && later[e].present);
    assert_true(zombie[e].value >= live[e].value);
    assert_true(dead[e].value == zombie[e].value);
    assert_true(later[e].value == dead[e].value);
  }
  assert_int_equal(em_pmu_new(&q, &ev, 1, &target, &em_pmu_sys_linux), -ESRCH);
  em_pmu_free(p);
}

/* The cgroup v2 mount point, or false. */
static bool cgroup2_mount(char *out, size_t cap) {
  FILE *f = fopen("/proc/self/mountinfo", "r");
  if (f == NULL) {
    return false;
  }
  char line[1024];
  bool found = false;
  while (!found && fgets(line, sizeof(line), f) != NULL) {
    char mnt[512], fstype[64];
    const char *dash = strstr(line, " - ");
    if (dash == NULL || sscanf(line, "%*s %*s %*s %*s %511s", mnt) != 1 ||
        sscanf(dash, " - %63s", fstype) != 1) {
      continue;
    }
    if (strcmp(fstype, "cgroup2") == 0) {
      snprintf(out, cap, "%s", mnt);
      found = true;
    }
  }
  fclose(f);
  return found;
}

static void real_cgroup_target_counts_its_member_on_every_cpu(void **state) {
  (void)state;
  require_perf();
  char mnt[512], dir[700], procs[800];
  if (!cgroup2_mount(mnt, sizeof(mnt))) {
    print_message("no cgroup v2 mount; skipping\n");
    skip();
  }
  snprintf(dir, sizeof(dir), "%s/edgemon-test-pmu-%d", mnt, (int)getpid());
  if (mkdir(dir, 0755) != 0) {
    print_message("cannot create %s: %s; skipping\n", dir, strerror(errno));
    skip();
  }
  child_t c = child_start(CHILD_SPIN);
  snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
  int fd = open(procs, O_WRONLY | O_CLOEXEC);
  char text[32];
  int len = snprintf(text, sizeof(text), "%d", (int)c.pid);
  bool moved = fd >= 0 && write(fd, text, (size_t)len) == len;
  if (fd >= 0) {
    close(fd);
  }
  if (!moved) {
    child_kill(&c);
    rmdir(dir);
    print_message("cannot move a process into %s; skipping\n", dir);
    skip();
  }
  static const char *const names[] = {"cycles", "task-clock", "context-switches"};
  em_pmu_event_t ev[3];
  resolve_all(names, 3, ev);
  em_pmu_target_t target = {.cgroup = dir, .n_cpus = 0};
  em_pmu_t *p = NULL;
  uint64_t cpu0 = proc_cpu_ns(c.pid);
  assert_int_equal(em_pmu_new(&p, ev, 3, &target, &em_pmu_sys_linux), 0);
  wait_cpu(c.pid, cpu0, 100 * MS, 200);
  em_pmu_reading_t r[3];
  assert_int_equal(em_pmu_read(p, r, 3), 0);
  child_kill(&c);
  em_pmu_free(p);
  for (int tries = 0; rmdir(dir) != 0 && tries < 50; tries++) {
    sleep_ms(10); /* The killed member leaves the cgroup asynchronously. */
  }
  assert_false(r[0].present);
  assert_contains(r[0].reason, "(ENOENT)");
  if (!r[1].present) {
    fail_msg("task-clock of the cgroup absent: %s", r[1].reason);
  }
  assert_true(r[1].value > 50 * MS); /* >= 100 ms of one spinning process, over CPUs. */
}

int main(int argc, char **argv) {
  em_log_set_level(EM_LOG_WARN); /* The absent-event lines are expected here. */
  const struct CMUnitTest unit[] = {
      cmocka_unit_test(scale_table),
      cmocka_unit_test(ratio_table),
      cmocka_unit_test(resolve_every_generic_name),
      cmocka_unit_test(resolve_unknown_name_is_enoent),
      cmocka_unit_test(orin_opens_two_hw_groups_with_documented_attributes),
      cmocka_unit_test(orin_multiplexed_groups_are_scaled_and_unrun_group_is_absent),
      cmocka_unit_test(paranoid3_every_event_absent_with_eacces_reason),
      cmocka_unit_test(refusal_names_what_is_missing),
      cmocka_unit_test(kernel_counting_refused_counts_user_only_and_drops_kernel_only_events),
      cmocka_unit_test(old_kernel_group_einval_falls_back_to_per_event_reads_with_same_readings),
      cmocka_unit_test(refused_leader_lets_next_event_lead),
      cmocka_unit_test(cgroup_target_scales_per_cpu_sums_and_skips_offline_cpus),
      cmocka_unit_test(garbled_short_and_failing_reads_are_absent_for_that_read),
      cmocka_unit_test(every_truncated_group_read_is_absent_without_crash),
      cmocka_unit_test(target_gone_during_open_returns_esrch_and_closes_all),
      cmocka_unit_test(new_rejects_bad_arguments),
      cmocka_unit_test(read_fills_exactly_the_readings_asked_for),
      cmocka_unit_test(three_threads_replay_sums_per_thread_scaled_counts_exactly),
      cmocka_unit_test(thread_gone_after_open_keeps_its_last_counts_and_is_not_read_again),
      cmocka_unit_test(thread_gone_between_listing_and_open_is_skipped_silently),
      cmocka_unit_test(failing_thread_listing_counts_the_pid_alone_with_a_warning),
      cmocka_unit_test(failing_open_on_another_thread_stops_there_with_partial_counts),
      cmocka_unit_test(more_threads_than_the_cap_counts_the_cap_and_warns_once),
      cmocka_unit_test(event_absent_on_the_pid_is_not_tried_on_its_other_threads),
      cmocka_unit_test(two_part_event_counts_on_both_pmus_and_scales_each_threads_parts_together),
      cmocka_unit_test(cgroup_target_opens_each_part_on_its_pmus_cpus_and_sums_the_scaled_values),
      cmocka_unit_test(one_part_refused_counts_on_the_other_and_says_which),
      cmocka_unit_test(every_part_refused_is_absent_with_the_reason),
      cmocka_unit_test(config1_and_config2_of_each_part_reach_perf_event_attr),
      cmocka_unit_test(cpu_set_helpers),
  };
  /* The live kernel: its /proc/self/task, perf_event_open and cgroup v2. Run with --live, labelled
   * integration (CMakeLists.txt). */
  const struct CMUnitTest live[] = {
      cmocka_unit_test(linux_list_threads_names_every_thread_and_counts_past_the_cap),
      cmocka_unit_test(real_default_list_software_counts_hardware_absent_with_reason),
      cmocka_unit_test(real_inherit_counts_thread_created_after_open),
      cmocka_unit_test(real_thread_existing_before_open_is_counted),
      cmocka_unit_test(real_exited_thread_keeps_its_counts_in_the_sum),
      cmocka_unit_test(real_dead_target_reads_frozen_counts_and_cannot_be_opened),
      cmocka_unit_test(real_cgroup_target_counts_its_member_on_every_cpu),
  };
  return EM_RUN_UNIT_OR_LIVE(argc, argv, unit, live);
}
