/*
 * bench_idle_floor.c - the floor under an idle agent's resident memory: a process that does only
 * what every agent must, with the same libraries and nothing of edgemon. It links libuv and
 * libmosquitto (and through it OpenSSL, which libmosquitto loads with TLS off too), connects to
 * the broker the way the agent drives libmosquitto (its socket in a uv_poll_t, a 1 s timer for
 * mosquitto_loop_misc), publishes one small message a second and otherwise sleeps in uv_run.
 * bench_idle_rss.py builds it with cc and measures it beside the agent: what the agent holds
 * above this is its own.
 *
 * Usage: bench_idle_floor HOST PORT. Runs until killed. Owns one loop, one client, no threads of
 * its own (libmosquitto's loop thread is not started).
 */
#include <mosquitto.h>
#include <stdio.h>
#include <stdlib.h>
#include <uv.h>

static struct mosquitto *client;
static uv_poll_t poller;
static uv_timer_t ticker;

/* The socket is readable or writable: libmosquitto reads or writes what it can. */
static void on_socket(uv_poll_t *h, int status, int events) {
  (void)h;
  if (status < 0) {
    return;
  }
  if (events & UV_READABLE) {
    mosquitto_loop_read(client, 1);
  }
  if (events & UV_WRITABLE) {
    mosquitto_loop_write(client, 1);
  }
  uv_poll_start(&poller, UV_READABLE | (mosquitto_want_write(client) ? UV_WRITABLE : 0), on_socket);
}

/* Once a second: keep-alive and one 16-byte message, as a tick would. */
static void on_tick(uv_timer_t *t) {
  (void)t;
  static const char payload[16] = "idle-floor-tick";
  mosquitto_loop_misc(client);
  mosquitto_publish(client, NULL, "edgemon-floor/tick", sizeof(payload), payload, 0, false);
  if (mosquitto_want_write(client)) {
    uv_poll_start(&poller, UV_READABLE | UV_WRITABLE, on_socket);
  }
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: bench_idle_floor HOST PORT\n");
    return 2;
  }
  mosquitto_lib_init();
  client = mosquitto_new("edgemon-idle-floor", true, NULL);
  if (!client || mosquitto_connect(client, argv[1], atoi(argv[2]), 60) != MOSQ_ERR_SUCCESS) {
    fprintf(stderr, "bench_idle_floor: cannot connect to %s:%s\n", argv[1], argv[2]);
    return 1;
  }
  uv_loop_t *loop = uv_default_loop();
  uv_poll_init_socket(loop, &poller, mosquitto_socket(client));
  uv_poll_start(&poller, UV_READABLE | UV_WRITABLE, on_socket);
  uv_timer_init(loop, &ticker);
  uv_timer_start(&ticker, on_tick, 1000, 1000);
  uv_run(loop, UV_RUN_DEFAULT);
  mosquitto_destroy(client);
  mosquitto_lib_cleanup();
  return 0;
}
