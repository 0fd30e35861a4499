/*
 * main.c - edgemon-aggregator: the fleet's telemetry from MQTT into SQLite, served to
 * Prometheus and dashboards over HTTP.
 *
 * Two threads: this one runs the MQTT session (host/lib/broker.c) and everything that writes:
 * registry updates, SQLite batches, rebirth requests, retention; libmicrohttpd's thread serves
 * /metrics, /api and /healthz, reading the registry under its lock. The session is
 * reconnected with capped exponential backoff when the broker goes away; /healthz answers 503
 * meanwhile, and also while /metrics is degraded (its latest render left devices out to stay
 * under --metrics-max-bytes). The MQTT thread also forgets devices silent for --device-ttl
 * (registry.h) and logs store failures with their reason at most every 10 s.
 *
 * Subscriptions: edgemon/v1/+/# normally. With a share group, data goes through the MQTT v5
 * shared subscription $share/<group>/edgemon/v1/+/data so the instances of the group split it,
 * while birth, state and status (retained, small) are subscribed by every instance so each
 * one names every device's metrics and knows its level.
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
 */
#define _POSIX_C_SOURCE 200809L
#include "http.h"
#include "metrics.h"
#include "registry.h"
#include "store.h"

#include <broker.h>

#include "edgemon/common/ini.h"
#include "edgemon/common/parse.h"
#include "edgemon/common/schema.h"
#include "edgemon/common/str.h"
#include <errno.h>
#include <getopt.h>
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

#define MAX_TEXT 256

typedef struct {
  char broker[MAX_TEXT];
  char share_group[64];
  char client_id[64];
  char db[MAX_TEXT];
  char http[MAX_TEXT];
  uint64_t batch_ms;
  uint64_t batch_rows;
  uint64_t retention_s;
  uint64_t downsample_after_s;
  uint64_t downsample_step_s;
  uint64_t device_ttl_s;      /* Forget a device silent for this long; 0 never. */
  uint64_t metrics_max_bytes; /* Cap of the /metrics text. */
  char tls_ca_file[MAX_TEXT];
  char tls_ca_path[MAX_TEXT];
  char tls_cert_file[MAX_TEXT];
  char tls_key_file[MAX_TEXT];
  bool tls_insecure;
  char credentials_file[MAX_TEXT];
  em_broker_credentials_t creds; /* Read from credentials_file once the options are known. */
} agg_config_t;

typedef struct {
  agg_config_t cfg;
  em_registry_t *reg;
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

static void usage(FILE *out) {
  fprintf(out,
          "usage: edgemon-aggregator [--config FILE] [--broker URL] [--share-group NAME]\n"
          "                          [--client-id ID] [--db PATH] [--http HOST:PORT]\n"
          "                          [--batch-ms N] [--batch-rows N] [--retention DURATION]\n"
          "                          [--device-ttl DURATION] [--metrics-max-bytes N]\n"
          "                          [--tls-ca-file FILE|--tls-ca-path DIR]\n"
          "                          [--tls-cert-file FILE --tls-key-file FILE] [--tls-insecure]\n"
          "                          [--credentials-file FILE]\n"
          "                          [--check] [--version] [--help]\n"
          "\n"
          "Subscribes to edgemon/v1/+/# (or, with --share-group, shares the data messages with\n"
          "the other members of the group through $share/NAME/edgemon/v1/+/data), keeps every\n"
          "device's history in SQLite (host/aggregator/SCHEMA.md) and serves /metrics\n"
          "(Prometheus text, or protobuf with native histograms to a scraper that asks for it),\n"
          "/api/devices, /api/devices/<id> and /healthz.\n"
          "\n"
          "  --config FILE        INI file, section [aggregator], keys as the flags below with\n"
          "                       '_' for '-' (share_group, batch_ms, ...), plus\n"
          "                       downsample_after and downsample_step; flags win over it\n"
          "  --broker URL         mqtt://HOST[:PORT], or mqtts://HOST[:PORT] for TLS (port\n"
          "                       8883) (default " EM_BROKER_DEFAULT_URL ")\n"
          "  --share-group NAME   join this MQTT v5 share group (several aggregators split the\n"
          "                       data load); per-device loss is not computed then\n"
          "  --client-id ID       MQTT client id of the persistent session (default:\n"
          "                       edgemon-aggregator-<host name>-<hash of the --db path>);\n"
          "                       a restart with the same id gets what the broker queued\n"
          "  --db PATH            SQLite database (default edgemon.db)\n"
          "  --http HOST:PORT     where to serve HTTP (default 127.0.0.1:9108; port 0: any)\n"
          "  --batch-ms N         commit at least every N ms (default 500)\n"
          "  --batch-rows N       ... or every N rows (default 5000); a QoS 1 message is\n"
          "                       acknowledged to the broker only once its rows are committed\n"
          "                       (each burst the broker delivers is committed at once), so a\n"
          "                       crash loses none: the broker sends it again\n"
          "  --retention D        delete history older than D (e.g. 7d, 12h; default 7d; 0 keeps\n"
          "                       all); samples older than downsample_after (default 1d) are\n"
          "                       averaged to one per downsample_step (default 1m)\n"
          "  --device-ttl D       forget a device (in memory: /metrics, /api) after D without a\n"
          "                       message from it (default 24h; 0 never); its history stays\n"
          "  --metrics-max-bytes N cap of /metrics in either format (default 64 MiB, at least\n"
          "                       1 MiB); past it /metrics leaves devices out and /healthz\n"
          "                       says so\n"
          "  --tls-ca-file FILE   mqtts://: CA certificates (PEM) that verify the broker\n"
          "  --tls-ca-path DIR    mqtts://: a directory of CA certificates (c_rehash); with\n"
          "                       neither, the system's CA certificates\n"
          "  --tls-cert-file FILE mqtts://: client certificate (PEM), with --tls-key-file\n"
          "  --tls-key-file FILE  mqtts://: its private key (PEM, not encrypted)\n"
          "  --tls-insecure       mqtts://: do not match the broker's host name with its\n"
          "                       certificate (testing only); INI: tls_insecure = true\n"
          "  --credentials-file F MQTT username and password: lines 'username = NAME' and\n"
          "                       'password = SECRET', as the agent's credentials_file;\n"
          "                       refused when group or others can access it (chmod 600)\n"
          "  --check              validate the configuration and exit\n"
          "\n"
          "Exit: 0 after SIGTERM/SIGINT (the last batch committed, the store closed); 1 a\n"
          "runtime failure (database, HTTP address); 2 bad configuration or arguments.\n");
}

/* ---- the configuration: one schema row per key (edgemon/common/schema.h) -------------------- */

/* Keys whose value needs more than its type: each sets *why (a "wants ..." phrase) and returns
 * -EINVAL, or stores the value. */
static int set_broker(void *ctx, const em_schema_key_t *k, void *obj, const char *value) {
  em_broker_url_t u;
  if (em_broker_parse_url(value, &u, NULL, 0) != 0) {
    *(const char **)ctx = "wants mqtt://HOST[:PORT] or mqtts://HOST[:PORT]";
    return -EINVAL;
  }
  if (!em_str_copy((char *)obj + k->offset, k->size, value)) {
    *(const char **)ctx = "is too long";
    return -EINVAL;
  }
  return 0;
}

static int set_share_group(void *ctx, const em_schema_key_t *k, void *obj, const char *value) {
  if (strpbrk(value, "/+#") || strlen(value) >= k->size) {
    *(const char **)ctx = "wants a name without '/', '+' or '#', under 64 characters";
    return -EINVAL;
  }
  em_str_copy((char *)obj + k->offset, k->size, value);
  return 0;
}

static int set_http(void *ctx, const em_schema_key_t *k, void *obj, const char *value) {
  if (!*value || !strchr(value, ':') || !em_str_copy((char *)obj + k->offset, k->size, value)) {
    *(const char **)ctx = "wants HOST:PORT, e.g. 127.0.0.1:9108";
    return -EINVAL;
  }
  return 0;
}

_Static_assert(EM_METRICS_MAX_BYTES == 67108864u, "metrics_max_bytes' default below");

#define FIELD(f) .offset = offsetof(agg_config_t, f), .size = sizeof(((agg_config_t *)0)->f)
#define KEY(nm, ty, ...)                                                                           \
  { .section = "aggregator", .name = nm, .type = ty, __VA_ARGS__ }
#define WANT_PATH     .min = 1, .max = MAX_TEXT - 1, .want = "wants a path"
#define WANT_DURATION .bare_unit = EM_NS_PER_S, .flags = EM_SCHEMA_SECONDS
/* Every key of [aggregator]; each is also the command-line flag --KEY (with '-' for '_'). */
static const em_schema_key_t agg_keys[] = {
    KEY("broker", EM_SCHEMA_CUSTOM, FIELD(broker), .set = set_broker, .def = EM_BROKER_DEFAULT_URL,
        .example = "mqtt://127.0.0.1:1883"),
    KEY("share_group", EM_SCHEMA_CUSTOM, FIELD(share_group), .set = set_share_group,
        .example = "fleet"),
    KEY("client_id", EM_SCHEMA_STRING, FIELD(client_id), .want = "is too long",
        .example = "edgemon-aggregator"),
    KEY("db", EM_SCHEMA_STRING, FIELD(db), WANT_PATH, .def = "edgemon.db", .example = "edgemon.db"),
    KEY("http", EM_SCHEMA_CUSTOM, FIELD(http), .set = set_http, .def = "127.0.0.1:9108",
        .example = "127.0.0.1:9108"),
    KEY("tls_ca_file", EM_SCHEMA_STRING, FIELD(tls_ca_file), WANT_PATH, .example = "ca.crt"),
    KEY("tls_ca_path", EM_SCHEMA_STRING, FIELD(tls_ca_path), WANT_PATH,
        .example = "/etc/ssl/certs"),
    KEY("tls_cert_file", EM_SCHEMA_STRING, FIELD(tls_cert_file), WANT_PATH, .example = "agg.crt"),
    KEY("tls_key_file", EM_SCHEMA_STRING, FIELD(tls_key_file), WANT_PATH, .example = "agg.key"),
    KEY("tls_insecure", EM_SCHEMA_BOOL, FIELD(tls_insecure), .want = "wants true or false",
        .def = "false", .example = "false"),
    KEY("credentials_file", EM_SCHEMA_STRING, FIELD(credentials_file), WANT_PATH,
        .example = "/etc/edgemon/mqtt.credentials"),
    KEY("batch_ms", EM_SCHEMA_INT, FIELD(batch_ms), .min = 1, .max = 60000,
        .want = "wants 1 to 60000", .def = "500", .example = "500"),
    KEY("batch_rows", EM_SCHEMA_INT, FIELD(batch_rows), .min = 1, .max = 10000000,
        .want = "wants 1 to 10000000", .def = "5000", .example = "5000"),
    KEY("device_ttl", EM_SCHEMA_DURATION, FIELD(device_ttl_s), WANT_DURATION,
        .want = "wants a duration such as 30m, 24h or 7d (0: never)", .def = "24h",
        .example = "24h"),
    KEY("metrics_max_bytes", EM_SCHEMA_INT, FIELD(metrics_max_bytes), .min = 1u << 20,
        .max = 1u << 30, .want = "wants 1048576 to 1073741824 (bytes)", .def = "67108864",
        .example = "67108864"),
    KEY("retention", EM_SCHEMA_DURATION, FIELD(retention_s), WANT_DURATION,
        .want = "wants a duration such as 30s, 5m, 12h or 7d", .def = "7d", .example = "7d"),
    KEY("downsample_after", EM_SCHEMA_DURATION, FIELD(downsample_after_s), WANT_DURATION,
        .want = "wants a duration such as 30s, 5m, 12h or 7d", .def = "1d", .example = "1d"),
    KEY("downsample_step", EM_SCHEMA_DURATION, FIELD(downsample_step_s), WANT_DURATION,
        .min = EM_NS_PER_S, .max = UINT64_MAX,
        .want = "wants a duration of at least 1s, such as 30s, 5m or 1h", .def = "60s",
        .example = "60s"),
};
#undef KEY
#undef FIELD
#define N_AGG_KEYS (sizeof(agg_keys) / sizeof(agg_keys[0]))

/* Applies one key; returns NULL or what is wrong with the value (the key's name not included). */
static const char *set_key(agg_config_t *c, const char *key, const char *value, char *msg,
                           size_t cap) {
  const em_schema_key_t *k = em_schema_find(agg_keys, N_AGG_KEYS, "aggregator", key);
  if (k == NULL) {
    const char *hint = em_schema_suggest(agg_keys, N_AGG_KEYS, "aggregator", key);
    snprintf(msg, cap, "is not a key of [aggregator]%s%s%s", hint ? "; did you mean '" : "",
             hint ? hint : "", hint ? "'?" : "");
    return msg;
  }
  const char *why = NULL;
  if (k->set != NULL) {
    return k->set(&why, k, c, value) == 0 ? NULL : why;
  }
  if (em_schema_set(k, c, value, msg, cap) == 0) {
    return NULL;
  }
  /* "KEY 'VALUE' WANT": the caller prints its own "KEY 'VALUE'". */
  return k->want != NULL ? k->want : msg;
}

/* Fills the defaults of every row. */
static void config_defaults(agg_config_t *c) {
  memset(c, 0, sizeof(*c));
  (void)em_schema_defaults(agg_keys, N_AGG_KEYS, c, NULL);
  for (size_t i = 0; i < N_AGG_KEYS; i++) {
    const char *why = NULL;
    if (agg_keys[i].set != NULL && agg_keys[i].def != NULL) {
      (void)agg_keys[i].set(&why, &agg_keys[i], c, agg_keys[i].def);
    }
  }
}

/* The config file, read with common/'s INI line reader: every problem is printed as
 * FILE:LINE: message and counted. */
typedef struct {
  agg_config_t *cfg;
  const char *path;
  int errors;
} ini_ctx_t;

static int on_ini_pair(void *user, int line, const char *section, const char *name,
                       const char *value) {
  ini_ctx_t *x = user;
  if (!section) {
    return 0; /* After a malformed header, already reported. */
  }
  if (strcmp(section, "aggregator") != 0) {
    fprintf(stderr, "%s:%d: section [%s] is unknown (the aggregator reads [aggregator])\n", x->path,
            line, section);
    x->errors++;
    return 0;
  }
  char msg[EM_SCHEMA_MSG_MAX];
  const char *why = set_key(x->cfg, name, value, msg, sizeof(msg));
  if (why) {
    fprintf(stderr, "%s:%d: %s '%s' %s\n", x->path, line, name, value, why);
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
  if (em_store_add(a->store, in.device, in.agg->dev, &in.msg, clock_ns(CLOCK_REALTIME)) ==
      -EAGAIN) {
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
 * leave devices out (over its cap); ok otherwise. */
static em_http_health_t healthy(void *ctx, char *why, size_t why_cap) {
  agg_t *a = ctx;
  if (!atomic_load(&a->connected)) {
    snprintf(why, why_cap, "no MQTT session with the broker");
    return EM_HTTP_HEALTH_DOWN;
  }
  em_registry_lock(a->reg);
  bool truncated = a->reg->stats.metrics_truncated;
  uint64_t omitted = a->reg->stats.metrics_omitted;
  em_registry_unlock(a->reg);
  if (truncated) {
    snprintf(why, why_cap, "/metrics left %llu device(s) out (over --metrics-max-bytes)",
             (unsigned long long)omitted);
    return EM_HTTP_HEALTH_DEGRADED;
  }
  return EM_HTTP_HEALTH_OK;
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
  char cwd[MAX_TEXT] = "";
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
  }
  return 0;
}

/* Reads credentials_file and checks the TLS and login settings against the broker URL.
 * Returns 0, or -1 with the reason printed. */
static int security_check(agg_config_t *c) {
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
  static const struct option opts[] = {
      {"config", required_argument, NULL, 'c'},
      {"broker", required_argument, NULL, 'b'},
      {"share-group", required_argument, NULL, 'g'},
      {"client-id", required_argument, NULL, 'i'},
      {"db", required_argument, NULL, 'd'},
      {"http", required_argument, NULL, 'H'},
      {"batch-ms", required_argument, NULL, 'm'},
      {"batch-rows", required_argument, NULL, 'r'},
      {"retention", required_argument, NULL, 'R'},
      {"device-ttl", required_argument, NULL, 'L'},
      {"metrics-max-bytes", required_argument, NULL, 'M'},
      {"tls-ca-file", required_argument, NULL, 'A'},
      {"tls-ca-path", required_argument, NULL, 'P'},
      {"tls-cert-file", required_argument, NULL, 'T'},
      {"tls-key-file", required_argument, NULL, 'K'},
      {"tls-insecure", no_argument, NULL, 'I'},
      {"credentials-file", required_argument, NULL, 'U'},
      {"check", no_argument, NULL, 'k'},
      {"version", no_argument, NULL, 'V'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  static const char *const keys[128] = {
      ['b'] = "broker",        ['g'] = "share_group",
      ['i'] = "client_id",     ['d'] = "db",
      ['H'] = "http",          ['m'] = "batch_ms",
      ['r'] = "batch_rows",    ['R'] = "retention",
      ['A'] = "tls_ca_file",   ['P'] = "tls_ca_path",
      ['T'] = "tls_cert_file", ['K'] = "tls_key_file",
      ['I'] = "tls_insecure",  ['U'] = "credentials_file",
      ['L'] = "device_ttl",    ['M'] = "metrics_max_bytes",
  };
  static agg_t a;
  config_defaults(&a.cfg);
  const char *config = NULL;
  bool check = false;
  const char *flag_value[128] = {0};
  opterr = 0;
  for (;;) {
    int c = getopt_long(argc, argv, "", opts, NULL);
    if (c == -1) {
      break;
    }
    if (c == 'c') {
      config = optarg;
    } else if (c == 'k') {
      check = true;
    } else if (c == 'V') {
      printf("edgemon-aggregator %s\n", EM_VERSION);
      return 0;
    } else if (c == 'h') {
      usage(stdout);
      return 0;
    } else if (c == 'I') {
      flag_value[c] = "true"; /* --tls-insecure takes no value. */
    } else if (c > 0 && c < 128 && keys[c]) {
      flag_value[c] = optarg;
    } else {
      fprintf(stderr, "edgemon-aggregator: unknown option, or one missing its value: '%s'\n",
              argv[optind - 1]);
      usage(stderr);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "edgemon-aggregator: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  if (config) {
    ini_ctx_t x = {.cfg = &a.cfg, .path = config};
    FILE *f = fopen(config, "re");
    if (!f) {
      fprintf(stderr, "edgemon-aggregator: cannot read %s: %s\n", config, strerror(errno));
      return 2;
    }
    const em_ini_reader_t reader = {
        .file = config, .on_pair = on_ini_pair, .on_error = on_ini_error};
    int rc = em_ini_parse_file(f, &reader, &x);
    fclose(f);
    if (rc < 0) {
      fprintf(stderr, "edgemon-aggregator: cannot read %s: %s\n", config,
              rc == -EFBIG ? "larger than 1 MiB" : strerror(-rc));
      x.errors++;
    }
    if (x.errors > 0) {
      return 2;
    }
  }
  for (int c = 0; c < 128; c++) {
    char msg[EM_SCHEMA_MSG_MAX];
    const char *why =
        flag_value[c] ? set_key(&a.cfg, keys[c], flag_value[c], msg, sizeof(msg)) : NULL;
    if (why) {
      fprintf(stderr, "edgemon-aggregator: --%s '%s' %s\n", keys[c], flag_value[c], why);
      return 2;
    }
  }
  if (security_check(&a.cfg) != 0) {
    return 2;
  }
  if (!a.cfg.client_id[0]) {
    default_client_id(a.cfg.db, a.cfg.client_id, sizeof(a.cfg.client_id));
  }
  if (check) {
    printf("configuration ok: broker %s, db %s, http %s%s%s, client id %s\n", a.cfg.broker,
           a.cfg.db, a.cfg.http, a.cfg.share_group[0] ? ", share group " : "", a.cfg.share_group,
           a.cfg.client_id);
    return 0;
  }

  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  /* Past a file size limit (ulimit -f) a write fails with EFBIG, which the store reports as a
   * failed write (nothing acknowledged), instead of the signal killing the process. */
  signal(SIGXFSZ, SIG_IGN);

  int exit_code = 1;
  char err[512] = "";
  em_store_opts_t so = {.path = a.cfg.db,
                        .batch_ms = (uint32_t)a.cfg.batch_ms,
                        .batch_rows = (uint32_t)a.cfg.batch_rows,
                        .retention_s = a.cfg.retention_s,
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
  if (em_http_start(&a.http, a.cfg.http, a.reg, healthy, &a, err, sizeof(err)) != 0) {
    logf_("%s", err);
    goto out;
  }
  char host[MAX_TEXT];
  snprintf(host, sizeof(host), "%s", a.cfg.http);
  char *colon = strrchr(host, ':');
  if (colon) {
    *colon = '\0';
  }
  logf_("http: serving on http://%s:%u (/metrics, /api/devices, /healthz)", host,
        (unsigned)em_http_port(a.http));
  exit_code = run(&a);
  logf_("stopping");
out:
  em_http_stop(a.http);
  em_broker_free(a.broker);
  if (a.store && em_store_close(a.store) != 0) {
    logf_("store: the last batch could not be committed");
    exit_code = 1;
  }
  em_registry_free(a.reg);
  return exit_code;
}
