/*
 * cbor_write.c - the CBOR writer shared by the encoders (cbor_write.h): each item's head is
 * built by cbor_head.c and copied into the caller's buffer when it fits whole, and counted
 * either way. Owns nothing, never allocates, reentrant.
 */
#include <string.h>

#include "cbor_head.h"
#include "cbor_write.h"

/* Appends bytes[0..n) when they fit whole before cap; counts them either way. */
static void w_bytes(em__writer_t *w, const void *bytes, size_t n) {
  if (n != 0 && w->pos <= w->cap && n <= w->cap - w->pos) {
    memcpy(w->buf + w->pos, bytes, n);
  }
  w->pos += n;
}

/* Appends the shortest head of major type `major` with argument `arg`. */
static void w_head(em__writer_t *w, unsigned major, uint64_t arg) {
  if (w->pos <= w->cap && w->cap - w->pos >= EM_CBOR_HEAD_MAX) {
    w->pos += em__head_write(w->buf + w->pos, major, arg); /* Room for the longest: in place. */
    return;
  }
  uint8_t head[EM_CBOR_HEAD_MAX];
  w_bytes(w, head, em__head_write(head, major, arg));
}

void em__w_uint(em__writer_t *w, uint64_t v) {
  w_head(w, EM_CBOR_UINT, v);
}

void em__w_int(em__writer_t *w, int64_t v) {
  if (v >= 0) {
    em__w_uint(w, (uint64_t)v);
    return;
  }
  em__w_diff(w, 0, (uint64_t)(-(v + 1)) + 1u); /* -(v + 1) + 1 == -v, without overflow. */
}

void em__w_map(em__writer_t *w, size_t entries) {
  w_head(w, EM_CBOR_MAP, entries);
}

void em__w_array(em__writer_t *w, size_t items) {
  w_head(w, EM_CBOR_ARRAY, items);
}

void em__w_bool(em__writer_t *w, bool v) {
  w_head(w, EM_CBOR_SIMPLE, v ? EM_CBOR_TRUE : EM_CBOR_FALSE);
}

void em__w_null(em__writer_t *w) {
  w_head(w, EM_CBOR_SIMPLE, EM_CBOR_NULL);
}

void em__w_float(em__writer_t *w, double v) {
  uint8_t head[EM_CBOR_HEAD_MAX];
  float f = (float)v;
  size_t n;
  if ((double)f == v) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof(bits));
    n = em__head_write_fixed(head, EM_CBOR_SIMPLE, 4, bits); /* binary32: exact. */
  } else {
    uint64_t bits;
    memcpy(&bits, &v, sizeof(bits));
    n = em__head_write_fixed(head, EM_CBOR_SIMPLE, 8, bits);
  }
  w_bytes(w, head, n);
}

void em__w_str(em__writer_t *w, const char *s) {
  size_t len = strlen(s);
  w_head(w, EM_CBOR_TEXT, len);
  w_bytes(w, s, len);
}

void em__w_value(em__writer_t *w, const em_value_t *v) {
  switch (v->type) {
  case EM_VALUE_ABSENT:
    em__w_null(w);
    break;
  case EM_VALUE_UINT:
    em__w_uint(w, v->as.u);
    break;
  case EM_VALUE_INT:
    em__w_int(w, v->as.i);
    break;
  case EM_VALUE_FLOAT:
    em__w_float(w, v->as.f);
    break;
  }
}

void em__kv_uint(em__writer_t *w, unsigned key, uint64_t v) {
  em__w_uint(w, key);
  em__w_uint(w, v);
}

void em__kv_str(em__writer_t *w, unsigned key, const char *s) {
  em__w_uint(w, key);
  em__w_str(w, s);
}

void em__w_cause(em__writer_t *w, unsigned first_key, const char *rule, const char *stage,
                 const em_value_t *value, const em_value_t *bound, const char *reason) {
  if (rule) {
    em__kv_str(w, first_key + CAUSE_RULE, rule);
  }
  if (stage) {
    em__kv_str(w, first_key + CAUSE_STAGE, stage);
  }
  if (value->type != EM_VALUE_ABSENT) {
    em__w_uint(w, first_key + CAUSE_VALUE);
    em__w_value(w, value);
  }
  if (bound->type != EM_VALUE_ABSENT) {
    em__w_uint(w, first_key + CAUSE_BOUND);
    em__w_value(w, bound);
  }
  if (reason) {
    em__kv_str(w, first_key + CAUSE_REASON, reason);
  }
}

void em__w_common(em__writer_t *w, size_t n_more, em_msg_kind_t kind, const em_msg_head_t *head) {
  size_t n_head = 0;
  for (size_t i = 0; i < EM_HEAD_FIELDS; i++) {
    n_head += em__head_carries(&em__head_fields[i], kind);
  }
  em__w_map(w, 2 + n_head + n_more);
  em__kv_uint(w, K_VERSION, EM_PROTO_VERSION);
  em__kv_uint(w, K_KIND, (uint64_t)kind);
  for (size_t i = 0; i < EM_HEAD_FIELDS; i++) {
    const em_head_field_t *f = &em__head_fields[i];
    if (em__head_carries(f, kind)) {
      em__kv_uint(w, f->key, em__head_get(head, f));
    }
  }
}

int em__append_historical(const uint8_t *live, size_t len, unsigned key, size_t max_len,
                          uint8_t *out, size_t cap, size_t *out_len) {
  *out_len = len + 2;
  if (*out_len > max_len) {
    return EM_PROTO_ETOOBIG;
  }
  if (*out_len > cap) {
    return EM_PROTO_ENOSPACE;
  }
  memmove(out, live, len);
  out[0]++;
  out[len] = (uint8_t)key; /* Below 24: a one-byte unsigned integer. */
  out[len + 1] = 0xf5;     /* CBOR true. */
  return 0;
}

size_t em__uint_bytes(uint64_t v) {
  return v < 24 ? 1 : v <= UINT8_MAX ? 2 : v <= UINT16_MAX ? 3 : v <= UINT32_MAX ? 5 : 9;
}

void em__w_diff(em__writer_t *w, uint64_t a, uint64_t b) {
  if (a >= b) {
    em__w_uint(w, a - b);
    return;
  }
  w_head(w, EM_CBOR_NEGINT, b - a - 1); /* CBOR negative: -1 - n == a - b. */
}

size_t em__diff_bytes(uint64_t a, uint64_t b) {
  return em__uint_bytes(a >= b ? a - b : b - a - 1);
}

void em__w_trigger(em__writer_t *w, const em_trigger_t *t) {
  bool has_prev = t->prev_level != EM_LEVEL_NONE;
  em__w_map(w, 2 + (has_prev ? 1 : 0) + em__cause_count(EM_CAUSE_OF(t)));
  em__kv_uint(w, KG_CAUSE, t->cause);
  em__kv_uint(w, KG_LEVEL, (uint64_t)t->level);
  if (has_prev) {
    em__kv_uint(w, KG_PREV, (uint64_t)t->prev_level);
  }
  em__w_cause(w, KG_RULE, EM_CAUSE_OF(t));
}
