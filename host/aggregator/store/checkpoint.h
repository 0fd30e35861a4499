/*
 * checkpoint.h - the store's WAL checkpointer: a thread with its own SQLite connection that
 * copies the write-ahead log back into the database file every period and keeps the log file
 * under a bound.
 *
 * In WAL mode a commit only appends to PATH-wal; a checkpoint copies those pages into PATH and
 * syncs it. Left to SQLite's automatic checkpoint, that copy and its fsync run inside the
 * writer's COMMIT, on the aggregator's MQTT thread, several times a second at fleet rates
 * (measured: ingest capped at 12k msg/s with it, 17k without). The store raises the automatic
 * checkpoint to a backstop (EM_STORE_WAL_BACKSTOP_BYTES in store.c) and starts this thread:
 *
 *   every period_ms:  WAL file > truncate_bytes ?  TRUNCATE : PASSIVE
 *
 * PASSIVE never blocks the writer or readers; once it has copied every frame, the writer's next
 * commit starts the log over from its beginning (and, with the writer's journal_size_limit,
 * cuts the file back), so PATH-wal stops growing. TRUNCATE waits (busy timeout) for the writer's
 * open batch, copies everything and truncates PATH-wal to zero bytes: the path taken when
 * PASSIVE could not keep up (a reader held old frames, or a burst outgrew a period).
 *
 * The connection reads the database and asks for journal_mode=WAL when it opens: a connection
 * that has not read the file does not know it is in WAL mode, and its checkpoints report
 * log = -1 and copy nothing. A run that reports log = -1 counts as an error.
 *
 * Owns its thread and its connection. em_ckpt_stop() runs one last checkpoint, then joins.
 */
#ifndef EM_AGG_CHECKPOINT_H
#define EM_AGG_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

typedef struct em_ckpt em_ckpt_t;

/* Starts checkpointing the WAL database at path (copied) every period_ms (0: 1000); a WAL file
 * above truncate_bytes (0: never) is checkpointed with TRUNCATE. Returns 0, or -EIO / -ENOMEM
 * with a message in err. */
int em_ckpt_start(em_ckpt_t **out, const char *path, uint32_t period_ms, uint64_t truncate_bytes,
                  char *err, size_t err_cap);

typedef struct {
  uint64_t runs;          /* Checkpoints attempted. */
  uint64_t frames;        /* WAL frames copied into the database, in all. */
  uint64_t busy;          /* Runs that could not copy every frame (a reader or the writer). */
  uint64_t errors;        /* Runs that failed outright, or found the database not in WAL mode. */
  uint64_t truncates;     /* Runs in TRUNCATE mode (the WAL file was above the bound). */
  uint64_t wal_bytes;     /* Size of PATH-wal after the latest run. */
  uint64_t wal_max_bytes; /* Largest size of PATH-wal seen before a run. */
} em_ckpt_stats_t;

/* Copies the statistics (thread-safe). A NULL c gives zeros. */
void em_ckpt_stats(em_ckpt_t *c, em_ckpt_stats_t *out);

/* Checkpoints once more, stops the thread and closes its connection. NULL is a no-op. */
void em_ckpt_stop(em_ckpt_t *c);

#endif /* EM_AGG_CHECKPOINT_H */
