/*
 * diagnose.c - see diagnose.h. Each window is reduced to figures per frame: the counters'
 * growth between two ticks divided by the stage's spans that ended between them, the gauges
 * (PSI, CPU frequency) averaged over the ticks that read them, and the stage's statistic over
 * the spans that ended in it. The excess of the statistic is then shared out: first the time
 * figures measured directly (run-queue delay, throttled time, CPU time), then the growth of the
 * off-CPU time (frame time - CPU time - run-queue delay) to the one of io, memory pressure or
 * waiting whose evidence grew, and what is left is unexplained. The io evidence is the target's
 * own storage bytes per frame (io.read_bytes + io.write_bytes, from /proc/<pid>/io) or, as a
 * second witness, the machine's I/O pressure (psi.io.some.avg10) rising with the voluntary
 * switches: the bytes move with the frame that caused them, PSI's 10 s average only seconds
 * later.
 */
#define _POSIX_C_SOURCE 200809L

#include "diagnose.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The few operations on doubles the engine needs, written here: the agent links no libm. */
static double dmin(double a, double b) {
  return a < b ? a : b;
}

static double dmax(double a, double b) {
  return a > b ? a : b;
}

static double dabs(double a) {
  return a < 0 ? -a : a;
}

/* The counters the engine reads (COUNTER columns, running totals). */
enum {
  C_RUNQ,      /* ns */
  C_VOL,       /* switches */
  C_INVOL,     /* switches */
  C_PROC_CPU,  /* ns */
  C_TASKCLOCK, /* ns: pmu.task-clock, used when proc.cpu is absent */
  C_MAJFLT,    /* faults */
  C_THROT,     /* ns */
  C_NR_THROT,  /* periods */
  C_INSTR,     /* instructions */
  C_CYCLES,    /* cycles */
  C_RD_BYTES,  /* bytes fetched from storage for the target */
  C_WR_BYTES,  /* bytes the target sent towards storage */
  C_N
};
static const char *const counter_name[C_N] = {"sched.runq_delay",        "sched.ctxsw.voluntary",
                                              "sched.ctxsw.involuntary", "proc.cpu",
                                              "pmu.task-clock",          "mem.major_faults",
                                              "cgroup.cpu.throttled",    "cgroup.cpu.nr_throttled",
                                              "pmu.instructions",        "pmu.cycles",
                                              "io.read_bytes",           "io.write_bytes"};

/*
 * The target's storage bytes per frame "grew" when they rose by at least one page (4 KiB) per
 * frame and by EM_DIAGNOSE_REL_STEP of the baseline: the kernel counts write_bytes a dirtied
 * page at a time and read_bytes a block read at a time, so less than a page more per frame is
 * not one more storage access per frame (a log line flushed now and then, a counter read on a
 * tick covering a frame on each side of a window's edge).
 */
#define STORAGE_STEP_BYTES 4096.0

/* The gauges: averaged over the ticks that read them. */
enum { G_PSI_MEM, G_PSI_IO, G_FREQ, G_N };

#define NO_COL        SIZE_MAX
#define MAX_FREQ_COLS 16u /* cpufreq policies averaged for the frequency. */

typedef struct {
  size_t counter[C_N];
  size_t psi_mem, psi_io;
  size_t freq[MAX_FREQ_COLS];
  size_t n_freq;
} colmap_t;

/* One window reduced to figures per frame. */
typedef struct {
  double frames;   /* Spans of the stage that ended between the window's two ticks. */
  double frame_ns; /* Their mean duration. */
  bool has[C_N];
  double per_frame[C_N];
  bool ghas[G_N];
  double gauge[G_N];
} win_t;

static bool value_num(em_value_t v, double *out) {
  switch (v.type) {
  case EM_VALUE_UINT:
    *out = (double)v.as.u;
    return true;
  case EM_VALUE_INT:
    *out = (double)v.as.i;
    return true;
  case EM_VALUE_FLOAT:
    *out = v.as.f;
    return isfinite(v.as.f);
  case EM_VALUE_ABSENT:
    break;
  }
  return false;
}

static bool has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

static void map_columns(const em_diagnose_in_t *in, colmap_t *m) {
  for (size_t c = 0; c < C_N; c++) {
    m->counter[c] = NO_COL;
  }
  m->psi_mem = m->psi_io = NO_COL;
  m->n_freq = 0;
  for (size_t i = 0; i < in->n_columns; i++) {
    const char *name = in->columns[i].name;
    if (!name) {
      continue;
    }
    for (size_t c = 0; c < C_N; c++) {
      if (strcmp(name, counter_name[c]) == 0 && in->columns[i].kind == EM_METRIC_COUNTER) {
        m->counter[c] = i;
      }
    }
    if (strcmp(name, "psi.memory.some.avg10") == 0) {
      m->psi_mem = i;
    } else if (strcmp(name, "psi.io.some.avg10") == 0) {
      m->psi_io = i;
    } else if (strncmp(name, "cpu.", 4) == 0 && has_suffix(name, ".freq") &&
               m->n_freq < MAX_FREQ_COLS) {
      m->freq[m->n_freq++] = i;
    }
  }
}

/* Tick t's value of column c: false when the tick did not read it or read it as absent. */
static bool tick_value(const em_flight_tick_t *t, size_t c, double *out) {
  size_t lo = 0, hi = t->n_values;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (t->values[mid].column < c) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo < t->n_values && t->values[lo].column == c && value_num(t->values[lo].value, out);
}

/* Index of the last tick at or before t_ns, or SIZE_MAX. */
static size_t tick_at_or_before(const em_diagnose_in_t *in, uint64_t t_ns) {
  size_t lo = 0, hi = in->n_ticks;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (in->ticks[mid].mono_ns <= t_ns) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo == 0 ? SIZE_MAX : lo - 1;
}

/*
 * Where the window the rule judged began. The budget judge closes a window on the first tick at
 * least window_ns after it opened and opens the next one on that tick; the recorder has not
 * taken the closing tick yet when the verdict is computed. So the window opened on the first
 * tick after (the last tick before the trigger) - window_ns: trigger - window_ns when the ticks
 * kept time, earlier when the closing tick came late (a loaded machine) or a tick's jitter put
 * the close one tick later, and the window was longer than window_ns. Without such a tick (no
 * ticks yet, a window that opened off the ticks when the agent started): trigger - window_ns.
 */
static uint64_t judged_from(const em_diagnose_in_t *in) {
  uint64_t from = in->trigger_ns > in->window_ns ? in->trigger_ns - in->window_ns : 0;
  size_t last = tick_at_or_before(in, in->trigger_ns - 1);
  if (last == SIZE_MAX || in->trigger_ns == 0) {
    return from;
  }
  uint64_t t = in->ticks[last].mono_ns;
  size_t k = tick_at_or_before(in, t > in->window_ns ? t - in->window_ns : 0);
  k = k == SIZE_MAX ? 0 : k + 1; /* The first tick after it. */
  return k <= last && in->ticks[k].mono_ns < from ? in->ticks[k].mono_ns : from;
}

/* The stage's spans that ended in (from, to]: their count and mean; when `d` is given, their
 * durations (up to cap) are written there and *n_d says how many. */
static size_t stage_spans(const em_diagnose_in_t *in, uint64_t from, uint64_t to, double *mean,
                          uint64_t *d, size_t cap, size_t *n_d) {
  size_t n = 0, kept = 0;
  double sum = 0;
  for (size_t i = 0; i < in->n_spans; i++) {
    const em_flight_span_t *s = &in->spans[i];
    uint64_t end = s->start_ns + s->duration_ns;
    if (s->stage != in->stage || end <= from || end > to) {
      continue;
    }
    n++;
    sum += (double)s->duration_ns;
    if (d && kept < cap) {
      d[kept++] = s->duration_ns;
    }
  }
  *mean = n ? sum / (double)n : 0;
  if (n_d) {
    *n_d = kept;
  }
  return n;
}

/* The average of gauge column c over ticks (i0, i1]; without a reading there, the last one at
 * or before i1 (the value then in force). */
static bool gauge_avg(const em_diagnose_in_t *in, size_t c, size_t i0, size_t i1, double *out) {
  double sum = 0, v;
  size_t n = 0;
  for (size_t i = i0 + 1; i <= i1; i++) {
    if (tick_value(&in->ticks[i], c, &v)) {
      sum += v;
      n++;
    }
  }
  for (size_t i = i0 + 1; n == 0 && i-- > 0;) {
    if (tick_value(&in->ticks[i], c, &v)) {
      sum = v;
      n = 1;
    }
  }
  if (n == 0) {
    return false;
  }
  *out = sum / (double)n;
  return true;
}

/* The window between ticks i0 < i1 as figures per frame. */
static void reduce(const em_diagnose_in_t *in, const colmap_t *m, size_t i0, size_t i1, win_t *w) {
  *w = (win_t){0};
  const em_flight_tick_t *a = &in->ticks[i0], *b = &in->ticks[i1];
  w->frames = (double)stage_spans(in, a->mono_ns, b->mono_ns, &w->frame_ns, NULL, 0, NULL);
  for (size_t c = 0; c < C_N && w->frames > 0; c++) {
    double v0 = 0, v1;
    if (m->counter[c] == NO_COL || !tick_value(b, m->counter[c], &v1)) {
      continue;
    }
    /* From the first tick that read it: a counter starts with the target's attach. */
    size_t k = i0;
    while (k < i1 && !tick_value(&in->ticks[k], m->counter[c], &v0)) {
      k++;
    }
    double mean, frames = k == i0 ? w->frames
                                  : (double)stage_spans(in, in->ticks[k].mono_ns, b->mono_ns, &mean,
                                                        NULL, 0, NULL);
    if (k < i1 && frames > 0 && v1 >= v0) {
      w->has[c] = true;
      w->per_frame[c] = (v1 - v0) / frames;
    }
  }
  if (!w->has[C_PROC_CPU] && w->has[C_TASKCLOCK]) {
    w->has[C_PROC_CPU] = true;
    w->per_frame[C_PROC_CPU] = w->per_frame[C_TASKCLOCK];
  }
  if (m->psi_mem != NO_COL) {
    w->ghas[G_PSI_MEM] = gauge_avg(in, m->psi_mem, i0, i1, &w->gauge[G_PSI_MEM]);
  }
  if (m->psi_io != NO_COL) {
    w->ghas[G_PSI_IO] = gauge_avg(in, m->psi_io, i0, i1, &w->gauge[G_PSI_IO]);
  }
  double fsum = 0;
  size_t fn = 0;
  for (size_t k = 0; k < m->n_freq; k++) {
    double f;
    if (gauge_avg(in, m->freq[k], i0, i1, &f)) {
      fsum += f;
      fn++;
    }
  }
  if (fn) {
    w->ghas[G_FREQ] = true;
    w->gauge[G_FREQ] = fsum / (double)fn;
  }
}

static int cmp_u64(const void *x, const void *y) {
  uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return a < b ? -1 : a > b;
}

/* The statistic over d[0..n) (sorted here); 0 when n is 0. */
static uint64_t statistic(const char *stat, uint64_t *d, size_t n) {
  if (n == 0) {
    return 0;
  }
  if (strcmp(stat, "mean") == 0) {
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
      sum += (double)d[i];
    }
    return (uint64_t)(sum / (double)n + 0.5); /* Durations are >= 0: rounds half up. */
  }
  qsort(d, n, sizeof(*d), cmp_u64);
  double q = strcmp(stat, "p50") == 0    ? 0.50
             : strcmp(stat, "p90") == 0  ? 0.90
             : strcmp(stat, "p99") == 0  ? 0.99
             : strcmp(stat, "p999") == 0 ? 0.999
                                         : 1.0;
  double want = q * (double)n;
  size_t rank = (size_t)want; /* Nearest rank, 1-based: want rounded up. */
  rank += (double)rank < want;
  return d[(rank ? rank : 1) - 1];
}

static bool valid_statistic(const char *s) {
  static const char *const known[] = {"p50", "p90", "p99", "p999", "max", "mean"};
  for (size_t i = 0; s && i < sizeof(known) / sizeof(*known); i++) {
    if (strcmp(s, known[i]) == 0) {
      return true;
    }
  }
  return false;
}

/* --- causes --------------------------------------------------------------------------- */

typedef struct {
  em_proto_verdict_cause_t c;
  double explained_ns; /* Per frame. */
} cand_t;

typedef struct {
  cand_t cand[EM_PROTO_VERDICT_MAX_CAUSES];
  size_t n;
} cands_t;

static cand_t *cause(cands_t *cs, uint32_t code, double explained_ns) {
  if (!(explained_ns > 0) || cs->n == EM_PROTO_VERDICT_MAX_CAUSES) {
    return NULL;
  }
  cand_t *k = &cs->cand[cs->n++];
  *k = (cand_t){.c = {.code = code}, .explained_ns = explained_ns};
  return k;
}

static void evidence(cand_t *k, const char *name, double value) {
  if (k && k->c.n_evidence < EM_PROTO_VERDICT_MAX_EVIDENCE && isfinite(value)) {
    k->c.evidence[k->c.n_evidence++] =
        (em_proto_evidence_t){.name = name, .value = {.type = EM_VALUE_FLOAT, .as.f = value}};
  }
}

static double ms(double ns) {
  return ns / 1e6;
}

/* A per-frame figure of both windows, and its growth. */
static bool both(const win_t *b, const win_t *n, int c) {
  return b->has[c] && n->has[c];
}

static double growth(const win_t *b, const win_t *n, int c) {
  return b->per_frame[c] - n->per_frame[c];
}

static bool gauge_both(const win_t *b, const win_t *n, int g) {
  return b->ghas[g] && n->ghas[g];
}

/* CPU-side causes: contention by run-queue delay, throttling, frequency cap and more work. */
static void cpu_causes(const win_t *b, const win_t *n, const em_diagnose_in_t *in,
                       em_diagnosis_t *out, cands_t *cs) {
  double throttled = both(b, n, C_THROT) ? growth(b, n, C_THROT) : 0;
  cand_t *k = cause(cs, EM_PROTO_CAUSE_CPU_THROTTLING, throttled);
  evidence(k, "throttled_ms_per_frame", ms(b->per_frame[C_THROT]));
  evidence(k, "baseline_throttled_ms_per_frame", ms(n->per_frame[C_THROT]));
  if (k && both(b, n, C_NR_THROT)) {
    evidence(k, "nr_throttled_per_frame", b->per_frame[C_NR_THROT]);
    evidence(k, "baseline_nr_throttled_per_frame", n->per_frame[C_NR_THROT]);
  }
  if (both(b, n, C_RUNQ)) {
    /* A throttled cgroup's threads wait runnable too: that part is throttling's. */
    k = cause(cs, EM_PROTO_CAUSE_CPU_CONTENTION,
              growth(b, n, C_RUNQ) - (throttled > 0 ? throttled : 0));
    evidence(k, "runq_delay_ms_per_frame", ms(b->per_frame[C_RUNQ]));
    evidence(k, "baseline_runq_delay_ms_per_frame", ms(n->per_frame[C_RUNQ]));
    if (k && both(b, n, C_INVOL)) {
      evidence(k, "involuntary_switches_per_frame", b->per_frame[C_INVOL]);
      evidence(k, "baseline_involuntary_switches_per_frame", n->per_frame[C_INVOL]);
    }
    for (size_t i = 0; k && i < in->n_others && i < EM_PROTO_VERDICT_MAX_PROCESSES; i++) {
      const em_diagnose_process_t *p = &in->others[i];
      if (!p->comm || !p->comm[0] || !(p->share >= 0 && p->share <= 1)) {
        continue;
      }
      char *comm = out->comm[k->c.n_processes];
      snprintf(comm, EM_DIAGNOSE_COMM_BYTES, "%s", p->comm);
      k->c.processes[k->c.n_processes++] =
          (em_proto_verdict_process_t){.pid = p->pid, .comm = comm, .share = p->share};
    }
  }
  if (!both(b, n, C_PROC_CPU)) {
    return;
  }
  double cpu_growth = growth(b, n, C_PROC_CPU);
  if (!(cpu_growth > 0)) {
    return;
  }
  double base_cpu = n->per_frame[C_PROC_CPU];
  double more = cpu_growth, capped = 0;
  bool instr = both(b, n, C_INSTR) && n->per_frame[C_INSTR] > 0;
  if (instr) {
    /* The part of the growth that the extra instructions account for at the old pace. */
    double ratio = b->per_frame[C_INSTR] / n->per_frame[C_INSTR];
    more = dmin(cpu_growth, base_cpu * dmax(0, ratio - 1));
    bool same_cpi = true;
    if (both(b, n, C_CYCLES) && b->per_frame[C_INSTR] > 0 && n->per_frame[C_CYCLES] > 0) {
      double cpi_b = b->per_frame[C_CYCLES] / b->per_frame[C_INSTR];
      double cpi_n = n->per_frame[C_CYCLES] / n->per_frame[C_INSTR];
      same_cpi = dabs(cpi_b / cpi_n - 1) < EM_DIAGNOSE_REL_STEP;
    }
    bool dropped = gauge_both(b, n, G_FREQ) &&
                   b->gauge[G_FREQ] < n->gauge[G_FREQ] * (1 - EM_DIAGNOSE_REL_STEP);
    if (same_cpi || dropped) {
      capped = cpu_growth - more; /* Same work, same cycles, more time: slower cycles. */
    }
  } else if (gauge_both(b, n, G_FREQ) && b->gauge[G_FREQ] > 0 &&
             b->gauge[G_FREQ] < n->gauge[G_FREQ] * (1 - EM_DIAGNOSE_REL_STEP)) {
    capped = dmin(cpu_growth, base_cpu * (n->gauge[G_FREQ] / b->gauge[G_FREQ] - 1));
    more = cpu_growth - capped;
  }
  k = cause(cs, EM_PROTO_CAUSE_FREQUENCY_CAP, capped);
  evidence(k, "cpu_ms_per_frame", ms(b->per_frame[C_PROC_CPU]));
  evidence(k, "baseline_cpu_ms_per_frame", ms(base_cpu));
  if (k && gauge_both(b, n, G_FREQ)) {
    evidence(k, "cpu_freq_mhz", b->gauge[G_FREQ] / 1e6);
    evidence(k, "baseline_cpu_freq_mhz", n->gauge[G_FREQ] / 1e6);
  }
  if (k && instr && both(b, n, C_CYCLES) && b->per_frame[C_INSTR] > 0) {
    evidence(k, "cycles_per_instruction", b->per_frame[C_CYCLES] / b->per_frame[C_INSTR]);
    evidence(k, "baseline_cycles_per_instruction", n->per_frame[C_CYCLES] / n->per_frame[C_INSTR]);
  }
  k = cause(cs, EM_PROTO_CAUSE_MORE_WORK, more);
  evidence(k, "cpu_ms_per_frame", ms(b->per_frame[C_PROC_CPU]));
  evidence(k, "baseline_cpu_ms_per_frame", ms(base_cpu));
  if (k && instr) {
    evidence(k, "instructions_per_frame", b->per_frame[C_INSTR]);
    evidence(k, "baseline_instructions_per_frame", n->per_frame[C_INSTR]);
  }
}

/* Frame time not spent on a CPU nor waiting for one, per frame. */
static double off_cpu(const win_t *w) {
  double off = w->frame_ns - w->per_frame[C_PROC_CPU] - (w->has[C_RUNQ] ? w->per_frame[C_RUNQ] : 0);
  return off > 0 ? off : 0;
}

/* The target's storage bytes per frame (read + write), when both windows have both. */
static bool storage(const win_t *b, const win_t *n, double *sb, double *sn) {
  if (!both(b, n, C_RD_BYTES) || !both(b, n, C_WR_BYTES)) {
    return false;
  }
  *sb = b->per_frame[C_RD_BYTES] + b->per_frame[C_WR_BYTES];
  *sn = n->per_frame[C_RD_BYTES] + n->per_frame[C_WR_BYTES];
  return true;
}

/* The storage bytes per frame of both windows as a cause's evidence, in KiB, when known. */
static void storage_evidence(cand_t *k, bool known, double sb, double sn) {
  if (k && known) {
    evidence(k, "storage_kb_per_frame", sb / 1024);
    evidence(k, "baseline_storage_kb_per_frame", sn / 1024);
  }
}

/*
 * Off-CPU causes: the growth of the off-CPU time goes to contention (by involuntary switches,
 * where the run-queue delay is absent), then to io and memory pressure by weight, or to
 * waiting when neither the target's storage bytes nor the I/O pressure grew.
 * Weights: memory pressure its PSI rise (with the major faults grown); io the larger of its
 * PSI rise (with the voluntary switches grown) and, when the target's storage bytes per frame
 * grew, EM_DIAGNOSE_PSI_POINTS: the bytes are the target's own evidence, as strong as the
 * least PSI rise the engine accepts, so alone they take the whole pool, and beside a memory
 * pressure that rose by several points (whose page-ins count in read_bytes too) the share
 * stays mostly memory's.
 */
static void off_cpu_causes(const win_t *b, const win_t *n, cands_t *cs) {
  if (!both(b, n, C_PROC_CPU)) {
    return; /* Without the CPU time there is no off-CPU time. */
  }
  double pool = off_cpu(b) - off_cpu(n);
  if (!(pool > 0)) {
    return;
  }
  bool vol = both(b, n, C_VOL);
  double gv = vol ? dmax(0, growth(b, n, C_VOL)) : 0;
  if (!both(b, n, C_RUNQ) && both(b, n, C_INVOL) && growth(b, n, C_INVOL) > 0) {
    double gi = growth(b, n, C_INVOL);
    double part = pool * gi / (gi + gv);
    cand_t *k = cause(cs, EM_PROTO_CAUSE_CPU_CONTENTION, part);
    evidence(k, "involuntary_switches_per_frame", b->per_frame[C_INVOL]);
    evidence(k, "baseline_involuntary_switches_per_frame", n->per_frame[C_INVOL]);
    evidence(k, "off_cpu_ms_per_frame", ms(off_cpu(b)));
    evidence(k, "baseline_off_cpu_ms_per_frame", ms(off_cpu(n)));
    pool -= part;
  }
  bool io_known = gauge_both(b, n, G_PSI_IO);
  double io_rise = io_known ? b->gauge[G_PSI_IO] - n->gauge[G_PSI_IO] : 0;
  double mem_rise = gauge_both(b, n, G_PSI_MEM) ? b->gauge[G_PSI_MEM] - n->gauge[G_PSI_MEM] : 0;
  double st_b = 0, st_n = 0;
  bool st_known = storage(b, n, &st_b, &st_n);
  bool st_grew =
      st_known && st_b - st_n >= STORAGE_STEP_BYTES && st_b > st_n * (1 + EM_DIAGNOSE_REL_STEP);
  double w_io = io_rise >= EM_DIAGNOSE_PSI_POINTS && gv > 0 ? io_rise : 0;
  if (st_grew) {
    w_io = dmax(w_io, EM_DIAGNOSE_PSI_POINTS);
  }
  double w_mem =
      mem_rise >= EM_DIAGNOSE_PSI_POINTS && both(b, n, C_MAJFLT) && growth(b, n, C_MAJFLT) > 0
          ? mem_rise
          : 0;
  if (w_io + w_mem > 0) {
    cand_t *k = cause(cs, EM_PROTO_CAUSE_MEMORY_PRESSURE, pool * w_mem / (w_io + w_mem));
    evidence(k, "major_faults_per_frame", b->per_frame[C_MAJFLT]);
    evidence(k, "baseline_major_faults_per_frame", n->per_frame[C_MAJFLT]);
    evidence(k, "psi_memory_some", b->gauge[G_PSI_MEM]);
    evidence(k, "baseline_psi_memory_some", n->gauge[G_PSI_MEM]);
    k = cause(cs, EM_PROTO_CAUSE_IO, pool * w_io / (w_io + w_mem));
    storage_evidence(k, st_known, st_b, st_n);
    if (k && io_known) {
      evidence(k, "psi_io_some", b->gauge[G_PSI_IO]);
      evidence(k, "baseline_psi_io_some", n->gauge[G_PSI_IO]);
    }
    if (k && vol) {
      evidence(k, "voluntary_switches_per_frame", b->per_frame[C_VOL]);
      evidence(k, "baseline_voluntary_switches_per_frame", n->per_frame[C_VOL]);
    }
    return;
  }
  if (!io_known && !st_known) {
    return; /* Neither I/O witness read: unexplained. */
  }
  if (io_known && io_rise >= EM_DIAGNOSE_PSI_POINTS) {
    return; /* I/O pressure grew without the voluntary switches: unexplained. */
  }
  cand_t *k = cause(cs, EM_PROTO_CAUSE_WAITING, pool);
  evidence(k, "off_cpu_ms_per_frame", ms(off_cpu(b)));
  evidence(k, "baseline_off_cpu_ms_per_frame", ms(off_cpu(n)));
  storage_evidence(k, st_known, st_b, st_n);
  if (k && vol) {
    evidence(k, "voluntary_switches_per_frame", b->per_frame[C_VOL]);
    evidence(k, "baseline_voluntary_switches_per_frame", n->per_frame[C_VOL]);
  }
}

static int by_share(const void *x, const void *y) {
  double a = ((const em_proto_verdict_cause_t *)x)->share;
  double b = ((const em_proto_verdict_cause_t *)y)->share;
  return a > b ? -1 : a < b;
}

/* Shares of the excess: clamped to [0, 1], scaled down together past a sum of 1, those under
 * EM_DIAGNOSE_MIN_SHARE left out, the rest unexplained; descending. */
static void settle(em_proto_verdict_t *v, cands_t *cs, double excess_ns) {
  double sum = 0;
  for (size_t i = 0; i < cs->n; i++) {
    double s = cs->cand[i].explained_ns / excess_ns;
    cs->cand[i].c.share = s < 0 ? 0 : s > 1 ? 1 : s;
    sum += cs->cand[i].c.share;
  }
  double scale = sum > 1 ? 1 / sum : 1;
  double kept = 0;
  v->n_causes = 0;
  for (size_t i = 0; i < cs->n; i++) {
    double s = cs->cand[i].c.share * scale;
    if (s < EM_DIAGNOSE_MIN_SHARE) {
      continue;
    }
    v->causes[v->n_causes] = cs->cand[i].c;
    v->causes[v->n_causes].share = s;
    v->n_causes++;
    kept += s;
  }
  double rest = 1 - kept;
  if (rest >= EM_DIAGNOSE_MIN_SHARE && v->n_causes < EM_PROTO_VERDICT_MAX_CAUSES) {
    em_proto_verdict_cause_t *u = &v->causes[v->n_causes++];
    *u = (em_proto_verdict_cause_t){.code = EM_PROTO_CAUSE_UNEXPLAINED, .share = rest};
    u->evidence[u->n_evidence++] = (em_proto_evidence_t){
        .name = "excess_ms", .value = {.type = EM_VALUE_FLOAT, .as.f = ms(excess_ns)}};
  }
  qsort(v->causes, v->n_causes, sizeof(*v->causes), by_share);
}

int em_diagnose(const em_diagnose_in_t *in, uint64_t *scratch, size_t scratch_cap,
                em_diagnosis_t *out) {
  if (!in || !out || (!scratch && scratch_cap) || in->window_ns == 0 || !in->stage_name ||
      !in->stage_name[0] || strlen(in->stage_name) >= sizeof(out->stage) ||
      !valid_statistic(in->statistic) || (in->n_ticks && !in->ticks) ||
      (in->n_spans && !in->spans) || (in->n_columns && !in->columns)) {
    return -EINVAL;
  }
  uint64_t b_to = in->trigger_ns;
  uint64_t b_from = judged_from(in);
  double mean;
  size_t n_d = 0;
  if (stage_spans(in, b_from, b_to, &mean, scratch, scratch_cap, &n_d) == 0) {
    return -ENOENT;
  }
  *out = (em_diagnosis_t){0};
  memcpy(out->stage, in->stage_name, strlen(in->stage_name) + 1);
  snprintf(out->statistic, sizeof(out->statistic), "%s", in->statistic);
  em_proto_verdict_t *v = &out->v;
  v->stage = out->stage;
  v->statistic = out->statistic;
  v->breach_ns = statistic(in->statistic, scratch, n_d);

  /* The breach window as ticks: the last tick at or before the trigger and the last one a
   * window before it (the one before, when the window is shorter than a tick). */
  size_t i1 = tick_at_or_before(in, b_to);
  size_t i0 =
      i1 == SIZE_MAX ? SIZE_MAX : tick_at_or_before(in, in->ticks[i1].mono_ns - in->window_ns);
  if (i1 != SIZE_MAX && (i0 == SIZE_MAX || i0 == i1)) {
    i0 = i1 > 0 ? i1 - 1 : SIZE_MAX;
  }
  /* The baseline: NOMINAL ticks before the breach window's first tick, less the run of windows
   * just before it that already broke the bound (the breach building up while the rule waited
   * for its enter_windows: comparing with them would hide the excess). */
  uint64_t n_to = b_from < in->nominal_to_ns ? b_from : in->nominal_to_ns;
  while (in->bound_ns > 0 && n_to >= in->nominal_from_ns + in->window_ns) {
    size_t n_w = 0;
    stage_spans(in, n_to - in->window_ns, n_to, &mean, scratch, scratch_cap, &n_w);
    if (n_w == 0 || statistic(in->statistic, scratch, n_w) <= in->bound_ns) {
      break;
    }
    n_to -= in->window_ns;
  }
  size_t j1 = tick_at_or_before(
      in, i0 != SIZE_MAX && in->ticks[i0].mono_ns < n_to ? in->ticks[i0].mono_ns : n_to);
  size_t j0 = tick_at_or_before(in, in->nominal_from_ns);
  if (j0 == SIZE_MAX || in->ticks[j0].mono_ns < in->nominal_from_ns) {
    j0 = j0 == SIZE_MAX ? 0 : j0 + 1; /* The first tick of the stretch. */
  }
  uint64_t base_len = j1 != SIZE_MAX && j0 < j1 && in->nominal_from_ns < n_to
                          ? in->ticks[j1].mono_ns - in->ticks[j0].mono_ns
                          : 0;
  size_t n_base = 0;
  if (base_len >= in->window_ns) {
    stage_spans(in, in->ticks[j0].mono_ns, in->ticks[j1].mono_ns, &mean, scratch, scratch_cap,
                &n_base);
  }
  if (n_base == 0) {
    /* No NOMINAL window to compare with: one cause says so, no guess. */
    em_proto_verdict_cause_t *u = &v->causes[v->n_causes++];
    *u = (em_proto_verdict_cause_t){.code = EM_PROTO_CAUSE_UNEXPLAINED, .share = 1};
    u->evidence[u->n_evidence++] = (em_proto_evidence_t){
        .name = "nominal_windows", .value = {.type = EM_VALUE_UINT, .as.u = 0}};
    return 0;
  }
  v->nominal_windows = (uint32_t)(base_len / in->window_ns);
  v->baseline_ns = statistic(in->statistic, scratch, n_base);
  if (v->breach_ns <= v->baseline_ns) {
    return 0; /* No excess: nothing to explain. */
  }
  double excess = (double)(v->breach_ns - v->baseline_ns);

  colmap_t m;
  map_columns(in, &m);
  cands_t cs = {0};
  if (i0 != SIZE_MAX && i1 != SIZE_MAX) {
    win_t wb, wn;
    reduce(in, &m, i0, i1, &wb);
    reduce(in, &m, j0, j1, &wn);
    if (wb.frames > 0 && wn.frames > 0) {
      cpu_causes(&wb, &wn, in, out, &cs);
      off_cpu_causes(&wb, &wn, &cs);
    }
  }
  settle(v, &cs, excess);
  return 0;
}

void em_diagnosis_copy(em_diagnosis_t *dst, const em_diagnosis_t *src) {
  if (!dst || !src || dst == src) {
    return;
  }
  *dst = *src;
  dst->v.stage = dst->stage;
  dst->v.statistic = dst->statistic;
  for (size_t i = 0; i < dst->v.n_causes; i++) {
    em_proto_verdict_cause_t *c = &dst->v.causes[i];
    /* Offsets into the whole arrays as bytes: comm[0] + 32 would index past comm[0]. */
    for (size_t p = 0; p < c->n_processes; p++) {
      ptrdiff_t at = c->processes[p].comm - (const char *)src->comm;
      if (at >= 0 && (size_t)at < sizeof(src->comm)) {
        c->processes[p].comm = (const char *)dst->comm + at;
      }
    }
    for (size_t k = 0; k < c->n_functions; k++) {
      ptrdiff_t at = c->functions[k].name - (const char *)src->fn;
      if (at >= 0 && (size_t)at < sizeof(src->fn)) {
        c->functions[k].name = (const char *)dst->fn + at;
      }
    }
  }
}
