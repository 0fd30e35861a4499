/*
 * fuzz_recording.c - libFuzzer harness over the recording framing (host/lib/recording.c).
 *
 * Two views of the same bytes. First em_rec_parse() walks the input as a run of records (no
 * file header), checking that every accepted record lies inside the buffer and that its
 * fields agree with its size. Then the bytes go to an in-memory file (memfd) read with the
 * file reader, which must stop with a clean end or an error code and never report a record
 * past the end of the file. Seeds: tests/fuzz/corpus/recording/ (small valid recordings and
 * bare records).
 */
#define _GNU_SOURCE /* memfd_create */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "recording.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
    em_rec_entry_t e;
    int rc = em_rec_read(r, &e);
    for (; rc == 1; rc = em_rec_read(r, &e)) {
      uint64_t end = em_rec_offset(r) + 20 + e.topic_len + e.payload_len;
      if (end > size || e.topic[e.topic_len] != '\0') {
        abort();
      }
    }
    if (rc != 0 && em_rec_read(r, &e) != rc) {
      abort(); /* Errors are sticky. */
    }
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
  return 0;
}
