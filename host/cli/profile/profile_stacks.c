/*
 * profile_stacks.c - the figures of a stack profile (see profile_stacks.h).
 *
 * The flame graph tree is built by walking each stack from its root down the first-child /
 * next-sibling lists, inserting a missing child in its sorted place among its siblings, so the
 * layout needs no sort afterwards; nodes are created parent first, so one pass in index order
 * lays the rows out. Cost: the stacks' frames times the siblings scanned (bounded by the
 * profile's limits: 8192 stacks of 256 frames).
 */
#define _POSIX_C_SOURCE 200809L
#include "profile_stacks.h"

#include "demangle.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NONE 0u /* No child / sibling: node 0 is the root, never anyone's child. */

int em_profile_readable(const em_profile_t *p, em_profile_frame_t **frames, char **text) {
  *frames = malloc((p->n_frames ? p->n_frames : 1) * sizeof(**frames));
  *text = malloc((p->n_frames ? p->n_frames : 1) * (EM_PROFILE_MAX_FRAME_BYTES + 1));
  if (!*frames || !*text) {
    free(*frames);
    free(*text);
    *frames = NULL; /* The caller frees both whatever the result. */
    *text = NULL;
    return -ENOMEM;
  }
  for (size_t i = 0; i < p->n_frames; i++) {
    (*frames)[i] = p->frames[i];
    char *out = *text + i * (EM_PROFILE_MAX_FRAME_BYTES + 1);
    if (p->frames[i].kind == EM_FRAME_NATIVE &&
        em_demangle(p->frames[i].name, out, EM_PROFILE_MAX_FRAME_BYTES + 1) > 0) {
      (*frames)[i].name = out;
    }
  }
  return 0;
}

uint64_t em_profile_stacks_total(const em_profile_t *p) {
  uint64_t sum = 0;
  for (size_t i = 0; i < p->n_stacks; i++) {
    sum += p->stacks[i].samples;
  }
  return p->samples > sum ? p->samples : sum;
}

typedef struct {
  size_t index;
  uint64_t samples;
  uint64_t off_cpu_ns;
} hot_t;

/* The order of both rankings: the larger first key first, then the larger second, then the
 * smaller index (a stable order). Returns qsort's -1, 0 or 1. */
static int rank(uint64_t x1, uint64_t y1, uint64_t x2, uint64_t y2, size_t xi, size_t yi) {
  if (x1 != y1) {
    return x1 > y1 ? -1 : 1;
  }
  if (x2 != y2) {
    return x2 > y2 ? -1 : 1;
  }
  return xi < yi ? -1 : xi > yi;
}

static int hot_cmp(const void *a, const void *b) {
  const hot_t *x = a;
  const hot_t *y = b;
  return rank(x->samples, y->samples, x->off_cpu_ns, y->off_cpu_ns, x->index, y->index);
}

int em_profile_hottest(const em_profile_t *p, size_t **order) {
  *order = NULL;
  if (p->n_stacks == 0) {
    return 0;
  }
  hot_t *h = malloc(p->n_stacks * sizeof(*h));
  size_t *o = malloc(p->n_stacks * sizeof(*o));
  if (!h || !o) {
    free(h);
    free(o);
    return -ENOMEM;
  }
  for (size_t i = 0; i < p->n_stacks; i++) {
    h[i] = (hot_t){i, p->stacks[i].samples, p->stacks[i].off_cpu_ns};
  }
  qsort(h, p->n_stacks, sizeof(*h), hot_cmp);
  for (size_t i = 0; i < p->n_stacks; i++) {
    o[i] = h[i].index;
  }
  free(h);
  *order = o;
  return 0;
}

static int func_cmp(const void *a, const void *b) {
  const em_profile_func_t *x = a;
  const em_profile_func_t *y = b;
  return rank(x->self, y->self, x->total, y->total, x->frame, y->frame);
}

int em_profile_functions(const em_profile_t *p, em_profile_func_t **out, size_t *n) {
  *out = NULL;
  *n = 0;
  if (p->n_frames == 0) {
    return 0;
  }
  em_profile_func_t *f = calloc(p->n_frames, sizeof(*f));
  size_t *seen = malloc(p->n_frames * sizeof(*seen)); /* Last stack (+1) that counted it. */
  bool *used = calloc(p->n_frames, sizeof(*used));
  if (!f || !seen || !used) {
    free(f);
    free(seen);
    free(used);
    return -ENOMEM;
  }
  memset(seen, 0, p->n_frames * sizeof(*seen));
  for (size_t i = 0; i < p->n_stacks; i++) {
    const em_profile_stack_t *s = &p->stacks[i];
    for (size_t k = 0; k < s->n_frames; k++) {
      uint32_t fr = s->frames[k];
      if (fr >= p->n_frames) {
        continue;
      }
      used[fr] = true;
      if (seen[fr] != i + 1) {
        seen[fr] = i + 1;
        f[fr].total += s->samples;
      }
    }
    if (s->n_frames > 0 && s->frames[s->n_frames - 1] < p->n_frames) {
      uint32_t leaf = s->frames[s->n_frames - 1];
      f[leaf].self += s->samples;
      f[leaf].off_cpu_ns += s->off_cpu_ns;
    }
  }
  size_t m = 0;
  for (size_t i = 0; i < p->n_frames; i++) {
    if (used[i]) {
      f[i].frame = (uint32_t)i;
      f[m++] = f[i];
    }
  }
  free(seen);
  free(used);
  qsort(f, m, sizeof(*f), func_cmp);
  *out = f;
  *n = m;
  return 0;
}

static const char *frame_name(const em_profile_t *p, uint32_t i) {
  return i < p->n_frames && p->frames[i].name ? p->frames[i].name : "?";
}

/* A name byte as the folded and stack texts write it. */
static char safe(char c) {
  return c == ';' ? ':' : (unsigned char)c < 0x20 || c == 0x7f ? '?' : c;
}

void em_profile_stack_text(const em_profile_t *p, const em_profile_stack_t *s, size_t width,
                           char *buf, size_t cap) {
  if (cap == 0) {
    return;
  }
  size_t limit = width == 0 || width > cap - 1 ? cap - 1 : width;
  buf[0] = '\0';
  if (s->n_frames == 0) {
    return;
  }
  /* The leaf-most frames that fit, with "...;" in front when some are dropped. */
  size_t need = 0;
  size_t from = s->n_frames;
  while (from > 0) {
    size_t len = strlen(frame_name(p, s->frames[from - 1])) + (from < s->n_frames ? 1 : 0);
    size_t prefix = from - 1 > 0 ? 4 : 0; /* "...;" if frames stay dropped. */
    if (need + len + prefix > limit) {
      break;
    }
    need += len;
    from--;
  }
  size_t n = 0;
  if (from == s->n_frames) { /* Not even the leaf fits: its last bytes after "~". */
    const char *leaf = frame_name(p, s->frames[s->n_frames - 1]);
    size_t len = strlen(leaf);
    size_t keep = limit > 1 ? limit - 1 : 0;
    if (limit > 0) {
      buf[n++] = '~';
    }
    for (const char *c = leaf + (len > keep ? len - keep : 0); *c && n < limit; c++) {
      buf[n++] = safe(*c);
    }
    buf[n] = '\0';
    return;
  }
  if (from > 0) {
    memcpy(buf, "...;", 4);
    n = 4;
  }
  for (size_t k = from; k < s->n_frames; k++) {
    if (k > from) {
      buf[n++] = ';';
    }
    for (const char *c = frame_name(p, s->frames[k]); *c; c++) {
      buf[n++] = safe(*c);
    }
  }
  buf[n] = '\0';
}

static void node_init(em_profile_node_t *nd, uint32_t frame, uint32_t parent, uint32_t depth) {
  memset(nd, 0, sizeof(*nd));
  nd->frame = frame;
  nd->parent = parent;
  nd->depth = depth;
}

/* The child of `parent` for `frame`, created in name order when missing; UINT32_MAX when
 * memory ran out. */
static uint32_t child_of(const em_profile_t *p, em_profile_tree_t *t, size_t *cap, uint32_t parent,
                         uint32_t frame) {
  uint32_t prev = NONE;
  uint32_t c = t->v[parent].first_child;
  const char *name = frame_name(p, frame);
  while (c != NONE) {
    if (t->v[c].frame == frame) {
      return c;
    }
    int cmp = strcmp(frame_name(p, t->v[c].frame), name);
    if (cmp > 0 || (cmp == 0 && t->v[c].frame > frame)) {
      break;
    }
    prev = c;
    c = t->v[c].next_sibling;
  }
  if (t->n == *cap) {
    size_t ncap = *cap * 2;
    em_profile_node_t *v = realloc(t->v, ncap * sizeof(*v));
    if (!v) {
      return UINT32_MAX;
    }
    t->v = v;
    *cap = ncap;
  }
  uint32_t id = (uint32_t)t->n++;
  node_init(&t->v[id], frame, parent, t->v[parent].depth + 1);
  t->v[id].next_sibling = c;
  if (prev == NONE) {
    t->v[parent].first_child = id;
  } else {
    t->v[prev].next_sibling = id;
  }
  return id;
}

int em_profile_tree(const em_profile_t *p, em_profile_tree_t *t) {
  memset(t, 0, sizeof(*t));
  size_t cap = 64;
  t->v = malloc(cap * sizeof(*t->v));
  if (!t->v) {
    return -ENOMEM;
  }
  t->n = 1;
  node_init(&t->v[0], UINT32_MAX, 0, 0);
  for (size_t i = 0; i < p->n_stacks; i++) {
    const em_profile_stack_t *s = &p->stacks[i];
    if (s->samples == 0) {
      continue;
    }
    uint32_t at = 0;
    t->v[0].samples += s->samples;
    for (size_t k = 0; k < s->n_frames; k++) {
      at = child_of(p, t, &cap, at, s->frames[k]);
      if (at == UINT32_MAX) {
        em_profile_tree_free(t);
        return -ENOMEM;
      }
      t->v[at].samples += s->samples;
      if (t->v[at].depth > t->max_depth) {
        t->max_depth = t->v[at].depth;
      }
    }
    t->v[at].self += s->samples;
  }
  for (size_t i = 0; i < t->n; i++) { /* Parents precede their children. */
    uint64_t x = t->v[i].x;
    for (uint32_t c = t->v[i].first_child; c != NONE; c = t->v[c].next_sibling) {
      t->v[c].x = x;
      x += t->v[c].samples;
    }
  }
  return 0;
}

void em_profile_tree_free(em_profile_tree_t *t) {
  free(t->v);
  memset(t, 0, sizeof(*t));
}

int em_profile_folded(FILE *out, const em_profile_t *p) {
  em_profile_tree_t t;
  if (em_profile_tree(p, &t) != 0) {
    return -ENOMEM;
  }
  uint32_t path[EM_PROFILE_MAX_DEPTH + 1];
  /* Depth-first, children in order: a node is visited before its subtree. */
  uint32_t at = t.v[0].first_child;
  while (at != NONE) {
    const em_profile_node_t *nd = &t.v[at];
    if (nd->self > 0) {
      size_t n = 0;
      for (uint32_t u = at; u != 0 && n < EM_PROFILE_MAX_DEPTH + 1; u = t.v[u].parent) {
        path[n++] = u;
      }
      for (size_t k = n; k > 0; k--) {
        if (k < n) {
          fputc(';', out);
        }
        for (const char *c = frame_name(p, t.v[path[k - 1]].frame); *c; c++) {
          fputc(safe(*c), out);
        }
      }
      fprintf(out, " %llu\n", (unsigned long long)nd->self);
    }
    if (nd->first_child != NONE) {
      at = nd->first_child;
      continue;
    }
    while (at != 0 && t.v[at].next_sibling == NONE) {
      at = t.v[at].parent;
    }
    at = at == 0 ? NONE : t.v[at].next_sibling;
  }
  em_profile_tree_free(&t);
  return ferror(out) ? -EIO : 0;
}
