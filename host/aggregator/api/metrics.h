/*
 * metrics.h - the Prometheus exposition of the registry, as text (format 0.0.4) or as the
 * delimited protobuf MetricFamily stream (prom_expo.h), and the JSON of /api.
 *
 * Both formats come from one list of families written through one sink (em_metrics_out_t):
 * the same families in the same order, the same HELP texts, the same samples and the same
 * device cap. They differ only where the formats do: protobuf carries each stage's latency a
 * second time as a native histogram, edgemon_stage_latency_nanoseconds (below), which text
 * cannot carry; counter and gauge values read back as the same doubles in both.
 *
 * Families (HELP and TYPE once each, samples grouped by family):
 *   edgemon_device_online{device}                    gauge 1/0 (absent when unknown)
 *   edgemon_device_level{device}                     gauge 0 NOMINAL .. 3 CRITICAL
 *   edgemon_device_last_seen_seconds{device}         gauge, Unix time
 *   edgemon_device_info{device,agent_version,board}  gauge 1
 *   edgemon_device_data_messages_total{device}       counter
 *   edgemon_device_lost_messages_total{device}       counter (only when loss is tracked)
 *   edgemon_metric{device,name}                      gauge: every present value of the
 *                                                    latest data message, by metric name
 *   (plus convenience gauges for the figures dashboards use most: edgemon_rss_bytes,
 *    edgemon_ipc, edgemon_cache_miss_ratio, edgemon_psi_cpu_some_avg10, ... by device)
 *   edgemon_stage_latency_seconds{device,stage}      histogram: _bucket{le} built from the
 *                                                    merged exponential buckets (cumulative,
 *                                                    le in seconds, ascending, +Inf last),
 *                                                    _sum, _count
 *   edgemon_stage_latency_nanoseconds{device,stage}  protobuf only: native histogram of the
 *                                                    same merged buckets (schema = the
 *                                                    agent's scale, reduced to <= 8), in ns
 *                                                    (native.h says why not seconds)
 *   edgemon_stage_p99_seconds{device,stage}          gauge: the latest window's p99
 *   edgemon_aggregator_*                             the aggregator's own figures
 *                                                    (em_agg_stats_t: ingest, rejects by
 *                                                    reason, device TTL, store failures by
 *                                                    table and reason, WAL checkpoints,
 *                                                    this exposition's truncation)
 *   edgemon_aggregator_remote_write_*{endpoint}     each remote write endpoint's health
 *                                                    (em_remote_stats_t: sent, failures by
 *                                                    kind, retries, dropped, queue depth and
 *                                                    capacity, last success), when the
 *                                                    registry has a remote write
 * Label values are escaped as the format requires (\\, \", \n). Absent values are omitted,
 * never written as 0.
 *
 * To keep /metrics small, an exponential histogram's buckets are re-bucketed onto a fixed
 * ladder of le bounds (1-2-5 steps from 10 us to 100 s); every fine bucket falls wholly under
 * the first le at or above its upper bound, so the cumulative counts are exact for those le.
 *
 * Size: the text is capped (registry.metrics_max_bytes, default EM_METRICS_MAX_BYTES). A fleet
 * whose exposition would pass the cap does not fail it: the render keeps the first devices in
 * id order that fit, with every family of the aggregator's own, and says so in
 * edgemon_aggregator_metrics_truncated, _devices_omitted and _truncations_total (and in the
 * registry's stats, which /healthz reads).
 */
#ifndef EM_AGG_METRICS_H
#define EM_AGG_METRICS_H

#include "buf.h"
#include "prom_expo.h"
#include "registry.h"
#include "remote.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The cap of a text buffer whose max_bytes is 0. */
#define EM_METRICS_MAX_BYTES (64u * 1024u * 1024u)
/* Of the cap, kept for the aggregator's own families and what the HTTP server appends. */
#define EM_METRICS_SELF_RESERVE_BYTES (64u * 1024u)
/* Of the rest, kept for the HELP and TYPE lines of the per-device families when truncating. */
#define EM_METRICS_HELP_RESERVE_BYTES (8u * 1024u)

/* A text buffer: an em_buf_t (buf.h) whose max_bytes 0 means EM_METRICS_MAX_BYTES. */
typedef em_buf_t em_text_t;

void em_text_free(em_text_t *t);

/* Renders the text exposition of `r` (caller holds its lock) into t (appended), at most
 * r->metrics_max_bytes (see "Size" above), and records in r->stats whether devices were left
 * out. Returns 0 or t->error (-ENOMEM; -E2BIG only when the cap cannot hold even the
 * aggregator's own families). */
int em_metrics_render(em_registry_t *r, em_text_t *t);

/* ---- the sink: one exposition in either format ---------------------------------------- */

typedef enum {
  EM_METRICS_TEXT = 0,     /* Text format 0.0.4. */
  EM_METRICS_PROTOBUF = 1, /* Delimited io.prometheus.client.MetricFamily (prom_expo.h). */
  EM_METRICS_REMOTE = 2,   /* Series appended to a remote write (remote.h): counters and gauges
                              as samples, stage latencies as native histograms only (no classic
                              buckets), every device (no cap), one timestamp, plus one label
                              of the caller's on every series (em_metrics_out_remote). */
} em_metrics_format_t;

/* Content-Type of a format's body. */
#define EM_METRICS_TEXT_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
const char *em_metrics_content_type(em_metrics_format_t format);

/* A family: name, HELP text (static strings, borrowed while its samples are written), type. */
typedef struct {
  const char *name;
  const char *help;
  em_prom_type_t type;
} em_metrics_family_t;

/*
 * An exposition being written. Samples go through em_metrics_out_u64 (and the renderer's own
 * calls); a family's HELP/TYPE (its MetricFamily head in protobuf) is written before its first
 * sample, so a family without samples is left out, and a sample of another family closes the
 * open one: the samples of a family must come together. Errors are sticky (em_metrics_out_error:
 * -E2BIG past the cap, -ENOMEM). Caller-owned value (init/deinit); it owns its buffers. Not
 * thread-safe.
 */
typedef struct {
  em_metrics_format_t format;
  em_text_t text;          /* TEXT: the bytes; text.max_bytes is the cap. */
  em_prom_expo_t pb;       /* PROTOBUF: the bytes, capped at max_bytes. */
  em_native_t native;      /* PROTOBUF: the native histogram being written. */
  em_text_t scratch;       /* PROTOBUF: label values made valid UTF-8. */
  size_t limit_bytes;      /* PROTOBUF: a lower cap the renderer sets while it renders devices. */
  const char *open;        /* Name of the family whose samples are being written; NULL: none. */
  bool help;               /* Write HELP/TYPE (text) and help (protobuf); false to measure. */
  int error;               /* PROTOBUF: -E2BIG past limit_bytes (sticky). */
  size_t head_bytes;       /* PROTOBUF: bytes of family heads written (measuring devices). */
  em_remote_t *remote;     /* REMOTE: where series go (borrowed). */
  int64_t ts_ms;           /* REMOTE: the timestamp of every series. */
  em_prom_label_t extra;   /* REMOTE: added to every series (name NULL: none). */
  uint64_t remote_series;  /* REMOTE: series appended. */
  uint64_t remote_refused; /* REMOTE: series the remote write refused (-EINVAL, -EOVERFLOW). */
} em_metrics_out_t;

/* Empties out for `format` with a cap of max_bytes (0: EM_METRICS_MAX_BYTES). Returns 0 or
 * -EINVAL. Allocates nothing yet. */
int em_metrics_out_init(em_metrics_out_t *out, em_metrics_format_t format, size_t max_bytes);
void em_metrics_out_deinit(em_metrics_out_t *out); /* NULL is a no-op. */

/* Makes an initialised REMOTE out append to `remote` with timestamp ts_ms and, when
 * extra_name is not NULL, the label extra_name=extra_value on every series (both borrowed
 * until deinit). Returns 0 or -EINVAL. */
int em_metrics_out_remote(em_metrics_out_t *out, em_remote_t *remote, int64_t ts_ms,
                          const char *extra_name, const char *extra_value);

/* One sample with labels[0..n_labels) (values borrowed for the call; invalid UTF-8 is written
 * as U+FFFD in both formats) of family f (counter or gauge). */
void em_metrics_out_u64(em_metrics_out_t *out, const em_metrics_family_t *f,
                        const em_prom_label_t *labels, size_t n_labels, uint64_t v);

/* The sticky error: 0, -E2BIG or -ENOMEM. */
int em_metrics_out_error(const em_metrics_out_t *out);

/* Bytes written so far (an open protobuf family counts what it holds). */
size_t em_metrics_out_len(const em_metrics_out_t *out);

/* Closes the open family and hands the bytes over: *body (malloc'd, the caller frees it; NULL
 * when empty) and *len_bytes. Returns 0 or the sticky error (then nothing is handed over).
 * out is empty afterwards, ready for deinit. */
int em_metrics_out_take(em_metrics_out_t *out, char **body, size_t *len_bytes);

/* Renders the exposition of `r` (caller holds its lock) into out in out's format, with the
 * cap and truncation of em_metrics_render (which is this for text). A protobuf out must be
 * empty. Returns 0, -EINVAL, or the sticky error. */
int em_metrics_render_out(em_registry_t *r, em_metrics_out_t *out);

/* Pushes the families of `r` (caller holds its lock) through a REMOTE out: every device, no
 * cap, the registry's stats untouched; then seals the batch (em_remote_flush). Returns 0,
 * -EINVAL, or the sticky error (-ENOMEM). Series the remote write refuses one by one are
 * counted in out->remote_refused and do not fail the push. Never waits on the network. */
int em_metrics_push(em_registry_t *r, em_metrics_out_t *out);

/* Distinct stage names /api/devices merges over the fleet ("fleet"). */
#define EM_METRICS_FLEET_MAX_STAGES 64u

/* Renders /api/devices (every device without buckets, and "fleet": each stage's histograms
 * merged over all devices, with percentiles) or one device as JSON. */
int em_metrics_device_json(const em_agg_device_t *d, bool with_stages, em_text_t *t);
int em_metrics_devices_json(const em_registry_t *r, em_text_t *t);

#endif /* EM_AGG_METRICS_H */
