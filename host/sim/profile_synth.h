/*
 * profile_synth.h - a synthetic stack profile (edgemon/profile.h) for edgemon-sim --profiles:
 * what an agent would publish for the sampling window it opens when its percentile budget
 * escalates to DEGRADED, so the host side (aggregator, edgemon-cli profile) has profiles to
 * store and show without a board.
 *
 * The shape is a PyTorch pipeline: Python frames (main;run;infer;forward;...) over the
 * interpreter and native kernels (_PyEval_EvalFrameDefault;at::native::conv2d;...), kernel
 * frames at some leaves (a page fault, a futex wait with off-CPU time), one "[unknown]" frame.
 * Eleven stack shapes with fixed weights share EM_SYNTH_PROFILE_HZ * the window's seconds
 * samples, each drawn with a +-25% jitter (at least 1); the conv2d stacks dominate and lie in
 * the budget stage, the resize stacks in the first other stage, the rest in none. Stacks are in
 * descending samples. Draws are a function of `seed` alone.
 *
 * Owns nothing: the caller's buffer receives the encoding.
 */
#ifndef EM_SIM_PROFILE_SYNTH_H
#define EM_SIM_PROFILE_SYNTH_H

#include <edgemon/profile.h>
#include <stddef.h>
#include <stdint.h>

#define EM_SYNTH_PROFILE_HZ 99u
#define EM_SYNTH_PROFILE_NS 2000000000ull /* The window's length. */

typedef struct {
  uint32_t session;
  uint32_t number;        /* Profile number within the session. */
  uint64_t time_ns;       /* CLOCK_REALTIME of the window's start. */
  uint64_t start_mono_ns; /* CLOCK_MONOTONIC of the window's start. */
  const char *const *stages;
  size_t n_stages;     /* 1..EM_PROFILE_MAX_STAGES */
  size_t budget_stage; /* The stage the rule watches (index into stages). */
  const char *rule;
  uint64_t seed;
} em_synth_profile_t;

/* Encodes the profile into buf[0..cap). Returns 0 and *out_len, or em_profile_encode()'s
 * error codes. */
int em_synth_profile_encode(const em_synth_profile_t *in, uint8_t *buf, size_t cap,
                            size_t *out_len);

#endif /* EM_SIM_PROFILE_SYNTH_H */
