/*
 * rng.c - xoshiro256** seeded through splitmix64 (edgemon/common/rng.h): the one fixed-seed
 * generator edgemon-sim and the randomised tests draw from. Owns nothing beyond the caller's
 * state; no global state, safe on any thread with its own state.
 */
#include "edgemon/common/rng.h"

uint64_t em_rng_splitmix64(uint64_t *x) {
  uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

void em_rng_seed(em_rng_t *r, uint64_t seed) {
  for (int i = 0; i < 4; i++) {
    r->s[i] = em_rng_splitmix64(&seed);
  }
}

/* Rotates x left by k bits, 0 < k < 64. */
static uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

uint64_t em_rng_next(em_rng_t *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}
