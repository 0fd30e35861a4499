/*
 * flight_svg.c - the SVG drawing of a flight recording (see flight_svg.h).
 *
 * Layout, top to bottom: a title line, the stage lanes (LANE_H each), the time axis with its
 * labels, then one chart per measured column (CHART_H each; em_flight_column_measured), then a
 * line naming the columns no tick has a number for. The axis spans the configured window
 * (trigger - pre to trigger + post) widened to every span and tick the recording holds; x is
 * linear in device time. Numbers are written with at most two decimals, so the file is small
 * and its coordinates stable.
 */
#define _POSIX_C_SOURCE 200809L
#include "flight_svg.h"

#include "flight_frames.h"

#include "view.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define WIDTH   1140.0
#define LEFT    200.0
#define RIGHT   30.0
#define TOP     40.0
#define LANE_H  22.0
#define LANE_G  6.0
#define AXIS_H  34.0
#define CHART_H 46.0
#define CHART_G 14.0

typedef struct {
  double t0; /* Device ns at the left edge. */
  double t1; /* ... at the right edge. */
} axis_t;

static double x_of(const axis_t *a, double t) {
  return LEFT + (t - a->t0) / (a->t1 - a->t0) * (WIDTH - LEFT - RIGHT);
}

static axis_t make_axis(const em_flight_t *f) {
  double trig = (double)f->trigger_mono_ns;
  axis_t a = {trig - (double)f->pre_ns, trig + (double)f->post_ns};
  for (size_t i = 0; i < f->n_spans; i++) {
    double s = (double)f->spans[i].start_ns;
    double e = s + (double)f->spans[i].duration_ns;
    a.t0 = s < a.t0 ? s : a.t0;
    a.t1 = e > a.t1 ? e : a.t1;
  }
  for (size_t i = 0; i < f->n_ticks; i++) {
    double t = (double)f->ticks[i].mono_ns;
    a.t0 = t < a.t0 ? t : a.t0;
    a.t1 = t > a.t1 ? t : a.t1;
  }
  if (a.t1 - a.t0 < 1e6) {
    a.t1 = a.t0 + 1e6;
  }
  return a;
}

/* A step of 1, 2 or 5 times a power of ten ms giving about 10 labels over span_ms. */
static double nice_step(double span_ms) {
  double raw = span_ms / 10.0;
  double p = pow(10.0, floor(log10(raw)));
  return raw / p < 2 ? p : raw / p < 5 ? 2 * p : 5 * p;
}

/* The bound (ns) of the trigger's stage rule, or a negative number when there is none. */
static double budget_ns(const em_flight_t *f) {
  double b = em_flight_value_num(&f->trigger.bound);
  return f->trigger.stage && isfinite(b) ? b : -1.0;
}

static void lanes(FILE *out, const em_flight_t *f, const axis_t *a) {
  double bound = budget_ns(f);
  for (size_t k = 0; k < f->n_stages; k++) {
    double y = TOP + (double)k * (LANE_H + LANE_G);
    fprintf(out, "<rect class=\"lane\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"/>\n",
            LEFT, y, WIDTH - LEFT - RIGHT, LANE_H);
    fprintf(out, "<text class=\"label\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\">", LEFT - 8,
            y + LANE_H * 0.7);
    em_view_xml(out, f->stages[k]);
    fputs("</text>\n", out);
  }
  for (size_t i = 0; i < f->n_spans; i++) {
    const em_flight_span_t *s = &f->spans[i];
    double y = TOP + (double)s->stage * (LANE_H + LANE_G) + 2;
    double x0 = x_of(a, (double)s->start_ns);
    double w = x_of(a, (double)s->start_ns + (double)s->duration_ns) - x0;
    const char *stage = s->stage < f->n_stages ? f->stages[s->stage] : "?";
    bool over =
        bound >= 0 && strcmp(stage, f->trigger.stage) == 0 && (double)s->duration_ns > bound;
    fprintf(out,
            "<rect class=\"span%s\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\">"
            "<title>frame %llu, ",
            over ? " over" : "", x0, y, w < 0.5 ? 0.5 : w, LANE_H - 4,
            (unsigned long long)s->frame_id);
    em_view_xml(out, stage);
    fprintf(out, ", %.3f ms</title></rect>\n", (double)s->duration_ns / 1e6);
  }
}

static void axis(FILE *out, const em_flight_t *f, const axis_t *a, double y, double bottom) {
  double trig = (double)f->trigger_mono_ns;
  double lo_ms = (a->t0 - trig) / 1e6;
  double hi_ms = (a->t1 - trig) / 1e6;
  double step = nice_step(hi_ms - lo_ms);
  fprintf(out, "<line class=\"axis\" x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", LEFT, y,
          WIDTH - RIGHT, y);
  for (double ms = ceil(lo_ms / step) * step; ms <= hi_ms; ms += step) {
    double x = x_of(a, trig + ms * 1e6);
    fprintf(out,
            "<line class=\"grid\" x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>"
            "<text class=\"tick\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%+g</text>\n",
            x, TOP, x, bottom, x, y + 14, fabs(ms) < step / 1e6 ? 0.0 : ms);
  }
  fprintf(out,
          "<text class=\"label\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\">ms from trigger"
          "</text>\n",
          WIDTH - RIGHT, y + 28);
}

static void chart(FILE *out, const em_flight_t *f, const axis_t *a, uint32_t col, double y) {
  double lo = INFINITY;
  double hi = -INFINITY;
  for (size_t t = 0; t < f->n_ticks; t++) {
    em_value_t v;
    double x = em_flight_tick_figure(f, t, col, &v) ? em_flight_value_num(&v) : NAN;
    if (isfinite(x)) {
      lo = x < lo ? x : lo;
      hi = x > hi ? x : hi;
    }
  }
  const em_flight_column_t *c = &f->columns[col];
  fprintf(out, "<rect class=\"chart\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"/>\n",
          LEFT, y, WIDTH - LEFT - RIGHT, CHART_H);
  fprintf(out, "<text class=\"label\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\">", LEFT - 8,
          y + 16);
  em_view_xml(out, c->name);
  fprintf(out, "</text><text class=\"unit\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\">", LEFT - 8,
          y + 30);
  em_view_xml(out, c->unit);
  fputs(c->kind == EM_METRIC_COUNTER ? " per tick" : "", out);
  fputs("</text>\n", out);
  if (isfinite(lo)) {
    fprintf(out,
            "<text class=\"unit\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\">%.6g .. %.6g"
            "</text>\n",
            WIDTH - RIGHT - 4, y + 12, lo, hi);
  }
  if (!isfinite(lo)) {
    return;
  }
  double span = hi > lo ? hi - lo : 1.0;
  fputs("<polyline class=\"series\" points=\"", out);
  for (size_t t = 0; t < f->n_ticks; t++) {
    em_value_t v;
    double val = em_flight_tick_figure(f, t, col, &v) ? em_flight_value_num(&v) : NAN;
    if (isfinite(val)) {
      fprintf(out, "%.2f,%.2f ", x_of(a, (double)f->ticks[t].mono_ns),
              y + CHART_H - 4 - (val - lo) / span * (CHART_H - 8));
    }
  }
  fputs("\"/>\n", out);
}

int em_flight_svg(FILE *out, const em_flight_t *f, const char *title) {
  axis_t a = make_axis(f);
  double lanes_bottom = TOP + (double)f->n_stages * (LANE_H + LANE_G);
  double axis_y = lanes_bottom + 4;
  double charts_top = axis_y + AXIS_H;
  uint32_t measured = 0;
  for (uint32_t c = 0; c < f->n_columns; c++) {
    measured += em_flight_column_measured(f, c);
  }
  double charts_bottom = charts_top + (double)measured * (CHART_H + CHART_G);
  double notes_y = charts_bottom + 6;
  double height = notes_y + (measured < f->n_columns ? 20 : 0) + 10;
  double trig = (double)f->trigger_mono_ns;
  fprintf(out,
          "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "viewBox=\"0 0 %.0f %.0f\">\n",
          WIDTH, height, WIDTH, height);
  fputs("<style>\n"
        "text{font-family:sans-serif;font-size:11px;fill:#222}\n"
        ".title{font-size:13px;font-weight:bold}\n"
        ".unit{fill:#666;font-size:10px}\n"
        ".lane{fill:#000;fill-opacity:0.03}\n"
        ".pre{fill:#e8f0fb}\n"
        ".post{fill:#fbeee6}\n"
        ".span{fill:#4a7bd0;fill-opacity:0.85}\n"
        ".span.over{fill:#d0452f}\n"
        ".trigger{stroke:#b00;stroke-width:2}\n"
        ".axis{stroke:#444}\n"
        ".grid{stroke:#ccc;stroke-width:0.5}\n"
        ".chart{fill:#fafafa;stroke:#ddd}\n"
        ".series{fill:none;stroke:#2a6;stroke-width:1.5}\n"
        "</style>\n",
        out);
  fprintf(out, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"#fff\"/>\n", WIDTH,
          height);
  fprintf(out, "<text class=\"title\" x=\"%.2f\" y=\"22\">", LEFT);
  em_view_xml(out, title);
  fputs("</text>\n", out);
  double pre_x = x_of(&a, trig - (double)f->pre_ns);
  double trig_x = x_of(&a, trig);
  double post_x = x_of(&a, trig + (double)f->post_ns);
  double shade_h = charts_bottom - TOP;
  fprintf(out,
          "<rect class=\"pre\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"/>\n"
          "<rect class=\"post\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"/>\n",
          pre_x, TOP - 4, trig_x - pre_x, shade_h, trig_x, TOP - 4, post_x - trig_x, shade_h);
  axis(out, f, &a, axis_y, charts_bottom);
  lanes(out, f, &a);
  uint32_t row = 0;
  for (uint32_t c = 0; c < f->n_columns; c++) {
    if (em_flight_column_measured(f, c)) {
      chart(out, f, &a, c, charts_top + (double)row++ * (CHART_H + CHART_G));
    }
  }
  if (measured < f->n_columns) {
    fprintf(out,
            "<text id=\"not-measured\" class=\"unit\" x=\"%.2f\" y=\"%.2f\">not measured: ", LEFT,
            notes_y + 8);
    const char *sep = "";
    for (uint32_t c = 0; c < f->n_columns; c++) {
      if (!em_flight_column_measured(f, c)) {
        fputs(sep, out);
        em_view_xml(out, f->columns[c].name);
        sep = ", ";
      }
    }
    fputs("</text>\n", out);
  }
  fprintf(out,
          "<line id=\"trigger\" class=\"trigger\" x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" "
          "y2=\"%.2f\"><title>trigger</title></line>\n",
          trig_x, TOP - 6, trig_x, charts_bottom);
  fputs("</svg>\n", out);
  return ferror(out) ? -1 : 0;
}
