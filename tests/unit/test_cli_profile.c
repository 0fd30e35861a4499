/*
 * test_cli_profile.c - the figures and outputs of edgemon-cli profile computed from a profile
 * built here (host/cli/profile/profile_stacks.c, profile_pprof.c, profile_svg.c): the hottest-stack
 * order, the by-function self and total samples (recursion counted once), the stack text cut
 * from the root side, the folded lines (stages merged, ';' in a name escaped), the flame
 * graph's rectangles (one per distinct prefix, widths proportional to samples), and the pprof
 * bytes read back field by field with the tests' own wire-format reader (pb_reader.c), and
 * C++ names made readable (host/lib/demangle.cpp): namespaces, templates and const methods
 * without their parameters, only native frames, what is no mangled name left alone.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demangle.h"
#include "pb_reader.h"
#include "profile_pprof.h"
#include "profile_stacks.h"
#include "profile_svg.h"

/* ---- The profile: a Python pipeline over native conv2d, one kernel leaf ---- */

enum { F_MAIN, F_RUN, F_INFER, F_FORWARD, F_EVAL, F_CONV, F_SYSCALL, F_SEMI, F_UNUSED, N_FRAMES };

static const em_profile_frame_t FRAMES[N_FRAMES] = {
    {"main", "model.py:10", EM_FRAME_PYTHON},
    {"run", "model.py:20", EM_FRAME_PYTHON},
    {"infer", "model.py:30", EM_FRAME_PYTHON},
    {"forward", "torch/nn/module.py:1501", EM_FRAME_PYTHON},
    {"_PyEval_EvalFrameDefault", "libpython3.11.so.1.0", EM_FRAME_NATIVE},
    {"at::native::conv2d", "libtorch_cpu.so", EM_FRAME_NATIVE},
    {"do_syscall_64", NULL, EM_FRAME_KERNEL},
    {"a;b", NULL, EM_FRAME_UNKNOWN},
    {"unused", NULL, EM_FRAME_NATIVE},
};

static const uint32_t S_A[] = {F_MAIN, F_RUN, F_INFER, F_FORWARD, F_EVAL, F_CONV};
static const uint32_t S_B[] = {F_MAIN, F_RUN, F_INFER, F_FORWARD, F_EVAL, F_CONV, F_SYSCALL};
static const uint32_t S_C[] = {F_MAIN, F_RUN, F_INFER, F_EVAL};
static const uint32_t S_E[] = {F_MAIN, F_SEMI, F_SEMI}; /* Recursion. */
static const uint32_t S_F[] = {F_MAIN, F_RUN};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const em_profile_stack_t STACKS[] = {
    {S_A, N(S_A), 50, 0, 0},
    {S_B, N(S_B), 20, 1000000, 0},
    {S_C, N(S_C), 15, 0, 1},
    {S_A, N(S_A), 10, 0, EM_PROFILE_NO_STAGE}, /* S_A again, no stage: merged when folded. */
    {S_E, N(S_E), 5, 0, EM_PROFILE_NO_STAGE},
    {S_F, N(S_F), 0, 3000000, EM_PROFILE_NO_STAGE}, /* Off-CPU only. */
};

static const char *const STAGES[] = {"infer", "pre"};
static const char *const NOTES[] = {"no kernel frames: perf_event_paranoid is 2"};

static em_profile_t profile(void) {
  em_profile_t p;
  memset(&p, 0, sizeof(p));
  p.head.time_ns = 1764051000123456789ull;
  p.head.session = 7;
  p.number = 3;
  p.trigger = (em_profile_trigger_t){EM_PROFILE_ESCALATION, EM_LEVEL_DEGRADED, EM_LEVEL_WARN,
                                     "infer_p99",           "infer",           "p99 over budget"};
  p.start_mono_ns = 5000000000ull;
  p.duration_ns = 2000000000ull;
  p.hz = 99;
  p.clock = "cpu-clock";
  p.samples = 110; /* 100 in the stacks, 10 cut. */
  p.lost = 2;
  p.stages = STAGES;
  p.n_stages = N(STAGES);
  p.frames = FRAMES;
  p.n_frames = N_FRAMES;
  p.stacks = STACKS;
  p.n_stacks = N(STACKS);
  p.notes = NOTES;
  p.n_notes = N(NOTES);
  p.truncated = (em_profile_truncation_t){2, 10};
  return p;
}

/* ---- Tables ---- */

static void total_is_samples_taken_or_the_stacks_sum(void **state) {
  (void)state;
  em_profile_t p = profile();
  assert_int_equal(em_profile_stacks_total(&p), 110);
  p.samples = 40; /* Fewer than the stacks hold: malformed, the sum wins. */
  assert_int_equal(em_profile_stacks_total(&p), 100);
}

static void hottest_orders_by_samples_then_off_cpu(void **state) {
  (void)state;
  static const em_profile_stack_t tie[] = {
      {S_C, N(S_C), 5, 0, 0}, {S_A, N(S_A), 7, 0, 0}, {S_B, N(S_B), 5, 9, 0}};
  em_profile_t p = profile();
  size_t *o = NULL;
  assert_int_equal(em_profile_hottest(&p, &o), 0);
  static const size_t want[] = {0, 1, 2, 3, 4, 5};
  assert_memory_equal(o, want, sizeof(want));
  free(o);
  p.stacks = tie;
  p.n_stacks = N(tie);
  assert_int_equal(em_profile_hottest(&p, &o), 0);
  assert_int_equal(o[0], 1);
  assert_int_equal(o[1], 2); /* Same samples, more off-CPU time first. */
  assert_int_equal(o[2], 0);
  free(o);
}

static void functions_count_self_at_the_leaf_and_total_once_per_stack(void **state) {
  (void)state;
  em_profile_t p = profile();
  em_profile_func_t *f = NULL;
  size_t n = 0;
  assert_int_equal(em_profile_functions(&p, &f, &n), 0);
  assert_int_equal(n, N_FRAMES - 1); /* "unused" is in no stack. */
  static const struct {
    uint32_t frame;
    uint64_t self, total, off;
  } want[] = {
      {F_CONV, 60, 80, 0}, {F_SYSCALL, 20, 20, 1000000}, {F_EVAL, 15, 95, 0}, {F_SEMI, 5, 5, 0},
      {F_MAIN, 0, 100, 0}, {F_RUN, 0, 95, 3000000},      {F_INFER, 0, 95, 0}, {F_FORWARD, 0, 80, 0},
  };
  for (size_t i = 0; i < N(want); i++) {
    assert_int_equal(f[i].frame, want[i].frame);
    assert_int_equal(f[i].self, want[i].self);
    assert_int_equal(f[i].total, want[i].total);
    assert_int_equal(f[i].off_cpu_ns, want[i].off);
  }
  free(f);
}

static void stack_text_is_cut_from_the_root_side(void **state) {
  (void)state;
  em_profile_t p = profile();
  char buf[256];
  em_profile_stack_text(&p, &STACKS[0], 0, buf, sizeof(buf));
  assert_string_equal(buf, "main;run;infer;forward;_PyEval_EvalFrameDefault;at::native::conv2d");
  em_profile_stack_text(&p, &STACKS[0], 30, buf, sizeof(buf));
  assert_string_equal(buf, "...;at::native::conv2d");
  em_profile_stack_text(&p, &STACKS[0], 47, buf, sizeof(buf));
  assert_string_equal(buf, "...;_PyEval_EvalFrameDefault;at::native::conv2d");
  em_profile_stack_text(&p, &STACKS[0], 10, buf, sizeof(buf));
  assert_string_equal(buf, "~e::conv2d");
  em_profile_stack_text(&p, &STACKS[4], 0, buf, sizeof(buf));
  assert_string_equal(buf, "main;a:b;a:b");
  em_profile_stack_text(&p, &STACKS[0], 0, buf, 12); /* The buffer bounds it too. */
  assert_true(strlen(buf) <= 11);
}

/* ---- Folded ---- */

static char *capture(int (*write)(FILE *, const em_profile_t *), const em_profile_t *p, int *rc) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_non_null(f);
  *rc = write(f, p);
  assert_int_equal(fclose(f), 0);
  return text;
}

static void folded_merges_stages_and_skips_off_cpu_only(void **state) {
  (void)state;
  em_profile_t p = profile();
  int rc = -1;
  char *text = capture(em_profile_folded, &p, &rc);
  assert_int_equal(rc, 0);
  assert_string_equal(
      text, "main;a:b;a:b 5\n"
            "main;run;infer;_PyEval_EvalFrameDefault 15\n"
            "main;run;infer;forward;_PyEval_EvalFrameDefault;at::native::conv2d 60\n"
            "main;run;infer;forward;_PyEval_EvalFrameDefault;at::native::conv2d;do_syscall_64 "
            "20\n");
  free(text);
}

static void tree_has_one_node_per_distinct_prefix(void **state) {
  (void)state;
  em_profile_t p = profile();
  em_profile_tree_t t;
  assert_int_equal(em_profile_tree(&p, &t), 0);
  assert_int_equal(t.n, 11); /* The root and 10 distinct prefixes. */
  assert_int_equal(t.v[0].samples, 100);
  assert_int_equal(t.max_depth, 7);
  uint64_t self = 0;
  for (size_t i = 1; i < t.n; i++) {
    self += t.v[i].self;
    uint64_t below = 0; /* Children tile their parent from its left edge. */
    uint64_t x = t.v[i].x;
    for (uint32_t c = t.v[i].first_child; c != 0; c = t.v[c].next_sibling) {
      assert_int_equal(t.v[c].x, x);
      x += t.v[c].samples;
      below += t.v[c].samples;
    }
    assert_int_equal(below + t.v[i].self, t.v[i].samples);
  }
  assert_int_equal(self, 100);
  em_profile_tree_free(&t);
}

/* ---- SVG ---- */

static int svg(FILE *out, const em_profile_t *p) {
  return em_profile_svg(out, p, "dev-1 7-3 <&>");
}

/* Counts the frame rectangles of an SVG and checks each one's width against its title's
 * samples (100 drawn in all). */
__attribute__((noinline)) static void count_rects(const char *text, size_t *rects, size_t *kernel,
                                                  size_t *python) {
  double span = EM_PROFILE_SVG_WIDTH - 2 * EM_PROFILE_SVG_MARGIN;
  for (const char *r = strstr(text, "<rect class=\"f "); r; r = strstr(r + 1, "<rect class=\"f ")) {
    (*rects)++;
    *kernel += strncmp(r, "<rect class=\"f kernel\"", 22) == 0;
    *python += strncmp(r, "<rect class=\"f python\"", 22) == 0;
    const char *w = strstr(r, "width=\"");
    const char *title = strstr(r, "<title>");
    const char *end = strstr(r, "</rect>");
    assert_true(w && title && end && title < end);
    const char *s = strstr(title, " samples,");
    assert_true(s && s < end);
    const char *num = s;
    while (num > title && num[-1] >= '0' && num[-1] <= '9') {
      num--;
    }
    double samples = strtod(num, NULL);
    double width = strtod(w + 7, NULL);
    assert_true(fabs(width - samples / 100.0 * span) < 0.01);
  }
}

static void svg_draws_a_rect_per_prefix_with_widths_in_proportion(void **state) {
  (void)state;
  em_profile_t p = profile();
  int rc = -1;
  char *text = capture(svg, &p, &rc);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(text, "dev-1 7-3 &lt;&amp;&gt;"));
  assert_non_null(strstr(text, "escalation, DEGRADED, rule infer_p99"));
  assert_non_null(strstr(text, "100 samples</text>"));
  assert_null(strstr(text, "http://www.w3.org/2000/svg\" href")); /* Nothing fetched. */
  assert_null(strstr(text, "xlink:href"));
  size_t rects = 0, kernel = 0, python = 0;
  count_rects(text, &rects, &kernel, &python);
  assert_int_equal(rects, 10);
  assert_int_equal(kernel, 1);
  assert_int_equal(python, 4);
  assert_non_null(strstr(text, "<title>do_syscall_64 \xe2\x80\x94 kernel, 20 samples, 20.00%"));
  assert_non_null(strstr(text, "<title>main (model.py:10) \xe2\x80\x94 python, 100 samples, "
                               "100.00%"));
  free(text);
}

/* ---- pprof ---- */

typedef struct {
  const char *s[64];
  size_t n;
} strings_t;

static const char *str(const strings_t *t, uint64_t i) {
  assert_true(i < t->n);
  return t->s[i];
}

static char *dup_str(const fld_t *f) {
  size_t n = (size_t)(f->sub.end - f->sub.p);
  char *s = malloc(n + 1);
  assert_non_null(s);
  memcpy(s, f->sub.p, n);
  s[n] = '\0';
  return s;
}

static void pprof_reads_back_as_the_profile(void **state) {
  (void)state;
  em_profile_t p = profile();
  em_pb_t pb;
  assert_int_equal(em_pb_init(&pb, 1 << 20), 0);
  assert_int_equal(em_profile_pprof(&pb, &p, NULL), 0);
  size_t len = 0;
  const uint8_t *data = em_pb_data(&pb, &len);

  /* First pass: the string table (field 6), so indices can be checked. */
  strings_t t = {0};
  rd_t r = {data, data + len};
  fld_t f;
  while (rd_next(&r, &f)) {
    if (f.field == 6) {
      assert_true(t.n < 64);
      t.s[t.n++] = dup_str(&f);
    }
  }
  assert_true(t.n > 0);
  assert_string_equal(t.s[0], "");

  size_t types = 0, samples = 0, functions = 0, locations = 0, comments = 0;
  uint64_t period = 0, default_type = 0;
  bool truncation = false, note = false;
  r = (rd_t){data, data + len};
  static const char *const want_types[3][2] = {
      {"samples", "count"}, {"cpu", "nanoseconds"}, {"off_cpu", "nanoseconds"}};
  while (rd_next(&r, &f)) {
    fld_t g;
    rd_t m = f.sub;
    switch (f.field) {
    case 1: /* sample_type */
      assert_true(types < 3);
      assert_true(rd_next(&m, &g) && g.field == 1);
      assert_string_equal(str(&t, g.u), want_types[types][0]);
      assert_true(rd_next(&m, &g) && g.field == 2);
      assert_string_equal(str(&t, g.u), want_types[types][1]);
      types++;
      break;
    case 2: { /* sample */
      const em_profile_stack_t *s = &STACKS[samples];
      size_t locs = 0, values = 0, labels = 0;
      int64_t v[3] = {0};
      while (rd_next(&m, &g)) {
        if (g.field == 1) { /* Leaf first. */
          assert_true(locs < s->n_frames);
          assert_int_equal(g.u, s->frames[s->n_frames - 1 - locs] + 1);
          locs++;
        } else if (g.field == 2) {
          assert_true(values < 3);
          v[values++] = (int64_t)g.u;
        } else if (g.field == 3) {
          rd_t l = g.sub;
          fld_t h;
          assert_true(rd_next(&l, &h) && h.field == 1);
          assert_string_equal(str(&t, h.u), "stage");
          assert_true(rd_next(&l, &h) && h.field == 2);
          assert_string_equal(str(&t, h.u), STAGES[s->stage]);
          labels++;
        }
      }
      assert_int_equal(locs, s->n_frames);
      assert_int_equal(values, 3);
      assert_int_equal(v[0], s->samples);
      assert_int_equal(v[1], s->samples * 10101010u); /* round(1e9 / 99) */
      assert_int_equal(v[2], s->off_cpu_ns);
      assert_int_equal(labels, s->stage == EM_PROFILE_NO_STAGE ? 0 : 1);
      samples++;
      break;
    }
    case 4: { /* location */
      uint64_t id = 0, fn = 0;
      int64_t line = 0;
      while (rd_next(&m, &g)) {
        if (g.field == 1) {
          id = g.u;
        } else if (g.field == 4) {
          rd_t l = g.sub;
          fld_t h;
          while (rd_next(&l, &h)) {
            fn = h.field == 1 ? h.u : fn;
            line = h.field == 2 ? (int64_t)h.u : line;
          }
        }
      }
      assert_int_equal(id, locations + 1);
      assert_int_equal(fn, id);
      assert_int_equal(line, id == F_FORWARD + 1 ? 1501 : id == F_MAIN + 1 ? 10 : line);
      if (id == F_CONV + 1 || id == F_SYSCALL + 1) {
        assert_int_equal(line, 0);
      }
      locations++;
      break;
    }
    case 5: { /* function */
      uint64_t id = 0, name = 0, sys = 0, file = 0;
      while (rd_next(&m, &g)) {
        id = g.field == 1 ? g.u : id;
        name = g.field == 2 ? g.u : name;
        sys = g.field == 3 ? g.u : sys;
        file = g.field == 4 ? g.u : file;
      }
      assert_int_equal(id, functions + 1);
      assert_string_equal(str(&t, name), FRAMES[functions].name);
      assert_string_equal(str(&t, sys), FRAMES[functions].name);
      const char *want = functions == F_MAIN      ? "model.py"
                         : functions == F_FORWARD ? "torch/nn/module.py"
                         : functions == F_CONV    ? "libtorch_cpu.so"
                         : functions == F_SYSCALL ? "[kernel]"
                         : functions == F_SEMI    ? ""
                                                  : NULL;
      if (want) {
        assert_string_equal(str(&t, file), want);
      }
      functions++;
      break;
    }
    case 9:
      assert_int_equal(f.u, p.head.time_ns);
      break;
    case 10:
      assert_int_equal(f.u, p.duration_ns);
      break;
    case 11:
      assert_true(rd_next(&m, &g) && g.field == 1);
      assert_string_equal(str(&t, g.u), "cpu");
      break;
    case 12:
      period = f.u;
      break;
    case 13: {
      const char *c = str(&t, f.u);
      note = note || strcmp(c, NOTES[0]) == 0;
      truncation = truncation || strstr(c, "2 stacks with 10 samples") != NULL;
      if (comments == 0) {
        assert_string_equal(c, "edgemon profile #3, trigger: escalation, level DEGRADED from "
                               "WARN, rule infer_p99, stage infer: p99 over budget");
      }
      comments++;
      break;
    }
    case 14:
      default_type = f.u;
      break;
    case 6:
      break;
    default:
      fail_msg("unexpected Profile field %u", f.field);
    }
  }
  assert_int_equal(types, 3);
  assert_int_equal(samples, N(STACKS));
  assert_int_equal(functions, N_FRAMES);
  assert_int_equal(locations, N_FRAMES);
  assert_int_equal(period, 10101010u);
  assert_string_equal(str(&t, default_type), "cpu");
  assert_true(note && truncation);
  assert_int_equal(comments, 4);
  for (size_t i = 0; i < t.n; i++) { /* Each string once. */
    for (size_t j = i + 1; j < t.n; j++) {
      assert_string_not_equal(t.s[i], t.s[j]);
    }
    free((void *)t.s[i]);
  }
  em_pb_deinit(&pb);
}

static void pprof_period_rounds_and_refuses_nothing(void **state) {
  (void)state;
  assert_int_equal(em_profile_pprof_period_ns(1), 1000000000u);
  assert_int_equal(em_profile_pprof_period_ns(1000), 1000000u);
  assert_int_equal(em_profile_pprof_period_ns(99), 10101010u);
  assert_int_equal(em_profile_pprof_period_ns(7), 142857143u);
  assert_int_equal(em_profile_pprof_period_ns(0), 0u);
}

static void pprof_over_the_writer_cap_is_an_error(void **state) {
  (void)state;
  em_profile_t p = profile();
  em_pb_t pb;
  assert_int_equal(em_pb_init(&pb, 200), 0);
  assert_int_equal(em_profile_pprof(&pb, &p, NULL), -EOVERFLOW);
  em_pb_deinit(&pb);
  assert_int_equal(em_profile_pprof(NULL, &p, NULL), -EINVAL);
}

static void cxx_names_read_without_parameters(void **state) {
  (void)state;
  char out[256];
  assert_int_equal(em_demangle("_ZN2at6native6conv2dERKNS_6TensorES3_", out, sizeof(out)),
                   strlen("at::native::conv2d"));
  assert_string_equal(out, "at::native::conv2d");
  em_demangle("_ZNSt6vectorIiSaIiEE9push_backERKi", out, sizeof(out));
  assert_string_equal(out, "std::vector<int, std::allocator<int> >::push_back");
  em_demangle("_ZNK3foo3barEv", out, sizeof(out)); /* foo::bar() const */
  assert_string_equal(out, "foo::bar");
  em_demangle("_ZN3fooclEv", out, sizeof(out)); /* foo::operator()() */
  assert_string_equal(out, "foo::operator()");
  em_demangle("_ZZ4mainENKUlvE_clEv", out,
              sizeof(out)); /* main::{lambda()#1}::operator()() const */
  assert_string_equal(out, "main::{lambda()#1}::operator()");
  /* Not mangled, or not valid: 0, out untouched. */
  strcpy(out, "kept");
  assert_int_equal(em_demangle("sgemm_", out, sizeof(out)), 0);
  assert_int_equal(em_demangle("_Zgarbage(", out, sizeof(out)), 0);
  assert_int_equal(em_demangle("python3.11+0x1a2b", out, sizeof(out)), 0);
  assert_string_equal(out, "kept");
  /* A small buffer: cut, NUL-terminated. */
  char small[8];
  assert_int_equal(em_demangle("_ZN2at6native6conv2dERKNS_6TensorES3_", small, sizeof(small)), 7);
  assert_string_equal(small, "at::nat");
}

static void readable_frames_demangle_native_names_only(void **state) {
  (void)state;
  const em_profile_frame_t frames[] = {
      {.name = "_ZN2at6native6conv2dERKNS_6TensorES3_",
       .module = "libtorch_cpu.so",
       .kind = EM_FRAME_NATIVE},
      {.name = "_ZN2at6native6conv2dERKNS_6TensorES3_",
       .module = "x.py:1",
       .kind = EM_FRAME_PYTHON},
      {.name = "do_syscall_64", .module = "[kernel.kallsyms]", .kind = EM_FRAME_KERNEL},
  };
  em_profile_t p = {.frames = frames, .n_frames = 3};
  em_profile_frame_t *out = NULL;
  char *text = NULL;
  assert_int_equal(em_profile_readable(&p, &out, &text), 0);
  assert_string_equal(out[0].name, "at::native::conv2d");
  assert_string_equal(out[0].module, "libtorch_cpu.so");
  assert_ptr_equal(out[1].name, frames[1].name); /* A Python frame is never demangled. */
  assert_ptr_equal(out[2].name, frames[2].name);
  free(out);
  free(text);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(total_is_samples_taken_or_the_stacks_sum),
      cmocka_unit_test(cxx_names_read_without_parameters),
      cmocka_unit_test(readable_frames_demangle_native_names_only),
      cmocka_unit_test(hottest_orders_by_samples_then_off_cpu),
      cmocka_unit_test(functions_count_self_at_the_leaf_and_total_once_per_stack),
      cmocka_unit_test(stack_text_is_cut_from_the_root_side),
      cmocka_unit_test(folded_merges_stages_and_skips_off_cpu_only),
      cmocka_unit_test(tree_has_one_node_per_distinct_prefix),
      cmocka_unit_test(svg_draws_a_rect_per_prefix_with_widths_in_proportion),
      cmocka_unit_test(pprof_reads_back_as_the_profile),
      cmocka_unit_test(pprof_period_rounds_and_refuses_nothing),
      cmocka_unit_test(pprof_over_the_writer_cap_is_an_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
