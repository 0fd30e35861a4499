/*
 * main.c - edgemon-agent's command line: parses the options, loads the config, runs the
 * agent on the default libuv loop in the foreground until SIGTERM or SIGINT, and exits.
 * Systemd style: logs go to stderr with levels, no daemonising, no pid file. SIGHUP re-reads
 * the config and applies what can change without a restart (em_agent_reload); a config with
 * problems is reported and the running one stays. A stop that takes longer than
 * STOP_BOUND_MS (a broker that never drains) ends the process anyway, with exit code 1.
 *
 * --detect prints the board profile (boards/, board.h) that detection picks for a root
 * directory and why; at start the config's [agent] board is resolved to a profile the same way.
 *
 * Exit codes: 0 clean stop or valid config (--check) or a profile found (--detect), 1 invalid
 * config, start-up failure or no readable profile directory (--detect), 2 bad command line.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <uv.h>

#include "agent.h"
#include "board.h"
#include "config.h"
#include "log.h"

#ifndef EM_VERSION
#define EM_VERSION "0.0.0"
#endif
#ifndef EM_BOARDS_DIR
#define EM_BOARDS_DIR "/usr/share/edgemon/boards"
#endif

static const char usage_text[] =
    "usage: edgemon-agent --config FILE [--log-level LEVEL]\n"
    "       edgemon-agent --config FILE --check\n"
    "       edgemon-agent --detect [--root DIR] [--boards DIR]\n"
    "       edgemon-agent --version | --help\n"
    "\n"
    "Samples a target process (PMU counters, memory, pressure) on one event loop and\n"
    "publishes CBOR telemetry over MQTT under edgemon/v1/<device>/. Runs in the foreground\n"
    "and logs to stderr; stop it with SIGTERM or SIGINT (it then publishes status offline\n"
    "and exits within 5 s); SIGHUP reloads the budgets and the target from FILE.\n"
    "\n"
    "options:\n"
    "  -c, --config FILE      the INI configuration (see docs/CONFIG.md)\n"
    "      --check            validate FILE, print every problem as FILE:LINE: message,\n"
    "                         exit 0 when valid and 1 when not\n"
    "  -l, --log-level LEVEL  error, warn, info or debug (overrides [agent] log_level)\n"
    "      --detect           print the board profile detected under --root, its\n"
    "                         description and why it was chosen; exit 0, or 1 when no\n"
    "                         profile directory can be read (docs/BOARDS.md)\n"
    "      --root DIR         the root file system --detect reads (default /)\n"
    "      --boards DIR       the profile directory, for --detect and for [agent] board\n"
    "                         (default $EDGEMON_BOARDS_DIR, else " EM_BOARDS_DIR ")\n"
    "  -V, --version          print the version and exit\n"
    "  -h, --help             print this help and exit\n";

static void print_error(void *ctx, const char *file, int line, const char *msg) {
  (void)ctx;
  fprintf(stderr, "%s:%d: %s\n", file, line, msg);
}

#define STOP_BOUND_MS 5000u

typedef struct {
  em_agent_t *agent;
  uv_signal_t sigterm, sigint, sighup;
  uv_timer_t stop_bound;
  const char *config_path;
  const char *level_arg;           /* --log-level, which wins over the file's on reload too. */
  const em_board_profile_t *board; /* Its defaults apply to a reloaded config too. */
  bool stopping;
} app_t;

static void on_signal_closed(uv_handle_t *h) {
  (void)h;
}

static void on_agent_stopped(void *ctx) {
  app_t *app = ctx;
  uv_close((uv_handle_t *)&app->stop_bound, on_signal_closed);
  uv_close((uv_handle_t *)&app->sigterm, on_signal_closed);
  uv_close((uv_handle_t *)&app->sigint, on_signal_closed);
  uv_close((uv_handle_t *)&app->sighup, on_signal_closed);
}

static void on_stop_bound(uv_timer_t *t) {
  (void)t;
  EM_ERROR("stop: not done after %u ms; exiting without a clean stop", STOP_BOUND_MS);
  fflush(stderr);
  _exit(1);
}

/*
 * What a board profile gives a config that did not say otherwise: its sample period, its PMU
 * events after the generic defaults when the file has no [pmu] events, and a WARN temp_max
 * rule when it has none of its own. (Its sensors and their period go to em_agent_new.)
 */
static void apply_profile(em_config_t *cfg, const em_board_profile_t *p) {
  if (!cfg->sample_period_set && p->sample_period_ns &&
      p->sample_period_ns != cfg->sample_period_ns) {
    if (p->sample_period_ns <= cfg->window_ns) {
      cfg->sample_period_ns = p->sample_period_ns;
      EM_INFO("board: sample period %llu ms from the %s profile",
              (unsigned long long)(p->sample_period_ns / 1000000u), p->name);
    } else {
      EM_WARN("board: the %s profile's sample period is longer than [degrade] window; kept %llu "
              "ms",
              p->name, (unsigned long long)(cfg->sample_period_ns / 1000000u));
    }
  }
  if (!cfg->events_set) { /* The generic defaults, then the profile's own, up to the limit. */
    size_t added = 0;
    for (size_t i = 0; i < p->n_events && cfg->n_events < EM_CONFIG_MAX_EVENTS; i++) {
      bool have = false;
      for (size_t k = 0; k < cfg->n_events && !have; k++) {
        have = strcmp(cfg->events[k], p->events[i]) == 0;
      }
      if (!have) {
        snprintf(cfg->events[cfg->n_events++], sizeof(cfg->events[0]), "%s", p->events[i]);
        added++;
      }
    }
    if (added > 0) {
      EM_INFO("board: %zu more PMU events from the %s profile", added, p->name);
    }
  }
  bool have_temp = false;
  for (size_t i = 0; i < cfg->n_rules; i++) {
    const em_budget_rule_t *r = &cfg->rules[i];
    have_temp = have_temp || (r->kind == EM_BUDGET_RULE_GAUGE_MAX &&
                              strcmp(r->u.gauge.figure, EM_CONFIG_FIGURE_TEMP) == 0);
  }
  if (p->has_temp_max && !have_temp && cfg->n_rules < EM_CONFIG_MAX_RULES) {
    cfg->rule_line[cfg->n_rules] = 0; /* From the profile, not a line of the file. */
    em_budget_rule_t *r = &cfg->rules[cfg->n_rules++];
    *r = (em_budget_rule_t){
        .id = "process.temp_max",
        .kind = EM_BUDGET_RULE_GAUGE_MAX,
        .level = EM_LEVEL_WARN,
        .u.gauge = {.figure = EM_CONFIG_FIGURE_TEMP, .max = (double)p->temp_max_c}};
    EM_INFO("board: temp_max %d C (WARN) from the %s profile", p->temp_max_c, p->name);
  }
}

/* SIGHUP: re-reads the config file; problems are logged with their lines and change nothing. */
static void reload(app_t *app) {
  static em_config_t next; /* Large; one reload at a time on the loop's thread. */
  int n_errors = 0;
  EM_INFO("SIGHUP: reloading %s", app->config_path);
  if (em_config_load(app->config_path, &next, print_error, NULL, &n_errors) != 0) {
    EM_ERROR("reload: %s has %d problem%s; the running config stays", app->config_path, n_errors,
             n_errors == 1 ? "" : "s");
    return;
  }
  em_log_level_t level = next.log_level;
  if (app->level_arg) {
    em_log_parse_level(app->level_arg, &level);
  }
  em_log_set_level(level);
  if (app->board) {
    snprintf(next.board, sizeof(next.board), "%s", app->board->name);
    apply_profile(&next, app->board);
  }
  if (em_agent_reload(app->agent, &next) != 0) {
    EM_ERROR("reload: refused; the running config stays");
  }
}

static void on_signal(uv_signal_t *h, int signum) {
  app_t *app = h->data;
  if (signum == SIGHUP) {
    if (!app->stopping) {
      reload(app);
    }
    return;
  }
  if (app->stopping) {
    return;
  }
  app->stopping = true;
  EM_INFO("%s: stopping", signum == SIGTERM ? "SIGTERM" : "SIGINT");
  uv_timer_start(&app->stop_bound, on_stop_bound, STOP_BOUND_MS, 0);
  em_agent_stop(app->agent, on_agent_stopped, app);
}

/*
 * The PMU holds one fd per event per counted thread (10 events x 256 threads is 2560), past
 * the usual soft limit of 1024: raise the soft limit to the hard one.
 */
static void raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
      EM_WARN("cannot raise the open-file limit: %s", strerror(errno));
    }
  }
}

static int run(const em_config_t *cfg, const em_board_profile_t *board, const char *config_path,
               const char *level_arg) {
  raise_fd_limit();
  /* libuv's worker pool serves the smaps_rollup page-table walk, the sensor reads, a profile
   * window's resolution and host name lookups: one worker is enough. The spool's fdatasync
   * has a thread of its own (transport/syncer.h), so it never waits behind them. */
  setenv("UV_THREADPOOL_SIZE", "1", 0);
  /* Tables of 64 KiB and more get mappings of their own: pages stay out of RSS until written
   * (from the heap, calloc zeroes them at once). docs/BENCHMARKS.md, "agent: idle RSS". */
  mallopt(M_MMAP_THRESHOLD, 64 * 1024);
  uv_loop_t *loop = uv_default_loop();
  app_t app = {.config_path = config_path, .level_arg = level_arg, .board = board};
  int rc = em_agent_new(&app.agent, loop, cfg, board, EM_VERSION);
  if (rc) {
    EM_ERROR("cannot start: %s", strerror(-rc));
    return 1;
  }
  uv_timer_init(loop, &app.stop_bound);
  uv_unref((uv_handle_t *)&app.stop_bound);
  uv_signal_t *sigs[] = {&app.sigterm, &app.sigint, &app.sighup};
  int nums[] = {SIGTERM, SIGINT, SIGHUP};
  for (size_t i = 0; i < 3; i++) {
    uv_signal_init(loop, sigs[i]);
    sigs[i]->data = &app;
    uv_signal_start(sigs[i], on_signal, nums[i]);
  }
  EM_INFO("edgemon-agent %s: device %s, period %llu ms, broker %s:%u", EM_VERSION, cfg->device_id,
          (unsigned long long)(cfg->sample_period_ns / 1000000u), cfg->broker_host,
          cfg->broker_port);
  rc = em_agent_start(app.agent);
  if (rc) {
    EM_ERROR("cannot start: %s", uv_strerror(rc));
    return 1;
  }
  uv_run(loop, UV_RUN_DEFAULT);
  em_agent_free(app.agent);
  rc = uv_loop_close(loop);
  if (rc) {
    EM_WARN("event loop closed with handles still open: %s", uv_strerror(rc));
  }
  EM_INFO("stopped");
  return 0;
}

/*
 * The profile directory: --boards, else $EDGEMON_BOARDS_DIR, else the installed one, else (a
 * build tree that was never installed) the source tree's boards/.
 */
static const char *boards_dir(const char *arg) {
  if (arg) {
    return arg;
  }
  const char *env = getenv("EDGEMON_BOARDS_DIR");
  if (env && env[0] != '\0') {
    return env;
  }
#ifdef EM_BOARDS_SOURCE_DIR
  if (access(EM_BOARDS_DIR, R_OK | X_OK) != 0) {
    return EM_BOARDS_SOURCE_DIR;
  }
#endif
  return EM_BOARDS_DIR;
}

/* --detect: prints the profile chosen for `root` and why. Returns the exit code. */
static int detect_board(const char *root, const char *dir) {
  static em_board_detection_t d; /* Large. */
  static char names[EM_BOARD_MAX_PROFILES][EM_BOARD_MAX_NAME];
  size_t n = 0;
  int rc = em_board_list(dir, names, EM_BOARD_MAX_PROFILES, &n);
  if (rc == 0 && n == 0) {
    rc = -ENOENT;
  }
  if (rc == 0 || rc == -E2BIG) {
    rc = em_board_detect(root, dir, &d);
  }
  if (rc != 0 && (rc != -ENOENT || n == 0)) {
    fprintf(stderr, "edgemon-agent: cannot read the board profiles in %s: %s\n", dir,
            strerror(-rc));
    return 1;
  }
  if (rc == -ENOENT) {
    fprintf(stderr, "edgemon-agent: no profile in %s matches %s, and none is generic for arch %s\n",
            dir, root, d.arch[0] ? d.arch : "(unknown)");
    for (size_t i = 0; i < d.n_notes; i++) {
      fprintf(stderr, "note: %s\n", d.notes[i]);
    }
    return 1;
  }
  printf("board: %s\n", d.profile.name);
  printf("description: %s\n", d.profile.description);
  printf("root: %s\nprofiles: %s\n", root, dir);
  for (size_t i = 0; i < d.n_reasons; i++) {
    printf("reason: %s\n", d.reasons[i]);
  }
  for (size_t i = 0; i < d.n_notes; i++) {
    printf("note: %s\n", d.notes[i]);
  }
  return 0;
}

/*
 * [agent] board at start: "auto" detects on this machine, "generic" takes generic-<arch>, a
 * name must have a profile. The chosen name replaces cfg->board (the birth carries it). When
 * auto or generic finds no profile directory the agent runs without a profile; a named board
 * that cannot be found or parsed stops the start.
 */
static int resolve_board(em_config_t *cfg, const char *dir, const em_board_profile_t **out) {
  static em_board_detection_t d; /* Large. */
  *out = NULL;
  int rc = em_board_resolve(cfg->board, cfg->sys_root, dir, &d);
  bool chosen_by_us = strcmp(cfg->board, "auto") == 0 || strcmp(cfg->board, "generic") == 0;
  for (size_t i = 0; i < d.n_notes; i++) {
    EM_WARN("board: %s", d.notes[i]);
  }
  if (rc == 0) {
    EM_INFO("board: %s (%s)", d.profile.name, d.n_reasons > 0 ? d.reasons[0] : "no reason given");
    snprintf(cfg->board, sizeof(cfg->board), "%s", d.profile.name);
    apply_profile(cfg, &d.profile);
    *out = &d.profile;
    return 0;
  }
  if (chosen_by_us) {
    EM_WARN("board: no profile for board = %s in %s (%s); running without one", cfg->board, dir,
            strerror(-rc));
    snprintf(cfg->board, sizeof(cfg->board), "generic");
    return 0;
  }
  if (rc == -ENOENT) {
    EM_ERROR("cannot start: board '%s' has no profile %s/%s.ini (edgemon-agent --detect shows "
             "what this board is; board = auto picks it)",
             cfg->board, dir, cfg->board);
  } else if (rc == -EINVAL) {
    EM_ERROR("cannot start: board '%s': the profile does not parse", cfg->board);
  } else {
    EM_ERROR("cannot start: board '%s': cannot read the profiles in %s: %s", cfg->board, dir,
             strerror(-rc));
  }
  return -1;
}

int main(int argc, char **argv) {
  enum { OPT_CHECK = 256, OPT_DETECT, OPT_ROOT, OPT_BOARDS };
  static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
                                       {"check", no_argument, NULL, OPT_CHECK},
                                       {"detect", no_argument, NULL, OPT_DETECT},
                                       {"root", required_argument, NULL, OPT_ROOT},
                                       {"boards", required_argument, NULL, OPT_BOARDS},
                                       {"log-level", required_argument, NULL, 'l'},
                                       {"version", no_argument, NULL, 'V'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  const char *config = NULL, *level_arg = NULL;
  const char *root_arg = NULL, *boards_arg = NULL;
  bool check = false, detect = false;
  /* Before anything is written: a write past RLIMIT_FSIZE (the spool, or a log file as stdout,
   * on a full disk) fails with EFBIG instead of killing the agent. */
  signal(SIGPIPE, SIG_IGN);
  signal(SIGXFSZ, SIG_IGN);
  opterr = 0;
  for (;;) {
    int c = getopt_long(argc, argv, ":c:l:Vh", opts, NULL);
    if (c == -1) {
      break;
    }
    switch (c) {
    case 'c':
      config = optarg;
      break;
    case 'l':
      level_arg = optarg;
      break;
    case OPT_CHECK:
      check = true;
      break;
    case OPT_DETECT:
      detect = true;
      break;
    case OPT_ROOT:
      root_arg = optarg;
      break;
    case OPT_BOARDS:
      boards_arg = optarg;
      break;
    case 'V':
      printf("edgemon-agent %s\n", EM_VERSION);
      return 0;
    case 'h':
      fputs(usage_text, stdout);
      return 0;
    case ':':
      fprintf(stderr, "edgemon-agent: option '%s' needs a value\n\n%s", argv[optind - 1],
              usage_text);
      return 2;
    default:
      fprintf(stderr, "edgemon-agent: unknown option '%s'\n\n%s", argv[optind - 1], usage_text);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "edgemon-agent: unexpected argument '%s'\n\n%s", argv[optind], usage_text);
    return 2;
  }
  if (detect) {
    return detect_board(root_arg ? root_arg : "/", boards_dir(boards_arg));
  }
  if (root_arg) {
    fprintf(stderr, "edgemon-agent: --root goes with --detect\n\n%s", usage_text);
    return 2;
  }
  if (!config) {
    fprintf(stderr, "edgemon-agent: --config FILE is required\n\n%s", usage_text);
    return 2;
  }
  em_log_level_t level = EM_LOG_INFO;
  if (level_arg && em_log_parse_level(level_arg, &level) != 0) {
    fprintf(stderr, "edgemon-agent: --log-level must be error, warn, info or debug\n");
    return 2;
  }
  em_config_t cfg;
  int n_errors = 0;
  int rc = em_config_load(config, &cfg, print_error, NULL, &n_errors);
  if (check) {
    if (rc == 0) {
      printf("%s: ok\n", config);
      return 0;
    }
    if (n_errors > 0) {
      fprintf(stderr, "%s: %d problem%s\n", config, n_errors, n_errors == 1 ? "" : "s");
    }
    return 1;
  }
  if (rc) {
    return 1;
  }
  em_log_set_level(level_arg ? level : cfg.log_level);
  const em_board_profile_t *board = NULL;
  if (resolve_board(&cfg, boards_dir(boards_arg), &board) != 0) {
    return 1;
  }
  return run(&cfg, board, config, level_arg);
}
