/*
 * test_hook.c - the level-change hook with real processes on a real libuv loop: the change
 * arrives in the arguments and the environment, a hook past its timeout is killed, changes
 * that come while one runs wait and only the latest runs, a missing hook is counted, and
 * closing kills a running hook (it ends by a signal, long before its own exit, and is gone).
 */
#define _XOPEN_SOURCE 700 /* POSIX 2008 plus XSI, for nftw() in tmp_tree.h */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hook.h"
#include "tmp_dir.h"
#include "unit_fx.h"
#include "tmp_tree.h"

typedef struct {
  char dir[64];
  char script[128];
  char out[128];
  uv_loop_t loop;
} fx_t;

static void write_script(fx_t *fx, const char *body) {
  FILE *f = fopen(fx->script, "w");
  assert_non_null(f);
  fprintf(f, "#!/bin/sh\n%s\n", body);
  fclose(f);
  assert_int_equal(chmod(fx->script, 0755), 0);
}

static int setup(void **state) {
  fx_t *fx = calloc(1, sizeof(*fx));
  assert_non_null(fx);
  em_tmp_dir_make(fx->dir, sizeof(fx->dir), "em-hook", fx->script, sizeof(fx->script), "hook.sh");
  snprintf(fx->out, sizeof(fx->out), "%s/out", fx->dir);
  assert_int_equal(uv_loop_init(&fx->loop), 0);
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  fx_t *fx = *state;
  assert_int_equal(uv_loop_close(&fx->loop), 0); /* Every handle was closed. */
  assert_int_equal(em_tmp_tree_remove(fx->dir), 0);
  free(fx);
  return 0;
}

static em_state_record_t change(em_level_t level, em_level_t prev, const char *rule) {
  em_state_record_t r = {.level = level,
                         .prev_level = prev,
                         .value = 52.5,
                         .bound = 40,
                         .since_mono_ns = 1,
                         .since_wall_ns = 2};
  snprintf(r.rule, sizeof(r.rule), "%s", rule);
  snprintf(r.stage, sizeof(r.stage), "infer");
  snprintf(r.reason, sizeof(r.reason), "%s: violated", rule);
  return r;
}

/* A hook on fx's script, written with body first; it must be made. */
static em_hook_t *hook_with(fx_t *fx, const char *body, uint64_t timeout_ns) {
  write_script(fx, body);
  em_hook_t *h = NULL;
  assert_int_equal(em_hook_new(&h, &fx->loop, fx->script, timeout_ns), 0);
  return h;
}

/* Hands h the change to `level` from `prev` by `rule` (the hook copies it). */
static void run_change(em_hook_t *h, em_level_t level, em_level_t prev, const char *rule) {
  em_state_record_t c = change(level, prev, rule);
  em_hook_run(h, &c);
}

static void on_closed(void *ctx) {
  *(int *)ctx = 1;
}

/* Closes the hook, runs the loop until it is closed, frees it. */
static void finish(fx_t *fx, em_hook_t *h) {
  int closed = 0;
  em_hook_close(h, on_closed, &closed);
  uv_run(&fx->loop, UV_RUN_DEFAULT);
  assert_int_equal(closed, 1);
  em_hook_free(h);
}

static char *slurp(const char *path) {
  static char buf[4096];
  FILE *f = fopen(path, "r");
  if (!f) {
    return NULL;
  }
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  return buf;
}

static void the_change_arrives_in_arguments_and_environment(void **state) {
  fx_t *fx = *state;
  char body[512];
  snprintf(body, sizeof(body),
           "printf '%%s|' \"$@\" > %s; echo \"$EDGEMON_LEVEL $EDGEMON_PREV_LEVEL "
           "$EDGEMON_RULE $EDGEMON_VALUE\" >> %s; echo hello from the hook",
           fx->out, fx->out);
  em_hook_t *h = hook_with(fx, body, 5000000000u);
  run_change(h, EM_LEVEL_DEGRADED, EM_LEVEL_NOMINAL, "infer.p99");
  uv_run(&fx->loop, UV_RUN_DEFAULT);
  char *got = slurp(fx->out);
  assert_non_null(got);
  assert_string_equal(got, "DEGRADED|NOMINAL|infer.p99|infer|52.5|40|infer.p99: violated|"
                           "DEGRADED NOMINAL infer.p99 52.5\n");
  assert_int_equal(em_hook_stats(h)->runs, 1);
  assert_int_equal(em_hook_stats(h)->failed, 0);
  finish(fx, h);
}

static void a_hook_past_its_timeout_is_killed(void **state) {
  fx_t *fx = *state;
  em_hook_t *h = hook_with(fx, "exec sleep 30", 200000000u);
  run_change(h, EM_LEVEL_WARN, EM_LEVEL_NOMINAL, "rss.cap");
  uv_run(&fx->loop, UV_RUN_DEFAULT); /* Returns once the killed hook is reaped. */
  assert_int_equal(em_hook_stats(h)->timeouts, 1);
  assert_int_equal(em_hook_stats(h)->failed, 1);
  finish(fx, h);
}

static void changes_while_it_runs_wait_and_only_the_latest_runs(void **state) {
  fx_t *fx = *state;
  char body[256];
  snprintf(body, sizeof(body), "sleep 0.2; echo \"$1\" >> %s", fx->out);
  em_hook_t *h = hook_with(fx, body, 5000000000u);
  run_change(h, EM_LEVEL_WARN, EM_LEVEL_NOMINAL, "a");
  run_change(h, EM_LEVEL_DEGRADED, EM_LEVEL_WARN, "b");     /* waits */
  run_change(h, EM_LEVEL_CRITICAL, EM_LEVEL_DEGRADED, "c"); /* replaces b */
  uv_run(&fx->loop, UV_RUN_DEFAULT);
  char *got = slurp(fx->out);
  assert_non_null(got);
  assert_string_equal(got, "WARN\nCRITICAL\n");
  assert_int_equal(em_hook_stats(h)->runs, 2);
  assert_int_equal(em_hook_stats(h)->coalesced, 1);
  finish(fx, h);
}

static void a_missing_hook_is_counted_and_harmless(void **state) {
  fx_t *fx = *state;
  em_hook_t *h = NULL;
  assert_int_equal(em_hook_new(&h, &fx->loop, "/nonexistent/hook", 1000000000u), 0);
  em_state_record_t c = change(EM_LEVEL_WARN, EM_LEVEL_NOMINAL, "x");
  em_hook_run(h, &c);
  uv_run(&fx->loop, UV_RUN_DEFAULT);
  assert_int_equal(em_hook_stats(h)->failed, 1);
  em_hook_run(h, &c); /* and it keeps trying on later changes */
  uv_run(&fx->loop, UV_RUN_DEFAULT);
  assert_int_equal(em_hook_stats(h)->runs, 2);
  finish(fx, h);
}

/* Reads the pid the hook wrote to `path`, waiting up to 5 s for it: the hook is running. */
static pid_t wait_for_pid(const char *path) {
  for (int i = 0; i < 500; i++) {
    char *got = slurp(path);
    if (got && strchr(got, '\n')) {
      return (pid_t)strtol(got, NULL, 10);
    }
    nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
  }
  fail_msg("the hook never wrote its pid to %s", path);
  return -1;
}

static void closing_kills_a_running_hook(void **state) {
  fx_t *fx = *state;
  char body[512];
  /* The shell becomes the sleep (exec): the pid it writes is the hook process itself. Left
   * alone it would exit 0 after 10 s. */
  snprintf(body, sizeof(body), "echo $$ > %s.tmp && mv %s.tmp %s; exec sleep 10", fx->out, fx->out,
           fx->out);
  em_hook_t *h = hook_with(fx, body, 60000000000u);
  run_change(h, EM_LEVEL_WARN, EM_LEVEL_NOMINAL, "x");
  uv_run(&fx->loop, UV_RUN_NOWAIT);
  pid_t pid = wait_for_pid(fx->out);
  assert_true(pid > 0);
  assert_int_equal(kill(pid, 0), 0); /* Running when the hook is closed. */
  int closed = 0;
  em_hook_close(h, on_closed, &closed);
  uv_run(&fx->loop, UV_RUN_DEFAULT);
  assert_int_equal(closed, 1);
  em_hook_stats_t stats = *em_hook_stats(h);
  em_hook_free(h);
  /* Ended by a signal, not by its own exit 0 (failed counts a signal or a non-zero status),
   * before its timeout, and reaped: the process is gone. */
  assert_int_equal(stats.failed, 1);
  assert_int_equal(stats.timeouts, 0);
  assert_int_equal(kill(pid, 0), -1);
  assert_int_equal(errno, ESRCH);
}

static void relative_paths_are_refused(void **state) {
  fx_t *fx = *state;
  em_hook_t *h = NULL;
  assert_int_equal(em_hook_new(&h, &fx->loop, "hook.sh", 1000000000u), -EINVAL);
  assert_null(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      EM_FX(the_change_arrives_in_arguments_and_environment),
      EM_FX(a_hook_past_its_timeout_is_killed),
      EM_FX(changes_while_it_runs_wait_and_only_the_latest_runs),
      EM_FX(a_missing_hook_is_counted_and_harmless),
      EM_FX(closing_kills_a_running_hook),
      EM_FX(relative_paths_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
