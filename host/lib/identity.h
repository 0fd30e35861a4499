/*
 * identity.h - a model identity (proto.h's em_model_t: name, version, up to 8 labels) as the
 * host keeps and writes it: a fixed-size copy that outlives the decoded message (a device's
 * current model in dict.h, which the aggregator's registry and edgemon-cli read), its canonical
 * JSON, {"k":"v",...} with keys in ascending strcmp order, which the store uses as the
 * `models.labels` column and the API answers as "labels", and the one-line text a person
 * reads. Owns nothing; every function is pure and thread-safe.
 */
#ifndef EM_IDENTITY_H
#define EM_IDENTITY_H

#include <edgemon/proto.h>
#include <stdbool.h>
#include <stddef.h>

/* Bytes of the canonical JSON of the largest identity (em_identity_json), NUL included: each
 * character of a name, version, key or value escaped at most to 2 bytes. */
#define EM_IDENTITY_JSON_MAX 1024u

/* A copy of a model identity. named false: none (the other fields are empty). */
typedef struct {
  bool named;
  char name[EM_PROTO_MAX_NAME_BYTES + 1];
  char version[EM_PROTO_MAX_MODEL_VERSION + 1];
  size_t n_labels;
  char keys[EM_PROTO_MAX_MODEL_LABELS][EM_PROTO_MAX_LABEL_KEY + 1];
  char values[EM_PROTO_MAX_MODEL_LABELS][EM_PROTO_MAX_LABEL_VALUE + 1];
} em_identity_t;

/* Copies m (borrowed for the call; NULL or name NULL: none) into *out. Strings longer than the
 * schema allows are cut, labels past EM_PROTO_MAX_MODEL_LABELS left out (the decoder refuses
 * both, so only a caller's own value can have them). */
void em_identity_set(em_identity_t *out, const em_model_t *m);

/* A view of id as an em_model_t whose strings point into id; labels[] (at least
 * EM_PROTO_MAX_MODEL_LABELS entries) receives the label pointers. Valid while id is. */
em_model_t em_identity_view(const em_identity_t *id, em_label_t *labels);

/* Writes s (NULL: "") as a JSON string, quotes included, into buf[0..cap), NUL-terminated: '"'
 * and '\' escaped, control characters as \u00XX. Returns the length, or 0 when cap is too
 * small (6 bytes per character and 3 suffice). */
size_t em_identity_json_str(const char *s, char *buf, size_t cap);

/* Writes the labels of m as canonical JSON ({} for none) into buf[0..cap), NUL-terminated.
 * Returns the length, or 0 when cap is too small (buf then holds ""). */
size_t em_identity_labels_json(const em_model_t *m, char *buf, size_t cap);

/* Writes {"name":N,"version":V,"labels":{...}} (or null for no model) into buf[0..cap).
 * Returns the length, or 0 when cap is too small. */
size_t em_identity_json(const em_model_t *m, char *buf, size_t cap);

/* Bytes of the longest em_identity_text(), NUL included. */
#define EM_IDENTITY_TEXT_MAX                                                                       \
  (EM_PROTO_MAX_NAME_BYTES + EM_PROTO_MAX_MODEL_VERSION + 4 +                                      \
   EM_PROTO_MAX_MODEL_LABELS * (EM_PROTO_MAX_LABEL_KEY + EM_PROTO_MAX_LABEL_VALUE + 3) + 2)

/* "NAME VERSION" and, with labels, " (k=v, ...)", into buf[0..cap) (cut to fit, always
 * NUL-terminated when cap > 0); "-" for none. */
void em_identity_text(const em_identity_t *id, char *buf, size_t cap);

#endif /* EM_IDENTITY_H */
