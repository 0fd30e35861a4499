/*
 * forensic_cmd.h - what the commands reading a device's breach forensics (flight, profile)
 * share as commands: their common options (--aggregator, --file, --device, --last, --at,
 * --list, --top, --json, --svg, --take, --timeout, --broker, --help and the TLS and login
 * ones) parsed into one struct; the checks that tie them together (one source, what --list
 * and --take refuse, the device id, the aggregator and broker URLs); --take's cmd message;
 * the device's list on the aggregator, printed as a table or the API's JSON (--list) or used
 * to pick one entry (the newest, or the one nearest --at); that entry fetched (or read from
 * --file) and decoded; and its --json and --svg output. A command describes itself once
 * (em_cli_forensic_kind_t: its name, its noun, its API collection, its list's columns, its own
 * options and checks) and keeps only what is its own: those options and its table.
 * device_api.h holds the HTTP, file and MQTT plumbing underneath.
 *
 * Owns, for one call: the list answer and its parse, the fetched or read CBOR, the JSON text
 * and the --svg file; the decoded entry until em_cli_forensic_entry_free(). Messages name the
 * calling command. Single-threaded (getopt's globals).
 */
#ifndef EM_CLI_FORENSIC_CMD_H
#define EM_CLI_FORENSIC_CMD_H

#include "live.h"

#include <edgemon/flight.h>
#include <edgemon/profile.h>
#include <edgemon/proto.h>
#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* getopt_long codes of the shared options (a command's own start at 0x200). */
enum {
  EM_CLI_O_AGGREGATOR = 0x180,
  EM_CLI_O_FILE,
  EM_CLI_O_LAST,
  EM_CLI_O_AT,
  EM_CLI_O_LIST,
  EM_CLI_O_TOP,
  EM_CLI_O_JSON,
  EM_CLI_O_SVG,
  EM_CLI_O_TAKE,
  EM_CLI_O_TIMEOUT,
};

/* The shared options as getopt_long entries, for the start of a command's table (which ends
 * with its own entries and {NULL, 0, NULL, 0}). */
#define EM_CLI_OPTS_FORENSIC                                                                       \
  {"aggregator", required_argument, NULL, EM_CLI_O_AGGREGATOR},                                    \
      {"file", required_argument, NULL, EM_CLI_O_FILE}, EM_CLI_OPT_DEVICE, EM_CLI_OPT_BROKER,      \
      {"last", no_argument, NULL, EM_CLI_O_LAST}, {"at", required_argument, NULL, EM_CLI_O_AT},    \
      {"list", no_argument, NULL, EM_CLI_O_LIST}, {"top", required_argument, NULL, EM_CLI_O_TOP},  \
      {"json", no_argument, NULL, EM_CLI_O_JSON}, {"svg", required_argument, NULL, EM_CLI_O_SVG},  \
      {"take", no_argument, NULL, EM_CLI_O_TAKE},                                                  \
      {"timeout", required_argument, NULL, EM_CLI_O_TIMEOUT}, {"help", no_argument, NULL, 'h'},    \
      EM_CLI_OPTS_CONN

/* The shared options' values. Strings point into argv (or the environment). */
typedef struct {
  const char *aggregator; /* --aggregator; after the checks the URL in use (not for --file or
                             --take). */
  const char *file;       /* --file: one entry's CBOR instead of the aggregator. */
  const char *device;     /* --device: one device id. */
  uint64_t at_ns;         /* --at, in ns since the epoch (with `at`). */
  bool at;                /* --at given. */
  bool last;              /* --last given (the default anyway). */
  bool list;              /* --list. */
  bool json;              /* --json. */
  bool take;              /* --take. */
  bool own_output;        /* The command took one of its own output options (its `option`
                             callback sets it): refused with --list and --take like --svg. */
  uint32_t take_seconds;  /* The window --take asks for, in s; 0: the agent's default (set by
                             the command's own option, profile --seconds). */
  const char *svg;        /* --svg FILE. */
  size_t top;             /* --top: rows in the table (default 10). */
  double timeout_s;       /* --timeout for the aggregator's answer, in s (default 5). */
  const char *broker;     /* --broker; after the checks the URL in use (--take only). */
  em_cli_conn_t conn;     /* TLS and login options (--take). */
} em_cli_forensic_t;

/* One count column of the --list table, between the rule and the bytes. */
typedef struct {
  const char *name; /* Its heading: "ticks". */
  int width;        /* Its width in characters, right-aligned. */
  size_t offset;    /* offsetof(em_flight_entry_t, <its uint64_t field>). */
} em_cli_forensic_column_t;

/* What a command is, for the shared code. Static data of the command; borrowed for each call. */
typedef struct {
  const char *cmd;         /* Its name, for messages and cmd/<cmd>: "flight". */
  const char *noun;        /* What one entry is: "flight recording" ("3 flight recordings of",
                              "--file holds one flight recording", "not a flight recording"). */
  const char *array;       /* The API's collection: GET /api/devices/<id>/<array>[/<key>]. */
  em_cmd_code_t command;   /* What --take asks for; also which message an entry is:
                              EM_CMD_FLIGHT (edgemon/flight.h) or EM_CMD_PROFILE. */
  const char *own_outputs; /* The command's own output options for the --list message
                              ("--pprof, --show, --folded"), or NULL. */
  em_cli_forensic_column_t counts[2]; /* The --list table's count columns. */
  const struct option *opts;          /* EM_CLI_OPTS_FORENSIC, its own, {NULL, 0, NULL, 0}. */
  /* Takes getopt's result c (not a shared option) with its argument into ctx. Returns
   * EM_CLI_OK when it was one of the command's own, EM_CLI_USAGE (message printed) for a bad
   * value, -1 when it is not an option of the command. NULL: the command has none. */
  int (*option)(void *ctx, int c, const char *arg);
  /* The command's own checks on ctx, run after the shared ones about --list and --take and
   * before the device and URL checks. Returns -1 to go on, or EM_CLI_USAGE (message printed).
   * NULL: none. */
  int (*check)(void *ctx);
  void (*usage)(FILE *out); /* Prints the command's --help text. */
} em_cli_forensic_kind_t;

/* One decoded entry, the member that the kind's `command` names. */
typedef struct {
  union {
    em_flight_t flight;
    em_profile_t profile;
  } u;
  void *scratch;   /* What u points into (malloc'd; em_cli_forensic_entry_free()). */
  char title[160]; /* What names it: the --file path, or "<device> <key>". */
} em_cli_forensic_entry_t;

/*
 * The command's common run up to its output. Parses argv (argv[0] is the command's name) with
 * k->opts into *o (whose defaults it sets first) and, through k->option, into ctx; checks the
 * options together (k->check among them) and resolves the aggregator URL (not with --file or
 * --take) or, with --take, the broker URL with the TLS and login options. Then, with --take,
 * publishes the cmd message (k->command, o->take_seconds) to edgemon/v1/<device>/cmd/<cmd>;
 * with --list, prints the device's list (a table, or with --json the API's answer as it is);
 * else reads --file, or picks an entry from the device's list (the newest, or the one nearest
 * --at) and fetches it with ?format=cbor, and decodes it into *e.
 * Returns -1 with *e decoded (the caller shows it, then calls em_cli_forensic_entry_free()),
 * or the exit code with the reason printed: EM_CLI_OK after --help, --take or --list.
 */
int em_cli_forensic_run(em_cli_forensic_t *o, const em_cli_forensic_kind_t *k, void *ctx, int argc,
                        char **argv, em_cli_forensic_entry_t *e);

/* Frees what e points into. */
void em_cli_forensic_entry_free(em_cli_forensic_entry_t *e);

/* Prints the entry on stdout as the API's JSON, one line. Returns EM_CLI_OK, or EM_CLI_FAIL
 * with the reason printed. */
int em_cli_forensic_json(const em_cli_forensic_kind_t *k, const em_cli_forensic_entry_t *e);

/* Draws the entry into the file at path (--svg: flight_svg.h, profile_svg.h). Returns
 * EM_CLI_OK, or EM_CLI_INPUT with the reason printed (not writable, or the drawing failed). */
int em_cli_forensic_svg(const em_cli_forensic_kind_t *k, const char *path,
                        const em_cli_forensic_entry_t *e);

#endif /* EM_CLI_FORENSIC_CMD_H */
