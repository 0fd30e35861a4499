/*
 * edgemon/flight.h - the flight recording (message kind 5, topic edgemon/v1/<device>/flight):
 * what the board was doing in the seconds around a breach, tick by tick and span by span.
 *
 * The agent keeps the last seconds of ticks and spans in a fixed ring (firmware/agent/record/)
 * and, on an escalation or a cmd/flight, publishes them once as this message: the pre-trigger
 * seconds plus a post-trigger window. It stands on its own: it names its stages and its tick
 * columns (name, unit, kind), so a reader needs no birth to show it. proto/edgemon.cddl is the
 * schema; this header is its C face, with the encoder, a strict decoder, and JSON.
 *
 * On the wire everything that grows is delta-encoded (the CDDL says how): tick times and span
 * starts from the previous item, frame ids from the previous span, counter columns from the
 * previous tick that carried a number for them (a null carries none). In the structs below
 * every figure is absolute (the decoder adds the deltas back): times are the device's
 * CLOCK_MONOTONIC, counters running totals.
 *
 * Size: a recording is at most EM_FLIGHT_MAX_BYTES encoded (larger than the other kinds'
 * EM_PROTO_MAX_MESSAGE_BYTES). em_flight_encode_fit() leaves out the spans and ticks farthest
 * from the trigger until it fits a cap, and the message states what it left out.
 *
 * Ownership, threading and error codes are those of proto.h: pointers are borrowed, decoded
 * pointers point into the caller's scratch, nothing allocates, every function is reentrant.
 */
#ifndef EDGEMON_FLIGHT_H
#define EDGEMON_FLIGHT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "edgemon/proto.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Limits of a flight recording (the CDDL states the same numbers). */
#define EM_FLIGHT_MAX_BYTES   262144u /* Largest encoded recording. */
#define EM_FLIGHT_MAX_STAGES  64u     /* Stage names the spans index. */
#define EM_FLIGHT_MAX_COLUMNS 256u    /* Tick columns. */
#define EM_FLIGHT_MAX_TICKS   4096u   /* Ticks in a recording. */
#define EM_FLIGHT_MAX_SPANS   65536u  /* Spans in a recording. */

/* What started a recording. */
typedef enum {
  EM_FLIGHT_ESCALATION = 0, /* The level rose (a state message with the same rule and level). */
  EM_FLIGHT_COMMAND = 1,    /* cmd/flight from the host. */
} em_flight_cause_t;

typedef struct {
  em_flight_cause_t cause;
  em_level_t level;      /* Escalation: the new level. Command: the level then. */
  em_level_t prev_level; /* Escalation: the level before; command: EM_LEVEL_NONE (absent). */
  const char *rule;      /* Rule id behind the escalation, or NULL. */
  const char *stage;     /* Stage the rule watches, or NULL. */
  em_value_t value;      /* Measured value, or absent. */
  em_value_t bound;      /* The rule's bound, or absent. */
  const char *reason;    /* Human-readable, or NULL. */
} em_flight_trigger_t;

/* One tick column: a figure of the agent's dictionary, named so the recording stands alone. */
typedef struct {
  const char *name; /* As in the birth, e.g. "pmu.context-switches", "mem.rss". */
  const char *unit;
  em_metric_kind_t kind; /* COUNTER columns carry unsigned running totals (deltas on the wire). */
} em_flight_column_t;

/* One figure of a tick. value ABSENT is null on the wire: the device cannot provide it then. */
typedef struct {
  uint32_t column; /* Index into em_flight_t.columns. */
  em_value_t value;
} em_flight_value_t;

/*
 * One tick of the agent: the figures it read at mono_ns (the end of the tick's window). A
 * column missing from a tick was not read on that tick (slower cadences: PSI, smaps, sensors).
 */
typedef struct {
  uint64_t mono_ns;
  const em_flight_value_t *values; /* Ascending column, no duplicates. */
  size_t n_values;
} em_flight_tick_t;

/* One span as the agent drained it. */
typedef struct {
  uint32_t stage; /* Index into em_flight_t.stages. */
  uint64_t frame_id;
  uint64_t start_ns; /* CLOCK_MONOTONIC at the stage's start, on the device. */
  uint64_t duration_ns;
} em_flight_span_t;

/* What a recording does not hold of its window, and why. All 0: nothing left out. */
typedef struct {
  uint64_t spans_cut;         /* Spans left out to fit the size cap (farthest from trigger). */
  uint64_t ticks_cut;         /* Ticks left out to fit the size cap (farthest from trigger). */
  uint64_t spans_overwritten; /* Spans of the window the agent's ring overwrote before the
                                 recording was taken (more spans than the ring holds). */
} em_flight_truncation_t;

typedef struct {
  em_msg_head_t head; /* time_ns: CLOCK_REALTIME of the trigger. */
  uint32_t number;    /* Recording number within the session, from 0. */
  em_flight_trigger_t trigger;
  uint64_t trigger_mono_ns;  /* CLOCK_MONOTONIC of the trigger, on the device. */
  uint64_t pre_ns;           /* Configured seconds before the trigger, ns. */
  uint64_t post_ns;          /* Configured seconds after the trigger, ns. */
  uint64_t period_ns;        /* The agent's tick period. */
  const char *const *stages; /* Stage names, valid stage-names, unique. */
  size_t n_stages;
  const em_flight_column_t *columns;
  size_t n_columns;
  const em_flight_tick_t *ticks; /* Ascending mono_ns. */
  size_t n_ticks;
  const em_flight_span_t *spans; /* Ascending start_ns. */
  size_t n_spans;
  em_flight_truncation_t truncated;
  bool historical;                   /* Replayed from the spool, not live. */
  const em_proto_verdict_t *verdict; /* Why the stage got slow (key 16), or NULL: none. Borrowed. */
} em_flight_t;

/*
 * Encodes `f` into buf[0..cap). Returns 0 and *out_len; EM_PROTO_ENOSPACE with *out_len the
 * size needed when cap is too small; EM_PROTO_ETOOBIG when the encoding would pass
 * EM_FLIGHT_MAX_BYTES; EM_PROTO_EINVAL for NULL arguments; and the decoder's codes for a
 * recording the decoder would refuse (ticks or spans out of order, a counter column with a
 * non-integer value, an index past its table, a bad name). Never allocates.
 */
EM_PROTO_MUST_USE int em_flight_encode(const em_flight_t *f, uint8_t *buf, size_t cap,
                                       size_t *out_len);

/*
 * em_flight_encode() under a size cap (<= EM_FLIGHT_MAX_BYTES): while the encoding does not
 * fit in cap, leaves out the span or tick farthest in time from the trigger (on equal
 * distances spans before ticks, and after the trigger before before it), narrowing
 * f->spans/n_spans and f->ticks/n_ticks and counting each in f->truncated. Returns 0 and
 * *out_len, or the codes of em_flight_encode() (ENOSPACE, with *out_len the size of the
 * recording with no ticks and no spans, only when even that does not fit; f is then left as
 * it was). A cap above EM_FLIGHT_MAX_BYTES counts as EM_FLIGHT_MAX_BYTES. Item sizes are
 * computed, not encoded again per item: linear in the ticks' figures and the spans.
 */
EM_PROTO_MUST_USE int em_flight_encode_fit(em_flight_t *f, uint8_t *buf, size_t cap,
                                           size_t *out_len);

/*
 * The historical form of an encoded live recording (historical false): as
 * em_proto_mark_historical() does for data and state, the map gains `historical: true` as its
 * last entry. Returns 0 and *out_len, EM_PROTO_ENOSPACE, or EM_PROTO_EMALFORMED when the bytes
 * do not start as em_flight_encode() writes them.
 */
EM_PROTO_MUST_USE int em_flight_mark_historical(const uint8_t *live, size_t len, uint8_t *out,
                                                size_t cap, size_t *out_len);

/*
 * Scratch bytes em_flight_decode() needs at most for an input of `len` bytes: 12 per byte, 256
 * and one em_proto_verdict_t (the worst case is a tick's figure, 2 bytes on the wire and a 24-byte
 * em_flight_value_t).
 */
size_t em_flight_scratch_bytes(size_t len);

/* em_flight_scratch_bytes() of the largest recording: enough for any input. */
#define EM_FLIGHT_SCRATCH_MAX (12u * EM_FLIGHT_MAX_BYTES + 256u + sizeof(em_proto_verdict_t))

/*
 * Decodes and validates one recording occupying exactly buf[0..len), with the rules of
 * proto.h's decoder (definite lengths, unknown keys skipped, duplicate keys refused, finite
 * floats) and the flight's own: kind 5, indices within their tables, times ascending, totals
 * within uint64. Pointers in *out point into scratch. Returns 0 or an EM_PROTO_E* code, with
 * *error_offset (may be NULL) the byte offset of the item at fault. Linear in len.
 */
EM_PROTO_MUST_USE int em_flight_decode(const uint8_t *buf, size_t len, em_flight_t *out,
                                       void *scratch, size_t scratch_len, size_t *error_offset);

/*
 * One line of JSON (no newline), NUL-terminated when cap > 0: the header fields, the trigger,
 * "stages", "columns", "ticks" ({"mono_ns", "t_ns" (signed, from the trigger), "values":
 * {column name: value or null}}, counters given as the increase since the previous tick that
 * carried them, the first as the total) and "spans" ({"stage" (name), "frame", "start_ns",
 * "t_ns", "duration_ns"}), then "truncated" and "verdict" when present. Returns 0 and *out_len
 * (without the NUL), or EM_PROTO_ENOSPACE with *out_len the length needed.
 */
EM_PROTO_MUST_USE int em_flight_to_json(const em_flight_t *f, char *buf, size_t cap,
                                        size_t *out_len);

/* "escalation", "command", or "unknown". */
const char *em_flight_cause_name(em_flight_cause_t cause);

#ifdef __cplusplus
}
#endif

#endif /* EDGEMON_FLIGHT_H */
