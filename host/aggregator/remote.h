/*
 * remote.h - Prometheus remote write 1.0 from the aggregator to any number of endpoints
 * (Prometheus with --web.enable-remote-write-receiver, Mimir, Thanos receive, Cortex).
 *
 * The caller appends series (em_remote_sample, em_remote_histogram) from its own thread; they
 * are batched into one WriteRequest, sealed (snappy) at batch_series series or every
 * flush_ms, and queued on every endpoint. One sender thread delivers them. Appending never
 * waits on the network: a full endpoint queue drops the new request and counts it.
 *
 * Ownership: em_remote_new copies every string of the config; em_remote_free releases all.
 * Thread-safety: every function may be called from any thread (one mutex, never held across
 * network I/O), except that em_remote_free must be the last call.
 */
#ifndef EM_REMOTE_H
#define EM_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "native.h"
#include "prom_rw.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EM_REMOTE_MAX_ENDPOINTS          16
#define EM_REMOTE_DEFAULT_TIMEOUT_MS     10000u
#define EM_REMOTE_DEFAULT_QUEUE_REQUESTS 64u
#define EM_REMOTE_DEFAULT_BATCH_SERIES   500u
#define EM_REMOTE_DEFAULT_FLUSH_MS       1000u
#define EM_REMOTE_DEFAULT_MAX_BYTES      (4u << 20) /* Uncompressed request cap. */
#define EM_REMOTE_DEFAULT_BACKOFF_MIN_MS 100u
#define EM_REMOTE_DEFAULT_BACKOFF_MAX_MS 5000u
#define EM_REMOTE_MAX_QUEUE_REQUESTS     4096u

typedef struct {
  const char *url;          /* http:// or https://, no user:password@, no blanks; required. */
  const char *ca_file;      /* PEM bundle to verify the server with; NULL: the system's. */
  bool insecure;            /* Skip TLS certificate and host name verification. */
  const char *username;     /* Basic auth: username and password both, or neither. */
  const char *password;     /* */
  const char *bearer_token; /* Authorization: Bearer; not together with basic auth. */
  uint32_t timeout_ms;      /* Whole request; 0: EM_REMOTE_DEFAULT_TIMEOUT_MS. */
  uint32_t queue_requests;  /* Sealed requests queued; 0: default; at most MAX_QUEUE. */
} em_remote_endpoint_cfg_t;

typedef struct {
  const em_remote_endpoint_cfg_t *endpoints; /* 1..EM_REMOTE_MAX_ENDPOINTS, borrowed. */
  size_t n_endpoints;
  uint32_t batch_series;    /* Seal at this many series; 0: default. */
  uint32_t flush_ms;        /* Seal a non-empty batch at least this often; 0: default. */
  size_t max_request_bytes; /* Uncompressed cap of one request; 0: default. */
  uint32_t backoff_min_ms;  /* First retry delay; 0: default. */
  uint32_t backoff_max_ms;  /* Cap on the retry delay; 0: default; >= backoff_min_ms. */
  const char *user_agent;   /* NULL: "edgemon". */
} em_remote_cfg_t;

/* Per endpoint. Counters are cumulative since em_remote_new. */
typedef struct {
  uint64_t sent_requests;       /* Answered 2xx. */
  uint64_t sent_samples;        /* Samples in them. */
  uint64_t sent_histograms;     /* Native histograms in them. */
  uint64_t failed_network;      /* Attempts without an HTTP answer (connect, TLS, timeout). */
  uint64_t failed_5xx;          /* Attempts answered 5xx (retried). */
  uint64_t failed_429;          /* Attempts answered 429 (retried). */
  uint64_t failed_4xx;          /* Requests answered another 4xx (or 1xx/3xx): dropped. */
  uint64_t retries;             /* Attempts after the first of a request. */
  uint64_t dropped_requests;    /* Queue full or 4xx. */
  uint64_t dropped_samples;     /* Samples in the dropped requests. */
  uint64_t dropped_histograms;  /* Histograms in the dropped requests. */
  uint32_t queue_depth;         /* Requests queued now, the one in flight included. */
  uint32_t queue_capacity;      /* The bound. */
  int64_t last_success_unix_ms; /* Wall clock of the last 2xx; 0 before the first. */
} em_remote_stats_t;

typedef struct em_remote em_remote_t;

/* What an attempt's outcome means for its request. */
typedef enum {
  EM_REMOTE_DONE,  /* 2xx: delivered. */
  EM_REMOTE_RETRY, /* Network error, 5xx, 429: again after a backoff. */
  EM_REMOTE_DROP,  /* Any other status: the request itself is refused; sending it again
                      cannot help. */
} em_remote_verdict_t;

/*
 * Checks cfg, copies it and starts the sender thread. Returns 0 with *out set, -EINVAL (no or
 * too many endpoints, a URL not http(s)://, with user:password@ or blanks, a username without a
 * password or the other way, basic and bearer together, backoff_max_ms < backoff_min_ms, a queue
 * over the maximum), -ENOMEM, or a negative errno from starting the thread or libcurl (-EIO).
 */
int em_remote_new(em_remote_t **out, const em_remote_cfg_t *cfg);

/*
 * Seals what is batched, lets the sender deliver what is queued for up to drain_ms (retries
 * included), then stops it, abandons the rest and frees r. r may be NULL.
 */
void em_remote_free(em_remote_t *r, uint32_t drain_ms);

/*
 * Batches one sample / one native histogram series (see em_prom_rw_sample and
 * em_prom_rw_histogram for the arguments, all borrowed for the call). Returns 0, -EINVAL
 * (bad names or histogram), -EOVERFLOW (one series larger than max_request_bytes) or -ENOMEM.
 * Never waits on the network.
 */
int em_remote_sample(em_remote_t *r, const char *name, const em_prom_rw_label_t *labels,
                     size_t n_labels, double value, int64_t ts_ms);
int em_remote_histogram(em_remote_t *r, const char *name, const em_prom_rw_label_t *labels,
                        size_t n_labels, const em_native_t *nh, int64_t ts_ms);

/* Seals the current batch now (the end of an ingest tick, say). Returns 0 or -EINVAL. */
int em_remote_flush(em_remote_t *r);

/* Endpoints configured (index order of the config). */
size_t em_remote_n_endpoints(const em_remote_t *r);

/* Endpoint k's URL (borrowed, valid until em_remote_free; it holds no credentials, so it may be
 * shown, e.g. as a label), or NULL when k is out of range. */
const char *em_remote_endpoint_url(const em_remote_t *r, size_t k);

/* Copies endpoint k's counters into *out. Returns 0 or -EINVAL (NULL, k out of range). */
int em_remote_stats(em_remote_t *r, size_t k, em_remote_stats_t *out);

/* The verdict for an attempt: http_status is the status answered, 0 when none was (network
 * error). */
em_remote_verdict_t em_remote_classify(long http_status);

/*
 * The delay before retry number `attempt` (1 for the first retry): min_ms * 2^(attempt-1)
 * capped at max_ms, then jittered into [delay/2, delay] by `random` (any 32-bit value).
 * Never above max_ms; 0 when max_ms is 0.
 */
uint32_t em_remote_backoff_ms(uint32_t attempt, uint32_t min_ms, uint32_t max_ms, uint32_t random);

#ifdef __cplusplus
}
#endif

#endif /* EM_REMOTE_H */
