/*
 * fuzz_spool.c - libFuzzer harness over the spool's reader (firmware/agent/transport/spool.c): the
 * recovery scan in em_spool_open() and the replay through em_spool_peek()/em_spool_pop().
 *
 * Each input is tried twice, as a file in a private directory made once (under /dev/shm, else
 * /tmp): first as the raw bytes of a spool file (header slots included), then as the ring of a
 * spool with a valid header (capacity EM_SPOOL_MIN_CAPACITY, done 0), so the record scanner sees
 * the bytes even though a mutated header rarely passes its CRC. After the open, everything pending
 * is drained; then the spool must behave as new: three known records (and two that wrap the ring)
 * come back in STATE-first order with their bytes, and a reopen finds nothing pending.
 * Seeds: tests/fuzz/corpus/spool/ (an empty spool, three records, a torn record, bare rings).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <edgemon/crc32c.h>

#include "spool.h"

#define CAP EM_SPOOL_MIN_CAPACITY

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];
static char path[96];
static uint8_t buf[CAP];

static void cleanup(void) {
  unlink(path);
  rmdir(dir);
}

static void check(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "fuzz_spool: %s\n", what);
    abort();
  }
}

static void put_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) {
    p[i] = (uint8_t)(v >> (8 * i));
  }
}

/* Writes head (hn bytes) then body (bn bytes) as the whole file, sized to at least min. */
static void write_file(const uint8_t *head, size_t hn, const uint8_t *body, size_t bn, size_t min) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  check(fd >= 0, "cannot create the spool file");
  check(hn == 0 || write(fd, head, hn) == (ssize_t)hn, "short write");
  check(bn == 0 || write(fd, body, bn) == (ssize_t)bn, "short write");
  if (hn + bn < min) {
    check(ftruncate(fd, (off_t)min) == 0, "ftruncate");
  }
  close(fd);
}

static em_spool_t *open_or_die(void) {
  em_spool_t *s = NULL;
  char err[256];
  check(em_spool_open(&s, path, CAP, err, sizeof(err)) == 0 && s != NULL, "open failed");
  return s;
}

/* Peeks and pops everything; every step must shrink what is pending. */
static void drain(em_spool_t *s) {
  em_spool_stats_t st;
  em_spool_stats(s, &st);
  check(st.pending_bytes <= CAP, "pending bytes above capacity");
  for (uint64_t left = st.pending + 1; left > 0; left--) {
    em_spool_kind_t kind = 0;
    int n = em_spool_peek(s, &kind, buf, sizeof(buf));
    if (n == 0) {
      em_spool_stats(s, &st);
      check(st.pending == 0 && st.pending_bytes == 0, "peek 0 with records pending");
      return;
    }
    check(n == -EIO || (n > 0 && (size_t)n <= CAP - EM_SPOOL_RECORD_HEADER), "bad peek");
    check(n == -EIO || kind == EM_SPOOL_DATA || kind == EM_SPOOL_STATE, "bad kind");
    check(em_spool_pop(s) == (n > 0 ? 0 : -ENOENT), "pop disagrees with peek");
  }
  check(0, "drain did not end");
}

static void fill(uint8_t *p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; i++) {
    p[i] = (uint8_t)(seed + i * 13u);
  }
}

static void expect(em_spool_t *s, em_spool_kind_t kind, size_t len, uint8_t seed) {
  static uint8_t want[CAP];
  em_spool_kind_t k = 0;
  check(em_spool_peek(s, &k, buf, sizeof(buf)) == (int)len, "known record: length");
  check(k == kind, "known record: kind");
  fill(want, len, seed);
  check(memcmp(buf, want, len) == 0, "known record: bytes");
  check(em_spool_pop(s) == 0, "known record: pop");
}

/* After a drain the spool is empty and must take and give back records as a new one. */
static void behaves_as_new(em_spool_t *s) {
  static const struct {
    em_spool_kind_t kind;
    size_t len;
  } in[] = {{EM_SPOOL_DATA, 5}, {EM_SPOOL_STATE, 17}, {EM_SPOOL_DATA, 300}};
  static uint8_t p[CAP];
  for (size_t i = 0; i < 3; i++) {
    fill(p, in[i].len, (uint8_t)i);
    check(em_spool_append(s, in[i].kind, p, in[i].len) == 0, "append");
  }
  expect(s, EM_SPOOL_STATE, 17, 1);
  expect(s, EM_SPOOL_DATA, 5, 0);
  expect(s, EM_SPOOL_DATA, 300, 2);
  for (uint8_t i = 0; i < 2; i++) { /* 2 x 40000 bytes: the second one wraps. */
    fill(p, 40000, i);
    check(em_spool_append(s, EM_SPOOL_DATA, p, 40000) == 0, "append big");
  }
  expect(s, EM_SPOOL_DATA, 40000, 1);
  drain(s);
}

static void run_file(void) {
  em_spool_t *s = open_or_die();
  drain(s);
  behaves_as_new(s);
  em_spool_close(s);
  s = open_or_die();
  em_spool_stats_t st;
  em_spool_stats(s, &st);
  check(st.pending == 0, "records pending after a full drain and a reopen");
  em_spool_close(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (dir[0] == '\0') {
    /* tmpfs where there is one: the spool's fdatasync() then costs nothing. */
    snprintf(dir, sizeof(dir), "/dev/shm/em-fuzz-spool-XXXXXX");
    if (mkdtemp(dir) == NULL) {
      snprintf(dir, sizeof(dir), "/tmp/em-fuzz-spool-XXXXXX");
      check(mkdtemp(dir) != NULL, "mkdtemp");
    }
    snprintf(path, sizeof(path), "%s/spool", dir);
    atexit(cleanup);
  }
  write_file(data, size, NULL, 0, 0);
  run_file();

  static uint8_t header[EM_SPOOL_HEADER_BYTES];
  memset(header, 0, sizeof(header));
  memcpy(header, "EMSPOOL1", 8);
  put_le64(header + 8, 1);    /* generation */
  put_le64(header + 16, CAP); /* capacity */
  uint32_t crc = em_crc32c(0, header, 60);
  for (int i = 0; i < 4; i++) {
    header[60 + i] = (uint8_t)(crc >> (8 * i));
  }
  write_file(header, sizeof(header), data, size < CAP ? size : CAP, EM_SPOOL_HEADER_BYTES + CAP);
  run_file();
  return 0;
}
