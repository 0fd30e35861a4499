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

#include "log.h"
#include "publisher.h"

#define PREFIX "edgemon/v1/dev-1"

/* MQTT 3.1.1 control packet types (the high nibble of the first byte). */
enum { CONNECT = 1, CONNACK = 2, PUBLISH = 3, PUBACK = 4, SUBSCRIBE = 8, PINGREQ = 12 };
enum { DISCONNECT = 14 };

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

static void start(fx_t *fx, uint64_t ack_timeout_ns) {
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(a_refused_connack_is_a_failure_and_is_retried, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(nothing_is_sent_without_a_session, setup, teardown),
      cmocka_unit_test_setup_teardown(a_message_goes_out_on_prefix_kind_and_a_command_comes_in,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(a_lost_connection_is_counted_and_reconnected, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_publish_never_acknowledged_drops_the_session, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(stop_publishes_the_last_status_retained_and_disconnects,
                                      setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
