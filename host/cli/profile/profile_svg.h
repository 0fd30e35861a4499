/*
 * profile_svg.h - a stack profile (edgemon/profile.h) drawn as an interactive flame graph in
 * one self-contained SVG file (no network: the style and a small script are inline).
 *
 * One rectangle per distinct stack prefix with on-CPU samples (profile_stacks.h's tree; stacks
 * equal but for their stage are merged), the root frames at the bottom and each callee above
 * its caller, siblings in frame name order; a rectangle's width is its samples' share of all
 * the drawn samples. Rectangles are `<rect class="f KIND">` (KIND python, native, kernel or
 * unknown, which also picks the colour family), each with a `<title>` giving the full frame
 * name, its module, its samples and their percentage, inside a `<g class="f">` with the name
 * as a label where it fits. A bottom bar "all" (class "all") spans everything. The title line
 * names `title` (the device and profile key, or the file), the trigger and the sample count;
 * a legend gives the colours. Clicking a frame zooms to it (its ancestors stay full width),
 * "Reset zoom" undoes it, "Search" asks for a regular expression, highlights the matching
 * frames and states the share of samples under them.
 *
 * Owns nothing beyond the call.
 */
#ifndef EM_CLI_PROFILE_SVG_H
#define EM_CLI_PROFILE_SVG_H

#include <edgemon/profile.h>
#include <stdio.h>

/* Drawing width in px, and the width frames share (the width less the side margins). */
#define EM_PROFILE_SVG_WIDTH  1200.0
#define EM_PROFILE_SVG_MARGIN 10.0

/* Writes the SVG. Returns 0, -ENOMEM, or -EIO when writing failed. */
int em_profile_svg(FILE *out, const em_profile_t *p, const char *title);

/*
 * Writes the differential flame graph of p against base (--diff): p's graph as above, each
 * rectangle filled by the change of its share (its samples over em_profile_stacks_total() of
 * its profile) against the same frame path in base: red where it grew, blue where it shrank,
 * grey where equal, deeper the larger the change relative to the largest one drawn; class
 * "f KIND grew|shrank|same", and the title adds both shares and the change in points. The
 * legend gives the colours of change; the subtitle names base_title. Both profiles are
 * borrowed. Returns 0, -ENOMEM, or -EIO when writing failed.
 */
int em_profile_svg_diff(FILE *out, const em_profile_t *p, const char *title,
                        const em_profile_t *base, const char *base_title);

#endif /* EM_CLI_PROFILE_SVG_H */
