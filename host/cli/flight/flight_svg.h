/*
 * flight_svg.h - a flight recording drawn as one self-contained SVG file (edgemon-cli flight
 * --svg): a lane per stage with each span a bar on a common time axis (ms from the trigger),
 * the pre-trigger and post-trigger parts shaded, the trigger a vertical line (id "trigger"),
 * spans of the trigger's stage longer than the rule's bound coloured as over budget, and
 * beneath, on the same axis, a small line chart per tick column (counters as increases per
 * tick). No scripts, no external references, a generic font family only.
 *
 * Every span is one <rect class="span"> (class "span over" when over budget) with a <title>
 * naming its frame, stage and duration. Owns nothing.
 */
#ifndef EM_CLI_FLIGHT_SVG_H
#define EM_CLI_FLIGHT_SVG_H

#include <edgemon/flight.h>
#include <stdio.h>

/* Writes the SVG of f to out, titled `title` (plain text). Returns 0, or -1 when writing
 * failed. */
int em_flight_svg(FILE *out, const em_flight_t *f, const char *title);

#endif /* EM_CLI_FLIGHT_SVG_H */
