/*
 * json_write.c - the JSON writer shared by the printers (json_write.h). Owns nothing, never
 * allocates, reentrant.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_write.h"

void em__jw_raw(em__jw_t *w, const char *s, size_t n) {
  if (w->pos < w->cap) {
    size_t room = w->cap - w->pos;
    memcpy(w->buf + w->pos, s, n < room ? n : room);
  }
  w->pos += n;
}

void em__jw_fmt(em__jw_t *w, const char *fmt, ...) {
  char tmp[64];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
  va_end(ap);
  if (n > 0) {
    em__jw_raw(w, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
  }
}

void em__jw_str(em__jw_t *w, const char *s) {
  em__jw_raw(w, "\"", 1);
  for (const char *p = s; *p; p++) {
    unsigned char c = (unsigned char)*p;
    if (c == '"' || c == '\\') {
      char esc[2] = {'\\', (char)c};
      em__jw_raw(w, esc, 2);
    } else if (c < 0x20) {
      em__jw_fmt(w, "\\u%04x", c);
    } else {
      em__jw_raw(w, p, 1);
    }
  }
  em__jw_raw(w, "\"", 1);
}

/* Starts a member "name": of the current object. */
void em__jw_key(em__jw_t *w, const char *name) {
  if (!w->first) {
    em__jw_raw(w, ",", 1);
  }
  w->first = false;
  em__jw_str(w, name);
  em__jw_raw(w, ":", 1);
}

void em__jw_open(em__jw_t *w, char c) {
  em__jw_raw(w, &c, 1);
  w->first = true;
}

void em__jw_close(em__jw_t *w, char c) {
  em__jw_raw(w, &c, 1);
  w->first = false;
}

/* Separator before an array element. */
void em__jw_elem(em__jw_t *w) {
  if (!w->first) {
    em__jw_raw(w, ",", 1);
  }
  w->first = false;
}

void em__jw_value(em__jw_t *w, const em_value_t *v) {
  switch (v->type) {
  case EM_VALUE_ABSENT:
    em__jw_raw(w, "null", 4);
    break;
  case EM_VALUE_UINT:
    em__jw_fmt(w, "%" PRIu64, v->as.u);
    break;
  case EM_VALUE_INT:
    em__jw_fmt(w, "%" PRId64, v->as.i);
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
    em__jw_raw(w, tmp, (size_t)n);
    if (!strpbrk(tmp, ".e")) {
      em__jw_raw(w, ".0", 2); /* Keep it a float for JSON readers that tell the two apart. */
    }
    break;
  }
  }
}

void em__jkv_u64(em__jw_t *w, const char *name, uint64_t v) {
  em__jw_key(w, name);
  em__jw_fmt(w, "%" PRIu64, v);
}

void em__jkv_str(em__jw_t *w, const char *name, const char *s) {
  em__jw_key(w, name);
  em__jw_str(w, s);
}

void em__jkv_value(em__jw_t *w, const char *name, const em_value_t *v) {
  em__jw_key(w, name);
  em__jw_value(w, v);
}

/* Version, kind and the head's fields the kind carries. */
void em__jw_common(em__jw_t *w, em_msg_kind_t kind, const em_msg_head_t *head) {
  em__jkv_u64(w, "v", EM_PROTO_VERSION);
  em__jkv_str(w, "kind", em_msg_kind_name(kind));
  for (size_t i = 0; i < EM_HEAD_FIELDS; i++) {
    const em_head_field_t *f = &em__head_fields[i];
    if (em__head_carries(f, kind)) {
      em__jkv_u64(w, f->json, em__head_get(head, f));
    }
  }
}

void em__jw_cause(em__jw_t *w, const char *rule, const char *stage, const em_value_t *value,
                  const em_value_t *bound, const char *reason) {
  if (rule) {
    em__jkv_str(w, "rule", rule);
  }
  if (stage) {
    em__jkv_str(w, "stage", stage);
  }
  if (value->type != EM_VALUE_ABSENT) {
    em__jkv_value(w, "value", value);
  }
  if (bound->type != EM_VALUE_ABSENT) {
    em__jkv_value(w, "bound", bound);
  }
  if (reason) {
    em__jkv_str(w, "reason", reason);
  }
}

int em__jw_finish(em__jw_t *w, size_t *out_len) {
  *out_len = w->pos;
  if (w->cap > 0) {
    w->buf[w->pos < w->cap ? w->pos : w->cap - 1] = '\0';
  }
  return w->pos < w->cap ? 0 : EM_PROTO_ENOSPACE;
}

void em__jw_trigger(em__jw_t *w, const char *cause_name, const em_trigger_t *t) {
  em__jw_key(w, "trigger");
  em__jw_open(w, '{');
  em__jkv_str(w, "cause", cause_name);
  em__jkv_str(w, "level", em_level_name(t->level));
  if (t->prev_level != EM_LEVEL_NONE) {
    em__jkv_str(w, "prev_level", em_level_name(t->prev_level));
  }
  em__jw_cause(w, EM_CAUSE_OF(t));
  em__jw_close(w, '}');
}
