/*
 * flight_frames.c - frames and tick figures of a flight recording (see flight_frames.h).
 *
 * Frames: the span indices are sorted by frame id (then start), and each run of one id becomes
 * a frame. Ticks are ascending, so the tick of a time is a binary search; a counter's increase
 * looks back for the previous tick carrying the column (ticks hold their values in ascending
 * column order, so each look is a binary search too).
 */
#define _POSIX_C_SOURCE 200809L
#include "flight_frames.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const em_flight_t *sort_flight; /* qsort has no context argument in C11. */

static int by_frame(const void *a, const void *b) {
  const em_flight_span_t *x = &sort_flight->spans[*(const size_t *)a];
  const em_flight_span_t *y = &sort_flight->spans[*(const size_t *)b];
  if (x->frame_id != y->frame_id) {
    return x->frame_id < y->frame_id ? -1 : 1;
  }
  return x->start_ns < y->start_ns ? -1 : x->start_ns > y->start_ns;
}

int em_flight_frames(const em_flight_t *f, em_frames_t *out) {
  memset(out, 0, sizeof(*out));
  if (f->n_spans == 0) {
    return 0;
  }
  size_t *idx = malloc(f->n_spans * sizeof(*idx));
  out->v = calloc(f->n_spans, sizeof(*out->v));
  size_t n_stages = f->n_stages ? f->n_stages : 1;
  out->durations = malloc(f->n_spans * n_stages * sizeof(*out->durations));
  if (!idx || !out->v || !out->durations) {
    free(idx);
    em_flight_frames_free(out);
    return -ENOMEM;
  }
  for (size_t i = 0; i < f->n_spans; i++) {
    idx[i] = i;
  }
  sort_flight = f;
  qsort(idx, f->n_spans, sizeof(idx[0]), by_frame);
  sort_flight = NULL;
  em_frame_t *cur = NULL;
  for (size_t i = 0; i < f->n_spans; i++) {
    const em_flight_span_t *s = &f->spans[idx[i]];
    uint64_t end = s->start_ns + s->duration_ns;
    if (end < s->start_ns) {
      end = UINT64_MAX;
    }
    if (!cur || cur->frame_id != s->frame_id) {
      cur = &out->v[out->n];
      cur->stage_ns = &out->durations[out->n * n_stages];
      out->n++;
      for (size_t k = 0; k < n_stages; k++) {
        cur->stage_ns[k] = EM_FRAME_NO_STAGE;
      }
      cur->frame_id = s->frame_id;
      cur->start_ns = s->start_ns;
      cur->end_ns = end;
    }
    if (s->start_ns < cur->start_ns) {
      cur->start_ns = s->start_ns;
    }
    if (end > cur->end_ns) {
      cur->end_ns = end;
    }
    if (s->stage < n_stages) {
      uint64_t *d = &cur->stage_ns[s->stage];
      *d = *d == EM_FRAME_NO_STAGE ? s->duration_ns : *d + s->duration_ns;
    }
    cur->n_spans++;
    cur->total_ns = cur->end_ns - cur->start_ns;
  }
  free(idx);
  return 0;
}

void em_flight_frames_free(em_frames_t *fr) {
  free(fr->v);
  free(fr->durations);
  memset(fr, 0, sizeof(*fr));
}

static const em_frames_t *sort_frames;

static int by_total(const void *a, const void *b) {
  const em_frame_t *x = &sort_frames->v[*(const size_t *)a];
  const em_frame_t *y = &sort_frames->v[*(const size_t *)b];
  if (x->total_ns != y->total_ns) {
    return x->total_ns > y->total_ns ? -1 : 1;
  }
  return x->frame_id < y->frame_id ? -1 : x->frame_id > y->frame_id;
}

void em_flight_frames_slowest(const em_frames_t *fr, size_t *order) {
  for (size_t i = 0; i < fr->n; i++) {
    order[i] = i;
  }
  sort_frames = fr;
  qsort(order, fr->n, sizeof(order[0]), by_total);
  sort_frames = NULL;
}

size_t em_flight_tick_at(const em_flight_t *f, uint64_t t_ns) {
  size_t lo = 0;
  size_t hi = f->n_ticks;
  while (lo < hi) { /* The first tick at or after t_ns. */
    size_t mid = lo + (hi - lo) / 2;
    if (f->ticks[mid].mono_ns < t_ns) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == f->n_ticks) {
    return f->n_ticks;
  }
  if (lo == 0 && f->period_ns > 0 && f->ticks[0].mono_ns - t_ns >= f->period_ns) {
    return f->n_ticks; /* Before the first tick's window. */
  }
  return lo;
}

/* The value of column in tick t, or NULL when the tick does not carry it. */
static const em_value_t *carried(const em_flight_t *f, size_t t, uint32_t column) {
  const em_flight_tick_t *tk = &f->ticks[t];
  size_t lo = 0;
  size_t hi = tk->n_values;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (tk->values[mid].column == column) {
      return &tk->values[mid].value;
    }
    if (tk->values[mid].column < column) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return NULL;
}

bool em_flight_tick_figure(const em_flight_t *f, size_t tick, uint32_t column, em_value_t *v) {
  if (tick >= f->n_ticks || column >= f->n_columns) {
    return false;
  }
  const em_value_t *now = carried(f, tick, column);
  if (!now) {
    return false;
  }
  if (f->columns[column].kind != EM_METRIC_COUNTER || now->type != EM_VALUE_UINT) {
    *v = *now;
    return true;
  }
  for (size_t t = tick; t-- > 0;) {
    const em_value_t *before = carried(f, t, column);
    if (before && before->type == EM_VALUE_UINT) {
      v->type = EM_VALUE_UINT;
      v->as.u = now->as.u >= before->as.u ? now->as.u - before->as.u : 0;
      return true;
    }
  }
  return false;
}

double em_flight_value_num(const em_value_t *v) {
  return v->type == EM_VALUE_UINT    ? (double)v->as.u
         : v->type == EM_VALUE_INT   ? (double)v->as.i
         : v->type == EM_VALUE_FLOAT ? v->as.f
                                     : NAN;
}

bool em_flight_column_measured(const em_flight_t *f, uint32_t column) {
  for (size_t t = 0; t < f->n_ticks; t++) {
    em_value_t v;
    if (em_flight_tick_figure(f, t, column, &v) && isfinite(em_flight_value_num(&v))) {
      return true;
    }
  }
  return false;
}

void em_flight_value_print(FILE *out, const em_value_t *v) {
  switch (v->type) {
  case EM_VALUE_UINT:
    fprintf(out, "%" PRIu64, v->as.u);
    break;
  case EM_VALUE_INT:
    fprintf(out, "%" PRId64, v->as.i);
    break;
  case EM_VALUE_FLOAT:
    fprintf(out, "%.6g", v->as.f);
    break;
  default:
    fputs("null", out);
  }
}
