/*
 * growth.c - see growth.h. Frames are grouped into functions by name with an open-addressing
 * table over the profile's frame table (a function is the first frame of its name); a stage's
 * samples are then counted per function once per stack (a stamp per function says which stack
 * counted it last), and only the functions a stage touched are visited again (the used list),
 * so a count costs O(frames + the stage's stack frames).
 *
 * A Python function's share is of the stage's samples that hold Python frames, not of all its
 * samples: the Python client samples a window from its once-a-second look at the request page,
 * so the part of a window's samples that got Python frames differs from window to window, and
 * over all samples a Python function's share would grow or fall with that part (its callers,
 * `<module>` first, as much as itself).
 */
#include "growth.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define NAME_SLOTS (2u * EM_PROFILE_MAX_FRAMES) /* A power of two, at most half full. */

struct em_growth {
  uint32_t slots[NAME_SLOTS];            /* Frame index + 1 of a name's first frame; 0: empty. */
  uint32_t fid[EM_PROFILE_MAX_FRAMES];   /* Frame -> its function (the first frame of its name). */
  uint32_t stamp[EM_PROFILE_MAX_FRAMES]; /* Function -> stack index + 1 that counted it last. */
  uint64_t count[EM_PROFILE_MAX_FRAMES]; /* Function -> the stage's samples under it. */
  uint32_t used[EM_PROFILE_MAX_FRAMES];  /* Functions with a count, in the order first seen. */
  size_t n_used;
  uint64_t total;    /* The stage's samples (count_stage). */
  uint64_t py_total; /* Those of them whose stack holds a Python frame. */
};

int em_growth_new(em_growth_t **out) {
  if (!out) {
    return -EINVAL;
  }
  *out = calloc(1, sizeof(**out));
  return *out ? 0 : -ENOMEM;
}

void em_growth_free(em_growth_t *g) {
  free(g);
}

static uint32_t hash_name(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) {
    h = (h ^ (uint8_t)*s) * 16777619u;
  }
  return h;
}

/* Groups the frames of `p` by name. Returns false when its tables are out of bounds. */
static bool group_frames(em_growth_t *g, const em_profile_t *p) {
  if (p->n_frames > EM_PROFILE_MAX_FRAMES || (p->n_frames && !p->frames) ||
      (p->n_stacks && !p->stacks) || (p->n_stages && !p->stages)) {
    return false;
  }
  memset(g->slots, 0, sizeof(g->slots));
  for (size_t i = 0; i < p->n_frames; i++) {
    const char *name = p->frames[i].name ? p->frames[i].name : "";
    uint32_t at = hash_name(name) & (NAME_SLOTS - 1);
    while (g->slots[at] &&
           strcmp(p->frames[g->slots[at] - 1].name ? p->frames[g->slots[at] - 1].name : "", name) !=
               0) {
      at = (at + 1) & (NAME_SLOTS - 1);
    }
    if (!g->slots[at]) {
      g->slots[at] = (uint32_t)i + 1;
    }
    g->fid[i] = g->slots[at] - 1;
  }
  return true;
}

/* Counts the samples of stage index `k` under each function; returns the stage's samples. */
static uint64_t count_stage(em_growth_t *g, const em_profile_t *p, uint32_t k) {
  for (size_t i = 0; i < g->n_used; i++) {
    g->count[g->used[i]] = 0;
    g->stamp[g->used[i]] = 0;
  }
  g->n_used = 0;
  uint64_t total = 0, py_total = 0;
  for (size_t s = 0; s < p->n_stacks; s++) {
    const em_profile_stack_t *st = &p->stacks[s];
    if (st->stage != k || st->samples == 0) {
      continue;
    }
    total += st->samples;
    bool python = false;
    for (size_t d = 0; d < st->n_frames; d++) {
      uint32_t f = st->frames[d];
      if (f >= p->n_frames) {
        continue;
      }
      python = python || p->frames[f].kind == EM_FRAME_PYTHON;
      uint32_t u = g->fid[f];
      if (g->stamp[u] == (uint32_t)s + 1) {
        continue; /* Recursion: once per stack. */
      }
      g->stamp[u] = (uint32_t)s + 1;
      if (g->count[u] == 0) {
        g->used[g->n_used++] = u;
      }
      g->count[u] += st->samples;
    }
    py_total += python ? st->samples : 0;
  }
  g->total = total;
  g->py_total = py_total;
  return total;
}

/* Function u's share of the stage counted last: of the samples with Python frames for a Python
 * function (when they are enough to tell), of all the stage's samples otherwise. */
static double share_of(const em_growth_t *g, const em_profile_t *p, uint32_t u) {
  bool python = p->frames[u].kind == EM_FRAME_PYTHON && g->py_total >= EM_GROWTH_MIN_SAMPLES;
  return (double)g->count[u] / (double)(python ? g->py_total : g->total);
}

static void copy_name(char *dst, const char *src) {
  size_t n = src ? strlen(src) : 0;
  n = n < EM_GROWTH_NAME_BYTES - 1 ? n : EM_GROWTH_NAME_BYTES - 1;
  if (n) {
    memcpy(dst, src, n);
  }
  dst[n] = '\0';
}

/* a ranks before b: a larger value, or the same and a smaller name. */
static bool ranks_before(double va, const char *na, double vb, const char *nb) {
  return va > vb || (va == vb && strcmp(na, nb) < 0);
}

/* Inserts (name, value) into out[0..*n) kept in rank order, at most max entries. */
static void insert_ranked(em_growth_fn_t *out, size_t *n, size_t max, const char *name,
                          double value) {
  size_t at = *n;
  while (at > 0 && ranks_before(value, name, out[at - 1].value, out[at - 1].name)) {
    at--;
  }
  if (at >= max) {
    return;
  }
  size_t last = *n < max ? *n : max - 1;
  for (size_t i = last; i > at; i--) {
    out[i] = out[i - 1];
  }
  copy_name(out[at].name, name);
  out[at].value = value;
  if (*n < max) {
    (*n)++;
  }
}

static int stage_index(const em_profile_t *p, const char *stage) {
  for (size_t k = 0; k < p->n_stages && k < EM_PROFILE_MAX_STAGES; k++) {
    if (p->stages[k] && strcmp(p->stages[k], stage) == 0) {
      return (int)k;
    }
  }
  return -1;
}

int em_growth_baseline(em_growth_t *g, const em_profile_t *p, em_growth_base_t *out) {
  if (!g || !p || !out || !group_frames(g, p)) {
    return -EINVAL;
  }
  out->n_stages = 0;
  uint64_t totals[EM_PROFILE_MAX_STAGES] = {0};
  size_t n_stages = p->n_stages < EM_PROFILE_MAX_STAGES ? p->n_stages : EM_PROFILE_MAX_STAGES;
  for (size_t s = 0; s < p->n_stacks; s++) {
    if (p->stacks[s].stage < n_stages) {
      totals[p->stacks[s].stage] += p->stacks[s].samples;
    }
  }
  /* The stages with the most samples first: pick the largest left, EM_GROWTH_MAX_STAGES times. */
  while (out->n_stages < EM_GROWTH_MAX_STAGES) {
    size_t best = n_stages;
    for (size_t k = 0; k < n_stages; k++) {
      if (totals[k] >= EM_GROWTH_MIN_SAMPLES && p->stages[k] &&
          strlen(p->stages[k]) < EM_STAGE_FIELD_BYTES &&
          (best == n_stages || totals[k] > totals[best])) {
        best = k;
      }
    }
    if (best == n_stages) {
      break;
    }
    em_growth_stage_t *st = &out->stages[out->n_stages++];
    memcpy(st->stage, p->stages[best], strlen(p->stages[best]) + 1);
    st->samples = count_stage(g, p, (uint32_t)best);
    st->n_fns = 0;
    for (size_t i = 0; i < g->n_used; i++) {
      uint32_t u = g->used[i];
      insert_ranked(st->fns, &st->n_fns, EM_GROWTH_TOP, p->frames[u].name ? p->frames[u].name : "",
                    share_of(g, p, u));
    }
    totals[best] = 0;
  }
  return (int)out->n_stages;
}

int em_growth_grown(em_growth_t *g, const em_profile_t *p, const char *stage,
                    const em_growth_base_t *base, em_growth_fn_t *out, size_t max) {
  if (!g || !p || !stage || !base || (max && !out) || !group_frames(g, p)) {
    return -EINVAL;
  }
  const em_growth_stage_t *then = NULL;
  for (size_t i = 0; i < base->n_stages && i < EM_GROWTH_MAX_STAGES; i++) {
    if (strcmp(base->stages[i].stage, stage) == 0) {
      then = &base->stages[i];
    }
  }
  int k = stage_index(p, stage);
  if (!then || then->samples < EM_GROWTH_MIN_SAMPLES || k < 0 || max == 0) {
    return 0;
  }
  uint64_t total = count_stage(g, p, (uint32_t)k);
  if (total < EM_GROWTH_MIN_SAMPLES) {
    return 0;
  }
  size_t n = 0;
  for (size_t i = 0; i < g->n_used; i++) {
    uint32_t u = g->used[i];
    const char *name = p->frames[u].name ? p->frames[u].name : "";
    double share_then = 0;
    for (size_t j = 0; j < then->n_fns; j++) {
      if (strcmp(then->fns[j].name, name) == 0) {
        share_then = then->fns[j].value;
        break;
      }
    }
    double points = (share_of(g, p, u) - share_then) * 100.0;
    if (points >= EM_GROWTH_MIN_POINTS) {
      insert_ranked(out, &n, max, name, points);
    }
  }
  return (int)n;
}
