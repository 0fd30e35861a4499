/*
 * feed.c - see feed.h. The flight recorder's columns are chosen once, at em_feed_new, from the
 * dictionary's groups: the target's figures every tick, smaps, the system group and the
 * sensors on their own cadences, in alias order; the agent's own counters explain no breach
 * and are left out. Each tick copies the columns read on it; the tick that ends a trigger's
 * post window encodes the recording under max_bytes (the spans and ticks farthest from the
 * trigger go first) and hands it to the publish callback.
 */
#define _POSIX_C_SOURCE 200809L

#include "feed.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "diagnose.h"
#include "flight.h"
#include "log.h"

#define HIST_ROOM 16u /* Bytes a recording leaves under its cap for its historical form. */

/* When a column is read: every tick, or on its own cadence (the EM_FEED_* bit). */
enum { WHEN_EVERY = 0 };

struct em_feed {
  em_feed_opts_t o;
  em_flight_rec_t *rec; /* NULL with [flight] enabled false. */
  size_t n_cols;
  uint32_t alias[EM_FLIGHT_MAX_COLUMNS]; /* Column -> dictionary alias, ascending. */
  uint8_t when[EM_FLIGHT_MAX_COLUMNS];   /* WHEN_EVERY or one EM_FEED_* bit. */
  uint64_t cut;                          /* Spans and ticks left out for max_bytes. */
  em_log_limit_t refused;                /* Triggers not recorded. */
  em_level_t level;                      /* The level of the last change (NOMINAL at start). */
  uint64_t nominal_from_ns;              /* The level is NOMINAL since... */
  uint64_t nominal_to_ns;                /* ...until (UINT64_MAX: it still is). */
  uint64_t *durations;                   /* max_spans: the verdict's scratch. */
  em_diagnosis_t last;                   /* The verdict of the last rise. */
  bool last_has;                         /* `last` is the latest change's verdict... */
  bool last_fresh;                       /* ...and no trigger has taken it yet. */
  em_diagnosis_t pending;                /* The pending recording's verdict... */
  bool pending_has;                      /* ...when it has one. */
  bool pending_new;                      /* The last trigger started it: it may wait... */
  bool await;                            /* ...and waits for em_feed_functions... */
  uint64_t await_until_ns;               /* ...until then at the latest. */
};

static uint64_t wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The columns: PMU events, the target's figures, smaps, MemAvailable and PSI, the sensors, in
 * alias order; the recorder sized from [flight]. */
static int open_recorder(em_feed_t *f) {
  em_flight_column_t cols[EM_FLIGHT_MAX_COLUMNS];
  em_figures_t *figs = f->o.figs;
  const em_metric_def_t *defs = em_figures_defs(figs);
  size_t n_metrics = em_figures_count(figs);
  size_t first_sensor = em_figures_sensor_alias(figs, 0);
  size_t n = 0;
  for (size_t m = 0; m < n_metrics && n < EM_FLIGHT_MAX_COLUMNS; m++) {
    em_figure_group_t g = em_figures_group(figs, m);
    unsigned when = WHEN_EVERY;
    if (m >= first_sensor) {
      when = EM_FEED_SENSORS;
    } else if (g == EM_FIGURE_SMAPS) {
      when = EM_FEED_SMAPS;
    } else if (g == EM_FIGURE_SYSTEM) {
      when = EM_FEED_SYSTEM;
    } else if (g != EM_FIGURE_TARGET) {
      continue; /* The agent's own counters explain no breach. */
    }
    cols[n] =
        (em_flight_column_t){.name = defs[m].name, .unit = defs[m].unit, .kind = defs[m].kind};
    f->alias[n] = (uint32_t)m;
    f->when[n] = (uint8_t)when;
    n++;
  }
  f->n_cols = n;
  em_flight_rec_opts_t ro = {.period_ns = f->o.period_ns,
                             .pre_ns = f->o.pre_ns,
                             .post_ns = f->o.post_ns,
                             .min_gap_ns = f->o.min_gap_ns,
                             .hold_ns = EM_FEED_HOLD_NS,
                             .max_spans = f->o.max_spans,
                             .max_bytes = f->o.max_bytes,
                             .columns = cols,
                             .n_columns = n};
  int rc = em_flight_rec_new(&f->rec, &ro);
  if (rc) {
    EM_ERROR("flight: cannot start the recorder: %s", strerror(-rc));
    return rc;
  }
  em_flight_rec_stats_t st;
  em_flight_rec_stats(f->rec, &st);
  if (st.ticks_capped) {
    EM_WARN("flight: pre_seconds + post_seconds is more than %u ticks of %llu us: a recording "
            "keeps %u ticks, fewer seconds before the trigger",
            EM_FLIGHT_MAX_TICKS - EM_FLIGHT_REC_TICK_SLACK,
            (unsigned long long)(f->o.period_ns / 1000u), EM_FLIGHT_MAX_TICKS);
  }
  EM_INFO("flight: recorder on: %llu ms before a trigger, %llu ms after, %zu columns, %u ticks, "
          "%u spans, %llu bytes",
          (unsigned long long)(f->o.pre_ns / 1000000u),
          (unsigned long long)(f->o.post_ns / 1000000u), n, em_flight_rec_tick_capacity(f->rec),
          em_flight_rec_span_capacity(f->rec), (unsigned long long)em_flight_rec_bytes(f->rec));
  return 0;
}

int em_feed_new(em_feed_t **out, const em_feed_opts_t *opts) {
  if (!out || !opts || !opts->figs || !opts->publish) {
    return -EINVAL;
  }
  em_feed_t *f = calloc(1, sizeof(*f));
  if (!f) {
    return -ENOMEM;
  }
  f->o = *opts;
  f->level = EM_LEVEL_NOMINAL;
  f->nominal_to_ns = UINT64_MAX;
  int rc = opts->enabled ? open_recorder(f) : 0;
  if (!rc && f->rec) {
    f->durations = calloc(em_flight_rec_span_capacity(f->rec), sizeof(*f->durations));
    rc = f->durations ? 0 : -ENOMEM;
  }
  if (rc) {
    em_feed_free(f);
    return rc;
  }
  *out = f;
  return 0;
}

void em_feed_free(em_feed_t *f) {
  if (!f) {
    return;
  }
  em_flight_rec_free(f->rec);
  free(f->durations);
  free(f);
}

em_flight_recorder_t em_feed_describe(const em_feed_t *f) {
  if (!f || !f->rec) {
    return (em_flight_recorder_t){.on = false};
  }
  return (em_flight_recorder_t){.on = true,
                                .pre_ns = f->o.pre_ns,
                                .post_ns = f->o.post_ns,
                                /* The ticks for pre + post: those it holds beyond them
                                   for a recording that waits (EM_FEED_HOLD_NS) are in bytes. */
                                .ticks = em_flight_rec_tick_capacity(f->rec) -
                                         (uint32_t)(em_flight_rec_hold_ns(f->rec) / f->o.period_ns),
                                .spans = em_flight_rec_span_capacity(f->rec),
                                .bytes = em_flight_rec_bytes(f->rec)};
}

void em_feed_set_min_gap(em_feed_t *f, uint64_t min_gap_ns) {
  f->o.min_gap_ns = min_gap_ns;
  em_flight_rec_set_min_gap(f->rec, min_gap_ns);
}

void em_feed_trigger(em_feed_t *f, const em_flight_trigger_t *t, uint64_t mono_ns) {
  const char *what = t->cause == EM_FLIGHT_COMMAND ? "cmd/flight" : "escalation";
  if (!f->rec) {
    if (t->cause == EM_FLIGHT_COMMAND && em_log_limit_pass(&f->refused, mono_ns, EM_LOG_LIMIT_NS)) {
      EM_WARN("flight: cmd/flight ignored: the flight recorder is off ([flight] "
              "enabled)" EM_LOG_HELD_BACK);
    }
    return;
  }
  int rc = em_flight_rec_trigger(f->rec, t, mono_ns, wall_ns());
  bool verdict = t->cause == EM_FLIGHT_ESCALATION && f->last_fresh;
  f->last_fresh = false;
  f->pending_new = rc == 0 && verdict;
  if (rc == 0) {
    f->await = false;
    f->pending_has = verdict;
    if (verdict) {
      em_diagnosis_copy(&f->pending, &f->last);
    }
    EM_INFO("flight: %s to %s: recording the %llu ms before and %llu ms after", what,
            em_level_name(t->level), (unsigned long long)(f->o.pre_ns / 1000000u),
            (unsigned long long)(f->o.post_ns / 1000000u));
    return;
  }
  if (em_log_limit_pass(&f->refused, mono_ns, EM_LOG_LIMIT_NS)) {
    EM_INFO("flight: %s to %s not recorded: %s (counted in flight.suppressed" EM_LOG_HELD_BACK ")",
            what, em_level_name(t->level),
            rc == -EBUSY ? "a recording is being taken"
                         : "within [flight] min_gap_seconds of the last");
  }
}

static uint64_t mono_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

const em_proto_verdict_t *em_feed_verdict(const em_feed_t *f) {
  return f && f->last_has ? &f->last.v : NULL;
}

const em_proto_verdict_t *em_feed_diagnose(em_feed_t *f, em_level_t level, const char *stage,
                                           const char *statistic, uint64_t window_ns,
                                           const em_value_t *bound, uint64_t mono_ns,
                                           const em_others_list_t *others) {
  if (!f) {
    return NULL;
  }
  em_level_t prev_level = f->level;
  f->level = level;
  f->last_fresh = f->last_has = false;
  if (level == EM_LEVEL_NOMINAL) {
    f->nominal_from_ns = mono_ns;
    f->nominal_to_ns = UINT64_MAX;
    return NULL;
  }
  if (prev_level == EM_LEVEL_NOMINAL && f->nominal_to_ns == UINT64_MAX) {
    f->nominal_to_ns = mono_ns;
  }
  if (level <= prev_level || !f->rec || !stage || !statistic) {
    return NULL;
  }
  uint64_t t0 = mono_now();
  em_flight_t view;
  em_flight_rec_view(f->rec, &view);
  size_t k = 0;
  while (k < view.n_stages && strcmp(view.stages[k], stage) != 0) {
    k++;
  }
  if (k == view.n_stages) {
    return NULL; /* No span of the stage in the rings. */
  }
  em_diagnose_process_t procs[EM_OTHERS_MAX];
  size_t n_procs = 0;
  for (size_t i = 0; others && i < others->n && i < EM_OTHERS_MAX; i++) {
    const em_others_proc_t *p = &others->procs[i];
    procs[n_procs++] = (em_diagnose_process_t){
        .pid = (uint32_t)p->pid, .comm = p->comm, .share = p->share < 1 ? p->share : 1};
  }
  em_diagnose_in_t in = {.columns = view.columns,
                         .n_columns = view.n_columns,
                         .ticks = view.ticks,
                         .n_ticks = view.n_ticks,
                         .spans = view.spans,
                         .n_spans = view.n_spans,
                         .stage = (uint32_t)k,
                         .stage_name = stage,
                         .statistic = statistic,
                         .trigger_ns = mono_ns,
                         .window_ns = window_ns ? window_ns : f->o.period_ns,
                         /* A percentile's or a deadline's bound is ns; a ratio's is not. */
                         .bound_ns = bound && bound->type == EM_VALUE_UINT ? bound->as.u : 0,
                         .nominal_from_ns = f->nominal_from_ns,
                         .nominal_to_ns = f->nominal_to_ns,
                         .others = procs,
                         .n_others = n_procs};
  int rc = em_diagnose(&in, f->durations, em_flight_rec_span_capacity(f->rec), &f->last);
  if (rc) {
    EM_DEBUG("flight: no verdict on %s: %s", stage, strerror(-rc));
    return NULL;
  }
  em_proto_verdict_t *v = &f->last.v;
  if (em_proto_verdict_check(v) != 0) {
    /* A command name that is not text would cost the state message: the processes go. */
    for (size_t i = 0; i < v->n_causes; i++) {
      v->causes[i].n_processes = 0;
    }
  }
  rc = em_proto_verdict_check(v);
  if (rc) {
    EM_WARN("flight: verdict on %s left out: %s", stage, em_proto_strerror(rc));
    return NULL;
  }
  EM_INFO("verdict on %s %s (%.3f ms, baseline %.3f ms over %u windows): %s %.0f%%, %zu "
          "causes, computed in %llu us",
          stage, statistic, (double)v->breach_ns / 1e6, (double)v->baseline_ns / 1e6,
          v->nominal_windows,
          v->n_causes ? em_proto_verdict_cause_name(v->causes[0].code) : "nothing to explain",
          v->n_causes ? v->causes[0].share * 100 : 0.0, v->n_causes,
          (unsigned long long)((mono_now() - t0) / 1000u));
  f->last_fresh = f->last_has = true;
  return v;
}

uint64_t em_feed_nominal_since(const em_feed_t *f) {
  if (!f || f->level != EM_LEVEL_NOMINAL) {
    return UINT64_MAX;
  }
  return f->nominal_from_ns;
}

/* The more_work cause of the pending recording's verdict, or NULL. */
static em_proto_verdict_cause_t *pending_more_work(em_feed_t *f) {
  for (size_t i = 0; f->pending_has && i < f->pending.v.n_causes; i++) {
    if (f->pending.v.causes[i].code == EM_PROTO_CAUSE_MORE_WORK) {
      return &f->pending.v.causes[i];
    }
  }
  return NULL;
}

bool em_feed_await_functions(em_feed_t *f, const char *stage, uint64_t until_ns) {
  bool fresh = f && f->pending_new;
  if (f) {
    f->pending_new = false; /* Once per recording, for the escalation that started it. */
  }
  if (!fresh || !f->rec || !stage || !pending_more_work(f) ||
      strcmp(f->pending.stage, stage) != 0) {
    return false;
  }
  /* The recording is due post_ns after its trigger, a moment ago; its ticks stay hold_ns more. */
  uint64_t latest = mono_now() + f->o.post_ns + em_flight_rec_hold_ns(f->rec);
  f->await = true;
  f->await_until_ns = until_ns < latest ? until_ns : latest;
  return true;
}

void em_feed_functions(em_feed_t *f, const em_proto_verdict_function_t *fns, size_t n) {
  em_proto_verdict_cause_t *c = f ? pending_more_work(f) : NULL;
  if (!f || !f->await || !c) {
    return;
  }
  f->await = false;
  c->n_functions = 0;
  for (size_t i = 0; fns && i < n && c->n_functions < EM_PROTO_VERDICT_MAX_FUNCTIONS; i++) {
    char *name = f->pending.fn[c->n_functions];
    snprintf(name, sizeof(f->pending.fn[0]), "%s", fns[i].name ? fns[i].name : "");
    c->functions[c->n_functions++] =
        (em_proto_verdict_function_t){.name = name, .growth = fns[i].growth};
  }
  if (em_proto_verdict_check(&f->pending.v) != 0) {
    c->n_functions = 0; /* A name that is not text would cost the recording its verdict. */
  }
  EM_INFO("flight: the recording's more_work cause on %s names %zu function(s) whose share "
          "grew%s%s",
          f->pending.stage, c->n_functions, c->n_functions ? ", first " : "",
          c->n_functions ? c->functions[0].name : "");
}

void em_feed_span(em_feed_t *f, size_t hint, const char *stage, uint64_t frame_id,
                  uint64_t start_ns, uint64_t duration_ns) {
  if (f->rec) {
    (void)em_flight_rec_span(f->rec, hint, stage, frame_id, start_ns, duration_ns);
  }
}

void em_feed_tick(em_feed_t *f, uint64_t now_ns, const em_sample_t *samples, unsigned fresh) {
  if (!f->rec) {
    return;
  }
  em_flight_value_t *v = em_flight_rec_tick(f->rec, now_ns);
  size_t n = 0;
  for (size_t c = 0; c < f->n_cols; c++) {
    if (f->when[c] != WHEN_EVERY && !(fresh & f->when[c])) {
      continue; /* Not read on this tick: left out, never repeated. */
    }
    v[n++] = (em_flight_value_t){.column = (uint32_t)c, .value = samples[f->alias[c]].value};
  }
  em_flight_rec_commit(f->rec, n);
}

void em_feed_figures(em_feed_t *f, em_sample_t *samples) {
  em_flight_rec_stats_t st = {0};
  em_flight_rec_stats(f->rec, &st);
  bool on = f->rec != NULL;
  em_figures_t *d = f->o.figs;
  em_figures_set_u_if(samples, em_figures_alias(d, EM_FIG_FLIGHT_RECORDINGS), on, st.recordings);
  em_figures_set_u_if(samples, em_figures_alias(d, EM_FIG_FLIGHT_SUPPRESSED), on, st.suppressed);
  em_figures_set_u_if(samples, em_figures_alias(d, EM_FIG_FLIGHT_CUT), on, f->cut);
  em_figures_set_u_if(samples, em_figures_alias(d, EM_FIG_FLIGHT_OVERWRITTEN), on, st.overwritten);
  em_figures_set_u_if(samples, em_figures_alias(d, EM_FIG_FLIGHT_UNNAMED), on, st.unnamed);
}

void em_feed_publish(em_feed_t *f, uint64_t now_ns, bool may_spool) {
  if (f->await && em_flight_rec_due(f->rec, now_ns)) {
    if (now_ns < f->await_until_ns && may_spool) {
      return; /* The escalation's profile window has not resolved yet. */
    }
    f->await = false;
    EM_INFO("flight: recording published without the functions of its more_work cause: %s",
            may_spool ? "the profile window did not resolve in time" : "the agent is stopping");
  }
  em_flight_t *r = f->rec ? em_flight_rec_take(f->rec, now_ns) : NULL;
  if (!r) {
    return;
  }
  r->head.session = f->o.session;
  r->verdict = f->pending_has ? &f->pending.v : NULL;
  f->pending_has = false;
  size_t cap = 0;
  uint8_t *buf = em_flight_rec_buffer(f->rec, &cap);
  size_t len = 0;
  int rc = em_flight_encode_fit(r, buf, cap - HIST_ROOM, &len);
  if (rc) {
    EM_ERROR("flight: recording %u cannot be encoded: %s", r->number, em_proto_strerror(rc));
    return;
  }
  uint64_t cut = r->truncated.spans_cut + r->truncated.ticks_cut;
  f->cut += cut;
  rc = f->o.publish(f->o.ctx, buf, len, may_spool);
  EM_INFO("flight: recording %u: %zu ticks, %zu spans, %zu bytes (%llu left out for max_bytes, "
          "%llu spans overwritten)%s",
          r->number, r->n_ticks, r->n_spans, len, (unsigned long long)cut,
          (unsigned long long)r->truncated.spans_overwritten, rc == 0 ? "" : ": lost (spool.lost)");
}

void em_feed_flush_log(em_feed_t *f, uint64_t now_ns) {
  em_log_limit_report(&f->refused, now_ns, "flight", "triggers not recorded",
                      " (flight.suppressed)");
}
