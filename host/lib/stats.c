/*
 * stats.c - Welch's t-test, Cohen's d and the Student t tail behind them, see stats.h.
 *
 * The two-sided tail of Student's t with df degrees of freedom is
 *   P(|T| >= |t|) = I_x(df/2, 1/2),  x = df / (df + t^2),
 * with I the regularized incomplete beta function. I_x(a, b) is evaluated as
 *   x^a (1-x)^b / (a B(a, b)) * 1 / (1 + d1 / (1 + d2 / (1 + ...)))
 *   d(2m+1) = -(a+m)(a+b+m) x / ((a+2m)(a+2m+1)),  d(2m) = m(b-m) x / ((a+2m-1)(a+2m)),
 * a continued fraction that converges fast for x < (a+1)/(a+b+2); above that the symmetry
 * I_x(a, b) = 1 - I_{1-x}(b, a) is used. The fraction is evaluated front to back with the
 * modified Lentz method (tiny values replace zero denominators). The prefactor x^a (1-x)^b / B(a,
 * b) is taken through logs, ln B from lgamma or, for a large argument, from Stirling's series (see
 * log_beta), so df in the millions keep their accuracy.
 *
 * The t quantile inverts that tail by bisection (it is monotone in |t|), first doubling an
 * upper bracket; 200 halvings take any bracket below double resolution. The two-proportion
 * z-test uses the pooled share under the null hypothesis and the normal tail erfc(|z|/sqrt 2).
 *
 * Pure functions, no state, no allocation; thread-safe except that lgamma may set signgam.
 */
#include "stats.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#define LENTZ_TINY     1e-300
#define LENTZ_EPS      1e-15
#define LENTZ_MAX_ITER 100000 /* enough for a, b up to about 1e9 (iterations ~ sqrt(a)) */

/* The continued fraction part of I_x(a, b) by modified Lentz; x < (a+1)/(a+b+2). */
static double beta_cf(double a, double b, double x) {
  double c = 1.0;
  double d = 1.0 - (a + b) * x / (a + 1.0);
  if (fabs(d) < LENTZ_TINY) {
    d = LENTZ_TINY;
  }
  d = 1.0 / d;
  double f = d;
  for (int m = 1; m <= LENTZ_MAX_ITER; m++) {
    double dm = (double)m;
    /* even step: d(2m) */
    double num = dm * (b - dm) * x / ((a + 2 * dm - 1) * (a + 2 * dm));
    d = 1.0 + num * d;
    d = fabs(d) < LENTZ_TINY ? 1.0 / LENTZ_TINY : 1.0 / d;
    c = 1.0 + num / c;
    if (fabs(c) < LENTZ_TINY) {
      c = LENTZ_TINY;
    }
    f *= d * c;
    /* odd step: d(2m+1) */
    num = -(a + dm) * (a + b + dm) * x / ((a + 2 * dm) * (a + 2 * dm + 1));
    d = 1.0 + num * d;
    d = fabs(d) < LENTZ_TINY ? 1.0 / LENTZ_TINY : 1.0 / d;
    c = 1.0 + num / c;
    if (fabs(c) < LENTZ_TINY) {
      c = LENTZ_TINY;
    }
    double delta = d * c;
    f *= delta;
    if (fabs(delta - 1.0) < LENTZ_EPS) {
      break;
    }
  }
  return f;
}

/* lgamma(z) minus its Stirling main part: 1/(12z) - 1/(360z^3) + 1/(1260z^5), z >= 100. */
static double stirling_tail(double z) {
  double z2 = z * z;
  return (1.0 / 12 - (1.0 / 360 - 1.0 / (1260 * z2)) / z2) / z;
}

/*
 * ln B(a, b). With one argument large (>= 100) the difference lgamma(big + small) -
 * lgamma(big) is taken from Stirling's series term by term, (big - 1/2) log1p(small/big) +
 * small ln(big + small) - small + tail differences, instead of subtracting two large lgammas:
 * that keeps the t tail accurate for df in the millions (b = 1/2 there).
 */
static double log_beta(double a, double b) {
  double big = a > b ? a : b, small = a > b ? b : a;
  if (big < 100) {
    return lgamma(a) + lgamma(b) - lgamma(a + b);
  }
  double diff = (big - 0.5) * log1p(small / big) + small * log(big + small) - small +
                stirling_tail(big + small) - stirling_tail(big);
  return lgamma(small) - diff;
}

/* I_x(a, b) with y = 1 - x given exactly by the caller (logs of x and y taken from whichever
 * is better conditioned). */
static double betainc_xy(double a, double b, double x, double y) {
  if (x <= 0 || y >= 1) {
    return 0;
  }
  if (y <= 0 || x >= 1) {
    return 1;
  }
  double log_x = x > 0.5 ? log1p(-y) : log(x);
  double log_y = y > 0.5 ? log1p(-x) : log(y);
  double lfront = a * log_x + b * log_y - log_beta(a, b); /* ln x^a (1-x)^b / B(a, b) */
  if (x < (a + 1) / (a + b + 2)) {
    return exp(lfront) * beta_cf(a, b, x) / a;
  }
  double r = 1.0 - exp(lfront) * beta_cf(b, a, y) / b;
  return r < 0 ? 0 : r;
}

double em_stats_betainc(double a, double b, double x) {
  if (!(a > 0) || !(b > 0) || !(x >= 0) || !(x <= 1) || !isfinite(a) || !isfinite(b)) {
    return NAN;
  }
  return betainc_xy(a, b, x, 1.0 - x);
}

double em_stats_t_two_sided(double t, double df) {
  if (!(df > 0) || isnan(t)) {
    return NAN;
  }
  if (isinf(t)) {
    return 0;
  }
  if (isinf(df)) {
    return erfc(fabs(t) / sqrt(2.0)); /* the normal limit */
  }
  double t2 = t * t;
  if (t2 == 0) {
    return 1;
  }
  /* x = df / (df + t^2) and 1 - x = t^2 / (df + t^2), each without cancellation. */
  double p = betainc_xy(df / 2, 0.5, df / (df + t2), t2 / (df + t2));
  return p < 0 ? 0 : p > 1 ? 1 : p;
}

int em_stats_welch(uint64_t n_a, double mean_a, double var_a, uint64_t n_b, double mean_b,
                   double var_b, em_welch_t *out) {
  if (!out || n_a < 2 || n_b < 2) {
    return -EINVAL;
  }
  if (!isfinite(mean_a) || !isfinite(mean_b) || !isfinite(var_a) || !isfinite(var_b) || var_a < 0 ||
      var_b < 0) {
    return -EINVAL;
  }
  double na = (double)n_a, nb = (double)n_b;
  double diff = mean_b - mean_a;
  out->diff = diff;
  out->se = 0;
  double ea = var_a / na, eb = var_b / nb; /* squared standard errors */
  double se2 = ea + eb;
  double pooled = ((na - 1) * var_a + (nb - 1) * var_b) / (na + nb - 2);
  if (se2 == 0 || pooled == 0) {
    out->df = na + nb - 2;
    if (diff == 0) {
      out->t = 0;
      out->d = 0;
      out->p = 1;
    } else {
      out->t = diff > 0 ? INFINITY : -INFINITY;
      out->d = out->t;
      out->p = 0;
    }
    return 0;
  }
  double denom = ea * ea / (na - 1) + eb * eb / (nb - 1);
  out->se = sqrt(se2);
  out->t = diff / out->se;
  out->df = denom > 0 ? se2 * se2 / denom : na + nb - 2;
  if (!isfinite(out->df)) {
    out->df = na + nb - 2;
  }
  out->p = em_stats_t_two_sided(out->t, out->df);
  out->d = diff / sqrt(pooled);
  return 0;
}

double em_stats_t_quantile(double prob, double df) {
  if (!(prob > 0) || !(prob < 1) || !(df > 0)) {
    return NAN;
  }
  if (prob == 0.5) {
    return 0;
  }
  double upper = prob > 0.5 ? prob : 1 - prob; /* P(T <= t) for the positive t sought */
  double tail = 2 * (1 - upper);               /* its two-sided tail */
  double lo = 0, hi = 1;
  while (em_stats_t_two_sided(hi, df) > tail) {
    lo = hi;
    hi *= 2;
    if (hi > 1e300) {
      return prob > 0.5 ? INFINITY : -INFINITY;
    }
  }
  for (int k = 0; k < 200 && hi - lo > 1e-13 * hi; k++) {
    double mid = lo + (hi - lo) / 2;
    if (em_stats_t_two_sided(mid, df) > tail) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  double t = lo + (hi - lo) / 2;
  return prob > 0.5 ? t : -t;
}

int em_stats_welch_ci(const em_welch_t *w, double alpha, double *lo, double *hi) {
  if (!w || !lo || !hi || !(alpha > 0) || !(alpha < 1)) {
    return -EINVAL;
  }
  double half = w->se > 0 ? em_stats_t_quantile(1 - alpha / 2, w->df) * w->se : 0;
  *lo = w->diff - half;
  *hi = w->diff + half;
  return 0;
}

int em_stats_summarize(const double *x, size_t n, em_stats_summary_t *out) {
  if (!out || (n > 0 && !x)) {
    return -EINVAL;
  }
  double mean = 0, m2 = 0;
  for (size_t k = 0; k < n; k++) {
    if (!isfinite(x[k])) {
      return -EINVAL;
    }
    double delta = x[k] - mean;
    mean += delta / (double)(k + 1);
    m2 += delta * (x[k] - mean);
  }
  out->n = n;
  out->mean = mean;
  out->var = n > 1 ? m2 / (double)(n - 1) : 0;
  return 0;
}

int em_stats_welch_summary(const em_stats_summary_t *a, const em_stats_summary_t *b,
                           em_welch_t *out) {
  if (!a || !b) {
    return -EINVAL;
  }
  return em_stats_welch(a->n, a->mean, a->var, b->n, b->mean, b->var, out);
}

int em_stats_two_prop(uint64_t x_a, uint64_t n_a, uint64_t x_b, uint64_t n_b, em_two_prop_t *out) {
  if (!out || n_a == 0 || n_b == 0 || x_a > n_a || x_b > n_b) {
    return -EINVAL;
  }
  double na = (double)n_a, nb = (double)n_b;
  out->p_a = (double)x_a / na;
  out->p_b = (double)x_b / nb;
  double pooled = ((double)x_a + (double)x_b) / (na + nb);
  double se = sqrt(pooled * (1 - pooled) * (1 / na + 1 / nb));
  if (!(se > 0)) {
    out->z = 0;
    out->p = 1;
    return 0;
  }
  out->z = (out->p_b - out->p_a) / se;
  out->p = erfc(fabs(out->z) / sqrt(2.0));
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double em_stats_median(double *x, size_t n) {
  if (!x || n == 0) {
    return NAN;
  }
  qsort(x, n, sizeof(*x), cmp_double);
  return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}
