/*
 * spans.h - span ingest: the unix datagram socket the inference process sends span datagrams
 * v1 to (proto/WIRE.md), drained in batches with recvmmsg from the agent's loop, and the
 * per-stage latency windows the datagrams fold into.
 *
 * Every datagram is checked: its length, its fields (em_span_unpack) and its sender, whose
 * uid, gid and pid come from SCM_CREDENTIALS (the kernel's word, not the datagram's) and are
 * held against the allow-lists. What fails is counted by reason and dropped; nothing is
 * allocated per datagram. A stage is created the first time a span or heartbeat names it, in
 * a table of a size fixed at start-up (stages.h: slots reserved for the stages budgets name,
 * idle stages evicted for new names); spans of a stage that gets no slot are counted as
 * overflow.
 *
 * A 512-byte datagram is a model datagram v2 (proto/WIRE.md "Model identity"): from an allowed
 * sender and valid (em_model_dgram_unpack), it goes to on_model; otherwise it is counted
 * (em_spans_models_refused, and by reason in em_spans_dropped). Every other length but 64 is
 * counted as EM_SPANS_DROP_SIZE, but 513..65507 bytes: a Python stacks datagram v2 (proto/WIRE.md
 * "Python stacks datagram v2") from an allowed sender with its header's magic, version and kind
 * goes whole to on_pystacks, which validates the rest (em_pystacks_unpack).
 *
 * Datagrams v2 (version byte 2, proto/WIRE.md "Span ring v2") are recognised here: a ring
 * register goes to on_register with its descriptor, a hard miss to on_hard_miss (not folded
 * into the window: the ring carries the span). Every descriptor that arrives (SCM_RIGHTS) on
 * any other datagram, or beyond the one a register carries, is closed at once and counted, so
 * a client cannot park descriptors in the agent.
 *
 * Linux queues at most net.unix.max_dgram_qlen datagrams on the socket (10 by default); a
 * burst beyond what the loop drains before the queue fills makes the senders' send() fail with
 * EAGAIN, which the clients count. firmware/sysctl/60-edgemon.conf raises the limit.
 *
 * A failing recvmmsg (an errno other than EAGAIN or EINTR) ends that wake-up: it is counted
 * (em_spans_recv_errors) and logged at warning level when its errno is not the one last logged. A
 * datagram whose control data the kernel cut (MSG_CTRUNC: more descriptors than fit) is
 * counted (em_spans_ctrl_truncated), logged once, and taken as one carrying several
 * descriptors: a ring register gets none.
 *
 * Owns: the socket fd, its uv_poll_t, the socket file, and the stage table (stages.h).
 * Single-threaded: the loop's thread. The calls made on the socket and on the descriptors
 * that arrive go through em_spans_sys_t, so the tests can inject the kernel's errors.
 */
#ifndef EDGEMON_AGENT_SPANS_H
#define EDGEMON_AGENT_SPANS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <uv.h>

#include "edgemon/ring.h"
#include "edgemon/wire.h"
#include "hist.h"
#include "stages.h"

struct ucred;   /* <sys/socket.h> with _GNU_SOURCE: pid, uid, gid of a datagram's sender. */
struct mmsghdr; /* <sys/socket.h> with _GNU_SOURCE: one message of a recvmmsg batch. */

#define EM_SPANS_BATCH  64 /* Datagrams per recvmmsg call. */
#define EM_SPANS_ROUNDS 16 /* recvmmsg calls per readable event at most. */

/*
 * The system calls span ingest makes after its socket is open, as in their man pages: -1 with
 * errno on failure. `ctx` is the table's own.
 */
typedef struct {
  /* recvmmsg(2) on the span socket: the messages received (<= n), or -1 with errno. */
  int (*recvmmsg)(void *ctx, int fd, struct mmsghdr *msgs, unsigned n, int flags);
  /* close(2) of a descriptor that arrived with a datagram and is not handed on. */
  int (*close)(void *ctx, int fd);
  void *ctx;
} em_spans_sys_t;

/* The real system calls. */
extern const em_spans_sys_t em_spans_sys_linux;

/* Why a datagram was dropped. */
typedef enum {
  EM_SPANS_DROP_MALFORMED = 0, /* Bad magic, kind or stage field. */
  EM_SPANS_DROP_VERSION,       /* A span datagram version this agent does not speak. */
  EM_SPANS_DROP_SIZE,          /* Neither 64 nor 512 bytes (oversized ones included). */
  EM_SPANS_DROP_DISALLOWED,    /* Sender not in the allow-lists, or no credentials. */
  EM_SPANS_DROP_OVERFLOW,      /* A new stage that got no slot in the stage table. */
  EM_SPANS_DROP_COUNT
} em_spans_drop_t;

/*
 * Called for every accepted span or heartbeat, after it is folded in (the budgets hook in
 * here: a hard deadline escalates on the datagram that shows it). `stage` is the table entry.
 */
typedef void (*em_spans_fn)(void *ctx, const em_span_t *span, const struct ucred *sender,
                            em_stage_stats_t *stage);

/*
 * Called for a subscribe or unsubscribe datagram with the sender's address (the client's
 * bound or autobound name), borrowed for the call.
 */
typedef void (*em_spans_subscribe_fn)(void *ctx, bool subscribe, const struct sockaddr_un *addr,
                                      socklen_t addr_len, const struct ucred *sender);

/*
 * Called for a ring register datagram (v2 kind 5). `fd` is the one descriptor it carried, or
 * -1 when it carried none or more than one (those were closed); ownership of fd passes to the
 * callee. `allowed` says whether the sender passed the allow-lists. `from` is the sender's
 * address (the ack goes there), borrowed for the call.
 */
typedef void (*em_spans_register_fn)(void *ctx, const em_ring_dgram_t *reg, int fd, bool allowed,
                                     const struct ucred *sender, const struct sockaddr_un *from,
                                     socklen_t from_len);

/*
 * Called for a valid model datagram from an allowed sender; `model` is borrowed for the call
 * (copy what is kept).
 */
typedef void (*em_spans_model_fn)(void *ctx, const em_model_dgram_t *model,
                                  const struct ucred *sender);

/*
 * Called for a Python stacks datagram from an allowed sender (sender_pid: its credentials'
 * pid), its header's first 4 bytes checked; buf[0..len) is borrowed for the call and not yet
 * validated (untrusted).
 */
typedef void (*em_spans_pystacks_fn)(void *ctx, const uint8_t *buf, size_t len, pid_t sender_pid);

typedef struct {
  const char *path; /* Socket file; its directory is created (0755) if missing. */
  unsigned mode;    /* Permission bits of the socket file, e.g. 0660. */
  int64_t gid;      /* Group of the socket file, or -1 to leave it. */
  const uint32_t *allow_uids;
  size_t n_allow_uids;
  const uint32_t *allow_gids;
  size_t n_allow_gids;         /* Both lists empty: every sender that can write is allowed. */
  size_t max_stages;           /* 1..EM_PROTO_MAX_STAGES */
  uint64_t stage_idle_ns;      /* > 0: an unreserved stage this long without a span may be
                                  evicted for a new name (stages.h). */
  em_stages_evict_fn on_evict; /* May be NULL: a stage's slot is about to be reused. */
  em_spans_fn on_span;         /* May be NULL. */
  em_spans_subscribe_fn on_subscribe; /* May be NULL. */
  em_spans_register_fn on_register;   /* May be NULL: registers are refused, fds closed. */
  em_spans_fn on_hard_miss;           /* May be NULL: a ring span over its hard deadline. */
  em_spans_model_fn on_model;         /* May be NULL: model datagrams are checked, dropped. */
  em_spans_pystacks_fn on_pystacks;   /* May be NULL: Python stacks datagrams are dropped. */
  void *ctx;
  const em_spans_sys_t *sys; /* NULL: em_spans_sys_linux. Copied. */
} em_spans_opts_t;

typedef struct em_spans em_spans_t;

/*
 * Creates the socket (a stale socket file left by a dead agent is replaced; any other file
 * at `path` is an error), sets its mode and group, and starts draining it on `loop`.
 * Returns 0 and *out, or a negative errno (-EADDRINUSE when another agent is listening).
 */
int em_spans_new(em_spans_t **out, uv_loop_t *loop, const em_spans_opts_t *opts);

/* The stage table: entries 0..count-1, in order of first sight (an evicted stage's index is
 * reused for the name that took its slot). */
size_t em_spans_stage_count(const em_spans_t *s);
em_stage_stats_t *em_spans_stage(em_spans_t *s, size_t i);

/*
 * Sets the names reserved in the stage table (the stages budgets name; borrowed for the call)
 * and the idle time after which an unreserved stage may be evicted (0 keeps it), as
 * em_stages_policy. Returns the number of distinct names given (those past max_stages are
 * not reserved).
 */
size_t em_spans_stage_policy(em_spans_t *s, const char *const *names, size_t n, uint64_t idle_ns);

/* Stages evicted from the table for a new name since start. */
uint64_t em_spans_evictions(const em_spans_t *s);

/* Empties every stage's window (after it was published). */
void em_spans_window_reset(em_spans_t *s);

/* The pid in a sender's credentials (for modules built without _GNU_SOURCE); 0 for NULL. */
uint32_t em_spans_sender_pid(const struct ucred *sender);

/*
 * Folds one span or heartbeat into its stage's window and total, as a datagram v1 span is,
 * with seen_ns as the stage's last sight (kept when it is later already), then calls on_span
 * (sender may be NULL). The one path for datagrams and rings. Returns the stage, or NULL when the
 * stage got no slot (counted as overflow).
 */
em_stage_stats_t *em_spans_fold(em_spans_t *s, const em_span_t *span, const struct ucred *sender,
                                uint64_t seen_ns);

/* What the socket counted since start. */
typedef struct {
  uint64_t received;        /* Datagrams accepted (spans and heartbeats). */
  uint64_t datagram_spans;  /* Spans (kind span, not heartbeats) folded in from datagrams v1. */
  uint64_t fds_closed;      /* Descriptors that arrived and were closed unused. */
  uint64_t recv_errors;     /* Failed recvmmsg calls (errors other than EAGAIN and EINTR). */
  uint64_t ctrl_truncated;  /* Datagrams whose control data the kernel truncated (MSG_CTRUNC). */
  uint64_t models_accepted; /* Model datagrams accepted (valid, from an allowed sender). */
  uint64_t models_refused;  /* Model datagrams refused (disallowed sender, or any check of
                               em_model_dgram_unpack); each also counted in em_spans_dropped. */
  uint64_t pystacks_passed; /* Python stacks datagrams handed to on_pystacks (allowed sender,
                               header checked). */
} em_spans_counts_t;

/* The socket's counts; valid while s lives. */
const em_spans_counts_t *em_spans_counts(const em_spans_t *s);

/* Datagrams dropped for `why` since start. */
uint64_t em_spans_dropped(const em_spans_t *s, em_spans_drop_t why);

/* Short name of a drop reason: "malformed", "version", "size", "disallowed", "overflow". */
const char *em_spans_drop_name(em_spans_drop_t why);

/*
 * Sends `len` bytes to a client address (a level push) without blocking. Returns 0 or a
 * negative errno (-EAGAIN: the client's queue is full; -ECONNREFUSED/-ENOENT: it is gone).
 */
int em_spans_send_to(em_spans_t *s, const struct sockaddr_un *addr, socklen_t addr_len,
                     const void *buf, size_t len);

/* Stops reading, closes the socket and removes the socket file; done(ctx) when closed. */
void em_spans_close(em_spans_t *s, void (*done)(void *), void *ctx);

/* Frees after close's done (or when never started). NULL is a no-op. */
void em_spans_free(em_spans_t *s);

#endif /* EDGEMON_AGENT_SPANS_H */
