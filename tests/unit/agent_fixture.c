/*
 * agent_fixture.c - the fixture of the agent's loop tests (see agent_fixture.h).
 */
#define _XOPEN_SOURCE 700 /* nftw (tmp_tree.h) */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "agent_fixture.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

int agent_fixture_setup(void **state) {
  agent_fixture_t *fx = calloc(1, sizeof(*fx));
  assert_non_null(fx);
  em_tmp_tree_make(fx->root, "em-agent");
  char rel[64], text[512];
  fx->child = fork();
  assert_true(fx->child >= 0);
  if (fx->child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* Gone with the test, even when it crashes. */
    for (;;) {
      pause();
    }
  }
  pid_t me = fx->child;
  snprintf(rel, sizeof(rel), "proc/%ld/comm", (long)me);
  em_tmp_tree_put(fx->root, rel, "fakeinfer\n");
  snprintf(rel, sizeof(rel), "proc/%ld/cmdline", (long)me);
  em_tmp_tree_put(fx->root, rel, "fakeinfer");
  snprintf(rel, sizeof(rel), "proc/%ld/stat", (long)me);
  snprintf(text, sizeof(text),
           "%ld (fakeinfer) S 1 %ld %ld 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 5000 1000 50 "
           "18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n",
           (long)me, (long)me, (long)me);
  em_tmp_tree_put(fx->root, rel, text);
  snprintf(rel, sizeof(rel), "proc/%ld/statm", (long)me);
  snprintf(text, sizeof(text), "1000 %u 100 1 0 200 0\n", AGENT_FIXTURE_STATM_PAGES);
  em_tmp_tree_put(fx->root, rel, text);
  em_tmp_tree_put(fx->root, "proc/meminfo", "MemTotal: 8000000 kB\nMemAvailable: 4000000 kB\n");
  em_tmp_tree_put(fx->root, "sys/.keep", "");
  em_tmp_tree_put(fx->root, "run/.keep", "");

  em_config_t *c = &fx->cfg;
  em_config_defaults(c);
  snprintf(c->device_id, sizeof(c->device_id), "unit-agent");
  c->target.kind = EM_TARGET_COMM;
  snprintf(c->target.value, sizeof(c->target.value), "fakeinfer");
  snprintf(c->proc_root, sizeof(c->proc_root), "%s/proc", fx->root);
  snprintf(c->sys_root, sizeof(c->sys_root), "%s/sys", fx->root);
  snprintf(c->runtime_dir, sizeof(c->runtime_dir), "%s/run", fx->root);
  snprintf(c->span_socket, sizeof(c->span_socket), "%s/run/spans.sock", fx->root);
  snprintf(c->spool_path, sizeof(c->spool_path), "%s/spool", fx->root);
  snprintf(c->broker_host, sizeof(c->broker_host), "127.0.0.1");
  c->broker_port = 1; /* Nothing listens: refused at once, everything spooled. */
  c->n_events = 0;    /* No PMU: the fixed figures' aliases are their table order. */
  c->sample_period_ns = (uint64_t)AGENT_FIXTURE_PERIOD_MS * 1000000u;
  c->system_period_ns = c->sample_period_ns;
  c->smaps_period_ns = 0;
  c->spool_sync_ns = c->sample_period_ns; /* The sync thread is asked on every tick. */
  c->profile_enabled = false;
  fx->span_fd = -1;
  assert_int_equal(uv_loop_init(&fx->loop), 0);
  *state = fx;
  return 0;
}

int agent_fixture_teardown(void **state) {
  agent_fixture_t *fx = *state;
  if (fx->span_fd >= 0) {
    close(fx->span_fd);
  }
  kill(fx->child, SIGKILL);
  (void)waitpid(fx->child, NULL, 0);
  em_tmp_tree_remove(fx->root);
  free(fx);
  return 0;
}
