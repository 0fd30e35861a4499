/*
 * records.c - the record reader of the Prometheus test tools (see records.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "records.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LINE_BYTES 65536
#define MAX_BUCKETS    4096

series_t series[MAX_SERIES];
size_t n_series;

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

int records_read(FILE *in, const char *prog) {
  static char line[MAX_LINE_BYTES];
  for (unsigned no = 1; fgets(line, sizeof(line), in); no++) {
    if (!strchr(line, '\n') && !feof(in)) {
      fprintf(stderr, "%s: line %u too long\n", prog, no);
      return 1;
    }
    if (parse_line(line) != 0) {
      fprintf(stderr, "%s: line %u: bad record\n", prog, no);
      return 1;
    }
  }
  return 0;
}

void records_free(void) {
  for (size_t k = 0; k < n_series; k++) {
    em_histo_free(series[k].histo);
    series[k].histo = NULL;
  }
  n_series = 0;
}
