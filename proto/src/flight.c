/*
 * flight.c - writes a flight recording (edgemon/flight.h, kind 5) as CBOR: the checks that make
 * the encoder refuse what the decoder would refuse, the delta encoding of tick times, span
 * starts, frame ids and counter columns, the fit under a size cap (which leaves out the items
 * farthest from the trigger from sizes computed item by item, without encoding again), and the
 * historical form, on the layer it shares with the stack profile (forensic.h). Owns nothing,
 * never allocates, reentrant.
 */
#include <string.h>

#include "forensic.h"
#include "verdict.h"

const char *em_flight_cause_name(em_flight_cause_t cause) {
  return em__cause_name((uint64_t)cause);
}

bool em__counter_total(const em_value_t *v, uint64_t *total) {
  if (v->type == EM_VALUE_UINT) {
    *total = v->as.u;
    return true;
  }
  if (v->type == EM_VALUE_INT && v->as.i >= 0) {
    *total = (uint64_t)v->as.i;
    return true;
  }
  return false;
}

/* --- checks --------------------------------------------------------------------------- */

static int check_tables(const em_flight_t *f) {
  int rc = em__check_stage_table(f->stages, f->n_stages);
  if (rc) {
    return rc;
  }
  for (size_t i = 0; i < f->n_columns; i++) {
    const em_flight_column_t *c = &f->columns[i];
    rc = em__check_cstr(c->name, STR_NAME, EM_PROTO_MAX_NAME_BYTES);
    if (!rc) {
      rc = em__check_cstr(c->unit, STR_NAME, EM_PROTO_MAX_UNIT_BYTES);
    }
    if (rc) {
      return rc;
    }
    if ((unsigned)c->kind > EM_METRIC_DELTA) {
      return EM_PROTO_ERANGE;
    }
  }
  return 0;
}

static int check_tick(const em_flight_t *f, const em_flight_tick_t *t) {
  if (t->n_values > EM_FLIGHT_MAX_COLUMNS) {
    return EM_PROTO_ELIMIT;
  }
  if (t->n_values && !t->values) {
    return EM_PROTO_EINVAL;
  }
  for (size_t j = 0; j < t->n_values; j++) {
    const em_flight_value_t *v = &t->values[j];
    if (v->column >= f->n_columns) {
      return EM_PROTO_ERANGE;
    }
    if (j > 0 && v->column <= t->values[j - 1].column) {
      return v->column == t->values[j - 1].column ? EM_PROTO_EDUPLICATE : EM_PROTO_EINVAL;
    }
    int rc = em__check_value(&v->value);
    if (rc) {
      return rc;
    }
    uint64_t total;
    if (f->columns[v->column].kind == EM_METRIC_COUNTER && v->value.type != EM_VALUE_ABSENT &&
        !em__counter_total(&v->value, &total)) {
      return v->value.type == EM_VALUE_INT ? EM_PROTO_ERANGE : EM_PROTO_ETYPE;
    }
  }
  return 0;
}

/*
 * 0, or the decoder's code for a recording it would refuse (names, indices, order, counter
 * columns holding anything but unsigned totals, limits); EM_PROTO_EINVAL for NULL tables with a
 * count. The encoder, the fit and the JSON printer run it (em__flight_doc).
 */
static int check_flight(const void *doc) {
  const em_flight_t *f = doc;
  const em__table_t tables[] = {{f->n_stages, f->stages, EM_FLIGHT_MAX_STAGES},
                                {f->n_columns, f->columns, EM_FLIGHT_MAX_COLUMNS},
                                {f->n_ticks, f->ticks, EM_FLIGHT_MAX_TICKS},
                                {f->n_spans, f->spans, EM_FLIGHT_MAX_SPANS}};
  em_trigger_t trigger = em__flight_trigger(&f->trigger);
  int rc = em__check_tables(tables, 4);
  if (!rc) {
    rc = em__check_trigger(&trigger);
  }
  if (!rc) {
    rc = check_tables(f);
  }
  for (size_t i = 0; i < f->n_ticks && !rc; i++) {
    if (i > 0 && f->ticks[i].mono_ns < f->ticks[i - 1].mono_ns) {
      return EM_PROTO_EINCONSISTENT;
    }
    rc = check_tick(f, &f->ticks[i]);
  }
  for (size_t i = 0; i < f->n_spans && !rc; i++) {
    if (f->spans[i].stage >= f->n_stages) {
      return EM_PROTO_ERANGE;
    }
    if (i > 0 && f->spans[i].start_ns < f->spans[i - 1].start_ns) {
      return EM_PROTO_EINCONSISTENT;
    }
  }
  if (!rc && f->verdict) {
    rc = em_proto_verdict_check(f->verdict);
  }
  return rc;
}

/* --- writer --------------------------------------------------------------------------- */

const em__uint_member_t em__flight_cuts[3] = {
    EM__UINT_MEMBER(KN_SPANS_CUT, "spans_cut", em_flight_truncation_t, spans_cut),
    EM__UINT_MEMBER(KN_TICKS_CUT, "ticks_cut", em_flight_truncation_t, ticks_cut),
    EM__UINT_MEMBER(KN_OVERWRITTEN, "spans_overwritten", em_flight_truncation_t, spans_overwritten),
};

/* Bytes of key 14 and its map for these counts; 0 when all are 0 (the key is left out). */
static size_t truncation_bytes(const em_flight_truncation_t *t) {
  return em__counts_bytes(t, em__flight_cuts, 3);
}

/*
 * One figure of a tick. A counter's number goes out as its increase over `*prev` (the total
 * the previous tick that carried a number for the column had, 0 before the first), and *prev
 * becomes its total; null leaves *prev alone.
 */
static void w_tick_value(em__writer_t *w, em_metric_kind_t kind, const em_value_t *v,
                         uint64_t *prev) {
  uint64_t total;
  if (kind == EM_METRIC_COUNTER && em__counter_total(v, &total)) {
    em__w_diff(w, total, *prev);
    *prev = total;
    return;
  }
  em__w_value(w, v);
}

static void w_ticks(em__writer_t *w, const em_flight_t *f) {
  uint64_t prev[EM_FLIGHT_MAX_COLUMNS] = {0};
  em__w_uint(w, KF_TICKS);
  em__w_array(w, f->n_ticks);
  for (size_t i = 0; i < f->n_ticks; i++) {
    const em_flight_tick_t *t = &f->ticks[i];
    em__w_array(w, 2);
    em__w_diff(w, t->mono_ns, i == 0 ? f->trigger_mono_ns : f->ticks[i - 1].mono_ns);
    em__w_map(w, t->n_values);
    for (size_t j = 0; j < t->n_values; j++) {
      uint32_t c = t->values[j].column;
      em__w_uint(w, c);
      w_tick_value(w, f->columns[c].kind, &t->values[j].value, &prev[c]);
    }
  }
}

static void w_spans(em__writer_t *w, const em_flight_t *f) {
  uint64_t frame = 0, start = f->trigger_mono_ns;
  em__w_uint(w, KF_SPANS);
  em__w_array(w, 4 * f->n_spans);
  for (size_t i = 0; i < f->n_spans; i++) {
    const em_flight_span_t *s = &f->spans[i];
    em__w_uint(w, s->stage);
    em__w_diff(w, s->frame_id, frame);
    em__w_diff(w, s->start_ns, start);
    em__w_uint(w, s->duration_ns);
    frame = s->frame_id;
    start = s->start_ns;
  }
}

const em__uint_member_t em__flight_times[4] = {
    EM__UINT_MEMBER(KF_MONO, "trigger_mono_ns", em_flight_t, trigger_mono_ns),
    EM__UINT_MEMBER(KF_PRE, "pre_ns", em_flight_t, pre_ns),
    EM__UINT_MEMBER(KF_POST, "post_ns", em_flight_t, post_ns),
    EM__UINT_MEMBER(KF_PERIOD, "period_ns", em_flight_t, period_ns),
};

static void w_flight(em__writer_t *w, const void *doc) {
  const em_flight_t *f = doc;
  size_t entries = 10 + (em__counts_entries(&f->truncated, em__flight_cuts, 3) ? 1 : 0) +
                   em__verdict_entries(f->verdict);
  em__doc_w_start(w, &em__flight_doc, f, entries);
  em__w_uints(w, f, em__flight_times, 4);
  em__w_texts(w, KF_STAGES, f->stages, f->n_stages);
  em__w_uint(w, KF_COLUMNS);
  em__w_array(w, f->n_columns);
  for (size_t i = 0; i < f->n_columns; i++) {
    em__w_array(w, 3);
    em__w_str(w, f->columns[i].name);
    em__w_str(w, f->columns[i].unit);
    em__w_uint(w, (uint64_t)f->columns[i].kind);
  }
  w_ticks(w, f);
  w_spans(w, f);
  em__w_counts(w, KF_TRUNCATED, &f->truncated, em__flight_cuts, 3);
  em__w_verdict(w, KF_VERDICT, f->verdict);
  em__doc_w_end(w, &em__flight_doc, f);
}

/* A live recording's map has 14 entries, one more with key 14 (the truncation note) and one
 * more with key 16 (the verdict): heads 0xae..0xb0. */
const em__doc_t em__flight_doc =
    EM__DOC(EM_MSG_FLIGHT, EM_FLIGHT_MAX_BYTES, KF_HISTORICAL, 0xae, 0xb0, em_flight_t,
            &em__flight_trigger_kind, check_flight, w_flight, em__flight_json);

int em_flight_encode(const em_flight_t *f, uint8_t *buf, size_t cap, size_t *out_len) {
  return em__doc_encode(&em__flight_doc, f, buf, cap, out_len);
}

/* --- fit under a cap ------------------------------------------------------------------ */

/*
 * The sizes of the recordings made of the m ticks and spans nearest the trigger, for m from 0
 * up, one item added at a time. The nearest m form a range of the ticks and a range of the
 * spans around the trigger (items are sorted by time, so distance to the trigger falls and
 * then rises along each), so each step adds the item just before or just after a range; the
 * sizes that change are the added item's and, when it goes in front, the old first item's
 * (its deltas are now from the added one rather than from the trigger and 0) and, per counter
 * column, the old first carrier's (its figure becomes an increase instead of the total).
 * Each step costs O(1) per figure of the added tick: O(items + figures) in all.
 */
typedef struct {
  const em_flight_t *f;
  size_t tl, tr, sl, sr; /* Ranges [tl, tr) of the ticks and [sl, sr) of the spans. */
  size_t items;          /* Bytes of the kept ticks' and spans' items, without array heads. */
  bool has[EM_FLIGHT_MAX_COLUMNS];       /* A kept tick carries a number for the column. */
  uint64_t first[EM_FLIGHT_MAX_COLUMNS]; /* Total of its first kept carrier, */
  uint64_t last[EM_FLIGHT_MAX_COLUMNS];  /* and of its last. */
} fit_t;

static size_t value_bytes(const em_value_t *v) {
  em__writer_t w = {0};
  em__w_value(&w, v);
  return w.pos;
}

static uint64_t tick_time(const fit_t *s, size_t i) {
  return s->f->ticks[i].mono_ns;
}

static uint64_t span_time(const fit_t *s, size_t i) {
  return s->f->spans[i].start_ns;
}

static uint64_t distance(uint64_t t, uint64_t trigger) {
  return t >= trigger ? t - trigger : trigger - t;
}

/* Adds tick i after the kept ticks (back) or before them (!back). */
static void fit_add_tick(fit_t *s, size_t i, bool back) {
  const em_flight_t *f = s->f;
  const em_flight_tick_t *t = &f->ticks[i];
  bool empty = s->tl == s->tr;
  uint64_t from = back && !empty ? tick_time(s, s->tr - 1) : f->trigger_mono_ns;
  size_t n = 1 + em__diff_bytes(t->mono_ns, from) + em__uint_bytes(t->n_values);
  if (!back && !empty) { /* The old first tick's time delta is now from this one. */
    uint64_t old = tick_time(s, s->tl);
    n += em__diff_bytes(old, t->mono_ns);
    n -= em__diff_bytes(old, f->trigger_mono_ns);
  }
  for (size_t j = 0; j < t->n_values; j++) {
    uint32_t c = t->values[j].column;
    uint64_t total;
    n += em__uint_bytes(c);
    if (f->columns[c].kind != EM_METRIC_COUNTER ||
        !em__counter_total(&t->values[j].value, &total)) {
      n += value_bytes(&t->values[j].value);
      continue;
    }
    if (!s->has[c]) {
      n += em__uint_bytes(total);
      s->has[c] = true;
      s->first[c] = s->last[c] = total;
    } else if (back) {
      n += em__diff_bytes(total, s->last[c]);
      s->last[c] = total;
    } else { /* In front: this one carries the total, the old first its increase. */
      n += em__uint_bytes(total) + em__diff_bytes(s->first[c], total);
      n -= em__uint_bytes(s->first[c]);
      s->first[c] = total;
    }
  }
  s->items += n;
  if (back) {
    s->tr++;
  } else {
    s->tl--;
  }
}

/* The bytes of span i's four items after span `prev` (frame 0 and the trigger when none). */
static size_t span_bytes(const em_flight_t *f, size_t i, const em_flight_span_t *prev) {
  const em_flight_span_t *s = &f->spans[i];
  return em__uint_bytes(s->stage) + em__diff_bytes(s->frame_id, prev ? prev->frame_id : 0) +
         em__diff_bytes(s->start_ns, prev ? prev->start_ns : f->trigger_mono_ns) +
         em__uint_bytes(s->duration_ns);
}

static void fit_add_span(fit_t *s, size_t i, bool back) {
  const em_flight_t *f = s->f;
  bool empty = s->sl == s->sr;
  if (back) {
    s->items += span_bytes(f, i, empty ? NULL : &f->spans[s->sr - 1]);
    s->sr++;
    return;
  }
  s->items += span_bytes(f, i, NULL);
  if (!empty) {
    s->items += span_bytes(f, s->sl, &f->spans[i]);
    s->items -= span_bytes(f, s->sl, NULL);
  }
  s->sl--;
}

/*
 * Adds the kept items' nearest neighbour to the trigger; on equal distances ticks before
 * spans, and of one kind the one before the trigger first. Returns false when all are in.
 */
static bool fit_grow(fit_t *s) {
  const em_flight_t *f = s->f;
  uint64_t trig = f->trigger_mono_ns;
  /* Candidates: 0 tick before, 1 tick after, 2 span before, 3 span after. */
  bool ok[4] = {s->tl > 0, s->tr<f->n_ticks, s->sl> 0, s->sr < f->n_spans};
  uint64_t dist[4] = {ok[0] ? distance(tick_time(s, s->tl - 1), trig) : 0,
                      ok[1] ? distance(tick_time(s, s->tr), trig) : 0,
                      ok[2] ? distance(span_time(s, s->sl - 1), trig) : 0,
                      ok[3] ? distance(span_time(s, s->sr), trig) : 0};
  int best = -1;
  for (int k = 0; k < 4; k++) {
    if (ok[k] && (best < 0 || dist[k] < dist[best])) {
      best = k;
    }
  }
  if (best < 0) {
    return false;
  }
  if (best < 2) {
    fit_add_tick(s, best == 0 ? s->tl - 1 : s->tr, best == 1);
  } else {
    fit_add_span(s, best == 2 ? s->sl - 1 : s->sr, best == 3);
  }
  return true;
}

/* First index of a sorted time column at or after the trigger. */
static size_t split(const fit_t *s, size_t n, uint64_t (*time)(const fit_t *, size_t)) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (time(s, mid) < s->f->trigger_mono_ns) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

/* The truncation counts once the items outside the ranges are left out. */
static em_flight_truncation_t fit_truncation(const fit_t *s) {
  em_flight_truncation_t t = s->f->truncated;
  t.ticks_cut += s->f->n_ticks - (s->tr - s->tl);
  t.spans_cut += s->f->n_spans - (s->sr - s->sl);
  return t;
}

/* Encoded size with the current ranges; `bare`: the size with no ticks, spans or truncation. */
static size_t fit_size(const fit_t *s, size_t bare) {
  em_flight_truncation_t t = fit_truncation(s);
  return bare - 2 + em__uint_bytes(s->tr - s->tl) + em__uint_bytes(4 * (s->sr - s->sl)) + s->items +
         truncation_bytes(&t);
}

int em_flight_encode_fit(em_flight_t *f, uint8_t *buf, size_t cap, size_t *out_len) {
  size_t limit = 0;
  int rc = em__doc_fit_start(&em__flight_doc, f, buf, cap, out_len, &limit);
  if (rc != EM__DOC_CUT) {
    return rc;
  }
  fit_t s;
  memset(&s, 0, sizeof(s));
  s.f = f;
  em_flight_t bare_f = *f;
  bare_f.n_ticks = bare_f.n_spans = 0;
  memset(&bare_f.truncated, 0, sizeof(bare_f.truncated));
  size_t bare = 0;
  (void)em__doc_write(&em__flight_doc, &bare_f, NULL, 0, &bare);
  s.tl = s.tr = split(&s, f->n_ticks, tick_time);
  s.sl = s.sr = split(&s, f->n_spans, span_time);
  size_t size = fit_size(&s, bare);
  if (size > limit) {
    *out_len = size;
    return EM_PROTO_ENOSPACE;
  }
  size_t keep[4] = {s.tl, s.tr, s.sl, s.sr};
  while (fit_grow(&s)) {
    if (fit_size(&s, bare) <= limit) {
      keep[0] = s.tl, keep[1] = s.tr, keep[2] = s.sl, keep[3] = s.sr;
    }
  }
  s.tl = keep[0], s.tr = keep[1], s.sl = keep[2], s.sr = keep[3];
  f->truncated = fit_truncation(&s);
  f->ticks = f->n_ticks ? f->ticks + s.tl : f->ticks;
  f->n_ticks = s.tr - s.tl;
  f->spans = f->n_spans ? f->spans + s.sl : f->spans;
  f->n_spans = s.sr - s.sl;
  return em__doc_write(&em__flight_doc, f, buf, cap, out_len);
}

/* --- historical ----------------------------------------------------------------------- */

int em_flight_mark_historical(const uint8_t *live, size_t len, uint8_t *out, size_t cap,
                              size_t *out_len) {
  return em__doc_mark_historical(&em__flight_doc, live, len, out, cap, out_len);
}
