/*
 * report.c - see report.h.
 */
#define _POSIX_C_SOURCE 200809L

#include "report.h"

#include <errno.h>
#include <stdlib.h>

#include "hist.h"

/* The spans.dropped rows of the dictionary follow em_spans_drop_t (figures.h). */
_Static_assert(
    EM_FIG_SPANS_DROPPED_MALFORMED + EM_SPANS_DROP_MALFORMED == EM_FIG_SPANS_DROPPED_MALFORMED &&
        EM_FIG_SPANS_DROPPED_MALFORMED + EM_SPANS_DROP_VERSION == EM_FIG_SPANS_DROPPED_VERSION &&
        EM_FIG_SPANS_DROPPED_MALFORMED + EM_SPANS_DROP_SIZE == EM_FIG_SPANS_DROPPED_SIZE &&
        EM_FIG_SPANS_DROPPED_MALFORMED + EM_SPANS_DROP_DISALLOWED ==
            EM_FIG_SPANS_DROPPED_DISALLOWED &&
        EM_FIG_SPANS_DROPPED_MALFORMED + EM_SPANS_DROP_OVERFLOW == EM_FIG_SPANS_DROPPED_OVERFLOW &&
        EM_SPANS_DROP_COUNT == 5,
    "spans.dropped rows of EM_FIGURES follow em_spans_drop_t");

struct em_spans_report {
  em_spans_t *spans;
  em_rings_t *rings;
  const em_figures_t *figs;
  size_t max_stages;
  em_stage_t *stages;   /* max_stages windows for the data message. */
  em_bucket_t *buckets; /* max_stages * EM_SPANS_REPORT_BUCKETS. */
};

int em_spans_report_new(em_spans_report_t **out, em_spans_t *spans, em_rings_t *rings,
                        const em_figures_t *figs, size_t max_stages) {
  if (!out || !spans || !rings || !figs || max_stages == 0) {
    return -EINVAL;
  }
  em_spans_report_t *r = calloc(1, sizeof(*r));
  if (!r) {
    return -ENOMEM;
  }
  *r = (em_spans_report_t){.spans = spans, .rings = rings, .figs = figs, .max_stages = max_stages};
  r->stages = calloc(max_stages, sizeof(*r->stages));
  r->buckets = calloc(max_stages * EM_SPANS_REPORT_BUCKETS, sizeof(*r->buckets));
  if (!r->stages || !r->buckets) {
    em_spans_report_free(r);
    return -ENOMEM;
  }
  *out = r;
  return 0;
}

void em_spans_report_free(em_spans_report_t *r) {
  if (!r) {
    return;
  }
  free(r->stages);
  free(r->buckets);
  free(r);
}

static void put(const em_spans_report_t *r, em_sample_t *samples, em_figure_t f, uint64_t v) {
  em_figures_set_u(samples, em_figures_alias(r->figs, f), v);
}

void em_spans_report_figures(const em_spans_report_t *r, em_sample_t *samples) {
  const em_rings_stats_t *rs = em_rings_stats(r->rings);
  put(r, samples, EM_FIG_SPANS_RING, rs->spans);
  put(r, samples, EM_FIG_SPANS_DATAGRAM, em_spans_counts(r->spans)->datagram_spans);
  put(r, samples, EM_FIG_RING_LOST_OVERWRITTEN, rs->overwritten);
  put(r, samples, EM_FIG_RING_LOST_BAD_SLOT, rs->bad_slot);
  put(r, samples, EM_FIG_RING_LOST_BAD_HEAD, rs->bad_head);
  put(r, samples, EM_FIG_RING_LOST_SKIPPED, rs->skipped);
  put(r, samples, EM_FIG_RINGS_ACTIVE, em_rings_active(r->rings));
  put(r, samples, EM_FIG_RINGS_REFUSED, rs->refused);
  put(r, samples, EM_FIG_SPANS_FDS_CLOSED, em_spans_counts(r->spans)->fds_closed);
  put(r, samples, EM_FIG_SPANS_RECEIVED, em_spans_counts(r->spans)->received);
  for (int why = 0; why < EM_SPANS_DROP_COUNT; why++) {
    put(r, samples, (em_figure_t)(EM_FIG_SPANS_DROPPED_MALFORMED + why),
        em_spans_dropped(r->spans, (em_spans_drop_t)why));
  }
  put(r, samples, EM_FIG_SPANS_STAGES, em_spans_stage_count(r->spans));
  put(r, samples, EM_FIG_SPANS_EVICTED, em_spans_evictions(r->spans));
  put(r, samples, EM_FIG_MODEL_RECEIVED, em_spans_counts(r->spans)->models_accepted);
  put(r, samples, EM_FIG_MODEL_REFUSED, em_spans_counts(r->spans)->models_refused);
}

size_t em_spans_report_cap(const em_spans_report_t *r) {
  size_t n = em_spans_stage_count(r->spans);
  size_t cap = n ? 48000 / (n * 4) : EM_SPANS_REPORT_BUCKETS; /* ~4 bytes per bucket encoded */
  return cap < EM_SPANS_REPORT_BUCKETS ? cap : EM_SPANS_REPORT_BUCKETS;
}

const em_stage_t *em_spans_report_stages(em_spans_report_t *r, size_t cap, size_t *n) {
  size_t count = em_spans_stage_count(r->spans);
  count = count < r->max_stages ? count : r->max_stages;
  cap = cap < EM_SPANS_REPORT_BUCKETS ? cap : EM_SPANS_REPORT_BUCKETS;
  for (size_t i = 0; i < count; i++) {
    em_stage_stats_t *st = em_spans_stage(r->spans, i);
    int rc = em_hist_to_stage(&st->window, st->name, r->buckets + i * EM_SPANS_REPORT_BUCKETS, cap,
                              &r->stages[i]);
    if (rc < 0) {
      /* Only with a cap of 1 bucket: send the stage as idle rather than a bad window. */
      r->stages[i] = (em_stage_t){.name = st->name};
    }
  }
  *n = count;
  return r->stages;
}
