/*
 * vectors.c - the golden vector rows (see vectors.h). One message per kind plus the edge
 * cases: empty stage list, an absent counter, every alias width, idle and all-zero stages,
 * negative bucket indices, float widths, and the largest message v1 allows.
 */
#include "vectors.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T0 UINT64_C(1795262400000000000) /* 2026-11-21T12:00:00Z */

static const em_metric_def_t metrics_full[] = {
    {.alias = 0,
     .name = "pmu.cycles",
     .unit = "1",
     .kind = EM_METRIC_COUNTER,
     .absent_reason = "hardware PMU events not supported by this machine (EOPNOTSUPP)"},
    {.alias = 1,
     .name = "pmu.instructions",
     .unit = "1",
     .kind = EM_METRIC_COUNTER,
     .absent_reason = "hardware PMU events not supported by this machine (EOPNOTSUPP)"},
    {.alias = 2, .name = "pmu.task_clock", .unit = "ns", .kind = EM_METRIC_COUNTER},
    {.alias = 3, .name = "pmu.context_switches", .unit = "1", .kind = EM_METRIC_DELTA},
    {.alias = 4, .name = "pmu.ipc", .unit = "1", .kind = EM_METRIC_GAUGE},
    {.alias = 5, .name = "mem.rss", .unit = "By", .kind = EM_METRIC_GAUGE},
    {.alias = 6, .name = "psi.cpu.some.avg10", .unit = "%", .kind = EM_METRIC_GAUGE},
};

static const em_budget_t budgets_full[] = {
    {.id = "infer.p99",
     .rule = "percentile",
     .level = EM_LEVEL_DEGRADED,
     .bound = U(40000000),
     .stage = "infer",
     .window_ns = 1000000000},
    {.id = "infer.deadline",
     .rule = "deadline",
     .level = EM_LEVEL_CRITICAL,
     .bound = U(100000000),
     .stage = "infer"},
    {.id = "rss.cap", .rule = "rss_cap", .level = EM_LEVEL_WARN, .bound = U(2147483648u)},
    {.id = "rss.slope",
     .rule = "rss_slope",
     .level = EM_LEVEL_WARN,
     .bound = F(12.5),
     .window_ns = UINT64_C(3600000000000)},
};

static const em_sample_t samples_basic[] = {
    {.alias = 0, .value = ABSENT},      {.alias = 1, .value = ABSENT},
    {.alias = 2, .value = U(98765432)}, {.alias = 3, .value = U(12)},
    {.alias = 4, .value = F(1.375)},    {.alias = 5, .value = U(734003200)},
    {.alias = 6, .value = F(0.1)},
};

static const em_bucket_t buckets_infer[] = {
    {.index = 1469, .count = 3}, {.index = 1471, .count = 12}, {.index = 1473, .count = 10},
    {.index = 1477, .count = 3}, {.index = 1500, .count = 1},  {.index = 1501, .count = 1},
};

static const em_bucket_t buckets_pre[] = {
    {.index = 1087, .count = 2},
    {.index = 1090, .count = 25},
    {.index = 1098, .count = 2},
    {.index = 1099, .count = 1},
};

static const em_bucket_t buckets_post[] = {
    {.index = 957, .count = 1},
    {.index = 959, .count = 20},
    {.index = 960, .count = 9},
};

/* Bucket indices are those of the values at scale 6: ceil(log2(v) * 64) - 1. */
static const em_stage_t stages_basic[] = {
    {.name = "preprocess",
     .count = 30,
     .sum_ns = 4050000,
     .min_ns = 130000,
     .max_ns = 148000,
     .p50_ns = 134000,
     .p90_ns = 135000,
     .p99_ns = 147000,
     .p999_ns = 148000,
     .scale = 6,
     .buckets = buckets_pre,
     .n_buckets = 4},
    {.name = "infer",
     .count = 30,
     .sum_ns = 250000000,
     .min_ns = 8200000,
     .max_ns = 11500000,
     .p50_ns = 8300000,
     .p90_ns = 8900000,
     .p99_ns = 11400000,
     .p999_ns = 11500000,
     .scale = 6,
     .buckets = buckets_infer,
     .n_buckets = 6},
    {.name = "postprocess",
     .count = 30,
     .sum_ns = 975000,
     .min_ns = 32000,
     .max_ns = 33000,
     .p50_ns = 32500,
     .p90_ns = 32900,
     .p99_ns = 33000,
     .p999_ns = 33000,
     .scale = 6,
     .buckets = buckets_post,
     .n_buckets = 3},
};

static const em_sample_t samples_absent_counter[] = {
    {.alias = 0, .value = ABSENT},
    {.alias = 2, .value = U(0)},
};

static const em_sample_t samples_alias_widths[] = {
    {.alias = 0, .value = U(1)},     {.alias = 23, .value = U(23)},
    {.alias = 24, .value = U(24)},   {.alias = 255, .value = U(255)},
    {.alias = 256, .value = U(256)}, {.alias = 65535, .value = U(65535)},
};

static const em_sample_t samples_numbers[] = {
    {.alias = 1, .value = F(0.5)}, /* binary32 */
    {.alias = 2, .value = F(0.1)}, /* binary64 */
    {.alias = 3, .value = I(-5)},         {.alias = 4, .value = I(INT64_MIN)},
    {.alias = 5, .value = U(UINT64_MAX)}, {.alias = 6, .value = F(-1e300)},
};

static const em_bucket_t buckets_tiny[] = {
    {.index = -1, .count = 1},
    {.index = 63, .count = 2},
    {.index = 101, .count = 1},
};

static const em_stage_t stages_edges[] = {
    {.name = "idle", .count = 0},
    {.name = "fast:gpu_sync",
     .count = 6,
     .sum_ns = 8,
     .min_ns = 0,
     .max_ns = 3,
     .p50_ns = 1,
     .p90_ns = 3,
     .p99_ns = 3,
     .p999_ns = 3,
     .scale = 6,
     .zero_count = 2,
     .buckets = buckets_tiny,
     .n_buckets = 3},
    {.name = "all-zero",
     .count = 4,
     .sum_ns = 0,
     .min_ns = 0,
     .max_ns = 0,
     .scale = -10,
     .zero_count = 4},
};

/* --- the largest message ------------------------------------------------------------ */

static em_sample_t big_samples[EM_PROTO_MAX_METRICS];
static em_stage_t big_stages[EM_PROTO_MAX_STAGES];
static em_bucket_t big_buckets[EM_PROTO_MAX_STAGES][EM_PROTO_MAX_BUCKETS];
static char big_names[EM_PROTO_MAX_STAGES][EM_PROTO_MAX_STAGE_BYTES + 1];

static size_t encoded_size(const em_msg_t *m) {
  size_t n = 0;
  int rc = em_proto_encode(m, NULL, 0, &n);
  return (rc == 0 || rc == EM_PROTO_ENOSPACE || rc == EM_PROTO_ETOOBIG) ? n : SIZE_MAX;
}

/* Adds n buckets (indices 3 apart, count 1) to a stage; false when it would pass the cap. */
static bool add_buckets(em_stage_t *st, em_bucket_t *buckets, size_t n) {
  if (st->n_buckets + n > EM_PROTO_MAX_BUCKETS) {
    return false;
  }
  for (size_t i = 0; i < n; i++) {
    size_t k = st->n_buckets++;
    buckets[k] = (em_bucket_t){.index = (int32_t)(k * 3), .count = 1};
  }
  st->count = st->n_buckets;
  st->sum_ns = st->count * 1000;
  st->min_ns = 1;
  st->p50_ns = st->p90_ns = st->p99_ns = st->p999_ns = st->max_ns = 1000;
  return true;
}

/* Widths a uint adds over a 1-byte uint: value for +0, +1, +2, +4, +8 bytes. */
static const uint64_t pad_values[] = {0, 24, 256, 65536, UINT64_C(4294967296)};
static const size_t pad_bytes[] = {0, 1, 2, 4, 8};

/*
 * A data message of exactly EM_PROTO_MAX_MESSAGE_BYTES: every sample the schema allows with
 * 3-byte aliases and binary64 values, every stage with a 31-byte name, buckets added one at a
 * time until the next would not fit, then two samples widened to land on the limit.
 */
static void build_largest(em_msg_t *m) {
  em_data_t *d = &m->u.data;
  m->kind = EM_MSG_DATA;
  *d = (em_data_t){.head = {.time_ns = T0, .session = UINT32_MAX},
                   .seq = UINT32_MAX,
                   .window_ns = 100000000,
                   .level = EM_LEVEL_CRITICAL,
                   .historical = true};
  for (size_t i = 0; i < EM_PROTO_MAX_METRICS; i++) {
    big_samples[i].alias = (uint32_t)(EM_PROTO_MAX_ALIAS - EM_PROTO_MAX_METRICS + 1 + i);
    big_samples[i].value = (em_value_t)F(0.1 * (double)(i + 1));
  }
  big_samples[0].value = (em_value_t)U(0);
  big_samples[1].value = (em_value_t)U(0);
  d->samples = big_samples;
  d->n_samples = EM_PROTO_MAX_METRICS;
  for (size_t s = 0; s < EM_PROTO_MAX_STAGES; s++) {
    memset(big_names[s], 'a' + (int)(s % 26), EM_PROTO_MAX_STAGE_BYTES);
    big_names[s][0] = (char)('A' + (int)(s / 26));
    big_stages[s] =
        (em_stage_t){.name = big_names[s], .count = 0, .scale = 20, .buckets = big_buckets[s]};
  }
  d->stages = big_stages;
  d->n_stages = EM_PROTO_MAX_STAGES;
  /* Grow every stage alike: 16 buckets a round while far from the limit, then one. */
  for (size_t step = 16; step > 0; step = step == 16 ? 1 : 0) {
    bool grew = true;
    while (grew) {
      grew = false;
      for (size_t s = 0; s < EM_PROTO_MAX_STAGES; s++) {
        em_stage_t saved = big_stages[s];
        if (!add_buckets(&big_stages[s], big_buckets[s], step) ||
            encoded_size(m) > EM_PROTO_MAX_MESSAGE_BYTES - (step > 1 ? 2048 : 16)) {
          big_stages[s] = saved;
          continue;
        }
        grew = true;
      }
    }
  }
  size_t deficit = EM_PROTO_MAX_MESSAGE_BYTES - encoded_size(m);
  for (size_t a = 0; a < 5; a++) {
    for (size_t b = 0; b < 5; b++) {
      if (pad_bytes[a] + pad_bytes[b] == deficit) {
        big_samples[0].value.as.u = pad_values[a];
        big_samples[1].value.as.u = pad_values[b];
        return;
      }
    }
  }
}

/* A model identity with two labels (ascending keys), and the light variant the same process
 * switches to on DEGRADED. */
static const em_label_t labels_full[] = {{.key = "input", .value = "224x224"},
                                         {.key = "variant", .value = "full"}};
static const em_label_t labels_light[] = {{.key = "input", .value = "224x224"},
                                          {.key = "variant", .value = "light"}};
#define MODEL_FULL                                                                                 \
  { .name = "mobilenet_v3_small", .version = "1.4", .labels = labels_full, .n_labels = 2 }

/* --- the table ------------------------------------------------------------------------ */

static em_vector_t rows[] = {
    {"birth_minimal",
     "birth with an empty dictionary and no budgets",
     {.kind = EM_MSG_BIRTH,
      .u.birth = {.head = {.time_ns = T0, .session = 1},
                  .device = "bench-01",
                  .agent_version = "0.1.0",
                  .board = "generic-x86_64",
                  .period_ns = 100000000}}},
    {"birth_full",
     "birth with every metric kind, absent metrics with reasons, four budgets",
     {.kind = EM_MSG_BIRTH,
      .u.birth = {.head = {.time_ns = T0, .session = 3735928559u},
                  .device = "orin-07.lab:left",
                  .agent_version = "0.1.0 (abc1234)",
                  .board = "jetson-agx-orin",
                  .period_ns = 100000000,
                  .metrics = metrics_full,
                  .n_metrics = 7,
                  .budgets = budgets_full,
                  .n_budgets = 4}}},
    {"birth_flight_recorder",
     "birth_full announcing its flight recorder (key 10): 10 s before a trigger, 2 s after",
     {.kind = EM_MSG_BIRTH}},
    {"birth_model",
     "birth_minimal of a target that named its model (key 11): name, version, two labels",
     {.kind = EM_MSG_BIRTH,
      .u.birth = {.head = {.time_ns = T0, .session = 1},
                  .device = "bench-01",
                  .agent_version = "0.1.0",
                  .board = "generic-x86_64",
                  .period_ns = 100000000,
                  .model = MODEL_FULL}}},
    {"data_model",
     "a window produced by a named model (key 10), one stage",
     {.kind = EM_MSG_DATA,
      .u.data = {.head = {.time_ns = T0 + 100000000, .session = 1},
                 .seq = 3,
                 .window_ns = 100000000,
                 .level = EM_LEVEL_NOMINAL,
                 .stages = stages_basic + 1,
                 .n_stages = 1,
                 .model = MODEL_FULL}}},
    {"data_model_no_labels",
     "a model identity without labels (key 2 absent), historical after it",
     {.kind = EM_MSG_DATA,
      .u.data = {.head = {.time_ns = T0, .session = 1},
                 .seq = 4,
                 .window_ns = 100000000,
                 .level = EM_LEVEL_NONE,
                 .historical = true,
                 .model = {.name = "yolo v8n (TensorRT)", .version = "2026-11-20+trt8.6"}}}},
    {"data_basic",
     "a 100 ms window: counters, memory, PSI, three stages with buckets",
     {.kind = EM_MSG_DATA,
      .u.data = {.head = {.time_ns = T0 + 100000000, .session = 3735928559u},
                 .seq = 42,
                 .window_ns = 100000000,
                 .level = EM_LEVEL_NOMINAL,
                 .samples = samples_basic,
                 .n_samples = 7,
                 .stages = stages_basic,
                 .n_stages = 3}}},
    {"data_empty_stages",
     "no values and an empty stage list",
     {.kind = EM_MSG_DATA,
      .u.data = {.head = {.time_ns = T0, .session = 1},
                 .seq = 0,
                 .window_ns = 1000000,
                 .level = EM_LEVEL_NONE}}},
    {"data_counter_absent",
     "a counter marked absent (null) beside a counter that is 0",
     {.kind = EM_MSG_DATA,
      .u.data = {.head = {.time_ns = T0, .session = 1},
                 .seq = 1,
                 .window_ns = 100000000,
                 .level = EM_LEVEL_NONE,
                 .samples = samples_absent_counter,
                 .n_samples = 2}}},
    {"data_alias_widths",
     "aliases of every CBOR width v1 allows (1, 2 and 3 bytes)",
     {.kind = EM_MSG_DATA,
      .u.data = {.head = {.time_ns = T0, .session = 1},
                 .seq = 4294967295u,
                 .window_ns = 100000000,
                 .level = EM_LEVEL_NONE,
                 .samples = samples_alias_widths,
                 .n_samples = 6}}},
    {"data_numbers",
     "binary32 and binary64 floats, negative and extreme integers",
     {.kind = EM_MSG_DATA,
      .u.data = {.head = {.time_ns = T0, .session = 1},
                 .seq = 2,
                 .window_ns = 100000000,
                 .level = EM_LEVEL_NONE,
                 .samples = samples_numbers,
                 .n_samples = 6}}},
    {"data_stage_edges",
     "idle stage, zero-length spans, negative bucket index, historical",
     {.kind = EM_MSG_DATA,
      .u.data = {.head = {.time_ns = T0, .session = 9},
                 .seq = 7,
                 .window_ns = 100000000,
                 .level = EM_LEVEL_WARN,
                 .historical = true,
                 .stages = stages_edges,
                 .n_stages = 3}}},
    {"data_largest", "the largest message v1 allows: exactly 65536 bytes", {.kind = EM_MSG_DATA}},
    {"state_degraded",
     "a level change with every field",
     {.kind = EM_MSG_STATE,
      .u.state = {.head = {.time_ns = T0, .session = 3735928559u},
                  .level = EM_LEVEL_DEGRADED,
                  .prev_level = EM_LEVEL_NOMINAL,
                  .mono_ns = 123456789012345,
                  .rule = "infer.p99",
                  .stage = "infer",
                  .value = U(52000000),
                  .bound = U(40000000),
                  .reason = "infer p99 52.0 ms > 40.0 ms for 3 windows (\"budget\" \\ 1 s)"}}},
    {"state_recovered",
     "a level change with only the required fields",
     {.kind = EM_MSG_STATE,
      .u.state = {.head = {.time_ns = T0, .session = 1},
                  .level = EM_LEVEL_NOMINAL,
                  .prev_level = EM_LEVEL_WARN,
                  .mono_ns = 1}}},
    {"state_utf8",
     "a reason in UTF-8 with a float measurement",
     {.kind = EM_MSG_STATE,
      .u.state = {.head = {.time_ns = T0, .session = 1},
                  .level = EM_LEVEL_CRITICAL,
                  .prev_level = EM_LEVEL_DEGRADED,
                  .mono_ns = 2,
                  .rule = "soc.temp",
                  .value = F(97.5),
                  .bound = F(95.0),
                  .reason = "SoC 97.5 \xc2\xb0"
                            "C \xe2\x89\xa5 95 \xc2\xb0"
                            "C"}}},
    {"state_model_change",
     "a change of model, not of level (level == prev_level): the light variant on DEGRADED",
     {.kind = EM_MSG_STATE,
      .u.state = {.head = {.time_ns = T0 + 200000000, .session = 1},
                  .level = EM_LEVEL_DEGRADED,
                  .prev_level = EM_LEVEL_DEGRADED,
                  .mono_ns = 3,
                  .reason = "model: mobilenet_v3_small 1.4 (input=224x224, variant=light)",
                  .model_change = true,
                  .model = {.name = "mobilenet_v3_small",
                            .version = "1.4",
                            .labels = labels_light,
                            .n_labels = 2}}}},
    {"state_verdict",
     "state_degraded's escalation with the breach's verdict (key 15)",
     {.kind = EM_MSG_STATE}},
    {"status_online",
     "retained status: online",
     {.kind = EM_MSG_STATUS, .u.status = {.head = {.time_ns = T0, .session = 7}, .online = true}}},
    {"status_offline",
     "retained status: offline (the Last Will)",
     {.kind = EM_MSG_STATUS, .u.status = {.head = {.time_ns = T0, .session = 7}, .online = false}}},
    {"cmd_rebirth",
     "host asks the agent to republish its birth",
     {.kind = EM_MSG_CMD, .u.cmd = {.head = {.time_ns = T0}, .command = EM_CMD_REBIRTH}}},
    {"cmd_flight",
     "host asks the agent for a flight recording now",
     {.kind = EM_MSG_CMD, .u.cmd = {.head = {.time_ns = T0}, .command = EM_CMD_FLIGHT}}},
    {"cmd_profile",
     "host asks the agent for a stack profile now, of a 5 s window (key 5)",
     {.kind = EM_MSG_CMD,
      .u.cmd = {.head = {.time_ns = T0}, .command = EM_CMD_PROFILE, .seconds = 5}}},
    {"birth_profiler",
     "birth_full announcing its stack profiler (key 12): 99 Hz, 5 s windows, at most 30 s, "
     "one window a minute",
     {.kind = EM_MSG_BIRTH}},
};

/* The row named `name` (one of the table's). */
static em_vector_t *row(const char *name) {
  size_t i = 0;
  while (strcmp(rows[i].name, name) != 0) {
    i++;
  }
  return &rows[i];
}

const em_vector_t *em_vectors(size_t *count) {
  static bool built;
  if (!built) {
    build_largest(&row("data_largest")->msg);
    em_msg_t *b = &row("birth_flight_recorder")->msg;
    *b = row("birth_full")->msg;
    b->u.birth.flight = (em_flight_recorder_t){.on = true,
                                               .pre_ns = UINT64_C(10000000000),
                                               .post_ns = UINT64_C(2000000000),
                                               .ticks = 120,
                                               .spans = 16384,
                                               .bytes = 917504};
    em_msg_t *s = &row("state_verdict")->msg;
    *s = row("state_degraded")->msg;
    s->u.state.value = (em_value_t)U(61200000);
    s->u.state.reason = "infer p99 61.2 ms > 40.0 ms for 3 windows";
    s->u.state.verdict = &em_vector_verdict;
    em_msg_t *p = &row("birth_profiler")->msg;
    *p = row("birth_full")->msg;
    p->u.birth.profiler = (em_profiler_t){
        .on = true, .hz = 99, .seconds = 5, .max_seconds = 30, .min_gap_seconds = 60};
    built = true;
  }
  *count = sizeof(rows) / sizeof(rows[0]);
  return rows;
}

uint8_t *em_vector_file(const char *dir, const char *stem, const char *ext, size_t *len) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s.%s", dir, stem, ext);
  FILE *f = fopen(path, "rb");
  if (!f) {
    return NULL;
  }
  uint8_t *data = NULL;
  long size = -1;
  if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
    data = malloc((size_t)size + 1);
  }
  if (data && fread(data, 1, (size_t)size, f) != (size_t)size) {
    free(data);
    data = NULL;
    errno = EIO;
  }
  fclose(f);
  if (data) {
    data[size] = 0;
    *len = (size_t)size;
  }
  return data;
}
