/*
 * test_host_stats.c - host/lib/stats.c as `edgemon-cli compare` uses it for verdicts: Welch's
 * test with its confidence interval, Cohen's d, the Student t quantile, the two-proportion
 * z-test, summaries and the median.
 *
 * Reference values are independent of the code under test: R's documented output of
 * t.test(extra ~ group, data = sleep) (t = -1.8608, df = 17.776, p = 0.07939, 95% CI
 * -3.3654832 .. 0.2054832); closed forms of Student's t with 1 and 2 df (Cauchy: t =
 * tan(pi (p - 1/2)); 2 df: t = (2p - 1) / sqrt(2 p (1 - p)), p = 1 - |t| / sqrt(t^2 + 2));
 * printed t tables (t(0.975, 10) = 2.228138852, t(0.995, 5) = 4.032142984, t(0.975, 30) =
 * 2.042272456, t(0.95, 20) = 1.724718243); and sums done by hand, shown beside each row.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stats.h>

#define PI 3.14159265358979323846

static void near(double got, double want, double tol) {
  if (!(fabs(got - want) <= tol)) {
    fail_msg("got %.12g, want %.12g (tolerance %g)", got, want, tol);
  }
}

/* R's sleep data: extra hours of sleep under two drugs, ten patients each. */
static const double sleep_1[10] = {0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0};
static const double sleep_2[10] = {1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4};

static void welch_matches_r_on_the_sleep_data(void **state) {
  (void)state;
  em_stats_summary_t a, b;
  assert_int_equal(em_stats_summarize(sleep_2, 10, &a), 0);
  assert_int_equal(em_stats_summarize(sleep_1, 10, &b), 0);
  near(a.mean, 2.33, 1e-12);
  near(b.mean, 0.75, 1e-12);
  near(b.var, 3.200555555555556, 1e-12);
  near(a.var, 4.009, 1e-12);
  em_welch_t w;
  assert_int_equal(em_stats_welch_summary(&a, &b, &w), 0);
  near(w.t, -1.8608, 5e-5);
  near(w.df, 17.776, 5e-4);
  near(w.p, 0.07939, 5e-6);
  near(w.diff, -1.58, 1e-12);
  double lo, hi;
  assert_int_equal(em_stats_welch_ci(&w, 0.05, &lo, &hi), 0);
  near(lo, -3.3654832, 5e-7);
  near(hi, 0.2054832, 5e-7);
  /* Cohen's d with the pooled sd: -1.58 / sqrt((3.2005556 + 4.009) / 2). */
  near(w.d, -0.8321810813495397, 1e-12);
}

static void welch_equal_variances_two_df_closed_form(void **state) {
  (void)state;
  /* A = {1, 3}, B = {5, 7}: means 2 and 6, variances 2: se = sqrt(2), t = 2 sqrt 2, df = 2,
   * p = 1 - t / sqrt(t^2 + 2) = 1 - sqrt(0.8); 95% CI 4 +- t(0.975, 2) sqrt 2 with
   * t(0.975, 2) = 0.95 / sqrt(2 * 0.975 * 0.025) = 4.302652729749464. */
  em_welch_t w;
  assert_int_equal(em_stats_welch(2, 2, 2, 2, 6, 2, &w), 0);
  near(w.t, 2 * sqrt(2), 1e-12);
  near(w.df, 2, 1e-12);
  near(w.p, 1 - sqrt(0.8), 1e-10);
  near(w.se, sqrt(2), 1e-12);
  near(w.d, 4 / sqrt(2), 1e-12);
  double lo, hi;
  assert_int_equal(em_stats_welch_ci(&w, 0.05, &lo, &hi), 0);
  near(lo, 4 - 4.302652729749464 * sqrt(2), 1e-9);
  near(hi, 4 + 4.302652729749464 * sqrt(2), 1e-9);
  /* A wider level, a wider interval. */
  double lo99, hi99;
  assert_int_equal(em_stats_welch_ci(&w, 0.01, &lo99, &hi99), 0);
  assert_true(lo99 < lo && hi99 > hi);
}

static void welch_ci_without_variance_is_a_point(void **state) {
  (void)state;
  em_welch_t w;
  assert_int_equal(em_stats_welch(5, 10, 0, 5, 12, 0, &w), 0);
  assert_true(w.p == 0);
  double lo, hi;
  assert_int_equal(em_stats_welch_ci(&w, 0.01, &lo, &hi), 0);
  near(lo, 2, 0);
  near(hi, 2, 0);
  assert_int_equal(em_stats_welch_ci(&w, 0, &lo, &hi), -EINVAL);
  assert_int_equal(em_stats_welch_ci(&w, 1, &lo, &hi), -EINVAL);
  assert_int_equal(em_stats_welch_ci(NULL, 0.05, &lo, &hi), -EINVAL);
}

static void t_quantile_matches_tables_and_closed_forms(void **state) {
  (void)state;
  static const struct {
    double p, df, t;
  } table[] = {
      {0.975, 10, 2.228138852}, {0.995, 5, 4.032142984},   {0.975, 30, 2.042272456},
      {0.95, 20, 1.724718243},  {0.025, 10, -2.228138852},
  };
  for (size_t k = 0; k < sizeof(table) / sizeof(table[0]); k++) {
    near(em_stats_t_quantile(table[k].p, table[k].df), table[k].t, 1e-8);
  }
  static const double ps[] = {0.6, 0.9, 0.975, 0.999, 0.3, 0.01};
  for (size_t k = 0; k < sizeof(ps) / sizeof(ps[0]); k++) {
    double p = ps[k];
    double cauchy = tan(PI * (p - 0.5));
    near(em_stats_t_quantile(p, 1), cauchy, 1e-9 * fmax(1, fabs(cauchy)));
    near(em_stats_t_quantile(p, 2), (2 * p - 1) / sqrt(2 * p * (1 - p)), 1e-9);
  }
  /* Large df: the normal quantile 1.959963984540054 at 0.975. */
  near(em_stats_t_quantile(0.975, 1e7), 1.959963984540054, 1e-6);
  near(em_stats_t_quantile(0.5, 3), 0, 0);
  assert_true(isnan(em_stats_t_quantile(0, 3)));
  assert_true(isnan(em_stats_t_quantile(1, 3)));
  assert_true(isnan(em_stats_t_quantile(0.9, 0)));
  assert_true(isnan(em_stats_t_quantile(NAN, 3)));
}

static void two_proportions_by_hand(void **state) {
  (void)state;
  /* 45 of 100 against 60 of 100: pooled 0.525, se = sqrt(0.525 * 0.475 * 0.02) = 0.0706222,
   * z = 0.15 / se = 2.123977, p = erfc(z / sqrt 2) = 0.0336721. */
  em_two_prop_t r;
  assert_int_equal(em_stats_two_prop(45, 100, 60, 100, &r), 0);
  near(r.p_a, 0.45, 1e-15);
  near(r.p_b, 0.60, 1e-15);
  near(r.z, 2.123976976214366, 1e-12);
  near(r.p, 0.03367206885634585, 1e-12);
  assert_int_equal(em_stats_two_prop(60, 100, 45, 100, &r), 0);
  near(r.z, -2.123976976214366, 1e-12);
  /* Nothing or everything on both sides: no evidence either way. */
  assert_int_equal(em_stats_two_prop(0, 50, 0, 70, &r), 0);
  assert_true(r.z == 0 && r.p == 1);
  assert_int_equal(em_stats_two_prop(50, 50, 70, 70, &r), 0);
  assert_true(r.z == 0 && r.p == 1);
  assert_int_equal(em_stats_two_prop(1, 0, 1, 10, &r), -EINVAL);
  assert_int_equal(em_stats_two_prop(11, 10, 1, 10, &r), -EINVAL);
  assert_int_equal(em_stats_two_prop(1, 10, 1, 10, NULL), -EINVAL);
}

static void summary_and_median(void **state) {
  (void)state;
  double x[] = {4, 1, 3, 2};
  em_stats_summary_t s;
  assert_int_equal(em_stats_summarize(x, 4, &s), 0);
  assert_int_equal(s.n, 4);
  near(s.mean, 2.5, 1e-15);
  near(s.var, 5.0 / 3.0, 1e-15); /* (2.25 + 0.25 + 0.25 + 2.25) / 3 */
  near(em_stats_median(x, 4), 2.5, 0);
  near(em_stats_median(x, 3), 2, 0); /* sorted now: {1, 2, 3} */
  assert_true(isnan(em_stats_median(x, 0)));
  assert_int_equal(em_stats_summarize(x, 1, &s), 0);
  assert_true(s.var == 0);
  double bad[] = {1, NAN};
  assert_int_equal(em_stats_summarize(bad, 2, &s), -EINVAL);
  assert_int_equal(em_stats_summarize(NULL, 2, &s), -EINVAL);
  /* Fewer than two on a side: Welch refuses. */
  em_stats_summary_t one = {.n = 1, .mean = 1};
  em_welch_t w;
  assert_int_equal(em_stats_welch_summary(&one, &s, &w), -EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(welch_matches_r_on_the_sleep_data),
      cmocka_unit_test(welch_equal_variances_two_df_closed_form),
      cmocka_unit_test(welch_ci_without_variance_is_a_point),
      cmocka_unit_test(t_quantile_matches_tables_and_closed_forms),
      cmocka_unit_test(two_proportions_by_hand),
      cmocka_unit_test(summary_and_median),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
