/*
 * span_client.c - span_client.h: a test's datagram client of the span socket. Owns nothing
 * beyond the socket it returns to the caller.
 */
#define _GNU_SOURCE

#include "span_client.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "tmp_dir.h"

#define MAX_FDS 16

void span_client_begin(const char *prefix, char *dir, size_t dir_bytes, char *sock,
                       size_t sock_bytes, uv_loop_t *loop) {
  em_tmp_dir_make(dir, dir_bytes, prefix, sock, sock_bytes, "spans.sock");
  assert_int_equal(uv_loop_init(loop), 0);
}

void span_client_finish(int client, uv_loop_t *loop, const char *dir) {
  if (client >= 0) {
    close(client);
  }
  assert_int_equal(uv_loop_close(loop), 0); /* Every handle was closed. */
  rmdir(dir);
}

int span_client_connect(const char *path) {
  int sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  assert_true(sock >= 0);
  struct sockaddr_un me = {.sun_family = AF_UNIX};
  assert_int_equal(bind(sock, (struct sockaddr *)&me, sizeof(sa_family_t)), 0); /* Autobind. */
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
  assert_int_equal(connect(sock, (struct sockaddr *)&sa, sizeof(sa)), 0);
  return sock;
}

ssize_t span_client_send(int sock, const void *buf, size_t len, const int *fds, size_t n_fds) {
  assert_true(n_fds <= MAX_FDS);
  struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
  _Alignas(struct cmsghdr) char ctrl[CMSG_SPACE(MAX_FDS * sizeof(int))];
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  if (n_fds > 0) {
    m.msg_control = ctrl;
    m.msg_controllen = CMSG_SPACE(n_fds * sizeof(int));
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(n_fds * sizeof(int));
    memcpy(CMSG_DATA(c), fds, n_fds * sizeof(int));
  }
  return sendmsg(sock, &m, MSG_DONTWAIT);
}

em_stage_stats_t *span_stage_named(em_spans_t *s, const char *name) {
  for (size_t i = 0; i < em_spans_stage_count(s); i++) {
    em_stage_stats_t *st = em_spans_stage(s, i);
    if (strcmp(st->name, name) == 0) {
      return st;
    }
  }
  return NULL;
}
