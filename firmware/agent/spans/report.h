/*
 * report.h - what the spans room reports on every tick: its figures (span and ring counters,
 * drops by reason, the stage table's size and evictions, model datagrams) written into the
 * tick's samples, and the stage windows of the data message (each stage's histogram with at
 * most `cap` buckets: the loop halves cap until the message fits).
 *
 * Owns: the stage windows and their buckets (max_stages x EM_SPANS_REPORT_BUCKETS, allocated
 * once). Borrows the span socket, the rings and the dictionary. Single-threaded (the loop's
 * thread).
 */
#ifndef EDGEMON_AGENT_REPORT_H
#define EDGEMON_AGENT_REPORT_H

#include <stddef.h>

#include "edgemon/proto.h"
#include "figures.h"
#include "rings.h"
#include "spans.h"

#define EM_SPANS_REPORT_BUCKETS 256u /* Histogram buckets per stage window at most. */

typedef struct em_spans_report em_spans_report_t;

/* Returns 0 and *out, -EINVAL or -ENOMEM. Everything is borrowed and must outlive it. */
int em_spans_report_new(em_spans_report_t **out, em_spans_t *spans, em_rings_t *rings,
                        const em_figures_t *figs, size_t max_stages);

/* Frees. NULL is a no-op. */
void em_spans_report_free(em_spans_report_t *r);

/* The spans', rings' and model datagrams' figures into samples[alias]. */
void em_spans_report_figures(const em_spans_report_t *r, em_sample_t *samples);

/* Buckets per stage window so that every stage fits in one message at full size. */
size_t em_spans_report_cap(const em_spans_report_t *r);

/* The stage windows with at most `cap` buckets each (*n of them); borrowed until the next
 * call. A window that cannot be cut to cap (a cap of 1) goes as an idle stage. */
const em_stage_t *em_spans_report_stages(em_spans_report_t *r, size_t cap, size_t *n);

#endif /* EDGEMON_AGENT_REPORT_H */
