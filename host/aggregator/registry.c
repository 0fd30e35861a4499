/*
 * registry.c - the aggregator's live view of the fleet (see registry.h).
 *
 * Devices are kept in an array of pointers sorted by id (binary search; inserts move the
 * pointers after the new one), each with a values array indexed by alias and a small array of
 * stages, both grown as a device's birth and data require and bounded by the schema's limits.
 * Each device keeps its dict.h record in a dict of its own, so forgetting it (the TTL) frees
 * all of it; the registry stops at EM_DICT_MAX_DEVICES devices, as one shared dict would.
 */
#define _POSIX_C_SOURCE 200809L
#include "registry.h"

#include "buf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Stages kept per device; windows of further stage names are not accumulated. */
#define MAX_STAGES_PER_DEVICE 256u

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

const char *em_agg_reject_name(em_agg_reject_t why) {
  static const char *const names[EM_AGG_REJECT_COUNT] = {
      [EM_AGG_REJECT_TOPIC] = "topic",
      [EM_AGG_REJECT_KIND_MISMATCH] = "kind_mismatch",
      [EM_AGG_REJECT_DEVICE_MISMATCH] = "device_mismatch",
  };
  return (unsigned)why < EM_AGG_REJECT_COUNT ? names[why] : "unknown";
}

int em_registry_new(em_registry_t **out, bool loss_tracked) {
  if (!out) {
    return -EINVAL;
  }
  em_registry_t *r = calloc(1, sizeof(*r));
  if (!r) {
    return -ENOMEM;
  }
  r->scratch = malloc(EM_PROTO_SCRATCH_MAX);
  if (!r->scratch) {
    free(r);
    return -ENOMEM;
  }
  size_t f_max = em_flight_scratch_bytes(EM_FLIGHT_MAX_BYTES);
  size_t p_max = em_profile_scratch_bytes(EM_PROFILE_MAX_BYTES);
  em_buf_init(&r->blob_scratch, f_max > p_max ? f_max : p_max);
  pthread_mutex_init(&r->lock, NULL);
  r->loss_tracked = loss_tracked;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  r->started_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
  *out = r;
  return 0;
}

static void free_device(em_agg_device_t *d) {
  for (size_t i = 0; i < d->n_stages; i++) {
    em_histo_free(d->stages[i].total);
  }
  free(d->stages);
  free(d->values);
  em_dict_free(d->own);
  free(d);
}

void em_registry_free(em_registry_t *r) {
  if (!r) {
    return;
  }
  for (size_t i = 0; i < r->n_devices; i++) {
    free_device(r->devices[i]);
  }
  free(r->devices);
  pthread_mutex_destroy(&r->lock);
  free(r->scratch);
  em_buf_free(&r->blob_scratch);
  free(r);
}

void em_registry_lock(em_registry_t *r) {
  pthread_mutex_lock(&r->lock);
}

void em_registry_unlock(em_registry_t *r) {
  pthread_mutex_unlock(&r->lock);
}

/* The id of device i of the array r->devices. */
static const char *device_id_at(const void *devices, size_t i) {
  return ((em_agg_device_t *const *)devices)[i]->dev->id;
}

static size_t find_index(const em_registry_t *r, const char *id, bool *found) {
  return em_buf_find_name(r->devices, r->n_devices, device_id_at, id, found);
}

em_agg_device_t *em_registry_find(em_registry_t *r, const char *id) {
  bool found = false;
  size_t at = find_index(r, id, &found);
  return found ? r->devices[at] : NULL;
}

/* The device record, created on first sight. NULL on -ENOMEM. */
static em_agg_device_t *device(em_registry_t *r, const char *id) {
  bool found = false;
  size_t at = find_index(r, id, &found);
  if (found) {
    return r->devices[at];
  }
  if (r->n_devices >= EM_DICT_MAX_DEVICES) {
    return NULL;
  }
  if (em_buf_grow_items(&r->devices, &r->cap, r->n_devices, sizeof(*r->devices), 64) != 0) {
    return NULL;
  }
  em_agg_device_t *d = calloc(1, sizeof(*d));
  if (!d || em_dict_new(&d->own) != 0) {
    free(d);
    return NULL;
  }
  d->dev = em_dict_device(d->own, id, true);
  if (!d->dev) {
    em_dict_free(d->own);
    free(d);
    return NULL;
  }
  memmove(&r->devices[at + 1], &r->devices[at], (r->n_devices - at) * sizeof(*r->devices));
  r->devices[at] = d;
  r->n_devices++;
  return d;
}

static int set_values(em_agg_device_t *d, const em_data_t *data) {
  uint32_t top = 0;
  for (size_t i = 0; i < data->n_samples; i++) {
    if (data->samples[i].alias + 1u > top) {
      top = data->samples[i].alias + 1u;
    }
  }
  if (top > d->n_values) {
    em_value_t *grown = realloc(d->values, top * sizeof(*grown));
    if (!grown) {
      return -ENOMEM;
    }
    d->values = grown;
    d->n_values = top;
  }
  for (size_t i = 0; i < d->n_values; i++) {
    d->values[i].type = EM_VALUE_ABSENT;
  }
  for (size_t i = 0; i < data->n_samples; i++) {
    d->values[data->samples[i].alias] = data->samples[i].value;
  }
  return 0;
}

static em_agg_stage_t *stage(em_agg_device_t *d, const char *name) {
  for (size_t i = 0; i < d->n_stages; i++) {
    if (strcmp(d->stages[i].name, name) == 0) {
      return &d->stages[i];
    }
  }
  if (d->n_stages >= MAX_STAGES_PER_DEVICE) {
    return NULL;
  }
  em_agg_stage_t *grown = realloc(d->stages, (d->n_stages + 1) * sizeof(*grown));
  if (!grown) {
    return NULL;
  }
  d->stages = grown;
  em_agg_stage_t *s = &d->stages[d->n_stages];
  memset(s, 0, sizeof(*s));
  if (em_histo_new(&s->total) != 0) {
    return NULL;
  }
  snprintf(s->name, sizeof(s->name), "%s", name);
  d->n_stages++;
  return s;
}

static void add_stages(em_agg_device_t *d, const em_data_t *data) {
  for (size_t i = 0; i < data->n_stages; i++) {
    const em_stage_t *w = &data->stages[i];
    em_agg_stage_t *s = stage(d, w->name);
    if (!s) {
      continue;
    }
    if (w->count > 0) {
      (void)em_histo_add_stage(s->total, w); /* The decoder already checked consistency. */
    }
    s->last = *w;
    s->last.name = s->name;
    s->last.buckets = NULL;
    s->last.n_buckets = 0;
    s->windows++;
  }
}

/* Sequence bookkeeping; returns the messages this one shows to be missing. */
static uint32_t track_seq(em_agg_device_t *d, const em_data_t *data) {
  if (!d->have_seq || d->seq_session != data->head.session) {
    d->have_seq = true;
    d->seq_session = data->head.session;
    d->last_seq = data->seq;
    return 0;
  }
  uint32_t gap = data->seq - (uint32_t)(d->last_seq + 1u); /* mod 2^32 */
  if (gap >= 0x80000000u) {
    d->duplicates++; /* At or behind the last one: repeated or reordered. */
    return 0;
  }
  d->lost += gap;
  d->last_seq = data->seq;
  return gap;
}

/* A device id as the schema defines it: 1..63 characters of [A-Za-z0-9_.:-]. */
static bool device_id_valid(const char *id, size_t n) {
  if (n == 0 || n > EM_TOPIC_MAX_DEVICE) {
    return false;
  }
  for (size_t i = 0; i < n; i++) {
    char c = id[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == ':' || c == '-';
    if (!ok) {
      return false;
    }
  }
  return true;
}

typedef enum { TOPIC_BAD, TOPIC_CMD, TOPIC_MSG } topic_class_t;

/* Splits edgemon/v1/<device>/<kind> exactly: the device into device[0..cap) and the kind into
 * *kind. TOPIC_CMD for edgemon/v1/<anything>/cmd/..., TOPIC_BAD for anything else. */
static topic_class_t parse_topic(const char *topic, char *device, size_t cap, em_msg_kind_t *kind) {
  static const char prefix[] = "edgemon/v1/";
  if (strncmp(topic, prefix, sizeof(prefix) - 1) != 0) {
    return TOPIC_BAD;
  }
  const char *id = topic + sizeof(prefix) - 1;
  const char *slash = strchr(id, '/');
  if (!slash) {
    return TOPIC_BAD;
  }
  const char *rest = slash + 1;
  if (strncmp(rest, "cmd/", 4) == 0) {
    return TOPIC_CMD;
  }
  size_t n = (size_t)(slash - id);
  if (!device_id_valid(id, n) || n >= cap) {
    return TOPIC_BAD;
  }
  static const struct {
    const char *name;
    em_msg_kind_t kind;
  } kinds[] = {{"birth", EM_MSG_BIRTH},   {"data", EM_MSG_DATA},     {"state", EM_MSG_STATE},
               {"status", EM_MSG_STATUS}, {"flight", EM_MSG_FLIGHT}, {"profile", EM_MSG_PROFILE}};
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
    if (strcmp(rest, kinds[i].name) == 0) {
      memcpy(device, id, n);
      device[n] = '\0';
      *kind = kinds[i].kind;
      return TOPIC_MSG;
    }
  }
  return TOPIC_BAD;
}

/* Makes the blob scratch hold at least need bytes. Returns 0 or -ENOMEM. */
static int blob_scratch(em_registry_t *r, size_t need) {
  em_buf_reset(&r->blob_scratch);
  return em_buf_reserve(&r->blob_scratch, need) == 0 ? 0 : -ENOMEM;
}

/* Decodes a flight recording into out->flight or a stack profile into out->profile (by kind:
 * out->msg.kind set to it), growing the blob scratch as needed. Returns 0 or an EM_PROTO_E*
 * code (-ENOMEM for no scratch). */
static int decode_blob(em_registry_t *r, em_msg_kind_t kind, const uint8_t *payload, size_t len,
                       em_ingest_t *out) {
  bool flight = kind == EM_MSG_FLIGHT;
  if (len > (flight ? EM_FLIGHT_MAX_BYTES : EM_PROFILE_MAX_BYTES)) {
    return EM_PROTO_ETOOBIG;
  }
  if (blob_scratch(r, flight ? em_flight_scratch_bytes(len) : em_profile_scratch_bytes(len)) != 0) {
    return -ENOMEM;
  }
  out->msg.kind = kind;
  em_buf_t *b = &r->blob_scratch;
  return flight
             ? em_flight_decode(payload, len, &out->flight, b->data, b->cap, &out->error_offset)
             : em_profile_decode(payload, len, &out->profile, b->data, b->cap, &out->error_offset);
}

/* Decodes payload as a message of `kind`: with em_proto_decode() for birth, data, state, status
 * and cmd (one decoder for the five), else decode_blob(). Returns 0 or an EM_PROTO_E* code:
 * EM_PROTO_EKIND when the payload names another kind, EM_PROTO_ETOOBIG when it is longer than
 * any message of this kind (both before reading anything else). */
static int decode_as(em_registry_t *r, em_msg_kind_t kind, const uint8_t *payload, size_t len,
                     em_ingest_t *out) {
  if (kind == EM_MSG_FLIGHT || kind == EM_MSG_PROFILE) {
    return decode_blob(r, kind, payload, len, out);
  }
  return em_proto_decode(payload, len, &out->msg, r->scratch, EM_PROTO_SCRATCH_MAX,
                         &out->error_offset);
}

/*
 * Decodes the payload of a `kind` topic. When the topic's decoder finds that the payload is not
 * of its kind (EM_PROTO_EKIND, or EM_PROTO_ETOOBIG: a flight recording is larger than any data
 * message may be), the decoders of the other kinds try it, each refusing what is not its own
 * as early: a valid message of another kind comes back decoded (out->msg.kind its kind, which
 * the caller counts as a kind mismatch), and only a payload that is no valid message of any
 * kind is malformed. Returns 0, the error of the decoder whose kind the payload names, or the
 * topic decoder's when none takes it.
 */
static int decode_payload(em_registry_t *r, em_msg_kind_t kind, const uint8_t *payload, size_t len,
                          em_ingest_t *out) {
  int rc = decode_as(r, kind, payload, len, out);
  if (rc != EM_PROTO_EKIND && rc != EM_PROTO_ETOOBIG) {
    return rc;
  }
  static const em_msg_kind_t decoders[] = {EM_MSG_DATA, EM_MSG_FLIGHT, EM_MSG_PROFILE};
  bool topic_blob = kind == EM_MSG_FLIGHT || kind == EM_MSG_PROFILE;
  for (size_t i = 0; i < sizeof(decoders) / sizeof(decoders[0]); i++) {
    em_msg_kind_t k = decoders[i];
    if (k == kind || (k == EM_MSG_DATA && !topic_blob)) {
      continue; /* The topic's own decoder, tried above. */
    }
    int other = decode_as(r, k, payload, len, out);
    if (other != EM_PROTO_EKIND && other != EM_PROTO_ETOOBIG) {
      return other;
    }
  }
  return rc;
}

/* Counts a rejected message and fills out. Caller holds the lock. */
static void reject(em_registry_t *r, em_ingest_t *out, em_agg_reject_t why, int rc) {
  r->stats.rejected[why]++;
  out->rc = rc;
  out->reject = em_agg_reject_name(why);
}

size_t em_registry_expire(em_registry_t *r, uint64_t now_mono_ns, uint64_t ttl_ns) {
  if (!r || ttl_ns == 0 || now_mono_ns < ttl_ns) {
    return 0;
  }
  uint64_t cut = now_mono_ns - ttl_ns;
  em_registry_lock(r);
  size_t kept = 0;
  size_t gone = 0;
  for (size_t i = 0; i < r->n_devices; i++) {
    em_agg_device_t *d = r->devices[i];
    if (d->heard_mono_ns < cut) {
      free_device(d);
      gone++;
    } else {
      r->devices[kept++] = d; /* Order kept: still sorted. */
    }
  }
  r->n_devices = kept;
  r->stats.expired += gone;
  em_registry_unlock(r);
  return gone;
}

int em_registry_ingest(em_registry_t *r, const char *topic, const uint8_t *payload, size_t len,
                       em_ingest_t *out) {
  if (!r || !topic || !out || (!payload && len > 0)) {
    return -EINVAL;
  }
  memset(out, 0, sizeof(*out));
  em_msg_kind_t kind = EM_MSG_CMD;
  em_registry_lock(r);
  r->stats.received++;
  topic_class_t tc = parse_topic(topic, out->device, sizeof(out->device), &kind);
  if (tc == TOPIC_BAD) {
    reject(r, out, EM_AGG_REJECT_TOPIC, -EINVAL);
    goto done;
  }
  if (tc == TOPIC_CMD || len == 0) {
    goto done; /* Commands are for agents; an empty payload clears a retained message. */
  }
  out->rc = decode_payload(r, kind, payload, len, out);
  if (out->rc != 0) {
    r->stats.malformed++;
    goto done;
  }
  if (out->msg.kind != kind) {
    reject(r, out, EM_AGG_REJECT_KIND_MISMATCH, -EINVAL);
    goto done;
  }
  if (kind == EM_MSG_BIRTH &&
      (!out->msg.u.birth.device || strcmp(out->msg.u.birth.device, out->device) != 0)) {
    reject(r, out, EM_AGG_REJECT_DEVICE_MISMATCH, -EPERM);
    goto done;
  }
  em_agg_device_t *d = device(r, out->device);
  if (d && (kind == EM_MSG_FLIGHT || kind == EM_MSG_PROFILE)) {
    *(kind == EM_MSG_FLIGHT ? &d->flights : &d->profiles) += 1;
  } else if (!d || em_dict_update(d->dev, &out->msg) != 0) {
    out->rc = -ENOMEM;
    goto done;
  }
  if (out->msg.kind == EM_MSG_DATA) {
    const em_data_t *data = &out->msg.u.data;
    if (set_values(d, data) != 0) {
      out->rc = -ENOMEM;
      goto done;
    }
    add_stages(d, data);
    if (r->loss_tracked) {
      out->lost_now = track_seq(d, data);
    }
    d->data_msgs++;
    d->data_time_ns = data->head.time_ns;
    d->window_ns = data->window_ns;
    if (!em_dict_knows_session(d->dev, data->head.session)) {
      r->stats.unknown_birth++;
      if (!(d->dev->rebirth_asked && d->dev->rebirth_session == data->head.session)) {
        d->dev->rebirth_asked = true;
        d->dev->rebirth_session = data->head.session;
        d->rebirths_asked++;
        out->needs_rebirth = true;
      }
    }
  }
  d->heard_mono_ns = mono_ns();
  r->stats.ingested++;
  out->agg = d;
done:
  em_registry_unlock(r);
  return out->rc;
}
