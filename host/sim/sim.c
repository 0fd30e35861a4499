/*
 * sim.c - edgemon-sim: publishes valid edgemon v1 telemetry for N simulated devices.
 *
 * For tests and benchmarks of the host side (the aggregator, edgemon-cli) without N boards.
 * Each device <prefix>-0001.. gets a retained status online and a retained birth with a
 * metric dictionary shaped like the agent's (hardware cache and branch counters absent, as on
 * a VM; a percentile budget on the infer stage), then one data message per period: memory
 * drifting slowly, IPC near 1.2, pressure figures, counters that only grow, and per stage a
 * window of log-normal latencies (~30 spans/s) summarised the way the agent does (nearest-rank
 * percentiles, sparse exponential buckets at scale 6). About once a minute at random a device
 * goes DEGRADED for a few seconds (a retained state message each way; data's level follows);
 * --excursion-mean sets how often, and with --flights each excursion also publishes a synthetic
 * flight recording (flight_synth.h) on edgemon/v1/<device>/flight, and with --profiles a
 * synthetic stack profile (profile_synth.h) on edgemon/v1/<device>/profile, QoS 1, not retained.
 * The excursion's DEGRADED state message and its flight recording carry the same synthetic
 * breach verdict (verdict_synth.h): why the stage got slow, as an agent explains an escalation.
 * On --duration or SIGINT/SIGTERM it publishes status offline for every device, waits for the
 * broker's acknowledgements and prints a summary to stderr.
 *
 * Exact answers for tests: the draws are a function of --seed alone, --slow K:F makes device K's
 * latencies F times those of the others (one slow device in a fleet), and --spans-file PATH
 * writes every span of every data message handed to the broker, one "device stage ns" line
 * each, so a test can compute the exact percentiles of what the fleet reported.
 *
 * Cohorts (cohorts.h): --model gives device ranges a model identity, carried in the birth (key
 * 11) and every data message (key 10); --slow and --degrade set a range's latency factor and
 * excursion rate; --switch changes a range's version at a simulated second, publishing a state
 * message (model_change, level == prev_level) with the new model. None of them draws random
 * numbers, so the same seed gives the same draws with or without them.
 *
 * Simulated time: t = 0 is the start of the simulated history. --backfill S puts it S seconds
 * before now and publishes those S seconds at once (data at QoS 1, acknowledged in batches so
 * the broker sets the pace), devices interleaved in time order, each message stamped with its
 * window's time in the past; then the live phase goes on from t = S (only with --duration).
 * A data message's time_ns is the wall clock at t = 0 plus t; a state's mono_ns is t plus the
 * monotonic clock at the start.
 *
 * Pacing of the live phase: one loop, no threads. Publish slot j (device i = j % N, period k = j /
 * N) is due at start + k * period + i * period / N on CLOCK_MONOTONIC, so devices are spread evenly
 * over the period and never published in a burst. Between slots the loop drives the network with
 * em_broker_run() and sleeps to the next absolute deadline; when it falls behind it publishes
 * at once (catching up) and records how late it was.
 *
 * Owns one broker session, the device table (allocated once at start) and nothing else; every
 * message is encoded into a stack buffer. Exit codes: 0 done, 1 runtime failure (e.g. the
 * offline statuses not acknowledged), 2 usage, 3 broker unreachable or lost.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "broker.h"
#include "cohorts.h"
#include "edgemon/common/parse.h"
#include "edgemon/common/rng.h"
#include "edgemon/proto.h"
#include "flight_synth.h"
#include "profile_synth.h"
#include "verdict_synth.h"

#ifndef EM_VERSION
#define EM_VERSION "0.0.0"
#endif

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_BROKER = 3 };

#define SIM_MAX_DEVICES    100000u
#define SIM_MAX_RATE_HZ    1000.0
#define SIM_MIN_RATE_HZ    0.01
#define SIM_SPANS_PER_S    30.0  /* Frames per second each stage sees. */
#define SIM_MAX_SPANS      4096u /* Spans per stage window, a cap for slow rates. */
#define SIM_SCALE          6     /* Histogram scale, as the agent's default. */
#define SIM_MAX_BUCKETS    512u  /* Distinct buckets a window of SIM_MAX_SPANS can touch here. */
#define SIM_LEVEL_MEAN_S   60.0  /* Mean time between two level excursions of one device. */
#define SIM_BUDGET_NS      40000000u /* infer p99 budget: 40 ms. */
#define SIM_BASELINE_NS    26000000u /* The verdicts' NOMINAL p99 of the budget stage. */
#define SIM_MSG_CAP        EM_PROTO_MAX_MESSAGE_BYTES
#define SIM_DEFAULT_STAGES "preprocess,infer,postprocess"
#define SIM_BACKFILL_BATCH 512u /* Backfilled messages between two waits for the acks. */

static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
}

/* ---- usage and arguments -------------------------------------------------------------- */

static const char usage_text[] =
    "usage: edgemon-sim --devices N --rate HZ [options]\n"
    "       edgemon-sim --help | --version\n"
    "\n"
    "Publishes valid edgemon v1 telemetry for N simulated devices <prefix>-0001.. to an MQTT\n"
    "broker: a retained status online and birth per device, then one data message per device\n"
    "every 1/HZ s (devices spread evenly over the period), and now and then a DEGRADED\n"
    "excursion (retained state messages). Stops after --duration or on SIGINT/SIGTERM, then\n"
    "publishes status offline for every device and prints a summary to stderr.\n"
    "\n"
    "options:\n"
    "  -n, --devices N       simulated devices, 1 to 100000 (required)\n"
    "  -r, --rate HZ         data messages per second per device, 0.01 to 1000 (required)\n"
    "  -b, --broker URL      mqtt://HOST[:PORT] (default " EM_BROKER_DEFAULT_URL ")\n"
    "  -d, --duration S      stop after S seconds (default: run until a signal)\n"
    "  -p, --prefix NAME     device id prefix (default sim)\n"
    "  -s, --seed N          random seed (default 1): same seed, same sessions and draws\n"
    "      --stages LIST     comma-separated stage names (default " SIM_DEFAULT_STAGES ")\n"
    "  -q, --qos 0|1         QoS of data messages (default 0); birth, state, status use 1\n"
    "      --slow RANGE:F    devices RANGE (K or K-L, 1..N) have latencies F times the others'\n"
    "                        (F 0.01 to 1000)\n"
    "      --spans-file PATH write every published span as a line \"device stage ns\" to PATH\n"
    "      --excursion-mean S  mean seconds between two DEGRADED excursions of a device\n"
    "                        (default 60, 0.1 to 1e6)\n"
    "      --flights         publish a synthetic flight recording on each DEGRADED excursion\n"
    "      --profiles        publish a synthetic stack profile on each DEGRADED excursion\n"
    "\n"
    "cohorts (RANGE is K or K-L; a later rule of a kind overrides an earlier one):\n"
    "      --model RANGE:NAME:VERSION[:KEY=VALUE,...]\n"
    "                        devices RANGE run this model: its identity goes in their birth\n"
    "                        and every data message (up to 8 labels)\n"
    "      --degrade RANGE:S  mean seconds between DEGRADED excursions of devices RANGE\n"
    "      --switch RANGE:T:VERSION\n"
    "                        devices RANGE (named by --model) change to VERSION at simulated\n"
    "                        second T: a state message with the level unchanged and the new\n"
    "                        model, and their data from then on carry it\n"
    "      --backfill S      first publish S seconds of simulated history (timestamps in the\n"
    "                        past, in order) as fast as the broker takes it, then exit; with\n"
    "                        --duration go on live for that long. Simulated second 0 is S\n"
    "                        seconds ago (0 to 604800)\n"
    "  -V, --version         print the version and exit\n"
    "  -h, --help            print this help and exit\n"
    "\n"
    "exit status: 0 done, 1 runtime failure, 2 usage error, 3 broker unreachable or lost\n";

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 1, 2)))
#endif
static int
usage_error(const char *fmt, ...);
static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("edgemon-sim: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputs("\n", stderr);
  va_end(ap);
  fputs(usage_text, stderr);
  return EXIT_USAGE;
}

typedef struct {
  unsigned devices;
  double rate_hz;
  const char *broker;
  double duration_s; /* 0: until a signal. */
  const char *prefix;
  uint64_t seed;
  char stage_buf[EM_PROTO_MAX_STAGES * (EM_PROTO_MAX_STAGE_BYTES + 1)];
  const char *stages[EM_PROTO_MAX_STAGES];
  size_t n_stages;
  int qos;
  em_sim_cohorts_t cohorts; /* --model, --slow, --degrade, --switch. */
  double backfill_s;        /* 0: no history. */
  const char *spans_file;
  double excursion_mean_s;
  bool flights;
  bool profiles;
} sim_opts_t;

static bool ident_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == ':' || c == '-';
}

/* A whole decimal number up to hi (edgemon/common/parse.h: digits only). */
static bool parse_u64(const char *s, uint64_t hi, uint64_t *out) {
  return em_parse_u64(s, 0, hi, out) == 0;
}

static const char *parse_stages(sim_opts_t *o, const char *list) {
  size_t len = strlen(list);
  if (len == 0 || len >= sizeof(o->stage_buf)) {
    return "is empty or too long";
  }
  memcpy(o->stage_buf, list, len + 1);
  o->n_stages = 0;
  char *p = o->stage_buf;
  for (;;) {
    char *comma = strchr(p, ',');
    if (comma) {
      *comma = '\0';
    }
    size_t n = strlen(p);
    if (n == 0 || n > EM_PROTO_MAX_STAGE_BYTES) {
      return "has a stage name that is empty or longer than 31 characters";
    }
    for (size_t i = 0; i < n; i++) {
      if (!ident_char(p[i])) {
        return "has a stage name with a character outside [A-Za-z0-9_.:-]";
      }
    }
    for (size_t i = 0; i < o->n_stages; i++) {
      if (strcmp(o->stages[i], p) == 0) {
        return "names a stage twice";
      }
    }
    if (o->n_stages == EM_PROTO_MAX_STAGES) {
      return "has more than 64 stages";
    }
    o->stages[o->n_stages++] = p;
    if (!comma) {
      return NULL;
    }
    p = comma + 1;
  }
}

/* Returns -1 to go on, or the exit code (help, version, usage error). */
static int parse_args(int argc, char **argv, sim_opts_t *o) {
  static const struct {
    const char *lng;
    const char *shrt;
    bool arg;
  } flags[] = {
      {"--devices", "-n", true},        {"--rate", "-r", true},     {"--broker", "-b", true},
      {"--duration", "-d", true},       {"--prefix", "-p", true},   {"--seed", "-s", true},
      {"--stages", NULL, true},         {"--qos", "-q", true},      {"--version", "-V", false},
      {"--help", "-h", false},          {"--slow", NULL, true},     {"--spans-file", NULL, true},
      {"--excursion-mean", NULL, true}, {"--flights", NULL, false}, {"--model", NULL, true},
      {"--profiles", NULL, false},      {"--degrade", NULL, true},  {"--switch", NULL, true},
      {"--backfill", NULL, true},
  };
  bool have_devices = false;
  bool have_rate = false;
  const char *stages = SIM_DEFAULT_STAGES;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = NULL;
    size_t f = 0;
    size_t n_flags = sizeof(flags) / sizeof(flags[0]);
    for (; f < n_flags; f++) {
      size_t ln = strlen(flags[f].lng);
      if (strcmp(a, flags[f].lng) == 0 || (flags[f].shrt && strcmp(a, flags[f].shrt) == 0)) {
        break;
      }
      if (flags[f].arg && strncmp(a, flags[f].lng, ln) == 0 && a[ln] == '=') {
        val = a + ln + 1;
        break;
      }
    }
    if (f == n_flags) {
      return usage_error("unknown option '%s'", a);
    }
    if (flags[f].arg && !val) {
      if (i + 1 >= argc) {
        return usage_error("%s needs a value", flags[f].lng);
      }
      val = argv[++i];
    }
    const char *name = flags[f].lng;
    uint64_t u = 0;
    if (strcmp(name, "--help") == 0) {
      fputs(usage_text, stdout);
      return EXIT_OK;
    } else if (strcmp(name, "--version") == 0) {
      printf("edgemon-sim %s\n", EM_VERSION);
      return EXIT_OK;
    } else if (strcmp(name, "--devices") == 0) {
      if (!parse_u64(val, SIM_MAX_DEVICES, &u) || u == 0) {
        return usage_error("--devices '%s' is not a number from 1 to 100000", val);
      }
      o->devices = (unsigned)u;
      have_devices = true;
    } else if (strcmp(name, "--rate") == 0) {
      if (!em_sim_parse_number(val, SIM_MIN_RATE_HZ, SIM_MAX_RATE_HZ, &o->rate_hz)) {
        return usage_error("--rate '%s' is not a number of Hz from 0.01 to 1000", val);
      }
      have_rate = true;
    } else if (strcmp(name, "--broker") == 0) {
      em_broker_url_t url;
      char why[256];
      if (em_broker_parse_url(val, &url, why, sizeof(why)) < 0) {
        return usage_error("%s", why);
      }
      o->broker = val;
    } else if (strcmp(name, "--duration") == 0) {
      if (!em_sim_parse_number(val, 0.0, 1e7, &o->duration_s) || o->duration_s <= 0.0) {
        return usage_error("--duration '%s' is not a positive number of seconds", val);
      }
    } else if (strcmp(name, "--prefix") == 0) {
      size_t n = strlen(val);
      bool ok = n >= 1 && n <= EM_PROTO_MAX_NAME_BYTES - 5;
      for (size_t k = 0; ok && k < n; k++) {
        ok = ident_char(val[k]);
      }
      if (!ok) {
        return usage_error("--prefix '%s' must be 1 to 58 characters of [A-Za-z0-9_.:-]", val);
      }
      o->prefix = val;
    } else if (strcmp(name, "--seed") == 0) {
      if (!parse_u64(val, UINT64_MAX, &o->seed)) {
        return usage_error("--seed '%s' is not an unsigned integer", val);
      }
    } else if (strcmp(name, "--stages") == 0) {
      stages = val;
    } else if (strcmp(name, "--qos") == 0) {
      if (strcmp(val, "0") != 0 && strcmp(val, "1") != 0) {
        return usage_error("--qos '%s' must be 0 or 1", val);
      }
      o->qos = val[0] - '0';
    } else if (strcmp(name, "--slow") == 0 || strcmp(name, "--model") == 0 ||
               strcmp(name, "--degrade") == 0 || strcmp(name, "--switch") == 0) {
      char why[320];
      if (em_sim_cohorts_add(&o->cohorts, name, val, why, sizeof(why)) != 0) {
        return usage_error("%s", why);
      }
    } else if (strcmp(name, "--backfill") == 0) {
      if (!em_sim_parse_number(val, 0.0, 604800.0, &o->backfill_s)) {
        return usage_error("--backfill '%s' is not a number of seconds from 0 to 604800", val);
      }
    } else if (strcmp(name, "--spans-file") == 0) {
      if (!val[0]) {
        return usage_error("--spans-file needs a path");
      }
      o->spans_file = val;
    } else if (strcmp(name, "--excursion-mean") == 0) {
      if (!em_sim_parse_number(val, 0.1, 1e6, &o->excursion_mean_s)) {
        return usage_error("--excursion-mean '%s' is not a number of seconds from 0.1 to 1e6", val);
      }
    } else if (strcmp(name, "--flights") == 0) {
      o->flights = true;
    } else if (strcmp(name, "--profiles") == 0) {
      o->profiles = true;
    }
  }
  const char *why = parse_stages(o, stages);
  if (why) {
    return usage_error("--stages '%s' %s", stages, why);
  }
  if (!have_devices || !have_rate) {
    return usage_error("--devices and --rate are required");
  }
  char problem[320];
  if (em_sim_cohorts_check(&o->cohorts, o->devices, problem, sizeof(problem)) != 0) {
    return usage_error("%s", problem);
  }
  return -1;
}

/* ---- random numbers (xoshiro256**, seeded by splitmix64) ------------------------------ */

/* Uniform in (0, 1]. */
static double rng_unit(em_rng_t *r) {
  return ((double)(em_rng_next(r) >> 11) + 1.0) * 0x1.0p-53;
}

/* Standard normal (Box-Muller; one of the pair is dropped, which keeps the state simple). */
static double rng_normal(em_rng_t *r) {
  double u1 = rng_unit(r);
  double u2 = rng_unit(r);
  return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

/* ---- devices --------------------------------------------------------------------------- */

enum {
  M_PMU_RUNNING,
  M_IPC,
  M_CACHE_MISS,
  M_BRANCH_MISS,
  M_RSS,
  M_PSS,
  M_ANON,
  M_SWAP,
  M_VSIZE,
  M_MEM_AVAILABLE,
  M_PSI_CPU_SOME,
  M_PSI_CPU_FULL,
  M_PSI_MEM_SOME,
  M_PSI_MEM_FULL,
  M_PSI_IO_SOME,
  M_PSI_IO_FULL,
  M_TARGET_UP,
  M_TARGET_THREADS,
  M_AGENT_CPU,
  M_AGENT_RSS,
  M_SPANS_RECEIVED,
  M_SPANS_OVERFLOW,
  M_LATE_TICKS,
  M_COUNT
};

static const char vm_reason[] =
    "perf_event_open: hardware cache events not supported by this CPU or VM (ENOENT)";

static const em_metric_def_t metric_defs[M_COUNT] = {
    [M_PMU_RUNNING] = {M_PMU_RUNNING, "pmu.hw.running_ratio", "1", EM_METRIC_GAUGE, NULL},
    [M_IPC] = {M_IPC, "pmu.ipc", "1", EM_METRIC_GAUGE, NULL},
    [M_CACHE_MISS] = {M_CACHE_MISS, "pmu.cache_miss_ratio", "1", EM_METRIC_GAUGE, vm_reason},
    [M_BRANCH_MISS] = {M_BRANCH_MISS, "pmu.branch_miss_ratio", "1", EM_METRIC_GAUGE, vm_reason},
    [M_RSS] = {M_RSS, "mem.rss", "By", EM_METRIC_GAUGE, NULL},
    [M_PSS] = {M_PSS, "mem.pss", "By", EM_METRIC_GAUGE, NULL},
    [M_ANON] = {M_ANON, "mem.anon", "By", EM_METRIC_GAUGE, NULL},
    [M_SWAP] = {M_SWAP, "mem.swap", "By", EM_METRIC_GAUGE, NULL},
    [M_VSIZE] = {M_VSIZE, "mem.vsize", "By", EM_METRIC_GAUGE, NULL},
    [M_MEM_AVAILABLE] = {M_MEM_AVAILABLE, "sys.mem.available", "By", EM_METRIC_GAUGE, NULL},
    [M_PSI_CPU_SOME] = {M_PSI_CPU_SOME, "psi.cpu.some.avg10", "%", EM_METRIC_GAUGE, NULL},
    [M_PSI_CPU_FULL] = {M_PSI_CPU_FULL, "psi.cpu.full.avg10", "%", EM_METRIC_GAUGE, NULL},
    [M_PSI_MEM_SOME] = {M_PSI_MEM_SOME, "psi.memory.some.avg10", "%", EM_METRIC_GAUGE, NULL},
    [M_PSI_MEM_FULL] = {M_PSI_MEM_FULL, "psi.memory.full.avg10", "%", EM_METRIC_GAUGE, NULL},
    [M_PSI_IO_SOME] = {M_PSI_IO_SOME, "psi.io.some.avg10", "%", EM_METRIC_GAUGE, NULL},
    [M_PSI_IO_FULL] = {M_PSI_IO_FULL, "psi.io.full.avg10", "%", EM_METRIC_GAUGE, NULL},
    [M_TARGET_UP] = {M_TARGET_UP, "target.up", "1", EM_METRIC_GAUGE, NULL},
    [M_TARGET_THREADS] = {M_TARGET_THREADS, "target.threads_counted", "1", EM_METRIC_GAUGE, NULL},
    [M_AGENT_CPU] = {M_AGENT_CPU, "agent.cpu", "ns", EM_METRIC_COUNTER, NULL},
    [M_AGENT_RSS] = {M_AGENT_RSS, "agent.rss", "By", EM_METRIC_GAUGE, NULL},
    [M_SPANS_RECEIVED] = {M_SPANS_RECEIVED, "spans.received", "1", EM_METRIC_COUNTER, NULL},
    [M_SPANS_OVERFLOW] = {M_SPANS_OVERFLOW, "spans.dropped.overflow", "1", EM_METRIC_COUNTER, NULL},
    [M_LATE_TICKS] = {M_LATE_TICKS, "agent.late_ticks", "1", EM_METRIC_COUNTER, NULL},
};

/* Median latency of a stage (ns) by name; other names get 3 ms. */
static double stage_median_ns(const char *name) {
  if (strcmp(name, "infer") == 0) {
    return 12e6;
  }
  if (strcmp(name, "preprocess") == 0) {
    return 2.5e6;
  }
  if (strcmp(name, "postprocess") == 0) {
    return 1.2e6;
  }
  return 3e6;
}

typedef struct {
  char id[EM_PROTO_MAX_NAME_BYTES + 1];
  em_rng_t rng;
  uint32_t session;
  uint32_t seq;
  em_level_t level;
  uint64_t next_excursion_ns; /* Simulated time of the next DEGRADED excursion. */
  uint64_t recover_ns;        /* Simulated time of the return to NOMINAL, while DEGRADED. */
  em_sim_profile_t prof;      /* Its cohort: model, latency factor, excursions, switch. */
  em_model_t model;           /* The model it runs now (prof.model, or prof.switched). */
  double rss_bytes;
  uint64_t spans_received;
  uint64_t agent_cpu_ns;
  uint64_t late_ticks;
  uint32_t flights;    /* Flight recordings published in this session. */
  uint32_t profiles;   /* Stack profiles published in this session. */
  uint64_t next_frame; /* Frame id of the next recording's first frame. */
} sim_device_t;

typedef struct {
  sim_opts_t opt;
  em_broker_t *broker;
  FILE *spans_out; /* --spans-file, or NULL. */
  sim_device_t *dev;
  const char *budget_stage; /* Stage the percentile budget watches. */
  uint64_t period_ns;
  uint64_t start_ns;       /* CLOCK_MONOTONIC at the start of the live phase. */
  uint64_t real_origin_ns; /* CLOCK_REALTIME at simulated time 0. */
  uint64_t mono_origin_ns; /* What a state's mono_ns is at simulated time 0. */
  uint64_t backfill_ns;    /* Simulated time at the start of the live phase. */
  /* What happened, for the summary. */
  uint64_t n_data;
  uint64_t n_birth;
  uint64_t n_state;
  uint64_t n_status;
  uint64_t n_flight;
  uint64_t n_profile;
  uint64_t n_fail;
  uint64_t max_late_ns;
  uint64_t late_slots; /* Slots published more than 1 ms after their deadline. */
  int broker_rc;       /* First publish error that ended the run. */
  int data_qos;        /* QoS of data messages now: --qos, 1 while backfilling. */
  uint64_t n_backfill; /* Data messages of the backfilled history. */
  bool live;           /* The live phase ran. */
  /* The verdict of the excursion being published: its DEGRADED state and flight recording
   * carry the same one (verdict_synth.h). */
  em_proto_verdict_t verdict;
} sim_t;

static uint64_t clock_ns(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t exp_delay_ns(em_rng_t *r, double mean_s) {
  return (uint64_t)(-log(rng_unit(r)) * mean_s * 1e9);
}

static void topic_of(char *buf, size_t cap, const sim_device_t *d, const char *kind) {
  snprintf(buf, cap, "edgemon/v1/%s/%s", d->id, kind);
}

/* Encodes msg and publishes it on the device's `kind` topic. */
static int publish_msg(sim_t *s, const sim_device_t *d, const char *kind, const em_msg_t *msg,
                       int qos, bool retain) {
  uint8_t buf[SIM_MSG_CAP];
  size_t len = 0;
  int rc = em_proto_encode(msg, buf, sizeof(buf), &len);
  if (rc != 0) {
    fprintf(stderr, "edgemon-sim: cannot encode the %s of %s: %s\n", kind, d->id,
            em_proto_strerror(rc));
    s->n_fail++;
    return 0; /* A bug of ours, not a broker failure: go on. */
  }
  char topic[128];
  topic_of(topic, sizeof(topic), d, kind);
  rc = em_broker_publish(s->broker, topic, buf, len, qos, retain);
  if (rc < 0) {
    s->n_fail++;
    return rc;
  }
  return 0;
}

static int publish_status(sim_t *s, const sim_device_t *d, bool online) {
  em_msg_t m = {.kind = EM_MSG_STATUS};
  m.u.status = (em_status_t){.head = {.time_ns = clock_ns(CLOCK_REALTIME), .session = d->session},
                             .online = online};
  int rc = publish_msg(s, d, "status", &m, 1, true);
  s->n_status += rc == 0;
  return rc;
}

static int publish_birth(sim_t *s, const sim_device_t *d) {
  em_budget_t budget = {
      .id = NULL,
      .rule = "percentile",
      .level = EM_LEVEL_DEGRADED,
      .bound = {.type = EM_VALUE_UINT, .as.u = SIM_BUDGET_NS},
      .stage = s->budget_stage,
      .window_ns = 1000000000u,
  };
  char rule_id[EM_PROTO_MAX_NAME_BYTES + 1];
  snprintf(rule_id, sizeof(rule_id), "%s.p99", s->budget_stage);
  budget.id = rule_id;
  em_msg_t m = {.kind = EM_MSG_BIRTH};
  m.u.birth = (em_birth_t){
      .head = {.time_ns = s->real_origin_ns, .session = d->session},
      .device = d->id,
      .agent_version = "edgemon-sim " EM_VERSION,
      .board = "sim-generic",
      .period_ns = s->period_ns,
      .metrics = metric_defs,
      .n_metrics = M_COUNT,
      .budgets = &budget,
      .n_budgets = 1,
      .model = d->model,
  };
  int rc = publish_msg(s, d, "birth", &m, 1, true);
  s->n_birth += rc == 0;
  return rc;
}

/* A level change to `to` at simulated time t_ns, or (to == the current level) a change of
 * model: the device's model is already the new one. An escalation carries s->verdict. */
static int publish_state(sim_t *s, sim_device_t *d, em_level_t to, uint64_t t_ns) {
  em_msg_t m = {.kind = EM_MSG_STATE};
  char rule_id[EM_PROTO_MAX_NAME_BYTES + 1];
  snprintf(rule_id, sizeof(rule_id), "%s.p99", s->budget_stage);
  bool up = to > d->level;
  bool model_change = to == d->level;
  m.u.state = (em_state_t){
      .head = {.time_ns = s->real_origin_ns + t_ns, .session = d->session},
      .level = to,
      .prev_level = d->level,
      .mono_ns = s->mono_origin_ns + t_ns,
      .rule = up ? rule_id : NULL,
      .stage = up ? s->budget_stage : NULL,
      .value = {.type = up ? EM_VALUE_UINT : EM_VALUE_ABSENT,
                .as.u = SIM_BUDGET_NS + SIM_BUDGET_NS / 4},
      .bound = {.type = up ? EM_VALUE_UINT : EM_VALUE_ABSENT, .as.u = SIM_BUDGET_NS},
      .reason = model_change ? "model changed (simulated)"
                : up         ? "p99 over its budget (simulated)"
                             : "back within every budget (simulated)",
      .model = d->model,
      .model_change = model_change,
      .verdict = up ? &s->verdict : NULL,
  };
  int rc = publish_msg(s, d, "state", &m, 1, true);
  s->n_state += rc == 0;
  d->level = to;
  return rc;
}

/* A synthetic flight recording of the excursion that starts at simulated time t_ns
 * (flight_synth.h). */
static int publish_flight(sim_t *s, sim_device_t *d, uint64_t t_ns) {
  uint64_t mono_ns = s->mono_origin_ns + t_ns;
  static uint8_t buf[EM_FLIGHT_MAX_BYTES];
  double medians[EM_PROTO_MAX_STAGES];
  size_t budget = 0;
  for (size_t k = 0; k < s->opt.n_stages; k++) {
    medians[k] = stage_median_ns(s->opt.stages[k]);
    if (s->opt.stages[k] == s->budget_stage) {
      budget = k;
    }
  }
  char rule_id[EM_PROTO_MAX_NAME_BYTES + 1];
  snprintf(rule_id, sizeof(rule_id), "%s.p99", s->budget_stage);
  em_synth_flight_t in = {
      .session = d->session,
      .number = d->flights,
      .time_ns = s->real_origin_ns + t_ns,
      .trigger_mono_ns = mono_ns < EM_SYNTH_PRE_NS ? EM_SYNTH_PRE_NS : mono_ns,
      .stages = s->opt.stages,
      .n_stages = s->opt.n_stages,
      .median_ns = medians,
      .budget_stage = budget,
      .rule = rule_id,
      .budget_ns = SIM_BUDGET_NS,
      .frame0 = d->next_frame,
      .seed = em_rng_next(&d->rng),
      .verdict = &s->verdict,
  };
  size_t len = 0;
  uint64_t frames = 0;
  int rc = em_synth_flight_encode(&in, buf, sizeof(buf), &len, &frames);
  if (rc != 0) {
    fprintf(stderr, "edgemon-sim: cannot encode the flight recording of %s: %s\n", d->id,
            em_proto_strerror(rc));
    s->n_fail++;
    return 0;
  }
  char topic[128];
  topic_of(topic, sizeof(topic), d, "flight");
  rc = em_broker_publish(s->broker, topic, buf, len, 1, false);
  if (rc < 0) {
    s->n_fail++;
    return rc;
  }
  d->flights++;
  d->next_frame += frames;
  s->n_flight++;
  return 0;
}

/* A synthetic stack profile of the excursion that starts at simulated time t_ns
 * (profile_synth.h). */
static int publish_profile(sim_t *s, sim_device_t *d, uint64_t t_ns) {
  static uint8_t buf[EM_PROFILE_MAX_BYTES];
  size_t budget = 0;
  for (size_t k = 0; k < s->opt.n_stages; k++) {
    if (s->opt.stages[k] == s->budget_stage) {
      budget = k;
    }
  }
  char rule_id[EM_PROTO_MAX_NAME_BYTES + 1];
  snprintf(rule_id, sizeof(rule_id), "%s.p99", s->budget_stage);
  em_synth_profile_t in = {
      .session = d->session,
      .number = d->profiles,
      .time_ns = s->real_origin_ns + t_ns,
      .start_mono_ns = s->mono_origin_ns + t_ns,
      .stages = s->opt.stages,
      .n_stages = s->opt.n_stages,
      .budget_stage = budget,
      .rule = rule_id,
      .seed = em_rng_next(&d->rng),
  };
  size_t len = 0;
  int rc = em_synth_profile_encode(&in, buf, sizeof(buf), &len);
  if (rc != 0) {
    fprintf(stderr, "edgemon-sim: cannot encode the stack profile of %s: %s\n", d->id,
            em_proto_strerror(rc));
    s->n_fail++;
    return 0;
  }
  char topic[128];
  topic_of(topic, sizeof(topic), d, "profile");
  rc = em_broker_publish(s->broker, topic, buf, len, 1, false);
  if (rc < 0) {
    s->n_fail++;
    return rc;
  }
  d->profiles++;
  s->n_profile++;
  return 0;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a;
  uint64_t y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Nearest rank: the smallest sample with at least q of the samples at or below it. */
static uint64_t nearest_rank(const uint64_t *sorted, size_t n, double q) {
  size_t rank = (size_t)ceil(q * (double)n);
  if (rank < 1) {
    rank = 1;
  }
  return sorted[(rank > n ? n : rank) - 1];
}

/* Bucket of v > 0 at SIM_SCALE: base^i < v <= base^(i+1), base = 2^(2^-scale). */
static int32_t bucket_index(uint64_t v) {
  return (int32_t)ceil(log2((double)v) * (double)(1 << SIM_SCALE)) - 1;
}

/*
 * Fills one stage window with `n` log-normal latencies around median_ns (n <= SIM_MAX_SPANS):
 * the samples go to samples[] (sorted on return) and the buckets to buckets[] (at most
 * SIM_MAX_BUCKETS, which a sorted run of n samples cannot exceed by more than its own span).
 */
static void make_window(em_rng_t *r, em_stage_t *st, size_t n, double median_ns, uint64_t *samples,
                        em_bucket_t *buckets) {
  st->count = n;
  st->scale = SIM_SCALE;
  st->zero_count = 0;
  st->buckets = buckets;
  st->n_buckets = 0;
  if (n == 0) {
    return;
  }
  double mu = log(median_ns);
  uint64_t sum = 0;
  for (size_t k = 0; k < n; k++) {
    double v = exp(mu + 0.25 * rng_normal(r));
    uint64_t ns = v < 1.0 ? 1u : (uint64_t)v;
    samples[k] = ns;
    sum += ns;
  }
  qsort(samples, n, sizeof(samples[0]), cmp_u64);
  st->sum_ns = sum;
  st->min_ns = samples[0];
  st->max_ns = samples[n - 1];
  st->p50_ns = nearest_rank(samples, n, 0.50);
  st->p90_ns = nearest_rank(samples, n, 0.90);
  st->p99_ns = nearest_rank(samples, n, 0.99);
  st->p999_ns = nearest_rank(samples, n, 0.999);
  size_t nb = 0;
  for (size_t k = 0; k < n; k++) {
    int32_t idx = bucket_index(samples[k]);
    if (nb > 0 && buckets[nb - 1].index == idx) {
      buckets[nb - 1].count++;
    } else if (nb < SIM_MAX_BUCKETS) {
      buckets[nb++] = (em_bucket_t){.index = idx, .count = 1};
    } else {
      buckets[nb - 1].count++; /* Not reached: log-normal at sigma 0.25 spans few buckets. */
    }
  }
  st->n_buckets = nb;
}

static void set_u(em_sample_t *v, uint32_t alias, uint64_t u) {
  v[alias] = (em_sample_t){.alias = alias, .value = {.type = EM_VALUE_UINT, .as.u = u}};
}

static void set_f(em_sample_t *v, uint32_t alias, double f) {
  v[alias] = (em_sample_t){.alias = alias, .value = {.type = EM_VALUE_FLOAT, .as.f = f}};
}

static double clamp0(double x) {
  return x < 0.0 ? 0.0 : x;
}

/* Two decimals, as /proc/pressure prints avg10. */
static double pct2(double x) {
  return round(clamp0(x) * 100.0) / 100.0;
}

/* The data message of device d for the window ending at simulated time t_ns. */
static int publish_data(sim_t *s, sim_device_t *d, uint64_t t_ns) {
  em_rng_t *r = &d->rng;
  /* A version change first, so this window already carries the new model. */
  if (d->prof.switch_at_s >= 0 && d->model.version != d->prof.switched.version &&
      (double)t_ns >= d->prof.switch_at_s * 1e9) {
    d->model = d->prof.switched;
    int rc = publish_state(s, d, d->level, t_ns);
    if (rc < 0) {
      return rc;
    }
  }
  /* Level excursions next, so the data message carries the level they set. */
  if (d->level == EM_LEVEL_NOMINAL && t_ns >= d->next_excursion_ns) {
    em_synth_verdict(&s->verdict, s->budget_stage, SIM_BASELINE_NS,
                     SIM_BUDGET_NS + SIM_BUDGET_NS / 4, em_rng_next(r));
    int rc = publish_state(s, d, EM_LEVEL_DEGRADED, t_ns);
    if (rc == 0 && s->opt.flights) {
      rc = publish_flight(s, d, t_ns);
    }
    if (rc == 0 && s->opt.profiles) {
      rc = publish_profile(s, d, t_ns);
    }
    if (rc < 0) {
      return rc;
    }
    d->recover_ns = t_ns + 2000000000u + (em_rng_next(r) % 4000000000u);
  } else if (d->level == EM_LEVEL_DEGRADED && t_ns >= d->recover_ns) {
    int rc = publish_state(s, d, EM_LEVEL_NOMINAL, t_ns);
    if (rc < 0) {
      return rc;
    }
    d->next_excursion_ns = t_ns + exp_delay_ns(r, d->prof.excursion_mean_s);
  }
  bool degraded = d->level != EM_LEVEL_NOMINAL;
  double window_s = (double)s->period_ns / 1e9;

  em_sample_t v[M_COUNT];
  for (uint32_t a = 0; a < M_COUNT; a++) {
    v[a] = (em_sample_t){.alias = a, .value = {.type = EM_VALUE_ABSENT}};
  }
  d->rss_bytes += rng_normal(r) * 16384.0 + 2048.0 * window_s;
  if (d->rss_bytes < 64e6) {
    d->rss_bytes = 64e6;
  }
  uint64_t rss = (uint64_t)d->rss_bytes & ~(uint64_t)4095;
  set_f(v, M_PMU_RUNNING, 1.0);
  set_f(v, M_IPC, clamp0(1.2 + 0.08 * rng_normal(r) - (degraded ? 0.3 : 0.0)));
  set_u(v, M_RSS, rss);
  set_u(v, M_PSS, rss - rss / 8);
  set_u(v, M_ANON, rss - rss / 4);
  set_u(v, M_SWAP, 0);
  set_u(v, M_VSIZE, rss * 4 + 1073741824u);
  set_u(v, M_MEM_AVAILABLE, 2147483648u - (em_rng_next(r) % 67108864u));
  set_f(v, M_PSI_CPU_SOME, pct2((degraded ? 25.0 : 3.0) + 1.0 * rng_normal(r)));
  set_f(v, M_PSI_CPU_FULL, 0.0);
  set_f(v, M_PSI_MEM_SOME, pct2(0.2 + 0.1 * rng_normal(r)));
  set_f(v, M_PSI_MEM_FULL, pct2(0.05 * rng_normal(r)));
  set_f(v, M_PSI_IO_SOME, pct2(0.5 + 0.3 * rng_normal(r)));
  set_f(v, M_PSI_IO_FULL, pct2(0.1 * rng_normal(r)));
  set_u(v, M_TARGET_UP, 1);
  set_u(v, M_TARGET_THREADS, 6);
  d->agent_cpu_ns += (uint64_t)(window_s * 4e6 * (1.0 + 0.2 * rng_unit(r)));
  set_u(v, M_AGENT_CPU, d->agent_cpu_ns);
  set_u(v, M_AGENT_RSS, 3145728u + (em_rng_next(r) % 4096u) * 16u);

  /* Stage windows: ~30 spans/s each, the count varying by one either way. */
  static uint64_t samples[EM_PROTO_MAX_STAGES][SIM_MAX_SPANS];
  static em_bucket_t buckets[EM_PROTO_MAX_STAGES][SIM_MAX_BUCKETS];
  em_stage_t stages[EM_PROTO_MAX_STAGES];
  double expect = SIM_SPANS_PER_S * window_s;
  uint64_t spans = 0;
  for (size_t k = 0; k < s->opt.n_stages; k++) {
    const char *name = s->opt.stages[k];
    long n = lround(expect) + (long)(em_rng_next(r) % 3u) - 1;
    if (n < 0) {
      n = 0;
    }
    if (n > (long)SIM_MAX_SPANS) {
      n = (long)SIM_MAX_SPANS;
    }
    double median = stage_median_ns(name);
    median *= d->prof.latency_factor;
    if (degraded && name == s->budget_stage) {
      median *= 3.5; /* Over the 40 ms budget, as the state message says. */
    }
    stages[k] = (em_stage_t){.name = name};
    make_window(r, &stages[k], (size_t)n, median, samples[k], buckets[k]);
    spans += (uint64_t)n;
  }
  d->spans_received += spans;
  set_u(v, M_SPANS_RECEIVED, d->spans_received);
  set_u(v, M_SPANS_OVERFLOW, 0);
  set_u(v, M_LATE_TICKS, d->late_ticks);

  em_msg_t m = {.kind = EM_MSG_DATA};
  m.u.data = (em_data_t){
      .head = {.time_ns = s->real_origin_ns + t_ns, .session = d->session},
      .seq = d->seq,
      .window_ns = s->period_ns,
      .level = d->level,
      .samples = v,
      .n_samples = M_COUNT,
      .stages = stages,
      .n_stages = s->opt.n_stages,
      .model = d->model,
  };
  uint64_t failed = s->n_fail;
  int rc = publish_msg(s, d, "data", &m, s->data_qos, false);
  if (rc == 0) {
    d->seq++; /* uint32_t: wraps to 0 as the schema says. */
    s->n_data++;
  }
  /* The spans of a message handed to the broker (not of one that failed to encode). */
  if (rc == 0 && s->n_fail == failed) {
    for (size_t k = 0; s->spans_out && k < s->opt.n_stages; k++) {
      for (size_t j = 0; j < stages[k].count; j++) {
        fprintf(s->spans_out, "%s %s %" PRIu64 "\n", d->id, stages[k].name, samples[k][j]);
      }
    }
  }
  return rc;
}

/* ---- the run --------------------------------------------------------------------------- */

static void init_devices(sim_t *s) {
  em_rng_t master;
  em_rng_seed(&master, s->opt.seed);
  for (unsigned i = 0; i < s->opt.devices; i++) {
    sim_device_t *d = &s->dev[i];
    snprintf(d->id, sizeof(d->id), "%s-%04u", s->opt.prefix, i + 1);
    em_rng_seed(&d->rng, em_rng_next(&master));
    d->session = (uint32_t)em_rng_next(&d->rng);
    d->seq = 0;
    d->level = EM_LEVEL_NOMINAL;
    em_sim_cohorts_profile(&s->opt.cohorts, i + 1, s->opt.excursion_mean_s, &d->prof);
    d->model = d->prof.model;
    d->next_excursion_ns = exp_delay_ns(&d->rng, d->prof.excursion_mean_s);
    d->rss_bytes = 150e6 + 60e6 * rng_unit(&d->rng);
  }
}

/* Runs the network until the deadline (CLOCK_MONOTONIC ns), sleeping in between. */
static int wait_until(sim_t *s, uint64_t deadline_ns) {
  int rc = em_broker_run(s->broker, 0);
  if (rc < 0) {
    return rc;
  }
  for (;;) {
    uint64_t now = clock_ns(CLOCK_MONOTONIC);
    if (now >= deadline_ns || g_stop) {
      return 0;
    }
    uint64_t left = deadline_ns - now;
    if (left >= 2000000u) {
      /* Long enough for poll()'s millisecond resolution: wait on the socket meanwhile. */
      rc = em_broker_run(s->broker, (int)(left / 1000000u) - 1);
      if (rc < 0) {
        return rc;
      }
      continue;
    }
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000u),
                          .tv_nsec = (long)(deadline_ns % 1000000000u)};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
  }
}

static int run_data(sim_t *s) {
  uint64_t n = s->opt.devices;
  uint64_t end_ns =
      s->opt.duration_s > 0.0 ? s->start_ns + (uint64_t)(s->opt.duration_s * 1e9) : UINT64_MAX;
  uint64_t since_run = 0;
  for (uint64_t slot = 0; !g_stop; slot++) {
    uint64_t k = slot / n;
    uint64_t i = slot % n;
    uint64_t due = s->start_ns + k * s->period_ns + (i * s->period_ns) / n;
    if (due >= end_ns) {
      int rc = wait_until(s, end_ns);
      return rc;
    }
    uint64_t now = clock_ns(CLOCK_MONOTONIC);
    if (now < due) {
      int rc = wait_until(s, due);
      if (rc < 0) {
        return rc;
      }
      since_run = 0;
      if (g_stop) {
        break;
      }
      now = clock_ns(CLOCK_MONOTONIC);
    } else if (++since_run >= 64) {
      /* Behind schedule: still read acks and pings now and then while catching up. */
      int rc = em_broker_run(s->broker, 0);
      if (rc < 0) {
        return rc;
      }
      since_run = 0;
    }
    if (now > due) {
      uint64_t late = now - due;
      if (late > s->max_late_ns) {
        s->max_late_ns = late;
      }
      if (late > 1000000u) {
        s->late_slots++;
      }
    }
    int rc = publish_data(s, &s->dev[i], s->backfill_ns + (now - s->start_ns));
    if (rc < 0) {
      return rc;
    }
  }
  return 0;
}

/*
 * Publishes the simulated history [0, backfill) at once: the same slots as the live phase,
 * in time order, data at QoS 1 and acknowledged every SIM_BACKFILL_BATCH messages so neither
 * libmosquitto's queue nor the broker's grows past a batch.
 */
static int run_backfill(sim_t *s) {
  uint64_t n = s->opt.devices;
  int qos = s->data_qos;
  s->data_qos = 1;
  int rc = 0;
  for (uint64_t slot = 0; rc == 0 && !g_stop; slot++) {
    uint64_t k = slot / n;
    uint64_t i = slot % n;
    uint64_t t = k * s->period_ns + (i * s->period_ns) / n;
    if (t >= s->backfill_ns) {
      break;
    }
    rc = publish_data(s, &s->dev[i], t);
    if (rc == 0 && slot % SIM_BACKFILL_BATCH == SIM_BACKFILL_BATCH - 1) {
      rc = em_broker_drain(s->broker, 60.0);
    }
  }
  if (rc == 0) {
    rc = em_broker_drain(s->broker, 60.0);
  }
  s->data_qos = qos;
  s->n_backfill = s->n_data;
  return rc;
}

static void summary(const sim_t *s, uint64_t data_end_ns) {
  double elapsed = (double)(data_end_ns - s->start_ns) / 1e9;
  double offered = s->opt.rate_hz * (double)s->opt.devices;
  fprintf(stderr,
          "edgemon-sim: %u devices at %g Hz for %.2f s: %" PRIu64 " data, %" PRIu64
          " birth, %" PRIu64 " state, %" PRIu64 " status published (%" PRIu64 " failed)\n",
          s->opt.devices, s->opt.rate_hz, elapsed, s->n_data, s->n_birth, s->n_state, s->n_status,
          s->n_fail);
  if (s->opt.flights) {
    fprintf(stderr, "edgemon-sim: %" PRIu64 " flight recordings published\n", s->n_flight);
  }
  if (s->opt.profiles) {
    fprintf(stderr, "edgemon-sim: %" PRIu64 " stack profiles published\n", s->n_profile);
  }
  if (s->opt.backfill_s > 0) {
    fprintf(stderr, "edgemon-sim: backfilled %g s of history: %" PRIu64 " data messages\n",
            s->opt.backfill_s, s->n_backfill);
  }
  if (s->live) {
    uint64_t live = s->n_data - s->n_backfill;
    fprintf(stderr,
            "edgemon-sim: data rate %.2f msg/s achieved of %.2f msg/s scheduled; worst lag "
            "behind schedule %.3f ms; %" PRIu64 " messages more than 1 ms late\n",
            elapsed > 0 ? (double)live / elapsed : 0.0, offered, (double)s->max_late_ns / 1e6,
            s->late_slots);
  }
  fprintf(stderr, "edgemon-sim: data phase on CLOCK_MONOTONIC from %" PRIu64 " to %" PRIu64 " ns\n",
          s->start_ns, data_end_ns);
}

int main(int argc, char **argv) {
  sim_t s = {0};
  s.opt.broker = EM_BROKER_DEFAULT_URL;
  s.opt.prefix = "sim";
  s.opt.seed = 1;
  s.opt.excursion_mean_s = SIM_LEVEL_MEAN_S;
  int code = parse_args(argc, argv, &s.opt);
  if (code >= 0) {
    return code;
  }
  s.period_ns = (uint64_t)llround(1e9 / s.opt.rate_hz);
  s.budget_stage = s.opt.stages[0];
  for (size_t k = 0; k < s.opt.n_stages; k++) {
    if (strcmp(s.opt.stages[k], "infer") == 0) {
      s.budget_stage = s.opt.stages[k];
    }
  }
  s.dev = calloc(s.opt.devices, sizeof(*s.dev));
  if (!s.dev) {
    fprintf(stderr, "edgemon-sim: out of memory for %u devices\n", s.opt.devices);
    return EXIT_FAIL;
  }
  s.data_qos = s.opt.qos;
  s.backfill_ns = (uint64_t)llround(s.opt.backfill_s * 1e9);
  s.real_origin_ns = clock_ns(CLOCK_REALTIME) - s.backfill_ns;
  uint64_t mono = clock_ns(CLOCK_MONOTONIC);
  s.mono_origin_ns = mono > s.backfill_ns ? mono - s.backfill_ns : 0;
  init_devices(&s);
  if (s.opt.spans_file) {
    s.spans_out = fopen(s.opt.spans_file, "w");
    if (!s.spans_out) {
      fprintf(stderr, "edgemon-sim: cannot open --spans-file %s: %s\n", s.opt.spans_file,
              strerror(errno));
      free(s.dev);
      return EXIT_FAIL;
    }
  }

  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  char err[512];
  em_broker_opts_t bopts = {.client_prefix = "edgemon-sim", .keepalive_s = 30};
  int rc =
      em_broker_connect_opts(&s.broker, s.opt.broker, &bopts, NULL, NULL, 5.0, err, sizeof(err));
  if (rc < 0) {
    fprintf(stderr, "edgemon-sim: %s\n", err[0] ? err : em_proto_strerror(rc));
    if (s.spans_out) {
      fclose(s.spans_out);
    }
    free(s.dev);
    return EXIT_BROKER;
  }

  /* Status online and birth, acknowledged before any data so no data overtakes its birth. */
  for (unsigned i = 0; rc == 0 && i < s.opt.devices; i++) {
    rc = publish_status(&s, &s.dev[i], true);
    if (rc == 0) {
      rc = publish_birth(&s, &s.dev[i]);
    }
    if (rc == 0 && i % 64 == 63) {
      rc = em_broker_run(s.broker, 0);
    }
  }
  if (rc == 0) {
    rc = em_broker_drain(s.broker, 60.0);
  }
  if (rc == 0 && s.backfill_ns > 0) {
    rc = run_backfill(&s);
  }
  s.start_ns = clock_ns(CLOCK_MONOTONIC);
  /* Live: after a backfill only for --duration; the wall clock went on meanwhile. */
  s.real_origin_ns = clock_ns(CLOCK_REALTIME) - s.backfill_ns;
  s.live = s.backfill_ns == 0 || s.opt.duration_s > 0;
  if (rc == 0 && !g_stop && s.live) {
    rc = run_data(&s);
  }
  uint64_t data_end = clock_ns(CLOCK_MONOTONIC);
  code = EXIT_OK;
  if (rc < 0) {
    fprintf(stderr, "edgemon-sim: lost the broker at %s: %s\n", s.opt.broker,
            em_proto_strerror(rc));
    code = EXIT_BROKER;
  } else {
    for (unsigned i = 0; rc == 0 && i < s.opt.devices; i++) {
      rc = publish_status(&s, &s.dev[i], false);
      if (rc == 0 && i % 64 == 63) {
        rc = em_broker_run(s.broker, 0);
      }
    }
    if (rc == 0) {
      rc = em_broker_drain(s.broker, 30.0);
    }
    if (rc < 0) {
      fprintf(stderr, "edgemon-sim: the broker did not acknowledge every offline status: %s\n",
              em_proto_strerror(rc));
      code = rc == -ETIMEDOUT ? EXIT_FAIL : EXIT_BROKER;
    }
  }
  summary(&s, data_end);
  if (s.spans_out && (ferror(s.spans_out) | fclose(s.spans_out)) != 0) {
    fprintf(stderr, "edgemon-sim: writing --spans-file %s failed\n", s.opt.spans_file);
    code = code == EXIT_OK ? EXIT_FAIL : code;
  }
  em_broker_free(s.broker);
  free(s.dev);
  return code;
}
