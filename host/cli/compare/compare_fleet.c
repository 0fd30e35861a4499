/*
 * compare_fleet.c - `edgemon-cli compare --fleet`: two cohorts of the fleet (a canary against
 * the rest, one model version against another), as the aggregator's GET /api/cohort gives
 * them, judged per stage with the device-window as the unit.
 *
 * For each cohort the API answers the merged percentiles of every stage and, per stage, one
 * row per device-window (device, start, count, mean, p99), the windows per level, each
 * device's RSS slope and the mean IPC. Per stage the rows' --metric values (p99 or mean) of
 * each side are summarised and judged by verdict.h, the same code the file compare uses; the
 * shares of degraded windows are compared there too. Output: a table and a summary per
 * cohort, or one JSON object.
 *
 * Owns, for the call: the two answers (body and parsed tree) and a scratch array of values.
 * Single-threaded; one HTTP GET per cohort (http_get.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "http_get.h"
#include "json_read.h"
#include "verdict.h"
#include "view.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD                "compare"
#define DEFAULT_AGGREGATOR "http://127.0.0.1:9108"
#define MAX_SELECT         512u

typedef enum { METRIC_P99, METRIC_MEAN, N_METRICS } metric_t;
static const char *const metric_names[N_METRICS] = {"p99", "mean"};

typedef struct {
  const char *aggregator;
  double timeout_s;
  const char *sel[2]; /* --a, --b */
  const char *device;
  const char *from, *to; /* as given */
  uint64_t from_ns, to_ns;
  double unit_s; /* 0: the API's default */
  const char *stage;
  metric_t metric;
  em_verdict_opts_t v;
  bool json;
} fleet_opts_t;

/* One cohort's answer. */
typedef struct {
  char *body;
  em_json_t *doc;
  const em_json_t *stages; /* array */
  double windows, n_devices;
  em_verdict_levels_t levels; /* units filled per answer: the most device-windows of a stage */
  double rss_slope_median;    /* bytes/s; NAN without slopes */
  double ipc;                 /* NAN when null */
} cohort_t;

/* One stage's figures on one side. */
typedef struct {
  bool present;
  double count, mean_ns, p50_ns, p95_ns, p99_ns;
  em_verdict_side_t side; /* per-unit metric values */
  double unit_mean;       /* = side.units.mean */
} stage_side_t;

typedef struct {
  const char *name;
  stage_side_t s[2];
  em_verdict_t v;
} row_t;

static void usage(FILE *out) {
  fprintf(out,
          "usage: edgemon-cli compare --fleet --a SEL --b SEL [--device GLOB] [--from TIME]\n"
          "                           [--to TIME] [--unit S] [--stage S] [--metric p99|mean]\n"
          "                           [--threshold PCT] [--alpha P] [--min-devices N] [--json]\n"
          "                           [--aggregator URL] [--timeout S]\n"
          "\n"
          "Compares two cohorts of the fleet as the aggregator stores them (GET /api/cohort):\n"
          "A the baseline, B the candidate. A cohort is the windows whose own data message\n"
          "carried a model identity matching SEL: comma-separated terms model=NAME,\n"
          "version=V or a label KEY=VALUE, all of which must match (version=1.4,\n"
          "model=detector,site=lab).\n"
          "\n"
          "Per stage: span count, p50, p95, p99 of each cohort (merged histograms), and the\n"
          "verdict with the device-window as the unit (one device's windows of --unit\n"
          "seconds): the per-unit --metric values of each cohort, their means, the change in\n"
          "percent, Welch's t-test (two-sided p), Cohen's d and the (1 - P) confidence\n"
          "interval of the difference. 'regressed' when p < P, B's mean is more than PCT\n"
          "percent above A's and the interval excludes 0; 'improved' the same way below; 'no\n"
          "significant difference' otherwise; 'too few devices' when a cohort has fewer\n"
          "than N devices or 2 device-windows with spans of the stage.\n"
          "Per cohort: the share of windows in DEGRADED or CRITICAL ('degrades more often'\n"
          "when B's is higher by a two-proportion z-test at P, counting device-windows),\n"
          "the median RSS slope of its devices and the mean IPC where measured.\n"
          "\n"
          "options:\n"
          "  --a SEL, --b SEL  the two cohorts (required)\n"
          "  --device GLOB     only devices whose id matches (shell glob)\n"
          "  --from TIME, --to TIME\n"
          "                    the time range: RFC 3339 (2026-11-25T06:10:00Z) or seconds\n"
          "                    since the epoch (default: the last hour; at most 7 days)\n"
          "  --unit S          device-window length, 10 to 3600 s (default 60)\n"
          "  --stage S         only stage S\n"
          "  --metric M        the per-unit figure: p99 (default) or mean\n"
          "  --threshold PCT   smallest change that counts, in percent (default 5)\n"
          "  --alpha P         significance level, 0 < P < 1 (default 0.01)\n"
          "  --min-devices N   devices each cohort needs for a verdict (default 2)\n"
          "  --json            one JSON object on stdout instead of the table (times in ns)\n"
          "  --aggregator URL  http://HOST[:PORT] (default $EDGEMON_AGGREGATOR, else\n"
          "                    " DEFAULT_AGGREGATOR ")\n"
          "  --timeout S       for each of the aggregator's answers (default 10 s)\n"
          "  -h, --help        this text\n"
          "\n" EM_CLI_USAGE_NUMBERS "\n"
          "exit status: 0 no regression, 1 a stage regressed or B degrades more often, 2 bad\n"
          "arguments (also when the aggregator refuses them), 3 the aggregator cannot be\n"
          "reached or answers something else, 4 no data for a cohort\n"
          "\n"
          "example: edgemon-cli compare --fleet --a version=1.4 --b version=1.5 --stage infer\n");
}

/* ---- Arguments ---- */

static int parse_args(int argc, char **argv, fleet_opts_t *o, bool *help) {
  enum {
    O_AGG = 0x200,
    O_TIMEOUT,
    O_A,
    O_B,
    O_DEVICE,
    O_FROM,
    O_TO,
    O_UNIT,
    O_STAGE,
    O_METRIC,
    O_THRESHOLD,
    O_ALPHA,
    O_MIN_DEV,
    O_JSON,
    O_FLEET
  };
  static const struct option longopts[] = {
      {"fleet", no_argument, NULL, O_FLEET},
      {"aggregator", required_argument, NULL, O_AGG},
      {"timeout", required_argument, NULL, O_TIMEOUT},
      {"a", required_argument, NULL, O_A},
      {"b", required_argument, NULL, O_B},
      {"device", required_argument, NULL, O_DEVICE},
      {"from", required_argument, NULL, O_FROM},
      {"to", required_argument, NULL, O_TO},
      {"unit", required_argument, NULL, O_UNIT},
      {"stage", required_argument, NULL, O_STAGE},
      {"metric", required_argument, NULL, O_METRIC},
      {"threshold", required_argument, NULL, O_THRESHOLD},
      {"alpha", required_argument, NULL, O_ALPHA},
      {"min-devices", required_argument, NULL, O_MIN_DEV},
      {"json", no_argument, NULL, O_JSON},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  static const em_cli_number_t timeout = {
      .min = 0, .max = 600, .above_min = true, .duration = true};
  static const em_cli_number_t unit = {.min = 10, .max = 3600, .whole = true};
  static const em_cli_number_t threshold = {.min = 0, .max = 1e6};
  static const em_cli_number_t alpha = {.min = 0, .max = 1, .above_min = true};
  static const em_cli_number_t min_dev = {.min = 1, .max = 100000, .whole = true};
  opterr = 0;
  optind = 1;
  double n = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    switch (c) {
    case O_FLEET:
      break;
    case O_AGG:
      o->aggregator = optarg;
      break;
    case O_TIMEOUT:
      if (em_cli_number_option(CMD, "--timeout", optarg, &timeout, &o->timeout_s) != EM_CLI_OK) {
        return EM_CLI_USAGE;
      }
      break;
    case O_A:
    case O_B:
      if (!*optarg || strlen(optarg) > MAX_SELECT || !strchr(optarg, '=')) {
        return em_cli_usage_error(CMD, "--%s: '%s' is not a selection KEY=VALUE[,KEY=VALUE...]",
                                  c == O_A ? "a" : "b", optarg);
      }
      o->sel[c == O_B] = optarg;
      break;
    case O_DEVICE:
      if (!*optarg || strlen(optarg) > 255) {
        return em_cli_usage_error(CMD, "--device: '%s' is not a device glob", optarg);
      }
      o->device = optarg;
      break;
    case O_FROM:
    case O_TO:
      if (!em_cli_parse_time(optarg, c == O_FROM ? &o->from_ns : &o->to_ns)) {
        return em_cli_usage_error(CMD,
                                  "--%s: '%s' is not a time (RFC 3339 such as "
                                  "2026-11-25T06:10:00Z, or seconds since the epoch)",
                                  c == O_FROM ? "from" : "to", optarg);
      }
      *(c == O_FROM ? &o->from : &o->to) = optarg;
      break;
    case O_UNIT:
      if (em_cli_number_option(CMD, "--unit", optarg, &unit, &o->unit_s) != EM_CLI_OK) {
        return EM_CLI_USAGE;
      }
      break;
    case O_STAGE:
      if (!*optarg || strlen(optarg) > 31) {
        return em_cli_usage_error(CMD, "--stage: '%s' is not a stage name", optarg);
      }
      o->stage = optarg;
      break;
    case O_METRIC: {
      int m = em_cli_name_index(optarg, metric_names, N_METRICS);
      if (m < 0) {
        return em_cli_usage_error(CMD, "--metric: '%s' is not p99 or mean (with --fleet)", optarg);
      }
      o->metric = (metric_t)m;
      break;
    }
    case O_THRESHOLD:
      if (em_cli_number_option(CMD, "--threshold", optarg, &threshold, &o->v.threshold_pct) !=
          EM_CLI_OK) {
        return EM_CLI_USAGE;
      }
      break;
    case O_ALPHA:
      if (em_cli_number_option(CMD, "--alpha", optarg, &alpha, &o->v.alpha) != EM_CLI_OK) {
        return EM_CLI_USAGE;
      }
      if (o->v.alpha >= 1) {
        return em_cli_usage_error(CMD, "--alpha: '%s' must be below 1", optarg);
      }
      break;
    case O_MIN_DEV:
      if (em_cli_number_option(CMD, "--min-devices", optarg, &min_dev, &n) != EM_CLI_OK) {
        return EM_CLI_USAGE;
      }
      o->v.min_devices = (unsigned)n;
      break;
    case O_JSON:
      o->json = true;
      break;
    case 'h':
      *help = true;
      return 0;
    default:
      return em_cli_bad_option(CMD, argv);
    }
  }
  if (optind < argc) {
    return em_cli_usage_error(CMD, "--fleet takes no recordings ('%s')", argv[optind]);
  }
  if (!o->sel[0] || !o->sel[1]) {
    return em_cli_usage_error(CMD, "--fleet needs both cohorts, --a SEL and --b SEL");
  }
  if (o->from && o->to && o->from_ns >= o->to_ns) {
    return em_cli_usage_error(CMD, "--from (%s) must be before --to (%s)", o->from, o->to);
  }
  if (!o->aggregator) {
    const char *env = getenv("EDGEMON_AGGREGATOR");
    o->aggregator = env && *env ? env : DEFAULT_AGGREGATOR;
  }
  char err[256];
  if (em_http_get_check(o->aggregator, err, sizeof(err)) != 0) {
    return em_cli_usage_error(CMD, "--aggregator: %s", err);
  }
  return 0;
}

/* ---- The API ---- */

/* Appends "&key=" and value percent-encoded (all but RFC 3986's unreserved characters). */
static void add_param(char *url, size_t cap, const char *key, const char *value) {
  size_t o = strlen(url);
  o += (size_t)snprintf(url + o, cap - o, "%s%s=", strchr(url, '?') ? "&" : "?", key);
  for (const unsigned char *p = (const unsigned char *)value; *p && o + 4 < cap; p++) {
    if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
        *p == '-' || *p == '_' || *p == '.' || *p == '~') {
      url[o++] = (char)*p;
    } else {
      o += (size_t)snprintf(url + o, cap - o, "%%%02X", *p);
    }
  }
  url[o] = '\0';
}

/* Fetches and parses one cohort. Returns 0 or the exit code after printing why. */
static int fetch(const fleet_opts_t *o, int side, cohort_t *c) {
  char path[4096] = "/api/cohort";
  char num[32];
  add_param(path, sizeof(path), "select", o->sel[side]);
  if (o->device) {
    add_param(path, sizeof(path), "device", o->device);
  }
  if (o->from) {
    snprintf(num, sizeof(num), "%" PRIu64, o->from_ns);
    add_param(path, sizeof(path), "from", num);
  }
  if (o->to) {
    snprintf(num, sizeof(num), "%" PRIu64, o->to_ns);
    add_param(path, sizeof(path), "to", num);
  }
  if (o->unit_s > 0) {
    snprintf(num, sizeof(num), "%.0f", o->unit_s);
    add_param(path, sizeof(path), "unit", num);
  }
  em_http_answer_t ans = {0};
  char err[512];
  int rc = em_http_get(o->aggregator, path, (int)(o->timeout_s * 1000), &ans, err, sizeof(err));
  if (rc != EM_HTTP_GET_OK) {
    em_cli_error(CMD, "%s: %s", o->aggregator, err);
    return EM_CLI_BROKER;
  }
  c->body = ans.body;
  em_json_t *doc = NULL;
  int prc = em_json_parse(ans.body, ans.len, &doc, err, sizeof(err));
  if (ans.status == 400) {
    const char *why = prc == 0 ? em_json_string(doc, "error") : NULL;
    em_cli_error(CMD, "the aggregator refused cohort %c (%s): %s", side ? 'B' : 'A', o->sel[side],
                 why ? why : "400 Bad Request");
    em_json_free(doc);
    return EM_CLI_USAGE;
  }
  if (ans.status != 200) {
    em_cli_error(CMD, "%s%s: HTTP %d%s", o->aggregator, path, ans.status,
                 ans.status == 404 ? " (an aggregator without GET /api/cohort?)" : "");
    em_json_free(doc);
    return EM_CLI_BROKER;
  }
  if (prc != 0) {
    em_cli_error(CMD, "%s%s: the answer is not JSON: %s", o->aggregator, path, err);
    return EM_CLI_BROKER;
  }
  c->doc = doc;
  const em_json_t *lv = em_json_get(doc, "levels");
  const em_json_t *devs = em_json_array(doc, "devices");
  c->stages = em_json_array(doc, "stages");
  if (!em_json_number(doc, "windows", &c->windows) || !lv || lv->type != EM_JSON_OBJECT || !devs ||
      !c->stages || c->windows < 0) {
    em_cli_error(CMD, "%s%s: the answer lacks windows, levels, devices or stages", o->aggregator,
                 path);
    return EM_CLI_BROKER;
  }
  c->n_devices = (double)devs->n;
  double d = 0, cr = 0;
  em_json_number(lv, "DEGRADED", &d);
  em_json_number(lv, "CRITICAL", &cr);
  c->levels.windows = (uint64_t)c->windows;
  c->levels.degraded = (uint64_t)(d + cr);
  if (c->levels.degraded > c->levels.windows) {
    c->levels.degraded = c->levels.windows;
  }
  for (size_t i = 0; i < c->stages->n; i++) {
    const em_json_t *units = em_json_array(&c->stages->item[i], "units");
    if (units && units->n > c->levels.units) {
      c->levels.units = units->n;
    }
  }
  c->rss_slope_median = NAN;
  const em_json_t *slopes = em_json_array(doc, "rss_slope");
  if (slopes && slopes->n > 0) {
    double *v = calloc(slopes->n, sizeof(*v));
    size_t n = 0;
    for (size_t i = 0; v && i < slopes->n; i++) {
      if (em_json_number(&slopes->item[i], "bytes_per_s", &v[n])) {
        n++;
      }
    }
    c->rss_slope_median = v ? em_stats_median(v, n) : NAN;
    free(v);
  }
  c->ipc = NAN;
  em_json_number(em_json_get(doc, "ipc"), "mean", &c->ipc);
  if (c->windows == 0 || devs->n == 0) {
    em_cli_error(CMD, "no data for cohort %c (%s)%s%s in the time range", side ? 'B' : 'A',
                 o->sel[side], o->device ? " on devices " : "", o->device ? o->device : "");
    return EM_CLI_INPUT;
  }
  return 0;
}

static void cohort_free(cohort_t *c) {
  em_json_free(c->doc);
  free(c->body);
}

/* ---- Figures ---- */

static const em_json_t *stage_of(const cohort_t *c, const char *name) {
  for (size_t i = 0; i < c->stages->n; i++) {
    const char *s = em_json_string(&c->stages->item[i], "stage");
    if (s && strcmp(s, name) == 0) {
      return &c->stages->item[i];
    }
  }
  return NULL;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The stage's figures on one side: merged percentiles and the per-unit metric summary. */
static int stage_side(const cohort_t *c, const char *name, metric_t m, stage_side_t *out) {
  memset(out, 0, sizeof(*out));
  const em_json_t *st = stage_of(c, name);
  if (!st) {
    return 0;
  }
  out->present = true;
  em_json_number(st, "count", &out->count);
  em_json_number(st, "mean_ns", &out->mean_ns);
  em_json_number(st, "p50_ns", &out->p50_ns);
  em_json_number(st, "p95_ns", &out->p95_ns);
  em_json_number(st, "p99_ns", &out->p99_ns);
  const em_json_t *units = em_json_array(st, "units");
  size_t n = units ? units->n : 0;
  double *v = calloc(n + 1, sizeof(*v));
  const char **dev = calloc(n + 1, sizeof(*dev));
  if (!v || !dev) {
    free(v);
    free(dev);
    return -ENOMEM;
  }
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const em_json_t *u = &units->item[i];
    double count = 0;
    const char *d = em_json_string(u, "device");
    if (d && em_json_number(u, "count", &count) && count > 0 &&
        em_json_number(u, m == METRIC_P99 ? "p99_ns" : "mean_ns", &v[k])) {
      dev[k++] = d;
    }
  }
  em_stats_summarize(v, k, &out->side.units);
  qsort(dev, k, sizeof(*dev), cmp_str);
  for (size_t i = 0; i < k; i++) {
    out->side.devices += i == 0 || strcmp(dev[i], dev[i - 1]) != 0;
  }
  out->unit_mean = k ? out->side.units.mean : NAN;
  free(v);
  free(dev);
  return 0;
}

/* ---- Output ---- */

enum { N_COLS = 18, CELL = 48 };

static void ms_cell(char *buf, bool present, double ns) {
  if (!present || !isfinite(ns)) {
    snprintf(buf, CELL, "-");
  } else {
    em_view_ms(ns, buf, CELL);
  }
}

static void print_cohort(const fleet_opts_t *o, int side, const cohort_t *c) {
  printf("%c %s: %.0f devices, %.0f windows in %" PRIu64 " device-windows; degraded ",
         side ? 'B' : 'A', o->sel[side], c->n_devices, c->windows, c->levels.units);
  printf("%.1f%%", c->windows > 0 ? 100.0 * (double)c->levels.degraded / c->windows : 0.0);
  if (isfinite(c->rss_slope_median)) {
    printf("; RSS slope median %+.1f KiB/s", c->rss_slope_median / 1024);
  }
  if (isfinite(c->ipc)) {
    printf("; IPC %.2f", c->ipc);
  }
  putchar('\n');
}

/* Prints the cohorts and the table; false (said on stderr) when out of memory. */
static bool print_table(const fleet_opts_t *o, const cohort_t *c, const row_t *rows, size_t n,
                        const em_verdict_degrade_t *dg, bool regressed) {
  print_cohort(o, 0, &c[0]);
  print_cohort(o, 1, &c[1]);
  putchar('\n');
  const char *metric = metric_names[o->metric];
  static const char *const head[N_COLS] = {
      "stage", "dev A", "dev B", "units A", "units B",  "p50 A", "p50 B", "p95 A", "p95 B",
      "p99 A", "p99 B", NULL,    NULL,      "change %", NULL,    "p",     "d",     "verdict"};
  em_view_grid_t g;
  if (em_view_grid_init(&g, n + 1, N_COLS, CELL, head) != 0) {
    em_cli_error(CMD, "out of memory");
    return false;
  }
  em_view_grid_set(&g, 0, 11, "%s/unit A", metric);
  em_view_grid_set(&g, 0, 12, "%s/unit B", metric);
  em_view_grid_set(&g, 0, 14, "%.3g%% CI ms", 100 * (1 - o->v.alpha));
  for (size_t i = 0; i < n; i++) {
    const row_t *r = &rows[i];
    size_t at = i + 1;
    em_view_grid_set(&g, at, 0, "%s", r->name);
    for (size_t s = 0; s < 2; s++) {
      const stage_side_t *x = &r->s[s];
      em_view_grid_set(&g, at, 1 + s, "%" PRIu64, x->side.devices);
      em_view_grid_set(&g, at, 3 + s, "%" PRIu64, x->side.units.n);
      ms_cell(em_view_grid_cell(&g, at, 5 + s), x->present, x->p50_ns);
      ms_cell(em_view_grid_cell(&g, at, 7 + s), x->present, x->p95_ns);
      ms_cell(em_view_grid_cell(&g, at, 9 + s), x->present, x->p99_ns);
      ms_cell(em_view_grid_cell(&g, at, 11 + s), x->present, x->unit_mean);
    }
    if (r->v.judged) {
      em_view_grid_set(&g, at, 13, "%+.1f", r->v.change_pct);
      em_view_grid_set(&g, at, 14, "%+.3f..%+.3f", r->v.ci_lo / 1e6, r->v.ci_hi / 1e6);
      em_view_grid_set(&g, at, 15, "%.2g", r->v.p);
      em_view_grid_set(&g, at, 16, "%+.2f", r->v.d);
    } else {
      for (size_t k = 13; k <= 16; k++) {
        em_view_grid_set(&g, at, k, "-");
      }
    }
    em_view_grid_set(&g, at, 17, "%s", r->v.verdict);
  }
  static const bool left[N_COLS] = {[0] = true, [17] = true};
  em_view_grid_print(&g, left);
  em_view_grid_deinit(&g);
  putchar('\n');
  if (!dg->judged) {
    printf("degradation: not judged (a cohort has no windows or fewer than 2 device-windows)\n");
  } else {
    printf("degradation: %s (A %.1f%%, B %.1f%% of windows; z %+.2f, p %.2g over device-windows)\n",
           dg->more_often ? "B degrades more often" : "no significant increase", 100 * dg->share_a,
           100 * dg->share_b, dg->z, dg->p);
  }
  printf("verdict: %s\n", regressed ? "regressed" : "no regression");
  return true;
}

static void json_side(const stage_side_t *x) {
  if (!x->present) {
    fputs("null", stdout);
    return;
  }
  printf("{\"count\":%.0f", x->count);
  const em_view_json_field_t ns[] = {
      {"mean_ns", x->mean_ns}, {"p50_ns", x->p50_ns}, {"p95_ns", x->p95_ns}, {"p99_ns", x->p99_ns}};
  em_view_json_fields(stdout, ns, sizeof(ns) / sizeof(ns[0]), 3);
  printf(",\"devices\":%" PRIu64 ",\"units\":%" PRIu64, x->side.devices, x->side.units.n);
  const em_view_json_field_t units[] = {
      {"unit_mean_ns", x->unit_mean},
      {"unit_sd_ns", x->side.units.n > 1 ? sqrt(x->side.units.var) : NAN}};
  em_view_json_fields(stdout, units, sizeof(units) / sizeof(units[0]), 3);
  putchar('}');
}

static void json_cohort(const fleet_opts_t *o, int side, const cohort_t *c) {
  fputs("{\"select\":", stdout);
  em_view_json_str(stdout, o->sel[side]);
  printf(",\"devices\":%.0f,\"windows\":%.0f,\"device_windows\":%" PRIu64
         ",\"degraded_windows\":%" PRIu64 ",\"rss_slope_median_bytes_per_s\":",
         c->n_devices, c->windows, c->levels.units, c->levels.degraded);
  em_view_json_num(stdout, c->rss_slope_median, -1);
  fputs(",\"ipc\":", stdout);
  em_view_json_num(stdout, c->ipc, -1);
  putchar('}');
}

static void print_json(const fleet_opts_t *o, const cohort_t *c, const row_t *rows, size_t n,
                       const em_verdict_degrade_t *dg, bool regressed) {
  fputs("{\"a\":", stdout);
  json_cohort(o, 0, &c[0]);
  fputs(",\"b\":", stdout);
  json_cohort(o, 1, &c[1]);
  printf(",\"metric\":\"%s\",\"threshold_pct\":", metric_names[o->metric]);
  em_view_json_num(stdout, o->v.threshold_pct, -1);
  fputs(",\"alpha\":", stdout);
  em_view_json_num(stdout, o->v.alpha, -1);
  printf(",\"min_devices\":%u,\"stages\":[", o->v.min_devices);
  for (size_t i = 0; i < n; i++) {
    const row_t *r = &rows[i];
    fputs(i ? ",{\"name\":" : "{\"name\":", stdout);
    em_view_json_str(stdout, r->name);
    fputs(",\"a\":", stdout);
    json_side(&r->s[0]);
    fputs(",\"b\":", stdout);
    json_side(&r->s[1]);
    const struct {
      const char *key;
      double v;
    } figs[] = {{"change_pct", r->v.change_pct},
                {"p", r->v.p},
                {"d", r->v.d},
                {"df", r->v.df},
                {"ci_low_ns", r->v.ci_lo},
                {"ci_high_ns", r->v.ci_hi}};
    for (size_t k = 0; k < sizeof(figs) / sizeof(figs[0]); k++) {
      printf(",\"%s\":", figs[k].key);
      em_view_json_num(stdout, figs[k].v, -1);
    }
    printf(",\"judged\":%s,\"verdict\":", r->v.judged ? "true" : "false");
    em_view_json_str(stdout, r->v.verdict);
    putchar('}');
  }
  fputs("],\"degradation\":{\"share_a\":", stdout);
  em_view_json_num(stdout, dg->share_a, -1);
  fputs(",\"share_b\":", stdout);
  em_view_json_num(stdout, dg->share_b, -1);
  fputs(",\"z\":", stdout);
  em_view_json_num(stdout, dg->z, -1);
  fputs(",\"p\":", stdout);
  em_view_json_num(stdout, dg->p, -1);
  printf(",\"judged\":%s,\"more_often\":%s},\"regressed\":[", dg->judged ? "true" : "false",
         dg->more_often ? "true" : "false");
  bool first = true;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(rows[i].v.verdict, EM_VERDICT_REGRESSED) == 0) {
      fputs(first ? "" : ",", stdout);
      em_view_json_str(stdout, rows[i].name);
      first = false;
    }
  }
  printf("],\"verdict\":\"%s\"}\n", regressed ? "regressed" : "no regression");
}

/* ---- Entry point ---- */

int em_cli_compare_fleet(int argc, char **argv) {
  fleet_opts_t o = {.timeout_s = 10,
                    .metric = METRIC_P99,
                    .v = {.threshold_pct = 5, .alpha = 0.01, .min_devices = 2}};
  bool help = false;
  int rc = parse_args(argc, argv, &o, &help);
  if (rc != 0) {
    return rc;
  }
  if (help) {
    usage(stdout);
    return EM_CLI_OK;
  }
  cohort_t c[2] = {0};
  row_t *rows = NULL;
  int ret = fetch(&o, 0, &c[0]);
  if (ret == 0) {
    ret = fetch(&o, 1, &c[1]);
  }
  if (ret != 0) {
    goto out;
  }
  /* The union of stages: A's in its order, then those only B has. */
  size_t n = 0;
  rows = calloc(c[0].stages->n + c[1].stages->n + 1, sizeof(*rows));
  if (!rows) {
    em_cli_error(CMD, "out of memory");
    ret = EM_CLI_FAIL;
    goto out;
  }
  for (int s = 0; s < 2; s++) {
    for (size_t i = 0; i < c[s].stages->n; i++) {
      const char *name = em_json_string(&c[s].stages->item[i], "stage");
      if (!name || (o.stage && strcmp(name, o.stage) != 0) || (s == 1 && stage_of(&c[0], name))) {
        continue;
      }
      rows[n++].name = name;
    }
  }
  if (n == 0) {
    em_cli_error(CMD, o.stage ? "no stage '%s' in either cohort" : "no stages in either cohort%s",
                 o.stage ? o.stage : "");
    ret = EM_CLI_INPUT;
    goto out;
  }
  bool regressed = false;
  for (size_t i = 0; i < n; i++) {
    for (int s = 0; s < 2; s++) {
      if (stage_side(&c[s], rows[i].name, o.metric, &rows[i].s[s]) != 0) {
        em_cli_error(CMD, "out of memory");
        ret = EM_CLI_FAIL;
        goto out;
      }
    }
    em_verdict_judge(&rows[i].s[0].side, &rows[i].s[1].side, &o.v, &rows[i].v);
    if (!rows[i].s[0].present || !rows[i].s[1].present) {
      em_verdict_none(&rows[i].v, EM_VERDICT_MISSING);
    }
    regressed |= strcmp(rows[i].v.verdict, EM_VERDICT_REGRESSED) == 0;
  }
  em_verdict_degrade_t dg;
  em_verdict_degrade(&c[0].levels, &c[1].levels, o.v.alpha, &dg);
  regressed |= dg.more_often;
  if (o.json) {
    print_json(&o, c, rows, n, &dg, regressed);
  } else if (!print_table(&o, c, rows, n, &dg, regressed)) {
    ret = EM_CLI_FAIL; /* Out of memory, not a verdict. */
    goto out;
  }
  fflush(stdout);
  ret = regressed ? EM_CLI_FAIL : EM_CLI_OK;
out:
  free(rows);
  cohort_free(&c[0]);
  cohort_free(&c[1]);
  return ret;
}
