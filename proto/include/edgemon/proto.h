/*
 * edgemon/proto.h - the v1 telemetry messages (CBOR) shared by the agent and the host.
 *
 * This header is the C face of proto/edgemon.cddl. It defines one struct per message kind
 * (birth, data, state, status, cmd), an encoder that writes a message into a caller-supplied
 * buffer without touching the heap, and a strict decoder that checks the schema's shape
 * (types, required keys, ranges, item counts, nesting depth, total size) and returns a
 * distinct error code per class of bad input.
 *
 * Ownership: every pointer inside a message struct is borrowed. For em_proto_encode() the
 * caller's storage must live for the call only. For em_proto_decode() all pointers in the
 * decoded message point into the caller's scratch buffer, so the message is valid as long as
 * that buffer is; nothing points into the input bytes.
 *
 * Threading: no global state; every function is reentrant.
 *
 * The header compiles on its own, as C11 and as C++.
 */
#ifndef EDGEMON_PROTO_H
#define EDGEMON_PROTO_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define EM_PROTO_MUST_USE __attribute__((warn_unused_result))
#else
#define EM_PROTO_MUST_USE
#endif

/* Schema version written by the encoder and the only one the decoder accepts. */
#define EM_PROTO_VERSION 1

/* Limits of v1 (the CDDL states the same numbers). */
#define EM_PROTO_MAX_MESSAGE_BYTES 65536u /* Largest encoded message. */
#define EM_PROTO_MAX_DEPTH         8u     /* Nesting, the top-level map being 1. */
#define EM_PROTO_MAX_METRICS       1024u  /* Values in a data message, defs in a birth. */
#define EM_PROTO_MAX_STAGES        64u    /* Stage windows in a data message. */
#define EM_PROTO_MAX_BUCKETS       2048u  /* Non-empty histogram buckets per stage window. */
#define EM_PROTO_MAX_BUDGETS       256u   /* Budget rules in a birth. */
#define EM_PROTO_MAX_ALIAS         65535u /* Largest metric alias. */
#define EM_PROTO_MAX_STAGE_BYTES   31u    /* Stage name, as in the span datagram. */
#define EM_PROTO_MAX_NAME_BYTES    63u    /* Device id, board, version, metric name, rule id. */
#define EM_PROTO_MAX_UNIT_BYTES    15u    /* Metric unit. */
#define EM_PROTO_MAX_TEXT_BYTES    255u   /* Free text: reasons. */
#define EM_PROTO_MAX_MODEL_VERSION 31u    /* Model version. */
#define EM_PROTO_MAX_MODEL_LABELS  8u     /* Labels of a model identity. */
#define EM_PROTO_MAX_LABEL_KEY     15u    /* Label key: [A-Za-z_][A-Za-z0-9_]*, not "__"... */
#define EM_PROTO_MAX_LABEL_VALUE   31u    /* Label value: printable ASCII. */
#define EM_PROTO_MAX_PROFILE_SECS  60u    /* Longest window a cmd/profile may ask for, s. */
#define EM_PROTO_MIN_SCALE         (-10)  /* Exponential histogram scale range (OpenTelemetry). */
#define EM_PROTO_MAX_SCALE         20

/* Largest payload on any topic: a flight recording or a stack profile at its cap
 * (EM_FLIGHT_MAX_BYTES, EM_PROFILE_MAX_BYTES; names.c checks it is their maximum). */
#define EM_PROTO_MAX_PAYLOAD_BYTES 262144u
/* What an MQTT PUBLISH carries beside its payload, at most, for an edgemon topic: fixed header
 * (5), topic (2 + 11 + 63 + 12), packet id (2), MQTT v5 properties (what a broker adds); a
 * broker's packet limit and a client's maximum packet size allow this on top of a payload. */
#define EM_PROTO_MQTT_OVERHEAD_BYTES 1024u

/*
 * Error codes. 0 is success; every failure is negative and distinct from -errno values (they
 * start at -1000), so callers can pass either kind to em_proto_strerror().
 */
#define EM_PROTO_ERRORS(X)                                                                         \
  X(EM_PROTO_ETRUNCATED, -1001, "message truncated")                                               \
  X(EM_PROTO_EMALFORMED, -1002, "malformed CBOR")                                                  \
  X(EM_PROTO_ETOOBIG, -1003, "message larger than the schema allows")                              \
  X(EM_PROTO_EDEPTH, -1004, "items nested too deep")                                               \
  X(EM_PROTO_EINDEFINITE, -1005, "indefinite-length item (v1 uses definite lengths only)")         \
  X(EM_PROTO_ETRAILING, -1006, "trailing bytes after the message")                                 \
  X(EM_PROTO_ETYPE, -1007, "wrong CBOR type for a field")                                          \
  X(EM_PROTO_EKEY, -1008, "map key is not an unsigned integer")                                    \
  X(EM_PROTO_EDUPLICATE, -1009, "duplicate map key")                                               \
  X(EM_PROTO_EMISSING, -1010, "required key missing")                                              \
  X(EM_PROTO_ERANGE, -1011, "value out of range")                                                  \
  X(EM_PROTO_ESTRING, -1012, "string too long, empty or not printable")                            \
  X(EM_PROTO_ELIMIT, -1013, "too many items")                                                      \
  X(EM_PROTO_EINCONSISTENT, -1014, "fields contradict each other")                                 \
  X(EM_PROTO_EVERSION, -1015, "unsupported schema version")                                        \
  X(EM_PROTO_EKIND, -1016, "unknown message kind")                                                 \
  X(EM_PROTO_ENOSPACE, -1017, "output buffer too small")                                           \
  X(EM_PROTO_ESCRATCH, -1018, "decode scratch buffer too small")                                   \
  X(EM_PROTO_EINVAL, -1019, "invalid argument")                                                    \
  X(EM_PROTO_ESIZE, -1020, "datagram or page of the wrong size")                                   \
  X(EM_PROTO_EMAGIC, -1021, "bad magic bytes")                                                     \
  X(EM_PROTO_EBUSY, -1022, "state page is being written; read again")

enum em_proto_error {
#define EM_PROTO_X_ENUM(name, value, text) name = (value),
  EM_PROTO_ERRORS(EM_PROTO_X_ENUM)
#undef EM_PROTO_X_ENUM
};

/* Message kinds: the value of key 1 in every message. */
typedef enum {
  EM_MSG_BIRTH = 0,
  EM_MSG_DATA = 1,
  EM_MSG_STATE = 2,
  EM_MSG_STATUS = 3,
  EM_MSG_CMD = 4,
  EM_MSG_FLIGHT = 5,  /* A flight recording: edgemon/flight.h (em_proto_decode refuses it with
                         EM_PROTO_EKIND; em_flight_decode reads it). */
  EM_MSG_PROFILE = 6, /* A stack profile: edgemon/profile.h (em_proto_decode refuses it with
                         EM_PROTO_EKIND; em_profile_decode reads it). */
} em_msg_kind_t;

/* Degradation levels, ordered by severity. */
typedef enum {
  EM_LEVEL_NONE = -1, /* Not carried (data messages may omit the level). */
  EM_LEVEL_NOMINAL = 0,
  EM_LEVEL_WARN = 1,
  EM_LEVEL_DEGRADED = 2,
  EM_LEVEL_CRITICAL = 3,
} em_level_t;

/* How a metric's values add up over time. */
typedef enum {
  EM_METRIC_GAUGE = 0,   /* A reading at the end of the window. */
  EM_METRIC_COUNTER = 1, /* A running total since the agent attached to the target. */
  EM_METRIC_DELTA = 2,   /* The amount within the window the message covers. */
} em_metric_kind_t;

/* Commands a host sends on edgemon/v1/<device>/cmd/<name>. */
typedef enum {
  EM_CMD_REBIRTH = 1, /* Republish the birth certificate. */
  EM_CMD_FLIGHT = 2,  /* Take a flight recording now (edgemon/flight.h). */
  EM_CMD_PROFILE = 3, /* Sample the target's stacks now (edgemon/profile.h). */
} em_cmd_code_t;

/* A number as the schema carries it, or its explicit absence (CBOR null). */
typedef enum {
  EM_VALUE_ABSENT = 0, /* The device cannot provide this figure: never the same as 0. */
  EM_VALUE_UINT = 1,
  EM_VALUE_INT = 2, /* Negative integers decode here; the encoder accepts any sign. */
  EM_VALUE_FLOAT = 3,
} em_value_type_t;

typedef struct {
  em_value_type_t type;
  union {
    uint64_t u;
    int64_t i;
    double f; /* Finite; NaN and infinities are out of range. */
  } as;
} em_value_t;

/* The number `v` holds as a double (an integer above 2^53 rounds), or NaN when it is absent. */
static inline double em_value_double(const em_value_t *v) {
  switch (v->type) {
  case EM_VALUE_UINT:
    return (double)v->as.u;
  case EM_VALUE_INT:
    return (double)v->as.i;
  case EM_VALUE_FLOAT:
    return v->as.f;
  default:
    return NAN;
  }
}

/* One label of a model identity. */
typedef struct {
  const char *key;   /* 1..EM_PROTO_MAX_LABEL_KEY bytes of [A-Za-z0-9_], not starting with a
                        digit nor with "__" (it becomes a Prometheus label name). */
  const char *value; /* 1..EM_PROTO_MAX_LABEL_VALUE bytes of printable ASCII. */
} em_label_t;

/*
 * Which model the inference process runs, as it named it through its client (birth key 11,
 * data key 10, state key 13; a state with model_change set announces a change of model). name
 * == NULL: none named yet (the key is absent), and the other fields are ignored.
 */
typedef struct {
  const char *name;         /* 1..EM_PROTO_MAX_NAME_BYTES bytes of printable ASCII. */
  const char *version;      /* 1..EM_PROTO_MAX_MODEL_VERSION bytes of printable ASCII. */
  const em_label_t *labels; /* Ascending key (strcmp), unique; decoded labels come sorted. */
  size_t n_labels;          /* 0..EM_PROTO_MAX_MODEL_LABELS */
} em_model_t;

/*
 * 0 when `m` is a model identity the schema accepts (or none: name NULL); else
 * EM_PROTO_ESTRING (a name, version, key or value out of its class or length),
 * EM_PROTO_ELIMIT (too many labels), EM_PROTO_EDUPLICATE (a key twice), EM_PROTO_EINVAL (keys
 * not ascending, or labels NULL with a count). The encoder refuses exactly these.
 */
int em_proto_model_check(const em_model_t *m);

/* True when a and b name the same identity (both none, or equal name, version and labels). */
bool em_proto_model_equal(const em_model_t *a, const em_model_t *b);

/* Limits of a verdict (the CDDL states the same numbers). */
#define EM_PROTO_VERDICT_MAX_CAUSES    8u  /* Causes of one verdict. */
#define EM_PROTO_VERDICT_MAX_EVIDENCE  16u /* Figures of one cause's evidence. */
#define EM_PROTO_VERDICT_MAX_PROCESSES 8u  /* Other processes named by one cause. */
#define EM_PROTO_VERDICT_MAX_FUNCTIONS 8u  /* Functions named by one cause. */

/* Why a stage got slow: the causes a verdict names (a reader keeps codes it does not know and
 * names them "unknown"). */
typedef enum {
  EM_PROTO_CAUSE_CPU_CONTENTION = 0,  /* Other tasks held the CPUs: run-queue delay. */
  EM_PROTO_CAUSE_CPU_THROTTLING = 1,  /* The cgroup's CPU quota ran out. */
  EM_PROTO_CAUSE_FREQUENCY_CAP = 2,   /* The cores ran slower (thermal or power cap). */
  EM_PROTO_CAUSE_MEMORY_PRESSURE = 3, /* Reclaim, major faults, swapping. */
  EM_PROTO_CAUSE_IO = 4,              /* Waiting on storage or the network. */
  EM_PROTO_CAUSE_WAITING = 5,         /* Off CPU for other reasons (locks, sleeps, peers). */
  EM_PROTO_CAUSE_MORE_WORK = 6,       /* The stage itself did more: CPU per frame grew. */
  EM_PROTO_CAUSE_UNEXPLAINED = 7,     /* The part of the excess no measured cause explains. */
} em_proto_verdict_code_t;

/* One figure of a cause's evidence, e.g. "runq_delay_ms_per_frame": 28.4. */
typedef struct {
  const char *name; /* 1..EM_PROTO_MAX_NAME_BYTES bytes of printable ASCII, unique in the cause. */
  em_value_t value; /* A finite number, never absent. */
} em_proto_evidence_t;

/* Another process that ran while the stage waited (cpu_contention). */
typedef struct {
  uint32_t pid;
  const char *comm; /* Its command name: text, 1..EM_PROTO_MAX_TEXT_BYTES bytes. */
  double share;     /* Its share of the contended CPU time, 0..1. */
} em_proto_verdict_process_t;

/* A function whose share of the stage's samples grew (more_work). */
typedef struct {
  const char *name; /* Text, 1..EM_PROTO_MAX_TEXT_BYTES bytes. */
  double growth;    /* Growth of its share, in points (6.0: from 10% to 16%); finite. */
} em_proto_verdict_function_t;

/* One cause of a verdict and the evidence behind it. */
typedef struct {
  uint32_t code; /* em_proto_verdict_code_t; decoded codes past the known ones are kept as read. */
  double share;  /* Share of the excess latency it explains, 0..1. */
  em_proto_evidence_t evidence[EM_PROTO_VERDICT_MAX_EVIDENCE];
  size_t n_evidence;
  em_proto_verdict_process_t processes[EM_PROTO_VERDICT_MAX_PROCESSES]; /* Key absent when 0. */
  size_t n_processes;
  em_proto_verdict_function_t functions[EM_PROTO_VERDICT_MAX_FUNCTIONS]; /* Key absent when 0. */
  size_t n_functions;
} em_proto_verdict_cause_t;

/*
 * The breach's verdict (state key 15, flight key 16): which stage got slow by which statistic,
 * against the NOMINAL windows before the breach, and the causes of the excess in descending
 * share. Fixed arrays: the agent fills one in place; a decoder puts one in its scratch.
 */
typedef struct {
  const char *stage;        /* The stage whose latency is explained: a stage-name. */
  const char *statistic;    /* The statistic compared: "p50", "p90", "p99", "p999", "max",
                               "mean" (printable ASCII, 1..EM_PROTO_MAX_NAME_BYTES bytes). */
  uint64_t baseline_ns;     /* Its value over the NOMINAL windows before the breach. */
  uint64_t breach_ns;       /* Its value in the breach window. */
  uint32_t nominal_windows; /* NOMINAL windows compared; 0: no baseline (the causes say so). */
  /* Descending share; none: nothing measured. */
  em_proto_verdict_cause_t causes[EM_PROTO_VERDICT_MAX_CAUSES];
  size_t n_causes;
} em_proto_verdict_t;

/*
 * 0 when `v` is a verdict the decoder accepts; else EM_PROTO_ESTRING (the stage, statistic, an
 * evidence name, a comm or a function name out of its class or length), EM_PROTO_ELIMIT (past an
 * EM_PROTO_VERDICT_MAX_* count), EM_PROTO_ERANGE (a share outside 0..1, a number not finite),
 * EM_PROTO_ETYPE (an absent evidence value), EM_PROTO_EDUPLICATE (an evidence name twice),
 * EM_PROTO_EINCONSISTENT (causes not in descending share). The encoders refuse exactly these.
 */
int em_proto_verdict_check(const em_proto_verdict_t *v);

/* "cpu_contention", "cpu_throttling", "frequency_cap", "memory_pressure", "io", "waiting",
 * "more_work", "unexplained", or "unknown". */
const char *em_proto_verdict_cause_name(uint32_t code);

/* One entry of the birth's metric dictionary. */
typedef struct {
  uint32_t alias;   /* Small integer used in data messages, <= EM_PROTO_MAX_ALIAS. */
  const char *name; /* Dotted name, e.g. "pmu.cycles". */
  const char *unit; /* UCUM-style unit, e.g. "By", "ns", "1". */
  em_metric_kind_t kind;
  const char *absent_reason; /* NULL when available; else why every value will be absent. */
} em_metric_def_t;

/* One budget rule as announced in the birth. */
typedef struct {
  const char *id;     /* Rule id, unique on the device, e.g. "infer.p99". */
  const char *rule;   /* Rule type, e.g. "percentile", "deadline", "alive", "rss_cap". */
  em_level_t level;   /* Level the rule raises: WARN, DEGRADED or CRITICAL. */
  em_value_t bound;   /* The limit, in the unit the rule type defines. */
  const char *stage;  /* Stage the rule watches, or NULL for process rules. */
  uint64_t window_ns; /* Window the rule evaluates over, 0 for none. */
} em_budget_t;

/*
 * What every message carries beside its kind: keys 2 and 3 of the top-level map, encoded,
 * decoded and printed as JSON from one description (schema.h). Each message struct begins with
 * it as `head`.
 */
typedef struct {
  uint64_t time_ns; /* CLOCK_REALTIME, ns since the epoch; each kind says of what. */
  uint32_t session; /* Agent session: changes at every agent start. A cmd carries none (0). */
} em_msg_head_t;

/* The flight recorder's fixed memory as the birth announces it (key 10); on false: it is off
 * and the key is absent. */
typedef struct {
  bool on;
  uint64_t pre_ns;  /* Kept before a trigger. */
  uint64_t post_ns; /* Recorded after it. */
  uint64_t ticks;   /* Ticks the ring holds. */
  uint64_t spans;   /* Spans the ring holds. */
  uint64_t bytes;   /* Bytes the recorder holds: rings and encode buffer. */
} em_flight_recorder_t;

/* The stack profiler's settings as the birth announces them (key 12); on false: it is off and
 * the key is absent. */
typedef struct {
  bool on;
  uint64_t hz;              /* Sampling frequency asked of the kernel. */
  uint64_t seconds;         /* Window length when the trigger names none, s. */
  uint64_t max_seconds;     /* Longest window a cmd/profile may ask for, s. */
  uint64_t min_gap_seconds; /* Least time between the starts of two windows, s. */
} em_profiler_t;

typedef struct {
  em_msg_head_t head; /* time_ns: when the agent made the birth. */
  const char *device;
  const char *agent_version;
  const char *board;
  uint64_t period_ns; /* Sample period. */
  const em_metric_def_t *metrics;
  size_t n_metrics;
  const em_budget_t *budgets;
  size_t n_budgets;
  em_flight_recorder_t flight;
  em_model_t model; /* The target's model when the birth was made; name NULL: none yet. */
  em_profiler_t profiler;
} em_birth_t;

/* A value of one metric in a data message. */
typedef struct {
  uint32_t alias;
  em_value_t value;
} em_sample_t;

/*
 * One non-empty bucket of a base-2 exponential histogram (OpenTelemetry's layout): with
 * base = 2^(2^-scale), bucket `index` counts values v with base^index < v <= base^(index+1).
 */
typedef struct {
  int32_t index;
  uint64_t count; /* >= 1 */
} em_bucket_t;

/* Latency of one stage over the window a data message covers. */
typedef struct {
  const char *name;
  uint64_t count; /* Spans in the window. The fields below are meaningful only when > 0. */
  uint64_t sum_ns;
  uint64_t min_ns;
  uint64_t max_ns;
  uint64_t p50_ns; /* Percentiles, min <= p50 <= p90 <= p99 <= p999 <= max. */
  uint64_t p90_ns;
  uint64_t p99_ns;
  uint64_t p999_ns;
  int32_t scale;              /* EM_PROTO_MIN_SCALE..EM_PROTO_MAX_SCALE */
  uint64_t zero_count;        /* Spans of 0 ns. */
  const em_bucket_t *buckets; /* Ascending index; zero_count + sum of counts == count. */
  size_t n_buckets;
} em_stage_t;

typedef struct {
  em_msg_head_t head; /* time_ns: end of the window; session: of the birth whose aliases it uses. */
  uint32_t seq;       /* Per session, +1 per data message, wraps from 2^32-1 to 0. */
  uint64_t window_ns; /* Length of the window the message covers. */
  em_level_t level;   /* Level at the end of the window, or EM_LEVEL_NONE. */
  bool historical;    /* Replayed from the spool, not live. */
  const em_sample_t *samples; /* Ascending alias, no duplicates. */
  size_t n_samples;
  const em_stage_t *stages;
  size_t n_stages;
  em_model_t model; /* The target's model at the end of the window; name NULL: none named. */
} em_data_t;

typedef struct {
  em_msg_head_t head; /* time_ns: of the change. */
  em_level_t level;
  em_level_t prev_level;
  uint64_t mono_ns;   /* CLOCK_MONOTONIC of the change, on the device. */
  const char *rule;   /* Rule id that caused it, or NULL (e.g. recovery, start). */
  const char *stage;  /* Stage involved, or NULL. */
  em_value_t value;   /* Measured value, or absent. */
  em_value_t bound;   /* The rule's bound, or absent. */
  const char *reason; /* Human-readable, or NULL. */
  bool historical;    /* Replayed from the spool after the broker was away, not live. */
  em_model_t model;   /* The target's model at the change; name NULL: none named. */
  bool model_change;  /* Not a level change but a change of model: level == prev_level and
                         model named (key 14). False for a level change and for the level
                         announced at agent start (level == prev_level too). */
  const em_proto_verdict_t *verdict; /* Why the stage got slow (key 15), or NULL: none. Borrowed. */
} em_state_t;

typedef struct {
  em_msg_head_t head; /* time_ns: when the agent made it; for the Last Will, the connect time. */
  bool online;
} em_status_t;

typedef struct {
  em_msg_head_t head; /* time_ns: when the host sent it; no session on the wire. */
  em_cmd_code_t command;
  uint32_t seconds; /* EM_CMD_PROFILE: the window asked for, 1..EM_PROTO_MAX_PROFILE_SECS;
                       0: the agent's configured default (key 5 absent). Other commands: 0. */
} em_cmd_t;

typedef struct {
  em_msg_kind_t kind;
  union {
    em_birth_t birth;
    em_data_t data;
    em_state_t state;
    em_status_t status;
    em_cmd_t cmd;
  } u;
} em_msg_t;

/*
 * Encodes `msg` as one CBOR v1 message into buf[0..cap).
 *
 * Returns 0 and sets *out_len to the bytes written. When cap is too small, returns
 * EM_PROTO_ENOSPACE and sets *out_len to the size needed (buf may hold a partial message).
 * Returns EM_PROTO_EINVAL for NULL arguments or an unknown kind, and the decoder's codes
 * (ERANGE, ESTRING, ELIMIT, EINCONSISTENT) for a message the decoder would refuse, so
 * nothing the encoder writes fails to decode. Never allocates.
 */
EM_PROTO_MUST_USE int em_proto_encode(const em_msg_t *msg, uint8_t *buf, size_t cap,
                                      size_t *out_len);

/*
 * The historical form of a live data or state message, without encoding it again: `live`
 * must be what em_proto_encode() wrote for a data or state message whose `historical` is
 * false. The historical key is the last entry of those maps, so the result is `live` with the
 * map's entry count raised by one and `historical: true` appended (2 bytes more); equal to
 * em_proto_encode() of the same message with `historical` set.
 *
 * Returns 0 and sets *out_len; EM_PROTO_ENOSPACE (and *out_len, the size needed) when cap is
 * too small; EM_PROTO_EKIND for another kind; EM_PROTO_EMALFORMED when the bytes do not start
 * as the encoder writes (a map of 4..22 entries, version, kind): then encode it again.
 */
EM_PROTO_MUST_USE int em_proto_mark_historical(const uint8_t *live, size_t len, uint8_t *out,
                                               size_t cap, size_t *out_len);

/*
 * Scratch bytes that em_proto_decode() needs at most for an input of `len` bytes. Decoding
 * with this much scratch never fails with EM_PROTO_ESCRATCH. The bound is 20 bytes per input
 * byte (the worst case is an idle stage window, 6 bytes on the wire and 112 decoded) and one
 * em_proto_verdict_t (a state carries at most one).
 */
size_t em_proto_scratch_bytes(size_t len);

/* em_proto_scratch_bytes() of the largest message: enough for any input. */
#define EM_PROTO_SCRATCH_MAX (20u * EM_PROTO_MAX_MESSAGE_BYTES + 256u + sizeof(em_proto_verdict_t))

/*
 * Decodes and validates one message occupying exactly buf[0..len).
 *
 * scratch: caller storage for the decoded arrays and strings (see em_proto_scratch_bytes());
 * `out` points into it on success. error_offset (may be NULL): on failure, the byte offset
 * of the item where the error was found. Returns 0 or one EM_PROTO_E* code. Reads nothing
 * outside buf, never allocates, and runs in time linear in len.
 */
EM_PROTO_MUST_USE int em_proto_decode(const uint8_t *buf, size_t len, em_msg_t *out, void *scratch,
                                      size_t scratch_len, size_t *error_offset);

/*
 * Writes `msg` as one line of JSON (no newline) with field names, into buf[0..cap), always
 * NUL-terminated when cap > 0. Returns 0 and sets *out_len to the length without the NUL, or
 * EM_PROTO_ENOSPACE with *out_len set to the length needed.
 */
EM_PROTO_MUST_USE int em_proto_to_json(const em_msg_t *msg, char *buf, size_t cap, size_t *out_len);

/*
 * Names a metric alias for em_proto_to_json_named(): returns the metric's name (borrowed until
 * the call returns), or NULL to print the alias number.
 */
typedef const char *(*em_proto_alias_name_fn)(void *ctx, uint32_t alias);

/*
 * em_proto_to_json() with a data message's values keyed by metric name where name_of knows
 * the alias (a host that holds the device's birth). name_of may be NULL. Same returns.
 */
EM_PROTO_MUST_USE int em_proto_to_json_named(const em_msg_t *msg, em_proto_alias_name_fn name_of,
                                             void *ctx, char *buf, size_t cap, size_t *out_len);

/*
 * Bytes of the character at s[0..left) when it is one a text field allows (the CDDL's text
 * rules: a minimal UTF-8 encoding of a scalar value that is not a control character, C0, DEL
 * or C1), else 0. What validates text fields, and what writers that must make text out of
 * foreign bytes (symbol and file names) test each character with.
 */
size_t em_text_char(const char *s, size_t left);

/* Text for an EM_PROTO_E* code or a negative errno. Never NULL. */
const char *em_proto_strerror(int rc);

/* "NOMINAL", "WARN", "DEGRADED", "CRITICAL", or "NONE" for anything else. */
const char *em_level_name(em_level_t level);

/* "birth", "data", "state", "status", "cmd", "flight", "profile", or "unknown". */
const char *em_msg_kind_name(em_msg_kind_t kind);

/* "rebirth", "flight", "profile" (the <name> of cmd/<name>), or "unknown". */
const char *em_cmd_name(em_cmd_code_t command);

/*
 * One topic of a device, edgemon/v1/<device>/<suffix>: every kind but cmd is published by the
 * agent on the topic of its name; every command is published by a host on cmd/<its name>,
 * where the agent subscribes. The broker's ACL (firmware/mosquitto/edgemon.acl) must let each
 * through; tests walk this table, so a new kind or command is checked there as it is added.
 */
typedef struct {
  char suffix[16];       /* "birth", ..., "profile", "cmd/rebirth", ... */
  em_msg_kind_t kind;    /* The kind of the messages on the topic. */
  em_cmd_code_t command; /* EM_MSG_CMD rows: the command; else 0. */
  bool from_host;        /* A command to the agent; false: the agent publishes it. */
} em_topic_t;

/* Rows of em_proto_topic(): every kind but cmd, then every command. */
#define EM_PROTO_TOPICS ((size_t)EM_MSG_PROFILE + (size_t)EM_CMD_PROFILE)

/* Row i (0..EM_PROTO_TOPICS-1) of the device's topics into *out. Returns 0, or EM_PROTO_EINVAL
 * past the last row or for NULL. */
EM_PROTO_MUST_USE int em_proto_topic(size_t i, em_topic_t *out);

#ifdef __cplusplus
}
#endif

#endif /* EDGEMON_PROTO_H */
