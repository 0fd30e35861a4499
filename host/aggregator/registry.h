/*
 * registry.h - the aggregator's live view of the fleet: per device its birth, status, state
 * (through dict.h), the latest value of every metric, cumulative per-stage latency histograms,
 * and the counters of what was received and lost.
 *
 * The MQTT thread feeds it (em_registry_ingest), the HTTP thread reads it to render /metrics and
 * /api; both hold the registry's lock (em_registry_lock/unlock) while they touch it, the
 * ingest functions take it themselves. Structures are public so the renderers can read them;
 * only this module writes them.
 *
 * Identity: a message is taken only from a topic that is exactly edgemon/v1/<device>/<kind>
 * (device 1..63 characters of [A-Za-z0-9_.:-], kind birth, data, state, status, flight or
 * profile, no further level, no trailing slash); its payload's kind must be the topic's, and a
 * birth's device id the topic's. A flight recording (edgemon/flight.h) is decoded with
 * em_flight_decode() into em_ingest_t.flight, a stack profile (edgemon/profile.h) with
 * em_profile_decode() into em_ingest_t.profile, for the store; neither changes anything in the
 * device's live view but its last-heard time and its recording or profile count. With the broker's
 * ACL keeping a device to its own topics, the topic is the identity the fleet can trust. Anything
 * else is rejected before it touches a device, and counted by reason (em_agg_stats_t.rejected).
 * Topics under edgemon/v1/<device>/cmd/ are commands for the agents: ignored, not counted.
 *
 * Model: each device's current model identity is its dict record's (dict.h: from its birth, its
 * live state and live data messages; a state marked model_change changes the model only).
 *
 * Lifetime: a device not heard from for the configured TTL is forgotten
 * (em_registry_expire()): its record, values and histograms are freed and it leaves /metrics and
 * /api. Its history in SQLite stays. A message from it later makes a new record.
 *
 * Loss: per device and session, a data message whose sequence number is not the previous one
 * plus 1 (mod 2^32) counts the missing numbers as lost when the gap is below 2^31, else as a
 * duplicate or reordered message. A new session starts counting afresh. In a share group each
 * aggregator sees only part of every device's sequence, so loss is not computed there
 * (`loss_tracked` false).
 *
 * Owns every device record (each with a dict of its own, so a device is freed whole), its
 * histograms and value arrays, and the lock.
 */
#ifndef EM_AGG_REGISTRY_H
#define EM_AGG_REGISTRY_H

#include <broker.h>
#include <buf.h>
#include <dict.h>
#include <edgemon/flight.h>
#include <edgemon/profile.h>
#include <edgemon/proto.h>
#include <histo.h>
#include "identity.h"
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Latency of one stage of one device, accumulated since the aggregator started. */
typedef struct {
  char name[EM_PROTO_MAX_STAGE_BYTES + 1];
  em_histo_t *total; /* Every window merged: a cumulative Prometheus histogram. */
  em_stage_t last;   /* The latest window's figures (buckets not kept: NULL, 0). */
  uint64_t windows;  /* Windows merged. */
} em_agg_stage_t;

typedef struct {
  em_device_t *dev;       /* Birth, status, state, last seen (dict.h); owned through `own`. */
  em_dict_t *own;         /* A dict holding only this device. */
  uint64_t heard_mono_ns; /* CLOCK_MONOTONIC when a message of this device was last taken. */

  /* The latest data message. values[i] is the value of alias i, type ABSENT when the device
   * sent null or nothing; n_values covers every alias seen. */
  em_value_t *values;
  size_t n_values;
  uint64_t data_time_ns; /* time_ns of the latest data message, 0 before the first. */
  uint64_t window_ns;

  em_agg_stage_t *stages;
  size_t n_stages;

  uint64_t data_msgs;  /* Data messages ingested. */
  uint64_t lost;       /* Data messages missing from the sequence (see above). */
  uint64_t duplicates; /* Data messages behind the sequence (repeated or reordered). */
  bool have_seq;
  uint32_t seq_session;
  uint32_t last_seq;
  uint64_t rebirths_asked;
  uint64_t flights;  /* Flight recordings received (decoded). */
  uint64_t profiles; /* Stack profiles received (decoded). */
} em_agg_device_t;

/* Why a message was rejected before it reached a device (em_agg_stats_t.rejected). */
typedef enum {
  EM_AGG_REJECT_TOPIC = 0,       /* Not exactly edgemon/v1/<valid device>/<known kind>. */
  EM_AGG_REJECT_KIND_MISMATCH,   /* A valid message of another kind than the topic's (any
                                    kind on any other kind's topic: em_registry_ingest()). */
  EM_AGG_REJECT_DEVICE_MISMATCH, /* A birth whose device id is not the topic's. */
  EM_AGG_REJECT_COUNT
} em_agg_reject_t;

/* Label of a reason: "topic", "kind_mismatch", "device_mismatch". */
const char *em_agg_reject_name(em_agg_reject_t why);

/* Failed store writes of one table for one reason (copied from the store's counters). */
typedef struct {
  char table[16];
  char reason[16];
  uint64_t count;
} em_agg_failure_t;

#define EM_AGG_FAILURE_KINDS 16

/* The store's figures of one kind of forensic blob (forensics.h), copied by the owner of the
 * store. */
typedef struct {
  uint64_t stored;    /* Blobs stored since start (duplicates not counted). */
  uint64_t dropped;   /* Deleted to keep a device within its per-device bound (its oldest). */
  uint64_t evicted;   /* Deleted to keep all devices within the total bound (the oldest
                         received of any device). */
  uint64_t bytes;     /* Encoded bytes stored now, all devices. */
  uint64_t max_bytes; /* The total bound; 0: no store (the kind's families are left out). */
} em_agg_forensic_t;

#define EM_AGG_FORENSIC_KINDS 2 /* [0] flight recordings, [1] stack profiles. */

/* The aggregator's own counters, for /metrics. The store_* and ckpt_* figures are set by the
 * owner of the store; the metrics_* ones by em_metrics_render(). */
typedef struct {
  uint64_t received;                      /* MQTT messages handed to em_registry_ingest. */
  uint64_t ingested;                      /* Of which decoded and applied. */
  uint64_t malformed;                     /* Payloads that did not decode. */
  uint64_t unknown_birth;                 /* Data messages without a birth for their session. */
  uint64_t rejected[EM_AGG_REJECT_COUNT]; /* Messages rejected, by reason. */
  uint64_t expired;                       /* Devices forgotten after the TTL. */
  uint64_t store_rows; /* Rows written to SQLite (set by the owner of the store). */
  uint64_t store_batches;
  uint64_t store_errors;
  uint64_t store_duplicates; /* Data messages already stored: nothing written. */
  uint64_t models_refused;   /* Messages whose model got no models row (store.h). */
  uint64_t models_deleted;   /* Models rows the retention pass deleted. */
  em_agg_failure_t store_failures[EM_AGG_FAILURE_KINDS]; /* By table and reason. */
  size_t n_store_failures;
  uint64_t ckpt_runs; /* WAL checkpoints (checkpoint.h). */
  uint64_t ckpt_frames;
  uint64_t ckpt_busy;
  uint64_t ckpt_errors;
  uint64_t ckpt_truncates;
  uint64_t ckpt_writer_runs; /* Commits after which the writer copied the last frames. */
  uint64_t ckpt_writer_busy;
  uint64_t wal_bytes;     /* Size of the WAL file after the latest checkpoint. */
  uint64_t wal_max_bytes; /* Largest WAL file a checkpoint found. */
  em_agg_forensic_t forensic[EM_AGG_FORENSIC_KINDS]; /* Flight recordings, stack profiles. */
  bool metrics_truncated;       /* The latest /metrics left devices out (over the cap). */
  uint64_t metrics_omitted;     /* Devices the latest /metrics left out. */
  uint64_t metrics_truncations; /* Renders that left devices out, in all. */
} em_agg_stats_t;

typedef struct {
  pthread_mutex_t lock;
  em_agg_device_t **devices; /* Sorted by device id, n_devices entries. */
  size_t n_devices;
  size_t cap;
  bool loss_tracked; /* False in a share group. */
  em_agg_stats_t stats;
  uint64_t started_ns;      /* CLOCK_REALTIME when the registry was made. */
  uint64_t device_ttl_ns;   /* For /metrics only: the TTL em_registry_expire() is given. */
  size_t metrics_max_bytes; /* Cap of the /metrics text; 0: EM_METRICS_MAX_BYTES. */
  void *scratch;            /* Decode scratch (EM_PROTO_SCRATCH_MAX bytes), used under the lock. */
  em_buf_t blob_scratch;    /* em_flight_decode()'s and em_profile_decode()'s scratch, grown as
                               needed up to what the largest of either needs (the MQTT thread). */
  struct em_remote *remote; /* Remote write whose per-endpoint health /metrics shows (borrowed;
                               set before serving, freed after); NULL: none. */
} em_registry_t;

/* What em_registry_ingest() did with a message, for the caller (storage, rebirth). */
typedef struct {
  int rc;              /* 0, or the decode error (EM_PROTO_E*), -EINVAL for the topic or a kind
                          mismatch, -EPERM for a birth of another device. */
  const char *reject;  /* When rejected before decoding or after: the reason's label. */
  size_t error_offset; /* For a decode error. */
  char device[EM_TOPIC_MAX_DEVICE + 1];
  em_msg_t msg;         /* The decoded message (points into the registry's scratch; valid
                           until the next ingest). For a flight recording or a stack profile
                           only msg.kind is set (EM_MSG_FLIGHT, EM_MSG_PROFILE): the message is
                           `flight` or `profile`. */
  em_flight_t flight;   /* A decoded flight recording (points into the registry's blob
                           scratch; valid until the next ingest). */
  em_profile_t profile; /* A decoded stack profile, likewise. */
  em_agg_device_t *agg; /* The device, or NULL when rc != 0. */
  bool needs_rebirth;   /* Data without a birth for its session, first time this session. */
  uint32_t lost_now;    /* Messages this data message showed to be missing. */
} em_ingest_t;

int em_registry_new(em_registry_t **out, bool loss_tracked); /* 0 or -ENOMEM */
void em_registry_free(em_registry_t *r);                     /* NULL is a no-op. */

/*
 * Decodes and applies one MQTT message (topic edgemon/v1/<device>/<kind>, checked as above).
 * A payload the topic's decoder refuses as another kind is decoded as the kind it names: a
 * valid message is rejected as a kind mismatch; one that is not (nor any kind's) is malformed.
 * Takes the lock for the update. Cmd topics and empty payloads (retained messages being
 * cleared) are ignored with rc 0 and agg NULL. Returns out->rc.
 */
int em_registry_ingest(em_registry_t *r, const char *topic, const uint8_t *payload, size_t len,
                       em_ingest_t *out);

/* Forgets every device not heard from since now_mono_ns - ttl_ns (CLOCK_MONOTONIC; ttl_ns 0
 * forgets none). Takes the lock. Returns how many were forgotten (also added to
 * stats.expired). */
size_t em_registry_expire(em_registry_t *r, uint64_t now_mono_ns, uint64_t ttl_ns);

void em_registry_lock(em_registry_t *r);
void em_registry_unlock(em_registry_t *r);

/* The device with this id, or NULL (caller holds the lock). */
em_agg_device_t *em_registry_find(em_registry_t *r, const char *id);

#endif /* EM_AGG_REGISTRY_H */
