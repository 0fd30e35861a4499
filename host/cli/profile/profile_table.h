/*
 * profile_table.h - a stack profile (edgemon/profile.h) as edgemon-cli profile --show prints
 * it for a person: a header (trigger, window, sampling clock and rate, samples, lost, notes,
 * what the size cap cut), the `top` hottest stacks (profile_stacks.h's order: samples, %, off-CPU
 * ms, stage, the stack as root;...;leaf shortened from the root side), then the `top`
 * functions by self samples (self, self %, total, total %, kind, name and module).
 *
 * em_profile_line() is the one line `edgemon-cli tail` prints per arriving profile.
 *
 * Owns nothing beyond the call (a decode scratch in em_profile_line()).
 */
#ifndef EM_CLI_PROFILE_TABLE_H
#define EM_CLI_PROFILE_TABLE_H

#include <edgemon/profile.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Widest the stack column gets (bytes). */
#define EM_PROFILE_TABLE_STACK_WIDTH 90

/* Prints the header and both tables to stdout (the tables through em_view_table()). Returns 0,
 * or -ENOMEM. */
int em_profile_table(const em_profile_t *p, const char *title, size_t top);

/*
 * Decodes the profile in cbor[0..len) published by `device` and prints one line about it:
 * clock, device, "profile #N", cause, level, rule, samples, stacks, bytes; with json one
 * object {"device", "profile": {...}}. Returns 0, or the decoder's error (nothing printed;
 * *error_offset set).
 */
int em_profile_line(FILE *out, const char *device, const uint8_t *cbor, size_t len, bool json,
                    size_t *error_offset);

#endif /* EM_CLI_PROFILE_TABLE_H */
