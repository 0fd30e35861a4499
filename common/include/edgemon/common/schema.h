/*
 * edgemon/common/schema.h - declarative config schemas: one row per key of an INI file (its
 * section, name, type, the field it fills, range, default, flags and a one-line example and
 * description), and the table-driven work every config reader of edgemon does with them:
 * storing a value through the row's type (parse.h's grammars, one message wording for every
 * program), filling defaults, finding a key, suggesting the closest name for a misspelt one,
 * finding the first non-reloadable key whose value differs between two configs, and listing
 * the keys for documentation.
 *
 * A row's field is `size` bytes at `offset` in the caller's struct (offsetof). Keys whose value
 * needs more than its type (a broker URL, a list of users, a [target] kind) name a `set`
 * function, which validates and stores the value itself and reports through the caller's
 * context; the row still documents the key and takes part in lookups and suggestions.
 *
 * A row carries everything about its key, so adding a key is adding a row: its default (`def`,
 * or a `compute` hook for one known only where the program runs), whether a reload applies it
 * (EM_SCHEMA_RELOAD) and then which of the caller's apply steps a change makes due (`apply`, a
 * bit set of the caller's groups; em_schema_adopt() copies the changed rows and returns them),
 * and, for a program whose keys are also command-line flags, its flag (EM_SCHEMA_FLAG: --name
 * with '-' for '_') and the word its usage shows for the value (`arg`).
 *
 * Owns: nothing; tables are the caller's (static const), no global state, nothing allocates.
 * The header compiles on its own, as C11 and as C++.
 */
#ifndef EDGEMON_COMMON_SCHEMA_H
#define EDGEMON_COMMON_SCHEMA_H

#include "edgemon/common/parse.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EM_SCHEMA_MSG_MAX  512      /* Longest message em_schema_set() writes. */
#define EM_SCHEMA_NO_FIELD SIZE_MAX /* offset of a row that fills no field of its own. */

typedef enum {
  EM_SCHEMA_CUSTOM = 0, /* Only the row's set function knows the value. */
  EM_SCHEMA_DURATION,   /* uint64_t ns in [min, max] (with EM_SCHEMA_SECONDS: whole seconds in
                           a uint32_t or uint64_t field). */
  EM_SCHEMA_SIZE,       /* uint64_t bytes in [min, max]. */
  EM_SCHEMA_BOOL,       /* bool: true/yes/on/1, false/no/off/0. */
  EM_SCHEMA_INT,        /* A whole number in [min, max], into an unsigned field of 1, 2, 4 or 8
                           bytes (an int field holds it too). */
  EM_SCHEMA_ENUM,       /* One name of `choices`; its value into an int-sized field (or bool). */
  EM_SCHEMA_STRING,     /* Printable text into char[size]. */
  EM_SCHEMA_PATH,       /* An absolute path into char[size]. */
  EM_SCHEMA_ID,         /* 1..size-1 characters of [A-Za-z0-9_.:-] into char[size]. */
  EM_SCHEMA_LIST,       /* A comma list; always with a set function (documentation type). */
} em_schema_type_t;

/* Row flags. */
#define EM_SCHEMA_RELOAD  0x01u /* A reload (SIGHUP) applies a new value. */
#define EM_SCHEMA_SECRET  0x02u /* Never quoted in a message. */
#define EM_SCHEMA_OFF     0x04u /* "off" stores 0 (DURATION, INT) or the word "off" (PATH). */
#define EM_SCHEMA_ZERO    0x08u /* DURATION: a bare "0" stores 0 (off). */
#define EM_SCHEMA_SECONDS 0x10u /* DURATION: the field counts seconds. */
#define EM_SCHEMA_WHOLE   0x20u /* With SECONDS: fractions of a second are refused. */
#define EM_SCHEMA_FLAG    0x40u /* Also the command-line flag --name ('-' for '_'). */

typedef struct em_schema_key em_schema_key_t;

/*
 * A row's own setter: validates `value` (non-empty, no control characters), stores it in
 * `obj` (or wherever the caller's context says) and reports problems through `ctx`. Returns 0
 * when the value was stored, -EINVAL after reporting.
 */
typedef int (*em_schema_set_fn)(void *ctx, const em_schema_key_t *k, void *obj, const char *value);

/* A row's own comparison for em_schema_first_change(): true when a and b hold the same value. */
typedef bool (*em_schema_same_fn)(const void *a, const void *b);

/*
 * A row's computed default, for a value known only where the program runs (a host name, an
 * environment variable) or one that follows an earlier row's: stores it in obj. Rows are
 * defaulted in table order, so it may read the rows above it.
 */
typedef void (*em_schema_default_fn)(const em_schema_key_t *k, void *obj);

/*
 * A row's own copy for em_schema_adopt(), for a value spread over several fields or held
 * outside the row's field: copies it from `next` into `running`.
 */
typedef void (*em_schema_copy_fn)(void *running, const void *next);

struct em_schema_key {
  const char *section;            /* "agent"; a pattern such as "budget.<stage>" is text too. */
  const char *name;               /* "sample_period" */
  em_schema_type_t type;          /* How the value reads (and, without `set`, is stored). */
  size_t offset;                  /* offsetof() the field, or EM_SCHEMA_NO_FIELD. */
  size_t size;                    /* sizeof the field; 0 with EM_SCHEMA_NO_FIELD. */
  uint64_t min;                   /* DURATION (ns), SIZE (bytes), INT: the accepted range; */
  uint64_t max;                   /* Text types: its length. min = max = 0: no range. */
  uint64_t bare_unit;             /* DURATION, SIZE: what a bare number counts (0: refused). */
  const char *def;                /* Default, spelt as in the file; NULL: none or computed. */
  unsigned flags;                 /* EM_SCHEMA_* above. */
  const char *example;            /* A valid value, quoted in messages ("100ms"). */
  const char *doc;                /* One line for people. */
  const em_parse_enum_t *choices; /* ENUM: the names and their values, */
  size_t n_choices;               /* in the order messages list them. */
  const char *want;               /* Replaces every generic message by "NAME 'VALUE' WANT". */
  em_schema_set_fn set;           /* NULL: stored by type. */
  em_schema_same_fn same;         /* NULL: the field's bytes (strings up to their NUL). */
  em_schema_default_fn compute;   /* A computed default (after `def`, if both). */
  em_schema_copy_fn copy;         /* RELOAD: NULL copies the field's bytes. */
  unsigned apply;                 /* RELOAD: the caller's apply steps a change makes due. */
  const char *arg;                /* FLAG: the value's word in usage ("URL"); NULL: a bool
                                     flag that takes no value. */
  int id;                         /* The caller's own key number. */
};

/*
 * Stores `value` into obj's field as row k's type says (k->set is not called). Returns 0, or
 * -EINVAL with a message in msg[0..cap) that starts with the key's name, e.g.
 * "sample_period '61s' is out of range 1ms..60s". The field is untouched on failure.
 */
int em_schema_set(const em_schema_key_t *k, void *obj, const char *value, char *msg, size_t cap);

/* Reports one problem of em_schema_apply(): a whole message without a trailing newline. */
typedef void (*em_schema_report_fn)(void *ctx, const char *msg);

/*
 * Applies one value: the row's set function when it has one (it reports through ctx itself),
 * else em_schema_set() with its message handed to report(ctx, msg). Returns 0 or -EINVAL.
 */
int em_schema_apply(const em_schema_key_t *k, void *obj, const char *value, void *ctx,
                    em_schema_report_fn report);

/*
 * Fills obj from every row's default, in table order: `def` stored by the row's type, or given
 * to its set function with `ctx` (which may report through it), then the row's `compute` hook.
 * Rows with neither are left as they are (zeroed by the caller). Returns 0, or -EINVAL when a
 * default does not parse (a table mistake; the first such row in *bad, may be NULL); the other
 * rows are still filled.
 */
int em_schema_defaults(const em_schema_key_t *table, size_t n, void *obj, void *ctx,
                       const em_schema_key_t **bad);

/*
 * A reload: copies into `running` the value in `next` of every row with EM_SCHEMA_RELOAD whose
 * value differs (its `same` function, else the field's bytes; rows with neither a field nor
 * `same` are skipped), with the row's `copy` function or the field's bytes. Returns the union
 * of the changed rows' `apply` bits: the caller's steps now due. Rows without EM_SCHEMA_RELOAD
 * are left alone (em_schema_first_change() names them).
 */
unsigned em_schema_adopt(const em_schema_key_t *table, size_t n, void *running, const void *next);

/*
 * The command-line flag of a row with EM_SCHEMA_FLAG: "--" and its name with '-' for '_'
 * ("--share-group"), into buf[0..cap). Returns buf, or NULL for a row without the flag (or a
 * buffer too small).
 */
const char *em_schema_flag(const em_schema_key_t *k, char *buf, size_t cap);

/* The row with EM_SCHEMA_FLAG whose flag is `flag` ("--share-group" or "share-group"), or NULL. */
const em_schema_key_t *em_schema_find_flag(const em_schema_key_t *table, size_t n,
                                           const char *flag);

/* The row of `name` in `section`, or NULL. */
const em_schema_key_t *em_schema_find(const em_schema_key_t *table, size_t n, const char *section,
                                      const char *name);

/* The first row named `name` in any section, or NULL. */
const em_schema_key_t *em_schema_find_any(const em_schema_key_t *table, size_t n, const char *name);

/*
 * The word of words[0..n) closest to `word` (edit distance at most 2, and less than the
 * word's length), or NULL. Ties go to the first.
 */
const char *em_schema_closest(const char *word, const char *const *words, size_t n);

/* The name of `section`'s row closest to `name` (as em_schema_closest()), or NULL. */
const char *em_schema_suggest(const em_schema_key_t *table, size_t n, const char *section,
                              const char *name);

/*
 * The first row without EM_SCHEMA_RELOAD whose field differs between the structs a and b (its
 * `same` function when it has one; rows without a field are skipped), or NULL.
 */
const em_schema_key_t *em_schema_first_change(const em_schema_key_t *table, size_t n, const void *a,
                                              const void *b);

/* Formats a duration exactly in the largest unit that divides it ("100ms", "90s", "2m", "1h"). */
const char *em_schema_format_duration(char *out, size_t cap, uint64_t ns);

/* Formats a size exactly in the largest unit that divides it ("64KiB", "1GiB", "1024GiB"). */
const char *em_schema_format_size(char *out, size_t cap, uint64_t bytes);

/* The type's word for documentation: "duration", "size", "bool", "int", "enum", ... */
const char *em_schema_type_name(em_schema_type_t type);

/*
 * One line describing row k for documentation: "[section] name = EXAMPLE (TYPE, default DEF,
 * RANGE, reloadable) DOC". Returns the length it needed (as snprintf).
 */
int em_schema_describe(const em_schema_key_t *k, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* EDGEMON_COMMON_SCHEMA_H */
