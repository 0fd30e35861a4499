/*
 * spans.c - see spans.h.
 *
 * Reading: the socket is non-blocking and level-triggered in the loop's epoll. Each readable
 * event drains it with recvmmsg in batches of EM_SPANS_BATCH into fixed arrays (buffers,
 * iovecs, control space for SCM_CREDENTIALS, source addresses) allocated once, up to
 * EM_SPANS_ROUNDS batches per event so a flood cannot starve the loop's other work; what is
 * left wakes the loop again at once. A short batch or a failing call ends the event. Control space
 * holds SCM_CREDENTIALS and up to SPAN_MAX_FDS descriptors (received close-on-exec); the kernel
 * discards descriptors beyond it (MSG_CTRUNC), and every one received is closed unless a ring
 * register takes it.
 *
 * Three sizes of datagram arrive: the 64-byte records (spans, heartbeats, v2 ring datagrams),
 * the 512-byte model datagram (WIRE.md "Model identity") and the Python stacks datagram of up to
 * 65507 bytes (WIRE.md "Python stacks datagram v2", one per profile window and process). Each
 * message of a batch scatters into three buffers: its 64-byte slot of one dense array (all a
 * 64-byte record touches, so that path costs what it did), its own spill buffer for bytes
 * 64..512, and one big buffer all messages share for bytes 512..65507 plus one byte more (a
 * longer datagram shows as such, or as MSG_TRUNC, and is counted, never parsed). The big buffer
 * is `joined + 512`: a datagram over 512 bytes is made whole by copying its first two pieces in
 * front of it. Only the last such datagram of a batch is intact there (a later one overwrites
 * an earlier one's tail): the earlier ones are counted as dropped (overflow), which a datagram
 * sent once per window per process makes rare. A model datagram is copied out of its two pieces
 * and then unpacked.
 */
#define _GNU_SOURCE /* struct ucred, SCM_CREDENTIALS, recvmmsg */

#include "spans.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define SPAN_MAX_FDS 8 /* Descriptors received per datagram at most (the rest: discarded). */

struct em_spans {
  uv_loop_t *loop;
  em_spans_opts_t opts;
  em_spans_sys_t sys;
  uint32_t allow_uids[16];
  uint32_t allow_gids[16];
  char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  int fd;
  uv_poll_t poll;
  bool poll_open;
  void (*close_done)(void *);
  void *close_ctx;

  em_spans_counts_t counts;
  int logged_errno;   /* The recvmmsg errno last logged (0: none yet). */
  bool logged_ctrunc; /* A truncated control message was logged. */
  uint64_t dropped[EM_SPANS_DROP_COUNT];
  em_stages_t stages;

  struct mmsghdr msgs[EM_SPANS_BATCH];
  struct iovec iov[EM_SPANS_BATCH][3];
  _Alignas(64) uint8_t bufs[EM_SPANS_BATCH][EM_SPAN_DGRAM_BYTES];
  uint8_t spill[EM_SPANS_BATCH][EM_MODEL_DGRAM_BYTES - EM_SPAN_DGRAM_BYTES];
  uint8_t joined[EM_PYSTACKS_MAX_BYTES + 1]; /* [0..512): filled on demand; then the big iov. */
  struct sockaddr_un from[EM_SPANS_BATCH];
  /* Control space for SCM_CREDENTIALS and SCM_RIGHTS each, aligned for struct cmsghdr. */
  _Alignas(struct cmsghdr) char ctrl[EM_SPANS_BATCH][CMSG_SPACE(sizeof(struct ucred)) +
                                                     CMSG_SPACE(SPAN_MAX_FDS * sizeof(int))];
};

static const char *const drop_names[EM_SPANS_DROP_COUNT] = {"malformed", "version", "size",
                                                            "disallowed", "overflow"};

const char *em_spans_drop_name(em_spans_drop_t why) {
  return (unsigned)why < EM_SPANS_DROP_COUNT ? drop_names[why] : "unknown";
}

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The sender's credentials from a received message, or NULL when there are none. */
static const struct ucred *sender_of(struct msghdr *h) {
  for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c != NULL; c = CMSG_NXTHDR(h, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
        c->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
      return (const struct ucred *)(void *)CMSG_DATA(c);
    }
  }
  return NULL;
}

static bool allowed(const em_spans_t *s, const struct ucred *cred) {
  if (!cred) {
    return false;
  }
  if (s->opts.n_allow_uids == 0 && s->opts.n_allow_gids == 0) {
    return true;
  }
  for (size_t i = 0; i < s->opts.n_allow_uids; i++) {
    if (s->allow_uids[i] == (uint32_t)cred->uid) {
      return true;
    }
  }
  for (size_t i = 0; i < s->opts.n_allow_gids; i++) {
    if (s->allow_gids[i] == (uint32_t)cred->gid) {
      return true;
    }
  }
  return false;
}

/* The descriptors a received message carries, into fds[0..SPAN_MAX_FDS); their count. */
static size_t fds_of(struct msghdr *h, int *fds) {
  size_t n = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c != NULL; c = CMSG_NXTHDR(h, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0)) {
      continue;
    }
    size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const unsigned char *data = CMSG_DATA(c);
    for (size_t j = 0; j < k && n < SPAN_MAX_FDS; j++) {
      memcpy(&fds[n++], data + j * sizeof(int), sizeof(int));
    }
  }
  return n;
}

static void close_fds(em_spans_t *s, const int *fds, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (fds[i] >= 0) {
      s->sys.close(s->sys.ctx, fds[i]);
      s->counts.fds_closed++;
    }
  }
}

em_stage_stats_t *em_spans_fold(em_spans_t *s, const em_span_t *span, const struct ucred *sender,
                                uint64_t seen_ns) {
  em_stage_stats_t *st = em_stages_get(&s->stages, span->stage, seen_ns);
  if (!st) {
    s->dropped[EM_SPANS_DROP_OVERFLOW]++;
    return NULL;
  }
  if (seen_ns > st->last_seen_ns) {
    st->last_seen_ns = seen_ns; /* A ring span a tick old never moves it back. */
  }
  if (span->kind == EM_DGRAM_SPAN) {
    em_hist_record(&st->window, span->duration_ns);
    st->total++;
  }
  if (s->opts.on_span) {
    s->opts.on_span(s->opts.ctx, span, sender, st);
  }
  return st;
}

/*
 * A datagram v2 (64 bytes, version 2): a ring register or a hard miss. Takes fds[0..n_fds);
 * `cut`: the kernel discarded some of the descriptors it carried (MSG_CTRUNC).
 */
static void take_v2(em_spans_t *s, size_t i, const struct ucred *cred, int *fds, size_t n_fds,
                    bool cut, uint64_t now_ns) {
  struct msghdr *h = &s->msgs[i].msg_hdr;
  em_ring_dgram_t d = {0};
  int rc = em_ring_dgram_unpack(s->bufs[i], EM_SPAN_DGRAM_BYTES, &d);
  if (rc != 0 || d.kind == EM_DGRAM_RING_ACK) {
    close_fds(s, fds, n_fds);
    /* A kind v2 does not define (a v1 span marked version 2): a version this agent does not
     * speak for that kind. */
    bool other_version = rc == EM_PROTO_EKIND || d.kind == EM_DGRAM_RING_ACK;
    s->dropped[other_version ? EM_SPANS_DROP_VERSION : EM_SPANS_DROP_MALFORMED]++;
    return;
  }
  bool ok = allowed(s, cred);
  if (d.kind == EM_DGRAM_RING_REGISTER && s->opts.on_register) {
    int fd = -1;
    if (n_fds == 1 && !cut) {
      fd = fds[0];
    } else {
      close_fds(s, fds, n_fds);
    }
    s->opts.on_register(s->opts.ctx, &d, fd, ok, cred, &s->from[i], h->msg_namelen);
    return;
  }
  close_fds(s, fds, n_fds);
  if (!ok) {
    s->dropped[EM_SPANS_DROP_DISALLOWED]++;
    return;
  }
  if (d.kind != EM_DGRAM_HARD_MISS) {
    return; /* A register with no one to take it: refused by silence, as a v1 agent. */
  }
  em_stage_stats_t *st = em_stages_get(&s->stages, d.span.stage, now_ns);
  if (!st) {
    s->dropped[EM_SPANS_DROP_OVERFLOW]++;
    return;
  }
  if (s->opts.on_hard_miss) {
    s->opts.on_hard_miss(s->opts.ctx, &d.span, cred, st);
  }
}

/*
 * A 512-byte datagram: a model datagram v2, from an allowed sender, handed to on_model.
 * Anything else of that size is refused and counted (spans.dropped.* and models_refused).
 */
static void take_model(em_spans_t *s, size_t i, const struct ucred *cred) {
  if (!allowed(s, cred)) {
    s->dropped[EM_SPANS_DROP_DISALLOWED]++;
    s->counts.models_refused++;
    return;
  }
  uint8_t buf[EM_MODEL_DGRAM_BYTES];
  memcpy(buf, s->bufs[i], EM_SPAN_DGRAM_BYTES);
  memcpy(buf + EM_SPAN_DGRAM_BYTES, s->spill[i], EM_MODEL_DGRAM_BYTES - EM_SPAN_DGRAM_BYTES);
  em_model_dgram_t m;
  int rc = em_model_dgram_unpack(buf, sizeof buf, &m);
  if (rc != 0) {
    s->dropped[rc == EM_PROTO_EVERSION ? EM_SPANS_DROP_VERSION : EM_SPANS_DROP_MALFORMED]++;
    s->counts.models_refused++;
    return;
  }
  s->counts.models_accepted++;
  if (s->opts.on_model) {
    s->opts.on_model(s->opts.ctx, &m, cred);
  }
}

/*
 * A datagram of 513..65507 bytes: with a Python stacks header (magic, version 2, kind 8), from
 * an allowed sender and with its tail intact in joined + 512 (`intact`), it is made whole and
 * handed to on_pystacks, which validates the rest. Anything else is counted as dropped, in
 * that order: size (not a Python stacks datagram: no other kind has such a length), version,
 * disallowed, overflow (a later big datagram of the batch overwrote its tail).
 */
static void take_big(em_spans_t *s, size_t i, size_t len, bool intact, const struct ucred *cred) {
  const uint8_t *b = s->bufs[i]; /* The first 64 bytes: always this datagram's own. */
  if (b[0] != EM_WIRE_MAGIC0 || b[1] != EM_WIRE_MAGIC1 || b[3] != EM_DGRAM_PYSTACKS) {
    s->dropped[EM_SPANS_DROP_SIZE]++; /* Of a size only that kind has. */
    return;
  }
  if (b[2] != EM_PYSTACKS_VERSION) {
    s->dropped[EM_SPANS_DROP_VERSION]++;
    return;
  }
  if (!allowed(s, cred)) {
    s->dropped[EM_SPANS_DROP_DISALLOWED]++;
    return;
  }
  if (!intact) {
    s->dropped[EM_SPANS_DROP_OVERFLOW]++;
    return;
  }
  memcpy(s->joined, s->bufs[i], EM_SPAN_DGRAM_BYTES);
  memcpy(s->joined + EM_SPAN_DGRAM_BYTES, s->spill[i], sizeof(s->spill[i]));
  s->counts.pystacks_passed++;
  if (s->opts.on_pystacks) {
    s->opts.on_pystacks(s->opts.ctx, s->joined, len, cred ? (pid_t)cred->pid : -1);
  }
}

/* One received datagram: checked, counted, folded in; its descriptors closed or handed on.
 * `big_intact`: this is the batch's last datagram over 512 bytes. */
static void take(em_spans_t *s, size_t i, uint64_t now_ns, bool big_intact) {
  struct msghdr *h = &s->msgs[i].msg_hdr;
  size_t len = s->msgs[i].msg_len;
  int fds[SPAN_MAX_FDS];
  size_t n_fds = fds_of(h, fds);
  bool cut = (h->msg_flags & MSG_CTRUNC) != 0;
  if (cut) {
    s->counts.ctrl_truncated++;
    if (!s->logged_ctrunc) {
      EM_WARN("spans: a datagram carried more descriptors than the agent takes (%d); the kernel "
              "discarded the rest",
              SPAN_MAX_FDS);
      s->logged_ctrunc = true;
    }
  }
  bool big = len > EM_MODEL_DGRAM_BYTES && len <= EM_PYSTACKS_MAX_BYTES;
  if ((len != EM_SPAN_DGRAM_BYTES && len != EM_MODEL_DGRAM_BYTES && !big) ||
      (h->msg_flags & MSG_TRUNC)) {
    close_fds(s, fds, n_fds);
    s->dropped[EM_SPANS_DROP_SIZE]++;
    return;
  }
  const struct ucred *cred = sender_of(h);
  if (big) {
    close_fds(s, fds, n_fds);
    take_big(s, i, len, big_intact, cred);
    return;
  }
  if (len == EM_MODEL_DGRAM_BYTES) {
    close_fds(s, fds, n_fds);
    take_model(s, i, cred);
    return;
  }
  if (s->bufs[i][2] == EM_RING_DGRAM_VERSION) {
    take_v2(s, i, cred, fds, n_fds, cut, now_ns);
    return;
  }
  close_fds(s, fds, n_fds);
  if (!allowed(s, cred)) {
    s->dropped[EM_SPANS_DROP_DISALLOWED]++;
    return;
  }
  em_span_t span;
  int rc = em_span_unpack(s->bufs[i], len, &span);
  if (rc != 0) {
    s->dropped[rc == EM_PROTO_EVERSION ? EM_SPANS_DROP_VERSION : EM_SPANS_DROP_MALFORMED]++;
    return;
  }
  if (span.kind == EM_DGRAM_SUBSCRIBE || span.kind == EM_DGRAM_UNSUBSCRIBE) {
    if (s->opts.on_subscribe) {
      s->opts.on_subscribe(s->opts.ctx, span.kind == EM_DGRAM_SUBSCRIBE, &s->from[i],
                           h->msg_namelen, cred);
    }
    return;
  }
  if (!em_spans_fold(s, &span, cred, now_ns)) {
    return;
  }
  s->counts.received++;
  s->counts.datagram_spans += span.kind == EM_DGRAM_SPAN;
}

/* Re-arms the message headers recvmmsg overwrote (lengths, flags). */
static void rearm(em_spans_t *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    struct msghdr *h = &s->msgs[i].msg_hdr;
    h->msg_namelen = sizeof(s->from[i]);
    h->msg_controllen = sizeof(s->ctrl[i]);
    h->msg_flags = 0;
  }
}

static void on_readable(uv_poll_t *p, int status, int events) {
  em_spans_t *s = p->data;
  if (status < 0 || !(events & UV_READABLE)) {
    return;
  }
  for (int round = 0; round < EM_SPANS_ROUNDS; round++) {
    int n = s->sys.recvmmsg(s->sys.ctx, s->fd, s->msgs, EM_SPANS_BATCH,
                            MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      int err = errno;
      s->counts.recv_errors++;
      if (err != s->logged_errno) { /* Logged when the errno changes; the count says the rest. */
        EM_WARN("spans: receiving span datagrams failed: %s (errno %d); counted, retried on the "
                "next wake-up",
                strerror(err), err);
        s->logged_errno = err;
      }
      return;
    }
    if (n <= 0) {
      return;
    }
    if (n > EM_SPANS_BATCH) {
      n = EM_SPANS_BATCH; /* Never more than asked for; a table that says so is wrong. */
    }
    uint64_t now = mono_ns();
    int last_big = -1; /* The one datagram whose tail the shared big buffer still holds. */
    for (int i = 0; i < n; i++) {
      if (s->msgs[i].msg_len > EM_MODEL_DGRAM_BYTES) {
        last_big = i;
      }
    }
    for (int i = 0; i < n; i++) {
      take(s, (size_t)i, now, i == last_big);
    }
    rearm(s, (size_t)n);
    if (n < EM_SPANS_BATCH) {
      return;
    }
  }
}

/*
 * Makes `path` free for bind: creates its directory, and removes a socket file no agent
 * listens on any more. Returns 0, -EADDRINUSE (an agent answers there) or -EEXIST (not a
 * socket: never removed).
 */
static int prepare_path(const char *path) {
  char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
  snprintf(dir, sizeof(dir), "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash && slash != dir) {
    *slash = '\0';
    for (char *p = dir + 1; *p; p++) { /* mkdir -p */
      if (*p == '/') {
        *p = '\0';
        mkdir(dir, 0755);
        *p = '/';
      }
    }
    mkdir(dir, 0755);
  }
  struct stat st;
  if (lstat(path, &st) != 0) {
    return 0;
  }
  if (!S_ISSOCK(st.st_mode)) {
    return -EEXIST;
  }
  int probe = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
  bool live = probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0;
  if (probe >= 0) {
    close(probe);
  }
  if (live) {
    return -EADDRINUSE;
  }
  return unlink(path) == 0 ? 0 : -errno;
}

/* ---- The real system calls ---- */

static int sys_recvmmsg(void *ctx, int fd, struct mmsghdr *msgs, unsigned n, int flags) {
  (void)ctx;
  return recvmmsg(fd, msgs, n, flags, NULL);
}

static int sys_close(void *ctx, int fd) {
  (void)ctx;
  return close(fd);
}

const em_spans_sys_t em_spans_sys_linux = {sys_recvmmsg, sys_close, NULL};

static int open_socket(em_spans_t *s) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (strlen(s->opts.path) >= sizeof(sa.sun_path)) {
    return -ENAMETOOLONG;
  }
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", s->opts.path);
  int rc = prepare_path(s->opts.path);
  if (rc) {
    return rc;
  }
  s->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s->fd < 0) {
    return -errno;
  }
  int one = 1;
  if (setsockopt(s->fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) != 0) {
    return -errno;
  }
  mode_t old = umask(0177); /* The file is born 0600; chmod below widens it as configured. */
  rc = bind(s->fd, (struct sockaddr *)&sa, sizeof(sa));
  umask(old);
  if (rc != 0) {
    return -errno;
  }
  if (s->opts.gid >= 0 && chown(s->opts.path, (uid_t)-1, (gid_t)s->opts.gid) != 0) {
    EM_WARN("spans: cannot give %s to group %lld: %s", s->opts.path, (long long)s->opts.gid,
            strerror(errno));
  }
  if (chmod(s->opts.path, s->opts.mode) != 0) {
    return -errno;
  }
  return 0;
}

static void free_on_close(uv_handle_t *h) {
  em_spans_free(h->data);
}

int em_spans_new(em_spans_t **out, uv_loop_t *loop, const em_spans_opts_t *opts) {
  if (!out || !loop || !opts || !opts->path || opts->max_stages == 0 ||
      opts->max_stages > EM_PROTO_MAX_STAGES || opts->n_allow_uids > 16 ||
      opts->n_allow_gids > 16) {
    return -EINVAL;
  }
  em_spans_t *s = calloc(1, sizeof(*s));
  if (!s) {
    return -ENOMEM;
  }
  int rc = em_stages_init(&s->stages, opts->max_stages,
                          opts->stage_idle_ns ? opts->stage_idle_ns : UINT64_MAX, opts->on_evict,
                          opts->ctx);
  if (rc) {
    free(s);
    return rc;
  }
  s->loop = loop;
  s->opts = *opts;
  s->sys = opts->sys ? *opts->sys : em_spans_sys_linux;
  s->opts.sys = NULL; /* Copied above. */
  s->fd = -1;
  if (opts->n_allow_uids) {
    memcpy(s->allow_uids, opts->allow_uids, opts->n_allow_uids * sizeof(uint32_t));
  }
  if (opts->n_allow_gids) {
    memcpy(s->allow_gids, opts->allow_gids, opts->n_allow_gids * sizeof(uint32_t));
  }
  snprintf(s->path, sizeof(s->path), "%s", opts->path);
  s->opts.path = s->path;
  for (size_t i = 0; i < EM_SPANS_BATCH; i++) {
    s->iov[i][0] = (struct iovec){.iov_base = s->bufs[i], .iov_len = sizeof(s->bufs[i])};
    s->iov[i][1] = (struct iovec){.iov_base = s->spill[i], .iov_len = sizeof(s->spill[i])};
    s->iov[i][2] = (struct iovec){.iov_base = s->joined + EM_MODEL_DGRAM_BYTES,
                                  .iov_len = sizeof(s->joined) - EM_MODEL_DGRAM_BYTES};
    s->msgs[i].msg_hdr = (struct msghdr){
        .msg_name = &s->from[i], .msg_iov = s->iov[i], .msg_iovlen = 3, .msg_control = s->ctrl[i]};
  }
  rearm(s, EM_SPANS_BATCH);
  rc = open_socket(s);
  if (!rc) {
    rc = uv_poll_init(loop, &s->poll, s->fd);
  }
  if (!rc) {
    s->poll.data = s;
    s->poll_open = true;
    rc = uv_poll_start(&s->poll, UV_READABLE, on_readable);
  }
  if (rc) {
    if (s->fd >= 0) {
      close(s->fd);
      unlink(s->path);
    }
    if (s->poll_open) {
      uv_close((uv_handle_t *)&s->poll, free_on_close); /* The handle lives in s. */
    } else {
      em_spans_free(s);
    }
    return rc;
  }
  *out = s;
  return 0;
}

size_t em_spans_stage_count(const em_spans_t *s) {
  return s->stages.n;
}

em_stage_stats_t *em_spans_stage(em_spans_t *s, size_t i) {
  return i < s->stages.n ? &s->stages.entries[i] : NULL;
}

size_t em_spans_stage_policy(em_spans_t *s, const char *const *names, size_t n, uint64_t idle_ns) {
  return em_stages_policy(&s->stages, names, n, idle_ns);
}

uint64_t em_spans_evictions(const em_spans_t *s) {
  return s->stages.evictions;
}

void em_spans_window_reset(em_spans_t *s) {
  em_stages_window_reset(&s->stages);
}

uint32_t em_spans_sender_pid(const struct ucred *sender) {
  return sender && sender->pid > 0 ? (uint32_t)sender->pid : 0;
}

const em_spans_counts_t *em_spans_counts(const em_spans_t *s) {
  return &s->counts;
}

uint64_t em_spans_dropped(const em_spans_t *s, em_spans_drop_t why) {
  return (unsigned)why < EM_SPANS_DROP_COUNT ? s->dropped[why] : 0;
}

int em_spans_send_to(em_spans_t *s, const struct sockaddr_un *addr, socklen_t addr_len,
                     const void *buf, size_t len) {
  ssize_t n =
      sendto(s->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr *)addr, addr_len);
  return n < 0 ? -errno : 0;
}

static void on_poll_closed(uv_handle_t *h) {
  em_spans_t *s = h->data;
  close(s->fd);
  s->fd = -1;
  unlink(s->path);
  if (s->close_done) {
    s->close_done(s->close_ctx);
  }
}

void em_spans_close(em_spans_t *s, void (*done)(void *), void *ctx) {
  if (!s->poll_open) {
    return;
  }
  s->poll_open = false;
  s->close_done = done;
  s->close_ctx = ctx;
  uv_close((uv_handle_t *)&s->poll, on_poll_closed);
}

void em_spans_free(em_spans_t *s) {
  if (!s) {
    return;
  }
  em_stages_deinit(&s->stages);
  free(s);
}
