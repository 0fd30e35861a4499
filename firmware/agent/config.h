/*
 * config.h - the agent's configuration: an INI file read with common/'s INI line reader, every
 * key declared once in a schema (edgemon/common/schema.h: section, name, type, field, range,
 * default, reloadable or not and its apply steps, example) that validates it, gives its
 * default, suggests the closest name for a misspelt one, says which keys a reload cannot apply
 * and copies those it can (em_config_adopt). Every problem is
 * reported as "FILE:LINE: message" (all of them, not just the first). docs/CONFIG.md documents
 * every key.
 *
 * Owns: nothing after em_config_load() returns; em_config_t is a plain value with fixed-size
 * fields (no pointers), so it can be copied and compared, and SIGHUP can load a fresh one
 * beside the running one. Single-threaded.
 */
#ifndef EDGEMON_AGENT_CONFIG_H
#define EDGEMON_AGENT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "budget.h"
#include "edgemon/common/schema.h"
#include "log.h"
#include "target.h"

#define EM_CONFIG_MAX_PATH       256
#define EM_CONFIG_MAX_ID         64 /* Device id: 1..63 bytes of [A-Za-z0-9_.:-]. */
#define EM_CONFIG_MAX_EVENTS     16 /* PMU events. */
#define EM_CONFIG_MAX_EVENT_NAME 48
/* Sensor figures the [budget.process] temp_max and throttle rules judge (the agent computes
 * them from sensors.h each sensor read): the hottest thermal zone in degrees C, and 1 while the
 * board is throttled (0 when not). */
#define EM_CONFIG_FIGURE_TEMP      "thermal.max"
#define EM_CONFIG_FIGURE_THROTTLED "throttled"
#define EM_CONFIG_MAX_IDS          16   /* Entries of allow_uids and allow_gids. */
#define EM_CONFIG_MAX_RINGS        1024 /* [spans] rings at most. */
#define EM_CONFIG_MAX_RULES        64   /* Budget rules, all [budget.*] sections together. */
#define EM_CONFIG_MAX_STAGE        EM_BUDGET_STAGE_BYTES /* Stage name: 1..31 bytes. */
#define EM_CONFIG_MAX_SECRET       128 /* MQTT username or password: 1..127 bytes. */
/* Ticks the flight recorder holds beyond (pre + post) / sample_period (record/flight.h). */
#define EM_CONFIG_FLIGHT_TICK_SLACK 4u

typedef struct {
  /* [agent] */
  char device_id[EM_CONFIG_MAX_ID];     /* Default: the hostname, made topic-safe. */
  uint64_t sample_period_ns;            /* Default 100 ms; 1 ms .. 60 s. */
  uint64_t smaps_period_ns;             /* smaps_rollup cadence; default 5 s; 0 = off. */
  uint64_t system_period_ns;            /* MemAvailable and PSI cadence; default 1 s. */
  char runtime_dir[EM_CONFIG_MAX_PATH]; /* Default /run/edgemon (root) or
                                           $XDG_RUNTIME_DIR/edgemon. */
  char board[EM_CONFIG_MAX_ID];         /* Board profile name or "auto" (the default). */
  char proc_root[EM_CONFIG_MAX_PATH];   /* Default "/proc"; tests point it at fixtures. */
  char sys_root[EM_CONFIG_MAX_PATH];    /* Root of sensor and PMU event files; default "/". */
  bool sample_period_set;               /* sample_period was in the file (else the board's). */
  uint64_t sensors_period_ns;           /* Sensor cadence; 0 (default): the board profile's. */
  em_log_level_t log_level;             /* Default info. */

  /* [target] exactly one kind (collect/target.h) */
  em_target_spec_t target;

  /* [mqtt] */
  char broker_host[EM_CONFIG_MAX_PATH];  /* From broker = mqtt://HOST:PORT or mqtts://HOST:PORT;
                                            default mqtt://127.0.0.1:1883. */
  uint16_t broker_port;                  /* Default 1883, or 8883 for mqtts://. */
  bool tls;                              /* broker = mqtts://...: TLS to the broker. */
  char client_id[EM_CONFIG_MAX_ID + 16]; /* Default "edgemon-<device_id>". */
  int qos_data;                          /* Default 0. */
  int qos_state;                         /* Default 1 (birth, state and status). */
  uint32_t keepalive_s;                  /* Default 30; 5 .. 3600. */
  uint64_t reconnect_min_ns;             /* Backoff start; default 500 ms. */
  uint64_t reconnect_max_ns;
  uint64_t ack_timeout_ns;               /* QoS 1 PUBACK wait before the session is dropped
                                            and data spooled; default 10s; 0 = off. */             /* Backoff cap; default 30 s. */
  /* TLS (only with mqtts://): a CA file or directory is required; a client certificate is
     optional (cert and key together). The key file must be private (see credentials_file). */
  char tls_ca_file[EM_CONFIG_MAX_PATH];   /* PEM CA bundle; "" = none. */
  char tls_ca_path[EM_CONFIG_MAX_PATH];   /* Directory of hashed CA certificates; "" = none. */
  char tls_cert_file[EM_CONFIG_MAX_PATH]; /* PEM client certificate; "" = none. */
  char tls_key_file[EM_CONFIG_MAX_PATH];  /* PEM private key of tls_cert_file; "" = none. */
  bool tls_insecure; /* Default false; true turns off the broker's host name check (tests only). */
  /* credentials_file: "username = ..." and "password = ..." lines, read at load time. The file
     must be a regular file owned by the agent's user or root with no group or other access
     (mode & 077 == 0), else the load fails and names it. With or without TLS. */
  char credentials_file[EM_CONFIG_MAX_PATH]; /* "" = no username/password. */
  char username[EM_CONFIG_MAX_SECRET];       /* From credentials_file; "" = none. */
  char password[EM_CONFIG_MAX_SECRET];       /* From credentials_file; "" = none. */

  /* [pmu] */
  size_t n_events; /* Default: the generic list in config.c. */
  char events[EM_CONFIG_MAX_EVENTS][EM_CONFIG_MAX_EVENT_NAME];
  bool events_set; /* [pmu] events was in the file; else the board profile's events apply. */

  /* [spans] */
  char span_socket[EM_CONFIG_MAX_PATH]; /* Default "<runtime_dir>/spans.sock". */
  uint32_t span_socket_mode;            /* Default 0660. */
  int64_t span_socket_gid;              /* Group of the socket file; -1 = the agent's. */
  size_t n_allow_uids;                  /* 0 and 0: anyone who can write to the socket. */
  uint32_t allow_uids[EM_CONFIG_MAX_IDS];
  size_t n_allow_gids;
  uint32_t allow_gids[EM_CONFIG_MAX_IDS];
  uint32_t max_stages;        /* Stages tracked at once; default 32, 1..64. */
  uint64_t stage_idle_ns;     /* An unbudgeted stage this long without a span may give its slot
                                 to a new stage; default 60 s, 1 ms .. 24 h. */
  uint32_t rings;             /* Span rings registered at once; default 64, 1..1024. */
  uint32_t rings_per_process; /* Of them per process; default 16, 1..1024. */
  uint32_t ring_slots; /* Slots per ring suggested on the deadline page; default 1024, a power
                          of two 64..65536. */

  /* [budget.<stage>] and [budget.process]: the rules, in file order, as the budget engine
     takes them (budget.h). Ids are "<stage>.<key>" ("infer.p99") or "process.<key>"; the
     level is <key>_level, else the section's level; a process rule's stage is ""; a FLOW
     rule's stage is its first stage. */
  size_t n_rules;
  em_budget_rule_t rules[EM_CONFIG_MAX_RULES];
  int rule_line[EM_CONFIG_MAX_RULES]; /* Line of each rule's key, for messages. */

  /* [degrade] */
  uint32_t enter_windows;        /* Violating windows before a rule enters; default 3. */
  uint32_t leave_windows;        /* Clean windows per step down; default 5. */
  uint64_t window_ns;            /* Budget evaluation window; default 1s, >= sample_period. */
  char hook[EM_CONFIG_MAX_PATH]; /* Command run on every change of level; "" = none. */
  uint64_t hook_timeout_ns;      /* Default 5s. */

  /* [spool]: data and state kept on disk while the broker is away (firmware/SPOOL.md). */
  char spool_path[EM_CONFIG_MAX_PATH]; /* Default /var/lib/edgemon/spool; "off" = none. */
  uint64_t spool_bytes;                /* Ring capacity; default 16 MiB, 64 KiB .. 1 GiB. */
  uint64_t spool_sync_ns;              /* fdatasync cadence (worker thread); default 5s. */
  uint32_t replay_per_tick;            /* Spooled messages sent per tick; default 32. */
  bool spool_write_ahead; /* Default true: QoS 1 messages spooled before sending (forward.h). */
  /* [flight]: the flight recorder (record/flight.h). Sizes take a restart; min_gap a reload. */
  bool flight_enabled;        /* Default true. */
  uint64_t flight_pre_ns;     /* pre_seconds: kept before a trigger; default 10 s. */
  uint64_t flight_post_ns;    /* post_seconds: recorded after it; default 2 s. */
  uint32_t flight_max_spans;  /* Span ring capacity; default 16384 (12 s of 3 stages at
                                 300 fps is 10800 spans). */
  uint64_t flight_max_bytes;  /* Encoded recording cap; default and at most 262144. */
  uint64_t flight_min_gap_ns; /* min_gap_seconds: least time between two triggers recorded;
                                 default 30 s. */
  /* [profile]: stack-sampling windows (profile/window.h). Sizes take a restart; min_gap a
   * reload. */
  bool profile_enabled;        /* Default true. */
  uint32_t profile_hz;         /* Sampling frequency, 49..199; default 99. */
  uint64_t profile_ns;         /* seconds: a window's length; default 5 s. */
  uint64_t profile_max_ns;     /* max_seconds: the longest a cmd/profile may ask; default 30 s. */
  uint64_t profile_min_gap_ns; /* min_gap_seconds: least time between two windows' starts;
                                  default 60 s. */
  int profile_clock;           /* 0 cpu-clock (default), 1 task-clock (em_sampler_clock_t). */
  int profile_dwarf;           /* unwind: 1 dwarf (default), 0 fp. */
  uint64_t profile_max_bytes;  /* Encoded profile cap; default and at most 262144. */
} em_config_t;

/*
 * Called once per problem found, with the file, the line (0 when the problem is a missing
 * key or a conflict between keys, not one line) and a message without a trailing newline.
 */
typedef void (*em_config_error_fn)(void *ctx, const char *file, int line, const char *msg);

/* Fills *cfg with every default (target none). Never fails. */
void em_config_defaults(em_config_t *cfg);

/*
 * Reads and validates `path` over the defaults. Every problem goes to `on_error` (may be
 * NULL). Returns 0 when the file is valid, -ENOENT/-EACCES/... when it cannot be opened
 * (reported too), -ENOMEM when the load's working memory cannot be allocated (reported too), or
 * -EINVAL when it had problems (the count in *n_errors, may be NULL).
 * A missing [target] is a problem: the agent needs one.
 */
int em_config_load(const char *path, em_config_t *cfg, em_config_error_fn on_error, void *ctx,
                   int *n_errors);

/*
 * The schema of the file (edgemon/common/schema.h): one row per key, *n rows (may be NULL), in
 * section order; the budget keys' sections read "budget.<stage>" and "budget.process". What
 * validates, stores and defaults every key, and what docs/CONFIG.md lists.
 */
const em_schema_key_t *em_config_schema(size_t *n);

/*
 * The first key whose value differs between the running config `cur` and a reloaded `next`
 * that a reload (SIGHUP) cannot apply (a row without EM_SCHEMA_RELOAD), as "[section] key" in
 * buf[0..cap); NULL when every difference can be applied.
 */
const char *em_config_reload_conflict(const em_config_t *cur, const em_config_t *next, char *buf,
                                      size_t cap);

/*
 * The steps a running agent takes to apply a reload (em_agent_reload), one bit each: every
 * reloadable row of the schema names the steps a change of its value makes due.
 */
typedef enum {
  EM_CONFIG_APPLY_BUDGETS = 1u << 0,     /* [budget.*] rules, [degrade] windows: the engine. */
  EM_CONFIG_APPLY_FLIGHT_GAP = 1u << 1,  /* [flight] min_gap_seconds. */
  EM_CONFIG_APPLY_PROFILE_GAP = 1u << 2, /* [profile] min_gap_seconds. */
  EM_CONFIG_APPLY_STAGES = 1u << 3,      /* Stage slots kept for budgets; [spans] stage_idle. */
  EM_CONFIG_APPLY_DEADLINES = 1u << 4,   /* The deadline page: deadlines, [spans] ring_slots. */
  EM_CONFIG_APPLY_TARGET = 1u << 5,      /* [target]: detach and look for the new one. */
  EM_CONFIG_APPLY_LOG = 1u << 6,         /* [agent] log_level (main.c sets it, with --log). */
} em_config_apply_t;

/*
 * A reload: copies into `running` every reloadable key's value of `next` that differs, by the
 * schema's rows (keys a reload cannot apply stay: em_config_reload_conflict() names them), and
 * returns the em_config_apply_t bits of the steps now due (0: nothing changed). Both borrowed.
 */
unsigned em_config_adopt(em_config_t *running, const em_config_t *next);

/* Parses "250us", "100ms", "1s", "2m", "1500000ns" (no unit: error). Returns 0 or -EINVAL. */
int em_config_parse_duration(const char *text, uint64_t *out_ns);

/*
 * Parses "mqtt://HOST[:PORT]" (port default 1883) or "mqtts://HOST[:PORT]" (port default 8883).
 * Returns 0 or -EINVAL.
 */
int em_config_parse_broker(const char *url, char *host, size_t host_cap, uint16_t *port);

#endif /* EDGEMON_AGENT_CONFIG_H */
