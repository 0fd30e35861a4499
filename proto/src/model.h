/*
 * model.h - internal: the model identity (em_model_t) as every message kind that carries it
 * writes, reads and prints it: birth key 11, data key 10, state key 13, all the same map
 * {0: name, 1: version, ? 2: {* label-key => label-value}}. Not installed.
 */
#ifndef EDGEMON_PROTO_MODEL_H
#define EDGEMON_PROTO_MODEL_H

#include "cbor_read.h"
#include "cbor_write.h"
#include "json_write.h"

/* Map entries the identity adds to its message: 1 when named, 0 when not. */
size_t em__model_entries(const em_model_t *m);

/* `key` and the identity's map, when named; nothing otherwise. */
void em__w_model(em__writer_t *w, unsigned key, const em_model_t *m);

/* Reads the identity's map into *m (strings and labels in scratch, labels sorted by key). */
int em__read_model(em__dec_t *d, em_model_t *m);

/* "model": {...} when named; nothing otherwise. */
void em__jw_model(em__jw_t *w, const em_model_t *m);

#endif /* EDGEMON_PROTO_MODEL_H */
