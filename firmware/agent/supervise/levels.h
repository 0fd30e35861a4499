/*
 * levels.h - the level as the inference process sees it: the record of the last change of
 * level, published on the state page (signals.h: the process maps it and reads it with no
 * system call) and pushed to every subscriber, the optional hook run on each change (hook.h),
 * and the log line. The loop publishes the same record as the retained MQTT state message and
 * starts a flight recording and a profile on a rise.
 *
 *   em_levels_apply     a change from the budget engine -> the record, the page, the pushes
 *   em_levels_announce  then (after the loop's MQTT state) -> the hook, the log line
 *
 * Owns: the record, the state page and its subscribers (em_levels_signals), the hook (closed
 * by em_levels_close). Single-threaded (the loop's thread).
 */
#ifndef EDGEMON_AGENT_LEVELS_H
#define EDGEMON_AGENT_LEVELS_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "budget.h"
#include "figures.h"
#include "edgemon/ring.h"
#include "signals.h"

typedef struct {
  uv_loop_t *loop;
  const char *runtime_dir;  /* The state page is <runtime_dir>/state; borrowed for the call. */
  const char *hook;         /* [degrade] hook; "" or NULL: none. Borrowed for the call. */
  uint64_t hook_timeout_ns; /* [degrade] hook_timeout. */
  em_signals_send_fn send;  /* How pushes reach subscribers (the span socket). */
  void *send_ctx;
} em_levels_opts_t;

typedef struct em_levels em_levels_t;

/* Opens the state page (NOMINAL since now) and the hook. Returns 0 and *out, or the page's or
 * the hook's error (logged), -EINVAL or -ENOMEM. */
int em_levels_new(em_levels_t **out, const em_levels_opts_t *opts, uint64_t mono_ns,
                  uint64_t wall_ns);

/* Frees (the state page removed) after em_levels_close's done. NULL is a no-op. */
void em_levels_free(em_levels_t *l);

/* At stop: closes the hook. Returns true when done(ctx) will be called from the loop once it
 * is closed; false (no hook): done is never called. */
bool em_levels_close(em_levels_t *l, void (*done)(void *), void *ctx);

/* The last change of level (NOMINAL since start before any). */
const em_state_record_t *em_levels_state(const em_levels_t *l);

/* The state page and its subscribers (subscribe, figures, the log's flush). */
em_signals_t *em_levels_signals(em_levels_t *l);

/* A change of level at wall_ns: the record, the page and the pushes. Returns the record
 * (borrowed until the next change). */
const em_state_record_t *em_levels_apply(em_levels_t *l, const em_budget_change_t *c,
                                         uint64_t wall_ns);

/* The push.* figures (subscribers, refused, gone) into samples[alias]. */
void em_levels_figures(em_levels_t *l, const em_figures_t *figs, em_sample_t *samples);

/* The last change runs the hook (when set) and is logged (WARN for a rise, else INFO). */
void em_levels_announce(em_levels_t *l);

#endif /* EDGEMON_AGENT_LEVELS_H */
