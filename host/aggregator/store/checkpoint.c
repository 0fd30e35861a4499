/*
 * checkpoint.c - the store's WAL checkpointer thread (see checkpoint.h).
 *
 * The thread sleeps on a condition variable (CLOCK_MONOTONIC) for period_ms, then stats
 * PATH-wal and runs sqlite3_wal_checkpoint_v2() on its own connection: PASSIVE, or TRUNCATE
 * when the file is above truncate_bytes. Stopping sets a flag and signals the variable, so
 * em_ckpt_stop() returns within one checkpoint, not one period. Statistics are guarded by the
 * same mutex as the flag.
 */
#define _POSIX_C_SOURCE 200809L
#include "checkpoint.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* How long a TRUNCATE checkpoint waits for the writer's open batch (batch_ms, 500 by default). */
#define EM_CKPT_BUSY_MS 2000

struct em_ckpt {
  sqlite3 *db;
  char *wal_path; /* PATH-wal */
  uint32_t period_ms;
  uint64_t truncate_bytes;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  bool stop;
  em_ckpt_stats_t stats;
};

/* Size of the WAL file in bytes, 0 when it does not exist. */
static uint64_t wal_size(const em_ckpt_t *c) {
  struct stat sb;
  return stat(c->wal_path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

static void run_once(em_ckpt_t *c) {
  uint64_t before = wal_size(c);
  bool truncate = c->truncate_bytes > 0 && before > c->truncate_bytes;
  int log_frames = 0;
  int done_frames = 0;
  int rc = sqlite3_wal_checkpoint_v2(
      c->db, NULL, truncate ? SQLITE_CHECKPOINT_TRUNCATE : SQLITE_CHECKPOINT_PASSIVE, &log_frames,
      &done_frames);
  uint64_t after = wal_size(c);
  pthread_mutex_lock(&c->lock);
  c->stats.runs++;
  c->stats.truncates += truncate ? 1 : 0;
  c->stats.wal_bytes = after;
  c->stats.wal_max_bytes = before > c->stats.wal_max_bytes ? before : c->stats.wal_max_bytes;
  if (rc == SQLITE_OK && log_frames < 0) {
    c->stats.errors++; /* The connection does not see a WAL database: nothing was copied. */
  } else if (rc == SQLITE_OK) {
    c->stats.frames += done_frames > 0 ? (uint64_t)done_frames : 0;
    if (done_frames < log_frames) {
      c->stats.busy++;
    }
  } else if ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED) {
    c->stats.busy++;
  } else {
    c->stats.errors++;
  }
  pthread_mutex_unlock(&c->lock);
}

/* Opens the connection and makes it read the database: journal_mode must answer "wal".
 * Returns 0 or -EIO with a message in err. */
static int open_db(em_ckpt_t *c, const char *path, char *err, size_t err_cap) {
  int rc = sqlite3_open_v2(path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc != SQLITE_OK) {
    snprintf(err, err_cap, "%s: cannot open the checkpoint connection: %s", path,
             c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
    return -EIO;
  }
  sqlite3_busy_timeout(c->db, EM_CKPT_BUSY_MS);
  sqlite3_stmt *st = NULL;
  rc = sqlite3_prepare_v2(c->db, "PRAGMA journal_mode=WAL", -1, &st, NULL);
  char mode[16] = "";
  if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
    const unsigned char *t = sqlite3_column_text(st, 0);
    snprintf(mode, sizeof(mode), "%s", t ? (const char *)t : "");
  }
  sqlite3_finalize(st);
  if (strcmp(mode, "wal") != 0) {
    snprintf(err, err_cap, "%s: the checkpoint connection does not see WAL mode (%s): %s", path,
             mode[0] ? mode : "no answer", sqlite3_errmsg(c->db));
    return -EIO;
  }
  return 0;
}

static void *ckpt_main(void *arg) {
  em_ckpt_t *c = arg;
  pthread_mutex_lock(&c->lock);
  while (!c->stop) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += c->period_ms / 1000;
    until.tv_nsec += (long)(c->period_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    int rc = 0;
    while (!c->stop && rc != ETIMEDOUT) {
      rc = pthread_cond_timedwait(&c->wake, &c->lock, &until);
    }
    if (c->stop) {
      break;
    }
    pthread_mutex_unlock(&c->lock);
    run_once(c);
    pthread_mutex_lock(&c->lock);
  }
  pthread_mutex_unlock(&c->lock);
  return NULL;
}

int em_ckpt_start(em_ckpt_t **out, const char *path, uint32_t period_ms, uint64_t truncate_bytes,
                  char *err, size_t err_cap) {
  *out = NULL;
  em_ckpt_t *c = calloc(1, sizeof(*c));
  size_t n = strlen(path);
  char *wal = c ? malloc(n + 5) : NULL;
  if (!c || !wal) {
    snprintf(err, err_cap, "%s: out of memory", path);
    free(c);
    return -ENOMEM;
  }
  memcpy(wal, path, n);
  memcpy(wal + n, "-wal", 5);
  c->wal_path = wal;
  c->period_ms = period_ms ? period_ms : 1000;
  c->truncate_bytes = truncate_bytes;
  if (open_db(c, path, err, err_cap) != 0) {
    sqlite3_close(c->db);
    free(c->wal_path);
    free(c);
    return -EIO;
  }
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&c->wake, &attr);
  pthread_condattr_destroy(&attr);
  pthread_mutex_init(&c->lock, NULL);
  int rc = pthread_create(&c->thread, NULL, ckpt_main, c);
  if (rc != 0) {
    snprintf(err, err_cap, "%s: cannot start the checkpoint thread: errno %d", path, rc);
    pthread_cond_destroy(&c->wake);
    pthread_mutex_destroy(&c->lock);
    sqlite3_close(c->db);
    free(c->wal_path);
    free(c);
    return -EIO;
  }
  *out = c;
  return 0;
}

void em_ckpt_stats(em_ckpt_t *c, em_ckpt_stats_t *out) {
  if (!c) {
    *out = (em_ckpt_stats_t){0};
    return;
  }
  pthread_mutex_lock(&c->lock);
  *out = c->stats;
  pthread_mutex_unlock(&c->lock);
}

void em_ckpt_stop(em_ckpt_t *c) {
  if (!c) {
    return;
  }
  pthread_mutex_lock(&c->lock);
  c->stop = true;
  pthread_cond_signal(&c->wake);
  pthread_mutex_unlock(&c->lock);
  pthread_join(c->thread, NULL);
  run_once(c);
  pthread_cond_destroy(&c->wake);
  pthread_mutex_destroy(&c->lock);
  sqlite3_close(c->db);
  free(c->wal_path);
  free(c);
}
