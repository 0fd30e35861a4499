/*
 * test_agg_metrics.c - the aggregator's renderers (host/aggregator/api/metrics.c): the Prometheus
 * text exposition and the JSON of /api/devices.
 *
 * The registry is assembled by hand (a dict with births, value arrays, histograms filled from
 * stage windows) so the renderers are checked against figures the test chose, without the
 * ingest path. The checks parse the output line by line: one HELP and one TYPE per family,
 * families not interleaved, the histogram's cumulative le ladder ending at +Inf == _count,
 * label escaping, absent values left out.
 *
 * The protobuf exposition is decoded with the tests' own wire-format reader (pb_reader.c) and
 * held against the text of the same registry: the same families in the same order with the
 * same HELP, every counter and gauge sample with the same labels and the same double, the
 * classic histogram with the same buckets, and the native histogram's schema, zero bucket,
 * spans and deltas against the buckets the test put in; and the device cap in both formats.
 *
 * The remote write backend is held against the text of the same registry: one series per
 * counter and gauge sample of the text plus one native histogram per stage, no classic bucket,
 * none refused; each became one request (batch_series 1) queued on a real remote write whose
 * endpoint is a loopback port nobody listens on. The endpoint's health families appear in the
 * text with its URL.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "metrics.h"
#include "pb_reader.h"

#define ODD_ID "a\"b\\c"

static const em_metric_def_t defs[] = {
    {.alias = 0, .name = "mem.rss", .unit = "By", .kind = EM_METRIC_GAUGE},
    {.alias = 1, .name = "pmu.ipc", .unit = "1", .kind = EM_METRIC_GAUGE},
    {.alias = 2, .name = "psi.cpu.some.avg10", .unit = "%", .kind = EM_METRIC_GAUGE},
    {.alias = 4, .name = "pmu.cycles", .unit = "1", .kind = EM_METRIC_COUNTER},
};

/* Zero bucket 1 value; scale 0 (base 2): index 13 is (8192, 16384] ns, index 19 is
 * (524288, 1048576] ns. On the ladder: 1e-05 holds the zero, 2e-05 the three of index 13,
 * 0.002 the two of index 19. */
static const em_bucket_t infer_buckets[] = {{13, 3}, {19, 2}};

typedef struct {
  em_registry_t reg;
  em_dict_t *dict;
  em_agg_device_t *devs[2];
  em_agg_device_t agg[2];
  em_value_t values[5];
  em_agg_stage_t stage;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  assert_int_equal(em_dict_new(&f->dict), 0);
  assert_non_null(em_dict_device(f->dict, "sim-0001", true));
  assert_non_null(em_dict_device(f->dict, ODD_ID, true));
  em_device_t *sim = em_dict_device(f->dict, "sim-0001", false);
  em_device_t *odd = em_dict_device(f->dict, ODD_ID, false);

  em_birth_t b = {.head = {.time_ns = 1700000000000000000ull, .session = 7},
                  .device = "sim-0001",
                  .agent_version = "1.2.3",
                  .board = "rpi\"4",
                  .period_ns = 100000000,
                  .metrics = defs,
                  .n_metrics = sizeof(defs) / sizeof(defs[0])};
  assert_int_equal(em_dict_set_birth(sim, &b), 0);
  sim->have_status = true;
  sim->online = true;
  sim->level = EM_LEVEL_WARN;
  sim->last_seen_ns = 1700000000123000000ull;
  odd->level = EM_LEVEL_NONE;

  f->values[0] = (em_value_t){.type = EM_VALUE_UINT, .as.u = 1048576};
  f->values[1] = (em_value_t){.type = EM_VALUE_ABSENT};
  f->values[2] = (em_value_t){.type = EM_VALUE_FLOAT, .as.f = 12.5};
  f->values[3] = (em_value_t){.type = EM_VALUE_UINT, .as.u = 99}; /* No name in the birth. */
  f->values[4] = (em_value_t){.type = EM_VALUE_FLOAT, .as.f = 0.1};

  snprintf(f->stage.name, sizeof(f->stage.name), "infer");
  assert_int_equal(em_histo_new(&f->stage.total), 0);
  em_stage_t w = {.name = "infer",
                  .count = 6,
                  .sum_ns = 1230000,
                  .min_ns = 0,
                  .max_ns = 600000,
                  .p50_ns = 10000,
                  .p90_ns = 600000,
                  .p99_ns = 600000,
                  .p999_ns = 600000,
                  .scale = 0,
                  .zero_count = 1,
                  .buckets = infer_buckets,
                  .n_buckets = 2};
  assert_int_equal(em_histo_add_stage(f->stage.total, &w), 0);
  f->stage.last = w;
  f->stage.last.buckets = NULL;
  f->stage.last.n_buckets = 0;
  f->stage.windows = 1;

  /* Sorted by id: ODD_ID ('a') before "sim-0001". */
  f->agg[0] = (em_agg_device_t){.dev = odd, .data_msgs = 0};
  f->agg[1] = (em_agg_device_t){.dev = sim,
                                .values = f->values,
                                .n_values = 5,
                                .data_time_ns = 1700000000100000000ull,
                                .window_ns = 100000000,
                                .stages = &f->stage,
                                .n_stages = 1,
                                .data_msgs = 42,
                                .lost = 3,
                                .duplicates = 1,
                                .have_seq = true,
                                .seq_session = 7,
                                .last_seq = 44};
  f->devs[0] = &f->agg[0];
  f->devs[1] = &f->agg[1];
  f->reg.devices = f->devs;
  f->reg.n_devices = 2;
  f->reg.cap = 2;
  f->reg.loss_tracked = true;
  f->reg.started_ns = 1700000000000000000ull;
  f->reg.stats.received = 50;
  f->reg.stats.ingested = 48;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  em_histo_free(f->stage.total);
  em_dict_free(f->dict);
  free(f);
  return 0;
}

static char *render(fixture_t *f) {
  em_text_t t = {0};
  assert_int_equal(em_metrics_render(&f->reg, &t), 0);
  assert_non_null(t.data);
  assert_int_equal(strlen(t.data), t.len);
  return t.data;
}

static size_t count_occurrences(const char *hay, const char *needle) {
  size_t n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) {
    n++;
  }
  return n;
}

/* The family a sample line belongs to: its metric name less a histogram suffix when the
 * family with that base name is a histogram (known from the TYPE lines seen so far). */
static void family_of(const char *line, char *out, size_t cap, char types[][128], size_t n_types) {
  size_t n = strcspn(line, "{ ");
  snprintf(out, cap, "%.*s", (int)n, line);
  static const char *suffixes[] = {"_bucket", "_sum", "_count"};
  for (size_t s = 0; s < 3; s++) {
    size_t sl = strlen(suffixes[s]);
    if (n > sl && strcmp(out + n - sl, suffixes[s]) == 0) {
      for (size_t k = 0; k < n_types; k++) {
        if (strlen(types[k]) == n - sl && strncmp(types[k], out, n - sl) == 0) {
          out[n - sl] = '\0';
          return;
        }
      }
    }
  }
}

static void exposition_has_one_help_and_type_per_family_not_interleaved(void **state) {
  fixture_t *f = *state;
  char *text = render(f);
  char types[64][128];
  size_t n_types = 0;
  char done[64][128];
  size_t n_done = 0;
  char current[128] = "";
  char *save = NULL;
  char *copy = strdup(text);
  assert_non_null(copy);
  for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    char name[128];
    if (strncmp(line, "# HELP ", 7) == 0) {
      continue;
    }
    if (strncmp(line, "# TYPE ", 7) == 0) {
      assert_true(n_types < 64);
      size_t n = strcspn(line + 7, " ");
      snprintf(types[n_types], sizeof(types[0]), "%.*s", (int)n, line + 7);
      char needle[160];
      snprintf(needle, sizeof(needle), "# TYPE %s ", types[n_types]);
      assert_int_equal(count_occurrences(text, needle), 1);
      snprintf(needle, sizeof(needle), "# HELP %s ", types[n_types]);
      assert_int_equal(count_occurrences(text, needle), 1);
      n_types++;
      continue;
    }
    family_of(line, name, sizeof(name), types, n_types);
    /* Its TYPE came first, and the family is the current one or starts here. */
    assert_true(n_types > 0);
    assert_string_equal(types[n_types - 1], name);
    if (strcmp(current, name) != 0) {
      for (size_t k = 0; k < n_done; k++) {
        assert_string_not_equal(done[k], name);
      }
      assert_true(n_done < 64);
      snprintf(done[n_done++], sizeof(done[0]), "%s", name);
      snprintf(current, sizeof(current), "%s", name);
    }
  }
  /* Counters end in _total; nothing else does. */
  for (size_t k = 0; k < n_types; k++) {
    char needle[160];
    snprintf(needle, sizeof(needle), "# TYPE %.127s counter\n", types[k]);
    bool is_counter = strstr(text, needle) != NULL;
    size_t n = strlen(types[k]);
    bool ends_total = n > 6 && strcmp(types[k] + n - 6, "_total") == 0;
    assert_int_equal(is_counter, ends_total);
  }
  assert_true(n_types >= 10);
  free(copy);
  free(text);
}

static const struct {
  const char *le;
  uint64_t cumulative;
} expected_ladder[] = {
    {"1e-05", 1}, {"2e-05", 4}, {"5e-05", 4}, {"0.0001", 4}, {"0.0002", 4}, {"0.0005", 4},
    {"0.001", 4}, {"0.002", 6}, {"0.005", 6}, {"0.01", 6},   {"0.02", 6},   {"0.05", 6},
    {"0.1", 6},   {"0.2", 6},   {"0.5", 6},   {"1", 6},      {"2", 6},      {"5", 6},
    {"10", 6},    {"20", 6},    {"50", 6},    {"100", 6},    {"+Inf", 6},
};

static void histogram_buckets_are_cumulative_on_the_ladder_with_inf_equal_to_count(void **state) {
  fixture_t *f = *state;
  char *text = render(f);
  const char *prefix =
      "edgemon_stage_latency_seconds_bucket{device=\"sim-0001\",stage=\"infer\",le=\"";
  size_t rows = sizeof(expected_ladder) / sizeof(expected_ladder[0]);
  assert_int_equal(count_occurrences(text, prefix), rows);
  const char *p = text;
  uint64_t prev = 0;
  for (size_t i = 0; i < rows; i++) {
    p = strstr(p, prefix);
    assert_non_null(p);
    p += strlen(prefix);
    char le[16];
    unsigned long long v = 0;
    assert_int_equal(sscanf(p, "%15[^\"]\"} %llu", le, &v), 2);
    assert_string_equal(le, expected_ladder[i].le);
    assert_int_equal(v, expected_ladder[i].cumulative);
    assert_true(v >= prev);
    prev = v;
  }
  assert_non_null(
      strstr(text, "edgemon_stage_latency_seconds_count{device=\"sim-0001\",stage=\"infer\"} 6\n"));
  assert_non_null(strstr(
      text, "edgemon_stage_latency_seconds_sum{device=\"sim-0001\",stage=\"infer\"} 0.00123\n"));
  assert_non_null(
      strstr(text, "edgemon_stage_p99_seconds{device=\"sim-0001\",stage=\"infer\"} 0.0006\n"));
  assert_non_null(
      strstr(text, "edgemon_stage_windows_total{device=\"sim-0001\",stage=\"infer\"} 1\n"));
  /* A device without stages has no histogram samples. */
  assert_null(strstr(text, "edgemon_stage_latency_seconds_count{device=\"a"));
  free(text);
}

static void label_values_are_escaped(void **state) {
  fixture_t *f = *state;
  char *text = render(f);
  assert_non_null(strstr(text, "edgemon_device_data_messages_total{device=\"a\\\"b\\\\c\"} 0\n"));
  assert_non_null(strstr(
      text,
      "edgemon_device_info{device=\"sim-0001\",agent_version=\"1.2.3\",board=\"rpi\\\"4\"} 1\n"));
  assert_null(strstr(text, "device=\"a\"b"));
  free(text);

  /* Newline and invalid UTF-8 in a label value. */
  em_device_t *odd = f->agg[0].dev;
  snprintf(odd->agent_version, sizeof(odd->agent_version), "x\ny\xff");
  snprintf(odd->board, sizeof(odd->board), "b");
  odd->have_birth = true;
  text = render(f);
  assert_non_null(strstr(text, "agent_version=\"x\\ny\xEF\xBF\xBD\",board=\"b\"} 1\n"));
  free(text);
}

static const struct {
  const char *line;
  bool present;
} value_rows[] = {
    {"edgemon_metric{device=\"sim-0001\",name=\"mem.rss\"} 1048576\n", true},
    {"edgemon_metric{device=\"sim-0001\",name=\"psi.cpu.some.avg10\"} 12.5\n", true},
    {"edgemon_rss_bytes{device=\"sim-0001\"} 1048576\n", true},
    {"edgemon_psi_cpu_some_avg10_ratio{device=\"sim-0001\"} 0.125\n", true},
    {"edgemon_device_online{device=\"sim-0001\"} 1\n", true},
    {"edgemon_device_level{device=\"sim-0001\"} 1\n", true},
    {"edgemon_device_last_seen_seconds{device=\"sim-0001\"} 1700000000.123\n", true},
    {"edgemon_device_lost_messages_total{device=\"sim-0001\"} 3\n", true},
    {"edgemon_aggregator_received_total 50\n", true},
    {"edgemon_aggregator_devices 2\n", true},
    {"name=\"pmu.ipc\"", false}, /* Absent: never 0. */
    {"edgemon_ipc{", false},     /* Same, in the convenience gauge. */
    {"edgemon_metric{device=\"sim-0001\",name=\"pmu.cycles\"} 0.1\n", true},
    {"} 99\n", false},                           /* Alias 3 has no name. */
    {"edgemon_device_online{device=\"a", false}, /* No status seen. */
    {"edgemon_device_level{device=\"a", false},  /* Level unknown. */
    {"edgemon_device_info{device=\"a", false},   /* No birth. */
    {"NaN", false},
};

static void absent_values_are_omitted_and_present_ones_written(void **state) {
  fixture_t *f = *state;
  char *text = render(f);
  for (size_t i = 0; i < sizeof(value_rows) / sizeof(value_rows[0]); i++) {
    bool found = strstr(text, value_rows[i].line) != NULL;
    if (found != value_rows[i].present) {
      fail_msg("row %zu: '%s' expected %s", i, value_rows[i].line,
               value_rows[i].present ? "present" : "absent");
    }
  }
  free(text);
}

static void loss_counters_are_left_out_when_not_tracked(void **state) {
  fixture_t *f = *state;
  f->reg.loss_tracked = false;
  char *text = render(f);
  assert_null(strstr(text, "edgemon_device_lost_messages_total"));
  assert_null(strstr(text, "edgemon_device_duplicate_messages_total"));
  assert_non_null(strstr(text, "edgemon_device_data_messages_total{device=\"sim-0001\"} 42\n"));
  free(text);
}

static void values_of_another_session_are_not_named(void **state) {
  fixture_t *f = *state;
  f->agg[1].seq_session = 8; /* Data from a session whose birth the dict does not hold. */
  char *text = render(f);
  assert_null(strstr(text, "edgemon_metric{"));
  assert_null(strstr(text, "edgemon_rss_bytes{"));
  free(text);
}

static void device_json_has_values_by_name_and_null_for_absent(void **state) {
  fixture_t *f = *state;
  em_text_t t = {0};
  assert_int_equal(em_metrics_device_json(&f->agg[1], true, &t), 0);
  assert_non_null(strstr(t.data, "\"device\":\"sim-0001\""));
  assert_non_null(strstr(t.data, "\"values\":{\"mem.rss\":1048576,\"pmu.ipc\":null,"
                                 "\"psi.cpu.some.avg10\":12.5,\"pmu.cycles\":0.1}"));
  assert_non_null(strstr(t.data, "\"online\":true"));
  assert_non_null(strstr(t.data, "\"level\":\"WARN\""));
  assert_non_null(strstr(t.data, "\"board\":\"rpi\\\"4\""));
  assert_non_null(strstr(t.data, "\"name\":\"infer\""));
  assert_non_null(strstr(t.data, "\"p99_ns\":600000"));
  assert_null(strstr(t.data, "+Inf"));
  assert_non_null(strstr(t.data, "{\"le\":0.002,\"count\":6}"));
  assert_non_null(strstr(t.data, "{\"le\":null,\"count\":6}]"));
  assert_non_null(strstr(t.data, "\"lost_messages\":3"));
  em_text_free(&t);
  assert_null(t.data);
}

static void devices_json_lists_every_device_escaped_without_buckets(void **state) {
  fixture_t *f = *state;
  em_text_t t = {0};
  f->agg[0].dev->reason[0] = '\0';
  snprintf(f->agg[0].dev->reason, sizeof(f->agg[0].dev->reason), "tab\there");
  f->agg[0].dev->have_state = true;
  assert_int_equal(em_metrics_devices_json(&f->reg, &t), 0);
  assert_true(
      strncmp(t.data, "{\"loss_tracked\":true,\"devices\":[{\"device\":\"a\\\"b\\\\c\"", 48) == 0);
  assert_non_null(strstr(t.data, "\"reason\":\"tab\\u0009here\""));
  assert_non_null(strstr(t.data, "},{\"device\":\"sim-0001\""));
  assert_null(strstr(t.data, "\"buckets\""));
  assert_non_null(strstr(t.data, "\"board\":null"));
  assert_int_equal(t.data[t.len - 1], '}');
  em_text_free(&t);
}

static void empty_registry_renders_only_the_aggregator_families(void **state) {
  (void)state;
  em_registry_t r;
  memset(&r, 0, sizeof(r));
  em_text_t t = {0};
  assert_int_equal(em_metrics_render(&r, &t), 0);
  assert_null(strstr(t.data, "edgemon_device_"));
  assert_null(strstr(t.data, "edgemon_stage_"));
  assert_non_null(strstr(t.data, "edgemon_aggregator_devices 0\n"));
  assert_null(strstr(t.data, "edgemon_aggregator_start_time_seconds"));
  em_text_free(&t);
  assert_int_equal(em_metrics_devices_json(&r, &t), 0);
  assert_string_equal(
      t.data, "{\"loss_tracked\":false,\"devices\":[],\"fleet\":[],\"fleet_truncated\":false}");
  em_text_free(&t);
}

static void render_appends_and_a_failed_text_stays_failed(void **state) {
  fixture_t *f = *state;
  em_text_t t = {0};
  assert_int_equal(em_metrics_render(&f->reg, &t), 0);
  size_t once = t.len;
  assert_int_equal(em_metrics_render(&f->reg, &t), 0);
  assert_int_equal(t.len, 2 * once);
  t.error = -E2BIG;
  assert_int_equal(em_metrics_render(&f->reg, &t), -E2BIG);
  assert_int_equal(t.len, 2 * once);
  em_text_free(&t);
  assert_int_equal(em_metrics_render(NULL, &t), -EINVAL);
  em_text_free(&t);
  assert_int_equal(em_metrics_render(&f->reg, NULL), -EINVAL);
  em_text_free(NULL);
}

/* A fleet whose exposition passes the cap: /metrics still renders, under the cap, with the
 * first devices in id order and every aggregator family, and says how many it left out. */
/* A registry of 60 devices "dev-000".. with a birth and one data message each. */
static em_registry_t *fleet_registry(void) {
  em_registry_t *r = NULL;
  assert_int_equal(em_registry_new(&r, true), 0);
  static const em_bucket_t b[] = {{100, 3}, {140, 2}};
  uint8_t wire[2048];
  for (int i = 0; i < 60; i++) {
    char id[16];
    char topic[64];
    snprintf(id, sizeof(id), "dev-%03d", i);
    em_msg_t m = {.kind = EM_MSG_BIRTH};
    m.u.birth = (em_birth_t){.head = {.time_ns = 1, .session = 1},
                             .device = id,
                             .agent_version = "1",
                             .board = "b",
                             .period_ns = 1,
                             .metrics = defs,
                             .n_metrics = 4};
    size_t len = 0;
    em_ingest_t in;
    assert_int_equal(em_proto_encode(&m, wire, sizeof(wire), &len), 0);
    snprintf(topic, sizeof(topic), "edgemon/v1/%s/birth", id);
    assert_int_equal(em_registry_ingest(r, topic, wire, len, &in), 0);
    em_sample_t smp[] = {{.alias = 0, .value = {.type = EM_VALUE_UINT, .as.u = 7}}};
    em_stage_t st = {.name = "infer",
                     .count = 5,
                     .sum_ns = 9,
                     .min_ns = 1,
                     .max_ns = 3,
                     .p50_ns = 2,
                     .p90_ns = 3,
                     .p99_ns = 3,
                     .p999_ns = 3,
                     .scale = 4,
                     .buckets = b,
                     .n_buckets = 2};
    m = (em_msg_t){.kind = EM_MSG_DATA};
    m.u.data = (em_data_t){.head = {.time_ns = 2, .session = 1},
                           .seq = 1,
                           .window_ns = 1,
                           .level = EM_LEVEL_NONE,
                           .samples = smp,
                           .n_samples = 1,
                           .stages = &st,
                           .n_stages = 1};
    assert_int_equal(em_proto_encode(&m, wire, sizeof(wire), &len), 0);
    snprintf(topic, sizeof(topic), "edgemon/v1/%s/data", id);
    assert_int_equal(em_registry_ingest(r, topic, wire, len, &in), 0);
  }
  return r;
}

static void render_over_the_cap_keeps_the_first_devices_and_says_so(void **state) {
  (void)state;
  em_registry_t *r = fleet_registry();
  em_text_t t = {0};
  assert_int_equal(em_metrics_render(r, &t), 0);
  size_t full = t.len;
  assert_false(r->stats.metrics_truncated);
  assert_non_null(strstr(t.data, "edgemon_aggregator_metrics_truncated 0\n"));
  em_text_free(&t);

  r->metrics_max_bytes = full * 3 / 4;
  assert_int_equal(em_metrics_render(r, &t), 0);
  assert_true(t.len <= r->metrics_max_bytes);
  assert_true(r->stats.metrics_truncated);
  assert_true(r->stats.metrics_omitted > 0 && r->stats.metrics_omitted < 60);
  assert_int_equal(r->stats.metrics_truncations, 1);
  char line[96];
  snprintf(line, sizeof(line), "edgemon_aggregator_metrics_devices_omitted %llu\n",
           (unsigned long long)r->stats.metrics_omitted);
  assert_non_null(strstr(t.data, line));
  assert_non_null(strstr(t.data, "edgemon_aggregator_metrics_truncated 1\n"));
  assert_non_null(strstr(t.data, "edgemon_aggregator_devices 60\n"));
  assert_non_null(strstr(t.data, "edgemon_aggregator_received_total 120\n"));
  assert_non_null(strstr(t.data, "edgemon_stage_latency_seconds_count{device=\"dev-000\""));
  assert_null(strstr(t.data, "device=\"dev-059\""));
  /* Exactly the devices not omitted appear, the first ones in id order. */
  size_t shown = 60 - (size_t)r->stats.metrics_omitted;
  snprintf(line, sizeof(line), "edgemon_device_data_messages_total{device=\"dev-%03zu\"}",
           shown - 1);
  assert_non_null(strstr(t.data, line));
  snprintf(line, sizeof(line), "{device=\"dev-%03zu\"", shown);
  assert_null(strstr(t.data, line));
  em_text_free(&t);

  r->metrics_max_bytes = 0; /* The default cap: whole again. */
  assert_int_equal(em_metrics_render(r, &t), 0);
  assert_false(r->stats.metrics_truncated);
  assert_non_null(strstr(t.data, "device=\"dev-059\""));
  em_text_free(&t);
  em_registry_free(r);
}

/* The text of the fixture is byte for byte the golden file the text-only renderer wrote
 * (tests/fixtures/aggregator/README.md). */
static void text_exposition_is_the_golden_one(void **state) {
  fixture_t *f = *state;
  char *text = render(f);
  FILE *fp = fopen(EM_FIXTURES_DIR "/aggregator/metrics.txt", "rb");
  assert_non_null(fp);
  static char golden[64 * 1024];
  size_t n = fread(golden, 1, sizeof(golden) - 1, fp);
  assert_true(feof(fp));
  fclose(fp);
  golden[n] = '\0';
  assert_string_equal(text, golden);
  free(text);
}

/* ---- the protobuf exposition, held against the text of the same registry ---------------- */

typedef struct {
  char name[96];
  char help[256];
  char type[16];
} fam_t;

typedef struct {
  char key[384]; /* name{k=v,...} with unescaped values */
  double value;
} smp_t;

typedef struct {
  fam_t fams[64];
  size_t n_fams;
  smp_t smps[256];
  size_t n_smps;
} expo_t;

static const char *pb_type_name(uint64_t t) {
  return t == 0 ? "counter" : t == 1 ? "gauge" : t == 4 ? "histogram" : "?";
}

static bool scalar_family(const expo_t *x, const char *name) {
  for (size_t i = 0; i < x->n_fams; i++) {
    if (strcmp(x->fams[i].name, name) == 0) {
      return strcmp(x->fams[i].type, "histogram") != 0;
    }
  }
  return false;
}

/* Families and counter/gauge samples of a text exposition. */
static void parse_text(const char *text, expo_t *x) {
  memset(x, 0, sizeof(*x));
  const char *p = text;
  while (*p) {
    const char *nl = strchr(p, '\n');
    assert_non_null(nl);
    char line[1024];
    assert_true((size_t)(nl - p) < sizeof(line));
    memcpy(line, p, (size_t)(nl - p));
    line[nl - p] = '\0';
    p = nl + 1;
    if (strncmp(line, "# HELP ", 7) == 0) {
      assert_true(x->n_fams < 64);
      fam_t *f = &x->fams[x->n_fams++];
      size_t n = strcspn(line + 7, " ");
      snprintf(f->name, sizeof(f->name), "%.*s", (int)n, line + 7);
      snprintf(f->help, sizeof(f->help), "%s", line + 7 + n + 1);
      continue;
    }
    if (strncmp(line, "# TYPE ", 7) == 0) {
      fam_t *f = &x->fams[x->n_fams - 1];
      assert_int_equal(strncmp(line + 7, f->name, strlen(f->name)), 0);
      snprintf(f->type, sizeof(f->type), "%s", line + 7 + strlen(f->name) + 1);
      continue;
    }
    size_t n = strcspn(line, "{ ");
    char name[96];
    snprintf(name, sizeof(name), "%.*s", (int)n, line);
    if (!scalar_family(x, name)) {
      continue;
    }
    assert_true(x->n_smps < 256);
    smp_t *s = &x->smps[x->n_smps++];
    size_t k = (size_t)snprintf(s->key, sizeof(s->key), "%s{", name);
    const char *q = line + n;
    if (*q == '{') {
      q++;
      while (*q != '}') {
        while (*q != '=') {
          s->key[k++] = *q++;
        }
        s->key[k++] = *q++;
        assert_int_equal(*q++, '"');
        while (*q != '"') {
          char c = *q++;
          if (c == '\\') {
            c = *q++;
            c = c == 'n' ? '\n' : c;
          }
          s->key[k++] = c;
        }
        q++;
        if (*q == ',') {
          s->key[k++] = *q++;
        }
        assert_true(k < sizeof(s->key) - 8);
      }
      q++;
    }
    s->key[k++] = '}';
    s->key[k] = '\0';
    assert_int_equal(*q, ' ');
    s->value = strtod(q + 1, NULL);
  }
}

/* Families and counter/gauge samples of a protobuf exposition. */
static void parse_pb(const char *data, size_t len, expo_t *x) {
  memset(x, 0, sizeof(*x));
  rd_t stream = {(const uint8_t *)data, (const uint8_t *)data + len};
  while (stream.p < stream.end) {
    rd_t mf = next_family(&stream);
    assert_true(x->n_fams < 64);
    fam_t *f = &x->fams[x->n_fams++];
    fld_t fl;
    while (rd_next(&mf, &fl)) {
      if (fl.field == 1) {
        snprintf(f->name, sizeof(f->name), "%.*s", (int)(fl.sub.end - fl.sub.p), fl.sub.p);
      } else if (fl.field == 2) {
        snprintf(f->help, sizeof(f->help), "%.*s", (int)(fl.sub.end - fl.sub.p), fl.sub.p);
      } else if (fl.field == 3) {
        snprintf(f->type, sizeof(f->type), "%s", pb_type_name(fl.u));
      } else if (fl.field == 4 && strcmp(f->type, "histogram") != 0) {
        assert_true(x->n_smps < 256);
        smp_t *s = &x->smps[x->n_smps++];
        char fname[96];
        memcpy(fname, f->name, sizeof(fname));
        size_t k = (size_t)snprintf(s->key, sizeof(s->key), "%s{", fname);
        bool first = true;
        fld_t m;
        while (rd_next(&fl.sub, &m)) {
          if (m.field == 1) {
            fld_t ln, lv;
            assert_true(rd_next(&m.sub, &ln) && ln.field == 1);
            assert_true(rd_next(&m.sub, &lv) && lv.field == 2);
            k += (size_t)snprintf(s->key + k, sizeof(s->key) - k, "%s%.*s=%.*s", first ? "" : ",",
                                  (int)(ln.sub.end - ln.sub.p), ln.sub.p,
                                  (int)(lv.sub.end - lv.sub.p), lv.sub.p);
            first = false;
          } else {
            assert_true(m.field == 2 || m.field == 3); /* Gauge or Counter */
            fld_t v;
            assert_true(rd_next(&m.sub, &v) && v.field == 1);
            s->value = as_double(&v);
          }
        }
        snprintf(s->key + k, sizeof(s->key) - k, "}");
      }
    }
  }
}

/* The protobuf exposition of r (a malloc'd body) and its length. */
static char *render_pb(em_registry_t *r, size_t *len) {
  em_metrics_out_t out;
  assert_int_equal(em_metrics_out_init(&out, EM_METRICS_PROTOBUF, 0), 0);
  assert_int_equal(em_metrics_render_out(r, &out), 0);
  char *body = NULL;
  assert_int_equal(em_metrics_out_take(&out, &body, len), 0);
  em_metrics_out_deinit(&out);
  assert_non_null(body);
  return body;
}

/* Both expositions of the fixture, and what they parse to. */
typedef struct {
  char *text;
  char *pb;
  expo_t *t;
  expo_t *p;
} both_t;

static both_t render_both(fixture_t *f) {
  both_t b;
  size_t len = 0;
  b.text = render(f);
  b.pb = render_pb(&f->reg, &len);
  b.t = calloc(1, sizeof(*b.t));
  b.p = calloc(1, sizeof(*b.p));
  assert_non_null(b.t);
  assert_non_null(b.p);
  parse_text(b.text, b.t);
  parse_pb(b.pb, len, b.p);
  return b;
}

static void free_both(both_t *b) {
  free(b->t);
  free(b->p);
  free(b->pb);
  free(b->text);
}

static void protobuf_has_the_text_families_in_order_with_the_same_help(void **state) {
  fixture_t *f = *state;
  both_t b = render_both(f);
  expo_t *t = b.t;
  expo_t *p = b.p;
  /* The text's families, and the native histogram right after the classic one. */
  assert_int_equal(p->n_fams, t->n_fams + 1);
  size_t j = 0;
  for (size_t i = 0; i < t->n_fams; i++, j++) {
    assert_string_equal(p->fams[j].name, t->fams[i].name);
    assert_string_equal(p->fams[j].help, t->fams[i].help);
    assert_string_equal(p->fams[j].type, t->fams[i].type);
    if (strcmp(t->fams[i].name, "edgemon_stage_latency_seconds") == 0) {
      j++;
      assert_string_equal(p->fams[j].name, "edgemon_stage_latency_nanoseconds");
      assert_string_equal(p->fams[j].type, "histogram");
    }
  }
  assert_null(strstr(b.text, "edgemon_stage_latency_nanoseconds"));
  free_both(&b);
}

static void counters_and_gauges_read_back_equal_in_both_formats(void **state) {
  fixture_t *f = *state;
  /* Invalid UTF-8 in a label value: U+FFFD in both, the series kept in both. */
  snprintf(f->agg[1].dev->board, sizeof(f->agg[1].dev->board), "x\xffy");
  /* A float and a time in ns that binary64 cannot hold exactly. */
  f->values[2] = (em_value_t){.type = EM_VALUE_FLOAT, .as.f = 0.1 + 0.2};
  f->agg[1].dev->last_seen_ns = 1750120901708320421ull; /* ns / 1e9 rounds differently */
  both_t b = render_both(f);
  expo_t *t = b.t;
  expo_t *p = b.p;
  assert_true(t->n_smps > 30);
  assert_int_equal(p->n_smps, t->n_smps);
  for (size_t i = 0; i < t->n_smps; i++) {
    assert_string_equal(p->smps[i].key, t->smps[i].key);
    if (p->smps[i].value != t->smps[i].value) {
      fail_msg("%s: %.17g in protobuf, %.17g in text", t->smps[i].key, p->smps[i].value,
               t->smps[i].value);
    }
  }
  assert_non_null(strstr(b.text, "board=\"x\xEF\xBF\xBDy\"} 1\n"));
  free_both(&b);
}

/* The store's forensic figures: one sample per kind of each family (evicted_total one per kind
 * and reason), the same in both formats; none at all without a store (no total bound). */
static void forensic_families_show_each_kinds_figures_in_both_formats(void **state) {
  fixture_t *f = *state;
  char *text = render(f);
  assert_null(strstr(text, "edgemon_aggregator_forensic_"));
  free(text);
  f->reg.stats.forensic[0] = (em_agg_forensic_t){5, 1, 2, 1234, 4096};
  f->reg.stats.forensic[1] = (em_agg_forensic_t){3, 0, 7, 99, 8192};
  both_t b = render_both(f);
  static const char *const lines[] = {
      "edgemon_aggregator_forensic_stored_total{kind=\"flight\"} 5\n",
      "edgemon_aggregator_forensic_stored_total{kind=\"profile\"} 3\n",
      "edgemon_aggregator_forensic_evicted_total{kind=\"flight\",reason=\"device_cap\"} 1\n",
      "edgemon_aggregator_forensic_evicted_total{kind=\"flight\",reason=\"global_cap\"} 2\n",
      "edgemon_aggregator_forensic_evicted_total{kind=\"profile\",reason=\"device_cap\"} 0\n",
      "edgemon_aggregator_forensic_evicted_total{kind=\"profile\",reason=\"global_cap\"} 7\n",
      "edgemon_aggregator_forensic_bytes{kind=\"flight\"} 1234\n",
      "edgemon_aggregator_forensic_bytes{kind=\"profile\"} 99\n",
      "edgemon_aggregator_forensic_max_bytes{kind=\"flight\"} 4096\n",
      "edgemon_aggregator_forensic_max_bytes{kind=\"profile\"} 8192\n",
  };
  for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
    if (!strstr(b.text, lines[i])) {
      fail_msg("missing: %s", lines[i]);
    }
  }
  assert_int_equal(count_occurrences(b.text, "\nedgemon_aggregator_forensic_"),
                   sizeof(lines) / sizeof(lines[0]));
  assert_int_equal(b.p->n_smps, b.t->n_smps);
  for (size_t i = 0; i < b.t->n_smps; i++) {
    assert_string_equal(b.p->smps[i].key, b.t->smps[i].key);
    assert_true(b.p->smps[i].value == b.t->smps[i].value);
  }
  free_both(&b);
}

/* The histogram of the fixture's infer stage in protobuf: the native one (schema 0, the zero
 * bucket, Prometheus buckets 14 and 20 = OpenTelemetry 13 and 19 + 1) and the classic one
 * (the text's le ladder, no native fields, so Prometheus stores it as classic). */
static void protobuf_histograms_hold_the_merged_buckets(void **state) {
  fixture_t *f = *state;
  size_t len = 0;
  char *pb = render_pb(&f->reg, &len);
  rd_t stream = {(const uint8_t *)pb, (const uint8_t *)pb + len};
  int seen = 0;
  while (stream.p < stream.end) {
    rd_t mf = next_family(&stream);
    fld_t fl;
    assert_true(rd_next(&mf, &fl) && fl.field == 1);
    bool native = str_is(&fl, "edgemon_stage_latency_nanoseconds");
    bool classic = str_is(&fl, "edgemon_stage_latency_seconds");
    if (!native && !classic) {
      continue;
    }
    int metrics = 0;
    while (rd_next(&mf, &fl)) {
      if (fl.field != 4) {
        continue;
      }
      metrics++;
      fld_t m;
      rd_t h = {NULL, NULL};
      while (rd_next(&fl.sub, &m)) {
        if (m.field == 7) {
          h = m.sub;
        }
      }
      assert_non_null(h.p);
      int64_t idx = 0, count = 0;
      int64_t got[32][2];
      size_t n_got = 0;
      uint64_t spans[8][2];
      size_t n_spans = 0, span = 0, in_span = 0;
      double uppers[32];
      uint64_t cums[32];
      size_t n_b = 0;
      bool schema = false;
      fld_t x;
      while (rd_next(&h, &x)) {
        switch (x.field) {
        case 1:
          assert_int_equal(x.u, 6);
          break;
        case 2:
          assert_true(as_double(&x) == (native ? 1230000.0 : 0.00123));
          break;
        case 3: {
          fld_t c, u;
          assert_true(rd_next(&x.sub, &c) && c.field == 1);
          assert_true(rd_next(&x.sub, &u) && u.field == 2);
          assert_true(n_b < 32);
          cums[n_b] = c.u;
          uppers[n_b++] = as_double(&u);
          break;
        }
        case 5:
          assert_int_equal(unzigzag(x.u), 0);
          schema = true;
          break;
        case 6:
          assert_true(as_double(&x) > 0 && as_double(&x) < 1);
          break;
        case 7:
          assert_int_equal(x.u, 1);
          break;
        case 12: {
          fld_t o, l;
          assert_true(rd_next(&x.sub, &o) && o.field == 1);
          assert_true(rd_next(&x.sub, &l) && l.field == 2);
          assert_true(n_spans < 8);
          spans[n_spans][0] = (uint64_t)unzigzag(o.u);
          spans[n_spans++][1] = l.u;
          break;
        }
        case 13:
          /* Spans come before deltas: a span's offset is the gap after the previous one (the
           * first one's the index of its first bucket). */
          while (in_span == 0) {
            assert_true(span < n_spans);
            idx += (int64_t)spans[span][0];
            in_span = spans[span][1];
            span++;
          }
          count += unzigzag(x.u);
          got[n_got][0] = idx;
          got[n_got++][1] = count;
          idx++;
          in_span--;
          break;
        default:
          break;
        }
      }
      if (native) {
        assert_true(schema);
        assert_int_equal(n_b, 0);
        /* Non-empty buckets (a span may bridge empty ones). */
        int64_t want[2][2] = {{14, 3}, {20, 2}};
        size_t w = 0;
        for (size_t k = 0; k < n_got; k++) {
          if (got[k][1] == 0) {
            continue;
          }
          assert_true(w < 2);
          assert_int_equal(got[k][0], want[w][0]);
          assert_int_equal(got[k][1], want[w][1]);
          w++;
        }
        assert_int_equal(w, 2);
      } else {
        assert_false(schema);
        assert_int_equal(n_b, 22); /* The ladder, +Inf being the count. */
        assert_true(uppers[0] == 1e-05 && cums[0] == 1);
        assert_true(uppers[1] == 2e-05 && cums[1] == 4);
        assert_true(uppers[7] == 0.002 && cums[7] == 6);
        assert_true(uppers[21] == 100 && cums[21] == 6);
      }
      seen++;
    }
    assert_int_equal(metrics, 1);
  }
  assert_int_equal(seen, 2);
  free(pb);
}

static void protobuf_over_the_cap_keeps_the_first_devices_and_says_so(void **state) {
  (void)state;
  em_registry_t *r = fleet_registry();
  size_t full = 0;
  free(render_pb(r, &full));
  assert_false(r->stats.metrics_truncated);

  r->metrics_max_bytes = full * 3 / 4;
  size_t len = 0;
  char *pb = render_pb(r, &len);
  assert_true(len <= r->metrics_max_bytes);
  assert_true(r->stats.metrics_truncated);
  assert_true(r->stats.metrics_omitted > 0 && r->stats.metrics_omitted < 60);
  expo_t *p = calloc(1, sizeof(*p));
  assert_non_null(p);
  parse_pb(pb, len, p);
  size_t shown = 60 - (size_t)r->stats.metrics_omitted;
  char key[96];
  snprintf(key, sizeof(key), "edgemon_device_data_messages_total{device=dev-%03zu}", shown - 1);
  bool last_in = false;
  size_t data = 0;
  double omitted = -1, devices = -1;
  for (size_t i = 0; i < p->n_smps; i++) {
    last_in = last_in || strcmp(p->smps[i].key, key) == 0;
    data += strncmp(p->smps[i].key, "edgemon_device_data_messages_total{", 35) == 0;
    if (strcmp(p->smps[i].key, "edgemon_aggregator_metrics_devices_omitted{}") == 0) {
      omitted = p->smps[i].value;
    }
    if (strcmp(p->smps[i].key, "edgemon_aggregator_devices{}") == 0) {
      devices = p->smps[i].value;
    }
  }
  assert_true(last_in);
  assert_int_equal(data, shown);
  assert_true(omitted == (double)r->stats.metrics_omitted);
  assert_true(devices == 60);
  free(p);
  free(pb);

  /* A protobuf sink must start empty; the text one appends. */
  em_metrics_out_t out;
  assert_int_equal(em_metrics_out_init(&out, EM_METRICS_PROTOBUF, 0), 0);
  static const em_metrics_family_t fam = {"x_total", "X.", EM_PROM_COUNTER};
  em_metrics_out_u64(&out, &fam, NULL, 0, 1);
  assert_int_equal(em_metrics_render_out(r, &out), -EINVAL);
  em_metrics_out_deinit(&out);
  em_registry_free(r);
}

/* Series of a text exposition as remote write pushes them: every sample line but the classic
 * histogram's, plus one native histogram per stage. */
static size_t remote_series_of(const char *text, size_t stages) {
  size_t n = stages;
  for (const char *p = text; *p;) {
    const char *nl = strchr(p, '\n');
    assert_non_null(nl);
    if (*p != '#' && strncmp(p, "edgemon_stage_latency_seconds", 29) != 0) {
      n++;
    }
    p = nl + 1;
  }
  return n;
}

static void remote_backend_pushes_the_text_samples_and_native_histograms(void **state) {
  fixture_t *f = *state;
  const char *url = "http://127.0.0.1:1/api/v1/write";
  em_remote_endpoint_cfg_t ep = {.url = url, .queue_requests = 4096};
  em_remote_cfg_t cfg = {.endpoints = &ep,
                         .n_endpoints = 1,
                         .batch_series = 1,
                         .backoff_min_ms = 600000,
                         .backoff_max_ms = 600000};
  em_remote_t *rw = NULL;
  assert_int_equal(em_remote_new(&rw, &cfg), 0);
  f->reg.remote = rw;
  char *text = render(f);
  /* The health families, with the endpoint's URL. */
  assert_non_null(strstr(text, "edgemon_aggregator_remote_write_queue_capacity_requests"
                               "{endpoint=\"http://127.0.0.1:1/api/v1/write\"} 4096\n"));
  assert_non_null(strstr(text, "edgemon_aggregator_remote_write_sent_requests_total"
                               "{endpoint=\"http://127.0.0.1:1/api/v1/write\"} 0\n"));
  assert_non_null(strstr(text, "edgemon_aggregator_remote_write_failures_total"
                               "{endpoint=\"http://127.0.0.1:1/api/v1/write\",kind=\"4xx\"} 0\n"));
  assert_null(strstr(text, "edgemon_aggregator_remote_write_last_success_time_seconds"));
  size_t want = remote_series_of(text, 1);
  free(text);

  em_metrics_out_t out;
  assert_int_equal(em_metrics_out_init(&out, EM_METRICS_REMOTE, 0), 0);
  assert_int_equal(em_metrics_out_remote(&out, rw, 1700000000000, "aggregator", "a1"), 0);
  assert_int_equal(em_metrics_push(&f->reg, &out), 0);
  assert_int_equal(out.remote_refused, 0);
  assert_int_equal(out.remote_series, want);
  em_remote_stats_t st;
  assert_int_equal(em_remote_stats(rw, 0, &st), 0);
  assert_int_equal(st.dropped_requests, 0);
  assert_int_equal(st.sent_requests, 0);
  assert_int_equal(st.queue_depth, want); /* Every series sealed into a request of its own. */
  char *body = (char *)1;
  size_t len = 1;
  assert_int_equal(em_metrics_out_take(&out, &body, &len), 0);
  assert_null(body);
  assert_int_equal(len, 0);
  em_metrics_out_deinit(&out);

  /* A label name the protocol refuses, and a text out, are refused. */
  assert_int_equal(em_metrics_out_init(&out, EM_METRICS_REMOTE, 0), 0);
  assert_int_equal(em_metrics_out_remote(&out, rw, 0, "__name__", "x"), -EINVAL);
  assert_int_equal(em_metrics_push(&f->reg, &out), -EINVAL); /* No remote set. */
  assert_int_equal(em_metrics_render_out(&f->reg, &out), -EINVAL);
  em_metrics_out_deinit(&out);
  assert_int_equal(em_metrics_out_init(&out, EM_METRICS_TEXT, 0), 0);
  assert_int_equal(em_metrics_out_remote(&out, rw, 0, NULL, NULL), -EINVAL);
  em_metrics_out_deinit(&out);
  f->reg.remote = NULL;
  em_remote_free(rw, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(exposition_has_one_help_and_type_per_family_not_interleaved,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(
          histogram_buckets_are_cumulative_on_the_ladder_with_inf_equal_to_count, setup, teardown),
      cmocka_unit_test_setup_teardown(label_values_are_escaped, setup, teardown),
      cmocka_unit_test_setup_teardown(absent_values_are_omitted_and_present_ones_written, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(loss_counters_are_left_out_when_not_tracked, setup, teardown),
      cmocka_unit_test_setup_teardown(values_of_another_session_are_not_named, setup, teardown),
      cmocka_unit_test_setup_teardown(device_json_has_values_by_name_and_null_for_absent, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(devices_json_lists_every_device_escaped_without_buckets,
                                      setup, teardown),
      cmocka_unit_test(empty_registry_renders_only_the_aggregator_families),
      cmocka_unit_test(render_over_the_cap_keeps_the_first_devices_and_says_so),
      cmocka_unit_test_setup_teardown(protobuf_has_the_text_families_in_order_with_the_same_help,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(counters_and_gauges_read_back_equal_in_both_formats, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(protobuf_histograms_hold_the_merged_buckets, setup, teardown),
      cmocka_unit_test(protobuf_over_the_cap_keeps_the_first_devices_and_says_so),
      cmocka_unit_test_setup_teardown(text_exposition_is_the_golden_one, setup, teardown),
      cmocka_unit_test_setup_teardown(forensic_families_show_each_kinds_figures_in_both_formats,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(remote_backend_pushes_the_text_samples_and_native_histograms,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(render_appends_and_a_failed_text_stays_failed, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
