/*
 * profile.c - `edgemon-cli profile`: a device's stack profiles (edgemon/profile.h), read from
 * the aggregator's API or from a file, shown as the hottest stacks and functions
 * (profile_table.h), as folded lines or the API's JSON on stdout, drawn as a flame graph
 * (profile_svg.h) or written as pprof (profile_pprof.h); --list lists them, and --take asks a
 * device for one now (cmd/profile over MQTT).
 *
 * Sources as flight's (device_api.h): --aggregator URL or --file PATH holding one profile's
 * CBOR (what ?format=cbor answers). From the aggregator the profile is fetched as CBOR and
 * decoded here, so a file and the API give the same output; --json prints em_profile_to_json()
 * of it, byte for byte what the API's JSON is.
 *
 * Owns, for the call: the fetched or read CBOR, the decode scratch, the pprof buffer.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "device_api.h"
#include "flight_list.h"
#include "live.h"
#include "profile_pprof.h"
#include "profile_stacks.h"
#include "profile_svg.h"
#include "profile_table.h"
#include "view.h"

#include <edgemon/profile.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD               "profile"
#define DEFAULT_TOP       10u
#define DEFAULT_TIMEOUT_S 5.0
#define PPROF_MAX_BYTES   (256u * 1024u * 1024u)

typedef struct {
  const char *aggregator;
  const char *file;
  const char *device;
  uint64_t at_ns;
  bool at;
  bool list;
  bool show;
  bool folded;
  bool json;
  bool take;
  double seconds; /* --take's window in s; 0: the agent's default. */
  const char *svg;
  const char *pprof;
  size_t top;
  double timeout_s;
  const char *broker;
  em_cli_conn_t conn;
} profile_opts_t;

static void usage(FILE *out) {
  fprintf(out,
          "usage: edgemon-cli profile [--device D] [--last | --at TIME] [--show | --folded |\n"
          "                           --json] [--top N] [--svg FILE] [--pprof FILE]\n"
          "                           [--aggregator URL | --file PATH]\n"
          "       edgemon-cli profile --list --device D [--json] [--aggregator URL]\n"
          "       edgemon-cli profile --take --device D [--seconds S] [--broker URL]\n"
          "\n"
          "A stack profile is where a device's inference process spent its time in a bounded\n"
          "sampling window around a breach (an escalation, or a cmd/profile): its call stacks\n"
          "(Python, native and kernel frames) with the samples that hit each, the off-CPU time,\n"
          "and the stage whose span covered them. --show prints the trigger, the window and the\n"
          "sampling, what is missing (notes) and what the size cap cut, then the N hottest\n"
          "stacks (samples, %% of all samples taken, off-CPU ms, stage, root;...;leaf shortened\n"
          "from the root side) and the N hottest functions (self: samples where the function\n"
          "is the leaf; total: samples of the stacks it is in).\n"
          "\n"
          "options:\n"
          "  --aggregator URL  the aggregator's API, http://HOST[:PORT] (default\n"
          "                    $EDGEMON_AGGREGATOR, else " EM_CLI_DEFAULT_AGGREGATOR ")\n"
          "  --file PATH       read one profile (its CBOR, as ?format=cbor answers) instead\n"
          "  --device D        the device (required with the aggregator)\n"
          "  --last            the newest profile (the default)\n"
          "  --at TIME         the profile nearest TIME: RFC 3339 (2026-11-25T06:10:00Z,\n"
          "                    fractions and +hh:mm offsets too) or seconds since the epoch\n"
          "  --list            list the device's profiles, newest first\n"
          "  --show            the header and the two tables (the default)\n"
          "  --top N           rows in each table (default 10)\n"
          "  --folded          print folded stacks instead, 'root;...;leaf COUNT' per line (the\n"
          "                    input of flamegraph.pl and speedscope; stages merged, ';' in a\n"
          "                    name written as ':')\n"
          "  --json            print the profile (or the list) as the API's JSON instead\n"
          "  --svg FILE        also draw a flame graph into FILE: one self-contained SVG, click\n"
          "                    a frame to zoom, Search to highlight; colours by kind (python\n"
          "                    green, native orange, kernel blue, unknown grey)\n"
          "  --pprof FILE      also write the profile as pprof's profile.proto (uncompressed;\n"
          "                    go tool pprof FILE): samples/count, cpu/nanoseconds and\n"
          "                    off_cpu/nanoseconds, a stage label, the notes as comments\n"
          "  --take            publish cmd/profile to the device: its agent samples now\n"
          "  --seconds S       with --take: how long to sample, whole seconds 1..60 (default:\n"
          "                    the agent's configured window)\n"
          "  --timeout S       for the aggregator's answer (default 5 s)\n" EM_CLI_USAGE_BROKER
              EM_CLI_USAGE_CONN "  --help            this text\n"
          "\n" EM_CLI_USAGE_NUMBERS "\n"
          "exit status: 0 shown, 1 no such device or profile (or the aggregator said no),\n"
          "2 bad arguments, 3 the aggregator or the broker cannot be reached, 4 --file,\n"
          "--svg or --pprof cannot be used (missing, not a profile, not writable)\n");
}

static int check_args(profile_opts_t *o, bool last) {
  if (last && o->at) {
    return em_cli_usage_error(CMD, "--last and --at: give one of them");
  }
  if ((o->show ? 1 : 0) + (o->folded ? 1 : 0) + (o->json ? 1 : 0) > 1) {
    return em_cli_usage_error(CMD, "--show, --folded and --json: give one of them");
  }
  if (o->file && o->aggregator) {
    return em_cli_usage_error(CMD, "--file and --aggregator: give one source");
  }
  if (o->file && (o->list || o->take || o->at || o->device)) {
    return em_cli_usage_error(CMD, "--file holds one profile: no --list, --take, --at, --device");
  }
  if (o->list && (o->at || last || o->svg || o->pprof || o->take || o->folded || o->show)) {
    return em_cli_usage_error(CMD, "--list: only --json with it");
  }
  if (o->take &&
      (o->at || last || o->svg || o->pprof || o->json || o->folded || o->show || o->aggregator)) {
    return em_cli_usage_error(CMD, "--take only asks the device: no other output options");
  }
  if (o->seconds > 0 && !o->take) {
    return em_cli_usage_error(CMD, "--seconds goes with --take");
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
    return em_cli_conn_check(&o->conn, CMD, o->broker) == EM_CLI_OK ? -1 : EM_CLI_USAGE;
  }
  return -1;
}

/* Returns -1 to go on, or the exit code. */
static int parse_args(int argc, char **argv, profile_opts_t *o) {
  enum {
    O_AGG = 0x200,
    O_FILE,
    O_LAST,
    O_AT,
    O_LIST,
    O_TOP,
    O_SHOW,
    O_FOLDED,
    O_JSON,
    O_SVG,
    O_PPROF,
    O_TAKE,
    O_SECONDS,
    O_TIMEOUT
  };
  static const struct option opts[] = {
      {"aggregator", required_argument, NULL, O_AGG},
      {"file", required_argument, NULL, O_FILE},
      EM_CLI_OPT_DEVICE,
      EM_CLI_OPT_BROKER,
      {"last", no_argument, NULL, O_LAST},
      {"at", required_argument, NULL, O_AT},
      {"list", no_argument, NULL, O_LIST},
      {"top", required_argument, NULL, O_TOP},
      {"show", no_argument, NULL, O_SHOW},
      {"folded", no_argument, NULL, O_FOLDED},
      {"json", no_argument, NULL, O_JSON},
      {"svg", required_argument, NULL, O_SVG},
      {"pprof", required_argument, NULL, O_PPROF},
      {"take", no_argument, NULL, O_TAKE},
      {"seconds", required_argument, NULL, O_SECONDS},
      {"timeout", required_argument, NULL, O_TIMEOUT},
      {"help", no_argument, NULL, 'h'},
      EM_CLI_OPTS_CONN,
      {NULL, 0, NULL, 0},
  };
  static const em_cli_number_t top = {.min = 1, .max = 100000, .whole = true};
  static const em_cli_number_t timeout = {
      .min = 0, .max = 600, .above_min = true, .duration = true};
  static const em_cli_number_t seconds = {
      .min = 1, .max = EM_PROTO_MAX_PROFILE_SECS, .whole = true, .duration = true};
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
    case O_SHOW:
      o->show = true;
      break;
    case O_FOLDED:
      o->folded = true;
      break;
    case O_JSON:
      o->json = true;
      break;
    case O_SVG:
      o->svg = optarg;
      break;
    case O_PPROF:
      o->pprof = optarg;
      break;
    case O_TAKE:
      o->take = true;
      break;
    case O_SECONDS:
      if (em_cli_number_option(CMD, "--seconds", optarg, &seconds, &o->seconds) != EM_CLI_OK) {
        return EM_CLI_USAGE;
      }
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
  return check_args(o, last);
}

static void list_print(const char *device, const em_flight_list_t *l) {
  printf("%zu profile%s of %s, newest first\n", l->n, l->n == 1 ? "" : "s", device);
  printf("%-22s %-12s %-10s %-9s %-20s %8s %7s %8s\n", "key", "time", "cause", "level", "rule",
         "samples", "stacks", "bytes");
  for (size_t i = 0; i < l->n; i++) {
    const em_flight_entry_t *e = &l->v[i];
    char clock[32];
    char rule[24];
    em_view_clock(e->time_ns, clock, sizeof(clock));
    em_view_fit(e->rule, 20, rule, sizeof(rule));
    printf("%-22s %-12s %-10s %-9s %-20s %8llu %7llu %8llu%s\n", e->key, clock, e->cause, e->level,
           rule, (unsigned long long)e->samples, (unsigned long long)e->stacks,
           (unsigned long long)e->bytes, e->historical ? "  (replayed)" : "");
  }
}

/* The key of the profile to show (the newest, or the one nearest --at), or with --list the
 * list printed. Returns EM_CLI_OK with key set (not for --list), or the exit code. */
static int pick_key(const profile_opts_t *o, char *key, size_t cap) {
  char path[256];
  snprintf(path, sizeof(path), "/api/devices/%s/profiles?limit=%u", o->device,
           o->list || o->at ? 5000u : 1u);
  em_http_answer_t a;
  int rc = em_cli_api_get(CMD, o->aggregator, o->timeout_s, path, &a);
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
  rc = em_api_list_parse(a.body, "profiles", &list);
  em_http_get_free(&a);
  if (rc != 0) {
    em_cli_error(CMD, "aggregator %s: not a list of profiles", o->aggregator);
    return EM_CLI_BROKER;
  }
  if (o->list) {
    list_print(o->device, &list);
    em_flight_list_free(&list);
    return EM_CLI_OK;
  }
  const em_flight_entry_t *e = o->at        ? em_flight_list_nearest(&list, o->at_ns)
                               : list.n > 0 ? &list.v[0]
                                            : NULL;
  if (!e) {
    em_cli_error(CMD, "device %s has no profiles", o->device);
    em_flight_list_free(&list);
    return EM_CLI_FAIL;
  }
  snprintf(key, cap, "%s", e->key);
  em_flight_list_free(&list);
  return EM_CLI_OK;
}

static int write_svg(const char *path, const em_profile_t *p, const char *title) {
  FILE *out = fopen(path, "w");
  if (!out) {
    em_cli_error(CMD, "cannot write --svg %s: %s", path, strerror(errno));
    return EM_CLI_INPUT;
  }
  int rc = em_profile_svg(out, p, title);
  if (fclose(out) != 0 || rc != 0) {
    em_cli_error(CMD, "writing --svg %s failed", path);
    return EM_CLI_INPUT;
  }
  return EM_CLI_OK;
}

static int write_pprof(const char *path, const em_profile_t *p) {
  em_pb_t pb;
  if (em_pb_init(&pb, PPROF_MAX_BYTES) != 0 || em_profile_pprof(&pb, p) != 0) {
    em_pb_deinit(&pb);
    em_cli_error(CMD, "cannot write the profile as pprof: out of memory");
    return EM_CLI_FAIL;
  }
  size_t len = 0;
  const uint8_t *data = em_pb_data(&pb, &len);
  FILE *out = fopen(path, "wb");
  if (!out) {
    em_cli_error(CMD, "cannot write --pprof %s: %s", path, strerror(errno));
    em_pb_deinit(&pb);
    return EM_CLI_INPUT;
  }
  size_t put = fwrite(data, 1, len, out);
  em_pb_deinit(&pb);
  if (fclose(out) != 0 || put != len) {
    em_cli_error(CMD, "writing --pprof %s failed", path);
    return EM_CLI_INPUT;
  }
  return EM_CLI_OK;
}

static int print_json(const em_profile_t *p) {
  size_t need = 0;
  char probe[1];
  int rc = em_profile_to_json(p, probe, sizeof(probe), &need);
  char *json = (rc == 0 || rc == EM_PROTO_ENOSPACE) ? malloc(need + 1) : NULL;
  if (!json || em_profile_to_json(p, json, need + 1, &need) != 0) {
    free(json);
    em_cli_error(CMD, "cannot write the profile as JSON");
    return EM_CLI_FAIL;
  }
  fwrite(json, 1, need, stdout);
  fputc('\n', stdout);
  free(json);
  return EM_CLI_OK;
}

static int show(const profile_opts_t *o, const em_profile_t *p, const char *title) {
  int rc = o->svg ? write_svg(o->svg, p, title) : EM_CLI_OK;
  if (rc == EM_CLI_OK && o->pprof) {
    rc = write_pprof(o->pprof, p);
  }
  if (rc != EM_CLI_OK) {
    return rc;
  }
  if (o->json) {
    return print_json(p);
  }
  if (o->folded) {
    if (em_profile_folded(stdout, p) != 0) {
      em_cli_error(CMD, "cannot write the folded stacks");
      return EM_CLI_FAIL;
    }
    return EM_CLI_OK;
  }
  if (em_profile_table(p, title, o->top) != 0) {
    em_cli_error(CMD, "out of memory");
    return EM_CLI_FAIL;
  }
  return EM_CLI_OK;
}

static int take(profile_opts_t *o) {
  em_msg_t cmd = {.kind = EM_MSG_CMD};
  cmd.u.cmd.head.time_ns = em_cli_real_ns();
  cmd.u.cmd.command = EM_CMD_PROFILE;
  cmd.u.cmd.seconds = (uint32_t)o->seconds;
  return em_cli_send_cmd(CMD, &o->conn, o->broker, o->device, &cmd, "profile", "a profile");
}

int em_cli_profile(int argc, char **argv) {
  profile_opts_t o = {.top = DEFAULT_TOP, .timeout_s = DEFAULT_TIMEOUT_S};
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
    rc = em_cli_read_message_file(CMD, o.file, EM_PROFILE_MAX_BYTES, "a profile", &cbor, &len);
    snprintf(title, sizeof(title), "%s", o.file);
  } else {
    char key[32];
    rc = pick_key(&o, key, sizeof(key));
    if (rc != EM_CLI_OK || o.list) {
      return rc;
    }
    char path[256];
    snprintf(path, sizeof(path), "/api/devices/%s/profiles/%s?format=cbor", o.device, key);
    em_http_answer_t a;
    rc = em_cli_api_get(CMD, o.aggregator, o.timeout_s, path, &a);
    if (rc == EM_CLI_OK) {
      cbor = (uint8_t *)a.body;
      len = a.len;
    }
    snprintf(title, sizeof(title), "%s %s", o.device, key);
  }
  if (rc != EM_CLI_OK) {
    return rc;
  }
  size_t scratch_len = em_profile_scratch_bytes(len);
  void *scratch = malloc(scratch_len);
  em_profile_t p;
  size_t off = 0;
  int drc = scratch ? em_profile_decode(cbor, len, &p, scratch, scratch_len, &off) : -ENOMEM;
  if (drc != 0) {
    em_cli_error(CMD, "%s: not a profile: %s at byte %zu", o.file ? o.file : title,
                 em_proto_strerror(drc), off);
    rc = o.file ? EM_CLI_INPUT : EM_CLI_FAIL;
  } else {
    rc = show(&o, &p, title);
  }
  free(scratch);
  free(cbor);
  return rc;
}
