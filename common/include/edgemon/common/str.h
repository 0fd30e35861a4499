/*
 * edgemon/common/str.h - bounded string helpers: a copy that always terminates and says when
 * it cut, trimming in place, and the quoting every error message uses for text from a file
 * (printable ASCII kept, anything else '?', long text cut with "...").
 *
 * Nothing allocates; no global state. The header compiles on its own, as C11 and as C++.
 */
#ifndef EDGEMON_COMMON_STR_H
#define EDGEMON_COMMON_STR_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Copies `src` into dst[0..cap), always NUL-terminated when cap > 0. Returns true when all of
 * src fitted; false when it was cut to cap - 1 bytes (or cap is 0, or an argument is NULL).
 */
bool em_str_copy(char *dst, size_t cap, const char *src);

/*
 * Cuts blanks (space, tab, CR, LF, VT, FF) from both ends of `s` in place: the trailing ones
 * become NULs. Returns the first character that is not a blank.
 */
char *em_str_trim(char *s);

/*
 * Writes `src` into dst[0..cap) for quoting in a message: bytes outside printable ASCII become
 * '?', and past max_chars characters (or what cap leaves room for) the rest becomes "...".
 * Returns dst. cap must be at least 4.
 */
const char *em_str_quote(char *dst, size_t cap, const char *src, size_t max_chars);

#ifdef __cplusplus
}
#endif

#endif /* EDGEMON_COMMON_STR_H */
