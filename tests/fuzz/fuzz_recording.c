/*
 * fuzz_recording.c - libFuzzer harness over the recording framing (host/lib/recording.c).
 *
 * Two views of the same bytes. First em_rec_parse() walks the input as a run of records (no
 * file header), checking that every accepted record lies inside the buffer and that its
 * fields agree with its size. Then the bytes go to an in-memory file (memfd) read with the
 * file reader, which must stop with a clean end or an error code and never report a record
 * past the end of the file. Last, replay pacing (em_rec_pace_next(), what `edgemon-cli replay`
 * waits between records): the time stamps of the records read, under a few fixed rates and caps,
 * and the raw input as a rate, a cap and a run of u64 time stamps (any bits: NaN, infinite,
 * negative and subnormal rates, jumps of 2^64 ns, steps back). Offsets must never decrease,
 * grow by at most the cap, and never wait at rate 0; UBSan catches a conversion out of range.
 * Seeds: tests/fuzz/corpus/recording/ (small valid recordings, bare records, pacing inputs).
 */
#define _GNU_SOURCE /* memfd_create */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "recording.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Time stamps paced per input: the records of a recording, or u64 words of the raw input. */
#define PACE_MAX_TIMES 512u

static uint64_t le64(const uint8_t *p) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; i++) {
    v |= (uint64_t)p[i] << (8 * i);
  }
  return v;
}

/* Paces times[0..n) and checks what em_rec_pace_next() promises. */
static void pace_check(double rate, uint64_t max_gap_ns, const uint64_t *times, size_t n) {
  em_rec_pace_t p;
  em_rec_pace_init(&p, rate, max_gap_ns);
  uint64_t prev = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t due = em_rec_pace_next(&p, times[i]);
    if (i == 0 && due != 0) {
      abort();
    }
    if (due < prev || (due - prev > max_gap_ns && prev != UINT64_MAX)) {
      abort();
    }
    if (!(rate > 0) && due != 0) {
      abort();
    }
    if (p.clamped && due - prev != max_gap_ns && due != UINT64_MAX) {
      abort();
    }
    prev = due;
  }
}

/* The fixed rates and caps replay meets: its defaults, extremes of --rate, --max-gap 0. */
static void pace_fixed(const uint64_t *times, size_t n) {
  static const struct {
    double rate;
    uint64_t max_gap_ns;
  } modes[] = {
      {1.0, 60000000000ull},       {0.5, 60000000000ull},
      {1e7, 10000000000000000ull}, {1e-9, 10000000000000000ull},
      {0.0, 60000000000ull},       {1.0, 0},
      {1.0, UINT64_MAX},
  };
  for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
    pace_check(modes[m].rate, modes[m].max_gap_ns, times, n);
  }
}

/* The raw input as a pacing run: rate (a double's bits), cap, then time stamps. */
static void pace_raw(const uint8_t *data, size_t size) {
  if (size < 16) {
    return;
  }
  double rate;
  uint64_t bits = le64(data);
  memcpy(&rate, &bits, sizeof(rate));
  uint64_t max_gap_ns = le64(data + 8);
  uint64_t times[PACE_MAX_TIMES];
  size_t n = 0;
  for (size_t at = 16; at + 8 <= size && n < PACE_MAX_TIMES; at += 8) {
    times[n++] = le64(data + at);
  }
  pace_check(rate, max_gap_ns, times, n);
  pace_fixed(times, n);
}

static void walk_records(const uint8_t *data, size_t size) {
  size_t at = 0;
  for (;;) {
    em_rec_entry_t e;
    long n = em_rec_parse(data + at, size - at, &e);
    if (n <= 0) {
      if (n == 0 && at != size) {
        abort();
      }
      return;
    }
    if ((size_t)n > size - at || (size_t)n != 20 + e.topic_len + e.payload_len) {
      abort();
    }
    if (e.topic_len == 0 || e.topic_len > EM_REC_MAX_TOPIC || e.payload_len > EM_REC_MAX_PAYLOAD) {
      abort();
    }
    if ((const uint8_t *)e.topic != data + at + 16 || e.payload != data + at + 16 + e.topic_len) {
      abort();
    }
    at += (size_t)n;
  }
}

static void read_as_file(const uint8_t *data, size_t size) {
  int fd = memfd_create("fuzz_recording", 0);
  if (fd < 0) {
    return;
  }
  if (size > 0 && write(fd, data, size) != (ssize_t)size) {
    close(fd);
    return;
  }
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  em_rec_reader_t *r = NULL;
  if (em_rec_reader_new(&r, path) == 0) {
    uint64_t times[PACE_MAX_TIMES];
    size_t n = 0;
    em_rec_entry_t e;
    int rc = em_rec_read(r, &e);
    for (; rc == 1; rc = em_rec_read(r, &e)) {
      if (n < PACE_MAX_TIMES) {
        times[n++] = e.recv_time_ns;
      }
      uint64_t end = em_rec_offset(r) + 20 + e.topic_len + e.payload_len;
      if (end > size || e.topic[e.topic_len] != '\0') {
        abort();
      }
    }
    if (rc != 0 && em_rec_read(r, &e) != rc) {
      abort(); /* Errors are sticky. */
    }
    pace_fixed(times, n); /* What replay does with the records it publishes. */
    em_rec_reader_free(r);
  }
  close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  walk_records(data, size);
  /* The file header in front: the records start after it. */
  if (size >= EM_REC_HEADER_SIZE) {
    walk_records(data + EM_REC_HEADER_SIZE, size - EM_REC_HEADER_SIZE);
  }
  read_as_file(data, size);
  pace_raw(data, size);
  return 0;
}
