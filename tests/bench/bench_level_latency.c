/*
 * bench_level_latency.c - how long after a span that misses a hard deadline a client sees the
 * new level: from the send() of the datagram to the state page saying DEGRADED, read the way
 * a client reads it (em_client_level, firmware/client/c/edgemon_client.h), and the same
 * through a level push datagram (em_client_subscribe + em_client_wait_change).
 *
 * It starts the real agent (--agent) with a temporary config and runtime dir, targeting this
 * process, with `[budget.infer] deadline = 50ms, level = DEGRADED` and one 1 ms window to
 * enter and to leave. Each trial: CLOCK_MONOTONIC, then one 120 ms "infer" span (over the
 * deadline), then spin on em_client_level() until DEGRADED; the latency is the difference.
 * Then 10 ms spans every ~1 ms until the level is NOMINAL again (not timed). The broker is a
 * closed 127.0.0.1 port: the agent retries and keeps evaluating. The bench runs on CPU 0 and
 * the agent on CPU 1 when both are allowed.
 *
 * --idle-us N waits N us after the level is NOMINAL again before the next trial, so the trial
 * meets an agent that has been asleep (default 0: the next trial follows at once).
 *
 *   bench_level_latency [--agent PATH] [--trials N] [--push-trials M] [--idle-us N]
 */
#define _GNU_SOURCE

#include "edgemon_client.h"
#include "bench_clock.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEADLINE_NS  50000000ull   /* [budget.infer] deadline. */
#define SLOW_NS      120000000ull  /* A span over it. */
#define FAST_NS      10000000ull   /* A span within it. */
#define TRIAL_WAIT   2000000000ull /* Longest wait for a level change before a trial fails. */
#define RECOVER_WAIT 5000000000ull /* Longest wait for NOMINAL after a trial. */

static char tmp_dir[64];     /* mkdtemp'd; "" when none. */
static char run_dir[96];     /* <tmp>/run: the agent's runtime_dir. */
static char config_path[96]; /* <tmp>/agent.ini */
static char log_path[96];    /* <tmp>/agent.log */
static volatile pid_t agent_pid = -1;
static uint64_t idle_ns; /* --idle-us: sleep after each recovery. */

static uint64_t now_ns(void) {
  return em_client_now_ns();
}

static void sleep_ns(uint64_t ns) {
  struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                        .tv_nsec = (long)(ns % 1000000000ull)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Stops the agent (SIGTERM, then SIGKILL after 5 s) and removes the temporary files. Only
 * async-signal-safe calls besides opendir/readdir (not reached from a signal on the hot path). */
static void cleanup(void) {
  pid_t pid = agent_pid;
  if (pid > 0) {
    agent_pid = -1;
    kill(pid, SIGTERM);
    for (int i = 0; i < 500; i++) {
      if (waitpid(pid, NULL, WNOHANG) == pid) {
        pid = -1;
        break;
      }
      usleep(10000);
    }
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
    }
  }
  if (tmp_dir[0] != '\0') {
    DIR *d = opendir(run_dir);
    if (d != NULL) {
      struct dirent *e;
      char p[384];
      while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
          snprintf(p, sizeof(p), "%s/%s", run_dir, e->d_name);
          unlink(p);
        }
      }
      closedir(d);
    }
    rmdir(run_dir);
    unlink(config_path);
    unlink(log_path);
    rmdir(tmp_dir);
    tmp_dir[0] = '\0';
  }
}

static void on_signal(int sig) {
  cleanup();
  signal(sig, SIG_DFL);
  raise(sig);
}

/* The agent's log, for a failure. */
static void dump_log(void) {
  FILE *f = fopen(log_path, "r");
  char line[512];
  if (f == NULL) {
    return;
  }
  fprintf(stderr, "--- agent log (%s) ---\n", log_path);
  while (fgets(line, sizeof(line), f) != NULL) {
    fputs(line, stderr);
  }
  fclose(f);
}

static void die(const char *what) {
  fprintf(stderr, "bench_level_latency: %s\n", what);
  if (agent_pid > 0) {
    dump_log();
  }
  cleanup();
  exit(1);
}

/* A 127.0.0.1 port nobody listens on: bound, read back, closed. */
static int closed_port(void) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(sa);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int port = 1;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
      getsockname(fd, (struct sockaddr *)&sa, &len) == 0) {
    port = ntohs(sa.sin_port);
  }
  if (fd >= 0) {
    close(fd);
  }
  return port;
}

static void machine_line(void) {
  struct utsname u;
  char model[256] = "unknown CPU";
  char line[512];
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f != NULL) {
    while (fgets(line, sizeof(line), f) != NULL) {
      char *colon = strchr(line, ':');
      if (strncmp(line, "model name", 10) == 0 && colon != NULL) {
        snprintf(model, sizeof(model), "%s", colon + 2);
        model[strcspn(model, "\n")] = '\0';
        break;
      }
    }
    fclose(f);
  }
  if (uname(&u) != 0) {
    memset(&u, 0, sizeof(u));
  }
  printf("machine: %s %s %s, %s, %ld CPUs online\n", u.sysname, u.release, u.machine, model,
         sysconf(_SC_NPROCESSORS_ONLN));
}

/* Nearest rank: the smallest value with at least p of the samples at or below it. */
static double pct_us(const uint64_t *sorted, size_t n, double p) {
  return (double)bench_percentile(sorted, n, p) / 1000.0;
}

/* Prints one row; returns p99 in us (-1 with no sample). */
static double report(const char *name, uint64_t *lat, size_t n, size_t failed) {
  if (n == 0) {
    printf("%-28s no successful trial (%zu timed out)\n", name, failed);
    return -1;
  }
  qsort(lat, n, sizeof(lat[0]), bench_cmp_u64);
  printf("%-28s %7zu %9.1f %9.1f %9.1f %9.1f %9.1f   %zu\n", name, n, pct_us(lat, n, 0.50),
         pct_us(lat, n, 0.90), pct_us(lat, n, 0.99), pct_us(lat, n, 0.999),
         (double)lat[n - 1] / 1000.0, failed);
  return pct_us(lat, n, 0.99);
}

static int span(em_client_t *c, uint64_t duration_ns) {
  uint64_t t = now_ns();
  return em_client_record(c, "infer", t - duration_ns, duration_ns);
}

/* Spans within the deadline every ~1 ms until the page says NOMINAL, then --idle-us of sleep.
 * 0, or -1 on timeout. */
static int recover(em_client_t *c) {
  uint64_t end = now_ns() + RECOVER_WAIT;
  while (now_ns() < end) {
    uint64_t next = now_ns() + 1000000ull;
    (void)span(c, FAST_NS);
    while (now_ns() < next) {
      if (em_client_level(c) == EM_CLIENT_LEVEL_NOMINAL) {
        if (idle_ns > 0) {
          sleep_ns(idle_ns);
        }
        return 0;
      }
    }
  }
  return -1;
}

static long parse_count(const char *s, const char *flag) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < 0 || v > 100000000) {
    fprintf(stderr, "bench_level_latency: %s needs a count, not '%s'\n", flag, s);
    exit(2);
  }
  return v;
}

static pid_t start_agent(const char *agent, int agent_cpu) {
  pid_t pid = fork();
  if (pid < 0) {
    die("fork failed");
  }
  if (pid == 0) {
    int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* the bench killed outright takes the agent along */
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    if (agent_cpu >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(agent_cpu, &set);
      (void)sched_setaffinity(0, sizeof(set), &set);
    }
    execl(agent, agent, "--config", config_path, (char *)NULL);
    fprintf(stderr, "exec %s: %s\n", agent, strerror(errno));
    _exit(127);
  }
  return pid;
}

int main(int argc, char **argv) {
  const char *agent = "build-bench/firmware/agent/edgemon-agent";
  long trials = 10000;
  long push_trials = 1000;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--agent") == 0 && i + 1 < argc) {
      agent = argv[++i];
    } else if (strcmp(argv[i], "--trials") == 0 && i + 1 < argc) {
      trials = parse_count(argv[++i], "--trials");
    } else if (strcmp(argv[i], "--push-trials") == 0 && i + 1 < argc) {
      push_trials = parse_count(argv[++i], "--push-trials");
    } else if (strcmp(argv[i], "--idle-us") == 0 && i + 1 < argc) {
      idle_ns = (uint64_t)parse_count(argv[++i], "--idle-us") * 1000ull;
    } else {
      printf("usage: %s [--agent PATH] [--trials N] [--push-trials M] [--idle-us N]\n"
             "  --agent        edgemon-agent binary (default %s)\n"
             "  --trials       deadline misses timed through the state page (default 10000)\n"
             "  --push-trials  the same through level push datagrams (default 1000; 0: none)\n"
             "  --idle-us      sleep after each recovery, before the next trial (default 0)\n",
             argv[0], agent);
      return strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  if (access(agent, X_OK) != 0) {
    fprintf(stderr, "bench_level_latency: no agent binary at %s (--agent)\n", agent);
    return 1;
  }

  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGHUP, on_signal);
  signal(SIGPIPE, SIG_IGN);

  snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/emlat-XXXXXX");
  if (mkdtemp(tmp_dir) == NULL) {
    tmp_dir[0] = '\0';
    die("mkdtemp failed");
  }
  snprintf(run_dir, sizeof(run_dir), "%s/run", tmp_dir);
  snprintf(config_path, sizeof(config_path), "%s/agent.ini", tmp_dir);
  snprintf(log_path, sizeof(log_path), "%s/agent.log", tmp_dir);

  FILE *cf = fopen(config_path, "w");
  if (cf == NULL) {
    die("cannot write the config");
  }
  fprintf(cf,
          "[agent]\ndevice_id = bench-level\nsample_period = 1ms\nruntime_dir = %s\n"
          "log_level = warn\n"
          "[target]\npid = %ld\n"
          "[mqtt]\nbroker = mqtt://127.0.0.1:%d\nreconnect_min = 1s\nreconnect_max = 5s\n"
          "[budget.infer]\ndeadline = 50ms\nlevel = DEGRADED\n"
          "[degrade]\nwindow = 1ms\nenter_windows = 1\nleave_windows = 1\n",
          run_dir, (long)getpid(), closed_port());
  if (fclose(cf) != 0) {
    die("cannot write the config");
  }

  /* Pinning: the bench on CPU 0, the agent on CPU 1, when both are ours to use. */
  cpu_set_t allowed;
  int agent_cpu = -1;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0 && CPU_ISSET(0, &allowed) &&
      CPU_ISSET(1, &allowed)) {
    cpu_set_t mine;
    CPU_ZERO(&mine);
    CPU_SET(0, &mine);
    if (sched_setaffinity(0, sizeof(mine), &mine) == 0) {
      agent_cpu = 1;
    }
  }

  agent_pid = start_agent(agent, agent_cpu);
  machine_line();
  if (agent_cpu == 1) {
    printf("pinning: bench on CPU 0, agent (pid %ld) on CPU 1\n", (long)agent_pid);
  } else {
    printf("pinning: none (CPUs 0 and 1 are not both available); bench and agent float\n");
  }
  printf("agent: %s; sample_period 1ms, [degrade] window 1ms, enter/leave_windows 1; "
         "[budget.infer] deadline 50ms -> DEGRADED; broker: a closed port\n",
         agent);

  /* Wait for the page (NOMINAL) and the span socket. */
  char state_path[160];
  char sock_path[160];
  snprintf(state_path, sizeof(state_path), "%s/state", run_dir);
  snprintf(sock_path, sizeof(sock_path), "%s/spans.sock", run_dir);
  em_client_t c;
  int level = EM_CLIENT_LEVEL_UNKNOWN;
  uint64_t give_up = now_ns() + 10000000000ull;
  while (now_ns() < give_up) {
    int st;
    if (waitpid(agent_pid, &st, WNOHANG) == agent_pid) {
      agent_pid = -1;
      dump_log();
      die("the agent exited at start");
    }
    if (access(state_path, F_OK) == 0 && access(sock_path, F_OK) == 0) {
      break;
    }
    sleep_ns(10000000ull);
  }
  if (em_client_open(&c, sock_path) != 0 || em_client_set_state_path(&c, state_path) != 0) {
    die("em_client_open failed");
  }
  while (now_ns() < give_up &&
         ((level = em_client_level(&c)) != EM_CLIENT_LEVEL_NOMINAL || c.fd < 0)) {
    if (c.fd < 0) {
      (void)span(&c, FAST_NS); /* reconnects once per second */
    }
    sleep_ns(10000000ull);
  }
  if (level != EM_CLIENT_LEVEL_NOMINAL || c.fd < 0) {
    die("no NOMINAL state page and span socket within 10 s");
  }

  uint64_t *lat = calloc((size_t)(trials > push_trials ? trials : push_trials) + 1, sizeof(*lat));
  if (lat == NULL) {
    die("out of memory");
  }

  /* Warm-up: a few trials, not counted. */
  for (int i = 0; i < 20; i++) {
    (void)span(&c, SLOW_NS);
    uint64_t end = now_ns() + TRIAL_WAIT;
    while (em_client_level(&c) != EM_CLIENT_LEVEL_DEGRADED && now_ns() < end) {
    }
    if (recover(&c) != 0) {
      die("warm-up: the level did not return to NOMINAL within 5 s");
    }
  }

  printf("\nsend() of a span over the deadline -> the level DEGRADED visible to the client, us\n");
  printf("%-28s %7s %9s %9s %9s %9s %9s   %s\n", "path", "trials", "p50", "p90", "p99", "p99.9",
         "max", "timed out");

  /* The state page, read by spinning on em_client_level(). */
  size_t n = 0;
  size_t failed = 0;
  uint64_t drops_before = em_client_dropped_total(&c);
  for (long t = 0; t < trials; t++) {
    uint64_t t0 = now_ns();
    (void)em_client_record(&c, "infer", t0 - SLOW_NS, SLOW_NS);
    uint64_t end = t0 + TRIAL_WAIT;
    uint64_t t1;
    int got = 0;
    do {
      if (em_client_level(&c) == EM_CLIENT_LEVEL_DEGRADED) {
        got = 1;
      }
      t1 = now_ns();
    } while (!got && t1 < end);
    if (got) {
      lat[n++] = t1 - t0;
    } else {
      failed++;
    }
    if (recover(&c) != 0) {
      die("the level did not return to NOMINAL within 5 s");
    }
  }
  double page_p99 = report("state page (em_client_level)", lat, n, failed);
  size_t page_ok = n;

  /* The push datagram: em_client_subscribe once, then em_client_wait_change per trial. */
  if (push_trials > 0) {
    em_client_state_t st;
    memset(&st, 0, sizeof(st));
    size_t pn = 0;
    size_t pfailed = 0;
    if (em_client_subscribe(&c) != 0) {
      die("em_client_subscribe failed");
    }
    sleep_ns(50000000ull);
    for (long t = 0; t < push_trials; t++) {
      while (em_client_wait_change(&c, 0, &st) == 0) { /* pushes of the last recovery */
      }
      uint64_t t0 = now_ns();
      (void)em_client_record(&c, "infer", t0 - SLOW_NS, SLOW_NS);
      uint64_t t1 = t0;
      int got = 0;
      while (!got && t1 < t0 + TRIAL_WAIT) {
        int rc = em_client_wait_change(&c, (int)((t0 + TRIAL_WAIT - t1) / 1000000ull) + 1, &st);
        t1 = now_ns();
        if (rc == 0 && st.level == EM_CLIENT_LEVEL_DEGRADED) {
          got = 1;
        } else if (rc != 0 && rc != -ETIMEDOUT) {
          break;
        }
      }
      if (got) {
        lat[pn++] = t1 - t0;
      } else {
        pfailed++;
      }
      if (recover(&c) != 0) {
        die("the level did not return to NOMINAL within 5 s");
      }
    }
    (void)em_client_unsubscribe(&c);
    report("push (em_client_wait_change)", lat, pn, pfailed);
  }
  if (page_p99 >= 0) {
    printf("goal (issue): state page p99 under 1000 us: %s (p99 %.1f us)\n",
           page_p99 < 1000.0 ? "met" : "NOT met", page_p99);
  }
  printf("span datagrams dropped at the client: %llu\n",
         (unsigned long long)(em_client_dropped_total(&c) - drops_before));

  em_client_close(&c);
  free(lat);
  cleanup();
  return page_ok > 0 ? 0 : 1;
}
