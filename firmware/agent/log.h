/*
 * log.h - the agent's log: leveled lines on stderr, systemd style (no timestamps of our own;
 * the journal adds them). When stderr is the journal (JOURNAL_STREAM names it), each line
 * starts with the sd-daemon priority prefix "<N>" so journalctl shows the right priority.
 * Single-threaded: called from the loop only. Owns no resources.
 */
#ifndef EDGEMON_AGENT_LOG_H
#define EDGEMON_AGENT_LOG_H

#include <stdbool.h>
#include <stdint.h>

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

/*
 * A rate limit for one kind of line that input can repeat at will (a refused request): the
 * first line of a burst is written, the next ones within interval_ns are only counted, and
 * the count is reported once the interval is over. Zero-initialised = nothing logged yet.
 */
#define EM_LOG_LIMIT_S  10 /* The interval of every line a peer can cause: 10 s. */
#define EM_LOG_LIMIT_NS (UINT64_C(1000000000) * EM_LOG_LIMIT_S)

typedef struct {
  uint64_t next_ns;    /* Clock (any monotonic ns) before which lines are held back. */
  uint64_t suppressed; /* Lines held back since the last one written. */
} em_log_limit_t;

/* True when the caller may write its line now (the interval restarts); false when the line
 * is to be held back (counted). */
bool em_log_limit_pass(em_log_limit_t *l, uint64_t now_ns, uint64_t interval_ns);

/* True, with *held the lines held back (then reset), when the interval is over and some were
 * held back: the caller writes one summary line. Call it from a periodic place (the tick). */
bool em_log_limit_flush(em_log_limit_t *l, uint64_t now_ns, uint64_t interval_ns, uint64_t *held);

/* What the first line of a limited kind says about the others. */
#define EM_LOG_STR_(x) #x
#define EM_LOG_STR(x)  EM_LOG_STR_(x)
#define EM_LOG_HELD_BACK                                                                           \
  "; more within " EM_LOG_STR(EM_LOG_LIMIT_S) " s are counted, not logged one by one"

/*
 * em_log_limit_flush() over EM_LOG_LIMIT_NS with its summary line, at WARN:
 * "<module>: N more <what> in the last 10 s<counted>" (`counted`: " (figure)" or "").
 */
void em_log_limit_report(em_log_limit_t *l, uint64_t now_ns, const char *module, const char *what,
                         const char *counted);

#define EM_ERROR(...) em_log(EM_LOG_ERROR, __VA_ARGS__)
#define EM_WARN(...)  em_log(EM_LOG_WARN, __VA_ARGS__)
#define EM_INFO(...)  em_log(EM_LOG_INFO, __VA_ARGS__)
#define EM_DEBUG(...) em_log(EM_LOG_DEBUG, __VA_ARGS__)

#endif /* EDGEMON_AGENT_LOG_H */
