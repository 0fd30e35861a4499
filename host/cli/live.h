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

/* The TLS and login options every command that connects takes (replay too), as getopt_long
 * entries (codes above 255, no letters); em_cli_conn_option() takes them. */
enum {
  EM_CLI_O_CAFILE = 0x100,
  EM_CLI_O_CAPATH,
  EM_CLI_O_CERT,
  EM_CLI_O_KEY,
  EM_CLI_O_CREDENTIALS,
  EM_CLI_O_INSECURE,
};
#define EM_CLI_OPTS_CONN                                                                           \
  {"cafile", required_argument, NULL, EM_CLI_O_CAFILE},                                            \
      {"capath", required_argument, NULL, EM_CLI_O_CAPATH},                                        \
      {"cert", required_argument, NULL, EM_CLI_O_CERT},                                            \
      {"key", required_argument, NULL, EM_CLI_O_KEY},                                              \
      {"credentials", required_argument, NULL, EM_CLI_O_CREDENTIALS}, {                            \
    "insecure", no_argument, NULL, EM_CLI_O_INSECURE                                               \
  }

/* Their usage lines, and the --broker line that goes with them. */
#define EM_CLI_USAGE_BROKER                                                                        \
  "  --broker URL     mqtt://HOST[:PORT], or mqtts://HOST[:PORT] for TLS (port 8883)\n"            \
  "                   (default $EDGEMON_BROKER, else " EM_BROKER_DEFAULT_URL ")\n"
#define EM_CLI_USAGE_CONN                                                                          \
  "  --cafile FILE    mqtts://: CA certificates (PEM) that verify the broker\n"                    \
  "  --capath DIR     mqtts://: a directory of CA certificates (c_rehash)\n"                       \
  "                   (neither: the system's CA certificates)\n"                                   \
  "  --cert FILE      mqtts://: client certificate (PEM), with --key\n"                            \
  "  --key FILE       mqtts://: its private key (PEM, not encrypted)\n"                            \
  "  --insecure       mqtts://: do not match the broker's host name with its\n"                    \
  "                   certificate (testing only; the certificate is still verified)\n"             \
  "  --credentials FILE  MQTT username and password: lines 'username = NAME' and\n"                \
  "                   'password = SECRET' ('#' comments), as the agent's credentials_file;\n"      \
  "                   refused when group or others can access it (chmod 600)\n"

/* The TLS and login options given, and the credentials read from --credentials. */
typedef struct {
  const char *ca_file;
  const char *ca_path;
  const char *cert_file;
  const char *key_file;
  const char *credentials_file;
  bool insecure;
  em_broker_credentials_t creds; /* Filled by em_cli_conn_check(). */
} em_cli_conn_t;

/* Takes getopt's result c with its argument when it is one of EM_CLI_OPTS_CONN. Returns
 * EM_CLI_OK when it was, -1 when it is not. */
int em_cli_conn_option(em_cli_conn_t *c, int code, const char *arg);

/* After getopt, with the resolved broker URL: checks the options against it and reads
 * --credentials. Returns EM_CLI_OK or EM_CLI_USAGE (message printed). */
int em_cli_conn_check(em_cli_conn_t *c, const char *cmd, const char *url);

/* Session options from c (pointers into c, which must outlive the connect). */
em_broker_opts_t em_cli_conn_opts(const em_cli_conn_t *c, const char *client_prefix);

/* Zeroes the password read (call once connected or done). */
void em_cli_conn_forget(em_cli_conn_t *c);

typedef struct {
  const char *cmd;      /* The command's name, for messages. */
  const char *url;      /* --broker; after em_cli_live_check() the URL in use. */
  const char *device;   /* --device: NULL (every device), a plain id, or a glob. */
  uint64_t count;       /* --count, 0 when not given. The command says what it counts. */
  double duration_s;    /* --duration, 0 when not given. */
  const char *color;    /* --color: auto (NULL), always, never. */
  uint64_t deadline_ns; /* CLOCK_MONOTONIC end from --duration (set by connect), 0: none. */
  em_cli_conn_t conn;   /* TLS and login options. */
  em_broker_t *broker;
} em_cli_live_t;

/* Takes getopt's result c with its argument when it is one of the shared options (the
 * EM_CLI_OPTS_CONN ones included). Returns
 * EM_CLI_OK when it was, EM_CLI_USAGE (message printed) for a bad value, -1 when c is not a
 * shared option. */
int em_cli_live_option(em_cli_live_t *l, int c, const char *arg);

struct option;

/* Reads argv's next option with getopt_long() over opts (the caller sets optind and opterr
 * first) and takes the shared ones itself through em_cli_live_option(), so that *c is the next
 * option the command reads: its code, '?' for one getopt does not know, -1 after the last.
 * Returns EM_CLI_OK, or EM_CLI_USAGE (message printed) for a shared option with a bad value. */
int em_cli_live_next(em_cli_live_t *l, int argc, char **argv, const struct option *opts, int *c);

/* After getopt: refuses operands left in argv (from optind), applies --color, checks --device,
 * resolves and checks the broker URL, and checks the TLS and login options against it. Returns
 * EM_CLI_OK or EM_CLI_USAGE. */
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
