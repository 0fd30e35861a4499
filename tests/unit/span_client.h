/*
 * span_client.h - the client side of the agent's span socket for the unit tests that drive
 * span ingest (test_spans, test_rings) over a real unix datagram socket: connect, send with
 * descriptors attached, find a stage in the table, and begin a test's setup and end its
 * teardown. Test code only.
 */
#ifndef EDGEMON_TESTS_SPAN_CLIENT_H
#define EDGEMON_TESTS_SPAN_CLIENT_H

#include <stddef.h>
#include <sys/types.h>
#include <uv.h>

#include "spans.h"

/* A non-blocking, autobound datagram socket connected to the span socket at `path` (asserts). */
int span_client_connect(const char *path);

/* Sends buf[0..len) on `sock` with fds[0..n_fds) attached (SCM_RIGHTS, at most 16), without
 * blocking. Returns what sendmsg returns. */
ssize_t span_client_send(int sock, const void *buf, size_t len, const int *fds, size_t n_fds);

/* The start of a span test's setup: a fresh /tmp/<prefix>-XXXXXX into dir[0..dir_bytes), the
 * span socket's path in it into sock[0..sock_bytes), and `loop` initialised (asserts). */
void span_client_begin(const char *prefix, char *dir, size_t dir_bytes, char *sock,
                       size_t sock_bytes, uv_loop_t *loop);

/* The end of a span test's teardown, once its services are closed and freed: closes `client`
 * (when >= 0), asserts that nothing is left on `loop` (uv_loop_close() == 0) and removes the
 * test's directory `dir` (its socket is gone by then). */
void span_client_finish(int client, uv_loop_t *loop, const char *dir);

/* The stage called `name` in the span table, or NULL. */
em_stage_stats_t *span_stage_named(em_spans_t *s, const char *name);

#endif /* EDGEMON_TESTS_SPAN_CLIENT_H */
