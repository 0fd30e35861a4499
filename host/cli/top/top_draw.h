/*
 * top_draw.h - one frame of `edgemon-cli top` as the bytes to write to the terminal: the
 * device's level and its last cause at the top, its process figures, a row per stage (p50 and
 * p99, the budget as a bar, a sparkline of the last minute's p99), and the keys at the bottom;
 * or the list of devices, or the help.
 *
 * Every line is cut to the screen's width and the frame fills the screen exactly (cursor home,
 * each line cleared to its end), so a frame never scrolls the terminal. Text a device sent
 * (ids, rule and stage names, reasons, the verdict) is written with printable ASCII kept and
 * every other byte as \xNN: no escape sequence, control character or wide glyph from the
 * network reaches the terminal. Block characters when utf8, ASCII otherwise; colours (view.h)
 * only when color.
 *
 * Owns nothing between calls; the frame is the caller's (em_top_frame_t).
 */
#ifndef EM_CLI_TOP_DRAW_H
#define EM_CLI_TOP_DRAW_H

#include "top_model.h"

#include <dict.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How the stage rows are ordered ('s' cycles through them in this order). */
typedef enum {
  EM_TOP_SORT_ORDER,  /* As the device first reported them. */
  EM_TOP_SORT_NAME,   /* By name. */
  EM_TOP_SORT_P99,    /* Slowest p99 first. */
  EM_TOP_SORT_BUDGET, /* Largest share of its budget first (stages without one last). */
  EM_TOP_SORT_COUNT_, /* Number of orders. */
} em_top_sort_t;

/* What the body of the screen shows. */
typedef enum {
  EM_TOP_VIEW_DEVICE, /* The selected device. */
  EM_TOP_VIEW_LIST,   /* Every device, one per row, to pick from. */
  EM_TOP_VIEW_HELP,   /* The keys and what the figures are. */
} em_top_view_t;

typedef struct {
  int rows; /* The screen's size. */
  int cols;
  bool utf8;  /* Block characters; else ASCII. */
  bool color; /* ANSI colours and attributes. */
  bool paused;
  em_top_sort_t sort;
  em_top_view_t view;
  size_t selected;   /* The device shown (index in the model). */
  size_t cursor;     /* The highlighted row of the list. */
  const char *where; /* The broker's URL, and the --device filter or NULL. */
  const char *filter;
  uint64_t now_ns;    /* CLOCK_REALTIME, for ages. */
  uint64_t malformed; /* Messages that did not decode, every device together. */
} em_top_screen_t;

/* A frame's bytes: a buffer the caller keeps between frames (zeroed to start). */
typedef struct {
  char *buf;
  size_t len;
  size_t cap;
} em_top_frame_t;

/* Names of the sort orders, as the footer shows them. */
const char *em_top_sort_name(em_top_sort_t sort);

/* Writes the frame of screen s over the model m into f (replacing what it held). dict gives
 * each device's birth: board, agent, model, budgets. Returns 0 or -ENOMEM. */
int em_top_draw(const em_top_screen_t *s, const em_top_model_t *m, em_dict_t *dict,
                em_top_frame_t *f);

/* Frees the frame's buffer; the frame may be used again. */
void em_top_frame_free(em_top_frame_t *f);

#endif /* EM_CLI_TOP_DRAW_H */
