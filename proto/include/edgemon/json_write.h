/*
 * json_write.h - the one JSON writer of edgemon: the string escaper every JSON printer of proto/
 * and host/ calls, and a writer of JSON text (members, arrays, strings, numbers) into a caller's
 * buffer or through a caller's sink.
 *
 * The escaper always writes '"' and '\' as \" and \\ and the other bytes below 0x20 as \u00XX
 * (lower-case hex); the flags add what some outputs have always written beyond that, so each
 * keeps its bytes: DEL as \u007f, JSON's two-character forms of control characters, and a
 * UTF-8 check that replaces a byte starting no well-formed sequence.
 *
 * Owns nothing, never allocates, reentrant. A writer's buffer and sink are borrowed.
 */
#ifndef EDGEMON_JSON_WRITE_H
#define EDGEMON_JSON_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What em_json_escape() adds to the escapes JSON requires. */
enum {
  EM_JSON_ESC_DEL = 1u << 0,      /* DEL (0x7f) as \u007f. */
  EM_JSON_ESC_SHORT = 1u << 1,    /* \b \f \n \r \t in their two-character forms. */
  EM_JSON_ESC_NEWLINE = 1u << 2,  /* \n alone in its two-character form. */
  EM_JSON_UTF8_ESCAPE = 1u << 3,  /* A byte starting no well-formed UTF-8 sequence: \ufffd. */
  EM_JSON_UTF8_REPLACE = 1u << 4, /* The same byte as U+FFFD itself (EF BF BD). */
  EM_JSON_CTRL_RAW = 1u << 5,     /* Control characters without a two-character form as they
                                   * are: not JSON, but a Prometheus label value (\\ \" \n). */
};

/* Receives n bytes of output (n may be 0). ctx is the caller's. */
typedef void (*em_json_sink_fn)(void *ctx, const char *s, size_t n);

/* A sink writing to the stdio stream ctx (a FILE *); its errors stay on the stream (ferror). */
void em_json_file_sink(void *ctx, const char *s, size_t n);

/* Writes s[0..n) escaped as the inside of a JSON string (no quotes) to put, in runs: every
 * unescaped run in one call. flags: EM_JSON_* above, or 0. s may hold NUL bytes (\u0000). */
void em_json_escape(const char *s, size_t n, unsigned flags, em_json_sink_fn put, void *ctx);

/* The length (1 to 4) of the well-formed UTF-8 sequence starting at s[0] (shortest form, no
 * surrogates, at most U+10FFFF) within s[0..n), n >= 1; 0 when there is none. */
size_t em_json_utf8_len(const uint8_t *s, size_t n);

/* A JSON writer. Into a buffer: {buf, cap} with sink NULL; it keeps counting past cap, so one
 * pass gives the length needed. Through a sink: sink and ctx set (buf and cap unused). Zero
 * the rest; flags are em_json_escape()'s for every string and key. */
typedef struct {
  char *buf;            /* Output when sink is NULL (borrowed). */
  size_t cap;           /* Bytes of buf. */
  size_t pos;           /* Bytes written so far, counted past cap too. */
  bool first;           /* No member or element written yet in the open object or array. */
  unsigned flags;       /* EM_JSON_* escapes of strings. */
  em_json_sink_fn sink; /* Output when set (borrowed). */
  void *ctx;            /* The sink's. */
} em_json_t;

/* n bytes as they are. */
void em_json_raw(em_json_t *w, const char *s, size_t n);
/* printf-formatted text of at most 63 bytes (numbers). */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
void em_json_fmt(em_json_t *w, const char *fmt, ...);
/* A JSON string, quoted and escaped (s NUL-terminated). */
void em_json_str(em_json_t *w, const char *s);
/* The same from s[0..n). */
void em_json_strn(em_json_t *w, const char *s, size_t n);
/* Starts a member "name": of the open object (a ',' before all but the first). */
void em_json_key(em_json_t *w, const char *name);
/* Opens ('{' or '[') or closes ('}' or ']') an object or array. */
void em_json_open(em_json_t *w, char c);
void em_json_close(em_json_t *w, char c);
/* The separator before an element of the open array. */
void em_json_elem(em_json_t *w);
/* A double in the shortest of %.15g..%.17g that reads back the same, with ".0" when that has
 * neither '.' nor an exponent (so it stays a float for readers that tell the two apart). */
void em_json_double(em_json_t *w, double v);

/* Ends a buffer's text: NUL-terminates it when cap > 0 (cut at cap - 1), *out_len = the
 * length needed without the NUL. Returns true when it fitted (pos < cap). */
bool em_json_finish(em_json_t *w, size_t *out_len);

#ifdef __cplusplus
}
#endif

#endif /* EDGEMON_JSON_WRITE_H */
