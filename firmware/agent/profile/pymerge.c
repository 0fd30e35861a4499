/*
 * pymerge.c - see pymerge.h. The datagram is copied into one buffer and unpacked there (the
 * view points into it); its samples are indexed by (tid, time) in an array sorted once on the
 * worker, so each native sample finds its nearest Python sample by binary search. Frame texts
 * are split into name and module in an arena sized for the largest datagram.
 */
#include "pymerge.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NONE        UINT32_MAX
#define ARENA_BYTES (EM_PYSTACKS_MAX_BYTES + 2u * EM_PYSTACKS_MAX_STRINGS)

typedef struct {
  uint32_t tid;
  uint32_t off; /* Of the sample in the datagram. */
  uint64_t time_ns;
} pyref_t;

struct em_pymerge {
  bool held;
  size_t len;
  uint8_t *buf; /* EM_PYSTACKS_MAX_BYTES */
  em_pystacks_t *view;
  pyref_t *refs; /* UINT16_MAX, sorted by (tid, time_ns) after prepare. */
  size_t n_refs;
  char *arena;    /* ARENA_BYTES */
  uint32_t *fidx; /* EM_PYSTACKS_MAX_STRINGS: the caller's frame index of string i. */
  uint64_t bytes;
};

int em_pymerge_new(em_pymerge_t **out) {
  if (!out) {
    return -EINVAL;
  }
  em_pymerge_t *m = calloc(1, sizeof(*m));
  if (!m) {
    return -ENOMEM;
  }
  m->buf = malloc(EM_PYSTACKS_MAX_BYTES);
  m->view = calloc(1, sizeof(*m->view));
  m->refs = calloc(UINT16_MAX, sizeof(*m->refs));
  m->arena = malloc(ARENA_BYTES);
  m->fidx = calloc(EM_PYSTACKS_MAX_STRINGS, sizeof(*m->fidx));
  if (!m->buf || !m->view || !m->refs || !m->arena || !m->fidx) {
    em_pymerge_free(m);
    return -ENOMEM;
  }
  m->bytes = sizeof(*m) + EM_PYSTACKS_MAX_BYTES + sizeof(*m->view) +
             (uint64_t)UINT16_MAX * sizeof(*m->refs) + ARENA_BYTES +
             (uint64_t)EM_PYSTACKS_MAX_STRINGS * sizeof(*m->fidx);
  *out = m;
  return 0;
}

void em_pymerge_free(em_pymerge_t *m) {
  if (!m) {
    return;
  }
  free(m->buf);
  free(m->view);
  free(m->refs);
  free(m->arena);
  free(m->fidx);
  free(m);
}

uint64_t em_pymerge_bytes(const em_pymerge_t *m) {
  return m ? m->bytes : 0;
}

void em_pymerge_reset(em_pymerge_t *m) {
  if (m) {
    m->held = false;
    m->n_refs = 0;
  }
}

int em_pymerge_take(em_pymerge_t *m, const uint8_t *buf, size_t len, uint32_t window) {
  if (!m || !buf) {
    return -EINVAL;
  }
  if (m->held) {
    return -EALREADY;
  }
  if (len > EM_PYSTACKS_MAX_BYTES) {
    return EM_PROTO_ESIZE;
  }
  memcpy(m->buf, buf, len);
  int rc = em_pystacks_unpack(m->buf, len, m->view);
  if (rc) {
    return rc;
  }
  if (m->view->window != window) {
    return -ESTALE;
  }
  m->len = len;
  m->held = true;
  m->n_refs = 0;
  return 0;
}

bool em_pymerge_held(const em_pymerge_t *m) {
  return m && m->held;
}

uint32_t em_pymerge_samples(const em_pymerge_t *m) {
  return em_pymerge_held(m) ? m->view->n_samples : 0;
}

uint32_t em_pymerge_client_cut(const em_pymerge_t *m) {
  return em_pymerge_held(m) ? m->view->samples_cut : 0;
}

static int cmp_ref(const void *a, const void *b) {
  const pyref_t *x = a, *y = b;
  if (x->tid != y->tid) {
    return x->tid < y->tid ? -1 : 1;
  }
  return x->time_ns < y->time_ns ? -1 : x->time_ns > y->time_ns;
}

/* Splits "function (file:line)" into name and module in the arena at *at. */
static em_profile_frame_t split_text(char *arena, size_t *at, const uint8_t *t, size_t n) {
  size_t cut = n; /* Where " (" of the module starts; n: none. */
  if (n > EM_PYSTACKS_MAX_STRING_BYTES) {
    n = EM_PYSTACKS_MAX_STRING_BYTES; /* Not reached: validated texts are at most this. */
  }
  if (n >= 5 && t[n - 1] == ')') {
    /* The last " (" with a function before it and something inside the parentheses. */
    for (size_t i = n - 4; i >= 1; i--) {
      if (t[i] == ' ' && t[i + 1] == '(') {
        cut = i;
        break;
      }
    }
  }
  char *name = arena + *at;
  memcpy(name, t, cut);
  name[cut] = '\0';
  *at += cut + 1;
  const char *module = NULL;
  if (cut < n) {
    char *mod = arena + *at;
    size_t mn = n - cut - 3; /* Without " (" and ")"; >= 1. */
    memcpy(mod, t + cut + 2, mn);
    mod[mn] = '\0';
    *at += mn + 1;
    module = mod;
  }
  return (em_profile_frame_t){.name = name, .module = module, .kind = EM_FRAME_PYTHON};
}

void em_pymerge_prepare(em_pymerge_t *m, em_pymerge_frame_fn add_frame, void *ctx) {
  if (!m || !m->held || !add_frame) {
    return;
  }
  size_t at = 0;
  for (uint16_t i = 0; i < m->view->n_strings; i++) {
    size_t n = 0;
    const uint8_t *t = em_pystacks_string(m->view, i, &n);
    em_profile_frame_t f = split_text(m->arena, &at, t, n);
    m->fidx[i] = add_frame(ctx, &f);
  }
  size_t cursor = m->view->samples_off;
  m->n_refs = 0;
  em_pysample_t s;
  while (m->n_refs < UINT16_MAX) {
    size_t off = cursor;
    if (!em_pystacks_next(m->view, &cursor, &s)) {
      break;
    }
    m->refs[m->n_refs++] = (pyref_t){.tid = s.tid, .off = (uint32_t)off, .time_ns = s.time_ns};
  }
  qsort(m->refs, m->n_refs, sizeof(*m->refs), cmp_ref);
}

/* The held sample of tid nearest time_ns taken within [lo_ns, hi_ns] that accept takes (NULL:
 * any), or NULL: the first accepted on each side, walking out from time_ns until a bound. */
static const pyref_t *nearest(const em_pymerge_t *m, uint32_t tid, uint64_t time_ns, uint64_t lo_ns,
                              uint64_t hi_ns, em_pymerge_accept_fn accept, void *ctx) {
  size_t lo = 0, hi = m->n_refs;
  const pyref_t key = {.tid = tid, .time_ns = time_ns};
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (cmp_ref(&m->refs[mid], &key) < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  const pyref_t *left = NULL, *right = NULL;
  for (size_t i = lo; i > 0; i--) {
    const pyref_t *r = &m->refs[i - 1];
    if (r->tid != tid || r->time_ns < lo_ns) {
      break;
    }
    if (r->time_ns <= hi_ns && (!accept || accept(ctx, r->time_ns))) {
      left = r;
      break;
    }
  }
  for (size_t i = lo; i < m->n_refs; i++) {
    const pyref_t *r = &m->refs[i];
    if (r->tid != tid || r->time_ns > hi_ns) {
      break;
    }
    if (r->time_ns >= lo_ns && (!accept || accept(ctx, r->time_ns))) {
      right = r;
      break;
    }
  }
  if (!left || !right) {
    return left ? left : right;
  }
  return time_ns - left->time_ns <= right->time_ns - time_ns ? left : right;
}

size_t em_pymerge_splice(const em_pymerge_t *m, uint32_t tid, uint64_t time_ns, uint64_t lo_ns,
                         uint64_t hi_ns, const uint32_t *path, size_t n,
                         em_pymerge_interp_fn is_interp, em_pymerge_accept_fn accept, void *ctx,
                         uint32_t *out, em_pymerge_why_t *why) {
  em_pymerge_why_t dummy = EM_PYMERGE_NO_SAMPLE;
  why = why ? why : &dummy;
  *why = EM_PYMERGE_NO_SAMPLE;
  if (!m || !m->held || !path || !is_interp || !out || n > EM_PROFILE_MAX_DEPTH) {
    return 0;
  }
  const pyref_t *r = nearest(m, tid, time_ns, lo_ns, hi_ns, accept, ctx);
  if (!r) {
    return 0;
  }
  size_t first = n, last = 0;
  for (size_t i = 0; i < n; i++) {
    if (is_interp(ctx, path[i])) {
      first = first == n ? i : first;
      last = i;
    }
  }
  bool cut_short = first == n; /* No eval-loop frame: the native unwinding stopped early. */
  if (cut_short) {
    first = 0;
    last = SIZE_MAX; /* The Python frames go above every native frame. */
  }
  size_t cursor = r->off;
  em_pysample_t s;
  if (!em_pystacks_next(m->view, &cursor, &s)) {
    return 0; /* Not reached: the view was validated whole. */
  }
  for (uint16_t k = 0; k < s.depth; k++) {
    if (m->fidx[s.frames[k]] == NONE) {
      *why = EM_PYMERGE_NO_FRAME;
      return 0;
    }
  }
  /* above + python + below, the root side cut past EM_PROFILE_MAX_DEPTH. */
  size_t below = n - (last + 1), total = first + s.depth + below;
  size_t skip = total > EM_PROFILE_MAX_DEPTH ? total - EM_PROFILE_MAX_DEPTH : 0, k = 0;
  for (size_t i = 0; i < total; i++) {
    uint32_t f = i < first             ? path[i]
                 : i < first + s.depth ? m->fidx[s.frames[i - first]]
                                       : path[last + 1 + (i - first - s.depth)];
    if (i >= skip) {
      out[k++] = f;
    }
  }
  *why = cut_short ? EM_PYMERGE_ABOVE : EM_PYMERGE_SPLICED;
  return k;
}
