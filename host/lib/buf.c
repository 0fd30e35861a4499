/*
 * buf.c - the host's capped growable buffer (see buf.h).
 *
 * Growth: the first allocation is 256 bytes or what the first write needs, each later one
 * doubles until it holds the write, and none is larger than max_bytes + 1 (the NUL), so a
 * buffer near its cap costs at most that. Owns nothing but data.
 */
#include "buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FIRST_ALLOC_BYTES = 256 };

void em_buf_init(em_buf_t *b, size_t max_bytes) {
  *b = (em_buf_t){.max_bytes = max_bytes};
}

void em_buf_free(em_buf_t *b) {
  if (!b) {
    return;
  }
  free(b->data);
  em_buf_init(b, b->max_bytes);
}

void em_buf_rewind(em_buf_t *b, size_t len) {
  if (len < b->len) {
    b->len = len;
  }
  b->error = 0;
  if (b->data) {
    b->data[b->len] = '\0';
  }
}

void em_buf_reset(em_buf_t *b) {
  em_buf_rewind(b, 0);
}

int em_buf_reserve(em_buf_t *b, size_t n) {
  if (b->error) {
    return b->error;
  }
  if (b->len > b->max_bytes || n > b->max_bytes - b->len) { /* The cap may have been lowered. */
    b->error = -E2BIG;
    return b->error;
  }
  size_t need = b->len + n + 1;
  if (need <= b->cap) {
    return 0;
  }
  size_t cap = b->cap ? b->cap : FIRST_ALLOC_BYTES;
  while (cap < need) {
    cap = cap > SIZE_MAX / 2 ? need : cap * 2;
  }
  if (b->max_bytes < SIZE_MAX && cap > b->max_bytes + 1) {
    cap = b->max_bytes + 1;
  }
  char *p = realloc(b->data, cap);
  if (!p) {
    b->error = -ENOMEM;
    return b->error;
  }
  if (!b->data) {
    p[0] = '\0';
  }
  b->data = p;
  b->cap = cap;
  return 0;
}

char *em_buf_tail(em_buf_t *b) {
  return b->data + b->len;
}

void em_buf_commit(em_buf_t *b, size_t n) {
  b->len += n;
  b->data[b->len] = '\0';
}

int em_buf_add(em_buf_t *b, const void *p, size_t n) {
  int rc = em_buf_reserve(b, n);
  if (rc != 0) {
    return rc;
  }
  if (n > 0) {
    memcpy(em_buf_tail(b), p, n);
  }
  em_buf_commit(b, n);
  return 0;
}

int em_buf_addstr(em_buf_t *b, const char *s) {
  return em_buf_add(b, s, strlen(s));
}

int em_buf_vprintf(em_buf_t *b, const char *fmt, va_list ap) {
  if (b->error) {
    return b->error;
  }
  va_list again;
  va_copy(again, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  int rc = n < 0 ? -EINVAL : em_buf_reserve(b, (size_t)n);
  if (rc == 0) {
    vsnprintf(em_buf_tail(b), (size_t)n + 1, fmt, again);
    em_buf_commit(b, (size_t)n);
  }
  va_end(again);
  return rc;
}

int em_buf_printf(em_buf_t *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = em_buf_vprintf(b, fmt, ap);
  va_end(ap);
  return rc;
}

char *em_buf_take(em_buf_t *b, size_t *len) {
  char *p = b->data;
  if (len) {
    *len = b->len;
  }
  em_buf_init(b, b->max_bytes);
  return p;
}

int em_buf_grow_items(void *items_ptr, size_t *cap, size_t n, size_t item_bytes, size_t first_cap) {
  if (n < *cap) {
    return 0;
  }
  size_t want = *cap ? *cap * 2 : first_cap;
  if (want <= *cap || item_bytes == 0 || want > SIZE_MAX / item_bytes) {
    return -ENOMEM;
  }
  void *items;
  memcpy(&items, items_ptr, sizeof(items));
  void *grown = realloc(items, want * item_bytes);
  if (!grown) {
    return -ENOMEM;
  }
  memcpy(items_ptr, &grown, sizeof(grown));
  *cap = want;
  return 0;
}

size_t em_buf_find_name(const void *items, size_t n, const char *(*name_at)(const void *, size_t),
                        const char *name, bool *found) {
  size_t lo = 0;
  size_t hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(name_at(items, mid), name);
    if (c == 0) {
      *found = true;
      return mid;
    }
    if (c < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  *found = false;
  return lo;
}
