/*
 * flight_decode.c - the strict decoder of a flight recording (edgemon/flight.h, kind 5), on
 * the shared pull parser (cbor_read.h) with the rules of the v1 decoder (definite lengths,
 * unknown keys skipped after a well-formedness check, duplicate keys refused, finite floats,
 * depth) and the recording's own: stage names valid and unique, indices within their tables,
 * times ascending, deltas added back within uint64 and never below 0, the EM_FLIGHT_MAX_*
 * limits. Ticks and spans refer to the stage and column tables, which may come after them in
 * the map, so the first pass checks their well-formedness and notes where they are, and a
 * second pass over just those bytes reads them once the tables are known: linear in the input.
 * Decoded tables point into the caller's scratch; nothing allocates; reentrant.
 */
#include <stdlib.h>
#include <string.h>

#include "forensic.h"
#include "verdict.h"

/* Decoded bytes per encoded byte at most (em_flight_scratch_bytes). */
#define SCRATCH_PER_BYTE 12u

_Static_assert(sizeof(em_flight_value_t) <= 2 * SCRATCH_PER_BYTE, "a figure is 2 bytes at least");
_Static_assert(sizeof(em_flight_tick_t) <= 3 * SCRATCH_PER_BYTE, "a tick is 3 bytes at least");
_Static_assert(sizeof(em_flight_span_t) <= 4 * SCRATCH_PER_BYTE, "a span is 4 bytes at least");
_Static_assert(sizeof(em_flight_column_t) + 16 <= 6 * SCRATCH_PER_BYTE,
               "a column is 6 bytes at least");
_Static_assert(sizeof(const char *) + 8 <= 2 * SCRATCH_PER_BYTE, "a stage is 2 bytes at least");

size_t em_flight_scratch_bytes(size_t len) {
  /*
   * Worst cases per encoded byte (LP64): a tick's figure {column: small int} is 2 bytes and
   * becomes an em_flight_value_t (24): 12; a tick [0, {}] 3 bytes -> em_flight_tick_t (24): 8;
   * a span, 4 one-byte items -> em_flight_span_t (32): 8; a stage name "x" 2 bytes -> a
   * pointer and 8 aligned bytes of string: 8; a column ["x", "y", 0] 6 bytes -> 24 + 2 x 8:
   * 6.7; any other string of n bytes with its head -> n + 1 rounded up to 8: 4 for n = 1. The
   * constant covers the alignment of the few arrays that are not a multiple of 8 (none on
   * LP64) and the trigger's strings; the verdict's fixed arrays come on top (one at most).
   */
  return em__scratch_for(len, EM_FLIGHT_MAX_BYTES, SCRATCH_PER_BYTE) + sizeof(em_proto_verdict_t);
}

/* --- deltas --------------------------------------------------------------------------- */

/*
 * Reads an integer delta and adds it to `base`: ETYPE for a non-integer, ERANGE when the sum
 * leaves uint64, EINCONSISTENT for a negative delta where `ascending`.
 */
static int read_delta(em__dec_t *d, uint64_t base, bool ascending, uint64_t *out) {
  em__tok_t t;
  int rc = em__next(d, &t);
  if (rc) {
    return rc;
  }
  if (t.type == T_UINT) {
    if (t.u > UINT64_MAX - base) {
      return EM_PROTO_ERANGE;
    }
    *out = base + t.u;
    return 0;
  }
  if (t.type != T_NEGINT) {
    return EM_PROTO_ETYPE;
  }
  if (ascending) {
    return EM_PROTO_EINCONSISTENT;
  }
  if (base <= t.u) { /* base - 1 - t.u < 0 */
    return EM_PROTO_ERANGE;
  }
  *out = base - 1 - t.u;
  return 0;
}

/* --- header fields -------------------------------------------------------------------- */

static int read_column(em__dec_t *d, void *elem) {
  em_flight_column_t *c = elem;
  uint64_t n = 0, kind = 0;
  int rc = em__open_container(d, T_ARRAY, UINT64_MAX, &n);
  if (!rc && n != 3) {
    rc = EM_PROTO_ETYPE;
  }
  if (!rc) {
    rc = em__read_str(d, STR_NAME, EM_PROTO_MAX_NAME_BYTES, &c->name);
  }
  if (!rc) {
    rc = em__read_str(d, STR_NAME, EM_PROTO_MAX_UNIT_BYTES, &c->unit);
  }
  if (!rc) {
    rc = em__read_uint(d, EM_METRIC_DELTA, &kind);
  }
  if (rc) {
    return rc;
  }
  c->kind = (em_metric_kind_t)kind;
  em__leave(d);
  return 0;
}

static const em__field_t truncation_rows[] = {
    EM__U64(KN_SPANS_CUT, em_flight_truncation_t, spans_cut, OPT),
    EM__U64(KN_TICKS_CUT, em_flight_truncation_t, ticks_cut, OPT),
    EM__U64(KN_OVERWRITTEN, em_flight_truncation_t, spans_overwritten, OPT)};
static const em__fields_t truncation_fields = EM__TABLE(truncation_rows);

/* --- ticks and spans (second pass) ---------------------------------------------------- */

static int cmp_value(const void *a, const void *b) {
  uint32_t x = ((const em_flight_value_t *)a)->column, y = ((const em_flight_value_t *)b)->column;
  return (x > y) - (x < y);
}

/*
 * One figure of a tick: a counter's increase added to the column's running total `*total`
 * (ETYPE unless an integer or null), any other kind's number or null as read.
 */
static int read_figure(em__dec_t *d, const em_flight_t *f, em_flight_value_t *v, uint64_t *total) {
  uint64_t c = 0;
  int rc = em__read_uint(d, UINT32_MAX, &c);
  if (rc == EM_PROTO_ETYPE) {
    return EM_PROTO_EKEY;
  }
  if (!rc && c >= f->n_columns) {
    rc = EM_PROTO_ERANGE;
  }
  if (rc) {
    return rc;
  }
  v->column = (uint32_t)c;
  if (f->columns[c].kind != EM_METRIC_COUNTER) {
    return em__read_value(d, true, &v->value);
  }
  size_t at = d->pos;
  if (at < d->len && d->buf[at] == 0xf6) { /* null */
    return em__read_value(d, true, &v->value);
  }
  rc = read_delta(d, total[c], false, &total[c]);
  v->value.type = EM_VALUE_UINT;
  v->value.as.u = total[c];
  return rc;
}

static int read_tick(em__dec_t *d, const em_flight_t *f, em_flight_tick_t *t, uint64_t from,
                     bool first, uint64_t *total) {
  uint64_t n = 0, k = 0;
  int rc = em__open_container(d, T_ARRAY, UINT64_MAX, &n);
  if (!rc && n != 2) {
    rc = EM_PROTO_ETYPE;
  }
  if (!rc) {
    rc = read_delta(d, from, !first, &t->mono_ns);
  }
  size_t at = d->pos;
  if (!rc) {
    rc = em__open_container(d, T_MAP, EM_FLIGHT_MAX_COLUMNS, &k);
  }
  em_flight_value_t *v = NULL;
  if (!rc && k) {
    v = em__scratch_alloc(d, (size_t)k * sizeof(*v));
    rc = v ? 0 : EM_PROTO_ESCRATCH;
  }
  bool sorted = true;
  for (uint64_t j = 0; j < k && !rc; j++) {
    memset(&v[j], 0, sizeof(v[j]));
    rc = read_figure(d, f, &v[j], total);
    sorted = sorted && (j == 0 || v[j].column > v[j - 1].column);
  }
  if (!rc && !sorted) {
    rc = em__sort_unique(d, at, v, (size_t)k, sizeof(*v), cmp_value);
  }
  if (rc) {
    return rc;
  }
  em__leave(d); /* the values */
  em__leave(d); /* the tick */
  t->values = v;
  t->n_values = (size_t)k;
  return 0;
}

static int read_ticks(em__dec_t *d, em_flight_t *f) {
  uint64_t n = 0;
  uint64_t total[EM_FLIGHT_MAX_COLUMNS] = {0};
  void *mem = NULL;
  int rc = em__open_list(d, T_ARRAY, EM_FLIGHT_MAX_TICKS, 1, sizeof(em_flight_tick_t), &n, &mem);
  em_flight_tick_t *t = mem;
  for (uint64_t i = 0; i < n && !rc; i++) {
    memset(&t[i], 0, sizeof(t[i]));
    rc = read_tick(d, f, &t[i], i ? t[i - 1].mono_ns : f->trigger_mono_ns, i == 0, total);
  }
  return em__close_list(d, rc, t, n, &f->ticks, &f->n_ticks);
}

static int read_spans(em__dec_t *d, em_flight_t *f) {
  uint64_t n = 0, stage = 0, frame = 0, start = f->trigger_mono_ns;
  void *mem = NULL;
  int rc =
      em__open_list(d, T_ARRAY, 4u * EM_FLIGHT_MAX_SPANS, 4, sizeof(em_flight_span_t), &n, &mem);
  em_flight_span_t *s = mem;
  for (uint64_t i = 0; i < n && !rc; i++) {
    rc = em__read_uint(d, UINT32_MAX, &stage);
    if (!rc && stage >= f->n_stages) {
      rc = EM_PROTO_ERANGE;
    }
    if (!rc) {
      rc = read_delta(d, frame, false, &frame);
    }
    if (!rc) {
      rc = read_delta(d, start, i > 0, &start);
    }
    if (!rc) {
      rc = em__read_uint(d, UINT64_MAX, &s[i].duration_ns);
    }
    s[i].stage = (uint32_t)stage;
    s[i].frame_id = frame;
    s[i].start_ns = start;
  }
  return em__close_list(d, rc, s, n, &f->spans, &f->n_spans);
}

/* --- top level ------------------------------------------------------------------------ */

/* The recording as the first pass reads it, with where its ticks and spans lie. */
typedef struct {
  em_flight_t f;
  em__later_t ticks, spans; /* Keys 12 and 13's values, for the second pass. */
} ctx_t;

static const em__field_t flight_rows[] = {
    EM__DOC_HEAD_ROWS(ctx_t, f, &em__flight_trigger_kind),
    EM__U64(KF_MONO, ctx_t, f.trigger_mono_ns, REQ),
    EM__U64(KF_PRE, ctx_t, f.pre_ns, REQ),
    EM__U64(KF_POST, ctx_t, f.post_ns, REQ),
    EM__U64(KF_PERIOD, ctx_t, f.period_ns, REQ),
    EM__STAGES(KF_STAGES, ctx_t, f.stages, f.n_stages, EM_FLIGHT_MAX_STAGES, REQ),
    EM__LIST(KF_COLUMNS, ctx_t, f.columns, f.n_columns, em_flight_column_t, read_column,
             EM_FLIGHT_MAX_COLUMNS, REQ),
    EM__LATER(KF_TICKS, ctx_t, ticks, REQ),
    EM__LATER(KF_SPANS, ctx_t, spans, REQ),
    EM__MAP(KF_TRUNCATED, ctx_t, f.truncated, &truncation_fields, OPT),
    EM__BOOL(KF_HISTORICAL, ctx_t, f.historical, OPT),
    EM__FN(KF_VERDICT, ctx_t, f.verdict, em__field_verdict, NULL, OPT)};
static const em__fields_t flight_fields = EM__TABLE(flight_rows);

static int reread_ticks(em__dec_t *d, void *flight) {
  return read_ticks(d, flight);
}

static int reread_spans(em__dec_t *d, void *flight) {
  return read_spans(d, flight);
}

static int read_flight(em__dec_t *d, void *flight) {
  ctx_t c;
  memset(&c, 0, sizeof(c));
  int rc = em__read_top(d, EM_MSG_FLIGHT, &c.f.head, &flight_fields, &c);
  if (!rc) {
    rc = em__reread(d, c.ticks.at, reread_ticks, &c.f);
  }
  if (!rc) {
    rc = em__reread(d, c.spans.at, reread_spans, &c.f);
  }
  memcpy(flight, &c.f, sizeof(c.f));
  return rc;
}

int em_flight_decode(const uint8_t *buf, size_t len, em_flight_t *out, void *scratch,
                     size_t scratch_len, size_t *error_offset) {
  return em__decode_whole(buf, len, EM_FLIGHT_MAX_BYTES, read_flight, out, sizeof(*out), scratch,
                          scratch_len, error_offset);
}
