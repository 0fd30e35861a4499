/*
 * hook.c - see hook.h.
 *
 *   IDLE --run--> RUNNING --exit, both pipes at EOF, all closed--> IDLE (or RUNNING again
 *                   |  ^                                              when a change waits)
 *                   |  +-- run: the change waits (the latest one only)
 *                   +-- timeout: SIGKILL, then as exit
 *
 *   edge                 function
 *   IDLE -> RUNNING      em_hook_run / release (a change waits) -> start
 *   RUNNING -> IDLE      on_hook_exit, on_read (EOF) -> release
 *   timeout              on_timeout
 */
#define _POSIX_C_SOURCE 200809L

#include "hook.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

extern char **environ;

#define N_VARS     7
#define LINE_BYTES 512

struct em_hook {
  uv_loop_t *loop;
  char path[256];
  uint64_t timeout_ms;
  uv_timer_t timer;
  uv_process_t proc;
  uv_pipe_t pipes[2]; /* stdout, stderr */
  bool running;
  unsigned open_handles; /* Of the run in progress: process and pipes not yet closed. */
  bool waiting;
  em_state_record_t next;
  bool closing;
  void (*close_done)(void *);
  void *close_ctx;
  char args[N_VARS][160];
  char vars[N_VARS][180];
  char *argv[N_VARS + 2];
  char **envp;
  char line[2][LINE_BYTES];
  size_t line_len[2];
  em_hook_stats_t stats;
};

static const char *const var_names[N_VARS] = {
    "EDGEMON_LEVEL", "EDGEMON_PREV_LEVEL", "EDGEMON_RULE",  "EDGEMON_STAGE",
    "EDGEMON_VALUE", "EDGEMON_BOUND",      "EDGEMON_REASON"};

static void start(em_hook_t *h, const em_state_record_t *rec);

static void number(char *out, size_t cap, double v) {
  if (isnan(v)) {
    out[0] = '\0';
  } else {
    snprintf(out, cap, "%.17g", v);
  }
}

/* Fills argv and the EDGEMON_* variables from a change. */
static void describe(em_hook_t *h, const em_state_record_t *r) {
  snprintf(h->args[0], sizeof(h->args[0]), "%s", em_level_name(r->level));
  snprintf(h->args[1], sizeof(h->args[1]), "%s", em_level_name(r->prev_level));
  snprintf(h->args[2], sizeof(h->args[2]), "%s", r->rule);
  snprintf(h->args[3], sizeof(h->args[3]), "%s", r->stage);
  number(h->args[4], sizeof(h->args[4]), r->value);
  number(h->args[5], sizeof(h->args[5]), r->bound);
  snprintf(h->args[6], sizeof(h->args[6]), "%s", r->reason);
  for (int i = 0; i < N_VARS; i++) {
    snprintf(h->vars[i], sizeof(h->vars[i]), "%s=%s", var_names[i], h->args[i]);
  }
}

static void on_timer_closed(uv_handle_t *t) {
  em_hook_t *h = t->data;
  if (h->close_done) {
    h->close_done(h->close_ctx);
  }
}

/* One handle of the run is closed; when the last is, the next waiting change runs. */
static void release(uv_handle_t *handle) {
  em_hook_t *h = handle->data;
  if (--h->open_handles > 0) {
    return;
  }
  h->running = false;
  if (h->closing) {
    uv_close((uv_handle_t *)&h->timer, on_timer_closed);
    return;
  }
  if (h->waiting) {
    h->waiting = false;
    start(h, &h->next);
  }
}

/* Logs complete lines of what the hook printed; `flush` logs a last partial one too. */
static void log_lines(em_hook_t *h, int which, bool flush) {
  char *buf = h->line[which];
  size_t start_at = 0;
  for (size_t i = 0; i < h->line_len[which]; i++) {
    if (buf[i] == '\n') {
      EM_INFO("hook: %.*s", (int)(i - start_at), buf + start_at);
      start_at = i + 1;
    }
  }
  size_t rest = h->line_len[which] - start_at;
  if (flush && rest > 0) {
    EM_INFO("hook: %.*s", (int)rest, buf + start_at);
    rest = 0;
    start_at = h->line_len[which];
  }
  memmove(buf, buf + start_at, rest);
  h->line_len[which] = rest;
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  em_hook_t *h = handle->data;
  int which = handle == (uv_handle_t *)&h->pipes[1];
  if (h->line_len[which] == LINE_BYTES) {
    log_lines(h, which, true); /* A line longer than the buffer goes out in pieces. */
  }
  *buf =
      uv_buf_init(h->line[which] + h->line_len[which], (unsigned)(LINE_BYTES - h->line_len[which]));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  (void)buf;
  em_hook_t *h = s->data;
  int which = s == (uv_stream_t *)&h->pipes[1];
  if (n > 0) {
    h->line_len[which] += (size_t)n;
    log_lines(h, which, false);
    return;
  }
  if (n < 0) { /* EOF or an error: the pipe is done. */
    log_lines(h, which, true);
    uv_close((uv_handle_t *)s, release);
  }
}

static void on_hook_exit(uv_process_t *p, int64_t status, int signal) {
  em_hook_t *h = p->data;
  uv_timer_stop(&h->timer);
  if (status != 0 || signal != 0) {
    h->stats.failed++;
    EM_WARN("hook %s: %s %lld", h->path, signal ? "killed by signal" : "exited with",
            (long long)(signal ? signal : status));
  }
  uv_close((uv_handle_t *)p, release);
}

static void on_timeout(uv_timer_t *t) {
  em_hook_t *h = t->data;
  h->stats.timeouts++;
  EM_WARN("hook %s: still running after %llu ms, killing it", h->path,
          (unsigned long long)h->timeout_ms);
  uv_process_kill(&h->proc, SIGKILL);
}

static void start(em_hook_t *h, const em_state_record_t *rec) {
  describe(h, rec);
  for (int i = 0; i < 2; i++) {
    uv_pipe_init(h->loop, &h->pipes[i], 0);
    h->pipes[i].data = h;
    h->line_len[i] = 0;
  }
  uv_stdio_container_t stdio[3] = {
      {.flags = UV_IGNORE},
      {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&h->pipes[0]},
      {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&h->pipes[1]},
  };
  uv_process_options_t o = {.file = h->path,
                            .args = h->argv,
                            .env = h->envp,
                            .stdio = stdio,
                            .stdio_count = 3,
                            .exit_cb = on_hook_exit};
  h->proc.data = h;
  h->running = true;
  h->open_handles = 3;
  h->stats.runs++;
  int rc = uv_spawn(h->loop, &h->proc, &o);
  if (rc) {
    h->stats.failed++;
    EM_WARN("hook %s: cannot start: %s", h->path, uv_strerror(rc));
    for (int i = 0; i < 2; i++) {
      uv_close((uv_handle_t *)&h->pipes[i], release);
    }
    uv_close((uv_handle_t *)&h->proc, release);
    return;
  }
  for (int i = 0; i < 2; i++) {
    uv_read_start((uv_stream_t *)&h->pipes[i], on_alloc, on_read);
  }
  uv_timer_start(&h->timer, on_timeout, h->timeout_ms ? h->timeout_ms : 1, 0);
}

int em_hook_new(em_hook_t **out, uv_loop_t *loop, const char *path, uint64_t timeout_ns) {
  if (!out || !loop || !path || path[0] != '/' || strlen(path) >= sizeof(((em_hook_t *)0)->path)) {
    return -EINVAL;
  }
  size_t n_env = 0;
  while (environ && environ[n_env]) {
    n_env++;
  }
  em_hook_t *h = calloc(1, sizeof(*h));
  char **envp = calloc(n_env + N_VARS + 1, sizeof(char *));
  if (!h || !envp) {
    free(h);
    free(envp);
    return -ENOMEM;
  }
  h->loop = loop;
  snprintf(h->path, sizeof(h->path), "%s", path);
  h->timeout_ms = timeout_ns / 1000000u;
  h->argv[0] = h->path;
  for (int i = 0; i < N_VARS; i++) {
    h->argv[i + 1] = h->args[i];
    envp[i] = h->vars[i];
  }
  size_t k = N_VARS;
  for (size_t i = 0; i < n_env; i++) {
    if (strncmp(environ[i], "EDGEMON_", 8) != 0) { /* Ours win over inherited ones. */
      envp[k++] = environ[i];
    }
  }
  h->envp = envp;
  uv_timer_init(loop, &h->timer);
  h->timer.data = h;
  *out = h;
  return 0;
}

void em_hook_run(em_hook_t *h, const em_state_record_t *rec) {
  if (h->closing) {
    return;
  }
  if (h->running) {
    h->stats.coalesced += h->waiting;
    h->waiting = true;
    h->next = *rec;
    return;
  }
  start(h, rec);
}

const em_hook_stats_t *em_hook_stats(const em_hook_t *h) {
  return &h->stats;
}

void em_hook_close(em_hook_t *h, void (*done)(void *), void *ctx) {
  if (h->closing) {
    return;
  }
  h->closing = true;
  h->waiting = false;
  h->close_done = done;
  h->close_ctx = ctx;
  if (h->running) {
    uv_process_kill(&h->proc, SIGKILL); /* release() finishes the close once it is reaped. */
    return;
  }
  uv_close((uv_handle_t *)&h->timer, on_timer_closed);
}

void em_hook_free(em_hook_t *h) {
  if (!h) {
    return;
  }
  free(h->envp);
  free(h);
}
