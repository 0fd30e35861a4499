/*
 * config.c - see config.h. Reads the agent's INI file with common/'s INI line reader
 * (edgemon/common/ini.h). Every key is one row of AGENT_KEYS (edgemon/common/schema.h), which
 * makes both the key ids and the table `keys`: the row's type validates and stores the value
 * (keys with more to check name their own setter), its default (given, or computed by its
 * hook) fills em_config_defaults(), its flags say whether a reload applies it and its apply
 * steps what a change makes due (em_config_adopt), and unknown keys get the closest name of
 * their section. Every problem is reported as FILE:LINE: message.
 *
 * Owns nothing after em_config_load() returns: the file is open only during the call, and its
 * one allocation, the budget sections and their rules (load_sections_t, about 70 KiB), is freed
 * before it returns. That part is not on the stack: a thread's stack pages stay resident once
 * touched, and em_config_load() runs on the main thread, whose stack lives as long as the
 * agent; a block of that size is a mapping of its own (main.c's M_MMAP_THRESHOLD) and goes back
 * to the kernel at free(). The reader keeps its line buffer on the stack. Single-threaded.
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
#include "edgemon/common/schema.h"
#include "edgemon/common/str.h"
#include "edgemon/flight.h"
#include "edgemon/profile.h"
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
  SEC_FLIGHT,
  SEC_PROFILE,
  SEC_BUDGET_STAGE,   /* [budget.<stage>]: load_t.budget is the stage. */
  SEC_BUDGET_PROCESS, /* [budget.process]: load_t.budget is load_t.process. */
  SEC_INVALID,        /* After an unknown or malformed header: its keys are skipped. */
} section_t;

static const char *const section_names[] = {
    "",      "agent",  "target",  "mqtt",           "pmu",           "spans", "degrade",
    "spool", "flight", "profile", "budget.<stage>", "budget.process"};
/* Entries of section_names up to [profile], SEC_NONE included: the sections of plain keys. */
#define N_PLAIN_SECTIONS SEC_BUDGET_STAGE
_Static_assert(sizeof(section_names) / sizeof(section_names[0]) == SEC_INVALID,
               "section_names has a name for each section_t up to SEC_INVALID");

/*
 * Every key of the file, one row each (edgemon/common/schema.h): KEY(id, section, name, type,
 * the row's other fields). The list makes both key_id_t (a row's index, for the code that
 * names a key) and the table `keys`, so adding a key is adding its row here (and its line in
 * docs/CONFIG.md and firmware/edgemon-agent.ini, which test_config_keys checks). Rows without
 * `set` are validated and stored by their type; a row's default is its `def` (through its
 * setter when it has one) or its `compute` hook (em_config_defaults); rows without
 * EM_SCHEMA_RELOAD are those a SIGHUP cannot apply (em_config_reload_conflict), and the others
 * name the apply steps a change makes due (em_config_adopt). The budget keys come last, from
 * K_BUDGET_FIRST: each section's `level`, then its <rule>_level keys up to the section's end.
 * The macros below spell the rows; the functions they name are defined further down.
 */
#define FIELD(f)      .offset = offsetof(em_config_t, f), .size = sizeof(((em_config_t *)0)->f)
#define NO_FIELD      .offset = EM_SCHEMA_NO_FIELD, .size = 0
#define RANGE(lo, hi) .min = (lo), .max = (hi)
#define AGENT         "agent"
#define STAGE         "budget.<stage>"
#define PROC          "budget.process"
#define RELOAD        EM_SCHEMA_RELOAD
/* Reloadable, and the apply steps a change makes due (em_config_adopt). */
#define APPLY(steps) .flags = RELOAD, .apply = (steps)
/* A budget row: its value reaches the agent through the rules, which feed the engine, the
 * stages reserved for budgets and the deadline page. */
#define RULE_ROW                                                                                   \
  .same = same_rules, .copy = copy_rules,                                                          \
  APPLY(EM_CONFIG_APPLY_BUDGETS | EM_CONFIG_APPLY_STAGES | EM_CONFIG_APPLY_DEADLINES)
#define TARGET_ROW .same = same_target, .copy = copy_target, APPLY(EM_CONFIG_APPLY_TARGET)
#define STAGE_DURATION(ex, what)                                                                   \
  NO_FIELD, RANGE(NS_PER_US, NS_PER_H), RULE_ROW, .set = set_budget_typed, .example = ex,          \
                                                  .doc = what
#define BUDGET_LEVEL(what)                                                                         \
  NO_FIELD, RULE_ROW, .set = set_budget_level, .example = "DEGRADED", .doc = what
/* A share, above 0 and below 1 (set_budget_ratio). */
#define BUDGET_RATIO(ex, what)                                                                     \
  NO_FIELD, RULE_ROW, .set = set_budget_ratio, .example = ex, .doc = what
/* A budget number above 0 and at most hi (set_budget_number): its range and wording. */
#define BUDGET_NUMBER(hi, wording, ex, what)                                                       \
  NO_FIELD, RULE_ROW, .set = set_budget_number, .max = (hi), .want = wording, .example = ex,       \
                      .doc = what
#define AGENT_KEYS(KEY)                                                                            \
  KEY(K_DEVICE_ID, AGENT, "device_id", EM_SCHEMA_ID, FIELD(device_id),                             \
      .compute = default_device_id, .example = "jetson-07",                                        \
      .doc = "Device id in topics; default: the hostname, made topic-safe")                        \
  KEY(K_SAMPLE_PERIOD, AGENT, "sample_period", EM_SCHEMA_DURATION, FIELD(sample_period_ns),        \
      RANGE(NS_PER_MS, 60 * NS_PER_S), .def = "100ms", .example = "100ms",                         \
      .doc = "Process sampling period (else the board profile's)")                                 \
  KEY(K_SMAPS_PERIOD, AGENT, "smaps_period", EM_SCHEMA_DURATION, FIELD(smaps_period_ns),           \
      RANGE(NS_PER_MS, NS_PER_H), .def = "5s", .flags = EM_SCHEMA_OFF | EM_SCHEMA_ZERO,            \
      .example = "5s", .doc = "smaps_rollup cadence; 0 or off: not read")                          \
  KEY(K_SYSTEM_PERIOD, AGENT, "system_period", EM_SCHEMA_DURATION, FIELD(system_period_ns),        \
      RANGE(NS_PER_MS, NS_PER_H), .def = "1s", .example = "1s",                                    \
      .doc = "MemAvailable and PSI cadence, at least sample_period")                               \
  KEY(K_RUNTIME_DIR, AGENT, "runtime_dir", EM_SCHEMA_PATH, FIELD(runtime_dir),                     \
      .compute = default_runtime_dir, .example = "/run/edgemon",                                   \
      .doc = "Default $RUNTIME_DIRECTORY (set by systemd), else /run/edgemon (root), else "        \
             "$XDG_RUNTIME_DIR/edgemon")                                                           \
  KEY(K_BOARD, AGENT, "board", EM_SCHEMA_ID, FIELD(board), .same = same_board, .def = "auto",      \
      .example = "generic",                                                                        \
      .doc = "Board profile: auto (detect), generic, or a name under boards/")                     \
  KEY(K_PROC_ROOT, AGENT, "proc_root", EM_SCHEMA_PATH, FIELD(proc_root), .def = "/proc",           \
      .example = "/proc", .doc = "Where /proc is read")                                            \
  KEY(K_SYS_ROOT, AGENT, "sys_root", EM_SCHEMA_PATH, FIELD(sys_root), .def = "/", .example = "/",  \
      .doc = "Root of the sensor and PMU event files")                                             \
  KEY(K_SENSORS_PERIOD, AGENT, "sensors_period", EM_SCHEMA_DURATION, FIELD(sensors_period_ns),     \
      RANGE(10 * NS_PER_MS, NS_PER_H), .example = "1s",                                            \
      .doc = "Sensor cadence; default: the board profile's")                                       \
  KEY(K_LOG_LEVEL, AGENT, "log_level", EM_SCHEMA_ENUM, FIELD(log_level), .def = "info",            \
      APPLY(EM_CONFIG_APPLY_LOG), .choices = log_levels,                                           \
      .n_choices = sizeof(log_levels) / sizeof(log_levels[0]), .example = "info",                  \
      .doc = "error, warn, info or debug")                                                         \
  KEY(K_PID, "target", "pid", EM_SCHEMA_CUSTOM, NO_FIELD, TARGET_ROW, .set = set_target_pid,       \
      .example = "1234", .doc = "The process with this pid")                                       \
  KEY(K_PID_FILE, "target", "pid_file", EM_SCHEMA_PATH, NO_FIELD, TARGET_ROW,                      \
      .set = set_target_pid_file, .example = "/run/inference.pid", .doc = "The pid in this file")  \
  KEY(K_PROCESS_NAME, "target", "process_name", EM_SCHEMA_STRING, NO_FIELD, TARGET_ROW,            \
      .set = set_target_comm, .example = "python3", .doc = "The process whose comm is this")       \
  KEY(K_CMDLINE, "target", "cmdline", EM_SCHEMA_STRING, NO_FIELD, TARGET_ROW,                      \
      .set = set_target_cmdline, .example = "detect.py",                                           \
      .doc = "The process whose command line has this")                                            \
  KEY(K_CGROUP, "target", "cgroup", EM_SCHEMA_PATH, NO_FIELD, TARGET_ROW,                          \
      .set = set_target_cgroup, .example = "/sys/fs/cgroup/inference.service",                     \
      .doc = "The processes of this cgroup")                                                       \
  KEY(K_BROKER, "mqtt", "broker", EM_SCHEMA_CUSTOM, FIELD(broker_host), .set = set_broker,         \
      .same = same_broker, .def = "mqtt://127.0.0.1:1883", .example = "mqtt://127.0.0.1:1883",     \
      .doc = "mqtt://HOST[:PORT] or mqtts://HOST[:PORT] (TLS)")                                    \
  KEY(K_CLIENT_ID, "mqtt", "client_id", EM_SCHEMA_STRING, FIELD(client_id), .set = set_client_id,  \
      .compute = default_client_id, .example = "edgemon-jetson-07",                                \
      .doc = "Default edgemon-<device_id>")                                                        \
  KEY(K_QOS_DATA, "mqtt", "qos_data", EM_SCHEMA_ENUM, FIELD(qos_data), .def = "0",                 \
      .choices = qos_levels, .n_choices = 2, .want = "must be 0 or 1 (qos 2 is not supported)",    \
      .example = "0", .doc = "QoS of data messages")                                               \
  KEY(K_QOS_STATE, "mqtt", "qos_state", EM_SCHEMA_ENUM, FIELD(qos_state), .def = "1",              \
      .choices = qos_levels, .n_choices = 2, .want = "must be 0 or 1 (qos 2 is not supported)",    \
      .example = "1", .doc = "QoS of birth, state and status")                                     \
  KEY(K_KEEPALIVE, "mqtt", "keepalive", EM_SCHEMA_DURATION, FIELD(keepalive_s),                    \
      RANGE(5 * NS_PER_S, NS_PER_H), .def = "30s", .flags = EM_SCHEMA_SECONDS | EM_SCHEMA_WHOLE,   \
      .example = "30s", .doc = "MQTT keepalive, whole seconds")                                    \
  KEY(K_ACK_TIMEOUT, "mqtt", "ack_timeout", EM_SCHEMA_DURATION, FIELD(ack_timeout_ns),             \
      RANGE(NS_PER_S, NS_PER_H), .def = "10s", .flags = EM_SCHEMA_OFF, .example = "10s",           \
      .doc = "PUBACK wait before the session is dropped and data spooled; off: none")              \
  KEY(K_RECONNECT_MIN, "mqtt", "reconnect_min", EM_SCHEMA_DURATION, FIELD(reconnect_min_ns),       \
      RANGE(100 * NS_PER_MS, NS_PER_H), .def = "500ms", .example = "500ms",                        \
      .doc = "Reconnect backoff start")                                                            \
  KEY(K_RECONNECT_MAX, "mqtt", "reconnect_max", EM_SCHEMA_DURATION, FIELD(reconnect_max_ns),       \
      RANGE(100 * NS_PER_MS, NS_PER_H), .def = "30s", .example = "30s",                            \
      .doc = "Reconnect backoff cap")                                                              \
  KEY(K_TLS_CA_FILE, "mqtt", "tls_ca_file", EM_SCHEMA_PATH, FIELD(tls_ca_file),                    \
      .example = "/etc/edgemon/ca.crt", .doc = "mqtts://: PEM CA bundle")                          \
  KEY(K_TLS_CA_PATH, "mqtt", "tls_ca_path", EM_SCHEMA_PATH, FIELD(tls_ca_path),                    \
      .example = "/etc/ssl/certs", .doc = "mqtts://: directory of hashed CA certificates")         \
  KEY(K_TLS_CERT_FILE, "mqtt", "tls_cert_file", EM_SCHEMA_PATH, FIELD(tls_cert_file),              \
      .example = "/etc/edgemon/device.crt", .doc = "mqtts://: client certificate (PEM)")           \
  KEY(K_TLS_KEY_FILE, "mqtt", "tls_key_file", EM_SCHEMA_PATH, FIELD(tls_key_file),                 \
      .example = "/etc/edgemon/device.key", .doc = "mqtts://: its private key, a private file")    \
  KEY(K_TLS_INSECURE, "mqtt", "tls_insecure", EM_SCHEMA_BOOL, FIELD(tls_insecure), .def = "false", \
      .example = "false", .doc = "true: no broker host name check (tests only)")                   \
  KEY(K_CREDENTIALS_FILE, "mqtt", "credentials_file", EM_SCHEMA_PATH, FIELD(credentials_file),     \
      .flags = EM_SCHEMA_SECRET, .example = "/etc/edgemon/mqtt.credentials",                       \
      .doc = "username = / password = lines, a private file")                                      \
  KEY(K_EVENTS, "pmu", "events", EM_SCHEMA_LIST, NO_FIELD, .set = set_events, .same = same_events, \
      .def = "cycles, instructions, cache-references, cache-misses, branch-instructions, "         \
             "branch-misses, task-clock, context-switches, cpu-migrations, page-faults",           \
      .example = "cycles, instructions", .doc = "PMU events (else the board profile's)")           \
  KEY(K_SPAN_SOCKET, "spans", "socket", EM_SCHEMA_PATH, FIELD(span_socket),                        \
      .example = "/run/edgemon/spans.sock", .doc = "Default <runtime_dir>/spans.sock")             \
  KEY(K_SOCKET_MODE, "spans", "socket_mode", EM_SCHEMA_CUSTOM, FIELD(span_socket_mode),            \
      .set = set_socket_mode, .def = "0660", .example = "0660",                                    \
      .doc = "Octal permissions, owner read-write at least")                                       \
  KEY(K_SOCKET_GROUP, "spans", "socket_group", EM_SCHEMA_CUSTOM, FIELD(span_socket_gid),           \
      .set = set_socket_group, .compute = default_socket_group, .example = "video",                \
      .doc = "Group of the socket; default the agent's")                                           \
  KEY(K_ALLOW_UIDS, "spans", "allow_uids", EM_SCHEMA_LIST, NO_FIELD, .set = set_allow_uids,        \
      .same = same_uids, .example = "0, robot", .doc = "Users allowed to send spans; default any") \
  KEY(K_ALLOW_GIDS, "spans", "allow_gids", EM_SCHEMA_LIST, NO_FIELD, .set = set_allow_gids,        \
      .same = same_gids, .example = "video", .doc = "Groups allowed to send spans; default any")   \
  KEY(K_MAX_STAGES, "spans", "max_stages", EM_SCHEMA_INT, FIELD(max_stages),                       \
      RANGE(1, EM_PROTO_MAX_STAGES), .def = "32", .example = "32",                                 \
      .doc = "Stages tracked at once")                                                             \
  KEY(K_STAGE_IDLE, "spans", "stage_idle", EM_SCHEMA_DURATION, FIELD(stage_idle_ns),               \
      RANGE(NS_PER_MS, 24 * NS_PER_H), .def = "60s", APPLY(EM_CONFIG_APPLY_STAGES),                \
      .example = "60s", .doc = "An unbudgeted stage this long silent may give its slot away")      \
  KEY(K_RINGS, "spans", "rings", EM_SCHEMA_INT, FIELD(rings), RANGE(1, EM_CONFIG_MAX_RINGS),       \
      .def = "64", .example = "64", .doc = "Span rings registered at once")                        \
  KEY(K_RINGS_PER_PROCESS, "spans", "rings_per_process", EM_SCHEMA_INT, FIELD(rings_per_process),  \
      RANGE(1, EM_CONFIG_MAX_RINGS), .def = "16", .example = "16",                                 \
      .doc = "Span rings per process")                                                             \
  KEY(K_RING_SLOTS, "spans", "ring_slots", EM_SCHEMA_INT, FIELD(ring_slots),                       \
      RANGE(EM_RING_MIN_SLOTS, EM_RING_MAX_SLOTS), .set = set_ring_slots, .def = "1024",           \
      APPLY(EM_CONFIG_APPLY_DEADLINES), .example = "1024",                                         \
      .doc = "Slots per ring suggested, a power of two")                                           \
  KEY(K_ENTER_WINDOWS, "degrade", "enter_windows", EM_SCHEMA_INT, FIELD(enter_windows),            \
      RANGE(1, 100), .def = "3", APPLY(EM_CONFIG_APPLY_BUDGETS), .example = "3",                   \
      .doc = "Violating windows before a rule enters")                                             \
  KEY(K_LEAVE_WINDOWS, "degrade", "leave_windows", EM_SCHEMA_INT, FIELD(leave_windows),            \
      RANGE(1, 1000), .def = "5", APPLY(EM_CONFIG_APPLY_BUDGETS), .example = "5",                  \
      .doc = "Clean windows per step down")                                                        \
  KEY(K_DEGRADE_WINDOW, "degrade", "window", EM_SCHEMA_DURATION, FIELD(window_ns),                 \
      RANGE(NS_PER_MS, NS_PER_H), .def = "1s", APPLY(EM_CONFIG_APPLY_BUDGETS), .example = "1s",    \
      .doc = "Budget evaluation window, at least sample_period")                                   \
  KEY(K_HOOK, "degrade", "hook", EM_SCHEMA_PATH, FIELD(hook),                                      \
      .example = "/usr/local/bin/on-level", .doc = "Command run on every change of level")         \
  KEY(K_HOOK_TIMEOUT, "degrade", "hook_timeout", EM_SCHEMA_DURATION, FIELD(hook_timeout_ns),       \
      RANGE(100 * NS_PER_MS, 10 * NS_PER_MIN), .def = "5s", .example = "5s",                       \
      .doc = "The hook is killed after this")                                                      \
  KEY(K_SPOOL_PATH, "spool", "path", EM_SCHEMA_PATH, FIELD(spool_path), .flags = EM_SCHEMA_OFF,    \
      .def = "/var/lib/edgemon/spool", .example = "/var/lib/edgemon/spool",                        \
      .doc = "Spool file while the broker is away; off: memory only")                              \
  KEY(K_SPOOL_SIZE, "spool", "size", EM_SCHEMA_SIZE, FIELD(spool_bytes),                           \
      RANGE(64ull << 10, 1ull << 30), .def = "16MiB", .example = "16MiB",                          \
      .doc = "Spool ring capacity")                                                                \
  KEY(K_SPOOL_SYNC, "spool", "sync_interval", EM_SCHEMA_DURATION, FIELD(spool_sync_ns),            \
      RANGE(100 * NS_PER_MS, NS_PER_H), .def = "5s", .example = "5s", .doc = "fdatasync cadence")  \
  KEY(K_REPLAY_PER_TICK, "spool", "replay_per_tick", EM_SCHEMA_INT, FIELD(replay_per_tick),        \
      RANGE(1, 10000), .def = "32", .example = "32", .doc = "Spooled messages sent per tick")      \
  KEY(K_WRITE_AHEAD, "spool", "write_ahead", EM_SCHEMA_BOOL, FIELD(spool_write_ahead),             \
      .def = "true", .example = "true",                                                            \
      .doc = "QoS 1 messages spooled before sending, done on PUBACK")                              \
  KEY(K_FLIGHT_ENABLED, "flight", "enabled", EM_SCHEMA_BOOL, FIELD(flight_enabled), .def = "true", \
      .example = "true",                                                                           \
      .doc = "Flight recorder on: the last seconds kept, a recording on every escalation")         \
  KEY(K_FLIGHT_PRE, "flight", "pre_seconds", EM_SCHEMA_DURATION, FIELD(flight_pre_ns),             \
      RANGE(100 * NS_PER_MS, 10 * NS_PER_MIN), .bare_unit = NS_PER_S, .def = "10",                 \
      .example = "10", .doc = "Time kept before a trigger (seconds, or a duration)")               \
  KEY(K_FLIGHT_POST, "flight", "post_seconds", EM_SCHEMA_DURATION, FIELD(flight_post_ns),          \
      RANGE(0, 10 * NS_PER_MIN), .bare_unit = NS_PER_S, .def = "2", .flags = EM_SCHEMA_ZERO,       \
      .example = "2", .doc = "Time recorded after a trigger (seconds, or a duration)")             \
  KEY(K_FLIGHT_MAX_SPANS, "flight", "max_spans", EM_SCHEMA_INT, FIELD(flight_max_spans),           \
      RANGE(64, EM_FLIGHT_MAX_SPANS), .def = "16384", .example = "16384",                          \
      .doc = "Spans the ring holds (32 bytes each)")                                               \
  KEY(K_FLIGHT_MAX_BYTES, "flight", "max_bytes", EM_SCHEMA_SIZE, FIELD(flight_max_bytes),          \
      RANGE(4096, EM_FLIGHT_MAX_BYTES), .bare_unit = 1, .def = "262144", .example = "262144",      \
      .doc = "Largest recording encoded; farther spans and ticks are cut")                         \
  KEY(K_FLIGHT_MIN_GAP, "flight", "min_gap_seconds", EM_SCHEMA_DURATION, FIELD(flight_min_gap_ns), \
      RANGE(0, 24 * NS_PER_H), .bare_unit = NS_PER_S, .def = "30",                                 \
      .flags = RELOAD | EM_SCHEMA_ZERO, .apply = EM_CONFIG_APPLY_FLIGHT_GAP, .example = "30",      \
      .doc = "Least time between two recordings (seconds, or a duration)")                         \
  KEY(K_PROFILE_ENABLED, "profile", "enabled", EM_SCHEMA_BOOL, FIELD(profile_enabled),             \
      .def = "true", .example = "true",                                                            \
      .doc = "Stack profiler on: a sampling window on every escalation and cmd/profile")           \
  KEY(K_PROFILE_HZ, "profile", "hz", EM_SCHEMA_INT, FIELD(profile_hz), RANGE(49, 199),             \
      .def = "99", .example = "99", .doc = "Samples per second per thread")                        \
  KEY(K_PROFILE_SECONDS, "profile", "seconds", EM_SCHEMA_DURATION, FIELD(profile_ns),              \
      RANGE(NS_PER_S, 60 * NS_PER_S), .bare_unit = NS_PER_S, .def = "5", .example = "5",           \
      .doc = "A window's length (seconds, or a duration); at most max_seconds")                    \
  KEY(K_PROFILE_MAX_SECONDS, "profile", "max_seconds", EM_SCHEMA_DURATION, FIELD(profile_max_ns),  \
      RANGE(NS_PER_S, 60 * NS_PER_S), .bare_unit = NS_PER_S, .def = "30", .example = "30",         \
      .doc = "The longest window a cmd/profile may ask for")                                       \
  KEY(K_PROFILE_MIN_GAP, "profile", "min_gap_seconds", EM_SCHEMA_DURATION,                         \
      FIELD(profile_min_gap_ns), RANGE(0, 24 * NS_PER_H), .bare_unit = NS_PER_S, .def = "60",      \
      .flags = RELOAD | EM_SCHEMA_ZERO, .apply = EM_CONFIG_APPLY_PROFILE_GAP, .example = "60",     \
      .doc = "Least time between two windows' starts (seconds, or a duration)")                    \
  KEY(K_PROFILE_CLOCK, "profile", "clock", EM_SCHEMA_ENUM, FIELD(profile_clock),                   \
      .def = "cpu-clock", .choices = profile_clocks, .n_choices = 2,                               \
      .want = "must be cpu-clock or task-clock", .example = "cpu-clock",                           \
      .doc = "The sampling event (software clocks: no hardware PMU needed)")                       \
  KEY(K_PROFILE_UNWIND, "profile", "unwind", EM_SCHEMA_ENUM, FIELD(profile_dwarf), .def = "dwarf", \
      .choices = profile_unwinds, .n_choices = 2, .want = "must be dwarf or fp",                   \
      .example = "dwarf",                                                                          \
      .doc = "Native frames by DWARF CFI from 8 KiB stack copies, or by frame pointers only")      \
  KEY(K_PROFILE_MAX_BYTES, "profile", "max_bytes", EM_SCHEMA_SIZE, FIELD(profile_max_bytes),       \
      RANGE(4096, EM_PROFILE_MAX_BYTES), .bare_unit = 1, .def = "262144", .example = "262144",     \
      .doc = "Largest profile encoded; the stacks with the fewest samples are cut")                \
  KEY(K_P50, STAGE, "p50", EM_SCHEMA_DURATION, STAGE_DURATION("20ms", "Median span length bound")) \
  KEY(K_P90, STAGE, "p90", EM_SCHEMA_DURATION, STAGE_DURATION("30ms", "90th percentile bound"))    \
  KEY(K_P99, STAGE, "p99", EM_SCHEMA_DURATION, STAGE_DURATION("40ms", "99th percentile bound"))    \
  KEY(K_P999, STAGE, "p999", EM_SCHEMA_DURATION,                                                   \
      STAGE_DURATION("60ms", "99.9th percentile bound"))                                           \
  KEY(K_DEADLINE, STAGE, "deadline", EM_SCHEMA_DURATION,                                           \
      STAGE_DURATION("100ms", "Every span at most this long"))                                     \
  KEY(K_MISS_RATIO, STAGE, "miss_ratio", EM_SCHEMA_CUSTOM,                                         \
      BUDGET_RATIO("0.05", "Share of spans over miss_over"))                                       \
  KEY(K_MISS_OVER, STAGE, "miss_over", EM_SCHEMA_DURATION,                                         \
      STAGE_DURATION("40ms", "The span length that counts as a miss"))                             \
  KEY(K_STALL, STAGE, "stall", EM_SCHEMA_DURATION, NO_FIELD, RANGE(NS_PER_MS, NS_PER_H), RULE_ROW, \
      .set = set_budget_typed, .example = "500ms", .doc = "Longest silence without a span")        \
  KEY(K_MIN_RATE, STAGE, "min_rate", EM_SCHEMA_CUSTOM,                                             \
      BUDGET_NUMBER(1000000, "a number above 0 and at most 1000000", "15",                         \
                    "Frames per second at least"))                                                 \
  KEY(K_FLOW, STAGE, "flow", EM_SCHEMA_LIST, NO_FIELD, RULE_ROW, .set = set_budget_flow,           \
      .example = "preprocess, infer, postprocess", .doc = "Stages a frame passes, in order")       \
  KEY(K_FLOW_DEADLINE, STAGE, "flow_deadline", EM_SCHEMA_DURATION,                                 \
      STAGE_DURATION("100ms", "Longest a frame may take"))                                         \
  KEY(K_STAGE_LEVEL, STAGE, "level", EM_SCHEMA_CUSTOM,                                             \
      BUDGET_LEVEL("Level of every rule of the section"))                                          \
  KEY(K_P50_LEVEL, STAGE, "p50_level", EM_SCHEMA_CUSTOM, BUDGET_LEVEL("Level of p50"))             \
  KEY(K_P90_LEVEL, STAGE, "p90_level", EM_SCHEMA_CUSTOM, BUDGET_LEVEL("Level of p90"))             \
  KEY(K_P99_LEVEL, STAGE, "p99_level", EM_SCHEMA_CUSTOM, BUDGET_LEVEL("Level of p99"))             \
  KEY(K_P999_LEVEL, STAGE, "p999_level", EM_SCHEMA_CUSTOM, BUDGET_LEVEL("Level of p999"))          \
  KEY(K_DEADLINE_LEVEL, STAGE, "deadline_level", EM_SCHEMA_CUSTOM,                                 \
      BUDGET_LEVEL("Level of deadline"))                                                           \
  KEY(K_MISS_RATIO_LEVEL, STAGE, "miss_ratio_level", EM_SCHEMA_CUSTOM,                             \
      BUDGET_LEVEL("Level of miss_ratio"))                                                         \
  KEY(K_STALL_LEVEL, STAGE, "stall_level", EM_SCHEMA_CUSTOM, BUDGET_LEVEL("Level of stall"))       \
  KEY(K_MIN_RATE_LEVEL, STAGE, "min_rate_level", EM_SCHEMA_CUSTOM,                                 \
      BUDGET_LEVEL("Level of min_rate"))                                                           \
  KEY(K_FLOW_LEVEL, STAGE, "flow_level", EM_SCHEMA_CUSTOM, BUDGET_LEVEL("Level of flow"))          \
  KEY(K_RSS_CAP, PROC, "rss_cap", EM_SCHEMA_SIZE, NO_FIELD, RANGE(1ull << 20, 1ull << 40),         \
      RULE_ROW, .set = set_budget_typed, .example = "2GiB", .doc = "Resident set cap")             \
  KEY(K_RSS_SLOPE, PROC, "rss_slope", EM_SCHEMA_CUSTOM,                                            \
      BUDGET_NUMBER(1000000, "a number above 0 and at most 1000000", "50",                         \
                    "Resident set growth, MiB per hour"))                                          \
  KEY(K_RSS_SLOPE_HORIZON, PROC, "rss_slope_horizon", EM_SCHEMA_DURATION, NO_FIELD,                \
      RANGE(NS_PER_MIN, 24 * NS_PER_H), RULE_ROW, .set = set_budget_typed, .example = "30m",       \
      .doc = "Window of the rss_slope fit; default 30m")                                           \
  KEY(K_GPU_MEM_CAP, PROC, "gpu_mem_cap", EM_SCHEMA_SIZE, NO_FIELD, RANGE(1ull << 20, 1ull << 40), \
      RULE_ROW, .set = set_budget_typed, .example = "4GiB",                                        \
      .doc = "The process's own GPU memory cap (gpu.mem.process)")                                 \
  KEY(K_GPU_MEM_SLOPE, PROC, "gpu_mem_slope", EM_SCHEMA_CUSTOM,                                    \
      BUDGET_NUMBER(1000000, "a number above 0 and at most 1000000", "50",                         \
                    "The process's own GPU memory growth, MiB per hour"))                          \
  KEY(K_GPU_MEM_SLOPE_HORIZON, PROC, "gpu_mem_slope_horizon", EM_SCHEMA_DURATION, NO_FIELD,        \
      RANGE(NS_PER_MIN, 24 * NS_PER_H), RULE_ROW, .set = set_budget_typed, .example = "30m",       \
      .doc = "Window of the gpu_mem_slope fit; default 30m")                                       \
  KEY(K_PSI_CPU_SOME, PROC, "psi_cpu_some", EM_SCHEMA_CUSTOM,                                      \
      BUDGET_NUMBER(100, "a percentage above 0 and at most 100", "40",                             \
                    "PSI cpu some avg10, percent"))                                                \
  KEY(K_PSI_MEMORY_SOME, PROC, "psi_memory_some", EM_SCHEMA_CUSTOM,                                \
      BUDGET_NUMBER(100, "a percentage above 0 and at most 100", "20", "PSI memory some avg10"))   \
  KEY(K_PSI_MEMORY_FULL, PROC, "psi_memory_full", EM_SCHEMA_CUSTOM,                                \
      BUDGET_NUMBER(100, "a percentage above 0 and at most 100", "5", "PSI memory full avg10"))    \
  KEY(K_PSI_IO_SOME, PROC, "psi_io_some", EM_SCHEMA_CUSTOM,                                        \
      BUDGET_NUMBER(100, "a percentage above 0 and at most 100", "40", "PSI io some avg10"))       \
  KEY(K_PSI_IO_FULL, PROC, "psi_io_full", EM_SCHEMA_CUSTOM,                                        \
      BUDGET_NUMBER(100, "a percentage above 0 and at most 100", "10", "PSI io full avg10"))       \
  KEY(K_TEMP_MAX, PROC, "temp_max", EM_SCHEMA_CUSTOM,                                              \
      BUDGET_NUMBER(200, "degrees C above 0 and at most 200", "85",                                \
                    "Hottest thermal zone, degrees C"))                                            \
  KEY(K_THROTTLE, PROC, "throttle", EM_SCHEMA_CUSTOM, NO_FIELD, RULE_ROW, .set = set_budget_on,    \
      .example = "on", .doc = "on: a rule that the board is not throttled")                        \
  KEY(K_PROCESS_LEVEL, PROC, "level", EM_SCHEMA_CUSTOM,                                            \
      BUDGET_LEVEL("Level of every process rule"))                                                 \
  KEY(K_RSS_CAP_LEVEL, PROC, "rss_cap_level", EM_SCHEMA_CUSTOM, BUDGET_LEVEL("Level of rss_cap"))  \
  KEY(K_RSS_SLOPE_LEVEL, PROC, "rss_slope_level", EM_SCHEMA_CUSTOM,                                \
      BUDGET_LEVEL("Level of rss_slope"))                                                          \
  KEY(K_GPU_MEM_CAP_LEVEL, PROC, "gpu_mem_cap_level", EM_SCHEMA_CUSTOM,                            \
      BUDGET_LEVEL("Level of gpu_mem_cap"))                                                        \
  KEY(K_GPU_MEM_SLOPE_LEVEL, PROC, "gpu_mem_slope_level", EM_SCHEMA_CUSTOM,                        \
      BUDGET_LEVEL("Level of gpu_mem_slope"))                                                      \
  KEY(K_PSI_CPU_SOME_LEVEL, PROC, "psi_cpu_some_level", EM_SCHEMA_CUSTOM,                          \
      BUDGET_LEVEL("Level of psi_cpu_some"))                                                       \
  KEY(K_PSI_MEMORY_SOME_LEVEL, PROC, "psi_memory_some_level", EM_SCHEMA_CUSTOM,                    \
      BUDGET_LEVEL("Level of psi_memory_some"))                                                    \
  KEY(K_PSI_MEMORY_FULL_LEVEL, PROC, "psi_memory_full_level", EM_SCHEMA_CUSTOM,                    \
      BUDGET_LEVEL("Level of psi_memory_full"))                                                    \
  KEY(K_PSI_IO_SOME_LEVEL, PROC, "psi_io_some_level", EM_SCHEMA_CUSTOM,                            \
      BUDGET_LEVEL("Level of psi_io_some"))                                                        \
  KEY(K_PSI_IO_FULL_LEVEL, PROC, "psi_io_full_level", EM_SCHEMA_CUSTOM,                            \
      BUDGET_LEVEL("Level of psi_io_full"))                                                        \
  KEY(K_TEMP_MAX_LEVEL, PROC, "temp_max_level", EM_SCHEMA_CUSTOM,                                  \
      BUDGET_LEVEL("Level of temp_max"))                                                           \
  KEY(K_THROTTLE_LEVEL, PROC, "throttle_level", EM_SCHEMA_CUSTOM, BUDGET_LEVEL("Level of throttle"))

typedef enum {
#define KEY_ID(key, ...) key,
  AGENT_KEYS(KEY_ID)
#undef KEY_ID
      K_COUNT
} key_id_t;

#define K_BUDGET_FIRST    K_P50
#define N_BUDGET_KEYS     (K_COUNT - K_BUDGET_FIRST)
#define MAX_BUDGET_STAGES EM_CONFIG_MAX_RULES /* Each [budget.<stage>] needs a rule. */

typedef struct load load_t;

/* A key's row in the schema (edgemon/common/schema.h); its id is a key_id_t. */
typedef em_schema_key_t key_def_t;

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
  char flow[EM_BUDGET_FLOW_MAX_STAGES][EM_CONFIG_MAX_STAGE];
} budget_sec_t;

typedef struct load_sections load_sections_t;

/* State of one em_config_load() call; em_config_defaults() has one too, without sections. */
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
  load_sections_t *secs;   /* em_config_load()'s budget sections (allocated); NULL in
                              em_config_defaults(), which reads no file. */
};

/* ---- budget sections: the rule tables and the load's allocated part --------------------- */

/* Each rule key: its per-rule level key, its kind, and what the kind needs. */
typedef struct {
  key_id_t key;
  key_id_t level_key;
  em_budget_rule_kind_t kind;
  double q;           /* PERCENTILE */
  const char *figure; /* PSI, GAUGE_MAX */
} rule_def_t;

/* The rules of a [budget.<stage>]: one per <rule>_level key of the section. */
static const rule_def_t stage_rule_defs[] = {
    {K_P50, K_P50_LEVEL, EM_BUDGET_RULE_PERCENTILE, 0.5, NULL},
    {K_P90, K_P90_LEVEL, EM_BUDGET_RULE_PERCENTILE, 0.9, NULL},
    {K_P99, K_P99_LEVEL, EM_BUDGET_RULE_PERCENTILE, 0.99, NULL},
    {K_P999, K_P999_LEVEL, EM_BUDGET_RULE_PERCENTILE, 0.999, NULL},
    {K_DEADLINE, K_DEADLINE_LEVEL, EM_BUDGET_RULE_DEADLINE, 0, NULL},
    {K_MISS_RATIO, K_MISS_RATIO_LEVEL, EM_BUDGET_RULE_MISS_RATIO, 0, NULL},
    {K_STALL, K_STALL_LEVEL, EM_BUDGET_RULE_ALIVE, 0, NULL},
    {K_MIN_RATE, K_MIN_RATE_LEVEL, EM_BUDGET_RULE_RATE, 0, NULL},
    {K_FLOW, K_FLOW_LEVEL, EM_BUDGET_RULE_FLOW, 0, NULL},
};

/* The rules of [budget.process]: one per <rule>_level key of the section. */
static const rule_def_t process_rule_defs[] = {
    {K_RSS_CAP, K_RSS_CAP_LEVEL, EM_BUDGET_RULE_RSS_CAP, 0, NULL},
    {K_RSS_SLOPE, K_RSS_SLOPE_LEVEL, EM_BUDGET_RULE_RSS_SLOPE, 0, NULL},
    {K_GPU_MEM_CAP, K_GPU_MEM_CAP_LEVEL, EM_BUDGET_RULE_GPU_MEM_CAP, 0, NULL},
    {K_GPU_MEM_SLOPE, K_GPU_MEM_SLOPE_LEVEL, EM_BUDGET_RULE_GPU_MEM_SLOPE, 0, NULL},
    {K_PSI_CPU_SOME, K_PSI_CPU_SOME_LEVEL, EM_BUDGET_RULE_PSI, 0, "psi.cpu.some.avg10"},
    {K_PSI_MEMORY_SOME, K_PSI_MEMORY_SOME_LEVEL, EM_BUDGET_RULE_PSI, 0, "psi.memory.some.avg10"},
    {K_PSI_MEMORY_FULL, K_PSI_MEMORY_FULL_LEVEL, EM_BUDGET_RULE_PSI, 0, "psi.memory.full.avg10"},
    {K_PSI_IO_SOME, K_PSI_IO_SOME_LEVEL, EM_BUDGET_RULE_PSI, 0, "psi.io.some.avg10"},
    {K_PSI_IO_FULL, K_PSI_IO_FULL_LEVEL, EM_BUDGET_RULE_PSI, 0, "psi.io.full.avg10"},
    {K_TEMP_MAX, K_TEMP_MAX_LEVEL, EM_BUDGET_RULE_GAUGE_MAX, 0, EM_CONFIG_FIGURE_TEMP},
    {K_THROTTLE, K_THROTTLE_LEVEL, EM_BUDGET_RULE_GAUGE_MAX, 0, EM_CONFIG_FIGURE_THROTTLED},
};
#define N_STAGE_RULES   (sizeof(stage_rule_defs) / sizeof(stage_rule_defs[0]))
#define N_PROCESS_RULES (sizeof(process_rule_defs) / sizeof(process_rule_defs[0]))

/* Each section's <rule>_level keys follow its `level` key up to the section's last key (the
 * order of key_id_t): a rule key added with its level but not to its table fails here. */
_Static_assert(N_STAGE_RULES == K_RSS_CAP - K_STAGE_LEVEL - 1,
               "stage_rule_defs has a row for each <rule>_level key of [budget.<stage>]");
_Static_assert(N_PROCESS_RULES == K_COUNT - K_PROCESS_LEVEL - 1,
               "process_rule_defs has a row for each <rule>_level key of [budget.process]");

/* The rules every budget section of a file can give before the count is checked: each of the
 * MAX_BUDGET_STAGES stage sections with every stage rule, [budget.process] with every process
 * rule. finish_budget() collects them all, to report the first one past EM_CONFIG_MAX_RULES
 * in file order. */
#define MAX_PENDING_RULES (MAX_BUDGET_STAGES * N_STAGE_RULES + N_PROCESS_RULES)
_Static_assert(MAX_PENDING_RULES >= EM_CONFIG_MAX_RULES + 1,
               "a file with one rule too many is reported, not cut silently");

/* A rule found valid, waiting to be put in file order. */
typedef struct {
  int line;
  const budget_sec_t *sec;
  const rule_def_t *def; /* Its row of stage_rule_defs or process_rule_defs. */
} pending_rule_t;

/* The budget sections of a file and the rules found valid in them: the big part of a load. */
struct load_sections {
  budget_sec_t process; /* [budget.process] */
  budget_sec_t stages[MAX_BUDGET_STAGES];
  size_t n_stages;
  pending_rule_t pend[MAX_PENDING_RULES]; /* finish_budget()'s rules, then in file order. */
};

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

/* Marks key k as given in the file with a valid value (its row's setter returned 0). */
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

/*
 * [target] keys: the first one given wins; a second one is a conflict. Returns false after
 * reporting the conflict, else records k as the target key.
 */
static bool take_target(load_t *ld, const key_def_t *k) {
  if (ld->target != NULL) {
    report(ld, ld->line, "[target] %s conflicts with %s on line %d", k->name, ld->target->name,
           *key_line_slot(ld, ld->target));
    return false;
  }
  ld->target = k;
  return true;
}

/* Each [target] kind: its own check, then the value stored (pid as a number, the others as
 * text). */
static int set_target_pid(void *ctx, const key_def_t *k, void *obj, const char *value) {
  load_t *ld = ctx;
  em_config_t *cfg = obj;
  uint64_t pid = 0;
  if (!take_target(ld, k)) {
    return -EINVAL;
  }
  if (!parse_u64(value, &pid) || pid < 1 || pid > MAX_PID) {
    char q[QUOTE_MAX + 4];
    report(ld, ld->line, "pid '%s' must be a number from 1 to %d", quote(q, sizeof(q), value),
           MAX_PID);
    return -EINVAL;
  }
  cfg->target.pid = (int32_t)pid;
  cfg->target.kind = EM_TARGET_PID;
  return 0;
}

/* Stores a [target] kind's text once its check passed. */
static int store_target_text(em_config_t *cfg, em_target_kind_t kind, const char *value) {
  cfg->target.kind = kind;
  em_str_copy(cfg->target.value, sizeof(cfg->target.value), value);
  return 0;
}

static int set_target_pid_file(void *ctx, const key_def_t *k, void *obj, const char *value) {
  if (!take_target(ctx, k) || !check_path(ctx, k, value)) {
    return -EINVAL;
  }
  return store_target_text(obj, EM_TARGET_PIDFILE, value);
}

static int set_target_cgroup(void *ctx, const key_def_t *k, void *obj, const char *value) {
  if (!take_target(ctx, k) || !check_path(ctx, k, value)) {
    return -EINVAL;
  }
  return store_target_text(obj, EM_TARGET_CGROUP, value);
}

static int set_target_comm(void *ctx, const key_def_t *k, void *obj, const char *value) {
  load_t *ld = ctx;
  if (!take_target(ld, k)) {
    return -EINVAL;
  }
  if (strlen(value) > MAX_COMM) {
    char q[QUOTE_MAX + 4];
    report(ld, ld->line, "process_name '%s' is longer than %d characters (the kernel's comm limit)",
           quote(q, sizeof(q), value), MAX_COMM);
    return -EINVAL;
  }
  return store_target_text(obj, EM_TARGET_COMM, value);
}

static int set_target_cmdline(void *ctx, const key_def_t *k, void *obj, const char *value) {
  load_t *ld = ctx;
  if (!take_target(ld, k)) {
    return -EINVAL;
  }
  if (strlen(value) > MAX_CMDLINE) {
    report(ld, ld->line, "cmdline is longer than %d characters", MAX_CMDLINE);
    return -EINVAL;
  }
  return store_target_text(obj, EM_TARGET_CMDLINE, value);
}

static int set_broker(void *ctx, const key_def_t *k, void *obj, const char *value) {
  load_t *ld = ctx;
  em_config_t *cfg = obj;
  char host[sizeof(cfg->broker_host)];
  uint16_t port = 0;
  bool tls = false;
  const char *why = parse_broker(value, host, sizeof(host), &port, &tls);
  if (why != NULL) {
    char q[QUOTE_MAX + 4];
    report(ld, ld->line, "%s '%s' %s", k->name, quote(q, sizeof(q), value), why);
    return -EINVAL;
  }
  memcpy(cfg->broker_host, host, sizeof(host));
  cfg->broker_port = port;
  cfg->tls = tls;
  return 0;
}

/* client_id: 1..64 characters of printable ASCII without spaces. */
static int set_client_id(void *ctx, const key_def_t *k, void *obj, const char *value) {
  load_t *ld = ctx;
  em_config_t *cfg = obj;
  char q[QUOTE_MAX + 4];
  if (strlen(value) > MAX_CLIENT_ID) {
    report(ld, ld->line, "%s '%s' is longer than %d characters", k->name,
           quote(q, sizeof(q), value), MAX_CLIENT_ID);
    return -EINVAL;
  }
  for (const char *p = value; *p != '\0'; p++) {
    unsigned char c = (unsigned char)*p;
    if (c <= 0x20 || c >= 0x7f) {
      report(ld, ld->line, "%s '%s' may use only printable ascii without spaces", k->name,
             quote(q, sizeof(q), value));
      return -EINVAL;
    }
  }
  em_str_copy(cfg->client_id, sizeof(cfg->client_id), value);
  return 0;
}

/* [spans] socket_mode: octal permission bits, owner read-write at least. */
static int set_socket_mode(void *ctx, const key_def_t *k, void *obj, const char *value) {
  load_t *ld = ctx;
  em_config_t *cfg = obj;
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
    return -EINVAL;
  }
  cfg->span_socket_mode = mode;
  return 0;
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
static int set_socket_group(void *ctx, const key_def_t *k, void *obj, const char *value) {
  load_t *ld = ctx;
  em_config_t *cfg = obj;
  uint32_t gid = 0;
  if (!resolve_id(ld, k, value, true, &gid)) {
    return -EINVAL;
  }
  cfg->span_socket_gid = (int64_t)gid;
  return 0;
}

/*
 * [spans] allow_uids / allow_gids: comma or space separated users (or groups) into
 * ids[0..EM_CONFIG_MAX_IDS); the count in *n. Returns false after reporting.
 */
static bool parse_ids(load_t *ld, const key_def_t *k, const char *value, bool group, uint32_t *ids,
                      size_t *n_out) {
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
      if (n == EM_CONFIG_MAX_IDS) {
        report(ld, ld->line, "%s: more than %d entries", k->name, EM_CONFIG_MAX_IDS);
      } else {
        report(ld, ld->line, "%s: an entry is too long", k->name);
      }
      return false;
    }
    memcpy(name, start, len);
    name[len] = '\0';
    bad = !resolve_id(ld, k, name, group, &ids[n++]) || bad;
  }
  *n_out = n;
  return !bad;
}

static int set_allow_uids(void *ctx, const key_def_t *k, void *obj, const char *value) {
  em_config_t *cfg = obj;
  uint32_t ids[EM_CONFIG_MAX_IDS];
  size_t n = 0;
  if (!parse_ids(ctx, k, value, false, ids, &n)) {
    return -EINVAL;
  }
  memcpy(cfg->allow_uids, ids, n * sizeof(ids[0]));
  cfg->n_allow_uids = n;
  return 0;
}

static int set_allow_gids(void *ctx, const key_def_t *k, void *obj, const char *value) {
  em_config_t *cfg = obj;
  uint32_t ids[EM_CONFIG_MAX_IDS];
  size_t n = 0;
  if (!parse_ids(ctx, k, value, true, ids, &n)) {
    return -EINVAL;
  }
  memcpy(cfg->allow_gids, ids, n * sizeof(ids[0]));
  cfg->n_allow_gids = n;
  return 0;
}

/* [spans] ring_slots: the slot count suggested to clients, a power of two in the ring's range. */
static int set_ring_slots(void *ctx, const key_def_t *k, void *obj, const char *value) {
  load_t *ld = ctx;
  em_config_t *cfg = obj;
  uint64_t n = 0;
  if (!parse_u64(value, &n) || n < EM_RING_MIN_SLOTS || n > EM_RING_MAX_SLOTS ||
      (n & (n - 1)) != 0) {
    char q[QUOTE_MAX + 4];
    report(ld, ld->line, "%s '%s' must be a power of two from %u to %u", k->name,
           quote(q, sizeof(q), value), EM_RING_MIN_SLOTS, EM_RING_MAX_SLOTS);
    return -EINVAL;
  }
  cfg->ring_slots = (uint32_t)n;
  return 0;
}

/* Reports an unknown event, with a suggestion when one is close, and the valid names: the
 * generic names of collect/pmu.c (em_pmu_generic_name), perf's aliases left out. */
static void report_unknown_event(load_t *ld, const char *name) {
  char valid[512];
  size_t used = 0;
  const char *names[64];
  size_t n_names = 0;
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
    if (n_names < sizeof(names) / sizeof(names[0])) {
      names[n_names++] = generic;
    }
  }
  const char *hint = em_schema_closest(name, names, n_names);
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
static int set_events(void *ctx, const key_def_t *k, void *obj, const char *value) {
  load_t *ld = ctx;
  em_config_t *cfg = obj;
  char names[EM_CONFIG_MAX_EVENTS][EM_CONFIG_MAX_EVENT_NAME];
  memset(names, 0, sizeof(names)); /* No bytes of the stack after a name's NUL. */
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
    return -EINVAL;
  }
  if (bad) {
    return -EINVAL;
  }
  memset(cfg->events, 0, sizeof(cfg->events));
  memcpy(cfg->events, names, sizeof(names[0]) * n);
  cfg->n_events = n;
  return 0;
}

/* ---- [degrade] and [budget.*] setters --------------------------------------------------- */

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

/* level and <rule>_level: WARN, DEGRADED or CRITICAL, in any case. */
static int set_budget_level(void *ctx, const key_def_t *k, void *obj, const char *value) {
  load_t *ld = ctx;
  (void)obj;
  static const em_parse_enum_t levels[] = {
      {"WARN", EM_LEVEL_WARN}, {"DEGRADED", EM_LEVEL_DEGRADED}, {"CRITICAL", EM_LEVEL_CRITICAL}};
  char q[QUOTE_MAX + 4];
  quote(q, sizeof(q), value);
  int level = 0;
  if (em_parse_enum(value, levels, sizeof(levels) / sizeof(levels[0]), true, &level) == 0) {
    ld->budget->val[k->id - K_BUDGET_FIRST].level = (em_level_t)level;
    return 0;
  }
  if (strcasecmp(value, "NOMINAL") == 0) {
    report(ld, ld->line, "%s '%s' is not allowed: a rule raises WARN, DEGRADED or CRITICAL",
           k->name, q);
    return -EINVAL;
  }
  report(ld, ld->line, "%s '%s' must be WARN, DEGRADED or CRITICAL", k->name, q);
  return -EINVAL;
}

/*
 * A budget number above 0 and at most `hi` (below it with `below`) into the current budget
 * section; else reported as "must be WANT" with the row's example.
 */
static int store_budget_number(load_t *ld, const key_def_t *k, const char *value, double hi,
                               bool below, const char *want) {
  double d = 0;
  if (!parse_number(value, &d) || !(d > 0.0) || d > hi || (below && d >= hi)) {
    char q[QUOTE_MAX + 4];
    report(ld, ld->line, "%s '%s' must be %s, e.g. %s", k->name, quote(q, sizeof(q), value), want,
           k->example);
    return -EINVAL;
  }
  ld->budget->val[k->id - K_BUDGET_FIRST].d = d;
  return 0;
}

/* miss_ratio: a share, 0 < r < 1. */
static int set_budget_ratio(void *ctx, const key_def_t *k, void *obj, const char *value) {
  (void)obj;
  return store_budget_number(ctx, k, value, 1.0, true, "a number above 0 and below 1");
}

/* min_rate, rss_slope, temp_max, psi_*: above 0 and at most the row's max, else "must be
 * WANT" with the row's `want`. */
static int set_budget_number(void *ctx, const key_def_t *k, void *obj, const char *value) {
  (void)obj;
  return store_budget_number(ctx, k, value, (double)k->max, false, k->want);
}

/* throttle = on: a rule that the board is not throttled (thermal trip, frequency cap, power
 * limit); the figure is 1 while throttled, so the bound is 0.5. */
static int set_budget_on(void *ctx, const key_def_t *k, void *obj, const char *value) {
  load_t *ld = ctx;
  (void)obj;
  if (strcmp(value, "on") != 0) {
    char q[QUOTE_MAX + 4];
    report(ld, ld->line, "%s '%s' must be on (leave the key out for no rule)", k->name,
           quote(q, sizeof(q), value));
    return -EINVAL;
  }
  ld->budget->val[k->id - K_BUDGET_FIRST].d = 0.5;
  return 0;
}

/*
 * flow: 2..EM_BUDGET_FLOW_MAX_STAGES distinct stage names, comma-separated, in the order a frame
 * passes them. They need not include the section's own name.
 */
static int set_budget_flow(void *ctx, const key_def_t *k, void *obj, const char *value) {
  load_t *ld = ctx;
  (void)obj;
  char q[QUOTE_MAX + 4];
  char stages[EM_BUDGET_FLOW_MAX_STAGES][EM_CONFIG_MAX_STAGE];
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
      for (size_t i = 0; ok && i < n && i < EM_BUDGET_FLOW_MAX_STAGES; i++) {
        dup = dup || strcmp(stages[i], name) == 0;
      }
      if (!ok) {
        report(ld, ld->line, "%s stage name '%s' may use only letters, digits and _ . : -", k->name,
               quote(q, sizeof(q), name));
        bad = true;
      } else if (dup) {
        report(ld, ld->line, "%s lists stage '%s' twice", k->name, name);
        bad = true;
      } else if (n < EM_BUDGET_FLOW_MAX_STAGES) {
        memcpy(stages[n], name, len + 1);
      }
    }
    n++;
    if (*p == '\0') {
      break;
    }
    p++; /* The comma. */
  }
  if (n > EM_BUDGET_FLOW_MAX_STAGES) {
    report(ld, ld->line, "%s lists %zu stages; at most %d", k->name, n, EM_BUDGET_FLOW_MAX_STAGES);
    return -EINVAL;
  }
  if (bad) {
    return -EINVAL;
  }
  if (n < 2) {
    report(ld, ld->line, "%s needs at least 2 stages, in order, e.g. %s", k->name, k->example);
    return -EINVAL;
  }
  budget_sec_t *b = ld->budget;
  memcpy(b->flow, stages, sizeof(stages));
  b->n_flow = n;
  return 0;
}

/* Budget durations (p99, deadline, stall, ...) and rss_cap: the row's type and range (the
 * schema's wording) into the current budget section's slot. */
static int set_budget_typed(void *ctx, const key_def_t *k, void *obj, const char *value) {
  load_t *ld = ctx;
  (void)obj;
  key_def_t row = *k;
  row.offset = 0;
  row.size = sizeof(uint64_t);
  row.set = NULL;
  char msg[EM_SCHEMA_MSG_MAX];
  if (em_schema_set(&row, &ld->budget->val[k->id - K_BUDGET_FIRST].u, value, msg, sizeof(msg)) !=
      0) {
    report(ld, ld->line, "%s", msg);
    return -EINVAL;
  }
  return 0;
}

/* The comparisons of em_config_reload_conflict() for keys that fill more than one field. */
static bool same_broker(const void *a, const void *b) {
  const em_config_t *x = a;
  const em_config_t *y = b;
  return strcmp(x->broker_host, y->broker_host) == 0 && x->broker_port == y->broker_port &&
         x->tls == y->tls;
}

/* The running config carries the board that "auto" or "generic" resolved to (main.c), which a
 * reloaded file asking for the same resolution again does not change. */
static bool same_board(const void *a, const void *b) {
  const em_config_t *x = a;
  const em_config_t *y = b;
  return strcmp(x->board, y->board) == 0 || strcmp(y->board, "auto") == 0 ||
         (strcmp(y->board, "generic") == 0 && strncmp(x->board, "generic", 7) == 0);
}

static bool same_events(const void *a, const void *b) {
  const em_config_t *x = a;
  const em_config_t *y = b;
  if (x->n_events != y->n_events) {
    return false;
  }
  for (size_t i = 0; i < x->n_events && i < EM_CONFIG_MAX_EVENTS; i++) {
    if (strncmp(x->events[i], y->events[i], sizeof(x->events[i])) != 0) {
      return false; /* Names, not the bytes after them. */
    }
  }
  return true;
}

static bool same_uids(const void *a, const void *b) {
  const em_config_t *x = a;
  const em_config_t *y = b;
  return x->n_allow_uids == y->n_allow_uids &&
         memcmp(x->allow_uids, y->allow_uids, sizeof(x->allow_uids[0]) * x->n_allow_uids) == 0;
}

static bool same_gids(const void *a, const void *b) {
  const em_config_t *x = a;
  const em_config_t *y = b;
  return x->n_allow_gids == y->n_allow_gids &&
         memcmp(x->allow_gids, y->allow_gids, sizeof(x->allow_gids[0]) * x->n_allow_gids) == 0;
}

/* [target]: one value over three fields (kind, pid, value); every [target] row shares these. */
static bool same_target(const void *a, const void *b) {
  const em_config_t *x = a;
  const em_config_t *y = b;
  return x->target.kind == y->target.kind && x->target.pid == y->target.pid &&
         strncmp(x->target.value, y->target.value, sizeof(x->target.value)) == 0;
}

static void copy_target(void *running, const void *next) {
  ((em_config_t *)running)->target = ((const em_config_t *)next)->target;
}

/* [budget.*]: every budget row's value ends in the rules built from the whole file. */
static bool same_rules(const void *a, const void *b) {
  const em_config_t *x = a;
  const em_config_t *y = b;
  return x->n_rules == y->n_rules && memcmp(x->rules, y->rules, sizeof(x->rules)) == 0 &&
         memcmp(x->rule_line, y->rule_line, sizeof(x->rule_line)) == 0;
}

static void copy_rules(void *running, const void *next) {
  em_config_t *r = running;
  const em_config_t *n = next;
  r->n_rules = n->n_rules;
  memcpy(r->rules, n->rules, sizeof(r->rules));
  memcpy(r->rule_line, n->rule_line, sizeof(r->rule_line));
}

/* ---- computed defaults (row hooks) ------------------------------------------------------- */

/* [agent] device_id: the hostname made topic-safe, other characters '-'; "edgemon" when there
 * is none. */
static void default_device_id(const key_def_t *k, void *obj) {
  (void)k;
  em_config_t *cfg = obj;
  char host[256] = "";
  if (gethostname(host, sizeof(host) - 1) != 0) {
    host[0] = '\0';
  }
  host[sizeof(host) - 1] = '\0';
  size_t n = 0;
  for (; host[n] != '\0' && n + 1 < sizeof(cfg->device_id); n++) {
    cfg->device_id[n] = is_id_char(host[n]) ? host[n] : '-';
  }
  cfg->device_id[n] = '\0';
  if (n == 0) {
    em_str_copy(cfg->device_id, sizeof(cfg->device_id), "edgemon");
  }
}

/* [agent] runtime_dir: $RUNTIME_DIRECTORY (systemd's RuntimeDirectory=, the first of its list),
 * else /run/edgemon for root, else $XDG_RUNTIME_DIR/edgemon, else /tmp/edgemon-<uid>. The
 * service runs as the edgemon user with a private /tmp: only the directory systemd made for it
 * is one that its clients can see, and they look there first (/run/edgemon, firmware/client). */
static void default_runtime_dir(const key_def_t *k, void *obj) {
  (void)k;
  char *out = ((em_config_t *)obj)->runtime_dir;
  size_t cap = sizeof(((em_config_t *)obj)->runtime_dir);
  const char *rd = getenv("RUNTIME_DIRECTORY");
  if (rd != NULL && rd[0] == '/') {
    size_t n = strcspn(rd, ":");
    if (n < cap) {
      memcpy(out, rd, n);
      out[n] = '\0';
      return;
    }
  }
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

/* [mqtt] client_id: edgemon-<device_id> (the row above it in the table). */
static void default_client_id(const key_def_t *k, void *obj) {
  (void)k;
  em_config_t *cfg = obj;
  snprintf(cfg->client_id, sizeof(cfg->client_id), "edgemon-%s", cfg->device_id);
}

/* [spans] socket_group: -1, the agent's own group. */
static void default_socket_group(const key_def_t *k, void *obj) {
  (void)k;
  ((em_config_t *)obj)->span_socket_gid = -1;
}

static const em_parse_enum_t log_levels[] = {
    {"error", EM_LOG_ERROR}, {"warn", EM_LOG_WARN}, {"info", EM_LOG_INFO}, {"debug", EM_LOG_DEBUG}};
static const em_parse_enum_t qos_levels[] = {{"0", 0}, {"1", 1}};
static const em_parse_enum_t profile_clocks[] = {{"cpu-clock", 0}, {"task-clock", 1}};
static const em_parse_enum_t profile_unwinds[] = {{"dwarf", 1}, {"fp", 0}};

/* Every key of the file, one row each: AGENT_KEYS above. */
#define KEY_ROW(key, sec, nm, ty, ...)                                                             \
  [key] = {.id = key, .section = sec, .name = nm, .type = ty, __VA_ARGS__},
static const key_def_t keys[K_COUNT] = {AGENT_KEYS(KEY_ROW)};
#undef KEY_ROW
#undef STAGE_DURATION
#undef BUDGET_LEVEL
#undef BUDGET_RATIO
#undef BUDGET_NUMBER
#undef RULE_ROW
#undef TARGET_ROW
#undef APPLY
#undef FIELD
#undef NO_FIELD
#undef RANGE

const em_schema_key_t *em_config_schema(size_t *n) {
  if (n != NULL) {
    *n = K_COUNT;
  }
  return keys;
}

const char *em_config_reload_conflict(const em_config_t *cur, const em_config_t *next, char *buf,
                                      size_t cap) {
  if (cur == NULL || next == NULL || buf == NULL || cap == 0) {
    return NULL;
  }
  const key_def_t *k = em_schema_first_change(keys, K_COUNT, cur, next);
  if (k == NULL) {
    return NULL;
  }
  snprintf(buf, cap, "[%s] %s", k->section, k->name);
  return buf;
}

unsigned em_config_adopt(em_config_t *running, const em_config_t *next) {
  if (running == NULL || next == NULL) {
    return 0;
  }
  return em_schema_adopt(keys, K_COUNT, running, next);
}

/* ---- defaults ---------------------------------------------------------------------------- */

/* Every row's default into ld->cfg: given (by type or through the row's setter) or computed by
 * the row's hook (edgemon/common/schema.h). */
static void fill_defaults(load_t *ld) {
  memset(ld->cfg, 0, sizeof(*ld->cfg));
  (void)em_schema_defaults(keys, K_COUNT, ld->cfg, ld, NULL);
}

void em_config_defaults(em_config_t *cfg) {
  if (cfg == NULL) {
    return;
  }
  load_t ld; /* A setter reports a bad default (a table mistake) through it. No sections. */
  memset(&ld, 0, sizeof(ld));
  ld.cfg = cfg;
  ld.file = "(defaults)";
  fill_defaults(&ld);
}

/* ---- the file: reader, handler, whole-file checks ---------------------------------------- */

/* Reports a message of the schema (em_schema_apply) on the current line. */
static void report_line(void *ctx, const char *msg) {
  load_t *ld = ctx;
  report(ld, ld->line, "%s", msg);
}

/* Reports an unknown key: where it belongs if it is another section's, else a close name. */
static void report_unknown_key(load_t *ld, const char *name) {
  char q[QUOTE_MAX + 4];
  quote(q, sizeof(q), name);
  const char *sec = ld->label;
  const key_def_t *other = em_schema_find_any(keys, K_COUNT, name);
  if (other != NULL) {
    report(ld, ld->line, "unknown key '%s' in [%s]; it belongs in [%s]", q, sec, other->section);
    return;
  }
  const char *hint = em_schema_suggest(keys, K_COUNT, section_names[ld->section], name);
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
    const key_def_t *k = em_schema_find_any(keys, K_COUNT, name);
    if (k != NULL) {
      report(ld, ld->line, "key '%s' is outside any section; put it under [%s]", k->name,
             k->section);
    } else {
      report(ld, ld->line, "key '%s' is outside any section; start with a section, e.g. [agent]",
             quote(q, sizeof(q), name));
    }
    return;
  }
  const key_def_t *k = em_schema_find(keys, K_COUNT, section_names[ld->section], name);
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
  if (em_schema_apply(k, ld->cfg, value, ld, report_line) == 0) {
    accept_key(ld, k);
  }
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
    ld->budget = &ld->secs->process;
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
    load_sections_t *secs = ld->secs;
    budget_sec_t *b = NULL;
    for (size_t i = 0; i < secs->n_stages && b == NULL; i++) {
      if (strcmp(secs->stages[i].name, stage) == 0) {
        b = &secs->stages[i];
      }
    }
    if (b == NULL) {
      if (secs->n_stages == MAX_BUDGET_STAGES) {
        report(ld, ld->line, "more than %d [budget.<stage>] sections", MAX_BUDGET_STAGES);
        return;
      }
      b = &secs->stages[secs->n_stages++];
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
  const char *hint =
      em_schema_closest(name, section_names + SEC_AGENT, N_PLAIN_SECTIONS - SEC_AGENT);
  /* [budjet.infer]: a misspelt "budget" before the stage. */
  char budget_hint[64];
  const char *dot = strchr(name, '.');
  if (dot != NULL && (size_t)(dot - name) < 16 && strlen(dot) < sizeof(budget_hint) - 6) {
    char prefix[16];
    memcpy(prefix, name, (size_t)(dot - name));
    prefix[dot - name] = '\0';
    static const char *const budget_word[] = {"budget"};
    if (em_schema_closest(prefix, budget_word, 1) != NULL) {
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

#define BLINE(sec, key) ((sec)->line[(key)-K_BUDGET_FIRST])
#define BOK(sec, key)   ((sec)->ok[(key)-K_BUDGET_FIRST])
#define BVAL(sec, key)  ((sec)->val[(key)-K_BUDGET_FIRST])

/*
 * Checks one budget section's keys against each other and adds its valid rules to pend.
 * A rule whose value or level was already reported is left out quietly.
 */
static void check_budget_sec(load_t *ld, const budget_sec_t *b, bool process, pending_rule_t *pend,
                             size_t *n_pend) {
  key_id_t sec_level = process ? K_PROCESS_LEVEL : K_STAGE_LEVEL;
  const rule_def_t *defs = process ? process_rule_defs : stage_rule_defs;
  size_t n_defs = process ? N_PROCESS_RULES : N_STAGE_RULES;
  size_t any = 0;
  for (size_t i = 0; i < n_defs; i++) {
    key_id_t key = defs[i].key;
    key_id_t level_key = defs[i].level_key;
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
    pend[*n_pend].def = &defs[i];
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
  if (process && BLINE(b, K_GPU_MEM_SLOPE_HORIZON) != 0 && BLINE(b, K_GPU_MEM_SLOPE) == 0) {
    report(ld, BLINE(b, K_GPU_MEM_SLOPE_HORIZON),
           "gpu_mem_slope_horizon is used only with gpu_mem_slope");
  }
  if (any == 0) {
    report(ld, b->header_line, "[budget.%s] sets no rule; e.g. %s", b->name,
           process ? "rss_cap = 2GiB" : "p99 = 40ms");
  }
}

/* Fills a rule of cfg->rules from a pending rule. */
static void fill_rule(em_budget_rule_t *r, const pending_rule_t *p, bool process) {
  const budget_sec_t *b = p->sec;
  key_id_t key = p->def->key;
  key_id_t level_key = p->def->level_key;
  memset(r, 0, sizeof(*r));
  snprintf(r->id, sizeof(r->id), "%s.%s", b->name, keys[key].name);
  if (!process && p->def->kind != EM_BUDGET_RULE_FLOW) {
    em_str_copy(r->stage, sizeof(r->stage), b->name);
  }
  r->kind = p->def->kind;
  key_id_t lk = BLINE(b, level_key) != 0 ? level_key : process ? K_PROCESS_LEVEL : K_STAGE_LEVEL;
  r->level = BVAL(b, lk).level;
  switch (r->kind) {
  case EM_BUDGET_RULE_PERCENTILE:
    r->u.percentile.q = p->def->q;
    r->u.percentile.bound_ns = BVAL(b, key).u;
    break;
  case EM_BUDGET_RULE_DEADLINE:
    r->u.deadline.bound_ns = BVAL(b, key).u;
    break;
  case EM_BUDGET_RULE_ALIVE:
    r->u.alive.silence_ns = BVAL(b, key).u;
    break;
  case EM_BUDGET_RULE_MISS_RATIO:
    r->u.miss_ratio.max_ratio = BVAL(b, key).d;
    r->u.miss_ratio.bound_ns = BVAL(b, BLINE(b, K_MISS_OVER) != 0 ? K_MISS_OVER : K_DEADLINE).u;
    break;
  case EM_BUDGET_RULE_RATE:
    r->u.rate.min_fps = BVAL(b, key).d;
    break;
  case EM_BUDGET_RULE_RSS_CAP:
  case EM_BUDGET_RULE_GPU_MEM_CAP:
    r->u.rss_cap.cap_bytes = BVAL(b, key).u;
    break;
  case EM_BUDGET_RULE_RSS_SLOPE:
  case EM_BUDGET_RULE_GPU_MEM_SLOPE: {
    key_id_t horizon =
        r->kind == EM_BUDGET_RULE_RSS_SLOPE ? K_RSS_SLOPE_HORIZON : K_GPU_MEM_SLOPE_HORIZON;
    r->u.rss_slope.max_mib_per_h = BVAL(b, key).d;
    r->u.rss_slope.horizon_ns = BOK(b, horizon) ? BVAL(b, horizon).u : 30 * NS_PER_MIN;
    break;
  }
  case EM_BUDGET_RULE_PSI:
  case EM_BUDGET_RULE_GAUGE_MAX:
    em_str_copy(r->u.gauge.figure, sizeof(r->u.gauge.figure), p->def->figure);
    r->u.gauge.max = BVAL(b, key).d;
    break;
  case EM_BUDGET_RULE_FLOW:
    r->u.flow.n_stages = b->n_flow;
    memcpy(r->u.flow.stages, b->flow, sizeof(r->u.flow.stages));
    em_str_copy(r->stage, sizeof(r->stage), b->flow[0]);
    r->u.flow.deadline_ns = BVAL(b, K_FLOW_DEADLINE).u;
    break;
  case EM_BUDGET_RULE_KINDS:
    break;
  }
}

/* Builds cfg->rules from every budget section, in file order; at most EM_CONFIG_MAX_RULES. */
static void finish_budget(load_t *ld) {
  load_sections_t *secs = ld->secs;
  pending_rule_t *pend = secs->pend;
  size_t n = 0;
  if (secs->process.header_line != 0) {
    check_budget_sec(ld, &secs->process, true, pend, &n);
  }
  for (size_t i = 0; i < secs->n_stages; i++) {
    check_budget_sec(ld, &secs->stages[i], false, pend, &n);
  }
  for (size_t i = 1; i < n; i++) { /* Insertion sort by line: at most MAX_PENDING_RULES. */
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
    fill_rule(&ld->cfg->rules[i], &pend[i], pend[i].sec == &secs->process);
    ld->cfg->rule_line[i] = pend[i].line;
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

  /* smaps_period (0: off), system_period, [degrade] window: at least sample_period; a default
   * moves up to meet sample_period. */
  static const struct {
    key_id_t key;
    const char *label;
  } at_least_sample[] = {{K_SMAPS_PERIOD, "smaps_period"},
                         {K_SYSTEM_PERIOD, "system_period"},
                         {K_DEGRADE_WINDOW, "[degrade] window"}};
  cfg->sample_period_set = ok[K_SAMPLE_PERIOD];
  cfg->events_set = ok[K_EVENTS];
  bool sample_usable = ok[K_SAMPLE_PERIOD] || at[K_SAMPLE_PERIOD] == 0;
  for (size_t i = 0; i < sizeof(at_least_sample) / sizeof(at_least_sample[0]); i++) {
    key_id_t key = at_least_sample[i].key;
    uint64_t *ns = (uint64_t *)(void *)((char *)cfg + keys[key].offset);
    bool off = (keys[key].flags & EM_SCHEMA_ZERO) && *ns == 0;
    if (ok[key] && sample_usable && !off && *ns < cfg->sample_period_ns) {
      em_schema_format_duration(a, sizeof(a), *ns);
      em_schema_format_duration(b, sizeof(b), cfg->sample_period_ns);
      char hint[80] = "";
      if (keys[key].flags & EM_SCHEMA_ZERO) {
        snprintf(hint, sizeof(hint), "; use 0 (off) or at least %s", b);
      }
      report(ld, at[key], "%s %s is shorter than sample_period %s%s", at_least_sample[i].label, a,
             b, hint);
    } else if (at[key] == 0 && *ns < cfg->sample_period_ns) {
      *ns = cfg->sample_period_ns;
    }
  }

  /* reconnect_max >= reconnect_min; a default moves to meet a value the file sets. */
  if (ok[K_RECONNECT_MIN] && ok[K_RECONNECT_MAX]) {
    if (cfg->reconnect_max_ns < cfg->reconnect_min_ns) {
      em_schema_format_duration(a, sizeof(a), cfg->reconnect_max_ns);
      em_schema_format_duration(b, sizeof(b), cfg->reconnect_min_ns);
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

  /* The flight recorder's tick ring: (pre + post) / sample_period ticks at most
   * EM_FLIGHT_MAX_TICKS (a recording's limit). An error when the file sets sample_period and
   * pre_seconds or post_seconds; otherwise (defaults, the board profile's period) the agent
   * keeps less before the trigger and says so. */
  uint64_t flight_ticks = (cfg->flight_pre_ns + cfg->flight_post_ns) / cfg->sample_period_ns +
                          EM_CONFIG_FLIGHT_TICK_SLACK;
  if (cfg->flight_enabled && ok[K_SAMPLE_PERIOD] && (ok[K_FLIGHT_PRE] || ok[K_FLIGHT_POST]) &&
      flight_ticks > EM_FLIGHT_MAX_TICKS) {
    em_schema_format_duration(a, sizeof(a), cfg->flight_pre_ns + cfg->flight_post_ns);
    em_schema_format_duration(b, sizeof(b), cfg->sample_period_ns);
    report(ld, ok[K_FLIGHT_PRE] ? at[K_FLIGHT_PRE] : at[K_FLIGHT_POST],
           "[flight] pre_seconds + post_seconds (%s) is %llu ticks of sample_period %s; a "
           "recording holds %u at most: shorten them or lengthen sample_period",
           a, (unsigned long long)flight_ticks, b,
           EM_FLIGHT_MAX_TICKS - EM_CONFIG_FLIGHT_TICK_SLACK);
  }

  /* A window asked for without a length is [profile] seconds long: within max_seconds. */
  if ((ok[K_PROFILE_SECONDS] || ok[K_PROFILE_MAX_SECONDS]) &&
      cfg->profile_ns > cfg->profile_max_ns) {
    em_schema_format_duration(a, sizeof(a), cfg->profile_ns);
    em_schema_format_duration(b, sizeof(b), cfg->profile_max_ns);
    report(ld, ok[K_PROFILE_SECONDS] ? at[K_PROFILE_SECONDS] : at[K_PROFILE_MAX_SECONDS],
           "[profile] seconds (%s) is longer than max_seconds (%s)", a, b);
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
  load_t ld;
  memset(&ld, 0, sizeof(ld));
  ld.file = path;
  ld.cfg = cfg;
  ld.on_error = on_error;
  ld.ctx = ctx;
  fill_defaults(&ld);
  ld.section = SEC_NONE;

  int rc = 0;
  ld.secs = calloc(1, sizeof(*ld.secs));
  if (ld.secs == NULL) {
    rc = -ENOMEM;
    report(&ld, 0, "cannot load: %s", strerror(-rc));
    goto out;
  }
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
  free(ld.secs);
  if (n_errors != NULL) {
    *n_errors = ld.n_errors;
  }
  return rc;
}
