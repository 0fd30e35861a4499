/*
 * verdict.c - the verdict of `edgemon-cli compare` from per-unit summaries, see verdict.h.
 *
 * The test is Welch's on the unit means (stats.h); the change is measured on the same means,
 * so the size of a change and its significance speak of the same figure. The confidence
 * interval must exclude 0 as well as p < alpha: with Welch's df the two agree, and requiring
 * both keeps the rule readable from the printed figures alone.
 */
#include "verdict.h"

#include <math.h>

void em_verdict_none(em_verdict_t *out, const char *why) {
  *out = (em_verdict_t){
      .change_pct = NAN, .p = NAN, .d = NAN, .df = NAN, .ci_lo = NAN, .ci_hi = NAN, .verdict = why};
}

void em_verdict_judge(const em_verdict_side_t *a, const em_verdict_side_t *b,
                      const em_verdict_opts_t *o, em_verdict_t *out) {
  em_verdict_none(out, EM_VERDICT_TOO_FEW_DEVICES);
  if (a->devices < o->min_devices || b->devices < o->min_devices) {
    return;
  }
  out->verdict = EM_VERDICT_TOO_FEW;
  em_welch_t w;
  if (em_stats_welch_summary(&a->units, &b->units, &w) != 0 ||
      em_stats_welch_ci(&w, o->alpha, &out->ci_lo, &out->ci_hi) != 0) {
    return;
  }
  out->judged = true;
  out->p = w.p;
  out->d = w.d;
  out->df = w.df;
  double ma = a->has_figure ? a->figure : a->units.mean;
  double mb = b->has_figure ? b->figure : b->units.mean;
  out->change_pct = ma > 0 ? (mb - ma) / ma * 100.0 : mb > 0 ? INFINITY : 0;
  bool significant = w.p < o->alpha;
  /* The interval must exclude 0 on the side of the change (with a separate figure it may
   * disagree with the means; then the verdict is no difference). */
  if (significant && out->change_pct > o->threshold_pct && out->ci_lo > 0) {
    out->verdict = EM_VERDICT_REGRESSED;
  } else if (significant && out->change_pct < -o->threshold_pct && out->ci_hi < 0) {
    out->verdict = EM_VERDICT_IMPROVED;
  } else {
    out->verdict = EM_VERDICT_SAME;
  }
}

void em_verdict_degrade(const em_verdict_levels_t *a, const em_verdict_levels_t *b, double alpha,
                        em_verdict_degrade_t *out) {
  *out = (em_verdict_degrade_t){.share_a = NAN, .share_b = NAN, .z = NAN, .p = NAN};
  if (a->windows > 0) {
    out->share_a = (double)a->degraded / (double)a->windows;
  }
  if (b->windows > 0) {
    out->share_b = (double)b->degraded / (double)b->windows;
  }
  if (a->windows == 0 || b->windows == 0 || a->units < 2 || b->units < 2) {
    return;
  }
  uint64_t xa = (uint64_t)llround(out->share_a * (double)a->units);
  uint64_t xb = (uint64_t)llround(out->share_b * (double)b->units);
  em_two_prop_t t;
  if (em_stats_two_prop(xa, a->units, xb, b->units, &t) != 0) {
    return;
  }
  out->judged = true;
  out->z = t.z;
  out->p = t.p;
  out->more_often = t.p < alpha && out->share_b > out->share_a;
}
