/*
 * test_sensors.c - the board sensors (firmware/agent/collect/sensors.c) against the fixture trees
 * of every board in tests/fixtures/boards/<board>/ (table-driven: which figures exist and what they
 * read, which throttle cause the board shows), and against small trees built in a temporary
 * directory for what fixtures cannot show: missing, garbage, empty and unreadable files (absent and
 * counted), a zone crossing its trip point and coming back, a frequency cap, a power alarm and the
 * order of causes, options (zone filter, explicit paths, "none", a bad power value), and NVML
 * absent (no libnvidia-ml on the test machine: figures left out). Also the two text parsers,
 * table-driven.
 */
#define _XOPEN_SOURCE 700 /* POSIX 2008 plus XSI, for nftw() in the teardown */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "sensors.h"

#include <dlfcn.h>
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixtures.h"

#define ABSENT NAN /* in the expectation tables: the figure exists and is absent */

/* ---- helpers ---- */

static em_sensors_t *open_ok(const char *root, const em_sensors_opts_t *o) {
  em_sensors_t *s = NULL;
  int rc = em_sensors_new(&s, root, o);
  if (rc != 0) {
    fail_msg("em_sensors_new(%s): %d", root, rc);
  }
  assert_non_null(s);
  return s;
}

/* Asserts figure `name` exists; NAN expects absent, else a value within 1e-6 relative. */
static void expect(const em_sensors_t *s, const em_sensors_reading_t *r, const char *name,
                   double want) {
  int i = em_sensors_find(s, name);
  if (i < 0) {
    fail_msg("figure %s not found", name);
  }
  if (isnan(want)) {
    if (r->present[i]) {
      fail_msg("%s: expected absent, got %g", name, r->value[i]);
    }
    return;
  }
  if (!r->present[i]) {
    fail_msg("%s: expected %g, got absent", name, want);
  }
  double tol = fabs(want) * 1e-6 + 1e-9;
  if (fabs(r->value[i] - want) > tol) {
    fail_msg("%s: expected %.9g, got %.9g", name, want, r->value[i]);
  }
}

static void expect_missing(const em_sensors_t *s, const char *name) {
  if (em_sensors_find(s, name) != -ENOENT) {
    fail_msg("figure %s should not exist", name);
  }
}

/* ---- board fixtures ---- */

typedef struct {
  const char *name;
  double value; /* ABSENT: the figure exists and reads absent */
} check_t;

typedef struct {
  const char *board;
  unsigned figures;
  em_throttle_t cause;
  const char *why;
  check_t checks[16];
  const char *missing[6];
} board_case_t;

static const board_case_t boards[] = {
    {"jetson-agx-orin",
     63,
     EM_THROTTLE_NONE,
     "",
     {{"thermal.CPU-therm.temp", 45.531},
      {"thermal.CPU-therm.trip", 99.0},
      {"thermal.CPU-therm.tripped", 0},
      {"thermal.CV0-therm.temp", -256.0},
      {"thermal.CV0-therm.trip", 104.5},
      {"thermal.tj-therm.temp", 45.531},
      {"cpu.policy0.freq", 729600e3},
      {"cpu.policy8.max", 2201600e3},
      {"cpu.policy0.throttle", 729600.0 / 2201600.0},
      {"cpu.policy4.capped", 0},
      {"gpu.load", 8.7},
      {"gpu.freq", 306e6},
      {"gpu.max", 1300.5e6},
      {"emc.freq", 3199e6},
      {"emc.load", ABSENT},
      {"power.VDD_GPU_SOC.mw", 4984.0 * 1304.0 / 1000.0}},
     {"power.NC.mv", "cpu.policy1.freq", "nvml.0.util"}},
    {"jetson-orin-nano",
     54,
     EM_THROTTLE_NONE,
     "",
     {{"thermal.GPU-therm.temp", 46.031},
      {"thermal.SOC2-therm.tripped", 0},
      {"cpu.policy4.freq", 729600e3},
      {"cpu.policy0.throttle", 1.0},
      {"gpu.load", 0},
      {"gpu.max", 624.75e6},
      {"emc.freq", 2133e6},
      {"power.VDD_IN.mv", 5072},
      {"power.VDD_IN.ma", 1202},
      {"power.VDD_SOC.alarm", 0}},
     {"cpu.policy8.freq", "power.VDD_GPU_SOC.mw"}},
    {"jetson-agx-xavier",
     67,
     EM_THROTTLE_NONE,
     "",
     {{"thermal.CPU-therm.temp", 38.5},
      {"thermal.CPU-therm.trip", 95.5},
      {"thermal.Tboard_tegra.trip", 107.0},
      {"thermal.thermal-fan-est.temp", 37.2},
      {"thermal.thermal-fan-est.trip", ABSENT},
      {"thermal.thermal-fan-est.tripped", ABSENT},
      {"cpu.policy6.freq", 1190400e3},
      {"cpu.policy0.freq", 2265600e3},
      {"gpu.load", 12.5},
      {"gpu.freq", 318.75e6},
      {"emc.freq", 2133e6},
      {"emc.load", 10.0},
      {"power.GPU.mw", 19104 * 153 / 1000},
      {"power.SYS5V.mv", 4968}},
     {"cpu.policy1.freq", "power.GPU.alarm"}},
    {"jetson-xavier-nx",
     53,
     EM_THROTTLE_NONE,
     "",
     {{"thermal.GPU-therm.temp", 37.0},
      {"cpu.policy4.max", 1907200e3},
      {"gpu.max", 1109.25e6},
      {"emc.load", 5.0},
      {"power.VDD_CPU_GPU_CV.ma", 167}},
     {"cpu.policy6.freq"}},
    {"jetson-nano",
     34,
     EM_THROTTLE_FREQ_CAP,
     "frequency cap policy0 918/1479 MHz (scaling_max_freq 918 MHz)",
     {{"thermal.AO-therm.trip", 91.0},
      {"thermal.CPU-therm.trip", 97.0},
      {"thermal.PLL-therm.trip", 102.0},
      {"cpu.policy0.capped", 1},
      {"cpu.policy0.cap", 918000e3},
      {"gpu.freq", 76.8e6},
      {"emc.load", 10.0},
      {"power.POM_5V_IN.mw", 5016 * 320 / 1000}},
     {"power.POM_5V_IN.alarm"}},
    {"jetson-tx2",
     54,
     EM_THROTTLE_NONE,
     "",
     {{"thermal.BCPU-therm.temp", 36.5},
      {"thermal.MCPU-therm.trip", 96.5},
      {"cpu.policy0.freq", 345600e3},
      {"cpu.policy1.freq", 2035200e3},
      {"gpu.load", 4.1},
      {"emc.freq", 1866e6},
      {"power.VDD_IN.mw", 19080 * 291 / 1000},
      {"power.VDD_SYS_DDR.ma", 157}},
     {"cpu.policy3.freq"}},
    {"raspberry-pi-5",
     8,
     EM_THROTTLE_NONE,
     "",
     {{"thermal.cpu-thermal.temp", 48.3},
      {"thermal.cpu-thermal.trip", 110.0},
      {"thermal.cpu-thermal.tripped", 0},
      {"cpu.policy0.throttle", 0.625}},
     {"gpu.load", "gpu.freq", "emc.freq", "power.VDD_IN.mw"}},
    {"generic-x86_64",
     29,
     EM_THROTTLE_NONE,
     "",
     {{"thermal.acpitz.temp", 27.8},
      {"thermal.acpitz_1.temp", 29.8},
      {"thermal.x86_pkg_temp.temp", 52.0},
      {"thermal.x86_pkg_temp.trip", ABSENT},
      {"thermal.x86_pkg_temp.tripped", ABSENT},
      {"cpu.policy3.freq", 1100000e3}},
     {"gpu.load", "emc.freq", "nvml.0.mem_used"}},
    {"generic-arm64", 0, EM_THROTTLE_NONE, "", {{NULL, 0}}, {"thermal.cpu-thermal.temp"}},
};

static void board_fixtures_discover_expected_figures(void **state) {
  (void)state;
  for (size_t b = 0; b < sizeof boards / sizeof boards[0]; b++) {
    const board_case_t *c = &boards[b];
    char root[512];
    snprintf(root, sizeof root, "%s/%s", BOARDS_DIR, c->board);
    em_sensors_t *s = open_ok(root, NULL);
    if (em_sensors_count(s) != c->figures) {
      for (unsigned i = 0; i < em_sensors_count(s); i++) {
        print_message("  %s\n", em_sensors_figure(s, i)->name);
      }
      fail_msg("%s: %u figures, expected %u", c->board, em_sensors_count(s), c->figures);
    }
    em_sensors_reading_t r;
    assert_int_equal(em_sensors_read(s, &r), 0);
    assert_int_equal(r.count, c->figures);
    if (r.parse_errors != 0 || r.read_errors != 0) {
      fail_msg("%s: %llu parse and %llu read errors on a clean fixture", c->board,
               (unsigned long long)r.parse_errors, (unsigned long long)r.read_errors);
    }
    for (size_t k = 0; k < 16 && c->checks[k].name != NULL; k++) {
      expect(s, &r, c->checks[k].name, c->checks[k].value);
    }
    for (size_t k = 0; k < 6 && c->missing[k] != NULL; k++) {
      expect_missing(s, c->missing[k]);
    }
    /* Every unit is one of the documented ones; names are unique. */
    for (unsigned i = 0; i < em_sensors_count(s); i++) {
      const em_sensor_figure_t *f = em_sensors_figure(s, i);
      assert_non_null(f);
      assert_int_equal(em_sensors_find(s, f->name), (int)i);
      assert_non_null(strstr(" Cel Hz % 1 mV mA mW By ", f->unit));
    }
    assert_null(em_sensors_figure(s, em_sensors_count(s)));
    char why[160];
    em_throttle_t t = em_sensors_throttle(s, &r, why, sizeof why);
    if (t != c->cause || strcmp(why, c->why) != 0) {
      fail_msg("%s: throttle %d \"%s\", expected %d \"%s\"", c->board, t, why, c->cause, c->why);
    }
    em_sensors_free(s);
  }
}

/* The same tree discovered twice gives the same names in the same order. */
static void figure_names_are_stable(void **state) {
  (void)state;
  em_sensors_t *a = open_ok(BOARDS_DIR "/jetson-agx-orin", NULL);
  em_sensors_t *b = open_ok(BOARDS_DIR "/jetson-agx-orin/", NULL);
  assert_int_equal(em_sensors_count(a), em_sensors_count(b));
  for (unsigned i = 0; i < em_sensors_count(a); i++) {
    assert_string_equal(em_sensors_figure(a, i)->name, em_sensors_figure(b, i)->name);
    assert_string_equal(em_sensors_figure(a, i)->unit, em_sensors_figure(b, i)->unit);
  }
  em_sensors_free(a);
  em_sensors_free(b);
}

/* ---- temporary trees ---- */

typedef struct {
  char root[64];
} tree_t;

static void put(const tree_t *t, const char *rel, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", t->root, rel);
  for (char *p = path + strlen(t->root) + 1; *p != '\0'; p++) {
    if (*p == '/') {
      *p = '\0';
      (void)mkdir(path, 0755);
      *p = '/';
    }
  }
  FILE *f = fopen(path, "w"); /* truncates the same inode: open fds see the new text */
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
}

/* Writes `text` to t's file `rel`, then reads s into r (asserts the read succeeds). */
static void put_and_read(const tree_t *t, em_sensors_t *s, em_sensors_reading_t *r, const char *rel,
                         const char *text) {
  put(t, rel, text);
  assert_int_equal(em_sensors_read(s, r), 0);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static int tree_setup(void **state) {
  tree_t *t = calloc(1, sizeof *t);
  assert_non_null(t);
  snprintf(t->root, sizeof t->root, "/tmp/em-sensors-test-XXXXXX");
  assert_non_null(mkdtemp(t->root));
  *state = t;
  return 0;
}

static int tree_teardown(void **state) {
  tree_t *t = *state;
  nftw(t->root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  free(t);
  return 0;
}

#define ZONE "sys/class/thermal/thermal_zone0/"
#define POL  "sys/devices/system/cpu/cpufreq/policy0/"
#define HW   "sys/class/hwmon/hwmon0/"

/* A zone, a policy and a rail, all healthy. */
static void healthy(const tree_t *t) {
  put(t, ZONE "type", "CPU-therm\n");
  put(t, ZONE "temp", "50000\n");
  put(t, ZONE "trip_point_0_type", "critical\n");
  put(t, ZONE "trip_point_0_temp", "104500\n");
  put(t, ZONE "trip_point_1_type", "passive\n");
  put(t, ZONE "trip_point_1_temp", "99000\n");
  put(t, POL "scaling_cur_freq", "2201600\n");
  put(t, POL "cpuinfo_max_freq", "2201600\n");
  put(t, POL "scaling_max_freq", "2201600\n");
  put(t, HW "name", "ina3221\n");
  put(t, HW "in1_label", "VDD_IN\n");
  put(t, HW "in1_input", "5000\n");
  put(t, HW "curr1_input", "1000\n");
  put(t, HW "curr1_crit_alarm", "0\n");
}

/* healthy() in t, and sensors opened on it with the default options. */
static em_sensors_t *open_healthy(tree_t *t) {
  healthy(t);
  return open_ok(t->root, NULL);
}

static void missing_and_garbage_files_are_absent_and_counted(void **state) {
  tree_t *t = *state;
  put(t, ZONE "type", "GPU-therm\n");
  put(t, ZONE "temp", "hot\n");               /* garbage */
  put(t, POL "cpuinfo_max_freq", "");         /* empty */
  put(t, POL "scaling_max_freq", "1.5GHz\n"); /* garbage */
  /* scaling_cur_freq missing */
  put(t, HW "name", "ina3221\n");
  put(t, HW "in1_label", "VDD_IN\n");
  put(t, HW "in1_input", "99999999999999999999\n"); /* overflow */
  put(t, HW "curr1_input", "250\n");
  put(t, "sys/class/thermal/thermal_zone1/type", "SOC0-therm\n");
  put(t, "sys/class/thermal/thermal_zone1/temp/x", "1\n");   /* temp is a directory: EISDIR */
  put(t, "sys/class/thermal/thermal_zone2/temp", "40000\n"); /* no type: skipped */
  em_sensors_opts_t o = {.gpu_load = "/sys/devices/gpu.0/load", .emc = "none"};
  em_sensors_t *s = open_ok(t->root, &o);
  em_sensors_reading_t r;
  assert_int_equal(em_sensors_read(s, &r), 0);
  expect(s, &r, "thermal.GPU-therm.temp", ABSENT);
  expect(s, &r, "thermal.GPU-therm.trip", ABSENT); /* no trip points */
  expect(s, &r, "thermal.GPU-therm.tripped", ABSENT);
  expect(s, &r, "thermal.SOC0-therm.temp", ABSENT);
  expect(s, &r, "cpu.policy0.freq", ABSENT);
  expect(s, &r, "cpu.policy0.max", ABSENT);
  expect(s, &r, "cpu.policy0.cap", ABSENT);
  expect(s, &r, "cpu.policy0.throttle", ABSENT);
  expect(s, &r, "cpu.policy0.capped", ABSENT);
  expect(s, &r, "gpu.load", ABSENT); /* explicit path, missing: listed, absent */
  expect(s, &r, "power.VDD_IN.mv", ABSENT);
  expect(s, &r, "power.VDD_IN.ma", 250);
  expect(s, &r, "power.VDD_IN.mw", ABSENT);
  expect_missing(s, "power.VDD_IN.alarm");
  expect_missing(s, "emc.freq");
  expect_missing(s, "gpu.freq");
  assert_int_equal(em_sensors_count(s), 3 + 3 + 5 + 1 + 3);
  /* Missing files are not errors; garbage (temp, empty, 1.5GHz, overflow) and EISDIR are. */
  assert_int_equal(r.parse_errors, 4);
  assert_int_equal(r.read_errors, 1);
  char why[64];
  assert_int_equal(em_sensors_throttle(s, &r, why, sizeof why), EM_THROTTLE_NONE);
  assert_string_equal(why, "");

  /* Repaired in place: the same open files now read. Errors accumulate in the object. */
  put(t, ZONE "temp", "41000\n");
  put(t, POL "cpuinfo_max_freq", "1510400\n");
  put(t, POL "scaling_max_freq", "1510400\n");
  put_and_read(t, s, &r, HW "in1_input", "5000\n");
  expect(s, &r, "thermal.GPU-therm.temp", 41.0);
  expect(s, &r, "cpu.policy0.max", 1510400e3);
  expect(s, &r, "cpu.policy0.capped", 0);
  expect(s, &r, "cpu.policy0.freq", ABSENT); /* still missing */
  expect(s, &r, "power.VDD_IN.mw", 1250);
  assert_int_equal(r.parse_errors, 0);
  assert_int_equal(r.read_errors, 1);
  uint64_t pe = 0;
  uint64_t re = 0;
  em_sensors_errors(s, &pe, &re);
  assert_int_equal(pe, 4);
  assert_int_equal(re, 2);
  em_sensors_free(s);
}

static void zone_at_trip_point_is_thermal_throttle_and_recovers(void **state) {
  tree_t *t = *state;
  em_sensors_t *s = open_healthy(t);
  em_sensors_reading_t r;
  char why[128];
  assert_int_equal(em_sensors_read(s, &r), 0);
  expect(s, &r, "thermal.CPU-therm.trip", 99.0); /* the passive one, below critical */
  expect(s, &r, "thermal.CPU-therm.tripped", 0);
  assert_int_equal(em_sensors_throttle(s, &r, why, sizeof why), EM_THROTTLE_NONE);

  put_and_read(t, s, &r, ZONE "temp", "99500\n");
  expect(s, &r, "thermal.CPU-therm.tripped", 1);
  assert_int_equal(em_sensors_throttle(s, &r, why, sizeof why), EM_THROTTLE_THERMAL);
  assert_string_equal(why, "thermal trip CPU-therm at 99.5 C (trip 99.0 C)");
  /* Truncated to the caller's buffer, NULL buffer allowed. */
  char small[8];
  assert_int_equal(em_sensors_throttle(s, &r, small, sizeof small), EM_THROTTLE_THERMAL);
  assert_string_equal(small, "thermal");
  assert_int_equal(em_sensors_throttle(s, &r, NULL, 0), EM_THROTTLE_THERMAL);

  /* Exactly at the trip counts; one millidegree below does not. */
  put_and_read(t, s, &r, ZONE "temp", "99000\n");
  expect(s, &r, "thermal.CPU-therm.tripped", 1);
  put_and_read(t, s, &r, ZONE "temp", "98999\n");
  expect(s, &r, "thermal.CPU-therm.tripped", 0);
  assert_int_equal(em_sensors_throttle(s, &r, why, sizeof why), EM_THROTTLE_NONE);
  em_sensors_free(s);
}

static void causes_come_in_order_thermal_cap_power(void **state) {
  tree_t *t = *state;
  em_sensors_t *s = open_healthy(t);
  em_sensors_reading_t r;
  char why[128];
  put(t, ZONE "temp", "100000\n");
  put(t, POL "scaling_max_freq", "1190400\n");
  put(t, POL "scaling_cur_freq", "1190400\n");
  put_and_read(t, s, &r, HW "curr1_crit_alarm", "1\n");
  assert_int_equal(em_sensors_throttle(s, &r, why, sizeof why), EM_THROTTLE_THERMAL);

  put_and_read(t, s, &r, ZONE "temp", "60000\n");
  expect(s, &r, "cpu.policy0.capped", 1);
  expect(s, &r, "cpu.policy0.throttle", 1190400.0 / 2201600.0);
  assert_int_equal(em_sensors_throttle(s, &r, why, sizeof why), EM_THROTTLE_FREQ_CAP);
  assert_string_equal(why, "frequency cap policy0 1190/2202 MHz (scaling_max_freq 1190 MHz)");

  put_and_read(t, s, &r, POL "scaling_max_freq", "2201600\n");
  expect(s, &r, "cpu.policy0.capped", 0);
  expect(s, &r, "power.VDD_IN.alarm", 1);
  assert_int_equal(em_sensors_throttle(s, &r, why, sizeof why), EM_THROTTLE_POWER);
  assert_string_equal(why, "power limit VDD_IN (curr1_crit_alarm)");

  put_and_read(t, s, &r, HW "curr1_crit_alarm", "0\n");
  assert_int_equal(em_sensors_throttle(s, &r, why, sizeof why), EM_THROTTLE_NONE);
  /* Absent figures never make a cause. */
  put(t, HW "curr1_crit_alarm", "?\n");
  put_and_read(t, s, &r, POL "scaling_max_freq", "\n");
  assert_int_equal(em_sensors_throttle(s, &r, why, sizeof why), EM_THROTTLE_NONE);
  em_sensors_free(s);
}

/* A machine with more policies than the table holds: whole policies up to the cap, no more. */
static void figure_table_is_bounded(void **state) {
  tree_t *t = *state;
  char rel[128];
  for (int p = 0; p < 60; p++) {
    snprintf(rel, sizeof rel, "sys/devices/system/cpu/cpufreq/policy%d/scaling_cur_freq", p);
    put(t, rel, "800000\n");
  }
  em_sensors_t *s = open_ok(t->root, NULL);
  assert_int_equal(em_sensors_count(s), (EM_SENSORS_MAX_FIGURES / 5) * 5);
  expect_missing(s, "cpu.policy51.freq");
  em_sensors_reading_t r;
  assert_int_equal(em_sensors_read(s, &r), 0);
  expect(s, &r, "cpu.policy50.freq", 800000e3);
  expect(s, &r, "cpu.policy50.max", ABSENT);
  em_sensors_free(s);
}

static void options_filter_and_turn_off(void **state) {
  (void)state;
  em_sensors_opts_t o = {.thermal = "GPU-therm, CPU-therm", .families = EM_SENSORS_THERMAL};
  em_sensors_t *s = open_ok(BOARDS_DIR "/jetson-agx-orin", &o);
  assert_int_equal(em_sensors_count(s), 6);
  assert_string_equal(em_sensors_figure(s, 0)->name, "thermal.CPU-therm.temp");
  assert_string_equal(em_sensors_figure(s, 3)->name, "thermal.GPU-therm.temp");
  em_sensors_free(s);

  em_sensors_opts_t off = {.gpu_load = "none",
                           .gpu_devfreq = "none",
                           .emc = "none",
                           .power = "none",
                           .families = EM_SENSORS_GPU | EM_SENSORS_EMC | EM_SENSORS_POWER};
  s = open_ok(BOARDS_DIR "/jetson-agx-orin", &off);
  assert_int_equal(em_sensors_count(s), 0);
  em_sensors_free(s);

  /* power = iio on a hwmon board finds nothing; hwmon on it finds the 4 rails. */
  em_sensors_opts_t iio = {.power = "iio:ina3221x", .families = EM_SENSORS_POWER};
  s = open_ok(BOARDS_DIR "/jetson-agx-orin", &iio);
  assert_int_equal(em_sensors_count(s), 0);
  em_sensors_free(s);
  em_sensors_opts_t hw = {.power = "hwmon:ina3221", .families = EM_SENSORS_POWER};
  s = open_ok(BOARDS_DIR "/jetson-agx-orin", &hw);
  assert_int_equal(em_sensors_count(s), 16);
  em_sensors_free(s);

  /* An explicit devfreq path for the GPU, an EMC devfreq directory. */
  em_sensors_opts_t paths = {.gpu_load = "none",
                             .gpu_devfreq = "sys/class/devfreq/57000000.gpu",
                             .emc = "/sys/class/devfreq/57000000.gpu",
                             .families = EM_SENSORS_GPU | EM_SENSORS_EMC};
  s = open_ok(BOARDS_DIR "/jetson-nano", &paths);
  em_sensors_reading_t r;
  assert_int_equal(em_sensors_read(s, &r), 0);
  assert_int_equal(em_sensors_count(s), 4);
  expect(s, &r, "gpu.freq", 76.8e6);
  expect(s, &r, "emc.freq", 76.8e6);
  expect(s, &r, "emc.load", ABSENT);
  em_sensors_free(s);
}

/* The [sensors] keys of boards/jetson-agx-orin.ini and boards/jetson-nano.ini, as written. */
static void profile_paths_read_on_their_fixtures(void **state) {
  (void)state;
  em_sensors_opts_t orin = {.gpu_load = "/sys/devices/platform/17000000.ga10b/load",
                            .gpu_devfreq = "/sys/class/devfreq/17000000.ga10b",
                            .emc = "none",
                            .power = "hwmon:ina3221"};
  em_sensors_t *s = open_ok(BOARDS_DIR "/jetson-agx-orin", &orin);
  em_sensors_reading_t r;
  assert_int_equal(em_sensors_read(s, &r), 0);
  assert_int_equal(em_sensors_count(s), 63 - 2);
  expect(s, &r, "gpu.load", 8.7);
  expect_missing(s, "emc.freq");
  em_sensors_free(s);
  em_sensors_opts_t nano = {.gpu_load = "/sys/devices/gpu.0/load",
                            .gpu_devfreq = "/sys/class/devfreq/57000000.gpu",
                            .emc = "/sys/kernel/actmon_avg_activity/mc_all",
                            .power = "iio:ina3221x"};
  s = open_ok(BOARDS_DIR "/jetson-nano", &nano);
  assert_int_equal(em_sensors_read(s, &r), 0);
  assert_int_equal(em_sensors_count(s), 34);
  expect(s, &r, "emc.load", 10.0);
  expect(s, &r, "power.POM_5V_GPU.ma", 39);
  em_sensors_free(s);
}

static void bad_arguments_are_refused(void **state) {
  (void)state;
  em_sensors_t *s = (em_sensors_t *)&s;
  em_sensors_opts_t bad = {.power = "spi:ina3221"};
  assert_int_equal(em_sensors_new(&s, BOARDS_DIR "/jetson-agx-orin", &bad), -EINVAL);
  assert_ptr_equal(s, (em_sensors_t *)&s); /* untouched on failure */
  em_sensors_opts_t empty_chip = {.power = "hwmon:"};
  assert_int_equal(em_sensors_new(&s, "/", &empty_chip), -EINVAL);
  assert_int_equal(em_sensors_new(NULL, "/", NULL), -EINVAL);
  assert_int_equal(em_sensors_new(&s, NULL, NULL), -EINVAL);
  char longroot[5000];
  memset(longroot, 'a', sizeof longroot - 1);
  longroot[sizeof longroot - 1] = '\0';
  assert_int_equal(em_sensors_new(&s, longroot, NULL), -ENAMETOOLONG);
  em_sensors_reading_t r;
  assert_int_equal(em_sensors_read(NULL, &r), -EINVAL);
  assert_int_equal(em_sensors_count(NULL), 0);
  assert_int_equal(em_sensors_throttle(NULL, &r, NULL, 0), EM_THROTTLE_NONE);
  em_sensors_free(NULL);
  /* A root with nothing in it: no figures, not an error. */
  s = open_ok("/nonexistent-edgemon-root", NULL);
  assert_int_equal(em_sensors_count(s), 0);
  assert_int_equal(em_sensors_read(s, &r), 0);
  assert_int_equal(r.count, 0);
  em_sensors_free(s);
}

static void nvml_absent_leaves_its_figures_out(void **state) {
  (void)state;
  em_sensors_opts_t o = {.families = EM_SENSORS_NVML, .nvml_lib = "libedgemon-no-such-nvml.so.1"};
  em_sensors_t *s = open_ok("/", &o);
  assert_int_equal(em_sensors_count(s), 0);
  expect_missing(s, "nvml.0.mem_used");
  em_sensors_free(s);
  /* The real library name: absent on the test machine (skip the check where it exists). */
  void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib != NULL) {
    dlclose(lib);
    return;
  }
  em_sensors_opts_t real = {.families = EM_SENSORS_ALL};
  s = open_ok(BOARDS_DIR "/generic-x86_64", &real);
  assert_int_equal(em_sensors_count(s), 29);
  expect_missing(s, "nvml.0.util");
  em_sensors_free(s);
  /* A library that exists but is not NVML (no nvmlInit_v2): left out too. */
  em_sensors_opts_t notnvml = {.families = EM_SENSORS_NVML, .nvml_lib = "libm.so.6"};
  s = open_ok("/", &notnvml);
  assert_int_equal(em_sensors_count(s), 0);
  em_sensors_free(s);
}

/* ---- parsers ---- */

static void parse_int_accepts_sysfs_numbers_only(void **state) {
  (void)state;
  static const struct {
    const char *text;
    int rc;
    int64_t value;
  } rows[] = {
      {"45000\n", 0, 45000},
      {"-256000\n", 0, -256000},
      {"  +5 \n", 0, 5},
      {"0", 0, 0},
      {"9223372036854775807\n", 0, INT64_MAX},
      {"-9223372036854775808\n", 0, INT64_MIN},
      {"9223372036854775808\n", -EINVAL, 0},
      {"99999999999999999999\n", -EINVAL, 0},
      {"", -EINVAL, 0},
      {"\n", -EINVAL, 0},
      {"-", -EINVAL, 0},
      {"abc\n", -EINVAL, 0},
      {"12a\n", -EINVAL, 0},
      {"1 2\n", -EINVAL, 0},
      {"0x10\n", -EINVAL, 0},
      {"1.5\n", -EINVAL, 0},
      {"--1\n", -EINVAL, 0},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    int64_t v = -1;
    int rc = em_sensors_parse_int(rows[i].text, strlen(rows[i].text), &v);
    if (rc != rows[i].rc || (rc == 0 && v != rows[i].value)) {
      fail_msg("parse_int(\"%s\"): rc %d value %lld", rows[i].text, rc, (long long)v);
    }
  }
  /* Only len bytes are read: "12" out of "123". */
  int64_t v = 0;
  assert_int_equal(em_sensors_parse_int("123", 2, &v), 0);
  assert_int_equal(v, 12);
  assert_int_equal(em_sensors_parse_int("1\0002", 3, &v), -EINVAL);
}

static void parse_name_sanitises(void **state) {
  (void)state;
  static const struct {
    const char *text;
    int rc;
    const char *name;
  } rows[] = {
      {"CPU-therm\n", 0, "CPU-therm"},
      {"Tboard_tegra\n", 0, "Tboard_tegra"},
      {"  VDD_GPU_SOC  \n", 0, "VDD_GPU_SOC"},
      {"a.b c/d\nsecond line\n", 0, "a_b_c_d"},
      {"\n", -EINVAL, ""},
      {"", -EINVAL, ""},
      {"0123456789abcdef\n", -EINVAL, ""}, /* 16 characters do not fit 16 bytes */
      {"0123456789abcde\n", 0, "0123456789abcde"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    char out[16];
    int rc = em_sensors_parse_name(rows[i].text, strlen(rows[i].text), out, sizeof out);
    if (rc != rows[i].rc || (rc == 0 && strcmp(out, rows[i].name) != 0)) {
      fail_msg("parse_name(\"%s\"): rc %d \"%s\"", rows[i].text, rc, rc == 0 ? out : "");
    }
  }
  char out[8];
  assert_int_equal(em_sensors_parse_name("a\0b", 3, out, sizeof out), -EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(board_fixtures_discover_expected_figures),
      cmocka_unit_test(figure_names_are_stable),
      cmocka_unit_test_setup_teardown(missing_and_garbage_files_are_absent_and_counted, tree_setup,
                                      tree_teardown),
      cmocka_unit_test_setup_teardown(zone_at_trip_point_is_thermal_throttle_and_recovers,
                                      tree_setup, tree_teardown),
      cmocka_unit_test_setup_teardown(causes_come_in_order_thermal_cap_power, tree_setup,
                                      tree_teardown),
      cmocka_unit_test_setup_teardown(figure_table_is_bounded, tree_setup, tree_teardown),
      cmocka_unit_test(options_filter_and_turn_off),
      cmocka_unit_test(profile_paths_read_on_their_fixtures),
      cmocka_unit_test(bad_arguments_are_refused),
      cmocka_unit_test(nvml_absent_leaves_its_figures_out),
      cmocka_unit_test(parse_int_accepts_sysfs_numbers_only),
      cmocka_unit_test(parse_name_sanitises),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
