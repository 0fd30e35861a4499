/*
 * bench_proto.c - size and speed of one representative v1 data message: the CBOR codec
 * (em_proto_encode / em_proto_decode) against the same record as compact JSON with
 * descriptive string keys, built, printed, parsed and walked with Debian's libcjson, and
 * against the JSON that em_proto_to_json() writes for the same message.
 *
 * The record (see make_record()) is one window of an inference process watched by the agent:
 * 19 metric values (PMU counters with cycles and instructions absent, as on a VM without a
 * hardware PMU; memory figures; PSI avg10 for cpu, memory and io) and 3 stage windows
 * ("preprocess", "infer", "postprocess") of 30 spans each, with percentiles and a sparse
 * base-2 exponential histogram at scale 6. Latencies come from a fixed-seed generator, so
 * every run benchmarks the same bytes.
 *
 * Every operation produces the same thing on both sides: encoding goes from the C structs
 * to bytes; decoding goes from bytes back to the C structs (em_data_t, em_sample_t,
 * em_stage_t, em_bucket_t) with every field filled in, strings copied out of the input.
 *
 * Method: one warm-up pass, then `repeats` rounds; in every round each operation runs
 * `iterations` times back to back, timed with CLOCK_MONOTONIC, and the round's ns/op is
 * kept. Operations interleave within a round so that the VM's speed swings hit them alike.
 * The report gives min/median/max ns/op over the rounds and ratios of the medians. Results
 * feed a volatile sink so the compiler cannot drop the work.
 *
 * Owns: static buffers only, plus the cJSON trees and strings it frees after each use.
 * Single-threaded.
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "edgemon/proto.h"
#include "bench_clock.h"

#define BENCH_REPEATS            7
#define BENCH_DEFAULT_ITERATIONS 10000u
#define BENCH_MAX_ITERATIONS     100000000u

#define N_STAGES        3
#define SPANS_PER_STAGE 30
#define MAX_BUCKETS     64
#define HIST_SCALE      6
#define MAX_SAMPLES     32
#define CBOR_CAP        4096
#define JSON_CAP        8192

static volatile uint64_t sink; /* Every timed loop feeds this, so no work is dead. */

/* --- the record --------------------------------------------------------------------- */

/* The metric dictionary a birth would announce: alias, name (the JSON key), value type. */
typedef struct {
  uint32_t alias;
  const char *name;
  em_value_type_t type;
} metric_t;

static const metric_t metrics[] = {
    {1, "pmu.cycles", EM_VALUE_UINT},           /* Absent: no hardware PMU on the VM. */
    {2, "pmu.instructions", EM_VALUE_UINT},     /* Absent, likewise. */
    {3, "pmu.task_clock_ns", EM_VALUE_UINT},    /* Delta over the window. */
    {4, "pmu.context_switches", EM_VALUE_UINT}, /* Delta. */
    {5, "pmu.cpu_migrations", EM_VALUE_UINT},   /* Delta. */
    {6, "pmu.page_faults", EM_VALUE_UINT},      /* Delta. */
    {7, "pmu.ipc", EM_VALUE_FLOAT},             /* Derived: instructions / cycles. */
    {8, "mem.rss_bytes", EM_VALUE_UINT},        /* statm. */
    {9, "mem.shared_bytes", EM_VALUE_UINT},     /* statm. */
    {10, "mem.pss_bytes", EM_VALUE_UINT},       /* smaps_rollup. */
    {11, "mem.anon_bytes", EM_VALUE_UINT},      /* smaps_rollup. */
    {12, "mem.swap_bytes", EM_VALUE_UINT},      /* smaps_rollup. */
    {13, "mem.available_bytes", EM_VALUE_UINT}, /* /proc/meminfo MemAvailable. */
    /* /proc/pressure/{cpu,memory,io}: share of time stalled, percent, 10 s average. */
    {14, "psi.cpu.some.avg10", EM_VALUE_FLOAT},
    {15, "psi.cpu.full.avg10", EM_VALUE_FLOAT},
    {16, "psi.memory.some.avg10", EM_VALUE_FLOAT},
    {17, "psi.memory.full.avg10", EM_VALUE_FLOAT},
    {18, "psi.io.some.avg10", EM_VALUE_FLOAT},
    {19, "psi.io.full.avg10", EM_VALUE_FLOAT},
};
#define N_METRICS (sizeof(metrics) / sizeof(metrics[0]))

/* Values in dictionary order; `absent` marks the two PMU counters the VM cannot count. */
typedef struct {
  bool absent;
  uint64_t u;
  double f;
} raw_value_t;

static const raw_value_t raw_values[N_METRICS] = {
    {.absent = true}, {.absent = true}, {.u = 412873516},  {.u = 57},       {.u = 3},
    {.u = 214},       {.f = 1.37},      {.u = 187465728},  {.u = 41095168}, {.u = 152584192},
    {.u = 139104256}, {.u = 0},         {.u = 5829365760}, {.f = 12.41},    {.f = 0.0},
    {.f = 0.85},      {.f = 0.32},      {.f = 2.17},       {.f = 1.06},
};

/* Storage the record's pointers refer to. */
typedef struct {
  em_sample_t samples[MAX_SAMPLES];
  em_stage_t stages[N_STAGES];
  em_bucket_t buckets[N_STAGES][MAX_BUCKETS];
  char names[N_STAGES][EM_PROTO_MAX_STAGE_BYTES + 1];
  em_msg_t msg;
} record_t;

/* xorshift64*: a fixed-seed generator, so every run encodes the same record. */
static uint64_t rng_next(uint64_t *state) {
  uint64_t x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * 0x2545F4914F6CDD1DULL;
}

/* Uniform in [0, 1). */
static double rng_unit(uint64_t *state) {
  return (double)(rng_next(state) >> 11) / 9007199254740992.0;
}

/*
 * Bucket index of v > 0 at scale 6: floor(log2(v) * 64), the OpenTelemetry index for every v
 * that is not an exact bucket boundary. Integer part from the top bit, the 6 fraction bits by
 * repeated squaring of the mantissa (no libm).
 */
static int32_t bucket_index(uint64_t v) {
  int msb = 63;
  while (!(v >> msb)) {
    msb--;
  }
  double m = (double)v / (double)(1ULL << msb); /* [1, 2) */
  int32_t idx = msb;
  for (int bit = 0; bit < HIST_SCALE; bit++) {
    m *= m;
    idx *= 2;
    if (m >= 2.0) {
      m /= 2.0;
      idx += 1;
    }
  }
  return idx;
}

/*
 * One stage window: SPANS_PER_STAGE latencies around typical_ns (spread of about +-15%, one
 * slow outlier at 1.6x), summarised exactly as the agent does: count, sum, min, max,
 * nearest-rank percentiles, and the non-empty buckets at scale 6.
 */
static void make_stage(em_stage_t *s, em_bucket_t *buckets, char *name_buf, const char *name,
                       uint64_t typical_ns, uint64_t *rng) {
  uint64_t lat[SPANS_PER_STAGE];
  for (size_t i = 0; i < SPANS_PER_STAGE; i++) {
    double spread = (rng_unit(rng) + rng_unit(rng) + rng_unit(rng)) / 3.0 - 0.5; /* +-0.5 */
    lat[i] = (uint64_t)((double)typical_ns * (1.0 + 0.3 * spread));
  }
  lat[SPANS_PER_STAGE / 2] = typical_ns * 16 / 10;
  qsort(lat, SPANS_PER_STAGE, sizeof(lat[0]), bench_cmp_u64);

  snprintf(name_buf, EM_PROTO_MAX_STAGE_BYTES + 1, "%s", name);
  memset(s, 0, sizeof(*s));
  s->name = name_buf;
  s->count = SPANS_PER_STAGE;
  for (size_t i = 0; i < SPANS_PER_STAGE; i++) {
    s->sum_ns += lat[i];
  }
  s->min_ns = lat[0];
  s->max_ns = lat[SPANS_PER_STAGE - 1];
  s->p50_ns = bench_percentile(lat, SPANS_PER_STAGE, 0.50);
  s->p90_ns = bench_percentile(lat, SPANS_PER_STAGE, 0.90);
  s->p99_ns = bench_percentile(lat, SPANS_PER_STAGE, 0.99);
  s->p999_ns = bench_percentile(lat, SPANS_PER_STAGE, 0.999);
  s->scale = HIST_SCALE;
  s->zero_count = 0;
  size_t n = 0;
  for (size_t i = 0; i < SPANS_PER_STAGE; i++) {
    int32_t idx = bucket_index(lat[i]);
    if (n > 0 && buckets[n - 1].index == idx) {
      buckets[n - 1].count++;
    } else {
      buckets[n].index = idx;
      buckets[n].count = 1;
      n++;
    }
  }
  s->buckets = buckets;
  s->n_buckets = n;
}

/* Fills `r` with the benchmark's data message; r->msg points into r. */
static void make_record(record_t *r) {
  static const char *const stage_names[N_STAGES] = {"preprocess", "infer", "postprocess"};
  static const uint64_t typical_ns[N_STAGES] = {1800000, 8000000, 650000};
  uint64_t rng = 0x9E3779B97F4A7C15ULL;

  memset(r, 0, sizeof(*r));
  for (size_t i = 0; i < N_METRICS; i++) {
    em_sample_t *s = &r->samples[i];
    s->alias = metrics[i].alias;
    if (raw_values[i].absent) {
      s->value.type = EM_VALUE_ABSENT;
    } else if (metrics[i].type == EM_VALUE_FLOAT) {
      s->value.type = EM_VALUE_FLOAT;
      s->value.as.f = raw_values[i].f;
    } else {
      s->value.type = EM_VALUE_UINT;
      s->value.as.u = raw_values[i].u;
    }
  }
  for (size_t i = 0; i < N_STAGES; i++) {
    make_stage(&r->stages[i], r->buckets[i], r->names[i], stage_names[i], typical_ns[i], &rng);
  }
  r->msg.kind = EM_MSG_DATA;
  em_data_t *d = &r->msg.u.data;
  d->head.time_ns = 1795256100123456789ULL; /* 2026-11-21 10:15:00.123456789 UTC */
  d->head.session = 2718281828u;
  d->seq = 48213;
  d->window_ns = 1000000000; /* 1 s window: 30 frames of a 30 fps camera per stage. */
  d->level = EM_LEVEL_NOMINAL;
  d->historical = false;
  d->samples = r->samples;
  d->n_samples = N_METRICS;
  d->stages = r->stages;
  d->n_stages = N_STAGES;
}

/* --- JSON with cJSON ---------------------------------------------------------------- */

/*
 * The JSON form: the same fields as the CBOR message, keyed by name instead of by integer:
 *   {"v":1,"kind":"data","time_ns":..,"session":..,"seq":..,"window_ns":..,
 *    "values":{"pmu.cycles":null,...,"pmu.ipc":1.37,...},
 *    "stages":[{"name":"preprocess","count":30,"sum_ns":..,"min_ns":..,"max_ns":..,
 *               "p50_ns":..,"p90_ns":..,"p99_ns":..,"p999_ns":..,"scale":6,"zero_count":0,
 *               "buckets":[[index,count],...]},...],
 *    "level":"NOMINAL"}
 * cJSON keeps numbers as doubles. time_ns (about 1.8e18, above 2^53) is written as raw digits
 * so the text stays exact (cJSON_AddNumberToObject would print 1.7952561001234568e+18); on
 * parsing it comes back as a double, within 256 ns. Every other integer is below 2^53.
 * The returned string is cJSON's (free with cJSON_free), or NULL.
 */
static char *json_encode(const em_data_t *d) {
  char digits[24];
  char *out = NULL;
  cJSON *root = cJSON_CreateObject();
  if (!root) {
    return NULL;
  }
  snprintf(digits, sizeof(digits), "%" PRIu64, d->head.time_ns);
  cJSON_AddNumberToObject(root, "v", EM_PROTO_VERSION);
  cJSON_AddStringToObject(root, "kind", "data");
  cJSON_AddRawToObject(root, "time_ns", digits);
  cJSON_AddNumberToObject(root, "session", d->head.session);
  cJSON_AddNumberToObject(root, "seq", d->seq);
  cJSON_AddNumberToObject(root, "window_ns", (double)d->window_ns);
  cJSON *values = cJSON_AddObjectToObject(root, "values");
  if (!values) {
    goto done;
  }
  for (size_t i = 0; i < d->n_samples; i++) {
    const em_sample_t *s = &d->samples[i];
    const char *name = metrics[s->alias - 1].name;
    switch (s->value.type) {
    case EM_VALUE_ABSENT:
      cJSON_AddNullToObject(values, name);
      break;
    case EM_VALUE_UINT:
      cJSON_AddNumberToObject(values, name, (double)s->value.as.u);
      break;
    case EM_VALUE_INT:
      cJSON_AddNumberToObject(values, name, (double)s->value.as.i);
      break;
    case EM_VALUE_FLOAT:
      cJSON_AddNumberToObject(values, name, s->value.as.f);
      break;
    }
  }
  cJSON *stages = cJSON_AddArrayToObject(root, "stages");
  if (!stages) {
    goto done;
  }
  for (size_t i = 0; i < d->n_stages; i++) {
    const em_stage_t *s = &d->stages[i];
    cJSON *st = cJSON_CreateObject();
    if (!st) {
      goto done;
    }
    cJSON_AddItemToArray(stages, st);
    cJSON_AddStringToObject(st, "name", s->name);
    cJSON_AddNumberToObject(st, "count", (double)s->count);
    cJSON_AddNumberToObject(st, "sum_ns", (double)s->sum_ns);
    cJSON_AddNumberToObject(st, "min_ns", (double)s->min_ns);
    cJSON_AddNumberToObject(st, "max_ns", (double)s->max_ns);
    cJSON_AddNumberToObject(st, "p50_ns", (double)s->p50_ns);
    cJSON_AddNumberToObject(st, "p90_ns", (double)s->p90_ns);
    cJSON_AddNumberToObject(st, "p99_ns", (double)s->p99_ns);
    cJSON_AddNumberToObject(st, "p999_ns", (double)s->p999_ns);
    cJSON_AddNumberToObject(st, "scale", s->scale);
    cJSON_AddNumberToObject(st, "zero_count", (double)s->zero_count);
    cJSON *buckets = cJSON_AddArrayToObject(st, "buckets");
    if (!buckets) {
      goto done;
    }
    for (size_t b = 0; b < s->n_buckets; b++) {
      cJSON *pair = cJSON_CreateArray();
      if (!pair) {
        goto done;
      }
      cJSON_AddItemToArray(buckets, pair);
      cJSON_AddItemToArray(pair, cJSON_CreateNumber(s->buckets[b].index));
      cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)s->buckets[b].count));
    }
  }
  cJSON_AddStringToObject(root, "level", em_level_name(d->level));
  out = cJSON_PrintUnformatted(root);
done:
  cJSON_Delete(root);
  return out;
}

/* Storage for a JSON-decoded message, as the CBOR decoder's scratch is for its output. */
typedef struct {
  em_sample_t samples[MAX_SAMPLES];
  em_stage_t stages[N_STAGES];
  em_bucket_t buckets[N_STAGES][MAX_BUCKETS];
  char names[N_STAGES][EM_PROTO_MAX_STAGE_BYTES + 1];
} json_store_t;

static bool json_u64(const cJSON *obj, const char *key, uint64_t *out) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!cJSON_IsNumber(it) || it->valuedouble < 0) {
    return false;
  }
  *out = (uint64_t)it->valuedouble;
  return true;
}

static bool json_stage(const cJSON *st, em_stage_t *s, em_bucket_t *buckets, char *name) {
  const cJSON *nm = cJSON_GetObjectItemCaseSensitive(st, "name");
  const cJSON *scale = cJSON_GetObjectItemCaseSensitive(st, "scale");
  const cJSON *bk = cJSON_GetObjectItemCaseSensitive(st, "buckets");
  if (!cJSON_IsString(nm) || strlen(nm->valuestring) > EM_PROTO_MAX_STAGE_BYTES ||
      !cJSON_IsNumber(scale) || !cJSON_IsArray(bk)) {
    return false;
  }
  strcpy(name, nm->valuestring);
  s->name = name;
  s->scale = (int32_t)scale->valuedouble;
  if (!json_u64(st, "count", &s->count) || !json_u64(st, "sum_ns", &s->sum_ns) ||
      !json_u64(st, "min_ns", &s->min_ns) || !json_u64(st, "max_ns", &s->max_ns) ||
      !json_u64(st, "p50_ns", &s->p50_ns) || !json_u64(st, "p90_ns", &s->p90_ns) ||
      !json_u64(st, "p99_ns", &s->p99_ns) || !json_u64(st, "p999_ns", &s->p999_ns) ||
      !json_u64(st, "zero_count", &s->zero_count)) {
    return false;
  }
  size_t n = 0;
  const cJSON *pair;
  cJSON_ArrayForEach(pair, bk) {
    const cJSON *idx = pair->child;
    const cJSON *cnt = idx ? idx->next : NULL;
    if (n == MAX_BUCKETS || !cJSON_IsNumber(idx) || !cJSON_IsNumber(cnt)) {
      return false;
    }
    buckets[n].index = (int32_t)idx->valuedouble;
    buckets[n].count = (uint64_t)cnt->valuedouble;
    n++;
  }
  s->buckets = buckets;
  s->n_buckets = n;
  return true;
}

/*
 * Parses `text` and walks it into `out` (arrays and strings in `store`): looks each top-level
 * key up, maps each value's name to its alias through the dictionary and types it by the
 * dictionary's declared type. Checks JSON types only; the CBOR decoder checks more (ranges,
 * ordering, bucket totals). Returns true on success.
 */
static bool json_decode(const char *text, em_msg_t *out, json_store_t *store) {
  bool ok = false;
  cJSON *root = cJSON_Parse(text);
  if (!root) {
    return false;
  }
  memset(out, 0, sizeof(*out));
  out->kind = EM_MSG_DATA;
  em_data_t *d = &out->u.data;
  uint64_t v, session, seq;
  const cJSON *kind = cJSON_GetObjectItemCaseSensitive(root, "kind");
  if (!json_u64(root, "v", &v) || v != EM_PROTO_VERSION || !cJSON_IsString(kind) ||
      strcmp(kind->valuestring, "data") != 0 || !json_u64(root, "time_ns", &d->head.time_ns) ||
      !json_u64(root, "session", &session) || !json_u64(root, "seq", &seq) ||
      !json_u64(root, "window_ns", &d->window_ns)) {
    goto done;
  }
  d->head.session = (uint32_t)session;
  d->seq = (uint32_t)seq;

  const cJSON *values = cJSON_GetObjectItemCaseSensitive(root, "values");
  if (!cJSON_IsObject(values)) {
    goto done;
  }
  size_t n = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, values) {
    size_t m = 0;
    while (m < N_METRICS && strcmp(metrics[m].name, it->string) != 0) {
      m++;
    }
    if (m == N_METRICS || n == MAX_SAMPLES) {
      goto done;
    }
    em_sample_t *s = &store->samples[n++];
    s->alias = metrics[m].alias;
    if (cJSON_IsNull(it)) {
      s->value.type = EM_VALUE_ABSENT;
    } else if (!cJSON_IsNumber(it)) {
      goto done;
    } else if (metrics[m].type == EM_VALUE_FLOAT) {
      s->value.type = EM_VALUE_FLOAT;
      s->value.as.f = it->valuedouble;
    } else {
      s->value.type = EM_VALUE_UINT;
      s->value.as.u = (uint64_t)it->valuedouble;
    }
  }
  d->samples = store->samples;
  d->n_samples = n;

  const cJSON *stages = cJSON_GetObjectItemCaseSensitive(root, "stages");
  if (!cJSON_IsArray(stages)) {
    goto done;
  }
  n = 0;
  cJSON_ArrayForEach(it, stages) {
    if (n == N_STAGES || !json_stage(it, &store->stages[n], store->buckets[n], store->names[n])) {
      goto done;
    }
    n++;
  }
  d->stages = store->stages;
  d->n_stages = n;

  d->level = EM_LEVEL_NONE;
  const cJSON *level = cJSON_GetObjectItemCaseSensitive(root, "level");
  if (cJSON_IsString(level)) {
    for (int l = EM_LEVEL_NOMINAL; l <= EM_LEVEL_CRITICAL; l++) {
      if (strcmp(level->valuestring, em_level_name((em_level_t)l)) == 0) {
        d->level = (em_level_t)l;
      }
    }
  }
  ok = true;
done:
  cJSON_Delete(root);
  return ok;
}

/* --- checks ------------------------------------------------------------------------- */

/*
 * True when `b` holds the same data message as `a`. time_slack: how far time_ns may differ
 * (the JSON path carries it through a double).
 */
static bool same_data(const em_data_t *a, const em_data_t *b, uint64_t time_slack) {
  uint64_t dt = a->head.time_ns > b->head.time_ns ? a->head.time_ns - b->head.time_ns
                                                  : b->head.time_ns - a->head.time_ns;
  if (dt > time_slack || a->head.session != b->head.session || a->seq != b->seq ||
      a->window_ns != b->window_ns || a->level != b->level || a->historical != b->historical ||
      a->n_samples != b->n_samples || a->n_stages != b->n_stages) {
    return false;
  }
  for (size_t i = 0; i < a->n_samples; i++) {
    const em_sample_t *x = &a->samples[i];
    const em_sample_t *y = &b->samples[i];
    if (x->alias != y->alias || x->value.type != y->value.type) {
      return false;
    }
    if ((x->value.type == EM_VALUE_UINT && x->value.as.u != y->value.as.u) ||
        (x->value.type == EM_VALUE_FLOAT && x->value.as.f != y->value.as.f)) {
      return false;
    }
  }
  for (size_t i = 0; i < a->n_stages; i++) {
    const em_stage_t *x = &a->stages[i];
    const em_stage_t *y = &b->stages[i];
    if (strcmp(x->name, y->name) != 0 || x->count != y->count || x->sum_ns != y->sum_ns ||
        x->min_ns != y->min_ns || x->max_ns != y->max_ns || x->p50_ns != y->p50_ns ||
        x->p90_ns != y->p90_ns || x->p99_ns != y->p99_ns || x->p999_ns != y->p999_ns ||
        x->scale != y->scale || x->zero_count != y->zero_count || x->n_buckets != y->n_buckets) {
      return false;
    }
    for (size_t k = 0; k < x->n_buckets; k++) {
      if (x->buckets[k].index != y->buckets[k].index ||
          x->buckets[k].count != y->buckets[k].count) {
        return false;
      }
    }
  }
  return true;
}

/* --- timing ------------------------------------------------------------------------- */

enum { OP_CBOR_ENC, OP_CBOR_DEC, OP_CJSON_ENC, OP_CJSON_DEC, OP_EMJSON_ENC, N_OPS };

static const char *const op_names[N_OPS] = {
    "CBOR em_proto_encode", "CBOR em_proto_decode", "cJSON build+print",
    "cJSON parse+walk",     "em_proto_to_json",
};

typedef struct {
  const em_msg_t *msg;
  uint8_t cbor[CBOR_CAP];
  size_t cbor_len;
  void *scratch;
  size_t scratch_len;
  char *cjson_text; /* From cJSON, for the parse benchmark. */
  char emjson[JSON_CAP];
  json_store_t store;
  int failed; /* First error code seen inside a timed loop, 0 if none. */
} bench_t;

/* Runs `op` `iterations` times; returns ns per operation. */
static double run_op(bench_t *b, int op, unsigned iterations) {
  uint64_t acc = 0;
  uint64_t t0 = bench_now_ns();
  for (unsigned i = 0; i < iterations; i++) {
    switch (op) {
    case OP_CBOR_ENC: {
      size_t len = 0;
      int rc = em_proto_encode(b->msg, b->cbor, sizeof(b->cbor), &len);
      if (rc && !b->failed) {
        b->failed = rc;
      }
      acc += len + b->cbor[len / 2];
      break;
    }
    case OP_CBOR_DEC: {
      em_msg_t out;
      int rc = em_proto_decode(b->cbor, b->cbor_len, &out, b->scratch, b->scratch_len, NULL);
      if (rc && !b->failed) {
        b->failed = rc;
      }
      acc += rc ? 0 : out.u.data.stages[1].p99_ns + out.u.data.n_samples;
      break;
    }
    case OP_CJSON_ENC: {
      char *text = json_encode(&b->msg->u.data);
      if (!text && !b->failed) {
        b->failed = -1;
      }
      acc += text ? (uint64_t)(unsigned char)text[7] : 0;
      cJSON_free(text);
      break;
    }
    case OP_CJSON_DEC: {
      em_msg_t out;
      if (!json_decode(b->cjson_text, &out, &b->store)) {
        if (!b->failed) {
          b->failed = -1;
        }
      } else {
        acc += out.u.data.stages[1].p99_ns + out.u.data.n_samples;
      }
      break;
    }
    case OP_EMJSON_ENC: {
      size_t len = 0;
      int rc = em_proto_to_json(b->msg, b->emjson, sizeof(b->emjson), &len);
      if (rc && !b->failed) {
        b->failed = rc;
      }
      acc += len + (unsigned char)b->emjson[len / 2];
      break;
    }
    default:
      break;
    }
  }
  uint64_t t1 = bench_now_ns();
  sink += acc;
  return (double)(t1 - t0) / (double)iterations;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a;
  double y = *(const double *)b;
  return (x > y) - (x < y);
}

/* min, median, max of v[0..BENCH_REPEATS); sorts v. */
typedef struct {
  double min, med, max;
} stats_t;

static stats_t summarise(double *v) {
  qsort(v, BENCH_REPEATS, sizeof(v[0]), cmp_double);
  stats_t s = {v[0], v[BENCH_REPEATS / 2], v[BENCH_REPEATS - 1]};
  return s;
}

/* --- machine ------------------------------------------------------------------------ */

static void print_machine(void) {
  struct utsname u;
  char model[128] = "unknown";
  if (uname(&u) != 0) {
    snprintf(u.machine, sizeof(u.machine), "unknown");
    snprintf(u.release, sizeof(u.release), "unknown");
  }
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[256];
    while (fgets(line, sizeof(line), f)) {
      const char *colon = strchr(line, ':');
      if (colon && strncmp(line, "model name", 10) == 0) {
        snprintf(model, sizeof(model), "%s", colon + 2);
        model[strcspn(model, "\n")] = '\0';
        break;
      }
    }
    fclose(f);
  }
  printf("machine: %s, %s, %ld online CPUs, Linux %s\n", u.machine, model,
         sysconf(_SC_NPROCESSORS_ONLN), u.release);
#if defined(__GNUC__) && !defined(__clang__)
  const char *cc = "gcc ";
#else
  const char *cc = "";
#endif
  printf("compiler: %s%s; libcjson %s\n", cc, __VERSION__, cJSON_Version());
}

/* --- main --------------------------------------------------------------------------- */

static void usage(FILE *out, const char *argv0) {
  fprintf(out,
          "usage: %s [--iterations N] [--dump] [--help]\n"
          "Benchmarks one representative v1 data message: CBOR (em_proto_encode/decode)\n"
          "against the same record as JSON with string keys (libcjson), and\n"
          "em_proto_to_json. %d rounds of N iterations per operation (default %u).\n"
          "  --iterations N  iterations per operation per round, 1..%u\n"
          "  --dump          also print the CBOR (hex) and both JSON texts\n",
          argv0, BENCH_REPEATS, BENCH_DEFAULT_ITERATIONS, BENCH_MAX_ITERATIONS);
}

static bool parse_args(int argc, char **argv, unsigned *iterations, bool *dump) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout, argv[0]);
      exit(0);
    } else if (strcmp(argv[i], "--dump") == 0) {
      *dump = true;
    } else if (strcmp(argv[i], "--iterations") == 0 && i + 1 < argc) {
      const char *arg = argv[++i];
      char *end = NULL;
      unsigned long long n = strtoull(arg, &end, 10);
      if (arg[0] < '0' || arg[0] > '9' || *end != '\0' || n < 1 || n > BENCH_MAX_ITERATIONS) {
        fprintf(stderr, "%s: --iterations wants a whole number from 1 to %u, not '%s'\n", argv[0],
                BENCH_MAX_ITERATIONS, arg);
        return false;
      }
      *iterations = (unsigned)n;
    } else {
      fprintf(stderr, "%s: unknown or incomplete argument '%s'\n", argv[0], argv[i]);
      usage(stderr, argv[0]);
      return false;
    }
  }
  return true;
}

static void dump(const bench_t *b) {
  printf("\nCBOR (%zu bytes):\n", b->cbor_len);
  for (size_t i = 0; i < b->cbor_len; i++) {
    printf("%02x%s", b->cbor[i], (i + 1) % 32 == 0 || i + 1 == b->cbor_len ? "\n" : "");
  }
  printf("\ncJSON (%zu bytes):\n%s\n", strlen(b->cjson_text), b->cjson_text);
  printf("\nem_proto_to_json (%zu bytes):\n%s\n\n", strlen(b->emjson), b->emjson);
}

int main(int argc, char **argv) {
  static record_t rec;
  static bench_t b;
  unsigned iterations = BENCH_DEFAULT_ITERATIONS;
  bool want_dump = false;
  int status = 1;

  if (!parse_args(argc, argv, &iterations, &want_dump)) {
    return 2;
  }
  make_record(&rec);
  b.msg = &rec.msg;

  /* Untimed: produce every form once and check that each round trip gives the record back. */
  int rc = em_proto_encode(b.msg, b.cbor, sizeof(b.cbor), &b.cbor_len);
  if (rc) {
    fprintf(stderr, "em_proto_encode: %d (%s)\n", rc, em_proto_strerror(rc));
    return 1;
  }
  b.scratch_len = em_proto_scratch_bytes(b.cbor_len);
  b.scratch = malloc(b.scratch_len);
  if (!b.scratch) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  em_msg_t back;
  size_t err_at = 0;
  rc = em_proto_decode(b.cbor, b.cbor_len, &back, b.scratch, b.scratch_len, &err_at);
  if (rc) {
    fprintf(stderr, "em_proto_decode: %d (%s) at byte %zu of %zu\n", rc, em_proto_strerror(rc),
            err_at, b.cbor_len);
    goto done;
  }
  if (back.kind != EM_MSG_DATA || !same_data(&rec.msg.u.data, &back.u.data, 0)) {
    fprintf(stderr, "CBOR round trip changed the record\n");
    goto done;
  }
  b.cjson_text = json_encode(&rec.msg.u.data);
  if (!b.cjson_text) {
    fprintf(stderr, "cJSON could not build the record\n");
    goto done;
  }
  if (!json_decode(b.cjson_text, &back, &b.store) ||
      !same_data(&rec.msg.u.data, &back.u.data, 256)) {
    fprintf(stderr, "cJSON round trip changed the record\n");
    goto done;
  }
  size_t emjson_len = 0;
  rc = em_proto_to_json(b.msg, b.emjson, sizeof(b.emjson), &emjson_len);
  if (rc) {
    fprintf(stderr, "em_proto_to_json: %d (%s)\n", rc, em_proto_strerror(rc));
    goto done;
  }
  size_t cjson_len = strlen(b.cjson_text);

  print_machine();
  size_t n_buckets = 0;
  for (size_t i = 0; i < N_STAGES; i++) {
    n_buckets += rec.stages[i].n_buckets;
  }
  printf("record: %zu values (2 absent), %d stages x %d spans, %zu histogram buckets "
         "(%zu/%zu/%zu), scale %d\n",
         N_METRICS, N_STAGES, SPANS_PER_STAGE, n_buckets, rec.stages[0].n_buckets,
         rec.stages[1].n_buckets, rec.stages[2].n_buckets, HIST_SCALE);
  printf("method: warm-up, then %d rounds x %u iterations per operation, interleaved; "
         "CLOCK_MONOTONIC\n",
         BENCH_REPEATS, iterations);
  if (want_dump) {
    dump(&b);
  }
  fflush(stdout);

  /* Warm-up: a tenth of a round (at least 100 iterations) of every operation. */
  unsigned warm = iterations / 10 > 100 ? iterations / 10 : 100;
  for (int op = 0; op < N_OPS; op++) {
    (void)run_op(&b, op, warm);
  }
  double ns[N_OPS][BENCH_REPEATS];
  for (int r = 0; r < BENCH_REPEATS; r++) {
    for (int op = 0; op < N_OPS; op++) {
      ns[op][r] = run_op(&b, op, iterations);
    }
  }
  if (b.failed) {
    fprintf(stderr, "an operation failed inside the timed loop: %d (%s)\n", b.failed,
            b.failed == -1 ? "cJSON" : em_proto_strerror(b.failed));
    goto done;
  }
  stats_t st[N_OPS];
  for (int op = 0; op < N_OPS; op++) {
    st[op] = summarise(ns[op]);
  }

  printf("\n%-22s %8s %10s %10s %10s\n", "operation", "bytes", "min ns", "median ns", "max ns");
  const size_t bytes[N_OPS] = {b.cbor_len, b.cbor_len, cjson_len, cjson_len, emjson_len};
  for (int op = 0; op < N_OPS; op++) {
    printf("%-22s %8zu %10.0f %10.0f %10.0f\n", op_names[op], bytes[op], st[op].min, st[op].med,
           st[op].max);
  }
  printf("\nratios (cJSON / CBOR, medians): size %.2fx, encode %.2fx, decode %.2fx\n",
         (double)cjson_len / (double)b.cbor_len, st[OP_CJSON_ENC].med / st[OP_CBOR_ENC].med,
         st[OP_CJSON_DEC].med / st[OP_CBOR_DEC].med);
  printf("ratios (em_proto_to_json / CBOR, medians): size %.2fx, encode %.2fx\n",
         (double)emjson_len / (double)b.cbor_len, st[OP_EMJSON_ENC].med / st[OP_CBOR_ENC].med);
  printf("(sink %" PRIu64 ")\n", (uint64_t)sink);
  status = 0;
done:
  cJSON_free(b.cjson_text);
  free(b.scratch);
  return status;
}
