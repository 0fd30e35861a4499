/*
 * signals.h - the board-local level signals the inference process reads: the state page
 * (a 256-byte file in the runtime dir that clients map and read with no system call, written
 * with the seqlock of proto/WIRE.md) and level push datagrams to the clients that subscribed.
 *
 * The page is formatted in "<path>.tmp" and renamed into place, so a client never maps a
 * half-made page; a clean stop removes it, so clients see "no agent" rather than a stale
 * level. Subscribers are kept in a fixed table of EM_SIGNALS_MAX_SUBSCRIBERS, at most
 * EM_SIGNALS_MAX_PER_PID of them per sending process (the pid the kernel gave with the
 * subscribe datagram), so one process cannot take every slot.
 *
 * A subscriber's slot is freed when it unsubscribes or when its peer is found gone: a push
 * refused with ECONNREFUSED, ENOENT, ENOTCONN or EPERM (its socket was
 * connected to another peer since); or a probe, made when a subscribe finds the
 * table (or its process's share) full: connect() of an unbound probe socket to each held
 * address, which sends nothing; ECONNREFUSED or ENOENT means the socket behind that address
 * is closed or its file removed, and the slot is reaped. A subscriber whose queue is full
 * (EAGAIN) misses that push and is counted, never waited for. Only when the probe finds every
 * held subscriber alive is the new one refused (counted).
 *
 * Owns: the page's fd and mapping, the page file, the subscriber table and one unbound,
 * never-sending probe socket. Pushes go through a caller-supplied function (the span
 * socket's: a subscriber connected to the span socket accepts datagrams from it only).
 * Single-threaded.
 */
#ifndef EDGEMON_AGENT_SIGNALS_H
#define EDGEMON_AGENT_SIGNALS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "edgemon/wire.h"

#define EM_SIGNALS_MAX_SUBSCRIBERS 32
#define EM_SIGNALS_MAX_PER_PID     8 /* Subscribers one process may hold. */

/* Sends one datagram to addr without blocking; 0 or a negative errno. */
typedef int (*em_signals_send_fn)(void *ctx, const struct sockaddr_un *addr, socklen_t len,
                                  const void *buf, size_t n);

typedef struct em_signals em_signals_t;

/* Counters. */
typedef struct {
  uint64_t pushes;      /* Push datagrams delivered to a subscriber's queue. */
  uint64_t push_full;   /* Pushes a full subscriber queue refused (EAGAIN). */
  uint64_t dropped;     /* Subscribers dropped because a push found their address gone. */
  uint64_t reaped;      /* Subscribers a probe found gone (freed for a new subscribe). */
  uint64_t refused;     /* Subscribe requests refused (table or per-process share full with
                           live subscribers, unnamed address). */
  uint64_t refused_pid; /* Of those, refused for the per-process share. */
} em_signals_stats_t;

/*
 * Creates the state page at `page_path` holding `initial`, written by `agent_pid`. Returns 0
 * and *out, or a negative errno (the directory must exist).
 */
int em_signals_new(em_signals_t **out, const char *page_path, uint32_t agent_pid,
                   const em_state_record_t *initial, em_signals_send_fn send, void *send_ctx);

/*
 * Publishes a change: the page first (readers see it at once), then one push datagram to
 * every subscriber. Returns 0 or a negative errno / EM_PROTO_* code for a record the page
 * refuses (nothing is published then).
 */
int em_signals_publish(em_signals_t *s, const em_state_record_t *rec);

/*
 * Adds (subscribe) or removes a subscriber by address, for the process `pid` (the sender's,
 * from its credentials; 0 when unknown). An unnamed address (the client did not bind) cannot
 * be answered and is refused. When the table, or pid's share of EM_SIGNALS_MAX_PER_PID, is
 * full, the held addresses (pid's only, for its share) are probed and the gone ones reaped
 * first; with none gone the request is refused. Returns 0, -EINVAL (unnamed), -ENOSPC (table
 * full) or -EDQUOT (pid's share full). Subscribing twice is one subscription. A refusal is
 * logged, one line per EM_LOG_LIMIT_S (the others counted, see em_signals_flush_log).
 */
int em_signals_subscribe(em_signals_t *s, bool subscribe, const struct sockaddr_un *addr,
                         socklen_t len, uint32_t pid);

/* Once per tick: the count of refusal lines held back, when their interval is over. */
void em_signals_flush_log(em_signals_t *s, uint64_t now_ns);

size_t em_signals_subscribers(const em_signals_t *s);
const em_signals_stats_t *em_signals_stats(const em_signals_t *s);

/* Unmaps, closes and (when remove_page) deletes the page file. NULL is a no-op. */
void em_signals_free(em_signals_t *s, bool remove_page);

#endif /* EDGEMON_AGENT_SIGNALS_H */
