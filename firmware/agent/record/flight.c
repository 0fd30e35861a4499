/*
 * flight.c - see flight.h. The tick ring is an array of slots, each with room for every
 * column; the span ring an array of em_flight_span_t whose stage is an index into the
 * recorder's own name table, with a count of the spans in the ring per name, so a name is
 * replaced only when no span refers to it. A recording points into the rings: the span ring is
 * first turned so that its oldest span is at index 0 (three reversals, in place) and sorted by
 * start when it is not already, so the window's spans are one contiguous run.
 */
#define _POSIX_C_SOURCE 200809L

#include "flight.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define HINTS 256u /* Caller stage indices remembered for the name lookup. */

typedef struct {
  uint64_t mono_ns;
  uint32_t n_values;
  uint32_t evicted; /* Spans overwritten whose start falls in this tick's window. */
} tick_slot_t;

struct em_flight_rec {
  uint64_t period_ns;
  uint64_t pre_ns;
  uint64_t post_ns;
  uint64_t min_gap_ns;
  em_flight_column_t *columns;
  size_t n_columns;

  tick_slot_t *ticks;        /* tick_cap slots, oldest at tick_head. */
  em_flight_value_t *values; /* tick_cap * n_columns: slot i's values at i * n_columns. */
  uint32_t tick_cap;
  uint64_t hold_ns; /* How long past a window's end its ticks stay in the ring. */
  uint32_t tick_head;
  uint32_t tick_count;
  uint32_t evicted_later;      /* Overwritten spans that started after the newest tick. */
  em_flight_tick_t *out_ticks; /* tick_cap: a recording's ticks. */

  em_flight_span_t *spans; /* span_cap, oldest at span_first; span_first is 0 until full. */
  uint32_t span_cap;
  uint32_t span_first;
  uint32_t span_count;

  char names[EM_FLIGHT_MAX_STAGES][EM_STAGE_FIELD_BYTES];
  const char *name_ptrs[EM_FLIGHT_MAX_STAGES];
  uint32_t name_refs[EM_FLIGHT_MAX_STAGES]; /* Spans in the ring with this name. */
  size_t n_names;
  int16_t hint_name[HINTS]; /* Caller index -> name index last seen with it, or -1. */

  bool pending;
  uint64_t trig_mono_ns;
  uint64_t trig_wall_ns;
  bool have_last;
  uint64_t last_trig_ns;
  em_flight_trigger_t trig;
  char trig_rule[EM_STAGE_FIELD_BYTES * 2];
  char trig_stage[EM_STAGE_FIELD_BYTES];
  char trig_reason[160];

  em_flight_t out;
  uint8_t *buf;
  uint32_t buf_cap;
  uint64_t bytes;
  em_flight_rec_stats_t st;
};

static void *counted(em_flight_rec_t *r, size_t n, size_t size) {
  r->bytes += (uint64_t)n * size;
  return calloc(n ? n : 1, size);
}

int em_flight_rec_new(em_flight_rec_t **out, const em_flight_rec_opts_t *o) {
  if (!out || !o || o->period_ns == 0 || o->pre_ns == 0 || o->max_spans == 0 ||
      o->max_spans > EM_FLIGHT_MAX_SPANS || o->max_bytes < 1024u ||
      o->max_bytes > EM_FLIGHT_MAX_BYTES || o->n_columns > EM_FLIGHT_MAX_COLUMNS ||
      (o->n_columns && !o->columns)) {
    return -EINVAL;
  }
  for (size_t i = 0; i < o->n_columns; i++) {
    if (!o->columns[i].name || !o->columns[i].unit) {
      return -EINVAL;
    }
  }
  em_flight_rec_t *r = calloc(1, sizeof(*r));
  if (!r) {
    return -ENOMEM;
  }
  r->bytes = sizeof(*r);
  r->period_ns = o->period_ns;
  r->pre_ns = o->pre_ns;
  r->post_ns = o->post_ns;
  r->min_gap_ns = o->min_gap_ns;
  r->n_columns = o->n_columns;
  uint64_t window = o->pre_ns + o->post_ns;
  uint64_t ticks = (window + o->period_ns - 1) / o->period_ns + EM_FLIGHT_REC_TICK_SLACK;
  if (ticks > EM_FLIGHT_MAX_TICKS) {
    ticks = EM_FLIGHT_MAX_TICKS;
    r->st.ticks_capped = 1;
  }
  uint64_t hold = (o->hold_ns + o->period_ns - 1) / o->period_ns;
  hold = hold < EM_FLIGHT_MAX_TICKS - ticks ? hold : EM_FLIGHT_MAX_TICKS - ticks;
  r->hold_ns = hold * o->period_ns;
  ticks += hold;
  r->tick_cap = (uint32_t)ticks;
  r->span_cap = o->max_spans;
  r->buf_cap = o->max_bytes;
  r->columns = counted(r, o->n_columns, sizeof(*r->columns));
  r->ticks = counted(r, r->tick_cap, sizeof(*r->ticks));
  r->values = counted(r, (size_t)r->tick_cap * o->n_columns, sizeof(*r->values));
  r->out_ticks = counted(r, r->tick_cap, sizeof(*r->out_ticks));
  r->spans = counted(r, r->span_cap, sizeof(*r->spans));
  r->buf = counted(r, r->buf_cap, 1);
  if (!r->columns || !r->ticks || !r->values || !r->out_ticks || !r->spans || !r->buf) {
    em_flight_rec_free(r);
    return -ENOMEM;
  }
  if (o->n_columns) {
    memcpy(r->columns, o->columns, o->n_columns * sizeof(*r->columns));
  }
  for (size_t i = 0; i < EM_FLIGHT_MAX_STAGES; i++) {
    r->name_ptrs[i] = r->names[i];
  }
  for (size_t i = 0; i < HINTS; i++) {
    r->hint_name[i] = -1;
  }
  *out = r;
  return 0;
}

void em_flight_rec_free(em_flight_rec_t *r) {
  if (!r) {
    return;
  }
  free(r->columns);
  free(r->ticks);
  free(r->values);
  free(r->out_ticks);
  free(r->spans);
  free(r->buf);
  free(r);
}

uint64_t em_flight_rec_bytes(const em_flight_rec_t *r) {
  return r ? r->bytes : 0;
}

uint64_t em_flight_rec_hold_ns(const em_flight_rec_t *r) {
  return r ? r->hold_ns : 0;
}

uint32_t em_flight_rec_tick_capacity(const em_flight_rec_t *r) {
  return r ? r->tick_cap : 0;
}

uint32_t em_flight_rec_span_capacity(const em_flight_rec_t *r) {
  return r ? r->span_cap : 0;
}

void em_flight_rec_set_min_gap(em_flight_rec_t *r, uint64_t min_gap_ns) {
  if (r) {
    r->min_gap_ns = min_gap_ns;
  }
}

/* --- ticks ---------------------------------------------------------------------------- */

static tick_slot_t *tick_at(const em_flight_rec_t *r, uint32_t i) {
  return &r->ticks[(r->tick_head + i) % r->tick_cap];
}

em_flight_value_t *em_flight_rec_tick(em_flight_rec_t *r, uint64_t mono_ns) {
  uint32_t slot;
  if (r->tick_count == r->tick_cap) {
    slot = r->tick_head;
    r->tick_head = (r->tick_head + 1) % r->tick_cap;
  } else {
    slot = (r->tick_head + r->tick_count) % r->tick_cap;
    r->tick_count++;
  }
  r->ticks[slot] = (tick_slot_t){.mono_ns = mono_ns, .evicted = r->evicted_later};
  r->evicted_later = 0;
  return r->values + (size_t)slot * r->n_columns;
}

void em_flight_rec_commit(em_flight_rec_t *r, size_t n_values) {
  if (r->tick_count == 0) {
    return;
  }
  tick_at(r, r->tick_count - 1)->n_values =
      (uint32_t)(n_values < r->n_columns ? n_values : r->n_columns);
}

/* A span that started at start_ns left the ring: charged to the tick whose window holds its
 * start (the first tick at or after it), or to the next tick when it started after the newest
 * one. A span older than the tick ring's first window is in no recording's window. */
static void charge_evicted(em_flight_rec_t *r, uint64_t start_ns) {
  if (r->tick_count == 0 || start_ns > tick_at(r, r->tick_count - 1)->mono_ns) {
    r->evicted_later++;
    return;
  }
  uint64_t first = tick_at(r, 0)->mono_ns;
  if (start_ns + r->period_ns < first) {
    return;
  }
  uint32_t lo = 0, hi = r->tick_count - 1; /* The answer is in [lo, hi]. */
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (tick_at(r, mid)->mono_ns >= start_ns) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  tick_at(r, lo)->evicted++;
}

/* --- spans ---------------------------------------------------------------------------- */

/* The name table's index for `stage`, adding it (in a slot no span refers to) when new;
 * -1 when every slot is referred to. */
static int name_index(em_flight_rec_t *r, size_t hint, const char *stage) {
  if (hint < HINTS && r->hint_name[hint] >= 0 && strcmp(r->names[r->hint_name[hint]], stage) == 0) {
    return r->hint_name[hint];
  }
  int free_slot = -1;
  for (size_t i = 0; i < r->n_names; i++) {
    if (strcmp(r->names[i], stage) == 0) {
      free_slot = (int)i;
      goto found;
    }
    if (free_slot < 0 && r->name_refs[i] == 0) {
      free_slot = (int)i;
    }
  }
  if (r->n_names < EM_FLIGHT_MAX_STAGES) {
    free_slot = (int)r->n_names++;
  } else if (free_slot < 0) {
    return -1;
  }
  /* A slot nobody refers to takes the new name; hints that named it are stale now. */
  memcpy(r->names[free_slot], stage, strlen(stage) + 1);
  for (size_t h = 0; h < HINTS; h++) {
    if (r->hint_name[h] == free_slot) {
      r->hint_name[h] = -1;
    }
  }
found:
  if (hint < HINTS) {
    r->hint_name[hint] = (int16_t)free_slot;
  }
  return free_slot;
}

int em_flight_rec_span(em_flight_rec_t *r, size_t hint, const char *stage, uint64_t frame_id,
                       uint64_t start_ns, uint64_t duration_ns) {
  size_t len = stage ? strnlen(stage, EM_STAGE_FIELD_BYTES) : 0;
  if (len == 0 || len >= EM_STAGE_FIELD_BYTES) {
    return -EINVAL;
  }
  int k = name_index(r, hint, stage);
  if (k < 0) {
    r->st.unnamed++;
    return -ENOSPC;
  }
  uint32_t slot;
  if (r->span_count == r->span_cap) {
    slot = r->span_first;
    const em_flight_span_t *old = &r->spans[slot];
    r->name_refs[old->stage]--;
    charge_evicted(r, old->start_ns);
    r->span_first = (r->span_first + 1) % r->span_cap;
  } else {
    slot = r->span_count++; /* span_first is 0 until the ring is full. */
  }
  r->spans[slot] = (em_flight_span_t){
      .stage = (uint32_t)k, .frame_id = frame_id, .start_ns = start_ns, .duration_ns = duration_ns};
  r->name_refs[k]++;
  r->st.spans++;
  return 0;
}

static void reverse(em_flight_span_t *s, size_t lo, size_t hi) {
  while (lo + 1 < hi) {
    em_flight_span_t t = s[lo];
    s[lo++] = s[--hi];
    s[hi] = t;
  }
}

static bool span_before(const em_flight_span_t *a, const em_flight_span_t *b) {
  return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->frame_id < b->frame_id;
}

static void sift_down(em_flight_span_t *s, size_t root, size_t n) {
  for (;;) {
    size_t child = 2 * root + 1;
    if (child >= n) {
      return;
    }
    if (child + 1 < n && span_before(&s[child], &s[child + 1])) {
      child++;
    }
    if (!span_before(&s[root], &s[child])) {
      return;
    }
    em_flight_span_t t = s[root];
    s[root] = s[child];
    s[child] = t;
    root = child;
  }
}

/* The ring, oldest first at index 0 and ascending by start (heapsort in place when spans
 * arrived out of order: several threads, datagrams sent at the end of their stage). */
static void span_linearize(em_flight_rec_t *r) {
  em_flight_span_t *s = r->spans;
  size_t n = r->span_count;
  if (r->span_first != 0) {
    reverse(s, 0, r->span_first);
    reverse(s, r->span_first, n);
    reverse(s, 0, n);
    r->span_first = 0;
  }
  bool sorted = true;
  for (size_t i = 1; i < n && sorted; i++) {
    sorted = !span_before(&s[i], &s[i - 1]);
  }
  if (sorted) {
    return;
  }
  for (size_t i = n / 2; i-- > 0;) {
    sift_down(s, i, n);
  }
  for (size_t end = n; end-- > 1;) {
    em_flight_span_t t = s[0];
    s[0] = s[end];
    s[end] = t;
    sift_down(s, 0, end);
  }
}

/* First index in s[0..n) whose start is >= t. */
static size_t span_lower(const em_flight_span_t *s, size_t n, uint64_t t) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (s[mid].start_ns < t) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

/* --- triggers and recordings ---------------------------------------------------------- */

static const char *copy_text(char *dst, size_t cap, const char *src) {
  if (!src) {
    return NULL;
  }
  size_t n = strnlen(src, cap - 1);
  memcpy(dst, src, n);
  dst[n] = '\0';
  return dst;
}

int em_flight_rec_trigger(em_flight_rec_t *r, const em_flight_trigger_t *t, uint64_t mono_ns,
                          uint64_t wall_ns) {
  if (r->pending) {
    r->st.suppressed++;
    return -EBUSY;
  }
  if (r->have_last && mono_ns - r->last_trig_ns < r->min_gap_ns) {
    r->st.suppressed++;
    return -EAGAIN;
  }
  r->pending = true;
  r->have_last = true;
  r->last_trig_ns = mono_ns;
  r->trig_mono_ns = mono_ns;
  r->trig_wall_ns = wall_ns;
  r->trig = *t;
  r->trig.rule = copy_text(r->trig_rule, sizeof(r->trig_rule), t->rule);
  r->trig.stage = copy_text(r->trig_stage, sizeof(r->trig_stage), t->stage);
  r->trig.reason = copy_text(r->trig_reason, sizeof(r->trig_reason), t->reason);
  return 0;
}

bool em_flight_rec_due(const em_flight_rec_t *r, uint64_t now_ns) {
  return r && r->pending && now_ns >= r->trig_mono_ns + r->post_ns;
}

/* A tick of the ring as a recording holds it: its values point into the ring. */
static em_flight_tick_t tick_out(const em_flight_rec_t *r, const tick_slot_t *t) {
  size_t slot = (size_t)(t - r->ticks);
  return (em_flight_tick_t){
      .mono_ns = t->mono_ns, .values = r->values + slot * r->n_columns, .n_values = t->n_values};
}

em_flight_t *em_flight_rec_take(em_flight_rec_t *r, uint64_t now_ns) {
  if (!em_flight_rec_due(r, now_ns)) {
    return NULL;
  }
  r->pending = false;
  uint64_t from = r->trig_mono_ns > r->pre_ns ? r->trig_mono_ns - r->pre_ns : 0;
  uint64_t to = r->trig_mono_ns + r->post_ns;

  size_t n_ticks = 0;
  uint64_t overwritten = 0;
  for (uint32_t i = 0; i < r->tick_count; i++) {
    const tick_slot_t *t = tick_at(r, i);
    if (t->mono_ns < from || t->mono_ns > to) {
      continue;
    }
    r->out_ticks[n_ticks++] = tick_out(r, t);
    overwritten += t->evicted;
  }

  span_linearize(r);
  size_t lo = span_lower(r->spans, r->span_count, from);
  size_t hi = to == UINT64_MAX ? r->span_count : span_lower(r->spans, r->span_count, to + 1);

  r->out = (em_flight_t){.head = {.time_ns = r->trig_wall_ns},
                         .number = (uint32_t)r->st.recordings,
                         .trigger = r->trig,
                         .trigger_mono_ns = r->trig_mono_ns,
                         .pre_ns = r->pre_ns,
                         .post_ns = r->post_ns,
                         .period_ns = r->period_ns,
                         .stages = r->name_ptrs,
                         .n_stages = r->n_names,
                         .columns = r->columns,
                         .n_columns = r->n_columns,
                         .ticks = r->out_ticks,
                         .n_ticks = n_ticks,
                         .spans = r->spans + lo,
                         .n_spans = hi - lo,
                         .truncated = {.spans_overwritten = overwritten}};
  r->st.recordings++;
  r->st.overwritten += overwritten;
  return &r->out;
}

void em_flight_rec_view(em_flight_rec_t *r, em_flight_t *out) {
  for (uint32_t i = 0; i < r->tick_count; i++) {
    r->out_ticks[i] = tick_out(r, tick_at(r, i));
  }
  span_linearize(r);
  *out = (em_flight_t){.period_ns = r->period_ns,
                       .stages = r->name_ptrs,
                       .n_stages = r->n_names,
                       .columns = r->columns,
                       .n_columns = r->n_columns,
                       .ticks = r->out_ticks,
                       .n_ticks = r->tick_count,
                       .spans = r->spans,
                       .n_spans = r->span_count};
}

uint8_t *em_flight_rec_buffer(em_flight_rec_t *r, size_t *cap) {
  if (cap) {
    *cap = r ? r->buf_cap : 0;
  }
  return r ? r->buf : NULL;
}

void em_flight_rec_stats(const em_flight_rec_t *r, em_flight_rec_stats_t *out) {
  if (out) {
    *out = r ? r->st : (em_flight_rec_stats_t){0};
  }
}
