/*
 * bench_drain.c - the bare MQTT subscriber of scripts/bench-aggregator.sh: counts the messages
 * a broker delivers on a topic filter and does nothing else with them, as the baseline the
 * aggregator's ingest is compared with in the same run.
 *
 * One libmosquitto session driven by mosquitto_loop() on this thread (no library thread).
 * Every second it prints "t=S msgs/s=N total=T" to stdout; at the end one line
 *   "bench_drain: total=T first_ns=F last_ns=L"
 * with the CLOCK_MONOTONIC times of the first and last message (0 when none), so the caller
 * can compute a rate over its own window. Stops on SIGINT/SIGTERM, after --duration S, or after
 * --idle S without a message once one has come.
 *
 *   bench_drain [--host H] [--port P] [--topic FILTER] [--qos 0|1] [--duration S] [--idle S]
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <mosquitto.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "bench_clock.h"

static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
}

typedef struct {
  const char *topic;
  int qos;
  bool connected;
  int connack_rc; /* -1 until CONNACK. */
  uint64_t count;
  uint64_t first_ns;
  uint64_t last_ns;
} drain_t;

static void on_connect(struct mosquitto *mosq, void *obj, int rc) {
  drain_t *d = obj;
  d->connack_rc = rc;
  d->connected = rc == 0;
  if (rc == 0) {
    mosquitto_subscribe(mosq, NULL, d->topic, d->qos);
  }
}

static void on_message(struct mosquitto *mosq, void *obj, const struct mosquitto_message *m) {
  (void)mosq;
  (void)m;
  drain_t *d = obj;
  uint64_t t = bench_now_ns();
  if (d->count == 0) {
    d->first_ns = t;
  }
  d->last_ns = t;
  d->count++;
}

static int usage(void) {
  fputs("usage: bench_drain [--host H] [--port P] [--topic FILTER] [--qos 0|1] [--duration S] "
        "[--idle S]\n",
        stderr);
  return 2;
}

int main(int argc, char **argv) {
  const char *host = "127.0.0.1";
  int port = 1883;
  double duration_s = 0.0;
  double idle_s = 0.0;
  drain_t d = {.topic = "edgemon/v1/+/data", .qos = 0, .connack_rc = -1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      fputs("bench_drain: counts MQTT messages on a topic filter and prints msgs/s each second\n",
            stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      return usage();
    }
    const char *v = argv[++i];
    if (strcmp(a, "--host") == 0) {
      host = v;
    } else if (strcmp(a, "--port") == 0) {
      port = atoi(v);
    } else if (strcmp(a, "--topic") == 0) {
      d.topic = v;
    } else if (strcmp(a, "--qos") == 0) {
      d.qos = atoi(v);
    } else if (strcmp(a, "--duration") == 0) {
      duration_s = atof(v);
    } else if (strcmp(a, "--idle") == 0) {
      idle_s = atof(v);
    } else {
      return usage();
    }
  }
  if (port < 1 || port > 65535 || d.qos < 0 || d.qos > 1 || duration_s < 0 || idle_s < 0) {
    return usage();
  }
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  setvbuf(stdout, NULL, _IOLBF, 0);

  mosquitto_lib_init();
  char id[64];
  snprintf(id, sizeof(id), "bench-drain-%ld", (long)getpid());
  struct mosquitto *mosq = mosquitto_new(id, true, &d);
  if (!mosq) {
    fprintf(stderr, "bench_drain: out of memory\n");
    return 1;
  }
  mosquitto_connect_callback_set(mosq, on_connect);
  mosquitto_message_callback_set(mosq, on_message);
  int rc = mosquitto_connect(mosq, host, port, 30);
  if (rc != MOSQ_ERR_SUCCESS) {
    fprintf(stderr, "bench_drain: cannot connect to %s:%d: %s\n", host, port,
            rc == MOSQ_ERR_ERRNO ? strerror(errno) : mosquitto_strerror(rc));
    mosquitto_destroy(mosq);
    mosquitto_lib_cleanup();
    return 3;
  }
  uint64_t start = bench_now_ns();
  uint64_t tick = start + 1000000000u;
  uint64_t at_tick = 0;
  while (!g_stop) {
    rc = mosquitto_loop(mosq, 50, 1);
    if (rc != MOSQ_ERR_SUCCESS && !(rc == MOSQ_ERR_ERRNO && errno == EINTR)) {
      fprintf(stderr, "bench_drain: connection lost: %s\n", mosquitto_strerror(rc));
      break;
    }
    uint64_t t = bench_now_ns();
    if (t >= tick) {
      printf("t=%" PRIu64 " msgs/s=%" PRIu64 " total=%" PRIu64 "\n", (tick - start) / 1000000000u,
             d.count - at_tick, d.count);
      at_tick = d.count;
      tick += 1000000000u;
    }
    if (duration_s > 0 && t - start >= (uint64_t)(duration_s * 1e9)) {
      break;
    }
    if (idle_s > 0 && d.count > 0 && t - d.last_ns >= (uint64_t)(idle_s * 1e9)) {
      break;
    }
  }
  printf("bench_drain: total=%" PRIu64 " first_ns=%" PRIu64 " last_ns=%" PRIu64 "\n", d.count,
         d.first_ns, d.last_ns);
  mosquitto_disconnect(mosq);
  mosquitto_destroy(mosq);
  mosquitto_lib_cleanup();
  return 0;
}
