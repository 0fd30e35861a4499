/*
 * growth.h - which functions a stage spends more of its samples in than it did: the shares of
 * the functions of one stage in a resolved profile (em_profile_t), kept from a baseline profile
 * taken while the level was NOMINAL, and compared with a breach's profile of the same stage to
 * name the functions whose share grew most, in points (a more_work cause's `functions`,
 * docs/DIAGNOSIS.md "Which functions grew").
 *
 * A function's share of a stage is inclusive: the samples of the stage whose stack holds a frame
 * of that name (once per stack, however deep it recurses) over all samples of the stage. Frames
 * are grouped by name alone: a Python function's frames at different lines, or a native
 * symbol's in two binaries, are one function. A Python function's share is of the stage's
 * samples whose stack holds a Python frame (when EM_GROWTH_MIN_SAMPLES or more do): how many
 * samples got the client's Python frames varies from window to window. Inclusive and not self: a
 * stage that calls a new function grows that function's share by the time spent under it, wherever
 * the samples land (its Python frames, the interpreter's or C extension frames under it), while the
 * callers both profiles share keep the same share; self shares would spread a Python function's
 * growth over the native frames its samples end in.
 *
 * Bounded: a baseline keeps at most EM_GROWTH_MAX_STAGES stages and, per stage, the
 * EM_GROWTH_TOP functions with the largest shares (a function outside them counts as 0 in the
 * baseline: its growth is overstated by at most the smallest share kept). A stage with fewer
 * than EM_GROWTH_MIN_SAMPLES samples in either profile is not compared (too few to tell a share
 * from noise). The scratch (em_growth_t) is allocated once by em_growth_new; nothing allocates
 * afterwards.
 *
 * Owns its scratch. Not thread-safe: one caller at a time (the profiler's worker job).
 */
#ifndef EDGEMON_AGENT_GROWTH_H
#define EDGEMON_AGENT_GROWTH_H

#include <stddef.h>
#include <stdint.h>

#include "edgemon/profile.h"
#include "edgemon/proto.h"
#include "edgemon/wire.h"

#define EM_GROWTH_MAX_STAGES  16u /* Stages a baseline keeps (the most samples first). */
#define EM_GROWTH_TOP         32u /* Functions a baseline keeps per stage (largest shares). */
#define EM_GROWTH_MIN_SAMPLES 20u /* Samples a stage needs in each profile to be compared. */
/* A function is named only when its share grew by at least this many points: a share measured
 * over a few hundred samples moves by a few points from one window to the next by itself. */
#define EM_GROWTH_MIN_POINTS 3.0
#define EM_GROWTH_NAME_BYTES 256u /* A frame's name (EM_PROFILE_MAX_FRAME_BYTES) and its NUL. */

/* One function's share of a stage (0..1), or its growth in points (em_growth_grown). */
typedef struct {
  char name[EM_GROWTH_NAME_BYTES];
  double value;
} em_growth_fn_t;

typedef struct {
  char stage[EM_STAGE_FIELD_BYTES];
  uint64_t samples; /* The stage's on-CPU samples in the baseline. */
  size_t n_fns;
  em_growth_fn_t fns[EM_GROWTH_TOP]; /* Descending share. */
} em_growth_stage_t;

/* A baseline: the per-stage function shares of one profile. */
typedef struct {
  size_t n_stages;
  em_growth_stage_t stages[EM_GROWTH_MAX_STAGES];
} em_growth_base_t;

typedef struct em_growth em_growth_t;

/* The scratch for profiles of up to EM_PROFILE_MAX_FRAMES frames. Returns 0 and *out, -EINVAL
 * or -ENOMEM. */
int em_growth_new(em_growth_t **out);

/* Frees. NULL is a no-op. */
void em_growth_free(em_growth_t *g);

/*
 * Fills *out with the shares of each stage of `p` that has EM_GROWTH_MIN_SAMPLES on-CPU
 * samples or more (the stages with the most samples first, at most EM_GROWTH_MAX_STAGES), each
 * with its EM_GROWTH_TOP largest inclusive function shares. Returns the stages kept (0: none),
 * or -EINVAL.
 */
int em_growth_baseline(em_growth_t *g, const em_profile_t *p, em_growth_base_t *out);

/*
 * The functions of `stage` in `p` whose inclusive share grew most against `base`, by at least
 * EM_GROWTH_MIN_POINTS, in descending growth (ties by name), at most `max` into out[] with
 * value the growth in points (share now minus share then, times 100). Returns how many (0: no
 * function grew, or the stage has too few samples in either profile), or -EINVAL.
 */
int em_growth_grown(em_growth_t *g, const em_profile_t *p, const char *stage,
                    const em_growth_base_t *base, em_growth_fn_t *out, size_t max);

#endif /* EDGEMON_AGENT_GROWTH_H */
