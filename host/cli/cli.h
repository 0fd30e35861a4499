/*
 * cli.h - what the subcommands of edgemon-cli share: the exit codes, the entry points, and a
 * few helpers for their arguments and messages.
 *
 * Each subcommand lives in its own file and parses its own options (getopt_long) from argv as
 * main() hands it over (argv[0] is the subcommand's name). Every entry point returns the
 * process exit code.
 */
#ifndef EM_CLI_H
#define EM_CLI_H

#include <stdbool.h>
#include <stdint.h>

/* Exit codes, the same for every subcommand (listed in `edgemon-cli --help`). */
enum {
  EM_CLI_OK = 0,     /* Done; for compare: no regression. */
  EM_CLI_FAIL = 1,   /* The answer is no: a regression (compare), an invalid message (decode). */
  EM_CLI_USAGE = 2,  /* Bad arguments: usage printed. */
  EM_CLI_BROKER = 3, /* The broker cannot be reached, refused us, or the connection was lost. */
  EM_CLI_INPUT = 4,  /* An input or output file cannot be used: missing, truncated, foreign. */
};

int em_cli_tail(int argc, char **argv);
int em_cli_status(int argc, char **argv);
int em_cli_decode(int argc, char **argv);
int em_cli_record(int argc, char **argv);
int em_cli_replay(int argc, char **argv);
int em_cli_compare(int argc, char **argv);

/* Prints "edgemon-cli <cmd>: <message>\n" to stderr. */
void em_cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "edgemon-cli <cmd>: <message>" and "Try 'edgemon-cli <cmd> --help'." to stderr and
 * returns EM_CLI_USAGE. */
int em_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The usage error for an option getopt_long did not accept (unknown, or missing its argument):
 * names argv[optind - 1]. Returns EM_CLI_USAGE. */
int em_cli_bad_option(const char *cmd, char **argv);

/* Parses a non-negative decimal number of seconds ("2", "0.5"); false when it is not one or
 * above 1e7 s. */
bool em_cli_parse_seconds(const char *s, double *out);

/* Parses a positive decimal count (1..2^53). */
bool em_cli_parse_count(const char *s, uint64_t *out);

/* The broker URL to use: `flag` if given, else $EDGEMON_BROKER, else EM_BROKER_DEFAULT_URL. */
const char *em_cli_broker_url(const char *flag);

/* Monotonic and real-time clocks in ns. */
uint64_t em_cli_mono_ns(void);
uint64_t em_cli_real_ns(void);

/* Set by SIGINT/SIGTERM handlers main() installs; subcommands that run until stopped poll it. */
extern volatile int em_cli_stop;

#endif /* EM_CLI_H */
