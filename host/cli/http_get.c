/*
 * http_get.c - the HTTP/1.1 GET client of edgemon-cli (see http_get.h).
 *
 * Non-blocking connect and reads under poll() against one CLOCK_MONOTONIC deadline, so neither
 * a silent host nor a slow server holds the command past its timeout. The answer is read to
 * the end of the connection (the request says Connection: close); the body is what
 * Content-Length says, or everything after the head when the server gives none. Chunked
 * transfer coding is not spoken (the aggregator answers with a length).
 */
#define _POSIX_C_SOURCE 200809L
#include "http_get.h"

#include <buf.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HEAD_MAX         (64u * 1024u)
#define READ_CHUNK_BYTES (64u * 1024u) /* Room made for each read of the answer. */

typedef struct {
  char host[256];
  char port[8];
} base_url_t;

__attribute__((format(printf, 4, 5))) static int fail(int rc, char *err, size_t cap,
                                                      const char *fmt, ...) {
  if (err && cap > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
  }
  return rc;
}

static int parse_base(const char *base, base_url_t *u, char *err, size_t cap) {
  static const char scheme[] = "http://";
  if (!base || strncmp(base, scheme, sizeof(scheme) - 1) != 0) {
    return fail(EM_HTTP_GET_BAD_URL, err, cap, "'%s' is not an http://HOST[:PORT] URL",
                base ? base : "");
  }
  const char *p = base + sizeof(scheme) - 1;
  const char *host_end;
  const char *after;
  if (*p == '[') {
    host_end = strchr(p, ']');
    if (!host_end) {
      return fail(EM_HTTP_GET_BAD_URL, err, cap, "'%s': no ']' after the IPv6 address", base);
    }
    p++;
    after = host_end + 1;
  } else {
    host_end = p + strcspn(p, ":/");
    after = host_end;
  }
  size_t n = (size_t)(host_end - p);
  if (n == 0 || n >= sizeof(u->host)) {
    return fail(EM_HTTP_GET_BAD_URL, err, cap, "'%s': no host, or too long a host", base);
  }
  memcpy(u->host, p, n);
  u->host[n] = '\0';
  snprintf(u->port, sizeof(u->port), "80");
  if (*after == ':') {
    const char *d = after + 1;
    size_t digits = strspn(d, "0123456789");
    long port = digits > 0 && digits <= 5 ? strtol(d, NULL, 10) : 0;
    if (port < 1 || port > 65535) {
      return fail(EM_HTTP_GET_BAD_URL, err, cap, "'%s': the port is not 1 to 65535", base);
    }
    snprintf(u->port, sizeof(u->port), "%ld", port);
    after = d + digits;
  }
  if (!(after[0] == '\0' || (after[0] == '/' && after[1] == '\0'))) {
    return fail(EM_HTTP_GET_BAD_URL, err, cap, "'%s': give the aggregator's base URL only", base);
  }
  return EM_HTTP_GET_OK;
}

int em_http_get_check(const char *base, char *err, size_t err_cap) {
  base_url_t u;
  return parse_base(base, &u, err, err_cap);
}

static int64_t left_ms(const struct timespec *deadline) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (int64_t)(deadline->tv_sec - now.tv_sec) * 1000 +
         (deadline->tv_nsec - now.tv_nsec) / 1000000;
}

/* Waits for `events` on fd until the deadline. Returns 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, const struct timespec *deadline) {
  for (;;) {
    int64_t ms = left_ms(deadline);
    if (ms <= 0) {
      return 0;
    }
    struct pollfd p = {.fd = fd, .events = events};
    int rc = poll(&p, 1, (int)(ms > 60000 ? 60000 : ms));
    if (rc > 0) {
      return 1;
    }
    if (rc < 0 && errno != EINTR) {
      return -1;
    }
  }
}

/* Connects to one of the host's addresses before the deadline. Returns the socket or -1. */
static int connect_to(const base_url_t *u, const struct timespec *deadline, char *err, size_t cap) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  struct addrinfo *res = NULL;
  int grc = getaddrinfo(u->host, u->port, &hints, &res);
  if (grc != 0) {
    fail(0, err, cap, "cannot resolve %s: %s", u->host, gai_strerror(grc));
    return -1;
  }
  int fd = -1;
  int why = ETIMEDOUT;
  for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
    int s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (s < 0) {
      why = errno;
      continue;
    }
    fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
    int rc = connect(s, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      int w = wait_fd(s, POLLOUT, deadline);
      int soerr = 0;
      socklen_t len = sizeof(soerr);
      if (w == 1 && getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &len) == 0 && soerr == 0) {
        rc = 0;
      } else {
        errno = w == 0 ? ETIMEDOUT : soerr ? soerr : errno;
      }
    }
    if (rc == 0) {
      fd = s;
    } else {
      why = errno;
      close(s);
    }
  }
  freeaddrinfo(res);
  if (fd < 0) {
    fail(0, err, cap, "cannot connect to %s port %s: %s", u->host, u->port, strerror(why));
  }
  return fd;
}

static bool send_all(int fd, const char *buf, size_t len, const struct timespec *deadline) {
  while (len > 0) {
    ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
    if (n > 0) {
      buf += n;
      len -= (size_t)n;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (wait_fd(fd, POLLOUT, deadline) != 1) {
        return false;
      }
    } else {
      return false;
    }
  }
  return true;
}

/* Reads to the end of the connection into b (its max_bytes is the cap; one byte more than
 * the caller's cap tells an answer that is too large). Returns 0, or -1 (timeout, error, or
 * more than cap). */
static int read_all(int fd, em_buf_t *b, size_t cap, const struct timespec *deadline) {
  for (;;) {
    size_t want =
        b->max_bytes - b->len < READ_CHUNK_BYTES ? b->max_bytes - b->len : READ_CHUNK_BYTES;
    if (b->len > cap || em_buf_reserve(b, want) != 0) {
      return -1; /* Over the cap, or out of memory. */
    }
    ssize_t n = recv(fd, em_buf_tail(b), want, 0);
    if (n > 0) {
      em_buf_commit(b, (size_t)n);
    } else if (n == 0) {
      return 0;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (wait_fd(fd, POLLIN, deadline) != 1) {
        return -1;
      }
    } else {
      return -1;
    }
  }
}

/* The value of header `name` in head[0..n) (lines after the status line), copied into out. */
static bool header(const char *head, size_t n, const char *name, char *out, size_t cap) {
  size_t nl = strlen(name);
  const char *end = head + n;
  for (const char *p = head; p < end;) {
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    const char *line_end = eol ? eol : end;
    if ((size_t)(line_end - p) > nl && strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
      const char *v = p + nl + 1;
      while (v < line_end && (*v == ' ' || *v == '\t')) {
        v++;
      }
      size_t vl = (size_t)(line_end - v);
      while (vl > 0 && (v[vl - 1] == '\r' || v[vl - 1] == ' ')) {
        vl--;
      }
      snprintf(out, cap, "%.*s", (int)vl, v);
      return true;
    }
    p = line_end + 1;
  }
  return false;
}

int em_http_get(const char *base, const char *path, int timeout_ms, em_http_answer_t *out,
                char *err, size_t err_cap) {
  memset(out, 0, sizeof(*out));
  base_url_t u;
  int rc = parse_base(base, &u, err, err_cap);
  if (rc != EM_HTTP_GET_OK) {
    return rc;
  }
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  deadline.tv_sec += timeout_ms / 1000;
  deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec++;
    deadline.tv_nsec -= 1000000000L;
  }
  int fd = connect_to(&u, &deadline, err, err_cap);
  if (fd < 0) {
    return EM_HTTP_GET_UNREACHABLE;
  }
  bool v6 = strchr(u.host, ':') != NULL;
  char req[1024];
  int n = snprintf(req, sizeof(req),
                   "GET %s HTTP/1.1\r\nHost: %s%s%s:%s\r\nConnection: close\r\n"
                   "User-Agent: edgemon-cli\r\nAccept: */*\r\n\r\n",
                   path, v6 ? "[" : "", u.host, v6 ? "]" : "", u.port);
  if (n < 0 || (size_t)n >= sizeof(req)) {
    close(fd);
    return fail(EM_HTTP_GET_BAD_URL, err, err_cap, "request path too long");
  }
  em_buf_t answer;
  em_buf_init(&answer, HEAD_MAX + EM_HTTP_GET_MAX_BODY + 1);
  if (!send_all(fd, req, (size_t)n, &deadline) ||
      read_all(fd, &answer, HEAD_MAX + EM_HTTP_GET_MAX_BODY, &deadline) != 0) {
    close(fd);
    em_buf_free(&answer);
    return fail(EM_HTTP_GET_PROTOCOL, err, err_cap,
                "no complete answer from %s port %s within %d ms (or larger than %u bytes)", u.host,
                u.port, timeout_ms, EM_HTTP_GET_MAX_BODY);
  }
  close(fd);
  size_t len = 0;
  char *buf = em_buf_take(&answer, &len);
  char *head_end = len > 0 ? strstr(buf, "\r\n\r\n") : NULL;
  int status = 0;
  if (!head_end || sscanf(buf, "HTTP/1.%*[01] %3d", &status) != 1 || status < 100) {
    free(buf);
    return fail(EM_HTTP_GET_PROTOCOL, err, err_cap, "%s port %s did not answer in HTTP", u.host,
                u.port);
  }
  const char *first_eol = strchr(buf, '\n');
  size_t head_len = (size_t)(head_end - first_eol);
  char value[64];
  size_t body_off = (size_t)(head_end + 4 - buf);
  size_t body_len = len - body_off;
  if (header(first_eol + 1, head_len, "Transfer-Encoding", value, sizeof(value))) {
    free(buf);
    return fail(EM_HTTP_GET_PROTOCOL, err, err_cap, "chunked answers are not supported");
  }
  if (header(first_eol + 1, head_len, "Content-Length", value, sizeof(value))) {
    char *end = NULL;
    unsigned long long cl = strtoull(value, &end, 10);
    if (end == value || *end || cl > body_len) {
      free(buf);
      return fail(EM_HTTP_GET_PROTOCOL, err, err_cap, "answer cut short (%zu of %s bytes)",
                  body_len, value);
    }
    body_len = (size_t)cl;
  }
  header(first_eol + 1, head_len, "Content-Type", out->type, sizeof(out->type));
  memmove(buf, buf + body_off, body_len);
  buf[body_len] = '\0';
  out->status = status;
  out->body = buf;
  out->len = body_len;
  return EM_HTTP_GET_OK;
}

void em_http_get_free(em_http_answer_t *a) {
  if (a) {
    free(a->body);
    a->body = NULL;
    a->len = 0;
  }
}
