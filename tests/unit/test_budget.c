/*
 * test_budget.c - unit tests of firmware/agent/supervise/budget.c: rule hysteresis, the level's up
 * and down steps, hard deadlines, alive supervision, rate, miss ratio, RSS cap and slope, absent
 * figures, the change record, the anomaly score, flow (logical) supervision and the birth's
 * budget list.
 *
 * Time is injected (1 s windows from T0), histograms are built with em_hist_record, and the
 * RSS series come from a fixed-seed generator, so every run sees the same transitions.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "edgemon/proto.h"
#include "hist.h"

#define MS  UINT64_C(1000000)
#define SEC UINT64_C(1000000000)
#define MIB UINT64_C(1048576)
#define T0  (UINT64_C(1000) * SEC)

/* A test rig: one stage "infer" with its window histogram and a clock. */
typedef struct {
  em_budget_engine_t *b;
  em_hist_t hist;
  uint64_t now;
  em_value_t rss;
  em_budget_figure_t figs[1];
  size_t n_figs;
  em_budget_change_t change;
  int changes;
} rig_t;

static rig_t *rig_new(const em_budget_rule_t *rules, size_t n, uint32_t enter, uint32_t leave) {
  rig_t *r = calloc(1, sizeof(*r));
  assert_non_null(r);
  em_hist_init(&r->hist);
  r->now = T0;
  em_budget_opts_t o = {.rules = rules,
                        .n_rules = n,
                        .enter_windows = enter,
                        .leave_windows = leave,
                        .window_ns = SEC};
  assert_int_equal(em_budget_new(&r->b, &o, r->now), 0);
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_NOMINAL);
  return r;
}

static void rig_free(rig_t *r) {
  em_budget_free(r->b);
  free(r);
}

/* Records `n` spans of `ns` into the window and feeds them to the engine. */
static void spans(rig_t *r, int n, uint64_t ns) {
  for (int i = 0; i < n; i++) {
    em_hist_record(&r->hist, ns);
    r->changes += em_budget_on_span(r->b, "infer", (uint64_t)i, ns, r->now, &r->change);
  }
}

/* Ends a 1 s window at now + 1 s; returns whether the level changed. */
static bool window(rig_t *r) {
  r->now += SEC;
  em_budget_stage_window_t st = {"infer", &r->hist};
  em_budget_window_t w = {.window_ns = SEC,
                          .stages = &st,
                          .n_stages = 1,
                          .rss_bytes = r->rss,
                          .figures = r->figs,
                          .n_figures = r->n_figs};
  bool changed = em_budget_on_window(r->b, &w, r->now, &r->change);
  r->changes += changed;
  em_hist_reset(&r->hist);
  return changed;
}

/* A window of 100 spans of `ns`. */
static bool window_of(rig_t *r, uint64_t ns) {
  spans(r, 100, ns);
  return window(r);
}

static const em_budget_rule_t p99_degraded = {
    .id = "infer.p99",
    .kind = EM_BUDGET_RULE_PERCENTILE,
    .level = EM_LEVEL_DEGRADED,
    .stage = "infer",
    .u.percentile = {.q = 0.99, .bound_ns = 40 * MS},
};

static const em_budget_rule_t p99_warn = {
    .id = "infer.p99.warn",
    .kind = EM_BUDGET_RULE_PERCENTILE,
    .level = EM_LEVEL_WARN,
    .stage = "infer",
    .u.percentile = {.q = 0.99, .bound_ns = 20 * MS},
};

#define GOOD (10 * MS)
#define SLOW (50 * MS)

static void nominal_to_degraded_after_n_bad_windows_and_not_before(void **state) {
  (void)state;
  rig_t *r = rig_new(&p99_degraded, 1, 3, 5);
  assert_false(window_of(r, SLOW));
  assert_false(window_of(r, SLOW));
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_NOMINAL);
  assert_true(window_of(r, SLOW));
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_DEGRADED);
  assert_int_equal(r->change.prev_level, EM_LEVEL_NOMINAL);
  assert_int_equal(r->change.level, EM_LEVEL_DEGRADED);
  assert_false(window_of(r, SLOW));
  assert_int_equal(r->changes, 1);
  rig_free(r);
}

static void back_to_nominal_after_m_clean_windows(void **state) {
  (void)state;
  em_budget_rule_t rule = p99_warn;
  rig_t *r = rig_new(&rule, 1, 2, 4);
  window_of(r, SLOW);
  assert_true(window_of(r, SLOW));
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_WARN);
  for (int i = 0; i < 3; i++) {
    assert_false(window_of(r, GOOD));
    assert_int_equal(em_budget_level(r->b), EM_LEVEL_WARN);
  }
  assert_true(window_of(r, GOOD));
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_NOMINAL);
  assert_string_equal(r->change.reason, "cleared");
  assert_string_equal(r->change.rule, "infer.p99.warn");
  rig_free(r);
}

/* A reload replaces the engine: rules kept by id keep their state and the level stays; a
 * changed bound applies from the next window; a removed rule's level steps down only after
 * the usual clean windows. */
static void adopt_keeps_level_and_rule_state_across_a_reload(void **state) {
  (void)state;
  rig_t *r = rig_new(&p99_degraded, 1, 3, 2);
  for (int i = 0; i < 3; i++) {
    window_of(r, SLOW);
  }
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_DEGRADED);

  /* Same rule id with a looser bound (60 ms), plus a new WARN rule. */
  em_budget_rule_t rules[2] = {p99_degraded, p99_warn};
  rules[0].u.percentile.bound_ns = 60 * MS;
  em_budget_opts_t o = {
      .rules = rules, .n_rules = 2, .enter_windows = 3, .leave_windows = 2, .window_ns = SEC};
  em_budget_engine_t *next = NULL;
  assert_int_equal(em_budget_new(&next, &o, r->now), 0);
  assert_int_equal(em_budget_adopt(next, r->b), 1);
  assert_int_equal(em_budget_level(next), EM_LEVEL_DEGRADED);
  em_budget_free(r->b);
  r->b = next;
  /* 50 ms is now within the degraded bound but over the new warn bound (20 ms): the kept rule
   * recovers after 2 clean windows, the new one enters after 3 violating ones. */
  assert_false(window_of(r, SLOW));
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_DEGRADED);
  assert_true(window_of(r, SLOW));
  assert_int_equal(r->change.level, EM_LEVEL_WARN);
  assert_string_equal(r->change.rule, "infer.p99");

  /* A reload without any rule: WARN stays until leave (2) clean windows have passed. */
  em_budget_opts_t none = {
      .rules = NULL, .n_rules = 0, .enter_windows = 3, .leave_windows = 2, .window_ns = SEC};
  assert_int_equal(em_budget_new(&next, &none, r->now), 0);
  assert_int_equal(em_budget_adopt(next, r->b), 0);
  em_budget_free(r->b);
  r->b = next;
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_WARN);
  assert_false(window_of(r, SLOW));
  assert_true(window_of(r, SLOW));
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_NOMINAL);
  assert_int_equal(em_budget_adopt(NULL, r->b), 0);
  rig_free(r);
}

/* A reload that raises the level of a rule that is already violating: the change the next
 * call reports names that rule, with its last value, its bound and the reason it entered
 * with (it once reported no rule, NaN value and bound). */
static void a_reload_raising_an_active_rules_level_names_that_rule(void **state) {
  (void)state;
  em_budget_rule_t miss = {.id = "infer.deadline",
                           .kind = EM_BUDGET_RULE_DEADLINE,
                           .level = EM_LEVEL_DEGRADED,
                           .stage = "infer",
                           .u.deadline = {.bound_ns = 50 * MS}};
  rig_t *r = rig_new(&miss, 1, 1, 5);
  spans(r, 1, 120 * MS);
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_DEGRADED);

  em_budget_rule_t rules[2] = {p99_warn, miss};
  rules[1].level = EM_LEVEL_CRITICAL;
  em_budget_opts_t o = {
      .rules = rules, .n_rules = 2, .enter_windows = 1, .leave_windows = 5, .window_ns = SEC};
  em_budget_engine_t *next = NULL;
  assert_int_equal(em_budget_new(&next, &o, r->now), 0);
  assert_int_equal(em_budget_adopt(next, r->b), 1);
  em_budget_free(r->b);
  r->b = next;
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_DEGRADED);

  r->now += 100 * MS;
  em_budget_change_t c;
  memset(&c, 0xa5, sizeof(c));
  assert_true(em_budget_on_timer(r->b, r->now, &c));
  assert_int_equal(c.level, EM_LEVEL_CRITICAL);
  assert_int_equal(c.prev_level, EM_LEVEL_DEGRADED);
  assert_non_null(c.rule);
  assert_string_equal(c.rule, "infer.deadline");
  assert_non_null(c.stage);
  assert_string_equal(c.stage, "infer");
  assert_string_equal(c.reason, "deadline miss");
  assert_int_equal(c.value.type, EM_VALUE_UINT);
  assert_int_equal(c.value.as.u, 120 * MS);
  assert_int_equal(c.bound.type, EM_VALUE_UINT);
  assert_int_equal(c.bound.as.u, 50 * MS);
  assert_int_equal(c.mono_ns, r->now);

  /* A lower rule entering in the same call as the raise still leaves the change to the rule
   * that holds the level. */
  rig_free(r);
  r = rig_new(&miss, 1, 1, 5);
  spans(r, 1, 120 * MS);
  assert_int_equal(em_budget_new(&next, &o, r->now), 0);
  em_budget_adopt(next, r->b);
  em_budget_free(r->b);
  r->b = next;
  r->changes = 0;
  for (int i = 0; i < 100; i++) { /* The window alone: no span reaches the engine first. */
    em_hist_record(&r->hist, SLOW);
  }
  assert_true(window(r)); /* p99 50 ms > 20 ms: the WARN rule enters in this call. */
  assert_int_equal(r->changes, 1);
  assert_int_equal(r->change.level, EM_LEVEL_CRITICAL);
  assert_string_equal(r->change.rule, "infer.deadline");
  assert_int_equal(r->change.value.as.u, 120 * MS);
  rig_free(r);
}

static void no_flapping_on_alternating_windows(void **state) {
  (void)state;
  rig_t *r = rig_new(&p99_degraded, 1, 2, 2);
  /* Never two bad windows in a row: never enters. */
  for (int i = 0; i < 20; i++) {
    assert_false(window_of(r, i % 2 ? GOOD : SLOW));
  }
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_NOMINAL);
  /* Enter, then alternate: never two clean windows in a row: never leaves. */
  window_of(r, SLOW);
  window_of(r, SLOW);
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_DEGRADED);
  for (int i = 0; i < 20; i++) {
    assert_false(window_of(r, i % 2 ? SLOW : GOOD));
  }
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_DEGRADED);
  assert_int_equal(r->changes, 1);
  rig_free(r);
}

static const em_budget_rule_t deadline_critical = {
    .id = "infer.deadline",
    .kind = EM_BUDGET_RULE_DEADLINE,
    .level = EM_LEVEL_CRITICAL,
    .stage = "infer",
    .u.deadline = {.bound_ns = 100 * MS},
};

static void hard_deadline_miss_escalates_on_that_span(void **state) {
  (void)state;
  rig_t *r = rig_new(&deadline_critical, 1, 3, 2);
  spans(r, 10, GOOD);
  assert_int_equal(r->changes, 0);
  em_budget_change_t c;
  assert_false(em_budget_on_span(r->b, "infer", 7, 100 * MS, r->now, &c)); /* At the bound. */
  assert_true(em_budget_on_span(r->b, "infer", 8, 101 * MS, r->now, &c));
  assert_int_equal(c.level, EM_LEVEL_CRITICAL);
  assert_int_equal(c.prev_level, EM_LEVEL_NOMINAL);
  assert_string_equal(c.reason, "deadline miss");
  assert_int_equal(c.value.as.u, 101 * MS);
  assert_false(em_budget_on_span(r->b, "infer", 9, 200 * MS, r->now, &c));
  /* The miss's window is violating; then 2 clean windows clear the rule (one step). */
  assert_false(window(r));
  assert_false(window_of(r, GOOD));
  assert_true(window_of(r, GOOD));
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_DEGRADED);
  /* A window with no spans is absent for the deadline rule, yet no rule violated in it: it
   * counts as clean for the level's next step. */
  assert_false(window(r));
  assert_true(window_of(r, GOOD));
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_WARN);
  rig_free(r);
}

static void alive_fires_on_silence_and_clears_on_next_span(void **state) {
  (void)state;
  em_budget_rule_t rule = {.id = "infer.alive",
                           .kind = EM_BUDGET_RULE_ALIVE,
                           .level = EM_LEVEL_CRITICAL,
                           .stage = "infer",
                           .u.alive = {.silence_ns = 500 * MS}};
  rig_t *r = rig_new(&rule, 1, 3, 3);
  em_budget_change_t c;
  assert_int_equal(em_budget_reported(r->b, "infer"), 0);
  assert_false(em_budget_on_span(r->b, "infer", 1, GOOD, T0, &c)); /* The first report. */
  assert_int_equal(em_budget_reported(r->b, "infer"), 1);
  assert_false(em_budget_on_timer(r->b, T0 + 500 * MS, &c));
  assert_true(em_budget_on_timer(r->b, T0 + 501 * MS, &c));
  assert_int_equal(c.level, EM_LEVEL_CRITICAL);
  assert_string_equal(c.reason, "stalled");
  assert_int_equal(c.value.as.u, 501 * MS);
  assert_false(em_budget_on_timer(r->b, T0 + 900 * MS, &c));
  /* The next span clears it: one step down at once. */
  assert_true(em_budget_on_span(r->b, "infer", 1, GOOD, T0 + SEC, &c));
  assert_int_equal(c.prev_level, EM_LEVEL_CRITICAL);
  assert_int_equal(c.level, EM_LEVEL_DEGRADED);
  assert_string_equal(c.reason, "alive");
  /* A heartbeat also feeds it: no silence counted from the heartbeat on. */
  assert_false(em_budget_on_heartbeat(r->b, "infer", T0 + 1400 * MS, &c));
  assert_false(em_budget_on_timer(r->b, T0 + 1900 * MS, &c));
  assert_true(em_budget_on_timer(r->b, T0 + 1901 * MS, &c));
  assert_true(em_budget_on_heartbeat(r->b, "infer", T0 + 2 * SEC, &c));
  rig_free(r);
}

/* A target started after the agent, or one that never reports, is not stalled: silence counts
 * from the stage's first span or heartbeat. */
static void alive_waits_for_the_first_report(void **state) {
  (void)state;
  em_budget_rule_t rule = {.id = "infer.alive",
                           .kind = EM_BUDGET_RULE_ALIVE,
                           .level = EM_LEVEL_DEGRADED,
                           .stage = "infer",
                           .u.alive = {.silence_ns = 500 * MS}};
  rig_t *r = rig_new(&rule, 1, 3, 3);
  em_budget_change_t c;
  assert_false(em_budget_on_timer(r->b, T0 + 501 * MS, &c));
  assert_false(em_budget_on_timer(r->b, T0 + 60 * SEC, &c));
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_NOMINAL);
  assert_int_equal(em_budget_reported(r->b, "infer"), 0);
  assert_int_equal(em_budget_reported(r->b, "other"), -ENOENT);
  /* A heartbeat is a report too: from it on, silence counts. */
  assert_false(em_budget_on_heartbeat(r->b, "infer", T0 + 61 * SEC, &c));
  assert_int_equal(em_budget_reported(r->b, "infer"), 1);
  assert_false(em_budget_on_timer(r->b, T0 + 61500 * MS, &c));
  assert_true(em_budget_on_timer(r->b, T0 + 61501 * MS, &c));
  assert_int_equal(c.level, EM_LEVEL_DEGRADED);
  assert_string_equal(c.reason, "stalled");
  assert_int_equal(c.value.as.u, 501 * MS);
  assert_null(c.statistic); /* ALIVE judges no latency: nothing for a verdict. */
  rig_free(r);
}

/* An escalation names the latency statistic its rule judges, and the engine's window. */
static void change_names_the_statistic_its_rule_judges(void **state) {
  (void)state;
  em_budget_rule_t rules[] = {
      {.id = "a",
       .kind = EM_BUDGET_RULE_DEADLINE,
       .level = EM_LEVEL_WARN,
       .stage = "a",
       .u.deadline = {.bound_ns = 10 * MS}},
  };
  rig_t *r = rig_new(rules, 1, 1, 1);
  em_budget_change_t c;
  assert_true(em_budget_on_span(r->b, "a", 1, 20 * MS, T0, &c));
  assert_string_equal(c.statistic, "max");
  assert_int_equal(c.window_ns, SEC);
  rig_free(r);
  /* A percentile names the nearest of p50, p90, p99 and p999; a miss ratio r its 1 - r. */
  static const struct {
    em_budget_rule_kind_t kind;
    double q;
    const char *want;
  } rows[] = {{EM_BUDGET_RULE_PERCENTILE, 0.99, "p99"}, {EM_BUDGET_RULE_PERCENTILE, 0.999, "p999"},
              {EM_BUDGET_RULE_PERCENTILE, 0.9, "p90"},  {EM_BUDGET_RULE_PERCENTILE, 0.5, "p50"},
              {EM_BUDGET_RULE_PERCENTILE, 0.95, "p90"}, {EM_BUDGET_RULE_PERCENTILE, 0.98, "p99"},
              {EM_BUDGET_RULE_MISS_RATIO, 0.01, "p99"}, {EM_BUDGET_RULE_MISS_RATIO, 0.1, "p90"}};
  for (size_t i = 0; i < sizeof(rows) / sizeof(*rows); i++) {
    em_budget_rule_t rule = {
        .id = "q", .kind = rows[i].kind, .level = EM_LEVEL_WARN, .stage = "infer"};
    if (rows[i].kind == EM_BUDGET_RULE_PERCENTILE) {
      rule.u.percentile.q = rows[i].q;
      rule.u.percentile.bound_ns = 10 * MS;
    } else {
      rule.u.miss_ratio.max_ratio = rows[i].q;
      rule.u.miss_ratio.bound_ns = 10 * MS;
    }
    r = rig_new(&rule, 1, 1, 1);
    assert_true(window_of(r, 20 * MS));
    assert_string_equal(r->change.statistic, rows[i].want);
    rig_free(r);
  }
}

static void rate_rule(void **state) {
  (void)state;
  em_budget_rule_t rule = {.id = "infer.rate",
                           .kind = EM_BUDGET_RULE_RATE,
                           .level = EM_LEVEL_WARN,
                           .stage = "infer",
                           .u.rate = {.min_fps = 25.0}};
  rig_t *r = rig_new(&rule, 1, 2, 1);
  spans(r, 25, GOOD);
  assert_false(window(r)); /* 25 fps: not fewer than 25. */
  spans(r, 24, GOOD);
  assert_false(window(r));
  assert_true(window(r)); /* An idle stage runs at 0 fps: the second bad window. */
  assert_int_equal(r->change.level, EM_LEVEL_WARN);
  assert_true(r->change.value.type == EM_VALUE_FLOAT && r->change.value.as.f == 0.0);
  assert_true(r->change.bound.as.f == 25.0);
  assert_true(window_of(r, GOOD)); /* 100 fps; leave_windows 1. */
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_NOMINAL);
  rig_free(r);
}

static void miss_ratio_rule(void **state) {
  (void)state;
  em_budget_rule_t rule = {.id = "infer.miss",
                           .kind = EM_BUDGET_RULE_MISS_RATIO,
                           .level = EM_LEVEL_DEGRADED,
                           .stage = "infer",
                           .u.miss_ratio = {.bound_ns = 33 * MS, .max_ratio = 0.05}};
  rig_t *r = rig_new(&rule, 1, 1, 1);
  spans(r, 95, GOOD);
  spans(r, 5, SLOW);
  assert_false(window(r)); /* 5% is not above 5%. */
  spans(r, 94, GOOD);
  spans(r, 6, SLOW);
  assert_true(window(r));
  assert_int_equal(r->change.level, EM_LEVEL_DEGRADED);
  assert_true(fabs(r->change.value.as.f - 0.06) < 1e-12);
  assert_false(window(r)); /* No spans: absent, neither clears nor fires. */
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_DEGRADED);
  assert_true(window_of(r, GOOD));
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_WARN);
  rig_free(r);
}

/* Fixed-seed LCG noise in [-1, 1). */
static double noise(uint64_t *seed) {
  *seed = *seed * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
  return (double)(*seed >> 11) / (double)(UINT64_C(1) << 52) - 1.0;
}

/* Feeds 2 h of 60 s windows of RSS = 200 MiB + growth + noise; returns the max level seen. */
static em_level_t run_rss_series(double mib_per_h, double noise_mib, double *slope) {
  em_budget_rule_t rule = {.id = "rss.slope",
                           .kind = EM_BUDGET_RULE_RSS_SLOPE,
                           .level = EM_LEVEL_WARN,
                           .u.rss_slope = {.max_mib_per_h = 10.0, .horizon_ns = 3600 * SEC}};
  rig_t *r = rig_new(&rule, 1, 3, 3);
  uint64_t seed = 42;
  em_level_t worst = EM_LEVEL_NOMINAL;
  int judged = 0;
  for (int i = 0; i < 120; i++) {
    double h = (double)i / 60.0;
    double mib = 200.0 + mib_per_h * h + noise_mib * noise(&seed);
    r->rss.type = EM_VALUE_UINT;
    r->rss.as.u = (uint64_t)(mib * (double)MIB);
    em_budget_stage_window_t st = {"infer", &r->hist};
    em_budget_window_t w = {
        .window_ns = 60 * SEC, .stages = &st, .n_stages = 1, .rss_bytes = r->rss};
    r->now += 60 * SEC;
    em_budget_on_window(r->b, &w, r->now, &r->change);
    if (em_budget_level(r->b) > worst) {
      worst = em_budget_level(r->b);
      *slope = r->change.value.as.f;
    }
    judged++;
  }
  assert_int_equal(judged, 120);
  rig_free(r);
  return worst;
}

static void rss_slope_fires_on_a_growing_rss_and_not_on_a_flat_noisy_one(void **state) {
  (void)state;
  double slope = 0.0;
  assert_int_equal(run_rss_series(40.0, 8.0, &slope), EM_LEVEL_WARN);
  assert_true(slope > 25.0 && slope < 55.0);
  assert_int_equal(run_rss_series(0.0, 8.0, &slope), EM_LEVEL_NOMINAL);
}

static void rss_cap(void **state) {
  (void)state;
  em_budget_rule_t rule = {.id = "rss.cap",
                           .kind = EM_BUDGET_RULE_RSS_CAP,
                           .level = EM_LEVEL_CRITICAL,
                           .u.rss_cap = {.cap_bytes = 512 * MIB}};
  rig_t *r = rig_new(&rule, 1, 2, 2);
  r->rss = (em_value_t){.type = EM_VALUE_UINT, .as.u = 512 * MIB};
  assert_false(window(r));
  r->rss.as.u = 513 * MIB;
  assert_false(window(r));
  assert_true(window(r));
  assert_int_equal(r->change.level, EM_LEVEL_CRITICAL);
  assert_int_equal(r->change.value.as.u, 513 * MIB);
  assert_int_equal(r->change.bound.as.u, 512 * MIB);
  assert_null(r->change.stage);
  rig_free(r);
}

static void level_is_the_highest_active_rule(void **state) {
  (void)state;
  em_budget_rule_t rules[] = {p99_warn, p99_degraded};
  rig_t *r = rig_new(rules, 2, 1, 1);
  assert_true(window_of(r, 30 * MS)); /* Only the 20 ms bound. */
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_WARN);
  assert_string_equal(r->change.rule, "infer.p99.warn");
  assert_true(window_of(r, SLOW)); /* Both: the higher wins. */
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_DEGRADED);
  assert_string_equal(r->change.rule, "infer.p99");
  assert_true(window_of(r, 30 * MS)); /* DEGRADED clears; WARN still active. */
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_WARN);
  assert_false(window_of(r, 30 * MS));
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_WARN);
  rig_free(r);
}

static void steps_down_one_level_at_a_time(void **state) {
  (void)state;
  rig_t *r = rig_new(&deadline_critical, 1, 1, 3);
  spans(r, 1, 150 * MS);
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_CRITICAL);
  window(r);
  /* 3 clean windows clear the rule: CRITICAL -> DEGRADED; then 3 more per step. */
  em_level_t expect[] = {EM_LEVEL_CRITICAL, EM_LEVEL_CRITICAL, EM_LEVEL_DEGRADED,
                         EM_LEVEL_DEGRADED, EM_LEVEL_DEGRADED, EM_LEVEL_WARN,
                         EM_LEVEL_WARN,     EM_LEVEL_WARN,     EM_LEVEL_NOMINAL};
  for (size_t i = 0; i < sizeof(expect) / sizeof(expect[0]); i++) {
    window_of(r, GOOD);
    assert_int_equal(em_budget_level(r->b), expect[i]);
  }
  assert_int_equal(r->changes, 4);
  assert_null(r->change.rule);
  assert_string_equal(r->change.reason, "clean windows");
  rig_free(r);
}

static void a_violating_window_restarts_the_step_down(void **state) {
  (void)state;
  em_budget_rule_t rules[] = {deadline_critical, p99_degraded};
  rig_t *r = rig_new(rules, 2, 3, 2);
  spans(r, 1, 150 * MS);
  window(r);
  window_of(r, GOOD);
  window_of(r, GOOD);
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_DEGRADED);
  window_of(r, GOOD);
  window_of(r, SLOW); /* p99 bad but not entered: the window is not clean. */
  window_of(r, GOOD);
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_DEGRADED);
  window_of(r, GOOD);
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_WARN);
  rig_free(r);
}

/* A gauge rule entering on a figure that says why it reads so takes that as its reason (the
 * throttle cause); without one the reason is the usual "violated". */
static void gauge_rule_takes_the_figures_why_as_its_reason(void **state) {
  (void)state;
  em_budget_rule_t rule = {.id = "process.throttle",
                           .kind = EM_BUDGET_RULE_GAUGE_MAX,
                           .level = EM_LEVEL_DEGRADED,
                           .u.gauge = {.figure = "throttled", .max = 0.5}};
  rig_t *r = rig_new(&rule, 1, 1, 1);
  r->figs[0] = (em_budget_figure_t){
      "throttled", {.type = EM_VALUE_FLOAT, .as.f = 1.0}, "thermal trip CPU-therm at 101.5 C"};
  r->n_figs = 1;
  assert_true(window(r));
  assert_string_equal(r->change.reason, "thermal trip CPU-therm at 101.5 C");
  r->figs[0].value.as.f = 0.0;
  assert_true(window(r));
  assert_string_equal(r->change.reason, "cleared");
  r->figs[0] = (em_budget_figure_t){"throttled", {.type = EM_VALUE_FLOAT, .as.f = 1.0}, NULL};
  assert_true(window(r));
  assert_string_equal(r->change.reason, "violated");
  rig_free(r);
}

static void absent_figures_neither_fire_nor_clear(void **state) {
  (void)state;
  em_budget_rule_t rules[] = {
      {.id = "psi.mem",
       .kind = EM_BUDGET_RULE_PSI,
       .level = EM_LEVEL_WARN,
       .u.gauge = {.figure = "psi.memory.some.avg10", .max = 20.0}},
      {.id = "rss.cap",
       .kind = EM_BUDGET_RULE_RSS_CAP,
       .level = EM_LEVEL_DEGRADED,
       .u.rss_cap = {.cap_bytes = 100 * MIB}},
  };
  rig_t *r = rig_new(rules, 2, 2, 2);
  r->figs[0] =
      (em_budget_figure_t){"psi.memory.some.avg10", {.type = EM_VALUE_FLOAT, .as.f = 30}, NULL};
  r->n_figs = 1;
  r->rss = (em_value_t){.type = EM_VALUE_UINT, .as.u = 200 * MIB};
  window(r);
  /* Both absent between two violating windows: the streak survives, then both enter. */
  r->figs[0].value.type = EM_VALUE_ABSENT;
  r->rss.type = EM_VALUE_ABSENT;
  assert_false(window(r));
  r->n_figs = 0; /* Not listed at all: absent too. */
  assert_false(window(r));
  r->n_figs = 1;
  r->figs[0].value.type = EM_VALUE_FLOAT;
  r->rss.type = EM_VALUE_UINT;
  assert_true(window(r));
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_DEGRADED);
  /* Absent windows never clear: a clean window, two absent ones, a clean one. */
  r->figs[0].value.as.f = 1.0;
  r->rss.as.u = 10 * MIB;
  window(r);
  r->n_figs = 0;
  r->rss.type = EM_VALUE_ABSENT;
  for (int i = 0; i < 5; i++) {
    assert_false(window(r));
  }
  r->n_figs = 1;
  r->rss.type = EM_VALUE_UINT;
  assert_true(window(r));
  assert_string_equal(r->change.reason, "cleared");
  rig_free(r);
}

static void change_carries_rule_value_bound_and_time(void **state) {
  (void)state;
  em_budget_rule_t rule = {.id = "board.temp",
                           .kind = EM_BUDGET_RULE_GAUGE_MAX,
                           .level = EM_LEVEL_WARN,
                           .u.gauge = {.figure = "board.temp_c", .max = 85.0}};
  rig_t *r = rig_new(&p99_degraded, 1, 1, 1);
  window_of(r, SLOW);
  assert_string_equal(r->change.rule, "infer.p99");
  assert_string_equal(r->change.stage, "infer");
  assert_int_equal(r->change.value.type, EM_VALUE_UINT);
  assert_in_range(r->change.value.as.u, SLOW - SLOW / 100, SLOW + SLOW / 100);
  assert_int_equal(r->change.bound.type, EM_VALUE_UINT);
  assert_int_equal(r->change.bound.as.u, 40 * MS);
  assert_int_equal(r->change.mono_ns, T0 + SEC);
  assert_string_equal(r->change.reason, "violated");
  rig_free(r);

  r = rig_new(&rule, 1, 1, 1);
  r->figs[0] = (em_budget_figure_t){"board.temp_c", {.type = EM_VALUE_INT, .as.i = 90}, NULL};
  r->n_figs = 1;
  assert_true(window(r));
  assert_string_equal(r->change.rule, "board.temp");
  assert_null(r->change.stage);
  assert_true(r->change.value.as.f == 90.0 && r->change.bound.as.f == 85.0);
  rig_free(r);
}

static void anomaly_score_rises_on_an_outlier_window(void **state) {
  (void)state;
  rig_t *r = rig_new(&p99_degraded, 1, 100, 1);
  double z = 1.0;
  assert_int_equal(em_budget_anomaly(r->b, "infer", &z), 0);
  assert_true(z == 0.0);
  for (int i = 0; i < 30; i++) {
    spans(r, 100, GOOD + (uint64_t)(i % 3) * MS);
    window(r);
  }
  assert_int_equal(em_budget_anomaly(r->b, "infer", &z), 0);
  assert_true(fabs(z) < 3.0);
  window_of(r, SLOW);
  assert_int_equal(em_budget_anomaly(r->b, "infer", &z), 0);
  assert_true(z > 10.0);
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_NOMINAL); /* Informational. */
  assert_int_equal(em_budget_anomaly(r->b, "nope", &z), -ENOENT);
  rig_free(r);
}

/* ---- flow supervision ------------------------------------------------------------------ */

static const em_budget_rule_t flow_degraded = {
    .id = "pipe.flow",
    .kind = EM_BUDGET_RULE_FLOW,
    .level = EM_LEVEL_DEGRADED,
    .u.flow = {.stages = {"pre", "infer", "post"}, .n_stages = 3, .deadline_ns = 100 * MS},
};

/* One span of `stage` for `frame`, lasting dur, seen at now; returns whether the level changed. */
static bool fspan(rig_t *r, const char *stage, uint64_t frame, uint64_t dur) {
  bool changed = em_budget_on_span(r->b, stage, frame, dur, r->now, &r->change);
  r->changes += changed;
  return changed;
}

/* A frame through pre, infer, post, 5 ms apart, 5 ms spans: 15 ms end to end. */
static void good_frame(rig_t *r, uint64_t frame) {
  assert_false(fspan(r, "pre", frame, 5 * MS));
  r->now += 5 * MS;
  assert_false(fspan(r, "infer", frame, 5 * MS));
  r->now += 5 * MS;
  assert_false(fspan(r, "post", frame, 5 * MS));
  r->now += 5 * MS;
}

static void flow_in_order_completion_changes_nothing(void **state) {
  (void)state;
  rig_t *r = rig_new(&flow_degraded, 1, 1, 1);
  for (uint64_t f = 1; f <= 20; f++) {
    good_frame(r, f);
  }
  /* Interleaved frames: each keeps its own position. */
  assert_false(fspan(r, "pre", 30, MS));
  assert_false(fspan(r, "pre", 31, MS));
  assert_false(fspan(r, "infer", 30, MS));
  assert_false(fspan(r, "infer", 31, MS));
  assert_false(fspan(r, "post", 31, MS));
  assert_false(fspan(r, "post", 30, MS));
  assert_false(window(r));
  assert_false(em_budget_on_timer(r->b, r->now + 10 * SEC, &r->change));
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_NOMINAL);
  assert_int_equal(r->changes, 0);
  uint64_t evicted = 99;
  assert_int_equal(em_budget_flow_evicted(r->b, "pipe.flow", &evicted), 0);
  assert_int_equal(evicted, 0);
  rig_free(r);
}

static void flow_skipped_stage_escalates_on_that_span(void **state) {
  (void)state;
  rig_t *r = rig_new(&flow_degraded, 1, 3, 5);
  good_frame(r, 1);
  assert_false(fspan(r, "pre", 2, 5 * MS));
  r->now += 20 * MS;
  assert_true(fspan(r, "post", 2, 5 * MS)); /* infer skipped. */
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_DEGRADED);
  assert_int_equal(r->change.prev_level, EM_LEVEL_NOMINAL);
  assert_string_equal(r->change.rule, "pipe.flow");
  assert_string_equal(r->change.stage, "pre");
  assert_string_equal(r->change.reason, "flow order");
  assert_int_equal(r->change.value.type, EM_VALUE_UINT);
  assert_int_equal(r->change.value.as.u, 25 * MS);
  assert_int_equal(r->change.bound.as.u, 100 * MS);
  assert_int_equal(r->change.mono_ns, r->now);
  /* The frame was judged: its late infer span is ignored. */
  assert_false(fspan(r, "infer", 2, 5 * MS));
  rig_free(r);
}

static void flow_reordered_stage_escalates(void **state) {
  (void)state;
  const em_budget_rule_t four = {
      .id = "pipe.flow4",
      .kind = EM_BUDGET_RULE_FLOW,
      .level = EM_LEVEL_WARN,
      .u.flow = {.stages = {"a", "b", "c", "d"}, .n_stages = 4, .deadline_ns = 100 * MS}};
  rig_t *r = rig_new(&four, 1, 3, 5);
  /* b and c swapped: c comes where b is due. */
  assert_false(fspan(r, "a", 1, MS));
  assert_true(fspan(r, "c", 1, MS));
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_WARN);
  assert_string_equal(r->change.reason, "flow order");
  rig_free(r);

  /* A stage that goes back: a, b, a. */
  r = rig_new(&four, 1, 3, 5);
  assert_false(fspan(r, "a", 1, MS));
  assert_false(fspan(r, "b", 1, MS));
  assert_true(fspan(r, "a", 1, MS));
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_WARN);
  /* A stage outside the flow is not a violation. */
  assert_false(fspan(r, "a", 2, MS));
  assert_false(fspan(r, "other", 2, MS));
  assert_false(fspan(r, "b", 2, MS));
  rig_free(r);
}

static void flow_frame_that_never_completes_escalates_on_the_timer(void **state) {
  (void)state;
  rig_t *r = rig_new(&flow_degraded, 1, 3, 5);
  uint64_t start = r->now - 10 * MS; /* The first span lasted 10 ms. */
  assert_false(fspan(r, "pre", 7, 10 * MS));
  r->now += 20 * MS;
  assert_false(fspan(r, "infer", 7, 10 * MS));
  assert_false(em_budget_on_timer(r->b, start + 100 * MS, &r->change)); /* At the deadline. */
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_NOMINAL);
  assert_true(em_budget_on_timer(r->b, start + 100 * MS + 1, &r->change));
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_DEGRADED);
  assert_string_equal(r->change.reason, "flow deadline");
  assert_int_equal(r->change.value.as.u, 100 * MS + 1);
  assert_int_equal(r->change.mono_ns, start + 100 * MS + 1);
  /* Judged once: the frame is gone. */
  assert_false(em_budget_on_timer(r->b, start + SEC, &r->change));
  r->now = start + 200 * MS;
  assert_false(fspan(r, "post", 7, MS));
  rig_free(r);
}

static void flow_completion_after_the_deadline_escalates(void **state) {
  (void)state;
  rig_t *r = rig_new(&flow_degraded, 1, 3, 5);
  assert_false(fspan(r, "pre", 1, 10 * MS));
  r->now += 50 * MS;
  assert_false(fspan(r, "infer", 1, 10 * MS));
  r->now += 45 * MS;
  assert_true(fspan(r, "post", 1, 10 * MS)); /* 105 ms end to end. */
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_DEGRADED);
  assert_string_equal(r->change.reason, "flow deadline");
  assert_int_equal(r->change.value.as.u, 105 * MS);
  rig_free(r);
}

static void flow_clears_after_leave_clean_windows(void **state) {
  (void)state;
  rig_t *r = rig_new(&flow_degraded, 1, 3, 2);
  assert_false(fspan(r, "pre", 1, MS));
  assert_true(fspan(r, "post", 1, MS));
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_DEGRADED);
  assert_false(window(r)); /* The violating window. */
  good_frame(r, 2);
  assert_false(window(r)); /* Clean 1 of 2. */
  assert_false(window(r)); /* No frames: absent, counts nothing. */
  good_frame(r, 3);
  assert_true(window(r)); /* Clean 2 of 2: the rule leaves, one level down. */
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_WARN);
  assert_string_equal(r->change.reason, "cleared");
  assert_string_equal(r->change.rule, "pipe.flow");
  good_frame(r, 4);
  assert_false(window(r));
  good_frame(r, 5);
  assert_true(window(r));
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_NOMINAL);
  assert_string_equal(r->change.reason, "clean windows");
  /* A violating window while recovering restarts the count. */
  assert_false(fspan(r, "pre", 6, MS));
  assert_true(fspan(r, "post", 6, MS)); /* infer skipped. */
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_DEGRADED);
  assert_false(window(r));
  good_frame(r, 8);
  assert_false(window(r)); /* Clean 1. */
  assert_false(fspan(r, "pre", 9, MS));
  assert_false(fspan(r, "infer", 9, MS));
  assert_false(fspan(r, "pre", 9, MS)); /* Already active: no change, but the window violates. */
  assert_false(window(r));
  good_frame(r, 10);
  assert_false(window(r)); /* Clean 1 again, not 2. */
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_DEGRADED);
  rig_free(r);
}

static void flow_ignores_frame_zero(void **state) {
  (void)state;
  rig_t *r = rig_new(&flow_degraded, 1, 1, 1);
  assert_false(fspan(r, "pre", 0, MS));
  assert_false(fspan(r, "post", 0, MS));
  assert_false(fspan(r, "pre", 0, MS));
  assert_false(em_budget_on_timer(r->b, r->now + 10 * SEC, &r->change));
  assert_false(window(r)); /* Nothing judged: absent. */
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_NOMINAL);
  /* A later stage of a frame never started is not tracked either. */
  assert_false(fspan(r, "infer", 5, MS));
  assert_false(fspan(r, "post", 5, MS));
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_NOMINAL);
  rig_free(r);
}

static void flow_table_overflow_evicts_the_oldest_and_counts(void **state) {
  (void)state;
  rig_t *r = rig_new(&flow_degraded, 1, 3, 5);
  uint64_t start = r->now;
  for (uint64_t f = 1; f <= EM_BUDGET_FLOW_FRAMES + 2; f++) {
    assert_false(fspan(r, "pre", f, 0));
    r->now += 1000; /* 1 us apart. */
  }
  uint64_t evicted = 0;
  assert_int_equal(em_budget_flow_evicted(r->b, "pipe.flow", &evicted), 0);
  assert_int_equal(evicted, 2);
  assert_int_equal(em_budget_flow_evicted(r->b, "nope", &evicted), -ENOENT);
  assert_int_equal(em_budget_flow_evicted(r->b, NULL, &evicted), -EINVAL);
  /* Frames 1 and 2 were evicted: their next stage is ignored, not out of order. */
  assert_false(fspan(r, "post", 1, 0));
  assert_false(fspan(r, "post", 2, 0));
  /* Frame 3 is still in flight and completes in order. */
  assert_false(fspan(r, "infer", 3, 0));
  assert_false(fspan(r, "post", 3, 0));
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_NOMINAL);
  /* The rest time out together: one change. */
  assert_true(em_budget_on_timer(r->b, start + SEC, &r->change));
  assert_int_equal(em_budget_level(r->b), EM_LEVEL_DEGRADED);
  rig_free(r);
}

static void new_refuses_bad_flow_rules(void **state) {
  (void)state;
  em_budget_engine_t *b = NULL;
  em_budget_rule_t bad = flow_degraded;
  em_budget_opts_t o = {.rules = &bad, .n_rules = 1, .enter_windows = 1, .leave_windows = 1};
  assert_int_equal(em_budget_new(&b, &o, 0), 0);
  em_budget_free(b);
  bad.u.flow.n_stages = 1;
  assert_int_equal(em_budget_new(&b, &o, 0), -EINVAL);
  bad = flow_degraded;
  bad.u.flow.n_stages = EM_BUDGET_FLOW_MAX_STAGES + 1;
  assert_int_equal(em_budget_new(&b, &o, 0), -EINVAL);
  bad = flow_degraded;
  bad.u.flow.deadline_ns = 0;
  assert_int_equal(em_budget_new(&b, &o, 0), -EINVAL);
  bad = flow_degraded;
  snprintf(bad.u.flow.stages[2], sizeof(bad.u.flow.stages[2]), "pre"); /* Twice. */
  assert_int_equal(em_budget_new(&b, &o, 0), -EINVAL);
  bad = flow_degraded;
  snprintf(bad.u.flow.stages[1], sizeof(bad.u.flow.stages[1]), "in fer");
  assert_int_equal(em_budget_new(&b, &o, 0), -EINVAL);
  /* A name that does not end within its array. */
  memset(bad.u.flow.stages[1], 'a', sizeof(bad.u.flow.stages[1]));
  assert_int_equal(em_budget_new(&b, &o, 0), -EINVAL);
  bad.u.flow.stages[1][0] = '\0';
  assert_int_equal(em_budget_new(&b, &o, 0), -EINVAL);
}

static void new_refuses_bad_rules(void **state) {
  (void)state;
  em_budget_engine_t *b = NULL;
  em_budget_rule_t bad[] = {p99_degraded, p99_degraded};
  em_budget_opts_t o = {.rules = bad, .n_rules = 2, .enter_windows = 1, .leave_windows = 1};
  assert_int_equal(em_budget_new(&b, &o, 0), -EINVAL); /* Duplicate id. */
  o.n_rules = 1;
  bad[0].level = EM_LEVEL_NOMINAL;
  assert_int_equal(em_budget_new(&b, &o, 0), -EINVAL);
  bad[0] = p99_degraded;
  bad[0].u.percentile.q = 0.0;
  assert_int_equal(em_budget_new(&b, &o, 0), -EINVAL);
  bad[0] = p99_degraded;
  bad[0].stage[0] = '\0'; /* A stage rule without its stage. */
  assert_int_equal(em_budget_new(&b, &o, 0), -EINVAL);
  snprintf(bad[0].stage, sizeof(bad[0].stage), "in fer");
  assert_int_equal(em_budget_new(&b, &o, 0), -EINVAL);
  /* Strings that do not end within their arrays. */
  memset(bad[0].stage, 'a', sizeof(bad[0].stage));
  assert_int_equal(em_budget_new(&b, &o, 0), -EINVAL);
  bad[0] = p99_degraded;
  memset(bad[0].id, 'a', sizeof(bad[0].id));
  assert_int_equal(em_budget_new(&b, &o, 0), -EINVAL);
  bad[0].id[0] = '\0';
  assert_int_equal(em_budget_new(&b, &o, 0), -EINVAL);
  bad[0] = p99_degraded;
  o.enter_windows = 0;
  assert_int_equal(em_budget_new(&b, &o, 0), -EINVAL);
  o.enter_windows = 1;
  assert_int_equal(em_budget_new(&b, &o, 0), 0);
  em_budget_free(b);
  em_budget_free(NULL);
}

static void birth_budgets_encode(void **state) {
  (void)state;
  em_budget_rule_t rules[] = {
      p99_degraded,
      deadline_critical,
      {.id = "infer.miss",
       .kind = EM_BUDGET_RULE_MISS_RATIO,
       .level = EM_LEVEL_WARN,
       .stage = "infer",
       .u.miss_ratio = {.bound_ns = 33 * MS, .max_ratio = 0.05}},
      {.id = "infer.alive",
       .kind = EM_BUDGET_RULE_ALIVE,
       .level = EM_LEVEL_CRITICAL,
       .stage = "infer",
       .u.alive = {.silence_ns = 500 * MS}},
      {.id = "infer.rate",
       .kind = EM_BUDGET_RULE_RATE,
       .level = EM_LEVEL_WARN,
       .stage = "infer",
       .u.rate = {.min_fps = 25}},
      {.id = "rss.cap",
       .kind = EM_BUDGET_RULE_RSS_CAP,
       .level = EM_LEVEL_CRITICAL,
       .u.rss_cap = {.cap_bytes = 512 * MIB}},
      {.id = "rss.slope",
       .kind = EM_BUDGET_RULE_RSS_SLOPE,
       .level = EM_LEVEL_WARN,
       .u.rss_slope = {.max_mib_per_h = 10, .horizon_ns = 3600 * SEC}},
      {.id = "psi.mem",
       .kind = EM_BUDGET_RULE_PSI,
       .level = EM_LEVEL_WARN,
       .u.gauge = {.figure = "psi.memory.some.avg10", .max = 20}},
      {.id = "board.temp",
       .kind = EM_BUDGET_RULE_GAUGE_MAX,
       .level = EM_LEVEL_DEGRADED,
       .u.gauge = {.figure = "board.temp_c", .max = 85}},
      flow_degraded,
  };
  size_t n = sizeof(rules) / sizeof(rules[0]);
  em_budget_engine_t *b = NULL;
  em_budget_opts_t o = {
      .rules = rules, .n_rules = n, .enter_windows = 3, .leave_windows = 5, .window_ns = SEC};
  assert_int_equal(em_budget_new(&b, &o, T0), 0);
  em_budget_t list[16];
  assert_int_equal(em_budget_describe(b, list, n - 1), -ENOSPC);
  assert_int_equal(em_budget_describe(b, list, 16), (int)n);
  assert_string_equal(list[0].rule, "percentile");
  assert_int_equal(list[0].window_ns, SEC);
  assert_string_equal(list[6].rule, "rss_slope");
  assert_int_equal(list[6].window_ns, 3600 * SEC);
  assert_null(list[5].stage);
  assert_string_equal(list[9].rule, "flow");
  assert_string_equal(list[9].stage, "pre");
  assert_int_equal(list[9].bound.type, EM_VALUE_UINT);
  assert_int_equal(list[9].bound.as.u, 100 * MS);
  assert_int_equal(list[9].window_ns, 0);

  em_msg_t msg = {.kind = EM_MSG_BIRTH,
                  .u.birth = {.head = {.time_ns = 1, .session = 7},
                              .device = "dev-1",
                              .agent_version = "0.1",
                              .board = "test",
                              .period_ns = SEC,
                              .budgets = list,
                              .n_budgets = n}};
  static uint8_t buf[EM_PROTO_MAX_MESSAGE_BYTES];
  static uint8_t scratch[EM_PROTO_SCRATCH_MAX];
  size_t len = 0;
  assert_int_equal(em_proto_encode(&msg, buf, sizeof(buf), &len), 0);
  em_msg_t back;
  assert_int_equal(em_proto_decode(buf, len, &back, scratch, sizeof(scratch), NULL), 0);
  assert_int_equal(back.u.birth.n_budgets, n);
  for (size_t i = 0; i < n; i++) {
    assert_string_equal(back.u.birth.budgets[i].id, rules[i].id);
    assert_string_equal(back.u.birth.budgets[i].rule, em_budget_rule_name(rules[i].kind));
    assert_int_equal(back.u.birth.budgets[i].level, rules[i].level);
  }
  em_budget_free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(nominal_to_degraded_after_n_bad_windows_and_not_before),
      cmocka_unit_test(back_to_nominal_after_m_clean_windows),
      cmocka_unit_test(no_flapping_on_alternating_windows),
      cmocka_unit_test(adopt_keeps_level_and_rule_state_across_a_reload),
      cmocka_unit_test(a_reload_raising_an_active_rules_level_names_that_rule),
      cmocka_unit_test(hard_deadline_miss_escalates_on_that_span),
      cmocka_unit_test(alive_fires_on_silence_and_clears_on_next_span),
      cmocka_unit_test(alive_waits_for_the_first_report),
      cmocka_unit_test(change_names_the_statistic_its_rule_judges),
      cmocka_unit_test(rate_rule),
      cmocka_unit_test(miss_ratio_rule),
      cmocka_unit_test(rss_slope_fires_on_a_growing_rss_and_not_on_a_flat_noisy_one),
      cmocka_unit_test(rss_cap),
      cmocka_unit_test(level_is_the_highest_active_rule),
      cmocka_unit_test(steps_down_one_level_at_a_time),
      cmocka_unit_test(a_violating_window_restarts_the_step_down),
      cmocka_unit_test(absent_figures_neither_fire_nor_clear),
      cmocka_unit_test(gauge_rule_takes_the_figures_why_as_its_reason),
      cmocka_unit_test(change_carries_rule_value_bound_and_time),
      cmocka_unit_test(anomaly_score_rises_on_an_outlier_window),
      cmocka_unit_test(flow_in_order_completion_changes_nothing),
      cmocka_unit_test(flow_skipped_stage_escalates_on_that_span),
      cmocka_unit_test(flow_reordered_stage_escalates),
      cmocka_unit_test(flow_frame_that_never_completes_escalates_on_the_timer),
      cmocka_unit_test(flow_completion_after_the_deadline_escalates),
      cmocka_unit_test(flow_clears_after_leave_clean_windows),
      cmocka_unit_test(flow_ignores_frame_zero),
      cmocka_unit_test(flow_table_overflow_evicts_the_oldest_and_counts),
      cmocka_unit_test(new_refuses_bad_flow_rules),
      cmocka_unit_test(new_refuses_bad_rules),
      cmocka_unit_test(birth_budgets_encode),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
