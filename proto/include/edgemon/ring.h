/*
 * edgemon/ring.h - span ring v2: the shared-memory ring a writer thread of the inference
 * process fills with spans and the agent drains on its tick, the three v2 datagrams that
 * register a ring, acknowledge it and report a hard miss, and the deadline page. proto/WIRE.md
 * ("Span ring v2", "Deadline page v1") documents every byte; this header mirrors it.
 *
 * The reader (em_ring_reader_*) is written for memory another process can write at any
 * moment: it never parses a live slot (each batch is copied first), bounds every loop by the
 * slot count it was given at registration (never by what the header says now), and classifies
 * every position exactly once, as folded, overwritten or bad.
 *
 * Ownership: all buffers are the caller's; nothing allocates. Threading: a ring has one writer
 * (em_ring_write) and one reader (one em_ring_reader_t); the deadline page is a single-writer
 * seqlock like the state page. The header compiles on its own, as C11 and as C++.
 */
#ifndef EDGEMON_RING_H
#define EDGEMON_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "edgemon/proto.h"
#include "edgemon/wire.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EM_RING_VERSION       2
#define EM_RING_HEADER_BYTES  128u
#define EM_RING_SLOT_BYTES    64u
#define EM_RING_MIN_SLOTS     64u
#define EM_RING_MAX_SLOTS     65536u
#define EM_RING_DEFAULT_SLOTS 1024u
#define EM_RING_BATCH         64u /* Slots copied per batch by the reader. */
#define EM_RING_STATE_OPEN    1u
#define EM_RING_STATE_CLOSED  2u

/* The v2 datagrams (64 bytes, version 2) on the span socket. */
#define EM_RING_DGRAM_VERSION  2
#define EM_DGRAM_RING_REGISTER 5  /* client -> agent, carries the ring's fd (SCM_RIGHTS) */
#define EM_DGRAM_HARD_MISS     6  /* client -> agent, a ring span over its hard deadline */
#define EM_DGRAM_RING_ACK      17 /* agent -> client, the registration's status */

/* Deadline page v1. */
#define EM_DEADLINE_PAGE_VERSION 1
#define EM_DEADLINE_MAX_ENTRIES  64u
#define EM_DEADLINE_PAGE_BYTES   (64u + EM_DEADLINE_MAX_ENTRIES * 40u) /* 2624 */

/* Bytes of a ring of `slot_count` slots (header included). */
static inline size_t em_ring_bytes(uint32_t slot_count) {
  return (size_t)EM_RING_HEADER_BYTES + (size_t)slot_count * EM_RING_SLOT_BYTES;
}

/* The header's fields (what em_ring_header_read() returns; head/lost/state are a snapshot). */
typedef struct {
  uint32_t slot_count;
  uint32_t pid;
  uint32_t tid;
  uint64_t start_time; /* /proc/<pid>/stat field 22, clock ticks after boot. */
  uint64_t head;
  uint64_t lost;
  uint32_t state; /* EM_RING_STATE_OPEN or _CLOSED. */
} em_ring_header_t;

/*
 * Formats a fresh ring in mem[0..em_ring_bytes(slot_count)) (8-byte aligned, zeroed slots):
 * header with head 0, state open. Returns 0, EM_PROTO_EINVAL (NULL, misaligned) or
 * EM_PROTO_ERANGE (slot_count not a power of two in EM_RING_MIN_SLOTS..EM_RING_MAX_SLOTS).
 */
EM_PROTO_MUST_USE int em_ring_init(void *mem, uint32_t slot_count, uint32_t pid, uint32_t tid,
                                   uint64_t start_time);

/*
 * Reads and validates the header of a ring of `len` bytes, in this order: NULL or misaligned
 * (EINVAL), len shorter than a header (ESIZE), magic (EMAGIC), version (EVERSION), header and
 * slot sizes (ESIZE), slot_count (ERANGE), len == em_ring_bytes(slot_count) (ESIZE), reserved
 * bytes 0 and state 1 or 2 (ERANGE). Returns 0 and *out.
 */
EM_PROTO_MUST_USE int em_ring_header_read(const void *mem, size_t len, em_ring_header_t *out);

/*
 * The writer: writes one span or heartbeat (span->kind EM_DGRAM_SPAN or EM_DGRAM_HEARTBEAT) at
 * position *pos, then publishes head = *pos + 1 with a release store and advances *pos. The
 * position is the writer's own, never read back from the ring. Returns 0, EM_PROTO_EINVAL,
 * EM_PROTO_EKIND or EM_PROTO_ESTRING (nothing written).
 */
EM_PROTO_MUST_USE int em_ring_write(void *mem, uint32_t slot_count, uint64_t *pos,
                                    const em_span_t *span);

/* Marks the ring closed (the writer is done with it). */
void em_ring_close(void *mem);

/* Why positions were not folded in. */
typedef struct {
  uint64_t folded;      /* Valid slots handed to the callback. */
  uint64_t overwritten; /* Lapped by the writer before they were read, or while copied. */
  uint64_t bad_slot;    /* Wrong seq, kind, reserved bytes or stage field. */
  uint64_t bad_head;    /* Drains that found head backwards or jumped by more than 2^32. */
  uint64_t skipped;     /* Positions published before a bad head and never read. */
} em_ring_counts_t;

/* One reader per ring (the agent's). Plain data: the caller owns it. */
typedef struct {
  uint32_t slot_count; /* From registration; never re-read from the ring. */
  uint64_t next;       /* First position not classified yet. */
  uint64_t seen;       /* Head read on the previous drain. */
  em_ring_counts_t counts;
  uint8_t batch[EM_RING_BATCH * EM_RING_SLOT_BYTES]; /* Private copy of the slots read. */
} em_ring_reader_t;

/*
 * Starts reading a ring of slot_count slots at position `start` (the registration's).
 * Returns 0 or EM_PROTO_EINVAL / EM_PROTO_ERANGE.
 */
EM_PROTO_MUST_USE int em_ring_reader_init(em_ring_reader_t *r, uint32_t slot_count, uint64_t start);

/* Called for every valid slot, in position order. `span` is borrowed for the call. */
typedef void (*em_ring_span_fn)(void *ctx, const em_span_t *span);

/*
 * Drains the ring in mem[0..em_ring_bytes(r->slot_count)) as WIRE.md's "Reading" says: up to
 * the head seen on the previous drain, or up to the current head when `final` (the writer has
 * exited). Every position is classified exactly once into r->counts; at most slot_count
 * positions per call. Returns the number of spans handed to fn. mem must be 8-byte aligned (a
 * mapping is page-aligned); an unaligned mem drains nothing.
 */
size_t em_ring_reader_drain(em_ring_reader_t *r, const void *mem, bool final, em_ring_span_fn fn,
                            void *ctx);

/* A decoded v2 datagram (register, hard miss or ack). */
typedef struct {
  uint8_t kind;     /* EM_DGRAM_RING_REGISTER, EM_DGRAM_HARD_MISS or EM_DGRAM_RING_ACK. */
  uint32_t pid;     /* Sender's claim (register, miss) or the agent's pid (ack). */
  uint64_t start;   /* Register and ack: the position reading starts at. */
  int64_t status;   /* Ack: 0 accepted, else a negative errno. */
  uint64_t ring_id; /* Ack: the agent's id of the ring. */
  em_span_t span;   /* Hard miss: the span (kind EM_DGRAM_SPAN). */
} em_ring_dgram_t;

/*
 * Packs a v2 datagram into out[0..EM_SPAN_DGRAM_BYTES). Returns 0, EM_PROTO_EINVAL,
 * EM_PROTO_EKIND or EM_PROTO_ESTRING.
 */
EM_PROTO_MUST_USE int em_ring_dgram_pack(const em_ring_dgram_t *d,
                                         uint8_t out[EM_SPAN_DGRAM_BYTES]);

/*
 * Unpacks a v2 datagram of `len` bytes: ESIZE, EMAGIC, EVERSION (not 2), EKIND, ERANGE
 * (reserved bytes not 0), ESTRING (stage field). Returns 0 and *out.
 */
EM_PROTO_MUST_USE int em_ring_dgram_unpack(const uint8_t *buf, size_t len, em_ring_dgram_t *out);

/* One deadline page entry. */
typedef struct {
  char stage[EM_STAGE_FIELD_BYTES];
  uint64_t deadline_ns;
} em_deadline_t;

/* Formats a fresh deadline page (8-byte aligned, EM_DEADLINE_PAGE_BYTES) with no entries. */
EM_PROTO_MUST_USE int em_deadline_page_init(uint8_t *page, uint32_t agent_pid, uint32_t ring_slots);

/*
 * Publishes `n` entries (at most EM_DEADLINE_MAX_ENTRIES, valid stage names) through the
 * page's seqlock. Returns 0, EM_PROTO_EINVAL, EM_PROTO_ELIMIT or EM_PROTO_ESTRING.
 */
EM_PROTO_MUST_USE int em_deadline_page_write(uint8_t *page, const em_deadline_t *entries, size_t n);

/* Stores the slot count the agent suggests for new rings (informative, outside the seqlock). */
void em_deadline_page_set_ring_slots(uint8_t *page, uint32_t ring_slots);

/*
 * Reads a consistent copy of the entries (out[0..EM_DEADLINE_MAX_ENTRIES)) and sets *n,
 * *ring_slots and *seq_out. Returns 0, EM_PROTO_EBUSY, EMAGIC/EVERSION, ERANGE (count > 64 or
 * reserved bytes not 0), ESTRING.
 */
EM_PROTO_MUST_USE int em_deadline_page_read(const uint8_t *page, em_deadline_t *out, size_t *n,
                                            uint32_t *ring_slots, uint32_t *seq_out);

#ifdef __cplusplus
}
#endif

#endif /* EDGEMON_RING_H */
