/*
 * wire_vectors.h - the rows of the board-local wire golden vectors (proto/vectors/wire): span
 * datagrams, level pushes, the state page and model datagrams. Shared by the generator
 * (em-gen-wire-vectors) and tests/unit/test_wire.c, so the committed files, the packers and the
 * unpackers are checked against the same rows, and the reader of the committed .bin files both
 * tests use. Constant data; nothing to free.
 */
#ifndef EDGEMON_TEST_WIRE_VECTORS_H
#define EDGEMON_TEST_WIRE_VECTORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "edgemon/wire.h"

typedef struct {
  const char *name; /* File stem: <name>.bin and <name>.json */
  em_span_t span;
} em_wire_span_vector_t;

typedef struct {
  const char *name; /* File stem: <name>.bin and <name>.json */
  em_state_record_t rec;
  uint32_t agent_pid;
  bool is_page; /* false: a level push datagram; true: a state page after one write (seq 2). */
} em_wire_state_vector_t;

typedef struct {
  const char *name; /* File stem: <name>.bin and <name>.json */
  em_model_t model; /* Labels in ascending key order, as the packer requires. */
  uint32_t pid;
  uint32_t generation;
} em_wire_model_vector_t;

extern const em_wire_span_vector_t em_wire_span_vectors[];
extern const size_t em_wire_span_vector_count;
extern const em_wire_state_vector_t em_wire_state_vectors[];
extern const size_t em_wire_state_vector_count;
extern const em_wire_model_vector_t em_wire_model_vectors[];
extern const size_t em_wire_model_vector_count;

/*
 * Reads DIR/wire/<name>.bin (DIR is proto/vectors) into buf[0..cap) and its length into *len.
 * Returns 0, -EFBIG when the file is longer than cap (buf then unchanged), or the -errno of
 * the failed open or read.
 */
int em_wire_vector_read(const char *dir, const char *name, uint8_t *buf, size_t cap, size_t *len);

#endif /* EDGEMON_TEST_WIRE_VECTORS_H */
