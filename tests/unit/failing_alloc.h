/*
 * failing_alloc.h - allocation-failure injection for unit tests, in the manner of libcbor's
 * WITH_FAILING_MALLOC tests and curl's torture mode: a test arms it so that the Nth allocation
 * from now fails, runs the code under test, and asserts a clean error (no crash, and no leak
 * under AddressSanitizer).
 *
 * How: a test executable registered with em_with_failing_alloc() (tests/unit/CMakeLists.txt) is
 * linked with -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc, so every call to those three
 * from the objects linked into it (the test and the static libraries it tests) goes through
 * failing_alloc.c. Production code carries no seam for it. Calls made inside shared libraries
 * (libc's own strdup or fopen, libuv) are not seen: a test of code that reaches the heap only
 * through a shared library cannot use this.
 *
 * Single-threaded: arm, run, disarm on one thread.
 */
#ifndef EDGEMON_TESTS_FAILING_ALLOC_H
#define EDGEMON_TESTS_FAILING_ALLOC_H

#include <stdbool.h>

/*
 * Counts allocations from now on; the nth (1 = the next one) returns NULL with errno ENOMEM,
 * and so does every later one when `and_after` is true. nth == 0 fails nothing, only counts.
 */
void em_failing_alloc_arm(unsigned long nth, bool and_after);

/* Stops failing and counting. Returns the allocations counted since em_failing_alloc_arm(). */
unsigned long em_failing_alloc_disarm(void);

/* Allocations refused since em_failing_alloc_arm(). */
unsigned long em_failing_alloc_refused(void);

#endif /* EDGEMON_TESTS_FAILING_ALLOC_H */
