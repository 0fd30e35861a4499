/*
 * fuzz_sensors.c - libFuzzer harness for the sysfs parsers of firmware/agent/collect/sensors.c.
 *
 * Any bytes: em_sensors_parse_int() returns 0 or -EINVAL and never reads past `size` (the
 * input is a heap buffer of exactly that size, so AddressSanitizer sees an over-read); an
 * accepted text holds only digits, one sign and blanks. em_sensors_parse_name() returns 0 or
 * -EINVAL and an accepted name is non-empty, NUL-terminated and only [A-Za-z0-9_-].
 * Then the input becomes the content of one file of a small fixture tree (first byte picks
 * which: zone temp, trip temp, cpufreq cur/max/cap, rail voltage/current/alarm) that a live
 * em_sensors_t reads: every figure is absent or finite, a flag is 0 or 1, and a garbage file
 * counts a parse error. Seeds: tests/fuzz/corpus/sensors/.
 */
#define _XOPEN_SOURCE 700 /* POSIX 2008 plus XSI, for nftw() in the clean-up */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "sensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok) {
  if (!ok) {
    abort();
  }
}

static const char *const files[] = {
    "sys/class/thermal/thermal_zone0/temp",
    "sys/class/thermal/thermal_zone0/trip_point_0_temp",
    "sys/devices/system/cpu/cpufreq/policy0/scaling_cur_freq",
    "sys/devices/system/cpu/cpufreq/policy0/cpuinfo_max_freq",
    "sys/devices/system/cpu/cpufreq/policy0/scaling_max_freq",
    "sys/class/hwmon/hwmon0/in1_input",
    "sys/class/hwmon/hwmon0/curr1_input",
    "sys/class/hwmon/hwmon0/curr1_crit_alarm",
};
#define NFILES (sizeof files / sizeof files[0])

static char root[64];
static int fds[NFILES];
static em_sensors_t *sensors;

static void put(const char *rel, const char *text) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  char dir[256];
  snprintf(dir, sizeof dir, "%s", path);
  for (char *p = dir + strlen(root) + 1; *p != '\0'; p++) {
    if (*p == '/') {
      *p = '\0';
      (void)mkdir(dir, 0755);
      *p = '/';
    }
  }
  FILE *f = fopen(path, "w");
  check(f != NULL);
  fputs(text, f);
  fclose(f);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

/* At exit: close everything and remove the temporary tree. */
static void cleanup(void) {
  em_sensors_free(sensors);
  sensors = NULL;
  for (size_t i = 0; i < NFILES; i++) {
    close(fds[i]);
  }
  nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void setup(void) {
  snprintf(root, sizeof root, "/tmp/em-fuzz-sensors-XXXXXX");
  check(mkdtemp(root) != NULL);
  put("sys/class/thermal/thermal_zone0/type", "CPU-therm\n");
  put("sys/class/thermal/thermal_zone0/trip_point_0_type", "passive\n");
  put(files[1], "99000\n");
  put(files[0], "45000\n");
  put(files[2], "1000000\n");
  put(files[3], "2000000\n");
  put(files[4], "2000000\n");
  put("sys/class/hwmon/hwmon0/name", "ina3221\n");
  put("sys/class/hwmon/hwmon0/in1_label", "VDD_IN\n");
  put(files[5], "5000\n");
  put(files[6], "1000\n");
  put(files[7], "0\n");
  for (size_t i = 0; i < NFILES; i++) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", root, files[i]);
    fds[i] = open(path, O_WRONLY | O_CLOEXEC);
    check(fds[i] >= 0);
  }
  em_log_set_level(EM_LOG_ERROR);
  check(em_sensors_new(&sensors, root, NULL) == 0);
  check(em_sensors_count(sensors) == 3 + 5 + 4);
  atexit(cleanup);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (sensors == NULL) {
    setup();
  }
  const char *text = (const char *)data;
  int64_t v = 0;
  int rc = em_sensors_parse_int(text, size, &v);
  check(rc == 0 || rc == -EINVAL);
  if (rc == 0) {
    for (size_t i = 0; i < size; i++) {
      char c = text[i];
      check((c >= '0' && c <= '9') || c == '-' || c == '+' || c == ' ' || c == '\t' || c == '\n' ||
            c == '\r');
    }
  }
  char name[32];
  rc = em_sensors_parse_name(text, size, name, sizeof name);
  check(rc == 0 || rc == -EINVAL);
  if (rc == 0) {
    size_t n = strlen(name);
    check(n > 0 && n < sizeof name);
    for (size_t i = 0; i < n; i++) {
      char c = name[i];
      check((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '_' || c == '-');
    }
  }

  if (size == 0) {
    return 0;
  }
  size_t which = data[0] % NFILES;
  const uint8_t *body = data + 1;
  size_t len = size - 1 > 4096 ? 4096 : size - 1;
  check(ftruncate(fds[which], 0) == 0);
  check(pwrite(fds[which], body, len, 0) == (ssize_t)len);
  int64_t expect;
  bool good = len <= 63 && em_sensors_parse_int((const char *)body, len, &expect) == 0;

  em_sensors_reading_t r;
  check(em_sensors_read(sensors, &r) == 0);
  check(r.count == em_sensors_count(sensors));
  check(r.parse_errors == (good ? 0u : 1u));
  for (unsigned i = 0; i < r.count; i++) {
    if (!r.present[i]) {
      continue;
    }
    check(isfinite(r.value[i]));
    if (strcmp(em_sensors_figure(sensors, i)->unit, "1") == 0 &&
        strstr(em_sensors_figure(sensors, i)->name, "throttle") == NULL) {
      check(r.value[i] == 0.0 || r.value[i] == 1.0);
    }
  }
  char why[160];
  em_throttle_t t = em_sensors_throttle(sensors, &r, why, sizeof why);
  check(t == EM_THROTTLE_NONE ? why[0] == '\0' : why[0] != '\0');
  /* Restore the file to a good value for the next input. */
  static const char *const good_text[NFILES] = {"45000\n",   "99000\n", "1000000\n", "2000000\n",
                                                "2000000\n", "5000\n",  "1000\n",    "0\n"};
  check(ftruncate(fds[which], 0) == 0);
  size_t gl = strlen(good_text[which]);
  check(pwrite(fds[which], good_text[which], gl, 0) == (ssize_t)gl);
  return 0;
}
