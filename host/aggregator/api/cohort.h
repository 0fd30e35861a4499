/*
 * cohort.h - model cohorts in the JSON API: GET /api/models (every model identity some device
 * of the live registry reports now, with its devices) and GET /api/cohort (the stored windows
 * whose own data message carried a model matching a selection, over a time range: levels,
 * per-stage latency merged exactly from the histograms and cut into per-device units, the RSS
 * slope per device, the mean IPC). host/README.md documents both answers.
 *
 * A window belongs to a cohort by the model its data message named (data.model and
 * stage_windows.model, SCHEMA.md), so a device that changed model mid-range is split window by
 * window. /api/cohort reads through the history's read connection (em_history_reader()) on the
 * HTTP thread, under the history's deadline, never the store's writer. Owns nothing between
 * calls.
 */
#ifndef EM_AGG_COHORT_H
#define EM_AGG_COHORT_H

#include "history.h"
#include "query.h"
#include "registry.h"

#include <edgemon/proto.h>
#include <stdbool.h>
#include <stddef.h>

/* Terms of a selection: name, version and one per label at most. */
#define EM_COHORT_MAX_TERMS (2u + EM_PROTO_MAX_MODEL_LABELS)
/* (device, stage, unit) entries an answer may hold; more is a 413. */
#define EM_COHORT_MAX_UNITS 20000u
/* Stages an answer lists; windows of further stage names are left out. */
#define EM_COHORT_MAX_STAGES 64u

typedef enum {
  EM_COHORT_TERM_NAME = 0, /* model=NAME */
  EM_COHORT_TERM_VERSION,  /* version=V */
  EM_COHORT_TERM_LABEL,    /* k=v, k a label key */
} em_cohort_term_kind_t;

typedef struct {
  em_cohort_term_kind_t kind;
  char key[EM_PROTO_MAX_LABEL_KEY + 1]; /* The label key (TERM_LABEL). */
  char value[EM_PROTO_MAX_NAME_BYTES + 1];
} em_cohort_term_t;

/* A parsed select=: every term must match. */
typedef struct {
  em_cohort_term_t terms[EM_COHORT_MAX_TERMS];
  size_t n;
} em_cohort_select_t;

/*
 * Parses "k=v[,k=v...]": k is "model" (the name), "version", or a label key
 * ([A-Za-z_][A-Za-z0-9_]*, at most 15 bytes, not starting with "__"); v is 1..63 bytes of
 * printable ASCII other than ',' (at most 31 for a version or label value); each key once.
 * Returns 0, or -EINVAL with a message naming select in err.
 */
int em_cohort_select_parse(const char *text, em_cohort_select_t *out, char *err, size_t err_cap);

/* True when model m (name NULL: none, which matches nothing) satisfies every term of sel. */
bool em_cohort_select_match(const em_cohort_select_t *sel, const em_model_t *m);

/* GET /api/models: q from em_query_parse(EM_QUERY_MODELS); reg is locked here. */
void em_cohort_models(em_registry_t *reg, const em_query_t *q, em_history_reply_t *out);

/* GET /api/cohort: q from em_query_parse(EM_QUERY_COHORT). 400 for a bad select, 413 past
 * EM_COHORT_MAX_UNITS, 503 past the history's deadline. */
void em_cohort_query(em_history_t *h, const em_query_t *q, em_history_reply_t *out);

#endif /* EM_AGG_COHORT_H */
