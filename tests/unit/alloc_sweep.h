/*
 * alloc_sweep.h - every allocation failing in turn, in the manner of curl's torture mode, on
 * top of failing_alloc.h: a sweep runs one step of the code under test with its k-th
 * allocation failing, for k = 1, 2, ... until the step no longer reaches the k-th, and after
 * each round checks what the step returned and that the code works again with nothing failing.
 * Under AddressSanitizer a leak on any failure path fails the test at exit.
 *
 * Also the lowest free descriptor, so a sweep can check that a failed open closed what it had
 * opened.
 *
 * Owns nothing: the callbacks own the round's objects (in ctx). Single-threaded, as
 * failing_alloc.h.
 */
#ifndef EDGEMON_TESTS_ALLOC_SWEEP_H
#define EDGEMON_TESTS_ALLOC_SWEEP_H

#include <stdbool.h>

/* A sweep stops the test past this many rounds: the step allocates without end. */
#define ALLOC_SWEEP_MAX_ROUNDS 20000ul

typedef struct {
  const char *what; /* Named in the test's failure messages. */
  /* Optional: makes the round's fixture, nothing failing (called before the step is armed). */
  void (*before)(void *ctx);
  /* The code under test, with allocation k failing; returns its result code. */
  int (*step)(void *ctx);
  /*
   * After a round in which an allocation was refused: asserts that rc is a clean error (or 0
   * where the code absorbs the failure), that the code works again with nothing failing, and
   * releases the round's objects.
   */
  void (*refused)(void *ctx, unsigned long k, int rc);
  /* After the round whose step needed fewer than k allocations: asserts its success (rc) and
   * releases the round's objects. */
  void (*passed)(void *ctx, int rc);
} alloc_sweep_t;

/* Runs the sweep with ctx given to every callback. Returns the rounds in which an allocation
 * was refused (the allocations the step makes), failing the test past ALLOC_SWEEP_MAX_ROUNDS. */
unsigned long alloc_sweep(const alloc_sweep_t *sw, void *ctx);

/* The lowest descriptor number open() would return now. */
int alloc_sweep_lowest_free_fd(void);

#endif /* EDGEMON_TESTS_ALLOC_SWEEP_H */
