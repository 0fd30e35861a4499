/*
 * samples.c - deterministic samples for the histogram tests (see samples.h).
 */
#include "samples.h"

#include <math.h>

#define PI 3.14159265358979323846

static uint64_t state;

void em_samples_seed(uint64_t seed) {
  state = seed;
}

double em_samples_uniform01(void) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return ((double)(state >> 11) + 0.5) / 9007199254740992.0;
}

uint64_t em_samples_lognormal_ns(double median, double sigma) {
  double z = sqrt(-2 * log(em_samples_uniform01())) * cos(2 * PI * em_samples_uniform01());
  double v = median * exp(sigma * z);
  return v < 1 ? 1 : (uint64_t)llround(v);
}

int32_t em_samples_bucket_of(uint64_t d, int32_t scale) {
  double per = ldexp(1.0, scale);
  int32_t i = (int32_t)ceil(log2((double)d) * per) - 1;
  while (exp2((double)i / per) >= (double)d) {
    i--;
  }
  while (exp2((double)(i + 1) / per) < (double)d) {
    i++;
  }
  return i;
}
