/*
 * json_write.h - internal: what the JSON printers of proto/ share (json.c for the v1 messages,
 * flight_json.c and profile_json.c for the forensic messages) beyond the public writer
 * (edgemon/json_write.h, json_write.c): values, causes, triggers and the common head. They
 * write into a caller buffer and keep counting past its end, so one pass reports the length
 * needed. Not installed.
 */
#ifndef EDGEMON_PROTO_JSON_WRITE_H
#define EDGEMON_PROTO_JSON_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "edgemon/json_write.h"
#include "schema.h"

/* The printers write with the one JSON writer (edgemon/json_write.h), into a buffer, with no
 * escapes beyond JSON's own; the names below are theirs for it. */
typedef em_json_t em__jw_t;
#define em__jw_raw   em_json_raw
#define em__jw_fmt   em_json_fmt
#define em__jw_str   em_json_str
#define em__jw_key   em_json_key
#define em__jw_open  em_json_open
#define em__jw_close em_json_close
#define em__jw_elem  em_json_elem

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
