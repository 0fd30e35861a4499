/*
 * hook.h - the optional command run on every level change ([degrade] hook): started with
 * uv_spawn, never waited for on the loop. The change travels in its arguments
 *
 *     HOOK LEVEL PREV_LEVEL RULE STAGE VALUE BOUND REASON
 *
 * and in its environment (EDGEMON_LEVEL, EDGEMON_PREV_LEVEL, EDGEMON_RULE, EDGEMON_STAGE,
 * EDGEMON_VALUE, EDGEMON_BOUND, EDGEMON_REASON; empty strings for what the change lacks).
 * At most one runs at a time: a change that comes while it runs waits, and of several that
 * wait only the latest runs (the hook is told the state, not every step). A hook that runs
 * past its timeout is killed (SIGKILL) and counted. Its stdout and stderr go to the log, one
 * line per log entry.
 *
 * Owns: the uv_process_t, two uv_pipe_t and a uv_timer_t of the run in progress. All on the
 * loop's thread.
 */
#ifndef EDGEMON_AGENT_HOOK_H
#define EDGEMON_AGENT_HOOK_H

#include <stdint.h>

#include <uv.h>

#include "edgemon/wire.h"

typedef struct em_hook em_hook_t;

typedef struct {
  uint64_t runs;      /* Hooks started. */
  uint64_t failed;    /* Exited non-zero, or could not start. */
  uint64_t timeouts;  /* Killed at the timeout. */
  uint64_t coalesced; /* Changes superseded by a later one while the hook ran. */
} em_hook_stats_t;

/* A hook for `path` (an executable; copied). Returns 0 and *out, -EINVAL or -ENOMEM. */
int em_hook_new(em_hook_t **out, uv_loop_t *loop, const char *path, uint64_t timeout_ns);

/* Runs the hook for `rec` now, or after the run in progress. Never blocks. */
void em_hook_run(em_hook_t *h, const em_state_record_t *rec);

const em_hook_stats_t *em_hook_stats(const em_hook_t *h);

/* Drops what waits, kills a run in progress, and calls done(ctx) once every handle closed. */
void em_hook_close(em_hook_t *h, void (*done)(void *), void *ctx);

/* Frees after close's done (or when nothing ever ran). NULL is a no-op. */
void em_hook_free(em_hook_t *h);

#endif /* EDGEMON_AGENT_HOOK_H */
