/*
 * samples.h - deterministic samples for the histogram tests: a 64-bit linear congruential
 * generator, log-normal durations in ns, and the OpenTelemetry bucket of a duration at a scale
 * computed with libm and a boundary fix-up, independent of the code under test.
 *
 * One generator per test executable (global state); single-threaded.
 */
#ifndef EDGEMON_TESTS_SAMPLES_H
#define EDGEMON_TESTS_SAMPLES_H

#include <stdint.h>

/* Restarts the generator at `seed`. */
void em_samples_seed(uint64_t seed);

/* Uniform in (0, 1). */
double em_samples_uniform01(void);

/* Log-normal around `median` ns with log-sd `sigma` (Box-Muller), at least 1 ns. */
uint64_t em_samples_lognormal_ns(double median, double sigma);

/* The bucket of d > 0 at `scale`: base^i < d <= base^(i+1), base = 2^(2^-scale). */
int32_t em_samples_bucket_of(uint64_t d, int32_t scale);

#endif /* EDGEMON_TESTS_SAMPLES_H */
