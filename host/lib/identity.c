/*
 * identity.c - copies and canonical JSON of model identities (see identity.h). The decoder has
 * checked every string (printable ASCII, label keys [A-Za-z0-9_]) and sorted the labels, so the
 * JSON only escapes '"' and '\'; a control character from a caller's own value is written as
 * \u00XX all the same.
 */
#include "identity.h"

#include <edgemon/json_write.h>

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

/* The JSON writer (edgemon/json_write.h) into buf[0..cap), escaping DEL too. */
static em_json_t writer(char *buf, size_t cap) {
  return (em_json_t){.buf = buf, .cap = buf ? cap : 0, .first = true, .flags = EM_JSON_ESC_DEL};
}

static void put_str(em_json_t *w, const char *s) {
  em_json_str(w, s ? s : "");
}

static void put_labels(em_json_t *w, const em_model_t *m) {
  em_json_open(w, '{');
  for (size_t i = 0; m && m->labels && i < m->n_labels; i++) {
    em_json_key(w, m->labels[i].key ? m->labels[i].key : "");
    put_str(w, m->labels[i].value);
  }
  em_json_close(w, '}');
}

/* The length written, or 0 with buf holding "" when it did not fit. */
static size_t finish(em_json_t *w) {
  size_t len;
  if (!em_json_finish(w, &len)) {
    if (w->cap > 0) {
      w->buf[0] = '\0';
    }
    return 0;
  }
  return len;
}

size_t em_identity_json_str(const char *s, char *buf, size_t cap) {
  em_json_t w = writer(buf, cap);
  put_str(&w, s);
  return finish(&w);
}

size_t em_identity_labels_json(const em_model_t *m, char *buf, size_t cap) {
  em_json_t w = writer(buf, cap);
  put_labels(&w, m);
  return finish(&w);
}

size_t em_identity_json(const em_model_t *m, char *buf, size_t cap) {
  em_json_t w = writer(buf, cap);
  if (!m || !m->name) {
    em_json_raw(&w, "null", 4);
    return finish(&w);
  }
  em_json_open(&w, '{');
  em_json_key(&w, "name");
  put_str(&w, m->name);
  em_json_key(&w, "version");
  put_str(&w, m->version);
  em_json_key(&w, "labels");
  put_labels(&w, m);
  em_json_close(&w, '}');
  return finish(&w);
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
