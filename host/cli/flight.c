/*
 * flight.c - `edgemon-cli flight`: a device's flight recordings (edgemon/flight.h), read from
 * the aggregator's API or from a file, shown as a table of the slowest frames around the
 * breach (flight_table.h), as the API's JSON, or drawn as an SVG (flight_svg.h); --list lists
 * them, and --take asks a device for one now (cmd/flight over MQTT).
 *
 * Sources: --aggregator URL (default $EDGEMON_AGGREGATOR, else http://127.0.0.1:9108) through
 * http_get.h, or --file PATH holding one recording's CBOR (what ?format=cbor answers). From the
 * aggregator the recording is fetched as CBOR and decoded here, so a file and the API give the
 * same table; --json prints em_flight_to_json() of it, byte for byte what the API's JSON is.
 *
 * Owns, for the call: the fetched or read CBOR, the decode scratch, the frame table.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "device_api.h"
#include "flight_list.h"
#include "flight_svg.h"
#include "flight_table.h"
#include "http_get.h"
#include "live.h"

#include <broker.h>
#include <edgemon/flight.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD               "flight"
#define DEFAULT_TOP       10u
#define DEFAULT_TIMEOUT_S 5.0

typedef struct {
  const char *aggregator;
  const char *file;
  const char *device;
  uint64_t at_ns;
  bool at;
  bool list;
  bool json;
  bool take;
  const char *svg;
  size_t top;
  double timeout_s;
  const char *broker;
  em_cli_conn_t conn;
} flight_opts_t;

static void usage(FILE *out) {
  fprintf(out,
          "usage: edgemon-cli flight [--device D] [--last | --at TIME] [--top N] [--json]\n"
          "                          [--svg FILE] [--aggregator URL | --file PATH]\n"
          "       edgemon-cli flight --list --device D [--json] [--aggregator URL]\n"
          "       edgemon-cli flight --take --device D [--broker URL]\n"
          "\n"
          "A flight recording is what a device's agent kept of the seconds around a latency\n"
          "breach (an escalation, or a cmd/flight): every span of every frame and every tick's\n"
          "counters. This command shows one: the trigger, then the N slowest frames (a frame is\n"
          "the spans sharing a frame id; its total is from its first start to its last end),\n"
          "each with its per-stage durations and its offset from the trigger, and under it the\n"
          "figures of the tick whose window holds the frame's end (counters as their increase\n"
          "over that tick).\n"
          "\n"
          "options:\n"
          "  --aggregator URL  the aggregator's API, http://HOST[:PORT] (default\n"
          "                    $EDGEMON_AGGREGATOR, else " EM_CLI_DEFAULT_AGGREGATOR ")\n"
          "  --file PATH       read one recording (its CBOR, as ?format=cbor answers) instead\n"
          "  --device D        the device (required with the aggregator)\n"
          "  --last            the newest recording (the default)\n"
          "  --at TIME         the recording nearest TIME: RFC 3339 (2026-11-25T06:10:00Z,\n"
          "                    fractions and +hh:mm offsets too) or seconds since the epoch\n"
          "  --list            list the device's recordings, newest first\n"
          "  --top N           frames in the table (default 10)\n"
          "  --json            print the recording (or the list) as the API's JSON\n"
          "  --svg FILE        also draw the recording into FILE: a lane per stage with every\n"
          "                    span on a time axis, the trigger marked, the counters beneath\n"
          "  --take            publish cmd/flight to the device: its agent records now\n"
          "  --timeout S       for the aggregator's answer (default 5 s)\n" EM_CLI_USAGE_BROKER
              EM_CLI_USAGE_CONN "  --help            this text\n"
          "\n" EM_CLI_USAGE_NUMBERS "\n"
          "exit status: 0 shown, 1 no such device or recording (or the aggregator said no),\n"
          "2 bad arguments, 3 the aggregator or the broker cannot be reached, 4 --file or --svg\n"
          "cannot be used (missing, not a flight recording, not writable)\n");
}

static int parse_args(int argc, char **argv, flight_opts_t *o) {
  enum { O_AGG = 0x200, O_FILE, O_LAST, O_AT, O_LIST, O_TOP, O_JSON, O_SVG, O_TAKE, O_TIMEOUT };
  static const struct option opts[] = {
      {"aggregator", required_argument, NULL, O_AGG},
      {"file", required_argument, NULL, O_FILE},
      EM_CLI_OPT_DEVICE,
      EM_CLI_OPT_BROKER,
      {"last", no_argument, NULL, O_LAST},
      {"at", required_argument, NULL, O_AT},
      {"list", no_argument, NULL, O_LIST},
      {"top", required_argument, NULL, O_TOP},
      {"json", no_argument, NULL, O_JSON},
      {"svg", required_argument, NULL, O_SVG},
      {"take", no_argument, NULL, O_TAKE},
      {"timeout", required_argument, NULL, O_TIMEOUT},
      {"help", no_argument, NULL, 'h'},
      EM_CLI_OPTS_CONN,
      {NULL, 0, NULL, 0},
  };
  static const em_cli_number_t top = {.min = 1, .max = 100000, .whole = true};
  static const em_cli_number_t timeout = {
      .min = 0, .max = 600, .above_min = true, .duration = true};
  bool last = false;
  double n = 0;
  int c;
  opterr = 0;
  optind = 1;
  while ((c = getopt_long(argc, argv, "hb:d:", opts, NULL)) != -1) {
    if (em_cli_conn_option(&o->conn, c, optarg) == EM_CLI_OK) {
      continue;
    }
    switch (c) {
    case O_AGG:
      o->aggregator = optarg;
      break;
    case O_FILE:
      o->file = optarg;
      break;
    case 'd':
      o->device = optarg;
      break;
    case 'b':
      o->broker = optarg;
      break;
    case O_LAST:
      last = true;
      break;
    case O_AT:
      o->at = true;
      if (!em_cli_parse_time(optarg, &o->at_ns)) {
        return em_cli_usage_error(CMD,
                                  "--at: '%s' is neither an RFC 3339 time (2026-11-25T06:10:00Z)"
                                  " nor seconds since the epoch",
                                  optarg);
      }
      break;
    case O_LIST:
      o->list = true;
      break;
    case O_TOP:
      if (em_cli_number_option(CMD, "--top", optarg, &top, &n) != EM_CLI_OK) {
        return EM_CLI_USAGE;
      }
      o->top = (size_t)n;
      break;
    case O_JSON:
      o->json = true;
      break;
    case O_SVG:
      o->svg = optarg;
      break;
    case O_TAKE:
      o->take = true;
      break;
    case O_TIMEOUT:
      if (em_cli_number_option(CMD, "--timeout", optarg, &timeout, &o->timeout_s) != EM_CLI_OK) {
        return EM_CLI_USAGE;
      }
      break;
    case 'h':
      usage(stdout);
      return EM_CLI_OK;
    default:
      return em_cli_bad_option(CMD, argv);
    }
  }
  if (optind < argc) {
    return em_cli_usage_error(CMD, "unexpected argument '%s'", argv[optind]);
  }
  if (last && o->at) {
    return em_cli_usage_error(CMD, "--last and --at: give one of them");
  }
  if (o->file && o->aggregator) {
    return em_cli_usage_error(CMD, "--file and --aggregator: give one source");
  }
  if (o->file && (o->list || o->take || o->at || o->device)) {
    return em_cli_usage_error(CMD, "--file holds one recording: no --list, --take, --at, --device");
  }
  if (o->list && (o->at || last || o->svg || o->take)) {
    return em_cli_usage_error(CMD, "--list: no --at, --last, --svg or --take with it");
  }
  if (o->take && (o->at || last || o->svg || o->json || o->aggregator)) {
    return em_cli_usage_error(CMD, "--take only asks the device: no other output options");
  }
  if (!o->file && !o->device) {
    return em_cli_usage_error(CMD, "--device is required (or --file PATH)");
  }
  if (o->device && !em_cli_device_ok(o->device)) {
    return em_cli_usage_error(CMD, "--device wants one device id, not '%s'", o->device);
  }
  if (!o->file && !o->take && em_cli_aggregator_url(CMD, &o->aggregator) != EM_CLI_OK) {
    return EM_CLI_USAGE;
  }
  if (o->take) {
    o->broker = em_cli_broker_url(o->broker);
    int rc = em_cli_conn_check(&o->conn, CMD, o->broker);
    if (rc != EM_CLI_OK) {
      return rc;
    }
  }
  return -1;
}

static int api_get(const flight_opts_t *o, const char *path, em_http_answer_t *a) {
  return em_cli_api_get(CMD, o->aggregator, o->timeout_s, path, a);
}

/* The key of the recording to show: the newest, or the one nearest --at. */
static int pick_key(const flight_opts_t *o, char *key, size_t cap, em_flight_list_t *list_out) {
  char path[256];
  snprintf(path, sizeof(path), "/api/devices/%s/flights?limit=%u", o->device,
           o->list || o->at ? 5000u : 1u);
  em_http_answer_t a;
  int rc = api_get(o, path, &a);
  if (rc != EM_CLI_OK) {
    return rc;
  }
  if (o->list && o->json) {
    fwrite(a.body, 1, a.len, stdout);
    fputc('\n', stdout);
    em_http_get_free(&a);
    return EM_CLI_OK;
  }
  em_flight_list_t list;
  rc = em_flight_list_parse(a.body, &list);
  em_http_get_free(&a);
  if (rc != 0) {
    em_cli_error(CMD, "aggregator %s: not a list of recordings", o->aggregator);
    return EM_CLI_BROKER;
  }
  if (o->list) {
    *list_out = list;
    return EM_CLI_OK;
  }
  const em_flight_entry_t *e = o->at        ? em_flight_list_nearest(&list, o->at_ns)
                               : list.n > 0 ? &list.v[0]
                                            : NULL;
  if (!e) {
    em_cli_error(CMD, "device %s has no flight recordings", o->device);
    em_flight_list_free(&list);
    return EM_CLI_FAIL;
  }
  snprintf(key, cap, "%s", e->key);
  em_flight_list_free(&list);
  return EM_CLI_OK;
}

static int show(const flight_opts_t *o, const em_flight_t *f, const char *title) {
  if (o->svg) {
    FILE *out = fopen(o->svg, "w");
    if (!out) {
      em_cli_error(CMD, "cannot write --svg %s: %s", o->svg, strerror(errno));
      return EM_CLI_INPUT;
    }
    int rc = em_flight_svg(out, f, title);
    if (fclose(out) != 0 || rc != 0) {
      em_cli_error(CMD, "writing --svg %s failed", o->svg);
      return EM_CLI_INPUT;
    }
  }
  if (o->json) {
    size_t need = 0;
    char probe[1];
    int rc = em_flight_to_json(f, probe, sizeof(probe), &need);
    char *json = (rc == 0 || rc == EM_PROTO_ENOSPACE) ? malloc(need + 1) : NULL;
    if (!json || em_flight_to_json(f, json, need + 1, &need) != 0) {
      free(json);
      em_cli_error(CMD, "cannot write the recording as JSON");
      return EM_CLI_FAIL;
    }
    fwrite(json, 1, need, stdout);
    fputc('\n', stdout);
    free(json);
    return EM_CLI_OK;
  }
  if (em_flight_table(stdout, f, title, o->top) != 0) {
    em_cli_error(CMD, "out of memory");
    return EM_CLI_FAIL;
  }
  return EM_CLI_OK;
}

static int take(flight_opts_t *o) {
  em_msg_t cmd = {.kind = EM_MSG_CMD};
  cmd.u.cmd.head.time_ns = em_cli_real_ns();
  cmd.u.cmd.command = EM_CMD_FLIGHT;
  return em_cli_send_cmd(CMD, &o->conn, o->broker, o->device, &cmd, "flight", "a flight recording");
}

int em_cli_flight(int argc, char **argv) {
  flight_opts_t o = {.top = DEFAULT_TOP, .timeout_s = DEFAULT_TIMEOUT_S};
  int rc = parse_args(argc, argv, &o);
  if (rc >= 0) {
    return rc;
  }
  if (o.take) {
    return take(&o);
  }
  uint8_t *cbor = NULL;
  size_t len = 0;
  char title[160];
  if (o.file) {
    rc = em_cli_read_message_file(CMD, o.file, EM_FLIGHT_MAX_BYTES, "a flight recording", &cbor,
                                  &len);
    snprintf(title, sizeof(title), "%s", o.file);
  } else {
    char key[32];
    em_flight_list_t list = {0};
    rc = pick_key(&o, key, sizeof(key), &list);
    if (rc != EM_CLI_OK || o.list) {
      if (rc == EM_CLI_OK && !o.json) {
        em_flight_list_print(stdout, o.device, &list);
      }
      em_flight_list_free(&list);
      return rc;
    }
    char path[256];
    snprintf(path, sizeof(path), "/api/devices/%s/flights/%s?format=cbor", o.device, key);
    em_http_answer_t a;
    rc = api_get(&o, path, &a);
    if (rc == EM_CLI_OK) {
      cbor = (uint8_t *)a.body;
      len = a.len;
    }
    snprintf(title, sizeof(title), "%s %s", o.device, key);
  }
  if (rc != EM_CLI_OK) {
    return rc;
  }
  size_t scratch_len = em_flight_scratch_bytes(len);
  void *scratch = malloc(scratch_len);
  em_flight_t f;
  size_t off = 0;
  int drc = scratch ? em_flight_decode(cbor, len, &f, scratch, scratch_len, &off) : -ENOMEM;
  if (drc != 0) {
    em_cli_error(CMD, "%s: not a flight recording: %s at byte %zu", o.file ? o.file : title,
                 em_proto_strerror(drc), off);
    rc = o.file ? EM_CLI_INPUT : EM_CLI_FAIL;
  } else {
    rc = show(&o, &f, title);
  }
  free(scratch);
  free(cbor);
  return rc;
}
