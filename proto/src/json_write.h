/*
 * json_write.h - internal: the JSON writer the printers of proto/ share (json.c for the v1
 * messages, flight.c for the flight recording). It writes into a caller buffer and keeps
 * counting past its end, so one pass reports the length needed. Not installed.
 */
#ifndef EDGEMON_PROTO_JSON_WRITE_H
#define EDGEMON_PROTO_JSON_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "schema.h"

typedef struct {
  char *buf;
  size_t cap;
  size_t pos; /* Length needed so far, even past cap. */
  bool first; /* No member written yet in the current object or array. */
} em__jw_t;

void em__jw_raw(em__jw_t *w, const char *s, size_t n);
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
void em__jw_fmt(em__jw_t *w, const char *fmt, ...);
/* A JSON string, escaped. */
void em__jw_str(em__jw_t *w, const char *s);
/* Starts a member "name": of the current object. */
void em__jw_key(em__jw_t *w, const char *name);
void em__jw_open(em__jw_t *w, char c);
void em__jw_close(em__jw_t *w, char c);
/* Separator before an array element. */
void em__jw_elem(em__jw_t *w);
/* A number (floats: the shortest form that reads back the same), or null. */
void em__jw_value(em__jw_t *w, const em_value_t *v);
/* Members: "name": value. */
void em__jkv_u64(em__jw_t *w, const char *name, uint64_t v);
void em__jkv_str(em__jw_t *w, const char *name, const char *s);
void em__jkv_value(em__jw_t *w, const char *name, const em_value_t *v);
/* The cause fields that are present: "rule", "stage", "value", "bound", "reason". */
void em__jw_cause(em__jw_t *w, const char *rule, const char *stage, const em_value_t *value,
                  const em_value_t *bound, const char *reason);
/* "trigger": {"cause": cause_name, "level", "prev_level" when present, the cause fields}. */
void em__jw_trigger(em__jw_t *w, const char *cause_name, const em_trigger_t *t);
/* Version, kind and the head's fields the kind carries. */
void em__jw_common(em__jw_t *w, em_msg_kind_t kind, const em_msg_head_t *head);

/* Ends the text: NUL-terminates it when cap > 0; 0 and *out_len, or EM_PROTO_ENOSPACE. */
int em__jw_finish(em__jw_t *w, size_t *out_len);

#endif /* EDGEMON_PROTO_JSON_WRITE_H */
