/*
 * edgemon/common/rng.h - the fixed-seed pseudo-random streams of the simulator and the tests:
 * xoshiro256** for the stream, splitmix64 to spread a 64-bit seed over its state. The same
 * seed gives the same stream on every build, so a simulated fleet or a randomised test is a
 * function of its seed alone. Not for anything secret.
 *
 * The caller owns the state; nothing allocates, no global state. The header compiles on its
 * own, as C11 and as C++.
 */
#ifndef EDGEMON_COMMON_RNG_H
#define EDGEMON_COMMON_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A xoshiro256** state; set it with em_rng_seed before the first draw. */
typedef struct {
  uint64_t s[4];
} em_rng_t;

/* Advances the splitmix64 counter *x and returns its next 64 bits. */
uint64_t em_rng_splitmix64(uint64_t *x);

/* Sets `r` to the state of `seed`: four splitmix64 draws from it. Any seed, 0 included. */
void em_rng_seed(em_rng_t *r, uint64_t seed);

/* The next 64 bits of the stream `r`. */
uint64_t em_rng_next(em_rng_t *r);

#ifdef __cplusplus
}
#endif

#endif /* EDGEMON_COMMON_RNG_H */
