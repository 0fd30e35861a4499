/*
 * em_prom_rw_tool.c - em-prom-rw-tool: builds histograms, counters and gauges from the records
 * of records.h (stage windows merged as the aggregator merges them, converted with
 * em_native_from_histo) and pushes them through remote.c, Prometheus remote write 1.0, to one
 * endpoint; then waits (bounded) until the endpoint's queue is empty and prints its counters.
 * The integration tests point it at a real Prometheus and at small loopback HTTP servers.
 *
 *   em-prom-rw-tool URL [--bearer TOKEN] [--basic USER:PASSWORD] [--ca-file PEM] [--insecure]
 *                   [--ts-ms MS] [--batch N] [--wait-ms MS] < records
 *
 * --ts-ms: the timestamp of every series (default: now). --batch: series per request (default
 * remote.c's). --wait-ms: how long to wait for the queue to empty (default 30000).
 *
 * Output: one "name value" line per counter of em_remote_stats_t. Exit status: 0 (whatever
 * the endpoint answered: the counters say it), 1 on bad input or a refused series, 2 on a
 * usage error.
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

static int usage(void) {
  fprintf(stderr,
          "usage: em-prom-rw-tool URL [--bearer TOKEN] [--basic USER:PASSWORD] "
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

static void print_stats(const em_remote_stats_t *st) {
  printf("sent_requests %" PRIu64 "\nsent_samples %" PRIu64 "\nsent_histograms %" PRIu64 "\n",
         st->sent_requests, st->sent_samples, st->sent_histograms);
  printf("failed_network %" PRIu64 "\nfailed_5xx %" PRIu64 "\nfailed_429 %" PRIu64
         "\nfailed_4xx %" PRIu64 "\nretries %" PRIu64 "\n",
         st->failed_network, st->failed_5xx, st->failed_429, st->failed_4xx, st->retries);
  printf("dropped_requests %" PRIu64 "\ndropped_samples %" PRIu64 "\ndropped_histograms %" PRIu64
         "\n",
         st->dropped_requests, st->dropped_samples, st->dropped_histograms);
  printf("queue_depth %" PRIu32 "\nlast_success_unix_ms %" PRId64 "\n", st->queue_depth,
         st->last_success_unix_ms);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    return usage();
  }
  em_remote_endpoint_cfg_t ep = {.url = argv[1]};
  em_remote_cfg_t cfg = {.endpoints = &ep, .n_endpoints = 1, .user_agent = "em-prom-rw-tool"};
  int64_t ts_ms = now_ms(CLOCK_REALTIME), wait_ms = 30000;
  static char basic[512];
  for (int k = 2; k < argc; k++) {
    const char *opt = argv[k], *val = k + 1 < argc ? argv[k + 1] : NULL;
    if (strcmp(opt, "--insecure") == 0) {
      ep.insecure = true;
      continue;
    }
    if (!val) {
      return usage();
    }
    k++;
    if (strcmp(opt, "--bearer") == 0) {
      ep.bearer_token = val;
    } else if (strcmp(opt, "--basic") == 0 && strchr(val, ':') && strlen(val) < sizeof(basic)) {
      snprintf(basic, sizeof(basic), "%s", val);
      char *colon = strchr(basic, ':');
      *colon = '\0';
      ep.username = basic;
      ep.password = colon + 1;
    } else if (strcmp(opt, "--ca-file") == 0) {
      ep.ca_file = val;
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
  em_remote_stats_t st = {0};
  if (r) {
    em_remote_flush(r);
    int64_t until = now_ms(CLOCK_MONOTONIC) + wait_ms;
    while (em_remote_stats(r, 0, &st) == 0 && st.queue_depth > 0 &&
           now_ms(CLOCK_MONOTONIC) < until) {
      nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    print_stats(&st);
    em_remote_free(r, 0);
  }
  em_native_deinit(&nh);
  records_free();
  return status;
}
