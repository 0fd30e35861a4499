/*
 * flight_verdict.c - the breach's verdict as text (see flight_verdict.h). Durations in ms with
 * one decimal, shares as whole percents, evidence as the agent measured it (as the table
 * writes figures: em_flight_value_print()).
 */
#define _POSIX_C_SOURCE 200809L
#include "flight_verdict.h"

#include "flight_frames.h"

#include <inttypes.h>
#include <string.h>

/* A wire name's unit suffix and how the text writes it after the value. */
static const struct {
  const char *suffix;
  const char *unit;
} units[] = {
    {"_ms_per_frame", " ms/frame"},
    {"_per_frame", "/frame"},
    {"_ms", " ms"},
    {"_ns", " ns"},
    {"_pct", "%"},
};

/* Writes s[0..n) with each '_' as a space. */
static void words(FILE *out, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    fputc(s[i] == '_' ? ' ' : s[i], out);
  }
}

/* "runq delay 28.4 ms/frame" from "runq_delay_ms_per_frame": 28.4. */
static void figure(FILE *out, const em_proto_evidence_t *e) {
  size_t n = strlen(e->name);
  const char *unit = "";
  for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
    size_t k = strlen(units[i].suffix);
    if (n > k && strcmp(e->name + n - k, units[i].suffix) == 0) {
      n -= k;
      unit = units[i].unit;
      break;
    }
  }
  words(out, e->name, n);
  fputc(' ', out);
  em_flight_value_print(out, &e->value);
  fputs(unit, out);
}

/* How many of n items to write under a limit (0: all). */
static size_t shown(size_t n, size_t max) {
  return max && max < n ? max : n;
}

static void more(FILE *out, size_t n, size_t max) {
  if (shown(n, max) < n) {
    fprintf(out, ", +%zu", n - shown(n, max));
  }
}

/* "grew: sgemm_ +6 pts, im2col_cpu +1.5 pts": the functions whose share grew. */
static void grown(FILE *out, const em_proto_verdict_cause_t *c, size_t max_items) {
  fputs("grew: ", out);
  for (size_t i = 0; i < shown(c->n_functions, max_items); i++) {
    const em_proto_verdict_function_t *f = &c->functions[i];
    fprintf(out, "%s%s %+.3g pts", i ? ", " : "", f->name, f->growth);
  }
  more(out, c->n_functions, max_items);
}

/* The cause's name as text: "more work", or "cause 12" for a code this reader does not know. */
static void cause_label(char *label, size_t cap, uint32_t code) {
  const char *name = em_proto_verdict_cause_name(code);
  if (strcmp(name, "unknown") == 0) {
    snprintf(label, cap, "cause %" PRIu32, code);
    return;
  }
  snprintf(label, cap, "%s", name);
  for (char *p = label; *p; p++) {
    *p = *p == '_' ? ' ' : *p;
  }
}

static void cause_line(FILE *out, const em_proto_verdict_cause_t *c, size_t rank,
                       const char *indent, size_t max_items) {
  char label[32];
  cause_label(label, sizeof(label), c->code);
  fprintf(out, "%s  %zu. %-16s %3.0f%% ", indent, rank, label, c->share * 100.0);
  const char *sep = " ";
  for (size_t i = 0; i < shown(c->n_evidence, max_items); i++) {
    fputs(sep, out);
    figure(out, &c->evidence[i]);
    sep = ", ";
  }
  more(out, c->n_evidence, max_items);
  if (c->n_processes) {
    fputs(*sep == ',' ? "; ran: " : " ran: ", out);
    for (size_t i = 0; i < shown(c->n_processes, max_items); i++) {
      const em_proto_verdict_process_t *p = &c->processes[i];
      fprintf(out, "%s%s (%" PRIu32 ") %.0f%%", i ? ", " : "", p->comm, p->pid, p->share * 100.0);
    }
    more(out, c->n_processes, max_items);
    sep = ", ";
  }
  if (c->n_functions) {
    fputs(*sep == ',' ? "; " : " ", out);
    grown(out, c, max_items);
  }
  fputc('\n', out);
}

void em_flight_verdict_print(FILE *out, const em_proto_verdict_t *v, const char *indent,
                             size_t max_causes, size_t max_items) {
  double breach_ms = (double)v->breach_ns / 1e6, base_ms = (double)v->baseline_ns / 1e6;
  fprintf(out, "%s%s %s %.1f ms", indent, v->stage, v->statistic, breach_ms);
  if (v->nominal_windows == 0) {
    fputs(", with no NOMINAL window before it to compare against:\n", out);
  } else {
    fprintf(out, " against %.1f ms over %" PRIu32 " NOMINAL window%s (%+.1f ms):\n", base_ms,
            v->nominal_windows, v->nominal_windows == 1 ? "" : "s", breach_ms - base_ms);
  }
  if (v->n_causes == 0) {
    fprintf(out, "%s  nothing measured\n", indent);
    return;
  }
  size_t n = shown(v->n_causes, max_causes);
  for (size_t i = 0; i < n; i++) {
    cause_line(out, &v->causes[i], i + 1, indent, max_items);
  }
  if (n < v->n_causes) {
    fprintf(out, "%s  (%zu more cause%s)\n", indent, v->n_causes - n,
            v->n_causes - n == 1 ? "" : "s");
  }
}

void em_flight_verdict_functions(FILE *out, const em_proto_verdict_t *v, const char *indent,
                                 size_t max_items) {
  for (size_t i = 0; v && i < v->n_causes; i++) {
    const em_proto_verdict_cause_t *c = &v->causes[i];
    if (c->n_functions) {
      char label[32];
      cause_label(label, sizeof(label), c->code);
      fprintf(out, "%s%s %s: ", indent, v->stage, label);
      grown(out, c, max_items);
      fputc('\n', out);
    }
  }
}
