/*
 * tmp_dir.h - a fresh mkdtemp(3) directory under /tmp for one unit test's files, and the path
 * of the file the test puts in it (a socket, a spool, a database, a script).
 *
 * Header-only (static inline), for cmocka tests: include it after <cmocka.h>; a path that does
 * not fit, or a directory that cannot be made, fails the test. Owns nothing: the caller holds
 * both buffers and removes the directory.
 */
#ifndef EDGEMON_TESTS_TMP_DIR_H
#define EDGEMON_TESTS_TMP_DIR_H

#include <stdio.h>
#include <stdlib.h>

/*
 * Makes /tmp/<prefix>-XXXXXX into dir[0..dir_bytes) and writes dir/<name> into
 * path[0..path_bytes).
 */
static inline void em_tmp_dir_make(char *dir, size_t dir_bytes, const char *prefix, char *path,
                                   size_t path_bytes, const char *name) {
  int n = snprintf(dir, dir_bytes, "/tmp/%s-XXXXXX", prefix);
  assert_true(n > 0 && (size_t)n < dir_bytes);
  assert_non_null(mkdtemp(dir));
  n = snprintf(path, path_bytes, "%s/%s", dir, name);
  assert_true(n > 0 && (size_t)n < path_bytes);
}

#endif /* EDGEMON_TESTS_TMP_DIR_H */
