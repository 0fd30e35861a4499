/*
 * test_host_recording.c - unit tests of host/lib/recording.c: the recording file's framing.
 *
 * Covered: the CRC-32C check value and its continuation; a round trip of many records through
 * a file (empty payload, longest topic, largest payload, retained flag, time stamps, offsets);
 * a small file cut at every byte (EMAGIC inside the header, ETRUNCATED with the offset of the
 * cut record after it, a clean end at record boundaries); every single-bit flip of a small file
 * (ECRC where the bit is covered only by the checksum, an error in every case); the writer's
 * limits; foreign files, an unknown version and header flags; missing files; a full disk
 * (/dev/full) surfacing ENOSPC from em_rec_writer_free(); sticky reader errors; a table of
 * em_rec_parse() cases; replay pacing (em_rec_pace_next()) for backwards time stamps, jumps of
 * about 2^64 ns at any rate, the cap and saturation.
 *
 * Files live in a fresh mkdtemp() directory under /tmp that each test removes.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "recording.h"
#include "tmp_dir.h"
#include "unit_fx.h"

#include <edgemon/crc32c.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- fixtures ----------------------------------------------------------------------------- */

typedef em_tmp_file_t tmp_t;

static int tmp_setup(void **state) {
  return em_tmp_file_setup(state, "em-rec-test", "rec.emrec");
}

static int tmp_teardown(void **state) {
  return em_tmp_file_teardown(state);
}

static void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(p, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

/* Reads a whole file into a malloc'd buffer. */
static uint8_t *read_bytes(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long size = ftell(f);
  assert_true(size >= 0);
  rewind(f);
  uint8_t *buf = malloc((size_t)size + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
  fclose(f);
  *n = (size_t)size;
  return buf;
}

static em_rec_entry_t entry(uint64_t t, bool retained, const char *topic, const void *payload,
                            size_t payload_len) {
  em_rec_entry_t e = {t, retained, topic, strlen(topic), payload, payload_len};
  return e;
}

/* A three-record file: its bytes and the offsets where records start (and the end). */
static void small_file(const char *path, size_t offsets[4]) {
  em_rec_writer_t *w = NULL;
  assert_int_equal(em_rec_writer_new(&w, path), 0);
  em_rec_entry_t es[3] = {
      entry(1000, true, "edgemon/v1/a/birth", "\xa1\x01\x02", 3),
      entry(2000, false, "edgemon/v1/a/data", "xyz", 3),
      entry(3000, false, "t", NULL, 0),
  };
  size_t off = EM_REC_HEADER_SIZE;
  for (size_t i = 0; i < 3; i++) {
    offsets[i] = off;
    assert_int_equal(em_rec_write(w, &es[i]), 0);
    off += 20 + es[i].topic_len + es[i].payload_len;
  }
  offsets[3] = off;
  assert_int_equal(em_rec_writer_free(w), 0);
}

/* small_file() at path, read back: its bytes (malloc'd, offsets[3] of them). */
static uint8_t *small_file_bytes(const char *path, size_t offsets[4]) {
  small_file(path, offsets);
  size_t n = 0;
  uint8_t *bytes = read_bytes(path, &n);
  assert_int_equal(n, offsets[3]);
  return bytes;
}

/* How many of small_file()'s records end at or before byte pos. */
static size_t records_by(const size_t offsets[4], size_t pos) {
  size_t k = 0;
  while (k < 3 && offsets[k + 1] <= pos) {
    k++;
  }
  return k;
}

/* After a read that failed with rc, r stays at `offset` and the next read fails the same way. */
static void expect_sticky(em_rec_reader_t *r, int rc, size_t offset) {
  em_rec_entry_t e;
  assert_int_equal(em_rec_offset(r), offset);
  assert_int_equal(em_rec_read(r, &e), rc);
}

/* Reads `count` records from r, each of which must come whole. */
static void read_whole(em_rec_reader_t *r, size_t count) {
  em_rec_entry_t e;
  for (size_t i = 0; i < count; i++) {
    assert_int_equal(em_rec_read(r, &e), 1);
  }
}

/* ---- CRC ---------------------------------------------------------------------------------- */

static void crc32c_matches_check_value(void **state) {
  (void)state;
  assert_int_equal(em_crc32c(0, "123456789", 9), 0xE3069283u);
  assert_int_equal(em_crc32c(0, "", 0), 0);
  /* Continuing from a partial CRC equals one pass. */
  uint32_t part = em_crc32c(0, "1234", 4);
  assert_int_equal(em_crc32c(part, "56789", 5), 0xE3069283u);
  /* RFC 3720 B.4: 32 bytes of zeros. */
  uint8_t zeros[32] = {0};
  assert_int_equal(em_crc32c(0, zeros, sizeof(zeros)), 0x8A9136AAu);
}

/* ---- round trip --------------------------------------------------------------------------- */

static void round_trip_keeps_every_field(void **state) {
  tmp_t *t = *state;
  enum { N = 300 };
  char long_topic[EM_REC_MAX_TOPIC + 1];
  memset(long_topic, 'x', EM_REC_MAX_TOPIC);
  long_topic[EM_REC_MAX_TOPIC] = '\0';
  uint8_t *big = malloc(EM_REC_MAX_PAYLOAD);
  assert_non_null(big);
  for (size_t i = 0; i < EM_REC_MAX_PAYLOAD; i++) {
    big[i] = (uint8_t)(i * 7 + 3);
  }
  char topics[N][48];
  em_rec_writer_t *w = NULL;
  assert_int_equal(em_rec_writer_new(&w, t->path), 0);
  for (size_t i = 0; i < N; i++) {
    snprintf(topics[i], sizeof(topics[i]), "edgemon/v1/dev-%zu/data", i % 7);
    const char *topic = i == 5 ? long_topic : topics[i];
    size_t plen = i == 9 ? EM_REC_MAX_PAYLOAD : (i % 3 == 0 ? 0 : i * 13 % 2000);
    em_rec_entry_t e = entry(UINT64_C(1700000000000000000) + i * 1000003u, i % 4 == 0, topic,
                             plen ? big + i : NULL, plen);
    if (i == 9) {
      e.payload = big;
    }
    assert_int_equal(em_rec_write(w, &e), 0);
  }
  assert_int_equal(em_rec_writer_free(w), 0);

  em_rec_reader_t *r = NULL;
  assert_int_equal(em_rec_reader_new(&r, t->path), 0);
  uint64_t off = EM_REC_HEADER_SIZE;
  for (size_t i = 0; i < N; i++) {
    em_rec_entry_t e;
    assert_int_equal(em_rec_read(r, &e), 1);
    assert_int_equal(em_rec_offset(r), off);
    const char *topic = i == 5 ? long_topic : topics[i];
    size_t plen = i == 9 ? EM_REC_MAX_PAYLOAD : (i % 3 == 0 ? 0 : i * 13 % 2000);
    assert_int_equal(e.recv_time_ns, UINT64_C(1700000000000000000) + i * 1000003u);
    assert_int_equal(e.retained, i % 4 == 0);
    assert_int_equal(e.topic_len, strlen(topic));
    assert_string_equal(e.topic, topic); /* The reader NUL-terminates. */
    assert_int_equal(e.payload_len, plen);
    if (plen) {
      assert_memory_equal(e.payload, i == 9 ? big : big + i, plen);
    }
    off += 20 + e.topic_len + e.payload_len;
  }
  em_rec_entry_t e;
  assert_int_equal(em_rec_read(r, &e), 0);
  assert_int_equal(em_rec_read(r, &e), 0);
  em_rec_reader_free(r);
  free(big);
}

static void header_only_file_is_an_empty_recording(void **state) {
  tmp_t *t = *state;
  em_rec_writer_t *w = NULL;
  assert_int_equal(em_rec_writer_new(&w, t->path), 0);
  assert_int_equal(em_rec_writer_free(w), 0);
  size_t n = 0;
  uint8_t *bytes = read_bytes(t->path, &n);
  assert_int_equal(n, EM_REC_HEADER_SIZE);
  assert_memory_equal(bytes, "EMREC\0\1\0", 8);
  free(bytes);
  em_rec_reader_t *r = NULL;
  assert_int_equal(em_rec_reader_new(&r, t->path), 0);
  em_rec_entry_t e;
  assert_int_equal(em_rec_read(r, &e), 0);
  em_rec_reader_free(r);
}

/* ---- damage ------------------------------------------------------------------------------- */

static void cut_at_every_byte_is_truncated_never_a_crash(void **state) {
  tmp_t *t = *state;
  size_t offsets[4];
  uint8_t *bytes = small_file_bytes(t->path, offsets);
  for (size_t cut = 0; cut < offsets[3]; cut++) {
    write_bytes(t->path, bytes, cut);
    em_rec_reader_t *r = NULL;
    int rc = em_rec_reader_new(&r, t->path);
    if (cut < EM_REC_HEADER_SIZE) {
      assert_int_equal(rc, EM_REC_EMAGIC);
      assert_null(r);
      continue;
    }
    assert_int_equal(rc, 0);
    size_t whole = records_by(offsets, cut);
    read_whole(r, whole);
    em_rec_entry_t e;
    if (offsets[whole] == cut) {
      assert_int_equal(em_rec_read(r, &e), 0);
    } else {
      assert_int_equal(em_rec_read(r, &e), EM_REC_ETRUNCATED);
      expect_sticky(r, EM_REC_ETRUNCATED, offsets[whole]);
    }
    em_rec_reader_free(r);
  }
  free(bytes);
}

static void flipped_bit_is_detected(void **state) {
  tmp_t *t = *state;
  size_t offsets[4];
  uint8_t *bytes = small_file_bytes(t->path, offsets);
  size_t n = offsets[3];
  for (size_t byte = EM_REC_HEADER_SIZE; byte < n; byte++) {
    size_t rec = records_by(offsets, byte);
    size_t in_rec = byte - offsets[rec];
    /* Bytes 8..15 are lengths, flags and reserved: a flip there may also read as a limit
     * violation or a truncation. Everything else is covered by the CRC alone. */
    bool crc_only = in_rec < 8 || in_rec >= 16;
    for (int bit = 0; bit < 8; bit++) {
      bytes[byte] ^= (uint8_t)(1u << bit);
      write_bytes(t->path, bytes, n);
      bytes[byte] ^= (uint8_t)(1u << bit);
      em_rec_reader_t *r = NULL;
      assert_int_equal(em_rec_reader_new(&r, t->path), 0);
      read_whole(r, rec);
      em_rec_entry_t e;
      int rc = em_rec_read(r, &e);
      if (crc_only) {
        assert_int_equal(rc, EM_REC_ECRC);
      } else {
        assert_true(rc == EM_REC_ECRC || rc == EM_REC_ELIMIT || rc == EM_REC_ETRUNCATED);
      }
      expect_sticky(r, rc, offsets[rec]);
      em_rec_reader_free(r);
    }
  }
  free(bytes);
}

static void writer_refuses_fields_out_of_range(void **state) {
  tmp_t *t = *state;
  char long_topic[EM_REC_MAX_TOPIC + 2];
  memset(long_topic, 'y', sizeof(long_topic) - 1);
  long_topic[sizeof(long_topic) - 1] = '\0';
  uint8_t small[4] = {0};
  em_rec_writer_t *w = NULL;
  assert_int_equal(em_rec_writer_new(&w, t->path), 0);
  em_rec_entry_t e = entry(1, false, "", small, 1);
  assert_int_equal(em_rec_write(w, &e), EM_REC_ELIMIT);
  e = entry(1, false, long_topic, small, 1);
  assert_int_equal(em_rec_write(w, &e), EM_REC_ELIMIT);
  e = entry(1, false, "a/b", small, EM_REC_MAX_PAYLOAD + 1); /* Never read: checked first. */
  assert_int_equal(em_rec_write(w, &e), EM_REC_ELIMIT);
  e = entry(1, false, "a/b", NULL, 3);
  assert_int_equal(em_rec_write(w, &e), EM_REC_EINVAL);
  /* A refused record leaves nothing behind: the file is still a valid empty recording. */
  assert_int_equal(em_rec_writer_free(w), 0);
  em_rec_reader_t *r = NULL;
  assert_int_equal(em_rec_reader_new(&r, t->path), 0);
  assert_int_equal(em_rec_read(r, &e), 0);
  em_rec_reader_free(r);
}

static void reader_rejects_foreign_and_future_files(void **state) {
  tmp_t *t = *state;
  static const struct {
    const char *name;
    const char *bytes;
    size_t len;
    int want;
  } cases[] = {
      {"empty file", "", 0, EM_REC_EMAGIC},
      {"text", "hello, world\n", 13, EM_REC_EMAGIC},
      {"magic without NUL", "EMRECX\1\0", 8, EM_REC_EMAGIC},
      {"short header", "EMREC\0\1", 7, EM_REC_EMAGIC},
      {"version 2", "EMREC\0\2\0", 8, EM_REC_EVERSION},
      {"version 0", "EMREC\0\0\0", 8, EM_REC_EVERSION},
      {"header flags", "EMREC\0\1\1", 8, EM_REC_EVERSION},
      {"version 1", "EMREC\0\1\0", 8, 0},
  };
  for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
    write_bytes(t->path, cases[i].bytes, cases[i].len);
    em_rec_reader_t *r = NULL;
    int rc = em_rec_reader_new(&r, t->path);
    if (rc != cases[i].want) {
      fail_msg("%s: got %d (%s), want %d", cases[i].name, rc, em_rec_strerror(rc), cases[i].want);
    }
    assert_true(rc == 0 ? r != NULL : r == NULL);
    em_rec_reader_free(r);
  }
}

static void missing_file_is_enoent(void **state) {
  tmp_t *t = *state;
  em_rec_reader_t *r = NULL;
  assert_int_equal(em_rec_reader_new(&r, "/nonexistent/dir/x.emrec"), -ENOENT);
  assert_null(r);
  em_rec_writer_t *w = NULL;
  char path[sizeof(t->path)];
  snprintf(path, sizeof(path), "%s/no/such/dir", t->dir);
  assert_int_equal(em_rec_writer_new(&w, path), -ENOENT);
  assert_null(w);
}

static void full_disk_surfaces_enospc(void **state) {
  (void)state;
  if (access("/dev/full", W_OK) != 0) {
    skip();
  }
  em_rec_writer_t *w = NULL;
  int rc = em_rec_writer_new(&w, "/dev/full");
  if (rc == -ENOSPC) {
    return; /* Unbuffered enough to fail right away: also correct. */
  }
  assert_int_equal(rc, 0);
  uint8_t payload[512] = {0};
  em_rec_entry_t e = entry(1, false, "edgemon/v1/a/data", payload, sizeof(payload));
  int first = 0;
  for (int i = 0; i < 1000 && first == 0; i++) {
    first = em_rec_write(w, &e);
  }
  if (first == 0) {
    first = em_rec_flush(w);
  }
  assert_int_equal(first, -ENOSPC);
  assert_int_equal(em_rec_write(w, &e), -ENOSPC); /* Sticky. */
  assert_int_equal(em_rec_writer_free(w), -ENOSPC);
}

static void strerror_names_codes_and_errno(void **state) {
  (void)state;
  assert_string_equal(em_rec_strerror(EM_REC_EMAGIC), "not an edgemon recording (bad magic)");
  assert_string_equal(em_rec_strerror(EM_REC_ETRUNCATED),
                      "recording truncated in the middle of a record");
  assert_string_equal(em_rec_strerror(-ENOENT), strerror(ENOENT));
  assert_non_null(em_rec_strerror(12345));
  assert_non_null(em_rec_strerror(-99999));
}

/* ---- em_rec_parse table ------------------------------------------------------------------- */

/* Builds one record (topic "a/b", payload "hi", time 42) into buf; returns its size (25). */
static size_t build_record(uint8_t *buf) {
  static const uint8_t fixed[16] = {42, 0, 0, 0, 0, 0, 0, 0, 3, 0, 1, 0, 2, 0, 0, 0};
  memcpy(buf, fixed, 16);
  memcpy(buf + 16, "a/b", 3);
  memcpy(buf + 19, "hi", 2);
  uint32_t crc = em_crc32c(0, buf, 21);
  for (int i = 0; i < 4; i++) {
    buf[21 + i] = (uint8_t)(crc >> (8 * i));
  }
  return 25;
}

/* Rewrites the CRC after a mutation of the fixed part, so only the mutation is wrong. */
static void fix_crc(uint8_t *buf, size_t covered) {
  uint32_t crc = em_crc32c(0, buf, covered);
  for (int i = 0; i < 4; i++) {
    buf[covered + i] = (uint8_t)(crc >> (8 * i));
  }
}

static void parse_table(void **state) {
  (void)state;
  static const struct {
    const char *name;
    size_t at;      /* Byte to overwrite (SIZE_MAX: none). */
    uint8_t value;  /* Its new value. */
    bool recrc;     /* Recompute the CRC afterwards. */
    long len_delta; /* Added to the record's length. */
    long want;      /* Expected result (25 = the record's size). */
  } cases[] = {
      {"valid", SIZE_MAX, 0, false, 0, 25},
      {"trailing bytes ignored", SIZE_MAX, 0, false, 7, 25},
      {"empty buffer", SIZE_MAX, 0, false, -25, 0},
      {"one byte", SIZE_MAX, 0, false, -24, EM_REC_ETRUNCATED},
      {"fixed part minus one", SIZE_MAX, 0, false, -10, EM_REC_ETRUNCATED},
      {"missing crc byte", SIZE_MAX, 0, false, -1, EM_REC_ETRUNCATED},
      {"bad crc", 24, 0xEE, false, 0, EM_REC_ECRC},
      {"time changed", 0, 43, false, 0, EM_REC_ECRC},
      {"payload changed", 20, 'j', false, 0, EM_REC_ECRC},
      {"retained flag changed", 10, 0, false, 0, EM_REC_ECRC},
      {"topic_len 0", 8, 0, true, 0, EM_REC_ELIMIT},
      {"topic_len 1025", 9, 4, true, 0, EM_REC_ELIMIT}, /* 0x0403 = 1027 */
      {"payload_len 1 MiB + 2", 14, 0x10, true, 0, EM_REC_ELIMIT},
      {"payload_len 2^31", 15, 0x80, true, 0, EM_REC_ELIMIT},
      {"reserved 1", 11, 1, true, 0, EM_REC_ELIMIT},
      {"flag bit 1", 10, 0x03, true, 0, EM_REC_ELIMIT},
      {"flag bit 7", 10, 0x80, true, 0, EM_REC_ELIMIT},
      {"not retained", 10, 0, true, 0, 25},
      {"topic_len 4 eats payload", 8, 4, true, 1, EM_REC_ECRC},
      {"payload_len 3 beyond buffer", 12, 3, true, 0, EM_REC_ETRUNCATED},
  };
  for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
    uint8_t buf[64] = {0};
    size_t len = build_record(buf);
    if (cases[i].at != SIZE_MAX) {
      buf[cases[i].at] = cases[i].value;
    }
    if (cases[i].recrc) {
      fix_crc(buf, 21);
    }
    len = (size_t)((long)len + cases[i].len_delta);
    em_rec_entry_t e;
    memset(&e, 0, sizeof(e));
    long got = em_rec_parse(buf, len, &e);
    if (got != cases[i].want) {
      fail_msg("%s: got %ld, want %ld", cases[i].name, got, cases[i].want);
    }
    if (got == 25) {
      assert_int_equal(e.recv_time_ns, 42);
      assert_int_equal(e.retained, buf[10] == 1);
      assert_int_equal(e.topic_len, 3);
      assert_memory_equal(e.topic, "a/b", 3);
      assert_int_equal(e.payload_len, 2);
      assert_memory_equal(e.payload, "hi", 2);
    }
  }
}

/* ---- replay pacing ------------------------------------------------------------------------ */

#define SEC_NS   1000000000ull
#define U64_LAST UINT64_MAX

/* Table rows: time stamps, rate, max gap, and the offset and clamp wanted after each. */
static void pace_table(void **state) {
  (void)state;
  static const struct {
    const char *name;
    double rate;
    uint64_t max_gap_ns;
    uint64_t t[5];
    size_t n;
    uint64_t due[5];
    bool clamped[5];
  } cases[] = {
      {"recorded pace", 1.0, 60 * SEC_NS, {100, 200, 450}, 3, {0, 100, 350}, {0}},
      {"twice as fast", 2.0, 60 * SEC_NS, {100, 200, 450}, 3, {0, 50, 175}, {0}},
      {"half speed", 0.5, 60 * SEC_NS, {100, 200, 450}, 3, {0, 200, 700}, {0}},
      {"rate 0 never waits", 0.0, 60 * SEC_NS, {0, U64_LAST, 7}, 3, {0, 0, 0}, {0}},
      {"negative rate never waits", -1.0, 60 * SEC_NS, {0, U64_LAST}, 2, {0, 0}, {0}},
      {"backwards is due at once", 1.0, 60 * SEC_NS, {500, 100, 300}, 3, {0, 0, 200}, {0}},
      {"2^64 jump at rate 1", 1.0, 60 * SEC_NS, {0, U64_LAST}, 2, {0, 60 * SEC_NS}, {false, true}},
      {"2^64 jump at rate 0.5",
       0.5,
       60 * SEC_NS,
       {0, U64_LAST},
       2,
       {0, 60 * SEC_NS},
       {false, true}},
      {"2^64 jump at a tiny rate",
       1e-300,
       60 * SEC_NS,
       {0, U64_LAST},
       2,
       {0, 60 * SEC_NS},
       {false, true}},
      {"2^64 jump, cap UINT64_MAX", 1.0, U64_LAST, {0, U64_LAST}, 2, {0, U64_LAST}, {false, true}},
      {"2^63 jump at rate 1, no cap", 1.0, U64_LAST, {0, 1ull << 63}, 2, {0, 1ull << 63}, {0}},
      {"jumps back and forth",
       1.0,
       10,
       {5, U64_LAST, 5, U64_LAST, 6},
       5,
       {0, 10, 10, 20, 20},
       {false, true, false, true, false}},
      {"gap equal to the cap is clamped", 1.0, 10, {0, 10}, 2, {0, 10}, {false, true}},
      {"cap 0: in order, no waiting", 1.0, 0, {0, 1, 2}, 3, {0, 0, 0}, {false, true, true}},
  };
  for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
    em_rec_pace_t p;
    em_rec_pace_init(&p, cases[i].rate, cases[i].max_gap_ns);
    for (size_t k = 0; k < cases[i].n; k++) {
      uint64_t due = em_rec_pace_next(&p, cases[i].t[k]);
      if (due != cases[i].due[k] || p.clamped != cases[i].clamped[k]) {
        fail_msg("%s, record %zu: due %llu clamped %d, want %llu %d", cases[i].name, k,
                 (unsigned long long)due, p.clamped, (unsigned long long)cases[i].due[k],
                 cases[i].clamped[k]);
      }
    }
  }
}

/* Offsets saturate instead of wrapping: many capped gaps near 2^64 stay at UINT64_MAX. */
static void pace_offsets_saturate(void **state) {
  (void)state;
  em_rec_pace_t p;
  em_rec_pace_init(&p, 1.0, U64_LAST / 2);
  uint64_t prev = em_rec_pace_next(&p, 0);
  for (int i = 0; i < 8; i++) {
    uint64_t due = em_rec_pace_next(&p, (i % 2) ? 0 : U64_LAST);
    assert_true(due >= prev);
    prev = due;
  }
  assert_true(prev == U64_LAST);
  /* A new pass starts again at 0. */
  em_rec_pace_init(&p, 1.0, 10);
  assert_true(em_rec_pace_next(&p, U64_LAST) == 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(crc32c_matches_check_value),
      EM_FX_OF(round_trip_keeps_every_field, tmp),
      EM_FX_OF(header_only_file_is_an_empty_recording, tmp),
      EM_FX_OF(cut_at_every_byte_is_truncated_never_a_crash, tmp),
      EM_FX_OF(flipped_bit_is_detected, tmp),
      EM_FX_OF(writer_refuses_fields_out_of_range, tmp),
      EM_FX_OF(reader_rejects_foreign_and_future_files, tmp),
      EM_FX_OF(missing_file_is_enoent, tmp),
      cmocka_unit_test(full_disk_surfaces_enospc),
      cmocka_unit_test(strerror_names_codes_and_errno),
      cmocka_unit_test(parse_table),
      cmocka_unit_test(pace_table),
      cmocka_unit_test(pace_offsets_saturate),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
