/*
 * checkpoint.c - the store's WAL checkpointer thread (see checkpoint.h).
 *
 * The thread sleeps on a condition variable (CLOCK_MONOTONIC) for period_ms, then runs
 * sqlite3_wal_checkpoint_v2(PASSIVE) on its own connection. Stopping sets a flag and signals
 * the variable, so em_ckpt_stop() returns within one checkpoint, not one period. Statistics are
 * guarded by the same mutex as the flag.
 */
#define _POSIX_C_SOURCE 200809L
#include "checkpoint.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define EM_CKPT_BUSY_MS 1000
/* A WAL file larger than this is truncated back to it when the log restarts. */
#define EM_CKPT_WAL_LIMIT_BYTES (64ll * 1024 * 1024)

struct em_ckpt {
  sqlite3 *db;
  uint32_t period_ms;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  bool stop;
  em_ckpt_stats_t stats;
};

static void run_once(em_ckpt_t *c) {
  int log_frames = 0;
  int done_frames = 0;
  int rc =
      sqlite3_wal_checkpoint_v2(c->db, NULL, SQLITE_CHECKPOINT_PASSIVE, &log_frames, &done_frames);
  pthread_mutex_lock(&c->lock);
  c->stats.runs++;
  if (rc == SQLITE_OK) {
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

int em_ckpt_start(em_ckpt_t **out, const char *path, uint32_t period_ms, char *err,
                  size_t err_cap) {
  *out = NULL;
  em_ckpt_t *c = calloc(1, sizeof(*c));
  if (!c) {
    snprintf(err, err_cap, "%s: out of memory", path);
    return -ENOMEM;
  }
  c->period_ms = period_ms ? period_ms : 1000;
  int rc = sqlite3_open_v2(path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc == SQLITE_OK) {
    sqlite3_busy_timeout(c->db, EM_CKPT_BUSY_MS);
    char sql[64];
    snprintf(sql, sizeof(sql), "PRAGMA journal_size_limit=%lld", EM_CKPT_WAL_LIMIT_BYTES);
    rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
  }
  if (rc != SQLITE_OK) {
    snprintf(err, err_cap, "%s: cannot open the checkpoint connection: %s", path,
             c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
    sqlite3_close(c->db);
    free(c);
    return -EIO;
  }
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&c->wake, &attr);
  pthread_condattr_destroy(&attr);
  pthread_mutex_init(&c->lock, NULL);
  rc = pthread_create(&c->thread, NULL, ckpt_main, c);
  if (rc != 0) {
    snprintf(err, err_cap, "%s: cannot start the checkpoint thread: errno %d", path, rc);
    pthread_cond_destroy(&c->wake);
    pthread_mutex_destroy(&c->lock);
    sqlite3_close(c->db);
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
  free(c);
}
