/*
 * broker.h - a blocking MQTT session for the host tools, over libmosquitto.
 *
 * The host programs are simple consumers: connect, subscribe, handle messages until told to
 * stop. This module wraps libmosquitto for that: a URL parser ("mqtt://HOST[:PORT]" and, for
 * TLS, "mqtts://HOST[:PORT]"), TLS and username/password session options with a reader for
 * the credentials file the agent also reads (docs/CONFIG.md [mqtt] credentials_file), a
 * connect that fails fast with a clear message when the broker is unreachable, a run step that
 * drives the network for a bounded time, a barrier (em_broker_sync) that returns once every
 * message due to the subscriptions made so far, retained ones included, has been delivered, and
 * a wait for outstanding QoS 1 publishes. It also parses edgemon topics.
 *
 * By default libmosquitto acknowledges a QoS 1 message as soon as it reads it; with
 * em_broker_opts_t.before_ack it is acknowledged only after the caller's hook made it durable
 * (what the aggregator needs: the broker forgets a message once acknowledged).
 *
 * Owns one mosquitto handle (and its socket) per em_broker_t. Messages are delivered on the
 * caller's thread from inside em_broker_run()/em_broker_sync()/em_broker_drain() (and, with
 * before_ack, also while connecting and subscribing); the callback's pointers are borrowed for
 * the call. Not thread-safe.
 */
#ifndef EM_BROKER_H
#define EM_BROKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "edgemon/common/credentials.h"
#include "edgemon/common/parse.h"

#define EM_BROKER_DEFAULT_URL "mqtt://127.0.0.1:1883"
#define EM_BROKER_MAX_HOST    EM_MQTT_URL_MAX_HOST
#define EM_TOPIC_MAX_DEVICE   63u

/* A parsed broker URL: common/'s (edgemon/common/parse.h), so the host tools and the agent
 * read the same URLs the same way. */
typedef em_mqtt_url_t em_broker_url_t;

/* Parses "mqtt://HOST[:PORT]" (port 1883 by default) or "mqtts://HOST[:PORT]" (TLS, port 8883
 * by default) with em_parse_mqtt_url(): IPv6 literals in brackets, one trailing '/' accepted.
 * Returns 0 or -EINVAL with "broker URL 'URL' <reason>" in err (may be NULL). */
int em_broker_parse_url(const char *url, em_broker_url_t *out, char *err, size_t err_cap);

/* A message from the broker. topic is NUL-terminated; payload has len bytes. */
typedef void (*em_broker_msg_fn)(void *ctx, const char *topic, const uint8_t *payload, size_t len,
                                 bool retained);

typedef struct em_broker em_broker_t;

/*
 * Connects to `url` within timeout_s seconds (MQTT v3.1.1, clean session, a random client id
 * starting with client_prefix). on_message may be NULL. Returns 0, -EINVAL for a bad URL, or
 * -ECONNREFUSED / -ETIMEDOUT / -EHOSTUNREACH / other -errno when the broker cannot be reached or
 * refuses the session; err (may be NULL) then holds a sentence saying which and where.
 */
int em_broker_connect(em_broker_t **out, const char *url, const char *client_prefix,
                      em_broker_msg_fn on_message, void *ctx, double timeout_s, char *err,
                      size_t err_cap);

/* Messages read before before_ack() runs, at most, when em_broker_opts_t.ack_burst_max is 0. */
#define EM_BROKER_ACK_BURST_MAX 1000u

/* Session options beyond the defaults of em_broker_connect(). */
typedef struct {
  const char *client_prefix; /* Random client id starting with this (default "edgemon-host"). */
  const char *client_id;     /* Exact client id instead (NULL: random). */
  bool mqtt5;                /* MQTT v5 instead of v3.1.1. */
  /* Keep the session: clean session off (v3.1.1; with max_packet_bytes, MQTT v5 with clean
   * start off and a session expiry interval that never ends), so the broker keeps this client
   * id's subscriptions while it is away and queues their QoS 1 messages for it (up to the
   * broker's max_queued_messages; mosquitto's persistent_client_expiration still drops one
   * away for longer). Use with a stable client_id. With mqtt5 the session is not kept (the
   * session expiry interval stays 0: a share group's other members take its messages). */
  bool persistent;
  /* > 0: MQTT v5, and the CONNECT tells the broker never to send this session a packet larger
   * (MQTT_PROP_MAXIMUM_PACKET_SIZE): the broker drops such a message for it, so it is never
   * read here. libmosquitto reads any packet whole and copies its payload before on_message, so
   * without this limit a huge message costs twice its size in memory. 0: no limit. */
  uint32_t max_packet_bytes;
  int keepalive_s; /* Default 30. */
  /* Acknowledge a QoS 1 message only once the caller has made it durable. Set, libmosquitto
   * only queues what it would write (mosquitto_threaded_set) and em_broker_run() drives the
   * socket itself: it reads a burst (until the socket has nothing more or ack_burst_max
   * messages were delivered), then, when a message of the burst asked for an acknowledgement,
   * calls before_ack(ctx) (ctx: the one on_message gets), and only then writes the PUBACKs and
   * whatever else is queued. A before_ack that returns a negative errno drops the connection
   * without writing anything more: the broker keeps those messages unacknowledged and sends them
   * again to the session's next connection (persistent), and em_broker_run() (or the connect)
   * returns that errno. Every loop of the session, connect and free included, goes this way.
   * NULL: libmosquitto acknowledges each message as it reads it, before on_message runs. */
  int (*before_ack)(void *ctx);
  unsigned ack_burst_max; /* Messages per burst at most (0: EM_BROKER_ACK_BURST_MAX). */
  /* TLS, for mqtts:// URLs only. With neither CA option the system's CA certificates verify
   * the broker. TLS 1.2, the broker's certificate always verified. */
  const char *tls_ca_file;   /* CA certificates (PEM) that verify the broker. */
  const char *tls_ca_path;   /* A directory of CA certificates (c_rehash'ed). */
  const char *tls_cert_file; /* Client certificate (PEM), with tls_key_file. */
  const char *tls_key_file;  /* Its private key (PEM, not encrypted). */
  bool tls_insecure;         /* Do not match the broker's host name with its certificate. */
  /* MQTT login (NULL: none). password needs username. */
  const char *username;
  const char *password;
} em_broker_opts_t;

/* Checks opts against the URL's scheme before connecting: TLS options need mqtts://, a client
 * certificate needs its key and the other way round, a password needs a username, and the
 * files named can be read. Returns 0 or -EINVAL with a sentence in err (may be NULL). */
int em_broker_check_opts(const em_broker_url_t *url, const em_broker_opts_t *opts, char *err,
                         size_t err_cap);

/* em_broker_connect() with options (opts may be NULL); em_broker_check_opts() first. Same
 * returns, plus -EPROTO when the TLS handshake failed (err gives OpenSSL's reason), and
 * before_ack()'s errno when it refused messages delivered while connecting. A broker that
 * refuses the login answers -ECONNREFUSED with "not authorised" in err. */
int em_broker_connect_opts(em_broker_t **out, const char *url, const em_broker_opts_t *opts,
                           em_broker_msg_fn on_message, void *ctx, double timeout_s, char *err,
                           size_t err_cap);

/* Longest username or password, NUL included (as the agent's EM_CONFIG_MAX_SECRET). */
#define EM_BROKER_MAX_SECRET EM_CREDENTIALS_MAX_SECRET

typedef em_credentials_t em_broker_credentials_t;

/*
 * Reads a credentials file with common/'s reader (edgemon/common/credentials.h), the agent's
 * [mqtt] credentials_file format and checks: lines "username = NAME" (required) and
 * "password = SECRET" (optional); at most 4 KiB; a regular file owned by the effective uid or
 * root with no access for group or others. Returns 0; -ENOENT/-EACCES/... when it cannot be
 * opened; -EPERM when it is not a regular file, belongs to another user or group or others may
 * access it; -EFBIG past 4 KiB; -EINVAL when its content is wrong. err (may be NULL) then holds
 * the first problem, naming the file (and line), never the password. *out is zeroed on failure.
 */
int em_broker_read_credentials(const char *path, em_broker_credentials_t *out, char *err,
                               size_t err_cap);

/* Subscribes with QoS 1 and waits for the broker's acknowledgement (up to 5 s). Returns 0,
 * -ETIMEDOUT, -EPERM when the broker refused it, or -ECONNRESET when the connection dropped. */
int em_broker_subscribe(em_broker_t *b, const char *pattern);

/* Queues one publish. Returns 0 or a negative errno. */
int em_broker_publish(em_broker_t *b, const char *topic, const void *payload, size_t len, int qos,
                      bool retain);

/* Drives the network for up to timeout_ms, delivering messages. Returns 0, -ECONNRESET when
 * the connection was lost, or before_ack()'s negative errno when it refused (the session is
 * over after either). */
int em_broker_run(em_broker_t *b, int timeout_ms);

/* Returns once every message due to the subscriptions made so far has been delivered (it
 * publishes a marker on a topic of this session's own and waits for it to come back), or after
 * timeout_s. Returns 0, -ETIMEDOUT, or -ECONNRESET. */
int em_broker_sync(em_broker_t *b, double timeout_s);

/* Waits until every QoS 1 publish made so far is acknowledged, up to timeout_s. Returns 0,
 * -ETIMEDOUT or -ECONNRESET. */
int em_broker_drain(em_broker_t *b, double timeout_s);

/* Messages the broker delivered to this session so far, the sync markers not included. */
uint64_t em_broker_received(const em_broker_t *b);

/* Disconnects cleanly and frees. NULL is a no-op. */
void em_broker_free(em_broker_t *b);

/* Splits "edgemon/v1/<device>/<kind>[/...]": copies the device id into device[0..cap) and
 * points *kind at the rest after the device ("data", "birth", "cmd/rebirth", ...). Returns 0,
 * or -EINVAL when the topic is not an edgemon v1 topic or the id is empty or too long. */
int em_topic_parse(const char *topic, char *device, size_t cap, const char **kind);

#endif /* EM_BROKER_H */
