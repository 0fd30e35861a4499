/*
 * log_capture.h - what a module logs (the agent's log writes to stderr), captured in a
 * temporary file between log_capture_start() and log_capture_end(), so a unit test can count
 * the lines a fault produced. Test code only; asserts on failure.
 */
#ifndef EDGEMON_TESTS_LOG_CAPTURE_H
#define EDGEMON_TESTS_LOG_CAPTURE_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
  FILE *file; /* Where stderr goes meanwhile. */
  int saved;  /* The stderr to restore. */
} log_capture_t;

/* Sends stderr to a temporary file. */
void log_capture_start(log_capture_t *c);

/* Restores stderr and writes what was logged, NUL-terminated and cut at cap - 1, to out. */
void log_capture_end(log_capture_t *c, char *out, size_t cap);

/* How many times `needle` occurs in `text`. */
size_t log_capture_count(const char *text, const char *needle);

#endif /* EDGEMON_TESTS_LOG_CAPTURE_H */
