/*
 * attach.c - see attach.h.
 */
#define _POSIX_C_SOURCE 200809L

#include "attach.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define LOOKUP_MS 250u /* Re-attach within a second of the target's return. */

struct em_attach {
  em_attach_opts_t o;
  em_target_spec_t spec;
  uv_timer_t lookup;
  pid_t pid; /* Attached target, 0 when detached; cgroup targets use -1. */
  uint64_t attaches;
  bool logged_waiting; /* "waiting for" said since the last attach. */
  void (*closed)(void *);
  void *closed_ctx;
};

static void on_lookup(uv_timer_t *t) {
  em_attach_try(t->data);
}

int em_attach_new(em_attach_t **out, const em_attach_opts_t *opts) {
  if (!out || !opts || !opts->loop || !opts->sampling || !opts->spec || !opts->proc_root) {
    return -EINVAL;
  }
  em_attach_t *at = calloc(1, sizeof(*at));
  if (!at) {
    return -ENOMEM;
  }
  at->o = *opts;
  at->spec = *opts->spec;
  at->o.spec = &at->spec;
  uv_timer_init(opts->loop, &at->lookup);
  at->lookup.data = at;
  *out = at;
  return 0;
}

void em_attach_free(em_attach_t *at) {
  free(at);
}

void em_attach_start(em_attach_t *at) {
  em_attach_try(at);
  if (at->pid == 0) {
    uv_timer_start(&at->lookup, on_lookup, LOOKUP_MS, LOOKUP_MS);
  }
}

static void on_closed(uv_handle_t *h) {
  em_attach_t *at = h->data;
  at->closed(at->closed_ctx);
}

void em_attach_close(em_attach_t *at, void (*done)(void *), void *ctx) {
  at->closed = done;
  at->closed_ctx = ctx;
  uv_close((uv_handle_t *)&at->lookup, on_closed);
}

pid_t em_attach_pid(const em_attach_t *at) {
  return at->pid;
}

uint64_t em_attach_count(const em_attach_t *at) {
  return at->attaches;
}

void em_attach_detach(em_attach_t *at, const char *why) {
  if (at->pid > 0 && why != NULL) {
    EM_WARN("target: pid %ld %s; waiting for it to come back", (long)at->pid, why);
  }
  em_sampling_detach(at->o.sampling);
  at->pid = 0;
  uv_timer_start(&at->lookup, on_lookup, LOOKUP_MS, LOOKUP_MS);
}

/* Opens the PMU and the target's procfs files for `pid` (or the cgroup when pid is -1). */
static void attach(em_attach_t *at, pid_t pid) {
  size_t present = 0;
  int rc = em_sampling_attach(at->o.sampling, pid, at->spec.value, &present);
  if (rc) {
    return; /* Gone, or the old files in use: the lookup timer tries again. */
  }
  at->pid = pid;
  at->attaches++;
  at->logged_waiting = false;
  uv_timer_stop(&at->lookup);
  char desc[EM_TARGET_MAX_VALUE + 64];
  em_target_describe(&at->spec, desc, sizeof(desc));
  size_t n_events = 0;
  (void)em_sampling_events(at->o.sampling, &n_events);
  if (pid > 0) {
    EM_INFO("target: attached to pid %ld (%s), %zu of %zu counters", (long)pid, desc, present,
            n_events);
  } else {
    EM_INFO("target: attached to %s, %zu of %zu counters", desc, present, n_events);
  }
  at->o.on_attached(at->o.ctx);
}

void em_attach_try(em_attach_t *at) {
  if (em_sampling_busy(at->o.sampling)) {
    return; /* The old target's files are in use; the lookup timer comes back. */
  }
  if (at->spec.kind == EM_TARGET_CGROUP) {
    attach(at, -1);
    return;
  }
  char why[128];
  pid_t pid = em_target_find(&at->spec, at->o.proc_root, why, sizeof(why));
  if (pid > 0) {
    attach(at, pid);
    return;
  }
  if (!at->logged_waiting) {
    char desc[EM_TARGET_MAX_VALUE + 64];
    em_target_describe(&at->spec, desc, sizeof(desc));
    EM_INFO("target: waiting for %s (%s)", desc, pid < 0 ? strerror((int)-pid) : why);
    at->logged_waiting = true;
  }
}

void em_attach_follow(em_attach_t *at) {
  if (at->pid <= 0 || em_sampling_busy(at->o.sampling)) {
    return;
  }
  /* A wrapper (su, sudo -u, sh -c) whose child now matches: the child writes the spans. */
  pid_t next = em_target_successor(&at->spec, at->o.proc_root, at->pid);
  if (next > 0) {
    EM_INFO("target: pid %ld wraps pid %ld, which matches too; moving to it", (long)at->pid,
            (long)next);
    em_attach_detach(at, NULL);
    attach(at, next);
  }
}

bool em_attach_retarget(em_attach_t *at, const em_target_spec_t *spec) {
  bool changed = at->spec.kind != spec->kind || at->spec.pid != spec->pid ||
                 strcmp(at->spec.value, spec->value) != 0;
  if (!changed) {
    return false;
  }
  at->spec = *spec;
  char desc[EM_TARGET_MAX_VALUE + 64];
  em_target_describe(&at->spec, desc, sizeof(desc));
  EM_INFO("reload: target is now %s", desc);
  if (at->pid != 0) {
    em_attach_detach(at, "is no longer the target");
  }
  at->logged_waiting = false;
  em_attach_try(at); /* Calls on_attached when it attaches. */
  return true;
}
