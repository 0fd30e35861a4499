/*
 * identity.c - see identity.h.
 */
#include "identity.h"

#include <stdio.h>
#include <string.h>

void em_identity_init(em_identity_t *id) {
  memset(id, 0, sizeof(*id));
}

/* "model: NAME VERSION (k=v, ...)" into out[0..cap), cut at cap (all of it is ASCII). */
static void describe(const em_model_t *m, char *out, size_t cap) {
  size_t n = (size_t)snprintf(out, cap, "model: %s %s", m->name, m->version);
  for (size_t i = 0; i < m->n_labels && n < cap; i++) {
    n += (size_t)snprintf(out + n, cap - n, "%s%s=%s", i == 0 ? " (" : ", ", m->labels[i].key,
                          m->labels[i].value);
  }
  if (m->n_labels > 0 && n < cap) {
    snprintf(out + n, cap - n, ")");
  }
}

bool em_identity_take(em_identity_t *id, const em_model_dgram_t *m, char *reason, size_t cap) {
  em_label_t labels[EM_PROTO_MAX_MODEL_LABELS];
  em_model_t view;
  em_model_dgram_view(m, labels, &view);
  if (em_proto_model_equal(&view, &id->view)) {
    return false;
  }
  id->dgram = *m;
  em_model_dgram_view(&id->dgram, id->labels, &id->view);
  id->changes++;
  if (reason && cap) {
    describe(&id->view, reason, cap);
  }
  return true;
}
