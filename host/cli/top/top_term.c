/*
 * top_term.c - raw input, the alternate screen and SIGWINCH for `edgemon-cli top` (see
 * top_term.h). Only the escapes every VT100 descendant knows are used: CSI ?1049h/l (alternate
 * screen), CSI ?25l/h (cursor), CSI 0m (attributes).
 */
#define _POSIX_C_SOURCE 200809L
#include "top_term.h"

#include <errno.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define ENTER_SCREEN "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J"
#define LEAVE_SCREEN "\x1b[0m\x1b[?25h\x1b[?1049l"

static volatile sig_atomic_t winched;

static void on_winch(int sig) {
  (void)sig;
  winched = 1;
}

int em_top_term_enter(em_top_term_t *t, int in_fd, int out_fd) {
  if (!isatty(in_fd) || !isatty(out_fd)) {
    return -ENOTTY;
  }
  memset(t, 0, sizeof(*t));
  t->in_fd = in_fd;
  t->out_fd = out_fd;
  if (tcgetattr(in_fd, &t->saved) != 0) {
    return -errno;
  }
  struct termios raw = t->saved;
  raw.c_iflag &= ~(tcflag_t)(IXON | ICRNL | INLCR | IGNCR | BRKINT | ISTRIP);
  raw.c_lflag &= ~(tcflag_t)(ECHO | ICANON | ISIG | IEXTEN);
  raw.c_cc[VMIN] = 0;
  raw.c_cc[VTIME] = 0;
  if (tcsetattr(in_fd, TCSANOW, &raw) != 0) {
    return -errno;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_winch;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGWINCH, &sa, &t->winch);
  winched = 0;
  t->entered = true;
  (void)em_top_term_write(t, ENTER_SCREEN, sizeof(ENTER_SCREEN) - 1);
  return 0;
}

void em_top_term_leave(em_top_term_t *t) {
  if (!t->entered) {
    return;
  }
  t->entered = false;
  (void)em_top_term_write(t, LEAVE_SCREEN, sizeof(LEAVE_SCREEN) - 1);
  (void)tcsetattr(t->in_fd, TCSAFLUSH, &t->saved);
  sigaction(SIGWINCH, &t->winch, NULL);
}

int em_top_term_size(const em_top_term_t *t, int *rows, int *cols) {
  struct winsize ws;
  if (ioctl(t->out_fd, TIOCGWINSZ, &ws) != 0) {
    return -errno;
  }
  *rows = ws.ws_row > 0 ? ws.ws_row : 24;
  *cols = ws.ws_col > 0 ? ws.ws_col : 80;
  return 0;
}

bool em_top_term_resized(void) {
  bool was = winched != 0;
  winched = 0;
  return was;
}

/* Drops the first n pending bytes. */
static void consume(em_top_term_t *t, size_t n) {
  memmove(t->pend, t->pend + n, t->n_pend - n);
  t->n_pend -= n;
}

int em_top_term_key(em_top_term_t *t) {
  if (t->n_pend < sizeof(t->pend)) {
    ssize_t got = read(t->in_fd, t->pend + t->n_pend, sizeof(t->pend) - t->n_pend);
    t->n_pend += got > 0 ? (size_t)got : 0;
  }
  if (t->n_pend == 0) {
    return EM_TOP_KEY_NONE;
  }
  int c = t->pend[0];
  if (c != 0x1b) {
    consume(t, 1);
    return c;
  }
  /* ESC [ X or ESC O X: the arrows and Shift-Tab; anything else after ESC is dropped with it. */
  if (t->n_pend >= 3 && (t->pend[1] == '[' || t->pend[1] == 'O')) {
    int k = t->pend[2];
    consume(t, 3);
    switch (k) {
    case 'A':
      return EM_TOP_KEY_UP;
    case 'B':
      return EM_TOP_KEY_DOWN;
    case 'C':
      return EM_TOP_KEY_RIGHT;
    case 'D':
      return EM_TOP_KEY_LEFT;
    case 'Z':
      return EM_TOP_KEY_BACKTAB;
    default:
      /* A longer sequence (function keys: ESC [ 1 5 ~): skip to its final byte. */
      while (k >= 0x20 && k < 0x40 && t->n_pend > 0) {
        k = t->pend[0];
        consume(t, 1);
      }
      return EM_TOP_KEY_ESC;
    }
  }
  consume(t, t->n_pend >= 2 && t->pend[1] != 0x1b ? 2 : 1);
  return EM_TOP_KEY_ESC;
}

int em_top_term_write(const em_top_term_t *t, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(t->out_fd, buf, len);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return n < 0 ? -errno : -EIO;
    }
    buf += n;
    len -= (size_t)n;
  }
  return 0;
}
