/*
 * decode.c - the strict v1 decoder.
 *
 * A pull parser over libcbor's streaming decoder: cbor_stream_decode() reads exactly one item
 * head (or one whole definite string) per call and reports it through callbacks that fill a
 * token; on top of that, one function per message kind walks the schema by recursive
 * descent. Checks, each with its own error code: truncation, malformed CBOR, indefinite
 * lengths, total size, nesting depth, item counts (also against the bytes left, so a forged
 * count cannot make a loop run long), key types, duplicate and missing keys, value types and
 * ranges, string classes, and consistency between fields. Map keys the schema does not know
 * are skipped (well-formedness, depth and size still checked), so v1 can grow optional fields.
 *
 * Decoded arrays and strings are placed in a caller-supplied scratch area by a bump
 * allocator; nothing is allocated from the heap and nothing points into the input.
 * Reentrant; no global state.
 */
#include <stdlib.h>
#include <string.h>

#include <cbor.h>

#include "schema.h"

typedef enum {
  T_NONE, /* No callback ran: libcbor accepted an item the schema has no use for. */
  T_UINT,
  T_NEGINT,
  T_BYTES,
  T_TEXT,
  T_ARRAY,
  T_MAP,
  T_TAG,
  T_FLOAT,
  T_BOOL,
  T_NULL,
  T_UNDEF,
  T_INDEF,
  T_BREAK
} tok_type_t;

typedef struct {
  tok_type_t type;
  uint64_t u;         /* T_UINT value, T_NEGINT n (value is -1-n), T_ARRAY/T_MAP count, T_TAG. */
  double f;           /* T_FLOAT */
  bool b;             /* T_BOOL */
  const uint8_t *str; /* T_BYTES / T_TEXT, inside the input. */
  size_t str_len;
} tok_t;

typedef struct {
  const uint8_t *buf;
  size_t len;
  size_t pos;      /* Next byte to read. */
  size_t item_pos; /* Start of the item being checked: the offset reported on failure. */
  unsigned depth;  /* Open arrays and maps around the next item. */
  uint8_t *scratch;
  size_t scratch_len;
  size_t scratch_used;
} dec_t;

/* --- tokens: libcbor callbacks ------------------------------------------------------- */

static void set_int(void *c, tok_type_t type, uint64_t v) {
  tok_t *t = c;
  t->type = type;
  t->u = v;
}
static void cb_u8(void *c, uint8_t v) {
  set_int(c, T_UINT, v);
}
static void cb_u16(void *c, uint16_t v) {
  set_int(c, T_UINT, v);
}
static void cb_u32(void *c, uint32_t v) {
  set_int(c, T_UINT, v);
}
static void cb_u64(void *c, uint64_t v) {
  set_int(c, T_UINT, v);
}
static void cb_n8(void *c, uint8_t v) {
  set_int(c, T_NEGINT, v);
}
static void cb_n16(void *c, uint16_t v) {
  set_int(c, T_NEGINT, v);
}
static void cb_n32(void *c, uint32_t v) {
  set_int(c, T_NEGINT, v);
}
static void cb_n64(void *c, uint64_t v) {
  set_int(c, T_NEGINT, v);
}
static void cb_array(void *c, size_t n) {
  set_int(c, T_ARRAY, n);
}
static void cb_map(void *c, size_t n) {
  set_int(c, T_MAP, n);
}
static void cb_tag(void *c, uint64_t v) {
  set_int(c, T_TAG, v);
}

static void set_float(void *c, double v) {
  tok_t *t = c;
  t->type = T_FLOAT;
  t->f = v;
}
static void cb_f32(void *c, float v) {
  set_float(c, v);
}
static void cb_f64(void *c, double v) {
  set_float(c, v);
}

static void set_type(void *c, tok_type_t type) {
  ((tok_t *)c)->type = type;
}
static void cb_indef(void *c) {
  set_type(c, T_INDEF);
}
static void cb_undef(void *c) {
  set_type(c, T_UNDEF);
}
static void cb_null(void *c) {
  set_type(c, T_NULL);
}
static void cb_break(void *c) {
  set_type(c, T_BREAK);
}
static void cb_bool(void *c, bool v) {
  set_type(c, T_BOOL);
  ((tok_t *)c)->b = v;
}

static void set_str(void *c, tok_type_t type, cbor_data data, size_t len) {
  tok_t *t = c;
  t->type = type;
  t->str = data;
  t->str_len = len;
}
static void cb_bytes(void *c, cbor_data d, size_t n) {
  set_str(c, T_BYTES, d, n);
}
static void cb_text(void *c, cbor_data d, size_t n) {
  set_str(c, T_TEXT, d, n);
}

static const struct cbor_callbacks callbacks = {
    .uint8 = cb_u8,
    .uint16 = cb_u16,
    .uint32 = cb_u32,
    .uint64 = cb_u64,
    .negint8 = cb_n8,
    .negint16 = cb_n16,
    .negint32 = cb_n32,
    .negint64 = cb_n64,
    .byte_string_start = cb_indef,
    .byte_string = cb_bytes,
    .string = cb_text,
    .string_start = cb_indef,
    .indef_array_start = cb_indef,
    .array_start = cb_array,
    .indef_map_start = cb_indef,
    .map_start = cb_map,
    .tag = cb_tag,
    .float2 = cb_f32,
    .float4 = cb_f32,
    .float8 = cb_f64,
    .undefined = cb_undef,
    .null = cb_null,
    .boolean = cb_bool,
    .indef_break = cb_break,
};

/*
 * Length a definite string head at buf[0..left) announces, so a forged length is refused
 * before anyone adds it to a pointer. Returns false when the head itself is incomplete.
 */
static bool string_len(const uint8_t *p, size_t left, uint64_t *out) {
  unsigned info = p[0] & 0x1fu;
  if (info < 24) {
    *out = info;
    return true;
  }
  unsigned n = info == 24 ? 1 : info == 25 ? 2 : info == 26 ? 4 : info == 27 ? 8 : 0;
  if (n == 0 || left < 1 + n) {
    *out = 0;
    return n != 0 ? false : true; /* Reserved or indefinite: libcbor reports it. */
  }
  uint64_t v = 0;
  for (unsigned i = 0; i < n; i++) {
    v = (v << 8) | p[1 + i];
  }
  *out = v;
  return true;
}

/*
 * Reads the next item head into *t. Returns 0, EM_PROTO_ETRUNCATED, EM_PROTO_EMALFORMED or
 * EM_PROTO_EINDEFINITE. Containers are checked against the bytes left: each element needs
 * at least one byte, so a larger count means the message is truncated.
 */
static int next(dec_t *d, tok_t *t) {
  d->item_pos = d->pos;
  size_t left = d->len - d->pos;
  if (left == 0) {
    return EM_PROTO_ETRUNCATED;
  }
  const uint8_t *p = d->buf + d->pos;
  unsigned major = p[0] >> 5;
  if (major == 2 || major == 3) {
    uint64_t slen;
    if (!string_len(p, left, &slen)) {
      return EM_PROTO_ETRUNCATED;
    }
    if (slen > left) {
      return EM_PROTO_ETRUNCATED;
    }
  }
  memset(t, 0, sizeof(*t));
  struct cbor_decoder_result r = cbor_stream_decode(p, left, &callbacks, t);
  if (r.status == CBOR_DECODER_NEDATA) {
    return EM_PROTO_ETRUNCATED;
  }
  if (r.status != CBOR_DECODER_FINISHED || r.read == 0 || r.read > left) {
    return EM_PROTO_EMALFORMED;
  }
  d->pos += r.read;
  if (t->type == T_INDEF) {
    return EM_PROTO_EINDEFINITE;
  }
  if (t->type == T_BREAK || t->type == T_NONE) {
    return EM_PROTO_EMALFORMED;
  }
  left = d->len - d->pos;
  if (t->type == T_ARRAY && t->u > left) {
    return EM_PROTO_ETRUNCATED;
  }
  if (t->type == T_MAP && t->u > left / 2) {
    return EM_PROTO_ETRUNCATED;
  }
  return 0;
}

/* --- scratch ------------------------------------------------------------------------- */

static void *scratch_alloc(dec_t *d, size_t size) {
  size_t at = (d->scratch_used + 7u) & ~(size_t)7u;
  if (at > d->scratch_len || size > d->scratch_len - at) {
    return NULL;
  }
  d->scratch_used = at + size;
  return d->scratch + at;
}

size_t em_proto_scratch_bytes(size_t len) {
  /*
   * Decoded bytes per encoded byte, at worst: an idle stage window {0: "x", 1: 0} is 6 bytes
   * and becomes an em_stage_t (104 bytes on LP64) plus its name (8 with alignment): 18.7.
   * A sample is 2 bytes -> 24 (12), a bucket 2 -> 16 (8), a metric definition 11 -> 56.
   * 20 per byte covers all; the constant covers the alignment of the first array.
   */
  if (len > EM_PROTO_MAX_MESSAGE_BYTES) {
    len = EM_PROTO_MAX_MESSAGE_BYTES;
  }
  return 20u * len + 256u;
}

/* --- typed readers -------------------------------------------------------------------- */

/* Enters an array or map: depth check. */
static int enter(dec_t *d) {
  if (d->depth + 1 > EM_PROTO_MAX_DEPTH) {
    return EM_PROTO_EDEPTH;
  }
  d->depth++;
  return 0;
}

static void leave(dec_t *d) {
  d->depth--;
}

/* Skips one item of any type (an unknown key's value), with its children. */
static int skip(dec_t *d) {
  tok_t t;
  int rc = next(d, &t);
  if (rc) {
    return rc;
  }
  /* A tag wraps exactly one item. Chains are walked in a loop, not by recursion: each tag
   * is at least one byte, so the input's length bounds the loop. */
  while (rc == 0 && t.type == T_TAG) {
    rc = next(d, &t);
  }
  if (rc) {
    return rc;
  }
  if (t.type != T_ARRAY && t.type != T_MAP) {
    return 0;
  }
  rc = enter(d);
  if (rc) {
    return rc;
  }
  uint64_t items = t.type == T_MAP ? 2 * t.u : t.u;
  for (uint64_t i = 0; i < items && !rc; i++) {
    rc = skip(d);
  }
  leave(d);
  return rc;
}

static int read_uint(dec_t *d, uint64_t max, uint64_t *out) {
  tok_t t;
  int rc = next(d, &t);
  if (rc) {
    return rc;
  }
  if (t.type != T_UINT) {
    return EM_PROTO_ETYPE;
  }
  if (t.u > max) {
    return EM_PROTO_ERANGE;
  }
  *out = t.u;
  return 0;
}

static int read_int(dec_t *d, int64_t min, int64_t max, int64_t *out) {
  tok_t t;
  int rc = next(d, &t);
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

static int read_bool(dec_t *d, bool *out) {
  tok_t t;
  int rc = next(d, &t);
  if (rc) {
    return rc;
  }
  if (t.type != T_BOOL) {
    return EM_PROTO_ETYPE;
  }
  *out = t.b;
  return 0;
}

/* A text string of the given class, copied NUL-terminated into scratch. */
static int read_str(dec_t *d, em_str_class_t cls, size_t max, const char **out) {
  tok_t t;
  int rc = next(d, &t);
  if (rc) {
    return rc;
  }
  if (t.type != T_TEXT) {
    return EM_PROTO_ETYPE;
  }
  rc = em__check_str((const char *)t.str, t.str_len, cls, max);
  if (rc) {
    return rc;
  }
  char *s = scratch_alloc(d, t.str_len + 1);
  if (!s) {
    return EM_PROTO_ESCRATCH;
  }
  memcpy(s, t.str, t.str_len);
  s[t.str_len] = '\0';
  *out = s;
  return 0;
}

/* A number, or null when `allow_null`. */
static int read_value(dec_t *d, bool allow_null, em_value_t *out) {
  tok_t t;
  int rc = next(d, &t);
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
static int open_container(dec_t *d, tok_type_t type, uint64_t max_items, uint64_t *n) {
  tok_t t;
  int rc = next(d, &t);
  if (rc) {
    return rc;
  }
  if (t.type != type) {
    return EM_PROTO_ETYPE;
  }
  if (t.u > max_items) {
    return EM_PROTO_ELIMIT;
  }
  *n = t.u;
  return enter(d);
}

/*
 * Reads the next map key: an unsigned integer, not seen before in this map when < 64
 * (`seen` is the bitmap of keys so far). Returns the key in *key.
 */
static int read_key(dec_t *d, uint64_t *seen, uint64_t *key) {
  tok_t t;
  int rc = next(d, &t);
  if (rc) {
    return rc;
  }
  if (t.type != T_UINT) {
    return EM_PROTO_EKEY;
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
static int require(dec_t *d, size_t map_pos, uint64_t seen, uint64_t required) {
  if ((seen & required) != required) {
    d->item_pos = map_pos;
    return EM_PROTO_EMISSING;
  }
  return 0;
}

#define BIT(k) (UINT64_C(1) << (k))

/* Reads one element of an array into `elem` (typed by the caller). */
typedef int (*elem_fn)(dec_t *d, void *elem);

/*
 * An array of at most `max` elements of `elem_size` bytes, each read by `fn` into scratch.
 * On success *out points at the elements and *n_out is their count.
 */
static int read_array(dec_t *d, uint64_t max, size_t elem_size, elem_fn fn, void **out,
                      size_t *n_out) {
  uint64_t n = 0;
  int rc = open_container(d, T_ARRAY, max, &n);
  if (rc) {
    return rc;
  }
  uint8_t *elems = scratch_alloc(d, (size_t)n * elem_size);
  if (!elems && n) {
    return EM_PROTO_ESCRATCH;
  }
  for (uint64_t i = 0; i < n && !rc; i++) {
    rc = fn(d, elems + i * elem_size);
  }
  if (rc) {
    return rc;
  }
  leave(d);
  *out = elems;
  *n_out = (size_t)n;
  return 0;
}

/* --- birth ---------------------------------------------------------------------------- */

static int read_metric(dec_t *d, void *elem) {
  em_metric_def_t *m = elem;
  size_t at = d->pos;
  uint64_t n = 0, seen = 0, key = 0, v = 0;
  int rc = open_container(d, T_MAP, 64, &n);
  memset(m, 0, sizeof(*m));
  for (uint64_t i = 0; i < n && !rc; i++) {
    rc = read_key(d, &seen, &key);
    if (rc) {
      break;
    }
    switch (key) {
    case KM_ALIAS:
      rc = read_uint(d, EM_PROTO_MAX_ALIAS, &v);
      m->alias = (uint32_t)v;
      break;
    case KM_NAME:
      rc = read_str(d, STR_NAME, EM_PROTO_MAX_NAME_BYTES, &m->name);
      break;
    case KM_UNIT:
      rc = read_str(d, STR_NAME, EM_PROTO_MAX_UNIT_BYTES, &m->unit);
      break;
    case KM_KIND:
      rc = read_uint(d, EM_METRIC_DELTA, &v);
      m->kind = (em_metric_kind_t)v;
      break;
    case KM_ABSENT:
      rc = read_str(d, STR_TEXT, EM_PROTO_MAX_TEXT_BYTES, &m->absent_reason);
      break;
    default:
      rc = skip(d);
      break;
    }
  }
  if (rc) {
    return rc;
  }
  leave(d);
  return require(d, at, seen, BIT(KM_ALIAS) | BIT(KM_NAME) | BIT(KM_UNIT) | BIT(KM_KIND));
}

static int read_budget(dec_t *d, void *elem) {
  em_budget_t *u = elem;
  size_t at = d->pos;
  uint64_t n = 0, seen = 0, key = 0, v = 0;
  int rc = open_container(d, T_MAP, 64, &n);
  memset(u, 0, sizeof(*u));
  for (uint64_t i = 0; i < n && !rc; i++) {
    rc = read_key(d, &seen, &key);
    if (rc) {
      break;
    }
    switch (key) {
    case KU_ID:
      rc = read_str(d, STR_NAME, EM_PROTO_MAX_NAME_BYTES, &u->id);
      break;
    case KU_RULE:
      rc = read_str(d, STR_IDENT, EM_PROTO_MAX_NAME_BYTES, &u->rule);
      break;
    case KU_LEVEL:
      rc = read_uint(d, EM_LEVEL_CRITICAL, &v);
      if (!rc && v < EM_LEVEL_WARN) {
        rc = EM_PROTO_ERANGE;
      }
      u->level = (em_level_t)v;
      break;
    case KU_BOUND:
      rc = read_value(d, false, &u->bound);
      break;
    case KU_STAGE:
      rc = read_str(d, STR_IDENT, EM_PROTO_MAX_STAGE_BYTES, &u->stage);
      break;
    case KU_WINDOW:
      rc = read_uint(d, UINT64_MAX, &u->window_ns);
      break;
    default:
      rc = skip(d);
      break;
    }
  }
  if (rc) {
    return rc;
  }
  leave(d);
  return require(d, at, seen, BIT(KU_ID) | BIT(KU_RULE) | BIT(KU_LEVEL) | BIT(KU_BOUND));
}

static int read_metrics(dec_t *d, em_birth_t *b) {
  size_t at = d->pos;
  void *list = NULL;
  int rc = read_array(d, EM_PROTO_MAX_METRICS, sizeof(em_metric_def_t), read_metric, &list,
                      &b->n_metrics);
  if (rc) {
    return rc;
  }
  b->metrics = list;
  for (size_t i = 0; i < b->n_metrics; i++) {
    for (size_t j = 0; j < i; j++) {
      if (b->metrics[j].alias == b->metrics[i].alias) {
        d->item_pos = at;
        return EM_PROTO_EDUPLICATE;
      }
    }
  }
  return 0;
}

static int read_budgets(dec_t *d, em_birth_t *b) {
  void *list = NULL;
  int rc =
      read_array(d, EM_PROTO_MAX_BUDGETS, sizeof(em_budget_t), read_budget, &list, &b->n_budgets);
  b->budgets = list;
  return rc;
}

static int read_birth_key(dec_t *d, uint64_t key, em_birth_t *b) {
  switch (key) {
  case KB_DEVICE:
    return read_str(d, STR_IDENT, EM_PROTO_MAX_NAME_BYTES, &b->device);
  case KB_AGENT:
    return read_str(d, STR_NAME, EM_PROTO_MAX_NAME_BYTES, &b->agent_version);
  case KB_BOARD:
    return read_str(d, STR_NAME, EM_PROTO_MAX_NAME_BYTES, &b->board);
  case KB_PERIOD:
    return read_uint(d, UINT64_MAX, &b->period_ns);
  case KB_METRICS:
    return read_metrics(d, b);
  case KB_BUDGETS:
    return read_budgets(d, b);
  default:
    return skip(d);
  }
}

/* --- data ----------------------------------------------------------------------------- */

static int cmp_sample(const void *a, const void *b) {
  uint32_t x = ((const em_sample_t *)a)->alias, y = ((const em_sample_t *)b)->alias;
  return (x > y) - (x < y);
}

static int read_values(dec_t *d, em_data_t *out) {
  size_t at = d->pos;
  uint64_t n = 0, v = 0;
  int rc = open_container(d, T_MAP, EM_PROTO_MAX_METRICS, &n);
  if (rc) {
    return rc;
  }
  em_sample_t *s = scratch_alloc(d, (size_t)n * sizeof(*s));
  if (!s && n) {
    return EM_PROTO_ESCRATCH;
  }
  for (uint64_t i = 0; i < n && !rc; i++) {
    rc = read_uint(d, EM_PROTO_MAX_ALIAS, &v);
    if (rc == EM_PROTO_ETYPE) {
      rc = EM_PROTO_EKEY;
    }
    if (!rc) {
      s[i].alias = (uint32_t)v;
      rc = read_value(d, true, &s[i].value);
    }
  }
  if (rc) {
    return rc;
  }
  leave(d);
  if (n > 1) {
    qsort(s, (size_t)n, sizeof(*s), cmp_sample);
  }
  for (uint64_t i = 1; i < n; i++) {
    if (s[i].alias == s[i - 1].alias) {
      d->item_pos = at;
      return EM_PROTO_EDUPLICATE;
    }
  }
  out->samples = s;
  out->n_samples = (size_t)n;
  return 0;
}

/* Buckets: [first index, count, (gap >= 1, count)...], decoded to absolute indices. */
static int read_buckets(dec_t *d, em_stage_t *st) {
  uint64_t n = 0;
  int rc = open_container(d, T_ARRAY, 2 * EM_PROTO_MAX_BUCKETS, &n);
  if (rc) {
    return rc;
  }
  if (n % 2) {
    return EM_PROTO_EINCONSISTENT;
  }
  em_bucket_t *b = scratch_alloc(d, (size_t)(n / 2) * sizeof(*b));
  if (!b && n) {
    return EM_PROTO_ESCRATCH;
  }
  int64_t index = 0;
  for (uint64_t i = 0; i < n / 2; i++) {
    if (i == 0) {
      rc = read_int(d, INT32_MIN, INT32_MAX, &index);
    } else {
      uint64_t gap = 0;
      rc = read_uint(d, UINT32_MAX, &gap);
      if (!rc && (gap == 0 || index + (int64_t)gap > INT32_MAX)) {
        rc = gap == 0 ? EM_PROTO_EINCONSISTENT : EM_PROTO_ERANGE;
      }
      index += (int64_t)gap;
    }
    if (!rc) {
      b[i].index = (int32_t)index;
      rc = read_uint(d, UINT64_MAX, &b[i].count);
    }
    if (rc) {
      return rc;
    }
  }
  leave(d);
  st->buckets = b;
  st->n_buckets = (size_t)(n / 2);
  return 0;
}

static int read_stage(dec_t *d, void *elem) {
  em_stage_t *st = elem;
  size_t at = d->pos;
  uint64_t n = 0, seen = 0, key = 0;
  int64_t scale = 0;
  int rc = open_container(d, T_MAP, 64, &n);
  memset(st, 0, sizeof(*st));
  for (uint64_t i = 0; i < n && !rc; i++) {
    rc = read_key(d, &seen, &key);
    if (rc) {
      break;
    }
    uint64_t *field = NULL;
    switch (key) {
    case KS_NAME:
      rc = read_str(d, STR_IDENT, EM_PROTO_MAX_STAGE_BYTES, &st->name);
      break;
    case KS_COUNT:
      field = &st->count;
      break;
    case KS_SUM:
      field = &st->sum_ns;
      break;
    case KS_MIN:
      field = &st->min_ns;
      break;
    case KS_MAX:
      field = &st->max_ns;
      break;
    case KS_P50:
      field = &st->p50_ns;
      break;
    case KS_P90:
      field = &st->p90_ns;
      break;
    case KS_P99:
      field = &st->p99_ns;
      break;
    case KS_P999:
      field = &st->p999_ns;
      break;
    case KS_ZERO:
      field = &st->zero_count;
      break;
    case KS_SCALE:
      rc = read_int(d, EM_PROTO_MIN_SCALE, EM_PROTO_MAX_SCALE, &scale);
      st->scale = (int32_t)scale;
      break;
    case KS_BUCKETS:
      rc = read_buckets(d, st);
      break;
    default:
      rc = skip(d);
      break;
    }
    if (field && !rc) {
      rc = read_uint(d, UINT64_MAX, field);
    }
  }
  if (rc) {
    return rc;
  }
  leave(d);
  rc = require(d, at, seen, BIT(KS_NAME) | BIT(KS_COUNT));
  if (rc) {
    return rc;
  }
  uint64_t summary = BIT(KS_SUM) | BIT(KS_MIN) | BIT(KS_MAX) | BIT(KS_P50) | BIT(KS_P90) |
                     BIT(KS_P99) | BIT(KS_P999) | BIT(KS_SCALE) | BIT(KS_BUCKETS);
  d->item_pos = at;
  if (st->count == 0) {
    return (seen & (summary | BIT(KS_ZERO))) ? EM_PROTO_EINCONSISTENT : 0;
  }
  rc = require(d, at, seen, summary);
  return rc ? rc : em__check_stage(st);
}

static int read_data_key(dec_t *d, uint64_t key, em_data_t *out) {
  uint64_t v = 0;
  void *stages = NULL;
  int rc;
  switch (key) {
  case KD_SEQ:
    rc = read_uint(d, UINT32_MAX, &v);
    out->seq = (uint32_t)v;
    return rc;
  case KD_WINDOW:
    return read_uint(d, UINT64_MAX, &out->window_ns);
  case KD_VALUES:
    return read_values(d, out);
  case KD_STAGES:
    rc =
        read_array(d, EM_PROTO_MAX_STAGES, sizeof(em_stage_t), read_stage, &stages, &out->n_stages);
    out->stages = stages;
    return rc;
  case KD_LEVEL:
    rc = read_uint(d, EM_LEVEL_CRITICAL, &v);
    out->level = (em_level_t)v;
    return rc;
  case KD_HISTORICAL:
    return read_bool(d, &out->historical);
  default:
    return skip(d);
  }
}

/* --- state, status, cmd --------------------------------------------------------------- */

static int read_state_key(dec_t *d, uint64_t key, em_state_t *out) {
  uint64_t v = 0;
  int rc;
  switch (key) {
  case KT_LEVEL:
  case KT_PREV:
    rc = read_uint(d, EM_LEVEL_CRITICAL, &v);
    *(key == KT_LEVEL ? &out->level : &out->prev_level) = (em_level_t)v;
    return rc;
  case KT_MONO:
    return read_uint(d, UINT64_MAX, &out->mono_ns);
  case KT_RULE:
    return read_str(d, STR_NAME, EM_PROTO_MAX_NAME_BYTES, &out->rule);
  case KT_STAGE:
    return read_str(d, STR_IDENT, EM_PROTO_MAX_STAGE_BYTES, &out->stage);
  case KT_VALUE:
    return read_value(d, false, &out->value);
  case KT_BOUND:
    return read_value(d, false, &out->bound);
  case KT_REASON:
    return read_str(d, STR_TEXT, EM_PROTO_MAX_TEXT_BYTES, &out->reason);
  case KT_HISTORICAL:
    return read_bool(d, &out->historical);
  default:
    return skip(d);
  }
}

/* --- top level ------------------------------------------------------------------------ */

/* Keys each kind needs beyond version, kind and its head. */
static uint64_t required_keys(em_msg_kind_t kind) {
  switch (kind) {
  case EM_MSG_BIRTH:
    return BIT(KB_DEVICE) | BIT(KB_AGENT) | BIT(KB_BOARD) | BIT(KB_PERIOD) | BIT(KB_METRICS) |
           BIT(KB_BUDGETS);
  case EM_MSG_DATA:
    return BIT(KD_SEQ) | BIT(KD_WINDOW) | BIT(KD_VALUES) | BIT(KD_STAGES);
  case EM_MSG_STATE:
    return BIT(KT_LEVEL) | BIT(KT_PREV) | BIT(KT_MONO);
  case EM_MSG_STATUS:
    return BIT(KX_ONLINE);
  case EM_MSG_CMD:
    return BIT(KC_COMMAND);
  case EM_MSG_FLIGHT: /* em_flight_decode() reads it; never reached here. */
    break;
  }
  return 0;
}

/* The value of one kind-specific key. */
static int read_kind_key(dec_t *d, uint64_t key, em_msg_t *out) {
  uint64_t v = 0;
  int rc;
  switch (out->kind) {
  case EM_MSG_BIRTH:
    return read_birth_key(d, key, &out->u.birth);
  case EM_MSG_DATA:
    return read_data_key(d, key, &out->u.data);
  case EM_MSG_STATE:
    return read_state_key(d, key, &out->u.state);
  case EM_MSG_STATUS:
    return key == KX_ONLINE ? read_bool(d, &out->u.status.online) : skip(d);
  case EM_MSG_CMD:
    if (key != KC_COMMAND) {
      return skip(d);
    }
    rc = read_uint(d, UINT32_MAX, &v);
    if (!rc && v != EM_CMD_REBIRTH) {
      rc = EM_PROTO_ERANGE;
    }
    out->u.cmd.command = (em_cmd_code_t)v;
    return rc;
  case EM_MSG_FLIGHT:
    break;
  }
  return skip(d);
}

/* The head of `m`: every kind has one. */
static em_msg_head_t *head_of(em_msg_t *m) {
  switch (m->kind) {
  case EM_MSG_BIRTH:
    return &m->u.birth.head;
  case EM_MSG_DATA:
    return &m->u.data.head;
  case EM_MSG_STATE:
    return &m->u.state.head;
  case EM_MSG_STATUS:
    return &m->u.status.head;
  case EM_MSG_CMD:
  case EM_MSG_FLIGHT:
    break;
  }
  return &m->u.cmd.head;
}

/* Keys of the head that kind `kind` carries: all required. */
static uint64_t head_keys(em_msg_kind_t kind) {
  uint64_t keys = 0;
  for (size_t i = 0; i < EM_HEAD_FIELDS; i++) {
    if (em__head_carries(&em__head_fields[i], kind)) {
      keys |= BIT(em__head_fields[i].key);
    }
  }
  return keys;
}

/*
 * The top-level map. Version and kind must come first (keys 0 and 1, in that order) so the
 * rest can be read by the kind's rules in one pass.
 */
static int read_message(dec_t *d, em_msg_t *out) {
  uint64_t n = 0, seen = 0, key = 0, v = 0;
  int rc = open_container(d, T_MAP, 64, &n);
  if (rc) {
    return rc;
  }
  if (n < 2) {
    d->item_pos = 0;
    return EM_PROTO_EMISSING;
  }
  rc = read_key(d, &seen, &key);
  if (!rc && key != K_VERSION) {
    rc = EM_PROTO_EMISSING;
  }
  if (!rc) {
    rc = read_uint(d, UINT32_MAX, &v);
  }
  if (!rc && v != EM_PROTO_VERSION) {
    rc = EM_PROTO_EVERSION;
  }
  if (!rc) {
    rc = read_key(d, &seen, &key);
  }
  if (!rc && key != K_KIND) {
    rc = EM_PROTO_EMISSING;
  }
  if (!rc) {
    rc = read_uint(d, UINT32_MAX, &v);
  }
  if (!rc && v > EM_MSG_CMD) {
    rc = EM_PROTO_EKIND;
  }
  if (rc) {
    return rc;
  }
  out->kind = (em_msg_kind_t)v;
  if (out->kind == EM_MSG_DATA) {
    out->u.data.level = EM_LEVEL_NONE;
  }
  for (uint64_t i = 2; i < n && !rc; i++) {
    rc = read_key(d, &seen, &key);
    if (rc) {
      break;
    }
    const em_head_field_t *f = em__head_field(out->kind, key);
    if (f) {
      rc = read_uint(d, f->max, &v);
      em__head_set(head_of(out), f, v);
    } else {
      rc = read_kind_key(d, key, out);
    }
  }
  if (rc) {
    return rc;
  }
  leave(d);
  return require(d, 0, seen, head_keys(out->kind) | required_keys(out->kind));
}

int em_proto_decode(const uint8_t *buf, size_t len, em_msg_t *out, void *scratch,
                    size_t scratch_len, size_t *error_offset) {
  if (error_offset) {
    *error_offset = 0;
  }
  if (!out || (!buf && len) || (!scratch && scratch_len)) {
    return EM_PROTO_EINVAL;
  }
  if (len > EM_PROTO_MAX_MESSAGE_BYTES) {
    return EM_PROTO_ETOOBIG;
  }
  memset(out, 0, sizeof(*out));
  dec_t d = {.buf = buf, .len = len, .scratch = scratch, .scratch_len = scratch_len};
  int rc = read_message(&d, out);
  if (!rc && d.pos != len) {
    d.item_pos = d.pos;
    rc = EM_PROTO_ETRAILING;
  }
  if (rc) {
    if (error_offset) {
      *error_offset = d.item_pos;
    }
    memset(out, 0, sizeof(*out));
  }
  return rc;
}
