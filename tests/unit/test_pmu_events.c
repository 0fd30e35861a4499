/*
 * test_pmu_events.c - unit tests for event resolution (firmware/agent/collect/pmu_events.c).
 *
 * Against the board fixture trees (tests/fixtures/boards/<board>/sys/bus/event_source):
 * resolution tables (event -> PMU, type, config words, CPUs), the events each board profile
 * lists (boards/<board>.ini [pmu] events, read with a small reader here; every listed event
 * must resolve against that board's tree), the heterogeneous TX2 case (two entries with
 * disjoint CPUs), the CPU PMUs of each arm64 board partitioning its proc/cpuinfo processors,
 * and error tables (exact errno and a piece of the message). Against trees
 * built in mkdtemp directories: garbage in type/cpus/format/events files, oversized files,
 * directories and FIFOs where files should be: an error naming the file, never a crash or
 * a hang. The parsers (format, cpus, encode) have their own tables.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pmu_events.h"

#define BOARDS_DIR   EM_FIXTURES_DIR "/boards"
#define PROFILES_DIR EM_FIXTURES_DIR "/../../boards"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static void board_root(char *buf, size_t cap, const char *board) {
  int n = snprintf(buf, cap, "%s/%s", BOARDS_DIR, board);
  assert_true(n > 0 && (size_t)n < cap);
}

/* em_pmu_events_resolve() of `event` on the fixture tree of `board`. */
static int resolve_on(const char *board, const char *event, em_pmu_events_t *out) {
  char root[512];
  board_root(root, sizeof(root), board);
  return em_pmu_events_resolve(root, event, out);
}

/* ---- every board resolves its events --------------------------------------------------------- */

typedef struct {
  const char *board;
  const char *events[20];
} board_events_t;

/* What each board's profile is expected to list (and more), used whether or not
   boards/<board>.ini exists yet. */
static const board_events_t board_lists[] = {
    {"jetson-agx-orin",
     {"cycles", "instructions", "cache-misses", "branch-misses", "l1d_cache_refill",
      "l2d_cache_refill", "ll_cache_miss_rd", "stall_backend", "stall_frontend", "r0011",
      "armv8_cortex_a78/inst_retired/", "armv8_cortex_a78/event=0x37/", NULL}},
    {"jetson-orin-nano",
     {"cycles", "instructions", "l1d_cache_refill", "l2d_cache_refill", "ll_cache_miss_rd",
      "stall_backend", "stall_frontend", "r0008", NULL}},
    {"jetson-agx-xavier",
     {"cycles", "instructions", "l1d_cache_refill", "l2d_cache_refill", "stall_backend",
      "stall_frontend", "br_mis_pred", "armv8_pmuv3/cpu_cycles/", NULL}},
    {"jetson-xavier-nx",
     {"cycles", "instructions", "l1d_cache_refill", "l2d_cache_refill", "stall_backend", NULL}},
    {"jetson-nano",
     {"cycles", "instructions", "cache-misses", "l1d_cache_refill", "l2d_cache_refill",
      "br_mis_pred", "bus_cycles", "armv8_cortex_a57/event=0x3ff/", NULL}},
    {"jetson-tx2",
     {"cycles", "instructions", "l1d_cache_refill", "l2d_cache_refill", "br_mis_pred", "cpu_cycles",
      "inst_retired", "armv8_nvidia_denver/l2d_cache/", NULL}},
    {"raspberry-pi-5",
     {"cycles", "instructions", "l1d_cache_refill", "l2d_cache_refill", "ll_cache_miss_rd",
      "stall_backend", "stall_frontend", "l3d_cache_refill", NULL}},
    {"generic-arm64",
     {"cycles", "instructions", "l1d_cache_refill", "l2d_cache_refill", "ll_cache_miss_rd",
      "stall_backend", "stall_frontend", "remote_access", "armv8_pmuv3_0/long,event=0x11/", NULL}},
    {"generic-x86_64",
     {"cycles", "instructions", "cache-misses", "ref-cycles", "mem-loads", "mem-stores",
      "topdown-fetch-bubbles", "cpu/event=0x3c,umask=0x0/", "r01c2", NULL}},
};

static void board_lists_resolve(void **state) {
  (void)state;
  for (size_t b = 0; b < ARRAY_LEN(board_lists); b++) {
    char root[512];
    board_root(root, sizeof(root), board_lists[b].board);
    for (size_t i = 0; board_lists[b].events[i] != NULL; i++) {
      em_pmu_events_t out;
      int rc = em_pmu_events_resolve(root, board_lists[b].events[i], &out);
      if (rc != 0) {
        fail_msg("%s: %s: %s", board_lists[b].board, board_lists[b].events[i], out.error);
      }
      assert_true(out.n >= 1);
      assert_string_equal(out.error, "");
    }
  }
}

/* Trims white space at both ends in place. */
static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') {
    s++;
  }
  size_t n = strlen(s);
  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n')) {
    s[--n] = '\0';
  }
  return s;
}

/*
 * Reads the [pmu] events value of a profile (libinih rules that matter here: ';' starts an
 * inline comment after white space, indented lines continue the value). Returns the number
 * of bytes in value (0: no events key).
 */
static size_t profile_events(const char *path, char *value, size_t cap) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char line[1024];
  bool in_pmu = false;
  bool in_events = false;
  value[0] = '\0';
  while (fgets(line, sizeof(line), f) != NULL) {
    bool indented = line[0] == ' ' || line[0] == '\t';
    char *semi = strstr(line, " ;");
    if (semi != NULL) {
      *semi = '\0';
    }
    char *s = trim(line);
    if (s[0] == ';' || s[0] == '#') {
      continue;
    }
    if (s[0] == '[') {
      in_pmu = strncmp(s, "[pmu]", 5) == 0;
      in_events = false;
      continue;
    }
    if (!in_pmu || s[0] == '\0') {
      continue;
    }
    if (indented && in_events) {
      strncat(value, ",", cap - strlen(value) - 1);
      strncat(value, s, cap - strlen(value) - 1);
      continue;
    }
    char *eq = strchr(s, '=');
    in_events = false;
    if (eq == NULL) {
      continue;
    }
    *eq = '\0';
    if (strcmp(trim(s), "events") == 0) {
      snprintf(value, cap, "%s", trim(eq + 1));
      in_events = true;
    }
  }
  fclose(f);
  return strlen(value);
}

static void board_profiles_resolve(void **state) {
  (void)state;
  DIR *d = opendir(PROFILES_DIR);
  size_t profiles = 0;
  size_t events = 0;
  struct dirent *de;
  while (d != NULL && (de = readdir(d)) != NULL) {
    size_t len = strlen(de->d_name);
    if (len < 5 || strcmp(de->d_name + len - 4, ".ini") != 0) {
      continue;
    }
    char board[128];
    snprintf(board, sizeof(board), "%.*s", (int)(len - 4), de->d_name);
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", PROFILES_DIR, de->d_name);
    char value[2048];
    if (profile_events(path, value, sizeof(value)) == 0) {
      continue;
    }
    profiles++;
    char root[512];
    board_root(root, sizeof(root), board);
    char *save = NULL;
    for (char *tok = strtok_r(value, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
      char *ev = trim(tok);
      if (ev[0] == '\0') {
        continue;
      }
      em_pmu_events_t out;
      int rc = em_pmu_events_resolve(root, ev, &out);
      if (rc != 0) {
        fail_msg("boards/%s.ini: event '%s' does not resolve against %s: %s", board, ev, root,
                 out.error);
      }
      events++;
    }
  }
  if (d != NULL) {
    closedir(d);
  }
  print_message("board profiles: %zu with [pmu] events, %zu events resolved\n", profiles, events);
}

/* The CPU PMUs of each arm64 board cover exactly the processors of its proc/cpuinfo, each
   CPU once: cpu_cycles (every PMUv3 core has it) resolves to PMUs whose CPU sets partition
   0..n-1. */
static void pmu_cpus_partition_cpuinfo(void **state) {
  (void)state;
  for (size_t b = 0; b < ARRAY_LEN(board_lists); b++) {
    const char *board = board_lists[b].board;
    if (strcmp(board, "generic-x86_64") == 0) {
      continue;
    }
    char root[512];
    char path[600];
    board_root(root, sizeof(root), board);
    snprintf(path, sizeof(path), "%s/proc/cpuinfo", root);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[512];
    unsigned nproc = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
      nproc += strncmp(line, "processor", 9) == 0;
    }
    fclose(f);
    em_pmu_events_t out;
    assert_int_equal(em_pmu_events_resolve(root, "cpu_cycles", &out), 0);
    em_pmu_events_cpus_t seen;
    memset(&seen, 0, sizeof(seen));
    for (size_t i = 0; i < out.n; i++) {
      assert_false(out.e[i].any_cpu);
      for (unsigned cpu = 0; cpu < EM_PMU_EVENTS_MAX_CPUS; cpu++) {
        if (!em_pmu_events_cpu_isset(&out.e[i].cpus, cpu)) {
          continue;
        }
        if (cpu >= nproc || em_pmu_events_cpu_isset(&seen, cpu)) {
          fail_msg("%s: CPU %u of %s not in cpuinfo (%u CPUs) or twice", board, cpu, out.e[i].pmu,
                   nproc);
        }
        seen.bits[cpu / 64] |= UINT64_C(1) << (cpu % 64);
      }
    }
    if (em_pmu_events_cpu_count(&seen) != nproc) {
      fail_msg("%s: PMUs cover %u CPUs, cpuinfo has %u", board, em_pmu_events_cpu_count(&seen),
               nproc);
    }
  }
}

/* ---- resolution table ---------------------------------------------------------------------- */

typedef struct {
  const char *board;
  const char *event;
  const char *pmu; /* of e[0] */
  uint32_t type;
  uint64_t config, config1;
  const char *cpus; /* NULL: any_cpu */
} resolve_case_t;

static const resolve_case_t resolve_cases[] = {
    {"jetson-agx-orin", "l1d_cache_refill", "armv8_cortex_a78", 8, 0x03, 0, "0-11"},
    {"jetson-agx-orin", "L2D_CACHE_REFILL", "armv8_cortex_a78", 8, 0x17, 0, "0-11"},
    {"jetson-agx-orin", "ll_cache_miss_rd", "armv8_cortex_a78", 8, 0x37, 0, "0-11"},
    {"jetson-agx-orin", "stall_backend", "armv8_cortex_a78", 8, 0x24, 0, "0-11"},
    {"jetson-agx-orin", "armv8_cortex_a78/stall_frontend/", "armv8_cortex_a78", 8, 0x23, 0, "0-11"},
    {"jetson-agx-orin", "armv8_cortex_a78/event=0x4004,long/", "armv8_cortex_a78", 8, 0x4004, 1,
     "0-11"},
    {"jetson-agx-orin", "armv8_cortex_a78/config=0x1234,config1=7/", "armv8_cortex_a78", 8, 0x1234,
     7, "0-11"},
    {"jetson-orin-nano", "inst_retired", "armv8_cortex_a78", 8, 0x08, 0, "0-5"},
    {"jetson-agx-xavier", "br_mis_pred", "armv8_pmuv3", 8, 0x10, 0, "0-7"},
    {"jetson-nano", "cpu_cycles", "armv8_cortex_a57", 8, 0x11, 0, "0-3"},
    {"jetson-nano", "armv8_cortex_a57/event=1023/", "armv8_cortex_a57", 8, 0x3ff, 0, "0-3"},
    {"raspberry-pi-5", "l3d_cache_refill", "armv8_cortex_a76", 8, 0x2a, 0, "0-3"},
    {"generic-arm64", "remote_access", "armv8_pmuv3_0", 8, 0x31, 0, "0-79"},
    {"generic-x86_64", "mem-loads", "cpu", 4, 0x1cd, 3, NULL},
    {"generic-x86_64", "cache-references", "", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES,
     0, NULL},
    {"generic-x86_64", "cpu/cache-misses/", "cpu", 4, 0x412e, 0, NULL},
    {"generic-x86_64", "cpu/mem-loads,ldlat=0x40/", "cpu", 4, 0x1cd, 0x40, NULL},
    {"generic-x86_64", "cpu/cpu-cycles,umask=2/", "cpu", 4, 0x23c, 0, NULL},
    {"generic-x86_64", "cpu/event=0xc0,edge,inv,cmask=2/", "cpu", 4, 0x028400c0, 0, NULL},
    {"generic-x86_64", "cpu/offcore_rsp=0xffffffffffffffff,event=0xb7,umask=1/", "cpu", 4, 0x1b7,
     UINT64_MAX, NULL},
    {"generic-x86_64", "r01c2", "", PERF_TYPE_RAW, 0x1c2, 0, NULL},
    {"jetson-tx2", "rffffffffffffffff", "", PERF_TYPE_RAW, UINT64_MAX, 0, NULL},
    {"jetson-tx2", "cycles", "", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, 0, NULL},
    {"jetson-tx2", "task-clock", "", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, 0, NULL},
    {"jetson-tx2", "armv8_cortex_a57/br_mis_pred/", "armv8_cortex_a57", 9, 0x10, 0, "0,3-5"},
};

static void resolve_table(void **state) {
  (void)state;
  for (size_t i = 0; i < ARRAY_LEN(resolve_cases); i++) {
    const resolve_case_t *c = &resolve_cases[i];
    em_pmu_events_t out;
    int rc = resolve_on(c->board, c->event, &out);
    if (rc != 0) {
      fail_msg("%s %s: %d %s", c->board, c->event, rc, out.error);
    }
    assert_int_equal(out.n, 1);
    const em_pmu_events_entry_t *e = &out.e[0];
    assert_string_equal(e->pmu, c->pmu);
    assert_int_equal(e->type, c->type);
    assert_int_equal(e->config, c->config);
    assert_int_equal(e->config1, c->config1);
    assert_int_equal(e->config2, 0);
    if (c->cpus == NULL) {
      assert_true(e->any_cpu);
      assert_int_equal(em_pmu_events_cpu_count(&e->cpus), 0);
    } else {
      em_pmu_events_cpus_t want;
      assert_int_equal(em_pmu_events_parse_cpus(c->cpus, &want), 0);
      assert_false(e->any_cpu);
      assert_memory_equal(&e->cpus, &want, sizeof(want));
    }
  }
}

/* TX2: Denver (CPUs 1-2) and Cortex-A57 (0, 3-5) are two PMUs; a name both have resolves to
   two entries, one per PMU, each with its own type and CPUs, together covering all six. */
static void tx2_event_in_both_pmus_gives_two_entries(void **state) {
  (void)state;
  char root[512];
  board_root(root, sizeof(root), "jetson-tx2");
  static const char *const names[] = {"cpu_cycles", "inst_retired", "l1d_cache_refill"};
  static const uint64_t configs[] = {0x11, 0x08, 0x03};
  for (size_t i = 0; i < ARRAY_LEN(names); i++) {
    em_pmu_events_t out;
    assert_int_equal(em_pmu_events_resolve(root, names[i], &out), 0);
    assert_int_equal(out.n, 2);
    assert_string_equal(out.e[0].pmu, "armv8_cortex_a57");
    assert_string_equal(out.e[1].pmu, "armv8_nvidia_denver");
    assert_int_equal(out.e[0].type, 9);
    assert_int_equal(out.e[1].type, 8);
    unsigned total = 0;
    for (unsigned cpu = 0; cpu < 8; cpu++) {
      bool a57 = em_pmu_events_cpu_isset(&out.e[0].cpus, cpu);
      bool denver = em_pmu_events_cpu_isset(&out.e[1].cpus, cpu);
      assert_false(a57 && denver);
      total += (unsigned)a57 + (unsigned)denver;
    }
    assert_int_equal(total, 6);
    assert_true(em_pmu_events_cpu_isset(&out.e[1].cpus, 1));
    assert_true(em_pmu_events_cpu_isset(&out.e[1].cpus, 2));
    for (size_t k = 0; k < 2; k++) {
      assert_int_equal(out.e[k].config, configs[i]);
      assert_false(out.e[k].any_cpu);
    }
  }
  /* An event only the A57 PMU lists resolves to the A57 alone. */
  em_pmu_events_t out;
  assert_int_equal(em_pmu_events_resolve(root, "l2d_cache_wb", &out), 0);
  assert_int_equal(out.n, 1);
  assert_string_equal(out.e[0].pmu, "armv8_cortex_a57");
}

/* ---- errors ---------------------------------------------------------------------------------- */

typedef struct {
  const char *board;
  const char *event;
  int rc;
  const char *msg; /* A piece of out.error. */
} error_case_t;

static const error_case_t error_cases[] = {
    {"jetson-agx-orin", "nosuch_event", -ENOENT, "CPU PMUs armv8_cortex_a78"},
    {"jetson-tx2", "stall_backend", -ENOENT, "armv8_cortex_a57, armv8_nvidia_denver"},
    {"jetson-nano", "ll_cache_miss_rd", -ENOENT, "not in events/"},
    {"jetson-agx-orin", "nosuchpmu/event=1/", -ENOENT, "no PMU 'nosuchpmu'"},
    {"jetson-agx-orin", "armv8_cortex_a78/event=zz/", -EINVAL, "bad value 'zz'"},
    {"jetson-agx-orin", "armv8_cortex_a78/umask=1/", -EINVAL, "no format 'umask'"},
    {"jetson-agx-orin", "armv8_cortex_a78/nosuch/", -EINVAL, "no format 'nosuch'"},
    {"jetson-agx-orin", "armv8_cortex_a78/event=0x10000/", -ERANGE, "too wide for 'event'"},
    {"jetson-agx-orin", "armv8_cortex_a78/long=2/", -ERANGE, "(1 bits: config1:0)"},
    {"jetson-nano", "armv8_cortex_a57/event=0x400/", -ERANGE, "(10 bits: config:0-9)"},
    {"jetson-agx-orin", "armv8_cortex_a78/event=1/u", -EINVAL, "modifiers"},
    {"jetson-agx-orin", "armv8_cortex_a78/event=1", -EINVAL, "closing '/'"},
    {"jetson-agx-orin", "armv8_cortex_a78//", -EINVAL, "no event or terms"},
    {"jetson-agx-orin", "armv8_cortex_a78/event=1,,long/", -EINVAL, "empty term"},
    {"jetson-agx-orin", "armv8_cortex_a78/event=99999999999999999999999/", -EINVAL, "bad value"},
    {"jetson-agx-orin", "armv8_cortex_a78/event=?/", -EINVAL, "needs a value"},
    {"jetson-agx-orin", "../../../etc/event=1/", -EINVAL, "bad PMU name"},
    {"jetson-agx-orin", "/event=1/", -EINVAL, "bad PMU name"},
    {"jetson-agx-orin", "", -EINVAL, "empty event"},
    {"jetson-agx-orin", "l1d cache", -EINVAL, "not an event name"},
    {"jetson-agx-orin", "r", -ENOENT, "unknown event 'r'"},
    {"jetson-agx-orin", "r12345678901234567", -ENOENT, "unknown event"},
    {"jetson-agx-orin", "r00g1", -ENOENT, "unknown event"},
    {"no-such-board", "l1d_cache", -ENOENT, "cannot list PMUs"},
};

static void error_table(void **state) {
  (void)state;
  for (size_t i = 0; i < ARRAY_LEN(error_cases); i++) {
    const error_case_t *c = &error_cases[i];
    em_pmu_events_t out;
    int rc = resolve_on(c->board, c->event, &out);
    if (rc != c->rc || strstr(out.error, c->msg) == NULL) {
      fail_msg("'%s': got %d '%s', want %d '%s'", c->event, rc, out.error, c->rc, c->msg);
    }
    assert_int_equal(out.n, 0);
  }
}

static void null_and_long_arguments_are_errors(void **state) {
  (void)state;
  em_pmu_events_t out;
  assert_int_equal(em_pmu_events_resolve(NULL, "cycles", &out), -EINVAL);
  assert_non_null(strstr(out.error, "no root"));
  assert_int_equal(em_pmu_events_resolve("/", NULL, &out), -EINVAL);
  assert_int_equal(em_pmu_events_resolve("/", "cycles", NULL), -EINVAL);
  char long_name[400];
  memset(long_name, 'a', sizeof(long_name) - 1);
  long_name[sizeof(long_name) - 1] = '\0';
  assert_int_equal(em_pmu_events_resolve("/", long_name, &out), -EINVAL);
  assert_non_null(strstr(out.error, "longer than"));
  long_name[80] = '\0';
  assert_int_equal(em_pmu_events_resolve("/", long_name, &out), -EINVAL);
}

/* ---- garbage trees ------------------------------------------------------------------------- */

typedef struct {
  const char *name;  /* What is wrong. */
  const char *file;  /* Relative to the PMU dir "gpmu"; NULL: nothing changed. */
  const char *text;  /* Its content. */
  const char *event; /* Resolved. */
  int rc;
  const char *msg; /* A piece of out.error. */
} garbage_case_t;

static const garbage_case_t garbage_cases[] = {
    {"good tree", NULL, NULL, "x", 0, ""},
    {"type not a number", "type", "eight", "x", -EINVAL, "gpmu/type: 'eight'"},
    {"type too large", "type", "4294967296", "x", -EINVAL, "gpmu/type"},
    {"type empty", "type", "", "x", -EINVAL, "gpmu/type"},
    {"cpus reversed", "cpus", "3-1", "x", -EINVAL, "gpmu/cpus: '3-1'"},
    {"cpus out of range", "cpus", "0-5000", "x", -EINVAL, "gpmu/cpus"},
    {"cpus garbage", "cpus", "0,,1", "x", -EINVAL, "gpmu/cpus"},
    {"format bit 64", "format/event", "config:0-64", "x", -EINVAL, "gpmu/format/event"},
    {"format unknown word", "format/event", "config3:0-7", "x", -EINVAL, "'config3:0-7'"},
    {"format no bits", "format/event", "config:", "x", -EINVAL, "gpmu/format/event"},
    {"format trailing junk", "format/event", "config:0-7x", "x", -EINVAL, "gpmu/format/event"},
    {"event file ?", "events/x", "event=0x1,chan=?", "x", -EINVAL, "'chan=?' needs a value"},
    {"event file unknown term", "events/x", "event=0x1,umask=2", "x", -EINVAL, "no format 'umask'"},
    {"event file bad value", "events/x", "event=0xZZ", "x", -EINVAL, "bad value '0xZZ'"},
    {"event file empty", "events/x", "", "x", -EINVAL, "gpmu/events/x: empty term"},
    {"event file alias loop refused", "events/x", "x", "x", -EINVAL, "no format 'x'"},
    {"event file value too wide", "events/x", "event=0x10000", "x", -ERANGE, "too wide"},
    {"event file garbage bytes", "events/x", "\x01\x02\xff=\x7f", "x", -EINVAL, "bad term name"},
};

/* Creates root/sys/bus/event_source/devices/gpmu with a valid small PMU ("x" = event 0x11). */
static void make_tree(char *root, size_t cap) {
  snprintf(root, cap, "/tmp/em-pmuev-XXXXXX");
  assert_non_null(mkdtemp(root));
  static const char *const dirs[] = {"sys",
                                     "sys/bus",
                                     "sys/bus/event_source",
                                     "sys/bus/event_source/devices",
                                     "sys/bus/event_source/devices/gpmu",
                                     "sys/bus/event_source/devices/gpmu/format",
                                     "sys/bus/event_source/devices/gpmu/events"};
  for (size_t i = 0; i < ARRAY_LEN(dirs); i++) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", root, dirs[i]);
    assert_int_equal(mkdir(path, 0755), 0);
  }
}

static void put(const char *root, const char *rel, const char *text, size_t len) {
  char path[512];
  snprintf(path, sizeof(path), "%s/sys/bus/event_source/devices/gpmu/%s", root, rel);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  assert_int_equal(fwrite(text, 1, len, f), len);
  fclose(f);
}

static void fill_good(const char *root) {
  put(root, "type", "8\n", 2);
  put(root, "cpus", "0-3\n", 4);
  put(root, "format/event", "config:0-15\n", 12);
  put(root, "events/x", "event=0x0011\n", 13);
}

/* make_tree() holding fill_good()'s files: a PMU that resolves "x". */
static void good_tree(char *root, size_t cap) {
  make_tree(root, cap);
  fill_good(root);
}

static void remove_tree(const char *root) {
  char cmd[600];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
  assert_int_equal(system(cmd), 0);
}

static void garbage_files_give_errors_naming_the_file(void **state) {
  (void)state;
  for (size_t i = 0; i < ARRAY_LEN(garbage_cases); i++) {
    const garbage_case_t *c = &garbage_cases[i];
    char root[64];
    good_tree(root, sizeof(root));
    if (c->file != NULL) {
      put(root, c->file, c->text, strlen(c->text));
    }
    em_pmu_events_t out;
    int rc = em_pmu_events_resolve(root, c->event, &out);
    if (rc != c->rc || strstr(out.error, c->msg) == NULL) {
      fail_msg("%s: got %d '%s', want %d '%s'", c->name, rc, out.error, c->rc, c->msg);
    }
    if (rc == 0) {
      assert_int_equal(out.n, 1);
      assert_int_equal(out.e[0].config, 0x11);
    }
    remove_tree(root);
  }
}

/* What odd_files_give_errors_not_hangs() puts where a good tree's file was. */
typedef enum { ODD_GONE, ODD_DIRECTORY, ODD_FIFO } odd_t;

static const struct {
  const char *rel; /* under gpmu/ */
  odd_t odd;
  const char *event;
  const char *want, *also; /* in the error; `also` may be NULL */
} odd_cases[] = {
    {"format/event", ODD_DIRECTORY, "x", "format/event", NULL},
    {"events/x", ODD_FIFO, "x", "events/x", NULL},
    {"type", ODD_GONE, "x", "missing file", NULL},
    {"format/event", ODD_GONE, "gpmu/event=1/", "missing", "format/event"}, /* named PMU */
};

/* Resolving `event` in root fails with -EINVAL and an error holding want (and also). */
static void expect_refused(const char *root, const char *event, const char *want,
                           const char *also) {
  em_pmu_events_t out;
  assert_int_equal(em_pmu_events_resolve(root, event, &out), -EINVAL);
  assert_non_null(strstr(out.error, want));
  if (also != NULL) {
    assert_non_null(strstr(out.error, also));
  }
}

static void odd_files_give_errors_not_hangs(void **state) {
  (void)state;
  char root[64];
  char path[512];

  /* A NUL byte in an event file. */
  good_tree(root, sizeof(root));
  put(root, "events/x", "event=0x1\0junk", 14);
  expect_refused(root, "x", "gpmu/events/x", NULL);
  remove_tree(root);

  /* A file larger than the cap. */
  good_tree(root, sizeof(root));
  static char big[EM_PMU_EVENTS_FILE_BYTES + 10];
  memset(big, '1', sizeof(big));
  put(root, "type", big, sizeof(big));
  expect_refused(root, "x", "larger than", NULL);
  remove_tree(root);

  /* A directory or a FIFO where a file should be (never opened to block), a missing file. */
  for (size_t i = 0; i < ARRAY_LEN(odd_cases); i++) {
    good_tree(root, sizeof(root));
    snprintf(path, sizeof(path), "%s/sys/bus/event_source/devices/gpmu/%s", root, odd_cases[i].rel);
    assert_int_equal(unlink(path), 0);
    if (odd_cases[i].odd == ODD_DIRECTORY) {
      assert_int_equal(mkdir(path, 0755), 0);
    } else if (odd_cases[i].odd == ODD_FIFO) {
      assert_int_equal(mkfifo(path, 0644), 0);
    }
    expect_refused(root, odd_cases[i].event, odd_cases[i].want, odd_cases[i].also);
    remove_tree(root);
  }
}

/* ---- parsers ------------------------------------------------------------------------------- */

typedef struct {
  const char *text;
  int rc;
  int word;
  uint64_t mask;
} format_case_t;

static const format_case_t format_cases[] = {
    {"config:0-15", 0, 0, 0xffff},
    {"config:0-9\n", 0, 0, 0x3ff},
    {"config1:0", 0, 1, 1},
    {"config2:0-63", 0, 2, UINT64_MAX},
    {"config1:0-31,32-63", 0, 1, UINT64_MAX},
    {"config:0-7,32-35", 0, 0, 0xf000000ffULL},
    {"config:18", 0, 0, 1u << 18},
    {"config:64", -EINVAL, 0, 0},
    {"config:7-0", -EINVAL, 0, 0},
    {"config:", -EINVAL, 0, 0},
    {"config:1,", -EINVAL, 0, 0},
    {"config:-1", -EINVAL, 0, 0},
    {"config:1-", -EINVAL, 0, 0},
    {"config4:1", -EINVAL, 0, 0},
    {"conf:1", -EINVAL, 0, 0},
    {"config 0-7", -EINVAL, 0, 0},
    {"", -EINVAL, 0, 0},
    {"config:99999999999999999999999", -EINVAL, 0, 0},
};

static void format_table(void **state) {
  (void)state;
  for (size_t i = 0; i < ARRAY_LEN(format_cases); i++) {
    const format_case_t *c = &format_cases[i];
    em_pmu_events_format_t f;
    int rc = em_pmu_events_parse_format(c->text, &f);
    if (rc != c->rc) {
      fail_msg("'%s': %d, want %d", c->text, rc, c->rc);
    }
    if (rc == 0) {
      assert_int_equal(f.word, c->word);
      assert_int_equal(f.mask, c->mask);
    }
  }
}

static void encode_spreads_value_and_checks_width(void **state) {
  (void)state;
  em_pmu_events_format_t split = {.word = 0, .mask = 0xf000000ffULL}; /* 0-7,32-35 */
  uint64_t cfg[3] = {0, 0, 0};
  assert_int_equal(em_pmu_events_encode(&split, 0xabc, cfg), 0);
  assert_int_equal(cfg[0], 0xa000000bcULL);
  assert_int_equal(em_pmu_events_encode(&split, 0x1000, cfg), -ERANGE);
  assert_int_equal(cfg[0], 0xa000000bcULL); /* unchanged */
  assert_int_equal(em_pmu_events_encode(&split, 0, cfg), 0);
  assert_int_equal(cfg[0], 0); /* a later term overrides */
  em_pmu_events_format_t all = {.word = 2, .mask = UINT64_MAX};
  assert_int_equal(em_pmu_events_encode(&all, UINT64_MAX, cfg), 0);
  assert_int_equal(cfg[2], UINT64_MAX);
  em_pmu_events_format_t bad = {.word = 3, .mask = 1};
  assert_int_equal(em_pmu_events_encode(&bad, 0, cfg), -EINVAL);
}

static void cpus_table(void **state) {
  (void)state;
  em_pmu_events_cpus_t s;
  assert_int_equal(em_pmu_events_parse_cpus("0,3-5\n", &s), 0);
  assert_int_equal(em_pmu_events_cpu_count(&s), 4);
  assert_true(em_pmu_events_cpu_isset(&s, 0));
  assert_false(em_pmu_events_cpu_isset(&s, 1));
  assert_true(em_pmu_events_cpu_isset(&s, 5));
  assert_false(em_pmu_events_cpu_isset(&s, 5000));
  assert_int_equal(em_pmu_events_parse_cpus("1023", &s), 0);
  assert_true(em_pmu_events_cpu_isset(&s, 1023));
  static const char *const bad[] = {"", "1024", "a", "1-", "-1", "3-2", "1,", "1 2", "0x1"};
  for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
    if (em_pmu_events_parse_cpus(bad[i], &s) != -EINVAL) {
      fail_msg("'%s' accepted", bad[i]);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(board_lists_resolve),
      cmocka_unit_test(board_profiles_resolve),
      cmocka_unit_test(pmu_cpus_partition_cpuinfo),
      cmocka_unit_test(resolve_table),
      cmocka_unit_test(tx2_event_in_both_pmus_gives_two_entries),
      cmocka_unit_test(error_table),
      cmocka_unit_test(null_and_long_arguments_are_errors),
      cmocka_unit_test(garbage_files_give_errors_naming_the_file),
      cmocka_unit_test(odd_files_give_errors_not_hangs),
      cmocka_unit_test(format_table),
      cmocka_unit_test(encode_spreads_value_and_checks_width),
      cmocka_unit_test(cpus_table),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
