/*
 * pymerge.h - the Python frames of one profiling window: the Python stacks datagram v2 its
 * client sent (proto/WIRE.md "Python stacks datagram v2"), kept whole, and the splice of its
 * samples into the native stacks the agent sampled.
 *
 * The merge rule: a native sample of thread T at time t takes the Python sample of the same T
 * taken nearest to t among those within the caller's bounds (two of the client's sampling
 * periods either side) that its accept() takes (the window's: one taken in the same stage as
 * the sample, or both outside every span: a Python sample from another stage would name code
 * the thread was not running);
 * its Python frames (root first) replace the native interpreter frames, from the first frame
 * the caller's is_interp() says is the interpreter's eval loop (`_PyEval_EvalFrameDefault`),
 * counted from the root, to the last one. What is above stays above (the C entry: main,
 * Py_RunMain, ...), what is below stays below (a C function the Python code called), so a stack
 * reads `main;...;run;infer;slow_checksum;crc32`. A native stack with no eval-loop frame (its
 * unwinding stopped early: an interpreter built without frame pointers) gets the Python frames
 * above all of its native frames, which are then the leaf side only. A sample no Python sample
 * matches keeps its native frames; em_pymerge_splice() says why.
 *
 *   EMPTY --em_pymerge_take (window matches, valid)--> HELD --em_pymerge_prepare--> READY
 *   any --em_pymerge_reset--> EMPTY
 *
 * Memory: em_pymerge_new() allocates everything (the datagram buffer of EM_PYSTACKS_MAX_BYTES,
 * a sorted index of its samples, the frame texts split into name and module); nothing after.
 * Untrusted input: the datagram is validated by em_pystacks_unpack() before it is kept.
 *
 * Threading: take runs on the loop while the window is open or closing; prepare and splice on
 * the worker that assembles the closed window, when the loop no longer takes.
 */
#ifndef EDGEMON_AGENT_PYMERGE_H
#define EDGEMON_AGENT_PYMERGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "edgemon/profile.h"
#include "edgemon/wire.h"

typedef struct em_pymerge em_pymerge_t;

/* Why a native sample kept its native frames (em_pymerge_splice). */
typedef enum {
  EM_PYMERGE_SPLICED = 0,   /* It has Python frames, in place of the eval-loop run. */
  EM_PYMERGE_NO_SAMPLE = 1, /* No Python sample of its thread within max_gap_ns. */
  EM_PYMERGE_ABOVE = 2,     /* No eval-loop frame: Python frames above all native ones. */
  EM_PYMERGE_NO_FRAME = 3,  /* A Python frame found no room in the frame table. */
} em_pymerge_why_t;

/* Adds frame f (its texts live as long as the merger) to the caller's frame table and returns
 * its index, or UINT32_MAX when the table is full. */
typedef uint32_t (*em_pymerge_frame_fn)(void *ctx, const em_profile_frame_t *f);
/* True when frame index `frame` is the interpreter's eval loop. */
typedef bool (*em_pymerge_interp_fn)(void *ctx, uint32_t frame);
/* Whether the Python sample of the thread taken at time_ns may give its frames. */
typedef bool (*em_pymerge_accept_fn)(void *ctx, uint64_t time_ns);

int em_pymerge_new(em_pymerge_t **out); /* 0, -EINVAL or -ENOMEM. */
void em_pymerge_free(em_pymerge_t *m);  /* NULL: no-op. */
uint64_t em_pymerge_bytes(const em_pymerge_t *m);

/* Drops what it holds (a new window). */
void em_pymerge_reset(em_pymerge_t *m);

/*
 * Keeps a received datagram (buf borrowed for the call, copied) when it unpacks and its window
 * is `window`. Returns 0; -EINVAL (NULL); -EALREADY (one is held: the first is kept); -ESTALE
 * (another window); or em_pystacks_unpack()'s EM_PROTO_E* code.
 */
int em_pymerge_take(em_pymerge_t *m, const uint8_t *buf, size_t len, uint32_t window);

bool em_pymerge_held(const em_pymerge_t *m);
/* The held datagram's sample count and its samples_cut (0 when none is held). */
uint32_t em_pymerge_samples(const em_pymerge_t *m);
uint32_t em_pymerge_client_cut(const em_pymerge_t *m);

/*
 * Sorts the held samples by (tid, time) and adds every frame text to the caller's table through
 * add_frame (name: the function, module: "file:line", kind EM_FRAME_PYTHON; a text not of the
 * form "function (file:line)" is all name). No-op when none is held.
 */
void em_pymerge_prepare(em_pymerge_t *m, em_pymerge_frame_fn add_frame, void *ctx);

/*
 * The native path (frame indices, root first, n of them) of a sample of `tid` at time_ns, with
 * the Python frames of its nearest Python sample taken within [lo_ns, hi_ns] that accept()
 * takes (NULL: any) spliced in: writes the result into out[0..EM_PROFILE_MAX_DEPTH) and returns its
 * length (the root side cut to EM_PROFILE_MAX_DEPTH) with *why SPLICED or ABOVE. Returns 0 and *why
 * when it keeps its native frames (out untouched). Only after em_pymerge_prepare().
 */
size_t em_pymerge_splice(const em_pymerge_t *m, uint32_t tid, uint64_t time_ns, uint64_t lo_ns,
                         uint64_t hi_ns, const uint32_t *path, size_t n,
                         em_pymerge_interp_fn is_interp, em_pymerge_accept_fn accept, void *ctx,
                         uint32_t *out, em_pymerge_why_t *why);

#endif /* EDGEMON_AGENT_PYMERGE_H */
