/*
 * prom_rw.c - the remote write 1.0 WriteRequest and its snappy compression (see prom_rw.h).
 *
 * Each append checks everything first, then writes the TimeSeries with em_pb; if the writer
 * fails part way (cap, allocation) the bytes of the partial series are cut off again and the
 * writer's sticky error cleared, so a request always holds whole series only.
 *
 * Repeated scalars (positive_deltas) are written unpacked, one tag per element: proto3 parsers
 * take both forms (Prometheus's generated decoder does).
 *
 * Owns: the writer's buffer; em_prom_rw_compress's output is the caller's. Not thread-safe.
 */
#define _POSIX_C_SOURCE 200809L

#include "prom_rw.h"

#include <errno.h>
#include <snappy-c.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum {
  WR_TIMESERIES = 1,
  TS_LABELS = 1,
  TS_SAMPLES = 2,
  TS_HISTOGRAMS = 4,
  L_NAME = 1,
  L_VALUE = 2,
  S_VALUE = 1,
  S_TIMESTAMP = 2,
  H_COUNT_INT = 1,
  H_SUM = 3,
  H_SCHEMA = 4,
  H_ZERO_THRESHOLD = 5,
  H_ZERO_COUNT_INT = 6,
  H_POSITIVE_SPANS = 11,
  H_POSITIVE_DELTAS = 12,
  H_TIMESTAMP = 15,
  BS_OFFSET = 1,
  BS_LENGTH = 2,
};

int em_prom_rw_init(em_prom_rw_t *w, size_t max_bytes) {
  if (!w) {
    return -EINVAL;
  }
  memset(w, 0, sizeof(*w));
  return em_pb_init(&w->pb, max_bytes);
}

void em_prom_rw_deinit(em_prom_rw_t *w) {
  if (!w) {
    return;
  }
  em_pb_deinit(&w->pb);
  w->n_series = w->n_samples = w->n_histograms = 0;
}

void em_prom_rw_reset(em_prom_rw_t *w) {
  if (!w) {
    return;
  }
  em_pb_reset(&w->pb);
  w->n_series = w->n_samples = w->n_histograms = 0;
}

const uint8_t *em_prom_rw_data(const em_prom_rw_t *w, size_t *len_bytes) {
  if (!w) {
    if (len_bytes) {
      *len_bytes = 0;
    }
    return NULL;
  }
  return em_pb_data(&w->pb, len_bytes);
}

/* Checks name and labels, and fills order[] with the labels sorted by name. */
static int prepare(const char *name, const em_prom_rw_label_t *labels, size_t n_labels,
                   const em_prom_rw_label_t **order) {
  if (!em_prom_name_valid(name, true) || n_labels > EM_PROM_RW_MAX_LABELS ||
      (n_labels > 0 && !labels)) {
    return -EINVAL;
  }
  for (size_t k = 0; k < n_labels; k++) {
    const em_prom_rw_label_t *l = &labels[k];
    if (!em_prom_name_valid(l->name, false) || strncmp(l->name, "__", 2) == 0 ||
        (l->value && !em_prom_utf8_valid(l->value))) {
      return -EINVAL;
    }
    size_t j = k;
    while (j > 0 && strcmp(order[j - 1]->name, l->name) > 0) {
      order[j] = order[j - 1];
      j--;
    }
    if (j > 0 && strcmp(order[j - 1]->name, l->name) == 0) {
      return -EINVAL;
    }
    order[j] = l;
  }
  return 0;
}

static void write_label(em_pb_t *pb, const char *name, const char *value) {
  em_pb_begin(pb, TS_LABELS);
  em_pb_string(pb, L_NAME, name);
  em_pb_string(pb, L_VALUE, value ? value : "");
  em_pb_end(pb);
}

/* Opens a TimeSeries and writes its labels; the sticky error tells the outcome. */
static void series_begin(em_pb_t *pb, const char *name, const em_prom_rw_label_t **order,
                         size_t n_labels) {
  em_pb_begin(pb, WR_TIMESERIES);
  write_label(pb, "__name__", name);
  for (size_t k = 0; k < n_labels; k++) {
    write_label(pb, order[k]->name, order[k]->value);
  }
}

/* Closes the TimeSeries opened at len_before (depth_before open), or cuts it off again. */
static int series_end(em_prom_rw_t *w, size_t len_before, size_t depth_before) {
  em_pb_end(&w->pb);
  int rc = em_pb_error(&w->pb);
  if (rc != 0) {
    w->pb.len_bytes = len_before;
    w->pb.depth = depth_before;
    w->pb.err = 0;
    return rc;
  }
  w->n_series++;
  return 0;
}

int em_prom_rw_sample(em_prom_rw_t *w, const char *name, const em_prom_rw_label_t *labels,
                      size_t n_labels, double value, int64_t ts_ms) {
  const em_prom_rw_label_t *order[EM_PROM_RW_MAX_LABELS];
  if (!w) {
    return -EINVAL;
  }
  int rc = prepare(name, labels, n_labels, order);
  if (rc != 0) {
    return rc;
  }
  size_t len_before = w->pb.len_bytes, depth_before = w->pb.depth;
  series_begin(&w->pb, name, order, n_labels);
  em_pb_begin(&w->pb, TS_SAMPLES);
  em_pb_double(&w->pb, S_VALUE, value);
  em_pb_int(&w->pb, S_TIMESTAMP, ts_ms);
  em_pb_end(&w->pb);
  rc = series_end(w, len_before, depth_before);
  if (rc == 0) {
    w->n_samples++;
  }
  return rc;
}

/* nh as prom_expo would take it: schema in range, deltas matching the spans, no negative
 * bucket count, the zero bucket inside the count. */
static bool native_ok(const em_native_t *nh) {
  if (!nh || nh->schema < EM_NATIVE_MIN_SCHEMA || nh->schema > EM_NATIVE_MAX_SCHEMA ||
      !(nh->zero_threshold >= 0) || (nh->n_spans > 0 && !nh->spans) ||
      (nh->n_deltas > 0 && !nh->deltas) || nh->zero_count > nh->count) {
    return false;
  }
  uint64_t buckets = 0;
  for (size_t k = 0; k < nh->n_spans; k++) {
    buckets += nh->spans[k].length;
  }
  if (buckets != nh->n_deltas) {
    return false;
  }
  int64_t c = 0;
  for (size_t k = 0; k < nh->n_deltas; k++) {
    if (__builtin_add_overflow(c, nh->deltas[k], &c) || c < 0) {
      return false;
    }
  }
  return true;
}

int em_prom_rw_histogram(em_prom_rw_t *w, const char *name, const em_prom_rw_label_t *labels,
                         size_t n_labels, const em_native_t *nh, int64_t ts_ms) {
  const em_prom_rw_label_t *order[EM_PROM_RW_MAX_LABELS];
  if (!w || !native_ok(nh)) {
    return -EINVAL;
  }
  int rc = prepare(name, labels, n_labels, order);
  if (rc != 0) {
    return rc;
  }
  em_pb_t *pb = &w->pb;
  size_t len_before = pb->len_bytes, depth_before = pb->depth;
  series_begin(pb, name, order, n_labels);
  em_pb_begin(pb, TS_HISTOGRAMS);
  em_pb_uint(pb, H_COUNT_INT, nh->count);
  em_pb_double(pb, H_SUM, nh->sum_ns);
  em_pb_sint(pb, H_SCHEMA, nh->schema);
  em_pb_double(pb, H_ZERO_THRESHOLD, nh->zero_threshold);
  em_pb_uint(pb, H_ZERO_COUNT_INT, nh->zero_count);
  for (size_t k = 0; k < nh->n_spans; k++) {
    em_pb_begin(pb, H_POSITIVE_SPANS);
    em_pb_sint(pb, BS_OFFSET, nh->spans[k].offset);
    em_pb_uint(pb, BS_LENGTH, nh->spans[k].length);
    em_pb_end(pb);
  }
  for (size_t k = 0; k < nh->n_deltas; k++) {
    em_pb_sint(pb, H_POSITIVE_DELTAS, nh->deltas[k]);
  }
  em_pb_int(pb, H_TIMESTAMP, ts_ms);
  em_pb_end(pb);
  rc = series_end(w, len_before, depth_before);
  if (rc == 0) {
    w->n_histograms++;
  }
  return rc;
}

int em_prom_rw_compress(const uint8_t *in, size_t in_len, uint8_t **out, size_t *out_len) {
  if ((!in && in_len > 0) || !out || !out_len) {
    return -EINVAL;
  }
  size_t cap = snappy_max_compressed_length(in_len);
  uint8_t *buf = malloc(cap > 0 ? cap : 1);
  if (!buf) {
    return -ENOMEM;
  }
  size_t len = cap;
  static const char empty[1];
  if (snappy_compress(in ? (const char *)in : empty, in_len, (char *)buf, &len) != SNAPPY_OK) {
    free(buf);
    return -ENOMEM; /* only a too-small buffer can fail, and cap is the bound */
  }
  *out = buf;
  *out_len = len;
  return 0;
}
