/*
 * sampling.c - see sampling.h. The PMU events' aliases are their config order (figures.h:
 * 0 .. E-1); the fixed figures are found through the dictionary. The worker jobs write only
 * their own result fields (smaps, sensors_reading); their done callbacks, on the loop, turn
 * them into samples.
 */
#define _POSIX_C_SOURCE 200809L

#include "sampling.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "gpumem.h"
#include "log.h"
#include "others.h"
#include "pmu_events.h"
#include "procfs.h"
#include "schedinfo.h"

#define NS_PER_SEC UINT64_C(1000000000)

/* The PSI rows are indexed from their first (here and by the budgets' figures in agent.c). */
_Static_assert(EM_FIG_PSI_CPU_SOME + 2 * EM_PSI_CPU == EM_FIG_PSI_CPU_SOME &&
                   EM_FIG_PSI_CPU_SOME + 2 * EM_PSI_MEMORY == EM_FIG_PSI_MEMORY_SOME &&
                   EM_FIG_PSI_CPU_SOME + 2 * EM_PSI_IO == EM_FIG_PSI_IO_SOME &&
                   EM_FIG_PSI_IO_FULL == EM_FIG_PSI_CPU_SOME + 2 * EM_PSI_COUNT - 1 &&
                   EM_FIG_PSI_CPU_FULL == EM_FIG_PSI_CPU_SOME + 1,
               "PSI rows of EM_FIGURES follow em_psi_res_t, some then full");

struct em_sampling {
  em_sampling_opts_t o;
  em_figures_t *figs;   /* Borrowed (bind). */
  em_sample_t *samples; /* Borrowed (bind): by alias. */
  em_procfs_t *proc;
  int self_statm_fd; /* <proc_root>/self/statm, -1 when it did not open. */
  uint64_t page_size;

  /* PMU: open while attached. */
  em_pmu_t *pmu;
  em_pmu_event_t events[EM_SAMPLING_MAX_EVENTS];
  size_t n_events;
  struct {
    em_figure_t metric; /* Fixed figure the ratio goes to. */
    int num, den;       /* Indices into events, or -1 when not configured. */
  } ratios[3];
  em_pmu_reading_t readings[EM_SAMPLING_MAX_EVENTS];
  uint64_t prev_values[EM_SAMPLING_MAX_EVENTS]; /* For the per-window ratios. */
  bool prev_present[EM_SAMPLING_MAX_EVENTS];
  pid_t pid;    /* Attached: the target (> 0), -1 a cgroup; 0 detached. */
  int pidio_rc; /* What the last read of the target's /proc/<pid>/io answered (0: read). */

  /* Scheduling evidence (schedinfo.h): stat every tick, the per-thread pass every system_period. */
  em_schedinfo_t *sched;             /* NULL while detached or when it did not open. */
  char cgroup_root[4096 + 16];       /* <sys_root>/sys/fs/cgroup */
  em_schedinfo_reading_t sched_last; /* The last readings, held between passes. */
  uint64_t next_sched_ns;

  /* Who else ran (others.h): a scan on the worker every EM_SAMPLING_OTHERS_PERIOD_NS while
   * attached and at a trigger (em_sampling_others_refresh). */
  em_others_t *others; /* NULL when it could not be made. */
  uv_work_t others_work;
  bool others_busy;
  pid_t others_target;            /* What the queued scan leaves out (0: a cgroup). */
  uint64_t others_now_ns;         /* The scan's clock, taken on the loop when queued. */
  uint64_t last_others_ns;        /* When the last scan was queued. */
  uint64_t sched_pass_ns;         /* When the last per-thread pass ran (0: none yet). */
  bool contended;                 /* The last pass found the target waiting for CPUs. */
  em_others_list_t others_result; /* Filled on the worker. */
  em_others_list_t others_latest; /* The loop's copy. */

  /* Slower cadences. */
  uint64_t next_smaps_ns;
  uint64_t next_system_ns;
  bool smaps_sampled;  /* The smaps group has a fresh reading. */
  bool system_sampled; /* The system group was read this tick. */

  /* smaps_rollup on the worker. */
  uv_work_t smaps_work;
  bool smaps_busy;      /* Queued or running: the target's files must not change. */
  bool release_pending; /* Detached while busy: the job's end drops the files. */
  int smaps_rc;
  em_smaps_t smaps;

  /* Sensors on the worker. */
  em_sensors_t *sensors; /* NULL: none found or none wanted. */
  uint64_t sensors_period_ns;
  uint64_t next_sensors_ns;
  uv_work_t sensors_work;
  bool sensors_busy;
  bool sensors_fresh;                   /* Read since the last em_sampling_sent. */
  em_sensors_reading_t sensors_reading; /* Filled on the worker. */
  em_value_t temp_max;                  /* The hottest zone, degrees C. */
  em_value_t throttled;                 /* 1 throttled, 0 not. */
  char throttle_why[160];               /* Why it is throttled. */

  /* The target's GPU memory (gpumem.h) on the worker every system_period while attached; the
   * figure holds the last reading between reads. */
  em_gpumem_t *gpumem; /* NULL when it could not be made. */
  uv_work_t gpumem_work;
  bool gpumem_busy;
  unsigned gpumem_gen;     /* Bumped at each attach and detach: a read of the last target is
                              dropped. */
  unsigned gpumem_job_gen; /* The queued read's. */
  pid_t gpumem_pid;        /* The queued read's target: a pid, or 0 with gpumem_cgroup. */
  char gpumem_cgroup[512]; /* A cgroup target's directory. */
  int gpumem_rc;           /* Filled on the worker. */
  uint64_t gpumem_read_bytes;
  bool gpumem_have; /* The loop's: a value to publish. */
  uint64_t gpumem_bytes;
  uint64_t next_gpumem_ns;
  char gpumem_logged[EM_GPUMEM_REASON_BYTES]; /* The last reason logged (said once). */

  void (*done)(void *); /* em_sampling_cancel's, once per job. */
  void *done_ctx;
};

static size_t fx(const em_sampling_t *s, em_figure_t f) {
  return em_figures_alias(s->figs, f);
}

static int event_index(const em_sampling_t *s, const char *name) {
  for (size_t i = 0; i < s->n_events; i++) {
    if (strcmp(s->events[i].name, name) == 0) {
      return (int)i;
    }
  }
  return -1;
}

/* The sensors the board profile asks for (every one probed without a profile). */
static void open_sensors(em_sampling_t *s) {
  const em_board_profile_t *board = s->o.board;
  em_sensors_opts_t so = {.families = 0};
  s->sensors_period_ns = NS_PER_SEC;
  if (board) {
    const em_board_sensors_t *bs = &board->sensors;
    so.families = EM_SENSORS_THERMAL | EM_SENSORS_CPUFREQ | EM_SENSORS_GPU | EM_SENSORS_EMC |
                  EM_SENSORS_POWER | (bs->nvml ? EM_SENSORS_NVML : 0u);
    if (strcmp(bs->thermal, "none") == 0) {
      so.families &= ~(unsigned)EM_SENSORS_THERMAL;
    }
    if (strcmp(bs->cpufreq, "none") == 0) {
      so.families &= ~(unsigned)EM_SENSORS_CPUFREQ;
    }
    so.thermal = bs->thermal[0] ? bs->thermal : NULL;
    so.gpu_load = bs->gpu_load[0] ? bs->gpu_load : NULL;
    so.gpu_devfreq = bs->gpu_devfreq[0] ? bs->gpu_devfreq : NULL;
    so.emc = bs->emc[0] ? bs->emc : NULL;
    so.power = bs->power[0] ? bs->power : NULL;
    if (bs->period_ns) {
      s->sensors_period_ns = bs->period_ns;
    }
  }
  if (s->o.sensors_period_ns) {
    s->sensors_period_ns = s->o.sensors_period_ns; /* [agent] sensors_period wins. */
  }
  int rc = em_sensors_new(&s->sensors, s->o.sys_root, &so);
  if (rc) {
    EM_WARN("sensors: %s; none are read", strerror(-rc));
    s->sensors = NULL;
    return;
  }
  EM_INFO("sensors: %u figures every %llu ms", em_sensors_count(s->sensors),
          (unsigned long long)(s->sensors_period_ns / 1000000u));
}

int em_sampling_new(em_sampling_t **out, const em_sampling_opts_t *opts) {
  if (!out || !opts || !opts->loop || !opts->proc_root || opts->n_events > EM_SAMPLING_MAX_EVENTS ||
      (opts->n_events && !opts->events)) {
    return -EINVAL;
  }
  em_sampling_t *s = calloc(1, sizeof(*s));
  if (!s) {
    return -ENOMEM;
  }
  s->o = *opts;
  s->o.events = NULL; /* Borrowed for the call only: resolved below. */
  s->self_statm_fd = -1;
  s->n_events = opts->n_events;
  for (size_t i = 0; i < opts->n_events; i++) {
    /* One the machine lacks stays in the list, absent with its reason (pmu_events.h). */
    (void)em_pmu_events_event(opts->sys_root, opts->events[i], &s->events[i]);
  }
  open_sensors(s);
  em_gpumem_opts_t go = {.sys_root = opts->sys_root ? opts->sys_root : "/",
                         .proc_root = opts->proc_root};
  if (em_gpumem_new(&s->gpumem, &go) != 0) {
    EM_WARN("gpu memory: no reader; gpu.mem.process absent");
    s->gpumem = NULL;
  } else if (em_gpumem_source(s->gpumem) != EM_GPUMEM_NONE) {
    EM_INFO("gpu memory: the target's from %s", em_gpumem_source_name(s->gpumem));
  }
  static const struct {
    em_figure_t metric;
    const char *num, *den;
  } ratio_inputs[] = {{EM_FIG_IPC, "instructions", "cycles"},
                      {EM_FIG_CACHE_MISS_RATIO, "cache-misses", "cache-references"},
                      {EM_FIG_BRANCH_MISS_RATIO, "branch-misses", "branch-instructions"}};
  for (size_t k = 0; k < 3; k++) {
    s->ratios[k].metric = ratio_inputs[k].metric;
    s->ratios[k].num = event_index(s, ratio_inputs[k].num);
    s->ratios[k].den = event_index(s, ratio_inputs[k].den);
  }
  s->page_size = (uint64_t)sysconf(_SC_PAGESIZE);
  s->smaps_work.data = s;
  s->sensors_work.data = s;
  s->others_work.data = s;
  s->gpumem_work.data = s;
  if (em_others_new(&s->others, opts->proc_root) != 0) {
    EM_WARN("others: out of memory; who else ran is not told");
    s->others = NULL;
  }
  int rc = em_procfs_new(&s->proc, opts->proc_root, 0);
  if (rc) {
    em_sampling_free(s);
    return rc;
  }
  char self_statm[4096 + 16];
  snprintf(self_statm, sizeof(self_statm), "%s/self/statm", opts->proc_root);
  s->self_statm_fd = open(self_statm, O_RDONLY | O_CLOEXEC);
  snprintf(s->cgroup_root, sizeof(s->cgroup_root), "%s/sys/fs/cgroup",
           opts->sys_root ? opts->sys_root : "");
  *out = s;
  return 0;
}

void em_sampling_free(em_sampling_t *s) {
  if (!s) {
    return;
  }
  em_pmu_free(s->pmu);
  em_procfs_free(s->proc);
  em_schedinfo_free(s->sched);
  em_others_free(s->others);
  em_sensors_free(s->sensors);
  em_gpumem_free(s->gpumem);
  if (s->self_statm_fd >= 0) {
    close(s->self_statm_fd);
  }
  free(s);
}

const em_sensors_t *em_sampling_sensors(const em_sampling_t *s) {
  return s->sensors;
}

bool em_sampling_has_psi(const em_sampling_t *s) {
  return em_procfs_has_psi(s->proc);
}

const em_pmu_event_t *em_sampling_events(const em_sampling_t *s, size_t *n) {
  *n = s->n_events;
  return s->events;
}

void em_sampling_bind(em_sampling_t *s, em_figures_t *figs, em_sample_t *samples) {
  s->figs = figs;
  s->samples = samples;
  const char *why = s->gpumem ? em_gpumem_absent(s->gpumem) : "not read: no reader";
  em_figures_note_absent(figs, fx(s, EM_FIG_GPU_MEM_PROCESS),
                         why ? why : "target not attached yet");
  if (why && s->gpumem) {
    EM_INFO("gpu memory: %s; gpu.mem.process absent", why);
    snprintf(s->gpumem_logged, sizeof(s->gpumem_logged), "%s", why);
  }
}

static void note_sched_absent(em_sampling_t *s);

/* Why the target's storage I/O figures are absent after a read that answered rc ("" for 0). */
static void note_pidio_absent(em_sampling_t *s, int rc) {
  char why[EM_FIGURES_REASON_BYTES];
  if (rc == 0) {
    why[0] = '\0';
  } else if (rc == -EACCES || rc == -EPERM) {
    snprintf(why, sizeof(why), "%s",
             "/proc/<pid>/io needs ptrace read access to the target (CAP_SYS_PTRACE)");
  } else if (rc == -ENOENT) {
    snprintf(why, sizeof(why), "%s",
             "no /proc/<pid>/io: kernel without task I/O accounting (CONFIG_TASK_IO_ACCOUNTING)");
  } else {
    snprintf(why, sizeof(why), "/proc/<pid>/io not read: %s", strerror(-rc));
  }
  em_figures_note_absent(s->figs, fx(s, EM_FIG_IO_READ_BYTES), why);
  em_figures_note_absent(s->figs, fx(s, EM_FIG_IO_WRITE_BYTES), why);
}

/* --- attach ---------------------------------------------------------------------------- */

int em_sampling_attach(em_sampling_t *s, pid_t pid, const char *cgroup, size_t *present) {
  if (s->smaps_busy) {
    return -EBUSY; /* The old target's files are in use. */
  }
  em_pmu_target_t target = {.pid = pid > 0 ? pid : 0, .cgroup = pid > 0 ? NULL : cgroup};
  int rc = em_pmu_new(&s->pmu, s->events, s->n_events, &target, &em_pmu_sys_linux);
  if (rc == -ESRCH) {
    return rc; /* Gone between the lookup and now. */
  }
  if (rc) {
    EM_ERROR("pmu: %s; counters absent", strerror(-rc));
    s->pmu = NULL;
  }
  if (pid > 0) {
    rc = em_procfs_set_pid(s->proc, pid);
    if (rc) {
      em_pmu_free(s->pmu);
      s->pmu = NULL;
      return rc;
    }
  }
  s->pid = pid > 0 ? pid : -1;
  s->gpumem_gen++;
  s->gpumem_have = false;
  s->next_gpumem_ns = 0;
  snprintf(s->gpumem_cgroup, sizeof(s->gpumem_cgroup), "%s", pid > 0 || !cgroup ? "" : cgroup);
  rc = em_schedinfo_new(&s->sched, s->o.proc_root, s->cgroup_root, pid > 0 ? pid : 0,
                        pid > 0 ? NULL : cgroup);
  if (rc) {
    EM_WARN("sched: %s; scheduling figures absent", strerror(-rc));
    s->sched = NULL;
  }
  s->sched_last = (em_schedinfo_reading_t){0};
  s->next_sched_ns = 0;
  s->sched_pass_ns = 0;
  s->contended = false;
  if (s->sched) {
    em_schedinfo_reading_t first = {0}; /* Learns what this kernel and cgroup give. */
    (void)em_schedinfo_read_threads(s->sched, &first);
  }
  note_sched_absent(s);
  if (pid > 0) { /* A cgroup target's reason is the dictionary's (figures.c). */
    em_pidio_t io;
    s->pidio_rc = em_procfs_read_pidio(s->proc, &io);
    note_pidio_absent(s, s->pidio_rc);
  }
  *present = s->pmu ? em_pmu_present(s->pmu) : 0;
  /* What is absent now is what the birth must say. */
  em_pmu_reading_t r[EM_SAMPLING_MAX_EVENTS];
  if (s->pmu && em_pmu_read(s->pmu, r, s->n_events) == 0) {
    for (size_t i = 0; i < s->n_events; i++) {
      em_figures_note_absent(s->figs, i, r[i].present ? "" : r[i].reason);
    }
  }
  return 0;
}

void em_sampling_detach(em_sampling_t *s) {
  em_pmu_free(s->pmu);
  s->pmu = NULL;
  em_schedinfo_free(s->sched);
  s->sched = NULL;
  if (s->smaps_busy) {
    s->release_pending = true; /* smaps_done drops the files. */
  } else {
    em_procfs_set_pid(s->proc, 0);
  }
  s->pid = 0;
  s->gpumem_gen++;
  s->gpumem_have = false;
  s->smaps_sampled = false;
  memset(s->prev_present, 0, sizeof(s->prev_present));
}

bool em_sampling_busy(const em_sampling_t *s) {
  return s->smaps_busy;
}

/* --- the tick -------------------------------------------------------------------------- */

/* PMU counters and the ratios derived from their deltas over the window. */
static void sample_pmu(em_sampling_t *s) {
  em_sample_t *v = s->samples;
  bool ok = s->pmu && em_pmu_read(s->pmu, s->readings, s->n_events) == 0;
  double hw_ratio = -1, sw_ratio = -1;
  for (size_t i = 0; i < s->n_events; i++) {
    const em_pmu_reading_t *r = &s->readings[i];
    if (!ok || !r->present) {
      em_figures_set_absent(v, i);
      continue;
    }
    em_figures_set_u(v, i, r->value);
    double *ratio = s->events[i].type == PERF_TYPE_SOFTWARE ? &sw_ratio : &hw_ratio;
    if (*ratio < 0) {
      *ratio = r->running_ratio;
    }
  }
  em_figures_set_f_if(v, fx(s, EM_FIG_PMU_HW_RUNNING), hw_ratio >= 0, hw_ratio);
  em_figures_set_f_if(v, fx(s, EM_FIG_PMU_SW_RUNNING), sw_ratio >= 0, sw_ratio);
  for (size_t k = 0; k < sizeof(s->ratios) / sizeof(s->ratios[0]); k++) {
    int ni = s->ratios[k].num, di = s->ratios[k].den;
    double r = 0;
    bool have =
        ok && ni >= 0 && di >= 0 && s->prev_present[ni] && s->prev_present[di] &&
        em_pmu_ratio(s->readings[ni].present, s->readings[ni].value - s->prev_values[ni],
                     s->readings[di].present, s->readings[di].value - s->prev_values[di], &r);
    em_figures_set_f_if(v, fx(s, s->ratios[k].metric), have, r);
  }
  for (size_t i = 0; i < s->n_events; i++) {
    s->prev_present[i] = ok && s->readings[i].present;
    s->prev_values[i] = s->readings[i].value;
  }
}

/* On a worker thread: the only procfs call that may run off the loop (see procfs.h). */
static void smaps_work(uv_work_t *w) {
  em_sampling_t *s = w->data;
  s->smaps_rc = em_procfs_read_smaps(s->proc, &s->smaps);
}

/* A worker job ended while stopping: its step of the stop. */
static bool job_ended_stopping(em_sampling_t *s) {
  if (!s->done) {
    return false;
  }
  s->done(s->done_ctx);
  return true;
}

/* Back on the loop: the values go out with the next data message. */
static void smaps_done(uv_work_t *w, int status) {
  em_sampling_t *s = w->data;
  s->smaps_busy = false;
  if (s->release_pending) {
    s->release_pending = false;
    em_procfs_set_pid(s->proc, 0);
  }
  if (job_ended_stopping(s) || status != 0 || s->pid <= 0) {
    return; /* Stopping, cancelled, or the target left while it ran. */
  }
  bool ok = s->smaps_rc == 0;
  const em_smaps_t *m = &s->smaps;
  em_figures_set_u_if(s->samples, fx(s, EM_FIG_PSS), ok && (m->have & EM_SMAPS_PSS), m->pss_bytes);
  em_figures_set_u_if(s->samples, fx(s, EM_FIG_ANON), ok && (m->have & EM_SMAPS_ANON),
                      m->anon_bytes);
  em_figures_set_u_if(s->samples, fx(s, EM_FIG_SWAP), ok && (m->have & EM_SMAPS_SWAP),
                      m->swap_bytes);
  s->smaps_sampled = true;
}

/* The reasons a pass could not give a figure, for the birth. */
static void note_sched_absent(em_sampling_t *s) {
  static const char *const missing = "not read: the target's procfs files did not open";
  const char *runq = s->sched ? em_schedinfo_absent_runq(s->sched) : missing;
  const char *ctxsw = s->sched ? em_schedinfo_absent_ctxsw(s->sched) : missing;
  const char *throttle = s->sched ? em_schedinfo_absent_throttle(s->sched) : missing;
  em_figures_note_absent(s->figs, fx(s, EM_FIG_SCHED_RUNQ_DELAY), runq);
  if (s->pid > 0) { /* A cgroup target's reasons are the dictionary's (figures.c). */
    em_figures_note_absent(s->figs, fx(s, EM_FIG_SCHED_CTXSW_VOLUNTARY), ctxsw);
    em_figures_note_absent(s->figs, fx(s, EM_FIG_SCHED_CTXSW_INVOLUNTARY), ctxsw);
  }
  em_figures_note_absent(s->figs, fx(s, EM_FIG_CGROUP_CPU_THROTTLED), throttle);
  em_figures_note_absent(s->figs, fx(s, EM_FIG_CGROUP_CPU_NR_THROTTLED), throttle);
}

/* The scheduling figures: stat every tick, the per-thread pass when system_period is due; the
 * figures between passes hold the last pass's values (counters: their deltas come per pass). */
static void sample_sched(em_sampling_t *s, uint64_t now_ns) {
  em_schedinfo_reading_t *r = &s->sched_last;
  r->have &= ~(unsigned)(EM_SCHEDINFO_CPU | EM_SCHEDINFO_MAJFLT);
  if (s->sched) {
    (void)em_schedinfo_read_stat(s->sched, r);
  }
  if (now_ns >= s->next_sched_ns) {
    s->next_sched_ns = now_ns + s->o.system_period_ns;
    unsigned per_tick = r->have & (EM_SCHEDINFO_CPU | EM_SCHEDINFO_MAJFLT);
    em_schedinfo_reading_t pass = {
        .have = per_tick, .cpu_ns = r->cpu_ns, .major_faults = r->major_faults};
    if (s->sched && em_schedinfo_read_threads(s->sched, &pass) == 0) {
      /* Waiting runnable for more than 1/EM_SAMPLING_CONTENDED_PARTS of the time between two
       * passes (summed over threads): who else ran is scanned on the faster cadence. */
      uint64_t since = now_ns - s->sched_pass_ns;
      bool was = s->contended;
      s->contended = s->sched_pass_ns && since && (pass.have & r->have & EM_SCHEDINFO_RUNQ) &&
                     pass.runq_delay_ns >= r->runq_delay_ns &&
                     (pass.runq_delay_ns - r->runq_delay_ns) > since / EM_SAMPLING_CONTENDED_PARTS;
      if (s->contended != was) {
        EM_INFO("target %s: who else ran is scanned every %llu s",
                s->contended ? "contended" : "no longer contended",
                (unsigned long long)((s->contended ? EM_SAMPLING_OTHERS_CONTENDED_NS
                                                   : EM_SAMPLING_OTHERS_PERIOD_NS) /
                                     NS_PER_SEC));
      }
      s->sched_pass_ns = now_ns;
      *r = pass;
    } else {
      r->have = per_tick;
    }
    note_sched_absent(s);
  }
  static const struct {
    em_figure_t figure;
    unsigned bit;  /* EM_SCHEDINFO_* */
    size_t offset; /* Of its uint64_t in em_schedinfo_reading_t. */
  } figures[] = {
      {EM_FIG_PROC_CPU, EM_SCHEDINFO_CPU, offsetof(em_schedinfo_reading_t, cpu_ns)},
      {EM_FIG_MAJOR_FAULTS, EM_SCHEDINFO_MAJFLT, offsetof(em_schedinfo_reading_t, major_faults)},
      {EM_FIG_SCHED_RUNQ_DELAY, EM_SCHEDINFO_RUNQ, offsetof(em_schedinfo_reading_t, runq_delay_ns)},
      {EM_FIG_SCHED_CTXSW_VOLUNTARY, EM_SCHEDINFO_CTXSW,
       offsetof(em_schedinfo_reading_t, ctxsw_voluntary)},
      {EM_FIG_SCHED_CTXSW_INVOLUNTARY, EM_SCHEDINFO_CTXSW,
       offsetof(em_schedinfo_reading_t, ctxsw_involuntary)},
      {EM_FIG_CGROUP_CPU_THROTTLED, EM_SCHEDINFO_THROTTLED,
       offsetof(em_schedinfo_reading_t, throttled_ns)},
      {EM_FIG_CGROUP_CPU_NR_THROTTLED, EM_SCHEDINFO_NR_THROTTLED,
       offsetof(em_schedinfo_reading_t, nr_throttled)},
  };
  for (size_t k = 0; k < sizeof(figures) / sizeof(figures[0]); k++) {
    uint64_t value;
    memcpy(&value, (const unsigned char *)r + figures[k].offset, sizeof(value));
    em_figures_set_u_if(s->samples, fx(s, figures[k].figure), r->have & figures[k].bit, value);
  }
}

static void others_work(uv_work_t *w) {
  em_sampling_t *s = w->data;
  (void)em_others_scan(s->others, s->others_target, getpid(), s->others_now_ns, &s->others_result);
}

static void others_done(uv_work_t *w, int status) {
  em_sampling_t *s = w->data;
  s->others_busy = false;
  if (job_ended_stopping(s) || status != 0) {
    return;
  }
  s->others_latest = s->others_result;
}

void em_sampling_others_refresh(em_sampling_t *s, uint64_t now_ns) {
  if (!s->others || s->others_busy) {
    return; /* The running scan is as fresh. */
  }
  s->last_others_ns = now_ns;
  s->others_target = s->pid > 0 ? s->pid : 0;
  s->others_now_ns = now_ns;
  s->others_busy = uv_queue_work(s->o.loop, &s->others_work, others_work, others_done) == 0;
}

const em_others_list_t *em_sampling_others(const em_sampling_t *s) {
  return &s->others_latest;
}

/* On the worker: the target's pids, then the source (gpumem.h: it may block). */
static void gpumem_work(uv_work_t *w) {
  em_sampling_t *s = w->data;
  pid_t pids[EM_GPUMEM_MAX_PIDS];
  size_t n = 0;
  uint64_t bytes = 0;
  int rc = em_gpumem_pids(s->gpumem, s->gpumem_pid, s->gpumem_pid > 0 ? NULL : s->gpumem_cgroup,
                          pids, EM_GPUMEM_MAX_PIDS, &n);
  if (rc == 0 || rc == -ESRCH) { /* An empty cgroup holds no GPU memory. */
    rc = em_gpumem_read(s->gpumem, pids, n, &bytes);
  }
  s->gpumem_rc = rc;
  s->gpumem_read_bytes = bytes;
}

/* Back on the loop: the figure and its absent reason, a new reason logged once. */
static void gpumem_done(uv_work_t *w, int status) {
  em_sampling_t *s = w->data;
  s->gpumem_busy = false;
  if (job_ended_stopping(s) || status != 0 || s->gpumem_job_gen != s->gpumem_gen) {
    return; /* Stopping, cancelled, or the target changed while it ran. */
  }
  s->gpumem_have = s->gpumem_rc == 0;
  s->gpumem_bytes = s->gpumem_read_bytes;
  const char *why = em_gpumem_absent(s->gpumem);
  char pids_why[64];
  if (!s->gpumem_have && !why) {
    snprintf(pids_why, sizeof(pids_why), "the target's pids: %s", strerror(-s->gpumem_rc));
    why = pids_why;
  }
  em_figures_note_absent(s->figs, fx(s, EM_FIG_GPU_MEM_PROCESS), s->gpumem_have ? "" : why);
  if (why && strcmp(why, s->gpumem_logged) != 0) {
    EM_WARN("gpu memory: %s; gpu.mem.process absent", why);
  }
  snprintf(s->gpumem_logged, sizeof(s->gpumem_logged), "%s", why ? why : "");
}

/* The GPU memory figure (the last reading) and its read queued every system_period. */
static void sample_gpumem(em_sampling_t *s, uint64_t now_ns) {
  em_figures_set_u_if(s->samples, fx(s, EM_FIG_GPU_MEM_PROCESS), s->gpumem_have, s->gpumem_bytes);
  if (!s->gpumem || em_gpumem_source(s->gpumem) == EM_GPUMEM_NONE || s->gpumem_busy ||
      s->pid == 0 || now_ns < s->next_gpumem_ns) {
    return;
  }
  s->next_gpumem_ns = now_ns + s->o.system_period_ns;
  s->gpumem_pid = s->pid > 0 ? s->pid : 0;
  s->gpumem_job_gen = s->gpumem_gen;
  s->gpumem_busy = uv_queue_work(s->o.loop, &s->gpumem_work, gpumem_work, gpumem_done) == 0;
}

/* The target's storage bytes from /proc/<pid>/io; a change in what the read answers (the
 * file became unreadable) changes the absent reason the next birth gives. */
static void sample_pidio(em_sampling_t *s) {
  em_pidio_t io = {0};
  int rc = s->pid > 0 ? em_procfs_read_pidio(s->proc, &io) : -ENOENT;
  if (s->pid > 0 && rc != s->pidio_rc && rc != -ESRCH) {
    s->pidio_rc = rc;
    note_pidio_absent(s, rc);
  }
  em_sample_t *v = s->samples;
  em_figures_set_u_if(v, fx(s, EM_FIG_IO_READ_BYTES), rc == 0 && (io.have & EM_PIDIO_READ_BYTES),
                      io.read_bytes);
  em_figures_set_u_if(v, fx(s, EM_FIG_IO_WRITE_BYTES), rc == 0 && (io.have & EM_PIDIO_WRITE_BYTES),
                      io.write_bytes);
}

bool em_sampling_target(em_sampling_t *s, uint64_t now_ns) {
  sample_pmu(s);
  sample_sched(s, now_ns);
  sample_gpumem(s, now_ns);
  uint64_t others_period =
      s->contended ? EM_SAMPLING_OTHERS_CONTENDED_NS : EM_SAMPLING_OTHERS_PERIOD_NS;
  if (now_ns >= s->last_others_ns + others_period) {
    em_sampling_others_refresh(s, now_ns);
  }
  em_statm_t st = {0};
  int rc = s->pid > 0 ? em_procfs_read_statm(s->proc, &st) : -ENOENT;
  if (rc == -ESRCH) {
    return false;
  }
  em_sample_t *v = s->samples;
  em_figures_set_u_if(v, fx(s, EM_FIG_RSS), rc == 0, st.rss_bytes);
  em_figures_set_u_if(v, fx(s, EM_FIG_SHARED), rc == 0, st.shared_bytes);
  em_figures_set_u_if(v, fx(s, EM_FIG_VSIZE), rc == 0, st.size_bytes);
  sample_pidio(s);
  bool smaps_due = s->o.smaps_period_ns && now_ns >= s->next_smaps_ns;
  if (smaps_due && s->pid > 0 && !s->smaps_busy) {
    s->next_smaps_ns = now_ns + s->o.smaps_period_ns;
    s->smaps_busy = uv_queue_work(s->o.loop, &s->smaps_work, smaps_work, smaps_done) == 0;
  }
  return true;
}

void em_sampling_detached(em_sampling_t *s) {
  size_t n = em_figures_count(s->figs);
  for (size_t m = 0; m < n; m++) {
    if (em_figures_group(s->figs, m) == EM_FIGURE_TARGET) {
      em_figures_set_absent(s->samples, m);
    }
  }
}

bool em_sampling_threads(const em_sampling_t *s, uint64_t *n) {
  *n = s->pmu ? em_pmu_threads(s->pmu) : 0;
  return s->pmu != NULL;
}

void em_sampling_system(em_sampling_t *s, uint64_t now_ns) {
  s->system_sampled = now_ns >= s->next_system_ns;
  if (!s->system_sampled) {
    return;
  }
  s->next_system_ns = now_ns + s->o.system_period_ns;
  em_sample_t *v = s->samples;
  em_meminfo_t mi = {0};
  bool ok = em_procfs_read_meminfo(s->proc, &mi) == 0;
  em_figures_set_u_if(v, fx(s, EM_FIG_MEM_AVAILABLE), ok && (mi.have & EM_MEMINFO_AVAILABLE),
                      mi.available_bytes);
  for (int r = 0; r < EM_PSI_COUNT; r++) {
    em_psi_t psi = {0};
    ok = em_procfs_read_psi(s->proc, (em_psi_res_t)r, &psi) == 0;
    size_t m = fx(s, (em_figure_t)(EM_FIG_PSI_CPU_SOME + 2 * r));
    em_figures_set_f_if(v, m, ok && (psi.have & EM_PSI_SOME), psi.some_avg10);
    em_figures_set_f_if(v, m + 1, ok && (psi.have & EM_PSI_FULL), psi.full_avg10);
  }
}

void em_sampling_self(em_sampling_t *s) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  uint64_t cpu = ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * NS_PER_SEC +
                 ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000u;
  em_figures_set_u(s->samples, fx(s, EM_FIG_AGENT_CPU), cpu);
  char buf[128];
  em_statm_t st;
  ssize_t n = s->self_statm_fd >= 0 ? pread(s->self_statm_fd, buf, sizeof(buf), 0) : -1;
  bool ok = n > 0 && em_procfs_parse_statm(buf, (size_t)n, s->page_size, &st) == 0;
  em_figures_set_u_if(s->samples, fx(s, EM_FIG_AGENT_RSS), ok, ok ? st.rss_bytes : 0);
}

/* --- sensors (on the worker, like smaps_rollup) ---------------------------------------- */

static void sensors_work(uv_work_t *w) {
  em_sampling_t *s = w->data;
  em_sensors_read(s->sensors, &s->sensors_reading);
}

/* Back on the loop: the figures go out with the next data messages (gauges: the last
 * reading), and the temp_max and throttle rules get their figures and reason. */
static void sensors_done(uv_work_t *w, int status) {
  em_sampling_t *s = w->data;
  s->sensors_busy = false;
  if (job_ended_stopping(s) || status != 0) {
    return;
  }
  const em_sensors_reading_t *r = &s->sensors_reading;
  s->sensors_fresh = true;
  for (unsigned i = 0; i < r->count; i++) {
    size_t m = em_figures_sensor_alias(s->figs, i);
    if (!r->present[i]) {
      em_figures_set_absent(s->samples, m);
      em_figures_note_absent(s->figs, m, "not present or not readable on this board");
      continue;
    }
    em_figures_set_f(s->samples, m, r->value[i]);
    em_figures_note_absent(s->figs, m, "");
  }
  double hottest = 0;
  s->temp_max = em_sensors_hottest(s->sensors, r, &hottest) == 0
                    ? (em_value_t){.type = EM_VALUE_FLOAT, .as.f = hottest}
                    : (em_value_t){.type = EM_VALUE_ABSENT};
  em_throttle_t t = em_sensors_throttle(s->sensors, r, s->throttle_why, sizeof(s->throttle_why));
  s->throttled = (em_value_t){.type = EM_VALUE_FLOAT, .as.f = t == EM_THROTTLE_NONE ? 0.0 : 1.0};
}

void em_sampling_read_sensors(em_sampling_t *s, uint64_t now_ns) {
  if (!s->sensors || s->sensors_busy || now_ns < s->next_sensors_ns) {
    return;
  }
  s->next_sensors_ns = now_ns + s->sensors_period_ns;
  s->sensors_busy = uv_queue_work(s->o.loop, &s->sensors_work, sensors_work, sensors_done) == 0;
}

unsigned em_sampling_fresh(const em_sampling_t *s) {
  return (s->smaps_sampled ? EM_SAMPLING_SMAPS : 0u) |
         (s->system_sampled ? EM_SAMPLING_SYSTEM : 0u) |
         (s->sensors_fresh ? EM_SAMPLING_SENSORS : 0u);
}

void em_sampling_sent(em_sampling_t *s) {
  s->smaps_sampled = false; /* The next reading comes from smaps_done. */
  s->sensors_fresh = false;
}

void em_sampling_thermal(const em_sampling_t *s, em_value_t *temp_max, em_value_t *throttled,
                         const char **why) {
  *temp_max = s->temp_max;
  *throttled = s->throttled;
  *why = s->throttle_why[0] ? s->throttle_why : NULL;
}

unsigned em_sampling_cancel(em_sampling_t *s, void (*done)(void *), void *ctx) {
  unsigned n = 0;
  s->done = done;
  s->done_ctx = ctx;
  if (s->smaps_busy) {
    n++;
    uv_cancel((uv_req_t *)&s->smaps_work);
  }
  if (s->sensors_busy) {
    n++;
    uv_cancel((uv_req_t *)&s->sensors_work);
  }
  if (s->others_busy) {
    n++;
    uv_cancel((uv_req_t *)&s->others_work);
  }
  if (s->gpumem_busy) {
    n++;
    uv_cancel((uv_req_t *)&s->gpumem_work);
  }
  return n;
}
