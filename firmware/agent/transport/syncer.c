/*
 * syncer.c - see syncer.h. The request slot (fd, asked_ns) and the thread's result (rc,
 * started_ns) are guarded by the mutex; `state` says whose turn it is. The loop's side runs
 * only on the loop's thread.
 */
#define _POSIX_C_SOURCE 200809L

#include "syncer.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

enum { IDLE, ASKED, SYNCING, DONE };

struct em_syncer {
  uv_loop_t *loop;
  uv_async_t wake; /* The thread's word to the loop: a sync is done, or the thread ended. */
  uv_thread_t thread;
  uv_mutex_t lock;
  uv_cond_t cond;
  bool started; /* The thread runs: join it at close. */
  bool quit;    /* Under lock: the thread ends once the slot is IDLE or DONE. */
  bool ended;   /* Under lock: the thread returned. */
  bool no_wake; /* Under lock: no handle to wake the loop with (not made, or failed). */
  bool closing; /* em_syncer_close ran (the loop's side). */
  int state;    /* Under lock. */
  int fd;       /* Under lock: the ask. */
  uint64_t asked_ns;
  int rc; /* Under lock: fdatasync's result, 0 or -errno. */
  void (*done)(void *ctx, int rc);
  void *done_ctx;
  void (*closed)(void *ctx);
  void *closed_ctx;
  em_syncer_stats_t st; /* Written under lock by the thread (waits), read by the loop. */
};

static void run(void *arg) {
  em_syncer_t *s = arg;
  uv_mutex_lock(&s->lock);
  for (;;) {
    while (s->state != ASKED && !s->quit) {
      uv_cond_wait(&s->cond, &s->lock);
    }
    if (s->state != ASKED) {
      break; /* quit with nothing asked */
    }
    int fd = s->fd;
    uint64_t start = uv_hrtime();
    uint64_t wait = start - s->asked_ns;
    s->st.wait_last_ns = wait;
    s->st.wait_max_ns = wait > s->st.wait_max_ns ? wait : s->st.wait_max_ns;
    s->state = SYNCING;
    uv_mutex_unlock(&s->lock);
    int rc = fdatasync(fd) == 0 ? 0 : -errno;
    uv_mutex_lock(&s->lock);
    s->rc = rc;
    s->st.syncs++;
    s->st.failed += rc != 0;
    s->state = DONE;
    uv_async_send(&s->wake);
  }
  s->ended = true;
  uv_mutex_unlock(&s->lock);
  uv_async_send(&s->wake);
}

static void on_handle_closed(uv_handle_t *h) {
  em_syncer_t *s = h->data;
  if (s->closed) {
    s->closed(s->closed_ctx);
  }
}

/* On the loop: hand a finished sync to its caller; after close, finish once the thread ended. */
static void on_wake(uv_async_t *h) {
  em_syncer_t *s = h->data;
  uv_mutex_lock(&s->lock);
  bool finished = s->state == DONE;
  int rc = s->rc;
  bool ended = s->ended;
  if (finished) {
    s->state = IDLE;
  }
  uv_mutex_unlock(&s->lock);
  if (finished && s->done) {
    void (*done)(void *, int) = s->done;
    s->done = NULL;
    done(s->done_ctx, rc);
  }
  if (s->closing && ended && !uv_is_closing((uv_handle_t *)&s->wake)) {
    uv_thread_join(&s->thread); /* It has returned: no wait. */
    s->started = false;
    uv_close((uv_handle_t *)&s->wake, on_handle_closed);
  }
}

int em_syncer_new(em_syncer_t **out, uv_loop_t *loop) {
  if (!out || !loop) {
    return -EINVAL;
  }
  em_syncer_t *s = calloc(1, sizeof(*s));
  if (!s) {
    return -ENOMEM;
  }
  s->loop = loop;
  s->fd = -1;
  int rc = uv_mutex_init(&s->lock);
  if (rc) {
    free(s);
    return rc;
  }
  rc = uv_cond_init(&s->cond);
  if (rc) {
    uv_mutex_destroy(&s->lock);
    free(s);
    return rc;
  }
  *out = s;
  return 0;
}

int em_syncer_start(em_syncer_t *s) {
  if (!s || s->started || s->closing) {
    return -EINVAL;
  }
  int rc = uv_async_init(s->loop, &s->wake, on_wake);
  if (rc) {
    return rc;
  }
  s->wake.data = s;
  rc = uv_thread_create(&s->thread, run, s);
  if (rc) {
    s->closing = true; /* The handle exists: closed through the loop, closed() then. */
    uv_close((uv_handle_t *)&s->wake, on_handle_closed);
    return rc;
  }
  s->started = true;
  return 0;
}

int em_syncer_sync(em_syncer_t *s, int fd, void (*done)(void *ctx, int rc), void *ctx) {
  if (!s || fd < 0 || !s->started || s->closing) {
    return -EINVAL;
  }
  uv_mutex_lock(&s->lock);
  if (s->state != IDLE) {
    uv_mutex_unlock(&s->lock);
    return -EBUSY;
  }
  s->fd = fd;
  s->asked_ns = uv_hrtime();
  s->state = ASKED;
  s->done = done;
  s->done_ctx = ctx;
  uv_cond_signal(&s->cond);
  uv_mutex_unlock(&s->lock);
  return 0;
}

bool em_syncer_busy(const em_syncer_t *s) {
  if (!s) {
    return false;
  }
  uv_mutex_lock((uv_mutex_t *)&s->lock);
  bool busy = s->state != IDLE;
  uv_mutex_unlock((uv_mutex_t *)&s->lock);
  return busy;
}

void em_syncer_stats(const em_syncer_t *s, em_syncer_stats_t *out) {
  if (!out) {
    return;
  }
  *out = (em_syncer_stats_t){0};
  if (!s) {
    return;
  }
  uv_mutex_lock((uv_mutex_t *)&s->lock);
  *out = s->st;
  uv_mutex_unlock((uv_mutex_t *)&s->lock);
}

void em_syncer_close(em_syncer_t *s, void (*closed)(void *ctx), void *ctx) {
  s->closed = closed;
  s->closed_ctx = ctx;
  if (s->closing) {
    return; /* A failed start: its handle is closing, closed() follows. */
  }
  s->closing = true;
  if (!s->started) {
    if (closed) {
      closed(ctx); /* Nothing ever ran. */
    }
    return;
  }
  uv_mutex_lock(&s->lock);
  s->quit = true;
  uv_cond_signal(&s->cond);
  uv_mutex_unlock(&s->lock);
  /* The thread's last uv_async_send brings on_wake, which joins it and closes the handle. */
}

void em_syncer_free(em_syncer_t *s) {
  if (!s) {
    return;
  }
  uv_cond_destroy(&s->cond);
  uv_mutex_destroy(&s->lock);
  free(s);
}
