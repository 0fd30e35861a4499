/*
 * flight_table.c - the text table of a flight recording (see flight_table.h).
 *
 * Times: the trigger's CLOCK_REALTIME as RFC 3339 UTC; every other time is the device's
 * CLOCK_MONOTONIC, printed relative to the trigger. Durations are ms with three decimals, so a
 * reader (or a test) can compare them with the spans' ns exactly to the microsecond.
 */
#define _POSIX_C_SOURCE 200809L
#include "flight_table.h"

#include "flight_frames.h"
#include "flight_verdict.h"
#include "view.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void rfc3339(uint64_t ns, char *buf, size_t cap) {
  time_t s = (time_t)(ns / 1000000000u);
  struct tm tm;
  gmtime_r(&s, &tm);
  char base[32];
  strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf, cap, "%s.%03uZ", base, (unsigned)(ns % 1000000000u / 1000000u));
}

static void print_trigger(FILE *out, const em_flight_t *f, const char *title) {
  const em_flight_trigger_t *t = &f->trigger;
  char when[48];
  rfc3339(f->head.time_ns, when, sizeof(when));
  fprintf(out, "flight recording %s (session %" PRIu32 ", number %" PRIu32 ")%s\n", title,
          f->head.session, f->number, f->historical ? ", replayed from the spool" : "");
  if (f->verdict) { /* Why the stage got slow comes first: the figures below are its support. */
    em_flight_verdict_print(out, f->verdict, "", 0, 0);
    fputc('\n', out);
  }
  fprintf(out, "trigger:   %s at %s, level %s", em_flight_cause_name(t->cause), when,
          em_level_name(t->level));
  if (t->prev_level != EM_LEVEL_NONE) {
    fprintf(out, " (from %s)", em_level_name(t->prev_level));
  }
  fputc('\n', out);
  if (t->rule || t->stage) {
    fprintf(out, "rule:      %s%s%s", t->rule ? t->rule : "-", t->stage ? " on stage " : "",
            t->stage ? t->stage : "");
    if (t->value.type != EM_VALUE_ABSENT || t->bound.type != EM_VALUE_ABSENT) {
      fputs(", value ", out);
      em_flight_value_print(out, &t->value);
      fputs(" against a bound of ", out);
      em_flight_value_print(out, &t->bound);
      if (t->stage) {
        fprintf(out, " (%.3f ms / %.3f ms)", em_flight_value_num(&t->value) / 1e6,
                em_flight_value_num(&t->bound) / 1e6);
      }
    }
    fputc('\n', out);
  }
  if (t->reason) {
    fprintf(out, "reason:    %s\n", t->reason);
  }
  fprintf(out,
          "window:    %.3f s before, %.3f s after; %zu ticks every %.3f ms; %zu spans of %zu "
          "stages\n",
          (double)f->pre_ns / 1e9, (double)f->post_ns / 1e9, f->n_ticks, (double)f->period_ns / 1e6,
          f->n_spans, f->n_stages);
  const em_flight_truncation_t *tr = &f->truncated;
  if (tr->spans_cut || tr->ticks_cut || tr->spans_overwritten) {
    fprintf(out,
            "left out:  %" PRIu64 " spans and %" PRIu64 " ticks to fit the size cap, %" PRIu64
            " spans overwritten in the ring\n",
            tr->spans_cut, tr->ticks_cut, tr->spans_overwritten);
  } else {
    fputs("left out:  nothing\n", out);
  }
  const char *sep = "not measured: ";
  for (uint32_t c = 0; c < f->n_columns; c++) {
    if (!em_flight_column_measured(f, c)) {
      fprintf(out, "%s%s", sep, f->columns[c].name);
      sep = ", ";
    }
  }
  if (*sep == ',') {
    fputs(" (no number in any tick: not supported on this board or target)\n", out);
  }
}

/* Signed ms of device time t from the trigger. */
static double from_trigger_ms(const em_flight_t *f, uint64_t t) {
  return t >= f->trigger_mono_ns ? (double)(t - f->trigger_mono_ns) / 1e6
                                 : -(double)(f->trigger_mono_ns - t) / 1e6;
}

/* The figures of the tick whose window holds end_ns: only those with a number in that tick
 * (a column the tick did not read, such as PSI between its slower samples, or one never
 * measured, which print_trigger names, is left out). */
static void print_tick(FILE *out, const em_flight_t *f, uint64_t end_ns) {
  size_t t = em_flight_tick_at(f, end_ns);
  if (t >= f->n_ticks) {
    fputs("            tick: none holds the frame's end\n", out);
    return;
  }
  fprintf(out, "            tick %+.3f ms:", from_trigger_ms(f, f->ticks[t].mono_ns));
  const char *sep = " ";
  for (uint32_t c = 0; c < f->n_columns; c++) {
    em_value_t v;
    if (!em_flight_tick_figure(f, t, c, &v) || !isfinite(em_flight_value_num(&v))) {
      continue;
    }
    fprintf(out, "%s%s ", sep, f->columns[c].name);
    sep = ", ";
    if (f->columns[c].kind == EM_METRIC_COUNTER && v.type == EM_VALUE_UINT) {
      fputc('+', out);
    }
    em_flight_value_print(out, &v);
    if (strcmp(f->columns[c].unit, "1") != 0) {
      fprintf(out, " %s", f->columns[c].unit);
    }
  }
  fputc('\n', out);
}

int em_flight_table(FILE *out, const em_flight_t *f, const char *title, size_t top) {
  print_trigger(out, f, title);
  em_frames_t fr;
  if (em_flight_frames(f, &fr) != 0) {
    return -ENOMEM;
  }
  size_t *order = malloc((fr.n ? fr.n : 1) * sizeof(*order));
  if (!order) {
    em_flight_frames_free(&fr);
    return -ENOMEM;
  }
  em_flight_frames_slowest(&fr, order);
  size_t shown = top < fr.n ? top : fr.n;
  fprintf(out, "\nslowest %zu of %zu frames (ms; offset: the frame's start from the trigger):\n",
          shown, fr.n);
  fprintf(out, "%12s %11s %10s", "frame", "offset", "total");
  for (size_t k = 0; k < f->n_stages; k++) {
    fprintf(out, " %12.12s", f->stages[k]);
  }
  fputc('\n', out);
  for (size_t i = 0; i < shown; i++) {
    const em_frame_t *fm = &fr.v[order[i]];
    fprintf(out, "%12" PRIu64 " %+11.3f %10.3f", fm->frame_id, from_trigger_ms(f, fm->start_ns),
            (double)fm->total_ns / 1e6);
    for (size_t k = 0; k < f->n_stages; k++) {
      if (fm->stage_ns[k] == EM_FRAME_NO_STAGE) {
        fprintf(out, " %12s", "-");
      } else {
        fprintf(out, " %12.3f", (double)fm->stage_ns[k] / 1e6);
      }
    }
    fputc('\n', out);
    print_tick(out, f, fm->end_ns);
  }
  free(order);
  em_flight_frames_free(&fr);
  return 0;
}

int em_flight_line(FILE *out, const char *device, const uint8_t *cbor, size_t len, bool json,
                   size_t *error_offset) {
  size_t scratch_len = em_flight_scratch_bytes(len);
  void *scratch = malloc(scratch_len);
  em_flight_t f;
  int rc = scratch ? em_flight_decode(cbor, len, &f, scratch, scratch_len, error_offset) : -ENOMEM;
  if (rc != 0) {
    free(scratch);
    return rc;
  }
  const em_flight_trigger_t *t = &f.trigger;
  em_view_record_t head = {.kind = "flight",
                           .device = device,
                           .session = f.head.session,
                           .number = f.number,
                           .time_ns = f.head.time_ns,
                           .cause = em_flight_cause_name(t->cause),
                           .level = em_level_name(t->level),
                           .rule = t->rule};
  em_view_record_head(out, &head, json);
  if (json) {
    fprintf(out, ",\"ticks\":%zu,\"spans\":%zu,\"bytes\":%zu,\"historical\":%s}}\n", f.n_ticks,
            f.n_spans, len, f.historical ? "true" : "false");
  } else {
    fprintf(out, "%zu ticks, %zu spans, %zu bytes%s\n", f.n_ticks, f.n_spans, len,
            f.historical ? " (replayed)" : "");
    /* The functions came with the recording, not with the level change's verdict above it. */
    em_flight_verdict_functions(out, f.verdict, "             ", 3);
  }
  free(scratch);
  return 0;
}
