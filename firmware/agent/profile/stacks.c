/*
 * stacks.c - see stacks.h. Stacks live in an array in the order first seen, their addresses in
 * one pool; an open-addressing hash index (twice max_stacks slots, a power of two) finds a
 * stack by its addresses. Threads for off-CPU time live in a second open-addressing table
 * keyed by tid. The optional log is an array appended to on every stored sample and charged
 * off-CPU interval.
 */
#include "stacks.h"

#include <errno.h>
#include <linux/perf_event.h>
#include <stdlib.h>
#include <string.h>

#include "edgemon/profile.h"

#define NO_STACK     UINT32_MAX
#define THREAD_SLOTS (2u * EM_STACKS_MAX_THREADS)

typedef struct {
  uint64_t hash;
  uint32_t off; /* Into addrs. */
  uint16_t n_user;
  uint16_t n_kernel;
  uint64_t samples;
  uint64_t off_cpu_ns;
} stack_t_;

typedef struct {
  uint32_t tid; /* 0: free. */
  uint32_t last_stack;
  uint32_t last_log; /* The log entry of its last sample, or NO_STACK. */
  uint64_t out_ns;   /* Switched out since, 0: on CPU or unknown. */
} thread_t_;

struct em_stacks {
  stack_t_ *stacks;
  uint32_t max_stacks, n_stacks;
  uint32_t *index; /* index_mask + 1 slots: stack number, or NO_STACK. */
  uint32_t index_mask;
  uint64_t *addrs;
  uint32_t max_addrs, n_addrs;
  em_stacks_log_entry_t *log; /* max_log entries, or NULL. */
  uint32_t max_log, n_log;
  thread_t_ *threads; /* THREAD_SLOTS */
  uint32_t n_threads;
  em_stacks_sample_fn on_sample;
  void *on_sample_ctx;
  uint64_t bytes;
  em_stacks_stats_t st;
};

int em_stacks_new(em_stacks_t **out, uint32_t max_stacks, uint32_t max_addrs) {
  if (!out || max_stacks == 0 || max_stacks > EM_PROFILE_MAX_STACKS || max_addrs == 0) {
    return -EINVAL;
  }
  em_stacks_t *s = calloc(1, sizeof(*s));
  if (!s) {
    return -ENOMEM;
  }
  uint32_t slots = 1;
  while (slots < 2 * max_stacks) {
    slots <<= 1;
  }
  s->max_stacks = max_stacks;
  s->max_addrs = max_addrs;
  s->index_mask = slots - 1;
  s->stacks = calloc(max_stacks, sizeof(*s->stacks));
  s->index = malloc(slots * sizeof(*s->index));
  s->addrs = calloc(max_addrs, sizeof(*s->addrs));
  s->threads = calloc(THREAD_SLOTS, sizeof(*s->threads));
  if (!s->stacks || !s->index || !s->addrs || !s->threads) {
    em_stacks_free(s);
    return -ENOMEM;
  }
  s->bytes = sizeof(*s) + (uint64_t)max_stacks * sizeof(*s->stacks) +
             (uint64_t)slots * sizeof(*s->index) + (uint64_t)max_addrs * sizeof(*s->addrs) +
             (uint64_t)THREAD_SLOTS * sizeof(*s->threads);
  em_stacks_reset(s);
  *out = s;
  return 0;
}

void em_stacks_free(em_stacks_t *s) {
  if (!s) {
    return;
  }
  free(s->stacks);
  free(s->index);
  free(s->addrs);
  free(s->threads);
  free(s->log);
  free(s);
}

uint64_t em_stacks_bytes(const em_stacks_t *s) {
  return s ? s->bytes : 0;
}

int em_stacks_log_alloc(em_stacks_t *s, uint32_t max_samples) {
  if (!s || max_samples == 0) {
    return -EINVAL;
  }
  if (s->log) {
    return -EEXIST;
  }
  s->log = calloc(max_samples, sizeof(*s->log));
  if (!s->log) {
    return -ENOMEM;
  }
  s->max_log = max_samples;
  s->bytes += (uint64_t)max_samples * sizeof(*s->log);
  return 0;
}

size_t em_stacks_log_count(const em_stacks_t *s) {
  return s->n_log;
}

em_stacks_log_entry_t em_stacks_log_get(const em_stacks_t *s, size_t i) {
  return s->log[i];
}

void em_stacks_reset(em_stacks_t *s) {
  s->n_stacks = 0;
  s->n_addrs = 0;
  memset(s->index, 0xff, ((size_t)s->index_mask + 1) * sizeof(*s->index));
  memset(s->threads, 0, THREAD_SLOTS * sizeof(*s->threads));
  s->n_threads = 0;
  s->n_log = 0;
  memset(&s->st, 0, sizeof(s->st));
}

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

/* The thread's slot, created when `create` and there is room; NULL otherwise. */
static thread_t_ *thread_slot(em_stacks_t *s, uint32_t tid, bool create) {
  if (tid == 0) {
    return NULL;
  }
  uint32_t i = (tid * 2654435761u) & (THREAD_SLOTS - 1);
  for (uint32_t probe = 0; probe < THREAD_SLOTS; probe++, i = (i + 1) & (THREAD_SLOTS - 1)) {
    if (s->threads[i].tid == tid) {
      return &s->threads[i];
    }
    if (s->threads[i].tid == 0) {
      if (!create || s->n_threads >= EM_STACKS_MAX_THREADS) {
        return NULL;
      }
      s->n_threads++;
      s->threads[i] = (thread_t_){.tid = tid, .last_stack = NO_STACK, .last_log = NO_STACK};
      return &s->threads[i];
    }
  }
  return NULL;
}

/*
 * The chain, leaf first with markers, into tmp root first: user frames then kernel frames.
 * Returns the number of addresses; *n_kernel how many are kernel frames; *deep when the root
 * side was cut at EM_PROFILE_MAX_DEPTH.
 */
static size_t unfold(const em_perf_rec_t *r, uint64_t *tmp, uint32_t *n_kernel, bool *deep) {
  uint64_t user[EM_PROFILE_MAX_DEPTH], kern[EM_PROFILE_MAX_DEPTH];
  size_t nu = 0, nk = 0;
  bool in_kernel = false, first = true;
  *deep = false;
  for (size_t i = 0; i < r->n_chain; i++) {
    uint64_t ip = em_perf_rec_ip(r, i);
    if (ip >= (uint64_t)PERF_CONTEXT_MAX) {
      if (ip == (uint64_t)PERF_CONTEXT_KERNEL) {
        in_kernel = true;
      } else if (ip == (uint64_t)PERF_CONTEXT_USER) {
        in_kernel = false;
      } else {
        break; /* Guest or hypervisor frames: not the target's. */
      }
      first = true;
      continue;
    }
    if (ip == 0) {
      continue;
    }
    uint64_t a = first ? ip : ip - 1;
    first = false;
    if (nu + nk >= EM_PROFILE_MAX_DEPTH) {
      *deep = true;
      break;
    }
    if (in_kernel) {
      kern[nk++] = a;
    } else {
      user[nu++] = a;
    }
  }
  size_t n = 0;
  for (size_t i = nu; i > 0; i--) {
    tmp[n++] = user[i - 1];
  }
  for (size_t i = nk; i > 0; i--) {
    tmp[n++] = kern[i - 1];
  }
  *n_kernel = (uint32_t)nk;
  return n;
}

/* The stack of addresses tmp[0..n) (the last n_kernel kernel frames), added when new; NO_STACK
 * when it is new and the table has no room. */
static uint32_t find_or_add(em_stacks_t *s, const uint64_t *tmp, size_t n, uint32_t n_kernel) {
  uint64_t h = mix(n_kernel, n);
  for (size_t i = 0; i < n; i++) {
    h = mix(h, tmp[i]);
  }
  uint32_t slot = (uint32_t)h & s->index_mask;
  uint32_t found = NO_STACK;
  while (s->index[slot] != NO_STACK) {
    stack_t_ *k = &s->stacks[s->index[slot]];
    if (k->hash == h && k->n_user + k->n_kernel == n && k->n_kernel == n_kernel &&
        memcmp(s->addrs + k->off, tmp, n * sizeof(*tmp)) == 0) {
      found = s->index[slot];
      break;
    }
    slot = (slot + 1) & s->index_mask;
  }
  if (found == NO_STACK) {
    if (s->n_stacks >= s->max_stacks || s->max_addrs - s->n_addrs < n) {
      return NO_STACK;
    }
    found = s->n_stacks++;
    s->stacks[found] = (stack_t_){.hash = h,
                                  .off = s->n_addrs,
                                  .n_user = (uint16_t)(n - n_kernel),
                                  .n_kernel = (uint16_t)n_kernel};
    memcpy(s->addrs + s->n_addrs, tmp, n * sizeof(*tmp));
    s->n_addrs += (uint32_t)n;
    s->index[slot] = found;
  }
  return found;
}

int em_stacks_add(em_stacks_t *s, const em_perf_rec_t *r) {
  if (!s || !r || r->kind != EM_PERF_REC_SAMPLE) {
    return -EINVAL;
  }
  uint64_t tmp[EM_PROFILE_MAX_DEPTH];
  uint32_t n_kernel = 0;
  bool deep = false;
  size_t n = unfold(r, tmp, &n_kernel, &deep);
  if (n == 0) {
    s->st.empty++;
    return -ENODATA;
  }
  s->st.deep += deep;
  uint32_t found = find_or_add(s, tmp, n, n_kernel);
  if (found == NO_STACK) {
    s->st.cut++;
    return -ENOSPC;
  }
  s->stacks[found].samples++;
  s->st.samples++;
  uint32_t logged = NO_STACK;
  if (s->n_log < s->max_log) {
    logged = s->n_log;
    s->log[s->n_log++] = (em_stacks_log_entry_t){
        .tid = r->tid, .stack = found, .time_ns = r->time_ns, .from = NO_STACK};
    if (s->on_sample) {
      s->on_sample(s->on_sample_ctx, logged, r);
    }
  } else {
    s->st.log_cut++;
  }
  s->st.kernel += n_kernel > 0;
  thread_t_ *t = thread_slot(s, r->tid, true);
  if (t) {
    t->last_stack = found;
    t->last_log = logged;
  }
  return 0;
}

/* Charges thread t's off-CPU interval, from its switch out to in_ns, to its last stack. */
static void charge_off_cpu(em_stacks_t *s, const thread_t_ *t, uint64_t in_ns) {
  uint64_t d = in_ns - t->out_ns;
  s->stacks[t->last_stack].off_cpu_ns += d;
  s->st.off_cpu_ns += d;
  if (s->n_log < s->max_log) {
    s->log[s->n_log++] = (em_stacks_log_entry_t){.tid = t->tid,
                                                 .stack = t->last_stack,
                                                 .time_ns = t->out_ns,
                                                 .off_cpu_ns = d,
                                                 .from = t->last_log};
  }
}

void em_stacks_switch(em_stacks_t *s, const em_perf_rec_t *r) {
  if (!s || !r || r->kind != EM_PERF_REC_SWITCH) {
    return;
  }
  s->st.switches++;
  thread_t_ *t = thread_slot(s, r->tid, r->switch_out);
  if (!t) {
    return;
  }
  if (r->switch_out) {
    t->out_ns = r->time_ns;
    return;
  }
  if (t->out_ns && r->time_ns > t->out_ns && t->last_stack != NO_STACK) {
    charge_off_cpu(s, t, r->time_ns);
  }
  t->out_ns = 0;
}

void em_stacks_close(em_stacks_t *s, uint64_t end_ns) {
  for (uint32_t i = 0; i < THREAD_SLOTS; i++) {
    thread_t_ *t = &s->threads[i];
    if (t->tid && t->out_ns && end_ns > t->out_ns && t->last_stack != NO_STACK) {
      charge_off_cpu(s, t, end_ns);
    }
    t->out_ns = 0;
  }
}

void em_stacks_on_sample(em_stacks_t *s, em_stacks_sample_fn fn, void *ctx) {
  s->on_sample = fn;
  s->on_sample_ctx = ctx;
}

int em_stacks_rechain(em_stacks_t *s, size_t log_index, const uint64_t *user, uint32_t n_user) {
  if (!s || log_index >= s->n_log || !user || n_user == 0 || s->log[log_index].off_cpu_ns != 0) {
    return -EINVAL;
  }
  em_stacks_log_entry_t *l = &s->log[log_index];
  const stack_t_ *old = &s->stacks[l->stack];
  uint32_t n_kernel = old->n_kernel;
  if (n_user > EM_PROFILE_MAX_DEPTH - n_kernel) { /* The root side goes, as unfold() cuts it. */
    user += n_user - (EM_PROFILE_MAX_DEPTH - n_kernel);
    n_user = EM_PROFILE_MAX_DEPTH - n_kernel;
  }
  if (n_user == 0) {
    return -EINVAL;
  }
  uint64_t tmp[EM_PROFILE_MAX_DEPTH];
  memcpy(tmp, user, n_user * sizeof(*tmp));
  memcpy(tmp + n_user, s->addrs + old->off + old->n_user, n_kernel * sizeof(*tmp));
  uint32_t found = find_or_add(s, tmp, n_user + n_kernel, n_kernel);
  if (found == NO_STACK) {
    return -ENOSPC;
  }
  s->stacks[l->stack].samples--;
  s->stacks[found].samples++;
  l->stack = found;
  return 0;
}

void em_stacks_rechain_off_cpu(em_stacks_t *s) {
  for (uint32_t i = 0; s && i < s->n_log; i++) {
    em_stacks_log_entry_t *l = &s->log[i];
    if (l->off_cpu_ns == 0 || l->from >= s->n_log || s->log[l->from].stack == l->stack) {
      continue;
    }
    s->stacks[l->stack].off_cpu_ns -= l->off_cpu_ns;
    s->stacks[s->log[l->from].stack].off_cpu_ns += l->off_cpu_ns;
    l->stack = s->log[l->from].stack;
  }
}

size_t em_stacks_count(const em_stacks_t *s) {
  return s->n_stacks;
}

em_stacks_entry_t em_stacks_get(const em_stacks_t *s, size_t i) {
  const stack_t_ *k = &s->stacks[i];
  return (em_stacks_entry_t){.addrs = s->addrs + k->off,
                             .n_user = k->n_user,
                             .n_kernel = k->n_kernel,
                             .samples = k->samples,
                             .off_cpu_ns = k->off_cpu_ns};
}

const em_stacks_stats_t *em_stacks_stats(const em_stacks_t *s) {
  return &s->st;
}
