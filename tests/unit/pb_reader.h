/*
 * pb_reader.h - a minimal protocol buffers wire-format reader for tests, written apart from
 * host/lib/pb.c so that the bytes an encoder writes are checked by code that does not share its
 * mistakes. Every malformed input fails the running cmocka test.
 *
 * Reads views into a caller-owned buffer (no allocation); nothing here is for untrusted input
 * outside tests.
 */
#ifndef EM_TEST_PB_READER_H
#define EM_TEST_PB_READER_H

#include <stddef.h>
#include <stdint.h>

/* The bytes left to read: [p, end). */
typedef struct {
  const uint8_t *p, *end;
} rd_t;

/* One field: number, wire type, varint or fixed64 bits in u, a length-delimited body in sub. */
typedef struct {
  uint32_t field, wire;
  uint64_t u;
  rd_t sub;
} fld_t;

uint64_t rd_varint(rd_t *r);

/* Reads the next field into *f; 0 at the end. */
int rd_next(rd_t *r, fld_t *f);

/* The double of a fixed64 field. */
double as_double(const fld_t *f);

/* The sint64 of a zigzag varint. */
int64_t unzigzag(uint64_t u);

/* Whether a length-delimited field holds exactly the string s. */
int str_is(const fld_t *f, const char *s);

/* The next varint-length-delimited message of a stream. */
rd_t next_family(rd_t *stream);

#endif /* EM_TEST_PB_READER_H */
