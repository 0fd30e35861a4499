/*
 * cbor_read.h - internal: the strict CBOR reader every decoder of proto/ shares (decode.c for
 * the v1 messages, flight.c for the flight recording). A pull parser over proto's own head
 * reader (cbor_head.h) that reads one item head (or one whole definite string) at a time,
 * with typed readers on top that enforce the schema's general rules (definite lengths, counts
 * checked against the bytes left, depth limit, unsigned keys without duplicates, finite
 * floats, string classes) and a bump allocator over the caller's scratch. Not installed.
 */
#ifndef EDGEMON_PROTO_CBOR_READ_H
#define EDGEMON_PROTO_CBOR_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "schema.h"

typedef enum {
  T_UINT,
  T_NEGINT,
  T_BYTES,
  T_TEXT,
  T_ARRAY,
  T_MAP,
  T_TAG,
  T_FLOAT,
  T_BOOL,
  T_NULL,
  T_UNDEF,
  T_SIMPLE, /* A simple value the schema has no use for (0..19, 32..255): u is its number. */
  T_INDEF,
  T_BREAK
} em__tok_type_t;

typedef struct {
  em__tok_type_t type;
  uint64_t u; /* T_UINT value, T_NEGINT n (value is -1-n), T_ARRAY/T_MAP count, T_TAG, T_SIMPLE. */
  double f;   /* T_FLOAT */
  bool b;     /* T_BOOL */
  const uint8_t *str; /* T_BYTES / T_TEXT, inside the input. */
  size_t str_len;
} em__tok_t;

typedef struct {
  const uint8_t *buf;
  size_t len;
  size_t pos;      /* Next byte to read. */
  size_t item_pos; /* Start of the item being checked: the offset reported on failure. */
  unsigned depth;  /* Open arrays and maps around the next item. */
  uint8_t *scratch;
  size_t scratch_len;
  size_t scratch_used;
} em__dec_t;

#define BIT(k) (UINT64_C(1) << (k))

/*
 * Reads the next item head into *t. Returns 0, EM_PROTO_ETRUNCATED, EM_PROTO_EMALFORMED or
 * EM_PROTO_EINDEFINITE. Containers are checked against the bytes left: each element needs
 * at least one byte, so a larger count means the message is truncated.
 */
int em__next(em__dec_t *d, em__tok_t *t);

/*
 * The scratch a decoder needs for len bytes of a kind capped at max_len: per_byte bytes per
 * input byte (len counted up to the cap) and 256 for alignment and the few fixed strings.
 */
size_t em__scratch_for(size_t len, size_t max_len, size_t per_byte);

/* `size` bytes of scratch, 8-aligned, or NULL when it is used up. */
void *em__scratch_alloc(em__dec_t *d, size_t size);

/* Enters an array or map (EM_PROTO_EDEPTH past EM_PROTO_MAX_DEPTH); leaves it. */
int em__enter(em__dec_t *d);
void em__leave(em__dec_t *d);

/* Skips one item of any type (an unknown key's value), with its children, checking them. */
int em__skip(em__dec_t *d);

/* Typed readers: ETYPE for another type, ERANGE outside the bounds. */
int em__read_uint(em__dec_t *d, uint64_t max, uint64_t *out);
int em__read_int(em__dec_t *d, int64_t min, int64_t max, int64_t *out);
int em__read_bool(em__dec_t *d, bool *out);
/* A text string of the given class, copied NUL-terminated into scratch. */
int em__read_str(em__dec_t *d, em_str_class_t cls, size_t max, const char **out);
/* A number (finite), or null when `allow_null`. */
int em__read_value(em__dec_t *d, bool allow_null, em_value_t *out);

/* Reads a container head of the given type and enters it; *n is its element count. */
int em__open_container(em__dec_t *d, em__tok_type_t type, uint64_t max_items, uint64_t *n);

/*
 * Reads the next map key: an unsigned integer, not seen before in this map when < 64
 * (`seen` is the bitmap of keys so far). Returns the key in *key.
 */
int em__read_key(em__dec_t *d, uint64_t *seen, uint64_t *key);

/* Checks that every key in `required` is in `seen`; reports at the map's start. */
int em__require(em__dec_t *d, size_t map_pos, uint64_t seen, uint64_t required);

/*
 * Opens an array or map (`type`) of at most `max` items (a map's items are its pairs) that come in
 * groups of `group` (an item count that is not a multiple: EINCONSISTENT) and claims scratch for
 * one element of `elem_size` bytes per group (ESCRATCH). *n is the number of groups, *elems the
 * elements.
 */
int em__open_list(em__dec_t *d, em__tok_type_t type, uint64_t max, unsigned group, size_t elem_size,
                  uint64_t *n, void **elems);

/*
 * Ends a list that em__open_list opened: on rc == 0 leaves the container and stores the
 * elements (a pointer, written to *(void **)out) and their count; otherwise returns rc as is.
 */
int em__close_list(em__dec_t *d, int rc, void *elems, uint64_t n, void *out, size_t *n_out);

/*
 * Sorts n elements of `size` bytes with `cmp` and reports EDUPLICATE at `at` when two compare
 * equal: the decoders' maps keyed by something other than small unsigned keys.
 */
int em__sort_unique(em__dec_t *d, size_t at, void *elems, size_t n, size_t size,
                    int (*cmp)(const void *, const void *));

/* Reads one element of an array into `elem` (typed by the caller). */
typedef int (*em__elem_fn)(em__dec_t *d, void *elem);

/*
 * An array of at most `max` elements of `elem_size` bytes, each read by `fn` into scratch.
 * On success *out points at the elements and *n_out is their count.
 */
int em__read_array(em__dec_t *d, uint64_t max, size_t elem_size, em__elem_fn fn, void **out,
                   size_t *n_out);

/* Reads a whole message (or part of one) into `out`. */
typedef int (*em__message_fn)(em__dec_t *d, void *out);

/*
 * A table of at most `max` stage names (valid stage-names, unique: EDUPLICATE at the table
 * otherwise), as a flight recording and a profile carry it.
 */
int em__read_stage_table(em__dec_t *d, size_t max, const char *const **out, size_t *n_out);

/*
 * A second pass over the item at `at` inside the top-level map (depth 1), once the tables it
 * refers to are known: runs fn(d, ctx) there, then puts d back after the map.
 */
int em__reread(em__dec_t *d, size_t at, em__message_fn fn, void *ctx);

/*
 * Decodes one whole message of at most max_len bytes occupying buf[0..len) with `fn` into
 * `out` (out_size bytes, zeroed first and again on failure): the checks of the arguments, the
 * size, the trailing bytes and the error offset that em_proto_decode() and em_flight_decode()
 * share.
 */
int em__decode_whole(const uint8_t *buf, size_t len, size_t max_len, em__message_fn fn, void *out,
                     size_t out_size, void *scratch, size_t scratch_len, size_t *error_offset);

/*
 * The start of a top-level message: a map of *n entries (at least 2, at most 64) whose first
 * keys are version (EM_PROTO_VERSION, else EVERSION) and kind, in that order (EMISSING
 * otherwise). Leaves the map open; *kind is the kind's value as read, *seen the keys so far.
 */
int em__read_start(em__dec_t *d, uint64_t *n, uint64_t *seen, uint64_t *kind);

#endif /* EDGEMON_PROTO_CBOR_READ_H */
