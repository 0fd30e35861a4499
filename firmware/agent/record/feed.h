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
 * Owns: the recorder (em_flight_rec_t) and its column map; the verdict of the last rise and
 * that of the pending recording, the durations scratch the verdict sorts (max_spans, at
 * start); the rate limit of its refusal lines. Borrows the dictionary. Single-threaded (the loop's
 * thread); allocates only in em_feed_new.
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
