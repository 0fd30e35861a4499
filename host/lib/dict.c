/*
 * dict.c - the host's registry of devices (see dict.h).
 *
 * Devices live in one array of pointers sorted by id; lookups are binary searches, an insert
 * moves the pointers after it (fleets are thousands of devices, not millions, and devices are
 * created once). Each device owns its alias->name array and budget array, rebuilt whole from
 * every birth.
 */
#define _POSIX_C_SOURCE 200809L
#include "dict.h"

#include "buf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct em_dict {
  em_device_t **devices; /* Sorted by id. */
  size_t n;
  size_t cap;
};

static void copy_str(char *dst, size_t cap, const char *src) {
  snprintf(dst, cap, "%s", src ? src : "");
}

int em_dict_new(em_dict_t **out) {
  if (!out) {
    return -EINVAL;
  }
  *out = calloc(1, sizeof(**out));
  return *out ? 0 : -ENOMEM;
}

static void clear_birth(em_device_t *dev) {
  for (size_t i = 0; i < dev->n_names; i++) {
    free(dev->names[i]);
  }
  free(dev->names);
  free(dev->budgets);
  dev->names = NULL;
  dev->n_names = 0;
  dev->budgets = NULL;
  dev->n_budgets = 0;
  dev->have_birth = false;
}

void em_dict_free(em_dict_t *d) {
  if (!d) {
    return;
  }
  for (size_t i = 0; i < d->n; i++) {
    clear_birth(d->devices[i]);
    free(d->devices[i]);
  }
  free(d->devices);
  free(d);
}

/* The id of device i of the array d->devices. */
static const char *device_id_at(const void *devices, size_t i) {
  return ((em_device_t *const *)devices)[i]->id;
}

/* Index of `id`, or of where it would go (with *found false). */
static size_t find(const em_dict_t *d, const char *id, bool *found) {
  return em_buf_find_name(d->devices, d->n, device_id_at, id, found);
}

em_device_t *em_dict_device(em_dict_t *d, const char *id, bool create) {
  if (!d || !id || !*id || strlen(id) > EM_PROTO_MAX_NAME_BYTES) {
    return NULL;
  }
  bool found = false;
  size_t at = find(d, id, &found);
  if (found) {
    return d->devices[at];
  }
  if (!create || d->n >= EM_DICT_MAX_DEVICES) {
    return NULL;
  }
  if (em_buf_grow_items(&d->devices, &d->cap, d->n, sizeof(*d->devices), 16) != 0) {
    return NULL;
  }
  em_device_t *dev = calloc(1, sizeof(*dev));
  if (!dev) {
    return NULL;
  }
  copy_str(dev->id, sizeof(dev->id), id);
  dev->level = EM_LEVEL_NONE;
  memmove(&d->devices[at + 1], &d->devices[at], (d->n - at) * sizeof(*d->devices));
  d->devices[at] = dev;
  d->n++;
  return dev;
}

size_t em_dict_count(const em_dict_t *d) {
  return d ? d->n : 0;
}

em_device_t *em_dict_at(em_dict_t *d, size_t i) {
  return d && i < d->n ? d->devices[i] : NULL;
}

int em_dict_set_birth(em_device_t *dev, const em_birth_t *b) {
  if (!dev || !b) {
    return -EINVAL;
  }
  clear_birth(dev);
  size_t n_names = 0;
  for (size_t i = 0; i < b->n_metrics; i++) {
    if (b->metrics[i].alias + 1u > n_names) {
      n_names = b->metrics[i].alias + 1u;
    }
  }
  if (n_names > 0) {
    dev->names = calloc(n_names, sizeof(*dev->names));
    if (!dev->names) {
      return -ENOMEM;
    }
    dev->n_names = n_names;
  }
  for (size_t i = 0; i < b->n_metrics; i++) {
    char **slot = &dev->names[b->metrics[i].alias];
    if (*slot) {
      continue; /* The decoder refuses duplicates; keep the first if one gets through. */
    }
    *slot = strdup(b->metrics[i].name ? b->metrics[i].name : "");
    if (!*slot) {
      clear_birth(dev);
      return -ENOMEM;
    }
  }
  if (b->n_budgets > 0) {
    dev->budgets = calloc(b->n_budgets, sizeof(*dev->budgets));
    if (!dev->budgets) {
      clear_birth(dev);
      return -ENOMEM;
    }
    dev->n_budgets = b->n_budgets;
  }
  for (size_t i = 0; i < b->n_budgets; i++) {
    em_dict_budget_t *r = &dev->budgets[i];
    copy_str(r->id, sizeof(r->id), b->budgets[i].id);
    copy_str(r->rule, sizeof(r->rule), b->budgets[i].rule);
    copy_str(r->stage, sizeof(r->stage), b->budgets[i].stage);
    r->level = b->budgets[i].level;
    r->bound = b->budgets[i].bound;
    r->window_ns = b->budgets[i].window_ns;
  }
  dev->have_birth = true;
  dev->session = b->head.session;
  dev->birth_time_ns = b->head.time_ns;
  copy_str(dev->agent_version, sizeof(dev->agent_version), b->agent_version);
  copy_str(dev->board, sizeof(dev->board), b->board);
  dev->period_ns = b->period_ns;
  return 0;
}

static void seen(em_device_t *dev, uint64_t time_ns) {
  if (time_ns > dev->last_seen_ns) {
    dev->last_seen_ns = time_ns;
  }
}

int em_dict_update(em_device_t *dev, const em_msg_t *msg) {
  if (!dev || !msg) {
    return -EINVAL;
  }
  switch (msg->kind) {
  case EM_MSG_BIRTH:
    seen(dev, msg->u.birth.head.time_ns);
    em_identity_set(&dev->model, &msg->u.birth.model);
    return em_dict_set_birth(dev, &msg->u.birth);
  case EM_MSG_DATA:
    seen(dev, msg->u.data.head.time_ns);
    if (!msg->u.data.historical) {
      em_identity_set(&dev->model, &msg->u.data.model);
      if (msg->u.data.level != EM_LEVEL_NONE) {
        dev->level = msg->u.data.level;
      }
    }
    return 0;
  case EM_MSG_STATE:
    seen(dev, msg->u.state.head.time_ns);
    if (msg->u.state.historical) {
      return 0; /* Replayed from the spool: history, not the current level. */
    }
    em_identity_set(&dev->model, &msg->u.state.model);
    if (msg->u.state.model_change) {
      dev->level = msg->u.state.level; /* Unchanged, as it says; reason and time stay those */
      return 0;                        /* of the last level change. */
    }
    dev->have_state = true;
    dev->level = msg->u.state.level;
    dev->state_time_ns = msg->u.state.head.time_ns;
    copy_str(dev->reason, sizeof(dev->reason), msg->u.state.reason);
    return 0;
  case EM_MSG_STATUS:
    /* The Last Will carries the connect time, so it does not count as a sighting. */
    if (msg->u.status.online) {
      seen(dev, msg->u.status.head.time_ns);
    }
    dev->have_status = true;
    dev->online = msg->u.status.online;
    dev->status_time_ns = msg->u.status.head.time_ns;
    return 0;
  default:
    return 0;
  }
}

bool em_dict_knows_session(const em_device_t *dev, uint32_t session) {
  return dev && dev->have_birth && dev->session == session;
}

const char *em_dict_name(const em_device_t *dev, uint32_t alias) {
  if (!dev || alias >= dev->n_names) {
    return NULL;
  }
  return dev->names[alias];
}

long em_dict_alias(const em_device_t *dev, const char *name) {
  if (!dev || !name) {
    return -1;
  }
  for (size_t i = 0; i < dev->n_names; i++) {
    if (dev->names[i] && strcmp(dev->names[i], name) == 0) {
      return (long)i;
    }
  }
  return -1;
}

const em_dict_budget_t *em_dict_stage_budget(const em_device_t *dev, const char *stage) {
  if (!dev || !stage) {
    return NULL;
  }
  const em_dict_budget_t *deadline = NULL;
  for (size_t i = 0; i < dev->n_budgets; i++) {
    const em_dict_budget_t *r = &dev->budgets[i];
    if (strcmp(r->stage, stage) != 0) {
      continue;
    }
    if (strcmp(r->rule, "percentile") == 0) {
      return r;
    }
    if (!deadline && strcmp(r->rule, "deadline") == 0) {
      deadline = r;
    }
  }
  return deadline;
}

const char *em_dict_alias_name(void *ctx, uint32_t alias) {
  return em_dict_name(ctx, alias);
}
