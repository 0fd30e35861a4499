/*
 * forward.c - see forward.h. Store and forward between the publisher and the spool: a message
 * the broker does not take goes to the spool, and the spool is replayed a few messages per
 * tick once the broker takes them again. With write-ahead, QoS 1 messages are in the spool
 * before they are sent and done there on their PUBACK (forward.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "forward.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edgemon/flight.h"
#include "edgemon/profile.h"
#include "log.h"

/* The replay buffer: the largest spooled message read back (a flight recording, or data). */
#define REPLAY_BYTES                                                                               \
  (EM_FLIGHT_MAX_BYTES > EM_PROTO_MAX_MESSAGE_BYTES ? EM_FLIGHT_MAX_BYTES                          \
                                                    : EM_PROTO_MAX_MESSAGE_BYTES)

_Static_assert(EM_PROFILE_MAX_BYTES <= REPLAY_BYTES, "a spooled profile fits the replay buffer");

struct em_forward {
  uv_loop_t *loop;
  em_publisher_t *pub; /* Borrowed. */
  char spool_path[EM_FORWARD_MAX_PATH];
  uint64_t sync_interval_ns;
  uint32_t replay_per_tick;
  int qos_data;
  int qos_state;
  bool write_ahead;

  em_spool_t *spool;   /* NULL: memory only (spool off, or it could not be opened). */
  uint8_t *replay;     /* REPLAY_BYTES: a spooled message read back, or a flight recording
                          marked historical on its way into the spool. */
  em_syncer_t *syncer; /* Borrowed: runs the fdatasync; NULL: sync_req on libuv's worker. */
  uv_fs_t sync_req;    /* fdatasync of the spool on libuv's worker (no syncer). */
  bool syncing;        /* sync_req is in flight. */
  uint64_t next_sync_ns;
  uint64_t lost;  /* Messages neither sent nor spooled (no spool, or it failed). */
  int last_error; /* Last append error logged, so each kind is logged once. */
  uint8_t *wal;   /* EM_PROTO_MAX_MESSAGE_BYTES: the historical copy written ahead. */
  /* Write-ahead records awaiting their PUBACK, oldest first (a ring; mid 0 = acked out of
   * order: libmosquitto never uses 0). */
  struct {
    int mid;
    uint64_t number;
  } inflight[EM_FORWARD_MAX_INFLIGHT];
  size_t if_head;
  size_t if_len;
};

/* Opens the spool the options name; without one, what the broker cannot take is lost and
 * counted (spool.lost). */
static void spool_open(em_forward_t *f, uint64_t capacity) {
  if (strcmp(f->spool_path, "off") == 0) {
    EM_INFO("spool: off; messages the broker cannot take are lost (counted in spool.lost)");
    return;
  }
  char err[EM_FORWARD_MAX_PATH + 160];
  int rc = em_spool_open(&f->spool, f->spool_path, capacity, err, sizeof(err));
  if (rc) {
    EM_ERROR("spool: %s; running without one: messages the broker cannot take are lost "
             "(counted in spool.lost)",
             err);
    f->spool = NULL;
    return;
  }
  if (err[0]) {
    EM_WARN("spool: %s", err);
  }
  em_spool_stats_t st;
  em_spool_stats(f->spool, &st);
  EM_INFO("spool: %s, %llu pending to replay, %llu corrupt records skipped, %llu dropped in its "
          "life",
          f->spool_path, (unsigned long long)st.pending, (unsigned long long)st.corrupt,
          (unsigned long long)st.dropped);
}

int em_forward_new(em_forward_t **out, uv_loop_t *loop, em_publisher_t *pub,
                   const em_forward_opts_t *opts) {
  if (!out || !loop || !pub || !opts || !opts->spool_path) {
    return -EINVAL;
  }
  if (strlen(opts->spool_path) >= EM_FORWARD_MAX_PATH) {
    return -ENAMETOOLONG;
  }
  em_forward_t *f = calloc(1, sizeof(*f));
  if (!f) {
    return -ENOMEM;
  }
  f->replay = malloc(REPLAY_BYTES);
  f->wal = malloc(EM_PROTO_MAX_MESSAGE_BYTES);
  if (!f->replay || !f->wal) {
    free(f->replay);
    free(f->wal);
    free(f);
    return -ENOMEM;
  }
  f->loop = loop;
  f->pub = pub;
  snprintf(f->spool_path, sizeof(f->spool_path), "%s", opts->spool_path);
  f->sync_interval_ns = opts->sync_interval_ns;
  f->syncer = opts->syncer;
  f->replay_per_tick = opts->replay_per_tick;
  f->qos_data = opts->qos_data;
  f->qos_state = opts->qos_state;
  f->write_ahead = opts->write_ahead;
  spool_open(f, opts->spool_bytes);
  if (f->spool && f->write_ahead) {
    EM_INFO("spool: write-ahead for QoS 1 messages (done on PUBACK)");
  }
  *out = f;
  return 0;
}

/* Keeps one encoded message for later. An append that fails (disk full, file size limit) is
 * logged once per kind of error and counted in lost; the agent goes on without it. */
static int spool_put(em_forward_t *f, em_spool_kind_t kind, const uint8_t *buf, size_t len) {
  if (!f->spool) {
    f->lost++;
    return -ENOSPC;
  }
  int rc = em_spool_append(f->spool, kind, buf, len);
  if (rc == 0) {
    if (f->last_error) {
      EM_INFO("spool: appending again");
    }
    f->last_error = 0;
    return 0;
  }
  f->lost++;
  if (rc != f->last_error) {
    EM_ERROR("spool: cannot append to %s: %s; messages are lost until it can (spool.lost)",
             f->spool_path, strerror(-rc));
    f->last_error = rc;
  }
  return rc;
}

/* Drops the acknowledged (mid 0) entries at the front of the in-flight map. */
static void inflight_trim(em_forward_t *f) {
  while (f->if_len > 0 && f->inflight[f->if_head].mid == 0) {
    f->if_head = (f->if_head + 1) % EM_FORWARD_MAX_INFLIGHT;
    f->if_len--;
  }
}

/* Remembers that record `number` went out under `mid`. A full map releases its oldest record
 * back to the replay order, as does a mid libmosquitto reused while still tracked (both are
 * then sent again: a duplicate, never a gap). */
static void inflight_add(em_forward_t *f, int mid, uint64_t number) {
  for (size_t i = 0; i < f->if_len; i++) {
    size_t k = (f->if_head + i) % EM_FORWARD_MAX_INFLIGHT;
    if (f->inflight[k].mid == mid) {
      (void)em_spool_release(f->spool, f->inflight[k].number);
      f->inflight[k].mid = 0;
    }
  }
  inflight_trim(f);
  if (f->if_len == EM_FORWARD_MAX_INFLIGHT) {
    (void)em_spool_release(f->spool, f->inflight[f->if_head].number);
    f->inflight[f->if_head].mid = 0;
    inflight_trim(f);
  }
  size_t k = (f->if_head + f->if_len) % EM_FORWARD_MAX_INFLIGHT;
  f->inflight[k].mid = mid;
  f->inflight[k].number = number;
  f->if_len++;
}

void em_forward_on_ack(em_forward_t *f, int mid) {
  if (!f || !f->spool || mid == 0) {
    return;
  }
  for (size_t i = 0; i < f->if_len; i++) {
    size_t k = (f->if_head + i) % EM_FORWARD_MAX_INFLIGHT;
    if (f->inflight[k].mid == mid) {
      (void)em_spool_ack(f->spool, f->inflight[k].number); /* -ENOENT: evicted meanwhile. */
      f->inflight[k].mid = 0;
      break;
    }
  }
  inflight_trim(f);
}

/* Write-ahead: the historical copy of msg goes into the spool held in flight, then buf goes out
 * live under a mid the map remembers. Returns 0 (sent, or kept in the spool to replay when the
 * send was refused), or a negative errno when nothing was written ahead (the caller goes on
 * as without write-ahead). The copy is buf made historical (proto.h), not a second encode. */
static int publish_ahead(em_forward_t *f, em_msg_t *msg, const uint8_t *buf, size_t len) {
  bool state = msg->kind == EM_MSG_STATE;
  size_t wal_len = 0;
  int rc = em_proto_mark_historical(buf, len, f->wal, EM_PROTO_MAX_MESSAGE_BYTES, &wal_len);
  if (rc == EM_PROTO_EMALFORMED) {
    bool *historical = state ? &msg->u.state.historical : &msg->u.data.historical;
    *historical = true;
    rc = em_proto_encode(msg, f->wal, EM_PROTO_MAX_MESSAGE_BYTES, &wal_len);
    *historical = false;
  }
  uint64_t number = 0;
  if (rc == 0) {
    rc = em_spool_append_held(f->spool, state ? EM_SPOOL_STATE : EM_SPOOL_DATA, f->wal, wal_len,
                              &number);
  }
  if (rc != 0) {
    return rc;
  }
  int mid = 0;
  if (em_publisher_send_mid(f->pub, state ? "state" : "data", buf, len,
                            state ? f->qos_state : f->qos_data, state, &mid) == 0) {
    inflight_add(f, mid, number);
    return 0;
  }
  (void)em_spool_release(f->spool, number); /* Not sent: replayed later, as when offline. */
  return 0;
}

int em_forward_publish(em_forward_t *f, em_msg_t *msg, uint8_t *buf, size_t cap, size_t len,
                       bool may_spool) {
  if (!f || !msg || !buf || (msg->kind != EM_MSG_DATA && msg->kind != EM_MSG_STATE)) {
    return -EINVAL;
  }
  bool state = msg->kind == EM_MSG_STATE;
  if (f->write_ahead && f->spool && may_spool && (state ? f->qos_state : f->qos_data) > 0 &&
      em_publisher_online(f->pub) && publish_ahead(f, msg, buf, len) == 0) {
    return 0;
  }
  if (em_publisher_online(f->pub) &&
      em_publisher_send(f->pub, state ? "state" : "data", buf, len,
                        state ? f->qos_state : f->qos_data, state) == 0) {
    return 0;
  }
  if (!may_spool) {
    return -ENOTCONN;
  }
  /* The broker is away: into the spool, flagged as historical. A state change is replayed
   * before data (the current level is republished, retained, on connect anyway). */
  if (state) {
    msg->u.state.historical = true;
  } else {
    msg->u.data.historical = true;
  }
  int rc = em_proto_encode(msg, buf, cap, &len);
  if (rc != 0) {
    f->lost++;
    return rc;
  }
  return spool_put(f, state ? EM_SPOOL_STATE : EM_SPOOL_DATA, buf, len);
}

/* A forensic message (flight recording, stack profile) encoded live: on `topic` at qos_state
 * when the broker takes it, else its historical form (mark) spooled as `kind`. */
static int publish_forensic(em_forward_t *f, const char *topic, em_spool_kind_t kind,
                            int (*mark)(const uint8_t *, size_t, uint8_t *, size_t, size_t *),
                            const uint8_t *buf, size_t len, bool may_spool) {
  if (!f || !buf || len == 0) {
    return -EINVAL;
  }
  if (em_publisher_online(f->pub) &&
      em_publisher_send(f->pub, topic, buf, len, f->qos_state, false) == 0) {
    return 0;
  }
  if (!may_spool) {
    return -ENOTCONN;
  }
  size_t hist_len = 0;
  int rc = mark(buf, len, f->replay, REPLAY_BYTES, &hist_len);
  if (rc != 0) {
    f->lost++;
    return rc;
  }
  return spool_put(f, kind, f->replay, hist_len);
}

int em_forward_publish_flight(em_forward_t *f, const uint8_t *buf, size_t len, bool may_spool) {
  return publish_forensic(f, "flight", EM_SPOOL_FLIGHT, em_flight_mark_historical, buf, len,
                          may_spool);
}

int em_forward_publish_profile(em_forward_t *f, const uint8_t *buf, size_t len, bool may_spool) {
  return publish_forensic(f, "profile", EM_SPOOL_PROFILE, em_profile_mark_historical, buf, len,
                          may_spool);
}

/* Topic, QoS and retain of a spooled record of `kind` when replayed. */
static const char *replay_topic(const em_forward_t *f, em_spool_kind_t kind, int *qos) {
  switch (kind) {
  case EM_SPOOL_STATE:
    *qos = f->qos_state;
    return "state";
  case EM_SPOOL_FLIGHT:
    *qos = f->qos_state;
    return "flight";
  case EM_SPOOL_PROFILE:
    *qos = f->qos_state;
    return "profile";
  case EM_SPOOL_DATA:
    break;
  }
  *qos = f->qos_data;
  return "data";
}

unsigned em_forward_replay(em_forward_t *f) {
  if (!f || !f->spool || !em_publisher_online(f->pub)) {
    return 0;
  }
  unsigned sent = 0;
  for (uint32_t i = 0; i < f->replay_per_tick; i++) {
    if (f->write_ahead && f->if_len == EM_FORWARD_MAX_INFLIGHT) {
      break; /* Replay no more than the map tracks: the rest waits for PUBACKs. */
    }
    em_spool_kind_t kind;
    int n = em_spool_peek(f->spool, &kind, f->replay, REPLAY_BYTES);
    if (n == -EIO) {
      continue; /* Unreadable now: the spool dropped and counted it. */
    }
    if (n <= 0) {
      break;
    }
    int qos = 0;
    const char *topic = replay_topic(f, kind, &qos);
    int mid = 0;
    if (em_publisher_send_mid(f->pub, topic, f->replay, (size_t)n, qos, false, &mid) != 0) {
      break;
    }
    uint64_t number = 0;
    if (f->write_ahead && qos > 0 && em_spool_take(f->spool, &number) == 0) {
      inflight_add(f, mid, number); /* Done on its PUBACK, like a live message. */
    } else {
      em_spool_pop(f->spool);
    }
    sent++;
  }
  return sent;
}

static void on_synced(uv_fs_t *req) {
  em_forward_t *f = req->data;
  if (req->result < 0) {
    EM_ERROR("spool: fdatasync %s: %s", f->spool_path, uv_strerror((int)req->result));
  }
  uv_fs_req_cleanup(req);
  f->syncing = false;
}

static void on_syncer_done(void *ctx, int rc) {
  em_forward_t *f = ctx;
  if (rc < 0) {
    EM_ERROR("spool: fdatasync %s: %s", f->spool_path, strerror(-rc));
  }
  f->syncing = false;
}

/* The header (replay progress, drop count) is written on the loop, a page-cache write;
 * fdatasync runs on the syncer's thread (or libuv's worker), never on the loop. */
void em_forward_maybe_sync(em_forward_t *f, uint64_t now_ns) {
  if (!f || !f->spool || f->syncing || now_ns < f->next_sync_ns) {
    return;
  }
  f->next_sync_ns = now_ns + f->sync_interval_ns;
  bool need = false;
  if (em_spool_flush_header(f->spool, &need) != 0 || !need) {
    return;
  }
  if (f->syncer) {
    f->syncing = em_syncer_sync(f->syncer, em_spool_fd(f->spool), on_syncer_done, f) == 0;
    return;
  }
  f->sync_req.data = f;
  if (uv_fs_fdatasync(f->loop, &f->sync_req, em_spool_fd(f->spool), on_synced) == 0) {
    f->syncing = true;
  }
}

void em_forward_stats(const em_forward_t *f, em_forward_stats_t *out) {
  if (!out) {
    return;
  }
  *out = (em_forward_stats_t){.lost = f ? f->lost : 0, .syncing = f && f->syncing};
  if (f && f->spool) {
    out->spooling = true;
    em_spool_stats(f->spool, &out->spool);
  }
}

void em_forward_free(em_forward_t *f) {
  if (!f) {
    return;
  }
  em_spool_close(f->spool);
  free(f->replay);
  free(f->wal);
  free(f);
}

void em_forward_figures(const em_forward_t *f, const em_figures_t *figs, em_sample_t *samples) {
  em_forward_stats_t st;
  em_forward_stats(f, &st);
  em_figures_set_u(samples, em_figures_alias(figs, EM_FIG_SPOOL_LOST), st.lost);
  const struct {
    em_figure_t figure;
    uint64_t value;
  } rows[] = {{EM_FIG_SPOOL_PENDING, st.spool.pending},
              {EM_FIG_SPOOL_DROPPED, st.spool.dropped},
              {EM_FIG_SPOOL_CORRUPT, st.spool.corrupt},
              {EM_FIG_SPOOL_WRITE_ERRORS, st.spool.write_errors},
              {EM_FIG_SPOOL_REPLAYED, st.spool.replayed},
              {EM_FIG_SPOOL_INFLIGHT, st.spool.inflight},
              {EM_FIG_SPOOL_EVICTED_INFLIGHT, st.spool.evicted_inflight}};
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    em_figures_set_u_if(samples, em_figures_alias(figs, rows[i].figure), st.spooling,
                        rows[i].value);
  }
}
