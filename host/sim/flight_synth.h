/*
 * flight_synth.h - a synthetic flight recording (edgemon/flight.h) for edgemon-sim --flights:
 * what an agent would publish when its percentile budget escalates to DEGRADED, so the host
 * side (aggregator, edgemon-cli flight) has recordings to store and show without a board.
 *
 * The recording covers EM_SYNTH_PRE_NS before the trigger and EM_SYNTH_POST_NS after it: frames
 * at 30 per second, each a span per stage run one after the other (log-normal durations around
 * the stage's median; the budget stage EM_SYNTH_SLOW_FACTOR times slower within
 * EM_SYNTH_SLOW_NS of the trigger), and a tick every EM_SYNTH_TICK_NS with context switches and
 * cache misses (counters), rss, a SoC temperature, and cpu pressure on every fifth tick only
 * (a slower cadence, as the agent reads PSI). Draws are a function of `seed` alone.
 *
 * Owns nothing: the caller's buffer receives the encoding.
 */
#ifndef EM_SIM_FLIGHT_SYNTH_H
#define EM_SIM_FLIGHT_SYNTH_H

#include <edgemon/flight.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EM_SYNTH_PRE_NS      2000000000ull
#define EM_SYNTH_POST_NS     1000000000ull
#define EM_SYNTH_TICK_NS     100000000ull
#define EM_SYNTH_FRAME_NS    33333333ull
#define EM_SYNTH_SLOW_NS     500000000ull
#define EM_SYNTH_SLOW_FACTOR 3.5

typedef struct {
  uint32_t session;
  uint32_t number;          /* Recording number within the session. */
  uint64_t time_ns;         /* CLOCK_REALTIME of the trigger. */
  uint64_t trigger_mono_ns; /* CLOCK_MONOTONIC of the trigger (>= EM_SYNTH_PRE_NS). */
  const char *const *stages;
  size_t n_stages;         /* 1..EM_PROTO_MAX_STAGES */
  const double *median_ns; /* Per stage: the median span duration. */
  size_t budget_stage;
  const char *rule;
  uint64_t budget_ns;
  uint64_t frame0; /* Frame id of the recording's first frame. */
  uint64_t seed;
  const em_proto_verdict_t *verdict; /* The breach's verdict (key 16), or NULL. Borrowed. */
} em_synth_flight_t;

/*
 * Encodes the recording into buf[0..cap). Returns 0 and *out_len, or em_flight_encode()'s error
 * codes. *n_frames (may be NULL) receives the frames it holds (the next recording's frame0 may
 * follow them).
 */
int em_synth_flight_encode(const em_synth_flight_t *in, uint8_t *buf, size_t cap, size_t *out_len,
                           uint64_t *n_frames);

#endif /* EM_SIM_FLIGHT_SYNTH_H */
