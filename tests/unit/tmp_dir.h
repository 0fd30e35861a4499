/*
 * tmp_dir.h - a fresh mkdtemp(3) directory under /tmp for one unit test's files, and the path
 * of the file the test puts in it (a socket, a spool, a database, a script).
 *
 * Header-only (static inline), for cmocka tests: include it after <cmocka.h>; a path that does
 * not fit, or a directory that cannot be made, fails the test. em_tmp_dir_make owns nothing: the
 * caller holds both buffers and removes the directory. em_tmp_file_setup/_teardown are a cmocka
 * fixture for a test that needs one such file: the setup allocates the em_tmp_file_t it puts in
 * *state, the teardown removes the file and the directory and frees it.
 */
#ifndef EDGEMON_TESTS_TMP_DIR_H
#define EDGEMON_TESTS_TMP_DIR_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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

/* One test's directory and the file in it, as em_tmp_dir_make writes them. */
typedef struct {
  char dir[256];
  char path[300];
} em_tmp_file_t;

/* cmocka setup: a fresh /tmp/<prefix>-XXXXXX holding the path of <name> (not created). */
static inline int em_tmp_file_setup(void **state, const char *prefix, const char *name) {
  em_tmp_file_t *t = calloc(1, sizeof(*t));
  assert_non_null(t);
  em_tmp_dir_make(t->dir, sizeof(t->dir), prefix, t->path, sizeof(t->path), name);
  *state = t;
  return 0;
}

/* cmocka teardown: removes the file, then the directory (which the test left empty). */
static inline int em_tmp_file_teardown(void **state) {
  em_tmp_file_t *t = *state;
  unlink(t->path);
  rmdir(t->dir);
  free(t);
  return 0;
}

#endif /* EDGEMON_TESTS_TMP_DIR_H */
