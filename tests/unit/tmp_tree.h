/*
 * tmp_tree.h - small sysfs/procfs trees for unit tests, built in a mkdtemp(3) directory under
 * /tmp: make one, put files in it (parent directories made on the way), remove it whole. For
 * what the recorded fixtures under tests/fixtures/ cannot show (garbage, a broken layout).
 *
 * Header-only (static inline), for cmocka tests: a failure to create a file fails the test.
 * Include it after <cmocka.h>. Owns nothing: the caller holds the root path (64 bytes).
 */
#ifndef EDGEMON_TESTS_TMP_TREE_H
#define EDGEMON_TESTS_TMP_TREE_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define EM_TMP_TREE_ROOT_BYTES 64

/* Makes /tmp/<prefix>-XXXXXX into root (EM_TMP_TREE_ROOT_BYTES); fails the test on error. */
static inline void em_tmp_tree_make(char *root, const char *prefix) {
  snprintf(root, EM_TMP_TREE_ROOT_BYTES, "/tmp/%.40s-XXXXXX", prefix);
  assert_non_null(mkdtemp(root));
}

/* Writes `text` to root/rel (truncating: open fds see the new text), making directories. */
static inline void em_tmp_tree_put(const char *root, const char *rel, const char *text) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", root, rel);
  for (char *p = path + strlen(root) + 1; *p != '\0'; p++) {
    if (*p == '/') {
      *p = '\0';
      (void)mkdir(path, 0755);
      *p = '/';
    }
  }
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
}

static inline int em_tmp_tree_rm_one(const char *path, const struct stat *st, int flag,
                                     struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

/* Removes the tree and everything in it (symbolic links are not followed). Returns 0, or -1
 * when the tree or something in it could not be removed. */
static inline int em_tmp_tree_remove(const char *root) {
  return nftw(root, em_tmp_tree_rm_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

#endif /* EDGEMON_TESTS_TMP_TREE_H */
