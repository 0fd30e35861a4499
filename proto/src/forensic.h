/*
 * forensic.h - internal: what the two forensic documents, the flight recording (flight.c,
 * flight_decode.c, flight_json.c) and the stack profile (profile.c, profile_decode.c,
 * profile_json.c), share at every layer. A document kind (em__doc_t) names its message kind,
 * size cap, historical key, the map heads of its live form, its checks, its CBOR writer and its
 * JSON body; the functions below are the public entry points' common steps over it: the
 * argument guards and checks, the checked encoding, the start of a fit under a cap, the
 * historical form and the JSON frame. Also the pieces both bodies write alike: lists of texts
 * (stage tables, notes) and a truncation note (what was left out, by count). Owns nothing,
 * reentrant. Not installed.
 */
#ifndef EDGEMON_PROTO_FORENSIC_H
#define EDGEMON_PROTO_FORENSIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cbor_write.h"
#include "fields.h"
#include "json_items.h"

/* A document's trigger as the shared checks, writers and readers see it (em_trigger_t). */
em_trigger_t em__flight_trigger(const void *flight_trigger);
em_trigger_t em__profile_trigger(const void *profile_trigger);

/* "escalation", "command" or "unknown": a trigger's cause in either document. */
const char *em__cause_name(uint64_t cause);

/* How a document's trigger map is read: with the measured value and bound or without, and
 * how an em_trigger_t becomes the document's own trigger struct. */
typedef struct {
  bool numbers;
  void (*set)(void *out, const em_trigger_t *t);
  em_trigger_t (*get)(const void *trigger);
} em__trigger_kind_t;

extern const em__trigger_kind_t em__flight_trigger_kind, em__profile_trigger_kind;

/* A forensic document's kind: the rows behind em_flight_* and em_profile_*. */
typedef struct {
  em_msg_kind_t kind;                /* EM_MSG_FLIGHT, EM_MSG_PROFILE. */
  size_t max_bytes;                  /* EM_FLIGHT_MAX_BYTES, EM_PROFILE_MAX_BYTES. */
  unsigned historical_key;           /* KF_HISTORICAL, KP_HISTORICAL. */
  uint8_t map_first;                 /* Map heads of a live encoding (no historical key) ... */
  uint8_t map_last;                  /* ... from the fewest entries to the most. */
  size_t head_offset;                /* Of the em_msg_head_t in the document. */
  size_t number_offset;              /* Of its uint32_t number (key 4). */
  size_t trigger_offset;             /* Of its trigger (key 5), ... */
  const em__trigger_kind_t *trigger; /* ... which this reads and converts. */
  size_t historical_offset;          /* Of its bool `historical`. */
  /* 0, or the decoder's code for a document it would refuse. */
  int (*check)(const void *doc);
  /* Writes the whole document (checked). */
  void (*write)(em__writer_t *w, const void *doc);
  /* Writes the JSON members after the head and before "historical" (checked). */
  void (*json)(em__jw_t *w, const void *doc);
} em__doc_t;

/* A kind's row from its document type T and the rest of em__doc_t in order. */
#define EM__DOC(kind_, max_bytes_, historical_key_, map_first_, map_last_, T, trigger_, check_,    \
                write_, json_)                                                                     \
  {                                                                                                \
    .kind = (kind_), .max_bytes = (max_bytes_), .historical_key = (historical_key_),               \
    .map_first = (map_first_), .map_last = (map_last_), .head_offset = offsetof(T, head),          \
    .number_offset = offsetof(T, number), .trigger_offset = offsetof(T, trigger),                  \
    .trigger = (trigger_), .historical_offset = offsetof(T, historical), .check = (check_),        \
    .write = (write_), .json = (json_)                                                             \
  }

/* The two kinds (flight.c, profile.c) and their JSON bodies (flight_json.c, profile_json.c). */
extern const em__doc_t em__flight_doc, em__profile_doc;
void em__flight_json(em__jw_t *w, const void *flight);
void em__profile_json(em__jw_t *w, const void *profile);

/* The decoder's rows of a document's number (key 4) and trigger (key 5), which both documents
 * carry alike; `doc` is the document's member of the decoder's struct T. */
#define EM__DOC_HEAD_ROWS(T, doc, trigger_kind)                                                    \
  EM__UINT(KF_NUMBER, T, doc.number, 0, UINT32_MAX, REQ),                                          \
      EM__FN(KF_TRIGGER, T, doc.trigger, em__field_trigger, (trigger_kind), REQ)

/* A field reader (EM__FN rows) for a document's trigger: its row's arg is the trigger kind. */
int em__field_trigger(em__dec_t *d, const em__field_t *f, void *base);

/*
 * The start of a document's map: version, kind and head (em__w_common) announcing `entries`
 * more entries (one more when the document is historical), then its number (key 4) and its
 * trigger (key 5), the same keys in both documents.
 */
void em__doc_w_start(em__writer_t *w, const em__doc_t *k, const void *doc, size_t entries);

/* The end of a document's map: the historical key, true, when the document is historical. */
void em__doc_w_end(em__writer_t *w, const em__doc_t *k, const void *doc);

/* One table of a document: its count, its items and its limit. */
typedef struct {
  size_t n;
  const void *items;
  size_t max;
} em__table_t;

/* EM_PROTO_ELIMIT when one of the n tables is past its limit, else EM_PROTO_EINVAL when one
 * with a count has no items, else 0. */
int em__check_tables(const em__table_t *t, size_t n);

/* The checked document's encoding: its size into *len, the bytes into buf when they fit cap;
 * EM_PROTO_ETOOBIG past the kind's cap, EM_PROTO_ENOSPACE past `cap`. */
int em__doc_write(const em__doc_t *k, const void *doc, uint8_t *buf, size_t cap, size_t *len);

/* em_flight_encode(), em_profile_encode(): the guards, the checks, the encoding. */
int em__doc_encode(const em__doc_t *k, const void *doc, uint8_t *buf, size_t cap, size_t *out_len);

/* em__doc_fit_start()'s answer when the whole document does not fit and items must go. */
#define EM__DOC_CUT 1

/*
 * The start of em_flight_encode_fit() and em_profile_encode_fit(): the guards and checks, then
 * the whole encoding when it fits the lesser of cap and the kind's cap. Returns an error, 0
 * once encoded whole, or EM__DOC_CUT with that limit in *limit.
 */
int em__doc_fit_start(const em__doc_t *k, const void *doc, uint8_t *buf, size_t cap,
                      size_t *out_len, size_t *limit);

/* em_flight_mark_historical(), em_profile_mark_historical(). */
int em__doc_mark_historical(const em__doc_t *k, const uint8_t *live, size_t len, uint8_t *out,
                            size_t cap, size_t *out_len);

/* em_flight_to_json(), em_profile_to_json(): guards, checks, {head, "number", "trigger", body,
 * "historical"}. */
int em__doc_to_json(const em__doc_t *k, const void *doc, char *buf, size_t cap, size_t *out_len);

/* `key` and an array of the n texts. */
void em__w_texts(em__writer_t *w, unsigned key, const char *const *texts, size_t n);

/* An unsigned member of a document as the writer and the printer both put it: key, JSON name,
 * place and width (4 or 8 bytes). */
typedef struct {
  unsigned key;
  const char *json;
  size_t offset;
  size_t bytes;
} em__uint_member_t;

#define EM__UINT_MEMBER(key, json, T, m)                                                           \
  { (key), (json), offsetof(T, m), sizeof(((T *)0)->m) }

/* Each of the n members of `doc` as `key` and its value (CBOR) or "json": value (JSON). */
void em__w_uints(em__writer_t *w, const void *doc, const em__uint_member_t *m, size_t n);
void em__jw_uints(em__jw_t *w, const void *doc, const em__uint_member_t *m, size_t n);

/* The unsigned members of each document around its trigger and clock, in key order. */
extern const em__uint_member_t em__flight_times[4];
extern const em__uint_member_t em__profile_times[3], em__profile_counts[2];

/*
 * A truncation note: the counts of what was left out, the n members `m` (keys < 24) of the
 * struct at `note`. Its entries are the counts that are not 0 (none: the note is left out).
 */
size_t em__counts_entries(const void *note, const em__uint_member_t *m, size_t n);

/* Bytes of `key` (< 24) and the note's map; 0 when it has no entries (the key is left out). */
size_t em__counts_bytes(const void *note, const em__uint_member_t *m, size_t n);

/* `key` and the map of the counts that are not 0; written only with some. */
void em__w_counts(em__writer_t *w, unsigned key, const void *note, const em__uint_member_t *m,
                  size_t n);

/* "name": {every count}, when some count is not 0; nothing otherwise. */
void em__jw_counts(em__jw_t *w, const char *name, const void *note, const em__uint_member_t *m,
                   size_t n);

/* The truncation notes' counts of each document, in key order. */
extern const em__uint_member_t em__flight_cuts[3], em__profile_cuts[2];

#endif /* EDGEMON_PROTO_FORENSIC_H */
