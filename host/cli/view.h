/*
 * view.h - how edgemon-cli writes figures for people: colours (on a terminal only), levels,
 * durations, clock times, the absent mark, and tables.
 *
 * Colour follows the usual conventions: --color=auto colours only when stdout is a terminal
 * and $NO_COLOR is unset or empty. Owns nothing but the cells of a table being filled
 * (em_view_grid_t, its caller's). Not thread-safe (one global colour switch).
 */
#ifndef EM_CLI_VIEW_H
#define EM_CLI_VIEW_H

#include <edgemon/proto.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Parses --color's argument ("auto", "always", "never") and sets the switch. Returns false
 * for anything else. */
bool em_view_set_color(const char *mode);

bool em_view_color(void);

/* ANSI sequences when colour is on, "" when off. */
const char *em_view_level_on(em_level_t level);
const char *em_view_bold(void);
const char *em_view_alert(void); /* For a figure over its budget. */
const char *em_view_off(void);

/* "HH:MM:SS.mmm" local time of a CLOCK_REALTIME ns value, into buf (at least 16 bytes). */
void em_view_clock(uint64_t real_ns, char *buf, size_t cap);

/* A duration in ms with 3 significant digits ("0.134", "8.30", "11.4", "152"). */
void em_view_ms(double ns, char *buf, size_t cap);

/* A level change's measured value or bound in the unit of its rule's type (the birth's
 * "rule"): "12.4 ms" for the latency rules (percentile, deadline, alive, flow), "1536.0 MiB"
 * for the memory caps (rss_cap, gpu_mem_cap), else the number as sent. */
void em_view_rule_figure(const char *rule_type, double v, char *buf, size_t cap);

/* An age such as "0.4s", "12s", "5m", "3h", "2d", or "-" for 0 (never seen). */
void em_view_age(uint64_t now_ns, uint64_t then_ns, char *buf, size_t cap);

/* Copies s into buf, cut to width columns with a trailing '~' when longer. */
void em_view_fit(const char *s, size_t width, char *buf, size_t cap);

/* Writes s as XML text or an attribute value: &, <, >, " escaped, control characters left
 * out (XML 1.0 cannot hold them). */
void em_view_xml(FILE *out, const char *s);

/* Writes s as a JSON string (quoted, escaped) to out. */
void em_view_json_str(FILE *out, const char *s);

/* What every one-line summary of a forensic record (a flight, a profile) opens with; all
 * strings borrowed for the call. */
typedef struct {
  const char *kind;   /* "flight", "profile": the JSON member and the word in the text. */
  const char *device; /* The device id. */
  uint32_t session;
  uint32_t number;
  uint64_t time_ns;  /* CLOCK_REALTIME of the record. */
  const char *cause; /* The trigger's cause name. */
  const char *level; /* The level name at the trigger. */
  const char *rule;  /* The rule that fired, or NULL. */
} em_view_record_t;

/*
 * Writes the opening of a record's summary line, which the caller finishes with its own
 * figures. JSON: `{"device":...,"KIND":{"session":..,"number":..,"time_ns":..,"cause":..,
 * "level":..,"rule":..` (rule null when absent), the caller adding `,...}}\n`. Text: the clock,
 * the device, "KIND #N" in bold, ": CAUSE to LEVEL[, rule R], ", the caller adding the rest.
 */
void em_view_record_head(FILE *out, const em_view_record_t *r, bool json);

/* A finite v as a JSON number with `decimals` digits after the point or, for decimals < 0,
 * 17 significant digits; anything else as null. */
void em_view_json_num(FILE *out, double v, int decimals);

/* One numeric member of a JSON object: its name and value. */
typedef struct {
  const char *name;
  double value;
} em_view_json_field_t;

/* Writes `,"NAME":VALUE` for each of the n fields (values as em_view_json_num). */
void em_view_json_fields(FILE *out, const em_view_json_field_t *fields, size_t n, int decimals);

/* Writes a table of rows x cols cells (row 0 the header, cells[r * cols + c]) to stdout with
 * each column as wide as its widest cell, two spaces apart; columns where left[c] is true are
 * left-aligned, the others right-aligned; the last column gets no trailing padding. */
void em_view_table(const char *const *cells, size_t rows, size_t cols, const bool *left);

/* A table filled cell by cell, then written with em_view_table(): rows x cols cells of
 * cell_bytes each (row 0 the header), owned by the grid until em_view_grid_deinit(). */
typedef struct {
  char *text;         /* rows * cols cells of cell_bytes, each a string ("" until set). */
  const char **cells; /* rows * cols pointers into text, as em_view_table() takes them. */
  size_t rows;
  size_t cols;
  size_t cell_bytes; /* Bytes of one cell, its terminating NUL included. */
} em_view_grid_t;

/* Allocates the cells of a rows x cols grid (rows and cols at least 1) and copies head (cols names,
 * NULL for an empty one; names cut to the cell) into row 0. Returns 0 or -ENOMEM (nothing held). */
int em_view_grid_init(em_view_grid_t *g, size_t rows, size_t cols, size_t cell_bytes,
                      const char *const *head);

/* The cell at row r, column c: cell_bytes the caller may write, always NUL-terminated. */
char *em_view_grid_cell(const em_view_grid_t *g, size_t r, size_t c);

/* Formats the cell at row r, column c with printf's rules, cut to the cell. */
__attribute__((format(printf, 4, 5))) void em_view_grid_set(const em_view_grid_t *g, size_t r,
                                                            size_t c, const char *fmt, ...);

/* Writes the grid to stdout through em_view_table() with the alignment left (cols entries). */
void em_view_grid_print(const em_view_grid_t *g, const bool *left);

/* Frees the cells; the grid may be initialised again. A zeroed grid is fine. */
void em_view_grid_deinit(em_view_grid_t *g);

#endif /* EM_CLI_VIEW_H */
