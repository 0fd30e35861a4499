/*
 * status.c - `edgemon-cli status`: one row per device from what the broker retains.
 *
 * Subscribes to every device's birth, state, status and data, takes the retained messages
 * (em_broker_sync() says when all of them have arrived), then listens to live data for --wait
 * seconds so "last seen" and the level are current for devices that are publishing. Prints a
 * table sorted by device id, or one JSON object with a "devices" array.
 *
 * Owns the broker session, a dict.h registry and one decode scratch buffer.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "live.h"
#include "view.h"

#include <broker.h>
#include <dict.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  em_cli_live_t live; /* Broker session, --broker and --device. */
  em_dict_t *dict;
  void *scratch;
  uint64_t malformed;
  int error;
} status_t;

static void usage(FILE *out) {
  fprintf(
      out,
      "usage: edgemon-cli status [--broker URL] [--device ID|GLOB] [--json] [--wait S]\n"
      "                          [--color auto|always|never]\n"
      "                          [--cafile FILE|--capath DIR] [--cert FILE --key FILE]\n"
      "                          [--insecure] [--credentials FILE]\n"
      "\n"
      "One row per device known to the broker, from its retained status, birth and state:\n"
      "  DEVICE ONLINE LEVEL MODEL AGENT BOARD LAST_SEEN REASON\n"
      "(MODEL: the name and version the inference process named, from the latest birth,\n"
      "state or data message; its labels in --json.)\n"
      "then live data for --wait seconds (default 1) refreshes LAST_SEEN and LEVEL of the\n"
      "devices that are publishing. A field the broker holds nothing for is '-'.\n"
      "\n" EM_CLI_USAGE_BROKER "  --device ID|GLOB only devices whose id matches (shell glob)\n"
      "  --json           {\"devices\":[{\"device\",\"online\",\"level\",\"reason\","
      "\"model\",\n"
      "                   \"agent_version\",\"board\",\"session\",\"last_seen_ns\",\n"
      "                   \"last_seen_age_s\"}]}, null where unknown; model is\n"
      "                   {\"name\",\"version\",\"labels\":{...}}\n"
      "  --wait S         seconds of live data to listen to after the retained messages\n"
      "                   (0: retained messages only; at most 3600 s)\n"
      "  --color WHEN     auto (on a terminal, unless $NO_COLOR), always, never\n" EM_CLI_USAGE_CONN
      "\n" EM_CLI_USAGE_NUMBERS "\n"
      "Exit: 0 (also with no devices); 2 bad arguments; 3 broker unreachable, TLS handshake\n"
      "failed, or the broker refused the login.\n");
}

static void on_message(void *ctx, const char *topic, const uint8_t *payload, size_t len,
                       bool retained) {
  (void)retained;
  status_t *s = ctx;
  char id[EM_TOPIC_MAX_DEVICE + 1];
  const char *kind = NULL;
  if (em_topic_parse(topic, id, sizeof(id), &kind) != 0 || strncmp(kind, "cmd/", 4) == 0) {
    return;
  }
  if (!em_cli_live_wants(&s->live, id)) {
    return;
  }
  em_msg_t msg;
  if (em_proto_decode(payload, len, &msg, s->scratch, EM_PROTO_SCRATCH_MAX, NULL) != 0) {
    s->malformed++;
    return;
  }
  em_device_t *dev = em_dict_device(s->dict, id, true);
  if (!dev || em_dict_update(dev, &msg) != 0) {
    s->error = -ENOMEM;
  }
}

static void print_table(status_t *s, uint64_t now) {
  printf("%s%-24s %-7s %-9s %-24s %-16s %-18s %-9s %s%s\n", em_view_bold(), "DEVICE", "ONLINE",
         "LEVEL", "MODEL", "AGENT", "BOARD", "LAST_SEEN", "REASON", em_view_off());
  for (size_t i = 0; i < em_dict_count(s->dict); i++) {
    const em_device_t *d = em_dict_at(s->dict, i);
    char id[32], model[32], agent[20], board[20], age[16];
    char named[EM_PROTO_MAX_NAME_BYTES + EM_PROTO_MAX_MODEL_VERSION + 2];
    snprintf(named, sizeof(named), "%s%s%s", d->model.named ? d->model.name : "-",
             d->model.named ? " " : "", d->model.named ? d->model.version : "");
    em_view_fit(d->id, 24, id, sizeof(id));
    em_view_fit(named, 24, model, sizeof(model));
    em_view_fit(d->have_birth ? d->agent_version : "-", 16, agent, sizeof(agent));
    em_view_fit(d->have_birth && d->board[0] ? d->board : "-", 18, board, sizeof(board));
    em_view_age(now, d->last_seen_ns, age, sizeof(age));
    const char *online = d->have_status ? (d->online ? "yes" : "no") : "-";
    const char *level = d->level == EM_LEVEL_NONE ? "-" : em_level_name(d->level);
    printf("%-24s %-7s %s%-9s%s %-24s %-16s %-18s %-9s %s\n", id, online,
           em_view_level_on(d->level), level, em_view_off(), model, agent, board, age,
           d->have_state && d->reason[0] && d->level > EM_LEVEL_NOMINAL ? d->reason : "-");
  }
}

static void json_opt_str(const char *key, bool have, const char *v) {
  printf("\"%s\":", key);
  if (have) {
    em_view_json_str(stdout, v);
  } else {
    printf("null");
  }
}

static void print_json(status_t *s, uint64_t now) {
  printf("{\"devices\":[");
  for (size_t i = 0; i < em_dict_count(s->dict); i++) {
    const em_device_t *d = em_dict_at(s->dict, i);
    printf("%s{\"device\":", i ? "," : "");
    em_view_json_str(stdout, d->id);
    printf(",\"online\":%s,", d->have_status ? (d->online ? "true" : "false") : "null");
    json_opt_str("level", d->level != EM_LEVEL_NONE, em_level_name(d->level));
    printf(",");
    json_opt_str("reason", d->have_state && d->reason[0], d->reason);
    em_label_t labels[EM_PROTO_MAX_MODEL_LABELS];
    em_model_t m = em_identity_view(&d->model, labels);
    char model[EM_IDENTITY_JSON_MAX];
    printf(",\"model\":%s,", em_identity_json(&m, model, sizeof(model)) ? model : "null");
    json_opt_str("agent_version", d->have_birth, d->agent_version);
    printf(",");
    json_opt_str("board", d->have_birth, d->board);
    if (d->have_birth) {
      printf(",\"session\":%lu", (unsigned long)d->session);
    } else {
      printf(",\"session\":null");
    }
    if (d->last_seen_ns) {
      double age = now > d->last_seen_ns ? (double)(now - d->last_seen_ns) / 1e9 : 0.0;
      printf(",\"last_seen_ns\":%llu,\"last_seen_age_s\":%.3f}",
             (unsigned long long)d->last_seen_ns, age);
    } else {
      printf(",\"last_seen_ns\":null,\"last_seen_age_s\":null}");
    }
  }
  printf("]}\n");
}

int em_cli_status(int argc, char **argv) {
  static const struct option opts[] = {
      EM_CLI_OPT_BROKER,
      EM_CLI_OPT_DEVICE,
      {"json", no_argument, NULL, 'j'},
      {"wait", required_argument, NULL, 'w'},
      EM_CLI_OPT_COLOR,
      EM_CLI_OPTS_CONN,
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  status_t s = {.live = {.cmd = "status"}};
  bool json = false;
  double wait = 1.0;
  optind = 1;
  opterr = 0;
  for (;;) {
    int c = -1;
    int rc = em_cli_live_next(&s.live, argc, argv, opts, &c);
    if (rc != EM_CLI_OK) {
      return rc;
    }
    if (c == -1) {
      break;
    }
    if (c == 'j') {
      json = true;
    } else if (c == 'w') {
      static const em_cli_number_t wait_s = {.min = 0, .max = 3600, .duration = true};
      if (em_cli_number_option("status", "--wait", optarg, &wait_s, &wait) != EM_CLI_OK) {
        return EM_CLI_USAGE;
      }
    } else if (c == 'h') {
      usage(stdout);
      return EM_CLI_OK;
    } else {
      return em_cli_bad_option("status", argv);
    }
  }
  int exit_code = em_cli_live_check(&s.live, argc, argv);
  if (exit_code != EM_CLI_OK) {
    return exit_code;
  }
  s.scratch = malloc(EM_PROTO_SCRATCH_MAX);
  if (!s.scratch || em_dict_new(&s.dict) != 0) {
    em_cli_error("status", "out of memory");
    exit_code = EM_CLI_FAIL;
    goto out;
  }
  exit_code = em_cli_live_connect(&s.live, on_message, &s);
  static const char *const kinds[] = {"status", "birth", "state", "data"};
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]) && exit_code == EM_CLI_OK; i++) {
    exit_code = em_cli_live_subscribe(&s.live, kinds[i]);
  }
  if (exit_code != EM_CLI_OK) {
    goto out;
  }
  int rc = em_broker_sync(s.live.broker, 10.0);
  if (rc != 0) {
    em_cli_error("status", "the broker at %s did not deliver the retained messages: %s", s.live.url,
                 strerror(-rc));
    exit_code = EM_CLI_BROKER;
    goto out;
  }
  uint64_t deadline = em_cli_mono_ns() + (uint64_t)(wait * 1e9);
  while (exit_code == EM_CLI_OK && !em_cli_stop && s.error == 0 && em_cli_mono_ns() < deadline) {
    exit_code = em_cli_live_step(&s.live, (deadline - em_cli_mono_ns()) / 1000000u + 1);
  }
  if (exit_code != EM_CLI_OK) {
    goto out;
  }
  if (s.error != 0) {
    em_cli_error("status", "%s", strerror(-s.error));
    exit_code = EM_CLI_FAIL;
    goto out;
  }
  uint64_t now = em_cli_real_ns();
  if (json) {
    print_json(&s, now);
  } else {
    print_table(&s, now);
  }
  if (s.malformed > 0) {
    em_cli_error("status", "%llu message(s) did not decode and were skipped",
                 (unsigned long long)s.malformed);
  }
out:
  fflush(stdout);
  em_cli_live_close(&s.live);
  em_dict_free(s.dict);
  free(s.scratch);
  return exit_code;
}
