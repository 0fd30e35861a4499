/*
 * metrics.h - the Prometheus text exposition (format 0.0.4) of the registry.
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
 *   edgemon_stage_p99_seconds{device,stage}          gauge: the latest window's p99
 *   edgemon_aggregator_*                             the aggregator's own figures
 *                                                    (em_agg_stats_t: ingest, rejects by
 *                                                    reason, device TTL, store failures by
 *                                                    table and reason, WAL checkpoints,
 *                                                    this exposition's truncation)
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

#include "registry.h"

#include <stddef.h>

/* A growable text buffer (capped at max_bytes, or EM_METRICS_MAX_BYTES when 0). */
#define EM_METRICS_MAX_BYTES (64u * 1024u * 1024u)
/* Of the cap, kept for the aggregator's own families and what the HTTP server appends. */
#define EM_METRICS_SELF_RESERVE_BYTES (64u * 1024u)
/* Of the rest, kept for the HELP and TYPE lines of the per-device families when truncating. */
#define EM_METRICS_HELP_RESERVE_BYTES (8u * 1024u)

typedef struct {
  char *data;
  size_t len;
  size_t cap;
  int error;        /* -ENOMEM or -E2BIG once a write failed; later writes are ignored. */
  size_t max_bytes; /* Cap of len; 0: EM_METRICS_MAX_BYTES. */
} em_text_t;

void em_text_free(em_text_t *t);

/* Renders the exposition of `r` (caller holds its lock) into t (appended), at most
 * r->metrics_max_bytes (see "Size" above), and records in r->stats whether devices were left
 * out. Returns 0 or t->error (-ENOMEM; -E2BIG only when the cap cannot hold even the
 * aggregator's own families). */
int em_metrics_render(em_registry_t *r, em_text_t *t);

/* Renders /api/devices (all == true, devices without buckets) or one device as JSON. */
int em_metrics_device_json(const em_agg_device_t *d, bool with_stages, em_text_t *t);
int em_metrics_devices_json(const em_registry_t *r, em_text_t *t);

#endif /* EM_AGG_METRICS_H */
