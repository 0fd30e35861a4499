/*
 * options.c - edgemon-aggregator's options (options.h): the rows of [aggregator],
 * [remote_write] and [remote_write.NAME], the setters of the keys whose value needs more than
 * its type, the command line built from the [aggregator] rows that are flags, and the usage
 * text written from the same rows.
 *
 * Owns nothing past a call; the tables are static const. Single-threaded.
 */
#define _POSIX_C_SOURCE 200809L
#include "options.h"

#include "edgemon/common/str.h"

#include <errno.h>
#include <getopt.h>
#include <string.h>

#define HELP_WIDTH  79 /* Usage lines end before this column. */
#define HELP_INDENT 23 /* Column of an option's description. */

/* ---- the rows ---------------------------------------------------------------------------- */

/* Keys whose value needs more than its type: each sets *why (a "wants ..." phrase, ctx is a
 * const char **) and returns -EINVAL, or stores the value. */
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

#define FIELD(f) .offset = offsetof(em_agg_config_t, f), .size = sizeof(((em_agg_config_t *)0)->f)
#define KEY(nm, ty, ...)                                                                           \
  { .section = EM_AGG_SECTION, .name = nm, .type = ty, __VA_ARGS__ }
/* Also the command-line flag --NAME ('-' for '_') taking a value shown as `word`. */
#define FLAG(word)    .flags = EM_SCHEMA_FLAG, .arg = word
#define WANT_PATH     .min = 1, .max = EM_AGG_TEXT_MAX - 1, .want = "wants a path"
#define WANT_DURATION .bare_unit = EM_NS_PER_S, .flags = EM_SCHEMA_SECONDS | EM_SCHEMA_FLAG
/* A per-device bound of a kind of forensic blob: at least one largest blob (256 KiB), 64 MiB
 * when not set. */
#define DEVICE_MAX_BYTES_KEY(nm, f, what)                                                          \
  KEY(nm, EM_SCHEMA_INT, FIELD(f), FLAG("N"), .min = 1u << 18, .max = 1ull << 40,                  \
      .want = "wants 262144 to 1099511627776 (bytes)", .def = "67108864", .example = "67108864",   \
      .doc = what " kept per device, in bytes of CBOR (at least 256 KiB); the oldest go first")
/* A total bound of a kind of forensic blob: at least one largest blob (256 KiB), 1 GiB when not
 * set (EM_FORENSICS_DEFAULT_TOTAL_MAX_BYTES). */
#define TOTAL_MAX_BYTES_KEY(nm, f, what)                                                           \
  KEY(nm, EM_SCHEMA_INT, FIELD(f), FLAG("N"), .min = 1u << 18, .max = 1ull << 50,                  \
      .want = "wants 262144 to 1125899906842624 (bytes)", .def = "1073741824",                     \
      .example = "1073741824",                                                                     \
      .doc = what " kept of all devices together, in bytes of CBOR (default 1 GiB, at least "      \
                  "256 KiB): the oldest received go first, whichever device sent them; /metrics "  \
                  "counts them (edgemon_aggregator_forensic_evicted_total{reason=global_cap}) "    \
                  "and /healthz shows the bytes kept of each bound")
/*
 * Every key of [aggregator], in the order --help lists them. A row with EM_SCHEMA_FLAG is also
 * the flag --KEY ('-' for '_'); its `arg` is its value's word (NULL: a flag without a value,
 * which sets the bool key true). docs/CONFIG.md lists every row (test_agg_options).
 */
static const em_schema_key_t agg_keys[] = {
    KEY("broker", EM_SCHEMA_CUSTOM, FIELD(broker), FLAG("URL"), .set = set_broker,
        .def = EM_BROKER_DEFAULT_URL, .example = "mqtt://127.0.0.1:1883",
        .doc = "mqtt://HOST[:PORT], or mqtts://HOST[:PORT] for TLS (port 8883)"),
    KEY("share_group", EM_SCHEMA_CUSTOM, FIELD(share_group), FLAG("NAME"), .set = set_share_group,
        .example = "fleet",
        .doc = "join this MQTT v5 share group (several aggregators split the data load); "
               "per-device loss is not computed then"),
    KEY("client_id", EM_SCHEMA_STRING, FIELD(client_id), FLAG("ID"), .want = "is too long",
        .example = "edgemon-aggregator",
        .doc = "MQTT client id of the persistent session (default: edgemon-aggregator-<host "
               "name>-<hash of the --db path>); a restart with the same id gets what the broker "
               "queued"),
    KEY("db", EM_SCHEMA_STRING, FIELD(db), FLAG("PATH"), WANT_PATH, .def = "edgemon.db",
        .example = "edgemon.db", .doc = "SQLite database"),
    KEY("http", EM_SCHEMA_CUSTOM, FIELD(http), FLAG("HOST:PORT"), .set = set_http,
        .def = "127.0.0.1:9108", .example = "127.0.0.1:9108",
        .doc = "where to serve HTTP (port 0: any)"),
    KEY("batch_ms", EM_SCHEMA_INT, FIELD(batch_ms), FLAG("N"), .min = 1, .max = 60000,
        .want = "wants 1 to 60000", .def = "500", .example = "500",
        .doc = "commit at least every N ms"),
    KEY("batch_rows", EM_SCHEMA_INT, FIELD(batch_rows), FLAG("N"), .min = 1, .max = 10000000,
        .want = "wants 1 to 10000000", .def = "5000", .example = "5000",
        .doc = "... or every N rows; a QoS 1 message is acknowledged to the broker only once its "
               "rows are committed (each burst the broker delivers is committed at once), so a "
               "crash loses none: the broker sends it again"),
    KEY("retention", EM_SCHEMA_DURATION, FIELD(retention_s), WANT_DURATION, .arg = "D",
        .want = "wants a duration such as 30s, 5m, 12h or 7d", .def = "7d", .example = "7d",
        .doc = "delete history older than D (e.g. 7d, 12h, or 0: keep all); older samples "
               "are averaged first (downsample_after, downsample_step below)"),
    KEY("device_ttl", EM_SCHEMA_DURATION, FIELD(device_ttl_s), WANT_DURATION, .arg = "D",
        .want = "wants a duration such as 30m, 24h or 7d (0: never)", .def = "24h",
        .example = "24h",
        .doc = "forget a device (in memory: /metrics, /api) after D without a message from it "
               "(0 never); its history stays"),
    KEY("metrics_max_bytes", EM_SCHEMA_INT, FIELD(metrics_max_bytes), FLAG("N"), .min = 1u << 20,
        .max = 1u << 30, .want = "wants 1048576 to 1073741824 (bytes)", .def = "67108864",
        .example = "67108864",
        .doc = "cap of /metrics in either format (at least 1 MiB); past it /metrics leaves "
               "devices out and /healthz says so"),
    DEVICE_MAX_BYTES_KEY("flight_max_bytes", flight_max_bytes, "flight recordings"),
    DEVICE_MAX_BYTES_KEY("profile_max_bytes", profile_max_bytes, "stack profiles"),
    TOTAL_MAX_BYTES_KEY("flight_total_max_bytes", flight_total_max_bytes, "flight recordings"),
    TOTAL_MAX_BYTES_KEY("profile_total_max_bytes", profile_total_max_bytes, "stack profiles"),
    KEY("api_workers", EM_SCHEMA_INT, FIELD(api_workers), FLAG("N"), .min = 1, .max = 64,
        .want = "wants 1 to 64", .def = "4", .example = "4",
        .doc = "queries of the store the JSON API runs at once, each on a thread with read "
               "connections of its own (1 to 64); as many more wait, the rest get 503 with "
               "Retry-After; /healthz and /metrics never wait for them"),
    KEY("tls_ca_file", EM_SCHEMA_STRING, FIELD(tls_ca_file), FLAG("FILE"), WANT_PATH,
        .example = "ca.crt", .doc = "mqtts://: CA certificates (PEM) that verify the broker"),
    KEY("tls_ca_path", EM_SCHEMA_STRING, FIELD(tls_ca_path), FLAG("DIR"), WANT_PATH,
        .example = "/etc/ssl/certs",
        .doc = "mqtts://: a directory of CA certificates (c_rehash); with neither, the system's "
               "CA certificates"),
    KEY("tls_cert_file", EM_SCHEMA_STRING, FIELD(tls_cert_file), FLAG("FILE"), WANT_PATH,
        .example = "agg.crt", .doc = "mqtts://: client certificate (PEM), with --tls-key-file"),
    KEY("tls_key_file", EM_SCHEMA_STRING, FIELD(tls_key_file), FLAG("FILE"), WANT_PATH,
        .example = "agg.key", .doc = "mqtts://: its private key (PEM, not encrypted)"),
    KEY("tls_insecure", EM_SCHEMA_BOOL, FIELD(tls_insecure), FLAG(NULL),
        .want = "wants true or false", .def = "false", .example = "false",
        .doc = "mqtts://: do not match the broker's host name with its certificate (testing "
               "only); in the file: tls_insecure = true"),
    KEY("credentials_file", EM_SCHEMA_STRING, FIELD(credentials_file), FLAG("FILE"), WANT_PATH,
        .example = "/etc/edgemon/mqtt.credentials",
        .doc = "MQTT username and password: lines 'username = NAME' and 'password = SECRET', as "
               "the agent's credentials_file; refused when group or others can access it "
               "(chmod 600)"),
    KEY("downsample_after", EM_SCHEMA_DURATION, FIELD(downsample_after_s), .bare_unit = EM_NS_PER_S,
        .flags = EM_SCHEMA_SECONDS, .want = "wants a duration such as 30s, 5m, 12h or 7d",
        .def = "1d", .example = "1d",
        .doc = "samples older than this are averaged to one per downsample_step"),
    KEY("downsample_step", EM_SCHEMA_DURATION, FIELD(downsample_step_s), .bare_unit = EM_NS_PER_S,
        .flags = EM_SCHEMA_SECONDS, .min = EM_NS_PER_S, .max = UINT64_MAX,
        .want = "wants a duration of at least 1s, such as 30s, 5m or 1h", .def = "60s",
        .example = "60s", .doc = "the step of downsampled samples"),
};
#undef KEY
#undef TOTAL_MAX_BYTES_KEY
#define N_AGG_KEYS (sizeof(agg_keys) / sizeof(agg_keys[0]))
_Static_assert(N_AGG_KEYS <= EM_AGG_MAX_FLAGS, "em_agg_args_t has a value per row");

/* Every key of [remote_write] (config file only): what all endpoints share. */
#define KEY(nm, ty, ...)                                                                           \
  { .section = EM_AGG_SECTION_RW, .name = nm, .type = ty, __VA_ARGS__ }
static const em_schema_key_t rw_keys[] = {
    KEY("interval", EM_SCHEMA_DURATION, FIELD(rw_interval_ns), .bare_unit = EM_NS_PER_S,
        .min = EM_NS_PER_S, .max = 3600 * EM_NS_PER_S,
        .want = "wants a duration from 1s to 1h, such as 15s", .def = "15s", .example = "15s",
        .doc = "how often the series are pushed"),
    KEY("aggregator", EM_SCHEMA_ID, FIELD(rw_label), .example = "agg-1",
        .want = "wants 1 to 63 characters of A-Z a-z 0-9 _ . : -",
        .doc = "the value of the aggregator label on every series (default the client id)"),
    KEY("batch_series", EM_SCHEMA_INT, FIELD(rw_batch_series), .min = 1, .max = 100000,
        .want = "wants 1 to 100000 (series per request)", .def = "2000", .example = "2000",
        .doc = "a request is sealed at this many series"),
    KEY("max_request_bytes", EM_SCHEMA_SIZE, FIELD(rw_max_request_bytes), .bare_unit = 1,
        .min = 64u << 10, .max = 64u << 20, .want = "wants 64KiB to 64MiB", .def = "4MiB",
        .example = "4MiB", .doc = "cap of one request before compression"),
    KEY("backoff_min", EM_SCHEMA_DURATION, FIELD(rw_backoff_min_ns), .bare_unit = EM_NS_PER_S,
        .min = EM_NS_PER_MS, .max = 60 * EM_NS_PER_S, .want = "wants a duration from 1ms to 60s",
        .def = "100ms", .example = "100ms", .doc = "first retry delay"),
    KEY("backoff_max", EM_SCHEMA_DURATION, FIELD(rw_backoff_max_ns), .bare_unit = EM_NS_PER_S,
        .min = EM_NS_PER_MS, .max = 600 * EM_NS_PER_S, .want = "wants a duration from 1ms to 10m",
        .def = "5s", .example = "5s", .doc = "longest retry delay"),
    KEY("drain", EM_SCHEMA_DURATION, FIELD(rw_drain_ns), .bare_unit = EM_NS_PER_S,
        .flags = EM_SCHEMA_ZERO, .max = 600 * EM_NS_PER_S,
        .want = "wants a duration up to 10m (0: do not wait)", .def = "5s", .example = "5s",
        .doc = "at stop, how long queued requests may still be delivered"),
};
#undef KEY
#undef FIELD
#define N_RW_KEYS (sizeof(rw_keys) / sizeof(rw_keys[0]))

/* Every key of a [remote_write.NAME] section: one endpoint. */
#define FIELD(f)                                                                                   \
  .offset = offsetof(em_agg_endpoint_t, f), .size = sizeof(((em_agg_endpoint_t *)0)->f)
#define KEY(nm, ty, ...)                                                                           \
  { .section = EM_AGG_SECTION_ENDPOINT, .name = nm, .type = ty, __VA_ARGS__ }
static const em_schema_key_t rw_endpoint_keys[] = {
    KEY("url", EM_SCHEMA_STRING, FIELD(url), .min = 1, .max = EM_AGG_TEXT_MAX - 1,
        .want = "wants http(s)://HOST[:PORT]/PATH", .example = "http://127.0.0.1:9090/api/v1/write",
        .doc = "the receiver's write endpoint"),
    KEY("ca_file", EM_SCHEMA_STRING, FIELD(ca_file), WANT_PATH, .example = "ca.crt",
        .doc = "PEM bundle to verify an https:// receiver with"),
    KEY("insecure", EM_SCHEMA_BOOL, FIELD(insecure), .want = "wants true or false", .def = "false",
        .example = "false", .doc = "https://: skip certificate and host name checks"),
    KEY("username", EM_SCHEMA_STRING, FIELD(username), .min = 1,
        .max = EM_CREDENTIALS_MAX_SECRET - 1, .want = "wants 1 to 127 characters",
        .example = "edgemon", .doc = "basic auth, with password_file"),
    KEY("password_file", EM_SCHEMA_STRING, FIELD(password_file), WANT_PATH,
        .example = "/etc/edgemon/rw.password", .doc = "basic auth's password, a private file"),
    KEY("bearer_token_file", EM_SCHEMA_STRING, FIELD(bearer_token_file), WANT_PATH,
        .example = "/etc/edgemon/rw.token", .doc = "Authorization: Bearer, a private file"),
    KEY("timeout", EM_SCHEMA_DURATION, FIELD(timeout_ns), .bare_unit = EM_NS_PER_S,
        .min = 100 * EM_NS_PER_MS, .max = 600 * EM_NS_PER_S,
        .want = "wants a duration from 100ms to 10m", .def = "10s", .example = "10s",
        .doc = "a whole request"),
    KEY("queue_requests", EM_SCHEMA_INT, FIELD(queue_requests), .min = 1,
        .max = EM_REMOTE_MAX_QUEUE_REQUESTS, .want = "wants 1 to 4096 (requests)", .def = "64",
        .example = "64", .doc = "sealed requests queued for this endpoint"),
};
#undef KEY
#undef FIELD
#undef FLAG
#undef WANT_PATH
#undef WANT_DURATION
#define N_RW_ENDPOINT_KEYS (sizeof(rw_endpoint_keys) / sizeof(rw_endpoint_keys[0]))

/* batch_series is 2000, not remote.h's 500: a push seals its whole fleet at once, and 1000
 * devices are ~45k series: 23 requests of 2000 (~0.5 MB each before snappy) fit a queue of 64
 * several pushes over, where 90 requests of 500 overflowed it (measured: 118 of 562 requests
 * dropped at 1000 devices and a 2 s interval). */
_Static_assert(EM_REMOTE_DEFAULT_QUEUE_REQUESTS == 64u && EM_REMOTE_DEFAULT_TIMEOUT_MS == 10000u &&
                   EM_REMOTE_DEFAULT_MAX_BYTES == (4u << 20) &&
                   EM_REMOTE_DEFAULT_BACKOFF_MIN_MS == 100u &&
                   EM_REMOTE_DEFAULT_BACKOFF_MAX_MS == 5000u,
               "the remote write defaults above");

const em_schema_key_t *em_agg_options_schema(const char *section, size_t *n) {
  static const struct {
    const char *section;
    const em_schema_key_t *rows;
    size_t n;
  } tables[] = {{EM_AGG_SECTION, agg_keys, N_AGG_KEYS},
                {EM_AGG_SECTION_RW, rw_keys, N_RW_KEYS},
                {EM_AGG_SECTION_ENDPOINT, rw_endpoint_keys, N_RW_ENDPOINT_KEYS}};
  for (size_t i = 0; section != NULL && i < sizeof(tables) / sizeof(tables[0]); i++) {
    if (strcmp(section, tables[i].section) == 0) {
      if (n != NULL) {
        *n = tables[i].n;
      }
      return tables[i].rows;
    }
  }
  if (n != NULL) {
    *n = 0;
  }
  return NULL;
}

/* ---- values ------------------------------------------------------------------------------ */

void em_agg_options_defaults(em_agg_config_t *c) {
  memset(c, 0, sizeof(*c));
  const char *why = NULL; /* The rows' own setters' context; their defaults are valid. */
  (void)em_schema_defaults(agg_keys, N_AGG_KEYS, c, &why, NULL);
  (void)em_schema_defaults(rw_keys, N_RW_KEYS, c, &why, NULL);
}

void em_agg_options_endpoint_defaults(em_agg_endpoint_t *e) {
  memset(e, 0, sizeof(*e));
  const char *why = NULL;
  (void)em_schema_defaults(rw_endpoint_keys, N_RW_ENDPOINT_KEYS, e, &why, NULL);
}

const char *em_agg_options_set(const char *section, const char *shown, void *obj, const char *key,
                               const char *value, char *msg, size_t cap) {
  size_t n = 0;
  const em_schema_key_t *table = em_agg_options_schema(section, &n);
  const em_schema_key_t *k = em_schema_find(table, n, section, key);
  if (k == NULL) {
    const char *hint = em_schema_suggest(table, n, section, key);
    snprintf(msg, cap, "is not a key of [%s]%s%s%s", shown, hint ? "; did you mean '" : "",
             hint ? hint : "", hint ? "'?" : "");
    return msg;
  }
  const char *why = NULL;
  if (k->set != NULL) {
    return k->set(&why, k, obj, value) == 0 ? NULL : why;
  }
  if (em_schema_set(k, obj, value, msg, cap) == 0) {
    return NULL;
  }
  /* "KEY 'VALUE' WANT": the caller prints its own "KEY 'VALUE'". */
  return k->want != NULL ? k->want : msg;
}

/* ---- the command line -------------------------------------------------------------------- */

/* The options that are no key: getopt_long's values for them, past any row's index. */
enum { OPT_CONFIG = EM_AGG_MAX_FLAGS, OPT_CHECK, OPT_VERSION, OPT_HELP };

/* The flags of the rows; room for every row and the options above, and the terminator. */
typedef struct {
  char names[N_AGG_KEYS][48];
  struct option opts[N_AGG_KEYS + 5];
} flag_table_t;

static void build_flags(flag_table_t *t) {
  size_t n = 0;
  for (size_t i = 0; i < N_AGG_KEYS; i++) {
    const em_schema_key_t *k = &agg_keys[i];
    if (em_schema_flag(k, t->names[i], sizeof(t->names[i])) == NULL) {
      continue;
    }
    t->opts[n++] =
        (struct option){t->names[i] + 2, k->arg ? required_argument : no_argument, NULL, (int)i};
  }
  t->opts[n++] = (struct option){"config", required_argument, NULL, OPT_CONFIG};
  t->opts[n++] = (struct option){"check", no_argument, NULL, OPT_CHECK};
  t->opts[n++] = (struct option){"version", no_argument, NULL, OPT_VERSION};
  t->opts[n++] = (struct option){"help", no_argument, NULL, OPT_HELP};
  t->opts[n] = (struct option){NULL, 0, NULL, 0};
}

em_agg_args_result_t em_agg_options_parse_args(int argc, char **argv, const char *version,
                                               em_agg_args_t *args) {
  static flag_table_t t; /* Large; one parse per process. */
  memset(args, 0, sizeof(*args));
  memset(&t, 0, sizeof(t));
  build_flags(&t);
  opterr = 0;
  optind = 1;
  for (;;) {
    int c = getopt_long(argc, argv, "", t.opts, NULL);
    if (c == -1) {
      break;
    }
    if (c == OPT_CONFIG) {
      args->config = optarg;
    } else if (c == OPT_CHECK) {
      args->check = true;
    } else if (c == OPT_VERSION) {
      printf("edgemon-aggregator %s\n", version);
      return EM_AGG_ARGS_DONE;
    } else if (c == OPT_HELP) {
      em_agg_options_usage(stdout);
      return EM_AGG_ARGS_DONE;
    } else if (c >= 0 && (size_t)c < N_AGG_KEYS) {
      args->value[c] = agg_keys[c].arg != NULL ? optarg : "true";
    } else {
      fprintf(stderr, "edgemon-aggregator: unknown option, or one missing its value: '%s'\n",
              argv[optind - 1]);
      em_agg_options_usage(stderr);
      return EM_AGG_ARGS_BAD;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "edgemon-aggregator: unexpected argument '%s'\n", argv[optind]);
    return EM_AGG_ARGS_BAD;
  }
  return EM_AGG_ARGS_RUN;
}

int em_agg_options_apply_args(const em_agg_args_t *args, em_agg_config_t *c) {
  for (size_t i = 0; i < N_AGG_KEYS; i++) {
    if (args->value[i] == NULL) {
      continue;
    }
    char msg[EM_SCHEMA_MSG_MAX];
    const char *why = em_agg_options_set(EM_AGG_SECTION, EM_AGG_SECTION, c, agg_keys[i].name,
                                         args->value[i], msg, sizeof(msg));
    if (why != NULL) { /* Named as always: "--KEY", the file's spelling. */
      fprintf(stderr, "edgemon-aggregator: --%s '%s' %s\n", agg_keys[i].name, args->value[i], why);
      return -EINVAL;
    }
  }
  return 0;
}

/* ---- the usage text ---------------------------------------------------------------------- */

/*
 * Writes `text` wrapped before HELP_WIDTH: its first line after `col` columns already written
 * on the current line, the others indented to `indent`.
 */
static void wrap(FILE *out, size_t col, size_t indent, const char *text) {
  const char *p = text;
  bool first = true;
  while (*p != '\0') {
    size_t len = strcspn(p, " ");
    if (!first && col + 1 + len >= HELP_WIDTH) {
      fprintf(out, "\n%*s", (int)indent, "");
      col = indent;
      first = true;
    }
    fprintf(out, "%s%.*s", first ? "" : " ", (int)len, p);
    col += len + (first ? 0 : 1);
    first = false;
    p += len;
    while (*p == ' ') {
      p++;
    }
  }
  fputc('\n', out);
}

/* One option: "  --flag ARG" and its description (with the row's default after its first
 * clause, unless the text already says it) from column HELP_INDENT, or on the next line when
 * the flag is long. */
static void option_line(FILE *out, const char *left, const char *doc, const char *def) {
  char text[1024];
  size_t head = strcspn(doc, ";"); /* The default follows the first clause. */
  if (def == NULL || strstr(doc, "default") != NULL) {
    snprintf(text, sizeof(text), "%s", doc);
  } else {
    snprintf(text, sizeof(text), "%.*s (default %s)%s", (int)head, doc, def, doc + head);
  }
  int col = fprintf(out, "  %s", left);
  if (col + 1 >= HELP_INDENT) {
    fprintf(out, "\n%*s", HELP_INDENT, "");
    col = HELP_INDENT;
  } else {
    fprintf(out, "%*s", HELP_INDENT - col, "");
    col = HELP_INDENT;
  }
  wrap(out, (size_t)col, HELP_INDENT, text);
}

/* The names of a table's rows, "a, b, c". */
static void list_names(char *out, size_t cap, const em_schema_key_t *rows, size_t n) {
  size_t used = 0;
  out[0] = '\0';
  for (size_t i = 0; i < n; i++) {
    int w = snprintf(out + used, cap - used, "%s%s", i > 0 ? ", " : "", rows[i].name);
    if (w < 0 || (size_t)w >= cap - used) {
      break;
    }
    used += (size_t)w;
  }
}

void em_agg_options_usage(FILE *out) {
  char line[2048];
  char left[64];
  char flag[48];
  /* The synopsis: every flag, then the options that are no key. */
  size_t used = 0;
  for (size_t i = 0; i < N_AGG_KEYS; i++) {
    if (em_schema_flag(&agg_keys[i], flag, sizeof(flag)) != NULL) {
      int w = snprintf(line + used, sizeof(line) - used, "[%s%s%s] ", flag,
                       agg_keys[i].arg ? " " : "", agg_keys[i].arg ? agg_keys[i].arg : "");
      used += w > 0 && (size_t)w < sizeof(line) - used ? (size_t)w : 0;
    }
  }
  snprintf(line + used, sizeof(line) - used, "[--check] [--version] [--help]");
  fprintf(out, "usage: edgemon-aggregator [--config FILE] ");
  wrap(out, 43, 26, line);
  fprintf(out,
          "\n"
          "Subscribes to edgemon/v1/+/# (or, with --share-group, shares the data messages with\n"
          "the other members of the group through $share/NAME/edgemon/v1/+/data), keeps every\n"
          "device's history in SQLite (host/aggregator/store/SCHEMA.md) and serves /metrics\n"
          "(Prometheus text, or protobuf with native histograms to a scraper that asks for it),\n"
          "the fleet dashboard at /ui/, its JSON API (/api/fleet, /api/devices/<id>/history,\n"
          "/api/latency, /api/devices/<id>/flights, /api/devices/<id>/profiles:\n"
          "host/README.md), /api/devices, /api/devices/<id> and /healthz.\n"
          "\n");
  option_line(out, "--config FILE",
              "INI file: its [aggregator] section takes every option below as a key, with '_' "
              "for '-' (share_group, batch_ms, ...), and the keys of the file only listed after "
              "them; flags win over it",
              NULL);
  for (size_t i = 0; i < N_AGG_KEYS; i++) {
    const em_schema_key_t *k = &agg_keys[i];
    if (em_schema_flag(k, flag, sizeof(flag)) != NULL) {
      snprintf(left, sizeof(left), "%s%s%s", flag, k->arg ? " " : "", k->arg ? k->arg : "");
      option_line(out, left, k->doc, k->arg ? k->def : NULL);
    }
  }
  option_line(out, "--check", "validate the configuration and exit", NULL);
  option_line(out, "--version", "print the version and exit", NULL);
  option_line(out, "--help", "print this text and exit", NULL);
  fprintf(out, "\nConfig file only, in [aggregator]:\n");
  for (size_t i = 0; i < N_AGG_KEYS; i++) {
    const em_schema_key_t *k = &agg_keys[i];
    if (!(k->flags & EM_SCHEMA_FLAG)) {
      snprintf(left, sizeof(left), "%s = %s", k->name, k->example);
      option_line(out, left, k->doc, k->def);
    }
  }
  char endpoint[512];
  char shared[512];
  list_names(endpoint, sizeof(endpoint), rw_endpoint_keys, N_RW_ENDPOINT_KEYS);
  list_names(shared, sizeof(shared), rw_keys, N_RW_KEYS);
  snprintf(line, sizeof(line),
           "Remote write (config file only; docs/CONFIG.md): [remote_write.NAME] sections, one "
           "per endpoint (%s), and [remote_write] for what they share (%s). Every interval the "
           "same families as /metrics (stage latencies as native histograms) go to every "
           "endpoint; /metrics shows each endpoint's health "
           "(edgemon_aggregator_remote_write_*{endpoint}).",
           endpoint, shared);
  fputc('\n', out);
  wrap(out, 0, 0, line);
  fprintf(out, "\n"
               "Exit: 0 after SIGTERM/SIGINT (the last batch committed, the store closed); 1 a\n"
               "runtime failure (database, HTTP address); 2 bad configuration or arguments.\n");
}
