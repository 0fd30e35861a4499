/*
 * spanlog.c - see spanlog.h. Stage names are interned by a linear search of at most
 * EM_PROFILE_MAX_STAGES names (a window sees a handful of stages); the log is an array sorted
 * once by (tid, start, longest first) on the worker, so that walking back from a time meets
 * an inner span before the outer span that began with it.
 */
#define _GNU_SOURCE /* strnlen */

#include "spanlog.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  uint32_t tid;
  uint32_t stage;
  uint64_t start_ns;
  uint64_t end_ns;
} span_t_;

struct em_spanlog {
  span_t_ *spans;
  uint32_t max_spans, n_spans;
  uint64_t from_ns;
  char names[EM_PROFILE_MAX_STAGES][EM_STAGE_FIELD_BYTES];
  const char *name_ptrs[EM_PROFILE_MAX_STAGES];
  size_t n_names;
  em_spanlog_stats_t st;
};

int em_spanlog_new(em_spanlog_t **out, uint32_t max_spans) {
  if (!out || max_spans == 0) {
    return -EINVAL;
  }
  em_spanlog_t *l = calloc(1, sizeof(*l));
  if (!l) {
    return -ENOMEM;
  }
  l->spans = calloc(max_spans, sizeof(*l->spans));
  if (!l->spans) {
    free(l);
    return -ENOMEM;
  }
  l->max_spans = max_spans;
  *out = l;
  return 0;
}

void em_spanlog_free(em_spanlog_t *l) {
  if (l) {
    free(l->spans);
    free(l);
  }
}

uint64_t em_spanlog_bytes(const em_spanlog_t *l) {
  return l ? sizeof(*l) + (uint64_t)l->max_spans * sizeof(*l->spans) : 0;
}

void em_spanlog_reset(em_spanlog_t *l, uint64_t from_ns) {
  l->n_spans = 0;
  l->n_names = 0;
  l->from_ns = from_ns;
  l->st = (em_spanlog_stats_t){0};
}

/* The index of stage name s, added when new; EM_PROFILE_NO_STAGE when the table is full. */
static uint32_t intern(em_spanlog_t *l, const char *s) {
  for (size_t i = 0; i < l->n_names; i++) {
    if (strcmp(l->names[i], s) == 0) {
      return (uint32_t)i;
    }
  }
  if (l->n_names >= EM_PROFILE_MAX_STAGES) {
    return EM_PROFILE_NO_STAGE;
  }
  size_t n = strnlen(s, EM_STAGE_FIELD_BYTES - 1);
  memcpy(l->names[l->n_names], s, n);
  l->names[l->n_names][n] = '\0';
  l->name_ptrs[l->n_names] = l->names[l->n_names];
  return (uint32_t)l->n_names++;
}

void em_spanlog_add(em_spanlog_t *l, uint32_t tid, const char *stage, uint64_t start_ns,
                    uint64_t duration_ns) {
  uint64_t end_ns = start_ns + duration_ns;
  if (!l || !stage || end_ns < start_ns || end_ns < l->from_ns) {
    return; /* Overflowed, or over before the window began. */
  }
  if (tid == 0) {
    l->st.no_thread++;
    return;
  }
  if (l->n_spans >= l->max_spans) {
    l->st.full++;
    return;
  }
  uint32_t s = intern(l, stage);
  if (s == EM_PROFILE_NO_STAGE) {
    l->st.stage_cut++;
    return;
  }
  l->spans[l->n_spans++] =
      (span_t_){.tid = tid, .stage = s, .start_ns = start_ns, .end_ns = end_ns};
  l->st.kept++;
}

static int cmp_span(const void *a, const void *b) {
  const span_t_ *x = a, *y = b;
  if (x->tid != y->tid) {
    return x->tid < y->tid ? -1 : 1;
  }
  if (x->start_ns != y->start_ns) {
    return x->start_ns < y->start_ns ? -1 : 1;
  }
  return x->end_ns > y->end_ns ? -1 : x->end_ns < y->end_ns; /* Outer first, inner after it. */
}

void em_spanlog_seal(em_spanlog_t *l) {
  if (l) {
    qsort(l->spans, l->n_spans, sizeof(*l->spans), cmp_span);
  }
}

uint32_t em_spanlog_stage(const em_spanlog_t *l, uint32_t tid, uint64_t t_ns, uint64_t *start_ns,
                          uint64_t *end_ns) {
  if (!l || tid == 0) {
    return EM_PROFILE_NO_STAGE;
  }
  /* The first span after (tid, t_ns): every span before it started at or before t_ns. */
  size_t lo = 0, hi = l->n_spans;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const span_t_ *m = &l->spans[mid];
    if (m->tid < tid || (m->tid == tid && m->start_ns <= t_ns)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  for (size_t k = 0; k < EM_SPANLOG_NESTING && lo > 0; k++) {
    const span_t_ *m = &l->spans[--lo];
    if (m->tid != tid) {
      break;
    }
    if (t_ns <= m->end_ns) {
      if (start_ns) {
        *start_ns = m->start_ns;
      }
      if (end_ns) {
        *end_ns = m->end_ns;
      }
      return m->stage;
    }
  }
  return EM_PROFILE_NO_STAGE;
}

const char *const *em_spanlog_stages(const em_spanlog_t *l, size_t *n) {
  *n = l ? l->n_names : 0;
  return l ? l->name_ptrs : NULL;
}

const em_spanlog_stats_t *em_spanlog_stats(const em_spanlog_t *l) {
  return &l->st;
}
