/*
 * identity.h - the target's model identity (WIRE.md "Model identity"): the last one a client
 * named in a model datagram, kept in fixed storage (a copy of the datagram's texts, no
 * allocation), and the view the birth, every data message and every state message carry
 * (keys 11, 10, 13). The same identity sent again (a client's re-send, or one after an agent
 * restart) changes nothing; a different one replaces it and is counted, and the caller
 * publishes the change (a state message marked model_change).
 *
 * Owns: nothing beyond the caller-owned value. Single-threaded (the loop's thread).
 */
#ifndef EDGEMON_AGENT_IDENTITY_H
#define EDGEMON_AGENT_IDENTITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "edgemon/proto.h"
#include "edgemon/wire.h"

/* Caller-owned; zero-initialised (or em_identity_init) it holds no model. */
typedef struct {
  em_model_dgram_t dgram;                       /* As the client last named it. */
  em_label_t labels[EM_PROTO_MAX_MODEL_LABELS]; /* view's labels, into dgram. */
  em_model_t view;                              /* name NULL until a client names a model. */
  uint64_t changes;                             /* Identities that differed, since start. */
} em_identity_t;

/* No model named yet. */
void em_identity_init(em_identity_t *id);

/*
 * A valid model datagram. Returns false when it names the identity already held (nothing
 * changes); true when it differs: it is copied and counted, and `reason` gets
 * "model: NAME VERSION (k=v, ...)" cut at cap (ASCII).
 */
bool em_identity_take(em_identity_t *id, const em_model_dgram_t *m, char *reason, size_t cap);

#endif /* EDGEMON_AGENT_IDENTITY_H */
