/*
 * cbor_head.h - internal: the CBOR item head (RFC 8949 section 3), read and written by proto's
 * own code. A head is one initial byte (major type in the high 3 bits, additional information
 * in the low 5) and an argument of 0, 1, 2, 4 or 8 big-endian bytes. The reader checks
 * well-formedness of the head alone (RFC 8949 appendix F); what the schema makes of it
 * (indefinite lengths, strings, counts, simple values) is the pull parser's (cbor_read.c).
 * Both directions work on caller memory only: no allocation, no state, reentrant. Not
 * installed.
 */
#ifndef EDGEMON_PROTO_CBOR_HEAD_H
#define EDGEMON_PROTO_CBOR_HEAD_H

#include <stddef.h>
#include <stdint.h>

/* Major types (RFC 8949 section 3.1). */
enum {
  EM_CBOR_UINT = 0,
  EM_CBOR_NEGINT = 1, /* The value is -1 - argument. */
  EM_CBOR_BYTES = 2,
  EM_CBOR_TEXT = 3,
  EM_CBOR_ARRAY = 4,
  EM_CBOR_MAP = 5,
  EM_CBOR_TAG = 6,
  EM_CBOR_SIMPLE = 7 /* Simple values, floats and the break stop code. */
};

/* Additional information with a meaning of its own (RFC 8949 sections 3 and 3.3). */
enum {
  EM_CBOR_AI_1BYTE = 24, /* 24..27: the argument follows in 1, 2, 4 or 8 bytes. */
  EM_CBOR_AI_8BYTES = 27,
  EM_CBOR_AI_INDEFINITE = 31, /* Major types 2-5: indefinite length; major type 7: break. */
  EM_CBOR_FALSE = 20,         /* Major type 7, additional information 20..23. */
  EM_CBOR_TRUE = 21,
  EM_CBOR_NULL = 22,
  EM_CBOR_UNDEFINED = 23,
  EM_CBOR_FLOAT16 = 25, /* Major type 7: the argument holds an IEEE 754 binary16. */
  EM_CBOR_FLOAT32 = 26,
  EM_CBOR_FLOAT64 = 27
};

/* The longest head: the initial byte and an 8-byte argument. */
#define EM_CBOR_HEAD_MAX 9u

typedef struct {
  uint8_t major; /* 0..7 */
  uint8_t info;  /* Additional information, 0..27 or 31 (never 28..30). */
  uint8_t len;   /* Bytes of the head: 1, 2, 3, 5 or 9. */
  uint64_t arg;  /* The argument: 0..23 for info below 24, the bytes that follow for 24..27
                  * (a float's bit pattern for major 7), 0 for info 31. */
} em__head_t;

/*
 * Reads the head at p[0..left) into *h (p may be NULL when left is 0). Returns 0, or:
 * EM_PROTO_ETRUNCATED when left is 0 or the argument's bytes run past the end;
 * EM_PROTO_EMALFORMED when the head is not well-formed: additional information 28..30 (any
 * major type), 31 with major type 0, 1 or 6, and a one-byte simple value below 32 (0xf8 0x00
 * .. 0xf8 0x1f, RFC 8949 section 3.3). *h is written only on success. Lengths and counts are
 * the caller's to check against what follows.
 */
int em__head_read(const uint8_t *p, size_t left, em__head_t *h);

/*
 * Writes the shortest head of major type `major` (0..7) with argument `arg` into out and
 * returns its size (1, 2, 3, 5 or 9): the preferred serialization of RFC 8949 section 4.2.1.
 */
size_t em__head_write(uint8_t out[EM_CBOR_HEAD_MAX], unsigned major, uint64_t arg);

/*
 * Writes a head of major type `major` whose argument takes exactly `bytes` bytes (1, 2, 4 or
 * 8; 4 and 8 for a float's bits) into out and returns its size, 1 + bytes.
 */
size_t em__head_write_fixed(uint8_t out[EM_CBOR_HEAD_MAX], unsigned major, unsigned bytes,
                            uint64_t arg);

/*
 * The value of a float head (major type 7, info 25, 26 or 27) as a double: binary16 and
 * binary32 widen exactly, NaN payloads and signs kept.
 */
double em__head_float(const em__head_t *h);

#endif /* EDGEMON_PROTO_CBOR_HEAD_H */
