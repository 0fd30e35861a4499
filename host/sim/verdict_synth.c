/*
 * verdict_synth.c - edgemon-sim's synthetic breach verdict (see verdict_synth.h): a first cause
 * drawn from three, a second one smaller than it, and the unexplained rest, each with the
 * evidence an agent would give for it (figures scaled by the excess latency).
 */
#include "verdict_synth.h"

#include "synth_draw.h"

#include <stdbool.h>
#include <string.h>

/* Rounds to two decimals, as the agent's figures are printed. */
static double cents(double v) {
  return (double)(int64_t)(v * 100.0 + 0.5) / 100.0;
}

static em_value_t number(double v) {
  return (em_value_t){.type = EM_VALUE_FLOAT, .as.f = v};
}

static void evidence(em_proto_verdict_cause_t *c, const char *name, double v) {
  c->evidence[c->n_evidence++] = (em_proto_evidence_t){name, number(v)};
}

/* Cause `code` explaining `share` of an excess of excess_ms per frame, with its evidence. */
static void cause(em_proto_verdict_cause_t *c, uint32_t code, double share, double excess_ms,
                  uint64_t *rng) {
  memset(c, 0, sizeof(*c));
  c->code = code;
  c->share = share;
  double ms = cents(share * excess_ms);
  switch (code) {
  case EM_PROTO_CAUSE_CPU_CONTENTION:
    evidence(c, "runq_delay_ms_per_frame", ms);
    evidence(c, "involuntary_switches_per_frame", cents(8.0 + 40.0 * em_synth_unit(rng)));
    evidence(c, "cpus_online", 4.0);
    c->processes[c->n_processes++] = (em_proto_verdict_process_t){
        (uint32_t)(3000 + em_synth_next_u64(rng) % 5000), "stress-ng", 0.9};
    c->processes[c->n_processes++] = (em_proto_verdict_process_t){57, "kworker/u8:2", 0.05};
    break;
  case EM_PROTO_CAUSE_MEMORY_PRESSURE:
    evidence(c, "major_faults_per_frame", cents(2.0 + 10.0 * em_synth_unit(rng)));
    evidence(c, "psi_memory_some_avg10", cents(10.0 + 30.0 * em_synth_unit(rng)));
    evidence(c, "reclaim_ms_per_frame", ms);
    break;
  case EM_PROTO_CAUSE_MORE_WORK:
    evidence(c, "cpu_ms_per_frame_delta", ms);
    c->functions[c->n_functions++] =
        (em_proto_verdict_function_t){"sgemm_", cents(4.0 + 6.0 * em_synth_unit(rng))};
    c->functions[c->n_functions++] =
        (em_proto_verdict_function_t){"im2col_cpu", cents(0.5 + 2.0 * em_synth_unit(rng))};
    break;
  default:
    evidence(c, "excess_ms", ms);
    break;
  }
}

void em_synth_verdict(em_proto_verdict_t *v, const char *stage, uint64_t baseline_ns,
                      uint64_t breach_ns, uint64_t seed) {
  static const uint32_t firsts[] = {EM_PROTO_CAUSE_CPU_CONTENTION, EM_PROTO_CAUSE_CPU_CONTENTION,
                                    EM_PROTO_CAUSE_MEMORY_PRESSURE, EM_PROTO_CAUSE_MORE_WORK};
  uint64_t rng = seed;
  memset(v, 0, sizeof(*v));
  v->stage = stage;
  v->statistic = "p99";
  v->baseline_ns = baseline_ns;
  v->breach_ns = breach_ns;
  v->nominal_windows = 12;
  double excess_ms = breach_ns > baseline_ns ? (double)(breach_ns - baseline_ns) / 1e6 : 0.0;
  uint32_t first = firsts[em_synth_next_u64(&rng) % (sizeof(firsts) / sizeof(firsts[0]))];
  uint32_t second =
      first == EM_PROTO_CAUSE_MORE_WORK ? EM_PROTO_CAUSE_CPU_CONTENTION : EM_PROTO_CAUSE_MORE_WORK;
  /* Shares in hundredths, so they print as the agent's do: first 60..84, second 5..14, the
   * unexplained rest (at most 35) below the first. */
  double s1 = (double)(60 + em_synth_next_u64(&rng) % 25) / 100.0;
  double s2 = (double)(5 + em_synth_next_u64(&rng) % 10) / 100.0;
  double rest = cents(1.0 - s1 - s2);
  cause(&v->causes[0], first, s1, excess_ms, &rng);
  bool rest_second = rest > s2;
  cause(&v->causes[1], rest_second ? EM_PROTO_CAUSE_UNEXPLAINED : second, rest_second ? rest : s2,
        excess_ms, &rng);
  cause(&v->causes[2], rest_second ? second : EM_PROTO_CAUSE_UNEXPLAINED, rest_second ? s2 : rest,
        excess_ms, &rng);
  v->n_causes = 3;
}
