/*
 * test_figures.c - the agent's metric dictionary (firmware/agent/figures.c).
 *
 * The table of fixed figures: every row has a unique, well-formed name that em_figures_find()
 * finds again, and the rows a host reads by name keep their unit, kind and cadence (table-
 * driven). The dictionary's layout against a real sensor fixture (tests/fixtures/boards/
 * raspberry-pi-5): events, fixed figures, one anomaly score per distinct stage, sensors, each
 * alias equal to its index. The absent reasons a birth starts with, for each combination of
 * PSI, cgroup target and smaps off (table-driven); absent reasons set, cleared and truncated
 * afterwards; bad options refused. And the names budget rules look figures up by: every PSI
 * rule the config loader makes names a row of this table (a config file written to a
 * temporary directory and loaded by em_config_load), so the two cannot drift apart.
 */
#define _XOPEN_SOURCE 700 /* POSIX 2008 plus XSI, for nftw() in tmp_tree.h */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "figures.h"
#include "tmp_tree.h"

#include "fixtures.h"
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* The alias of the definition named `name`, or -1. */
static long alias_of(em_figures_t *d, const char *name) {
  const em_metric_def_t *defs = em_figures_defs(d);
  for (size_t m = 0; m < em_figures_count(d); m++) {
    if (strcmp(defs[m].name, name) == 0) {
      return (long)m;
    }
  }
  return -1;
}

/* The absent reason of the definition named `name` ("" when not absent). */
static const char *reason_of(em_figures_t *d, const char *name) {
  long m = alias_of(d, name);
  if (m < 0) {
    fail_msg("no figure %s in the dictionary", name);
  }
  const char *why = em_figures_defs(d)[m].absent_reason;
  return why ? why : "";
}

/* ---- the table ---- */

static void every_row_is_unique_and_found_by_name(void **state) {
  (void)state;
  for (size_t f = 0; f < EM_FIG_COUNT; f++) {
    const em_figure_info_t *row = em_figures_info((em_figure_t)f);
    assert_non_null(row);
    assert_true(strlen(row->name) > 0 && strlen(row->name) < EM_FIGURES_NAME_BYTES);
    assert_true(strlen(row->unit) > 0);
    for (const char *p = row->name; *p; p++) {
      if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '.' || *p == '_')) {
        fail_msg("figure %s: character '%c' outside [a-z0-9._]", row->name, *p);
      }
    }
    assert_int_equal(em_figures_find(row->name), (int)f);
    for (size_t g = 0; g < f; g++) {
      if (strcmp(em_figures_info((em_figure_t)g)->name, row->name) == 0) {
        fail_msg("figure %s named twice (rows %zu and %zu)", row->name, g, f);
      }
    }
  }
  assert_null(em_figures_info(EM_FIG_COUNT));
  assert_int_equal(em_figures_find("no.such.figure"), -ENOENT);
  assert_int_equal(em_figures_find(NULL), -ENOENT);
}

/* Rows hosts and tests read by name: their unit, kind and cadence. */
static const struct {
  const char *name;
  const char *unit;
  em_metric_kind_t kind;
  em_figure_group_t group;
} rows[] = {
    {"pmu.hw.running_ratio", "1", EM_METRIC_GAUGE, EM_FIGURE_TARGET},
    {"pmu.ipc", "1", EM_METRIC_GAUGE, EM_FIGURE_TARGET},
    {"mem.rss", "By", EM_METRIC_GAUGE, EM_FIGURE_TARGET},
    {"mem.vsize", "By", EM_METRIC_GAUGE, EM_FIGURE_TARGET},
    {"mem.pss", "By", EM_METRIC_GAUGE, EM_FIGURE_SMAPS},
    {"mem.swap", "By", EM_METRIC_GAUGE, EM_FIGURE_SMAPS},
    {"sys.mem.available", "By", EM_METRIC_GAUGE, EM_FIGURE_SYSTEM},
    {"psi.cpu.some.avg10", "%", EM_METRIC_GAUGE, EM_FIGURE_SYSTEM},
    {"psi.io.full.avg10", "%", EM_METRIC_GAUGE, EM_FIGURE_SYSTEM},
    {"target.pid", "1", EM_METRIC_GAUGE, EM_FIGURE_TICK},
    {"target.attaches", "1", EM_METRIC_COUNTER, EM_FIGURE_TICK},
    {"agent.cpu", "ns", EM_METRIC_COUNTER, EM_FIGURE_TICK},
    {"agent.rss", "By", EM_METRIC_GAUGE, EM_FIGURE_TICK},
    {"spans.received", "1", EM_METRIC_COUNTER, EM_FIGURE_TICK},
    {"spans.dropped.overflow", "1", EM_METRIC_COUNTER, EM_FIGURE_TICK},
    {"rings.active", "1", EM_METRIC_GAUGE, EM_FIGURE_TICK},
    {"push.subscribe_refused", "1", EM_METRIC_COUNTER, EM_FIGURE_TICK},
    {"spool.pending", "1", EM_METRIC_GAUGE, EM_FIGURE_TICK},
    {"spool.inflight", "1", EM_METRIC_GAUGE, EM_FIGURE_TICK},
    {"spool.evicted_inflight", "1", EM_METRIC_COUNTER, EM_FIGURE_TICK},
    {"spool.lost", "1", EM_METRIC_COUNTER, EM_FIGURE_TICK},
    {"sched.runq_delay", "ns", EM_METRIC_COUNTER, EM_FIGURE_TARGET},
    {"sched.ctxsw.voluntary", "1", EM_METRIC_COUNTER, EM_FIGURE_TARGET},
    {"sched.ctxsw.involuntary", "1", EM_METRIC_COUNTER, EM_FIGURE_TARGET},
    {"proc.cpu", "ns", EM_METRIC_COUNTER, EM_FIGURE_TARGET},
    {"mem.major_faults", "1", EM_METRIC_COUNTER, EM_FIGURE_TARGET},
    {"cgroup.cpu.throttled", "ns", EM_METRIC_COUNTER, EM_FIGURE_TARGET},
    {"cgroup.cpu.nr_throttled", "1", EM_METRIC_COUNTER, EM_FIGURE_TARGET},
};

static void rows_keep_unit_kind_and_cadence(void **state) {
  (void)state;
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    int f = em_figures_find(rows[i].name);
    if (f < 0) {
      fail_msg("figure %s is not in the table", rows[i].name);
    }
    const em_figure_info_t *row = em_figures_info((em_figure_t)f);
    assert_string_equal(row->unit, rows[i].unit);
    if (row->kind != rows[i].kind || row->group != rows[i].group) {
      fail_msg("%s: kind %d group %d, expected %d %d", rows[i].name, (int)row->kind,
               (int)row->group, (int)rows[i].kind, (int)rows[i].group);
    }
  }
}

/* ---- the dictionary ---- */

static void layout_events_fixed_anomalies_sensors(void **state) {
  (void)state;
  em_sensors_t *sensors = NULL;
  assert_int_equal(em_sensors_new(&sensors, EM_FIXTURES_DIR "/boards/raspberry-pi-5", NULL), 0);
  unsigned n_sensors = em_sensors_count(sensors);
  assert_true(n_sensors > 0);
  static const char *const events[] = {"cycles", "task-clock", "instructions"};
  static const char *const stages[] = {"infer", "", "infer", "pre"}; /* "" and repeats skipped */
  em_figures_opts_t o = {.events = events,
                         .n_events = 3,
                         .stages = stages,
                         .n_stages = 4,
                         .sensors = sensors,
                         .psi = true,
                         .process_memory = true,
                         .smaps = true};
  em_figures_t *d = NULL;
  assert_int_equal(em_figures_new(&d, &o), 0);
  assert_int_equal(em_figures_count(d), 3 + EM_FIG_COUNT + 2 + n_sensors);
  const em_metric_def_t *defs = em_figures_defs(d);
  for (size_t m = 0; m < em_figures_count(d); m++) {
    assert_int_equal(defs[m].alias, m);
  }
  /* Events: pmu.<name>, counters, ns for the clocks. */
  assert_string_equal(defs[0].name, "pmu.cycles");
  assert_string_equal(defs[0].unit, "1");
  assert_string_equal(defs[1].name, "pmu.task-clock");
  assert_string_equal(defs[1].unit, "ns");
  assert_string_equal(defs[2].name, "pmu.instructions");
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(defs[i].kind, EM_METRIC_COUNTER);
    assert_int_equal(em_figures_group(d, i), EM_FIGURE_TARGET);
  }
  /* Fixed figures: in table order, after the events. */
  for (size_t f = 0; f < EM_FIG_COUNT; f++) {
    size_t m = em_figures_alias(d, (em_figure_t)f);
    assert_int_equal(m, 3 + f);
    assert_string_equal(defs[m].name, em_figures_info((em_figure_t)f)->name);
    assert_int_equal(em_figures_group(d, m), em_figures_info((em_figure_t)f)->group);
  }
  /* Anomaly scores: one per distinct stage, in first-seen order. */
  assert_int_equal(em_figures_anomalies(d), 2);
  static const char *const want_stages[] = {"infer", "pre"};
  for (size_t k = 0; k < 2; k++) {
    size_t m = em_figures_anomaly_alias(d, k);
    assert_int_equal(m, 3 + EM_FIG_COUNT + k);
    assert_string_equal(em_figures_anomaly_stage(d, k), want_stages[k]);
    char name[64];
    snprintf(name, sizeof(name), "budget.%s.anomaly", want_stages[k]);
    assert_string_equal(defs[m].name, name);
    assert_int_equal(defs[m].kind, EM_METRIC_GAUGE);
    assert_int_equal(em_figures_group(d, m), EM_FIGURE_TICK);
  }
  assert_null(em_figures_anomaly_stage(d, 2));
  /* Sensors close the dictionary, in the board's order, with their units. */
  for (unsigned i = 0; i < n_sensors; i++) {
    size_t m = em_figures_sensor_alias(d, i);
    assert_int_equal(m, 3 + EM_FIG_COUNT + 2 + i);
    assert_string_equal(defs[m].name, em_sensors_figure(sensors, i)->name);
    assert_string_equal(defs[m].unit, em_sensors_figure(sensors, i)->unit);
    assert_int_equal(em_figures_group(d, m), EM_FIGURE_TICK);
    assert_string_equal(defs[m].absent_reason, "not read yet");
  }
  em_figures_free(d);
  em_sensors_free(sensors);
}

#define PSI_NO   "no readable /proc/pressure: kernel without PSI (4.20+) or PSI off at boot (psi=1)"
#define CGROUP   "cgroup target: per-process memory is not sampled"
#define SMAPS_NO "smaps_period is 0"

/* The reasons a birth starts with, for each combination of what is sampled. */
static const struct {
  bool psi, process_memory, smaps;
  const char *psi_cpu, *rss, *vsize, *pss, *swap, *available;
} starts[] = {
    {true, true, true, "", "", "", "", "", ""},
    {false, true, true, PSI_NO, "", "", "", "", ""},
    {true, false, true, "", CGROUP, CGROUP, CGROUP, CGROUP, ""},
    {true, true, false, "", "", "", SMAPS_NO, SMAPS_NO, ""},
    {false, false, false, PSI_NO, CGROUP, CGROUP, SMAPS_NO, SMAPS_NO, ""}, /* smaps wins */
};

static void absent_reasons_at_start(void **state) {
  (void)state;
  static const char *const events[] = {"cycles"};
  for (size_t i = 0; i < ARRAY_LEN(starts); i++) {
    em_figures_opts_t o = {.events = events,
                           .n_events = 1,
                           .psi = starts[i].psi,
                           .process_memory = starts[i].process_memory,
                           .smaps = starts[i].smaps};
    em_figures_t *d = NULL;
    assert_int_equal(em_figures_new(&d, &o), 0);
    assert_string_equal(reason_of(d, "pmu.cycles"), "target not attached yet");
    assert_string_equal(reason_of(d, "psi.cpu.some.avg10"), starts[i].psi_cpu);
    assert_string_equal(reason_of(d, "psi.io.full.avg10"), starts[i].psi_cpu);
    assert_string_equal(reason_of(d, "mem.rss"), starts[i].rss);
    assert_string_equal(reason_of(d, "mem.vsize"), starts[i].vsize);
    assert_string_equal(reason_of(d, "mem.pss"), starts[i].pss);
    assert_string_equal(reason_of(d, "mem.swap"), starts[i].swap);
    assert_string_equal(reason_of(d, "sys.mem.available"), starts[i].available);
    assert_string_equal(reason_of(d, "spool.lost"), "");
    /* A cgroup target has no process or threads: their scheduling figures are absent; the
     * cgroup's runq delay (cpu.pressure) and throttling are not. */
    const char *per_process =
        starts[i].process_memory ? ""
                                 : "cgroup target: per-process and per-thread figures are not read";
    assert_string_equal(reason_of(d, "proc.cpu"), per_process);
    assert_string_equal(reason_of(d, "mem.major_faults"), per_process);
    assert_string_equal(reason_of(d, "sched.ctxsw.voluntary"), per_process);
    assert_string_equal(reason_of(d, "sched.ctxsw.involuntary"), per_process);
    assert_string_equal(reason_of(d, "sched.runq_delay"), "");
    assert_string_equal(reason_of(d, "cgroup.cpu.throttled"), "");
    assert_int_equal(em_figures_count(d), 1 + EM_FIG_COUNT);
    em_figures_free(d);
  }
}

static void absent_reasons_change_and_are_bounded(void **state) {
  (void)state;
  static const char *const events[] = {"cycles"};
  em_figures_opts_t o = {
      .events = events, .n_events = 1, .psi = true, .process_memory = true, .smaps = true};
  em_figures_t *d = NULL;
  assert_int_equal(em_figures_new(&d, &o), 0);
  em_figures_note_absent(d, 0, "");
  assert_string_equal(reason_of(d, "pmu.cycles"), "");
  em_figures_note_absent(d, 0, "counter not supported");
  assert_string_equal(reason_of(d, "pmu.cycles"), "counter not supported");
  em_figures_note_absent(d, 0, NULL);
  assert_string_equal(reason_of(d, "pmu.cycles"), "");
  char longer[300];
  memset(longer, 'x', sizeof(longer) - 1);
  longer[sizeof(longer) - 1] = '\0';
  size_t rss = em_figures_alias(d, EM_FIG_RSS);
  em_figures_note_absent(d, rss, longer);
  assert_int_equal(strlen(reason_of(d, "mem.rss")), EM_FIGURES_REASON_BYTES - 1);
  em_figures_note_absent(d, em_figures_count(d), "out of range: ignored");
  em_figures_note_absent(NULL, 0, "ignored");
  em_figures_free(d);
  em_figures_free(NULL);
}

static void bad_options_are_refused(void **state) {
  (void)state;
  em_figures_t *d = NULL;
  em_figures_opts_t o = {0};
  assert_int_equal(em_figures_new(NULL, &o), -EINVAL);
  assert_int_equal(em_figures_new(&d, NULL), -EINVAL);
  static const char *events[EM_FIGURES_MAX_EVENTS + 1];
  for (size_t i = 0; i < ARRAY_LEN(events); i++) {
    events[i] = "cycles";
  }
  o = (em_figures_opts_t){.events = events, .n_events = EM_FIGURES_MAX_EVENTS + 1};
  assert_int_equal(em_figures_new(&d, &o), -EINVAL);
  o = (em_figures_opts_t){.events = NULL, .n_events = 1};
  assert_int_equal(em_figures_new(&d, &o), -EINVAL);
  static const char *const with_null[] = {"infer", NULL};
  o = (em_figures_opts_t){.stages = with_null, .n_stages = 2};
  assert_int_equal(em_figures_new(&d, &o), -EINVAL);
  char stage[EM_FIGURES_NAME_BYTES];
  memset(stage, 's', sizeof(stage) - 1);
  stage[sizeof(stage) - 1] = '\0';
  const char *long_stage[] = {stage};
  o = (em_figures_opts_t){.stages = long_stage, .n_stages = 1};
  assert_int_equal(em_figures_new(&d, &o), -ENAMETOOLONG);
  assert_null(d);
  /* The longest names the config allows fit. */
  char event[EM_CONFIG_MAX_EVENT_NAME];
  memset(event, 'e', sizeof(event) - 1);
  event[sizeof(event) - 1] = '\0';
  char stage_ok[EM_CONFIG_MAX_STAGE];
  memset(stage_ok, 's', sizeof(stage_ok) - 1);
  stage_ok[sizeof(stage_ok) - 1] = '\0';
  const char *ev[] = {event};
  const char *st[] = {stage_ok};
  o = (em_figures_opts_t){.events = ev, .n_events = 1, .stages = st, .n_stages = 1};
  assert_int_equal(em_figures_new(&d, &o), 0);
  em_figures_free(d);
}

/* ---- the names budget rules use ---- */

static void config_psi_rules_name_table_figures(void **state) {
  (void)state;
  char dir[EM_TMP_TREE_ROOT_BYTES];
  em_tmp_tree_make(dir, "em-figures-test");
  em_tmp_tree_put(dir, "agent.conf",
                  "[target]\npid = 1\n"
                  "[budget.process]\nlevel = WARN\npsi_cpu_some = 40\npsi_memory_some = 40\n"
                  "psi_memory_full = 40\npsi_io_some = 40\npsi_io_full = 40\ntemp_max = 85\n");
  char path[EM_TMP_TREE_ROOT_BYTES + 16];
  snprintf(path, sizeof(path), "%s/agent.conf", dir);
  em_config_t *cfg = calloc(1, sizeof(*cfg));
  assert_non_null(cfg);
  int rc = em_config_load(path, cfg, NULL, NULL, NULL);
  em_tmp_tree_remove(dir);
  assert_int_equal(rc, 0);
  size_t psi = 0;
  bool temp = false;
  for (size_t i = 0; i < cfg->n_rules; i++) {
    const em_budget_rule_t *r = &cfg->rules[i];
    if (r->kind == EM_BUDGET_RULE_PSI) {
      int f = em_figures_find(r->u.gauge.figure);
      if (f < EM_FIG_PSI_CPU_SOME || f > EM_FIG_PSI_IO_FULL) {
        fail_msg("rule %s reads figure '%s', not a PSI row of the table", r->id, r->u.gauge.figure);
      }
      psi++;
    } else if (r->kind == EM_BUDGET_RULE_GAUGE_MAX) {
      /* The hottest zone is the agent's own figure for the budget, not a dictionary row. */
      assert_string_equal(r->u.gauge.figure, EM_CONFIG_FIGURE_TEMP);
      assert_int_equal(em_figures_find(r->u.gauge.figure), -ENOENT);
      temp = true;
    }
  }
  assert_int_equal(psi, 5);
  assert_true(temp);
  free(cfg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_row_is_unique_and_found_by_name),
      cmocka_unit_test(rows_keep_unit_kind_and_cadence),
      cmocka_unit_test(layout_events_fixed_anomalies_sensors),
      cmocka_unit_test(absent_reasons_at_start),
      cmocka_unit_test(absent_reasons_change_and_are_bounded),
      cmocka_unit_test(bad_options_are_refused),
      cmocka_unit_test(config_psi_rules_name_table_figures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
