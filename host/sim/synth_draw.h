/*
 * synth_draw.h - the draws of edgemon-sim's synthetic forensics (flight_synth.c,
 * verdict_synth.c): splitmix64 over a caller's 64-bit state, so that what they make is a
 * function of their seed alone. Owns nothing; header only.
 */
#ifndef EM_SIM_SYNTH_DRAW_H
#define EM_SIM_SYNTH_DRAW_H

#include <stdint.h>

#include "edgemon/common/rng.h"

/* The next 64 random bits of the state *x (splitmix64). */
static inline uint64_t em_synth_next_u64(uint64_t *x) {
  return em_rng_splitmix64(x);
}

/* A draw in (0, 1): never 0, so its logarithm is finite. */
static inline double em_synth_unit(uint64_t *x) {
  return ((double)(em_synth_next_u64(x) >> 11) + 0.5) / 9007199254740992.0;
}

#endif /* EM_SIM_SYNTH_DRAW_H */
