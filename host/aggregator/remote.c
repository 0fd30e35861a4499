/*
 * remote.c - remote write 1.0 to several endpoints through one sender thread (see remote.h).
 *
 * Why one thread with libcurl's multi interface rather than the aggregator's libuv loop: the
 * loop is the ingest path, and TLS handshakes, name resolution of the endpoints and snappy-ed
 * request bodies of a few MiB would all run on it; driving curl from libuv needs the socket
 * and timer callbacks of curl_multi_socket_action wired to uv_poll_t and uv_timer_t handles
 * for every connection, which is more code to get right than the queue below, and it would
 * still do the work on the ingest thread. A single sender thread keeps the network entirely
 * off ingest, serves every endpoint with one curl_multi_poll (one transfer per endpoint at a
 * time, connections kept alive), and the only thing the two threads share is the mutex
 * below, never held across I/O. No thread per request, no thread per endpoint.
 *
 * Data path:
 *
 *   caller: em_remote_sample/histogram ──▶ cur (em_prom_rw_t) ──seal──▶ req_t (snappy)
 *        at batch_series series, a series that does not fit, em_remote_flush, or flush_ms
 *        (the sender seals on its timer) ──▶ pushed on every endpoint's ring (refcounted),
 *        dropped and counted on an endpoint whose ring is full
 *   sender: per endpoint, the ring's head is the one request in flight or in backoff
 *
 * Endpoint states (the ring's head):
 *
 *   IDLE ──head queued, now >= next_ms (send_head)──▶ BUSY
 *   BUSY ──2xx (finish)──────────────────▶ IDLE, head popped, sent_* counted
 *   BUSY ──network, 5xx, 429 (finish)────▶ IDLE, next_ms = now + backoff (head kept)
 *   BUSY ──other status (finish)─────────▶ IDLE, head popped, dropped_* counted
 *
 * Invariants: (1) only the sender pops a ring, so the head's body stays valid while curl
 * reads it without the lock; (2) a request is freed when its last ring lets it go;
 * (3) ring length <= capacity, so memory is bounded by endpoints x capacity x
 * max_request_bytes (compressed) plus the batch being built.
 *
 * Retries: a retryable failure waits em_remote_backoff_ms(attempt) (100 ms doubling to 5 s by
 * default, jittered to [d/2, d]) and the head is tried again, indefinitely, as Prometheus's
 * own queue manager does: while an endpoint is down its ring fills and new requests are
 * dropped and counted, and when it returns the oldest queued data goes first.
 *
 * Owns: the sender thread, a curl multi handle and one easy handle per endpoint, the copied
 * config strings, the batch, the rings and their requests.
 */
#define _GNU_SOURCE

#include "remote.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  unsigned refs; /* Rings holding it. */
  uint8_t *body; /* Snappy-compressed WriteRequest. */
  size_t len;    /* Bytes of body. */
  size_t n_samples, n_histograms;
} req_t;

typedef struct {
  char *url, *ca_file, *username, *password;
  bool insecure;
  uint32_t timeout_ms;
  CURL *easy;
  struct curl_slist *headers;
  req_t **ring;
  uint32_t cap, head, count;
  bool busy;        /* Head in flight. */
  uint32_t attempt; /* Attempts of the head so far. */
  int64_t next_ms;  /* Monotonic time before which the head is not sent again. */
  em_remote_stats_t st;
} ep_t;

struct em_remote {
  pthread_mutex_t mu;
  pthread_t thread;
  bool thread_started;
  CURLM *multi;
  ep_t *eps;
  size_t n_eps;
  em_prom_rw_t cur;
  uint32_t batch_series, flush_ms, backoff_min_ms, backoff_max_ms;
  char *user_agent;
  int64_t last_seal_ms; /* Monotonic. */
  bool stopping;
  int64_t drain_until_ms;
  uint32_t rand_state;
};

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

em_remote_verdict_t em_remote_classify(long http_status) {
  if (http_status >= 200 && http_status < 300) {
    return EM_REMOTE_DONE;
  }
  if (http_status == 0 || http_status == 429 || (http_status >= 500 && http_status < 600)) {
    return EM_REMOTE_RETRY;
  }
  return EM_REMOTE_DROP;
}

uint32_t em_remote_backoff_ms(uint32_t attempt, uint32_t min_ms, uint32_t max_ms, uint32_t random) {
  uint64_t d = min_ms;
  for (uint32_t k = 1; k < attempt && d > 0 && d < max_ms; k++) {
    d *= 2;
  }
  if (d > max_ms) {
    d = max_ms;
  }
  uint64_t half = d / 2;
  return (uint32_t)(half + random % (d - half + 1));
}

static char *dup_or_null(const char *s, int *rc) {
  if (!s) {
    return NULL;
  }
  char *d = strdup(s);
  if (!d) {
    *rc = -ENOMEM;
  }
  return d;
}

static void req_release(req_t *q) {
  if (q && --q->refs == 0) {
    free(q->body);
    free(q);
  }
}

static void count_drop(ep_t *e, const req_t *q) {
  e->st.dropped_requests++;
  e->st.dropped_samples += q->n_samples;
  e->st.dropped_histograms += q->n_histograms;
}

/* Compresses the batch into a request and queues it on every endpoint. Lock held. Returns
 * whether anything was queued (the sender should wake). */
static bool seal_locked(em_remote_t *r) {
  r->last_seal_ms = mono_ms();
  if (r->cur.n_series == 0) {
    return false;
  }
  size_t len = 0;
  const uint8_t *data = em_prom_rw_data(&r->cur, &len);
  req_t tmp = {.n_samples = r->cur.n_samples, .n_histograms = r->cur.n_histograms};
  req_t *q = calloc(1, sizeof(*q));
  if (!q || em_prom_rw_compress(data, len, &tmp.body, &tmp.len) != 0) {
    free(q);
    for (size_t k = 0; k < r->n_eps; k++) {
      count_drop(&r->eps[k], &tmp);
    }
    em_prom_rw_reset(&r->cur);
    return false;
  }
  *q = tmp;
  q->refs = 1; /* ours until the loop ends */
  bool queued = false;
  for (size_t k = 0; k < r->n_eps; k++) {
    ep_t *e = &r->eps[k];
    if (e->count == e->cap) {
      count_drop(e, q);
      continue;
    }
    e->ring[(e->head + e->count) % e->cap] = q;
    e->count++;
    q->refs++;
    queued = true;
  }
  req_release(q);
  em_prom_rw_reset(&r->cur);
  return queued;
}

static void wake(em_remote_t *r, bool queued) {
  if (queued) {
    curl_multi_wakeup(r->multi);
  }
}

/* Appends through fn; a series that does not fit the batch seals it and goes in a new one. */
static int append(em_remote_t *r, int (*fn)(em_remote_t *, const void *), const void *arg) {
  if (!r) {
    return -EINVAL;
  }
  pthread_mutex_lock(&r->mu);
  bool queued = false;
  int rc = fn(r, arg);
  if ((rc == -EOVERFLOW || rc == -ENOMEM) && r->cur.n_series > 0) {
    queued = seal_locked(r);
    rc = fn(r, arg);
  }
  if (rc == 0 && r->cur.n_series >= r->batch_series) {
    queued = seal_locked(r) || queued;
  }
  pthread_mutex_unlock(&r->mu);
  wake(r, queued);
  return rc;
}

typedef struct {
  const char *name;
  const em_prom_rw_label_t *labels;
  size_t n_labels;
  double value;
  const em_native_t *nh;
  int64_t ts_ms;
} series_args_t;

static int put_sample(em_remote_t *r, const void *arg) {
  const series_args_t *a = arg;
  return em_prom_rw_sample(&r->cur, a->name, a->labels, a->n_labels, a->value, a->ts_ms);
}

static int put_histogram(em_remote_t *r, const void *arg) {
  const series_args_t *a = arg;
  return em_prom_rw_histogram(&r->cur, a->name, a->labels, a->n_labels, a->nh, a->ts_ms);
}

int em_remote_sample(em_remote_t *r, const char *name, const em_prom_rw_label_t *labels,
                     size_t n_labels, double value, int64_t ts_ms) {
  series_args_t a = {name, labels, n_labels, value, NULL, ts_ms};
  return append(r, put_sample, &a);
}

int em_remote_histogram(em_remote_t *r, const char *name, const em_prom_rw_label_t *labels,
                        size_t n_labels, const em_native_t *nh, int64_t ts_ms) {
  series_args_t a = {name, labels, n_labels, 0, nh, ts_ms};
  return append(r, put_histogram, &a);
}

int em_remote_flush(em_remote_t *r) {
  if (!r) {
    return -EINVAL;
  }
  pthread_mutex_lock(&r->mu);
  bool queued = seal_locked(r);
  pthread_mutex_unlock(&r->mu);
  wake(r, queued);
  return 0;
}

size_t em_remote_n_endpoints(const em_remote_t *r) {
  return r ? r->n_eps : 0;
}

const char *em_remote_endpoint_url(const em_remote_t *r, size_t k) {
  return r && k < r->n_eps ? r->eps[k].url : NULL;
}

int em_remote_stats(em_remote_t *r, size_t k, em_remote_stats_t *out) {
  if (!r || !out || k >= r->n_eps) {
    return -EINVAL;
  }
  pthread_mutex_lock(&r->mu);
  *out = r->eps[k].st;
  out->queue_depth = r->eps[k].count;
  out->queue_capacity = r->eps[k].cap;
  pthread_mutex_unlock(&r->mu);
  return 0;
}

/* ---- Sender thread ---- */

static uint32_t next_rand(em_remote_t *r) {
  uint32_t x = r->rand_state; /* xorshift32 */
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  r->rand_state = x;
  return x;
}

/* Starts the head of e's ring. Lock held; the head stays until finish pops it. */
static void send_head(em_remote_t *r, ep_t *e) {
  req_t *q = e->ring[e->head];
  curl_easy_setopt(e->easy, CURLOPT_POSTFIELDS, (const char *)q->body);
  curl_easy_setopt(e->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)q->len);
  if (e->attempt > 0) {
    e->st.retries++;
  }
  e->attempt++;
  e->busy = true;
  if (curl_multi_add_handle(r->multi, e->easy) != CURLM_OK) {
    e->busy = false;
    e->st.failed_network++;
    e->next_ms = mono_ms() + em_remote_backoff_ms(e->attempt, r->backoff_min_ms, r->backoff_max_ms,
                                                  next_rand(r));
  }
}

static void pop_head(ep_t *e) {
  req_release(e->ring[e->head]);
  e->ring[e->head] = NULL;
  e->head = (e->head + 1) % e->cap;
  e->count--;
  e->attempt = 0;
  e->next_ms = 0;
}

/* One transfer of e ended with result and status. Lock held. */
static void finish(em_remote_t *r, ep_t *e, CURLcode result, long status) {
  e->busy = false;
  req_t *q = e->ring[e->head];
  if (result != CURLE_OK) {
    status = 0;
  }
  switch (em_remote_classify(status)) {
  case EM_REMOTE_DONE:
    e->st.sent_requests++;
    e->st.sent_samples += q->n_samples;
    e->st.sent_histograms += q->n_histograms;
    e->st.last_success_unix_ms = wall_ms();
    pop_head(e);
    break;
  case EM_REMOTE_DROP:
    e->st.failed_4xx++;
    count_drop(e, q);
    pop_head(e);
    break;
  case EM_REMOTE_RETRY:
    if (status == 0) {
      e->st.failed_network++;
    } else if (status == 429) {
      e->st.failed_429++;
    } else {
      e->st.failed_5xx++;
    }
    e->next_ms = mono_ms() + em_remote_backoff_ms(e->attempt, r->backoff_min_ms, r->backoff_max_ms,
                                                  next_rand(r));
    break;
  }
}

/* Starts what is due and returns how long the sender may sleep (ms). Lock held. */
static int schedule(em_remote_t *r, int64_t now) {
  int64_t wait = 1000;
  if (!r->stopping) {
    int64_t seal_at = r->last_seal_ms + r->flush_ms;
    if (now >= seal_at) {
      seal_locked(r);
      seal_at = now + r->flush_ms;
    }
    wait = seal_at - now;
  }
  for (size_t k = 0; k < r->n_eps; k++) {
    ep_t *e = &r->eps[k];
    if (e->busy || e->count == 0) {
      continue;
    }
    if (now >= e->next_ms) {
      send_head(r, e);
    }
    if (!e->busy && e->next_ms - now < wait) {
      wait = e->next_ms - now;
    }
  }
  return wait < 0 ? 0 : (int)wait;
}

static bool done_locked(const em_remote_t *r, int64_t now) {
  if (!r->stopping) {
    return false;
  }
  if (now >= r->drain_until_ms) {
    return true;
  }
  for (size_t k = 0; k < r->n_eps; k++) {
    if (r->eps[k].count > 0) {
      return false;
    }
  }
  return true;
}

static void *sender(void *arg) {
  em_remote_t *r = arg;
  for (;;) {
    pthread_mutex_lock(&r->mu);
    int64_t now = mono_ms();
    if (done_locked(r, now)) {
      pthread_mutex_unlock(&r->mu);
      break;
    }
    int wait_ms = schedule(r, now);
    if (r->stopping && wait_ms > r->drain_until_ms - now) {
      wait_ms = (int)(r->drain_until_ms - now);
    }
    int busy = 0;
    for (size_t k = 0; k < r->n_eps; k++) {
      busy += r->eps[k].busy;
    }
    pthread_mutex_unlock(&r->mu);

    int running = 0;
    curl_multi_perform(r->multi, &running);
    /* A transfer that ended in this perform (a refused connection) is reported at the next one
     * only, by libcurl 7.74 (Debian 11) at least, which then has no socket nor timer to wake the
     * poll: no wait, or a retry would wait for the flush timer. */
    if (running < busy) {
      wait_ms = 0;
    }
    curl_multi_poll(r->multi, NULL, 0, wait_ms < 0 ? 0 : wait_ms, NULL);
    curl_multi_perform(r->multi, &running);
    CURLMsg *m;
    int left = 0;
    while ((m = curl_multi_info_read(r->multi, &left))) {
      if (m->msg != CURLMSG_DONE) {
        continue;
      }
      CURL *easy = m->easy_handle;
      CURLcode result = m->data.result;
      long status = 0;
      curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
      curl_multi_remove_handle(r->multi, easy);
      pthread_mutex_lock(&r->mu);
      for (size_t k = 0; k < r->n_eps; k++) {
        if (r->eps[k].easy == easy) {
          finish(r, &r->eps[k], result, status);
        }
      }
      pthread_mutex_unlock(&r->mu);
    }
  }
  for (size_t k = 0; k < r->n_eps; k++) {
    if (r->eps[k].busy) {
      curl_multi_remove_handle(r->multi, r->eps[k].easy);
      r->eps[k].busy = false;
    }
  }
  return NULL;
}

/* ---- Lifecycle ---- */

static size_t discard_body(char *p, size_t size, size_t n, void *ctx) {
  (void)p;
  (void)ctx;
  return size * n;
}

/* Whether url has user information (user:password@) before its host: credentials belong in
 * username/password, so that the URL can be shown (logs, /metrics labels) as it is. */
static bool has_userinfo(const char *url) {
  const char *host = strstr(url, "://") + 3;
  size_t authority = strcspn(host, "/?#");
  return memchr(host, '@', authority) != NULL;
}

static int check_endpoint(const em_remote_endpoint_cfg_t *c) {
  if (!c->url || (strncmp(c->url, "http://", 7) != 0 && strncmp(c->url, "https://", 8) != 0) ||
      has_userinfo(c->url) || c->url[strcspn(c->url, " \t\r\n")] != '\0') {
    return -EINVAL;
  }
  if ((c->username == NULL) != (c->password == NULL) || (c->username && c->bearer_token) ||
      c->queue_requests > EM_REMOTE_MAX_QUEUE_REQUESTS) {
    return -EINVAL;
  }
  return 0;
}

static int ep_init(ep_t *e, const em_remote_endpoint_cfg_t *c, const char *user_agent) {
  int rc = 0;
  e->url = dup_or_null(c->url, &rc);
  e->ca_file = dup_or_null(c->ca_file, &rc);
  e->username = dup_or_null(c->username, &rc);
  e->password = dup_or_null(c->password, &rc);
  e->insecure = c->insecure;
  e->timeout_ms = c->timeout_ms ? c->timeout_ms : EM_REMOTE_DEFAULT_TIMEOUT_MS;
  e->cap = c->queue_requests ? c->queue_requests : EM_REMOTE_DEFAULT_QUEUE_REQUESTS;
  e->ring = calloc(e->cap, sizeof(*e->ring));
  e->easy = curl_easy_init();
  if (rc != 0 || !e->ring || !e->easy) {
    return rc != 0 || !e->ring ? -ENOMEM : -EIO;
  }
  static const char *const fixed[] = {
      "Content-Encoding: " EM_PROM_RW_ENCODING, "Content-Type: " EM_PROM_RW_CONTENT_TYPE,
      "X-Prometheus-Remote-Write-Version: " EM_PROM_RW_VERSION,
      "Expect:", /* no 100-continue round trip */
  };
  for (size_t k = 0; k < sizeof(fixed) / sizeof(fixed[0]); k++) {
    struct curl_slist *h = curl_slist_append(e->headers, fixed[k]);
    if (!h) {
      return -ENOMEM;
    }
    e->headers = h;
  }
  if (c->bearer_token) {
    char *line = NULL;
    if (asprintf(&line, "Authorization: Bearer %s", c->bearer_token) < 0) {
      return -ENOMEM;
    }
    struct curl_slist *h = curl_slist_append(e->headers, line);
    free(line);
    if (!h) {
      return -ENOMEM;
    }
    e->headers = h;
  }
  CURL *x = e->easy;
  curl_easy_setopt(x, CURLOPT_URL, e->url);
#if LIBCURL_VERSION_NUM >= 0x075500
  curl_easy_setopt(x, CURLOPT_PROTOCOLS_STR, "http,https");
#else
  /* Before 7.85 (Debian 11: 7.74, Ubuntu 20.04: 7.68, the arm64 build's baseline). */
  curl_easy_setopt(x, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
  curl_easy_setopt(x, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(x, CURLOPT_POST, 1L);
  curl_easy_setopt(x, CURLOPT_HTTPHEADER, e->headers);
  curl_easy_setopt(x, CURLOPT_USERAGENT, user_agent);
  curl_easy_setopt(x, CURLOPT_TIMEOUT_MS, (long)e->timeout_ms);
  curl_easy_setopt(x, CURLOPT_CONNECTTIMEOUT_MS, (long)e->timeout_ms);
  curl_easy_setopt(x, CURLOPT_WRITEFUNCTION, discard_body);
  curl_easy_setopt(x, CURLOPT_FOLLOWLOCATION, 0L);
  if (e->ca_file) {
    curl_easy_setopt(x, CURLOPT_CAINFO, e->ca_file);
  }
  if (e->insecure) {
    curl_easy_setopt(x, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(x, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (e->username) {
    curl_easy_setopt(x, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
    curl_easy_setopt(x, CURLOPT_USERNAME, e->username);
    curl_easy_setopt(x, CURLOPT_PASSWORD, e->password);
  }
  e->st.queue_capacity = e->cap;
  return 0;
}

static void ep_deinit(ep_t *e) {
  if (e->easy) {
    curl_easy_cleanup(e->easy);
  }
  curl_slist_free_all(e->headers);
  for (uint32_t k = 0; e->ring && k < e->count; k++) {
    req_release(e->ring[(e->head + k) % e->cap]);
  }
  free(e->ring);
  free(e->url);
  free(e->ca_file);
  free(e->username);
  free(e->password);
}

static void destroy(em_remote_t *r) {
  for (size_t k = 0; r->eps && k < r->n_eps; k++) {
    ep_deinit(&r->eps[k]);
  }
  if (r->multi) {
    curl_multi_cleanup(r->multi);
  }
  free(r->eps);
  free(r->user_agent);
  em_prom_rw_deinit(&r->cur);
  pthread_mutex_destroy(&r->mu);
  free(r);
  curl_global_cleanup();
}

static int check_cfg(const em_remote_cfg_t *cfg) {
  if (!cfg || !cfg->endpoints || cfg->n_endpoints == 0 ||
      cfg->n_endpoints > EM_REMOTE_MAX_ENDPOINTS) {
    return -EINVAL;
  }
  uint32_t lo = cfg->backoff_min_ms ? cfg->backoff_min_ms : EM_REMOTE_DEFAULT_BACKOFF_MIN_MS;
  uint32_t hi = cfg->backoff_max_ms ? cfg->backoff_max_ms : EM_REMOTE_DEFAULT_BACKOFF_MAX_MS;
  if (hi < lo) {
    return -EINVAL;
  }
  for (size_t k = 0; k < cfg->n_endpoints; k++) {
    if (check_endpoint(&cfg->endpoints[k]) != 0) {
      return -EINVAL;
    }
  }
  return 0;
}

int em_remote_new(em_remote_t **out, const em_remote_cfg_t *cfg) {
  if (!out) {
    return -EINVAL;
  }
  *out = NULL;
  int rc = check_cfg(cfg);
  if (rc != 0) {
    return rc;
  }
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    return -EIO;
  }
  em_remote_t *r = calloc(1, sizeof(*r));
  if (!r) {
    curl_global_cleanup();
    return -ENOMEM;
  }
  pthread_mutex_init(&r->mu, NULL);
  r->batch_series = cfg->batch_series ? cfg->batch_series : EM_REMOTE_DEFAULT_BATCH_SERIES;
  r->flush_ms = cfg->flush_ms ? cfg->flush_ms : EM_REMOTE_DEFAULT_FLUSH_MS;
  r->backoff_min_ms = cfg->backoff_min_ms ? cfg->backoff_min_ms : EM_REMOTE_DEFAULT_BACKOFF_MIN_MS;
  r->backoff_max_ms = cfg->backoff_max_ms ? cfg->backoff_max_ms : EM_REMOTE_DEFAULT_BACKOFF_MAX_MS;
  r->rand_state = (uint32_t)mono_ms() | 1u;
  r->last_seal_ms = mono_ms();
  r->user_agent = strdup(cfg->user_agent ? cfg->user_agent : "edgemon");
  r->eps = calloc(cfg->n_endpoints, sizeof(*r->eps));
  r->n_eps = cfg->n_endpoints;
  r->multi = curl_multi_init();
  rc = em_prom_rw_init(&r->cur, cfg->max_request_bytes ? cfg->max_request_bytes
                                                       : EM_REMOTE_DEFAULT_MAX_BYTES);
  if (rc == 0 && (!r->user_agent || !r->eps)) {
    rc = -ENOMEM;
  }
  if (rc == 0 && !r->multi) {
    rc = -EIO;
  }
  for (size_t k = 0; rc == 0 && k < r->n_eps; k++) {
    rc = ep_init(&r->eps[k], &cfg->endpoints[k], r->user_agent);
  }
  if (rc == 0) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the sender takes no signals */
    rc = -pthread_create(&r->thread, NULL, sender, r);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    r->thread_started = rc == 0;
  }
  if (rc != 0) {
    destroy(r);
    return rc;
  }
  *out = r;
  return 0;
}

void em_remote_free(em_remote_t *r, uint32_t drain_ms) {
  if (!r) {
    return;
  }
  pthread_mutex_lock(&r->mu);
  seal_locked(r);
  r->stopping = true;
  r->drain_until_ms = mono_ms() + drain_ms;
  pthread_mutex_unlock(&r->mu);
  curl_multi_wakeup(r->multi);
  if (r->thread_started) {
    pthread_join(r->thread, NULL);
  }
  destroy(r);
}
