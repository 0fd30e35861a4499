/*
 * json_read.h - a small strict JSON reader (RFC 8259) for the aggregator's API answers that
 * edgemon-cli reads as JSON (compare --fleet): the whole text into a tree of values.
 *
 * Numbers become doubles (the API's counts and nanoseconds stay below 2^53), strings are
 * unescaped into UTF-8 (\uXXXX pairs included), nesting is limited to EM_JSON_MAX_DEPTH and
 * the tree to EM_JSON_MAX_VALUES values, so a hostile answer cannot exhaust the stack or
 * memory beyond its own size.
 *
 * Owns the tree it returns (em_json_free()); the text is borrowed for the call.
 */
#ifndef EM_CLI_JSON_READ_H
#define EM_CLI_JSON_READ_H

#include <stdbool.h>
#include <stddef.h>

#define EM_JSON_MAX_DEPTH  64
#define EM_JSON_MAX_VALUES 4000000u

typedef enum {
  EM_JSON_NULL,
  EM_JSON_BOOL,
  EM_JSON_NUMBER,
  EM_JSON_STRING,
  EM_JSON_ARRAY,
  EM_JSON_OBJECT,
} em_json_type_t;

typedef struct em_json em_json_t;
struct em_json {
  em_json_type_t type;
  bool boolean;
  double number;
  char *string;    /* STRING: NUL-terminated UTF-8 (an embedded \u0000 ends it early). */
  em_json_t *item; /* ARRAY, OBJECT: n items, heap. */
  char **key;      /* OBJECT: n keys, heap. */
  size_t n;
};

/* Parses text[0..len). Returns 0 with *out set, or -EINVAL with "why at byte N" in err, or
 * -ENOMEM. */
int em_json_parse(const char *text, size_t len, em_json_t **out, char *err, size_t err_cap);

void em_json_free(em_json_t *v); /* NULL is a no-op. */

/* The member `key` of an object, or NULL (also when v is not an object). */
const em_json_t *em_json_get(const em_json_t *v, const char *key);

/* The member as a finite number / string / array; false (out untouched) when absent or of
 * another type. */
bool em_json_number(const em_json_t *obj, const char *key, double *out);
const char *em_json_string(const em_json_t *obj, const char *key);
const em_json_t *em_json_array(const em_json_t *obj, const char *key);

#endif /* EM_CLI_JSON_READ_H */
