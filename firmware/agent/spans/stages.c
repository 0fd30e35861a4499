/*
 * stages.c - see stages.h for the rules of the table.
 *
 * Invariants:
 *   1. n <= cap; n_reserved <= cap; n_reserved_in = the entries marked reserved, and every
 *      entry marked reserved has its name among reserved[0..n_reserved).
 *   2. n + (n_reserved - n_reserved_in) <= cap holds after every em_stages_get that adds an
 *      unreserved name (rule 3); a reload may break it for a while (rule 2 restores it as the
 *      reserved names arrive).
 *
 * Cost: a lookup is a linear scan of at most cap (<= 64) names, as before this table had
 * reservations; a name not in the table adds one scan of the reserved names and, when the
 * table is full, one scan for the stage seen longest ago. Nothing is allocated after init.
 */
#include "stages.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

int em_stages_init(em_stages_t *t, size_t cap, uint64_t idle_ns, em_stages_evict_fn on_evict,
                   void *ctx) {
  if (!t || cap == 0 || cap > EM_PROTO_MAX_STAGES || idle_ns == 0) {
    return -EINVAL;
  }
  memset(t, 0, sizeof(*t));
  t->entries = calloc(cap, sizeof(*t->entries));
  t->reserved = calloc(cap, sizeof(*t->reserved));
  if (!t->entries || !t->reserved) {
    em_stages_deinit(t);
    return -ENOMEM;
  }
  t->cap = cap;
  t->idle_ns = idle_ns;
  t->on_evict = on_evict;
  t->ctx = ctx;
  return 0;
}

void em_stages_deinit(em_stages_t *t) {
  if (!t) {
    return;
  }
  free(t->entries);
  free(t->reserved);
  memset(t, 0, sizeof(*t));
}

static bool is_reserved(const em_stages_t *t, const char *name) {
  for (size_t i = 0; i < t->n_reserved; i++) {
    if (strcmp(t->reserved[i], name) == 0) {
      return true;
    }
  }
  return false;
}

static bool name_ok(const char *name) {
  return name && name[0] && strlen(name) < EM_STAGE_FIELD_BYTES;
}

size_t em_stages_policy(em_stages_t *t, const char *const *names, size_t n, uint64_t idle_ns) {
  if (!t || !t->entries) {
    return 0;
  }
  if (idle_ns) {
    t->idle_ns = idle_ns;
  }
  t->n_reserved = 0;
  size_t distinct = 0;
  for (size_t i = 0; names && i < n; i++) {
    if (!name_ok(names[i])) {
      continue;
    }
    bool repeated = false;
    for (size_t j = 0; j < i && !repeated; j++) {
      repeated = name_ok(names[j]) && strcmp(names[j], names[i]) == 0;
    }
    if (repeated) {
      continue;
    }
    distinct++;
    if (t->n_reserved < t->cap) {
      memcpy(t->reserved[t->n_reserved], names[i], strlen(names[i]) + 1);
      t->n_reserved++;
    }
  }
  t->n_reserved_in = 0;
  for (size_t i = 0; i < t->n; i++) {
    t->entries[i].reserved = is_reserved(t, t->entries[i].name);
    t->n_reserved_in += t->entries[i].reserved;
  }
  return distinct;
}

/*
 * The unreserved stage seen longest ago, when it has been idle for idle_ns or `any_idle` says
 * its idle time does not matter; NULL when there is none.
 */
static em_stage_stats_t *victim(em_stages_t *t, uint64_t now_ns, bool any_idle) {
  em_stage_stats_t *v = NULL;
  for (size_t i = 0; i < t->n; i++) {
    em_stage_stats_t *e = &t->entries[i];
    if (!e->reserved && (!v || e->last_seen_ns < v->last_seen_ns)) {
      v = e;
    }
  }
  if (!v || any_idle) {
    return v;
  }
  bool idle = now_ns >= v->last_seen_ns && now_ns - v->last_seen_ns >= t->idle_ns;
  return idle ? v : NULL;
}

/* Gives entry e to `name` (fresh window, marked as reserved or not). */
static void take_slot(em_stages_t *t, em_stage_stats_t *e, const char *name, bool reserved,
                      uint64_t now_ns) {
  memset(e->name, 0, sizeof(e->name));
  memcpy(e->name, name, strlen(name));
  em_hist_init(&e->window);
  e->total = 0;
  e->last_seen_ns = now_ns;
  e->reserved = reserved;
  t->n_reserved_in += reserved;
}

em_stage_stats_t *em_stages_get(em_stages_t *t, const char *name, uint64_t now_ns) {
  for (size_t i = 0; i < t->n; i++) {
    if (strcmp(t->entries[i].name, name) == 0) {
      return &t->entries[i];
    }
  }
  if (!name_ok(name)) {
    return NULL;
  }
  bool reserved = is_reserved(t, name);
  size_t held_back = reserved ? 0 : t->n_reserved - t->n_reserved_in;
  if (t->n + held_back < t->cap) {
    em_stage_stats_t *e = &t->entries[t->n++];
    take_slot(t, e, name, reserved, now_ns);
    EM_INFO("spans: new stage '%s'%s (%zu of %zu)", e->name, reserved ? " (budgeted)" : "", t->n,
            t->cap);
    return e;
  }
  em_stage_stats_t *v = victim(t, now_ns, reserved);
  if (!v) {
    return NULL;
  }
  size_t ix = (size_t)(v - t->entries);
  uint64_t idle_ms = now_ns >= v->last_seen_ns ? (now_ns - v->last_seen_ns) / 1000000u : 0;
  EM_INFO("spans: stage '%s' (no span for %llu ms) gives its slot to '%s'%s", v->name,
          (unsigned long long)idle_ms, name, reserved ? " (budgeted)" : "");
  if (t->on_evict) {
    t->on_evict(t->ctx, ix, v->name, name);
  }
  t->evictions++;
  take_slot(t, v, name, reserved, now_ns);
  return v;
}

void em_stages_window_reset(em_stages_t *t) {
  for (size_t i = 0; i < t->n; i++) {
    em_hist_reset(&t->entries[i].window);
  }
}
