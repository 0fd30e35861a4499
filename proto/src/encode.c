/*
 * encode.c - writes v1 messages as CBOR into a caller-supplied buffer.
 *
 * Items go straight into the caller's buffer through the shared writer (cbor_write.h). When the
 * buffer runs out the writer keeps counting, so one call reports the exact size needed. Every
 * message is checked with the decoder's rules first (schema.h): what this file writes always
 * decodes. Owns nothing, never allocates, reentrant.
 */
#include <string.h>

#include "fields.h"
#include "model.h"
#include "verdict.h"

static int check_level(em_level_t level) {
  return em__level_ok((int)level) ? 0 : EM_PROTO_ERANGE;
}

/* --- birth ---------------------------------------------------------------------------- */

static int check_birth(const void *msg) {
  const em_birth_t *b = msg;
  int rc = em__check_strs(&em__birth_fields, b);
  if (!rc) {
    rc = em_proto_model_check(&b->model);
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
    rc = em__check_strs(&em__metric_fields, m);
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
      rc = em__check_strs(&em__budget_fields, u);
    }
    if (rc) {
      return rc;
    }
  }
  return 0;
}

/* A settings map of the birth (flight recorder, profiler) under `key`, when it is on. */
static void w_settings(em__writer_t *w, unsigned key, const em_settings_t *s, const void *base) {
  const unsigned char *p = base;
  if (!p[s->on_offset]) {
    return;
  }
  em__w_uint(w, key);
  em__w_map(w, s->n_fields);
  for (size_t i = 0; i < s->n_fields; i++) {
    uint64_t v;
    memcpy(&v, p + s->fields[i].offset, sizeof(v));
    em__kv_uint(w, s->fields[i].key, v);
  }
}

static void w_birth(em__writer_t *w, const void *msg) {
  const em_birth_t *b = msg;
  em__w_common(w,
               6 + (b->flight.on ? 1 : 0) + em__model_entries(&b->model) + (b->profiler.on ? 1 : 0),
               EM_MSG_BIRTH, &b->head);
  em__kv_str(w, KB_DEVICE, b->device);
  em__kv_str(w, KB_AGENT, b->agent_version);
  em__kv_str(w, KB_BOARD, b->board);
  em__kv_uint(w, KB_PERIOD, b->period_ns);
  em__w_uint(w, KB_METRICS);
  em__w_array(w, b->n_metrics);
  for (size_t i = 0; i < b->n_metrics; i++) {
    const em_metric_def_t *m = &b->metrics[i];
    em__w_map(w, m->absent_reason ? 5 : 4);
    em__kv_uint(w, KM_ALIAS, m->alias);
    em__kv_str(w, KM_NAME, m->name);
    em__kv_str(w, KM_UNIT, m->unit);
    em__kv_uint(w, KM_KIND, (uint64_t)m->kind);
    if (m->absent_reason) {
      em__kv_str(w, KM_ABSENT, m->absent_reason);
    }
  }
  em__w_uint(w, KB_BUDGETS);
  em__w_array(w, b->n_budgets);
  for (size_t i = 0; i < b->n_budgets; i++) {
    const em_budget_t *u = &b->budgets[i];
    em__w_map(w, 4 + (u->stage ? 1 : 0) + (u->window_ns ? 1 : 0));
    em__kv_str(w, KU_ID, u->id);
    em__kv_str(w, KU_RULE, u->rule);
    em__kv_uint(w, KU_LEVEL, (uint64_t)u->level);
    em__w_uint(w, KU_BOUND);
    em__w_value(w, &u->bound);
    if (u->stage) {
      em__kv_str(w, KU_STAGE, u->stage);
    }
    if (u->window_ns) {
      em__kv_uint(w, KU_WINDOW, u->window_ns);
    }
  }
  w_settings(w, KB_FLIGHT, &em__recorder_settings, &b->flight);
  em__w_model(w, KB_MODEL, &b->model);
  w_settings(w, KB_PROFILER, &em__profiler_settings, &b->profiler);
}

/* --- data ----------------------------------------------------------------------------- */

static int check_data(const void *msg) {
  const em_data_t *d = msg;
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
  return em_proto_model_check(&d->model);
}

/* Buckets as [first index, count, (gap to previous index, count)...]. */
static void w_buckets(em__writer_t *w, const em_stage_t *s) {
  em__w_array(w, 2 * s->n_buckets);
  for (size_t i = 0; i < s->n_buckets; i++) {
    if (i == 0) {
      em__w_int(w, s->buckets[0].index);
    } else {
      em__w_uint(w, (uint64_t)((int64_t)s->buckets[i].index - s->buckets[i - 1].index));
    }
    em__w_uint(w, s->buckets[i].count);
  }
}

static void w_stage(em__writer_t *w, const em_stage_t *s) {
  if (s->count == 0) {
    em__w_map(w, 2);
    em__kv_str(w, KS_NAME, s->name);
    em__kv_uint(w, KS_COUNT, 0);
    return;
  }
  em__w_map(w, s->zero_count ? 12 : 11);
  em__kv_str(w, KS_NAME, s->name);
  em__kv_uint(w, KS_COUNT, s->count);
  em__kv_uint(w, KS_SUM, s->sum_ns);
  em__kv_uint(w, KS_MIN, s->min_ns);
  em__kv_uint(w, KS_MAX, s->max_ns);
  em__kv_uint(w, KS_P50, s->p50_ns);
  em__kv_uint(w, KS_P90, s->p90_ns);
  em__kv_uint(w, KS_P99, s->p99_ns);
  em__kv_uint(w, KS_P999, s->p999_ns);
  em__w_uint(w, KS_SCALE);
  em__w_int(w, s->scale);
  if (s->zero_count) {
    em__kv_uint(w, KS_ZERO, s->zero_count);
  }
  em__w_uint(w, KS_BUCKETS);
  w_buckets(w, s);
}

static void w_data(em__writer_t *w, const void *msg) {
  const em_data_t *d = msg;
  size_t n_more = 4 + (d->level != EM_LEVEL_NONE ? 1 : 0) + em__model_entries(&d->model) +
                  (d->historical ? 1 : 0);
  em__w_common(w, n_more, EM_MSG_DATA, &d->head);
  em__kv_uint(w, KD_SEQ, d->seq);
  em__kv_uint(w, KD_WINDOW, d->window_ns);
  em__w_uint(w, KD_VALUES);
  em__w_map(w, d->n_samples);
  for (size_t i = 0; i < d->n_samples; i++) {
    em__w_uint(w, d->samples[i].alias);
    em__w_value(w, &d->samples[i].value);
  }
  em__w_uint(w, KD_STAGES);
  em__w_array(w, d->n_stages);
  for (size_t i = 0; i < d->n_stages; i++) {
    w_stage(w, &d->stages[i]);
  }
  if (d->level != EM_LEVEL_NONE) {
    em__kv_uint(w, KD_LEVEL, (uint64_t)d->level);
  }
  /* Before the historical key: em_proto_mark_historical() appends that one last. */
  em__w_model(w, KD_MODEL, &d->model);
  if (d->historical) {
    em__w_uint(w, KD_HISTORICAL);
    em__w_bool(w, true);
  }
}

/* --- state, status, cmd --------------------------------------------------------------- */

static int check_state(const void *msg) {
  const em_state_t *s = msg;
  if (check_level(s->level) || check_level(s->prev_level)) {
    return EM_PROTO_ERANGE;
  }
  int rc = em__check_cause(EM_CAUSE_OF(s));
  if (!rc) {
    rc = em_proto_model_check(&s->model);
  }
  if (!rc && s->model_change && (s->level != s->prev_level || !s->model.name)) {
    rc = EM_PROTO_EINCONSISTENT; /* A change of model keeps the level and names the model. */
  }
  if (!rc && s->verdict) {
    rc = em_proto_verdict_check(s->verdict);
  }
  return rc;
}

static void w_state(em__writer_t *w, const void *msg) {
  const em_state_t *s = msg;
  size_t n_more = 3 + em__cause_count(EM_CAUSE_OF(s)) + em__model_entries(&s->model) +
                  (s->model_change ? 1 : 0) + em__verdict_entries(s->verdict) +
                  (s->historical ? 1 : 0);
  em__w_common(w, n_more, EM_MSG_STATE, &s->head);
  em__kv_uint(w, KT_LEVEL, (uint64_t)s->level);
  em__kv_uint(w, KT_PREV, (uint64_t)s->prev_level);
  em__kv_uint(w, KT_MONO, s->mono_ns);
  em__w_cause(w, KT_RULE, EM_CAUSE_OF(s));
  em__w_model(w, KT_MODEL, &s->model);
  if (s->model_change) {
    em__w_uint(w, KT_MODEL_CHANGE);
    em__w_bool(w, true);
  }
  em__w_verdict(w, KT_VERDICT, s->verdict);
  if (s->historical) {
    em__w_uint(w, KT_HISTORICAL);
    em__w_bool(w, true);
  }
}

static void w_status(em__writer_t *w, const void *msg) {
  const em_status_t *s = msg;
  em__w_common(w, 1, EM_MSG_STATUS, &s->head);
  em__w_uint(w, KX_ONLINE);
  em__w_bool(w, s->online);
}

static void w_cmd(em__writer_t *w, const void *msg) {
  const em_cmd_t *c = msg;
  em__w_common(w, c->seconds ? 2 : 1, EM_MSG_CMD, &c->head);
  em__kv_uint(w, KC_COMMAND, (uint64_t)c->command);
  if (c->seconds) {
    em__kv_uint(w, KC_SECONDS, c->seconds);
  }
}

/* The decoder's refusals: an unknown command, seconds past the limit or on another command. */
static int check_cmd(const void *msg) {
  const em_cmd_t *c = msg;
  if (c->command != EM_CMD_REBIRTH && c->command != EM_CMD_FLIGHT && c->command != EM_CMD_PROFILE) {
    return EM_PROTO_ERANGE;
  }
  if (c->seconds > EM_PROTO_MAX_PROFILE_SECS) {
    return EM_PROTO_ERANGE;
  }
  return c->seconds && c->command != EM_CMD_PROFILE ? EM_PROTO_EINCONSISTENT : 0;
}

/* --- entry point ---------------------------------------------------------------------- */

/* Each kind's checks (status has none) and writer, over its member of the message's union;
 * flights and profiles have their own encoders (flight.h, profile.h). */
static const struct {
  int (*check)(const void *msg);
  void (*write)(em__writer_t *w, const void *msg);
} kinds[] = {
    [EM_MSG_BIRTH] = {check_birth, w_birth}, [EM_MSG_DATA] = {check_data, w_data},
    [EM_MSG_STATE] = {check_state, w_state}, [EM_MSG_STATUS] = {NULL, w_status},
    [EM_MSG_CMD] = {check_cmd, w_cmd},
};

int em_proto_encode(const em_msg_t *msg, uint8_t *buf, size_t cap, size_t *out_len) {
  if (!msg || !out_len || (!buf && cap > 0)) {
    return EM_PROTO_EINVAL;
  }
  if ((unsigned)msg->kind >= sizeof(kinds) / sizeof(kinds[0]) || !kinds[msg->kind].write) {
    return EM_PROTO_EINVAL;
  }
  int rc = kinds[msg->kind].check ? kinds[msg->kind].check(&msg->u) : 0;
  if (rc) {
    return rc;
  }
  em__writer_t w = {.buf = buf, .cap = cap, .pos = 0};
  kinds[msg->kind].write(&w, &msg->u);
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
  return em__append_historical(live, len, key, EM_PROTO_MAX_MESSAGE_BYTES, out, cap, out_len);
}
