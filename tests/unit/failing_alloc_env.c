/*
 * failing_alloc_env.c - failing_alloc.h armed from the environment, for a whole program built
 * with em_with_failing_alloc() (curl's torture mode): before main, EM_FAILING_ALLOC_NTH=N arms
 * it so that the program's Nth allocation fails (0 only counts); at exit, when
 * EM_FAILING_ALLOC_REPORT names a file, the line "SEEN REFUSED\n" is written to it (the
 * allocations counted and refused), so the driver knows when a run no longer reached the Nth.
 * Without EM_FAILING_ALLOC_NTH the program runs as it would without this file.
 * Owns nothing; single-threaded programs only, as failing_alloc.h.
 */
#include "failing_alloc.h"

#include <stdio.h>
#include <stdlib.h>

static bool armed_here;

__attribute__((constructor)) static void arm_from_environment(void) {
  const char *nth = getenv("EM_FAILING_ALLOC_NTH");
  if (!nth || !*nth) {
    return;
  }
  char *end;
  unsigned long n = strtoul(nth, &end, 10);
  if (*end) {
    return;
  }
  em_failing_alloc_arm(n, false);
  armed_here = true;
}

__attribute__((destructor)) static void report_at_exit(void) {
  const char *path = getenv("EM_FAILING_ALLOC_REPORT");
  if (!armed_here || !path || !*path) {
    return;
  }
  unsigned long refused = em_failing_alloc_refused();
  unsigned long seen = em_failing_alloc_disarm();
  FILE *f = fopen(path, "w");
  if (f) {
    fprintf(f, "%lu %lu\n", seen, refused);
    fclose(f);
  }
}
