/*
 * stats.h - the statistics `edgemon-cli compare` reports: Welch's unequal-variance t-test,
 * Cohen's d and the confidence interval of the difference of two means, from summary figures
 * (count, mean, variance) of two samples; the summary of a sample; the Student t quantile;
 * the two-proportion z-test; the median.
 *
 * The p-value comes from Student's t distribution, computed through the regularized
 * incomplete beta function (a continued fraction evaluated with the modified Lentz method);
 * accurate to about 1e-10 relative in the range compare uses. Pure functions, no state.
 */
#ifndef EM_STATS_H
#define EM_STATS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  double t;    /* (mean_b - mean_a) / sqrt(var_a/n_a + var_b/n_b); positive when b is larger. */
  double df;   /* Welch-Satterthwaite degrees of freedom. */
  double p;    /* Two-sided p-value, in [0, 1]. */
  double d;    /* Cohen's d: (mean_b - mean_a) / pooled standard deviation. */
  double diff; /* mean_b - mean_a. */
  double se;   /* Standard error of diff: sqrt(var_a/n_a + var_b/n_b); 0 with no variance. */
} em_welch_t;

/* Count, mean and sample variance (n-1) of a sample. */
typedef struct {
  uint64_t n;
  double mean;
  double var; /* 0 when n < 2. */
} em_stats_summary_t;

/* The two-proportion z-test of x_a of n_a against x_b of n_b. */
typedef struct {
  double p_a, p_b; /* The shares x/n. */
  double z;        /* (p_b - p_a) / pooled standard error; positive when b's share is larger. */
  double p;        /* Two-sided p-value (normal approximation), in [0, 1]. */
} em_two_prop_t;

/*
 * Welch's t-test of two samples given their sizes, means and sample variances (n-1). Returns 0,
 * or -EINVAL when a count is below 2, a variance is negative, or an input is not finite.
 * When both variances are 0: p is 0 when the means differ and 1 when they are equal, t and
 * d are +-INFINITY or 0 accordingly.
 */
int em_stats_welch(uint64_t n_a, double mean_a, double var_a, uint64_t n_b, double mean_b,
                   double var_b, em_welch_t *out);

/*
 * The confidence interval (1 - alpha) of mean_b - mean_a from a Welch test: diff +- t * se with
 * t the Student quantile at 1 - alpha/2 and w->df degrees of freedom. Returns 0, or -EINVAL
 * for alpha outside (0, 1) or a NULL pointer. With se == 0 the interval is [diff, diff].
 */
int em_stats_welch_ci(const em_welch_t *w, double alpha, double *lo, double *hi);

/* Summary of x[0..n) (Welford's running mean and variance). Returns 0, or -EINVAL for a NULL
 * pointer with n > 0 or a value that is not finite. */
int em_stats_summarize(const double *x, size_t n, em_stats_summary_t *out);

/* em_stats_welch() of two summaries. */
int em_stats_welch_summary(const em_stats_summary_t *a, const em_stats_summary_t *b,
                           em_welch_t *out);

/*
 * Two-proportion z-test (pooled standard error). Returns 0, or -EINVAL when a count is 0 or
 * x > n. When neither or both samples have every case (pooled share 0 or 1) z is 0 and p 1.
 */
int em_stats_two_prop(uint64_t x_a, uint64_t n_a, uint64_t x_b, uint64_t n_b, em_two_prop_t *out);

/* The median of x[0..n) (sorts x in place); NAN when n is 0. */
double em_stats_median(double *x, size_t n);

/*
 * The Student t quantile: the t with P(T <= t) = prob for df > 0 degrees of freedom, found by
 * bisection on em_stats_t_two_sided() to about 1e-12 relative; NAN for prob outside (0, 1) or
 * df not > 0.
 */
double em_stats_t_quantile(double prob, double df);

/* Regularized incomplete beta I_x(a, b), a > 0, b > 0, 0 <= x <= 1; NAN otherwise. */
double em_stats_betainc(double a, double b, double x);

/* Two-sided tail probability P(|T| >= |t|) of Student's t with df > 0 degrees of freedom. */
double em_stats_t_two_sided(double t, double df);

#endif /* EM_STATS_H */
