/*
 * log_capture.c - see log_capture.h.
 */
#define _POSIX_C_SOURCE 200809L /* fileno, dup2 under -std=c11. */

#include "log_capture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>
#include <unistd.h>

void log_capture_start(log_capture_t *c) {
  fflush(stderr);
  c->file = tmpfile();
  assert_non_null(c->file);
  c->saved = dup(STDERR_FILENO);
  assert_true(c->saved >= 0);
  assert_true(dup2(fileno(c->file), STDERR_FILENO) >= 0);
}

void log_capture_end(log_capture_t *c, char *out, size_t cap) {
  fflush(stderr);
  assert_true(dup2(c->saved, STDERR_FILENO) >= 0);
  close(c->saved);
  rewind(c->file);
  size_t n = fread(out, 1, cap - 1, c->file);
  out[n] = '\0';
  fclose(c->file);
}

size_t log_capture_count(const char *text, const char *needle) {
  size_t n = 0;
  for (const char *at = strstr(text, needle); at != NULL; at = strstr(at + 1, needle)) {
    n++;
  }
  return n;
}
