/*
 * test_growth.c - unit tests of firmware/agent/profile/growth.c on hand-built profiles: a
 * function a stage newly calls is named with its growth in points and its callers, whose
 * share stays whole, are not; shares are inclusive (a function counted once per stack however
 * often it recurses) and by name across frames of different lines; a Python function's share is
 * of the samples that hold Python frames, so the part of the window the client's frames covered
 * moves nothing; other stages' samples never
 * count; a stage with too few samples on either side names nothing; growth under the threshold
 * names nothing; the list is ranked and cut at its maximum; the baseline keeps the stages with
 * the most samples and each one's largest shares.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "growth.h"

#define MAX_STACKS 32

/* A profile the test builds: frames by name, stacks as index paths. */
typedef struct {
  em_profile_frame_t frames[64];
  char names[64][64];
  uint32_t paths[MAX_STACKS][8];
  em_profile_stack_t stacks[MAX_STACKS];
  const char *stages[4];
  em_profile_t p;
} built_t;

static void build_init(built_t *b) {
  memset(b, 0, sizeof(*b));
  b->stages[0] = "pre";
  b->stages[1] = "infer";
  b->p.stages = b->stages;
  b->p.n_stages = 2;
  b->p.frames = b->frames;
  b->p.stacks = b->stacks;
}

/* The frame of `name` (module `module`), added when new: a native frame when the name starts
 * with '_' ("_PyEval_EvalFrameDefault"), else a Python one. */
static uint32_t frame(built_t *b, const char *name, const char *module) {
  for (uint32_t i = 0; i < b->p.n_frames; i++) {
    if (strcmp(b->frames[i].name, name) == 0 &&
        strcmp(b->frames[i].module ? b->frames[i].module : "", module ? module : "") == 0) {
      return i;
    }
  }
  uint32_t i = (uint32_t)b->p.n_frames++;
  snprintf(b->names[i], sizeof(b->names[i]), "%s", name);
  b->frames[i] = (em_profile_frame_t){.name = b->names[i],
                                      .module = module,
                                      .kind = name[0] == '_' ? EM_FRAME_NATIVE : EM_FRAME_PYTHON};
  return i;
}

/* The end of a stack's names: a null pointer of the type va_arg reads (NULL may be a plain 0). */
#define END ((const char *)NULL)

/* A stack of `samples` in stage `stage` (1: infer, 0: pre), root first, ended by END. */
static void stack(built_t *b, uint32_t stage, uint64_t samples, ...) {
  size_t s = b->p.n_stacks++;
  va_list ap;
  va_start(ap, samples);
  size_t n = 0;
  for (const char *name = va_arg(ap, const char *); name; name = va_arg(ap, const char *)) {
    b->paths[s][n++] = frame(b, name, NULL);
  }
  va_end(ap);
  b->stacks[s] = (em_profile_stack_t){
      .frames = b->paths[s], .n_frames = n, .samples = samples, .stage = stage};
}

static int setup(void **state) {
  em_growth_t *g = NULL;
  assert_int_equal(em_growth_new(&g), 0);
  *state = g;
  return 0;
}

static int teardown(void **state) {
  em_growth_free(*state);
  return 0;
}

/* The NOMINAL pipeline: infer runs run_model (80) and draw (20) under main and infer. */
static void nominal(built_t *b) {
  build_init(b);
  stack(b, 1, 80, "main", "infer", "run_model", END);
  stack(b, 1, 20, "main", "infer", "draw", END);
  stack(b, 0, 50, "main", "prep", END);
}

/* The baseline of the NOMINAL pipeline: its two stages. */
static void nominal_base(em_growth_t *g, em_growth_base_t *base) {
  built_t then;
  nominal(&then);
  assert_int_equal(em_growth_baseline(g, &then.p, base), 2);
}

/* out[i] names `name` with `points` of growth. */
static void assert_named(const em_growth_fn_t *out, size_t i, const char *name, double points) {
  assert_string_equal(out[i].name, name);
  assert_true(fabs(out[i].value - points) < 1e-9);
}

static void growth_names_the_new_function_and_not_its_callers(void **state) {
  em_growth_t *g = *state;
  built_t now;
  em_growth_base_t base;
  nominal_base(g, &base);
  /* The breach: infer also calls extra (100 of 200 samples), the rest as before. */
  build_init(&now);
  stack(&now, 1, 80, "main", "infer", "run_model", END);
  stack(&now, 1, 20, "main", "infer", "draw", END);
  stack(&now, 1, 100, "main", "infer", "extra", "crc32", END);
  stack(&now, 0, 500, "main", "prep", "extra", END); /* Another stage's: never counted. */
  em_growth_fn_t out[8];
  int n = em_growth_grown(g, &now.p, "infer", &base, out, 8);
  /* extra and crc32 from 0 % to 50 %; main and infer stay at 100 %; run_model and draw fell. */
  assert_int_equal(n, 2);
  assert_named(out, 0, "crc32", 50.0); /* Equal growth: by name. */
  assert_named(out, 1, "extra", 50.0);
}

static void shares_are_inclusive_once_per_stack_and_by_name(void **state) {
  em_growth_t *g = *state;
  built_t now;
  em_growth_base_t base;
  nominal_base(g, &base);
  build_init(&now);
  stack(&now, 1, 60, "main", "infer", "run_model", END);
  /* 40 samples in a recursion of walk: counted once (40 %, not 80 %). */
  stack(&now, 1, 40, "main", "infer", "walk", "walk", END);
  em_growth_fn_t out[8];
  assert_int_equal(em_growth_grown(g, &now.p, "infer", &base, out, 8), 1);
  assert_named(out, 0, "walk", 40.0);
  /* The same function at two lines (two frames, one name) is one function: 30 + 30 %. */
  build_init(&now);
  stack(&now, 1, 40, "main", "infer", "run_model", END);
  now.paths[1][0] = frame(&now, "main", NULL);
  now.paths[1][1] = frame(&now, "infer", NULL);
  now.paths[1][2] = frame(&now, "tile", "model.py:10");
  now.stacks[1] =
      (em_profile_stack_t){.frames = now.paths[1], .n_frames = 3, .samples = 30, .stage = 1};
  now.paths[2][0] = now.paths[1][0];
  now.paths[2][1] = now.paths[1][1];
  now.paths[2][2] = frame(&now, "tile", "model.py:11");
  now.stacks[2] =
      (em_profile_stack_t){.frames = now.paths[2], .n_frames = 3, .samples = 30, .stage = 1};
  now.p.n_stacks = 3;
  assert_int_equal(em_growth_grown(g, &now.p, "infer", &base, out, 8), 1);
  assert_named(out, 0, "tile", 60.0);
}

static void python_shares_are_of_the_samples_with_python_frames(void **state) {
  em_growth_t *g = *state;
  /* The baseline: the client's Python frames on half the samples, the eval loop on the rest. */
  built_t then, now;
  build_init(&then);
  stack(&then, 1, 50, "_start", "main", "run_model", END);
  stack(&then, 1, 50, "_start", "_PyEval_EvalFrameDefault", END);
  em_growth_base_t base;
  assert_int_equal(em_growth_baseline(g, &then.p, &base), 1);
  /* The breach: Python frames on every sample, the same work; then a new function on 40 %. */
  build_init(&now);
  stack(&now, 1, 100, "_start", "main", "run_model", END);
  em_growth_fn_t out[8];
  assert_int_equal(em_growth_grown(g, &now.p, "infer", &base, out, 8), 0);
  build_init(&now);
  stack(&now, 1, 60, "_start", "main", "run_model", END);
  stack(&now, 1, 40, "_start", "main", "extra", "_crc32", END);
  assert_int_equal(em_growth_grown(g, &now.p, "infer", &base, out, 8), 2);
  assert_named(out, 0, "_crc32", 40.0); /* A native frame: of all the stage's samples. */
  assert_named(out, 1, "extra", 40.0);
}

static void few_samples_or_small_growth_name_nothing(void **state) {
  em_growth_t *g = *state;
  built_t then, now;
  em_growth_fn_t out[8];
  /* A baseline stage with fewer than EM_GROWTH_MIN_SAMPLES samples is not kept. */
  build_init(&then);
  stack(&then, 1, EM_GROWTH_MIN_SAMPLES - 1, "main", "infer", "run_model", END);
  em_growth_base_t base;
  assert_int_equal(em_growth_baseline(g, &then.p, &base), 0);
  build_init(&now);
  stack(&now, 1, 100, "main", "infer", "extra", END);
  assert_int_equal(em_growth_grown(g, &now.p, "infer", &base, out, 8), 0);
  /* A breach stage with too few samples names nothing either. */
  nominal(&then);
  assert_int_equal(em_growth_baseline(g, &then.p, &base), 2);
  build_init(&now);
  stack(&now, 1, EM_GROWTH_MIN_SAMPLES - 1, "main", "infer", "extra", END);
  assert_int_equal(em_growth_grown(g, &now.p, "infer", &base, out, 8), 0);
  /* A stage the baseline does not have, or the profile does not have: nothing. */
  assert_int_equal(em_growth_grown(g, &then.p, "post", &base, out, 8), 0);
  /* Growth under EM_GROWTH_MIN_POINTS (draw 20 % -> 22 %) is not named. */
  build_init(&now);
  stack(&now, 1, 78, "main", "infer", "run_model", END);
  stack(&now, 1, 22, "main", "infer", "draw", END);
  assert_int_equal(em_growth_grown(g, &now.p, "infer", &base, out, 8), 0);
  /* Just past it (20 % -> 24 %): named, with 4 points. */
  build_init(&now);
  stack(&now, 1, 76, "main", "infer", "run_model", END);
  stack(&now, 1, 24, "main", "infer", "draw", END);
  assert_int_equal(em_growth_grown(g, &now.p, "infer", &base, out, 8), 1);
  assert_named(out, 0, "draw", 4.0);
}

static void the_list_is_ranked_and_cut_at_its_maximum(void **state) {
  em_growth_t *g = *state;
  built_t now;
  em_growth_base_t base;
  nominal_base(g, &base);
  build_init(&now);
  static const char *const fns[] = {"f1", "f2", "f3", "f4", "f5"};
  for (uint64_t i = 0; i < 5; i++) {
    stack(&now, 1, 10 * (i + 1), "main", "infer", fns[i], END); /* 10..50 of 150 */
  }
  em_growth_fn_t out[3];
  assert_int_equal(em_growth_grown(g, &now.p, "infer", &base, out, 3), 3);
  assert_named(out, 0, "f5", 100.0 * 50 / 150);
  assert_named(out, 1, "f4", 100.0 * 40 / 150);
  assert_named(out, 2, "f3", 100.0 * 30 / 150);
  assert_int_equal(em_growth_grown(g, &now.p, "infer", &base, out, 0), 0);
  assert_int_equal(em_growth_grown(NULL, &now.p, "infer", &base, out, 3), -EINVAL);
}

static void the_baseline_keeps_the_busiest_stages_and_largest_shares(void **state) {
  em_growth_t *g = *state;
  built_t b;
  build_init(&b);
  stack(&b, 0, 30, "main", "prep", END);
  stack(&b, 1, 300, "main", "infer", "run_model", END);
  /* 40 more functions of 1 sample each under infer: only the EM_GROWTH_TOP largest stay. */
  char names[40][8];
  for (int i = 0; i < 40; i++) {
    snprintf(names[i], sizeof(names[i]), "g%02d", i);
    stack(&b, 1, 1, "main", "infer", names[i], END);
    if (b.p.n_stacks == MAX_STACKS) {
      break;
    }
  }
  em_growth_base_t base;
  assert_int_equal(em_growth_baseline(g, &b.p, &base), 2);
  assert_string_equal(base.stages[0].stage, "infer");
  assert_string_equal(base.stages[1].stage, "pre");
  assert_int_equal(base.stages[1].samples, 30);
  const em_growth_stage_t *infer = &base.stages[0];
  assert_int_equal(infer->samples, 300 + (MAX_STACKS - 2));
  assert_int_equal(infer->n_fns,
                   MAX_STACKS - 2 + 3 < EM_GROWTH_TOP ? MAX_STACKS - 2 + 3 : EM_GROWTH_TOP);
  assert_true(fabs(infer->fns[0].value - 1.0) < 1e-9); /* main and infer: whole. */
  assert_true(fabs(infer->fns[1].value - 1.0) < 1e-9);
  assert_string_equal(infer->fns[2].name, "run_model");
  for (size_t i = 1; i < infer->n_fns; i++) {
    assert_true(infer->fns[i - 1].value >= infer->fns[i].value);
  }
  /* A stage whose profile has fewer samples than the minimum is not kept. */
  build_init(&b);
  stack(&b, 0, EM_GROWTH_MIN_SAMPLES, "main", "prep", END);
  stack(&b, 1, EM_GROWTH_MIN_SAMPLES - 1, "main", "infer", END);
  assert_int_equal(em_growth_baseline(g, &b.p, &base), 1);
  assert_string_equal(base.stages[0].stage, "pre");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(growth_names_the_new_function_and_not_its_callers, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(shares_are_inclusive_once_per_stack_and_by_name, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(python_shares_are_of_the_samples_with_python_frames, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(few_samples_or_small_growth_name_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(the_list_is_ranked_and_cut_at_its_maximum, setup, teardown),
      cmocka_unit_test_setup_teardown(the_baseline_keeps_the_busiest_stages_and_largest_shares,
                                      setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
