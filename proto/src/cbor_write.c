/*
 * cbor_write.c - the CBOR writer shared by the encoders (cbor_write.h): items are written with
 * libcbor's raw encoders into the caller's buffer, and counted past its end. Owns nothing,
 * never allocates, reentrant.
 */
#include <string.h>

#include <cbor.h>

#include "cbor_write.h"

typedef size_t (*head_fn)(size_t, unsigned char *, size_t);

/*
 * Appends one encoded item produced by `n = fn(buffer, room)`; on a short buffer encodes into
 * a scratch copy to learn the size and only advances the count.
 */
#define W_ITEM(w, call_with_buf_room)                                                              \
  do {                                                                                             \
    unsigned char *b_ = (w)->pos < (w)->cap ? (w)->buf + (w)->pos : NULL;                          \
    size_t room_ = (w)->pos < (w)->cap ? (w)->cap - (w)->pos : 0;                                  \
    size_t n_ = b_ ? call_with_buf_room(b_, room_) : 0;                                            \
    if (n_ == 0) {                                                                                 \
      unsigned char tmp_[9];                                                                       \
      n_ = call_with_buf_room(tmp_, sizeof(tmp_));                                                 \
    }                                                                                              \
    (w)->pos += n_;                                                                                \
  } while (0)

void em__w_uint(em__writer_t *w, uint64_t v) {
#define CALL(b, r) cbor_encode_uint(v, b, r)
  W_ITEM(w, CALL);
#undef CALL
}

void em__w_int(em__writer_t *w, int64_t v) {
  if (v >= 0) {
    em__w_uint(w, (uint64_t)v);
    return;
  }
  em__w_diff(w, 0, (uint64_t)(-(v + 1)) + 1u); /* -(v + 1) + 1 == -v, without overflow. */
}

static void w_head(em__writer_t *w, head_fn fn, size_t n) {
#define CALL(b, r) fn(n, b, r)
  W_ITEM(w, CALL);
#undef CALL
}

void em__w_map(em__writer_t *w, size_t entries) {
  w_head(w, cbor_encode_map_start, entries);
}

void em__w_array(em__writer_t *w, size_t items) {
  w_head(w, cbor_encode_array_start, items);
}

void em__w_bool(em__writer_t *w, bool v) {
#define CALL(b, r) cbor_encode_bool(v, b, r)
  W_ITEM(w, CALL);
#undef CALL
}

void em__w_null(em__writer_t *w) {
#define CALL(b, r) cbor_encode_null(b, r)
  W_ITEM(w, CALL);
#undef CALL
}

void em__w_float(em__writer_t *w, double v) {
  float f = (float)v;
  if ((double)f == v) {
#define CALL(b, r) cbor_encode_single(f, b, r)
    W_ITEM(w, CALL);
#undef CALL
  } else {
#define CALL(b, r) cbor_encode_double(v, b, r)
    W_ITEM(w, CALL);
#undef CALL
  }
}

void em__w_str(em__writer_t *w, const char *s) {
  size_t len = strlen(s);
  w_head(w, cbor_encode_string_start, len);
  if (w->pos <= w->cap && len <= w->cap - w->pos) {
    memcpy(w->buf + w->pos, s, len);
  }
  w->pos += len;
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
  uint64_t n = b - a - 1; /* CBOR negative: -1 - n == a - b. */
#define CALL(buf, r) cbor_encode_negint(n, buf, r)
  W_ITEM(w, CALL);
#undef CALL
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
