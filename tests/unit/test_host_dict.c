/*
 * test_host_dict.c - the host's device registry (host/lib/dict.c) and the pure parts of the
 * broker module: URL and topic parsing.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <broker.h>
#include <dict.h>

#include "broker_urls.h"

static const em_metric_def_t metrics[] = {
    {.alias = 0, .name = "pmu.cycles", .unit = "1", .kind = EM_METRIC_COUNTER},
    {.alias = 3, .name = "mem.rss", .unit = "By", .kind = EM_METRIC_GAUGE},
    {.alias = 7, .name = "pmu.ipc", .unit = "1", .kind = EM_METRIC_GAUGE},
};

static const em_budget_t budgets[] = {
    {.id = "infer.deadline",
     .rule = "deadline",
     .level = EM_LEVEL_CRITICAL,
     .bound = {.type = EM_VALUE_UINT, .as.u = 100000000},
     .stage = "infer"},
    {.id = "infer.p99",
     .rule = "percentile",
     .level = EM_LEVEL_DEGRADED,
     .bound = {.type = EM_VALUE_UINT, .as.u = 40000000},
     .stage = "infer",
     .window_ns = 1000000000},
    {.id = "pre.deadline",
     .rule = "deadline",
     .level = EM_LEVEL_WARN,
     .bound = {.type = EM_VALUE_UINT, .as.u = 5000000},
     .stage = "pre"},
    {.id = "rss.cap",
     .rule = "rss_cap",
     .level = EM_LEVEL_WARN,
     .bound = {.type = EM_VALUE_UINT, .as.u = 1u << 30}},
};

static em_birth_t birth(uint32_t session) {
  em_birth_t b = {.head = {.time_ns = 1000, .session = session},
                  .device = "dev",
                  .agent_version = "0.1.0",
                  .board = "jetson-agx-orin",
                  .period_ns = 100000000,
                  .metrics = metrics,
                  .n_metrics = 3,
                  .budgets = budgets,
                  .n_budgets = 4};
  return b;
}

static void dict_keeps_devices_sorted_and_unique(void **state) {
  (void)state;
  em_dict_t *d = NULL;
  assert_int_equal(em_dict_new(&d), 0);
  const char *ids[] = {"orin-3", "nano-1", "orin-1", "nano-1", "x86"};
  for (size_t i = 0; i < 5; i++) {
    assert_non_null(em_dict_device(d, ids[i], true));
  }
  assert_int_equal(em_dict_count(d), 4);
  assert_string_equal(em_dict_at(d, 0)->id, "nano-1");
  assert_string_equal(em_dict_at(d, 1)->id, "orin-1");
  assert_string_equal(em_dict_at(d, 2)->id, "orin-3");
  assert_string_equal(em_dict_at(d, 3)->id, "x86");
  assert_null(em_dict_at(d, 4));
  assert_null(em_dict_device(d, "absent", false));
  assert_null(em_dict_device(d, "", true));
  em_dict_free(d);
  em_dict_free(NULL);
}

static void dict_names_aliases_of_the_birth_session_only(void **state) {
  (void)state;
  em_dict_t *d = NULL;
  assert_int_equal(em_dict_new(&d), 0);
  em_device_t *dev = em_dict_device(d, "dev", true);
  assert_false(em_dict_knows_session(dev, 7));
  assert_null(em_dict_name(dev, 3));
  em_birth_t b = birth(7);
  assert_int_equal(em_dict_set_birth(dev, &b), 0);
  assert_true(em_dict_knows_session(dev, 7));
  assert_false(em_dict_knows_session(dev, 8));
  assert_string_equal(em_dict_name(dev, 0), "pmu.cycles");
  assert_string_equal(em_dict_name(dev, 3), "mem.rss");
  assert_string_equal(em_dict_alias_name(dev, 7), "pmu.ipc");
  assert_null(em_dict_name(dev, 1)); /* a hole in the alias range */
  assert_null(em_dict_name(dev, 8)); /* past it */
  assert_int_equal(em_dict_alias(dev, "mem.rss"), 3);
  assert_int_equal(em_dict_alias(dev, "nope"), -1);
  assert_string_equal(dev->board, "jetson-agx-orin");
  /* A new birth replaces the old one whole. */
  em_birth_t b2 = birth(8);
  b2.n_metrics = 1;
  assert_int_equal(em_dict_set_birth(dev, &b2), 0);
  assert_true(em_dict_knows_session(dev, 8));
  assert_null(em_dict_name(dev, 3));
  em_dict_free(d);
}

static void dict_stage_budget_prefers_the_percentile_rule(void **state) {
  (void)state;
  em_dict_t *d = NULL;
  assert_int_equal(em_dict_new(&d), 0);
  em_device_t *dev = em_dict_device(d, "dev", true);
  em_birth_t b = birth(1);
  assert_int_equal(em_dict_set_birth(dev, &b), 0);
  const em_dict_budget_t *r = em_dict_stage_budget(dev, "infer");
  assert_non_null(r);
  assert_string_equal(r->id, "infer.p99");
  r = em_dict_stage_budget(dev, "pre");
  assert_non_null(r);
  assert_string_equal(r->rule, "deadline");
  assert_null(em_dict_stage_budget(dev, "post"));
  em_dict_free(d);
}

static void dict_update_tracks_status_state_and_last_seen(void **state) {
  (void)state;
  em_dict_t *d = NULL;
  assert_int_equal(em_dict_new(&d), 0);
  em_device_t *dev = em_dict_device(d, "dev", true);
  assert_int_equal(dev->level, EM_LEVEL_NONE);
  em_msg_t m = {.kind = EM_MSG_STATUS};
  m.u.status = (em_status_t){.head = {.time_ns = 500, .session = 1}, .online = true};
  assert_int_equal(em_dict_update(dev, &m), 0);
  assert_true(dev->have_status && dev->online);
  assert_int_equal(dev->last_seen_ns, 500);
  m.kind = EM_MSG_STATE;
  m.u.state = (em_state_t){.head = {.time_ns = 900},
                           .level = EM_LEVEL_DEGRADED,
                           .prev_level = EM_LEVEL_NOMINAL,
                           .reason = "infer p99 over"};
  assert_int_equal(em_dict_update(dev, &m), 0);
  assert_int_equal(dev->level, EM_LEVEL_DEGRADED);
  assert_string_equal(dev->reason, "infer p99 over");
  m.kind = EM_MSG_DATA;
  m.u.data = (em_data_t){.head = {.time_ns = 1200}, .level = EM_LEVEL_NONE};
  assert_int_equal(em_dict_update(dev, &m), 0);
  assert_int_equal(dev->level, EM_LEVEL_DEGRADED); /* data without a level keeps it */
  assert_int_equal(dev->last_seen_ns, 1200);
  /* The Last Will carries the old connect time: offline, but not a sighting. */
  m.kind = EM_MSG_STATUS;
  m.u.status = (em_status_t){.head = {.time_ns = 400}, .online = false};
  assert_int_equal(em_dict_update(dev, &m), 0);
  assert_false(dev->online);
  assert_int_equal(dev->last_seen_ns, 1200);
  em_dict_free(d);
}

static void broker_url_parse_table(void **state) {
  (void)state;
  const em_test_broker_url_t *rows = em_test_broker_urls;
  for (size_t i = 0; i < sizeof(em_test_broker_urls) / sizeof(rows[0]); i++) {
    em_broker_url_t u;
    char err[256] = "";
    int rc = em_broker_parse_url(rows[i].url, &u, err, sizeof(err));
    assert_int_equal(rc, rows[i].rc);
    if (rc == 0) {
      assert_string_equal(u.host, rows[i].host);
      assert_int_equal(u.port, rows[i].port);
    } else {
      assert_non_null(strstr(err, rows[i].url)); /* the message names the URL */
    }
  }
}

static void topic_parse_table(void **state) {
  (void)state;
  char id[EM_TOPIC_MAX_DEVICE + 1];
  const char *kind = NULL;
  assert_int_equal(em_topic_parse("edgemon/v1/orin-7/data", id, sizeof(id), &kind), 0);
  assert_string_equal(id, "orin-7");
  assert_string_equal(kind, "data");
  assert_int_equal(em_topic_parse("edgemon/v1/a/cmd/rebirth", id, sizeof(id), &kind), 0);
  assert_string_equal(kind, "cmd/rebirth");
  const char *bad[] = {"edgemon/v2/a/data", "edgemon/v1//data", "edgemon/v1/a",
                       "edgemon/v1/a/",     "other/v1/a/data",  ""};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    assert_int_equal(em_topic_parse(bad[i], id, sizeof(id), &kind), -EINVAL);
  }
  char longid[128] = "edgemon/v1/";
  memset(longid + 11, 'x', 64);
  strcpy(longid + 75, "/data");
  assert_int_equal(em_topic_parse(longid, id, sizeof(id), &kind), -EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(dict_keeps_devices_sorted_and_unique),
      cmocka_unit_test(dict_names_aliases_of_the_birth_session_only),
      cmocka_unit_test(dict_stage_budget_prefers_the_percentile_rule),
      cmocka_unit_test(dict_update_tracks_status_state_and_last_seen),
      cmocka_unit_test(broker_url_parse_table),
      cmocka_unit_test(topic_parse_table),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
