/*
 * top_draw.c - the frames of `edgemon-cli top` (see top_draw.h).
 *
 * A frame is built line by line through `line_*` helpers that count the columns each line has
 * used and drop what passes the screen's width; escapes cost no column. The screen, top down:
 *
 *   title      device (i/n), board, agent, model, PAUSED, the clock
 *   level      LEVEL since TIME from PREV, rule, the stage's figure against its bound
 *   cause      the reason, then the verdict's head and top causes (as flight_verdict writes)
 *   figures    CPU, IPC, RSS and slope, PSI; temperatures, the agent's own CPU and RSS
 *   stages     header, then one row per stage as many as fit
 *   footer     the keys, on the last row
 */
#define _POSIX_C_SOURCE 200809L
#include "top_draw.h"

#include "view.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NS_PER_S      1e9
#define MIB           (1024.0 * 1024.0)
#define NAME_W        16 /* The stage column. */
#define NUM_W         8  /* p50, p99. */
#define BUDGET_W      14 /* "p99<=40.0 ms". */
#define PCT_W         5  /* "100%". */
#define COUNT_W       8  /* Spans in the window. */
#define MAX_SPARK     ((int)EM_TOP_HISTORY_S)
#define VERDICT_LINES 4 /* The verdict's head and three causes. */

/* The frame being written, and the line being written in it. */
typedef struct {
  em_top_frame_t *f;
  int width;  /* Screen columns. */
  int rows;   /* Screen rows. */
  int row;    /* Lines ended so far. */
  int cols;   /* Columns used on the current line. */
  bool color; /* Colours on. */
  bool utf8;
  bool failed; /* An allocation failed. */
} out_t;

static void put(out_t *o, const char *s, size_t n) {
  em_top_frame_t *f = o->f;
  if (o->failed || o->row >= o->rows) {
    return;
  }
  if (f->len + n + 1 > f->cap) {
    size_t cap = f->cap ? f->cap : 4096;
    while (cap < f->len + n + 1) {
      cap *= 2;
    }
    char *b = realloc(f->buf, cap);
    if (!b) {
      o->failed = true;
      return;
    }
    f->buf = b;
    f->cap = cap;
  }
  memcpy(f->buf + f->len, s, n);
  f->len += n;
  f->buf[f->len] = '\0';
}

/* An escape sequence (no column), only with colour on. */
static void sgr(out_t *o, const char *seq) {
  if (o->color && seq && *seq) {
    put(o, seq, strlen(seq));
  }
}

/* One glyph of one column: the UTF-8 one, or the ASCII one without UTF-8. */
static void glyph(out_t *o, const char *utf8, char ascii) {
  if (o->cols >= o->width) {
    return;
  }
  if (o->utf8) {
    put(o, utf8, strlen(utf8));
  } else {
    put(o, &ascii, 1);
  }
  o->cols++;
}

/* The byte c as the screen shows it, into out (5 bytes): itself when printable ASCII, else
 * \xNN. Returns its length (its columns). */
static size_t shown(unsigned char c, char *out) {
  if (c >= 0x20 && c < 0x7f) {
    out[0] = (char)c;
    out[1] = '\0';
    return 1;
  }
  snprintf(out, 5, "\\x%02x", c);
  return 4;
}

/* Text, of the device or not, each byte as shown() writes it, cut at the screen's edge. */
static void text(out_t *o, const char *s) {
  for (; s && *s && o->cols < o->width; s++) {
    char esc[5];
    size_t n = shown((unsigned char)*s, esc);
    for (size_t i = 0; i < n && o->cols < o->width; i++) {
      put(o, esc + i, 1);
      o->cols++;
    }
  }
}

static __attribute__((format(printf, 2, 3))) void textf(out_t *o, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  text(o, buf);
}

/* s in a column of `width`, right-aligned when `right`, cut to fit; bytes other than printable
 * ASCII as \xNN before it is cut. */
static void cell(out_t *o, const char *s, int width, bool right) {
  char safe[256], buf[256];
  size_t n = 0;
  for (; s && *s && n + 5 < sizeof(safe); s++) {
    n += shown((unsigned char)*s, safe + n);
  }
  safe[n] = '\0';
  snprintf(buf, sizeof(buf), right ? "%*.*s" : "%-*.*s", width, width, safe);
  text(o, buf);
}

static void pad_to(out_t *o, int col) {
  while (o->cols < col && o->cols < o->width) {
    put(o, " ", 1);
    o->cols++;
  }
}

/* Ends the line: attributes reset, the rest of the row cleared, and the next row unless this
 * was the last (a newline there would scroll). */
static void endl(out_t *o) {
  if (o->row >= o->rows) {
    return;
  }
  sgr(o, "\x1b[0m");
  if (o->cols < o->width) { /* At the edge a wrap is pending: EL would erase the last cell. */
    put(o, "\x1b[K", 3);
  }
  if (o->row + 1 < o->rows) {
    put(o, "\r\n", 2);
  }
  o->row++;
  o->cols = 0;
}

/* Rows left for the body, the footer's kept. */
static int body_left(const out_t *o) {
  return o->rows - 1 - o->row;
}

/* A figure with `decimals`, or "-" when absent. */
static void figure(char *buf, size_t cap, double v, int decimals, const char *unit) {
  if (isnan(v)) {
    snprintf(buf, cap, "-");
  } else {
    snprintf(buf, cap, "%.*f%s", decimals, v, unit);
  }
}

const char *em_top_sort_name(em_top_sort_t sort) {
  static const char *const names[EM_TOP_SORT_COUNT_] = {"order", "name", "p99", "budget"};
  return sort < EM_TOP_SORT_COUNT_ ? names[sort] : "?";
}

/* A rule's value or bound in the unit of its type, as the birth names it (em_view_rule_figure). */
static void rule_figure(const em_device_t *names, const char *rule_id, double v, char *buf,
                        size_t cap) {
  const char *type = "";
  for (size_t i = 0; names && i < names->n_budgets; i++) {
    type = strcmp(names->budgets[i].id, rule_id) == 0 ? names->budgets[i].rule : type;
  }
  em_view_rule_figure(type, v, buf, cap);
}

/* ---- the top: title, level, cause, figures ------------------------------------------------ */

static void draw_title(out_t *o, const em_top_screen_t *s, const em_top_model_t *m,
                       const em_top_dev_t *d, const em_device_t *names) {
  int width = o->width;
  bool clock_fits = width >= 40; /* The clock keeps the row's last 9 columns. */
  o->width = clock_fits ? width - 9 : width;
  sgr(o, em_view_bold());
  text(o, "edgemon top");
  sgr(o, "\x1b[0m");
  if (d) {
    text(o, "  ");
    sgr(o, em_view_bold());
    text(o, d->id);
    sgr(o, "\x1b[0m");
    textf(o, " (%zu/%zu)", s->selected + 1, em_top_model_count(m));
    if (names && names->have_birth) {
      char model[EM_IDENTITY_TEXT_MAX];
      em_identity_text(&names->model, model, sizeof(model));
      text(o, "  board ");
      text(o, names->board);
      text(o, "  agent ");
      text(o, names->agent_version);
      text(o, "  model ");
      text(o, model);
    }
    if (d->have_status && !d->online) {
      text(o, "  ");
      sgr(o, em_view_alert());
      text(o, "OFFLINE");
      sgr(o, "\x1b[0m");
    }
  }
  if (s->paused) {
    text(o, "  ");
    sgr(o, "\x1b[7m");
    text(o, "PAUSED");
    sgr(o, "\x1b[0m");
  }
  o->width = width;
  if (clock_fits) {
    char clock[16];
    em_view_clock(s->now_ns, clock, sizeof(clock));
    clock[8] = '\0'; /* HH:MM:SS */
    pad_to(o, width - 8);
    text(o, clock);
  }
  endl(o);
}

static void draw_level(out_t *o, const em_top_dev_t *d, const em_device_t *names) {
  text(o, "LEVEL ");
  sgr(o, em_view_level_on(d->level));
  sgr(o, em_view_bold());
  text(o, d->level == EM_LEVEL_NONE ? "-" : em_level_name(d->level));
  sgr(o, "\x1b[0m");
  if (d->have_state) {
    char clock[16];
    em_view_clock(d->state_time_ns, clock, sizeof(clock));
    if (d->state_level != d->level) { /* Data stated another level since the change. */
      textf(o, "  changed to %s", em_level_name(d->state_level));
    }
    textf(o, "  since %s", clock);
    if (d->prev_level != d->state_level) {
      textf(o, " from %s", em_level_name(d->prev_level));
    }
    if (d->rule[0]) {
      text(o, "  rule ");
      text(o, d->rule);
    }
    if (!isnan(d->value) && !isnan(d->bound)) {
      char v[32], b[32];
      rule_figure(names, d->rule, d->value, v, sizeof(v));
      rule_figure(names, d->rule, d->bound, b, sizeof(b));
      text(o, "  ");
      if (d->stage[0]) {
        text(o, d->stage);
        text(o, " ");
      }
      textf(o, "%s, bound %s", v, b);
    }
  }
  endl(o);
  if (d->malformed > 0) {
    sgr(o, em_view_alert());
    textf(o, "! %llu message(s) from this device did not decode", (unsigned long long)d->malformed);
    endl(o);
  }
}

/* The last change's reason and its verdict, as many lines as the verdict has (at most
 * VERDICT_LINES) and the screen allows. */
static void draw_cause(out_t *o, const em_top_dev_t *d) {
  if (!d->have_state) {
    return;
  }
  text(o, "CAUSE ");
  text(o, d->reason[0] ? d->reason : d->rule[0] ? d->rule : "-");
  endl(o);
  const char *line = d->verdict;
  for (int n = 0; line && *line && n < VERDICT_LINES && body_left(o) > 4; n++) {
    const char *nl = strchr(line, '\n');
    size_t len = nl ? (size_t)(nl - line) : strlen(line);
    char buf[512];
    snprintf(buf, sizeof(buf), "%.*s", (int)(len < sizeof(buf) ? len : sizeof(buf) - 1), line);
    text(o, "      ");
    text(o, buf);
    endl(o);
    line = nl ? nl + 1 : NULL;
  }
}

static void draw_figures(out_t *o, const em_top_dev_t *d) {
  char cpu[24], ipc[24], rss[24], slope[32], psi[3][24];
  figure(cpu, sizeof(cpu), d->cpu_pct, 1, "%");
  figure(ipc, sizeof(ipc), d->ipc, 2, "");
  figure(rss, sizeof(rss), d->rss_bytes / MIB, 1, " MiB");
  if (isnan(d->rss_slope_bytes_per_min)) {
    snprintf(slope, sizeof(slope), "-");
  } else {
    snprintf(slope, sizeof(slope), "%+.1f MiB/min", d->rss_slope_bytes_per_min / MIB);
  }
  figure(psi[0], sizeof(psi[0]), d->psi_cpu, 1, "%");
  figure(psi[1], sizeof(psi[1]), d->psi_mem, 1, "%");
  figure(psi[2], sizeof(psi[2]), d->psi_io, 1, "%");
  textf(o, "CPU %s  IPC %s  RSS %s (%s)  PSI cpu %s mem %s io %s", cpu, ipc, rss, slope, psi[0],
        psi[1], psi[2]);
  endl(o);
  text(o, "TEMP");
  for (size_t i = 0; i < d->n_temps; i++) {
    text(o, " ");
    text(o, d->temps[i].name);
    textf(o, " %.1fC", d->temps[i].celsius);
  }
  if (d->n_temps == 0) {
    text(o, " -");
  }
  char acpu[24], arss[24];
  figure(acpu, sizeof(acpu), d->agent_cpu_pct, 2, "%");
  figure(arss, sizeof(arss), d->agent_rss_bytes / MIB, 1, " MiB");
  textf(o, "  AGENT cpu %s rss %s", acpu, arss);
  endl(o);
}

/* ---- the stages --------------------------------------------------------------------------- */

/* What a stage is held to: the statistic its budget judges, that statistic now, and the
 * bound; false when the device's birth gives the stage no budget. */
typedef struct {
  const char *stat; /* "p99", "max", ... */
  double value_ns;
  double bound_ns;
} budget_t;

static bool stage_budget(const em_device_t *names, const em_top_stage_t *st, budget_t *b) {
  const em_dict_budget_t *r = names ? em_dict_stage_budget(names, st->name) : NULL;
  double bound = r ? em_value_double(&r->bound) : NAN;
  if (!r || isnan(bound) || bound <= 0) {
    return false;
  }
  const char *dot = strrchr(r->id, '.');
  bool percentile = strcmp(r->rule, "percentile") == 0;
  b->stat = percentile ? (dot && dot[1] == 'p' ? dot + 1 : "p99") : "max";
  b->bound_ns = bound;
  b->value_ns = strcmp(b->stat, "p50") == 0    ? (double)st->p50_ns
                : strcmp(b->stat, "p90") == 0  ? (double)st->p90_ns
                : strcmp(b->stat, "p999") == 0 ? (double)st->p999_ns
                : strcmp(b->stat, "max") == 0  ? (double)st->max_ns
                                               : (double)st->p99_ns;
  return true;
}

/* The sort key of a stage under s (larger first for p99 and budget). */
static double sort_key(em_top_sort_t s, const em_device_t *names, const em_top_stage_t *st) {
  budget_t b;
  switch (s) {
  case EM_TOP_SORT_P99:
    return st->count ? (double)st->p99_ns : -1;
  case EM_TOP_SORT_BUDGET:
    return st->count && stage_budget(names, st, &b) ? b.value_ns / b.bound_ns : -1;
  default:
    return -(double)st->order;
  }
}

/* True when stage a goes above stage b. */
static bool before(em_top_sort_t s, const em_device_t *names, const em_top_stage_t *a,
                   const em_top_stage_t *b) {
  if (s == EM_TOP_SORT_NAME) {
    return strcmp(a->name, b->name) < 0;
  }
  double ka = sort_key(s, names, a), kb = sort_key(s, names, b);
  return ka != kb ? ka > kb : a->order < b->order;
}

static const char *bar_color(double ratio) {
  return ratio >= 1.0 ? "\x1b[31m" : ratio >= 0.75 ? "\x1b[33m" : "\x1b[32m";
}

/* [####   ] the share of the budget used, the eighths of a cell in UTF-8. */
static void draw_bar(out_t *o, double ratio, int width) {
  static const char *const eighths[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
  glyph(o, "[", '[');
  sgr(o, bar_color(ratio));
  double cells = fmin(ratio, 1.0) * width;
  int full = (int)cells;
  int part = (int)((cells - full) * 8);
  for (int i = 0; i < width; i++) {
    if (i < full) {
      glyph(o, "█", '|');
    } else if (i == full && part > 0 && o->utf8) {
      glyph(o, eighths[part], ' ');
    } else {
      glyph(o, " ", ' ');
    }
  }
  sgr(o, "\x1b[0m");
  glyph(o, "]", ']');
}

/* The last `width` seconds of p99 up to the device's latest second, scaled to the larger of
 * their peak and the bound; a second without spans is blank. */
static void draw_spark(out_t *o, const em_top_stage_t *st, uint64_t last_s, double bound_ns,
                       int width) {
  static const char *const blocks[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  static const char ascii[] = "_.-:=+*#";
  double peak = bound_ns > 0 ? bound_ns : 0;
  for (int i = 0; i < width; i++) {
    uint64_t sec = last_s - (uint64_t)(width - 1 - i);
    size_t slot = (size_t)(sec % EM_TOP_HISTORY_S);
    if (st->hist_s[slot] == sec) {
      peak = fmax(peak, (double)st->hist_p99_ns[slot]);
    }
  }
  for (int i = 0; i < width; i++) {
    uint64_t sec = last_s - (uint64_t)(width - 1 - i);
    size_t slot = (size_t)(sec % EM_TOP_HISTORY_S);
    if (st->hist_s[slot] != sec || peak <= 0) {
      glyph(o, " ", ' ');
      continue;
    }
    double v = (double)st->hist_p99_ns[slot];
    int level = (int)ceil(v / peak * 8) - 1;
    level = level < 0 ? 0 : level > 7 ? 7 : level;
    bool over = bound_ns > 0 && v > bound_ns;
    sgr(o, over ? em_view_alert() : NULL);
    glyph(o, blocks[level], ascii[level]);
    sgr(o, over ? "\x1b[0m" : NULL);
  }
}

/* The widths of the bar and the sparkline that fit the screen (0: left out). */
static void stage_widths(int cols, int *bar, int *spark) {
  int fixed = NAME_W + 1 + NUM_W + 1 + NUM_W + 2 + BUDGET_W + 1 + PCT_W + 2 + COUNT_W;
  int left = cols - fixed;
  *bar = left >= 12 ? (left / 3 > 20 ? 20 : left / 3) : 0;
  left -= *bar ? *bar + 3 : 0;
  *spark = left >= 10 ? (left - 2 > MAX_SPARK ? MAX_SPARK : left - 2) : 0;
}

static void draw_stage(out_t *o, const em_top_dev_t *d, const em_device_t *names,
                       const em_top_stage_t *st, int bar_w, int spark_w) {
  char p50[16] = "-", p99[16] = "-", bud[32] = "", pct[16] = "-", n[24];
  budget_t b;
  bool has = stage_budget(names, st, &b);
  if (st->count) {
    em_view_ms((double)st->p50_ns, p50, sizeof(p50));
    em_view_ms((double)st->p99_ns, p99, sizeof(p99));
  }
  if (has) {
    char bound[16];
    em_view_ms(b.bound_ns, bound, sizeof(bound));
    snprintf(bud, sizeof(bud), "%s<=%s", b.stat, bound);
  }
  double ratio = has && st->count ? b.value_ns / b.bound_ns : NAN;
  if (!isnan(ratio)) {
    snprintf(pct, sizeof(pct), "%.0f%%", ratio * 100);
  }
  snprintf(n, sizeof(n), "%llu", (unsigned long long)st->count);
  cell(o, st->name, NAME_W, false);
  text(o, " ");
  cell(o, p50, NUM_W, true);
  text(o, " ");
  bool over = !isnan(ratio) && ratio > 1.0;
  sgr(o, over ? em_view_alert() : NULL);
  cell(o, p99, NUM_W, true);
  sgr(o, over ? "\x1b[0m" : NULL);
  text(o, "  ");
  cell(o, bud, BUDGET_W, false);
  text(o, " ");
  if (bar_w) {
    if (isnan(ratio)) {
      pad_to(o, o->cols + bar_w + 2);
    } else {
      draw_bar(o, ratio, bar_w);
    }
    text(o, " ");
  }
  cell(o, pct, PCT_W, true);
  text(o, "  ");
  if (spark_w) {
    draw_spark(o, st, (uint64_t)((double)d->time_ns / NS_PER_S), has ? b.bound_ns : 0, spark_w);
    text(o, "  ");
  }
  cell(o, n, COUNT_W, true);
  endl(o);
}

static void draw_stages(out_t *o, const em_top_screen_t *s, const em_top_dev_t *d,
                        const em_device_t *names) {
  int bar_w = 0, spark_w = 0;
  stage_widths(o->width, &bar_w, &spark_w);
  sgr(o, em_view_bold());
  cell(o, "STAGE", NAME_W, false);
  text(o, " ");
  cell(o, "p50 ms", NUM_W, true);
  text(o, " ");
  cell(o, "p99 ms", NUM_W, true);
  text(o, "  ");
  cell(o, "BUDGET ms", BUDGET_W, false);
  text(o, " ");
  if (bar_w) {
    cell(o, "USE", bar_w + 2, false);
    text(o, " ");
  }
  cell(o, "USE%", PCT_W, true);
  text(o, "  ");
  if (spark_w) {
    char head[64];
    snprintf(head, sizeof(head), "p99, last %ds", spark_w);
    cell(o, head, spark_w, false);
    text(o, "  ");
  }
  cell(o, "SPANS", COUNT_W, true);
  sgr(o, "\x1b[0m");
  endl(o);
  size_t idx[EM_TOP_MAX_STAGES];
  for (size_t i = 0; i < d->n_stages; i++) { /* Insertion sort: a few dozen rows at most. */
    size_t j = i;
    for (; j > 0 && before(s->sort, names, &d->stages[i], &d->stages[idx[j - 1]]); j--) {
      idx[j] = idx[j - 1];
    }
    idx[j] = i;
  }
  size_t shown = 0;
  for (; shown < d->n_stages && body_left(o) > (shown + 1 < d->n_stages ? 1 : 0); shown++) {
    draw_stage(o, d, names, &d->stages[idx[shown]], bar_w, spark_w);
  }
  size_t hidden = d->n_stages - shown + d->stages_dropped;
  if (hidden > 0) {
    textf(o, "(%zu more stage%s)", hidden, hidden == 1 ? "" : "s");
    endl(o);
  }
}

/* ---- the other views ------------------------------------------------------------------------ */

static void draw_device(out_t *o, const em_top_screen_t *s, const em_top_model_t *m,
                        em_dict_t *dict) {
  em_top_dev_t *d = em_top_model_at(m, s->selected);
  const em_device_t *names = d ? em_dict_device(dict, d->id, false) : NULL;
  draw_title(o, s, m, d, names);
  if (!d) {
    text(o, "waiting for devices on ");
    text(o, s->where);
    if (s->filter) {
      text(o, " matching ");
      text(o, s->filter);
    }
    endl(o);
    return;
  }
  draw_level(o, d, names);
  draw_cause(o, d);
  if (!d->have_data) {
    text(o, "no data message from this device yet");
    endl(o);
    return;
  }
  draw_figures(o, d);
  if (!d->named) {
    text(o, "(no birth for this session yet: its figures cannot be named)");
    endl(o);
  }
  endl(o);
  draw_stages(o, s, d, names);
}

static void draw_list(out_t *o, const em_top_screen_t *s, const em_top_model_t *m) {
  draw_title(o, s, m, NULL, NULL);
  sgr(o, em_view_bold());
  textf(o, "  %-32s %-9s %-8s %7s %7s", "DEVICE", "LEVEL", "STATUS", "SEEN", "STAGES");
  sgr(o, "\x1b[0m");
  endl(o);
  size_t n = em_top_model_count(m);
  size_t room = body_left(o) > 0 ? (size_t)body_left(o) : 0;
  size_t first = s->cursor >= room ? s->cursor - room + 1 : 0;
  for (size_t i = first; i < n && body_left(o) > 0; i++) {
    const em_top_dev_t *d = em_top_model_at(m, i);
    char seen[16];
    em_view_age(s->now_ns, d->have_data ? d->time_ns : d->state_time_ns, seen, sizeof(seen));
    if (i == s->cursor) {
      sgr(o, "\x1b[7m");
    }
    text(o, i == s->cursor ? "> " : "  ");
    cell(o, d->id, 32, false);
    text(o, " ");
    sgr(o, em_view_level_on(d->level));
    cell(o, d->level == EM_LEVEL_NONE ? "-" : em_level_name(d->level), 9, false);
    sgr(o, "\x1b[0m");
    if (i == s->cursor) {
      sgr(o, "\x1b[7m");
    }
    textf(o, " %-8s %7s %7zu",
          !d->have_status ? "-"
          : d->online     ? "online"
                          : "OFFLINE",
          seen, d->n_stages);
    endl(o);
  }
}

static void draw_help(out_t *o, const em_top_screen_t *s, const em_top_model_t *m) {
  static const char *const lines[] = {
      "keys",
      "  n, Right, Tab         next device        p, Left, Shift-Tab  previous device",
      "  l, d                  list the devices (Up/Down or j/k, Enter picks, Esc closes)",
      "  s                     sort the stages: order, name, p99, budget use",
      "  Space                 pause (the screen stops refreshing; keys still act)",
      "  ?, h                  this help (any key closes it)",
      "  q, Ctrl-C             quit",
      "",
      "the screen",
      "  LEVEL: the level, since when, from which, and the rule's figure against its bound",
      "  CAUSE: the reason of the last change and the agent's verdict on it (top causes)",
      "  CPU: the process's share of one CPU; IPC; RSS and its slope over the last minute;",
      "  PSI: some avg10 of cpu, memory, io; TEMP: thermal zones; AGENT: edgemon's own cost",
      "  a stage: p50 and p99 of the latest window, its budget, the share used (bar), the",
      "  p99 of each second of the last minute (sparkline), spans in the window",
      "  '-': the device cannot measure it (never 0); \\xNN: a byte the device sent that is",
      "  not printable ASCII",
  };
  draw_title(o, s, m, NULL, NULL);
  for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]) && body_left(o) > 0; i++) {
    text(o, lines[i]);
    endl(o);
  }
}

static void draw_footer(out_t *o, const em_top_screen_t *s) {
  sgr(o, "\x1b[7m");
  textf(o, " q quit  n/p device  l list  s sort: %s  space %s  ? help", em_top_sort_name(s->sort),
        s->paused ? "resume" : "pause");
  if (s->malformed) {
    textf(o, "  undecodable: %llu", (unsigned long long)s->malformed);
  }
  pad_to(o, o->width - 1); /* Not the last column: no wrap pending at the screen's corner. */
  endl(o);
}

int em_top_draw(const em_top_screen_t *s, const em_top_model_t *m, em_dict_t *dict,
                em_top_frame_t *f) {
  out_t o = {.f = f,
             .width = s->cols > 0 ? s->cols : 1,
             .rows = s->rows > 0 ? s->rows : 1,
             .color = s->color,
             .utf8 = s->utf8};
  f->len = 0;
  put(&o, "\x1b[H", 3);
  if (s->view == EM_TOP_VIEW_LIST) {
    draw_list(&o, s, m);
  } else if (s->view == EM_TOP_VIEW_HELP) {
    draw_help(&o, s, m);
  } else {
    draw_device(&o, s, m, dict);
  }
  while (o.row < o.rows - 1) {
    endl(&o);
  }
  draw_footer(&o, s);
  return o.failed ? -ENOMEM : 0;
}

void em_top_frame_free(em_top_frame_t *f) {
  free(f->buf);
  f->buf = NULL;
  f->len = f->cap = 0;
}
