/*
 * profile_diff.c - a stack profile against a baseline (see profile_diff.h).
 *
 * Both sides are reduced to rows keyed by text (a function's name, a folded stack's path),
 * the rows of both put in one array, sorted by key and merged, so matching costs a sort and
 * no lookup table; then the merged rows are sorted by growth.
 */
#define _POSIX_C_SOURCE 200809L
#include "profile_diff.h"

#include "profile_stacks.h"
#include "view.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Longest folded text: every frame at its longest, with its separator. */
#define STACK_TEXT_BYTES (EM_PROFILE_MAX_DEPTH * (EM_PROFILE_MAX_FRAME_BYTES + 1) + 1)

static double pct(uint64_t n, uint64_t total) {
  return total > 0 ? 100.0 * (double)n / (double)total : 0.0;
}

static int by_name(const void *a, const void *b) {
  const em_profile_diff_func_t *x = a;
  const em_profile_diff_func_t *y = b;
  return strcmp(x->name, y->name);
}

/* Descending first key, then descending second, then ascending text. */
static int growth(double x1, double y1, double x2, double y2, const char *xt, const char *yt) {
  if (x1 != y1) {
    return x1 > y1 ? -1 : 1;
  }
  if (x2 != y2) {
    return x2 > y2 ? -1 : 1;
  }
  return strcmp(xt, yt);
}

static int func_growth(const void *a, const void *b) {
  const em_profile_diff_func_t *x = a;
  const em_profile_diff_func_t *y = b;
  return growth(x->self_delta, y->self_delta, x->total_delta, y->total_delta, x->name, y->name);
}

static int by_text(const void *a, const void *b) {
  const em_profile_diff_stack_t *x = a;
  const em_profile_diff_stack_t *y = b;
  return strcmp(x->text, y->text);
}

static int stack_growth(const void *a, const void *b) {
  const em_profile_diff_stack_t *x = a;
  const em_profile_diff_stack_t *y = b;
  return growth(x->delta, y->delta, x->pct[EM_PROFILE_NOW], y->pct[EM_PROFILE_NOW], x->text,
                y->text);
}

/* Appends side's functions to f (at *n). Returns 0 or -ENOMEM. */
static int add_funcs(const em_profile_t *p, int side, em_profile_diff_func_t *f, size_t *n) {
  em_profile_func_t *v = NULL;
  size_t m = 0;
  if (em_profile_functions(p, &v, &m) != 0) {
    return -ENOMEM;
  }
  for (size_t i = 0; i < m; i++) {
    em_profile_diff_func_t *r = &f[(*n)++];
    memset(r, 0, sizeof(*r));
    r->name = p->frames[v[i].frame].name ? p->frames[v[i].frame].name : "?";
    r->kind = p->frames[v[i].frame].kind;
    r->self[side] = v[i].self;
    r->total[side] = v[i].total;
    r->off_cpu_ns[side] = v[i].off_cpu_ns;
  }
  free(v);
  return 0;
}

static int diff_funcs(const em_profile_t *base, const em_profile_t *p, em_profile_diff_t *d) {
  size_t cap = base->n_frames + p->n_frames;
  d->funcs = malloc((cap ? cap : 1) * sizeof(*d->funcs));
  if (!d->funcs) {
    return -ENOMEM;
  }
  size_t n = 0;
  if (add_funcs(p, EM_PROFILE_NOW, d->funcs, &n) != 0 ||
      add_funcs(base, EM_PROFILE_BASE, d->funcs, &n) != 0) {
    return -ENOMEM;
  }
  /* Equal names merge in whatever order qsort left them; the kind is NOW's where NOW has
   * the function. */
  qsort(d->funcs, n, sizeof(*d->funcs), by_name);
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    const em_profile_diff_func_t *r = &d->funcs[i];
    em_profile_diff_func_t *w =
        m > 0 && strcmp(d->funcs[m - 1].name, r->name) == 0 ? &d->funcs[m - 1] : NULL;
    if (!w) {
      d->funcs[m++] = *r;
      continue;
    }
    if (r->self[EM_PROFILE_NOW] + r->total[EM_PROFILE_NOW] > 0) {
      w->kind = r->kind;
    }
    for (int s = 0; s < 2; s++) {
      w->self[s] += r->self[s];
      w->total[s] += r->total[s];
      w->off_cpu_ns[s] += r->off_cpu_ns[s];
    }
  }
  for (size_t i = 0; i < m; i++) {
    em_profile_diff_func_t *r = &d->funcs[i];
    for (int s = 0; s < 2; s++) {
      r->self_pct[s] = pct(r->self[s], d->total[s]);
      r->total_pct[s] = pct(r->total[s], d->total[s]);
    }
    r->self_delta = r->self_pct[EM_PROFILE_NOW] - r->self_pct[EM_PROFILE_BASE];
    r->total_delta = r->total_pct[EM_PROFILE_NOW] - r->total_pct[EM_PROFILE_BASE];
  }
  qsort(d->funcs, m, sizeof(*d->funcs), func_growth);
  d->n_funcs = m;
  return 0;
}

/* Appends side's stacks with samples to v (at *n), each text strdup'd. Returns 0 or -ENOMEM. */
static int add_stacks(const em_profile_t *p, int side, em_profile_diff_stack_t *v, size_t *n,
                      char *buf) {
  for (size_t i = 0; i < p->n_stacks; i++) {
    const em_profile_stack_t *s = &p->stacks[i];
    if (s->samples == 0) {
      continue;
    }
    em_profile_stack_text(p, s, 0, buf, STACK_TEXT_BYTES);
    em_profile_diff_stack_t *r = &v[*n];
    memset(r, 0, sizeof(*r));
    r->text = strdup(buf);
    if (!r->text) {
      return -ENOMEM;
    }
    r->samples[side] = s->samples;
    (*n)++;
  }
  return 0;
}

static int diff_stacks(const em_profile_t *base, const em_profile_t *p, em_profile_diff_t *d) {
  size_t cap = base->n_stacks + p->n_stacks;
  d->stacks = malloc((cap ? cap : 1) * sizeof(*d->stacks));
  char *buf = malloc(STACK_TEXT_BYTES);
  size_t n = 0;
  int rc = d->stacks && buf ? 0 : -ENOMEM;
  if (rc == 0) {
    rc = add_stacks(p, EM_PROFILE_NOW, d->stacks, &n, buf);
  }
  if (rc == 0) {
    rc = add_stacks(base, EM_PROFILE_BASE, d->stacks, &n, buf);
  }
  free(buf);
  d->n_stacks = n; /* What em_profile_diff_free() frees, merged or not. */
  if (rc != 0) {
    return rc;
  }
  qsort(d->stacks, n, sizeof(*d->stacks), by_text);
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    em_profile_diff_stack_t *r = &d->stacks[i];
    if (m > 0 && strcmp(d->stacks[m - 1].text, r->text) == 0) {
      d->stacks[m - 1].samples[0] += r->samples[0];
      d->stacks[m - 1].samples[1] += r->samples[1];
      free(r->text);
      continue;
    }
    d->stacks[m++] = *r;
  }
  for (size_t i = 0; i < m; i++) {
    em_profile_diff_stack_t *r = &d->stacks[i];
    r->pct[0] = pct(r->samples[0], d->total[0]);
    r->pct[1] = pct(r->samples[1], d->total[1]);
    r->delta = r->pct[EM_PROFILE_NOW] - r->pct[EM_PROFILE_BASE];
  }
  qsort(d->stacks, m, sizeof(*d->stacks), stack_growth);
  d->n_stacks = m;
  return 0;
}

int em_profile_diff(const em_profile_t *base, const em_profile_t *p, em_profile_diff_t *d) {
  memset(d, 0, sizeof(*d));
  const em_profile_t *side[2] = {base, p};
  for (int s = 0; s < 2; s++) {
    d->total[s] = em_profile_stacks_total(side[s]);
    for (size_t i = 0; i < side[s]->n_stacks; i++) {
      d->off_cpu_ns[s] += side[s]->stacks[i].off_cpu_ns;
    }
  }
  if (diff_funcs(base, p, d) != 0 || diff_stacks(base, p, d) != 0) {
    em_profile_diff_free(d);
    return -ENOMEM;
  }
  return 0;
}

void em_profile_diff_free(em_profile_diff_t *d) {
  for (size_t i = 0; d->stacks && i < d->n_stacks; i++) {
    free(d->stacks[i].text);
  }
  free(d->stacks);
  free(d->funcs);
  memset(d, 0, sizeof(*d));
}

static int funcs_table(const em_profile_diff_t *d, size_t top) {
  static const char *const head[] = {"base %", "now %",   "delta",           "total base %",
                                     "now %",  "delta",   "off-CPU base ms", "now ms",
                                     "kind",   "function"};
  static const bool left[] = {false, false, false, false, false, false, false, false, true, true};
  size_t rows = d->n_funcs < top ? d->n_funcs : top;
  em_view_grid_t g;
  if (em_view_grid_init(&g, rows + 1, 10, EM_PROFILE_MAX_FRAME_BYTES + 1, head) != 0) {
    return -ENOMEM;
  }
  for (size_t i = 0; i < rows; i++) {
    const em_profile_diff_func_t *f = &d->funcs[i];
    em_view_grid_set(&g, i + 1, 0, "%.2f", f->self_pct[EM_PROFILE_BASE]);
    em_view_grid_set(&g, i + 1, 1, "%.2f", f->self_pct[EM_PROFILE_NOW]);
    em_view_grid_set(&g, i + 1, 2, "%+.2f", f->self_delta);
    em_view_grid_set(&g, i + 1, 3, "%.2f", f->total_pct[EM_PROFILE_BASE]);
    em_view_grid_set(&g, i + 1, 4, "%.2f", f->total_pct[EM_PROFILE_NOW]);
    em_view_grid_set(&g, i + 1, 5, "%+.2f", f->total_delta);
    em_view_grid_set(&g, i + 1, 6, "%.1f", (double)f->off_cpu_ns[EM_PROFILE_BASE] / 1e6);
    em_view_grid_set(&g, i + 1, 7, "%.1f", (double)f->off_cpu_ns[EM_PROFILE_NOW] / 1e6);
    em_view_grid_set(&g, i + 1, 8, "%s", em_profile_frame_kind_name(f->kind));
    em_view_grid_set(&g, i + 1, 9, "%s", f->name);
  }
  em_view_grid_print(&g, left);
  em_view_grid_deinit(&g);
  return 0;
}

static int stacks_table(const em_profile_diff_t *d, size_t top) {
  static const char *const head[] = {"base %", "now %", "delta", "stack"};
  static const bool left[] = {false, false, false, true};
  size_t rows = d->n_stacks < top ? d->n_stacks : top;
  em_view_grid_t g;
  if (em_view_grid_init(&g, rows + 1, 4, 96, head) != 0) {
    return -ENOMEM;
  }
  for (size_t i = 0; i < rows; i++) {
    const em_profile_diff_stack_t *s = &d->stacks[i];
    em_view_grid_set(&g, i + 1, 0, "%.2f", s->pct[EM_PROFILE_BASE]);
    em_view_grid_set(&g, i + 1, 1, "%.2f", s->pct[EM_PROFILE_NOW]);
    em_view_grid_set(&g, i + 1, 2, "%+.2f", s->delta);
    size_t len = strlen(s->text);
    em_view_grid_set(&g, i + 1, 3, "%s%s", len > 90 ? "..." : "",
                     s->text + (len > 90 ? len - 87 : 0));
  }
  em_view_grid_print(&g, left);
  em_view_grid_deinit(&g);
  return 0;
}

int em_profile_diff_table(const em_profile_diff_t *d, const char *title, const char *base_title,
                          size_t top) {
  printf("%s against %s\n", title, base_title);
  printf("samples: %llu now, %llu baseline; off-CPU: %.1f ms now, %.1f ms baseline (not in the "
         "shares)\n",
         (unsigned long long)d->total[EM_PROFILE_NOW],
         (unsigned long long)d->total[EM_PROFILE_BASE], (double)d->off_cpu_ns[EM_PROFILE_NOW] / 1e6,
         (double)d->off_cpu_ns[EM_PROFILE_BASE] / 1e6);
  printf("\nby function, self share grown most first (%% of each profile's samples, delta in "
         "points)\n");
  if (funcs_table(d, top) != 0) {
    return -ENOMEM;
  }
  printf("\nby stack, grown most first\n");
  return stacks_table(d, top);
}

int em_profile_diff_folded(FILE *out, const em_profile_diff_t *d) {
  for (size_t i = 0; i < d->n_stacks; i++) {
    const em_profile_diff_stack_t *s = &d->stacks[i];
    fprintf(out, "%s %.2f %.2f %+.2f\n", s->text, s->pct[EM_PROFILE_BASE], s->pct[EM_PROFILE_NOW],
            s->delta);
  }
  return ferror(out) ? -EIO : 0;
}

/* "key":{"baseline":B,"profile":N} with the numbers as JSON numbers. */
static void pair(FILE *out, const char *key, double base, double now, int decimals) {
  fprintf(out, "\"%s\":{\"baseline\":", key);
  em_view_json_num(out, base, decimals);
  fputs(",\"profile\":", out);
  em_view_json_num(out, now, decimals);
  fputc('}', out);
}

/* ,"COUNT":{..},"PCT":{..},"DELTA":D: one figure's samples, shares and change. */
static void figure(FILE *out, const char *const keys[3], const uint64_t n[2], const double p[2],
                   double delta) {
  fputc(',', out);
  pair(out, keys[0], (double)n[0], (double)n[1], 0);
  fputc(',', out);
  pair(out, keys[1], p[0], p[1], 4);
  fprintf(out, ",\"%s\":", keys[2]);
  em_view_json_num(out, delta, 4);
}

int em_profile_diff_json(FILE *out, const em_profile_diff_t *d, const char *title,
                         const char *base_title) {
  static const char *const self_keys[3] = {"self", "self_pct", "self_delta"};
  static const char *const total_keys[3] = {"total", "total_pct", "total_delta"};
  static const char *const stack_keys[3] = {"samples", "pct", "delta"};
  fputs("{\"profile\":", out);
  em_view_json_str(out, title);
  fputs(",\"baseline\":", out);
  em_view_json_str(out, base_title);
  fputc(',', out);
  pair(out, "samples", (double)d->total[0], (double)d->total[1], 0);
  fputc(',', out);
  pair(out, "off_cpu_ns", (double)d->off_cpu_ns[0], (double)d->off_cpu_ns[1], 0);
  fputs(",\"functions\":[", out);
  for (size_t i = 0; i < d->n_funcs; i++) {
    const em_profile_diff_func_t *f = &d->funcs[i];
    fputs(i ? ",{\"name\":" : "{\"name\":", out);
    em_view_json_str(out, f->name);
    fprintf(out, ",\"kind\":\"%s\"", em_profile_frame_kind_name(f->kind));
    figure(out, self_keys, f->self, f->self_pct, f->self_delta);
    figure(out, total_keys, f->total, f->total_pct, f->total_delta);
    fputc(',', out);
    pair(out, "off_cpu_ns", (double)f->off_cpu_ns[0], (double)f->off_cpu_ns[1], 0);
    fputc('}', out);
  }
  fputs("],\"stacks\":[", out);
  for (size_t i = 0; i < d->n_stacks; i++) {
    const em_profile_diff_stack_t *s = &d->stacks[i];
    fputs(i ? ",{\"stack\":" : "{\"stack\":", out);
    em_view_json_str(out, s->text);
    figure(out, stack_keys, s->samples, s->pct, s->delta);
    fputc('}', out);
  }
  fputs("]}\n", out);
  return ferror(out) ? -EIO : 0;
}
