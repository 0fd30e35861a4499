/*
 * stages.h - the stage table of span ingest: one latency window per stage name, in a table
 * whose size is fixed at start-up ([spans] max_stages), with slots reserved for the stages the
 * budgets name and the eviction of idle stages when a new name needs a slot.
 *
 * Rules (N = capacity, R = reserved names not in the table yet):
 *   1. A name in the table keeps its slot and index while it is in use.
 *   2. A reserved name (one a budget rule names: [budget.<stage>] or a flow's stages) always
 *      finds a slot: a free one, else the one of the unreserved stage seen longest ago,
 *      evicted whatever its idle time (a reload reserved a name while the table was full).
 *   3. An unreserved name takes a free slot only while R slots stay free for the reserved
 *      names; else it takes the slot of the unreserved stage seen longest ago, when that one
 *      has had no span or heartbeat for idle_ns ([spans] stage_idle); else it is refused
 *      (the caller counts its spans as overflow).
 *   4. An evicted stage's slot is reused in place for the new name (its window and total
 *      start empty), so indices 0..count-1 stay dense; evictions are counted and the owner
 *      hears of each (on_evict) before the slot is reused, to drop what it keeps per index.
 *   5. Reserved stages are never evicted for an unreserved name. More reserved names than N:
 *      the first N (in the order given) are reserved, the others are treated as unreserved.
 *
 * Data messages carry stage windows by name (not by a dictionary alias), so an eviction needs
 * no rebirth: the evicted stage is absent from the next data messages, the new one present.
 *
 * Owns: the table and the reserved names (two allocations made by em_stages_init; nothing is
 * allocated afterwards). Single-threaded.
 */
#ifndef EDGEMON_AGENT_STAGES_H
#define EDGEMON_AGENT_STAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "edgemon/wire.h"
#include "hist.h"

/* One stage. */
typedef struct {
  char name[EM_STAGE_FIELD_BYTES];
  em_hist_t window;      /* Spans since the last em_stages_window_reset(). */
  uint64_t total;        /* Spans since the stage took its slot. */
  uint64_t last_seen_ns; /* CLOCK_MONOTONIC (agent's clock) of the last span or heartbeat, or
                            of the slot's creation. */
  bool reserved;         /* A budget names it: see rule 5. */
} em_stage_stats_t;

/* Called with the index of a slot about to be reused and the names leaving and arriving
 * (borrowed for the call). */
typedef void (*em_stages_evict_fn)(void *ctx, size_t index, const char *evicted,
                                   const char *arriving);

typedef struct {
  em_stage_stats_t *entries; /* cap entries; 0..n-1 in use. */
  size_t cap;
  size_t n;
  char (*reserved)[EM_STAGE_FIELD_BYTES]; /* cap names; 0..n_reserved-1 in use. */
  size_t n_reserved;
  size_t n_reserved_in;        /* Reserved names that hold a slot. */
  uint64_t idle_ns;            /* Rule 3. */
  uint64_t evictions;          /* Slots reused for another name since init. */
  em_stages_evict_fn on_evict; /* May be NULL. */
  void *ctx;
} em_stages_t;

/*
 * Allocates a table of cap (1..EM_PROTO_MAX_STAGES) stages, none reserved, whose unreserved
 * stages are evictable after idle_ns (> 0) without a span. Returns 0 or -EINVAL / -ENOMEM
 * (then nothing is held).
 */
int em_stages_init(em_stages_t *t, size_t cap, uint64_t idle_ns, em_stages_evict_fn on_evict,
                   void *ctx);

/* Frees what init allocated; a zeroed table is a no-op. */
void em_stages_deinit(em_stages_t *t);

/*
 * Replaces the reserved names and the idle time (start-up and reload). names[0..n) are
 * borrowed for the call; NULL, empty, too long and repeated names are skipped. Stages in the
 * table are marked reserved or not accordingly; none is evicted here. Returns the number of
 * distinct names given; the first cap of them are reserved (rule 5).
 */
size_t em_stages_policy(em_stages_t *t, const char *const *names, size_t n, uint64_t idle_ns);

/*
 * The stage named `name` (NUL-terminated, 1..EM_STAGE_FIELD_BYTES-1 bytes), given a slot on
 * first sight by the rules above, at now_ns. NULL when it gets none.
 */
em_stage_stats_t *em_stages_get(em_stages_t *t, const char *name, uint64_t now_ns);

/* Empties every stage's window (after it was published). */
void em_stages_window_reset(em_stages_t *t);

#endif /* EDGEMON_AGENT_STAGES_H */
