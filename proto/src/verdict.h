/*
 * verdict.h - internal: the breach's verdict (em_proto_verdict_t) as both kinds that carry it
 * write, read and print it: state key 15 and flight key 16, the same map {0: stage, 1: statistic,
 * 2: baseline, 3: breach value, 4: NOMINAL windows, 5: [* cause]}. The checks the encoders run
 * are the decoder's rules (V1..V4 in proto/edgemon.cddl). Owns nothing; reentrant. Not
 * installed.
 */
#ifndef EDGEMON_PROTO_VERDICT_H
#define EDGEMON_PROTO_VERDICT_H

#include "cbor_write.h"
#include "fields.h"
#include "json_write.h"

/* Map entries the verdict adds to its message: 1 when there is one (v not NULL), else 0. */
size_t em__verdict_entries(const em_proto_verdict_t *v);

/* `key` and the verdict's map when v is not NULL; nothing otherwise. v must be checked. */
void em__w_verdict(em__writer_t *w, unsigned key, const em_proto_verdict_t *v);

/* A reader for EM__F_FN rows: a verdict in scratch, its pointer (const em_proto_verdict_t *) at the
 * row's offset. */
int em__field_verdict(em__dec_t *d, const em__field_t *f, void *base);

/* "verdict": {...} when v is not NULL; nothing otherwise. */
void em__jw_verdict(em__jw_t *w, const em_proto_verdict_t *v);

#endif /* EDGEMON_PROTO_VERDICT_H */
