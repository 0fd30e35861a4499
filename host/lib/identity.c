/*
 * identity.c - copies and canonical JSON of model identities (see identity.h). The decoder has
 * checked every string (printable ASCII, label keys [A-Za-z0-9_]) and sorted the labels, so the
 * JSON only escapes '"' and '\'; a control character from a caller's own value is written as
 * \u00XX all the same.
 */
#include "identity.h"

#include <stdio.h>
#include <string.h>

static void copy(char *dst, size_t cap, const char *src) {
  snprintf(dst, cap, "%s", src ? src : "");
}

void em_identity_set(em_identity_t *out, const em_model_t *m) {
  memset(out, 0, sizeof(*out));
  if (!m || !m->name) {
    return;
  }
  out->named = true;
  copy(out->name, sizeof(out->name), m->name);
  copy(out->version, sizeof(out->version), m->version);
  for (size_t i = 0; m->labels && i < m->n_labels && i < EM_PROTO_MAX_MODEL_LABELS; i++) {
    copy(out->keys[i], sizeof(out->keys[i]), m->labels[i].key);
    copy(out->values[i], sizeof(out->values[i]), m->labels[i].value);
    out->n_labels++;
  }
}

em_model_t em_identity_view(const em_identity_t *id, em_label_t *labels) {
  em_model_t m = {0};
  if (!id || !id->named) {
    return m;
  }
  for (size_t i = 0; i < id->n_labels; i++) {
    labels[i] = (em_label_t){id->keys[i], id->values[i]};
  }
  m.name = id->name;
  m.version = id->version;
  m.labels = id->n_labels ? labels : NULL;
  m.n_labels = id->n_labels;
  return m;
}

/* A writer into a fixed buffer: ok turns false once something did not fit. */
typedef struct {
  char *buf;
  size_t cap;
  size_t len;
  bool ok;
} out_t;

static void put(out_t *o, const char *s, size_t n) {
  if (!o->ok || o->len + n + 1 > o->cap) {
    o->ok = false;
    return;
  }
  memcpy(o->buf + o->len, s, n);
  o->len += n;
  o->buf[o->len] = '\0';
}

static void put_str(out_t *o, const char *s) {
  put(o, "\"", 1);
  for (const char *p = s ? s : ""; *p; p++) {
    unsigned char c = (unsigned char)*p;
    if (c == '"' || c == '\\') {
      char esc[2] = {'\\', (char)c};
      put(o, esc, 2);
    } else if (c < 0x20 || c == 0x7f) {
      char esc[8];
      snprintf(esc, sizeof(esc), "\\u%04x", c);
      put(o, esc, 6);
    } else {
      put(o, (const char *)p, 1);
    }
  }
  put(o, "\"", 1);
}

static void put_labels(out_t *o, const em_model_t *m) {
  put(o, "{", 1);
  for (size_t i = 0; m && m->labels && i < m->n_labels; i++) {
    if (i > 0) {
      put(o, ",", 1);
    }
    put_str(o, m->labels[i].key);
    put(o, ":", 1);
    put_str(o, m->labels[i].value);
  }
  put(o, "}", 1);
}

static size_t finish(out_t *o) {
  if (!o->ok) {
    if (o->cap > 0) {
      o->buf[0] = '\0';
    }
    return 0;
  }
  return o->len;
}

size_t em_identity_json_str(const char *s, char *buf, size_t cap) {
  out_t o = {buf, cap, 0, buf && cap > 0};
  put_str(&o, s);
  return finish(&o);
}

size_t em_identity_labels_json(const em_model_t *m, char *buf, size_t cap) {
  out_t o = {buf, cap, 0, buf && cap > 0};
  put_labels(&o, m);
  return finish(&o);
}

size_t em_identity_json(const em_model_t *m, char *buf, size_t cap) {
  out_t o = {buf, cap, 0, buf && cap > 0};
  if (!m || !m->name) {
    put(&o, "null", 4);
    return finish(&o);
  }
  put(&o, "{\"name\":", 8);
  put_str(&o, m->name);
  put(&o, ",\"version\":", 11);
  put_str(&o, m->version);
  put(&o, ",\"labels\":", 10);
  put_labels(&o, m);
  put(&o, "}", 1);
  return finish(&o);
}

void em_identity_text(const em_identity_t *id, char *buf, size_t cap) {
  if (cap == 0) {
    return;
  }
  if (!id->named) {
    snprintf(buf, cap, "-");
    return;
  }
  int n = snprintf(buf, cap, "%s %s", id->name, id->version);
  for (size_t i = 0; i < id->n_labels && n >= 0 && (size_t)n < cap; i++) {
    n += snprintf(buf + n, cap - (size_t)n, "%s%s=%s", i ? ", " : " (", id->keys[i], id->values[i]);
  }
  if (id->n_labels && n >= 0 && (size_t)n < cap) {
    snprintf(buf + n, cap - (size_t)n, ")");
  }
}
