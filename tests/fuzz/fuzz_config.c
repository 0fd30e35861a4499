/*
 * fuzz_config.c - libFuzzer harness for the agent's config loader (firmware/agent/config.c).
 *
 * Any bytes as an INI file: em_config_load returns 0 or -EINVAL, never crashes, and every
 * error it reports names the file, a line that exists (0..lines in the input) and a one-line,
 * non-empty message; the error count matches the callbacks. A valid file has a target and
 * NUL-terminated strings. The same bytes (up to the first NUL) also go through the duration
 * and broker parsers.
 *
 * The input is written to one unlinked temp file, opened once and rewritten per run; the
 * loader opens it by its /proc/self/fd path, so nothing is left in /tmp.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
  const char *path;
  int max_line; /* Lines in the input. */
  int n;        /* Callbacks seen. */
} check_t;

static void on_error(void *ctx, const char *file, int line, const char *msg) {
  check_t *c = ctx;
  c->n++;
  if (strcmp(file, c->path) != 0 || line < 0 || line > c->max_line || msg[0] == '\0' ||
      strchr(msg, '\n') != NULL) {
    abort();
  }
}

/* The temp file's fd, created on the first run. */
static int temp_fd(char *path, size_t cap) {
  static int fd = -1;
  if (fd < 0) {
    char name[] = "/tmp/em-fuzz-config-XXXXXX";
    fd = mkstemp(name);
    if (fd < 0) {
      abort();
    }
    unlink(name);
  }
  snprintf(path, cap, "/proc/self/fd/%d", fd);
  return fd;
}

/* True when s has a NUL within cap bytes. */
static bool terminated(const char *s, size_t cap) {
  return memchr(s, '\0', cap) != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  int fd = temp_fd(path, sizeof(path));
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size) {
    abort();
  }
  check_t c = {path, 1, 0};
  for (size_t i = 0; i < size; i++) {
    c.max_line += data[i] == '\n';
  }

  em_config_t cfg;
  int n_errors = -1;
  int rc = em_config_load(path, &cfg, on_error, &c, &n_errors);
  if ((rc != 0 && rc != -EINVAL) || n_errors != c.n || (rc == 0) != (n_errors == 0)) {
    abort();
  }
  if (rc == 0) {
    if (cfg.target.kind == EM_TARGET_NONE || cfg.n_events == 0 ||
        cfg.n_events > EM_CONFIG_MAX_EVENTS || !terminated(cfg.device_id, sizeof(cfg.device_id)) ||
        !terminated(cfg.target.value, sizeof(cfg.target.value)) ||
        !terminated(cfg.client_id, sizeof(cfg.client_id)) ||
        !terminated(cfg.broker_host, sizeof(cfg.broker_host)) ||
        cfg.reconnect_max_ns < cfg.reconnect_min_ns ||
        (cfg.smaps_period_ns != 0 && cfg.smaps_period_ns < cfg.sample_period_ns)) {
      abort();
    }
  }

  char text[512];
  size_t n = size < sizeof(text) - 1 ? size : sizeof(text) - 1;
  memcpy(text, data, n);
  text[n] = '\0';
  uint64_t ns = 0;
  (void)em_config_parse_duration(text, &ns);
  char host[EM_CONFIG_MAX_PATH];
  uint16_t port = 0;
  if (em_config_parse_broker(text, host, sizeof(host), &port) == 0 &&
      (host[0] == '\0' || port == 0)) {
    abort();
  }
  return 0;
}
