/*
 * profile.c - `edgemon-cli profile`: a device's stack profiles (edgemon/profile.h), read from
 * the aggregator's API or from a file, shown as the hottest stacks and functions
 * (profile_table.h), as folded lines or the API's JSON on stdout, drawn as a flame graph
 * (profile_svg.h) or written as pprof (profile_pprof.h); --list lists them, and --take asks a
 * device for one now (cmd/profile over MQTT).
 *
 * Sources, options, --list, --json, --svg and --take work as flight's (forensic_cmd.h):
 * --aggregator URL or --file PATH holding one profile's CBOR (what ?format=cbor answers). From
 * the aggregator the profile is fetched as CBOR and decoded, so a file and the API give the
 * same output; --json prints em_profile_to_json() of it, byte for byte what the API's JSON is.
 * What is profile's own: --show, --folded, --pprof, --stage, --diff and --seconds, its help
 * and its tables. --diff BASELINE reads a second profile from a file (or --diff-at TIME
 * fetches the device's profile nearest TIME from the aggregator) and shows the first against
 * it (profile_diff.h, em_profile_svg_diff()) in the table, --folded, --json or --svg.
 *
 * Owns, for the call: the decoded profile (forensic_cmd.h), the baseline's bytes and decode
 * scratch, the pprof buffer.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "device_api.h"
#include "flight_list.h"
#include "forensic_cmd.h"
#include "profile_diff.h"
#include "profile_pprof.h"
#include "profile_stacks.h"
#include "profile_svg.h"
#include "profile_table.h"

#include <edgemon/profile.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#define CMD             "profile"
#define PPROF_MAX_BYTES (256u * 1024u * 1024u)

typedef struct {
  em_cli_forensic_t base; /* The options profile shares with flight (forensic_cmd.h). */
  bool show;
  bool folded;
  const char *pprof;
  const char *stage;
  const char *diff;    /* --diff BASELINE: the baseline profile's CBOR file. */
  bool diff_at;        /* --diff-at given: the baseline is the aggregator's, nearest diff_at_ns. */
  uint64_t diff_at_ns; /* --diff-at, in ns since the epoch. */
} profile_opts_t;

static void usage(FILE *out) {
  fprintf(out,
          "usage: edgemon-cli profile [--device D] [--last | --at TIME] [--show | --folded |\n"
          "                           --json] [--stage NAME] [--top N] [--svg FILE]\n"
          "                           [--pprof FILE] [--aggregator URL | --file PATH]\n"
          "       edgemon-cli profile (--diff BASELINE | --diff-at TIME) [--device D]\n"
          "                           [--last | --at TIME]\n"
          "                           [--folded | --json] [--top N] [--svg FILE]\n"
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
          "\n");
  fprintf(out,
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
          "  --stage NAME      only the samples taken while their thread was in a span of\n"
          "                    stage NAME (for --show, --folded, --svg and --pprof; percentages\n"
          "                    stay of all samples taken)\n"
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
          "  --diff BASELINE   show the profile against the one in the file BASELINE (its\n"
          "                    CBOR): per function its self and total share of samples in\n"
          "                    each (%% of that profile's samples, so lengths and rates\n"
          "                    compare) and the change in points, grown most first, then the\n"
          "                    stacks; off-CPU ms apart. With --folded: every stack, 'root;...;\n"
          "                    leaf BASE%% NOW%% DELTA'; --json: all of it as one object; --svg:\n"
          "                    the profile's flame graph coloured by each frame's change (grew\n"
          "                    red, shrank blue, deeper for more; the baseline's share in the\n"
          "                    title). Not with --stage or --pprof\n"
          "  --diff-at TIME    as --diff, the baseline the device's profile nearest TIME on the\n"
          "                    aggregator (TIME as for --at; not with --file)\n"
          "  --take            publish cmd/profile to the device: its agent samples now\n"
          "  --seconds S       with --take: how long to sample, whole seconds 1..60 (default:\n"
          "                    the agent's configured window)\n"
          "  --timeout S       for the aggregator's answer (default 5 s)\n" EM_CLI_USAGE_BROKER
              EM_CLI_USAGE_CONN "  --help            this text\n"
          "\n" EM_CLI_USAGE_NUMBERS "\n"
          "exit status: 0 shown, 1 no such device or profile (or the aggregator said no),\n"
          "2 bad arguments, 3 the aggregator or the broker cannot be reached, 4 --file,\n"
          "--diff, --svg or --pprof cannot be used (missing, not a profile, not writable)\n");
}

enum { O_SHOW = 0x200, O_FOLDED, O_PPROF, O_SECONDS, O_STAGE, O_DIFF, O_DIFF_AT };

static const struct option opts[] = {
    EM_CLI_OPTS_FORENSIC,
    {"show", no_argument, NULL, O_SHOW},
    {"folded", no_argument, NULL, O_FOLDED},
    {"pprof", required_argument, NULL, O_PPROF},
    {"seconds", required_argument, NULL, O_SECONDS},
    {"stage", required_argument, NULL, O_STAGE},
    {"diff", required_argument, NULL, O_DIFF},
    {"diff-at", required_argument, NULL, O_DIFF_AT},
    {NULL, 0, NULL, 0},
};

/* profile's own options (em_cli_forensic_kind_t.option): --seconds for --take, and the output
 * options, which --list and --take refuse. */
static int option(void *ctx, int c, const char *arg) {
  static const em_cli_number_t seconds = {
      .min = 1, .max = EM_PROTO_MAX_PROFILE_SECS, .whole = true, .duration = true};
  profile_opts_t *o = ctx;
  if (c == O_SECONDS) {
    double s = 0;
    int rc = em_cli_number_option(CMD, "--seconds", arg, &seconds, &s);
    o->base.take_seconds = (uint32_t)s;
    return rc;
  }
  if (c == O_DIFF_AT) {
    o->diff_at = true;
    o->base.own_output = true;
    if (!em_cli_parse_time(arg, &o->diff_at_ns)) {
      return em_cli_usage_error(CMD,
                                "--diff-at: '%s' is neither an RFC 3339 time "
                                "(2026-11-25T06:10:00Z) nor seconds since the epoch",
                                arg);
    }
    return EM_CLI_OK;
  }
  if (c != O_SHOW && c != O_FOLDED && c != O_PPROF && c != O_STAGE && c != O_DIFF) {
    return -1;
  }
  o->diff = c == O_DIFF ? arg : o->diff;
  o->stage = c == O_STAGE ? arg : o->stage;
  o->show = o->show || c == O_SHOW;
  o->folded = o->folded || c == O_FOLDED;
  o->pprof = c == O_PPROF ? arg : o->pprof;
  o->base.own_output = true;
  return EM_CLI_OK;
}

/* profile's own checks (em_cli_forensic_kind_t.check). */
static int check(void *ctx) {
  const profile_opts_t *o = ctx;
  if ((o->show ? 1 : 0) + (o->folded ? 1 : 0) + (o->base.json ? 1 : 0) > 1) {
    return em_cli_usage_error(CMD, "--show, --folded and --json: give one of them");
  }
  if (o->base.take_seconds > 0 && !o->base.take) {
    return em_cli_usage_error(CMD, "--seconds goes with --take");
  }
  if (o->stage && o->base.json) {
    return em_cli_usage_error(CMD, "--stage and --json: --json prints the profile whole");
  }
  if (o->diff && o->diff_at) {
    return em_cli_usage_error(CMD, "--diff and --diff-at: give one baseline");
  }
  if (o->diff_at && o->base.file) {
    return em_cli_usage_error(CMD, "--diff-at reads the aggregator: with --file, give --diff FILE");
  }
  if ((o->diff || o->diff_at) && (o->stage || o->pprof)) {
    return em_cli_usage_error(CMD, "--diff compares whole profiles: not with %s",
                              o->stage ? "--stage" : "--pprof");
  }
  return -1;
}

static const em_cli_forensic_kind_t kind = {
    .cmd = CMD,
    .noun = "profile",
    .array = "profiles",
    .command = EM_CMD_PROFILE,
    .own_outputs = "--pprof, --show, --folded, --stage, --diff, --diff-at",
    .counts = {{"samples", 8, offsetof(em_flight_entry_t, samples)},
               {"stacks", 7, offsetof(em_flight_entry_t, stacks)}},
    .opts = opts,
    .option = option,
    .check = check,
    .usage = usage,
};

static int write_pprof(const char *path, const em_profile_t *p, const em_profile_frame_t *system) {
  em_pb_t pb;
  if (em_pb_init(&pb, PPROF_MAX_BYTES) != 0 || em_profile_pprof(&pb, p, system) != 0) {
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

/* The outputs, with p's frames made readable (C++ names demangled) but for --json, which is
 * the API's JSON as the device sent it. */
static int show_readable(const profile_opts_t *o, em_cli_forensic_entry_t *e,
                         const em_profile_frame_t *sent) {
  const em_profile_t *p = &e->u.profile;
  int rc = o->base.svg ? em_cli_forensic_svg(&kind, o->base.svg, e) : EM_CLI_OK;
  if (rc == EM_CLI_OK && o->pprof) {
    rc = write_pprof(o->pprof, p, sent);
  }
  if (rc != EM_CLI_OK) {
    return rc;
  }
  if (o->base.json) {
    e->u.profile.frames = sent;
    return em_cli_forensic_json(&kind, e);
  }
  if (o->folded) {
    if (em_profile_folded(stdout, p) != 0) {
      em_cli_error(CMD, "cannot write the folded stacks");
      return EM_CLI_FAIL;
    }
    return EM_CLI_OK;
  }
  if (em_profile_table(p, e->title, o->base.top) != 0) {
    em_cli_error(CMD, "out of memory");
    return EM_CLI_FAIL;
  }
  return EM_CLI_OK;
}

/* --stage: p's stacks of that stage only, in *kept (malloc'd; p points at it). Returns
 * EM_CLI_OK, or EM_CLI_FAIL when the profile has no such stage (or no memory). */
static int keep_stage(const char *stage, em_cli_forensic_entry_t *e, em_profile_stack_t **kept) {
  em_profile_t *p = &e->u.profile;
  uint32_t want = EM_PROFILE_NO_STAGE;
  for (size_t i = 0; i < p->n_stages; i++) {
    want = strcmp(p->stages[i], stage) == 0 ? (uint32_t)i : want;
  }
  if (want == EM_PROFILE_NO_STAGE) {
    char names[256] = "";
    for (size_t i = 0, len = 0; i < p->n_stages && len < sizeof(names); i++) {
      len +=
          (size_t)snprintf(names + len, sizeof(names) - len, "%s%s", i ? ", " : "", p->stages[i]);
    }
    em_cli_error(CMD, "no stage '%s' in %s (%s%s)", stage, e->title,
                 p->n_stages ? "its stages: " : "it has none; its notes say why", names);
    return EM_CLI_FAIL;
  }
  *kept = malloc((p->n_stacks ? p->n_stacks : 1) * sizeof(**kept));
  if (!*kept) {
    em_cli_error(CMD, "out of memory");
    return EM_CLI_FAIL;
  }
  size_t n = 0;
  for (size_t i = 0; i < p->n_stacks; i++) {
    if (p->stacks[i].stage == want) {
      (*kept)[n++] = p->stacks[i];
    }
  }
  p->stacks = *kept;
  p->n_stacks = n;
  size_t len = strlen(e->title);
  snprintf(e->title + len, sizeof(e->title) - len, ", stage %s", stage);
  return EM_CLI_OK;
}

static int show(const profile_opts_t *o, em_cli_forensic_entry_t *e) {
  em_profile_stack_t *kept = NULL;
  int rc = o->stage ? keep_stage(o->stage, e, &kept) : EM_CLI_OK;
  const em_profile_frame_t *sent = e->u.profile.frames;
  em_profile_frame_t *readable = NULL;
  char *text = NULL;
  if (rc == EM_CLI_OK && em_profile_readable(&e->u.profile, &readable, &text) != 0) {
    em_cli_error(CMD, "out of memory");
    rc = EM_CLI_FAIL;
  }
  if (rc == EM_CLI_OK) {
    e->u.profile.frames = readable;
    rc = show_readable(o, e, sent);
    e->u.profile.frames = sent;
  }
  free(readable);
  free(text);
  free(kept);
  return rc;
}

/* The --diff outputs of p against base, both readable. */
static int show_diff(const profile_opts_t *o, const em_profile_t *p, const char *title,
                     const em_profile_t *base, const char *base_title) {
  if (o->base.svg) {
    FILE *out = fopen(o->base.svg, "w");
    if (!out) {
      em_cli_error(CMD, "cannot write --svg %s: %s", o->base.svg, strerror(errno));
      return EM_CLI_INPUT;
    }
    int drc = em_profile_svg_diff(out, p, title, base, base_title);
    if (fclose(out) != 0 || drc != 0) {
      em_cli_error(CMD, "writing --svg %s failed", o->base.svg);
      return EM_CLI_INPUT;
    }
  }
  em_profile_diff_t d;
  if (em_profile_diff(base, p, &d) != 0) {
    em_cli_error(CMD, "out of memory");
    return EM_CLI_FAIL;
  }
  int rc = o->base.json ? em_profile_diff_json(stdout, &d, title, base_title)
           : o->folded  ? em_profile_diff_folded(stdout, &d)
                        : em_profile_diff_table(&d, title, base_title, o->base.top);
  em_profile_diff_free(&d);
  if (rc != 0) {
    em_cli_error(CMD, "cannot write the comparison");
    return EM_CLI_FAIL;
  }
  return EM_CLI_OK;
}

/* --diff-at: the CBOR (*cbor malloc'd) of the device's profile nearest o->diff_at_ns on the
 * aggregator, its title "<device> <key>" in title. Returns EM_CLI_OK, or the exit code with
 * the reason printed. */
static int fetch_baseline(const profile_opts_t *o, uint8_t **cbor, size_t *len, char *title,
                          size_t cap) {
  char path[256];
  snprintf(path, sizeof(path), "/api/devices/%s/profiles?limit=5000", o->base.device);
  em_http_answer_t a;
  int rc = em_cli_api_get(CMD, o->base.aggregator, o->base.timeout_s, path, &a);
  if (rc != EM_CLI_OK) {
    return rc;
  }
  em_flight_list_t list;
  int prc = em_api_list_parse(a.body, "profiles", &list);
  em_http_get_free(&a);
  if (prc != 0) {
    em_cli_error(CMD, "aggregator %s: not a list of profiles", o->base.aggregator);
    return EM_CLI_BROKER;
  }
  const em_flight_entry_t *e = em_flight_list_nearest(&list, o->diff_at_ns);
  if (!e) {
    em_cli_error(CMD, "device %s has no profiles", o->base.device);
    em_flight_list_free(&list);
    return EM_CLI_FAIL;
  }
  snprintf(path, sizeof(path), "/api/devices/%s/profiles/%s?format=cbor", o->base.device, e->key);
  snprintf(title, cap, "%s %s", o->base.device, e->key);
  em_flight_list_free(&list);
  rc = em_cli_api_get(CMD, o->base.aggregator, o->base.timeout_s, path, &a);
  if (rc != EM_CLI_OK) {
    return rc;
  }
  *cbor = (uint8_t *)a.body;
  *len = a.len;
  return EM_CLI_OK;
}

/* --diff, --diff-at: reads and decodes the baseline, then shows e's profile against it, both
 * readable. */
static int diff(const profile_opts_t *o, em_cli_forensic_entry_t *e) {
  uint8_t *cbor = NULL;
  size_t len = 0;
  char title[160];
  snprintf(title, sizeof(title), "%s", o->diff ? o->diff : "");
  int rc = o->diff ? em_cli_read_message_file(CMD, o->diff, EM_PROFILE_MAX_BYTES, "a profile",
                                              &cbor, &len)
                   : fetch_baseline(o, &cbor, &len, title, sizeof(title));
  if (rc != EM_CLI_OK) {
    return rc;
  }
  size_t cap = em_profile_scratch_bytes(len);
  void *scratch = malloc(cap);
  em_profile_t base;
  size_t off = 0;
  int drc = scratch ? em_profile_decode(cbor, len, &base, scratch, cap, &off) : -ENOMEM;
  free(cbor);
  if (drc != 0) {
    em_cli_error(CMD, "%s %s: not a profile: %s at byte %zu", o->diff ? "--diff" : "--diff-at",
                 title, em_proto_strerror(drc), off);
    free(scratch);
    return drc == -ENOMEM || !o->diff ? EM_CLI_FAIL : EM_CLI_INPUT;
  }
  em_profile_frame_t *rf[2] = {NULL, NULL};
  char *text[2] = {NULL, NULL};
  em_profile_t now = e->u.profile;
  if (em_profile_readable(&now, &rf[0], &text[0]) != 0 ||
      em_profile_readable(&base, &rf[1], &text[1]) != 0) {
    em_cli_error(CMD, "out of memory");
    rc = EM_CLI_FAIL;
  } else {
    now.frames = rf[0];
    base.frames = rf[1];
    rc = show_diff(o, &now, e->title, &base, title);
  }
  for (int i = 0; i < 2; i++) {
    free(rf[i]);
    free(text[i]);
  }
  free(scratch);
  return rc;
}

int em_cli_profile(int argc, char **argv) {
  profile_opts_t o = {0};
  em_cli_forensic_entry_t e;
  int rc = em_cli_forensic_run(&o.base, &kind, &o, argc, argv, &e);
  if (rc >= 0) {
    return rc;
  }
  rc = o.diff || o.diff_at ? diff(&o, &e) : show(&o, &e);
  em_cli_forensic_entry_free(&e);
  return rc;
}
