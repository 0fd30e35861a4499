/*
 * forensic_cmd.c - the options, checks, list, fetch and output that flight and profile share
 * (see forensic_cmd.h). Which message an entry is (flight recording or profile) is the kind's
 * `command`; decode(), to_json() and draw_svg() are the only places that tell them apart.
 */
#define _POSIX_C_SOURCE 200809L
#include "forensic_cmd.h"

#include "cli.h"
#include "device_api.h"
#include "flight_list.h"
#include "flight_svg.h"
#include "http_get.h"
#include "profile_svg.h"
#include "view.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_TOP       10u
#define DEFAULT_TIMEOUT_S 5.0

/* Takes getopt's result c when it is one of EM_CLI_OPTS_FORENSIC but --help. Returns
 * EM_CLI_OK when it was, EM_CLI_USAGE (message printed) for a bad value, -1 when it is not. */
static int shared_option(em_cli_forensic_t *o, const char *cmd, int c, const char *arg) {
  static const em_cli_number_t top = {.min = 1, .max = 100000, .whole = true};
  static const em_cli_number_t timeout = {
      .min = 0, .max = 600, .above_min = true, .duration = true};
  double n = 0;
  if (em_cli_conn_option(&o->conn, c, arg) == EM_CLI_OK) {
    return EM_CLI_OK;
  }
  switch (c) {
  case EM_CLI_O_AGGREGATOR:
    o->aggregator = arg;
    break;
  case EM_CLI_O_FILE:
    o->file = arg;
    break;
  case 'd':
    o->device = arg;
    break;
  case 'b':
    o->broker = arg;
    break;
  case EM_CLI_O_LAST:
    o->last = true;
    break;
  case EM_CLI_O_AT:
    o->at = true;
    if (!em_cli_parse_time(arg, &o->at_ns)) {
      return em_cli_usage_error(cmd,
                                "--at: '%s' is neither an RFC 3339 time (2026-11-25T06:10:00Z)"
                                " nor seconds since the epoch",
                                arg);
    }
    break;
  case EM_CLI_O_LIST:
    o->list = true;
    break;
  case EM_CLI_O_TOP:
    if (em_cli_number_option(cmd, "--top", arg, &top, &n) != EM_CLI_OK) {
      return EM_CLI_USAGE;
    }
    o->top = (size_t)n;
    break;
  case EM_CLI_O_JSON:
    o->json = true;
    break;
  case EM_CLI_O_SVG:
    o->svg = arg;
    break;
  case EM_CLI_O_TAKE:
    o->take = true;
    break;
  case EM_CLI_O_TIMEOUT:
    return em_cli_number_option(cmd, "--timeout", arg, &timeout, &o->timeout_s);
  default:
    return -1;
  }
  return EM_CLI_OK;
}

/* The options together, once parsed. Returns -1 to go on, or EM_CLI_USAGE (printed). */
static int check(em_cli_forensic_t *o, const em_cli_forensic_kind_t *k, void *ctx) {
  const char *cmd = k->cmd;
  if (o->last && o->at) {
    return em_cli_usage_error(cmd, "--last and --at: give one of them");
  }
  if (o->file && o->aggregator) {
    return em_cli_usage_error(cmd, "--file and --aggregator: give one source");
  }
  if (o->file && (o->list || o->take || o->at || o->device)) {
    return em_cli_usage_error(cmd, "--file holds one %s: no --list, --take, --at, --device",
                              k->noun);
  }
  if (o->list && (o->at || o->last || o->svg || o->take || o->own_output)) {
    return em_cli_usage_error(cmd, "--list: no --at, --last, --svg%s%s or --take with it",
                              k->own_outputs ? ", " : "", k->own_outputs ? k->own_outputs : "");
  }
  if (o->take && (o->at || o->last || o->svg || o->json || o->own_output || o->aggregator)) {
    return em_cli_usage_error(cmd, "--take only asks the device: no other output options");
  }
  int rc = k->check ? k->check(ctx) : -1;
  if (rc >= 0) {
    return rc;
  }
  if (!o->file && !o->device) {
    return em_cli_usage_error(cmd, "--device is required (or --file PATH)");
  }
  if (o->device && !em_cli_device_ok(o->device)) {
    return em_cli_usage_error(cmd, "--device wants one device id, not '%s'", o->device);
  }
  if (!o->file && !o->take && em_cli_aggregator_url(cmd, &o->aggregator) != EM_CLI_OK) {
    return EM_CLI_USAGE;
  }
  if (o->take) {
    o->broker = em_cli_broker_url(o->broker);
    return em_cli_conn_check(&o->conn, cmd, o->broker) == EM_CLI_OK ? -1 : EM_CLI_USAGE;
  }
  return -1;
}

/* Parses and checks argv (em_cli_forensic_run()). Returns -1 to go on, or the exit code. */
static int parse(em_cli_forensic_t *o, const em_cli_forensic_kind_t *k, void *ctx, int argc,
                 char **argv) {
  memset(o, 0, sizeof(*o));
  o->top = DEFAULT_TOP;
  o->timeout_s = DEFAULT_TIMEOUT_S;
  int c;
  opterr = 0;
  optind = 1;
  while ((c = getopt_long(argc, argv, "hb:d:", k->opts, NULL)) != -1) {
    if (c == 'h') {
      k->usage(stdout);
      return EM_CLI_OK;
    }
    int rc = shared_option(o, k->cmd, c, optarg);
    if (rc == -1 && k->option) {
      rc = k->option(ctx, c, optarg);
    }
    if (rc == -1) {
      return em_cli_bad_option(k->cmd, argv);
    }
    if (rc != EM_CLI_OK) {
      return rc;
    }
  }
  if (optind < argc) {
    return em_cli_usage_error(k->cmd, "unexpected argument '%s'", argv[optind]);
  }
  return check(o, k, ctx);
}

/* The list as a table, one line per entry, newest first. */
static void list_print(const em_cli_forensic_kind_t *k, const char *device,
                       const em_flight_list_t *l) {
  const em_cli_forensic_column_t *a = &k->counts[0];
  const em_cli_forensic_column_t *b = &k->counts[1];
  printf("%zu %s%s of %s, newest first\n", l->n, k->noun, l->n == 1 ? "" : "s", device);
  printf("%-22s %-12s %-10s %-9s %-20s %*s %*s %8s\n", "key", "time", "cause", "level", "rule",
         a->width, a->name, b->width, b->name, "bytes");
  for (size_t i = 0; i < l->n; i++) {
    const em_flight_entry_t *e = &l->v[i];
    uint64_t va = 0;
    uint64_t vb = 0;
    memcpy(&va, (const char *)e + a->offset, sizeof(va));
    memcpy(&vb, (const char *)e + b->offset, sizeof(vb));
    char clock[32];
    char rule[24];
    em_view_clock(e->time_ns, clock, sizeof(clock));
    em_view_fit(e->rule, 20, rule, sizeof(rule));
    printf("%-22s %-12s %-10s %-9s %-20s %*llu %*llu %8llu%s\n", e->key, clock, e->cause, e->level,
           rule, a->width, (unsigned long long)va, b->width, (unsigned long long)vb,
           (unsigned long long)e->bytes, e->historical ? "  (replayed)" : "");
  }
}

/* Reads the device's list: with --list prints it; else copies the key of the entry to show
 * into key. Returns EM_CLI_OK, or the exit code with the reason printed. */
static int pick(const em_cli_forensic_t *o, const em_cli_forensic_kind_t *k, char *key,
                size_t cap) {
  char path[256];
  snprintf(path, sizeof(path), "/api/devices/%s/%s?limit=%u", o->device, k->array,
           o->list || o->at ? 5000u : 1u);
  em_http_answer_t a;
  int rc = em_cli_api_get(k->cmd, o->aggregator, o->timeout_s, path, &a);
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
  rc = em_api_list_parse(a.body, k->array, &list);
  em_http_get_free(&a);
  if (rc != 0) {
    em_cli_error(k->cmd, "aggregator %s: not a list of %ss", o->aggregator, k->noun);
    return EM_CLI_BROKER;
  }
  if (o->list) {
    list_print(k, o->device, &list);
    em_flight_list_free(&list);
    return EM_CLI_OK;
  }
  const em_flight_entry_t *e = o->at        ? em_flight_list_nearest(&list, o->at_ns)
                               : list.n > 0 ? &list.v[0]
                                            : NULL;
  if (!e) {
    em_cli_error(k->cmd, "device %s has no %ss", o->device, k->noun);
    em_flight_list_free(&list);
    return EM_CLI_FAIL;
  }
  snprintf(key, cap, "%s", e->key);
  em_flight_list_free(&list);
  return EM_CLI_OK;
}

/* The entry's CBOR from --file (*cbor malloc'd) or the aggregator (*cbor the answer's body,
 * malloc'd too), with e->title set; with --list the list printed instead (pick()). Returns -1
 * with *cbor set, or the exit code with the reason printed. */
static int load(const em_cli_forensic_t *o, const em_cli_forensic_kind_t *k,
                em_cli_forensic_entry_t *e, uint8_t **cbor, size_t *len) {
  int rc;
  if (o->file) {
    char what[64];
    snprintf(what, sizeof(what), "a %s", k->noun);
    size_t max = k->command == EM_CMD_FLIGHT ? EM_FLIGHT_MAX_BYTES : EM_PROFILE_MAX_BYTES;
    rc = em_cli_read_message_file(k->cmd, o->file, max, what, cbor, len);
    snprintf(e->title, sizeof(e->title), "%s", o->file);
    return rc == EM_CLI_OK ? -1 : rc;
  }
  char key[32];
  rc = pick(o, k, key, sizeof(key));
  if (rc != EM_CLI_OK || o->list) {
    return rc;
  }
  char path[256];
  snprintf(path, sizeof(path), "/api/devices/%s/%s/%s?format=cbor", o->device, k->array, key);
  em_http_answer_t a;
  rc = em_cli_api_get(k->cmd, o->aggregator, o->timeout_s, path, &a);
  if (rc != EM_CLI_OK) {
    return rc;
  }
  *cbor = (uint8_t *)a.body;
  *len = a.len;
  snprintf(e->title, sizeof(e->title), "%s %s", o->device, key);
  return -1;
}

/* Decodes cbor into e (e->scratch allocated here). Returns 0 or an EM_PROTO_E* code with *off
 * the byte at fault, or -ENOMEM. */
static int decode(const em_cli_forensic_kind_t *k, const uint8_t *cbor, size_t len,
                  em_cli_forensic_entry_t *e, size_t *off) {
  bool flight = k->command == EM_CMD_FLIGHT;
  size_t cap = flight ? em_flight_scratch_bytes(len) : em_profile_scratch_bytes(len);
  e->scratch = malloc(cap);
  if (!e->scratch) {
    return -ENOMEM;
  }
  return flight ? em_flight_decode(cbor, len, &e->u.flight, e->scratch, cap, off)
                : em_profile_decode(cbor, len, &e->u.profile, e->scratch, cap, off);
}

/* --take: the cmd message asking the device for one entry now. */
static int take(em_cli_forensic_t *o, const em_cli_forensic_kind_t *k) {
  em_msg_t cmd = {.kind = EM_MSG_CMD};
  cmd.u.cmd.head.time_ns = em_cli_real_ns();
  cmd.u.cmd.command = k->command;
  cmd.u.cmd.seconds = o->take_seconds;
  char what[64];
  snprintf(what, sizeof(what), "a %s", k->noun);
  return em_cli_send_cmd(k->cmd, &o->conn, o->broker, o->device, &cmd, k->cmd, what);
}

int em_cli_forensic_run(em_cli_forensic_t *o, const em_cli_forensic_kind_t *k, void *ctx, int argc,
                        char **argv, em_cli_forensic_entry_t *e) {
  memset(e, 0, sizeof(*e));
  int rc = parse(o, k, ctx, argc, argv);
  if (rc >= 0) {
    return rc;
  }
  if (o->take) {
    return take(o, k);
  }
  uint8_t *cbor = NULL;
  size_t len = 0;
  rc = load(o, k, e, &cbor, &len);
  if (rc >= 0) {
    return rc;
  }
  size_t off = 0;
  int drc = decode(k, cbor, len, e, &off);
  free(cbor);
  if (drc != 0) {
    em_cli_error(k->cmd, "%s: not a %s: %s at byte %zu", e->title, k->noun, em_proto_strerror(drc),
                 off);
    em_cli_forensic_entry_free(e);
    return o->file ? EM_CLI_INPUT : EM_CLI_FAIL;
  }
  return -1;
}

void em_cli_forensic_entry_free(em_cli_forensic_entry_t *e) {
  free(e->scratch);
  e->scratch = NULL;
}

static int to_json(const em_cli_forensic_kind_t *k, const em_cli_forensic_entry_t *e, char *buf,
                   size_t cap, size_t *need) {
  return k->command == EM_CMD_FLIGHT ? em_flight_to_json(&e->u.flight, buf, cap, need)
                                     : em_profile_to_json(&e->u.profile, buf, cap, need);
}

static int draw_svg(const em_cli_forensic_kind_t *k, FILE *out, const em_cli_forensic_entry_t *e) {
  return k->command == EM_CMD_FLIGHT ? em_flight_svg(out, &e->u.flight, e->title)
                                     : em_profile_svg(out, &e->u.profile, e->title);
}

int em_cli_forensic_json(const em_cli_forensic_kind_t *k, const em_cli_forensic_entry_t *e) {
  size_t need = 0;
  char probe[1];
  int rc = to_json(k, e, probe, sizeof(probe), &need);
  char *json = (rc == 0 || rc == EM_PROTO_ENOSPACE) ? malloc(need + 1) : NULL;
  if (!json || to_json(k, e, json, need + 1, &need) != 0) {
    free(json);
    em_cli_error(k->cmd, "cannot write the %s as JSON", k->noun);
    return EM_CLI_FAIL;
  }
  fwrite(json, 1, need, stdout);
  fputc('\n', stdout);
  free(json);
  return EM_CLI_OK;
}

int em_cli_forensic_svg(const em_cli_forensic_kind_t *k, const char *path,
                        const em_cli_forensic_entry_t *e) {
  FILE *out = fopen(path, "w");
  if (!out) {
    em_cli_error(k->cmd, "cannot write --svg %s: %s", path, strerror(errno));
    return EM_CLI_INPUT;
  }
  int rc = draw_svg(k, out, e);
  if (fclose(out) != 0 || rc != 0) {
    em_cli_error(k->cmd, "writing --svg %s failed", path);
    return EM_CLI_INPUT;
  }
  return EM_CLI_OK;
}
