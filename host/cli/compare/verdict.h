/*
 * verdict.h - the one verdict of `edgemon-cli compare`, for recordings and for the fleet: from
 * the per-unit figures of a baseline A and a candidate B, whether B regressed, improved, or
 * shows no significant difference, with the figures behind it (stats.h).
 *
 * A unit is what one sample of the test stands for: a device-window (the default) or, for the
 * file compare's --unit span, a single span. Pure; no I/O, no allocation.
 */
#ifndef EM_CLI_VERDICT_H
#define EM_CLI_VERDICT_H

#include <stats.h>
#include <stdbool.h>
#include <stdint.h>

#define EM_VERDICT_REGRESSED       "regressed"
#define EM_VERDICT_IMPROVED        "improved"
#define EM_VERDICT_SAME            "no significant difference"
#define EM_VERDICT_TOO_FEW_DEVICES "too few devices"
#define EM_VERDICT_TOO_FEW         "too few"
#define EM_VERDICT_MISSING         "missing"

typedef struct {
  double threshold_pct; /* Smallest change of the means that counts, in percent. */
  double alpha;         /* Significance level; the interval is at 1 - alpha. */
  unsigned min_devices; /* Devices each side needs; 0: no such rule (span units). */
} em_verdict_opts_t;

/* One side: the summary of its per-unit values and how many devices they came from. */
typedef struct {
  em_stats_summary_t units;
  uint64_t devices;
  bool has_figure; /* The change is judged on `figure` (e.g. a span p99) instead of the mean. */
  double figure;
} em_verdict_side_t;

typedef struct {
  bool judged;         /* The test ran: enough devices and units on both sides. */
  double change_pct;   /* (mean B - mean A) / mean A * 100; NAN when not judged. */
  double p, d, df;     /* Welch's two-sided p, Cohen's d, degrees of freedom; NAN if not judged. */
  double ci_lo, ci_hi; /* Interval (1 - alpha) of mean B - mean A; NAN if not judged. */
  const char *verdict; /* One of the EM_VERDICT_* strings. */
} em_verdict_t;

/*
 * Judges B against A: "too few devices" when a side has fewer than min_devices devices, "too
 * few" when it has fewer than 2 units; else "regressed" when p < alpha, B's mean is more than
 * threshold percent above A's and the interval excludes 0; "improved" the same way below; else "no
 * significant difference".
 */
void em_verdict_judge(const em_verdict_side_t *a, const em_verdict_side_t *b,
                      const em_verdict_opts_t *o, em_verdict_t *out);

/* No verdict: not judged, every figure NAN, verdict `why` (EM_VERDICT_MISSING when a stage
 * is on one side only). */
void em_verdict_none(em_verdict_t *out, const char *why);

/* How often each side degraded: windows in DEGRADED or CRITICAL among all its windows. */
typedef struct {
  uint64_t degraded, windows; /* Agent windows (data messages). */
  uint64_t units;             /* Device-windows they fall in: the sample size of the test. */
} em_verdict_levels_t;

typedef struct {
  bool judged;
  double share_a, share_b; /* degraded / windows; NAN without windows. */
  double z, p;             /* Two-proportion z-test on device-windows; NAN if not judged. */
  bool more_often;         /* B degrades significantly more often (p < alpha, share up). */
} em_verdict_degrade_t;

/*
 * Compares the shares of degraded windows. The test counts device-windows, not agent
 * windows: each side's share is applied to its unit count (x = share * units, n = units), since
 * the windows of one excursion are not independent. Not judged when a side has no windows or
 * fewer than 2 units.
 */
void em_verdict_degrade(const em_verdict_levels_t *a, const em_verdict_levels_t *b, double alpha,
                        em_verdict_degrade_t *out);

#endif /* EM_CLI_VERDICT_H */
