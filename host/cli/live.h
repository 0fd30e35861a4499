/*
 * live.h - what the commands that listen to a broker (tail, status, record) share: the
 * --broker, --device, --count and --duration options, the checks on them, connecting and
 * subscribing with the error messages and exit codes of cli.h, device filtering, and one step
 * of the network loop bounded by a deadline.
 *
 * Owns the broker session it opens (em_cli_live_close() frees it). Single-threaded.
 */
#ifndef EM_CLI_LIVE_H
#define EM_CLI_LIVE_H

#include <broker.h>
#include <stdbool.h>
#include <stdint.h>

/* getopt_long entries of the shared options; their codes are the letters below. */
#define EM_CLI_OPT_BROKER                                                                          \
  { "broker", required_argument, NULL, 'b' }
#define EM_CLI_OPT_DEVICE                                                                          \
  { "device", required_argument, NULL, 'd' }
#define EM_CLI_OPT_COUNT                                                                           \
  { "count", required_argument, NULL, 'n' }
#define EM_CLI_OPT_DURATION                                                                        \
  { "duration", required_argument, NULL, 't' }

#define EM_CLI_OPT_COLOR                                                                           \
  { "color", required_argument, NULL, 'c' }

typedef struct {
  const char *cmd;      /* The command's name, for messages. */
  const char *url;      /* --broker; after em_cli_live_check() the URL in use. */
  const char *device;   /* --device: NULL (every device), a plain id, or a glob. */
  uint64_t count;       /* --count, 0 when not given. The command says what it counts. */
  double duration_s;    /* --duration, 0 when not given. */
  const char *color;    /* --color: auto (NULL), always, never. */
  uint64_t deadline_ns; /* CLOCK_MONOTONIC end from --duration (set by connect), 0: none. */
  em_broker_t *broker;
} em_cli_live_t;

/* Takes getopt's result c with its argument when it is one of the shared options. Returns
 * EM_CLI_OK when it was, EM_CLI_USAGE (message printed) for a bad value, -1 when c is not a
 * shared option. */
int em_cli_live_option(em_cli_live_t *l, int c, const char *arg);

/* After getopt: refuses operands left in argv (from optind), applies --color, checks --device,
 * and resolves and checks the broker URL. Returns EM_CLI_OK or EM_CLI_USAGE. */
int em_cli_live_check(em_cli_live_t *l, int argc, char **argv);

/* True when the device id passes --device. */
bool em_cli_live_wants(const em_cli_live_t *l, const char *id);

/* Connects (5 s timeout) with on_message; starts the --duration clock. Returns EM_CLI_OK or
 * EM_CLI_BROKER with the reason printed. */
int em_cli_live_connect(em_cli_live_t *l, em_broker_msg_fn on_message, void *ctx);

/* Subscribes to edgemon/v1/<device or +>/<kind> ("#" for every kind). Returns EM_CLI_OK or
 * EM_CLI_BROKER with the reason printed. */
int em_cli_live_subscribe(em_cli_live_t *l, const char *kind);

/* True once --duration has elapsed or a stop signal arrived. */
bool em_cli_live_over(const em_cli_live_t *l);

/* Drives the network for at most max_ms, never past the --duration deadline. Returns
 * EM_CLI_OK, or EM_CLI_BROKER with "lost the connection" printed. */
int em_cli_live_step(em_cli_live_t *l, uint64_t max_ms);

/* Frees the session (after letting queued QoS 1 publishes leave, up to 1 s). */
void em_cli_live_close(em_cli_live_t *l);

#endif /* EM_CLI_LIVE_H */
