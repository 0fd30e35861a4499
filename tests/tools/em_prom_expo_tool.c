/*
 * em_prom_expo_tool.c - em-prom-expo-tool: builds histograms, counters and gauges from lines on
 * stdin the way the aggregator does (stage windows merged with em_histo_add_stage, converted
 * with em_native_from_histo) and writes the delimited protobuf exposition (prom_expo.h) to
 * stdout. The integration test serves that to a real Prometheus.
 *
 * Input: the records of records.h. Families come out in the order their names first
 * appear, series in the order they first appear. Exit status: 0, 1 on bad input (with the
 * line number on stderr), 2 on a usage error.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "histo.h"
#include "native.h"
#include "prom_expo.h"
#include "records.h"

#define OUT_MAX_BYTES (16u << 20)

static int write_series(em_prom_expo_t *e, em_native_t *nh, const series_t *s) {
  if (s->histo) {
    int rc = em_native_from_histo(nh, s->histo);
    if (rc != 0) {
      return rc;
    }
    return em_prom_expo_native(e, s->labels, s->n_labels, nh, NULL, 0);
  }
  if (strcmp(s->kind, "counter") == 0) {
    return em_prom_expo_counter(e, s->labels, s->n_labels, s->value);
  }
  return em_prom_expo_gauge(e, s->labels, s->n_labels, s->value);
}

static int write_all(em_prom_expo_t *e, em_native_t *nh) {
  for (size_t k = 0; k < n_series; k++) {
    size_t first = 0;
    while (strcmp(series[first].name, series[k].name) != 0) {
      first++;
    }
    if (first != k) {
      continue; /* family already written */
    }
    em_prom_type_t type = series[k].histo                          ? EM_PROM_HISTOGRAM
                          : strcmp(series[k].kind, "counter") == 0 ? EM_PROM_COUNTER
                                                                   : EM_PROM_GAUGE;
    int rc = em_prom_expo_family_begin(e, series[k].name, "em-prom-expo-tool", type);
    for (size_t j = k; rc == 0 && j < n_series; j++) {
      if (strcmp(series[j].name, series[k].name) == 0) {
        rc = write_series(e, nh, &series[j]);
      }
    }
    if (rc == 0) {
      rc = em_prom_expo_family_end(e);
    }
    if (rc != 0) {
      fprintf(stderr, "em-prom-expo-tool: %s: %s\n", series[k].name, strerror(-rc));
      return rc;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  (void)argv;
  if (argc != 1) {
    fprintf(stderr, "usage: em-prom-expo-tool < records\n");
    return 2;
  }
  int status = records_read(stdin, "em-prom-expo-tool");
  em_prom_expo_t e;
  em_native_t nh;
  em_native_init(&nh);
  em_prom_expo_init(&e, OUT_MAX_BYTES);
  const uint8_t *data = NULL;
  size_t len = 0;
  if (status == 0 && (write_all(&e, &nh) != 0 || em_prom_expo_data(&e, &data, &len) != 0)) {
    status = 1;
  }
  if (status == 0 && len > 0 && fwrite(data, 1, len, stdout) != len) {
    status = 1;
  }
  em_prom_expo_deinit(&e);
  em_native_deinit(&nh);
  records_free();
  return status;
}
