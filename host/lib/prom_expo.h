/*
 * prom_expo.h - the Prometheus protobuf exposition: a stream of varint-length-delimited
 * io.prometheus.client.MetricFamily messages (counters, gauges, histograms with native and
 * optionally classic buckets), served with EM_PROM_EXPO_CONTENT_TYPE to scrapers whose Accept
 * header asks for it (Prometheus started with --enable-feature=native-histograms does).
 *
 * Use: em_prom_expo_init once; per scrape em_prom_expo_reset, then for each family
 * em_prom_expo_family_begin, one call per series of the family's type, em_prom_expo_family_end;
 * then em_prom_expo_data. Names and label values are checked (metric and label name syntax,
 * UTF-8 values) because Prometheus rejects the whole scrape for one bad family: a refused
 * family or series returns -EINVAL, writes nothing, and the caller may skip it and go on. The
 * writer's own failures (-EOVERFLOW past max_bytes, -ENOMEM) are sticky as in pb.h: every
 * later call returns them, so checking em_prom_expo_data's result is enough for those.
 *
 * Caller-owned value; it owns one buffer (capped at max_bytes). Strings are borrowed for the
 * call. Not thread-safe.
 */
#ifndef EM_PROM_EXPO_H
#define EM_PROM_EXPO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "native.h"
#include "pb.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Content-Type of the delimited protobuf exposition (and the media type to look for in
 * Accept: "application/vnd.google.protobuf" with proto=io.prometheus.client.MetricFamily). */
#define EM_PROM_EXPO_CONTENT_TYPE                                                                  \
  "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
#define EM_PROM_EXPO_MEDIA_TYPE "application/vnd.google.protobuf"
#define EM_PROM_EXPO_PROTO      "io.prometheus.client.MetricFamily"

#define EM_PROM_EXPO_MAX_LABELS 32 /* Labels per series. */

/* io.prometheus.client.MetricType values. */
typedef enum {
  EM_PROM_COUNTER = 0,
  EM_PROM_GAUGE = 1,
  EM_PROM_HISTOGRAM = 4,
} em_prom_type_t;

typedef struct {
  const char *name;  /* [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__". */
  const char *value; /* UTF-8. */
} em_prom_label_t;

/* Whether s (NUL-terminated) is valid UTF-8: no overlongs, no surrogates, at most U+10FFFF. */
bool em_prom_utf8_valid(const char *s);

/* Whether s is a metric name, [a-zA-Z_:][a-zA-Z0-9_:]* (colon set), or a label name,
 * [a-zA-Z_][a-zA-Z0-9_]* (colon clear). NULL and "" are not. */
bool em_prom_name_valid(const char *s, bool colon);

/* One classic bucket: values <= upper_bound, cumulative. */
typedef struct {
  double upper_bound;
  uint64_t cumulative_count;
} em_prom_bucket_t;

typedef struct {
  em_pb_t pb;
  int in_family;       /* A family is open. */
  em_prom_type_t type; /* Its type. */
} em_prom_expo_t;

/* Empties e with an output cap of max_bytes. Returns 0 or -EINVAL. */
int em_prom_expo_init(em_prom_expo_t *e, size_t max_bytes);
void em_prom_expo_deinit(em_prom_expo_t *e); /* NULL is a no-op. */

/* Forgets the output and the sticky error; keeps the buffer. */
void em_prom_expo_reset(em_prom_expo_t *e);

/* Opens a family. name: [a-zA-Z_:][a-zA-Z0-9_:]*; help: UTF-8 or NULL. Returns 0, -EINVAL
 * (bad name, help or type, a family already open), -EOVERFLOW, -ENOMEM, or the sticky
 * error. */
int em_prom_expo_family_begin(em_prom_expo_t *e, const char *name, const char *help,
                              em_prom_type_t type);

/* Closes the open family. A family with no series is legal (Prometheus skips it). Returns 0,
 * -EINVAL (none open), -EOVERFLOW, -ENOMEM, or the sticky error. */
int em_prom_expo_family_end(em_prom_expo_t *e);

/*
 * One series of the open family, labels[0..n_labels) in the order given (names unique). The
 * family's type must match: counter and gauge take a value, histograms a native histogram
 * (em_native_from_histo) and optionally classic buckets (ascending upper_bound, cumulative
 * counts non-decreasing and at most nh->count; NULL with 0 for none), or classic buckets only
 * with their count and sum (em_prom_expo_classic). Returns 0, -EINVAL (type mismatch, no
 * family open, bad label, bad buckets, too many labels), -EOVERFLOW, -ENOMEM, or the sticky
 * error. A refused series (-EINVAL) leaves nothing of itself in the output.
 */
int em_prom_expo_counter(em_prom_expo_t *e, const em_prom_label_t *labels, size_t n_labels,
                         double value);
int em_prom_expo_gauge(em_prom_expo_t *e, const em_prom_label_t *labels, size_t n_labels,
                       double value);
int em_prom_expo_native(em_prom_expo_t *e, const em_prom_label_t *labels, size_t n_labels,
                        const em_native_t *nh, const em_prom_bucket_t *classic, size_t n_classic);
int em_prom_expo_classic(em_prom_expo_t *e, const em_prom_label_t *labels, size_t n_labels,
                         uint64_t count, double sum, const em_prom_bucket_t *classic,
                         size_t n_classic);

/* The bytes of the exposition (borrowed, valid until the next call on e) in *len_bytes.
 * Returns 0, -EINVAL (a family still open), or the sticky error (then *data is NULL). */
int em_prom_expo_data(const em_prom_expo_t *e, const uint8_t **data, size_t *len_bytes);

/* Whether an Accept header value asks for the protobuf exposition: a media range
 * application/vnd.google.protobuf with proto=io.prometheus.client.MetricFamily and
 * encoding=delimited, with a q that is not 0. NULL: false. */
int em_prom_expo_accepts(const char *accept);

#ifdef __cplusplus
}
#endif

#endif /* EM_PROM_EXPO_H */
