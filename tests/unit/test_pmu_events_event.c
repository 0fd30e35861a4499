/*
 * test_pmu_events_event.c - the event the agent opens for a configured name
 * (em_pmu_events_event() of firmware/agent/collect/pmu_events.c): generic names from pmu.c's
 * table, raw codes, PMU-named events and kernel event names resolved against the board
 * fixture trees (tests/fixtures/boards/<board>/sys/bus/event_source), an event both TX2
 * clusters have folded into one event with a part per PMU and each PMU's CPUs, and a name
 * nothing resolves kept as an absent event (EM_PMU_EVENTS_ABSENT_TYPE) with the errno. A tree
 * built in a temporary directory shows two CPU PMUs with one type (a broken sysfs): the event
 * keeps the first, never two parts of one type (em_pmu_new() would refuse the event).
 */
#define _XOPEN_SOURCE 700 /* POSIX 2008 plus XSI, for nftw() in tmp_tree.h */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pmu_events.h"
#include "tmp_tree.h"

#include "fixtures.h"
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define NO_CPUS      "" /* every CPU: the set is empty */

/* The CPUs 0..7 of a set as a string of '0'/'1' ("10011100": CPUs 0, 3, 4, 5). */
static void cpus_of(const em_pmu_cpus_t *set, char out[9]) {
  bool any = false;
  for (unsigned cpu = 0; cpu < 8; cpu++) {
    bool on = (set->bits[0] >> cpu) & 1u;
    out[cpu] = on ? '1' : '0';
    any = any || on;
  }
  out[8] = '\0';
  if (!any) {
    out[0] = '\0';
  }
}

static const struct {
  const char *board;
  const char *name;
  int rc;
  uint32_t type;
  uint64_t config;
  const char *cpus;   /* of the event's own (first) PMU */
  size_t n_parts;     /* further PMUs */
  uint32_t part_type; /* parts[0], when n_parts is 1 */
  const char *part_cpus;
} rows[] = {
    /* Generic names: pmu.c's table, no PMU, every CPU. */
    {"generic-x86_64", "cycles", 0, PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, NO_CPUS, 0, 0,
     NULL},
    {"jetson-tx2", "task-clock", 0, PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, NO_CPUS, 0, 0,
     NULL},
    /* A raw code: no PMU named, no CPU list. */
    {"jetson-tx2", "r0011", 0, PERF_TYPE_RAW, 0x11, NO_CPUS, 0, 0, NULL},
    /* A PMU-named event: that PMU's type and CPUs only. */
    {"jetson-tx2", "armv8_cortex_a57/br_mis_pred/", 0, 9, 0x10, "10011100", 0, 0, NULL},
    /* A kernel event name only the A57 cluster lists. */
    {"jetson-tx2", "l2d_cache_wb", 0, 9, 0x18, "10011100", 0, 0, NULL},
    /* Both clusters have it: the A57 first, the Denver cluster a part, CPUs disjoint. */
    {"jetson-tx2", "cpu_cycles", 0, 9, 0x11, "10011100", 1, 8, "01100000"},
    {"jetson-tx2", "inst_retired", 0, 9, 0x08, "10011100", 1, 8, "01100000"},
    /* Nothing resolves: absent, with resolve's errno. */
    {"jetson-tx2", "stall_backend", -ENOENT, EM_PMU_EVENTS_ABSENT_TYPE, 0, NO_CPUS, 0, 0, NULL},
    {"generic-x86_64", "no-such-event", -ENOENT, EM_PMU_EVENTS_ABSENT_TYPE, 0, NO_CPUS, 0, 0, NULL},
    {"generic-x86_64", "", -EINVAL, EM_PMU_EVENTS_ABSENT_TYPE, 0, NO_CPUS, 0, 0, NULL},
    {"generic-x86_64", "nopmu/event=1/", -ENOENT, EM_PMU_EVENTS_ABSENT_TYPE, 0, NO_CPUS, 0, 0,
     NULL},
};

static void each_configured_name_becomes_its_event(void **state) {
  (void)state;
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    char root[512];
    snprintf(root, sizeof(root), "%s/%s", BOARDS_DIR, rows[i].board);
    em_pmu_event_t ev;
    memset(&ev, 0xa5, sizeof(ev)); /* every field must be written */
    int rc = em_pmu_events_event(root, rows[i].name, &ev);
    if (rc != rows[i].rc) {
      fail_msg("%s on %s: rc %d, expected %d", rows[i].name, rows[i].board, rc, rows[i].rc);
    }
    if (strcmp(ev.name, rows[i].name) != 0) {
      fail_msg("%s: name '%s'", rows[i].name, ev.name);
    }
    if (ev.type != rows[i].type || ev.config != rows[i].config) {
      fail_msg("%s on %s: type %u config %#llx, expected %u %#llx", rows[i].name, rows[i].board,
               (unsigned)ev.type, (unsigned long long)ev.config, (unsigned)rows[i].type,
               (unsigned long long)rows[i].config);
    }
    assert_int_equal(ev.config1, 0);
    assert_int_equal(ev.config2, 0);
    char cpus[9];
    cpus_of(&ev.cpus, cpus);
    if (strcmp(cpus, rows[i].cpus) != 0) {
      fail_msg("%s on %s: CPUs '%s', expected '%s'", rows[i].name, rows[i].board, cpus,
               rows[i].cpus);
    }
    if (ev.n_parts != rows[i].n_parts) {
      fail_msg("%s on %s: %zu parts, expected %zu", rows[i].name, rows[i].board, ev.n_parts,
               rows[i].n_parts);
    }
    if (rows[i].n_parts == 1) {
      assert_int_equal(ev.parts[0].type, rows[i].part_type);
      assert_int_equal(ev.parts[0].config, rows[i].config);
      cpus_of(&ev.parts[0].cpus, cpus);
      assert_string_equal(cpus, rows[i].part_cpus);
    }
  }
}

static void null_arguments(void **state) {
  (void)state;
  em_pmu_event_t ev;
  assert_int_equal(em_pmu_events_event(BOARDS_DIR "/jetson-tx2", "cycles", NULL), -EINVAL);
  memset(&ev, 0xa5, sizeof(ev));
  assert_int_equal(em_pmu_events_event(BOARDS_DIR "/jetson-tx2", NULL, &ev), -EINVAL);
  assert_int_equal(ev.type, EM_PMU_EVENTS_ABSENT_TYPE);
  assert_int_equal(ev.n_parts, 0);
  assert_string_equal(ev.name, "");
  /* A generic name needs no tree; anything else does. */
  assert_int_equal(em_pmu_events_event(NULL, "instructions", &ev), 0);
  assert_int_equal(ev.type, PERF_TYPE_HARDWARE);
  assert_int_equal(em_pmu_events_event(NULL, "cpu_cycles", &ev), -EINVAL);
  assert_int_equal(ev.type, EM_PMU_EVENTS_ABSENT_TYPE);
}

/* ---- a broken tree ---- */

/* Two CPU PMUs report type 7: the event is counted once, on the first, never as two parts of
 * one type; a third PMU with its own type stays a part. */
static void repeated_type_is_counted_once(void **state) {
  (void)state;
  char root[EM_TMP_TREE_ROOT_BYTES];
  em_tmp_tree_make(root, "em-pmu-event-test");
  static const struct {
    const char *pmu, *type, *cpus;
  } pmus[] = {{"pmu_a", "7\n", "0-1\n"}, {"pmu_b", "7\n", "2-3\n"}, {"pmu_c", "12\n", "4\n"}};
  for (size_t i = 0; i < ARRAY_LEN(pmus); i++) {
    char rel[256];
    snprintf(rel, sizeof(rel), "sys/bus/event_source/devices/%s/type", pmus[i].pmu);
    em_tmp_tree_put(root, rel, pmus[i].type);
    snprintf(rel, sizeof(rel), "sys/bus/event_source/devices/%s/cpus", pmus[i].pmu);
    em_tmp_tree_put(root, rel, pmus[i].cpus);
    snprintf(rel, sizeof(rel), "sys/bus/event_source/devices/%s/format/event", pmus[i].pmu);
    em_tmp_tree_put(root, rel, "config:0-7\n");
    snprintf(rel, sizeof(rel), "sys/bus/event_source/devices/%s/events/foo", pmus[i].pmu);
    em_tmp_tree_put(root, rel, "event=0x2a\n");
  }
  em_pmu_event_t ev;
  int rc = em_pmu_events_event(root, "foo", &ev);
  em_tmp_tree_remove(root);
  assert_int_equal(rc, 0);
  assert_int_equal(ev.type, 7);
  assert_int_equal(ev.config, 0x2a);
  char cpus[9];
  cpus_of(&ev.cpus, cpus);
  assert_string_equal(cpus, "11000000");
  assert_int_equal(ev.n_parts, 1);
  assert_int_equal(ev.parts[0].type, 12);
  assert_int_equal(ev.parts[0].config, 0x2a);
  cpus_of(&ev.parts[0].cpus, cpus);
  assert_string_equal(cpus, "00001000");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(each_configured_name_becomes_its_event),
      cmocka_unit_test(null_arguments),
      cmocka_unit_test(repeated_type_is_counted_once),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
