/*
 * test_agent_alloc.c - the agent's start-up and stop (firmware/agent/agent.c) and its config
 * load (config.c) with each allocation failing in turn (alloc_sweep.h), on the loop tests'
 * fixture (agent_fixture.h: a fixture proc root with a target, a spool and runtime directory in
 * a temporary tree, a broker where nothing listens). em_agent_new() fails with -ENOMEM,
 * leaves no agent, no descriptor and nothing on the loop (uv_loop_close() succeeds), and the
 * next new, start, stop and free work (or it goes on without what it could not have: the
 * sensors, with a warning); em_agent_start() failing or not, the stop still
 * completes and the loop closes clean; the stop and free with an allocation failing complete
 * too. The config load makes one allocation (its budget sections), and with it failing returns
 * -ENOMEM with one problem reported and nothing held. libuv's, SQLite's
 * and libmosquitto's allocations are in shared libraries and do not fail here; nothing leaks
 * under AddressSanitizer.
 */
#define _XOPEN_SOURCE 700 /* nftw (tmp_tree.h) */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "agent_fixture.h"
#include "alloc_sweep.h"
#include "failing_alloc.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void on_stopped(void *ctx) {
  ((agent_fixture_t *)ctx)->stopped = true;
}

/* Stops and frees fx->agent, runs the loop until the stop is done, and closes the loop: nothing
 * of the agent's may be left on it. Then initialises the loop again for what follows. */
static void stop_free_and_close(agent_fixture_t *fx, const char *what, unsigned long k) {
  fx->stopped = false;
  em_agent_stop(fx->agent, on_stopped, fx);
  assert_int_equal(uv_run(&fx->loop, UV_RUN_DEFAULT), 0);
  assert_true(fx->stopped);
  em_agent_free(fx->agent);
  fx->agent = NULL;
  int rc = uv_loop_close(&fx->loop);
  if (rc != 0) {
    fail_msg("%s, allocation %lu failing: the loop does not close: %s", what, k, uv_strerror(rc));
  }
  assert_int_equal(uv_loop_init(&fx->loop), 0);
}

/* The agent made, started, stopped and freed with nothing failing; the loop closes clean. */
static void works_again(agent_fixture_t *fx, const char *what, unsigned long k) {
  assert_int_equal(em_agent_new(&fx->agent, &fx->loop, &fx->cfg, NULL, "test"), 0);
  assert_int_equal(em_agent_start(fx->agent), 0);
  stop_free_and_close(fx, what, k);
}

/* --- em_agent_new ------------------------------------------------------------------------ */

typedef struct {
  agent_fixture_t *fx;
  int fd_before;
} new_round_t;

static void new_before(void *ctx) {
  new_round_t *r = ctx;
  r->fx->agent = NULL;
  r->fd_before = alloc_sweep_lowest_free_fd();
}

static int new_step(void *ctx) {
  new_round_t *r = ctx;
  return em_agent_new(&r->fx->agent, &r->fx->loop, &r->fx->cfg, NULL, "test");
}

static void new_passed(void *ctx, int rc);

static void new_refused(void *ctx, unsigned long k, int rc) {
  new_round_t *r = ctx;
  agent_fixture_t *fx = r->fx;
  if (rc == 0) { /* Gone on without what it could not have (the sensors, with a warning). */
    new_passed(ctx, rc);
    return;
  }
  if (rc != -ENOMEM) {
    fail_msg("allocation %lu failing: em_agent_new returned %d (%s), want -ENOMEM or 0", k, rc,
             strerror(-rc));
  }
  assert_null(fx->agent);
  /* What a failed new closed is gone after a turn or two of the loop (close callbacks). */
  for (int turn = 0; turn < 3 && uv_loop_alive(&fx->loop); turn++) {
    (void)uv_run(&fx->loop, UV_RUN_NOWAIT);
  }
  int lc = uv_loop_close(&fx->loop);
  if (lc != 0) {
    fail_msg("allocation %lu failing: em_agent_new left the loop busy: %s", k, uv_strerror(lc));
  }
  assert_int_equal(uv_loop_init(&fx->loop), 0); /* Its own descriptors as before. */
  assert_int_equal(alloc_sweep_lowest_free_fd(), r->fd_before);
  works_again(fx, "em_agent_new", k);
}

static void new_passed(void *ctx, int rc) {
  new_round_t *r = ctx;
  assert_int_equal(rc, 0);
  assert_int_equal(em_agent_start(r->fx->agent), 0);
  stop_free_and_close(r->fx, "em_agent_new", 0);
}

/* em_agent_new() with each of its allocations failing: -ENOMEM, no agent, no descriptor and
 * nothing left on the loop, or an agent without sensors; the agent then starts and stops. */
static void agent_new_fails_cleanly_when_any_allocation_fails(void **state) {
  static const alloc_sweep_t sweep = {.what = "em_agent_new",
                                      .before = new_before,
                                      .step = new_step,
                                      .refused = new_refused,
                                      .passed = new_passed};
  new_round_t r = {.fx = *state};
  /* The agent, the sampling, the figures, the publisher, the spool, the forwarder... */
  assert_true(alloc_sweep(&sweep, &r) >= 6);
}

/* --- em_agent_start, stop and free -------------------------------------------------------- */

typedef struct {
  agent_fixture_t *fx;
  bool stop; /* Sweep the stop and free; else the start. */
} run_round_t;

static void run_before(void *ctx) {
  run_round_t *r = ctx;
  assert_int_equal(em_agent_new(&r->fx->agent, &r->fx->loop, &r->fx->cfg, NULL, "test"), 0);
  if (r->stop) {
    assert_int_equal(em_agent_start(r->fx->agent), 0);
  }
}

static int run_step(void *ctx) {
  run_round_t *r = ctx;
  if (!r->stop) {
    return em_agent_start(r->fx->agent);
  }
  agent_fixture_t *fx = r->fx;
  fx->stopped = false;
  em_agent_stop(fx->agent, on_stopped, fx);
  int rc = uv_run(&fx->loop, UV_RUN_DEFAULT);
  em_agent_free(fx->agent);
  fx->agent = NULL;
  return rc != 0 || !fx->stopped ? -EBUSY : uv_loop_close(&fx->loop);
}

static void run_after(run_round_t *r, const char *what, unsigned long k, int rc) {
  agent_fixture_t *fx = r->fx;
  if (r->stop) {
    if (rc != 0) {
      fail_msg("%s, allocation %lu failing: the stop did not close the loop (%d)", what, k, rc);
    }
    assert_int_equal(uv_loop_init(&fx->loop), 0);
  } else {
    if (rc > 0) {
      fail_msg("%s, allocation %lu failing: returned %d", what, k, rc);
    }
    stop_free_and_close(fx, what, k);
  }
  if (k > 0) {
    works_again(fx, what, k);
  }
}

static void run_refused(void *ctx, unsigned long k, int rc) {
  run_round_t *r = ctx;
  run_after(r, r->stop ? "em_agent_stop" : "em_agent_start", k, rc);
}

static void run_passed(void *ctx, int rc) {
  run_round_t *r = ctx;
  if (rc != 0) {
    fail_msg("%s: %d with nothing failing", r->stop ? "em_agent_stop" : "em_agent_start", rc);
  }
  run_after(r, "", 0, rc);
}

/* em_agent_start() with each of its allocations failing: 0 or a negative errno, and the stop
 * that follows completes and leaves the loop clean; then a new agent starts and stops. */
static void agent_start_fails_cleanly_when_any_allocation_fails(void **state) {
  static const alloc_sweep_t sweep = {.what = "em_agent_start",
                                      .before = run_before,
                                      .step = run_step,
                                      .refused = run_refused,
                                      .passed = run_passed};
  run_round_t r = {.fx = *state};
  alloc_sweep(&sweep, &r);
}

/* The stop and free of a started agent with each of their allocations failing: the stop
 * completes and the loop closes clean. */
static void agent_stop_completes_when_any_allocation_fails(void **state) {
  static const alloc_sweep_t sweep = {.what = "em_agent_stop",
                                      .before = run_before,
                                      .step = run_step,
                                      .refused = run_refused,
                                      .passed = run_passed};
  run_round_t r = {.fx = *state, .stop = true};
  alloc_sweep(&sweep, &r);
}

/* --- the config -------------------------------------------------------------------------- */

/* The shipped example config, loaded with nothing failing into `want`; each round loads it into
 * `got`. */
typedef struct {
  em_config_t want;
  em_config_t got;
  int n_errors;
} config_round_t;

static const char example_ini[] = EM_FIXTURES_DIR "/../../firmware/edgemon-agent.ini";

static int config_step(void *ctx) {
  config_round_t *r = ctx;
  r->n_errors = -1;
  return em_config_load(example_ini, &r->got, NULL, NULL, &r->n_errors);
}

/* The same config as with nothing failing: no key differs, by the schema. */
static void assert_config_as_wanted(config_round_t *r) {
  char key[96];
  assert_null(em_config_reload_conflict(&r->want, &r->got, key, sizeof(key)));
  assert_int_equal(em_config_adopt(&r->want, &r->got), 0);
}

static void config_refused(void *ctx, unsigned long k, int rc) {
  (void)k;
  config_round_t *r = ctx;
  assert_int_equal(rc, -ENOMEM);
  assert_int_equal(r->n_errors, 1); /* "cannot load: Cannot allocate memory" */
  assert_int_equal(config_step(r), 0);
  assert_int_equal(r->n_errors, 0);
  assert_config_as_wanted(r);
}

static void config_passed(void *ctx, int rc) {
  config_round_t *r = ctx;
  assert_int_equal(rc, 0);
  assert_int_equal(r->n_errors, 0);
  assert_config_as_wanted(r);
}

/* The shipped example config with each allocation of its load failing in turn: -ENOMEM with one
 * problem reported, then it loads as with nothing failing; the load makes exactly one
 * allocation (its budget sections, freed before it returns: a leak fails under ASan). */
static void config_load_fails_cleanly_when_its_allocation_fails(void **state) {
  (void)state;
  static config_round_t r;
  int n_errors = -1;
  assert_int_equal(em_config_load(example_ini, &r.want, NULL, NULL, &n_errors), 0);
  assert_int_equal(n_errors, 0);
  static const alloc_sweep_t sweep = {.what = "em_config_load",
                                      .step = config_step,
                                      .refused = config_refused,
                                      .passed = config_passed};
  assert_int_equal(alloc_sweep(&sweep, &r), 1);
}

static int disarm_and_teardown(void **state) {
  em_failing_alloc_disarm();
  agent_fixture_t *fx = *state;
  (void)uv_loop_close(&fx->loop);
  return agent_fixture_teardown(state);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(agent_new_fails_cleanly_when_any_allocation_fails,
                                      agent_fixture_setup, disarm_and_teardown),
      cmocka_unit_test_setup_teardown(agent_start_fails_cleanly_when_any_allocation_fails,
                                      agent_fixture_setup, disarm_and_teardown),
      cmocka_unit_test_setup_teardown(agent_stop_completes_when_any_allocation_fails,
                                      agent_fixture_setup, disarm_and_teardown),
      cmocka_unit_test(config_load_fails_cleanly_when_its_allocation_fails),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
