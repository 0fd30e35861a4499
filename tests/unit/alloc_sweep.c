/*
 * alloc_sweep.c - the loop behind alloc_sweep.h over failing_alloc.h's counters.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "alloc_sweep.h"
#include "failing_alloc.h"

#include <fcntl.h>
#include <unistd.h>

unsigned long alloc_sweep(const alloc_sweep_t *sw, void *ctx) {
  for (unsigned long k = 1; k <= ALLOC_SWEEP_MAX_ROUNDS; k++) {
    if (sw->before) {
      sw->before(ctx);
    }
    em_failing_alloc_arm(k, false);
    int rc = sw->step(ctx);
    em_failing_alloc_disarm();
    if (em_failing_alloc_refused() == 0) { /* The step needs fewer than k allocations. */
      sw->passed(ctx, rc);
      return k - 1;
    }
    sw->refused(ctx, k, rc);
  }
  fail_msg("%s: still allocating after %lu rounds", sw->what, ALLOC_SWEEP_MAX_ROUNDS);
  return ALLOC_SWEEP_MAX_ROUNDS;
}

int alloc_sweep_lowest_free_fd(void) {
  int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  assert_true(fd >= 0);
  close(fd);
  return fd;
}
