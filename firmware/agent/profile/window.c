/*
 * window.c - see window.h. Assembly on the worker: the distinct addresses of every stack,
 * sorted (user addresses below 2^63, kernel ones above, on x86-64 and arm64 alike), resolved
 * in two runs; each address's frame found in or added to the frame table (an open-addressing
 * index over (name, module, kind)); each stack rewritten as frame indices and merged with an
 * equal one (a second index); the stacks sorted by descending samples.
 *
 * Logged entries (stacks.h: a sample, or an off-CPU interval, with its thread and time) come
 * first: each takes the stage of its thread's span at its time (spanlog.h) and, when the
 * client's datagram is held, the Python frames of its thread's nearest Python sample
 * (pymerge.h), and is merged as a stack of its own under (stage, frames). What a stack did not
 * give away that way (unlogged samples and intervals, and those that gained neither a stage nor
 * Python frames) is merged with its native frames and no stage. The merged table holds twice
 * max_stacks entries and twice EM_WINDOW_MAX_ADDRS frames: logged entries may take only the
 * first half (and no more than EM_PROFILE_MAX_STACKS less the native stacks), so the native
 * stacks always fit after them.
 */
#define _GNU_SOURCE

#include "window.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pymerge.h"
#include "spanlog.h"
#include "stacks.h"
#include "symbols.h"
#include "unwind.h"

#define MAPS_BYTES   (256u * 1024u) /* The maps snapshot: enough for a few thousand maps. */
#define NOTE_BYTES   256u
#define KERNEL_FIRST (1ull << 63)
#define NONE         UINT32_MAX
#define UNSET        (UINT32_MAX - 1)
#define FRAME_SLOTS  (2u * EM_PROFILE_MAX_FRAMES)
#define SPAN_LOG     8192u      /* Spans a window keeps: 5 s of 1600 spans/s. */
#define UNWIND_POOL  (8u << 20) /* Stack copies: ~5 s of one busy thread at 99 Hz. */

typedef struct {
  uint32_t off; /* Into fidx. */
  uint32_t n;
  uint32_t stage; /* A spanlog stage, or EM_PROFILE_NO_STAGE. */
  uint64_t hash;
  uint64_t samples;
  uint64_t off_cpu_ns;
} merged_t;

struct em_window {
  em_window_opts_t o;
  char proc_root[256];
  em_window_state_t state;
  em_sampler_t *sampler;
  em_stacks_t *stacks;
  em_symbols_t *symbols;
  em_pymerge_t *py;
  em_spanlog_t *spans;
  em_unwind_t *unwind;      /* NULL: frame-pointer chains only. */
  uint64_t await_until_ns;  /* AWAIT: when to stop waiting for the Python stacks. */
  uint64_t settle_until_ns; /* AWAIT: spans of the window's end still on their way till then. */

  pid_t pid;
  uint64_t start_ns, end_ns, wall_ns;
  bool have_last;
  uint64_t last_start_ns;
  uint32_t number;    /* The next published window's (escalations and commands). */
  uint32_t baselines; /* Baseline windows opened. */
  bool baseline;      /* The open window is a baseline (em_window_baseline). */
  uint32_t request;   /* The open window's number on the request page and Python stacks. */
  em_profile_trigger_t trig;
  char trig_rule[64], trig_stage[64], trig_reason[160];

  char *maps; /* MAPS_BYTES */
  size_t maps_len;

  uint64_t *addrs; /* EM_WINDOW_MAX_ADDRS distinct addresses, ascending. */
  em_profile_frame_t *addr_frames;
  uint32_t *addr_index;       /* Frame index of addrs[i]; UNSET until a stack uses it. */
  em_profile_frame_t *frames; /* EM_PROFILE_MAX_FRAMES */
  uint32_t *frame_slots;      /* FRAME_SLOTS */
  uint32_t *fidx;             /* EM_WINDOW_MAX_ADDRS frame indices of the merged stacks. */
  merged_t *merged;           /* 2 * max_stacks */
  uint32_t *merged_slots;     /* 4 * max_stacks rounded up to a power of two */
  uint64_t *matched;          /* max_stacks: samples of stack i merged from the log. */
  uint64_t *matched_off;      /* max_stacks: off-CPU ns of stack i merged from the log. */
  uint8_t *interp;            /* EM_PROFILE_MAX_FRAMES: 1 for the eval loop's frames. */
  uint32_t merged_mask;
  em_profile_stack_t *out_stacks;
  char notes[EM_PROFILE_MAX_NOTES][NOTE_BYTES];
  const char *note_ptrs[EM_PROFILE_MAX_NOTES];
  em_profile_t out;

  uint8_t *buf;
  uint64_t bytes;
  em_window_stats_t st;
  /* Assembly: frames indexed from the addresses the stacks use. */
  size_t used_addrs, used_unresolved;
  bool frames_full;
  uint64_t rechain_cut;            /* DWARF chains the stack table had no room for. */
  uint32_t merge_tid, merge_stage; /* The logged entry being merged (same_stage). */
};

static void *counted(em_window_t *w, size_t n, size_t size) {
  w->bytes += (uint64_t)n * size;
  return calloc(n ? n : 1, size);
}

/* em_stacks_sample_fn: a logged sample's registers and stack copy, for the worker's unwinding. */
static void keep_stack(void *ctx, uint32_t log_index, const em_perf_rec_t *r) {
  em_window_t *w = ctx;
  (void)em_unwind_keep(w->unwind, log_index, r);
}

int em_window_new(em_window_t **out, const em_window_opts_t *o) {
  if (!out || !o || o->hz == 0 || o->hz > 1000 || o->seconds_ns == 0 ||
      o->max_seconds_ns < o->seconds_ns || o->max_bytes < 4096 ||
      o->max_bytes > EM_PROFILE_MAX_BYTES || o->max_stacks == 0 ||
      o->max_stacks > EM_PROFILE_MAX_STACKS || !o->proc_root || strlen(o->proc_root) >= 200) {
    return -EINVAL;
  }
  em_window_t *w = calloc(1, sizeof(*w));
  if (!w) {
    return -ENOMEM;
  }
  w->o = *o;
  snprintf(w->proc_root, sizeof(w->proc_root), "%s", o->proc_root);
  w->o.proc_root = w->proc_root;
  w->bytes = sizeof(*w);
  uint32_t slots = 1;
  while (slots < 4 * o->max_stacks) {
    slots <<= 1;
  }
  w->merged_mask = slots - 1;
  uint64_t log = (uint64_t)o->hz * (o->max_seconds_ns / 1000000000u + 1) * 8u;
  int rc = em_sampler_new(&w->sampler, w->proc_root);
  if (!rc) {
    rc = em_stacks_new(&w->stacks, o->max_stacks, EM_WINDOW_MAX_ADDRS);
  }
  if (!rc) {
    rc =
        em_stacks_log_alloc(w->stacks, log < EM_WINDOW_MAX_LOG ? (uint32_t)log : EM_WINDOW_MAX_LOG);
  }
  if (!rc) {
    rc = em_pymerge_new(&w->py);
  }
  if (!rc) {
    rc = em_symbols_new(&w->symbols, w->proc_root);
  }
  if (!rc) {
    rc = em_spanlog_new(&w->spans, SPAN_LOG);
  }
  if (!rc && o->dwarf) {
    rc = em_unwind_new(&w->unwind, UNWIND_POOL);
    rc = rc == -ENOTSUP ? 0 : rc; /* An architecture without it: frame pointers. */
  }
  if (!rc && w->unwind) {
    em_stacks_on_sample(w->stacks, keep_stack, w);
  }
  w->maps = counted(w, MAPS_BYTES, 1);
  w->addrs = counted(w, EM_WINDOW_MAX_ADDRS, sizeof(*w->addrs));
  w->addr_frames = counted(w, EM_WINDOW_MAX_ADDRS, sizeof(*w->addr_frames));
  w->addr_index = counted(w, EM_WINDOW_MAX_ADDRS, sizeof(*w->addr_index));
  w->frames = counted(w, EM_PROFILE_MAX_FRAMES, sizeof(*w->frames));
  w->frame_slots = counted(w, FRAME_SLOTS, sizeof(*w->frame_slots));
  w->fidx = counted(w, 2u * EM_WINDOW_MAX_ADDRS, sizeof(*w->fidx));
  w->merged = counted(w, 2u * o->max_stacks, sizeof(*w->merged));
  w->merged_slots = counted(w, slots, sizeof(*w->merged_slots));
  w->matched = counted(w, o->max_stacks, sizeof(*w->matched));
  w->matched_off = counted(w, o->max_stacks, sizeof(*w->matched_off));
  w->interp = counted(w, EM_PROFILE_MAX_FRAMES, 1);
  w->out_stacks = counted(w, 2u * o->max_stacks, sizeof(*w->out_stacks));
  w->buf = counted(w, o->max_bytes, 1);
  if (!rc && (!w->maps || !w->addrs || !w->addr_frames || !w->addr_index || !w->frames ||
              !w->frame_slots || !w->fidx || !w->merged || !w->merged_slots || !w->matched ||
              !w->matched_off || !w->interp || !w->out_stacks || !w->buf)) {
    rc = -ENOMEM;
  }
  if (rc) {
    em_window_free(w);
    return rc;
  }
  w->bytes += em_stacks_bytes(w->stacks) + EM_SYMBOLS_ARENA_BYTES + em_pymerge_bytes(w->py) +
              em_spanlog_bytes(w->spans) + em_unwind_bytes(w->unwind);
  *out = w;
  return 0;
}

void em_window_free(em_window_t *w) {
  if (!w) {
    return;
  }
  em_sampler_free(w->sampler);
  em_stacks_free(w->stacks);
  em_symbols_free(w->symbols);
  em_pymerge_free(w->py);
  em_spanlog_free(w->spans);
  em_unwind_free(w->unwind);
  free(w->maps);
  free(w->addrs);
  free(w->addr_frames);
  free(w->addr_index);
  free(w->frames);
  free(w->frame_slots);
  free(w->fidx);
  free(w->merged);
  free(w->merged_slots);
  free(w->matched);
  free(w->matched_off);
  free(w->interp);
  free(w->out_stacks);
  free(w->buf);
  free(w);
}

uint64_t em_window_bytes(const em_window_t *w) {
  return w ? w->bytes : 0;
}

void em_window_set_min_gap(em_window_t *w, uint64_t min_gap_ns) {
  if (w) {
    w->o.min_gap_ns = min_gap_ns;
  }
}

/* The process's maps as they are now, for symbols after it exits. */
static void snapshot_maps(em_window_t *w) {
  char path[300];
  snprintf(path, sizeof(path), "%s/%d/maps", w->proc_root, (int)w->pid);
  w->maps_len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return;
  }
  while (w->maps_len < MAPS_BYTES) {
    ssize_t n = read(fd, w->maps + w->maps_len, MAPS_BYTES - w->maps_len);
    if (n <= 0) {
      break;
    }
    w->maps_len += (size_t)n;
  }
  close(fd);
  while (w->maps_len > 0 && w->maps[w->maps_len - 1] != '\n') {
    w->maps_len--; /* A cut last line is dropped. */
  }
}

static const char *copy_text(char *dst, size_t cap, const char *src) {
  if (!src || !*src) {
    return NULL;
  }
  size_t n = strlen(src);
  if (n >= cap) {
    n = cap - 1;
    while (n > 0 && ((unsigned char)src[n] & 0xC0u) == 0x80u) {
      n--;
    }
  }
  memcpy(dst, src, n);
  dst[n] = '\0';
  return dst;
}

/* Opens a window of len_ns on pid at mono_ns: the rings mapped, the maps read, the trigger
 * copied. Returns 0 or the sampler's error (counted as failed). */
static int open_window(em_window_t *w, const em_profile_trigger_t *t, pid_t pid, uint64_t len_ns,
                       uint64_t mono_ns, uint64_t wall_ns) {
  em_stacks_reset(w->stacks);
  em_pymerge_reset(w->py);
  em_spanlog_reset(w->spans, mono_ns);
  em_unwind_reset(w->unwind);
  em_sampler_user_t user = {.stack_bytes = EM_UNWIND_STACK_BYTES};
  user.regs_mask = w->unwind ? em_unwind_regs_mask(NULL) : 0;
  int rc = em_sampler_open(w->sampler, pid, w->o.hz, w->o.clock, &user);
  if (rc) {
    w->st.failed++;
    return rc;
  }
  w->pid = pid;
  snapshot_maps(w);
  w->start_ns = mono_ns;
  w->end_ns = mono_ns + len_ns;
  w->wall_ns = wall_ns;
  w->trig = *t;
  w->trig.rule = copy_text(w->trig_rule, sizeof(w->trig_rule), t->rule);
  w->trig.stage = copy_text(w->trig_stage, sizeof(w->trig_stage), t->stage);
  w->trig.reason = copy_text(w->trig_reason, sizeof(w->trig_reason), t->reason);
  w->state = EM_WINDOW_OPEN;
  return 0;
}

int em_window_trigger(em_window_t *w, const em_profile_trigger_t *t, pid_t pid, uint32_t seconds,
                      uint64_t mono_ns, uint64_t wall_ns) {
  if (!w || !t) {
    return -EINVAL;
  }
  if (w->state != EM_WINDOW_IDLE) {
    w->st.suppressed++;
    return -EBUSY;
  }
  if (w->have_last && mono_ns - w->last_start_ns < w->o.min_gap_ns) {
    w->st.suppressed++;
    return -EAGAIN;
  }
  if (pid <= 0) {
    w->st.failed++;
    return -ESRCH;
  }
  uint64_t len = seconds ? (uint64_t)seconds * 1000000000u : w->o.seconds_ns;
  if (len > w->o.max_seconds_ns) {
    len = w->o.max_seconds_ns;
  }
  int rc = open_window(w, t, pid, len, mono_ns, wall_ns);
  if (rc) {
    return rc;
  }
  w->baseline = false;
  w->request = w->number;
  w->have_last = true;
  w->last_start_ns = mono_ns;
  w->st.taken++;
  return 0;
}

int em_window_baseline(em_window_t *w, pid_t pid, uint64_t len_ns, uint64_t mono_ns,
                       uint64_t wall_ns) {
  if (!w || pid <= 0 || len_ns == 0) {
    return -EINVAL;
  }
  if (w->state != EM_WINDOW_IDLE) {
    return -EBUSY;
  }
  em_profile_trigger_t t = {.cause = EM_PROFILE_COMMAND,
                            .level = EM_LEVEL_NOMINAL,
                            .prev_level = EM_LEVEL_NONE,
                            .reason = "baseline"};
  int rc = open_window(w, &t, pid, len_ns, mono_ns, wall_ns);
  if (rc) {
    return rc;
  }
  w->baseline = true;
  w->request = EM_WINDOW_BASELINE_BIT | (w->baselines & ~EM_WINDOW_BASELINE_BIT);
  return 0;
}

bool em_window_is_baseline(const em_window_t *w) {
  return w && w->baseline && w->state != EM_WINDOW_IDLE;
}

bool em_window_abort(em_window_t *w) {
  if (!w || (w->state != EM_WINDOW_OPEN && w->state != EM_WINDOW_AWAIT)) {
    return false;
  }
  if (w->state == EM_WINDOW_OPEN) {
    em_sampler_close(w->sampler, w->stacks);
  }
  em_unwind_reset(w->unwind);
  w->baselines += w->baseline;
  w->baseline = false;
  w->state = EM_WINDOW_IDLE;
  return true;
}

bool em_window_tick(em_window_t *w, uint64_t now_ns, bool target_gone) {
  if (!w || (w->state != EM_WINDOW_OPEN && w->state != EM_WINDOW_AWAIT)) {
    return false;
  }
  if (w->state == EM_WINDOW_OPEN) {
    if (!target_gone && now_ns < w->end_ns) {
      em_sampler_drain(w->sampler, w->stacks);
      return false;
    }
    if (now_ns < w->end_ns) {
      w->end_ns = now_ns; /* The target exited: the window is shorter. */
    }
    em_sampler_close(w->sampler, w->stacks);
    em_stacks_close(w->stacks, w->end_ns);
    const em_sampler_stats_t *ss = em_sampler_stats(w->sampler);
    w->st.lost += ss->lost;
    w->st.cut += em_stacks_stats(w->stacks)->cut;
    w->await_until_ns = w->end_ns + EM_WINDOW_PY_WAIT_NS;
    w->settle_until_ns = w->end_ns + w->o.span_settle_ns;
    w->state = EM_WINDOW_AWAIT;
  }
  bool waiting = !em_pymerge_held(w->py) && now_ns < w->await_until_ns;
  if (!target_gone && (waiting || now_ns < w->settle_until_ns)) {
    return false;
  }
  w->state = EM_WINDOW_CLOSED;
  return true;
}

int em_window_request(const em_window_t *w, em_profile_page_t *out) {
  if (!w || !out || w->state != EM_WINDOW_OPEN) {
    return -ENOENT;
  }
  *out = (em_profile_page_t){
      .window = w->request, .hz = w->o.hz, .start_ns = w->start_ns, .end_ns = w->end_ns};
  return 0;
}

void em_window_span(em_window_t *w, uint32_t pid, uint32_t tid, const char *stage,
                    uint64_t start_ns, uint64_t duration_ns) {
  if (w && (w->state == EM_WINDOW_OPEN || w->state == EM_WINDOW_AWAIT) && pid == (uint32_t)w->pid &&
      start_ns <= w->end_ns) {
    em_spanlog_add(w->spans, tid, stage, start_ns, duration_ns);
  }
}

int em_window_pystacks(em_window_t *w, const uint8_t *buf, size_t len, pid_t sender) {
  if (!w || !buf) {
    return -EINVAL;
  }
  int rc = 0;
  if (w->state != EM_WINDOW_OPEN && w->state != EM_WINDOW_AWAIT) {
    rc = -ENOENT;
  } else if (sender != w->pid) {
    rc = -EPERM;
  } else {
    rc = em_pymerge_take(w->py, buf, len, w->request);
  }
  if (rc) {
    w->st.py_refused++;
  } else {
    w->st.py_taken++;
  }
  return rc;
}

/* --- assembly (worker) ---------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static int cmp_stack_desc(const void *a, const void *b) {
  const em_profile_stack_t *x = a, *y = b;
  if (x->samples != y->samples) {
    return x->samples > y->samples ? -1 : 1;
  }
  return x->off_cpu_ns > y->off_cpu_ns ? -1 : x->off_cpu_ns < y->off_cpu_ns;
}

static uint64_t hash_text(uint64_t h, const char *s) {
  for (; s && *s; s++) {
    h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  }
  return h * 0x9e3779b97f4a7c15ull;
}

/* Index of frame f in the table, added when new; NONE when the table is full. */
static uint32_t frame_index(em_window_t *w, const em_profile_frame_t *f) {
  uint64_t h = hash_text(hash_text(0xcbf29ce484222325ull + f->kind, f->name), f->module);
  uint32_t slot = (uint32_t)h & (FRAME_SLOTS - 1);
  while (w->frame_slots[slot] != NONE) {
    const em_profile_frame_t *k = &w->frames[w->frame_slots[slot]];
    if (k->kind == f->kind && strcmp(k->name, f->name) == 0 &&
        (k->module == f->module || (k->module && f->module && strcmp(k->module, f->module) == 0))) {
      return w->frame_slots[slot];
    }
    slot = (slot + 1) & (FRAME_SLOTS - 1);
  }
  if (w->out.n_frames >= EM_PROFILE_MAX_FRAMES) {
    return NONE;
  }
  uint32_t i = (uint32_t)w->out.n_frames++;
  w->frames[i] = *f;
  w->frame_slots[slot] = i;
  return i;
}

static void note(em_window_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(em_window_t *w, const char *fmt, ...) {
  if (w->out.n_notes >= EM_PROFILE_MAX_NOTES) {
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->notes[w->out.n_notes], NOTE_BYTES, fmt, ap);
  va_end(ap);
  w->note_ptrs[w->out.n_notes] = w->notes[w->out.n_notes];
  w->out.n_notes++;
}

static size_t addr_pos(const em_window_t *w, size_t n, uint64_t a) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (w->addrs[mid] < a) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

/* Adds stack `frames` to the merged table (or its counts to an equal one). A new entry only
 * while fewer than max_merged entries and max_fidx frames are in use: returns false when it
 * found no equal one and no room. */
static bool merge_stack(em_window_t *w, size_t *n_merged, size_t *n_fidx, size_t max_merged,
                        size_t max_fidx, const uint32_t *frames, uint32_t n, uint32_t stage,
                        uint64_t samples, uint64_t off_cpu_ns) {
  uint64_t h = (0xcbf29ce484222325ull ^ n ^ ((uint64_t)stage << 32)) * 0x100000001b3ull;
  for (uint32_t i = 0; i < n; i++) {
    h = (h ^ frames[i]) * 0x100000001b3ull;
  }
  uint32_t slot = (uint32_t)(h * 0x9e3779b97f4a7c15ull >> 32) & w->merged_mask;
  while (w->merged_slots[slot] != NONE) {
    merged_t *m = &w->merged[w->merged_slots[slot]];
    if (m->hash == h && m->n == n && m->stage == stage &&
        memcmp(w->fidx + m->off, frames, n * sizeof(*frames)) == 0) {
      m->samples += samples;
      m->off_cpu_ns += off_cpu_ns;
      return true;
    }
    slot = (slot + 1) & w->merged_mask;
  }
  if (*n_merged >= max_merged || *n_fidx + n > max_fidx) {
    return false;
  }
  merged_t *m = &w->merged[*n_merged];
  *m = (merged_t){.off = (uint32_t)*n_fidx,
                  .n = n,
                  .stage = stage,
                  .hash = h,
                  .samples = samples,
                  .off_cpu_ns = off_cpu_ns};
  memmove(w->fidx + *n_fidx, frames, n * sizeof(*frames));
  *n_fidx += n;
  w->merged_slots[slot] = (uint32_t)(*n_merged)++;
  return true;
}

/* Whether the resolver left frame f without a symbol ("module+0x1a2b", or a bare address). */
static bool unresolved(const em_profile_frame_t *f) {
  return f->kind == EM_FRAME_UNKNOWN || strncmp(f->name, "0x", 2) == 0 || strstr(f->name, "+0x");
}

/* The frame index of distinct address pos, added to the frame table on first use. */
static uint32_t frame_of(em_window_t *w, size_t pos) {
  if (w->addr_index[pos] == UNSET) {
    w->addr_index[pos] = frame_index(w, &w->addr_frames[pos]);
    w->frames_full |= w->addr_index[pos] == NONE;
    w->used_addrs++;
    w->used_unresolved += unresolved(&w->addr_frames[pos]);
  }
  return w->addr_index[pos];
}

/*
 * Stack e as frame indices, root first, into path; returns how many (frames with no room in
 * the table are left out). A user-context return address in no mapped binary, or in kernel
 * space, is not a return address but what frame-pointer unwinding read off the stack once it walked
 * through code built without frame pointers (a BLAS kernel, an interpreter): the chain is cut
 * there, keeping the frames below it (toward the leaf), and *cut says so. Such addresses never
 * enter the frame table.
 */
static uint32_t stack_path(em_window_t *w, size_t d, const em_stacks_entry_t *e, uint32_t *path,
                           bool *cut) {
  uint32_t k = 0;
  *cut = false;
  for (uint32_t i = 0; i < e->n_user + e->n_kernel; i++) {
    size_t pos = addr_pos(w, d, e->addrs[i]);
    bool leaf = i + 1 == e->n_user; /* Where the thread was: code outside every binary (JIT
                                       code in anonymous memory) is still where it ran. */
    if (i < e->n_user &&
        (e->addrs[i] >= KERNEL_FIRST || (!leaf && w->addr_frames[pos].kind == EM_FRAME_UNKNOWN))) {
      k = 0; /* Everything on its root side is as unreliable as it is. */
      *cut = true;
      continue;
    }
    uint32_t f = frame_of(w, pos);
    if (f != NONE) {
      path[k++] = f;
    }
  }
  return k;
}

static uint32_t add_py_frame(void *ctx, const em_profile_frame_t *f) {
  return frame_index(ctx, f);
}

/* em_pymerge_accept_fn: a Python sample taken in the stage of the sample being merged (both in
 * no span counts too). */
static bool same_stage(void *ctx, uint64_t time_ns) {
  const em_window_t *w = ctx;
  return em_spanlog_stage(w->spans, w->merge_tid, time_ns, NULL, NULL) == w->merge_stage;
}

static bool is_interp(void *ctx, uint32_t frame) {
  const em_window_t *w = ctx;
  return frame < EM_PROFILE_MAX_FRAMES && w->interp[frame];
}

/* What the merge of the logged entries did, for the notes (py: samples only). */
typedef struct {
  uint64_t spliced, above, no_sample, no_frame, no_room;
  uint64_t staged; /* Samples that fell in a span. */
} merge_counts_t;

/*
 * Merges every logged entry that gains something over its native stack: the stage its thread's
 * span gives it at its time, and the client's Python frames when held (have_py). matched[s] and
 * matched_off[s] count what stack s gave away. These take at most the first half of the merged
 * table (see the top of this file).
 */
static void merge_logged(em_window_t *w, size_t d, size_t n_stacks, bool have_py, size_t *n_merged,
                         size_t *n_fidx, merge_counts_t *mc) {
  memset(w->matched, 0, n_stacks * sizeof(*w->matched));
  memset(w->matched_off, 0, n_stacks * sizeof(*w->matched_off));
  if (have_py) {
    em_pymerge_prepare(w->py, add_py_frame, w);
    for (size_t f = 0; f < w->out.n_frames; f++) {
      w->interp[f] = w->frames[f].kind == EM_FRAME_NATIVE &&
                     strcmp(w->frames[f].name, "_PyEval_EvalFrameDefault") == 0;
    }
  }
  em_spanlog_seal(w->spans);
  size_t max_merged = w->o.max_stacks;
  if (max_merged > EM_PROFILE_MAX_STACKS - n_stacks) {
    max_merged = EM_PROFILE_MAX_STACKS - n_stacks;
  }
  uint32_t py_hz = w->o.hz < 99 ? w->o.hz : 99;
  uint64_t max_gap_ns = 2u * (1000000000u / py_hz);
  size_t n_log = em_stacks_log_count(w->stacks);
  for (size_t i = 0; i < n_log; i++) {
    em_stacks_log_entry_t l = em_stacks_log_get(w->stacks, i);
    bool sample = l.off_cpu_ns == 0;
    em_stacks_entry_t e = em_stacks_get(w->stacks, l.stack);
    uint32_t path[EM_PROFILE_MAX_DEPTH], out[EM_PROFILE_MAX_DEPTH];
    bool cut = false;
    uint32_t k = stack_path(w, d, &e, path, &cut);
    /* The Python sample: within two periods, taken in the same stage (same_stage). */
    uint64_t lo = l.time_ns > max_gap_ns ? l.time_ns - max_gap_ns : 0;
    uint32_t stage = em_spanlog_stage(w->spans, l.tid, l.time_ns, NULL, NULL);
    mc->staged += sample && stage != EM_PROFILE_NO_STAGE;
    size_t n = 0;
    em_pymerge_why_t why = EM_PYMERGE_NO_SAMPLE;
    if (have_py) {
      w->merge_tid = l.tid;
      w->merge_stage = stage;
      n = em_pymerge_splice(w->py, l.tid, l.time_ns, lo, l.time_ns + max_gap_ns, path, k, is_interp,
                            same_stage, w, out, &why);
      if (n == 0 && sample) {
        mc->no_sample += why == EM_PYMERGE_NO_SAMPLE;
        mc->no_frame += why == EM_PYMERGE_NO_FRAME;
      }
    }
    if (k == 0 || (n == 0 && stage == EM_PROFILE_NO_STAGE)) {
      continue; /* Nothing gained: left to its native stack. */
    }
    if (!merge_stack(w, n_merged, n_fidx, max_merged, EM_WINDOW_MAX_ADDRS, n ? out : path,
                     n ? (uint32_t)n : k, stage, sample, l.off_cpu_ns)) {
      mc->no_room += n > 0 && sample;
      continue;
    }
    w->matched[l.stack] += sample;
    w->matched_off[l.stack] += l.off_cpu_ns;
    if (n > 0 && sample) {
      mc->spliced++;
      mc->above += why == EM_PYMERGE_ABOVE;
    }
  }
}

/* The notes on stages: where they came from, or why there are none. */
static void note_stages(em_window_t *w, uint64_t samples, uint64_t staged) {
  const em_spanlog_stats_t *ls = em_spanlog_stats(w->spans);
  if (ls->kept == 0) {
    note(w, ls->no_thread ? "no stages: the target's rings named no thread of it"
                          : "no stages: no span from the target's rings in the window (spans "
                            "sent as datagrams carry no thread)");
    return;
  }
  if (samples > staged) {
    note(w,
         "%llu of %llu samples in no span of their thread (between stages, or in a thread "
         "without spans)",
         (unsigned long long)(samples - staged), (unsigned long long)samples);
  }
  if (ls->full || ls->stage_cut) {
    note(w, "%llu spans not kept: the window holds %u spans and %u stage names",
         (unsigned long long)(ls->full + ls->stage_cut), SPAN_LOG, EM_PROFILE_MAX_STAGES);
  }
}

/* em_unwind_chain_fn: a sample's DWARF chain replaces its frame-pointer one. */
static void rechain(void *ctx, uint32_t log_index, const uint64_t *addrs, uint32_t n) {
  em_window_t *w = ctx;
  if (em_stacks_rechain(w->stacks, log_index, addrs, n) != 0) {
    w->rechain_cut++;
  }
}

/* The notes on how the native frames were unwound. */
static void note_unwinding(em_window_t *w, uint64_t samples) {
  const em_sampler_stats_t *ss = em_sampler_stats(w->sampler);
  if (!w->unwind || ss->no_user_stacks) {
    note(w,
         "native frames by frame pointers only (%s): they stop, or are cut, at the first "
         "function built without them",
         w->unwind ? "the kernel refused user stack copies"
                   : (w->o.dwarf ? "no DWARF unwinding on this architecture" : "unwind = fp"));
    return;
  }
  const em_unwind_stats_t *us = em_unwind_stats(w->unwind);
  uint64_t dwarf = us->unwound - w->rechain_cut;
  if (dwarf < samples) {
    note(w,
         "%llu of %llu samples unwound by DWARF CFI from %u-byte stack copies; the others by frame "
         "pointers (%llu: the copy pool was full, %llu: unwinding failed, %llu: no room)",
         (unsigned long long)dwarf, (unsigned long long)samples, EM_UNWIND_STACK_BYTES,
         (unsigned long long)us->pool_full, (unsigned long long)us->failed,
         (unsigned long long)w->rechain_cut);
  }
  if (ss->small_rings) {
    note(w,
         "%u threads got smaller perf rings (locked memory, perf_event_mlock_kb): samples may "
         "be lost",
         ss->small_rings);
  }
}

void em_window_resolve(em_window_t *w) {
  if (!w || w->state != EM_WINDOW_CLOSED) {
    return;
  }
  const em_sampler_stats_t *ss = em_sampler_stats(w->sampler);
  const em_stacks_stats_t *ks = em_stacks_stats(w->stacks);
  w->rechain_cut = 0;
  if (w->unwind) {
    em_unwind_run(w->unwind, em_symbols_session(w->symbols, w->pid, w->maps, w->maps_len), w->pid,
                  rechain, w);
    em_stacks_rechain_off_cpu(w->stacks);
  }
  size_t n_stacks = em_stacks_count(w->stacks);
  size_t n = 0;
  for (size_t s = 0; s < n_stacks; s++) {
    em_stacks_entry_t e = em_stacks_get(w->stacks, s);
    if (e.samples == 0 && e.off_cpu_ns == 0) {
      continue; /* Its samples all took a DWARF chain. */
    }
    for (uint32_t i = 0; i < e.n_user + e.n_kernel; i++) {
      w->addrs[n++] = e.addrs[i]; /* At most EM_WINDOW_MAX_ADDRS: the table's own bound. */
    }
  }
  qsort(w->addrs, n, sizeof(*w->addrs), cmp_u64);
  size_t d = 0;
  for (size_t i = 0; i < n; i++) {
    if (d == 0 || w->addrs[i] != w->addrs[d - 1]) {
      w->addrs[d++] = w->addrs[i];
    }
  }
  size_t n_user = addr_pos(w, d, KERNEL_FIRST);
  em_symbols_begin(w->symbols);
  (void)em_symbols_user(w->symbols, w->pid, w->maps, w->maps_len, w->addrs, n_user, w->addr_frames);
  (void)em_symbols_kernel(w->symbols, w->addrs + n_user, d - n_user, w->addr_frames + n_user);

  memset(&w->out, 0, sizeof(w->out));
  memset(w->frame_slots, 0xff, FRAME_SLOTS * sizeof(*w->frame_slots));
  memset(w->merged_slots, 0xff, ((size_t)w->merged_mask + 1) * sizeof(*w->merged_slots));
  w->frames_full = false;
  w->used_addrs = w->used_unresolved = 0;
  note_unwinding(w, ks->samples);
  if (em_symbols_dw_error()) { /* libdw could not be loaded (symbols.h). */
    note(w, "native symbols off (%.180s): user frames are module+offset", em_symbols_dw_error());
  }
  for (size_t i = 0; i < d; i++) {
    w->addr_index[i] = UNSET;
  }
  for (size_t s = 0; s < n_stacks; s++) { /* Native frames first, in the order stacks use them. */
    em_stacks_entry_t e = em_stacks_get(w->stacks, s);
    if (e.samples == 0 && e.off_cpu_ns == 0) {
      continue;
    }
    uint32_t path[EM_PROFILE_MAX_DEPTH];
    bool cut = false;
    (void)stack_path(w, d, &e, path, &cut);
  }
  size_t n_merged = 0, n_fidx = 0;
  merge_counts_t mc = {0};
  bool have_py = em_pymerge_held(w->py);
  merge_logged(w, d, n_stacks, have_py, &n_merged, &n_fidx, &mc);
  uint64_t frames_cut = 0, chains_cut = 0;
  for (size_t s = 0; s < n_stacks; s++) {
    em_stacks_entry_t e = em_stacks_get(w->stacks, s);
    uint32_t path[EM_PROFILE_MAX_DEPTH];
    bool cut = false;
    uint32_t k = stack_path(w, d, &e, path, &cut);
    chains_cut += cut ? e.samples : 0;
    uint64_t native = e.samples - w->matched[s];
    uint64_t off = e.off_cpu_ns - w->matched_off[s];
    if (k == 0) {
      frames_cut += native;
      continue;
    }
    if (native > 0 || off > 0) {
      (void)merge_stack(w, &n_merged, &n_fidx, 2u * w->o.max_stacks, 2u * EM_WINDOW_MAX_ADDRS, path,
                        k, EM_PROFILE_NO_STAGE, native, off);
    }
  }
  for (size_t i = 0; i < n_merged; i++) {
    const merged_t *m = &w->merged[i];
    w->out_stacks[i] = (em_profile_stack_t){.frames = w->fidx + m->off,
                                            .n_frames = m->n,
                                            .samples = m->samples,
                                            .off_cpu_ns = m->off_cpu_ns,
                                            .stage = m->stage};
  }
  qsort(w->out_stacks, n_merged, sizeof(*w->out_stacks), cmp_stack_desc);

  em_profile_t *p = &w->out;
  p->head.time_ns = w->wall_ns;
  p->number = w->number;
  p->trigger = w->trig;
  p->start_mono_ns = w->start_ns;
  p->duration_ns = w->end_ns > w->start_ns ? w->end_ns - w->start_ns : 0;
  p->hz = w->o.hz;
  p->clock = w->o.clock == EM_SAMPLER_TASK_CLOCK ? "task-clock" : "cpu-clock";
  p->samples = ks->samples + ks->cut;
  p->lost = ss->lost;
  p->frames = w->frames;
  p->stacks = w->out_stacks;
  p->n_stacks = n_merged;
  p->stages = em_spanlog_stages(w->spans, &p->n_stages);
  p->notes = w->note_ptrs;
  if (!have_py) {
    note(w, "no Python frames: no client samples for this window (client too old, its sampling "
            "off, or not running)");
  } else {
    uint64_t without = ks->samples - mc.spliced;
    if (without) {
      note(w,
           "%llu of %llu samples without Python frames: %llu no client sample of their thread "
           "within 2 sampling periods, %llu not in the sample log, %llu no room",
           (unsigned long long)without, (unsigned long long)ks->samples,
           (unsigned long long)mc.no_sample, (unsigned long long)ks->log_cut,
           (unsigned long long)(mc.no_frame + mc.no_room));
    }
    if (mc.above) {
      note(w,
           "%llu samples had no eval-loop frame (native unwinding stopped early): their "
           "Python frames are above their native frames",
           (unsigned long long)mc.above);
    }
    if (em_pymerge_client_cut(w->py)) {
      note(w, "the client left out %u of its Python samples to fit one datagram",
           em_pymerge_client_cut(w->py));
    }
  }
  note_stages(w, ks->samples, mc.staged);
  if (ss->kernel_refused) {
    note(w, "no kernel frames: perf_event_paranoid refused them (sampled with exclude_kernel)");
  }
  if (ss->no_switch) {
    note(w, "no off-CPU time: the kernel refused context-switch records");
  }
  if (w->used_unresolved) {
    note(w, "%zu of %zu addresses without a symbol (shown as module+offset or a hex address)",
         w->used_unresolved, w->used_addrs);
  }
  if (chains_cut) {
    note(w,
         "%llu samples' native call chains reached an address in no mapped binary (frame-pointer "
         "unwinding through code built without frame pointers): cut there",
         (unsigned long long)chains_cut);
  }
  if (ks->cut) {
    note(w, "%llu samples not kept: the window's stack table was full",
         (unsigned long long)ks->cut);
  }
  if (ks->deep) {
    note(w, "%llu call chains deeper than %u frames: their root side is cut",
         (unsigned long long)ks->deep, EM_PROFILE_MAX_DEPTH);
  }
  if (w->frames_full || frames_cut) {
    note(w, "frame table full (%u frames): %llu samples lost their frames", EM_PROFILE_MAX_FRAMES,
         (unsigned long long)frames_cut);
  }
  if (ss->threads_failed || ss->threads_over) {
    note(w, "%u threads not sampled (%s)", ss->threads_failed + ss->threads_over,
         ss->threads_over ? "more threads than the sampler holds" : strerror(ss->open_errno));
  }
  if (ss->bad_records) {
    note(w, "%llu perf ring reads stopped at a malformed record",
         (unsigned long long)ss->bad_records);
  }
  w->state = EM_WINDOW_RESOLVED;
}

em_profile_t *em_window_take(em_window_t *w) {
  return w && w->state == EM_WINDOW_RESOLVED ? &w->out : NULL;
}

uint8_t *em_window_buffer(em_window_t *w, size_t *cap) {
  *cap = w->o.max_bytes;
  return w->buf;
}

void em_window_done(em_window_t *w) {
  if (w && (w->state == EM_WINDOW_RESOLVED || w->state == EM_WINDOW_CLOSED)) {
    em_unwind_reset(w->unwind); /* The stack copies' pages go back now, not at the next window. */
    if (w->baseline) {
      w->baselines++;
    } else {
      w->number++;
    }
    w->baseline = false;
    w->state = EM_WINDOW_IDLE;
  }
}

em_window_state_t em_window_state(const em_window_t *w) {
  return w ? w->state : EM_WINDOW_IDLE;
}

const em_window_stats_t *em_window_stats(const em_window_t *w) {
  return &w->st;
}
