/*
 * flight_synth.c - edgemon-sim's synthetic flight recording (see flight_synth.h).
 *
 * Frames are laid out from the start of the window, the stages of a frame back to back with a
 * 50 us gap; a slow budget stage can run past the next frame's start, so the spans are sorted
 * by start (the schema wants them ascending) before encoding. The random draws come from a
 * splitmix64 stream of the seed: the recording is the same for the same input.
 */
#define _POSIX_C_SOURCE 200809L
#include "flight_synth.h"

#include "synth_draw.h"

#include <math.h>
#include <stdlib.h>

#define SYNTH_FRAMES  ((EM_SYNTH_PRE_NS + EM_SYNTH_POST_NS) / EM_SYNTH_FRAME_NS + 1)
#define SYNTH_TICKS   ((EM_SYNTH_PRE_NS + EM_SYNTH_POST_NS) / EM_SYNTH_TICK_NS)
#define SYNTH_COLUMNS 5u
#define SYNTH_GAP_NS  50000u

enum { COL_CSW, COL_MISSES, COL_RSS, COL_PSI, COL_TEMP };

static const em_flight_column_t columns[SYNTH_COLUMNS] = {
    [COL_CSW] = {"pmu.context-switches", "1", EM_METRIC_COUNTER},
    [COL_MISSES] = {"pmu.cache-misses", "1", EM_METRIC_COUNTER},
    [COL_RSS] = {"mem.rss", "By", EM_METRIC_GAUGE},
    [COL_PSI] = {"psi.cpu.some.avg10", "%", EM_METRIC_GAUGE},
    [COL_TEMP] = {"temp.soc", "Cel", EM_METRIC_GAUGE},
};

static double normal(uint64_t *x) {
  return sqrt(-2.0 * log(em_synth_unit(x))) * cos(6.283185307179586 * em_synth_unit(x));
}

static int by_start(const void *a, const void *b) {
  const em_flight_span_t *x = a;
  const em_flight_span_t *y = b;
  if (x->start_ns != y->start_ns) {
    return x->start_ns < y->start_ns ? -1 : 1;
  }
  return x->stage < y->stage ? -1 : x->stage > y->stage;
}

static bool near_trigger(uint64_t t, uint64_t trigger) {
  uint64_t d = t > trigger ? t - trigger : trigger - t;
  return d <= EM_SYNTH_SLOW_NS;
}

int em_synth_flight_encode(const em_synth_flight_t *in, uint8_t *buf, size_t cap, size_t *out_len,
                           uint64_t *n_frames) {
  static em_flight_span_t spans[SYNTH_FRAMES * EM_PROTO_MAX_STAGES];
  static em_flight_tick_t ticks[SYNTH_TICKS];
  static em_flight_value_t values[SYNTH_TICKS][SYNTH_COLUMNS];
  if (!in || in->n_stages == 0 || in->n_stages > EM_PROTO_MAX_STAGES ||
      in->budget_stage >= in->n_stages || in->trigger_mono_ns < EM_SYNTH_PRE_NS || !in->median_ns) {
    return EM_PROTO_EINVAL;
  }
  uint64_t rng = in->seed;
  uint64_t trigger = in->trigger_mono_ns;
  uint64_t t0 = trigger - EM_SYNTH_PRE_NS;
  size_t n_spans = 0;
  uint64_t frames = 0;
  for (uint64_t f = 0; f < SYNTH_FRAMES; f++) {
    uint64_t at = t0 + f * EM_SYNTH_FRAME_NS;
    if (at > trigger + EM_SYNTH_POST_NS) {
      break;
    }
    frames++;
    for (size_t k = 0; k < in->n_stages; k++) {
      double median = in->median_ns[k];
      if (k == in->budget_stage && near_trigger(at, trigger)) {
        median *= EM_SYNTH_SLOW_FACTOR;
      }
      double d = exp(log(median) + 0.25 * normal(&rng));
      uint64_t dur = d < 1.0 ? 1u : (uint64_t)d;
      spans[n_spans++] = (em_flight_span_t){
          .stage = (uint32_t)k, .frame_id = in->frame0 + f, .start_ns = at, .duration_ns = dur};
      at += dur + SYNTH_GAP_NS;
    }
  }
  qsort(spans, n_spans, sizeof(spans[0]), by_start);

  uint64_t csw = 1000000u + em_synth_next_u64(&rng) % 100000u;
  uint64_t misses = 50000000u + em_synth_next_u64(&rng) % 1000000u;
  double rss = 150e6 + 60e6 * em_synth_unit(&rng);
  double temp = 55.0 + 5.0 * em_synth_unit(&rng);
  for (size_t j = 0; j < SYNTH_TICKS; j++) {
    uint64_t at = t0 + (j + 1) * EM_SYNTH_TICK_NS;
    bool slow = near_trigger(at, trigger);
    csw += (uint64_t)(300.0 * (slow ? 4.0 : 1.0) * (1.0 + 0.2 * em_synth_unit(&rng)));
    misses += (uint64_t)(120000.0 * (slow ? 6.0 : 1.0) * (1.0 + 0.2 * em_synth_unit(&rng)));
    rss += 4096.0 * (slow ? 64.0 : 1.0) * em_synth_unit(&rng);
    temp += (slow ? 0.4 : -0.05) + 0.05 * normal(&rng);
    em_flight_value_t *v = values[j];
    size_t n = 0;
    v[n++] = (em_flight_value_t){COL_CSW, {.type = EM_VALUE_UINT, .as.u = csw}};
    v[n++] = (em_flight_value_t){COL_MISSES, {.type = EM_VALUE_UINT, .as.u = misses}};
    v[n++] =
        (em_flight_value_t){COL_RSS, {.type = EM_VALUE_UINT, .as.u = (uint64_t)rss & ~4095ull}};
    if (j % 5 == 4) {
      double psi = round((slow ? 25.0 : 3.0) * (1.0 + 0.1 * normal(&rng)) * 100.0) / 100.0;
      v[n++] = (em_flight_value_t){COL_PSI, {.type = EM_VALUE_FLOAT, .as.f = psi < 0 ? 0 : psi}};
    }
    v[n++] =
        (em_flight_value_t){COL_TEMP, {.type = EM_VALUE_FLOAT, .as.f = round(temp * 10.0) / 10.0}};
    ticks[j] = (em_flight_tick_t){.mono_ns = at, .values = v, .n_values = n};
  }

  em_flight_t fl = {
      .head = {.time_ns = in->time_ns, .session = in->session},
      .number = in->number,
      .trigger =
          {
              .cause = EM_FLIGHT_ESCALATION,
              .level = EM_LEVEL_DEGRADED,
              .prev_level = EM_LEVEL_NOMINAL,
              .rule = in->rule,
              .stage = in->stages[in->budget_stage],
              .value = {.type = EM_VALUE_UINT, .as.u = in->budget_ns + in->budget_ns / 4},
              .bound = {.type = EM_VALUE_UINT, .as.u = in->budget_ns},
              .reason = "p99 over its budget (simulated)",
          },
      .trigger_mono_ns = trigger,
      .pre_ns = EM_SYNTH_PRE_NS,
      .post_ns = EM_SYNTH_POST_NS,
      .period_ns = EM_SYNTH_TICK_NS,
      .stages = in->stages,
      .n_stages = in->n_stages,
      .columns = columns,
      .n_columns = SYNTH_COLUMNS,
      .ticks = ticks,
      .n_ticks = SYNTH_TICKS,
      .spans = spans,
      .n_spans = n_spans,
      .verdict = in->verdict,
  };
  if (n_frames) {
    *n_frames = frames;
  }
  return em_flight_encode(&fl, buf, cap, out_len);
}
