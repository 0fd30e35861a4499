/*
 * wire_file.h - the committed board-local wire golden vectors (proto/vectors/wire/<name>.bin)
 * as the cmocka tests of the wire formats read them (test_wire, test_ring): through
 * em_wire_vector_read() (tests/tools/wire_vectors.h), failing the running test when a file is
 * missing, unreadable or longer than the caller's buffer. Owns nothing; the caller's buffer
 * holds the bytes.
 */
#ifndef EDGEMON_TESTS_UNIT_WIRE_FILE_H
#define EDGEMON_TESTS_UNIT_WIRE_FILE_H

#include <stddef.h>
#include <stdint.h>

/* Reads proto/vectors/wire/<name>.bin into buf[0..cap); returns its length. A file that is
 * missing or longer than cap fails the test. */
size_t wire_file_read(const char *name, uint8_t *buf, size_t cap);

#endif /* EDGEMON_TESTS_UNIT_WIRE_FILE_H */
