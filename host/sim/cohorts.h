/*
 * cohorts.h - edgemon-sim's cohorts: which simulated devices run which model, how slow they
 * are, how often they degrade, and when a range of them changes version.
 *
 * Rules come from the command line, one per option, each for a device range RANGE (K or K-L,
 * 1-based, inclusive): --model RANGE:NAME:VERSION[:KEY=VALUE,...], --slow RANGE:F,
 * --degrade RANGE:S (mean seconds between DEGRADED excursions), --switch RANGE:T:VERSION (the
 * version changes at simulated second T). A later rule of a kind overrides an earlier one for
 * the devices both cover. em_sim_cohorts_profile() resolves them into what one device does.
 *
 * Owns nothing beyond the caller's em_sim_cohorts_t: the model identities a profile hands out
 * point into the rules' own storage and stay valid as long as it does. Pure, no I/O.
 */
#ifndef EM_SIM_COHORTS_H
#define EM_SIM_COHORTS_H

#include <edgemon/proto.h>
#include <stddef.h>

#define EM_SIM_MAX_RULES 64u

typedef enum {
  EM_SIM_RULE_MODEL,
  EM_SIM_RULE_SLOW,
  EM_SIM_RULE_DEGRADE,
  EM_SIM_RULE_SWITCH,
} em_sim_rule_kind_t;

typedef struct {
  em_sim_rule_kind_t kind;
  unsigned first, last; /* Device range, 1-based, first <= last. */
  char name[EM_PROTO_MAX_NAME_BYTES + 1];
  char version[EM_PROTO_MAX_MODEL_VERSION + 1]; /* MODEL, SWITCH: the (new) version. */
  char label_buf[EM_PROTO_MAX_MODEL_LABELS *
                 (EM_PROTO_MAX_LABEL_KEY + EM_PROTO_MAX_LABEL_VALUE + 2)];
  em_label_t labels[EM_PROTO_MAX_MODEL_LABELS]; /* Sorted by key, into label_buf. */
  size_t n_labels;
  double value; /* SLOW: the factor; DEGRADE: mean seconds; SWITCH: simulated second. */
} em_sim_rule_t;

typedef struct {
  em_sim_rule_t rules[EM_SIM_MAX_RULES];
  size_t n_rules;
} em_sim_cohorts_t;

/* What one device does, from the rules that cover it. */
typedef struct {
  em_model_t model;        /* name NULL: no --model covers it (no identity sent). */
  double latency_factor;   /* 1 unless a --slow covers it. */
  double excursion_mean_s; /* The default given to em_sim_cohorts_profile() unless a
                              --degrade covers it. */
  double switch_at_s;      /* Simulated second of the version change; < 0: none. */
  em_model_t switched;     /* The identity after the change (the model's, new version). */
} em_sim_profile_t;

/*
 * Adds the rule of option `opt` ("--model", "--slow", "--degrade", "--switch") with value
 * `val`. Returns 0, or -EINVAL with a sentence in why (naming what is wrong), or -E2BIG past
 * EM_SIM_MAX_RULES.
 */
int em_sim_cohorts_add(em_sim_cohorts_t *c, const char *opt, const char *val, char *why,
                       size_t why_cap);

/* Checks the rules against the device count: every range within 1..devices, and every
 * --switch covering only devices some --model names. Returns 0 or -EINVAL with why. */
int em_sim_cohorts_check(const em_sim_cohorts_t *c, unsigned devices, char *why, size_t why_cap);

/* The profile of device `device` (1-based); excursion_mean_s is the fleet's default. */
void em_sim_cohorts_profile(const em_sim_cohorts_t *c, unsigned device, double excursion_mean_s,
                            em_sim_profile_t *out);

/* A decimal number (strtod's forms) within [lo, hi]; false for anything else, *out untouched.
 * The one number parser of edgemon-sim's options. */
bool em_sim_parse_number(const char *s, double lo, double hi, double *out);

#endif /* EM_SIM_COHORTS_H */
