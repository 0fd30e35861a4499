/*
 * names.c - the names of codes and enums, the description of the message head, and the value
 * checks shared by the encoder and the decoder (schema.h). Owns nothing; pure functions over
 * constant tables.
 */
#define _POSIX_C_SOURCE 200809L /* strnlen */

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "edgemon/profile.h"
#include "schema.h"

const char *em_proto_strerror(int rc) {
  switch (rc) {
  case 0:
    return "success";
#define EM_PROTO_X_CASE(name, value, text)                                                         \
  case name:                                                                                       \
    return text;
    EM_PROTO_ERRORS(EM_PROTO_X_CASE)
#undef EM_PROTO_X_CASE
  default:
    break;
  }
  if (rc < 0 && rc > -4096) {
    return strerror(-rc);
  }
  return "unknown error";
}

const char *em_level_name(em_level_t level) {
  static const char *const names[] = {"NOMINAL", "WARN", "DEGRADED", "CRITICAL"};
  if (!em__level_ok((int)level)) {
    return "NONE";
  }
  return names[level];
}

const char *em__name_in(const char *const *names, size_t n, long i) {
  return i >= 0 && (size_t)i < n && names[i] ? names[i] : "unknown";
}

const char *em_msg_kind_name(em_msg_kind_t kind) {
  static const char *const names[] = {"birth", "data",   "state",  "status",
                                      "cmd",   "flight", "profile"};
  return em__name_in(names, sizeof(names) / sizeof(names[0]), (long)kind);
}

_Static_assert(EM_PROTO_MAX_PAYLOAD_BYTES == (EM_FLIGHT_MAX_BYTES > EM_PROFILE_MAX_BYTES
                                                  ? EM_FLIGHT_MAX_BYTES
                                                  : EM_PROFILE_MAX_BYTES) &&
                   EM_PROTO_MAX_PAYLOAD_BYTES >= EM_PROTO_MAX_MESSAGE_BYTES,
               "EM_PROTO_MAX_PAYLOAD_BYTES is the largest kind's cap");

const char *em_cmd_name(em_cmd_code_t command) {
  static const char *const names[] = {"rebirth", "flight", "profile"};
  return em__name_in(names, sizeof(names) / sizeof(names[0]), (long)command - EM_CMD_REBIRTH);
}

int em_proto_topic(size_t i, em_topic_t *out) {
  if (!out || i >= EM_PROTO_TOPICS) {
    return EM_PROTO_EINVAL;
  }
  memset(out, 0, sizeof(*out));
  size_t published = (size_t)EM_MSG_PROFILE; /* Every kind but cmd. */
  if (i < published) {
    out->kind = (em_msg_kind_t)(i < (size_t)EM_MSG_CMD ? i : i + 1);
    snprintf(out->suffix, sizeof(out->suffix), "%s", em_msg_kind_name(out->kind));
    return 0;
  }
  out->kind = EM_MSG_CMD;
  out->command = (em_cmd_code_t)(EM_CMD_REBIRTH + (int)(i - published));
  out->from_host = true;
  snprintf(out->suffix, sizeof(out->suffix), "cmd/%s", em_cmd_name(out->command));
  return 0;
}

/* Time in every kind; session in all but cmd (a host's command belongs to no agent session). */
#define ALL_KINDS ((1u << (EM_MSG_PROFILE + 1)) - 1u)
const em_head_field_t em__head_fields[EM_HEAD_FIELDS] = {
    {K_TIME, "time_ns", UINT64_MAX, offsetof(em_msg_head_t, time_ns), sizeof(uint64_t), ALL_KINDS},
    {K_SESSION, "session", UINT32_MAX, offsetof(em_msg_head_t, session), sizeof(uint32_t),
     ALL_KINDS & ~(1u << EM_MSG_CMD)},
};

bool em__head_carries(const em_head_field_t *f, em_msg_kind_t kind) {
  return (int)kind >= 0 && (int)kind <= (int)EM_MSG_PROFILE && (f->kinds & (1u << kind)) != 0;
}

uint64_t em__head_keys(em_msg_kind_t kind) {
  uint64_t keys = 0;
  for (size_t i = 0; i < EM_HEAD_FIELDS; i++) {
    if (em__head_carries(&em__head_fields[i], kind)) {
      keys |= UINT64_C(1) << em__head_fields[i].key;
    }
  }
  return keys;
}

const em_head_field_t *em__head_field(em_msg_kind_t kind, uint64_t key) {
  for (size_t i = 0; i < EM_HEAD_FIELDS; i++) {
    if (em__head_fields[i].key == key && em__head_carries(&em__head_fields[i], kind)) {
      return &em__head_fields[i];
    }
  }
  return NULL;
}

const em_recorder_field_t em__recorder_fields[EM_RECORDER_FIELDS] = {
    {KR_PRE, "pre_ns", offsetof(em_flight_recorder_t, pre_ns)},
    {KR_POST, "post_ns", offsetof(em_flight_recorder_t, post_ns)},
    {KR_TICKS, "ticks", offsetof(em_flight_recorder_t, ticks)},
    {KR_SPANS, "spans", offsetof(em_flight_recorder_t, spans)},
    {KR_BYTES, "bytes", offsetof(em_flight_recorder_t, bytes)},
};

const em_recorder_field_t em__profiler_fields[EM_PROFILER_FIELDS] = {
    {KQ_HZ, "hz", offsetof(em_profiler_t, hz)},
    {KQ_SECONDS, "seconds", offsetof(em_profiler_t, seconds)},
    {KQ_MAX_SECONDS, "max_seconds", offsetof(em_profiler_t, max_seconds)},
    {KQ_MIN_GAP, "min_gap_seconds", offsetof(em_profiler_t, min_gap_seconds)},
};

const em_settings_t em__recorder_settings = {em__recorder_fields, EM_RECORDER_FIELDS,
                                             offsetof(em_flight_recorder_t, on)};
const em_settings_t em__profiler_settings = {em__profiler_fields, EM_PROFILER_FIELDS,
                                             offsetof(em_profiler_t, on)};

const char *em__metric_kind_name(em_metric_kind_t k) {
  static const char *const names[] = {"gauge", "counter", "delta"};
  return em__name_in(names, sizeof(names) / sizeof(names[0]), (long)k);
}

uint64_t em__head_get(const em_msg_head_t *h, const em_head_field_t *f) {
  const unsigned char *p = (const unsigned char *)h + f->offset;
  if (f->bytes == sizeof(uint32_t)) {
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return v;
  }
  uint64_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}

void em__head_set(em_msg_head_t *h, const em_head_field_t *f, uint64_t v) {
  unsigned char *p = (unsigned char *)h + f->offset;
  if (f->bytes == sizeof(uint32_t)) {
    uint32_t v32 = (uint32_t)v;
    memcpy(p, &v32, sizeof(v32));
    return;
  }
  memcpy(p, &v, sizeof(v));
}

bool em__level_ok(int level) {
  return level >= EM_LEVEL_NOMINAL && level <= EM_LEVEL_CRITICAL;
}

static bool ident_char(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == ':' || c == '-';
}

size_t em_text_char(const char *text, size_t left) {
  const unsigned char *s = (const unsigned char *)text;
  if (!s || left == 0) {
    return 0;
  }
  unsigned char c = s[0];
  if (c < 0x80) {
    return (c >= 0x20 && c != 0x7f) ? 1 : 0;
  }
  size_t n;
  uint32_t cp;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
    cp = c & 0x1fu;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    cp = c & 0x0fu;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    cp = c & 0x07u;
  } else {
    return 0;
  }
  if (left < n) {
    return 0;
  }
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xc0u) != 0x80u) {
      return 0;
    }
    cp = (cp << 6) | (s[i] & 0x3fu);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
      (cp >= 0xd800 && cp <= 0xdfff) || (cp >= 0x80 && cp <= 0x9f)) {
    return 0;
  }
  return n;
}

int em__check_str(const char *s, size_t len, em_str_class_t cls, size_t max) {
  if (!s || len == 0 || len > max) {
    return EM_PROTO_ESTRING;
  }
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < len;) {
    size_t step = 1;
    switch (cls) {
    case STR_IDENT:
      step = ident_char(u[i]) ? 1 : 0;
      break;
    case STR_NAME:
      step = (u[i] >= 0x20 && u[i] <= 0x7e) ? 1 : 0;
      break;
    case STR_TEXT:
      step = em_text_char(s + i, len - i);
      break;
    case STR_LABEL:
      step = ((u[i] >= 'a' && u[i] <= 'z') || (u[i] >= 'A' && u[i] <= 'Z') || u[i] == '_' ||
              (i > 0 && u[i] >= '0' && u[i] <= '9')) &&
                     !(i == 1 && u[0] == '_' && u[1] == '_')
                 ? 1
                 : 0;
      break;
    }
    if (step == 0) {
      return EM_PROTO_ESTRING;
    }
    i += step;
  }
  return 0;
}

int em__check_cstr(const char *s, em_str_class_t cls, size_t max) {
  if (!s) {
    return EM_PROTO_ESTRING;
  }
  size_t len = strnlen(s, max + 1);
  return em__check_str(s, len, cls, max);
}

int em__check_cause(const char *rule, const char *stage, const em_value_t *value,
                    const em_value_t *bound, const char *reason) {
  int rc = em__check_value(value);
  if (!rc) {
    rc = em__check_value(bound);
  }
  if (!rc && rule) {
    rc = em__check_cstr(rule, STR_NAME, EM_PROTO_MAX_NAME_BYTES);
  }
  if (!rc && stage) {
    rc = em__check_cstr(stage, STR_IDENT, EM_PROTO_MAX_STAGE_BYTES);
  }
  if (!rc && reason) {
    rc = em__check_cstr(reason, STR_TEXT, EM_PROTO_MAX_TEXT_BYTES);
  }
  return rc;
}

size_t em__cause_count(const char *rule, const char *stage, const em_value_t *value,
                       const em_value_t *bound, const char *reason) {
  return (rule ? 1u : 0u) + (stage ? 1u : 0u) + (value->type != EM_VALUE_ABSENT ? 1u : 0u) +
         (bound->type != EM_VALUE_ABSENT ? 1u : 0u) + (reason ? 1u : 0u);
}

int em__check_value(const em_value_t *v) {
  switch (v->type) {
  case EM_VALUE_ABSENT:
  case EM_VALUE_UINT:
  case EM_VALUE_INT:
    return 0;
  case EM_VALUE_FLOAT:
    return isfinite(v->as.f) ? 0 : EM_PROTO_ERANGE;
  }
  return EM_PROTO_ERANGE;
}

int em__check_stage(const em_stage_t *s) {
  int rc = em__check_cstr(s->name, STR_IDENT, EM_PROTO_MAX_STAGE_BYTES);
  if (rc) {
    return rc;
  }
  if (s->count == 0) {
    return 0;
  }
  if (s->scale < EM_PROTO_MIN_SCALE || s->scale > EM_PROTO_MAX_SCALE) {
    return EM_PROTO_ERANGE;
  }
  if (s->n_buckets > EM_PROTO_MAX_BUCKETS) {
    return EM_PROTO_ELIMIT;
  }
  if (s->n_buckets > 0 && !s->buckets) {
    return EM_PROTO_EINVAL;
  }
  if (!(s->min_ns <= s->p50_ns && s->p50_ns <= s->p90_ns && s->p90_ns <= s->p99_ns &&
        s->p99_ns <= s->p999_ns && s->p999_ns <= s->max_ns)) {
    return EM_PROTO_EINCONSISTENT;
  }
  if (s->sum_ns < s->max_ns) {
    return EM_PROTO_EINCONSISTENT;
  }
  uint64_t total = s->zero_count;
  for (size_t i = 0; i < s->n_buckets; i++) {
    if (s->buckets[i].count == 0) {
      return EM_PROTO_ERANGE;
    }
    if (i > 0 && s->buckets[i].index <= s->buckets[i - 1].index) {
      return EM_PROTO_EINCONSISTENT;
    }
    if (total > UINT64_MAX - s->buckets[i].count) {
      return EM_PROTO_EINCONSISTENT;
    }
    total += s->buckets[i].count;
  }
  return total == s->count ? 0 : EM_PROTO_EINCONSISTENT;
}

int em__check_trigger(const em_trigger_t *t) {
  if (t->cause > 1 || !em__level_ok((int)t->level) ||
      (t->prev_level != EM_LEVEL_NONE && !em__level_ok((int)t->prev_level))) {
    return EM_PROTO_ERANGE;
  }
  return em__check_cause(EM_CAUSE_OF(t));
}

int em__check_stage_table(const char *const *names, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int rc = em__check_cstr(names[i], STR_IDENT, EM_PROTO_MAX_STAGE_BYTES);
    if (rc) {
      return rc;
    }
    for (size_t j = 0; j < i; j++) {
      if (strcmp(names[i], names[j]) == 0) {
        return EM_PROTO_EDUPLICATE;
      }
    }
  }
  return 0;
}
