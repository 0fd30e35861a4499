/*
 * encode.c - writes v1 messages as CBOR into a caller-supplied buffer.
 *
 * Items are written with libcbor's raw encoders straight into the caller's buffer. When the
 * buffer runs out the writer keeps counting, so one call reports the exact size needed. Every
 * message is checked with the decoder's rules first (schema.h): what this file writes always
 * decodes. Owns nothing, never allocates, reentrant.
 */
#include <string.h>

#include <cbor.h>

#include "schema.h"

/* Output cursor. `pos` counts every byte the message needs, even past `cap`. */
typedef struct {
  uint8_t *buf;
  size_t cap;
  size_t pos;
} writer_t;

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

static void w_uint(writer_t *w, uint64_t v) {
#define CALL(b, r) cbor_encode_uint(v, b, r)
  W_ITEM(w, CALL);
#undef CALL
}

static void w_int(writer_t *w, int64_t v) {
  if (v >= 0) {
    w_uint(w, (uint64_t)v);
    return;
  }
  uint64_t n = (uint64_t)(-(v + 1)); /* CBOR negative: -1 - n. */
#define CALL(b, r) cbor_encode_negint(n, b, r)
  W_ITEM(w, CALL);
#undef CALL
}

static void w_head(writer_t *w, head_fn fn, size_t n) {
#define CALL(b, r) fn(n, b, r)
  W_ITEM(w, CALL);
#undef CALL
}

static void w_bool(writer_t *w, bool v) {
#define CALL(b, r) cbor_encode_bool(v, b, r)
  W_ITEM(w, CALL);
#undef CALL
}

static void w_null(writer_t *w) {
#define CALL(b, r) cbor_encode_null(b, r)
  W_ITEM(w, CALL);
#undef CALL
}

/* Floats go out as binary32 when that is exact, else binary64. */
static void w_float(writer_t *w, double v) {
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

static void w_str(writer_t *w, const char *s) {
  size_t len = strlen(s);
  w_head(w, cbor_encode_string_start, len);
  if (w->pos <= w->cap && len <= w->cap - w->pos) {
    memcpy(w->buf + w->pos, s, len);
  }
  w->pos += len;
}

static void w_value(writer_t *w, const em_value_t *v) {
  switch (v->type) {
  case EM_VALUE_ABSENT:
    w_null(w);
    break;
  case EM_VALUE_UINT:
    w_uint(w, v->as.u);
    break;
  case EM_VALUE_INT:
    w_int(w, v->as.i);
    break;
  case EM_VALUE_FLOAT:
    w_float(w, v->as.f);
    break;
  }
}

/* Key helpers: a map key followed by its value. */
static void kv_uint(writer_t *w, unsigned key, uint64_t v) {
  w_uint(w, key);
  w_uint(w, v);
}

static void kv_str(writer_t *w, unsigned key, const char *s) {
  w_uint(w, key);
  w_str(w, s);
}

/* Version, kind and the head's fields the kind carries; `n_more`: the kind's own keys. */
static void w_common(writer_t *w, size_t n_more, em_msg_kind_t kind, const em_msg_head_t *head) {
  size_t n_head = 0;
  for (size_t i = 0; i < EM_HEAD_FIELDS; i++) {
    n_head += em__head_carries(&em__head_fields[i], kind);
  }
  w_head(w, cbor_encode_map_start, 2 + n_head + n_more);
  kv_uint(w, K_VERSION, EM_PROTO_VERSION);
  kv_uint(w, K_KIND, (uint64_t)kind);
  for (size_t i = 0; i < EM_HEAD_FIELDS; i++) {
    const em_head_field_t *f = &em__head_fields[i];
    if (em__head_carries(f, kind)) {
      kv_uint(w, f->key, em__head_get(head, f));
    }
  }
}

static int check_level(em_level_t level) {
  return em__level_ok((int)level) ? 0 : EM_PROTO_ERANGE;
}

/* --- birth ---------------------------------------------------------------------------- */

static int check_birth(const em_birth_t *b) {
  int rc = em__check_cstr(b->device, STR_IDENT, EM_PROTO_MAX_NAME_BYTES);
  if (!rc) {
    rc = em__check_cstr(b->agent_version, STR_NAME, EM_PROTO_MAX_NAME_BYTES);
  }
  if (!rc) {
    rc = em__check_cstr(b->board, STR_NAME, EM_PROTO_MAX_NAME_BYTES);
  }
  if (rc) {
    return rc;
  }
  if (b->n_metrics > EM_PROTO_MAX_METRICS || b->n_budgets > EM_PROTO_MAX_BUDGETS) {
    return EM_PROTO_ELIMIT;
  }
  if ((b->n_metrics && !b->metrics) || (b->n_budgets && !b->budgets)) {
    return EM_PROTO_EINVAL;
  }
  for (size_t i = 0; i < b->n_metrics; i++) {
    const em_metric_def_t *m = &b->metrics[i];
    if (m->alias > EM_PROTO_MAX_ALIAS || (unsigned)m->kind > EM_METRIC_DELTA) {
      return EM_PROTO_ERANGE;
    }
    for (size_t j = 0; j < i; j++) {
      if (b->metrics[j].alias == m->alias) {
        return EM_PROTO_EDUPLICATE;
      }
    }
    rc = em__check_cstr(m->name, STR_NAME, EM_PROTO_MAX_NAME_BYTES);
    if (!rc) {
      rc = em__check_cstr(m->unit, STR_NAME, EM_PROTO_MAX_UNIT_BYTES);
    }
    if (!rc && m->absent_reason) {
      rc = em__check_cstr(m->absent_reason, STR_TEXT, EM_PROTO_MAX_TEXT_BYTES);
    }
    if (rc) {
      return rc;
    }
  }
  for (size_t i = 0; i < b->n_budgets; i++) {
    const em_budget_t *u = &b->budgets[i];
    if (u->level < EM_LEVEL_WARN || u->level > EM_LEVEL_CRITICAL) {
      return EM_PROTO_ERANGE;
    }
    if (u->bound.type == EM_VALUE_ABSENT) {
      return EM_PROTO_ETYPE;
    }
    rc = em__check_value(&u->bound);
    if (!rc) {
      rc = em__check_cstr(u->id, STR_NAME, EM_PROTO_MAX_NAME_BYTES);
    }
    if (!rc) {
      rc = em__check_cstr(u->rule, STR_IDENT, EM_PROTO_MAX_NAME_BYTES);
    }
    if (!rc && u->stage) {
      rc = em__check_cstr(u->stage, STR_IDENT, EM_PROTO_MAX_STAGE_BYTES);
    }
    if (rc) {
      return rc;
    }
  }
  return 0;
}

static void w_birth(writer_t *w, const em_birth_t *b) {
  w_common(w, 6, EM_MSG_BIRTH, &b->head);
  kv_str(w, KB_DEVICE, b->device);
  kv_str(w, KB_AGENT, b->agent_version);
  kv_str(w, KB_BOARD, b->board);
  kv_uint(w, KB_PERIOD, b->period_ns);
  w_uint(w, KB_METRICS);
  w_head(w, cbor_encode_array_start, b->n_metrics);
  for (size_t i = 0; i < b->n_metrics; i++) {
    const em_metric_def_t *m = &b->metrics[i];
    w_head(w, cbor_encode_map_start, m->absent_reason ? 5 : 4);
    kv_uint(w, KM_ALIAS, m->alias);
    kv_str(w, KM_NAME, m->name);
    kv_str(w, KM_UNIT, m->unit);
    kv_uint(w, KM_KIND, (uint64_t)m->kind);
    if (m->absent_reason) {
      kv_str(w, KM_ABSENT, m->absent_reason);
    }
  }
  w_uint(w, KB_BUDGETS);
  w_head(w, cbor_encode_array_start, b->n_budgets);
  for (size_t i = 0; i < b->n_budgets; i++) {
    const em_budget_t *u = &b->budgets[i];
    w_head(w, cbor_encode_map_start, 4 + (u->stage ? 1 : 0) + (u->window_ns ? 1 : 0));
    kv_str(w, KU_ID, u->id);
    kv_str(w, KU_RULE, u->rule);
    kv_uint(w, KU_LEVEL, (uint64_t)u->level);
    w_uint(w, KU_BOUND);
    w_value(w, &u->bound);
    if (u->stage) {
      kv_str(w, KU_STAGE, u->stage);
    }
    if (u->window_ns) {
      kv_uint(w, KU_WINDOW, u->window_ns);
    }
  }
}

/* --- data ----------------------------------------------------------------------------- */

static int check_data(const em_data_t *d) {
  if (d->n_samples > EM_PROTO_MAX_METRICS || d->n_stages > EM_PROTO_MAX_STAGES) {
    return EM_PROTO_ELIMIT;
  }
  if ((d->n_samples && !d->samples) || (d->n_stages && !d->stages)) {
    return EM_PROTO_EINVAL;
  }
  if (d->level != EM_LEVEL_NONE && check_level(d->level)) {
    return EM_PROTO_ERANGE;
  }
  for (size_t i = 0; i < d->n_samples; i++) {
    if (d->samples[i].alias > EM_PROTO_MAX_ALIAS) {
      return EM_PROTO_ERANGE;
    }
    if (i > 0 && d->samples[i].alias <= d->samples[i - 1].alias) {
      return d->samples[i].alias == d->samples[i - 1].alias ? EM_PROTO_EDUPLICATE : EM_PROTO_EINVAL;
    }
    int rc = em__check_value(&d->samples[i].value);
    if (rc) {
      return rc;
    }
  }
  for (size_t i = 0; i < d->n_stages; i++) {
    int rc = em__check_stage(&d->stages[i]);
    if (rc) {
      return rc;
    }
  }
  return 0;
}

/* Buckets as [first index, count, (gap to previous index, count)...]. */
static void w_buckets(writer_t *w, const em_stage_t *s) {
  w_head(w, cbor_encode_array_start, 2 * s->n_buckets);
  for (size_t i = 0; i < s->n_buckets; i++) {
    if (i == 0) {
      w_int(w, s->buckets[0].index);
    } else {
      w_uint(w, (uint64_t)((int64_t)s->buckets[i].index - s->buckets[i - 1].index));
    }
    w_uint(w, s->buckets[i].count);
  }
}

static void w_stage(writer_t *w, const em_stage_t *s) {
  if (s->count == 0) {
    w_head(w, cbor_encode_map_start, 2);
    kv_str(w, KS_NAME, s->name);
    kv_uint(w, KS_COUNT, 0);
    return;
  }
  w_head(w, cbor_encode_map_start, s->zero_count ? 12 : 11);
  kv_str(w, KS_NAME, s->name);
  kv_uint(w, KS_COUNT, s->count);
  kv_uint(w, KS_SUM, s->sum_ns);
  kv_uint(w, KS_MIN, s->min_ns);
  kv_uint(w, KS_MAX, s->max_ns);
  kv_uint(w, KS_P50, s->p50_ns);
  kv_uint(w, KS_P90, s->p90_ns);
  kv_uint(w, KS_P99, s->p99_ns);
  kv_uint(w, KS_P999, s->p999_ns);
  w_uint(w, KS_SCALE);
  w_int(w, s->scale);
  if (s->zero_count) {
    kv_uint(w, KS_ZERO, s->zero_count);
  }
  w_uint(w, KS_BUCKETS);
  w_buckets(w, s);
}

static void w_data(writer_t *w, const em_data_t *d) {
  size_t n_more = 4 + (d->level != EM_LEVEL_NONE ? 1 : 0) + (d->historical ? 1 : 0);
  w_common(w, n_more, EM_MSG_DATA, &d->head);
  kv_uint(w, KD_SEQ, d->seq);
  kv_uint(w, KD_WINDOW, d->window_ns);
  w_uint(w, KD_VALUES);
  w_head(w, cbor_encode_map_start, d->n_samples);
  for (size_t i = 0; i < d->n_samples; i++) {
    w_uint(w, d->samples[i].alias);
    w_value(w, &d->samples[i].value);
  }
  w_uint(w, KD_STAGES);
  w_head(w, cbor_encode_array_start, d->n_stages);
  for (size_t i = 0; i < d->n_stages; i++) {
    w_stage(w, &d->stages[i]);
  }
  if (d->level != EM_LEVEL_NONE) {
    kv_uint(w, KD_LEVEL, (uint64_t)d->level);
  }
  if (d->historical) {
    w_uint(w, KD_HISTORICAL);
    w_bool(w, true);
  }
}

/* --- state, status, cmd --------------------------------------------------------------- */

static int check_state(const em_state_t *s) {
  if (check_level(s->level) || check_level(s->prev_level)) {
    return EM_PROTO_ERANGE;
  }
  int rc = em__check_value(&s->value);
  if (!rc) {
    rc = em__check_value(&s->bound);
  }
  if (!rc && s->rule) {
    rc = em__check_cstr(s->rule, STR_NAME, EM_PROTO_MAX_NAME_BYTES);
  }
  if (!rc && s->stage) {
    rc = em__check_cstr(s->stage, STR_IDENT, EM_PROTO_MAX_STAGE_BYTES);
  }
  if (!rc && s->reason) {
    rc = em__check_cstr(s->reason, STR_TEXT, EM_PROTO_MAX_TEXT_BYTES);
  }
  return rc;
}

static void w_state(writer_t *w, const em_state_t *s) {
  bool has_value = s->value.type != EM_VALUE_ABSENT;
  bool has_bound = s->bound.type != EM_VALUE_ABSENT;
  size_t n_more = 3 + (s->rule ? 1 : 0) + (s->stage ? 1 : 0) + (has_value ? 1 : 0) +
                  (has_bound ? 1 : 0) + (s->reason ? 1 : 0) + (s->historical ? 1 : 0);
  w_common(w, n_more, EM_MSG_STATE, &s->head);
  kv_uint(w, KT_LEVEL, (uint64_t)s->level);
  kv_uint(w, KT_PREV, (uint64_t)s->prev_level);
  kv_uint(w, KT_MONO, s->mono_ns);
  if (s->rule) {
    kv_str(w, KT_RULE, s->rule);
  }
  if (s->stage) {
    kv_str(w, KT_STAGE, s->stage);
  }
  if (has_value) {
    w_uint(w, KT_VALUE);
    w_value(w, &s->value);
  }
  if (has_bound) {
    w_uint(w, KT_BOUND);
    w_value(w, &s->bound);
  }
  if (s->reason) {
    kv_str(w, KT_REASON, s->reason);
  }
  if (s->historical) {
    w_uint(w, KT_HISTORICAL);
    w_bool(w, true);
  }
}

static void w_status(writer_t *w, const em_status_t *s) {
  w_common(w, 1, EM_MSG_STATUS, &s->head);
  w_uint(w, KX_ONLINE);
  w_bool(w, s->online);
}

static void w_cmd(writer_t *w, const em_cmd_t *c) {
  w_common(w, 1, EM_MSG_CMD, &c->head);
  kv_uint(w, KC_COMMAND, (uint64_t)c->command);
}

/* --- entry point ---------------------------------------------------------------------- */

int em_proto_encode(const em_msg_t *msg, uint8_t *buf, size_t cap, size_t *out_len) {
  if (!msg || !out_len || (!buf && cap > 0)) {
    return EM_PROTO_EINVAL;
  }
  writer_t w = {.buf = buf, .cap = cap, .pos = 0};
  int rc = 0;
  switch (msg->kind) {
  case EM_MSG_BIRTH:
    rc = check_birth(&msg->u.birth);
    if (!rc) {
      w_birth(&w, &msg->u.birth);
    }
    break;
  case EM_MSG_DATA:
    rc = check_data(&msg->u.data);
    if (!rc) {
      w_data(&w, &msg->u.data);
    }
    break;
  case EM_MSG_STATE:
    rc = check_state(&msg->u.state);
    if (!rc) {
      w_state(&w, &msg->u.state);
    }
    break;
  case EM_MSG_STATUS:
    w_status(&w, &msg->u.status);
    break;
  case EM_MSG_CMD:
    rc = msg->u.cmd.command == EM_CMD_REBIRTH ? 0 : EM_PROTO_ERANGE;
    if (!rc) {
      w_cmd(&w, &msg->u.cmd);
    }
    break;
  default:
    rc = EM_PROTO_EINVAL;
    break;
  }
  if (rc) {
    return rc;
  }
  *out_len = w.pos;
  if (w.pos > EM_PROTO_MAX_MESSAGE_BYTES) {
    return EM_PROTO_ETOOBIG;
  }
  return w.pos <= cap ? 0 : EM_PROTO_ENOSPACE;
}

int em_proto_mark_historical(const uint8_t *live, size_t len, uint8_t *out, size_t cap,
                             size_t *out_len) {
  if (!live || !out_len || (!out && cap > 0)) {
    return EM_PROTO_EINVAL;
  }
  /* A map head of one byte (0xa0 + entries, below 24 with the new one), then version and kind
   * as one-byte unsigned integers: keys 0 and 1 and their small values (w_common). */
  if (len < 5 || live[0] < 0xa4 || live[0] > 0xb6 || live[1] != K_VERSION || live[2] > 0x17 ||
      live[3] != K_KIND || live[4] > 0x17) {
    return EM_PROTO_EMALFORMED;
  }
  uint8_t key;
  if (live[4] == EM_MSG_DATA) {
    key = KD_HISTORICAL;
  } else if (live[4] == EM_MSG_STATE) {
    key = KT_HISTORICAL;
  } else {
    return EM_PROTO_EKIND;
  }
  *out_len = len + 2;
  if (*out_len > EM_PROTO_MAX_MESSAGE_BYTES) {
    return EM_PROTO_ETOOBIG;
  }
  if (*out_len > cap) {
    return EM_PROTO_ENOSPACE;
  }
  memmove(out, live, len);
  out[0]++;
  out[len] = key;      /* Below 24: a one-byte unsigned integer. */
  out[len + 1] = 0xf5; /* CBOR true. */
  return 0;
}
