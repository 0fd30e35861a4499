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
#include <stddef.h>
#include <stdint.h>

/* Exit codes, the same for every subcommand (listed in `edgemon-cli --help`). */
enum {
  EM_CLI_OK = 0,     /* Done; for compare: no regression. */
  EM_CLI_FAIL = 1,   /* The answer is no: a regression (compare), an invalid message (decode). */
  EM_CLI_USAGE = 2,  /* Bad arguments: usage printed. */
  EM_CLI_BROKER = 3, /* The broker (flight: or the aggregator) cannot be reached, refused us,
                        or the connection was lost. */
  EM_CLI_INPUT = 4,  /* An input or output file cannot be used: missing, truncated, foreign. */
};

int em_cli_tail(int argc, char **argv);
int em_cli_top(int argc, char **argv);
int em_cli_status(int argc, char **argv);
int em_cli_decode(int argc, char **argv);
int em_cli_record(int argc, char **argv);
int em_cli_replay(int argc, char **argv);
int em_cli_compare(int argc, char **argv);
int em_cli_compare_fleet(int argc, char **argv); /* compare --fleet, from em_cli_compare(). */
int em_cli_flight(int argc, char **argv);
int em_cli_profile(int argc, char **argv);

/* Prints "edgemon-cli <cmd>: <message>\n" to stderr. */
void em_cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "edgemon-cli <cmd>: <message>" and "Try 'edgemon-cli <cmd> --help'." to stderr and
 * returns EM_CLI_USAGE. */
int em_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The usage error for an option getopt_long did not accept (unknown, or missing its argument):
 * names argv[optind - 1]. Returns EM_CLI_USAGE. */
int em_cli_bad_option(const char *cmd, char **argv);

/* The index of arg among the n names of an option that takes one of a few words, or -1 when
 * it is none of them (the caller says which it wants). */
int em_cli_name_index(const char *arg, const char *const *names, size_t n);

/*
 * What a numeric option accepts. Every numeric option of every command is parsed by
 * em_cli_parse_number() (through em_cli_number_option()), so all of them take the same forms.
 */
typedef struct {
  double min;     /* Smallest value accepted (in seconds for a duration). */
  double max;     /* Largest value accepted (a count: at most 2^53, exact in a double). */
  bool above_min; /* min itself is refused ("more than min"). */
  bool whole;     /* A count: no fraction. */
  bool duration;  /* Seconds, optionally followed by a unit: ms, s, m or h. */
} em_cli_number_t;

/*
 * Parses s strictly as spec says: decimal digits, optionally '.' and digits (not for `whole`),
 * then for a duration optionally one unit (ms, s, m, h; none means seconds). Refused as not a
 * number: an empty string, a sign, spaces, a leading zero before another digit ("010"), hex
 * ("0x10"), an exponent ("1e3"), inf, nan, any other trailing character. Returns 0 with *out
 * set (a duration in seconds), -EINVAL for a string not of that form, -ERANGE for a value
 * outside spec's range (overflow included). *out is untouched on error.
 */
int em_cli_parse_number(const char *s, const em_cli_number_t *spec, double *out);

/* em_cli_parse_number() for option `opt` ("--duration") of `cmd`. Returns EM_CLI_OK, or
 * EM_CLI_USAGE after printing the usage error naming the option, the argument and the forms or
 * range it takes. */
int em_cli_number_option(const char *cmd, const char *opt, const char *arg,
                         const em_cli_number_t *spec, double *out);

/* A TIME option (flight --at, compare --from/--to): RFC 3339 (2026-11-25T06:10:00Z, fractions,
 * +hh:mm offsets) or decimal seconds since the epoch, into ns since the epoch. False for
 * anything else or a time before 1970. */
bool em_cli_parse_time(const char *s, uint64_t *ns);

/* The largest duration any option takes, in seconds (about 115 days; 1e16 ns fits a u64). */
#define EM_CLI_MAX_SECONDS 1e7
/* The largest count any option takes: 2^53. */
#define EM_CLI_MAX_COUNT 9007199254740992.0

/* What --help says about numbers, for every command that takes a duration S. */
#define EM_CLI_USAGE_NUMBERS                                                                       \
  "Numbers are plain decimals (5, 0.5); a duration S may end in a unit: ms, s (the default),\n"    \
  "m or h (500ms, 5m).\n"

/* The broker URL to use: `flag` if given, else $EDGEMON_BROKER, else EM_BROKER_DEFAULT_URL. */
const char *em_cli_broker_url(const char *flag);

/* Monotonic and real-time clocks in ns. */
uint64_t em_cli_mono_ns(void);
uint64_t em_cli_real_ns(void);

/* Set by SIGINT/SIGTERM handlers main() installs; subcommands that run until stopped poll it. */
extern volatile int em_cli_stop;

#endif /* EM_CLI_H */
