/*
 * schema.h - internal: the v1 map keys and the value checks that the encoder and the decoder
 * share, so the encoder refuses exactly what the decoder would refuse. Not installed.
 */
#ifndef EDGEMON_PROTO_SCHEMA_H
#define EDGEMON_PROTO_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "edgemon/flight.h"
#include "edgemon/profile.h"
#include "edgemon/proto.h"

/* Keys of the top level: version and kind, then the head (em__head_fields). */
enum { K_VERSION = 0, K_KIND = 1, K_TIME = 2, K_SESSION = 3 };
/* birth */
enum {
  KB_DEVICE = 4,
  KB_AGENT = 5,
  KB_BOARD = 6,
  KB_PERIOD = 7,
  KB_METRICS = 8,
  KB_BUDGETS = 9,
  KB_FLIGHT = 10,
  KB_MODEL = 11,
  KB_PROFILER = 12
};
/* birth: flight recorder */
enum { KR_PRE = 0, KR_POST = 1, KR_TICKS = 2, KR_SPANS = 3, KR_BYTES = 4 };
/* birth: profiler */
enum { KQ_HZ = 0, KQ_SECONDS = 1, KQ_MAX_SECONDS = 2, KQ_MIN_GAP = 3 };
/* birth: metric definition */
enum { KM_ALIAS = 0, KM_NAME = 1, KM_UNIT = 2, KM_KIND = 3, KM_ABSENT = 4 };
/* birth: budget */
enum { KU_ID = 0, KU_RULE = 1, KU_LEVEL = 2, KU_BOUND = 3, KU_STAGE = 4, KU_WINDOW = 5 };
/* data */
enum {
  KD_SEQ = 4,
  KD_WINDOW = 5,
  KD_VALUES = 6,
  KD_STAGES = 7,
  KD_LEVEL = 8,
  KD_HISTORICAL = 9,
  KD_MODEL = 10
};
/* data: stage window */
enum {
  KS_NAME = 0,
  KS_COUNT = 1,
  KS_SUM = 2,
  KS_MIN = 3,
  KS_MAX = 4,
  KS_P50 = 5,
  KS_P90 = 6,
  KS_P99 = 7,
  KS_P999 = 8,
  KS_SCALE = 9,
  KS_ZERO = 10,
  KS_BUCKETS = 11
};
/* state */
enum {
  KT_LEVEL = 4,
  KT_PREV = 5,
  KT_MONO = 6,
  KT_RULE = 7,
  KT_STAGE = 8,
  KT_VALUE = 9,
  KT_BOUND = 10,
  KT_REASON = 11,
  KT_HISTORICAL = 12,
  KT_MODEL = 13,
  KT_MODEL_CHANGE = 14,
  KT_VERDICT = 15
};
/* model identity (birth 11, data 10, state 13) */
enum { KO_NAME = 0, KO_VERSION = 1, KO_LABELS = 2 };
/* status */
enum { KX_ONLINE = 4 };
/* cmd */
enum { KC_COMMAND = 4, KC_SECONDS = 5 };
/* flight (edgemon/flight.h) */
enum {
  KF_NUMBER = 4,
  KF_TRIGGER = 5,
  KF_MONO = 6,
  KF_PRE = 7,
  KF_POST = 8,
  KF_PERIOD = 9,
  KF_STAGES = 10,
  KF_COLUMNS = 11,
  KF_TICKS = 12,
  KF_SPANS = 13,
  KF_TRUNCATED = 14,
  KF_HISTORICAL = 15,
  KF_VERDICT = 16
};
/* verdict (state 15, flight 16) */
enum {
  KV_STAGE = 0,
  KV_STATISTIC = 1,
  KV_BASELINE = 2,
  KV_BREACH = 3,
  KV_WINDOWS = 4,
  KV_CAUSES = 5
};
/* verdict: cause */
enum { KW_CODE = 0, KW_SHARE = 1, KW_EVIDENCE = 2, KW_PROCESSES = 3, KW_FUNCTIONS = 4 };
/* flight: trigger */
enum {
  KG_CAUSE = 0,
  KG_LEVEL = 1,
  KG_PREV = 2,
  KG_RULE = 3,
  KG_STAGE = 4,
  KG_VALUE = 5,
  KG_BOUND = 6,
  KG_REASON = 7
};
/* flight: truncation */
enum { KN_SPANS_CUT = 0, KN_TICKS_CUT = 1, KN_OVERWRITTEN = 2 };
/* profile (edgemon/profile.h); its trigger uses the flight trigger's keys but 5 and 6 */
enum {
  KP_NUMBER = 4,
  KP_TRIGGER = 5,
  KP_MONO = 6,
  KP_DURATION = 7,
  KP_HZ = 8,
  KP_CLOCK = 9,
  KP_SAMPLES = 10,
  KP_LOST = 11,
  KP_STAGES = 12,
  KP_FRAMES = 13,
  KP_STACKS = 14,
  KP_NOTES = 15,
  KP_TRUNCATED = 16,
  KP_HISTORICAL = 17
};
/* profile: truncation */
enum { KPN_STACKS_CUT = 0, KPN_SAMPLES_CUT = 1 };
/* profile: the leading items of a stack, before its frame indices */
enum { PROFILE_STACK_HEAD = 3 };

/* The fields of the birth's flight recorder (key 10), in key order, for the codec and JSON. */
typedef struct {
  unsigned key;
  const char *json;
  size_t offset; /* Of a uint64_t in em_flight_recorder_t. */
} em_recorder_field_t;

#define EM_RECORDER_FIELDS 5u
extern const em_recorder_field_t em__recorder_fields[EM_RECORDER_FIELDS];

/* names[i], or "unknown" when i is outside names[0..n) or names[i] is NULL. */
const char *em__name_in(const char *const *names, size_t n, long i);

/* "gauge", "counter", "delta", or "unknown". */
const char *em__metric_kind_name(em_metric_kind_t k);

/* A settings map of the birth (flight recorder key 10, profiler key 12): its uint64 fields. */
typedef struct {
  const em_recorder_field_t *fields;
  size_t n_fields;
  size_t on_offset; /* Of the bool that says the map is present. */
} em_settings_t;

#define EM_PROFILER_FIELDS 4u
extern const em_recorder_field_t em__profiler_fields[EM_PROFILER_FIELDS];
extern const em_settings_t em__recorder_settings, em__profiler_settings;

/*
 * One field of the message head (em_msg_head_t), as the encoder writes it, the decoder reads
 * it and the JSON printer names it: every kind in `kinds` carries it (required when decoding),
 * after version and kind and in this table's order; other kinds neither write nor read it (the
 * decoder skips the key like any unknown one).
 */
typedef struct {
  unsigned key;     /* K_TIME, K_SESSION. */
  const char *json; /* Member name in JSON. */
  uint64_t max;     /* Largest value it may hold. */
  size_t offset;    /* In em_msg_head_t. */
  size_t bytes;     /* 4 or 8: an unsigned integer of that width. */
  unsigned kinds;   /* Bit (1u << em_msg_kind_t) per kind that carries it. */
} em_head_field_t;

#define EM_HEAD_FIELDS 2u
extern const em_head_field_t em__head_fields[EM_HEAD_FIELDS];

/* The head field `key` as kind `kind` carries it, or NULL. */
const em_head_field_t *em__head_field(em_msg_kind_t kind, uint64_t key);

/* Map-key bits (1 << key) of the head fields kind `kind` carries: all required. */
uint64_t em__head_keys(em_msg_kind_t kind);

/* True when kind `kind` carries head field `f`. */
bool em__head_carries(const em_head_field_t *f, em_msg_kind_t kind);

/* Reads or writes head field `f` of `h`. */
uint64_t em__head_get(const em_msg_head_t *h, const em_head_field_t *f);
void em__head_set(em_msg_head_t *h, const em_head_field_t *f, uint64_t v);

/* What a string field may hold. */
typedef enum {
  STR_IDENT, /* 1..max bytes of [A-Za-z0-9_.:-]: device ids and stage names (topic-safe). */
  STR_NAME,  /* 1..max bytes of printable ASCII (0x20..0x7e). */
  STR_TEXT,  /* 1..max bytes of UTF-8 with no control characters. */
  STR_LABEL, /* 1..max bytes of [A-Za-z0-9_], no leading digit, no leading "__": label keys. */
} em_str_class_t;

/* 0, or EM_PROTO_ESTRING when s[0..len) does not fit the class and the length limit. */
int em__check_str(const char *s, size_t len, em_str_class_t cls, size_t max);

/* Same for a NUL-terminated string; NULL is EM_PROTO_ESTRING. */
int em__check_cstr(const char *s, em_str_class_t cls, size_t max);

/*
 * 0, or the code for a stage table the schema refuses: a name not a stage-name (ESTRING), a
 * name twice (EDUPLICATE). At most 64 x 64 comparisons of 31 bytes.
 */
int em__check_stage_table(const char *const *names, size_t n);

/* 0, or EM_PROTO_ERANGE for a NaN or infinite float. EM_VALUE_ABSENT passes. */
int em__check_value(const em_value_t *v);

/* 0, or EM_PROTO_ERANGE / EM_PROTO_EINCONSISTENT for a stage window the schema refuses. */
int em__check_stage(const em_stage_t *s);

/* 0 when `clock` names a sampling event the schema knows ("cpu-clock", "task-clock"), else
 * EM_PROTO_ESTRING (not an ident) or EM_PROTO_ERANGE (another event). */
int em__profile_clock_check(const char *clock);

/* The value a counter column's figure carries as a running total: UINT, or INT >= 0. */
bool em__counter_total(const em_value_t *v, uint64_t *total);

/*
 * What a state message and a flight trigger both say of a rule's breach, under keys in this
 * order from a first key on (state: 7..11, trigger: 3..7): rule id, stage, measured value,
 * bound, reason; each absent (NULL, EM_VALUE_ABSENT) or present. EM_CAUSE_OF(x) passes a
 * message's fields to the checks and writers below, EM_CAUSE_REF(x) to the reader.
 */
typedef enum { CAUSE_RULE, CAUSE_STAGE, CAUSE_VALUE, CAUSE_BOUND, CAUSE_REASON } em_cause_key_t;
#define EM_CAUSE_FIELDS 5u
#define EM_CAUSE_OF(x)  (x)->rule, (x)->stage, &(x)->value, &(x)->bound, (x)->reason
#define EM_CAUSE_REF(x) &(x)->rule, &(x)->stage, &(x)->value, &(x)->bound, &(x)->reason

/* 0, or the decoder's code for cause fields it would refuse. */
int em__check_cause(const char *rule, const char *stage, const em_value_t *value,
                    const em_value_t *bound, const char *reason);

/* How many of the cause fields are present. */
size_t em__cause_count(const char *rule, const char *stage, const em_value_t *value,
                       const em_value_t *bound, const char *reason);

/*
 * A breach's trigger as a flight recording (key 5) and a profile (key 5) carry it: what opened
 * it, the levels, and the cause fields under keys 3..7 (KG_*). A profile's trigger carries no
 * measured value nor bound (keys 5 and 6): its readers skip them like unknown keys.
 */
typedef struct {
  uint64_t cause;        /* em_flight_cause_t / em_profile_cause_t: 0 or 1. */
  em_level_t level;      /* Escalation: the new level; command: the level then. */
  em_level_t prev_level; /* Escalation: the level before; EM_LEVEL_NONE: absent. */
  const char *rule;
  const char *stage;
  em_value_t value;
  em_value_t bound;
  const char *reason;
} em_trigger_t;

/* 0, or the decoder's code for a trigger it would refuse. */
int em__check_trigger(const em_trigger_t *t);

/* True for the levels 0..3. */
bool em__level_ok(int level);

#endif /* EDGEMON_PROTO_SCHEMA_H */
