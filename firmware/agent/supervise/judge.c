/*
 * judge.c - see judge.h.
 */
#define _POSIX_C_SOURCE 200809L

#include "judge.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

struct em_judge {
  em_budget_engine_t *engine;
  uint64_t window_ns;
  uint32_t max_stages;
  em_hist_t *windows;                        /* max_stages: spans since the budget window began. */
  em_budget_stage_window_t *stages;          /* max_stages: the view the engine judges. */
  em_budget_t budgets[EM_JUDGE_MAX_BUDGETS]; /* The birth's list. */
  size_t n_budgets;
  uint64_t start_ns; /* The budget window began. */
};

static int make_engine(const em_judge_opts_t *o, uint64_t now, em_budget_engine_t **out) {
  em_budget_opts_t bo = {.rules = o->rules,
                         .n_rules = o->n_rules,
                         .enter_windows = o->enter_windows,
                         .leave_windows = o->leave_windows,
                         .window_ns = o->window_ns};
  int rc = em_budget_new(out, &bo, now);
  if (rc) {
    EM_ERROR("budgets: the rules were refused: %s", strerror(-rc));
  }
  return rc;
}

static void describe(em_judge_t *j) {
  int n = em_budget_describe(j->engine, j->budgets, EM_JUDGE_MAX_BUDGETS);
  j->n_budgets = n > 0 ? (size_t)n : 0;
}

int em_judge_new(em_judge_t **out, const em_judge_opts_t *opts, uint64_t now_ns) {
  if (!out || !opts || opts->max_stages == 0) {
    return -EINVAL;
  }
  em_judge_t *j = calloc(1, sizeof(*j));
  if (!j) {
    return -ENOMEM;
  }
  j->window_ns = opts->window_ns;
  j->max_stages = opts->max_stages;
  j->windows = calloc(opts->max_stages, sizeof(*j->windows));
  j->stages = calloc(opts->max_stages, sizeof(*j->stages));
  int rc = !j->windows || !j->stages ? -ENOMEM : make_engine(opts, now_ns, &j->engine);
  if (rc) {
    em_judge_free(j);
    return rc;
  }
  for (size_t i = 0; i < opts->max_stages; i++) {
    em_hist_init(&j->windows[i]);
  }
  describe(j);
  j->start_ns = now_ns;
  *out = j;
  return 0;
}

void em_judge_free(em_judge_t *j) {
  if (!j) {
    return;
  }
  em_budget_free(j->engine);
  free(j->windows);
  free(j->stages);
  free(j);
}

em_budget_engine_t *em_judge_engine(em_judge_t *j) {
  return j->engine;
}

const em_budget_t *em_judge_budgets(const em_judge_t *j, size_t *n) {
  *n = j->n_budgets;
  return j->budgets;
}

void em_judge_figures(em_judge_t *j, em_figures_t *figs, em_sample_t *samples) {
  for (size_t k = 0; k < em_figures_anomalies(figs); k++) {
    const char *stage = em_figures_anomaly_stage(figs, k);
    size_t alias = em_figures_anomaly_alias(figs, k);
    double z = 0;
    bool reported = em_budget_reported(j->engine, stage) == 1;
    bool have = reported && em_budget_anomaly(j->engine, stage, &z) == 0 && isfinite(z);
    em_figures_set_f_if(samples, alias, have, z);
    if (reported) {
      em_figures_note_absent(figs, alias, NULL); /* "not reported yet" from the start. */
    }
  }
}

void em_judge_evict(em_judge_t *j, size_t slot) {
  if (j && slot < j->max_stages) {
    em_hist_reset(&j->windows[slot]);
  }
}

size_t em_judge_tick(em_judge_t *j, uint64_t now_ns, const em_judge_tick_t *in,
                     em_budget_change_t out[2]) {
  size_t n = in->n_stages < j->max_stages ? in->n_stages : j->max_stages;
  size_t changes = 0;
  for (size_t i = 0; i < n; i++) {
    em_hist_merge(&j->windows[i], in->windows[i]);
  }
  if (now_ns - j->start_ns >= j->window_ns) {
    for (size_t i = 0; i < n; i++) {
      j->stages[i] = (em_budget_stage_window_t){.name = in->names[i], .hist = &j->windows[i]};
    }
    em_budget_window_t w = {.window_ns = now_ns - j->start_ns,
                            .stages = j->stages,
                            .n_stages = n,
                            .rss_bytes = in->rss_bytes,
                            .figures = in->figures,
                            .n_figures = in->n_figures};
    changes += em_budget_on_window(j->engine, &w, now_ns, &out[changes]);
    for (size_t i = 0; i < n; i++) {
      em_hist_reset(&j->windows[i]);
    }
    j->start_ns = now_ns;
  }
  changes += em_budget_on_timer(j->engine, now_ns, &out[changes]);
  return changes;
}

int em_judge_reload(em_judge_t *j, const em_judge_opts_t *opts, uint64_t now_ns, size_t *kept) {
  em_budget_engine_t *engine = NULL;
  int rc = make_engine(opts, now_ns, &engine);
  if (rc) {
    return rc;
  }
  *kept = em_budget_adopt(engine, j->engine);
  em_budget_free(j->engine);
  j->engine = engine;
  j->window_ns = opts->window_ns;
  describe(j);
  return 0;
}

size_t em_judge_stage_names(const em_budget_rule_t *rules, size_t n_rules, const char **names,
                            size_t cap) {
  size_t n = 0;
  for (size_t i = 0; i < n_rules; i++) {
    const em_budget_rule_t *r = &rules[i];
    if (r->stage[0] && n < cap) {
      names[n++] = r->stage;
    }
    size_t n_flow = r->kind == EM_BUDGET_RULE_FLOW ? r->u.flow.n_stages : 0;
    for (size_t k = 0; k < n_flow && k < EM_BUDGET_FLOW_MAX_STAGES && n < cap; k++) {
      names[n++] = r->u.flow.stages[k];
    }
  }
  return n;
}

size_t em_judge_deadlines(const em_budget_rule_t *rules, size_t n_rules, em_deadline_t *out) {
  size_t n = 0;
  for (size_t i = 0; i < n_rules; i++) {
    const em_budget_rule_t *r = &rules[i];
    if (r->kind != EM_BUDGET_RULE_DEADLINE || !r->stage[0]) {
      continue;
    }
    uint64_t bound_ns = r->u.deadline.bound_ns;
    size_t k = 0;
    while (k < n && strcmp(out[k].stage, r->stage) != 0) {
      k++;
    }
    if (k < n) {
      out[k].deadline_ns = bound_ns < out[k].deadline_ns ? bound_ns : out[k].deadline_ns;
    } else if (n < EM_DEADLINE_MAX_ENTRIES) {
      out[n] = (em_deadline_t){.deadline_ns = bound_ns};
      snprintf(out[n].stage, sizeof(out[n].stage), "%s", r->stage);
      n++;
    }
  }
  return n;
}
