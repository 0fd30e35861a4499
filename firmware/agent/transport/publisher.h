/*
 * publisher.h - the agent's MQTT session: libmosquitto driven by the agent's libuv loop (its
 * socket watched with a uv_poll_t, keepalive from a uv_timer_t calling mosquitto_loop_misc;
 * no libmosquitto thread). It connects, keeps the connection, reconnects with capped
 * exponential backoff and jitter, resolves host names with uv_getaddrinfo (never a blocking
 * lookup on the loop), sets the Last Will, subscribes to the device's command topics and
 * hands what arrives there to the owner. With limit_packets the session is MQTT v5 and the
 * broker sends it no packet larger than a command needs; a command payload larger than any
 * command that still arrives is refused unread (stats.oversize).
 *
 * Topics are "<prefix>/<kind>", the prefix being "edgemon/v1/<device>". What to publish on
 * connect (birth, status online) is the owner's call, made in on_online.
 *
 * Owns: the struct mosquitto, a uv_poll_t, two uv_timer_t and a uv_getaddrinfo_t, all
 * released by em_publisher_stop() + em_publisher_free(). Single-threaded: every call from the
 * loop's thread. The libmosquitto calls that can fail go through em_publisher_sys_t, so the
 * tests can make them return MOSQ_ERR_* codes.
 */
#ifndef EDGEMON_AGENT_PUBLISHER_H
#define EDGEMON_AGENT_PUBLISHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

typedef struct em_publisher em_publisher_t;

struct mosquitto;

/*
 * The libmosquitto calls the publisher makes on its struct mosquitto once created, with the
 * arguments and return values of the functions they are named after (mosquitto.h): a
 * MOSQ_ERR_* code, MOSQ_ERR_ERRNO with errno set. `ctx` is the table's own.
 */
typedef struct {
  int (*username_pw_set)(void *ctx, struct mosquitto *m, const char *username,
                         const char *password);
  int (*tls_set)(void *ctx, struct mosquitto *m, const char *ca_file, const char *ca_path,
                 const char *cert_file, const char *key_file,
                 int (*pw_callback)(char *buf, int size, int rwflag, void *userdata));
  int (*tls_opts_set)(void *ctx, struct mosquitto *m, int cert_reqs, const char *tls_version,
                      const char *ciphers);
  int (*tls_insecure_set)(void *ctx, struct mosquitto *m, bool value);
  int (*will_set)(void *ctx, struct mosquitto *m, const char *topic, int len, const void *payload,
                  int qos, bool retain);
  int (*connect_async)(void *ctx, struct mosquitto *m, const char *host, int port, int keepalive_s);
  int (*socket)(void *ctx, struct mosquitto *m); /* The fd, or -1 when not connected. */
  int (*loop_read)(void *ctx, struct mosquitto *m, int max_packets);
  int (*loop_write)(void *ctx, struct mosquitto *m, int max_packets);
  int (*loop_misc)(void *ctx, struct mosquitto *m);
  bool (*want_write)(void *ctx, struct mosquitto *m);
  int (*publish)(void *ctx, struct mosquitto *m, int *mid, const char *topic, int len,
                 const void *payload, int qos, bool retain);
  int (*subscribe)(void *ctx, struct mosquitto *m, int *mid, const char *pattern, int qos);
  int (*disconnect)(void *ctx, struct mosquitto *m);
  void *ctx;
} em_publisher_sys_t;

/* The real libmosquitto calls. */
extern const em_publisher_sys_t em_publisher_sys_mosquitto;

typedef struct {
  const char *host; /* Name or numeric address; copied. */
  uint16_t port;
  const char *client_id; /* Copied. */
  const char *prefix;    /* "edgemon/v1/<device>"; copied. */
  uint32_t keepalive_s;
  uint64_t backoff_min_ns; /* First reconnect delay; doubles per failure up to max. */
  uint64_t backoff_max_ns;
  const uint8_t *will; /* Payload of the retained Last Will on "<prefix>/status"; copied. */
  size_t will_len;
  int will_qos;
  /* Connected (CONNACK accepted): publish what a fresh session needs. */
  void (*on_online)(void *ctx);
  /* A message on "<prefix>/cmd/<name>": name and payload are borrowed for the call. */
  void (*on_command)(void *ctx, const char *name, const uint8_t *payload, size_t len);
  /* The broker acknowledged the QoS 1 publish `mid` (PUBACK; em_publisher_send_mid()). May be
   * NULL. Acks may come out of order, and after a reconnect for what libmosquitto resent. */
  void (*on_ack)(void *ctx, int mid);
  void *ctx;
  /*
   * Security (all optional). Strings are borrowed for em_publisher_new() only:
   * libmosquitto copies them, and the publisher keeps no pointer to them. NULL or "" = unset.
   */
  bool tls;                  /* TLS to the broker (mqtts://), TLS v1.2 at least. */
  const char *tls_ca_file;   /* PEM CA bundle; with tls, this or tls_ca_path is required. */
  const char *tls_ca_path;   /* Directory of hashed CA certificates. */
  const char *tls_cert_file; /* PEM client certificate: both cert and key, or neither. */
  const char *tls_key_file;  /* Its unencrypted PEM key (an encrypted one fails, never prompts). */
  bool tls_insecure;         /* Skip the broker host name check. For testing only. */
  const char *username;      /* MQTT username (with or without TLS). */
  const char *password;      /* MQTT password; needs username. */
  /*
   * A QoS 1 publish not acknowledged (PUBACK) within this long means the broker is not
   * taking messages although the connection looks up (a network that went silent, a broker
   * that hangs): the session is dropped and reconnected, and until then em_publisher_online()
   * is false, so the owner spools instead of queueing in memory. 0 = off. What libmosquitto
   * already holds in flight is sent again after reconnect (at least once).
   */
  uint64_t ack_timeout_ns;
  /*
   * MQTT v5, the CONNECT telling the broker the largest packet this session takes (a command
   * and its PUBLISH: EM_PROTO_MAX_MESSAGE_BYTES + EM_PROTO_MQTT_OVERHEAD_BYTES), so a larger
   * message is dropped by the broker, never read here. false: MQTT v3.1.1 without the limit.
   */
  bool limit_packets;
  const em_publisher_sys_t *sys; /* NULL: em_publisher_sys_mosquitto. Copied. */
} em_publisher_opts_t;

/* Counters for the agent's own figures. */
typedef struct {
  uint64_t connects;    /* Sessions accepted by the broker. */
  uint64_t disconnects; /* Sessions lost. */
  uint64_t failures;    /* Attempts that did not reach a session. */
  uint64_t sent;        /* Messages handed to the socket layer. */
  uint64_t not_sent;    /* Messages refused: no session was up, or libmosquitto refused them. */
  uint64_t oversize;    /* Payloads on cmd/ topics larger than any command, refused unread. */
} em_publisher_stats_t;

/*
 * Creates the publisher (nothing is connected yet). Returns 0 and *out, -ENOMEM, or -EINVAL
 * for missing options or TLS options libmosquitto rejects (a CA, certificate or key file it
 * cannot read, a certificate without its key): those are logged with the reason.
 *
 * A TLS handshake failure or a CONNACK refusal (bad username or password, not authorised) is
 * not an error here: it is logged once per distinct reason and retried with the backoff.
 */
int em_publisher_new(em_publisher_t **out, uv_loop_t *loop, const em_publisher_opts_t *opts);

/* Starts connecting; a broker that is not there is retried with backoff, not an error. */
void em_publisher_start(em_publisher_t *p);

/*
 * Publishes `buf` on "<prefix>/<kind>". Returns 0 when handed to the session, -ENOTCONN when
 * no session is up (the message is not kept: the caller decides), -EMSGSIZE, -ENOMEM, or -EIO.
 * A publish libmosquitto refuses is counted in not_sent and never retried here; one that says
 * the connection is gone (MOSQ_ERR_NO_CONN, MOSQ_ERR_CONN_LOST) drops the session, which
 * reconnects with the backoff. Other refusals are logged at warning level once per distinct
 * code in a row (again after a publish succeeded).
 */
int em_publisher_send(em_publisher_t *p, const char *kind, const uint8_t *buf, size_t len, int qos,
                      bool retain);

/* em_publisher_send(), and on success *mid receives libmosquitto's message id, which
 * on_ack names once the broker acknowledged a QoS 1 publish. */
int em_publisher_send_mid(em_publisher_t *p, const char *kind, const uint8_t *buf, size_t len,
                          int qos, bool retain, int *mid);

/* True while a session is up. */
bool em_publisher_online(const em_publisher_t *p);

const em_publisher_stats_t *em_publisher_stats(const em_publisher_t *p);

/*
 * Ends the session cleanly: publishes `last` (may be NULL) on "<prefix>/status" retained,
 * sends DISCONNECT, waits at most `timeout_ms` for the socket to drain, closes every handle,
 * then calls done(ctx) from the loop. Idempotent.
 */
void em_publisher_stop(em_publisher_t *p, const uint8_t *last, size_t last_len, unsigned timeout_ms,
                       void (*done)(void *), void *ctx);

/* Frees after em_publisher_stop() has called done (or before start). NULL is a no-op. */
void em_publisher_free(em_publisher_t *p);

#endif /* EDGEMON_AGENT_PUBLISHER_H */
