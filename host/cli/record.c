/*
 * record.c - `edgemon-cli record` and `edgemon-cli replay`: save what the broker delivers to a
 * recording file (host/RECORDING.md), and publish a recording again.
 *
 * record subscribes to edgemon/v1/<device>/# (every device, filtered by a glob, or one plain
 * id) and appends each message with its receive time and retained flag, bytes untouched, until
 * --duration, --count data messages, or SIGINT/SIGTERM. It flushes the file every second, so a
 * recorder that is killed leaves a valid recording whose tail may be cut (readers report that
 * as a truncated last record). replay publishes every record to its topic with QoS 1, spaced
 * by the recorded gaps divided by --rate and cut to --max-gap (em_rec_pace_next(): any time
 * stamps, backwards or jumping by centuries, give a bounded wait); birth, state and status go
 * out retained, as the agent publishes them.
 *
 * Owns one broker session, one recording writer or reader and, for record, the table of
 * device ids seen (a fixed array, allocated once). Single-threaded: record writes from the
 * message callback inside em_broker_run(); replay publishes from its own loop.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "live.h"

#include <broker.h>
#include <errno.h>
#include <getopt.h>
#include <recording.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Distinct device ids record counts for its summary; beyond this it says "at least". */
#define RECORD_MAX_DEVICES 1024u
/* How often record hands buffered records to the kernel, in ns. */
#define RECORD_FLUSH_NS 1000000000u
/* Longest wait for the broker's acknowledgements before replay gives up, in seconds. */
#define REPLAY_DRAIN_S 30.0
/* Default --max-gap: the longest replay waits between two messages, in seconds. */
#define REPLAY_MAX_GAP_S 60.0

/* ---- record ------------------------------------------------------------------------------- */

typedef struct {
  em_cli_live_t live;      /* Broker session and options; --count counts data messages. */
  em_rec_writer_t *writer; /* The recording. */
  uint64_t messages;       /* Records written. */
  uint64_t data;           /* Of which data messages. */
  uint64_t bytes;          /* Bytes in the file, header included. */
  uint64_t skipped;        /* Messages too large for the format, not recorded. */
  char (*devices)[EM_TOPIC_MAX_DEVICE + 1]; /* Distinct device ids seen (RECORD_MAX_DEVICES). */
  size_t n_devices;
  bool devices_full; /* More devices than the table holds. */
  bool done;         /* --count reached: later messages are ignored. */
  int error;         /* First write error (negative errno), 0 while none. */
} record_t;

static void record_usage(FILE *out) {
  fprintf(out,
          "usage: edgemon-cli record --out FILE [--broker URL] [--device ID|GLOB]\n"
          "                          [--duration S] [--count N]\n"
          "                          [--cafile FILE|--capath DIR] [--cert FILE --key FILE]\n"
          "                          [--insecure] [--credentials FILE]\n"
          "\n"
          "Saves every message the broker delivers under edgemon/v1/ to a recording file:\n"
          "topic, receive time (CLOCK_REALTIME), retained flag and payload, bytes untouched.\n"
          "The format is documented in host/RECORDING.md.\n"
          "\n"
          "  --out FILE       the recording to create (replaced if it exists; - for "
          "stdout)\n" EM_CLI_USAGE_BROKER
          "  --device ID|GLOB one device, or those whose id matches a shell glob (orin-*)\n"
          "  --duration S     stop after S seconds\n"
          "  --count N        stop after N data messages\n" EM_CLI_USAGE_CONN
          "\n" EM_CLI_USAGE_NUMBERS "\n"
          "Without --duration or --count it records until SIGINT or SIGTERM. The file is\n"
          "flushed every second, so a recorder that is killed leaves a usable recording.\n"
          "A summary (messages, bytes, devices) goes to stderr.\n"
          "\n"
          "Exit: 0 done; 2 bad arguments; 3 broker unreachable or connection lost; 4 the file\n"
          "cannot be created or written.\n");
}

/* Remembers a device id for the summary. */
static void record_note_device(record_t *r, const char *id) {
  for (size_t i = 0; i < r->n_devices; i++) {
    if (strcmp(r->devices[i], id) == 0) {
      return;
    }
  }
  if (r->n_devices == RECORD_MAX_DEVICES) {
    r->devices_full = true;
    return;
  }
  snprintf(r->devices[r->n_devices], sizeof(r->devices[0]), "%s", id);
  r->n_devices++;
}

static void record_on_message(void *ctx, const char *topic, const uint8_t *payload, size_t len,
                              bool retained) {
  record_t *r = ctx;
  if (r->done || r->error) {
    return;
  }
  char device[EM_TOPIC_MAX_DEVICE + 1];
  const char *kind = NULL;
  bool edgemon = em_topic_parse(topic, device, sizeof(device), &kind) == 0;
  if (r->live.device && (!edgemon || !em_cli_live_wants(&r->live, device))) {
    return;
  }
  em_rec_entry_t e = {
      .recv_time_ns = em_cli_real_ns(),
      .retained = retained,
      .topic = topic,
      .topic_len = strlen(topic),
      .payload = payload,
      .payload_len = len,
  };
  int rc = em_rec_write(r->writer, &e);
  if (rc == EM_REC_ELIMIT) {
    r->skipped++;
    return;
  }
  if (rc != 0) {
    r->error = rc;
    return;
  }
  r->messages++;
  r->bytes += 20u + e.topic_len + e.payload_len;
  if (edgemon) {
    record_note_device(r, device);
    if (strcmp(kind, "data") == 0) {
      r->data++;
      if (r->live.count && r->data >= r->live.count) {
        r->done = true;
      }
    }
  }
}

int em_cli_record(int argc, char **argv) {
  static const struct option opts[] = {
      {"out", required_argument, NULL, 'o'},
      EM_CLI_OPT_BROKER,
      EM_CLI_OPT_DEVICE,
      EM_CLI_OPT_COUNT,
      EM_CLI_OPT_DURATION,
      EM_CLI_OPTS_CONN,
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  record_t r = {.live = {.cmd = "record"}};
  const char *out_path = NULL;
  optind = 1;
  opterr = 0;
  for (;;) {
    int c = -1;
    int rc = em_cli_live_next(&r.live, argc, argv, opts, &c);
    if (rc != EM_CLI_OK) {
      return rc;
    }
    if (c == -1) {
      break;
    }
    if (c == 'o') {
      out_path = optarg;
    } else if (c == 'h') {
      record_usage(stdout);
      return EM_CLI_OK;
    } else {
      return em_cli_bad_option("record", argv);
    }
  }
  if (optind < argc) {
    return em_cli_usage_error("record", "unexpected argument '%s'", argv[optind]);
  }
  if (!out_path || !*out_path) {
    return em_cli_usage_error("record", "--out FILE is required");
  }
  int exit_code = em_cli_live_check(&r.live, argc, argv);
  if (exit_code != EM_CLI_OK) {
    return exit_code;
  }
  r.devices = calloc(RECORD_MAX_DEVICES, sizeof(r.devices[0]));
  if (!r.devices) {
    em_cli_error("record", "out of memory");
    return EM_CLI_FAIL;
  }
  exit_code = em_cli_live_connect(&r.live, record_on_message, &r);
  if (exit_code != EM_CLI_OK) {
    goto out;
  }
  int rc = em_rec_writer_new(&r.writer, out_path);
  if (rc != 0) {
    em_cli_error("record", "cannot create %s: %s", out_path, em_rec_strerror(rc));
    exit_code = EM_CLI_INPUT;
    goto out;
  }
  r.bytes = EM_REC_HEADER_SIZE;
  exit_code = em_cli_live_subscribe(&r.live, "#");
  uint64_t start = em_cli_mono_ns();
  uint64_t next_flush = start + RECORD_FLUSH_NS;
  while (exit_code == EM_CLI_OK && !r.done && r.error == 0 && !em_cli_live_over(&r.live)) {
    uint64_t now = em_cli_mono_ns();
    if (now >= next_flush) {
      r.error = em_rec_flush(r.writer);
      next_flush = now + RECORD_FLUSH_NS;
      continue;
    }
    exit_code = em_cli_live_step(&r.live, (next_flush - now) / 1000000u + 1);
  }
  double secs = (double)(em_cli_mono_ns() - start) / 1e9;
  rc = em_rec_writer_free(r.writer);
  r.writer = NULL;
  if (r.error == 0) {
    r.error = rc;
  }
  if (r.error != 0) {
    em_cli_error("record", "cannot write %s: %s", out_path, em_rec_strerror(r.error));
    exit_code = EM_CLI_INPUT;
  }
  if (r.skipped > 0) {
    em_cli_error("record", "%llu message(s) too large for a recording were skipped",
                 (unsigned long long)r.skipped);
  }
  em_cli_error(
      "record", "recorded %llu message(s) (%llu data), %llu bytes, %s%zu device(s) in %.1f s to %s",
      (unsigned long long)r.messages, (unsigned long long)r.data, (unsigned long long)r.bytes,
      r.devices_full ? "at least " : "", r.n_devices, secs, out_path);
out:
  em_rec_writer_free(r.writer);
  em_cli_live_close(&r.live);
  free(r.devices);
  return exit_code;
}

/* ---- replay ------------------------------------------------------------------------------- */

static void replay_usage(FILE *out) {
  fprintf(out,
          "usage: edgemon-cli replay FILE [--broker URL] [--rate X] [--max-gap S] [--loop]\n"
          "                          [--cafile FILE|--capath DIR] [--cert FILE --key FILE]\n"
          "                          [--insecure] [--credentials FILE]\n"
          "\n"
          "Publishes every message of a recording (see host/RECORDING.md) again to its topic,\n"
          "with QoS 1. Birth, state and status messages are published retained, as the agent\n"
          "publishes them; data and everything else are not.\n"
          "\n"
          "  --broker URL  mqtt://HOST[:PORT], or mqtts://HOST[:PORT] for TLS (port 8883)\n"
          "                (default $EDGEMON_BROKER, else " EM_BROKER_DEFAULT_URL ")\n"
          "  --rate X      pace: the recorded gaps between messages divided by X (default 1,\n"
          "                the original pace; 2 twice as fast; 0 as fast as possible)\n"
          "  --max-gap S   the longest wait between two messages (default 60 s): a longer\n"
          "                gap (a silent device, a clock step, a corrupt time stamp) is cut\n"
          "                to S, and a time stamp before the one before it is published at\n"
          "                once\n"
          "  --loop        start again from the beginning at the end, until interrupted\n"
          "TLS and login (as for record):\n" EM_CLI_USAGE_CONN "\n" EM_CLI_USAGE_NUMBERS "\n"
          "A recording that is truncated or corrupt is published up to the damaged record,\n"
          "then replay names the file and the record's byte offset. A summary goes to stderr.\n"
          "\n"
          "Exit: 0 done; 2 bad arguments; 3 broker unreachable or connection lost; 4 the file\n"
          "is missing, not a recording, truncated or corrupt.\n");
}

/* True for the topics the agent publishes retained: birth, state and status. */
static bool retained_kind(const char *topic) {
  char device[EM_TOPIC_MAX_DEVICE + 1];
  const char *kind = NULL;
  if (em_topic_parse(topic, device, sizeof(device), &kind) != 0) {
    return false;
  }
  return strcmp(kind, "birth") == 0 || strcmp(kind, "state") == 0 || strcmp(kind, "status") == 0;
}

typedef struct {
  const char *path;
  double rate;      /* 0: no waiting. */
  double max_gap_s; /* --max-gap. */
  em_broker_t *broker;
  uint64_t published; /* Messages published. */
  uint64_t bytes;     /* Payload bytes published. */
  uint64_t shortened; /* Gaps cut to --max-gap. */
} replay_t;

/*
 * Waits until mono time `due` (ns), keeping the session alive. Returns 0, 1 when interrupted,
 * or -ECONNRESET.
 */
static int replay_wait(replay_t *p, uint64_t due) {
  for (;;) {
    if (em_cli_stop) {
      return 1;
    }
    uint64_t now = em_cli_mono_ns();
    if (now >= due) {
      return 0;
    }
    uint64_t left_ms = (due - now) / 1000000u;
    int rc = em_broker_run(p->broker, left_ms > 100 ? 100 : (int)left_ms);
    if (rc != 0) {
      return rc;
    }
  }
}

/*
 * Publishes one pass over the file from `reader` (borrowed, positioned after the header).
 * Returns 0 at its clean end, 1 when interrupted, or an exit code (> 1) after printing why.
 */
static int replay_pass(replay_t *p, em_rec_reader_t *reader, uint64_t *records) {
  int rc;
  int result = 0;
  uint64_t start = em_cli_mono_ns();
  em_rec_pace_t pace;
  em_rec_pace_init(&pace, p->rate, (uint64_t)(p->max_gap_s * 1e9));
  *records = 0;
  for (;;) {
    em_rec_entry_t e;
    rc = em_rec_read(reader, &e);
    if (rc == 0) {
      break;
    }
    if (rc < 0) {
      em_cli_error("replay", "%s: %s at byte offset %llu", p->path, em_rec_strerror(rc),
                   (unsigned long long)em_rec_offset(reader));
      result = EM_CLI_INPUT;
      break;
    }
    uint64_t offset_ns = em_rec_pace_next(&pace, e.recv_time_ns);
    if (pace.clamped && p->shortened++ == 0) {
      em_cli_error("replay",
                   "%s: the record at byte offset %llu comes %.3f s after the one before it; "
                   "waiting %g s (--max-gap) instead",
                   p->path, (unsigned long long)em_rec_offset(reader), (double)pace.gap_ns / 1e9,
                   p->max_gap_s);
    }
    if (p->rate > 0) {
      rc = replay_wait(p, offset_ns > UINT64_MAX - start ? UINT64_MAX : start + offset_ns);
      if (rc != 0) {
        result = rc == 1 ? 1 : EM_CLI_BROKER;
        break;
      }
    } else if (em_cli_stop) {
      result = 1;
      break;
    }
    rc = em_broker_publish(p->broker, e.topic, e.payload, e.payload_len, 1, retained_kind(e.topic));
    if (rc == -EINVAL) {
      em_cli_error("replay", "%s: the record at byte offset %llu has a topic MQTT refuses: %s",
                   p->path, (unsigned long long)em_rec_offset(reader), e.topic);
      result = EM_CLI_INPUT;
      break;
    }
    if (rc == 0 && p->rate == 0) {
      rc = em_broker_run(p->broker, 0); /* Let the network keep up. */
    }
    if (rc != 0) {
      result = EM_CLI_BROKER;
      break;
    }
    (*records)++;
    p->published++;
    p->bytes += e.payload_len;
  }
  if (result == EM_CLI_BROKER) {
    em_cli_error("replay", "lost the connection to the broker");
  }
  return result;
}

int em_cli_replay(int argc, char **argv) {
  static const struct option opts[] = {
      {"broker", required_argument, NULL, 'b'},
      {"rate", required_argument, NULL, 'r'},
      {"max-gap", required_argument, NULL, 'g'},
      {"loop", no_argument, NULL, 'l'},
      EM_CLI_OPTS_CONN,
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  static const em_cli_number_t rate = {.min = 0, .max = EM_CLI_MAX_SECONDS};
  static const em_cli_number_t max_gap = {.min = 0, .max = EM_CLI_MAX_SECONDS, .duration = true};
  replay_t p = {.rate = 1.0, .max_gap_s = REPLAY_MAX_GAP_S};
  const char *url = NULL;
  em_cli_conn_t conn = {0};
  bool loop = false;
  optind = 1;
  opterr = 0;
  for (;;) {
    int c = getopt_long(argc, argv, "", opts, NULL);
    if (c == -1) {
      break;
    }
    switch (c) {
    case 'b':
      url = optarg;
      break;
    case 'r':
      if (em_cli_number_option("replay", "--rate", optarg, &rate, &p.rate) != EM_CLI_OK) {
        return EM_CLI_USAGE;
      }
      break;
    case 'g':
      if (em_cli_number_option("replay", "--max-gap", optarg, &max_gap, &p.max_gap_s) !=
          EM_CLI_OK) {
        return EM_CLI_USAGE;
      }
      break;
    case 'l':
      loop = true;
      break;
    case 'h':
      replay_usage(stdout);
      return EM_CLI_OK;
    default:
      if (em_cli_conn_option(&conn, c, optarg) == EM_CLI_OK) {
        break;
      }
      return em_cli_bad_option("replay", argv);
    }
  }
  if (optind >= argc) {
    return em_cli_usage_error("replay", "which recording? (FILE is missing)");
  }
  if (argc - optind > 1) {
    return em_cli_usage_error("replay", "unexpected argument '%s'", argv[optind + 1]);
  }
  p.path = argv[optind];
  url = em_cli_broker_url(url);
  em_broker_url_t parsed;
  char err[512];
  if (em_broker_parse_url(url, &parsed, err, sizeof(err)) != 0) {
    return em_cli_usage_error("replay", "%s", err);
  }
  if (loop && strcmp(p.path, "-") == 0) {
    return em_cli_usage_error("replay", "--loop needs a file, not standard input");
  }
  if (em_cli_conn_check(&conn, "replay", url) != EM_CLI_OK) {
    return EM_CLI_USAGE;
  }
  /* Open the file before connecting: a missing or foreign file publishes nothing. */
  em_rec_reader_t *reader = NULL;
  int rc = em_rec_reader_new(&reader, p.path);
  if (rc != 0) {
    em_cli_error("replay", "%s: %s", p.path, em_rec_strerror(rc));
    em_cli_conn_forget(&conn);
    return EM_CLI_INPUT;
  }
  em_broker_opts_t bopts = em_cli_conn_opts(&conn, "edgemon-cli-replay");
  rc = em_broker_connect_opts(&p.broker, url, &bopts, NULL, NULL, 5.0, err, sizeof(err));
  em_cli_conn_forget(&conn);
  if (rc != 0) {
    em_cli_error("replay", "%s", err[0] ? err : strerror(-rc));
    em_rec_reader_free(reader);
    return EM_CLI_BROKER;
  }
  uint64_t start = em_cli_mono_ns();
  int result = 0;
  for (;;) {
    uint64_t records = 0;
    result = replay_pass(&p, reader, &records);
    em_rec_reader_free(reader);
    reader = NULL;
    if (result != 0 || !loop || records == 0) {
      break;
    }
    rc = em_rec_reader_new(&reader, p.path); /* --loop: the next pass. */
    if (rc != 0) {
      em_cli_error("replay", "%s: %s", p.path, em_rec_strerror(rc));
      result = EM_CLI_INPUT;
      break;
    }
  }
  int exit_code = result == 1 ? EM_CLI_OK : result;
  if (p.shortened > 0) {
    em_cli_error("replay", "%llu gap(s) longer than --max-gap %g s were cut to it",
                 (unsigned long long)p.shortened, p.max_gap_s);
  }
  if (exit_code != EM_CLI_BROKER) {
    rc = em_broker_drain(p.broker, REPLAY_DRAIN_S);
    if (rc != 0) {
      em_cli_error("replay", "the broker did not acknowledge every message: %s", strerror(-rc));
      exit_code = EM_CLI_BROKER;
    }
  }
  em_cli_error("replay", "published %llu message(s), %llu payload bytes, from %s in %.1f s",
               (unsigned long long)p.published, (unsigned long long)p.bytes, p.path,
               (double)(em_cli_mono_ns() - start) / 1e9);
  em_broker_free(p.broker);
  return exit_code;
}
