/*
 * top.c - `edgemon-cli top`: a full-screen live view of one device at a time, refreshed every
 * second, in the manner of htop: the level and its last cause at the top, the process's
 * figures, a row per stage with its budget as a bar and a sparkline of the last minute.
 *
 * Subscribes to edgemon/v1/<device>/# (every device with a glob), keeps each device's birth in
 * a dict.h registry (aliases, budgets) and what the screen shows in top_model.h; draws with
 * top_draw.h and drives the terminal with top_term.h. Keys switch the device (next, previous,
 * a list), sort the stages, pause, show the help and quit. The terminal is put back on q,
 * Ctrl-C, SIGINT, SIGTERM, --duration and on every error path.
 *
 * Owns the broker session, the registry, the model, one decode scratch buffer and the frame.
 * Single-threaded: messages are taken in the callback inside em_cli_live_step(), keys and
 * frames between two steps.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "flight_verdict.h"
#include "live.h"
#include "top_draw.h"
#include "top_model.h"
#include "top_term.h"
#include "view.h"

#include <broker.h>
#include <dict.h>
#include <errno.h>
#include <getopt.h>
#include <langinfo.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEP_MS       50u         /* Longest wait for the network before looking at the keys. */
#define REFRESH_NS    1000000000u /* A new frame every second. */
#define VERDICT_ITEMS 2u          /* Figures, processes and functions per cause on screen. */
#define VERDICT_TOP   3u          /* Causes on screen. */

typedef struct {
  em_cli_live_t live; /* Broker session and --broker/--device/--duration. */
  em_dict_t *dict;
  em_top_model_t *model;
  void *scratch;
  uint64_t malformed; /* Messages that did not decode, every device together. */
  int error;          /* Set when the callback hits a fatal error (out of memory). */
  em_top_screen_t screen;
  char selected[EM_PROTO_MAX_NAME_BYTES + 1]; /* The device shown, by id ("": the first). */
  bool quit;
  bool dirty; /* Draw now, paused or not. */
} top_t;

static void usage(FILE *out) {
  fprintf(out,
          "usage: edgemon-cli top [--broker URL] [--device ID|GLOB] [--duration S]\n"
          "                       [--color auto|always|never]\n"
          "                       [--cafile FILE|--capath DIR] [--cert FILE --key FILE]\n"
          "                       [--insecure] [--credentials FILE]\n"
          "\n"
          "A full-screen live view of a device, refreshed every second: its level and the\n"
          "cause of the last change (the agent's verdict: top causes), the process's CPU, IPC,\n"
          "RSS and its slope, pressure, temperatures and the agent's own cost, and a row per\n"
          "stage: p50 and p99 against its budget as a bar, and a sparkline of the last minute's\n"
          "p99. A figure the device cannot measure is '-', never 0.\n"
          "\n" EM_CLI_USAGE_BROKER
          "  --device ID|GLOB one device, or those whose id matches a shell glob (orin-*)\n"
          "  --duration S     stop after S seconds (default: run until q)\n"
          "  --color WHEN     colours: auto (on a terminal, unless $NO_COLOR), always, "
          "never\n" EM_CLI_USAGE_CONN "\n" EM_CLI_USAGE_NUMBERS "\n"
          "Keys: n or Right next device, p or Left previous, l the list of devices (Up/Down,\n"
          "Enter), s sort the stages (order, name, p99, budget use), Space pause, ? or h help,\n"
          "q or Ctrl-C quit.\n"
          "\n"
          "Needs a terminal on stdin and stdout (for a line per message elsewhere: tail).\n"
          "It keeps the first 4096 devices it hears; others are not shown.\n"
          "Block characters in a UTF-8 locale, ASCII otherwise. Text a device sent is shown\n"
          "with every byte that is not printable ASCII as \\xNN.\n"
          "\n"
          "Exit: 0 when stopped by q, Ctrl-C, --duration or a signal; 2 bad arguments; 3 broker\n"
          "unreachable or connection lost; 4 stdin or stdout is not a terminal.\n");
}

/* The verdict as flight_verdict.h writes it (head and top causes), malloc'd; NULL when none
 * or out of memory. */
static char *verdict_text(const em_proto_verdict_t *v) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = v ? open_memstream(&buf, &len) : NULL;
  if (!f) {
    return NULL;
  }
  em_flight_verdict_print(f, v, "", VERDICT_TOP, VERDICT_ITEMS);
  if (fclose(f) != 0) {
    free(buf);
    return NULL;
  }
  return buf;
}

static void on_message(void *ctx, const char *topic, const uint8_t *payload, size_t len,
                       bool retained) {
  (void)retained;
  top_t *t = ctx;
  char id[EM_TOPIC_MAX_DEVICE + 1];
  const char *kind = NULL;
  if (em_topic_parse(topic, id, sizeof(id), &kind) != 0 || strncmp(kind, "cmd/", 4) == 0 ||
      strcmp(kind, "flight") == 0 || strcmp(kind, "profile") == 0) {
    return; /* Not telemetry, a command, or a record this view does not show. */
  }
  if (!em_cli_live_wants(&t->live, id) || t->error != 0) {
    return;
  }
  em_top_dev_t *view = em_top_model_device(t->model, id, true);
  if (!view) {
    return; /* Past EM_TOP_MAX_DEVICES (or out of memory): this device is not shown. */
  }
  em_msg_t msg;
  size_t off = 0;
  if (em_proto_decode(payload, len, &msg, t->scratch, EM_PROTO_SCRATCH_MAX, &off) != 0) {
    t->malformed++;
    view->malformed++;
    return;
  }
  em_device_t *dev = em_dict_device(t->dict, id, true);
  if (!dev || em_dict_update(dev, &msg) != 0) {
    t->error = -ENOMEM;
    return;
  }
  if (msg.kind == EM_MSG_DATA) {
    em_top_model_data(view, dev, &msg.u.data);
  } else if (msg.kind == EM_MSG_STATE) {
    char *why = verdict_text(msg.u.state.verdict);
    (void)em_top_model_state(view, &msg.u.state, why);
    free(why);
  } else if (msg.kind == EM_MSG_STATUS) {
    em_top_model_status(view, &msg.u.status);
  }
}

/* The index of the device shown, following its id as devices arrive (ids stay sorted). */
static size_t selected_index(top_t *t) {
  long i = em_top_model_index(t->model, t->selected);
  if (i >= 0) {
    return (size_t)i;
  }
  const em_top_dev_t *first = em_top_model_at(t->model, 0);
  if (first) {
    snprintf(t->selected, sizeof(t->selected), "%s", first->id);
  }
  return 0;
}

static void select_index(top_t *t, size_t i) {
  const em_top_dev_t *d = em_top_model_at(t->model, i);
  if (d) {
    snprintf(t->selected, sizeof(t->selected), "%s", d->id);
  }
}

/* Moves the selection by `step` devices (wrapping around). */
static void step_device(top_t *t, long step) {
  size_t n = em_top_model_count(t->model);
  if (n > 0) {
    long i = ((long)selected_index(t) + step % (long)n + (long)n) % (long)n;
    select_index(t, (size_t)i);
  }
}

static void list_key(top_t *t, int key) {
  size_t n = em_top_model_count(t->model);
  em_top_screen_t *s = &t->screen;
  if ((key == EM_TOP_KEY_UP || key == 'k') && s->cursor > 0) {
    s->cursor--;
  } else if ((key == EM_TOP_KEY_DOWN || key == 'j') && s->cursor + 1 < n) {
    s->cursor++;
  } else if (key == '\r' || key == '\n') {
    select_index(t, s->cursor);
    s->view = EM_TOP_VIEW_DEVICE;
  } else if (key == EM_TOP_KEY_ESC || key == 'l' || key == 'd') {
    s->view = EM_TOP_VIEW_DEVICE;
  }
}

static void on_key(top_t *t, int key) {
  em_top_screen_t *s = &t->screen;
  t->dirty = true;
  if (key == 'q' || key == 3) {
    t->quit = true;
  } else if (s->view == EM_TOP_VIEW_HELP) {
    s->view = EM_TOP_VIEW_DEVICE; /* Any other key closes the help. */
  } else if (s->view == EM_TOP_VIEW_LIST) {
    list_key(t, key);
  } else if (key == 'n' || key == '\t' || key == EM_TOP_KEY_RIGHT) {
    step_device(t, 1);
  } else if (key == 'p' || key == EM_TOP_KEY_BACKTAB || key == EM_TOP_KEY_LEFT) {
    step_device(t, -1);
  } else if (key == 'l' || key == 'd') {
    s->view = EM_TOP_VIEW_LIST;
    s->cursor = selected_index(t);
  } else if (key == 's') {
    s->sort = (em_top_sort_t)((s->sort + 1) % EM_TOP_SORT_COUNT_);
  } else if (key == ' ') {
    s->paused = !s->paused;
  } else if (key == '?' || key == 'h') {
    s->view = EM_TOP_VIEW_HELP;
  }
}

/* Draws a frame at the terminal's current size; `clear` first blanks the screen (after a
 * resize). Returns 0 or a negative errno. */
static int draw(top_t *t, em_top_term_t *term, em_top_frame_t *frame, bool clear) {
  em_top_screen_t *s = &t->screen;
  int rc = em_top_term_size(term, &s->rows, &s->cols);
  if (rc != 0) {
    return rc;
  }
  s->selected = selected_index(t);
  s->now_ns = em_cli_real_ns();
  s->malformed = t->malformed;
  rc = em_top_draw(s, t->model, t->dict, frame);
  if (rc == 0 && clear) {
    rc = em_top_term_write(term, "\x1b[2J", 4);
  }
  return rc == 0 ? em_top_term_write(term, frame->buf, frame->len) : rc;
}

/* The screen until q, a signal, --duration, or an error. Returns the exit code. */
static int run(top_t *t, em_top_term_t *term) {
  em_top_frame_t frame = {0};
  uint64_t next_ns = 0;
  int exit_code = EM_CLI_OK;
  int rc = 0;
  while (!t->quit && !em_cli_live_over(&t->live) && rc == 0 && t->error == 0) {
    exit_code = em_cli_live_step(&t->live, STEP_MS);
    if (exit_code != EM_CLI_OK) {
      break;
    }
    for (int key = em_top_term_key(term); key != EM_TOP_KEY_NONE; key = em_top_term_key(term)) {
      on_key(t, key);
    }
    bool resized = em_top_term_resized();
    uint64_t now = em_cli_mono_ns();
    if (resized || t->dirty || (!t->screen.paused && now >= next_ns)) {
      rc = draw(t, term, &frame, resized);
      t->dirty = false;
      next_ns = now + REFRESH_NS;
    }
  }
  em_top_term_leave(term);
  em_top_frame_free(&frame);
  if (exit_code != EM_CLI_OK) {
    /* Said on the alternate screen, which is gone: say it again where it stays. */
    if (isatty(STDERR_FILENO)) {
      em_cli_error("top", "lost the connection to the broker at %s", t->live.url);
    }
    return exit_code;
  }
  if (rc != 0 || t->error != 0) {
    em_cli_error("top", "%s", strerror(-(rc != 0 ? rc : t->error)));
    return EM_CLI_FAIL;
  }
  return EM_CLI_OK;
}

int em_cli_top(int argc, char **argv) {
  static const struct option opts[] = {
      EM_CLI_OPT_BROKER,  EM_CLI_OPT_DEVICE, EM_CLI_OPT_DURATION,
      EM_CLI_OPT_COLOR,   EM_CLI_OPTS_CONN,  {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  top_t t = {.live = {.cmd = "top"}};
  optind = 1;
  opterr = 0;
  int c = -1; /* top has no options but the shared ones (em_cli_live_next takes them all). */
  int rc = em_cli_live_next(&t.live, argc, argv, opts, &c);
  if (rc != EM_CLI_OK) {
    return rc;
  }
  if (c == 'h') {
    usage(stdout);
    return EM_CLI_OK;
  }
  if (c != -1) {
    return em_cli_bad_option("top", argv);
  }
  int exit_code = em_cli_live_check(&t.live, argc, argv);
  if (exit_code != EM_CLI_OK) {
    return exit_code;
  }
  if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
    em_cli_error("top",
                 "%s is not a terminal: top draws a full screen and reads keys (for a "
                 "line per message, use 'edgemon-cli tail')",
                 isatty(STDOUT_FILENO) ? "stdin" : "stdout");
    return EM_CLI_INPUT;
  }
  setlocale(LC_CTYPE, "");
  t.screen.utf8 = strcmp(nl_langinfo(CODESET), "UTF-8") == 0;
  t.screen.color = em_view_color();
  t.screen.where = t.live.url;
  t.screen.filter = t.live.device;
  t.scratch = malloc(EM_PROTO_SCRATCH_MAX);
  if (!t.scratch || em_dict_new(&t.dict) != 0 || em_top_model_new(&t.model) != 0) {
    em_cli_error("top", "out of memory");
    exit_code = EM_CLI_FAIL;
    goto out;
  }
  exit_code = em_cli_live_connect(&t.live, on_message, &t);
  if (exit_code == EM_CLI_OK) {
    exit_code = em_cli_live_subscribe(&t.live, "#");
  }
  if (exit_code != EM_CLI_OK) {
    goto out;
  }
  em_top_term_t term;
  rc = em_top_term_enter(&term, STDIN_FILENO, STDOUT_FILENO);
  if (rc != 0) {
    em_cli_error("top", "cannot set up the terminal: %s", strerror(-rc));
    exit_code = EM_CLI_INPUT;
    goto out;
  }
  exit_code = run(&t, &term);
out:
  em_cli_live_close(&t.live);
  em_top_model_free(t.model);
  em_dict_free(t.dict);
  free(t.scratch);
  return exit_code;
}
