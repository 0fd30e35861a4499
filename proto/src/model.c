/*
 * model.c - the model identity's codec (model.h) and its public checks (proto.h): one set of
 * rules for the encoder, the decoder and the JSON printer of every kind that carries it.
 * Labels are ordered by key with strcmp; the decoder sorts what it reads, so two equal
 * identities decode to equal structs whatever order their labels came in. Owns nothing,
 * reentrant.
 */
#include <stdlib.h>
#include <string.h>

#include "fields.h"
#include "model.h"

static int read_labels_field(em__dec_t *d, const em__field_t *f, void *base);

/* The identity's map: what the decoder reads and the check holds the strings to. */
static const em__field_t model_rows[] = {
    EM__STR(KO_NAME, em_model_t, name, STR_NAME, EM_PROTO_MAX_NAME_BYTES, REQ),
    EM__STR(KO_VERSION, em_model_t, version, STR_NAME, EM_PROTO_MAX_MODEL_VERSION, REQ),
    EM__FN(KO_LABELS, em_model_t, labels, read_labels_field, NULL, OPT)};
static const em__fields_t model_fields = EM__TABLE(model_rows);

int em_proto_model_check(const em_model_t *m) {
  if (!m) {
    return EM_PROTO_EINVAL;
  }
  if (!m->name) {
    return 0;
  }
  int rc = em__check_strs(&model_fields, m);
  if (rc) {
    return rc;
  }
  if (m->n_labels > EM_PROTO_MAX_MODEL_LABELS) {
    return EM_PROTO_ELIMIT;
  }
  if (m->n_labels && !m->labels) {
    return EM_PROTO_EINVAL;
  }
  for (size_t i = 0; i < m->n_labels; i++) {
    rc = em__check_cstr(m->labels[i].key, STR_LABEL, EM_PROTO_MAX_LABEL_KEY);
    if (!rc) {
      rc = em__check_cstr(m->labels[i].value, STR_NAME, EM_PROTO_MAX_LABEL_VALUE);
    }
    if (rc) {
      return rc;
    }
    if (i > 0) {
      int order = strcmp(m->labels[i - 1].key, m->labels[i].key);
      if (order >= 0) {
        return order == 0 ? EM_PROTO_EDUPLICATE : EM_PROTO_EINVAL;
      }
    }
  }
  return 0;
}

bool em_proto_model_equal(const em_model_t *a, const em_model_t *b) {
  if (!a->name || !b->name) {
    return !a->name && !b->name;
  }
  if (strcmp(a->name, b->name) != 0 || strcmp(a->version, b->version) != 0 ||
      a->n_labels != b->n_labels) {
    return false;
  }
  for (size_t i = 0; i < a->n_labels; i++) {
    if (strcmp(a->labels[i].key, b->labels[i].key) != 0 ||
        strcmp(a->labels[i].value, b->labels[i].value) != 0) {
      return false;
    }
  }
  return true;
}

size_t em__model_entries(const em_model_t *m) {
  return m->name ? 1u : 0u;
}

void em__w_model(em__writer_t *w, unsigned key, const em_model_t *m) {
  if (!m->name) {
    return;
  }
  em__w_uint(w, key);
  em__w_map(w, m->n_labels ? 3 : 2);
  em__kv_str(w, KO_NAME, m->name);
  em__kv_str(w, KO_VERSION, m->version);
  if (m->n_labels) {
    em__w_uint(w, KO_LABELS);
    em__w_map(w, m->n_labels);
    for (size_t i = 0; i < m->n_labels; i++) {
      em__w_str(w, m->labels[i].key);
      em__w_str(w, m->labels[i].value);
    }
  }
}

static int cmp_label(const void *a, const void *b) {
  return strcmp(((const em_label_t *)a)->key, ((const em_label_t *)b)->key);
}

static int read_labels(em__dec_t *d, em_model_t *m) {
  size_t at = d->pos;
  uint64_t n = 0;
  void *mem = NULL;
  int rc = em__open_list(d, T_MAP, EM_PROTO_MAX_MODEL_LABELS, 1, sizeof(em_label_t), &n, &mem);
  em_label_t *l = mem;
  for (uint64_t i = 0; i < n && !rc; i++) {
    rc = em__read_str(d, STR_LABEL, EM_PROTO_MAX_LABEL_KEY, &l[i].key);
    if (rc == EM_PROTO_ETYPE) {
      rc = EM_PROTO_EKEY;
    }
    if (!rc) {
      rc = em__read_str(d, STR_NAME, EM_PROTO_MAX_LABEL_VALUE, &l[i].value);
    }
  }
  if (!rc) {
    rc = em__sort_unique(d, at, l, (size_t)n, sizeof(*l), cmp_label);
  }
  return em__close_list(d, rc, l, n, &m->labels, &m->n_labels);
}

static int read_labels_field(em__dec_t *d, const em__field_t *f, void *base) {
  (void)f;
  return read_labels(d, base);
}

int em__read_model(em__dec_t *d, em_model_t *m) {
  memset(m, 0, sizeof(*m));
  int rc = em__read_map(d, &model_fields, m, NULL);
  if (rc) {
    memset(m, 0, sizeof(*m));
  }
  return rc;
}

void em__jw_model(em__jw_t *w, const em_model_t *m) {
  if (!m->name) {
    return;
  }
  em__jw_key(w, "model");
  em__jw_open(w, '{');
  em__jkv_str(w, "name", m->name);
  em__jkv_str(w, "version", m->version);
  em__jw_key(w, "labels");
  em__jw_open(w, '{');
  for (size_t i = 0; i < m->n_labels; i++) {
    em__jkv_str(w, m->labels[i].key, m->labels[i].value);
  }
  em__jw_close(w, '}');
  em__jw_close(w, '}');
}
