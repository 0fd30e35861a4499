/*
 * stats.h - the statistics `edgemon-cli compare` reports: Welch's unequal-variance t-test and
 * Cohen's d, from summary figures (count, mean, variance) of two samples.
 *
 * The p-value comes from Student's t distribution, computed through the regularized
 * incomplete beta function (a continued fraction evaluated with the modified Lentz method);
 * accurate to about 1e-10 relative in the range compare uses. Pure functions, no state.
 */
#ifndef EM_STATS_H
#define EM_STATS_H

#include <stdint.h>

typedef struct {
  double t;  /* (mean_b - mean_a) / sqrt(var_a/n_a + var_b/n_b); positive when b is larger. */
  double df; /* Welch-Satterthwaite degrees of freedom. */
  double p;  /* Two-sided p-value, in [0, 1]. */
  double d;  /* Cohen's d: (mean_b - mean_a) / pooled standard deviation. */
} em_welch_t;

/*
 * Welch's t-test of two samples given their sizes, means and sample variances (n-1). Returns 0,
 * or -EINVAL when a count is below 2, a variance is negative, or an input is not finite.
 * When both variances are 0: p is 0 when the means differ and 1 when they are equal, t and
 * d are +-INFINITY or 0 accordingly.
 */
int em_stats_welch(uint64_t n_a, double mean_a, double var_a, uint64_t n_b, double mean_b,
                   double var_b, em_welch_t *out);

/* Regularized incomplete beta I_x(a, b), a > 0, b > 0, 0 <= x <= 1; NAN otherwise. */
double em_stats_betainc(double a, double b, double x);

/* Two-sided tail probability P(|T| >= |t|) of Student's t with df > 0 degrees of freedom. */
double em_stats_t_two_sided(double t, double df);

#endif /* EM_STATS_H */
