/*
 * wire_file.c - reads the committed wire golden vectors for a cmocka test (wire_file.h). Needs
 * EM_VECTORS_DIR, the absolute path of proto/vectors, which tests/CMakeLists.txt defines for
 * every test. Holds no state.
 */
#include "wire_file.h"

#include <stdarg.h>
#include <setjmp.h>
#include <cmocka.h>

#include "wire_vectors.h"

#ifndef EM_VECTORS_DIR
#error "EM_VECTORS_DIR (absolute path of proto/vectors) must be defined"
#endif

size_t wire_file_read(const char *name, uint8_t *buf, size_t cap) {
  size_t len = 0;
  int rc = em_wire_vector_read(EM_VECTORS_DIR, name, buf, cap, &len);
  if (rc != 0) {
    fail_msg("cannot read wire vector %s: %d", name, rc);
  }
  return len;
}
