/*
 * json.c - renders a decoded message as one line of JSON with field names (the form the golden
 * vectors' .json files hold and `edgemon-cli decode --json` prints). Like the encoder it
 * writes into a caller buffer and reports the size needed when that is too small. Owns
 * nothing, never allocates, reentrant.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema.h"

typedef struct {
  char *buf;
  size_t cap;
  size_t pos; /* Length needed so far, even past cap. */
  bool first; /* No member written yet in the current object or array. */
} jw_t;

static void jw_raw(jw_t *w, const char *s, size_t n) {
  if (w->pos < w->cap) {
    size_t room = w->cap - w->pos;
    memcpy(w->buf + w->pos, s, n < room ? n : room);
  }
  w->pos += n;
}

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static void
jw_fmt(jw_t *w, const char *fmt, ...) {
  char tmp[64];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
  va_end(ap);
  if (n > 0) {
    jw_raw(w, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
  }
}

static void jw_str(jw_t *w, const char *s) {
  jw_raw(w, "\"", 1);
  for (const char *p = s; *p; p++) {
    unsigned char c = (unsigned char)*p;
    if (c == '"' || c == '\\') {
      char esc[2] = {'\\', (char)c};
      jw_raw(w, esc, 2);
    } else if (c < 0x20) {
      jw_fmt(w, "\\u%04x", c);
    } else {
      jw_raw(w, p, 1);
    }
  }
  jw_raw(w, "\"", 1);
}

/* Starts a member "name": of the current object. */
static void jw_key(jw_t *w, const char *name) {
  if (!w->first) {
    jw_raw(w, ",", 1);
  }
  w->first = false;
  jw_str(w, name);
  jw_raw(w, ":", 1);
}

static void jw_open(jw_t *w, char c) {
  jw_raw(w, &c, 1);
  w->first = true;
}

static void jw_close(jw_t *w, char c) {
  jw_raw(w, &c, 1);
  w->first = false;
}

/* Separator before an array element. */
static void jw_elem(jw_t *w) {
  if (!w->first) {
    jw_raw(w, ",", 1);
  }
  w->first = false;
}

static void jw_value(jw_t *w, const em_value_t *v) {
  switch (v->type) {
  case EM_VALUE_ABSENT:
    jw_raw(w, "null", 4);
    break;
  case EM_VALUE_UINT:
    jw_fmt(w, "%" PRIu64, v->as.u);
    break;
  case EM_VALUE_INT:
    jw_fmt(w, "%" PRId64, v->as.i);
    break;
  case EM_VALUE_FLOAT: {
    /* The shortest of %.15g..%.17g that reads back as the same double. */
    char tmp[40];
    int n = 0;
    for (int digits = 15; digits <= 17; digits++) {
      n = snprintf(tmp, sizeof(tmp), "%.*g", digits, v->as.f);
      if (strtod(tmp, NULL) == v->as.f) {
        break;
      }
    }
    jw_raw(w, tmp, (size_t)n);
    if (!strpbrk(tmp, ".e")) {
      jw_raw(w, ".0", 2); /* Keep it a float for JSON readers that tell the two apart. */
    }
    break;
  }
  }
}

static void kv_u64(jw_t *w, const char *name, uint64_t v) {
  jw_key(w, name);
  jw_fmt(w, "%" PRIu64, v);
}

static void kv_str(jw_t *w, const char *name, const char *s) {
  jw_key(w, name);
  jw_str(w, s);
}

static void kv_value(jw_t *w, const char *name, const em_value_t *v) {
  jw_key(w, name);
  jw_value(w, v);
}

/* Version, kind and the head's fields the kind carries. */
static void common(jw_t *w, em_msg_kind_t kind, const em_msg_head_t *head) {
  kv_u64(w, "v", EM_PROTO_VERSION);
  kv_str(w, "kind", em_msg_kind_name(kind));
  for (size_t i = 0; i < EM_HEAD_FIELDS; i++) {
    const em_head_field_t *f = &em__head_fields[i];
    if (em__head_carries(f, kind)) {
      kv_u64(w, f->json, em__head_get(head, f));
    }
  }
}

static const char *metric_kind_name(em_metric_kind_t k) {
  switch (k) {
  case EM_METRIC_GAUGE:
    return "gauge";
  case EM_METRIC_COUNTER:
    return "counter";
  case EM_METRIC_DELTA:
    return "delta";
  }
  return "unknown";
}

static void j_birth(jw_t *w, const em_birth_t *b) {
  common(w, EM_MSG_BIRTH, &b->head);
  kv_str(w, "device", b->device);
  kv_str(w, "agent_version", b->agent_version);
  kv_str(w, "board", b->board);
  kv_u64(w, "period_ns", b->period_ns);
  jw_key(w, "metrics");
  jw_open(w, '[');
  for (size_t i = 0; i < b->n_metrics; i++) {
    const em_metric_def_t *m = &b->metrics[i];
    jw_elem(w);
    jw_open(w, '{');
    kv_u64(w, "alias", m->alias);
    kv_str(w, "name", m->name);
    kv_str(w, "unit", m->unit);
    kv_str(w, "kind", metric_kind_name(m->kind));
    if (m->absent_reason) {
      kv_str(w, "absent_reason", m->absent_reason);
    }
    jw_close(w, '}');
  }
  jw_close(w, ']');
  jw_key(w, "budgets");
  jw_open(w, '[');
  for (size_t i = 0; i < b->n_budgets; i++) {
    const em_budget_t *u = &b->budgets[i];
    jw_elem(w);
    jw_open(w, '{');
    kv_str(w, "id", u->id);
    kv_str(w, "rule", u->rule);
    kv_str(w, "level", em_level_name(u->level));
    kv_value(w, "bound", &u->bound);
    if (u->stage) {
      kv_str(w, "stage", u->stage);
    }
    if (u->window_ns) {
      kv_u64(w, "window_ns", u->window_ns);
    }
    jw_close(w, '}');
  }
  jw_close(w, ']');
}

static void j_stage(jw_t *w, const em_stage_t *s) {
  jw_open(w, '{');
  kv_str(w, "name", s->name);
  kv_u64(w, "count", s->count);
  if (s->count > 0) {
    kv_u64(w, "sum_ns", s->sum_ns);
    kv_u64(w, "min_ns", s->min_ns);
    kv_u64(w, "max_ns", s->max_ns);
    kv_u64(w, "p50_ns", s->p50_ns);
    kv_u64(w, "p90_ns", s->p90_ns);
    kv_u64(w, "p99_ns", s->p99_ns);
    kv_u64(w, "p999_ns", s->p999_ns);
    jw_key(w, "scale");
    jw_fmt(w, "%" PRId32, s->scale);
    kv_u64(w, "zero_count", s->zero_count);
    jw_key(w, "buckets");
    jw_open(w, '[');
    for (size_t i = 0; i < s->n_buckets; i++) {
      jw_elem(w);
      jw_fmt(w, "[%" PRId32 ",%" PRIu64 "]", s->buckets[i].index, s->buckets[i].count);
    }
    jw_close(w, ']');
  }
  jw_close(w, '}');
}

static void j_data(jw_t *w, const em_data_t *d, em_proto_alias_name_fn name_of, void *ctx) {
  common(w, EM_MSG_DATA, &d->head);
  kv_u64(w, "seq", d->seq);
  kv_u64(w, "window_ns", d->window_ns);
  jw_key(w, "values");
  jw_open(w, '{');
  for (size_t i = 0; i < d->n_samples; i++) {
    char key[16];
    const char *name = name_of ? name_of(ctx, d->samples[i].alias) : NULL;
    if (!name) {
      snprintf(key, sizeof(key), "%" PRIu32, d->samples[i].alias);
      name = key;
    }
    kv_value(w, name, &d->samples[i].value);
  }
  jw_close(w, '}');
  jw_key(w, "stages");
  jw_open(w, '[');
  for (size_t i = 0; i < d->n_stages; i++) {
    jw_elem(w);
    j_stage(w, &d->stages[i]);
  }
  jw_close(w, ']');
  if (d->level != EM_LEVEL_NONE) {
    kv_str(w, "level", em_level_name(d->level));
  }
  if (d->historical) {
    jw_key(w, "historical");
    jw_raw(w, "true", 4);
  }
}

static void j_state(jw_t *w, const em_state_t *s) {
  common(w, EM_MSG_STATE, &s->head);
  kv_str(w, "level", em_level_name(s->level));
  kv_str(w, "prev_level", em_level_name(s->prev_level));
  kv_u64(w, "mono_ns", s->mono_ns);
  if (s->rule) {
    kv_str(w, "rule", s->rule);
  }
  if (s->stage) {
    kv_str(w, "stage", s->stage);
  }
  if (s->value.type != EM_VALUE_ABSENT) {
    kv_value(w, "value", &s->value);
  }
  if (s->bound.type != EM_VALUE_ABSENT) {
    kv_value(w, "bound", &s->bound);
  }
  if (s->reason) {
    kv_str(w, "reason", s->reason);
  }
  if (s->historical) {
    jw_key(w, "historical");
    jw_raw(w, "true", 4);
  }
}

int em_proto_to_json(const em_msg_t *msg, char *buf, size_t cap, size_t *out_len) {
  return em_proto_to_json_named(msg, NULL, NULL, buf, cap, out_len);
}

int em_proto_to_json_named(const em_msg_t *msg, em_proto_alias_name_fn name_of, void *ctx,
                           char *buf, size_t cap, size_t *out_len) {
  if (!msg || !out_len || (!buf && cap > 0)) {
    return EM_PROTO_EINVAL;
  }
  jw_t w = {.buf = buf, .cap = cap, .pos = 0, .first = true};
  jw_open(&w, '{');
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
    common(&w, EM_MSG_STATUS, &msg->u.status.head);
    jw_key(&w, "online");
    jw_raw(&w, msg->u.status.online ? "true" : "false", msg->u.status.online ? 4 : 5);
    break;
  case EM_MSG_CMD:
    common(&w, EM_MSG_CMD, &msg->u.cmd.head);
    kv_str(&w, "command", msg->u.cmd.command == EM_CMD_REBIRTH ? "rebirth" : "unknown");
    break;
  default:
    return EM_PROTO_EINVAL;
  }
  jw_close(&w, '}');
  *out_len = w.pos;
  if (cap > 0) {
    buf[w.pos < cap ? w.pos : cap - 1] = '\0';
  }
  return w.pos < cap ? 0 : EM_PROTO_ENOSPACE;
}
