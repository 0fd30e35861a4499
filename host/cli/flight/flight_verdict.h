/*
 * flight_verdict.h - the breach's verdict (edgemon/proto.h em_proto_verdict_t) as edgemon-cli
 * writes it for a person: a head line naming the stage, the statistic, its value against the
 * NOMINAL baseline and the excess, then one line per cause, in the order the agent ranked them (by
 * share of the excess):
 *
 *   infer p99 61.2 ms against 26.0 ms over 12 NOMINAL windows (+35.2 ms):
 *     1. cpu contention    81%  runq delay 28.4 ms/frame, ...; ran: stress-ng (4122) 92%, ...
 *     3. more work          9%  cpu ms per frame delta 3.1; grew: sgemm_ +6 pts, ...
 *
 * Evidence figures are named from their wire names: '_' read as a space, and the unit
 * suffixes _ms_per_frame, _per_frame, _ms, _ns and _pct written after the value (ms/frame,
 * /frame, ms, ns, %). `edgemon-cli flight` prints the whole verdict above the frames,
 * `edgemon-cli tail` its top causes under the level change that carries it.
 *
 * Owns nothing; writes only to `out`.
 */
#ifndef EM_CLI_FLIGHT_VERDICT_H
#define EM_CLI_FLIGHT_VERDICT_H

#include <edgemon/proto.h>
#include <stddef.h>
#include <stdio.h>

/*
 * Writes v: the head line, then at most max_causes causes (0: all; the rest counted on a last
 * line) with at most max_items evidence figures, processes and functions each (0: all; the
 * rest counted as "+N"). Every line starts with `indent`.
 */
void em_flight_verdict_print(FILE *out, const em_proto_verdict_t *v, const char *indent,
                             size_t max_causes, size_t max_items);

/*
 * Writes a line per cause of v that names functions whose share grew (a more_work cause's, filled
 * in by the agent once the escalation's profile window resolved): "<indent><stage> <cause>:
 * grew: f +x pts, ..." with at most max_items functions (0: all). Nothing when none names any.
 */
void em_flight_verdict_functions(FILE *out, const em_proto_verdict_t *v, const char *indent,
                                 size_t max_items);

#endif /* EM_CLI_FLIGHT_VERDICT_H */
