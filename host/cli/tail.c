/*
 * tail.c - `edgemon-cli tail`: a live view of the boards on a broker.
 *
 * Subscribes to edgemon/v1/<device>/# (or every device, filtered by a glob), keeps each
 * device's birth in a dict.h registry to name the aliases of its data messages, and prints one
 * line per message: in human mode aligned columns (time, device, level, IPC, cache misses, RSS,
 * PSI, then each stage's p50/p99/max against its budget) with level changes as highlighted lines
 * of their own (and under one that carries the breach's verdict, its top causes:
 * flight_verdict.h), and a line per flight recording (flight_table.h) and per stack profile
 * (profile_table.h); in --json mode one object per
 * message (NDJSON). A data message whose session has no birth yet makes tail publish a rebirth
 * command to that device, once per session.
 *
 * Owns the broker session, the registry and one decode scratch buffer. Single-threaded: all
 * work happens in the message callback, inside em_broker_run().
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "flight_table.h"
#include "flight_verdict.h"
#include "live.h"
#include "profile_table.h"
#include "view.h"

#include <broker.h>
#include <dict.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_CAP (EM_PROTO_MAX_MESSAGE_BYTES * 8u)

/* A level change's verdict under its line: under the device column, its first causes and of
 * each its first figures, processes and functions. */
#define VERDICT_INDENT "             "
#define VERDICT_CAUSES 3u
#define VERDICT_ITEMS  3u

typedef struct {
  em_cli_live_t live; /* Broker session and --broker/--device/--count/--duration. --count
                         counts data and state messages. */
  bool json;
  em_dict_t *dict;
  void *scratch;
  char *json_buf;
  uint64_t shown;     /* Data and state messages printed. */
  uint64_t malformed; /* Payloads that do not decode. */
  uint64_t rebirths;  /* Rebirth requests sent. */
  int error;          /* Set when the callback hits a fatal error (out of memory). */
} tail_t;

static void usage(FILE *out) {
  fprintf(out,
          "usage: edgemon-cli tail [--broker URL] [--device ID|GLOB] [--json] [--count N]\n"
          "                        [--duration S] [--color auto|always|never]\n"
          "                        [--cafile FILE|--capath DIR] [--cert FILE --key FILE]\n"
          "                        [--insecure] [--credentials FILE]\n"
          "\n"
          "Shows the data and level changes of the devices on a broker, live.\n"
          "\n" EM_CLI_USAGE_BROKER
          "  --device ID|GLOB one device, or those whose id matches a shell glob (orin-*)\n"
          "  --json           one JSON object per message (NDJSON), values by metric name\n"
          "  --count N        stop after N data and state messages\n"
          "  --duration S     stop after S seconds (default: run until interrupted)\n"
          "  --color WHEN     colour the levels: auto (on a terminal, unless $NO_COLOR), always,\n"
          "                   never\n" EM_CLI_USAGE_CONN "\n" EM_CLI_USAGE_NUMBERS "\n"
          "Human mode: one line per device per data message:\n"
          "  TIME DEVICE LEVEL IPC MISS%% RSS_MiB PSI_CPU PSI_MEM  STAGE p50/p99/max ms n=COUNT\n"
          "and `budget p99<=40` after a stage that has a percentile budget (`!` when over it).\n"
          "A figure the device cannot measure is '-', never 0. A level change prints as its own\n"
          "line with the rule and reason (and, when the agent explained it, the stage's excess\n"
          "latency and its top causes on the lines under it), a change of model as\n"
          "'model now NAME VERSION (k=v)',\n"
          "a flight recording as a line naming its number, cause, level, rule and size, a stack\n"
          "profile likewise with its samples and stacks. A birth line names the model. Aliases are "
          "named from the device's retained birth;\n"
          "data from a session without a birth makes tail ask the device for a rebirth.\n"
          "\n"
          "Messages that do not decode are counted (summary on stderr) and, with --json,\n"
          "printed as {\"device\",\"topic\",\"error\",\"offset\"} objects.\n"
          "\n"
          "Exit: 0 when stopped by --count, --duration or a signal; 2 bad arguments; 3 broker\n"
          "unreachable or connection lost.\n");
}

/* Reads the named metric of a data message as a double; false when absent or unknown. */
static bool metric(const em_device_t *dev, const em_data_t *d, const char *name, double *out) {
  long alias = em_dict_alias(dev, name);
  if (alias < 0) {
    return false;
  }
  for (size_t i = 0; i < d->n_samples; i++) {
    if (d->samples[i].alias != (uint32_t)alias) {
      continue;
    }
    const em_value_t *v = &d->samples[i].value;
    switch (v->type) {
    case EM_VALUE_UINT:
      *out = (double)v->as.u;
      return true;
    case EM_VALUE_INT:
      *out = (double)v->as.i;
      return true;
    case EM_VALUE_FLOAT:
      *out = v->as.f;
      return true;
    default:
      return false;
    }
  }
  return false;
}

/* Writes a metric into a fixed-width column, '-' when absent. */
static void column(const em_device_t *dev, const em_data_t *d, const char *name, double scale,
                   int decimals, int width) {
  double v = 0;
  char cell[32];
  if (dev && metric(dev, d, name, &v)) {
    snprintf(cell, sizeof(cell), "%.*f", decimals, v * scale);
  } else {
    snprintf(cell, sizeof(cell), "-");
  }
  printf(" %*s", width, cell);
}

/* A rule's bound in ns, or -1 when it has none. */
static double bound_ns(const em_value_t *v) {
  double d = em_value_double(v);
  return isnan(d) ? -1 : d;
}

/* The quantile a percentile rule bounds, from its id ("infer.p99" -> p99), or p99. */
static const char *rule_quantile(const em_dict_budget_t *r) {
  const char *dot = strrchr(r->id, '.');
  return dot && dot[1] == 'p' ? dot + 1 : "p99";
}

static uint64_t stage_quantile(const em_stage_t *s, const char *q) {
  if (strcmp(q, "p50") == 0) {
    return s->p50_ns;
  }
  if (strcmp(q, "p90") == 0) {
    return s->p90_ns;
  }
  if (strcmp(q, "p999") == 0) {
    return s->p999_ns;
  }
  return s->p99_ns;
}

static void print_stage(const em_device_t *dev, const em_stage_t *s) {
  if (s->count == 0) {
    printf("  %s - n=0", s->name);
    return;
  }
  char p50[16], p99[16], max[16];
  em_view_ms((double)s->p50_ns, p50, sizeof(p50));
  em_view_ms((double)s->p99_ns, p99, sizeof(p99));
  em_view_ms((double)s->max_ns, max, sizeof(max));
  printf("  %s %s/%s/%s ms n=%llu", s->name, p50, p99, max, (unsigned long long)s->count);
  const em_dict_budget_t *r = dev ? em_dict_stage_budget(dev, s->name) : NULL;
  if (!r) {
    return;
  }
  double bound = bound_ns(&r->bound);
  if (bound < 0) {
    return;
  }
  char b[16];
  em_view_ms(bound, b, sizeof(b));
  bool percentile = strcmp(r->rule, "percentile") == 0;
  const char *q = percentile ? rule_quantile(r) : "max";
  double v = percentile ? (double)stage_quantile(s, q) : (double)s->max_ns;
  if (v > bound) {
    printf(" %sbudget %s>%s!%s", em_view_alert(), q, b, em_view_off());
  } else {
    printf(" budget %s<=%s", q, b);
  }
}

/* Under a birth line: the metrics the device cannot measure, grouped by the reason it gives. */
static void print_absent(const em_birth_t *b) {
  for (size_t i = 0; i < b->n_metrics; i++) {
    const char *why = b->metrics[i].absent_reason;
    bool first = true;
    for (size_t j = 0; j < i && why; j++) {
      const char *other = b->metrics[j].absent_reason;
      first = first && !(other && strcmp(other, why) == 0);
    }
    if (!why || !first) {
      continue;
    }
    printf("%-31s absent:", "");
    for (size_t j = i; j < b->n_metrics; j++) {
      const char *other = b->metrics[j].absent_reason;
      if (other && strcmp(other, why) == 0) {
        printf(" %s", b->metrics[j].name);
      }
    }
    printf(" (%s)\n", why);
  }
}

static void print_header(void) {
  printf("%s%-12s %-18s %-8s %5s %6s %8s %7s %7s  %s%s\n", em_view_bold(), "TIME", "DEVICE",
         "LEVEL", "IPC", "MISS%", "RSS_MiB", "PSI_CPU", "PSI_MEM", "STAGES p50/p99/max",
         em_view_off());
}

static void print_data(tail_t *t, const char *id, const em_device_t *dev, const em_data_t *d) {
  char clock[16], name[20];
  em_view_clock(d->head.time_ns, clock, sizeof(clock));
  em_view_fit(id, 18, name, sizeof(name));
  em_level_t level = d->level != EM_LEVEL_NONE ? d->level : (dev ? dev->level : EM_LEVEL_NONE);
  const char *lname = level == EM_LEVEL_NONE ? "-" : em_level_name(level);
  printf("%-12s %-18s %s%-8s%s", clock, name, em_view_level_on(level), lname, em_view_off());
  bool named = dev && em_dict_knows_session(dev, d->head.session);
  const em_device_t *names = named ? dev : NULL;
  column(names, d, "pmu.ipc", 1.0, 2, 5);
  column(names, d, "pmu.cache_miss_ratio", 100.0, 1, 6);
  column(names, d, "mem.rss", 1.0 / (1024.0 * 1024.0), 1, 8);
  column(names, d, "psi.cpu.some.avg10", 1.0, 1, 7);
  column(names, d, "psi.memory.some.avg10", 1.0, 1, 7);
  printf(" ");
  for (size_t i = 0; i < d->n_stages; i++) {
    print_stage(names, &d->stages[i]);
  }
  if (d->historical) {
    printf("  (replayed)");
  }
  if (!named) {
    printf("  (no birth yet)");
  }
  printf("\n");
  (void)t;
}

/* A state's measured value or bound in the unit its rule type uses, per the birth. */
static void rule_figure(const em_device_t *dev, const char *rule_id, const em_value_t *v, char *buf,
                        size_t cap) {
  const char *type = "";
  for (size_t i = 0; dev && rule_id && i < dev->n_budgets; i++) {
    if (strcmp(dev->budgets[i].id, rule_id) == 0) {
      type = dev->budgets[i].rule;
    }
  }
  em_view_rule_figure(type, bound_ns(v), buf, cap);
}

static void print_state(const char *id, const em_device_t *dev, const em_state_t *s) {
  char clock[16];
  em_view_clock(s->head.time_ns, clock, sizeof(clock));
  printf("%s%-12s %-18s %s%s%s%s", em_view_bold(), clock, id, em_view_level_on(s->level),
         em_level_name(s->level), em_view_off(), em_view_bold());
  if (s->model_change) {
    char model[EM_IDENTITY_TEXT_MAX];
    em_identity_text(&dev->model, model, sizeof(model));
    printf(" model now %s (level unchanged)%s%s\n", model, s->historical ? "  (replayed)" : "",
           em_view_off());
    return;
  }
  if (s->prev_level == s->level) {
    printf(" (level at agent start)");
  } else {
    printf(" <- %s", em_level_name(s->prev_level));
  }
  if (s->rule) {
    printf(" rule %s", s->rule);
  }
  if (s->value.type != EM_VALUE_ABSENT && s->bound.type != EM_VALUE_ABSENT) {
    char value[32], bound[32];
    rule_figure(dev, s->rule, &s->value, value, sizeof(value));
    rule_figure(dev, s->rule, &s->bound, bound, sizeof(bound));
    printf(" (%s%s%s, bound %s)", s->stage ? s->stage : "", s->stage ? " " : "", value, bound);
  }
  if (s->reason) {
    printf(": %s", s->reason);
  }
  if (s->historical) {
    printf("  (replayed)");
  }
  printf("%s\n", em_view_off());
  if (s->verdict) { /* Why, under the change: the top causes with their first figures. */
    em_flight_verdict_print(stdout, s->verdict, VERDICT_INDENT, VERDICT_CAUSES, VERDICT_ITEMS);
  }
}

static void print_json(tail_t *t, const char *id, const char *topic, em_device_t *dev,
                       const em_msg_t *msg) {
  size_t len = 0;
  bool named =
      msg->kind == EM_MSG_DATA && dev && em_dict_knows_session(dev, msg->u.data.head.session);
  int rc = em_proto_to_json_named(msg, named ? em_dict_alias_name : NULL, named ? dev : NULL,
                                  t->json_buf, JSON_CAP, &len);
  if (rc != 0) {
    return; /* JSON_CAP covers the largest message; cannot happen. */
  }
  printf("{\"device\":");
  em_view_json_str(stdout, id);
  printf(",\"topic\":");
  em_view_json_str(stdout, topic);
  printf(",\"message\":%s}\n", t->json_buf);
}

static void ask_rebirth(tail_t *t, const char *id, em_device_t *dev, uint32_t session) {
  if (!dev || (dev->rebirth_asked && dev->rebirth_session == session)) {
    return;
  }
  dev->rebirth_asked = true;
  dev->rebirth_session = session;
  em_msg_t cmd = {.kind = EM_MSG_CMD};
  cmd.u.cmd.head.time_ns = em_cli_real_ns();
  cmd.u.cmd.command = EM_CMD_REBIRTH;
  uint8_t buf[64];
  size_t len = 0;
  char topic[128];
  snprintf(topic, sizeof(topic), "edgemon/v1/%s/cmd/rebirth", id);
  if (em_proto_encode(&cmd, buf, sizeof(buf), &len) == 0 &&
      em_broker_publish(t->live.broker, topic, buf, len, 1, false) == 0) {
    t->rebirths++;
    if (!t->json) {
      fprintf(stderr, "edgemon-cli tail: %s: data without a birth; asked for a rebirth\n", id);
    }
  }
}

static bool tail_done(const tail_t *t);

static void on_message(void *ctx, const char *topic, const uint8_t *payload, size_t len,
                       bool retained) {
  (void)retained;
  tail_t *t = ctx;
  char id[EM_TOPIC_MAX_DEVICE + 1];
  const char *kind = NULL;
  if (em_topic_parse(topic, id, sizeof(id), &kind) != 0 || strncmp(kind, "cmd/", 4) == 0) {
    return; /* Not telemetry, or a command (ours included). */
  }
  if (!em_cli_live_wants(&t->live, id) || tail_done(t)) {
    return;
  }
  em_msg_t msg;
  size_t off = 0;
  bool flight = strcmp(kind, "flight") == 0;
  bool profile = strcmp(kind, "profile") == 0;
  int rc = flight    ? em_flight_line(stdout, id, payload, len, t->json, &off)
           : profile ? em_profile_line(stdout, id, payload, len, t->json, &off)
                     : em_proto_decode(payload, len, &msg, t->scratch, EM_PROTO_SCRATCH_MAX, &off);
  if (rc == 0 && (flight || profile)) {
    fflush(stdout);
    return; /* One line per recording or profile, printed. */
  }
  if (rc != 0) {
    t->malformed++;
    if (t->json) {
      printf("{\"device\":");
      em_view_json_str(stdout, id);
      printf(",\"topic\":");
      em_view_json_str(stdout, topic);
      printf(",\"error\":\"%s\",\"offset\":%zu}\n", em_proto_strerror(rc), off);
    } else {
      char clock[16];
      em_view_clock(em_cli_real_ns(), clock, sizeof(clock));
      printf("%-12s %-18s %s! %s message does not decode: %s at byte %zu%s\n", clock, id,
             em_view_alert(), kind, em_proto_strerror(rc), off, em_view_off());
    }
    fflush(stdout);
    return;
  }
  em_device_t *dev = em_dict_device(t->dict, id, true);
  if (!dev) {
    t->error = -ENOMEM;
    return;
  }
  if (em_dict_update(dev, &msg) != 0) {
    t->error = -ENOMEM;
    return;
  }
  if (msg.kind == EM_MSG_DATA && !em_dict_knows_session(dev, msg.u.data.head.session)) {
    ask_rebirth(t, id, dev, msg.u.data.head.session);
  }
  if (t->json) {
    print_json(t, id, topic, dev, &msg);
  } else if (msg.kind == EM_MSG_DATA) {
    print_data(t, id, dev, &msg.u.data);
  } else if (msg.kind == EM_MSG_STATE) {
    print_state(id, dev, &msg.u.state);
  } else if (msg.kind == EM_MSG_STATUS) {
    char clock[16];
    em_view_clock(msg.u.status.head.time_ns, clock, sizeof(clock));
    printf("%-12s %-18s %s\n", clock, id, msg.u.status.online ? "online" : "OFFLINE");
  } else if (msg.kind == EM_MSG_BIRTH) {
    char clock[16];
    em_view_clock(msg.u.birth.head.time_ns, clock, sizeof(clock));
    char model[EM_IDENTITY_TEXT_MAX];
    em_identity_text(&dev->model, model, sizeof(model));
    printf("%-12s %-18s birth: agent %s, board %s, %zu metrics, %zu budgets, model %s\n", clock, id,
           msg.u.birth.agent_version, msg.u.birth.board, msg.u.birth.n_metrics,
           msg.u.birth.n_budgets, model);
    print_absent(&msg.u.birth);
  }
  if (msg.kind == EM_MSG_DATA || msg.kind == EM_MSG_STATE) {
    t->shown++;
  }
  fflush(stdout);
}

static bool tail_done(const tail_t *t) {
  return (t->live.count && t->shown >= t->live.count) || t->error != 0;
}

int em_cli_tail(int argc, char **argv) {
  static const struct option opts[] = {
      EM_CLI_OPT_BROKER,
      EM_CLI_OPT_DEVICE,
      EM_CLI_OPT_COUNT,
      EM_CLI_OPT_DURATION,
      {"json", no_argument, NULL, 'j'},
      EM_CLI_OPT_COLOR,
      EM_CLI_OPTS_CONN,
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  tail_t t = {.live = {.cmd = "tail"}};
  optind = 1;
  opterr = 0;
  for (;;) {
    int c = -1;
    int rc = em_cli_live_next(&t.live, argc, argv, opts, &c);
    if (rc != EM_CLI_OK) {
      return rc;
    }
    if (c == -1) {
      break;
    }
    if (c == 'j') {
      t.json = true;
    } else if (c == 'h') {
      usage(stdout);
      return EM_CLI_OK;
    } else {
      return em_cli_bad_option("tail", argv);
    }
  }
  int exit_code = em_cli_live_check(&t.live, argc, argv);
  if (exit_code != EM_CLI_OK) {
    return exit_code;
  }
  t.scratch = malloc(EM_PROTO_SCRATCH_MAX);
  t.json_buf = malloc(JSON_CAP);
  if (!t.scratch || !t.json_buf || em_dict_new(&t.dict) != 0) {
    em_cli_error("tail", "out of memory");
    exit_code = EM_CLI_FAIL;
    goto out;
  }
  exit_code = em_cli_live_connect(&t.live, on_message, &t);
  if (exit_code != EM_CLI_OK) {
    goto out;
  }
  if (!t.json) {
    print_header();
  }
  exit_code = em_cli_live_subscribe(&t.live, "#");
  while (exit_code == EM_CLI_OK && !tail_done(&t) && !em_cli_live_over(&t.live)) {
    exit_code = em_cli_live_step(&t.live, 200);
  }
  if (t.error != 0) {
    em_cli_error("tail", "%s", strerror(-t.error));
    exit_code = EM_CLI_FAIL;
  }
  if (t.malformed > 0) {
    em_cli_error("tail", "%llu message(s) did not decode and were skipped",
                 (unsigned long long)t.malformed);
  }
out:
  fflush(stdout);
  em_cli_live_close(&t.live); /* Lets a rebirth request leave. */
  em_dict_free(t.dict);
  free(t.json_buf);
  free(t.scratch);
  return exit_code;
}
