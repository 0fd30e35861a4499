/*
 * agent.h - the agent itself: ties the target lookup, the PMU, the procfs readers, the span
 * socket and the publisher to one libuv loop. Every sample period it reads each PMU group
 * once, reads statm (MemAvailable, PSI and smaps_rollup on slower cadences), takes the stage
 * windows the spans filled, encodes one v1 data message and hands it to the publisher. It
 * attaches to the target when it appears, notices when it exits, and re-attaches within a
 * second when it comes back.
 *
 * Owns: the PMU and procfs readers, the span socket, the publisher and the store and forward
 * behind it (forward.h), the metric dictionary (figures.h), the tick and lookup timers, and
 * the buffers sized at start-up (samples, stage windows, encode buffer); nothing is
 * allocated per tick. Everything runs on the loop's thread except
 * the smaps_rollup read, which libuv's single worker thread runs (see procfs.h).
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
 * not have is absent with its reason, not an error.
 */
int em_agent_new(em_agent_t **out, uv_loop_t *loop, const em_config_t *cfg,
                 const em_board_profile_t *board, const char *version);

/* Starts sampling and connecting. Returns 0 or a negative errno. */
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
 * Stops: publishes status offline, disconnects, closes every handle, then calls done(ctx)
 * from the loop (the loop then has nothing left of the agent's and uv_run returns).
 */
void em_agent_stop(em_agent_t *a, void (*done)(void *), void *ctx);

/* Frees after stop's done. NULL is a no-op. */
void em_agent_free(em_agent_t *a);

#endif /* EDGEMON_AGENT_AGENT_H */
