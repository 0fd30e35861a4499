/*
 * test_flight_recorder.c - unit tests of firmware/agent/record/flight.c, the flight recorder:
 * the tick ring wraps and keeps each tick's figures as read (a figure not read is left out,
 * one unreadable is null), a recording holds exactly the ticks and spans of [trigger - pre,
 * trigger + post] and is taken on the first tick at or after its end, a span keeps its
 * stage's name when the caller's stage slot is reused for another name, triggers within the
 * minimum gap or while one is pending are counted and not recorded, spans of the window the
 * ring overwrote are counted, spans that arrived out of order come out by start, and nothing
 * is allocated after start (malloc, calloc and realloc go through failing_alloc.c).
 *
 * Time is injected: ticks at k * 100 ms, spans where each test puts them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "failing_alloc.h"
#include "flight.h"

#define MS     UINT64_C(1000000)
#define SEC    UINT64_C(1000000000)
#define PERIOD (100 * MS)

static const em_flight_column_t columns[] = {
    {.name = "pmu.cycles", .unit = "1", .kind = EM_METRIC_COUNTER},
    {.name = "mem.rss", .unit = "By", .kind = EM_METRIC_GAUGE},
    {.name = "psi.cpu.some.avg10", .unit = "%", .kind = EM_METRIC_GAUGE},
};

static em_flight_rec_opts_t opts(uint32_t max_spans) {
  return (em_flight_rec_opts_t){.period_ns = PERIOD,
                                .pre_ns = SEC,
                                .post_ns = 500 * MS,
                                .min_gap_ns = 5 * SEC,
                                .max_spans = max_spans,
                                .max_bytes = 65536,
                                .columns = columns,
                                .n_columns = 3};
}

/* A recorder with opts(max_spans) (asserts). */
static em_flight_rec_t *rec_new(uint32_t max_spans) {
  em_flight_rec_t *r = NULL;
  em_flight_rec_opts_t o = opts(max_spans);
  assert_int_equal(em_flight_rec_new(&r, &o), 0);
  return r;
}

static uint64_t tick_time(unsigned k) {
  return (uint64_t)k * PERIOD;
}

/* Tick k: cycles = 1000 * k every tick; rss null on odd ticks; PSI only every 10th tick. */
static void tick(em_flight_rec_t *r, unsigned k) {
  em_flight_value_t *v = em_flight_rec_tick(r, tick_time(k));
  size_t n = 0;
  v[n++] = (em_flight_value_t){.column = 0,
                               .value = {.type = EM_VALUE_UINT, .as.u = 1000u * (uint64_t)k}};
  v[n++] = (em_flight_value_t){
      .column = 1,
      .value = k % 2 ? (em_value_t){.type = EM_VALUE_ABSENT}
                     : (em_value_t){.type = EM_VALUE_UINT, .as.u = 4096u * (uint64_t)k}};
  if (k % 10 == 0) {
    v[n++] = (em_flight_value_t){.column = 2, .value = {.type = EM_VALUE_FLOAT, .as.f = k / 10.0}};
  }
  em_flight_rec_commit(r, n);
}

static const em_flight_trigger_t escalation = {.cause = EM_FLIGHT_ESCALATION,
                                               .level = EM_LEVEL_DEGRADED,
                                               .prev_level = EM_LEVEL_NOMINAL,
                                               .rule = "infer.p99",
                                               .stage = "infer",
                                               .reason = "p99 41ms over 40ms"};

static void new_rejects_bad_options(void **state) {
  (void)state;
  em_flight_rec_t *r = NULL;
  em_flight_rec_opts_t o = opts(16);
  assert_int_equal(em_flight_rec_new(NULL, &o), -EINVAL);
  assert_int_equal(em_flight_rec_new(&r, NULL), -EINVAL);
  o.period_ns = 0;
  assert_int_equal(em_flight_rec_new(&r, &o), -EINVAL);
  o = opts(0);
  assert_int_equal(em_flight_rec_new(&r, &o), -EINVAL);
  o = opts(EM_FLIGHT_MAX_SPANS + 1);
  assert_int_equal(em_flight_rec_new(&r, &o), -EINVAL);
  o = opts(16);
  o.max_bytes = EM_FLIGHT_MAX_BYTES + 1;
  assert_int_equal(em_flight_rec_new(&r, &o), -EINVAL);
  o = opts(16);
  o.n_columns = EM_FLIGHT_MAX_COLUMNS + 1;
  assert_int_equal(em_flight_rec_new(&r, &o), -EINVAL);
  em_flight_column_t bad[1] = {{.name = NULL, .unit = "1"}};
  o = opts(16);
  o.columns = bad;
  o.n_columns = 1;
  assert_int_equal(em_flight_rec_new(&r, &o), -EINVAL);
  assert_null(r);
  em_flight_rec_free(NULL);
}

/* Sizes come from the options; the bytes it announces cover the rings and the buffer. */
static void sizes_follow_the_options(void **state) {
  (void)state;
  em_flight_rec_t *r = NULL;
  em_flight_rec_opts_t o = opts(1000);
  assert_int_equal(em_flight_rec_new(&r, &o), 0);
  assert_int_equal(em_flight_rec_tick_capacity(r), 15 + EM_FLIGHT_REC_TICK_SLACK);
  assert_int_equal(em_flight_rec_span_capacity(r), 1000);
  uint64_t at_least = 1000u * sizeof(em_flight_span_t) + 65536u +
                      19u * 3u * sizeof(em_flight_value_t) + 19u * sizeof(em_flight_tick_t);
  assert_true(em_flight_rec_bytes(r) >= at_least);
  assert_true(em_flight_rec_bytes(r) < at_least + 64 * 1024);
  size_t cap = 0;
  assert_non_null(em_flight_rec_buffer(r, &cap));
  assert_int_equal(cap, 65536);
  em_flight_rec_stats_t st;
  em_flight_rec_stats(r, &st);
  assert_int_equal(st.ticks_capped, 0);
  em_flight_rec_free(r);

  o.period_ns = MS / 10; /* 1.5 s at 100 us: more than EM_FLIGHT_MAX_TICKS */
  assert_int_equal(em_flight_rec_new(&r, &o), 0);
  assert_int_equal(em_flight_rec_tick_capacity(r), EM_FLIGHT_MAX_TICKS);
  em_flight_rec_stats(r, &st);
  assert_int_equal(st.ticks_capped, 1);
  em_flight_rec_free(r);
}

/* Ticks 1..60, one span per tick at the tick's time; trigger at tick 40: the recording is
 * taken at tick 45 and holds ticks 30..45 and their spans, the figures as each tick read them. */
static void recording_holds_the_window(void **state) {
  (void)state;
  em_flight_rec_t *r = rec_new(4096);
  em_flight_t *f = NULL;
  for (unsigned k = 1; k <= 60 && !f; k++) {
    tick(r, k);
    assert_int_equal(em_flight_rec_span(r, 0, "infer", 100 + k, tick_time(k), 7 * MS + k), 0);
    if (k == 40) {
      assert_int_equal(em_flight_rec_trigger(r, &escalation, tick_time(40), 123456789), 0);
    }
    assert_int_equal(em_flight_rec_due(r, tick_time(k)), k >= 45);
    f = em_flight_rec_take(r, tick_time(k));
    assert_true(f == NULL || k == 45);
  }
  assert_non_null(f);
  assert_int_equal(f->head.time_ns, 123456789);
  assert_int_equal(f->number, 0);
  assert_int_equal(f->trigger_mono_ns, tick_time(40));
  assert_int_equal(f->pre_ns, SEC);
  assert_int_equal(f->post_ns, 500 * MS);
  assert_int_equal(f->period_ns, PERIOD);
  assert_string_equal(f->trigger.rule, "infer.p99");
  assert_int_equal(f->trigger.level, EM_LEVEL_DEGRADED);
  assert_int_equal(f->n_columns, 3);
  assert_string_equal(f->columns[2].name, "psi.cpu.some.avg10");
  assert_int_equal(f->n_stages, 1);
  assert_string_equal(f->stages[0], "infer");

  assert_int_equal(f->n_ticks, 16);
  for (size_t i = 0; i < f->n_ticks; i++) {
    unsigned k = 30 + (unsigned)i;
    const em_flight_tick_t *t = &f->ticks[i];
    assert_int_equal(t->mono_ns, tick_time(k));
    assert_int_equal(t->n_values, k % 10 == 0 ? 3 : 2);
    assert_int_equal(t->values[0].column, 0);
    assert_int_equal(t->values[0].value.as.u, 1000u * k);
    assert_int_equal(t->values[1].column, 1);
    assert_int_equal(t->values[1].value.type, k % 2 ? EM_VALUE_ABSENT : EM_VALUE_UINT);
    if (k % 10 == 0) {
      assert_int_equal(t->values[2].column, 2);
      assert_true(t->values[2].value.as.f == k / 10.0);
    }
  }
  assert_int_equal(f->n_spans, 16);
  for (size_t i = 0; i < f->n_spans; i++) {
    unsigned k = 30 + (unsigned)i;
    assert_int_equal(f->spans[i].stage, 0);
    assert_int_equal(f->spans[i].frame_id, 100 + k);
    assert_int_equal(f->spans[i].start_ns, tick_time(k));
    assert_int_equal(f->spans[i].duration_ns, 7 * MS + k);
  }
  assert_int_equal(f->truncated.spans_overwritten, 0);
  assert_false(em_flight_rec_due(r, tick_time(46)));
  assert_null(em_flight_rec_take(r, tick_time(46)));
  em_flight_rec_free(r);
}

/* The caller's stage slot 0 is reused for another name: spans keep the name they came with. */
static void reused_stage_slot_keeps_names(void **state) {
  (void)state;
  em_flight_rec_t *r = rec_new(64);
  tick(r, 1);
  assert_int_equal(em_flight_rec_span(r, 0, "decode", 1, tick_time(1), MS), 0);
  assert_int_equal(em_flight_rec_span(r, 1, "infer", 1, tick_time(1) + 1, MS), 0);
  /* Slot 0 evicted in the span table and given to "track". */
  assert_int_equal(em_flight_rec_span(r, 0, "track", 1, tick_time(1) + 2, MS), 0);
  assert_int_equal(em_flight_rec_span(r, 0, "track", 2, tick_time(1) + 3, MS), 0);
  /* And back to "decode" again. */
  assert_int_equal(em_flight_rec_span(r, 0, "decode", 2, tick_time(1) + 4, MS), 0);
  assert_int_equal(em_flight_rec_span(r, 7, "", 2, tick_time(1) + 5, MS), -EINVAL);
  assert_int_equal(em_flight_rec_trigger(r, &escalation, tick_time(1), 1), 0);
  tick(r, 7);
  em_flight_t *f = em_flight_rec_take(r, tick_time(7));
  assert_non_null(f);
  assert_int_equal(f->n_spans, 5);
  static const char *const want[] = {"decode", "infer", "track", "track", "decode"};
  for (size_t i = 0; i < 5; i++) {
    assert_true(f->spans[i].stage < f->n_stages);
    assert_string_equal(f->stages[f->spans[i].stage], want[i]);
  }
  assert_int_equal(f->n_stages, 3);
  em_flight_rec_free(r);
}

/* 64 names with spans in the ring: a 65th is refused (counted) until the ring overwrote every
 * span of one of them; then its slot takes the new name and old spans keep theirs. */
static void names_are_replaced_only_when_unused(void **state) {
  (void)state;
  em_flight_rec_t *r = rec_new(EM_FLIGHT_MAX_STAGES);
  tick(r, 1);
  char name[32];
  for (unsigned i = 0; i < EM_FLIGHT_MAX_STAGES; i++) {
    snprintf(name, sizeof(name), "s%u", i);
    assert_int_equal(em_flight_rec_span(r, i, name, i, tick_time(1) + i, MS), 0);
  }
  assert_int_equal(em_flight_rec_span(r, 200, "late", 99, tick_time(1) + 100, MS), -ENOSPC);
  em_flight_rec_stats_t st;
  em_flight_rec_stats(r, &st);
  assert_int_equal(st.unnamed, 1);
  /* A span of s1 overwrites s0's only span: s0's slot is free, "late" takes it next. */
  assert_int_equal(em_flight_rec_span(r, 1, "s1", 64, tick_time(1) + 101, MS), 0);
  assert_int_equal(em_flight_rec_span(r, 200, "late", 65, tick_time(1) + 102, MS), 0);
  assert_int_equal(em_flight_rec_trigger(r, &escalation, tick_time(1), 1), 0);
  tick(r, 7);
  em_flight_t *f = em_flight_rec_take(r, tick_time(7));
  assert_non_null(f);
  assert_int_equal(f->n_spans, EM_FLIGHT_MAX_STAGES);
  assert_string_equal(f->stages[f->spans[0].stage], "s2"); /* s0 and s1's first: overwritten */
  assert_string_equal(f->stages[f->spans[f->n_spans - 2].stage], "s1");
  assert_string_equal(f->stages[f->spans[f->n_spans - 1].stage], "late");
  for (size_t i = 0; i + 2 < f->n_spans; i++) {
    snprintf(name, sizeof(name), "s%u", (unsigned)(i + 2));
    assert_string_equal(f->stages[f->spans[i].stage], name);
  }
  em_flight_rec_free(r);
}

/* A second trigger while one is pending, and one within min_gap of the last: counted, not
 * recorded; after the gap a trigger records again with the next number. */
static void triggers_are_rate_limited(void **state) {
  (void)state;
  em_flight_rec_t *r = rec_new(64);
  tick(r, 1);
  assert_int_equal(em_flight_rec_trigger(r, &escalation, tick_time(1), 1), 0);
  assert_int_equal(em_flight_rec_trigger(r, &escalation, tick_time(2), 2), -EBUSY);
  tick(r, 6);
  assert_non_null(em_flight_rec_take(r, tick_time(6)));
  assert_int_equal(em_flight_rec_trigger(r, &escalation, tick_time(1) + 5 * SEC - 1, 3), -EAGAIN);
  em_flight_rec_stats_t st;
  em_flight_rec_stats(r, &st);
  assert_int_equal(st.suppressed, 2);
  assert_int_equal(st.recordings, 1);
  assert_false(em_flight_rec_due(r, tick_time(100)));
  em_flight_trigger_t cmd = {.cause = EM_FLIGHT_COMMAND, .level = EM_LEVEL_NOMINAL};
  assert_int_equal(em_flight_rec_trigger(r, &cmd, tick_time(1) + 5 * SEC, 4), 0);
  tick(r, 56);
  em_flight_t *f = em_flight_rec_take(r, tick_time(56));
  assert_non_null(f);
  assert_int_equal(f->number, 1);
  assert_int_equal(f->trigger.cause, EM_FLIGHT_COMMAND);
  assert_null(f->trigger.rule);
  /* A reload shortens the gap. */
  em_flight_rec_set_min_gap(r, 0);
  assert_int_equal(em_flight_rec_trigger(r, &escalation, tick_time(57), 5), 0);
  em_flight_rec_free(r);
}

/* A ring of 8 spans, one span per tick at the tick's time: of the window's 16 spans (ticks
 * 30..45) the recording holds the last 8 and counts the other 8 as overwritten. */
static void overwritten_spans_are_counted(void **state) {
  (void)state;
  em_flight_rec_t *r = rec_new(8);
  em_flight_t *f = NULL;
  for (unsigned k = 1; k <= 45; k++) {
    tick(r, k);
    assert_int_equal(em_flight_rec_span(r, k % 3, k % 3 ? "infer" : "decode", k, tick_time(k), MS),
                     0);
    if (k == 40) {
      assert_int_equal(em_flight_rec_trigger(r, &escalation, tick_time(40), 1), 0);
    }
    f = em_flight_rec_take(r, tick_time(k));
  }
  assert_non_null(f);
  assert_int_equal(f->n_spans, 8);
  assert_int_equal(f->spans[0].frame_id, 38);
  assert_int_equal(f->spans[7].frame_id, 45);
  assert_int_equal(f->truncated.spans_overwritten, 8);
  em_flight_rec_stats_t st;
  em_flight_rec_stats(r, &st);
  assert_int_equal(st.overwritten, 8);
  em_flight_rec_free(r);
}

/* Spans that arrive out of order (datagrams sent at the end of their stage, several threads)
 * come out by start; the ring goes on in order after the recording. */
static void spans_come_out_by_start(void **state) {
  (void)state;
  em_flight_rec_t *r = rec_new(100);
  tick(r, 10);
  for (unsigned i = 0; i < 150; i++) { /* Wraps: the last 100 are kept. */
    uint64_t start = tick_time(10) - (i * 7919u % 150u) * MS;
    assert_int_equal(em_flight_rec_span(r, 0, "infer", i, start, MS), 0);
  }
  assert_int_equal(em_flight_rec_trigger(r, &escalation, tick_time(10), 1), 0);
  tick(r, 15);
  em_flight_t *f = em_flight_rec_take(r, tick_time(15));
  assert_non_null(f);
  assert_int_equal(f->n_spans, 100);
  uint64_t seen_frames = 0;
  for (size_t i = 0; i < f->n_spans; i++) {
    if (i > 0) {
      assert_true(f->spans[i - 1].start_ns <= f->spans[i].start_ns);
    }
    assert_true(f->spans[i].frame_id >= 50); /* The first 50 were overwritten. */
    seen_frames += f->spans[i].frame_id;
  }
  assert_int_equal(seen_frames, (50u + 149u) * 100u / 2u);
  em_flight_rec_free(r);
}

/* Ticks, spans, triggers and recordings allocate nothing once the recorder exists. */
static void nothing_is_allocated_after_start(void **state) {
  (void)state;
  em_flight_rec_t *r = rec_new(256);
  em_failing_alloc_arm(0, false);
  unsigned taken = 0;
  for (unsigned k = 1; k <= 400; k++) {
    tick(r, k);
    for (unsigned s = 0; s < 3; s++) {
      static const char *const stages[] = {"pre", "infer", "post"};
      (void)em_flight_rec_span(r, s, stages[s], k, tick_time(k) + s * MS, MS);
    }
    if (k % 60 == 0) {
      (void)em_flight_rec_trigger(r, &escalation, tick_time(k), k);
    }
    taken += em_flight_rec_take(r, tick_time(k)) != NULL;
  }
  assert_int_equal(em_failing_alloc_disarm(), 0);
  assert_int_equal(taken, 6);
  em_flight_rec_free(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(new_rejects_bad_options),
      cmocka_unit_test(sizes_follow_the_options),
      cmocka_unit_test(recording_holds_the_window),
      cmocka_unit_test(reused_stage_slot_keeps_names),
      cmocka_unit_test(names_are_replaced_only_when_unused),
      cmocka_unit_test(triggers_are_rate_limited),
      cmocka_unit_test(overwritten_spans_are_counted),
      cmocka_unit_test(spans_come_out_by_start),
      cmocka_unit_test(nothing_is_allocated_after_start),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
