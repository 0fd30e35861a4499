/*
 * recording.c - reads and writes edgemon recording files (framing in recording.h and
 * host/RECORDING.md).
 *
 * The in-memory core is em_rec_parse(): it validates one record held in a buffer (fixed part,
 * limits, then the CRC-32C) and borrows its fields. The reader feeds it: it reads the 16-byte
 * fixed part, learns the record's size from it, reads the rest into the same buffer and lets
 * em_rec_parse() check the whole. The writer frames records into a buffered FILE and remembers
 * the first error any write, flush or close reported, so a full disk (ENOSPC), which a buffered
 * FILE often reports only at a later flush, still reaches the caller of em_rec_writer_free().
 *
 * Owns: per writer, one FILE (not closed when it is standard output); per reader, one FILE (not
 * closed when it is standard input) and one heap buffer, allocated in em_rec_reader_new(), large
 * enough for the largest legal record plus a NUL-terminated copy of its topic. Nothing grows.
 * The CRC table is a static array computed on first use; like the rest of the module it assumes
 * one thread.
 */
#define _POSIX_C_SOURCE 200809L
#include "recording.h"

#include <edgemon/crc32c.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Size of a record's fixed part: recv_time_ns u64, topic_len u16, flags u8, reserved u8,
 * payload_len u32. */
#define REC_FIXED_SIZE 16u
/* Size of the CRC-32C trailer. */
#define REC_CRC_SIZE 4u
/* The largest legal record, fixed part through CRC. */
#define REC_MAX_SIZE (REC_FIXED_SIZE + EM_REC_MAX_TOPIC + EM_REC_MAX_PAYLOAD + REC_CRC_SIZE)
/* Record flag bits this version knows. */
#define REC_FLAG_RETAINED 0x01u
#define REC_FLAGS_KNOWN   REC_FLAG_RETAINED

static const uint8_t rec_magic[6] = {'E', 'M', 'R', 'E', 'C', 0x00};

struct em_rec_writer {
  FILE *f;
  bool is_stdout; /* Standard output is flushed, never closed. */
  int err;        /* First error seen (0 while none); sticky. */
};

struct em_rec_reader {
  FILE *f;
  bool is_stdin;        /* Standard input is never closed. */
  uint8_t *buf;         /* REC_MAX_SIZE bytes of record, then EM_REC_MAX_TOPIC + 1 of topic. */
  char *topic;          /* buf + REC_MAX_SIZE: the current record's topic, NUL-terminated. */
  uint64_t pos;         /* Bytes consumed from the file so far. */
  uint64_t last_offset; /* File offset of the record returned last or failed on. */
  int err;              /* Sticky error (0 while none). */
};

/* ---- little-endian helpers ---------------------------------------------------------------- */

static void put_le(uint8_t *p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    p[i] = (uint8_t)(v >> (8 * i));
  }
}

static uint64_t get_le(const uint8_t *p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    v |= (uint64_t)p[i] << (8 * i);
  }
  return v;
}

/* ---- parsing ------------------------------------------------------------------------------ */

/*
 * Checks a record's 16-byte fixed part and returns the whole record's size in bytes, or
 * EM_REC_ELIMIT when topic_len is 0 or above EM_REC_MAX_TOPIC, payload_len is above
 * EM_REC_MAX_PAYLOAD, the reserved byte is not 0 or an unknown flag bit is set.
 */
static long fixed_part_size(const uint8_t *p) {
  uint64_t topic_len = get_le(p + 8, 2);
  uint8_t flags = p[10];
  uint8_t reserved = p[11];
  uint64_t payload_len = get_le(p + 12, 4);
  if (topic_len == 0 || topic_len > EM_REC_MAX_TOPIC) {
    return EM_REC_ELIMIT;
  }
  if (payload_len > EM_REC_MAX_PAYLOAD || reserved != 0 || (flags & ~REC_FLAGS_KNOWN) != 0) {
    return EM_REC_ELIMIT;
  }
  return (long)(REC_FIXED_SIZE + topic_len + payload_len + REC_CRC_SIZE);
}

long em_rec_parse(const uint8_t *buf, size_t len, em_rec_entry_t *e) {
  if (len == 0) {
    return 0;
  }
  if (!buf || !e) {
    return EM_REC_EINVAL;
  }
  if (len < REC_FIXED_SIZE) {
    return EM_REC_ETRUNCATED;
  }
  long size = fixed_part_size(buf);
  if (size < 0) {
    return size;
  }
  if (len < (size_t)size) {
    return EM_REC_ETRUNCATED;
  }
  size_t covered = (size_t)size - REC_CRC_SIZE;
  uint32_t want = (uint32_t)get_le(buf + covered, 4);
  if (em_crc32c(0, buf, covered) != want) {
    return EM_REC_ECRC;
  }
  e->recv_time_ns = get_le(buf, 8);
  e->retained = (buf[10] & REC_FLAG_RETAINED) != 0;
  e->topic_len = (size_t)get_le(buf + 8, 2);
  e->topic = (const char *)(buf + REC_FIXED_SIZE);
  e->payload_len = (size_t)get_le(buf + 12, 4);
  e->payload = buf + REC_FIXED_SIZE + e->topic_len;
  return size;
}

/* ---- writer ------------------------------------------------------------------------------- */

/* The negative errno of a failed stdio call, -EIO when the C library left errno at 0. */
static int stdio_error(void) {
  return errno > 0 ? -errno : -EIO;
}

/* Opens path with mode, or hands back std (standard input or output, *is_std true) for "-".
 * Returns 0 or the error of fopen(). */
static int open_stream(const char *path, const char *mode, FILE *std, FILE **f, bool *is_std) {
  *is_std = strcmp(path, "-") == 0;
  if (*is_std) {
    *f = std;
    return 0;
  }
  errno = 0;
  *f = fopen(path, mode);
  return *f ? 0 : stdio_error();
}

/* Writes n bytes; on failure records the first error. Returns 0 or the writer's first error. */
static int writer_put(em_rec_writer_t *w, const void *p, size_t n) {
  if (w->err) {
    return w->err;
  }
  if (n == 0) {
    return 0;
  }
  errno = 0;
  if (fwrite(p, 1, n, w->f) != n) {
    w->err = stdio_error();
  }
  return w->err;
}

int em_rec_writer_new(em_rec_writer_t **out, const char *path) {
  if (!out || !path) {
    return EM_REC_EINVAL;
  }
  *out = NULL;
  em_rec_writer_t *w = calloc(1, sizeof(*w));
  if (!w) {
    return -ENOMEM;
  }
  int rc = open_stream(path, "wb", stdout, &w->f, &w->is_stdout);
  if (rc != 0) {
    goto fail;
  }
  uint8_t header[EM_REC_HEADER_SIZE];
  memcpy(header, rec_magic, sizeof(rec_magic));
  header[6] = EM_REC_VERSION;
  header[7] = 0;
  rc = writer_put(w, header, sizeof(header));
  if (rc < 0) {
    goto fail;
  }
  *out = w;
  return 0;

fail:
  if (w->f && !w->is_stdout) {
    fclose(w->f);
  }
  free(w);
  return rc;
}

int em_rec_write(em_rec_writer_t *w, const em_rec_entry_t *e) {
  if (!w || !e || !e->topic || (!e->payload && e->payload_len > 0)) {
    return EM_REC_EINVAL;
  }
  if (e->topic_len == 0 || e->topic_len > EM_REC_MAX_TOPIC || e->payload_len > EM_REC_MAX_PAYLOAD) {
    return EM_REC_ELIMIT;
  }
  if (w->err) {
    return w->err;
  }
  uint8_t fixed[REC_FIXED_SIZE];
  put_le(fixed, e->recv_time_ns, 8);
  put_le(fixed + 8, e->topic_len, 2);
  fixed[10] = e->retained ? REC_FLAG_RETAINED : 0;
  fixed[11] = 0;
  put_le(fixed + 12, e->payload_len, 4);
  uint32_t crc = em_crc32c(0, fixed, sizeof(fixed));
  crc = em_crc32c(crc, e->topic, e->topic_len);
  if (e->payload_len > 0) {
    crc = em_crc32c(crc, e->payload, e->payload_len);
  }
  uint8_t trailer[REC_CRC_SIZE];
  put_le(trailer, crc, 4);
  writer_put(w, fixed, sizeof(fixed));
  writer_put(w, e->topic, e->topic_len);
  writer_put(w, e->payload, e->payload_len);
  return writer_put(w, trailer, sizeof(trailer));
}

int em_rec_flush(em_rec_writer_t *w) {
  if (!w) {
    return EM_REC_EINVAL;
  }
  if (w->err) {
    return w->err;
  }
  errno = 0;
  if (fflush(w->f) != 0) {
    w->err = stdio_error();
  }
  return w->err;
}

int em_rec_writer_free(em_rec_writer_t *w) {
  if (!w) {
    return 0;
  }
  em_rec_flush(w);
  if (!w->is_stdout) {
    errno = 0;
    if (fclose(w->f) != 0 && !w->err) {
      w->err = stdio_error();
    }
  }
  int rc = w->err;
  free(w);
  return rc;
}

/* ---- reader ------------------------------------------------------------------------------- */

/*
 * Reads up to n bytes. Returns the count read (short only at end of file), or a negative errno
 * when the stream reported an error.
 */
static long reader_get(em_rec_reader_t *r, uint8_t *p, size_t n) {
  errno = 0;
  size_t got = fread(p, 1, n, r->f);
  if (got < n && ferror(r->f)) {
    return stdio_error();
  }
  r->pos += got;
  return (long)got;
}

int em_rec_reader_new(em_rec_reader_t **out, const char *path) {
  if (!out || !path) {
    return EM_REC_EINVAL;
  }
  *out = NULL;
  em_rec_reader_t *r = calloc(1, sizeof(*r));
  if (!r) {
    return -ENOMEM;
  }
  int rc = 0;
  r->buf = malloc(REC_MAX_SIZE + EM_REC_MAX_TOPIC + 1);
  if (!r->buf) {
    rc = -ENOMEM;
    goto fail;
  }
  r->topic = (char *)(r->buf + REC_MAX_SIZE);
  rc = open_stream(path, "rb", stdin, &r->f, &r->is_stdin);
  if (rc != 0) {
    goto fail;
  }
  uint8_t header[EM_REC_HEADER_SIZE];
  long got = reader_get(r, header, sizeof(header));
  if (got < 0) {
    rc = (int)got;
    goto fail;
  }
  if ((size_t)got < sizeof(header) || memcmp(header, rec_magic, sizeof(rec_magic)) != 0) {
    rc = EM_REC_EMAGIC;
    goto fail;
  }
  /* Header flags are reserved for later versions: a reader that does not know them cannot
   * promise to read the file right, which is what EVERSION says. */
  if (header[6] != EM_REC_VERSION || header[7] != 0) {
    rc = EM_REC_EVERSION;
    goto fail;
  }
  r->last_offset = r->pos;
  *out = r;
  return 0;

fail:
  em_rec_reader_free(r);
  return rc;
}

/* Records a sticky error and returns it. */
static int reader_fail(em_rec_reader_t *r, int rc) {
  r->err = rc;
  return rc;
}

int em_rec_read(em_rec_reader_t *r, em_rec_entry_t *e) {
  if (!r || !e) {
    return EM_REC_EINVAL;
  }
  if (r->err) {
    return r->err;
  }
  r->last_offset = r->pos;
  long got = reader_get(r, r->buf, REC_FIXED_SIZE);
  if (got < 0) {
    return reader_fail(r, (int)got);
  }
  if (got == 0) {
    return 0;
  }
  if ((size_t)got < REC_FIXED_SIZE) {
    return reader_fail(r, EM_REC_ETRUNCATED);
  }
  long size = fixed_part_size(r->buf);
  if (size < 0) {
    return reader_fail(r, (int)size);
  }
  size_t rest = (size_t)size - REC_FIXED_SIZE;
  got = reader_get(r, r->buf + REC_FIXED_SIZE, rest);
  if (got < 0) {
    return reader_fail(r, (int)got);
  }
  if ((size_t)got < rest) {
    return reader_fail(r, EM_REC_ETRUNCATED);
  }
  long parsed = em_rec_parse(r->buf, (size_t)size, e);
  if (parsed < 0) {
    return reader_fail(r, (int)parsed);
  }
  memcpy(r->topic, e->topic, e->topic_len);
  r->topic[e->topic_len] = '\0';
  e->topic = r->topic;
  return 1;
}

uint64_t em_rec_offset(const em_rec_reader_t *r) {
  return r ? r->last_offset : 0;
}

void em_rec_reader_free(em_rec_reader_t *r) {
  if (!r) {
    return;
  }
  if (r->f && !r->is_stdin) {
    fclose(r->f);
  }
  free(r->buf);
  free(r);
}

/* ---- replay pacing ------------------------------------------------------------------------ */

void em_rec_pace_init(em_rec_pace_t *p, double rate, uint64_t max_gap_ns) {
  if (!p) {
    return;
  }
  memset(p, 0, sizeof(*p));
  p->rate = rate > 0 ? rate : 0; /* NaN and negative rates do not wait either. */
  p->max_gap_ns = max_gap_ns;
}

uint64_t em_rec_pace_next(em_rec_pace_t *p, uint64_t recv_time_ns) {
  if (!p) {
    return 0;
  }
  p->clamped = false;
  if (!p->started) {
    p->started = true;
    p->prev_ns = recv_time_ns;
    p->gap_ns = 0;
    return p->due_ns;
  }
  p->gap_ns = recv_time_ns > p->prev_ns ? recv_time_ns - p->prev_ns : 0;
  p->prev_ns = recv_time_ns;
  uint64_t wait_ns = 0;
  if (p->rate > 0 && p->gap_ns > 0) {
    /* Compared in double before converting: a quotient at or above max_gap_ns (up to 2^64 / a
     * tiny rate, or infinite) never reaches the conversion, which would be undefined past
     * UINT64_MAX. (double)max_gap_ns is at most 2^64, so what is below it converts. */
    double scaled_ns = (double)p->gap_ns / p->rate;
    if (scaled_ns < (double)p->max_gap_ns) {
      wait_ns = (uint64_t)scaled_ns;
    } else {
      wait_ns = p->max_gap_ns;
      p->clamped = true;
    }
  }
  p->due_ns = wait_ns > UINT64_MAX - p->due_ns ? UINT64_MAX : p->due_ns + wait_ns;
  return p->due_ns;
}

/* ---- errors ------------------------------------------------------------------------------- */

const char *em_rec_strerror(int rc) {
  switch (rc) {
#define EM_REC_X_CASE(name, value, text)                                                           \
  case name:                                                                                       \
    return text;
    EM_REC_ERRORS(EM_REC_X_CASE)
#undef EM_REC_X_CASE
  case 0:
    return "success";
  default:
    break;
  }
  if (rc < 0 && rc > -4096) {
    return strerror(-rc);
  }
  return "unknown error";
}
