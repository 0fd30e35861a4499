/*
 * span_client.h - the client side of the agent's span socket for the unit tests that drive
 * span ingest (test_spans, test_rings) over a real unix datagram socket: connect, send with
 * descriptors attached, and find a stage in the table. Test code only.
 */
#ifndef EDGEMON_TESTS_SPAN_CLIENT_H
#define EDGEMON_TESTS_SPAN_CLIENT_H

#include <stddef.h>
#include <sys/types.h>

#include "spans.h"

/* A non-blocking, autobound datagram socket connected to the span socket at `path` (asserts). */
int span_client_connect(const char *path);

/* Sends buf[0..len) on `sock` with fds[0..n_fds) attached (SCM_RIGHTS, at most 16), without
 * blocking. Returns what sendmsg returns. */
ssize_t span_client_send(int sock, const void *buf, size_t len, const int *fds, size_t n_fds);

/* The stage called `name` in the span table, or NULL. */
em_stage_stats_t *span_stage_named(em_spans_t *s, const char *name);

#endif /* EDGEMON_TESTS_SPAN_CLIENT_H */
