/*
 * json_items.c - the JSON arrays of objects and of texts that proto's printers share
 * (json_items.h). Owns nothing, never allocates, reentrant.
 */
#include "json_items.h"

void em__jw_objects(em__jw_t *w, const char *name, const void *doc, size_t n, em__jw_item_fn item) {
  em__jw_key(w, name);
  em__jw_open(w, '[');
  for (size_t i = 0; i < n; i++) {
    em__jw_elem(w);
    em__jw_open(w, '{');
    item(w, doc, i);
    em__jw_close(w, '}');
  }
  em__jw_close(w, ']');
}

void em__jw_texts(em__jw_t *w, const char *name, const char *const *texts, size_t n) {
  em__jw_key(w, name);
  em__jw_open(w, '[');
  for (size_t i = 0; i < n; i++) {
    em__jw_elem(w);
    em__jw_str(w, texts[i]);
  }
  em__jw_close(w, ']');
}

void em__jkv_true(em__jw_t *w, const char *name, bool on) {
  if (on) {
    em__jw_key(w, name);
    em__jw_raw(w, "true", 4);
  }
}
