/*
 * edgemon_client.h - header-only C/C++ client that tells edgemon-agent how long each stage of
 * each frame took: through the calling thread's span ring v2 (shared memory, no system call per
 * span) when the agent runs one, else one 64-byte span datagram v1 (proto/WIRE.md) per span,
 * sent without blocking on an AF_UNIX SOCK_DGRAM socket connected to the agent's span socket.
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
 *    $EDGEMON_RUNTIME_DIR/spans.sock, else the default runtime directory + "/spans.sock":
 *    /run/edgemon for euid 0 or when /run/edgemon/spans.sock exists (the agent as a system
 *    service, whose RuntimeDirectory that is: a user in the edgemon group finds it with no
 *    setting), else $XDG_RUNTIME_DIR/edgemon when XDG_RUNTIME_DIR is an absolute path, else
 *    /tmp/edgemon-<euid> (the agent's own defaults, firmware/agent/config.c).
 *
 * Span rings v2 (proto/WIRE.md "Span ring v2", "Deadline page v1"), as the Python client:
 *  - Rings are tried only while a valid deadline page exists: $EDGEMON_DEADLINE_PAGE, else the
 *    file "deadlines" beside the span socket. It is stat()ed at most once a second; another
 *    inode is a new agent. Its hard deadlines and suggested slot count are read with its seqlock.
 *  - A thread's first span then makes its ring: a memfd of 128 + slots * 64 bytes (the page's
 *    ring_slots, else 1024), sealed against shrinking and growing, mapped read-write, and sends
 *    the register datagram (v2, kind 5, the memfd in SCM_RIGHTS) from a fresh autobound socket.
 *    While pending, spans go as datagrams v1 and each looks for the ack with one non-blocking
 *    recv(). Ack status 0: live, spans go to the ring (one 64-byte slot, then head with release:
 *    no system call). A negative status, or no ack within a second (a v1 agent): datagrams v1
 *    until the page's inode changes. Any failure to make the ring: datagrams, counted.
 *  - A live span over its stage's hard deadline also goes as a hard miss datagram (v2, kind 6).
 *  - A new agent (new page inode): the ring registers again at its current head; the spans
 *    written since the old agent was last seen are counted in agent_restart (an upper bound).
 *  - The ring is closed (state 2) when its thread ends (a pthread key destructor) or when
 *    em_client_close() runs on its thread. In a forked child (pthread_atfork) the parent's ring
 *    is forgotten, never written; the child's next span makes and registers its own.
 *  - One ring per thread (and translation unit), owned by the first client that spans in that
 *    thread; other clients used in the same thread meanwhile send datagrams v1.
 *  - Counters: em_client_t.ring_counters[] (em_client_ring_counter_t); `sent` counts datagrams
 *    only (v1 spans and kind-6 hard misses), ring_counters[EM_CLIENT_RING_WRITTEN] the slots.
 *
 * GPU spans (em_client_gpu_span_begin/_end, EM_CLIENT_GPU_SPAN): the block's GPU time from a
 * pair of CUDA events on a stream, never waited for, sent later as the stage "<stage>.gpu"
 * (same frame id, the CPU span's start) by a later GPU span of the thread or em_client_gpu_poll().
 * The driver is dlopen()ed ("libcuda.so.1") on first use: no CUDA header and no link-time
 * dependency, but dlopen itself is in libdl before glibc 2.34 (JetPack 5: glibc 2.31), so a
 * program calling them links with -ldl there. See "GPU spans" below.
 *
 * The agent's level (proto/WIRE.md): em_client_level() / em_client_state() read the state
 * page (<runtime_dir>/state, or $EDGEMON_STATE_PAGE, or em_client_set_state_path()), mapped
 * once, with the seqlock and no system call (a stat() of the path once per second follows a
 * new agent's page). em_client_subscribe() / em_client_wait_change() / em_client_unsubscribe()
 * receive level push datagrams on a second, autobound socket. Nothing here aborts: an absent
 * or garbled page is EM_CLIENT_LEVEL_UNKNOWN and counted in page_counters[].
 *
 * The pages are untrusted input: whoever can write the runtime directory can put anything at
 * their paths. Nothing here blocks on one: a page is opened only when lstat() and then fstat()
 * of the descriptor say it is a regular file, with O_NONBLOCK | O_NOFOLLOW | O_NOCTTY, and
 * mapped only when its size is the page's. A FIFO, a symbolic link, a directory, a device or a
 * socket there is refused and treated as no page: counted (page_counters[REFUSED],
 * dl_refusals), and the reason kept in page_refused / dl_refused (static text, NULL once a
 * look finds a regular file or nothing) for the application to report once.
 *
 * Ownership: the caller owns the em_client_t (stack, static or heap); the client owns one
 * socket descriptor from em_client_open() to em_client_close(). Strings passed in are
 * borrowed for the call. Nothing allocates on the heap (rings are memfd mappings).
 *
 * Threads: an em_client_t is used by one thread at a time (its counters and descriptor are
 * plain fields). Give each thread its own; each costs one descriptor, and one ring (a memfd
 * and a mapping) while a v2 agent runs. Link with -pthread where libc needs it (glibc < 2.34).
 * Fork: the child should not share the parent's em_client_t: call em_client_close() and
 * em_client_open() in the child (the datagrams carry the sender's pid; the push socket would
 * otherwise be shared with the parent). Its ring is the child's own either way.
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

#include <dlfcn.h> /* dlopen of the CUDA driver, by GPU spans only */
#include <errno.h>
#include <fcntl.h>
#include <limits.h> /* PATH_MAX */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h> /* snprintf */
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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

#define EM_CLIENT_RING_HEADER_BYTES 128u  /* Span ring v2 header. */
#define EM_CLIENT_RING_SLOT_BYTES   64u   /* One ring slot. */
#define EM_CLIENT_RING_SLOTS        1024u /* Default slots when the page suggests none. */
#define EM_CLIENT_RING_MIN_SLOTS    64u   /* WIRE.md's slot_count range. */
#define EM_CLIENT_RING_MAX_SLOTS    65536u
#define EM_CLIENT_ACK_TIMEOUT_NS    1000000000ull /* No ack within this: a v1 agent. */
#define EM_CLIENT_DEADLINE_BYTES    2624u         /* Deadline page v1. */
#define EM_CLIENT_DEADLINES_MAX     64u           /* Entries of a deadline page. */

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
  EM_CLIENT_PAGE_REFUSED,   /* Not a regular file there (a FIFO, a link...): as if absent. */
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

/* Counters of the span rings v2: indices of em_client_t.ring_counters[]. */
typedef enum {
  EM_CLIENT_RING_WRITTEN = 0,    /* Spans and heartbeats written to a ring (not in `sent`). */
  EM_CLIENT_RING_CREATED,        /* Rings made (memfd created, sealed, mapped). */
  EM_CLIENT_RING_SETUP_FAILED,   /* memfd_create/ftruncate/seal/mmap failed: datagrams. */
  EM_CLIENT_RING_REGISTRATIONS,  /* Register datagrams (kind 5) sent. */
  EM_CLIENT_RING_UNSENT,         /* Registers not sent (each sent again a second later). */
  EM_CLIENT_RING_ACCEPTED,       /* Acks with status 0: the ring went live. */
  EM_CLIENT_RING_REFUSED,        /* Acks with a negative status: datagrams. */
  EM_CLIENT_RING_UNANSWERED,     /* No ack within a second (a v1 agent): datagrams. */
  EM_CLIENT_RING_AGENT_RESTART,  /* Spans possibly lost to an agent restart (upper bound). */
  EM_CLIENT_RING_HARD_MISS,      /* Hard miss datagrams (kind 6) sent (also in `sent`). */
  EM_CLIENT_RING_HARD_MISS_LOST, /* Hard miss datagrams not sent (the span is in the ring). */
  EM_CLIENT_RING_CLOSED,         /* Rings closed (state 2) by em_client_close(). */
  EM_CLIENT_RING_COUNT
} em_client_ring_counter_t;

/* Counters of GPU spans (em_client_gpu_span_begin/_end): indices of em_client_t.gpu_counters[]. */
typedef enum {
  EM_CLIENT_GPU_RECORDED = 0, /* Event pairs recorded around a block (start and end). */
  EM_CLIENT_GPU_RESOLVED,     /* Pairs whose events completed, sent as "<stage>.gpu". */
  EM_CLIENT_GPU_DROPPED,      /* Oldest pending pairs given up: the GPU was a pool behind. */
  EM_CLIENT_GPU_FAILED,       /* Not measured: a driver call failed, or a name too long. */
  EM_CLIENT_GPU_COUNT
} em_client_gpu_counter_t;

/* Model identity (em_client_set_model, WIRE.md "Model identity"). */
#define EM_CLIENT_MODEL_BYTES      512u /* One model datagram v2. */
#define EM_CLIENT_MODEL_MAX_LABELS 8u

/* One label of a model identity: key 1..15 bytes of [A-Za-z_][A-Za-z0-9_]*, not "__...";
 * value 1..31 bytes of printable ASCII. Both borrowed for the call. */
typedef struct {
  const char *key;
  const char *value;
} em_client_label_t;

/* Counters of em_client_set_model: indices of em_client_t.model_counters[]. */
typedef enum {
  EM_CLIENT_MODEL_CALLS = 0,         /* em_client_set_model calls. */
  EM_CLIENT_MODEL_SENT,              /* Model datagrams the kernel accepted. */
  EM_CLIENT_MODEL_SEND_FAILED,       /* Sends that failed (each sent again a second later). */
  EM_CLIENT_MODEL_INVALID_MODEL,     /* Calls dropped for their name or version. */
  EM_CLIENT_MODEL_INVALID_LABEL,     /* Labels dropped (bad key or value, a key twice). */
  EM_CLIENT_MODEL_LABELS_OVER_LIMIT, /* Valid labels past the 8th, dropped. */
  EM_CLIENT_MODEL_COUNT
} em_client_model_counter_t;

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
  const char *page_refused;                     /* Why the last look refused it, or NULL. */
  char state_path[EM_CLIENT_STATE_PATH_BYTES];  /* The state page file. */
  /* Level pushes (em_client_subscribe, em_client_wait_change). */
  int sub_fd;            /* Autobound push socket, or -1. */
  uint64_t push_invalid; /* Received datagrams that were not valid level pushes. */
  /* Span rings v2 (the rings themselves are per thread: em_client__ring_t). */
  uint64_t serial;                                /* This open's identity, owner of rings. */
  uint64_t agent_gen;                             /* +1 whenever the deadline page changes inode. */
  uint64_t dl_next_check_ns;                      /* No stat() of the deadline page before this. */
  const uint8_t *dl_page;                         /* Read-only mapping of a valid page, or NULL. */
  uint64_t dl_dev, dl_ino;                        /* The mapped page's identity. */
  uint32_t dl_seq;                                /* seq of the entries below. */
  uint32_t dl_slots;                              /* Slot count of new rings (page's, or 1024). */
  uint32_t dl_count;                              /* Hard deadlines in use. */
  uint8_t dl_len[EM_CLIENT_DEADLINES_MAX];        /* Stage name lengths. */
  char dl_stage[EM_CLIENT_DEADLINES_MAX][32];     /* Stage names, NUL-padded. */
  uint64_t dl_ns[EM_CLIENT_DEADLINES_MAX];        /* Their hard deadlines. */
  uint64_t ring_counters[EM_CLIENT_RING_COUNT];   /* By em_client_ring_counter_t. */
  char deadline_path[EM_CLIENT_STATE_PATH_BYTES]; /* The deadline page file. */
  uint64_t dl_refusals;                           /* Looks that found no regular file there. */
  const char *dl_refused;                         /* Why the last look refused it, or NULL. */
  /* Model identity: the last datagram em_client_set_model packed, sent again by the agent
   * check when its send failed or a new agent appeared. */
  uint8_t model[EM_CLIENT_MODEL_BYTES];
  int model_set;                                  /* model holds an identity. */
  int model_pending;                              /* It still has to reach an agent. */
  uint32_t model_generation;                      /* set_model calls accepted. */
  uint64_t model_agent_gen;                       /* agent_gen when the model was last sent. */
  uint64_t model_counters[EM_CLIENT_MODEL_COUNT]; /* By em_client_model_counter_t. */
  /* GPU spans: their counters, and why the last one was CPU only (static text), or NULL. */
  uint64_t gpu_counters[EM_CLIENT_GPU_COUNT]; /* By em_client_gpu_counter_t. */
  const char *gpu_off;
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

/*
 * Internal: out = a + b when it fits in `cap` and, when `sockaddr` is nonzero, in a
 * sockaddr_un; else out = "" and -ENAMETOOLONG.
 */
static inline int em_client__join_bounded(char *out, size_t cap, const char *a, const char *b,
                                          int sockaddr) {
  size_t la = strlen(a);
  size_t lb = strlen(b);
  if (la + lb >= cap || (sockaddr && la + lb >= EM_CLIENT_PATH_BYTES)) {
    out[0] = '\0';
    return -ENAMETOOLONG;
  }
  memcpy(out, a, la);
  memcpy(out + la, b, lb + 1);
  return 0;
}

/* Internal: out = a + b when it fits in `cap` and in a sockaddr_un; else -ENAMETOOLONG. */
static inline int em_client__join(char *out, size_t cap, const char *a, const char *b) {
  return em_client__join_bounded(out, cap, a, b, 1);
}

/* Internal: out = a + b when it fits in `cap`; else -ENAMETOOLONG. */
static inline int em_client__join_any(char *out, size_t cap, const char *a, const char *b) {
  return em_client__join_bounded(out, cap, a, b, 0);
}

/*
 * The agent's default runtime directory as this process can reach it, into dir[0..cap):
 * /run/edgemon for euid 0 or when it holds a span socket (the system service's
 * RuntimeDirectory, reachable by the edgemon group), else $XDG_RUNTIME_DIR/edgemon when that
 * is an absolute path, else /tmp/edgemon-<euid>. Returns 0 or -ENAMETOOLONG.
 */
#ifndef EM_CLIENT_SERVICE_DIR
#define EM_CLIENT_SERVICE_DIR "/run/edgemon" /* The service's RuntimeDirectory (tests move it). */
#endif

static inline int em_client__runtime_dir(char *dir, size_t cap) {
  const char *xdg_env = getenv("XDG_RUNTIME_DIR");
  int n;
  char sock[PATH_MAX];
  snprintf(sock, sizeof(sock), "%s/spans.sock", EM_CLIENT_SERVICE_DIR);
  if (geteuid() == 0 || access(sock, F_OK) == 0) {
    n = snprintf(dir, cap, "%s", EM_CLIENT_SERVICE_DIR);
  } else if (xdg_env != NULL && xdg_env[0] == '/') {
    n = snprintf(dir, cap, "%s/edgemon", xdg_env);
  } else {
    n = snprintf(dir, cap, "/tmp/edgemon-%lu", (unsigned long)geteuid());
  }
  return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/*
 * Internal: the default path of a file in the agent's runtime directory into out[0..cap):
 * $<env> when set and not empty, else $EDGEMON_RUNTIME_DIR + name, else the default runtime
 * directory (em_client__runtime_dir()) + name; a socket's path (`sockaddr` nonzero) must also
 * fit in a sockaddr_un. Returns 0, -EINVAL (NULL or cap 0) or -ENAMETOOLONG.
 */
static inline int em_client__default_file(char *out, size_t cap, const char *env, const char *name,
                                          int sockaddr) {
  const char *file_env = getenv(env);
  const char *runtime_env = getenv("EDGEMON_RUNTIME_DIR");
  char dir[PATH_MAX];
  if (out == NULL || cap == 0) {
    return -EINVAL;
  }
  if (file_env != NULL && file_env[0] != '\0') {
    return em_client__join_bounded(out, cap, file_env, "", sockaddr);
  }
  if (runtime_env != NULL && runtime_env[0] != '\0') {
    return em_client__join_bounded(out, cap, runtime_env, name, sockaddr);
  }
  int rc = em_client__runtime_dir(dir, sizeof(dir));
  return rc < 0 ? rc : em_client__join_bounded(out, cap, dir, name, sockaddr);
}

/*
 * Writes the default span socket path (see the top of this file; the explicit argument
 * excepted) into out[0..cap). Returns 0, -EINVAL (NULL or cap 0) or -ENAMETOOLONG (the path
 * does not fit in `cap`, or in a sockaddr_un).
 */
static inline int em_client_default_path(char *out, size_t cap) {
  return em_client__default_file(out, cap, "EDGEMON_SOCKET", "/spans.sock", 1);
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

/*
 * Writes the default state page path into out[0..cap): $EDGEMON_STATE_PAGE, else
 * $EDGEMON_RUNTIME_DIR/state, else the agent's default runtime dir + "/state" (as for the
 * span socket, em_client__runtime_dir()).
 * Returns 0, -EINVAL or -ENAMETOOLONG.
 */
static inline int em_client_default_state_path(char *out, size_t cap) {
  return em_client__default_file(out, cap, "EDGEMON_STATE_PAGE", "/state", 0);
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

/* Internal: what a file of mode `mode` is, in words, when it is not a regular file. */
static inline const char *em_client__file_kind(mode_t mode) {
  static const struct {
    mode_t type;
    const char *text;
  } kinds[] = {
      {S_IFLNK, "a symbolic link, not a regular file"},
      {S_IFIFO, "a FIFO, not a regular file"},
      {S_IFDIR, "a directory, not a regular file"},
      {S_IFCHR, "a character device, not a regular file"},
      {S_IFBLK, "a block device, not a regular file"},
      {S_IFSOCK, "a socket, not a regular file"},
  };
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
    if ((mode & S_IFMT) == kinds[i].type) {
      return kinds[i].text;
    }
  }
  return "not a regular file";
}

/*
 * Internal: opens one of the agent's pages read-only, trusting nothing at its path: whoever
 * can write the runtime directory can put anything there, and a FIFO would hold a plain open()
 * until a writer came. lstat() first, so anything but a regular file is refused unopened;
 * then open() with O_NONBLOCK (a FIFO swapped in meanwhile opens at once), O_NOFOLLOW (the
 * agent renames regular files into place, never links), O_NOCTTY and O_CLOEXEC; then fstat()
 * of the descriptor, so the file checked is the file opened. Returns the descriptor with *st
 * filled, or -1: *why NULL when there is no file or it cannot be opened (absent), else a
 * static text saying what stands there instead (refused: the caller treats it as absent).
 */
static inline int em_client__page_fd(const char *path, struct stat *st, const char **why) {
  int fd;
  *why = NULL;
  if (lstat(path, st) != 0) {
    return -1;
  }
  if (!S_ISREG(st->st_mode)) {
    *why = em_client__file_kind(st->st_mode);
    return -1;
  }
  fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ELOOP) { /* swapped for a link after the lstat() */
      *why = em_client__file_kind(S_IFLNK);
    }
    return -1;
  }
  if (fstat(fd, st) != 0) {
    close(fd);
    return -1;
  }
  if (!S_ISREG(st->st_mode)) { /* swapped after the lstat(): the opened file counts */
    *why = em_client__file_kind(st->st_mode);
    close(fd);
    return -1;
  }
  return fd;
}

/*
 * Internal: maps `bytes` of the page file at `path` read-only, opened through
 * em_client__page_fd() (a regular file only). Its size must be exactly `bytes` (exact) or at
 * least `bytes`; a file of another size is refused before mapping, so the mapping never
 * faults. *st receives the file's identity, *why what refused it (NULL when it is absent),
 * *opened whether it could be opened. Returns the mapping, or NULL.
 */
static inline const uint8_t *em_client__page_map(const char *path, size_t bytes, int exact,
                                                 struct stat *st, const char **why, int *opened) {
  void *map;
  int fd = em_client__page_fd(path, st, why);
  *opened = fd >= 0;
  if (fd < 0) {
    return NULL;
  }
  if (exact ? st->st_size != (off_t)bytes : st->st_size < (off_t)bytes) {
    close(fd);
    return NULL;
  }
  map = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  return map == MAP_FAILED ? NULL : (const uint8_t *)map;
}

/* Internal: is the file stat() found at a page's path the one mapped at `page` (dev, ino)? */
static inline int em_client__same_page(const uint8_t *page, const struct stat *st, uint64_t dev,
                                       uint64_t ino) {
  return page != NULL && (uint64_t)st->st_dev == dev && (uint64_t)st->st_ino == ino;
}

/* Internal: unmaps the `bytes` mapped at *page, if any, and sets *page to NULL. */
static inline void em_client__page_unmap(const uint8_t **page, size_t bytes) {
  if (*page != NULL) {
    munmap((void *)(uintptr_t)*page, bytes);
    *page = NULL;
  }
}

/* Internal: forgets the mapping and what was read from it. */
static inline void em_client__page_drop(em_client_t *c) {
  em_client__page_unmap(&c->page, EM_CLIENT_PAGE_BYTES);
  c->page_dev = 0;
  c->page_ino = 0;
  c->page_cached = 0;
}

/* Internal: opens and maps the page file when it is a v1 page. */
static inline void em_client__page_open(em_client_t *c) {
  struct stat st;
  int opened = 0;
  const uint8_t *p =
      em_client__page_map(c->state_path, EM_CLIENT_PAGE_BYTES, 1, &st, &c->page_refused, &opened);
  if (!opened) {
    c->page_counters[c->page_refused != NULL ? EM_CLIENT_PAGE_REFUSED : EM_CLIENT_PAGE_ABSENT]++;
    return;
  }
  c->page_counters[EM_CLIENT_PAGE_OPENS]++;
  if (p == NULL) { /* ESIZE, or not mappable */
    c->page_counters[EM_CLIENT_PAGE_INVALID]++;
    return;
  }
  /* The header is written once, before the page is renamed into place. */
  if (memcmp(p, "EMST", 4) != 0 || (p[4] | p[5] << 8) != 1 ||
      (p[6] | p[7] << 8) != (int)EM_CLIENT_PAGE_BYTES) {
    em_client__page_unmap(&p, EM_CLIENT_PAGE_BYTES);
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
    c->page_refused = NULL;
    return;
  }
  if (em_client__same_page(c->page, &st, c->page_dev, c->page_ino)) {
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

/* ---- Span ring v2 (proto/WIRE.md "Span ring v2", "Deadline page v1") ---- */

/* memfd and seals: declared by glibc only under _GNU_SOURCE; the values are Linux's ABI. */
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC       0x0001u
#define MFD_ALLOW_SEALING 0x0002u
extern int memfd_create(const char *name, unsigned int flags);
#endif
#ifndef F_ADD_SEALS
#define F_ADD_SEALS   1033
#define F_SEAL_SEAL   0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW   0x0004
#endif

#if defined(__cplusplus)
#define EM_CLIENT__THREAD_LOCAL thread_local
#else
#define EM_CLIENT__THREAD_LOCAL _Thread_local
#endif

/* Internal: ring modes (em_client__ring_t.mode). */
enum {
  EM_CLIENT__RING_NONE = 0,  /* Not registered, or the register could not be sent (tried again
                              * a second later: the agent never saw it). */
  EM_CLIENT__RING_PENDING,   /* Register sent, waiting for the ack: spans go as datagrams. */
  EM_CLIENT__RING_LIVE,      /* Acked: spans go to the ring. */
  EM_CLIENT__RING_REFUSED,   /* Negative ack: datagrams until the agent changes. */
  EM_CLIENT__RING_UNANSWERED /* No ack in a second: datagrams until the agent changes. */
};

/* Internal: the calling thread's ring. Zero is "no ring"; memfd is valid while mem is set, sock
 * while the mode is pending. */
typedef struct {
  uint8_t *mem;             /* Read-write mapping of the memfd, or NULL. */
  size_t bytes;             /* Its length: 128 + slot_count * 64. */
  int memfd;                /* The ring's memfd (kept for registering again). */
  int sock;                 /* Autobound socket the ack comes back to, while pending. */
  int mode;                 /* EM_CLIENT__RING_*. */
  int failed;               /* Setup failed for (owner, gen): not tried again until it changes. */
  uint32_t mask;            /* slot_count - 1. */
  uint64_t pos;             /* Writer position: slots written since the ring was made. */
  uint64_t start;           /* Head at the last registration. */
  uint64_t checkpoint;      /* pos when the agent was last seen unchanged. */
  uint64_t ack_deadline_ns; /* Pending: unanswered after this. */
  uint64_t retry_ns;        /* Unsent: the register is sent again from this on. */
  uint64_t next_check_ns;   /* Live: the slow path (agent check) runs from this on. */
  uint64_t owner;           /* em_client_t.serial of the client that made it. */
  uint64_t gen;             /* The owner's agent_gen at its last registration. */
} em_client__ring_t;

/* Internal: the calling thread's ring (one per thread and translation unit). */
static inline em_client__ring_t *em_client__ring_tls(void) {
  static EM_CLIENT__THREAD_LOCAL em_client__ring_t ring;
  return &ring;
}

/* Internal: unmaps the ring and closes its descriptors; marks it closed (state 2, release)
 * first when `mark` (this process wrote it). The thread's ring is "none" afterwards. */
static inline void em_client__ring_release(em_client__ring_t *r, int mark) {
  if (r->mem != NULL) {
    if (mark) {
      __atomic_store_n((uint32_t *)(void *)(r->mem + 48), (uint32_t)2, __ATOMIC_RELEASE);
    }
    munmap(r->mem, r->bytes);
    close(r->memfd);
  }
  if (r->mode == EM_CLIENT__RING_PENDING) {
    close(r->sock);
  }
  memset(r, 0, sizeof(*r));
}

/* Internal: pthread key destructor: the thread ended, its ring is closed. */
static inline void em_client__ring_thread_exit(void *arg) {
  em_client__ring_release((em_client__ring_t *)arg, 1);
}

/* Internal: fork child: the parent's ring is forgotten, never written; the child makes its own. */
static inline void em_client__ring_atfork_child(void) {
  em_client__ring_release(em_client__ring_tls(), 0);
}

/* Internal: the thread-exit key (and the fork handler), made once per translation unit. */
static inline pthread_key_t *em_client__ring_key(void) {
  static pthread_key_t key;
  return &key;
}
static inline int *em_client__ring_key_ok(void) {
  static int ok;
  return &ok;
}
static inline void em_client__ring_once_init(void) {
  if (pthread_key_create(em_client__ring_key(), em_client__ring_thread_exit) == 0 &&
      pthread_atfork(NULL, NULL, em_client__ring_atfork_child) == 0) {
    *em_client__ring_key_ok() = 1;
  }
}
static inline int em_client__ring_setup_once(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  return pthread_once(&once, em_client__ring_once_init) == 0 && *em_client__ring_key_ok();
}

/* Internal: this process's start time, field 22 of /proc/self/stat (clock ticks), or 0. */
static inline uint64_t em_client__start_time(void) {
  char buf[1024];
  uint64_t v = 0;
  ssize_t n;
  const char *p;
  int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return 0;
  }
  n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) {
    return 0;
  }
  buf[n] = '\0';
  p = strrchr(buf, ')'); /* comm may hold spaces and parentheses */
  if (p == NULL) {
    return 0;
  }
  for (int field = 2; field < 22 && *p != '\0'; p++) {
    if (*p == ' ') {
      field++;
    }
    if (field == 22) {
      p++;
      break;
    }
  }
  while (*p >= '0' && *p <= '9') {
    v = v * 10 + (uint64_t)(*p++ - '0');
  }
  return v;
}

/* Internal: the calling thread's id (informative in the header), or 0. */
static inline uint32_t em_client__tid(void) {
#if defined(SYS_gettid) && (defined(_GNU_SOURCE) || defined(_DEFAULT_SOURCE))
  return (uint32_t)syscall(SYS_gettid);
#else
  return 0;
#endif
}

/* Internal: u32/u16 little-endian at p. */
static inline void em_client__put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) {
    p[i] = (uint8_t)(v >> (8 * i));
  }
}

/* Internal: makes the thread's ring of `slots` slots: a sealed memfd, mapped read-write, its
 * header written (head 0, open). 0 or a negative errno (nothing is left behind). */
static inline int em_client__ring_create(em_client__ring_t *r, uint32_t slots) {
  size_t bytes = (size_t)EM_CLIENT_RING_HEADER_BYTES + (size_t)slots * EM_CLIENT_RING_SLOT_BYTES;
  void *map;
  uint8_t *h;
  int err;
  int fd = memfd_create("edgemon-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    return -errno;
  }
  if (ftruncate(fd, (off_t)bytes) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    err = errno;
    close(fd);
    return -err;
  }
  map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    err = errno;
    close(fd);
    return -err;
  }
  h = (uint8_t *)map; /* the memfd starts zeroed: head, lost and reserved bytes are 0 */
  memcpy(h, "EMRG", 4);
  h[4] = 2; /* version */
  h[6] = (uint8_t)EM_CLIENT_RING_HEADER_BYTES;
  h[8] = (uint8_t)EM_CLIENT_RING_SLOT_BYTES;
  em_client__put_u32(h + 12, slots);
  em_client__put_u32(h + 16, (uint32_t)getpid());
  em_client__put_u32(h + 20, em_client__tid());
  em_client__put_u64(h + 24, em_client__start_time());
  em_client__put_u32(h + 48, 1); /* open */
  memset(r, 0, sizeof(*r));
  r->mem = h;
  r->bytes = bytes;
  r->memfd = fd;
  r->mask = slots - 1;
  return 0;
}

/* Internal: sends the register datagram (start = the current head) with the memfd from a fresh
 * autobound socket to the span socket; the ring is then pending (none when it failed: the agent
 * never saw it, so it is sent again a second later). */
static inline void em_client__ring_register(em_client_t *c, em_client__ring_t *r, uint64_t now_ns) {
  uint8_t buf[EM_CLIENT_DGRAM_BYTES];
  union {
    struct cmsghdr align;
    char bytes[CMSG_SPACE(sizeof(int))];
  } control;
  struct cmsghdr *cm;
  struct sockaddr_un addr;
  struct iovec iov;
  struct msghdr msg;
  int fd;
  if (r->mode == EM_CLIENT__RING_PENDING) {
    close(r->sock);
  }
  r->mode = EM_CLIENT__RING_NONE;
  r->start = r->pos;
  r->checkpoint = r->pos;
  r->gen = c->agent_gen;
  r->retry_ns = now_ns + EM_CLIENT_ACK_TIMEOUT_NS; /* used only if this one is not sent */
  em_client__pack(buf, (uint32_t)getpid(), 5, r->pos, 0, 0);
  buf[2] = 2; /* version 2 */
  fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    c->ring_counters[EM_CLIENT_RING_UNSENT]++;
    return;
  }
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  if (bind(fd, (const struct sockaddr *)&addr, (socklen_t)sizeof(sa_family_t)) != 0) {
    close(fd);
    c->ring_counters[EM_CLIENT_RING_UNSENT]++;
    return;
  }
  memcpy(addr.sun_path, c->path, strlen(c->path)); /* fits: checked at open */
  memset(&control, 0, sizeof(control));
  memset(&msg, 0, sizeof(msg));
  iov.iov_base = buf;
  iov.iov_len = sizeof(buf);
  msg.msg_name = &addr;
  msg.msg_namelen = (socklen_t)sizeof(addr);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.bytes;
  msg.msg_controllen = sizeof(control.bytes);
  cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &r->memfd, sizeof(int));
  if (sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof(buf)) {
    close(fd);
    c->ring_counters[EM_CLIENT_RING_UNSENT]++;
    return;
  }
  c->ring_counters[EM_CLIENT_RING_REGISTRATIONS]++;
  r->sock = fd;
  r->mode = EM_CLIENT__RING_PENDING;
  r->ack_deadline_ns = now_ns + EM_CLIENT_ACK_TIMEOUT_NS;
}

/* Internal: while pending, reads what is queued on the ring's socket (never waits) and moves
 * the ring to live, refused or, after a second without an ack, unanswered. */
static inline void em_client__ring_poll_ack(em_client_t *c, em_client__ring_t *r, uint64_t now_ns) {
  for (;;) {
    uint8_t buf[EM_CLIENT_DGRAM_BYTES * 2];
    ssize_t n = recv(r->sock, buf, sizeof(buf), MSG_DONTWAIT);
    int64_t status;
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        break;
      }
      now_ns = UINT64_MAX; /* the socket is broken: no ack will come */
      break;
    }
    if (n != (ssize_t)EM_CLIENT_DGRAM_BYTES || buf[0] != 0x45 || buf[1] != 0x4D || buf[2] != 2 ||
        buf[3] != 17 || em_client__get_u64(buf + 8) != r->start) {
      continue; /* not this registration's ack: ignored */
    }
    status = (int64_t)em_client__get_u64(buf + 16);
    close(r->sock);
    r->checkpoint = r->pos;
    if (status == 0) {
      r->mode = EM_CLIENT__RING_LIVE;
      c->ring_counters[EM_CLIENT_RING_ACCEPTED]++;
    } else {
      r->mode = EM_CLIENT__RING_REFUSED;
      c->ring_counters[EM_CLIENT_RING_REFUSED]++;
    }
    return;
  }
  if (now_ns >= r->ack_deadline_ns) {
    close(r->sock);
    r->mode = EM_CLIENT__RING_UNANSWERED;
    c->ring_counters[EM_CLIENT_RING_UNANSWERED]++;
  }
}

/* Internal: forgets the deadline page mapping and its entries. */
static inline void em_client__dl_drop(em_client_t *c) {
  em_client__page_unmap(&c->dl_page, EM_CLIENT_DEADLINE_BYTES);
  c->dl_dev = 0;
  c->dl_ino = 0;
  c->dl_count = 0;
}

/* Internal: the page's seqlock read of the entries when seq moved. 0, or -EBADMSG (not a
 * deadline page v1); every try overlapping a write keeps the previous entries. */
static inline int em_client__dl_read(em_client_t *c, int first) {
  const uint8_t *page = c->dl_page;
  uint8_t local[EM_CLIENT_DEADLINE_BYTES];
  for (int tries = 0; tries < EM_CLIENT_SEQLOCK_TRIES; tries++) {
    uint32_t s1 = em_client__load_seq(page, __ATOMIC_ACQUIRE);
    uint32_t count;
    uint32_t slots;
    if (!first && s1 == c->dl_seq) {
      return 0;
    }
    if (s1 & 1u) {
      continue;
    }
    for (size_t i = 0; i < sizeof(local); i++) {
      local[i] = __atomic_load_n(page + i, __ATOMIC_RELAXED);
    }
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (em_client__load_seq(page, __ATOMIC_RELAXED) != s1) {
      continue;
    }
    count = (uint32_t)(local[6] | local[7] << 8);
    if (memcmp(local, "EMDL", 4) != 0 || (local[4] | local[5] << 8) != 1 ||
        count > EM_CLIENT_DEADLINES_MAX) {
      return -EBADMSG;
    }
    slots = em_client__get_u32(local + 16);
    c->dl_slots = slots >= EM_CLIENT_RING_MIN_SLOTS && slots <= EM_CLIENT_RING_MAX_SLOTS &&
                          (slots & (slots - 1)) == 0
                      ? slots
                      : EM_CLIENT_RING_SLOTS;
    c->dl_count = 0;
    for (uint32_t i = 0; i < count; i++) {
      char name[32];
      uint64_t ns = em_client__get_u64(local + 96 + 40 * i);
      if (em_client__text(name, local + 64 + 40 * i, sizeof(name), 1) != 0 || name[0] == '\0' ||
          ns == 0) {
        continue; /* a bad entry is skipped, the others hold */
      }
      memcpy(c->dl_stage[c->dl_count], name, sizeof(name));
      c->dl_len[c->dl_count] = (uint8_t)strlen(name);
      c->dl_ns[c->dl_count] = ns;
      c->dl_count++;
    }
    c->dl_seq = s1;
    return 0;
  }
  return first ? -EBUSY : 0;
}

/* Internal, at most once per EM_CLIENT_PAGE_RECHECK_NS: stat()s the deadline page; another
 * inode (a new agent, the page appeared or went) maps it again and moves agent_gen. */
static inline void em_client__dl_check(em_client_t *c, uint64_t now_ns) {
  struct stat st;
  const uint8_t *p;
  int opened = 0;
  c->dl_next_check_ns = now_ns + EM_CLIENT_PAGE_RECHECK_NS;
  if (c->deadline_path[0] == '\0' || stat(c->deadline_path, &st) != 0) {
    c->dl_refused = NULL;
    if (c->dl_page != NULL) {
      em_client__dl_drop(c);
      c->agent_gen++;
    }
    return;
  }
  if (em_client__same_page(c->dl_page, &st, c->dl_dev, c->dl_ino)) {
    (void)em_client__dl_read(c, 0);
    return;
  }
  if (c->dl_page != NULL) {
    em_client__dl_drop(c);
    c->agent_gen++;
  }
  p = em_client__page_map(c->deadline_path, EM_CLIENT_DEADLINE_BYTES, 0, &st, &c->dl_refused,
                          &opened);
  if (!opened) {
    c->dl_refusals += c->dl_refused != NULL;
    return;
  }
  if (p == NULL) { /* too small, or not mappable */
    return;
  }
  c->dl_page = p;
  if (em_client__dl_read(c, 1) != 0) {
    em_client__dl_drop(c);
    return;
  }
  c->dl_dev = (uint64_t)st.st_dev;
  c->dl_ino = (uint64_t)st.st_ino;
  c->agent_gen++;
}

/* Internal, the slow path of a span: the agent check (deadline page, once a second), making
 * the thread's ring, registering it, polling for its ack. Returns 1 when the ring is live for
 * `c` now (the span goes to the ring), else 0 (the span goes as a datagram). */
/* Internal: one model datagram send on the connected socket (connecting first when there is
 * none), with a second try on a fresh socket when the agent restarted. Clears model_pending on
 * success; counts a failure (the agent check sends it again a second later). */
static inline void em_client__model_send(em_client_t *c, uint64_t now_ns) {
  int attempt;
  for (attempt = 0; attempt < 2; attempt++) {
    ssize_t n;
    if (c->fd < 0) {
      c->next_connect_ns = 0; /* the model is rare: no reason to wait for the next second */
      if (em_client__connect(c, now_ns) != 0) {
        break;
      }
    }
    n = send(c->fd, c->model, EM_CLIENT_MODEL_BYTES, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == (ssize_t)EM_CLIENT_MODEL_BYTES) {
      c->model_counters[EM_CLIENT_MODEL_SENT]++;
      c->model_pending = 0;
      c->model_agent_gen = c->agent_gen;
      return;
    }
    if (n >= 0 || !em_client__no_agent_errno(errno)) {
      break;
    }
    em_client__disconnect(c);
  }
  c->model_counters[EM_CLIENT_MODEL_SEND_FAILED]++;
  c->model_pending = 1;
}

/* Internal, from the once-a-second agent check: the identity again when its last send failed
 * or a new agent appeared (the deadline page's inode changed). */
static inline void em_client__model_check(em_client_t *c, uint64_t now_ns) {
  if (c->model_set && (c->model_pending || c->model_agent_gen != c->agent_gen)) {
    em_client__model_send(c, now_ns);
  }
}

static inline int em_client__ring_slow(em_client_t *c, em_client__ring_t *r) {
  uint64_t now_ns = em_client_now_ns();
  if (now_ns >= c->dl_next_check_ns) {
    em_client__dl_check(c, now_ns);
    em_client__model_check(c, now_ns);
  }
  if (r->mem != NULL && r->owner != c->serial) {
    return 0; /* this thread's ring belongs to another client: datagrams */
  }
  if (c->dl_page == NULL) {
    return 0; /* no valid deadline page: no v2 agent */
  }
  if (r->mem == NULL) {
    if (r->failed && r->owner == c->serial && r->gen == c->agent_gen) {
      return 0;
    }
    if (!em_client__ring_setup_once() || em_client__ring_create(r, c->dl_slots) != 0) {
      r->failed = 1;
      r->owner = c->serial;
      r->gen = c->agent_gen;
      c->ring_counters[EM_CLIENT_RING_SETUP_FAILED]++;
      return 0;
    }
    (void)pthread_setspecific(*em_client__ring_key(), r);
    r->owner = c->serial;
    r->gen = c->agent_gen + 1; /* never registered */
    c->ring_counters[EM_CLIENT_RING_CREATED]++;
  }
  if (r->gen != c->agent_gen ||
      (r->mode == EM_CLIENT__RING_NONE && now_ns >= r->retry_ns)) { /* new agent, or unsent */
    if (r->mode == EM_CLIENT__RING_LIVE) {
      /* A new agent: spans since the old one was last seen may never be drained. */
      c->ring_counters[EM_CLIENT_RING_AGENT_RESTART] += r->pos - r->checkpoint;
    }
    em_client__ring_register(c, r, now_ns);
  } else if (r->mode == EM_CLIENT__RING_PENDING) {
    em_client__ring_poll_ack(c, r, now_ns);
  }
  if (r->mode != EM_CLIENT__RING_LIVE) {
    return 0;
  }
  r->checkpoint = r->pos;
  r->next_check_ns = c->dl_next_check_ns;
  return 1;
}

/* Internal: writes one slot at the ring's position, then publishes head with release. The
 * release fence first orders the previous head store before this slot's stores (WIRE.md). */
static inline void em_client__ring_write(em_client__ring_t *r, uint8_t kind, const char *stage,
                                         size_t len, uint64_t frame_id, uint64_t start_ns,
                                         uint64_t duration_ns) {
  uint8_t slot[EM_CLIENT_RING_SLOT_BYTES];
  uint64_t p = r->pos;
  memset(slot, 0, sizeof(slot));
  em_client__put_u32(slot, (uint32_t)(p + 1));
  slot[4] = kind;
  em_client__put_u64(slot + 8, frame_id);
  em_client__put_u64(slot + 16, start_ns);
  em_client__put_u64(slot + 24, duration_ns);
  memcpy(slot + 32, stage, len);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  memcpy(r->mem + EM_CLIENT_RING_HEADER_BYTES + (size_t)(p & r->mask) * EM_CLIENT_RING_SLOT_BYTES,
         slot, sizeof(slot));
  p++;
  r->pos = p;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  p = __builtin_bswap64(p);
#endif
  __atomic_store_n((uint64_t *)(void *)(r->mem + 32), p, __ATOMIC_RELEASE);
}

/* Internal: the hard deadline of `stage` (len bytes) from the deadline page, or 0. */
static inline uint64_t em_client__hard_deadline(const em_client_t *c, const char *stage,
                                                size_t len) {
  for (uint32_t i = 0; i < c->dl_count; i++) {
    if (c->dl_len[i] == len && memcmp(c->dl_stage[i], stage, len) == 0) {
      return c->dl_ns[i];
    }
  }
  return 0;
}

/* Internal: a span over its hard deadline, already in the ring, also as a kind-6 datagram. */
static inline void em_client__hard_miss(em_client_t *c, const char *stage, size_t len,
                                        uint64_t frame_id, uint64_t start_ns,
                                        uint64_t duration_ns) {
  uint8_t buf[EM_CLIENT_DGRAM_BYTES];
  int rc = -ENOTCONN;
  em_client__pack(buf, c->pid, 6, frame_id, start_ns, duration_ns);
  buf[2] = 2; /* version 2 */
  memcpy(buf + 32, stage, len);
  if (c->fd >= 0 || em_client__connect(c, em_client_now_ns()) == 0) {
    rc = em_client__send_once(c, buf);
  }
  if (rc == 0) {
    c->sent++;
    c->ring_counters[EM_CLIENT_RING_HARD_MISS]++;
    return;
  }
  if (em_client__no_agent_errno(-rc)) {
    em_client__disconnect(c);
  }
  c->ring_counters[EM_CLIENT_RING_HARD_MISS_LOST]++;
}

/* Internal: a span (kind 1) or heartbeat (kind 2): to this thread's ring when it is live,
 * else as a datagram v1 (em_client__emit, which documents the returns). */
static inline int em_client__out(em_client_t *c, uint8_t kind, const char *stage, uint64_t frame_id,
                                 uint64_t start_ns, uint64_t duration_ns) {
  em_client__ring_t *r;
  size_t len = 0;
  if (c == NULL || c->closed || stage == NULL) {
    return em_client__emit(c, kind, stage, frame_id, start_ns, duration_ns);
  }
  r = em_client__ring_tls();
  if (r->mode != EM_CLIENT__RING_LIVE || r->owner != c->serial || r->gen != c->agent_gen ||
      start_ns + duration_ns >= r->next_check_ns) {
    if (c->deadline_path[0] == '\0' || !em_client__ring_slow(c, r)) {
      return em_client__emit(c, kind, stage, frame_id, start_ns, duration_ns);
    }
  }
  if (!em_client_stage_valid(stage)) {
    c->dropped[EM_CLIENT_DROP_INVALID_STAGE]++;
    return -EINVAL;
  }
  len = strlen(stage);
  em_client__ring_write(r, kind, stage, len, frame_id, start_ns, duration_ns);
  c->ring_counters[EM_CLIENT_RING_WRITTEN]++;
  if (kind == 1 && c->dl_count != 0) {
    uint64_t deadline_ns = em_client__hard_deadline(c, stage, len);
    if (deadline_ns != 0 && duration_ns > deadline_ns) {
      em_client__hard_miss(c, stage, len, frame_id, start_ns, duration_ns);
    }
  }
  return 0;
}

/* Internal: closes the calling thread's ring when `c` made it (state 2). */
static inline void em_client__ring_close_own(em_client_t *c) {
  em_client__ring_t *r = em_client__ring_tls();
  if (r->owner != c->serial) {
    return;
  }
  if (r->mem != NULL) {
    c->ring_counters[EM_CLIENT_RING_CLOSED]++;
  }
  em_client__ring_release(r, 1);
}

/*
 * GPU spans: the GPU time of a block, from a pair of CUDA events that nothing waits for.
 *
 *   em_client_gpu_span_t g = em_client_gpu_span_begin(&em, "infer", stream);
 *   launch_inference(stream);  // asynchronous: returns before the GPU is done
 *   em_client_gpu_span_end(&g); // "infer" (the CPU side) now, "infer.gpu" once the GPU is done
 *
 * The CUDA driver is loaded at run time with dlopen("libcuda.so.1") (EM_CLIENT_CUDA_LIB) on the
 * first GPU span of the process; nothing links against it and no CUDA header is needed. Only
 * cuInit, cuCtxGetCurrent, cuEventCreate, cuEventRecord, cuEventQuery, cuEventElapsedTime and
 * cuEventDestroy(_v2) are used. Begin records a start event on `stream` (a CUstream, NULL for
 * the legacy default stream; pass CU_STREAM_PER_THREAD, (void *)0x2, when the work goes to the
 * per-thread default stream) in the thread's current context, end sends the CPU span as
 * em_client_span_end() does and records the end event. The pair then waits in the thread's
 * pool; every GPU span begin and end of that thread, and em_client_gpu_poll(), look at the
 * pending pairs oldest first with cuEventQuery (which never blocks) up to the first whose end
 * event has not completed. A completed pair is sent as the stage "<stage>.gpu" with the frame
 * id of the span that recorded it, start_ns = that span's CPU start (the GPU cannot begin the
 * block's work earlier) and the duration cuEventElapsedTime gives: the stream's time from the
 * start event to the end event. Nothing synchronises: no cuEventSynchronize, no
 * cuStreamSynchronize, no cuCtxSynchronize.
 *
 * The pool: EM_CLIENT_GPU_PAIRS event pairs per thread (per translation unit), made on first
 * use in the current context and reused. When every pair is pending (the GPU is that many spans
 * behind) the oldest is given up, counted in gpu_counters[EM_CLIENT_GPU_DROPPED], and reused.
 * A pool belongs to the first client that records a GPU span in the thread; other clients on
 * that thread time the CPU side only until that client is closed there. A pair made in another
 * context than the current one is made again (its events destroyed). The events are destroyed
 * when the thread ends; a forked child forgets its parent's (CUDA does not survive fork).
 *
 * Without the driver (libcuda.so.1 absent), with cuInit failing (no device), or without a
 * current context in the thread, a GPU span is the plain CPU span; c->gpu_off says why (static
 * text, for the application to report once) and the check costs one load. Linking: dlopen is
 * in libdl before glibc 2.34 (JetPack 5's glibc 2.31): link with -ldl there when you use GPU
 * spans. A program that never calls them needs nothing more than before.
 */
#ifndef EM_CLIENT_CUDA_LIB
#define EM_CLIENT_CUDA_LIB "libcuda.so.1" /* The driver's soname (the one the driver installs). */
#endif
/* Event pairs per thread; the oldest pending pair is dropped past it. */
#define EM_CLIENT_GPU_PAIRS 16u

/* Internal: the driver's results used here (CUresult values) and its event flag. */
#define EM_CLIENT__CU_SUCCESS       0
#define EM_CLIENT__CU_NOT_READY     600
#define EM_CLIENT__CU_EVENT_DEFAULT 0u

/* Internal: the driver entry points, as pointers to our own minimal signatures: CUresult is an
 * int, CUcontext, CUevent and CUstream are opaque pointers. */
typedef struct {
  int state;       /* 0 not tried, 1 ready, -1 off. */
  const char *off; /* Why it is off (static text). */
  void *lib;       /* dlopen handle, kept for the life of the process. */
  int (*init)(unsigned int flags);
  int (*ctx_get_current)(void **ctx);
  int (*event_create)(void **event, unsigned int flags);
  int (*event_record)(void *event, void *stream);
  int (*event_query)(void *event);
  int (*event_elapsed)(float *ms, void *start, void *end);
  int (*event_destroy)(void *event);
} em_client__cuda_t;

static inline em_client__cuda_t *em_client__cuda(void) {
  static em_client__cuda_t cuda;
  return &cuda;
}

/* Internal: dlsym into a function pointer without the object-to-function cast ISO C forbids. */
static inline int em_client__cuda_sym(void *lib, const char *name, void *fn, size_t size) {
  void *sym = dlsym(lib, name);
  if (sym == NULL) {
    return 0;
  }
  memcpy(fn, &sym, size);
  return 1;
}

/* Internal: the once-per-process load (pthread_once): dlopen, the symbols, cuInit(0). */
static inline void em_client__cuda_load(void) {
  em_client__cuda_t *cu = em_client__cuda();
  cu->state = -1;
  cu->lib = dlopen(EM_CLIENT_CUDA_LIB, RTLD_NOW | RTLD_LOCAL);
  if (cu->lib == NULL) {
    cu->off = "no CUDA driver: " EM_CLIENT_CUDA_LIB " could not be loaded";
    return;
  }
  if (!em_client__cuda_sym(cu->lib, "cuInit", &cu->init, sizeof(cu->init)) ||
      !em_client__cuda_sym(cu->lib, "cuCtxGetCurrent", &cu->ctx_get_current,
                           sizeof(cu->ctx_get_current)) ||
      !em_client__cuda_sym(cu->lib, "cuEventCreate", &cu->event_create, sizeof(cu->event_create)) ||
      !em_client__cuda_sym(cu->lib, "cuEventRecord", &cu->event_record, sizeof(cu->event_record)) ||
      !em_client__cuda_sym(cu->lib, "cuEventQuery", &cu->event_query, sizeof(cu->event_query)) ||
      !em_client__cuda_sym(cu->lib, "cuEventElapsedTime", &cu->event_elapsed,
                           sizeof(cu->event_elapsed)) ||
      (!em_client__cuda_sym(cu->lib, "cuEventDestroy_v2", &cu->event_destroy,
                            sizeof(cu->event_destroy)) &&
       !em_client__cuda_sym(cu->lib, "cuEventDestroy", &cu->event_destroy,
                            sizeof(cu->event_destroy)))) {
    cu->off = "the CUDA driver lacks an event entry point";
    return;
  }
  if (cu->init(0) != EM_CLIENT__CU_SUCCESS) {
    cu->off = "cuInit failed: no CUDA device";
    return;
  }
  cu->state = 1;
}

/* Internal: pair states in a thread's pool. */
enum { EM_CLIENT__GPU_FREE = 0, EM_CLIENT__GPU_OPEN, EM_CLIENT__GPU_PENDING };

/* Internal: one event pair and what its span was. */
typedef struct {
  void *start, *end; /* CUevent handles, NULL until made. */
  void *ctx;         /* The context they were made in. */
  int state;         /* EM_CLIENT__GPU_*. */
  uint64_t frame_id; /* The frame of the span that recorded it. */
  uint64_t start_ns; /* That span's CPU start. */
  char stage[32];    /* "<stage>.gpu", NUL-terminated. */
} em_client__gpu_pair_t;

/* Internal: the calling thread's pool; pending pairs in fifo[head..head+count) (mod pairs). */
typedef struct {
  uint64_t owner; /* em_client_t.serial of the client using it, 0: none. */
  unsigned head, count;
  uint8_t fifo[EM_CLIENT_GPU_PAIRS];
  em_client__gpu_pair_t pair[EM_CLIENT_GPU_PAIRS];
} em_client__gpu_pool_t;

static inline em_client__gpu_pool_t *em_client__gpu_tls(void) {
  static EM_CLIENT__THREAD_LOCAL em_client__gpu_pool_t pool;
  return &pool;
}

/* Internal: destroys a pool's events (the thread ended) and empties it. */
static inline void em_client__gpu_pool_release(em_client__gpu_pool_t *p) {
  em_client__cuda_t *cu = em_client__cuda();
  for (unsigned i = 0; i < EM_CLIENT_GPU_PAIRS; i++) {
    if (cu->state == 1 && p->pair[i].start != NULL) {
      (void)cu->event_destroy(p->pair[i].start);
      (void)cu->event_destroy(p->pair[i].end);
    }
  }
  memset(p, 0, sizeof(*p));
}

static inline void em_client__gpu_thread_exit(void *arg) {
  em_client__gpu_pool_release((em_client__gpu_pool_t *)arg);
}

/* Internal: fork child: the parent's events are not the child's; forgotten, never destroyed. */
static inline void em_client__gpu_atfork_child(void) {
  memset(em_client__gpu_tls(), 0, sizeof(em_client__gpu_pool_t));
}

static inline pthread_key_t *em_client__gpu_key(void) {
  static pthread_key_t key;
  return &key;
}
static inline int *em_client__gpu_key_ok(void) {
  static int ok;
  return &ok;
}
static inline void em_client__gpu_once_init(void) {
  em_client__cuda_load();
  if (pthread_key_create(em_client__gpu_key(), em_client__gpu_thread_exit) == 0 &&
      pthread_atfork(NULL, NULL, em_client__gpu_atfork_child) == 0) {
    *em_client__gpu_key_ok() = 1;
  }
}

/* Internal: the driver, loaded on the first call of the process; NULL when GPU spans are off
 * (why in *off). */
static inline em_client__cuda_t *em_client__cuda_ready(const char **off) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  em_client__cuda_t *cu = em_client__cuda();
  if (pthread_once(&once, em_client__gpu_once_init) != 0 || cu->state != 1) {
    *off = cu->off != NULL ? cu->off : "the CUDA driver could not be set up";
    return NULL;
  }
  if (!*em_client__gpu_key_ok()) {
    *off = "no thread key for the GPU event pools";
    return NULL;
  }
  return cu;
}

/* Internal: gives the oldest pending pair up (the GPU is EM_CLIENT_GPU_PAIRS spans behind). */
static inline unsigned em_client__gpu_pop(em_client__gpu_pool_t *p) {
  unsigned i = p->fifo[p->head];
  p->head = (p->head + 1u) % EM_CLIENT_GPU_PAIRS;
  p->count--;
  p->pair[i].state = EM_CLIENT__GPU_FREE;
  return i;
}

/* Internal: sends the pending pairs of the pool whose end event completed, oldest first, up
 * to the first that has not (cuEventQuery never blocks). A pair whose query or elapsed time
 * fails with anything but "not ready" is released and counted as failed. Returns how many
 * were sent. */
static inline int em_client__gpu_resolve(em_client_t *c, em_client__cuda_t *cu,
                                         em_client__gpu_pool_t *p) {
  int sent = 0;
  while (p->count != 0) {
    em_client__gpu_pair_t *g = &p->pair[p->fifo[p->head]];
    float ms = 0.0f;
    int rc = cu->event_query(g->end);
    if (rc == EM_CLIENT__CU_SUCCESS) {
      rc = cu->event_elapsed(&ms, g->start, g->end);
    }
    if (rc == EM_CLIENT__CU_NOT_READY) {
      break;
    }
    (void)em_client__gpu_pop(p);
    if (rc != EM_CLIENT__CU_SUCCESS) {
      c->gpu_counters[EM_CLIENT_GPU_FAILED]++;
      continue;
    }
    c->gpu_counters[EM_CLIENT_GPU_RESOLVED]++;
    sent++;
    (void)em_client__out(c, 1, g->stage, g->frame_id, g->start_ns,
                         ms > 0.0f ? (uint64_t)((double)ms * 1e6 + 0.5) : 0u);
  }
  return sent;
}

/* Internal: the pool of the calling thread for `c`, the driver in *cu, the current context in
 * *ctx; NULL when the span is to be the plain CPU span (c->gpu_off says why). */
static inline em_client__gpu_pool_t *em_client__gpu_pool(em_client_t *c, em_client__cuda_t **cu,
                                                         void **ctx) {
  em_client__gpu_pool_t *p;
  const char *off = NULL;
  *cu = em_client__cuda_ready(&off);
  if (*cu == NULL) {
    c->gpu_off = off;
    return NULL;
  }
  p = em_client__gpu_tls();
  if (p->owner == 0) {
    p->owner = c->serial;
    (void)pthread_setspecific(*em_client__gpu_key(), p);
  } else if (p->owner != c->serial) {
    c->gpu_off = "this thread's GPU event pool belongs to another client";
    return NULL;
  }
  *ctx = NULL;
  if ((*cu)->ctx_get_current(ctx) != EM_CLIENT__CU_SUCCESS || *ctx == NULL) {
    c->gpu_off = "no current CUDA context in this thread";
    return NULL;
  }
  c->gpu_off = NULL;
  return p;
}

/* Internal: em_client_close() on this thread: the pool's pending and open pairs of `c` are
 * forgotten (never sent) and the pool is free for another client; its events are kept. */
static inline void em_client__gpu_close_own(em_client_t *c) {
  em_client__gpu_pool_t *p = em_client__gpu_tls();
  if (p->owner != c->serial) {
    return;
  }
  for (unsigned i = 0; i < EM_CLIENT_GPU_PAIRS; i++) {
    p->pair[i].state = EM_CLIENT__GPU_FREE;
  }
  p->head = 0;
  p->count = 0;
  p->owner = 0;
}

/*
 * Writes the default deadline page path into out[0..cap): $EDGEMON_DEADLINE_PAGE, else the file
 * "deadlines" beside the span socket `socket_path` (both live in the agent's runtime
 * directory). Returns 0, -EINVAL or -ENAMETOOLONG.
 */
static inline int em_client_default_deadline_path(char *out, size_t cap, const char *socket_path) {
  const char *env = getenv("EDGEMON_DEADLINE_PAGE");
  const char *slash;
  if (out == NULL || cap == 0 || socket_path == NULL) {
    return -EINVAL;
  }
  if (env != NULL && env[0] != '\0') {
    return em_client__join_any(out, cap, env, "");
  }
  slash = strrchr(socket_path, '/');
  if (slash == NULL) {
    return em_client__join_any(out, cap, "deadlines", "");
  }
  if ((size_t)(slash - socket_path) + sizeof("/deadlines") > cap) {
    out[0] = '\0';
    return -ENAMETOOLONG;
  }
  memcpy(out, socket_path, (size_t)(slash - socket_path));
  memcpy(out + (slash - socket_path), "/deadlines", sizeof("/deadlines"));
  return 0;
}

/* Internal: a serial number for each open, unique in the process. */
static inline uint64_t em_client__next_serial(const em_client_t *c) {
  static uint64_t counter;
  uint64_t n = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
  return (em_client_now_ns() ^ (uint64_t)(uintptr_t)c) * 1024u + (n & 1023u) + 1u;
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
  c->serial = em_client__next_serial(c);
  c->dl_slots = EM_CLIENT_RING_SLOTS;
  (void)em_client_default_deadline_path(c->deadline_path, sizeof(c->deadline_path), c->path);
  c->closed = 0;
  (void)em_client__connect(c, em_client_now_ns());
  return 0;
}

/* Closes the socket. Later spans are dropped (other). Safe on a closed client; NULL is a no-op. */
static inline void em_client_close(em_client_t *c) {
  if (c == NULL) {
    return;
  }
  if (!c->closed) {
    em_client__ring_close_own(c);
    em_client__gpu_close_own(c);
  }
  em_client__disconnect(c);
  em_client__page_drop(c);
  em_client__dl_drop(c);
  if (c->sub_fd >= 0) {
    close(c->sub_fd);
    c->sub_fd = -1;
  }
  c->closed = 1;
}

/* Internal: 1 when s is 1..max bytes of printable ASCII (label_key: a label key's alphabet). */
static inline int em_client__model_text(const char *s, size_t max, int label_key) {
  size_t i;
  if (s == NULL || s[0] == '\0') {
    return 0;
  }
  for (i = 0; s[i] != '\0'; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (i >= max) {
      return 0;
    }
    if (label_key) {
      int alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
      if (!(alpha || (i > 0 && ch >= '0' && ch <= '9')) || (i == 1 && s[0] == '_' && ch == '_')) {
        return 0;
      }
    } else if (ch < 0x20 || ch > 0x7e) {
      return 0;
    }
  }
  return 1;
}

/*
 * Names the model this process runs (WIRE.md "Model identity"): name 1..63 and version 1..31
 * bytes of printable ASCII, up to 8 labels (em_client_label_t; borrowed for the call, in any
 * order). A bad label (or a key given twice) is dropped, labels past the 8th valid one too, both
 * counted; a bad name or version drops the call, counted. The agent carries the identity in its
 * birth, data and state messages. The datagram is sent now; when that fails (no agent yet, its
 * queue full) it is sent again by the once-a-second agent check on the span path, which also
 * sends it to a new agent after a restart. Returns 0 when the identity was accepted (sent or
 * pending), -EINVAL when the call was dropped (or c is NULL or closed). Never blocks.
 */
static inline int em_client_set_model(em_client_t *c, const char *name, const char *version,
                                      const em_client_label_t *labels, size_t n_labels) {
  em_client_label_t keep[EM_CLIENT_MODEL_MAX_LABELS];
  size_t n = 0, i, j;
  uint8_t *m;
  if (c == NULL || c->closed) {
    return -EINVAL;
  }
  c->model_counters[EM_CLIENT_MODEL_CALLS]++;
  if (!em_client__model_text(name, 63, 0) || !em_client__model_text(version, 31, 0)) {
    c->model_counters[EM_CLIENT_MODEL_INVALID_MODEL]++;
    return -EINVAL;
  }
  for (i = 0; labels != NULL && i < n_labels; i++) {
    int dup = 0;
    if (!em_client__model_text(labels[i].key, 15, 1) ||
        !em_client__model_text(labels[i].value, 31, 0)) {
      c->model_counters[EM_CLIENT_MODEL_INVALID_LABEL]++;
      continue;
    }
    for (j = 0; j < n; j++) {
      dup |= strcmp(keep[j].key, labels[i].key) == 0;
    }
    if (dup) {
      c->model_counters[EM_CLIENT_MODEL_INVALID_LABEL]++;
    } else if (n == EM_CLIENT_MODEL_MAX_LABELS) {
      c->model_counters[EM_CLIENT_MODEL_LABELS_OVER_LIMIT]++;
    } else {
      for (j = n; j > 0 && strcmp(keep[j - 1].key, labels[i].key) > 0; j--) {
        keep[j] = keep[j - 1]; /* insertion: ascending key order, as the datagram requires */
      }
      keep[j] = labels[i];
      n++;
    }
  }
  c->model_generation++;
  m = c->model;
  memset(m, 0, EM_CLIENT_MODEL_BYTES);
  m[0] = 0x45;
  m[1] = 0x4D;
  m[2] = 2; /* version */
  m[3] = 7; /* kind: model */
  em_client__put_u32(m + 4, c->pid);
  em_client__put_u32(m + 8, c->model_generation);
  m[12] = (uint8_t)n;
  memcpy(m + 16, name, strlen(name));
  memcpy(m + 80, version, strlen(version));
  for (i = 0; i < n; i++) {
    memcpy(m + 112 + 48 * i, keep[i].key, strlen(keep[i].key));
    memcpy(m + 128 + 48 * i, keep[i].value, strlen(keep[i].value));
  }
  c->model_set = 1;
  em_client__model_send(c, em_client_now_ns());
  return 0;
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
  return em_client__out(c, 1, stage, c != NULL ? c->frame_id : 0, start_ns, duration_ns);
}

/* em_client_record() with an explicit frame id. */
static inline int em_client_record_frame(em_client_t *c, const char *stage, uint64_t frame_id,
                                         uint64_t start_ns, uint64_t duration_ns) {
  return em_client__out(c, 1, stage, frame_id, start_ns, duration_ns);
}

/* Sends the span of `stage` from start_ns until now. */
static inline int em_client_span_end_at(em_client_t *c, const char *stage, uint64_t start_ns) {
  uint64_t end_ns = em_client_now_ns();
  return em_client_record(c, stage, start_ns, end_ns - start_ns);
}

/* Tells the agent `stage` is alive (stall rules), with no duration, at the current frame. */
static inline int em_client_heartbeat(em_client_t *c, const char *stage) {
  return em_client__out(c, 2, stage, c != NULL ? c->frame_id : 0, em_client_now_ns(), 0);
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

/* A GPU span being timed: em_client_gpu_span_begin() ... em_client_gpu_span_end(). */
typedef struct {
  em_client_span_t cpu; /* The CPU span, as em_client_span_begin() makes it. */
  void *stream;         /* The CUstream the events are recorded on (NULL: the default). */
  int pair;             /* The pool's pair holding the start event, or -1: CPU only. */
} em_client_gpu_span_t;

/*
 * Starts timing `stage` (borrowed until em_client_gpu_span_end) on the CPU, and on the GPU with
 * a start event recorded on `stream` (a CUstream; NULL: the default stream) in the calling
 * thread's current context, after sending the pending pairs that completed. Never blocks.
 * Without a driver, device or context, or with a name longer than 27 bytes (no room for
 * ".gpu"; counted as failed), it is em_client_span_begin().
 */
static inline em_client_gpu_span_t em_client_gpu_span_begin(em_client_t *c, const char *stage,
                                                            void *stream) {
  em_client_gpu_span_t s;
  em_client__gpu_pool_t *p;
  em_client__gpu_pair_t *g;
  em_client__cuda_t *cu = NULL;
  void *ctx = NULL;
  size_t len;
  unsigned i;
  s.stream = stream;
  s.pair = -1;
  if (c == NULL || c->closed || !em_client_stage_valid(stage)) {
    s.cpu = em_client_span_begin(c, stage);
    return s;
  }
  p = em_client__gpu_pool(c, &cu, &ctx);
  if (p == NULL) {
    s.cpu = em_client_span_begin(c, stage);
    return s;
  }
  len = strlen(stage);
  if (len + sizeof(".gpu") > sizeof(p->pair[0].stage)) {
    c->gpu_counters[EM_CLIENT_GPU_FAILED]++;
    s.cpu = em_client_span_begin(c, stage);
    return s;
  }
  (void)em_client__gpu_resolve(c, cu, p);
  for (i = 0; i < EM_CLIENT_GPU_PAIRS; i++) {
    if (p->pair[i].state == EM_CLIENT__GPU_FREE) {
      break;
    }
  }
  if (i == EM_CLIENT_GPU_PAIRS) {
    if (p->count == 0) { /* Every pair is open in a nested span: this one is CPU only. */
      c->gpu_counters[EM_CLIENT_GPU_FAILED]++;
      s.cpu = em_client_span_begin(c, stage);
      return s;
    }
    i = em_client__gpu_pop(p);
    c->gpu_counters[EM_CLIENT_GPU_DROPPED]++;
  }
  g = &p->pair[i];
  if (g->start != NULL && g->ctx != ctx) { /* Made in another context: made again. */
    (void)cu->event_destroy(g->start);
    (void)cu->event_destroy(g->end);
    g->start = g->end = NULL;
  }
  if (g->start == NULL) {
    if (cu->event_create(&g->start, EM_CLIENT__CU_EVENT_DEFAULT) != EM_CLIENT__CU_SUCCESS) {
      g->start = NULL;
    } else if (cu->event_create(&g->end, EM_CLIENT__CU_EVENT_DEFAULT) != EM_CLIENT__CU_SUCCESS) {
      (void)cu->event_destroy(g->start);
      g->start = g->end = NULL;
    }
    g->ctx = ctx;
  }
  if (g->start == NULL || cu->event_record(g->start, stream) != EM_CLIENT__CU_SUCCESS) {
    c->gpu_counters[EM_CLIENT_GPU_FAILED]++;
    s.cpu = em_client_span_begin(c, stage);
    return s;
  }
  g->state = EM_CLIENT__GPU_OPEN;
  memcpy(g->stage, stage, len);
  memcpy(g->stage + len, ".gpu", sizeof(".gpu"));
  s.pair = (int)i;
  s.cpu = em_client_span_begin(c, stage);
  return s;
}

/*
 * Ends the span: sends the CPU span as em_client_span_end() (the frame current now) and returns
 * what that returns; then records the end event on the span's stream, queues the pair and sends
 * the pending pairs that completed. Never blocks.
 */
static inline int em_client_gpu_span_end(em_client_gpu_span_t *s) {
  em_client_t *c = s->cpu.client;
  em_client__gpu_pool_t *p;
  em_client__gpu_pair_t *g;
  em_client__cuda_t *cu;
  uint64_t frame_id = c != NULL ? c->frame_id : 0;
  int rc = em_client_span_end(&s->cpu);
  if (s->pair < 0 || c == NULL) {
    return rc;
  }
  cu = em_client__cuda();
  p = em_client__gpu_tls();
  g = &p->pair[s->pair];
  s->pair = -1;
  if (p->owner != c->serial || g->state != EM_CLIENT__GPU_OPEN) {
    return rc; /* The pool was emptied under the span (the client closed in this thread). */
  }
  if (cu->event_record(g->end, s->stream) != EM_CLIENT__CU_SUCCESS) {
    g->state = EM_CLIENT__GPU_FREE;
    c->gpu_counters[EM_CLIENT_GPU_FAILED]++;
    return rc;
  }
  g->state = EM_CLIENT__GPU_PENDING;
  g->frame_id = frame_id;
  g->start_ns = s->cpu.start_ns;
  p->fifo[(p->head + p->count) % EM_CLIENT_GPU_PAIRS] = (uint8_t)(g - p->pair);
  p->count++;
  c->gpu_counters[EM_CLIENT_GPU_RECORDED]++;
  (void)em_client__gpu_resolve(c, cu, p);
  return rc;
}

/* Sends the calling thread's pending GPU pairs of `c` whose events completed, without waiting
 * for the others (the thread's next GPU span does the same). Returns how many were sent. */
static inline int em_client_gpu_poll(em_client_t *c) {
  em_client__gpu_pool_t *p = em_client__gpu_tls();
  if (c == NULL || p->owner != c->serial || p->count == 0) {
    return 0;
  }
  return em_client__gpu_resolve(c, em_client__cuda(), p);
}

/* Pairs pending in the calling thread's pool for `c`. */
static inline unsigned em_client_gpu_pending(const em_client_t *c) {
  em_client__gpu_pool_t *p = em_client__gpu_tls();
  return c != NULL && p->owner == c->serial ? p->count : 0u;
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

/*
 * EM_CLIENT_SPAN with the block's GPU time too (em_client_gpu_span_begin/_end), its events on
 * `stream` (a CUstream, NULL: the default stream):
 *
 *   EM_CLIENT_GPU_SPAN(&em, "infer", stream) {
 *     launch_inference(stream);
 *   }
 */
#define EM_CLIENT_GPU_SPAN(client, stage, stream)                                                  \
  for (em_client_gpu_span_t EM_CLIENT__CAT(em_client__gpu_span_, __LINE__) =                       \
           em_client_gpu_span_begin((client), (stage), (stream));                                  \
       !EM_CLIENT__CAT(em_client__gpu_span_, __LINE__).cpu.done;                                   \
       (void)em_client_gpu_span_end(&EM_CLIENT__CAT(em_client__gpu_span_, __LINE__)))

#if defined(__cplusplus) && defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#endif /* EDGEMON_CLIENT_H */
