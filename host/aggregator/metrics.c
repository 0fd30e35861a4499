/*
 * metrics.c - renders the registry as Prometheus text (format 0.0.4) and as JSON (see metrics.h).
 *
 * Families, in the order written (HELP and TYPE once each, written just before the family's
 * first sample, so a family without samples is left out whole):
 *
 *   edgemon_device_online{device}                     gauge 1/0, when a status was seen
 *   edgemon_device_level{device}                      gauge 0 NOMINAL .. 3 CRITICAL, when known
 *   edgemon_device_last_seen_seconds{device}          gauge, Unix time, when anything was seen
 *   edgemon_device_info{device,agent_version,board}   gauge 1, when a birth was seen
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
 *
 * Size: past the cap (registry metrics_max_bytes) the per-device families keep the first
 * devices in id order that fit (each device measured alone, HELP/TYPE aside), and the
 * aggregator's families are always written in full (metrics.h).
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
 * "sum_ns", "min_ns", "max_ns", "mean_ns" (cumulative), "buckets" [{"le" seconds or null for
 * +Inf, "count" cumulative}] (one device only)}], "data_messages", "lost_messages",
 * "duplicate_messages", "rebirths_requested"}. /api/devices: {"loss_tracked", "devices": [...]}.
 *
 * Strings: label values and JSON strings are escaped as their formats require; bytes that are
 * not valid UTF-8 are replaced by U+FFFD so the output always parses.
 *
 * Owns nothing beyond the caller's em_text_t. The caller holds the registry's lock.
 */
#define _POSIX_C_SOURCE 200809L
#include "metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- em_text_t ------------------------------------------------------------------------- */

void em_text_free(em_text_t *t) {
  if (!t) {
    return;
  }
  free(t->data);
  t->data = NULL;
  t->len = 0;
  t->cap = 0;
  t->error = 0;
}

/* Makes room for `more` bytes plus a NUL. Returns false (and sets t->error) when it cannot. */
static bool text_reserve(em_text_t *t, size_t more) {
  if (t->error) {
    return false;
  }
  size_t max = t->max_bytes ? t->max_bytes : EM_METRICS_MAX_BYTES;
  if (more > max || t->len + more > max) {
    t->error = -E2BIG;
    return false;
  }
  size_t need = t->len + more + 1;
  if (need <= t->cap) {
    return true;
  }
  size_t cap = t->cap ? t->cap : 4096;
  while (cap < need) {
    cap *= 2;
  }
  if (cap > max + 1) {
    cap = max + 1;
  }
  char *p = realloc(t->data, cap);
  if (!p) {
    t->error = -ENOMEM;
    return false;
  }
  t->data = p;
  t->cap = cap;
  return true;
}

static void text_put(em_text_t *t, const char *s, size_t n) {
  if (!text_reserve(t, n)) {
    return;
  }
  memcpy(t->data + t->len, s, n);
  t->len += n;
  t->data[t->len] = '\0';
}

static void text_str(em_text_t *t, const char *s) {
  text_put(t, s, strlen(s));
}

static void text_ch(em_text_t *t, char c) {
  text_put(t, &c, 1);
}

__attribute__((format(printf, 2, 3))) static void text_printf(em_text_t *t, const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof(buf)) {
    if (!t->error) {
      t->error = -E2BIG; /* Only short numeric fragments go through here. */
    }
    return;
  }
  text_put(t, buf, (size_t)n);
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

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  size_t len;
  uint32_t cp;
  if (c < 0x80) {
    return 1;
  }
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
    cp = c & 0x1Fu;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    cp = c & 0x0Fu;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    cp = c & 0x07u;
  } else {
    return 0;
  }
  if (n < len) {
    return 0;
  }
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0u) != 0x80u) {
      return 0;
    }
    cp = (cp << 6) | (s[i] & 0x3Fu);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
      (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0;
  }
  return len;
}

/* Escapes s for a Prometheus label value (\\, \", \n) or, when json, a JSON string (also the
 * other control characters as \u00XX). Invalid UTF-8 becomes U+FFFD. No quotes around it. */
static void put_escaped(em_text_t *t, const char *str, bool json) {
  const unsigned char *s = (const unsigned char *)(str ? str : "");
  size_t n = strlen((const char *)s);
  size_t i = 0;
  while (i < n) {
    unsigned char c = s[i];
    size_t run = utf8_len(s + i, n - i);
    if (run == 0) {
      text_str(t, "\xEF\xBF\xBD");
      i++;
      continue;
    }
    if (run > 1) {
      text_put(t, (const char *)s + i, run);
      i += run;
      continue;
    }
    if (c == '\\') {
      text_str(t, "\\\\");
    } else if (c == '"') {
      text_str(t, "\\\"");
    } else if (c == '\n') {
      text_str(t, "\\n");
    } else if (json && c < 0x20) {
      text_printf(t, "\\u%04x", (unsigned)c);
    } else {
      text_ch(t, (char)c);
    }
    i++;
  }
}

static void put_json_string(em_text_t *t, const char *s) {
  text_ch(t, '"');
  put_escaped(t, s, true);
  text_ch(t, '"');
}

/* ---- Prometheus families ---------------------------------------------------------------- */

typedef struct {
  const char *name;
  const char *type;
  const char *help;
  bool started;
} family_t;

/* Writes HELP and TYPE before the family's first sample, then "name{" + device label. */
static void sample_begin(em_text_t *t, family_t *f, const char *suffix, const char *device) {
  if (!f->started) {
    text_printf(t, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name, f->type);
    f->started = true;
  }
  text_str(t, f->name);
  text_str(t, suffix);
  if (device) {
    text_str(t, "{device=\"");
    put_escaped(t, device, false);
    text_ch(t, '"');
  }
}

static void label(em_text_t *t, const char *key, const char *value) {
  text_printf(t, ",%s=\"", key);
  put_escaped(t, value, false);
  text_ch(t, '"');
}

/* Closes the label set (when one is open) and leaves room for the value. */
static void sample_value_sep(em_text_t *t, bool labels) {
  text_str(t, labels ? "} " : " ");
}

/* A whole per-device u64 sample. */
static void device_u64(em_text_t *t, family_t *f, const char *device, uint64_t v) {
  sample_begin(t, f, "", device);
  sample_value_sep(t, true);
  put_u64(t, v);
  text_ch(t, '\n');
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
  family_t fam;
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

static void render_histogram(em_text_t *t, family_t *f, const char *device,
                             const em_agg_stage_t *s) {
  rebucket_t rb;
  memset(&rb, 0, sizeof(rb));
  em_histo_each(s->total, rebucket_one, &rb);
  uint64_t count = em_histo_count(s->total);
  uint64_t cum = 0;
  for (size_t i = 0; i < LADDER_N; i++) {
    cum = cum + rb.at[i] < cum ? UINT64_MAX : cum + rb.at[i];
    sample_begin(t, f, "_bucket", device);
    label(t, "stage", s->name);
    label(t, "le", ladder[i].le);
    sample_value_sep(t, true);
    put_u64(t, cum);
    text_ch(t, '\n');
  }
  /* +Inf is the count; never below the last le, so the series stays monotonic. */
  uint64_t inf = count < cum ? cum : count;
  sample_begin(t, f, "_bucket", device);
  label(t, "stage", s->name);
  label(t, "le", "+Inf");
  sample_value_sep(t, true);
  put_u64(t, inf);
  text_ch(t, '\n');
  sample_begin(t, f, "_sum", device);
  label(t, "stage", s->name);
  sample_value_sep(t, true);
  put_ns_as_seconds(t, em_histo_sum_ns(s->total));
  text_ch(t, '\n');
  sample_begin(t, f, "_count", device);
  label(t, "stage", s->name);
  sample_value_sep(t, true);
  put_u64(t, inf);
  text_ch(t, '\n');
}

/* One unlabelled sample of a family of its own. */
static void single(em_text_t *t, const char *name, const char *type, const char *help, uint64_t v) {
  family_t f = {name, type, help, false};
  sample_begin(t, &f, "", NULL);
  sample_value_sep(t, false);
  put_u64(t, v);
  text_ch(t, '\n');
}

/* Writes the aggregator-wide families (no device label). */
static void render_aggregator(const em_registry_t *r, em_text_t *t) {
  const em_agg_stats_t *st = &r->stats;
  single(t, "edgemon_aggregator_devices", "gauge", "Devices the aggregator knows.",
         (uint64_t)r->n_devices);
  if (r->started_ns > 0) {
    family_t start = {"edgemon_aggregator_start_time_seconds", "gauge",
                      "When the aggregator started, Unix time.", false};
    sample_begin(t, &start, "", NULL);
    sample_value_sep(t, false);
    put_ns_as_seconds(t, r->started_ns);
    text_ch(t, '\n');
  }
  const struct {
    const char *name;
    const char *type;
    const char *help;
    uint64_t v;
  } figures[] = {
      {"edgemon_aggregator_received_total", "counter", "MQTT messages received.", st->received},
      {"edgemon_aggregator_ingested_total", "counter", "MQTT messages decoded and applied.",
       st->ingested},
      {"edgemon_aggregator_malformed_total", "counter", "MQTT payloads that did not decode.",
       st->malformed},
      {"edgemon_aggregator_unknown_birth_total", "counter",
       "Data messages without a birth for their session.", st->unknown_birth},
      {"edgemon_aggregator_devices_expired_total", "counter",
       "Devices forgotten after the device TTL without a message.", st->expired},
      {"edgemon_aggregator_device_ttl_seconds", "gauge",
       "A device not heard from for this long is forgotten (0: never).",
       r->device_ttl_ns / 1000000000u},
      {"edgemon_aggregator_store_rows_total", "counter", "Rows written to SQLite.", st->store_rows},
      {"edgemon_aggregator_store_batches_total", "counter", "Transactions committed to SQLite.",
       st->store_batches},
      {"edgemon_aggregator_store_errors_total", "counter",
       "SQLite writes that failed (edgemon_aggregator_store_failures_total says why).",
       st->store_errors},
      {"edgemon_aggregator_duplicates_total", "counter",
       "Data and state messages not stored because they were stored already (a QoS 1 "
       "redelivery or an agent's replay).",
       st->store_duplicates},
      {"edgemon_aggregator_checkpoint_runs_total", "counter", "WAL checkpoints run.",
       st->ckpt_runs},
      {"edgemon_aggregator_checkpoint_frames_total", "counter",
       "WAL frames copied into the database.", st->ckpt_frames},
      {"edgemon_aggregator_checkpoint_busy_total", "counter",
       "WAL checkpoints that could not copy every frame.", st->ckpt_busy},
      {"edgemon_aggregator_checkpoint_errors_total", "counter", "WAL checkpoints that failed.",
       st->ckpt_errors},
      {"edgemon_aggregator_checkpoint_truncates_total", "counter",
       "WAL checkpoints in TRUNCATE mode (the WAL was over its bound).", st->ckpt_truncates},
      {"edgemon_aggregator_checkpoint_writer_runs_total", "counter",
       "Commits after which the writer copied the last WAL frames so the log starts over.",
       st->ckpt_writer_runs},
      {"edgemon_aggregator_checkpoint_writer_busy_total", "counter",
       "Of those, the ones a reader kept from copying every frame.", st->ckpt_writer_busy},
      {"edgemon_aggregator_wal_bytes", "gauge", "Size of the WAL file after the latest checkpoint.",
       st->wal_bytes},
      {"edgemon_aggregator_wal_max_bytes", "gauge", "Largest WAL file a checkpoint found.",
       st->wal_max_bytes},
      {"edgemon_aggregator_metrics_truncated", "gauge",
       "1 when this exposition leaves devices out to stay under its cap.",
       st->metrics_truncated ? 1u : 0u},
      {"edgemon_aggregator_metrics_devices_omitted", "gauge",
       "Devices this exposition leaves out to stay under its cap.", st->metrics_omitted},
      {"edgemon_aggregator_metrics_truncations_total", "counter",
       "Expositions that left devices out.", st->metrics_truncations},
      {"edgemon_aggregator_metrics_max_bytes", "gauge", "Cap of the /metrics text.",
       r->metrics_max_bytes ? r->metrics_max_bytes : EM_METRICS_MAX_BYTES},
  };
  for (size_t i = 0; i < sizeof(figures) / sizeof(figures[0]); i++) {
    single(t, figures[i].name, figures[i].type, figures[i].help, figures[i].v);
  }
  family_t rejected = {"edgemon_aggregator_rejected_total", "counter",
                       "Messages rejected before reaching a device: topic (not exactly "
                       "edgemon/v1/<device>/<kind>), kind_mismatch, device_mismatch.",
                       false};
  for (int why = 0; why < EM_AGG_REJECT_COUNT; why++) {
    sample_begin(t, &rejected, "", NULL);
    text_printf(t, "{reason=\"%s\"} ", em_agg_reject_name((em_agg_reject_t)why));
    put_u64(t, st->rejected[why]);
    text_ch(t, '\n');
  }
  family_t failures = {"edgemon_aggregator_store_failures_total", "counter",
                       "SQLite writes that failed, by table and SQLite reason.", false};
  for (size_t i = 0; i < st->n_store_failures && i < EM_AGG_FAILURE_KINDS; i++) {
    sample_begin(t, &failures, "", NULL);
    text_str(t, "{table=\"");
    put_escaped(t, st->store_failures[i].table, false);
    text_str(t, "\",reason=\"");
    put_escaped(t, st->store_failures[i].reason, false);
    text_str(t, "\"} ");
    put_u64(t, st->store_failures[i].count);
    text_ch(t, '\n');
  }
}

/* Writes the per-device families of devs[0..n). help false leaves out the HELP and TYPE lines
 * (to measure what the devices themselves take). */
static void render_devices(const em_registry_t *r, em_agg_device_t *const *devs, size_t n,
                           em_text_t *t, bool help) {
  const bool quiet = !help; /* A family marked started writes no HELP/TYPE. */

  family_t online = {"edgemon_device_online", "gauge",
                     "1 while the device's retained status says online, 0 when offline.", quiet};
  for (size_t i = 0; i < n; i++) {
    const em_device_t *dev = devs[i]->dev;
    if (dev && dev->have_status) {
      device_u64(t, &online, dev->id, dev->online ? 1 : 0);
    }
  }
  family_t level = {"edgemon_device_level", "gauge",
                    "Degradation level: 0 NOMINAL, 1 WARN, 2 DEGRADED, 3 CRITICAL.", quiet};
  for (size_t i = 0; i < n; i++) {
    const em_device_t *dev = devs[i]->dev;
    if (dev && dev->level >= EM_LEVEL_NOMINAL && dev->level <= EM_LEVEL_CRITICAL) {
      device_u64(t, &level, dev->id, (uint64_t)dev->level);
    }
  }
  family_t seen = {"edgemon_device_last_seen_seconds", "gauge",
                   "Time of the latest message from the device, Unix time.", quiet};
  for (size_t i = 0; i < n; i++) {
    const em_device_t *dev = devs[i]->dev;
    if (dev && dev->last_seen_ns > 0) {
      sample_begin(t, &seen, "", dev->id);
      sample_value_sep(t, true);
      put_ns_as_seconds(t, dev->last_seen_ns);
      text_ch(t, '\n');
    }
  }
  family_t info = {"edgemon_device_info", "gauge", "Agent version and board from the birth.",
                   false};
  for (size_t i = 0; i < n; i++) {
    const em_device_t *dev = devs[i]->dev;
    if (dev && dev->have_birth) {
      sample_begin(t, &info, "", dev->id);
      label(t, "agent_version", dev->agent_version);
      label(t, "board", dev->board);
      sample_value_sep(t, true);
      text_str(t, "1\n");
    }
  }
  family_t data = {"edgemon_device_data_messages_total", "counter",
                   "Data messages ingested from the device.", quiet};
  family_t lost = {"edgemon_device_lost_messages_total", "counter",
                   "Data messages missing from the device's sequence.", quiet};
  family_t dup = {"edgemon_device_duplicate_messages_total", "counter",
                  "Data messages behind the device's sequence (repeated or reordered).", quiet};
  family_t rebirth = {"edgemon_device_rebirths_requested_total", "counter",
                      "Rebirths the aggregator asked the device for.", quiet};
  for (size_t i = 0; i < n; i++) {
    if (devs[i]->dev) {
      device_u64(t, &data, devs[i]->dev->id, devs[i]->data_msgs);
    }
  }
  if (r->loss_tracked) {
    for (size_t i = 0; i < n; i++) {
      if (devs[i]->dev) {
        device_u64(t, &lost, devs[i]->dev->id, devs[i]->lost);
      }
    }
    for (size_t i = 0; i < n; i++) {
      if (devs[i]->dev) {
        device_u64(t, &dup, devs[i]->dev->id, devs[i]->duplicates);
      }
    }
  }
  for (size_t i = 0; i < n; i++) {
    if (devs[i]->dev) {
      device_u64(t, &rebirth, devs[i]->dev->id, devs[i]->rebirths_asked);
    }
  }

  family_t metric = {"edgemon_metric", "gauge",
                     "Every present value of the device's latest data message, by metric name.",
                     false};
  for (size_t i = 0; i < n; i++) {
    const em_agg_device_t *d = devs[i];
    if (!d->values || !names_valid(d)) {
      continue;
    }
    for (size_t a = 0; a < d->n_values; a++) {
      const char *name = em_dict_name(d->dev, (uint32_t)a);
      const em_value_t *v = &d->values[a];
      if (!name || v->type == EM_VALUE_ABSENT ||
          (v->type == EM_VALUE_FLOAT && !isfinite(v->as.f))) {
        continue;
      }
      sample_begin(t, &metric, "", d->dev->id);
      label(t, "name", name);
      sample_value_sep(t, true);
      put_value(t, v, 1.0);
      text_ch(t, '\n');
    }
  }

  shortcut_t shortcuts[] = {
      {"mem.rss", 1.0, {"edgemon_rss_bytes", "gauge", "Resident set size of the target.", quiet}},
      {"sys.mem.available",
       1.0,
       {"edgemon_mem_available_bytes", "gauge", "Memory available on the device.", quiet}},
      {"pmu.ipc", 1.0, {"edgemon_ipc", "gauge", "Instructions per cycle of the target.", quiet}},
      {"pmu.cache_miss_ratio",
       1.0,
       {"edgemon_cache_miss_ratio", "gauge", "Cache misses per cache reference.", quiet}},
      {"pmu.branch_miss_ratio",
       1.0,
       {"edgemon_branch_miss_ratio", "gauge", "Branch misses per branch instruction.", quiet}},
      {"psi.cpu.some.avg10",
       0.01,
       {"edgemon_psi_cpu_some_avg10_ratio", "gauge",
        "Share of the last 10 s some task waited for CPU.", quiet}},
      {"psi.memory.some.avg10",
       0.01,
       {"edgemon_psi_memory_some_avg10_ratio", "gauge",
        "Share of the last 10 s some task waited for memory.", quiet}},
      {"psi.io.some.avg10",
       0.01,
       {"edgemon_psi_io_some_avg10_ratio", "gauge",
        "Share of the last 10 s some task waited for I/O.", quiet}},
  };
  for (size_t k = 0; k < sizeof(shortcuts) / sizeof(shortcuts[0]); k++) {
    for (size_t i = 0; i < n; i++) {
      const em_value_t *v = value_named(devs[i], shortcuts[k].metric);
      if (!v || (v->type == EM_VALUE_FLOAT && !isfinite(v->as.f))) {
        continue;
      }
      sample_begin(t, &shortcuts[k].fam, "", devs[i]->dev->id);
      sample_value_sep(t, true);
      put_value(t, v, shortcuts[k].scale);
      text_ch(t, '\n');
    }
  }

  family_t latency = {"edgemon_stage_latency_seconds", "histogram",
                      "Latency of each stage, every window since the aggregator started.", quiet};
  for (size_t i = 0; i < n; i++) {
    const em_agg_device_t *d = devs[i];
    for (size_t s = 0; d->dev && d->stages && s < d->n_stages; s++) {
      if (d->stages[s].total) {
        render_histogram(t, &latency, d->dev->id, &d->stages[s]);
      }
    }
  }
  family_t p99 = {"edgemon_stage_p99_seconds", "gauge", "p99 latency of the latest window.", quiet};
  for (size_t i = 0; i < n; i++) {
    const em_agg_device_t *d = devs[i];
    for (size_t s = 0; d->dev && d->stages && s < d->n_stages; s++) {
      if (d->stages[s].last.count > 0) {
        sample_begin(t, &p99, "", d->dev->id);
        label(t, "stage", d->stages[s].name);
        sample_value_sep(t, true);
        put_ns_as_seconds(t, d->stages[s].last.p99_ns);
        text_ch(t, '\n');
      }
    }
  }
  family_t windows = {"edgemon_stage_windows_total", "counter",
                      "Stage windows merged into the latency histogram.", quiet};
  for (size_t i = 0; i < n; i++) {
    const em_agg_device_t *d = devs[i];
    for (size_t s = 0; d->dev && d->stages && s < d->n_stages; s++) {
      sample_begin(t, &windows, "", d->dev->id);
      label(t, "stage", d->stages[s].name);
      sample_value_sep(t, true);
      put_u64(t, d->stages[s].windows);
      text_ch(t, '\n');
    }
  }
}

/* How many of the devices, in order, fit in budget bytes of per-device families (HELP and
 * TYPE lines aside: EM_METRICS_HELP_RESERVE_BYTES covers them). */
static size_t devices_that_fit(const em_registry_t *r, size_t budget) {
  em_text_t one = {.max_bytes = budget};
  size_t used = 0;
  size_t k = 0;
  for (; k < r->n_devices; k++) {
    one.len = 0;
    one.error = 0;
    render_devices(r, &r->devices[k], 1, &one, false);
    if (one.error || used + one.len > budget) {
      break;
    }
    used += one.len;
  }
  em_text_free(&one);
  return k;
}

int em_metrics_render(em_registry_t *r, em_text_t *t) {
  if (!t) {
    return -EINVAL;
  }
  if (!r) {
    t->error = t->error ? t->error : -EINVAL;
    return t->error;
  }
  if (t->error) {
    return t->error;
  }
  size_t cap = r->metrics_max_bytes ? r->metrics_max_bytes : EM_METRICS_MAX_BYTES;
  size_t reserve =
      EM_METRICS_SELF_RESERVE_BYTES < cap / 2 ? EM_METRICS_SELF_RESERVE_BYTES : cap / 2;
  size_t start = t->len;
  size_t saved_max = t->max_bytes;
  size_t n = r->devices ? r->n_devices : 0;
  size_t shown = n;
  t->max_bytes = start + cap - reserve;
  render_devices(r, r->devices, n, t, true);
  if (t->error == -E2BIG) {
    /* Over the cap: as many devices as fit, in id order (the same ones at every scrape while
     * the fleet does not change), and the aggregator's own families in full. */
    size_t budget = cap - reserve;
    budget = budget > EM_METRICS_HELP_RESERVE_BYTES ? budget - EM_METRICS_HELP_RESERVE_BYTES : 0;
    shown = devices_that_fit(r, budget);
    for (;;) {
      t->error = 0;
      t->len = start;
      if (t->data) {
        t->data[start] = '\0';
      }
      render_devices(r, r->devices, shown, t, true);
      if (t->error != -E2BIG || shown == 0) {
        break;
      }
      shown = shown * 9 / 10; /* The estimate was short: take a tenth off. */
    }
  }
  r->stats.metrics_truncated = shown < n;
  r->stats.metrics_omitted = n - shown;
  r->stats.metrics_truncations += shown < n ? 1 : 0;
  t->max_bytes = start + cap;
  render_aggregator(r, t);
  t->max_bytes = saved_max;
  return t->error;
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
  text_str(t, "]}");
  return t->error;
}
