/*
 * json_items.h - internal: the JSON arrays every printer of proto/ writes (json.c, flight_json.c,
 * profile_json.c): "name": [ {one object per item} ], "name": [the texts] and "name": true, on the
 * shared JSON writer (json_write.h). Owns nothing, reentrant. Not installed.
 */
#ifndef EDGEMON_PROTO_JSON_ITEMS_H
#define EDGEMON_PROTO_JSON_ITEMS_H

#include <stdbool.h>
#include <stddef.h>

#include "json_write.h"

/* Writes the members of item i of `doc` (inside its object's braces). */
typedef void (*em__jw_item_fn)(em__jw_t *w, const void *doc, size_t i);

/* "name": [{item 0}, ..., {item n - 1}]. */
void em__jw_objects(em__jw_t *w, const char *name, const void *doc, size_t n, em__jw_item_fn item);

/* "name": [the n texts]. */
void em__jw_texts(em__jw_t *w, const char *name, const char *const *texts, size_t n);

/* "name": true when `on`; nothing otherwise (a flag that is false is left out). */
void em__jkv_true(em__jw_t *w, const char *name, bool on);

#endif /* EDGEMON_PROTO_JSON_ITEMS_H */
