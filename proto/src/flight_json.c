/*
 * flight_json.c - a flight recording (edgemon/flight.h) as one line of JSON with field names:
 * absolute times beside times from the trigger, column and stage names instead of indices, and
 * counter columns as the increase since the previous tick that carried a number for them (the
 * first as the total). Through the shared JSON writer (json_write.h); owns nothing, never
 * allocates, reentrant.
 */
#include <inttypes.h>

#include "forensic.h"
#include "verdict.h"

/* a - b as a JSON integer (any pair of uint64). */
static void jw_diff(em__jw_t *w, uint64_t a, uint64_t b) {
  if (a >= b) {
    em__jw_fmt(w, "%" PRIu64, a - b);
  } else {
    em__jw_fmt(w, "-%" PRIu64, b - a);
  }
}

static void jkv_diff(em__jw_t *w, const char *name, uint64_t a, uint64_t b) {
  em__jw_key(w, name);
  jw_diff(w, a, b);
}

static void j_column(em__jw_t *w, const void *flight, size_t i) {
  const em_flight_column_t *c = &((const em_flight_t *)flight)->columns[i];
  em__jkv_str(w, "name", c->name);
  em__jkv_str(w, "unit", c->unit);
  em__jkv_str(w, "kind", em__metric_kind_name(c->kind));
}

/* A tick's counter figures are increases over the column's previous carrier: the totals so far
 * are the printer's state, kept beside the recording. */
typedef struct {
  const em_flight_t *f;
  uint64_t prev[EM_FLIGHT_MAX_COLUMNS];
} ticks_t;

static void j_tick(em__jw_t *w, const void *ticks, size_t i) {
  ticks_t *s = (ticks_t *)ticks;
  const em_flight_t *f = s->f;
  const em_flight_tick_t *t = &f->ticks[i];
  em__jkv_u64(w, "mono_ns", t->mono_ns);
  jkv_diff(w, "t_ns", t->mono_ns, f->trigger_mono_ns);
  em__jw_key(w, "values");
  em__jw_open(w, '{');
  for (size_t j = 0; j < t->n_values; j++) {
    const em_flight_value_t *v = &t->values[j];
    uint64_t total;
    em__jw_key(w, f->columns[v->column].name);
    if (f->columns[v->column].kind == EM_METRIC_COUNTER && em__counter_total(&v->value, &total)) {
      jw_diff(w, total, s->prev[v->column]);
      s->prev[v->column] = total;
    } else {
      em__jw_value(w, &v->value);
    }
  }
  em__jw_close(w, '}');
}

static void j_span(em__jw_t *w, const void *flight, size_t i) {
  const em_flight_t *f = flight;
  const em_flight_span_t *s = &f->spans[i];
  em__jkv_str(w, "stage", f->stages[s->stage]);
  em__jkv_u64(w, "frame", s->frame_id);
  em__jkv_u64(w, "start_ns", s->start_ns);
  jkv_diff(w, "t_ns", s->start_ns, f->trigger_mono_ns);
  em__jkv_u64(w, "duration_ns", s->duration_ns);
}

void em__flight_json(em__jw_t *w, const void *flight) {
  const em_flight_t *f = flight;
  em__jw_uints(w, f, em__flight_times, 4);
  em__jw_texts(w, "stages", f->stages, f->n_stages);
  em__jw_objects(w, "columns", f, f->n_columns, j_column);
  ticks_t ticks = {.f = f, .prev = {0}};
  em__jw_objects(w, "ticks", &ticks, f->n_ticks, j_tick);
  em__jw_objects(w, "spans", f, f->n_spans, j_span);
  em__jw_counts(w, "truncated", &f->truncated, em__flight_cuts, 3);
  em__jw_verdict(w, f->verdict);
}

int em_flight_to_json(const em_flight_t *f, char *buf, size_t cap, size_t *out_len) {
  return em__doc_to_json(&em__flight_doc, f, buf, cap, out_len);
}
