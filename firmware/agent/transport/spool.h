/*
 * spool.h - the agent's store-and-forward spool: a bounded on-disk ring of checksummed,
 * length-prefixed records holding the encoded messages the broker did not take (broker away,
 * a QoS 1 data publish never acknowledged), replayed in order after the broker is back.
 *
 * File layout (little-endian; documented in full in firmware/SPOOL.md):
 *
 *     [header, 4096 bytes: two 64-byte slots, written alternately]
 *     [ring, capacity bytes: records back to back, wrapping to the ring's start]
 *
 * A header slot holds: magic "EMSPOOL1", generation (u64, the newer valid slot wins),
 * capacity, the record number below which every record has been replayed (`done`), the
 * number of records evicted or lost since the file was created (`dropped`), and a CRC-32C of
 * the slot. A record: magic u32 "EMR1", payload length u32, record number u64 (+1 per record,
 * never reused), kind u8 (EM_SPOOL_DATA / EM_SPOOL_STATE / EM_SPOOL_FLIGHT /
 * EM_SPOOL_PROFILE), 3 bytes zero, CRC-32C
 * u32 over number, kind and payload, then the payload, padded to a multiple of 8 bytes. A record
 * never straddles the ring's end: one that does not fit in what is left goes to the ring's start.
 *
 * Recovery (em_spool_open): the ring is scanned from its start; a record is valid when its
 * magic, length bound and CRC hold. A torn or corrupt record is skipped (the scan resumes at
 * the next 8-byte boundary carrying the record magic) and counted in `corrupt`; it never stops
 * the scan or the replay. The valid records numbered >= done are pending, in number order.
 *
 * Capacity: appending past capacity evicts the oldest pending records (whole records) and
 * counts them in `dropped`, which is persisted, so the exact number lost is known across
 * restarts.
 *
 * Durability: appends are pwrite()s into the page cache and never fsync on the caller's
 * thread. em_spool_sync() does the header write that persists `done` and `dropped` and the
 * fdatasync(); the agent splits it: em_spool_flush_header() on the loop (a page-cache write)
 * every sync_interval, then fdatasync on libuv's worker (uv_fs_fdatasync), and
 * em_spool_sync() once at exit. A power
 * loss thus loses at most the records appended since the last sync (and may replay records
 * popped since then a second time: at-least-once); a torn record is detected by its CRC.
 *
 * Owns: the file descriptor and an in-memory index of the pending records (offset, length,
 * number, kind), sized from the capacity at open; nothing is allocated per append.
 * Single-threaded except em_spool_sync(), which may run on another thread while the owner
 * does not call into the spool (the agent waits for the work's completion callback).
 */
#ifndef EDGEMON_AGENT_SPOOL_H
#define EDGEMON_AGENT_SPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EM_SPOOL_HEADER_BYTES  4096u
#define EM_SPOOL_RECORD_HEADER 24u /* Bytes before a record's payload. */
#define EM_SPOOL_MIN_CAPACITY  (64u * 1024u)

typedef enum {
  EM_SPOOL_DATA = 1,    /* A data message, replayed after pending state messages. */
  EM_SPOOL_STATE = 2,   /* A state message: replayed first. */
  EM_SPOOL_FLIGHT = 3,  /* A flight recording: replayed in order with data messages. */
  EM_SPOOL_PROFILE = 4, /* A stack profile: replayed in order with data messages. */
} em_spool_kind_t;

typedef struct em_spool em_spool_t;

typedef struct {
  uint64_t pending;          /* Records waiting to be replayed. */
  uint64_t pending_bytes;    /* Ring bytes they occupy (headers and padding included). */
  uint64_t appended;         /* Records appended since open. */
  uint64_t replayed;         /* Records popped since open. */
  uint64_t dropped;          /* Records evicted by capacity, in the file's whole life. */
  uint64_t corrupt;          /* Torn or corrupt records skipped at open. */
  uint64_t write_errors;     /* Appends or syncs that failed (ENOSPC, EFBIG, EIO). */
  uint64_t inflight;         /* Records held in flight (write-ahead): sent, not yet acknowledged. */
  uint64_t acked;            /* Held records acknowledged since open. */
  uint64_t evicted_inflight; /* Held records evicted by capacity while still in flight (not in
                                dropped: the session still holds them; lost only if the
                                process dies before they are acknowledged). */
} em_spool_stats_t;

/*
 * Opens the spool at `path`, creating it (mode 0600) with `capacity` ring bytes (rounded down to
 * a multiple of 8, >= EM_SPOOL_MIN_CAPACITY) when it is missing or is not a spool. An existing
 * spool of another capacity is recreated only when it holds nothing pending; otherwise its own
 * capacity is kept (and said in the error text, which is then a warning: the call succeeds).
 * Returns 0 and *out, or a negative errno with a message in err naming the path (-EINVAL bad
 * capacity, or something other than a regular file at path: a FIFO, a symbolic link, a
 * directory, a device; -EIO unreadable or unwritable, -ENOMEM). Never blocks on what is there.
 */
int em_spool_open(em_spool_t **out, const char *path, uint64_t capacity, char *err, size_t err_cap);

/*
 * Appends one record. Evicts the oldest pending records when the ring is full (counted in
 * dropped). Returns 0; -EMSGSIZE when the record cannot fit in the ring at all; or a negative
 * errno from the write (-ENOSPC, -EFBIG, -EIO): the record is then not stored and counted in
 * write_errors, and the spool stays usable (a later append may succeed).
 */
int em_spool_append(em_spool_t *s, em_spool_kind_t kind, const uint8_t *payload, size_t len);

/*
 * Write-ahead: appends like em_spool_append() but the record is held in flight: it is not
 * pending (em_spool_peek() never returns it), yet `done` does not move past it until it is
 * acknowledged with em_spool_ack(). After a restart (em_spool_open) a record that was held is
 * pending again, so what was never acknowledged is replayed. *number receives its record
 * number. Returns as em_spool_append(), or -EINVAL for a NULL number.
 */
int em_spool_append_held(em_spool_t *s, em_spool_kind_t kind, const uint8_t *payload, size_t len,
                         uint64_t *number);

/*
 * The next record to replay: the oldest pending STATE record if there is one, else the oldest
 * pending DATA record. Copies its payload into buf (cap bytes). Returns the payload length
 * (> 0), 0 when nothing is pending, -ENOBUFS when cap is too small, or -EIO when the record
 * cannot be read back or no longer passes its CRC (it is then dropped, counted in corrupt, and
 * the next call moves on). *kind receives the record's kind.
 */
int em_spool_peek(em_spool_t *s, em_spool_kind_t *kind, uint8_t *buf, size_t cap);

/* Marks the record em_spool_peek() returned as replayed. Returns 0 or -ENOENT. */
int em_spool_pop(em_spool_t *s);

/*
 * Write-ahead replay: like em_spool_pop(), but the record em_spool_peek() returned is held in
 * flight (*number receives its number) until em_spool_ack() or em_spool_release(). Counted in
 * replayed. Returns 0 or -ENOENT.
 */
int em_spool_take(em_spool_t *s, uint64_t *number);

/*
 * Record `number`, held in flight, was acknowledged: it is done. `done` (what the header
 * persists) moves only past a run of done records from the oldest, so an acknowledgement out
 * of order never moves it past a record still in flight. Returns 0, or -ENOENT when no such
 * record is held (evicted by capacity, acknowledged already).
 */
int em_spool_ack(em_spool_t *s, uint64_t number);

/* Record `number`, held in flight, was not sent after all: it is pending again, replayed in
 * number order. Returns 0 or -ENOENT as em_spool_ack(). */
int em_spool_release(em_spool_t *s, uint64_t number);

/* fdatasync()s the file and writes the header (done, dropped). Returns 0 or a negative errno.
 * May run on a worker thread (see the top of this file). */
int em_spool_sync(em_spool_t *s);

/*
 * The two halves of em_spool_sync() for an event loop that must never wait on the disk:
 * em_spool_flush_header() writes the header when done or dropped changed (a pwrite into the
 * page cache, on the loop) and sets *need_sync when anything was written since the last call;
 * the caller then fdatasync()s em_spool_fd() off the loop (libuv's uv_fs_fdatasync). Appends
 * may go on meanwhile: they are pwrites to the same fd, which the kernel orders. Returns 0 or a
 * negative errno (the header write failed, counted in write_errors).
 */
int em_spool_flush_header(em_spool_t *s, bool *need_sync);
int em_spool_fd(const em_spool_t *s);

void em_spool_stats(const em_spool_t *s, em_spool_stats_t *out);

/* Syncs and closes. NULL is a no-op. */
void em_spool_close(em_spool_t *s);

#endif /* EDGEMON_AGENT_SPOOL_H */
