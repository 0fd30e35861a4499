/*
 * fuzz_common.c - libFuzzer harness for the parsers of common/ that read untrusted text: the
 * duration, size, integer, bool and MQTT URL parsers (the input up to its first NUL), the
 * credentials file parser and the INI line reader (the whole input).
 *
 * What must hold for any bytes: no crash, no read past the input; a parser that fails leaves
 * its out-parameter alone; an accepted URL has a non-empty host without brackets and a port
 * in 1..65535; accepted credentials have a non-empty username; every INI callback gets a line
 * number that exists, NUL-terminated strings without a newline, and a non-empty message.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "edgemon/common/credentials.h"
#include "edgemon/common/ini.h"
#include "edgemon/common/parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
  int max_line; /* Lines in the input. */
  int last;     /* The last line a callback got: lines only go forward. */
} ini_check_t;

static void check_line(ini_check_t *c, int line) {
  if (line < 1 || line > c->max_line || line < c->last) {
    abort();
  }
  c->last = line;
}

static void check_text(const char *s) {
  if (s != NULL && strchr(s, '\n') != NULL) {
    abort();
  }
}

static int on_section(void *ctx, int line, const char *name) {
  check_line(ctx, line);
  check_text(name);
  return 0;
}

static int on_pair(void *ctx, int line, const char *section, const char *name, const char *value) {
  check_line(ctx, line);
  check_text(section);
  check_text(value);
  if (name == NULL || value == NULL || name[0] == '\0') {
    abort();
  }
  return 0;
}

static int on_error(void *ctx, int line, em_ini_problem_t kind, const char *text, const char *msg) {
  check_line(ctx, line);
  if ((int)kind < EM_INI_TOO_LONG || kind > EM_INI_HEADER_TRAILER || text == NULL ||
      msg[0] == '\0' || strchr(msg, '\n') != NULL) {
    abort();
  }
  return 0;
}

static void on_cred_error(void *ctx, int line, const char *msg) {
  const int *max_line = ctx;
  if (line < 0 || line > *max_line || msg[0] == '\0' || strchr(msg, '\n') != NULL) {
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *bytes = (const char *)data;
  int lines = 1;
  for (size_t i = 0; i < size; i++) {
    lines += bytes[i] == '\n';
  }

  char text[512];
  size_t n = strnlen(bytes, size < sizeof(text) - 1 ? size : sizeof(text) - 1);
  memcpy(text, bytes, n);
  text[n] = '\0';
  uint64_t v = 42;
  if (em_parse_duration_status(text, 0, &v) != EM_PARSE_OK && v != 42) {
    abort();
  }
  (void)em_parse_duration_status(text, EM_NS_PER_S, &v);
  v = 42;
  if (em_parse_size_status(text, 0, &v) != EM_PARSE_OK && v != 42) {
    abort();
  }
  v = 42;
  if (em_parse_u64(text, 10, 1000, &v) == 0 ? v < 10 || v > 1000 : v != 42) {
    abort();
  }
  bool b = false;
  (void)em_parse_bool(text, &b);
  em_mqtt_url_t u;
  const char *why = NULL;
  if (em_parse_mqtt_url(text, &u, &why) == 0) {
    if (u.host[0] == '\0' || strchr(u.host, '[') != NULL || u.port == 0 ||
        strlen(u.host) > EM_MQTT_URL_MAX_HOST) {
      abort();
    }
  } else if (why == NULL || why[0] == '\0') {
    abort();
  }

  em_credentials_t c;
  if (em_credentials_parse(bytes, size, &c, on_cred_error, &lines) == 0) {
    if (c.username[0] == '\0' || strlen(c.username) >= EM_CREDENTIALS_MAX_SECRET ||
        strlen(c.password) >= EM_CREDENTIALS_MAX_SECRET) {
      abort();
    }
  } else if (c.username[0] != '\0' || c.password[0] != '\0') {
    abort();
  }

  ini_check_t check = {.max_line = lines, .last = 0};
  em_ini_reader_t r = {.max_line = 200,
                       .max_bytes = 65536,
                       .on_section = on_section,
                       .on_pair = on_pair,
                       .on_error = on_error};
  int rc = em_ini_parse_text(bytes, size, &r, &check);
  if (rc != 0 && !(rc == -EFBIG && size > r.max_bytes)) {
    abort();
  }
  return 0;
}
