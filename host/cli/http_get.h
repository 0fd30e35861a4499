/*
 * http_get.h - a small HTTP/1.1 GET client for the commands that read the aggregator's API
 * (edgemon-cli flight): http://HOST[:PORT] base URLs only (no TLS, no redirects, no proxies),
 * one request per connection (Connection: close), a deadline on the whole exchange, and a cap
 * on the body. Any host name getaddrinfo() resolves is accepted.
 *
 * Owns the socket for the duration of a call and the body it returns (em_http_get_free()).
 */
#ifndef EM_CLI_HTTP_GET_H
#define EM_CLI_HTTP_GET_H

#include <stddef.h>

#define EM_HTTP_GET_MAX_BODY (64u * 1024u * 1024u) /* Larger answers are refused. */

typedef struct {
  int status; /* HTTP status code. */
  char *body; /* malloc'd, NUL-terminated (the NUL not counted in len). */
  size_t len;
  char type[64]; /* Content-Type, "" when none. */
} em_http_answer_t;

typedef enum {
  EM_HTTP_GET_OK = 0,
  EM_HTTP_GET_BAD_URL,     /* The base URL is not http://HOST[:PORT][/]. */
  EM_HTTP_GET_UNREACHABLE, /* Name not resolved, connection refused or timed out. */
  EM_HTTP_GET_PROTOCOL,    /* Not an HTTP answer, too large, or cut short. */
} em_http_get_rc_t;

/* Checks a base URL; false with a message in err when it is not http://HOST[:PORT][/]. */
int em_http_get_check(const char *base, char *err, size_t err_cap);

/*
 * GETs base + path (path starts with '/') within timeout_ms. Returns EM_HTTP_GET_OK with *out
 * filled (any status), or another code with a one-line reason in err.
 */
int em_http_get(const char *base, const char *path, int timeout_ms, em_http_answer_t *out,
                char *err, size_t err_cap);

void em_http_get_free(em_http_answer_t *a);

#endif /* EM_CLI_HTTP_GET_H */
