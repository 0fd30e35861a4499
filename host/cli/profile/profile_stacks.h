/*
 * profile_stacks.h - the figures edgemon-cli profile computes from a stack profile
 * (edgemon/profile.h) before it shows them: the hottest stacks, the self and total samples of
 * each frame, the folded lines (Brendan Gregg's `frame;frame;frame COUNT`), and the tree of
 * distinct stack prefixes a flame graph draws. Pure functions of the decoded profile: the
 * table, the SVG, the folded output and their tests all read the same numbers from here.
 *
 * Percentages are of em_profile_stacks_total(): the profile's `samples` (all on-CPU samples
 * taken, so the share a cut profile's stacks had of the whole window), or the sum of its
 * stacks' samples when that is larger (a malformed count never gives a share above 100%).
 *
 * Owns the arrays its functions allocate (freed by the matching _free()); borrows the profile,
 * whose strings the results point into. Not thread-safe only in that results are not shared.
 */
#ifndef EM_CLI_PROFILE_STACKS_H
#define EM_CLI_PROFILE_STACKS_H

#include <edgemon/profile.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/*
 * A copy of p's frames for people to read: native frames' C++ names demangled without their
 * parameters (demangle.h), the others as they are. Returns 0 with *frames (p->n_frames
 * entries) and *text (the demangled names), both malloc'd, or -ENOMEM (both NULL).
 */
int em_profile_readable(const em_profile_t *p, em_profile_frame_t **frames, char **text);

/* The samples percentages are of (see above). */
uint64_t em_profile_stacks_total(const em_profile_t *p);

/*
 * The indices of p->stacks in the order the table shows them: descending samples, then
 * descending off-CPU time, then message order. Returns 0 with *order (malloc'd, p->n_stacks
 * entries; NULL when there are none), or -ENOMEM.
 */
int em_profile_hottest(const em_profile_t *p, size_t **order);

/* One frame's share of the samples. */
typedef struct {
  uint32_t frame;      /* Index into p->frames. */
  uint64_t self;       /* Samples of the stacks whose leaf it is. */
  uint64_t total;      /* Samples of the stacks it appears in (once per stack, recursion too). */
  uint64_t off_cpu_ns; /* Off-CPU time of the stacks whose leaf it is. */
} em_profile_func_t;

/*
 * Every frame some stack uses, by descending self, then descending total, then frame index.
 * Returns 0 with *out (malloc'd, *n entries) or -ENOMEM.
 */
int em_profile_functions(const em_profile_t *p, em_profile_func_t **out, size_t *n);

/*
 * Writes the stack `s` as "root;...;leaf" into buf (cap > 0, NUL-terminated), cut from the
 * root side to at most `width` bytes: whole frames are dropped from the root and replaced by
 * "...;", and a leaf longer than the width alone keeps its last bytes after a "~". A ';' inside
 * a frame name is written as ':' so the separators stay unambiguous. width 0: no limit (as
 * much as cap holds).
 */
void em_profile_stack_text(const em_profile_t *p, const em_profile_stack_t *s, size_t width,
                           char *buf, size_t cap);

/*
 * Writes the folded lines: one per distinct frame path with on-CPU samples (stacks equal but
 * for their stage are merged), "root;...;leaf COUNT\n", in the order of their first stack in
 * the message. Frame names are written whole with ';' replaced by ':' and control characters
 * by '?'. Returns 0, -ENOMEM, or -EIO when writing failed.
 */
int em_profile_folded(FILE *out, const em_profile_t *p);

/*
 * The flame graph's tree: a node per distinct frame path prefix among the stacks with on-CPU
 * samples (stages merged), each with the samples of the stacks it prefixes. Node 0 is the
 * root ("all", frame EM_PROFILE_NO_STAGE, depth 0); a node's children are in ascending frame
 * name order (then frame index), laid out left to right from `x` (in samples from the left).
 */
typedef struct {
  uint32_t frame;                     /* Index into p->frames; UINT32_MAX for the root. */
  uint32_t parent;                    /* Node index; the root's is 0. */
  uint32_t depth;                     /* 0 for the root, 1 for a thread entry frame, ... */
  uint64_t samples;                   /* Samples of the stacks under this prefix. */
  uint64_t self;                      /* Samples of the stacks ending exactly here. */
  uint64_t x;                         /* Samples left of this node on its row (the layout). */
  uint32_t first_child, next_sibling; /* Node indices; 0 for none. */
} em_profile_node_t;

typedef struct {
  em_profile_node_t *v; /* v[0] the root. */
  size_t n;
  uint32_t max_depth;
} em_profile_tree_t;

/* Builds the tree. Returns 0, or -ENOMEM (*t empty). */
int em_profile_tree(const em_profile_t *p, em_profile_tree_t *t);
void em_profile_tree_free(em_profile_tree_t *t);

#endif /* EM_CLI_PROFILE_STACKS_H */
