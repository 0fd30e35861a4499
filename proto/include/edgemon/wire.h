/*
 * edgemon/wire.h - the fixed-size binary records between the inference process and the agent
 * on the same board: span datagram v1, model datagram v2 and Python stacks datagram v2 (client
 * -> agent), level push datagram v1, state page v1 and profile request page v1 (agent ->
 * clients). proto/WIRE.md documents every byte; this header
 * mirrors it.
 *
 * Every multi-byte field is little-endian and is packed and unpacked field by field with
 * explicit byte shifts, never by copying a struct, so the layout is the same on every
 * compiler and a client in any language can be written from WIRE.md alone.
 *
 * Ownership: all buffers are the caller's; nothing allocates. Threading: no global state. The
 * state page functions are a single-writer seqlock: one writer (the agent) and any number of
 * readers in other processes mapping the same file.
 *
 * The header compiles on its own, as C11 and as C++.
 */
#ifndef EDGEMON_WIRE_H
#define EDGEMON_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "edgemon/proto.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EM_WIRE_VERSION 1
#define EM_WIRE_MAGIC0  0x45 /* 'E' */
#define EM_WIRE_MAGIC1  0x4D /* 'M' */

#define EM_SPAN_DGRAM_BYTES   64u  /* Every client -> agent datagram. */
#define EM_STAGE_FIELD_BYTES  32u  /* Stage name field: up to 31 bytes, then NUL padding. */
#define EM_PUSH_DGRAM_BYTES   256u /* Every agent -> client datagram. */
#define EM_STATE_PAGE_BYTES   256u /* The state page file. */
#define EM_STATE_BODY_BYTES   240u /* The state record shared by the page and the push. */
#define EM_RULE_FIELD_BYTES   32u
#define EM_REASON_FIELD_BYTES 136u

/* Datagram kinds (byte 3). 1..15 travel client -> agent, 16.. agent -> client. */
typedef enum {
  EM_DGRAM_SPAN = 1,        /* A stage of a frame took duration_ns from start_ns. */
  EM_DGRAM_HEARTBEAT = 2,   /* The stage is alive (no duration). */
  EM_DGRAM_SUBSCRIBE = 3,   /* Send me level pushes at my source address. */
  EM_DGRAM_UNSUBSCRIBE = 4, /* Stop sending them. */
  EM_DGRAM_LEVEL_PUSH = 16, /* The level changed (agent -> client). */
} em_dgram_kind_t;

/* A decoded client -> agent datagram. */
typedef struct {
  em_dgram_kind_t kind;
  uint32_t pid;         /* As the sender claims; the agent trusts SCM_CREDENTIALS instead. */
  uint64_t frame_id;    /* Frame the span belongs to; 0 when the client has none. */
  uint64_t start_ns;    /* CLOCK_MONOTONIC at the start of the stage. */
  uint64_t duration_ns; /* 0 for heartbeat, subscribe and unsubscribe. */
  char stage[EM_STAGE_FIELD_BYTES]; /* NUL-terminated; empty only for (un)subscribe. */
} em_span_t;

/* The state both the page and the push datagram carry. */
typedef struct {
  em_level_t level;
  em_level_t prev_level;
  uint32_t changes;                   /* Level changes since the agent started. */
  uint64_t since_mono_ns;             /* CLOCK_MONOTONIC of the last change. */
  uint64_t since_wall_ns;             /* CLOCK_REALTIME of the last change. */
  double value;                       /* Measured value behind the change; NaN when none. */
  double bound;                       /* Bound of the rule behind the change; NaN when none. */
  char rule[EM_RULE_FIELD_BYTES];     /* NUL-terminated, may be empty. */
  char stage[EM_STAGE_FIELD_BYTES];   /* NUL-terminated, may be empty. */
  char reason[EM_REASON_FIELD_BYTES]; /* NUL-terminated, may be empty. */
} em_state_record_t;

/* Model datagram v2 (client -> agent, 512 bytes, WIRE.md "Model identity: model datagram v2"):
 * the model the inference process runs, its version and up to 8 labels. */
#define EM_MODEL_DGRAM_BYTES         512u
#define EM_MODEL_DGRAM_VERSION       2
#define EM_DGRAM_MODEL               7
#define EM_MODEL_NAME_FIELD_BYTES    64u /* 1..63 bytes of printable ASCII, NUL-padded. */
#define EM_MODEL_VERSION_FIELD_BYTES 32u /* 1..31 bytes of printable ASCII, NUL-padded. */
#define EM_MODEL_LABEL_KEY_BYTES     16u /* 1..15 bytes of [A-Za-z_][A-Za-z0-9_]*, not "__". */
#define EM_MODEL_LABEL_VALUE_BYTES   32u /* 1..31 bytes of printable ASCII. */

/* One label slot of a model datagram; both texts NUL-terminated and zero-padded. */
typedef struct {
  char key[EM_MODEL_LABEL_KEY_BYTES];
  char value[EM_MODEL_LABEL_VALUE_BYTES];
} em_model_label_t;

/*
 * A decoded model datagram: a copy of every text (fixed storage, no pointer into the received
 * bytes), labels in ascending key order. em_model_dgram_view() gives it as an em_model_t.
 */
typedef struct {
  uint32_t pid;        /* As the sender claims; the agent trusts SCM_CREDENTIALS instead. */
  uint32_t generation; /* The client's count of set_model calls (informative). */
  char name[EM_MODEL_NAME_FIELD_BYTES];
  char version[EM_MODEL_VERSION_FIELD_BYTES];
  size_t n_labels; /* 0..EM_PROTO_MAX_MODEL_LABELS */
  em_model_label_t labels[EM_PROTO_MAX_MODEL_LABELS];
} em_model_dgram_t;

/*
 * Packs a model datagram into out[0..EM_MODEL_DGRAM_BYTES) from `m` (borrowed for the call).
 * Returns 0, EM_PROTO_EINVAL (NULL argument, or m->name NULL: a datagram always names a
 * model), or what em_proto_model_check() refuses (ESTRING, ELIMIT, EDUPLICATE, EINVAL for keys
 * not ascending). `out` is untouched on failure.
 */
EM_PROTO_MUST_USE int em_model_dgram_pack(const em_model_t *m, uint32_t pid, uint32_t generation,
                                          uint8_t out[EM_MODEL_DGRAM_BYTES]);

/*
 * Unpacks and validates one received model datagram of `len` bytes, reporting the first
 * failure in this order: EM_PROTO_ESIZE (len != 512), EM_PROTO_EMAGIC, EM_PROTO_EVERSION (not
 * 2), EM_PROTO_EKIND (not 7), EM_PROTO_ELIMIT (n_labels > 8), EM_PROTO_ERANGE (reserved bytes
 * or an unused label slot not all zero), EM_PROTO_ESTRING (a text field without its NUL or with
 * non-zero bytes after it), then em_proto_model_check()'s codes on the decoded identity
 * (ESTRING, EDUPLICATE, EINVAL: keys not ascending). `out` is written only on success.
 */
EM_PROTO_MUST_USE int em_model_dgram_unpack(const uint8_t *buf, size_t len, em_model_dgram_t *out);

/*
 * The identity `d` holds as an em_model_t whose strings point into `d` and whose labels are
 * labels[0..d->n_labels) (filled here). Both `d` and `labels` must outlive the view.
 */
void em_model_dgram_view(const em_model_dgram_t *d, em_label_t labels[EM_PROTO_MAX_MODEL_LABELS],
                         em_model_t *out);

/* Profile request page v1 (agent -> clients, 64 bytes, WIRE.md "Profile request page v1"): the
 * stack-profile window the agent has open (or last had), so a client samples its own Python
 * stacks over the same interval. A file `profile` in the runtime directory, replaced whole by a
 * rename on every window's start: a reader never sees a half-written page. */
#define EM_PROFILE_PAGE_BYTES   64u
#define EM_PROFILE_PAGE_VERSION 1

typedef struct {
  uint32_t window;   /* The agent's window number (its profile number), from 0. */
  uint32_t hz;       /* The agent's sampling frequency, 1..1000. */
  uint64_t start_ns; /* CLOCK_MONOTONIC of the window's start. */
  uint64_t end_ns;   /* CLOCK_MONOTONIC of its planned end (>= start_ns). */
} em_profile_page_t;

/* Packs the page into out[0..EM_PROFILE_PAGE_BYTES). Returns 0, EM_PROTO_EINVAL (NULL) or
 * EM_PROTO_ERANGE (hz not 1..1000, end before start). */
EM_PROTO_MUST_USE int em_profile_page_pack(const em_profile_page_t *p,
                                           uint8_t out[EM_PROFILE_PAGE_BYTES]);

/* Unpacks a page of `len` bytes, in this order: EM_PROTO_ESIZE (len != 64), EM_PROTO_EMAGIC,
 * EM_PROTO_EVERSION, EM_PROTO_ERANGE (size field not 64, hz, end before start, reserved bytes
 * not 0). `out` is written only on success. */
EM_PROTO_MUST_USE int em_profile_page_unpack(const uint8_t *buf, size_t len,
                                             em_profile_page_t *out);

/*
 * Python stacks datagram v2 (client -> agent, kind 8, 32..65507 bytes, WIRE.md "Python stacks
 * datagram v2"): the Python stacks one process sampled during one profile window, as a table
 * of frame texts and samples of (native tid, CLOCK_MONOTONIC time, frame indices root first).
 */
#define EM_DGRAM_PYSTACKS             8
#define EM_PYSTACKS_VERSION           2
#define EM_PYSTACKS_HEADER_BYTES      32u
#define EM_PYSTACKS_MAX_BYTES         65507u /* The largest UDP-sized datagram clients send. */
#define EM_PYSTACKS_MAX_STRINGS       4096u
#define EM_PYSTACKS_MAX_STRING_BYTES  255u /* A frame text: 1..255 bytes of UTF-8 text. */
#define EM_PYSTACKS_MAX_DEPTH         256u /* Frames in one sample (EM_PROFILE_MAX_DEPTH). */
#define EM_PYSTACKS_SAMPLE_HEAD_BYTES 14u  /* tid u32, time u64, depth u16; then depth u16. */

/* One sample, decoded or to pack; frames borrowed. */
typedef struct {
  uint32_t tid;     /* The sampled thread's native id (gettid()). */
  uint64_t time_ns; /* CLOCK_MONOTONIC (Python time.monotonic_ns()) of the sample. */
  uint16_t depth;   /* 1..EM_PYSTACKS_MAX_DEPTH */
  uint16_t frames[EM_PYSTACKS_MAX_DEPTH]; /* Indices into the string table, root first. */
} em_pysample_t;

/*
 * A validated datagram, as a view into the received bytes (`buf`, which must outlive it):
 * strings by offset, samples read in order with em_pystacks_next().
 */
typedef struct {
  uint32_t pid;         /* As the sender claims; the agent trusts SCM_CREDENTIALS instead. */
  uint32_t window;      /* The profile page's window number the samples belong to. */
  uint32_t samples_cut; /* Samples the client took but left out to fit. */
  uint16_t n_strings;
  uint16_t n_samples;
  const uint8_t *buf;
  size_t len;
  size_t samples_off;                        /* Offset of the first sample. */
  uint16_t str_off[EM_PYSTACKS_MAX_STRINGS]; /* Offset of string i's length byte. */
} em_pystacks_t;

/*
 * Packs a datagram into out[0..cap) from the strings (NUL-terminated, borrowed) and samples.
 * Returns 0 and *out_len; EM_PROTO_ENOSPACE with *out_len the size needed when cap is too
 * small; EM_PROTO_ETOOBIG past EM_PYSTACKS_MAX_BYTES; EM_PROTO_EINVAL (NULL); EM_PROTO_ELIMIT
 * (more than MAX_STRINGS strings or 65535 samples); EM_PROTO_ESTRING (a string empty, over 255
 * bytes, not UTF-8 or with a control byte); EM_PROTO_ERANGE (a depth 0 or over MAX_DEPTH, an
 * index out of the table).
 */
EM_PROTO_MUST_USE int em_pystacks_pack(uint32_t pid, uint32_t window, uint32_t samples_cut,
                                       const char *const *strings, size_t n_strings,
                                       const em_pysample_t *samples, size_t n_samples, uint8_t *out,
                                       size_t cap, size_t *out_len);

/*
 * Validates a received datagram of `len` bytes (untrusted) and fills *out (a view into buf),
 * reporting the first failure in this order: EM_PROTO_ESIZE (len under 32 or over 65507),
 * EM_PROTO_EMAGIC, EM_PROTO_EVERSION (not 2), EM_PROTO_EKIND (not 8), EM_PROTO_ERANGE
 * (reserved bytes not 0), EM_PROTO_ELIMIT (n_strings over MAX_STRINGS), EM_PROTO_ESIZE
 * (strings_bytes past len); then, walking the strings and the samples in order, the first of
 * EM_PROTO_ESIZE (an item runs past its section, or a section does not end exactly where it
 * should), EM_PROTO_ESTRING (a string empty, not UTF-8, or with a control byte),
 * EM_PROTO_ERANGE (a depth 0 or over MAX_DEPTH, an index not below n_strings). Linear in len;
 * never reads past len; *out written only on success.
 */
EM_PROTO_MUST_USE int em_pystacks_unpack(const uint8_t *buf, size_t len, em_pystacks_t *out);

/* String i (< n_strings) of a validated view: its bytes (not NUL-terminated) and length. */
const uint8_t *em_pystacks_string(const em_pystacks_t *v, uint16_t i, size_t *len);

/* Reads the sample at *cursor (start with v->samples_off) into *out and advances the cursor.
 * Returns false past the last sample. Only for views em_pystacks_unpack() accepted. */
bool em_pystacks_next(const em_pystacks_t *v, size_t *cursor, em_pysample_t *out);

/*
 * True when `name` is a valid stage name: 1..31 bytes of [A-Za-z0-9_.:-]. Stage names travel
 * in MQTT payloads, config section names and Prometheus labels, hence the small alphabet.
 */
bool em_stage_name_valid(const char *name);

/*
 * Packs a client -> agent datagram into out[0..EM_SPAN_DGRAM_BYTES). Returns 0, or
 * EM_PROTO_EINVAL (NULL), EM_PROTO_EKIND (not a client kind) or EM_PROTO_ESTRING (stage
 * name invalid for a span or heartbeat, or not empty for (un)subscribe).
 */
EM_PROTO_MUST_USE int em_span_pack(const em_span_t *span, uint8_t out[EM_SPAN_DGRAM_BYTES]);

/*
 * Unpacks and validates one received datagram of `len` bytes. Returns 0, or in this order of
 * checks: EM_PROTO_ESIZE (len != 64), EM_PROTO_EMAGIC, EM_PROTO_EVERSION, EM_PROTO_EKIND,
 * EM_PROTO_ESTRING (stage name invalid, or bytes after its NUL not all 0).
 */
EM_PROTO_MUST_USE int em_span_unpack(const uint8_t *buf, size_t len, em_span_t *out);

/* Packs a level push datagram. Returns 0, EM_PROTO_EINVAL or EM_PROTO_ERANGE (bad level). */
EM_PROTO_MUST_USE int em_push_pack(const em_state_record_t *rec, uint32_t agent_pid,
                                   uint8_t out[EM_PUSH_DGRAM_BYTES]);

/* Unpacks a level push datagram. Returns 0 or ESIZE/EMAGIC/EVERSION/EKIND/ERANGE/ESTRING. */
EM_PROTO_MUST_USE int em_push_unpack(const uint8_t *buf, size_t len, em_state_record_t *out,
                                     uint32_t *agent_pid);

/*
 * Formats a fresh state page in page[0..EM_STATE_PAGE_BYTES) (which must be 8-byte aligned):
 * header, seq 0, and `initial` as the record. Used by the agent on the file it just mapped.
 */
EM_PROTO_MUST_USE int em_state_page_init(uint8_t *page, uint32_t agent_pid,
                                         const em_state_record_t *initial);

/*
 * Publishes `rec` on the page as the seqlock's single writer: the sequence counter goes odd,
 * the record is written, the counter goes even. Never blocks. Returns 0, EM_PROTO_EINVAL or
 * EM_PROTO_ERANGE.
 */
EM_PROTO_MUST_USE int em_state_page_write(uint8_t *page, const em_state_record_t *rec);

/*
 * Reads a consistent copy of the page's record with no system call. Returns 0 and sets
 * *seq_out (even) when it got one; EM_PROTO_EBUSY when a write overlapped every one of a
 * bounded number of tries; EM_PROTO_EMAGIC/EVERSION/ESIZE when the page is not a v1 page;
 * EM_PROTO_ERANGE/ESTRING for a record no agent writes.
 */
EM_PROTO_MUST_USE int em_state_page_read(const uint8_t *page, em_state_record_t *out,
                                         uint32_t *seq_out);

#ifdef __cplusplus
}
#endif

#endif /* EDGEMON_WIRE_H */
