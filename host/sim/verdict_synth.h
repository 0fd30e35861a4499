/*
 * verdict_synth.h - a synthetic breach verdict (em_proto_verdict_t, proto.h) for edgemon-sim:
 * what an agent would say about why its budget stage got slow when it escalates, carried by the
 * simulated DEGRADED state message (key 15) and, with --flights, by that excursion's flight
 * recording (key 16), so the host side has verdicts to store and show without a board.
 *
 * The verdict compares the stage's p99 over 12 NOMINAL windows (baseline) with the breach
 * window's (the state's measured value). The first cause is one of cpu_contention (another
 * process named, with its share), memory_pressure or more_work (functions named, with their
 * growth), chosen by `seed`; a second, smaller cause and the unexplained rest follow, shares in
 * descending order, each with its evidence. Draws are a function of `seed` alone.
 *
 * Owns nothing: the caller's verdict is filled in place; its strings are static.
 */
#ifndef EM_SIM_VERDICT_SYNTH_H
#define EM_SIM_VERDICT_SYNTH_H

#include <edgemon/proto.h>
#include <stdint.h>

/*
 * Fills *v with the verdict of `stage` (borrowed: it must outlive *v) whose p99 went from
 * baseline_ns to breach_ns (breach_ns > baseline_ns). The result passes em_proto_verdict_check().
 */
void em_synth_verdict(em_proto_verdict_t *v, const char *stage, uint64_t baseline_ns,
                      uint64_t breach_ns, uint64_t seed);

#endif /* EM_SIM_VERDICT_SYNTH_H */
