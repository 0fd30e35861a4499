/*
 * flight_vectors.c - the golden flight recordings (see vectors.h): an escalation with two
 * stages, ticks carrying a counter column, gauges, a null and a column missing from a tick,
 * spans whose frame ids go backwards across stages; a recording taken on cmd/flight with no
 * previous level; one cut to fit, with every truncation count, replayed from the spool; and
 * the escalation again with the breach's verdict.
 */
#include "vectors.h"

#define T0   UINT64_C(1795262405000000000) /* 2026-11-21T12:00:05Z */
#define MONO UINT64_C(123456789012345)     /* The trigger, on the device's CLOCK_MONOTONIC. */
#define MS   UINT64_C(1000000)

static const char *const stages[] = {"capture", "infer"};

static const em_flight_column_t columns[] = {
    {"pmu.context-switches", "1", EM_METRIC_COUNTER},
    {"mem.rss", "By", EM_METRIC_GAUGE},
    {"psi.cpu.some.avg10", "%", EM_METRIC_GAUGE},
    {"pmu.cycles", "1", EM_METRIC_COUNTER},
};

/* PSI is read every other tick; the PMU cannot count cycles on this board (null). */
static const em_flight_value_t tick0[] = {
    {0, U(1000)}, {1, U(734003200)}, {2, F(0.5)}, {3, ABSENT}};
static const em_flight_value_t tick1[] = {{0, U(1012)}, {1, U(734011392)}, {3, ABSENT}};
static const em_flight_value_t tick2[] = {
    {0, U(1030)}, {1, U(734019584)}, {2, F(1.25)}, {3, ABSENT}};
static const em_flight_value_t tick3[] = {{0, U(1031)}, {1, U(734019584)}, {3, ABSENT}};

static const em_flight_tick_t ticks[] = {
    {MONO - 200 * MS, tick0, 4},
    {MONO - 100 * MS, tick1, 3},
    {MONO, tick2, 4},
    {MONO + 100 * MS, tick3, 3},
};

/* Capture runs ahead of inference: frame 43 is captured before frame 42 is inferred. */
static const em_flight_span_t spans[] = {
    {0, 41, MONO - 180 * MS, 8 * MS}, {1, 41, MONO - 171 * MS, 38 * MS},
    {0, 42, MONO - 80 * MS, 8 * MS},  {0, 43, MONO - 40 * MS, 9 * MS},
    {1, 42, MONO - 30 * MS, 52 * MS}, {0, 44, MONO + 20 * MS, 8 * MS},
    {1, 43, MONO + 23 * MS, 51 * MS},
};

static const em_flight_value_t cmd_tick0[] = {{0, U(77)}, {1, U(524288000)}};
static const em_flight_value_t cmd_tick1[] = {{0, U(80)}, {1, U(524288000)}};
static const em_flight_tick_t cmd_ticks[] = {
    {MONO - 50 * MS, cmd_tick0, 2},
    {MONO + 50 * MS, cmd_tick1, 2},
};
static const em_flight_span_t cmd_spans[] = {{1, 9000, MONO - 10 * MS, 30 * MS}};

/*
 * The breach's verdict the escalation above carries (and state_verdict beside it): infer's p99
 * against 12 NOMINAL windows, explained mostly by another process on the CPUs, then by more
 * work per frame, some memory pressure and a rest no measurement explains.
 */
const em_proto_verdict_t em_vector_verdict = {
    .stage = "infer",
    .statistic = "p99",
    .baseline_ns = 26000000,
    .breach_ns = 61200000,
    .nominal_windows = 12,
    .causes = {{.code = EM_PROTO_CAUSE_CPU_CONTENTION,
                .share = 0.81,
                .evidence = {{"runq_delay_ms_per_frame", F(28.4)},
                             {"involuntary_switches_per_frame", U(41)},
                             {"cpus_online", U(4)}},
                .n_evidence = 3,
                .processes = {{4122, "stress-ng", 0.92}, {801, "kworker/u8:2", 0.05}},
                .n_processes = 2},
               {.code = EM_PROTO_CAUSE_UNEXPLAINED,
                .share = 0.1,
                .evidence = {{"excess_ms", F(3.5)}},
                .n_evidence = 1},
               {.code = EM_PROTO_CAUSE_MORE_WORK,
                .share = 0.09,
                .evidence = {{"cpu_ms_per_frame_delta", F(3.1)}},
                .n_evidence = 1,
                .functions = {{"sgemm_", 6.0}, {"im2col_cpu", 1.5}},
                .n_functions = 2},
               {.code = EM_PROTO_CAUSE_MEMORY_PRESSURE,
                .share = 0.0,
                .evidence = {{"major_faults", U(0)}, {"psi_memory_some_avg10", F(0.0)}},
                .n_evidence = 2}},
    .n_causes = 4,
};

static em_flight_vector_t rows[] = {
    {"flight_basic",
     "escalation: 2 stages, a counter column, gauges, a null, a column missing from a tick, "
     "spans with frame ids going backwards across stages",
     {.head = {.time_ns = T0, .session = 3735928559u},
      .number = 0,
      .trigger = {.cause = EM_FLIGHT_ESCALATION,
                  .level = EM_LEVEL_DEGRADED,
                  .prev_level = EM_LEVEL_NOMINAL,
                  .rule = "infer.p99",
                  .stage = "infer",
                  .value = U(52000000),
                  .bound = U(40000000),
                  .reason = "infer p99 52.0 ms > 40.0 ms for 3 windows"},
      .trigger_mono_ns = MONO,
      .pre_ns = 200 * MS,
      .post_ns = 100 * MS,
      .period_ns = 100 * MS,
      .stages = stages,
      .n_stages = 2,
      .columns = columns,
      .n_columns = 4,
      .ticks = ticks,
      .n_ticks = 4,
      .spans = spans,
      .n_spans = 7}},
    {"flight_command",
     "taken on cmd/flight: no rule, no previous level",
     {.head = {.time_ns = T0, .session = 7},
      .number = 3,
      .trigger = {.cause = EM_FLIGHT_COMMAND,
                  .level = EM_LEVEL_NOMINAL,
                  .prev_level = EM_LEVEL_NONE,
                  .reason = "requested on cmd/flight"},
      .trigger_mono_ns = MONO,
      .pre_ns = 50 * MS,
      .post_ns = 50 * MS,
      .period_ns = 100 * MS,
      .stages = stages,
      .n_stages = 2,
      .columns = columns,
      .n_columns = 2,
      .ticks = cmd_ticks,
      .n_ticks = 2,
      .spans = cmd_spans,
      .n_spans = 1}},
    {"flight_truncated",
     "cut to fit its cap (spans and ticks left out, spans the ring overwrote), replayed from "
     "the spool",
     {.head = {.time_ns = T0, .session = 3735928559u},
      .number = 1,
      .trigger = {.cause = EM_FLIGHT_ESCALATION,
                  .level = EM_LEVEL_CRITICAL,
                  .prev_level = EM_LEVEL_DEGRADED,
                  .rule = "infer.deadline",
                  .stage = "infer",
                  .value = F(104.5),
                  .bound = F(100.0)},
      .trigger_mono_ns = MONO,
      .pre_ns = 10000 * MS,
      .post_ns = 2000 * MS,
      .period_ns = 100 * MS,
      .stages = stages,
      .n_stages = 2,
      .columns = columns,
      .n_columns = 4,
      .ticks = ticks + 2,
      .n_ticks = 2,
      .spans = spans + 4,
      .n_spans = 3,
      .truncated = {.spans_cut = 2880, .ticks_cut = 118, .spans_overwritten = 4096},
      .historical = true}},
    {"flight_verdict",
     "flight_basic with the breach's verdict (key 16): four causes in descending share, with "
     "evidence, other processes and grown functions",
     {.number = 2}},
};

const em_flight_vector_t *em_flight_vectors(size_t *count) {
  em_flight_t *v = &rows[3].flight; /* flight_verdict: flight_basic with a verdict */
  if (!v->verdict) {
    *v = rows[0].flight;
    v->number = 2;
    v->trigger.value = (em_value_t)U(61200000);
    v->trigger.reason = "infer p99 61.2 ms > 40.0 ms for 3 windows";
    v->verdict = &em_vector_verdict;
  }
  *count = sizeof(rows) / sizeof(rows[0]);
  return rows;
}
