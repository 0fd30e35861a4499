/*
 * cbor_read.c - the strict CBOR reader shared by the decoders (cbor_read.h): each item head is
 * read by cbor_head.c into a token, and typed readers check each token against what the
 * schema allows. Reads nothing outside the input, never allocates (decoded strings and arrays
 * go to the caller's scratch), reentrant.
 */
#include <stdlib.h>
#include <string.h>

#include "cbor_head.h"
#include "cbor_read.h"

/* --- tokens ---------------------------------------------------------------------------- */

/*
 * The token of a major type 7 head: false, true, null, undefined, a float, the break stop code
 * (refused by the caller: no indefinite item is ever open here), or T_SIMPLE for the simple
 * values the schema has no use for (0..19, 32..255).
 */
static void simple_token(const em__head_t *h, em__tok_t *t) {
  switch (h->info) {
  case EM_CBOR_FALSE:
  case EM_CBOR_TRUE:
    t->type = T_BOOL;
    t->b = h->info == EM_CBOR_TRUE;
    return;
  case EM_CBOR_NULL:
    t->type = T_NULL;
    return;
  case EM_CBOR_UNDEFINED:
    t->type = T_UNDEF;
    return;
  case EM_CBOR_FLOAT16:
  case EM_CBOR_FLOAT32:
  case EM_CBOR_FLOAT64:
    t->type = T_FLOAT;
    t->f = em__head_float(h);
    return;
  case EM_CBOR_AI_INDEFINITE:
    t->type = T_BREAK;
    return;
  default:
    t->type = T_SIMPLE;
    t->u = h->arg;
    return;
  }
}

/*
 * Reads the next item head into *t. Returns 0, EM_PROTO_ETRUNCATED, EM_PROTO_EMALFORMED or
 * EM_PROTO_EINDEFINITE. Containers are checked against the bytes left: each element needs
 * at least one byte, so a larger count means the message is truncated.
 */
int em__next(em__dec_t *d, em__tok_t *t) {
  static const em__tok_type_t of_major[] = {T_UINT,  T_NEGINT, T_BYTES, T_TEXT,
                                            T_ARRAY, T_MAP,    T_TAG,   T_SIMPLE};
  d->item_pos = d->pos;
  size_t left = d->len - d->pos;
  if (left == 0) {
    return EM_PROTO_ETRUNCATED; /* Before d->buf + d->pos: buf may be NULL. */
  }
  const uint8_t *p = d->buf + d->pos;
  em__head_t h;
  int rc = em__head_read(p, left, &h);
  if (rc) {
    return rc;
  }
  left -= h.len;
  memset(t, 0, sizeof(*t));
  t->type = of_major[h.major];
  t->u = h.arg;
  if (h.major == EM_CBOR_SIMPLE) {
    simple_token(&h, t);
  } else if (h.info == EM_CBOR_AI_INDEFINITE) {
    t->type = T_INDEF;
  } else if (t->type == T_BYTES || t->type == T_TEXT) {
    if (h.arg > left) {
      return EM_PROTO_ETRUNCATED; /* Checked before anyone adds the length to a pointer. */
    }
    t->str = p + h.len;
    t->str_len = (size_t)h.arg;
    d->pos += (size_t)h.arg;
  }
  d->pos += h.len;
  if (t->type == T_INDEF) {
    return EM_PROTO_EINDEFINITE;
  }
  if (t->type == T_BREAK) {
    return EM_PROTO_EMALFORMED;
  }
  if (t->type == T_ARRAY && t->u > left) {
    return EM_PROTO_ETRUNCATED;
  }
  if (t->type == T_MAP && t->u > left / 2) {
    return EM_PROTO_ETRUNCATED;
  }
  return 0;
}

/* --- scratch ------------------------------------------------------------------------- */

size_t em__scratch_for(size_t len, size_t max_len, size_t per_byte) {
  return per_byte * (len < max_len ? len : max_len) + 256u;
}

void *em__scratch_alloc(em__dec_t *d, size_t size) {
  size_t at = (d->scratch_used + 7u) & ~(size_t)7u;
  if (at > d->scratch_len || size > d->scratch_len - at) {
    return NULL;
  }
  d->scratch_used = at + size;
  return d->scratch + at;
}

/* --- typed readers -------------------------------------------------------------------- */

/* Enters an array or map: depth check. */
int em__enter(em__dec_t *d) {
  if (d->depth + 1 > EM_PROTO_MAX_DEPTH) {
    return EM_PROTO_EDEPTH;
  }
  d->depth++;
  return 0;
}

void em__leave(em__dec_t *d) {
  d->depth--;
}

/* Skips one item of any type (an unknown key's value), with its children. */
int em__skip(em__dec_t *d) {
  em__tok_t t;
  int rc = em__next(d, &t);
  if (rc) {
    return rc;
  }
  /* A tag wraps exactly one item. Chains are walked in a loop, not by recursion: each tag
   * is at least one byte, so the input's length bounds the loop. */
  while (rc == 0 && t.type == T_TAG) {
    rc = em__next(d, &t);
  }
  if (rc) {
    return rc;
  }
  if (t.type != T_ARRAY && t.type != T_MAP) {
    return 0;
  }
  rc = em__enter(d);
  if (rc) {
    return rc;
  }
  uint64_t items = t.type == T_MAP ? 2 * t.u : t.u;
  for (uint64_t i = 0; i < items && !rc; i++) {
    rc = em__skip(d);
  }
  em__leave(d);
  return rc;
}

/* The next token, which must be of `type` (ETYPE for another). */
static int next_of(em__dec_t *d, em__tok_type_t type, em__tok_t *t) {
  int rc = em__next(d, t);
  return rc ? rc : t->type == type ? 0 : EM_PROTO_ETYPE;
}

/* The next token, of `type` with a value or count of at most max (`over` past it). */
static int next_upto(em__dec_t *d, em__tok_type_t type, uint64_t max, int over, em__tok_t *t) {
  int rc = next_of(d, type, t);
  return rc ? rc : t->u > max ? over : 0;
}

int em__read_uint(em__dec_t *d, uint64_t max, uint64_t *out) {
  em__tok_t t;
  int rc = next_upto(d, T_UINT, max, EM_PROTO_ERANGE, &t);
  if (!rc) {
    *out = t.u;
  }
  return rc;
}

int em__read_int(em__dec_t *d, int64_t min, int64_t max, int64_t *out) {
  em__tok_t t;
  int rc = em__next(d, &t);
  if (rc) {
    return rc;
  }
  if (t.type == T_UINT) {
    if (t.u > (uint64_t)max || (int64_t)t.u < min) {
      return EM_PROTO_ERANGE;
    }
    *out = (int64_t)t.u;
    return 0;
  }
  if (t.type != T_NEGINT) {
    return EM_PROTO_ETYPE;
  }
  if (t.u > (uint64_t)INT64_MAX || -1 - (int64_t)t.u < min || -1 - (int64_t)t.u > max) {
    return EM_PROTO_ERANGE;
  }
  *out = -1 - (int64_t)t.u;
  return 0;
}

int em__read_bool(em__dec_t *d, bool *out) {
  em__tok_t t;
  int rc = next_of(d, T_BOOL, &t);
  if (rc) {
    return rc;
  }
  *out = t.b;
  return 0;
}

/* A text string of the given class, copied NUL-terminated into scratch. */
int em__read_str(em__dec_t *d, em_str_class_t cls, size_t max, const char **out) {
  em__tok_t t;
  int rc = next_of(d, T_TEXT, &t);
  if (rc) {
    return rc;
  }
  rc = em__check_str((const char *)t.str, t.str_len, cls, max);
  if (rc) {
    return rc;
  }
  char *s = em__scratch_alloc(d, t.str_len + 1);
  if (!s) {
    return EM_PROTO_ESCRATCH;
  }
  memcpy(s, t.str, t.str_len);
  s[t.str_len] = '\0';
  *out = s;
  return 0;
}

/* A number, or null when `allow_null`. */
int em__read_value(em__dec_t *d, bool allow_null, em_value_t *out) {
  em__tok_t t;
  int rc = em__next(d, &t);
  if (rc) {
    return rc;
  }
  memset(out, 0, sizeof(*out));
  switch (t.type) {
  case T_UINT:
    out->type = EM_VALUE_UINT;
    out->as.u = t.u;
    return 0;
  case T_NEGINT:
    if (t.u > (uint64_t)INT64_MAX) {
      return EM_PROTO_ERANGE;
    }
    out->type = EM_VALUE_INT;
    out->as.i = -1 - (int64_t)t.u;
    return 0;
  case T_FLOAT:
    out->type = EM_VALUE_FLOAT;
    out->as.f = t.f;
    return em__check_value(out);
  case T_NULL:
    out->type = EM_VALUE_ABSENT;
    return allow_null ? 0 : EM_PROTO_ETYPE;
  default:
    return EM_PROTO_ETYPE;
  }
}

/* Reads a container head of the given type and enters it; *n is its element count. */
int em__open_container(em__dec_t *d, em__tok_type_t type, uint64_t max_items, uint64_t *n) {
  em__tok_t t;
  int rc = next_upto(d, type, max_items, EM_PROTO_ELIMIT, &t);
  if (!rc) {
    *n = t.u;
    rc = em__enter(d);
  }
  return rc;
}

/*
 * Reads the next map key: an unsigned integer, not seen before in this map when < 64
 * (`seen` is the bitmap of keys so far). Returns the key in *key.
 */
int em__read_key(em__dec_t *d, uint64_t *seen, uint64_t *key) {
  em__tok_t t;
  int rc = next_of(d, T_UINT, &t);
  if (rc) {
    return rc == EM_PROTO_ETYPE ? EM_PROTO_EKEY : rc;
  }
  if (t.u < 64) {
    if (*seen & (UINT64_C(1) << t.u)) {
      return EM_PROTO_EDUPLICATE;
    }
    *seen |= UINT64_C(1) << t.u;
  }
  *key = t.u;
  return 0;
}

/* Checks that every key in `required` is in `seen`; reports at the map's start. */
int em__require(em__dec_t *d, size_t map_pos, uint64_t seen, uint64_t required) {
  if ((seen & required) != required) {
    d->item_pos = map_pos;
    return EM_PROTO_EMISSING;
  }
  return 0;
}

int em__open_list(em__dec_t *d, em__tok_type_t type, uint64_t max, unsigned group, size_t elem_size,
                  uint64_t *n, void **elems) {
  uint64_t items = 0;
  int rc = em__open_container(d, type, max, &items);
  if (rc) {
    return rc;
  }
  if (items % group) {
    return EM_PROTO_EINCONSISTENT;
  }
  *n = items / group;
  *elems = em__scratch_alloc(d, (size_t)*n * elem_size);
  return !*elems && *n ? EM_PROTO_ESCRATCH : 0;
}

int em__close_list(em__dec_t *d, int rc, void *elems, uint64_t n, void *out, size_t *n_out) {
  if (rc) {
    return rc;
  }
  em__leave(d);
  memcpy(out, &elems, sizeof(elems));
  *n_out = (size_t)n;
  return 0;
}

int em__sort_unique(em__dec_t *d, size_t at, void *elems, size_t n, size_t size,
                    int (*cmp)(const void *, const void *)) {
  const unsigned char *e = elems;
  if (n > 1) {
    qsort(elems, n, size, cmp);
  }
  for (size_t i = 1; i < n; i++) {
    if (cmp(e + (i - 1) * size, e + i * size) == 0) {
      d->item_pos = at;
      return EM_PROTO_EDUPLICATE;
    }
  }
  return 0;
}

/*
 * An array of at most `max` elements of `elem_size` bytes, each read by `fn` into scratch.
 * On success *out points at the elements and *n_out is their count.
 */
int em__read_array(em__dec_t *d, uint64_t max, size_t elem_size, em__elem_fn fn, void **out,
                   size_t *n_out) {
  uint64_t n = 0;
  void *elems = NULL;
  int rc = em__open_list(d, T_ARRAY, max, 1, elem_size, &n, &elems);
  for (uint64_t i = 0; i < n && !rc; i++) {
    rc = fn(d, (uint8_t *)elems + i * elem_size);
  }
  return em__close_list(d, rc, elems, n, out, n_out);
}

int em__decode_whole(const uint8_t *buf, size_t len, size_t max_len, em__message_fn fn, void *out,
                     size_t out_size, void *scratch, size_t scratch_len, size_t *error_offset) {
  if (error_offset) {
    *error_offset = 0;
  }
  if (!out || (!buf && len) || (!scratch && scratch_len)) {
    return EM_PROTO_EINVAL;
  }
  if (len > max_len) {
    return EM_PROTO_ETOOBIG;
  }
  memset(out, 0, out_size);
  em__dec_t d = {.buf = buf, .len = len, .scratch = scratch, .scratch_len = scratch_len};
  int rc = fn(&d, out);
  if (!rc && d.pos != len) {
    d.item_pos = d.pos;
    rc = EM_PROTO_ETRAILING;
  }
  if (rc) {
    if (error_offset) {
      *error_offset = d.item_pos;
    }
    memset(out, 0, out_size);
  }
  return rc;
}

int em__read_start(em__dec_t *d, uint64_t *n, uint64_t *seen, uint64_t *kind) {
  uint64_t key = 0, v = 0;
  int rc = em__open_container(d, T_MAP, 64, n);
  if (rc) {
    return rc;
  }
  if (*n < 2) {
    d->item_pos = 0;
    return EM_PROTO_EMISSING;
  }
  rc = em__read_key(d, seen, &key);
  if (!rc && key != K_VERSION) {
    rc = EM_PROTO_EMISSING;
  }
  if (!rc) {
    rc = em__read_uint(d, UINT32_MAX, &v);
  }
  if (!rc && v != EM_PROTO_VERSION) {
    rc = EM_PROTO_EVERSION;
  }
  if (!rc) {
    rc = em__read_key(d, seen, &key);
  }
  if (!rc && key != K_KIND) {
    rc = EM_PROTO_EMISSING;
  }
  if (!rc) {
    rc = em__read_uint(d, UINT32_MAX, kind);
  }
  return rc;
}

int em__reread(em__dec_t *d, size_t at, em__message_fn fn, void *ctx) {
  size_t end = d->pos;
  d->depth = 1;
  d->pos = at;
  int rc = fn(d, ctx);
  d->depth = 0;
  if (!rc) {
    d->pos = end;
  }
  return rc;
}

static int read_stage_name(em__dec_t *d, void *elem) {
  return em__read_str(d, STR_IDENT, EM_PROTO_MAX_STAGE_BYTES, (const char **)elem);
}

int em__read_stage_table(em__dec_t *d, size_t max, const char *const **out, size_t *n_out) {
  size_t at = d->pos;
  void *list = NULL;
  int rc = em__read_array(d, max, sizeof(const char *), read_stage_name, &list, n_out);
  *out = list;
  if (!rc && em__check_stage_table(*out, *n_out)) {
    d->item_pos = at;
    return EM_PROTO_EDUPLICATE;
  }
  return rc;
}
