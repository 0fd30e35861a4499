/*
 * json_write.c - the one JSON writer (edgemon/json_write.h): the string escaper every JSON
 * printer of proto/ and host/ calls, the writer over it, and what proto's printers share on top
 * (json_write.h). Owns nothing, never allocates, reentrant.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_write.h"

/* ---- the escaper ------------------------------------------------------------------------ */

size_t em_json_utf8_len(const uint8_t *s, size_t n) {
  uint8_t c = s[0];
  if (c < 0x80) {
    return 1;
  }
  size_t len = 0;
  uint8_t lo = 0x80, hi = 0xbf; /* The second byte's range: no overlong form, no surrogate. */
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    lo = c == 0xe0 ? 0xa0 : lo;
    hi = c == 0xed ? 0x9f : hi;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    lo = c == 0xf0 ? 0x90 : lo;
    hi = c == 0xf4 ? 0x8f : hi;
  }
  if (len == 0 || n < len || s[1] < lo || s[1] > hi) {
    return 0;
  }
  for (size_t i = 2; i < len; i++) {
    if (s[i] < 0x80 || s[i] > 0xbf) {
      return 0;
    }
  }
  return len;
}

/* The two-character form of c under flags, or 0 for none. */
static char short_form(unsigned char c, unsigned flags) {
  if (c == '"' || c == '\\') {
    return (char)c;
  }
  if (c == '\n' && (flags & (EM_JSON_ESC_SHORT | EM_JSON_ESC_NEWLINE))) {
    return 'n';
  }
  if (flags & EM_JSON_ESC_SHORT) {
    switch (c) {
    case '\b':
      return 'b';
    case '\f':
      return 'f';
    case '\r':
      return 'r';
    case '\t':
      return 't';
    default:
      break;
    }
  }
  return 0;
}

void em_json_escape(const char *str, size_t n, unsigned flags, em_json_sink_fn put, void *ctx) {
  const uint8_t *s = (const uint8_t *)str;
  bool utf8 = (flags & (EM_JSON_UTF8_ESCAPE | EM_JSON_UTF8_REPLACE)) != 0;
  size_t run = 0; /* Start of the bytes not yet handed to put, all written as they are. */
  size_t i = 0;
  while (i < n) {
    unsigned char c = s[i];
    size_t len = utf8 ? em_json_utf8_len(s + i, n - i) : 1;
    bool plain = len > 1 || (len == 1 && c != '"' && c != '\\' &&
                             (c >= 0x20 ? !(c == 0x7f && (flags & EM_JSON_ESC_DEL))
                                        : (flags & EM_JSON_CTRL_RAW) && !short_form(c, flags)));
    if (plain) {
      i += len;
      continue;
    }
    put(ctx, str + run, i - run);
    if (len == 0) {
      if (flags & EM_JSON_UTF8_ESCAPE) {
        put(ctx, "\\ufffd", 6);
      } else {
        put(ctx, "\xEF\xBF\xBD", 3);
      }
    } else {
      char esc[8];
      char f = short_form(c, flags);
      if (f) {
        esc[0] = '\\';
        esc[1] = f;
        put(ctx, esc, 2);
      } else {
        snprintf(esc, sizeof(esc), "\\u%04x", c);
        put(ctx, esc, 6);
      }
    }
    i++;
    run = i;
  }
  put(ctx, str + run, n - run);
}

void em_json_file_sink(void *ctx, const char *s, size_t n) {
  if (n > 0) {
    fwrite(s, 1, n, ctx);
  }
}

/* ---- the writer ------------------------------------------------------------------------- */

void em_json_raw(em_json_t *w, const char *s, size_t n) {
  if (w->sink) {
    w->sink(w->ctx, s, n);
  } else if (w->pos < w->cap) {
    size_t room = w->cap - w->pos;
    memcpy(w->buf + w->pos, s, n < room ? n : room);
  }
  w->pos += n;
}

void em_json_fmt(em_json_t *w, const char *fmt, ...) {
  char tmp[64];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
  va_end(ap);
  if (n > 0) {
    em_json_raw(w, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
  }
}

static void raw_sink(void *ctx, const char *s, size_t n) {
  em_json_raw(ctx, s, n);
}

void em_json_strn(em_json_t *w, const char *s, size_t n) {
  em_json_raw(w, "\"", 1);
  em_json_escape(s, n, w->flags, raw_sink, w);
  em_json_raw(w, "\"", 1);
}

void em_json_str(em_json_t *w, const char *s) {
  em_json_strn(w, s, strlen(s));
}

void em_json_key(em_json_t *w, const char *name) {
  em_json_elem(w);
  em_json_str(w, name);
  em_json_raw(w, ":", 1);
}

void em_json_open(em_json_t *w, char c) {
  em_json_raw(w, &c, 1);
  w->first = true;
}

void em_json_close(em_json_t *w, char c) {
  em_json_raw(w, &c, 1);
  w->first = false;
}

void em_json_elem(em_json_t *w) {
  if (!w->first) {
    em_json_raw(w, ",", 1);
  }
  w->first = false;
}

void em_json_double(em_json_t *w, double v) {
  char tmp[40];
  int n = 0;
  for (int digits = 15; digits <= 17; digits++) {
    n = snprintf(tmp, sizeof(tmp), "%.*g", digits, v);
    if (strtod(tmp, NULL) == v) {
      break;
    }
  }
  em_json_raw(w, tmp, (size_t)n);
  if (!strpbrk(tmp, ".e")) {
    em_json_raw(w, ".0", 2);
  }
}

bool em_json_finish(em_json_t *w, size_t *out_len) {
  *out_len = w->pos;
  if (w->cap > 0) {
    w->buf[w->pos < w->cap ? w->pos : w->cap - 1] = '\0';
  }
  return w->pos < w->cap;
}

/* ---- what proto's printers share (json_write.h) ------------------------------------------ */

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
  case EM_VALUE_FLOAT:
    em_json_double(w, v->as.f);
    break;
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
  return em_json_finish(w, out_len) ? 0 : EM_PROTO_ENOSPACE;
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
