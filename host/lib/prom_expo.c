/*
 * prom_expo.c - the Prometheus protobuf exposition (see prom_expo.h).
 *
 * Field numbers are those of io/prometheus/client/metrics.proto (client_model, proto2):
 *
 *   MetricFamily: name 1 (string), help 2 (string), type 3 (enum MetricType), metric 4
 *   Metric:       label 1 (LabelPair), gauge 2, counter 3, histogram 7
 *   LabelPair:    name 1, value 2
 *   Gauge/Counter: value 1 (double)
 *   Histogram:    sample_count 1 (uint64), sample_sum 2 (double), bucket 3, schema 5 (sint32),
 *                 zero_threshold 6 (double), zero_count 7 (uint64), positive_span 12,
 *                 positive_delta 13 (repeated sint64)
 *   Bucket:       cumulative_count 1 (uint64), upper_bound 2 (double)
 *   BucketSpan:   offset 1 (sint32), length 2 (uint32)
 *
 * Repeated scalars are written unpacked (one tag per element), the proto2 default for a field
 * not marked packed; parsers take either form. A delimited stream is each MetricFamily
 * prefixed by its length as a varint (em_pb_begin with field 0).
 *
 * Every check of a family or series (names, labels, buckets) runs before its first byte is
 * written, so a refused one (-EINVAL) leaves nothing in the output and is not sticky: the
 * caller may skip it and go on. Only the writer's own failures (-EOVERFLOW, -ENOMEM) are.
 *
 * Owns: the writer's buffer. Not thread-safe.
 */
#define _POSIX_C_SOURCE 200809L

#include "prom_expo.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum {
  MF_NAME = 1,
  MF_HELP = 2,
  MF_TYPE = 3,
  MF_METRIC = 4,
  M_LABEL = 1,
  M_GAUGE = 2,
  M_COUNTER = 3,
  M_HISTOGRAM = 7,
  LP_NAME = 1,
  LP_VALUE = 2,
  VALUE = 1,
  H_SAMPLE_COUNT = 1,
  H_SAMPLE_SUM = 2,
  H_BUCKET = 3,
  H_SCHEMA = 5,
  H_ZERO_THRESHOLD = 6,
  H_ZERO_COUNT = 7,
  H_POSITIVE_SPAN = 12,
  H_POSITIVE_DELTA = 13,
  B_CUMULATIVE_COUNT = 1,
  B_UPPER_BOUND = 2,
  S_OFFSET = 1,
  S_LENGTH = 2,
};

int em_prom_expo_init(em_prom_expo_t *e, size_t max_bytes) {
  if (!e) {
    return -EINVAL;
  }
  memset(e, 0, sizeof(*e));
  return em_pb_init(&e->pb, max_bytes);
}

void em_prom_expo_deinit(em_prom_expo_t *e) {
  if (!e) {
    return;
  }
  em_pb_deinit(&e->pb);
  e->in_family = 0;
}

void em_prom_expo_reset(em_prom_expo_t *e) {
  if (!e) {
    return;
  }
  em_pb_reset(&e->pb);
  e->in_family = 0;
}

bool em_prom_utf8_valid(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    unsigned c = *p;
    size_t n = 0;
    uint32_t cp = 0, min = 0;
    if (c < 0x80) {
      p++;
      continue;
    }
    if (c >= 0xC2 && c <= 0xDF) {
      n = 1, cp = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2, cp = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3, cp = c & 0x07, min = 0x10000;
    } else {
      return false;
    }
    for (size_t k = 1; k <= n; k++) {
      if ((p[k] & 0xC0) != 0x80) {
        return false; /* also stops at the NUL */
      }
      cp = cp << 6 | (p[k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    p += n + 1;
  }
  return true;
}

bool em_prom_name_valid(const char *s, bool colon) {
  if (!s || !*s) {
    return false;
  }
  for (const char *p = s; *p; p++) {
    char c = *p;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':') ||
              (p != s && c >= '0' && c <= '9');
    if (!ok) {
      return false;
    }
  }
  return true;
}

int em_prom_expo_family_begin(em_prom_expo_t *e, const char *name, const char *help,
                              em_prom_type_t type) {
  if (!e) {
    return -EINVAL;
  }
  if (e->pb.err != 0) {
    return e->pb.err;
  }
  if (e->in_family || !em_prom_name_valid(name, true) || (help && !em_prom_utf8_valid(help))) {
    return -EINVAL;
  }
  if (type != EM_PROM_COUNTER && type != EM_PROM_GAUGE && type != EM_PROM_HISTOGRAM) {
    return -EINVAL;
  }
  em_pb_begin(&e->pb, 0);
  em_pb_string(&e->pb, MF_NAME, name);
  if (help && *help) {
    em_pb_string(&e->pb, MF_HELP, help);
  }
  em_pb_uint(&e->pb, MF_TYPE, (uint64_t)type);
  if (e->pb.err != 0) {
    return e->pb.err;
  }
  e->in_family = 1;
  e->type = type;
  return 0;
}

int em_prom_expo_family_end(em_prom_expo_t *e) {
  if (!e) {
    return -EINVAL;
  }
  if (e->pb.err != 0) {
    return e->pb.err;
  }
  if (!e->in_family) {
    return -EINVAL;
  }
  e->in_family = 0;
  return em_pb_end(&e->pb);
}

/* Checks the labels: count, names (unique, not reserved), UTF-8 values. */
static bool labels_valid(const em_prom_label_t *labels, size_t n) {
  if (n > EM_PROM_EXPO_MAX_LABELS || (n > 0 && !labels)) {
    return false;
  }
  for (size_t k = 0; k < n; k++) {
    const em_prom_label_t *l = &labels[k];
    if (!em_prom_name_valid(l->name, false) || strncmp(l->name, "__", 2) == 0 || !l->value ||
        !em_prom_utf8_valid(l->value)) {
      return false;
    }
    for (size_t j = 0; j < k; j++) {
      if (strcmp(labels[j].name, l->name) == 0) {
        return false;
      }
    }
  }
  return true;
}

/* Opens a Metric of the open family of type `type` and writes its labels. */
static int series_begin(em_prom_expo_t *e, em_prom_type_t type, const em_prom_label_t *labels,
                        size_t n_labels) {
  if (e->pb.err != 0) {
    return e->pb.err;
  }
  if (!e->in_family || e->type != type || !labels_valid(labels, n_labels)) {
    return -EINVAL;
  }
  em_pb_begin(&e->pb, MF_METRIC);
  for (size_t k = 0; k < n_labels; k++) {
    em_pb_begin(&e->pb, M_LABEL);
    em_pb_string(&e->pb, LP_NAME, labels[k].name);
    em_pb_string(&e->pb, LP_VALUE, labels[k].value);
    em_pb_end(&e->pb);
  }
  return e->pb.err;
}

static int scalar(em_prom_expo_t *e, em_prom_type_t type, uint32_t field,
                  const em_prom_label_t *labels, size_t n_labels, double value) {
  if (!e) {
    return -EINVAL;
  }
  int rc = series_begin(e, type, labels, n_labels);
  if (rc != 0) {
    return rc;
  }
  em_pb_begin(&e->pb, field);
  em_pb_double(&e->pb, VALUE, value);
  em_pb_end(&e->pb);
  return em_pb_end(&e->pb);
}

int em_prom_expo_counter(em_prom_expo_t *e, const em_prom_label_t *labels, size_t n_labels,
                         double value) {
  return scalar(e, EM_PROM_COUNTER, M_COUNTER, labels, n_labels, value);
}

int em_prom_expo_gauge(em_prom_expo_t *e, const em_prom_label_t *labels, size_t n_labels,
                       double value) {
  return scalar(e, EM_PROM_GAUGE, M_GAUGE, labels, n_labels, value);
}

/* Classic buckets: ascending finite-or-+Inf bounds (no NaN), cumulative counts non-decreasing
 * and at most count. */
static bool classic_valid(const em_prom_bucket_t *b, size_t n, uint64_t count) {
  if (n > 0 && !b) {
    return false;
  }
  for (size_t k = 0; k < n; k++) {
    if (isnan(b[k].upper_bound) || b[k].cumulative_count > count) {
      return false;
    }
    if (k > 0 && (!(b[k].upper_bound > b[k - 1].upper_bound) ||
                  b[k].cumulative_count < b[k - 1].cumulative_count)) {
      return false;
    }
  }
  return true;
}

/* Native fields: schema in range, spans and deltas consistent, counts non-negative and adding
 * up to count - zero_count. */
static bool native_valid(const em_native_t *nh) {
  if (nh->schema < EM_NATIVE_MIN_SCHEMA || nh->schema > EM_NATIVE_MAX_SCHEMA ||
      !(nh->zero_threshold >= 0) || (nh->n_spans > 0 && !nh->spans) ||
      (nh->n_deltas > 0 && !nh->deltas)) {
    return false;
  }
  uint64_t buckets = 0;
  for (size_t k = 0; k < nh->n_spans; k++) {
    buckets += nh->spans[k].length;
  }
  if (buckets != nh->n_deltas || nh->zero_count > nh->count) {
    return false;
  }
  int64_t c = 0;
  uint64_t total = 0;
  for (size_t k = 0; k < nh->n_deltas; k++) {
    int64_t d = nh->deltas[k];
    if ((d > 0 && c > INT64_MAX - d) || c + d < 0) {
      return false;
    }
    c += d;
    total += (uint64_t)c;
    if (total > nh->count - nh->zero_count) {
      return false;
    }
  }
  return total == nh->count - nh->zero_count;
}

static int histogram(em_prom_expo_t *e, const em_prom_label_t *labels, size_t n_labels,
                     uint64_t count, double sum, const em_native_t *nh,
                     const em_prom_bucket_t *classic, size_t n_classic) {
  if (e->pb.err != 0) {
    return e->pb.err;
  }
  if (!classic_valid(classic, n_classic, count) || (nh && !native_valid(nh))) {
    return -EINVAL;
  }
  int rc = series_begin(e, EM_PROM_HISTOGRAM, labels, n_labels);
  if (rc != 0) {
    return rc;
  }
  em_pb_t *pb = &e->pb;
  em_pb_begin(pb, M_HISTOGRAM);
  em_pb_uint(pb, H_SAMPLE_COUNT, count);
  em_pb_double(pb, H_SAMPLE_SUM, sum);
  for (size_t k = 0; k < n_classic; k++) {
    em_pb_begin(pb, H_BUCKET);
    em_pb_uint(pb, B_CUMULATIVE_COUNT, classic[k].cumulative_count);
    em_pb_double(pb, B_UPPER_BOUND, classic[k].upper_bound);
    em_pb_end(pb);
  }
  if (nh) {
    em_pb_sint(pb, H_SCHEMA, nh->schema);
    em_pb_double(pb, H_ZERO_THRESHOLD, nh->zero_threshold);
    em_pb_uint(pb, H_ZERO_COUNT, nh->zero_count);
    for (size_t k = 0; k < nh->n_spans; k++) {
      em_pb_begin(pb, H_POSITIVE_SPAN);
      em_pb_sint(pb, S_OFFSET, nh->spans[k].offset);
      em_pb_uint(pb, S_LENGTH, nh->spans[k].length);
      em_pb_end(pb);
    }
    for (size_t k = 0; k < nh->n_deltas; k++) {
      em_pb_sint(pb, H_POSITIVE_DELTA, nh->deltas[k]);
    }
  }
  em_pb_end(pb);
  return em_pb_end(pb);
}

int em_prom_expo_native(em_prom_expo_t *e, const em_prom_label_t *labels, size_t n_labels,
                        const em_native_t *nh, const em_prom_bucket_t *classic, size_t n_classic) {
  if (!e) {
    return -EINVAL;
  }
  if (!nh) {
    return -EINVAL;
  }
  return histogram(e, labels, n_labels, nh->count, nh->sum_ns, nh, classic, n_classic);
}

int em_prom_expo_classic(em_prom_expo_t *e, const em_prom_label_t *labels, size_t n_labels,
                         uint64_t count, double sum, const em_prom_bucket_t *classic,
                         size_t n_classic) {
  if (!e) {
    return -EINVAL;
  }
  return histogram(e, labels, n_labels, count, sum, NULL, classic, n_classic);
}

int em_prom_expo_data(const em_prom_expo_t *e, const uint8_t **data, size_t *len_bytes) {
  if (!e || !data || !len_bytes) {
    return -EINVAL;
  }
  *data = NULL;
  *len_bytes = 0;
  if (e->pb.err != 0) {
    return e->pb.err;
  }
  if (e->in_family) {
    return -EINVAL;
  }
  *data = em_pb_data(&e->pb, len_bytes);
  return 0;
}

/* ---- Accept negotiation ---- */

/* One token of an Accept header: [p, p+n) with surrounding blanks trimmed. */
typedef struct {
  const char *p;
  size_t n;
} span_t;

static span_t trim(const char *p, size_t n) {
  while (n > 0 && (*p == ' ' || *p == '\t')) {
    p++, n--;
  }
  while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t')) {
    n--;
  }
  return (span_t){p, n};
}

static bool span_is(span_t s, const char *lit) {
  size_t n = strlen(lit);
  return s.n == n && strncasecmp(s.p, lit, n) == 0;
}

/* The q of one parameter value ("0".."1" with up to three decimals); -1 when malformed. */
static double parse_q(span_t v) {
  char buf[8];
  if (v.n == 0 || v.n >= sizeof(buf)) {
    return -1;
  }
  memcpy(buf, v.p, v.n);
  buf[v.n] = '\0';
  char *end = NULL;
  double q = strtod(buf, &end);
  if (*end != '\0' || !(q >= 0 && q <= 1)) {
    return -1;
  }
  return q;
}

/*
 * Parses one media range [p, p+n): whether it is the protobuf exposition (*pb), text/plain or
 * a wildcard (*text), and its q (1 when absent).
 */
static double media_range(const char *p, size_t n, bool *pb, bool *text) {
  const char *end = p + n;
  const char *semi = memchr(p, ';', n);
  span_t type = trim(p, (size_t)((semi ? semi : end) - p));
  bool proto = false, delimited = false;
  double q = 1;
  while (semi) {
    const char *a = semi + 1;
    semi = memchr(a, ';', (size_t)(end - a));
    const char *b = semi ? semi : end;
    const char *eq = memchr(a, '=', (size_t)(b - a));
    if (!eq) {
      continue;
    }
    span_t key = trim(a, (size_t)(eq - a));
    span_t val = trim(eq + 1, (size_t)(b - eq - 1));
    if (val.n >= 2 && val.p[0] == '"' && val.p[val.n - 1] == '"') {
      val.p++, val.n -= 2;
    }
    if (span_is(key, "q")) {
      q = parse_q(val);
    } else if (span_is(key, "proto")) {
      proto = span_is(val, EM_PROM_EXPO_PROTO);
    } else if (span_is(key, "encoding")) {
      delimited = span_is(val, "delimited");
    }
  }
  *pb = span_is(type, EM_PROM_EXPO_MEDIA_TYPE) && proto && delimited;
  *text = span_is(type, "text/plain") || span_is(type, "text/*") || span_is(type, "*/*");
  return q;
}

int em_prom_expo_accepts(const char *accept) {
  if (!accept) {
    return 0;
  }
  double q_pb = 0, q_text = 0;
  const char *p = accept;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);
    bool pb = false, text = false;
    double q = media_range(p, n, &pb, &text);
    if (pb && q > q_pb) {
      q_pb = q;
    }
    if (text && q > q_text) {
      q_text = q;
    }
    if (!comma) {
      break;
    }
    p = comma + 1;
  }
  return q_pb > 0 && q_pb >= q_text;
}
