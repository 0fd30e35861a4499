/*
 * fuzz_ring.c - libFuzzer harness for the span ring v2 reader, the v2 datagrams and the
 * deadline page (proto/src/ring.c).
 *
 * Input layout: byte 0 picks the slot count the reader was registered with (64, 128, 256, 512
 * or 1024; what the ring's header claims is not trusted), bytes 1..8 the registration's start
 * position, the next bytes (up to the ring's size) are the ring's memory, and the rest is a
 * program of drains (final or not) and mutations between them: head set, moved or written by
 * the real writer, slot and header bytes scribbled. After every drain the harness checks what
 * WIRE.md promises: the positions the reader classified are exactly folded + overwritten +
 * bad_slot (or, after a bad head, nothing but the skipped count moved and reading resyncs at
 * head), no more than slot_count spans are handed on per call and each is a valid span.
 *
 * The same bytes are also unpacked as a v2 datagram (what unpacks packs back to the same 64
 * bytes) and read as a deadline page (what reads writes back and reads the same).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "edgemon/ring.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_SLOTS 1024u
#define MAX_OPS   256u

typedef struct {
  const uint8_t *p;
  size_t left;
} cursor_t;

static uint64_t take(cursor_t *c, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n && c->left > 0; i++) {
    v |= (uint64_t)*c->p << (8 * i);
    c->p++;
    c->left--;
  }
  return v;
}

static uint64_t get_head(const uint8_t *mem) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) {
    v = (v << 8) | mem[32 + i];
  }
  return v;
}

static void set_head(uint8_t *mem, uint64_t v) {
  for (int i = 0; i < 8; i++) {
    mem[32 + i] = (uint8_t)(v >> (8 * i));
  }
}

typedef struct {
  size_t calls;
} fold_t;

static void on_span(void *ctx, const em_span_t *span) {
  fold_t *f = ctx;
  f->calls++;
  if ((span->kind != EM_DGRAM_SPAN && span->kind != EM_DGRAM_HEARTBEAT) ||
      !em_stage_name_valid(span->stage)) {
    abort();
  }
}

/* One drain, checked against WIRE.md's accounting. */
static void checked_drain(em_ring_reader_t *r, const uint8_t *mem, bool final) {
  const em_ring_reader_t before = *r;
  fold_t f = {0};
  size_t ret = em_ring_reader_drain(r, mem, final, on_span, &f);
  const em_ring_counts_t *a = &before.counts, *b = &r->counts;
  uint64_t d_folded = b->folded - a->folded;
  uint64_t d_over = b->overwritten - a->overwritten;
  uint64_t d_bad = b->bad_slot - a->bad_slot;
  uint64_t head = get_head(mem);
  if (ret != f.calls || ret != d_folded || f.calls > r->slot_count) {
    abort();
  }
  if (d_folded + d_bad > r->slot_count) { /* Positions looked at in this call. */
    abort();
  }
  if (r->seen != head) {
    abort();
  }
  if (b->bad_head != a->bad_head) {
    uint64_t gap = before.seen > before.next ? before.seen - before.next : 0;
    if (b->bad_head != a->bad_head + 1 || d_folded != 0 || d_over != 0 || d_bad != 0 ||
        b->skipped - a->skipped != gap || r->next != head) {
      abort();
    }
    return;
  }
  if (b->skipped != a->skipped || d_folded + d_over + d_bad != r->next - before.next) {
    abort();
  }
  if (r->next != (final ? head : before.seen)) {
    abort();
  }
}

static void fuzz_ring(const uint8_t *data, size_t size) {
  static uint8_t mem[EM_RING_HEADER_BYTES + MAX_SLOTS * EM_RING_SLOT_BYTES]
      __attribute__((aligned(8)));
  cursor_t c = {data, size};
  const uint32_t slots = EM_RING_MIN_SLOTS << (take(&c, 1) % 5);
  const uint64_t start = take(&c, 8);
  const size_t len = em_ring_bytes(slots);
  memset(mem, 0, sizeof mem);
  size_t n = c.left < len ? c.left : len;
  memcpy(mem, c.p, n);
  c.p += n;
  c.left -= n;

  em_ring_header_t h;
  (void)em_ring_header_read(mem, len, &h);

  em_ring_reader_t r;
  if (em_ring_reader_init(&r, slots, start) != 0) {
    abort();
  }
  uint64_t pos = get_head(mem); /* The writer's own position, as it left it. */
  for (unsigned op = 0; op < MAX_OPS && c.left > 0; op++) {
    switch (take(&c, 1) % 8) {
    case 0:
      checked_drain(&r, mem, false);
      break;
    case 1:
      checked_drain(&r, mem, true);
      break;
    case 2: /* The writer moves on: a few real spans. */
    {
      unsigned k = (unsigned)take(&c, 2) % (4u * slots);
      for (unsigned i = 0; i < k; i++) {
        em_span_t s = {.kind = (i & 1) ? EM_DGRAM_HEARTBEAT : EM_DGRAM_SPAN,
                       .frame_id = pos + 1,
                       .start_ns = i,
                       .duration_ns = i,
                       .stage = "infer"};
        if (em_ring_write(mem, slots, &pos, &s) != 0) {
          abort();
        }
      }
      break;
    }
    case 3:
      set_head(mem, get_head(mem) + take(&c, 2));
      break;
    case 4:
      set_head(mem, get_head(mem) - take(&c, 2));
      break;
    case 5:
      set_head(mem, take(&c, 8));
      break;
    case 6: {
      size_t at = (size_t)take(&c, 2) % len;
      mem[at] = (uint8_t)take(&c, 1);
      break;
    }
    default:
      pos = get_head(mem); /* A writer that restarts from what the ring says. */
      break;
    }
  }
  checked_drain(&r, mem, false);
  checked_drain(&r, mem, false);
  checked_drain(&r, mem, true);
}

static void fuzz_dgram(const uint8_t *data, size_t size) {
  em_ring_dgram_t d;
  if (em_ring_dgram_unpack(data, size, &d) == 0 && size != EM_SPAN_DGRAM_BYTES) {
    abort();
  }
  if (size < EM_SPAN_DGRAM_BYTES) {
    return;
  }
  if (em_ring_dgram_unpack(data, EM_SPAN_DGRAM_BYTES, &d) == 0) {
    uint8_t out[EM_SPAN_DGRAM_BYTES];
    if (em_ring_dgram_pack(&d, out) != 0 || memcmp(out, data, sizeof out) != 0) {
      abort();
    }
  }
}

static void fuzz_deadline_page(const uint8_t *data, size_t size) {
  static uint8_t page[EM_DEADLINE_PAGE_BYTES] __attribute__((aligned(8)));
  static uint8_t again[EM_DEADLINE_PAGE_BYTES] __attribute__((aligned(8)));
  static em_deadline_t out[EM_DEADLINE_MAX_ENTRIES], back[EM_DEADLINE_MAX_ENTRIES];
  memset(page, 0, sizeof page);
  memcpy(page, data, size < sizeof page ? size : sizeof page);
  size_t n = 0, m = 0;
  uint32_t slots = 0, seq = 0;
  if (em_deadline_page_read(page, out, &n, &slots, &seq) != 0) {
    return;
  }
  if (n > EM_DEADLINE_MAX_ENTRIES || (seq & 1u) != 0) {
    abort();
  }
  if (em_deadline_page_init(again, 1, slots) != 0 || em_deadline_page_write(again, out, n) != 0 ||
      em_deadline_page_read(again, back, &m, &slots, &seq) != 0 || m != n || seq != 2) {
    abort();
  }
  for (size_t i = 0; i < n; i++) {
    if (memcmp(out[i].stage, back[i].stage, sizeof out[i].stage) != 0 ||
        out[i].deadline_ns != back[i].deadline_ns) {
      abort();
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_ring(data, size);
  fuzz_dgram(data, size);
  fuzz_deadline_page(data, size);
  return 0;
}
