/*
 * stop_signals.c - the host programs' stop signals, see stop_signals.h. Owns nothing; no state.
 */
#define _POSIX_C_SOURCE 200809L
#include "stop_signals.h"

#include <signal.h>
#include <string.h>

void em_stop_signals_catch(void (*on_stop)(int)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_stop;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
}
