/*
 * test_sensors_hottest.c - the hottest thermal zone (em_sensors_hottest() of
 * firmware/agent/collect/sensors.c), the figure the [budget.process] temp_max rule judges.
 *
 * Table-driven against the fixture tree of every board in tests/fixtures/boards/ with every
 * sensor family on (so CPU frequencies in Hz, power rails and trip points sit beside the zones
 * and must not count), and against small trees built in a temporary directory: a trip point
 * above the temperature, a zone whose file holds garbage, zones below 0 C only, no readable
 * zone, no zone at all. Also a zone that goes absent in a reading, and NULL arguments.
 */
#define _XOPEN_SOURCE 700 /* POSIX 2008 plus XSI, for nftw() in tmp_tree.h */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "sensors.h"
#include "tmp_tree.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixtures.h"
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Opens `root` with `opts` into *s and reads once; the reading is the caller's to free. */
static em_sensors_reading_t *open_and_read(const char *root, const em_sensors_opts_t *opts,
                                           em_sensors_t **s) {
  *s = NULL;
  assert_int_equal(em_sensors_new(s, root, opts), 0);
  em_sensors_reading_t *r = calloc(1, sizeof(*r));
  assert_non_null(r);
  assert_int_equal(em_sensors_read(*s, r), 0);
  return r;
}

/* Opens `root` with `opts`, reads once, and returns em_sensors_hottest()'s result. */
static int hottest_of(const char *root, const em_sensors_opts_t *opts, double *out_c) {
  em_sensors_t *s;
  em_sensors_reading_t *r = open_and_read(root, opts, &s);
  int rc = em_sensors_hottest(s, r, out_c);
  free(r);
  em_sensors_free(s);
  return rc;
}

/* ---- board fixtures ---- */

static const struct {
  const char *board;
  int rc;
  double hottest_c; /* when rc == 0 */
} boards[] = {
    {"generic-x86_64", 0, 52.0},    /* x86_pkg_temp above two acpitz zones */
    {"generic-arm64", -ENOENT, 0},  /* no thermal zone in the tree */
    {"jetson-agx-orin", 0, 45.531}, /* CPU-therm = tj-therm; CV zones read -256 C */
    {"jetson-agx-xavier", 0, 38.5}, /* CPU-therm */
    {"jetson-nano", 0, 34.5},       /* AO-therm, the first zone */
    {"jetson-orin-nano", 0, 47.25}, /* CPU-therm */
    {"jetson-tx2", 0, 36.5},        /* BCPU-therm and MCPU-therm tie */
    {"jetson-xavier-nx", 0, 38.0},  /* CPU-therm */
    {"raspberry-pi-5", 0, 48.3},    /* the only zone */
};

static void hottest_zone_of_each_board_fixture(void **state) {
  (void)state;
  for (size_t i = 0; i < ARRAY_LEN(boards); i++) {
    char root[512];
    snprintf(root, sizeof(root), "%s/%s", BOARDS_DIR, boards[i].board);
    double c = -1000;
    int rc = hottest_of(root, NULL, &c);
    if (rc != boards[i].rc) {
      fail_msg("%s: rc %d, expected %d", boards[i].board, rc, boards[i].rc);
    }
    if (rc == 0 && (c < boards[i].hottest_c - 1e-9 || c > boards[i].hottest_c + 1e-9)) {
      fail_msg("%s: hottest %.6f C, expected %.6f C", boards[i].board, c, boards[i].hottest_c);
    }
  }
}

/* The hottest zone absent in a reading: the next one is the hottest (absent never counts). */
static void absent_zone_is_skipped(void **state) {
  (void)state;
  em_sensors_t *s;
  em_sensors_reading_t *r = open_and_read(BOARDS_DIR "/generic-x86_64", NULL, &s);
  int pkg = em_sensors_find(s, "thermal.x86_pkg_temp.temp");
  assert_true(pkg >= 0);
  r->present[pkg] = false;
  double c = 0;
  assert_int_equal(em_sensors_hottest(s, r, &c), 0);
  assert_true(c > 29.8 - 1e-9 && c < 29.8 + 1e-9); /* the second acpitz zone */
  for (unsigned i = 0; i < r->count; i++) {
    r->present[i] = false;
  }
  c = 123;
  assert_int_equal(em_sensors_hottest(s, r, &c), -ENOENT);
  assert_true(c > 123 - 1e-9 && c < 123 + 1e-9); /* untouched on -ENOENT */
  free(r);
  em_sensors_free(s);
}

static void null_arguments_are_einval(void **state) {
  (void)state;
  em_sensors_t *s;
  em_sensors_reading_t *r = open_and_read(BOARDS_DIR "/raspberry-pi-5", NULL, &s);
  double c;
  assert_int_equal(em_sensors_hottest(NULL, r, &c), -EINVAL);
  assert_int_equal(em_sensors_hottest(s, NULL, &c), -EINVAL);
  assert_int_equal(em_sensors_hottest(s, r, NULL), -EINVAL);
  free(r);
  em_sensors_free(s);
}

/* ---- temporary trees ---- */

typedef struct {
  const char *type;
  const char *temp;      /* text of the temp file, millidegrees */
  const char *trip_temp; /* a passive trip point's temperature, or NULL: none */
} zone_t;

static const struct {
  const char *what;
  zone_t zones[3];
  size_t n;
  int rc;
  double hottest_c;
} trees[] = {
    {"one zone", {{"cpu", "45000\n", NULL}}, 1, 0, 45.0},
    {"a trip above the temperature is not a zone",
     {{"cpu", "40000\n", "95000\n"}, {"gpu", "41000\n", "97000\n"}},
     2,
     0,
     41.0},
    {"a zone reading garbage is skipped",
     {{"hot", "very hot\n", NULL}, {"soc", "30500\n", NULL}},
     2,
     0,
     30.5},
    {"zones below 0 C only", {{"cv0", "-256000\n", NULL}, {"cv1", "-12000\n", NULL}}, 2, 0, -12.0},
    {"no readable zone", {{"bad", "\n", NULL}, {"worse", "x\n", NULL}}, 2, -ENOENT, 0},
    {"no zone at all", {{NULL, NULL, NULL}}, 0, -ENOENT, 0},
};

static void hottest_zone_of_each_built_tree(void **state) {
  (void)state;
  for (size_t i = 0; i < ARRAY_LEN(trees); i++) {
    char root[EM_TMP_TREE_ROOT_BYTES];
    em_tmp_tree_make(root, "em-hottest-test");
    em_tmp_tree_put(root, "sys/class/.keep", "");
    for (size_t z = 0; z < trees[i].n; z++) {
      const zone_t *zone = &trees[i].zones[z];
      char rel[128];
      char type[64];
      snprintf(type, sizeof(type), "%s\n", zone->type);
      snprintf(rel, sizeof(rel), "sys/class/thermal/thermal_zone%zu/type", z);
      em_tmp_tree_put(root, rel, type);
      snprintf(rel, sizeof(rel), "sys/class/thermal/thermal_zone%zu/temp", z);
      em_tmp_tree_put(root, rel, zone->temp);
      if (zone->trip_temp) {
        snprintf(rel, sizeof(rel), "sys/class/thermal/thermal_zone%zu/trip_point_0_type", z);
        em_tmp_tree_put(root, rel, "passive\n");
        snprintf(rel, sizeof(rel), "sys/class/thermal/thermal_zone%zu/trip_point_0_temp", z);
        em_tmp_tree_put(root, rel, zone->trip_temp);
      }
    }
    em_sensors_opts_t o = {.families = EM_SENSORS_THERMAL};
    double c = -1000;
    int rc = hottest_of(root, &o, &c);
    em_tmp_tree_remove(root);
    if (rc != trees[i].rc) {
      fail_msg("%s: rc %d, expected %d", trees[i].what, rc, trees[i].rc);
    }
    if (rc == 0 && (c < trees[i].hottest_c - 1e-9 || c > trees[i].hottest_c + 1e-9)) {
      fail_msg("%s: hottest %.6f C, expected %.6f C", trees[i].what, c, trees[i].hottest_c);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(hottest_zone_of_each_board_fixture),
      cmocka_unit_test(absent_zone_is_skipped),
      cmocka_unit_test(null_arguments_are_einval),
      cmocka_unit_test(hottest_zone_of_each_built_tree),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
