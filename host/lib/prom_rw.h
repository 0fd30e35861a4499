/*
 * prom_rw.h - a Prometheus remote write 1.0 request: a prometheus.WriteRequest (protobuf) of
 * TimeSeries, each with its labels and one sample (gauges, counters) or one native histogram
 * (stage latencies, from em_native_t, in nanoseconds), and the snappy block compression the
 * protocol sends it in.
 *
 * Field numbers are those of prompb/remote.proto and prompb/types.proto (Prometheus 2.42):
 *
 *   WriteRequest: timeseries 1
 *   TimeSeries:   labels 1 (Label), samples 2 (Sample), histograms 4 (Histogram)
 *   Label:        name 1, value 2
 *   Sample:       value 1 (double), timestamp 2 (int64, ms since the epoch)
 *   Histogram:    count_int 1 (uint64), sum 3 (double), schema 4 (sint32), zero_threshold 5
 *                 (double), zero_count_int 6 (uint64), positive_spans 11 (BucketSpan),
 *                 positive_deltas 12 (repeated sint64), reset_hint 14 (enum, left UNKNOWN),
 *                 timestamp 15 (int64, ms)
 *   BucketSpan:   offset 1 (sint32), length 2 (uint32)
 *
 * Labels: __name__ first, then the caller's labels sorted by name (byte order), which is the
 * lexicographic order the protocol asks for whenever no label name starts with an upper-case
 * letter (they sort before '_'). Names are checked before anything is written: the metric
 * name [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* not starting with "__"
 * (reserved), no name twice, values valid UTF-8, at most EM_PROM_RW_MAX_LABELS labels. A
 * receiver refuses a whole request (400) for one bad series, so one bad series must not get in.
 *
 * A series that is refused (-EINVAL) or does not fit (-EOVERFLOW, -ENOMEM) leaves the request
 * as it was, so a batcher may send what it holds and write the series again into an empty one.
 *
 * Caller-owned value (em_prom_rw_init/em_prom_rw_deinit), reused across requests; it owns one
 * protobuf buffer capped at max_bytes. Not thread-safe.
 */
#ifndef EM_PROM_RW_H
#define EM_PROM_RW_H

#include <stddef.h>
#include <stdint.h>

#include "native.h"
#include "pb.h"
#include "prom_expo.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EM_PROM_RW_MAX_LABELS   16 /* Caller labels per series (__name__ not counted). */
#define EM_PROM_RW_CONTENT_TYPE "application/x-protobuf"
#define EM_PROM_RW_ENCODING     "snappy"
#define EM_PROM_RW_VERSION      "0.1.0" /* X-Prometheus-Remote-Write-Version of 1.0. */

/* A label: the exposition's (name and UTF-8 value, borrowed for the call); a NULL value is
 * written as "". */
typedef em_prom_label_t em_prom_rw_label_t;

typedef struct {
  em_pb_t pb;
  size_t n_series;     /* TimeSeries written since the last reset. */
  size_t n_samples;    /* Of which samples. */
  size_t n_histograms; /* Of which native histograms. */
} em_prom_rw_t;

/* Empties w with a cap of max_bytes on the uncompressed request. Returns 0 or -EINVAL. */
int em_prom_rw_init(em_prom_rw_t *w, size_t max_bytes);

/* Frees w's buffer. w may be NULL. */
void em_prom_rw_deinit(em_prom_rw_t *w);

/* Forgets the series written; keeps the buffer. */
void em_prom_rw_reset(em_prom_rw_t *w);

/*
 * Appends one TimeSeries with one sample: value at ts_ms (ms since the epoch). labels (n_labels
 * entries, borrowed) need not be sorted. Returns 0, -EINVAL (NULL w or name, bad or duplicate
 * names, a value not UTF-8, too many labels), -EOVERFLOW (past max_bytes) or -ENOMEM; on failure
 * nothing of the series is written.
 */
int em_prom_rw_sample(em_prom_rw_t *w, const char *name, const em_prom_rw_label_t *labels,
                      size_t n_labels, double value, int64_t ts_ms);

/*
 * Appends one TimeSeries with one native histogram nh (borrowed; values in ns as
 * em_native_from_histo makes them) at ts_ms. Returns as em_prom_rw_sample, and -EINVAL also
 * for an inconsistent nh (schema out of -4..8, span lengths not adding up to n_deltas, a bucket
 * count going negative, a zero count above the count).
 */
int em_prom_rw_histogram(em_prom_rw_t *w, const char *name, const em_prom_rw_label_t *labels,
                         size_t n_labels, const em_native_t *nh, int64_t ts_ms);

/* The uncompressed WriteRequest written so far (borrowed; valid until the next append, reset
 * or deinit) and its length in *len_bytes; NULL with 0 when empty. */
const uint8_t *em_prom_rw_data(const em_prom_rw_t *w, size_t *len_bytes);

/*
 * Snappy block compression (the body remote write sends) of in[0..in_len) into a new heap
 * buffer *out (transferred to the caller: free() it) of *out_len bytes. Returns 0, -EINVAL
 * (NULL pointers) or -ENOMEM.
 */
int em_prom_rw_compress(const uint8_t *in, size_t in_len, uint8_t **out, size_t *out_len);

#ifdef __cplusplus
}
#endif

#endif /* EM_PROM_RW_H */
