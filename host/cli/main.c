/*
 * main.c - edgemon-cli: dispatch to a subcommand, and the helpers cli.h declares.
 *
 * `edgemon-cli <command> [options]`: each command is one file of this folder with its own
 * options and --help. This file owns only the dispatch table, the top-level usage, the exit
 * codes' documentation and the SIGINT/SIGTERM flag the long-running commands poll.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <broker.h>
#include <stop_signals.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef EM_VERSION
#define EM_VERSION "unknown"
#endif

volatile int em_cli_stop;

static const struct {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
} commands[] = {
    {"tail", em_cli_tail, "live view of data and level changes, one line per device per message"},
    {"top", em_cli_top, "full-screen live view of a device: level and cause, figures, stages"},
    {"status", em_cli_status, "one row per device: online, level, agent version, board, last seen"},
    {"decode", em_cli_decode,
     "a CBOR message (or a recording) as JSON or CBOR diagnostic notation"},
    {"record", em_cli_record, "save what the broker delivers to a recording file"},
    {"replay", em_cli_replay, "publish a recording again, at its pace or faster"},
    {"compare", em_cli_compare,
     "per-stage latency of two recordings: change, p-value, effect size"},
    {"flight", em_cli_flight,
     "a device's flight recordings: the slowest frames around a breach, JSON or SVG"},
    {"profile", em_cli_profile,
     "a device's stack profiles: hottest stacks and functions, folded, flame graph, pprof"},
};

static void usage(FILE *out) {
  fprintf(out,
          "usage: edgemon-cli <command> [options]\n"
          "       edgemon-cli <command> --help\n"
          "\n"
          "The bench engineer's view of edgemon telemetry (MQTT topics edgemon/v1/<device>/...).\n"
          "\n"
          "commands:\n");
  for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
    fprintf(out, "  %-8s  %s\n", commands[i].name, commands[i].summary);
  }
  fprintf(out,
          "\n"
          "The broker is --broker URL, else $EDGEMON_BROKER, else " EM_BROKER_DEFAULT_URL ".\n"
          "\n"
          "exit status:\n"
          "  0  done (compare: no regression)\n"
          "  1  the answer is no: compare found a regression, decode found an invalid message\n"
          "  2  bad arguments\n"
          "  3  the broker cannot be reached, refused the session, or the connection was lost\n"
          "     (flight, profile: or the aggregator cannot be reached)\n"
          "  4  an input or output file cannot be used (missing, truncated, not a recording)\n"
          "     (top: stdin or stdout is not a terminal)\n");
}

static void on_signal(int sig) {
  (void)sig;
  em_cli_stop = 1;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return EM_CLI_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    usage(stdout);
    return EM_CLI_OK;
  }
  if (strcmp(cmd, "--version") == 0) {
    printf("edgemon-cli %s\n", EM_VERSION);
    return EM_CLI_OK;
  }
  for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
    if (strcmp(cmd, commands[i].name) == 0) {
      em_stop_signals_catch(on_signal);
      return commands[i].run(argc - 1, argv + 1);
    }
  }
  fprintf(stderr, "edgemon-cli: unknown command '%s'\n", cmd);
  usage(stderr);
  return EM_CLI_USAGE;
}

void em_cli_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "edgemon-cli %s: ", cmd);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

int em_cli_usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "edgemon-cli %s: ", cmd);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\nTry 'edgemon-cli %s --help'.\n", cmd);
  va_end(ap);
  return EM_CLI_USAGE;
}

int em_cli_bad_option(const char *cmd, char **argv) {
  return em_cli_usage_error(cmd, "unknown option, or one missing its value: '%s'",
                            argv[optind - 1]);
}

const char *em_cli_broker_url(const char *flag) {
  if (flag) {
    return flag;
  }
  const char *env = getenv("EDGEMON_BROKER");
  return env && *env ? env : EM_BROKER_DEFAULT_URL;
}

static uint64_t clock_ns(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t em_cli_mono_ns(void) {
  return clock_ns(CLOCK_MONOTONIC);
}

uint64_t em_cli_real_ns(void) {
  return clock_ns(CLOCK_REALTIME);
}
