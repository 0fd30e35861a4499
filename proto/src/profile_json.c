/*
 * profile_json.c - a stack profile (edgemon/profile.h) as one line of JSON with field names:
 * the frame table as objects with their kind's name, each stack's frames as indices into it
 * and its stage by name (null when none). Through the shared JSON writer (json_write.h); owns
 * nothing, never allocates, reentrant.
 */
#include "forensic.h"

static void j_frame(em__jw_t *w, const void *profile, size_t i) {
  const em_profile_frame_t *f = &((const em_profile_t *)profile)->frames[i];
  em__jkv_str(w, "name", f->name);
  em__jw_key(w, "module");
  if (f->module) {
    em__jw_str(w, f->module);
  } else {
    em__jw_raw(w, "null", 4);
  }
  em__jkv_str(w, "kind", em_profile_frame_kind_name(f->kind));
}

static void j_stack(em__jw_t *w, const void *profile, size_t i) {
  const em_profile_t *p = profile;
  const em_profile_stack_t *s = &p->stacks[i];
  em__jw_key(w, "frames");
  em__jw_open(w, '[');
  for (size_t j = 0; j < s->n_frames; j++) {
    em__jw_elem(w);
    em__jw_fmt(w, "%u", (unsigned)s->frames[j]);
  }
  em__jw_close(w, ']');
  em__jkv_u64(w, "samples", s->samples);
  em__jkv_u64(w, "off_cpu_ns", s->off_cpu_ns);
  em__jw_key(w, "stage");
  if (s->stage == EM_PROFILE_NO_STAGE) {
    em__jw_raw(w, "null", 4);
  } else {
    em__jw_str(w, p->stages[s->stage]);
  }
}

void em__profile_json(em__jw_t *w, const void *profile) {
  const em_profile_t *p = profile;
  em__jw_uints(w, p, em__profile_times, 3);
  em__jkv_str(w, "clock", p->clock);
  em__jw_uints(w, p, em__profile_counts, 2);
  em__jw_texts(w, "stages", p->stages, p->n_stages);
  em__jw_objects(w, "frames", p, p->n_frames, j_frame);
  em__jw_objects(w, "stacks", p, p->n_stacks, j_stack);
  em__jw_texts(w, "notes", p->notes, p->n_notes);
  em__jw_counts(w, "truncated", &p->truncated, em__profile_cuts, 2);
}

int em_profile_to_json(const em_profile_t *p, char *buf, size_t cap, size_t *out_len) {
  return em__doc_to_json(&em__profile_doc, p, buf, cap, out_len);
}
