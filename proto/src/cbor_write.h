/*
 * cbor_write.h - internal: the CBOR writer every encoder of proto/ shares (encode.c for the
 * v1 messages, flight.c for the flight recording). It writes items straight into a caller
 * buffer and, past its end, keeps counting, so one pass reports the exact size needed; with
 * cap 0 it only measures. Not installed.
 */
#ifndef EDGEMON_PROTO_CBOR_WRITE_H
#define EDGEMON_PROTO_CBOR_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "schema.h"

/* Output cursor. `pos` counts every byte the message needs, even past `cap`. */
typedef struct {
  uint8_t *buf;
  size_t cap;
  size_t pos;
} em__writer_t;

void em__w_uint(em__writer_t *w, uint64_t v);
void em__w_int(em__writer_t *w, int64_t v);
void em__w_map(em__writer_t *w, size_t entries);
void em__w_array(em__writer_t *w, size_t items);
void em__w_bool(em__writer_t *w, bool v);
void em__w_null(em__writer_t *w);
/* Floats go out as binary32 when that is exact, else binary64. */
void em__w_float(em__writer_t *w, double v);
/* A text string of strlen(s) bytes. */
void em__w_str(em__writer_t *w, const char *s);
/* A number, or null for EM_VALUE_ABSENT. */
void em__w_value(em__writer_t *w, const em_value_t *v);
/* Key helpers: a map key followed by its value. */
void em__kv_uint(em__writer_t *w, unsigned key, uint64_t v);
void em__kv_str(em__writer_t *w, unsigned key, const char *s);

/* The cause fields that are present, under first_key + em_cause_key_t (schema.h). */
void em__w_cause(em__writer_t *w, unsigned first_key, const char *rule, const char *stage,
                 const em_value_t *value, const em_value_t *bound, const char *reason);

/* A trigger map (flight key 5, profile key 5): cause, level, prev_level when present, the
 * cause fields that are present. */
void em__w_trigger(em__writer_t *w, const em_trigger_t *t);

/*
 * The top-level map's head (2 + the head fields kind carries + n_more entries), version, kind
 * and the head fields kind carries (schema.h's em__head_fields), in that order.
 */
void em__w_common(em__writer_t *w, size_t n_more, em_msg_kind_t kind, const em_msg_head_t *head);

/* a - b as a CBOR integer (any pair of uint64: the difference may need 65 bits). */
void em__w_diff(em__writer_t *w, uint64_t a, uint64_t b);

/*
 * live[0..len), whose map head is one byte with room for one more entry, with that count
 * raised and `key: true` appended (key < 24), into out (may be live): 0, EM_PROTO_ETOOBIG past
 * max_len, EM_PROTO_ENOSPACE; *out_len the size either way.
 */
int em__append_historical(const uint8_t *live, size_t len, unsigned key, size_t max_len,
                          uint8_t *out, size_t cap, size_t *out_len);

/* Bytes of the CBOR head of an unsigned integer (or a container of that many items). */
size_t em__uint_bytes(uint64_t v);

/* Bytes em__w_diff(a, b) writes. */
size_t em__diff_bytes(uint64_t a, uint64_t b);

#endif /* EDGEMON_PROTO_CBOR_WRITE_H */
