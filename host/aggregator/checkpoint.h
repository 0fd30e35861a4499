/*
 * checkpoint.h - the store's WAL checkpointer: a thread with its own SQLite connection that
 * copies the write-ahead log back into the database file every period.
 *
 * In WAL mode a commit only appends to PATH-wal; a checkpoint copies those pages into PATH and
 * syncs it. Left to SQLite's automatic checkpoint, that copy and its fsync run inside the
 * writer's COMMIT, on the aggregator's MQTT thread, several times a second at fleet rates
 * (measured: ingest capped at 12k msg/s with it, 17k without). The store turns the automatic
 * checkpoint off and starts this thread instead: PASSIVE checkpoints never block the writer or
 * readers, and once one has copied every frame the writer starts the log over from its
 * beginning, so PATH-wal stops growing. journal_size_limit truncates a log that grew large.
 *
 * Owns its thread and its connection. em_ckpt_stop() runs one last checkpoint, then joins.
 */
#ifndef EM_AGG_CHECKPOINT_H
#define EM_AGG_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

typedef struct em_ckpt em_ckpt_t;

/* Starts checkpointing the WAL database at path every period_ms (> 0). Returns 0, or -EIO /
 * -ENOMEM with a message in err. */
int em_ckpt_start(em_ckpt_t **out, const char *path, uint32_t period_ms, char *err, size_t err_cap);

typedef struct {
  uint64_t runs;   /* Checkpoints attempted. */
  uint64_t frames; /* WAL frames copied into the database, in all. */
  uint64_t busy;   /* Runs that could not complete (a reader or the writer held frames). */
  uint64_t errors; /* Runs that failed outright. */
} em_ckpt_stats_t;

void em_ckpt_stats(em_ckpt_t *c, em_ckpt_stats_t *out);

/* Checkpoints once more, stops the thread and closes its connection. NULL is a no-op. */
void em_ckpt_stop(em_ckpt_t *c);

#endif /* EM_AGG_CHECKPOINT_H */
