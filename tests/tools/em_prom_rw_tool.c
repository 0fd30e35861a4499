/*
 * em_prom_rw_tool.c - em-prom-rw-tool: builds histograms, counters and gauges from the records
 * of records.h (stage windows merged as the aggregator merges them, converted with
 * em_native_from_histo) and pushes them through remote.c, Prometheus remote write 1.0, to one
 * or more endpoints; then waits (bounded) until every queue is empty and prints the counters.
 * The integration tests point it at a real Prometheus and at small loopback HTTP servers.
 *
 *   em-prom-rw-tool URL [--also URL] [--bearer TOKEN] [--basic USER:PASSWORD]
 *                   [--ca-file PEM] [--insecure] [--ts-ms MS] [--batch N] [--wait-ms MS]
 *                   < records
 *
 * --also URL adds an endpoint (4 in all at most); --bearer, --basic, --ca-file and --insecure
 * apply to the endpoint named last. --ts-ms: the timestamp of every series (default: now).
 * --batch: series per request (default: remote.c's). --wait-ms: how long to wait for the
 * queues to empty (default 30000).
 *
 * Output: one "name value" line per counter of em_remote_stats_t, the names of the endpoints
 * after the first prefixed "ep1.", "ep2.", ... Exit status: 0 (whatever the endpoints
 * answered: the counters say it), 1 on bad input or a refused series, 2 on a usage error.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "native.h"
#include "records.h"
#include "remote.h"

#define MAX_ENDPOINTS 4

static int usage(void) {
  fprintf(stderr,
          "usage: em-prom-rw-tool URL [--also URL] [--bearer TOKEN] [--basic USER:PASSWORD] "
          "[--ca-file PEM] [--insecure] [--ts-ms MS] [--batch N] [--wait-ms MS] < records\n");
  return 2;
}

static int64_t now_ms(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int push(em_remote_t *r, em_native_t *nh, const series_t *s, int64_t ts_ms) {
  if (s->histo) {
    int rc = em_native_from_histo(nh, s->histo);
    return rc != 0 ? rc : em_remote_histogram(r, s->name, s->labels, s->n_labels, nh, ts_ms);
  }
  return em_remote_sample(r, s->name, s->labels, s->n_labels, s->value, ts_ms);
}

/* Waits (until the monotonic ms `until`) for every endpoint's queue to empty. */
static void wait_empty(em_remote_t *r, int64_t until) {
  for (size_t k = 0; k < em_remote_n_endpoints(r); k++) {
    em_remote_stats_t st;
    while (em_remote_stats(r, k, &st) == 0 && st.queue_depth > 0 &&
           now_ms(CLOCK_MONOTONIC) < until) {
      nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
  }
}

/* Endpoint k's counters, one "name value" line each; names of endpoints past the first are
 * prefixed "epK.". */
static void print_stats(em_remote_t *r, size_t k) {
  em_remote_stats_t st;
  if (em_remote_stats(r, k, &st) != 0) {
    return;
  }
  /* STAT(field): a row named as the field of em_remote_stats_t it prints. */
#define STAT(field)                                                                                \
  { #field, (int64_t)st.field }
  const struct {
    const char *name;
    int64_t v;
  } rows[] = {STAT(sent_requests),       STAT(sent_samples),
              STAT(sent_histograms),     STAT(failed_network),
              STAT(failed_5xx),          STAT(failed_429),
              STAT(failed_4xx),          STAT(retries),
              STAT(dropped_requests),    STAT(dropped_samples),
              STAT(dropped_histograms),  STAT(queue_depth),
              STAT(last_success_unix_ms)};
#undef STAT
  char prefix[16] = "";
  if (k > 0) {
    snprintf(prefix, sizeof(prefix), "ep%u.", (unsigned)(k % MAX_ENDPOINTS));
  }
  for (size_t j = 0; j < sizeof(rows) / sizeof(rows[0]); j++) {
    printf("%s%s %" PRId64 "\n", prefix, rows[j].name, rows[j].v);
  }
}

int main(int argc, char **argv) {
  if (argc < 2) {
    return usage();
  }
  em_remote_endpoint_cfg_t eps[MAX_ENDPOINTS] = {{.url = argv[1]}};
  em_remote_endpoint_cfg_t *ep = &eps[0];
  em_remote_cfg_t cfg = {.endpoints = eps, .n_endpoints = 1, .user_agent = "em-prom-rw-tool"};
  int64_t ts_ms = now_ms(CLOCK_REALTIME), wait_ms = 30000;
  static char basic[512];
  for (int k = 2; k < argc; k++) {
    const char *opt = argv[k], *val = k + 1 < argc ? argv[k + 1] : NULL;
    if (strcmp(opt, "--insecure") == 0) {
      ep->insecure = true;
      continue;
    }
    if (!val) {
      return usage();
    }
    k++;
    if (strcmp(opt, "--bearer") == 0) {
      ep->bearer_token = val;
    } else if (strcmp(opt, "--basic") == 0 && strchr(val, ':') && strlen(val) < sizeof(basic)) {
      snprintf(basic, sizeof(basic), "%s", val);
      char *colon = strchr(basic, ':');
      *colon = '\0';
      ep->username = basic;
      ep->password = colon + 1;
    } else if (strcmp(opt, "--ca-file") == 0) {
      ep->ca_file = val;
    } else if (strcmp(opt, "--also") == 0 && cfg.n_endpoints < MAX_ENDPOINTS) {
      ep = &eps[cfg.n_endpoints++];
      ep->url = val;
    } else if (strcmp(opt, "--ts-ms") == 0) {
      ts_ms = strtoll(val, NULL, 10);
    } else if (strcmp(opt, "--batch") == 0) {
      cfg.batch_series = (uint32_t)strtoul(val, NULL, 10);
    } else if (strcmp(opt, "--wait-ms") == 0) {
      wait_ms = strtoll(val, NULL, 10);
    } else {
      return usage();
    }
  }
  int status = records_read(stdin, "em-prom-rw-tool");
  em_remote_t *r = NULL;
  int rc = status == 0 ? em_remote_new(&r, &cfg) : 0;
  if (rc != 0) {
    fprintf(stderr, "em-prom-rw-tool: %s\n", strerror(-rc));
    status = 1;
  }
  em_native_t nh;
  em_native_init(&nh);
  for (size_t k = 0; r && status == 0 && k < n_series; k++) {
    rc = push(r, &nh, &series[k], ts_ms);
    if (rc != 0) {
      fprintf(stderr, "em-prom-rw-tool: %s: %s\n", series[k].name, strerror(-rc));
      status = 1;
    }
  }
  if (r) {
    em_remote_flush(r);
    wait_empty(r, now_ms(CLOCK_MONOTONIC) + wait_ms);
    for (size_t k = 0; k < cfg.n_endpoints; k++) {
      print_stats(r, k);
    }
    em_remote_free(r, 0);
  }
  em_native_deinit(&nh);
  records_free();
  return status;
}
