/*
 * top_term.h - the terminal of `edgemon-cli top`, driven with termios and ANSI escapes: raw
 * keyboard input, the alternate screen with the cursor hidden, the window's size and its
 * changes (SIGWINCH), and putting all of it back as it was.
 *
 * Owns the terminal's saved termios and the SIGWINCH disposition between em_top_term_enter()
 * and em_top_term_leave(). One terminal per process (the SIGWINCH flag is global);
 * single-threaded.
 */
#ifndef EM_CLI_TOP_TERM_H
#define EM_CLI_TOP_TERM_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <termios.h>

/* Keys em_top_term_key() reports beyond plain bytes (which it returns as 0..255). */
enum {
  EM_TOP_KEY_NONE = -1, /* Nothing typed. */
  EM_TOP_KEY_UP = 0x101,
  EM_TOP_KEY_DOWN,
  EM_TOP_KEY_LEFT,
  EM_TOP_KEY_RIGHT,
  EM_TOP_KEY_BACKTAB, /* Shift-Tab. */
  EM_TOP_KEY_ESC,     /* Escape alone, or a sequence this reader does not know. */
};

typedef struct {
  int in_fd;              /* The keyboard (a terminal). */
  int out_fd;             /* The screen (a terminal). */
  bool entered;           /* Between enter and leave. */
  struct termios saved;   /* The terminal's settings before enter. */
  struct sigaction winch; /* SIGWINCH's disposition before enter. */
  unsigned char pend[16]; /* Bytes read but not yet made into keys. */
  size_t n_pend;
} em_top_term_t;

/* Saves the terminal's settings, turns off echo, line editing and the signal keys (Ctrl-C
 * reaches the program as byte 3), switches to the alternate screen, hides the cursor and starts
 * counting SIGWINCH. Returns 0, or a negative errno (the terminal untouched) when in_fd or
 * out_fd is not a terminal (-ENOTTY) or its settings cannot be read or set. */
int em_top_term_enter(em_top_term_t *t, int in_fd, int out_fd);

/* Puts the terminal back as enter found it: attributes reset, cursor shown, the main screen
 * back, the saved termios, SIGWINCH's old disposition. Safe to call twice or without enter. */
void em_top_term_leave(em_top_term_t *t);

/* The window's size in rows and columns (each at least 1). Returns 0 or a negative errno. */
int em_top_term_size(const em_top_term_t *t, int *rows, int *cols);

/* True once after each SIGWINCH since the last call. */
bool em_top_term_resized(void);

/* The next key typed, without waiting: a byte (0..255), an EM_TOP_KEY_* code, or
 * EM_TOP_KEY_NONE when nothing is there. */
int em_top_term_key(em_top_term_t *t);

/* Writes len bytes of buf to the screen, all of them (retrying short writes and EINTR).
 * Returns 0 or a negative errno. */
int em_top_term_write(const em_top_term_t *t, const char *buf, size_t len);

#endif /* EM_CLI_TOP_TERM_H */
