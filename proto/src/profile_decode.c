/*
 * profile_decode.c - the strict decoder of a stack profile (edgemon/profile.h, kind 6), on the
 * shared pull parser (cbor_read.h) with the rules of the v1 decoder (definite lengths, unknown
 * keys skipped after a well-formedness check, duplicate keys refused, depth) and the profile's
 * own: hz 1..1000, a known sampling clock, stage names valid and unique, frames of a known kind
 * with text names, stacks of 1..EM_PROFILE_MAX_DEPTH frames whose indices are within their
 * tables, in descending samples, each with samples or off-CPU time, the EM_PROFILE_MAX_*
 * limits. Stacks refer to the stage and frame tables, which may come after them in the map, so
 * the first pass checks their well-formedness and notes where they are, and a second pass over
 * just those bytes reads them once the tables are known: linear in the input. Decoded tables
 * point into the caller's scratch; nothing allocates; reentrant.
 */
#include <string.h>

#include "forensic.h"

/* Decoded bytes per encoded byte at most (em_profile_scratch_bytes). */
#define SCRATCH_PER_BYTE 10u

/* The fewest bytes a stack takes on the wire: [samples, off_cpu, stage, one frame]. */
#define MIN_STACK_BYTES 5u

_Static_assert(sizeof(em_profile_stack_t) + 8 <= MIN_STACK_BYTES * SCRATCH_PER_BYTE,
               "a stack is 5 bytes at least");
_Static_assert(sizeof(em_profile_frame_t) + 8 <= 4 * SCRATCH_PER_BYTE,
               "a frame is 4 bytes at least");
_Static_assert(sizeof(const char *) + 8 <= 2 * SCRATCH_PER_BYTE, "a name is 2 bytes at least");

size_t em_profile_scratch_bytes(size_t len) {
  /*
   * Worst cases per encoded byte (LP64): a stack [1, 0, null, 0] is 5 bytes and becomes an
   * em_profile_stack_t (40) and its one frame index (4, rounded up to 8): 9.6; each further
   * frame index is 1 byte and 4 decoded (the rounding counted once per stack above); a frame
   * (kind, "x", null) is 4 bytes -> an em_profile_frame_t (24) and 8 aligned bytes of string:
   * 8; a stage or note "x" is 2 bytes -> a pointer and 8 bytes of string: 8; any other string
   * of n bytes with its head -> n + 1 rounded up to 8: 4 for n = 1. The stacks array is
   * allocated only once its stacks are known to average 5 bytes (read_stacks), so a count
   * larger than the bytes can hold never claims scratch. The constant covers the trigger's and
   * the clock's strings.
   */
  return em__scratch_for(len, EM_PROFILE_MAX_BYTES, SCRATCH_PER_BYTE);
}

/* --- tables --------------------------------------------------------------------------- */

static int read_note(em__dec_t *d, void *elem) {
  return em__read_str(d, STR_TEXT, EM_PROTO_MAX_TEXT_BYTES, (const char **)elem);
}

static int read_clock(em__dec_t *d, const em__field_t *f, void *base) {
  em_profile_t *p = base;
  (void)f;
  size_t at = d->pos;
  int rc = em__read_str(d, STR_IDENT, EM_PROTO_MAX_STAGE_BYTES, &p->clock);
  if (!rc) {
    rc = em__profile_clock_check(p->clock);
  }
  if (rc) {
    d->item_pos = at;
  }
  return rc;
}

/* A frame's name or module: text, or (module only) null. */
static int read_frame_text(em__dec_t *d, bool nullable, const char **out) {
  if (nullable && d->pos < d->len && d->buf[d->pos] == 0xf6) {
    em__tok_t t;
    *out = NULL;
    return em__next(d, &t);
  }
  return em__read_str(d, STR_TEXT, EM_PROFILE_MAX_FRAME_BYTES, out);
}

/* The frame table: 3 items per frame (kind, name, module or null). */
static int read_frames(em__dec_t *d, const em__field_t *row, void *base) {
  em_profile_t *p = base;
  (void)row;
  uint64_t n = 0, kind = 0;
  void *mem = NULL;
  int rc = em__open_list(d, T_ARRAY, 3u * EM_PROFILE_MAX_FRAMES, 3, sizeof(em_profile_frame_t), &n,
                         &mem);
  em_profile_frame_t *f = mem;
  for (uint64_t i = 0; i < n && !rc; i++) {
    rc = em__read_uint(d, EM_FRAME_UNKNOWN, &kind);
    f[i].kind = (em_profile_frame_kind_t)kind;
    if (!rc) {
      rc = read_frame_text(d, false, &f[i].name);
    }
    if (!rc) {
      rc = read_frame_text(d, true, &f[i].module);
    }
  }
  return em__close_list(d, rc, f, n, &p->frames, &p->n_frames);
}

static const em__field_t truncation_rows[] = {
    EM__U64(KPN_STACKS_CUT, em_profile_truncation_t, stacks_cut, OPT),
    EM__U64(KPN_SAMPLES_CUT, em_profile_truncation_t, samples_cut, OPT)};
static const em__fields_t truncation_fields = EM__TABLE(truncation_rows);

/* --- stacks (second pass) ------------------------------------------------------------- */

/* An index below `n` (ERANGE past it). */
static int read_index(em__dec_t *d, size_t n, uint32_t *out) {
  uint64_t v = 0;
  int rc = em__read_uint(d, UINT32_MAX, &v);
  if (!rc && v >= n) {
    rc = EM_PROTO_ERANGE;
  }
  *out = (uint32_t)v;
  return rc;
}

/*
 * One stack: [samples, off_cpu_ns, stage index or null, frame indices...]. With `keep` the
 * frame indices go into scratch; without, they are only checked.
 */
static int read_stack(em__dec_t *d, const em_profile_t *p, em_profile_stack_t *s, bool keep) {
  uint64_t n = 0;
  int rc = em__open_container(d, T_ARRAY, PROFILE_STACK_HEAD + EM_PROFILE_MAX_DEPTH, &n);
  if (!rc && n <= PROFILE_STACK_HEAD) {
    rc = EM_PROTO_EINCONSISTENT; /* A stack has one frame at least. */
  }
  if (!rc) {
    rc = em__read_uint(d, UINT64_MAX, &s->samples);
  }
  if (!rc) {
    rc = em__read_uint(d, UINT64_MAX, &s->off_cpu_ns);
  }
  if (!rc && s->samples == 0 && s->off_cpu_ns == 0) {
    rc = EM_PROTO_EINCONSISTENT;
  }
  if (rc) {
    return rc;
  }
  s->stage = EM_PROFILE_NO_STAGE;
  if (d->pos < d->len && d->buf[d->pos] == 0xf6) {
    em__tok_t t;
    rc = em__next(d, &t);
  } else {
    rc = read_index(d, p->n_stages, &s->stage);
  }
  size_t depth = (size_t)n - PROFILE_STACK_HEAD;
  uint32_t *frames = NULL, one = 0;
  if (!rc && keep) {
    frames = em__scratch_alloc(d, depth * sizeof(*frames));
    rc = frames ? 0 : EM_PROTO_ESCRATCH;
  }
  for (size_t j = 0; j < depth && !rc; j++) {
    rc = read_index(d, p->n_frames, keep ? &frames[j] : &one);
  }
  if (rc) {
    return rc;
  }
  em__leave(d);
  s->frames = frames;
  s->n_frames = depth;
  return 0;
}

/* The stacks between d->pos and `end`, in descending samples. */
static int read_stacks(em__dec_t *d, em_profile_t *p, size_t end) {
  uint64_t n = 0;
  int rc = em__open_container(d, T_ARRAY, EM_PROFILE_MAX_STACKS, &n);
  if (rc) {
    return rc;
  }
  /* Fewer bytes than n valid stacks need: one of them is not a stack; find it and say why,
   * without claiming scratch for n stacks the bytes cannot hold. */
  bool fits = n <= (end - d->pos) / MIN_STACK_BYTES;
  em_profile_stack_t *s = fits ? em__scratch_alloc(d, (size_t)n * sizeof(*s)) : NULL;
  if (fits && !s && n) {
    return EM_PROTO_ESCRATCH;
  }
  em_profile_stack_t probe;
  for (uint64_t i = 0; i < n && !rc; i++) {
    size_t at = d->pos;
    em_profile_stack_t *cur = fits ? &s[i] : &probe;
    memset(cur, 0, sizeof(*cur));
    rc = read_stack(d, p, cur, fits);
    if (!rc && fits && i > 0 && cur->samples > s[i - 1].samples) {
      d->item_pos = at;
      rc = EM_PROTO_EINCONSISTENT;
    }
  }
  if (!rc && !fits) {
    rc = EM_PROTO_EMALFORMED; /* Not reached: n stacks need 5n bytes. */
  }
  return em__close_list(d, rc, s, n, &p->stacks, &p->n_stacks);
}

/* --- top level ------------------------------------------------------------------------ */

/* The profile as the first pass reads it, with where its stacks lie. */
typedef struct {
  em_profile_t p;
  em__later_t stacks; /* Key 14's value, for the second pass. */
} ctx_t;

static const em__field_t profile_rows[] = {
    EM__DOC_HEAD_ROWS(ctx_t, p, &em__profile_trigger_kind),
    EM__U64(KP_MONO, ctx_t, p.start_mono_ns, REQ),
    EM__U64(KP_DURATION, ctx_t, p.duration_ns, REQ),
    EM__UINT(KP_HZ, ctx_t, p.hz, 1, 1000, REQ),
    EM__FN(KP_CLOCK, ctx_t, p.clock, read_clock, NULL, REQ),
    EM__U64(KP_SAMPLES, ctx_t, p.samples, REQ),
    EM__U64(KP_LOST, ctx_t, p.lost, REQ),
    EM__STAGES(KP_STAGES, ctx_t, p.stages, p.n_stages, EM_PROFILE_MAX_STAGES, REQ),
    EM__FN(KP_FRAMES, ctx_t, p.frames, read_frames, NULL, REQ),
    EM__LATER(KP_STACKS, ctx_t, stacks, REQ),
    EM__LIST(KP_NOTES, ctx_t, p.notes, p.n_notes, const char *, read_note, EM_PROFILE_MAX_NOTES,
             OPT),
    EM__MAP(KP_TRUNCATED, ctx_t, p.truncated, &truncation_fields, OPT),
    EM__BOOL(KP_HISTORICAL, ctx_t, p.historical, OPT)};
static const em__fields_t profile_fields = EM__TABLE(profile_rows);

static int reread_stacks(em__dec_t *d, void *ctx) {
  ctx_t *c = ctx;
  return read_stacks(d, &c->p, c->stacks.end);
}

static int read_profile(em__dec_t *d, void *profile) {
  ctx_t c;
  memset(&c, 0, sizeof(c));
  int rc = em__read_top(d, EM_MSG_PROFILE, &c.p.head, &profile_fields, &c);
  if (!rc) {
    rc = em__reread(d, c.stacks.at, reread_stacks, &c);
  }
  memcpy(profile, &c.p, sizeof(c.p));
  return rc;
}

int em_profile_decode(const uint8_t *buf, size_t len, em_profile_t *out, void *scratch,
                      size_t scratch_len, size_t *error_offset) {
  return em__decode_whole(buf, len, EM_PROFILE_MAX_BYTES, read_profile, out, sizeof(*out), scratch,
                          scratch_len, error_offset);
}
