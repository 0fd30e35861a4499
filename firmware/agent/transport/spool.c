/*
 * spool.c - the agent's store-and-forward spool (spool.h; the format is firmware/SPOOL.md).
 *
 * Owns one file descriptor (O_RDWR, mode 0600) and one array, the index: one 16-byte entry per
 * record between the ring's tail and head, in record number order, sized at open from the
 * capacity (a record takes at least 32 ring bytes, so capacity / 32 entries always suffice).
 * Appends, peeks and pops use pread/pwrite on that descriptor and never allocate; only
 * em_spool_sync() calls fdatasync(). Single-threaded, except that em_spool_sync() may run on
 * another thread while the owner makes no other call (spool.h).
 *
 * Invariants:
 *   1. The index holds the records of the ring arc [tail, head) in number order; they do not
 *      overlap and lie in ring order, so the entry at the front is the oldest and the one whose
 *      bytes the next append reaches first.
 *   2. The front entry is pending (never popped): popped entries at the front are trimmed at
 *      once. Entries behind it may be popped already (STATE records replay before older DATA).
 *   3. `done` (what the header persists) is the number of the front entry, or `next` when the
 *      index is empty: every record numbered below it has been replayed or dropped. Records
 *      popped out of order above it are replayed again after a restart (at-least-once).
 *   4. A record never straddles the ring's end. When one does not fit before the end, the gap
 *      up to the end is evicted and zeroed, and the record goes to offset 0.
 *
 * Record life:
 *
 *     append ──▶ PENDING ──peek+pop──▶ POPPED ──(reaches the front)──▶ trimmed
 *                   │  └──peek fails CRC (-EIO)──▶ dropped, counted in corrupt
 *                   └──an append needs its bytes──▶ evicted, counted in dropped
 *
 *   | edge                       | function                          |
 *   |----------------------------|-----------------------------------|
 *   | (none) -> PENDING          | em_spool_append, scan_ring (open) |
 *   | PENDING -> POPPED          | em_spool_pop                      |
 *   | PENDING -> dropped/corrupt | em_spool_peek (read_record)       |
 *   | PENDING -> evicted         | evict_for (em_spool_append)       |
 *   | POPPED/evicted -> trimmed  | trim_front                        |
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* pwritev */
#include "spool.h"

#include <edgemon/common/file.h>
#include <edgemon/crc32c.h>

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define SLOT_BYTES    64u
#define SLOT_CRC_AT   60u                           /* The slot CRC covers bytes 0..59. */
#define REC_MAGIC     0x31524d45u                   /* "EMR1" read as a little-endian u32. */
#define REC_MIN_BYTES (EM_SPOOL_RECORD_HEADER + 8u) /* Header and the smallest payload. */
#define MAX_CAPACITY  (1024ull * 1024ull * 1024ull) /* 1 GiB: offsets and lengths fit u32. */
#define MAX_NUMBER    (1ull << 62)                  /* Record numbers stay below this. */
#define SCAN_WINDOW   (64u * 1024u)                 /* Bytes read at a time by the open scan. */

static const uint8_t slot_magic[8] = {'E', 'M', 'S', 'P', 'O', 'O', 'L', '1'};

typedef struct {
  uint64_t number;          /* Record number. */
  unsigned int offset : 30; /* Ring offset of the record's first byte (below 1 GiB). */
  unsigned int flight : 1;  /* 1: EM_SPOOL_FLIGHT (replayed in the data order). */
  unsigned int held : 1;    /* In flight (write-ahead): sent, its acknowledgement awaited. */
  unsigned int len : 29;    /* Payload bytes (a message is at most 256 KiB). */
  unsigned int profile : 1; /* 1: EM_SPOOL_PROFILE (replayed in the data order). */
  unsigned int state : 1;   /* 1: EM_SPOOL_STATE, 0: EM_SPOOL_DATA. */
  unsigned int popped : 1;  /* Replayed out of order, or dropped unreadable. */
} entry_t;
_Static_assert(sizeof(entry_t) == 16, "an index entry is 16 bytes (firmware/SPOOL.md)");

typedef struct {
  uint64_t gen;     /* Generation: the newer valid slot wins. */
  uint64_t cap;     /* Ring bytes. */
  uint64_t done;    /* Every record numbered below it is replayed or dropped. */
  uint64_t dropped; /* Records evicted or lost in the file's life. */
} slot_t;

struct em_spool {
  int fd;
  uint64_t cap;           /* Ring bytes, a multiple of 8. */
  entry_t *idx;           /* nslots entries; entry for absolute index i is idx[i % nslots]. */
  uint64_t nslots;        /* cap / REC_MIN_BYTES. */
  uint64_t first;         /* Absolute index of the front (oldest) entry. */
  uint64_t count;         /* Entries in the index (pending and popped). */
  uint64_t state_cur;     /* No pending STATE entry has an absolute index below this. */
  uint64_t data_cur;      /* No pending DATA entry has an absolute index below this. */
  uint64_t pending_state; /* Pending STATE entries. */
  uint64_t head;          /* Ring offset where the next record goes (0..cap). */
  uint64_t next;          /* Number of the next record appended. */
  bool peeked;            /* peeked_abs/peeked_number name what em_spool_peek returned. */
  uint64_t peeked_abs;
  uint64_t peeked_number;
  uint64_t gen;         /* Generation of the newest header slot written or read. */
  uint64_t hdr_done;    /* `done` as that slot holds it. */
  uint64_t hdr_dropped; /* `dropped` as that slot holds it. */
  bool unsynced;        /* Written since the last fdatasync. */
  em_spool_stats_t st;
};

__attribute__((format(printf, 3, 4))) static void say(char *err, size_t err_cap, const char *fmt,
                                                      ...) {
  if (err == NULL || err_cap == 0) {
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, err_cap, fmt, ap);
  va_end(ap);
}

/* Stores the low n bytes of v at p, least significant first. */
static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) {
    p[i] = (uint8_t)(v >> (8 * i));
  }
}

static void put_le32(uint8_t *p, uint32_t v) {
  put_le(p, v, 4);
}

static void put_le64(uint8_t *p, uint64_t v) {
  put_le(p, v, 8);
}

static uint32_t get_le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_le64(const uint8_t *p) {
  return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
}

static uint64_t pad8(uint64_t n) {
  return (n + 7u) & ~(uint64_t)7u;
}

static uint64_t record_bytes(uint64_t len) {
  return EM_SPOOL_RECORD_HEADER + pad8(len);
}

/*
 * Reads (write false) or writes (write true) exactly len bytes at off, retrying on EINTR and
 * carrying on after a short transfer. Returns 0, -EIO when the file ends (a read) or nothing
 * is written, or a negative errno (-EFBIG, -ENOSPC on a write).
 */
static int io_full(int fd, uint8_t *p, size_t len, uint64_t off, bool write) {
  while (len > 0) {
    ssize_t n = write ? pwrite(fd, p, len, (off_t)off) : pread(fd, p, len, (off_t)off);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return -errno;
    }
    if (n == 0) {
      return -EIO;
    }
    p += n;
    len -= (size_t)n;
    off += (uint64_t)n;
  }
  return 0;
}

/* Reads exactly len bytes at off. Returns 0, -EIO at end of file, or a negative errno. */
static int read_full(int fd, void *buf, size_t len, uint64_t off) {
  return io_full(fd, buf, len, off, false);
}

/* Writes exactly len bytes at off. Returns 0 or a negative errno (-EFBIG, -ENOSPC, -EIO). */
static int write_full(int fd, const void *buf, size_t len, uint64_t off) {
  return io_full(fd, (uint8_t *)buf, len, off, true);
}

/* Writes one record, header and payload, with one pwritev() (one page-cache write per record);
 * a short write is finished with write_full(). */
static int write_record(int fd, const uint8_t hdr[EM_SPOOL_RECORD_HEADER], const uint8_t *payload,
                        size_t len, uint64_t off) {
  struct iovec iov[2] = {{.iov_base = (void *)hdr, .iov_len = EM_SPOOL_RECORD_HEADER},
                         {.iov_base = (void *)payload, .iov_len = len}};
  ssize_t n;
  do {
    n = pwritev(fd, iov, 2, (off_t)off);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    return -errno;
  }
  size_t done = (size_t)n;
  if (done < EM_SPOOL_RECORD_HEADER) {
    int rc = write_full(fd, hdr + done, EM_SPOOL_RECORD_HEADER - done, off + done);
    if (rc < 0) {
      return rc;
    }
    done = EM_SPOOL_RECORD_HEADER;
  }
  size_t sent = done - EM_SPOOL_RECORD_HEADER;
  if (sent < len) {
    return write_full(fd, payload + sent, len - sent, off + EM_SPOOL_RECORD_HEADER + sent);
  }
  return 0;
}

static bool capacity_ok(uint64_t cap) {
  return cap >= EM_SPOOL_MIN_CAPACITY && cap <= MAX_CAPACITY && cap % 8u == 0;
}

static void slot_encode(const slot_t *h, uint8_t out[SLOT_BYTES]) {
  memset(out, 0, SLOT_BYTES);
  memcpy(out, slot_magic, sizeof(slot_magic));
  put_le64(out + 8, h->gen);
  put_le64(out + 16, h->cap);
  put_le64(out + 24, h->done);
  put_le64(out + 32, h->dropped);
  put_le32(out + SLOT_CRC_AT, em_crc32c(0, out, SLOT_CRC_AT));
}

/* Decodes one header slot. Returns true when its magic, CRC and fields are valid. */
static bool slot_decode(const uint8_t in[SLOT_BYTES], slot_t *h) {
  if (memcmp(in, slot_magic, sizeof(slot_magic)) != 0) {
    return false;
  }
  if (get_le32(in + SLOT_CRC_AT) != em_crc32c(0, in, SLOT_CRC_AT)) {
    return false;
  }
  h->gen = get_le64(in + 8);
  h->cap = get_le64(in + 16);
  h->done = get_le64(in + 24);
  h->dropped = get_le64(in + 32);
  return capacity_ok(h->cap) && h->done < MAX_NUMBER;
}

static entry_t *entry_at(const em_spool_t *s, uint64_t abs) {
  return &s->idx[abs % s->nslots];
}

static uint64_t current_done(const em_spool_t *s) {
  return s->count > 0 ? entry_at(s, s->first)->number : s->next;
}

/* Writes the header slot of generation gen + 1 (done, dropped as they are now). No fsync. */
static int write_header(em_spool_t *s) {
  slot_t h = {.gen = s->gen + 1, .cap = s->cap, .done = current_done(s), .dropped = s->st.dropped};
  uint8_t buf[SLOT_BYTES];
  slot_encode(&h, buf);
  int rc = write_full(s->fd, buf, sizeof(buf), (h.gen & 1u) * SLOT_BYTES);
  if (rc < 0) {
    return rc;
  }
  s->gen = h.gen;
  s->hdr_done = h.done;
  s->hdr_dropped = h.dropped;
  s->unsynced = true;
  return 0;
}

/* Empties the file to a fresh spool of s->cap ring bytes (the ring reads as zeros), keeping the
 * numbering (s->next) and the dropped count, and writes its header. */
static int reset_file(em_spool_t *s) {
  if (ftruncate(s->fd, 0) != 0 || ftruncate(s->fd, (off_t)(EM_SPOOL_HEADER_BYTES + s->cap)) != 0) {
    return -errno;
  }
  s->first = 0;
  s->count = 0;
  s->state_cur = 0;
  s->data_cur = 0;
  s->pending_state = 0;
  s->head = 0;
  s->st.pending = 0;
  s->st.pending_bytes = 0;
  return write_header(s);
}

/* Removes popped entries at the front (invariant 2). */
static void trim_front(em_spool_t *s) {
  while (s->count > 0 && entry_at(s, s->first)->popped) {
    s->first++;
    s->count--;
  }
}

/* Takes a pending entry out of the pending counts (it stays in the index until trimmed). */
static void unpend(em_spool_t *s, entry_t *e) {
  e->popped = 1;
  s->st.pending--;
  s->st.pending_bytes -= record_bytes(e->len);
  if (e->state) {
    s->pending_state--;
  }
}

/* Moves a pending entry in flight: out of the replay order, still below `done`'s reach. */
static void hold(em_spool_t *s, entry_t *e) {
  unpend(s, e);
  e->popped = 0;
  e->held = 1;
  s->st.inflight++;
}

static bool overlaps(const entry_t *e, uint64_t lo, uint64_t hi) {
  uint64_t start = e->offset;
  uint64_t end = start + record_bytes(e->len);
  return lo < hi && start < hi && lo < end;
}

/* Evicts the oldest entries while their bytes meet [lo1, hi1) or [lo2, hi2) (invariant 1: the
 * front is the first entry an append can reach), counting the pending ones in dropped. */
static void evict_for(em_spool_t *s, uint64_t lo1, uint64_t hi1, uint64_t lo2, uint64_t hi2) {
  while (s->count > 0) {
    entry_t *e = entry_at(s, s->first);
    if (!overlaps(e, lo1, hi1) && !overlaps(e, lo2, hi2)) {
      break;
    }
    if (e->held) {
      e->held = 0; /* Still in the session's hands: not lost unless the process dies. */
      s->st.inflight--;
      s->st.evicted_inflight++;
    } else if (!e->popped) {
      unpend(s, e);
      s->st.dropped++;
    }
    s->first++;
    s->count--;
    trim_front(s);
  }
  if (s->peeked && s->peeked_abs < s->first) {
    s->peeked = false;
  }
}

/* Writes zeros over ring bytes [lo, hi). */
static int zero_ring(em_spool_t *s, uint64_t lo, uint64_t hi) {
  static const uint8_t zeros[512];
  while (lo < hi) {
    size_t n = hi - lo < sizeof(zeros) ? (size_t)(hi - lo) : sizeof(zeros);
    int rc = write_full(s->fd, zeros, n, EM_SPOOL_HEADER_BYTES + lo);
    if (rc < 0) {
      return rc;
    }
    lo += n;
  }
  return 0;
}

static void encode_record_header(uint8_t out[EM_SPOOL_RECORD_HEADER], uint64_t number,
                                 em_spool_kind_t kind, const uint8_t *payload, size_t len) {
  memset(out, 0, EM_SPOOL_RECORD_HEADER);
  put_le32(out, REC_MAGIC);
  put_le32(out + 4, (uint32_t)len);
  put_le64(out + 8, number);
  out[16] = (uint8_t)kind;
  uint32_t crc = em_crc32c(0, out + 8, 12);
  put_le32(out + 20, em_crc32c(crc, payload, len));
}

/*
 * Checks the 24-byte record header at ring offset `at`: magic, zero reserved bytes, a known
 * kind, a payload of 1 byte or more that ends inside the ring, a number below MAX_NUMBER.
 * Fills *e (not its flags) and *crc (the stored CRC). Returns true when it holds.
 */
static bool parse_record_header(const em_spool_t *s, const uint8_t hdr[EM_SPOOL_RECORD_HEADER],
                                uint64_t at, entry_t *e, uint32_t *crc) {
  uint32_t len = get_le32(hdr + 4);
  uint64_t number = get_le64(hdr + 8);
  uint8_t kind = hdr[16];
  if (get_le32(hdr) != REC_MAGIC || hdr[17] != 0 || hdr[18] != 0 || hdr[19] != 0) {
    return false;
  }
  if ((kind != EM_SPOOL_DATA && kind != EM_SPOOL_STATE && kind != EM_SPOOL_FLIGHT &&
       kind != EM_SPOOL_PROFILE) ||
      len == 0 || len >= (1u << 29) || number >= MAX_NUMBER) {
    return false;
  }
  if (record_bytes(len) > s->cap - at) {
    return false;
  }
  e->number = number;
  e->offset = (uint32_t)at;
  e->len = len;
  e->state = kind == EM_SPOOL_STATE;
  e->flight = kind == EM_SPOOL_FLIGHT;
  e->profile = kind == EM_SPOOL_PROFILE;
  e->popped = 0;
  e->held = 0; /* After a restart, what was in flight is pending again. */
  *crc = get_le32(hdr + 20);
  return true;
}

/*
 * Validates the record at ring offset `at`, reading its payload in chunks through buf.
 * Returns 1 and *e when it is a whole record whose CRC holds, 0 when it is not, or a negative
 * errno when the file cannot be read.
 */
static int check_record(const em_spool_t *s, uint64_t at, uint8_t *buf, size_t buf_cap,
                        entry_t *e) {
  uint8_t hdr[EM_SPOOL_RECORD_HEADER];
  int rc = read_full(s->fd, hdr, sizeof(hdr), EM_SPOOL_HEADER_BYTES + at);
  if (rc < 0) {
    return rc;
  }
  uint32_t want = 0;
  if (!parse_record_header(s, hdr, at, e, &want)) {
    return 0;
  }
  uint32_t crc = em_crc32c(0, hdr + 8, 12);
  uint64_t off = EM_SPOOL_HEADER_BYTES + at + EM_SPOOL_RECORD_HEADER;
  for (uint64_t left = e->len; left > 0;) {
    size_t n = left < buf_cap ? (size_t)left : buf_cap;
    rc = read_full(s->fd, buf, n, off);
    if (rc < 0) {
      return rc;
    }
    crc = em_crc32c(crc, buf, n);
    off += n;
    left -= n;
  }
  return crc == want ? 1 : 0;
}

static int by_number(const void *a, const void *b) {
  const entry_t *x = a;
  const entry_t *y = b;
  if (x->number != y->number) {
    return x->number < y->number ? -1 : 1;
  }
  return x->offset < y->offset ? -1 : (x->offset > y->offset ? 1 : 0);
}

/*
 * Keeps, of the candidates idx[0..n) sorted by number, the run that forms one ring arc ending
 * at the newest one's end: walking from the newest to older numbers, each kept record lies
 * wholly behind the one kept before it (in ring order, within one lap). This drops stale
 * records an eviction left intact (a zeroed gap that never reached the disk) and any record
 * that does not fit the arc. Sets s->head and the index.
 */
static void keep_arc(em_spool_t *s, uint64_t n) {
  if (n == 0) {
    return;
  }
  const entry_t *newest = &s->idx[n - 1];
  uint64_t head = newest->offset + record_bytes(newest->len);
  uint64_t behind = 0; /* Bytes from head back to the start of the last kept record. */
  uint64_t w = n;
  for (uint64_t i = n; i-- > 0;) {
    const entry_t *e = &s->idx[i];
    uint64_t start_back = (head + s->cap - e->offset) % s->cap;
    if (start_back == 0) {
      start_back = s->cap;
    }
    uint64_t size = record_bytes(e->len);
    if (start_back < size || start_back - size < behind) {
      continue;
    }
    behind = start_back;
    s->idx[--w] = *e;
  }
  memmove(s->idx, s->idx + w, (size_t)(n - w) * sizeof(entry_t));
  s->first = 0;
  s->count = n - w;
  s->head = head;
}

/*
 * Recovery: scans the ring from its start for valid records (spool.h), skipping a torn or
 * corrupt one (magic present, record invalid: counted in corrupt) 8 bytes at a time. Records
 * numbered >= done become the index; `next` goes past every number seen. Returns 0 or a
 * negative errno when the file cannot be read.
 */
static int scan_ring(em_spool_t *s, uint64_t done) {
  uint8_t *win = malloc(SCAN_WINDOW);
  uint8_t chunk[4096];
  if (win == NULL) {
    return -ENOMEM;
  }
  uint64_t win_off = 0;
  uint64_t win_len = 0;
  uint64_t n = 0;
  uint64_t top = done;  /* Past the highest number seen. */
  uint64_t top_end = 0; /* End of the highest-numbered record seen. */
  bool seen = false;
  int rc = 0;
  for (uint64_t at = 0; at + EM_SPOOL_RECORD_HEADER <= s->cap;) {
    if (at < win_off || at + 4 > win_off + win_len) {
      win_off = at;
      win_len = s->cap - at < SCAN_WINDOW ? s->cap - at : SCAN_WINDOW;
      rc = read_full(s->fd, win, (size_t)win_len, EM_SPOOL_HEADER_BYTES + at);
      if (rc < 0) {
        goto out;
      }
    }
    if (get_le32(win + (at - win_off)) != REC_MAGIC) {
      at += 8;
      continue;
    }
    entry_t e;
    rc = check_record(s, at, chunk, sizeof(chunk), &e);
    if (rc < 0) {
      goto out;
    }
    if (rc == 0) {
      s->st.corrupt++;
      at += 8;
      continue;
    }
    if (!seen || e.number >= top) {
      top = e.number + 1;
      top_end = at + record_bytes(e.len);
      seen = true;
    }
    if (e.number >= done && n < s->nslots) {
      s->idx[n++] = e;
    }
    at += record_bytes(e.len);
  }
  rc = 0;
  qsort(s->idx, (size_t)n, sizeof(entry_t), by_number);
  s->head = top_end;
  keep_arc(s, n);
  s->next = top > done ? top : done;
  for (uint64_t i = 0; i < s->count; i++) {
    s->st.pending++;
    s->st.pending_bytes += record_bytes(s->idx[i].len);
    s->pending_state += s->idx[i].state;
  }
out:
  free(win);
  return rc;
}

/* Reads both header slots; returns true and the newer valid one in *h. */
static bool read_slots(int fd, uint64_t file_bytes, slot_t *h) {
  uint8_t buf[2 * SLOT_BYTES];
  if (file_bytes < sizeof(buf) || read_full(fd, buf, sizeof(buf), 0) != 0) {
    return false;
  }
  slot_t a;
  slot_t b;
  bool va = slot_decode(buf, &a);
  bool vb = slot_decode(buf + SLOT_BYTES, &b);
  if (va && (!vb || a.gen >= b.gen)) {
    *h = a;
  } else if (vb) {
    *h = b;
  }
  return va || vb;
}

static int alloc_index(em_spool_t *s, uint64_t cap) {
  free(s->idx);
  s->cap = cap;
  s->nslots = cap / REC_MIN_BYTES;
  s->idx = calloc((size_t)s->nslots, sizeof(entry_t));
  return s->idx == NULL ? -ENOMEM : 0;
}

int em_spool_open(em_spool_t **out, const char *path, uint64_t capacity, char *err,
                  size_t err_cap) {
  if (err != NULL && err_cap > 0) {
    err[0] = '\0';
  }
  if (out == NULL || path == NULL) {
    say(err, err_cap, "spool: no path given");
    return -EINVAL;
  }
  *out = NULL;
  capacity &= ~(uint64_t)7u;
  if (!capacity_ok(capacity)) {
    say(err, err_cap, "spool %s: capacity %llu bytes is outside %u..%llu", path,
        (unsigned long long)capacity, EM_SPOOL_MIN_CAPACITY, (unsigned long long)MAX_CAPACITY);
    return -EINVAL;
  }
  em_spool_t *s = calloc(1, sizeof(*s));
  if (s == NULL) {
    say(err, err_cap, "spool %s: out of memory", path);
    return -ENOMEM;
  }
  const char *what = "open";
  const char *refused = NULL; /* What stands at path when it is no regular file. */
  int rc = 0;
  /* The directory may be writable by others: a FIFO there must not block the agent's start
   * (O_NONBLOCK), a link must not redirect its writes (O_NOFOLLOW), only a regular file is
   * kept. */
  s->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0600);
  struct stat st;
  if (s->fd < 0 && errno == ELOOP) {
    refused = em_file_kind(S_IFLNK);
    rc = -EINVAL;
    goto fail;
  }
  if (s->fd < 0 || fstat(s->fd, &st) != 0) {
    rc = -errno;
    goto fail;
  }
  if (!S_ISREG(st.st_mode)) {
    refused = em_file_kind(st.st_mode);
    rc = -EINVAL;
    goto fail;
  }
  if (fcntl(s->fd, F_SETFL, fcntl(s->fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    rc = -errno;
    goto fail;
  }
  slot_t h = {0};
  bool valid = read_slots(s->fd, (uint64_t)st.st_size, &h);
  uint64_t need = EM_SPOOL_HEADER_BYTES + h.cap;
  if (!valid || (uint64_t)st.st_size < need) {
    if (valid) {
      say(err, err_cap,
          "spool %s: %llu bytes, shorter than its header says (%llu): recreated empty", path,
          (unsigned long long)st.st_size, (unsigned long long)need);
      s->next = h.done;
      s->st.dropped = h.dropped;
      s->gen = h.gen;
    } else if (st.st_size > 0) {
      say(err, err_cap, "spool %s: not a spool (no valid header): recreated empty", path);
    }
    what = "create";
    rc = alloc_index(s, capacity);
    if (rc == 0) {
      rc = reset_file(s);
    }
    if (rc < 0) {
      goto fail;
    }
    *out = s;
    return 0;
  }
  s->gen = h.gen;
  s->hdr_done = h.done;
  s->hdr_dropped = h.dropped;
  s->st.dropped = h.dropped;
  what = "read";
  rc = alloc_index(s, h.cap);
  if (rc == 0) {
    rc = scan_ring(s, h.done);
  }
  if (rc < 0) {
    goto fail;
  }
  what = "write";
  if (h.cap != capacity && s->st.pending == 0) {
    say(err, err_cap, "spool %s: capacity %llu, asked %llu: nothing pending, recreated", path,
        (unsigned long long)h.cap, (unsigned long long)capacity);
    rc = alloc_index(s, capacity);
    if (rc == 0) {
      rc = reset_file(s);
    }
  } else {
    if (h.cap != capacity) {
      say(err, err_cap, "spool %s: %llu records pending: keeps its capacity %llu (asked %llu)",
          path, (unsigned long long)s->st.pending, (unsigned long long)h.cap,
          (unsigned long long)capacity);
    }
    if (current_done(s) != h.done) {
      rc = write_header(s); /* Persists that nothing below the oldest pending record remains. */
    }
  }
  if (rc < 0) {
    goto fail;
  }
  *out = s;
  return 0;
fail:
  if (refused != NULL) {
    say(err, err_cap, "spool %s: %s, not a regular file: refused", path, refused);
  } else if (rc == -ENOMEM) {
    say(err, err_cap, "spool %s: out of memory", path);
  } else {
    say(err, err_cap, "spool %s: %s: %s", path, what, strerror(-rc));
    rc = -EIO;
  }
  if (s->fd >= 0) {
    close(s->fd);
  }
  free(s->idx);
  free(s);
  return rc;
}

static int append(em_spool_t *s, em_spool_kind_t kind, const uint8_t *payload, size_t len,
                  bool held, uint64_t *number) {
  if (s == NULL || (payload == NULL && len > 0) || len == 0) {
    return -EINVAL;
  }
  if (kind != EM_SPOOL_DATA && kind != EM_SPOOL_STATE && kind != EM_SPOOL_FLIGHT &&
      kind != EM_SPOOL_PROFILE) {
    return -EINVAL;
  }
  if (len > s->cap || record_bytes(len) > s->cap) {
    return -EMSGSIZE;
  }
  if (s->next >= MAX_NUMBER) {
    return -EOVERFLOW; /* 2^62 records: only a forged file gets here. */
  }
  uint64_t size = record_bytes(len);
  uint64_t at = s->head;
  if (at + size > s->cap) {
    evict_for(s, s->head, s->cap, 0, size); /* Invariant 4: the gap goes too. */
    at = 0;
  } else {
    evict_for(s, at, at + size, 0, 0);
  }
  if (s->count >= s->nslots) {
    return -ENOBUFS; /* Unreachable: entries hold disjoint ring bytes, 32 or more each. */
  }
  uint8_t hdr[EM_SPOOL_RECORD_HEADER];
  encode_record_header(hdr, s->next, kind, payload, len);
  int rc = 0;
  if (at == 0 && s->head > 0) {
    rc = zero_ring(s, s->head, s->cap);
  }
  if (rc == 0) {
    rc = write_record(s->fd, hdr, payload, len, EM_SPOOL_HEADER_BYTES + at);
  }
  s->unsynced = true;
  if (rc < 0) {
    s->st.write_errors++;
    return rc;
  }
  entry_t *e = entry_at(s, s->first + s->count);
  e->number = s->next;
  e->offset = (uint32_t)at;
  e->len = (unsigned int)len;
  e->state = kind == EM_SPOOL_STATE;
  e->flight = kind == EM_SPOOL_FLIGHT;
  e->profile = kind == EM_SPOOL_PROFILE;
  e->popped = 0;
  e->held = 0;
  if (number != NULL) {
    *number = s->next;
  }
  s->count++;
  s->next++;
  s->head = at + size;
  s->st.pending++;
  s->st.pending_bytes += size;
  s->st.appended++;
  s->pending_state += e->state;
  if (held) {
    hold(s, e);
  }
  return 0;
}

int em_spool_append(em_spool_t *s, em_spool_kind_t kind, const uint8_t *payload, size_t len) {
  return append(s, kind, payload, len, false, NULL);
}

int em_spool_append_held(em_spool_t *s, em_spool_kind_t kind, const uint8_t *payload, size_t len,
                         uint64_t *number) {
  if (number == NULL) {
    return -EINVAL;
  }
  return append(s, kind, payload, len, true, number);
}

/* The absolute index of the next record to replay (STATE first), moving the cursors on. */
static uint64_t next_to_replay(em_spool_t *s) {
  bool state = s->pending_state > 0;
  uint64_t *cur = state ? &s->state_cur : &s->data_cur;
  if (*cur < s->first) {
    *cur = s->first;
  }
  for (; *cur < s->first + s->count; (*cur)++) {
    const entry_t *e = entry_at(s, *cur);
    if (!e->popped && !e->held && (bool)e->state == state) {
      break;
    }
  }
  return *cur;
}

int em_spool_peek(em_spool_t *s, em_spool_kind_t *kind, uint8_t *buf, size_t cap) {
  if (s == NULL || kind == NULL || (buf == NULL && cap > 0)) {
    return -EINVAL;
  }
  s->peeked = false;
  if (s->st.pending == 0) {
    return 0;
  }
  uint64_t abs = next_to_replay(s);
  if (abs >= s->first + s->count) {
    return 0; /* Unreachable while the counts hold. */
  }
  entry_t *e = entry_at(s, abs);
  *kind = e->state     ? EM_SPOOL_STATE
          : e->flight  ? EM_SPOOL_FLIGHT
          : e->profile ? EM_SPOOL_PROFILE
                       : EM_SPOOL_DATA;
  if (cap < e->len) {
    return -ENOBUFS;
  }
  uint8_t hdr[EM_SPOOL_RECORD_HEADER];
  entry_t got;
  uint32_t want = 0;
  uint64_t off = EM_SPOOL_HEADER_BYTES + e->offset;
  bool ok = read_full(s->fd, hdr, sizeof(hdr), off) == 0 &&
            parse_record_header(s, hdr, e->offset, &got, &want) && got.number == e->number &&
            got.len == e->len && got.state == e->state && got.flight == e->flight &&
            read_full(s->fd, buf, e->len, off + EM_SPOOL_RECORD_HEADER) == 0 &&
            em_crc32c(em_crc32c(0, hdr + 8, 12), buf, e->len) == want;
  if (!ok) {
    unpend(s, e);
    s->st.corrupt++;
    trim_front(s);
    return -EIO;
  }
  s->peeked = true;
  s->peeked_abs = abs;
  s->peeked_number = e->number;
  return (int)e->len;
}

int em_spool_pop(em_spool_t *s) {
  if (s == NULL || !s->peeked) {
    return -ENOENT;
  }
  s->peeked = false;
  if (s->peeked_abs < s->first || s->peeked_abs >= s->first + s->count) {
    return -ENOENT;
  }
  entry_t *e = entry_at(s, s->peeked_abs);
  if (e->popped || e->number != s->peeked_number) {
    return -ENOENT;
  }
  unpend(s, e);
  s->st.replayed++;
  trim_front(s);
  return 0;
}

int em_spool_take(em_spool_t *s, uint64_t *number) {
  if (s == NULL || number == NULL || !s->peeked) {
    return -ENOENT;
  }
  s->peeked = false;
  if (s->peeked_abs < s->first || s->peeked_abs >= s->first + s->count) {
    return -ENOENT;
  }
  entry_t *e = entry_at(s, s->peeked_abs);
  if (e->popped || e->held || e->number != s->peeked_number) {
    return -ENOENT;
  }
  hold(s, e);
  s->st.replayed++;
  *number = e->number;
  return 0;
}

/* The absolute index of record `number` when it is held in flight, else false (acknowledged,
 * evicted). The index is in number order (invariant 1): a binary search. */
static bool find_held(const em_spool_t *s, uint64_t number, uint64_t *abs) {
  uint64_t lo = s->first;
  uint64_t hi = s->first + s->count;
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo) / 2;
    const entry_t *e = entry_at(s, mid);
    if (e->number == number) {
      *abs = mid;
      return e->held;
    }
    if (e->number < number) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return false;
}

/* Record `number` leaves the in-flight state; returns its entry (*abs: its absolute index), or
 * NULL when it is not held (or s is NULL). */
static entry_t *unhold(em_spool_t *s, uint64_t number, uint64_t *abs) {
  if (s == NULL || !find_held(s, number, abs)) {
    return NULL;
  }
  entry_t *e = entry_at(s, *abs);
  e->held = 0;
  s->st.inflight--;
  return e;
}

int em_spool_ack(em_spool_t *s, uint64_t number) {
  uint64_t abs;
  entry_t *e = unhold(s, number, &abs);
  if (e == NULL) {
    return s == NULL ? -EINVAL : -ENOENT;
  }
  e->popped = 1;
  s->st.acked++;
  trim_front(s); /* `done` moves only past a run of acknowledged records from the front. */
  return 0;
}

int em_spool_release(em_spool_t *s, uint64_t number) {
  uint64_t abs;
  entry_t *e = unhold(s, number, &abs);
  if (e == NULL) {
    return s == NULL ? -EINVAL : -ENOENT;
  }
  s->st.pending++;
  s->st.pending_bytes += record_bytes(e->len);
  s->pending_state += e->state;
  /* The replay cursors may be past it already: it goes back in number order. */
  uint64_t *cur = e->state ? &s->state_cur : &s->data_cur;
  if (*cur > abs) {
    *cur = abs;
  }
  return 0;
}

/* Writes the header when what it records (the records done, the count dropped) has moved
 * since it was last written. Returns 0 or write_header()'s error, counted in write_errors. */
static int write_changed_header(em_spool_t *s) {
  if (current_done(s) == s->hdr_done && s->st.dropped == s->hdr_dropped) {
    return 0;
  }
  int rc = write_header(s);
  if (rc < 0) {
    s->st.write_errors++;
  }
  return rc;
}

int em_spool_sync(em_spool_t *s) {
  if (s == NULL) {
    return -EINVAL;
  }
  int rc = write_changed_header(s);
  if (rc < 0) {
    return rc;
  }
  if (!s->unsynced) {
    return 0;
  }
  if (fdatasync(s->fd) != 0) {
    rc = -errno;
    s->st.write_errors++;
    return rc;
  }
  s->unsynced = false;
  return 0;
}

int em_spool_flush_header(em_spool_t *s, bool *need_sync) {
  if (s == NULL || need_sync == NULL) {
    return -EINVAL;
  }
  *need_sync = false;
  int rc = write_changed_header(s);
  if (rc < 0) {
    return rc;
  }
  *need_sync = s->unsynced;
  s->unsynced = false;
  return 0;
}

int em_spool_fd(const em_spool_t *s) {
  return s ? s->fd : -EINVAL;
}

void em_spool_stats(const em_spool_t *s, em_spool_stats_t *out) {
  if (s == NULL || out == NULL) {
    return;
  }
  *out = s->st;
}

void em_spool_close(em_spool_t *s) {
  if (s == NULL) {
    return;
  }
  (void)em_spool_sync(s);
  close(s->fd);
  free(s->idx);
  free(s);
}
