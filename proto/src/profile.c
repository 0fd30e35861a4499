/*
 * profile.c - writes a stack profile (edgemon/profile.h, kind 6) as CBOR: the checks that make
 * the encoder refuse what the decoder would refuse (check_profile, which the JSON
 * printer runs too), the frame table and the stacks as compact arrays, the fit under a size cap
 * (which leaves out the stacks with the fewest samples, from sizes measured once per stack), and
 * the historical form. Items go through the shared writer (cbor_write.h). Owns nothing, never
 * allocates, reentrant.
 */
#include <string.h>

#include "forensic.h"

const char *em_profile_cause_name(em_profile_cause_t cause) {
  return em__cause_name((uint64_t)cause);
}

const char *em_profile_frame_kind_name(em_profile_frame_kind_t kind) {
  static const char *const names[] = {"native", "kernel", "python"};
  return em__name_in(names, sizeof(names) / sizeof(names[0]), (long)kind);
}

/* --- checks --------------------------------------------------------------------------- */

int em__profile_clock_check(const char *clock) {
  int rc = em__check_cstr(clock, STR_IDENT, EM_PROTO_MAX_STAGE_BYTES);
  if (rc) {
    return rc;
  }
  return strcmp(clock, "cpu-clock") == 0 || strcmp(clock, "task-clock") == 0 ? 0 : EM_PROTO_ERANGE;
}

static int check_tables(const em_profile_t *p) {
  int rc = em__check_stage_table(p->stages, p->n_stages);
  if (rc) {
    return rc;
  }
  for (size_t i = 0; i < p->n_frames; i++) {
    const em_profile_frame_t *f = &p->frames[i];
    if ((unsigned)f->kind > EM_FRAME_UNKNOWN) {
      return EM_PROTO_ERANGE;
    }
    rc = em__check_cstr(f->name, STR_TEXT, EM_PROFILE_MAX_FRAME_BYTES);
    if (!rc && f->module) {
      rc = em__check_cstr(f->module, STR_TEXT, EM_PROFILE_MAX_FRAME_BYTES);
    }
    if (rc) {
      return rc;
    }
  }
  for (size_t i = 0; i < p->n_notes; i++) {
    rc = em__check_cstr(p->notes[i], STR_TEXT, EM_PROTO_MAX_TEXT_BYTES);
    if (rc) {
      return rc;
    }
  }
  return 0;
}

static int check_stack(const em_profile_t *p, size_t i) {
  const em_profile_stack_t *s = &p->stacks[i];
  if (s->n_frames > EM_PROFILE_MAX_DEPTH) {
    return EM_PROTO_ELIMIT;
  }
  if (s->n_frames == 0 || (s->samples == 0 && s->off_cpu_ns == 0)) {
    return EM_PROTO_EINCONSISTENT;
  }
  if (!s->frames) {
    return EM_PROTO_EINVAL;
  }
  if (i > 0 && s->samples > p->stacks[i - 1].samples) {
    return EM_PROTO_EINCONSISTENT; /* Descending samples: the fit cuts from the end. */
  }
  if (s->stage != EM_PROFILE_NO_STAGE && s->stage >= p->n_stages) {
    return EM_PROTO_ERANGE;
  }
  for (size_t j = 0; j < s->n_frames; j++) {
    if (s->frames[j] >= p->n_frames) {
      return EM_PROTO_ERANGE;
    }
  }
  return 0;
}

/*
 * 0, or the decoder's code for a profile it would refuse (names, indices, stack depths, order,
 * hz, clock, limits); EM_PROTO_EINVAL for NULL tables with a count. The encoder, the fit and the
 * JSON printer run it (em__profile_doc).
 */
static int check_profile(const void *doc) {
  const em_profile_t *p = doc;
  const em__table_t tables[] = {{p->n_stages, p->stages, EM_PROFILE_MAX_STAGES},
                                {p->n_frames, p->frames, EM_PROFILE_MAX_FRAMES},
                                {p->n_stacks, p->stacks, EM_PROFILE_MAX_STACKS},
                                {p->n_notes, p->notes, EM_PROFILE_MAX_NOTES}};
  em_trigger_t trigger = em__profile_trigger(&p->trigger);
  int rc = em__check_tables(tables, 4);
  if (!rc && (p->hz < 1 || p->hz > 1000)) {
    rc = EM_PROTO_ERANGE;
  }
  if (!rc) {
    rc = em__check_trigger(&trigger);
  }
  if (!rc) {
    rc = em__profile_clock_check(p->clock);
  }
  if (!rc) {
    rc = check_tables(p);
  }
  for (size_t i = 0; i < p->n_stacks && !rc; i++) {
    rc = check_stack(p, i);
  }
  return rc;
}

/* --- writer --------------------------------------------------------------------------- */

const em__uint_member_t em__profile_cuts[2] = {
    EM__UINT_MEMBER(KPN_STACKS_CUT, "stacks_cut", em_profile_truncation_t, stacks_cut),
    EM__UINT_MEMBER(KPN_SAMPLES_CUT, "samples_cut", em_profile_truncation_t, samples_cut),
};

/* Bytes of key 16 and its map; 0 when nothing was cut (the key is left out). */
static size_t truncation_bytes(const em_profile_truncation_t *t) {
  return em__counts_bytes(t, em__profile_cuts, 2);
}

/* One stack: [samples, off_cpu_ns, stage index or null, frame indices root first...]. */
static void w_stack(em__writer_t *w, const em_profile_stack_t *s) {
  em__w_array(w, PROFILE_STACK_HEAD + s->n_frames);
  em__w_uint(w, s->samples);
  em__w_uint(w, s->off_cpu_ns);
  if (s->stage == EM_PROFILE_NO_STAGE) {
    em__w_null(w);
  } else {
    em__w_uint(w, s->stage);
  }
  for (size_t j = 0; j < s->n_frames; j++) {
    em__w_uint(w, s->frames[j]);
  }
}

static void w_frames(em__writer_t *w, const em_profile_t *p) {
  em__w_uint(w, KP_FRAMES);
  em__w_array(w, 3 * p->n_frames);
  for (size_t i = 0; i < p->n_frames; i++) {
    const em_profile_frame_t *f = &p->frames[i];
    em__w_uint(w, (uint64_t)f->kind);
    em__w_str(w, f->name);
    if (f->module) {
      em__w_str(w, f->module);
    } else {
      em__w_null(w);
    }
  }
}

const em__uint_member_t em__profile_times[3] = {
    EM__UINT_MEMBER(KP_MONO, "start_mono_ns", em_profile_t, start_mono_ns),
    EM__UINT_MEMBER(KP_DURATION, "duration_ns", em_profile_t, duration_ns),
    EM__UINT_MEMBER(KP_HZ, "hz", em_profile_t, hz),
};

const em__uint_member_t em__profile_counts[2] = {
    EM__UINT_MEMBER(KP_SAMPLES, "samples", em_profile_t, samples),
    EM__UINT_MEMBER(KP_LOST, "lost", em_profile_t, lost),
};

static void w_profile(em__writer_t *w, const void *doc) {
  const em_profile_t *p = doc;
  size_t cut = em__counts_entries(&p->truncated, em__profile_cuts, 2);
  size_t entries = 11 + (p->n_notes ? 1 : 0) + (cut ? 1 : 0);
  em__doc_w_start(w, &em__profile_doc, p, entries);
  em__w_uints(w, p, em__profile_times, 3);
  em__kv_str(w, KP_CLOCK, p->clock);
  em__w_uints(w, p, em__profile_counts, 2);
  em__w_texts(w, KP_STAGES, p->stages, p->n_stages);
  w_frames(w, p);
  em__w_uint(w, KP_STACKS);
  em__w_array(w, p->n_stacks);
  for (size_t i = 0; i < p->n_stacks; i++) {
    w_stack(w, &p->stacks[i]);
  }
  if (p->n_notes) {
    em__w_texts(w, KP_NOTES, p->notes, p->n_notes);
  }
  em__w_counts(w, KP_TRUNCATED, &p->truncated, em__profile_cuts, 2);
  em__doc_w_end(w, &em__profile_doc, p);
}

/* A live profile's map has 15 entries, 16 or 17 with notes and the truncation note. */
const em__doc_t em__profile_doc =
    EM__DOC(EM_MSG_PROFILE, EM_PROFILE_MAX_BYTES, KP_HISTORICAL, 0xaf, 0xb1, em_profile_t,
            &em__profile_trigger_kind, check_profile, w_profile, em__profile_json);

int em_profile_encode(const em_profile_t *p, uint8_t *buf, size_t cap, size_t *out_len) {
  return em__doc_encode(&em__profile_doc, p, buf, cap, out_len);
}

/* --- fit under a cap ------------------------------------------------------------------ */

/*
 * A stack's items do not depend on the other stacks (no deltas between them), so the profile
 * holding the first k stacks is the profile with none plus the stacks array's head for k
 * items, the first k stacks' bytes, and the truncation map for what is left out. Each stack is
 * measured once (a writer with cap 0), then k falls from n until the sum fits: linear in the
 * stacks' frames.
 */
static size_t stack_bytes(const em_profile_stack_t *s) {
  em__writer_t w = {0};
  w_stack(&w, s);
  return w.pos;
}

int em_profile_encode_fit(em_profile_t *p, uint8_t *buf, size_t cap, size_t *out_len) {
  size_t limit = 0;
  int rc = em__doc_fit_start(&em__profile_doc, p, buf, cap, out_len, &limit);
  if (rc != EM__DOC_CUT) {
    return rc;
  }
  em_profile_t bare = *p;
  bare.n_stacks = 0;
  memset(&bare.truncated, 0, sizeof(bare.truncated));
  size_t bare_len = 0;
  (void)em__doc_write(&em__profile_doc, &bare, NULL, 0, &bare_len);
  size_t items = 0;
  for (size_t i = 0; i < p->n_stacks; i++) {
    items += stack_bytes(&p->stacks[i]);
  }
  em_profile_truncation_t t = p->truncated;
  size_t k = p->n_stacks;
  for (;;) {
    /* bare_len counts a one-byte head for an empty stacks array. */
    size_t size = bare_len - 1 + em__uint_bytes(k) + items + truncation_bytes(&t);
    if (size <= limit) {
      break;
    }
    if (k == 0) {
      *out_len = size;
      return EM_PROTO_ENOSPACE;
    }
    k--;
    items -= stack_bytes(&p->stacks[k]);
    t.stacks_cut++;
    uint64_t n = p->stacks[k].samples;
    t.samples_cut = t.samples_cut > UINT64_MAX - n ? UINT64_MAX : t.samples_cut + n;
  }
  p->n_stacks = k;
  p->truncated = t;
  return em__doc_write(&em__profile_doc, p, buf, cap, out_len);
}

/* --- historical ----------------------------------------------------------------------- */

int em_profile_mark_historical(const uint8_t *live, size_t len, uint8_t *out, size_t cap,
                               size_t *out_len) {
  return em__doc_mark_historical(&em__profile_doc, live, len, out, cap, out_len);
}
