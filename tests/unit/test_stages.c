/*
 * test_stages.c - unit tests of firmware/agent/spans/stages.c, the stage table of span ingest:
 * stages named by budgets keep a slot whatever other names arrive first, idle unbudgeted
 * stages give their slot to new names (counted, reported to the owner), busy ones do not,
 * and a reload's new reservations take effect.
 *
 * Time is injected (now_ns), so every run sees the same table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "stages.h"

#define MS  UINT64_C(1000000)
#define SEC UINT64_C(1000000000)
#define T0  (UINT64_C(100) * SEC)

/* What the owner heard of evictions. */
typedef struct {
  int calls;
  size_t index;
  char evicted[EM_STAGE_FIELD_BYTES];
  char arriving[EM_STAGE_FIELD_BYTES];
} evict_log_t;

static void on_evict(void *ctx, size_t index, const char *evicted, const char *arriving) {
  evict_log_t *l = ctx;
  l->calls++;
  l->index = index;
  snprintf(l->evicted, sizeof(l->evicted), "%s", evicted);
  snprintf(l->arriving, sizeof(l->arriving), "%s", arriving);
}

/* A span of `name` at now: the stage, or NULL (overflow). */
static em_stage_stats_t *seen(em_stages_t *t, const char *name, uint64_t now) {
  em_stage_stats_t *st = em_stages_get(t, name, now);
  if (st) {
    st->last_seen_ns = now;
    em_hist_record(&st->window, 1000);
    st->total++;
  }
  return st;
}

static void init_rejects_bad_arguments(void **state) {
  (void)state;
  em_stages_t t;
  assert_int_equal(em_stages_init(&t, 0, SEC, NULL, NULL), -EINVAL);
  assert_int_equal(em_stages_init(&t, EM_PROTO_MAX_STAGES + 1, SEC, NULL, NULL), -EINVAL);
  assert_int_equal(em_stages_init(&t, 4, 0, NULL, NULL), -EINVAL);
  assert_int_equal(em_stages_init(NULL, 4, SEC, NULL, NULL), -EINVAL);
  em_stages_deinit(NULL);
}

/* Junk names sent before the pipeline starts cannot take the slots of budgeted stages (they
 * once did: the budgeted stages' spans were then dropped as overflow). */
static void budgeted_stages_keep_their_slots_against_junk_names(void **state) {
  (void)state;
  em_stages_t t;
  assert_int_equal(em_stages_init(&t, 4, 60 * SEC, NULL, NULL), 0);
  const char *budgeted[] = {"infer", "pre", "infer"};
  assert_int_equal(em_stages_policy(&t, budgeted, 3, 0), 2);
  char junk[EM_STAGE_FIELD_BYTES];
  int got = 0;
  for (int i = 0; i < 100; i++) {
    snprintf(junk, sizeof(junk), "junk%d", i);
    got += seen(&t, junk, T0) != NULL;
  }
  assert_int_equal(got, 2); /* 4 slots, 2 held for the budgeted stages. */
  em_stage_stats_t *infer = seen(&t, "infer", T0 + MS);
  em_stage_stats_t *pre = seen(&t, "pre", T0 + MS);
  assert_non_null(infer);
  assert_non_null(pre);
  assert_true(infer->reserved && pre->reserved);
  assert_int_equal(t.n, 4);
  assert_null(seen(&t, "junk77", T0 + 2 * MS));
  assert_ptr_equal(seen(&t, "infer", T0 + 3 * MS), infer); /* Same slot on every span. */
  assert_int_equal(infer->total, 2);
  assert_int_equal(t.evictions, 0);
  em_stages_deinit(&t);
}

/* An unbudgeted stage idle for idle_ns gives its slot to a new name, in place: the index is
 * reused with an empty window, the owner hears of it, the eviction is counted. A stage seen
 * within idle_ns keeps its slot. */
static void an_idle_stage_gives_its_slot_to_a_new_name(void **state) {
  (void)state;
  evict_log_t log = {0};
  em_stages_t t;
  assert_int_equal(em_stages_init(&t, 2, SEC, on_evict, &log), 0);
  assert_non_null(seen(&t, "a", T0));
  assert_non_null(seen(&t, "b", T0));
  assert_null(seen(&t, "c", T0 + 500 * MS)); /* Both seen within 1 s: none evictable. */
  assert_non_null(seen(&t, "a", T0 + 600 * MS));
  em_stage_stats_t *c = seen(&t, "c", T0 + 1200 * MS); /* b is idle 1.2 s, a only 0.6 s. */
  assert_non_null(c);
  assert_ptr_equal(c, &t.entries[1]);
  assert_string_equal(c->name, "c");
  assert_int_equal(c->total, 1);
  assert_int_equal(c->window.count, 1);
  assert_int_equal(t.n, 2);
  assert_int_equal(t.evictions, 1);
  assert_int_equal(log.calls, 1);
  assert_int_equal(log.index, 1);
  assert_string_equal(log.evicted, "b");
  assert_string_equal(log.arriving, "c");
  assert_string_equal(t.entries[0].name, "a");
  assert_int_equal(t.entries[0].total, 2);
  /* b again: nothing idle now (a seen 0.6 s ago, c just now). */
  assert_null(seen(&t, "b", T0 + 1300 * MS));
  assert_int_equal(t.evictions, 1);
  em_stages_window_reset(&t);
  assert_int_equal(t.entries[0].window.count, 0);
  assert_int_equal(t.entries[1].window.count, 0);
  em_stages_deinit(&t);
}

/* A budgeted stage is never evicted for an unbudgeted name, however long it is idle. */
static void a_budgeted_stage_is_never_evicted_for_another_name(void **state) {
  (void)state;
  em_stages_t t;
  assert_int_equal(em_stages_init(&t, 2, SEC, NULL, NULL), 0);
  const char *budgeted[] = {"infer"};
  em_stages_policy(&t, budgeted, 1, 0);
  assert_non_null(seen(&t, "infer", T0));
  assert_non_null(seen(&t, "other", T0 + 10 * SEC));
  assert_null(seen(&t, "new", T0 + 10 * SEC + 1)); /* "infer" is idle 10 s but budgeted. */
  assert_non_null(seen(&t, "new", T0 + 12 * SEC)); /* "other" idle 2 s: it goes. */
  assert_string_equal(t.entries[0].name, "infer");
  assert_string_equal(t.entries[1].name, "new");
  em_stages_deinit(&t);
}

/* A reload that budgets a stage while the table is full: that stage takes the slot of the
 * unbudgeted stage seen longest ago, busy or not; one that is no longer budgeted becomes
 * evictable. The idle time follows the reload too. */
static void a_reload_reserves_new_names_and_frees_old_ones(void **state) {
  (void)state;
  evict_log_t log = {0};
  em_stages_t t;
  assert_int_equal(em_stages_init(&t, 2, 60 * SEC, on_evict, &log), 0);
  const char *first[] = {"infer"};
  em_stages_policy(&t, first, 1, 0);
  assert_non_null(seen(&t, "infer", T0));
  assert_non_null(seen(&t, "post", T0 + MS));
  const char *second[] = {"pre"};
  assert_int_equal(em_stages_policy(&t, second, 1, 5 * SEC), 1);
  assert_false(t.entries[0].reserved);
  em_stage_stats_t *pre = seen(&t, "pre", T0 + 2 * MS); /* Nothing idle: the stalest goes. */
  assert_non_null(pre);
  assert_true(pre->reserved);
  assert_string_equal(log.evicted, "infer");
  assert_int_equal(t.evictions, 1);
  assert_null(seen(&t, "infer", T0 + 3 * MS));      /* Unbudgeted now, and "post" is busy. */
  assert_non_null(seen(&t, "infer", T0 + 6 * SEC)); /* "post" idle > 5 s (the new idle). */
  assert_string_equal(log.evicted, "post");
  em_stages_deinit(&t);
}

/* More budgeted names than slots: the first cap are reserved; the count says how many there
 * were; bad names are skipped. */
static void more_budgeted_names_than_slots_reserves_the_first(void **state) {
  (void)state;
  em_stages_t t;
  assert_int_equal(em_stages_init(&t, 3, SEC, NULL, NULL), 0);
  const char *names[] = {"a", "", NULL, "b", "c", "a", "0123456789012345678901234567890123", "d"};
  assert_int_equal(em_stages_policy(&t, names, 8, 0), 4);
  assert_int_equal(t.n_reserved, 3);
  assert_null(seen(&t, "d", T0)); /* Past the cap: unreserved, and every slot is held. */
  assert_non_null(seen(&t, "b", T0));
  assert_non_null(seen(&t, "a", T0));
  assert_null(seen(&t, "d", T0 + 10 * SEC)); /* The last slot stays held for "c". */
  assert_non_null(seen(&t, "c", T0 + 10 * SEC));
  assert_null(seen(&t, "d", T0 + 20 * SEC)); /* Every stage reserved: none to evict. */
  assert_int_equal(t.evictions, 0);
  assert_null(em_stages_get(&t, "", T0));
  em_stages_deinit(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(init_rejects_bad_arguments),
      cmocka_unit_test(budgeted_stages_keep_their_slots_against_junk_names),
      cmocka_unit_test(an_idle_stage_gives_its_slot_to_a_new_name),
      cmocka_unit_test(a_budgeted_stage_is_never_evicted_for_another_name),
      cmocka_unit_test(a_reload_reserves_new_names_and_frees_old_ones),
      cmocka_unit_test(more_budgeted_names_than_slots_reserves_the_first),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
