/*
 * test_diagnose.c - unit tests of firmware/agent/record/diagnose.c, the verdict engine, over
 * synthetic recordings: 4 s of ticks every 100 ms, a frame of stage "infer" every 10 ms, the
 * first 3 s NOMINAL (the baseline) and the last second the breach window. Each scenario sets
 * the figures per frame of both windows; the recording's counters are their running totals.
 * Each cause alone comes first; mixed causes come in order of size; without a baseline there
 * is one "unexplained" cause; an absent figure skips its cause and is never read as 0; a
 * cause under EM_DIAGNOSE_MIN_SHARE is left out; every verdict passes em_proto_verdict_check.
 */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "diagnose.h"
#include "feed.h"
#include "flight.h"

#define MS       UINT64_C(1000000)
#define SEC      UINT64_C(1000000000)
#define PERIOD   (100 * MS)
#define TICKS    41u /* t = 0, 100 ms, ..., 4 s */
#define FRAME_NS (10 * MS)
#define FRAMES   (4u * 100u) /* One every 10 ms, the last ending at 4 s. */
#define TRIGGER  (4 * SEC)

/* The columns of the synthetic recording. */
enum {
  K_RUNQ,
  K_VOL,
  K_INVOL,
  K_CPU,
  K_MAJFLT,
  K_THROT,
  K_NR_THROT,
  K_INSTR,
  K_CYCLES,
  K_PSI_MEM,
  K_PSI_IO,
  K_FREQ,
  K_RD_BYTES,
  K_WR_BYTES,
  K_N
};
static const em_flight_column_t columns[K_N] = {
    {"sched.runq_delay", "ns", EM_METRIC_COUNTER},
    {"sched.ctxsw.voluntary", "1", EM_METRIC_COUNTER},
    {"sched.ctxsw.involuntary", "1", EM_METRIC_COUNTER},
    {"proc.cpu", "ns", EM_METRIC_COUNTER},
    {"mem.major_faults", "1", EM_METRIC_COUNTER},
    {"cgroup.cpu.throttled", "ns", EM_METRIC_COUNTER},
    {"cgroup.cpu.nr_throttled", "1", EM_METRIC_COUNTER},
    {"pmu.instructions", "1", EM_METRIC_COUNTER},
    {"pmu.cycles", "1", EM_METRIC_COUNTER},
    {"psi.memory.some.avg10", "%", EM_METRIC_GAUGE},
    {"psi.io.some.avg10", "%", EM_METRIC_GAUGE},
    {"cpu.policy0.freq", "Hz", EM_METRIC_GAUGE},
    {"io.read_bytes", "By", EM_METRIC_COUNTER},
    {"io.write_bytes", "By", EM_METRIC_COUNTER},
};

/* A scenario: each figure per frame (gauges as read) in the baseline [0] and the breach [1]. */
typedef struct {
  double frame_ms[2];
  double fig[K_N][2];
  bool absent[K_N]; /* Read as null on every tick. */
} scenario_t;

/* The nominal board: 5 ms frames, 4 ms of CPU, 0.5 ms waiting for a CPU. The target's storage
 * bytes are absent (a target whose /proc/<pid>/io the agent may not read) unless a test says. */
static scenario_t nominal(void) {
  scenario_t s = {.frame_ms = {5, 5}, .absent = {[K_RD_BYTES] = true, [K_WR_BYTES] = true}};
  double base[K_N] = {
      [K_RUNQ] = 0.5 * MS, [K_VOL] = 2,       [K_INVOL] = 1,    [K_CPU] = 4 * MS, [K_INSTR] = 1e7,
      [K_CYCLES] = 2e7,    [K_PSI_MEM] = 0.5, [K_PSI_IO] = 0.5, [K_FREQ] = 2e9};
  for (int k = 0; k < K_N; k++) {
    s.fig[k][0] = s.fig[k][1] = base[k];
  }
  return s;
}

typedef struct {
  em_flight_tick_t ticks[TICKS];
  em_flight_value_t values[TICKS][K_N];
  em_flight_span_t spans[FRAMES];
  uint64_t scratch[FRAMES];
  em_diagnose_in_t in;
  em_diagnosis_t out;
} rig_t;

static int is_breach(uint64_t t_ns) {
  return t_ns > TRIGGER - SEC;
}

/* Builds the recording of `s` into r and its input (baseline from 0, trigger at 4 s). */
static void build(rig_t *r, const scenario_t *s) {
  memset(r, 0, sizeof(*r));
  double total[K_N] = {0};
  for (unsigned i = 0; i < TICKS; i++) {
    uint64_t t = i * PERIOD;
    int w = is_breach(t);
    for (int k = 0; k < K_N; k++) {
      if (columns[k].kind == EM_METRIC_COUNTER && i > 0) {
        total[k] += s->fig[k][w] * (double)(PERIOD / FRAME_NS);
      }
      em_value_t v = {.type = EM_VALUE_ABSENT};
      if (!s->absent[k]) {
        v = columns[k].kind == EM_METRIC_COUNTER
                ? (em_value_t){.type = EM_VALUE_UINT, .as.u = (uint64_t)llround(total[k])}
                : (em_value_t){.type = EM_VALUE_FLOAT, .as.f = s->fig[k][w]};
      }
      r->values[i][k] = (em_flight_value_t){.column = (uint32_t)k, .value = v};
    }
    r->ticks[i] = (em_flight_tick_t){.mono_ns = t, .values = r->values[i], .n_values = K_N};
  }
  for (unsigned f = 0; f < FRAMES; f++) {
    uint64_t end = (f + 1) * FRAME_NS;
    uint64_t d = (uint64_t)llround(s->frame_ms[is_breach(end)] * (double)MS);
    r->spans[f] =
        (em_flight_span_t){.stage = 0, .frame_id = f, .start_ns = end - d, .duration_ns = d};
  }
  r->in = (em_diagnose_in_t){.columns = columns,
                             .n_columns = K_N,
                             .ticks = r->ticks,
                             .n_ticks = TICKS,
                             .spans = r->spans,
                             .n_spans = FRAMES,
                             .stage = 0,
                             .stage_name = "infer",
                             .statistic = "p99",
                             .trigger_ns = TRIGGER,
                             .window_ns = SEC,
                             .nominal_from_ns = 0,
                             .nominal_to_ns = UINT64_MAX};
}

static rig_t rig;

/* Runs the engine on `s` and checks what every verdict must be. */
static const em_proto_verdict_t *diagnose(const scenario_t *s) {
  build(&rig, s);
  assert_int_equal(em_diagnose(&rig.in, rig.scratch, FRAMES, &rig.out), 0);
  const em_proto_verdict_t *v = &rig.out.v;
  assert_int_equal(em_proto_verdict_check(v), 0);
  assert_string_equal(v->stage, "infer");
  assert_string_equal(v->statistic, "p99");
  double sum = 0;
  for (size_t i = 0; i < v->n_causes; i++) {
    sum += v->causes[i].share;
    assert_true(v->causes[i].share >= EM_DIAGNOSE_MIN_SHARE);
    if (i > 0) {
      assert_true(v->causes[i - 1].share >= v->causes[i].share);
    }
  }
  assert_true(sum <= 1 + 1e-9);
  return v;
}

static const em_proto_verdict_cause_t *find(const em_proto_verdict_t *v, uint32_t code) {
  for (size_t i = 0; i < v->n_causes; i++) {
    if (v->causes[i].code == code) {
      return &v->causes[i];
    }
  }
  return NULL;
}

static double ev(const em_proto_verdict_cause_t *c, const char *name) {
  for (size_t i = 0; i < c->n_evidence; i++) {
    if (strcmp(c->evidence[i].name, name) == 0) {
      return c->evidence[i].value.as.f;
    }
  }
  fail_msg("no evidence %s", name);
  return NAN;
}

/* The stage took 5 ms more per frame; `set` says what grew. */
static void expect_alone(scenario_t *s, uint32_t code) {
  s->frame_ms[1] = 10;
  const em_proto_verdict_t *v = diagnose(s);
  assert_int_equal(v->baseline_ns, 5 * MS);
  assert_int_equal(v->breach_ns, 10 * MS);
  assert_int_equal(v->nominal_windows, 3); /* Ticks 0 .. 3 s: three whole windows. */
  assert_true(v->n_causes >= 1);
  assert_int_equal(v->causes[0].code, code);
  assert_true(v->causes[0].share > 0.9);
}

static void more_work_alone(void **state) {
  (void)state;
  scenario_t s = nominal();
  s.fig[K_CPU][1] = 9 * MS;             /* 5 ms more CPU per frame... */
  s.fig[K_INSTR][1] = 1e7 * 9.0 / 4.0;  /* ...for as many more instructions... */
  s.fig[K_CYCLES][1] = 2e7 * 9.0 / 4.0; /* ...at the same pace. */
  expect_alone(&s, EM_PROTO_CAUSE_MORE_WORK);
  const em_proto_verdict_cause_t *c = &rig.out.v.causes[0];
  assert_float_equal(ev(c, "cpu_ms_per_frame"), 9, 1e-6);
  assert_float_equal(ev(c, "baseline_cpu_ms_per_frame"), 4, 1e-6);
  assert_float_equal(ev(c, "instructions_per_frame"), 2.25e7, 1);
}

static void cpu_contention_alone(void **state) {
  (void)state;
  scenario_t s = nominal();
  s.fig[K_RUNQ][1] = 5.5 * MS;
  s.fig[K_INVOL][1] = 6;
  expect_alone(&s, EM_PROTO_CAUSE_CPU_CONTENTION);
  const em_proto_verdict_cause_t *c = &rig.out.v.causes[0];
  assert_float_equal(ev(c, "runq_delay_ms_per_frame"), 5.5, 1e-6);
  assert_float_equal(ev(c, "baseline_runq_delay_ms_per_frame"), 0.5, 1e-6);
  assert_float_equal(ev(c, "involuntary_switches_per_frame"), 6, 1e-6);
}

static void cpu_throttling_alone(void **state) {
  (void)state;
  scenario_t s = nominal();
  /* A throttled cgroup's threads wait runnable: the run-queue delay grows as much. */
  s.fig[K_THROT][1] = 5 * MS;
  s.fig[K_NR_THROT][1] = 1;
  s.fig[K_RUNQ][1] = 5.5 * MS;
  expect_alone(&s, EM_PROTO_CAUSE_CPU_THROTTLING);
  assert_null(find(&rig.out.v, EM_PROTO_CAUSE_CPU_CONTENTION));
  assert_float_equal(ev(&rig.out.v.causes[0], "throttled_ms_per_frame"), 5, 1e-6);
}

static void frequency_cap_alone(void **state) {
  (void)state;
  scenario_t s = nominal();
  s.fig[K_CPU][1] = 9 * MS; /* The same instructions and cycles took longer. */
  s.fig[K_FREQ][1] = 0.9e9;
  expect_alone(&s, EM_PROTO_CAUSE_FREQUENCY_CAP);
  assert_null(find(&rig.out.v, EM_PROTO_CAUSE_MORE_WORK));
  const em_proto_verdict_cause_t *c = &rig.out.v.causes[0];
  assert_float_equal(ev(c, "cpu_freq_mhz"), 900, 1e-6);
  assert_float_equal(ev(c, "baseline_cpu_freq_mhz"), 2000, 1e-6);
  assert_float_equal(ev(c, "cycles_per_instruction"), 2, 1e-9);
}

static void frequency_cap_without_instructions(void **state) {
  (void)state;
  scenario_t s = nominal();
  s.absent[K_INSTR] = s.absent[K_CYCLES] = true;
  s.fig[K_CPU][1] = 9 * MS; /* 4 ms at 2 GHz is 9 ms at 0.9 GHz. */
  s.fig[K_FREQ][1] = 2e9 * 4.0 / 9.0;
  expect_alone(&s, EM_PROTO_CAUSE_FREQUENCY_CAP);
  assert_null(find(&rig.out.v, EM_PROTO_CAUSE_MORE_WORK));
}

static void memory_pressure_alone(void **state) {
  (void)state;
  scenario_t s = nominal();
  s.fig[K_MAJFLT][1] = 20;
  s.fig[K_PSI_MEM][1] = 30;
  s.fig[K_VOL][1] = 22; /* Each fault sleeps. */
  expect_alone(&s, EM_PROTO_CAUSE_MEMORY_PRESSURE);
  const em_proto_verdict_cause_t *c = &rig.out.v.causes[0];
  assert_float_equal(ev(c, "major_faults_per_frame"), 20, 1e-6);
  assert_float_equal(ev(c, "psi_memory_some"), 30, 1e-6);
}

static void io_alone(void **state) {
  (void)state;
  scenario_t s = nominal();
  s.fig[K_PSI_IO][1] = 20;
  s.fig[K_VOL][1] = 10;
  expect_alone(&s, EM_PROTO_CAUSE_IO);
  assert_float_equal(ev(&rig.out.v.causes[0], "psi_io_some"), 20, 1e-6);
}

static void waiting_alone(void **state) {
  (void)state;
  scenario_t s = nominal();
  s.fig[K_VOL][1] = 12; /* A lock: off the CPU, no I/O pressure. */
  expect_alone(&s, EM_PROTO_CAUSE_WAITING);
  const em_proto_verdict_cause_t *c = &rig.out.v.causes[0];
  assert_float_equal(ev(c, "off_cpu_ms_per_frame"), 5.5, 1e-6);
  assert_float_equal(ev(c, "baseline_off_cpu_ms_per_frame"), 0.5, 1e-6);
  assert_float_equal(ev(c, "voluntary_switches_per_frame"), 12, 1e-6);
}

/* The target's storage bytes: 2 KiB read and 8 KiB written per frame in the baseline. */
static void with_storage(scenario_t *s) {
  s->absent[K_RD_BYTES] = s->absent[K_WR_BYTES] = false;
  s->fig[K_RD_BYTES][0] = s->fig[K_RD_BYTES][1] = 2048;
  s->fig[K_WR_BYTES][0] = s->fig[K_WR_BYTES][1] = 8192;
}

/* Each frame writes 64 KiB more and syncs it; the machine's I/O pressure average has not
 * moved yet (it lags by seconds): the target's own bytes name io. */
static void io_from_storage_bytes_without_psi(void **state) {
  (void)state;
  scenario_t s = nominal();
  with_storage(&s);
  s.fig[K_WR_BYTES][1] = 8192 + 65536;
  s.fig[K_VOL][1] = 10;
  expect_alone(&s, EM_PROTO_CAUSE_IO);
  assert_null(find(&rig.out.v, EM_PROTO_CAUSE_WAITING));
  const em_proto_verdict_cause_t *c = &rig.out.v.causes[0];
  assert_float_equal(ev(c, "storage_kb_per_frame"), 74, 1e-6);
  assert_float_equal(ev(c, "baseline_storage_kb_per_frame"), 10, 1e-6);
  assert_float_equal(ev(c, "psi_io_some"), 0.5, 1e-6);
  assert_float_equal(ev(c, "baseline_psi_io_some"), 0.5, 1e-6);
  /* Without the PSI columns at all, the bytes alone name it too. */
  s.absent[K_PSI_IO] = s.absent[K_PSI_MEM] = true;
  expect_alone(&s, EM_PROTO_CAUSE_IO);
  assert_float_equal(ev(&rig.out.v.causes[0], "storage_kb_per_frame"), 74, 1e-6);
}

/* The same off-CPU growth without more storage bytes is waiting, and so is a growth of less
 * than a page per frame; with neither I/O witness read it is unexplained. */
static void waiting_when_storage_bytes_did_not_grow(void **state) {
  (void)state;
  scenario_t s = nominal();
  with_storage(&s);
  s.fig[K_VOL][1] = 10;
  expect_alone(&s, EM_PROTO_CAUSE_WAITING);
  assert_null(find(&rig.out.v, EM_PROTO_CAUSE_IO));
  const em_proto_verdict_cause_t *c = &rig.out.v.causes[0];
  assert_float_equal(ev(c, "storage_kb_per_frame"), 10, 1e-6);
  assert_float_equal(ev(c, "baseline_storage_kb_per_frame"), 10, 1e-6);
  s.fig[K_WR_BYTES][1] = 8192 + 2048; /* Half a page more per frame. */
  expect_alone(&s, EM_PROTO_CAUSE_WAITING);
  s.absent[K_PSI_IO] = true; /* The bytes alone say there was no more I/O. */
  expect_alone(&s, EM_PROTO_CAUSE_WAITING);
  s.absent[K_WR_BYTES] = true;
  const em_proto_verdict_t *v = diagnose(&s);
  assert_null(find(v, EM_PROTO_CAUSE_WAITING));
  assert_null(find(v, EM_PROTO_CAUSE_IO));
  assert_int_equal(v->causes[0].code, EM_PROTO_CAUSE_UNEXPLAINED);
}

/* Page-ins of major faults count in read_bytes too: with memory pressure risen by many points,
 * the pool stays memory pressure's. */
static void memory_pressure_keeps_the_pool_beside_storage_reads(void **state) {
  (void)state;
  scenario_t s = nominal();
  with_storage(&s);
  s.fig[K_MAJFLT][1] = 20;
  s.fig[K_PSI_MEM][1] = 30;
  s.fig[K_VOL][1] = 22;
  s.fig[K_RD_BYTES][1] = 2048 + 20 * 4096.0;
  expect_alone(&s, EM_PROTO_CAUSE_MEMORY_PRESSURE);
  assert_null(find(&rig.out.v, EM_PROTO_CAUSE_WAITING));
}

static void mixed_causes_come_by_size(void **state) {
  (void)state;
  scenario_t s = nominal();
  s.frame_ms[1] = 10;         /* 5 ms of excess: */
  s.fig[K_RUNQ][1] = 3 * MS;  /* 2.5 ms waiting for a CPU, */
  s.fig[K_CPU][1] = 5.5 * MS; /* 1.5 ms more CPU with more instructions, */
  s.fig[K_INSTR][1] = 1e7 * 5.5 / 4;
  s.fig[K_CYCLES][1] = 2e7 * 5.5 / 4;
  /* and 1 ms no figure explains (off-CPU grew with I/O pressure but no more sleeps). */
  s.fig[K_PSI_IO][1] = 10;
  const em_proto_verdict_t *v = diagnose(&s);
  assert_int_equal(v->n_causes, 3);
  assert_int_equal(v->causes[0].code, EM_PROTO_CAUSE_CPU_CONTENTION);
  assert_float_equal(v->causes[0].share, 0.5, 1e-6);
  assert_int_equal(v->causes[1].code, EM_PROTO_CAUSE_MORE_WORK);
  assert_float_equal(v->causes[1].share, 0.3, 1e-6);
  assert_int_equal(v->causes[2].code, EM_PROTO_CAUSE_UNEXPLAINED);
  assert_float_equal(v->causes[2].share, 0.2, 1e-6);
}

static void small_causes_are_left_out(void **state) {
  (void)state;
  scenario_t s = nominal();
  s.frame_ms[1] = 10;
  s.fig[K_RUNQ][1] = 5.2 * MS; /* 4.7 of the 5 ms... */
  s.fig[K_CPU][1] = 4.3 * MS;  /* ...0.3 ms (6 %) more CPU: under the threshold. */
  const em_proto_verdict_t *v = diagnose(&s);
  assert_int_equal(v->causes[0].code, EM_PROTO_CAUSE_CPU_CONTENTION);
  assert_null(find(v, EM_PROTO_CAUSE_MORE_WORK));
  assert_null(find(v, EM_PROTO_CAUSE_FREQUENCY_CAP));
  assert_null(find(v, EM_PROTO_CAUSE_UNEXPLAINED)); /* 6 % left over: under it too. */
}

static void shares_past_one_are_scaled_down(void **state) {
  (void)state;
  scenario_t s = nominal();
  s.frame_ms[1] = 10;          /* 5 ms of excess, but 6 ms of growth measured: */
  s.fig[K_RUNQ][1] = 4.5 * MS; /* 4 ms (0.8) */
  s.fig[K_CPU][1] = 6 * MS;    /* and 2 ms (0.4): 2/3 and 1/3 once scaled. */
  s.fig[K_INSTR][1] = 1.5e7;
  s.fig[K_CYCLES][1] = 3e7;
  const em_proto_verdict_t *v = diagnose(&s);
  assert_int_equal(v->n_causes, 2);
  assert_int_equal(v->causes[0].code, EM_PROTO_CAUSE_CPU_CONTENTION);
  assert_float_equal(v->causes[0].share, 2.0 / 3, 1e-6);
  assert_int_equal(v->causes[1].code, EM_PROTO_CAUSE_MORE_WORK);
  assert_float_equal(v->causes[1].share, 1.0 / 3, 1e-6);
}

static void no_baseline_says_so(void **state) {
  (void)state;
  scenario_t s = nominal();
  s.frame_ms[1] = 10;
  s.fig[K_RUNQ][1] = 5.5 * MS;
  build(&rig, &s);
  rig.in.nominal_from_ns = 2500 * MS; /* NOMINAL for half a window before the breach. */
  assert_int_equal(em_diagnose(&rig.in, rig.scratch, FRAMES, &rig.out), 0);
  const em_proto_verdict_t *v = &rig.out.v;
  assert_int_equal(em_proto_verdict_check(v), 0);
  assert_int_equal(v->nominal_windows, 0);
  assert_int_equal(v->baseline_ns, 0);
  assert_int_equal(v->breach_ns, 10 * MS);
  assert_int_equal(v->n_causes, 1);
  assert_int_equal(v->causes[0].code, EM_PROTO_CAUSE_UNEXPLAINED);
  assert_float_equal(v->causes[0].share, 1, 0);
  /* The level left NOMINAL before the breach window and never came back: the same. */
  rig.in.nominal_from_ns = 0;
  rig.in.nominal_to_ns = 500 * MS;
  assert_int_equal(em_diagnose(&rig.in, rig.scratch, FRAMES, &rig.out), 0);
  assert_int_equal(rig.out.v.nominal_windows, 0);
}

static void baseline_stops_where_nominal_ended(void **state) {
  (void)state;
  scenario_t s = nominal();
  s.frame_ms[1] = 10;
  s.fig[K_RUNQ][1] = 5.5 * MS;
  build(&rig, &s);
  rig.in.nominal_to_ns = 1500 * MS; /* WARN from 1.5 s on: one NOMINAL window. */
  assert_int_equal(em_diagnose(&rig.in, rig.scratch, FRAMES, &rig.out), 0);
  assert_int_equal(rig.out.v.nominal_windows, 1);
  assert_int_equal(rig.out.v.causes[0].code, EM_PROTO_CAUSE_CPU_CONTENTION);
}

/* Builds a contention breach (10 ms frames, 5.5 ms of run-queue delay per frame, after 3 s)
 * into rig, then gives the frames that end in (from, to] duration_ns. */
static void build_contention(uint64_t from, uint64_t to, uint64_t duration_ns) {
  scenario_t s = nominal();
  s.frame_ms[1] = 10;
  s.fig[K_RUNQ][1] = 5.5 * MS;
  build(&rig, &s);
  for (unsigned f = 0; f < FRAMES; f++) {
    em_flight_span_t *sp = &rig.spans[f];
    uint64_t end = sp->start_ns + sp->duration_ns;
    if (end > from && end <= to) {
      sp->duration_ns = duration_ns;
      sp->start_ns = end - sp->duration_ns;
    }
  }
}

/* The stage slowed 2 s before the trigger and the rule waited two windows before it rose:
 * those windows were NOMINAL yet already past the bound. Left in the baseline, they hide the
 * excess (nothing to explain); with the rule's bound they are the breach's start, and the
 * baseline is the one window before them. */
static void windows_past_the_bound_are_not_the_baseline(void **state) {
  (void)state;
  build_contention(1 * SEC, TRIGGER - SEC, 10 * MS);
  assert_int_equal(em_diagnose(&rig.in, rig.scratch, FRAMES, &rig.out), 0);
  assert_int_equal(rig.out.v.baseline_ns, 10 * MS); /* No bound known: the slow windows count. */
  assert_int_equal(rig.out.v.n_causes, 0);
  rig.in.bound_ns = 7 * MS;
  assert_int_equal(em_diagnose(&rig.in, rig.scratch, FRAMES, &rig.out), 0);
  assert_int_equal(rig.out.v.baseline_ns, 5 * MS);
  assert_int_equal(rig.out.v.nominal_windows, 1);
  assert_int_equal(rig.out.v.causes[0].code, EM_PROTO_CAUSE_CPU_CONTENTION);
  /* Every NOMINAL window already past the bound: no baseline, and the verdict says so. */
  rig.in.bound_ns = 4 * MS;
  assert_int_equal(em_diagnose(&rig.in, rig.scratch, FRAMES, &rig.out), 0);
  assert_int_equal(rig.out.v.nominal_windows, 0);
  assert_int_equal(rig.out.v.causes[0].code, EM_PROTO_CAUSE_UNEXPLAINED);
}

/* The window that opened on the tick at 3 s closed on a tick 250 ms late (4.25 s), which the
 * recorder has not taken yet when the verdict is computed: the rule judged (3 s, 4.25 s], not
 * the last second before the trigger. Frames ending in (3 s, 3.6 s] took 10 ms, the later ones
 * 5: the judged window's median is 10 ms (60 of its 100 frames), the last second's 5 ms (35 of
 * 75), which would have left nothing to explain. */
static void breach_window_is_the_one_the_rule_judged(void **state) {
  (void)state;
  build_contention(3600 * MS, UINT64_MAX, 5 * MS);
  rig.in.n_ticks = TICKS - 1; /* Up to 3.9 s. */
  rig.in.trigger_ns = TRIGGER + 250 * MS;
  rig.in.statistic = "p50";
  assert_int_equal(em_diagnose(&rig.in, rig.scratch, FRAMES, &rig.out), 0);
  assert_int_equal(rig.out.v.breach_ns, 10 * MS);
  assert_int_equal(rig.out.v.baseline_ns, 5 * MS);
  assert_int_equal(rig.out.v.nominal_windows, 2);
  assert_true(rig.out.v.n_causes >= 1);
  assert_int_equal(rig.out.v.causes[0].code, EM_PROTO_CAUSE_CPU_CONTENTION);
  /* The closing tick on time (4 s, recorded or not): the window is the last second. */
  rig.in.trigger_ns = TRIGGER;
  assert_int_equal(em_diagnose(&rig.in, rig.scratch, FRAMES, &rig.out), 0);
  assert_int_equal(rig.out.v.breach_ns, 10 * MS);
  rig.in.n_ticks = TICKS;
  assert_int_equal(em_diagnose(&rig.in, rig.scratch, FRAMES, &rig.out), 0);
  assert_int_equal(rig.out.v.breach_ns, 10 * MS);
  /* Without a tick to open on (the window opened as the agent started): trigger - window. */
  rig.in.n_ticks = 0;
  rig.in.trigger_ns = TRIGGER + 250 * MS;
  assert_int_equal(em_diagnose(&rig.in, rig.scratch, FRAMES, &rig.out), 0);
  assert_int_equal(rig.out.v.breach_ns, 5 * MS);
}

static void absent_runq_is_not_read_as_zero(void **state) {
  (void)state;
  scenario_t s = nominal();
  s.frame_ms[1] = 10;
  s.fig[K_RUNQ][1] = 5.5 * MS;
  s.absent[K_RUNQ] = s.absent[K_INVOL] = s.absent[K_PSI_IO] = true;
  const em_proto_verdict_t *v = diagnose(&s);
  /* Nothing measured the wait: no contention (nor waiting, with I/O pressure unknown). */
  assert_null(find(v, EM_PROTO_CAUSE_CPU_CONTENTION));
  assert_null(find(v, EM_PROTO_CAUSE_WAITING));
  assert_int_equal(v->n_causes, 1);
  assert_int_equal(v->causes[0].code, EM_PROTO_CAUSE_UNEXPLAINED);
  /* A column the recording does not have at all reads the same. */
  build(&rig, &s);
  rig.in.n_columns = K_RUNQ; /* None. */
  assert_int_equal(em_diagnose(&rig.in, rig.scratch, FRAMES, &rig.out), 0);
  assert_int_equal(rig.out.v.n_causes, 1);
  assert_int_equal(rig.out.v.causes[0].code, EM_PROTO_CAUSE_UNEXPLAINED);
}

/* The target attached a second into the baseline: its counters count from their first tick. */
static void counters_count_from_their_first_tick(void **state) {
  (void)state;
  scenario_t s = nominal();
  s.fig[K_CPU][1] = 9 * MS;
  s.fig[K_INSTR][1] = 1e7 * 9.0 / 4.0;
  s.fig[K_CYCLES][1] = 2e7 * 9.0 / 4.0;
  s.frame_ms[1] = 10;
  build(&rig, &s);
  for (unsigned i = 0; i < 10; i++) {
    for (unsigned k = 0; k < K_N; k++) {
      rig.values[i][k].value = (em_value_t){.type = EM_VALUE_ABSENT};
    }
  }
  assert_int_equal(em_diagnose(&rig.in, rig.scratch, FRAMES, &rig.out), 0);
  const em_proto_verdict_t *v = &rig.out.v;
  assert_int_equal(v->causes[0].code, EM_PROTO_CAUSE_MORE_WORK);
  assert_float_equal(ev(&v->causes[0], "baseline_cpu_ms_per_frame"), 4, 1e-6);
}

static void absent_cpu_time_skips_cpu_causes(void **state) {
  (void)state;
  scenario_t s = nominal();
  s.frame_ms[1] = 10;
  s.fig[K_CPU][1] = 9 * MS;
  s.absent[K_CPU] = true;
  const em_proto_verdict_t *v = diagnose(&s);
  assert_null(find(v, EM_PROTO_CAUSE_MORE_WORK));
  assert_null(find(v, EM_PROTO_CAUSE_FREQUENCY_CAP));
  assert_null(find(v, EM_PROTO_CAUSE_WAITING));
  assert_int_equal(v->causes[0].code, EM_PROTO_CAUSE_UNEXPLAINED);
}

static void involuntary_switches_stand_in_for_runq(void **state) {
  (void)state;
  scenario_t s = nominal();
  s.fig[K_RUNQ][1] = 5.5 * MS;
  s.absent[K_RUNQ] = true;
  s.fig[K_INVOL][1] = 11; /* Preempted ten times more per frame, sleeping no more. */
  expect_alone(&s, EM_PROTO_CAUSE_CPU_CONTENTION);
  assert_float_equal(ev(&rig.out.v.causes[0], "involuntary_switches_per_frame"), 11, 1e-6);
}

static void contention_names_who_else_ran(void **state) {
  (void)state;
  scenario_t s = nominal();
  s.frame_ms[1] = 10;
  s.fig[K_RUNQ][1] = 5.5 * MS;
  build(&rig, &s);
  em_diagnose_process_t others[] = {{.pid = 42, .comm = "stress-ng-cpu-worker", .share = 0.8},
                                    {.pid = 7, .comm = "kworker", .share = 0.1},
                                    {.pid = 9, .comm = "yes", .share = 0.05}};
  rig.in.others = others;
  rig.in.n_others = 3;
  assert_int_equal(em_diagnose(&rig.in, rig.scratch, FRAMES, &rig.out), 0);
  em_proto_verdict_cause_t *c = &rig.out.v.causes[0];
  assert_int_equal(c->n_processes, 3);
  /* A function name in the verdict's own storage, as em_feed_functions writes one. */
  memcpy(rig.out.fn[1], "extra_postprocess", sizeof("extra_postprocess"));
  c->functions[0] = (em_proto_verdict_function_t){.name = rig.out.fn[1], .growth = 40.0};
  c->n_functions = 1;
  assert_int_equal(c->processes[0].pid, 42);
  assert_string_equal(c->processes[0].comm, "stress-ng-cpu-w"); /* TASK_COMM_LEN */
  /* A copy points into itself. */
  static em_diagnosis_t copy;
  em_diagnosis_copy(&copy, &rig.out);
  memset(&rig.out, 0, sizeof(rig.out));
  assert_string_equal(copy.v.stage, "infer");
  assert_ptr_equal(copy.v.causes[0].processes[1].comm, copy.comm[1]);
  assert_string_equal(copy.v.causes[0].processes[1].comm, "kworker");
  assert_ptr_equal(copy.v.causes[0].processes[2].comm, copy.comm[2]);
  assert_ptr_equal(copy.v.causes[0].functions[0].name, copy.fn[1]);
  assert_string_equal(copy.v.causes[0].functions[0].name, "extra_postprocess");
  assert_int_equal(em_proto_verdict_check(&copy.v), 0);
}

static void statistics_and_refusals(void **state) {
  (void)state;
  scenario_t s = nominal();
  s.frame_ms[1] = 10;
  build(&rig, &s);
  static const char *const stats[] = {"p50", "p90", "p99", "p999", "max", "mean"};
  for (size_t i = 0; i < 6; i++) {
    rig.in.statistic = stats[i];
    assert_int_equal(em_diagnose(&rig.in, rig.scratch, FRAMES, &rig.out), 0);
    assert_int_equal(rig.out.v.breach_ns, 10 * MS);
    assert_int_equal(rig.out.v.baseline_ns, 5 * MS);
  }
  rig.in.statistic = "p75";
  assert_int_equal(em_diagnose(&rig.in, rig.scratch, FRAMES, &rig.out), -EINVAL);
  rig.in.statistic = "p99";
  rig.in.window_ns = 0;
  assert_int_equal(em_diagnose(&rig.in, rig.scratch, FRAMES, &rig.out), -EINVAL);
  rig.in.window_ns = SEC;
  rig.in.stage = 3; /* No span of that stage. */
  assert_int_equal(em_diagnose(&rig.in, rig.scratch, FRAMES, &rig.out), -ENOENT);
  rig.in.stage = 0;
  /* No excess (the breach no slower): a verdict with nothing to explain. */
  s.frame_ms[1] = 5;
  build(&rig, &s);
  assert_int_equal(em_diagnose(&rig.in, rig.scratch, FRAMES, &rig.out), 0);
  assert_int_equal(rig.out.v.n_causes, 0);
  assert_int_equal(rig.out.v.nominal_windows, 3);
}

/* The agent's path: the scenario fed tick by tick and span by span into a flight recorder whose
 * rings have wrapped, then em_flight_rec_view handed to the engine, gives the verdict the plain
 * arrays give. */
static void verdict_over_the_recorders_view(void **state) {
  (void)state;
  scenario_t s = nominal();
  s.fig[K_RUNQ][1] = 5.5 * MS;
  s.frame_ms[1] = 10;
  build(&rig, &s);
  em_flight_rec_opts_t o = {.period_ns = PERIOD,
                            .pre_ns = 3 * SEC,
                            .post_ns = 500 * MS,
                            .max_spans = 350, /* Fewer than the 400 frames: the ring wraps. */
                            .max_bytes = 65536,
                            .columns = columns,
                            .n_columns = K_N};
  em_flight_rec_t *r = NULL;
  assert_int_equal(em_flight_rec_new(&r, &o), 0);
  em_flight_rec_span(r, 0, "pre", 0, 0, 1); /* Another stage's name comes first. */
  size_t f = 0;
  for (unsigned i = 0; i < TICKS; i++) {
    for (; f < FRAMES && rig.spans[f].start_ns + rig.spans[f].duration_ns <= i * PERIOD; f++) {
      const em_flight_span_t *sp = &rig.spans[f];
      assert_int_equal(
          em_flight_rec_span(r, 1, "infer", sp->frame_id, sp->start_ns, sp->duration_ns), 0);
    }
    em_flight_value_t *v = em_flight_rec_tick(r, i * PERIOD);
    memcpy(v, rig.values[i], sizeof(rig.values[i]));
    em_flight_rec_commit(r, K_N);
  }
  em_flight_t view;
  em_flight_rec_view(r, &view);
  assert_int_equal(view.n_spans, 350);
  for (size_t i = 1; i < view.n_spans; i++) {
    assert_true(view.spans[i - 1].start_ns <= view.spans[i].start_ns);
  }
  assert_true(view.n_stages >= 2);
  assert_string_equal(view.stages[1], "infer");
  em_diagnose_in_t in = rig.in;
  in.ticks = view.ticks;
  in.n_ticks = view.n_ticks;
  in.spans = view.spans;
  in.n_spans = view.n_spans;
  in.stage = 1;
  assert_int_equal(em_diagnose(&in, rig.scratch, FRAMES, &rig.out), 0);
  const em_proto_verdict_t *v = &rig.out.v;
  assert_int_equal(em_proto_verdict_check(v), 0);
  /* The ring kept 3.5 s of spans: the baseline is what is left of its 3 s. */
  assert_int_equal(v->nominal_windows, 2);
  assert_int_equal(v->baseline_ns, 5 * MS);
  assert_int_equal(v->breach_ns, 10 * MS);
  assert_int_equal(v->causes[0].code, EM_PROTO_CAUSE_CPU_CONTENTION);
  assert_true(v->causes[0].share > 0.9);
  em_flight_rec_free(r);
}

/* What the feed published. */
static uint8_t published[EM_FLIGHT_MAX_BYTES];
static size_t published_len;

static int publish(void *ctx, const uint8_t *buf, size_t len, bool may_spool) {
  (void)ctx;
  (void)may_spool;
  memcpy(published, buf, len);
  published_len = len;
  return 0;
}

/* The agent's wiring: em_feed_diagnose follows the level, computes the verdict on a rise only,
 * em_feed_verdict hands it to the state message until the next change, and the recording the
 * escalation starts carries the same verdict; a rise too soon after NOMINAL has no baseline. */
static void feed_hands_the_verdict_to_state_and_recording(void **state) {
  (void)state;
  em_figures_opts_t fo = {.flight = true};
  em_figures_t *figs = NULL;
  assert_int_equal(em_figures_new(&figs, &fo), 0);
  size_t n_alias = em_figures_count(figs);
  size_t cpu = em_figures_alias(figs, EM_FIG_PROC_CPU);
  size_t runq = em_figures_alias(figs, EM_FIG_SCHED_RUNQ_DELAY);
  em_sample_t *samples = calloc(n_alias, sizeof(*samples));
  assert_non_null(samples);
  em_feed_opts_t o = {.enabled = true,
                      .figs = figs,
                      .period_ns = PERIOD,
                      .pre_ns = 4 * SEC,
                      .post_ns = 500 * MS,
                      .max_spans = 1024,
                      .max_bytes = EM_FLIGHT_MAX_BYTES,
                      .session = 7,
                      .publish = publish};
  em_feed_t *f = NULL;
  assert_int_equal(em_feed_new(&f, &o), 0);
  /* 5 ms frames on 4 ms of CPU; from 3 s on, 5 ms more of run-queue delay each. */
  uint64_t cpu_ns = 0, runq_ns = 0, frame = 0;
  for (uint64_t t = PERIOD; t <= 4500 * MS; t += PERIOD) {
    for (uint64_t end = t - PERIOD + FRAME_NS; end <= t; end += FRAME_NS) {
      uint64_t d = end > 3 * SEC ? 10 * MS : 5 * MS;
      em_feed_span(f, 0, "infer", frame++, end - d, d);
      cpu_ns += 4 * MS;
      runq_ns += end > 3 * SEC ? 5500 * 1000 : 500 * 1000;
    }
    for (size_t k = 0; k < n_alias; k++) {
      samples[k] = (em_sample_t){.alias = (uint32_t)k};
    }
    em_figures_set_u(samples, cpu, cpu_ns);
    em_figures_set_u(samples, runq, runq_ns);
    em_feed_tick(f, t, samples, 0);
    if (t == 4 * SEC) {
      /* The rise: a verdict, kept for the state message and the recording. */
      /* Who else ran, one of them with a command name that is not text: the processes are
       * left out rather than the verdict (or the state message). */
      em_others_list_t others = {.n = 2,
                                 .procs = {{.pid = 42, .comm = "hog", .share = 0.9},
                                           {.pid = 43, .comm = "\xff\xfe", .share = 0.1}}};
      const em_proto_verdict_t *v =
          em_feed_diagnose(f, EM_LEVEL_DEGRADED, "infer", "p99", SEC, NULL, t, &others);
      assert_non_null(v);
      assert_ptr_equal(em_feed_verdict(f), v);
      assert_int_equal(v->causes[0].code, EM_PROTO_CAUSE_CPU_CONTENTION);
      assert_int_equal(v->causes[0].n_processes, 0);
      assert_true(v->nominal_windows >= 2);
      em_flight_trigger_t trig = {.cause = EM_FLIGHT_ESCALATION,
                                  .level = EM_LEVEL_DEGRADED,
                                  .prev_level = EM_LEVEL_NOMINAL,
                                  .stage = "infer"};
      em_feed_trigger(f, &trig, t);
    }
    em_feed_publish(f, t, true);
  }
  assert_true(published_len > 0);
  static uint8_t scratch[1u << 22];
  assert_true(em_flight_scratch_bytes(published_len) <= sizeof(scratch));
  em_flight_t rec;
  assert_int_equal(em_flight_decode(published, published_len, &rec, scratch, sizeof(scratch), NULL),
                   0);
  assert_non_null(rec.verdict);
  const em_proto_verdict_t *v = em_feed_verdict(f);
  assert_string_equal(rec.verdict->stage, "infer");
  assert_int_equal(rec.verdict->baseline_ns, v->baseline_ns);
  assert_int_equal(rec.verdict->breach_ns, v->breach_ns);
  assert_int_equal(rec.verdict->n_causes, v->n_causes);
  assert_int_equal(rec.verdict->causes[0].code, EM_PROTO_CAUSE_CPU_CONTENTION);
  /* A step down carries none; nor does a rise of a rule that judges no latency. */
  assert_null(em_feed_diagnose(f, EM_LEVEL_WARN, "infer", "p99", SEC, NULL, 4550 * MS, NULL));
  assert_null(em_feed_verdict(f));
  assert_null(em_feed_diagnose(f, EM_LEVEL_DEGRADED, "infer", NULL, SEC, NULL, 4600 * MS, NULL));
  assert_null(em_feed_verdict(f));
  /* NOMINAL again, and a rise a quarter of a second later: no NOMINAL window to compare with. */
  assert_null(em_feed_diagnose(f, EM_LEVEL_NOMINAL, NULL, NULL, SEC, NULL, 4650 * MS, NULL));
  v = em_feed_diagnose(f, EM_LEVEL_DEGRADED, "infer", "p99", SEC, NULL, 4900 * MS, NULL);
  assert_non_null(v);
  assert_int_equal(v->nominal_windows, 0);
  assert_int_equal(v->causes[0].code, EM_PROTO_CAUSE_UNEXPLAINED);
  em_feed_free(f);
  em_figures_free(figs);
  free(samples);
}

/* The recorder's largest ring (65536 spans, 4x the default): the verdict over it, and what it
 * took (printed, not judged: the figure comes from a loaded machine; docs/DIAGNOSIS.md). */
static void largest_ring_is_judged(void **state) {
  (void)state;
  enum { N = 65536 };
  static em_flight_span_t spans[N];
  static uint64_t scratch[N];
  scenario_t s = nominal();
  s.frame_ms[1] = 10;
  build(&rig, &s);
  for (size_t i = 0; i < N; i++) {
    uint64_t end = (i + 1) * (4 * SEC / N);
    uint64_t d = is_breach(end) ? 10 * MS : 5 * MS;
    spans[i] = (em_flight_span_t){.stage = 0, .frame_id = i, .start_ns = end - d, .duration_ns = d};
  }
  rig.in.spans = spans;
  rig.in.n_spans = N;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  assert_int_equal(em_diagnose(&rig.in, scratch, N, &rig.out), 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double us = (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
  print_message("em_diagnose over %d spans, %u ticks: %.0f us\n", N, TICKS, us);
  assert_int_equal(rig.out.v.breach_ns, 10 * MS);
  assert_int_equal(rig.out.v.baseline_ns, 5 * MS);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(more_work_alone),
      cmocka_unit_test(cpu_contention_alone),
      cmocka_unit_test(cpu_throttling_alone),
      cmocka_unit_test(frequency_cap_alone),
      cmocka_unit_test(frequency_cap_without_instructions),
      cmocka_unit_test(memory_pressure_alone),
      cmocka_unit_test(io_alone),
      cmocka_unit_test(waiting_alone),
      cmocka_unit_test(io_from_storage_bytes_without_psi),
      cmocka_unit_test(waiting_when_storage_bytes_did_not_grow),
      cmocka_unit_test(memory_pressure_keeps_the_pool_beside_storage_reads),
      cmocka_unit_test(mixed_causes_come_by_size),
      cmocka_unit_test(small_causes_are_left_out),
      cmocka_unit_test(shares_past_one_are_scaled_down),
      cmocka_unit_test(no_baseline_says_so),
      cmocka_unit_test(baseline_stops_where_nominal_ended),
      cmocka_unit_test(windows_past_the_bound_are_not_the_baseline),
      cmocka_unit_test(breach_window_is_the_one_the_rule_judged),
      cmocka_unit_test(absent_runq_is_not_read_as_zero),
      cmocka_unit_test(counters_count_from_their_first_tick),
      cmocka_unit_test(absent_cpu_time_skips_cpu_causes),
      cmocka_unit_test(involuntary_switches_stand_in_for_runq),
      cmocka_unit_test(contention_names_who_else_ran),
      cmocka_unit_test(statistics_and_refusals),
      cmocka_unit_test(verdict_over_the_recorders_view),
      cmocka_unit_test(feed_hands_the_verdict_to_state_and_recording),
      cmocka_unit_test(largest_ring_is_judged),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
