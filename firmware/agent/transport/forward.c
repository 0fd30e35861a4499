/*
 * forward.c - see forward.h. Store and forward between the publisher and the spool: a message
 * the broker does not take goes to the spool, and the spool is replayed a few messages per
 * tick once the broker takes them again.
 */
#define _POSIX_C_SOURCE 200809L

#include "forward.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

struct em_forward {
  uv_loop_t *loop;
  em_publisher_t *pub; /* Borrowed. */
  char spool_path[EM_FORWARD_MAX_PATH];
  uint64_t sync_interval_ns;
  uint32_t replay_per_tick;
  int qos_data;
  int qos_state;

  em_spool_t *spool; /* NULL: memory only (spool off, or it could not be opened). */
  uint8_t *replay;   /* EM_PROTO_MAX_MESSAGE_BYTES: a spooled message read back. */
  uv_fs_t sync_req;  /* fdatasync of the spool on libuv's worker. */
  bool syncing;      /* sync_req is in flight. */
  uint64_t next_sync_ns;
  uint64_t lost;  /* Messages neither sent nor spooled (no spool, or it failed). */
  int last_error; /* Last append error logged, so each kind is logged once. */
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
  f->replay = malloc(EM_PROTO_MAX_MESSAGE_BYTES);
  if (!f->replay) {
    free(f);
    return -ENOMEM;
  }
  f->loop = loop;
  f->pub = pub;
  snprintf(f->spool_path, sizeof(f->spool_path), "%s", opts->spool_path);
  f->sync_interval_ns = opts->sync_interval_ns;
  f->replay_per_tick = opts->replay_per_tick;
  f->qos_data = opts->qos_data;
  f->qos_state = opts->qos_state;
  spool_open(f, opts->spool_bytes);
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

int em_forward_publish(em_forward_t *f, em_msg_t *msg, uint8_t *buf, size_t cap, size_t len,
                       bool may_spool) {
  if (!f || !msg || !buf || (msg->kind != EM_MSG_DATA && msg->kind != EM_MSG_STATE)) {
    return -EINVAL;
  }
  bool state = msg->kind == EM_MSG_STATE;
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

unsigned em_forward_replay(em_forward_t *f) {
  if (!f || !f->spool || !em_publisher_online(f->pub)) {
    return 0;
  }
  unsigned sent = 0;
  for (uint32_t i = 0; i < f->replay_per_tick; i++) {
    em_spool_kind_t kind;
    int n = em_spool_peek(f->spool, &kind, f->replay, EM_PROTO_MAX_MESSAGE_BYTES);
    if (n == -EIO) {
      continue; /* Unreadable now: the spool dropped and counted it. */
    }
    if (n <= 0) {
      break;
    }
    bool state = kind == EM_SPOOL_STATE;
    if (em_publisher_send(f->pub, state ? "state" : "data", f->replay, (size_t)n,
                          state ? f->qos_state : f->qos_data, false) != 0) {
      break;
    }
    em_spool_pop(f->spool);
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

/* The header (replay progress, drop count) is written on the loop, a page-cache write;
 * fdatasync runs on libuv's worker, never on the loop. */
void em_forward_maybe_sync(em_forward_t *f, uint64_t now_ns) {
  if (!f || !f->spool || f->syncing || now_ns < f->next_sync_ns) {
    return;
  }
  f->next_sync_ns = now_ns + f->sync_interval_ns;
  bool need = false;
  if (em_spool_flush_header(f->spool, &need) != 0 || !need) {
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
  *out = (em_forward_stats_t){.lost = f ? f->lost : 0};
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
  free(f);
}
