/*
 * top_model.c - the devices `edgemon-cli top` shows and what it keeps of each (see
 * top_model.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "top_model.h"

#include <buf.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NS_PER_S   1000000000ull
#define NS_PER_MIN (60ull * NS_PER_S)

struct em_top_model {
  em_top_dev_t **devs; /* Sorted by id. */
  size_t n;
  size_t cap;
};

int em_top_model_new(em_top_model_t **out) {
  *out = calloc(1, sizeof(**out));
  return *out ? 0 : -ENOMEM;
}

void em_top_model_free(em_top_model_t *m) {
  if (!m) {
    return;
  }
  for (size_t i = 0; i < m->n; i++) {
    free(m->devs[i]->verdict);
    free(m->devs[i]);
  }
  free(m->devs);
  free(m);
}

/* The id of device i of the model's array (em_buf_find_name's name_at). */
static const char *id_at(const void *devs, size_t i) {
  return ((em_top_dev_t *const *)devs)[i]->id;
}

/* The index where id is or would go, with *found set. */
static size_t find(const em_top_model_t *m, const char *id, bool *found) {
  return em_buf_find_name(m->devs, m->n, id_at, id, found);
}

/* Copies s into a field of cap bytes, cut to fit; "" for NULL. */
static void copy(char *dst, size_t cap, const char *s) {
  size_t n = s ? strnlen(s, cap - 1) : 0;
  memcpy(dst, s ? s : "", n);
  dst[n] = '\0';
}

static void clear_figures(em_top_dev_t *d) {
  d->cpu_pct = d->ipc = d->rss_bytes = d->rss_slope_bytes_per_min = NAN;
  d->psi_cpu = d->psi_mem = d->psi_io = d->agent_cpu_pct = d->agent_rss_bytes = NAN;
  d->n_temps = 0;
}

em_top_dev_t *em_top_model_device(em_top_model_t *m, const char *id, bool create) {
  bool found = false;
  size_t at = find(m, id, &found);
  if (found) {
    return m->devs[at];
  }
  if (!create || m->n >= EM_TOP_MAX_DEVICES) {
    return NULL;
  }
  if (em_buf_grow_items(&m->devs, &m->cap, m->n, sizeof(*m->devs), 16) != 0) {
    return NULL;
  }
  em_top_dev_t *d = calloc(1, sizeof(*d));
  if (!d) {
    return NULL;
  }
  copy(d->id, sizeof(d->id), id);
  d->level = EM_LEVEL_NONE;
  d->value = d->bound = NAN;
  clear_figures(d);
  memmove(m->devs + at + 1, m->devs + at, (m->n - at) * sizeof(*m->devs));
  m->devs[at] = d;
  m->n++;
  return d;
}

size_t em_top_model_count(const em_top_model_t *m) {
  return m->n;
}

em_top_dev_t *em_top_model_at(const em_top_model_t *m, size_t i) {
  return i < m->n ? m->devs[i] : NULL;
}

long em_top_model_index(const em_top_model_t *m, const char *id) {
  bool found = false;
  size_t at = find(m, id, &found);
  return found ? (long)at : -1;
}

/* A counter's growth per second of elapsed time as a percentage of one CPU, NAN when there is
 * no earlier reading of the same session or the counter went back. */
static double cpu_share(double now_ns, double prev_ns, uint64_t dt_ns) {
  if (isnan(now_ns) || isnan(prev_ns) || dt_ns == 0 || now_ns < prev_ns) {
    return NAN;
  }
  return (now_ns - prev_ns) / (double)dt_ns * 100.0;
}

/* The zone of a temperature figure "thermal.<zone>.temp" into zone; false for other names. */
static bool temp_zone(const char *name, char *zone, size_t cap) {
  size_t len = strlen(name);
  if (strncmp(name, "thermal.", 8) != 0 || len <= 13 || strcmp(name + len - 5, ".temp") != 0) {
    return false;
  }
  size_t n = len - 13 < cap - 1 ? len - 13 : cap - 1;
  memcpy(zone, name + 8, n);
  zone[n] = '\0';
  return true;
}

/* Adds an RSS reading and sets the slope over the readings of the last minute before it. */
static void rss_point(em_top_dev_t *d, uint64_t t_ns, double bytes) {
  d->rss[d->rss_next] = (em_top_point_t){t_ns, bytes};
  d->rss_next = (d->rss_next + 1) % EM_TOP_RSS_POINTS;
  d->n_rss += d->n_rss < EM_TOP_RSS_POINTS;
  const em_top_point_t *oldest = NULL;
  for (size_t i = 0; i < d->n_rss; i++) {
    const em_top_point_t *p = &d->rss[i];
    if (p->time_ns < t_ns && t_ns - p->time_ns <= NS_PER_MIN &&
        (!oldest || p->time_ns < oldest->time_ns)) {
      oldest = p;
    }
  }
  /* At least two seconds apart, so that one window's noise is not a trend. */
  if (oldest && t_ns - oldest->time_ns >= 2 * NS_PER_S) {
    d->rss_slope_bytes_per_min =
        (bytes - oldest->bytes) / (double)(t_ns - oldest->time_ns) * (double)NS_PER_MIN;
  }
}

static void take_samples(em_top_dev_t *dev, const em_device_t *names, const em_data_t *d) {
  double proc_cpu = NAN, agent_cpu = NAN;
  for (size_t i = 0; i < d->n_samples; i++) {
    const char *name = em_dict_name(names, d->samples[i].alias);
    double v = em_value_double(&d->samples[i].value);
    char zone[EM_PROTO_MAX_NAME_BYTES + 1];
    if (!name || isnan(v)) {
      continue;
    }
    if (strcmp(name, "pmu.ipc") == 0) {
      dev->ipc = v;
    } else if (strcmp(name, "mem.rss") == 0) {
      dev->rss_bytes = v;
    } else if (strcmp(name, "psi.cpu.some.avg10") == 0) {
      dev->psi_cpu = v;
    } else if (strcmp(name, "psi.memory.some.avg10") == 0) {
      dev->psi_mem = v;
    } else if (strcmp(name, "psi.io.some.avg10") == 0) {
      dev->psi_io = v;
    } else if (strcmp(name, "agent.rss") == 0) {
      dev->agent_rss_bytes = v;
    } else if (strcmp(name, "proc.cpu") == 0) {
      proc_cpu = v;
    } else if (strcmp(name, "agent.cpu") == 0) {
      agent_cpu = v;
    } else if (temp_zone(name, zone, sizeof(zone)) && dev->n_temps < EM_TOP_MAX_TEMPS) {
      em_top_temp_t *t = &dev->temps[dev->n_temps++];
      copy(t->name, sizeof(t->name), zone);
      t->celsius = v;
    }
  }
  bool same = dev->prev_time_ns && dev->prev_session == d->head.session &&
              d->head.time_ns > dev->prev_time_ns;
  uint64_t dt = same ? d->head.time_ns - dev->prev_time_ns : 0;
  dev->cpu_pct = cpu_share(proc_cpu, same ? dev->prev_proc_cpu_ns : NAN, dt);
  dev->agent_cpu_pct = cpu_share(agent_cpu, same ? dev->prev_agent_cpu_ns : NAN, dt);
  dev->prev_proc_cpu_ns = proc_cpu;
  dev->prev_agent_cpu_ns = agent_cpu;
  if (!isnan(dev->rss_bytes)) {
    rss_point(dev, d->head.time_ns, dev->rss_bytes);
  }
}

static em_top_stage_t *stage_of(em_top_dev_t *dev, const char *name) {
  for (size_t i = 0; i < dev->n_stages; i++) {
    if (strcmp(dev->stages[i].name, name) == 0) {
      return &dev->stages[i];
    }
  }
  if (dev->n_stages == EM_TOP_MAX_STAGES) {
    dev->stages_dropped++;
    return NULL;
  }
  em_top_stage_t *s = &dev->stages[dev->n_stages++];
  memset(s, 0, sizeof(*s));
  copy(s->name, sizeof(s->name), name);
  s->order = dev->next_order++;
  return s;
}

static void take_stage(em_top_dev_t *dev, const em_stage_t *in, uint64_t time_ns) {
  em_top_stage_t *s = stage_of(dev, in->name ? in->name : "");
  if (!s) {
    return;
  }
  s->count = in->count;
  if (in->count == 0) {
    return;
  }
  s->p50_ns = in->p50_ns;
  s->p90_ns = in->p90_ns;
  s->p99_ns = in->p99_ns;
  s->p999_ns = in->p999_ns;
  s->max_ns = in->max_ns;
  uint64_t sec = time_ns / NS_PER_S;
  size_t slot = (size_t)(sec % EM_TOP_HISTORY_S);
  if (s->hist_s[slot] != sec) {
    s->hist_s[slot] = sec;
    s->hist_p99_ns[slot] = 0;
  }
  s->hist_p99_ns[slot] = in->p99_ns > s->hist_p99_ns[slot] ? in->p99_ns : s->hist_p99_ns[slot];
}

void em_top_model_data(em_top_dev_t *dev, const em_device_t *names, const em_data_t *d) {
  dev->messages++;
  if (d->level != EM_LEVEL_NONE) {
    dev->level = d->level;
  }
  dev->have_data = true;
  dev->time_ns = d->head.time_ns;
  dev->named = names && em_dict_knows_session(names, d->head.session);
  clear_figures(dev);
  if (dev->prev_session != d->head.session) {
    dev->n_rss = 0;
    dev->rss_next = 0;
  }
  if (dev->named) {
    take_samples(dev, names, d);
  }
  dev->prev_session = d->head.session;
  dev->prev_time_ns = dev->named ? d->head.time_ns : 0;
  for (size_t i = 0; i < d->n_stages; i++) {
    take_stage(dev, &d->stages[i], d->head.time_ns);
  }
}

int em_top_model_state(em_top_dev_t *dev, const em_state_t *s, const char *verdict_text) {
  dev->messages++;
  dev->level = s->level;
  if (s->model_change) {
    return 0; /* Not a level change: its cause stays the last one. */
  }
  dev->have_state = true;
  dev->state_level = s->level;
  dev->prev_level = s->prev_level;
  dev->state_time_ns = s->head.time_ns;
  copy(dev->rule, sizeof(dev->rule), s->rule);
  copy(dev->stage, sizeof(dev->stage), s->stage);
  copy(dev->reason, sizeof(dev->reason), s->reason);
  dev->value = em_value_double(&s->value);
  dev->bound = em_value_double(&s->bound);
  free(dev->verdict);
  dev->verdict = NULL;
  if (verdict_text) {
    dev->verdict = strdup(verdict_text);
    if (!dev->verdict) {
      return -ENOMEM;
    }
  }
  return 0;
}

void em_top_model_status(em_top_dev_t *dev, const em_status_t *s) {
  dev->messages++;
  dev->have_status = true;
  dev->online = s->online;
}
