/*
 * test_remote.c - host/aggregator/remote.c: the retry delay (doubling from the minimum, capped,
 * jittered into [d/2, d], never above the cap), the verdict per HTTP status, the config checks,
 * and, against real loopback sockets, the bounded queue (a listener that never answers holds
 * the request in flight: what does not fit the queue is dropped and counted, the caller never
 * waits), retries of a network error (a port nobody listens on) with the head kept queued, and
 * the flush timer sealing a batch short of batch_series.
 * Delivery, 5xx/429 retries, 4xx drops and the headers are checked against real HTTP servers
 * in tests/integration/test_prom_remote_write.py.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <remote.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void backoff_doubles_is_capped_and_jittered(void **state) {
  (void)state;
  const uint32_t randoms[] = {0, 1, 12345, 0x7fffffffu, 0xffffffffu};
  for (uint32_t attempt = 1; attempt <= 64; attempt++) {
    uint64_t base = 100;
    for (uint32_t k = 1; k < attempt && base < 5000; k++) {
      base *= 2;
    }
    if (base > 5000) {
      base = 5000;
    }
    for (size_t j = 0; j < sizeof(randoms) / sizeof(randoms[0]); j++) {
      uint32_t d = em_remote_backoff_ms(attempt, 100, 5000, randoms[j]);
      assert_true(d <= 5000);
      assert_true(d <= base);
      assert_true(d >= base / 2);
    }
  }
  /* The jitter's ends are reachable. */
  assert_int_equal(em_remote_backoff_ms(1, 100, 5000, 0), 50);
  assert_int_equal(em_remote_backoff_ms(1, 100, 5000, 50), 100);
  assert_int_equal(em_remote_backoff_ms(3, 100, 5000, 200), 400);
  assert_int_equal(em_remote_backoff_ms(40, 100, 5000, 2500), 5000);
  assert_int_equal(em_remote_backoff_ms(UINT32_MAX, 100, 5000, 0), 2500);
  assert_int_equal(em_remote_backoff_ms(5, 0, 0, 7), 0);
}

static void status_verdicts(void **state) {
  (void)state;
  struct {
    long status;
    em_remote_verdict_t want;
  } rows[] = {
      {200, EM_REMOTE_DONE},  {204, EM_REMOTE_DONE},  {0, EM_REMOTE_RETRY},
      {429, EM_REMOTE_RETRY}, {500, EM_REMOTE_RETRY}, {503, EM_REMOTE_RETRY},
      {599, EM_REMOTE_RETRY}, {400, EM_REMOTE_DROP},  {401, EM_REMOTE_DROP},
      {404, EM_REMOTE_DROP},  {413, EM_REMOTE_DROP},  {301, EM_REMOTE_DROP},
      {100, EM_REMOTE_DROP},  {600, EM_REMOTE_DROP},
  };
  for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
    assert_int_equal(em_remote_classify(rows[k].status), rows[k].want);
  }
}

static void bad_configs_are_refused(void **state) {
  (void)state;
  em_remote_t *r = (em_remote_t *)1;
  em_remote_endpoint_cfg_t ep[EM_REMOTE_MAX_ENDPOINTS + 1];
  for (size_t k = 0; k <= EM_REMOTE_MAX_ENDPOINTS; k++) {
    ep[k] = (em_remote_endpoint_cfg_t){.url = "http://127.0.0.1:9/api/v1/write"};
  }
  em_remote_endpoint_cfg_t bad[] = {
      {.url = NULL},
      {.url = "ftp://127.0.0.1/x"},
      {.url = "127.0.0.1:9090"},
      {.url = "http://user:pw@127.0.0.1:9/api/v1/write"},
      {.url = "https://127.0.0.1:9/a b"},
      {.url = "http://127.0.0.1:9", .username = "u"},
      {.url = "http://127.0.0.1:9", .password = "p"},
      {.url = "http://127.0.0.1:9", .username = "u", .password = "p", .bearer_token = "t"},
      {.url = "http://127.0.0.1:9", .queue_requests = EM_REMOTE_MAX_QUEUE_REQUESTS + 1},
  };
  for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
    em_remote_cfg_t cfg = {.endpoints = &bad[k], .n_endpoints = 1};
    assert_int_equal(em_remote_new(&r, &cfg), -EINVAL);
    assert_null(r);
  }
  ep[1].url = "https://127.0.0.1:9/tenant@a/api/v1/write"; /* '@' past the host is fine */
  em_remote_cfg_t none = {.endpoints = ep, .n_endpoints = 0};
  assert_int_equal(em_remote_new(&r, &none), -EINVAL);
  em_remote_cfg_t many = {.endpoints = ep, .n_endpoints = EM_REMOTE_MAX_ENDPOINTS + 1};
  assert_int_equal(em_remote_new(&r, &many), -EINVAL);
  em_remote_cfg_t backoff = {
      .endpoints = ep, .n_endpoints = 1, .backoff_min_ms = 200, .backoff_max_ms = 100};
  assert_int_equal(em_remote_new(&r, &backoff), -EINVAL);
  assert_int_equal(em_remote_new(&r, NULL), -EINVAL);
  assert_int_equal(em_remote_new(NULL, &none), -EINVAL);

  /* The same endpoints are fine within the limits, and bad series are refused. */
  em_remote_cfg_t ok = {.endpoints = ep, .n_endpoints = EM_REMOTE_MAX_ENDPOINTS};
  assert_int_equal(em_remote_new(&r, &ok), 0);
  assert_int_equal(em_remote_n_endpoints(r), EM_REMOTE_MAX_ENDPOINTS);
  assert_string_equal(em_remote_endpoint_url(r, 0), "http://127.0.0.1:9/api/v1/write");
  assert_null(em_remote_endpoint_url(r, EM_REMOTE_MAX_ENDPOINTS));
  assert_int_equal(em_remote_sample(r, "bad name", NULL, 0, 1, 1), -EINVAL);
  assert_int_equal(em_remote_histogram(r, "h", NULL, 0, NULL, 1), -EINVAL);
  em_remote_stats_t st;
  assert_int_equal(em_remote_stats(r, EM_REMOTE_MAX_ENDPOINTS, &st), -EINVAL);
  em_remote_free(r, 0);
  em_remote_free(NULL, 0);
}

/* A loopback TCP port: listening (connections complete in the backlog, nothing is ever read or
 * answered) or, with listen_too false, bound then closed (connections refused). */
static int loopback_port(int *fd_out, int listen_too) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  socklen_t len = sizeof(a);
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  if (listen_too) {
    assert_int_equal(listen(fd, 16), 0);
    *fd_out = fd;
  } else {
    close(fd);
    *fd_out = -1;
  }
  return ntohs(a.sin_port);
}

static void full_queue_drops_new_requests_and_counts_them(void **state) {
  (void)state;
  int fd = -1;
  char url[64];
  snprintf(url, sizeof(url), "http://127.0.0.1:%d/api/v1/write", loopback_port(&fd, 1));
  em_remote_endpoint_cfg_t ep = {.url = url, .queue_requests = 2, .timeout_ms = 600000};
  /* batch_series 1: every series is sealed into its own request at once. */
  em_remote_cfg_t cfg = {.endpoints = &ep, .n_endpoints = 1, .batch_series = 1, .flush_ms = 600000};
  em_remote_t *r = NULL;
  assert_int_equal(em_remote_new(&r, &cfg), 0);
  em_native_span_t spans[] = {{1, 1}};
  int64_t deltas[] = {4};
  em_native_t nh = {.schema = 2,
                    .count = 4,
                    .sum_ns = 9,
                    .spans = spans,
                    .n_spans = 1,
                    .deltas = deltas,
                    .n_deltas = 1};
  for (int k = 0; k < 5; k++) {
    assert_int_equal(em_remote_sample(r, "edgemon_x", NULL, 0, k, 1000 + k), 0);
  }
  for (int k = 0; k < 2; k++) {
    assert_int_equal(em_remote_histogram(r, "edgemon_h", NULL, 0, &nh, 2000 + k), 0);
  }
  /* The first request is in flight or queued, the second queued: nothing is ever answered,
   * so nothing leaves the queue, and the other five were dropped on arrival. */
  em_remote_stats_t st;
  assert_int_equal(em_remote_stats(r, 0, &st), 0);
  assert_int_equal(st.queue_depth, 2);
  assert_int_equal(st.queue_capacity, 2);
  assert_int_equal(st.dropped_requests, 5);
  assert_int_equal(st.dropped_samples, 3);
  assert_int_equal(st.dropped_histograms, 2);
  assert_int_equal(st.sent_requests, 0);
  assert_int_equal(st.last_success_unix_ms, 0);
  em_remote_free(r, 0);
  close(fd);
}

/* A remote writing to a loopback port nobody listens on (every attempt refused), retrying
 * after 5 to 20 ms, with one sample batched. */
static em_remote_t *refused_remote(uint32_t batch_series, uint32_t flush_ms) {
  int fd = -1;
  char url[64];
  snprintf(url, sizeof(url), "http://127.0.0.1:%d/api/v1/write", loopback_port(&fd, 0));
  em_remote_endpoint_cfg_t ep = {.url = url, .queue_requests = 4, .timeout_ms = 5000};
  em_remote_cfg_t cfg = {.endpoints = &ep,
                         .n_endpoints = 1,
                         .batch_series = batch_series,
                         .flush_ms = flush_ms,
                         .backoff_min_ms = 5,
                         .backoff_max_ms = 20};
  em_remote_t *r = NULL;
  assert_int_equal(em_remote_new(&r, &cfg), 0);
  assert_int_equal(em_remote_sample(r, "edgemon_x", NULL, 0, 1, 1000), 0);
  return r;
}

/* Polls r's stats (bounded: 20 s) until failed_network reaches n; returns the last stats. */
static em_remote_stats_t wait_failed_network(em_remote_t *r, uint64_t n) {
  em_remote_stats_t st = {0};
  for (int k = 0; k < 2000; k++) {
    assert_int_equal(em_remote_stats(r, 0, &st), 0);
    if (st.failed_network >= n) {
      break;
    }
    nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
  }
  return st;
}

static void network_errors_are_retried_and_the_request_kept(void **state) {
  (void)state;
  em_remote_t *r = refused_remote(100, 600000);
  assert_int_equal(em_remote_flush(r), 0);
  /* At least three refused attempts, two of them retries. */
  em_remote_stats_t st = wait_failed_network(r, 3);
  assert_true(st.failed_network >= 3);
  assert_true(st.retries >= 2);
  assert_int_equal(st.queue_depth, 1);
  assert_int_equal(st.dropped_requests, 0);
  assert_int_equal(st.failed_5xx + st.failed_429 + st.failed_4xx + st.sent_requests, 0);
  em_remote_free(r, 0);
}

static void flush_timer_seals_a_partial_batch(void **state) {
  (void)state;
  /* No em_remote_flush and a batch far from full: only the sender's timer can seal it. */
  em_remote_t *r = refused_remote(1000, 20);
  em_remote_stats_t st = wait_failed_network(r, 1);
  assert_true(st.failed_network >= 1);
  assert_int_equal(st.queue_depth, 1);
  em_remote_free(r, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(backoff_doubles_is_capped_and_jittered),
      cmocka_unit_test(status_verdicts),
      cmocka_unit_test(bad_configs_are_refused),
      cmocka_unit_test(full_queue_drops_new_requests_and_counts_them),
      cmocka_unit_test(network_errors_are_retried_and_the_request_kept),
      cmocka_unit_test(flush_timer_seals_a_partial_batch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
