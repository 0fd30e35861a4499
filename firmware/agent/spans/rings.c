/*
 * rings.c - see rings.h.
 *
 * A ring is untrusted memory another process may change at any moment: only the proto reader
 * (em_ring_reader_drain) looks at its slots, and the header is read through
 * em_ring_header_read, whose result is checked every time. The descriptor and mapping are
 * released as soon as a ring is dropped; only the pidfd waits for its uv_poll_t to close.
 * A writer can register and close rings at will, so their "registered" and "dropped" lines are
 * rate-limited (log.h): the first of each EM_LOG_LIMIT_NS, then a count on the next drain.
 */
#define _GNU_SOURCE /* struct ucred, F_GET_SEALS, SYS_pidfd_open */

#include "rings.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "edgemon/common/file.h"
#include "log.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434 /* The same number on every architecture the agent runs on. */
#endif

#define PROC_CHECK_NS 1000000000u /* Without pidfds: a process's start time checked this often. */

typedef enum { RING_FREE = 0, RING_ACTIVE, RING_CLOSING } ring_state_t;

typedef struct {
  ring_state_t state;
  uint64_t id;
  uint32_t pid;
  uint32_t tid;        /* The header's writer thread when it is one of pid's, else 0. */
  uint64_t start_time; /* Clock ticks after boot, /proc/<pid>/stat field 22. */
  int fd;              /* The ring's memfd. */
  int pidfd;           /* -1 without pidfds (then checked by start time). */
  const void *mem;     /* PROT_READ mapping of len bytes. */
  size_t len;
  uint64_t next_check_ns; /* Without pidfds: next start-time check. */
  bool poll_open;
  uv_poll_t poll;
  em_rings_t *owner;
  em_ring_counts_t counted; /* Reader counts already added to the totals. */
  em_ring_reader_t reader;
} ring_t;

struct em_rings {
  em_log_limit_t refused_log; /* Refusal lines: a peer can cause them at will. */
  uv_loop_t *loop;
  em_spans_t *spans;
  em_rings_opts_t opts;
  char proc_root[128];
  uint64_t next_id;
  uint64_t now_ns;        /* The drain in progress: a span's last sight is clamped to it. */
  const ring_t *draining; /* The ring fold_one's spans come from. */
  em_rings_span_fn observe;
  void *observe_ctx;
  bool no_pidfd;       /* pidfd_open said ENOSYS once: never tried again. */
  unsigned open_polls; /* uv_poll_t handles not closed yet. */
  bool closing;
  void (*close_done)(void *);
  void *close_ctx;
  uv_idle_t idle; /* Reports close done from the loop when no handle was open. */
  bool idle_open;
  em_rings_stats_t stats;
  size_t active;
  ring_t *table;               /* opts.max_rings entries. */
  em_log_limit_t register_log; /* "registered" lines: a writer can register and close at will. */
  em_log_limit_t drop_log;     /* "dropped" lines, the other half of that cycle. */
};

int em_rings_new(em_rings_t **out, uv_loop_t *loop, em_spans_t *spans,
                 const em_rings_opts_t *opts) {
  if (!out || !loop || !spans || !opts || opts->max_rings == 0 || opts->max_per_process == 0) {
    return -EINVAL;
  }
  em_rings_t *r = calloc(1, sizeof(*r));
  if (!r) {
    return -ENOMEM;
  }
  r->table = calloc(opts->max_rings, sizeof(*r->table));
  if (!r->table) {
    free(r);
    return -ENOMEM;
  }
  r->loop = loop;
  r->spans = spans;
  r->opts = *opts;
  snprintf(r->proc_root, sizeof(r->proc_root), "%s", opts->proc_root ? opts->proc_root : "/proc");
  r->opts.proc_root = r->proc_root;
  r->no_pidfd = opts->no_pidfd;
  for (size_t i = 0; i < opts->max_rings; i++) {
    r->table[i].fd = -1;
    r->table[i].pidfd = -1;
    r->table[i].owner = r;
  }
  *out = r;
  return 0;
}

/*
 * The start time (field 22 of <proc_root>/<pid>/stat) of a live process. Returns 0 and
 * *ticks, or a negative errno (-ESRCH: gone or a zombie).
 */
static int start_time_of(const em_rings_t *r, uint32_t pid, uint64_t *ticks) {
  char path[192];
  snprintf(path, sizeof(path), "%s/%u/stat", r->proc_root, (unsigned)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return errno == ENOENT ? -ESRCH : -errno;
  }
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) {
    return -ESRCH;
  }
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* The name (field 2) may hold spaces and parentheses. */
  if (!p || p[1] != ' ') {
    return -EINVAL;
  }
  p += 2; /* Field 3, the state. */
  if (*p == 'Z' || *p == 'X') {
    return -ESRCH;
  }
  for (int field = 3; field < 22; field++) {
    p = strchr(p, ' ');
    if (!p) {
      return -EINVAL;
    }
    p++;
  }
  char *end = NULL;
  unsigned long long v = strtoull(p, &end, 10);
  if (end == p) {
    return -EINVAL;
  }
  *ticks = v;
  return 0;
}

/* Whether tid is a thread of pid now (the ring header's tid is the writer's word only). */
static bool thread_of(const em_rings_t *r, uint32_t pid, uint32_t tid) {
  char path[192];
  struct stat st;
  snprintf(path, sizeof(path), "%s/%u/task/%u", r->proc_root, (unsigned)pid, (unsigned)tid);
  return tid != 0 && stat(path, &st) == 0;
}

static void fold_one(void *ctx, const em_span_t *span) {
  em_rings_t *r = ctx;
  uint64_t end_ns = span->start_ns + span->duration_ns;
  if (end_ns < span->start_ns || end_ns > r->now_ns) {
    end_ns = r->now_ns; /* A clock in the future or an overflow: now. */
  }
  if (em_spans_fold(r->spans, span, NULL, end_ns) && span->kind == EM_DGRAM_SPAN) {
    r->stats.spans++;
    if (r->observe) {
      r->observe(r->observe_ctx, r->draining->pid, r->draining->tid, span);
    }
  }
}

/* Drains one ring and adds what its reader classified to the totals. */
static void drain_one(em_rings_t *r, ring_t *g, bool final) {
  r->draining = g;
  em_ring_reader_drain(&g->reader, g->mem, final, fold_one, r);
  const em_ring_counts_t *c = &g->reader.counts;
  r->stats.overwritten += c->overwritten - g->counted.overwritten;
  r->stats.bad_slot += c->bad_slot - g->counted.bad_slot;
  r->stats.bad_head += c->bad_head - g->counted.bad_head;
  r->stats.skipped += c->skipped - g->counted.skipped;
  g->counted = *c;
}

static void maybe_done(em_rings_t *r) {
  if (r->closing && r->open_polls == 0 && r->close_done) {
    void (*done)(void *) = r->close_done;
    r->close_done = NULL;
    done(r->close_ctx);
  }
}

static void on_poll_closed(uv_handle_t *h) {
  ring_t *g = h->data;
  em_rings_t *r = g->owner;
  if (g->pidfd >= 0) {
    close(g->pidfd);
    g->pidfd = -1;
  }
  g->poll_open = false;
  g->state = RING_FREE;
  r->open_polls--;
  maybe_done(r);
}

/* Final drain (when the writer is gone or done), then unmaps and closes the ring. */
static void drop(em_rings_t *r, ring_t *g, bool final_drain, const char *why) {
  if (g->state != RING_ACTIVE) {
    return;
  }
  if (final_drain) {
    drain_one(r, g, true);
  }
  if (r->closing || em_log_limit_pass(&r->drop_log, uv_hrtime(), EM_LOG_LIMIT_NS)) {
    EM_INFO("rings: ring %llu of pid %u dropped (%s): %llu folded, %llu overwritten, %llu bad",
            (unsigned long long)g->id, (unsigned)g->pid, why,
            (unsigned long long)g->reader.counts.folded,
            (unsigned long long)g->reader.counts.overwritten,
            (unsigned long long)g->reader.counts.bad_slot);
  }
  munmap((void *)g->mem, g->len);
  g->mem = NULL;
  close(g->fd);
  g->fd = -1;
  r->active--;
  r->stats.dropped++;
  if (g->poll_open) {
    g->state = RING_CLOSING;
    uv_close((uv_handle_t *)&g->poll, on_poll_closed);
    return;
  }
  if (g->pidfd >= 0) {
    close(g->pidfd);
    g->pidfd = -1;
  }
  g->state = RING_FREE;
}

static void on_pidfd(uv_poll_t *p, int status, int events) {
  (void)status;
  (void)events;
  ring_t *g = p->data;
  em_rings_t *r = g->owner;
  r->now_ns = uv_hrtime();
  drop(r, g, true, "process exited");
}

/* Sends the ack of a register to its sender (nothing when the sender has no address). */
static void ack(em_rings_t *r, const em_ring_dgram_t *reg, int status, uint64_t id,
                const struct sockaddr_un *from, socklen_t from_len) {
  if (!from || from_len <= sizeof(sa_family_t)) {
    return;
  }
  em_ring_dgram_t a = {.kind = EM_DGRAM_RING_ACK,
                       .pid = (uint32_t)getpid(),
                       .start = reg->start,
                       .status = status,
                       .ring_id = id};
  uint8_t buf[EM_SPAN_DGRAM_BYTES];
  if (em_ring_dgram_pack(&a, buf) != 0) {
    return;
  }
  int rc = em_spans_send_to(r->spans, from, from_len, buf, sizeof(buf));
  if (rc) {
    EM_DEBUG("rings: ack to pid %u not sent: %s", (unsigned)reg->pid, strerror(-rc));
  }
}

/* The descriptor's checks: a sealed regular file of a ring's size range. Returns its size. */
static int check_fd(int fd, size_t *len) {
  if (fd < 0) {
    return -EINVAL;
  }
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_SEAL)) != (F_SEAL_SHRINK | F_SEAL_SEAL)) {
    return -EINVAL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0 ||
      (uint64_t)st.st_size < em_ring_bytes(EM_RING_MIN_SLOTS) ||
      (uint64_t)st.st_size > em_ring_bytes(EM_RING_MAX_SLOTS)) {
    return -EINVAL;
  }
  *len = (size_t)st.st_size;
  return 0;
}

/* Opens a pidfd for pid, or -1 with r->no_pidfd set when the kernel has none. */
static int open_pidfd(em_rings_t *r, uint32_t pid, int *pidfd) {
  *pidfd = -1;
  if (r->no_pidfd) {
    return 0;
  }
  long fd = syscall(SYS_pidfd_open, (pid_t)pid, 0u);
  if (fd >= 0) {
    *pidfd = (int)fd;
    fcntl(*pidfd, F_SETFD, FD_CLOEXEC);
    return 0;
  }
  if (errno == ENOSYS || errno == EPERM) {
    /* ENOSYS: a kernel before 5.3 (JetPack 4's 4.9). EPERM, which pidfd_open itself never
     * gives: a seccomp filter that predates it (a container runtime's default profile). */
    r->no_pidfd = true;
    EM_WARN("rings: pidfd_open: %s (kernel before 5.3, or a seccomp filter): writers are "
            "checked once a second",
            strerror(errno));
    return 0;
  }
  return -EINVAL; /* ESRCH: gone already. */
}

/* The caps: a free entry, or -EMFILE / -ENOSPC. */
static int find_slot(em_rings_t *r, uint32_t pid, ring_t **out) {
  size_t mine = 0;
  ring_t *free_entry = NULL;
  for (size_t i = 0; i < r->opts.max_rings; i++) {
    ring_t *g = &r->table[i];
    if (g->state == RING_ACTIVE && g->pid == pid) {
      mine++;
    } else if (g->state == RING_FREE && !free_entry) {
      free_entry = g;
    }
  }
  if (mine >= r->opts.max_per_process) {
    return -EMFILE;
  }
  if (!free_entry) {
    return -ENOSPC;
  }
  *out = free_entry;
  return 0;
}

static int register_ring(em_rings_t *r, const em_ring_dgram_t *reg, int fd, bool allowed,
                         const struct ucred *sender, const struct sockaddr_un *from,
                         socklen_t from_len) {
  int rc = 0;
  const void *mem = MAP_FAILED;
  size_t len = 0;
  int pidfd = -1;
  ring_t *g = NULL;
  em_ring_header_t hdr;
  uint32_t pid = em_spans_sender_pid(sender);
  if (r->closing) {
    rc = -ESHUTDOWN;
  } else if (!allowed || pid == 0) {
    rc = -EPERM;
  }
  if (!rc) {
    rc = check_fd(fd, &len);
  }
  if (!rc) {
    mem = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    rc = mem == MAP_FAILED ? -EINVAL : 0;
  }
  if (!rc && (em_ring_header_read(mem, len, &hdr) != 0 || hdr.pid != pid)) {
    rc = -EINVAL;
  }
  if (!rc) {
    rc = open_pidfd(r, pid, &pidfd);
  }
  uint64_t start_time = 0;
  if (!rc && (start_time_of(r, pid, &start_time) != 0 || start_time != hdr.start_time)) {
    rc = -EINVAL; /* Checked after the pidfd: the pidfd is this process's, not a reuser's. */
  }
  if (!rc) {
    rc = find_slot(r, pid, &g);
  }
  if (!rc && em_ring_reader_init(&g->reader, hdr.slot_count, reg->start) != 0) {
    rc = -EINVAL;
  }
  if (!rc && pidfd >= 0) {
    rc = uv_poll_init(r->loop, &g->poll, pidfd);
    if (!rc) {
      g->poll.data = g;
      g->poll_open = true;
      r->open_polls++;
      rc = uv_poll_start(&g->poll, UV_READABLE, on_pidfd);
      if (rc) {
        g->state = RING_CLOSING;
        g->pidfd = pidfd; /* Closed with the handle. */
        pidfd = -1;
        uv_close((uv_handle_t *)&g->poll, on_poll_closed);
      }
    }
  }
  if (rc) {
    if (mem != MAP_FAILED) {
      munmap((void *)mem, len);
    }
    if (fd >= 0) {
      close(fd);
    }
    if (pidfd >= 0) {
      close(pidfd);
    }
    r->stats.refused++;
    EM_DEBUG("rings: register from pid %u refused: %s", (unsigned)pid, strerror(-rc));
    ack(r, reg, rc, 0, from, from_len);
    return rc;
  }
  g->state = RING_ACTIVE;
  g->id = ++r->next_id;
  g->pid = pid;
  g->tid = thread_of(r, pid, hdr.tid) ? hdr.tid : 0;
  g->start_time = start_time;
  g->fd = fd;
  g->pidfd = pidfd;
  g->mem = mem;
  g->len = len;
  g->counted = (em_ring_counts_t){0};
  g->next_check_ns = uv_hrtime() + PROC_CHECK_NS;
  r->active++;
  r->stats.accepted++;
  if (em_log_limit_pass(&r->register_log, uv_hrtime(), EM_LOG_LIMIT_NS)) {
    EM_INFO("rings: ring %llu of pid %u registered: %u slots from position %llu (more within %u s "
            "are counted, not logged one by one)",
            (unsigned long long)g->id, (unsigned)pid, (unsigned)hdr.slot_count,
            (unsigned long long)reg->start, (unsigned)EM_LOG_LIMIT_S);
  }
  ack(r, reg, 0, g->id, from, from_len);
  return 0;
}

int em_rings_register(em_rings_t *r, const em_ring_dgram_t *reg, int fd, bool allowed,
                      const struct ucred *sender, const struct sockaddr_un *from,
                      socklen_t from_len) {
  int rc = register_ring(r, reg, fd, allowed, sender, from, from_len);
  if (rc && em_log_limit_pass(&r->refused_log, uv_hrtime(), EM_LOG_LIMIT_NS)) {
    EM_WARN("rings: register from pid %lu refused: %s (further refusals within %u s are "
            "counted in rings.refused, not logged one by one)",
            (unsigned long)em_spans_sender_pid(sender), strerror(-rc), (unsigned)EM_LOG_LIMIT_S);
  }
  return rc;
}

void em_rings_observe(em_rings_t *r, em_rings_span_fn fn, void *ctx) {
  if (r) {
    r->observe = fn;
    r->observe_ctx = ctx;
  }
}

void em_rings_drain(em_rings_t *r, uint64_t now_ns) {
  if (!r) {
    return;
  }
  em_log_limit_report(&r->refused_log, now_ns, "rings", "ring registers refused",
                      " (rings.refused)");
  r->now_ns = now_ns;
  for (size_t i = 0; i < r->opts.max_rings; i++) {
    ring_t *g = &r->table[i];
    if (g->state != RING_ACTIVE) {
      continue;
    }
    em_ring_header_t h;
    if (em_ring_header_read(g->mem, g->len, &h) != 0) {
      drain_one(r, g, false);
      drop(r, g, false, "header scribbled");
      continue;
    }
    if (h.state == EM_RING_STATE_CLOSED) {
      drop(r, g, true, "closed by its writer");
      continue;
    }
    if (g->pidfd < 0 && now_ns >= g->next_check_ns) {
      g->next_check_ns = now_ns + PROC_CHECK_NS;
      uint64_t t = 0;
      if (start_time_of(r, g->pid, &t) != 0 || t != g->start_time) {
        drop(r, g, true, "process exited");
        continue;
      }
    }
    drain_one(r, g, false);
  }
  uint64_t held = 0;
  if (em_log_limit_flush(&r->register_log, now_ns, EM_LOG_LIMIT_NS, &held)) {
    EM_INFO("rings: %llu more rings registered in the last %u s", (unsigned long long)held,
            (unsigned)EM_LOG_LIMIT_S);
  }
  if (em_log_limit_flush(&r->drop_log, now_ns, EM_LOG_LIMIT_NS, &held)) {
    EM_INFO("rings: %llu more rings dropped in the last %u s", (unsigned long long)held,
            (unsigned)EM_LOG_LIMIT_S);
  }
}

size_t em_rings_active(const em_rings_t *r) {
  return r ? r->active : 0;
}

const em_rings_stats_t *em_rings_stats(const em_rings_t *r) {
  return &r->stats;
}

static void on_idle_closed(uv_handle_t *h) {
  em_rings_t *r = h->data;
  r->idle_open = false;
  r->open_polls--;
  maybe_done(r);
}

static void on_idle(uv_idle_t *h) {
  uv_close((uv_handle_t *)h, on_idle_closed);
}

void em_rings_close(em_rings_t *r, void (*done)(void *), void *ctx) {
  if (!r || r->closing) {
    return;
  }
  r->closing = true;
  r->close_done = done;
  r->close_ctx = ctx;
  r->now_ns = uv_hrtime();
  for (size_t i = 0; i < r->opts.max_rings; i++) {
    drop(r, &r->table[i], true, "agent stopping");
  }
  /* done() always comes from the loop, never from inside this call. */
  uv_idle_init(r->loop, &r->idle);
  r->idle.data = r;
  r->idle_open = true;
  r->open_polls++;
  uv_idle_start(&r->idle, on_idle);
}

void em_rings_free(em_rings_t *r) {
  if (!r) {
    return;
  }
  for (size_t i = 0; i < r->opts.max_rings; i++) {
    ring_t *g = &r->table[i];
    if (g->mem) {
      munmap((void *)g->mem, g->len);
    }
    if (g->fd >= 0) {
      close(g->fd);
    }
    if (g->pidfd >= 0) {
      close(g->pidfd);
    }
  }
  free(r->table);
  free(r);
}

/* --- the deadline page ------------------------------------------------------------- */

int em_deadlines_open(em_deadlines_t *d, const char *path, uint32_t agent_pid, uint32_t ring_slots,
                      const em_deadline_t *entries, size_t n) {
  if (!d || !path || strlen(path) + 5 > sizeof(d->path)) {
    return -EINVAL;
  }
  *d = (em_deadlines_t){.fd = -1};
  snprintf(d->path, sizeof(d->path), "%s", path);
  char tmp[sizeof(d->path) + 8];
  d->fd = em_file_begin(path, EM_DEADLINE_PAGE_BYTES, tmp, sizeof(tmp));
  if (d->fd < 0) {
    return d->fd;
  }
  d->is_open = true;
  int rc = 0;
  void *m = mmap(NULL, EM_DEADLINE_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, d->fd, 0);
  if (m == MAP_FAILED) {
    rc = -errno;
  } else {
    d->page = m;
  }
  if (!rc && em_deadline_page_init(d->page, agent_pid, ring_slots) != 0) {
    rc = -EINVAL;
  }
  if (!rc && em_deadline_page_write(d->page, entries, n) != 0) {
    rc = -EINVAL;
  }
  rc = em_file_finish(tmp, d->path, rc);
  if (rc) {
    em_deadlines_close(d, false);
  }
  return rc;
}

int em_deadlines_update(em_deadlines_t *d, uint32_t ring_slots, const em_deadline_t *entries,
                        size_t n) {
  if (!d || !d->page) {
    return -EINVAL;
  }
  /* A refused set of entries changes nothing; ring_slots is informative and follows them. */
  if (em_deadline_page_write(d->page, entries, n) != 0) {
    return -EINVAL;
  }
  em_deadline_page_set_ring_slots(d->page, ring_slots);
  return 0;
}

void em_deadlines_close(em_deadlines_t *d, bool remove) {
  if (!d) {
    return;
  }
  if (d->page) {
    munmap(d->page, EM_DEADLINE_PAGE_BYTES);
    d->page = NULL;
  }
  if (d->is_open) {
    close(d->fd);
    d->fd = -1;
    d->is_open = false;
  }
  if (remove && d->path[0]) {
    unlink(d->path);
  }
}
