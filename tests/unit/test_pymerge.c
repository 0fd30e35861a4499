/*
 * test_pymerge.c - unit tests of firmware/agent/profile/pymerge.c: keeping the client's Python
 * stacks datagram for the right window only, and splicing its frames into hand-built native
 * stacks (frame indices into a small table the test owns): the nearest Python sample of the
 * same thread within the allowed gap, the interpreter run from the first to the last eval-loop
 * frame replaced, what is above and below kept, Python frames above a native stack with no
 * eval-loop frame, the reasons a sample keeps its native frames, the root side cut at
 * EM_PROFILE_MAX_DEPTH, and a ~1 ms stage given the client's span sample inside it over a nearer
 * sample outside it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "pymerge.h"

/* The test's frame table: natives 0..5 first, Python frames appended by prepare. */
enum { MAIN, RUNMAIN, EVAL, VECTOR, CRC32, MEMCPY, N_NATIVE };
static const char *const native_names[N_NATIVE] = {
    "main", "Py_RunMain", "_PyEval_EvalFrameDefault", "_PyFunction_Vectorcall", "crc32", "memcpy"};

typedef struct {
  em_profile_frame_t frames[64];
  uint32_t n;
  uint32_t cap; /* Frames it accepts, for the full-table case. */
} table_t;

static uint32_t add_frame(void *ctx, const em_profile_frame_t *f) {
  table_t *t = ctx;
  if (t->n >= t->cap) {
    return UINT32_MAX;
  }
  t->frames[t->n] = *f;
  return t->n++;
}

static bool is_interp(void *ctx, uint32_t f) {
  table_t *t = ctx;
  return f < t->n && strcmp(t->frames[f].name, "_PyEval_EvalFrameDefault") == 0;
}

static void table_init(table_t *t, uint32_t cap) {
  memset(t, 0, sizeof(*t));
  t->cap = cap;
  for (uint32_t i = 0; i < N_NATIVE; i++) {
    t->frames[t->n++] = (em_profile_frame_t){.name = native_names[i], .kind = EM_FRAME_NATIVE};
  }
}

static const char *const strings[] = {"<module> (/app/serve.py:40)", "main (/app/serve.py:31)",
                                      "Model.infer (/app/model.py:12)",
                                      "slow_checksum (/app/model.py:5)", "odd text"};

/* Two threads: 100 sampled at 1.00 s and 1.01 s, 200 at 1.00 s. */
static size_t make_dgram(uint8_t *buf, size_t cap, uint32_t window) {
  const em_pysample_t samples[] = {
      {.tid = 100, .time_ns = 1000000000ull, .depth = 4, .frames = {0, 1, 2, 3}},
      {.tid = 100, .time_ns = 1010000000ull, .depth = 3, .frames = {0, 1, 2}},
      {.tid = 200, .time_ns = 1000000000ull, .depth = 2, .frames = {0, 4}},
  };
  size_t len = 0;
  assert_int_equal(em_pystacks_pack(100, window, 2, strings, 5, samples, 3, buf, cap, &len), 0);
  return len;
}

/* A merger holding window 7's datagram (make_dgram()), prepared into t, a table of `cap`. */
static em_pymerge_t *held_merger(table_t *t, uint32_t cap) {
  table_init(t, cap);
  em_pymerge_t *m = NULL;
  assert_int_equal(em_pymerge_new(&m), 0);
  uint8_t buf[1024];
  size_t len = make_dgram(buf, sizeof buf, 7);
  assert_int_equal(em_pymerge_take(m, buf, len, 7), 0);
  em_pymerge_prepare(m, add_frame, t);
  return m;
}

/* Frame index of the Python frame named `name` in t, or UINT32_MAX. */
static uint32_t py(const table_t *t, const char *name) {
  for (uint32_t i = N_NATIVE; i < t->n; i++) {
    if (strcmp(t->frames[i].name, name) == 0) {
      return i;
    }
  }
  return UINT32_MAX;
}

static void take_keeps_only_the_windows_valid_datagram(void **state) {
  (void)state;
  em_pymerge_t *m = NULL;
  assert_int_equal(em_pymerge_new(&m), 0);
  uint8_t buf[1024];
  size_t len = make_dgram(buf, sizeof buf, 7);
  assert_int_equal(em_pymerge_take(m, buf, len, 8), -ESTALE);
  assert_false(em_pymerge_held(m));
  buf[3] = 7; /* Kind 7: not a Python stacks datagram. */
  assert_int_equal(em_pymerge_take(m, buf, len, 7), EM_PROTO_EKIND);
  buf[3] = EM_DGRAM_PYSTACKS;
  assert_int_equal(em_pymerge_take(m, buf, len - 1, 7), EM_PROTO_ESIZE);
  assert_false(em_pymerge_held(m));
  assert_int_equal(em_pymerge_take(m, buf, len, 7), 0);
  assert_true(em_pymerge_held(m));
  assert_int_equal(em_pymerge_samples(m), 3);
  assert_int_equal(em_pymerge_client_cut(m), 2);
  assert_int_equal(em_pymerge_take(m, buf, len, 7), -EALREADY);
  em_pymerge_reset(m);
  assert_false(em_pymerge_held(m));
  assert_int_equal(em_pymerge_samples(m), 0);
  em_pymerge_free(m);
}

/* A splice allowed 20 ms either side of the sample, as the agent's at 99 Hz. */
static size_t splice(const em_pymerge_t *m, uint32_t tid, uint64_t t, const uint32_t *path,
                     size_t n, em_pymerge_interp_fn interp, void *ctx, uint32_t *out,
                     em_pymerge_why_t *why) {
  return em_pymerge_splice(m, tid, t, t - 20000000ull, t + 20000000ull, path, n, interp, NULL, ctx,
                           out, why);
}

static void prepare_splits_function_and_file_line(void **state) {
  (void)state;
  table_t t;
  em_pymerge_t *m = held_merger(&t, 64);
  assert_int_equal(t.n, N_NATIVE + 5);
  uint32_t f = py(&t, "slow_checksum");
  assert_int_not_equal(f, UINT32_MAX);
  assert_string_equal(t.frames[f].module, "/app/model.py:5");
  assert_int_equal(t.frames[f].kind, EM_FRAME_PYTHON);
  assert_string_equal(t.frames[py(&t, "Model.infer")].module, "/app/model.py:12");
  assert_null(t.frames[py(&t, "odd text")].module);
  em_pymerge_free(m);
}

static void splice_replaces_the_interpreter_run_keeping_above_and_below(void **state) {
  (void)state;
  table_t t;
  em_pymerge_t *m = held_merger(&t, 64);
  /* main;Py_RunMain;eval;vector;eval;vector;eval;crc32;memcpy */
  const uint32_t path[] = {MAIN, RUNMAIN, EVAL, VECTOR, EVAL, VECTOR, EVAL, CRC32, MEMCPY};
  uint32_t out[EM_PROFILE_MAX_DEPTH];
  em_pymerge_why_t why = EM_PYMERGE_NO_FRAME;
  /* 1.003 s: nearest of thread 100 is the 1.00 s sample (4 frames), within 20 ms. */
  size_t n = splice(m, 100, 1003000000ull, path, 9, is_interp, &t, out, &why);
  assert_int_equal(why, EM_PYMERGE_SPLICED);
  const uint32_t want[] = {MAIN,
                           RUNMAIN,
                           py(&t, "<module>"),
                           py(&t, "main"),
                           py(&t, "Model.infer"),
                           py(&t, "slow_checksum"),
                           CRC32,
                           MEMCPY};
  assert_int_equal(n, 8);
  assert_memory_equal(out, want, sizeof want);
  /* 1.008 s: the 1.01 s sample is nearer (3 frames, no slow_checksum). */
  n = splice(m, 100, 1008000000ull, path, 9, is_interp, &t, out, &why);
  assert_int_equal(n, 7);
  assert_int_equal(out[4], py(&t, "Model.infer"));
  assert_int_equal(out[5], CRC32);
  em_pymerge_free(m);
}

static void splice_keeps_native_frames_or_puts_python_above_and_says_why(void **state) {
  (void)state;
  table_t t;
  em_pymerge_t *m = held_merger(&t, 64);
  const uint32_t path[] = {MAIN, EVAL, CRC32};
  const uint32_t no_interp[] = {MAIN, CRC32};
  uint32_t out[EM_PROFILE_MAX_DEPTH] = {0};
  em_pymerge_why_t why = EM_PYMERGE_SPLICED;
  /* Another thread: no Python sample of 300. */
  assert_int_equal(splice(m, 300, 1000000000ull, path, 3, is_interp, &t, out, &why), 0);
  assert_int_equal(why, EM_PYMERGE_NO_SAMPLE);
  /* Thread 100 but 21 ms after its last sample: beyond the gap. */
  assert_int_equal(splice(m, 100, 1031000001ull, path, 3, is_interp, &t, out, &why), 0);
  assert_int_equal(why, EM_PYMERGE_NO_SAMPLE);
  /* Before every sample of thread 200, and exactly at the gap: matched. */
  assert_int_equal(splice(m, 200, 980000000ull, path, 3, is_interp, &t, out, &why), 4);
  assert_int_equal(why, EM_PYMERGE_SPLICED);
  /* No eval-loop frame in the native stack: the Python frames go above it. */
  assert_int_equal(splice(m, 100, 1000000000ull, no_interp, 2, is_interp, &t, out, &why), 6);
  assert_int_equal(why, EM_PYMERGE_ABOVE);
  assert_int_equal(out[0], py(&t, "<module>"));
  assert_int_equal(out[3], py(&t, "slow_checksum"));
  assert_int_equal(out[4], MAIN);
  assert_int_equal(out[5], CRC32);
  em_pymerge_reset(m);
  assert_int_equal(splice(m, 100, 1000000000ull, path, 3, is_interp, &t, out, &why), 0);
  assert_int_equal(why, EM_PYMERGE_NO_SAMPLE);
  em_pymerge_free(m);
}

static void splice_refuses_when_a_python_frame_found_no_room(void **state) {
  (void)state;
  table_t t;
  em_pymerge_t *m = held_merger(&t, N_NATIVE + 2); /* Room for <module> and main only. */
  const uint32_t path[] = {MAIN, EVAL, CRC32};
  uint32_t out[EM_PROFILE_MAX_DEPTH];
  em_pymerge_why_t why = EM_PYMERGE_SPLICED;
  assert_int_equal(splice(m, 100, 1000000000ull, path, 3, is_interp, &t, out, &why), 0);
  assert_int_equal(why, EM_PYMERGE_NO_FRAME);
  /* Thread 200's sample uses <module> and "odd text": the latter found no room either. */
  assert_int_equal(splice(m, 200, 1000000000ull, path, 3, is_interp, &t, out, &why), 0);
  em_pymerge_free(m);
}

static void splice_cuts_the_root_side_past_max_depth(void **state) {
  (void)state;
  table_t t;
  em_pymerge_t *m = held_merger(&t, 64);
  /* 254 frames above the interpreter, then eval, then crc32: 254 + 4 + 1 = 259 frames. */
  uint32_t path[EM_PROFILE_MAX_DEPTH];
  for (size_t i = 0; i < 254; i++) {
    path[i] = MAIN;
  }
  path[254] = EVAL;
  path[255] = CRC32;
  uint32_t out[EM_PROFILE_MAX_DEPTH];
  size_t n = em_pymerge_splice(m, 100, 1000000000ull, 999999999ull, 1000000001ull, path, 256,
                               is_interp, NULL, &t, out, NULL);
  assert_int_equal(n, EM_PROFILE_MAX_DEPTH);
  assert_int_equal(out[n - 1], CRC32);
  assert_int_equal(out[n - 2], py(&t, "slow_checksum"));
  assert_int_equal(out[n - 5], py(&t, "<module>"));
  assert_int_equal(out[0], MAIN);
  em_pymerge_free(m);
}

/* An accept() that refuses the Python samples taken before 1.005 s (another stage, say). */
static bool from_1005(void *ctx, uint64_t time_ns) {
  (void)ctx;
  return time_ns >= 1005000000ull;
}

static bool none(void *ctx, uint64_t time_ns) {
  (void)ctx;
  (void)time_ns;
  return false;
}

static void splice_takes_the_nearest_python_sample_accept_takes(void **state) {
  (void)state;
  table_t t;
  em_pymerge_t *m = held_merger(&t, 64);
  const uint32_t path[] = {MAIN, EVAL, CRC32};
  uint32_t out[EM_PROFILE_MAX_DEPTH];
  em_pymerge_why_t why = EM_PYMERGE_NO_FRAME;
  /* 1.004 s: the 1.00 s sample (4 frames) is nearer, but accept refuses it: the 1.01 s one (3
   * frames, so main + 3 + crc32). */
  assert_int_equal(em_pymerge_splice(m, 100, 1004000000ull, 984000000ull, 1024000000ull, path, 3,
                                     is_interp, from_1005, &t, out, &why),
                   5);
  assert_int_equal(why, EM_PYMERGE_SPLICED);
  /* Within bounds ending before 1.01 s, only the refused one: none is taken. */
  assert_int_equal(em_pymerge_splice(m, 100, 1004000000ull, 984000000ull, 1008000000ull, path, 3,
                                     is_interp, from_1005, &t, out, &why),
                   0);
  assert_int_equal(why, EM_PYMERGE_NO_SAMPLE);
  /* Nothing accepted: none. */
  assert_int_equal(em_pymerge_splice(m, 100, 1004000000ull, 984000000ull, 1024000000ull, path, 3,
                                     is_interp, none, &t, out, &why),
                   0);
  assert_int_equal(why, EM_PYMERGE_NO_SAMPLE);
  em_pymerge_free(m);
}

/* The stage [2.000 s, 2.001 s] of thread 300 (a ~1 ms span), as same_stage in window.c. */
static bool in_stage(void *ctx, uint64_t time_ns) {
  (void)ctx;
  return time_ns >= 2000000000ull && time_ns <= 2001000000ull;
}

/* The splice of thread 300's native sample at 2.0009 s, late in the stage, with the Python
 * samples of window 9 holding `samples` (frames into strings), prepared into a fresh t. The
 * frames' names in t belong to *merge, which the caller frees after reading them. */
static size_t splice_late_in_stage(const em_pysample_t *samples, uint32_t n, table_t *t,
                                   uint32_t *out, em_pymerge_why_t *why, em_pymerge_t **merge) {
  uint8_t buf[1024];
  size_t len = 0;
  assert_int_equal(em_pystacks_pack(100, 9, 0, strings, 5, samples, n, buf, sizeof buf, &len), 0);
  table_init(t, 64);
  em_pymerge_t *m = NULL;
  assert_int_equal(em_pymerge_new(&m), 0);
  assert_int_equal(em_pymerge_take(m, buf, len, 9), 0);
  em_pymerge_prepare(m, add_frame, t);
  const uint32_t path[] = {MAIN, EVAL, CRC32};
  size_t k = em_pymerge_splice(m, 300, 2000900000ull, 1980900000ull, 2020900000ull, path, 3,
                               is_interp, in_stage, t, out, why);
  *merge = m;
  return k;
}

static void splice_of_a_short_stage_takes_its_span_sample_over_a_nearer_one_outside(void **state) {
  (void)state;
  /* Thread 300: the client's span sample 0.1 ms into the stage (<module>;main;Model.infer,
   * the stage's function) and its 99 Hz sample 0.3 ms after the stage (<module>;main). */
  const em_pysample_t samples[] = {
      {.tid = 300, .time_ns = 2000100000ull, .depth = 3, .frames = {0, 1, 2}},
      {.tid = 300, .time_ns = 2001300000ull, .depth = 2, .frames = {0, 1}},
  };
  table_t t;
  uint32_t out[EM_PROFILE_MAX_DEPTH];
  em_pymerge_why_t why = EM_PYMERGE_NO_SAMPLE;
  /* The sample outside the stage is nearer (0.4 ms against 0.8 ms) but names code the thread
   * was not running: the span sample is taken, the stage's function named. */
  em_pymerge_t *m = NULL;
  assert_int_equal(splice_late_in_stage(samples, 2, &t, out, &why, &m), 5);
  assert_int_equal(why, EM_PYMERGE_SPLICED);
  const uint32_t want[] = {MAIN, py(&t, "<module>"), py(&t, "main"), py(&t, "Model.infer"), CRC32};
  assert_memory_equal(out, want, sizeof want);
  em_pymerge_free(m);
  /* Without the span sample (the client's 99 Hz samples only) the stage has none. */
  why = EM_PYMERGE_SPLICED;
  assert_int_equal(splice_late_in_stage(samples + 1, 1, &t, out, &why, &m), 0);
  assert_int_equal(why, EM_PYMERGE_NO_SAMPLE);
  em_pymerge_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(splice_takes_the_nearest_python_sample_accept_takes),
      cmocka_unit_test(splice_of_a_short_stage_takes_its_span_sample_over_a_nearer_one_outside),
      cmocka_unit_test(take_keeps_only_the_windows_valid_datagram),
      cmocka_unit_test(prepare_splits_function_and_file_line),
      cmocka_unit_test(splice_replaces_the_interpreter_run_keeping_above_and_below),
      cmocka_unit_test(splice_keeps_native_frames_or_puts_python_above_and_says_why),
      cmocka_unit_test(splice_refuses_when_a_python_frame_found_no_room),
      cmocka_unit_test(splice_cuts_the_root_side_past_max_depth),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
