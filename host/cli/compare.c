/*
 * compare.c - `edgemon-cli compare A B`: per-stage latency of two recordings, side by side,
 * with the change, a Welch t-test p-value, Cohen's d and a verdict.
 *
 * Each recording is read through recording.h. Every record on edgemon/v1/<device>/data is
 * decoded (proto.h); invalid ones are skipped and counted. Each stage window is merged into
 * one em_histo_t per stage and per recording (all devices, or only --device). Per stage:
 * count, mean, p50, p99 of each side, the change of the chosen metric, and Welch's test on
 * the means with each side's variance estimated from its buckets (stats.h). The verdict is
 * "regressed" when B's metric is more than --threshold percent above A's and p < --alpha,
 * "improved" when more than --threshold percent below with p < --alpha, else "same"; a stage
 * with fewer than 2 spans on a side is "too few", one found on one side only "missing".
 *
 * Owns: two stage tables of heap histograms and one decode scratch buffer, all freed before
 * returning. Single-threaded; reads files only.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <broker.h>
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

typedef enum { METRIC_MEAN, METRIC_P50, METRIC_P99 } metric_t;

static const char *const metric_names[] = {"mean", "p50", "p99"};

typedef struct {
  char name[EM_PROTO_MAX_STAGE_BYTES + 1];
  em_histo_t *h;
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
} opts_t;

/* The figures of one stage on one side. present: the stage was seen in that recording. */
typedef struct {
  bool present;
  uint64_t count;
  double mean_ns, p50_ns, p99_ns, var_ns2;
} figures_t;

typedef struct {
  const char *name;
  figures_t a, b;
  bool judged; /* t-test run: both sides have >= 2 spans */
  double change_pct, p, d;
  const char *verdict;
} row_t;

static void usage(FILE *out) {
  fprintf(out,
          "usage: edgemon-cli compare A B [--stage S] [--device ID] [--threshold PCT]\n"
          "                             [--alpha P] [--metric mean|p50|p99] [--json]\n"
          "\n"
          "Compares per-stage span latency of two recordings (made by `edgemon-cli record`):\n"
          "A is the baseline, B the candidate. Every edgemon/v1/<device>/data message is\n"
          "decoded and its stage windows merged into one histogram per stage (invalid\n"
          "messages are skipped and counted on stderr). For each stage: count, mean, p50\n"
          "and p99 of both sides (ms), the change of the metric from A to B, the p-value of\n"
          "Welch's t-test on the means (variances estimated from the histogram buckets) and\n"
          "Cohen's d.\n"
          "\n"
          "verdict: 'regressed' when B's metric is more than PCT percent above A's and p < P;\n"
          "'improved' when more than PCT percent below and p < P; else 'same'. A stage with\n"
          "fewer than 2 spans on a side is 'too few', one in only one recording 'missing';\n"
          "neither is judged.\n"
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
    size_t cap = s->cap ? s->cap * 2 : 8;
    stage_t *grown = realloc(s->stages, cap * sizeof(*grown));
    if (!grown) {
      return -ENOMEM;
    }
    s->stages = grown;
    s->cap = cap;
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

/* Whether `topic` is edgemon/v1/<device>/data, for --device's device when given. */
static bool is_data_topic(const char *topic, const char *device) {
  char dev[EM_TOPIC_MAX_DEVICE + 1];
  const char *kind = NULL;
  if (em_topic_parse(topic, dev, sizeof(dev), &kind) != 0 || !kind) {
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
static int take_data(side_t *s, const em_data_t *d, const opts_t *o) {
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
    if (!is_data_topic(e.topic, o->device)) {
      continue;
    }
    em_msg_t msg;
    rc = em_proto_decode(e.payload, e.payload_len, &msg, scratch, EM_PROTO_SCRATCH_MAX, NULL);
    if (rc != 0 || msg.kind != EM_MSG_DATA) {
      s->n_invalid++;
      continue;
    }
    rc = take_data(s, &msg.u.data, o);
    if (rc < 0) {
      em_cli_error(CMD, "%s: %s", s->path,
                   rc == -E2BIG ? "more distinct stage names than compare keeps (1024)"
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

static figures_t figures_of(const side_t *s, const char *name) {
  figures_t f = {0};
  const stage_t *st = side_find(s, name);
  if (!st) {
    return f;
  }
  f.present = true;
  f.count = em_histo_count(st->h);
  f.mean_ns = em_histo_mean_ns(st->h);
  f.p50_ns = em_histo_quantile_ns(st->h, 0.50);
  f.p99_ns = em_histo_quantile_ns(st->h, 0.99);
  f.var_ns2 = em_histo_variance_ns2(st->h);
  return f;
}

static double metric_of(const figures_t *f, metric_t m) {
  return m == METRIC_P50 ? f->p50_ns : m == METRIC_P99 ? f->p99_ns : f->mean_ns;
}

static void judge(row_t *row, const opts_t *o) {
  row->change_pct = NAN;
  row->p = NAN;
  row->d = NAN;
  row->judged = false;
  if (!row->a.present || !row->b.present) {
    row->verdict = "missing";
    return;
  }
  double ma = metric_of(&row->a, o->metric), mb = metric_of(&row->b, o->metric);
  if (ma > 0) {
    row->change_pct = (mb - ma) / ma * 100.0;
  } else {
    row->change_pct = mb > 0 ? INFINITY : 0;
  }
  em_welch_t w;
  if (row->a.count < 2 || row->b.count < 2 ||
      em_stats_welch(row->a.count, row->a.mean_ns, row->a.var_ns2, row->b.count, row->b.mean_ns,
                     row->b.var_ns2, &w) != 0) {
    row->verdict = "too few";
    return;
  }
  row->judged = true;
  row->p = w.p;
  row->d = w.d;
  if (row->change_pct > o->threshold_pct && w.p < o->alpha) {
    row->verdict = "regressed";
  } else if (row->change_pct < -o->threshold_pct && w.p < o->alpha) {
    row->verdict = "improved";
  } else {
    row->verdict = "same";
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

enum { N_COLS = 13, CELL = 48 };

static void print_table(const row_t *rows, size_t n, const opts_t *o) {
  static const char *const head[N_COLS] = {"stage", "n A",   "n B",    "mean A", "mean B",
                                           "p50 A", "p50 B", "p99 A",  "p99 B",  NULL,
                                           "p",     "d",     "verdict"};
  char change_head[CELL];
  snprintf(change_head, sizeof(change_head), "%s %%", metric_names[o->metric]);
  char(*cells)[N_COLS][CELL] = calloc(n + 1, sizeof(*cells));
  if (!cells) {
    em_cli_error(CMD, "out of memory");
    return;
  }
  for (size_t c = 0; c < N_COLS; c++) {
    snprintf(cells[0][c], CELL, "%s", head[c] ? head[c] : change_head);
  }
  for (size_t i = 0; i < n; i++) {
    const row_t *r = &rows[i];
    char(*row)[CELL] = cells[i + 1];
    snprintf(row[0], CELL, "%s", r->name);
    if (r->a.present) {
      snprintf(row[1], CELL, "%llu", (unsigned long long)r->a.count);
    } else {
      snprintf(row[1], CELL, "-");
    }
    if (r->b.present) {
      snprintf(row[2], CELL, "%llu", (unsigned long long)r->b.count);
    } else {
      snprintf(row[2], CELL, "-");
    }
    fmt_ms(row[3], CELL, &r->a, r->a.mean_ns);
    fmt_ms(row[4], CELL, &r->b, r->b.mean_ns);
    fmt_ms(row[5], CELL, &r->a, r->a.p50_ns);
    fmt_ms(row[6], CELL, &r->b, r->b.p50_ns);
    fmt_ms(row[7], CELL, &r->a, r->a.p99_ns);
    fmt_ms(row[8], CELL, &r->b, r->b.p99_ns);
    if (!fmt_special(row[9], CELL, r->change_pct)) {
      snprintf(row[9], CELL, "%+.1f", r->change_pct);
    }
    if (!fmt_special(row[10], CELL, r->p)) {
      snprintf(row[10], CELL, "%.2g", r->p);
    }
    if (!fmt_special(row[11], CELL, r->d)) {
      snprintf(row[11], CELL, "%+.2f", r->d);
    }
    snprintf(row[12], CELL, "%s", r->verdict);
  }
  size_t width[N_COLS] = {0};
  for (size_t i = 0; i <= n; i++) {
    for (size_t c = 0; c < N_COLS; c++) {
      size_t w = strlen(cells[i][c]);
      width[c] = w > width[c] ? w : width[c];
    }
  }
  for (size_t i = 0; i <= n; i++) {
    for (size_t c = 0; c < N_COLS; c++) {
      bool left = c == 0 || c == N_COLS - 1;
      const char *sep = c == 0 ? "" : "  ";
      if (c == N_COLS - 1) {
        printf("%s%s", sep, cells[i][c]); /* last column: no trailing padding */
      } else {
        printf(left ? "%s%-*s" : "%s%*s", sep, (int)width[c], cells[i][c]);
      }
    }
    putchar('\n');
  }
  free(cells);
}

static void json_str(const char *s) {
  putchar('"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') {
      printf("\\%c", *p);
    } else if (*p < 0x20 || *p == 0x7f) {
      printf("\\u%04x", *p);
    } else {
      putchar(*p);
    }
  }
  putchar('"');
}

/* A finite double as a JSON number with `decimals` digits after the point (fixed) or, for
 * decimals < 0, 17 significant digits; anything else as null. */
static void json_num(double v, int decimals) {
  if (!isfinite(v)) {
    fputs("null", stdout);
  } else if (decimals < 0) {
    printf("%.17g", v);
  } else {
    printf("%.*f", decimals, v);
  }
}

static void json_side(const figures_t *f) {
  if (!f->present) {
    fputs("null", stdout);
    return;
  }
  printf("{\"count\":%llu,\"mean_ns\":", (unsigned long long)f->count);
  json_num(f->mean_ns, 3);
  fputs(",\"p50_ns\":", stdout);
  json_num(f->p50_ns, 3);
  fputs(",\"p99_ns\":", stdout);
  json_num(f->p99_ns, 3);
  fputs(",\"stddev_ns\":", stdout);
  json_num(sqrt(f->var_ns2), 3);
  putchar('}');
}

static void print_json(const row_t *rows, size_t n, const opts_t *o, const char *a, const char *b) {
  fputs("{\"a\":", stdout);
  json_str(a);
  fputs(",\"b\":", stdout);
  json_str(b);
  printf(",\"metric\":\"%s\",\"threshold_pct\":", metric_names[o->metric]);
  json_num(o->threshold_pct, -1);
  fputs(",\"alpha\":", stdout);
  json_num(o->alpha, -1);
  fputs(",\"stages\":[", stdout);
  for (size_t i = 0; i < n; i++) {
    const row_t *r = &rows[i];
    fputs(i ? ",{\"name\":" : "{\"name\":", stdout);
    json_str(r->name);
    fputs(",\"a\":", stdout);
    json_side(&r->a);
    fputs(",\"b\":", stdout);
    json_side(&r->b);
    fputs(",\"change_pct\":", stdout);
    json_num(r->change_pct, 6);
    fputs(",\"p\":", stdout);
    json_num(r->p, -1);
    fputs(",\"d\":", stdout);
    json_num(r->d, 6);
    printf(",\"judged\":%s,\"verdict\":", r->judged ? "true" : "false");
    json_str(r->verdict);
    putchar('}');
  }
  fputs("],\"regressed\":[", stdout);
  bool first = true;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(rows[i].verdict, "regressed") == 0) {
      if (!first) {
        putchar(',');
      }
      json_str(rows[i].name);
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
    case 'm':
      if (strcmp(optarg, "mean") == 0) {
        o->metric = METRIC_MEAN;
      } else if (strcmp(optarg, "p50") == 0) {
        o->metric = METRIC_P50;
      } else if (strcmp(optarg, "p99") == 0) {
        o->metric = METRIC_P99;
      } else {
        return em_cli_usage_error(CMD, "--metric: '%s' is not mean, p50 or p99", optarg);
      }
      break;
    case 'j':
      o->json = true;
      break;
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
  opts_t o = {.threshold_pct = 5.0, .alpha = 0.01, .metric = METRIC_MEAN};
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
    rows[i].a = figures_of(&a, rows[i].name);
    rows[i].b = figures_of(&b, rows[i].name);
    judge(&rows[i], &o);
    regressed |= strcmp(rows[i].verdict, "regressed") == 0;
  }
  if (o.json) {
    print_json(rows, n, &o, path_a, path_b);
  } else {
    print_table(rows, n, &o);
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
