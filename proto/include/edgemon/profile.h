/*
 * edgemon/profile.h - the stack profile (message kind 6, topic edgemon/v1/<device>/profile):
 * where the inference process spent its time in a bounded sampling window around a breach,
 * as folded stacks with sample counts (Brendan Gregg's folded format, with a frame table).
 *
 * The agent opens a window on an escalation or a cmd/profile (firmware/agent/profile/),
 * samples the target's threads with perf_event_open (cpu-clock or task-clock, call chains,
 * user and kernel frames), resolves native frames to symbols off the tick's critical path,
 * merges the Python frames its client sampled in the same window where it has them, and
 * publishes the window once as this message. It stands on its own: it names its frames and
 * stages, so a reader needs no birth to show it. proto/edgemon.cddl is the schema; this header
 * is its C face, with the encoder, a strict decoder, and JSON.
 *
 * A stack is a path of frame indices, root first (thread entry ... leaf), the samples that hit
 * it, the off-CPU time attributed to it (context-switch records, where available), and the span
 * stage whose span covered the samples (where spans carry their writer's thread). What a
 * profile cannot show is said, not hidden: `notes` names each kind of frame that is missing and
 * why (no Python client sampling, kernel frames refused by perf_event_paranoid, a binary
 * without symbols), and `truncated` counts what the size cap left out.
 *
 * Size: at most EM_PROFILE_MAX_BYTES encoded. em_profile_encode_fit() leaves out the stacks
 * with the fewest samples until it fits, and the message states how many and how many samples
 * they held.
 *
 * Ownership, threading and error codes are those of proto.h: pointers are borrowed, decoded
 * pointers point into the caller's scratch, nothing allocates, every function is reentrant.
 */
#ifndef EDGEMON_PROFILE_H
#define EDGEMON_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "edgemon/proto.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Limits of a profile (the CDDL states the same numbers). */
#define EM_PROFILE_MAX_BYTES       262144u    /* Largest encoded profile. */
#define EM_PROFILE_MAX_FRAMES      16384u     /* Distinct frames in the frame table. */
#define EM_PROFILE_MAX_STACKS      8192u      /* Distinct stacks. */
#define EM_PROFILE_MAX_DEPTH       256u       /* Frames in one stack. */
#define EM_PROFILE_MAX_STAGES      64u        /* Stage names the stacks index. */
#define EM_PROFILE_MAX_NOTES       16u        /* Notes on what is missing. */
#define EM_PROFILE_MAX_FRAME_BYTES 255u       /* A frame's name or module, UTF-8 text. */
#define EM_PROFILE_NO_STAGE        UINT32_MAX /* em_profile_stack_t.stage: none known. */

/* What opened the window. */
typedef enum {
  EM_PROFILE_ESCALATION = 0, /* The level rose (a state message with the same rule and level). */
  EM_PROFILE_COMMAND = 1,    /* cmd/profile from the host (edgemon-cli profile --device D). */
} em_profile_cause_t;

typedef struct {
  em_profile_cause_t cause;
  em_level_t level;      /* Escalation: the new level. Command: the level then. */
  em_level_t prev_level; /* Escalation: the level before; command: EM_LEVEL_NONE (absent). */
  const char *rule;      /* Rule id behind the escalation, or NULL. */
  const char *stage;     /* Stage the rule watches, or NULL. */
  const char *reason;    /* Human-readable, or NULL. */
} em_profile_trigger_t;

/* Where a frame comes from. */
typedef enum {
  EM_FRAME_NATIVE = 0,  /* User-space machine code, resolved to a symbol or module+offset. */
  EM_FRAME_KERNEL = 1,  /* Kernel code. */
  EM_FRAME_PYTHON = 2,  /* A Python function, from the client's own sampling. */
  EM_FRAME_UNKNOWN = 3, /* An address nothing resolves (name "[unknown]" or a hex address). */
} em_profile_frame_kind_t;

typedef struct {
  const char *name;   /* Symbol ("_PyEval_EvalFrameDefault"), Python "function", or
                         "module+0x1a2b" when unresolved; 1..255 bytes of UTF-8 text. */
  const char *module; /* Binary ("libpython3.11.so.1.0"), source file ("model.py:42"), or NULL. */
  em_profile_frame_kind_t kind;
} em_profile_frame_t;

/* One folded stack: the samples whose call chain was exactly `frames`. */
typedef struct {
  const uint32_t *frames; /* Indices into em_profile_t.frames, root first; 1..MAX_DEPTH. */
  size_t n_frames;
  uint64_t samples;    /* On-CPU samples that hit it (>= 1, or 0 when off_cpu_ns > 0). */
  uint64_t off_cpu_ns; /* Time switched out with this stack (context-switch records), or 0. */
  uint32_t stage;      /* Index into em_profile_t.stages of the stage whose span covered the
                          samples, or EM_PROFILE_NO_STAGE. Stacks equal but for their stage
                          are distinct entries. */
} em_profile_stack_t;

/* What the size cap left out. All 0: nothing. */
typedef struct {
  uint64_t stacks_cut;  /* Stacks left out (the fewest samples first). */
  uint64_t samples_cut; /* Their samples. */
} em_profile_truncation_t;

typedef struct {
  em_msg_head_t head; /* time_ns: CLOCK_REALTIME of the window's start. */
  uint32_t number;    /* Profile number within the session, from 0. */
  em_profile_trigger_t trigger;
  uint64_t start_mono_ns;    /* CLOCK_MONOTONIC of the window's start, on the device. */
  uint64_t duration_ns;      /* How long it sampled (shorter when the target exited). */
  uint32_t hz;               /* Sampling frequency asked of the kernel, 1..1000. */
  const char *clock;         /* The sampling event: "cpu-clock" or "task-clock". */
  uint64_t samples;          /* Samples taken in all (on-CPU), before any cut. */
  uint64_t lost;             /* Samples the kernel's ring buffer lost (PERF_RECORD_LOST). */
  const char *const *stages; /* Stage names, valid stage-names, unique. */
  size_t n_stages;
  const em_profile_frame_t *frames; /* Every frame the stacks index; unique (name, module, kind). */
  size_t n_frames;
  const em_profile_stack_t *stacks; /* Descending samples. */
  size_t n_stacks;
  const char *const *notes; /* What is missing and why, one text each (1..255 bytes). */
  size_t n_notes;
  em_profile_truncation_t truncated;
  bool historical; /* Replayed from the spool, not live. */
} em_profile_t;

/*
 * Encodes `p` into buf[0..cap). Returns 0 and *out_len; EM_PROTO_ENOSPACE with *out_len the size
 * needed when cap is too small; EM_PROTO_ETOOBIG past EM_PROFILE_MAX_BYTES; EM_PROTO_EINVAL for
 * NULL arguments; and the decoder's codes for a profile the decoder would refuse. Never
 * allocates.
 */
EM_PROTO_MUST_USE int em_profile_encode(const em_profile_t *p, uint8_t *buf, size_t cap,
                                        size_t *out_len);

/*
 * em_profile_encode() under a size cap (<= EM_PROFILE_MAX_BYTES): while the encoding does not
 * fit, leaves out the stack with the fewest samples (the last: stacks are in descending
 * samples), narrowing p->n_stacks and counting it in p->truncated. Frames no kept stack uses
 * stay in the table. Returns 0 and *out_len, or the codes of em_profile_encode().
 */
EM_PROTO_MUST_USE int em_profile_encode_fit(em_profile_t *p, uint8_t *buf, size_t cap,
                                            size_t *out_len);

/* The historical form of an encoded live profile, as em_flight_mark_historical() does. */
EM_PROTO_MUST_USE int em_profile_mark_historical(const uint8_t *live, size_t len, uint8_t *out,
                                                 size_t cap, size_t *out_len);

/* Scratch bytes em_profile_decode() needs at most for an input of `len` bytes. */
size_t em_profile_scratch_bytes(size_t len);

/*
 * Decodes and validates one profile occupying exactly buf[0..len) with proto.h's rules and the
 * profile's own: kind 6, indices within their tables, stacks of 1..MAX_DEPTH frames, limits.
 * Pointers in *out point into scratch. Returns 0 or an EM_PROTO_E* code, with *error_offset
 * (may be NULL) the byte offset of the item at fault. Linear in len.
 */
EM_PROTO_MUST_USE int em_profile_decode(const uint8_t *buf, size_t len, em_profile_t *out,
                                        void *scratch, size_t scratch_len, size_t *error_offset);

/*
 * One line of JSON (no newline), NUL-terminated when cap > 0: the header fields, the trigger,
 * "stages", "frames" ({"name", "module", "kind"}), "stacks" ({"frames": [indices],
 * "samples", "off_cpu_ns", "stage": name or null}), "notes", "truncated". Returns 0 and
 * *out_len, or EM_PROTO_ENOSPACE with *out_len the length needed.
 */
EM_PROTO_MUST_USE int em_profile_to_json(const em_profile_t *p, char *buf, size_t cap,
                                         size_t *out_len);

/* "escalation", "command", or "unknown". */
const char *em_profile_cause_name(em_profile_cause_t cause);

/* "native", "kernel", "python", "unknown". */
const char *em_profile_frame_kind_name(em_profile_frame_kind_t kind);

#ifdef __cplusplus
}
#endif

#endif /* EDGEMON_PROFILE_H */
