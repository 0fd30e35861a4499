/*
 * fields.h - internal: map decoding from tables. Every map of the schema (a message's top level,
 * a metric definition, a budget, a stage window, a model identity, a trigger, a truncation
 * note) is described by rows, one per key: the key, how its value is read (type, bounds, string
 * class), where it goes (an offset into the caller's struct) and whether the map must carry it.
 * One walker (em__read_map) reads any such map with the rules every decoder shares: unsigned
 * keys, each once, unknown keys skipped after a well-formedness check, required keys checked at
 * the map's start. Owns nothing; the tables are static and const; reentrant. Not installed.
 */
#ifndef EDGEMON_PROTO_FIELDS_H
#define EDGEMON_PROTO_FIELDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cbor_read.h"

/* How a row's value is read and stored. */
typedef enum {
  EM__F_UINT,   /* Unsigned in lo..hi (ERANGE outside) into an unsigned or enum of `size` bytes. */
  EM__F_INT,    /* Signed in lo..(int64_t)hi into an int32_t or int64_t (`size` bytes). */
  EM__F_BOOL,   /* true or false into a bool. */
  EM__F_STR,    /* Text of class `cls`, 1..hi bytes, copied to scratch: a const char *. */
  EM__F_VALUE,  /* A finite number (never null) into an em_value_t. */
  EM__F_MAP,    /* A nested map read by the rows of `sub` into the struct at `offset`. */
  EM__F_LATER,  /* Checked and skipped now; where it starts and ends into an em__later_t. */
  EM__F_LIST,   /* An array of at most hi elements read by `elem` into scratch: a pointer at
                 * `offset`, the count (size_t) at `count_offset`. */
  EM__F_STAGES, /* A stage table of at most hi names (em__read_stage_table), pointer and count
                 * placed as for EM__F_LIST. */
  EM__F_FN,     /* Read by `fn`, which finds its place from the row (offset, arg, hi). */
} em__field_type_t;

typedef struct em__field em__field_t;
typedef struct em__fields em__fields_t;

/* Reads one value for row `f` into the struct at `base`. */
typedef int (*em__field_fn)(em__dec_t *d, const em__field_t *f, void *base);

struct em__field {
  uint8_t key;   /* The map key (< 64). */
  uint8_t type;  /* em__field_type_t. */
  uint8_t size;  /* EM__F_UINT, EM__F_INT: bytes of the destination (1, 2, 4 or 8). */
  uint8_t cls;   /* EM__F_STR: em_str_class_t. */
  bool required; /* The map must carry the key (EMISSING at the map's start). */
  size_t offset; /* Of the destination in the struct the map is read into. */
  int64_t lo;    /* EM__F_UINT, EM__F_INT: the smallest value allowed. */
  uint64_t
      hi; /* EM__F_UINT, EM__F_INT: the largest; EM__F_STR: most bytes; LIST/STAGES: most items. */
  const em__fields_t *sub; /* EM__F_MAP: the nested map's rows. */
  em__field_fn fn;         /* EM__F_FN: its reader. */
  em__elem_fn elem;        /* EM__F_LIST: reads one element. */
  size_t elem_size;        /* EM__F_LIST: bytes of one element. */
  size_t count_offset;     /* EM__F_LIST, EM__F_STAGES: of the element count. */
  const void *arg;         /* EM__F_FN: anything the reader needs beside the row. */
};

/* A table: the rows of one map. */
struct em__fields {
  const em__field_t *rows;
  size_t n;
};

/* Where an EM__F_LATER value lies in the input, for a second pass (em__reread). */
typedef struct {
  size_t at;  /* Its first byte. */
  size_t end; /* One past its last byte. */
} em__later_t;

#define EM__TABLE(rows)                                                                            \
  { (rows), sizeof(rows) / sizeof((rows)[0]) }
#define EM__SIZE_OF(T, m) sizeof(((T *)0)->m)

/* Row makers: T is the struct the map is read into, m the member, req REQ or OPT. */
#define REQ true
#define OPT false
#define EM__UINT(k, T, m, lo_, hi_, req)                                                           \
  {                                                                                                \
    .key = (k), .type = EM__F_UINT, .size = EM__SIZE_OF(T, m), .required = (req),                  \
    .offset = offsetof(T, m), .lo = (lo_), .hi = (hi_)                                             \
  }
#define EM__INT(k, T, m, lo_, hi_, req)                                                            \
  {                                                                                                \
    .key = (k), .type = EM__F_INT, .size = EM__SIZE_OF(T, m), .required = (req),                   \
    .offset = offsetof(T, m), .lo = (lo_), .hi = (uint64_t)(hi_)                                   \
  }
#define EM__U64(k, T, m, req) EM__UINT(k, T, m, 0, UINT64_MAX, req)
#define EM__BOOL(k, T, m, req)                                                                     \
  { .key = (k), .type = EM__F_BOOL, .required = (req), .offset = offsetof(T, m) }
#define EM__STR(k, T, m, cls_, max, req)                                                           \
  {                                                                                                \
    .key = (k), .type = EM__F_STR, .cls = (cls_), .required = (req), .offset = offsetof(T, m),     \
    .hi = (max)                                                                                    \
  }
#define EM__VALUE(k, T, m, req)                                                                    \
  { .key = (k), .type = EM__F_VALUE, .required = (req), .offset = offsetof(T, m) }
#define EM__MAP(k, T, m, table, req)                                                               \
  { .key = (k), .type = EM__F_MAP, .required = (req), .offset = offsetof(T, m), .sub = (table) }
#define EM__LATER(k, T, m, req)                                                                    \
  { .key = (k), .type = EM__F_LATER, .required = (req), .offset = offsetof(T, m) }
#define EM__FN(k, T, m, fn_, arg_, req)                                                            \
  {                                                                                                \
    .key = (k), .type = EM__F_FN, .required = (req), .offset = offsetof(T, m), .fn = (fn_),        \
    .arg = (arg_)                                                                                  \
  }

#define EM__LIST(k, T, m, n_m, E, elem_fn, max, req)                                               \
  {                                                                                                \
    .key = (k), .type = EM__F_LIST, .required = (req), .offset = offsetof(T, m), .hi = (max),      \
    .elem = (elem_fn), .elem_size = sizeof(E), .count_offset = offsetof(T, n_m)                    \
  }
#define EM__STAGES(k, T, m, n_m, max, req)                                                         \
  {                                                                                                \
    .key = (k), .type = EM__F_STAGES, .required = (req), .offset = offsetof(T, m), .hi = (max),    \
    .count_offset = offsetof(T, n_m)                                                               \
  }

/*
 * The five cause rows (em_cause_key_t order: rule, stage, measured value, bound, reason) under
 * keys k0..k0+4, as a state message and a trigger carry them; all optional.
 */
#define EM__CAUSE_ROWS(k0, T)                                                                      \
  EM__STR((k0) + CAUSE_RULE, T, rule, STR_NAME, EM_PROTO_MAX_NAME_BYTES, OPT),                     \
      EM__STR((k0) + CAUSE_STAGE, T, stage, STR_IDENT, EM_PROTO_MAX_STAGE_BYTES, OPT),             \
      EM__VALUE((k0) + CAUSE_VALUE, T, value, OPT), EM__VALUE((k0) + CAUSE_BOUND, T, bound, OPT),  \
      EM__STR((k0) + CAUSE_REASON, T, reason, STR_TEXT, EM_PROTO_MAX_TEXT_BYTES, OPT)

/* Map-key bits (1 << key) of the rows of `t` the map must carry. */
uint64_t em__fields_required(const em__fields_t *t);

/* The value of `key` by its row in `t` into `base`; skipped (checked) when `t` has no row. */
int em__read_field(em__dec_t *d, const em__fields_t *t, uint64_t key, void *base);

/*
 * A whole map (at most 64 entries) read by `t` into `base`: each key once, unknown keys
 * skipped, then the required keys checked (EMISSING reported at the map's start). *seen, when
 * not NULL, gets the bitmap of the keys read, for checks between fields.
 */
int em__read_map(em__dec_t *d, const em__fields_t *t, void *base, uint64_t *seen);

/*
 * The rest of a top-level map of n entries whose version and kind are read (em__read_start):
 * the head fields of `kind` into *head, every other key by `t` into `base`, then the head's
 * keys and the required rows checked. Leaves d->pos after the map.
 */
int em__read_rest(em__dec_t *d, uint64_t n, uint64_t seen, em_msg_kind_t kind, em_msg_head_t *head,
                  const em__fields_t *t, void *base);

/*
 * The top-level map of a message of kind `kind` (a flight recording, a profile): its start
 * (em__read_start; EKIND for another kind), then em__read_rest with `t` into `base`.
 */
int em__read_top(em__dec_t *d, em_msg_kind_t kind, em_msg_head_t *head, const em__fields_t *t,
                 void *base);

/*
 * A trigger map (flight key 5, profile key 5) into *t: cause (0..1) and level required,
 * prev_level EM_LEVEL_NONE when absent; the measured value and bound (keys 5, 6) read only
 * when `numbers`, else skipped like unknown keys.
 */
int em__read_trigger(em__dec_t *d, bool numbers, em_trigger_t *t);

/*
 * The encoder's side of the same rules: each text row of `t` (EM__F_STR) checked on the struct
 * at `base` in row order, a NULL optional text skipped; the first failure's code
 * (EM_PROTO_ESTRING), else 0.
 */
int em__check_strs(const em__fields_t *t, const void *base);

/* The v1 maps the encoder checks by the decoder's rows (decode.c). */
extern const em__fields_t em__metric_fields, em__budget_fields, em__birth_fields;

/* A reader for EM__F_FN rows: a model identity (em__read_model's rules) at the row's offset. */
int em__field_model(em__dec_t *d, const em__field_t *f, void *base);

#endif /* EDGEMON_PROTO_FIELDS_H */
