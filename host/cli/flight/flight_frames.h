/*
 * flight_frames.h - what edgemon-cli flight reads out of a decoded flight recording
 * (edgemon/flight.h): its frames (the spans sharing a frame id, with per-stage durations, the
 * frame's start and end and its total), the tick whose window holds a given time, and a tick's
 * figure of a column as the table shows it (counters as the increase since the previous tick
 * that carried them).
 *
 * A frame's total is its wall time: from the earliest start of its spans to the latest end.
 * A tick's window is (previous tick, tick]; the first tick's is (tick - period, tick].
 *
 * Owns the frame table em_flight_frames() allocates (em_flight_frames_free()).
 */
#ifndef EM_CLI_FLIGHT_FRAMES_H
#define EM_CLI_FLIGHT_FRAMES_H

#include <edgemon/flight.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define EM_FRAME_NO_STAGE UINT64_MAX /* stage_ns of a stage the frame has no span of. */

typedef struct {
  uint64_t frame_id;
  uint64_t start_ns; /* Device CLOCK_MONOTONIC. */
  uint64_t end_ns;
  uint64_t total_ns;  /* end_ns - start_ns */
  uint64_t *stage_ns; /* n_stages entries: the stage's span durations added, or
                         EM_FRAME_NO_STAGE. */
  size_t n_spans;
} em_frame_t;

typedef struct {
  em_frame_t *v; /* Ascending frame id. */
  size_t n;
  uint64_t *durations; /* The stage_ns arrays, n * n_stages. */
} em_frames_t;

/* Groups f's spans into frames. Returns 0 or -ENOMEM. */
int em_flight_frames(const em_flight_t *f, em_frames_t *out);
void em_flight_frames_free(em_frames_t *fr);

/* Indices of the frames, slowest first (total_ns descending, then frame id ascending), into
 * order[0..fr->n) (caller's array). */
void em_flight_frames_slowest(const em_frames_t *fr, size_t *order);

/* The tick whose window holds t_ns, or f->n_ticks when none does. */
size_t em_flight_tick_at(const em_flight_t *f, uint64_t t_ns);

/*
 * The figure of `column` in tick `tick`: for a counter the increase since the previous tick
 * that carried the column (*v UINT), for other kinds the value as carried. Returns false when
 * the tick does not carry the column, or (counters) no earlier tick did. A carried null is
 * returned as ABSENT with true.
 */
bool em_flight_tick_figure(const em_flight_t *f, size_t tick, uint32_t column, em_value_t *v);

/* A value as a double (ABSENT: NaN). */
double em_flight_value_num(const em_value_t *v);

/* A value as the text views write it: integers whole, floats to 6 significant digits, ABSENT
 * as "null". */
void em_flight_value_print(FILE *out, const em_value_t *v);

/* True when some tick has a figure of `column` that is a number: false for a counter the
 * board or the target does not support (carried as null in every tick) and for a column no
 * tick carried. The table and the drawing show only measured columns and name the others. */
bool em_flight_column_measured(const em_flight_t *f, uint32_t column);

#endif /* EM_CLI_FLIGHT_FRAMES_H */
