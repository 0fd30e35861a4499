/*
 * test_spanlog.c - unit tests of firmware/agent/profile/spanlog.c: the stage of a sample is the
 * innermost span of its own thread covering its time (nested spans, spans added out of order,
 * other threads' spans ignored, gaps between spans and times outside every span give none),
 * span ends inclusive, and the bounds: a full log, more than EM_PROFILE_MAX_STAGES names, spans
 * with no thread and spans over before the window are counted and left out; reset empties it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "spanlog.h"

#define MS 1000000ull

static em_spanlog_t *fresh(uint32_t max_spans, uint64_t from_ns) {
  em_spanlog_t *l = NULL;
  assert_int_equal(em_spanlog_new(&l, max_spans), 0);
  em_spanlog_reset(l, from_ns);
  return l;
}

static const char *stage_at(const em_spanlog_t *l, uint32_t tid, uint64_t t) {
  size_t n = 0;
  const char *const *names = em_spanlog_stages(l, &n);
  uint32_t s = em_spanlog_stage(l, tid, t, NULL, NULL);
  if (s == EM_PROFILE_NO_STAGE) {
    return "-";
  }
  assert_true(s < n);
  return names[s];
}

static void test_the_innermost_span_of_the_same_thread(void **state) {
  (void)state;
  em_spanlog_t *l = fresh(64, 0);
  /* Thread 7: frame 100..200 ms holding pre 100..120, infer 120..180; post 180..190 after. */
  em_spanlog_add(l, 7, "infer", 120 * MS, 60 * MS); /* Out of order: sealing sorts. */
  em_spanlog_add(l, 7, "frame", 100 * MS, 100 * MS);
  em_spanlog_add(l, 7, "pre", 100 * MS, 20 * MS);
  em_spanlog_add(l, 7, "post", 180 * MS, 10 * MS);
  /* Thread 9 has a span over the same time: it never colours thread 7's samples. */
  em_spanlog_add(l, 9, "io", 0, 500 * MS);
  em_spanlog_seal(l);
  assert_string_equal(stage_at(l, 7, 110 * MS), "pre");
  assert_string_equal(stage_at(l, 7, 150 * MS), "infer");
  assert_string_equal(stage_at(l, 7, 180 * MS), "post");  /* infer ended here too: latest start. */
  assert_string_equal(stage_at(l, 7, 195 * MS), "frame"); /* After post, inside the frame. */
  assert_string_equal(stage_at(l, 7, 200 * MS), "frame"); /* Ends are inclusive. */
  uint64_t from = 0, to = 0;
  assert_int_not_equal(em_spanlog_stage(l, 7, 150 * MS, &from, &to), EM_PROFILE_NO_STAGE);
  assert_int_equal(from, 120 * MS);
  assert_int_equal(to, 180 * MS);
  assert_string_equal(stage_at(l, 7, 201 * MS), "-");
  assert_string_equal(stage_at(l, 7, 99 * MS), "-");
  assert_string_equal(stage_at(l, 9, 150 * MS), "io");
  assert_string_equal(stage_at(l, 8, 150 * MS), "-"); /* A thread without spans. */
  assert_string_equal(stage_at(l, 0, 150 * MS), "-");
  size_t n = 0;
  const char *const *names = em_spanlog_stages(l, &n);
  assert_int_equal(n, 5);
  assert_string_equal(names[0], "infer"); /* In the order first seen. */
  assert_int_equal(em_spanlog_stats(l)->kept, 5);
  em_spanlog_free(l);
}

static void test_a_long_run_of_frames_finds_each_frame_s_stage(void **state) {
  (void)state;
  em_spanlog_t *l = fresh(4096, 0);
  for (uint64_t f = 0; f < 1000; f++) { /* 10 ms frames: 4 ms pre, 5 ms infer, 1 ms idle. */
    em_spanlog_add(l, 3, "pre", f * 10 * MS, 4 * MS);
    em_spanlog_add(l, 3, "infer", f * 10 * MS + 4 * MS, 5 * MS);
  }
  em_spanlog_seal(l);
  for (uint64_t f = 0; f < 1000; f += 37) {
    assert_string_equal(stage_at(l, 3, f * 10 * MS + 2 * MS), "pre");
    assert_string_equal(stage_at(l, 3, f * 10 * MS + 6 * MS), "infer");
    assert_string_equal(stage_at(l, 3, f * 10 * MS + 9 * MS + MS / 2), "-");
  }
  em_spanlog_free(l);
}

static void test_bounds_are_counted_not_stored(void **state) {
  (void)state;
  em_spanlog_t *l = fresh(4, 100 * MS);
  em_spanlog_add(l, 0, "infer", 150 * MS, MS);      /* No thread. */
  em_spanlog_add(l, 5, "infer", 10 * MS, 20 * MS);  /* Over before the window began. */
  em_spanlog_add(l, 5, "infer", 90 * MS, 20 * MS);  /* Began before, ends inside: kept. */
  em_spanlog_add(l, 5, "infer", UINT64_MAX - 5, 9); /* Its end overflows: dropped. */
  for (int i = 0; i < 5; i++) {
    em_spanlog_add(l, 5, "infer", (200 + (uint64_t)i) * MS, MS);
  }
  const em_spanlog_stats_t *st = em_spanlog_stats(l);
  assert_int_equal(st->no_thread, 1);
  assert_int_equal(st->kept, 4);
  assert_int_equal(st->full, 2);
  em_spanlog_seal(l);
  assert_string_equal(stage_at(l, 5, 105 * MS), "infer");
  assert_string_equal(stage_at(l, 5, 204 * MS), "-"); /* Not kept: the log was full. */

  em_spanlog_reset(l, 0);
  assert_int_equal(em_spanlog_stats(l)->kept, 0);
  size_t n = 1;
  (void)em_spanlog_stages(l, &n);
  assert_int_equal(n, 0);
  em_spanlog_free(l);

  l = fresh(1024, 0);
  char name[16];
  for (unsigned i = 0; i < EM_PROFILE_MAX_STAGES + 3; i++) {
    snprintf(name, sizeof(name), "s%u", i);
    em_spanlog_add(l, 1, name, i * MS, MS / 2);
  }
  assert_int_equal(em_spanlog_stats(l)->stage_cut, 3);
  (void)em_spanlog_stages(l, &n);
  assert_int_equal(n, EM_PROFILE_MAX_STAGES);
  em_spanlog_seal(l);
  assert_string_equal(stage_at(l, 1, 63 * MS), "s63");
  assert_string_equal(stage_at(l, 1, 64 * MS), "-");
  em_spanlog_free(l);
}

static void test_bad_arguments(void **state) {
  (void)state;
  em_spanlog_t *l = NULL;
  assert_int_equal(em_spanlog_new(&l, 0), -22);
  assert_int_equal(em_spanlog_new(NULL, 8), -22);
  assert_int_equal(em_spanlog_stage(NULL, 1, 1, NULL, NULL), EM_PROFILE_NO_STAGE);
  em_spanlog_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_the_innermost_span_of_the_same_thread),
      cmocka_unit_test(test_a_long_run_of_frames_finds_each_frame_s_stage),
      cmocka_unit_test(test_bounds_are_counted_not_stored),
      cmocka_unit_test(test_bad_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
