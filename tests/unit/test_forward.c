/*
 * test_forward.c - store and forward (firmware/agent/transport/forward.c) with the real
 * publisher and the real spool on a libuv loop.
 *
 * Broker away (a publisher that never connected): data and state messages, and flight
 * recordings (EM_SPOOL_FLIGHT), go to the spool marked historical (read back and decoded from
 * the file), replay sends nothing, and a stop keeps nothing; without a spool ("off", or a path
 * that cannot be opened) each message is lost and counted. With a real mosquitto on a free
 * loopback port and a libmosquitto subscriber: replay sends replay_per_tick messages per call,
 * the state change first, not retained, then a live message goes out without touching the
 * spool, and what the subscriber receives is exactly that, in that order. Bad arguments are
 * refused. Every test ends with the loop closed cleanly (uv_loop_close returns 0: no handle or
 * request left).
 *
 * Write-ahead (QoS 1): each message is in the spool file when libmosquitto's publish is called
 * (checked from inside that call, through the publisher's sys seam), held in flight until its
 * PUBACK; with the broker stopped (SIGSTOP) a copy of the file opened as a new process would
 * replays every unacknowledged message, historical, in order; acks out of order never move
 * `done` past an unacknowledged record; a spool past capacity drops and counts as before; and
 * write_ahead off leaves live messages out of the spool.
 */
#define _XOPEN_SOURCE 700 /* POSIX 2008 plus XSI, for nftw() in tmp_tree.h */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <mosquitto.h>
#include <uv.h>

#include "edgemon/flight.h"
#include "forward.h"
#include "tmp_tree.h"
#include "vectors.h"

#define MOSQUITTO    "/usr/sbin/mosquitto"
#define PREFIX       "edgemon/v1/fwd-test"
#define WAIT_NS      (10u * 1000000000ull) /* Bounded waits: 10 s at most. */
#define QOS          1
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

typedef struct {
  uv_loop_t loop;
  em_publisher_t *pub;
  em_forward_t *fwd;
  char dir[EM_TMP_TREE_ROOT_BYTES];
  char spool[EM_TMP_TREE_ROOT_BYTES + 16];
  bool pub_stopped;
  /* Seen from inside libmosquitto's publish (the sys seam): */
  em_publisher_sys_t sys;
  size_t publishes;
  uint64_t held_at_publish[16]; /* The spool's held records when publish i was called. */
  int mids[16];
} fixture_t;

static void on_ack(void *ctx, int mid) {
  fixture_t *fx = ctx;
  em_forward_on_ack(fx->fwd, mid);
}

/* The real mosquitto_publish, after noting what the spool holds in flight at that moment. */
static int observed_publish(void *ctx, struct mosquitto *m, int *mid, const char *topic, int len,
                            const void *payload, int qos, bool retain) {
  fixture_t *fx = ctx;
  em_forward_stats_t st;
  em_forward_stats(fx->fwd, &st);
  int rc = em_publisher_sys_mosquitto.publish(NULL, m, mid, topic, len, payload, qos, retain);
  if (fx->publishes < ARRAY_LEN(fx->mids)) {
    fx->held_at_publish[fx->publishes] = st.spool.inflight;
    fx->mids[fx->publishes] = mid ? *mid : 0;
  }
  fx->publishes++;
  return rc;
}

/* A loopback port nobody listens on now. */
static uint16_t free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  socklen_t len = sizeof(sa);
  assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
  close(fd);
  return ntohs(sa.sin_port);
}

/* A publisher for 127.0.0.1:port (not started: offline until em_publisher_start). */
static void open_fixture_wa(fixture_t *fx, uint16_t port, const char *spool_path,
                            uint32_t replay_per_tick, bool write_ahead) {
  memset(fx, 0, sizeof(*fx));
  fx->sys = em_publisher_sys_mosquitto;
  fx->sys.publish = observed_publish;
  fx->sys.ctx = fx;
  assert_int_equal(uv_loop_init(&fx->loop), 0);
  em_tmp_tree_make(fx->dir, "em-forward-test");
  snprintf(fx->spool, sizeof(fx->spool), "%s/spool", fx->dir);
  em_publisher_opts_t po = {.host = "127.0.0.1",
                            .port = port,
                            .client_id = "fwd-test",
                            .prefix = PREFIX,
                            .keepalive_s = 30,
                            .backoff_min_ns = 50000000u,
                            .backoff_max_ns = 200000000u,
                            .on_ack = on_ack,
                            .ctx = fx,
                            .sys = &fx->sys};
  assert_int_equal(em_publisher_new(&fx->pub, &fx->loop, &po), 0);
  em_forward_opts_t fo = {.spool_path = spool_path ? spool_path : fx->spool,
                          .spool_bytes = EM_SPOOL_MIN_CAPACITY,
                          .sync_interval_ns = 1,
                          .replay_per_tick = replay_per_tick,
                          .qos_data = QOS,
                          .qos_state = QOS,
                          .write_ahead = write_ahead};
  assert_int_equal(em_forward_new(&fx->fwd, &fx->loop, fx->pub, &fo), 0);
}

static void open_fixture(fixture_t *fx, uint16_t port, const char *spool_path,
                         uint32_t replay_per_tick) {
  open_fixture_wa(fx, port, spool_path, replay_per_tick, false);
}

static void on_pub_stopped(void *ctx) {
  ((fixture_t *)ctx)->pub_stopped = true;
}

/* Stops the publisher, runs the loop dry, frees, and asserts the loop closes cleanly; the
 * spool's directory stays when `keep_dir` (the caller removes it). */
/* The spool file at `path` opened again, as the agent's next start would (asserts). */
static em_spool_t *spool_at(const char *path) {
  em_spool_t *sp = NULL;
  char err[256];
  assert_int_equal(em_spool_open(&sp, path, EM_SPOOL_MIN_CAPACITY, err, sizeof(err)), 0);
  return sp;
}

/* Closes a spool from spool_at() and removes the directory close_fixture() kept. */
static void close_spool(em_spool_t *sp, const fixture_t *fx) {
  em_spool_close(sp);
  em_tmp_tree_remove(fx->dir);
}

static void close_fixture(fixture_t *fx, bool keep_dir) {
  em_publisher_stop(fx->pub, NULL, 0, 1000, on_pub_stopped, fx);
  assert_int_equal(uv_run(&fx->loop, UV_RUN_DEFAULT), 0);
  assert_true(fx->pub_stopped);
  em_forward_free(fx->fwd);
  em_publisher_free(fx->pub);
  assert_int_equal(uv_loop_close(&fx->loop), 0);
  if (!keep_dir) {
    em_tmp_tree_remove(fx->dir);
  }
}

/* Encodes a data message (seq) or a state message (level) into buf; returns its length. */
static size_t encode(em_msg_t *msg, bool state, uint32_t n, uint8_t *buf, size_t cap) {
  if (state) {
    *msg = (em_msg_t){.kind = EM_MSG_STATE,
                      .u.state = {.head = {.time_ns = 1000 + n, .session = 7},
                                  .level = (em_level_t)n,
                                  .prev_level = EM_LEVEL_NOMINAL}};
  } else {
    *msg = (em_msg_t){
        .kind = EM_MSG_DATA,
        .u.data = {.head = {.time_ns = 1000 + n, .session = 7}, .seq = n, .window_ns = 1}};
  }
  size_t len = 0;
  assert_int_equal(em_proto_encode(msg, buf, cap, &len), 0);
  return len;
}

/* Publishes a fresh data (or state) message through the forwarder; returns its result. */
static int publish(fixture_t *fx, bool state, uint32_t n, bool may_spool) {
  uint8_t buf[EM_PROTO_MAX_MESSAGE_BYTES];
  em_msg_t msg;
  size_t len = encode(&msg, state, n, buf, sizeof(buf));
  return em_forward_publish(fx->fwd, &msg, buf, sizeof(buf), len, may_spool);
}

static em_forward_stats_t stats(const fixture_t *fx) {
  em_forward_stats_t st;
  em_forward_stats(fx->fwd, &st);
  return st;
}

/* Decodes one payload, asserting its kind, historical flag and seq (data) or level (state). */
static void expect_msg(const uint8_t *p, size_t n, bool state, uint32_t want, bool historical) {
  uint8_t scratch[4096];
  em_msg_t m;
  size_t off = 0;
  assert_int_equal(em_proto_decode(p, n, &m, scratch, sizeof(scratch), &off), 0);
  if (state) {
    assert_int_equal(m.kind, EM_MSG_STATE);
    assert_int_equal(m.u.state.level, want);
    assert_int_equal(m.u.state.historical, historical);
  } else {
    assert_int_equal(m.kind, EM_MSG_DATA);
    assert_int_equal(m.u.data.seq, want);
    assert_int_equal(m.u.data.historical, historical);
  }
}

/* ---- broker away ---- */

static void broker_away_spools_data_and_state_marked_historical(void **state) {
  (void)state;
  fixture_t fx;
  open_fixture(&fx, free_port(), NULL, 8);
  assert_int_equal(publish(&fx, false, 41, true), 0);
  assert_int_equal(publish(&fx, true, EM_LEVEL_WARN, true), 0);
  assert_int_equal(publish(&fx, false, 42, true), 0);
  em_forward_stats_t st = stats(&fx);
  assert_true(st.spooling);
  assert_int_equal(st.spool.pending, 3);
  assert_int_equal(st.lost, 0);
  assert_int_equal(em_forward_replay(fx.fwd), 0); /* no session: nothing leaves the spool */
  assert_int_equal(stats(&fx).spool.pending, 3);
  em_forward_maybe_sync(fx.fwd, 1); /* fdatasync on the worker; close_fixture runs it */
  close_fixture(&fx, true);

  /* The file holds them, state first (spool.h's replay order), each marked historical. */
  em_spool_t *sp = spool_at(fx.spool);
  static const struct {
    em_spool_kind_t kind;
    uint32_t want;
  } order[] = {{EM_SPOOL_STATE, EM_LEVEL_WARN}, {EM_SPOOL_DATA, 41}, {EM_SPOOL_DATA, 42}};
  uint8_t buf[EM_PROTO_MAX_MESSAGE_BYTES];
  for (size_t i = 0; i < ARRAY_LEN(order); i++) {
    em_spool_kind_t kind;
    int n = em_spool_peek(sp, &kind, buf, sizeof(buf));
    assert_true(n > 0);
    assert_int_equal(kind, order[i].kind);
    expect_msg(buf, (size_t)n, kind == EM_SPOOL_STATE, order[i].want, true);
    assert_int_equal(em_spool_pop(sp), 0);
  }
  em_spool_kind_t kind;
  assert_int_equal(em_spool_peek(sp, &kind, buf, sizeof(buf)), 0);
  close_spool(sp, &fx);
}

/* A flight recording the broker cannot take goes to the spool as EM_SPOOL_FLIGHT, marked
 * historical and otherwise the same; on a clean stop it is not kept; bytes that are not a
 * recording are lost and counted. */
static void broker_away_spools_a_flight_recording_marked_historical(void **state) {
  (void)state;
  fixture_t fx;
  open_fixture(&fx, free_port(), NULL, 8);
  size_t n_rows = 0;
  const em_flight_vector_t *row = &em_flight_vectors(&n_rows)[1];
  assert_string_equal(row->name, "flight_command");
  const em_flight_t f = row->flight;
  uint8_t buf[1024];
  size_t len = 0;
  assert_int_equal(em_flight_encode(&f, buf, sizeof(buf), &len), 0);
  assert_int_equal(em_forward_publish_flight(fx.fwd, buf, len, false), -ENOTCONN);
  assert_int_equal(em_forward_publish_flight(fx.fwd, buf, len, true), 0);
  assert_int_equal(em_forward_publish_flight(NULL, buf, len, true), -EINVAL);
  assert_int_equal(em_forward_publish_flight(fx.fwd, NULL, len, true), -EINVAL);
  assert_int_equal(em_forward_publish_flight(fx.fwd, buf, 0, true), -EINVAL);
  const uint8_t junk[] = {0xa1, 0x00, 0x01};
  assert_true(em_forward_publish_flight(fx.fwd, junk, sizeof(junk), true) != 0);
  em_forward_stats_t st = stats(&fx);
  assert_int_equal(st.spool.pending, 1);
  assert_int_equal(st.lost, 1);
  em_forward_maybe_sync(fx.fwd, 1);
  close_fixture(&fx, true);

  em_spool_t *sp = spool_at(fx.spool);
  uint8_t got[1024];
  em_spool_kind_t kind;
  int n = em_spool_peek(sp, &kind, got, sizeof(got));
  assert_true(n > 0);
  assert_int_equal(kind, EM_SPOOL_FLIGHT);
  uint8_t scratch[4096];
  em_flight_t back;
  assert_int_equal(em_flight_decode(got, (size_t)n, &back, scratch, sizeof(scratch), NULL), 0);
  assert_true(back.historical);
  assert_int_equal(back.n_spans, f.n_spans);
  assert_int_equal(back.spans[0].frame_id, f.spans[0].frame_id);
  assert_int_equal(back.trigger.cause, EM_FLIGHT_COMMAND);
  close_spool(sp, &fx);
}

/* A clean stop publishes what it can and keeps nothing: not spooled, not counted as lost. */
static void stopping_keeps_nothing(void **state) {
  (void)state;
  fixture_t fx;
  open_fixture(&fx, free_port(), NULL, 8);
  assert_int_equal(publish(&fx, true, EM_LEVEL_CRITICAL, false), -ENOTCONN);
  assert_int_equal(publish(&fx, false, 1, false), -ENOTCONN);
  em_forward_stats_t st = stats(&fx);
  assert_true(st.spooling);
  assert_int_equal(st.spool.pending, 0);
  assert_int_equal(st.spool.appended, 0);
  assert_int_equal(st.lost, 0);
  close_fixture(&fx, false);
}

/* Without a spool, each message the broker cannot take is lost and counted. */
static void without_a_spool_messages_are_lost_and_counted(void **state) {
  (void)state;
  static const char *const paths[] = {"off", "/nonexistent-em-dir/spool"};
  for (size_t i = 0; i < ARRAY_LEN(paths); i++) {
    fixture_t fx;
    open_fixture(&fx, free_port(), paths[i], 8);
    assert_int_equal(publish(&fx, false, 1, true), -ENOSPC);
    assert_int_equal(publish(&fx, true, EM_LEVEL_WARN, true), -ENOSPC);
    em_forward_stats_t st = stats(&fx);
    assert_false(st.spooling);
    assert_int_equal(st.lost, 2);
    assert_int_equal(em_forward_replay(fx.fwd), 0);
    em_forward_maybe_sync(fx.fwd, 1); /* nothing to sync: no request left on the loop */
    close_fixture(&fx, false);
  }
}

static void bad_arguments_are_refused(void **state) {
  (void)state;
  fixture_t fx;
  open_fixture(&fx, free_port(), NULL, 8);
  uint8_t buf[64];
  em_msg_t birth = {.kind = EM_MSG_STATUS, .u.status = {.head = {.time_ns = 1}, .online = true}};
  size_t len = 0;
  assert_int_equal(em_proto_encode(&birth, buf, sizeof(buf), &len), 0);
  assert_int_equal(em_forward_publish(fx.fwd, &birth, buf, sizeof(buf), len, true), -EINVAL);
  assert_int_equal(em_forward_publish(NULL, &birth, buf, sizeof(buf), len, true), -EINVAL);
  assert_int_equal(em_forward_publish(fx.fwd, NULL, buf, sizeof(buf), len, true), -EINVAL);
  assert_int_equal(stats(&fx).spool.pending, 0);
  assert_int_equal(stats(&fx).lost, 0);

  em_forward_t *f = NULL;
  em_forward_opts_t fo = {.spool_path = "off"};
  assert_int_equal(em_forward_new(NULL, &fx.loop, fx.pub, &fo), -EINVAL);
  assert_int_equal(em_forward_new(&f, NULL, fx.pub, &fo), -EINVAL);
  assert_int_equal(em_forward_new(&f, &fx.loop, NULL, &fo), -EINVAL);
  assert_int_equal(em_forward_new(&f, &fx.loop, fx.pub, NULL), -EINVAL);
  char longpath[EM_FORWARD_MAX_PATH + 1];
  memset(longpath, 'a', sizeof(longpath) - 1);
  longpath[sizeof(longpath) - 1] = '\0';
  fo.spool_path = longpath;
  assert_int_equal(em_forward_new(&f, &fx.loop, fx.pub, &fo), -ENAMETOOLONG);
  assert_null(f);
  assert_int_equal(em_forward_replay(NULL), 0);
  em_forward_free(NULL);
  close_fixture(&fx, false);
}

/* ---- a real broker ---- */

typedef struct {
  bool subscribed;
  size_t n;
  struct {
    char topic[128];
    bool retain;
    uint8_t payload[512];
    size_t len;
  } got[8];
} received_t;

static void on_sub(struct mosquitto *m, void *ctx, int mid, int n, const int *granted) {
  (void)m;
  (void)mid;
  (void)n;
  (void)granted;
  ((received_t *)ctx)->subscribed = true;
}

static void on_message(struct mosquitto *m, void *ctx, const struct mosquitto_message *msg) {
  (void)m;
  received_t *r = ctx;
  if (r->n >= ARRAY_LEN(r->got) || (size_t)msg->payloadlen > sizeof(r->got[0].payload)) {
    return;
  }
  snprintf(r->got[r->n].topic, sizeof(r->got[0].topic), "%s", msg->topic);
  r->got[r->n].retain = msg->retain;
  memcpy(r->got[r->n].payload, msg->payload, (size_t)msg->payloadlen);
  r->got[r->n].len = (size_t)msg->payloadlen;
  r->n++;
}

/* Starts mosquitto on 127.0.0.1:port with its config and log in dir; returns its pid. */
static pid_t start_broker(const char *dir, uint16_t port) {
  char conf[EM_TMP_TREE_ROOT_BYTES + 32];
  char text[160];
  snprintf(text, sizeof(text), "listener %u 127.0.0.1\nallow_anonymous true\npersistence false\n",
           (unsigned)port);
  em_tmp_tree_put(dir, "mosquitto.conf", text);
  snprintf(conf, sizeof(conf), "%s/mosquitto.conf", dir);
  char *argv[] = {(char *)MOSQUITTO, (char *)"-c", conf, NULL};
  char log[EM_TMP_TREE_ROOT_BYTES + 32];
  snprintf(log, sizeof(log), "%s/mosquitto.log", dir);
  posix_spawn_file_actions_t fa;
  assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
  assert_int_equal(
      posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600), 0);
  assert_int_equal(posix_spawn_file_actions_adddup2(&fa, 1, 2), 0);
  pid_t pid = 0;
  extern char **environ;
  assert_int_equal(posix_spawn(&pid, MOSQUITTO, &fa, NULL, argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

/* Runs the subscriber and the loop until cond or WAIT_NS; fails the test on timeout. */
#define PUMP_UNTIL(fx, sub, cond, what)                                                            \
  do {                                                                                             \
    uint64_t deadline_ = uv_hrtime() + WAIT_NS;                                                    \
    while (!(cond)) {                                                                              \
      if (uv_hrtime() > deadline_) {                                                               \
        fail_msg("timed out waiting for %s", what);                                                \
      }                                                                                            \
      mosquitto_loop(sub, 10, 1);                                                                  \
      uv_run(&(fx)->loop, UV_RUN_NOWAIT);                                                          \
    }                                                                                              \
  } while (0)

/* A subscriber on PREFIX/# at QoS 1, connected and subscribed. */
static struct mosquitto *subscribe(fixture_t *fx, uint16_t port, received_t *rx) {
  mosquitto_lib_init();
  struct mosquitto *sub = mosquitto_new("fwd-test-sub", true, rx);
  assert_non_null(sub);
  mosquitto_subscribe_callback_set(sub, on_sub);
  mosquitto_message_callback_set(sub, on_message);
  uint64_t deadline = uv_hrtime() + WAIT_NS;
  while (mosquitto_connect(sub, "127.0.0.1", port, 30) != MOSQ_ERR_SUCCESS) {
    if (uv_hrtime() > deadline) {
      fail_msg("mosquitto on port %u never listened", (unsigned)port);
    }
    nanosleep(&(struct timespec){.tv_nsec = 20000000}, NULL);
  }
  assert_int_equal(mosquitto_subscribe(sub, NULL, PREFIX "/#", QOS), MOSQ_ERR_SUCCESS);
  PUMP_UNTIL(fx, sub, rx->subscribed, "the subscription");
  return sub;
}

static void stop_broker(pid_t broker) {
  kill(broker, SIGCONT);
  kill(broker, SIGTERM);
  int status = 0;
  assert_int_equal(waitpid(broker, &status, 0), broker);
}

static void replay_sends_in_order_then_live_goes_out_unspooled(void **state) {
  (void)state;
  uint16_t port = free_port();
  fixture_t fx;
  open_fixture(&fx, port, NULL, 2);
  pid_t broker = start_broker(fx.dir, port);

  /* Spooled while the broker is away: data 1, a state change, data 2. */
  assert_int_equal(publish(&fx, false, 1, true), 0);
  assert_int_equal(publish(&fx, true, EM_LEVEL_DEGRADED, true), 0);
  assert_int_equal(publish(&fx, false, 2, true), 0);
  assert_int_equal(stats(&fx).spool.pending, 3);

  received_t rx = {0};
  struct mosquitto *sub = subscribe(&fx, port, &rx);

  em_publisher_start(fx.pub);
  PUMP_UNTIL(&fx, sub, em_publisher_online(fx.pub), "the publisher's session");

  /* replay_per_tick is 2: the state change first, then the oldest data; then the rest. */
  assert_int_equal(em_forward_replay(fx.fwd), 2);
  assert_int_equal(stats(&fx).spool.pending, 1);
  assert_int_equal(em_forward_replay(fx.fwd), 1);
  em_forward_stats_t st = stats(&fx);
  assert_int_equal(st.spool.pending, 0);
  assert_int_equal(st.spool.replayed, 3);
  assert_int_equal(em_forward_replay(fx.fwd), 0);

  /* Live: out at once, the spool untouched. */
  assert_int_equal(publish(&fx, false, 3, true), 0);
  st = stats(&fx);
  assert_int_equal(st.spool.appended, 3);
  assert_int_equal(st.lost, 0);

  PUMP_UNTIL(&fx, sub, rx.n >= 4, "four messages at the subscriber");
  static const struct {
    const char *topic;
    bool state;
    uint32_t want;
    bool historical;
  } expect[] = {{PREFIX "/state", true, EM_LEVEL_DEGRADED, true},
                {PREFIX "/data", false, 1, true},
                {PREFIX "/data", false, 2, true},
                {PREFIX "/data", false, 3, false}};
  for (size_t i = 0; i < ARRAY_LEN(expect); i++) {
    assert_string_equal(rx.got[i].topic, expect[i].topic);
    assert_false(rx.got[i].retain); /* replayed state is never retained */
    expect_msg(rx.got[i].payload, rx.got[i].len, expect[i].state, expect[i].want,
               expect[i].historical);
  }
  mosquitto_disconnect(sub);
  mosquitto_destroy(sub);
  mosquitto_lib_cleanup();
  close_fixture(&fx, true);
  kill(broker, SIGTERM);
  int status = 0;
  assert_int_equal(waitpid(broker, &status, 0), broker);
  em_tmp_tree_remove(fx.dir);
}

/* ---- write-ahead ---- */

/* A write-ahead (or not) fixture with a broker, a subscriber and the publisher's session up. */
static struct mosquitto *online(fixture_t *fx, bool write_ahead, received_t *rx, pid_t *broker) {
  uint16_t port = free_port();
  open_fixture_wa(fx, port, NULL, 8, write_ahead);
  *broker = start_broker(fx->dir, port);
  struct mosquitto *sub = subscribe(fx, port, rx);
  em_publisher_start(fx->pub);
  PUMP_UNTIL(fx, sub, em_publisher_online(fx->pub), "the publisher's session");
  return sub;
}

static void offline(fixture_t *fx, struct mosquitto *sub, pid_t broker) {
  mosquitto_disconnect(sub);
  mosquitto_destroy(sub);
  mosquitto_lib_cleanup();
  close_fixture(fx, true);
  stop_broker(broker);
  em_tmp_tree_remove(fx->dir);
}

/* Writes the header (done) as the agent does each sync interval, copies the spool file as a
 * kill -9 would leave it to the next process, opens the copy and returns the data seqs it
 * would replay, each checked historical; *n receives how many. */
static void replay_of_copy(fixture_t *fx, uint32_t *seqs, size_t cap, size_t *n) {
  static uint64_t now_ns = 1;
  uint64_t deadline = uv_hrtime() + WAIT_NS;
  while (stats(fx).syncing) { /* the last fdatasync ends first: then the header is written */
    assert_true(uv_hrtime() < deadline);
    uv_run(&fx->loop, UV_RUN_NOWAIT);
  }
  now_ns += 1000000000000ull;
  em_forward_maybe_sync(fx->fwd, now_ns); /* header write; fdatasync on the worker */
  char copy[EM_TMP_TREE_ROOT_BYTES + 16];
  snprintf(copy, sizeof(copy), "%s/copy", fx->dir);
  int in = open(fx->spool, O_RDONLY);
  int out = open(copy, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(in >= 0 && out >= 0);
  uint8_t chunk[4096];
  ssize_t got;
  while ((got = read(in, chunk, sizeof(chunk))) > 0) {
    assert_int_equal(write(out, chunk, (size_t)got), got);
  }
  close(in);
  close(out);
  em_spool_t *sp = spool_at(copy);
  uint8_t buf[EM_PROTO_MAX_MESSAGE_BYTES];
  *n = 0;
  em_spool_kind_t kind;
  int len;
  while ((len = em_spool_peek(sp, &kind, buf, sizeof(buf))) > 0) {
    assert_int_equal(kind, EM_SPOOL_DATA);
    uint8_t scratch[4096];
    em_msg_t m;
    size_t off = 0;
    assert_int_equal(em_proto_decode(buf, (size_t)len, &m, scratch, sizeof(scratch), &off), 0);
    assert_true(m.u.data.historical);
    assert_true(*n < cap);
    seqs[(*n)++] = m.u.data.seq;
    assert_int_equal(em_spool_pop(sp), 0);
  }
  em_spool_close(sp);
  unlink(copy);
}

/* replay_of_copy() gives the data seqs 1..n, in order (none for n 0). */
static void expect_copy_replays(fixture_t *fx, size_t n) {
  uint32_t seqs[8];
  size_t got = 0;
  replay_of_copy(fx, seqs, ARRAY_LEN(seqs), &got);
  assert_int_equal(got, n);
  for (size_t i = 0; i < got; i++) {
    assert_int_equal(seqs[i], i + 1);
  }
}

/* Each QoS 1 message is in the spool when libmosquitto's publish is called; it stays held
 * while the broker does not acknowledge (SIGSTOP), so a new process would replay them all,
 * historical and in order; each PUBACK then moves the position past it. */
static void write_ahead_is_in_the_spool_before_publish_and_done_on_puback(void **state) {
  (void)state;
  fixture_t fx;
  received_t rx = {0};
  pid_t broker = 0;
  struct mosquitto *sub = online(&fx, true, &rx, &broker);

  assert_int_equal(kill(broker, SIGSTOP), 0); /* no PUBACK from now on */
  size_t before = fx.publishes;
  for (uint32_t seq = 1; seq <= 3; seq++) {
    assert_int_equal(publish(&fx, false, seq, true), 0);
    assert_int_equal(fx.publishes, before + seq);
    /* Held in the spool when the publish was called: this one and those before it. */
    assert_int_equal(fx.held_at_publish[before + seq - 1], seq);
  }
  for (int i = 0; i < 50; i++) { /* the loop runs; no PUBACK can come */
    uv_run(&fx.loop, UV_RUN_NOWAIT);
    nanosleep(&(struct timespec){.tv_nsec = 2000000}, NULL);
  }
  em_forward_stats_t st = stats(&fx);
  assert_int_equal(st.spool.appended, 3);
  assert_int_equal(st.spool.inflight, 3);
  assert_int_equal(st.spool.pending, 0); /* not replayed by this process meanwhile */
  assert_int_equal(em_forward_replay(fx.fwd), 0);
  expect_copy_replays(&fx, 3);

  assert_int_equal(kill(broker, SIGCONT), 0);
  PUMP_UNTIL(&fx, sub, stats(&fx).spool.inflight == 0, "the three PUBACKs");
  PUMP_UNTIL(&fx, sub, rx.n >= 3, "three messages at the subscriber");
  for (size_t i = 0; i < 3; i++) {
    expect_msg(rx.got[i].payload, rx.got[i].len, false, (uint32_t)i + 1, false); /* live */
  }
  st = stats(&fx);
  assert_int_equal(st.spool.acked, 3);
  assert_int_equal(st.spool.pending, 0);
  assert_int_equal(st.lost, 0);
  expect_copy_replays(&fx, 0); /* all acknowledged: a restart replays nothing */

  offline(&fx, sub, broker);
}

/* Acknowledgements out of order: the position never moves past a record still unacked. */
static void write_ahead_acks_out_of_order_never_skip_an_unacked_one(void **state) {
  (void)state;
  fixture_t fx;
  received_t rx = {0};
  pid_t broker = 0;
  struct mosquitto *sub = online(&fx, true, &rx, &broker);

  assert_int_equal(kill(broker, SIGSTOP), 0); /* the acks below are the only ones */
  size_t first = fx.publishes;
  for (uint32_t seq = 1; seq <= 3; seq++) {
    assert_int_equal(publish(&fx, false, seq, true), 0);
  }
  assert_int_equal(fx.publishes, first + 3);
  em_forward_on_ack(fx.fwd, fx.mids[first + 2]); /* seq 3 */
  em_forward_on_ack(fx.fwd, fx.mids[first + 1]); /* seq 2 */
  em_forward_on_ack(fx.fwd, 0x7fff);             /* a mid never sent: ignored */
  assert_int_equal(stats(&fx).spool.inflight, 1);
  assert_int_equal(stats(&fx).spool.acked, 2);
  /* seq 1 is unacked: a restart replays from it (2 and 3 again: duplicates, no gap). */
  expect_copy_replays(&fx, 3);
  em_forward_on_ack(fx.fwd, fx.mids[first]); /* seq 1 */
  assert_int_equal(stats(&fx).spool.inflight, 0);
  expect_copy_replays(&fx, 0);

  assert_int_equal(kill(broker, SIGCONT), 0); /* the real PUBACKs: mids done already */
  PUMP_UNTIL(&fx, sub, rx.n >= 3, "three messages at the subscriber");
  assert_int_equal(stats(&fx).spool.acked, 3);
  offline(&fx, sub, broker);
}

/* Broker away with write-ahead on: as before, past capacity the oldest are dropped and
 * counted, nothing is lost uncounted. */
static void write_ahead_spool_full_drops_and_counts_as_before(void **state) {
  (void)state;
  fixture_t fx;
  open_fixture_wa(&fx, free_port(), NULL, 8, true);
  uint32_t sent = 0;
  while (stats(&fx).spool.dropped == 0 && sent < 100000) {
    assert_int_equal(publish(&fx, false, ++sent, true), 0);
  }
  em_forward_stats_t st = stats(&fx);
  assert_true(st.spool.dropped > 0);
  assert_int_equal(st.spool.pending + st.spool.dropped, sent);
  assert_int_equal(st.spool.inflight, 0);
  assert_int_equal(st.lost, 0);
  close_fixture(&fx, false);
}

/* write_ahead off: a live QoS 1 message never touches the spool. */
static void write_ahead_off_keeps_live_messages_out_of_the_spool(void **state) {
  (void)state;
  fixture_t fx;
  received_t rx = {0};
  pid_t broker = 0;
  struct mosquitto *sub = online(&fx, false, &rx, &broker);
  assert_int_equal(publish(&fx, false, 1, true), 0);
  assert_int_equal(publish(&fx, true, EM_LEVEL_WARN, true), 0);
  PUMP_UNTIL(&fx, sub, rx.n >= 2, "two messages at the subscriber");
  em_forward_stats_t st = stats(&fx);
  assert_int_equal(st.spool.appended, 0);
  assert_int_equal(st.spool.inflight, 0);
  assert_int_equal(st.spool.acked, 0);
  offline(&fx, sub, broker);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(broker_away_spools_data_and_state_marked_historical),
      cmocka_unit_test(stopping_keeps_nothing),
      cmocka_unit_test(without_a_spool_messages_are_lost_and_counted),
      cmocka_unit_test(broker_away_spools_a_flight_recording_marked_historical),
      cmocka_unit_test(bad_arguments_are_refused),
      cmocka_unit_test(replay_sends_in_order_then_live_goes_out_unspooled),
      cmocka_unit_test(write_ahead_is_in_the_spool_before_publish_and_done_on_puback),
      cmocka_unit_test(write_ahead_acks_out_of_order_never_skip_an_unacked_one),
      cmocka_unit_test(write_ahead_spool_full_drops_and_counts_as_before),
      cmocka_unit_test(write_ahead_off_keeps_live_messages_out_of_the_spool),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
