/*
 * test_agent.c - the agent's loop as a whole (firmware/agent/agent.c): built against a fixture
 * proc root (a target process named "fakeinfer" whose pid is a real child's, so the PMU may
 * open or be refused but the target exists), an empty sys root (no sensors), a runtime
 * directory and a spool in a temporary directory, and a broker on a loopback port where
 * nothing listens (every message goes to the spool). It runs a few ticks, is stopped, and the
 * loop must close clean: every handle, thread and worker job the agent started is gone. What
 * it did is read back from the spool: data messages that carry the fixture target's pid and
 * memory (it attached), and the stage a span datagram named on its socket. The target's pid
 * is a sleeping child's (the lookup never matches the agent's own process). The spool's sync
 * thread (transport/syncer.h) is checked on its own: one sync at a time, its result handed
 * back on the loop, and a close that leaves the loop clean.
 */
#define _XOPEN_SOURCE 700 /* nftw (tmp_tree.h) */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "agent.h"
#include "agent_fixture.h"
#include "edgemon/proto.h"
#include "edgemon/wire.h"
#include "figures.h"
#include "spool.h"
#include "syncer.h"
#include "unit_fx.h"

#define PERIOD_MS   AGENT_FIXTURE_PERIOD_MS
#define RUN_MS      600u /* About twelve ticks. */
#define STATM_PAGES AGENT_FIXTURE_STATM_PAGES

/* The loop tests' fixture (agent_fixture.h): its tree, target child, config and loop. */
typedef agent_fixture_t fixture_t;

static void on_stopped(void *ctx) {
  ((fixture_t *)ctx)->stopped = true;
}

static void on_stop_due(uv_timer_t *t) {
  fixture_t *fx = t->data;
  uv_close((uv_handle_t *)&fx->stop_timer, NULL);
  uv_close((uv_handle_t *)&fx->span_timer, NULL);
  em_agent_stop(fx->agent, on_stopped, fx);
}

/* One span of stage "infer" on the agent's socket, as a client sends it. */
static void on_span_due(uv_timer_t *t) {
  fixture_t *fx = t->data;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  em_span_t span = {.kind = EM_DGRAM_SPAN,
                    .pid = (uint32_t)getpid(),
                    .frame_id = 1,
                    .start_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec,
                    .duration_ns = 5000000};
  snprintf(span.stage, sizeof(span.stage), "infer");
  uint8_t buf[EM_SPAN_DGRAM_BYTES];
  assert_int_equal(em_span_pack(&span, buf), 0);
  struct sockaddr_un to = {.sun_family = AF_UNIX};
  assert_true(strlen(fx->cfg.span_socket) < sizeof(to.sun_path));
  memcpy(to.sun_path, fx->cfg.span_socket, strlen(fx->cfg.span_socket) + 1);
  assert_int_equal(sendto(fx->span_fd, buf, sizeof(buf), 0, (struct sockaddr *)&to, sizeof(to)),
                   (ssize_t)sizeof(buf));
}

/* What the spool holds, decoded: data messages' count, and whether any carried the pid, the
 * resident bytes and the stage. */
typedef struct {
  size_t data;
  bool pid_seen, rss_seen, up_seen, stage_seen;
} spooled_t;

static void read_spool(const fixture_t *fx, spooled_t *out) {
  em_spool_t *sp = NULL;
  char err[256];
  assert_int_equal(em_spool_open(&sp, fx->cfg.spool_path, fx->cfg.spool_bytes, err, sizeof(err)),
                   0);
  static uint8_t buf[EM_PROTO_MAX_MESSAGE_BYTES];
  static uint8_t scratch[1 << 20];
  uint64_t rss = (uint64_t)STATM_PAGES * (uint64_t)sysconf(_SC_PAGESIZE);
  *out = (spooled_t){0};
  em_spool_kind_t kind;
  int n;
  while ((n = em_spool_peek(sp, &kind, buf, sizeof(buf))) > 0) {
    em_msg_t msg;
    size_t off = 0;
    assert_int_equal(em_proto_decode(buf, (size_t)n, &msg, scratch, sizeof(scratch), &off), 0);
    if (kind == EM_SPOOL_DATA && msg.kind == EM_MSG_DATA) {
      out->data++;
      for (size_t i = 0; i < msg.u.data.n_samples; i++) {
        const em_sample_t *s = &msg.u.data.samples[i];
        bool u = s->value.type == EM_VALUE_UINT;
        out->pid_seen |= s->alias == EM_FIG_TARGET_PID && u && s->value.as.u == (uint64_t)fx->child;
        out->rss_seen |= s->alias == EM_FIG_RSS && u && s->value.as.u == rss;
        out->up_seen |= s->alias == EM_FIG_TARGET_UP && u && s->value.as.u == 1;
      }
      for (size_t i = 0; i < msg.u.data.n_stages; i++) {
        out->stage_seen |= strcmp(msg.u.data.stages[i].name, "infer") == 0;
      }
    }
    assert_int_equal(em_spool_pop(sp), 0);
  }
  em_spool_close(sp);
}

static void agent_attaches_ticks_and_closes_the_loop_clean(void **state) {
  fixture_t *fx = *state;
  assert_int_equal(em_agent_new(&fx->agent, &fx->loop, &fx->cfg, NULL, "test"), 0);
  assert_int_equal(em_agent_start(fx->agent), 0);
  fx->span_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  assert_true(fx->span_fd >= 0);
  uv_timer_init(&fx->loop, &fx->span_timer);
  uv_timer_init(&fx->loop, &fx->stop_timer);
  fx->span_timer.data = fx->stop_timer.data = fx;
  uv_timer_start(&fx->span_timer, on_span_due, 3 * PERIOD_MS, 0);
  uv_timer_start(&fx->stop_timer, on_stop_due, RUN_MS, 0);
  assert_int_equal(uv_run(&fx->loop, UV_RUN_DEFAULT), 0);
  assert_true(fx->stopped);
  em_agent_free(fx->agent);
  /* Every handle, thread and worker job of the agent's is gone. */
  assert_int_equal(uv_loop_close(&fx->loop), 0);

  spooled_t got;
  read_spool(fx, &got);
  assert_true(got.data >= 3); /* One a tick (late ones skipped), broker away: all spooled. */
  assert_true(got.up_seen);
  assert_true(got.pid_seen);   /* Attached to the fixture's process... */
  assert_true(got.rss_seen);   /* ...and read its statm under the fixture root. */
  assert_true(got.stage_seen); /* The span reached the stage table. */
}

/* Stopped before its first tick: still closes clean, nothing left behind. */
static void agent_stopped_at_once_closes_the_loop_clean(void **state) {
  fixture_t *fx = *state;
  assert_int_equal(em_agent_new(&fx->agent, &fx->loop, &fx->cfg, NULL, "test"), 0);
  assert_int_equal(em_agent_start(fx->agent), 0);
  em_agent_stop(fx->agent, on_stopped, fx);
  assert_int_equal(uv_run(&fx->loop, UV_RUN_DEFAULT), 0);
  assert_true(fx->stopped);
  em_agent_free(fx->agent);
  assert_int_equal(uv_loop_close(&fx->loop), 0);
}

typedef struct {
  int calls;
  int rc;
  bool closed;
} sync_seen_t;

static void on_synced(void *ctx, int rc) {
  sync_seen_t *seen = ctx;
  seen->calls++;
  seen->rc = rc;
}

static void on_syncer_closed(void *ctx) {
  ((sync_seen_t *)ctx)->closed = true;
}

/* The spool's sync thread: one sync at a time, its result on the loop, a clean close. */
static void sync_thread_runs_one_sync_at_a_time_and_closes_clean(void **state) {
  fixture_t *fx = *state;
  char path[EM_TMP_TREE_ROOT_BYTES + 16];
  snprintf(path, sizeof(path), "%s/sync", fx->root);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  assert_int_equal(fputs("appended", f) >= 0, 1);
  assert_int_equal(fflush(f), 0);
  em_syncer_t *s = NULL;
  sync_seen_t seen = {0};
  assert_int_equal(em_syncer_new(&s, &fx->loop), 0);
  assert_int_equal(em_syncer_sync(s, fileno(f), on_synced, &seen), -EINVAL); /* Not started. */
  assert_int_equal(em_syncer_start(s), 0);
  assert_int_equal(em_syncer_sync(s, -1, on_synced, &seen), -EINVAL);
  assert_int_equal(em_syncer_sync(s, fileno(f), on_synced, &seen), 0);
  /* Until the loop has taken the result, the slot is the first sync's. */
  assert_int_equal(em_syncer_sync(s, fileno(f), on_synced, &seen), -EBUSY);
  while (seen.calls == 0) {
    uv_run(&fx->loop, UV_RUN_ONCE);
  }
  assert_int_equal(seen.calls, 1);
  assert_int_equal(seen.rc, 0);
  assert_false(em_syncer_busy(s));
  em_syncer_stats_t st;
  em_syncer_stats(s, &st);
  assert_int_equal(st.syncs, 1);
  assert_int_equal(st.failed, 0);
  assert_true(st.wait_max_ns >= st.wait_last_ns);
  em_syncer_close(s, on_syncer_closed, &seen);
  assert_int_equal(em_syncer_sync(s, fileno(f), on_synced, &seen), -EINVAL); /* Closing. */
  assert_int_equal(uv_run(&fx->loop, UV_RUN_DEFAULT), 0);
  assert_true(seen.closed);
  assert_int_equal(seen.calls, 1);
  em_syncer_free(s);
  assert_int_equal(uv_loop_close(&fx->loop), 0);
  fclose(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      EM_FX_OF(agent_attaches_ticks_and_closes_the_loop_clean, agent_fixture),
      EM_FX_OF(agent_stopped_at_once_closes_the_loop_clean, agent_fixture),
      EM_FX_OF(sync_thread_runs_one_sync_at_a_time_and_closes_clean, agent_fixture),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
