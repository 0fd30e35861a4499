/*
 * log.c - see log.h. Formats each line into one stack buffer and writes it with a single
 * write(2), so lines from the agent never interleave mid-line with another writer.
 */
#define _POSIX_C_SOURCE 200809L

#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static em_log_level_t threshold = EM_LOG_INFO;
static int journal = -1; /* -1: not checked yet. */

void em_log_set_level(em_log_level_t level) {
  threshold = level;
}

bool em_log_enabled(em_log_level_t level) {
  return level <= threshold;
}

int em_log_parse_level(const char *name, em_log_level_t *out) {
  static const struct {
    const char *name;
    em_log_level_t level;
  } names[] = {{"error", EM_LOG_ERROR},
               {"warn", EM_LOG_WARN},
               {"info", EM_LOG_INFO},
               {"debug", EM_LOG_DEBUG}};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    if (strcmp(name, names[i].name) == 0) {
      *out = names[i].level;
      return 0;
    }
  }
  return -EINVAL;
}

static const char *level_word(em_log_level_t level) {
  switch (level) {
  case EM_LOG_ERROR:
    return "error";
  case EM_LOG_WARN:
    return "warning";
  case EM_LOG_INFO:
    return "info";
  case EM_LOG_DEBUG:
    return "debug";
  }
  return "log";
}

void em_log(em_log_level_t level, const char *fmt, ...) {
  if (!em_log_enabled(level)) {
    return;
  }
  if (journal < 0) {
    journal = getenv("JOURNAL_STREAM") != NULL;
  }
  char line[1024];
  int n = journal ? snprintf(line, sizeof(line), "<%d>", (int)level)
                  : snprintf(line, sizeof(line), "%s: ", level_word(level));
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > sizeof(line) - 2) {
    len = sizeof(line) - 2;
  }
  line[len++] = '\n';
  ssize_t w = write(STDERR_FILENO, line, len);
  (void)w; /* Nowhere to report a failing stderr. */
}

bool em_log_limit_pass(em_log_limit_t *l, uint64_t now_ns, uint64_t interval_ns) {
  if (now_ns < l->next_ns) {
    l->suppressed++;
    return false;
  }
  l->next_ns = now_ns + interval_ns;
  return true;
}

bool em_log_limit_flush(em_log_limit_t *l, uint64_t now_ns, uint64_t interval_ns, uint64_t *held) {
  if (l->suppressed == 0 || now_ns < l->next_ns) {
    return false;
  }
  *held = l->suppressed;
  l->suppressed = 0;
  l->next_ns = now_ns + interval_ns;
  return true;
}

void em_log_limit_report(em_log_limit_t *l, uint64_t now_ns, const char *module, const char *what,
                         const char *counted) {
  uint64_t held = 0;
  if (em_log_limit_flush(l, now_ns, EM_LOG_LIMIT_NS, &held)) {
    EM_WARN("%s: %llu more %s in the last %u s%s", module, (unsigned long long)held, what,
            (unsigned)EM_LOG_LIMIT_S, counted);
  }
}
