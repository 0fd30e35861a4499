/*
 * edgemon/common/ini.h - the INI line reader under the agent's config, board profiles and the
 * aggregator's config file. It splits lines and reports what is wrong with their syntax; what
 * the keys mean is the caller's.
 *
 * The grammar, one physical line at a time (a line never continues on the next):
 *   - a UTF-8 byte order mark before the first line is skipped; blanks around a line are not
 *     part of it, so an indented line reads as it would unindented;
 *   - empty lines and lines starting with ';' or '#' are comments;
 *   - "[name]" starts a section; a ';' after a blank starts a comment after it; any other text
 *     after the ']' is a problem;
 *   - "name = value" or "name : value": the name up to the first '=' or ':', the value after
 *     it up to an inline comment (';' after a blank), both trimmed; the value may be empty;
 *   - anything else is a problem, as are a line longer than max_line characters, a NUL byte,
 *     and an input longer than max_bytes (which ends the read).
 * Every problem is reported with its line number, and reading goes on with the next line
 * unless a callback asks to stop.
 *
 * Nothing allocates: the line buffer is on the stack (EM_INI_MAX_LINE). No global state. The
 * header compiles on its own, as C11 and as C++.
 */
#ifndef EDGEMON_COMMON_INI_H
#define EDGEMON_COMMON_INI_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EM_INI_MAX_LINE      4095u      /* Longest max_line a caller may ask for. */
#define EM_INI_DEFAULT_LINE  1024u      /* max_line when 0. */
#define EM_INI_DEFAULT_BYTES (1u << 20) /* max_bytes when 0. */
#define EM_INI_MAX_SECTION   255u       /* Bytes of a section name passed to on_pair. */

/* What was wrong with a line's syntax. */
typedef enum {
  EM_INI_TOO_LONG,       /* Longer than max_line characters. */
  EM_INI_HAS_NUL,        /* A NUL byte. */
  EM_INI_NOT_PAIR,       /* Not a comment, header or name = value. */
  EM_INI_NO_NAME,        /* Nothing before the '=' or ':'. */
  EM_INI_HEADER_OPEN,    /* "[name" without its ']'. */
  EM_INI_HEADER_TRAILER, /* Text after the ']' that is not a comment. */
} em_ini_problem_t;

/*
 * The callbacks and limits of one read. Each callback returns 0 to go on or a nonzero value
 * that stops the read and is returned by em_ini_parse_*(). Strings are borrowed for the call.
 */
typedef struct {
  const char *file; /* Named in the default messages; may be NULL. */
  size_t max_line;  /* Longest line in characters, without its newline; 0: EM_INI_DEFAULT_LINE;
                       at most EM_INI_MAX_LINE. */
  size_t max_bytes; /* Bytes read at most; 0: EM_INI_DEFAULT_BYTES. */
  /* A section header: name is what is inside the brackets, trimmed; NULL after a malformed
     header (already reported through on_error). May be NULL. */
  int (*on_section)(void *ctx, int line, const char *name);
  /* A key line. section is the current section's name ("" before the first header, NULL
     after a malformed one, cut to EM_INI_MAX_SECTION bytes). May be NULL. */
  int (*on_pair)(void *ctx, int line, const char *section, const char *name, const char *value);
  /* A line's syntax problem: its kind, the line's text (trimmed, may hold any byte) and a
     message without FILE:LINE ("expected 'key = value', got 'x'"). NULL: the message is
     written to stderr as "FILE:LINE: message". */
  int (*on_error)(void *ctx, int line, em_ini_problem_t kind, const char *text, const char *msg);
} em_ini_reader_t;

/*
 * Reads `f` to its end (or past r->max_bytes). Returns 0 when every line was handed over;
 * -EFBIG past max_bytes; -errno of a read error (-EIO when errno says nothing); -EINVAL for
 * NULL arguments; or the nonzero value a callback stopped the read with.
 */
int em_ini_parse_file(FILE *f, const em_ini_reader_t *r, void *ctx);

/* em_ini_parse_file() over text[0..len) (need not be NUL-terminated). */
int em_ini_parse_text(const char *text, size_t len, const em_ini_reader_t *r, void *ctx);

#ifdef __cplusplus
}
#endif

#endif /* EDGEMON_COMMON_INI_H */
