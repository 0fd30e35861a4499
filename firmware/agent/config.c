/*
 * config.c - see config.h. Reads the agent's INI file with common/'s INI line reader
 * (edgemon/common/ini.h), validates every key with common/'s typed value parsers, reports every
 * problem as FILE:LINE: message, and fills in defaults (docs/CONFIG.md).
 *
 * Owns nothing after em_config_load() returns: the file is open only during the call, and
 * nothing is allocated (the reader keeps its line buffer on the stack). Single-threaded.
 *
 * The reader hands over one physical line at a time with its number (so load_t.line is the
 * line being handled), reports syntax problems itself (a line without '=' or ':', a header
 * without ']', a NUL byte, a line longer than LINE_MAX_CHARS) and goes on, so every problem is
 * reported, not just the first. An indented line is a key, never a continuation of the value
 * before it.
 *
 * Sections are tracked here (load_t.section) because after an unknown or malformed section
 * header the keys that follow belong to no known section and are skipped quietly: one mistake,
 * one error.
 */
#define _POSIX_C_SOURCE 200809L

#include "config.h"

#include "edgemon/common/credentials.h"
#include "edgemon/common/ini.h"
#include "edgemon/common/parse.h"
#include "edgemon/common/str.h"
#include "edgemon/proto.h"
#include "edgemon/ring.h"
#include "pmu.h"

#include <errno.h>
#include <grp.h>
#include <math.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <fcntl.h>

#define NS_PER_US  EM_NS_PER_US
#define NS_PER_MS  EM_NS_PER_MS
#define NS_PER_S   EM_NS_PER_S
#define NS_PER_MIN EM_NS_PER_MIN
#define NS_PER_H   EM_NS_PER_H

#define LINE_MAX_CHARS   1024      /* Longest physical line accepted, without its newline. */
#define FILE_MAX_BYTES   (1 << 20) /* Read no more: a config is a few KiB (and not /dev/zero). */
#define MSG_CAP          1024      /* Longest error message passed to the callback. */
#define QUOTE_MAX        48        /* Longest value quoted in a message before "...". */
#define MAX_PID          4194304   /* PID_MAX_LIMIT on 64-bit kernels. */
#define MAX_COMM         15        /* TASK_COMM_LEN - 1. */
#define MAX_CMDLINE      255
#define MAX_CLIENT_ID    64
#define SUGGEST_DISTANCE 2 /* Did-you-mean: the largest edit distance suggested. */

typedef enum {
  SEC_NONE = 0, /* Before the first section header. */
  SEC_AGENT,
  SEC_TARGET,
  SEC_MQTT,
  SEC_PMU,
  SEC_SPANS,
  SEC_DEGRADE,
  SEC_SPOOL,
  SEC_BUDGET_STAGE,   /* [budget.<stage>]: load_t.budget is the stage. */
  SEC_BUDGET_PROCESS, /* [budget.process]: load_t.budget is load_t.process. */
  SEC_INVALID,        /* After an unknown or malformed header: its keys are skipped. */
} section_t;

static const char *const section_names[] = {
    "",      "agent",   "target", "mqtt",           "pmu",
    "spans", "degrade", "spool",  "budget.<stage>", "budget.process"};
#define N_PLAIN_SECTIONS 8 /* Entries of section_names up to [spool], SEC_NONE included. */

typedef enum {
  K_DEVICE_ID,
  K_SAMPLE_PERIOD,
  K_SMAPS_PERIOD,
  K_SYSTEM_PERIOD,
  K_RUNTIME_DIR,
  K_BOARD,
  K_PROC_ROOT,
  K_SYS_ROOT,
  K_SENSORS_PERIOD,
  K_LOG_LEVEL,
  K_PID,
  K_PID_FILE,
  K_PROCESS_NAME,
  K_CMDLINE,
  K_CGROUP,
  K_BROKER,
  K_CLIENT_ID,
  K_QOS_DATA,
  K_QOS_STATE,
  K_KEEPALIVE,
  K_ACK_TIMEOUT,
  K_RECONNECT_MIN,
  K_RECONNECT_MAX,
  K_TLS_CA_FILE,
  K_TLS_CA_PATH,
  K_TLS_CERT_FILE,
  K_TLS_KEY_FILE,
  K_TLS_INSECURE,
  K_CREDENTIALS_FILE,
  K_EVENTS,
  K_SPAN_SOCKET,
  K_SOCKET_MODE,
  K_SOCKET_GROUP,
  K_ALLOW_UIDS,
  K_ALLOW_GIDS,
  K_MAX_STAGES,
  K_STAGE_IDLE,
  K_RINGS,
  K_RINGS_PER_PROCESS,
  K_RING_SLOTS,
  K_ENTER_WINDOWS,
  K_LEAVE_WINDOWS,
  K_DEGRADE_WINDOW,
  K_HOOK,
  K_HOOK_TIMEOUT,
  K_SPOOL_PATH,
  K_SPOOL_SIZE,
  K_SPOOL_SYNC,
  K_REPLAY_PER_TICK,
  /* Budget keys, from K_BUDGET_FIRST on: stored per section in budget_sec_t. */
  K_P50,
  K_P90,
  K_P99,
  K_P999,
  K_DEADLINE,
  K_MISS_RATIO,
  K_MISS_OVER,
  K_STALL,
  K_MIN_RATE,
  K_FLOW,
  K_FLOW_DEADLINE,
  K_STAGE_LEVEL,
  K_P50_LEVEL,
  K_P90_LEVEL,
  K_P99_LEVEL,
  K_P999_LEVEL,
  K_DEADLINE_LEVEL,
  K_MISS_RATIO_LEVEL,
  K_STALL_LEVEL,
  K_MIN_RATE_LEVEL,
  K_FLOW_LEVEL,
  K_RSS_CAP,
  K_RSS_SLOPE,
  K_RSS_SLOPE_HORIZON,
  K_PSI_CPU_SOME,
  K_PSI_MEMORY_SOME,
  K_PSI_MEMORY_FULL,
  K_PSI_IO_SOME,
  K_PSI_IO_FULL,
  K_TEMP_MAX,
  K_THROTTLE,
  K_PROCESS_LEVEL,
  K_RSS_CAP_LEVEL,
  K_RSS_SLOPE_LEVEL,
  K_PSI_CPU_SOME_LEVEL,
  K_PSI_MEMORY_SOME_LEVEL,
  K_PSI_MEMORY_FULL_LEVEL,
  K_PSI_IO_SOME_LEVEL,
  K_PSI_IO_FULL_LEVEL,
  K_TEMP_MAX_LEVEL,
  K_THROTTLE_LEVEL,
  K_COUNT,
} key_id_t;

#define K_BUDGET_FIRST    K_P50
#define N_BUDGET_KEYS     (K_COUNT - K_BUDGET_FIRST)
#define MAX_BUDGET_STAGES EM_CONFIG_MAX_RULES         /* Each [budget.<stage>] needs a rule. */
#define MAX_PENDING_RULES (MAX_BUDGET_STAGES * 9 + 8) /* Every rule key of every section. */

typedef struct load load_t;
typedef struct key_def key_def_t;

/* Validates `value` (non-empty, no control characters) and stores it, or reports why not. */
typedef void (*key_setter_fn)(load_t *ld, const key_def_t *k, const char *value);

struct key_def {
  key_id_t id;
  section_t section;
  const char *name;
  key_setter_fn set;
  uint64_t min_ns;     /* Durations: the accepted range; enter/leave_windows: as counts. */
  uint64_t max_ns;     /* 0 for keys that have no range here. */
  const char *example; /* A valid value, quoted in messages. */
};

/* The budget keys of one [budget.<stage>] (merged over repeated headers) or [budget.process]. */
typedef struct {
  char name[EM_CONFIG_MAX_STAGE]; /* The stage; "process" for [budget.process]. */
  int header_line;                /* Its first header; 0 = never given. */
  int line[N_BUDGET_KEYS];        /* Line each key was given on; 0 = not given. */
  bool ok[N_BUDGET_KEYS];         /* The key's value was valid and is in val. */
  union {
    uint64_t u; /* Durations (ns), sizes (bytes). */
    double d;   /* Ratios, rates, slopes, percentages. */
    em_level_t level;
  } val[N_BUDGET_KEYS];
  size_t n_flow; /* flow: the stages, when ok[K_FLOW]. */
  char flow[EM_CONFIG_MAX_FLOW][EM_CONFIG_MAX_STAGE];
} budget_sec_t;

/* State of one em_config_load() call. */
struct load {
  const char *file;
  em_config_t *cfg;
  em_config_error_fn on_error;
  void *ctx;
  int n_errors;
  int line;                /* 1-based number of the line being handled. */
  section_t section;       /* Section of the current line. */
  int key_line[K_COUNT];   /* Line each key was first given on; 0 = not given. */
  bool key_ok[K_COUNT];    /* The key's value was valid and is stored in cfg. */
  const key_def_t *target; /* The [target] key given first; NULL = none yet. */
  char label[48];          /* The current section's name in messages: "budget.infer". */
  budget_sec_t *budget;    /* The current budget section, or NULL. */
  budget_sec_t process;    /* [budget.process] */
  budget_sec_t stages[MAX_BUDGET_STAGES];
  size_t n_stages;
};

/* [pmu] events when the file does not set it: what every Linux kernel offers. */
static const char *const default_events[] = {
    "cycles",        "instructions", "cache-references", "cache-misses",   "branch-instructions",
    "branch-misses", "task-clock",   "context-switches", "cpu-migrations", "page-faults",
};
#define N_DEFAULT_EVENTS (sizeof(default_events) / sizeof(default_events[0]))

/* ---- small helpers ---------------------------------------------------------------------- */

static bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

static bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

static bool is_id_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || is_digit(c) || c == '_' || c == '.' ||
         c == ':' || c == '-';
}

/* Quotes `s` into out for a message (edgemon/common/str.h). */
static const char *quote(char *out, size_t cap, const char *s) {
  return em_str_quote(out, cap, s, QUOTE_MAX);
}

/*
 * Levenshtein distance between a and b, or SIZE_MAX when either is longer than the small
 * fixed rows (no suggestion is worth it then).
 */
static size_t edit_distance(const char *a, const char *b) {
  enum { MAXLEN = 48 };
  size_t la = strlen(a);
  size_t lb = strlen(b);
  if (la > MAXLEN || lb > MAXLEN) {
    return SIZE_MAX;
  }
  size_t prev[MAXLEN + 1];
  size_t cur[MAXLEN + 1];
  for (size_t j = 0; j <= lb; j++) {
    prev[j] = j;
  }
  for (size_t i = 1; i <= la; i++) {
    cur[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      size_t best = prev[j - 1] + cost;
      if (prev[j] + 1 < best) {
        best = prev[j] + 1;
      }
      if (cur[j - 1] + 1 < best) {
        best = cur[j - 1] + 1;
      }
      cur[j] = best;
    }
    memcpy(prev, cur, (lb + 1) * sizeof(prev[0]));
  }
  return prev[lb];
}

/* True when `candidate` is close enough to `word` to suggest, and closer than *best. */
static bool closer(const char *word, const char *candidate, size_t *best) {
  size_t d = edit_distance(word, candidate);
  if (d == 0 || d > SUGGEST_DISTANCE || d >= strlen(word) || d >= *best) {
    return false;
  }
  *best = d;
  return true;
}

/* Formats a duration exactly, in the largest unit that divides it ("100ms", "30s", "1h"). */
static const char *format_duration(char *out, size_t cap, uint64_t ns) {
  static const struct {
    uint64_t ns;
    const char *unit;
    uint64_t from; /* Use this unit only from this value up ("90s", not "1m30s"). */
  } units[] = {
      {NS_PER_H, "h", NS_PER_H},    {NS_PER_MIN, "m", 2 * NS_PER_MIN}, {NS_PER_S, "s", NS_PER_S},
      {NS_PER_MS, "ms", NS_PER_MS}, {NS_PER_US, "us", NS_PER_US},
  };
  for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
    if (ns >= units[i].from && ns % units[i].ns == 0) {
      snprintf(out, cap, "%llu%s", (unsigned long long)(ns / units[i].ns), units[i].unit);
      return out;
    }
  }
  snprintf(out, cap, "%lluns", (unsigned long long)ns);
  return out;
}

#if defined(__GNUC__) || defined(__clang__)
#define EM_PRINTF(fmt_arg, first_arg) __attribute__((format(printf, fmt_arg, first_arg)))
#else
#define EM_PRINTF(fmt_arg, first_arg)
#endif

/* Counts one problem at `line` and hands it to the caller's callback. */
EM_PRINTF(3, 4) static void report(load_t *ld, int line, const char *fmt, ...) {
  ld->n_errors++;
  if (ld->on_error == NULL) {
    return;
  }
  char msg[MSG_CAP];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  ld->on_error(ld->ctx, ld->file, line, msg);
}

/* ---- value parsers ----------------------------------------------------------------------- */

int em_config_parse_duration(const char *text, uint64_t *out_ns) {
  if (text == NULL || out_ns == NULL) {
    return -EINVAL;
  }
  return em_parse_duration(text, 0, out_ns);
}

/* A whole decimal number (digits only, no sign) that fits a uint64_t. */
static bool parse_u64(const char *text, uint64_t *out) {
  return em_parse_u64(text, 0, UINT64_MAX, out) == 0;
}

/*
 * The broker URL (edgemon/common/parse.h) into host[0..host_cap): NULL on success, else the
 * end of a message that starts with "broker 'URL' ".
 */
static const char *parse_broker(const char *url, char *host, size_t host_cap, uint16_t *port,
                                bool *tls) {
  em_mqtt_url_t u;
  const char *why = NULL;
  if (em_parse_mqtt_url(url, &u, &why) != 0) {
    return why;
  }
  if (strlen(u.host) >= host_cap) {
    return "has a host name that is too long";
  }
  em_str_copy(host, host_cap, u.host);
  *port = u.port;
  *tls = u.tls;
  return NULL;
}

int em_config_parse_broker(const char *url, char *host, size_t host_cap, uint16_t *port) {
  if (url == NULL || host == NULL || host_cap == 0 || port == NULL) {
    return -EINVAL;
  }
  bool tls = false;
  return parse_broker(url, host, host_cap, port, &tls) == NULL ? 0 : -EINVAL;
}

/* ---- key setters: each validates one value and stores it, or reports why not ------------ */

/* Marks key k as stored. */
static void accept_key(load_t *ld, const key_def_t *k) {
  if (k->id >= K_BUDGET_FIRST) {
    ld->budget->ok[k->id - K_BUDGET_FIRST] = true;
  } else {
    ld->key_ok[k->id] = true;
  }
}

/* Where the line of key k is kept: per section for budget keys, per file for the others. */
static int *key_line_slot(load_t *ld, const key_def_t *k) {
  if (k->id >= K_BUDGET_FIRST) {
    return &ld->budget->line[k->id - K_BUDGET_FIRST];
  }
  return &ld->key_line[k->id];
}

/* Reports a value that em_config_parse_duration() rejected, saying why. */
static void report_bad_duration(load_t *ld, const key_def_t *k, const char *value,
                                em_parse_status_t why) {
  char q[QUOTE_MAX + 4];
  quote(q, sizeof(q), value);
  switch (why) {
  case EM_PARSE_NO_UNIT:
    report(ld, ld->line, "%s needs a unit, e.g. %s", k->name, k->example);
    return;
  case EM_PARSE_BAD_UNIT:
    report(ld, ld->line, "%s '%s' has an unknown unit; use ns, us, ms, s, m or h", k->name, q);
    return;
  case EM_PARSE_NEGATIVE:
    report(ld, ld->line, "%s '%s' cannot be negative", k->name, q);
    return;
  case EM_PARSE_OVERFLOW:
    report(ld, ld->line, "%s '%s' is too large", k->name, q);
    return;
  case EM_PARSE_NOT_NUMBER:
  case EM_PARSE_OK:
    break;
  }
  report(ld, ld->line, "%s '%s' is not a duration; use a whole number and a unit, e.g. %s", k->name,
         q, k->example);
}

/* Parses a duration and checks it against the key's range; false after reporting. */
static bool parse_duration_in_range(load_t *ld, const key_def_t *k, const char *value,
                                    uint64_t *out_ns) {
  uint64_t ns = 0;
  em_parse_status_t why = em_parse_duration_status(value, 0, &ns);
  if (why != EM_PARSE_OK) {
    report_bad_duration(ld, k, value, why);
    return false;
  }
  if (ns < k->min_ns || ns > k->max_ns) {
    char q[QUOTE_MAX + 4];
    char lo[32];
    char hi[32];
    report(ld, ld->line, "%s '%s' is out of range %s..%s", k->name, quote(q, sizeof(q), value),
           format_duration(lo, sizeof(lo), k->min_ns), format_duration(hi, sizeof(hi), k->max_ns));
    return false;
  }
  *out_ns = ns;
  return true;
}

/* sample_period, reconnect_min, reconnect_max: a duration in the key's range. */
static void set_duration(load_t *ld, const key_def_t *k, const char *value) {
  uint64_t ns = 0;
  if (!parse_duration_in_range(ld, k, value, &ns)) {
    return;
  }
  em_config_t *cfg = ld->cfg;
  switch (k->id) {
  case K_SAMPLE_PERIOD:
    cfg->sample_period_ns = ns;
    cfg->sample_period_set = true;
    break;
  case K_SENSORS_PERIOD:
    cfg->sensors_period_ns = ns;
    break;
  case K_SYSTEM_PERIOD:
    cfg->system_period_ns = ns;
    break;
  case K_RECONNECT_MIN:
    cfg->reconnect_min_ns = ns;
    break;
  case K_RECONNECT_MAX:
    cfg->reconnect_max_ns = ns;
    break;
  case K_DEGRADE_WINDOW:
    cfg->window_ns = ns;
    break;
  case K_HOOK_TIMEOUT:
    cfg->hook_timeout_ns = ns;
    break;
  case K_SPOOL_SYNC:
    cfg->spool_sync_ns = ns;
    break;
  case K_ACK_TIMEOUT:
    cfg->ack_timeout_ns = ns;
    break;
  case K_STAGE_IDLE:
    cfg->stage_idle_ns = ns;
    break;
  default:
    return;
  }
  accept_key(ld, k);
}

/* ack_timeout: "off" turns the PUBACK watch off, else a duration. */
static void set_ack_timeout(load_t *ld, const key_def_t *k, const char *value) {
  if (strcmp(value, "off") == 0) {
    ld->cfg->ack_timeout_ns = 0;
    accept_key(ld, k);
    return;
  }
  set_duration(ld, k, value);
}

/* smaps_period: "0" or "off" turns smaps_rollup reading off, else a duration. */
static void set_smaps_period(load_t *ld, const key_def_t *k, const char *value) {
  uint64_t ns = 0;
  if (strcmp(value, "0") == 0 || strcmp(value, "off") == 0) {
    ns = 0;
  } else if (!parse_duration_in_range(ld, k, value, &ns)) {
    return;
  }
  ld->cfg->smaps_period_ns = ns;
  accept_key(ld, k);
}

/* keepalive: a duration of whole seconds, 5s..1h, stored in seconds. */
static void set_keepalive(load_t *ld, const key_def_t *k, const char *value) {
  uint64_t ns = 0;
  if (!parse_duration_in_range(ld, k, value, &ns)) {
    return;
  }
  if (ns % NS_PER_S != 0) {
    char q[QUOTE_MAX + 4];
    report(ld, ld->line, "%s '%s' must be whole seconds, e.g. %s", k->name,
           quote(q, sizeof(q), value), k->example);
    return;
  }
  ld->cfg->keepalive_s = (uint32_t)(ns / NS_PER_S);
  accept_key(ld, k);
}

/* Checks an identifier (device_id, board): 1..63 characters of [A-Za-z0-9_.:-]. */
static bool check_id(load_t *ld, const key_def_t *k, const char *value) {
  char q[QUOTE_MAX + 4];
  if (strlen(value) >= EM_CONFIG_MAX_ID) {
    report(ld, ld->line, "%s '%s' is longer than %d characters", k->name,
           quote(q, sizeof(q), value), EM_CONFIG_MAX_ID - 1);
    return false;
  }
  for (const char *p = value; *p != '\0'; p++) {
    if (!is_id_char(*p)) {
      report(ld, ld->line, "%s '%s' may use only letters, digits and _ . : -", k->name,
             quote(q, sizeof(q), value));
      return false;
    }
  }
  return true;
}

static void set_device_id(load_t *ld, const key_def_t *k, const char *value) {
  if (!check_id(ld, k, value)) {
    return;
  }
  em_str_copy(ld->cfg->device_id, sizeof(ld->cfg->device_id), value);
  accept_key(ld, k);
}

static void set_board(load_t *ld, const key_def_t *k, const char *value) {
  if (!check_id(ld, k, value)) {
    return;
  }
  em_str_copy(ld->cfg->board, sizeof(ld->cfg->board), value);
  accept_key(ld, k);
}

/* Checks an absolute path that fits EM_CONFIG_MAX_PATH. */
static bool check_path(load_t *ld, const key_def_t *k, const char *value) {
  char q[QUOTE_MAX + 4];
  if (value[0] != '/') {
    report(ld, ld->line, "%s '%s' must be an absolute path", k->name, quote(q, sizeof(q), value));
    return false;
  }
  if (strlen(value) >= EM_CONFIG_MAX_PATH) {
    report(ld, ld->line, "%s is longer than %d characters", k->name, EM_CONFIG_MAX_PATH - 1);
    return false;
  }
  return true;
}

static void set_runtime_dir(load_t *ld, const key_def_t *k, const char *value) {
  if (!check_path(ld, k, value)) {
    return;
  }
  em_str_copy(ld->cfg->runtime_dir, sizeof(ld->cfg->runtime_dir), value);
  accept_key(ld, k);
}

static void set_proc_root(load_t *ld, const key_def_t *k, const char *value) {
  if (!check_path(ld, k, value)) {
    return;
  }
  if (k->id == K_SYS_ROOT) {
    em_str_copy(ld->cfg->sys_root, sizeof(ld->cfg->sys_root), value);
  } else {
    em_str_copy(ld->cfg->proc_root, sizeof(ld->cfg->proc_root), value);
  }
  accept_key(ld, k);
}

static void set_log_level(load_t *ld, const key_def_t *k, const char *value) {
  em_log_level_t level = EM_LOG_INFO;
  if (em_log_parse_level(value, &level) != 0) {
    char q[QUOTE_MAX + 4];
    report(ld, ld->line, "%s '%s' must be one of error, warn, info, debug", k->name,
           quote(q, sizeof(q), value));
    return;
  }
  ld->cfg->log_level = level;
  accept_key(ld, k);
}

/*
 * [target] keys: the first one given wins; a second one is a conflict. Each kind then checks
 * its own value.
 */
static void set_target(load_t *ld, const key_def_t *k, const char *value) {
  static const struct {
    key_id_t key;
    em_target_kind_t kind;
  } kinds[] = {{K_PID, EM_TARGET_PID},
               {K_PID_FILE, EM_TARGET_PIDFILE},
               {K_PROCESS_NAME, EM_TARGET_COMM},
               {K_CMDLINE, EM_TARGET_CMDLINE},
               {K_CGROUP, EM_TARGET_CGROUP}};
  if (ld->target != NULL) {
    report(ld, ld->line, "[target] %s conflicts with %s on line %d", k->name, ld->target->name,
           ld->key_line[ld->target->id]);
    return;
  }
  ld->target = k;

  char q[QUOTE_MAX + 4];
  quote(q, sizeof(q), value);
  size_t len = strlen(value);
  em_config_t *cfg = ld->cfg;
  uint64_t pid = 0;
  switch (k->id) {
  case K_PID:
    if (!parse_u64(value, &pid) || pid < 1 || pid > MAX_PID) {
      report(ld, ld->line, "pid '%s' must be a number from 1 to %d", q, MAX_PID);
      return;
    }
    cfg->target.pid = (int32_t)pid;
    break;
  case K_PID_FILE:
  case K_CGROUP:
    if (!check_path(ld, k, value)) {
      return;
    }
    break;
  case K_PROCESS_NAME:
    if (len > MAX_COMM) {
      report(ld, ld->line,
             "process_name '%s' is longer than %d characters (the kernel's comm limit)", q,
             MAX_COMM);
      return;
    }
    break;
  case K_CMDLINE:
    if (len > MAX_CMDLINE) {
      report(ld, ld->line, "cmdline is longer than %d characters", MAX_CMDLINE);
      return;
    }
    break;
  default:
    return;
  }
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
    if (kinds[i].key == k->id) {
      cfg->target.kind = kinds[i].kind;
    }
  }
  if (k->id != K_PID) {
    em_str_copy(cfg->target.value, sizeof(cfg->target.value), value);
  }
  accept_key(ld, k);
}

static void set_broker(load_t *ld, const key_def_t *k, const char *value) {
  em_config_t *cfg = ld->cfg;
  char host[sizeof(cfg->broker_host)];
  uint16_t port = 0;
  bool tls = false;
  const char *why = parse_broker(value, host, sizeof(host), &port, &tls);
  if (why != NULL) {
    char q[QUOTE_MAX + 4];
    report(ld, ld->line, "%s '%s' %s", k->name, quote(q, sizeof(q), value), why);
    return;
  }
  memcpy(cfg->broker_host, host, sizeof(host));
  cfg->broker_port = port;
  cfg->tls = tls;
  accept_key(ld, k);
}

/*
 * tls_ca_file, tls_ca_path, tls_cert_file, tls_key_file, credentials_file: absolute paths.
 * Whether the files are there, and private where they must be, is checked in finish().
 */
static void set_mqtt_path(load_t *ld, const key_def_t *k, const char *value) {
  if (!check_path(ld, k, value)) {
    return;
  }
  em_config_t *cfg = ld->cfg;
  char *dst = NULL;
  switch (k->id) {
  case K_TLS_CA_FILE:
    dst = cfg->tls_ca_file;
    break;
  case K_TLS_CA_PATH:
    dst = cfg->tls_ca_path;
    break;
  case K_TLS_CERT_FILE:
    dst = cfg->tls_cert_file;
    break;
  case K_TLS_KEY_FILE:
    dst = cfg->tls_key_file;
    break;
  case K_CREDENTIALS_FILE:
    dst = cfg->credentials_file;
    break;
  default:
    return;
  }
  em_str_copy(dst, EM_CONFIG_MAX_PATH, value);
  accept_key(ld, k);
}

/* tls_insecure: true/false, yes/no, on/off, 1/0. */
static void set_tls_insecure(load_t *ld, const key_def_t *k, const char *value) {
  if (em_parse_bool(value, &ld->cfg->tls_insecure) == 0) {
    accept_key(ld, k);
    return;
  }
  char q[QUOTE_MAX + 4];
  report(ld, ld->line, "%s '%s' must be true or false", k->name, quote(q, sizeof(q), value));
}

/* client_id: 1..64 characters of printable ASCII without spaces. */
static void set_client_id(load_t *ld, const key_def_t *k, const char *value) {
  char q[QUOTE_MAX + 4];
  if (strlen(value) > MAX_CLIENT_ID) {
    report(ld, ld->line, "%s '%s' is longer than %d characters", k->name,
           quote(q, sizeof(q), value), MAX_CLIENT_ID);
    return;
  }
  for (const char *p = value; *p != '\0'; p++) {
    unsigned char c = (unsigned char)*p;
    if (c <= 0x20 || c >= 0x7f) {
      report(ld, ld->line, "%s '%s' may use only printable ascii without spaces", k->name,
             quote(q, sizeof(q), value));
      return;
    }
  }
  em_str_copy(ld->cfg->client_id, sizeof(ld->cfg->client_id), value);
  accept_key(ld, k);
}

/* qos_data, qos_state: 0 or 1. */
static void set_qos(load_t *ld, const key_def_t *k, const char *value) {
  if (strcmp(value, "0") != 0 && strcmp(value, "1") != 0) {
    char q[QUOTE_MAX + 4];
    report(ld, ld->line, "%s '%s' must be 0 or 1 (qos 2 is not supported)", k->name,
           quote(q, sizeof(q), value));
    return;
  }
  int qos = value[0] - '0';
  if (k->id == K_QOS_DATA) {
    ld->cfg->qos_data = qos;
  } else {
    ld->cfg->qos_state = qos;
  }
  accept_key(ld, k);
}

/* [spans] socket: the span socket's path; default <runtime_dir>/spans.sock. */
static void set_span_socket(load_t *ld, const key_def_t *k, const char *value) {
  if (!check_path(ld, k, value)) {
    return;
  }
  em_str_copy(ld->cfg->span_socket, sizeof(ld->cfg->span_socket), value);
  accept_key(ld, k);
}

/* [spans] socket_mode: octal permission bits, owner read-write at least. */
static void set_socket_mode(load_t *ld, const key_def_t *k, const char *value) {
  char q[QUOTE_MAX + 4];
  unsigned mode = 0;
  size_t len = strlen(value);
  bool ok = len >= 3 && len <= 4;
  for (size_t i = 0; ok && i < len; i++) {
    ok = value[i] >= '0' && value[i] <= '7';
    mode = mode * 8 + (unsigned)(value[i] - '0');
  }
  if (!ok || (mode & 0600) != 0600 || mode > 0777) {
    report(ld, ld->line, "%s '%s' must be octal permissions with owner read-write, e.g. %s",
           k->name, quote(q, sizeof(q), value), k->example);
    return;
  }
  ld->cfg->span_socket_mode = mode;
  accept_key(ld, k);
}

/*
 * A user (uids) or group (gids) by number or name, looked up in the system's databases.
 * Returns false (and reports) when there is no such user or group.
 */
static bool resolve_id(load_t *ld, const key_def_t *k, const char *name, bool group,
                       uint32_t *out) {
  uint64_t n = 0;
  if (parse_u64(name, &n)) {
    if (n >= UINT32_MAX) {
      report(ld, ld->line, "%s: id %s is out of range", k->name, name);
      return false;
    }
    *out = (uint32_t)n;
    return true;
  }
  char buf[4096];
  if (group) {
    struct group gr, *res = NULL;
    if (getgrnam_r(name, &gr, buf, sizeof(buf), &res) == 0 && res) {
      *out = (uint32_t)res->gr_gid;
      return true;
    }
  } else {
    struct passwd pw, *res = NULL;
    if (getpwnam_r(name, &pw, buf, sizeof(buf), &res) == 0 && res) {
      *out = (uint32_t)res->pw_uid;
      return true;
    }
  }
  char q[QUOTE_MAX + 4];
  report(ld, ld->line, "%s: no %s named '%s' on this system", k->name, group ? "group" : "user",
         quote(q, sizeof(q), name));
  return false;
}

/* [spans] socket_group: the group the socket file is given (with socket_mode). */
static void set_socket_group(load_t *ld, const key_def_t *k, const char *value) {
  uint32_t gid = 0;
  if (!resolve_id(ld, k, value, true, &gid)) {
    return;
  }
  ld->cfg->span_socket_gid = (int64_t)gid;
  accept_key(ld, k);
}

/* [spans] allow_uids / allow_gids: comma or space separated users or groups. */
static void set_allow_ids(load_t *ld, const key_def_t *k, const char *value) {
  bool group = k->id == K_ALLOW_GIDS;
  uint32_t ids[EM_CONFIG_MAX_IDS];
  size_t n = 0;
  bool bad = false;
  for (const char *p = value; *p != '\0';) {
    while (*p == ',' || is_space(*p)) {
      p++;
    }
    const char *start = p;
    while (*p != '\0' && *p != ',' && !is_space(*p)) {
      p++;
    }
    size_t len = (size_t)(p - start);
    if (len == 0) {
      continue;
    }
    char name[64];
    if (len >= sizeof(name) || n == EM_CONFIG_MAX_IDS) {
      report(ld, ld->line, "%s: %s", k->name,
             n == EM_CONFIG_MAX_IDS ? "more than 16 entries" : "an entry is too long");
      return;
    }
    memcpy(name, start, len);
    name[len] = '\0';
    bad = !resolve_id(ld, k, name, group, &ids[n++]) || bad;
  }
  if (bad) {
    return;
  }
  if (group) {
    memcpy(ld->cfg->allow_gids, ids, n * sizeof(ids[0]));
    ld->cfg->n_allow_gids = n;
  } else {
    memcpy(ld->cfg->allow_uids, ids, n * sizeof(ids[0]));
    ld->cfg->n_allow_uids = n;
  }
  accept_key(ld, k);
}

/* [spans] max_stages: stages tracked at once, 1..64. */
static void set_max_stages(load_t *ld, const key_def_t *k, const char *value) {
  uint64_t n = 0;
  if (!parse_u64(value, &n) || n < 1 || n > EM_PROTO_MAX_STAGES) {
    char q[QUOTE_MAX + 4];
    report(ld, ld->line, "%s '%s' must be a whole number from 1 to %u", k->name,
           quote(q, sizeof(q), value), EM_PROTO_MAX_STAGES);
    return;
  }
  ld->cfg->max_stages = (uint32_t)n;
  accept_key(ld, k);
}

/* [spans] ring_slots: the slot count suggested to clients, a power of two in the ring's range. */
static void set_ring_slots(load_t *ld, const key_def_t *k, const char *value) {
  uint64_t n = 0;
  if (!parse_u64(value, &n) || n < EM_RING_MIN_SLOTS || n > EM_RING_MAX_SLOTS ||
      (n & (n - 1)) != 0) {
    char q[QUOTE_MAX + 4];
    report(ld, ld->line, "%s '%s' must be a power of two from %u to %u", k->name,
           quote(q, sizeof(q), value), EM_RING_MIN_SLOTS, EM_RING_MAX_SLOTS);
    return;
  }
  ld->cfg->ring_slots = (uint32_t)n;
  accept_key(ld, k);
}

/* Reports an unknown event, with a suggestion when one is close, and the valid names: the
 * generic names of collect/pmu.c (em_pmu_generic_name), perf's aliases left out. */
static void report_unknown_event(load_t *ld, const char *name) {
  char valid[512];
  size_t used = 0;
  size_t best = SIZE_MAX;
  const char *hint = NULL;
  bool alias = false;
  const char *generic = NULL;
  for (size_t i = 0; (generic = em_pmu_generic_name(i, &alias)) != NULL; i++) {
    if (alias) {
      continue;
    }
    int n = snprintf(valid + used, sizeof(valid) - used, "%s%s", used > 0 ? ", " : "", generic);
    if (n > 0 && (size_t)n < sizeof(valid) - used) {
      used += (size_t)n;
    }
    if (closer(name, generic, &best)) {
      hint = generic;
    }
  }
  char q[QUOTE_MAX + 4];
  quote(q, sizeof(q), name);
  if (hint != NULL) {
    report(ld, ld->line, "unknown pmu event '%s'; did you mean '%s'? valid: %s", q, hint, valid);
  } else {
    report(ld, ld->line, "unknown pmu event '%s'; valid: %s", q, valid);
  }
}

/*
 * How an event name reads (the agent resolves it at start, pmu_events.h): a generic perf name
 * (collect/pmu.c's table, aliases included), a raw code "r<hex>", "pmu/terms/" (one PMU, e.g.
 * armv8_pmuv3_0/event=0x11/), or a kernel PMU event name ("l1d_cache_refill": [a-z0-9_.] with a
 * '_'). Returns false for anything else.
 */
static bool event_syntax_ok(const char *name) {
  size_t len = strlen(name);
  if (len == 0) {
    return false;
  }
  if (name[0] == 'r' && len > 1) {
    bool hex = true;
    for (size_t i = 1; i < len && hex; i++) {
      char ch = name[i];
      hex = is_digit(ch) || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
    }
    if (hex) {
      return true;
    }
  }
  const char *slash = strchr(name, '/');
  if (slash) { /* pmu/terms/: a PMU name, terms without blanks, a closing slash. */
    return slash > name && len > (size_t)(slash - name) + 2 && name[len - 1] == '/' &&
           strchr(slash + 1, '/') == name + len - 1;
  }
  /* A bare kernel event name as the arm_pmuv3 driver spells them: l1d_cache_refill. Other
   * PMUs' names (x86's "mem-loads") go through pmu/name/. */
  for (size_t i = 0; i < len; i++) {
    char ch = name[i];
    if (!((ch >= 'a' && ch <= 'z') || is_digit(ch) || ch == '_' || ch == '.')) {
      return false;
    }
  }
  return strchr(name, '_') != NULL;
}

/*
 * [pmu] events: comma-separated, at most EM_CONFIG_MAX_EVENTS, no duplicates. Generic names are
 * checked here (an unknown one is an error with a suggestion: "cycels" is a typo); kernel event
 * names (with a '_'), raw codes and pmu/terms/ are checked for syntax here and
 * resolved against /sys/bus/event_source at start, where one the board lacks is absent with
 * its reason. The commas inside pmu/a=1,b=2/ do not split.
 */
static void set_events(load_t *ld, const key_def_t *k, const char *value) {
  char names[EM_CONFIG_MAX_EVENTS][EM_CONFIG_MAX_EVENT_NAME];
  size_t n = 0;
  bool bad = false;
  bool too_many = false;
  const char *p = value;
  while (*p != '\0') {
    while (*p == ',' || is_space(*p)) {
      p++;
    }
    if (*p == '\0') {
      break;
    }
    const char *start = p;
    bool in_terms = false;
    while (*p != '\0' && (in_terms || (*p != ',' && !is_space(*p)))) {
      if (*p == '/') {
        in_terms = !in_terms;
      }
      p++;
    }
    char name[EM_CONFIG_MAX_EVENT_NAME + 4];
    size_t len = (size_t)(p - start);
    char q[QUOTE_MAX + 4];
    if (len >= EM_CONFIG_MAX_EVENT_NAME) {
      memcpy(name, start, sizeof(name) - 1);
      name[sizeof(name) - 1] = '\0';
      report(ld, ld->line, "pmu event '%s...' is longer than %d characters",
             quote(q, sizeof(q), name), EM_CONFIG_MAX_EVENT_NAME - 1);
      bad = true;
      continue;
    }
    memcpy(name, start, len);
    name[len] = '\0';

    /* Not generic and not a kernel name, raw code or pmu/terms/: unknown, with a suggestion
     * ("cycels": did you mean cycles). */
    if (!em_pmu_is_generic(name) && !event_syntax_ok(name)) {
      report_unknown_event(ld, name);
      bad = true;
      continue;
    }
    bool dup = false;
    for (size_t i = 0; i < n; i++) {
      dup = dup || strcmp(names[i], name) == 0;
    }
    if (dup) {
      report(ld, ld->line, "pmu event '%s' is listed twice", quote(q, sizeof(q), name));
      bad = true;
      continue;
    }
    if (n == EM_CONFIG_MAX_EVENTS) {
      too_many = true;
      continue;
    }
    em_str_copy(names[n++], sizeof(names[0]), name);
  }
  if (too_many) {
    report(ld, ld->line, "%s lists more than %d events", k->name, EM_CONFIG_MAX_EVENTS);
    bad = true;
  }
  if (n == 0 && !bad) {
    report(ld, ld->line, "%s lists no event; e.g. %s", k->name, k->example);
    return;
  }
  if (bad) {
    return;
  }
  em_config_t *cfg = ld->cfg;
  memset(cfg->events, 0, sizeof(cfg->events));
  memcpy(cfg->events, names, sizeof(names[0]) * n);
  cfg->n_events = n;
  cfg->events_set = true;
  accept_key(ld, k);
}

/* ---- [degrade] and [budget.*] setters --------------------------------------------------- */

/* [degrade] enter_windows, leave_windows, [spool] replay_per_tick, [spans] rings and
 * rings_per_process: a whole number in the key's range (min_ns..max_ns). */
static void set_window_count(load_t *ld, const key_def_t *k, const char *value) {
  uint64_t n = 0;
  if (!parse_u64(value, &n) || n < k->min_ns || n > k->max_ns) {
    char q[QUOTE_MAX + 4];
    report(ld, ld->line, "%s '%s' must be a whole number from %llu to %llu", k->name,
           quote(q, sizeof(q), value), (unsigned long long)k->min_ns,
           (unsigned long long)k->max_ns);
    return;
  }
  if (k->id == K_ENTER_WINDOWS) {
    ld->cfg->enter_windows = (uint32_t)n;
  } else if (k->id == K_LEAVE_WINDOWS) {
    ld->cfg->leave_windows = (uint32_t)n;
  } else if (k->id == K_RINGS) {
    ld->cfg->rings = (uint32_t)n;
  } else if (k->id == K_RINGS_PER_PROCESS) {
    ld->cfg->rings_per_process = (uint32_t)n;
  } else {
    ld->cfg->replay_per_tick = (uint32_t)n;
  }
  accept_key(ld, k);
}

/* [degrade] hook: the absolute path of the command run on every change of level. */
static void set_hook(load_t *ld, const key_def_t *k, const char *value) {
  if (!check_path(ld, k, value)) {
    return;
  }
  em_str_copy(ld->cfg->hook, sizeof(ld->cfg->hook), value);
  accept_key(ld, k);
}

/* Parses a decimal number ("15", "0.05", "1e3"): starts with a digit, finite, nothing after. */
static bool parse_number(const char *text, double *out) {
  if (!is_digit(text[0])) {
    return false;
  }
  char *end = NULL;
  errno = 0;
  double d = strtod(text, &end);
  if (end == text || *end != '\0' || errno != 0 || !isfinite(d)) {
    return false;
  }
  *out = d;
  return true;
}

/* Budget durations (p99, deadline, miss_over, stall, rss_slope_horizon), in the key's range. */
static void set_budget_duration(load_t *ld, const key_def_t *k, const char *value) {
  uint64_t ns = 0;
  if (!parse_duration_in_range(ld, k, value, &ns)) {
    return;
  }
  ld->budget->val[k->id - K_BUDGET_FIRST].u = ns;
  accept_key(ld, k);
}

/* level and <rule>_level: WARN, DEGRADED or CRITICAL, in any case. */
static void set_budget_level(load_t *ld, const key_def_t *k, const char *value) {
  static const em_parse_enum_t levels[] = {
      {"WARN", EM_LEVEL_WARN}, {"DEGRADED", EM_LEVEL_DEGRADED}, {"CRITICAL", EM_LEVEL_CRITICAL}};
  char q[QUOTE_MAX + 4];
  quote(q, sizeof(q), value);
  int level = 0;
  if (em_parse_enum(value, levels, sizeof(levels) / sizeof(levels[0]), true, &level) == 0) {
    ld->budget->val[k->id - K_BUDGET_FIRST].level = (em_level_t)level;
    accept_key(ld, k);
    return;
  }
  if (strcasecmp(value, "NOMINAL") == 0) {
    report(ld, ld->line, "%s '%s' is not allowed: a rule raises WARN, DEGRADED or CRITICAL",
           k->name, q);
    return;
  }
  report(ld, ld->line, "%s '%s' must be WARN, DEGRADED or CRITICAL", k->name, q);
}

/*
 * Budget numbers: miss_ratio (0 < r < 1), min_rate and rss_slope (> 0, at most 1e6), the
 * psi_* keys (percent, 0 < p <= 100).
 */
static void set_budget_number(load_t *ld, const key_def_t *k, const char *value) {
  double d = 0;
  bool ok = parse_number(value, &d);
  const char *want = NULL;
  switch (k->id) {
  case K_MISS_RATIO:
    ok = ok && d > 0.0 && d < 1.0;
    want = "a number above 0 and below 1";
    break;
  case K_MIN_RATE:
  case K_RSS_SLOPE:
    ok = ok && d > 0.0 && d <= 1e6;
    want = "a number above 0 and at most 1000000";
    break;
  case K_TEMP_MAX:
    ok = ok && d > 0.0 && d <= 200.0;
    want = "degrees C above 0 and at most 200";
    break;
  default: /* psi_* */
    ok = ok && d > 0.0 && d <= 100.0;
    want = "a percentage above 0 and at most 100";
    break;
  }
  if (!ok) {
    char q[QUOTE_MAX + 4];
    report(ld, ld->line, "%s '%s' must be %s, e.g. %s", k->name, quote(q, sizeof(q), value), want,
           k->example);
    return;
  }
  ld->budget->val[k->id - K_BUDGET_FIRST].d = d;
  accept_key(ld, k);
}

/* throttle = on: a rule that the board is not throttled (thermal trip, frequency cap, power
 * limit); the figure is 1 while throttled, so the bound is 0.5. */
static void set_budget_on(load_t *ld, const key_def_t *k, const char *value) {
  if (strcmp(value, "on") != 0) {
    char q[QUOTE_MAX + 4];
    report(ld, ld->line, "%s '%s' must be on (leave the key out for no rule)", k->name,
           quote(q, sizeof(q), value));
    return;
  }
  ld->budget->val[k->id - K_BUDGET_FIRST].d = 0.5;
  accept_key(ld, k);
}

/*
 * A whole number and a unit (B, KiB, MiB, GiB) within min..max bytes into *out. Reports the
 * problem and returns false otherwise; range_text names the range for the message.
 */
static bool parse_size(load_t *ld, const key_def_t *k, const char *value, uint64_t min,
                       uint64_t max, const char *range_text, uint64_t *out) {
  char q[QUOTE_MAX + 4];
  quote(q, sizeof(q), value);
  uint64_t bytes = 0;
  switch (em_parse_size_status(value, 0, &bytes)) {
  case EM_PARSE_OK:
    if (bytes < min || bytes > max) {
      report(ld, ld->line, "%s '%s' is out of range %s", k->name, q, range_text);
      return false;
    }
    *out = bytes;
    return true;
  case EM_PARSE_NO_UNIT:
    report(ld, ld->line, "%s needs a unit (B, KiB, MiB or GiB), e.g. %s", k->name, k->example);
    return false;
  case EM_PARSE_BAD_UNIT:
    report(ld, ld->line, "%s '%s' has an unknown unit; use B, KiB, MiB or GiB", k->name, q);
    return false;
  case EM_PARSE_OVERFLOW:
    report(ld, ld->line, "%s '%s' is out of range %s", k->name, q, range_text);
    return false;
  case EM_PARSE_NEGATIVE:
  case EM_PARSE_NOT_NUMBER:
    break;
  }
  report(ld, ld->line, "%s '%s' is not a size; use a whole number and a unit, e.g. %s", k->name, q,
         k->example);
  return false;
}

/* rss_cap: 1MiB..1024GiB. */
static void set_budget_size(load_t *ld, const key_def_t *k, const char *value) {
  uint64_t bytes;
  if (parse_size(ld, k, value, 1ull << 20, 1ull << 40, "1MiB..1024GiB", &bytes)) {
    ld->budget->val[k->id - K_BUDGET_FIRST].u = bytes;
    accept_key(ld, k);
  }
}

/* [spool] size: 64KiB..1GiB (spool.h's limits). */
static void set_spool_size(load_t *ld, const key_def_t *k, const char *value) {
  if (parse_size(ld, k, value, 64ull << 10, 1ull << 30, "64KiB..1GiB", &ld->cfg->spool_bytes)) {
    accept_key(ld, k);
  }
}

/* [spool] path: a file path, or "off" for no spool (memory only while the broker is away). */
static void set_spool_path(load_t *ld, const key_def_t *k, const char *value) {
  if (strcmp(value, "off") != 0 && !check_path(ld, k, value)) {
    return;
  }
  em_str_copy(ld->cfg->spool_path, sizeof(ld->cfg->spool_path), value);
  accept_key(ld, k);
}

/*
 * flow: 2..EM_CONFIG_MAX_FLOW distinct stage names, comma-separated, in the order a frame
 * passes them. They need not include the section's own name.
 */
static void set_budget_flow(load_t *ld, const key_def_t *k, const char *value) {
  char q[QUOTE_MAX + 4];
  char stages[EM_CONFIG_MAX_FLOW][EM_CONFIG_MAX_STAGE];
  memset(stages, 0, sizeof(stages));
  size_t n = 0;
  bool bad = false;
  const char *p = value;
  for (;;) {
    while (is_space(*p)) {
      p++;
    }
    const char *start = p;
    while (*p != '\0' && *p != ',') {
      p++;
    }
    const char *end = p;
    while (end > start && is_space(end[-1])) {
      end--;
    }
    size_t len = (size_t)(end - start);
    char name[EM_CONFIG_MAX_STAGE + QUOTE_MAX];
    size_t keep = len < sizeof(name) - 1 ? len : sizeof(name) - 1;
    memcpy(name, start, keep);
    name[keep] = '\0';
    if (len == 0) {
      report(ld, ld->line, "%s has an empty stage name; list stages with commas, e.g. %s", k->name,
             k->example);
      bad = true;
    } else if (len >= EM_CONFIG_MAX_STAGE) {
      report(ld, ld->line, "%s stage name '%s' is longer than %d characters", k->name,
             quote(q, sizeof(q), name), EM_CONFIG_MAX_STAGE - 1);
      bad = true;
    } else {
      bool ok = true;
      for (size_t i = 0; i < len; i++) {
        ok = ok && is_id_char(name[i]);
      }
      bool dup = false;
      for (size_t i = 0; ok && i < n && i < EM_CONFIG_MAX_FLOW; i++) {
        dup = dup || strcmp(stages[i], name) == 0;
      }
      if (!ok) {
        report(ld, ld->line, "%s stage name '%s' may use only letters, digits and _ . : -", k->name,
               quote(q, sizeof(q), name));
        bad = true;
      } else if (dup) {
        report(ld, ld->line, "%s lists stage '%s' twice", k->name, name);
        bad = true;
      } else if (n < EM_CONFIG_MAX_FLOW) {
        memcpy(stages[n], name, len + 1);
      }
    }
    n++;
    if (*p == '\0') {
      break;
    }
    p++; /* The comma. */
  }
  if (n > EM_CONFIG_MAX_FLOW) {
    report(ld, ld->line, "%s lists %zu stages; at most %d", k->name, n, EM_CONFIG_MAX_FLOW);
    return;
  }
  if (bad) {
    return;
  }
  if (n < 2) {
    report(ld, ld->line, "%s needs at least 2 stages, in order, e.g. %s", k->name, k->example);
    return;
  }
  budget_sec_t *b = ld->budget;
  memcpy(b->flow, stages, sizeof(stages));
  b->n_flow = n;
  accept_key(ld, k);
}

/* Every key, by section. Index = key_id_t. */
static const key_def_t keys[K_COUNT] = {
    {K_DEVICE_ID, SEC_AGENT, "device_id", set_device_id, 0, 0, "jetson-07"},
    {K_SAMPLE_PERIOD, SEC_AGENT, "sample_period", set_duration, NS_PER_MS, 60 * NS_PER_S, "100ms"},
    {K_SMAPS_PERIOD, SEC_AGENT, "smaps_period", set_smaps_period, NS_PER_MS, NS_PER_H, "5s"},
    {K_SYSTEM_PERIOD, SEC_AGENT, "system_period", set_duration, NS_PER_MS, NS_PER_H, "1s"},
    {K_RUNTIME_DIR, SEC_AGENT, "runtime_dir", set_runtime_dir, 0, 0, "/run/edgemon"},
    {K_BOARD, SEC_AGENT, "board", set_board, 0, 0, "generic"},
    {K_PROC_ROOT, SEC_AGENT, "proc_root", set_proc_root, 0, 0, "/proc"},
    {K_SYS_ROOT, SEC_AGENT, "sys_root", set_proc_root, 0, 0, "/"},
    {K_SENSORS_PERIOD, SEC_AGENT, "sensors_period", set_duration, 10 * NS_PER_MS, NS_PER_H, "1s"},
    {K_LOG_LEVEL, SEC_AGENT, "log_level", set_log_level, 0, 0, "info"},
    {K_PID, SEC_TARGET, "pid", set_target, 0, 0, "1234"},
    {K_PID_FILE, SEC_TARGET, "pid_file", set_target, 0, 0, "/run/inference.pid"},
    {K_PROCESS_NAME, SEC_TARGET, "process_name", set_target, 0, 0, "python3"},
    {K_CMDLINE, SEC_TARGET, "cmdline", set_target, 0, 0, "detect.py"},
    {K_CGROUP, SEC_TARGET, "cgroup", set_target, 0, 0, "/sys/fs/cgroup/inference.service"},
    {K_BROKER, SEC_MQTT, "broker", set_broker, 0, 0, "mqtt://127.0.0.1:1883"},
    {K_CLIENT_ID, SEC_MQTT, "client_id", set_client_id, 0, 0, "edgemon-jetson-07"},
    {K_QOS_DATA, SEC_MQTT, "qos_data", set_qos, 0, 0, "0"},
    {K_QOS_STATE, SEC_MQTT, "qos_state", set_qos, 0, 0, "1"},
    {K_KEEPALIVE, SEC_MQTT, "keepalive", set_keepalive, 5 * NS_PER_S, NS_PER_H, "30s"},
    {K_ACK_TIMEOUT, SEC_MQTT, "ack_timeout", set_ack_timeout, NS_PER_S, NS_PER_H, "10s"},
    {K_RECONNECT_MIN, SEC_MQTT, "reconnect_min", set_duration, 100 * NS_PER_MS, NS_PER_H, "500ms"},
    {K_RECONNECT_MAX, SEC_MQTT, "reconnect_max", set_duration, 100 * NS_PER_MS, NS_PER_H, "30s"},
    {K_TLS_CA_FILE, SEC_MQTT, "tls_ca_file", set_mqtt_path, 0, 0, "/etc/edgemon/ca.crt"},
    {K_TLS_CA_PATH, SEC_MQTT, "tls_ca_path", set_mqtt_path, 0, 0, "/etc/ssl/certs"},
    {K_TLS_CERT_FILE, SEC_MQTT, "tls_cert_file", set_mqtt_path, 0, 0, "/etc/edgemon/device.crt"},
    {K_TLS_KEY_FILE, SEC_MQTT, "tls_key_file", set_mqtt_path, 0, 0, "/etc/edgemon/device.key"},
    {K_TLS_INSECURE, SEC_MQTT, "tls_insecure", set_tls_insecure, 0, 0, "false"},
    {K_CREDENTIALS_FILE, SEC_MQTT, "credentials_file", set_mqtt_path, 0, 0,
     "/etc/edgemon/mqtt.credentials"},
    {K_EVENTS, SEC_PMU, "events", set_events, 0, 0, "cycles, instructions"},
    {K_SPAN_SOCKET, SEC_SPANS, "socket", set_span_socket, 0, 0, "/run/edgemon/spans.sock"},
    {K_SOCKET_MODE, SEC_SPANS, "socket_mode", set_socket_mode, 0, 0, "0660"},
    {K_SOCKET_GROUP, SEC_SPANS, "socket_group", set_socket_group, 0, 0, "video"},
    {K_ALLOW_UIDS, SEC_SPANS, "allow_uids", set_allow_ids, 0, 0, "0, robot"},
    {K_ALLOW_GIDS, SEC_SPANS, "allow_gids", set_allow_ids, 0, 0, "video"},
    {K_MAX_STAGES, SEC_SPANS, "max_stages", set_max_stages, 0, 0, "32"},
    {K_STAGE_IDLE, SEC_SPANS, "stage_idle", set_duration, NS_PER_MS, 24 * NS_PER_H, "60s"},
    {K_RINGS, SEC_SPANS, "rings", set_window_count, 1, EM_CONFIG_MAX_RINGS, "64"},
    {K_RINGS_PER_PROCESS, SEC_SPANS, "rings_per_process", set_window_count, 1, EM_CONFIG_MAX_RINGS,
     "16"},
    {K_RING_SLOTS, SEC_SPANS, "ring_slots", set_ring_slots, 0, 0, "1024"},
    {K_ENTER_WINDOWS, SEC_DEGRADE, "enter_windows", set_window_count, 1, 100, "3"},
    {K_LEAVE_WINDOWS, SEC_DEGRADE, "leave_windows", set_window_count, 1, 1000, "5"},
    {K_DEGRADE_WINDOW, SEC_DEGRADE, "window", set_duration, NS_PER_MS, NS_PER_H, "1s"},
    {K_HOOK, SEC_DEGRADE, "hook", set_hook, 0, 0, "/usr/local/bin/on-level"},
    {K_HOOK_TIMEOUT, SEC_DEGRADE, "hook_timeout", set_duration, 100 * NS_PER_MS, 10 * NS_PER_MIN,
     "5s"},
    {K_SPOOL_PATH, SEC_SPOOL, "path", set_spool_path, 0, 0, "/var/lib/edgemon/spool"},
    {K_SPOOL_SIZE, SEC_SPOOL, "size", set_spool_size, 0, 0, "16MiB"},
    {K_SPOOL_SYNC, SEC_SPOOL, "sync_interval", set_duration, 100 * NS_PER_MS, NS_PER_H, "5s"},
    {K_REPLAY_PER_TICK, SEC_SPOOL, "replay_per_tick", set_window_count, 1, 10000, "32"},
#define STAGE_DURATION(id, name, example)                                                          \
  { id, SEC_BUDGET_STAGE, name, set_budget_duration, NS_PER_US, NS_PER_H, example }
#define BUDGET_LEVEL(id, sec, name)                                                                \
  { id, sec, name, set_budget_level, 0, 0, "DEGRADED" }
    STAGE_DURATION(K_P50, "p50", "20ms"),
    STAGE_DURATION(K_P90, "p90", "30ms"),
    STAGE_DURATION(K_P99, "p99", "40ms"),
    STAGE_DURATION(K_P999, "p999", "60ms"),
    STAGE_DURATION(K_DEADLINE, "deadline", "100ms"),
    {K_MISS_RATIO, SEC_BUDGET_STAGE, "miss_ratio", set_budget_number, 0, 0, "0.05"},
    STAGE_DURATION(K_MISS_OVER, "miss_over", "40ms"),
    {K_STALL, SEC_BUDGET_STAGE, "stall", set_budget_duration, NS_PER_MS, NS_PER_H, "500ms"},
    {K_MIN_RATE, SEC_BUDGET_STAGE, "min_rate", set_budget_number, 0, 0, "15"},
    {K_FLOW, SEC_BUDGET_STAGE, "flow", set_budget_flow, 0, 0, "preprocess, infer, postprocess"},
    STAGE_DURATION(K_FLOW_DEADLINE, "flow_deadline", "100ms"),
    BUDGET_LEVEL(K_STAGE_LEVEL, SEC_BUDGET_STAGE, "level"),
    BUDGET_LEVEL(K_P50_LEVEL, SEC_BUDGET_STAGE, "p50_level"),
    BUDGET_LEVEL(K_P90_LEVEL, SEC_BUDGET_STAGE, "p90_level"),
    BUDGET_LEVEL(K_P99_LEVEL, SEC_BUDGET_STAGE, "p99_level"),
    BUDGET_LEVEL(K_P999_LEVEL, SEC_BUDGET_STAGE, "p999_level"),
    BUDGET_LEVEL(K_DEADLINE_LEVEL, SEC_BUDGET_STAGE, "deadline_level"),
    BUDGET_LEVEL(K_MISS_RATIO_LEVEL, SEC_BUDGET_STAGE, "miss_ratio_level"),
    BUDGET_LEVEL(K_STALL_LEVEL, SEC_BUDGET_STAGE, "stall_level"),
    BUDGET_LEVEL(K_MIN_RATE_LEVEL, SEC_BUDGET_STAGE, "min_rate_level"),
    BUDGET_LEVEL(K_FLOW_LEVEL, SEC_BUDGET_STAGE, "flow_level"),
    {K_RSS_CAP, SEC_BUDGET_PROCESS, "rss_cap", set_budget_size, 0, 0, "2GiB"},
    {K_RSS_SLOPE, SEC_BUDGET_PROCESS, "rss_slope", set_budget_number, 0, 0, "50"},
    {K_RSS_SLOPE_HORIZON, SEC_BUDGET_PROCESS, "rss_slope_horizon", set_budget_duration, NS_PER_MIN,
     24 * NS_PER_H, "30m"},
    {K_PSI_CPU_SOME, SEC_BUDGET_PROCESS, "psi_cpu_some", set_budget_number, 0, 0, "40"},
    {K_PSI_MEMORY_SOME, SEC_BUDGET_PROCESS, "psi_memory_some", set_budget_number, 0, 0, "20"},
    {K_PSI_MEMORY_FULL, SEC_BUDGET_PROCESS, "psi_memory_full", set_budget_number, 0, 0, "5"},
    {K_PSI_IO_SOME, SEC_BUDGET_PROCESS, "psi_io_some", set_budget_number, 0, 0, "40"},
    {K_PSI_IO_FULL, SEC_BUDGET_PROCESS, "psi_io_full", set_budget_number, 0, 0, "10"},
    {K_TEMP_MAX, SEC_BUDGET_PROCESS, "temp_max", set_budget_number, 0, 0, "85"},
    {K_THROTTLE, SEC_BUDGET_PROCESS, "throttle", set_budget_on, 0, 0, "on"},
    BUDGET_LEVEL(K_PROCESS_LEVEL, SEC_BUDGET_PROCESS, "level"),
    BUDGET_LEVEL(K_RSS_CAP_LEVEL, SEC_BUDGET_PROCESS, "rss_cap_level"),
    BUDGET_LEVEL(K_RSS_SLOPE_LEVEL, SEC_BUDGET_PROCESS, "rss_slope_level"),
    BUDGET_LEVEL(K_PSI_CPU_SOME_LEVEL, SEC_BUDGET_PROCESS, "psi_cpu_some_level"),
    BUDGET_LEVEL(K_PSI_MEMORY_SOME_LEVEL, SEC_BUDGET_PROCESS, "psi_memory_some_level"),
    BUDGET_LEVEL(K_PSI_MEMORY_FULL_LEVEL, SEC_BUDGET_PROCESS, "psi_memory_full_level"),
    BUDGET_LEVEL(K_PSI_IO_SOME_LEVEL, SEC_BUDGET_PROCESS, "psi_io_some_level"),
    BUDGET_LEVEL(K_PSI_IO_FULL_LEVEL, SEC_BUDGET_PROCESS, "psi_io_full_level"),
    BUDGET_LEVEL(K_TEMP_MAX_LEVEL, SEC_BUDGET_PROCESS, "temp_max_level"),
    BUDGET_LEVEL(K_THROTTLE_LEVEL, SEC_BUDGET_PROCESS, "throttle_level"),
#undef STAGE_DURATION
#undef BUDGET_LEVEL
};

/* ---- defaults ---------------------------------------------------------------------------- */

/* The hostname made topic-safe: other characters become '-'; "edgemon" when there is none. */
static void default_device_id(char *out, size_t cap) {
  char host[256] = "";
  if (gethostname(host, sizeof(host) - 1) != 0) {
    host[0] = '\0';
  }
  host[sizeof(host) - 1] = '\0';
  size_t n = 0;
  for (; host[n] != '\0' && n + 1 < cap; n++) {
    out[n] = is_id_char(host[n]) ? host[n] : '-';
  }
  out[n] = '\0';
  if (n == 0) {
    em_str_copy(out, cap, "edgemon");
  }
}

/* /run/edgemon for root, else $XDG_RUNTIME_DIR/edgemon, else /tmp/edgemon-<uid>. */
static void default_runtime_dir(char *out, size_t cap) {
  if (geteuid() == 0) {
    snprintf(out, cap, "/run/edgemon");
    return;
  }
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  if (xdg != NULL && xdg[0] == '/') {
    int n = snprintf(out, cap, "%s/edgemon", xdg);
    if (n > 0 && (size_t)n < cap) {
      return;
    }
  }
  snprintf(out, cap, "/tmp/edgemon-%lu", (unsigned long)geteuid());
}

void em_config_defaults(em_config_t *cfg) {
  if (cfg == NULL) {
    return;
  }
  memset(cfg, 0, sizeof(*cfg));
  default_device_id(cfg->device_id, sizeof(cfg->device_id));
  cfg->sample_period_ns = 100 * NS_PER_MS;
  cfg->smaps_period_ns = 5 * NS_PER_S;
  cfg->span_socket_mode = 0660;
  cfg->span_socket_gid = -1;
  cfg->max_stages = 32;
  cfg->stage_idle_ns = 60 * NS_PER_S;
  cfg->rings = 64;
  cfg->rings_per_process = 16;
  cfg->ring_slots = EM_RING_DEFAULT_SLOTS;
  cfg->system_period_ns = NS_PER_S;
  default_runtime_dir(cfg->runtime_dir, sizeof(cfg->runtime_dir));
  em_str_copy(cfg->board, sizeof(cfg->board), "auto");
  em_str_copy(cfg->proc_root, sizeof(cfg->proc_root), "/proc");
  em_str_copy(cfg->sys_root, sizeof(cfg->sys_root), "/");
  cfg->log_level = EM_LOG_INFO;

  cfg->target.kind = EM_TARGET_NONE;

  em_str_copy(cfg->broker_host, sizeof(cfg->broker_host), "127.0.0.1");
  cfg->broker_port = 1883;
  snprintf(cfg->client_id, sizeof(cfg->client_id), "edgemon-%s", cfg->device_id);
  cfg->qos_data = 0;
  cfg->qos_state = 1;
  cfg->keepalive_s = 30;
  cfg->reconnect_min_ns = 500 * NS_PER_MS;
  cfg->reconnect_max_ns = 30 * NS_PER_S;

  for (size_t i = 0; i < N_DEFAULT_EVENTS; i++) {
    em_str_copy(cfg->events[i], sizeof(cfg->events[i]), default_events[i]);
  }
  cfg->n_events = N_DEFAULT_EVENTS;

  cfg->n_rules = 0;
  cfg->enter_windows = 3;
  cfg->leave_windows = 5;
  cfg->window_ns = NS_PER_S;
  cfg->hook_timeout_ns = 5 * NS_PER_S;

  em_str_copy(cfg->spool_path, sizeof(cfg->spool_path), "/var/lib/edgemon/spool");
  cfg->spool_bytes = 16ull << 20;
  cfg->spool_sync_ns = 5 * NS_PER_S;
  cfg->ack_timeout_ns = 10 * NS_PER_S;
  cfg->replay_per_tick = 32;
}

/* ---- the file: reader, handler, whole-file checks ---------------------------------------- */

/* The key named `name` in `section`, or NULL. */
static const key_def_t *find_key(section_t section, const char *name) {
  for (size_t i = 0; i < K_COUNT; i++) {
    if (keys[i].section == section && strcmp(keys[i].name, name) == 0) {
      return &keys[i];
    }
  }
  return NULL;
}

/* The key named `name` in any section, or NULL. */
static const key_def_t *find_key_anywhere(const char *name) {
  for (size_t i = 0; i < K_COUNT; i++) {
    if (strcmp(keys[i].name, name) == 0) {
      return &keys[i];
    }
  }
  return NULL;
}

/* Reports an unknown key: where it belongs if it is another section's, else a close name. */
static void report_unknown_key(load_t *ld, const char *name) {
  char q[QUOTE_MAX + 4];
  quote(q, sizeof(q), name);
  const char *sec = ld->label;
  const key_def_t *other = find_key_anywhere(name);
  if (other != NULL) {
    report(ld, ld->line, "unknown key '%s' in [%s]; it belongs in [%s]", q, sec,
           section_names[other->section]);
    return;
  }
  size_t best = SIZE_MAX;
  const char *hint = NULL;
  for (size_t i = 0; i < K_COUNT; i++) {
    if (keys[i].section == ld->section && closer(name, keys[i].name, &best)) {
      hint = keys[i].name;
    }
  }
  if (hint != NULL) {
    report(ld, ld->line, "unknown key '%s' in [%s]; did you mean '%s'?", q, sec, hint);
  } else {
    report(ld, ld->line, "unknown key '%s' in [%s]", q, sec);
  }
}

/*
 * One name = value pair of the current line (ld->line, ld->section), from the INI reader.
 * Checks the key and hands the value to its setter.
 */
static void handle_pair(load_t *ld, const char *name, const char *value) {
  char q[QUOTE_MAX + 4];
  if (ld->section == SEC_INVALID) {
    return; /* The section header was reported. */
  }
  if (ld->section == SEC_NONE) {
    const key_def_t *k = find_key_anywhere(name);
    if (k != NULL) {
      report(ld, ld->line, "key '%s' is outside any section; put it under [%s]", k->name,
             section_names[k->section]);
    } else {
      report(ld, ld->line, "key '%s' is outside any section; start with a section, e.g. [agent]",
             quote(q, sizeof(q), name));
    }
    return;
  }
  const key_def_t *k = find_key(ld->section, name);
  if (k == NULL) {
    report_unknown_key(ld, name);
    return;
  }
  int *first = key_line_slot(ld, k);
  if (*first != 0) {
    report(ld, ld->line, "duplicate key '%s' in [%s] (first on line %d)", k->name, ld->label,
           *first);
    return;
  }
  *first = ld->line;
  if (value[0] == '\0') {
    report(ld, ld->line, "%s has an empty value; e.g. %s = %s", k->name, k->name, k->example);
    return;
  }
  for (const char *p = value; *p != '\0'; p++) {
    unsigned char c = (unsigned char)*p;
    if (c < 0x20 || c == 0x7f) {
      report(ld, ld->line, "%s '%s' contains a control character", k->name,
             quote(q, sizeof(q), value));
      return;
    }
  }
  k->set(ld, k, value);
}

/*
 * Handles [budget], [budget.process] and [budget.<stage>] (name is what is inside the
 * brackets): sets ld->section and ld->budget, or reports and leaves SEC_INVALID.
 */
static void handle_budget_section(load_t *ld, const char *name) {
  char q[QUOTE_MAX + 4];
  const char *stage = name[6] == '.' ? name + 7 : "";
  if (strcmp(stage, "process") == 0) {
    ld->section = SEC_BUDGET_PROCESS;
    ld->budget = &ld->process;
  } else {
    size_t len = strlen(stage);
    if (len == 0) {
      report(ld, ld->line,
             "section [%s] names no stage; use [budget.<stage>], e.g. [budget.infer], or "
             "[budget.process]",
             quote(q, sizeof(q), name));
      return;
    }
    if (len >= EM_CONFIG_MAX_STAGE) {
      report(ld, ld->line, "stage name '%s' is longer than %d characters",
             quote(q, sizeof(q), stage), EM_CONFIG_MAX_STAGE - 1);
      return;
    }
    for (const char *p = stage; *p != '\0'; p++) {
      if (!is_id_char(*p)) {
        report(ld, ld->line, "stage name '%s' may use only letters, digits and _ . : -",
               quote(q, sizeof(q), stage));
        return;
      }
    }
    budget_sec_t *b = NULL;
    for (size_t i = 0; i < ld->n_stages && b == NULL; i++) {
      if (strcmp(ld->stages[i].name, stage) == 0) {
        b = &ld->stages[i];
      }
    }
    if (b == NULL) {
      if (ld->n_stages == MAX_BUDGET_STAGES) {
        report(ld, ld->line, "more than %d [budget.<stage>] sections", MAX_BUDGET_STAGES);
        return;
      }
      b = &ld->stages[ld->n_stages++];
      em_str_copy(b->name, sizeof(b->name), stage);
    }
    ld->section = SEC_BUDGET_STAGE;
    ld->budget = b;
  }
  if (ld->budget->header_line == 0) {
    ld->budget->header_line = ld->line;
    if (ld->section == SEC_BUDGET_PROCESS) {
      em_str_copy(ld->budget->name, sizeof(ld->budget->name), "process");
    }
  }
  snprintf(ld->label, sizeof(ld->label), "budget.%s", ld->budget->name);
}

/*
 * Handles a section header (name: inside the brackets, NULL for a malformed header the reader
 * reported): sets ld->section, or reports and sets SEC_INVALID.
 */
static void handle_section(load_t *ld, const char *name) {
  char q[QUOTE_MAX + 4];
  ld->section = SEC_INVALID;
  ld->budget = NULL;
  if (name == NULL) {
    return;
  }
  for (int s = SEC_AGENT; s < N_PLAIN_SECTIONS; s++) {
    if (strcmp(name, section_names[s]) == 0) {
      ld->section = (section_t)s;
      snprintf(ld->label, sizeof(ld->label), "%s", section_names[s]);
      return;
    }
  }
  if (strncmp(name, "budget", 6) == 0 && (name[6] == '\0' || name[6] == '.')) {
    handle_budget_section(ld, name);
    return;
  }
  size_t best = SIZE_MAX;
  const char *hint = NULL;
  for (int s = SEC_AGENT; s < N_PLAIN_SECTIONS; s++) {
    if (closer(name, section_names[s], &best)) {
      hint = section_names[s];
    }
  }
  /* [budjet.infer]: a misspelt "budget" before the stage. */
  char budget_hint[64];
  const char *dot = strchr(name, '.');
  if (dot != NULL && (size_t)(dot - name) < 16 && strlen(dot) < sizeof(budget_hint) - 6) {
    char prefix[16];
    memcpy(prefix, name, (size_t)(dot - name));
    prefix[dot - name] = '\0';
    size_t best_budget = SIZE_MAX;
    if (closer(prefix, "budget", &best_budget)) {
      snprintf(budget_hint, sizeof(budget_hint), "budget%s", dot);
      hint = budget_hint;
    }
  }
  quote(q, sizeof(q), name);
  if (hint != NULL) {
    report(ld, ld->line, "unknown section [%s]; did you mean [%s]?", q, hint);
  } else {
    report(ld, ld->line,
           "unknown section [%s]; use [agent], [target], [mqtt], [pmu], [spans], [degrade], "
           "[budget.<stage>] or [budget.process]",
           q);
  }
}

/* The INI reader's callbacks (edgemon/common/ini.h): problems are counted, never a stop. */
static int on_ini_section(void *user, int line, const char *name) {
  load_t *ld = user;
  ld->line = line;
  handle_section(ld, name);
  return 0;
}

static int on_ini_pair(void *user, int line, const char *section, const char *name,
                       const char *value) {
  load_t *ld = user;
  (void)section; /* Tracked in load_t, with what the header meant. */
  ld->line = line;
  handle_pair(ld, name, value);
  return 0;
}

static int on_ini_error(void *user, int line, em_ini_problem_t kind, const char *text,
                        const char *msg) {
  (void)kind;
  (void)text;
  report(user, line, "%s", msg);
  return 0;
}

/* ---- budget rules: built once the whole file is read ----------------------------------- */

/* Each rule key: its per-rule level key, its kind, and what the kind needs. */
static const struct {
  key_id_t key;
  key_id_t level_key;
  em_config_rule_kind_t kind;
  double q;           /* PERCENTILE */
  const char *figure; /* PSI */
} rule_defs[] = {
    {K_P50, K_P50_LEVEL, EM_CONFIG_RULE_PERCENTILE, 0.5, NULL},
    {K_P90, K_P90_LEVEL, EM_CONFIG_RULE_PERCENTILE, 0.9, NULL},
    {K_P99, K_P99_LEVEL, EM_CONFIG_RULE_PERCENTILE, 0.99, NULL},
    {K_P999, K_P999_LEVEL, EM_CONFIG_RULE_PERCENTILE, 0.999, NULL},
    {K_DEADLINE, K_DEADLINE_LEVEL, EM_CONFIG_RULE_DEADLINE, 0, NULL},
    {K_MISS_RATIO, K_MISS_RATIO_LEVEL, EM_CONFIG_RULE_MISS_RATIO, 0, NULL},
    {K_STALL, K_STALL_LEVEL, EM_CONFIG_RULE_ALIVE, 0, NULL},
    {K_MIN_RATE, K_MIN_RATE_LEVEL, EM_CONFIG_RULE_RATE, 0, NULL},
    {K_FLOW, K_FLOW_LEVEL, EM_CONFIG_RULE_FLOW, 0, NULL},
    {K_RSS_CAP, K_RSS_CAP_LEVEL, EM_CONFIG_RULE_RSS_CAP, 0, NULL},
    {K_RSS_SLOPE, K_RSS_SLOPE_LEVEL, EM_CONFIG_RULE_RSS_SLOPE, 0, NULL},
    {K_PSI_CPU_SOME, K_PSI_CPU_SOME_LEVEL, EM_CONFIG_RULE_PSI, 0, "psi.cpu.some.avg10"},
    {K_PSI_MEMORY_SOME, K_PSI_MEMORY_SOME_LEVEL, EM_CONFIG_RULE_PSI, 0, "psi.memory.some.avg10"},
    {K_PSI_MEMORY_FULL, K_PSI_MEMORY_FULL_LEVEL, EM_CONFIG_RULE_PSI, 0, "psi.memory.full.avg10"},
    {K_PSI_IO_SOME, K_PSI_IO_SOME_LEVEL, EM_CONFIG_RULE_PSI, 0, "psi.io.some.avg10"},
    {K_PSI_IO_FULL, K_PSI_IO_FULL_LEVEL, EM_CONFIG_RULE_PSI, 0, "psi.io.full.avg10"},
    {K_TEMP_MAX, K_TEMP_MAX_LEVEL, EM_CONFIG_RULE_GAUGE, 0, EM_CONFIG_FIGURE_TEMP},
    {K_THROTTLE, K_THROTTLE_LEVEL, EM_CONFIG_RULE_GAUGE, 0, EM_CONFIG_FIGURE_THROTTLED},
};
#define N_RULE_DEFS (sizeof(rule_defs) / sizeof(rule_defs[0]))

/* A rule found valid, waiting to be put in file order. */
typedef struct {
  int line;
  const budget_sec_t *sec;
  size_t def; /* Index in rule_defs. */
} pending_rule_t;

#define BLINE(sec, key) ((sec)->line[(key)-K_BUDGET_FIRST])
#define BOK(sec, key)   ((sec)->ok[(key)-K_BUDGET_FIRST])
#define BVAL(sec, key)  ((sec)->val[(key)-K_BUDGET_FIRST])

/*
 * Checks one budget section's keys against each other and adds its valid rules to pend.
 * A rule whose value or level was already reported is left out quietly.
 */
static void check_budget_sec(load_t *ld, const budget_sec_t *b, bool process, pending_rule_t *pend,
                             size_t *n_pend) {
  section_t sec = process ? SEC_BUDGET_PROCESS : SEC_BUDGET_STAGE;
  key_id_t sec_level = process ? K_PROCESS_LEVEL : K_STAGE_LEVEL;
  size_t any = 0;
  for (size_t i = 0; i < N_RULE_DEFS; i++) {
    key_id_t key = rule_defs[i].key;
    key_id_t level_key = rule_defs[i].level_key;
    if (keys[key].section != sec) {
      continue;
    }
    int at = BLINE(b, key);
    int level_at = BLINE(b, level_key);
    if (at == 0) {
      if (level_at != 0) {
        report(ld, level_at, "%s is set but %s is not", keys[level_key].name, keys[key].name);
      }
      continue;
    }
    any++;
    if (!BOK(b, key)) {
      continue;
    }
    if (level_at == 0 && BLINE(b, sec_level) == 0) {
      report(ld, at,
             "%s names no level; add %s_level = DEGRADED, or level = DEGRADED for all of "
             "[budget.%s]",
             keys[key].name, keys[key].name, b->name);
      continue;
    }
    if (!BOK(b, level_at != 0 ? level_key : sec_level)) {
      continue;
    }
    if (key == K_MISS_RATIO && BLINE(b, K_MISS_OVER) == 0 && BLINE(b, K_DEADLINE) == 0) {
      report(ld, at,
             "miss_ratio needs miss_over, the span length that counts as a miss, e.g. "
             "miss_over = 40ms");
      continue;
    }
    if (key == K_MISS_RATIO && !BOK(b, BLINE(b, K_MISS_OVER) != 0 ? K_MISS_OVER : K_DEADLINE)) {
      continue;
    }
    if (key == K_FLOW && BLINE(b, K_FLOW_DEADLINE) == 0) {
      report(ld, at,
             "flow needs flow_deadline, the longest a frame may take from its first stage to "
             "its last, e.g. flow_deadline = 100ms");
      continue;
    }
    if (key == K_FLOW && !BOK(b, K_FLOW_DEADLINE)) {
      continue;
    }
    pend[*n_pend].line = at;
    pend[*n_pend].sec = b;
    pend[*n_pend].def = i;
    (*n_pend)++;
  }
  if (!process && BLINE(b, K_MISS_OVER) != 0 && BLINE(b, K_MISS_RATIO) == 0) {
    report(ld, BLINE(b, K_MISS_OVER), "miss_over is used only with miss_ratio");
  }
  if (!process && BLINE(b, K_FLOW_DEADLINE) != 0 && BLINE(b, K_FLOW) == 0) {
    report(ld, BLINE(b, K_FLOW_DEADLINE),
           "flow_deadline is used only with flow, the stages a frame passes in order");
  }
  if (process && BLINE(b, K_RSS_SLOPE_HORIZON) != 0 && BLINE(b, K_RSS_SLOPE) == 0) {
    report(ld, BLINE(b, K_RSS_SLOPE_HORIZON), "rss_slope_horizon is used only with rss_slope");
  }
  if (any == 0) {
    report(ld, b->header_line, "[budget.%s] sets no rule; e.g. %s", b->name,
           process ? "rss_cap = 2GiB" : "p99 = 40ms");
  }
}

/* Fills cfg->rules[i] from a pending rule. */
static void fill_rule(em_config_rule_t *r, const pending_rule_t *p, bool process) {
  const budget_sec_t *b = p->sec;
  key_id_t key = rule_defs[p->def].key;
  key_id_t level_key = rule_defs[p->def].level_key;
  memset(r, 0, sizeof(*r));
  snprintf(r->id, sizeof(r->id), "%s.%s", b->name, keys[key].name);
  if (!process && rule_defs[p->def].kind != EM_CONFIG_RULE_FLOW) {
    em_str_copy(r->stage, sizeof(r->stage), b->name);
  }
  r->kind = rule_defs[p->def].kind;
  key_id_t lk = BLINE(b, level_key) != 0 ? level_key : process ? K_PROCESS_LEVEL : K_STAGE_LEVEL;
  r->level = (int)BVAL(b, lk).level;
  r->line = p->line;
  switch (r->kind) {
  case EM_CONFIG_RULE_PERCENTILE:
    r->q = rule_defs[p->def].q;
    r->bound_ns = BVAL(b, key).u;
    break;
  case EM_CONFIG_RULE_DEADLINE:
  case EM_CONFIG_RULE_ALIVE:
    r->bound_ns = BVAL(b, key).u;
    break;
  case EM_CONFIG_RULE_MISS_RATIO:
    r->max_ratio = BVAL(b, key).d;
    r->bound_ns = BVAL(b, BLINE(b, K_MISS_OVER) != 0 ? K_MISS_OVER : K_DEADLINE).u;
    break;
  case EM_CONFIG_RULE_RATE:
    r->min_fps = BVAL(b, key).d;
    break;
  case EM_CONFIG_RULE_RSS_CAP:
    r->cap_bytes = BVAL(b, key).u;
    break;
  case EM_CONFIG_RULE_RSS_SLOPE:
    r->max_mib_per_h = BVAL(b, key).d;
    r->horizon_ns = BOK(b, K_RSS_SLOPE_HORIZON) ? BVAL(b, K_RSS_SLOPE_HORIZON).u : 30 * NS_PER_MIN;
    break;
  case EM_CONFIG_RULE_PSI:
  case EM_CONFIG_RULE_GAUGE:
    em_str_copy(r->figure, sizeof(r->figure), rule_defs[p->def].figure);
    r->max = BVAL(b, key).d;
    break;
  case EM_CONFIG_RULE_FLOW:
    r->n_flow = b->n_flow;
    memcpy(r->flow, b->flow, sizeof(r->flow));
    em_str_copy(r->stage, sizeof(r->stage), b->flow[0]);
    r->bound_ns = BVAL(b, K_FLOW_DEADLINE).u;
    break;
  }
}

/* Builds cfg->rules from every budget section, in file order; at most EM_CONFIG_MAX_RULES. */
static void finish_budget(load_t *ld) {
  pending_rule_t pend[MAX_PENDING_RULES];
  size_t n = 0;
  if (ld->process.header_line != 0) {
    check_budget_sec(ld, &ld->process, true, pend, &n);
  }
  for (size_t i = 0; i < ld->n_stages; i++) {
    check_budget_sec(ld, &ld->stages[i], false, pend, &n);
  }
  for (size_t i = 1; i < n; i++) { /* Insertion sort by line: a few dozen rules. */
    pending_rule_t p = pend[i];
    size_t j = i;
    for (; j > 0 && pend[j - 1].line > p.line; j--) {
      pend[j] = pend[j - 1];
    }
    pend[j] = p;
  }
  if (n > EM_CONFIG_MAX_RULES) {
    report(ld, pend[EM_CONFIG_MAX_RULES].line, "more than %d budget rules in the file",
           EM_CONFIG_MAX_RULES);
    n = EM_CONFIG_MAX_RULES;
  }
  for (size_t i = 0; i < n; i++) {
    fill_rule(&ld->cfg->rules[i], &pend[i], pend[i].sec == &ld->process);
  }
  ld->cfg->n_rules = n;
}

/* ---- [mqtt] TLS files and credentials: checked once the whole file is read ---------------- */

/* Where a problem of a checked file goes: "KEY 'PATH' <msg>" on the key's line. */
typedef struct {
  load_t *ld;
  int line;
  const char *key;
  const char *path;
} file_report_t;

static void report_file_problem(void *ctx, int line, const char *msg) {
  const file_report_t *fr = ctx;
  (void)line; /* The file's own line is in msg; the message goes on the key's line. */
  report(fr->ld, fr->line, "%s '%s' %s", fr->key, fr->path, msg);
}

/*
 * Opens `path` (the value of `key`, given on `line`) for reading and checks that it is a
 * regular file. With `secret`, it must also be private (em_credentials_check_fd: owned by the
 * agent's user or root, no access for group or others). Returns the open fd, or -1 after
 * reporting why not.
 */
static int open_checked(load_t *ld, int line, const char *key, const char *path, bool secret) {
  file_report_t fr = {.ld = ld, .line = line, .key = key, .path = path};
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    report(ld, line, "%s '%s' cannot be opened: %s", key, path, strerror(errno));
    return -1;
  }
  struct stat st;
  if (secret) {
    if (em_credentials_check_fd(fd, "the agent", report_file_problem, &fr) == 0) {
      return fd;
    }
  } else if (fstat(fd, &st) != 0) {
    report(ld, line, "%s '%s' cannot be examined: %s", key, path, strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    report(ld, line, "%s '%s' is not a regular file", key, path);
  } else {
    return fd;
  }
  close(fd);
  return -1;
}

/*
 * Reads [mqtt] credentials_file into cfg->username and cfg->password with common/'s reader
 * (edgemon/common/credentials.h: the format, and the checks that the file is private). Every
 * problem is reported on the key's line; the password's value never appears in a message.
 */
static void load_credentials(load_t *ld, int line, const char *path) {
  file_report_t fr = {.ld = ld, .line = line, .key = "credentials_file", .path = path};
  em_credentials_t creds;
  if (em_credentials_read(path, "the agent", &creds, report_file_problem, &fr) == 0) {
    em_str_copy(ld->cfg->username, sizeof(ld->cfg->username), creds.username);
    em_str_copy(ld->cfg->password, sizeof(ld->cfg->password), creds.password);
  }
  memset(&creds, 0, sizeof(creds));
}

/*
 * [mqtt] TLS keys against the broker's scheme, the files they name, and credentials_file.
 * A broker value that was already reported skips the TLS checks (one mistake, one error).
 */
static void finish_mqtt_security(load_t *ld) {
  static const key_id_t tls_keys[] = {K_TLS_CA_FILE, K_TLS_CA_PATH, K_TLS_CERT_FILE, K_TLS_KEY_FILE,
                                      K_TLS_INSECURE};
  em_config_t *cfg = ld->cfg;
  const int *at = ld->key_line;
  const bool *ok = ld->key_ok;
  bool broker_ok = ok[K_BROKER] || at[K_BROKER] == 0;
  if (broker_ok && !cfg->tls) {
    for (size_t i = 0; i < sizeof(tls_keys) / sizeof(tls_keys[0]); i++) {
      key_id_t k = tls_keys[i];
      if (at[k] != 0) {
        report(ld, at[k],
               "%s is set but the broker is not TLS; use broker = mqtts://HOST[:PORT], or remove "
               "%s",
               keys[k].name, keys[k].name);
      }
    }
  }
  if (broker_ok && cfg->tls) {
    if (at[K_TLS_CA_FILE] == 0 && at[K_TLS_CA_PATH] == 0) {
      report(ld, at[K_BROKER],
             "broker uses TLS (mqtts://) but [mqtt] sets neither tls_ca_file nor tls_ca_path, "
             "the CA that signed the broker's certificate");
    }
    if ((at[K_TLS_CERT_FILE] != 0) != (at[K_TLS_KEY_FILE] != 0)) {
      report(ld, at[K_TLS_CERT_FILE] != 0 ? at[K_TLS_CERT_FILE] : at[K_TLS_KEY_FILE],
             "tls_cert_file and tls_key_file go together: set both for a client certificate, "
             "or neither");
    }
    static const key_id_t files[] = {K_TLS_CA_FILE, K_TLS_CERT_FILE, K_TLS_KEY_FILE};
    const char *paths[] = {cfg->tls_ca_file, cfg->tls_cert_file, cfg->tls_key_file};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
      if (!ok[files[i]]) {
        continue;
      }
      int fd =
          open_checked(ld, at[files[i]], keys[files[i]].name, paths[i], files[i] == K_TLS_KEY_FILE);
      if (fd >= 0) {
        close(fd);
      }
    }
    struct stat st;
    if (ok[K_TLS_CA_PATH] && (stat(cfg->tls_ca_path, &st) != 0 || !S_ISDIR(st.st_mode))) {
      report(ld, at[K_TLS_CA_PATH], "tls_ca_path '%s' is not a directory", cfg->tls_ca_path);
    }
  }
  if (ok[K_CREDENTIALS_FILE]) {
    load_credentials(ld, at[K_CREDENTIALS_FILE], cfg->credentials_file);
  }
}

/* Checks between keys, once the whole file is read, and defaults that follow other keys. */
static void finish(load_t *ld) {
  em_config_t *cfg = ld->cfg;
  const int *at = ld->key_line;
  const bool *ok = ld->key_ok;
  char a[32];
  char b[32];

  if (cfg->span_socket[0] == '\0') {
    int n = snprintf(cfg->span_socket, sizeof(cfg->span_socket), "%s/spans.sock", cfg->runtime_dir);
    if (n < 0 || (size_t)n >= sizeof(cfg->span_socket)) {
      report(ld, at[K_RUNTIME_DIR], "runtime_dir is too long for the span socket's path");
    }
  }

  bool any_target = false;
  for (int k = K_PID; k <= K_CGROUP; k++) {
    any_target = any_target || at[k] != 0;
  }
  if (!any_target) {
    report(ld, 0, "[target] needs one of pid, pid_file, process_name, cmdline, cgroup");
  }

  /* smaps_period: 0 or at least sample_period; its default moves up to meet sample_period. */
  bool sample_usable = ok[K_SAMPLE_PERIOD] || at[K_SAMPLE_PERIOD] == 0;
  if (ok[K_SMAPS_PERIOD] && sample_usable && cfg->smaps_period_ns != 0 &&
      cfg->smaps_period_ns < cfg->sample_period_ns) {
    format_duration(a, sizeof(a), cfg->smaps_period_ns);
    format_duration(b, sizeof(b), cfg->sample_period_ns);
    report(ld, at[K_SMAPS_PERIOD],
           "smaps_period %s is shorter than sample_period %s; use 0 (off) or at least %s", a, b, b);
  } else if (at[K_SMAPS_PERIOD] == 0 && cfg->smaps_period_ns < cfg->sample_period_ns) {
    cfg->smaps_period_ns = cfg->sample_period_ns;
  }

  /* system_period: at least sample_period; its default moves up to meet sample_period. */
  if (ok[K_SYSTEM_PERIOD] && sample_usable && cfg->system_period_ns < cfg->sample_period_ns) {
    format_duration(a, sizeof(a), cfg->system_period_ns);
    format_duration(b, sizeof(b), cfg->sample_period_ns);
    report(ld, at[K_SYSTEM_PERIOD], "system_period %s is shorter than sample_period %s", a, b);
  } else if (at[K_SYSTEM_PERIOD] == 0 && cfg->system_period_ns < cfg->sample_period_ns) {
    cfg->system_period_ns = cfg->sample_period_ns;
  }

  /* [degrade] window: at least sample_period; its default moves up to meet sample_period. */
  if (ok[K_DEGRADE_WINDOW] && sample_usable && cfg->window_ns < cfg->sample_period_ns) {
    format_duration(a, sizeof(a), cfg->window_ns);
    format_duration(b, sizeof(b), cfg->sample_period_ns);
    report(ld, at[K_DEGRADE_WINDOW], "[degrade] window %s is shorter than sample_period %s", a, b);
  } else if (at[K_DEGRADE_WINDOW] == 0 && cfg->window_ns < cfg->sample_period_ns) {
    cfg->window_ns = cfg->sample_period_ns;
  }

  /* reconnect_max >= reconnect_min; a default moves to meet a value the file sets. */
  if (ok[K_RECONNECT_MIN] && ok[K_RECONNECT_MAX]) {
    if (cfg->reconnect_max_ns < cfg->reconnect_min_ns) {
      format_duration(a, sizeof(a), cfg->reconnect_max_ns);
      format_duration(b, sizeof(b), cfg->reconnect_min_ns);
      report(ld, at[K_RECONNECT_MAX], "reconnect_max %s is below reconnect_min %s (line %d)", a, b,
             at[K_RECONNECT_MIN]);
    }
  } else if (ok[K_RECONNECT_MIN] && at[K_RECONNECT_MAX] == 0 &&
             cfg->reconnect_max_ns < cfg->reconnect_min_ns) {
    cfg->reconnect_max_ns = cfg->reconnect_min_ns;
  } else if (ok[K_RECONNECT_MAX] && at[K_RECONNECT_MIN] == 0 &&
             cfg->reconnect_min_ns > cfg->reconnect_max_ns) {
    cfg->reconnect_min_ns = cfg->reconnect_max_ns;
  }

  /* client_id follows device_id unless the file sets it. */
  if (at[K_CLIENT_ID] == 0) {
    snprintf(cfg->client_id, sizeof(cfg->client_id), "edgemon-%s", cfg->device_id);
  }

  finish_mqtt_security(ld);
  finish_budget(ld);
}

int em_config_load(const char *path, em_config_t *cfg, em_config_error_fn on_error, void *ctx,
                   int *n_errors) {
  if (n_errors != NULL) {
    *n_errors = 0;
  }
  if (path == NULL || cfg == NULL) {
    return -EINVAL;
  }
  em_config_defaults(cfg);

  load_t ld;
  memset(&ld, 0, sizeof(ld));
  ld.file = path;
  ld.cfg = cfg;
  ld.on_error = on_error;
  ld.ctx = ctx;
  ld.section = SEC_NONE;

  int rc = 0;
  FILE *fp = fopen(path, "re");
  if (fp == NULL) {
    rc = -errno;
    report(&ld, 0, "cannot open: %s", strerror(-rc));
    goto out;
  }
  const em_ini_reader_t reader = {.file = path,
                                  .max_line = LINE_MAX_CHARS,
                                  .max_bytes = FILE_MAX_BYTES,
                                  .on_section = on_ini_section,
                                  .on_pair = on_ini_pair,
                                  .on_error = on_ini_error};
  rc = em_ini_parse_file(fp, &reader, &ld);
  fclose(fp);
  if (rc == -EFBIG) {
    report(&ld, 0, "file is larger than %d KiB; is it the right file?", FILE_MAX_BYTES / 1024);
    goto out;
  }
  if (rc != 0) {
    report(&ld, 0, "cannot read: %s", strerror(-rc));
    goto out;
  }
  finish(&ld);
  rc = ld.n_errors > 0 ? -EINVAL : 0;

out:
  if (n_errors != NULL) {
    *n_errors = ld.n_errors;
  }
  return rc;
}
