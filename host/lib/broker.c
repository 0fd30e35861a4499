/*
 * broker.c - a blocking MQTT session for the host tools (see broker.h).
 *
 * libmosquitto is driven from the caller's thread with mosquitto_loop(); nothing here starts a
 * thread. The session's state is three flags and two counters the callbacks update:
 *
 *   connecting --CONNACK ok--> connected --network error / disconnect--> lost
 *        |                                                                 ^
 *        +--------- refused, error or timeout (em_broker_connect fails) ---+
 *
 * em_broker_sync() relies on MQTT's ordering: the broker queues the retained messages of a
 * subscription when it handles the SUBSCRIBE, so a message published by this session after
 * the SUBACK, on a topic it subscribed to, reaches it after all of them.
 */
#define _POSIX_C_SOURCE 200809L
#include "broker.h"

#include <errno.h>
#include <mosquitto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
};

static uint64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int em_broker_parse_url(const char *url, em_broker_url_t *out, char *err, size_t err_cap) {
  static const char scheme[] = "mqtt://";
  const char *why = NULL;
  if (!url || !out) {
    why = "no URL";
    goto bad;
  }
  if (strncmp(url, "mqtts://", 8) == 0) {
    why = "uses TLS (mqtts://), which edgemon-cli does not support yet; use mqtt://HOST[:PORT]";
    goto bad;
  }
  if (strncmp(url, scheme, sizeof(scheme) - 1) != 0) {
    why = "must look like mqtt://HOST[:PORT], e.g. mqtt://127.0.0.1:1883";
    goto bad;
  }
  const char *host = url + sizeof(scheme) - 1;
  const char *host_end;
  const char *rest;
  if (*host == '[') {
    host++;
    host_end = strchr(host, ']');
    if (!host_end) {
      why = "has an IPv6 address without its closing ']'";
      goto bad;
    }
    rest = host_end + 1;
  } else {
    host_end = host + strcspn(host, ":/");
    rest = host_end;
  }
  size_t host_len = (size_t)(host_end - host);
  if (host_len == 0 || host_len > EM_BROKER_MAX_HOST) {
    why = host_len == 0 ? "has no host" : "has a host name that is too long";
    goto bad;
  }
  unsigned long port = 1883;
  if (*rest == ':') {
    char *end = NULL;
    errno = 0;
    port = strtoul(rest + 1, &end, 10);
    if (rest[1] < '0' || rest[1] > '9' || errno != 0 || port == 0 || port > 65535) {
      why = "has a port that is not a number from 1 to 65535";
      goto bad;
    }
    rest = end;
  }
  if (*rest == '/' && rest[1] == '\0') {
    rest++;
  }
  if (*rest != '\0') {
    why = "has something after the port; use mqtt://HOST[:PORT]";
    goto bad;
  }
  memcpy(out->host, host, host_len);
  out->host[host_len] = '\0';
  out->port = (uint16_t)port;
  return 0;
bad:
  if (err && err_cap > 0) {
    snprintf(err, err_cap, "broker URL '%s' %s", url ? url : "", why);
  }
  return -EINVAL;
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
  default:
    return -ECONNRESET;
  }
}

int em_broker_run(em_broker_t *b, int timeout_ms) {
  if (!b) {
    return -EINVAL;
  }
  if (b->lost) {
    return -ECONNRESET;
  }
  errno = 0;
  int rc = mosquitto_loop(b->mosq, timeout_ms < 0 ? 0 : timeout_ms, 1);
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
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (opts->client_id) {
    snprintf(b->client_id, sizeof(b->client_id), "%s", opts->client_id);
  } else {
    snprintf(b->client_id, sizeof(b->client_id), "%.32s-%ld-%06lx",
             client_prefix ? client_prefix : "edgemon-host", (long)getpid(),
             (unsigned long)(ts.tv_nsec & 0xffffff));
  }
  snprintf(b->sync_topic, sizeof(b->sync_topic), "edgemon-host/sync/%s", b->client_id);
  b->mosq = mosquitto_new(b->client_id, true, b);
  if (!b->mosq) {
    free(b);
    return -ENOMEM;
  }
  if (opts->mqtt5) {
    mosquitto_int_option(b->mosq, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V5);
  }
  mosquitto_connect_callback_set(b->mosq, on_connect);
  mosquitto_disconnect_callback_set(b->mosq, on_disconnect);
  mosquitto_subscribe_callback_set(b->mosq, on_subscribe);
  mosquitto_publish_callback_set(b->mosq, on_publish);
  mosquitto_message_callback_set(b->mosq, on_message);

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
    errno = 0;
    mrc = mosquitto_loop(b->mosq, 100, 1);
    if (mrc == MOSQ_ERR_ERRNO && errno == EINTR) {
      continue;
    }
    if (mrc != MOSQ_ERR_SUCCESS || (b->lost && b->connack_rc < 0)) {
      rc = mrc == MOSQ_ERR_SUCCESS ? -ECONNRESET : mosq_errno(mrc);
      goto fail;
    }
  }
  if (b->connack_rc != 0) {
    if (err && err_cap > 0) {
      snprintf(err, err_cap, "broker %s refused the session: %s", url,
               mosquitto_connack_string(b->connack_rc));
    }
    rc = -ECONNREFUSED;
    goto fail_quiet;
  }
  *out = b;
  return 0;
fail:
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
    for (int i = 0; i < 5 && mosquitto_loop(b->mosq, 10, 1) == MOSQ_ERR_SUCCESS; i++) {
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
