/*
 * query.h - the query parameters of the dashboard's JSON API (/api/fleet,
 * /api/devices/<id>/history, /api/latency, /api/devices/<id>/flights and .../profiles,
 * /api/cohort): parsed from the request's raw (still percent-encoded) key=value pairs and checked
 * against the limits host/README.md documents, before anything is read. A bad, out-of-range,
 * repeated or unknown parameter gives -EINVAL and a one-line message naming the parameter, which
 * the HTTP layer answers as 400 {"error": "..."}. Owns nothing: the result is a plain value.
 */
#ifndef EM_AGG_QUERY_H
#define EM_AGG_QUERY_H

#include <edgemon/proto.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EM_QUERY_MAX_PARAMS      16u                                /* More is a 400. */
#define EM_QUERY_MAX_RANGE_NS    (7ull * 24u * 3600u * 1000000000u) /* 7 days. */
#define EM_QUERY_MIN_RANGE_NS    (60ull * 1000000000u)              /* range=: at least 1 minute. */
#define EM_QUERY_DEFAULT_RANGE   (3600ull * 1000000000u)            /* range=1h. */
#define EM_QUERY_POINTS_MIN      10u
#define EM_QUERY_POINTS_MAX      2000u
#define EM_QUERY_POINTS_DEFAULT  600u
#define EM_QUERY_LIMIT_MAX       5000u
#define EM_QUERY_LIMIT_DEFAULT   1000u
#define EM_QUERY_MAX_GLOB_BYTES  128u /* name=: an fnmatch pattern over device ids. */
#define EM_QUERY_FLIGHTS_DEFAULT 100u /* Recordings a flight list gives without limit=. */
#define EM_QUERY_SELECT_BYTES    255u /* select= of /api/cohort, decoded. */
#define EM_QUERY_UNIT_MIN_S      10u  /* unit= of /api/cohort, seconds. */
#define EM_QUERY_UNIT_MAX_S      3600u
#define EM_QUERY_UNIT_DEFAULT_S  60u

/* Which endpoint the parameters are for: each accepts its own set. */
typedef enum {
  EM_QUERY_FLEET = 0, /* name, level, limit */
  EM_QUERY_HISTORY,   /* range | from & to, points */
  EM_QUERY_LATENCY,   /* range | from & to, name, level, stage, limit */
  EM_QUERY_FLIGHTS,   /* since, until, limit (default EM_QUERY_FLIGHTS_DEFAULT); the flights'
                         and the profiles' lists alike */
  EM_QUERY_COHORT,    /* select (required), device (a glob, into name), from, to (each
                         defaulted on its own: to now, from to - 1 h), unit */
  EM_QUERY_MODELS,    /* model, version (/api/models) */
} em_query_kind_t;

typedef struct {
  uint64_t from_ns; /* [from_ns, to_ns): history and latency; flights: since, until (absent: 0,
                       INT64_MAX). */
  uint64_t to_ns;
  unsigned points;
  unsigned limit;
  bool have_name;
  char name[EM_QUERY_MAX_GLOB_BYTES + 1];
  unsigned level_mask; /* Bit (1 << level) per level asked for; 0: any level. */
  bool have_stage;
  char stage[EM_PROTO_MAX_STAGE_BYTES + 1];
  char select[EM_QUERY_SELECT_BYTES + 1]; /* cohort: as it came, decoded; its terms are
                                             checked by cohort.h. */
  unsigned unit_s;                        /* cohort: seconds of a device-window. */
  bool have_model;                        /* models: model=NAME */
  char model[EM_PROTO_MAX_NAME_BYTES + 1];
  bool have_version; /* models: version=V */
  char version[EM_PROTO_MAX_MODEL_VERSION + 1];
} em_query_t;

/* One request parameter as it came (percent-encoded; val NULL for a key without '='). */
typedef struct {
  const char *key;
  const char *val;
} em_query_param_t;

/*
 * Parses params[0..n) for `kind` with now_ns (CLOCK_REALTIME) as the end of a range=. Returns 0
 * with *out filled (defaults for what is absent), or -EINVAL with a message in err.
 */
int em_query_parse(em_query_kind_t kind, const em_query_param_t *params, size_t n, uint64_t now_ns,
                   em_query_t *out, char *err, size_t err_cap);

/* Parses a duration "<digits><s|m|h|d>" into ns. Returns false when malformed. */
bool em_query_duration(const char *s, uint64_t *ns);

/* True when `level` (0..3) passes the mask (an empty mask passes every level, and only an empty
 * mask passes an unknown level, -1). */
bool em_query_level_ok(unsigned mask, int level);

#endif /* EM_AGG_QUERY_H */
