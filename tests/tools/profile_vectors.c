/*
 * profile_vectors.c - the golden stack profiles (see vectors.h): an escalation whose stacks mix
 * native, kernel and Python frames, with stages, off-CPU time, a stack no span covered and a
 * note on what is missing; a profile taken on cmd/profile with no previous level; and one cut
 * to fit its cap, replayed from the spool.
 */
#include "vectors.h"

#define T0   UINT64_C(1795262405000000000) /* 2026-11-21T12:00:05Z */
#define MONO UINT64_C(123456789012345) /* The window's start, on the device's CLOCK_MONOTONIC. */
#define MS   UINT64_C(1000000)

static const char *const stages[] = {"capture", "infer"};

static const em_profile_frame_t frames[] = {
    {"_start", "python3.11", EM_FRAME_NATIVE},
    {"_PyEval_EvalFrameDefault", "libpython3.11.so.1.0", EM_FRAME_NATIVE},
    {"run", "pipeline.py:88", EM_FRAME_PYTHON},
    {"infer", "model.py:42", EM_FRAME_PYTHON},
    {"at::native::conv2d", "libtorch_cpu.so", EM_FRAME_NATIVE},
    {"do_syscall_64", NULL, EM_FRAME_KERNEL},
    {"libcamera.so+0x1a2b", "libcamera.so", EM_FRAME_UNKNOWN},
    {"capture", "camera.py:17", EM_FRAME_PYTHON},
};

static const uint32_t s_conv[] = {0, 1, 2, 3, 4};
static const uint32_t s_infer_py[] = {0, 1, 2, 3};
static const uint32_t s_capture[] = {0, 1, 2, 7, 6, 5};
static const uint32_t s_idle[] = {0, 1, 5};

static const em_profile_stack_t stacks[] = {
    {s_conv, 5, 412, 0, 1},
    {s_infer_py, 4, 37, 2000000, 1},
    {s_capture, 6, 21, 9 * MS, 0},
    {s_conv, 5, 3, 0, EM_PROFILE_NO_STAGE},
    {s_idle, 3, 0, 48 * MS, EM_PROFILE_NO_STAGE},
};

static const char *const notes[] = {
    "kernel frames of other processes refused: perf_event_paranoid 2",
    "libcamera.so has no symbols"};

static const em_profile_vector_t rows[] = {
    {"profile_basic",
     "escalation: native, kernel, Python and unresolved frames, two stages, off-CPU time, "
     "stacks no span covered, notes",
     {.head = {.time_ns = T0, .session = 3735928559u},
      .number = 0,
      .trigger = {.cause = EM_PROFILE_ESCALATION,
                  .level = EM_LEVEL_DEGRADED,
                  .prev_level = EM_LEVEL_NOMINAL,
                  .rule = "infer.p99",
                  .stage = "infer",
                  .reason = "infer p99 52.0 ms > 40.0 ms for 3 windows"},
      .start_mono_ns = MONO,
      .duration_ns = 5000 * MS,
      .hz = 99,
      .clock = "cpu-clock",
      .samples = 480,
      .lost = 2,
      .stages = stages,
      .n_stages = 2,
      .frames = frames,
      .n_frames = 8,
      .stacks = stacks,
      .n_stacks = 5,
      .notes = notes,
      .n_notes = 2}},
    {"profile_command",
     "taken on cmd/profile: no rule, no previous level, task-clock, no notes",
     {.head = {.time_ns = T0, .session = 7},
      .number = 3,
      .trigger = {.cause = EM_PROFILE_COMMAND,
                  .level = EM_LEVEL_NOMINAL,
                  .prev_level = EM_LEVEL_NONE,
                  .reason = "requested on cmd/profile"},
      .start_mono_ns = MONO,
      .duration_ns = 2000 * MS,
      .hz = 1000,
      .clock = "task-clock",
      .samples = 412,
      .stages = stages,
      .n_stages = 2,
      .frames = frames,
      .n_frames = 5,
      .stacks = stacks,
      .n_stacks = 1}},
    {"profile_truncated",
     "cut to fit its cap (the stacks with the fewest samples left out), replayed from the spool",
     {.head = {.time_ns = T0, .session = 3735928559u},
      .number = 1,
      .trigger = {.cause = EM_PROFILE_ESCALATION,
                  .level = EM_LEVEL_CRITICAL,
                  .prev_level = EM_LEVEL_DEGRADED,
                  .rule = "infer.deadline",
                  .stage = "infer"},
      .start_mono_ns = MONO,
      .duration_ns = 10000 * MS,
      .hz = 99,
      .clock = "cpu-clock",
      .samples = 990,
      .lost = 0,
      .stages = stages,
      .n_stages = 2,
      .frames = frames,
      .n_frames = 8,
      .stacks = stacks,
      .n_stacks = 2,
      .truncated = {.stacks_cut = 1290, .samples_cut = 517},
      .historical = true}},
};

const em_profile_vector_t *em_profile_vectors(size_t *count) {
  *count = sizeof(rows) / sizeof(rows[0]);
  return rows;
}
