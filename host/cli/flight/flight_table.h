/*
 * flight_table.h - a flight recording as edgemon-cli flight prints it for a person: the
 * breach's verdict when it carries one (flight_verdict.h: the stage's excess latency and its
 * causes, ranked), the trigger (cause, level, rule, value and bound, reason, time), the window
 * and what was left
 * out, then the `top` slowest frames (flight_frames.h), one line each with the frame id, its
 * start's offset from the trigger, its total and its per-stage durations (ms), followed by an
 * indented line with the figures of the tick whose window holds the frame's end (counters as
 * the increase over that tick, "+N"; other columns as read; a column with no number in that
 * tick is left out). Columns with no number in any tick are named once, under the trigger, as
 * not measured.
 *
 * em_flight_line() is the one line `edgemon-cli tail` prints per arriving recording.
 *
 * Owns nothing (em_flight_line(): a decode scratch for the call).
 */
#ifndef EM_CLI_FLIGHT_TABLE_H
#define EM_CLI_FLIGHT_TABLE_H

#include <edgemon/flight.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Prints the table. Returns 0, or -ENOMEM when the frames could not be grouped. */
int em_flight_table(FILE *out, const em_flight_t *f, const char *title, size_t top);

/*
 * Decodes the recording in cbor[0..len) published by `device` and prints one line about it:
 * clock, device, "flight", number, cause, level, rule, ticks, spans, bytes; with json one
 * object {"device", "flight": {...}}. Returns 0, or the decoder's error (nothing printed;
 * *error_offset set).
 */
int em_flight_line(FILE *out, const char *device, const uint8_t *cbor, size_t len, bool json,
                   size_t *error_offset);

#endif /* EM_CLI_FLIGHT_TABLE_H */
