/*
 * judge.h - the budget window around the degradation engine (budget.h): every tick the stage
 * windows the loop publishes are merged into one window per stage; when it has lasted
 * [degrade] window the engine judges it with the figures budget rules name (PSI, the hottest
 * zone, throttling, RSS), and its ALIVE rules are judged every tick. A reload builds a new
 * engine that adopts the rules' state by id; the birth's list of budgets is kept here too.
 * Also the pure helpers the loop needs from the rules: the stages they name (whose span-table
 * slots are reserved) and the hard deadline of each stage (the deadline page).
 *
 *   per tick  em_judge_tick: merge; window over -> em_budget_on_window; em_budget_on_timer
 *   reload    em_judge_reload: a new engine (or -EINVAL: the old one stays)
 *
 * Owns: the engine, one histogram per stage slot (max_stages, allocated once), the birth's
 * budget list. Single-threaded (the loop's thread).
 */
#ifndef EDGEMON_AGENT_JUDGE_H
#define EDGEMON_AGENT_JUDGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "budget.h"
#include "edgemon/proto.h"
#include "edgemon/ring.h"
#include "figures.h"
#include "hist.h"

#define EM_JUDGE_MAX_BUDGETS 64 /* Rules the birth lists at most. */

typedef struct {
  const em_budget_rule_t *rules; /* Borrowed for the call; at most EM_JUDGE_MAX_BUDGETS. */
  size_t n_rules;
  uint32_t enter_windows;
  uint32_t leave_windows;
  uint64_t window_ns;  /* [degrade] window. */
  uint32_t max_stages; /* Stage slots of the span table (fixed at new). */
} em_judge_opts_t;

/* What one tick hands the judge; everything borrowed for the call. */
typedef struct {
  size_t n_stages;                 /* <= max_stages */
  const char *const *names;        /* Stage names by slot. */
  const em_hist_t *const *windows; /* This tick's window of each slot. */
  em_value_t rss_bytes;            /* The target's RSS, or absent. */
  const em_budget_figure_t *figures;
  size_t n_figures;
} em_judge_tick_t;

typedef struct em_judge em_judge_t;

/* An engine for the rules, the windows, the birth's list. Returns 0 and *out, -EINVAL (the
 * rules were refused: logged) or -ENOMEM. */
int em_judge_new(em_judge_t **out, const em_judge_opts_t *opts, uint64_t now_ns);

/* Frees. NULL is a no-op. */
void em_judge_free(em_judge_t *j);

/* The engine, for spans, heartbeats, hard misses, anomaly scores and the level. */
em_budget_engine_t *em_judge_engine(em_judge_t *j);

/* The budgets as the birth lists them (borrowed until the next reload). */
const em_budget_t *em_judge_budgets(const em_judge_t *j, size_t *n);

/* The anomaly score of each stage the dictionary has one for into samples[alias]: absent
 * until the engine has one (finite), and until the stage has reported (a first span or
 * heartbeat): the dictionary says so from its start (the birth's absent reason) until then. */
void em_judge_figures(em_judge_t *j, em_figures_t *figs, em_sample_t *samples);

/* A stage slot changed name: its window is forgotten. */
void em_judge_evict(em_judge_t *j, size_t slot);

/* This tick: up to two changes of level into out[0..2) (the window's, then the timer's);
 * returns how many. */
size_t em_judge_tick(em_judge_t *j, uint64_t now_ns, const em_judge_tick_t *in,
                     em_budget_change_t out[2]);

/* New rules: a new engine adopting the old one's state by id (*kept: rules that kept it).
 * Returns 0, or -EINVAL / -ENOMEM with the running engine unchanged. */
int em_judge_reload(em_judge_t *j, const em_judge_opts_t *opts, uint64_t now_ns, size_t *kept);

/* The stages the rules name (a stage rule's, a flow's), borrowed from `rules`, into
 * names[0..cap); returns how many. */
size_t em_judge_stage_names(const em_budget_rule_t *rules, size_t n_rules, const char **names,
                            size_t cap);

/* The hard deadline of each stage the rules bound (the smallest of its deadline rules) into
 * out[0..EM_DEADLINE_MAX_ENTRIES); returns how many. */
size_t em_judge_deadlines(const em_budget_rule_t *rules, size_t n_rules, em_deadline_t *out);

#endif /* EDGEMON_AGENT_JUDGE_H */
