/*
 * levels.c - see levels.h.
 */
#define _POSIX_C_SOURCE 200809L

#include "levels.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hook.h"
#include "log.h"

struct em_levels {
  em_state_record_t state; /* The last level change, as the page and pushes carry it. */
  em_signals_t *signals;
  em_hook_t *hook; /* NULL when [degrade] hook is not set. */
};

int em_levels_new(em_levels_t **out, const em_levels_opts_t *opts, uint64_t mono_ns,
                  uint64_t wall_ns) {
  if (!out || !opts || !opts->loop || !opts->runtime_dir || !opts->send) {
    return -EINVAL;
  }
  em_levels_t *l = calloc(1, sizeof(*l));
  if (!l) {
    return -ENOMEM;
  }
  l->state = (em_state_record_t){
      .since_mono_ns = mono_ns, .since_wall_ns = wall_ns, .value = NAN, .bound = NAN};
  char page[4096 + 16];
  snprintf(page, sizeof(page), "%s/state", opts->runtime_dir);
  int rc =
      em_signals_new(&l->signals, page, (uint32_t)getpid(), &l->state, opts->send, opts->send_ctx);
  if (rc) {
    EM_ERROR("state page %s: %s", page, strerror(-rc));
  } else if (opts->hook && opts->hook[0]) {
    rc = em_hook_new(&l->hook, opts->loop, opts->hook, opts->hook_timeout_ns);
  }
  if (rc) {
    em_levels_free(l);
    return rc;
  }
  *out = l;
  return 0;
}

void em_levels_free(em_levels_t *l) {
  if (!l) {
    return;
  }
  em_signals_free(l->signals, true);
  em_hook_free(l->hook);
  free(l);
}

bool em_levels_close(em_levels_t *l, void (*done)(void *), void *ctx) {
  if (!l || !l->hook) {
    return false;
  }
  em_hook_close(l->hook, done, ctx);
  return true;
}

const em_state_record_t *em_levels_state(const em_levels_t *l) {
  return &l->state;
}

em_signals_t *em_levels_signals(em_levels_t *l) {
  return l->signals;
}

const em_state_record_t *em_levels_apply(em_levels_t *l, const em_budget_change_t *c,
                                         uint64_t wall_ns) {
  em_state_record_t *r = &l->state;
  *r = (em_state_record_t){.level = c->level,
                           .prev_level = c->prev_level,
                           .changes = r->changes + 1,
                           .since_mono_ns = c->mono_ns,
                           .since_wall_ns = wall_ns,
                           .value = em_value_double(&c->value),
                           .bound = em_value_double(&c->bound)};
  snprintf(r->rule, sizeof(r->rule), "%.*s", (int)sizeof(r->rule) - 1, c->rule ? c->rule : "");
  snprintf(r->stage, sizeof(r->stage), "%s", c->stage ? c->stage : "");
  snprintf(r->reason, sizeof(r->reason), "%.60s%s%.70s", c->rule ? c->rule : "",
           c->rule ? ": " : "", c->reason ? c->reason : "");
  int rc = em_signals_publish(l->signals, r);
  if (rc) {
    EM_ERROR("state page: %s", em_proto_strerror(rc));
  }
  return r;
}

void em_levels_announce(em_levels_t *l) {
  const em_state_record_t *r = &l->state;
  if (l->hook) {
    em_hook_run(l->hook, r);
  }
  em_log(r->level > r->prev_level ? EM_LOG_WARN : EM_LOG_INFO,
         "level %s (was %s): %s, value %g, bound %g", em_level_name(r->level),
         em_level_name(r->prev_level), r->reason, r->value, r->bound);
}

void em_levels_figures(em_levels_t *l, const em_figures_t *figs, em_sample_t *samples) {
  const em_signals_stats_t *st = em_signals_stats(l->signals);
  em_figures_set_u(samples, em_figures_alias(figs, EM_FIG_PUSH_SUBSCRIBERS),
                   em_signals_subscribers(l->signals));
  em_figures_set_u(samples, em_figures_alias(figs, EM_FIG_PUSH_REFUSED), st->refused);
  em_figures_set_u(samples, em_figures_alias(figs, EM_FIG_PUSH_GONE), st->dropped + st->reaped);
}
