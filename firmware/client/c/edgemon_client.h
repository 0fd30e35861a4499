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
 * Ownership: the caller owns the em_client_t (stack, static or heap); the client owns one
 * socket descriptor from em_client_open() to em_client_close(). Strings passed in are
 * borrowed for the call. Nothing allocates.
 *
 * Threads: an em_client_t is used by one thread at a time (its counters and descriptor are
 * plain fields). Give each thread its own; each costs one descriptor.
 * Fork: the child must not share the parent's em_client_t: call em_client_close() and
 * em_client_open() in the child (the datagrams carry the sender's pid).
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
#include <sys/socket.h>
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
  memset(buf, 0, sizeof(buf));
  buf[0] = 0x45; /* 'E' */
  buf[1] = 0x4D; /* 'M' */
  buf[2] = 1;    /* version */
  buf[3] = kind;
  buf[4] = (uint8_t)c->pid;
  buf[5] = (uint8_t)(c->pid >> 8);
  buf[6] = (uint8_t)(c->pid >> 16);
  buf[7] = (uint8_t)(c->pid >> 24);
  em_client__put_u64(buf + 8, frame_id);
  em_client__put_u64(buf + 16, start_ns);
  em_client__put_u64(buf + 24, duration_ns);
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
  c->closed = 1;
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
