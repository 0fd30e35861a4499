/*
 * compare.c - `edgemon-cli compare A B`: per-stage latency of two recordings, side by side,
 * with the change, a Welch t-test p-value, Cohen's d and a verdict (verdict.h); with --fleet,
 * two cohorts of the aggregator instead (compare_fleet.c).
 *
 * Each recording is read through recording.h. Every record on edgemon/v1/<device>/data is
 * decoded (proto.h); invalid ones are skipped and counted. Each stage window is merged into
 * one em_histo_t per stage and per recording (all devices, or only --device), for the
 * figures shown: count, mean, p50, p99. The unit of the test (--unit):
 *   window (default): each device's windows of --unit-seconds (by the data message's time) are
 *     merged into one histogram per stage, and the --metric of each such device-window is one
 *     sample; the change is that of the means of those samples.
 *   span: every span is a sample (mean and variance estimated from the buckets), the change
 *     that of the chosen --metric over all spans. Spans of one device are not independent,
 *     so with many spans almost any difference is significant; kept for comparison.
 * The verdict is verdict.h's, the same code the fleet compare uses.
 *
 * Owns: two stage tables of heap histograms (one per stage and one per device-window) and one
 * decode scratch buffer, all freed before returning. Single-threaded; reads files only.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "verdict.h"
#include "view.h"

#include <broker.h>
#include <buf.h>
#include <edgemon/proto.h>
#include <errno.h>
#include <getopt.h>
#include <histo.h>
#include <math.h>
#include <recording.h>
#include <stats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD "compare"

/* Distinct stages kept per recording: the schema allows 64 per message, so a few devices' worth
 * of stage names. Beyond this the recording is refused rather than growing without bound. */
#define MAX_STAGES 1024u
/* Device-windows kept per stage (a histogram each): a year of one device's minutes. */
#define MAX_UNITS (1u << 20)

typedef enum { METRIC_MEAN, METRIC_P50, METRIC_P99, N_METRICS } metric_t;

static const char *const metric_names[N_METRICS] = {"mean", "p50", "p99"};

/* One device-window of a stage. */
typedef struct {
  char device[EM_TOPIC_MAX_DEVICE + 1];
  uint64_t index; /* time_ns / unit length */
  em_histo_t *h;
} unit_t;

typedef struct {
  char name[EM_PROTO_MAX_STAGE_BYTES + 1];
  em_histo_t *h;
  unit_t *units; /* n_units of cap_units, heap; only with --unit window */
  size_t n_units, cap_units;
} stage_t;

/* What one recording holds: its stages in first-seen order. */
typedef struct {
  const char *path;
  stage_t *stages; /* n_stages of cap, heap */
  size_t n_stages;
  size_t cap;
  uint64_t n_data;    /* Valid data messages taken (after --device). */
  uint64_t n_invalid; /* Data messages skipped: not decodable or not a data message. */
} side_t;

typedef struct {
  const char *stage;  /* --stage, or NULL */
  const char *device; /* --device, or NULL */
  double threshold_pct;
  double alpha;
  metric_t metric;
  bool json;
  bool span_units;  /* --unit span */
  uint64_t unit_ns; /* --unit-seconds */
} opts_t;

/* The figures of one stage on one side. present: the stage was seen in that recording. */
typedef struct {
  bool present;
  uint64_t count;
  double mean_ns, p50_ns, p99_ns, var_ns2;
  em_verdict_side_t side; /* The samples of the test. */
} figures_t;

typedef struct {
  const char *name;
  figures_t a, b;
  em_verdict_t v;
} row_t;

static void usage(FILE *out) {
  fprintf(out,
          "usage: edgemon-cli compare A B [--stage S] [--device ID] [--threshold PCT]\n"
          "                             [--alpha P] [--metric mean|p50|p99] [--json]\n"
          "                             [--unit window|span] [--unit-seconds S]\n"
          "       edgemon-cli compare --fleet --a SEL --b SEL [...]  (see --fleet --help)\n"
          "\n"
          "Compares per-stage span latency of two recordings (made by `edgemon-cli record`):\n"
          "A is the baseline, B the candidate. Every edgemon/v1/<device>/data message is\n"
          "decoded and its stage windows merged into one histogram per stage (invalid\n"
          "messages are skipped and counted on stderr). For each stage: count, mean, p50\n"
          "and p99 of both sides (ms), the change of the metric from A to B, the p-value of\n"
          "Welch's t-test, Cohen's d and the (1 - P) confidence interval of the difference.\n"
          "The unit of the test (--unit): 'window' (the default) takes each device's windows\n"
          "of --unit-seconds (default 60) as one sample, its metric merged over them, and\n"
          "judges the change of the mean of those samples; 'span' takes every span as a\n"
          "sample (variances from the histogram buckets) and the change of the metric over\n"
          "all spans: spans of one device are not independent, so with many spans almost\n"
          "any difference is significant.\n"
          "\n"
          "verdict: 'regressed' when B's figure is more than PCT percent above A's, p < P\n"
          "and the interval excludes 0; 'improved' the same way below; else 'no significant\n"
          "difference'. A stage with fewer than 2 samples on a side is 'too few', one in only\n"
          "one recording 'missing'; neither is judged.\n"
          "\n"
          "options:\n"
          "  --stage S        only stage S\n"
          "  --device ID      only data messages from device ID (default: all devices)\n"
          "  --threshold PCT  smallest change that counts, in percent (default 5)\n"
          "  --alpha P        significance level, 0 < P <= 1 (default 0.01)\n"
          "  --metric M       the figure whose change is judged: mean (default), p50 or p99.\n"
          "                   mean is the default because the t-test is a test of means: the\n"
          "                   size of the change and its significance then speak of the same\n"
          "                   figure. p99 from merged histograms carries bucket error (~1%%)\n"
          "                   and its p-value still comes from the means.\n"
          "  --unit U         window (default) or span: what one sample of the test is\n"
          "  --unit-seconds S length of a device-window, 1 to 3600 s (default 60)\n"
          "  --json           one JSON object on stdout instead of the table (times in ns)\n"
          "  -h, --help       this text\n"
          "PCT and P are plain decimals (5, 0.01).\n"
          "\n"
          "exit status: 0 no judged stage regressed, 1 a stage regressed, 2 bad arguments,\n"
          "4 a recording cannot be used (missing, truncated, corrupt, not a recording, or no\n"
          "data messages; also when --stage names a stage neither recording has).\n"
          "\n"
          "example: edgemon-cli compare before.emrec after.emrec --stage infer --threshold 3\n");
}

/* ---- Reading a recording ---- */

static void side_free(side_t *s) {
  for (size_t i = 0; i < s->n_stages; i++) {
    em_histo_free(s->stages[i].h);
    for (size_t k = 0; k < s->stages[i].n_units; k++) {
      em_histo_free(s->stages[i].units[k].h);
    }
    free(s->stages[i].units);
  }
  free(s->stages);
  s->stages = NULL;
  s->n_stages = s->cap = 0;
}

static stage_t *side_find(const side_t *s, const char *name) {
  for (size_t i = 0; i < s->n_stages; i++) {
    if (strcmp(s->stages[i].name, name) == 0) {
      return &s->stages[i];
    }
  }
  return NULL;
}

/* The stage named `name`, added when new. Returns 0, -ENOMEM, or -E2BIG past MAX_STAGES. */
static int side_stage(side_t *s, const char *name, stage_t **out) {
  stage_t *st = side_find(s, name);
  if (st) {
    *out = st;
    return 0;
  }
  if (strlen(name) > EM_PROTO_MAX_STAGE_BYTES) {
    return -EINVAL;
  }
  if (s->n_stages == s->cap) {
    if (s->cap >= MAX_STAGES) {
      return -E2BIG;
    }
    int rc = em_buf_grow_items(&s->stages, &s->cap, s->n_stages, sizeof(*s->stages), 8);
    if (rc != 0) {
      return rc;
    }
  }
  st = &s->stages[s->n_stages];
  memset(st, 0, sizeof(*st));
  int rc = em_histo_new(&st->h);
  if (rc != 0) {
    return rc;
  }
  memcpy(st->name, name, strlen(name) + 1);
  s->n_stages++;
  *out = st;
  return 0;
}

/* The device-window of `device` at `index` in st, added when new (searched from the newest:
 * a recording is in time order, so it is among the last few). 0, -ENOMEM or -E2BIG. */
static int stage_unit(stage_t *st, const char *device, uint64_t index, unit_t **out) {
  for (size_t k = st->n_units; k-- > 0;) {
    unit_t *u = &st->units[k];
    if (u->index == index && strcmp(u->device, device) == 0) {
      *out = u;
      return 0;
    }
  }
  if (st->n_units == st->cap_units) {
    if (st->cap_units >= MAX_UNITS) {
      return -E2BIG;
    }
    size_t cap = st->cap_units ? st->cap_units * 2 : 16;
    unit_t *grown = realloc(st->units, cap * sizeof(*grown));
    if (!grown) {
      return -ENOMEM;
    }
    st->units = grown;
    st->cap_units = cap;
  }
  unit_t *u = &st->units[st->n_units];
  memset(u, 0, sizeof(*u));
  int rc = em_histo_new(&u->h);
  if (rc != 0) {
    return rc;
  }
  snprintf(u->device, sizeof(u->device), "%s", device);
  u->index = index;
  st->n_units++;
  *out = u;
  return 0;
}

/* Whether `topic` is edgemon/v1/<device>/data, for --device's device when given; the device
 * id goes to dev (EM_TOPIC_MAX_DEVICE + 1 bytes). */
static bool is_data_topic(const char *topic, const char *device, char *dev) {
  const char *kind = NULL;
  if (em_topic_parse(topic, dev, EM_TOPIC_MAX_DEVICE + 1, &kind) != 0 || !kind) {
    return false;
  }
  if (strcmp(kind, "data") != 0) {
    return false;
  }
  return !device || strcmp(dev, device) == 0;
}

/*
 * Merges one decoded data message into the side. Returns 0, 1 when a window was refused (the
 * message then counts as invalid; windows before it stay merged), or a negative errno.
 */
static int take_data(side_t *s, const em_data_t *d, const opts_t *o, const char *device) {
  for (size_t i = 0; i < d->n_stages; i++) {
    const em_stage_t *w = &d->stages[i];
    if (o->stage && strcmp(w->name, o->stage) != 0) {
      continue;
    }
    stage_t *st = NULL;
    int rc = side_stage(s, w->name, &st);
    if (rc == -EINVAL) {
      return 1;
    }
    if (rc != 0) {
      return rc;
    }
    rc = em_histo_add_stage(st->h, w);
    if (rc == -EINVAL) {
      return 1;
    }
    if (rc != 0) {
      return rc;
    }
    if (o->span_units || w->count == 0) {
      continue;
    }
    unit_t *u = NULL;
    rc = stage_unit(st, device, d->head.time_ns / o->unit_ns, &u);
    if (rc == 0) {
      rc = em_histo_add_stage(u->h, w);
    }
    if (rc != 0) {
      return rc;
    }
  }
  return 0;
}

/* Reads the whole recording into s. Returns 0 or EM_CLI_INPUT after printing why. */
static int load(side_t *s, const opts_t *o, void *scratch) {
  em_rec_reader_t *r = NULL;
  int rc = em_rec_reader_new(&r, s->path);
  if (rc != 0) {
    em_cli_error(CMD, "%s: %s", s->path, em_rec_strerror(rc));
    return EM_CLI_INPUT;
  }
  int ret = EM_CLI_INPUT;
  for (;;) {
    em_rec_entry_t e;
    rc = em_rec_read(r, &e);
    if (rc == 0) {
      break;
    }
    if (rc < 0) {
      em_cli_error(CMD, "%s: %s (at byte %llu)", s->path, em_rec_strerror(rc),
                   (unsigned long long)em_rec_offset(r));
      goto out;
    }
    char dev[EM_TOPIC_MAX_DEVICE + 1];
    if (!is_data_topic(e.topic, o->device, dev)) {
      continue;
    }
    em_msg_t msg;
    rc = em_proto_decode(e.payload, e.payload_len, &msg, scratch, EM_PROTO_SCRATCH_MAX, NULL);
    if (rc != 0 || msg.kind != EM_MSG_DATA) {
      s->n_invalid++;
      continue;
    }
    rc = take_data(s, &msg.u.data, o, dev);
    if (rc < 0) {
      em_cli_error(CMD, "%s: %s", s->path,
                   rc == -E2BIG ? "more distinct stage names (1024) or device-windows per stage "
                                  "(1048576) than compare keeps"
                                : strerror(-rc));
      goto out;
    }
    if (rc == 1) {
      s->n_invalid++;
      continue;
    }
    s->n_data++;
  }
  if (s->n_invalid > 0) {
    em_cli_error(CMD, "%s: skipped %llu invalid data message%s", s->path,
                 (unsigned long long)s->n_invalid, s->n_invalid == 1 ? "" : "s");
  }
  if (s->n_data == 0) {
    if (o->device) {
      em_cli_error(CMD, "%s: no valid data messages from device '%s'", s->path, o->device);
    } else {
      em_cli_error(CMD, "%s: no valid data messages (edgemon/v1/<device>/data)", s->path);
    }
    goto out;
  }
  ret = 0;
out:
  em_rec_reader_free(r);
  return ret;
}

/* ---- Figures and verdicts ---- */

static double metric_of_histo(const em_histo_t *h, metric_t m) {
  return m == METRIC_P50   ? em_histo_quantile_ns(h, 0.50)
         : m == METRIC_P99 ? em_histo_quantile_ns(h, 0.99)
                           : em_histo_mean_ns(h);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The samples of the test: the stage's device-windows' metric, or (span) its spans. */
static int samples_of(const stage_t *st, const opts_t *o, figures_t *f) {
  if (o->span_units) {
    f->side.units = (em_stats_summary_t){.n = f->count, .mean = f->mean_ns, .var = f->var_ns2};
    f->side.has_figure = true;
    f->side.figure = o->metric == METRIC_P50   ? f->p50_ns
                     : o->metric == METRIC_P99 ? f->p99_ns
                                               : f->mean_ns;
    return 0;
  }
  double *v = calloc(st->n_units + 1, sizeof(*v));
  const char **dev = calloc(st->n_units + 1, sizeof(*dev));
  if (!v || !dev) {
    free(v);
    free(dev);
    return -ENOMEM;
  }
  for (size_t k = 0; k < st->n_units; k++) {
    v[k] = metric_of_histo(st->units[k].h, o->metric);
    dev[k] = st->units[k].device;
  }
  int rc = em_stats_summarize(v, st->n_units, &f->side.units);
  qsort(dev, st->n_units, sizeof(*dev), cmp_str);
  for (size_t k = 0; k < st->n_units; k++) {
    f->side.devices += k == 0 || strcmp(dev[k], dev[k - 1]) != 0;
  }
  free(v);
  free(dev);
  return rc;
}

static int figures_of(const side_t *s, const char *name, const opts_t *o, figures_t *f) {
  memset(f, 0, sizeof(*f));
  const stage_t *st = side_find(s, name);
  if (!st) {
    return 0;
  }
  f->present = true;
  f->count = em_histo_count(st->h);
  f->mean_ns = em_histo_mean_ns(st->h);
  f->p50_ns = em_histo_quantile_ns(st->h, 0.50);
  f->p99_ns = em_histo_quantile_ns(st->h, 0.99);
  f->var_ns2 = em_histo_variance_ns2(st->h);
  return samples_of(st, o, f);
}

static void judge(row_t *row, const opts_t *o) {
  em_verdict_opts_t vo = {.threshold_pct = o->threshold_pct, .alpha = o->alpha};
  em_verdict_judge(&row->a.side, &row->b.side, &vo, &row->v);
  if (!row->a.present || !row->b.present) {
    em_verdict_none(&row->v, EM_VERDICT_MISSING);
  }
}

/* ---- Output ---- */

/* ms with 3 decimals, or 3 significant digits below 1 ms. */
static void fmt_ms(char *buf, size_t cap, const figures_t *f, double ns) {
  if (!f->present || f->count == 0) {
    snprintf(buf, cap, "-");
    return;
  }
  double ms = ns / 1e6;
  snprintf(buf, cap, ms >= 1 || ms == 0 ? "%.3f" : "%#.3g", ms);
}

/* Writes "-" for NaN and "inf"/"-inf" and returns true; false for a finite v (left to the
 * caller's format). */
static bool fmt_special(char *buf, size_t cap, double v) {
  if (isnan(v)) {
    snprintf(buf, cap, "-");
  } else if (isinf(v)) {
    snprintf(buf, cap, v > 0 ? "inf" : "-inf");
  } else {
    return false;
  }
  return true;
}

enum { N_COLS = 15, CELL = 48 };

/* Prints the table; false (said on stderr) when out of memory. */
static bool print_table(const row_t *rows, size_t n, const opts_t *o) {
  static const char *const head[N_COLS] = {"stage", "n A",   "n B",     "mean A",  "mean B",
                                           "p50 A", "p50 B", "p99 A",   "p99 B",   NULL,
                                           "p",     "d",     "units A", "units B", "verdict"};
  em_view_grid_t g;
  if (em_view_grid_init(&g, n + 1, N_COLS, CELL, head) != 0) {
    em_cli_error(CMD, "out of memory");
    return false;
  }
  em_view_grid_set(&g, 0, 9, "%s %%", metric_names[o->metric]);
  for (size_t i = 0; i < n; i++) {
    const row_t *r = &rows[i];
    size_t at = i + 1;
    em_view_grid_set(&g, at, 0, "%s", r->name);
    const figures_t *side[2] = {&r->a, &r->b};
    for (size_t k = 0; k < 2; k++) {
      if (side[k]->present) {
        em_view_grid_set(&g, at, 1 + k, "%llu", (unsigned long long)side[k]->count);
        em_view_grid_set(&g, at, 12 + k, "%llu", (unsigned long long)side[k]->side.units.n);
      } else {
        em_view_grid_set(&g, at, 1 + k, "-");
        em_view_grid_set(&g, at, 12 + k, "-");
      }
      fmt_ms(em_view_grid_cell(&g, at, 3 + k), CELL, side[k], side[k]->mean_ns);
      fmt_ms(em_view_grid_cell(&g, at, 5 + k), CELL, side[k], side[k]->p50_ns);
      fmt_ms(em_view_grid_cell(&g, at, 7 + k), CELL, side[k], side[k]->p99_ns);
    }
    if (!fmt_special(em_view_grid_cell(&g, at, 9), CELL, r->v.change_pct)) {
      em_view_grid_set(&g, at, 9, "%+.1f", r->v.change_pct);
    }
    if (!fmt_special(em_view_grid_cell(&g, at, 10), CELL, r->v.p)) {
      em_view_grid_set(&g, at, 10, "%.2g", r->v.p);
    }
    if (!fmt_special(em_view_grid_cell(&g, at, 11), CELL, r->v.d)) {
      em_view_grid_set(&g, at, 11, "%+.2f", r->v.d);
    }
    em_view_grid_set(&g, at, 14, "%s", r->v.verdict);
  }
  static const bool left[N_COLS] = {[0] = true, [N_COLS - 1] = true};
  em_view_grid_print(&g, left);
  em_view_grid_deinit(&g);
  return true;
}

static void json_side(const figures_t *f) {
  if (!f->present) {
    fputs("null", stdout);
    return;
  }
  printf("{\"count\":%llu", (unsigned long long)f->count);
  const em_view_json_field_t ns[] = {{"mean_ns", f->mean_ns},
                                     {"p50_ns", f->p50_ns},
                                     {"p99_ns", f->p99_ns},
                                     {"stddev_ns", sqrt(f->var_ns2)}};
  em_view_json_fields(stdout, ns, sizeof(ns) / sizeof(ns[0]), 3);
  printf(",\"units\":%llu,\"devices\":%llu}", (unsigned long long)f->side.units.n,
         (unsigned long long)f->side.devices);
}

static void print_json(const row_t *rows, size_t n, const opts_t *o, const char *a, const char *b) {
  fputs("{\"a\":", stdout);
  em_view_json_str(stdout, a);
  fputs(",\"b\":", stdout);
  em_view_json_str(stdout, b);
  printf(",\"metric\":\"%s\",\"unit\":\"%s\",\"unit_seconds\":%llu,\"threshold_pct\":",
         metric_names[o->metric], o->span_units ? "span" : "window",
         (unsigned long long)(o->unit_ns / 1000000000u));
  em_view_json_num(stdout, o->threshold_pct, -1);
  fputs(",\"alpha\":", stdout);
  em_view_json_num(stdout, o->alpha, -1);
  fputs(",\"stages\":[", stdout);
  for (size_t i = 0; i < n; i++) {
    const row_t *r = &rows[i];
    fputs(i ? ",{\"name\":" : "{\"name\":", stdout);
    em_view_json_str(stdout, r->name);
    fputs(",\"a\":", stdout);
    json_side(&r->a);
    fputs(",\"b\":", stdout);
    json_side(&r->b);
    fputs(",\"change_pct\":", stdout);
    em_view_json_num(stdout, r->v.change_pct, 6);
    fputs(",\"p\":", stdout);
    em_view_json_num(stdout, r->v.p, -1);
    fputs(",\"d\":", stdout);
    em_view_json_num(stdout, r->v.d, 6);
    fputs(",\"ci_low_ns\":", stdout);
    em_view_json_num(stdout, r->v.ci_lo, 3);
    fputs(",\"ci_high_ns\":", stdout);
    em_view_json_num(stdout, r->v.ci_hi, 3);
    printf(",\"judged\":%s,\"verdict\":", r->v.judged ? "true" : "false");
    em_view_json_str(stdout, r->v.verdict);
    putchar('}');
  }
  fputs("],\"regressed\":[", stdout);
  bool first = true;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(rows[i].v.verdict, EM_VERDICT_REGRESSED) == 0) {
      if (!first) {
        putchar(',');
      }
      em_view_json_str(stdout, rows[i].name);
      first = false;
    }
  }
  fputs("]}\n", stdout);
}

/* ---- Arguments ---- */

static int parse_args(int argc, char **argv, opts_t *o, const char **a, const char **b,
                      bool *help) {
  static const em_cli_number_t threshold_pct = {.min = 0, .max = 1e6};
  static const em_cli_number_t alpha = {.min = 0, .max = 1, .above_min = true};
  static const struct option longopts[] = {
      {"stage", required_argument, NULL, 's'},
      {"device", required_argument, NULL, 'D'},
      {"threshold", required_argument, NULL, 't'},
      {"alpha", required_argument, NULL, 'a'},
      {"metric", required_argument, NULL, 'm'},
      {"json", no_argument, NULL, 'j'},
      {"unit", required_argument, NULL, 'u'},
      {"unit-seconds", required_argument, NULL, 'U'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  opterr = 0;
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    switch (c) {
    case 's':
      if (!*optarg || strlen(optarg) > EM_PROTO_MAX_STAGE_BYTES) {
        return em_cli_usage_error(CMD, "--stage: '%s' is not a stage name", optarg);
      }
      o->stage = optarg;
      break;
    case 'D':
      if (!*optarg || strlen(optarg) > EM_TOPIC_MAX_DEVICE) {
        return em_cli_usage_error(CMD, "--device: '%s' is not a device id", optarg);
      }
      o->device = optarg;
      break;
    case 't':
      if (em_cli_number_option(CMD, "--threshold", optarg, &threshold_pct, &o->threshold_pct) !=
          EM_CLI_OK) {
        return EM_CLI_USAGE;
      }
      break;
    case 'a':
      if (em_cli_number_option(CMD, "--alpha", optarg, &alpha, &o->alpha) != EM_CLI_OK) {
        return EM_CLI_USAGE;
      }
      break;
    case 'm': {
      int m = em_cli_name_index(optarg, metric_names, N_METRICS);
      if (m < 0) {
        return em_cli_usage_error(CMD, "--metric: '%s' is not mean, p50 or p99", optarg);
      }
      o->metric = (metric_t)m;
      break;
    }
    case 'j':
      o->json = true;
      break;
    case 'u': {
      static const char *const units[] = {"window", "span"};
      int u = em_cli_name_index(optarg, units, 2);
      if (u < 0) {
        return em_cli_usage_error(CMD, "--unit: '%s' is not window or span", optarg);
      }
      o->span_units = u == 1;
      break;
    }
    case 'U': {
      static const em_cli_number_t unit_s = {.min = 1, .max = 3600, .whole = true};
      double secs = 0;
      if (em_cli_number_option(CMD, "--unit-seconds", optarg, &unit_s, &secs) != EM_CLI_OK) {
        return EM_CLI_USAGE;
      }
      o->unit_ns = (uint64_t)secs * 1000000000u;
      break;
    }
    case 'h':
      *help = true;
      return 0;
    case ':':
      return em_cli_usage_error(CMD, "option '%s' needs a value", argv[optind - 1]);
    default:
      return em_cli_usage_error(CMD, "unknown option '%s'", argv[optind - 1]);
    }
  }
  if (argc - optind != 2) {
    return em_cli_usage_error(CMD, "expected two recordings A and B, got %d argument%s",
                              argc - optind, argc - optind == 1 ? "" : "s");
  }
  *a = argv[optind];
  *b = argv[optind + 1];
  return 0;
}

/* ---- Entry point ---- */

int em_cli_compare(int argc, char **argv) {
  for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (strcmp(argv[i], "--fleet") == 0) {
      return em_cli_compare_fleet(argc, argv);
    }
  }
  opts_t o = {.threshold_pct = 5.0, .alpha = 0.01, .metric = METRIC_MEAN, .unit_ns = 60000000000u};
  const char *path_a = NULL, *path_b = NULL;
  bool help = false;
  int rc = parse_args(argc, argv, &o, &path_a, &path_b, &help);
  if (rc != 0) {
    return rc;
  }
  if (help) {
    usage(stdout);
    return EM_CLI_OK;
  }
  side_t a = {.path = path_a}, b = {.path = path_b};
  row_t *rows = NULL;
  int ret = EM_CLI_INPUT;
  void *scratch = malloc(EM_PROTO_SCRATCH_MAX);
  if (!scratch) {
    em_cli_error(CMD, "out of memory");
    goto out;
  }
  if (load(&a, &o, scratch) != 0 || load(&b, &o, scratch) != 0) {
    goto out;
  }
  /* The union of stages: A's in first-seen order, then those only B has. */
  size_t n = 0;
  rows = calloc(a.n_stages + b.n_stages + 1, sizeof(*rows));
  if (!rows) {
    em_cli_error(CMD, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < a.n_stages; i++) {
    rows[n++].name = a.stages[i].name;
  }
  for (size_t i = 0; i < b.n_stages; i++) {
    if (!side_find(&a, b.stages[i].name)) {
      rows[n++].name = b.stages[i].name;
    }
  }
  if (n == 0) {
    if (o.stage) {
      em_cli_error(CMD, "stage '%s' is in neither %s nor %s", o.stage, path_a, path_b);
    } else {
      em_cli_error(CMD, "no stage windows in %s or %s", path_a, path_b);
    }
    goto out;
  }
  bool regressed = false;
  for (size_t i = 0; i < n; i++) {
    if (figures_of(&a, rows[i].name, &o, &rows[i].a) != 0 ||
        figures_of(&b, rows[i].name, &o, &rows[i].b) != 0) {
      em_cli_error(CMD, "out of memory");
      goto out;
    }
    judge(&rows[i], &o);
    regressed |= strcmp(rows[i].v.verdict, EM_VERDICT_REGRESSED) == 0;
  }
  if (o.json) {
    print_json(rows, n, &o, path_a, path_b);
  } else if (!print_table(rows, n, &o)) {
    goto out; /* Out of memory, not a verdict. */
  }
  fflush(stdout);
  ret = regressed ? EM_CLI_FAIL : EM_CLI_OK;
out:
  free(rows);
  free(scratch);
  side_free(&a);
  side_free(&b);
  return ret;
}
