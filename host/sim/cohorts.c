/*
 * cohorts.c - parses edgemon-sim's cohort rules and resolves them per device, see cohorts.h.
 *
 * A rule is stored as parsed, its strings copied into the rule; labels are split at ',' and
 * '=', sorted by key (the schema's order) and checked with em_proto_model_check(), so a model
 * the encoder would refuse is a usage error here rather than a failed publish later. Resolving
 * walks the rules in order, so the last rule of a kind covering a device wins.
 *
 * Owns nothing but the caller's struct; no allocation, no I/O.
 */
#define _POSIX_C_SOURCE 200809L
#include "cohorts.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edgemon/common/parse.h"

#define MAX_DEVICE 100000u

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static int
fail(char *why, size_t cap, const char *fmt, ...);
static int fail(char *why, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (why && cap) {
    vsnprintf(why, cap, fmt, ap);
  }
  va_end(ap);
  return -EINVAL;
}

/* Copies the field s[0..n) into out (cap bytes, NUL added); false when it does not fit or is
 * empty. */
static bool field(const char *s, size_t n, char *out, size_t cap) {
  if (n == 0 || n >= cap) {
    return false;
  }
  memcpy(out, s, n);
  out[n] = '\0';
  return true;
}

/* RANGE: K or K-L within 1..MAX_DEVICE. */
static bool parse_range(const char *s, size_t n, unsigned *first, unsigned *last) {
  char buf[32];
  if (!field(s, n, buf, sizeof(buf))) {
    return false;
  }
  char *dash = strchr(buf, '-');
  uint64_t a = 0, b = 0;
  if (dash) {
    *dash = '\0';
    if (em_parse_u64(buf, 1, MAX_DEVICE, &a) != 0 ||
        em_parse_u64(dash + 1, 1, MAX_DEVICE, &b) != 0 || b < a) {
      return false;
    }
  } else {
    if (em_parse_u64(buf, 1, MAX_DEVICE, &a) != 0) {
      return false;
    }
    b = a;
  }
  *first = (unsigned)a;
  *last = (unsigned)b;
  return true;
}

bool em_sim_parse_number(const char *s, double lo, double hi, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v < lo || v > hi) {
    return false;
  }
  *out = v;
  return true;
}

static int cmp_label(const void *a, const void *b) {
  return strcmp(((const em_label_t *)a)->key, ((const em_label_t *)b)->key);
}

/* KEY=VALUE,... into the rule's labels (sorted). */
static int parse_labels(em_sim_rule_t *r, const char *s, char *why, size_t cap) {
  size_t len = strlen(s);
  if (len == 0 || len >= sizeof(r->label_buf)) {
    return fail(why, cap, "labels '%s' are empty or too long", s);
  }
  memcpy(r->label_buf, s, len + 1);
  char *p = r->label_buf;
  for (;;) {
    char *comma = strchr(p, ',');
    if (comma) {
      *comma = '\0';
    }
    char *eq = strchr(p, '=');
    if (!eq || eq == p || !eq[1]) {
      return fail(why, cap, "label '%s' is not KEY=VALUE", p);
    }
    if (r->n_labels == EM_PROTO_MAX_MODEL_LABELS) {
      return fail(why, cap, "more than %u labels", EM_PROTO_MAX_MODEL_LABELS);
    }
    *eq = '\0';
    r->labels[r->n_labels++] = (em_label_t){.key = p, .value = eq + 1};
    if (!comma) {
      break;
    }
    p = comma + 1;
  }
  qsort(r->labels, r->n_labels, sizeof(r->labels[0]), cmp_label);
  return 0;
}

/* NAME:VERSION[:LABELS] after the range of a --model. */
static int parse_model(em_sim_rule_t *r, const char *s, char *why, size_t cap) {
  const char *c1 = strchr(s, ':');
  if (!c1 || !field(s, (size_t)(c1 - s), r->name, sizeof(r->name))) {
    return fail(why, cap, "the model name is missing or longer than %u", EM_PROTO_MAX_NAME_BYTES);
  }
  const char *c2 = strchr(c1 + 1, ':');
  size_t vlen = c2 ? (size_t)(c2 - c1 - 1) : strlen(c1 + 1);
  if (!field(c1 + 1, vlen, r->version, sizeof(r->version))) {
    return fail(why, cap, "the version is missing or longer than %u", EM_PROTO_MAX_MODEL_VERSION);
  }
  if (c2) {
    int rc = parse_labels(r, c2 + 1, why, cap);
    if (rc != 0) {
      return rc;
    }
  }
  em_model_t m = {
      .name = r->name, .version = r->version, .labels = r->labels, .n_labels = r->n_labels};
  if (em_proto_model_check(&m) != 0) {
    return fail(why, cap,
                "the schema refuses this identity: %s (names and versions printable ASCII, "
                "label keys [A-Za-z_][A-Za-z0-9_]* up to %u, each key once)",
                em_proto_strerror(em_proto_model_check(&m)), EM_PROTO_MAX_LABEL_KEY);
  }
  return 0;
}

int em_sim_cohorts_add(em_sim_cohorts_t *c, const char *opt, const char *val, char *why,
                       size_t why_cap) {
  if (!c || !opt || !val) {
    return -EINVAL;
  }
  if (c->n_rules == EM_SIM_MAX_RULES) {
    fail(why, why_cap, "%s: more than %u cohort rules", opt, EM_SIM_MAX_RULES);
    return -E2BIG;
  }
  em_sim_rule_t *r = &c->rules[c->n_rules];
  memset(r, 0, sizeof(*r));
  const char *colon = strchr(val, ':');
  if (!colon || !parse_range(val, (size_t)(colon - val), &r->first, &r->last)) {
    return fail(why, why_cap, "%s '%s' does not start with a device range K or K-L (1..%u) and ':'",
                opt, val, MAX_DEVICE);
  }
  const char *rest = colon + 1;
  char sub[256];
  int rc = 0;
  if (strcmp(opt, "--model") == 0) {
    r->kind = EM_SIM_RULE_MODEL;
    rc = parse_model(r, rest, sub, sizeof(sub));
  } else if (strcmp(opt, "--slow") == 0) {
    r->kind = EM_SIM_RULE_SLOW;
    if (!em_sim_parse_number(rest, 0.01, 1000, &r->value)) {
      rc = fail(sub, sizeof(sub), "the factor '%s' is not a number from 0.01 to 1000", rest);
    }
  } else if (strcmp(opt, "--degrade") == 0) {
    r->kind = EM_SIM_RULE_DEGRADE;
    if (!em_sim_parse_number(rest, 0.1, 1e6, &r->value)) {
      rc = fail(sub, sizeof(sub), "'%s' is not a number of seconds from 0.1 to 1e6", rest);
    }
  } else if (strcmp(opt, "--switch") == 0) {
    r->kind = EM_SIM_RULE_SWITCH;
    const char *c2 = strchr(rest, ':');
    char num[32];
    if (!c2 || !field(rest, (size_t)(c2 - rest), num, sizeof(num)) ||
        !em_sim_parse_number(num, 0, 1e7, &r->value)) {
      rc = fail(sub, sizeof(sub), "'%s' is not T:VERSION (T simulated seconds, 0 to 1e7)", rest);
    } else if (!field(c2 + 1, strlen(c2 + 1), r->version, sizeof(r->version))) {
      rc = fail(sub, sizeof(sub), "the version is missing or longer than %u",
                EM_PROTO_MAX_MODEL_VERSION);
    } else {
      em_model_t m = {.name = "x", .version = r->version};
      if (em_proto_model_check(&m) != 0) {
        rc = fail(sub, sizeof(sub), "the version '%s' is not printable ASCII", r->version);
      }
    }
  } else {
    return fail(why, why_cap, "%s is not a cohort option", opt);
  }
  if (rc != 0) {
    return fail(why, why_cap, "%s '%s': %s", opt, val, sub);
  }
  c->n_rules++;
  return 0;
}

int em_sim_cohorts_check(const em_sim_cohorts_t *c, unsigned devices, char *why, size_t why_cap) {
  for (size_t i = 0; i < c->n_rules; i++) {
    const em_sim_rule_t *r = &c->rules[i];
    if (r->last > devices) {
      return fail(why, why_cap, "a cohort rule names devices %u-%u of %u", r->first, r->last,
                  devices);
    }
    if (r->kind != EM_SIM_RULE_SWITCH) {
      continue;
    }
    for (unsigned d = r->first; d <= r->last; d++) {
      em_sim_profile_t p;
      em_sim_cohorts_profile(c, d, 1, &p);
      if (!p.model.name) {
        return fail(why, why_cap, "--switch covers device %u, which no --model names", d);
      }
    }
  }
  return 0;
}

void em_sim_cohorts_profile(const em_sim_cohorts_t *c, unsigned device, double excursion_mean_s,
                            em_sim_profile_t *out) {
  memset(out, 0, sizeof(*out));
  out->latency_factor = 1;
  out->excursion_mean_s = excursion_mean_s;
  out->switch_at_s = -1;
  const em_sim_rule_t *model = NULL, *sw = NULL;
  for (size_t i = 0; i < c->n_rules; i++) {
    const em_sim_rule_t *r = &c->rules[i];
    if (device < r->first || device > r->last) {
      continue;
    }
    switch (r->kind) {
    case EM_SIM_RULE_MODEL:
      model = r;
      break;
    case EM_SIM_RULE_SLOW:
      out->latency_factor = r->value;
      break;
    case EM_SIM_RULE_DEGRADE:
      out->excursion_mean_s = r->value;
      break;
    case EM_SIM_RULE_SWITCH:
      sw = r;
      break;
    }
  }
  if (!model) {
    return;
  }
  out->model = (em_model_t){.name = model->name,
                            .version = model->version,
                            .labels = model->labels,
                            .n_labels = model->n_labels};
  if (sw) {
    out->switch_at_s = sw->value;
    out->switched = out->model;
    out->switched.version = sw->version;
  }
}
