/*
 * edgemon_client.h - header-only C/C++ client that tells edgemon-agent how long each stage of
 * each frame took: one 64-byte span datagram v1 (proto/WIRE.md) per span, sent without
 * blocking on an AF_UNIX SOCK_DGRAM socket connected to the agent's span socket.
 *
 *   em_client_t em;
 *   em_client_open(&em, NULL);                  // NULL: $EDGEMON_SOCKET or the agent's default
 *   em_client_set_frame(&em, frame_no);
 *   uint64_t t0 = em_client_now_ns();
 *   run_inference();
 *   em_client_span_end_at(&em, "infer", t0);    // or em_client_record(&em, "infer", t0, d)
 *   em_client_close(&em);
 *
 * Semantics are those of the Python client (firmware/client/python):
 *  - Never blocks: send(..., MSG_DONTWAIT). A full agent queue (EAGAIN), an absent agent, an
 *    invalid stage name, anything else: the datagram is dropped and counted by reason in
 *    em_client_t.dropped[]; nothing is retried, nothing is queued, nothing aborts.
 *  - While the agent is absent, connect() is tried at most once per second
 *    (EM_CLIENT_RECONNECT_NS), so a span costs one clock read and no system call. When the
 *    agent restarts (its socket is bound again at the same path) the first send that notices
 *    reconnects at once if that is due and resends the datagram.
 *  - Stage names: 1..31 bytes of [A-Za-z0-9_.:-] (WIRE.md); others are dropped and counted.
 *  - Timestamps: CLOCK_MONOTONIC nanoseconds (em_client_now_ns()).
 *  - Socket path: the explicit argument, else $EDGEMON_SOCKET, else
 *    $EDGEMON_RUNTIME_DIR/spans.sock, else /run/edgemon/spans.sock for euid 0, else
 *    $XDG_RUNTIME_DIR/edgemon/spans.sock when XDG_RUNTIME_DIR is an absolute path, else
 *    /tmp/edgemon-<euid>/spans.sock (the agent's own defaults, firmware/agent/config.c).
 *
 * The agent's level (proto/WIRE.md): em_client_level() / em_client_state() read the state
 * page (<runtime_dir>/state, or $EDGEMON_STATE_PAGE, or em_client_set_state_path()), mapped
 * once, with the seqlock and no system call (a stat() of the path once per second follows a
 * new agent's page). em_client_subscribe() / em_client_wait_change() / em_client_unsubscribe()
 * receive level push datagrams on a second, autobound socket. Nothing here aborts: an absent
 * or garbled page is EM_CLIENT_LEVEL_UNKNOWN and counted in page_counters[].
 *
 * Ownership: the caller owns the em_client_t (stack, static or heap); the client owns one
 * socket descriptor from em_client_open() to em_client_close(). Strings passed in are
 * borrowed for the call. Nothing allocates.
 *
 * Threads: an em_client_t is used by one thread at a time (its counters and descriptor are
 * plain fields). Give each thread its own; each costs one descriptor.
 * Fork: the child must not share the parent's em_client_t: call em_client_close() and
 * em_client_open() in the child (the datagrams carry the sender's pid; the push socket would
 * otherwise be shared with the parent).
 *
 * Everything is static inline with the em_client_ prefix (em_client__ is internal). It needs
 * no library: not even edgemon's proto library; packing is done here, little-endian, byte by
 * byte. It compiles as C11 and C++17 with -Wall -Wextra -Wpedantic. In strict C (-std=c11)
 * POSIX declarations must be visible: include this header first, or define
 * _POSIX_C_SOURCE 200809L (or _GNU_SOURCE) before the first #include.
 */
#ifndef EDGEMON_CLIENT_H
#define EDGEMON_CLIENT_H

#if !defined(__cplusplus) && defined(__STRICT_ANSI__) && !defined(_POSIX_C_SOURCE) &&              \
    !defined(_GNU_SOURCE) && !defined(_DEFAULT_SOURCE) && !defined(_XOPEN_SOURCE)
#define _POSIX_C_SOURCE 200809L /* socket, clock_gettime, geteuid under -std=c11. */
#endif

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h> /* snprintf */
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#if defined(__GLIBC__) && !defined(__USE_POSIX199309)
#error "edgemon_client.h: POSIX is not enabled; include it first or define _POSIX_C_SOURCE 200809L"
#endif

/* The header is C; C++ code built with -Wold-style-cast must still compile it cleanly. */
#if defined(__cplusplus) && defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
#endif

#define EM_CLIENT_DGRAM_BYTES  64u           /* One span datagram v1. */
#define EM_CLIENT_STAGE_MAX    31u           /* Longest stage name, in bytes. */
#define EM_CLIENT_PATH_BYTES   108u          /* sizeof(sun_path) on Linux, with the NUL. */
#define EM_CLIENT_RECONNECT_NS 1000000000ull /* At most one connect() per second. */

#define EM_CLIENT_PAGE_BYTES       256u          /* State page v1. */
#define EM_CLIENT_PUSH_BYTES       256u          /* Level push datagram v1. */
#define EM_CLIENT_STATE_PATH_BYTES 256u          /* Longest state page path, with the NUL. */
#define EM_CLIENT_PAGE_RECHECK_NS  1000000000ull /* At most one stat()/open() per second. */
#define EM_CLIENT_SEQLOCK_TRIES    64            /* WIRE.md's bound on read attempts. */

/* The agent's level (proto/WIRE.md); UNKNOWN: no agent, no page, or a garbled one. */
typedef enum {
  EM_CLIENT_LEVEL_UNKNOWN = -1,
  EM_CLIENT_LEVEL_NOMINAL = 0,
  EM_CLIENT_LEVEL_WARN = 1,
  EM_CLIENT_LEVEL_DEGRADED = 2,
  EM_CLIENT_LEVEL_CRITICAL = 3
} em_client_level_t;

/* Counters of the state page reader: indices of em_client_t.page_counters[]. */
typedef enum {
  EM_CLIENT_PAGE_OPENS = 0, /* The page file was opened (and mapped when valid). */
  EM_CLIENT_PAGE_ABSENT,    /* No file at the state page path (checked once per second). */
  EM_CLIENT_PAGE_INVALID,   /* Not a v1 page, or a record breaking WIRE.md's rules. */
  EM_CLIENT_PAGE_BUSY,      /* Every seqlock try overlapped a write. */
  EM_CLIENT_PAGE_COUNT
} em_client_page_counter_t;

/* Every field of a state record (state page or level push). value and bound are NaN when the
 * agent had none. seq is the page's seqlock counter (0 for a push, which has none). */
typedef struct {
  int level;      /* em_client_level_t, 0..3. */
  int prev_level; /* 0..3. */
  uint32_t changes;
  uint64_t since_mono_ns;
  uint64_t since_wall_ns;
  double value;
  double bound;
  char rule[32];    /* NUL-terminated, may be empty. */
  char stage[32];   /* NUL-terminated, empty or a stage name. */
  char reason[136]; /* NUL-terminated, may be empty. */
  uint32_t agent_pid;
  uint32_t seq;
} em_client_state_t;

/* Why a datagram was dropped: indices of em_client_t.dropped[]. */
typedef enum {
  EM_CLIENT_DROP_NO_AGENT = 0,  /* No socket at the path, nobody bound to it, or not yet due. */
  EM_CLIENT_DROP_QUEUE_FULL,    /* The agent's queue is full (EAGAIN): it is slow or busy. */
  EM_CLIENT_DROP_INVALID_STAGE, /* The stage name breaks the WIRE.md rules. */
  EM_CLIENT_DROP_OTHER,         /* Any other error, or the client is closed. */
  EM_CLIENT_DROP_COUNT
} em_client_drop_t;

/* A client. Read the counters directly; change nothing else. */
typedef struct {
  int fd;                                 /* Connected socket, or -1. */
  int closed;                             /* 1 after close, or when em_client_open() failed. */
  int unconnected_reason;                 /* em_client_drop_t counted while there is no socket. */
  uint32_t pid;                           /* getpid() at open, sent in every datagram. */
  uint64_t frame_id;                      /* Frame id sent by spans that are not given one. */
  uint64_t next_connect_ns;               /* CLOCK_MONOTONIC before which no connect() is tried. */
  uint64_t sent;                          /* Datagrams the kernel accepted. */
  uint64_t dropped[EM_CLIENT_DROP_COUNT]; /* Datagrams lost, by em_client_drop_t. */
  uint64_t connect_attempts;              /* connect() calls made. */
  char path[EM_CLIENT_PATH_BYTES];        /* The agent's span socket. */
  /* The state page (em_client_level, em_client_state). */
  const uint8_t *page;                          /* Read-only mapping, or NULL. */
  uint64_t page_dev, page_ino;                  /* The mapped file's identity. */
  uint64_t page_next_check_ns;                  /* No stat()/open() before this. */
  int page_cached;                              /* page_state/page_seq hold a consistent read. */
  uint32_t page_seq;                            /* seq of page_state. */
  em_client_state_t page_state;                 /* Last consistent record of this mapping. */
  uint64_t page_counters[EM_CLIENT_PAGE_COUNT]; /* By em_client_page_counter_t. */
  char state_path[EM_CLIENT_STATE_PATH_BYTES];  /* The state page file. */
  /* Level pushes (em_client_subscribe, em_client_wait_change). */
  int sub_fd;            /* Autobound push socket, or -1. */
  uint64_t push_invalid; /* Received datagrams that were not valid level pushes. */
} em_client_t;

/* A span being timed: em_client_span_begin() ... em_client_span_end(). */
typedef struct {
  em_client_t *client;
  const char *stage; /* Borrowed: must live until em_client_span_end(). */
  uint64_t start_ns; /* CLOCK_MONOTONIC at the start. */
  int done;          /* Set by em_client_span_end(); used by EM_CLIENT_SPAN. */
} em_client_span_t;

/* CLOCK_MONOTONIC in nanoseconds: the clock of every timestamp the agent receives. */
static inline uint64_t em_client_now_ns(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
    return 0;
  }
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* True when `stage` is 1..31 bytes of [A-Za-z0-9_.:-] (proto/WIRE.md). NULL is invalid. */
static inline int em_client_stage_valid(const char *stage) {
  size_t n = 0;
  if (stage == NULL) {
    return 0;
  }
  for (; stage[n] != '\0'; n++) {
    unsigned char ch = (unsigned char)stage[n];
    int ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
             ch == '_' || ch == '.' || ch == ':' || ch == '-';
    if (!ok || n >= EM_CLIENT_STAGE_MAX) {
      return 0;
    }
  }
  return n >= 1;
}

/* Internal: out = a + b when it fits in `cap` and in a sockaddr_un; else -ENAMETOOLONG. */
static inline int em_client__join(char *out, size_t cap, const char *a, const char *b) {
  size_t la = strlen(a);
  size_t lb = strlen(b);
  if (la + lb >= cap || la + lb >= EM_CLIENT_PATH_BYTES) {
    out[0] = '\0';
    return -ENAMETOOLONG;
  }
  memcpy(out, a, la);
  memcpy(out + la, b, lb + 1);
  return 0;
}

/*
 * Writes the default span socket path (see the top of this file; the explicit argument
 * excepted) into out[0..cap). Returns 0, -EINVAL (NULL or cap 0) or -ENAMETOOLONG (the path
 * does not fit in `cap`, or in a sockaddr_un).
 */
static inline int em_client_default_path(char *out, size_t cap) {
  const char *socket_env = getenv("EDGEMON_SOCKET");
  const char *runtime_env = getenv("EDGEMON_RUNTIME_DIR");
  const char *xdg_env = getenv("XDG_RUNTIME_DIR");
  char tmp_dir[40];
  if (out == NULL || cap == 0) {
    return -EINVAL;
  }
  if (socket_env != NULL && socket_env[0] != '\0') {
    return em_client__join(out, cap, socket_env, "");
  }
  if (runtime_env != NULL && runtime_env[0] != '\0') {
    return em_client__join(out, cap, runtime_env, "/spans.sock");
  }
  if (geteuid() == 0) {
    return em_client__join(out, cap, "/run/edgemon", "/spans.sock");
  }
  if (xdg_env != NULL && xdg_env[0] == '/') {
    return em_client__join(out, cap, xdg_env, "/edgemon/spans.sock");
  }
  snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/edgemon-%lu", (unsigned long)geteuid());
  return em_client__join(out, cap, tmp_dir, "/spans.sock");
}

/* Internal: is this errno "nobody listens at the path" (agent absent or restarting)? */
static inline int em_client__no_agent_errno(int err) {
  return err == ENOENT || err == ECONNREFUSED || err == ENOTCONN || err == ECONNRESET ||
         err == EPIPE || err == ENOTDIR;
}

/* Internal: a fresh connected non-blocking socket, at most once per EM_CLIENT_RECONNECT_NS.
 * Returns 0 or a negative errno (-EALREADY when not due). */
static inline int em_client__connect(em_client_t *c, uint64_t now_ns) {
  struct sockaddr_un addr;
  int fd;
  if (now_ns < c->next_connect_ns) {
    return -EALREADY;
  }
  c->next_connect_ns = now_ns + EM_CLIENT_RECONNECT_NS;
  c->connect_attempts++;
  fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    c->unconnected_reason = EM_CLIENT_DROP_OTHER;
    return -errno;
  }
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, c->path, strlen(c->path)); /* fits: checked at open */
  if (connect(fd, (const struct sockaddr *)&addr, (socklen_t)sizeof(addr)) != 0) {
    int err = errno;
    close(fd);
    c->unconnected_reason =
        em_client__no_agent_errno(err) ? EM_CLIENT_DROP_NO_AGENT : EM_CLIENT_DROP_OTHER;
    return -err;
  }
  c->fd = fd;
  return 0;
}

/* Internal: forgets the socket after the agent went away. */
static inline void em_client__disconnect(em_client_t *c) {
  if (c->fd >= 0) {
    close(c->fd);
    c->fd = -1;
  }
}

/* Internal: one send without blocking; returns 0 or a negative errno. */
static inline int em_client__send_once(const em_client_t *c, const uint8_t *buf) {
  ssize_t n = send(c->fd, buf, EM_CLIENT_DGRAM_BYTES, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n == (ssize_t)EM_CLIENT_DGRAM_BYTES) {
    return 0;
  }
  return n < 0 ? -errno : -EMSGSIZE;
}

/* Internal: counts a failed send's reason; returns `rc`. */
static inline int em_client__count_error(em_client_t *c, int rc) {
  if (rc == -EAGAIN || rc == -EWOULDBLOCK) {
    c->dropped[EM_CLIENT_DROP_QUEUE_FULL]++;
  } else if (em_client__no_agent_errno(-rc)) {
    c->dropped[EM_CLIENT_DROP_NO_AGENT]++;
    em_client__disconnect(c);
  } else {
    c->dropped[EM_CLIENT_DROP_OTHER]++;
  }
  return rc;
}

/* Internal: u64 little-endian at p. */
static inline void em_client__put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) {
    p[i] = (uint8_t)(v >> (8 * i));
  }
}

/* Internal: a span datagram v1 with an all-zero stage field. */
static inline void em_client__pack(uint8_t *buf, uint32_t pid, uint8_t kind, uint64_t frame_id,
                                   uint64_t start_ns, uint64_t duration_ns) {
  memset(buf, 0, EM_CLIENT_DGRAM_BYTES);
  buf[0] = 0x45; /* 'E' */
  buf[1] = 0x4D; /* 'M' */
  buf[2] = 1;    /* version */
  buf[3] = kind;
  buf[4] = (uint8_t)pid;
  buf[5] = (uint8_t)(pid >> 8);
  buf[6] = (uint8_t)(pid >> 16);
  buf[7] = (uint8_t)(pid >> 24);
  em_client__put_u64(buf + 8, frame_id);
  em_client__put_u64(buf + 16, start_ns);
  em_client__put_u64(buf + 24, duration_ns);
}

/*
 * Internal: packs and sends one datagram of `kind` (1 span, 2 heartbeat). Returns 0 when the
 * kernel took it, else a negative errno (the drop is counted):
 *   -EINVAL        invalid stage name                           (invalid_stage)
 *   -EBADF         client closed, or its open failed            (other)
 *   -ENOTCONN      no socket and the next connect() is not due  (the reason of the last
 *                  failed connect: no_agent, or other for e.g. EACCES, EPROTOTYPE)
 *   -ENOENT, -ECONNREFUSED, ...  the agent is absent            (no_agent)
 *   -EAGAIN        the agent's queue is full                    (queue_full)
 *   any other      the errno of socket(), connect() or send()   (other)
 */
static inline int em_client__emit(em_client_t *c, uint8_t kind, const char *stage,
                                  uint64_t frame_id, uint64_t start_ns, uint64_t duration_ns) {
  uint8_t buf[EM_CLIENT_DGRAM_BYTES];
  size_t len;
  int rc;
  if (c == NULL) {
    return -EINVAL;
  }
  if (!em_client_stage_valid(stage)) {
    c->dropped[EM_CLIENT_DROP_INVALID_STAGE]++;
    return -EINVAL;
  }
  if (c->closed) {
    c->dropped[EM_CLIENT_DROP_OTHER]++;
    return -EBADF;
  }
  em_client__pack(buf, c->pid, kind, frame_id, start_ns, duration_ns);
  len = strlen(stage); /* <= 31: validated; the rest of the field stays NUL */
  memcpy(buf + 32, stage, len);

  if (c->fd < 0) {
    rc = em_client__connect(c, em_client_now_ns());
    if (rc != 0) {
      c->dropped[c->unconnected_reason]++;
      return rc == -EALREADY ? -ENOTCONN : rc;
    }
  }
  rc = em_client__send_once(c, buf);
  if (rc == 0) {
    c->sent++;
    return 0;
  }
  if (em_client__no_agent_errno(-rc)) {
    /* The agent went away or restarted: reconnect now if due and resend once. */
    em_client__disconnect(c);
    if (em_client__connect(c, em_client_now_ns()) == 0) {
      rc = em_client__send_once(c, buf);
      if (rc == 0) {
        c->sent++;
        return 0;
      }
    }
  }
  return em_client__count_error(c, rc);
}

/* ---- The agent's level: state page v1 and level push datagram v1 (proto/WIRE.md) ---- */

/* Internal: out = a + b when it fits in `cap`; else -ENAMETOOLONG. */
static inline int em_client__join_any(char *out, size_t cap, const char *a, const char *b) {
  size_t la = strlen(a);
  size_t lb = strlen(b);
  if (la + lb >= cap) {
    out[0] = '\0';
    return -ENAMETOOLONG;
  }
  memcpy(out, a, la);
  memcpy(out + la, b, lb + 1);
  return 0;
}

/*
 * Writes the default state page path into out[0..cap): $EDGEMON_STATE_PAGE, else
 * $EDGEMON_RUNTIME_DIR/state, else the agent's default runtime dir + "/state" (as for the
 * span socket: /run/edgemon for euid 0, $XDG_RUNTIME_DIR/edgemon, /tmp/edgemon-<euid>).
 * Returns 0, -EINVAL or -ENAMETOOLONG.
 */
static inline int em_client_default_state_path(char *out, size_t cap) {
  const char *page_env = getenv("EDGEMON_STATE_PAGE");
  const char *runtime_env = getenv("EDGEMON_RUNTIME_DIR");
  const char *xdg_env = getenv("XDG_RUNTIME_DIR");
  char tmp_dir[40];
  if (out == NULL || cap == 0) {
    return -EINVAL;
  }
  if (page_env != NULL && page_env[0] != '\0') {
    return em_client__join_any(out, cap, page_env, "");
  }
  if (runtime_env != NULL && runtime_env[0] != '\0') {
    return em_client__join_any(out, cap, runtime_env, "/state");
  }
  if (geteuid() == 0) {
    return em_client__join_any(out, cap, "/run/edgemon", "/state");
  }
  if (xdg_env != NULL && xdg_env[0] == '/') {
    return em_client__join_any(out, cap, xdg_env, "/edgemon/state");
  }
  snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/edgemon-%lu", (unsigned long)geteuid());
  return em_client__join_any(out, cap, tmp_dir, "/state");
}

/* "NOMINAL", "WARN", "DEGRADED", "CRITICAL", or NULL for any other value. */
static inline const char *em_client_level_name(int level) {
  static const char *const names[] = {"NOMINAL", "WARN", "DEGRADED", "CRITICAL"};
  return level >= 0 && level <= 3 ? names[level] : NULL;
}

/* Internal: little-endian loads. */
static inline uint32_t em_client__get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t em_client__get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) {
    v = v << 8 | p[i];
  }
  return v;
}

/* Internal: the page's seqlock counter, an aligned native u32 at offset 8 (acquire load). */
static inline uint32_t em_client__load_seq(const uint8_t *page, int memorder) {
  uint32_t v = __atomic_load_n((const uint32_t *)(const void *)(page + 8), memorder);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap32(v);
#endif
  return v;
}

/* Internal: a NUL-padded text field of `width` bytes; stage: empty or a stage name, else
 * printable. Returns 0, or -1 when it breaks WIRE.md's rules (ESTRING). */
static inline int em_client__text(char *dst, const uint8_t *src, size_t width, int stage) {
  size_t n = 0;
  while (n < width && src[n] != 0) {
    n++;
  }
  if (n == width) {
    return -1; /* no NUL */
  }
  for (size_t i = n; i < width; i++) {
    if (src[i] != 0) {
      return -1; /* non-zero padding */
    }
  }
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = src[i];
    int ok = stage ? ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                      (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == ':' || ch == '-')
                   : (ch >= 0x20 && ch <= 0x7e);
    if (!ok) {
      return -1;
    }
  }
  memcpy(dst, src, n + 1);
  memset(dst + n + 1, 0, width - n - 1);
  return 0;
}

/* Internal: decodes and validates a 240-byte state record body. 0, or -EBADMSG. */
static inline int em_client__decode_body(const uint8_t *b, uint32_t agent_pid, uint32_t seq,
                                         em_client_state_t *out) {
  uint64_t bits;
  em_client_state_t rec;
  if (b[0] > 3 || b[1] > 3 || b[2] != 0 || b[3] != 0) {
    return -EBADMSG; /* ERANGE */
  }
  memset(&rec, 0, sizeof(rec));
  rec.level = b[0];
  rec.prev_level = b[1];
  rec.changes = em_client__get_u32(b + 4);
  rec.since_mono_ns = em_client__get_u64(b + 8);
  rec.since_wall_ns = em_client__get_u64(b + 16);
  bits = em_client__get_u64(b + 24);
  memcpy(&rec.value, &bits, sizeof(bits));
  bits = em_client__get_u64(b + 32);
  memcpy(&rec.bound, &bits, sizeof(bits));
  if (em_client__text(rec.rule, b + 40, sizeof(rec.rule), 0) != 0 ||
      em_client__text(rec.stage, b + 72, sizeof(rec.stage), 1) != 0 ||
      em_client__text(rec.reason, b + 104, sizeof(rec.reason), 0) != 0) {
    return -EBADMSG; /* ESTRING */
  }
  rec.agent_pid = agent_pid;
  rec.seq = seq;
  *out = rec;
  return 0;
}

/*
 * Decodes a level push datagram v1 of `len` bytes into *out (seq 0). Returns 0, -EINVAL
 * (NULL) or -EBADMSG (size, magic, version, kind, reserved, or the record's rules).
 */
static inline int em_client_push_decode(const uint8_t *buf, size_t len, em_client_state_t *out) {
  if (buf == NULL || out == NULL) {
    return -EINVAL;
  }
  if (len != EM_CLIENT_PUSH_BYTES || buf[0] != 0x45 || buf[1] != 0x4D || buf[2] != 1 ||
      buf[3] != 16 || em_client__get_u64(buf + 8) != 0) {
    return -EBADMSG;
  }
  return em_client__decode_body(buf + 16, em_client__get_u32(buf + 4), 0, out);
}

/* Internal: forgets the mapping and what was read from it. */
static inline void em_client__page_drop(em_client_t *c) {
  if (c->page != NULL) {
    munmap((void *)(uintptr_t)c->page, EM_CLIENT_PAGE_BYTES);
    c->page = NULL;
  }
  c->page_dev = 0;
  c->page_ino = 0;
  c->page_cached = 0;
}

/* Internal: opens and maps the page file when it is a v1 page. */
static inline void em_client__page_open(em_client_t *c) {
  struct stat st;
  void *map;
  const uint8_t *p;
  int fd = open(c->state_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    c->page_counters[EM_CLIENT_PAGE_ABSENT]++;
    return;
  }
  c->page_counters[EM_CLIENT_PAGE_OPENS]++;
  if (fstat(fd, &st) != 0 || st.st_size != (off_t)EM_CLIENT_PAGE_BYTES) {
    close(fd); /* ESIZE: refused before mapping, so the mapping never faults */
    c->page_counters[EM_CLIENT_PAGE_INVALID]++;
    return;
  }
  map = mmap(NULL, EM_CLIENT_PAGE_BYTES, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    c->page_counters[EM_CLIENT_PAGE_INVALID]++;
    return;
  }
  p = (const uint8_t *)map;
  /* The header is written once, before the page is renamed into place. */
  if (memcmp(p, "EMST", 4) != 0 || (p[4] | p[5] << 8) != 1 ||
      (p[6] | p[7] << 8) != (int)EM_CLIENT_PAGE_BYTES) {
    munmap(map, EM_CLIENT_PAGE_BYTES);
    c->page_counters[EM_CLIENT_PAGE_INVALID]++;
    return;
  }
  c->page = p;
  c->page_dev = (uint64_t)st.st_dev;
  c->page_ino = (uint64_t)st.st_ino;
  c->page_cached = 0;
}

/* Internal, the slow path, at most once per EM_CLIENT_PAGE_RECHECK_NS: maps the page when it
 * appeared or was replaced (a new agent renames a new file into place), drops it when gone. */
static inline void em_client__page_recheck(em_client_t *c, uint64_t now_ns) {
  struct stat st;
  c->page_next_check_ns = now_ns + EM_CLIENT_PAGE_RECHECK_NS;
  if (c->state_path[0] == '\0' || stat(c->state_path, &st) != 0) {
    em_client__page_drop(c);
    c->page_counters[EM_CLIENT_PAGE_ABSENT]++;
    return;
  }
  if (c->page != NULL && (uint64_t)st.st_dev == c->page_dev && (uint64_t)st.st_ino == c->page_ino) {
    return;
  }
  em_client__page_drop(c);
  em_client__page_open(c);
}

/* Internal: WIRE.md's seqlock read into the cache. 0 (the cache holds a consistent record,
 * possibly an older one when every try overlapped a write), -EBUSY or -EBADMSG. */
static inline int em_client__page_read(em_client_t *c) {
  const uint8_t *page = c->page;
  uint8_t local[EM_CLIENT_PAGE_BYTES - 16];
  for (int tries = 0; tries < EM_CLIENT_SEQLOCK_TRIES; tries++) {
    uint32_t s1 = em_client__load_seq(page, __ATOMIC_ACQUIRE);
    uint32_t s2;
    if (s1 & 1u) {
      continue; /* the agent is in the middle of a write */
    }
    for (size_t i = 0; i < sizeof(local); i++) {
      local[i] = __atomic_load_n(page + 16 + i, __ATOMIC_RELAXED);
    }
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    s2 = em_client__load_seq(page, __ATOMIC_RELAXED);
    if (s1 != s2) {
      continue; /* a write overlapped the copy */
    }
    if (em_client__decode_body(local, em_client__get_u32(page + 12), s1, &c->page_state) != 0) {
      c->page_counters[EM_CLIENT_PAGE_INVALID]++;
      c->page_cached = 0;
      return -EBADMSG;
    }
    c->page_seq = s1;
    c->page_cached = 1;
    return 0;
  }
  c->page_counters[EM_CLIENT_PAGE_BUSY]++;
  return c->page_cached ? 0 : -EBUSY;
}

/* Internal: the cache up to date with the page; 0, -ENOENT, -EBUSY or -EBADMSG. */
static inline int em_client__page_current(em_client_t *c) {
  uint64_t now_ns = em_client_now_ns();
  if (now_ns >= c->page_next_check_ns) {
    em_client__page_recheck(c, now_ns);
  }
  if (c->page == NULL) {
    return -ENOENT;
  }
  if (c->page_cached && em_client__load_seq(c->page, __ATOMIC_ACQUIRE) == c->page_seq) {
    return 0;
  }
  return em_client__page_read(c);
}

/*
 * The agent's current level from the state page (em_client_level_t): 0..3, or
 * EM_CLIENT_LEVEL_UNKNOWN (-1) with no agent, no page, a garbled page, or a page never read
 * consistently. The page is mapped on the first call; after that a call is a clock read
 * (vDSO) and a few loads from the mapping, no system call, except once per second a stat()
 * of the path (re-mapping the page when a new agent replaced it).
 */
static inline int em_client_level(em_client_t *c) {
  if (c == NULL || em_client__page_current(c) != 0) {
    return EM_CLIENT_LEVEL_UNKNOWN;
  }
  return c->page_state.level;
}

/*
 * Every field of the state page's current record into *out. Returns 0, -EINVAL (NULL),
 * -ENOENT (no page mapped: no agent, or not a v1 page), -EBUSY (every try overlapped a write
 * and nothing consistent was read from this page yet; with an earlier read, 0 and that one),
 * -EBADMSG (a record breaking WIRE.md's rules). Failures are counted in page_counters[].
 */
static inline int em_client_state(em_client_t *c, em_client_state_t *out) {
  int rc;
  if (c == NULL || out == NULL) {
    return -EINVAL;
  }
  rc = em_client__page_current(c);
  if (rc == 0) {
    *out = c->page_state;
  }
  return rc;
}

/*
 * Reads the state page at `path` from now on (NULL or "": the default, see
 * em_client_default_state_path). Unmaps the current page; the next read maps the new one.
 * Returns 0, -EINVAL or -ENAMETOOLONG (then no page is read).
 */
static inline int em_client_set_state_path(em_client_t *c, const char *path) {
  if (c == NULL) {
    return -EINVAL;
  }
  em_client__page_drop(c);
  c->page_next_check_ns = 0;
  if (path == NULL || path[0] == '\0') {
    return em_client_default_state_path(c->state_path, sizeof(c->state_path));
  }
  return em_client__join_any(c->state_path, sizeof(c->state_path), path, "");
}

/* Internal: sends (un)subscribe (kind 3 / 4) from the push socket to the agent's socket. */
static inline int em_client__send_sub(em_client_t *c, uint8_t kind) {
  uint8_t buf[EM_CLIENT_DGRAM_BYTES];
  struct sockaddr_un addr;
  em_client__pack(buf, c->pid, kind, 0, em_client_now_ns(), 0);
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, c->path, strlen(c->path)); /* fits: checked at open */
  if (sendto(c->sub_fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_NOSIGNAL,
             (const struct sockaddr *)&addr, (socklen_t)sizeof(addr)) != (ssize_t)sizeof(buf)) {
    return -errno;
  }
  return 0;
}

/*
 * Asks the agent for level pushes: creates the push socket on first use, binds it to an
 * autobound abstract address (Linux: bind() with only the address family, so the agent has
 * an address to send back to) and sends a subscribe datagram from it to the span socket.
 * Again is harmless (the same address). Returns 0, -EBADF (closed), or a negative errno of
 * socket()/bind()/sendto() (-ENOENT, -ECONNREFUSED: no agent; the socket is kept).
 */
static inline int em_client_subscribe(em_client_t *c) {
  if (c == NULL) {
    return -EINVAL;
  }
  if (c->closed) {
    return -EBADF;
  }
  if (c->sub_fd < 0) {
    struct sockaddr_un addr;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      return -errno;
    }
    memset(&addr, 0, sizeof(addr));
    addr.sun_family = AF_UNIX;
    if (bind(fd, (const struct sockaddr *)&addr, (socklen_t)sizeof(sa_family_t)) != 0) {
      int err = errno;
      close(fd);
      return -err;
    }
    c->sub_fd = fd;
  }
  return em_client__send_sub(c, 3);
}

/*
 * Waits up to timeout_ms (< 0: no limit; 0: only what is queued) for the next level push and
 * decodes it into *out (seq 0). Subscribes first when not subscribed. Invalid datagrams are
 * counted (push_invalid) and skipped. Returns 0, -ETIMEDOUT, -EINVAL, or the negative errno
 * of subscribing or of poll()/recv().
 */
static inline int em_client_wait_change(em_client_t *c, int timeout_ms, em_client_state_t *out) {
  uint64_t deadline;
  if (c == NULL || out == NULL) {
    return -EINVAL;
  }
  if (c->sub_fd < 0) {
    int rc = em_client_subscribe(c);
    if (c->sub_fd < 0) {
      return rc;
    }
  }
  deadline = em_client_now_ns() + (timeout_ms > 0 ? (uint64_t)timeout_ms * 1000000ull : 0);
  for (;;) {
    uint8_t buf[EM_CLIENT_PUSH_BYTES + 1]; /* one more: a longer datagram is invalid */
    struct pollfd pfd;
    int wait_ms = -1;
    ssize_t n;
    int rc;
    if (timeout_ms >= 0) {
      uint64_t now = em_client_now_ns();
      uint64_t left = now < deadline ? deadline - now : 0;
      wait_ms = (int)((left + 999999ull) / 1000000ull);
    }
    pfd.fd = c->sub_fd;
    pfd.events = POLLIN;
    pfd.revents = 0;
    rc = poll(&pfd, 1, wait_ms);
    if (rc < 0) {
      if (errno == EINTR) {
        continue;
      }
      return -errno;
    }
    if (rc == 0) {
      return -ETIMEDOUT;
    }
    n = recv(c->sub_fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        continue;
      }
      return -errno;
    }
    if (em_client_push_decode(buf, (size_t)n, out) == 0) {
      return 0;
    }
    c->push_invalid++;
  }
}

/* Sends an unsubscribe datagram and closes the push socket. Returns 0, -ENOTCONN (not
 * subscribed) or the negative errno of sendto() (the socket is closed either way). */
static inline int em_client_unsubscribe(em_client_t *c) {
  int rc;
  if (c == NULL) {
    return -EINVAL;
  }
  if (c->sub_fd < 0) {
    return -ENOTCONN;
  }
  rc = em_client__send_sub(c, 4);
  close(c->sub_fd);
  c->sub_fd = -1;
  return rc;
}

/*
 * Opens a client for the span socket at `socket_path` (borrowed; NULL or "": the default
 * path, see the top of this file) and tries to connect once. An absent agent is not an error:
 * spans are dropped and counted until it appears.
 * Returns 0, -EINVAL (c NULL) or -ENAMETOOLONG (the path does not fit a sockaddr_un). On an
 * error the client is still safe to use: every span is dropped and counted as other.
 */
static inline int em_client_open(em_client_t *c, const char *socket_path) {
  int rc = 0;
  if (c == NULL) {
    return -EINVAL;
  }
  memset(c, 0, sizeof(*c));
  c->fd = -1;
  c->sub_fd = -1;
  c->closed = 1;
  (void)em_client_default_state_path(c->state_path, sizeof(c->state_path));
  c->unconnected_reason = EM_CLIENT_DROP_NO_AGENT;
  c->pid = (uint32_t)getpid();
  if (socket_path != NULL && socket_path[0] != '\0') {
    size_t len = strlen(socket_path);
    if (len >= EM_CLIENT_PATH_BYTES) {
      return -ENAMETOOLONG;
    }
    memcpy(c->path, socket_path, len + 1);
  } else {
    rc = em_client_default_path(c->path, sizeof(c->path));
    if (rc != 0) {
      return rc;
    }
  }
  c->closed = 0;
  (void)em_client__connect(c, em_client_now_ns());
  return 0;
}

/* Closes the socket. Later spans are dropped (other). Safe on a closed client; NULL is a no-op. */
static inline void em_client_close(em_client_t *c) {
  if (c == NULL) {
    return;
  }
  em_client__disconnect(c);
  em_client__page_drop(c);
  if (c->sub_fd >= 0) {
    close(c->sub_fd);
    c->sub_fd = -1;
  }
  c->closed = 1;
}

/* Sets the frame id that spans and heartbeats carry when they are not given one. */
static inline void em_client_set_frame(em_client_t *c, uint64_t frame_id) {
  if (c != NULL) {
    c->frame_id = frame_id;
  }
}

/* Sends a span the caller timed (start: em_client_now_ns()), with the current frame id.
 * Returns 0 or a negative errno as em_client__emit documents (the drop is already counted). */
static inline int em_client_record(em_client_t *c, const char *stage, uint64_t start_ns,
                                   uint64_t duration_ns) {
  return em_client__emit(c, 1, stage, c != NULL ? c->frame_id : 0, start_ns, duration_ns);
}

/* em_client_record() with an explicit frame id. */
static inline int em_client_record_frame(em_client_t *c, const char *stage, uint64_t frame_id,
                                         uint64_t start_ns, uint64_t duration_ns) {
  return em_client__emit(c, 1, stage, frame_id, start_ns, duration_ns);
}

/* Sends the span of `stage` from start_ns until now. */
static inline int em_client_span_end_at(em_client_t *c, const char *stage, uint64_t start_ns) {
  uint64_t end_ns = em_client_now_ns();
  return em_client_record(c, stage, start_ns, end_ns - start_ns);
}

/* Tells the agent `stage` is alive (stall rules), with no duration, at the current frame. */
static inline int em_client_heartbeat(em_client_t *c, const char *stage) {
  return em_client__emit(c, 2, stage, c != NULL ? c->frame_id : 0, em_client_now_ns(), 0);
}

/* Starts timing `stage` (borrowed until em_client_span_end). */
static inline em_client_span_t em_client_span_begin(em_client_t *c, const char *stage) {
  em_client_span_t s;
  s.client = c;
  s.stage = stage;
  s.done = 0;
  s.start_ns = em_client_now_ns();
  return s;
}

/* Ends the span and sends it with the client's current frame id (as the Python client does:
 * the frame current when the span ends). Returns as em_client_record(). */
static inline int em_client_span_end(em_client_span_t *s) {
  uint64_t end_ns = em_client_now_ns();
  s->done = 1;
  return em_client_record(s->client, s->stage, s->start_ns, end_ns - s->start_ns);
}

/* All datagrams dropped, every reason together. */
static inline uint64_t em_client_dropped_total(const em_client_t *c) {
  uint64_t total = 0;
  for (int i = 0; i < EM_CLIENT_DROP_COUNT; i++) {
    total += c->dropped[i];
  }
  return total;
}

#define EM_CLIENT__CAT2(a, b) a##b
#define EM_CLIENT__CAT(a, b)  EM_CLIENT__CAT2(a, b)

/*
 * Times the statement or block that follows:
 *
 *   EM_CLIENT_SPAN(&em, "infer") {
 *     run_inference();
 *   }
 *
 * The span is sent when the block ends normally. Leaving it with break, return, goto or
 * longjmp skips the send (use em_client_span_begin / em_client_span_end there).
 */
#define EM_CLIENT_SPAN(client, stage)                                                              \
  for (em_client_span_t EM_CLIENT__CAT(em_client__span_, __LINE__) =                               \
           em_client_span_begin((client), (stage));                                                \
       !EM_CLIENT__CAT(em_client__span_, __LINE__).done;                                           \
       (void)em_client_span_end(&EM_CLIENT__CAT(em_client__span_, __LINE__)))

#if defined(__cplusplus) && defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#endif /* EDGEMON_CLIENT_H */
