/*
 * test_publisher.c - the agent's MQTT session (firmware/agent/transport/publisher.c) on a real
 * libuv loop against a broker played by the test over a real loopback TCP socket: the test
 * reads the MQTT 3.1.1 packets libmosquitto sends and answers them by hand, so it can do what
 * a real broker does not on demand (refuse a CONNACK, never acknowledge, drop the connection
 * at a chosen point). The full path against a real mosquitto is tests/integration's.
 *
 * Covered: a refused CONNACK is a failure retried with backoff until one is accepted; a
 * session subscribes to <prefix>/cmd/# and calls on_online; a message goes out on
 * <prefix>/<kind> with its bytes; a command reaches on_command; nothing is sent without a
 * session; a lost connection is counted and reconnected; a QoS 1 publish left without its
 * PUBACK past ack_timeout drops the session; stop publishes the last status retained and
 * sends DISCONNECT. Each test ends with the loop closed cleanly.
 *
 * Through the libmosquitto call table (em_publisher_sys_t), whose calls go to libmosquitto
 * unless the test queued a MOSQ_ERR_* for the next ones: a publish libmosquitto refuses
 * (NOMEM, PAYLOAD_SIZE, ...) is counted, mapped to an errno, logged once per code and never
 * retried, and the session stays up; one that finds the connection gone (CONN_LOST, NO_CONN)
 * and a failing read, write or keepalive drop the session, which reconnects; failing connects
 * back off (never retried before half the doubled delay) and are logged once per reason; a
 * socket missing after the connect is a failure retried; a refused SUBSCRIBE is logged and the
 * session still publishes; each username, TLS or Last Will setting libmosquitto refuses makes
 * em_publisher_new fail with one error line.
 */
#define _GNU_SOURCE

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <mosquitto.h>

#include "log.h"
#include "log_capture.h"
#include "publisher.h"
#include "unit_fx.h"

#define PREFIX "edgemon/v1/dev-1"

/* MQTT 3.1.1 control packet types (the high nibble of the first byte). */
enum { CONNECT = 1, CONNACK = 2, PUBLISH = 3, PUBACK = 4, SUBSCRIBE = 8, PINGREQ = 12 };
enum { DISCONNECT = 14 };

/* The libmosquitto calls a test can make fail (em_publisher_sys_t). */
typedef enum {
  M_USERNAME,
  M_TLS_SET,
  M_TLS_OPTS,
  M_TLS_INSECURE,
  M_WILL,
  M_CONNECT,
  M_SOCKET,
  M_LOOP_READ,
  M_LOOP_WRITE,
  M_LOOP_MISC,
  M_PUBLISH,
  M_SUBSCRIBE,
  M_COUNT
} call_t;

#define MAX_FAULTS   8
#define MAX_CONNECTS 16

typedef struct {
  int rc;  /* The MOSQ_ERR_* returned (-1 for socket). */
  int err; /* errno set with it (MOSQ_ERR_ERRNO). */
} fault_t;

typedef struct {
  uv_loop_t *loop;
  unsigned calls[M_COUNT];
  fault_t faults[M_COUNT][MAX_FAULTS]; /* Answers for the next calls, in order. */
  size_t n_faults[M_COUNT];
  size_t next_fault[M_COUNT];
  uint64_t connect_ms[MAX_CONNECTS]; /* uv_now() at each connect_async, the first ones. */
} fake_mosq_t;

typedef struct {
  uint8_t type;  /* High nibble of the first byte. */
  uint8_t flags; /* Low nibble: for PUBLISH, dup, QoS and retain. */
  uint8_t body[4096];
  size_t len;
} packet_t;

typedef struct {
  uv_loop_t loop;
  em_publisher_t *pub;
  int listener; /* 127.0.0.1, an ephemeral port, non-blocking. */
  uint16_t port;
  int conn; /* The publisher's connection as the broker sees it, or -1. */
  uint8_t in[8192];
  size_t in_len;
  unsigned online_calls;
  char command[64];
  char command_payload[64];
  unsigned commands;
  unsigned stopped;
  fake_mosq_t fake;
} fx_t;

static void on_online(void *ctx) {
  ((fx_t *)ctx)->online_calls++;
}

static void on_command(void *ctx, const char *name, const uint8_t *payload, size_t len) {
  fx_t *fx = ctx;
  fx->commands++;
  snprintf(fx->command, sizeof(fx->command), "%s", name);
  snprintf(fx->command_payload, sizeof(fx->command_payload), "%.*s", (int)len,
           (const char *)payload);
}

static void on_stopped(void *ctx) {
  ((fx_t *)ctx)->stopped++;
}

static void sleep_ms(long ms) {
  nanosleep(&(struct timespec){.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000}, NULL);
}

static int setup(void **state) {
  fx_t *fx = calloc(1, sizeof(*fx));
  assert_non_null(fx);
  assert_int_equal(uv_loop_init(&fx->loop), 0);
  fx->listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  assert_true(fx->listener >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(fx->listener, (struct sockaddr *)&sa, sizeof(sa)), 0);
  assert_int_equal(listen(fx->listener, 4), 0);
  socklen_t len = sizeof(sa);
  assert_int_equal(getsockname(fx->listener, (struct sockaddr *)&sa, &len), 0);
  fx->port = ntohs(sa.sin_port);
  fx->conn = -1;
  em_log_set_level(EM_LOG_ERROR);
  *state = fx;
  return 0;
}

static void stop_publisher(fx_t *fx) {
  em_publisher_stop(fx->pub, NULL, 0, 200, on_stopped, fx);
  uv_run(&fx->loop, UV_RUN_DEFAULT);
  assert_int_equal(fx->stopped, 1);
  em_publisher_free(fx->pub);
  fx->pub = NULL;
}

static int teardown(void **state) {
  fx_t *fx = *state;
  if (fx->conn >= 0) {
    close(fx->conn);
    fx->conn = -1;
  }
  if (fx->pub) {
    stop_publisher(fx);
  }
  close(fx->listener);
  assert_int_equal(uv_loop_close(&fx->loop), 0); /* Every handle was closed. */
  free(fx);
  return 0;
}

static em_publisher_opts_t opts_for(fx_t *fx, uint64_t ack_timeout_ns) {
  em_publisher_opts_t o = {.host = "127.0.0.1",
                           .port = fx->port,
                           .client_id = "dev-1",
                           .prefix = PREFIX,
                           .keepalive_s = 60,
                           .backoff_min_ns = 20000000u, /* 20 ms */
                           .backoff_max_ns = 40000000u,
                           .on_online = on_online,
                           .on_command = on_command,
                           .ctx = fx,
                           .ack_timeout_ns = ack_timeout_ns};
  return o;
}

static void start(fx_t *fx, uint64_t ack_timeout_ns) {
  em_publisher_opts_t o = opts_for(fx, ack_timeout_ns);
  assert_int_equal(em_publisher_new(&fx->pub, &fx->loop, &o), 0);
  em_publisher_start(fx->pub);
}

/* Runs the loop until the publisher connects to the listener (at most 5 s). */
static void accept_connection(fx_t *fx) {
  for (int i = 0; i < 5000; i++) {
    uv_run(&fx->loop, UV_RUN_NOWAIT);
    int c = accept4(fx->listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c >= 0) {
      fx->conn = c;
      fx->in_len = 0;
      return;
    }
    assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
    sleep_ms(1);
  }
  fail_msg("the publisher never connected");
}

/* A whole packet at the start of fx->in: its size, or 0 when more bytes are needed. */
static size_t whole_packet(const fx_t *fx, packet_t *out) {
  size_t remaining = 0;
  size_t at = 1;
  for (unsigned shift = 0;; shift += 7, at++) {
    if (at >= fx->in_len) {
      return 0;
    }
    remaining |= (size_t)(fx->in[at] & 0x7f) << shift;
    if (!(fx->in[at] & 0x80)) {
      break;
    }
    assert_true(shift < 21);
  }
  at++;
  if (fx->in_len < at + remaining) {
    return 0;
  }
  assert_true(remaining <= sizeof(out->body));
  out->type = fx->in[0] >> 4;
  out->flags = fx->in[0] & 0x0f;
  memcpy(out->body, fx->in + at, remaining);
  out->len = remaining;
  return at + remaining;
}

/*
 * Runs the loop until the publisher sends a packet of `type`, answering PINGREQ and skipping
 * other types, and returns it in *out (at most 5 s). Returns false when the connection closed.
 */
static bool read_packet(fx_t *fx, uint8_t type, packet_t *out) {
  for (int i = 0; i < 5000; i++) {
    size_t n = whole_packet(fx, out);
    if (n > 0) {
      memmove(fx->in, fx->in + n, fx->in_len - n);
      fx->in_len -= n;
      if (out->type == type) {
        return true;
      }
      if (out->type == PINGREQ) {
        assert_int_equal(write(fx->conn, "\xd0\x00", 2), 2);
      }
      continue;
    }
    uv_run(&fx->loop, UV_RUN_NOWAIT);
    ssize_t got = recv(fx->conn, fx->in + fx->in_len, sizeof(fx->in) - fx->in_len, 0);
    if (got == 0) {
      return false;
    }
    if (got < 0) {
      assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
      sleep_ms(1);
      continue;
    }
    fx->in_len += (size_t)got;
  }
  fail_msg("no packet of type %u from the publisher", type);
  return false;
}

static void send_bytes(fx_t *fx, const void *buf, size_t len) {
  assert_int_equal(write(fx->conn, buf, len), (ssize_t)len);
}

/* Reads the CONNECT and answers CONNACK with return code `rc`. */
static void answer_connect(fx_t *fx, uint8_t rc) {
  packet_t p;
  assert_true(read_packet(fx, CONNECT, &p));
  uint8_t connack[4] = {CONNACK << 4, 2, 0, rc};
  send_bytes(fx, connack, sizeof(connack));
}

/* Runs the loop until cond(fx) holds (at most 5 s). */
static void run_until(fx_t *fx, bool (*cond)(const fx_t *), const char *what) {
  for (int i = 0; i < 5000; i++) {
    uv_run(&fx->loop, UV_RUN_NOWAIT);
    if (cond(fx)) {
      return;
    }
    sleep_ms(1);
  }
  fail_msg("never %s", what);
}

static bool online(const fx_t *fx) {
  return em_publisher_online(fx->pub);
}

static bool offline(const fx_t *fx) {
  return !em_publisher_online(fx->pub);
}

static bool disconnected(const fx_t *fx) {
  return em_publisher_stats(fx->pub)->disconnects >= 1;
}

static bool failed_once(const fx_t *fx) {
  return em_publisher_stats(fx->pub)->failures >= 1;
}

static bool got_command(const fx_t *fx) {
  return fx->commands > 0;
}

/* The topic of a PUBLISH (or of a SUBSCRIBE's first filter, at `at`) as a C string. */
static void topic_of(const packet_t *p, size_t at, char *out, size_t cap) {
  assert_true(p->len >= at + 2);
  size_t n = (size_t)p->body[at] << 8 | p->body[at + 1];
  assert_true(at + 2 + n <= p->len && n < cap);
  memcpy(out, p->body + at + 2, n);
  out[n] = '\0';
}

/* Accepts, answers CONNACK 0, reads the SUBSCRIBE and checks its filter; the session is up. */
static void connect_session(fx_t *fx) {
  accept_connection(fx);
  answer_connect(fx, 0);
  packet_t p;
  assert_true(read_packet(fx, SUBSCRIBE, &p));
  char filter[128];
  topic_of(&p, 2, filter, sizeof(filter)); /* After the packet identifier. */
  assert_string_equal(filter, PREFIX "/cmd/#");
  uint8_t suback[5] = {0x90, 3, p.body[0], p.body[1], 1};
  send_bytes(fx, suback, sizeof(suback));
  run_until(fx, online, "online");
}

static void a_refused_connack_is_a_failure_and_is_retried(void **state) {
  fx_t *fx = *state;
  start(fx, 0);
  accept_connection(fx);
  answer_connect(fx, 5); /* Not authorised. */
  run_until(fx, failed_once, "counted the refusal");
  assert_false(em_publisher_online(fx->pub));
  assert_int_equal(fx->online_calls, 0);
  close(fx->conn);
  fx->conn = -1;
  connect_session(fx); /* Retried after the backoff; accepted this time. */
  assert_int_equal(fx->online_calls, 1);
  assert_int_equal(em_publisher_stats(fx->pub)->connects, 1);
  assert_int_equal(em_publisher_stats(fx->pub)->failures, 1);
}

static void nothing_is_sent_without_a_session(void **state) {
  fx_t *fx = *state;
  start(fx, 0);
  const uint8_t msg[] = {1, 2, 3};
  assert_int_equal(em_publisher_send(fx->pub, "data", msg, sizeof(msg), 1, false), -ENOTCONN);
  assert_int_equal(em_publisher_stats(fx->pub)->not_sent, 1);
  assert_int_equal(em_publisher_stats(fx->pub)->sent, 0);
}

static void a_message_goes_out_on_prefix_kind_and_a_command_comes_in(void **state) {
  fx_t *fx = *state;
  start(fx, 0);
  connect_session(fx);
  const uint8_t msg[] = {0xa1, 0x00, 0x01, 0xff};
  assert_int_equal(em_publisher_send(fx->pub, "data", msg, sizeof(msg), 0, false), 0);
  packet_t p;
  assert_true(read_packet(fx, PUBLISH, &p));
  char topic[128];
  topic_of(&p, 0, topic, sizeof(topic));
  assert_string_equal(topic, PREFIX "/data");
  size_t at = 2 + strlen(topic); /* QoS 0: no packet identifier. */
  assert_int_equal((p.flags >> 1) & 3, 0);
  assert_int_equal(p.len - at, sizeof(msg));
  assert_memory_equal(p.body + at, msg, sizeof(msg));
  assert_int_equal(em_publisher_stats(fx->pub)->sent, 1);

  const char cmd_topic[] = PREFIX "/cmd/rebirth";
  uint8_t cmd[64] = {PUBLISH << 4, (uint8_t)(2 + strlen(cmd_topic) + 2), 0,
                     (uint8_t)strlen(cmd_topic)};
  memcpy(cmd + 4, cmd_topic, strlen(cmd_topic));
  memcpy(cmd + 4 + strlen(cmd_topic), "go", 2);
  send_bytes(fx, cmd, 4 + strlen(cmd_topic) + 2);
  run_until(fx, got_command, "got the command");
  assert_string_equal(fx->command, "rebirth");
  assert_string_equal(fx->command_payload, "go");
}

static void a_lost_connection_is_counted_and_reconnected(void **state) {
  fx_t *fx = *state;
  start(fx, 0);
  connect_session(fx);
  close(fx->conn);
  fx->conn = -1;
  run_until(fx, offline, "noticed the loss");
  assert_int_equal(em_publisher_stats(fx->pub)->disconnects, 1);
  const uint8_t msg[] = {1};
  assert_int_equal(em_publisher_send(fx->pub, "data", msg, sizeof(msg), 0, false), -ENOTCONN);
  connect_session(fx);
  assert_int_equal(em_publisher_stats(fx->pub)->connects, 2);
  assert_int_equal(fx->online_calls, 2);
}

static void a_publish_never_acknowledged_drops_the_session(void **state) {
  fx_t *fx = *state;
  start(fx, 50000000u); /* 50 ms */
  connect_session(fx);
  const uint8_t msg[] = {7, 7};
  assert_int_equal(em_publisher_send(fx->pub, "state", msg, sizeof(msg), 1, false), 0);
  packet_t p;
  assert_true(read_packet(fx, PUBLISH, &p));
  assert_int_equal((p.flags >> 1) & 3, 1); /* QoS 1; the broker here never sends PUBACK. */
  run_until(fx, disconnected, "dropped the silent session");
  assert_false(em_publisher_online(fx->pub));
  /* The broker sees the connection end; after reconnecting, the message comes again. */
  while (read_packet(fx, PINGREQ, &p)) {
  }
  close(fx->conn);
  fx->conn = -1;
  accept_connection(fx);
  answer_connect(fx, 0);
  assert_true(read_packet(fx, PUBLISH, &p));
  char topic[128];
  topic_of(&p, 0, topic, sizeof(topic));
  assert_string_equal(topic, PREFIX "/state");
  assert_memory_equal(p.body + p.len - sizeof(msg), msg, sizeof(msg));
}

static void stop_publishes_the_last_status_retained_and_disconnects(void **state) {
  fx_t *fx = *state;
  start(fx, 0);
  connect_session(fx);
  const uint8_t last[] = {0xf4};
  em_publisher_stop(fx->pub, last, sizeof(last), 2000, on_stopped, fx);
  packet_t p;
  assert_true(read_packet(fx, PUBLISH, &p));
  char topic[128];
  topic_of(&p, 0, topic, sizeof(topic));
  assert_string_equal(topic, PREFIX "/status");
  assert_int_equal(p.flags & 1, 1); /* Retained. */
  size_t at = 2 + strlen(topic) + (((p.flags >> 1) & 3) ? 2 : 0);
  assert_int_equal(p.len - at, sizeof(last));
  assert_memory_equal(p.body + at, last, sizeof(last));
  assert_true(read_packet(fx, DISCONNECT, &p));
  uv_run(&fx->loop, UV_RUN_DEFAULT);
  assert_int_equal(fx->stopped, 1);
  em_publisher_free(fx->pub);
  fx->pub = NULL;
}

/* ---- Through the libmosquitto call table ---- */

/* Counts a call; true with *rc (and errno) when a fault was queued for it. */
static bool faulted(fake_mosq_t *f, call_t c, int *rc) {
  f->calls[c]++;
  if (f->next_fault[c] == f->n_faults[c]) {
    return false;
  }
  const fault_t *fa = &f->faults[c][f->next_fault[c]++];
  errno = fa->err;
  *rc = fa->rc;
  return true;
}

/* Queues `n` answers rc (errno err) for the next calls of c. */
static void queue_fault(fx_t *fx, call_t c, int rc, int err, size_t n) {
  fake_mosq_t *f = &fx->fake;
  if (f->next_fault[c] == f->n_faults[c]) { /* All answered: the queue starts again. */
    f->next_fault[c] = 0;
    f->n_faults[c] = 0;
  }
  for (size_t i = 0; i < n; i++) {
    assert_true(f->n_faults[c] < MAX_FAULTS);
    f->faults[c][f->n_faults[c]++] = (fault_t){rc, err};
  }
}

#define REAL em_publisher_sys_mosquitto

static int fake_username_pw_set(void *ctx, struct mosquitto *m, const char *username,
                                const char *password) {
  int rc;
  return faulted(ctx, M_USERNAME, &rc) ? rc : REAL.username_pw_set(NULL, m, username, password);
}

static int fake_tls_set(void *ctx, struct mosquitto *m, const char *ca_file, const char *ca_path,
                        const char *cert_file, const char *key_file,
                        int (*pw_callback)(char *buf, int size, int rwflag, void *userdata)) {
  int rc;
  return faulted(ctx, M_TLS_SET, &rc)
             ? rc
             : REAL.tls_set(NULL, m, ca_file, ca_path, cert_file, key_file, pw_callback);
}

static int fake_tls_opts_set(void *ctx, struct mosquitto *m, int cert_reqs, const char *tls_version,
                             const char *ciphers) {
  int rc;
  return faulted(ctx, M_TLS_OPTS, &rc)
             ? rc
             : REAL.tls_opts_set(NULL, m, cert_reqs, tls_version, ciphers);
}

static int fake_tls_insecure_set(void *ctx, struct mosquitto *m, bool value) {
  int rc;
  return faulted(ctx, M_TLS_INSECURE, &rc) ? rc : REAL.tls_insecure_set(NULL, m, value);
}

static int fake_will_set(void *ctx, struct mosquitto *m, const char *topic, int len,
                         const void *payload, int qos, bool retain) {
  int rc;
  return faulted(ctx, M_WILL, &rc) ? rc : REAL.will_set(NULL, m, topic, len, payload, qos, retain);
}

static int fake_connect_async(void *ctx, struct mosquitto *m, const char *host, int port,
                              int keepalive_s) {
  fake_mosq_t *f = ctx;
  if (f->calls[M_CONNECT] < MAX_CONNECTS) {
    f->connect_ms[f->calls[M_CONNECT]] = uv_now(f->loop);
  }
  int rc;
  return faulted(ctx, M_CONNECT, &rc) ? rc : REAL.connect_async(NULL, m, host, port, keepalive_s);
}

static int fake_socket(void *ctx, struct mosquitto *m) {
  int rc;
  return faulted(ctx, M_SOCKET, &rc) ? rc : REAL.socket(NULL, m);
}

static int fake_loop_read(void *ctx, struct mosquitto *m, int max_packets) {
  int rc;
  return faulted(ctx, M_LOOP_READ, &rc) ? rc : REAL.loop_read(NULL, m, max_packets);
}

static int fake_loop_write(void *ctx, struct mosquitto *m, int max_packets) {
  int rc;
  return faulted(ctx, M_LOOP_WRITE, &rc) ? rc : REAL.loop_write(NULL, m, max_packets);
}

static int fake_loop_misc(void *ctx, struct mosquitto *m) {
  int rc;
  return faulted(ctx, M_LOOP_MISC, &rc) ? rc : REAL.loop_misc(NULL, m);
}

/* True while a loop_write fault is queued: libmosquitto writes what it can at once, so only a
   write it left pending reaches loop_write. */
static bool fake_want_write(void *ctx, struct mosquitto *m) {
  fake_mosq_t *f = ctx;
  return f->next_fault[M_LOOP_WRITE] < f->n_faults[M_LOOP_WRITE] || REAL.want_write(NULL, m);
}

static int fake_publish(void *ctx, struct mosquitto *m, int *mid, const char *topic, int len,
                        const void *payload, int qos, bool retain) {
  int rc;
  return faulted(ctx, M_PUBLISH, &rc)
             ? rc
             : REAL.publish(NULL, m, mid, topic, len, payload, qos, retain);
}

static int fake_subscribe(void *ctx, struct mosquitto *m, int *mid, const char *pattern, int qos) {
  int rc;
  return faulted(ctx, M_SUBSCRIBE, &rc) ? rc : REAL.subscribe(NULL, m, mid, pattern, qos);
}

static int fake_disconnect(void *ctx, struct mosquitto *m) {
  (void)ctx;
  return REAL.disconnect(NULL, m);
}

/* The table over fx->fake: libmosquitto itself until a fault is queued. */
static em_publisher_sys_t fake_sys(fx_t *fx) {
  fx->fake.loop = &fx->loop;
  em_publisher_sys_t sys = {
      fake_username_pw_set, fake_tls_set, fake_tls_opts_set, fake_tls_insecure_set, fake_will_set,
      fake_connect_async,   fake_socket,  fake_loop_read,    fake_loop_write,       fake_loop_misc,
      fake_want_write,      fake_publish, fake_subscribe,    fake_disconnect,       &fx->fake};
  return sys;
}

static void start_faked(fx_t *fx, uint64_t backoff_min_ns, uint64_t backoff_max_ns) {
  em_publisher_opts_t o = opts_for(fx, 0);
  em_publisher_sys_t sys = fake_sys(fx);
  o.sys = &sys; /* Copied. */
  o.backoff_min_ns = backoff_min_ns;
  o.backoff_max_ns = backoff_max_ns;
  assert_int_equal(em_publisher_new(&fx->pub, &fx->loop, &o), 0);
  em_publisher_start(fx->pub);
}

typedef struct {
  int rc;   /* What libmosquitto answers the publish. */
  int want; /* What em_publisher_send returns. */
} refusal_row_t;

static const refusal_row_t refusal_rows[] = {
    {MOSQ_ERR_NOMEM, -ENOMEM},        {MOSQ_ERR_PAYLOAD_SIZE, -EMSGSIZE}, {MOSQ_ERR_INVAL, -EIO},
    {MOSQ_ERR_OVERSIZE_PACKET, -EIO}, {MOSQ_ERR_QOS_NOT_SUPPORTED, -EIO},
};

static void a_refused_publish_is_counted_logged_once_and_not_retried(void **state) {
  fx_t *fx = *state;
  em_log_set_level(EM_LOG_WARN);
  start_faked(fx, 20000000u, 40000000u);
  connect_session(fx);
  const uint8_t msg[] = {0x5a, 0xa5};
  uint64_t refused = 0;
  for (size_t i = 0; i < sizeof(refusal_rows) / sizeof(refusal_rows[0]); i++) {
    const refusal_row_t *r = &refusal_rows[i];
    queue_fault(fx, M_PUBLISH, r->rc, 0, 3);
    unsigned calls = fx->fake.calls[M_PUBLISH];
    log_capture_t cap;
    log_capture_start(&cap);
    int got[3];
    for (int k = 0; k < 3; k++) {
      got[k] = em_publisher_send(fx->pub, "data", msg, sizeof(msg), 1, false);
      uv_run(&fx->loop, UV_RUN_NOWAIT);
    }
    char logged[4096];
    log_capture_end(&cap, logged, sizeof(logged));
    for (int k = 0; k < 3; k++) {
      if (got[k] != r->want) {
        fail_msg("%s: send %d returned %d, want %d", mosquitto_strerror(r->rc), k, got[k], r->want);
      }
    }
    refused += 3;
    if (fx->fake.calls[M_PUBLISH] - calls != 3) { /* One call per send: never retried. */
      fail_msg("%s: %u publish calls for 3 sends", mosquitto_strerror(r->rc),
               fx->fake.calls[M_PUBLISH] - calls);
    }
    if (log_capture_count(logged, mosquitto_strerror(r->rc)) != 1) {
      fail_msg("%s: want one line, logged:\n%s", mosquitto_strerror(r->rc), logged);
    }
    assert_int_equal(em_publisher_stats(fx->pub)->not_sent, refused);
    assert_true(em_publisher_online(fx->pub)); /* The session is not at fault. */
  }
  assert_int_equal(em_publisher_stats(fx->pub)->sent, 0);
  assert_int_equal(em_publisher_stats(fx->pub)->disconnects, 0);
  /* The next message goes out, on the same session. */
  assert_int_equal(em_publisher_send(fx->pub, "data", msg, sizeof(msg), 0, false), 0);
  packet_t p;
  assert_true(read_packet(fx, PUBLISH, &p));
  assert_memory_equal(p.body + p.len - sizeof(msg), msg, sizeof(msg));
  assert_int_equal(em_publisher_stats(fx->pub)->sent, 1);
  assert_int_equal(em_publisher_stats(fx->pub)->connects, 1);
}

/* Closes the broker's side of the old connection and brings up a new session. */
static void reconnect(fx_t *fx) {
  close(fx->conn);
  fx->conn = -1;
  connect_session(fx);
}

static void a_publish_that_finds_no_connection_drops_the_session_and_reconnects(void **state) {
  fx_t *fx = *state;
  start_faked(fx, 20000000u, 40000000u);
  connect_session(fx);
  const int codes[] = {MOSQ_ERR_CONN_LOST, MOSQ_ERR_NO_CONN};
  const uint8_t msg[] = {1};
  for (size_t i = 0; i < 2; i++) {
    queue_fault(fx, M_PUBLISH, codes[i], 0, 1);
    assert_int_equal(em_publisher_send(fx->pub, "data", msg, sizeof(msg), 1, false), -ENOTCONN);
    assert_false(em_publisher_online(fx->pub));
    assert_int_equal(em_publisher_stats(fx->pub)->disconnects, i + 1);
    assert_int_equal(em_publisher_send(fx->pub, "data", msg, sizeof(msg), 1, false), -ENOTCONN);
    reconnect(fx);
    assert_int_equal(em_publisher_stats(fx->pub)->connects, i + 2);
  }
  assert_int_equal(fx->online_calls, 3);
  assert_int_equal(em_publisher_stats(fx->pub)->not_sent, 4);
  assert_int_equal(fx->fake.calls[M_PUBLISH], 2); /* Not sent without a session: no call. */
}

/* Sends the publisher a command (a PUBLISH): the socket becomes readable. */
static void poke(fx_t *fx) {
  const char topic[] = PREFIX "/cmd/poke";
  uint8_t cmd[64] = {PUBLISH << 4, (uint8_t)(2 + strlen(topic)), 0, (uint8_t)strlen(topic)};
  memcpy(cmd + 4, topic, strlen(topic));
  send_bytes(fx, cmd, 4 + strlen(topic));
}

static bool two_disconnects(const fx_t *fx) {
  return em_publisher_stats(fx->pub)->disconnects >= 2;
}

static bool three_disconnects(const fx_t *fx) {
  return em_publisher_stats(fx->pub)->disconnects >= 3;
}

static void a_failing_read_write_or_keepalive_drops_the_session_and_reconnects(void **state) {
  fx_t *fx = *state;
  em_log_set_level(EM_LOG_WARN);
  start_faked(fx, 20000000u, 40000000u);
  connect_session(fx);
  log_capture_t cap;
  log_capture_start(&cap);
  /* A read: libmosquitto says the connection is gone. */
  queue_fault(fx, M_LOOP_READ, MOSQ_ERR_ERRNO, ECONNRESET, 1);
  poke(fx);
  run_until(fx, disconnected, "dropped the session on the failing read");
  assert_int_equal(fx->commands, 0); /* The read failed: nothing came through it. */
  reconnect(fx);
  /* A write: a message left pending, the socket writable, the write fails. */
  queue_fault(fx, M_LOOP_WRITE, MOSQ_ERR_ERRNO, EPIPE, 1);
  const uint8_t msg[] = {2};
  assert_int_equal(em_publisher_send(fx->pub, "data", msg, sizeof(msg), 0, false), 0);
  run_until(fx, two_disconnects, "dropped the session on the failing write");
  reconnect(fx);
  /* The keepalive (loop_misc, once a second). */
  queue_fault(fx, M_LOOP_MISC, MOSQ_ERR_KEEPALIVE, 0, 1);
  run_until(fx, three_disconnects, "dropped the session on the keepalive");
  reconnect(fx);
  char logged[8192];
  log_capture_end(&cap, logged, sizeof(logged));
  assert_int_equal(em_publisher_stats(fx->pub)->connects, 4);
  assert_int_equal(fx->online_calls, 4);
  assert_int_equal(em_publisher_stats(fx->pub)->disconnects, 3);
  assert_int_equal(log_capture_count(logged, "lost (" /* ECONNRESET */), 3);
  assert_int_equal(log_capture_count(logged, strerror(ECONNRESET)), 1);
  assert_int_equal(log_capture_count(logged, strerror(EPIPE)), 1);
  assert_int_equal(log_capture_count(logged, "no answer within the keepalive"), 1);
  assert_true(em_publisher_online(fx->pub));
}

static bool five_failures(const fx_t *fx) {
  return em_publisher_stats(fx->pub)->failures >= 5;
}

static void failing_connects_back_off_and_are_logged_once_per_reason(void **state) {
  fx_t *fx = *state;
  em_log_set_level(EM_LOG_WARN);
  const uint64_t min_ms = 8, max_ms = 32;
  queue_fault(fx, M_CONNECT, MOSQ_ERR_ERRNO, ECONNREFUSED, 3);
  queue_fault(fx, M_CONNECT, MOSQ_ERR_TLS, 0, 2);
  log_capture_t cap;
  log_capture_start(&cap);
  start_faked(fx, min_ms * 1000000u, max_ms * 1000000u);
  run_until(fx, five_failures, "failed five times");
  connect_session(fx); /* The sixth attempt is libmosquitto's own. */
  char logged[8192];
  log_capture_end(&cap, logged, sizeof(logged));
  assert_int_equal(em_publisher_stats(fx->pub)->failures, 5);
  assert_int_equal(em_publisher_stats(fx->pub)->connects, 1);
  assert_int_equal(fx->fake.calls[M_CONNECT], 6);
  assert_int_equal(log_capture_count(logged, "unreachable"), 2); /* One per reason. */
  assert_int_equal(log_capture_count(logged, strerror(ECONNREFUSED)), 1);
  assert_int_equal(log_capture_count(logged, "TLS handshake failed"), 1);
  /* Each retry waits at least half its delay (the jitter's floor); the delay doubles from
     backoff_min up to backoff_max. */
  uint64_t delay_ms = min_ms;
  for (unsigned i = 0; i < 5; i++) {
    uint64_t gap = fx->fake.connect_ms[i + 1] - fx->fake.connect_ms[i];
    if (gap < delay_ms / 2) {
      fail_msg("retry %u came %llu ms after the failure, before %llu ms", i + 1,
               (unsigned long long)gap, (unsigned long long)(delay_ms / 2));
    }
    delay_ms = delay_ms * 2 > max_ms ? max_ms : delay_ms * 2;
  }
}

static void a_connect_without_a_socket_is_a_failure_and_is_retried(void **state) {
  fx_t *fx = *state;
  queue_fault(fx, M_SOCKET, -1, 0, 1);
  start_faked(fx, 20000000u, 40000000u);
  run_until(fx, failed_once, "counted the missing socket");
  assert_false(em_publisher_online(fx->pub));
  /* libmosquitto's abandoned connection: the retry closes it and connects again. */
  accept_connection(fx);
  packet_t p;
  while (read_packet(fx, PINGREQ, &p)) {
  }
  close(fx->conn);
  fx->conn = -1;
  connect_session(fx);
  assert_int_equal(em_publisher_stats(fx->pub)->failures, 1);
  assert_int_equal(em_publisher_stats(fx->pub)->connects, 1);
  assert_int_equal(fx->fake.calls[M_CONNECT], 2);
}

/* The session comes up (CONNACK 0) but the SUBSCRIBE to its commands is refused. */
static void a_refused_subscribe_is_logged_and_the_session_still_publishes(void **state) {
  fx_t *fx = *state;
  em_log_set_level(EM_LOG_WARN);
  queue_fault(fx, M_SUBSCRIBE, MOSQ_ERR_NOMEM, 0, 1);
  start_faked(fx, 20000000u, 40000000u);
  accept_connection(fx);
  log_capture_t cap;
  log_capture_start(&cap);
  answer_connect(fx, 0);
  run_until(fx, online, "online");
  char logged[4096];
  log_capture_end(&cap, logged, sizeof(logged));
  assert_int_equal(log_capture_count(logged, "cannot subscribe to " PREFIX "/cmd/#"), 1);
  assert_int_equal(log_capture_count(logged, mosquitto_strerror(MOSQ_ERR_NOMEM)), 1);
  assert_int_equal(fx->fake.calls[M_SUBSCRIBE], 1);
  /* Data matters more than commands: the session stays up and publishes. */
  assert_int_equal(fx->online_calls, 1);
  const uint8_t msg[] = {9};
  assert_int_equal(em_publisher_send(fx->pub, "data", msg, sizeof(msg), 0, false), 0);
  packet_t p;
  assert_true(read_packet(fx, PUBLISH, &p));
  assert_int_equal(em_publisher_stats(fx->pub)->disconnects, 0);
}

typedef struct {
  call_t call;
  int rc;
  const char *line; /* What the one error line says. */
} setup_row_t;

static const setup_row_t setup_rows[] = {
    {M_USERNAME, MOSQ_ERR_NOMEM, "cannot set the username"},
    {M_TLS_SET, MOSQ_ERR_INVAL, "TLS setup failed"},
    {M_TLS_OPTS, MOSQ_ERR_INVAL, "TLS options rejected"},
    {M_TLS_INSECURE, MOSQ_ERR_INVAL, "TLS options rejected"},
    {M_WILL, MOSQ_ERR_NOMEM, "cannot set the Last Will"},
};

static void a_refused_security_or_will_setting_fails_new_with_one_error(void **state) {
  fx_t *fx = *state;
  char ca[] = "/tmp/em-pub-ca-XXXXXX"; /* Readable: libmosquitto reads it only to connect. */
  int fd = mkstemp(ca);
  assert_true(fd >= 0);
  close(fd);
  const uint8_t will[] = {0};
  em_publisher_sys_t sys = fake_sys(fx);
  em_publisher_opts_t o = opts_for(fx, 0);
  o.sys = &sys;
  o.tls = true;
  o.tls_ca_file = ca;
  o.username = "dev-1";
  o.password = "secret";
  o.will = will;
  o.will_len = sizeof(will);
  for (size_t i = 0; i < sizeof(setup_rows) / sizeof(setup_rows[0]); i++) {
    const setup_row_t *r = &setup_rows[i];
    queue_fault(fx, r->call, r->rc, 0, 1);
    unsigned calls = fx->fake.calls[r->call];
    log_capture_t cap;
    log_capture_start(&cap);
    em_publisher_t *pub = NULL;
    int rc = em_publisher_new(&pub, &fx->loop, &o);
    char logged[4096];
    log_capture_end(&cap, logged, sizeof(logged));
    if (rc != -EINVAL || pub != NULL) {
      fail_msg("%s: em_publisher_new returned %d", r->line, rc);
    }
    assert_int_equal(fx->fake.calls[r->call], calls + 1);
    if (log_capture_count(logged, r->line) != 1 || log_capture_count(logged, "error") != 1) {
      fail_msg("%s: want one error line, logged:\n%s", r->line, logged);
    }
  }
  /* Nothing refused: it starts. */
  assert_int_equal(em_publisher_new(&fx->pub, &fx->loop, &o), 0);
  unlink(ca);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      EM_FX(a_refused_connack_is_a_failure_and_is_retried),
      EM_FX(nothing_is_sent_without_a_session),
      EM_FX(a_message_goes_out_on_prefix_kind_and_a_command_comes_in),
      EM_FX(a_lost_connection_is_counted_and_reconnected),
      EM_FX(a_publish_never_acknowledged_drops_the_session),
      EM_FX(stop_publishes_the_last_status_retained_and_disconnects),
      EM_FX(a_refused_publish_is_counted_logged_once_and_not_retried),
      EM_FX(a_publish_that_finds_no_connection_drops_the_session_and_reconnects),
      EM_FX(a_failing_read_write_or_keepalive_drops_the_session_and_reconnects),
      EM_FX(failing_connects_back_off_and_are_logged_once_per_reason),
      EM_FX(a_connect_without_a_socket_is_a_failure_and_is_retried),
      EM_FX(a_refused_subscribe_is_logged_and_the_session_still_publishes),
      EM_FX(a_refused_security_or_will_setting_fails_new_with_one_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
