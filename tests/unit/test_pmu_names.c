/*
 * test_pmu_names.c - the generic PMU event names have one table (collect/pmu.c) and the
 * agent's config validates [pmu] events against it: every name em_pmu_resolve() knows, perf's
 * aliases included, loads; names it does not know are refused with the canonical list.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "pmu.h"

typedef struct {
  char msgs[4096];
} errors_t;

static void on_error(void *ctx, const char *file, int line, const char *msg) {
  errors_t *e = ctx;
  (void)file;
  size_t used = strlen(e->msgs);
  snprintf(e->msgs + used, sizeof(e->msgs) - used, "%d: %s\n", line, msg);
}

/* Loads "[target]\npid = 1\n[pmu]\nevents = <events>\n"; returns em_config_load()'s result. */
static int load_events(const char *events, em_config_t *cfg, errors_t *e) {
  char path[] = "/tmp/em-test-pmu-names-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *f = fdopen(fd, "w");
  assert_non_null(f);
  fprintf(f, "[target]\npid = 1\n[pmu]\nevents = %s\n", events);
  assert_int_equal(fclose(f), 0);
  memset(e, 0, sizeof(*e));
  int rc = em_config_load(path, cfg, on_error, e, NULL);
  unlink(path);
  return rc;
}

static void config_accepts_every_name_pmu_resolves(void **state) {
  (void)state;
  size_t n = 0;
  size_t aliases = 0;
  bool alias = false;
  const char *name = NULL;
  for (size_t i = 0; (name = em_pmu_generic_name(i, &alias)) != NULL; i++) {
    em_pmu_event_t ev;
    assert_int_equal(em_pmu_resolve(name, &ev), 0);
    assert_true(em_pmu_is_generic(name));
    em_config_t cfg;
    errors_t e;
    if (load_events(name, &cfg, &e) != 0) {
      fail_msg("'%s' (alias %d) refused: %s", name, alias, e.msgs);
    }
    assert_int_equal(cfg.n_events, 1);
    assert_string_equal(cfg.events[0], name);
    n++;
    aliases += alias;
  }
  assert_int_equal(n, 24); /* 17 canonical names and 7 of perf's aliases. */
  assert_int_equal(aliases, 7);
  assert_null(em_pmu_generic_name(n, NULL));
}

static void the_aliases_of_the_issue_load_together(void **state) {
  (void)state;
  em_config_t cfg;
  errors_t e;
  assert_int_equal(load_events("cs, branches, cpu-cycles, faults", &cfg, &e), 0);
  assert_int_equal(cfg.n_events, 4);
  assert_string_equal(cfg.events[0], "cs");
  assert_string_equal(cfg.events[3], "faults");
}

static void unknown_names_are_refused_with_the_canonical_list(void **state) {
  (void)state;
  em_config_t cfg;
  errors_t e;
  assert_int_equal(load_events("cycles, cyclez", &cfg, &e), -EINVAL);
  assert_string_equal(
      e.msgs,
      "4: unknown pmu event 'cyclez'; did you mean 'cycles'? valid: cycles, instructions, "
      "cache-references, cache-misses, branch-instructions, branch-misses, "
      "stalled-cycles-frontend, stalled-cycles-backend, ref-cycles, bus-cycles, task-clock, "
      "cpu-clock, context-switches, cpu-migrations, page-faults, minor-faults, major-faults\n");
  assert_false(em_pmu_is_generic("cyclez"));
  assert_false(em_pmu_is_generic(NULL));
  em_pmu_event_t ev;
  assert_int_equal(em_pmu_resolve("cyclez", &ev), -ENOENT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(config_accepts_every_name_pmu_resolves),
      cmocka_unit_test(the_aliases_of_the_issue_load_together),
      cmocka_unit_test(unknown_names_are_refused_with_the_canonical_list),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
