/*
 * forward.h - store and forward: moves messages between the publisher and the spool, the one
 * module that calls both (neither calls the other). A data or state message the broker takes
 * goes out live; one it cannot take now (no session, or the send refused) is re-encoded marked
 * historical and appended to the spool, or, without a spool or when the append fails, lost
 * and counted (spool.lost). Once a tick, after the live message, up to replay_per_tick spooled
 * messages go out in the spool's order (state first, then data), never retained; every sync
 * interval the spool's header is written on the loop and fdatasync runs on libuv's worker.
 *
 *   message             broker takes it     broker away
 *   data (each tick)    "data", qos_data    spooled as EM_SPOOL_DATA, historical
 *   state (a change)    "state", retained   spooled as EM_SPOOL_STATE, historical
 *   flight (recording)  "flight", qos_state spooled as EM_SPOOL_FLIGHT, historical
 *   profile (stacks)    "profile", qos_state spooled as EM_SPOOL_PROFILE, historical
 *   spooled (replay)    its topic, not retained, popped once the publisher took it
 *
 * Write-ahead (opts.write_ahead, for each kind published at QoS 1): the message is also
 * encoded marked historical and appended to the spool held in flight (em_spool_append_held)
 * BEFORE it is handed to libmosquitto, and acknowledged in the spool only on its PUBACK
 * (em_forward_on_ack with the mid). The spool's `done` never moves past a record still in
 * flight, so after kill -9 the next process replays, marked historical and in order, what
 * was not acknowledged: a broker that had it already gets a duplicate, never a gap. Replayed
 * records are held the same way. The mid -> record map is a ring of EM_FORWARD_MAX_INFLIGHT
 * entries; when it is full the oldest record is released back to the replay order (it may
 * then be sent twice, never lost). Cost per message: one pwritev into the page cache.
 *
 * A flight recording (up to EM_FLIGHT_MAX_BYTES) is never written ahead: it goes out live, or,
 * when the broker does not take it, into the spool marked historical (em_flight_mark_historical),
 * replayed after pending state records in order with data, on "flight", never retained.
 *
 * Owns: the spool (opened by em_forward_new from the path, closed by em_forward_free), the
 * replay buffer (the larger of EM_FLIGHT_MAX_BYTES and EM_PROTO_MAX_MESSAGE_BYTES; its pages
 * are touched only by what is replayed) and the write-ahead buffer (EM_PROTO_MAX_MESSAGE_BYTES),
 * both allocated once, the
 * mid -> record map and the fdatasync request.
 * Borrows the publisher and the syncer, which must outlive the forwarder. Threading: the loop's
 * thread; only the fdatasync runs off it (on the syncer's thread, or libuv's worker without
 * one), and the spool is not touched until it completes except for appends (pwrites the kernel
 * orders, see spool.h).
 */
#ifndef EDGEMON_AGENT_FORWARD_H
#define EDGEMON_AGENT_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "edgemon/proto.h"
#include "figures.h"
#include "publisher.h"
#include "spool.h"
#include "syncer.h"

#define EM_FORWARD_MAX_PATH     256 /* Spool path, with the NUL. */
#define EM_FORWARD_MAX_INFLIGHT 512 /* Write-ahead records awaiting their PUBACK, tracked. */

typedef struct em_forward em_forward_t;

/* Options; strings are copied. */
typedef struct {
  const char *spool_path;    /* The spool file, or "off": none (what the broker cannot take is
                                lost and counted). */
  uint64_t spool_bytes;      /* Ring capacity of a new spool (spool.h). */
  uint64_t sync_interval_ns; /* Header write + fdatasync at most this often. */
  uint32_t replay_per_tick;  /* Spooled messages sent per em_forward_replay() at most. */
  int qos_data;              /* QoS of data messages, live and replayed. */
  int qos_state;             /* QoS of state messages, live and replayed. */
  bool write_ahead;          /* Spool QoS 1 messages before sending, done on PUBACK. */
  em_syncer_t *syncer;       /* Runs the fdatasync on its own thread (syncer.h); borrowed, it
                                must outlive the forwarder. NULL: libuv's worker pool runs it. */
} em_forward_opts_t;

/* What the data message reports of store and forward. */
typedef struct {
  bool spooling;          /* A spool is open; `spool` is meaningful only then. */
  em_spool_stats_t spool; /* spool.h */
  uint64_t lost;          /* Messages neither sent nor spooled since em_forward_new(). */
  bool syncing;           /* An fdatasync is in flight (the syncer's thread or libuv's pool). */
} em_forward_stats_t;

/*
 * Creates the forwarder and opens the spool the options name, logging what it holds. A spool
 * that cannot be opened is logged at error and the forwarder runs without one (not an error:
 * messages the broker cannot take are then lost and counted). Returns 0 and *out, -EINVAL
 * (NULL argument), -ENAMETOOLONG (spool path of EM_FORWARD_MAX_PATH bytes or more), or -ENOMEM.
 */
int em_forward_new(em_forward_t **out, uv_loop_t *loop, em_publisher_t *pub,
                   const em_forward_opts_t *opts);

/*
 * Publishes `msg`, a data or state message already encoded into buf[0..len), live when the
 * broker takes it. Otherwise, when `may_spool`, marks it historical, re-encodes it into buf
 * (cap bytes: buf is overwritten) and appends it to the spool; an append that fails (disk
 * full, file size limit) is logged once per kind of error until one succeeds again.
 * Returns 0 (sent or spooled), -EINVAL (NULL argument, or msg neither data nor state),
 * -ENOTCONN (not taken and !may_spool: nothing kept, nothing counted, as on a clean stop),
 * or a negative errno when the message is lost (no spool: -ENOSPC; the append's or the
 * encoder's error otherwise), counted in lost.
 */
int em_forward_publish(em_forward_t *f, em_msg_t *msg, uint8_t *buf, size_t cap, size_t len,
                       bool may_spool);

/*
 * Publishes a flight recording encoded live into buf[0..len) on "flight" at qos_state, never
 * retained, when the broker takes it; otherwise, when `may_spool`, appends its historical form
 * to the spool as EM_SPOOL_FLIGHT (buf is not changed). Returns 0 (sent or spooled), -EINVAL,
 * -ENOTCONN (not taken and !may_spool), or a negative errno or EM_PROTO_E* code when it is
 * lost (counted in lost).
 */
int em_forward_publish_flight(em_forward_t *f, const uint8_t *buf, size_t len, bool may_spool);

/*
 * A stack profile (edgemon/profile.h) the same way: "profile" at qos_state, never retained,
 * else its historical form (em_profile_mark_historical) spooled as EM_SPOOL_PROFILE. Returns
 * as em_forward_publish_flight().
 */
int em_forward_publish_profile(em_forward_t *f, const uint8_t *buf, size_t len, bool may_spool);

/*
 * Sends up to replay_per_tick spooled messages while the broker takes them; a message is
 * popped only once the publisher took it. A record that cannot be read back is skipped (the
 * spool dropped and counted it). Call it after the tick's live message, so replay never
 * starves live data. Returns the number sent (0 without a spool or a session).
 */
unsigned em_forward_replay(em_forward_t *f);

/*
 * Every sync_interval_ns (`now_ns` on any monotonic clock): writes the spool's header when it
 * changed and asks for fdatasync off the loop (the syncer's thread, else libuv's worker);
 * nothing while one is in flight. A failed fdatasync is logged.
 */
void em_forward_maybe_sync(em_forward_t *f, uint64_t now_ns);

/* The publisher's on_ack: the broker acknowledged `mid`. With write-ahead, the record sent
 * under it is done in the spool; otherwise (or an unknown mid) nothing happens. */
void em_forward_on_ack(em_forward_t *f, int mid);

/* Fills *out. */
void em_forward_stats(const em_forward_t *f, em_forward_stats_t *out);

/* The spool.* figures into samples[alias]: spool.lost always, the others absent without a
 * spool (never 0 for "none"). */
void em_forward_figures(const em_forward_t *f, const em_figures_t *figs, em_sample_t *samples);

/* Closes the spool (syncing it: the last records reach the disk) and frees. Call it once the
 * loop has run a queued fdatasync to its end (uv_run does not return before; with a syncer,
 * after em_syncer_close's callback). NULL is a no-op. */
void em_forward_free(em_forward_t *f);

#endif /* EDGEMON_AGENT_FORWARD_H */
