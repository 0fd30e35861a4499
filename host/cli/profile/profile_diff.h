/*
 * profile_diff.h - a stack profile against a baseline (edgemon-cli profile --diff): for each
 * function (matched by name) and each folded stack (matched by its root;...;leaf text), the
 * share of samples it has in either profile and the difference in points, sorted by growth.
 * Shares are of em_profile_stacks_total() of their own profile, so profiles of different
 * lengths or rates compare; off-CPU time is kept apart (per function, in ns, never in a share).
 *
 * Owns the arrays its functions allocate (freed by em_profile_diff_free()); borrows both
 * profiles, whose strings the results point into (the stacks' texts are the result's own).
 */
#ifndef EM_CLI_PROFILE_DIFF_H
#define EM_CLI_PROFILE_DIFF_H

#include <edgemon/profile.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Index of the two sides in the arrays below. */
enum { EM_PROFILE_BASE = 0, EM_PROFILE_NOW = 1 };

/* One function's figures in both profiles (frames of one name are summed). */
typedef struct {
  const char *name;                 /* Borrowed from the profile that has it (NOW first). */
  em_profile_frame_kind_t kind;     /* Its kind in the profile that has it. */
  uint64_t self[2];                 /* Samples where it is the leaf. */
  uint64_t total[2];                /* Samples of the stacks it is in. */
  uint64_t off_cpu_ns[2];           /* Off-CPU time of the stacks whose leaf it is. */
  double self_pct[2], total_pct[2]; /* Shares of each profile's samples, in %. */
  double self_delta, total_delta;   /* NOW less BASE, in points. */
} em_profile_diff_func_t;

/* One folded stack's figures in both profiles (stages merged). */
typedef struct {
  char *text; /* "root;...;leaf" as --folded writes it (owned by the result). */
  uint64_t samples[2];
  double pct[2]; /* Shares of each profile's samples, in %. */
  double delta;  /* NOW less BASE, in points. */
} em_profile_diff_stack_t;

typedef struct {
  em_profile_diff_func_t *funcs; /* By descending self_delta, total_delta, then name. */
  size_t n_funcs;
  em_profile_diff_stack_t *stacks; /* By descending delta, then text. */
  size_t n_stacks;
  uint64_t total[2];      /* em_profile_stacks_total() of each. */
  uint64_t off_cpu_ns[2]; /* All off-CPU time of each. */
} em_profile_diff_t;

/* Computes the comparison of p against base. Returns 0, or -ENOMEM (*d empty). */
int em_profile_diff(const em_profile_t *base, const em_profile_t *p, em_profile_diff_t *d);
void em_profile_diff_free(em_profile_diff_t *d);

/* Prints the comparison for people on stdout: a header naming both, then the `top` functions
 * and the `top` folded stacks by growth (em_view_table()). Returns 0, or -ENOMEM. */
int em_profile_diff_table(const em_profile_diff_t *d, const char *title, const char *base_title,
                          size_t top);

/* Writes every folded stack, "root;...;leaf BASE% NOW% DELTA\n" (shares with two decimals,
 * the delta signed), by growth. Returns 0, or -EIO when writing failed. */
int em_profile_diff_folded(FILE *out, const em_profile_diff_t *d);

/* Writes the comparison as one JSON object and a newline: {"profile", "baseline", "samples":
 * {"baseline", "profile"}, "off_cpu_ns": {...}, "functions": [...], "stacks": [...]}, every
 * row whole. Returns 0, or -EIO when writing failed. */
int em_profile_diff_json(FILE *out, const em_profile_diff_t *d, const char *title,
                         const char *base_title);

#endif /* EM_CLI_PROFILE_DIFF_H */
