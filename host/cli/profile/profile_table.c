/*
 * profile_table.c - a stack profile for people: the header and the two tables (see
 * profile_table.h). The numbers come from profile_stacks.h; this file only lays them out.
 */
#define _POSIX_C_SOURCE 200809L
#include "profile_table.h"

#include "profile_stacks.h"
#include "view.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define CELL 128 /* Bytes of a table cell; the stack cell is cut to fit well within. */

static double pct(uint64_t n, uint64_t total) {
  return total > 0 ? 100.0 * (double)n / (double)total : 0.0;
}

static void print_header(const em_profile_t *p, const char *title) {
  const em_profile_trigger_t *t = &p->trigger;
  printf("%sprofile %s%s: #%" PRIu32 ", %s, level %s", em_view_bold(), title, em_view_off(),
         p->number, em_profile_cause_name(t->cause), em_level_name(t->level));
  if (t->cause == EM_PROFILE_ESCALATION && t->prev_level != EM_LEVEL_NONE) {
    printf(" from %s", em_level_name(t->prev_level));
  }
  if (t->rule) {
    printf(", rule %s", t->rule);
  }
  if (t->stage) {
    printf(", stage %s", t->stage);
  }
  if (t->reason) {
    printf(": %s", t->reason);
  }
  char clock[16];
  em_view_clock(p->head.time_ns, clock, sizeof(clock));
  printf("\nwindow    %s for %.3f s%s\n", clock, (double)p->duration_ns / 1e9,
         p->historical ? " (replayed from the spool)" : "");
  printf("sampling  %s at %" PRIu32 " Hz: %" PRIu64 " samples, %" PRIu64 " lost\n",
         p->clock ? p->clock : "?", p->hz, p->samples, p->lost);
  for (size_t i = 0; i < p->n_notes; i++) {
    printf("%s%s\n", i == 0 ? "notes     " : "          ", p->notes[i]);
  }
  if (p->truncated.stacks_cut > 0 || p->truncated.samples_cut > 0) {
    printf("cut       %" PRIu64 " stacks with %" PRIu64 " samples left out by the size cap\n",
           p->truncated.stacks_cut, p->truncated.samples_cut);
  }
}

static int hottest(const em_profile_t *p, size_t top, uint64_t total) {
  size_t *order = NULL;
  if (em_profile_hottest(p, &order) != 0) {
    return -ENOMEM;
  }
  size_t rows = (top < p->n_stacks ? top : p->n_stacks) + 1;
  enum { COLS = 5 };
  static const char *const head[COLS] = {"samples", "%", "off-cpu ms", "stage",
                                         "stack (root;...;leaf)"};
  em_view_grid_t g;
  if (em_view_grid_init(&g, rows, COLS, CELL, head) != 0) {
    free(order);
    return -ENOMEM;
  }
  for (size_t r = 1; r < rows; r++) {
    const em_profile_stack_t *s = &p->stacks[order[r - 1]];
    em_view_grid_set(&g, r, 0, "%" PRIu64, s->samples);
    em_view_grid_set(&g, r, 1, "%.1f", pct(s->samples, total));
    em_view_grid_set(&g, r, 2, "%.1f", (double)s->off_cpu_ns / 1e6);
    em_view_grid_set(&g, r, 3, "%s", s->stage < p->n_stages ? p->stages[s->stage] : "-");
    em_profile_stack_text(p, s, EM_PROFILE_TABLE_STACK_WIDTH, em_view_grid_cell(&g, r, 4), CELL);
  }
  printf("\nhottest stacks (%zu of %zu)\n", rows - 1, p->n_stacks);
  static const bool left[COLS] = {false, false, false, true, true};
  em_view_grid_print(&g, left);
  em_view_grid_deinit(&g);
  free(order);
  return 0;
}

static int functions(const em_profile_t *p, size_t top, uint64_t total) {
  em_profile_func_t *fn = NULL;
  size_t n = 0;
  if (em_profile_functions(p, &fn, &n) != 0) {
    return -ENOMEM;
  }
  size_t rows = (top < n ? top : n) + 1;
  enum { COLS = 6 };
  static const char *const head[COLS] = {"self",    "self %", "total",
                                         "total %", "kind",   "function (module)"};
  em_view_grid_t g;
  if (em_view_grid_init(&g, rows, COLS, CELL, head) != 0) {
    free(fn);
    return -ENOMEM;
  }
  for (size_t r = 1; r < rows; r++) {
    const em_profile_func_t *f = &fn[r - 1];
    const em_profile_frame_t *fr = &p->frames[f->frame];
    em_view_grid_set(&g, r, 0, "%" PRIu64, f->self);
    em_view_grid_set(&g, r, 1, "%.1f", pct(f->self, total));
    em_view_grid_set(&g, r, 2, "%" PRIu64, f->total);
    em_view_grid_set(&g, r, 3, "%.1f", pct(f->total, total));
    em_view_grid_set(&g, r, 4, "%s", em_profile_frame_kind_name(fr->kind));
    char name[72];
    char module[44];
    em_view_fit(fr->name, 70, name, sizeof(name));
    em_view_fit(fr->module ? fr->module : "", 40, module, sizeof(module));
    em_view_grid_set(&g, r, 5, "%s%s%s%s", name, fr->module ? " (" : "", module,
                     fr->module ? ")" : "");
  }
  printf("\nby function (%zu of %zu)\n", rows - 1, n);
  static const bool left[COLS] = {false, false, false, false, true, true};
  em_view_grid_print(&g, left);
  em_view_grid_deinit(&g);
  free(fn);
  return 0;
}

int em_profile_table(const em_profile_t *p, const char *title, size_t top) {
  uint64_t total = em_profile_stacks_total(p);
  print_header(p, title);
  if (hottest(p, top, total) != 0 || functions(p, top, total) != 0) {
    return -ENOMEM;
  }
  return 0;
}

int em_profile_line(FILE *out, const char *device, const uint8_t *cbor, size_t len, bool json,
                    size_t *error_offset) {
  size_t scratch_len = em_profile_scratch_bytes(len);
  void *scratch = malloc(scratch_len);
  em_profile_t p;
  int rc = scratch ? em_profile_decode(cbor, len, &p, scratch, scratch_len, error_offset) : -ENOMEM;
  if (rc != 0) {
    free(scratch);
    return rc;
  }
  const em_profile_trigger_t *t = &p.trigger;
  em_view_record_t head = {.kind = "profile",
                           .device = device,
                           .session = p.head.session,
                           .number = p.number,
                           .time_ns = p.head.time_ns,
                           .cause = em_profile_cause_name(t->cause),
                           .level = em_level_name(t->level),
                           .rule = t->rule};
  em_view_record_head(out, &head, json);
  if (json) {
    fprintf(out, ",\"samples\":%" PRIu64 ",\"stacks\":%zu,\"bytes\":%zu,\"historical\":%s}}\n",
            p.samples, p.n_stacks, len, p.historical ? "true" : "false");
  } else {
    fprintf(out, "%" PRIu64 " samples, %zu stacks, %zu bytes%s\n", p.samples, p.n_stacks, len,
            p.historical ? " (replayed)" : "");
  }
  free(scratch);
  return 0;
}
