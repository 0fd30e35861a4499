/*
 * bench_ring_drain.c - what the agent's ring drain costs per span: a 1024-slot span ring v2
 * (proto/WIRE.md) in this process, 30 spans written (one 100 ms tick of a 100 fps x 3-stage
 * pipeline) then drained with em_ring_reader_drain, --rounds times. Prints ns per span written
 * and per span drained. Under `valgrind --tool=callgrind` the inclusive Ir of
 * em_ring_reader_drain divided by the spans it folded is its instructions per span.
 *
 *   bench_ring_drain [--rounds N]     (default 200000)
 */
#define _POSIX_C_SOURCE 200809L

#include "edgemon/ring.h"
#include "bench_clock.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLOTS    1024u
#define PER_TICK 30u

static void fold(void *ctx, const em_span_t *span) {
  *(uint64_t *)ctx += span->duration_ns;
}

int main(int argc, char **argv) {
  long rounds = 200000;
  if (argc == 3 && strcmp(argv[1], "--rounds") == 0) {
    char *end;
    rounds = strtol(argv[2], &end, 10);
    if (*argv[2] == '\0' || *end != '\0' || rounds < 1 || rounds > 100000000) {
      fprintf(stderr, "bench_ring_drain: --rounds needs 1..100000000, not '%s'\n", argv[2]);
      return 2;
    }
  } else if (argc != 1) {
    fprintf(stderr, "usage: %s [--rounds N]\n", argv[0]);
    return 2;
  }
  uint8_t *mem = aligned_alloc(4096, em_ring_bytes(SLOTS));
  em_ring_reader_t r;
  if (mem == NULL || em_ring_init(mem, SLOTS, 1, 1, 1) != 0 ||
      em_ring_reader_init(&r, SLOTS, 0) != 0) {
    fprintf(stderr, "bench_ring_drain: cannot set up the ring\n");
    return 1;
  }
  em_span_t s = {.kind = EM_DGRAM_SPAN, .frame_id = 1, .start_ns = 5, .duration_ns = 500000};
  strcpy(s.stage, "preprocess");
  uint64_t pos = 0, sum = 0, write_ns = 0, drain_ns = 0;
  size_t folded = 0;
  for (long i = 0; i < rounds; i++) {
    uint64_t t0 = bench_now_ns();
    for (unsigned k = 0; k < PER_TICK; k++) {
      if (em_ring_write(mem, SLOTS, &pos, &s) != 0) {
        fprintf(stderr, "bench_ring_drain: write refused\n");
        return 1;
      }
    }
    uint64_t t1 = bench_now_ns();
    folded += em_ring_reader_drain(&r, mem, false, fold, &sum);
    write_ns += t1 - t0;
    drain_ns += bench_now_ns() - t1;
  }
  /* The previous-head rule leaves the last tick's spans for the next drain. */
  printf("%zu spans folded of %llu written (%llu overwritten, %llu bad); %.1f ns per span "
         "written, %.1f ns per span drained\n",
         folded, (unsigned long long)pos, (unsigned long long)r.counts.overwritten,
         (unsigned long long)r.counts.bad_slot, (double)write_ns / (double)pos,
         folded ? (double)drain_ns / (double)folded : 0.0);
  free(mem);
  return sum == 0 && folded > 0 ? 1 : 0;
}
