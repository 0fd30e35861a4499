/*
 * broker.c - a blocking MQTT session for the host tools (see broker.h).
 *
 * libmosquitto is driven from the caller's thread; nothing here starts a thread. The session's
 * state is three flags and two counters the callbacks update:
 *
 *   connecting --CONNACK ok--> connected --network error / disconnect--> lost
 *        |                                                                 ^
 *        +--------- refused, error or timeout (em_broker_connect fails) ---+
 *
 * em_broker_sync() relies on MQTT's ordering: the broker queues the retained messages of a
 * subscription when it handles the SUBSCRIBE, so a message published by this session after
 * the SUBACK, on a topic it subscribed to, reaches it after all of them. The marker topic is
 * edgemon/v1/~sync/cmd/<client id>, one that the broker's ACL lets the host both read and write
 * (firmware/mosquitto/edgemon.acl: read edgemon/v1/#, write edgemon/v1/+/cmd/#; mosquitto
 * applies an ACL to deliveries rather than refusing the SUBSCRIBE, so a topic outside it would
 * just never come back). '~' is not allowed in a device id, so no agent listens there, and the
 * host tools skip cmd/ topics.
 *
 * TLS (mqtts://) is libmosquitto's: the handshake runs inside mosquitto_loop_read/write() while
 * connecting, and OpenSSL's reason for a failure reaches us only through libmosquitto's log
 * callback, which keeps the last error line for the message.
 *
 * Two ways to turn the loop (loop_once()):
 *  - Default: mosquitto_loop(). libmosquitto 2.0 answers an incoming QoS 1 PUBLISH by queueing
 *    its PUBACK *before* it calls on_message, and a client that is not "threaded" writes a
 *    queued packet at once: the broker has its acknowledgement before the message is handled.
 *  - before_ack (acknowledge after): the handle is marked threaded (mosquitto_threaded_set), so
 *    libmosquitto only queues packets, and drive() does what mosquitto_loop() does in an order
 *    of its own: poll the socket; read a burst with mosquitto_loop_read() until the socket has
 *    nothing more or ack_burst_max messages came (read_burst()); when one was QoS > 0, call
 *    before_ack(); only then mosquitto_loop_misc() (keepalive: PINGREQ queued) and
 *    mosquitto_loop_write() (PUBACKs, PINGREQ, publishes, TLS records). mosquitto_loop() is
 *    never called in this mode: it also writes whatever a callback queued during its read
 *    (the threaded handle's wake-up pipe fills and keeps telling it to), i.e. before the hook.
 *    A refusing hook marks the session lost without writing (drop()); freeing the handle
 *    closes the socket, and the broker resends the unacknowledged messages to the session's
 *    next connection.
 *
 *      read burst --no QoS>0 message--> misc, write --> poll
 *          |                                 ^
 *          +--QoS>0--> before_ack() --0------+
 *                           \--<0--> drop(): lost, nothing written
 */
#define _POSIX_C_SOURCE 200809L
#include "broker.h"

#include <errno.h>
#include <fcntl.h>
#include <mosquitto.h>
#include <mqtt_protocol.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct em_broker {
  struct mosquitto *mosq;
  em_broker_msg_fn on_message;
  void *ctx;
  char client_id[64];
  char sync_topic[96];
  bool connected;
  bool lost;
  int connack_rc; /* -1 until CONNACK. */
  int sub_mid;    /* mid of the subscribe em_broker_subscribe() waits for. */
  int sub_result; /* 1 while waiting, 0 granted, -EPERM refused. */
  bool sync_subscribed;
  uint32_t sync_sent; /* Markers published ... */
  uint32_t sync_seen; /* ... and received back. */
  uint64_t in_flight; /* QoS 1 publishes not yet acknowledged. */
  uint64_t received;
  int (*before_ack)(void *ctx); /* NULL: libmosquitto acknowledges as it reads. */
  unsigned ack_burst_max;       /* Messages per read burst at most (before_ack set). */
  unsigned burst;               /* Messages delivered in the current burst. */
  bool ack_due;                 /* A message of the burst wants an acknowledgement. */
  int ack_refused;              /* before_ack()'s errno once it refused, else 0. */
  char last_log_error[256];     /* libmosquitto's last error line (OpenSSL's reason), "" if none. */
};

static uint64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int em_broker_parse_url(const char *url, em_broker_url_t *out, char *err, size_t err_cap) {
  const char *why = NULL;
  if (em_parse_mqtt_url(url, out, &why) == 0) {
    return 0;
  }
  if (err && err_cap > 0) {
    snprintf(err, err_cap, "broker URL '%s' %s", url ? url : "", why);
  }
  return -EINVAL;
}

static bool given(const char *s) {
  return s && *s;
}

/* Sets err to "what 'path' cannot be read: reason" when path is given and unreadable. */
static bool readable(const char *what, const char *path, char *err, size_t err_cap) {
  if (!given(path) || access(path, R_OK) == 0) {
    return true;
  }
  if (err && err_cap > 0) {
    snprintf(err, err_cap, "%s '%s' cannot be read: %s", what, path, strerror(errno));
  }
  return false;
}

int em_broker_check_opts(const em_broker_url_t *url, const em_broker_opts_t *o, char *err,
                         size_t err_cap) {
  const char *why = NULL;
  if (!url || !o) {
    return 0;
  }
  bool any_tls = given(o->tls_ca_file) || given(o->tls_ca_path) || given(o->tls_cert_file) ||
                 given(o->tls_key_file) || o->tls_insecure;
  if (any_tls && !url->tls) {
    why = "TLS options are set but the broker URL is not TLS; use mqtts://HOST[:PORT]";
  } else if (given(o->tls_cert_file) != given(o->tls_key_file)) {
    why = given(o->tls_cert_file) ? "a client certificate needs its private key (key file)"
                                  : "a private key needs its client certificate (cert file)";
  } else if (given(o->password) && !given(o->username)) {
    why = "a password needs a username";
  }
  if (why) {
    if (err && err_cap > 0) {
      snprintf(err, err_cap, "%s", why);
    }
    return -EINVAL;
  }
  if (!readable("CA file", o->tls_ca_file, err, err_cap) ||
      !readable("CA directory", o->tls_ca_path, err, err_cap) ||
      !readable("client certificate", o->tls_cert_file, err, err_cap) ||
      !readable("private key", o->tls_key_file, err, err_cap)) {
    return -EINVAL;
  }
  return 0;
}

/* ---- credentials file ------------------------------------------------------------------- */

/* Where em_credentials_read()'s problems go: the first one, as a sentence naming the file. */
typedef struct {
  const char *path;
  char *err;
  size_t err_cap;
  bool set;
} cred_err_t;

static void on_cred_error(void *ctx, int line, const char *msg) {
  cred_err_t *e = ctx;
  (void)line; /* The message names the file's line itself. */
  if (!e->set && e->err && e->err_cap > 0) {
    snprintf(e->err, e->err_cap, "credentials file '%s' %s", e->path, msg);
    e->set = true;
  }
}

int em_broker_read_credentials(const char *path, em_broker_credentials_t *out, char *err,
                               size_t err_cap) {
  if (err && err_cap > 0) {
    err[0] = '\0';
  }
  if (!path || !out) {
    if (err && err_cap > 0) {
      snprintf(err, err_cap, "no credentials file");
    }
    if (out) {
      memset(out, 0, sizeof(*out));
    }
    return -EINVAL;
  }
  cred_err_t e = {.path = path, .err = err, .err_cap = err_cap, .set = false};
  return em_credentials_read(path, NULL, out, on_cred_error, &e);
}

/* ---- session ---------------------------------------------------------------------------- */

static void on_log(struct mosquitto *mosq, void *obj, int level, const char *line) {
  (void)mosq;
  em_broker_t *b = obj;
  if (level == MOSQ_LOG_ERR && line) {
    snprintf(b->last_log_error, sizeof(b->last_log_error), "%s", line);
  }
}

static void on_connect(struct mosquitto *mosq, void *obj, int rc) {
  (void)mosq;
  em_broker_t *b = obj;
  b->connack_rc = rc;
  b->connected = rc == 0;
}

static void on_disconnect(struct mosquitto *mosq, void *obj, int rc) {
  (void)mosq;
  (void)rc;
  em_broker_t *b = obj;
  b->connected = false;
  b->lost = true;
}

static void on_subscribe(struct mosquitto *mosq, void *obj, int mid, int qos_count,
                         const int *granted) {
  (void)mosq;
  em_broker_t *b = obj;
  if (mid != b->sub_mid) {
    return;
  }
  b->sub_result = (qos_count < 1 || granted[0] > 2) ? -EPERM : 0;
}

static void on_publish(struct mosquitto *mosq, void *obj, int mid) {
  (void)mosq;
  (void)mid;
  em_broker_t *b = obj;
  if (b->in_flight > 0) {
    b->in_flight--;
  }
}

static void on_message(struct mosquitto *mosq, void *obj, const struct mosquitto_message *m) {
  (void)mosq;
  em_broker_t *b = obj;
  b->burst++;
  if (m->qos > 0) {
    b->ack_due = true;
  }
  if (!m->topic) {
    return;
  }
  if (b->sync_subscribed && strcmp(m->topic, b->sync_topic) == 0) {
    uint32_t n = 0;
    if (m->payloadlen == (int)sizeof(n)) {
      memcpy(&n, m->payload, sizeof(n));
      b->sync_seen = n;
    }
    return;
  }
  b->received++;
  if (b->on_message) {
    b->on_message(b->ctx, m->topic, m->payload, (size_t)(m->payloadlen > 0 ? m->payloadlen : 0),
                  m->retain);
  }
}

/*
 * The CONNECT properties of an MQTT v5 session: the largest packet it takes (max_packet_bytes),
 * and, when it is persistent and v5 only for that limit, a session expiry interval that never
 * ends, so the session is kept as in v3.1.1 (v5 ends a session at disconnect by default; an
 * mqtt5 session, a share group's, stays unkept: the group's other members take its messages).
 * libmosquitto takes CONNECT properties only in mosquitto_connect_bind_v5(), which connects
 * blocking; it stores them before it looks at the host, so a call without a host stores them
 * (answering MOSQ_ERR_INVAL) and the asynchronous connect after it sends them, as every reconnect
 * does. Returns a libmosquitto code.
 */
static int set_connect_properties(em_broker_t *b, const em_broker_opts_t *o) {
  mosquitto_property *props = NULL;
  int rc = MOSQ_ERR_SUCCESS;
  if (o->max_packet_bytes > 0) {
    rc = mosquitto_property_add_int32(&props, MQTT_PROP_MAXIMUM_PACKET_SIZE, o->max_packet_bytes);
  }
  if (rc == MOSQ_ERR_SUCCESS && o->persistent && !o->mqtt5) {
    rc = mosquitto_property_add_int32(&props, MQTT_PROP_SESSION_EXPIRY_INTERVAL, UINT32_MAX);
  }
  if (rc == MOSQ_ERR_SUCCESS && props) {
    rc = mosquitto_connect_bind_v5(b->mosq, NULL, 0, 0, NULL, props);
    rc = rc == MOSQ_ERR_INVAL ? MOSQ_ERR_SUCCESS : rc;
  }
  mosquitto_property_free_all(&props);
  return rc;
}

/* Maps a libmosquitto result to a negative errno. */
static int mosq_errno(int rc) {
  switch (rc) {
  case MOSQ_ERR_SUCCESS:
    return 0;
  case MOSQ_ERR_NOMEM:
    return -ENOMEM;
  case MOSQ_ERR_INVAL:
  case MOSQ_ERR_PAYLOAD_SIZE:
  case MOSQ_ERR_MALFORMED_UTF8:
    return -EINVAL;
  case MOSQ_ERR_ERRNO:
    return errno == 0 ? -EIO : -errno;
  case MOSQ_ERR_EAI:
    return -EHOSTUNREACH;
  case MOSQ_ERR_TLS:
    return -EPROTO;
  default:
    return -ECONNRESET;
  }
}

/* Ends the session without writing anything more (the queued PUBACKs included) after
 * before_ack() refused with rc: em_broker_free() then closes the socket unflushed. */
static void drop(em_broker_t *b, int rc) {
  b->ack_refused = rc;
  b->lost = true;
  b->connected = false;
}

/* True when fd has something to read now. */
static bool readable_now(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLERR | POLLHUP));
}

/* Reads what the socket has, up to b->ack_burst_max messages: each mosquitto_loop_read() reads
 * one packet (and what TLS has decoded already); the burst ends when the socket has nothing
 * more. errno cannot tell: on a threaded handle every queued PUBACK also writes a byte to
 * libmosquitto's wake-up pipe, which nobody reads here, so once it is full that write leaves
 * errno at EAGAIN after every message. Returns a libmosquitto code. */
static int read_burst(em_broker_t *b) {
  b->burst = 0;
  /* Reads per burst, bounded also when packets carry no message (acknowledgements, pings). */
  unsigned max_reads = 4u * b->ack_burst_max + 16u;
  for (unsigned i = 0; i < max_reads && b->burst < b->ack_burst_max; i++) {
    int rc = mosquitto_loop_read(b->mosq, 1);
    if (rc != MOSQ_ERR_SUCCESS) {
      return rc;
    }
    int fd = mosquitto_socket(b->mosq);
    if (fd < 0 || !readable_now(fd)) {
      break;
    }
  }
  return MOSQ_ERR_SUCCESS;
}

/* One turn of the acknowledge-after loop (see the top of the file). Returns a libmosquitto
 * code (MOSQ_ERR_ERRNO with errno EINTR for a signal), MOSQ_ERR_CONN_LOST after drop(). */
static int drive(em_broker_t *b, int timeout_ms) {
  int fd = mosquitto_socket(b->mosq);
  if (fd < 0) {
    return MOSQ_ERR_NO_CONN;
  }
  struct pollfd p = {.fd = fd, .events = POLLIN};
  if (mosquitto_want_write(b->mosq)) {
    p.events |= POLLOUT;
  }
  int n = poll(&p, 1, timeout_ms < 0 ? 0 : timeout_ms);
  if (n < 0) {
    return MOSQ_ERR_ERRNO;
  }
  if (n > 0 && (p.revents & (POLLIN | POLLERR | POLLHUP))) {
    int rc = read_burst(b);
    if (rc != MOSQ_ERR_SUCCESS) {
      return rc;
    }
  }
  if (b->ack_due) {
    b->ack_due = false;
    int hrc = b->before_ack(b->ctx);
    if (hrc < 0) {
      drop(b, hrc);
      return MOSQ_ERR_CONN_LOST;
    }
  }
  if (mosquitto_socket(b->mosq) < 0) {
    return MOSQ_ERR_NO_CONN;
  }
  int rc = mosquitto_loop_misc(b->mosq);
  if (rc == MOSQ_ERR_SUCCESS && mosquitto_socket(b->mosq) >= 0 && mosquitto_want_write(b->mosq)) {
    errno = 0;
    rc = mosquitto_loop_write(b->mosq, 1);
  }
  return rc;
}

/* One turn of the network for up to timeout_ms: drive() with before_ack, else mosquitto_loop().
 * Returns a libmosquitto code; errno as the call left it. */
static int loop_once(em_broker_t *b, int timeout_ms) {
  errno = 0;
  if (b->before_ack) {
    return drive(b, timeout_ms);
  }
  return mosquitto_loop(b->mosq, timeout_ms < 0 ? 0 : timeout_ms, 1);
}

int em_broker_run(em_broker_t *b, int timeout_ms) {
  if (!b) {
    return -EINVAL;
  }
  if (b->lost) {
    return -ECONNRESET;
  }
  int rc = loop_once(b, timeout_ms);
  if (b->ack_refused < 0) {
    return b->ack_refused;
  }
  if (rc == MOSQ_ERR_ERRNO && errno == EINTR) {
    return 0; /* A signal: the caller checks its stop flag. */
  }
  if (rc != MOSQ_ERR_SUCCESS) {
    b->lost = true;
    b->connected = false;
    return -ECONNRESET;
  }
  return b->lost ? -ECONNRESET : 0;
}

/* Runs the loop until *flag stops being `while_value` or the deadline passes. */
static int run_until(em_broker_t *b, const int *flag, int while_value, uint64_t deadline_ms) {
  while (*flag == while_value) {
    uint64_t now = mono_ms();
    if (now >= deadline_ms) {
      return -ETIMEDOUT;
    }
    uint64_t left = deadline_ms - now;
    int rc = em_broker_run(b, left > 100 ? 100 : (int)left);
    if (rc < 0) {
      return rc;
    }
  }
  return 0;
}

/* The system's CA directory, for a client certificate without --cafile/--capath
 * (mosquitto_tls_set() wants one of them; the system's bundle comes from
 * MOSQ_OPT_TLS_USE_OS_CERTS). */
static const char *system_ca_dir(void) {
  const char *dir = getenv("SSL_CERT_DIR");
  return given(dir) ? dir : "/etc/ssl/certs";
}

/* Login and TLS settings on b->mosq. Returns 0 or a negative errno with err set. */
static int apply_security(em_broker_t *b, const em_broker_url_t *u, const em_broker_opts_t *o,
                          char *err, size_t err_cap) {
  int mrc = MOSQ_ERR_SUCCESS;
  const char *what = "";
  if (given(o->username)) {
    mrc = mosquitto_username_pw_set(b->mosq, o->username, given(o->password) ? o->password : NULL);
    what = "the username";
  }
  if (mrc == MOSQ_ERR_SUCCESS && u->tls) {
    const char *ca_file = given(o->tls_ca_file) ? o->tls_ca_file : NULL;
    const char *ca_path = given(o->tls_ca_path) ? o->tls_ca_path : NULL;
    if (!ca_file && !ca_path) {
      mrc = mosquitto_int_option(b->mosq, MOSQ_OPT_TLS_USE_OS_CERTS, 1);
      ca_path = system_ca_dir();
    }
    what = "the TLS certificates";
    if (mrc == MOSQ_ERR_SUCCESS) {
      mrc = mosquitto_tls_set(b->mosq, ca_file, ca_path,
                              given(o->tls_cert_file) ? o->tls_cert_file : NULL,
                              given(o->tls_key_file) ? o->tls_key_file : NULL, NULL);
    }
    if (mrc == MOSQ_ERR_SUCCESS) {
      what = "the TLS options";
      mrc = mosquitto_tls_opts_set(b->mosq, 1 /* SSL_VERIFY_PEER */, "tlsv1.2", NULL);
    }
    if (mrc == MOSQ_ERR_SUCCESS) {
      mrc = mosquitto_tls_insecure_set(b->mosq, o->tls_insecure);
    }
  }
  if (mrc != MOSQ_ERR_SUCCESS) {
    if (err && err_cap > 0) {
      snprintf(err, err_cap, "libmosquitto refused %s: %s", what, mosquitto_strerror(mrc));
    }
    return mosq_errno(mrc) == -ECONNRESET ? -EINVAL : mosq_errno(mrc);
  }
  return 0;
}

/* The sentence for a CONNACK that refused the session (v3.1.1 codes 1-5, v5 reason codes). */
static void refused_message(char *err, size_t err_cap, const char *url, int rc) {
  bool auth = rc == 4 || rc == 5 || rc == 134 /* bad user name or password */ ||
              rc == 135 /* not authorized */;
  snprintf(err, err_cap, "broker %s refused the session: %s%s", url,
           auth ? "not authorised (check the username and password or the client certificate; "
                : "",
           rc < 128 ? mosquitto_connack_string(rc) : mosquitto_reason_string(rc));
  if (auth) {
    size_t n = strlen(err);
    if (n + 1 < err_cap) {
      err[n] = ')';
      err[n + 1] = '\0';
    }
  }
}

int em_broker_connect(em_broker_t **out, const char *url, const char *client_prefix,
                      em_broker_msg_fn on_msg, void *ctx, double timeout_s, char *err,
                      size_t err_cap) {
  em_broker_opts_t opts = {.client_prefix = client_prefix};
  return em_broker_connect_opts(out, url, &opts, on_msg, ctx, timeout_s, err, err_cap);
}

int em_broker_connect_opts(em_broker_t **out, const char *url, const em_broker_opts_t *opts,
                           em_broker_msg_fn on_msg, void *ctx, double timeout_s, char *err,
                           size_t err_cap) {
  em_broker_opts_t none = {0};
  if (!opts) {
    opts = &none;
  }
  const char *client_prefix = opts->client_prefix;
  if (err && err_cap > 0) {
    err[0] = '\0';
  }
  if (!out || !url) {
    return -EINVAL;
  }
  *out = NULL;
  em_broker_url_t u;
  int rc = em_broker_parse_url(url, &u, err, err_cap);
  if (rc == 0) {
    rc = em_broker_check_opts(&u, opts, err, err_cap);
  }
  if (rc < 0) {
    return rc;
  }
  static bool lib_ready;
  if (!lib_ready) {
    mosquitto_lib_init();
    lib_ready = true;
  }
  em_broker_t *b = calloc(1, sizeof(*b));
  if (!b) {
    return -ENOMEM;
  }
  b->on_message = on_msg;
  b->ctx = ctx;
  b->connack_rc = -1;
  b->before_ack = opts->before_ack;
  b->ack_burst_max = opts->ack_burst_max > 0 ? opts->ack_burst_max : EM_BROKER_ACK_BURST_MAX;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (opts->client_id) {
    snprintf(b->client_id, sizeof(b->client_id), "%s", opts->client_id);
  } else {
    snprintf(b->client_id, sizeof(b->client_id), "%.32s-%ld-%06lx",
             client_prefix ? client_prefix : "edgemon-host", (long)getpid(),
             (unsigned long)(ts.tv_nsec & 0xffffff));
  }
  snprintf(b->sync_topic, sizeof(b->sync_topic), "edgemon/v1/~sync/cmd/%s", b->client_id);
  b->mosq = mosquitto_new(b->client_id, !opts->persistent, b);
  if (!b->mosq) {
    free(b);
    return -ENOMEM;
  }
  if (opts->mqtt5 || opts->max_packet_bytes > 0) {
    mosquitto_int_option(b->mosq, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V5);
    int prc = set_connect_properties(b, opts);
    if (prc != MOSQ_ERR_SUCCESS) {
      rc = mosq_errno(prc);
      goto fail_quiet;
    }
  }
  if (b->before_ack) {
    mosquitto_threaded_set(b->mosq, true); /* Queue packets; drive() writes them. */
  }
  mosquitto_connect_callback_set(b->mosq, on_connect);
  mosquitto_disconnect_callback_set(b->mosq, on_disconnect);
  mosquitto_subscribe_callback_set(b->mosq, on_subscribe);
  mosquitto_publish_callback_set(b->mosq, on_publish);
  mosquitto_message_callback_set(b->mosq, on_message);
  mosquitto_log_callback_set(b->mosq, on_log);
  rc = apply_security(b, &u, opts, err, err_cap);
  if (rc < 0) {
    goto fail_quiet;
  }

  uint64_t deadline = mono_ms() + (uint64_t)(timeout_s > 0 ? timeout_s * 1000.0 : 5000.0);
  errno = 0;
  int mrc = mosquitto_connect_async(b->mosq, u.host, u.port,
                                    opts->keepalive_s > 0 ? opts->keepalive_s : 30);
  if (mrc != MOSQ_ERR_SUCCESS) {
    rc = mosq_errno(mrc);
    goto fail;
  }
  while (b->connack_rc < 0) {
    if (mono_ms() >= deadline) {
      rc = -ETIMEDOUT;
      goto fail;
    }
    mrc = loop_once(b, 100);
    if (b->ack_refused < 0) {
      if (err && err_cap > 0) {
        snprintf(err, err_cap,
                 "connected to the broker at %s, but what it delivered could not be made "
                 "durable (%s); dropped the connection so that it sends it again",
                 url, strerror(-b->ack_refused));
      }
      rc = b->ack_refused;
      goto fail_quiet;
    }
    if (mrc == MOSQ_ERR_ERRNO && errno == EINTR) {
      continue;
    }
    if (b->connack_rc > 0) {
      break; /* Refused: libmosquitto reports the CONNACK as an error too. */
    }
    if (mrc != MOSQ_ERR_SUCCESS || (b->lost && b->connack_rc < 0)) {
      rc = mrc == MOSQ_ERR_SUCCESS ? -ECONNRESET : mosq_errno(mrc);
      goto fail;
    }
  }
  if (b->connack_rc != 0) {
    if (err && err_cap > 0) {
      refused_message(err, err_cap, url, b->connack_rc);
    }
    rc = -ECONNREFUSED;
    goto fail_quiet;
  }
  *out = b;
  return 0;
fail:
  if (u.tls && rc != -ETIMEDOUT && rc != -ECONNREFUSED && rc != -EHOSTUNREACH &&
      (rc == -EPROTO || rc == -ECONNRESET || b->last_log_error[0])) {
    /* Reached the port, but the TLS handshake did not complete. */
    if (err && err_cap > 0) {
      snprintf(err, err_cap, "TLS handshake with the broker at %s failed: %s", url,
               b->last_log_error[0] ? b->last_log_error
                                    : "the broker closed the connection (wrong CA, client "
                                      "certificate missing or refused?)");
    }
    rc = -EPROTO;
    goto fail_quiet;
  }
  if (err && err_cap > 0) {
    snprintf(err, err_cap, "cannot reach the broker at %s: %s", url,
             rc == -ETIMEDOUT ? "no answer within the timeout" : strerror(-rc));
  }
fail_quiet:
  mosquitto_destroy(b->mosq);
  free(b);
  return rc;
}

int em_broker_subscribe(em_broker_t *b, const char *pattern) {
  if (!b || !pattern) {
    return -EINVAL;
  }
  int mid = 0;
  b->sub_result = 1;
  int rc = mosquitto_subscribe(b->mosq, &mid, pattern, 1);
  if (rc != MOSQ_ERR_SUCCESS) {
    return mosq_errno(rc);
  }
  b->sub_mid = mid;
  rc = run_until(b, &b->sub_result, 1, mono_ms() + 5000);
  return rc < 0 ? rc : b->sub_result;
}

int em_broker_publish(em_broker_t *b, const char *topic, const void *payload, size_t len, int qos,
                      bool retain) {
  if (!b || !topic || len > 256u * 1024u * 1024u || qos < 0 || qos > 2) {
    return -EINVAL;
  }
  if (b->lost) {
    return -ECONNRESET;
  }
  int rc = mosquitto_publish(b->mosq, NULL, topic, (int)len, payload, qos, retain);
  if (rc != MOSQ_ERR_SUCCESS) {
    return mosq_errno(rc);
  }
  if (qos > 0) {
    b->in_flight++;
  }
  return 0;
}

int em_broker_sync(em_broker_t *b, double timeout_s) {
  if (!b) {
    return -EINVAL;
  }
  uint64_t deadline = mono_ms() + (uint64_t)(timeout_s * 1000.0);
  if (!b->sync_subscribed) {
    int rc = em_broker_subscribe(b, b->sync_topic);
    if (rc < 0) {
      return rc;
    }
    b->sync_subscribed = true;
  }
  uint32_t marker = ++b->sync_sent;
  int rc = em_broker_publish(b, b->sync_topic, &marker, sizeof(marker), 1, false);
  if (rc < 0) {
    return rc;
  }
  while (b->sync_seen != marker) {
    uint64_t now = mono_ms();
    if (now >= deadline) {
      return -ETIMEDOUT;
    }
    rc = em_broker_run(b, (int)(deadline - now > 100 ? 100 : deadline - now));
    if (rc < 0) {
      return rc;
    }
  }
  return 0;
}

int em_broker_drain(em_broker_t *b, double timeout_s) {
  if (!b) {
    return -EINVAL;
  }
  uint64_t deadline = mono_ms() + (uint64_t)(timeout_s * 1000.0);
  while (b->in_flight > 0) {
    uint64_t now = mono_ms();
    if (now >= deadline) {
      return -ETIMEDOUT;
    }
    int rc = em_broker_run(b, (int)(deadline - now > 100 ? 100 : deadline - now));
    if (rc < 0) {
      return rc;
    }
  }
  return 0;
}

uint64_t em_broker_received(const em_broker_t *b) {
  return b ? b->received : 0;
}

void em_broker_free(em_broker_t *b) {
  if (!b) {
    return;
  }
  if (b->connected) {
    mosquitto_disconnect(b->mosq);
    for (int i = 0; i < 5 && loop_once(b, 10) == MOSQ_ERR_SUCCESS && !b->lost; i++) {
    }
  }
  mosquitto_destroy(b->mosq);
  free(b);
}

int em_topic_parse(const char *topic, char *device, size_t cap, const char **kind) {
  static const char prefix[] = "edgemon/v1/";
  if (!topic || !device || cap == 0 || strncmp(topic, prefix, sizeof(prefix) - 1) != 0) {
    return -EINVAL;
  }
  const char *id = topic + sizeof(prefix) - 1;
  const char *slash = strchr(id, '/');
  size_t n = slash ? (size_t)(slash - id) : 0;
  if (!slash || n == 0 || n > EM_TOPIC_MAX_DEVICE || n >= cap || slash[1] == '\0') {
    return -EINVAL;
  }
  memcpy(device, id, n);
  device[n] = '\0';
  if (kind) {
    *kind = slash + 1;
  }
  return 0;
}
