/*
 * fuzz_pmu_events.c - libFuzzer harness for event resolution (firmware/agent/collect/pmu_events.c).
 *
 * The input is up to five parts separated by 0x1f bytes: an event string, then the contents
 * of the type, cpus, format/event and events/e files of one PMU "fz" in a scratch sysfs tree
 * (format/umask is fixed, "config:8-15"). A missing part leaves the file absent. The event
 * string (or "e" when empty) is resolved against the tree, and every part also goes through
 * the format and cpus parsers. Checks: a success has 1..EM_PMU_EVENTS_MAX_ENTRIES entries
 * and no error text; a failure is a negative errno, no entries, and a non-empty one-line
 * message; a parsed format has a non-empty mask and encodes its own width but not one more.
 *
 * The scratch tree is made once under /tmp and removed at exit.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pmu_events.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PARTS 5

static char root[64];
static char pmu_dir[256];
static const char *const files[PARTS] = {NULL, "type", "cpus", "format/event", "events/e"};

static void path_of(char *buf, size_t cap, const char *rel) {
  snprintf(buf, cap, "%s/%s", pmu_dir, rel);
}

static void cleanup(void) {
  char path[512];
  for (size_t i = 1; i < PARTS; i++) {
    path_of(path, sizeof(path), files[i]);
    unlink(path);
  }
  path_of(path, sizeof(path), "format/umask");
  unlink(path);
  static const char *const dirs[] = {"sys/bus/event_source/devices/fz/format",
                                     "sys/bus/event_source/devices/fz/events",
                                     "sys/bus/event_source/devices/fz",
                                     "sys/bus/event_source/devices",
                                     "sys/bus/event_source",
                                     "sys/bus",
                                     "sys",
                                     ""};
  for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
    snprintf(path, sizeof(path), "%s/%s", root, dirs[i]);
    rmdir(path);
  }
}

static void make_tree(void) {
  snprintf(root, sizeof(root), "/tmp/em-fuzz-pmuev-XXXXXX");
  if (mkdtemp(root) == NULL) {
    abort();
  }
  static const char *const dirs[] = {"sys",
                                     "sys/bus",
                                     "sys/bus/event_source",
                                     "sys/bus/event_source/devices",
                                     "sys/bus/event_source/devices/fz",
                                     "sys/bus/event_source/devices/fz/format",
                                     "sys/bus/event_source/devices/fz/events"};
  char path[512];
  for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
    snprintf(path, sizeof(path), "%s/%s", root, dirs[i]);
    if (mkdir(path, 0700) != 0) {
      abort();
    }
  }
  snprintf(pmu_dir, sizeof(pmu_dir), "%s/sys/bus/event_source/devices/fz", root);
  path_of(path, sizeof(path), "format/umask");
  FILE *f = fopen(path, "w");
  if (f == NULL) {
    abort();
  }
  fputs("config:8-15\n", f);
  fclose(f);
  atexit(cleanup);
}

static void check_format(const char *text) {
  em_pmu_events_format_t fmt;
  if (em_pmu_events_parse_format(text, &fmt) != 0) {
    return;
  }
  if (fmt.mask == 0 || fmt.word < 0 || fmt.word > 2) {
    abort();
  }
  unsigned width = 0;
  for (uint64_t x = fmt.mask; x != 0; x &= x - 1) {
    width++;
  }
  uint64_t cfg[3] = {0, 0, 0};
  uint64_t full = width == 64 ? UINT64_MAX : (UINT64_C(1) << width) - 1;
  if (em_pmu_events_encode(&fmt, full, cfg) != 0 || cfg[fmt.word] != fmt.mask) {
    abort();
  }
  if (width < 64 && em_pmu_events_encode(&fmt, full + 1, cfg) != -ERANGE) {
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (root[0] == '\0') {
    make_tree();
  }
  if (size > 8192) {
    return 0;
  }
  char *copy = malloc(size + 1);
  if (copy == NULL) {
    return 0;
  }
  memcpy(copy, data, size);
  copy[size] = '\0';
  const char *part[PARTS] = {NULL, NULL, NULL, NULL, NULL};
  size_t len[PARTS] = {0, 0, 0, 0, 0};
  size_t n = 0;
  size_t start = 0;
  for (size_t i = 0; i <= size && n < PARTS; i++) {
    if (i == size || copy[i] == 0x1f) {
      part[n] = copy + start;
      len[n] = i - start;
      copy[i] = '\0';
      n++;
      start = i + 1;
    }
  }
  char path[512];
  for (size_t i = 1; i < PARTS; i++) {
    path_of(path, sizeof(path), files[i]);
    unlink(path);
    if (part[i] == NULL) {
      continue;
    }
    FILE *f = fopen(path, "w");
    if (f == NULL) {
      abort();
    }
    fwrite(part[i], 1, len[i], f);
    fclose(f);
  }
  for (size_t i = 0; i < n; i++) {
    check_format(part[i]);
    em_pmu_events_cpus_t cpus;
    (void)em_pmu_events_parse_cpus(part[i], &cpus);
  }
  const char *event = part[0] != NULL && part[0][0] != '\0' ? part[0] : "e";
  em_pmu_events_t out;
  int rc = em_pmu_events_resolve(root, event, &out);
  if (rc == 0) {
    if (out.n == 0 || out.n > EM_PMU_EVENTS_MAX_ENTRIES || out.error[0] != '\0') {
      abort();
    }
  } else if (rc > 0 || out.n != 0 || out.error[0] == '\0' || strchr(out.error, '\n') != NULL) {
    abort();
  }
  free(copy);
  return 0;
}
