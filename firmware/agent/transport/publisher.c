/*
 * publisher.c - see publisher.h. The MQTT session as a small state machine on the loop:
 *
 *                  start()               numeric host, or name resolved
 *     IDLE ──────────────────► RESOLVING ─────────────────────────────► CONNECTING
 *                                 ▲  │ resolve failed                    │   │ CONNACK 0
 *                     retry timer │  ▼                                   │   ▼
 *                               BACKOFF ◄──── refused, lost, timeout ─────┴─ CONNECTED
 *                                                                             │
 *        any state ── stop() ──► CLOSING (last status, DISCONNECT, drain) ──► CLOSED
 *
 *   edge                          function
 *   IDLE -> RESOLVING             em_publisher_start -> resolve
 *   RESOLVING -> CONNECTING       resolve / on_resolved -> connect_to
 *   CONNECTING -> CONNECTED       on_connack (rc 0)
 *   * -> BACKOFF                  fail (closes the poll handle, arms the retry timer)
 *   BACKOFF -> RESOLVING          on_retry -> resolve
 *   * -> CLOSING -> CLOSED        em_publisher_stop -> finish_stop -> on_handle_closed
 *
 * Invariants: the uv_poll_t watches the mosquitto socket only in CONNECTING and CONNECTED,
 * and is closed (uv_close) before libmosquitto can close or reuse that fd; the poll's event
 * mask always includes UV_WRITABLE exactly when mosquitto_want_write() is true.
 *
 * TLS (opts.tls): libmosquitto runs the handshake from mosquitto_loop_read() while it is in
 * progress (its own select loop does the same on writable), so in CONNECTING every poll event
 * calls loop_read, and mosquitto_want_write() tells when OpenSSL wants the socket writable.
 * OpenSSL decrypts whole records, so bytes can wait inside it while the fd is no longer
 * readable: reads are repeated until libmosquitto reports EAGAIN (read_all), and the misc
 * timer reads once a second as a safety net. libmosquitto reports handshake errors only
 * through its log callback: the first error line of an attempt becomes the failure reason.
 * Failures are logged once per distinct reason (fail), not on every retry.
 */
#define _POSIX_C_SOURCE 200809L

#include "publisher.h"

#include <arpa/inet.h>
#include <errno.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mosquitto.h>
#include <mqtt_protocol.h>

#include "edgemon/proto.h"

#include "log.h"

typedef enum {
  S_IDLE,
  S_RESOLVING,
  S_CONNECTING,
  S_CONNECTED,
  S_BACKOFF,
  S_CLOSING,
  S_CLOSED
} state_t;

#define CONNECT_TIMEOUT_MS 10000u
#define MISC_PERIOD_MS     1000u
#define UNACKED_MAX        64u /* QoS 1 publishes tracked for ack_timeout_ns. */
#define READ_ROUNDS        8u  /* loop_read calls per event at most, until EAGAIN (TLS). */
#define REASON_CAP         256
/* Commands are messages (edgemon/proto.h): a payload past EM_PROTO_MAX_MESSAGE_BYTES is none. */
#define MAX_COMMAND_BYTES EM_PROTO_MAX_MESSAGE_BYTES
/* The CONNECT's maximum packet size: a command and its PUBLISH around it. */
#define MAX_PACKET_BYTES (MAX_COMMAND_BYTES + EM_PROTO_MQTT_OVERHEAD_BYTES)

struct em_publisher {
  uv_loop_t *loop;
  struct mosquitto *mosq;
  em_publisher_sys_t sys;   /* The libmosquitto calls (publisher.h). */
  int publish_refused;      /* The MOSQ_ERR_* of the last refused publish logged; 0: none. */
  em_publisher_opts_t opts; /* Strings point at the copies below. */
  char host[256];
  char client_id[128];
  char prefix[160];
  uint8_t *will;
  state_t state;

  uv_poll_t poll;
  bool poll_open; /* Initialised and not yet closing. */
  int poll_events;
  uv_timer_t misc_timer;  /* mosquitto_loop_misc, connect timeout, stop drain timeout. */
  uv_timer_t retry_timer; /* Backoff. */
  uv_getaddrinfo_t gai;
  bool resolving;
  uint64_t attempt_start_ms;
  uint64_t backoff_ns;
  uint64_t rng;
  bool refused;                    /* CONNACK refused inside a libmosquitto callback. */
  bool reported_down;              /* "broker unreachable" logged once per outage. */
  char refused_reason[REASON_CAP]; /* Why the CONNACK refused, for fail(). */
  char lib_error[REASON_CAP];      /* First error libmosquitto logged in this attempt. */
  char last_reason[REASON_CAP];    /* The failure last logged at WARN; "" after a session. */
  unsigned pending_closes;
  void (*stop_done)(void *);
  void *stop_ctx;
  uint64_t stop_deadline_ms;
  em_publisher_stats_t stats;
  em_log_limit_t oversize_log; /* "command refused unread" lines. */
  /* QoS 1 publishes awaiting their PUBACK, oldest first (a ring; mid 0 = acked out of order). */
  struct {
    int mid;
    uint64_t sent_ms;
  } unacked[UNACKED_MAX];
  size_t ua_head;
  size_t ua_len;
};

static void resolve(em_publisher_t *p);
static void update_poll(em_publisher_t *p);
static void finish_stop(em_publisher_t *p);
static void on_retry(uv_timer_t *t);

/* --- the real libmosquitto calls ---------------------------------------------------- */

static int real_username_pw_set(void *ctx, struct mosquitto *m, const char *username,
                                const char *password) {
  (void)ctx;
  return mosquitto_username_pw_set(m, username, password);
}

static int real_tls_set(void *ctx, struct mosquitto *m, const char *ca_file, const char *ca_path,
                        const char *cert_file, const char *key_file,
                        int (*pw_callback)(char *buf, int size, int rwflag, void *userdata)) {
  (void)ctx;
  return mosquitto_tls_set(m, ca_file, ca_path, cert_file, key_file, pw_callback);
}

static int real_tls_opts_set(void *ctx, struct mosquitto *m, int cert_reqs, const char *tls_version,
                             const char *ciphers) {
  (void)ctx;
  return mosquitto_tls_opts_set(m, cert_reqs, tls_version, ciphers);
}

static int real_tls_insecure_set(void *ctx, struct mosquitto *m, bool value) {
  (void)ctx;
  return mosquitto_tls_insecure_set(m, value);
}

static int real_will_set(void *ctx, struct mosquitto *m, const char *topic, int len,
                         const void *payload, int qos, bool retain) {
  (void)ctx;
  return mosquitto_will_set(m, topic, len, payload, qos, retain);
}

static int real_connect_async(void *ctx, struct mosquitto *m, const char *host, int port,
                              int keepalive_s) {
  (void)ctx;
  return mosquitto_connect_async(m, host, port, keepalive_s);
}

static int real_socket(void *ctx, struct mosquitto *m) {
  (void)ctx;
  return mosquitto_socket(m);
}

static int real_loop_read(void *ctx, struct mosquitto *m, int max_packets) {
  (void)ctx;
  return mosquitto_loop_read(m, max_packets);
}

static int real_loop_write(void *ctx, struct mosquitto *m, int max_packets) {
  (void)ctx;
  return mosquitto_loop_write(m, max_packets);
}

static int real_loop_misc(void *ctx, struct mosquitto *m) {
  (void)ctx;
  return mosquitto_loop_misc(m);
}

static bool real_want_write(void *ctx, struct mosquitto *m) {
  (void)ctx;
  return mosquitto_want_write(m);
}

static int real_publish(void *ctx, struct mosquitto *m, int *mid, const char *topic, int len,
                        const void *payload, int qos, bool retain) {
  (void)ctx;
  return mosquitto_publish(m, mid, topic, len, payload, qos, retain);
}

static int real_subscribe(void *ctx, struct mosquitto *m, int *mid, const char *pattern, int qos) {
  (void)ctx;
  return mosquitto_subscribe(m, mid, pattern, qos);
}

static int real_disconnect(void *ctx, struct mosquitto *m) {
  (void)ctx;
  return mosquitto_disconnect(m);
}

const em_publisher_sys_t em_publisher_sys_mosquitto = {
    real_username_pw_set, real_tls_set, real_tls_opts_set, real_tls_insecure_set, real_will_set,
    real_connect_async,   real_socket,  real_loop_read,    real_loop_write,       real_loop_misc,
    real_want_write,      real_publish, real_subscribe,    real_disconnect,       NULL};

/* --- helpers ------------------------------------------------------------------------- */

/* A delay in [d/2, d]: jitter so a fleet does not reconnect in lockstep after an outage. */
static uint64_t jitter(em_publisher_t *p, uint64_t d) {
  p->rng ^= p->rng << 13;
  p->rng ^= p->rng >> 7;
  p->rng ^= p->rng << 17;
  return d / 2 + (d / 2 ? p->rng % (d / 2 + 1) : 0);
}

static void on_handle_closed(uv_handle_t *h) {
  em_publisher_t *p = h->data;
  p->pending_closes--;
  if (p->state == S_CLOSING && p->pending_closes == 0) {
    p->state = S_CLOSED;
    if (p->stop_done) {
      p->stop_done(p->stop_ctx);
    }
  }
}

static void close_poll(em_publisher_t *p) {
  if (!p->poll_open) {
    return;
  }
  p->poll_open = false;
  p->poll_events = 0;
  p->pending_closes++;
  uv_close((uv_handle_t *)&p->poll, on_handle_closed);
}

/*
 * The attempt failed or the session was lost: close the poll handle (before libmosquitto
 * closes the fd on the next connect), count, log once per outage, and back off.
 */
static void fail(em_publisher_t *p, const char *what) {
  if (p->state == S_CLOSING || p->state == S_CLOSED) {
    return;
  }
  close_poll(p);
  if (p->state == S_CONNECTED) {
    p->stats.disconnects++;
    EM_WARN("mqtt: connection to %s:%u lost (%s); reconnecting", p->host, p->opts.port, what);
  } else {
    p->stats.failures++;
    unsigned long long max_ms = (unsigned long long)(p->opts.backoff_max_ns / 1000000u);
    if (p->reported_down && strcmp(what, p->last_reason) == 0) {
      EM_DEBUG("mqtt: attempt failed (%s)", what);
    } else if (p->refused) {
      EM_ERROR("mqtt: broker %s:%u refused the connection: %s; retrying with backoff up to %llu "
               "ms",
               p->host, p->opts.port, what, max_ms);
    } else {
      EM_WARN("mqtt: broker %s:%u unreachable (%s); retrying with backoff up to %llu ms", p->host,
              p->opts.port, what, max_ms);
    }
    snprintf(p->last_reason, sizeof(p->last_reason), "%s", what);
  }
  p->refused = false;
  p->reported_down = true;
  p->state = S_BACKOFF;
  uint64_t delay_ms = jitter(p, p->backoff_ns) / 1000000u;
  p->backoff_ns =
      p->backoff_ns * 2 > p->opts.backoff_max_ns ? p->opts.backoff_max_ns : p->backoff_ns * 2;
  uv_timer_start(&p->retry_timer, on_retry, delay_ms ? delay_ms : 1, 0);
}

/* A libmosquitto return code as text, with errno for MOSQ_ERR_ERRNO. */
static const char *mosq_reason(int rc) {
  return rc == MOSQ_ERR_ERRNO ? strerror(errno) : mosquitto_strerror(rc);
}

/*
 * Why an attempt or a session failed with libmosquitto code rc: for TLS errors, the error
 * libmosquitto logged (OpenSSL's reason), else mosq_reason(). Returns buf.
 */
static const char *failure_reason(em_publisher_t *p, int rc, char *buf, size_t cap) {
  if ((rc == MOSQ_ERR_TLS || rc == MOSQ_ERR_TLS_HANDSHAKE) && p->lib_error[0] != '\0') {
    snprintf(buf, cap, "TLS handshake failed: %s", p->lib_error);
  } else if (rc == MOSQ_ERR_TLS || rc == MOSQ_ERR_TLS_HANDSHAKE) {
    snprintf(buf, cap, "TLS handshake failed: %s", mosquitto_strerror(rc));
  } else {
    snprintf(buf, cap, "%s", mosq_reason(rc));
  }
  return buf;
}

/* libmosquitto's log: its errors (OpenSSL's reasons among them) go to our debug log, and the
   first of an attempt is kept as the reason for a TLS failure. */
static void on_mosq_log(struct mosquitto *mosq, void *obj, int level, const char *str) {
  (void)mosq;
  em_publisher_t *p = obj;
  if (!(level & MOSQ_LOG_ERR) || str == NULL) {
    return;
  }
  EM_DEBUG("mqtt: libmosquitto: %s", str);
  if (p->lib_error[0] == '\0') {
    snprintf(p->lib_error, sizeof(p->lib_error), "%s", str);
  }
}

/* Reads until libmosquitto reports EAGAIN (TLS: OpenSSL may hold decrypted bytes the fd no
   longer shows) or READ_ROUNDS calls; plain TCP reads once (the poll is level-triggered). */
static int read_all(em_publisher_t *p) {
  int rc = MOSQ_ERR_SUCCESS;
  for (unsigned i = 0; i < READ_ROUNDS; i++) {
    state_t before = p->state;
    errno = 0;
    rc = p->sys.loop_read(p->sys.ctx, p->mosq, 16);
    if (rc != MOSQ_ERR_SUCCESS || !p->opts.tls || errno == EAGAIN || errno == EWOULDBLOCK ||
        p->refused || p->state != before) {
      break;
    }
  }
  return rc;
}

/* Why the socket went away when libmosquitto closed it without an error code. */
static const char *closed_reason(const em_publisher_t *p) {
  if (p->lib_error[0] != '\0') {
    return p->lib_error;
  }
  if (p->opts.tls && p->state == S_CONNECTING) {
    return "the connection closed before the TLS handshake completed (is the broker speaking "
           "TLS on this port?)";
  }
  return "the connection closed";
}

/*
 * During a TLS handshake libmosquitto treats a socket error or an end of file as "try again"
 * (SSL_ERROR_SYSCALL), which would spin until the connect timeout: look at the socket first.
 * Returns false after fail() when the connection is gone.
 */
static bool tls_socket_alive(em_publisher_t *p) {
  int fd = p->sys.socket(p->sys.ctx, p->mosq);
  int err = 0;
  socklen_t len = sizeof(err);
  if (fd < 0) {
    fail(p, "no socket");
    return false;
  }
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err != 0) {
    fail(p, strerror(err));
    return false;
  }
  char byte;
  ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) {
    fail(p, closed_reason(p));
    return false;
  }
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    fail(p, strerror(errno));
    return false;
  }
  return true;
}
/* --- libmosquitto callbacks (run inside mosquitto_loop_read) --------------------------- */

static void on_connack(struct mosquitto *mosq, void *obj, int rc) {
  (void)mosq;
  em_publisher_t *p = obj;
  if (rc != 0) {
    /* MQTT v5 reason codes (128 and up); a v3.1.1 broker's refusal codes are 1..5. */
    snprintf(p->refused_reason, sizeof(p->refused_reason), "%s",
             rc < 128 ? mosquitto_connack_string(rc) : mosquitto_reason_string(rc));
    p->refused = true;
    return;
  }
  p->state = S_CONNECTED;
  p->ua_len = 0;
  p->stats.connects++;
  p->backoff_ns = p->opts.backoff_min_ns;
  p->reported_down = false;
  p->last_reason[0] = '\0';
  EM_INFO("mqtt: connected to %s:%u as %s", p->host, p->opts.port, p->client_id);
  char topic[sizeof(p->prefix) + 16];
  snprintf(topic, sizeof(topic), "%s/cmd/#", p->prefix);
  int src = p->sys.subscribe(p->sys.ctx, p->mosq, NULL, topic, 1);
  if (src != MOSQ_ERR_SUCCESS) {
    EM_WARN("mqtt: cannot subscribe to %s: %s", topic, mosq_reason(src));
  }
  if (p->opts.on_online) {
    p->opts.on_online(p->opts.ctx);
  }
}

/* PUBACK of `mid`: no longer awaited. Acks come in order, so this is almost always the head. */
static void on_publish(struct mosquitto *mosq, void *obj, int mid) {
  (void)mosq;
  em_publisher_t *p = obj;
  for (size_t i = 0; i < p->ua_len; i++) {
    size_t k = (p->ua_head + i) % UNACKED_MAX;
    if (p->unacked[k].mid == mid) {
      p->unacked[k].mid = 0;
      break;
    }
  }
  while (p->ua_len > 0 && p->unacked[p->ua_head].mid == 0) {
    p->ua_head = (p->ua_head + 1) % UNACKED_MAX;
    p->ua_len--;
  }
  if (p->opts.on_ack) {
    p->opts.on_ack(p->opts.ctx, mid);
  }
}

/* True when the oldest awaited PUBACK is older than ack_timeout_ns. */
static bool ack_overdue(const em_publisher_t *p, uint64_t now_ms) {
  if (p->opts.ack_timeout_ns == 0 || p->ua_len == 0) {
    return false;
  }
  return now_ms - p->unacked[p->ua_head].sent_ms > p->opts.ack_timeout_ns / 1000000u;
}

static void on_message(struct mosquitto *mosq, void *obj, const struct mosquitto_message *m) {
  (void)mosq;
  em_publisher_t *p = obj;
  size_t plen = strlen(p->prefix);
  if (!m->topic || strncmp(m->topic, p->prefix, plen) != 0 ||
      strncmp(m->topic + plen, "/cmd/", 5) != 0 || !p->opts.on_command) {
    return;
  }
  if (m->payloadlen < 0 || (size_t)m->payloadlen > MAX_COMMAND_BYTES) {
    /* Past what any command can be (the broker should not have sent it: see limit_packets()):
     * refused unread, counted, logged at most once per EM_LOG_LIMIT_NS. */
    p->stats.oversize++;
    if (em_log_limit_pass(&p->oversize_log, uv_hrtime(), EM_LOG_LIMIT_NS)) {
      EM_WARN("mqtt: refused a %d-byte payload on %s unread: larger than any command (%u "
              "bytes; counted in agent.mqtt.oversize, not logged one by one)",
              m->payloadlen, m->topic, MAX_COMMAND_BYTES);
    }
    return;
  }
  p->opts.on_command(p->opts.ctx, m->topic + plen + 5, m->payload, (size_t)m->payloadlen);
}

/* --- the socket ---------------------------------------------------------------------- */

static void on_poll(uv_poll_t *h, int status, int events) {
  em_publisher_t *p = h->data;
  if (status < 0) {
    /* libuv reports a socket error (POLLERR) as UV_EBADF: name the real one when it can. */
    if (p->opts.tls && p->state == S_CONNECTING && !tls_socket_alive(p)) {
      return;
    }
    fail(p, uv_strerror(status));
    return;
  }
  int rc = MOSQ_ERR_SUCCESS;
  bool handshake = p->opts.tls && p->state == S_CONNECTING;
  if (handshake && !tls_socket_alive(p)) {
    return;
  }
  if (handshake) {
    rc = read_all(p); /* Drives the handshake; CONNACK once it is done. */
  }
  if (rc == MOSQ_ERR_SUCCESS && !p->refused && (events & UV_WRITABLE)) {
    rc = p->sys.loop_write(p->sys.ctx, p->mosq, 16);
  }
  if (rc == MOSQ_ERR_SUCCESS && !handshake && (events & UV_READABLE)) {
    rc = read_all(p);
  }
  if (p->state == S_CLOSING) {
    if (!p->sys.want_write(p->sys.ctx, p->mosq) || rc != MOSQ_ERR_SUCCESS) {
      finish_stop(p);
    }
    return;
  }
  if (p->refused) {
    fail(p, p->refused_reason);
    return;
  }
  if (rc != MOSQ_ERR_SUCCESS) {
    char why[REASON_CAP + 32];
    fail(p, failure_reason(p, rc, why, sizeof(why)));
    return;
  }
  /* Closed inside libmosquitto without an error code? */
  if (p->sys.socket(p->sys.ctx, p->mosq) < 0) {
    fail(p, closed_reason(p));
    return;
  }
  update_poll(p);
}

static void update_poll(em_publisher_t *p) {
  if (!p->poll_open) {
    return;
  }
  int events = UV_READABLE | (p->sys.want_write(p->sys.ctx, p->mosq) ? UV_WRITABLE : 0);
  if (events == p->poll_events) {
    return;
  }
  int rc = uv_poll_start(&p->poll, events, on_poll);
  if (rc < 0) {
    fail(p, uv_strerror(rc));
    return;
  }
  p->poll_events = events;
}

static void connect_to(em_publisher_t *p, const char *addr) {
  p->state = S_CONNECTING;
  p->attempt_start_ms = uv_now(p->loop);
  p->lib_error[0] = '\0';
  int rc = p->sys.connect_async(p->sys.ctx, p->mosq, addr, p->opts.port, (int)p->opts.keepalive_s);
  if (rc != MOSQ_ERR_SUCCESS) {
    char why[REASON_CAP + 32];
    fail(p, failure_reason(p, rc, why, sizeof(why)));
    return;
  }
  int fd = p->sys.socket(p->sys.ctx, p->mosq);
  rc = fd < 0 ? UV_EBADF : uv_poll_init_socket(p->loop, &p->poll, fd);
  if (rc < 0) {
    fail(p, uv_strerror(rc));
    return;
  }
  p->poll.data = p;
  p->poll_open = true;
  p->poll_events = 0;
  update_poll(p);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
  em_publisher_t *p = req->data;
  p->resolving = false;
  if (p->state == S_CLOSING) {
    uv_freeaddrinfo(res);
    finish_stop(p);
    return;
  }
  char addr[64] = "";
  if (status == 0 && res) {
    if (res->ai_family == AF_INET6) {
      uv_ip6_name((const struct sockaddr_in6 *)res->ai_addr, addr, sizeof(addr));
    } else {
      uv_ip4_name((const struct sockaddr_in *)res->ai_addr, addr, sizeof(addr));
    }
  }
  uv_freeaddrinfo(res);
  if (addr[0] == '\0') {
    fail(p, status < 0 ? uv_strerror(status) : "no address");
    return;
  }
  connect_to(p, addr);
}

/* Numeric hosts connect at once; names are resolved off the loop by libuv's thread pool. */
static void resolve(em_publisher_t *p) {
  unsigned char tmp[sizeof(struct in6_addr)];
  if (inet_pton(AF_INET, p->host, tmp) == 1 || inet_pton(AF_INET6, p->host, tmp) == 1) {
    connect_to(p, p->host);
    return;
  }
  p->state = S_RESOLVING;
  char port[8];
  snprintf(port, sizeof(port), "%u", p->opts.port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  p->gai.data = p;
  int rc = uv_getaddrinfo(p->loop, &p->gai, on_resolved, p->host, port, &hints);
  if (rc < 0) {
    fail(p, uv_strerror(rc));
    return;
  }
  p->resolving = true;
}

static void on_retry(uv_timer_t *t) {
  em_publisher_t *p = t->data;
  if (p->state == S_BACKOFF) {
    resolve(p);
  }
}

/* Keepalive, connect timeout, and the bound on the drain at stop. */
static void on_misc(uv_timer_t *t) {
  em_publisher_t *p = t->data;
  uint64_t now = uv_now(p->loop);
  if (p->state == S_CLOSING) {
    if (now >= p->stop_deadline_ms) {
      EM_WARN("mqtt: could not flush before the stop deadline");
      finish_stop(p);
    }
    return;
  }
  if (p->state == S_CONNECTING && now - p->attempt_start_ms > CONNECT_TIMEOUT_MS) {
    fail(p, "connect timed out");
    return;
  }
  if (p->state != S_CONNECTED) {
    return;
  }
  if (ack_overdue(p, now)) {
    char why[64];
    snprintf(why, sizeof(why), "no PUBACK within %llu ms",
             (unsigned long long)(p->opts.ack_timeout_ns / 1000000u));
    p->ua_len = 0; /* libmosquitto resends what it holds in flight after reconnect. */
    fail(p, why);
    return;
  }
  uint64_t held = 0;
  if (em_log_limit_flush(&p->oversize_log, uv_hrtime(), EM_LOG_LIMIT_NS, &held)) {
    EM_WARN("mqtt: %llu more payloads larger than any command refused unread in the last %d s "
            "(agent.mqtt.oversize)",
            (unsigned long long)held, EM_LOG_LIMIT_S);
  }
  int rc = p->sys.loop_misc(p->sys.ctx, p->mosq);
  if (rc != MOSQ_ERR_SUCCESS) {
    fail(p, rc == MOSQ_ERR_KEEPALIVE ? "no answer within the keepalive" : mosq_reason(rc));
    return;
  }
  if (p->opts.tls) {
    rc = read_all(p); /* Records OpenSSL may still hold (see the top of this file). */
    if (rc != MOSQ_ERR_SUCCESS) {
      char why[REASON_CAP + 32];
      fail(p, failure_reason(p, rc, why, sizeof(why)));
      return;
    }
  }
  update_poll(p);
}

/* --- public ------------------------------------------------------------------------- */

/* Never asked for a key's passphrase: an encrypted key fails to load instead of prompting. */
static int no_passphrase(char *buf, int size, int rwflag, void *userdata) {
  (void)rwflag;
  (void)userdata;
  if (size > 0) {
    buf[0] = '\0';
  }
  return 0;
}

/* NULL for NULL or "". */
static const char *opt_str(const char *s) {
  return s && s[0] ? s : NULL;
}

/*
 * MQTT v5, with a CONNECT that tells the broker never to send this session a packet larger
 * than MAX_PACKET_BYTES (MQTT_PROP_MAXIMUM_PACKET_SIZE): the broker drops such a message for
 * this client ("Dropping too large outgoing PUBLISH" in mosquitto's log). libmosquitto itself
 * reads any packet whole, then copies its payload before on_message (twice its size in memory),
 * so the limit has to be the broker's. libmosquitto takes CONNECT properties only in
 * mosquitto_connect_bind_v5(), which connects blocking; it stores them before it looks at the
 * host, so a call without a host stores them (answering MOSQ_ERR_INVAL) and the asynchronous
 * connects after it send them. Returns 0, or -ENOMEM (logged).
 */
static int limit_packets(em_publisher_t *p) {
  mosquitto_property *props = NULL;
  int rc = mosquitto_int_option(p->mosq, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V5);
  if (rc == MOSQ_ERR_SUCCESS) {
    rc = mosquitto_property_add_int32(&props, MQTT_PROP_MAXIMUM_PACKET_SIZE, MAX_PACKET_BYTES);
  }
  if (rc == MOSQ_ERR_SUCCESS) {
    rc = mosquitto_connect_bind_v5(p->mosq, NULL, 0, 0, NULL, props);
    rc = rc == MOSQ_ERR_INVAL ? MOSQ_ERR_SUCCESS : rc;
  }
  mosquitto_property_free_all(&props);
  if (rc != MOSQ_ERR_SUCCESS) {
    EM_ERROR("mqtt: cannot set the maximum packet size: %s", mosq_reason(rc));
    return -ENOMEM;
  }
  return 0;
}

/* Username, password and TLS options, before any connect. Returns 0 or -EINVAL (logged). */
static int apply_security(em_publisher_t *p, const em_publisher_opts_t *o) {
  int rc = MOSQ_ERR_SUCCESS;
  if (opt_str(o->username)) {
    rc = p->sys.username_pw_set(p->sys.ctx, p->mosq, o->username, opt_str(o->password));
    if (rc != MOSQ_ERR_SUCCESS) {
      EM_ERROR("mqtt: cannot set the username: %s", mosq_reason(rc));
      return -EINVAL;
    }
  } else if (opt_str(o->password)) {
    EM_ERROR("mqtt: a password needs a username");
    return -EINVAL;
  }
  if (!o->tls) {
    return 0;
  }
  if (!opt_str(o->tls_ca_file) && !opt_str(o->tls_ca_path)) {
    EM_ERROR("mqtt: TLS needs a CA file or a CA directory");
    return -EINVAL;
  }
  rc = p->sys.tls_set(p->sys.ctx, p->mosq, opt_str(o->tls_ca_file), opt_str(o->tls_ca_path),
                      opt_str(o->tls_cert_file), opt_str(o->tls_key_file), no_passphrase);
  if (rc != MOSQ_ERR_SUCCESS) {
    EM_ERROR("mqtt: TLS setup failed (%s): check that the CA (%s), certificate (%s) and key (%s) "
             "are readable, and that certificate and key are set together",
             mosq_reason(rc), opt_str(o->tls_ca_file) ? o->tls_ca_file : o->tls_ca_path,
             opt_str(o->tls_cert_file) ? o->tls_cert_file : "none",
             opt_str(o->tls_key_file) ? o->tls_key_file : "none");
    return -EINVAL;
  }
  rc = p->sys.tls_opts_set(p->sys.ctx, p->mosq, 1 /* SSL_VERIFY_PEER */, "tlsv1.2", NULL);
  if (rc == MOSQ_ERR_SUCCESS) {
    rc = p->sys.tls_insecure_set(p->sys.ctx, p->mosq, o->tls_insecure);
  }
  if (rc != MOSQ_ERR_SUCCESS) {
    EM_ERROR("mqtt: TLS options rejected: %s", mosq_reason(rc));
    return -EINVAL;
  }
  if (o->tls_insecure) {
    EM_WARN("mqtt: tls_insecure is on: the broker's host name is not checked (testing only)");
  }
  return 0;
}

static bool copy_str(char *dst, size_t cap, const char *src) {
  if (!src || strlen(src) >= cap) {
    return false;
  }
  memcpy(dst, src, strlen(src) + 1);
  return true;
}

int em_publisher_new(em_publisher_t **out, uv_loop_t *loop, const em_publisher_opts_t *opts) {
  static bool lib_ready;
  if (!out || !loop || !opts || opts->backoff_min_ns == 0 ||
      opts->backoff_max_ns < opts->backoff_min_ns) {
    return -EINVAL;
  }
  em_publisher_t *p = calloc(1, sizeof(*p));
  if (!p) {
    return -ENOMEM;
  }
  if (!copy_str(p->host, sizeof(p->host), opts->host) ||
      !copy_str(p->client_id, sizeof(p->client_id), opts->client_id) ||
      !copy_str(p->prefix, sizeof(p->prefix), opts->prefix)) {
    free(p);
    return -EINVAL;
  }
  p->opts = *opts;
  p->opts.host = p->host;
  p->opts.client_id = p->client_id;
  p->opts.prefix = p->prefix;
  p->opts.tls_ca_file = NULL; /* Borrowed for this call only (see publisher.h). */
  p->opts.tls_ca_path = NULL;
  p->opts.tls_cert_file = NULL;
  p->opts.tls_key_file = NULL;
  p->opts.username = NULL;
  p->opts.password = NULL;
  p->loop = loop;
  p->sys = opts->sys ? *opts->sys : em_publisher_sys_mosquitto;
  p->opts.sys = NULL; /* Copied above. */
  p->backoff_ns = opts->backoff_min_ns;
  p->rng = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)time(NULL);
  if (!lib_ready) {
    mosquitto_lib_init();
    lib_ready = true;
  }
  p->mosq = mosquitto_new(p->client_id, true, p);
  if (!p->mosq) {
    free(p);
    return -ENOMEM;
  }
  mosquitto_int_option(p->mosq, MOSQ_OPT_TCP_NODELAY, 1);
  if (opts->limit_packets && limit_packets(p) != 0) {
    mosquitto_destroy(p->mosq);
    free(p);
    return -ENOMEM;
  }
  mosquitto_connect_callback_set(p->mosq, on_connack);
  mosquitto_message_callback_set(p->mosq, on_message);
  mosquitto_publish_callback_set(p->mosq, on_publish);
  mosquitto_log_callback_set(p->mosq, on_mosq_log);
  if (apply_security(p, opts) != 0) {
    mosquitto_destroy(p->mosq);
    free(p);
    return -EINVAL;
  }
  if (opts->will && opts->will_len) {
    char topic[sizeof(p->prefix) + 16];
    snprintf(topic, sizeof(topic), "%s/status", p->prefix);
    int rc = p->sys.will_set(p->sys.ctx, p->mosq, topic, (int)opts->will_len, opts->will,
                             opts->will_qos, true);
    if (rc != MOSQ_ERR_SUCCESS) {
      EM_ERROR("mqtt: cannot set the Last Will on %s: %s", topic, mosq_reason(rc));
      mosquitto_destroy(p->mosq);
      free(p);
      return -EINVAL;
    }
  }
  uv_timer_init(loop, &p->misc_timer);
  uv_timer_init(loop, &p->retry_timer);
  p->misc_timer.data = p;
  p->retry_timer.data = p;
  *out = p;
  return 0;
}

void em_publisher_start(em_publisher_t *p) {
  if (p->state != S_IDLE) {
    return;
  }
  uv_timer_start(&p->misc_timer, on_misc, MISC_PERIOD_MS, MISC_PERIOD_MS);
  resolve(p);
}

bool em_publisher_online(const em_publisher_t *p) {
  return p->state == S_CONNECTED && !ack_overdue(p, uv_now(p->loop));
}

const em_publisher_stats_t *em_publisher_stats(const em_publisher_t *p) {
  return &p->stats;
}

int em_publisher_send(em_publisher_t *p, const char *kind, const uint8_t *buf, size_t len, int qos,
                      bool retain) {
  int mid;
  return em_publisher_send_mid(p, kind, buf, len, qos, retain, &mid);
}

int em_publisher_send_mid(em_publisher_t *p, const char *kind, const uint8_t *buf, size_t len,
                          int qos, bool retain, int *out_mid) {
  if (p->state != S_CONNECTED) {
    p->stats.not_sent++;
    return -ENOTCONN;
  }
  if (len > (size_t)INT32_MAX) {
    return -EMSGSIZE;
  }
  char topic[sizeof(p->prefix) + 32];
  snprintf(topic, sizeof(topic), "%s/%s", p->prefix, kind);
  if (ack_overdue(p, uv_now(p->loop))) {
    p->stats.not_sent++;
    return -ENOTCONN; /* on_misc drops the session within a second. */
  }
  int mid = 0;
  int rc = p->sys.publish(p->sys.ctx, p->mosq, &mid, topic, (int)len, buf, qos, retain);
  if (rc != MOSQ_ERR_SUCCESS) {
    p->stats.not_sent++;
    if (rc == MOSQ_ERR_NO_CONN || rc == MOSQ_ERR_CONN_LOST) {
      fail(p, mosq_reason(rc));
      return -ENOTCONN;
    }
    if (rc != p->publish_refused) { /* Logged when the code changes; not_sent counts the rest. */
      EM_WARN("mqtt: a message on %s was not sent: %s", topic, mosq_reason(rc));
      p->publish_refused = rc;
    }
    return rc == MOSQ_ERR_PAYLOAD_SIZE ? -EMSGSIZE : rc == MOSQ_ERR_NOMEM ? -ENOMEM : -EIO;
  }
  p->publish_refused = 0;
  p->stats.sent++;
  *out_mid = mid;
  if (qos > 0 && p->opts.ack_timeout_ns > 0) {
    if (p->ua_len == UNACKED_MAX) { /* Forget the oldest rather than refuse to track. */
      p->ua_head = (p->ua_head + 1) % UNACKED_MAX;
      p->ua_len--;
    }
    size_t k = (p->ua_head + p->ua_len) % UNACKED_MAX;
    p->unacked[k].mid = mid;
    p->unacked[k].sent_ms = uv_now(p->loop);
    p->ua_len++;
  }
  update_poll(p);
  return 0;
}

/* Closes every handle; done() runs when the last close callback has. */
static void finish_stop(em_publisher_t *p) {
  if (p->resolving) {
    uv_cancel((uv_req_t *)&p->gai); /* on_resolved runs with UV_ECANCELED, then calls us. */
    return;
  }
  if (p->state == S_CLOSED || uv_is_closing((uv_handle_t *)&p->misc_timer)) {
    return;
  }
  close_poll(p);
  p->pending_closes += 2;
  uv_close((uv_handle_t *)&p->misc_timer, on_handle_closed);
  uv_close((uv_handle_t *)&p->retry_timer, on_handle_closed);
}

void em_publisher_stop(em_publisher_t *p, const uint8_t *last, size_t last_len, unsigned timeout_ms,
                       void (*done)(void *), void *ctx) {
  if (p->state == S_CLOSING || p->state == S_CLOSED) {
    return;
  }
  bool connected = p->state == S_CONNECTED;
  if (connected && last) {
    em_publisher_send(p, "status", last, last_len, 1, true);
  }
  p->state = S_CLOSING;
  p->stop_done = done;
  p->stop_ctx = ctx;
  p->stop_deadline_ms = uv_now(p->loop) + timeout_ms;
  uv_timer_stop(&p->retry_timer);
  if (!connected) {
    finish_stop(p);
    return;
  }
  p->sys.disconnect(p->sys.ctx, p->mosq);
  if (!p->sys.want_write(p->sys.ctx, p->mosq)) {
    finish_stop(p);
    return;
  }
  /* Drain: writable events flush the queue; on_misc enforces the deadline. */
  uv_poll_start(&p->poll, UV_WRITABLE, on_poll);
  uv_timer_start(&p->misc_timer, on_misc, 10, 10);
}

void em_publisher_free(em_publisher_t *p) {
  if (!p) {
    return;
  }
  if (p->mosq) {
    mosquitto_destroy(p->mosq);
  }
  free(p);
}
