/*
 * http.c - the aggregator's HTTP endpoints on libmicrohttpd (see http.h).
 *
 * One MHD daemon with its own polling thread (MHD_USE_AUTO_INTERNAL_THREAD: epoll or poll,
 * whichever the system has), bound to the configured address only, at most HTTP_MAX_CONNS
 * connections, each closed after HTTP_TIMEOUT_S idle seconds. Every request is answered on
 * the first call of the access handler (bodies are never read: no endpoint takes one).
 *
 * Rendering: the handler takes the registry's lock, renders into an em_text_t, releases the
 * lock, then hands the text's buffer to MHD (MHD_RESPMEM_MUST_FREE), so the lock is never held
 * while bytes go out on a socket.
 *
 * Paths: MHD's own URL unescaping is replaced by a callback that leaves the path as it came,
 * and the device id of /api/devices/<id> is percent-decoded here: a malformed escape, %00 or an
 * id longer than a device id can be is answered 404 before any lookup.
 *
 * Owns the MHD daemon (and through it the listening socket and its thread) and the em_http_t.
 * em_http_stop() must not race with em_http_start() on the same object; the registry and the
 * health callback must outlive the daemon.
 */
#define _POSIX_C_SOURCE 200809L
#include "http.h"

#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HTTP_MAX_CONNS 64u
#define HTTP_TIMEOUT_S 10u

#define CT_METRICS "text/plain; version=0.0.4; charset=utf-8"
#define CT_JSON    "application/json"
#define CT_TEXT    "text/plain; charset=utf-8"

struct em_http {
  struct MHD_Daemon *daemon;
  em_registry_t *reg; /* Borrowed. */
  em_http_health_fn health;
  void *ctx;
  uint16_t port;
};

/* Queues `len` bytes of `body` with status and content type. Takes ownership of `body` (a
 * malloc'd buffer, or NULL for an empty body) whether or not it succeeds. */
static enum MHD_Result respond_owned(struct MHD_Connection *c, unsigned status, const char *type,
                                     char *body, size_t len) {
  struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
  if (!resp) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (status == MHD_HTTP_METHOD_NOT_ALLOWED) {
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  }
  enum MHD_Result rc = MHD_queue_response(c, status, resp);
  MHD_destroy_response(resp);
  return rc;
}

/* A constant body (copied by MHD). */
static enum MHD_Result respond_const(struct MHD_Connection *c, unsigned status, const char *type,
                                     const char *body) {
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(strlen(body), (void *)(uintptr_t)body, MHD_RESPMEM_MUST_COPY);
  if (!resp) {
    return MHD_NO;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (status == MHD_HTTP_METHOD_NOT_ALLOWED) {
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  }
  enum MHD_Result rc = MHD_queue_response(c, status, resp);
  MHD_destroy_response(resp);
  return rc;
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

static enum MHD_Result serve_metrics(em_http_t *h, struct MHD_Connection *c) {
  em_text_t t = {0};
  em_registry_lock(h->reg);
  int rc = em_metrics_render(h->reg, &t);
  em_registry_unlock(h->reg);
  return respond_text(c, &t, rc, CT_METRICS);
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

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **req_cls) {
  (void)version;
  (void)upload_data;
  (void)upload_data_size;
  (void)req_cls;
  em_http_t *h = cls;
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
    return serve_device(h, c, url + sizeof(dev_prefix) - 1);
  }
  if (strcmp(url, "/healthz") == 0) {
    bool ok = !h->health || h->health(h->ctx);
    return ok ? respond_const(c, MHD_HTTP_OK, CT_TEXT, "ok\n")
              : respond_const(c, MHD_HTTP_SERVICE_UNAVAILABLE, CT_TEXT, "unavailable\n");
  }
  return respond_const(c, MHD_HTTP_NOT_FOUND, CT_TEXT, "not found\n");
}

/* Leaves the URL as it came; serve_device() decodes the one part that may be escaped. */
static size_t keep_url(void *cls, struct MHD_Connection *c, char *url) {
  (void)cls;
  (void)c;
  return strlen(url);
}

/* libmicrohttpd's own messages, on stderr under our prefix. */
__attribute__((format(printf, 2, 0))) static void mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  fputs("edgemon-aggregator: http: libmicrohttpd: ", stderr);
  vfprintf(stderr, fmt, ap);
  size_t n = strlen(fmt);
  if (n == 0 || fmt[n - 1] != '\n') {
    fputc('\n', stderr);
  }
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

int em_http_start(em_http_t **out, const char *listen, em_registry_t *reg, em_http_health_fn health,
                  void *ctx, char *err, size_t err_cap) {
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
  h->reg = reg;
  h->health = health;
  h->ctx = ctx;
  uint16_t port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
  unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
  if (ss.ss_family == AF_INET6) {
    flags |= MHD_USE_IPv6;
  }
  h->daemon = MHD_start_daemon(flags, port, NULL, NULL, handle, h, MHD_OPTION_EXTERNAL_LOGGER,
                               mhd_log, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                               MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_MAX_CONNS,
                               MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_TIMEOUT_S,
                               MHD_OPTION_UNESCAPE_CALLBACK, keep_url, NULL, MHD_OPTION_END);
  if (!h->daemon) {
    int rc = probe_bind(&ss, ss_len);
    if (rc == 0) {
      rc = -EIO;
    }
    snprintf(err, err_cap, "http: cannot serve on %s: %s", listen,
             rc == -EIO ? "libmicrohttpd failed to start" : strerror(-rc));
    free(h);
    return rc;
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
  h->port = info && info->port ? info->port : port;
  *out = h;
  return 0;
}

uint16_t em_http_port(const em_http_t *h) {
  return h ? h->port : 0;
}

void em_http_stop(em_http_t *h) {
  if (!h) {
    return;
  }
  if (h->daemon) {
    MHD_stop_daemon(h->daemon);
  }
  free(h);
}
