/*
 * agent_fixture.h - what the agent's loop tests share (test_agent.c, test_agent_alloc.c): a
 * fixture proc root with a target process named "fakeinfer" whose pid is a real child's (it
 * sleeps until the teardown kills it, so the lookup never matches the test's own process), an
 * empty sys root (no sensors), a runtime directory and a spool in a temporary directory, a
 * broker on a loopback port where nothing listens (every message goes to the spool), and a
 * config for all of them: no PMU events, no profiler, a short sample period.
 *
 * Owns, for a test: the temporary tree, the child and the loop (initialised by the setup; the
 * test closes it, asserting that nothing of the agent's is left on it). Include after
 * <cmocka.h>.
 */
#ifndef EDGEMON_TESTS_AGENT_FIXTURE_H
#define EDGEMON_TESTS_AGENT_FIXTURE_H

#include <stdbool.h>
#include <sys/types.h>
#include <uv.h>

#include "agent.h"
#include "tmp_tree.h"

#define AGENT_FIXTURE_PERIOD_MS   50u  /* The sample period. */
#define AGENT_FIXTURE_STATM_PAGES 500u /* The target's resident pages in its statm. */

typedef struct {
  char root[EM_TMP_TREE_ROOT_BYTES]; /* proc/, sys/, run/ and the spool under it. */
  em_config_t cfg;
  uv_loop_t loop;
  em_agent_t *agent;
  uv_timer_t span_timer; /* test_agent.c: sends the span once the agent listens. */
  uv_timer_t stop_timer;
  bool stopped; /* The agent's stop completed. */
  int span_fd;
  pid_t child; /* The target: a child that sleeps until the teardown kills it. */
} agent_fixture_t;

/* cmocka setup and teardown: *state becomes an agent_fixture_t with its tree, child, config
 * and an initialised loop; the teardown kills the child and removes the tree. */
int agent_fixture_setup(void **state);
int agent_fixture_teardown(void **state);

#endif /* EDGEMON_TESTS_AGENT_FIXTURE_H */
