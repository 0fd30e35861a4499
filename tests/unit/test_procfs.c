/*
 * test_procfs.c - unit tests of firmware/agent/collect/procfs.c: the statm, smaps_rollup, meminfo
 * and PSI parsers, and the reader (em_procfs_t) over recorded procfs trees and the real /proc.
 *
 * Covered: the figures of every recorded file in tests/fixtures/procfs (x86 VM, Jetson AGX Orin
 * on L4T 5.10, Jetson Nano on 4.9), converted to bytes; absent figures (no MemAvailable, no
 * "full" cpu line, no smaps_rollup, no PSI) reported as absent rather than 0; every garbage and
 * truncated fixture refused with -EINVAL; every prefix of every recorded file either refused or
 * parsed to exactly the fields whose lines are complete, with each prefix in a buffer of its
 * exact size so that a read past `len` trips AddressSanitizer; the reader opening its files once,
 * close-on-exec, re-reading them in place, switching targets, refusing a file that fills its
 * buffer, failing (without leaking fds) on open errors other than ENOENT (injected with a
 * symlink loop), and reporting a target that is gone (empty file, missing pid dir, a real child
 * that died: zombie, then reaped) as -ESRCH.
 *
 * Also collect/schedinfo.c and collect/others.c, which read the same procfs: the stat, schedstat,
 * status, cgroup, cpu.stat and PSI-total parsers (a comm with spaces and parentheses, garbage
 * refused and leaving nothing); the reader over fixture trees of both cgroup layouts
 * (tests/fixtures/sched: JetPack 5's v1 cpu,cpuacct beside a hybrid v2, JetPack 6's v2 with a
 * cgroup target's cpu.pressure) and a kernel without schedstat (absent, with its reason, not
 * 0); exited threads' counts carried; status read only for threads that ran; files kept open
 * and all closed; who else ran between two scans of a fixture /proc (shares, order, the
 * target, the agent and a reused pid left out, at most EM_OTHERS_MAX, only processes last
 * seen on the target's CPUs); and, live, two
 * spinners on one CPU: the target's CPU time, involuntary switches and runq delay grow and
 * its rival is who else ran.
 */
#define _GNU_SOURCE /* mkdtemp, nftw, symlink, fork, kill, waitid, prctl under -std=c11. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "others.h"
#include "procfs.h"
#include "schedinfo.h"

#ifndef EM_FIXTURES_DIR
#error "EM_FIXTURES_DIR (absolute path of tests/fixtures) must be defined"
#endif

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define PROCFS_DIR   EM_FIXTURES_DIR "/procfs"
#define KB           UINT64_C(1024)

/* ---- Helpers ---- */

/* Reads a whole file into a buffer of exactly its size (at least 1 byte allocated). */
static char *read_path(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    print_error("cannot open %s\n", path);
    fail();
  }
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long size = ftell(f);
  assert_true(size >= 0);
  assert_int_equal(fseek(f, 0, SEEK_SET), 0);
  char *buf = malloc(size > 0 ? (size_t)size : 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
  fclose(f);
  *len = (size_t)size;
  return buf;
}

/* Reads tests/fixtures/procfs/<rel>. */
static char *read_fixture(const char *rel, size_t *len) {
  char path[PATH_MAX];
  int n = snprintf(path, sizeof path, "%s/%s", PROCFS_DIR, rel);
  assert_true(n > 0 && (size_t)n < sizeof path);
  return read_path(path, len);
}

/* Writes `len` bytes to path, truncating it in place (same inode, so open fds see it). */
static void write_path(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, len, f), len);
  assert_int_equal(fclose(f), 0);
}

static void join(char *out, size_t cap, const char *a, const char *b) {
  int n = snprintf(out, cap, "%s/%s", a, b);
  assert_true(n > 0 && (size_t)n < cap);
}

/* Copies directory tree src into the existing directory dst. */
static void copy_tree(const char *src, const char *dst) {
  DIR *d = opendir(src);
  assert_non_null(d);
  for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
      continue;
    }
    char from[PATH_MAX];
    char to[PATH_MAX];
    join(from, sizeof from, src, e->d_name);
    join(to, sizeof to, dst, e->d_name);
    struct stat st;
    assert_int_equal(stat(from, &st), 0);
    if (S_ISDIR(st.st_mode)) {
      assert_int_equal(mkdir(to, 0700), 0);
      copy_tree(from, to);
    } else {
      size_t len = 0;
      char *data = read_path(from, &len);
      write_path(to, data, len);
      free(data);
    }
  }
  closedir(d);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static void remove_tree(const char *dir) {
  assert_int_equal(nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
}

/* The temporary tree of the running test; its teardown removes it, whether the test passed. */
static char temp_dir[PATH_MAX];

/* A fresh directory under /tmp holding a copy of fixture tree `tree` ("" for an empty one). */
static const char *temp_copy(const char *tree) {
  assert_true(temp_dir[0] == '\0'); /* One per test. */
  strcpy(temp_dir, "/tmp/em-procfs-XXXXXX");
  assert_non_null(mkdtemp(temp_dir));
  if (tree[0] != '\0') {
    char src[PATH_MAX];
    join(src, sizeof src, PROCFS_DIR, tree);
    copy_tree(src, temp_dir);
  }
  return temp_dir;
}

static int remove_temp_dir(void **state) {
  (void)state;
  int rc = 0;
  if (temp_dir[0] != '\0') {
    rc = nftw(temp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  }
  temp_dir[0] = '\0';
  return rc;
}

/* Open fds of this process (the count includes the one opendir holds, always the same). */
static int count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  assert_non_null(d);
  int n = 0;
  for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
    if (e->d_name[0] != '.') {
      n++;
    }
  }
  closedir(d);
  return n;
}

static bool near(double a, double b) {
  return fabs(a - b) < 1e-9;
}

static uint64_t page_size(void) {
  long ps = sysconf(_SC_PAGESIZE);
  assert_true(ps > 0);
  return (uint64_t)ps;
}

/* ---- One view over the four parsers, for the table-driven tests ---- */

typedef enum { K_STATM, K_SMAPS, K_MEMINFO, K_PSI, K_COUNT } kind_t;

static const char *const kind_names[K_COUNT] = {"statm", "smaps_rollup", "meminfo", "psi"};

/* A parse result: bit i of `have` covers u[i] and d[i]. statm sets all three bits. */
typedef struct {
  unsigned have;
  uint64_t u[3];
  double d[3];
} parsed_t;

/* The line (by its start) that holds each `have` bit of a kind; "" is the first line. */
typedef struct {
  const char *line_start;
  unsigned bit;
} field_line_t;

static const field_line_t field_lines[K_COUNT][3] = {
    [K_STATM] = {{"", 7}},
    [K_SMAPS] = {{"Pss:", EM_SMAPS_PSS}, {"Anonymous:", EM_SMAPS_ANON}, {"Swap:", EM_SMAPS_SWAP}},
    [K_MEMINFO] = {{"MemAvailable:", EM_MEMINFO_AVAILABLE}, {"MemTotal:", EM_MEMINFO_TOTAL}},
    [K_PSI] = {{"some ", EM_PSI_SOME}, {"full ", EM_PSI_FULL}},
};

/* What any of the four parsers fills. */
typedef union {
  em_statm_t statm;
  em_smaps_t smaps;
  em_meminfo_t meminfo;
  em_psi_t psi;
} any_parse_t;

static int parse_kind(kind_t kind, const char *text, size_t len, parsed_t *r) {
  any_parse_t o;
  memset(r, 0, sizeof *r);
  memset(&o, 0, sizeof o);
  assert_true(kind < K_COUNT);
  int rc = kind == K_STATM     ? em_procfs_parse_statm(text, len, 4096, &o.statm)
           : kind == K_SMAPS   ? em_procfs_parse_smaps_rollup(text, len, &o.smaps)
           : kind == K_MEMINFO ? em_procfs_parse_meminfo(text, len, &o.meminfo)
                               : em_procfs_parse_psi(text, len, &o.psi);
  const parsed_t as[K_COUNT] = {
      [K_STATM] = {rc == 0 ? 7u : 0u,
                   {o.statm.size_bytes, o.statm.rss_bytes, o.statm.shared_bytes},
                   {0}},
      [K_SMAPS] = {o.smaps.have, {o.smaps.pss_bytes, o.smaps.anon_bytes, o.smaps.swap_bytes}, {0}},
      [K_MEMINFO] = {o.meminfo.have, {o.meminfo.available_bytes, o.meminfo.total_bytes, 0}, {0}},
      [K_PSI] = {o.psi.have, {0}, {o.psi.some_avg10, o.psi.full_avg10, 0}},
  };
  *r = as[kind];
  return rc;
}

/* Index of the newline ending the line of text that starts with `start`, or SIZE_MAX. */
static size_t line_end(const char *text, size_t len, const char *start) {
  size_t n = strlen(start);
  for (size_t i = 0; i < len; i++) {
    if (i > 0 && text[i - 1] != '\n') {
      continue;
    }
    if (len - i >= n && memcmp(text + i, start, n) == 0) {
      const char *nl = memchr(text + i, '\n', len - i);
      return nl != NULL ? (size_t)(nl - text) : SIZE_MAX;
    }
  }
  return SIZE_MAX;
}

/* The recorded, well-formed files of each kind. */
typedef struct {
  const char *file;
  kind_t kind;
} fixture_t;

static const fixture_t recorded[] = {
    {"x86-vm/4242/statm", K_STATM},
    {"jetson-orin/1873/statm", K_STATM},
    {"jetson-nano-4.9/2211/statm", K_STATM},
    {"x86-vm/4242/smaps_rollup", K_SMAPS},
    {"jetson-orin/1873/smaps_rollup", K_SMAPS},
    {"x86-vm/meminfo", K_MEMINFO},
    {"jetson-orin/meminfo", K_MEMINFO},
    {"jetson-nano-4.9/meminfo", K_MEMINFO},
    {"x86-vm/pressure/cpu", K_PSI},
    {"x86-vm/pressure/memory", K_PSI},
    {"x86-vm/pressure/io", K_PSI},
    {"jetson-orin/pressure/cpu", K_PSI},
    {"jetson-orin/pressure/memory", K_PSI},
    {"jetson-orin/pressure/io", K_PSI},
};

/* ---- <pid>/io ---- */

/* /proc/<pid>/io as the kernel prints it (fs/proc/base.c, do_io_accounting). */
static const char pidio_text[] = "rchar: 323934931\n"
                                 "wchar: 323929600\n"
                                 "syscr: 632687\n"
                                 "syscw: 632675\n"
                                 "read_bytes: 8192\n"
                                 "write_bytes: 323932160\n"
                                 "cancelled_write_bytes: 4096\n";

static void pidio_reports_storage_bytes_and_calls(void **state) {
  (void)state;
  em_pidio_t io;
  assert_int_equal(em_procfs_parse_pidio(pidio_text, sizeof pidio_text - 1, &io), 0);
  assert_int_equal(io.have,
                   EM_PIDIO_READ_BYTES | EM_PIDIO_WRITE_BYTES | EM_PIDIO_SYSCR | EM_PIDIO_SYSCW);
  assert_true(io.read_bytes == 8192 && io.write_bytes == UINT64_C(323932160));
  assert_true(io.syscr == 632687 && io.syscw == 632675);
  /* Whole keys only: cancelled_write_bytes is not write_bytes. */
  static const char only_cancelled[] = "cancelled_write_bytes: 7\nsyscw: 1\n";
  assert_int_equal(em_procfs_parse_pidio(only_cancelled, sizeof only_cancelled - 1, &io), 0);
  assert_int_equal(io.have, EM_PIDIO_SYSCW);
  assert_true(io.write_bytes == 0 && io.syscw == 1);
  assert_int_equal(em_procfs_parse_pidio(pidio_text, sizeof pidio_text - 1, NULL), -EINVAL);
}

/* Hostile texts are refused whole; every prefix of a good one is refused or parsed to exactly
 * its complete lines; no other procfs file passes for it, nor it for them. */
static void pidio_rejects_hostile_text(void **state) {
  (void)state;
  static const char *const hostile[] = {
      "",
      "read_bytes: 1",
      "read_bytes: 1\nread_bytes: 2\n",
      "read_bytes: -1\n",
      "read_bytes: 1 kB\n",
      "read_bytes: 123456789012345678901234567890\n",
      "read_bytes: 18446744073709551616\n",
      "read_bytes:\n",
      "read_bytes: 12x\n",
      "read_bytes 12\n",
      "rchar: 1\nwchar: 2\n",
      "\n\n\n",
      "write_bytes: 0x10\n",
      "\x01\x02\xff:\x80\n",
  };
  for (size_t i = 0; i < ARRAY_LEN(hostile); i++) {
    em_pidio_t io;
    memset(&io, 0xa5, sizeof io);
    if (em_procfs_parse_pidio(hostile[i], strlen(hostile[i]), &io) != -EINVAL) {
      print_error("hostile text %zu accepted\n", i);
      fail();
    }
    assert_true(io.have == 0 && io.read_bytes == 0 && io.write_bytes == 0 && io.syscr == 0 &&
                io.syscw == 0);
  }
  em_pidio_t whole;
  size_t len = sizeof pidio_text - 1;
  assert_int_equal(em_procfs_parse_pidio(pidio_text, len, &whole), 0);
  static const struct {
    const char *line_start;
    unsigned bit;
  } lines[] = {{"syscr:", EM_PIDIO_SYSCR},
               {"syscw:", EM_PIDIO_SYSCW},
               {"read_bytes:", EM_PIDIO_READ_BYTES},
               {"write_bytes:", EM_PIDIO_WRITE_BYTES}};
  for (size_t cut = 0; cut <= len; cut++) {
    char *prefix = malloc(cut > 0 ? cut : 1);
    assert_non_null(prefix);
    memcpy(prefix, pidio_text, cut);
    em_pidio_t io;
    int rc = em_procfs_parse_pidio(prefix, cut, &io);
    free(prefix);
    unsigned complete = 0;
    for (size_t f = 0; f < ARRAY_LEN(lines); f++) {
      if (line_end(pidio_text, len, lines[f].line_start) < cut) {
        complete |= lines[f].bit;
      }
    }
    assert_true(rc == 0 || rc == -EINVAL);
    if (cut > 0 && pidio_text[cut - 1] == '\n' && complete != 0) {
      assert_int_equal(rc, 0);
    }
    if (rc != 0) {
      assert_int_equal(io.have, 0);
      continue;
    }
    assert_int_equal(io.have, complete);
    assert_true(io.read_bytes == (complete & EM_PIDIO_READ_BYTES ? whole.read_bytes : 0));
    assert_true(io.write_bytes == (complete & EM_PIDIO_WRITE_BYTES ? whole.write_bytes : 0));
    assert_true(io.syscr == (complete & EM_PIDIO_SYSCR ? whole.syscr : 0));
    assert_true(io.syscw == (complete & EM_PIDIO_SYSCW ? whole.syscw : 0));
  }
  for (size_t i = 0; i < ARRAY_LEN(recorded); i++) {
    size_t n = 0;
    char *text = read_fixture(recorded[i].file, &n);
    em_pidio_t io;
    assert_int_equal(em_procfs_parse_pidio(text, n, &io), -EINVAL);
    free(text);
  }
  for (int k = 0; k < K_COUNT; k++) {
    parsed_t r;
    assert_int_equal(parse_kind((kind_t)k, pidio_text, len, &r), -EINVAL);
  }
}

/* ---- Parsers: recorded files ---- */

typedef struct {
  const char *file;
  uint64_t page_size;
  uint64_t size_pages, rss_pages, shared_pages;
} statm_row_t;

static void statm_counts_pages_in_bytes(void **state) {
  (void)state;
  static const statm_row_t rows[] = {
      {"x86-vm/4242/statm", 4096, 20527, 19767, 1664},
      {"jetson-orin/1873/statm", 4096, 5268436, 602931, 98112},
      {"jetson-orin/1873/statm", 65536, 5268436, 602931, 98112}, /* arm64 64K-page kernel */
      {"jetson-nano-4.9/2211/statm", 4096, 2748307, 309184, 41236},
  };
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    size_t len = 0;
    char *text = read_fixture(rows[i].file, &len);
    em_statm_t s;
    assert_int_equal(em_procfs_parse_statm(text, len, rows[i].page_size, &s), 0);
    assert_true(s.size_bytes == rows[i].size_pages * rows[i].page_size);
    assert_true(s.rss_bytes == rows[i].rss_pages * rows[i].page_size);
    assert_true(s.shared_bytes == rows[i].shared_pages * rows[i].page_size);
    free(text);
  }
}

static void statm_of_orin_python_is_about_2_3_gb_resident(void **state) {
  (void)state;
  size_t len = 0;
  char *text = read_fixture("jetson-orin/1873/statm", &len);
  em_statm_t s;
  assert_int_equal(em_procfs_parse_statm(text, len, 4096, &s), 0);
  assert_true(s.rss_bytes == UINT64_C(2411724) * KB); /* The smaps_rollup Rss of the same pid. */
  assert_true(s.rss_bytes <= s.size_bytes);
  free(text);
}

static void statm_rejects_page_count_that_overflows_bytes(void **state) {
  (void)state;
  static const char fits[] = "4503599627370495 1 1 1 0 1 0\n"; /* (2^52 - 1) pages */
  static const char over[] = "4503599627370496 1 1 1 0 1 0\n"; /* 2^52 pages * 4096 = 2^64 */
  em_statm_t s;
  assert_int_equal(em_procfs_parse_statm(fits, sizeof fits - 1, 4096, &s), 0);
  assert_true(s.size_bytes == UINT64_MAX - 4095);
  assert_int_equal(em_procfs_parse_statm(over, sizeof over - 1, 4096, &s), -EINVAL);
  assert_true(s.size_bytes == 0 && s.rss_bytes == 0);
  assert_int_equal(em_procfs_parse_statm(over, sizeof over - 1, 1, &s), 0);
}

static void statm_rejects_zero_page_size_and_null_arguments(void **state) {
  (void)state;
  static const char ok[] = "1 1 1 1 0 1 0\n";
  em_statm_t s;
  assert_int_equal(em_procfs_parse_statm(ok, sizeof ok - 1, 0, &s), -EINVAL);
  assert_int_equal(em_procfs_parse_statm(NULL, 0, 4096, &s), -EINVAL);
  assert_int_equal(em_procfs_parse_statm(NULL, 14, 4096, &s), -EINVAL);
  assert_int_equal(em_procfs_parse_statm(ok, sizeof ok - 1, 4096, NULL), -EINVAL);
  assert_int_equal(em_procfs_parse_statm(ok, sizeof ok - 1, 4096, &s), 0);
}

typedef struct {
  const char *file;
  unsigned have;
  uint64_t pss_kb, anon_kb, swap_kb;
} smaps_row_t;

static void smaps_rollup_reports_pss_anon_and_swap_in_bytes(void **state) {
  (void)state;
  static const smaps_row_t rows[] = {
      /* Swap 0 kB is present, so its bit is set: present-and-zero is not absent. */
      {"x86-vm/4242/smaps_rollup", EM_SMAPS_PSS | EM_SMAPS_ANON | EM_SMAPS_SWAP, 77737, 72412, 0},
      {"jetson-orin/1873/smaps_rollup", EM_SMAPS_PSS | EM_SMAPS_ANON | EM_SMAPS_SWAP, 2382261,
       1987304, 12288},
  };
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    size_t len = 0;
    char *text = read_fixture(rows[i].file, &len);
    em_smaps_t s;
    assert_int_equal(em_procfs_parse_smaps_rollup(text, len, &s), 0);
    assert_int_equal(s.have, rows[i].have);
    assert_true(s.pss_bytes == rows[i].pss_kb * KB);
    assert_true(s.anon_bytes == rows[i].anon_kb * KB);
    assert_true(s.swap_bytes == rows[i].swap_kb * KB);
    free(text);
  }
}

typedef struct {
  const char *text;
  int rc;
  unsigned have;
  uint64_t pss_kb, anon_kb, swap_kb;
} smaps_text_row_t;

static void smaps_rollup_matches_whole_keys_only(void **state) {
  (void)state;
  static const smaps_text_row_t rows[] = {
      /* Pss_Anon, SwapPss and Pss_File are not Pss or Swap. */
      {"Pss_Anon:  5 kB\nSwapPss:  7 kB\nPss:  3 kB\nPss_File: 9 kB\n", 0, EM_SMAPS_PSS, 3, 0, 0},
      {"Rss:  1 kB\nAnonymous:  2 kB\n", 0, EM_SMAPS_ANON, 0, 2, 0},
      {"0-1 ---p 00000000 00:00 0   [rollup]\nSwap:  4 kB\n", 0, EM_SMAPS_SWAP, 0, 0, 4},
      /* A header line with "00:00" is not a key. */
      {"0-1 ---p 00000000 00:00 0   [rollup]\n", -EINVAL, 0, 0, 0, 0},
      {"Pss_Anon:  5 kB\nSwapPss:  7 kB\n", -EINVAL, 0, 0, 0, 0},
      {"pss:  5 kB\n", -EINVAL, 0, 0, 0, 0},
      {" Pss:  5 kB\n", -EINVAL, 0, 0, 0, 0},
  };
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    em_smaps_t s;
    int rc = em_procfs_parse_smaps_rollup(rows[i].text, strlen(rows[i].text), &s);
    if (rc != rows[i].rc || s.have != rows[i].have) {
      print_error("row %zu: rc %d have %u\n", i, rc, s.have);
      fail();
    }
    assert_true(s.pss_bytes == rows[i].pss_kb * KB);
    assert_true(s.anon_bytes == rows[i].anon_kb * KB);
    assert_true(s.swap_bytes == rows[i].swap_kb * KB);
  }
}

static void kb_fields_reject_malformed_values(void **state) {
  (void)state;
  static const char *const bad[] = {
      "Pss:  12 kb\n",
      "Pss:  12 KB\n",
      "Pss:  12kB\n",
      "Pss:  12 kB \n",
      "Pss:  12 kB x\n",
      "Pss:  -12 kB\n",
      "Pss:  +12 kB\n",
      "Pss:  1.5 kB\n",
      "Pss:  kB\n",
      "Pss:\n",
      "Pss:  12 kB\r\n",
      "Pss:  0x12 kB\n",
      "Pss:  18446744073709551616 kB\n", /* 2^64 */
      "Pss:  18014398509481984 kB\n",    /* 2^54 kB = 2^64 bytes */
      "Pss:  1 kB\nPss:  1 kB\n",        /* a field twice */
  };
  for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
    em_smaps_t s;
    if (em_procfs_parse_smaps_rollup(bad[i], strlen(bad[i]), &s) != -EINVAL) {
      print_error("accepted: %s", bad[i]);
      fail();
    }
    assert_int_equal(s.have, 0);
  }
  static const char largest[] = "Pss:  18014398509481983 kB\n"; /* 2^54 - 1 kB */
  em_smaps_t s;
  assert_int_equal(em_procfs_parse_smaps_rollup(largest, sizeof largest - 1, &s), 0);
  assert_true(s.pss_bytes == UINT64_MAX - 1023);
}

typedef struct {
  const char *file;
  uint64_t available_kb, total_kb;
} meminfo_row_t;

static void meminfo_reports_available_and_total_in_bytes(void **state) {
  (void)state;
  static const meminfo_row_t rows[] = {
      {"x86-vm/meminfo", 24347500, 24684084},
      {"jetson-orin/meminfo", 24713232, 30588908},
      {"jetson-nano-4.9/meminfo", 1623968, 4051048},
  };
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    size_t len = 0;
    char *text = read_fixture(rows[i].file, &len);
    em_meminfo_t m;
    assert_int_equal(em_procfs_parse_meminfo(text, len, &m), 0);
    assert_int_equal(m.have, EM_MEMINFO_AVAILABLE | EM_MEMINFO_TOTAL);
    assert_true(m.available_bytes == rows[i].available_kb * KB);
    assert_true(m.total_bytes == rows[i].total_kb * KB);
    free(text);
  }
}

static void meminfo_before_3_14_has_total_but_no_available(void **state) {
  (void)state;
  static const char old[] = "MemTotal:        1020140 kB\nMemFree:          700312 kB\n"
                            "HugePages_Total:       0\nHugepagesize:       2048 kB\n";
  em_meminfo_t m;
  assert_int_equal(em_procfs_parse_meminfo(old, sizeof old - 1, &m), 0);
  assert_int_equal(m.have, EM_MEMINFO_TOTAL);
  assert_true(m.total_bytes == UINT64_C(1020140) * KB);
  assert_true(m.available_bytes == 0);
}

typedef struct {
  const char *file;
  unsigned have;
  double some_avg10, full_avg10;
} psi_row_t;

static void psi_reports_some_and_full_avg10_in_percent(void **state) {
  (void)state;
  static const psi_row_t rows[] = {
      {"x86-vm/pressure/cpu", EM_PSI_SOME | EM_PSI_FULL, 0.07, 0.0},
      {"x86-vm/pressure/memory", EM_PSI_SOME | EM_PSI_FULL, 0.0, 0.0},
      {"x86-vm/pressure/io", EM_PSI_SOME | EM_PSI_FULL, 0.0, 0.0},
      {"jetson-orin/pressure/cpu", EM_PSI_SOME, 3.41, 0.0},
      {"jetson-orin/pressure/memory", EM_PSI_SOME | EM_PSI_FULL, 0.52, 0.21},
      {"jetson-orin/pressure/io", EM_PSI_SOME | EM_PSI_FULL, 1.86, 1.02},
  };
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    size_t len = 0;
    char *text = read_fixture(rows[i].file, &len);
    em_psi_t p;
    assert_int_equal(em_procfs_parse_psi(text, len, &p), 0);
    assert_int_equal(p.have, rows[i].have);
    assert_true(near(p.some_avg10, rows[i].some_avg10));
    assert_true(near(p.full_avg10, rows[i].full_avg10));
    free(text);
  }
}

static void psi_cpu_without_full_line_has_only_some(void **state) {
  (void)state;
  static const char cpu[] = "some avg10=12.50 avg60=3.00 avg300=0.99 total=123\n";
  em_psi_t p;
  assert_int_equal(em_procfs_parse_psi(cpu, sizeof cpu - 1, &p), 0);
  assert_int_equal(p.have, EM_PSI_SOME);
  assert_true(near(p.some_avg10, 12.5));
  assert_true(p.full_avg10 == 0.0);
}

static void psi_cpu_with_zero_full_line_has_both(void **state) {
  (void)state;
  static const char cpu[] = "some avg10=100.00 avg60=0.00 avg300=0.00 total=1\n"
                            "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
  em_psi_t p;
  assert_int_equal(em_procfs_parse_psi(cpu, sizeof cpu - 1, &p), 0);
  assert_int_equal(p.have, EM_PSI_SOME | EM_PSI_FULL);
  assert_true(near(p.some_avg10, 100.0));
  assert_true(p.full_avg10 == 0.0);
}

static void psi_rejects_lines_not_in_the_kernel_format(void **state) {
  (void)state;
  static const char *const bad[] = {
      "some avg10=1.00 avg60=1.00 avg300=1.00 total=1 extra=2\n",
      "some avg10=1.00 avg60=1.00 avg300=1.00 total=\n",
      "some avg10=1. avg60=1.00 avg300=1.00 total=1\n",
      "some avg10=.5 avg60=1.00 avg300=1.00 total=1\n",
      "some avg10=1.0000000001 avg60=1.00 avg300=1.00 total=1\n",
      "some  avg10=1.00 avg60=1.00 avg300=1.00 total=1\n",
      "some avg60=1.00 avg10=1.00 avg300=1.00 total=1\n",
      "some avg10=1.00 avg60=1.00 avg300=1.00 total=18446744073709551616\n",
      "some avg10=1.00 avg60=1.00 avg300=1.00 total=1\n\n",
      ("full avg10=1.00 avg60=1.00 avg300=1.00 total=1\n"
       "full avg10=1.00 avg60=1.00 avg300=1.00 total=1\n"),
      "\n",
  };
  for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
    em_psi_t p;
    if (em_procfs_parse_psi(bad[i], strlen(bad[i]), &p) != -EINVAL) {
      print_error("accepted: %s", bad[i]);
      fail();
    }
    assert_int_equal(p.have, 0);
  }
}

/* ---- Parsers: garbage, truncation, cross-feeding ---- */

typedef struct {
  const char *file;
  kind_t kind;
} reject_row_t;

static const reject_row_t rejected[] = {
    {"truncated/empty", K_STATM},
    {"truncated/empty", K_SMAPS},
    {"truncated/empty", K_MEMINFO},
    {"truncated/empty", K_PSI},
    {"truncated/meminfo-mid-key", K_MEMINFO},
    {"truncated/meminfo-mid-number", K_MEMINFO},
    {"truncated/meminfo-mid-unit", K_MEMINFO},
    {"truncated/statm-mid-number", K_STATM},
    {"truncated/statm-without-newline", K_STATM},
    {"truncated/smaps_rollup-mid-number", K_SMAPS},
    {"truncated/smaps_rollup-header-only", K_SMAPS},
    {"truncated/psi-mid-number", K_PSI},
    {"truncated/psi-mid-second-line", K_PSI},
    {"garbage/binary-junk", K_STATM},
    {"garbage/binary-junk", K_SMAPS},
    {"garbage/binary-junk", K_MEMINFO},
    {"garbage/binary-junk", K_PSI},
    {"garbage/binary-junk-ending-in-newline", K_STATM},
    {"garbage/binary-junk-ending-in-newline", K_SMAPS},
    {"garbage/binary-junk-ending-in-newline", K_MEMINFO},
    {"garbage/binary-junk-ending-in-newline", K_PSI},
    {"garbage/statm-30-digit-number", K_STATM},
    {"garbage/statm-pages-overflow-bytes", K_STATM},
    {"garbage/statm-two-fields", K_STATM},
    {"garbage/statm-negative", K_STATM},
    {"garbage/statm-letters", K_STATM},
    {"garbage/statm-two-lines", K_STATM},
    {"garbage/meminfo-30-digit-number", K_MEMINFO},
    {"garbage/meminfo-missing-kb-unit", K_MEMINFO},
    {"garbage/meminfo-kb-overflow-bytes", K_MEMINFO},
    {"garbage/meminfo-is-vmstat", K_MEMINFO},
    {"garbage/meminfo-duplicate-field", K_MEMINFO},
    {"garbage/smaps_rollup-missing-kb-unit", K_SMAPS},
    {"garbage/smaps_rollup-30-digit-number", K_SMAPS},
    {"garbage/smaps_rollup-mb-unit", K_SMAPS},
    {"garbage/smaps_rollup-without-fields", K_SMAPS},
    {"garbage/psi-30-digit-number", K_PSI},
    {"garbage/psi-unknown-line", K_PSI},
    {"garbage/psi-without-decimals", K_PSI},
    {"garbage/psi-comma-decimal", K_PSI},
    {"garbage/psi-missing-total", K_PSI},
    {"garbage/psi-duplicate-some", K_PSI},
};

static void garbage_and_truncated_fixtures_are_rejected(void **state) {
  (void)state;
  for (size_t i = 0; i < ARRAY_LEN(rejected); i++) {
    size_t len = 0;
    char *text = read_fixture(rejected[i].file, &len);
    parsed_t r;
    int rc = parse_kind(rejected[i].kind, text, len, &r);
    if (rc != -EINVAL) {
      print_error("%s as %s: rc %d\n", rejected[i].file, kind_names[rejected[i].kind], rc);
      fail();
    }
    /* Nothing half-parsed leaks out. */
    assert_int_equal(r.have, 0);
    assert_true(r.u[0] == 0 && r.u[1] == 0 && r.u[2] == 0 && r.d[0] == 0.0 && r.d[1] == 0.0);
    free(text);
  }
}

/* So that a fixture added to garbage/ or truncated/ cannot be forgotten by the table. */
static void every_garbage_and_truncated_fixture_is_in_the_table(void **state) {
  (void)state;
  static const char *const dirs[] = {"garbage", "truncated"};
  size_t seen = 0;
  for (size_t i = 0; i < ARRAY_LEN(dirs); i++) {
    char path[PATH_MAX];
    join(path, sizeof path, PROCFS_DIR, dirs[i]);
    DIR *d = opendir(path);
    assert_non_null(d);
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
      if (e->d_name[0] == '.') {
        continue;
      }
      char rel[PATH_MAX];
      join(rel, sizeof rel, dirs[i], e->d_name);
      bool found = false;
      for (size_t j = 0; j < ARRAY_LEN(rejected) && !found; j++) {
        found = strcmp(rejected[j].file, rel) == 0;
      }
      if (!found) {
        print_error("%s is not in the rejected table\n", rel);
        fail();
      }
      seen++;
    }
    closedir(d);
  }
  assert_true(seen >= 30);
}

/* Every recorded file fed to every other parser is refused. */
static void each_parser_rejects_the_other_files(void **state) {
  (void)state;
  for (size_t i = 0; i < ARRAY_LEN(recorded); i++) {
    size_t len = 0;
    char *text = read_fixture(recorded[i].file, &len);
    for (int k = 0; k < K_COUNT; k++) {
      parsed_t r;
      int rc = parse_kind((kind_t)k, text, len, &r);
      int want = (kind_t)k == recorded[i].kind ? 0 : -EINVAL;
      if (rc != want) {
        print_error("%s as %s: rc %d, want %d\n", recorded[i].file, kind_names[k], rc, want);
        fail();
      }
    }
    free(text);
  }
}

/*
 * Feeds every prefix of every recorded file of `kind`, each in a buffer of exactly its length,
 * to the parser: it returns 0 or -EINVAL; on 0 the `have` bits are exactly the fields whose
 * lines are complete in the prefix, with the whole file's values, and absent fields are 0; and a
 * prefix cut at a line end that holds some complete field is accepted.
 */
static void check_every_truncation(kind_t kind) {
  size_t files = 0;
  for (size_t i = 0; i < ARRAY_LEN(recorded); i++) {
    if (recorded[i].kind != kind) {
      continue;
    }
    files++;
    size_t len = 0;
    char *text = read_fixture(recorded[i].file, &len);
    parsed_t whole;
    assert_int_equal(parse_kind(kind, text, len, &whole), 0);
    size_t ends[3];
    for (size_t f = 0; f < 3; f++) {
      const field_line_t *fl = &field_lines[kind][f];
      ends[f] = fl->bit != 0 ? line_end(text, len, fl->line_start) : SIZE_MAX;
    }
    for (size_t cut = 0; cut <= len; cut++) {
      char *prefix = malloc(cut > 0 ? cut : 1);
      assert_non_null(prefix);
      memcpy(prefix, text, cut);
      parsed_t r;
      int rc = parse_kind(kind, prefix, cut, &r);
      free(prefix);
      unsigned complete = 0;
      for (size_t f = 0; f < 3; f++) {
        if (ends[f] != SIZE_MAX && ends[f] < cut) {
          complete |= field_lines[kind][f].bit;
        }
      }
      if (rc != 0 && rc != -EINVAL) {
        print_error("%s cut at %zu: rc %d\n", recorded[i].file, cut, rc);
        fail();
      }
      if (rc == 0 && r.have != complete) {
        print_error("%s cut at %zu: have %#x, complete %#x\n", recorded[i].file, cut, r.have,
                    complete);
        fail();
      }
      if (cut > 0 && text[cut - 1] == '\n' && complete != 0 && rc != 0) {
        print_error("%s cut after a line at %zu: rc %d\n", recorded[i].file, cut, rc);
        fail();
      }
      for (size_t b = 0; b < 3; b++) {
        bool has = (r.have & (1u << b)) != 0;
        assert_true(r.u[b] == (has ? whole.u[b] : 0));
        assert_true(r.d[b] == (has ? whole.d[b] : 0.0));
      }
    }
    free(text);
  }
  assert_true(files > 0);
}

static void every_truncation_of_each_kind_is_rejected_or_parsed_consistently(void **state) {
  (void)state;
  for (int k = 0; k < K_COUNT; k++) {
    check_every_truncation((kind_t)k);
  }
}

static void parsers_reject_null_output_and_null_text(void **state) {
  (void)state;
  static const char mi[] = "MemTotal:  1 kB\n";
  static const char psi[] = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
  em_smaps_t s;
  em_meminfo_t m;
  em_psi_t p;
  assert_int_equal(em_procfs_parse_meminfo(mi, sizeof mi - 1, NULL), -EINVAL);
  assert_int_equal(em_procfs_parse_meminfo(NULL, 5, &m), -EINVAL);
  assert_int_equal(em_procfs_parse_smaps_rollup(mi, sizeof mi - 1, NULL), -EINVAL);
  assert_int_equal(em_procfs_parse_smaps_rollup(NULL, 5, &s), -EINVAL);
  assert_int_equal(em_procfs_parse_psi(psi, sizeof psi - 1, NULL), -EINVAL);
  assert_int_equal(em_procfs_parse_psi(NULL, 5, &p), -EINVAL);
  assert_int_equal(em_procfs_parse_meminfo(mi, sizeof mi - 1, &m), 0);
  assert_int_equal(em_procfs_parse_psi(psi, sizeof psi - 1, &p), 0);
}

/* ---- Reader over fixture trees ---- */

static em_procfs_t *open_tree(const char *root, pid_t pid) {
  em_procfs_t *p = NULL;
  int rc = em_procfs_new(&p, root, pid);
  if (rc != 0) {
    print_error("em_procfs_new(%s, %d): %d\n", root, (int)pid, rc);
    fail();
  }
  assert_non_null(p);
  return p;
}

static void reader_reads_jetson_orin_tree(void **state) {
  (void)state;
  uint64_t ps = page_size();
  em_procfs_t *p = open_tree(PROCFS_DIR "/jetson-orin", 1873);

  em_statm_t st;
  assert_int_equal(em_procfs_read_statm(p, &st), 0);
  assert_true(st.size_bytes == UINT64_C(5268436) * ps);
  assert_true(st.rss_bytes == UINT64_C(602931) * ps);
  assert_true(st.shared_bytes == UINT64_C(98112) * ps);

  em_smaps_t sm;
  assert_int_equal(em_procfs_read_smaps(p, &sm), 0);
  assert_int_equal(sm.have, EM_SMAPS_PSS | EM_SMAPS_ANON | EM_SMAPS_SWAP);
  assert_true(sm.pss_bytes == UINT64_C(2382261) * KB);
  assert_true(sm.swap_bytes == UINT64_C(12288) * KB);

  em_meminfo_t mi;
  assert_int_equal(em_procfs_read_meminfo(p, &mi), 0);
  assert_true(mi.total_bytes == UINT64_C(30588908) * KB);
  assert_true(mi.available_bytes == UINT64_C(24713232) * KB);

  assert_true(em_procfs_has_psi(p));
  em_psi_t psi;
  assert_int_equal(em_procfs_read_psi(p, EM_PSI_CPU, &psi), 0);
  assert_int_equal(psi.have, EM_PSI_SOME); /* 5.10: no "full" line for cpu. */
  assert_true(near(psi.some_avg10, 3.41));
  assert_int_equal(em_procfs_read_psi(p, EM_PSI_MEMORY, &psi), 0);
  assert_int_equal(psi.have, EM_PSI_SOME | EM_PSI_FULL);
  assert_true(near(psi.some_avg10, 0.52) && near(psi.full_avg10, 0.21));
  assert_int_equal(em_procfs_read_psi(p, EM_PSI_IO, &psi), 0);
  assert_true(near(psi.some_avg10, 1.86) && near(psi.full_avg10, 1.02));

  /* A second tick reads the same files again, with the same answers. */
  em_statm_t again;
  assert_int_equal(em_procfs_read_statm(p, &again), 0);
  assert_memory_equal(&st, &again, sizeof st);
  em_procfs_free(p);
}

static void reader_reads_x86_vm_tree(void **state) {
  (void)state;
  uint64_t ps = page_size();
  em_procfs_t *p = open_tree(PROCFS_DIR "/x86-vm", 4242);
  em_statm_t st;
  assert_int_equal(em_procfs_read_statm(p, &st), 0);
  assert_true(st.rss_bytes == UINT64_C(19767) * ps);
  em_smaps_t sm;
  assert_int_equal(em_procfs_read_smaps(p, &sm), 0);
  assert_true(sm.anon_bytes == UINT64_C(72412) * KB);
  em_psi_t psi;
  assert_int_equal(em_procfs_read_psi(p, EM_PSI_CPU, &psi), 0);
  assert_int_equal(psi.have, EM_PSI_SOME | EM_PSI_FULL); /* 6.x: cpu "full" of zeros. */
  assert_true(near(psi.some_avg10, 0.07));
  em_procfs_free(p);
}

static void smaps_missing_on_old_kernel_is_absent_not_zero(void **state) {
  (void)state;
  em_procfs_t *p = open_tree(PROCFS_DIR "/jetson-nano-4.9", 2211);

  em_statm_t st;
  assert_int_equal(em_procfs_read_statm(p, &st), 0);
  assert_true(st.rss_bytes == UINT64_C(309184) * page_size());

  em_smaps_t sm;
  memset(&sm, 0xa5, sizeof sm);
  assert_int_equal(em_procfs_read_smaps(p, &sm), -ENOENT);
  assert_int_equal(sm.have, 0);

  em_meminfo_t mi;
  assert_int_equal(em_procfs_read_meminfo(p, &mi), 0);
  assert_true(mi.total_bytes == UINT64_C(4051048) * KB);
  em_procfs_free(p);
}

static void psi_missing_on_old_kernel_is_absent_not_zero(void **state) {
  (void)state;
  em_procfs_t *p = open_tree(PROCFS_DIR "/jetson-nano-4.9", 2211);
  assert_false(em_procfs_has_psi(p));
  for (int r = 0; r < EM_PSI_COUNT; r++) {
    em_psi_t psi;
    memset(&psi, 0xa5, sizeof psi);
    assert_int_equal(em_procfs_read_psi(p, (em_psi_res_t)r, &psi), -ENOENT);
    assert_int_equal(psi.have, 0);
  }
  em_procfs_free(p);
}

static void reader_without_target_reads_system_figures_only(void **state) {
  (void)state;
  em_procfs_t *p = open_tree(PROCFS_DIR "/jetson-orin", 0);
  em_statm_t st;
  em_smaps_t sm;
  em_meminfo_t mi;
  assert_int_equal(em_procfs_read_statm(p, &st), -ESRCH);
  assert_int_equal(em_procfs_read_smaps(p, &sm), -ESRCH);
  assert_int_equal(em_procfs_read_meminfo(p, &mi), 0);
  assert_true(em_procfs_has_psi(p));
  em_procfs_free(p);
}

static void reader_new_without_meminfo_is_enoent(void **state) {
  (void)state;
  const char *dir = temp_copy("");
  static char sentinel;
  em_procfs_t *p = (em_procfs_t *)(void *)&sentinel; /* Not NULL, so the test sees it reset. */
  assert_int_equal(em_procfs_new(&p, dir, 0), -ENOENT);
  assert_null(p);
}

static void reader_new_for_missing_pid_is_esrch(void **state) {
  (void)state;
  int before = count_fds();
  em_procfs_t *p = NULL;
  assert_int_equal(em_procfs_new(&p, PROCFS_DIR "/jetson-orin", 99999), -ESRCH);
  assert_null(p);
  assert_int_equal(count_fds(), before); /* What it had opened is closed again. */
}

static void reader_rejects_bad_arguments(void **state) {
  (void)state;
  em_procfs_t *p = NULL;
  assert_int_equal(em_procfs_new(NULL, PROCFS_DIR "/x86-vm", 0), -EINVAL);
  assert_int_equal(em_procfs_new(&p, NULL, 0), -EINVAL);
  assert_int_equal(em_procfs_new(&p, PROCFS_DIR "/x86-vm", -1), -EINVAL);
  assert_null(p);
  p = open_tree(PROCFS_DIR "/x86-vm", 4242);
  em_psi_t psi;
  em_statm_t st;
  assert_int_equal(em_procfs_read_psi(p, EM_PSI_COUNT, &psi), -EINVAL);
  assert_int_equal(em_procfs_read_psi(p, EM_PSI_CPU, NULL), -EINVAL);
  assert_int_equal(em_procfs_read_statm(NULL, &st), -EINVAL);
  assert_int_equal(em_procfs_read_statm(p, NULL), -EINVAL);
  assert_int_equal(em_procfs_set_pid(p, -5), -EINVAL);
  assert_int_equal(em_procfs_set_pid(NULL, 1), -EINVAL);
  assert_false(em_procfs_has_psi(NULL));
  assert_int_equal(em_procfs_read_statm(p, &st), 0); /* Still on its target. */
  em_procfs_free(p);
  em_procfs_free(NULL);
}

/* The reader holds 6 fds on the Orin tree, all close-on-exec; reads open none; free closes all. */
static void reader_opens_files_once_close_on_exec_and_closes_them(void **state) {
  (void)state;
  int before = count_fds();
  em_procfs_t *p = open_tree(PROCFS_DIR "/jetson-orin", 1873);
  assert_int_equal(count_fds(), before + 6);

  char tree[PATH_MAX];
  assert_non_null(realpath(PROCFS_DIR "/jetson-orin", tree)); /* As /proc/self/fd shows it. */
  strcat(tree, "/");
  int ours = 0;
  DIR *d = opendir("/proc/self/fd");
  assert_non_null(d);
  for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
    char link[PATH_MAX];
    char target[PATH_MAX];
    join(link, sizeof link, "/proc/self/fd", e->d_name);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (e->d_name[0] == '.' || n < 0) {
      continue;
    }
    target[n] = '\0';
    if (strncmp(target, tree, strlen(tree)) == 0) {
      int flags = fcntl(atoi(e->d_name), F_GETFD);
      assert_true(flags >= 0 && (flags & FD_CLOEXEC) != 0);
      ours++;
    }
  }
  closedir(d);
  assert_int_equal(ours, 6);

  for (int tick = 0; tick < 100; tick++) {
    em_statm_t st;
    em_meminfo_t mi;
    em_psi_t psi;
    em_smaps_t sm;
    assert_int_equal(em_procfs_read_statm(p, &st), 0);
    assert_int_equal(em_procfs_read_meminfo(p, &mi), 0);
    assert_int_equal(em_procfs_read_psi(p, (em_psi_res_t)(tick % EM_PSI_COUNT), &psi), 0);
    assert_int_equal(em_procfs_read_smaps(p, &sm), 0);
  }
  assert_int_equal(count_fds(), before + 6);
  em_procfs_free(p);
  assert_int_equal(count_fds(), before);
}

static void reader_sees_file_rewritten_in_place(void **state) {
  (void)state;
  const char *dir = temp_copy("jetson-orin");
  em_procfs_t *p = open_tree(dir, 1873);
  em_meminfo_t mi;
  assert_int_equal(em_procfs_read_meminfo(p, &mi), 0);
  assert_true(mi.available_bytes == UINT64_C(24713232) * KB);

  static const char next[] = "MemTotal:       30588908 kB\nMemAvailable:    1000000 kB\n";
  char path[PATH_MAX];
  join(path, sizeof path, dir, "meminfo");
  write_path(path, next, sizeof next - 1);
  assert_int_equal(em_procfs_read_meminfo(p, &mi), 0);
  assert_true(mi.available_bytes == UINT64_C(1000000) * KB);
  em_procfs_free(p);
}

static void reader_rejects_garbage_and_keeps_working_after(void **state) {
  (void)state;
  const char *dir = temp_copy("jetson-orin");
  em_procfs_t *p = open_tree(dir, 1873);
  size_t len = 0;
  char *junk = read_fixture("garbage/binary-junk-ending-in-newline", &len);
  char path[PATH_MAX];
  join(path, sizeof path, dir, "meminfo");
  size_t good_len = 0;
  char *good = read_path(path, &good_len);
  write_path(path, junk, len);

  em_meminfo_t mi;
  memset(&mi, 0xa5, sizeof mi);
  assert_int_equal(em_procfs_read_meminfo(p, &mi), -EINVAL);
  assert_int_equal(mi.have, 0);
  assert_true(mi.total_bytes == 0);

  write_path(path, good, good_len);
  assert_int_equal(em_procfs_read_meminfo(p, &mi), 0);
  assert_true(mi.total_bytes == UINT64_C(30588908) * KB);
  free(junk);
  free(good);
  em_procfs_free(p);
}

/* Writes a valid meminfo of exactly `size` bytes: MemTotal, then filler lines. */
static void write_meminfo_of_size(const char *path, size_t size) {
  char *text = malloc(size);
  assert_non_null(text);
  static const char head[] = "MemTotal:        1000000 kB\n";
  memcpy(text, head, sizeof head - 1);
  size_t pos = sizeof head - 1;
  while (size - pos > 40) {
    memcpy(text + pos, "Filler:                                \n", 40);
    pos += 40;
  }
  memset(text + pos, 'x', size - pos - 1);
  text[size - 1] = '\n';
  write_path(path, text, size);
  free(text);
}

static void reader_rejects_file_that_fills_the_buffer(void **state) {
  (void)state;
  const char *dir = temp_copy("jetson-orin");
  em_procfs_t *p = open_tree(dir, 0);
  char path[PATH_MAX];
  join(path, sizeof path, dir, "meminfo");
  em_meminfo_t mi;

  write_meminfo_of_size(path, EM_PROCFS_BUF_BYTES - 1);
  assert_int_equal(em_procfs_read_meminfo(p, &mi), 0);
  assert_true(mi.total_bytes == UINT64_C(1000000) * KB);

  /* It may be longer still: a cut file must not pass for a whole one. */
  write_meminfo_of_size(path, EM_PROCFS_BUF_BYTES);
  assert_int_equal(em_procfs_read_meminfo(p, &mi), -EINVAL);
  write_meminfo_of_size(path, EM_PROCFS_BUF_BYTES + 100);
  assert_int_equal(em_procfs_read_meminfo(p, &mi), -EINVAL);
  em_procfs_free(p);
}

static void reader_statm_of_target_gone_is_esrch(void **state) {
  (void)state;
  const char *dir = temp_copy("jetson-orin");
  em_procfs_t *p = open_tree(dir, 1873);
  em_statm_t st;
  em_smaps_t sm;
  assert_int_equal(em_procfs_read_statm(p, &st), 0);
  assert_int_equal(em_procfs_read_smaps(p, &sm), 0);

  /* A reaped process's files read as errors; the fixture's stand-in is an empty read. */
  char path[PATH_MAX];
  join(path, sizeof path, dir, "1873/statm");
  write_path(path, "", 0);
  join(path, sizeof path, dir, "1873/smaps_rollup");
  write_path(path, "", 0);
  assert_int_equal(em_procfs_read_statm(p, &st), -ESRCH);
  assert_true(st.rss_bytes == 0);
  assert_int_equal(em_procfs_read_smaps(p, &sm), -ESRCH);

  /* A zombie's statm is all zeros: gone too. */
  join(path, sizeof path, dir, "1873/statm");
  write_path(path, "0 0 0 0 0 0 0\n", 14);
  assert_int_equal(em_procfs_read_statm(p, &st), -ESRCH);

  /* Its pid dir removed: re-attaching to it finds nothing. */
  char pid_dir[PATH_MAX];
  join(pid_dir, sizeof pid_dir, dir, "1873");
  remove_tree(pid_dir);
  assert_int_equal(em_procfs_set_pid(p, 1873), -ESRCH);
  em_procfs_free(p);
}

/* A copy of the jetson-orin tree with one more process, `pid`, whose statm counts 100 pages,
 * 50 resident, 10 shared. */
static const char *orin_copy_with_pid(const char *pid) {
  const char *dir = temp_copy("jetson-orin");
  char path[PATH_MAX], rel[64];
  join(path, sizeof path, dir, pid);
  assert_int_equal(mkdir(path, 0700), 0);
  snprintf(rel, sizeof rel, "%s/statm", pid);
  join(path, sizeof path, dir, rel);
  write_path(path, "100 50 10 1 0 60 0\n", 19);
  return dir;
}

static void reader_set_pid_switches_files(void **state) {
  (void)state;
  uint64_t ps = page_size();
  const char *dir = orin_copy_with_pid("1874"); /* The restarted target: no smaps_rollup. */

  int before = count_fds();
  em_procfs_t *p = open_tree(dir, 1873);
  int held = count_fds();
  em_statm_t st;
  em_smaps_t sm;
  assert_int_equal(em_procfs_read_statm(p, &st), 0);
  assert_true(st.rss_bytes == UINT64_C(602931) * ps);

  assert_int_equal(em_procfs_set_pid(p, 1874), 0);
  assert_int_equal(em_procfs_read_statm(p, &st), 0);
  assert_true(st.rss_bytes == 50 * ps && st.size_bytes == 100 * ps);
  assert_int_equal(em_procfs_read_smaps(p, &sm), -ENOENT);
  assert_int_equal(count_fds(), held - 1); /* statm only. */

  /* A failed switch keeps the current target. */
  assert_int_equal(em_procfs_set_pid(p, 4243), -ESRCH);
  assert_int_equal(em_procfs_read_statm(p, &st), 0);
  assert_true(st.rss_bytes == 50 * ps);

  assert_int_equal(em_procfs_set_pid(p, 1873), 0);
  assert_int_equal(em_procfs_read_statm(p, &st), 0);
  assert_true(st.rss_bytes == UINT64_C(602931) * ps);
  assert_int_equal(em_procfs_read_smaps(p, &sm), 0);
  assert_int_equal(count_fds(), held);

  assert_int_equal(em_procfs_set_pid(p, 0), 0); /* Detach. */
  assert_int_equal(em_procfs_read_statm(p, &st), -ESRCH);
  assert_int_equal(count_fds(), held - 2);
  em_procfs_free(p);
  assert_int_equal(count_fds(), before);
}

/* Replaces <dir>/<rel> by a symlink to itself, so that opening it fails with ELOOP. */
static void make_unopenable(const char *dir, const char *rel) {
  char path[PATH_MAX];
  join(path, sizeof path, dir, rel);
  assert_int_equal(remove(path), 0);
  assert_int_equal(symlink(path, path), 0);
}

/* <pid>/io is read through the same fd every time; a target without the file or whose file
 * does not open keeps its other figures and answers that error for io alone. */
static void reader_reads_pidio_and_keeps_its_open_error(void **state) {
  (void)state;
  const char *dir = orin_copy_with_pid("1874"); /* No io file. */
  char path[PATH_MAX];
  join(path, sizeof path, dir, "1873/io");
  write_path(path, pidio_text, sizeof pidio_text - 1);
  char p5[PATH_MAX];
  join(p5, sizeof p5, dir, "1875");
  assert_int_equal(mkdir(p5, 0700), 0);
  join(p5, sizeof p5, dir, "1875/statm");
  write_path(p5, "100 50 10 1 0 60 0\n", 19);
  join(p5, sizeof p5, dir, "1875/io");
  write_path(p5, pidio_text, sizeof pidio_text - 1);
  make_unopenable(dir, "1875/io");

  int before = count_fds();
  em_procfs_t *p = open_tree(dir, 1873);
  em_pidio_t io;
  assert_int_equal(em_procfs_read_pidio(p, &io), 0);
  assert_true(io.write_bytes == UINT64_C(323932160) && io.read_bytes == 8192);
  static const char grown[] = "syscr: 1\nsyscw: 2\nread_bytes: 4096\nwrite_bytes: 999424\n";
  write_path(path, grown, sizeof grown - 1); /* Rewritten in place: the same fd sees it. */
  assert_int_equal(em_procfs_read_pidio(p, &io), 0);
  assert_true(io.write_bytes == 999424 && io.read_bytes == 4096 && io.syscw == 2);
  write_path(path, "write_bytes: 1", 14); /* Cut: refused, nothing half read. */
  assert_int_equal(em_procfs_read_pidio(p, &io), -EINVAL);
  assert_int_equal(io.have, 0);

  em_statm_t st;
  assert_int_equal(em_procfs_set_pid(p, 1874), 0);
  assert_int_equal(em_procfs_read_pidio(p, &io), -ENOENT);
  assert_int_equal(io.have, 0);
  assert_int_equal(em_procfs_read_statm(p, &st), 0);

  assert_int_equal(em_procfs_set_pid(p, 1875), 0);        /* Not an error for the target... */
  assert_int_equal(em_procfs_read_pidio(p, &io), -ELOOP); /* ...only for its io. */
  assert_int_equal(em_procfs_read_statm(p, &st), 0);

  assert_int_equal(em_procfs_set_pid(p, 0), 0);
  assert_int_equal(em_procfs_read_pidio(p, &io), -ESRCH);
  em_procfs_free(p);
  assert_int_equal(count_fds(), before);
}

static void reader_open_error_on_smaps_keeps_previous_target_and_leaks_nothing(void **state) {
  (void)state;
  uint64_t ps = page_size();
  const char *dir = orin_copy_with_pid("1875");
  char path[PATH_MAX];
  join(path, sizeof path, dir, "1875/smaps_rollup");
  write_path(path, "Pss:  1 kB\n", 11);
  make_unopenable(dir, "1875/smaps_rollup");

  int before = count_fds();
  em_procfs_t *p = open_tree(dir, 1873);
  int held = count_fds();
  /* Not absent (that is ENOENT only): an error, and the statm it had opened is closed again. */
  assert_int_equal(em_procfs_set_pid(p, 1875), -ELOOP);
  assert_int_equal(count_fds(), held);
  em_statm_t st;
  assert_int_equal(em_procfs_read_statm(p, &st), 0);
  assert_true(st.rss_bytes == UINT64_C(602931) * ps);
  em_procfs_free(p);

  p = NULL;
  assert_int_equal(em_procfs_new(&p, dir, 1875), -ELOOP);
  assert_null(p);
  assert_int_equal(count_fds(), before);
}

static void reader_open_error_on_psi_fails_new_and_leaks_nothing(void **state) {
  (void)state;
  const char *dir = temp_copy("jetson-orin");
  make_unopenable(dir, "pressure/io");
  int before = count_fds();
  em_procfs_t *p = NULL;
  assert_int_equal(em_procfs_new(&p, dir, 1873), -ELOOP);
  assert_null(p);
  assert_int_equal(count_fds(), before);

  /* A missing file, by contrast, is an absent figure. */
  char path[PATH_MAX];
  join(path, sizeof path, dir, "pressure/io");
  assert_int_equal(remove(path), 0);
  p = open_tree(dir, 1873);
  assert_true(em_procfs_has_psi(p));
  em_psi_t psi;
  assert_int_equal(em_procfs_read_psi(p, EM_PSI_IO, &psi), -ENOENT);
  assert_int_equal(em_procfs_read_psi(p, EM_PSI_MEMORY, &psi), 0);
  em_procfs_free(p);
}

static void reader_psi_that_opens_but_does_not_read_is_absent(void **state) {
  (void)state;
  /* Kernels 4.20-5.5 booted with PSI off keep /proc/pressure/<res> and refuse reads with
   * EOPNOTSUPP. A directory in cpu's place opens read-only and refuses reads too (EISDIR). */
  const char *dir = temp_copy("jetson-orin");
  char path[PATH_MAX];
  join(path, sizeof path, dir, "pressure/cpu");
  assert_int_equal(remove(path), 0);
  assert_int_equal(mkdir(path, 0700), 0);
  int before = count_fds();
  em_procfs_t *p = open_tree(dir, 1873);
  assert_int_equal(count_fds(), before + 5); /* meminfo, memory, io, statm, smaps_rollup */
  assert_false(em_procfs_has_psi(p));
  em_psi_t psi;
  assert_int_equal(em_procfs_read_psi(p, EM_PSI_CPU, &psi), -ENOENT);
  assert_int_equal(em_procfs_read_psi(p, EM_PSI_MEMORY, &psi), 0);
  em_procfs_free(p);
  assert_int_equal(count_fds(), before);
}

/* ---- Reader over the real /proc ---- */

static void reader_reads_own_pid_from_real_proc(void **state) {
  (void)state;
  em_procfs_t *p = open_tree("/proc", getpid());
  em_statm_t st;
  assert_int_equal(em_procfs_read_statm(p, &st), 0);
  assert_true(st.size_bytes > 0 && st.rss_bytes > 0);
  assert_true(st.rss_bytes <= st.size_bytes);
  assert_true(st.shared_bytes <= st.rss_bytes);

  /* Touch 64 MiB: the next read of the same fd sees it resident, so reads are not cached. */
  size_t big = (size_t)64 << 20;
  volatile char *mem = malloc(big);
  assert_non_null((void *)mem);
  for (size_t i = 0; i < big; i += 4096) {
    mem[i] = 1;
  }
  em_statm_t after;
  assert_int_equal(em_procfs_read_statm(p, &after), 0);
  assert_true(after.rss_bytes >= st.rss_bytes + ((uint64_t)48 << 20));

  em_smaps_t sm;
  int rc = em_procfs_read_smaps(p, &sm);
  assert_true(rc == 0 || rc == -ENOENT);
  if (rc == 0) {
    assert_true((sm.have & EM_SMAPS_PSS) != 0 && (sm.have & EM_SMAPS_ANON) != 0);
    assert_true(sm.anon_bytes >= ((uint64_t)48 << 20));
    assert_true(sm.pss_bytes > 0 && sm.pss_bytes <= after.rss_bytes + ((uint64_t)1 << 20));
  }
  free((void *)mem);

  em_meminfo_t mi;
  assert_int_equal(em_procfs_read_meminfo(p, &mi), 0);
  assert_true((mi.have & EM_MEMINFO_TOTAL) != 0 && mi.total_bytes > 0);
  if ((mi.have & EM_MEMINFO_AVAILABLE) != 0) {
    assert_true(mi.available_bytes <= mi.total_bytes);
  }

  if (em_procfs_has_psi(p)) {
    for (int r = 0; r < EM_PSI_COUNT; r++) {
      em_psi_t psi;
      rc = em_procfs_read_psi(p, (em_psi_res_t)r, &psi);
      assert_true(rc == 0 || rc == -ENOENT || rc == -EOPNOTSUPP);
      if (rc == 0) {
        assert_true((psi.have & EM_PSI_SOME) != 0);
        assert_true(psi.some_avg10 >= 0.0 && psi.some_avg10 <= 100.0);
      }
    }
  }
  /* This process's own /proc/<pid>/io (the same user: no ptrace capability needed): its write
   * calls count, whatever the file system (tmpfs has no storage bytes to count). */
  em_pidio_t io0, io1;
  assert_int_equal(em_procfs_read_pidio(p, &io0), 0);
  assert_true((io0.have & EM_PIDIO_WRITE_BYTES) && (io0.have & EM_PIDIO_SYSCW));
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  for (int i = 0; i < 10; i++) {
    assert_int_equal(write(fds[1], "x", 1), 1);
  }
  close(fds[0]);
  close(fds[1]);
  assert_int_equal(em_procfs_read_pidio(p, &io1), 0);
  assert_true(io1.syscw >= io0.syscw + 10);
  assert_true(io1.write_bytes >= io0.write_bytes && io1.read_bytes >= io0.read_bytes);
  em_procfs_free(p);
}

/* The child of reader_statm_of_exited_child_is_esrch, killed and reaped by its teardown. */
static pid_t sleeping_child = -1;

static int kill_sleeping_child(void **state) {
  (void)state;
  if (sleeping_child > 0) {
    kill(sleeping_child, SIGKILL);
    waitpid(sleeping_child, NULL, 0);
  }
  sleeping_child = -1;
  return 0;
}

static void reader_statm_of_exited_child_is_esrch(void **state) {
  (void)state;
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* Never outlive the test. */
    for (;;) {
      pause();
    }
  }
  sleeping_child = child;
  em_procfs_t *p = open_tree("/proc", child);
  em_statm_t st;
  em_smaps_t sm;
  assert_int_equal(em_procfs_read_statm(p, &st), 0);
  assert_true(st.rss_bytes > 0);

  assert_int_equal(kill(child, SIGKILL), 0);
  siginfo_t info;
  memset(&info, 0, sizeof info);
  assert_int_equal(waitid(P_PID, (id_t)child, &info, WEXITED | WNOWAIT), 0); /* A zombie. */
  assert_int_equal(em_procfs_read_statm(p, &st), -ESRCH);
  int rc = em_procfs_read_smaps(p, &sm);
  assert_true(rc == -ESRCH || rc == -ENOENT); /* -ENOENT: a kernel without smaps_rollup. */

  assert_int_equal(waitpid(child, NULL, 0), child); /* Reaped. */
  sleeping_child = -1;
  assert_int_equal(em_procfs_read_statm(p, &st), -ESRCH);
  assert_int_equal(em_procfs_set_pid(p, child), -ESRCH);
  em_procfs_free(p);
}

/* ---- Scheduling evidence (schedinfo.c) and who else ran (others.c) ---- */

#define SCHED_DIR EM_FIXTURES_DIR "/sched"

/* A reader of fixture tree `tree` (under tests/fixtures/sched) for its pid 4242. */
static em_schedinfo_t *open_sched_tree(const char *base, const char *tree) {
  char proc[PATH_MAX], cgroup[PATH_MAX];
  snprintf(proc, sizeof proc, "%s/%s/proc", base, tree);
  snprintf(cgroup, sizeof cgroup, "%s/%s/cgroup", base, tree);
  em_schedinfo_t *s = NULL;
  assert_int_equal(em_schedinfo_new(&s, proc, cgroup, 4242, NULL), 0);
  return s;
}

static void sched_stat_takes_the_fields_after_the_last_parenthesis(void **state) {
  (void)state;
  static const char line[] = "4242 (python3 (w) x) S 1 4242 4242 0 -1 4194560 51234 0 37 0 1500 "
                             "250 0 0 20 0 2 0 123456 2400000000 560000 18446744073709551615 1 1 "
                             "0 0 0 0 0 16781312 1224 0 0 0 17 3 0 0 0 0 0\n";
  em_schedinfo_stat_t st;
  assert_int_equal(em_schedinfo_parse_stat(line, sizeof line - 1, &st), 0);
  assert_string_equal(st.comm, "python3 (w) x");
  assert_int_equal(st.state, 'S');
  assert_int_equal(st.majflt, 37);
  assert_int_equal(st.utime_ticks, 1500);
  assert_int_equal(st.stime_ticks, 250);
  assert_int_equal(st.starttime, 123456);
  assert_int_equal(st.processor, 3);
  /* A 2.6-era line that stops after field 22 has no processor: -1, not CPU 0. */
  static const char short_line[] = "7 (a) R 1 7 7 0 -1 0 0 0 5 0 10 20 0 0 20 0 1 0 99\n";
  assert_int_equal(em_schedinfo_parse_stat(short_line, sizeof short_line - 1, &st), 0);
  assert_int_equal(st.processor, -1);
  assert_int_equal(st.majflt, 5);
}

/* Texts each parser must refuse: truncated, garbage, overflowing, repeated. */
static void sched_parsers_reject_text_not_in_the_format(void **state) {
  (void)state;
  static const char *const stats[] = {"",
                                      "4242 (x) S 1 2 3\n",
                                      "4242 (x) S 1 4242 4242 0 -1 0 0 0 x7 0 1 2 0 0 20 0 1 0 9\n",
                                      "4242 x) S 1\n",
                                      "4242 (x) S 1 4242 4242 0 -1 0 0 0 7 0 1 2 0 0 20 0 1 0 9",
                                      "4242 (x) S 1 4242 4242 0 -1 0 0 0 99999999999999999999999 0 "
                                      "1 2 0 0 20 0 1 0 9\n",
                                      "4242 (x) S 1 4242 4242 0 -1 0 0 0 7 0 1 2 0 0 20 0 1 0 9 5  "
                                      "6\n" /* Fields set, then bad. */};
  em_schedinfo_stat_t st;
  for (size_t i = 0; i < ARRAY_LEN(stats); i++) {
    assert_int_equal(em_schedinfo_parse_stat(stats[i], strlen(stats[i]), &st), -EINVAL);
    assert_int_equal(st.utime_ticks, 0);
    assert_int_equal(st.majflt, 0);
    assert_int_equal(st.processor, -1);
  }
  static const char *const schedstats[] = {"",          "1 2 3",   "1 2\n",
                                           "1 2 3 4\n", "a b c\n", "1 99999999999999999999999 3\n"};
  uint64_t wait = 1, slices = 1;
  for (size_t i = 0; i < ARRAY_LEN(schedstats); i++) {
    assert_int_equal(
        em_schedinfo_parse_schedstat(schedstats[i], strlen(schedstats[i]), &wait, &slices),
        -EINVAL);
    assert_int_equal(wait, 0);
    assert_int_equal(slices, 0);
  }
  assert_int_equal(em_schedinfo_parse_schedstat("9 8 7\n", 6, &wait, &slices), 0);
  assert_int_equal(wait, 8);
  assert_int_equal(slices, 7);
  static const char *const statuses[] = {
      "voluntary_ctxt_switches:\t1\nvoluntary_ctxt_switches:\t2\n",
      "voluntary_ctxt_switches:\tx\nnonvoluntary_ctxt_switches:\t2\n",
      "voluntary_ctxt_switches:\t1\nnonvoluntary_ctxt_switches:\t2"};
  unsigned have = 1;
  uint64_t vol = 1, invol = 1;
  for (size_t i = 0; i < ARRAY_LEN(statuses); i++) {
    assert_int_equal(
        em_schedinfo_parse_status(statuses[i], strlen(statuses[i]), &have, &vol, &invol), -EINVAL);
    assert_int_equal(have, 0);
  }
  static const char *const cpu_stats[] = {"nr_throttled 1\nnr_throttled 2\n",
                                          "throttled_usec 99999999999999999999\n",
                                          "throttled_usec 18446744073709552\n", "nr_throttled x\n"};
  em_schedinfo_cpu_stat_t cs;
  for (size_t i = 0; i < ARRAY_LEN(cpu_stats); i++) {
    assert_int_equal(em_schedinfo_parse_cpu_stat(cpu_stats[i], strlen(cpu_stats[i]), &cs), -EINVAL);
    assert_int_equal(cs.have, 0);
  }
  static const char *const cgroups[] = {"0::/a", "garbage\n", "0::relative\n", ":cpu:/a\n"};
  em_schedinfo_cgroup_t cg;
  for (size_t i = 0; i < ARRAY_LEN(cgroups); i++) {
    assert_int_equal(em_schedinfo_parse_cgroup(cgroups[i], strlen(cgroups[i]), &cg), -EINVAL);
    assert_string_equal(cg.v2_path, "");
  }
  bool have_total = true;
  uint64_t total = 1;
  static const char psi_bad[] = "some avg10=0.00 avg60=0.00 avg300=0.00 total=12x\n";
  assert_int_equal(
      em_schedinfo_parse_pressure_total(psi_bad, sizeof psi_bad - 1, &have_total, &total), -EINVAL);
  assert_false(have_total);
}

static void sched_status_without_ctxt_switch_lines_has_nothing(void **state) {
  (void)state;
  static const char text[] = "Name:\tx\nState:\tS (sleeping)\n";
  unsigned have = 1;
  uint64_t vol = 1, invol = 1;
  assert_int_equal(em_schedinfo_parse_status(text, sizeof text - 1, &have, &vol, &invol), 0);
  assert_int_equal(have, 0);
  assert_int_equal(vol, 0);
}

static void sched_cgroup_finds_v1_cpu_controller_and_v2_path(void **state) {
  (void)state;
  static const char hybrid[] = "5:memory:/m\n4:cpuacct,cpu:/app\n2:cpuset:/\n0::/u\n";
  em_schedinfo_cgroup_t cg;
  assert_int_equal(em_schedinfo_parse_cgroup(hybrid, sizeof hybrid - 1, &cg), 0);
  assert_string_equal(cg.v1_controllers, "cpuacct,cpu");
  assert_string_equal(cg.v1_path, "/app");
  assert_string_equal(cg.v2_path, "/u");
  /* "cpuset" is not "cpu": a machine with only cpuset in v1 has no v1 cpu controller. */
  static const char cpuset_only[] = "3:cpuset:/a\n0::/b\n";
  assert_int_equal(em_schedinfo_parse_cgroup(cpuset_only, sizeof cpuset_only - 1, &cg), 0);
  assert_string_equal(cg.v1_path, "");
  assert_string_equal(cg.v2_path, "/b");
}

/* JetPack 5: the v1 cpu,cpuacct controller's throttled_time (ns) and nr_throttled. */
static void sched_reader_reads_v1_jetpack5_tree(void **state) {
  (void)state;
  em_schedinfo_t *s = open_sched_tree(SCHED_DIR, "v1-jetpack5");
  em_schedinfo_reading_t r = {0};
  assert_int_equal(em_schedinfo_read_stat(s, &r), 0);
  uint64_t tick_ns = UINT64_C(1000000000) / (uint64_t)sysconf(_SC_CLK_TCK);
  assert_int_equal(r.cpu_ns, (1500 + 250) * tick_ns);
  assert_int_equal(r.major_faults, 37);
  assert_int_equal(em_schedinfo_read_threads(s, &r), 0);
  unsigned all = EM_SCHEDINFO_CPU | EM_SCHEDINFO_MAJFLT | EM_SCHEDINFO_RUNQ | EM_SCHEDINFO_CTXSW |
                 EM_SCHEDINFO_THROTTLED | EM_SCHEDINFO_NR_THROTTLED;
  assert_int_equal(r.have, all);
  assert_int_equal(r.runq_delay_ns, 1500000 + 500000);
  assert_int_equal(r.ctxsw_voluntary, 100 + 20);
  assert_int_equal(r.ctxsw_involuntary, 7 + 3);
  assert_int_equal(r.throttled_ns, 987654321);
  assert_int_equal(r.nr_throttled, 42);
  assert_null(em_schedinfo_absent_runq(s));
  assert_null(em_schedinfo_absent_throttle(s));
  em_schedinfo_free(s);
}

/* JetPack 6: cgroup v2's throttled_usec in ns; a cgroup target's runq delay from cpu.pressure. */
static void sched_reader_reads_v2_jetpack6_tree_for_process_and_cgroup(void **state) {
  (void)state;
  em_schedinfo_t *s = open_sched_tree(SCHED_DIR, "v2-jetpack6");
  em_schedinfo_reading_t r = {0};
  assert_int_equal(em_schedinfo_read_threads(s, &r), 0);
  assert_true(r.have & EM_SCHEDINFO_THROTTLED);
  assert_int_equal(r.throttled_ns, UINT64_C(3456789000));
  assert_int_equal(r.nr_throttled, 12);
  assert_int_equal(r.runq_delay_ns, 2000000);
  em_schedinfo_free(s);

  char proc[PATH_MAX], cg[PATH_MAX];
  snprintf(proc, sizeof proc, "%s/v2-jetpack6/proc", SCHED_DIR);
  snprintf(cg, sizeof cg, "%s/v2-jetpack6/cgroup/app.slice/infer.service", SCHED_DIR);
  assert_int_equal(em_schedinfo_new(&s, proc, SCHED_DIR "/v2-jetpack6/cgroup", 0, cg), 0);
  memset(&r, 0, sizeof r);
  assert_int_equal(em_schedinfo_read_stat(s, &r), -ENOENT);
  assert_int_equal(em_schedinfo_read_threads(s, &r), 0);
  assert_int_equal(r.have, EM_SCHEDINFO_RUNQ | EM_SCHEDINFO_THROTTLED | EM_SCHEDINFO_NR_THROTTLED);
  assert_int_equal(r.runq_delay_ns, UINT64_C(7654321000));
  assert_non_null(em_schedinfo_absent_ctxsw(s));
  em_schedinfo_free(s);
}

/* A kernel without CONFIG_SCHED_INFO, and a v2 cgroup without the cpu controller: runq delay
 * and throttling are absent with their reasons, never 0; the context switches still count. */
static void sched_without_schedstat_or_cpu_controller_is_absent_not_zero(void **state) {
  (void)state;
  em_schedinfo_t *s = open_sched_tree(SCHED_DIR, "no-schedstat");
  em_schedinfo_reading_t r = {0};
  assert_int_equal(em_schedinfo_read_threads(s, &r), 0);
  assert_false(r.have & EM_SCHEDINFO_RUNQ);
  assert_false(r.have & EM_SCHEDINFO_THROTTLED);
  assert_false(r.have & EM_SCHEDINFO_NR_THROTTLED);
  assert_true(r.have & EM_SCHEDINFO_CTXSW);
  assert_int_equal(r.ctxsw_voluntary, 120);
  assert_non_null(strstr(em_schedinfo_absent_runq(s), "CONFIG_SCHED_INFO"));
  assert_non_null(strstr(em_schedinfo_absent_throttle(s), "cpu controller"));
  em_schedinfo_free(s);
}

/* A thread that exits keeps its counts in the sums: the counters never go backwards. */
static void sched_counters_keep_the_counts_of_exited_threads(void **state) {
  (void)state;
  const char *dir = temp_copy("../sched/v1-jetpack5");
  em_schedinfo_t *s = open_sched_tree(dir, "");
  em_schedinfo_reading_t before = {0}, after = {0};
  assert_int_equal(em_schedinfo_read_threads(s, &before), 0);
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/proc/4242/task/4250", dir);
  remove_tree(path);
  snprintf(path, sizeof path, "%s/proc/4242/task/4242/schedstat", dir);
  write_path(path, "9100000000 1600000 410\n", strlen("9100000000 1600000 410\n"));
  assert_int_equal(em_schedinfo_read_threads(s, &after), 0);
  assert_int_equal(after.runq_delay_ns, 1600000 + 500000);
  assert_int_equal(after.ctxsw_voluntary, before.ctxsw_voluntary);
  assert_int_equal(after.ctxsw_involuntary, before.ctxsw_involuntary);
  em_schedinfo_free(s);
}

/* status is read again only for a thread whose schedstat says it ran (its slice count moved):
 * a thread that did not run did not switch. The files stay open and are re-read in place. */
static void sched_status_is_read_only_for_threads_that_ran(void **state) {
  (void)state;
  const char *dir = temp_copy("../sched/v1-jetpack5");
  em_schedinfo_t *s = open_sched_tree(dir, "");
  em_schedinfo_reading_t r = {0};
  assert_int_equal(em_schedinfo_read_threads(s, &r), 0);
  assert_int_equal(r.ctxsw_voluntary, 120);
  char status[PATH_MAX], schedstat[PATH_MAX];
  snprintf(status, sizeof status, "%s/proc/4242/task/4250/status", dir);
  snprintf(schedstat, sizeof schedstat, "%s/proc/4242/task/4250/schedstat", dir);
  static const char more[] = "voluntary_ctxt_switches:\t50\nnonvoluntary_ctxt_switches:\t9\n";
  write_path(status, more, sizeof more - 1);
  memset(&r, 0, sizeof r);
  assert_int_equal(em_schedinfo_read_threads(s, &r), 0);
  assert_int_equal(r.ctxsw_voluntary, 120); /* Same slices: status not read. */
  static const char ran[] = "2100000000 700000 125\n";
  write_path(schedstat, ran, sizeof ran - 1);
  memset(&r, 0, sizeof r);
  assert_int_equal(em_schedinfo_read_threads(s, &r), 0);
  assert_int_equal(r.ctxsw_voluntary, 100 + 50);
  assert_int_equal(r.ctxsw_involuntary, 7 + 9);
  assert_int_equal(r.runq_delay_ns, 1500000 + 700000);
  em_schedinfo_free(s);
}

/* The reader keeps stat, task/, cpu.stat and each thread's two files open between passes,
 * and closes every one of them when freed, a failed new included. */
static void sched_reader_keeps_thread_files_open_and_closes_all(void **state) {
  (void)state;
  int before = count_fds();
  em_schedinfo_t *s = open_sched_tree(SCHED_DIR, "v1-jetpack5");
  em_schedinfo_reading_t r = {0};
  assert_int_equal(em_schedinfo_read_threads(s, &r), 0);
  /* stat, task/, cpu.stat, and schedstat + status of two threads. */
  assert_int_equal(count_fds(), before + 3 + 4);
  assert_int_equal(em_schedinfo_read_threads(s, &r), 0);
  assert_int_equal(count_fds(), before + 3 + 4); /* Re-read in place: nothing more opened. */
  em_schedinfo_free(s);
  assert_int_equal(count_fds(), before);
  s = NULL;
  assert_int_equal(em_schedinfo_new(&s, SCHED_DIR "/v1-jetpack5/proc", SCHED_DIR, 4243, NULL),
                   -ESRCH);
  assert_int_equal(count_fds(), before);
}

static void sched_reader_of_missing_process_is_esrch(void **state) {
  (void)state;
  em_schedinfo_t *s = NULL;
  assert_int_equal(em_schedinfo_new(&s, SCHED_DIR "/v1-jetpack5/proc", SCHED_DIR, 4243, NULL),
                   -ESRCH);
  assert_int_equal(em_schedinfo_new(&s, SCHED_DIR, SCHED_DIR, 4242, "/x"), -EINVAL);
  assert_null(s);
}

/* Who else ran, over a fixture /proc rewritten between two scans: the share of one CPU, the
 * largest first, leaving out the target and the agent, a reused pid and idle processes. */
static void others_lists_the_largest_cpu_users_between_two_scans(void **state) {
  (void)state;
  const char *dir = temp_copy("");
  static const struct {
    int pid;
    const char *comm;
    unsigned start, ticks0, ticks1;
  } procs[] = {{10, "hog", 5, 100, 300},  {11, "idle", 5, 7, 7},    {12, "half", 5, 0, 100},
               {13, "target", 5, 0, 200}, {14, "agent", 5, 0, 200}, {15, "reused", 5, 0, 0}};
  long hz = sysconf(_SC_CLK_TCK);
  for (int round = 0; round < 2; round++) {
    for (size_t i = 0; i < ARRAY_LEN(procs); i++) {
      char path[PATH_MAX], text[256];
      snprintf(path, sizeof path, "%s/%d", dir, procs[i].pid);
      mkdir(path, 0700);
      snprintf(path, sizeof path, "%s/%d/stat", dir, procs[i].pid);
      unsigned ticks = round ? procs[i].ticks1 : procs[i].ticks0;
      unsigned start = procs[i].start + (round && procs[i].pid == 15 ? 1000 : 0);
      ticks = round && procs[i].pid == 15 ? 500 : ticks;
      /* ticks scaled to this machine's clock tick: 100 ticks of 10 ms = 1 s. */
      unsigned long long t = (unsigned long long)ticks * (unsigned long long)hz / 100u;
      int n = snprintf(text, sizeof text, "%d (%s) R 1 1 1 0 -1 0 0 0 0 0 %llu 0 0 0 20 0 1 0 %u\n",
                       procs[i].pid, procs[i].comm, t, start);
      write_path(path, text, (size_t)n);
    }
    em_others_t *o = NULL;
    static em_others_t *kept;
    if (round == 0) {
      assert_int_equal(em_others_new(&o, dir), 0);
      kept = o;
    }
    o = kept;
    em_others_list_t list;
    uint64_t now = round ? UINT64_C(3000000000) : UINT64_C(1000000000); /* 2 s apart. */
    assert_int_equal(em_others_scan(o, 13, 14, now, &list), 0);
    if (round == 0) {
      assert_int_equal(list.n, 0);
      assert_int_equal(list.window_ns, 0);
      continue;
    }
    assert_int_equal(list.window_ns, UINT64_C(2000000000));
    assert_int_equal(list.n, 2);
    assert_int_equal(list.procs[0].pid, 10);
    assert_string_equal(list.procs[0].comm, "hog");
    assert_true(fabs(list.procs[0].share - 1.0) < 1e-9); /* 2 s of CPU in 2 s. */
    assert_int_equal(list.procs[1].pid, 12);
    assert_true(fabs(list.procs[1].share - 0.5) < 1e-9);
    em_others_free(o);
  }
}

/* Only processes that last ran on one of the target's CPUs compete with it: the target here
 * is this test, pinned to one CPU for the test; a fixture process last seen on another CPU is
 * not listed, one on the target's CPU is. */
static void others_lists_only_processes_on_the_target_cpus(void **state) {
  (void)state;
  cpu_set_t saved, one;
  assert_int_equal(sched_getaffinity(0, sizeof saved, &saved), 0);
  if (CPU_COUNT(&saved) < 2) {
    skip(); /* One CPU: every process shares it. */
  }
  int mine = 0, other;
  while (!CPU_ISSET(mine, &saved)) {
    mine++;
  }
  other = mine + 1;
  while (!CPU_ISSET(other, &saved)) {
    other++;
  }
  CPU_ZERO(&one);
  CPU_SET(mine, &one);
  assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
  const char *dir = temp_copy("");
  em_others_t *o = NULL;
  assert_int_equal(em_others_new(&o, dir), 0);
  em_others_list_t list;
  for (int round = 0; round < 2; round++) {
    for (int k = 0; k < 2; k++) {
      char path[PATH_MAX], text[512];
      int pid = 20 + k;
      snprintf(path, sizeof path, "%s/%d", dir, pid);
      mkdir(path, 0700);
      snprintf(path, sizeof path, "%s/%d/stat", dir, pid);
      int n = snprintf(text, sizeof text,
                       "%d (%s) R 1 1 1 0 -1 0 0 0 0 0 %d 0 0 0 20 0 1 0 5 0 0 0 0 0 0 0 0 0 0 0 "
                       "0 0 0 0 17 %d 0\n",
                       pid, k ? "elsewhere" : "beside", round * 100, k ? other : mine);
      write_path(path, text, (size_t)n);
    }
    assert_int_equal(em_others_scan(o, getpid(), 0, (uint64_t)(round + 1) * 1000000000u, &list), 0);
  }
  assert_int_equal(sched_setaffinity(0, sizeof saved, &saved), 0);
  assert_int_equal(list.n, 1);
  assert_int_equal(list.procs[0].pid, 20);
  assert_string_equal(list.procs[0].comm, "beside");
  em_others_free(o);
}

/* At most EM_OTHERS_MAX, largest first, however many ran. */
static void others_keeps_only_the_top_few(void **state) {
  (void)state;
  const char *dir = temp_copy("");
  em_others_t *o = NULL;
  assert_int_equal(em_others_new(&o, dir), 0);
  em_others_list_t list;
  for (int round = 0; round < 2; round++) {
    for (int pid = 100; pid < 100 + 3 * EM_OTHERS_MAX; pid++) {
      char path[PATH_MAX], text[256];
      snprintf(path, sizeof path, "%s/%d", dir, pid);
      mkdir(path, 0700);
      snprintf(path, sizeof path, "%s/%d/stat", dir, pid);
      int n = snprintf(text, sizeof text, "%d (p%d) R 1 1 1 0 -1 0 0 0 0 0 %d 0 0 0 20 0 1 0 5\n",
                       pid, pid, round * (pid - 99));
      write_path(path, text, (size_t)n);
    }
    assert_int_equal(em_others_scan(o, 0, 0, (uint64_t)(round + 1) * 1000000000u, &list), 0);
  }
  assert_int_equal(list.n, EM_OTHERS_MAX);
  assert_int_equal(list.procs[0].pid, 100 + 3 * EM_OTHERS_MAX - 1);
  for (size_t i = 1; i < list.n; i++) {
    assert_true(list.procs[i - 1].share >= list.procs[i].share);
  }
  em_others_free(o);
}

/* The children of the live scheduling test, killed and reaped by its teardown. */
static pid_t busy_children[2] = {-1, -1};

static int kill_busy_children(void **state) {
  (void)state;
  for (int i = 0; i < 2; i++) {
    if (busy_children[i] > 0) {
      kill(busy_children[i], SIGKILL);
      waitpid(busy_children[i], NULL, 0);
    }
    busy_children[i] = -1;
  }
  return 0;
}

/* A child spinning on `cpu`, named `name`. */
static pid_t spin_on(int cpu, const char *name) {
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    prctl(PR_SET_NAME, name);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    (void)sched_setaffinity(0, sizeof set, &set);
    for (volatile unsigned long i = 0;; i++) {
    }
  }
  return child;
}

/* Two spinners on one CPU: the target's CPU time and runq delay grow, and the other spinner is
 * who else ran, with a share near half of that CPU. */
static void sched_live_busy_child_grows_and_its_rival_is_listed(void **state) {
  (void)state;
  cpu_set_t mine;
  assert_int_equal(sched_getaffinity(0, sizeof mine, &mine), 0);
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &mine)) {
    cpu++;
  }
  busy_children[0] = spin_on(cpu, "em-target");
  busy_children[1] = spin_on(cpu, "em-hog");
  usleep(100000); /* Both pinned. */
  em_schedinfo_t *s = NULL;
  assert_int_equal(em_schedinfo_new(&s, "/proc", "/sys/fs/cgroup", busy_children[0], NULL), 0);
  em_others_t *o = NULL;
  assert_int_equal(em_others_new(&o, "/proc"), 0);
  em_schedinfo_reading_t r0 = {0}, r1 = {0};
  em_others_list_t list;
  assert_int_equal(em_schedinfo_read_stat(s, &r0), 0);
  assert_int_equal(em_schedinfo_read_threads(s, &r0), 0);
  assert_int_equal(em_others_scan(o, busy_children[0], getpid(), 0, &list), 0);
  /* A second, or longer on a loaded machine: until the target has had 0.1 s of CPU. */
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  uint64_t elapsed_ns = 0;
  do {
    usleep(elapsed_ns < 1000000000u ? 1000000 : 250000);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    elapsed_ns = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000u + (uint64_t)t1.tv_nsec -
                 (uint64_t)t0.tv_nsec;
    r1 = (em_schedinfo_reading_t){0};
    assert_int_equal(em_schedinfo_read_stat(s, &r1), 0);
  } while (r1.cpu_ns <= r0.cpu_ns + 100000000u && elapsed_ns < 30000000000u);
  assert_int_equal(em_schedinfo_read_threads(s, &r1), 0);
  assert_int_equal(em_others_scan(o, busy_children[0], getpid(), elapsed_ns, &list), 0);
  assert_true(r1.cpu_ns > r0.cpu_ns + 100000000u);          /* > 0.1 s of CPU. */
  assert_true(r1.ctxsw_involuntary > r0.ctxsw_involuntary); /* Preempted by its rival. */
  if (r1.have & EM_SCHEDINFO_RUNQ) {
    assert_true(r1.runq_delay_ns > r0.runq_delay_ns + 100000000u); /* Waited > 0.1 s. */
  } else {
    assert_non_null(em_schedinfo_absent_runq(s));
  }
  bool listed = false;
  for (size_t i = 0; i < list.n; i++) {
    assert_true(list.procs[i].pid != busy_children[0] && list.procs[i].pid != getpid());
    if (list.procs[i].pid == busy_children[1]) {
      listed = true;
      assert_string_equal(list.procs[i].comm, "em-hog");
      assert_true(list.procs[i].share > 0.0 && list.procs[i].share < 1.2);
    }
  }
  assert_true(listed);
  em_others_free(o);
  em_schedinfo_free(s);
}

int main(int argc, char **argv) {
  const struct CMUnitTest unit[] = {
      cmocka_unit_test(statm_counts_pages_in_bytes),
      cmocka_unit_test(statm_of_orin_python_is_about_2_3_gb_resident),
      cmocka_unit_test(statm_rejects_page_count_that_overflows_bytes),
      cmocka_unit_test(statm_rejects_zero_page_size_and_null_arguments),
      cmocka_unit_test(smaps_rollup_reports_pss_anon_and_swap_in_bytes),
      cmocka_unit_test(smaps_rollup_matches_whole_keys_only),
      cmocka_unit_test(kb_fields_reject_malformed_values),
      cmocka_unit_test(meminfo_reports_available_and_total_in_bytes),
      cmocka_unit_test(meminfo_before_3_14_has_total_but_no_available),
      cmocka_unit_test(psi_reports_some_and_full_avg10_in_percent),
      cmocka_unit_test(psi_cpu_without_full_line_has_only_some),
      cmocka_unit_test(psi_cpu_with_zero_full_line_has_both),
      cmocka_unit_test(psi_rejects_lines_not_in_the_kernel_format),
      cmocka_unit_test(pidio_reports_storage_bytes_and_calls),
      cmocka_unit_test(pidio_rejects_hostile_text),
      cmocka_unit_test(garbage_and_truncated_fixtures_are_rejected),
      cmocka_unit_test(every_garbage_and_truncated_fixture_is_in_the_table),
      cmocka_unit_test(each_parser_rejects_the_other_files),
      cmocka_unit_test(every_truncation_of_each_kind_is_rejected_or_parsed_consistently),
      cmocka_unit_test(parsers_reject_null_output_and_null_text),
      cmocka_unit_test(reader_reads_jetson_orin_tree),
      cmocka_unit_test(reader_reads_x86_vm_tree),
      cmocka_unit_test(smaps_missing_on_old_kernel_is_absent_not_zero),
      cmocka_unit_test(psi_missing_on_old_kernel_is_absent_not_zero),
      cmocka_unit_test(reader_without_target_reads_system_figures_only),
      cmocka_unit_test_teardown(reader_new_without_meminfo_is_enoent, remove_temp_dir),
      cmocka_unit_test(reader_new_for_missing_pid_is_esrch),
      cmocka_unit_test(reader_rejects_bad_arguments),
      cmocka_unit_test(reader_opens_files_once_close_on_exec_and_closes_them),
      cmocka_unit_test_teardown(reader_sees_file_rewritten_in_place, remove_temp_dir),
      cmocka_unit_test_teardown(reader_rejects_garbage_and_keeps_working_after, remove_temp_dir),
      cmocka_unit_test_teardown(reader_rejects_file_that_fills_the_buffer, remove_temp_dir),
      cmocka_unit_test_teardown(reader_statm_of_target_gone_is_esrch, remove_temp_dir),
      cmocka_unit_test_teardown(reader_set_pid_switches_files, remove_temp_dir),
      cmocka_unit_test_teardown(reader_reads_pidio_and_keeps_its_open_error, remove_temp_dir),
      cmocka_unit_test_teardown(reader_open_error_on_smaps_keeps_previous_target_and_leaks_nothing,
                                remove_temp_dir),
      cmocka_unit_test_teardown(reader_open_error_on_psi_fails_new_and_leaks_nothing,
                                remove_temp_dir),
      cmocka_unit_test_teardown(reader_psi_that_opens_but_does_not_read_is_absent, remove_temp_dir),
      cmocka_unit_test(sched_stat_takes_the_fields_after_the_last_parenthesis),
      cmocka_unit_test(sched_parsers_reject_text_not_in_the_format),
      cmocka_unit_test(sched_status_without_ctxt_switch_lines_has_nothing),
      cmocka_unit_test(sched_cgroup_finds_v1_cpu_controller_and_v2_path),
      cmocka_unit_test(sched_reader_reads_v1_jetpack5_tree),
      cmocka_unit_test(sched_reader_reads_v2_jetpack6_tree_for_process_and_cgroup),
      cmocka_unit_test(sched_without_schedstat_or_cpu_controller_is_absent_not_zero),
      cmocka_unit_test_teardown(sched_counters_keep_the_counts_of_exited_threads, remove_temp_dir),
      cmocka_unit_test_teardown(sched_status_is_read_only_for_threads_that_ran, remove_temp_dir),
      cmocka_unit_test(sched_reader_keeps_thread_files_open_and_closes_all),
      cmocka_unit_test(sched_reader_of_missing_process_is_esrch),
      cmocka_unit_test_teardown(others_lists_the_largest_cpu_users_between_two_scans,
                                remove_temp_dir),
      cmocka_unit_test_teardown(others_keeps_only_the_top_few, remove_temp_dir),
      cmocka_unit_test_teardown(others_lists_only_processes_on_the_target_cpus, remove_temp_dir),
  };
  /* The live kernel: this process's own RSS and a real child in the real /proc. Run with --live,
   * labelled integration (CMakeLists.txt). */
  const struct CMUnitTest live[] = {
      cmocka_unit_test(reader_reads_own_pid_from_real_proc),
      cmocka_unit_test_teardown(reader_statm_of_exited_child_is_esrch, kill_sleeping_child),
      cmocka_unit_test_teardown(sched_live_busy_child_grows_and_its_rival_is_listed,
                                kill_busy_children),
  };
  if (argc > 1 && strcmp(argv[1], "--live") == 0) {
    return cmocka_run_group_tests_name("live", live, NULL, NULL);
  }
  return cmocka_run_group_tests_name("unit", unit, NULL, NULL);
}
