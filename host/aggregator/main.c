/*
 * main.c - edgemon-aggregator: the fleet's telemetry from MQTT into SQLite, served to
 * Prometheus and dashboards over HTTP.
 *
 * Two threads: this one runs the MQTT session (host/lib/broker.c) and everything that writes:
 * registry updates, SQLite batches, rebirth requests, retention; libmicrohttpd's thread serves
 * /metrics, /api and /healthz, reading the registry under its lock, and hands the API's queries
 * of the store to --api-workers threads with read connections of their own (http.h). The session is
 * reconnected with capped exponential backoff when the broker goes away; /healthz answers 503
 * meanwhile, and also while /metrics is degraded (its latest render left devices out to stay
 * under --metrics-max-bytes). The MQTT thread also forgets devices silent for --device-ttl
 * (registry.h) and logs store failures with their reason at most every 10 s.
 *
 * Subscriptions: edgemon/v1/+/# normally. With a share group, data goes through the MQTT v5
 * shared subscription $share/<group>/edgemon/v1/+/data so the instances of the group split it
 * (flight recordings and stack profiles likewise, through $share/<group>/edgemon/v1/+/flight and
 * $share/<group>/edgemon/v1/+/profile: one stores each), while
 * birth, state and status (retained, small) are subscribed by every instance so each one names
 * every device's metrics and knows its level.
 *
 * The session is persistent (clean session off) under a stable client id, and every
 * subscription is QoS 1: while the aggregator is away the broker keeps its subscriptions and
 * queues their messages (up to its max_queued_messages, firmware/mosquitto/), and a restarted
 * aggregator with the same id receives them. The default id names the host and the database
 * (default_client_id()): the queued messages belong to the history they will be written into.
 * The store ignores a data or state message it holds already (data: same device, session and
 * seq; state: same device, session, time and level), so a redelivery stores nothing twice.
 *
 * Nothing acknowledged is lost: the session acknowledges a QoS 1 message only once its rows
 * are committed (em_broker_opts_t.before_ack, commit_before_ack()). The MQTT loop reads a burst
 * of messages into the open batch, commits it, and only then writes their PUBACKs; a kill -9
 * before the commit leaves them unacknowledged, and the broker sends them again to the
 * restarted session. A commit that fails, or a row that failed for a reason that may pass
 * (busy, full disk, I/O error: em_store_add() returns -EAGAIN), refuses the acknowledgement:
 * the connection is dropped and the broker sends the burst again on the next one. Under a
 * flood a burst is what the socket holds, up to EM_BROKER_ACK_BURST_MAX messages: one commit
 * per burst, not per message (docs/BENCHMARKS.md: ~155 messages per commit at 10k msg/s).
 * QoS 0 messages are never acknowledged; they still commit every --batch-ms or --batch-rows,
 * so a crash may lose the QoS 0 part of the open batch.
 *
 * Remote write ([remote_write] and [remote_write.NAME] in the config file, docs/CONFIG.md):
 * every interval the MQTT loop walks the families of /metrics under the registry's lock into
 * the remote write's batch (metrics.h, EM_METRICS_REMOTE) and seals it; remote.c's one sender
 * thread delivers it, so ingest never waits on a receiver. Every series carries the label
 * aggregator=<[remote_write] aggregator, default the client id>: the members of a share group
 * each hold part of every device's histograms, and their series must not collide. At stop,
 * one last push and up to [remote_write] drain for delivery.
 */
#define _POSIX_C_SOURCE 200809L
#include "forensics.h"
#include "http.h"
#include "metrics.h"
#include "options.h"
#include "registry.h"
#include "remote.h"
#include "store.h"

#include <broker.h>
#include <stop_signals.h>

#include "edgemon/common/credentials.h"
#include "edgemon/common/file.h"
#include "edgemon/common/ini.h"
#include "edgemon/common/parse.h"
#include "edgemon/common/schema.h"
#include "edgemon/common/str.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#ifndef EM_VERSION
#define EM_VERSION "unknown"
#endif

typedef struct {
  em_agg_config_t cfg;
  em_registry_t *reg;
  em_remote_t *rw;            /* NULL without [remote_write]. */
  uint64_t rw_refused_logged; /* Series the remote write refused, at the last log line. */
  em_store_t *store;
  em_http_t *http;
  em_broker_t *broker;
  atomic_bool connected;
  uint64_t malformed_logged;    /* registry malformed count at the last log line. */
  uint64_t rejected_logged;     /* Sum of the registry's rejected counts at the last log line. */
  uint64_t next_failure_log_ns; /* CLOCK_MONOTONIC before which store failures wait. */
  bool ack_veto; /* A row of the current burst failed for a reason that may pass (-EAGAIN). */
  /* Sessions dropped in a row because the store refused their acknowledgement (0 after a
   * commit that let one through): each doubles the wait before the next connect. */
  unsigned refusals;
} agg_t;

#define BACKOFF_MIN_MS 250u
#define BACKOFF_MAX_MS 10000u

/* Store failures are logged at most this often (the first one at once). */
#define FAILURE_LOG_PERIOD_NS 10000000000ull
/* Devices past the TTL are looked for this often (half the TTL when that is shorter, at least
 * once a second). */
#define EXPIRE_PERIOD_NS 10000000000ull

static volatile sig_atomic_t stop_requested;

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("edgemon-aggregator: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static uint64_t clock_ns(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- the configuration (options.h: the rows of the file and the flags) ------------------- */

/* The defaults in options.c's rows are the modules' own. */
_Static_assert(EM_METRICS_MAX_BYTES == 67108864u, "metrics_max_bytes' default below");
_Static_assert(EM_FLIGHTS_DEFAULT_MAX_BYTES == 67108864ull, "flight_max_bytes' default below");
_Static_assert(EM_PROFILES_DEFAULT_MAX_BYTES == 67108864ull, "profile_max_bytes' default below");
_Static_assert(EM_FORENSICS_DEFAULT_TOTAL_MAX_BYTES == 1073741824ull,
               "flight_total_max_bytes' and profile_total_max_bytes' default below");
_Static_assert(EM_HTTP_API_WORKERS_DEFAULT == 4u && EM_HTTP_API_WORKERS_MAX == 64u,
               "api_workers' row below");

/* The config file, read with common/'s INI line reader: every problem is printed as
 * FILE:LINE: message and counted. */
typedef struct {
  em_agg_config_t *cfg;
  const char *path;
  int errors;
} ini_ctx_t;

#define RW_PREFIX "remote_write."

/* The endpoint of section [remote_write.NAME], added at its first header; NULL after reporting
 * a bad NAME or one endpoint too many. */
static em_agg_endpoint_t *rw_endpoint(ini_ctx_t *x, int line, const char *section) {
  em_agg_config_t *c = x->cfg;
  const char *name = section + strlen(RW_PREFIX);
  for (size_t i = 0; i < c->n_rw; i++) {
    if (strcmp(c->rw[i].name, name) == 0) {
      return &c->rw[i];
    }
  }
  size_t len = strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-");
  if (len == 0 || name[len] != '\0' || len >= EM_AGG_RW_NAME_MAX) {
    fprintf(stderr,
            "%s:%d: section [%s]: NAME of [remote_write.NAME] wants 1 to 63 characters of A-Z "
            "a-z 0-9 _ -\n",
            x->path, line, section);
    x->errors++;
    return NULL;
  }
  if (c->n_rw == EM_REMOTE_MAX_ENDPOINTS) {
    fprintf(stderr, "%s:%d: section [%s]: at most %d remote write endpoints\n", x->path, line,
            section, EM_REMOTE_MAX_ENDPOINTS);
    x->errors++;
    return NULL;
  }
  em_agg_endpoint_t *e = &c->rw[c->n_rw++];
  em_agg_options_endpoint_defaults(e);
  memcpy(e->name, name, len + 1);
  e->line = line;
  c->rw_line = c->rw_line ? c->rw_line : line;
  return e;
}

static int on_ini_section(void *user, int line, const char *section) {
  ini_ctx_t *x = user;
  if (section && strncmp(section, RW_PREFIX, strlen(RW_PREFIX)) == 0) {
    (void)rw_endpoint(x, line, section);
  } else if (section && strcmp(section, "remote_write") == 0 && !x->cfg->rw_line) {
    x->cfg->rw_line = line;
  }
  return 0;
}

static int on_ini_pair(void *user, int line, const char *section, const char *name,
                       const char *value) {
  ini_ctx_t *x = user;
  if (!section) {
    return 0; /* After a malformed header, already reported. */
  }
  char msg[EM_SCHEMA_MSG_MAX];
  const char *why = NULL;
  if (strcmp(section, "remote_write") == 0) {
    why = em_agg_options_set(EM_AGG_SECTION_RW, section, x->cfg, name, value, msg, sizeof(msg));
  } else if (strncmp(section, RW_PREFIX, strlen(RW_PREFIX)) == 0) {
    em_agg_endpoint_t *e = rw_endpoint(x, line, section);
    if (!e) {
      return 0; /* Reported at its header. */
    }
    why = em_agg_options_set(EM_AGG_SECTION_ENDPOINT, section, e, name, value, msg, sizeof(msg));
  } else if (strcmp(section, "aggregator") != 0) {
    fprintf(stderr,
            "%s:%d: section [%s] is unknown (the aggregator reads [aggregator], [remote_write] "
            "and [remote_write.NAME])\n",
            x->path, line, section);
    x->errors++;
    return 0;
  } else {
    why = em_agg_options_set(EM_AGG_SECTION, EM_AGG_SECTION, x->cfg, name, value, msg, sizeof(msg));
  }
  if (why) {
    bool other = strcmp(section, "aggregator") != 0;
    fprintf(stderr, "%s:%d: %s%s%s%s '%s' %s\n", x->path, line, other ? "[" : "",
            other ? section : "", other ? "] " : "", name, value, why);
    x->errors++;
  }
  return 0;
}

static int on_ini_error(void *user, int line, em_ini_problem_t kind, const char *text,
                        const char *msg) {
  ini_ctx_t *x = user;
  (void)kind;
  (void)text;
  fprintf(stderr, "%s:%d: %s\n", x->path, line, msg);
  x->errors++;
  return 0;
}

/* ---- the MQTT side ----------------------------------------------------------------------- */

static void publish_rebirth(agg_t *a, const char *device) {
  em_msg_t cmd = {.kind = EM_MSG_CMD};
  cmd.u.cmd.head.time_ns = clock_ns(CLOCK_REALTIME);
  cmd.u.cmd.command = EM_CMD_REBIRTH;
  uint8_t buf[64];
  size_t len = 0;
  char topic[128];
  snprintf(topic, sizeof(topic), "edgemon/v1/%s/cmd/rebirth", device);
  if (em_proto_encode(&cmd, buf, sizeof(buf), &len) == 0) {
    (void)em_broker_publish(a->broker, topic, buf, len, 1, false);
  }
}

static void on_message(void *ctx, const char *topic, const uint8_t *payload, size_t len,
                       bool retained) {
  (void)retained;
  agg_t *a = ctx;
  em_ingest_t in;
  if (em_registry_ingest(a->reg, topic, payload, len, &in) != 0 || !in.agg) {
    return;
  }
  if (in.needs_rebirth) {
    publish_rebirth(a, in.device);
  }
  uint64_t now = clock_ns(CLOCK_REALTIME);
  int rc = in.msg.kind == EM_MSG_FLIGHT
               ? em_store_add_flight(a->store, in.device, &in.flight, payload, len, now)
           : in.msg.kind == EM_MSG_PROFILE
               ? em_store_add_profile(a->store, in.device, &in.profile, payload, len, now)
               : em_store_add(a->store, in.device, in.agg->dev, &in.msg, now);
  if (rc == -EAGAIN) {
    a->ack_veto = true; /* Not stored, but might be on a redelivery: no acknowledgement. */
  }
}

/* The session's before_ack: a burst of messages was read and some wait for their PUBACK.
 * Commits the open batch; returns 0 (acknowledge them), or -EIO when the commit failed or a row
 * of the burst failed for a reason that may pass, so that the broker sends them again. */
static int commit_before_ack(void *ctx) {
  agg_t *a = ctx;
  bool veto = a->ack_veto;
  a->ack_veto = false;
  int rc = em_store_flush(a->store);
  if (rc == 0 && !veto) {
    a->refusals = 0;
    return 0;
  }
  a->refusals++;
  logf_("store: %s; not acknowledging the messages just received (the broker sends them again)",
        rc != 0 ? "the commit failed" : "a row could not be written");
  return -EIO;
}

/* /healthz: down while the MQTT session is away; degraded while the latest /metrics had to
 * leave devices out (over its cap); ok otherwise. Whatever the health, then a line of the
 * forensic store's bytes against their total bounds and what those bounds evicted:
 * "forensics: flight BYTES of MAX bytes, N evicted; profile BYTES of MAX bytes, N evicted". */
static em_http_health_t healthy(void *ctx, char *why, size_t why_cap) {
  agg_t *a = ctx;
  em_registry_lock(a->reg);
  bool truncated = a->reg->stats.metrics_truncated;
  uint64_t omitted = a->reg->stats.metrics_omitted;
  em_agg_forensic_t fo[EM_AGG_FORENSIC_KINDS];
  memcpy(fo, a->reg->stats.forensic, sizeof(fo));
  em_registry_unlock(a->reg);
  em_http_health_t health = EM_HTTP_HEALTH_OK;
  if (!atomic_load(&a->connected)) {
    snprintf(why, why_cap, "no MQTT session with the broker");
    health = EM_HTTP_HEALTH_DOWN;
  } else if (truncated) {
    snprintf(why, why_cap, "/metrics left %llu device(s) out (over --metrics-max-bytes)",
             (unsigned long long)omitted);
    health = EM_HTTP_HEALTH_DEGRADED;
  }
  size_t at = strnlen(why, why_cap);
  snprintf(why + at, why_cap - at,
           "\nforensics: flight %llu of %llu bytes, %llu evicted; profile %llu of %llu bytes, %llu "
           "evicted",
           (unsigned long long)fo[0].bytes, (unsigned long long)fo[0].max_bytes,
           (unsigned long long)fo[0].evicted, (unsigned long long)fo[1].bytes,
           (unsigned long long)fo[1].max_bytes, (unsigned long long)fo[1].evicted);
  return health;
}

/* The client id when none is configured: "edgemon-aggregator-<host name>-<hash>", the hash
 * (FNV-1a, 32 bits, in hex) of the database's absolute path. Stable across restarts of the same
 * aggregator, so the broker's queue for the session reaches it; distinct for two aggregators
 * on one host (they write different databases), where one fixed default would make each
 * take the other's session over, back and forth. */
static void default_client_id(const char *db, char *out, size_t cap) {
  char host[65] = "";
  if (gethostname(host, sizeof(host) - 1) != 0 || !host[0]) {
    snprintf(host, sizeof(host), "localhost");
  }
  for (char *p = host; *p; p++) {
    if (*p == '/' || *p == '+' || *p == '#') {
      *p = '_';
    }
  }
  char cwd[EM_AGG_TEXT_MAX] = "";
  if (db[0] != '/' && getcwd(cwd, sizeof(cwd)) == NULL) {
    cwd[0] = '\0';
  }
  uint32_t h = 2166136261u;
  const char *parts[] = {cwd, db[0] != '/' ? "/" : "", db};
  for (size_t i = 0; i < 3; i++) {
    for (const char *p = parts[i]; *p; p++) {
      h = (h ^ (uint8_t)*p) * 16777619u;
    }
  }
  snprintf(out, cap, "edgemon-aggregator-%.24s-%08x", host, (unsigned)h);
}

static int connect_and_subscribe(agg_t *a) {
  char err[512] = "";
  em_broker_opts_t opts = {
      .client_prefix = "edgemon-aggregator",
      .client_id = a->cfg.client_id,
      .persistent = true,
      .mqtt5 = a->cfg.share_group[0] != '\0',
      /* The largest message of any kind and its PUBLISH: the broker drops a larger one. */
      .max_packet_bytes = EM_PROTO_MAX_PAYLOAD_BYTES + EM_PROTO_MQTT_OVERHEAD_BYTES,
      .tls_ca_file = a->cfg.tls_ca_file,
      .tls_ca_path = a->cfg.tls_ca_path,
      .tls_cert_file = a->cfg.tls_cert_file,
      .tls_key_file = a->cfg.tls_key_file,
      .tls_insecure = a->cfg.tls_insecure,
      .username = a->cfg.creds.username[0] ? a->cfg.creds.username : NULL,
      .password = a->cfg.creds.password[0] ? a->cfg.creds.password : NULL,
      .before_ack = commit_before_ack,
  };
  a->ack_veto = false;
  int rc = em_broker_connect_opts(&a->broker, a->cfg.broker, &opts, on_message, a, 5.0, err,
                                  sizeof(err));
  if (rc != 0) {
    logf_("%s", err[0] ? err : strerror(-rc));
    return rc;
  }
  char pattern[160];
  static const char *const retained_kinds[] = {"birth", "state", "status"};
  if (a->cfg.share_group[0]) {
    for (size_t i = 0; i < 3 && rc == 0; i++) {
      snprintf(pattern, sizeof(pattern), "edgemon/v1/+/%s", retained_kinds[i]);
      rc = em_broker_subscribe(a->broker, pattern);
    }
    static const char *const shared_blobs[] = {"flight", "profile"};
    for (size_t i = 0; i < 2 && rc == 0; i++) {
      snprintf(pattern, sizeof(pattern), "$share/%s/edgemon/v1/+/%s", a->cfg.share_group,
               shared_blobs[i]);
      rc = em_broker_subscribe(a->broker, pattern); /* One member stores each blob. */
    }
    snprintf(pattern, sizeof(pattern), "$share/%s/edgemon/v1/+/data", a->cfg.share_group);
  } else {
    snprintf(pattern, sizeof(pattern), "edgemon/v1/+/#");
  }
  if (rc == 0) {
    rc = em_broker_subscribe(a->broker, pattern);
  }
  if (rc != 0) {
    logf_("cannot subscribe to %s on %s: %s", pattern, a->cfg.broker,
          rc == -EPERM ? "refused by the broker" : strerror(-rc));
    em_broker_free(a->broker);
    a->broker = NULL;
    return rc;
  }
  logf_("mqtt: connected to %s as %s (persistent session), subscribed to %s%s", a->cfg.broker,
        a->cfg.client_id, pattern,
        a->cfg.share_group[0] ? " (and birth/state/status of every device)" : "");
  atomic_store(&a->connected, true);
  return 0;
}

/* Copies the store's counters into the registry's stats and logs new trouble: store failures
 * with their reason at most every FAILURE_LOG_PERIOD_NS. now_ns is CLOCK_MONOTONIC. */
static void publish_stats(agg_t *a, uint64_t now_ns) {
  em_store_stats_t st;
  em_store_stats(a->store, &st);
  em_registry_lock(a->reg);
  em_agg_stats_t *rs = &a->reg->stats;
  rs->store_rows = st.rows;
  rs->store_batches = st.batches;
  rs->store_errors = st.errors;
  rs->store_duplicates = st.duplicates;
  rs->models_refused = st.models_refused;
  rs->models_deleted = st.models_deleted;
  rs->n_store_failures = 0;
  for (size_t i = 0; i < st.n_failures && i < EM_AGG_FAILURE_KINDS; i++) {
    em_agg_failure_t *f = &rs->store_failures[rs->n_store_failures++];
    memcpy(f->table, st.failures[i].table, sizeof(f->table));
    memcpy(f->reason, st.failures[i].reason, sizeof(f->reason));
    f->count = st.failures[i].count;
  }
  rs->ckpt_runs = st.ckpt.runs;
  rs->ckpt_frames = st.ckpt.frames;
  rs->ckpt_busy = st.ckpt.busy;
  rs->ckpt_errors = st.ckpt.errors;
  rs->ckpt_truncates = st.ckpt.truncates;
  rs->ckpt_writer_runs = st.wal_restarts;
  rs->ckpt_writer_busy = st.wal_restart_busy;
  rs->wal_bytes = st.ckpt.wal_bytes;
  rs->wal_max_bytes = st.ckpt.wal_max_bytes;
  rs->forensic[0] = (em_agg_forensic_t){st.flights, st.flights_dropped, st.flights_evicted,
                                        st.flight_bytes, a->cfg.flight_total_max_bytes};
  rs->forensic[1] = (em_agg_forensic_t){st.profiles, st.profiles_dropped, st.profiles_evicted,
                                        st.profile_bytes, a->cfg.profile_total_max_bytes};
  uint64_t malformed = rs->malformed;
  uint64_t rejected = 0;
  char why[160] = "";
  for (int i = 0; i < EM_AGG_REJECT_COUNT; i++) {
    rejected += rs->rejected[i];
    size_t at = strlen(why);
    snprintf(why + at, sizeof(why) - at, "%s%s %llu", i ? ", " : "",
             em_agg_reject_name((em_agg_reject_t)i), (unsigned long long)rs->rejected[i]);
  }
  em_registry_unlock(a->reg);
  if (malformed > a->malformed_logged) {
    logf_("%llu malformed message(s) skipped so far", (unsigned long long)malformed);
    a->malformed_logged = malformed;
  }
  if (rejected > a->rejected_logged) {
    logf_("%llu message(s) rejected so far (%s)", (unsigned long long)rejected, why);
    a->rejected_logged = rejected;
  }
  if (now_ns >= a->next_failure_log_ns) {
    char text[EM_STORE_FAILURE_TEXT];
    uint64_t n = em_store_take_failure(a->store, text, sizeof(text));
    if (n > 0) {
      logf_("store: %llu failed write(s) since the last report (%llu in all); the latest: %s",
            (unsigned long long)n, (unsigned long long)st.errors, text);
      a->next_failure_log_ns = now_ns + FAILURE_LOG_PERIOD_NS;
    }
  }
}

/* ---- remote write ------------------------------------------------------------------------ */

/* Reads the secret in `path` (a password or bearer token: the file's first line, surrounding
 * blanks removed, nothing but blank lines after it) into out[0..EM_AGG_RW_SECRET_MAX). The file
 * must be a regular file of this user or root with no access for group or others. Returns 0, or -1
 * after printing why (never the secret) as "CONFIG:LINE: [SECTION] KEY 'PATH' ...". */
static void secret_error(void *ctx, int line, const char *msg) {
  (void)line;
  snprintf((char *)ctx, 256, "%s", msg);
}

static int read_secret(const char *config, int line, const char *section, const char *key,
                       const char *path, char *out) {
  char why[256] = "";
  char buf[EM_AGG_RW_SECRET_MAX + 1];
  int rc = -1;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    snprintf(why, sizeof(why), "cannot be read: %s", strerror(errno));
  } else if (em_credentials_check_fd(fd, "the aggregator", secret_error, why) != 0) {
    if (!why[0]) {
      snprintf(why, sizeof(why), "cannot be checked");
    }
  } else {
    bool truncated = false;
    ssize_t n = em_file_read_fd(fd, buf, sizeof(buf), &truncated);
    if (n < 0) {
      snprintf(why, sizeof(why), "cannot be read: %s", strerror((int)-n));
    } else if (truncated || (size_t)n >= EM_AGG_RW_SECRET_MAX || memchr(buf, '\0', (size_t)n)) {
      snprintf(why, sizeof(why), "wants one line of text under %d bytes", EM_AGG_RW_SECRET_MAX);
    } else {
      char *p = buf + strspn(buf, " \t");
      size_t len = strcspn(p, "\r\n");
      char *rest = p + len;
      while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t')) {
        len--;
      }
      if (len == 0) {
        snprintf(why, sizeof(why), "is empty");
      } else if (rest[strspn(rest, " \t\r\n")] != '\0') {
        snprintf(why, sizeof(why), "wants the secret alone on its first line");
      } else {
        memcpy(out, p, len);
        out[len] = '\0';
        rc = 0;
      }
    }
    close(fd);
  }
  for (volatile char *v = buf; v < buf + sizeof(buf); v++) {
    *v = '\0'; /* Volatile: the wipe of the secret is not optimised away. */
  }
  if (rc != 0) {
    fprintf(stderr, "%s:%d: [%s] %s '%s' %s\n", config, line, section, key, path, why);
  }
  return rc;
}

/* What the URL of an endpoint lacks, or NULL when it looks right (remote.c checks it again). */
static const char *url_problem(const char *url) {
  const char *host = strncmp(url, "http://", 7) == 0    ? url + 7
                     : strncmp(url, "https://", 8) == 0 ? url + 8
                                                        : NULL;
  if (!host || !*host || *host == '/') {
    return "wants http://HOST[:PORT]/PATH or https://HOST[:PORT]/PATH";
  }
  if (strpbrk(url, " \t")) {
    return "holds a blank";
  }
  size_t authority = strcspn(host, "/?#");
  if (memchr(host, '@', authority)) {
    return "holds user:password@ (use username and password_file)";
  }
  return NULL;
}

/* Checks the [remote_write] sections together (what one key alone cannot say) and reads the
 * secret files. Returns the number of problems, each printed as CONFIG:LINE: message. */
static int rw_check(em_agg_config_t *c, const char *config) {
  int errors = 0;
  if (c->rw_line && c->n_rw == 0) {
    fprintf(stderr,
            "%s:%d: [remote_write] has no endpoint: add a [remote_write.NAME] section with a url\n",
            config, c->rw_line);
    return 1;
  }
  if (c->n_rw > 0 && c->rw_backoff_max_ns < c->rw_backoff_min_ns) {
    fprintf(stderr, "%s:%d: [remote_write] backoff_max is below backoff_min\n", config, c->rw_line);
    errors++;
  }
  for (size_t i = 0; i < c->n_rw; i++) {
    em_agg_endpoint_t *e = &c->rw[i];
    char section[EM_AGG_RW_NAME_MAX + 16];
    snprintf(section, sizeof(section), "remote_write.%s", e->name);
    const char *why = e->url[0] ? url_problem(e->url) : "is required";
    if (why) {
      fprintf(stderr, "%s:%d: [%s] url%s%s%s %s\n", config, e->line, section, e->url[0] ? " '" : "",
              e->url, e->url[0] ? "'" : "", why);
      errors++;
    }
    bool https = strncmp(e->url, "https://", 8) == 0;
    if (!https && (e->ca_file[0] || e->insecure)) {
      fprintf(stderr, "%s:%d: [%s] ca_file and insecure want an https:// url\n", config, e->line,
              section);
      errors++;
    }
    if (!e->username[0] != !e->password_file[0]) {
      fprintf(stderr, "%s:%d: [%s] username and password_file go together\n", config, e->line,
              section);
      errors++;
    }
    if (e->username[0] && e->bearer_token_file[0]) {
      fprintf(stderr, "%s:%d: [%s] basic auth (username) or bearer_token_file, not both\n", config,
              e->line, section);
      errors++;
    }
    if (e->password_file[0] && read_secret(config, e->line, section, "password_file",
                                           e->password_file, e->password) != 0) {
      errors++;
    }
    if (e->bearer_token_file[0] && read_secret(config, e->line, section, "bearer_token_file",
                                               e->bearer_token_file, e->bearer_token) != 0) {
      errors++;
    }
  }
  return errors;
}

/* Starts the remote write of the configured endpoints (none: *out NULL). Returns 0 or the
 * negative errno of em_remote_new(). */
static int rw_start(const em_agg_config_t *c, em_remote_t **out) {
  *out = NULL;
  if (c->n_rw == 0) {
    return 0;
  }
  em_remote_endpoint_cfg_t eps[EM_REMOTE_MAX_ENDPOINTS];
  for (size_t i = 0; i < c->n_rw; i++) {
    const em_agg_endpoint_t *e = &c->rw[i];
    eps[i] = (em_remote_endpoint_cfg_t){
        .url = e->url,
        .ca_file = e->ca_file[0] ? e->ca_file : NULL,
        .insecure = e->insecure,
        .username = e->username[0] ? e->username : NULL,
        .password = e->username[0] ? e->password : NULL,
        .bearer_token = e->bearer_token[0] ? e->bearer_token : NULL,
        .timeout_ms = (uint32_t)(e->timeout_ns / EM_NS_PER_MS),
        .queue_requests = (uint32_t)e->queue_requests,
    };
  }
  em_remote_cfg_t rc = {
      .endpoints = eps,
      .n_endpoints = c->n_rw,
      .batch_series = (uint32_t)c->rw_batch_series,
      .max_request_bytes = (size_t)c->rw_max_request_bytes,
      .backoff_min_ms = (uint32_t)(c->rw_backoff_min_ns / EM_NS_PER_MS),
      .backoff_max_ms = (uint32_t)(c->rw_backoff_max_ns / EM_NS_PER_MS),
      .user_agent = "edgemon-aggregator/" EM_VERSION,
  };
  return em_remote_new(out, &rc);
}

/* Pushes the registry's families to the remote write, under the registry's lock: appending
 * never waits on the network (remote.h), so ingest is held up only by the encoding. */
static void rw_push(agg_t *a) {
  em_metrics_out_t out;
  if (em_metrics_out_init(&out, EM_METRICS_REMOTE, 0) != 0) {
    return;
  }
  int64_t now_ms = (int64_t)(clock_ns(CLOCK_REALTIME) / EM_NS_PER_MS);
  const char *label = a->cfg.rw_label[0] ? a->cfg.rw_label : a->cfg.client_id;
  int rc = em_metrics_out_remote(&out, a->rw, now_ms, "aggregator", label);
  if (rc == 0) {
    em_registry_lock(a->reg);
    rc = em_metrics_push(a->reg, &out);
    em_registry_unlock(a->reg);
  }
  if (rc != 0) {
    logf_("remote write: the push failed: %s", strerror(-rc));
  }
  a->rw_refused_logged += out.remote_refused;
  if (out.remote_refused > 0) {
    logf_("remote write: %llu series refused by this push (%llu in all; bad names or over "
          "max_request_bytes)",
          (unsigned long long)out.remote_refused, (unsigned long long)a->rw_refused_logged);
  }
  em_metrics_out_deinit(&out);
}

static void on_signal(int sig) {
  (void)sig;
  stop_requested = 1;
}

static int run(agg_t *a) {
  uint64_t backoff_ms = BACKOFF_MIN_MS;
  uint64_t next_connect = 0;
  uint64_t next_stats = 0;
  uint64_t ttl_ns = a->cfg.device_ttl_s * 1000000000u;
  uint64_t expire_every_ns = ttl_ns / 2 < EXPIRE_PERIOD_NS ? ttl_ns / 2 : EXPIRE_PERIOD_NS;
  expire_every_ns = expire_every_ns < 1000000000u ? 1000000000u : expire_every_ns;
  uint64_t next_expire = clock_ns(CLOCK_MONOTONIC) + expire_every_ns;
  uint64_t next_retain = clock_ns(CLOCK_MONOTONIC) + 60000000000ull;
  uint64_t next_push = clock_ns(CLOCK_MONOTONIC) + a->cfg.rw_interval_ns;
  while (!stop_requested) {
    uint64_t now = clock_ns(CLOCK_MONOTONIC);
    if (!a->broker && now >= next_connect) {
      if (connect_and_subscribe(a) == 0) {
        backoff_ms = BACKOFF_MIN_MS;
      } else {
        next_connect = now + backoff_ms * 1000000u;
        backoff_ms = backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff_ms * 2;
      }
    }
    int brc = a->broker ? em_broker_run(a->broker, 100) : 0;
    if (brc != 0) {
      logf_("mqtt: %s %s; reconnecting",
            brc == -ECONNRESET ? "lost the connection to" : "dropped the connection to",
            a->cfg.broker);
      atomic_store(&a->connected, false);
      em_broker_free(a->broker);
      a->broker = NULL;
      uint64_t wait_ms = backoff_ms;
      if (a->refusals > 0) { /* The store refuses: retry less and less often. */
        unsigned shift = a->refusals < 6 ? a->refusals : 6;
        wait_ms =
            (BACKOFF_MIN_MS << shift) > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : (BACKOFF_MIN_MS << shift);
      }
      next_connect = clock_ns(CLOCK_MONOTONIC) + wait_ms * 1000000u;
    } else if (!a->broker) {
      struct timespec nap = {0, 50000000};
      nanosleep(&nap, NULL);
    }
    now = clock_ns(CLOCK_MONOTONIC);
    (void)em_store_tick(a->store, now);
    if (now >= next_stats) {
      publish_stats(a, now);
      next_stats = now + 1000000000u;
    }
    if (now >= next_expire) {
      size_t gone = em_registry_expire(a->reg, now, ttl_ns);
      if (gone > 0) {
        logf_("forgot %zu device(s) not heard from for %llu s (their history stays in the store)",
              gone, (unsigned long long)a->cfg.device_ttl_s);
      }
      next_expire = now + expire_every_ns;
    }
    if (now >= next_retain) {
      (void)em_store_retain(a->store, clock_ns(CLOCK_REALTIME));
      next_retain = now + 60000000000ull;
    }
    if (a->rw && now >= next_push) {
      rw_push(a);
      next_push = now + a->cfg.rw_interval_ns;
    }
  }
  if (a->rw) {
    rw_push(a); /* The state at stop, delivered within [remote_write] drain. */
  }
  return 0;
}

/* Reads credentials_file and checks the TLS and login settings against the broker URL.
 * Returns 0, or -1 with the reason printed. */
static int security_check(em_agg_config_t *c) {
  char err[512] = "";
  em_broker_url_t u;
  if (em_broker_parse_url(c->broker, &u, err, sizeof(err)) != 0) {
    fprintf(stderr, "edgemon-aggregator: %s\n", err);
    return -1;
  }
  if (c->credentials_file[0] &&
      em_broker_read_credentials(c->credentials_file, &c->creds, err, sizeof(err)) != 0) {
    fprintf(stderr, "edgemon-aggregator: credentials_file: %s\n", err);
    return -1;
  }
  em_broker_opts_t o = {
      .tls_ca_file = c->tls_ca_file,
      .tls_ca_path = c->tls_ca_path,
      .tls_cert_file = c->tls_cert_file,
      .tls_key_file = c->tls_key_file,
      .tls_insecure = c->tls_insecure,
      .username = c->creds.username,
      .password = c->creds.password,
  };
  if (em_broker_check_opts(&u, &o, err, sizeof(err)) != 0) {
    fprintf(stderr, "edgemon-aggregator: %s\n", err);
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  static agg_t a;
  em_agg_options_defaults(&a.cfg);
  em_agg_args_t args;
  em_agg_args_result_t parsed = em_agg_options_parse_args(argc, argv, EM_VERSION, &args);
  if (parsed != EM_AGG_ARGS_RUN) {
    return parsed == EM_AGG_ARGS_DONE ? 0 : 2;
  }
  const char *config = args.config;
  bool check = args.check;
  if (config) {
    ini_ctx_t x = {.cfg = &a.cfg, .path = config};
    FILE *f = fopen(config, "re");
    if (!f) {
      fprintf(stderr, "edgemon-aggregator: cannot read %s: %s\n", config, strerror(errno));
      return 2;
    }
    const em_ini_reader_t reader = {.file = config,
                                    .on_section = on_ini_section,
                                    .on_pair = on_ini_pair,
                                    .on_error = on_ini_error};
    int rc = em_ini_parse_file(f, &reader, &x);
    fclose(f);
    if (rc < 0) {
      fprintf(stderr, "edgemon-aggregator: cannot read %s: %s\n", config,
              rc == -EFBIG ? "larger than 1 MiB" : strerror(-rc));
      x.errors++;
    }
    if (x.errors > 0 || rw_check(&a.cfg, config) > 0) {
      return 2;
    }
  }
  if (em_agg_options_apply_args(&args, &a.cfg) != 0) {
    return 2;
  }
  if (security_check(&a.cfg) != 0) {
    return 2;
  }
  if (!a.cfg.client_id[0]) {
    default_client_id(a.cfg.db, a.cfg.client_id, sizeof(a.cfg.client_id));
  }
  if (check) {
    em_remote_t *rw = NULL;
    int rc = rw_start(&a.cfg, &rw);
    em_remote_free(rw, 0);
    if (rc != 0) {
      fprintf(stderr, "edgemon-aggregator: remote write: %s\n",
              rc == -EINVAL ? "an endpoint was refused (url, credentials or TLS settings)"
                            : strerror(-rc));
      return 2;
    }
    printf("configuration ok: broker %s, db %s, http %s%s%s, client id %s", a.cfg.broker, a.cfg.db,
           a.cfg.http, a.cfg.share_group[0] ? ", share group " : "", a.cfg.share_group,
           a.cfg.client_id);
    if (a.cfg.n_rw > 0) {
      printf(", remote write every %llu ms to %zu endpoint(s) as aggregator=\"%s\"",
             (unsigned long long)(a.cfg.rw_interval_ns / EM_NS_PER_MS), a.cfg.n_rw,
             a.cfg.rw_label[0] ? a.cfg.rw_label : a.cfg.client_id);
      for (size_t i = 0; i < a.cfg.n_rw; i++) {
        printf("%s%s", i ? " " : ": ", a.cfg.rw[i].url);
      }
    }
    printf("\n");
    return 0;
  }

  em_stop_signals_catch(on_signal);
  /* Past a file size limit (ulimit -f) a write fails with EFBIG, which the store reports as a
   * failed write (nothing acknowledged), instead of the signal killing the process. */
  signal(SIGXFSZ, SIG_IGN);

  int exit_code = 1;
  char err[512] = "";
  em_store_opts_t so = {.path = a.cfg.db,
                        .batch_ms = (uint32_t)a.cfg.batch_ms,
                        .batch_rows = (uint32_t)a.cfg.batch_rows,
                        .retention_s = a.cfg.retention_s,
                        .flight_max_bytes = a.cfg.flight_max_bytes,
                        .profile_max_bytes = a.cfg.profile_max_bytes,
                        .flight_total_max_bytes = a.cfg.flight_total_max_bytes,
                        .profile_total_max_bytes = a.cfg.profile_total_max_bytes,
                        .downsample_after_s = a.cfg.downsample_after_s,
                        .downsample_step_s = a.cfg.downsample_step_s};
  em_store_report_t report;
  memset(&report, 0, sizeof(report));
  if (em_store_open(&a.store, &so, &report, err, sizeof(err)) != 0) {
    logf_("%s", err);
    goto out;
  }
  if (report.unclean) {
    time_t t = (time_t)(report.last_commit_ns / 1000000000u);
    struct tm tm;
    char when[64] = "an unknown time";
    if (report.last_commit_ns && gmtime_r(&t, &tm)) {
      strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    }
    logf_("store: the previous run did not stop cleanly; its last commit was at %s. QoS 1 "
          "messages were acknowledged only once committed: the broker sends the rest again. "
          "QoS 0 messages of its last batch (up to %llu rows or %llu ms) may be lost",
          when, (unsigned long long)a.cfg.batch_rows, (unsigned long long)a.cfg.batch_ms);
  }
  logf_("store: %s %s (WAL, batches of %llu rows or %llu ms)",
        report.created ? "created" : "opened", a.cfg.db, (unsigned long long)a.cfg.batch_rows,
        (unsigned long long)a.cfg.batch_ms);
  if (em_registry_new(&a.reg, a.cfg.share_group[0] == '\0') != 0) {
    logf_("out of memory");
    goto out;
  }
  a.reg->device_ttl_ns = a.cfg.device_ttl_s * 1000000000u;
  a.reg->metrics_max_bytes = (size_t)a.cfg.metrics_max_bytes;
  int rwrc = rw_start(&a.cfg, &a.rw);
  if (rwrc != 0) {
    logf_("remote write: cannot start: %s", strerror(-rwrc));
    goto out;
  }
  a.reg->remote = a.rw;
  if (a.rw) {
    logf_("remote write: every %llu ms to %zu endpoint(s), label aggregator=\"%s\"",
          (unsigned long long)(a.cfg.rw_interval_ns / EM_NS_PER_MS), a.cfg.n_rw,
          a.cfg.rw_label[0] ? a.cfg.rw_label : a.cfg.client_id);
  }
  if (em_http_start(&a.http, a.cfg.http, a.reg, a.cfg.db, (unsigned)a.cfg.api_workers, healthy, &a,
                    err, sizeof(err)) != 0) {
    logf_("%s", err);
    goto out;
  }
  char host[EM_AGG_TEXT_MAX];
  snprintf(host, sizeof(host), "%s", a.cfg.http);
  char *colon = strrchr(host, ':');
  if (colon) {
    *colon = '\0';
  }
  logf_(
      "http: serving on http://%s:%u (/metrics, /api/devices, /api/fleet, /api/latency, /healthz)",
      host, (unsigned)em_http_port(a.http));
  exit_code = run(&a);
  logf_("stopping");
out:
  em_http_stop(a.http); /* First: /metrics reads the remote write's health. */
  em_broker_free(a.broker);
  em_remote_free(a.rw, (uint32_t)(a.cfg.rw_drain_ns / EM_NS_PER_MS));
  if (a.store && em_store_close(a.store) != 0) {
    logf_("store: the last batch could not be committed");
    exit_code = 1;
  }
  em_registry_free(a.reg);
  return exit_code;
}
