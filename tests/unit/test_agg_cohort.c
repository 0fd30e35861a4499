/*
 * test_agg_cohort.c - model cohorts in the store and /api/cohort (cohort.h) over a real SQLite
 * store written by em_store and read back through em_history's read-only connection.
 *
 * Every expected figure is computed here from the windows the test wrote: windows whose spans
 * all last the same time have that time as their exact mean and, with min == max, as their
 * merged percentile (the histogram clamps to [min, max]); the RSS slopes are those of the
 * straight lines the values were drawn from.
 */
#define _XOPEN_SOURCE 700 /* POSIX 2008 plus XSI, for nftw() in tmp_tree.h */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "cohort.h"
#include "history.h"
#include "store.h"
#include "store_query.h"
#include "tmp_tree.h"

#include <dict.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_NS 1000000000ull
/* A minute boundary: 1699999980 s is a multiple of 60. */
#define T0_NS (1699999980ull * S_NS)

typedef struct {
  char dir[64];
  char path[96];
  em_store_t *store;
  em_dict_t *dict;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof(*f));
  snprintf(f->dir, sizeof(f->dir), "/tmp/em-cohort-XXXXXX");
  assert_non_null(mkdtemp(f->dir));
  snprintf(f->path, sizeof(f->path), "%s/history.db", f->dir);
  em_store_opts_t o = {
      .path = f->path, .batch_ms = 1000, .batch_rows = 100000, .rollup_manual = true};
  char err[256];
  assert_int_equal(em_store_open(&f->store, &o, NULL, err, sizeof(err)), 0);
  assert_int_equal(em_dict_new(&f->dict), 0);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  em_store_close(f->store);
  em_dict_free(f->dict);
  assert_int_equal(em_tmp_tree_remove(f->dir), 0);
  free(f);
  return 0;
}

static const em_label_t LABELS[] = {{"input", "224x224"}, {"variant", "full"}};

static em_model_t model_v(const char *version) {
  return (em_model_t){"mobilenet", version, LABELS, 2};
}

/* A birth of session 1 naming mem.rss (alias 1) and pmu.ipc (alias 2). */
static void birth(fixture_t *f, const char *device, em_model_t model) {
  static const em_metric_def_t defs[] = {{.alias = 1, .name = "mem.rss", .unit = "By"},
                                         {.alias = 2, .name = "pmu.ipc", .unit = "1"}};
  em_msg_t m = {.kind = EM_MSG_BIRTH};
  m.u.birth = (em_birth_t){.head = {.time_ns = T0_NS - S_NS, .session = 1},
                           .device = device,
                           .agent_version = "0.1.0",
                           .board = "generic",
                           .period_ns = 5 * S_NS,
                           .metrics = defs,
                           .n_metrics = 2,
                           .model = model};
  em_device_t *dev = em_dict_device(f->dict, device, true);
  assert_int_equal(em_dict_set_birth(dev, &m.u.birth), 0);
  assert_int_equal(em_store_add(f->store, device, dev, &m, T0_NS), 0);
}

/* One data message at t_ns: `count` spans of stage infer lasting span_ns each, the level,
 * mem.rss (rss < 0: absent), pmu.ipc (ipc < 0: absent) and the model. */
static void window(fixture_t *f, const char *device, uint32_t seq, uint64_t t_ns, uint64_t count,
                   uint64_t span_ns, em_level_t level, double rss, double ipc, em_model_t model) {
  em_sample_t smp[2];
  size_t n = 0;
  if (rss >= 0) {
    smp[n++] = (em_sample_t){1, {.type = EM_VALUE_FLOAT, .as.f = rss}};
  }
  if (ipc >= 0) {
    smp[n++] = (em_sample_t){2, {.type = EM_VALUE_FLOAT, .as.f = ipc}};
  }
  /* Scale 0: bucket i holds (2^i, 2^(i+1)]. */
  em_bucket_t b = {(int32_t)floor(log2((double)span_ns - 0.5)), count};
  em_stage_t st = {.name = "infer",
                   .count = count,
                   .sum_ns = count * span_ns,
                   .min_ns = span_ns,
                   .max_ns = span_ns,
                   .p50_ns = span_ns,
                   .p90_ns = span_ns,
                   .p99_ns = span_ns,
                   .p999_ns = span_ns,
                   .scale = 0,
                   .buckets = &b,
                   .n_buckets = 1};
  em_msg_t m = {.kind = EM_MSG_DATA};
  m.u.data = (em_data_t){.head = {.time_ns = t_ns, .session = 1},
                         .seq = seq,
                         .window_ns = 5 * S_NS,
                         .level = level,
                         .samples = smp,
                         .n_samples = n,
                         .stages = &st,
                         .n_stages = 1,
                         .model = model};
  em_device_t *dev = em_dict_device(f->dict, device, false);
  assert_int_equal(em_store_add(f->store, device, dev, &m, t_ns), 0);
}

/*
 * Two devices over two minutes, a window every 5 s (24 each):
 *   dev-a: version 1.4 in the first minute (1 ms spans, NOMINAL, ipc 1.25), version 1.5 in the
 *          second (2 ms spans, 6 WARN then 6 DEGRADED, rss 1000 + 10 t);
 *   dev-b: version 1.5 throughout (3 ms spans the first minute, 4 ms the second), NOMINAL but
 *          its last two windows CRITICAL, rss 5000 - 2 t; no ipc.
 */
static void write_two_devices(fixture_t *f) {
  birth(f, "dev-a", model_v("1.4"));
  birth(f, "dev-b", model_v("1.5"));
  for (uint32_t k = 0; k < 24; k++) {
    uint64_t t = T0_NS + k * 5 * S_NS;
    double ts = (double)(t - T0_NS) / 1e9;
    if (k < 12) {
      window(f, "dev-a", k, t, 10, 1000000, EM_LEVEL_NOMINAL, -1, 1.25, model_v("1.4"));
    } else {
      window(f, "dev-a", k, t, 10, 2000000, k < 18 ? EM_LEVEL_WARN : EM_LEVEL_DEGRADED,
             1000 + 10 * ts, -1, model_v("1.5"));
    }
    window(f, "dev-b", k, t, 10, k < 12 ? 3000000 : 4000000,
           k < 22 ? EM_LEVEL_NOMINAL : EM_LEVEL_CRITICAL, 5000 - 2 * ts, -1, model_v("1.5"));
  }
  assert_int_equal(em_store_flush(f->store), 0);
}

/* The answer of /api/cohort for the raw query string pairs kv[0..n) (key, value, ...). */
static char *cohort(fixture_t *f, const char *const *kv, size_t n, unsigned *status) {
  em_query_param_t params[8];
  for (size_t i = 0; i < n; i++) {
    params[i] = (em_query_param_t){kv[2 * i], kv[2 * i + 1]};
  }
  em_query_t q;
  char err[200];
  em_history_reply_t r = {0};
  if (em_query_parse(EM_QUERY_COHORT, params, n, T0_NS + 3600 * S_NS, &q, err, sizeof(err)) != 0) {
    em_history_error(&r, 400, err);
  } else {
    em_history_t *h = NULL;
    assert_int_equal(em_history_open(&h, f->path, err, sizeof(err)), 0);
    em_cohort_query(h, &q, &r);
    em_history_close(h);
  }
  *status = r.status;
  assert_non_null(r.body);
  char *body = malloc(r.len + 1);
  memcpy(body, r.body, r.len);
  body[r.len] = '\0';
  free(r.body);
  return body;
}

static void expect_in(const char *body, const char *part) {
  if (!strstr(body, part)) {
    fail_msg("expected %s\nin %s", part, body);
  }
}

/* Windows belong to the cohort their own message named: dev-a's first minute (1.4) is not in
 * version=1.5, its second is; levels, units, means and p99s are those of the windows. */
static void cohort_splits_a_device_that_changed_version(void **state) {
  fixture_t *f = *state;
  write_two_devices(f);
  char from[24];
  char to[24];
  snprintf(from, sizeof(from), "%llu", (unsigned long long)T0_NS);
  snprintf(to, sizeof(to), "%llu", (unsigned long long)(T0_NS + 120 * S_NS));
  const char *kv[] = {"select", "version=1.5", "from", from, "to", to};
  unsigned status;
  char *body = cohort(f, kv, 3, &status);
  assert_int_equal(status, 200);
  expect_in(body, "\"devices\":[\"dev-a\",\"dev-b\"],\"windows\":36,");
  expect_in(body, "\"levels\":{\"NOMINAL\":22,\"WARN\":6,\"DEGRADED\":6,\"CRITICAL\":2}");
  /* 120 spans of 2 ms (dev-a) and 120 of 3 ms and 120 of 4 ms (dev-b): mean 3 ms. */
  expect_in(body, "{\"stage\":\"infer\",\"count\":360,\"mean_ns\":3000000,");
  char unit[320];
  snprintf(unit, sizeof(unit),
           "\"units\":[{\"device\":\"dev-a\",\"start_ns\":%llu,\"count\":120,\"mean_ns\":2000000,"
           "\"p99_ns\":2000000},{\"device\":\"dev-b\",\"start_ns\":%llu,\"count\":120,",
           (unsigned long long)(T0_NS + 60 * S_NS), (unsigned long long)T0_NS);
  expect_in(body, unit);
  snprintf(unit, sizeof(unit),
           "\"mean_ns\":3000000,\"p99_ns\":3000000},{\"device\":\"dev-b\",\"start_ns\":%llu,"
           "\"count\":120,\"mean_ns\":4000000,\"p99_ns\":4000000}]}]",
           (unsigned long long)(T0_NS + 60 * S_NS));
  expect_in(body, unit);
  /* Exact lines: dev-a 10 B/s over its 12 windows of 1.5, dev-b -2 B/s over 24. */
  expect_in(body, "\"rss_slope\":[{\"device\":\"dev-a\",\"bytes_per_s\":10");
  expect_in(body, "\"points\":12},{\"device\":\"dev-b\",\"bytes_per_s\":-2");
  expect_in(body, "\"points\":24}]");
  expect_in(body, "\"ipc\":null}");
  free(body);

  /* version=1.4 with the labels: dev-a's first minute only, its ipc, no rss points. */
  const char *kv14[] = {"select", "model=mobilenet,version=1.4,variant=full,input=224x224",
                        "from",   from,
                        "to",     to,
                        "unit",   "30"};
  body = cohort(f, kv14, 4, &status);
  assert_int_equal(status, 200);
  expect_in(body, "\"devices\":[\"dev-a\"],\"windows\":12,");
  expect_in(body, "\"levels\":{\"NOMINAL\":12,\"WARN\":0,\"DEGRADED\":0,\"CRITICAL\":0}");
  expect_in(body, "\"unit_s\":30");
  snprintf(unit, sizeof(unit),
           "\"units\":[{\"device\":\"dev-a\",\"start_ns\":%llu,\"count\":60,\"mean_ns\":1000000,"
           "\"p99_ns\":1000000},{\"device\":\"dev-a\",\"start_ns\":%llu,\"count\":60,",
           (unsigned long long)T0_NS, (unsigned long long)(T0_NS + 30 * S_NS));
  expect_in(body, unit);
  expect_in(body, "\"rss_slope\":[],\"ipc\":{\"mean\":1.25,\"windows\":12}}");
  free(body);

  /* A device glob and a label value nobody has: empty, not an error. */
  const char *none[] = {"select", "variant=light", "from", from, "to", to};
  body = cohort(f, none, 3, &status);
  assert_int_equal(status, 200);
  expect_in(body, "\"devices\":[],\"windows\":0,");
  expect_in(body, "\"stages\":[],\"rss_slope\":[],\"ipc\":null}");
  free(body);
  const char *glob[] = {"select", "version=1.5", "device", "dev-b*", "from", from, "to", to};
  body = cohort(f, glob, 4, &status);
  assert_int_equal(status, 200);
  expect_in(body, "\"devices\":[\"dev-b\"],\"windows\":24,");
  free(body);
}

/* Bad parameters are 400s naming the parameter. */
static void cohort_refuses_bad_parameters(void **state) {
  fixture_t *f = *state;
  static const struct {
    const char *key;
    const char *value;
    const char *says;
  } rows[] = {
      {"select", "version", "select: 'version' is not key=value"},
      {"select", "version=", "select: the value of 'version' must be"},
      {"select", "9x=1", "select: '9x' is neither model"},
      {"select", "__x=1", "select: '__x' is neither model"},
      {"select", "version=1,version=2", "select: 'version' given more than once"},
      {"select", "a=1,b=2,c=3,d=4,e=5,f=6,g=7,h=8,i=9,j=10,k=11", "select: more than 10 terms"},
      {"select", "version=%01", "select: the value of 'version' is not printable ASCII"},
      {"unit", "9", "unit: '9' is not a number of seconds from 10 to 3600"},
      {"unit", "3601", "unit: '3601'"},
      {"from", "x", "from: 'x' is not a time"},
      {"colour", "red", "unknown parameter 'colour'"},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    bool is_select = strcmp(rows[i].key, "select") == 0;
    const char *kv[] = {rows[i].key, rows[i].value, "select", "version=1.5"};
    unsigned status;
    char *body = cohort(f, kv, is_select ? 1 : 2, &status);
    assert_int_equal(status, 400);
    expect_in(body, rows[i].says);
    free(body);
  }
  /* No select; from after to; more than 7 days; a select too long to be one. */
  const char *none[] = {"unit", "60"};
  unsigned status;
  char *body = cohort(f, none, 1, &status);
  assert_int_equal(status, 400);
  expect_in(body, "select: required");
  free(body);
  const char *order[] = {"select", "version=1", "from", "2000", "to", "1000"};
  body = cohort(f, order, 3, &status);
  expect_in(body, "from: must be before to");
  free(body);
  const char *week[] = {"select", "version=1", "from", "1", "to", "604800000000002"};
  body = cohort(f, week, 3, &status);
  expect_in(body, "to: more than 7 days after from");
  free(body);
  char huge[4000];
  memset(huge, 'a', sizeof(huge) - 1);
  huge[sizeof(huge) - 1] = '\0';
  const char *big[] = {"select", huge};
  body = cohort(f, big, 1, &status);
  assert_int_equal(status, 400);
  expect_in(body, "select: missing, malformed or too long a value");
  free(body);
}

/* More than EM_COHORT_MAX_UNITS units is a 413 that names the cap; a larger unit answers. */
static void cohort_caps_the_units(void **state) {
  fixture_t *f = *state;
  birth(f, "dev-a", model_v("2"));
  for (uint32_t k = 0; k <= EM_COHORT_MAX_UNITS; k++) {
    window(f, "dev-a", k, T0_NS + k * 10 * S_NS, 1, 1000, EM_LEVEL_NOMINAL, -1, -1, model_v("2"));
  }
  assert_int_equal(em_store_flush(f->store), 0);
  char from[24];
  char to[24];
  snprintf(from, sizeof(from), "%llu", (unsigned long long)T0_NS);
  snprintf(to, sizeof(to), "%llu", (unsigned long long)(T0_NS + 3 * 86400 * S_NS));
  const char *kv[] = {"select", "version=2", "from", from, "to", to, "unit", "10"};
  unsigned status;
  char *body = cohort(f, kv, 4, &status);
  assert_int_equal(status, 413);
  expect_in(body, "more than 20000 units");
  expect_in(body, "larger unit");
  free(body);
  kv[7] = "20";
  body = cohort(f, kv, 4, &status);
  assert_int_equal(status, 200);
  expect_in(body, "\"windows\":20001,");
  free(body);
}

/* em_cohort_select_match: every term must hold; a model without the label does not match. */
static void select_matches_every_term(void **state) {
  (void)state;
  em_cohort_select_t sel;
  char err[200];
  assert_int_equal(em_cohort_select_parse("model=mobilenet,variant=full", &sel, err, 200), 0);
  em_model_t m = model_v("1.4");
  assert_true(em_cohort_select_match(&sel, &m));
  m.n_labels = 1; /* input only */
  assert_false(em_cohort_select_match(&sel, &m));
  em_model_t none = {0};
  assert_false(em_cohort_select_match(&sel, &none));
  assert_int_equal(em_cohort_select_parse("version=1.5", &sel, err, 200), 0);
  m = model_v("1.4");
  assert_false(em_cohort_select_match(&sel, &m));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(cohort_splits_a_device_that_changed_version, setup, teardown),
      cmocka_unit_test_setup_teardown(cohort_refuses_bad_parameters, setup, teardown),
      cmocka_unit_test_setup_teardown(cohort_caps_the_units, setup, teardown),
      cmocka_unit_test(select_matches_every_term),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
