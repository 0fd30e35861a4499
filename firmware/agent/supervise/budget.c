/*
 * budget.c - the degradation engine (see budget.h for the rule and level state machines and
 * the table of transitions).
 *
 * Invariants:
 *   1. level >= target (the highest level among active rules) after every entry point.
 *   2. A rule is active exactly in the ACTIVE and RECOVERING states; `bad` is non-zero only in
 *      PENDING, `clean` only in RECOVERING.
 *   3. Every string a change or a birth entry points at lives in the engine's one allocation.
 *   4. Nothing is allocated after em_budget_new; the RSS rings are fixed (EM_BUDGET_SLOPE_SAMPLES
 *      per RSS_SLOPE and GPU_MEM_SLOPE rule) and overwrite their oldest sample when full; so are
 * the flow tables (EM_BUDGET_FLOW_FRAMES per FLOW rule), which evict their oldest frame when full.
 *   5. A frame id is live in at most one slot of a FLOW rule's table.
 *
 * Owns: one calloc'd block. No I/O, no clock reads, single-threaded.
 */
#include "budget.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MIB_F    1048576.0
#define NS_PER_S 1e9
#define S_PER_H  3600.0
#define NO_STAGE SIZE_MAX

typedef enum { JUDGE_ABSENT = 0, JUDGE_CLEAN, JUDGE_VIOLATED } judge_t;

typedef struct {
  uint64_t t_ns;
  uint64_t rss_bytes;
} rss_sample_t;

/* One frame in flight of a FLOW rule. */
typedef struct {
  uint64_t frame;    /* The client's frame id (never 0). */
  uint64_t start_ns; /* Start of its first-stage span. */
  uint64_t seq;      /* Order of arrival, for eviction of the oldest. */
  size_t pos;        /* Index of the stage expected next (1..n_stages-1). */
  bool live;
} flow_slot_t;

typedef struct {
  em_budget_rule_t rule; /* A copy of the rule as given. */
  const char *stage;     /* The stage changes and birth entries name: rule.stage for stage
                            rules, the first stage for FLOW, NULL for process rules. */
  size_t stage_ix;       /* Into engine->stages, or NO_STAGE. */
  bool active;           /* ACTIVE or RECOVERING. */
  uint32_t bad;          /* Violating windows in a row while not active (PENDING). */
  uint32_t clean;        /* Clean windows in a row while active (RECOVERING). */
  em_value_t value;      /* Last measured value. */
  const char *reason;    /* Why it last entered (static text or a figure's `why`); carried
                            across a reload with the rest of its state. */
  /* Span counters of the current window (DEADLINE, MISS_RATIO). */
  uint64_t win_spans;
  uint64_t win_misses;
  uint64_t last_seen_ns; /* ALIVE. */
  bool seen;             /* ALIVE: a span or heartbeat of the stage came; silence counts from
                            the first, never from the engine's start. */
  rss_sample_t *ring;    /* RSS_SLOPE: EM_BUDGET_SLOPE_SAMPLES entries. */
  size_t ring_head;      /* Index of the oldest sample. */
  size_t ring_len;
  flow_slot_t *slots; /* FLOW: EM_BUDGET_FLOW_FRAMES entries. */
  uint64_t flow_seq;  /* FLOW: frames started. */
  uint64_t evicted;   /* FLOW: frames evicted unjudged. */
} rule_state_t;

typedef struct {
  char name[EM_BUDGET_STAGE_BYTES];
  bool reported; /* A span or heartbeat of the stage came (em_budget_reported). */
  bool seeded;
  double mean;
  double var;
  double z;
} stage_state_t;

struct em_budget_engine {
  rule_state_t *rules;
  size_t n_rules;
  stage_state_t *stages;
  size_t n_stages;
  uint32_t enter;
  uint32_t leave;
  uint64_t window_ns;
  double alpha;
  em_level_t level;
  uint32_t down_streak; /* Clean windows in a row with target < level. */
};

/* Per-call outcome: the highest-level rule that entered and the one that left. */
typedef struct {
  rule_state_t *entered;
  rule_state_t *left;
  const char *enter_reason;
  const char *leave_reason;
} outcome_t;

static const char *const rule_names[EM_BUDGET_RULE_KINDS] = {
    "percentile", "deadline", "miss_ratio", "alive", "rate",        "rss_cap",
    "rss_slope",  "psi",      "gauge_max",  "flow",  "gpu_mem_cap", "gpu_mem_slope",
};

const char *em_budget_rule_name(em_budget_rule_kind_t kind) {
  if ((unsigned)kind >= EM_BUDGET_RULE_KINDS) {
    return "unknown";
  }
  return rule_names[kind];
}

static em_value_t val_u(uint64_t u) {
  em_value_t v = {.type = EM_VALUE_UINT, .as.u = u};
  return v;
}

static em_value_t val_f(double f) {
  em_value_t v = {.type = EM_VALUE_FLOAT, .as.f = f};
  return v;
}

static bool finite(double x) {
  return x == x && x - x == 0.0;
}

/* sqrt of x >= 0 by Newton's method (the agent links no libm). */
static double sqrt_pos(double x) {
  if (!(x > 0.0) || !finite(x)) {
    return 0.0;
  }
  double r = x >= 1.0 ? x : 1.0;
  for (int i = 0; i < 200; i++) {
    double next = 0.5 * (r + x / r);
    if (next >= r) {
      break;
    }
    r = next;
  }
  return r;
}

/* A number of `v` into *out; false when it is absent or not finite. */
static bool value_as_double(const em_value_t *v, double *out) {
  *out = em_value_double(v);
  return finite(*out);
}

static bool is_stage_rule(em_budget_rule_kind_t kind) {
  return kind <= EM_BUDGET_RULE_RATE;
}

/* True when s[0..cap) holds a string of 1..cap-1 bytes (it ends within its array). */
static bool str_ok(const char *s, size_t cap) {
  return s[0] != '\0' && memchr(s, '\0', cap) != NULL;
}

static bool stage_name_ok(const char *s) {
  for (; *s; s++) {
    char c = *s;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == ':' || c == '-';
    if (!ok) {
      return false;
    }
  }
  return true;
}

static bool name_ok(const char *s) {
  for (; *s; s++) {
    if (*s < 0x20 || *s > 0x7e) {
      return false;
    }
  }
  return true;
}

/* A FLOW rule's stages: 2..max, each a valid stage name, all distinct; a deadline. */
static bool flow_ok(const em_budget_rule_t *r) {
  size_t n = r->u.flow.n_stages;
  if (n < 2 || n > EM_BUDGET_FLOW_MAX_STAGES || r->u.flow.deadline_ns == 0) {
    return false;
  }
  for (size_t i = 0; i < n; i++) {
    const char *st = r->u.flow.stages[i];
    if (!str_ok(st, sizeof(r->u.flow.stages[i])) || !stage_name_ok(st)) {
      return false;
    }
    for (size_t j = 0; j < i; j++) {
      if (strcmp(r->u.flow.stages[j], st) == 0) {
        return false;
      }
    }
  }
  return true;
}

/* Checks the kind-specific fields of r. */
static bool params_ok(const em_budget_rule_t *r) {
  switch (r->kind) {
  case EM_BUDGET_RULE_PERCENTILE:
    return r->u.percentile.q > 0.0 && r->u.percentile.q <= 1.0;
  case EM_BUDGET_RULE_DEADLINE:
    return true;
  case EM_BUDGET_RULE_MISS_RATIO:
    return r->u.miss_ratio.max_ratio >= 0.0 && r->u.miss_ratio.max_ratio < 1.0;
  case EM_BUDGET_RULE_ALIVE:
    return r->u.alive.silence_ns > 0;
  case EM_BUDGET_RULE_RATE:
    return r->u.rate.min_fps > 0.0 && finite(r->u.rate.min_fps);
  case EM_BUDGET_RULE_RSS_CAP:
  case EM_BUDGET_RULE_GPU_MEM_CAP:
    return true;
  case EM_BUDGET_RULE_RSS_SLOPE:
  case EM_BUDGET_RULE_GPU_MEM_SLOPE:
    return finite(r->u.rss_slope.max_mib_per_h) && r->u.rss_slope.horizon_ns > 0;
  case EM_BUDGET_RULE_PSI:
  case EM_BUDGET_RULE_GAUGE_MAX:
    return finite(r->u.gauge.max);
  case EM_BUDGET_RULE_FLOW:
    return flow_ok(r);
  default:
    return false;
  }
}

static size_t find_stage(const em_budget_engine_t *b, const char *name) {
  if (!name) {
    return NO_STAGE;
  }
  for (size_t i = 0; i < b->n_stages; i++) {
    if (strcmp(b->stages[i].name, name) == 0) {
      return i;
    }
  }
  return NO_STAGE;
}

int em_budget_new(em_budget_engine_t **out, const em_budget_opts_t *opts, uint64_t now_ns) {
  if (!out || !opts || (opts->n_rules && !opts->rules) || opts->n_rules > EM_BUDGET_MAX_RULES ||
      opts->enter_windows == 0 || opts->leave_windows == 0 || !(opts->ewma_alpha >= 0.0) ||
      opts->ewma_alpha > 1.0) {
    return -EINVAL;
  }
  size_t n = opts->n_rules;
  size_t n_slope = 0;
  size_t n_flow = 0;
  for (size_t i = 0; i < n; i++) {
    const em_budget_rule_t *r = &opts->rules[i];
    if ((unsigned)r->kind >= EM_BUDGET_RULE_KINDS || r->level < EM_LEVEL_WARN ||
        r->level > EM_LEVEL_CRITICAL || !params_ok(r)) {
      return -EINVAL;
    }
    if (!str_ok(r->id, sizeof(r->id)) || !name_ok(r->id)) {
      return -EINVAL;
    }
    if (is_stage_rule(r->kind) &&
        (!str_ok(r->stage, sizeof(r->stage)) || !stage_name_ok(r->stage))) {
      return -EINVAL;
    }
    if ((r->kind == EM_BUDGET_RULE_PSI || r->kind == EM_BUDGET_RULE_GAUGE_MAX) &&
        !str_ok(r->u.gauge.figure, sizeof(r->u.gauge.figure))) {
      return -EINVAL;
    }
    for (size_t j = 0; j < i; j++) {
      if (strcmp(opts->rules[j].id, r->id) == 0) {
        return -EINVAL;
      }
    }
    n_slope += r->kind == EM_BUDGET_RULE_RSS_SLOPE || r->kind == EM_BUDGET_RULE_GPU_MEM_SLOPE;
    n_flow += r->kind == EM_BUDGET_RULE_FLOW;
  }

  /* One block: engine, rule states, stage states (at most one per rule), RSS rings, flow
     tables. */
  size_t size = sizeof(em_budget_engine_t) + n * sizeof(rule_state_t) + n * sizeof(stage_state_t) +
                n_slope * EM_BUDGET_SLOPE_SAMPLES * sizeof(rss_sample_t) +
                n_flow * EM_BUDGET_FLOW_FRAMES * sizeof(flow_slot_t);
  unsigned char *mem = calloc(1, size);
  if (!mem) {
    return -ENOMEM;
  }
  em_budget_engine_t *b = (em_budget_engine_t *)(void *)mem;
  b->rules = (rule_state_t *)(void *)(mem + sizeof(*b));
  b->stages = (stage_state_t *)(void *)(b->rules + n);
  rss_sample_t *rings = (rss_sample_t *)(void *)(b->stages + n);
  flow_slot_t *slots = (flow_slot_t *)(void *)(rings + n_slope * EM_BUDGET_SLOPE_SAMPLES);
  b->n_rules = n;
  b->enter = opts->enter_windows;
  b->leave = opts->leave_windows;
  b->window_ns = opts->window_ns;
  b->alpha = opts->ewma_alpha > 0.0 ? opts->ewma_alpha : EM_BUDGET_EWMA_ALPHA;
  b->level = EM_LEVEL_NOMINAL;

  for (size_t i = 0; i < n; i++) {
    rule_state_t *s = &b->rules[i];
    s->rule = opts->rules[i];
    s->stage_ix = NO_STAGE;
    s->last_seen_ns = now_ns;
    if (is_stage_rule(s->rule.kind)) {
      s->stage = s->rule.stage;
      s->stage_ix = find_stage(b, s->stage);
      if (s->stage_ix == NO_STAGE) {
        s->stage_ix = b->n_stages++;
        memcpy(b->stages[s->stage_ix].name, s->rule.stage, sizeof(s->rule.stage));
      }
    }
    if (s->rule.kind == EM_BUDGET_RULE_RSS_SLOPE || s->rule.kind == EM_BUDGET_RULE_GPU_MEM_SLOPE) {
      s->ring = rings;
      rings += EM_BUDGET_SLOPE_SAMPLES;
    }
    if (s->rule.kind == EM_BUDGET_RULE_FLOW) {
      s->stage = s->rule.u.flow.stages[0];
      s->slots = slots;
      slots += EM_BUDGET_FLOW_FRAMES;
    }
  }
  *out = b;
  return 0;
}

void em_budget_free(em_budget_engine_t *b) {
  free(b);
}

/* True when FLOW rules a and b follow the same stages in the same order. */
static bool same_flow(const rule_state_t *a, const rule_state_t *b) {
  if (a->rule.u.flow.n_stages != b->rule.u.flow.n_stages) {
    return false;
  }
  for (size_t k = 0; k < a->rule.u.flow.n_stages; k++) {
    if (strcmp(a->rule.u.flow.stages[k], b->rule.u.flow.stages[k]) != 0) {
      return false;
    }
  }
  return true;
}

size_t em_budget_adopt(em_budget_engine_t *dst, const em_budget_engine_t *src) {
  if (!dst || !src) {
    return 0;
  }
  size_t kept = 0;
  for (size_t i = 0; i < dst->n_rules; i++) {
    rule_state_t *d = &dst->rules[i];
    const rule_state_t *o = NULL;
    for (size_t j = 0; j < src->n_rules && !o; j++) {
      if (strcmp(src->rules[j].rule.id, d->rule.id) == 0 &&
          src->rules[j].rule.kind == d->rule.kind) {
        o = &src->rules[j];
      }
    }
    if (!o) {
      continue;
    }
    d->active = o->active;
    d->bad = o->bad;
    d->clean = o->clean;
    d->value = o->value;
    d->reason = o->reason;
    d->win_spans = o->win_spans;
    d->win_misses = o->win_misses;
    d->last_seen_ns = o->last_seen_ns;
    d->seen = o->seen;
    if (d->ring && o->ring) {
      memcpy(d->ring, o->ring, EM_BUDGET_SLOPE_SAMPLES * sizeof(*d->ring));
      d->ring_head = o->ring_head;
      d->ring_len = o->ring_len;
    }
    if (d->slots && o->slots && same_flow(d, o)) {
      memcpy(d->slots, o->slots, EM_BUDGET_FLOW_FRAMES * sizeof(*d->slots));
      d->flow_seq = o->flow_seq;
      d->evicted = o->evicted;
    }
    kept++;
  }
  for (size_t i = 0; i < dst->n_stages; i++) {
    size_t j = find_stage(src, dst->stages[i].name);
    if (j != NO_STAGE) {
      stage_state_t keep = src->stages[j];
      memcpy(keep.name, dst->stages[i].name, sizeof(keep.name));
      dst->stages[i] = keep;
    }
  }
  /* The level carries over as it is: with its rules gone or clean, it steps down through the
   * usual clean windows, never at once. */
  dst->level = src->level;
  dst->down_streak = src->down_streak;
  return kept;
}

em_level_t em_budget_level(const em_budget_engine_t *b) {
  return b->level;
}

static em_value_t rule_bound(const em_budget_rule_t *r) {
  switch (r->kind) {
  case EM_BUDGET_RULE_PERCENTILE:
    return val_u(r->u.percentile.bound_ns);
  case EM_BUDGET_RULE_DEADLINE:
    return val_u(r->u.deadline.bound_ns);
  case EM_BUDGET_RULE_MISS_RATIO:
    return val_f(r->u.miss_ratio.max_ratio);
  case EM_BUDGET_RULE_ALIVE:
    return val_u(r->u.alive.silence_ns);
  case EM_BUDGET_RULE_RATE:
    return val_f(r->u.rate.min_fps);
  case EM_BUDGET_RULE_RSS_CAP:
  case EM_BUDGET_RULE_GPU_MEM_CAP:
    return val_u(r->u.rss_cap.cap_bytes);
  case EM_BUDGET_RULE_RSS_SLOPE:
  case EM_BUDGET_RULE_GPU_MEM_SLOPE:
    return val_f(r->u.rss_slope.max_mib_per_h);
  case EM_BUDGET_RULE_FLOW:
    return val_u(r->u.flow.deadline_ns);
  default:
    return val_f(r->u.gauge.max);
  }
}

static em_level_t target_level(const em_budget_engine_t *b) {
  em_level_t t = EM_LEVEL_NOMINAL;
  for (size_t i = 0; i < b->n_rules; i++) {
    if (b->rules[i].active && b->rules[i].rule.level > t) {
      t = b->rules[i].rule.level;
    }
  }
  return t;
}

static void note_enter(outcome_t *o, rule_state_t *s, const char *reason) {
  s->reason = reason;
  if (!o->entered || s->rule.level > o->entered->rule.level) {
    o->entered = s;
    o->enter_reason = reason;
  }
}

static void note_leave(outcome_t *o, rule_state_t *s, const char *reason) {
  if (!o->left || s->rule.level > o->left->rule.level) {
    o->left = s;
    o->leave_reason = reason;
  }
}

/* The active rule with the highest level (the first such in rule order), or NULL. */
static const rule_state_t *level_holder(const em_budget_engine_t *b) {
  const rule_state_t *h = NULL;
  for (size_t i = 0; i < b->n_rules; i++) {
    const rule_state_t *s = &b->rules[i];
    if (s->active && (!h || s->rule.level > h->rule.level)) {
      h = s;
    }
  }
  return h;
}

/* The statistic of a stage's latency a rule judges, as a verdict names it: the percentile's
 * nearest of p50/p90/p99/p999 (a miss ratio r judges the 1 - r quantile), "max" for a deadline
 * or a flow, "mean" for a rate; NULL for rules that judge no latency (ALIVE, process rules). */
static const char *rule_statistic(const em_budget_rule_t *r) {
  double q;
  switch (r->kind) {
  case EM_BUDGET_RULE_PERCENTILE:
    q = r->u.percentile.q;
    break;
  case EM_BUDGET_RULE_MISS_RATIO:
    q = 1 - r->u.miss_ratio.max_ratio;
    break;
  case EM_BUDGET_RULE_DEADLINE:
  case EM_BUDGET_RULE_FLOW:
    return "max";
  case EM_BUDGET_RULE_RATE:
    return "mean";
  default:
    return NULL;
  }
  /* The nearest on a log scale of the tail (1 - q): the boundaries are the geometric means. */
  double tail = 1 - q;
  return tail <= 0.00316 ? "p999" : tail <= 0.0316 ? "p99" : tail <= 0.224 ? "p90" : "p50";
}

static void fill_change(const em_budget_engine_t *b, em_budget_change_t *c, em_level_t prev,
                        em_level_t level, const rule_state_t *s, const char *reason,
                        uint64_t now_ns) {
  if (!c) {
    return;
  }
  memset(c, 0, sizeof(*c));
  c->level = level;
  c->prev_level = prev;
  c->mono_ns = now_ns;
  c->reason = reason;
  c->window_ns = b->window_ns;
  if (s) {
    c->rule = s->rule.id;
    c->stage = s->stage;
    c->value = s->value;
    c->bound = rule_bound(&s->rule);
    c->statistic = s->stage ? rule_statistic(&s->rule) : NULL;
  }
}

/*
 * Applies the level rules of budget.h after a call's rule transitions. window_end: the call is
 * em_budget_on_window; window_clean: no rule violated in that window. Returns true on change.
 */
static bool settle(em_budget_engine_t *b, const outcome_t *o, bool window_end, bool window_clean,
                   uint64_t now_ns, em_budget_change_t *change) {
  em_level_t prev = b->level;
  em_level_t target = target_level(b);
  if (target > b->level) {
    const rule_state_t *cause = o->entered;
    const char *reason = o->enter_reason;
    if (!cause || cause->rule.level < target) {
      /* No rule entered at the new level in this call: a reload raised the level of a rule
       * that was already active. The cause is the rule that holds the level now, with its
       * last figure and the reason it entered with. */
      cause = level_holder(b);
      reason = cause ? cause->reason : NULL;
    }
    b->level = target;
    b->down_streak = 0;
    fill_change(b, change, prev, b->level, cause, reason ? reason : "violated", now_ns);
    return true;
  }
  if (target == b->level) {
    b->down_streak = 0;
    return false;
  }
  if (o->left) {
    b->level = (em_level_t)(b->level - 1);
    b->down_streak = 0;
    fill_change(b, change, prev, b->level, o->left, o->leave_reason, now_ns);
    return true;
  }
  if (!window_end) {
    return false;
  }
  if (!window_clean) {
    b->down_streak = 0;
    return false;
  }
  if (++b->down_streak < b->leave) {
    return false;
  }
  b->level = (em_level_t)(b->level - 1);
  b->down_streak = 0;
  fill_change(b, change, prev, b->level, NULL, "clean windows", now_ns);
  return true;
}

/* Marks an ALIVE rule as fed; clears it when stalled. */
static void feed_alive(rule_state_t *s, uint64_t now_ns, outcome_t *o) {
  s->last_seen_ns = now_ns;
  s->seen = true;
  if (s->active) {
    s->active = false;
    s->value = val_u(0);
    note_leave(o, s, "alive");
  }
}

/* A FLOW violation: enters at once, like a DEADLINE miss; the window is violating. */
static void flow_violate(rule_state_t *s, uint64_t elapsed_ns, const char *reason, outcome_t *o) {
  s->win_misses++;
  s->value = val_u(elapsed_ns);
  s->clean = 0;
  s->bad = 0;
  if (!s->active) {
    s->active = true;
    note_enter(o, s, reason);
  }
}

/* A slot for a new frame: a free one, else the oldest frame's (evicted, counted). */
static flow_slot_t *flow_take_slot(rule_state_t *s) {
  flow_slot_t *oldest = NULL;
  for (size_t i = 0; i < EM_BUDGET_FLOW_FRAMES; i++) {
    flow_slot_t *slot = &s->slots[i];
    if (!slot->live) {
      return slot;
    }
    if (!oldest || slot->seq < oldest->seq) {
      oldest = slot;
    }
  }
  s->evicted++;
  return oldest;
}

/* One span of `stage` for `frame` (not 0) against a FLOW rule (see budget.h). */
static void flow_span(rule_state_t *s, const char *stage, uint64_t frame, uint64_t duration_ns,
                      uint64_t now_ns, outcome_t *o) {
  size_t n = s->rule.u.flow.n_stages;
  size_t k = 0;
  while (k < n && strcmp(s->rule.u.flow.stages[k], stage) != 0) {
    k++;
  }
  if (k == n) {
    return;
  }
  flow_slot_t *slot = NULL;
  for (size_t i = 0; i < EM_BUDGET_FLOW_FRAMES && !slot; i++) {
    if (s->slots[i].live && s->slots[i].frame == frame) {
      slot = &s->slots[i];
    }
  }
  if (!slot) {
    if (k == 0) {
      slot = flow_take_slot(s);
      *slot = (flow_slot_t){.frame = frame,
                            .start_ns = now_ns >= duration_ns ? now_ns - duration_ns : 0,
                            .seq = ++s->flow_seq,
                            .pos = 1,
                            .live = true};
    }
    return; /* Not in flight at a later stage: never started here, judged or evicted. */
  }
  uint64_t elapsed = now_ns >= slot->start_ns ? now_ns - slot->start_ns : 0;
  if (k != slot->pos) {
    slot->live = false;
    flow_violate(s, elapsed, "flow order", o);
    return;
  }
  if (k + 1 < n) {
    slot->pos++;
    return;
  }
  slot->live = false;
  if (elapsed > s->rule.u.flow.deadline_ns) {
    flow_violate(s, elapsed, "flow deadline", o);
  } else {
    s->win_spans++;
  }
}

/* A DEADLINE rule judges one span: a miss enters at once. Returns whether it missed. */
static bool deadline_miss(rule_state_t *s, uint64_t duration_ns, outcome_t *o) {
  if (duration_ns <= s->rule.u.deadline.bound_ns) {
    return false;
  }
  s->value = val_u(duration_ns);
  s->clean = 0;
  s->bad = 0;
  if (!s->active) {
    s->active = true;
    note_enter(o, s, "deadline miss");
  }
  return true;
}

bool em_budget_on_span(em_budget_engine_t *b, const char *stage, uint64_t frame,
                       uint64_t duration_ns, uint64_t now_ns, em_budget_change_t *change) {
  if (!b || !stage) {
    return false;
  }
  outcome_t o = {0};
  for (size_t i = 0; frame != 0 && i < b->n_rules; i++) {
    if (b->rules[i].rule.kind == EM_BUDGET_RULE_FLOW) {
      flow_span(&b->rules[i], stage, frame, duration_ns, now_ns, &o);
    }
  }
  size_t ix = find_stage(b, stage);
  if (ix != NO_STAGE) {
    b->stages[ix].reported = true;
  }
  for (size_t i = 0; ix != NO_STAGE && i < b->n_rules; i++) {
    rule_state_t *s = &b->rules[i];
    if (s->stage_ix != ix) {
      continue;
    }
    switch (s->rule.kind) {
    case EM_BUDGET_RULE_DEADLINE:
      s->win_spans++;
      s->win_misses += deadline_miss(s, duration_ns, &o);
      break;
    case EM_BUDGET_RULE_MISS_RATIO:
      s->win_spans++;
      s->win_misses += duration_ns > s->rule.u.miss_ratio.bound_ns;
      break;
    case EM_BUDGET_RULE_ALIVE:
      feed_alive(s, now_ns, &o);
      break;
    default:
      break;
    }
  }
  return settle(b, &o, false, false, now_ns, change);
}

bool em_budget_on_hard_miss(em_budget_engine_t *b, const char *stage, uint64_t duration_ns,
                            uint64_t now_ns, em_budget_change_t *change) {
  if (!b || !stage) {
    return false;
  }
  size_t ix = find_stage(b, stage);
  outcome_t o = {0};
  for (size_t i = 0; ix != NO_STAGE && i < b->n_rules; i++) {
    rule_state_t *s = &b->rules[i];
    if (s->stage_ix == ix && s->rule.kind == EM_BUDGET_RULE_DEADLINE) {
      deadline_miss(s, duration_ns, &o);
    }
  }
  return settle(b, &o, false, false, now_ns, change);
}

bool em_budget_on_heartbeat(em_budget_engine_t *b, const char *stage, uint64_t now_ns,
                            em_budget_change_t *change) {
  if (!b || !stage) {
    return false;
  }
  size_t ix = find_stage(b, stage);
  outcome_t o = {0};
  if (ix != NO_STAGE) {
    b->stages[ix].reported = true;
  }
  for (size_t i = 0; ix != NO_STAGE && i < b->n_rules; i++) {
    rule_state_t *s = &b->rules[i];
    if (s->stage_ix == ix && s->rule.kind == EM_BUDGET_RULE_ALIVE) {
      feed_alive(s, now_ns, &o);
    }
  }
  return settle(b, &o, false, false, now_ns, change);
}

bool em_budget_on_timer(em_budget_engine_t *b, uint64_t now_ns, em_budget_change_t *change) {
  if (!b) {
    return false;
  }
  outcome_t o = {0};
  for (size_t i = 0; i < b->n_rules; i++) {
    rule_state_t *s = &b->rules[i];
    if (s->rule.kind == EM_BUDGET_RULE_FLOW) {
      for (size_t k = 0; k < EM_BUDGET_FLOW_FRAMES; k++) {
        flow_slot_t *slot = &s->slots[k];
        if (slot->live && now_ns > slot->start_ns &&
            now_ns - slot->start_ns > s->rule.u.flow.deadline_ns) {
          slot->live = false;
          flow_violate(s, now_ns - slot->start_ns, "flow deadline", &o);
        }
      }
      continue;
    }
    if (s->rule.kind != EM_BUDGET_RULE_ALIVE || !s->seen || s->active || now_ns < s->last_seen_ns) {
      continue;
    }
    uint64_t silent = now_ns - s->last_seen_ns;
    if (silent > s->rule.u.alive.silence_ns) {
      s->active = true;
      s->value = val_u(silent);
      note_enter(&o, s, "stalled");
    }
  }
  return settle(b, &o, false, false, now_ns, change);
}

static const em_hist_t *window_hist(const em_budget_window_t *w, const char *stage) {
  for (size_t i = 0; i < w->n_stages; i++) {
    if (w->stages[i].name && w->stages[i].hist && strcmp(w->stages[i].name, stage) == 0) {
      return w->stages[i].hist;
    }
  }
  return NULL;
}

/* The `why` of figure `name` in the window, or NULL. */
static const char *window_figure_why(const em_budget_window_t *w, const char *name) {
  for (size_t i = 0; i < w->n_figures; i++) {
    if (w->figures[i].name && strcmp(w->figures[i].name, name) == 0) {
      return w->figures[i].why;
    }
  }
  return NULL;
}

static bool window_figure(const em_budget_window_t *w, const char *name, double *out) {
  for (size_t i = 0; i < w->n_figures; i++) {
    if (w->figures[i].name && strcmp(w->figures[i].name, name) == 0) {
      return value_as_double(&w->figures[i].value, out);
    }
  }
  return false;
}

/* The memory figure a memory rule judges: the RSS, or the GPU memory figure (absent when the
 * window does not list it). */
static em_value_t memory_of(const rule_state_t *s, const em_budget_window_t *w) {
  if (s->rule.kind == EM_BUDGET_RULE_RSS_CAP || s->rule.kind == EM_BUDGET_RULE_RSS_SLOPE) {
    return w->rss_bytes;
  }
  for (size_t i = 0; i < w->n_figures; i++) {
    if (w->figures[i].name && strcmp(w->figures[i].name, EM_BUDGET_FIGURE_GPU_MEM) == 0) {
      return w->figures[i].value;
    }
  }
  return (em_value_t){.type = EM_VALUE_ABSENT};
}

/* Adds a memory sample (RSS or GPU memory) to s's ring (dropping those past the horizon);
 * returns the slope. */
static judge_t judge_slope(rule_state_t *s, const em_budget_window_t *w, uint64_t now_ns) {
  uint64_t rss = 0;
  em_value_t m = memory_of(s, w);
  if (m.type == EM_VALUE_UINT) {
    rss = m.as.u;
  } else if (m.type == EM_VALUE_INT && m.as.i >= 0) {
    rss = (uint64_t)m.as.i;
  } else {
    return JUDGE_ABSENT;
  }
  uint64_t horizon = s->rule.u.rss_slope.horizon_ns;
  uint64_t spacing = horizon / EM_BUDGET_SLOPE_SAMPLES;
  if (s->ring_len) {
    const rss_sample_t *newest =
        &s->ring[(s->ring_head + s->ring_len - 1) % EM_BUDGET_SLOPE_SAMPLES];
    if (now_ns >= newest->t_ns && now_ns - newest->t_ns >= spacing) {
      if (s->ring_len == EM_BUDGET_SLOPE_SAMPLES) {
        s->ring_head = (s->ring_head + 1) % EM_BUDGET_SLOPE_SAMPLES;
        s->ring_len--;
      }
      s->ring[(s->ring_head + s->ring_len) % EM_BUDGET_SLOPE_SAMPLES] = (rss_sample_t){now_ns, rss};
      s->ring_len++;
    }
  } else {
    s->ring[s->ring_head] = (rss_sample_t){now_ns, rss};
    s->ring_len = 1;
  }
  while (s->ring_len > 1 && now_ns - s->ring[s->ring_head].t_ns > horizon) {
    s->ring_head = (s->ring_head + 1) % EM_BUDGET_SLOPE_SAMPLES;
    s->ring_len--;
  }
  const rss_sample_t *oldest = &s->ring[s->ring_head];
  const rss_sample_t *newest = &s->ring[(s->ring_head + s->ring_len - 1) % EM_BUDGET_SLOPE_SAMPLES];
  if (s->ring_len < EM_BUDGET_SLOPE_MIN || newest->t_ns - oldest->t_ns < horizon / 2) {
    return JUDGE_ABSENT;
  }
  /* Least squares on centred values: t in hours since the oldest sample, rss in MiB. */
  double mt = 0.0, my = 0.0;
  for (size_t k = 0; k < s->ring_len; k++) {
    const rss_sample_t *p = &s->ring[(s->ring_head + k) % EM_BUDGET_SLOPE_SAMPLES];
    mt += (double)(p->t_ns - oldest->t_ns) / NS_PER_S / S_PER_H;
    my += (double)p->rss_bytes / MIB_F;
  }
  mt /= (double)s->ring_len;
  my /= (double)s->ring_len;
  double stt = 0.0, sty = 0.0;
  for (size_t k = 0; k < s->ring_len; k++) {
    const rss_sample_t *p = &s->ring[(s->ring_head + k) % EM_BUDGET_SLOPE_SAMPLES];
    double dt = (double)(p->t_ns - oldest->t_ns) / NS_PER_S / S_PER_H - mt;
    double dy = (double)p->rss_bytes / MIB_F - my;
    stt += dt * dt;
    sty += dt * dy;
  }
  if (!(stt > 0.0)) {
    return JUDGE_ABSENT;
  }
  double slope = sty / stt;
  s->value = val_f(slope);
  return slope > s->rule.u.rss_slope.max_mib_per_h ? JUDGE_VIOLATED : JUDGE_CLEAN;
}

/* Judges one rule's window. Sets s->value when it measured something. */
static judge_t judge(rule_state_t *s, const em_budget_window_t *w, uint64_t now_ns) {
  const em_budget_rule_t *r = &s->rule;
  const em_hist_t *h = is_stage_rule(r->kind) ? window_hist(w, r->stage) : NULL;
  double x = 0.0;
  switch (r->kind) {
  case EM_BUDGET_RULE_PERCENTILE: {
    if (!h || h->count == 0) {
      return JUDGE_ABSENT;
    }
    uint64_t v = em_hist_quantile(h, r->u.percentile.q);
    s->value = val_u(v);
    return v > r->u.percentile.bound_ns ? JUDGE_VIOLATED : JUDGE_CLEAN;
  }
  case EM_BUDGET_RULE_DEADLINE:
    if (s->win_spans == 0) {
      return JUDGE_ABSENT;
    }
    return s->win_misses ? JUDGE_VIOLATED : JUDGE_CLEAN;
  case EM_BUDGET_RULE_FLOW: /* win_spans: frames completed in time; win_misses: violations. */
    if (s->win_misses) {
      return JUDGE_VIOLATED;
    }
    return s->win_spans ? JUDGE_CLEAN : JUDGE_ABSENT;
  case EM_BUDGET_RULE_MISS_RATIO: {
    if (s->win_spans == 0) {
      return JUDGE_ABSENT;
    }
    double ratio = (double)s->win_misses / (double)s->win_spans;
    s->value = val_f(ratio);
    return ratio > r->u.miss_ratio.max_ratio ? JUDGE_VIOLATED : JUDGE_CLEAN;
  }
  case EM_BUDGET_RULE_RATE: {
    if (!h || w->window_ns == 0) {
      return JUDGE_ABSENT;
    }
    double fps = (double)h->count * NS_PER_S / (double)w->window_ns;
    s->value = val_f(fps);
    return fps < r->u.rate.min_fps ? JUDGE_VIOLATED : JUDGE_CLEAN;
  }
  case EM_BUDGET_RULE_RSS_CAP:
  case EM_BUDGET_RULE_GPU_MEM_CAP: {
    em_value_t m = memory_of(s, w);
    if (m.type != EM_VALUE_UINT) {
      return JUDGE_ABSENT;
    }
    s->value = m;
    return m.as.u > r->u.rss_cap.cap_bytes ? JUDGE_VIOLATED : JUDGE_CLEAN;
  }
  case EM_BUDGET_RULE_RSS_SLOPE:
  case EM_BUDGET_RULE_GPU_MEM_SLOPE:
    return judge_slope(s, w, now_ns);
  case EM_BUDGET_RULE_PSI:
  case EM_BUDGET_RULE_GAUGE_MAX:
    if (!window_figure(w, r->u.gauge.figure, &x)) {
      return JUDGE_ABSENT;
    }
    s->value = val_f(x);
    return x > r->u.gauge.max ? JUDGE_VIOLATED : JUDGE_CLEAN;
  default:
    return JUDGE_ABSENT; /* ALIVE: timer and spans only. */
  }
}

/* Folds the window p99 of every rule-named stage into its EWMA; sets its z-score. */
static void update_anomaly(em_budget_engine_t *b, const em_budget_window_t *w) {
  for (size_t i = 0; i < b->n_stages; i++) {
    stage_state_t *st = &b->stages[i];
    const em_hist_t *h = window_hist(w, st->name);
    if (!h || h->count == 0) {
      continue;
    }
    double x = (double)em_hist_quantile(h, 0.99);
    if (!st->seeded) {
      st->seeded = true;
      st->mean = x;
      st->var = 0.0;
      st->z = 0.0;
      continue;
    }
    double d = x - st->mean;
    double sd = sqrt_pos(st->var);
    st->z = sd > 0.0 ? d / sd : 0.0;
    st->mean += b->alpha * d;
    st->var = (1.0 - b->alpha) * (st->var + b->alpha * d * d);
  }
}

bool em_budget_on_window(em_budget_engine_t *b, const em_budget_window_t *w, uint64_t now_ns,
                         em_budget_change_t *change) {
  if (!b || !w) {
    return false;
  }
  outcome_t o = {0};
  bool window_clean = true;
  for (size_t i = 0; i < b->n_rules; i++) {
    rule_state_t *s = &b->rules[i];
    if (s->rule.kind == EM_BUDGET_RULE_ALIVE) {
      continue;
    }
    judge_t j = judge(s, w, now_ns);
    s->win_spans = 0;
    s->win_misses = 0;
    if (j == JUDGE_VIOLATED) {
      window_clean = false;
      s->clean = 0;
      if (!s->active && ++s->bad >= b->enter) {
        s->active = true;
        s->bad = 0;
        const char *why = NULL;
        if (s->rule.kind == EM_BUDGET_RULE_PSI || s->rule.kind == EM_BUDGET_RULE_GAUGE_MAX) {
          why = window_figure_why(w, s->rule.u.gauge.figure);
        }
        note_enter(&o, s, why ? why : "violated");
      }
    } else if (j == JUDGE_CLEAN) {
      s->bad = 0;
      if (s->active && ++s->clean >= b->leave) {
        s->active = false;
        s->clean = 0;
        note_leave(&o, s, "cleared");
      }
    }
  }
  update_anomaly(b, w);
  return settle(b, &o, true, window_clean, now_ns, change);
}

int em_budget_anomaly(const em_budget_engine_t *b, const char *stage, double *z) {
  if (!b || !z) {
    return -EINVAL;
  }
  size_t ix = find_stage(b, stage);
  if (ix == NO_STAGE) {
    return -ENOENT;
  }
  *z = b->stages[ix].z;
  return 0;
}

int em_budget_reported(const em_budget_engine_t *b, const char *stage) {
  if (!b || !stage) {
    return -EINVAL;
  }
  size_t ix = find_stage(b, stage);
  return ix == NO_STAGE ? -ENOENT : b->stages[ix].reported;
}

int em_budget_flow_evicted(const em_budget_engine_t *b, const char *id, uint64_t *evicted) {
  if (!b || !id || !evicted) {
    return -EINVAL;
  }
  for (size_t i = 0; i < b->n_rules; i++) {
    const rule_state_t *s = &b->rules[i];
    if (s->rule.kind == EM_BUDGET_RULE_FLOW && strcmp(s->rule.id, id) == 0) {
      *evicted = s->evicted;
      return 0;
    }
  }
  return -ENOENT;
}

int em_budget_describe(const em_budget_engine_t *b, em_budget_t *out, size_t cap) {
  if (!b || (cap && !out)) {
    return -EINVAL;
  }
  if (cap < b->n_rules) {
    return -ENOSPC;
  }
  for (size_t i = 0; i < b->n_rules; i++) {
    const rule_state_t *s = &b->rules[i];
    em_budget_t *u = &out[i];
    memset(u, 0, sizeof(*u));
    u->id = s->rule.id;
    u->rule = em_budget_rule_name(s->rule.kind);
    u->level = s->rule.level;
    u->bound = rule_bound(&s->rule);
    u->stage = s->stage;
    switch (s->rule.kind) {
    case EM_BUDGET_RULE_PERCENTILE:
    case EM_BUDGET_RULE_MISS_RATIO:
    case EM_BUDGET_RULE_RATE:
      u->window_ns = b->window_ns;
      break;
    case EM_BUDGET_RULE_RSS_SLOPE:
    case EM_BUDGET_RULE_GPU_MEM_SLOPE:
      u->window_ns = s->rule.u.rss_slope.horizon_ns;
      break;
    default:
      break;
    }
  }
  return (int)b->n_rules;
}
