/*
 * failing_alloc.c - the allocator wrappers behind failing_alloc.h. The linker sends the
 * executable's calls to malloc, calloc and realloc here (--wrap); __real_* are the allocator
 * they would have reached (libc's, or the sanitizer's). Owns three counters; single-threaded.
 */
#include "failing_alloc.h"

#include <errno.h>
#include <stddef.h>

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);

static bool armed;
static bool fail_after; /* Every allocation past the nth fails too. */
static unsigned long fail_nth;
static unsigned long seen;    /* Allocations since armed. */
static unsigned long refused; /* Of those, refused. */

void em_failing_alloc_arm(unsigned long nth, bool and_after) {
  armed = true;
  fail_nth = nth;
  fail_after = and_after;
  seen = 0;
  refused = 0;
}

unsigned long em_failing_alloc_disarm(void) {
  armed = false;
  return seen;
}

unsigned long em_failing_alloc_refused(void) {
  return refused;
}

/* True when this allocation is to fail. */
static bool refuse(void) {
  if (!armed) {
    return false;
  }
  seen++;
  if (fail_nth == 0 || seen < fail_nth || (seen > fail_nth && !fail_after)) {
    return false;
  }
  refused++;
  errno = ENOMEM;
  return true;
}

void *__wrap_malloc(size_t size) {
  return refuse() ? NULL : __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size) {
  return refuse() ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size) {
  return refuse() ? NULL : __real_realloc(p, size);
}
