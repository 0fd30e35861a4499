/*
 * pmu.c - see pmu.h. Counting groups of perf events and reading each group with one read().
 *
 * Owns: every perf fd it opened (kept in groups, leader first; closed by em_pmu_free()), the
 * cgroup directory fd only while em_pmu_new() runs, and one heap block plus the group array,
 * both allocated by em_pmu_new(); the group array is sized there for every thread (or CPU)
 * and every part of every event (EM_PMU_MAX_FDS at most for a process target), including
 * each group's last reading. em_pmu_read() allocates nothing:
 * each read() lands in the fixed buffer `buf` of the struct. Single-threaded: one em_pmu_t
 * belongs to the loop.
 *
 * Slots: a cgroup target has one slot per CPU; a process target one per counted thread (at
 * most EM_PMU_MAX_THREADS, and no more than EM_PMU_MAX_FDS counters in all). The
 * threads are listed before anything is opened (a thread created after the open of its
 * creator is inherited; listed after it, it would be counted twice). The pid itself is the
 * first slot and is opened like a CPU of a cgroup: an event that fails there is absent with
 * the reason. Every other thread then opens exactly the events present on the pid, all or
 * none: when one of its opens fails, what it opened is closed again; ESRCH (it exited since
 * the listing) skips it silently, any other error stops the opening of further threads
 * (partial counts, a warning: EMFILE would fail for every later thread too).
 *
 * How events are placed (em_pmu_new, in each slot):
 *
 *   1. Events of one kind share a group: the hardware kind (generic hardware, cache and raw
 *      events) and one kind per other perf type (software, each PMU's dynamic type). The
 *      first event of a kind that opens leads its group; when a leader candidate is refused,
 *      the next one tries.
 *   2. A member that the kernel refuses with EINVAL could not fit beside the group (ARM PMUs
 *      check a group against their counters at open): it leads a new group of the same kind,
 *      which the kernel then multiplexes with the first (time_running < time_enabled).
 *   3. Kernel counting first: exclude_kernel=0. When the kernel says EACCES/EPERM
 *      (perf_event_paranoid >= 2 without CAP_PERFMON) the event is tried again with
 *      exclude_kernel=1 and, once that works, every later event counts user space only.
 *      context-switches and cpu-migrations happen only inside the kernel and would read 0
 *      forever in user-only mode: they are not retried and stay absent with the reason.
 *   4. Kernels before 4.13 refuse inherit=1 with PERF_FORMAT_GROUP (EINVAL). When the first
 *      leader of a process target gets EINVAL and opens without PERF_FORMAT_GROUP, every
 *      event is opened and read on its own from then on (per-event mode); a reading has the
 *      same form either way.
 *
 * A read: one read() per group; values[i] belongs to the i-th member added. The groups of a
 * slot are contiguous in the array (opened slot by slot) and are read together: per event,
 * the raw counts of its parts in that slot are summed, their time_running summed, and the
 * largest of their time_enabled taken (the parts of a thread are all enabled while it runs
 * anywhere, each running only on its own PMU's CPUs: pmu.h, "Parts"); the slot's count is
 * that sum scaled with em_pmu_scale(). An event of one part (or a cgroup CPU, where only the
 * parts of that CPU's PMU are open) is thus scaled by its own group's times, as before
 * parts. The slots' counts are summed per event, as perf stat aggregates CPUs and threads;
 * the slots' times are summed too, and running_ratio = sum(running) / sum(enabled) is the
 * enabled-weighted mean of the slots' ratios. A slot that was enabled but never ran adds
 * nothing; an event none of whose slots ran while enabled is absent for that read. Each
 * group keeps its last good read (raw counts and times): when a thread other than the pid is
 * gone (its read() says ESRCH or end of file; Linux 6.18 keeps answering with the final
 * counts instead), the group is final and adds that read from then on without a read().
 *
 * Parts: part 0 of an event is its own type/config, the others em_pmu_event_t.parts. Each
 * part is placed like an event of its type (rules 1-4 below, per part): parts of different
 * types never share a group, and a group holds at most EM_PMU_MAX_EVENTS members (then the
 * next member leads a new group). On a cgroup CPU only the parts whose PMU has that CPU are
 * opened. Another thread opens exactly the parts present on the pid. An event holds fds
 * while any of its parts does; the first failing part's reason is the event's reason.
 */
#define _GNU_SOURCE /* syscall(), O_DIRECTORY, O_CLOEXEC under -std=c11. */

#include "pmu.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/perf_event.h>

#include "edgemon/common/file.h"
#include "log.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#define PARANOID_PATH    "/proc/sys/kernel/perf_event_paranoid"
#define PARANOID_UNKNOWN EM_PMU_PARANOID_UNKNOWN

/* u64 words of the largest read: nr, time_enabled, time_running, values[EM_PMU_MAX_EVENTS],
 * and one more so that a read longer than any group we opened is seen as such. */
#define READ_WORDS (3 + EM_PMU_MAX_EVENTS + 1)

/* One group: the fds of its members, leader first, in the order they were added. A member is
 * one part of one event. */
typedef struct {
  int cpu;                          /* CPU for a cgroup target; -1 for a process target. */
  pid_t tid;                        /* Thread for a process target; 0 for a cgroup target. */
  uint32_t kind;                    /* event_kind() of its members. */
  bool grouped;                     /* read_format has PERF_FORMAT_GROUP; else one event. */
  bool full;                        /* A member did not fit: the next of this kind starts anew. */
  bool logged;                      /* A failing read of this group was logged already. */
  bool final;                       /* Its thread is gone: `last` is final, no more read(). */
  size_t n;                         /* Members, at most EM_PMU_MAX_EVENTS. */
  uint8_t ev[EM_PMU_MAX_EVENTS];    /* Event index of each member (= order of values[]). */
  uint8_t part[EM_PMU_MAX_EVENTS];  /* Part of that event. */
  int fd[EM_PMU_MAX_EVENTS];        /* Its fd; fd[0] is the leader, the one read(). */
  uint64_t last[EM_PMU_MAX_EVENTS]; /* Raw count of each member, last good read. */
  uint64_t last_enabled_ns, last_running_ns; /* Its times at that read. */
} group_t;

/* One part of a requested event: its counters on one PMU type. */
typedef struct {
  uint32_t type;
  uint64_t config, config1, config2;
  em_pmu_cpus_t cpus;               /* Empty: every CPU. */
  size_t n_open;                    /* fds it holds (threads, CPUs); 0 = absent. */
  bool tried;                       /* An open was attempted (a cgroup slot had its CPU). */
  char reason[EM_PMU_REASON_BYTES]; /* Why it failed, first reason. */
  bool reason_offline;              /* reason says only "CPU offline" so far. */
} part_t;

/* One requested event. */
typedef struct {
  char name[48];
  part_t part[EM_PMU_MAX_PARTS]; /* part[0]: the event's own type/config; then its parts. */
  size_t n_parts;
  size_t n_open;                          /* fds it holds (parts, CPUs); 0 = absent. */
  char reason[EM_PMU_REASON_BYTES];       /* Why absent since em_pmu_new(). */
  bool reason_offline;                    /* reason says only "CPU offline" so far. */
  uint64_t value, enabled_ns, running_ns; /* Sums of one em_pmu_read(); value scaled. */
  uint64_t slot_raw, slot_enabled_ns, slot_running_ns; /* One slot's parts, being summed. */
  bool slot_seen;                                      /* A group of this slot had it. */
  bool read_failed;                                    /* One of its groups failed this read. */
  char read_reason[EM_PMU_REASON_BYTES];               /* Why, for this read. */
} event_t;

struct em_pmu {
  em_pmu_sys_t sys;
  size_t n;
  event_t ev[EM_PMU_MAX_EVENTS];
  group_t *groups; /* n_groups of them, sized by em_pmu_new(). */
  size_t n_groups;
  pid_t pid;        /* Process target, or 0. */
  size_t n_threads; /* Threads of a process target with open events. */
  size_t n_fds;     /* Counters open. */
  int cgroup_fd;    /* Cgroup target: its directory, open during em_pmu_new() only; else -1. */
  bool cgroup;
  int paranoid;             /* perf_event_paranoid at em_pmu_new(), or PARANOID_UNKNOWN. */
  bool user_only;           /* The kernel refused kernel counting: exclude_kernel=1 from then on. */
  bool per_event;           /* The kernel refused PERF_FORMAT_GROUP with inherit: no groups. */
  uint64_t buf[READ_WORDS]; /* The bytes of one read(). */
};

/* ---- Names ---- */

/*
 * The generic event names: the one table the agent resolves (em_pmu_resolve) and its config
 * validates against (em_pmu_is_generic). Canonical names in the order --check and config
 * messages list them; perf's aliases (cpu-cycles, branches, cs, faults, ...) right after the
 * name they stand for, marked so lists can leave them out.
 */
static const struct {
  const char *name;
  uint32_t type;
  uint64_t config;
  bool alias;
} names[] = {
    /* Generic hardware events, with perf's aliases. */
    {"cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, false},
    {"cpu-cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, true},
    {"instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, false},
    {"cache-references", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES, false},
    {"cache-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES, false},
    {"branch-instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_INSTRUCTIONS, false},
    {"branches", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_INSTRUCTIONS, true},
    {"branch-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES, false},
    {"stalled-cycles-frontend", PERF_TYPE_HARDWARE, PERF_COUNT_HW_STALLED_CYCLES_FRONTEND, false},
    {"idle-cycles-frontend", PERF_TYPE_HARDWARE, PERF_COUNT_HW_STALLED_CYCLES_FRONTEND, true},
    {"stalled-cycles-backend", PERF_TYPE_HARDWARE, PERF_COUNT_HW_STALLED_CYCLES_BACKEND, false},
    {"idle-cycles-backend", PERF_TYPE_HARDWARE, PERF_COUNT_HW_STALLED_CYCLES_BACKEND, true},
    {"ref-cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_REF_CPU_CYCLES, false},
    {"bus-cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BUS_CYCLES, false},
    /* Software events. */
    {"task-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, false},
    {"cpu-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, false},
    {"context-switches", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES, false},
    {"cs", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES, true},
    {"cpu-migrations", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS, false},
    {"migrations", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS, true},
    {"page-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, false},
    {"faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, true},
    {"minor-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MIN, false},
    {"major-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MAJ, false},
};

const char *em_pmu_generic_name(size_t i, bool *alias) {
  if (i >= ARRAY_LEN(names)) {
    return NULL;
  }
  if (alias != NULL) {
    *alias = names[i].alias;
  }
  return names[i].name;
}

bool em_pmu_is_generic(const char *name) {
  for (size_t i = 0; name != NULL && i < ARRAY_LEN(names); i++) {
    if (strcmp(name, names[i].name) == 0) {
      return true;
    }
  }
  return false;
}

int em_pmu_resolve(const char *name, em_pmu_event_t *out) {
  if (name == NULL || out == NULL) {
    return -EINVAL;
  }
  for (size_t i = 0; i < ARRAY_LEN(names); i++) {
    if (strcmp(name, names[i].name) != 0) {
      continue;
    }
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s", name);
    out->type = names[i].type;
    out->config = names[i].config;
    return 0;
  }
  return -ENOENT;
}

void em_pmu_cpus_add(em_pmu_cpus_t *set, unsigned cpu) {
  if (set != NULL && cpu < EM_PMU_MAX_CPUS) {
    set->bits[cpu / 64] |= UINT64_C(1) << (cpu % 64);
  }
}

bool em_pmu_cpus_has(const em_pmu_cpus_t *set, unsigned cpu) {
  if (set == NULL) {
    return false;
  }
  bool empty = true;
  for (size_t w = 0; w < ARRAY_LEN(set->bits) && empty; w++) {
    empty = set->bits[w] == 0;
  }
  if (empty) {
    return true;
  }
  return cpu < EM_PMU_MAX_CPUS && (set->bits[cpu / 64] >> (cpu % 64) & 1u) != 0;
}

/* ---- The real system calls ---- */

static int sys_open(void *ctx, struct perf_event_attr *attr, pid_t pid, int cpu, int group_fd,
                    unsigned long flags) {
  (void)ctx;
  long fd = syscall(SYS_perf_event_open, attr, pid, cpu, group_fd, flags);
  if (fd < 0) {
    return -errno;
  }
  return (int)fd;
}

static ssize_t sys_read(void *ctx, int fd, void *buf, size_t len) {
  (void)ctx;
  ssize_t n = read(fd, buf, len);
  if (n < 0) {
    return -errno;
  }
  return n;
}

static int sys_close(void *ctx, int fd) {
  (void)ctx;
  if (close(fd) < 0) {
    return -errno;
  }
  return 0;
}

/* The entries of /proc/<pid>/task that are thread ids. See em_pmu_sys_t. */
static int sys_list_threads(void *ctx, pid_t pid, pid_t *out, size_t cap) {
  (void)ctx;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%ld/task", (long)pid);
  DIR *dir = opendir(path);
  if (dir == NULL) {
    return -errno;
  }
  size_t count = 0;
  int err = 0;
  for (;;) {
    errno = 0;
    const struct dirent *de = readdir(dir);
    if (de == NULL) {
      err = errno;
      break;
    }
    if (de->d_name[0] < '0' || de->d_name[0] > '9') {
      continue; /* ".", "..". */
    }
    char *end = NULL;
    errno = 0;
    long tid = strtol(de->d_name, &end, 10);
    if (errno != 0 || *end != '\0' || tid <= 0 || tid > INT_MAX) {
      continue;
    }
    if (count < cap) {
      out[count] = (pid_t)tid;
    }
    count++;
  }
  closedir(dir);
  if (err != 0) {
    return -err;
  }
  return count > INT_MAX ? INT_MAX : (int)count;
}

const em_pmu_sys_t em_pmu_sys_linux = {sys_open, sys_read, sys_close, sys_list_threads, NULL};

/* ---- Arithmetic ---- */

static uint64_t sat_add(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

#if defined(__SIZEOF_INT128__) && !defined(EM_PMU_NO_INT128)
__extension__ typedef unsigned __int128 u128_t;

/* a * b / c rounded down, UINT64_MAX when it does not fit. c > 0. */
static uint64_t mul_div(uint64_t a, uint64_t b, uint64_t c) {
  u128_t q = (u128_t)a * b / c;
  return q > UINT64_MAX ? UINT64_MAX : (uint64_t)q;
}
#else
/*
 * a * b / c rounded down, UINT64_MAX when it does not fit. c > 0. Without a 128-bit type:
 * the 128-bit product as hi:lo from 32-bit halves, then restoring division one bit at a time
 * (the quotient fits 64 bits once hi < c).
 */
static uint64_t mul_div(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t a_lo = a & 0xffffffffu, a_hi = a >> 32;
  uint64_t b_lo = b & 0xffffffffu, b_hi = b >> 32;
  uint64_t p0 = a_lo * b_lo, p1 = a_lo * b_hi, p2 = a_hi * b_lo, p3 = a_hi * b_hi;
  uint64_t mid = (p0 >> 32) + (p1 & 0xffffffffu) + (p2 & 0xffffffffu);
  uint64_t lo = (p0 & 0xffffffffu) | (mid << 32);
  uint64_t hi = p3 + (p1 >> 32) + (p2 >> 32) + (mid >> 32);
  if (hi >= c) {
    return UINT64_MAX;
  }
  uint64_t rem = hi, q = 0;
  for (int bit = 63; bit >= 0; bit--) {
    bool carry = (rem >> 63) != 0; /* rem << 1 would lose a bit: it is >= c for sure. */
    rem = (rem << 1) | ((lo >> bit) & 1u);
    q <<= 1;
    if (carry || rem >= c) {
      rem -= c;
      q |= 1u;
    }
  }
  return q;
}
#endif

bool em_pmu_scale(uint64_t raw, uint64_t enabled, uint64_t running, uint64_t *out) {
  if (out == NULL) {
    return false;
  }
  *out = 0;
  if (running == 0) {
    return false;
  }
  if (enabled <= running) { /* Not multiplexed, or clock skew: never scale down. */
    *out = raw;
    return true;
  }
  *out = mul_div(raw, enabled, running);
  return true;
}

bool em_pmu_ratio(bool num_present, uint64_t num, bool den_present, uint64_t den, double *out) {
  if (out == NULL) {
    return false;
  }
  *out = 0.0;
  if (!num_present || !den_present || den == 0) {
    return false;
  }
  *out = (double)num / (double)den;
  return true;
}

/* ---- Opening ---- */

static const char *errname(int err) {
  switch (err) {
  case EPERM:
    return "EPERM";
  case ENOENT:
    return "ENOENT";
  case ESRCH:
    return "ESRCH";
  case EINTR:
    return "EINTR";
  case EIO:
    return "EIO";
  case E2BIG:
    return "E2BIG";
  case EBADF:
    return "EBADF";
  case EAGAIN:
    return "EAGAIN";
  case ENOMEM:
    return "ENOMEM";
  case EACCES:
    return "EACCES";
  case EFAULT:
    return "EFAULT";
  case EBUSY:
    return "EBUSY";
  case ENODEV:
    return "ENODEV";
  case EINVAL:
    return "EINVAL";
  case ENFILE:
    return "ENFILE";
  case EMFILE:
    return "EMFILE";
  case ENOSPC:
    return "ENOSPC";
  case ENOSYS:
    return "ENOSYS";
  case EOPNOTSUPP:
    return "EOPNOTSUPP";
  case EOVERFLOW:
    return "EOVERFLOW";
  }
  return NULL;
}

/* "<strerror> (<ERRNAME>)" for a positive errno. */
static void describe_errno(char *dst, size_t cap, const char *what, int err) {
  const char *name = errname(err);
  if (name != NULL) {
    snprintf(dst, cap, "%s: %s (%s)", what, strerror(err), name);
  } else {
    snprintf(dst, cap, "%s: %s (errno %d)", what, strerror(err), err);
  }
}

/* The effective capabilities of this process (CapEff in /proc/self/status), or 0. */
static uint64_t read_cap_eff(void) {
  char text[4096];
  if (em_file_read_small("/proc/self/status", text, sizeof(text), NULL) <= 0) {
    return 0;
  }
  const char *line = strstr(text, "\nCapEff:");
  return line ? strtoull(line + 8, NULL, 16) : 0;
}

void em_pmu_refusal_reason(int paranoid, uint64_t cap_eff, int err, char *dst, size_t cap) {
  const char *name = errname(err) ? errname(err) : "refused";
  bool perfmon = cap_eff & (UINT64_C(1) << EM_CAP_PERFMON);
  bool admin = cap_eff & (UINT64_C(1) << EM_CAP_SYS_ADMIN);
  if (paranoid == PARANOID_UNKNOWN) {
    snprintf(dst, cap, "not permitted: perf_event_paranoid unreadable, CAP_PERFMON %s (%s)",
             perfmon ? "held" : "missing", name);
  } else if (paranoid > 2 && !admin) {
    /* Debian's and Ubuntu's kernels add levels above 2 that refuse perf_event_open without
     * CAP_SYS_ADMIN (newer patches accept CAP_PERFMON too; a kernel that refused holds an
     * older one). 60-edgemon.conf (the package's sysctl file) sets 2 at boot. */
    snprintf(dst, cap,
             "not permitted: perf_event_paranoid %d (distribution level) refuses it%s; "
             "set it to 2 (%s)",
             paranoid, perfmon ? " even with CAP_PERFMON" : "", name);
  } else if (!perfmon && !admin) {
    snprintf(dst, cap, "not permitted: perf_event_paranoid %d and no CAP_PERFMON; grant it (%s)",
             paranoid, name);
  } else {
    snprintf(dst, cap,
             "not permitted with CAP_PERFMON (paranoid %d): needs CAP_SYS_PTRACE, or "
             "a security module refused (%s)",
             paranoid, name);
  }
}

/* perf_event_paranoid, or PARANOID_UNKNOWN (no file: a kernel without perf events). */
static int read_paranoid(void) {
  char text[16];
  ssize_t n = em_file_read_small(PARANOID_PATH, text, sizeof(text), NULL);
  if (n <= 0) {
    return PARANOID_UNKNOWN;
  }
  char *end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno != 0 || end == text || v < INT_MIN + 1 || v > INT_MAX) {
    return PARANOID_UNKNOWN;
  }
  return (int)v;
}

void em_pmu_refusal(int err, char *dst, size_t cap) {
  em_pmu_refusal_reason(read_paranoid(), read_cap_eff(), err, dst, cap);
}

/* The reason an event is absent after perf_event_open() said `err` (< 0). */
static void open_reason(const em_pmu_t *p, int err, char *dst, size_t cap) {
  int e = -err;
  if (e == ENOENT || e == EOPNOTSUPP) {
    snprintf(dst, cap, "not supported by this CPU or kernel (%s)", errname(e));
  } else if (e == EACCES || e == EPERM) {
    em_pmu_refusal_reason(p->paranoid, read_cap_eff(), e, dst, cap);
  } else if (e == ESRCH) {
    snprintf(dst, cap, "target gone (ESRCH)");
  } else if (e == EBADF && p->cgroup) {
    snprintf(dst, cap, "not a cgroup with perf_event support (EBADF)");
  } else if (e == ENODEV && p->cgroup) {
    snprintf(dst, cap, "no online CPU to count on (ENODEV)");
  } else {
    describe_errno(dst, cap, "perf_event_open failed", e);
  }
}

/* Groups are per kind: the generic hardware, cache and raw types share the hardware group;
 * every other type (software, each PMU's dynamic type) has its own, so the parts of one event
 * never share a group (a group spans one PMU). */
static uint32_t event_kind(const part_t *e) {
  if (e->type == PERF_TYPE_HW_CACHE || e->type == PERF_TYPE_RAW) {
    return PERF_TYPE_HARDWARE;
  }
  return e->type;
}

/* Events that only ever happen inside the kernel: 0 forever with exclude_kernel=1. */
static bool kernel_only(const part_t *e) {
  return e->type == PERF_TYPE_SOFTWARE &&
         (e->config == PERF_COUNT_SW_CONTEXT_SWITCHES || e->config == PERF_COUNT_SW_CPU_MIGRATIONS);
}

/*
 * One perf_event_open() of part `e` on thread `tid` (process target) or `cpu` (cgroup target)
 * with the attributes of this em_pmu_t. Returns fd or -errno.
 */
static int try_open(em_pmu_t *p, const part_t *e, int group_fd, pid_t tid, int cpu, bool grouped,
                    bool user_only) {
  struct perf_event_attr attr;
  memset(&attr, 0, sizeof(attr));
  attr.size = sizeof(attr);
  attr.type = e->type;
  attr.config = e->config;
  attr.config1 = e->config1;
  attr.config2 = e->config2;
  attr.disabled = 0; /* Count from open: values are cumulative since em_pmu_new(). */
  attr.inherit = p->cgroup ? 0 : 1;
  attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
  if (grouped) {
    attr.read_format |= PERF_FORMAT_GROUP;
  }
  attr.exclude_hv = 1;
  attr.exclude_kernel = user_only ? 1 : 0;
  unsigned long flags = PERF_FLAG_FD_CLOEXEC;
  pid_t pid = tid;
  if (p->cgroup) {
    flags |= PERF_FLAG_PID_CGROUP;
    pid = p->cgroup_fd;
  }
  return p->sys.open(p->sys.ctx, &attr, pid, cpu, group_fd, flags);
}

/*
 * Opens part `k` of event `i` with kernel counting unless the kernel already refused it, and
 * retries user-only once on EACCES/EPERM (rule 3). Returns fd or -errno.
 */
static int open_counting(em_pmu_t *p, size_t i, size_t k, int group_fd, pid_t tid, int cpu,
                         bool grouped) {
  const part_t *e = &p->ev[i].part[k];
  bool user_only = p->user_only && !kernel_only(e);
  int fd = try_open(p, e, group_fd, tid, cpu, grouped, user_only);
  if ((fd != -EACCES && fd != -EPERM) || user_only || kernel_only(e)) {
    return fd;
  }
  int retry = try_open(p, e, group_fd, tid, cpu, grouped, true);
  if (retry < 0) {
    return fd; /* Report the first refusal: it names the real cause. */
  }
  if (!p->user_only) {
    p->user_only = true;
    EM_INFO("pmu: counting user space only: the kernel refuses kernel counting "
            "(perf_event_paranoid %d, no CAP_PERFMON)",
            p->paranoid);
  }
  return retry;
}

/* The newest group of `kind` on `tid` and `cpu` that still takes members, or NULL. */
static group_t *open_group(em_pmu_t *p, uint32_t kind, pid_t tid, int cpu) {
  for (size_t g = p->n_groups; g > 0; g--) {
    group_t *grp = &p->groups[g - 1];
    if (grp->tid == tid && grp->cpu == cpu && grp->kind == kind) {
      return grp->full || !grp->grouped || grp->n >= EM_PMU_MAX_EVENTS ? NULL : grp;
    }
  }
  return NULL;
}

/* Keeps the reason of a failed open in reason[] (EM_PMU_REASON_BYTES): the first reason
 * wins, except that "CPU offline" (ENODEV, cgroup targets) gives way. */
static void note_reason(const em_pmu_t *p, int err, char *reason, bool *offline) {
  if (reason[0] != '\0' && (!*offline || err == -ENODEV)) {
    return;
  }
  open_reason(p, err, reason, EM_PMU_REASON_BYTES);
  *offline = err == -ENODEV;
}

/* Notes a failed open of part `k` of event `i`: -ESRCH ends em_pmu_new(), anything else is a
 * reason, of the part and of the event. */
static int open_failed(em_pmu_t *p, size_t i, size_t k, int err) {
  event_t *e = &p->ev[i];
  if (err == -ESRCH && !p->cgroup) {
    return -ESRCH;
  }
  note_reason(p, err, e->part[k].reason, &e->part[k].reason_offline);
  note_reason(p, err, e->reason, &e->reason_offline);
  return 0;
}

/* Counts a new counter of part `k` of event `i`. */
static void counter_opened(em_pmu_t *p, size_t i, size_t k) {
  p->ev[i].n_open++;
  p->ev[i].part[k].n_open++;
  p->n_fds++;
}

/*
 * Places part `k` of event `i` on thread `tid` / `cpu` following rules 1, 2 and 4 of the
 * file comment. Returns 0, or -ENOMEM when the group array is full (not reached: it is sized
 * for every part in every slot); *open_err is 0 when the part opened, else the open's -errno.
 */
static int place_event(em_pmu_t *p, size_t i, size_t k, pid_t tid, int cpu, size_t cap,
                       int *open_err) {
  event_t *e = &p->ev[i];
  uint32_t kind = event_kind(&e->part[k]);
  *open_err = 0;
  e->part[k].tried = true;
  group_t *g = p->per_event ? NULL : open_group(p, kind, tid, cpu);
  if (g != NULL) {
    int fd = open_counting(p, i, k, g->fd[0], tid, cpu, true);
    if (fd >= 0) {
      g->ev[g->n] = (uint8_t)i;
      g->part[g->n] = (uint8_t)k;
      g->fd[g->n] = fd;
      g->n++;
      counter_opened(p, i, k);
      return 0;
    }
    if (fd != -EINVAL) {
      *open_err = fd;
      return 0;
    }
    /* EINVAL as a member: perhaps it does not fit beside the group; try it as a leader. */
  }
  if (p->n_groups >= cap) {
    return -ENOMEM;
  }
  int fd = open_counting(p, i, k, -1, tid, cpu, !p->per_event);
  if (fd == -EINVAL && !p->per_event && !p->cgroup && p->n_groups == 0) {
    /* Maybe a kernel before 4.13, which refuses PERF_FORMAT_GROUP with inherit (rule 4). */
    int alone = open_counting(p, i, k, -1, tid, cpu, false);
    if (alone >= 0) {
      p->per_event = true;
      EM_INFO("pmu: the kernel refuses group reads of inherited events (EINVAL); reading "
              "each event on its own");
      fd = alone;
    }
  }
  if (fd < 0) {
    *open_err = fd;
    return 0;
  }
  if (g != NULL) {
    g->full = true; /* It opens alone but not beside them: the group is full (rule 2). */
  }
  group_t *ng = &p->groups[p->n_groups++];
  memset(ng, 0, sizeof(*ng));
  ng->cpu = cpu;
  ng->tid = tid;
  ng->kind = kind;
  ng->grouped = !p->per_event;
  ng->n = 1;
  ng->ev[0] = (uint8_t)i;
  ng->part[0] = (uint8_t)k;
  ng->fd[0] = fd;
  counter_opened(p, i, k);
  return 0;
}

/*
 * Opens every part of every event in the slot of the pid itself (tid) or of one CPU of a
 * cgroup target (there only the parts whose PMU has that CPU): a part that fails is absent
 * with the reason. Returns 0, -ESRCH (process target gone) or -ENOMEM.
 */
static int open_slot(em_pmu_t *p, pid_t tid, int cpu, size_t cap) {
  for (size_t i = 0; i < p->n; i++) {
    for (size_t k = 0; k < p->ev[i].n_parts; k++) {
      if (cpu >= 0 && !em_pmu_cpus_has(&p->ev[i].part[k].cpus, (unsigned)cpu)) {
        continue; /* Not a CPU of this part's PMU. */
      }
      int err = 0;
      int rc = place_event(p, i, k, tid, cpu, cap, &err);
      if (rc == 0 && err < 0) {
        rc = open_failed(p, i, k, err);
      }
      if (rc < 0) {
        return rc;
      }
    }
  }
  return 0;
}

/* Closes the groups from `first` on (the newest ones) and forgets them. */
static void drop_groups(em_pmu_t *p, size_t first) {
  while (p->n_groups > first) {
    group_t *grp = &p->groups[--p->n_groups];
    for (size_t m = grp->n; m > 0; m--) { /* Members before their leader. */
      p->sys.close(p->sys.ctx, grp->fd[m - 1]);
      event_t *e = &p->ev[grp->ev[m - 1]];
      e->n_open--;
      e->part[grp->part[m - 1]].n_open--;
      p->n_fds--;
    }
  }
}

/*
 * Opens the event parts that are present on the pid on another of its threads, all or none.
 * Returns 0, or the error of the open that failed (-ESRCH: the thread exited since the
 * listing) after closing what it opened for `tid`.
 */
static int open_thread(em_pmu_t *p, pid_t tid, size_t cap) {
  size_t first = p->n_groups;
  for (size_t i = 0; i < p->n; i++) {
    for (size_t k = 0; k < p->ev[i].n_parts; k++) {
      if (p->ev[i].part[k].n_open == 0) {
        continue; /* Absent on the pid: absent everywhere. */
      }
      int err = 0;
      int rc = place_event(p, i, k, tid, -1, cap, &err);
      if (rc == 0) {
        rc = err;
      }
      if (rc < 0) {
        drop_groups(p, first);
        return rc;
      }
    }
  }
  return 0;
}

/*
 * Orders the listed tids[0..n) (cap entries) for opening: `pid` first, added when the list
 * lacks it (over the last entry when the list is full), and each thread once. Returns the
 * new n.
 */
static size_t order_threads(pid_t pid, pid_t *tids, size_t n, size_t cap) {
  size_t kept = 0;
  for (size_t t = 0; t < n; t++) {
    bool seen = false;
    for (size_t k = 0; k < kept && !seen; k++) {
      seen = tids[k] == tids[t];
    }
    if (!seen) {
      tids[kept++] = tids[t];
    }
  }
  size_t at = kept;
  for (size_t t = 0; t < kept; t++) {
    if (tids[t] == pid) {
      at = t;
      break;
    }
  }
  if (at == kept) {
    at = kept < cap ? kept++ : kept - 1;
  }
  if (at > 0) {
    tids[at] = tids[0];
  }
  tids[0] = pid;
  return kept;
}

/*
 * Opens the events of a process target on its threads, the pid first (see "Slots" in the
 * file comment). Returns 0, -ESRCH when the pid itself is gone, or -ENOMEM.
 */
static int open_process(em_pmu_t *p, const pid_t *tids, size_t n_tids, int listed, size_t cap) {
  int rc = open_slot(p, p->pid, -1, cap);
  if (rc < 0) {
    return rc;
  }
  if (em_pmu_present(p) == 0) {
    return 0; /* Nothing to count on any thread. */
  }
  p->n_threads = 1;
  if (listed < 0) {
    char why[EM_PMU_REASON_BYTES];
    describe_errno(why, sizeof(why), "listing failed", -listed);
    EM_WARN("pmu: cannot list the threads of pid %ld (%s): counting pid %ld alone and what it "
            "creates from now on; its other threads are not counted",
            (long)p->pid, why, (long)p->pid);
    return 0;
  }
  char why[EM_PMU_REASON_BYTES] = "";
  size_t per_thread = p->n_fds; /* Counters of one thread: those the pid has. */
  for (size_t t = 1; t < n_tids; t++) {
    if (p->n_fds + per_thread > EM_PMU_MAX_FDS) {
      snprintf(why, sizeof(why), "at most %d counters are opened, %zu per thread", EM_PMU_MAX_FDS,
               per_thread);
      break;
    }
    rc = open_thread(p, tids[t], cap);
    if (rc == -ESRCH) {
      continue; /* It exited since the listing. */
    }
    if (rc < 0) {
      describe_errno(why, sizeof(why), "perf_event_open failed", -rc);
      break;
    }
    p->n_threads++;
  }
  if (why[0] == '\0' && (size_t)listed > n_tids) {
    snprintf(why, sizeof(why), "at most %d threads are opened", EM_PMU_MAX_THREADS);
  }
  if (why[0] != '\0') {
    EM_WARN("pmu: counts are partial: %zu of the %d threads of pid %ld are counted (%s); a "
            "cgroup target counts them all",
            p->n_threads, listed, (long)p->pid, why);
  }
  return 0;
}

/* Opens the directory of a cgroup target. -ESRCH when it does not exist. */
static int open_cgroup(em_pmu_t *p, const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return errno == ENOENT || errno == ENOTDIR ? -ESRCH : -errno;
  }
  p->cgroup_fd = fd;
  p->cgroup = true;
  return 0;
}

/* Whether every event has at most EM_PMU_MAX_PARTS parts, each on a type of its own. */
static bool parts_valid(const em_pmu_event_t *events, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const em_pmu_event_t *e = &events[i];
    if (e->n_parts > ARRAY_LEN(e->parts)) {
      return false;
    }
    for (size_t a = 0; a < e->n_parts; a++) {
      if (e->parts[a].type == e->type) {
        return false;
      }
      for (size_t b = a + 1; b < e->n_parts; b++) {
        if (e->parts[a].type == e->parts[b].type) {
          return false;
        }
      }
    }
  }
  return true;
}

/* Copies event `d` into `e`: its own type/config as part 0, then its parts. */
static void event_init(event_t *e, const em_pmu_event_t *d) {
  snprintf(e->name, sizeof(e->name), "%.*s", (int)sizeof(d->name) - 1, d->name);
  e->part[0].type = d->type;
  e->part[0].config = d->config;
  e->part[0].config1 = d->config1;
  e->part[0].config2 = d->config2;
  e->part[0].cpus = d->cpus;
  for (size_t k = 0; k < d->n_parts; k++) {
    part_t *pt = &e->part[k + 1];
    pt->type = d->parts[k].type;
    pt->config = d->parts[k].config;
    pt->config1 = d->parts[k].config1;
    pt->config2 = d->parts[k].config2;
    pt->cpus = d->parts[k].cpus;
  }
  e->n_parts = 1 + d->n_parts;
}

/* After the opening: the reason of an absent event, and a log line for each absent part of
 * a present one. */
static void report_absent(em_pmu_t *p, size_t n_slots) {
  for (size_t i = 0; i < p->n; i++) {
    event_t *e = &p->ev[i];
    if (e->n_open > 0) {
      e->reason[0] = '\0';
      for (size_t k = 0; k < e->n_parts && e->n_parts > 1; k++) {
        const part_t *pt = &e->part[k];
        if (pt->n_open == 0) {
          EM_INFO("pmu: %s: part %zu of %zu (type %" PRIu32 ") absent: %s; counting the others",
                  e->name, k + 1, e->n_parts, pt->type,
                  pt->tried ? pt->reason : "no CPU of its PMU counted");
        }
      }
      continue;
    }
    bool tried = false;
    for (size_t k = 0; k < e->n_parts; k++) {
      tried = tried || e->part[k].tried;
    }
    if (!tried) {
      snprintf(e->reason, sizeof(e->reason), "no CPU of its PMU among the %zu counted", n_slots);
    } else if (e->reason[0] == '\0') {
      snprintf(e->reason, sizeof(e->reason), "not opened");
    }
    EM_INFO("pmu: %s absent: %s", e->name, e->reason);
  }
}

int em_pmu_new(em_pmu_t **out, const em_pmu_event_t *events, size_t n,
               const em_pmu_target_t *target, const em_pmu_sys_t *sys) {
  if (out == NULL || (events == NULL && n > 0) || n > EM_PMU_MAX_EVENTS || target == NULL ||
      sys == NULL || sys->open == NULL || sys->read == NULL || sys->close == NULL ||
      sys->list_threads == NULL || !parts_valid(events, n)) {
    return -EINVAL;
  }
  if (target->pid <= 0 && (target->cgroup == NULL || target->cgroup[0] == '\0')) {
    return -EINVAL;
  }
  *out = NULL;
  em_pmu_t *p = calloc(1, sizeof(*p));
  if (p == NULL) {
    return -ENOMEM;
  }
  p->sys = *sys;
  p->n = n;
  p->cgroup_fd = -1;
  size_t n_parts = 0;
  for (size_t i = 0; i < n; i++) {
    event_init(&p->ev[i], &events[i]);
    n_parts += p->ev[i].n_parts;
  }
  p->paranoid = read_paranoid();

  int rc = 0;
  size_t n_slots = 1; /* CPUs of a cgroup target, threads of a process. */
  pid_t tids[EM_PMU_MAX_THREADS];
  int listed = 0;
  if (target->pid > 0) {
    p->pid = target->pid;
    /* Listed before anything is opened: see "Slots" in the file comment. */
    listed = p->sys.list_threads(p->sys.ctx, p->pid, tids, EM_PMU_MAX_THREADS);
    size_t got = listed < 0 ? 0 : (size_t)listed;
    n_slots = order_threads(p->pid, tids, got < EM_PMU_MAX_THREADS ? got : EM_PMU_MAX_THREADS,
                            EM_PMU_MAX_THREADS);
  } else {
    rc = open_cgroup(p, target->cgroup);
    if (rc < 0) {
      goto fail;
    }
    long conf = target->n_cpus > 0 ? target->n_cpus : sysconf(_SC_NPROCESSORS_CONF);
    n_slots = conf > 0 ? (size_t)conf : 1;
  }
  /* Every part of every event may lead a group in every slot; a process target opens at
     most EM_PMU_MAX_FDS counters, each group holding one at least. */
  size_t cap = n_slots * (n_parts > 0 ? n_parts : 1);
  if (!p->cgroup && cap > EM_PMU_MAX_FDS) {
    cap = EM_PMU_MAX_FDS;
  }
  p->groups = calloc(cap, sizeof(*p->groups));
  if (p->groups == NULL) {
    rc = -ENOMEM;
    goto fail;
  }
  if (p->cgroup) {
    for (size_t c = 0; c < n_slots && rc == 0; c++) {
      rc = open_slot(p, 0, (int)c, cap);
    }
  } else {
    rc = open_process(p, tids, n_slots, listed, cap);
  }
  if (rc < 0) {
    goto fail;
  }
  if (p->cgroup_fd >= 0) {
    close(p->cgroup_fd); /* The events hold the cgroup now. */
    p->cgroup_fd = -1;
  }
  if (p->n_groups < cap) { /* Give back what the worst case reserved. */
    group_t *fit = realloc(p->groups, (p->n_groups > 0 ? p->n_groups : 1) * sizeof(*fit));
    if (fit != NULL) {
      p->groups = fit;
    }
  }
  report_absent(p, n_slots);
  *out = p;
  return 0;

fail:
  em_pmu_free(p);
  return rc;
}

void em_pmu_free(em_pmu_t *p) {
  if (p == NULL) {
    return;
  }
  for (size_t g = 0; g < p->n_groups; g++) {
    group_t *grp = &p->groups[g];
    for (size_t m = grp->n; m > 0; m--) { /* Members before their leader. */
      p->sys.close(p->sys.ctx, grp->fd[m - 1]);
    }
  }
  if (p->cgroup_fd >= 0) {
    close(p->cgroup_fd);
  }
  free(p->groups);
  free(p);
}

size_t em_pmu_threads(const em_pmu_t *p) {
  return p == NULL ? 0 : p->n_threads;
}

size_t em_pmu_present(const em_pmu_t *p) {
  if (p == NULL) {
    return 0;
  }
  size_t present = 0;
  for (size_t i = 0; i < p->n; i++) {
    present += p->ev[i].n_open > 0;
  }
  return present;
}

/* ---- Reading ---- */

/* Every member of `g` is absent for this read, for `reason`. Logged once per group. */
static void group_failed(em_pmu_t *p, group_t *g, const char *reason) {
  for (size_t m = 0; m < g->n; m++) {
    event_t *e = &p->ev[g->ev[m]];
    if (e->read_failed) {
      continue; /* Keep the first reason (another CPU's group failed first). */
    }
    e->read_failed = true;
    snprintf(e->read_reason, sizeof(e->read_reason), "%s", reason);
  }
  if (!g->logged) {
    g->logged = true;
    EM_INFO("pmu: read of the group led by %s failed: %s", p->ev[g->ev[0]].name, reason);
  }
}

/* Adds the last good read of `g` to its events' sums for the slot being read. */
static void group_add_last(em_pmu_t *p, const group_t *g) {
  for (size_t m = 0; m < g->n; m++) {
    event_t *e = &p->ev[g->ev[m]];
    e->slot_raw = sat_add(e->slot_raw, g->last[m]);
    e->slot_running_ns = sat_add(e->slot_running_ns, g->last_running_ns);
    if (g->last_enabled_ns > e->slot_enabled_ns) {
      e->slot_enabled_ns = g->last_enabled_ns;
    }
    e->slot_seen = true;
  }
}

/*
 * Ends a slot (a thread, or a CPU): the parts of each event read there are scaled together,
 * sum(raw) * enabled / sum(running) with the largest enabled of the parts (see "Parts" in
 * pmu.h; one part: its own scaling), and added to the event's sums.
 */
static void slot_end(em_pmu_t *p) {
  for (size_t i = 0; i < p->n; i++) {
    event_t *e = &p->ev[i];
    if (!e->slot_seen) {
      continue;
    }
    uint64_t v = 0;
    if (e->slot_running_ns > 0) {
      em_pmu_scale(e->slot_raw, e->slot_enabled_ns, e->slot_running_ns, &v);
    } else if (e->slot_enabled_ns == 0) {
      v = e->slot_raw; /* Never enabled: the target has not run here; the count is exact (0). */
    }                  /* Else enabled but never ran: this slot tells nothing. */
    e->value = sat_add(e->value, v);
    e->enabled_ns = sat_add(e->enabled_ns, e->slot_enabled_ns);
    e->running_ns = sat_add(e->running_ns, e->slot_running_ns);
    e->slot_raw = e->slot_enabled_ns = e->slot_running_ns = 0;
    e->slot_seen = false;
  }
}

/*
 * Checks the `got` bytes of a read of `g`, keeps them as its last read and adds them to its
 * events' slot sums. Returns false with `reason` filled when the bytes are not what the
 * kernel gives for this group (its last read is then unchanged).
 */
static bool group_add(em_pmu_t *p, group_t *g, size_t got, char *reason, size_t cap) {
  const uint64_t *w = p->buf;
  size_t words = got / sizeof(uint64_t);
  size_t want = g->grouped ? 3 + g->n : 3;
  if (got % sizeof(uint64_t) != 0 || words < 3) {
    snprintf(reason, cap, "bad read: %zu bytes, expected %zu", got, want * sizeof(uint64_t));
    return false;
  }
  /* Grouped: nr, enabled, running, values[nr]. Alone: value, enabled, running. */
  uint64_t enabled = w[1];
  uint64_t running = w[2];
  const uint64_t *values = g->grouped ? &w[3] : &w[0];
  if (g->grouped && w[0] != g->n) {
    snprintf(reason, cap, "bad group read: nr %" PRIu64 ", expected %zu", w[0], g->n);
    return false;
  }
  if (words != want) {
    snprintf(reason, cap, "bad read: %zu bytes, expected %zu", got, want * sizeof(uint64_t));
    return false;
  }
  for (size_t m = 0; m < g->n; m++) {
    g->last[m] = values[m]; /* Scaled per slot, with the event's other parts: slot_end(). */
  }
  g->last_enabled_ns = enabled;
  g->last_running_ns = running;
  group_add_last(p, g);
  return true;
}

/* Fills one reading from the sums of event `e`. */
static void event_reading(const event_t *e, em_pmu_reading_t *r) {
  memset(r, 0, sizeof(*r));
  if (e->n_open == 0) {
    snprintf(r->reason, sizeof(r->reason), "%s", e->reason);
    return;
  }
  if (e->read_failed) {
    snprintf(r->reason, sizeof(r->reason), "%s", e->read_reason);
    return;
  }
  if (e->enabled_ns == 0 && e->running_ns == 0) {
    /* The target has not run since the open: nothing could be counted, the count is 0. */
    r->present = true;
    r->value = e->value;
    return;
  }
  if (e->running_ns == 0) {
    snprintf(r->reason, sizeof(r->reason),
             "not counted: multiplexed out for all its %" PRIu64 " ns (time_running 0)",
             e->enabled_ns);
    return;
  }
  r->present = true;
  r->value = e->value;
  r->running_ratio =
      e->running_ns >= e->enabled_ns ? 1.0 : (double)e->running_ns / (double)e->enabled_ns;
}

int em_pmu_read(em_pmu_t *p, em_pmu_reading_t *out, size_t n) {
  if (p == NULL || (out == NULL && n > 0)) {
    return -EINVAL;
  }
  for (size_t i = 0; i < p->n; i++) {
    event_t *e = &p->ev[i];
    e->value = e->enabled_ns = e->running_ns = 0;
    e->slot_raw = e->slot_enabled_ns = e->slot_running_ns = 0;
    e->slot_seen = false;
    e->read_failed = false;
  }
  bool gone = false;
  size_t failed = 0, tried = 0; /* Groups whose read() failed, of those read. */
  char reason[EM_PMU_REASON_BYTES];
  for (size_t g = 0; g < p->n_groups; g++) {
    group_t *grp = &p->groups[g];
    if (g > 0 && (grp->tid != p->groups[g - 1].tid || grp->cpu != p->groups[g - 1].cpu)) {
      slot_end(p); /* The groups of one slot are contiguous: em_pmu_new() opens slot by slot. */
    }
    if (grp->final) {
      group_add_last(p, grp);
      continue;
    }
    ssize_t got = p->sys.read(p->sys.ctx, grp->fd[0], p->buf, sizeof(p->buf));
    tried++;
    if ((got == 0 || got == -ESRCH) && !p->cgroup && grp->tid != p->pid) {
      grp->final = true; /* Another thread is gone: its last counts are its final ones. */
      group_add_last(p, grp);
      continue;
    }
    if (got == 0 || got == -ESRCH) {
      gone = true;
      failed++;
      group_failed(p, grp,
                   got == 0 ? "target gone (read gave end of file)" : "target gone (ESRCH)");
      continue;
    }
    if (got < 0) {
      failed++;
      describe_errno(reason, sizeof(reason), "read failed", (int)-got);
      group_failed(p, grp, reason);
      continue;
    }
    if ((size_t)got > sizeof(p->buf)) {
      snprintf(reason, sizeof(reason), "bad read: %zd bytes into a %zu-byte buffer", got,
               sizeof(p->buf));
      group_failed(p, grp, reason);
      continue;
    }
    if (!group_add(p, grp, (size_t)got, reason, sizeof(reason))) {
      group_failed(p, grp, reason);
    }
  }
  slot_end(p);
  for (size_t i = 0; i < n; i++) {
    if (i < p->n) {
      event_reading(&p->ev[i], &out[i]);
      continue;
    }
    memset(&out[i], 0, sizeof(out[i]));
    snprintf(out[i].reason, sizeof(out[i].reason), "no such event (%zu opened)", p->n);
  }
  if (gone || (tried > 0 && failed == tried)) {
    return -ESRCH;
  }
  return 0;
}
