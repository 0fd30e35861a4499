/*
 * ring.c - span ring v2, its v2 datagrams and the deadline page (see edgemon/ring.h). This file
 * implements proto/WIRE.md's "Span ring v2" and "Deadline page v1" and nothing more.
 *
 * What it owns: nothing. Every buffer is the caller's and nothing allocates.
 *
 * Memory model. A ring has one writer (a thread of the inference process) and one reader (the
 * agent, in another process). The writer stores a slot's 64 bytes with relaxed byte stores and
 * then publishes head with a release store; the reader loads head with acquire. The reader
 * consumes positions below the head it saw on its previous drain (one tick earlier), copies
 * each batch of slots into its own buffer with relaxed byte loads, re-reads head, and only then
 * decides, per position: overwritten (the writer may have reached that slot again: position +
 * slot_count <= head + 1; not on the final drain, when the writer has exited), bad (seq, kind,
 * reserved bytes or stage field wrong), or folded. The copy is what is validated and handed on,
 * never the live slot. head is the only wider-than-a- byte shared word: a naturally aligned
 * uint64_t at offset 32 of an 8-byte-aligned mapping. All supported boards are little-endian, so
 * its native value is its wire value.
 *
 * Everything the reader does per drain is bounded by the slot count it was given at
 * registration; nothing it reads from the ring can make it loop longer or index outside the
 * mapping (positions are reduced modulo that slot count).
 */
#define _DEFAULT_SOURCE /* le64toh / htole64 from <endian.h> under -std=c11. */

#include "edgemon/ring.h"

#include <endian.h>
#include <string.h>

#include "wire_bytes.h"

/* Ring header (128 bytes). */
#define HDR_OFF_MAGIC      0u
#define HDR_OFF_VERSION    4u
#define HDR_OFF_HDR_SIZE   6u
#define HDR_OFF_SLOT_SIZE  8u
#define HDR_OFF_RESERVED1  10u
#define HDR_OFF_SLOTS      12u
#define HDR_OFF_PID        16u
#define HDR_OFF_TID        20u
#define HDR_OFF_START_TIME 24u
#define HDR_OFF_HEAD       32u
#define HDR_OFF_LOST       40u
#define HDR_OFF_STATE      48u
#define HDR_OFF_RESERVED2  52u

/* Slot (64 bytes). */
#define SLOT_OFF_SEQ      0u
#define SLOT_OFF_KIND     4u
#define SLOT_OFF_RESERVED 5u
#define SLOT_OFF_FRAME    8u
#define SLOT_OFF_START    16u
#define SLOT_OFF_DURATION 24u
#define SLOT_OFF_STAGE    32u

/* v2 datagrams (64 bytes). */
#define DG_OFF_VERSION 2u
#define DG_OFF_KIND    3u
#define DG_OFF_PID     4u
#define DG_OFF_A       8u  /* register/ack: start; miss: frame_id */
#define DG_OFF_B       16u /* ack: status; miss: start_ns */
#define DG_OFF_C       24u /* ack: ring id; miss: duration_ns */
#define DG_OFF_STAGE   32u

/* Deadline page v1. */
#define DL_OFF_MAGIC    0u
#define DL_OFF_VERSION  4u
#define DL_OFF_COUNT    6u
#define DL_OFF_SEQ      8u
#define DL_OFF_PID      12u
#define DL_OFF_SLOTS    16u
#define DL_OFF_RESERVED 20u
#define DL_OFF_ENTRIES  64u
#define DL_ENTRY_BYTES  40u
#define DL_ENTRY_DEADLN 32u
#define DL_READ_TRIES   64u

#define ALIGN 8u

static const uint8_t ring_magic[4] = {0x45, 0x4D, 0x52, 0x47};     /* "EMRG" */
static const uint8_t deadline_magic[4] = {0x45, 0x4D, 0x44, 0x4C}; /* "EMDL" */

static bool aligned(const void *p) {
  return ((uintptr_t)p % ALIGN) == 0;
}

static bool slot_count_valid(uint32_t n) {
  return n >= EM_RING_MIN_SLOTS && n <= EM_RING_MAX_SLOTS && (n & (n - 1u)) == 0;
}

static bool all_zero(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (p[i] != 0) {
      return false;
    }
  }
  return true;
}

static uint64_t *head_word(void *mem) {
  return (uint64_t *)(void *)((uint8_t *)mem + HDR_OFF_HEAD);
}

static const uint64_t *head_word_const(const void *mem) {
  return (const uint64_t *)(const void *)((const uint8_t *)mem + HDR_OFF_HEAD);
}

/* ---- Ring header ---- */

int em_ring_init(void *mem, uint32_t slot_count, uint32_t pid, uint32_t tid, uint64_t start_time) {
  if (mem == NULL || !aligned(mem)) {
    return EM_PROTO_EINVAL;
  }
  if (!slot_count_valid(slot_count)) {
    return EM_PROTO_ERANGE;
  }
  uint8_t *h = mem;
  memset(h, 0, EM_RING_HEADER_BYTES);
  memcpy(h + HDR_OFF_MAGIC, ring_magic, sizeof ring_magic);
  put_le16(h + HDR_OFF_VERSION, EM_RING_VERSION);
  put_le16(h + HDR_OFF_HDR_SIZE, EM_RING_HEADER_BYTES);
  put_le16(h + HDR_OFF_SLOT_SIZE, EM_RING_SLOT_BYTES);
  put_le32(h + HDR_OFF_SLOTS, slot_count);
  put_le32(h + HDR_OFF_PID, pid);
  put_le32(h + HDR_OFF_TID, tid);
  put_le64(h + HDR_OFF_START_TIME, start_time);
  put_le32(h + HDR_OFF_STATE, EM_RING_STATE_OPEN);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  return 0;
}

/*
 * Validates the header from a private copy (the live one may change while it is read), in
 * WIRE.md's order. The head, lost and state fields are a snapshot.
 */
int em_ring_header_read(const void *mem, size_t len, em_ring_header_t *out) {
  if (mem == NULL || out == NULL || !aligned(mem)) {
    return EM_PROTO_EINVAL;
  }
  if (len < EM_RING_HEADER_BYTES) {
    return EM_PROTO_ESIZE;
  }
  uint8_t h[EM_RING_HEADER_BYTES];
  load_bytes_relaxed(h, mem, sizeof h);
  int head = check_page_head(h, ring_magic, sizeof ring_magic, HDR_OFF_VERSION, EM_RING_VERSION);
  if (head != 0) {
    return head;
  }
  uint32_t slots = get_le32(h + HDR_OFF_SLOTS);
  if (get_le16(h + HDR_OFF_HDR_SIZE) != EM_RING_HEADER_BYTES ||
      get_le16(h + HDR_OFF_SLOT_SIZE) != EM_RING_SLOT_BYTES) {
    return EM_PROTO_ESIZE;
  }
  if (!slot_count_valid(slots)) {
    return EM_PROTO_ERANGE;
  }
  if (len != em_ring_bytes(slots)) {
    return EM_PROTO_ESIZE;
  }
  uint32_t state = get_le32(h + HDR_OFF_STATE);
  if (get_le16(h + HDR_OFF_RESERVED1) != 0 ||
      !all_zero(h + HDR_OFF_RESERVED2, EM_RING_HEADER_BYTES - HDR_OFF_RESERVED2) ||
      (state != EM_RING_STATE_OPEN && state != EM_RING_STATE_CLOSED)) {
    return EM_PROTO_ERANGE;
  }
  *out = (em_ring_header_t){
      .slot_count = slots,
      .pid = get_le32(h + HDR_OFF_PID),
      .tid = get_le32(h + HDR_OFF_TID),
      .start_time = get_le64(h + HDR_OFF_START_TIME),
      .head = le64toh(__atomic_load_n(head_word_const(mem), __ATOMIC_ACQUIRE)),
      .lost = get_le64(h + HDR_OFF_LOST),
      .state = state,
  };
  return 0;
}

/* ---- Writer ---- */

/* Packs a span or heartbeat into a 64-byte slot image for position pos. */
static int pack_slot(const em_span_t *span, uint64_t pos, uint8_t slot[EM_RING_SLOT_BYTES]) {
  if (span->kind != EM_DGRAM_SPAN && span->kind != EM_DGRAM_HEARTBEAT) {
    return EM_PROTO_EKIND;
  }
  if (!em_stage_name_valid(span->stage)) {
    return EM_PROTO_ESTRING;
  }
  memset(slot, 0, EM_RING_SLOT_BYTES);
  put_le32(slot + SLOT_OFF_SEQ, (uint32_t)(pos + 1u));
  slot[SLOT_OFF_KIND] = (uint8_t)span->kind;
  put_le64(slot + SLOT_OFF_FRAME, span->frame_id);
  put_le64(slot + SLOT_OFF_START, span->start_ns);
  put_le64(slot + SLOT_OFF_DURATION, span->kind == EM_DGRAM_SPAN ? span->duration_ns : 0u);
  pack_text(slot + SLOT_OFF_STAGE, EM_STAGE_FIELD_BYTES, span->stage);
  return 0;
}

int em_ring_write(void *mem, uint32_t slot_count, uint64_t *pos, const em_span_t *span) {
  if (mem == NULL || pos == NULL || span == NULL || !aligned(mem) ||
      !slot_count_valid(slot_count)) {
    return EM_PROTO_EINVAL;
  }
  uint8_t slot[EM_RING_SLOT_BYTES];
  int rc = pack_slot(span, *pos, slot);
  if (rc != 0) {
    return rc;
  }
  uint8_t *dst = (uint8_t *)mem + EM_RING_HEADER_BYTES +
                 (size_t)(*pos & (slot_count - 1u)) * EM_RING_SLOT_BYTES;
  /* Orders the previous write's head store before this slot's stores, so a reader whose copy
   * saw any byte of this write also sees a head of at least *pos afterwards (its acquire
   * fence pairs with this one): the overwritten check after the copy is then exact. */
  __atomic_thread_fence(__ATOMIC_RELEASE);
  store_bytes_relaxed(dst, slot, sizeof slot);
  *pos += 1u;
  __atomic_store_n(head_word(mem), htole64(*pos), __ATOMIC_RELEASE);
  return 0;
}

void em_ring_close(void *mem) {
  if (mem == NULL) {
    return;
  }
  uint8_t state[4];
  put_le32(state, EM_RING_STATE_CLOSED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  store_bytes_relaxed((uint8_t *)mem + HDR_OFF_STATE, state, sizeof state);
}

/* ---- Reader ---- */

int em_ring_reader_init(em_ring_reader_t *r, uint32_t slot_count, uint64_t start) {
  if (r == NULL) {
    return EM_PROTO_EINVAL;
  }
  if (!slot_count_valid(slot_count)) {
    return EM_PROTO_ERANGE;
  }
  memset(r, 0, sizeof(*r));
  r->slot_count = slot_count;
  r->next = start;
  r->seen = start;
  return 0;
}

/* A slot copy that is valid for position pos, unpacked into *out; false when it is not. */
static bool unpack_slot(const uint8_t *slot, uint64_t pos, em_span_t *out) {
  if (get_le32(slot + SLOT_OFF_SEQ) != (uint32_t)(pos + 1u)) {
    return false;
  }
  uint8_t kind = slot[SLOT_OFF_KIND];
  if ((kind != EM_DGRAM_SPAN && kind != EM_DGRAM_HEARTBEAT) ||
      !all_zero(slot + SLOT_OFF_RESERVED, SLOT_OFF_FRAME - SLOT_OFF_RESERVED)) {
    return false;
  }
  if (unpack_text(slot + SLOT_OFF_STAGE, EM_STAGE_FIELD_BYTES, TEXT_STAGE, out->stage) != 0) {
    return false;
  }
  out->kind = (em_dgram_kind_t)kind;
  out->pid = 0;
  out->frame_id = get_le64(slot + SLOT_OFF_FRAME);
  out->start_ns = get_le64(slot + SLOT_OFF_START);
  out->duration_ns = get_le64(slot + SLOT_OFF_DURATION);
  return true;
}

size_t em_ring_reader_drain(em_ring_reader_t *r, const void *mem, bool final, em_ring_span_fn fn,
                            void *ctx) {
  if (r == NULL || mem == NULL || !aligned(mem) || !slot_count_valid(r->slot_count)) {
    return 0;
  }
  const uint64_t n = r->slot_count;
  const uint8_t *slots = (const uint8_t *)mem + EM_RING_HEADER_BYTES;
  uint64_t h = le64toh(__atomic_load_n(head_word_const(mem), __ATOMIC_ACQUIRE));
  if (h < r->seen || h - r->seen > ((uint64_t)1 << 32) || r->next > r->seen) {
    /* Scribbled: the positions published before (next..seen) are given up, counted, and
     * reading resynchronises at the head read now. */
    r->counts.bad_head++;
    if (r->seen > r->next) {
      r->counts.skipped += r->seen - r->next;
    }
    r->next = h;
    r->seen = h;
    return 0;
  }
  uint64_t limit = final ? h : r->seen;
  if (limit - r->next > n) {
    r->counts.overwritten += limit - n - r->next;
    r->next = limit - n;
  }
  size_t folded = 0;
  while (r->next < limit) {
    uint64_t first = r->next;
    uint64_t count = limit - first < EM_RING_BATCH ? limit - first : EM_RING_BATCH;
    for (uint64_t i = 0; i < count; i++) {
      uint64_t q = first + i;
      load_words_relaxed(r->batch + i * EM_RING_SLOT_BYTES,
                         slots + (q & (n - 1u)) * EM_RING_SLOT_BYTES, EM_RING_SLOT_BYTES);
    }
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    uint64_t h2 = le64toh(__atomic_load_n(head_word_const(mem), __ATOMIC_ACQUIRE));
    for (uint64_t i = 0; i < count; i++) {
      uint64_t q = first + i;
      em_span_t span;
      if (!final && h2 >= h && q + n <= h2 + 1u) {
        r->counts.overwritten++;
      } else if (!unpack_slot(r->batch + i * EM_RING_SLOT_BYTES, q, &span)) {
        r->counts.bad_slot++;
      } else {
        r->counts.folded++;
        folded++;
        if (fn != NULL) {
          fn(ctx, &span);
        }
      }
    }
    r->next = first + count;
  }
  r->seen = h;
  return folded;
}

/* ---- v2 datagrams ---- */

static bool is_v2_kind(int kind) {
  return kind == EM_DGRAM_RING_REGISTER || kind == EM_DGRAM_HARD_MISS || kind == EM_DGRAM_RING_ACK;
}

int em_ring_dgram_pack(const em_ring_dgram_t *d, uint8_t out[EM_SPAN_DGRAM_BYTES]) {
  if (d == NULL || out == NULL) {
    return EM_PROTO_EINVAL;
  }
  if (!is_v2_kind(d->kind)) {
    return EM_PROTO_EKIND;
  }
  if (d->kind == EM_DGRAM_HARD_MISS && !em_stage_name_valid(d->span.stage)) {
    return EM_PROTO_ESTRING;
  }
  memset(out, 0, EM_SPAN_DGRAM_BYTES);
  put_dgram_head(out, EM_RING_DGRAM_VERSION, d->kind);
  put_le32(out + DG_OFF_PID, d->pid);
  if (d->kind == EM_DGRAM_HARD_MISS) {
    put_le64(out + DG_OFF_A, d->span.frame_id);
    put_le64(out + DG_OFF_B, d->span.start_ns);
    put_le64(out + DG_OFF_C, d->span.duration_ns);
    pack_text(out + DG_OFF_STAGE, EM_STAGE_FIELD_BYTES, d->span.stage);
    return 0;
  }
  put_le64(out + DG_OFF_A, d->start);
  if (d->kind == EM_DGRAM_RING_ACK) {
    put_le64(out + DG_OFF_B, (uint64_t)d->status);
    put_le64(out + DG_OFF_C, d->ring_id);
  }
  return 0;
}

int em_ring_dgram_unpack(const uint8_t *buf, size_t len, em_ring_dgram_t *out) {
  int head = check_dgram_head(buf, out, len, EM_SPAN_DGRAM_BYTES, EM_SPAN_DGRAM_BYTES,
                              EM_RING_DGRAM_VERSION, ANY_KIND);
  if (head != 0) {
    return head;
  }
  int kind = buf[DG_OFF_KIND];
  if (!is_v2_kind(kind)) {
    return EM_PROTO_EKIND;
  }
  em_ring_dgram_t d = {.kind = (uint8_t)kind, .pid = get_le32(buf + DG_OFF_PID)};
  if (kind == EM_DGRAM_HARD_MISS) {
    int rc = unpack_text(buf + DG_OFF_STAGE, EM_STAGE_FIELD_BYTES, TEXT_STAGE, d.span.stage);
    if (rc != 0) {
      return rc;
    }
    d.span.kind = EM_DGRAM_SPAN;
    d.span.pid = d.pid;
    d.span.frame_id = get_le64(buf + DG_OFF_A);
    d.span.start_ns = get_le64(buf + DG_OFF_B);
    d.span.duration_ns = get_le64(buf + DG_OFF_C);
    *out = d;
    return 0;
  }
  if (!all_zero(buf + DG_OFF_STAGE, EM_STAGE_FIELD_BYTES)) {
    return EM_PROTO_ERANGE;
  }
  d.start = get_le64(buf + DG_OFF_A);
  if (kind == EM_DGRAM_RING_REGISTER) {
    if (!all_zero(buf + DG_OFF_B, DG_OFF_STAGE - DG_OFF_B)) {
      return EM_PROTO_ERANGE;
    }
  } else {
    d.status = (int64_t)get_le64(buf + DG_OFF_B);
    d.ring_id = get_le64(buf + DG_OFF_C);
  }
  *out = d;
  return 0;
}

/* ---- Deadline page (single-writer seqlock, like the state page) ---- */

static uint32_t *dl_seq(uint8_t *page) {
  return (uint32_t *)(void *)(page + DL_OFF_SEQ);
}

static const uint32_t *dl_seq_const(const uint8_t *page) {
  return (const uint32_t *)(const void *)(page + DL_OFF_SEQ);
}

int em_deadline_page_init(uint8_t *page, uint32_t agent_pid, uint32_t ring_slots) {
  if (page == NULL || !aligned(page)) {
    return EM_PROTO_EINVAL;
  }
  memset(page, 0, EM_DEADLINE_PAGE_BYTES);
  memcpy(page + DL_OFF_MAGIC, deadline_magic, sizeof deadline_magic);
  put_le16(page + DL_OFF_VERSION, EM_DEADLINE_PAGE_VERSION);
  put_le32(page + DL_OFF_PID, agent_pid);
  put_le32(page + DL_OFF_SLOTS, ring_slots);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  return 0;
}

int em_deadline_page_write(uint8_t *page, const em_deadline_t *entries, size_t n) {
  if (page == NULL || !aligned(page) || (n > 0 && entries == NULL)) {
    return EM_PROTO_EINVAL;
  }
  if (n > EM_DEADLINE_MAX_ENTRIES) {
    return EM_PROTO_ELIMIT;
  }
  uint8_t body[EM_DEADLINE_MAX_ENTRIES * DL_ENTRY_BYTES];
  memset(body, 0, sizeof body);
  for (size_t i = 0; i < n; i++) {
    if (!em_stage_name_valid(entries[i].stage)) {
      return EM_PROTO_ESTRING;
    }
    pack_text(body + i * DL_ENTRY_BYTES, EM_STAGE_FIELD_BYTES, entries[i].stage);
    put_le64(body + i * DL_ENTRY_BYTES + DL_ENTRY_DEADLN, entries[i].deadline_ns);
  }
  uint8_t count[2];
  put_le16(count, (uint16_t)n);
  uint32_t *seq = dl_seq(page);
  uint32_t start = le32toh(__atomic_load_n(seq, __ATOMIC_RELAXED));
  __atomic_store_n(seq, htole32(start + 1u), __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  store_bytes_relaxed(page + DL_OFF_COUNT, count, sizeof count);
  store_bytes_relaxed(page + DL_OFF_ENTRIES, body, sizeof body);
  __atomic_store_n(seq, htole32(start + 2u), __ATOMIC_RELEASE);
  return 0;
}

void em_deadline_page_set_ring_slots(uint8_t *page, uint32_t ring_slots) {
  if (page == NULL || !aligned(page)) {
    return;
  }
  uint8_t le[4];
  put_le32(le, ring_slots);
  store_bytes_relaxed(page + DL_OFF_SLOTS, le, sizeof le);
}

int em_deadline_page_read(const uint8_t *page, em_deadline_t *out, size_t *n, uint32_t *ring_slots,
                          uint32_t *seq_out) {
  if (page == NULL || out == NULL || n == NULL || !aligned(page)) {
    return EM_PROTO_EINVAL;
  }
  int head = check_page_head(page, deadline_magic, sizeof deadline_magic, DL_OFF_VERSION,
                             EM_DEADLINE_PAGE_VERSION);
  if (head != 0) {
    return head;
  }
  const uint32_t *seq = dl_seq_const(page);
  uint8_t count[2];
  uint8_t body[EM_DEADLINE_MAX_ENTRIES * DL_ENTRY_BYTES];
  for (unsigned attempt = 0; attempt < DL_READ_TRIES; attempt++) {
    uint32_t s1 = le32toh(__atomic_load_n(seq, __ATOMIC_ACQUIRE));
    if ((s1 & 1u) != 0) {
      continue;
    }
    load_bytes_relaxed(count, page + DL_OFF_COUNT, sizeof count);
    load_bytes_relaxed(body, page + DL_OFF_ENTRIES, sizeof body);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (le32toh(__atomic_load_n(seq, __ATOMIC_RELAXED)) != s1) {
      continue;
    }
    uint16_t k = get_le16(count);
    if (k > EM_DEADLINE_MAX_ENTRIES ||
        !all_zero(page + DL_OFF_RESERVED, DL_OFF_ENTRIES - DL_OFF_RESERVED)) {
      return EM_PROTO_ERANGE;
    }
    for (size_t i = 0; i < k; i++) {
      int rc =
          unpack_text(body + i * DL_ENTRY_BYTES, EM_STAGE_FIELD_BYTES, TEXT_STAGE, out[i].stage);
      if (rc != 0) {
        return rc;
      }
      out[i].deadline_ns = get_le64(body + i * DL_ENTRY_BYTES + DL_ENTRY_DEADLN);
    }
    *n = k;
    if (ring_slots != NULL) {
      *ring_slots = get_le32(page + DL_OFF_SLOTS);
    }
    if (seq_out != NULL) {
      *seq_out = s1;
    }
    return 0;
  }
  return EM_PROTO_EBUSY;
}
