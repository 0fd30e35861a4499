/*
 * metrics.c - renders the registry as a Prometheus exposition, text (format 0.0.4) or protobuf
 * (delimited MetricFamily, prom_expo.h), and as JSON (see metrics.h).
 *
 * One list of families, two formats: render_devices() and render_aggregator() name each family
 * once (name, HELP, type) and write its samples through the sink, em_metrics_out_t, whose
 * calls are the same for both formats:
 *
 *   out_family(f)              opens f before its first sample (text: HELP and TYPE lines;
 *                              protobuf: a MetricFamily head), closing the open family
 *   out_sample(f, labels, v)   a counter or gauge sample (v: integer, float, or ns written as
 *                              seconds)
 *   out_classic(f, stage)      the le-ladder histogram (text: _bucket/_sum/_count lines;
 *                              protobuf: a classic Histogram with the same cumulative counts)
 *   out_native(f, stage)       protobuf only: the native histogram (native.h); a no-op in text,
 *                              where the family is then never opened
 *   out_close()                ends the open family
 *
 * so the families, their order, the HELP texts and the device cap cannot differ between the
 * formats. Values are the same doubles in both: the protobuf double of a sample is what a text
 * parser reads from its text (ns as seconds goes through the decimal text; ns / 1e9 would round
 * differently for a third of today's Unix times). Label values that are not valid UTF-8 are
 * written with U+FFFD in both formats (Prometheus refuses a protobuf scrape with invalid UTF-8).
 *
 * Families, in the order written (HELP and TYPE once each, written just before the family's
 * first sample, so a family without samples is left out whole):
 *
 *   edgemon_device_online{device}                     gauge 1/0, when a status was seen
 *   edgemon_device_level{device}                      gauge 0 NOMINAL .. 3 CRITICAL, when known
 *   edgemon_device_last_seen_seconds{device}          gauge, Unix time, when anything was seen
 *   edgemon_device_info{device,agent_version,board}   gauge 1, when a birth was seen
 *   edgemon_model_info{device,model,version,label_<key>...}  gauge 1, per device with a current
 *                                                     model (registry.h, "Model")
 *   edgemon_device_data_messages_total{device}        counter
 *   edgemon_device_lost_messages_total{device}        counter, only when loss is tracked
 *   edgemon_device_duplicate_messages_total{device}   counter, only when loss is tracked
 *   edgemon_device_rebirths_requested_total{device}   counter
 *   edgemon_metric{device,name}                       gauge: every present value of the latest
 *                                                     data message, by metric name (the
 *                                                     registry keeps names, not units)
 *   edgemon_rss_bytes, edgemon_mem_available_bytes, edgemon_ipc, edgemon_cache_miss_ratio,
 *   edgemon_branch_miss_ratio, edgemon_psi_{cpu,memory,io}_some_avg10_ratio{device}
 *                                                     gauges copied from the metrics of those
 *                                                     names (PSI percentages divided by 100)
 *   edgemon_stage_latency_seconds{device,stage}       histogram over every window merged
 *   edgemon_stage_latency_nanoseconds{device,stage}   protobuf only: the same merged buckets
 *                                                     as a native histogram in ns (schema =
 *                                                     the merged scale, reduced to <= 8; a
 *                                                     separate name because Prometheus 2.42
 *                                                     stores a histogram as native or classic,
 *                                                     never both: the classic one stays for
 *                                                     text scrapers and existing dashboards)
 *   edgemon_stage_p99_seconds{device,stage}           gauge: the latest window's p99
 *   edgemon_stage_windows_total{device,stage}         counter: windows merged
 *   edgemon_aggregator_devices                        gauge
 *   edgemon_aggregator_start_time_seconds             gauge, Unix time
 *   edgemon_aggregator_{received,ingested,malformed,unknown_birth}_total,
 *   edgemon_aggregator_devices_expired_total, edgemon_aggregator_device_ttl_seconds,
 *   edgemon_aggregator_store_{rows,batches,errors}_total,
 *   edgemon_aggregator_checkpoint_{runs,frames,busy,errors,truncates}_total,
 *   edgemon_aggregator_checkpoint_writer_{runs,busy}_total, edgemon_aggregator_wal_bytes,
 *   edgemon_aggregator_wal_max_bytes, edgemon_aggregator_metrics_{truncated,devices_omitted,
 *   max_bytes}, edgemon_aggregator_metrics_truncations_total
 *                                                     em_agg_stats_t by name
 *   edgemon_aggregator_rejected_total{reason}         counter: topic, kind_mismatch,
 *                                                     device_mismatch
 *   edgemon_aggregator_store_failures_total{table,reason}  counter: failed writes by SQLite
 *                                                     reason
 *   edgemon_aggregator_forensic_{stored_total,bytes,max_bytes}{kind},
 *   edgemon_aggregator_forensic_evicted_total{kind,reason}
 *                                                     flight recordings and stack profiles in
 *                                                     the store (kind flight, profile; reason
 *                                                     device_cap, global_cap); none without
 *                                                     a store
 *   edgemon_aggregator_remote_write_{sent_requests,sent_samples,sent_histograms,retries,
 *   dropped_requests,dropped_samples,dropped_histograms}_total{endpoint},
 *   edgemon_aggregator_remote_write_{queue_requests,queue_capacity_requests}{endpoint},
 *   edgemon_aggregator_remote_write_failures_total{endpoint,kind},
 *   edgemon_aggregator_remote_write_last_success_time_seconds{endpoint}
 *                                                     the remote write's health per endpoint
 *                                                     (r->remote; none without one)
 *
 * A third backend, EM_METRICS_REMOTE, writes the same list into a remote write (remote.h):
 * counters and gauges as samples, stage latencies as native histograms only (out_classic is a
 * no-op there), every device, one timestamp and the caller's extra label on every series
 * (em_metrics_push).
 *
 * Size: past the cap (registry metrics_max_bytes) the per-device families keep the first
 * devices in id order that fit (each device measured alone in the scrape's format, HELP/TYPE
 * or MetricFamily heads aside), and the aggregator's families are always written in full
 * (metrics.h). The same rule in both formats; a protobuf scrape, carrying the native
 * histograms too, may keep a different number of devices than a text one.
 *
 * Numbers: integers are written as integers, nanosecond figures as exact decimal seconds
 * ("12.000345"), other floats as the shortest "%.*g" that reads back to the same double. The
 * histogram's le bounds come from a fixed 1-2-5 ladder of strings, so they are the same bytes
 * at every scrape.
 *
 * JSON (/api/devices/<id>): {"device", "agent_version", "board", "session", "birth_time_ns",
 * "period_ns" (null without a birth), "online" (null without a status), "status_time_ns",
 * "level" ("NOMINAL".."CRITICAL" or null), "reason", "last_seen_ns", "data_time_ns",
 * "window_ns", "values" {every name the birth defines: the latest value or null}, "stages"
 * [{"name", "windows", "last" {the latest window's count, sum and percentiles in ns}, "count",
 * "sum_ns", "min_ns", "max_ns", "mean_ns", "p50_ns", "p90_ns", "p99_ns", "p999_ns"
 * (cumulative; the quantiles em_histo_quantile_ns gives), "buckets" [{"le" seconds or null for
 * +Inf, "count" cumulative}] (one device only)}], "data_messages", "lost_messages",
 * "duplicate_messages", "rebirths_requested"}. /api/devices: {"loss_tracked", "devices": [...],
 * "fleet": [{"name", "devices", "count", "sum_ns", "p50_ns".."p999_ns"}] (each stage name's
 * histograms merged over every device: the fleet percentiles), "fleet_truncated"}.
 *
 * Strings: label values and JSON strings are escaped as their formats require; bytes that are
 * not valid UTF-8 are replaced by U+FFFD so the output always parses.
 *
 * Owns nothing beyond the caller's em_text_t or em_metrics_out_t (and, while /api/devices
 * renders, one merged histogram per stage name). The caller holds the registry's lock.
 */
#define _POSIX_C_SOURCE 200809L
#include "metrics.h"

#include <edgemon/json_write.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- em_text_t ------------------------------------------------------------------------- */

void em_text_free(em_text_t *t) {
  em_buf_free(t);
}

/* t with its cap set: EM_METRICS_MAX_BYTES when it has none. */
static em_text_t *capped(em_text_t *t) {
  if (!t->max_bytes) {
    t->max_bytes = EM_METRICS_MAX_BYTES;
  }
  return t;
}

/* The writes below leave a failure in t->error, which the renderers return. */
static void text_put(em_text_t *t, const char *s, size_t n) {
  (void)em_buf_add(capped(t), s, n);
}

static void text_str(em_text_t *t, const char *s) {
  text_put(t, s, strlen(s));
}

static void text_ch(em_text_t *t, char c) {
  text_put(t, &c, 1);
}

__attribute__((format(printf, 2, 3))) static void text_printf(em_text_t *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  (void)em_buf_vprintf(capped(t), fmt, ap);
  va_end(ap);
}

/* ---- numbers ---------------------------------------------------------------------------- */

static void put_u64(em_text_t *t, uint64_t v) {
  text_printf(t, "%" PRIu64, v);
}

/* The shortest %.*g of v that reads back as v. v must be finite. */
static void put_double(em_text_t *t, double v) {
  char buf[40];
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(buf, sizeof(buf), "%.*g", prec, v);
    if (strtod(buf, NULL) == v) {
      break;
    }
  }
  text_str(t, buf);
}

/* ns as exact decimal seconds: "12", "0.5", "1700000000.000000123". */
static void put_ns_as_seconds(em_text_t *t, uint64_t ns) {
  uint64_t whole = ns / 1000000000u;
  uint64_t frac = ns % 1000000000u;
  if (frac == 0) {
    put_u64(t, whole);
    return;
  }
  char buf[16];
  snprintf(buf, sizeof(buf), "%09" PRIu64, frac);
  size_t n = strlen(buf);
  while (n > 0 && buf[n - 1] == '0') {
    n--;
  }
  buf[n] = '\0';
  text_printf(t, "%" PRIu64 ".%s", whole, buf);
}

/* A value as a number; returns false (nothing written) for ABSENT or a non-finite float. */
static bool put_value(em_text_t *t, const em_value_t *v, double scale) {
  switch (v->type) {
  case EM_VALUE_UINT:
    if (scale == 1.0) {
      put_u64(t, v->as.u);
    } else {
      put_double(t, (double)v->as.u * scale);
    }
    return true;
  case EM_VALUE_INT:
    if (scale == 1.0) {
      text_printf(t, "%" PRId64, v->as.i);
    } else {
      put_double(t, (double)v->as.i * scale);
    }
    return true;
  case EM_VALUE_FLOAT:
    if (!isfinite(v->as.f)) {
      return false;
    }
    put_double(t, v->as.f * scale);
    return true;
  case EM_VALUE_ABSENT:
  default:
    return false;
  }
}

/* ---- strings ---------------------------------------------------------------------------- */

static void text_sink(void *ctx, const char *s, size_t n) {
  text_put(ctx, s, n);
}

/* Escapes s for a Prometheus label value (\\, \", \n) or, when json, a JSON string (also the
 * other control characters as \u00XX). Invalid UTF-8 becomes U+FFFD. No quotes around it. */
static void put_escaped(em_text_t *t, const char *str, bool json) {
  const char *s = str ? str : "";
  unsigned flags = EM_JSON_ESC_NEWLINE | EM_JSON_UTF8_REPLACE | (json ? 0u : EM_JSON_CTRL_RAW);
  em_json_escape(s, strlen(s), flags, text_sink, t);
}

static void put_json_string(em_text_t *t, const char *s) {
  text_ch(t, '"');
  put_escaped(t, s, true);
  text_ch(t, '"');
}

/* ---- the sink: one exposition, text or protobuf ----------------------------------------- */

/* A sample's value as the renderer has it; each backend writes it its own way. */
typedef enum { NUM_U64, NUM_I64, NUM_F64, NUM_NS_AS_SECONDS } num_kind_t;

typedef struct {
  num_kind_t kind;
  union {
    uint64_t u;
    int64_t i;
    double f;
  } as;
} num_t;

static num_t num_u64(uint64_t v) {
  return (num_t){.kind = NUM_U64, .as.u = v};
}

static num_t num_ns_as_seconds(uint64_t ns) {
  return (num_t){.kind = NUM_NS_AS_SECONDS, .as.u = ns};
}

/* A value scaled to the family's unit; false for ABSENT and non-finite floats. */
static bool num_of_value(const em_value_t *v, double scale, num_t *out) {
  switch (v->type) {
  case EM_VALUE_UINT:
    *out =
        scale == 1.0 ? num_u64(v->as.u) : (num_t){.kind = NUM_F64, .as.f = (double)v->as.u * scale};
    return true;
  case EM_VALUE_INT:
    *out = scale == 1.0 ? (num_t){.kind = NUM_I64, .as.i = v->as.i}
                        : (num_t){.kind = NUM_F64, .as.f = (double)v->as.i * scale};
    return true;
  case EM_VALUE_FLOAT:
    if (!isfinite(v->as.f)) {
      return false;
    }
    *out = (num_t){.kind = NUM_F64, .as.f = v->as.f * scale};
    return true;
  case EM_VALUE_ABSENT:
  default:
    return false;
  }
}

/* ns as the double a text parser reads from put_ns_as_seconds' decimal, so both formats carry
 * the same value (ns / 1e9 in binary64 could round differently). */
static double ns_to_seconds(uint64_t ns) {
  char buf[48];
  snprintf(buf, sizeof(buf), "%" PRIu64 ".%09" PRIu64, ns / 1000000000u, ns % 1000000000u);
  return strtod(buf, NULL);
}

static double num_double(num_t v) {
  switch (v.kind) {
  case NUM_U64:
    return (double)v.as.u;
  case NUM_I64:
    return (double)v.as.i;
  case NUM_NS_AS_SECONDS:
    return ns_to_seconds(v.as.u);
  case NUM_F64:
  default:
    return v.as.f;
  }
}

static void put_num(em_text_t *t, num_t v) {
  switch (v.kind) {
  case NUM_U64:
    put_u64(t, v.as.u);
    break;
  case NUM_I64:
    text_printf(t, "%" PRId64, v.as.i);
    break;
  case NUM_NS_AS_SECONDS:
    put_ns_as_seconds(t, v.as.u);
    break;
  case NUM_F64:
  default:
    put_double(t, v.as.f);
    break;
  }
}

static const char *type_name(em_prom_type_t type) {
  switch (type) {
  case EM_PROM_COUNTER:
    return "counter";
  case EM_PROM_HISTOGRAM:
    return "histogram";
  case EM_PROM_GAUGE:
  default:
    return "gauge";
  }
}

const char *em_metrics_content_type(em_metrics_format_t format) {
  return format == EM_METRICS_PROTOBUF ? EM_PROM_EXPO_CONTENT_TYPE : EM_METRICS_TEXT_CONTENT_TYPE;
}

int em_metrics_out_init(em_metrics_out_t *out, em_metrics_format_t format, size_t max_bytes) {
  if (!out ||
      (format != EM_METRICS_TEXT && format != EM_METRICS_PROTOBUF && format != EM_METRICS_REMOTE)) {
    return -EINVAL;
  }
  memset(out, 0, sizeof(*out));
  out->format = format;
  out->help = true;
  out->text.max_bytes = max_bytes;
  em_native_init(&out->native);
  return em_prom_expo_init(&out->pb, max_bytes ? max_bytes : EM_METRICS_MAX_BYTES);
}

void em_metrics_out_deinit(em_metrics_out_t *out) {
  if (!out) {
    return;
  }
  em_text_free(&out->text);
  em_text_free(&out->scratch);
  em_prom_expo_deinit(&out->pb);
  em_native_deinit(&out->native);
  out->open = NULL;
}

int em_metrics_out_error(const em_metrics_out_t *out) {
  if (out->format == EM_METRICS_TEXT) {
    return out->text.error;
  }
  if (out->error || out->format == EM_METRICS_REMOTE) {
    return out->error;
  }
  int err = em_pb_error(&out->pb.pb);
  return err == -EOVERFLOW ? -E2BIG : err;
}

size_t em_metrics_out_len(const em_metrics_out_t *out) {
  if (out->format == EM_METRICS_REMOTE) {
    return 0;
  }
  return out->format == EM_METRICS_TEXT ? out->text.len : out->pb.pb.len_bytes;
}

int em_metrics_out_remote(em_metrics_out_t *out, em_remote_t *remote, int64_t ts_ms,
                          const char *extra_name, const char *extra_value) {
  if (!out || out->format != EM_METRICS_REMOTE || !remote ||
      (extra_name && (!extra_value || !em_prom_name_valid(extra_name, false) ||
                      strncmp(extra_name, "__", 2) == 0))) {
    return -EINVAL;
  }
  out->remote = remote;
  out->ts_ms = ts_ms;
  out->extra = (em_prom_label_t){extra_name, extra_value};
  return 0;
}

/* Protobuf: a series past limit_bytes fails the exposition as the text cap does. */
static void pb_check_limit(em_metrics_out_t *out) {
  if (out->limit_bytes && !out->error && out->pb.pb.len_bytes > out->limit_bytes) {
    out->error = -E2BIG;
  }
}

/* Closes the open family (protobuf: ends its MetricFamily). */
static void out_close(em_metrics_out_t *out) {
  if (out->open && out->format == EM_METRICS_PROTOBUF) {
    (void)em_prom_expo_family_end(&out->pb);
    pb_check_limit(out);
  }
  out->open = NULL;
}

/* Opens f unless it is open: HELP and TYPE lines, or a MetricFamily head. Returns false when
 * the exposition has failed. */
static bool out_family(em_metrics_out_t *out, const em_metrics_family_t *f) {
  if (em_metrics_out_error(out)) {
    return false;
  }
  if (out->open && strcmp(out->open, f->name) == 0) {
    return true;
  }
  out_close(out);
  out->open = f->name;
  if (out->format == EM_METRICS_TEXT) {
    if (out->help) {
      text_printf(&out->text, "# HELP %s ", f->name);
      text_str(&out->text, f->help);
      text_printf(&out->text, "\n# TYPE %s %s\n", f->name, type_name(f->type));
    }
  } else if (out->format == EM_METRICS_PROTOBUF) {
    size_t before = out->pb.pb.len_bytes;
    (void)em_prom_expo_family_begin(&out->pb, f->name, out->help ? f->help : NULL, f->type);
    /* The head, and the length prefix em_pb_end adds (1 to 3 bytes for these sizes). */
    out->head_bytes += out->pb.pb.len_bytes - before + 2;
  }
  return em_metrics_out_error(out) == 0;
}

/* Whether s is valid UTF-8. */
static bool utf8_valid(const char *str) {
  const unsigned char *s = (const unsigned char *)str;
  size_t n = strlen(str);
  for (size_t i = 0; i < n;) {
    size_t run = em_json_utf8_len(s + i, n - i);
    if (run == 0) {
      return false;
    }
    i += run;
  }
  return true;
}

/* Protobuf: labels with every invalid UTF-8 value replaced, as text writes it (U+FFFD for each
 * bad byte), into fixed[]; returns the labels to write. */
static const em_prom_label_t *pb_labels(em_metrics_out_t *out, const em_prom_label_t *labels,
                                        size_t n, em_prom_label_t *fixed) {
  bool clean = true;
  for (size_t k = 0; k < n; k++) {
    clean = clean && utf8_valid(labels[k].value ? labels[k].value : "");
  }
  if (clean) {
    return labels;
  }
  size_t at[EM_PROM_EXPO_MAX_LABELS + 1];
  em_buf_reset(&out->scratch);
  for (size_t k = 0; k < n; k++) {
    at[k] = out->scratch.len;
    const unsigned char *s = (const unsigned char *)(labels[k].value ? labels[k].value : "");
    size_t len = strlen((const char *)s);
    for (size_t i = 0; i < len;) {
      size_t run = em_json_utf8_len(s + i, len - i);
      if (run == 0) {
        text_str(&out->scratch, "\xEF\xBF\xBD");
        i++;
      } else {
        text_put(&out->scratch, (const char *)s + i, run);
        i += run;
      }
    }
    text_put(&out->scratch, "", 1);
  }
  if (out->scratch.error) {
    return labels; /* prom_expo refuses the series: left out, as nothing else can be done. */
  }
  for (size_t k = 0; k < n; k++) {
    fixed[k] = (em_prom_label_t){labels[k].name, out->scratch.data + at[k]};
  }
  return fixed;
}

/* Text: "name<suffix>{k="v",...,le="<le>"} " (no braces without labels). */
static void text_series(em_text_t *t, const char *name, const char *suffix,
                        const em_prom_label_t *labels, size_t n, const char *le) {
  text_str(t, name);
  text_str(t, suffix);
  for (size_t k = 0; k < n; k++) {
    text_printf(t, "%c%s=\"", k ? ',' : '{', labels[k].name);
    put_escaped(t, labels[k].value, false);
    text_ch(t, '"');
  }
  if (le) {
    text_str(t, n ? ",le=\"" : "{le=\"");
    text_str(t, le);
    text_ch(t, '"');
  }
  text_str(t, n || le ? "} " : " ");
}

/* Remote: appends one series of f (a sample, or the native histogram nh) with labels and the
 * out's extra label, made valid UTF-8 as the other formats write them. One series refused is
 * counted; running out of memory fails the push. */
static void remote_series(em_metrics_out_t *out, const em_metrics_family_t *f,
                          const em_prom_label_t *labels, size_t n, double v,
                          const em_native_t *nh) {
  em_prom_label_t fixed[EM_PROM_EXPO_MAX_LABELS];
  const em_prom_label_t *l = pb_labels(out, labels, n, fixed);
  em_prom_label_t all[EM_PROM_EXPO_MAX_LABELS + 1];
  if (n > 0) {
    memcpy(all, l, n * sizeof(*l)); /* l is NULL for an unlabelled sample. */
  }
  if (out->extra.name) {
    all[n++] = out->extra;
  }
  int rc = nh ? em_remote_histogram(out->remote, f->name, all, n, nh, out->ts_ms)
              : em_remote_sample(out->remote, f->name, all, n, v, out->ts_ms);
  if (rc == -ENOMEM) {
    out->error = out->error ? out->error : -ENOMEM;
  } else if (rc < 0) {
    out->remote_refused++;
  } else {
    out->remote_series++;
  }
}

/* One counter or gauge sample. */
static void out_sample(em_metrics_out_t *out, const em_metrics_family_t *f,
                       const em_prom_label_t *labels, size_t n, num_t v) {
  if (n > EM_PROM_EXPO_MAX_LABELS || !out_family(out, f)) {
    return;
  }
  if (out->format == EM_METRICS_REMOTE) {
    remote_series(out, f, labels, n, num_double(v), NULL);
    return;
  }
  if (out->format == EM_METRICS_TEXT) {
    text_series(&out->text, f->name, "", labels, n, NULL);
    put_num(&out->text, v);
    text_ch(&out->text, '\n');
    return;
  }
  em_prom_label_t fixed[EM_PROM_EXPO_MAX_LABELS];
  const em_prom_label_t *l = pb_labels(out, labels, n, fixed);
  if (f->type == EM_PROM_COUNTER) {
    (void)em_prom_expo_counter(&out->pb, l, n, num_double(v));
  } else {
    (void)em_prom_expo_gauge(&out->pb, l, n, num_double(v));
  }
  pb_check_limit(out);
}

void em_metrics_out_u64(em_metrics_out_t *out, const em_metrics_family_t *f,
                        const em_prom_label_t *labels, size_t n_labels, uint64_t v) {
  if (!out || !f) {
    return;
  }
  out_sample(out, f, labels, n_labels, num_u64(v));
}

int em_metrics_out_take(em_metrics_out_t *out, char **body, size_t *len_bytes) {
  if (!out || !body || !len_bytes) {
    return -EINVAL;
  }
  *body = NULL;
  *len_bytes = 0;
  out_close(out);
  int err = em_metrics_out_error(out);
  if (err || out->format == EM_METRICS_REMOTE) {
    return err; /* Remote: the series went to the remote write; nothing to hand over. */
  }
  if (out->format == EM_METRICS_TEXT) {
    *body = em_buf_take(&out->text, len_bytes);
    return 0;
  }
  /* The writer's buffer is one malloc'd block holding the bytes from its start. */
  *body = (char *)out->pb.pb.data;
  *len_bytes = out->pb.pb.len_bytes;
  out->pb.pb.data = NULL;
  out->pb.pb.len_bytes = out->pb.pb.cap_bytes = 0;
  return 0;
}

/* Forgets what was written after `start` (text) or everything (protobuf), and the error. */
static void out_rewind(em_metrics_out_t *out, size_t start) {
  out->open = NULL;
  out->head_bytes = 0;
  if (out->format == EM_METRICS_TEXT) {
    em_buf_rewind(&out->text, start);
    return;
  }
  out->error = 0;
  em_prom_expo_reset(&out->pb);
}

/* The cap while devices are rendered: absolute bytes of the output; 0 for out's own cap. */
static void out_set_limit(em_metrics_out_t *out, size_t max_bytes, size_t saved) {
  if (out->format == EM_METRICS_TEXT) {
    out->text.max_bytes = max_bytes ? max_bytes : saved;
  } else {
    out->limit_bytes = max_bytes;
  }
}

/* ---- Prometheus families ---------------------------------------------------------------- */

/* A per-device sample: the device label first, then extra[0..n_extra). */
static void device_sample(em_metrics_out_t *out, const em_metrics_family_t *f, const char *device,
                          const em_prom_label_t *extra, size_t n_extra, num_t v) {
  em_prom_label_t labels[4] = {{"device", device}};
  for (size_t k = 0; k < n_extra && k < 3; k++) {
    labels[1 + k] = extra[k];
  }
  out_sample(out, f, labels, 1 + (n_extra < 3 ? n_extra : 3), v);
}

static bool names_valid(const em_agg_device_t *d) {
  /* Values are named by the birth only when it is of the session the data came from. */
  return d->dev && d->dev->have_birth &&
         !(d->have_seq && !em_dict_knows_session(d->dev, d->seq_session));
}

/* The value of the first alias named `name` in the latest data message, or NULL. */
static const em_value_t *value_named(const em_agg_device_t *d, const char *name) {
  if (!names_valid(d)) {
    return NULL;
  }
  long alias = em_dict_alias(d->dev, name);
  if (alias < 0 || (size_t)alias >= d->n_values || !d->values) {
    return NULL;
  }
  const em_value_t *v = &d->values[alias];
  return v->type == EM_VALUE_ABSENT ? NULL : v;
}

/* The convenience gauges: a metric of the device copied under its own family. */
typedef struct {
  const char *metric; /* Name in the birth. */
  double scale;       /* Multiplier to the family's unit. */
  em_metrics_family_t fam;
} shortcut_t;

/* The fixed le ladder: 1-2-5 steps from 10 us to 100 s. */
static const struct {
  uint64_t ns;
  const char *le;
} ladder[] = {
    {10000u, "1e-05"},    {20000u, "2e-05"},      {50000u, "5e-05"},    {100000u, "0.0001"},
    {200000u, "0.0002"},  {500000u, "0.0005"},    {1000000u, "0.001"},  {2000000u, "0.002"},
    {5000000u, "0.005"},  {10000000u, "0.01"},    {20000000u, "0.02"},  {50000000u, "0.05"},
    {100000000u, "0.1"},  {200000000u, "0.2"},    {500000000u, "0.5"},  {1000000000u, "1"},
    {2000000000u, "2"},   {5000000000u, "5"},     {10000000000u, "10"}, {20000000000u, "20"},
    {50000000000u, "50"}, {100000000000u, "100"},
};
#define LADDER_N (sizeof(ladder) / sizeof(ladder[0]))

typedef struct {
  uint64_t at[LADDER_N + 1]; /* Per ladder step (not cumulative); [LADDER_N] is above 100 s. */
} rebucket_t;

/* em_histo_each callback: a fine bucket goes under the first le at or above its upper bound. */
static void rebucket_one(void *ctx, double upper_ns, uint64_t count) {
  rebucket_t *rb = ctx;
  size_t i = 0;
  while (i < LADDER_N && upper_ns > (double)ladder[i].ns) {
    i++;
  }
  rb->at[i] = rb->at[i] + count < rb->at[i] ? UINT64_MAX : rb->at[i] + count;
}

/* The classic histogram of a stage on the le ladder: _bucket lines, _sum, _count in text; the
 * same cumulative counts, sum and count as a classic Histogram in protobuf. */
static void out_classic(em_metrics_out_t *out, const em_metrics_family_t *f, const char *device,
                        const em_agg_stage_t *s) {
  if (out->format == EM_METRICS_REMOTE || !out_family(out, f)) {
    return;
  }
  rebucket_t rb;
  memset(&rb, 0, sizeof(rb));
  em_histo_each(s->total, rebucket_one, &rb);
  uint64_t count = em_histo_count(s->total);
  em_prom_bucket_t classic[LADDER_N];
  uint64_t cum = 0;
  for (size_t i = 0; i < LADDER_N; i++) {
    cum = cum + rb.at[i] < cum ? UINT64_MAX : cum + rb.at[i];
    classic[i] = (em_prom_bucket_t){strtod(ladder[i].le, NULL), cum};
  }
  /* +Inf is the count; never below the last le, so the series stays monotonic. */
  uint64_t inf = count < cum ? cum : count;
  em_prom_label_t labels[2] = {{"device", device}, {"stage", s->name}};
  if (out->format == EM_METRICS_PROTOBUF) {
    em_prom_label_t fixed[2];
    const em_prom_label_t *l = pb_labels(out, labels, 2, fixed);
    (void)em_prom_expo_classic(&out->pb, l, 2, inf, ns_to_seconds(em_histo_sum_ns(s->total)),
                               classic, LADDER_N);
    pb_check_limit(out);
    return;
  }
  em_text_t *t = &out->text;
  for (size_t i = 0; i < LADDER_N; i++) {
    text_series(t, f->name, "_bucket", labels, 2, ladder[i].le);
    put_u64(t, classic[i].cumulative_count);
    text_ch(t, '\n');
  }
  text_series(t, f->name, "_bucket", labels, 2, "+Inf");
  put_u64(t, inf);
  text_ch(t, '\n');
  text_series(t, f->name, "_sum", labels, 2, NULL);
  put_ns_as_seconds(t, em_histo_sum_ns(s->total));
  text_ch(t, '\n');
  text_series(t, f->name, "_count", labels, 2, NULL);
  put_u64(t, inf);
  text_ch(t, '\n');
}

/* The native histogram of a stage (protobuf only: text has no native histograms, so there the
 * family is never opened). A histogram with no native form (a scale below -4, more buckets
 * than EM_NATIVE_MAX_BUCKETS) is left out; its classic series stays. */
static void out_native(em_metrics_out_t *out, const em_metrics_family_t *f, const char *device,
                       const em_agg_stage_t *s) {
  if (out->format == EM_METRICS_TEXT) {
    return;
  }
  int rc = em_native_from_histo(&out->native, s->total);
  if (rc == -ENOMEM) {
    out->error = out->error ? out->error : -ENOMEM;
    return;
  }
  if (rc < 0 || !out_family(out, f)) {
    return;
  }
  em_prom_label_t labels[2] = {{"device", device}, {"stage", s->name}};
  if (out->format == EM_METRICS_REMOTE) {
    remote_series(out, f, labels, 2, 0.0, &out->native);
    return;
  }
  em_prom_label_t fixed[2];
  const em_prom_label_t *l = pb_labels(out, labels, 2, fixed);
  (void)em_prom_expo_native(&out->pb, l, 2, &out->native, NULL, 0);
  pb_check_limit(out);
}

/* One unlabelled sample of a family of its own. */
static void single(em_metrics_out_t *out, const em_metrics_family_t *f, num_t v) {
  out_sample(out, f, NULL, 0, v);
}

/* Writes the per-endpoint health of the remote write (none without one): each family's
 * samples for every endpoint, labelled with its URL (which holds no credentials). */
static void render_remote_health(em_remote_t *rw, em_metrics_out_t *out) {
  size_t n = rw ? em_remote_n_endpoints(rw) : 0;
  if (n > EM_REMOTE_MAX_ENDPOINTS) {
    n = EM_REMOTE_MAX_ENDPOINTS;
  }
  em_remote_stats_t st[EM_REMOTE_MAX_ENDPOINTS];
  for (size_t k = 0; k < n; k++) {
    if (em_remote_stats(rw, k, &st[k]) != 0) {
      memset(&st[k], 0, sizeof(st[k]));
    }
  }
#define RW_FAMILY(field, fname, help, type)                                                        \
  {                                                                                                \
    {"edgemon_aggregator_remote_write_" fname, help, type}, offsetof(em_remote_stats_t, field),    \
        sizeof(((em_remote_stats_t *)0)->field)                                                    \
  }
  static const struct {
    em_metrics_family_t f;
    size_t offset;
    size_t size;
  } fams[] = {
      RW_FAMILY(sent_requests, "sent_requests_total", "Remote write requests answered 2xx.",
                EM_PROM_COUNTER),
      RW_FAMILY(sent_samples, "sent_samples_total", "Samples in requests answered 2xx.",
                EM_PROM_COUNTER),
      RW_FAMILY(sent_histograms, "sent_histograms_total",
                "Native histograms in requests answered 2xx.", EM_PROM_COUNTER),
      RW_FAMILY(retries, "retries_total", "Attempts after the first of a request.",
                EM_PROM_COUNTER),
      RW_FAMILY(dropped_requests, "dropped_requests_total",
                "Requests given up: the endpoint's queue was full, or it answered 4xx.",
                EM_PROM_COUNTER),
      RW_FAMILY(dropped_samples, "dropped_samples_total", "Samples in the dropped requests.",
                EM_PROM_COUNTER),
      RW_FAMILY(dropped_histograms, "dropped_histograms_total",
                "Native histograms in the dropped requests.", EM_PROM_COUNTER),
      RW_FAMILY(queue_depth, "queue_requests", "Requests queued now, the one in flight included.",
                EM_PROM_GAUGE),
      RW_FAMILY(queue_capacity, "queue_capacity_requests", "Bound of the endpoint's queue.",
                EM_PROM_GAUGE),
  };
#undef RW_FAMILY
  for (size_t i = 0; i < sizeof(fams) / sizeof(fams[0]); i++) {
    for (size_t k = 0; k < n; k++) {
      const char *field = (const char *)&st[k] + fams[i].offset;
      uint64_t v = 0;
      if (fams[i].size == sizeof(uint32_t)) {
        uint32_t v32;
        memcpy(&v32, field, sizeof(v32));
        v = v32;
      } else {
        memcpy(&v, field, sizeof(v));
      }
      em_prom_label_t l = {"endpoint", em_remote_endpoint_url(rw, k)};
      out_sample(out, &fams[i].f, &l, 1, num_u64(v));
    }
  }
  static const em_metrics_family_t failed = {
      "edgemon_aggregator_remote_write_failures_total",
      "Failed remote write attempts by kind: network (no HTTP answer), 5xx and 429 (retried), "
      "4xx (the request dropped).",
      EM_PROM_COUNTER};
  for (size_t k = 0; k < n; k++) {
    const struct {
      const char *kind;
      uint64_t v;
    } kinds[] = {{"network", st[k].failed_network},
                 {"5xx", st[k].failed_5xx},
                 {"429", st[k].failed_429},
                 {"4xx", st[k].failed_4xx}};
    for (size_t j = 0; j < 4; j++) {
      em_prom_label_t l[2] = {{"endpoint", em_remote_endpoint_url(rw, k)}, {"kind", kinds[j].kind}};
      out_sample(out, &failed, l, 2, num_u64(kinds[j].v));
    }
  }
  static const em_metrics_family_t last = {
      "edgemon_aggregator_remote_write_last_success_time_seconds",
      "When the endpoint last answered 2xx, Unix time (absent before the first).", EM_PROM_GAUGE};
  for (size_t k = 0; k < n; k++) {
    if (st[k].last_success_unix_ms > 0) {
      em_prom_label_t l = {"endpoint", em_remote_endpoint_url(rw, k)};
      out_sample(out, &last, &l, 1,
                 num_ns_as_seconds((uint64_t)st[k].last_success_unix_ms * 1000000u));
    }
  }
}

/* Writes the store's figures of flight recordings and stack profiles, by kind; a kind without
 * a total bound (no store) is left out. */
static void render_forensics(const em_agg_stats_t *st, em_metrics_out_t *out) {
  static const char *const kind[EM_AGG_FORENSIC_KINDS] = {"flight", "profile"};
  /* Each family with the field of em_agg_forensic_t it shows; evicted_total shows two, by
   * reason. */
  static const struct {
    em_metrics_family_t f;
    size_t at;
  } families[] = {
      {{"edgemon_aggregator_forensic_stored_total",
        "Flight recordings (kind=flight) and stack profiles (kind=profile) stored, not counting "
        "duplicates.",
        EM_PROM_COUNTER},
       offsetof(em_agg_forensic_t, stored)},
      {{"edgemon_aggregator_forensic_evicted_total",
        "Flight recordings and stack profiles deleted to stay within a bound: device_cap (a "
        "device's oldest, --flight-max-bytes, --profile-max-bytes), global_cap (the oldest "
        "received of any device, --flight-total-max-bytes, --profile-total-max-bytes).",
        EM_PROM_COUNTER},
       offsetof(em_agg_forensic_t, dropped)},
      {{"edgemon_aggregator_forensic_bytes",
        "Encoded bytes of flight recordings and stack profiles stored now, all devices.",
        EM_PROM_GAUGE},
       offsetof(em_agg_forensic_t, bytes)},
      {{"edgemon_aggregator_forensic_max_bytes",
        "The bound of edgemon_aggregator_forensic_bytes: --flight-total-max-bytes, "
        "--profile-total-max-bytes.",
        EM_PROM_GAUGE},
       offsetof(em_agg_forensic_t, max_bytes)},
  };
  for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
    bool by_reason = families[i].at == offsetof(em_agg_forensic_t, dropped);
    for (int k = 0; k < EM_AGG_FORENSIC_KINDS; k++) {
      const em_agg_forensic_t *fo = &st->forensic[k];
      if (fo->max_bytes == 0) {
        continue;
      }
      uint64_t v;
      memcpy(&v, (const char *)fo + families[i].at, sizeof(v));
      em_prom_label_t l[2] = {{"kind", kind[k]}, {"reason", "device_cap"}};
      out_sample(out, &families[i].f, l, by_reason ? 2 : 1, num_u64(v));
      if (by_reason) {
        l[1].value = "global_cap";
        out_sample(out, &families[i].f, l, 2, num_u64(fo->evicted));
      }
    }
  }
}

/* Writes the aggregator-wide families (no device label). */
static void render_aggregator(const em_registry_t *r, em_metrics_out_t *out) {
  const em_agg_stats_t *st = &r->stats;
  static const em_metrics_family_t devices = {"edgemon_aggregator_devices",
                                              "Devices the aggregator knows.", EM_PROM_GAUGE};
  single(out, &devices, num_u64((uint64_t)r->n_devices));
  if (r->started_ns > 0) {
    static const em_metrics_family_t start = {"edgemon_aggregator_start_time_seconds",
                                              "When the aggregator started, Unix time.",
                                              EM_PROM_GAUGE};
    single(out, &start, num_ns_as_seconds(r->started_ns));
  }
  const struct {
    em_metrics_family_t f;
    uint64_t v;
  } figures[] = {
      {{"edgemon_aggregator_received_total", "MQTT messages received.", EM_PROM_COUNTER},
       st->received},
      {{"edgemon_aggregator_ingested_total", "MQTT messages decoded and applied.", EM_PROM_COUNTER},
       st->ingested},
      {{"edgemon_aggregator_malformed_total", "MQTT payloads that did not decode.",
        EM_PROM_COUNTER},
       st->malformed},
      {{"edgemon_aggregator_unknown_birth_total",
        "Data messages without a birth for their session.", EM_PROM_COUNTER},
       st->unknown_birth},
      {{"edgemon_aggregator_devices_expired_total",
        "Devices forgotten after the device TTL without a message.", EM_PROM_COUNTER},
       st->expired},
      {{"edgemon_aggregator_device_ttl_seconds",
        "A device not heard from for this long is forgotten (0: never).", EM_PROM_GAUGE},
       r->device_ttl_ns / 1000000000u},
      {{"edgemon_aggregator_store_rows_total", "Rows written to SQLite.", EM_PROM_COUNTER},
       st->store_rows},
      {{"edgemon_aggregator_store_batches_total", "Transactions committed to SQLite.",
        EM_PROM_COUNTER},
       st->store_batches},
      {{"edgemon_aggregator_store_errors_total",
        "SQLite writes that failed (edgemon_aggregator_store_failures_total says why).",
        EM_PROM_COUNTER},
       st->store_errors},
      {{"edgemon_aggregator_duplicates_total",
        "Data and state messages not stored because they were stored already (a QoS 1 "
        "redelivery or an agent's replay).",
        EM_PROM_COUNTER},
       st->store_duplicates},
      {{"edgemon_aggregator_models_refused_total",
        "Messages stored without their model: the store's bound on model identities was "
        "reached.",
        EM_PROM_COUNTER},
       st->models_refused},
      {{"edgemon_aggregator_models_deleted_total",
        "Model identities deleted by retention: no stored row or device named them any more.",
        EM_PROM_COUNTER},
       st->models_deleted},
      {{"edgemon_aggregator_checkpoint_runs_total", "WAL checkpoints run.", EM_PROM_COUNTER},
       st->ckpt_runs},
      {{"edgemon_aggregator_checkpoint_frames_total", "WAL frames copied into the database.",
        EM_PROM_COUNTER},
       st->ckpt_frames},
      {{"edgemon_aggregator_checkpoint_busy_total",
        "WAL checkpoints that could not copy every frame.", EM_PROM_COUNTER},
       st->ckpt_busy},
      {{"edgemon_aggregator_checkpoint_errors_total", "WAL checkpoints that failed.",
        EM_PROM_COUNTER},
       st->ckpt_errors},
      {{"edgemon_aggregator_checkpoint_truncates_total",
        "WAL checkpoints in TRUNCATE mode (the WAL was over its bound).", EM_PROM_COUNTER},
       st->ckpt_truncates},
      {{"edgemon_aggregator_checkpoint_writer_runs_total",
        "Commits after which the writer copied the last WAL frames so the log starts over.",
        EM_PROM_COUNTER},
       st->ckpt_writer_runs},
      {{"edgemon_aggregator_checkpoint_writer_busy_total",
        "Of those, the ones a reader kept from copying every frame.", EM_PROM_COUNTER},
       st->ckpt_writer_busy},
      {{"edgemon_aggregator_wal_bytes", "Size of the WAL file after the latest checkpoint.",
        EM_PROM_GAUGE},
       st->wal_bytes},
      {{"edgemon_aggregator_wal_max_bytes", "Largest WAL file a checkpoint found.", EM_PROM_GAUGE},
       st->wal_max_bytes},
      {{"edgemon_aggregator_metrics_truncated",
        "1 when this exposition leaves devices out to stay under its cap.", EM_PROM_GAUGE},
       st->metrics_truncated ? 1u : 0u},
      {{"edgemon_aggregator_metrics_devices_omitted",
        "Devices this exposition leaves out to stay under its cap.", EM_PROM_GAUGE},
       st->metrics_omitted},
      {{"edgemon_aggregator_metrics_truncations_total", "Expositions that left devices out.",
        EM_PROM_COUNTER},
       st->metrics_truncations},
      {{"edgemon_aggregator_metrics_max_bytes", "Cap of the /metrics text.", EM_PROM_GAUGE},
       r->metrics_max_bytes ? r->metrics_max_bytes : EM_METRICS_MAX_BYTES},
  };
  for (size_t i = 0; i < sizeof(figures) / sizeof(figures[0]); i++) {
    single(out, &figures[i].f, num_u64(figures[i].v));
  }
  static const em_metrics_family_t rejected = {
      "edgemon_aggregator_rejected_total",
      "Messages rejected before reaching a device: topic (not exactly "
      "edgemon/v1/<device>/<kind>), kind_mismatch, device_mismatch.",
      EM_PROM_COUNTER};
  for (int why = 0; why < EM_AGG_REJECT_COUNT; why++) {
    em_prom_label_t l = {"reason", em_agg_reject_name((em_agg_reject_t)why)};
    out_sample(out, &rejected, &l, 1, num_u64(st->rejected[why]));
  }
  static const em_metrics_family_t failures = {
      "edgemon_aggregator_store_failures_total",
      "SQLite writes that failed, by table and SQLite reason.", EM_PROM_COUNTER};
  for (size_t i = 0; i < st->n_store_failures && i < EM_AGG_FAILURE_KINDS; i++) {
    em_prom_label_t l[2] = {{"table", st->store_failures[i].table},
                            {"reason", st->store_failures[i].reason}};
    out_sample(out, &failures, l, 2, num_u64(st->store_failures[i].count));
  }
  render_forensics(st, out);
  render_remote_health(r->remote, out);
}

/* Writes the per-device families of devs[0..n). help false leaves out the HELP and TYPE lines
 * (to measure what the devices themselves take). */
static void render_devices(const em_registry_t *r, em_agg_device_t *const *devs, size_t n,
                           em_metrics_out_t *out, bool help) {
  out->help = help;
  static const em_metrics_family_t online = {
      "edgemon_device_online", "1 while the device's retained status says online, 0 when offline.",
      EM_PROM_GAUGE};
  for (size_t i = 0; i < n; i++) {
    const em_device_t *dev = devs[i]->dev;
    if (dev && dev->have_status) {
      device_sample(out, &online, dev->id, NULL, 0, num_u64(dev->online ? 1 : 0));
    }
  }
  static const em_metrics_family_t level = {
      "edgemon_device_level", "Degradation level: 0 NOMINAL, 1 WARN, 2 DEGRADED, 3 CRITICAL.",
      EM_PROM_GAUGE};
  for (size_t i = 0; i < n; i++) {
    const em_device_t *dev = devs[i]->dev;
    if (dev && dev->level >= EM_LEVEL_NOMINAL && dev->level <= EM_LEVEL_CRITICAL) {
      device_sample(out, &level, dev->id, NULL, 0, num_u64((uint64_t)dev->level));
    }
  }
  static const em_metrics_family_t seen = {"edgemon_device_last_seen_seconds",
                                           "Time of the latest message from the device, Unix time.",
                                           EM_PROM_GAUGE};
  for (size_t i = 0; i < n; i++) {
    const em_device_t *dev = devs[i]->dev;
    if (dev && dev->last_seen_ns > 0) {
      device_sample(out, &seen, dev->id, NULL, 0, num_ns_as_seconds(dev->last_seen_ns));
    }
  }
  static const em_metrics_family_t info = {
      "edgemon_device_info", "Agent version and board from the birth.", EM_PROM_GAUGE};
  for (size_t i = 0; i < n; i++) {
    const em_device_t *dev = devs[i]->dev;
    if (dev && dev->have_birth) {
      em_prom_label_t l[2] = {{"agent_version", dev->agent_version}, {"board", dev->board}};
      device_sample(out, &info, dev->id, l, 2, num_u64(1));
    }
  }
  static const em_metrics_family_t model = {
      "edgemon_model_info",
      "The device's current model: name, version and its labels as label_<key>; join it with "
      "* on(device) group_left(version) edgemon_model_info.",
      EM_PROM_GAUGE};
  for (size_t i = 0; i < n; i++) {
    const em_agg_device_t *d = devs[i];
    if (!d->dev || !d->dev->model.named) {
      continue;
    }
    em_prom_label_t l[3 + EM_PROTO_MAX_MODEL_LABELS] = {
        {"device", d->dev->id}, {"model", d->dev->model.name}, {"version", d->dev->model.version}};
    char names[EM_PROTO_MAX_MODEL_LABELS][sizeof("label_") + EM_PROTO_MAX_LABEL_KEY];
    for (size_t k = 0; k < d->dev->model.n_labels; k++) {
      snprintf(names[k], sizeof(names[k]), "label_%s", d->dev->model.keys[k]);
      l[3 + k] = (em_prom_label_t){names[k], d->dev->model.values[k]};
    }
    out_sample(out, &model, l, 3 + d->dev->model.n_labels, num_u64(1));
  }
  static const em_metrics_family_t data = {"edgemon_device_data_messages_total",
                                           "Data messages ingested from the device.",
                                           EM_PROM_COUNTER};
  static const em_metrics_family_t lost = {"edgemon_device_lost_messages_total",
                                           "Data messages missing from the device's sequence.",
                                           EM_PROM_COUNTER};
  static const em_metrics_family_t dup = {
      "edgemon_device_duplicate_messages_total",
      "Data messages behind the device's sequence (repeated or reordered).", EM_PROM_COUNTER};
  static const em_metrics_family_t rebirth = {"edgemon_device_rebirths_requested_total",
                                              "Rebirths the aggregator asked the device for.",
                                              EM_PROM_COUNTER};
  for (size_t i = 0; i < n; i++) {
    if (devs[i]->dev) {
      device_sample(out, &data, devs[i]->dev->id, NULL, 0, num_u64(devs[i]->data_msgs));
    }
  }
  if (r->loss_tracked) {
    for (size_t i = 0; i < n; i++) {
      if (devs[i]->dev) {
        device_sample(out, &lost, devs[i]->dev->id, NULL, 0, num_u64(devs[i]->lost));
      }
    }
    for (size_t i = 0; i < n; i++) {
      if (devs[i]->dev) {
        device_sample(out, &dup, devs[i]->dev->id, NULL, 0, num_u64(devs[i]->duplicates));
      }
    }
  }
  for (size_t i = 0; i < n; i++) {
    if (devs[i]->dev) {
      device_sample(out, &rebirth, devs[i]->dev->id, NULL, 0, num_u64(devs[i]->rebirths_asked));
    }
  }

  static const em_metrics_family_t metric = {
      "edgemon_metric", "Every present value of the device's latest data message, by metric name.",
      EM_PROM_GAUGE};
  for (size_t i = 0; i < n; i++) {
    const em_agg_device_t *d = devs[i];
    if (!d->values || !names_valid(d)) {
      continue;
    }
    for (size_t a = 0; a < d->n_values; a++) {
      const char *name = em_dict_name(d->dev, (uint32_t)a);
      num_t v;
      if (!name || !num_of_value(&d->values[a], 1.0, &v)) {
        continue;
      }
      em_prom_label_t l = {"name", name};
      device_sample(out, &metric, d->dev->id, &l, 1, v);
    }
  }

  static const shortcut_t shortcuts[] = {
      {"mem.rss", 1.0, {"edgemon_rss_bytes", "Resident set size of the target.", EM_PROM_GAUGE}},
      {"sys.mem.available",
       1.0,
       {"edgemon_mem_available_bytes", "Memory available on the device.", EM_PROM_GAUGE}},
      {"pmu.ipc", 1.0, {"edgemon_ipc", "Instructions per cycle of the target.", EM_PROM_GAUGE}},
      {"pmu.cache_miss_ratio",
       1.0,
       {"edgemon_cache_miss_ratio", "Cache misses per cache reference.", EM_PROM_GAUGE}},
      {"pmu.branch_miss_ratio",
       1.0,
       {"edgemon_branch_miss_ratio", "Branch misses per branch instruction.", EM_PROM_GAUGE}},
      {"psi.cpu.some.avg10",
       0.01,
       {"edgemon_psi_cpu_some_avg10_ratio", "Share of the last 10 s some task waited for CPU.",
        EM_PROM_GAUGE}},
      {"psi.memory.some.avg10",
       0.01,
       {"edgemon_psi_memory_some_avg10_ratio",
        "Share of the last 10 s some task waited for memory.", EM_PROM_GAUGE}},
      {"psi.io.some.avg10",
       0.01,
       {"edgemon_psi_io_some_avg10_ratio", "Share of the last 10 s some task waited for I/O.",
        EM_PROM_GAUGE}},
  };
  for (size_t k = 0; k < sizeof(shortcuts) / sizeof(shortcuts[0]); k++) {
    for (size_t i = 0; i < n; i++) {
      const em_value_t *v = value_named(devs[i], shortcuts[k].metric);
      num_t num;
      if (!v || !num_of_value(v, shortcuts[k].scale, &num)) {
        continue;
      }
      device_sample(out, &shortcuts[k].fam, devs[i]->dev->id, NULL, 0, num);
    }
  }

  static const em_metrics_family_t latency = {
      "edgemon_stage_latency_seconds",
      "Latency of each stage, every window since the aggregator started.", EM_PROM_HISTOGRAM};
  for (size_t i = 0; i < n; i++) {
    const em_agg_device_t *d = devs[i];
    for (size_t s = 0; d->dev && d->stages && s < d->n_stages; s++) {
      if (d->stages[s].total) {
        out_classic(out, &latency, d->dev->id, &d->stages[s]);
      }
    }
  }
  static const em_metrics_family_t native = {
      "edgemon_stage_latency_nanoseconds",
      "Latency of each stage in ns as a native histogram of the merged exponential buckets, "
      "every window since the aggregator started.",
      EM_PROM_HISTOGRAM};
  for (size_t i = 0; i < n; i++) {
    const em_agg_device_t *d = devs[i];
    for (size_t s = 0; d->dev && d->stages && s < d->n_stages; s++) {
      if (d->stages[s].total) {
        out_native(out, &native, d->dev->id, &d->stages[s]);
      }
    }
  }
  static const em_metrics_family_t p99 = {"edgemon_stage_p99_seconds",
                                          "p99 latency of the latest window.", EM_PROM_GAUGE};
  for (size_t i = 0; i < n; i++) {
    const em_agg_device_t *d = devs[i];
    for (size_t s = 0; d->dev && d->stages && s < d->n_stages; s++) {
      if (d->stages[s].last.count > 0) {
        em_prom_label_t l = {"stage", d->stages[s].name};
        device_sample(out, &p99, d->dev->id, &l, 1, num_ns_as_seconds(d->stages[s].last.p99_ns));
      }
    }
  }
  static const em_metrics_family_t windows = {"edgemon_stage_windows_total",
                                              "Stage windows merged into the latency histogram.",
                                              EM_PROM_COUNTER};
  for (size_t i = 0; i < n; i++) {
    const em_agg_device_t *d = devs[i];
    for (size_t s = 0; d->dev && d->stages && s < d->n_stages; s++) {
      em_prom_label_t l = {"stage", d->stages[s].name};
      device_sample(out, &windows, d->dev->id, &l, 1, num_u64(d->stages[s].windows));
    }
  }
  out_close(out);
  out->help = true;
}

/* How many of the devices, in order, fit in budget bytes of per-device families in `format`
 * (HELP and TYPE lines, or MetricFamily heads, aside: EM_METRICS_HELP_RESERVE_BYTES covers
 * them). */
static size_t devices_that_fit(const em_registry_t *r, size_t budget, em_metrics_format_t format) {
  em_metrics_out_t one;
  if (em_metrics_out_init(&one, format, budget + EM_METRICS_HELP_RESERVE_BYTES) != 0) {
    return 0;
  }
  size_t used = 0;
  size_t k = 0;
  for (; k < r->n_devices; k++) {
    out_rewind(&one, 0);
    render_devices(r, &r->devices[k], 1, &one, false);
    size_t len = em_metrics_out_len(&one);
    size_t heads = one.head_bytes < len ? one.head_bytes : len;
    if (em_metrics_out_error(&one) || used + len - heads > budget) {
      break;
    }
    used += len - heads;
  }
  em_metrics_out_deinit(&one);
  return k;
}

int em_metrics_render_out(em_registry_t *r, em_metrics_out_t *out) {
  if (!out) {
    return -EINVAL;
  }
  if (!r || out->format == EM_METRICS_REMOTE ||
      (out->format == EM_METRICS_PROTOBUF && em_metrics_out_len(out) != 0)) {
    if (out->format == EM_METRICS_TEXT) {
      out->text.error = out->text.error ? out->text.error : -EINVAL;
    } else {
      out->error = out->error ? out->error : -EINVAL;
    }
    return em_metrics_out_error(out);
  }
  if (em_metrics_out_error(out)) {
    return em_metrics_out_error(out);
  }
  out_close(out);
  size_t cap = r->metrics_max_bytes ? r->metrics_max_bytes : EM_METRICS_MAX_BYTES;
  size_t reserve =
      EM_METRICS_SELF_RESERVE_BYTES < cap / 2 ? EM_METRICS_SELF_RESERVE_BYTES : cap / 2;
  size_t start = em_metrics_out_len(out);
  size_t saved_max = out->text.max_bytes;
  size_t n = r->devices ? r->n_devices : 0;
  size_t shown = n;
  out_set_limit(out, start + cap - reserve, saved_max);
  render_devices(r, r->devices, n, out, true);
  if (em_metrics_out_error(out) == -E2BIG) {
    /* Over the cap: as many devices as fit, in id order (the same ones at every scrape while
     * the fleet does not change), and the aggregator's own families in full. */
    size_t budget = cap - reserve;
    budget = budget > EM_METRICS_HELP_RESERVE_BYTES ? budget - EM_METRICS_HELP_RESERVE_BYTES : 0;
    shown = devices_that_fit(r, budget, out->format);
    for (;;) {
      out_rewind(out, start);
      render_devices(r, r->devices, shown, out, true);
      if (em_metrics_out_error(out) != -E2BIG || shown == 0) {
        break;
      }
      shown = shown * 9 / 10; /* The estimate was short: take a tenth off. */
    }
  }
  r->stats.metrics_truncated = shown < n;
  r->stats.metrics_omitted = n - shown;
  r->stats.metrics_truncations += shown < n ? 1 : 0;
  out_set_limit(out, start + cap, saved_max);
  render_aggregator(r, out);
  out_close(out);
  out_set_limit(out, saved_max, saved_max);
  if (out->format == EM_METRICS_PROTOBUF) {
    out->limit_bytes = 0;
  }
  return em_metrics_out_error(out);
}

int em_metrics_push(em_registry_t *r, em_metrics_out_t *out) {
  if (!out || !r || out->format != EM_METRICS_REMOTE || !out->remote) {
    return -EINVAL;
  }
  if (em_metrics_out_error(out)) {
    return em_metrics_out_error(out);
  }
  render_devices(r, r->devices, r->devices ? r->n_devices : 0, out, true);
  render_aggregator(r, out);
  out_close(out);
  (void)em_remote_flush(out->remote);
  return em_metrics_out_error(out);
}

int em_metrics_render(em_registry_t *r, em_text_t *t) {
  if (!t) {
    return -EINVAL;
  }
  em_metrics_out_t out;
  memset(&out, 0, sizeof(out));
  out.format = EM_METRICS_TEXT;
  out.help = true;
  out.text = *t;
  int rc = em_metrics_render_out(r, &out);
  *t = out.text;
  return rc;
}

/* ---- JSON ------------------------------------------------------------------------------- */

static void json_key(em_text_t *t, bool *first, const char *key) {
  if (!*first) {
    text_ch(t, ',');
  }
  *first = false;
  put_json_string(t, key);
  text_ch(t, ':');
}

static void json_u64(em_text_t *t, bool *first, const char *key, uint64_t v) {
  json_key(t, first, key);
  put_u64(t, v);
}

static void json_u64_or_null(em_text_t *t, bool present, uint64_t v) {
  if (present) {
    put_u64(t, v);
  } else {
    text_str(t, "null");
  }
}

static void json_string_or_null(em_text_t *t, bool present, const char *s) {
  if (present) {
    put_json_string(t, s);
  } else {
    text_str(t, "null");
  }
}

/* A value, or null for ABSENT (and for a non-finite float, which JSON cannot carry). */
static void json_value(em_text_t *t, const em_value_t *v) {
  if (!v || !put_value(t, v, 1.0)) {
    text_str(t, "null");
  }
}

static void json_stage_window(em_text_t *t, const em_stage_t *w) {
  bool first = true;
  text_ch(t, '{');
  json_u64(t, &first, "count", w->count);
  if (w->count > 0) {
    json_u64(t, &first, "sum_ns", w->sum_ns);
    json_u64(t, &first, "min_ns", w->min_ns);
    json_u64(t, &first, "max_ns", w->max_ns);
    json_u64(t, &first, "p50_ns", w->p50_ns);
    json_u64(t, &first, "p90_ns", w->p90_ns);
    json_u64(t, &first, "p99_ns", w->p99_ns);
    json_u64(t, &first, "p999_ns", w->p999_ns);
  }
  text_ch(t, '}');
}

/* p50_ns, p90_ns, p99_ns, p999_ns of a non-empty merged histogram (em_histo_quantile_ns:
 * inside the bucket that holds the exact quantile), rounded to whole ns. */
static void json_quantiles(em_text_t *t, bool *first, const em_histo_t *h) {
  static const struct {
    const char *key;
    double q;
  } qs[] = {{"p50_ns", 0.5}, {"p90_ns", 0.9}, {"p99_ns", 0.99}, {"p999_ns", 0.999}};
  for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
    json_u64(t, first, qs[i].key, (uint64_t)llround(em_histo_quantile_ns(h, qs[i].q)));
  }
}

static void json_stage(em_text_t *t, const em_agg_stage_t *s, bool with_buckets) {
  bool first = true;
  text_ch(t, '{');
  json_key(t, &first, "name");
  put_json_string(t, s->name);
  json_u64(t, &first, "windows", s->windows);
  json_key(t, &first, "last");
  json_stage_window(t, &s->last);
  uint64_t count = s->total ? em_histo_count(s->total) : 0;
  json_u64(t, &first, "count", count);
  json_u64(t, &first, "sum_ns", s->total ? em_histo_sum_ns(s->total) : 0);
  if (count > 0) {
    json_u64(t, &first, "min_ns", em_histo_min_ns(s->total));
    json_u64(t, &first, "max_ns", em_histo_max_ns(s->total));
    json_key(t, &first, "mean_ns");
    put_double(t, em_histo_mean_ns(s->total));
    json_quantiles(t, &first, s->total);
  }
  if (with_buckets && s->total) {
    /* The same cumulative le ladder as /metrics, le in seconds. */
    rebucket_t rb;
    memset(&rb, 0, sizeof(rb));
    em_histo_each(s->total, rebucket_one, &rb);
    json_key(t, &first, "buckets");
    text_ch(t, '[');
    uint64_t cum = 0;
    for (size_t i = 0; i <= LADDER_N; i++) {
      cum = cum + rb.at[i] < cum ? UINT64_MAX : cum + rb.at[i];
      text_printf(t, "%s{\"le\":%s,\"count\":", i ? "," : "", i < LADDER_N ? ladder[i].le : "null");
      put_u64(t, i < LADDER_N ? cum : (count < cum ? cum : count));
      text_ch(t, '}');
    }
    text_ch(t, ']');
  }
  text_ch(t, '}');
}

int em_metrics_device_json(const em_agg_device_t *d, bool with_stages, em_text_t *t) {
  if (!t) {
    return -EINVAL;
  }
  if (!d || !d->dev) {
    t->error = t->error ? t->error : -EINVAL;
    return t->error;
  }
  const em_device_t *dev = d->dev;
  bool first = true;
  text_ch(t, '{');
  json_key(t, &first, "device");
  put_json_string(t, dev->id);

  /* From the birth, null without one. */
  json_key(t, &first, "agent_version");
  json_string_or_null(t, dev->have_birth, dev->agent_version);
  json_key(t, &first, "board");
  json_string_or_null(t, dev->have_birth, dev->board);
  json_key(t, &first, "session");
  json_u64_or_null(t, dev->have_birth, dev->session);
  json_key(t, &first, "birth_time_ns");
  json_u64_or_null(t, dev->have_birth, dev->birth_time_ns);
  json_key(t, &first, "period_ns");
  json_u64_or_null(t, dev->have_birth, dev->period_ns);

  json_key(t, &first, "online");
  text_str(t, dev->have_status ? (dev->online ? "true" : "false") : "null");
  json_key(t, &first, "status_time_ns");
  if (dev->have_status) {
    put_u64(t, dev->status_time_ns);
  } else {
    text_str(t, "null");
  }
  json_key(t, &first, "level");
  if (dev->level >= EM_LEVEL_NOMINAL && dev->level <= EM_LEVEL_CRITICAL) {
    put_json_string(t, em_level_name(dev->level));
  } else {
    text_str(t, "null");
  }
  json_key(t, &first, "reason");
  if (dev->have_state && dev->reason[0]) {
    put_json_string(t, dev->reason);
  } else {
    text_str(t, "null");
  }
  json_key(t, &first, "last_seen_ns");
  if (dev->last_seen_ns > 0) {
    put_u64(t, dev->last_seen_ns);
  } else {
    text_str(t, "null");
  }
  json_key(t, &first, "data_time_ns");
  if (d->data_time_ns > 0) {
    put_u64(t, d->data_time_ns);
  } else {
    text_str(t, "null");
  }
  json_u64(t, &first, "window_ns", d->window_ns);

  /* The current model, null when none is named. */
  json_key(t, &first, "model");
  {
    em_label_t labels[EM_PROTO_MAX_MODEL_LABELS];
    em_model_t m = em_identity_view(&d->dev->model, labels);
    char json[EM_IDENTITY_JSON_MAX];
    size_t n = em_identity_json(&m, json, sizeof(json));
    text_put(t, json, n);
  }

  /* Every metric the birth names, its latest value or null. */
  json_key(t, &first, "values");
  text_ch(t, '{');
  if (names_valid(d)) {
    bool vf = true;
    for (size_t a = 0; a < dev->n_names; a++) {
      const char *name = em_dict_name(dev, (uint32_t)a);
      if (!name) {
        continue;
      }
      json_key(t, &vf, name);
      json_value(t, (d->values && a < d->n_values) ? &d->values[a] : NULL);
    }
  }
  text_ch(t, '}');

  json_key(t, &first, "stages");
  text_ch(t, '[');
  for (size_t s = 0; d->stages && s < d->n_stages; s++) {
    if (s > 0) {
      text_ch(t, ',');
    }
    json_stage(t, &d->stages[s], with_stages);
  }
  text_ch(t, ']');

  json_u64(t, &first, "data_messages", d->data_msgs);
  json_u64(t, &first, "lost_messages", d->lost);
  json_u64(t, &first, "duplicate_messages", d->duplicates);
  json_u64(t, &first, "rebirths_requested", d->rebirths_asked);
  text_ch(t, '}');
  return t->error;
}

/* "fleet": [{"name", "devices", "count", "sum_ns", "p50_ns".."p999_ns"}]: each stage name's
 * histograms merged over every device (the fleet percentiles the aggregator itself answers),
 * in order of first appearance, at most EM_METRICS_FLEET_MAX_STAGES names ("fleet_truncated"
 * true when more were left out). */
static void json_fleet(const em_registry_t *r, em_text_t *t) {
  struct {
    const char *name;
    em_histo_t *h;
    uint64_t devices;
  } st[EM_METRICS_FLEET_MAX_STAGES];
  size_t n = 0;
  bool truncated = false;
  for (size_t i = 0; r->devices && i < r->n_devices && !t->error; i++) {
    const em_agg_device_t *d = r->devices[i];
    for (size_t s = 0; d->dev && d->stages && s < d->n_stages; s++) {
      if (!d->stages[s].total) {
        continue;
      }
      size_t k = 0;
      while (k < n && strcmp(st[k].name, d->stages[s].name) != 0) {
        k++;
      }
      if (k == n) {
        if (n == EM_METRICS_FLEET_MAX_STAGES) {
          truncated = true;
          continue;
        }
        if (em_histo_new(&st[n].h) != 0) {
          t->error = -ENOMEM;
          break;
        }
        st[n].name = d->stages[s].name;
        st[n].devices = 0;
        n++;
      }
      if (em_histo_merge(st[k].h, d->stages[s].total) != 0) {
        t->error = -ENOMEM;
        break;
      }
      st[k].devices++;
    }
  }
  text_str(t, ",\"fleet\":[");
  for (size_t k = 0; k < n; k++) {
    bool first = true;
    text_str(t, k ? ",{" : "{");
    json_key(t, &first, "name");
    put_json_string(t, st[k].name);
    json_u64(t, &first, "devices", st[k].devices);
    uint64_t count = em_histo_count(st[k].h);
    json_u64(t, &first, "count", count);
    json_u64(t, &first, "sum_ns", em_histo_sum_ns(st[k].h));
    if (count > 0) {
      json_quantiles(t, &first, st[k].h);
    }
    text_ch(t, '}');
    em_histo_free(st[k].h);
  }
  text_str(t, truncated ? "],\"fleet_truncated\":true" : "],\"fleet_truncated\":false");
}

int em_metrics_devices_json(const em_registry_t *r, em_text_t *t) {
  if (!t) {
    return -EINVAL;
  }
  if (!r) {
    t->error = t->error ? t->error : -EINVAL;
    return t->error;
  }
  text_str(t, "{\"loss_tracked\":");
  text_str(t, r->loss_tracked ? "true" : "false");
  text_str(t, ",\"devices\":[");
  bool any = false;
  for (size_t i = 0; r->devices && i < r->n_devices; i++) {
    if (!r->devices[i]->dev) {
      continue;
    }
    if (any) {
      text_ch(t, ',');
    }
    any = true;
    em_metrics_device_json(r->devices[i], false, t);
  }
  text_ch(t, ']');
  json_fleet(r, t);
  text_ch(t, '}');
  return t->error;
}
