/*
 * spanlog.h - the spans of one profiling window, kept to tell which stage each sample fell in.
 * The span rings name their writer thread (rings.h), so a span is a (tid, stage, start, end)
 * interval; a sample of thread tid at time t belongs to the innermost span of that thread that
 * covers t (nested spans: the one that started last), or to no stage.
 *
 * Bounded: at most max_spans spans and EM_PROFILE_MAX_STAGES stage names per window, sized at
 * em_spanlog_new(); a span past either bound is counted, never stored. Spans whose writer thread
 * is unknown (tid 0), or that end before the window starts, are counted and left out. Times are
 * CLOCK_MONOTONIC, the clock of spans and of the sampler's perf records.
 *
 * Lookups need em_spanlog_seal() first (it sorts the log by thread and start); a lookup walks
 * back at most EM_SPANLOG_NESTING spans of its thread from the last one that started at or
 * before t, so it is O(log n) whatever the samples.
 *
 * Owns its arrays. Single-threaded: the loop adds while the window samples; the worker seals
 * and looks up after the window closed (the loop adds nothing then).
 */
#ifndef EDGEMON_AGENT_SPANLOG_H
#define EDGEMON_AGENT_SPANLOG_H

#include <stddef.h>
#include <stdint.h>

#include "edgemon/profile.h"
#include "edgemon/wire.h"

#define EM_SPANLOG_NESTING 16u /* Spans a lookup looks back over, per thread. */

typedef struct {
  uint64_t kept;      /* Spans stored. */
  uint64_t full;      /* Spans not stored: the log was full. */
  uint64_t no_thread; /* Spans whose ring named no thread of the target. */
  uint64_t stage_cut; /* Spans of a stage beyond EM_PROFILE_MAX_STAGES names. */
} em_spanlog_stats_t;

typedef struct em_spanlog em_spanlog_t;

/* Allocates a log of max_spans (>= 1) spans. Returns 0 and *out, -EINVAL or -ENOMEM. */
int em_spanlog_new(em_spanlog_t **out, uint32_t max_spans);
void em_spanlog_free(em_spanlog_t *l);
uint64_t em_spanlog_bytes(const em_spanlog_t *l);

/* Empties it for a window that starts at from_ns. */
void em_spanlog_reset(em_spanlog_t *l, uint64_t from_ns);

/* One span of thread tid: stage (a valid stage name) from start_ns for duration_ns. */
void em_spanlog_add(em_spanlog_t *l, uint32_t tid, const char *stage, uint64_t start_ns,
                    uint64_t duration_ns);

/* Sorts the log for lookups; after it, em_spanlog_add() is not called until the next reset. */
void em_spanlog_seal(em_spanlog_t *l);

/* The stage (an index into em_spanlog_stages()) of thread tid at t_ns, or EM_PROFILE_NO_STAGE;
 * with a stage, the span's start and end go to *start_ns and *end_ns (each may be NULL). */
uint32_t em_spanlog_stage(const em_spanlog_t *l, uint32_t tid, uint64_t t_ns, uint64_t *start_ns,
                          uint64_t *end_ns);

/* The stage names stored, in the order first seen; *n their count. */
const char *const *em_spanlog_stages(const em_spanlog_t *l, size_t *n);

const em_spanlog_stats_t *em_spanlog_stats(const em_spanlog_t *l);

#endif /* EDGEMON_AGENT_SPANLOG_H */
