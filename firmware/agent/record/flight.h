/*
 * flight.h - the flight recorder: the last seconds of the agent's ticks and of every span it
 * accepted, kept at full rate in fixed rings, and turned into one flight recording
 * (edgemon/flight.h) on an escalation or a cmd/flight: the seconds before the trigger plus a
 * window after it. The tick ring holds each tick's figures (the columns the caller names at
 * start: PMU counters as running totals, target memory, smaps, MemAvailable and PSI, sensors)
 * as they were read on that tick; a figure not read on a tick is left out of it, one that
 * could not be read is ABSENT (null on the wire). The span ring holds every span as drained
 * (stage, frame id, start, duration), its stage as a name in the recorder's own table: a stage
 * slot of the span table that is evicted and reused for another name never changes the name
 * of a span already recorded, and a name leaves the recorder's table only when no span in the
 * ring refers to it.
 *
 *   trigger at T (escalation or command)     pending: the window is [T - pre, T + post]
 *   first tick at or after T + post          em_flight_rec_take(): ticks and spans of the
 *                                            window as an em_flight_t, spans by start
 *   a trigger while one is pending, or       suppressed (counted, not recorded)
 *   within min_gap of the last trigger
 *
 * A span of the window the ring overwrote before the recording was taken is counted in the
 * recording's truncated.spans_overwritten (to the tick: an overwritten span is charged to the
 * tick whose window holds its start).
 *
 * Memory: everything is allocated by em_flight_rec_new() from the options (the rings, the
 * recording's tick array, the name table, the encode buffer of max_bytes);
 * em_flight_rec_bytes() says how much. Nothing is allocated afterwards. Work: O(columns) per
 * tick, O(1) per span (a name compare; a binary search over the tick ring when a span of the
 * last seconds is overwritten), O(spans log spans) per recording at most (the window's spans
 * are sorted by start in place when they arrived out of order; heapsort, no allocation).
 *
 * Owns: its rings and buffers. Borrows the column names and units (they must outlive it).
 * Single-threaded (the loop's thread). Calls proto/ only for its types: the caller encodes.
 */
#ifndef EDGEMON_AGENT_FLIGHT_H
#define EDGEMON_AGENT_FLIGHT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "edgemon/flight.h"
#include "edgemon/proto.h"
#include "edgemon/wire.h"

#define EM_FLIGHT_REC_TICK_SLACK 4u /* Ticks the ring holds beyond (pre + post) / period. */

typedef struct {
  uint64_t period_ns;                /* The agent's tick period (> 0). */
  uint64_t pre_ns;                   /* Kept before a trigger (> 0). */
  uint64_t post_ns;                  /* Recorded after it. */
  uint64_t min_gap_ns;               /* Least time between two triggers recorded. */
  uint64_t hold_ns;                  /* How long a take may come after the window's end with the
                                        window's ticks still in the ring: ticks added to the
                                        ring, as many as EM_FLIGHT_MAX_TICKS leaves (0: none). */
  uint32_t max_spans;                /* Span ring capacity, 1..EM_FLIGHT_MAX_SPANS. */
  uint32_t max_bytes;                /* Encode buffer, 1024..EM_FLIGHT_MAX_BYTES. */
  const em_flight_column_t *columns; /* Copied; the strings are borrowed. */
  size_t n_columns;                  /* 0..EM_FLIGHT_MAX_COLUMNS */
} em_flight_rec_opts_t;

/* What the recorder counted since it started. */
typedef struct {
  uint64_t recordings;   /* Recordings taken. */
  uint64_t suppressed;   /* Triggers not recorded: one pending, or within min_gap. */
  uint64_t overwritten;  /* Spans of a window overwritten before their recording. */
  uint64_t unnamed;      /* Spans not kept: 64 names in use by spans in the ring. */
  uint64_t spans;        /* Spans kept. */
  uint64_t ticks_capped; /* 1 when (pre + post) / period needs more than EM_FLIGHT_MAX_TICKS
                            ticks: the ring holds that many and pre is shorter. */
} em_flight_rec_stats_t;

typedef struct em_flight_rec em_flight_rec_t;

/*
 * Allocates the recorder. Its tick ring holds ceil((pre + post) / period) +
 * EM_FLIGHT_REC_TICK_SLACK ticks, at most EM_FLIGHT_MAX_TICKS, and ceil(hold / period) more
 * where that maximum leaves room. Returns 0 and *out, -EINVAL
 * (NULL, 0 period or pre, a capacity or column count out of range, a NULL column name), or
 * -ENOMEM.
 */
int em_flight_rec_new(em_flight_rec_t **out, const em_flight_rec_opts_t *opts);

/* Frees. NULL is a no-op. */
void em_flight_rec_free(em_flight_rec_t *r);

/* Bytes it allocated (all of it, at start), the ticks and spans its rings hold. */
uint64_t em_flight_rec_bytes(const em_flight_rec_t *r);
uint32_t em_flight_rec_tick_capacity(const em_flight_rec_t *r);
uint32_t em_flight_rec_span_capacity(const em_flight_rec_t *r);

/* How long past a window's end its ticks stay in the ring (opts.hold_ns, less what
 * EM_FLIGHT_MAX_TICKS left out), to the tick. */
uint64_t em_flight_rec_hold_ns(const em_flight_rec_t *r);

/* The least time between two triggers recorded (a reload may change it). */
void em_flight_rec_set_min_gap(em_flight_rec_t *r, uint64_t min_gap_ns);

/*
 * One tick at mono_ns (CLOCK_MONOTONIC, not below the previous tick's): em_flight_rec_tick()
 * returns the slot's values, room for n_columns; the caller fills the columns read on this
 * tick in ascending column order and commits how many with em_flight_rec_commit(). The slot
 * overwrites the oldest tick when the ring is full.
 */
em_flight_value_t *em_flight_rec_tick(em_flight_rec_t *r, uint64_t mono_ns);
void em_flight_rec_commit(em_flight_rec_t *r, size_t n_values);

/*
 * One span as the agent accepted it. `hint` is the stage's index in the caller's table (any
 * number; it only speeds up the name lookup), `stage` its name (1..31 bytes), copied when new.
 * Returns 0, or -ENOSPC when the span is not kept (every one of EM_FLIGHT_MAX_STAGES names is
 * used by a span in the ring: counted in unnamed), -EINVAL for a bad name.
 */
int em_flight_rec_span(em_flight_rec_t *r, size_t hint, const char *stage, uint64_t frame_id,
                       uint64_t start_ns, uint64_t duration_ns);

/*
 * A trigger at mono_ns (wall_ns: its CLOCK_REALTIME). The trigger's strings are copied
 * (truncated to fit). Returns 0 when a recording is now pending, -EBUSY when one is pending
 * already, -EAGAIN within min_gap of the last trigger recorded (both counted in suppressed).
 */
int em_flight_rec_trigger(em_flight_rec_t *r, const em_flight_trigger_t *t, uint64_t mono_ns,
                          uint64_t wall_ns);

/* A recording is pending and its window has ended at now_ns: em_flight_rec_take() is due. */
bool em_flight_rec_due(const em_flight_rec_t *r, uint64_t now_ns);

/*
 * Takes the pending recording: an em_flight_t of the window's ticks and spans, pointing into
 * the recorder (valid until its next call), head.time_ns the trigger's wall time, number the
 * recordings taken before, the stages and columns filled; the caller sets head.session and
 * encodes it (em_flight_encode_fit into em_flight_rec_buffer()). NULL when none is due.
 */
em_flight_t *em_flight_rec_take(em_flight_rec_t *r, uint64_t now_ns);

/*
 * Everything the rings hold now, without taking a recording: every tick and every span (spans
 * ascending by start), the stages and columns, in *out (the trigger and truncation zero).
 * Points into the recorder until its next call; a pending recording is taken as before.
 */
void em_flight_rec_view(em_flight_rec_t *r, em_flight_t *out);

/* The encode buffer: max_bytes bytes. */
uint8_t *em_flight_rec_buffer(em_flight_rec_t *r, size_t *cap);

/* Fills *out. */
void em_flight_rec_stats(const em_flight_rec_t *r, em_flight_rec_stats_t *out);

#endif /* EDGEMON_AGENT_FLIGHT_H */
