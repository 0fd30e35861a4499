/*
 * test_gpumem.c - collect/gpumem: the nvmap clients parser on the Orin and Xavier fixtures and
 * on hostile text, the target's pids (a process tree, a cgroup), the reader over a fixture
 * root (nvmap, a file it may not read, no source at all), and the NVML path through the
 * stand-in library (fake_nvml.c): the _v3 call, the fallback to _v2 and to the unversioned call
 * when the library lacks the newer ones, an NVML error code, too many processes.
 *
 * FAKE_NVML_V3_LIB, FAKE_NVML_V2_LIB and FAKE_NVML_V1_LIB name the three builds of the stand-in
 * by path (the reader's nvml_lib): the loader's search path is not the test's to set where the
 * tests run under qemu-aarch64, which sets LD_LIBRARY_PATH to its sysroot's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpumem.h"
#include "tmp_tree.h"

#define KIB 1024ULL
#define MIB (1024ULL * 1024ULL)

/* The nvmap file's path below a root (the path without its leading '/'). */
static const char *const NVMAP_REL = &EM_GPUMEM_NVMAP_PATH[1];

static const char *const HEADER = "CLIENT                        PROCESS      PID        SIZE\n";

/* The fixture file of `board` into buf (NUL-terminated); its length. */
static size_t fixture(const char *board, char *buf, size_t cap) {
  char path[512];
  snprintf(path, sizeof(path), "%s/boards/%s%s", EM_FIXTURES_DIR, board, EM_GPUMEM_NVMAP_PATH);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t n = fread(buf, 1, cap - 1, f);
  fclose(f);
  buf[n] = '\0';
  return n;
}

static void nvmap_orin_sums_the_three_clients_of_the_process_tree(void **state) {
  (void)state;
  char buf[4096];
  size_t n = fixture("jetson-agx-orin", buf, sizeof(buf));
  const pid_t pids[] = {2817, 2869};
  em_gpumem_nvmap_t r;
  assert_int_equal(em_gpumem_parse_nvmap(buf, n, pids, 2, &r), 0);
  assert_int_equal(r.clients, 3); /* 2817 twice (two clients), its worker 2869 once. */
  assert_int_equal(r.bytes, (1843200 + 65536 + 4096) * KIB);
  assert_int_equal(r.total_bytes, 2011136 * KIB);
  /* The parent alone: its two clients, not the worker's. */
  assert_int_equal(em_gpumem_parse_nvmap(buf, n, pids, 1, &r), 0);
  assert_int_equal(r.clients, 2);
  assert_int_equal(r.bytes, (1843200 + 4096) * KIB);
}

static void nvmap_xavier_with_its_left_aligned_total_line(void **state) {
  (void)state;
  char buf[4096];
  size_t n = fixture("jetson-agx-xavier", buf, sizeof(buf));
  const pid_t pid = 7712;
  em_gpumem_nvmap_t r;
  assert_int_equal(em_gpumem_parse_nvmap(buf, n, &pid, 1, &r), 0);
  assert_int_equal(r.clients, 1);
  assert_int_equal(r.bytes, 786432 * KIB);
  assert_int_equal(r.total_bytes, 849920 * KIB);
}

static void nvmap_a_pid_without_clients_holds_zero(void **state) {
  (void)state;
  char buf[4096];
  size_t n = fixture("jetson-agx-orin", buf, sizeof(buf));
  const pid_t pids[] = {1, 28170, 281}; /* Prefixes and extensions of 2817 do not match. */
  em_gpumem_nvmap_t r;
  assert_int_equal(em_gpumem_parse_nvmap(buf, n, pids, 3, &r), 0);
  assert_int_equal(r.clients, 0);
  assert_int_equal(r.bytes, 0);
  assert_int_equal(r.total_bytes, 2011136 * KIB);
}

/* Texts that parse, and what pid 42 holds in each. */
static void nvmap_suffixes_blanks_and_names_with_spaces(void **state) {
  (void)state;
  static const struct {
    const char *body; /* After the header. */
    uint64_t bytes;
  } cases[] = {
      {"user python3 42 3M\ntotal 3M\n", 3 * MIB},
      {"user python3 42 2G\ntotal 2G\n", 2048 * MIB},
      {"user python3 42 4096\ntotal 4096\n", 4096},              /* Bytes, no suffix. */
      {"\nuser python3 42 1K\n\n\ntotal 1K\n\n", KIB},           /* Blank lines. */
      {"user  python3\t42\t 8K\r\ntotal 8K\r\n", 8 * KIB},       /* Tabs and CRLF. */
      {"nv host1x client my app 42 16K\ntotal 16K\n", 16 * KIB}, /* Names with spaces. */
      {"user python3 42 0K\ntotal 0K", 0},                       /* No last newline. */
      {"user a 42 18014398509481983K\ntotal 1K\n", 18014398509481983ULL * KIB}, /* 2^64 - 1K */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char text[512];
    snprintf(text, sizeof(text), "%s%s", HEADER, cases[i].body);
    const pid_t pid = 42;
    em_gpumem_nvmap_t r;
    int rc = em_gpumem_parse_nvmap(text, strlen(text), &pid, 1, &r);
    if (rc != 0 || r.bytes != cases[i].bytes) {
      fail_msg("case %zu: rc %d, %llu bytes", i, rc, (unsigned long long)r.bytes);
    }
  }
}

/* Texts refused whole: a figure from them could be wrong. */
static void nvmap_hostile_text_is_refused_with_a_zero_record(void **state) {
  (void)state;
  char long_line[EM_GPUMEM_LINE_MAX + 64];
  memset(long_line, 'x', sizeof(long_line) - 1);
  long_line[sizeof(long_line) - 1] = '\0';
  static const char *const bodies[] = {
      "user python3 42 12X\ntotal 1K\n",                   /* Bad suffix. */
      "user python3 42 K\ntotal 1K\n",                     /* Suffix alone. */
      "user python3 42 -5K\ntotal 1K\n",                   /* Negative. */
      "user python3 4x2 5K\ntotal 1K\n",                   /* Bad pid. */
      "user python3 42\ntotal 1K\n",                       /* Missing size. */
      "42 5K\ntotal 1K\n",                                 /* Too few fields. */
      "user python3 42 99999999999999999999K\ntotal 1K\n", /* Past 2^64 digits. */
      "user python3 42 18014398509481984K\ntotal 1K\n",    /* 2^54 K = 2^64 bytes. */
      "user a 42 9007199254740992K\nuser b 42 9007199254740992K\ntotal 1K\n", /* Sum past. */
      "user python3 42 5K\n",                            /* No total: cut short. */
      "user python3 42 5K\ntotal 5K\nuser late 42 1K\n", /* A line after the total. */
      "user python3 42 5K\ntotal\n",                     /* Total without a size. */
      "user python3 42 5K\ntotal 5Q\n",                  /* Total with a bad size. */
  };
  for (size_t i = 0; i <= sizeof(bodies) / sizeof(bodies[0]) + 3; i++) {
    char text[EM_GPUMEM_LINE_MAX * 2 + 256];
    size_t len;
    if (i < sizeof(bodies) / sizeof(bodies[0])) {
      len = (size_t)snprintf(text, sizeof(text), "%s%s", HEADER, bodies[i]);
    } else if (i == sizeof(bodies) / sizeof(bodies[0])) {
      len = (size_t)snprintf(text, sizeof(text), "user python3 42 5K\ntotal 5K\n"); /* No header. */
    } else if (i == sizeof(bodies) / sizeof(bodies[0]) + 1) {
      len = (size_t)snprintf(text, sizeof(text), "%suser %s 42 5K\ntotal 5K\n", HEADER, long_line);
    } else if (i == sizeof(bodies) / sizeof(bodies[0]) + 2) {
      len = (size_t)snprintf(text, sizeof(text), "CLIENT PROCESS PID\ntotal 5K\n"); /* Header. */
    } else {
      len = (size_t)snprintf(text, sizeof(text), "%suser py 42 5K\ntotal 5K\n", HEADER);
      text[strlen(HEADER) + 5] = '\0'; /* A NUL inside a line. */
    }
    const pid_t pid = 42;
    em_gpumem_nvmap_t r;
    memset(&r, 0xa5, sizeof(r));
    int rc = em_gpumem_parse_nvmap(text, len, &pid, 1, &r);
    if (rc != -EINVAL || r.bytes != 0 || r.clients != 0 || r.total_bytes != 0) {
      fail_msg("case %zu: rc %d, %llu bytes", i, rc, (unsigned long long)r.bytes);
    }
  }
  assert_int_equal(em_gpumem_parse_nvmap("", 0, NULL, 0, NULL), -EINVAL);
}

/* A fixture root: the Orin's nvmap file under sys/, and a proc/ with 2817 -> 2869 -> 2900. */
typedef struct {
  char root[EM_TMP_TREE_ROOT_BYTES];
  char proc[EM_TMP_TREE_ROOT_BYTES + 8];
} tree_t;

static void make_tree(tree_t *t, bool nvmap) {
  em_tmp_tree_make(t->root, "gpumem");
  snprintf(t->proc, sizeof(t->proc), "%s/proc", t->root);
  if (nvmap) {
    char buf[4096];
    fixture("jetson-agx-orin", buf, sizeof(buf));
    em_tmp_tree_put(t->root, NVMAP_REL, buf);
  }
  em_tmp_tree_put(t->root, "proc/2817/task/2817/children", "2869 ");
  em_tmp_tree_put(t->root, "proc/2817/task/2820/children", "");
  em_tmp_tree_put(t->root, "proc/2869/task/2869/children", "2900 ");
  em_tmp_tree_put(t->root, "proc/2900/task/2900/children", "");
  em_tmp_tree_put(t->root, "cg/cgroup.procs", "2869\n2817\n");
  em_tmp_tree_put(t->root, "empty-cg/cgroup.procs", "");
}

static void nvmap_reader_sums_a_process_tree_and_a_cgroup(void **state) {
  (void)state;
  tree_t t;
  make_tree(&t, true);
  em_gpumem_t *g = NULL;
  em_gpumem_opts_t o = {.sys_root = t.root, .proc_root = t.proc, .no_nvml = true};
  assert_int_equal(em_gpumem_new(&g, &o), 0);
  assert_int_equal(em_gpumem_source(g), EM_GPUMEM_NVMAP);
  assert_string_equal(em_gpumem_source_name(g), "nvmap");
  assert_null(em_gpumem_absent(g));
  pid_t pids[EM_GPUMEM_MAX_PIDS];
  size_t n = 0;
  assert_int_equal(em_gpumem_pids(g, 2817, NULL, pids, EM_GPUMEM_MAX_PIDS, &n), 0);
  assert_int_equal(n, 3);
  assert_int_equal(pids[0], 2817);
  assert_int_equal(pids[1], 2869);
  assert_int_equal(pids[2], 2900);
  uint64_t bytes = 0;
  assert_int_equal(em_gpumem_read(g, pids, n, &bytes), 0);
  assert_int_equal(bytes, (1843200 + 65536 + 4096) * KIB);
  /* A cap of one pid: the target alone. */
  assert_int_equal(em_gpumem_pids(g, 2817, NULL, pids, 1, &n), 0);
  assert_int_equal(n, 1);
  assert_int_equal(em_gpumem_read(g, pids, n, &bytes), 0);
  assert_int_equal(bytes, (1843200 + 4096) * KIB);
  /* A cgroup target: its cgroup.procs. */
  char cg[128];
  snprintf(cg, sizeof(cg), "%s/cg", t.root);
  assert_int_equal(em_gpumem_pids(g, 0, cg, pids, EM_GPUMEM_MAX_PIDS, &n), 0);
  assert_int_equal(n, 2);
  assert_int_equal(em_gpumem_read(g, pids, n, &bytes), 0);
  assert_int_equal(bytes, (1843200 + 65536 + 4096) * KIB);
  snprintf(cg, sizeof(cg), "%s/empty-cg", t.root);
  assert_int_equal(em_gpumem_pids(g, 0, cg, pids, EM_GPUMEM_MAX_PIDS, &n), -ESRCH);
  snprintf(cg, sizeof(cg), "%s/no-cg", t.root);
  assert_int_equal(em_gpumem_pids(g, 0, cg, pids, EM_GPUMEM_MAX_PIDS, &n), -ENOENT);
  assert_int_equal(em_gpumem_pids(g, 4242, NULL, pids, EM_GPUMEM_MAX_PIDS, &n), -ESRCH);
  /* The file turns to garbage, then grows past the buffer: absent, with why. */
  em_tmp_tree_put(t.root, NVMAP_REL, "garbage\n");
  assert_int_equal(em_gpumem_read(g, pids, 1, &bytes), -EINVAL);
  assert_non_null(strstr(em_gpumem_absent(g), "does not parse"));
  char *big = malloc(EM_GPUMEM_FILE_BYTES + 16);
  assert_non_null(big);
  memset(big, ' ', EM_GPUMEM_FILE_BYTES + 15);
  big[EM_GPUMEM_FILE_BYTES + 15] = '\0';
  em_tmp_tree_put(t.root, NVMAP_REL, big);
  free(big);
  assert_int_equal(em_gpumem_read(g, pids, 1, &bytes), -EFBIG);
  assert_non_null(strstr(em_gpumem_absent(g), "larger than"));
  em_gpumem_free(g);
  em_gpumem_free(NULL);
  assert_int_equal(em_tmp_tree_remove(t.root), 0);
}

/* As an unprivileged user (the test drops root in a child when it runs as root): the file
 * exists but does not open; the reason says what to grant. */
static int unreadable_child(const char *root, const char *proc) {
  em_gpumem_t *g = NULL;
  em_gpumem_opts_t o = {.sys_root = root, .proc_root = proc, .no_nvml = true};
  if (em_gpumem_new(&g, &o) != 0 || em_gpumem_source(g) != EM_GPUMEM_NONE) {
    return 10;
  }
  const char *why = em_gpumem_absent(g);
  int rc = why && strstr(why, "CAP_SYS_ADMIN") && strstr(why, "root") && strlen(why) < 128 ? 0 : 11;
  pid_t pid = 2817;
  uint64_t bytes = 1;
  if (rc == 0 && (em_gpumem_read(g, &pid, 1, &bytes) != -ENODEV || bytes != 0)) {
    rc = 12;
  }
  em_gpumem_free(g);
  return rc;
}

static void nvmap_unreadable_says_what_to_grant(void **state) {
  (void)state;
  tree_t t;
  make_tree(&t, true);
  char file[256];
  snprintf(file, sizeof(file), "%s%s", t.root, EM_GPUMEM_NVMAP_PATH);
  assert_int_equal(chmod(file, 0), 0);
  assert_int_equal(chmod(t.root, 0755), 0);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) {
      _exit(20);
    }
    _exit(unreadable_child(t.root, t.proc));
  }
  int status = 0;
  assert_int_equal(waitpid(child, &status, 0), child);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  assert_int_equal(em_tmp_tree_remove(t.root), 0);
}

static void no_source_says_both_reasons(void **state) {
  (void)state;
  tree_t t;
  make_tree(&t, false);
  em_gpumem_t *g = NULL;
  em_gpumem_opts_t o = {
      .sys_root = t.root, .proc_root = t.proc, .nvml_lib = "/nonexistent/libnvidia-ml.so.1"};
  assert_int_equal(em_gpumem_new(&g, &o), 0);
  assert_int_equal(em_gpumem_source(g), EM_GPUMEM_NONE);
  assert_string_equal(em_gpumem_source_name(g), "none");
  const char *why = em_gpumem_absent(g);
  assert_non_null(why);
  assert_non_null(strstr(why, "no source: nvmap clients: No such file or directory"));
  assert_true(strlen(why) < 128); /* Whole in the birth (EM_FIGURES_REASON_BYTES). */
  assert_non_null(strstr(why, "NVML: /nonexistent/libnvidia-ml.so.1 not loadable"));
  pid_t pid = 2817;
  uint64_t bytes = 7;
  assert_int_equal(em_gpumem_read(g, &pid, 1, &bytes), -ENODEV);
  assert_int_equal(bytes, 0);
  em_gpumem_free(g);
  assert_int_equal(em_tmp_tree_remove(t.root), 0);
}

static void new_refuses_bad_options(void **state) {
  (void)state;
  em_gpumem_t *g = NULL;
  em_gpumem_opts_t o = {.sys_root = "/", .proc_root = "/proc", .no_nvml = true};
  assert_int_equal(em_gpumem_new(NULL, &o), -EINVAL);
  assert_int_equal(em_gpumem_new(&g, NULL), -EINVAL);
  o.sys_root = NULL;
  assert_int_equal(em_gpumem_new(&g, &o), -EINVAL);
  char *root = malloc(5000);
  assert_non_null(root);
  memset(root, 'a', 4999);
  root[0] = '/';
  root[4999] = '\0';
  o.sys_root = root;
  assert_int_equal(em_gpumem_new(&g, &o), -ENAMETOOLONG);
  free(root);
  assert_null(g);
}

/* --- NVML through the stand-in --------------------------------------------------------- */

/* A reader over a root without nvmap, NVML from the stand-in at path `lib`. */
static em_gpumem_t *nvml_reader(tree_t *t, const char *lib) {
  make_tree(t, false);
  em_gpumem_t *g = NULL;
  em_gpumem_opts_t o = {.sys_root = t->root, .proc_root = t->proc, .nvml_lib = lib};
  assert_int_equal(em_gpumem_new(&g, &o), 0);
  return g;
}

/* Target pids 100 and 101 over both devices: 1 GiB + 128 MiB of 100, 256 MiB of 101 (its
 * not-available entry on device 0 left out); 200 and 300 are others. */
static const uint64_t TARGET_BYTES = 1024 * MIB + 128 * MIB + 256 * MIB;

static void nvml_sums_the_target_pids_over_devices(const char *lib, const char *call) {
  tree_t t;
  em_gpumem_t *g = nvml_reader(&t, lib);
  if (em_gpumem_source(g) != EM_GPUMEM_NVML) {
    fail_msg("no NVML from %s: %s", lib, em_gpumem_absent(g));
  }
  assert_string_equal(em_gpumem_source_name(g), call);
  const pid_t pids[] = {100, 101};
  uint64_t bytes = 0;
  assert_int_equal(em_gpumem_read(g, pids, 2, &bytes), 0);
  assert_int_equal(bytes, TARGET_BYTES);
  assert_null(em_gpumem_absent(g));
  const pid_t other = 300;
  assert_int_equal(em_gpumem_read(g, &other, 1, &bytes), 0);
  assert_int_equal(bytes, 64 * MIB);
  const pid_t none = 4242;
  assert_int_equal(em_gpumem_read(g, &none, 1, &bytes), 0);
  assert_int_equal(bytes, 0);
  em_gpumem_free(g);
  assert_int_equal(em_tmp_tree_remove(t.root), 0);
}

static void nvml_v3(void **state) {
  (void)state;
  nvml_sums_the_target_pids_over_devices(FAKE_NVML_V3_LIB,
                                         "nvmlDeviceGetComputeRunningProcesses_v3");
}

static void nvml_without_v3_falls_back_to_v2(void **state) {
  (void)state;
  nvml_sums_the_target_pids_over_devices(FAKE_NVML_V2_LIB,
                                         "nvmlDeviceGetComputeRunningProcesses_v2");
}

static void nvml_without_v2_reads_the_shorter_v1_entries(void **state) {
  (void)state;
  nvml_sums_the_target_pids_over_devices(FAKE_NVML_V1_LIB, "nvmlDeviceGetComputeRunningProcesses");
}

static void nvml_error_code_is_absent_with_the_code(void **state) {
  (void)state;
  tree_t t;
  em_gpumem_t *g = nvml_reader(&t, FAKE_NVML_V3_LIB);
  assert_int_equal(em_gpumem_source(g), EM_GPUMEM_NVML);
  const pid_t pid = 100;
  uint64_t bytes = 0;
  assert_int_equal(setenv("EM_FAKE_NVML_PROCS_ERROR", "15", 1), 0); /* GPU_IS_LOST */
  assert_int_equal(em_gpumem_read(g, &pid, 1, &bytes), -EIO);
  assert_non_null(strstr(em_gpumem_absent(g), "NVML error 15"));
  assert_non_null(strstr(em_gpumem_absent(g), "device 0"));
  assert_int_equal(unsetenv("EM_FAKE_NVML_PROCS_ERROR"), 0);
  assert_int_equal(setenv("EM_FAKE_NVML_PROCS_MANY", "1", 1), 0);
  assert_int_equal(em_gpumem_read(g, &pid, 1, &bytes), -ENOSPC);
  assert_non_null(strstr(em_gpumem_absent(g), "more than 256 compute processes"));
  assert_int_equal(unsetenv("EM_FAKE_NVML_PROCS_MANY"), 0);
  assert_int_equal(em_gpumem_read(g, &pid, 1, &bytes), 0); /* Back. */
  assert_int_equal(bytes, 1024 * MIB + 128 * MIB);
  assert_null(em_gpumem_absent(g));
  em_gpumem_free(g);
  assert_int_equal(em_tmp_tree_remove(t.root), 0);
  /* nvmlInit_v2 failing: no source, the code in the reason. */
  assert_int_equal(setenv("EM_FAKE_NVML_INIT_ERROR", "9", 1), 0); /* DRIVER_NOT_LOADED */
  g = nvml_reader(&t, FAKE_NVML_V3_LIB);
  assert_int_equal(unsetenv("EM_FAKE_NVML_INIT_ERROR"), 0);
  assert_int_equal(em_gpumem_source(g), EM_GPUMEM_NONE);
  assert_non_null(strstr(em_gpumem_absent(g), "nvmlInit_v2 failed (NVML error 9)"));
  em_gpumem_free(g);
  assert_int_equal(em_tmp_tree_remove(t.root), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(nvmap_orin_sums_the_three_clients_of_the_process_tree),
      cmocka_unit_test(nvmap_xavier_with_its_left_aligned_total_line),
      cmocka_unit_test(nvmap_a_pid_without_clients_holds_zero),
      cmocka_unit_test(nvmap_suffixes_blanks_and_names_with_spaces),
      cmocka_unit_test(nvmap_hostile_text_is_refused_with_a_zero_record),
      cmocka_unit_test(nvmap_reader_sums_a_process_tree_and_a_cgroup),
      cmocka_unit_test(nvmap_unreadable_says_what_to_grant),
      cmocka_unit_test(no_source_says_both_reasons),
      cmocka_unit_test(new_refuses_bad_options),
      cmocka_unit_test(nvml_v3),
      cmocka_unit_test(nvml_without_v3_falls_back_to_v2),
      cmocka_unit_test(nvml_without_v2_reads_the_shorter_v1_entries),
      cmocka_unit_test(nvml_error_code_is_absent_with_the_code),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
