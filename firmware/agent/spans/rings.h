/*
 * rings.h - span rings v2 (proto/WIRE.md "Span ring v2"): the table of rings the inference
 * process registers over the span socket, their registration checks and acks, the drain of
 * every ring into the stage table on each tick, and the deadline page ("Deadline page v1")
 * that tells clients which stages have a hard deadline.
 *
 * Registration (em_rings_register) checks, in WIRE.md's order: the sender's credentials
 * against the allow-lists (-EPERM); the descriptor, a sealed (F_SEAL_SHRINK, F_SEAL_SEAL)
 * regular file or memfd whose size is exactly what its header says (-EINVAL); the header
 * (em_ring_header_read) and its pid against the credentials' pid (-EINVAL); a pidfd of that
 * process, then its start time (/proc/<pid>/stat field 22) against the header's (-EINVAL: a
 * reused pid); the caps, rings_per_process (-EMFILE) and rings (-ENOSPC). It answers every
 * register with an ack (kind 17) to the sender's address.
 *
 * Ring lifecycle (one table entry):
 *
 *      register ok            pidfd readable / header closed / process gone
 *   FREE -----------> ACTIVE ------------------------------------------------> CLOSING
 *    ^                  | em_rings_drain: drain(final=false) each tick           |
 *    +------------------+-------------------------------------------------------+
 *                          the pidfd's uv_poll_t closed (on_poll_closed)
 *
 *   edge               function                         what happens
 *   FREE -> ACTIVE     em_rings_register                mmap PROT_READ, reader at `start`
 *   ACTIVE -> CLOSING  on_pidfd, em_rings_drain         final drain, munmap, ring fd closed
 *   CLOSING -> FREE    on_poll_closed                   pidfd closed, entry reusable
 *
 * Without pidfd_open (ENOSYS) the process is checked once a second by its /proc start time.
 *
 * Owns: the table (one allocation at em_rings_new, cap entries with their readers), each
 * active ring's mapping, descriptor, pidfd and uv_poll_t, and the deadline page's file
 * mapping. Nothing is allocated per span, per register or per tick. Single-threaded: the
 * loop's thread.
 */
#ifndef EDGEMON_AGENT_RINGS_H
#define EDGEMON_AGENT_RINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <uv.h>

#include "edgemon/ring.h"
#include "spans.h"

typedef struct {
  uint32_t max_rings;       /* [spans] rings, 1..EM_CONFIG_MAX_RINGS. */
  uint32_t max_per_process; /* [spans] rings_per_process, >= 1. */
  const char *proc_root;    /* "/proc" (tests may point elsewhere); copied. */
  bool no_pidfd;            /* Check writers by start time once a second, as on a kernel
                               without pidfd_open (tests of that path). */
} em_rings_opts_t;

/* Counters since start. */
typedef struct {
  uint64_t spans;       /* Spans (not heartbeats) folded in from rings. */
  uint64_t overwritten; /* Positions lapped by the writer before they were read. */
  uint64_t bad_slot;    /* Slots that failed their checks. */
  uint64_t bad_head;    /* Drains that found a scribbled head. */
  uint64_t skipped;     /* Positions published before a scribbled head and never read. */
  uint64_t refused;     /* Registers answered with an error. */
  uint64_t accepted;    /* Registers accepted. */
  uint64_t dropped;     /* Rings dropped (process exited or ring closed). */
} em_rings_stats_t;

typedef struct em_rings em_rings_t;

/*
 * Allocates a table of opts->max_rings rings folding into `spans` (borrowed: it must outlive
 * the rings) on `loop`. Returns 0 and *out, or -EINVAL / -ENOMEM.
 */
int em_rings_new(em_rings_t **out, uv_loop_t *loop, em_spans_t *spans, const em_rings_opts_t *opts);

/*
 * One register datagram from the span socket (the em_spans_register_fn contract): takes
 * ownership of fd (-1: none or several came), runs the checks above, answers the sender with
 * an ack through the span socket, and returns the status it sent (0 or a negative errno). A
 * refusal is logged, one line per EM_LOG_LIMIT_S (the others counted in rings.refused and
 * said in one line by the next em_rings_drain once the interval is over).
 */
int em_rings_register(em_rings_t *r, const em_ring_dgram_t *reg, int fd, bool allowed,
                      const struct ucred *sender, const struct sockaddr_un *from,
                      socklen_t from_len);

/*
 * Drains every active ring into the stage table (em_spans_fold), as of now_ns: a span's last
 * sight is its end time (start_ns + duration_ns) clamped to now_ns. Drops rings whose header
 * says closed or whose process is gone (after a final drain). Call on every tick, before the
 * budgets are judged.
 */
void em_rings_drain(em_rings_t *r, uint64_t now_ns);

/*
 * Every span (kind EM_DGRAM_SPAN, not heartbeats) a ring delivers, as it is folded in, with its
 * writer: pid, checked at registration, and tid, the ring header's when registration found it
 * a thread of that pid (<proc_root>/<pid>/task/<tid>), else 0. The stack profiler uses it to
 * tell which stage each sampled thread was in.
 */
typedef void (*em_rings_span_fn)(void *ctx, uint32_t pid, uint32_t tid, const em_span_t *span);

/* Sets (fn NULL: clears) the observer of every span the rings deliver. */
void em_rings_observe(em_rings_t *r, em_rings_span_fn fn, void *ctx);

/* Rings active now. */
size_t em_rings_active(const em_rings_t *r);

/* The counters. */
const em_rings_stats_t *em_rings_stats(const em_rings_t *r);

/*
 * Drops every ring (final drain first) and closes their handles; done(ctx) when all are
 * closed (at once, from the loop, when none is open). May be called once.
 */
void em_rings_close(em_rings_t *r, void (*done)(void *), void *ctx);

/* Frees after close's done (or when never started). NULL is a no-op. */
void em_rings_free(em_rings_t *r);

/* --- the deadline page ------------------------------------------------------------- */

typedef struct {
  char path[288]; /* "<runtime_dir>/deadlines": a runtime_dir of 255 bytes fits. */
  uint8_t *page;  /* EM_DEADLINE_PAGE_BYTES, mapped shared read-write; NULL when closed. */
  int fd;         /* Valid while is_open. */
  bool is_open;
} em_deadlines_t;

/*
 * Creates "<path>.tmp", formats it (agent_pid, ring_slots, entries[0..n)), maps it and renames
 * it to path. Returns 0 or a negative errno (-EINVAL for a bad entry or n > 64).
 */
int em_deadlines_open(em_deadlines_t *d, const char *path, uint32_t agent_pid, uint32_t ring_slots,
                      const em_deadline_t *entries, size_t n);

/*
 * Publishes new entries and ring_slots on the open page through its seqlock (a reload).
 * Returns 0 or a negative errno.
 */
int em_deadlines_update(em_deadlines_t *d, uint32_t ring_slots, const em_deadline_t *entries,
                        size_t n);

/* Unmaps and closes; `remove` also unlinks the file. A closed or zeroed page is a no-op. */
void em_deadlines_close(em_deadlines_t *d, bool remove);

#endif /* EDGEMON_AGENT_RINGS_H */
