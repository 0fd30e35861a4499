/*
 * flight.c - `edgemon-cli flight`: a device's flight recordings (edgemon/flight.h), read from
 * the aggregator's API or from a file, shown as a table of the slowest frames around the
 * breach (flight_table.h), as the API's JSON, or drawn as an SVG (flight_svg.h); --list lists
 * them, and --take asks a device for one now (cmd/flight over MQTT).
 *
 * Sources: --aggregator URL (default $EDGEMON_AGGREGATOR, else http://127.0.0.1:9108), or
 * --file PATH holding one recording's CBOR (what ?format=cbor answers). From the aggregator the
 * recording is fetched as CBOR and decoded, so a file and the API give the same table; --json
 * prints em_flight_to_json() of it, byte for byte what the API's JSON is. All of that, the
 * options and their checks, --list, --svg and --take work as profile's (forensic_cmd.h); what
 * is flight's own is its help and the table.
 *
 * Owns, for the call: the decoded recording (forensic_cmd.h), the frame table.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "device_api.h"
#include "flight_list.h"
#include "flight_table.h"
#include "forensic_cmd.h"

#include <edgemon/flight.h>
#include <stddef.h>
#include <stdio.h>

#define CMD "flight"

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

/* The options are all shared (forensic_cmd.h): flight has none of its own. */
static const struct option opts[] = {
    EM_CLI_OPTS_FORENSIC,
    {NULL, 0, NULL, 0},
};

static const em_cli_forensic_kind_t kind = {
    .cmd = CMD,
    .noun = "flight recording",
    .array = "flights",
    .command = EM_CMD_FLIGHT,
    .counts = {{"ticks", 6, offsetof(em_flight_entry_t, ticks)},
               {"spans", 7, offsetof(em_flight_entry_t, spans)}},
    .opts = opts,
    .usage = usage,
};

static int show(const em_cli_forensic_t *o, const em_cli_forensic_entry_t *e) {
  int rc = o->svg ? em_cli_forensic_svg(&kind, o->svg, e) : EM_CLI_OK;
  if (rc != EM_CLI_OK) {
    return rc;
  }
  if (o->json) {
    return em_cli_forensic_json(&kind, e);
  }
  if (em_flight_table(stdout, &e->u.flight, e->title, o->top) != 0) {
    em_cli_error(CMD, "out of memory");
    return EM_CLI_FAIL;
  }
  return EM_CLI_OK;
}

int em_cli_flight(int argc, char **argv) {
  em_cli_forensic_t o;
  em_cli_forensic_entry_t e;
  int rc = em_cli_forensic_run(&o, &kind, NULL, argc, argv, &e);
  if (rc >= 0) {
    return rc;
  }
  rc = show(&o, &e);
  em_cli_forensic_entry_free(&e);
  return rc;
}
