/*
 * em_prom_expo_tool.c - em-prom-expo-tool: builds histograms, counters and gauges from lines on
 * stdin the way the aggregator does (stage windows merged with em_histo_add_stage, converted
 * with em_native_from_histo) and writes the delimited protobuf exposition (prom_expo.h) to
 * stdout. The integration test serves that to a real Prometheus.
 *
 * Input, one record per line (fields separated by blanks; labels "k=v,k=v" or "-"):
 *
 *   window NAME LABELS SCALE ZERO_COUNT SUM_NS MIN_NS MAX_NS [INDEX:COUNT ...]
 *   counter NAME LABELS VALUE
 *   gauge NAME LABELS VALUE
 *
 * A window is one stage window (OpenTelemetry bucket indexes at SCALE, ascending); windows of
 * one NAME and LABELS merge into one series. Families come out in the order their names first
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

#define MAX_SERIES     64
#define MAX_LINE_BYTES 65536
#define MAX_BUCKETS    4096
#define MAX_NAME_BYTES 128
#define OUT_MAX_BYTES  (16u << 20)

typedef struct {
  char kind[8];
  char name[MAX_NAME_BYTES];
  char labels_text[512]; /* As given, the series key beside name. */
  char label_store[512]; /* labels_text split in place into names and values. */
  em_prom_label_t labels[EM_PROM_EXPO_MAX_LABELS];
  size_t n_labels;
  em_histo_t *histo; /* window */
  double value;      /* counter, gauge */
} series_t;

static series_t series[MAX_SERIES];
static size_t n_series;

static int split_labels(series_t *s) {
  if (strcmp(s->labels_text, "-") == 0) {
    return 0;
  }
  memcpy(s->label_store, s->labels_text, sizeof(s->label_store));
  char *save = NULL;
  for (char *kv = strtok_r(s->label_store, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(kv, '=');
    if (!eq || s->n_labels >= EM_PROM_EXPO_MAX_LABELS) {
      return -EINVAL;
    }
    *eq = '\0';
    s->labels[s->n_labels++] = (em_prom_label_t){.name = kv, .value = eq + 1};
  }
  return 0;
}

/* The series of (kind, name, labels), created on first sight. NULL when full or mismatched. */
static series_t *series_of(const char *kind, const char *name, const char *labels) {
  if (strlen(name) >= MAX_NAME_BYTES || strlen(labels) >= sizeof(series[0].labels_text)) {
    return NULL;
  }
  for (size_t k = 0; k < n_series; k++) {
    series_t *s = &series[k];
    if (strcmp(s->name, name) == 0 && strcmp(s->labels_text, labels) == 0) {
      return strcmp(s->kind, kind) == 0 ? s : NULL;
    }
  }
  if (n_series == MAX_SERIES) {
    return NULL;
  }
  series_t *s = &series[n_series];
  snprintf(s->kind, sizeof(s->kind), "%s", kind);
  snprintf(s->name, sizeof(s->name), "%s", name);
  snprintf(s->labels_text, sizeof(s->labels_text), "%s", labels);
  if (split_labels(s) != 0) {
    return NULL;
  }
  if (strcmp(kind, "window") == 0 && em_histo_new(&s->histo) != 0) {
    return NULL;
  }
  n_series++;
  return s;
}

static int parse_u64(const char *t, uint64_t *out) {
  if (!t || !*t) {
    return -EINVAL;
  }
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(t, &end, 10);
  if (errno != 0 || *end != '\0' || t[0] == '-') {
    return -EINVAL;
  }
  *out = (uint64_t)v;
  return 0;
}

static int parse_window(series_t *s, char **save) {
  static em_bucket_t buckets[MAX_BUCKETS];
  const char *f[5];
  for (int k = 0; k < 5; k++) {
    f[k] = strtok_r(NULL, " \t\n", save);
    if (!f[k]) {
      return -EINVAL;
    }
  }
  char *end = NULL;
  long scale = strtol(f[0], &end, 10);
  em_stage_t st = {.name = s->name, .scale = (int32_t)scale, .buckets = buckets};
  if (*end != '\0' || parse_u64(f[1], &st.zero_count) != 0 || parse_u64(f[2], &st.sum_ns) != 0 ||
      parse_u64(f[3], &st.min_ns) != 0 || parse_u64(f[4], &st.max_ns) != 0) {
    return -EINVAL;
  }
  st.count = st.zero_count;
  for (char *t = strtok_r(NULL, " \t\n", save); t; t = strtok_r(NULL, " \t\n", save)) {
    char *colon = strchr(t, ':');
    uint64_t c = 0;
    if (!colon || st.n_buckets == MAX_BUCKETS) {
      return -EINVAL;
    }
    *colon = '\0';
    long idx = strtol(t, &end, 10);
    if (*end != '\0' || parse_u64(colon + 1, &c) != 0) {
      return -EINVAL;
    }
    buckets[st.n_buckets++] = (em_bucket_t){.index = (int32_t)idx, .count = c};
    st.count += c;
  }
  return em_histo_add_stage(s->histo, &st);
}

static int parse_line(char *line) {
  char *save = NULL;
  char *kind = strtok_r(line, " \t\n", &save);
  if (!kind || kind[0] == '#') {
    return 0;
  }
  char *name = strtok_r(NULL, " \t\n", &save);
  char *labels = strtok_r(NULL, " \t\n", &save);
  if (!name || !labels) {
    return -EINVAL;
  }
  if (strcmp(kind, "window") != 0 && strcmp(kind, "counter") != 0 && strcmp(kind, "gauge") != 0) {
    return -EINVAL;
  }
  series_t *s = series_of(kind, name, labels);
  if (!s) {
    return -EINVAL;
  }
  if (s->histo) {
    return parse_window(s, &save);
  }
  char *v = strtok_r(NULL, " \t\n", &save);
  char *end = NULL;
  if (!v || strtok_r(NULL, " \t\n", &save)) {
    return -EINVAL;
  }
  s->value = strtod(v, &end);
  return *end == '\0' ? 0 : -EINVAL;
}

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
  static char line[MAX_LINE_BYTES];
  int status = 0;
  for (unsigned no = 1; status == 0 && fgets(line, sizeof(line), stdin); no++) {
    if (!strchr(line, '\n') && !feof(stdin)) {
      fprintf(stderr, "em-prom-expo-tool: line %u too long\n", no);
      status = 1;
    } else if (parse_line(line) != 0) {
      fprintf(stderr, "em-prom-expo-tool: line %u: bad record\n", no);
      status = 1;
    }
  }
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
  for (size_t k = 0; k < n_series; k++) {
    em_histo_free(series[k].histo);
  }
  return status;
}
