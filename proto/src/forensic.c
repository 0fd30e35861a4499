/*
 * forensic.c - the layer the flight recording and the stack profile share (forensic.h): the
 * steps of their public encoders, fitters, historical marking and JSON printers, over a
 * document kind each of them describes once, and the texts and truncation notes both write.
 * Owns nothing, never allocates, reentrant.
 */
#include <string.h>

#include "forensic.h"

em_trigger_t em__flight_trigger(const void *flight_trigger) {
  const em_flight_trigger_t *t = flight_trigger;
  return (em_trigger_t){(uint64_t)t->cause, t->level, t->prev_level, t->rule,
                        t->stage,           t->value, t->bound,      t->reason};
}

em_trigger_t em__profile_trigger(const void *profile_trigger) {
  const em_profile_trigger_t *t = profile_trigger;
  em_trigger_t g;
  memset(&g, 0, sizeof(g)); /* value and bound absent: a profile carries neither. */
  g.cause = (uint64_t)t->cause;
  g.level = t->level;
  g.prev_level = t->prev_level;
  g.rule = t->rule;
  g.stage = t->stage;
  g.reason = t->reason;
  return g;
}

static void set_flight_trigger(void *out, const em_trigger_t *t) {
  *(em_flight_trigger_t *)out = (em_flight_trigger_t){(em_flight_cause_t)t->cause,
                                                      t->level,
                                                      t->prev_level,
                                                      t->rule,
                                                      t->stage,
                                                      t->value,
                                                      t->bound,
                                                      t->reason};
}

static void set_profile_trigger(void *out, const em_trigger_t *t) {
  *(em_profile_trigger_t *)out = (em_profile_trigger_t){.cause = (em_profile_cause_t)t->cause,
                                                        .level = t->level,
                                                        .prev_level = t->prev_level,
                                                        .rule = t->rule,
                                                        .stage = t->stage,
                                                        .reason = t->reason};
}

const em__trigger_kind_t em__flight_trigger_kind = {true, set_flight_trigger, em__flight_trigger};
const em__trigger_kind_t em__profile_trigger_kind = {false, set_profile_trigger,
                                                     em__profile_trigger};

const char *em__cause_name(uint64_t cause) {
  static const char *const names[] = {"escalation", "command"};
  return cause < 2 ? names[cause] : "unknown";
}

int em__field_trigger(em__dec_t *d, const em__field_t *f, void *base) {
  const em__trigger_kind_t *k = f->arg;
  em_trigger_t t;
  memset(&t, 0, sizeof(t));
  int rc = em__read_trigger(d, k->numbers, &t);
  k->set((unsigned char *)base + f->offset, &t);
  return rc;
}

static const void *member(const void *doc, size_t offset) {
  return (const unsigned char *)doc + offset;
}

_Static_assert((int)KF_NUMBER == (int)KP_NUMBER && (int)KF_TRIGGER == (int)KP_TRIGGER,
               "both documents keep their number and trigger under the same keys");

static bool historical(const em__doc_t *k, const void *doc) {
  return *(const bool *)member(doc, k->historical_offset);
}

/* A document's number and trigger, where its kind says they are. */
static uint32_t number_of(const em__doc_t *k, const void *doc) {
  uint32_t number;
  memcpy(&number, member(doc, k->number_offset), sizeof(number));
  return number;
}

static em_trigger_t trigger_of(const em__doc_t *k, const void *doc) {
  return k->trigger->get(member(doc, k->trigger_offset));
}

void em__doc_w_start(em__writer_t *w, const em__doc_t *k, const void *doc, size_t entries) {
  em_trigger_t trigger = trigger_of(k, doc);
  em__w_common(w, entries + (historical(k, doc) ? 1 : 0), k->kind, member(doc, k->head_offset));
  em__kv_uint(w, KF_NUMBER, number_of(k, doc));
  em__w_uint(w, KF_TRIGGER);
  em__w_trigger(w, &trigger);
}

void em__doc_w_end(em__writer_t *w, const em__doc_t *k, const void *doc) {
  if (historical(k, doc)) {
    em__w_uint(w, k->historical_key);
    em__w_bool(w, true);
  }
}

int em__doc_write(const em__doc_t *k, const void *doc, uint8_t *buf, size_t cap, size_t *len) {
  em__writer_t w = {.buf = buf, .cap = cap, .pos = 0};
  k->write(&w, doc);
  *len = w.pos;
  if (w.pos > k->max_bytes) {
    return EM_PROTO_ETOOBIG;
  }
  return w.pos <= cap ? 0 : EM_PROTO_ENOSPACE;
}

int em__doc_encode(const em__doc_t *k, const void *doc, uint8_t *buf, size_t cap, size_t *out_len) {
  if (!doc || !out_len || (!buf && cap > 0)) {
    return EM_PROTO_EINVAL;
  }
  int rc = k->check(doc);
  return rc ? rc : em__doc_write(k, doc, buf, cap, out_len);
}

int em__doc_fit_start(const em__doc_t *k, const void *doc, uint8_t *buf, size_t cap,
                      size_t *out_len, size_t *limit) {
  if (!doc || !out_len || (!buf && cap > 0)) {
    return EM_PROTO_EINVAL;
  }
  int rc = k->check(doc);
  if (rc) {
    return rc;
  }
  *limit = cap < k->max_bytes ? cap : k->max_bytes;
  size_t whole = 0;
  (void)em__doc_write(k, doc, NULL, 0, &whole); /* Only its size. */
  return whole <= *limit ? em__doc_write(k, doc, buf, cap, out_len) : EM__DOC_CUT;
}

int em__doc_mark_historical(const em__doc_t *k, const uint8_t *live, size_t len, uint8_t *out,
                            size_t cap, size_t *out_len) {
  if (!live || !out_len || (!out && cap > 0)) {
    return EM_PROTO_EINVAL;
  }
  /* Version 1 and the kind as one-byte integers (em__w_common), a map whose head stays one byte
   * with the new entry. */
  if (len < 5 || live[0] < k->map_first || live[0] > k->map_last || live[1] != K_VERSION ||
      live[2] != EM_PROTO_VERSION || live[3] != K_KIND || live[4] != k->kind) {
    return EM_PROTO_EMALFORMED;
  }
  return em__append_historical(live, len, k->historical_key, k->max_bytes, out, cap, out_len);
}

int em__doc_to_json(const em__doc_t *k, const void *doc, char *buf, size_t cap, size_t *out_len) {
  if (!doc || !out_len || (!buf && cap > 0)) {
    return EM_PROTO_EINVAL;
  }
  int rc = k->check(doc); /* Indices within their tables before they index anything. */
  if (rc) {
    return rc;
  }
  em__jw_t w = {.buf = buf, .cap = cap, .pos = 0, .first = true};
  em__jw_open(&w, '{');
  em__jw_common(&w, k->kind, member(doc, k->head_offset));
  em__jkv_u64(&w, "number", number_of(k, doc));
  em_trigger_t trigger = trigger_of(k, doc);
  em__jw_trigger(&w, em__cause_name(trigger.cause), &trigger);
  k->json(&w, doc);
  em__jkv_true(&w, "historical", historical(k, doc));
  em__jw_close(&w, '}');
  return em__jw_finish(&w, out_len);
}

int em__check_tables(const em__table_t *t, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (t[i].n > t[i].max) {
      return EM_PROTO_ELIMIT;
    }
  }
  for (size_t i = 0; i < n; i++) {
    if (t[i].n && !t[i].items) {
      return EM_PROTO_EINVAL;
    }
  }
  return 0;
}

void em__w_texts(em__writer_t *w, unsigned key, const char *const *texts, size_t n) {
  em__w_uint(w, key);
  em__w_array(w, n);
  for (size_t i = 0; i < n; i++) {
    em__w_str(w, texts[i]);
  }
}

static uint64_t uint_member(const void *doc, const em__uint_member_t *m) {
  if (m->bytes == sizeof(uint32_t)) {
    uint32_t v;
    memcpy(&v, member(doc, m->offset), sizeof(v));
    return v;
  }
  uint64_t v;
  memcpy(&v, member(doc, m->offset), sizeof(v));
  return v;
}

void em__w_uints(em__writer_t *w, const void *doc, const em__uint_member_t *m, size_t n) {
  for (size_t i = 0; i < n; i++) {
    em__kv_uint(w, m[i].key, uint_member(doc, &m[i]));
  }
}

void em__jw_uints(em__jw_t *w, const void *doc, const em__uint_member_t *m, size_t n) {
  for (size_t i = 0; i < n; i++) {
    em__jkv_u64(w, m[i].json, uint_member(doc, &m[i]));
  }
}

size_t em__counts_entries(const void *note, const em__uint_member_t *m, size_t n) {
  size_t entries = 0;
  for (size_t i = 0; i < n; i++) {
    entries += uint_member(note, &m[i]) ? 1u : 0u;
  }
  return entries;
}

size_t em__counts_bytes(const void *note, const em__uint_member_t *m, size_t n) {
  if (!em__counts_entries(note, m, n)) {
    return 0;
  }
  size_t bytes = 2; /* The key and the map's head. */
  for (size_t i = 0; i < n; i++) {
    uint64_t v = uint_member(note, &m[i]);
    bytes += v ? 1u + em__uint_bytes(v) : 0u;
  }
  return bytes;
}

void em__w_counts(em__writer_t *w, unsigned key, const void *note, const em__uint_member_t *m,
                  size_t n) {
  size_t entries = em__counts_entries(note, m, n);
  if (!entries) {
    return;
  }
  em__w_uint(w, key);
  em__w_map(w, entries);
  for (size_t i = 0; i < n; i++) {
    uint64_t v = uint_member(note, &m[i]);
    if (v) {
      em__kv_uint(w, m[i].key, v);
    }
  }
}

void em__jw_counts(em__jw_t *w, const char *name, const void *note, const em__uint_member_t *m,
                   size_t n) {
  if (!em__counts_entries(note, m, n)) {
    return;
  }
  em__jw_key(w, name);
  em__jw_open(w, '{');
  em__jw_uints(w, note, m, n);
  em__jw_close(w, '}');
}
