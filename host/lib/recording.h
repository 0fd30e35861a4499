/*
 * recording.h - the edgemon recording file: MQTT messages as they arrived, for replay and
 * comparison.
 *
 * A recording is what `edgemon-cli record` captured from the broker: every message's topic,
 * the time it was received and its payload, bytes untouched (a malformed payload is recorded
 * as it came, so a field problem can be reproduced on a bench). The framing is documented in
 * host/RECORDING.md; in short:
 *
 *   file   = header record*
 *   header = "EMREC" 0x00 version:u8(=1) flags:u8(=0)                               8 bytes
 *   record = recv_time_ns:u64 topic_len:u16 flags:u8 reserved:u8(=0) payload_len:u32
 *            topic[topic_len] payload[payload_len] crc32c:u32                    20 + n bytes
 *
 * Integers are little-endian. recv_time_ns is CLOCK_REALTIME in ns since the epoch. flags bit
 * 0 says the broker delivered the message as retained. crc32c (Castagnoli) covers the record
 * from recv_time_ns through the payload. topic_len is 1..EM_REC_MAX_TOPIC, payload_len
 * 0..EM_REC_MAX_PAYLOAD.
 *
 * Owns: a FILE per reader or writer and, for a reader, one buffer of the largest record. Not
 * thread-safe; one thread per reader or writer.
 */
#ifndef EM_RECORDING_H
#define EM_RECORDING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EM_REC_VERSION     1
#define EM_REC_HEADER_SIZE 8u
#define EM_REC_MAX_TOPIC   1024u
#define EM_REC_MAX_PAYLOAD (1024u * 1024u)

/* Errors beside negative errno values; em_rec_strerror() names both. */
#define EM_REC_ERRORS(X)                                                                           \
  X(EM_REC_EMAGIC, -2001, "not an edgemon recording (bad magic)")                                  \
  X(EM_REC_EVERSION, -2002, "edgemon recording of an unsupported version")                         \
  X(EM_REC_ETRUNCATED, -2003, "recording truncated in the middle of a record")                     \
  X(EM_REC_ECRC, -2004, "record checksum mismatch (corrupt recording)")                            \
  X(EM_REC_ELIMIT, -2005, "record field out of range (corrupt recording)")                         \
  X(EM_REC_EINVAL, -2006, "invalid argument")

enum em_rec_error {
#define EM_REC_X_ENUM(name, value, text) name = (value),
  EM_REC_ERRORS(EM_REC_X_ENUM)
#undef EM_REC_X_ENUM
};

/* One message. Pointers are borrowed: for em_rec_write() for the call; from em_rec_read()
 * until the next read or em_rec_reader_free(). topic is NOT NUL-terminated by the format, but
 * the reader adds a NUL after it for convenience. */
typedef struct {
  uint64_t recv_time_ns;
  bool retained;
  const char *topic;
  size_t topic_len;
  const uint8_t *payload;
  size_t payload_len;
} em_rec_entry_t;

typedef struct em_rec_writer em_rec_writer_t;
typedef struct em_rec_reader em_rec_reader_t;

/* Creates (truncates) `path` and writes the header; "-" is standard output. Returns 0 or a
 * negative errno. */
int em_rec_writer_new(em_rec_writer_t **out, const char *path);

/* Appends one record. Returns 0, EM_REC_ELIMIT for a topic or payload out of range, or a
 * negative errno from the write. */
int em_rec_write(em_rec_writer_t *w, const em_rec_entry_t *e);

/* Flushes to the kernel (no fsync). Returns 0 or a negative errno. */
int em_rec_flush(em_rec_writer_t *w);

/* Flushes and closes; returns 0 or the first error seen by any write or the close. NULL is a
 * no-op returning 0. */
int em_rec_writer_free(em_rec_writer_t *w);

/* Opens `path` ("-": standard input) and checks the header. Returns 0, a negative errno,
 * EM_REC_EMAGIC (also for a file shorter than the header) or EM_REC_EVERSION. */
int em_rec_reader_new(em_rec_reader_t **out, const char *path);

/* Reads the next record into *e. Returns 1 with a record, 0 at a clean end of file, or a
 * negative code: EM_REC_ETRUNCATED, EM_REC_ECRC, EM_REC_ELIMIT, -errno. After an error the
 * reader stays failed (every later call returns the same code). */
int em_rec_read(em_rec_reader_t *r, em_rec_entry_t *e);

/* Byte offset in the file of the record em_rec_read() returned last or failed on. */
uint64_t em_rec_offset(const em_rec_reader_t *r);

/* NULL is a no-op. */
void em_rec_reader_free(em_rec_reader_t *r);

/* Parses one record from memory (the reader's core, exposed for the fuzz harness and tests):
 * buf[0..len) starting at a record. Returns the record's size (> 0) with *e filled, borrowing
 * from buf (topic not NUL-terminated), 0 when len is 0, or EM_REC_ETRUNCATED / EM_REC_ECRC /
 * EM_REC_ELIMIT. */
long em_rec_parse(const uint8_t *buf, size_t len, em_rec_entry_t *e);

/*
 * Replay pacing: when each record of a recording is due, as an offset in ns from the first
 * record of a pass. The recorded gap between two records (recv_time_ns minus that of the record
 * before) is divided by the rate and cut to max_gap_ns. A time stamp equal to or before the one
 * before it (a clock stepped back) has a gap of 0: the record is due at once, and later records
 * are paced from its time. Any u64 time stamps, any rate and any max_gap_ns give a defined
 * result: offsets never decrease, grow by at most max_gap_ns a record, and stop at UINT64_MAX.
 * A caller-owned value; the fields are read-only for the caller.
 */
typedef struct {
  double rate;         /* Recorded time per replay time; 0 (or not > 0): no waiting. */
  uint64_t max_gap_ns; /* Longest wait between two records, in replay time. */
  uint64_t prev_ns;    /* recv_time_ns of the record before. */
  uint64_t gap_ns;     /* Recorded gap of the last record (0 for a first or backwards one). */
  uint64_t due_ns;     /* Offset of the last record since the first, in replay time. */
  bool started;        /* A record has been paced. */
  bool clamped;        /* The last record's wait was cut to max_gap_ns. */
} em_rec_pace_t;

/* Starts a pass: the next record paced is the first (due at offset 0). */
void em_rec_pace_init(em_rec_pace_t *p, double rate, uint64_t max_gap_ns);

/* Paces the next record by its recv_time_ns; returns its offset in ns since the first record
 * of the pass. Sets p->gap_ns and p->clamped for it. */
uint64_t em_rec_pace_next(em_rec_pace_t *p, uint64_t recv_time_ns);

/* Text for an EM_REC_E* code or a negative errno. Never NULL. */
const char *em_rec_strerror(int rc);

#endif /* EM_RECORDING_H */
