/*
 * dict.h - what the host knows of each device: its birth (metric names by alias, budgets,
 * board, agent version), its retained status and state, its current model, and when it was
 * last heard from.
 *
 * The current model (identity.h) comes from the birth, live state messages and live data
 * messages (the model at the end of the window); a replayed (historical) message never changes
 * it. A state marked model_change is a change of model only: it sets the model and the level it
 * states (unchanged) and leaves the reason and time of the last level change as they were.
 *
 * Data messages carry metric aliases; only the device's birth says what they mean, and only
 * for the session that birth belongs to. This registry keeps a copy of the latest birth per
 * device so a data message can be printed with names, and says when a data message's session
 * has no birth (the caller then asks the device for a rebirth).
 *
 * Owns every device record and the copies of strings in it. Devices are kept sorted by id.
 * Not thread-safe.
 */
#ifndef EM_DICT_H
#define EM_DICT_H

#include <edgemon/proto.h>

#include "identity.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EM_DICT_MAX_DEVICES 100000u

/* A budget rule of the birth, copied. */
typedef struct {
  char id[EM_PROTO_MAX_NAME_BYTES + 1];
  char rule[EM_PROTO_MAX_NAME_BYTES + 1];
  char stage[EM_PROTO_MAX_STAGE_BYTES + 1]; /* "" for process rules. */
  em_level_t level;
  em_value_t bound;
  uint64_t window_ns;
} em_dict_budget_t;

typedef struct {
  char id[EM_PROTO_MAX_NAME_BYTES + 1];

  bool have_birth;
  uint32_t session; /* Of the birth. */
  uint64_t birth_time_ns;
  char agent_version[EM_PROTO_MAX_NAME_BYTES + 1];
  char board[EM_PROTO_MAX_NAME_BYTES + 1];
  uint64_t period_ns;
  char **names; /* names[alias], NULL where the birth defines none; n_names entries. */
  size_t n_names;
  em_dict_budget_t *budgets;
  size_t n_budgets;

  bool have_status;
  bool online;
  uint64_t status_time_ns;

  bool have_state;
  em_level_t level; /* From the latest state or data message; EM_LEVEL_NONE if unknown. */
  char reason[EM_PROTO_MAX_TEXT_BYTES + 1];
  uint64_t state_time_ns;

  em_identity_t model; /* The current model (above); named false: none. */

  uint64_t last_seen_ns; /* Latest time_ns of any message from the device. */
  bool rebirth_asked;    /* Set by the caller once it asked for a rebirth for this session. */
  uint32_t rebirth_session;
} em_device_t;

typedef struct em_dict em_dict_t;

int em_dict_new(em_dict_t **out); /* 0 or -ENOMEM */
void em_dict_free(em_dict_t *d);  /* NULL is a no-op. */

/* The device with this id; created when `create` (NULL on -ENOMEM or past
 * EM_DICT_MAX_DEVICES). Each device is its own allocation: the pointer stays valid until
 * em_dict_free(). */
em_device_t *em_dict_device(em_dict_t *d, const char *id, bool create);

/* Number of devices, and the i-th in id order. */
size_t em_dict_count(const em_dict_t *d);
em_device_t *em_dict_at(em_dict_t *d, size_t i);

/* Replaces the device's birth with a copy of b. Returns 0 or -ENOMEM. */
int em_dict_set_birth(em_device_t *dev, const em_birth_t *b);

/* Updates status, state, level and last_seen from any decoded message of this device. Births
 * go through em_dict_set_birth() as well. Returns 0 or -ENOMEM. */
int em_dict_update(em_device_t *dev, const em_msg_t *msg);

/* True when the device's birth belongs to this data session (its aliases can be named). */
bool em_dict_knows_session(const em_device_t *dev, uint32_t session);

/* The metric name of an alias, or NULL. */
const char *em_dict_name(const em_device_t *dev, uint32_t alias);

/* The first alias named `name`, or -1. */
long em_dict_alias(const em_device_t *dev, const char *name);

/* The stage's budget to show beside its latency: its percentile rule if it has one, else its
 * deadline rule, else NULL. */
const em_dict_budget_t *em_dict_stage_budget(const em_device_t *dev, const char *stage);

/* An em_proto_alias_name_fn over a device (ctx is the em_device_t; NULL ctx names nothing). */
const char *em_dict_alias_name(void *ctx, uint32_t alias);

#endif /* EM_DICT_H */
