/*
 * feed.h - feeding the flight recorder (flight.h) from the agent's tick and publishing its
 * recordings. The feed picks the recorder's columns from the metric dictionary (the target's
 * figures, smaps, MemAvailable and PSI, the sensors; not the agent's own counters), hands the
 * recorder each tick's values as read on that tick (the slower cadences only on the ticks that
 * read them), each accepted span and each trigger, writes the flight.* figures, and encodes
 * the recording whose window has ended into the recorder's buffer and hands it to the caller's
 * publish callback (live, or the spool).
 *
 *   em_feed_diagnose  every change of level: the NOMINAL stretches; on a rise, the verdict
 *                     (diagnose.h) over what the rings hold, for the state message and the
 *                     recording the escalation starts
 *   em_feed_trigger   escalation or cmd/flight: a recording, or counted (flight.suppressed)
 *   em_feed_tick      the tick's columns; then em_feed_publish the ended recording, if any
 *
 * With [flight] enabled false the feed exists but holds no recorder: its figures are absent,
 * a cmd/flight is refused with one rate-limited line, and nothing else happens.
 *
 * A recording whose verdict names a more_work cause may wait past its window's end for the
 * functions whose share grew, which the profiler works out when the escalation's profile window
 * resolves (em_feed_await_functions, em_feed_functions; docs/DIAGNOSIS.md): it is published when
 * they come, or EM_FEED_HOLD_NS past its end without them.
 *
 * Owns: the recorder (em_flight_rec_t) and its column map; the verdict of the last rise and
 * that of the pending recording (with the functions it waits for), the durations scratch the
 * verdict sorts (max_spans, at start); the rate limit of its refusal lines. Borrows the dictionary.
 * Single-threaded (the loop's thread); allocates only in em_feed_new.
 */
#ifndef EDGEMON_AGENT_FEED_H
#define EDGEMON_AGENT_FEED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "edgemon/flight.h"
#include "edgemon/proto.h"
#include "figures.h"
#include "others.h"

/* Which of the slower cadences were read on this tick (em_feed_tick's `fresh`). */
#define EM_FEED_SMAPS   1u /* smaps_rollup (PSS, anon, swap). */
#define EM_FEED_SYSTEM  2u /* MemAvailable and PSI. */
#define EM_FEED_SENSORS 4u /* The board's sensors. */

/* How long past its window's end a recording may wait for the functions of its more_work cause
 * (em_feed_await_functions): a profile window of 5 s (the default [profile] seconds) ends 3 s
 * after a recording of the default post_seconds (2 s), then waits up to 1 s for the client's
 * Python stacks and resolves (a fraction of a second, seconds under a sanitizer): 15 s covers
 * it on a loaded board with room. The recorder's tick ring holds that much more (flight.h). */
#define EM_FEED_HOLD_NS (15ull * 1000000000ull)

/*
 * Hands an encoded recording on: `buf` is borrowed for the call; `may_spool` false when the
 * agent is stopping (live or lost). Returns 0, or a negative errno when it was lost.
 */
typedef int (*em_feed_publish_fn)(void *ctx, const uint8_t *buf, size_t len, bool may_spool);

typedef struct {
  bool enabled;        /* [flight] enabled: false, no recorder. */
  em_figures_t *figs;  /* The dictionary: borrowed, outlives the feed. */
  uint64_t period_ns;  /* The tick period. */
  uint64_t pre_ns;     /* [flight] pre_seconds. */
  uint64_t post_ns;    /* [flight] post_seconds. */
  uint64_t min_gap_ns; /* [flight] min_gap_seconds. */
  uint32_t max_spans;  /* [flight] max_spans. */
  uint32_t max_bytes;  /* [flight] max_bytes. */
  uint32_t session;    /* The agent's session, stamped on each recording. */
  em_feed_publish_fn publish;
  void *ctx; /* publish's. */
} em_feed_opts_t;

typedef struct em_feed em_feed_t;

/* Builds the feed (and the recorder when enabled). Returns 0 and *out, -EINVAL, -ENOMEM, or
 * the recorder's error (logged). */
int em_feed_new(em_feed_t **out, const em_feed_opts_t *opts);

/* Frees. NULL is a no-op. */
void em_feed_free(em_feed_t *f);

/* The recorder as the birth announces it ({.on = false} when off). */
em_flight_recorder_t em_feed_describe(const em_feed_t *f);

/* [flight] min_gap_seconds after a reload. */
void em_feed_set_min_gap(em_feed_t *f, uint64_t min_gap_ns);

/* A trigger (escalation or cmd/flight) at mono_ns: recorded when the rate limit allows, else
 * counted and said (one line per EM_LOG_LIMIT_S). */
void em_feed_trigger(em_feed_t *f, const em_flight_trigger_t *t, uint64_t mono_ns);

/*
 * A change of level to `level` at mono_ns (the feed keeps the level before it, NOMINAL at
 * start): the feed keeps when the level was NOMINAL (the verdict's baseline). On a rise of a
 * stage rule (stage and statistic, the rule's: budget.h em_budget_change_t) it computes the
 * verdict over the rings, window_ns the budget window (0: the tick period), `bound` the rule's
 * bound (a latency bound in ns trims the baseline: diagnose.h), `others` who else
 * ran (collect/others.h: the latest scan; NULL: none) named by a cpu_contention cause (their
 * share of one CPU, at most 1), logs its top cause
 * and its cost, and keeps it for the state message (em_feed_verdict) and for the recording the
 * escalation's em_feed_trigger starts. Returns the verdict, or NULL: not a rise, no recorder,
 * no stage rule, or no span of the stage in the breach window.
 */
const em_proto_verdict_t *em_feed_diagnose(em_feed_t *f, em_level_t level, const char *stage,
                                           const char *statistic, uint64_t window_ns,
                                           const em_value_t *bound, uint64_t mono_ns,
                                           const em_others_list_t *others);

/* The verdict of the last change of level, for its state message (key 15), or NULL: none.
 * Owned by the feed, valid until the next em_feed_diagnose. */
const em_proto_verdict_t *em_feed_verdict(const em_feed_t *f);

/* CLOCK_MONOTONIC ns since which the level is NOMINAL (0: since start), or UINT64_MAX when it
 * is not NOMINAL. The profiler's baseline windows wait for a stretch of it (profiling.h). */
uint64_t em_feed_nominal_since(const em_feed_t *f);

/*
 * The profiler opened the escalation's window (profiling.h) and has a baseline of `stage`: when
 * the pending recording's verdict names a more_work cause of that stage, the recording waits
 * for em_feed_functions, until until_ns (CLOCK_MONOTONIC) at the latest and never longer than
 * the recorder's ring keeps its window (EM_FEED_HOLD_NS past its end), before it is published.
 * Only the recording the latest trigger started, once. Returns true when it waits; false:
 * nothing to wait for (no recording started by the latest trigger, no verdict, no more_work
 * cause, another stage).
 */
bool em_feed_await_functions(em_feed_t *f, const char *stage, uint64_t until_ns);

/*
 * The functions whose share of the stage's samples grew (`fns[0..n)`, names copied, at most
 * EM_PROTO_VERDICT_MAX_FUNCTIONS kept) for the recording that waits: into its verdict's
 * more_work cause; it is published on the next tick (n 0: without). Nothing waits: ignored.
 */
void em_feed_functions(em_feed_t *f, const em_proto_verdict_function_t *fns, size_t n);

/* An accepted span; `hint` is the stage's slot (the recorder keys spans by the name). */
void em_feed_span(em_feed_t *f, size_t hint, const char *stage, uint64_t frame_id,
                  uint64_t start_ns, uint64_t duration_ns);

/* This tick's columns from samples[alias]; `fresh`: EM_FEED_* read on this tick. */
void em_feed_tick(em_feed_t *f, uint64_t now_ns, const em_sample_t *samples, unsigned fresh);

/* The flight.* figures into samples[alias] (absent with the recorder off). */
void em_feed_figures(em_feed_t *f, em_sample_t *samples);

/* The recording whose window has ended at now_ns, if any: encoded and published. */
void em_feed_publish(em_feed_t *f, uint64_t now_ns, bool may_spool);

/* Once per tick: the count of refusal lines held back, when their interval is over. */
void em_feed_flush_log(em_feed_t *f, uint64_t now_ns);

#endif /* EDGEMON_AGENT_FEED_H */
