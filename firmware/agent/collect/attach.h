/*
 * attach.h - the target's lifecycle: finding it (target.h), attaching the sampling to it
 * (sampling.h: the PMU and the target's procfs files), noticing it left, and looking for it
 * again every 250 ms until it is back, so a restarted target is re-attached within a second.
 * A wrapper (su, sudo -u, sh -c) whose child matches too is left for the child, which is
 * the one that writes the spans.
 *
 *   state      event                                 function              next
 *   DETACHED   lookup found a pid (or a cgroup)      em_attach_try         ATTACHED (on_attached)
 *   DETACHED   nothing found                         em_attach_try         DETACHED (said once)
 *   ATTACHED   statm says the pid is gone            em_attach_detach      DETACHED
 *   ATTACHED   a matching child of a wrapper         em_attach_follow      ATTACHED (the child)
 *   any        a reloaded [target] differs           em_attach_retarget    DETACHED, then try
 *   DETACHED: the lookup timer runs every 250 ms; ATTACHED: it is stopped.
 *
 * Owns: the lookup timer (closed by em_attach_close), the attached pid and the attach count.
 * Borrows the sampling. Single-threaded (the loop's thread).
 */
#ifndef EDGEMON_AGENT_ATTACH_H
#define EDGEMON_AGENT_ATTACH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "sampling.h"
#include "target.h"

typedef struct {
  uv_loop_t *loop;
  em_sampling_t *sampling;        /* Borrowed: attached and detached. */
  const em_target_spec_t *spec;   /* Copied. */
  const char *proc_root;          /* Borrowed: outlives the attach. */
  void (*on_attached)(void *ctx); /* After every attach (the birth says what is absent now). */
  void *ctx;
} em_attach_opts_t;

typedef struct em_attach em_attach_t;

/* Returns 0 and *out (detached; nothing looked up yet), -EINVAL or -ENOMEM. */
int em_attach_new(em_attach_t **out, const em_attach_opts_t *opts);

/* Frees after em_attach_close's callback. NULL is a no-op. */
void em_attach_free(em_attach_t *at);

/* Looks once, then every 250 ms while detached. */
void em_attach_start(em_attach_t *at);

/* Closes the lookup timer; done(ctx) is called from the loop once it is closed. */
void em_attach_close(em_attach_t *at, void (*done)(void *), void *ctx);

/* The attached target: > 0 a pid, -1 a cgroup, 0 detached. */
pid_t em_attach_pid(const em_attach_t *at);

/* Attaches since start. */
uint64_t em_attach_count(const em_attach_t *at);

/* Looks for the target now and attaches when found (not while an smaps read of the last one
 * runs: the lookup timer comes back). */
void em_attach_try(em_attach_t *at);

/* Detaches and starts the lookup timer. why: the log's reason ("exited"), or NULL when the
 * caller says what happens instead. */
void em_attach_detach(em_attach_t *at, const char *why);

/* A wrapper's matching child: moves to it. Call it on a slow cadence (it reads the children's
 * files). */
void em_attach_follow(em_attach_t *at);

/* A reloaded [target]: when it differs from the running one, detaches and looks for the new
 * one at once. Returns true when it changed. */
bool em_attach_retarget(em_attach_t *at, const em_target_spec_t *spec);

#endif /* EDGEMON_AGENT_ATTACH_H */
