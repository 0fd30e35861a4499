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

#include "fields.h"
#include "model.h"
#include "verdict.h"

/* --- scratch ------------------------------------------------------------------------- */

size_t em_proto_scratch_bytes(size_t len) {
  /*
   * Decoded bytes per encoded byte, at worst: an idle stage window {0: "x", 1: 0} is 6 bytes
   * and becomes an em_stage_t (104 bytes on LP64) plus its name (8 with alignment): 18.7.
   * A sample is 2 bytes -> 24 (12), a bucket 2 -> 16 (8), a metric definition 11 -> 56.
   * 20 per byte covers all; the constant covers the alignment of the first array. A verdict's
   * fixed arrays do not grow with its bytes: one em_proto_verdict_t more (a state carries one).
   */
  return em__scratch_for(len, EM_PROTO_MAX_MESSAGE_BYTES, 20u) + sizeof(em_proto_verdict_t);
}

/* --- birth ---------------------------------------------------------------------------- */

static const em__field_t metric_rows[] = {
    EM__UINT(KM_ALIAS, em_metric_def_t, alias, 0, EM_PROTO_MAX_ALIAS, REQ),
    EM__STR(KM_NAME, em_metric_def_t, name, STR_NAME, EM_PROTO_MAX_NAME_BYTES, REQ),
    EM__STR(KM_UNIT, em_metric_def_t, unit, STR_NAME, EM_PROTO_MAX_UNIT_BYTES, REQ),
    EM__UINT(KM_KIND, em_metric_def_t, kind, 0, EM_METRIC_DELTA, REQ),
    EM__STR(KM_ABSENT, em_metric_def_t, absent_reason, STR_TEXT, EM_PROTO_MAX_TEXT_BYTES, OPT)};
const em__fields_t em__metric_fields = EM__TABLE(metric_rows);

static const em__field_t budget_rows[] = {
    EM__STR(KU_ID, em_budget_t, id, STR_NAME, EM_PROTO_MAX_NAME_BYTES, REQ),
    EM__STR(KU_RULE, em_budget_t, rule, STR_IDENT, EM_PROTO_MAX_NAME_BYTES, REQ),
    EM__UINT(KU_LEVEL, em_budget_t, level, EM_LEVEL_WARN, EM_LEVEL_CRITICAL, REQ),
    EM__VALUE(KU_BOUND, em_budget_t, bound, REQ),
    EM__STR(KU_STAGE, em_budget_t, stage, STR_IDENT, EM_PROTO_MAX_STAGE_BYTES, OPT),
    EM__U64(KU_WINDOW, em_budget_t, window_ns, OPT)};
const em__fields_t em__budget_fields = EM__TABLE(budget_rows);

static int read_metric(em__dec_t *d, void *elem) {
  memset(elem, 0, sizeof(em_metric_def_t));
  return em__read_map(d, &em__metric_fields, elem, NULL);
}

static int read_budget(em__dec_t *d, void *elem) {
  memset(elem, 0, sizeof(em_budget_t));
  return em__read_map(d, &em__budget_fields, elem, NULL);
}

static int read_metrics(em__dec_t *d, const em__field_t *f, void *base) {
  em_birth_t *b = base;
  (void)f;
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

/* A settings map of the birth (flight recorder key 10, profiler key 12): every field
 * required; present means on. */
static int read_settings(em__dec_t *d, const em__field_t *row, void *birth) {
  const em_settings_t *s = row->arg;
  void *base = (unsigned char *)birth + row->offset;
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

static const em__field_t birth_rows[] = {
    EM__STR(KB_DEVICE, em_birth_t, device, STR_IDENT, EM_PROTO_MAX_NAME_BYTES, REQ),
    EM__STR(KB_AGENT, em_birth_t, agent_version, STR_NAME, EM_PROTO_MAX_NAME_BYTES, REQ),
    EM__STR(KB_BOARD, em_birth_t, board, STR_NAME, EM_PROTO_MAX_NAME_BYTES, REQ),
    EM__U64(KB_PERIOD, em_birth_t, period_ns, REQ),
    EM__FN(KB_METRICS, em_birth_t, metrics, read_metrics, NULL, REQ),
    EM__LIST(KB_BUDGETS, em_birth_t, budgets, n_budgets, em_budget_t, read_budget,
             EM_PROTO_MAX_BUDGETS, REQ),
    EM__FN(KB_FLIGHT, em_birth_t, flight, read_settings, &em__recorder_settings, OPT),
    EM__FN(KB_PROFILER, em_birth_t, profiler, read_settings, &em__profiler_settings, OPT),
    EM__FN(KB_MODEL, em_birth_t, model, em__field_model, NULL, OPT)};

/* --- data ----------------------------------------------------------------------------- */

static int cmp_sample(const void *a, const void *b) {
  uint32_t x = ((const em_sample_t *)a)->alias, y = ((const em_sample_t *)b)->alias;
  return (x > y) - (x < y);
}

static int read_values(em__dec_t *d, const em__field_t *f, void *base) {
  em_data_t *out = base;
  (void)f;
  size_t at = d->pos;
  uint64_t n = 0, v = 0;
  void *mem = NULL;
  int rc = em__open_list(d, T_MAP, EM_PROTO_MAX_METRICS, 1, sizeof(em_sample_t), &n, &mem);
  em_sample_t *s = mem;
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
  if (!rc) {
    rc = em__sort_unique(d, at, s, (size_t)n, sizeof(*s), cmp_sample);
  }
  return em__close_list(d, rc, s, n, &out->samples, &out->n_samples);
}

/* Buckets: [first index, count, (gap >= 1, count)...], decoded to absolute indices. */
static int read_buckets(em__dec_t *d, const em__field_t *f, void *base) {
  em_stage_t *st = base;
  (void)f;
  uint64_t n = 0;
  void *mem = NULL;
  int rc = em__open_list(d, T_ARRAY, 2 * EM_PROTO_MAX_BUCKETS, 2, sizeof(em_bucket_t), &n, &mem);
  em_bucket_t *b = mem;
  int64_t index = 0;
  for (uint64_t i = 0; i < n && !rc; i++) {
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
  }
  return em__close_list(d, rc, b, n, &st->buckets, &st->n_buckets);
}

static const em__field_t stage_rows[] = {
    EM__STR(KS_NAME, em_stage_t, name, STR_IDENT, EM_PROTO_MAX_STAGE_BYTES, REQ),
    EM__U64(KS_COUNT, em_stage_t, count, REQ),
    EM__U64(KS_SUM, em_stage_t, sum_ns, OPT),
    EM__U64(KS_MIN, em_stage_t, min_ns, OPT),
    EM__U64(KS_MAX, em_stage_t, max_ns, OPT),
    EM__U64(KS_P50, em_stage_t, p50_ns, OPT),
    EM__U64(KS_P90, em_stage_t, p90_ns, OPT),
    EM__U64(KS_P99, em_stage_t, p99_ns, OPT),
    EM__U64(KS_P999, em_stage_t, p999_ns, OPT),
    EM__U64(KS_ZERO, em_stage_t, zero_count, OPT),
    EM__INT(KS_SCALE, em_stage_t, scale, EM_PROTO_MIN_SCALE, EM_PROTO_MAX_SCALE, OPT),
    EM__FN(KS_BUCKETS, em_stage_t, buckets, read_buckets, NULL, OPT)};
static const em__fields_t stage_fields = EM__TABLE(stage_rows);

/* A stage window: name and count always; the summary all together, and only with a count. */
static int read_stage(em__dec_t *d, void *elem) {
  em_stage_t *st = elem;
  size_t at = d->pos;
  uint64_t seen = 0;
  memset(st, 0, sizeof(*st));
  int rc = em__read_map(d, &stage_fields, st, &seen);

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

static const em__field_t data_rows[] = {
    EM__UINT(KD_SEQ, em_data_t, seq, 0, UINT32_MAX, REQ),
    EM__U64(KD_WINDOW, em_data_t, window_ns, REQ),
    EM__FN(KD_VALUES, em_data_t, samples, read_values, NULL, REQ),
    EM__LIST(KD_STAGES, em_data_t, stages, n_stages, em_stage_t, read_stage, EM_PROTO_MAX_STAGES,
             REQ),
    EM__UINT(KD_LEVEL, em_data_t, level, 0, EM_LEVEL_CRITICAL, OPT),
    EM__BOOL(KD_HISTORICAL, em_data_t, historical, OPT),
    EM__FN(KD_MODEL, em_data_t, model, em__field_model, NULL, OPT)};

/* --- state, status, cmd --------------------------------------------------------------- */

static const em__field_t state_rows[] = {
    EM__UINT(KT_LEVEL, em_state_t, level, 0, EM_LEVEL_CRITICAL, REQ),
    EM__UINT(KT_PREV, em_state_t, prev_level, 0, EM_LEVEL_CRITICAL, REQ),
    EM__U64(KT_MONO, em_state_t, mono_ns, REQ),
    EM__CAUSE_ROWS(KT_RULE, em_state_t),
    EM__BOOL(KT_HISTORICAL, em_state_t, historical, OPT),
    EM__FN(KT_MODEL, em_state_t, model, em__field_model, NULL, OPT),
    EM__BOOL(KT_MODEL_CHANGE, em_state_t, model_change, OPT),
    EM__FN(KT_VERDICT, em_state_t, verdict, em__field_verdict, NULL, OPT)};

static const em__field_t status_rows[] = {EM__BOOL(KX_ONLINE, em_status_t, online, REQ)};

/* A command's code: one of the three the schema names. */
static int read_command(em__dec_t *d, const em__field_t *f, void *base) {
  em_cmd_t *cmd = base;
  uint64_t v = 0;
  (void)f;
  int rc = em__read_uint(d, UINT32_MAX, &v);
  if (!rc && v != EM_CMD_REBIRTH && v != EM_CMD_FLIGHT && v != EM_CMD_PROFILE) {
    rc = EM_PROTO_ERANGE;
  }
  cmd->command = (em_cmd_code_t)v;
  return rc;
}

static const em__field_t cmd_rows[] = {
    EM__FN(KC_COMMAND, em_cmd_t, command, read_command, NULL, REQ),
    EM__UINT(KC_SECONDS, em_cmd_t, seconds, 1, EM_PROTO_MAX_PROFILE_SECS, OPT)};

/* --- top level ------------------------------------------------------------------------ */

/* The rows of each kind's own keys, read into its member of the message's union. */
const em__fields_t em__birth_fields = EM__TABLE(birth_rows);

static const em__fields_t kind_fields[] = {
    [EM_MSG_BIRTH] = EM__TABLE(birth_rows), [EM_MSG_DATA] = EM__TABLE(data_rows),
    [EM_MSG_STATE] = EM__TABLE(state_rows), [EM_MSG_STATUS] = EM__TABLE(status_rows),
    [EM_MSG_CMD] = EM__TABLE(cmd_rows),
};

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
  uint64_t n = 0, seen = 0, v = 0;
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
  rc = em__read_rest(d, n, seen, out->kind, head_of(out), &kind_fields[out->kind], &out->u);
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
