/*
 * http.h - the aggregator's HTTP endpoints, served by libmicrohttpd on its own thread:
 *
 *   GET /metrics            Prometheus exposition (metrics.c renders it): the delimited protobuf
 *                           MetricFamily stream, with native histograms, to a client whose
 *                           Accept asks for it (em_prom_expo_accepts: a Prometheus started with
 *                           --enable-feature=native-histograms); text format 0.0.4 to every
 *                           other client
 *   GET /api/devices        JSON: every device, as in /api/devices/<id> without stages' buckets
 *   GET /api/devices/<id>   JSON: one device: birth, status, state, latest values by name,
 *                           per-stage latest window and cumulative count/sum, loss counters
 *   GET /api/fleet          JSON: the fleet's devices with level, worst stage, last change
 *   GET /api/devices/<id>/history  JSON: a device's stage percentiles, metrics and level
 *                           changes over a range (history.h; parameters in query.h)
 *   GET /api/latency        JSON: fleet percentiles merged from every matching device
 *   GET /api/models         JSON: the model identities the devices report now (cohort.h)
 *   GET /api/cohort         JSON: a model cohort's stored windows over a range (cohort.h)
 *   GET /ui/<file>          the fleet dashboard (assets.h: embedded at build time from host/web/);
 *                           "/" and "/ui" redirect to "/ui/"
 *   GET /healthz            200 "ok"; 200 "degraded: <why>" while /metrics leaves devices out;
 *                           503 "unavailable: <why>" while the MQTT session is down; then
 *                           the health callback's lines of figures (the aggregator's: the
 *                           forensic store's bytes against its bounds)
 *
 * Anything else is 404; methods other than GET/HEAD are 405. Handlers take the registry's lock
 * while they read it. Owns the MHD daemon and the thread that drives it.
 *
 * The API lane: the requests that read the store (/api/fleet, /api/latency, /api/cohort,
 * /api/devices/<id>/history, the flights and profiles routes) are not answered on the serving
 * thread. It checks their parameters (a 400 stays immediate), parks the connection and hands
 * the query to one of --api-workers worker threads (lane.h), each with read-only SQLite
 * connections of its own (WAL lets them read beside the writer); at most as many more wait for
 * a worker, and past that the request is answered at once 503 with "Retry-After: 1"
 * (edgemon_aggregator_http_api_refused_total). /healthz, /metrics, /api/devices,
 * /api/devices/<id>, /api/models and /ui/ read only memory and are answered on the serving
 * thread, so no load on the API slows them by more than one registry lock.
 *
 * Hostile clients: a request head may pause 5 s between bytes and take 10 s in all, then its
 * connection is closed; a new connection that finds the server near its limit evicts the
 * oldest connection still waiting for a request head (its own address's first when that
 * address holds many) rather than being refused (http.c tells the whole policy). libmicrohttpd's
 * own messages go to stderr through a rate limit. /metrics ends with the em_http_stats_t figures as
 * edgemon_aggregator_http_* families (in the scrape's format).
 */
#ifndef EM_AGG_HTTP_H
#define EM_AGG_HTTP_H

#include "history.h"
#include "registry.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct em_http em_http_t;

/* What /healthz answers. */
typedef enum {
  EM_HTTP_HEALTH_OK = 0,   /* 200 "ok" */
  EM_HTTP_HEALTH_DEGRADED, /* 200 "degraded: <why>": serving, but not everything */
  EM_HTTP_HEALTH_DOWN      /* 503 "unavailable: <why>" */
} em_http_health_t;

/* Health for /healthz, written into why[0..why_cap): for DEGRADED and DOWN a one-line reason;
 * then, for any health, lines of figures the body shows after the state, each beginning with
 * '\n' (called on the HTTP thread; must be thread-safe). */
typedef em_http_health_t (*em_http_health_fn)(void *ctx, char *why, size_t why_cap);

#define EM_HTTP_API_WORKERS_DEFAULT 4u  /* --api-workers */
#define EM_HTTP_API_WORKERS_MAX     64u /* = EM_LANE_MAX_WORKERS */

/*
 * Starts serving on listen ("HOST:PORT", HOST an IPv4 or [IPv6] literal; port 0 picks a free
 * one, see em_http_port()). db_path (borrowed for the call; NULL: no store, its endpoints answer
 * 503) is opened read-only once per API worker (api_workers, 1..EM_HTTP_API_WORKERS_MAX, each
 * with two connections: history.h). Returns 0, or -EINVAL for a bad address or worker count,
 * -EADDRINUSE, -EIO (the store cannot be opened), or another -errno, with a message in err.
 */
int em_http_start(em_http_t **out, const char *listen, em_registry_t *reg, const char *db_path,
                  unsigned api_workers, em_http_health_fn health, void *ctx, char *err,
                  size_t err_cap);

/* What the connection policy and the log limit did since the start (all counters). */
typedef struct {
  uint64_t connections;          /* Open now (a gauge). */
  uint64_t evicted_total;        /* Closed while a head was due, to make room for a new one. */
  uint64_t slow_heads_total;     /* Closed because a request head took too long in all. */
  uint64_t refused_total;        /* New connections refused: no room and nothing to evict. */
  uint64_t log_suppressed_total; /* libmicrohttpd messages the rate limit kept off stderr. */
  uint64_t api_workers;          /* The API lane's worker threads (constant). */
  uint64_t api_in_flight;        /* Lane requests running or waiting now (a gauge). */
  uint64_t api_refused_total;    /* Lane requests answered 503 + Retry-After: lane full. */
} em_http_stats_t;

/* Copies the figures into *out (thread-safe; relaxed reads, each field on its own). A NULL h
 * gives zeros. */
void em_http_stats(const em_http_t *h, em_http_stats_t *out);

/* The port actually bound. */
uint16_t em_http_port(const em_http_t *h);

/* Stops the daemon (waits for requests in flight) and frees. NULL is a no-op. */
void em_http_stop(em_http_t *h);

#endif /* EM_AGG_HTTP_H */
