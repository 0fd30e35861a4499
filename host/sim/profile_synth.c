/*
 * profile_synth.c - edgemon-sim's synthetic stack profile (see profile_synth.h).
 *
 * The frame table and the stack shapes are constant tables; only the samples per shape are
 * drawn (a 64-bit LCG of the seed, high bits), then the stacks are sorted by descending
 * samples as the schema wants.
 */
#define _POSIX_C_SOURCE 200809L
#include "profile_synth.h"

#include <stdlib.h>
#include <string.h>

enum {
  F_MAIN,
  F_RUN,
  F_INFER,
  F_FORWARD,
  F_CONV_FWD,
  F_PREPROCESS,
  F_POSTPROCESS,
  F_EVAL,
  F_CONV2D,
  F_CONVOLUTION,
  F_MKLDNN,
  F_SGEMM,
  F_RESIZE,
  F_NMS,
  F_PAGE_FAULT,
  F_HANDLE_MM,
  F_FUTEX,
  F_SCHEDULE,
  F_UNKNOWN,
  N_FRAMES
};

static const em_profile_frame_t frames[N_FRAMES] = {
    [F_MAIN] = {"main", "app.py:88", EM_FRAME_PYTHON},
    [F_RUN] = {"run", "app.py:61", EM_FRAME_PYTHON},
    [F_INFER] = {"infer", "pipeline.py:42", EM_FRAME_PYTHON},
    [F_FORWARD] = {"forward", "torch/nn/modules/module.py:1501", EM_FRAME_PYTHON},
    [F_CONV_FWD] = {"_conv_forward", "torch/nn/modules/conv.py:456", EM_FRAME_PYTHON},
    [F_PREPROCESS] = {"preprocess", "pipeline.py:20", EM_FRAME_PYTHON},
    [F_POSTPROCESS] = {"postprocess", "pipeline.py:70", EM_FRAME_PYTHON},
    [F_EVAL] = {"_PyEval_EvalFrameDefault", "libpython3.11.so.1.0", EM_FRAME_NATIVE},
    [F_CONV2D] = {"at::native::conv2d", "libtorch_cpu.so", EM_FRAME_NATIVE},
    [F_CONVOLUTION] = {"at::native::_convolution", "libtorch_cpu.so", EM_FRAME_NATIVE},
    [F_MKLDNN] = {"at::native::mkldnn_convolution", "libtorch_cpu.so", EM_FRAME_NATIVE},
    [F_SGEMM] = {"sgemm_kernel", "libopenblas.so.0", EM_FRAME_NATIVE},
    [F_RESIZE] = {"cv::resize", "libopencv_imgproc.so.406", EM_FRAME_NATIVE},
    [F_NMS] = {"torchvision::ops::nms_kernel", "libtorchvision.so", EM_FRAME_NATIVE},
    [F_PAGE_FAULT] = {"asm_exc_page_fault", NULL, EM_FRAME_KERNEL},
    [F_HANDLE_MM] = {"handle_mm_fault", NULL, EM_FRAME_KERNEL},
    [F_FUTEX] = {"futex_wait", NULL, EM_FRAME_KERNEL},
    [F_SCHEDULE] = {"__schedule", NULL, EM_FRAME_KERNEL},
    [F_UNKNOWN] = {"[unknown]", NULL, EM_FRAME_UNKNOWN},
};

#define CONV F_MAIN, F_RUN, F_INFER, F_FORWARD, F_EVAL, F_CONV_FWD, F_EVAL, F_CONV2D, F_CONVOLUTION
#define PRE  F_MAIN, F_RUN, F_PREPROCESS, F_EVAL
#define POST F_MAIN, F_RUN, F_POSTPROCESS, F_EVAL

/* Where a shape's samples are attributed. */
enum { IN_BUDGET, IN_OTHER, IN_NONE };

typedef struct {
  uint32_t frames[16];
  size_t n;
  unsigned weight; /* Per mille of the samples. */
  int where;
  uint64_t off_cpu_per_sample_ns;
} shape_t;

static const shape_t shapes[] = {
    {{CONV, F_MKLDNN}, 10, 360, IN_BUDGET, 0},
    {{CONV, F_MKLDNN, F_SGEMM}, 11, 220, IN_BUDGET, 0},
    {{CONV, F_MKLDNN, F_PAGE_FAULT, F_HANDLE_MM}, 12, 60, IN_BUDGET, 0},
    {{CONV}, 9, 40, IN_BUDGET, 0},
    {{F_MAIN, F_RUN, F_INFER, F_FORWARD, F_EVAL, F_SGEMM}, 6, 70, IN_BUDGET, 0},
    {{PRE, F_RESIZE}, 5, 110, IN_OTHER, 0},
    {{PRE, F_RESIZE, F_PAGE_FAULT}, 6, 20, IN_OTHER, 0},
    {{POST, F_NMS}, 5, 50, IN_NONE, 0},
    {{F_MAIN, F_RUN, F_EVAL}, 3, 30, IN_NONE, 0},
    {{F_MAIN, F_RUN, F_INFER, F_EVAL, F_FUTEX, F_SCHEDULE}, 6, 25, IN_BUDGET, 4000000},
    {{F_MAIN, F_UNKNOWN}, 2, 15, IN_NONE, 0},
};
#define N_SHAPES (sizeof(shapes) / sizeof(shapes[0]))

static const char *const notes[] = {
    "simulated by edgemon-sim: no process was sampled",
};

static uint64_t lcg(uint64_t *x) {
  *x = *x * 6364136223846793005ull + 1442695040888963407ull;
  return *x >> 33;
}

static int by_samples(const void *a, const void *b) {
  const em_profile_stack_t *x = a;
  const em_profile_stack_t *y = b;
  if (x->samples != y->samples) {
    return x->samples > y->samples ? -1 : 1;
  }
  return x->frames < y->frames ? -1 : x->frames > y->frames;
}

int em_synth_profile_encode(const em_synth_profile_t *in, uint8_t *buf, size_t cap,
                            size_t *out_len) {
  if (!in || in->n_stages == 0 || in->budget_stage >= in->n_stages) {
    return EM_PROTO_EINVAL;
  }
  uint64_t x = in->seed;
  uint64_t total = (uint64_t)EM_SYNTH_PROFILE_HZ * EM_SYNTH_PROFILE_NS / 1000000000ull;
  uint32_t other = in->budget_stage == 0 ? (in->n_stages > 1 ? 1u : EM_PROFILE_NO_STAGE) : 0u;
  em_profile_stack_t stacks[N_SHAPES];
  uint64_t samples = 0;
  for (size_t i = 0; i < N_SHAPES; i++) {
    const shape_t *s = &shapes[i];
    double jitter = 0.75 + 0.5 * (double)(lcg(&x) % 1000) / 1000.0;
    uint64_t n = (uint64_t)((double)(total * s->weight) / 1000.0 * jitter);
    n = n == 0 ? 1 : n;
    samples += n;
    stacks[i] = (em_profile_stack_t){
        .frames = s->frames,
        .n_frames = s->n,
        .samples = n,
        .off_cpu_ns = n * s->off_cpu_per_sample_ns,
        .stage = s->where == IN_BUDGET  ? (uint32_t)in->budget_stage
                 : s->where == IN_OTHER ? other
                                        : EM_PROFILE_NO_STAGE,
    };
  }
  qsort(stacks, N_SHAPES, sizeof(stacks[0]), by_samples);
  em_profile_t p = {
      .head = {.time_ns = in->time_ns, .session = in->session},
      .number = in->number,
      .trigger = {.cause = EM_PROFILE_ESCALATION,
                  .level = EM_LEVEL_DEGRADED,
                  .prev_level = EM_LEVEL_NOMINAL,
                  .rule = in->rule,
                  .stage = in->stages[in->budget_stage],
                  .reason = "p99 over its budget (simulated)"},
      .start_mono_ns = in->start_mono_ns,
      .duration_ns = EM_SYNTH_PROFILE_NS,
      .hz = EM_SYNTH_PROFILE_HZ,
      .clock = "cpu-clock",
      .samples = samples,
      .lost = lcg(&x) % 3,
      .stages = in->stages,
      .n_stages = in->n_stages,
      .frames = frames,
      .n_frames = N_FRAMES,
      .stacks = stacks,
      .n_stacks = N_SHAPES,
      .notes = notes,
      .n_notes = sizeof(notes) / sizeof(notes[0]),
  };
  return em_profile_encode(&p, buf, cap, out_len);
}
