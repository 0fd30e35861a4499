/*
 * flight_list.c - reading the aggregator's list of flight recordings (see flight_list.h).
 *
 * The answer is cut into objects at each `{"key":"`; within an object a field is found by its
 * quoted name followed by ':' (an escaped quote inside a string value can never be followed by
 * the name and an unescaped quote, so values cannot fake a field). Strings are copied without
 * their escapes decoded: keys, causes, levels and rule ids are printable ASCII.
 */
#define _POSIX_C_SOURCE 200809L
#include "flight_list.h"

#include <buf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OBJ_START "{\"key\":\""

/* The text after `"name":` within [obj, end), or NULL. */
static const char *field(const char *obj, const char *end, const char *name) {
  char pat[40];
  int n = snprintf(pat, sizeof(pat), "\"%s\":", name);
  size_t len = (size_t)n;
  for (const char *p = obj; p && p + len <= end; p++) {
    p = memchr(p, '"', (size_t)(end - p));
    if (!p || p + len > end) {
      return NULL;
    }
    if (memcmp(p, pat, len) == 0) {
      return p + len;
    }
  }
  return NULL;
}

static uint64_t num_field(const char *obj, const char *end, const char *name) {
  const char *v = field(obj, end, name);
  return v ? strtoull(v, NULL, 10) : 0;
}

static void str_field(const char *obj, const char *end, const char *name, char *out, size_t cap) {
  const char *v = field(obj, end, name);
  out[0] = '\0';
  if (!v || *v != '"') {
    snprintf(out, cap, "-");
    return;
  }
  v++;
  size_t n = 0;
  while (v < end && *v != '"' && n + 1 < cap) {
    if (*v == '\\' && v + 1 < end) {
      v++;
    }
    out[n++] = *v++;
  }
  out[n] = '\0';
}

int em_api_list_parse(const char *json, const char *array, em_flight_list_t *out) {
  memset(out, 0, sizeof(*out));
  char head[40];
  snprintf(head, sizeof(head), "\"%s\":[", array);
  if (!json || !strstr(json, head)) {
    return -EINVAL;
  }
  size_t cap = 0;
  for (const char *p = strstr(json, OBJ_START); p; p = strstr(p + 1, OBJ_START)) {
    const char *next = strstr(p + 1, OBJ_START);
    const char *end = next ? next : p + strlen(p);
    if (em_buf_grow_items(&out->v, &cap, out->n, sizeof(*out->v), 16) != 0) {
      em_flight_list_free(out);
      return -ENOMEM;
    }
    em_flight_entry_t *e = &out->v[out->n++];
    memset(e, 0, sizeof(*e));
    str_field(p, end, "key", e->key, sizeof(e->key));
    e->time_ns = num_field(p, end, "time_ns");
    str_field(p, end, "cause", e->cause, sizeof(e->cause));
    str_field(p, end, "level", e->level, sizeof(e->level));
    str_field(p, end, "rule", e->rule, sizeof(e->rule));
    e->ticks = num_field(p, end, "ticks");
    e->spans = num_field(p, end, "spans");
    e->bytes = num_field(p, end, "bytes");
    e->samples = num_field(p, end, "samples");
    e->stacks = num_field(p, end, "stacks");
    const char *h = field(p, end, "historical");
    e->historical = h && strncmp(h, "true", 4) == 0;
  }
  return 0;
}

void em_flight_list_free(em_flight_list_t *l) {
  free(l->v);
  l->v = NULL;
  l->n = 0;
}

const em_flight_entry_t *em_flight_list_nearest(const em_flight_list_t *l, uint64_t t_ns) {
  const em_flight_entry_t *best = NULL;
  uint64_t best_d = UINT64_MAX;
  for (size_t i = 0; i < l->n; i++) {
    uint64_t t = l->v[i].time_ns;
    uint64_t d = t > t_ns ? t - t_ns : t_ns - t;
    if (d < best_d) { /* Newest first: on a tie the newer, seen first, stays. */
      best = &l->v[i];
      best_d = d;
    }
  }
  return best;
}
