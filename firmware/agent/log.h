/*
 * log.h - the agent's log: leveled lines on stderr, systemd style (no timestamps of our own;
 * the journal adds them). When stderr is the journal (JOURNAL_STREAM names it), each line
 * starts with the sd-daemon priority prefix "<N>" so journalctl shows the right priority.
 * Single-threaded: called from the loop only. Owns no resources.
 */
#ifndef EDGEMON_AGENT_LOG_H
#define EDGEMON_AGENT_LOG_H

#include <stdbool.h>

typedef enum {
  EM_LOG_ERROR = 3, /* Values are syslog priorities. */
  EM_LOG_WARN = 4,
  EM_LOG_INFO = 6,
  EM_LOG_DEBUG = 7,
} em_log_level_t;

/* Lines above `level` are dropped. Default EM_LOG_INFO. */
void em_log_set_level(em_log_level_t level);

/* Parses "error", "warn", "info", "debug". Returns 0 or -EINVAL. */
int em_log_parse_level(const char *name, em_log_level_t *out);

/* True when a line at `level` would be written (to skip building expensive messages). */
bool em_log_enabled(em_log_level_t level);

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
void em_log(em_log_level_t level, const char *fmt, ...);

#define EM_ERROR(...) em_log(EM_LOG_ERROR, __VA_ARGS__)
#define EM_WARN(...)  em_log(EM_LOG_WARN, __VA_ARGS__)
#define EM_INFO(...)  em_log(EM_LOG_INFO, __VA_ARGS__)
#define EM_DEBUG(...) em_log(EM_LOG_DEBUG, __VA_ARGS__)

#endif /* EDGEMON_AGENT_LOG_H */
