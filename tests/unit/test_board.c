/*
 * test_board.c - unit tests of firmware/agent/collect/board.c: the profiles in boards/ and
 * detection over the fixture trees in tests/fixtures/boards.
 *
 * Covered: every shipped profile parses, its name equals its file name and it carries the
 * fields the agent needs; every fixture tree detects its own profile, with a reason of the
 * kind expected (model, compatible, CPU part, arch); an empty root falls back to
 * generic-<uname arch> and says so; junk (binary bytes, NULs, an endless line, a FIFO) in
 * every identifying file neither crashes nor hangs and still falls back; CPU part and DMI
 * evidence ranked below model/compatible; bad profiles refused with the line named;
 * em_board_resolve for auto, generic, a name and an unknown name.
 */
#define _GNU_SOURCE /* mkdtemp, nftw under -std=c11. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "board.h"

#ifndef EM_FIXTURES_DIR
#error "EM_FIXTURES_DIR (absolute path of tests/fixtures) must be defined"
#endif

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define BOARDS_DIR   EM_FIXTURES_DIR "/../../boards"
#define FIXTURES     EM_FIXTURES_DIR "/boards"

static em_board_detection_t det; /* Large: static. */

/* ---- Helpers ---- */

static void write_file(const char *dir, const char *rel, const void *data, size_t len) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s", dir, rel);
  for (char *p = path + strlen(dir) + 1; *p; p++) {
    if (*p == '/') {
      *p = '\0';
      mkdir(path, 0755);
      *p = '/';
    }
  }
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, len, f), len);
  assert_int_equal(fclose(f), 0);
}

static void write_text(const char *dir, const char *rel, const char *text) {
  write_file(dir, rel, text, strlen(text));
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static char *make_tmp(void) {
  char *dir = strdup("/tmp/em-test-board-XXXXXX");
  assert_non_null(dir);
  assert_non_null(mkdtemp(dir));
  return dir;
}

static void rm_tmp(char *dir) {
  nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  free(dir);
}

static bool has_reason(const em_board_detection_t *d, const char *needle) {
  for (size_t i = 0; i < d->n_reasons; i++) {
    if (strstr(d->reasons[i], needle)) {
      return true;
    }
  }
  return false;
}

static void print_detection(const em_board_detection_t *d) {
  print_message("chosen %s\n", d->profile.name);
  for (size_t i = 0; i < d->n_reasons; i++) {
    print_message("  reason: %s\n", d->reasons[i]);
  }
  for (size_t i = 0; i < d->n_notes; i++) {
    print_message("  note: %s\n", d->notes[i]);
  }
}

static const char *uname_generic(void) {
  struct utsname u;
  assert_int_equal(uname(&u), 0);
  if (strcmp(u.machine, "aarch64") == 0) {
    return "generic-arm64";
  }
  assert_string_equal(u.machine, "x86_64"); /* The two arches with a generic profile. */
  return "generic-x86_64";
}

/* ---- Profiles ---- */

static const char *const shipped[] = {
    "generic-arm64",    "generic-x86_64", "jetson-agx-orin",  "jetson-agx-xavier", "jetson-nano",
    "jetson-orin-nano", "jetson-tx2",     "jetson-xavier-nx", "raspberry-pi-5",
};

static void profiles_listed_are_exactly_the_nine_shipped(void **state) {
  (void)state;
  char names[EM_BOARD_MAX_PROFILES][EM_BOARD_MAX_NAME];
  size_t n = 0;
  assert_int_equal(em_board_list(BOARDS_DIR, names, EM_BOARD_MAX_PROFILES, &n), 0);
  assert_int_equal(n, ARRAY_LEN(shipped));
  for (size_t i = 0; i < n; i++) {
    assert_string_equal(names[i], shipped[i]); /* Sorted. */
  }
}

static void every_profile_parses_and_names_its_file(void **state) {
  (void)state;
  for (size_t i = 0; i < ARRAY_LEN(shipped); i++) {
    char path[512], err[EM_BOARD_MAX_ERROR];
    em_board_profile_t p;
    snprintf(path, sizeof(path), "%s/%s.ini", BOARDS_DIR, shipped[i]);
    int rc = em_board_load(path, &p, err, sizeof(err));
    if (rc) {
      print_error("%s\n", err);
    }
    assert_int_equal(rc, 0);
    assert_string_equal(p.name, shipped[i]);
    assert_true(p.description[0] != '\0');
    assert_true(strcmp(p.arch, "aarch64") == 0 || strcmp(p.arch, "x86_64") == 0);
    assert_true(p.n_events >= 5 && p.n_events <= EM_BOARD_MAX_EVENTS);
    assert_string_equal(p.events[0], "cycles");
    assert_string_equal(p.events[1], "instructions");
    assert_int_equal(p.sample_period_ns, 100000000ull);
    assert_int_equal(p.sensors.period_ns, 1000000000ull);
    bool generic = strncmp(shipped[i], "generic-", 8) == 0;
    /* Generic profiles are chosen by arch only; every board profile can be recognised. */
    assert_int_equal(generic, p.n_model == 0 && p.n_compatible == 0 && p.n_cpu_parts == 0);
    if (!generic) {
      assert_true(p.n_events >= 8); /* The generic four and at least L1D/L2D refills. */
      bool refill = false;
      for (size_t e = 0; e < p.n_events; e++) {
        refill = refill || strcmp(p.events[e], "l1d_cache_refill") == 0;
      }
      assert_true(refill);
    }
  }
}

static void jetson_profile_fields_carry_the_file_values(void **state) {
  (void)state;
  em_board_profile_t p;
  assert_int_equal(em_board_load(BOARDS_DIR "/jetson-tx2.ini", &p, NULL, 0), 0);
  assert_int_equal(p.n_cpu_parts, 2);
  assert_int_equal(p.cpu_parts[0].implementer, 0x41);
  assert_int_equal(p.cpu_parts[0].part, 0xd07);
  assert_int_equal(p.cpu_parts[1].implementer, 0x4e);
  assert_int_equal(p.cpu_parts[1].part, 0x003);
  assert_string_equal(p.sensors.power, "iio:ina3221x");
  assert_string_equal(p.sensors.emc, "/sys/kernel/actmon_avg_activity/mc_all");
  assert_true(p.has_temp_max);
  assert_int_equal(p.temp_max_c, 85);
  assert_false(p.sensors.nvml);
}

/* Bad profiles: each refused with -EINVAL and the line and words of the problem. */
static void bad_profiles_are_refused_with_the_line(void **state) {
  (void)state;
  static const struct {
    const char *text;
    const char *expect;
  } rows[] = {
      {"[board]\nname = other\ndescription = d\narch = aarch64\n", "does not match the file"},
      {"[board]\nname = t\ndescription = d\n", "arch is missing"},
      {"[board]\nname = t\ndescription = d\narch = mips\n", ":4: arch 'mips'"},
      {"[board]\nname = t\nname = t\n", ":3: duplicate key 'name'"},
      {"[board]\nname = t\ncolour = red\n", ":3: unknown key 'colour'"},
      {"[board]\nname = t\ndescripton = d\n",
       ":3: unknown key 'descripton' in [board]; did you mean 'description'?"},
      {"[sensor]\nperiod = 1s\n", ":1: unknown section '[sensor]' (board, pmu, sensors or "
                                  "defaults); did you mean [sensors]?"},
      {"[bord]\nname = t\n", ":1: unknown section"},
      {"name = t\n", ":1: key 'name' is outside any section"},
      {"[board]\njust words\n", ":2: 'just words' is not key = value"},
      {"[board]\nname = t\ncpu_parts = 0x41-0xd42\n", ":3: cpu_parts: bad entry"},
      {"[board]\nname = t\ncpu_parts = 0x141:0xd42\n", "cpu_parts: bad entry"},
      {"[board]\nname = t\ncompatible = a, , b\n", "empty entry"},
      {"[board]\nname = t\nmodel = a,\n", "empty entry after the last comma"},
      {"[pmu]\nevents = a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q\n", ":2: events: more than 16"},
      {"[pmu]\nevents = cycles, pmu/x\n", "events: bad entry 'pmu/x'"},
      {"[pmu]\nevents = cycles, bad name\n", "events: bad entry"},
      {"[sensors]\nperiod = 5ms\n", ":2: period '5ms'"},
      {"[sensors]\ngpu_load = relative/load\n", "gpu_load 'relative/load'"},
      {"[sensors]\nemc = /sys/../etc/shadow\n", "emc '/sys/../etc/shadow'"},
      {"[sensors]\npower = i2c:ina3221\n", "power 'i2c:ina3221'"},
      {"[sensors]\nnvml = yes\n", "nvml 'yes'"},
      {"[sensors]\nthermal = cpu zone\n", "thermal: bad entry"},
      {"[defaults]\nsample_period = 2m\n", "sample_period '2m'"},
      {"[defaults]\ntemp_max = 300\n", "temp_max '300'"},
      {"[board]\nname =\n", ":2: name has no value"},
  };
  char *dir = make_tmp();
  char path[512];
  snprintf(path, sizeof(path), "%s/t.ini", dir);
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    write_text(dir, "t.ini", rows[i].text);
    em_board_profile_t p;
    char err[EM_BOARD_MAX_ERROR] = "";
    int rc = em_board_load(path, &p, err, sizeof(err));
    if (rc != -EINVAL || !strstr(err, rows[i].expect)) {
      print_error("row %zu: rc %d, '%s', want '%s'\n", i, rc, err, rows[i].expect);
    }
    assert_int_equal(rc, -EINVAL);
    assert_non_null(strstr(err, rows[i].expect));
    assert_non_null(strstr(err, path));
  }
  char big[600];
  memset(big, 'x', sizeof(big));
  memcpy(big, "[board]\ndescription = ", 22);
  big[sizeof(big) - 1] = '\n';
  write_file(dir, "t.ini", big, sizeof(big));
  char err[EM_BOARD_MAX_ERROR];
  em_board_profile_t p;
  assert_int_equal(em_board_load(path, &p, err, sizeof(err)), -EINVAL);
  assert_non_null(strstr(err, ":2: line is longer than"));
  write_file(dir, "t.ini", "[board]\n\0name = t\n", 18);
  assert_int_equal(em_board_load(path, &p, err, sizeof(err)), -EINVAL);
  snprintf(path, sizeof(path), "%s/missing.ini", dir);
  assert_int_equal(em_board_load(path, &p, err, sizeof(err)), -ENOENT);
  assert_non_null(strstr(err, "cannot open"));
  rm_tmp(dir);
}

/* ---- Detection over the fixture trees ---- */

static void every_fixture_tree_detects_its_own_profile(void **state) {
  (void)state;
  static const struct {
    const char *board;
    const char *reason; /* A piece of one reason. */
  } rows[] = {
      {"jetson-agx-orin",
       "model 'NVIDIA Jetson AGX Orin Developer Kit' contains 'Jetson AGX Orin'"},
      {"jetson-orin-nano", "contains 'Jetson Orin Nano'"},
      {"jetson-agx-xavier", "model 'Jetson-AGX' contains 'Jetson-AGX'"},
      {"jetson-xavier-nx", "contains 'Jetson Xavier NX'"},
      {"jetson-nano", "contains 'Jetson Nano'"},
      {"jetson-tx2", "model 'quill' contains 'quill'"},
      {"raspberry-pi-5", "model 'Raspberry Pi 5 Model B Rev 1.0' contains 'Raspberry Pi 5'"},
      {"generic-arm64", "generic profile for arch aarch64 (arch from proc/cpuinfo"},
      {"generic-x86_64", "generic profile for arch x86_64 (arch from proc/cpuinfo"},
  };
  static const char *const cpu_reason[] = {
      "CPU part 0x41:0xd42 x12",
      "CPU part 0x41:0xd42 x6",
      "CPU part 0x4e:0x004 x8",
      "CPU part 0x4e:0x004 x6",
      "CPU part 0x41:0xd07 x4",
      "CPU part 0x4e:0x003 x2",
      "CPU part 0x41:0xd0b x4",
      "0x41:0xd0c x80 match no profile",
      "DMI sys_vendor 'Dell Inc.' matches no profile",
  };
  assert_int_equal(ARRAY_LEN(rows), ARRAY_LEN(shipped));
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    char root[512];
    snprintf(root, sizeof(root), "%s/%s", FIXTURES, rows[i].board);
    assert_int_equal(em_board_detect(root, BOARDS_DIR, &det), 0);
    if (strcmp(det.profile.name, rows[i].board) != 0 || !has_reason(&det, rows[i].reason) ||
        !has_reason(&det, cpu_reason[i])) {
      print_detection(&det);
    }
    assert_string_equal(det.profile.name, rows[i].board);
    assert_true(has_reason(&det, rows[i].reason));
    if (strncmp(rows[i].board, "generic-", 8) != 0) {
      assert_non_null(strstr(det.reasons[0], "model '")); /* Strongest evidence first. */
    }
    assert_true(has_reason(&det, cpu_reason[i]));
    assert_int_equal(det.n_notes, 0); /* No broken profile, no tie. */
  }
}

static void empty_root_falls_back_to_generic_of_uname_arch(void **state) {
  (void)state;
  char *dir = make_tmp();
  assert_int_equal(em_board_detect(dir, BOARDS_DIR, &det), 0);
  assert_string_equal(det.profile.name, uname_generic());
  assert_int_equal(det.n_reasons, 1);
  assert_non_null(strstr(det.reasons[0], "generic profile for arch"));
  assert_non_null(strstr(det.reasons[0], "uname"));
  rm_tmp(dir);
}

static void junk_in_every_file_neither_crashes_nor_hangs(void **state) {
  (void)state;
  static const char *const files[] = {
      "proc/cpuinfo",
      "proc/device-tree/model",
      "proc/device-tree/compatible",
      "sys/class/dmi/id/sys_vendor",
      "sys/class/dmi/id/product_name",
      "sys/class/dmi/id/board_name",
  };
  unsigned seed = 12345;
  char junk[70000];
  for (int round = 0; round < 4; round++) {
    char *dir = make_tmp();
    for (size_t f = 0; f < ARRAY_LEN(files); f++) {
      size_t len = round == 3 ? sizeof(junk) : 1000u * (unsigned)(round + 1);
      for (size_t i = 0; i < len; i++) {
        seed = seed * 1103515245u + 12345u;
        junk[i] = round == 2 ? 'A' : (char)(seed >> 16); /* Round 2: one endless line. */
      }
      write_file(dir, files[f], junk, len);
    }
    assert_int_equal(em_board_detect(dir, BOARDS_DIR, &det), 0);
    assert_non_null(strstr(det.profile.name, "generic-"));
    for (size_t i = 0; i < det.n_reasons; i++) {
      for (const char *c = det.reasons[i]; *c; c++) {
        assert_true(*c >= 0x20 && *c < 0x7f); /* Junk is shown as '?'. */
      }
    }
    rm_tmp(dir);
  }
  /* cpuinfo lines that look right but carry junk values; a FIFO as the model. */
  char *dir = make_tmp();
  write_text(dir, "proc/cpuinfo",
             "CPU implementer\t: 0x41zz\nCPU part\t: 0xd42\nCPU implementer\t: 0x999\n"
             "CPU part\t: 0xd42\nCPU implementer\t: \nCPU part\t: 99999999999999999999\n"
             "CPU architecture: 8\n");
  write_text(dir, "proc/device-tree/compatible", "");
  char fifo[512];
  snprintf(fifo, sizeof(fifo), "%s/proc/device-tree/model", dir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  assert_int_equal(em_board_detect(dir, BOARDS_DIR, &det), 0);
  assert_string_equal(det.profile.name, "generic-arm64");
  assert_false(has_reason(&det, "CPU part"));
  rm_tmp(dir);
}

/* A board with neither model nor compatible: CPU parts decide, then DMI; ties sort by name. */
static void cpu_parts_then_dmi_decide_without_a_device_tree(void **state) {
  (void)state;
  char *dir = make_tmp();
  write_text(dir, "proc/cpuinfo",
             "processor\t: 0\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU part\t: 0xd07\n\n"
             "processor\t: 1\nCPU implementer\t: 0x4e\nCPU architecture: 8\nCPU part\t: 0x003\n");
  assert_int_equal(em_board_detect(dir, BOARDS_DIR, &det), 0);
  assert_string_equal(det.profile.name, "jetson-tx2"); /* Both parts: TX2, not Nano. */
  assert_true(has_reason(&det, "CPU part 0x4e:0x003 x1"));
  /* A57 alone: Nano and TX2 tie; the first name wins and a note says so. */
  write_text(dir, "proc/cpuinfo",
             "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU part\t: 0xd07\n");
  assert_int_equal(em_board_detect(dir, BOARDS_DIR, &det), 0);
  assert_string_equal(det.profile.name, "jetson-nano");
  assert_int_equal(det.n_notes, 1);
  assert_non_null(strstr(det.notes[0], "jetson-tx2"));
  /* A model beats any number of CPU parts. */
  write_file(dir, "proc/device-tree/model", "Raspberry Pi 5 Model B\0", 23);
  assert_int_equal(em_board_detect(dir, BOARDS_DIR, &det), 0);
  assert_string_equal(det.profile.name, "raspberry-pi-5");

  /* DMI decides among profiles of a directory of our own, below a CPU part. */
  char *boards = make_tmp();
  write_text(boards, "x86-box.ini",
             "[board]\nname = x86-box\ndescription = box\narch = x86_64\ndmi = OptiPlex\n");
  write_text(boards, "x86-other.ini",
             "[board]\nname = x86-other\ndescription = other\narch = x86_64\ndmi = Dell\n"
             "cpu_parts = 0x41:0xd0c\n");
  write_text(boards, "broken.ini", "[board]\nname = nope\n");
  char x86[512];
  snprintf(x86, sizeof(x86), "%s/generic-x86_64", FIXTURES);
  assert_int_equal(em_board_detect(x86, boards, &det), 0);
  print_detection(&det);
  /* Both DMI rows match once; the tie goes to the first name. */
  assert_string_equal(det.profile.name, "x86-box");
  assert_true(has_reason(&det, "DMI product_name 'OptiPlex 7070' contains 'OptiPlex'"));
  assert_true(det.n_notes >= 1);
  assert_non_null(strstr(det.notes[0], "broken.ini"));
  /* No generic-* there: nothing to fall back to. */
  assert_int_equal(em_board_detect(dir, boards, &det), -ENOENT);
  rm_tmp(boards);
  rm_tmp(dir);
}

static void resolve_auto_generic_name_and_unknown(void **state) {
  (void)state;
  char root[512];
  snprintf(root, sizeof(root), "%s/jetson-orin-nano", FIXTURES);
  assert_int_equal(em_board_resolve("auto", root, BOARDS_DIR, &det), 0);
  assert_string_equal(det.profile.name, "jetson-orin-nano");
  assert_int_equal(em_board_resolve("generic", root, BOARDS_DIR, &det), 0);
  assert_string_equal(det.profile.name, "generic-arm64");
  assert_int_equal(em_board_resolve("raspberry-pi-5", root, BOARDS_DIR, &det), 0);
  assert_string_equal(det.profile.name, "raspberry-pi-5");
  assert_true(has_reason(&det, "named in the config"));
  assert_int_equal(em_board_resolve("jetson-thor", root, BOARDS_DIR, &det), -ENOENT);
  assert_int_equal(em_board_resolve("../boards/jetson-nano", root, BOARDS_DIR, &det), -ENOENT);
  assert_int_equal(em_board_resolve("auto", root, "/nonexistent-em-boards", &det), -ENOENT);
  assert_int_equal(em_board_detect(root, "/nonexistent-em-boards", &det), -ENOENT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(profiles_listed_are_exactly_the_nine_shipped),
      cmocka_unit_test(every_profile_parses_and_names_its_file),
      cmocka_unit_test(jetson_profile_fields_carry_the_file_values),
      cmocka_unit_test(bad_profiles_are_refused_with_the_line),
      cmocka_unit_test(every_fixture_tree_detects_its_own_profile),
      cmocka_unit_test(empty_root_falls_back_to_generic_of_uname_arch),
      cmocka_unit_test(junk_in_every_file_neither_crashes_nor_hangs),
      cmocka_unit_test(cpu_parts_then_dmi_decide_without_a_device_tree),
      cmocka_unit_test(resolve_auto_generic_name_and_unknown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
