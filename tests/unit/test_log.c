/*
 * test_log.c - unit tests for the agent's log rate limit (firmware/agent/log.c): the interval
 * every line a peer can cause is held to (EM_LOG_LIMIT_NS) is ten seconds in 64 bits, a burst
 * writes one line and counts the rest, and the count comes back once, when the interval ends.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "log.h"

#define NS_PER_S UINT64_C(1000000000)

/* A clock reading far from zero, as uv_hrtime() gives after a long uptime. */
#define T0 (UINT64_C(86400) * 365 * NS_PER_S)

/* The constant is ten seconds, not the 32-bit wrap of 10 * 10^9 (1.41 s). */
static void limit_interval_is_ten_seconds(void **state) {
  (void)state;
  assert_true(sizeof(EM_LOG_LIMIT_NS) >= sizeof(uint64_t));
  assert_true(EM_LOG_LIMIT_NS == 10 * NS_PER_S);
  assert_int_equal(EM_LOG_LIMIT_NS / NS_PER_S, EM_LOG_LIMIT_S);
}

/* Within the interval every line is held back, up to its last nanosecond. */
static void lines_within_ten_seconds_are_held_back(void **state) {
  (void)state;
  em_log_limit_t l = {0};
  assert_true(em_log_limit_pass(&l, T0, EM_LOG_LIMIT_NS));
  assert_false(em_log_limit_pass(&l, T0 + 1500 * (NS_PER_S / 1000), EM_LOG_LIMIT_NS));
  assert_false(em_log_limit_pass(&l, T0 + 5 * NS_PER_S, EM_LOG_LIMIT_NS));
  assert_false(em_log_limit_pass(&l, T0 + 10 * NS_PER_S - 1, EM_LOG_LIMIT_NS));
  uint64_t held = 0;
  assert_false(em_log_limit_flush(&l, T0 + 10 * NS_PER_S - 1, EM_LOG_LIMIT_NS, &held));
  assert_true(em_log_limit_flush(&l, T0 + 10 * NS_PER_S, EM_LOG_LIMIT_NS, &held));
  assert_int_equal(held, 3);
  /* The summary starts the next interval: nothing more to say, and lines are held again. */
  assert_false(em_log_limit_flush(&l, T0 + 30 * NS_PER_S, EM_LOG_LIMIT_NS, &held));
  assert_false(em_log_limit_pass(&l, T0 + 19 * NS_PER_S, EM_LOG_LIMIT_NS));
  assert_true(em_log_limit_pass(&l, T0 + 20 * NS_PER_S, EM_LOG_LIMIT_NS));
}

/* A flood over a minute: one line per interval written, every other one counted once. */
static void a_flood_writes_one_line_and_one_count_per_interval(void **state) {
  (void)state;
  em_log_limit_t l = {0};
  uint64_t written = 0;
  uint64_t counted = 0;
  uint64_t summaries = 0;
  const uint64_t lines = 600000;
  const uint64_t span_ns = 60 * NS_PER_S;
  for (uint64_t i = 0; i < lines; i++) {
    uint64_t now = T0 + i * (span_ns / lines);
    written += em_log_limit_pass(&l, now, EM_LOG_LIMIT_NS);
    uint64_t held = 0;
    if (i % 1000 == 0 && em_log_limit_flush(&l, now, EM_LOG_LIMIT_NS, &held)) {
      counted += held;
      summaries++;
    }
  }
  uint64_t held = 0;
  if (em_log_limit_flush(&l, T0 + span_ns + EM_LOG_LIMIT_NS, EM_LOG_LIMIT_NS, &held)) {
    counted += held;
    summaries++;
  }
  assert_int_equal(written + counted, lines);
  assert_true(written + summaries <= 2 * (span_ns / EM_LOG_LIMIT_NS) + 2);
  assert_true(written >= 1 && summaries >= 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(limit_interval_is_ten_seconds),
      cmocka_unit_test(lines_within_ten_seconds_are_held_back),
      cmocka_unit_test(a_flood_writes_one_line_and_one_count_per_interval),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
