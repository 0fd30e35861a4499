/*
 * json.c - renders a decoded message as one line of JSON with field names (the form the golden
 * vectors' .json files hold and `edgemon-cli decode --json` prints). Like the encoder it
 * writes into a caller buffer and reports the size needed when that is too small. Owns
 * nothing, never allocates, reentrant.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "json_items.h"
#include "model.h"
#include "verdict.h"

/* A settings map of the birth (flight recorder, profiler) as an object, when it is on. */
static void j_settings(em__jw_t *w, const char *name, const em_settings_t *s, const void *base) {
  const unsigned char *p = base;
  if (!p[s->on_offset]) {
    return;
  }
  em__jw_key(w, name);
  em__jw_open(w, '{');
  for (size_t i = 0; i < s->n_fields; i++) {
    uint64_t v;
    memcpy(&v, p + s->fields[i].offset, sizeof(v));
    em__jkv_u64(w, s->fields[i].json, v);
  }
  em__jw_close(w, '}');
}

static void j_metric(em__jw_t *w, const void *birth, size_t i) {
  const em_metric_def_t *m = &((const em_birth_t *)birth)->metrics[i];
  em__jkv_u64(w, "alias", m->alias);
  em__jkv_str(w, "name", m->name);
  em__jkv_str(w, "unit", m->unit);
  em__jkv_str(w, "kind", em__metric_kind_name(m->kind));
  if (m->absent_reason) {
    em__jkv_str(w, "absent_reason", m->absent_reason);
  }
}

static void j_budget(em__jw_t *w, const void *birth, size_t i) {
  const em_budget_t *u = &((const em_birth_t *)birth)->budgets[i];
  em__jkv_str(w, "id", u->id);
  em__jkv_str(w, "rule", u->rule);
  em__jkv_str(w, "level", em_level_name(u->level));
  em__jkv_value(w, "bound", &u->bound);
  if (u->stage) {
    em__jkv_str(w, "stage", u->stage);
  }
  if (u->window_ns) {
    em__jkv_u64(w, "window_ns", u->window_ns);
  }
}

static void j_birth(em__jw_t *w, const em_birth_t *b) {
  em__jw_common(w, EM_MSG_BIRTH, &b->head);
  em__jkv_str(w, "device", b->device);
  em__jkv_str(w, "agent_version", b->agent_version);
  em__jkv_str(w, "board", b->board);
  em__jkv_u64(w, "period_ns", b->period_ns);
  em__jw_objects(w, "metrics", b, b->n_metrics, j_metric);
  em__jw_objects(w, "budgets", b, b->n_budgets, j_budget);
  j_settings(w, "flight_recorder", &em__recorder_settings, &b->flight);
  em__jw_model(w, &b->model);
  j_settings(w, "profiler", &em__profiler_settings, &b->profiler);
}

static void j_stage(em__jw_t *w, const void *data, size_t i) {
  const em_stage_t *s = &((const em_data_t *)data)->stages[i];
  em__jkv_str(w, "name", s->name);
  em__jkv_u64(w, "count", s->count);
  if (s->count > 0) {
    em__jkv_u64(w, "sum_ns", s->sum_ns);
    em__jkv_u64(w, "min_ns", s->min_ns);
    em__jkv_u64(w, "max_ns", s->max_ns);
    em__jkv_u64(w, "p50_ns", s->p50_ns);
    em__jkv_u64(w, "p90_ns", s->p90_ns);
    em__jkv_u64(w, "p99_ns", s->p99_ns);
    em__jkv_u64(w, "p999_ns", s->p999_ns);
    em__jw_key(w, "scale");
    em__jw_fmt(w, "%" PRId32, s->scale);
    em__jkv_u64(w, "zero_count", s->zero_count);
    em__jw_key(w, "buckets");
    em__jw_open(w, '[');
    for (size_t b = 0; b < s->n_buckets; b++) {
      em__jw_elem(w);
      em__jw_fmt(w, "[%" PRId32 ",%" PRIu64 "]", s->buckets[b].index, s->buckets[b].count);
    }
    em__jw_close(w, ']');
  }
}

static void j_data(em__jw_t *w, const em_data_t *d, em_proto_alias_name_fn name_of, void *ctx) {
  em__jw_common(w, EM_MSG_DATA, &d->head);
  em__jkv_u64(w, "seq", d->seq);
  em__jkv_u64(w, "window_ns", d->window_ns);
  em__jw_key(w, "values");
  em__jw_open(w, '{');
  for (size_t i = 0; i < d->n_samples; i++) {
    char key[16];
    const char *name = name_of ? name_of(ctx, d->samples[i].alias) : NULL;
    if (!name) {
      snprintf(key, sizeof(key), "%" PRIu32, d->samples[i].alias);
      name = key;
    }
    em__jkv_value(w, name, &d->samples[i].value);
  }
  em__jw_close(w, '}');
  em__jw_objects(w, "stages", d, d->n_stages, j_stage);
  if (d->level != EM_LEVEL_NONE) {
    em__jkv_str(w, "level", em_level_name(d->level));
  }
  em__jw_model(w, &d->model);
  em__jkv_true(w, "historical", d->historical);
}

static void j_state(em__jw_t *w, const em_state_t *s) {
  em__jw_common(w, EM_MSG_STATE, &s->head);
  em__jkv_str(w, "level", em_level_name(s->level));
  em__jkv_str(w, "prev_level", em_level_name(s->prev_level));
  em__jkv_u64(w, "mono_ns", s->mono_ns);
  em__jw_cause(w, EM_CAUSE_OF(s));
  em__jw_model(w, &s->model);
  em__jkv_true(w, "model_change", s->model_change);
  em__jw_verdict(w, s->verdict);
  em__jkv_true(w, "historical", s->historical);
}

int em_proto_to_json(const em_msg_t *msg, char *buf, size_t cap, size_t *out_len) {
  return em_proto_to_json_named(msg, NULL, NULL, buf, cap, out_len);
}

int em_proto_to_json_named(const em_msg_t *msg, em_proto_alias_name_fn name_of, void *ctx,
                           char *buf, size_t cap, size_t *out_len) {
  if (!msg || !out_len || (!buf && cap > 0)) {
    return EM_PROTO_EINVAL;
  }
  em__jw_t w = {.buf = buf, .cap = cap, .pos = 0, .first = true};
  em__jw_open(&w, '{');
  switch (msg->kind) {
  case EM_MSG_BIRTH:
    j_birth(&w, &msg->u.birth);
    break;
  case EM_MSG_DATA:
    j_data(&w, &msg->u.data, name_of, ctx);
    break;
  case EM_MSG_STATE:
    j_state(&w, &msg->u.state);
    break;
  case EM_MSG_STATUS:
    em__jw_common(&w, EM_MSG_STATUS, &msg->u.status.head);
    em__jw_key(&w, "online");
    em__jw_raw(&w, msg->u.status.online ? "true" : "false", msg->u.status.online ? 4 : 5);
    break;
  case EM_MSG_CMD:
    em__jw_common(&w, EM_MSG_CMD, &msg->u.cmd.head);
    em__jkv_str(&w, "command", em_cmd_name(msg->u.cmd.command));
    if (msg->u.cmd.seconds) {
      em__jkv_u64(&w, "seconds", msg->u.cmd.seconds);
    }
    break;
  default:
    return EM_PROTO_EINVAL;
  }
  em__jw_close(&w, '}');
  return em__jw_finish(&w, out_len);
}
