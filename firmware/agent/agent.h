/*
 * agent.h - the agent itself: one libuv loop beside the inference process. It builds one
 * object per room (collect/: sampling and the target's lifecycle; spans/: the span socket,
 * rings, the stage report, the model identity; supervise/: the budget judge and the level;
 * transport/: the publisher, commands, store and forward, the spool's sync thread; record/: the
 * flight feed; profile/: the profiler), ties their callbacks together and runs the tick: every
 * sample period it reads the target and the system, drains the spans, judges the budgets,
 * encodes one v1 data message and hands it to the forwarder (agent.c says the order).
 *
 * Owns: the rooms' objects, the metric dictionary (figures.h) and the buffers sized from it at
 * start-up (samples, encode buffer), the tick timer; nothing is allocated per tick. Threads:
 * the loop's; libuv's one worker runs the smaps_rollup walk, sensor reads and profile
 * resolutions (collect/sampling.h, profile/profiling.h); the spool's fdatasync runs on a
 * thread of its own (transport/syncer.h).
 */
#ifndef EDGEMON_AGENT_AGENT_H
#define EDGEMON_AGENT_AGENT_H

#include <uv.h>

#include "board.h"
#include "config.h"

typedef struct em_agent em_agent_t;

/*
 * Builds the agent for `cfg` (copied) on `loop`. `board` (may be NULL: every sensor probed,
 * NVML off, 1 s) says which sensors to read and how often (board.h [sensors]). Returns 0 and
 * *out, -ENOMEM, or -EINVAL when the config names no target. A PMU event the machine does
 * not have is absent with its reason, not an error. On failure what it made is being closed
 * on the loop, and freed by the close callbacks when the loop next runs (uv_run).
 */
int em_agent_new(em_agent_t **out, uv_loop_t *loop, const em_config_t *cfg,
                 const em_board_profile_t *board, const char *version);

/* Starts the spool's sync thread, sampling and connecting. Returns 0, or a negative errno
 * (the sync thread could not start: nothing else was started). */
int em_agent_start(em_agent_t *a);

/*
 * Applies a reloaded config (SIGHUP) without losing histograms, the level or the broker
 * connection: the budget rules and their windows (rules kept by id keep their state, see
 * em_budget_adopt), and the target (re-attached when it changed). Settings that need a restart
 * (device, broker, events, sample period, sockets, hook) keep their running values with a
 * warning naming the first one. Publishes a birth (it lists the budgets). Returns 0, or
 * -EINVAL (the rules were refused: the running config stays in force).
 */
int em_agent_reload(em_agent_t *a, const em_config_t *next);

/*
 * Stops: publishes status offline, disconnects, closes every handle, ends the sync thread and
 * waits for the worker jobs (each counted), then calls done(ctx) from the loop (the loop then
 * has nothing left of the agent's: uv_run returns and uv_loop_close succeeds).
 */
void em_agent_stop(em_agent_t *a, void (*done)(void *), void *ctx);

/* Frees after stop's done. NULL is a no-op. */
void em_agent_free(em_agent_t *a);

#endif /* EDGEMON_AGENT_AGENT_H */
