/*
 * wire.c - packing, unpacking and validation of the board-local binary records: the span
 * datagram v1, the model datagram v2 and the Python stacks datagram v2 (client -> agent), the
 * level push datagram v1, the state page v1 and the profile request page v1 (agent -> clients).
 * proto/WIRE.md is the normative description of every byte; this file implements exactly that
 * document and nothing more.
 *
 * What it owns: nothing. Every buffer is the caller's, nothing allocates, there is no global
 * state. Every multi-byte field is packed and unpacked with explicit little-endian byte shifts
 * (put_le* / get_le*), doubles go through their IEEE-754 bit pattern, and no struct is ever
 * copied to or from the wire, so the layout does not depend on the compiler or its padding.
 *
 * Validation is shared by both directions: a pack function refuses exactly the records its
 * unpack function would refuse (same checks, same codes) and never truncates a string, so
 * whatever the agent or a client writes, the other side reads back unchanged. Unpack functions
 * leave their output untouched on failure.
 *
 * Threading: the state page is a single-writer seqlock shared between processes through a
 * mapped file. The writer (the agent) calls em_state_page_write(); any number of readers in
 * any process call em_state_page_read(). The only word accessed as wider than a byte is the
 * sequence counter, a uint32_t at offset 8 of an 8-byte-aligned page; the record bytes are
 * copied with relaxed byte-wide atomics so the concurrent copy is not a data race in the C11
 * model (they compile to plain byte moves). All supported boards are little-endian, so the
 * native counter value is its little-endian wire value; le32toh/htole32 keep that explicit.
 */
#define _DEFAULT_SOURCE /* le32toh / htole32 from <endian.h> under -std=c11. */

#include "edgemon/wire.h"

#include "wire_bytes.h"

#include <endian.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Span datagram v1 (64 bytes). */
#define SPAN_OFF_MAGIC0   0u
#define SPAN_OFF_MAGIC1   1u
#define SPAN_OFF_VERSION  2u
#define SPAN_OFF_KIND     3u
#define SPAN_OFF_PID      4u
#define SPAN_OFF_FRAME    8u
#define SPAN_OFF_START    16u
#define SPAN_OFF_DURATION 24u
#define SPAN_OFF_STAGE    32u

/* State record body (240 bytes), shared by the push datagram and the state page. */
#define BODY_OFF_LEVEL     0u
#define BODY_OFF_PREV      1u
#define BODY_OFF_RESERVED  2u
#define BODY_OFF_CHANGES   4u
#define BODY_OFF_SINCE_MON 8u
#define BODY_OFF_SINCE_WAL 16u
#define BODY_OFF_VALUE     24u
#define BODY_OFF_BOUND     32u
#define BODY_OFF_RULE      40u
#define BODY_OFF_STAGE     72u
#define BODY_OFF_REASON    104u

/* Level push datagram v1 (256 bytes). */
#define PUSH_OFF_PID      4u
#define PUSH_OFF_RESERVED 8u
#define PUSH_OFF_BODY     16u

/* State page v1 (256 bytes). */
#define PAGE_OFF_MAGIC   0u
#define PAGE_OFF_VERSION 4u
#define PAGE_OFF_SIZE    6u
#define PAGE_OFF_SEQ     8u
#define PAGE_OFF_PID     12u
#define PAGE_OFF_BODY    16u
#define PAGE_ALIGN       8u
#define PAGE_READ_TRIES  64u /* Seqlock read attempts before EM_PROTO_EBUSY. */

static const uint8_t page_magic[4] = {0x45, 0x4D, 0x53, 0x54}; /* "EMST" */

bool em_stage_name_valid(const char *name) {
  if (name == NULL) {
    return false;
  }
  return check_text((const unsigned char *)name, EM_STAGE_FIELD_BYTES, TEXT_STAGE) == 0;
}

/* ---- Span datagram ---- */

static bool is_client_kind(int kind) {
  return kind >= EM_DGRAM_SPAN && kind <= EM_DGRAM_UNSUBSCRIBE;
}

static bool kind_has_stage(int kind) {
  return kind == EM_DGRAM_SPAN || kind == EM_DGRAM_HEARTBEAT;
}

/*
 * Packs a client datagram: header, the three u64 fields and the stage field (name then NUL
 * padding, or 32 zero bytes for (un)subscribe). Validates everything before writing, so `out`
 * is untouched on failure. duration_ns is written as given for every kind (senders use 0
 * where it has no meaning; receivers ignore it there).
 */
int em_span_pack(const em_span_t *span, uint8_t out[EM_SPAN_DGRAM_BYTES]) {
  if (span == NULL || out == NULL) {
    return EM_PROTO_EINVAL;
  }
  int kind = (int)span->kind;
  if (!is_client_kind(kind)) {
    return EM_PROTO_EKIND;
  }
  const unsigned char *stage = (const unsigned char *)span->stage;
  if (kind_has_stage(kind)) {
    if (check_text(stage, EM_STAGE_FIELD_BYTES, TEXT_STAGE) != 0) {
      return EM_PROTO_ESTRING;
    }
  } else if (stage[0] != 0) {
    return EM_PROTO_ESTRING;
  }

  put_dgram_head(out, EM_WIRE_VERSION, (uint8_t)kind);
  put_le32(out + SPAN_OFF_PID, span->pid);
  put_le64(out + SPAN_OFF_FRAME, span->frame_id);
  put_le64(out + SPAN_OFF_START, span->start_ns);
  put_le64(out + SPAN_OFF_DURATION, span->duration_ns);
  pack_text(out + SPAN_OFF_STAGE, EM_STAGE_FIELD_BYTES, span->stage);
  return 0;
}

/*
 * Unpacks one received datagram. Checks, in this order: size, magic, version, kind, stage
 * field (a valid name then zero padding for span and heartbeat; 32 zero bytes for
 * (un)subscribe). out->stage is fully written, zero-padded after the name.
 */
int em_span_unpack(const uint8_t *buf, size_t len, em_span_t *out) {
  int head = check_dgram_head(buf, out, len, EM_SPAN_DGRAM_BYTES, EM_SPAN_DGRAM_BYTES,
                              EM_WIRE_VERSION, ANY_KIND);
  if (head != 0) {
    return head;
  }
  int kind = buf[SPAN_OFF_KIND];
  if (!is_client_kind(kind)) {
    return EM_PROTO_EKIND;
  }

  em_span_t span;
  const uint8_t *stage = buf + SPAN_OFF_STAGE;
  if (kind_has_stage(kind)) {
    int rc = unpack_text(stage, EM_STAGE_FIELD_BYTES, TEXT_STAGE, span.stage);
    if (rc != 0) {
      return rc;
    }
  } else {
    int rc = check_padding(stage, 0, EM_STAGE_FIELD_BYTES);
    if (rc != 0) {
      return rc;
    }
    memset(span.stage, 0, sizeof span.stage);
  }
  span.kind = (em_dgram_kind_t)kind;
  span.pid = get_le32(buf + SPAN_OFF_PID);
  span.frame_id = get_le64(buf + SPAN_OFF_FRAME);
  span.start_ns = get_le64(buf + SPAN_OFF_START);
  span.duration_ns = get_le64(buf + SPAN_OFF_DURATION);
  *out = span;
  return 0;
}

/* ---- Model datagram v2 ---- */

/* Model datagram v2 (512 bytes). */
#define MODEL_OFF_PID        4u
#define MODEL_OFF_GENERATION 8u
#define MODEL_OFF_N_LABELS   12u
#define MODEL_OFF_RESERVED_A 13u /* 3 bytes */
#define MODEL_OFF_NAME       16u
#define MODEL_OFF_VERSION    80u
#define MODEL_OFF_LABELS     112u
#define MODEL_LABEL_BYTES    (EM_MODEL_LABEL_KEY_BYTES + EM_MODEL_LABEL_VALUE_BYTES) /* 48 */
#define MODEL_OFF_RESERVED_B 496u                                                    /* 16 bytes */

_Static_assert(MODEL_OFF_LABELS + EM_PROTO_MAX_MODEL_LABELS * MODEL_LABEL_BYTES ==
                   MODEL_OFF_RESERVED_B,
               "the label slots end where the trailing reserved bytes begin");
_Static_assert(EM_MODEL_NAME_FIELD_BYTES == EM_PROTO_MAX_NAME_BYTES + 1 &&
                   EM_MODEL_VERSION_FIELD_BYTES == EM_PROTO_MAX_MODEL_VERSION + 1 &&
                   EM_MODEL_LABEL_KEY_BYTES == EM_PROTO_MAX_LABEL_KEY + 1 &&
                   EM_MODEL_LABEL_VALUE_BYTES == EM_PROTO_MAX_LABEL_VALUE + 1,
               "every text field holds the schema's longest text and its NUL");

void em_model_dgram_view(const em_model_dgram_t *d, em_label_t labels[EM_PROTO_MAX_MODEL_LABELS],
                         em_model_t *out) {
  size_t n = d->n_labels <= EM_PROTO_MAX_MODEL_LABELS ? d->n_labels : EM_PROTO_MAX_MODEL_LABELS;
  for (size_t i = 0; i < n; i++) {
    labels[i] = (em_label_t){.key = d->labels[i].key, .value = d->labels[i].value};
  }
  *out = (em_model_t){.name = d->name, .version = d->version, .labels = labels, .n_labels = n};
}

/*
 * Packs a model datagram: em_proto_model_check() first (its rules bound every text to its field
 * with room for the NUL), then the header, the texts NUL-padded, unused label slots and reserved
 * bytes zero.
 */
int em_model_dgram_pack(const em_model_t *m, uint32_t pid, uint32_t generation,
                        uint8_t out[EM_MODEL_DGRAM_BYTES]) {
  if (m == NULL || out == NULL || m->name == NULL) {
    return EM_PROTO_EINVAL;
  }
  int rc = em_proto_model_check(m);
  if (rc != 0) {
    return rc;
  }
  memset(out, 0, EM_MODEL_DGRAM_BYTES);
  put_dgram_head(out, EM_MODEL_DGRAM_VERSION, EM_DGRAM_MODEL);
  put_le32(out + MODEL_OFF_PID, pid);
  put_le32(out + MODEL_OFF_GENERATION, generation);
  out[MODEL_OFF_N_LABELS] = (uint8_t)m->n_labels;
  pack_text(out + MODEL_OFF_NAME, EM_MODEL_NAME_FIELD_BYTES, m->name);
  pack_text(out + MODEL_OFF_VERSION, EM_MODEL_VERSION_FIELD_BYTES, m->version);
  for (size_t i = 0; i < m->n_labels; i++) {
    uint8_t *slot = out + MODEL_OFF_LABELS + i * MODEL_LABEL_BYTES;
    pack_text(slot, EM_MODEL_LABEL_KEY_BYTES, m->labels[i].key);
    pack_text(slot + EM_MODEL_LABEL_KEY_BYTES, EM_MODEL_LABEL_VALUE_BYTES, m->labels[i].value);
  }
  return 0;
}

/* A received text field: its NUL inside the field and only zero bytes after it (ESTRING), copied
 * with its padding into out[0..cap). What the text may hold is em_proto_model_check()'s to say. */
static int unpack_field(const uint8_t *field, size_t cap, char *out) {
  size_t n = bounded_len(field, cap);
  if (n == cap || check_padding(field, n, cap) != 0) {
    return EM_PROTO_ESTRING;
  }
  memcpy(out, field, cap);
  return 0;
}

/*
 * Unpacks a model datagram in WIRE.md's order: size, magic, version, kind, label count,
 * reserved bytes and unused slots, the text fields' framing, then em_proto_model_check() on the
 * decoded identity, so the agent accepts exactly what the schema's encoder accepts.
 */
int em_model_dgram_unpack(const uint8_t *buf, size_t len, em_model_dgram_t *out) {
  int head = check_dgram_head(buf, out, len, EM_MODEL_DGRAM_BYTES, EM_MODEL_DGRAM_BYTES,
                              EM_MODEL_DGRAM_VERSION, EM_DGRAM_MODEL);
  if (head != 0) {
    return head;
  }
  size_t n = buf[MODEL_OFF_N_LABELS];
  if (n > EM_PROTO_MAX_MODEL_LABELS) {
    return EM_PROTO_ELIMIT;
  }
  const uint8_t *unused = buf + MODEL_OFF_LABELS + n * MODEL_LABEL_BYTES;
  if (check_padding(buf + MODEL_OFF_RESERVED_A, 0, 3) != 0 ||
      check_padding(unused, 0, (size_t)(buf + MODEL_OFF_RESERVED_B + 16u - unused)) != 0) {
    return EM_PROTO_ERANGE;
  }
  em_model_dgram_t d;
  memset(&d, 0, sizeof d);
  int rc = unpack_field(buf + MODEL_OFF_NAME, EM_MODEL_NAME_FIELD_BYTES, d.name);
  if (rc == 0) {
    rc = unpack_field(buf + MODEL_OFF_VERSION, EM_MODEL_VERSION_FIELD_BYTES, d.version);
  }
  for (size_t i = 0; i < n && rc == 0; i++) {
    const uint8_t *slot = buf + MODEL_OFF_LABELS + i * MODEL_LABEL_BYTES;
    rc = unpack_field(slot, EM_MODEL_LABEL_KEY_BYTES, d.labels[i].key);
    if (rc == 0) {
      rc = unpack_field(slot + EM_MODEL_LABEL_KEY_BYTES, EM_MODEL_LABEL_VALUE_BYTES,
                        d.labels[i].value);
    }
  }
  if (rc != 0) {
    return rc;
  }
  d.n_labels = n;
  em_label_t labels[EM_PROTO_MAX_MODEL_LABELS];
  em_model_t view;
  em_model_dgram_view(&d, labels, &view);
  rc = em_proto_model_check(&view);
  if (rc != 0) {
    return rc;
  }
  d.pid = get_le32(buf + MODEL_OFF_PID);
  d.generation = get_le32(buf + MODEL_OFF_GENERATION);
  *out = d;
  return 0;
}

/* ---- State record body ---- */

static bool is_wire_level(int level) {
  return level >= EM_LEVEL_NOMINAL && level <= EM_LEVEL_CRITICAL;
}

/*
 * The checks em_push_pack() and the page functions make before writing anything: both
 * levels in 0..3 (EM_PROTO_ERANGE), then rule, stage and reason (EM_PROTO_ESTRING), in the
 * order unpack_body() checks them.
 */
static int validate_record(const em_state_record_t *rec) {
  if (!is_wire_level((int)rec->level) || !is_wire_level((int)rec->prev_level)) {
    return EM_PROTO_ERANGE;
  }
  if (check_text((const unsigned char *)rec->rule, EM_RULE_FIELD_BYTES, TEXT_PRINTABLE) != 0) {
    return EM_PROTO_ESTRING;
  }
  if (check_text((const unsigned char *)rec->stage, EM_STAGE_FIELD_BYTES, TEXT_STAGE_OR_EMPTY) !=
      0) {
    return EM_PROTO_ESTRING;
  }
  if (check_text((const unsigned char *)rec->reason, EM_REASON_FIELD_BYTES, TEXT_PRINTABLE) != 0) {
    return EM_PROTO_ESTRING;
  }
  return 0;
}

/* Writes a record that validate_record() accepted into body[0..EM_STATE_BODY_BYTES). */
static void pack_body(const em_state_record_t *rec, uint8_t *body) {
  body[BODY_OFF_LEVEL] = (uint8_t)rec->level;
  body[BODY_OFF_PREV] = (uint8_t)rec->prev_level;
  put_le16(body + BODY_OFF_RESERVED, 0);
  put_le32(body + BODY_OFF_CHANGES, rec->changes);
  put_le64(body + BODY_OFF_SINCE_MON, rec->since_mono_ns);
  put_le64(body + BODY_OFF_SINCE_WAL, rec->since_wall_ns);
  put_f64(body + BODY_OFF_VALUE, rec->value);
  put_f64(body + BODY_OFF_BOUND, rec->bound);
  pack_text(body + BODY_OFF_RULE, EM_RULE_FIELD_BYTES, rec->rule);
  pack_text(body + BODY_OFF_STAGE, EM_STAGE_FIELD_BYTES, rec->stage);
  pack_text(body + BODY_OFF_REASON, EM_REASON_FIELD_BYTES, rec->reason);
}

/*
 * Validates and unpacks a body. Order of checks: level, prev_level and the reserved u16
 * (EM_PROTO_ERANGE: a level above 3 or a non-zero reserved field), then rule, stage and
 * reason (EM_PROTO_ESTRING). `out` is written only on success.
 */
static int unpack_body(const uint8_t *body, em_state_record_t *out) {
  if (!is_wire_level(body[BODY_OFF_LEVEL]) || !is_wire_level(body[BODY_OFF_PREV])) {
    return EM_PROTO_ERANGE;
  }
  if (get_le16(body + BODY_OFF_RESERVED) != 0) {
    return EM_PROTO_ERANGE;
  }
  em_state_record_t rec;
  int rc = unpack_text(body + BODY_OFF_RULE, EM_RULE_FIELD_BYTES, TEXT_PRINTABLE, rec.rule);
  if (rc != 0) {
    return rc;
  }
  rc = unpack_text(body + BODY_OFF_STAGE, EM_STAGE_FIELD_BYTES, TEXT_STAGE_OR_EMPTY, rec.stage);
  if (rc != 0) {
    return rc;
  }
  rc = unpack_text(body + BODY_OFF_REASON, EM_REASON_FIELD_BYTES, TEXT_PRINTABLE, rec.reason);
  if (rc != 0) {
    return rc;
  }
  rec.level = (em_level_t)body[BODY_OFF_LEVEL];
  rec.prev_level = (em_level_t)body[BODY_OFF_PREV];
  rec.changes = get_le32(body + BODY_OFF_CHANGES);
  rec.since_mono_ns = get_le64(body + BODY_OFF_SINCE_MON);
  rec.since_wall_ns = get_le64(body + BODY_OFF_SINCE_WAL);
  rec.value = get_f64(body + BODY_OFF_VALUE);
  rec.bound = get_f64(body + BODY_OFF_BOUND);
  *out = rec;
  return 0;
}

/* ---- Level push datagram ---- */

/* Packs header (kind 16, agent pid, 8 reserved zero bytes) and body; `out` untouched on error. */
int em_push_pack(const em_state_record_t *rec, uint32_t agent_pid,
                 uint8_t out[EM_PUSH_DGRAM_BYTES]) {
  if (rec == NULL || out == NULL) {
    return EM_PROTO_EINVAL;
  }
  int rc = validate_record(rec);
  if (rc != 0) {
    return rc;
  }
  put_dgram_head(out, EM_WIRE_VERSION, EM_DGRAM_LEVEL_PUSH);
  put_le32(out + PUSH_OFF_PID, agent_pid);
  put_le64(out + PUSH_OFF_RESERVED, 0);
  pack_body(rec, out + PUSH_OFF_BODY);
  return 0;
}

/*
 * Unpacks a push datagram. Order of checks: size (256), magic, version, kind (16), the
 * reserved u64 at offset 8 (EM_PROTO_ERANGE when not 0), then the body's checks.
 * agent_pid may be NULL.
 */
int em_push_unpack(const uint8_t *buf, size_t len, em_state_record_t *out, uint32_t *agent_pid) {
  int head = check_dgram_head(buf, out, len, EM_PUSH_DGRAM_BYTES, EM_PUSH_DGRAM_BYTES,
                              EM_WIRE_VERSION, EM_DGRAM_LEVEL_PUSH);
  if (head != 0) {
    return head;
  }
  if (get_le64(buf + PUSH_OFF_RESERVED) != 0) {
    return EM_PROTO_ERANGE;
  }
  int rc = unpack_body(buf + PUSH_OFF_BODY, out);
  if (rc != 0) {
    return rc;
  }
  if (agent_pid != NULL) {
    *agent_pid = get_le32(buf + PUSH_OFF_PID);
  }
  return 0;
}

/* ---- State page (single-writer seqlock) ---- */

static bool page_aligned(const uint8_t *page) {
  return ((uintptr_t)page % PAGE_ALIGN) == 0;
}

/* The sequence counter: a naturally aligned native uint32_t (the page is 8-byte aligned). */
static uint32_t *page_seq(uint8_t *page) {
  return (uint32_t *)(void *)(page + PAGE_OFF_SEQ);
}

static const uint32_t *page_seq_const(const uint8_t *page) {
  return (const uint32_t *)(const void *)(page + PAGE_OFF_SEQ);
}

/* Copies body[] into the page's record bytes, one relaxed atomic byte store each. */
static void publish_body(uint8_t *page, const uint8_t *body) {
  store_bytes_relaxed(page + PAGE_OFF_BODY, body, EM_STATE_BODY_BYTES);
}

/* Copies the page's record bytes into body[], one relaxed atomic byte load each. */
static void snapshot_body(const uint8_t *page, uint8_t *body) {
  load_bytes_relaxed(body, page + PAGE_OFF_BODY, EM_STATE_BODY_BYTES);
}

/*
 * Formats a page: magic, version, size, seq 0, agent pid, the initial record. Not safe
 * against concurrent readers: the agent formats the file before any client can open it
 * (WIRE.md: write a temporary file, then rename it into place).
 */
int em_state_page_init(uint8_t *page, uint32_t agent_pid, const em_state_record_t *initial) {
  if (page == NULL || initial == NULL || !page_aligned(page)) {
    return EM_PROTO_EINVAL;
  }
  int rc = validate_record(initial);
  if (rc != 0) {
    return rc;
  }
  uint8_t body[EM_STATE_BODY_BYTES];
  pack_body(initial, body);

  memcpy(page + PAGE_OFF_MAGIC, page_magic, sizeof page_magic);
  put_le16(page + PAGE_OFF_VERSION, EM_WIRE_VERSION);
  put_le16(page + PAGE_OFF_SIZE, EM_STATE_PAGE_BYTES);
  __atomic_store_n(page_seq(page), htole32(0), __ATOMIC_RELAXED);
  put_le32(page + PAGE_OFF_PID, agent_pid);
  publish_body(page, body);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  return 0;
}

/*
 * The seqlock write: validate and pack the record first (so a refused record leaves the page
 * and its counter untouched), then seq+1 (odd), release fence, record bytes, seq+2 (even)
 * with release ordering. Only one writer may call this on a page.
 */
int em_state_page_write(uint8_t *page, const em_state_record_t *rec) {
  if (page == NULL || rec == NULL || !page_aligned(page)) {
    return EM_PROTO_EINVAL;
  }
  int rc = validate_record(rec);
  if (rc != 0) {
    return rc;
  }
  uint8_t body[EM_STATE_BODY_BYTES];
  pack_body(rec, body);

  uint32_t *seq = page_seq(page);
  uint32_t start = le32toh(__atomic_load_n(seq, __ATOMIC_RELAXED));
  __atomic_store_n(seq, htole32(start + 1u), __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  publish_body(page, body);
  __atomic_store_n(seq, htole32(start + 2u), __ATOMIC_RELEASE);
  return 0;
}

/*
 * The seqlock read. The header (magic, version, size) is written once before the page is
 * published and never changes, so it is checked first: a file that is not a v1 page gets
 * EMAGIC/EVERSION/ESIZE rather than EBUSY. Then up to PAGE_READ_TRIES times: s1 = seq
 * (acquire); odd -> retry; copy the record; acquire fence; s2 = seq (relaxed); s1 != s2 ->
 * retry. The copy that survives is validated and unpacked. seq_out may be NULL.
 */
int em_state_page_read(const uint8_t *page, em_state_record_t *out, uint32_t *seq_out) {
  if (page == NULL || out == NULL || !page_aligned(page)) {
    return EM_PROTO_EINVAL;
  }
  int head =
      check_page_head(page, page_magic, sizeof page_magic, PAGE_OFF_VERSION, EM_WIRE_VERSION);
  if (head != 0) {
    return head;
  }
  if (get_le16(page + PAGE_OFF_SIZE) != EM_STATE_PAGE_BYTES) {
    return EM_PROTO_ESIZE;
  }

  const uint32_t *seq = page_seq_const(page);
  uint8_t body[EM_STATE_BODY_BYTES];
  for (unsigned attempt = 0; attempt < PAGE_READ_TRIES; attempt++) {
    uint32_t s1 = le32toh(__atomic_load_n(seq, __ATOMIC_ACQUIRE));
    if ((s1 & 1u) != 0) {
      continue;
    }
    snapshot_body(page, body);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    uint32_t s2 = le32toh(__atomic_load_n(seq, __ATOMIC_RELAXED));
    if (s1 != s2) {
      continue;
    }
    int rc = unpack_body(body, out);
    if (rc != 0) {
      return rc;
    }
    if (seq_out != NULL) {
      *seq_out = s1;
    }
    return 0;
  }
  return EM_PROTO_EBUSY;
}

/* ---- Profile request page v1 (64 bytes) ---- */

#define PPAGE_OFF_MAGIC    0u
#define PPAGE_OFF_VERSION  4u
#define PPAGE_OFF_SIZE     6u
#define PPAGE_OFF_WINDOW   8u
#define PPAGE_OFF_HZ       12u
#define PPAGE_OFF_START    16u
#define PPAGE_OFF_END      24u
#define PPAGE_OFF_RESERVED 32u /* To the end. */
#define PPAGE_MAX_HZ       1000u

static const uint8_t ppage_magic[4] = {0x45, 0x4D, 0x50, 0x52}; /* "EMPR" */

static bool ppage_fields_valid(const em_profile_page_t *p) {
  return p->hz >= 1 && p->hz <= PPAGE_MAX_HZ && p->end_ns >= p->start_ns;
}

int em_profile_page_pack(const em_profile_page_t *p, uint8_t out[EM_PROFILE_PAGE_BYTES]) {
  if (p == NULL || out == NULL) {
    return EM_PROTO_EINVAL;
  }
  if (!ppage_fields_valid(p)) {
    return EM_PROTO_ERANGE;
  }
  memset(out, 0, EM_PROFILE_PAGE_BYTES);
  memcpy(out + PPAGE_OFF_MAGIC, ppage_magic, sizeof ppage_magic);
  put_le16(out + PPAGE_OFF_VERSION, EM_PROFILE_PAGE_VERSION);
  put_le16(out + PPAGE_OFF_SIZE, EM_PROFILE_PAGE_BYTES);
  put_le32(out + PPAGE_OFF_WINDOW, p->window);
  put_le32(out + PPAGE_OFF_HZ, p->hz);
  put_le64(out + PPAGE_OFF_START, p->start_ns);
  put_le64(out + PPAGE_OFF_END, p->end_ns);
  return 0;
}

int em_profile_page_unpack(const uint8_t *buf, size_t len, em_profile_page_t *out) {
  if (buf == NULL || out == NULL) {
    return EM_PROTO_EINVAL;
  }
  if (len != EM_PROFILE_PAGE_BYTES) {
    return EM_PROTO_ESIZE;
  }
  int head = check_page_head(buf, ppage_magic, sizeof ppage_magic, PPAGE_OFF_VERSION,
                             EM_PROFILE_PAGE_VERSION);
  if (head != 0) {
    return head;
  }
  em_profile_page_t p = {.window = get_le32(buf + PPAGE_OFF_WINDOW),
                         .hz = get_le32(buf + PPAGE_OFF_HZ),
                         .start_ns = get_le64(buf + PPAGE_OFF_START),
                         .end_ns = get_le64(buf + PPAGE_OFF_END)};
  if (get_le16(buf + PPAGE_OFF_SIZE) != EM_PROFILE_PAGE_BYTES || !ppage_fields_valid(&p) ||
      check_padding(buf + PPAGE_OFF_RESERVED, 0, EM_PROFILE_PAGE_BYTES - PPAGE_OFF_RESERVED) != 0) {
    return EM_PROTO_ERANGE;
  }
  *out = p;
  return 0;
}

/* ---- Python stacks datagram v2 (32..65507 bytes) ---- */

#define PYS_OFF_PID       4u
#define PYS_OFF_WINDOW    8u
#define PYS_OFF_CUT       12u
#define PYS_OFF_N_STRINGS 16u
#define PYS_OFF_N_SAMPLES 18u
#define PYS_OFF_STR_BYTES 20u
#define PYS_OFF_RESERVED  24u /* 8 bytes */

/*
 * True when s[0..n) is a frame text: 1..255 bytes of well-formed UTF-8 (shortest forms, no
 * surrogates, at most U+10FFFF) with no control character (below 0x20, or 0x7f).
 */
static bool frame_text_valid(const uint8_t *s, size_t n) {
  if (n == 0 || n > EM_PYSTACKS_MAX_STRING_BYTES) {
    return false;
  }
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    if (c < 0x80u) {
      if (c < 0x20u || c == 0x7fu) {
        return false;
      }
      i++;
      continue;
    }
    size_t more;
    uint32_t cp, min;
    if ((c & 0xE0u) == 0xC0u) {
      more = 1, cp = c & 0x1Fu, min = 0x80u;
    } else if ((c & 0xF0u) == 0xE0u) {
      more = 2, cp = c & 0x0Fu, min = 0x800u;
    } else if ((c & 0xF8u) == 0xF0u) {
      more = 3, cp = c & 0x07u, min = 0x10000u;
    } else {
      return false;
    }
    if (n - i - 1 < more) {
      return false;
    }
    for (size_t k = 1; k <= more; k++) {
      if ((s[i + k] & 0xC0u) != 0x80u) {
        return false;
      }
      cp = (cp << 6) | (s[i + k] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFFu || (cp >= 0xD800u && cp <= 0xDFFFu)) {
      return false;
    }
    i += more + 1;
  }
  return true;
}

int em_pystacks_pack(uint32_t pid, uint32_t window, uint32_t samples_cut,
                     const char *const *strings, size_t n_strings, const em_pysample_t *samples,
                     size_t n_samples, uint8_t *out, size_t cap, size_t *out_len) {
  if (out_len == NULL || (n_strings && strings == NULL) || (n_samples && samples == NULL) ||
      (cap && out == NULL)) {
    return EM_PROTO_EINVAL;
  }
  if (n_strings > EM_PYSTACKS_MAX_STRINGS || n_samples > UINT16_MAX) {
    return EM_PROTO_ELIMIT;
  }
  size_t str_bytes = 0;
  for (size_t i = 0; i < n_strings; i++) {
    size_t n = strings[i] ? strlen(strings[i]) : 0;
    if (!frame_text_valid((const uint8_t *)strings[i], n)) {
      return EM_PROTO_ESTRING;
    }
    str_bytes += 1 + n;
  }
  size_t need = EM_PYSTACKS_HEADER_BYTES + str_bytes;
  for (size_t i = 0; i < n_samples; i++) {
    const em_pysample_t *s = &samples[i];
    if (s->depth == 0 || s->depth > EM_PYSTACKS_MAX_DEPTH) {
      return EM_PROTO_ERANGE;
    }
    for (size_t k = 0; k < s->depth; k++) {
      if (s->frames[k] >= n_strings) {
        return EM_PROTO_ERANGE;
      }
    }
    need += EM_PYSTACKS_SAMPLE_HEAD_BYTES + 2u * s->depth;
  }
  *out_len = need;
  if (need > EM_PYSTACKS_MAX_BYTES) {
    return EM_PROTO_ETOOBIG;
  }
  if (need > cap) {
    return EM_PROTO_ENOSPACE;
  }
  memset(out, 0, EM_PYSTACKS_HEADER_BYTES);
  put_dgram_head(out, EM_PYSTACKS_VERSION, EM_DGRAM_PYSTACKS);
  put_le32(out + PYS_OFF_PID, pid);
  put_le32(out + PYS_OFF_WINDOW, window);
  put_le32(out + PYS_OFF_CUT, samples_cut);
  put_le16(out + PYS_OFF_N_STRINGS, (uint16_t)n_strings);
  put_le16(out + PYS_OFF_N_SAMPLES, (uint16_t)n_samples);
  put_le32(out + PYS_OFF_STR_BYTES, (uint32_t)str_bytes);
  uint8_t *p = out + EM_PYSTACKS_HEADER_BYTES;
  for (size_t i = 0; i < n_strings; i++) {
    size_t n = strlen(strings[i]);
    *p++ = (uint8_t)n;
    memcpy(p, strings[i], n);
    p += n;
  }
  for (size_t i = 0; i < n_samples; i++) {
    const em_pysample_t *s = &samples[i];
    put_le32(p, s->tid);
    put_le64(p + 4, s->time_ns);
    put_le16(p + 12, s->depth);
    p += EM_PYSTACKS_SAMPLE_HEAD_BYTES;
    for (size_t k = 0; k < s->depth; k++, p += 2) {
      put_le16(p, s->frames[k]);
    }
  }
  return 0;
}

/*
 * Unpacks in WIRE.md's order: the header, then the string table walked by its length bytes
 * (it must end exactly at the header's strings_bytes), then every sample walked and checked
 * (they must end exactly at len). Nothing is read past len; *out is written only on success.
 */
int em_pystacks_unpack(const uint8_t *buf, size_t len, em_pystacks_t *out) {
  int head = check_dgram_head(buf, out, len, EM_PYSTACKS_HEADER_BYTES, EM_PYSTACKS_MAX_BYTES,
                              EM_PYSTACKS_VERSION, EM_DGRAM_PYSTACKS);
  if (head != 0) {
    return head;
  }
  if (check_padding(buf + PYS_OFF_RESERVED, 0, 8) != 0) {
    return EM_PROTO_ERANGE;
  }
  uint16_t n_strings = get_le16(buf + PYS_OFF_N_STRINGS);
  uint16_t n_samples = get_le16(buf + PYS_OFF_N_SAMPLES);
  uint32_t str_bytes = get_le32(buf + PYS_OFF_STR_BYTES);
  if (n_strings > EM_PYSTACKS_MAX_STRINGS) {
    return EM_PROTO_ELIMIT;
  }
  if (str_bytes > len - EM_PYSTACKS_HEADER_BYTES) {
    return EM_PROTO_ESIZE;
  }
  size_t str_end = EM_PYSTACKS_HEADER_BYTES + (size_t)str_bytes;
  size_t off = EM_PYSTACKS_HEADER_BYTES;
  for (uint16_t i = 0; i < n_strings; i++) {
    if (off >= str_end || buf[off] > str_end - off - 1) {
      return EM_PROTO_ESIZE;
    }
    if (!frame_text_valid(buf + off + 1, buf[off])) {
      return EM_PROTO_ESTRING;
    }
    out->str_off[i] = (uint16_t)off;
    off += 1u + buf[off];
  }
  if (off != str_end) {
    return EM_PROTO_ESIZE;
  }
  for (uint16_t i = 0; i < n_samples; i++) {
    if (len - off < EM_PYSTACKS_SAMPLE_HEAD_BYTES) {
      return EM_PROTO_ESIZE;
    }
    uint16_t depth = get_le16(buf + off + 12);
    if (depth == 0 || depth > EM_PYSTACKS_MAX_DEPTH) {
      return EM_PROTO_ERANGE;
    }
    off += EM_PYSTACKS_SAMPLE_HEAD_BYTES;
    if ((len - off) / 2u < depth) {
      return EM_PROTO_ESIZE;
    }
    for (uint16_t k = 0; k < depth; k++, off += 2) {
      if (get_le16(buf + off) >= n_strings) {
        return EM_PROTO_ERANGE;
      }
    }
  }
  if (off != len) {
    return EM_PROTO_ESIZE;
  }
  out->pid = get_le32(buf + PYS_OFF_PID);
  out->window = get_le32(buf + PYS_OFF_WINDOW);
  out->samples_cut = get_le32(buf + PYS_OFF_CUT);
  out->n_strings = n_strings;
  out->n_samples = n_samples;
  out->buf = buf;
  out->len = len;
  out->samples_off = str_end;
  return 0;
}

const uint8_t *em_pystacks_string(const em_pystacks_t *v, uint16_t i, size_t *len) {
  if (v == NULL || len == NULL || i >= v->n_strings) {
    return NULL;
  }
  const uint8_t *p = v->buf + v->str_off[i];
  *len = p[0];
  return p + 1;
}

bool em_pystacks_next(const em_pystacks_t *v, size_t *cursor, em_pysample_t *out) {
  if (v == NULL || cursor == NULL || out == NULL || *cursor > v->len ||
      v->len - *cursor < EM_PYSTACKS_SAMPLE_HEAD_BYTES) {
    return false;
  }
  const uint8_t *p = v->buf + *cursor;
  out->tid = get_le32(p);
  out->time_ns = get_le64(p + 4);
  out->depth = get_le16(p + 12);
  p += EM_PYSTACKS_SAMPLE_HEAD_BYTES;
  for (uint16_t k = 0; k < out->depth; k++) {
    out->frames[k] = get_le16(p + 2u * k);
  }
  *cursor += EM_PYSTACKS_SAMPLE_HEAD_BYTES + 2u * out->depth;
  return true;
}
