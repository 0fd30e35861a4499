/*
 * figures.c - see figures.h. The table of fixed figures is generated from EM_FIGURES; the
 * dictionary is one allocation of definitions, built names and absent reasons, sized at
 * em_figures_new() from the events, stages and sensors it is given.
 */
#define _POSIX_C_SOURCE 200809L

#include "figures.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const em_figure_info_t table[EM_FIG_COUNT] = {
#define EM_FIGURES_ROW(id, name, unit, kind, group)                                                \
  [EM_FIG_##id] = {name, unit, EM_METRIC_##kind, EM_FIGURE_##group},
    EM_FIGURES(EM_FIGURES_ROW)
#undef EM_FIGURES_ROW
};

struct em_figures {
  size_t n_events;
  size_t n_anomaly;
  size_t n_sensors;
  size_t count;
  const em_sensors_t *sensors;
  char (*event_names)[EM_FIGURES_NAME_BYTES];    /* "pmu.<event>" */
  char (*anomaly_stages)[EM_FIGURES_NAME_BYTES]; /* the stage */
  char (*anomaly_names)[EM_FIGURES_NAME_BYTES];  /* "budget.<stage>.anomaly" */
  char (*absent)[EM_FIGURES_REASON_BYTES];       /* per alias; "" when not absent */
  em_metric_def_t *defs;                         /* per alias */
};

const em_figure_info_t *em_figures_info(em_figure_t f) {
  return (unsigned)f < EM_FIG_COUNT ? &table[f] : NULL;
}

int em_figures_find(const char *name) {
  for (size_t f = 0; name && f < EM_FIG_COUNT; f++) {
    if (strcmp(table[f].name, name) == 0) {
      return (int)f;
    }
  }
  return -ENOENT;
}

/* snprintf into a name buffer; -ENAMETOOLONG when it does not fit. */
static int name_of(char *out, const char *fmt_prefix, const char *s, const char *suffix) {
  int n = snprintf(out, EM_FIGURES_NAME_BYTES, "%s%s%s", fmt_prefix, s, suffix);
  return n < 0 || n >= EM_FIGURES_NAME_BYTES ? -ENAMETOOLONG : 0;
}

/* The distinct, non-empty stages of opts into d (names built); returns 0 or -errno. */
static int take_stages(em_figures_t *d, const em_figures_opts_t *o) {
  for (size_t i = 0; i < o->n_stages; i++) {
    const char *stage = o->stages[i];
    if (!stage) {
      return -EINVAL;
    }
    bool seen = stage[0] == '\0';
    for (size_t k = 0; k < d->n_anomaly && !seen; k++) {
      seen = strcmp(d->anomaly_stages[k], stage) == 0;
    }
    if (seen) {
      continue;
    }
    int rc = name_of(d->anomaly_stages[d->n_anomaly], "", stage, "");
    if (rc == 0) {
      rc = name_of(d->anomaly_names[d->n_anomaly], "budget.", stage, ".anomaly");
    }
    if (rc) {
      return rc;
    }
    d->n_anomaly++;
  }
  return 0;
}

/* The definitions of every alias, and the absent reasons known at start. */
static void fill_defs(em_figures_t *d, const em_figures_opts_t *o) {
  for (size_t i = 0; i < d->n_events; i++) {
    bool clock = strcmp(o->events[i], "task-clock") == 0 || strcmp(o->events[i], "cpu-clock") == 0;
    d->defs[i] = (em_metric_def_t){.alias = (uint32_t)i,
                                   .name = d->event_names[i],
                                   .unit = clock ? "ns" : "1",
                                   .kind = EM_METRIC_COUNTER};
    em_figures_note_absent(d, i, "target not attached yet");
  }
  for (size_t f = 0; f < EM_FIG_COUNT; f++) {
    size_t m = em_figures_alias(d, (em_figure_t)f);
    d->defs[m] = (em_metric_def_t){
        .alias = (uint32_t)m, .name = table[f].name, .unit = table[f].unit, .kind = table[f].kind};
  }
  for (size_t k = 0; k < d->n_anomaly; k++) {
    size_t m = em_figures_anomaly_alias(d, k);
    d->defs[m] = (em_metric_def_t){
        .alias = (uint32_t)m, .name = d->anomaly_names[k], .unit = "1", .kind = EM_METRIC_GAUGE};
    em_figures_note_absent(d, m, "the stage has not reported yet"); /* judge.c clears it. */
  }
  for (unsigned i = 0; i < d->n_sensors; i++) {
    size_t m = em_figures_sensor_alias(d, i);
    const em_sensor_figure_t *s = em_sensors_figure(d->sensors, i);
    d->defs[m] = (em_metric_def_t){
        .alias = (uint32_t)m, .name = s->name, .unit = s->unit, .kind = EM_METRIC_GAUGE};
    em_figures_note_absent(d, m, "not read yet");
  }
  if (!o->psi) {
    for (size_t f = EM_FIG_PSI_CPU_SOME; f <= EM_FIG_PSI_IO_FULL; f++) {
      em_figures_note_absent(
          d, em_figures_alias(d, (em_figure_t)f),
          "no readable /proc/pressure: kernel without PSI (4.20+) or PSI off at boot (psi=1)");
    }
  }
  if (!o->process_memory) {
    for (size_t f = EM_FIG_RSS; f <= EM_FIG_SWAP; f++) {
      em_figures_note_absent(d, em_figures_alias(d, (em_figure_t)f),
                             "cgroup target: per-process memory is not sampled");
    }
    static const em_figure_t per_process[] = {
        EM_FIG_SCHED_CTXSW_VOLUNTARY, EM_FIG_SCHED_CTXSW_INVOLUNTARY, EM_FIG_PROC_CPU,
        EM_FIG_MAJOR_FAULTS,          EM_FIG_IO_READ_BYTES,           EM_FIG_IO_WRITE_BYTES};
    for (size_t k = 0; k < sizeof(per_process) / sizeof(per_process[0]); k++) {
      em_figures_note_absent(d, em_figures_alias(d, per_process[k]),
                             "cgroup target: per-process and per-thread figures are not read");
    }
  }
  if (!o->smaps) {
    for (size_t f = EM_FIG_PSS; f <= EM_FIG_SWAP; f++) {
      em_figures_note_absent(d, em_figures_alias(d, (em_figure_t)f), "smaps_period is 0");
    }
  }
  if (!o->flight) {
    for (size_t f = EM_FIG_FLIGHT_RECORDINGS; f <= EM_FIG_FLIGHT_UNNAMED; f++) {
      em_figures_note_absent(d, em_figures_alias(d, (em_figure_t)f),
                             "flight recorder off ([flight] enabled = false)");
    }
  }
  if (!o->profile) {
    for (size_t f = EM_FIG_PROFILE_TAKEN; f <= EM_FIG_PROFILE_LOST; f++) {
      em_figures_note_absent(d, em_figures_alias(d, (em_figure_t)f),
                             "stack profiler off ([profile] enabled = false)");
    }
  }
}

int em_figures_new(em_figures_t **out, const em_figures_opts_t *o) {
  if (!out || !o || o->n_events > EM_FIGURES_MAX_EVENTS || o->n_stages > EM_FIGURES_MAX_STAGES ||
      (o->n_events && !o->events) || (o->n_stages && !o->stages)) {
    return -EINVAL;
  }
  em_figures_t *d = calloc(1, sizeof(*d));
  if (!d) {
    return -ENOMEM;
  }
  int rc = 0;
  d->n_events = o->n_events;
  d->sensors = o->sensors;
  d->n_sensors = o->sensors ? em_sensors_count(o->sensors) : 0;
  d->event_names = calloc(o->n_events ? o->n_events : 1, sizeof(*d->event_names));
  d->anomaly_stages = calloc(o->n_stages ? o->n_stages : 1, sizeof(*d->anomaly_stages));
  d->anomaly_names = calloc(o->n_stages ? o->n_stages : 1, sizeof(*d->anomaly_names));
  if (!d->event_names || !d->anomaly_stages || !d->anomaly_names) {
    rc = -ENOMEM;
  }
  for (size_t i = 0; !rc && i < o->n_events; i++) {
    rc = o->events[i] ? name_of(d->event_names[i], "pmu.", o->events[i], "") : -EINVAL;
  }
  if (!rc) {
    rc = take_stages(d, o);
  }
  if (!rc) {
    d->count = d->n_events + EM_FIG_COUNT + d->n_anomaly + d->n_sensors;
    d->defs = calloc(d->count, sizeof(*d->defs));
    d->absent = calloc(d->count, sizeof(*d->absent));
    rc = d->defs && d->absent ? 0 : -ENOMEM;
  }
  if (rc) {
    em_figures_free(d);
    return rc;
  }
  fill_defs(d, o);
  *out = d;
  return 0;
}

void em_figures_free(em_figures_t *d) {
  if (!d) {
    return;
  }
  free(d->event_names);
  free(d->anomaly_stages);
  free(d->anomaly_names);
  free(d->absent);
  free(d->defs);
  free(d);
}

size_t em_figures_count(const em_figures_t *d) {
  return d->count;
}

size_t em_figures_alias(const em_figures_t *d, em_figure_t f) {
  return d->n_events + (size_t)f;
}

size_t em_figures_anomalies(const em_figures_t *d) {
  return d->n_anomaly;
}

size_t em_figures_anomaly_alias(const em_figures_t *d, size_t k) {
  return d->n_events + EM_FIG_COUNT + k;
}

const char *em_figures_anomaly_stage(const em_figures_t *d, size_t k) {
  return k < d->n_anomaly ? d->anomaly_stages[k] : NULL;
}

size_t em_figures_sensor_alias(const em_figures_t *d, unsigned i) {
  return d->n_events + EM_FIG_COUNT + d->n_anomaly + i;
}

em_figure_group_t em_figures_group(const em_figures_t *d, size_t alias) {
  if (alias < d->n_events) {
    return EM_FIGURE_TARGET;
  }
  if (alias < d->n_events + EM_FIG_COUNT) {
    return table[alias - d->n_events].group;
  }
  return EM_FIGURE_TICK;
}

void em_figures_note_absent(em_figures_t *d, size_t alias, const char *why) {
  if (!d || alias >= d->count) {
    return;
  }
  snprintf(d->absent[alias], sizeof(d->absent[alias]), "%s", why ? why : "");
}

const em_metric_def_t *em_figures_defs(em_figures_t *d) {
  for (size_t m = 0; m < d->count; m++) {
    d->defs[m].absent_reason = d->absent[m][0] ? d->absent[m] : NULL;
  }
  return d->defs;
}

size_t em_figures_window(const em_figures_t *d, const em_sample_t *samples, bool smaps, bool system,
                         em_sample_t *out) {
  size_t n = 0;
  for (size_t m = 0; m < d->count; m++) {
    em_figure_group_t g = em_figures_group(d, m);
    if ((g == EM_FIGURE_SMAPS && !smaps) || (g == EM_FIGURE_SYSTEM && !system)) {
      continue;
    }
    out[n++] = samples[m];
  }
  return n;
}
