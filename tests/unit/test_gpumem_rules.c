/*
 * test_gpumem_rules.c - the rules on the target's own GPU memory: [budget.process]
 * gpu_mem_cap and gpu_mem_slope as config.c reads them (values, levels, the horizon, the
 * errors), and as the budget engine judges them on the figure gpu.mem.process (a cap crossed
 * by a growing figure, a slope fitted to one, an absent figure neither clean nor violating,
 * the RSS beside it not what they judge), and the figure's name agreeing with the dictionary.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "budget.h"
#include "config.h"
#include "figures.h"

#define MIB (1024ULL * 1024ULL)
#define SEC 1000000000ULL

typedef struct {
  int n;
  char first[256];
} errors_t;

static void on_error(void *ctx, const char *file, int line, const char *msg) {
  errors_t *e = ctx;
  (void)file;
  if (e->n++ == 0) {
    snprintf(e->first, sizeof(e->first), "%d: %s", line, msg);
  }
}

/* Loads INI text through a temp file; returns em_config_load's result, errors in *e. */
static int load(const char *text, em_config_t *cfg, errors_t *e) {
  char path[] = "/tmp/em-gpumem-rules-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  assert_int_equal(close(fd), 0);
  memset(e, 0, sizeof(*e));
  int rc = em_config_load(path, cfg, on_error, e, NULL);
  unlink(path);
  return rc;
}

static const em_budget_rule_t *rule(const em_config_t *cfg, const char *id) {
  for (size_t i = 0; i < cfg->n_rules; i++) {
    if (strcmp(cfg->rules[i].id, id) == 0) {
      return &cfg->rules[i];
    }
  }
  fail_msg("no rule %s", id);
  return NULL;
}

static void config_reads_the_gpu_memory_rules(void **state) {
  (void)state;
  em_config_t *cfg = calloc(1, sizeof(*cfg));
  assert_non_null(cfg);
  errors_t e;
  assert_int_equal(load("[budget.process]\nlevel = WARN\ngpu_mem_cap = 3GiB\n"
                        "gpu_mem_cap_level = CRITICAL\ngpu_mem_slope = 25.5\n"
                        "gpu_mem_slope_horizon = 10m\nrss_slope = 50\n[target]\npid = 1\n",
                        cfg, &e),
                   0);
  assert_int_equal(e.n, 0);
  const em_budget_rule_t *cap = rule(cfg, "process.gpu_mem_cap");
  assert_int_equal(cap->kind, EM_BUDGET_RULE_GPU_MEM_CAP);
  assert_int_equal(cap->level, EM_LEVEL_CRITICAL);
  assert_int_equal(cap->u.rss_cap.cap_bytes, 3 * 1024 * MIB);
  const em_budget_rule_t *slope = rule(cfg, "process.gpu_mem_slope");
  assert_int_equal(slope->kind, EM_BUDGET_RULE_GPU_MEM_SLOPE);
  assert_int_equal(slope->level, EM_LEVEL_WARN);
  assert_true(slope->u.rss_slope.max_mib_per_h == 25.5);
  assert_int_equal(slope->u.rss_slope.horizon_ns, 600 * SEC);
  /* rss_slope keeps its own default horizon: the GPU one is not shared. */
  assert_int_equal(rule(cfg, "process.rss_slope")->u.rss_slope.horizon_ns, 1800 * SEC);
  /* Without a horizon: 30 minutes. */
  assert_int_equal(
      load("[budget.process]\nlevel = WARN\ngpu_mem_slope = 5\n[target]\npid = 1\n", cfg, &e), 0);
  assert_int_equal(rule(cfg, "process.gpu_mem_slope")->u.rss_slope.horizon_ns, 1800 * SEC);
  free(cfg);
}

static void config_refuses_bad_gpu_memory_rules(void **state) {
  (void)state;
  em_config_t *cfg = calloc(1, sizeof(*cfg));
  assert_non_null(cfg);
  static const struct {
    const char *text;
    const char *first; /* The first error's start. */
  } cases[] = {
      {"[budget.process]\nlevel = WARN\ngpu_mem_cap = 1KiB\n", "3: gpu_mem_cap '1KiB'"},
      {"[budget.process]\nlevel = WARN\ngpu_mem_slope = 0\n", "3: gpu_mem_slope '0' must be"},
      {"[budget.process]\nlevel = WARN\ngpu_mem_cap = 1GiB\ngpu_mem_slope_horizon = 30m\n",
       "4: gpu_mem_slope_horizon is used only with gpu_mem_slope"},
      {"[budget.process]\ngpu_mem_cap = 1GiB\n", "2: gpu_mem_cap names no level"},
      {"[budget.process]\nlevel = WARN\ngpu_mem_slope = 5\ngpu_mem_slope_horizon = 5s\n",
       "4: gpu_mem_slope_horizon '5s' is out of range"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char text[512];
    snprintf(text, sizeof(text), "%s[target]\npid = 1\n", cases[i].text);
    errors_t e;
    int rc = load(text, cfg, &e);
    if (rc != -EINVAL || strncmp(e.first, cases[i].first, strlen(cases[i].first)) != 0) {
      fail_msg("case %zu: rc %d, first error '%s'", i, rc, e.first);
    }
  }
  free(cfg);
}

/* An engine of one rule, entering at the first violating window. */
static em_budget_engine_t *engine_of(const em_budget_rule_t *r) {
  em_budget_opts_t o = {.rules = r, .n_rules = 1, .enter_windows = 1, .leave_windows = 1};
  em_budget_engine_t *b = NULL;
  assert_int_equal(em_budget_new(&b, &o, 0), 0);
  return b;
}

/* A window whose gpu.mem.process is `gpu` (absent when `have` is false) and whose RSS is a
 * flat 100 MiB. */
static bool window(em_budget_engine_t *b, bool have, uint64_t gpu, uint64_t now,
                   em_budget_change_t *c) {
  em_budget_figure_t f = {.name = EM_BUDGET_FIGURE_GPU_MEM,
                          .value = have ? (em_value_t){.type = EM_VALUE_UINT, .as.u = gpu}
                                        : (em_value_t){.type = EM_VALUE_ABSENT}};
  em_budget_window_t w = {.window_ns = SEC,
                          .rss_bytes = {.type = EM_VALUE_UINT, .as.u = 100 * MIB},
                          .figures = &f,
                          .n_figures = 1};
  return em_budget_on_window(b, &w, now, c);
}

static void gpu_mem_cap_breaches_on_a_growing_figure(void **state) {
  (void)state;
  em_budget_rule_t r = {.id = "process.gpu_mem_cap",
                        .kind = EM_BUDGET_RULE_GPU_MEM_CAP,
                        .level = EM_LEVEL_DEGRADED,
                        .u.rss_cap = {.cap_bytes = 1024 * MIB}};
  em_budget_engine_t *b = engine_of(&r);
  em_budget_change_t c;
  uint64_t now = SEC;
  /* 512 MiB growing by 128 MiB a window: within the cap up to 1 GiB, over it after. */
  uint64_t gpu = 512 * MIB;
  for (; gpu <= 1024 * MIB; gpu += 128 * MIB, now += SEC) {
    assert_false(window(b, true, gpu, now, &c));
  }
  assert_false(window(b, false, 0, now, &c)); /* Absent: neither clean nor violating. */
  now += SEC;
  assert_true(window(b, true, gpu, now, &c));
  assert_int_equal(c.level, EM_LEVEL_DEGRADED);
  assert_string_equal(c.rule, "process.gpu_mem_cap");
  assert_int_equal(c.value.type, EM_VALUE_UINT);
  assert_int_equal(c.value.as.u, gpu);
  assert_int_equal(c.bound.as.u, 1024 * MIB);
  now += SEC;
  assert_false(window(b, false, 0, now, &c)); /* Still absent: the level holds. */
  assert_int_equal(em_budget_level(b), EM_LEVEL_DEGRADED);
  now += SEC;
  assert_true(window(b, true, 256 * MIB, now, &c)); /* Freed: the rule leaves, one step down. */
  assert_int_equal(c.prev_level, EM_LEVEL_DEGRADED);
  assert_int_equal(c.level, EM_LEVEL_WARN);
  assert_string_equal(c.rule, "process.gpu_mem_cap");
  em_budget_t d;
  assert_int_equal(em_budget_describe(b, &d, 1), 1);
  assert_string_equal(d.rule, "gpu_mem_cap");
  assert_int_equal(d.bound.type, EM_VALUE_UINT);
  assert_null(d.stage);
  em_budget_free(b);
}

static void gpu_mem_slope_fires_on_growth_and_not_on_the_flat_rss(void **state) {
  (void)state;
  em_budget_rule_t r = {.id = "process.gpu_mem_slope",
                        .kind = EM_BUDGET_RULE_GPU_MEM_SLOPE,
                        .level = EM_LEVEL_WARN,
                        .u.rss_slope = {.max_mib_per_h = 10.0, .horizon_ns = 600 * SEC}};
  /* Flat GPU memory for 10 minutes (a sample every 10 s): never violating. */
  em_budget_engine_t *b = engine_of(&r);
  em_budget_change_t c;
  for (uint64_t t = 10; t <= 600; t += 10) {
    assert_false(window(b, true, 2048 * MIB, t * SEC, &c));
  }
  assert_int_equal(em_budget_level(b), EM_LEVEL_NOMINAL);
  em_budget_free(b);
  /* Growing 1 MiB every 10 s (360 MiB/h) while the RSS stays flat: the slope enters once the
   * samples span half the horizon. */
  b = engine_of(&r);
  bool entered = false;
  uint64_t at = 0;
  for (uint64_t t = 10; t <= 600 && !entered; t += 10) {
    entered = window(b, true, 2048 * MIB + (t / 10) * MIB, t * SEC, &c);
    at = t;
  }
  assert_true(entered);
  assert_true(at >= 300);
  assert_string_equal(c.rule, "process.gpu_mem_slope");
  assert_int_equal(c.value.type, EM_VALUE_FLOAT);
  assert_true(c.value.as.f > 300.0 && c.value.as.f < 420.0);
  em_budget_t d;
  assert_int_equal(em_budget_describe(b, &d, 1), 1);
  assert_string_equal(d.rule, "gpu_mem_slope");
  assert_int_equal(d.window_ns, 600 * SEC);
  em_budget_free(b);
}

static void the_rules_figure_is_the_dictionary_s(void **state) {
  (void)state;
  int f = em_figures_find(EM_BUDGET_FIGURE_GPU_MEM);
  assert_int_equal(f, EM_FIG_GPU_MEM_PROCESS);
  const em_figure_info_t *info = em_figures_info(EM_FIG_GPU_MEM_PROCESS);
  assert_string_equal(info->unit, "By");
  assert_int_equal(info->group, EM_FIGURE_TARGET);
  assert_string_equal(em_budget_rule_name(EM_BUDGET_RULE_GPU_MEM_CAP), "gpu_mem_cap");
  assert_string_equal(em_budget_rule_name(EM_BUDGET_RULE_GPU_MEM_SLOPE), "gpu_mem_slope");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(config_reads_the_gpu_memory_rules),
      cmocka_unit_test(config_refuses_bad_gpu_memory_rules),
      cmocka_unit_test(gpu_mem_cap_breaches_on_a_growing_figure),
      cmocka_unit_test(gpu_mem_slope_fires_on_growth_and_not_on_the_flat_rss),
      cmocka_unit_test(the_rules_figure_is_the_dictionary_s),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
