/*
 * http.c - the aggregator's HTTP endpoints on libmicrohttpd (see http.h).
 *
 * One MHD daemon in "external" epoll mode, driven by one thread of ours: serve_loop() polls
 * MHD's epoll descriptor and our wake eventfd for at most HTTP_TICK_MS (less when MHD wants a
 * timeout sooner), runs MHD_run(), then sweeps the connection table and the log limit. Every
 * MHD callback runs on that thread, so the table needs no lock. (libmicrohttpd 0.9.75 drops
 * MHD_USE_ITC in external mode, so MHD_resume_connection() from a worker would wait for the
 * next tick: the worker writes the wake eventfd after it.)
 * Every request that reads only memory is answered on the first call of the access handler
 * (bodies are never read: no endpoint takes one).
 *
 * The API lane (the requests that read SQLite; http.h lists them). The serving thread never
 * runs a query: it parses the parameters, then submit() reserves a place in the lane (lane.h:
 * api_workers threads, as many places to wait), suspends the connection and pushes the job; a
 * worker answers it with its own em_history_t (read-only connections, opened at start),
 * resumes the connection and writes the wake eventfd; the serving thread wakes, and MHD_run()
 * calls handle() again, which queues the answer. Without a place the request is answered at once
 * 503 + Retry-After (HTTP_API_RETRY_S). A suspended connection is in no head state, so the
 * connection policy below never evicts it, and libmicrohttpd applies no timeout to it; each query
 * ends by its own deadline (history.h), which bounds how long a request stays parked. At stop the
 * serving thread ends first, then em_lane_free() runs what was admitted (the jobs still waiting
 * answer 503 at once) so that no connection is suspended when MHD_stop_daemon() runs.
 *
 *   a lane request:
 *
 *     handle ──lane full──▶ 503 Retry-After
 *       └──submit──▶ PARKED (suspended; waiting, then running on a worker)
 *                      └──run_job: answer written, MHD_resume_connection──▶ handle again
 *                                                                   └──answer_job──▶ response
 *
 *   edge                        function
 *   -> PARKED                   submit() (em_lane_reserve, MHD_suspend_connection, em_lane_push)
 *   PARKED -> resumed           run_job() on a worker
 *   resumed -> answered         handle() -> answer_job(); request_done() frees a job left over
 *
 * Connection policy (slowloris, idle floods). MHD itself only knows an idle timeout and a hard
 * connection limit, at which it stops accepting: 64 connections trickling a header line every
 * few seconds would hold every slot for as long as they liked. So:
 *   - the table and MHD's limit hold http->max_conns connections (HTTP_MAX_CONNS, less when
 *     RLIMIT_NOFILE leaves fewer than HTTP_FD_RESERVE descriptors to the rest of the process);
 *   - while a request head is due the idle timeout is HTTP_HEAD_IDLE_S, and the whole head (from
 *     accept, or from the end of the previous response on a kept-alive connection) must arrive
 *     within HTTP_HEAD_DEADLINE_MS, else sweep() closes it (counted as a slow head); once the
 *     head is in, the idle timeout is HTTP_TIMEOUT_S;
 *   - below http->policy_conns open connections everyone is admitted. At it, a new connection
 *     evicts the oldest connection still waiting for a request head: of its own address when
 *     that address holds HTTP_SHARE_PER_IP or more, else of all. Only when no connection waits
 *     for a head (every one is being answered) is the new one refused. A client that sends
 *     its request at once is never the oldest waiting head, so it gets in under any flood of
 *     slow or idle connections, and a crowd from one address makes room from its own
 *     connections first. (No hard per-address cap: it would refuse the clients that share an
 *     address with an attacker, behind a NAT, a proxy or on loopback, for as long as the
 *     attacker held the cap: the very outage this policy removes.)
 * Closing is shutdown(2) of the connection's socket: MHD sees the hang-up in its next poll and
 * closes it; the descriptor stays valid until MHD_CONNECTION_NOTIFY_CLOSED, which frees the
 * slot, so a shut-down socket is never someone else's. The policy leaves max_conns /
 * HTTP_EVICT_SLACK_DIV slots for connections evicted but not yet closed.
 *
 *   connection slot states (the slot's in_head and closing flags):
 *
 *     accept ──▶ HEAD ──handler──▶ ANSWER ──response sent, kept alive──▶ HEAD
 *                 │                   └──────closed by MHD─────────┐
 *                 ├──idle HTTP_HEAD_IDLE_S: closed by MHD──────────┤
 *                 └──evicted / head past its deadline──▶ CLOSING ──┴──▶ free
 *
 *   edge                        function
 *   accept (may evict)          admit() from MHD_OPTION_ACCEPT_POLICY, then conn_notify()
 *   HEAD -> ANSWER              handle()
 *   ANSWER -> HEAD              request_done() (MHD_OPTION_NOTIFY_COMPLETED)
 *   HEAD -> CLOSING             evict(), from admit() or sweep()
 *   * -> free                   conn_notify(MHD_CONNECTION_NOTIFY_CLOSED)
 *
 * Log limit: libmicrohttpd writes a line per malformed request. mhd_log() lets through a burst
 * of HTTP_LOG_BURST lines, then one per HTTP_LOG_REFILL_MS; what it holds back is counted, and
 * the count is written as one "N more suppressed" line as soon as a line may be written again
 * (the tick checks), and at stop.
 *
 * Rendering: the handler takes the registry's lock, renders into an em_text_t (or, for /metrics,
 * an em_metrics_out_t in the format the Accept header negotiated), releases the lock, then hands
 * the buffer to MHD (MHD_RESPMEM_MUST_FREE), so the lock is never held while bytes go out on a
 * socket. Negotiation only picks the body's format: the connection policy and limits above are
 * the same for every request.
 *
 * Paths: MHD's own URL unescaping is replaced by a callback that leaves the path as it came,
 * and the device id of /api/devices/<id> is percent-decoded here: a malformed escape, %00 or an
 * id longer than a device id can be is answered 404 before any lookup.
 *
 * Owns the MHD daemon (and through it the listening socket), the serving thread, the API lane
 * and its workers' read connections, the connection table and the em_http_t. em_http_stop() must
 * not race with em_http_start() on the same object; the registry and the health callback must
 * outlive the daemon.
 */
#define _POSIX_C_SOURCE 200809L
#include "http.h"

#include "assets.h"
#include "cohort.h"
#include "forensic_api.h"
#include "history.h"
#include "lane.h"
#include "metrics.h"
#include "query.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HTTP_MAX_CONNS              512u   /* Connection table and MHD's limit. */
#define HTTP_MIN_CONNS              16u    /* Below this, RLIMIT_NOFILE is not honoured. */
#define HTTP_FD_RESERVE             64u    /* Descriptors left to SQLite, MQTT, logs. */
#define HTTP_EVICT_SLACK_DIV        8u     /* Policy acts at max - max/8 open connections. */
#define HTTP_SHARE_PER_IP           64u    /* At this, an address evicts its own first. */
#define HTTP_TIMEOUT_S              10u    /* Idle timeout once a request head is in. */
#define HTTP_HEAD_IDLE_S            5u     /* Idle timeout while a request head is due. */
#define HTTP_HEAD_DEADLINE_MS       10000u /* A whole request head, from accept or last response. */
#define HTTP_TICK_MS                250    /* Longest wait in MHD_run_wait(): sweep cadence. */
#define HTTP_LOG_BURST              20u    /* libmicrohttpd lines written at once ... */
#define HTTP_LOG_REFILL_MS          6000u  /* ... then one per 6 s (10 a minute). */
#define HTTP_API_RETRY_S            1u     /* Retry-After of a request the API lane refuses. */
#define HTTP_API_WAITING_PER_WORKER 1u     /* Lane requests that may wait, per worker. */

_Static_assert(EM_HTTP_API_WORKERS_MAX == EM_LANE_MAX_WORKERS, "http.h's worker bound");

#define CT_JSON "application/json"
#define CT_TEXT "text/plain; charset=utf-8"

#define LOG_PREFIX "edgemon-aggregator: http: libmicrohttpd: "

/* One open connection. conn == NULL: free. */
typedef struct {
  struct MHD_Connection *conn; /* Borrowed from MHD until MHD_CONNECTION_NOTIFY_CLOSED. */
  int fd;                      /* MHD's socket: only ever shut down here, never closed. */
  uint8_t addr[16];            /* Peer address bytes (4 for IPv4, 16 for IPv6). */
  uint8_t addr_len;
  bool in_head;           /* A request head is due (HEAD in the diagram). */
  bool closing;           /* Shut down here; MHD has yet to close it. */
  uint64_t head_start_ms; /* Monotonic ms when the current head became due. */
} conn_slot_t;

struct em_http {
  struct MHD_Daemon *daemon;
  em_registry_t *reg; /* Borrowed. */
  bool have_store;    /* false: the endpoints that read the store answer 503. */
  unsigned api_workers;
  em_history_t **hists; /* api_workers read connections (NULL entries without a store). */
  em_lane_t *lane;      /* The API lane: the queries that read the store run there. */
  em_http_health_fn health;
  void *ctx;
  uint16_t port;

  pthread_t thread;
  bool thread_started;
  int stop;    /* Set (atomically) by em_http_stop(); the serving thread polls it. */
  int mhd_fd;  /* MHD's epoll descriptor (MHD owns it). */
  int wake_fd; /* eventfd: a worker resumed a connection, or em_http_stop(); -1: none. */

  conn_slot_t *slots; /* max_conns entries, serving thread only. */
  unsigned max_conns;
  unsigned policy_conns; /* Open connections at which a new one evicts. */

  /* Counters: written on the serving thread, read anywhere (relaxed atomics). */
  uint64_t open_conns;
  uint64_t evicted_total;
  uint64_t slow_heads_total;
  uint64_t refused_total;
  uint64_t log_suppressed_total;

  /* Log limit, under log_lock (MHD may log from the caller's thread at start and stop). */
  pthread_mutex_t log_lock;
  unsigned log_tokens;    /* Lines that may be written now (at most HTTP_LOG_BURST). */
  uint64_t log_refill_ms; /* Monotonic ms the next token is counted from. */
  uint64_t log_pending;   /* Suppressed since the last summary line. */
};

static uint64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void count(uint64_t *counter) {
  __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED);
}

static void uncount(uint64_t *counter) {
  __atomic_fetch_sub(counter, 1, __ATOMIC_RELAXED);
}

static uint64_t read_count(const uint64_t *counter) {
  return __atomic_load_n(counter, __ATOMIC_RELAXED);
}

/* ---- log limit ---------------------------------------------------------------------------- */

/* Adds the tokens earned since log_refill_ms. Caller holds log_lock. */
static void log_refill(em_http_t *h, uint64_t now_ms) {
  if (h->log_tokens >= HTTP_LOG_BURST) {
    h->log_refill_ms = now_ms;
    return;
  }
  uint64_t earned = (now_ms - h->log_refill_ms) / HTTP_LOG_REFILL_MS;
  if (earned == 0) {
    return;
  }
  h->log_refill_ms += earned * HTTP_LOG_REFILL_MS;
  h->log_tokens =
      earned >= HTTP_LOG_BURST - h->log_tokens ? HTTP_LOG_BURST : h->log_tokens + (unsigned)earned;
}

/* Writes the "N more suppressed" line when there is something to say and (unless forced) a
 * token to spend. Caller holds log_lock. */
static void log_summary(em_http_t *h, bool force) {
  if (h->log_pending == 0 || (!force && h->log_tokens == 0)) {
    return;
  }
  fprintf(stderr,
          LOG_PREFIX "%llu more messages suppressed (at most %u at once, then one per %u s)\n",
          (unsigned long long)h->log_pending, HTTP_LOG_BURST, HTTP_LOG_REFILL_MS / 1000u);
  h->log_pending = 0;
  if (h->log_tokens > 0) {
    h->log_tokens--;
  }
}

/* libmicrohttpd's own messages, on stderr under our prefix, through the limit. */
__attribute__((format(printf, 2, 0))) static void mhd_log(void *cls, const char *fmt, va_list ap) {
  em_http_t *h = cls;
  pthread_mutex_lock(&h->log_lock);
  log_refill(h, mono_ms());
  log_summary(h, false);
  if (h->log_tokens == 0) {
    h->log_pending++;
    count(&h->log_suppressed_total);
    pthread_mutex_unlock(&h->log_lock);
    return;
  }
  h->log_tokens--;
  char line[512];
  if (vsnprintf(line, sizeof(line), fmt, ap) < 0) {
    line[0] = '\0';
  }
  size_t len = strlen(line);
  fprintf(stderr, LOG_PREFIX "%s%s", line, len == 0 || line[len - 1] != '\n' ? "\n" : "");
  pthread_mutex_unlock(&h->log_lock);
}

/* The tick's part: says how much was suppressed once a line may be written again. */
static void log_tick(em_http_t *h, uint64_t now_ms) {
  pthread_mutex_lock(&h->log_lock);
  log_refill(h, now_ms);
  log_summary(h, false);
  pthread_mutex_unlock(&h->log_lock);
}

/* ---- connection policy ---------------------------------------------------------------------- */

/* The address bytes of sa into addr; returns their count (0: not an IP address). */
static uint8_t addr_key(const struct sockaddr *sa, uint8_t addr[16]) {
  if (!sa) {
    return 0;
  }
  if (sa->sa_family == AF_INET) {
    memcpy(addr, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
    return 4;
  }
  if (sa->sa_family == AF_INET6) {
    memcpy(addr, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
    return 16;
  }
  return 0;
}

/* Shuts the slot's socket down; MHD closes the connection on its next poll. */
static void evict(conn_slot_t *s) {
  (void)shutdown(s->fd, SHUT_RDWR);
  s->closing = true;
}

/* The oldest slot waiting for a head (of address addr when addr_len > 0), or NULL. */
static conn_slot_t *oldest_head(em_http_t *h, const uint8_t *addr, uint8_t addr_len) {
  conn_slot_t *best = NULL;
  for (unsigned i = 0; i < h->max_conns; i++) {
    conn_slot_t *s = &h->slots[i];
    if (!s->conn || s->closing || !s->in_head) {
      continue;
    }
    if (addr_len && (s->addr_len != addr_len || memcmp(s->addr, addr, addr_len) != 0)) {
      continue;
    }
    if (!best || s->head_start_ms < best->head_start_ms) {
      best = s;
    }
  }
  return best;
}

/* MHD_OPTION_ACCEPT_POLICY: admits a new connection from sa, making room at policy_conns by
 * evicting the oldest waiting head (of sa's address when it holds HTTP_SHARE_PER_IP or more,
 * else of all), or refuses it when no connection waits for a head. */
static enum MHD_Result admit(void *cls, const struct sockaddr *sa, socklen_t sa_len) {
  (void)sa_len;
  em_http_t *h = cls;
  uint8_t addr[16];
  uint8_t addr_len = addr_key(sa, addr);
  unsigned open = 0;
  unsigned same = 0;
  for (unsigned i = 0; i < h->max_conns; i++) {
    const conn_slot_t *s = &h->slots[i];
    if (!s->conn || s->closing) {
      continue;
    }
    open++;
    if (addr_len && s->addr_len == addr_len && memcmp(s->addr, addr, addr_len) == 0) {
      same++;
    }
  }
  if (open < h->policy_conns) {
    return MHD_YES;
  }
  conn_slot_t *victim = NULL;
  if (addr_len && same >= HTTP_SHARE_PER_IP) {
    victim = oldest_head(h, addr, addr_len);
  }
  if (!victim) {
    victim = oldest_head(h, NULL, 0);
  }
  if (!victim) {
    count(&h->refused_total);
    return MHD_NO;
  }
  evict(victim);
  count(&h->evicted_total);
  return MHD_YES;
}

/* Closes every connection whose request head is past its deadline. */
static void sweep(em_http_t *h, uint64_t now_ms) {
  for (unsigned i = 0; i < h->max_conns; i++) {
    conn_slot_t *s = &h->slots[i];
    if (!s->conn || s->closing || !s->in_head) {
      continue;
    }
    if (now_ms - s->head_start_ms > HTTP_HEAD_DEADLINE_MS) {
      evict(s);
      count(&h->slow_heads_total);
    }
  }
}

/* MHD_OPTION_NOTIFY_CONNECTION: a connection takes a slot at start and frees it at close. */
static void conn_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                        enum MHD_ConnectionNotificationCode code) {
  em_http_t *h = cls;
  if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
    conn_slot_t *s = *socket_context;
    if (s) {
      memset(s, 0, sizeof(*s));
      uncount(&h->open_conns);
    }
    *socket_context = NULL;
    return;
  }
  if (code != MHD_CONNECTION_NOTIFY_STARTED) {
    return;
  }
  const union MHD_ConnectionInfo *fdi =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  conn_slot_t *s = NULL;
  for (unsigned i = 0; i < h->max_conns; i++) {
    if (!h->slots[i].conn) {
      s = &h->slots[i];
      break;
    }
  }
  if (!fdi || !s) {
    /* Cannot happen (MHD's limit is the table's size); refuse rather than lose track. */
    if (fdi) {
      (void)shutdown(fdi->connect_fd, SHUT_RDWR);
    }
    count(&h->refused_total);
    return;
  }
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  *s = (conn_slot_t){.conn = c, .fd = fdi->connect_fd, .in_head = true, .head_start_ms = mono_ms()};
  s->addr_len = addr_key(ci ? ci->client_addr : NULL, s->addr);
  *socket_context = s;
  count(&h->open_conns);
  MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)HTTP_HEAD_IDLE_S);
}

/* The slot of connection c (NULL when it has none). */
static conn_slot_t *slot_of(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return ci ? ci->socket_context : NULL;
}

struct api_job;
static void job_free(struct api_job *job);

/* MHD_OPTION_NOTIFY_COMPLETED: after a response on a kept-alive connection the next head is
 * due, with the short idle timeout and a fresh deadline. A lane job still attached (a request
 * that ended before its answer was queued: the daemon stopping) is freed. */
static void request_done(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)cls;
  if (req_cls && *req_cls) {
    job_free(*req_cls);
    *req_cls = NULL;
  }
  conn_slot_t *s = slot_of(c);
  if (!s || toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) {
    return;
  }
  s->in_head = true;
  s->head_start_ms = mono_ms();
  MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)HTTP_HEAD_IDLE_S);
}

/* ---- responses ------------------------------------------------------------------------------ */

/* Queues `resp` with its status and content type (and the Allow header a 405 needs), then
 * drops this reference to it: MHD keeps its own until the response is sent. */
static enum MHD_Result queue_typed(struct MHD_Connection *c, unsigned status, const char *type,
                                   struct MHD_Response *resp) {
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (status == MHD_HTTP_METHOD_NOT_ALLOWED) {
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  }
  enum MHD_Result rc = MHD_queue_response(c, status, resp);
  MHD_destroy_response(resp);
  return rc;
}

/* Queues `len` bytes of `body` with status and content type. Takes ownership of `body` (a
 * malloc'd buffer, or NULL for an empty body) whether or not it succeeds. */
static enum MHD_Result respond_owned(struct MHD_Connection *c, unsigned status, const char *type,
                                     char *body, size_t len) {
  struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
  if (!resp) {
    free(body);
    return MHD_NO;
  }
  return queue_typed(c, status, type, resp);
}

/* A constant body (copied by MHD). */
static enum MHD_Result respond_const(struct MHD_Connection *c, unsigned status, const char *type,
                                     const char *body) {
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(strlen(body), (void *)(uintptr_t)body, MHD_RESPMEM_MUST_COPY);
  if (!resp) {
    return MHD_NO;
  }
  return queue_typed(c, status, type, resp);
}

/* Sends a rendered text (200), or 500 when rendering failed. Frees the text. */
static enum MHD_Result respond_text(struct MHD_Connection *c, em_text_t *t, int rc,
                                    const char *type) {
  if (rc != 0) {
    em_text_free(t);
    return respond_const(c, MHD_HTTP_INTERNAL_SERVER_ERROR, CT_TEXT, "render failed\n");
  }
  char *body = t->data;
  size_t len = t->len;
  t->data = NULL;
  t->len = t->cap = 0;
  return respond_owned(c, MHD_HTTP_OK, type, body, len);
}

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9') {
    return ch - '0';
  }
  if (ch >= 'a' && ch <= 'f') {
    return ch - 'a' + 10;
  }
  if (ch >= 'A' && ch <= 'F') {
    return ch - 'A' + 10;
  }
  return -1;
}

/* Percent-decodes src into dst[0..cap). Returns false for a malformed escape, a decoded NUL or
 * '/', or a result that does not fit. '+' stays '+' (this is a path, not a query). */
static bool decode_path_segment(const char *src, char *dst, size_t cap) {
  size_t n = 0;
  for (size_t i = 0; src[i]; i++) {
    char ch = src[i];
    if (ch == '%') {
      int hi = hexval(src[i + 1]);
      int lo = hi < 0 ? -1 : hexval(src[i + 2]);
      if (hi < 0 || lo < 0) {
        return false;
      }
      ch = (char)(hi * 16 + lo);
      i += 2;
      if (ch == '\0') {
        return false;
      }
    }
    if (ch == '/' || n + 1 >= cap) {
      return false;
    }
    dst[n++] = ch;
  }
  dst[n] = '\0';
  return n > 0;
}

/* Appends the em_http_stats_t families to an exposition, in its format. */
static void render_http_stats(const em_http_t *h, em_metrics_out_t *out) {
  em_http_stats_t st;
  em_http_stats(h, &st);
  char slow_help[160];
  snprintf(slow_help, sizeof(slow_help),
           "HTTP connections closed because a request head took longer than %u ms.",
           HTTP_HEAD_DEADLINE_MS);
  const struct {
    em_metrics_family_t f;
    uint64_t v;
  } figures[] = {
      {{"edgemon_aggregator_http_connections", "HTTP connections open now.", EM_PROM_GAUGE},
       st.connections},
      {{"edgemon_aggregator_http_evicted_total",
        "HTTP connections closed while their request head was due, to make room for a new "
        "connection.",
        EM_PROM_COUNTER},
       st.evicted_total},
      {{"edgemon_aggregator_http_slow_heads_total", slow_help, EM_PROM_COUNTER},
       st.slow_heads_total},
      {{"edgemon_aggregator_http_refused_total",
        "HTTP connections refused: no room and none to evict.", EM_PROM_COUNTER},
       st.refused_total},
      {{"edgemon_aggregator_http_log_suppressed_total",
        "libmicrohttpd messages held back by the log rate limit.", EM_PROM_COUNTER},
       st.log_suppressed_total},
      {{"edgemon_aggregator_http_api_workers",
        "Worker threads of the API lane: the queries of the store that run at once "
        "(--api-workers).",
        EM_PROM_GAUGE},
       st.api_workers},
      {{"edgemon_aggregator_http_api_in_flight",
        "Requests in the API lane now: running on a worker or waiting for one.", EM_PROM_GAUGE},
       st.api_in_flight},
      {{"edgemon_aggregator_http_api_refused_total",
        "API requests answered 503 with Retry-After because the API lane was full.",
        EM_PROM_COUNTER},
       st.api_refused_total},
  };
  for (size_t i = 0; i < sizeof(figures) / sizeof(figures[0]); i++) {
    em_metrics_out_u64(out, &figures[i].f, NULL, 0, figures[i].v);
  }
}

/* /metrics: the protobuf exposition to a client whose Accept asks for it (a Prometheus with
 * native histograms on), the text format to every other. */
static enum MHD_Result serve_metrics(em_http_t *h, struct MHD_Connection *c) {
  const char *accept = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
  em_metrics_format_t format = em_prom_expo_accepts(accept) ? EM_METRICS_PROTOBUF : EM_METRICS_TEXT;
  em_metrics_out_t out;
  int rc = em_metrics_out_init(&out, format, 0);
  if (rc == 0) {
    em_registry_lock(h->reg);
    rc = em_metrics_render_out(h->reg, &out);
    em_registry_unlock(h->reg);
  }
  if (rc == 0) {
    render_http_stats(h, &out);
  }
  char *body = NULL;
  size_t len = 0;
  if (rc == 0) {
    rc = em_metrics_out_take(&out, &body, &len);
  }
  em_metrics_out_deinit(&out);
  if (rc != 0) {
    return respond_const(c, MHD_HTTP_INTERNAL_SERVER_ERROR, CT_TEXT, "render failed\n");
  }
  return respond_owned(c, MHD_HTTP_OK, em_metrics_content_type(format), body, len);
}

static enum MHD_Result serve_devices(em_http_t *h, struct MHD_Connection *c) {
  em_text_t t = {0};
  em_registry_lock(h->reg);
  int rc = em_metrics_devices_json(h->reg, &t);
  em_registry_unlock(h->reg);
  return respond_text(c, &t, rc, CT_JSON);
}

static enum MHD_Result serve_device(em_http_t *h, struct MHD_Connection *c, const char *raw) {
  char id[EM_PROTO_MAX_NAME_BYTES + 1];
  if (!decode_path_segment(raw, id, sizeof(id))) {
    return respond_const(c, MHD_HTTP_NOT_FOUND, CT_JSON, "{\"error\":\"no such device\"}");
  }
  em_text_t t = {0};
  em_registry_lock(h->reg);
  const em_agg_device_t *d = em_registry_find(h->reg, id);
  int rc = d ? em_metrics_device_json(d, true, &t) : 0;
  em_registry_unlock(h->reg);
  if (!d) {
    em_text_free(&t);
    return respond_const(c, MHD_HTTP_NOT_FOUND, CT_JSON, "{\"error\":\"no such device\"}");
  }
  return respond_text(c, &t, rc, CT_JSON);
}

/* ---- the dashboard's JSON API (history.h) ------------------------------------------------ */

typedef struct {
  em_query_param_t params[EM_QUERY_MAX_PARAMS + 1];
  size_t n; /* At most EM_QUERY_MAX_PARAMS + 1: one more than allowed makes the parse fail. */
} api_args_t;

static enum MHD_Result collect_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value) {
  (void)kind;
  api_args_t *a = cls;
  if (a->n > EM_QUERY_MAX_PARAMS) {
    return MHD_NO;
  }
  a->params[a->n++] = (em_query_param_t){key, value};
  return MHD_YES;
}

static uint64_t realtime_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static enum MHD_Result respond_reply(struct MHD_Connection *c, em_history_reply_t *r) {
  if (!r->body) {
    return respond_const(c, MHD_HTTP_INTERNAL_SERVER_ERROR, CT_JSON,
                         "{\"error\":\"out of memory\"}");
  }
  return respond_owned(c, r->status, CT_JSON, r->body, r->len);
}

/* ---- the API lane: the requests that read the store -------------------------------------- */

/* Wakes the serving thread from its poll (any thread). */
static void wake(em_http_t *h) {
  uint64_t one = 1;
  if (write(h->wake_fd, &one, sizeof(one)) < 0) {
    /* Only EAGAIN (the counter is full) can happen: a wake is pending anyway. */
  }
}

typedef enum { JOB_QUERY, JOB_FORENSIC_LIST, JOB_FORENSIC_GET } job_kind_t;

/* One request that reads the store. The serving thread checks what it can without the store,
 * parks the request (MHD_suspend_connection) and hands the job to the lane; a worker answers it
 * on its own read connections and resumes the connection; MHD then calls handle() again, which
 * queues the answer and frees the job (or request_done() frees it when the request ends
 * otherwise). */
typedef struct api_job {
  em_lane_job_t link; /* First member: the lane hands this pointer back. */
  em_http_t *h;
  struct MHD_Connection *conn; /* Suspended while the job waits and runs. */
  job_kind_t kind;
  em_query_kind_t query; /* JOB_QUERY: which endpoint ... */
  em_query_t q;          /* ... and its parameters, parsed on the serving thread. */
  uint64_t now_ns;       /* CLOCK_REALTIME when the request came. */
  em_forensic_kind_t forensic;
  char id[EM_PROTO_MAX_NAME_BYTES + 1]; /* History and forensics: the device, decoded. */
  char key[32];                         /* JOB_FORENSIC_GET: the key, decoded. */
  em_query_param_t params[EM_QUERY_MAX_PARAMS + 1]; /* JOB_FORENSIC_*: copies, in strings. */
  size_t n_params;
  char *strings;
  /* The answer, written by the worker before it resumes the connection. */
  unsigned status;
  char *body; /* malloc'd; NULL: out of memory. */
  size_t len;
  const char *type; /* A static string. */
} api_job_t;

static void job_free(struct api_job *job) {
  if (job) {
    free(job->body);
    free(job->strings);
    free(job);
  }
}

/* Copies the request's parameters into the job (MHD's own strings are not touched off the
 * serving thread). False when out of memory. */
static bool job_copy_params(api_job_t *job, const api_args_t *args) {
  size_t total = 1;
  for (size_t i = 0; i < args->n; i++) {
    total += strlen(args->params[i].key) + 1;
    total += args->params[i].val ? strlen(args->params[i].val) + 1 : 0;
  }
  job->strings = malloc(total);
  if (!job->strings) {
    return false;
  }
  char *p = job->strings;
  for (size_t i = 0; i < args->n; i++) {
    const char *from[2] = {args->params[i].key, args->params[i].val};
    const char *to[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
      if (from[k]) {
        size_t len = strlen(from[k]) + 1;
        memcpy(p, from[k], len);
        to[k] = p;
        p += len;
      }
    }
    job->params[i] = (em_query_param_t){to[0], to[1]};
  }
  job->n_params = args->n;
  return true;
}

/* The lane's worker: answers the job on this worker's read connection (hist: NULL without a
 * store), then hands the connection back to the serving thread. */
static void run_job(void *ctx, em_lane_job_t *link, bool stopping) {
  em_history_t *hist = ctx;
  api_job_t *job = (api_job_t *)(void *)link;
  em_http_t *h = job->h;
  em_history_reply_t r = {0, NULL, 0};
  em_forensic_reply_t fr = {0, NULL, 0, CT_JSON};
  if (stopping) {
    em_history_error(&r, MHD_HTTP_SERVICE_UNAVAILABLE, "the aggregator is stopping");
  } else if (job->kind == JOB_FORENSIC_LIST) {
    em_forensic_api_list(hist, job->forensic, job->id, job->params, job->n_params, &fr);
  } else if (job->kind == JOB_FORENSIC_GET) {
    em_forensic_api_get(hist, job->forensic, job->id, job->key, job->params, job->n_params, &fr);
  } else if (job->query == EM_QUERY_FLEET) {
    em_history_fleet(hist, h->reg, &job->q, job->now_ns, &r);
  } else if (job->query == EM_QUERY_HISTORY) {
    em_history_device(hist, h->reg, job->id, &job->q, &r);
  } else if (job->query == EM_QUERY_COHORT) {
    em_cohort_query(hist, &job->q, &r);
  } else {
    em_history_latency(hist, &job->q, &r);
  }
  if (job->kind == JOB_QUERY || stopping) {
    job->status = r.status;
    job->body = r.body;
    job->len = r.len;
    job->type = CT_JSON;
  } else {
    job->status = fr.status;
    job->body = fr.body;
    job->len = fr.len;
    job->type = fr.type;
  }
  MHD_resume_connection(job->conn); /* The job is the serving thread's from here on. */
  wake(h);
}

/* 503 with Retry-After: the lane is full (or stopping). */
static enum MHD_Result respond_busy(struct MHD_Connection *c) {
  static const char body[] = "{\"error\":\"busy: too many queries of the store at once\"}";
  struct MHD_Response *resp = MHD_create_response_from_buffer(
      sizeof(body) - 1, (void *)(uintptr_t)body, MHD_RESPMEM_PERSISTENT);
  if (!resp) {
    return MHD_NO;
  }
  char retry[16];
  snprintf(retry, sizeof(retry), "%u", HTTP_API_RETRY_S);
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, CT_JSON);
  MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, retry);
  enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_SERVICE_UNAVAILABLE, resp);
  MHD_destroy_response(resp);
  return rc;
}

/* Parks request c and hands job (owned from here) to the lane, or answers 503 + Retry-After
 * when the lane has no room. The connection is suspended before the job is pushed, so a worker
 * can never resume it first. */
static enum MHD_Result submit(em_http_t *h, struct MHD_Connection *c, void **req_cls,
                              api_job_t *job) {
  if (em_lane_reserve(h->lane) != 0) {
    job_free(job);
    return respond_busy(c);
  }
  job->h = h;
  job->conn = c;
  *req_cls = job;
  MHD_suspend_connection(c);
  em_lane_push(h->lane, &job->link);
  return MHD_YES;
}

/* handle()'s call for a resumed request: queues the job's answer and frees the job. */
static enum MHD_Result answer_job(struct MHD_Connection *c, api_job_t *job) {
  char *body = job->body;
  job->body = NULL;
  unsigned status = job->status;
  size_t len = job->len;
  const char *type = job->type;
  job_free(job);
  if (!body) {
    return respond_const(c, MHD_HTTP_INTERNAL_SERVER_ERROR, CT_JSON,
                         "{\"error\":\"out of memory\"}");
  }
  return respond_owned(c, status, type, body, len);
}

static api_job_t *job_new(job_kind_t kind) {
  api_job_t *job = calloc(1, sizeof(*job));
  if (job) {
    job->kind = kind;
  }
  return job;
}

/* /api/fleet, /api/latency, /api/models, /api/cohort, and (device non-NULL)
 * /api/devices/<device>/history. The parameters are checked here; /api/models (the registry
 * only) is answered here; the rest go to the lane. */
static enum MHD_Result serve_api(em_http_t *h, struct MHD_Connection *c, void **req_cls,
                                 em_query_kind_t kind, const char *device) {
  api_args_t args;
  args.n = 0;
  MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, collect_arg, &args);
  uint64_t now = realtime_ns();
  em_query_t q;
  char err[200];
  em_history_reply_t r = {0, NULL, 0};
  if (em_query_parse(kind, args.params, args.n, now, &q, err, sizeof(err)) != 0) {
    em_history_error(&r, MHD_HTTP_BAD_REQUEST, err);
    return respond_reply(c, &r);
  }
  if (kind == EM_QUERY_MODELS) {
    em_cohort_models(h->reg, &q, &r);
    return respond_reply(c, &r);
  }
  if (kind != EM_QUERY_FLEET && !h->have_store) {
    em_history_error(&r, MHD_HTTP_SERVICE_UNAVAILABLE, "no store to read the history from");
    return respond_reply(c, &r);
  }
  api_job_t *job = job_new(JOB_QUERY);
  if (!job) {
    return respond_const(c, MHD_HTTP_INTERNAL_SERVER_ERROR, CT_JSON,
                         "{\"error\":\"out of memory\"}");
  }
  job->query = kind;
  job->q = q;
  job->now_ns = now;
  if (device) {
    snprintf(job->id, sizeof(job->id), "%s", device);
  }
  return submit(h, c, req_cls, job);
}

/* /api/devices/<id>/history: the id percent-decoded like serve_device's. */
/* The device id of raw[0..raw_len) (a path segment) percent-decoded into id[0..cap); false
 * when it is malformed or too long to be an id. */
static bool decode_id_segment(const char *raw, size_t raw_len, char *id, size_t cap) {
  char enc[3 * EM_PROTO_MAX_NAME_BYTES + 1];
  if (raw_len >= sizeof(enc)) {
    return false;
  }
  memcpy(enc, raw, raw_len);
  enc[raw_len] = '\0';
  return decode_path_segment(enc, id, cap);
}

static enum MHD_Result serve_history(em_http_t *h, struct MHD_Connection *c, void **req_cls,
                                     const char *raw, size_t raw_len) {
  char id[EM_PROTO_MAX_NAME_BYTES + 1];
  if (!decode_id_segment(raw, raw_len, id, sizeof(id))) {
    return respond_const(c, MHD_HTTP_NOT_FOUND, CT_JSON, "{\"error\":\"no such device\"}");
  }
  return serve_api(h, c, req_cls, EM_QUERY_HISTORY, id);
}

/* /api/devices/<id>/<kind>[/<key>] (rest: "<id>/<kind>..."; kind "flights" or "profiles"):
 * the id and key percent-decoded like serve_device's id; answered in the lane. */
static enum MHD_Result serve_forensics(em_http_t *h, struct MHD_Connection *c, void **req_cls,
                                       em_forensic_kind_t kind, const char *raw, size_t raw_len,
                                       const char *key_raw) {
  api_job_t *job = job_new(key_raw ? JOB_FORENSIC_GET : JOB_FORENSIC_LIST);
  if (!job) {
    return respond_const(c, MHD_HTTP_INTERNAL_SERVER_ERROR, CT_JSON,
                         "{\"error\":\"out of memory\"}");
  }
  job->forensic = kind;
  if (!decode_id_segment(raw, raw_len, job->id, sizeof(job->id))) {
    job_free(job);
    return respond_const(c, MHD_HTTP_NOT_FOUND, CT_JSON, "{\"error\":\"no such device\"}");
  }
  if (key_raw && !decode_path_segment(key_raw, job->key, sizeof(job->key))) {
    job_free(job);
    return respond_const(c, MHD_HTTP_NOT_FOUND, CT_JSON, "{\"error\":\"no such key\"}");
  }
  if (!h->have_store) {
    job_free(job);
    return respond_const(c, MHD_HTTP_SERVICE_UNAVAILABLE, CT_JSON,
                         "{\"error\":\"no store to read from\"}");
  }
  api_args_t args;
  args.n = 0;
  MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, collect_arg, &args);
  if (!job_copy_params(job, &args)) {
    job_free(job);
    return respond_const(c, MHD_HTTP_INTERNAL_SERVER_ERROR, CT_JSON,
                         "{\"error\":\"out of memory\"}");
  }
  return submit(h, c, req_cls, job);
}

/* /ui/<name>: an embedded dashboard file (assets.h); "/" and "/ui" redirect to "/ui/". */
static enum MHD_Result serve_asset(struct MHD_Connection *c, const char *name) {
  const em_asset_t *a = em_assets_find(name);
  if (!a) {
    return respond_const(c, MHD_HTTP_NOT_FOUND, CT_TEXT, "not found\n");
  }
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(a->len, (void *)(uintptr_t)a->data, MHD_RESPMEM_PERSISTENT);
  if (!resp) {
    return MHD_NO;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, a->content_type);
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
  MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
  enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, resp);
  MHD_destroy_response(resp);
  return rc;
}

static enum MHD_Result redirect_ui(struct MHD_Connection *c) {
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(0, (void *)(uintptr_t) "", MHD_RESPMEM_PERSISTENT);
  if (!resp) {
    return MHD_NO;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, "/ui/");
  enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_FOUND, resp);
  MHD_destroy_response(resp);
  return rc;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **req_cls) {
  (void)version;
  (void)upload_data;
  (void)upload_data_size;
  em_http_t *h = cls;
  if (*req_cls) {
    /* A request the lane answered: resumed, its answer ready. */
    api_job_t *job = *req_cls;
    *req_cls = NULL;
    return answer_job(c, job);
  }
  conn_slot_t *slot = slot_of(c);
  if (slot && slot->in_head) {
    slot->in_head = false;
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)HTTP_TIMEOUT_S);
  }
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    return respond_const(c, MHD_HTTP_METHOD_NOT_ALLOWED, CT_TEXT, "method not allowed\n");
  }
  static const char dev_prefix[] = "/api/devices/";
  if (strcmp(url, "/metrics") == 0) {
    return serve_metrics(h, c);
  }
  if (strcmp(url, "/api/devices") == 0) {
    return serve_devices(h, c);
  }
  if (strncmp(url, dev_prefix, sizeof(dev_prefix) - 1) == 0) {
    const char *rest = url + sizeof(dev_prefix) - 1;
    const char *slash = strchr(rest, '/');
    if (slash && strcmp(slash, "/history") == 0) {
      return serve_history(h, c, req_cls, rest, (size_t)(slash - rest));
    }
    for (int k = 0; slash && k < EM_FORENSIC_KINDS; k++) {
      const char *name = em_forensic_api_name((em_forensic_kind_t)k);
      size_t len = strlen(name);
      if (strncmp(slash + 1, name, len) == 0 && (slash[1 + len] == '\0' || slash[1 + len] == '/')) {
        return serve_forensics(h, c, req_cls, (em_forensic_kind_t)k, rest, (size_t)(slash - rest),
                               slash[1 + len] ? slash + 2 + len : NULL);
      }
    }
    return serve_device(h, c, rest);
  }
  if (strcmp(url, "/api/fleet") == 0) {
    return serve_api(h, c, req_cls, EM_QUERY_FLEET, NULL);
  }
  if (strcmp(url, "/api/latency") == 0) {
    return serve_api(h, c, req_cls, EM_QUERY_LATENCY, NULL);
  }
  if (strcmp(url, "/api/models") == 0) {
    return serve_api(h, c, req_cls, EM_QUERY_MODELS, NULL);
  }
  if (strcmp(url, "/api/cohort") == 0) {
    return serve_api(h, c, req_cls, EM_QUERY_COHORT, NULL);
  }
  if (strncmp(url, "/ui/", 4) == 0) {
    return serve_asset(c, url + 4);
  }
  if (strcmp(url, "/") == 0 || strcmp(url, "/ui") == 0) {
    return redirect_ui(c);
  }
  if (strcmp(url, "/healthz") == 0) {
    /* The state, the callback's reason after ": ", then its lines of figures (http.h). */
    char why[512] = "";
    em_http_health_t health = h->health ? h->health(h->ctx, why, sizeof(why)) : EM_HTTP_HEALTH_OK;
    char body[600];
    snprintf(body, sizeof(body), "%s%s%s\n",
             health == EM_HTTP_HEALTH_OK         ? "ok"
             : health == EM_HTTP_HEALTH_DEGRADED ? "degraded"
                                                 : "unavailable",
             why[0] && why[0] != '\n' ? ": " : "", why);
    return respond_const(c,
                         health == EM_HTTP_HEALTH_DOWN ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK,
                         CT_TEXT, body);
  }
  return respond_const(c, MHD_HTTP_NOT_FOUND, CT_TEXT, "not found\n");
}

/* Leaves the URL as it came; serve_device() decodes the one part that may be escaped. */
static size_t keep_url(void *cls, struct MHD_Connection *c, char *url) {
  (void)cls;
  (void)c;
  return strlen(url);
}

/* Parses "HOST:PORT" (HOST an IPv4 literal or [IPv6]) into ss. Returns false when malformed. */
static bool parse_listen(const char *listen, struct sockaddr_storage *ss, socklen_t *ss_len) {
  char host[INET6_ADDRSTRLEN + 2];
  const char *colon;
  size_t hlen;
  bool v6 = listen[0] == '[';
  if (v6) {
    const char *close = strchr(listen, ']');
    if (!close || close[1] != ':') {
      return false;
    }
    hlen = (size_t)(close - listen - 1);
    if (hlen == 0 || hlen >= sizeof(host)) {
      return false;
    }
    memcpy(host, listen + 1, hlen);
    colon = close + 1;
  } else {
    colon = strrchr(listen, ':');
    if (!colon) {
      return false;
    }
    hlen = (size_t)(colon - listen);
    if (hlen == 0 || hlen >= sizeof(host)) {
      return false;
    }
    memcpy(host, listen, hlen);
  }
  host[hlen] = '\0';
  const char *p = colon + 1;
  if (!*p || strlen(p) > 5) {
    return false;
  }
  unsigned long port = 0;
  for (; *p; p++) {
    if (*p < '0' || *p > '9') {
      return false;
    }
    port = port * 10 + (unsigned long)(*p - '0');
  }
  if (port > 65535) {
    return false;
  }
  memset(ss, 0, sizeof(*ss));
  if (v6) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
    a->sin6_family = AF_INET6;
    a->sin6_port = htons((uint16_t)port);
    if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1) {
      return false;
    }
    *ss_len = sizeof(*a);
  } else {
    struct sockaddr_in *a = (struct sockaddr_in *)ss;
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &a->sin_addr) != 1) {
      return false;
    }
    *ss_len = sizeof(*a);
  }
  return true;
}

/* MHD does not say why a start failed: bind the address ourselves to find out. */
static int probe_bind(const struct sockaddr_storage *ss, socklen_t len) {
  int fd = socket(ss->ss_family, SOCK_STREAM, 0);
  if (fd < 0) {
    return -errno;
  }
  int one = 1;
  (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int rc = bind(fd, (const struct sockaddr *)ss, len) == 0 ? 0 : -errno;
  close(fd);
  return rc;
}

/* The connection table's size: HTTP_MAX_CONNS, less when the descriptor limit is tighter. */
static unsigned conns_for_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) {
    return HTTP_MAX_CONNS;
  }
  if (rl.rlim_cur < (rlim_t)HTTP_FD_RESERVE + HTTP_MIN_CONNS) {
    return HTTP_MIN_CONNS;
  }
  rlim_t room = rl.rlim_cur - HTTP_FD_RESERVE;
  return room < HTTP_MAX_CONNS ? (unsigned)room : HTTP_MAX_CONNS;
}

/* The serving thread: waits for MHD's sockets or a wake, runs MHD, then the sweep and the log
 * limit, until em_http_stop(). The wake is drained before MHD_run(), so one written while MHD
 * runs makes the next poll return at once. */
static void *serve_loop(void *arg) {
  em_http_t *h = arg;
  while (!__atomic_load_n(&h->stop, __ATOMIC_ACQUIRE)) {
    int timeout_ms = HTTP_TICK_MS;
    MHD_UNSIGNED_LONG_LONG mhd_ms = 0;
    if (MHD_get_timeout(h->daemon, &mhd_ms) == MHD_YES && mhd_ms < (unsigned)timeout_ms) {
      timeout_ms = (int)mhd_ms;
    }
    struct pollfd fds[2] = {{.fd = h->mhd_fd, .events = POLLIN},
                            {.fd = h->wake_fd, .events = POLLIN}};
    (void)poll(fds, 2, timeout_ms);
    if (fds[1].revents & POLLIN) {
      uint64_t n;
      if (read(h->wake_fd, &n, sizeof(n)) < 0) {
        /* EAGAIN: another reader cannot exist; nothing to drain. */
      }
    }
    if (MHD_run(h->daemon) != MHD_YES) {
      /* A failed poll: do not spin on it. */
      struct timespec pause = {.tv_sec = 0, .tv_nsec = HTTP_TICK_MS * 1000000L};
      nanosleep(&pause, NULL);
    }
    uint64_t now = mono_ms();
    sweep(h, now);
    log_tick(h, now);
  }
  return NULL;
}

/* Frees h. The serving thread must not run: the lane is drained first (its workers resume the
 * connections they hold; nothing is admitted any more), then the daemon stops, closing every
 * connection, resumed ones included. */
static void http_free(em_http_t *h) {
  em_lane_free(h->lane);
  if (h->daemon) {
    MHD_stop_daemon(h->daemon);
  }
  for (unsigned i = 0; h->hists && i < h->api_workers; i++) {
    em_history_close(h->hists[i]);
  }
  free(h->hists);
  if (h->wake_fd >= 0) {
    close(h->wake_fd);
  }
  pthread_mutex_lock(&h->log_lock);
  log_summary(h, true);
  pthread_mutex_unlock(&h->log_lock);
  pthread_mutex_destroy(&h->log_lock);
  free(h->slots);
  free(h);
}

int em_http_start(em_http_t **out, const char *listen, em_registry_t *reg, const char *db_path,
                  unsigned api_workers, em_http_health_fn health, void *ctx, char *err,
                  size_t err_cap) {
  char dummy[1];
  if (!err || err_cap == 0) {
    err = dummy;
    err_cap = sizeof(dummy);
  }
  err[0] = '\0';
  if (!out || !listen || !reg) {
    snprintf(err, err_cap, "http: invalid arguments");
    return -EINVAL;
  }
  if (api_workers < 1 || api_workers > EM_HTTP_API_WORKERS_MAX) {
    snprintf(err, err_cap, "http: API workers must be 1 to %u, not %u", EM_HTTP_API_WORKERS_MAX,
             api_workers);
    return -EINVAL;
  }
  *out = NULL;
  struct sockaddr_storage ss;
  socklen_t ss_len = 0;
  if (!parse_listen(listen, &ss, &ss_len)) {
    snprintf(err, err_cap, "http: bad listen address '%s' (want HOST:PORT, e.g. 127.0.0.1:9464)",
             listen);
    return -EINVAL;
  }
  em_http_t *h = calloc(1, sizeof(*h));
  if (!h) {
    snprintf(err, err_cap, "http: out of memory");
    return -ENOMEM;
  }
  h->max_conns = conns_for_fd_limit();
  h->policy_conns = h->max_conns - h->max_conns / HTTP_EVICT_SLACK_DIV;
  h->slots = calloc(h->max_conns, sizeof(*h->slots));
  if (!h->slots || pthread_mutex_init(&h->log_lock, NULL) != 0) {
    free(h->slots);
    free(h);
    snprintf(err, err_cap, "http: out of memory");
    return -ENOMEM;
  }
  h->log_tokens = HTTP_LOG_BURST;
  h->log_refill_ms = mono_ms();
  h->reg = reg;
  h->health = health;
  h->ctx = ctx;
  h->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (h->wake_fd < 0) {
    int rc = -errno;
    snprintf(err, err_cap, "http: eventfd: %s", strerror(errno));
    http_free(h);
    return rc;
  }
  h->have_store = db_path != NULL;
  h->api_workers = api_workers;
  h->hists = calloc(api_workers, sizeof(*h->hists));
  if (!h->hists) {
    snprintf(err, err_cap, "http: out of memory");
    http_free(h);
    return -ENOMEM;
  }
  for (unsigned i = 0; db_path && i < api_workers; i++) {
    int rc = em_history_open(&h->hists[i], db_path, err, err_cap);
    if (rc != 0) {
      http_free(h);
      return rc;
    }
  }
  int lrc = em_lane_new(&h->lane, api_workers, api_workers * HTTP_API_WAITING_PER_WORKER,
                        (void *const *)h->hists, run_job);
  if (lrc != 0) {
    snprintf(err, err_cap, "http: cannot start the API workers: %s", strerror(-lrc));
    http_free(h);
    return lrc;
  }
  uint16_t port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
  /* No internal thread: serve_loop() drives the daemon through its epoll descriptor. Suspend
   * and resume park the requests the lane answers. */
  unsigned flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
  if (ss.ss_family == AF_INET6) {
    flags |= MHD_USE_IPv6;
  }
  h->daemon = MHD_start_daemon(
      flags, port, admit, h, handle, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h,
      MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss, MHD_OPTION_CONNECTION_LIMIT, h->max_conns,
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_TIMEOUT_S, MHD_OPTION_NOTIFY_CONNECTION,
      conn_notify, h, MHD_OPTION_NOTIFY_COMPLETED, request_done, h, MHD_OPTION_UNESCAPE_CALLBACK,
      keep_url, NULL, MHD_OPTION_END);
  if (!h->daemon) {
    int rc = probe_bind(&ss, ss_len);
    if (rc == 0) {
      rc = -EIO;
    }
    snprintf(err, err_cap, "http: cannot serve on %s: %s", listen,
             rc == -EIO ? "libmicrohttpd failed to start" : strerror(-rc));
    http_free(h);
    return rc;
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
  h->port = info && info->port ? info->port : port;
  info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_EPOLL_FD);
  if (!info || info->epoll_fd < 0) {
    snprintf(err, err_cap, "http: libmicrohttpd gives no epoll descriptor");
    http_free(h);
    return -EIO;
  }
  h->mhd_fd = info->epoll_fd;
  /* The serving thread takes no signals: they stay with the caller's loop. */
  sigset_t all;
  sigset_t old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&h->thread, NULL, serve_loop, h);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    snprintf(err, err_cap, "http: cannot start the serving thread: %s", strerror(rc));
    http_free(h);
    return -rc;
  }
  h->thread_started = true;
  *out = h;
  return 0;
}

uint16_t em_http_port(const em_http_t *h) {
  return h ? h->port : 0;
}

void em_http_stats(const em_http_t *h, em_http_stats_t *out) {
  if (!out) {
    return;
  }
  memset(out, 0, sizeof(*out));
  if (!h) {
    return;
  }
  out->connections = read_count(&h->open_conns);
  out->evicted_total = read_count(&h->evicted_total);
  out->slow_heads_total = read_count(&h->slow_heads_total);
  out->refused_total = read_count(&h->refused_total);
  out->log_suppressed_total = read_count(&h->log_suppressed_total);
  em_lane_stats_t ls;
  em_lane_stats(h->lane, &ls);
  out->api_workers = h->api_workers;
  out->api_in_flight = ls.admitted;
  out->api_refused_total = ls.refused_total;
}

void em_http_stop(em_http_t *h) {
  if (!h) {
    return;
  }
  if (h->thread_started) {
    __atomic_store_n(&h->stop, 1, __ATOMIC_RELEASE);
    wake(h);
    pthread_join(h->thread, NULL);
  }
  http_free(h);
}
