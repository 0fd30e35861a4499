/*
 * ini.c - the INI line reader (edgemon/common/ini.h). A source (a FILE or a byte range) hands
 * over one character at a time; next_line() fills a stack buffer with one physical line and
 * counts bytes and lines; handle_line() classifies it and calls the reader's callbacks. The
 * whole state is one parse_t on the caller's stack. No allocation, no global state.
 */
#define _POSIX_C_SOURCE 200809L
#include "edgemon/common/ini.h"

#include "edgemon/common/str.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>

#define QUOTE_MAX 48 /* Longest text quoted in a message before "...". */
#define MSG_CAP   256

typedef struct {
  const em_ini_reader_t *r;
  void *ctx;
  FILE *f;          /* The source: a FILE ... */
  const char *text; /* ... or text[0..len). */
  size_t len;
  size_t pos;
  size_t max_line;
  size_t max_bytes;
  size_t bytes;  /* Read so far. */
  int read_err;  /* errno of a failed read, or EFBIG; 0 when none. */
  int line;      /* Number of the line in buf. */
  int pair_line; /* The last line that held a name = value pair. */
  bool has_section;
  bool section_ok;
  char section[EM_INI_MAX_SECTION + 1];
  char buf[EM_INI_MAX_LINE + 1];
} parse_t;

static bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

/* The first character of `chars` (none when NULL), a ';' after a blank, or the NUL. */
static char *find_chars_or_comment(char *s, const char *chars) {
  bool was_space = false;
  while (*s != '\0' && (chars == NULL || strchr(chars, *s) == NULL) && !(was_space && *s == ';')) {
    was_space = is_space(*s);
    s++;
  }
  return s;
}

/* The next byte of the source, or EOF at its end or on an error (p->read_err set). */
static int next_char(parse_t *p) {
  if (p->f == NULL) {
    return p->pos < p->len ? (unsigned char)p->text[p->pos++] : EOF;
  }
  int c = getc(p->f);
  if (c == EOF && ferror(p->f)) {
    p->read_err = errno != 0 ? errno : EIO;
  }
  return c;
}

/* Reads the next physical line into p->buf; false at the end, on an error or past max_bytes. */
static bool next_line(parse_t *p, bool *too_long, bool *has_nul) {
  size_t n = 0;
  bool any = false;
  *too_long = false;
  *has_nul = false;
  for (;;) {
    int c = next_char(p);
    if (c == EOF) {
      if (p->read_err != 0) {
        return false;
      }
      break;
    }
    if (++p->bytes > p->max_bytes) {
      p->read_err = EFBIG;
      return false;
    }
    any = true;
    if (c == '\n') {
      break;
    }
    if (c == '\0') {
      *has_nul = true;
    }
    if (n < p->max_line) {
      p->buf[n++] = (char)c;
    } else {
      *too_long = true;
    }
  }
  p->buf[n] = '\0';
  return any;
}

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 4, 5)))
#endif
static int
problem(parse_t *p, em_ini_problem_t kind, const char *text, const char *fmt, ...) {
  char msg[MSG_CAP];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (p->r->on_error != NULL) {
    return p->r->on_error(p->ctx, p->line, kind, text, msg);
  }
  fprintf(stderr, "%s:%d: %s\n", p->r->file != NULL ? p->r->file : "(config)", p->line, msg);
  return 0;
}

/* A "[...]" line; text starts at the '['. */
static int handle_header(parse_t *p, char *text) {
  char q[QUOTE_MAX + 4];
  int rc = 0;
  p->has_section = true;
  p->section_ok = false;
  p->section[0] = '\0';
  char *close = find_chars_or_comment(text + 1, "]");
  if (*close != ']') {
    rc = problem(p, EM_INI_HEADER_OPEN, text, "section header '%s' has no closing ']'",
                 em_str_quote(q, sizeof(q), text, QUOTE_MAX));
  } else {
    *close = '\0';
    char *rest = em_str_trim(close + 1);
    char *name = em_str_trim(text + 1);
    if (rest[0] != '\0' && rest[0] != ';' && rest[0] != '#') {
      rc = problem(p, EM_INI_HEADER_TRAILER, name, "unexpected text after [%s]",
                   em_str_quote(q, sizeof(q), name, QUOTE_MAX));
    } else {
      p->section_ok = true;
      em_str_copy(p->section, sizeof(p->section), name);
      return p->r->on_section != NULL ? p->r->on_section(p->ctx, p->line, name) : 0;
    }
  }
  if (rc == 0 && p->r->on_section != NULL) {
    rc = p->r->on_section(p->ctx, p->line, NULL);
  }
  return rc;
}

/* One physical line in p->buf. */
static int handle_line(parse_t *p, bool too_long, bool has_nul) {
  char *raw = p->buf;
  if (p->line == 1 && strncmp(raw, "\xEF\xBB\xBF", 3) == 0) {
    raw += 3;
  }
  char *text = em_str_trim(raw);
  bool indented = text != raw;
  if (too_long) {
    return problem(p, EM_INI_TOO_LONG, text, "line is longer than %zu characters", p->max_line);
  }
  if (has_nul) {
    return problem(p, EM_INI_HAS_NUL, text, "line contains a NUL byte");
  }
  if (text[0] == '\0' || text[0] == ';' || text[0] == '#') {
    return 0;
  }
  if (text[0] == '[') {
    return handle_header(p, text);
  }
  char q[QUOTE_MAX + 4];
  em_str_quote(q, sizeof(q), text, QUOTE_MAX);
  char *sep = find_chars_or_comment(text, "=:");
  if (*sep != '=' && *sep != ':') {
    bool continuation = indented && p->pair_line == p->line - 1;
    return problem(p, EM_INI_NOT_PAIR, text, "expected 'key = value', got '%s'%s", q,
                   continuation ? "; a value cannot continue on an indented line" : "");
  }
  *sep = '\0';
  char *value = sep + 1;
  *find_chars_or_comment(value, NULL) = '\0';
  char *name = em_str_trim(text);
  value = em_str_trim(value);
  if (name[0] == '\0') {
    return problem(p, EM_INI_NO_NAME, q, "missing key name before the '=' or ':'");
  }
  p->pair_line = p->line;
  if (p->r->on_pair == NULL) {
    return 0;
  }
  const char *section = !p->has_section ? "" : p->section_ok ? p->section : NULL;
  return p->r->on_pair(p->ctx, p->line, section, name, value);
}

static int run(parse_t *p) {
  const em_ini_reader_t *r = p->r;
  p->max_line = r->max_line == 0 ? EM_INI_DEFAULT_LINE : r->max_line;
  if (p->max_line > EM_INI_MAX_LINE) {
    p->max_line = EM_INI_MAX_LINE;
  }
  p->max_bytes = r->max_bytes == 0 ? EM_INI_DEFAULT_BYTES : r->max_bytes;
  bool too_long = false;
  bool has_nul = false;
  errno = 0;
  while (next_line(p, &too_long, &has_nul)) {
    p->line++;
    int rc = handle_line(p, too_long, has_nul);
    if (rc != 0) {
      return rc;
    }
    errno = 0;
  }
  return -p->read_err;
}

/* A parse_t for one read of `r`'s callbacks over f or text[0..len). */
static int parse(FILE *f, const char *text, size_t len, const em_ini_reader_t *r, void *ctx) {
  parse_t p;
  memset(&p, 0, sizeof(p));
  p.r = r;
  p.ctx = ctx;
  p.f = f;
  p.text = text;
  p.len = len;
  return run(&p);
}

int em_ini_parse_file(FILE *f, const em_ini_reader_t *r, void *ctx) {
  if (f == NULL || r == NULL) {
    return -EINVAL;
  }
  return parse(f, NULL, 0, r, ctx);
}

int em_ini_parse_text(const char *text, size_t len, const em_ini_reader_t *r, void *ctx) {
  if ((text == NULL && len > 0) || r == NULL) {
    return -EINVAL;
  }
  return parse(NULL, text, len, r, ctx);
}
