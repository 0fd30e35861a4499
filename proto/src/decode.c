/*
 * decode.c - the strict v1 decoder.
 *
 * On top of the shared pull parser (cbor_read.h, over proto's own head reader cbor_head.h), one
 * function per message kind walks the schema by recursive descent. Checks, each with its own error
 * code: truncation, malformed CBOR, indefinite lengths, total size, nesting depth, item counts
 * (also against the bytes left, so a forged count cannot make a loop run long), key types,
 * duplicate and missing keys, value types and ranges, string classes, and consistency between
 * fields. Map keys the schema does not know are skipped (well-formedness, depth and size still
 * checked), so v1 can grow optional fields.
 *
 * Decoded arrays and strings are placed in a caller-supplied scratch area by a bump
 * allocator; nothing is allocated from the heap and nothing points into the input.
 * Reentrant; no global state.
 */
#include <stdlib.h>
#include <string.h>

#include "model.h"

/* --- scratch ------------------------------------------------------------------------- */

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

/* --- birth ---------------------------------------------------------------------------- */

static int read_metric(em__dec_t *d, void *elem) {
  em_metric_def_t *m = elem;
  size_t at = d->pos;
  uint64_t n = 0, seen = 0, key = 0, v = 0;
  int rc = em__open_container(d, T_MAP, 64, &n);
  memset(m, 0, sizeof(*m));
  for (uint64_t i = 0; i < n && !rc; i++) {
    rc = em__read_key(d, &seen, &key);
    if (rc) {
      break;
    }
    switch (key) {
    case KM_ALIAS:
      rc = em__read_uint(d, EM_PROTO_MAX_ALIAS, &v);
      m->alias = (uint32_t)v;
      break;
    case KM_NAME:
      rc = em__read_str(d, STR_NAME, EM_PROTO_MAX_NAME_BYTES, &m->name);
      break;
    case KM_UNIT:
      rc = em__read_str(d, STR_NAME, EM_PROTO_MAX_UNIT_BYTES, &m->unit);
      break;
    case KM_KIND:
      rc = em__read_uint(d, EM_METRIC_DELTA, &v);
      m->kind = (em_metric_kind_t)v;
      break;
    case KM_ABSENT:
      rc = em__read_str(d, STR_TEXT, EM_PROTO_MAX_TEXT_BYTES, &m->absent_reason);
      break;
    default:
      rc = em__skip(d);
      break;
    }
  }
  if (rc) {
    return rc;
  }
  em__leave(d);
  return em__require(d, at, seen, BIT(KM_ALIAS) | BIT(KM_NAME) | BIT(KM_UNIT) | BIT(KM_KIND));
}

static int read_budget(em__dec_t *d, void *elem) {
  em_budget_t *u = elem;
  size_t at = d->pos;
  uint64_t n = 0, seen = 0, key = 0, v = 0;
  int rc = em__open_container(d, T_MAP, 64, &n);
  memset(u, 0, sizeof(*u));
  for (uint64_t i = 0; i < n && !rc; i++) {
    rc = em__read_key(d, &seen, &key);
    if (rc) {
      break;
    }
    switch (key) {
    case KU_ID:
      rc = em__read_str(d, STR_NAME, EM_PROTO_MAX_NAME_BYTES, &u->id);
      break;
    case KU_RULE:
      rc = em__read_str(d, STR_IDENT, EM_PROTO_MAX_NAME_BYTES, &u->rule);
      break;
    case KU_LEVEL:
      rc = em__read_uint(d, EM_LEVEL_CRITICAL, &v);
      if (!rc && v < EM_LEVEL_WARN) {
        rc = EM_PROTO_ERANGE;
      }
      u->level = (em_level_t)v;
      break;
    case KU_BOUND:
      rc = em__read_value(d, false, &u->bound);
      break;
    case KU_STAGE:
      rc = em__read_str(d, STR_IDENT, EM_PROTO_MAX_STAGE_BYTES, &u->stage);
      break;
    case KU_WINDOW:
      rc = em__read_uint(d, UINT64_MAX, &u->window_ns);
      break;
    default:
      rc = em__skip(d);
      break;
    }
  }
  if (rc) {
    return rc;
  }
  em__leave(d);
  return em__require(d, at, seen, BIT(KU_ID) | BIT(KU_RULE) | BIT(KU_LEVEL) | BIT(KU_BOUND));
}

static int read_metrics(em__dec_t *d, em_birth_t *b) {
  size_t at = d->pos;
  void *list = NULL;
  int rc = em__read_array(d, EM_PROTO_MAX_METRICS, sizeof(em_metric_def_t), read_metric, &list,
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

static int read_budgets(em__dec_t *d, em_birth_t *b) {
  void *list = NULL;
  int rc = em__read_array(d, EM_PROTO_MAX_BUDGETS, sizeof(em_budget_t), read_budget, &list,
                          &b->n_budgets);
  b->budgets = list;
  return rc;
}

/* A settings map of the birth (flight recorder key 10, profiler key 12): every field
 * required; present means on. */
static int read_settings(em__dec_t *d, const em_settings_t *s, void *base) {
  size_t at = d->pos;
  uint64_t n = 0, seen = 0, key = 0, required = 0;
  int rc = em__open_container(d, T_MAP, 64, &n);
  for (uint64_t i = 0; i < n && !rc; i++) {
    rc = em__read_key(d, &seen, &key);
    const em_recorder_field_t *f = NULL;
    for (size_t j = 0; j < s->n_fields && !rc; j++) {
      f = s->fields[j].key == key ? &s->fields[j] : f;
    }
    uint64_t v = 0;
    if (!rc && f) {
      rc = em__read_uint(d, UINT64_MAX, &v);
      memcpy((unsigned char *)base + f->offset, &v, sizeof(v));
    } else if (!rc) {
      rc = em__skip(d);
    }
  }
  if (rc) {
    return rc;
  }
  em__leave(d);
  for (size_t j = 0; j < s->n_fields; j++) {
    required |= BIT(s->fields[j].key);
  }
  *((unsigned char *)base + s->on_offset) = 1;
  return em__require(d, at, seen, required);
}

static int read_birth_key(em__dec_t *d, uint64_t key, em_birth_t *b) {
  switch (key) {
  case KB_DEVICE:
    return em__read_str(d, STR_IDENT, EM_PROTO_MAX_NAME_BYTES, &b->device);
  case KB_AGENT:
    return em__read_str(d, STR_NAME, EM_PROTO_MAX_NAME_BYTES, &b->agent_version);
  case KB_BOARD:
    return em__read_str(d, STR_NAME, EM_PROTO_MAX_NAME_BYTES, &b->board);
  case KB_PERIOD:
    return em__read_uint(d, UINT64_MAX, &b->period_ns);
  case KB_METRICS:
    return read_metrics(d, b);
  case KB_BUDGETS:
    return read_budgets(d, b);
  case KB_FLIGHT:
    return read_settings(d, &em__recorder_settings, &b->flight);
  case KB_PROFILER:
    return read_settings(d, &em__profiler_settings, &b->profiler);
  case KB_MODEL:
    return em__read_model(d, &b->model);
  default:
    return em__skip(d);
  }
}

/* --- data ----------------------------------------------------------------------------- */

static int cmp_sample(const void *a, const void *b) {
  uint32_t x = ((const em_sample_t *)a)->alias, y = ((const em_sample_t *)b)->alias;
  return (x > y) - (x < y);
}

static int read_values(em__dec_t *d, em_data_t *out) {
  size_t at = d->pos;
  uint64_t n = 0, v = 0;
  int rc = em__open_container(d, T_MAP, EM_PROTO_MAX_METRICS, &n);
  if (rc) {
    return rc;
  }
  em_sample_t *s = em__scratch_alloc(d, (size_t)n * sizeof(*s));
  if (!s && n) {
    return EM_PROTO_ESCRATCH;
  }
  for (uint64_t i = 0; i < n && !rc; i++) {
    rc = em__read_uint(d, EM_PROTO_MAX_ALIAS, &v);
    if (rc == EM_PROTO_ETYPE) {
      rc = EM_PROTO_EKEY;
    }
    if (!rc) {
      s[i].alias = (uint32_t)v;
      rc = em__read_value(d, true, &s[i].value);
    }
  }
  if (rc) {
    return rc;
  }
  em__leave(d);
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
static int read_buckets(em__dec_t *d, em_stage_t *st) {
  uint64_t n = 0;
  int rc = em__open_container(d, T_ARRAY, 2 * EM_PROTO_MAX_BUCKETS, &n);
  if (rc) {
    return rc;
  }
  if (n % 2) {
    return EM_PROTO_EINCONSISTENT;
  }
  em_bucket_t *b = em__scratch_alloc(d, (size_t)(n / 2) * sizeof(*b));
  if (!b && n) {
    return EM_PROTO_ESCRATCH;
  }
  int64_t index = 0;
  for (uint64_t i = 0; i < n / 2; i++) {
    if (i == 0) {
      rc = em__read_int(d, INT32_MIN, INT32_MAX, &index);
    } else {
      uint64_t gap = 0;
      rc = em__read_uint(d, UINT32_MAX, &gap);
      if (!rc && (gap == 0 || index + (int64_t)gap > INT32_MAX)) {
        rc = gap == 0 ? EM_PROTO_EINCONSISTENT : EM_PROTO_ERANGE;
      }
      index += (int64_t)gap;
    }
    if (!rc) {
      b[i].index = (int32_t)index;
      rc = em__read_uint(d, UINT64_MAX, &b[i].count);
    }
    if (rc) {
      return rc;
    }
  }
  em__leave(d);
  st->buckets = b;
  st->n_buckets = (size_t)(n / 2);
  return 0;
}

static int read_stage(em__dec_t *d, void *elem) {
  em_stage_t *st = elem;
  size_t at = d->pos;
  uint64_t n = 0, seen = 0, key = 0;
  int64_t scale = 0;
  int rc = em__open_container(d, T_MAP, 64, &n);
  memset(st, 0, sizeof(*st));
  for (uint64_t i = 0; i < n && !rc; i++) {
    rc = em__read_key(d, &seen, &key);
    if (rc) {
      break;
    }
    uint64_t *field = NULL;
    switch (key) {
    case KS_NAME:
      rc = em__read_str(d, STR_IDENT, EM_PROTO_MAX_STAGE_BYTES, &st->name);
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
      rc = em__read_int(d, EM_PROTO_MIN_SCALE, EM_PROTO_MAX_SCALE, &scale);
      st->scale = (int32_t)scale;
      break;
    case KS_BUCKETS:
      rc = read_buckets(d, st);
      break;
    default:
      rc = em__skip(d);
      break;
    }
    if (field && !rc) {
      rc = em__read_uint(d, UINT64_MAX, field);
    }
  }
  if (rc) {
    return rc;
  }
  em__leave(d);
  rc = em__require(d, at, seen, BIT(KS_NAME) | BIT(KS_COUNT));
  if (rc) {
    return rc;
  }
  uint64_t summary = BIT(KS_SUM) | BIT(KS_MIN) | BIT(KS_MAX) | BIT(KS_P50) | BIT(KS_P90) |
                     BIT(KS_P99) | BIT(KS_P999) | BIT(KS_SCALE) | BIT(KS_BUCKETS);
  d->item_pos = at;
  if (st->count == 0) {
    return (seen & (summary | BIT(KS_ZERO))) ? EM_PROTO_EINCONSISTENT : 0;
  }
  rc = em__require(d, at, seen, summary);
  return rc ? rc : em__check_stage(st);
}

static int read_data_key(em__dec_t *d, uint64_t key, em_data_t *out) {
  uint64_t v = 0;
  void *stages = NULL;
  int rc;
  switch (key) {
  case KD_SEQ:
    rc = em__read_uint(d, UINT32_MAX, &v);
    out->seq = (uint32_t)v;
    return rc;
  case KD_WINDOW:
    return em__read_uint(d, UINT64_MAX, &out->window_ns);
  case KD_VALUES:
    return read_values(d, out);
  case KD_STAGES:
    rc = em__read_array(d, EM_PROTO_MAX_STAGES, sizeof(em_stage_t), read_stage, &stages,
                        &out->n_stages);
    out->stages = stages;
    return rc;
  case KD_LEVEL:
    rc = em__read_uint(d, EM_LEVEL_CRITICAL, &v);
    out->level = (em_level_t)v;
    return rc;
  case KD_HISTORICAL:
    return em__read_bool(d, &out->historical);
  case KD_MODEL:
    return em__read_model(d, &out->model);
  default:
    return em__skip(d);
  }
}

/* --- state, status, cmd --------------------------------------------------------------- */

static int read_state_key(em__dec_t *d, uint64_t key, em_state_t *out) {
  uint64_t v = 0;
  int rc;
  switch (key) {
  case KT_LEVEL:
  case KT_PREV:
    rc = em__read_uint(d, EM_LEVEL_CRITICAL, &v);
    *(key == KT_LEVEL ? &out->level : &out->prev_level) = (em_level_t)v;
    return rc;
  case KT_MONO:
    return em__read_uint(d, UINT64_MAX, &out->mono_ns);
  case KT_RULE:
  case KT_STAGE:
  case KT_VALUE:
  case KT_BOUND:
  case KT_REASON:
    return em__read_cause(d, (em_cause_key_t)(key - KT_RULE), EM_CAUSE_REF(out));
  case KT_HISTORICAL:
    return em__read_bool(d, &out->historical);
  case KT_MODEL:
    return em__read_model(d, &out->model);
  case KT_MODEL_CHANGE:
    return em__read_bool(d, &out->model_change);
  default:
    return em__skip(d);
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
  case EM_MSG_FLIGHT: /* em_flight_decode() and em_profile_decode() read them; never here. */
  case EM_MSG_PROFILE:
    break;
  }
  return 0;
}

/* The value of one kind-specific key. */
static int read_kind_key(em__dec_t *d, uint64_t key, em_msg_t *out) {
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
    return key == KX_ONLINE ? em__read_bool(d, &out->u.status.online) : em__skip(d);
  case EM_MSG_CMD:
    if (key == KC_SECONDS) {
      rc = em__read_uint(d, EM_PROTO_MAX_PROFILE_SECS, &v);
      out->u.cmd.seconds = (uint32_t)v;
      return !rc && v == 0 ? EM_PROTO_ERANGE : rc;
    }
    if (key != KC_COMMAND) {
      return em__skip(d);
    }
    rc = em__read_uint(d, UINT32_MAX, &v);
    if (!rc && v != EM_CMD_REBIRTH && v != EM_CMD_FLIGHT && v != EM_CMD_PROFILE) {
      rc = EM_PROTO_ERANGE;
    }
    out->u.cmd.command = (em_cmd_code_t)v;
    return rc;
  case EM_MSG_FLIGHT:
  case EM_MSG_PROFILE:
    break;
  }
  return em__skip(d);
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
  case EM_MSG_PROFILE:
    break;
  }
  return &m->u.cmd.head;
}

/*
 * The top-level map. Version and kind must come first (keys 0 and 1, in that order) so the
 * rest can be read by the kind's rules in one pass.
 */
static int read_message(em__dec_t *d, void *msg) {
  em_msg_t *out = msg;
  uint64_t n = 0, seen = 0, key = 0, v = 0;
  int rc = em__read_start(d, &n, &seen, &v);
  if (!rc && v > EM_MSG_CMD) {
    rc = EM_PROTO_EKIND; /* Flights and profiles too: em_flight/profile_decode() read them. */
  }
  if (rc) {
    return rc;
  }
  out->kind = (em_msg_kind_t)v;
  if (out->kind == EM_MSG_DATA) {
    out->u.data.level = EM_LEVEL_NONE;
  }
  for (uint64_t i = 2; i < n && !rc; i++) {
    rc = em__read_key(d, &seen, &key);
    if (rc) {
      break;
    }
    const em_head_field_t *f = em__head_field(out->kind, key);
    if (f) {
      rc = em__read_uint(d, f->max, &v);
      em__head_set(head_of(out), f, v);
    } else {
      rc = read_kind_key(d, key, out);
    }
  }
  if (rc) {
    return rc;
  }
  em__leave(d);
  rc = em__require(d, 0, seen, em__head_keys(out->kind) | required_keys(out->kind));
  if (!rc && out->kind == EM_MSG_STATE && out->u.state.model_change &&
      (out->u.state.level != out->u.state.prev_level || !out->u.state.model.name)) {
    d->item_pos = 0;
    rc = EM_PROTO_EINCONSISTENT; /* A change of model keeps the level and names the model. */
  }
  if (!rc && out->kind == EM_MSG_CMD && out->u.cmd.seconds &&
      out->u.cmd.command != EM_CMD_PROFILE) {
    d->item_pos = 0;
    rc = EM_PROTO_EINCONSISTENT; /* A window's length only goes with cmd/profile. */
  }
  return rc;
}

int em_proto_decode(const uint8_t *buf, size_t len, em_msg_t *out, void *scratch,
                    size_t scratch_len, size_t *error_offset) {
  return em__decode_whole(buf, len, EM_PROTO_MAX_MESSAGE_BYTES, read_message, out, sizeof(*out),
                          scratch, scratch_len, error_offset);
}
