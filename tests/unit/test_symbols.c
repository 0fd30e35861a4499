/*
 * test_symbols.c - native symbols of user addresses (profile/symbols.h): which module an
 * address is charged to and the name it gets. unit: a maps snapshot of two made-up modules
 * (the target gone), where an address at a module's end, in the gap between modules or above
 * the highest one belongs to none (libdwfl's dwfl_addrmodule answers the module below for
 * those), and file names that are not frame-text become frame-text. live (--live): this very
 * process in the real /proc: getpid in libc, a function and a data object of the test binary, the
 * first byte past a library's last mapping, a stack address, and one session kept across two
 * resolves with a library loaded in between.
 */
#define _GNU_SOURCE

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "symbols.h"
#include "unit_fx.h"

/* Named from the outside: a function and a data object of the test binary. */
__attribute__((noinline, used)) int em_test_symbols_marker(int x);
__attribute__((noinline, used)) int em_test_symbols_marker(int x) {
  return x * 3 + 1;
}
int em_test_symbols_datum[256] = {1};

static em_symbols_t *new_symbols(const char *proc_root) {
  em_symbols_t *s = NULL;
  assert_int_equal(em_symbols_new(&s, proc_root), 0);
  em_symbols_begin(s);
  return s;
}

static void assert_outside(const em_profile_frame_t *f, uint64_t addr) {
  char hex[32];
  snprintf(hex, sizeof(hex), "0x%" PRIx64, addr);
  assert_null(f->module);
  assert_int_equal(f->kind, EM_FRAME_UNKNOWN);
  assert_string_equal(f->name, hex);
}

static void snapshot_bounds_each_module(void **state) {
  (void)state;
  static const char maps[] = "00010000-00012000 r--p 00000000 fe:00 101 /nonexistent/liba.so\n"
                             "00012000-00020000 r-xp 00002000 fe:00 101 /nonexistent/liba.so\n"
                             "00020000-00028000 rw-p 00000000 00:00 0 \n"
                             "00030000-00038000 r-xp 00000000 fe:00 202 /nonexistent/libb.so\n"
                             "00038000-00040000 rw-p 00008000 fe:00 202 /nonexistent/libb.so\n"
                             "7ffc0000000-7ffc0021000 rw-p 00000000 00:00 0 [stack]\n";
  const uint64_t addrs[] = {0x10000, 0x15000, 0x1ffff, 0x20000,      0x25000,
                            0x30000, 0x3ffff, 0x40000, 0x7ffc0000100};
  enum { N = sizeof(addrs) / sizeof(addrs[0]) };
  em_profile_frame_t out[N];
  em_symbols_t *s = new_symbols("/nonexistent-proc");
  /* Twice in one session: the second refresh must not keep anything of the first. */
  for (int round = 0; round < 2; round++) {
    em_symbols_begin(s);
    assert_int_equal(em_symbols_user(s, 4242, maps, sizeof(maps) - 1, addrs, N, out), N);
    assert_string_equal(out[0].name, "liba.so+0x0");
    assert_string_equal(out[1].name, "liba.so+0x5000");
    assert_string_equal(out[2].name, "liba.so+0xffff");
    for (int i = 0; i < 3; i++) {
      assert_string_equal(out[i].module, "liba.so");
      assert_int_equal(out[i].kind, EM_FRAME_NATIVE);
    }
    assert_outside(&out[3], addrs[3]); /* liba.so's end: the anonymous mapping after it */
    assert_outside(&out[4], addrs[4]); /* in the gap */
    assert_string_equal(out[5].name, "libb.so+0x0");
    assert_string_equal(out[6].name, "libb.so+0xffff");
    assert_string_equal(out[6].module, "libb.so");
    assert_outside(&out[7], addrs[7]); /* the highest module's end */
    assert_outside(&out[8], addrs[8]); /* far above every module */
  }
  em_symbols_free(s);
}

/* File names are the target's to choose: a control character or a byte that is not UTF-8
 * becomes '?', and a long name is cut on a character boundary, so every frame is frame-text
 * the profile encoder accepts. */
static void snapshot_file_names_become_frame_text(void **state) {
  (void)state;
  char maps[1024];
  char long_name[401];
  for (int i = 0; i < 200; i++) {
    memcpy(long_name + 2 * i, "\xc3\xa9", 2); /* U+00E9, 2 bytes */
  }
  long_name[400] = '\0';
  snprintf(maps, sizeof(maps),
           "00010000-00012000 r-xp 00000000 fe:00 101 /nonexistent/li\x01"
           "b\xff\xc3.so\n"
           "00030000-00038000 r-xp 00000000 fe:00 202 /nonexistent/%s\n",
           long_name);
  const uint64_t addrs[] = {0x10010, 0x30010};
  em_profile_frame_t out[2];
  em_symbols_t *s = new_symbols("/nonexistent-proc");
  assert_int_equal(em_symbols_user(s, 4242, maps, strlen(maps), addrs, 2, out), 2);
  assert_string_equal(out[0].module, "li?b??.so");
  assert_string_equal(out[0].name, "li?b??.so+0x10");
  assert_int_equal(strlen(out[1].module), 254); /* 127 characters: the 128th would pass 255 */
  assert_memory_equal(out[1].module, long_name, 254);
  assert_int_equal(strlen(out[1].name), 200 + strlen("+0x10"));
  assert_memory_equal(out[1].name, long_name, 200);
  assert_string_equal(out[1].name + 200, "+0x10");
  em_symbols_free(s);
}

/* A module's base name as the profile names it: the file's, as /proc/PID/maps names it (links
 * such as libz.so.1 resolved). */
static const char *base(const char *path) {
  static char real[4][PATH_MAX];
  static int next;
  char *r = real[next++ % 4];
  if (!realpath(path, r)) {
    snprintf(r, PATH_MAX, "%s", path);
  }
  const char *slash = strrchr(r, '/');
  return slash ? slash + 1 : r;
}

/* The first byte past a file's last mapping where an anonymous mapping starts (a library's
 * .bss), from /proc/self/maps, or 0 when there is none. */
static uint64_t end_of_a_module(void) {
  FILE *f = fopen("/proc/self/maps", "re");
  assert_non_null(f);
  char line[512];
  uint64_t prev_end = 0, found = 0;
  bool prev_file = false;
  while (!found && fgets(line, sizeof(line), f)) {
    unsigned long lo = 0, hi = 0;
    int off = 0;
    if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &off) < 2) {
      continue;
    }
    bool file = off > 0 && line[off] == '/';
    bool anon = off > 0 && (line[off] == '\n' || line[off] == '\0');
    if (prev_file && anon && lo == prev_end) {
      found = lo;
    }
    prev_file = file;
    prev_end = hi;
  }
  fclose(f);
  return found;
}

static void live_own_process_names_each_module(void **state) {
  (void)state;
  void *getpid_addr = dlsym(RTLD_DEFAULT, "getpid");
  assert_non_null(getpid_addr);
  Dl_info libc = {0}, self = {0};
  assert_true(dladdr(getpid_addr, &libc) && libc.dli_fname);
  assert_true(dladdr((void *)(uintptr_t)em_test_symbols_marker, &self) && self.dli_fname);
  int local = em_test_symbols_marker(1);
  uint64_t gap = end_of_a_module();
  assert_int_not_equal(gap, 0);
  void *start_main = dlsym(RTLD_DEFAULT, "__libc_start_main"); /* Versioned in .dynsym. */
  assert_non_null(start_main);
  const uint64_t addrs[] = {
      (uint64_t)(uintptr_t)getpid_addr + 1,
      (uint64_t)(uintptr_t)em_test_symbols_marker + 1,
      (uint64_t)(uintptr_t)&em_test_symbols_datum[100],
      (uint64_t)(uintptr_t)&local,
      gap,
      (uint64_t)(uintptr_t)start_main + 1,
  };
  enum { N = sizeof(addrs) / sizeof(addrs[0]) };
  em_profile_frame_t out[N];
  em_symbols_t *s = new_symbols("/proc");
  em_symbols_user(s, getpid(), NULL, 0, addrs, N, out);

  assert_string_equal(out[0].module, base(libc.dli_fname));
  assert_int_equal(out[0].kind, EM_FRAME_NATIVE);
  assert_non_null(strstr(out[0].name, "getpid")); /* getpid or its alias __getpid */

  assert_string_equal(out[1].module, base(self.dli_fname));
  assert_string_equal(out[1].name, "em_test_symbols_marker");
  assert_int_equal(out[1].kind, EM_FRAME_NATIVE);

  /* A data object names no frame: the module and offset instead. */
  assert_string_equal(out[2].module, base(self.dli_fname));
  assert_int_equal(strncmp(out[2].name, out[2].module, strlen(out[2].module)), 0);
  assert_int_equal(strncmp(out[2].name + strlen(out[2].module), "+0x", 3), 0);

  assert_outside(&out[3], addrs[3]); /* the stack, above every module */
  assert_outside(&out[4], addrs[4]); /* the anonymous mapping right after a module */

  /* A versioned symbol is named without its version ("@@GLIBC_2.34"). */
  assert_string_equal(out[5].name, "__libc_start_main");
  em_symbols_free(s);
}

static void live_session_sees_a_library_loaded_since(void **state) {
  (void)state;
  uint64_t first = (uint64_t)(uintptr_t)em_test_symbols_marker;
  em_profile_frame_t out[2];
  em_symbols_t *s = new_symbols("/proc");
  em_symbols_user(s, getpid(), NULL, 0, &first, 1, out);
  assert_string_equal(out[0].name, "em_test_symbols_marker");

  void *h = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    h = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
  }
  assert_non_null(h);
  void *fn = dlsym(h, "zlibVersion");
  const char *want = "zlibVersion";
  if (!fn) {
    fn = dlsym(h, "cos");
    want = "cos";
  }
  assert_non_null(fn);
  Dl_info lib = {0};
  assert_true(dladdr(fn, &lib) && lib.dli_fname);
  const uint64_t addrs[] = {(uint64_t)(uintptr_t)fn, first};
  em_symbols_begin(s);
  em_symbols_user(s, getpid(), NULL, 0, addrs, 2, out);
  assert_string_equal(out[0].module, base(lib.dli_fname));
  assert_non_null(strstr(out[0].name, want));
  assert_string_equal(out[1].name, "em_test_symbols_marker");
  em_symbols_free(s);
  dlclose(h);
}

/* Without libdw (--no-libdw: a library file that does not exist) nothing has a symbol, but an
 * address in a mapped file is still charged to it: "module+0xOFFSET" from the file's lowest
 * mapping, as libdwfl's module start; the reason is kept for the profile's notes, no session
 * is made for the unwinder, and the library cannot be changed once tried. */
static void without_libdw_live_addresses_are_module_and_offset(void **state) {
  (void)state;
  Dl_info self = {0};
  assert_true(dladdr((void *)(uintptr_t)em_test_symbols_marker, &self) && self.dli_fbase);
  int local = em_test_symbols_marker(1);
  const uint64_t addrs[] = {(uint64_t)(uintptr_t)em_test_symbols_marker,
                            (uint64_t)(uintptr_t)&local};
  em_profile_frame_t out[2];
  em_symbols_t *s = new_symbols("/proc");
  assert_int_equal(em_symbols_user(s, getpid(), NULL, 0, addrs, 2, out), 2);
  assert_null(em_symbols_dw());
  assert_non_null(em_symbols_dw_error());
  assert_non_null(strstr(em_symbols_dw_error(), "/nonexistent/libdw.so.1"));
  assert_int_equal(em_symbols_dw_library(EM_SYMBOLS_LIBDW), -EALREADY);
  assert_null(em_symbols_session(s, getpid(), NULL, 0));
  char want[300];
  snprintf(want, sizeof(want), "%s+0x%" PRIx64, base(self.dli_fname),
           addrs[0] - (uint64_t)(uintptr_t)self.dli_fbase);
  assert_string_equal(out[0].name, want);
  assert_string_equal(out[0].module, base(self.dli_fname));
  assert_int_equal(out[0].kind, EM_FRAME_NATIVE);
  assert_outside(&out[1], addrs[1]); /* the stack: no file */
  em_symbols_free(s);
}

int main(int argc, char **argv) {
  const struct CMUnitTest unit[] = {
      cmocka_unit_test(snapshot_bounds_each_module),
      cmocka_unit_test(snapshot_file_names_become_frame_text),
  };
  /* The live kernel: this process in the real /proc. Run with --live, labelled integration
   * (CMakeLists.txt). */
  const struct CMUnitTest live[] = {
      cmocka_unit_test(live_own_process_names_each_module),
      cmocka_unit_test(live_session_sees_a_library_loaded_since),
  };
  /* The same snapshot cases with libdw's loading refused, and the live maps without it. */
  const struct CMUnitTest no_libdw[] = {
      cmocka_unit_test(snapshot_bounds_each_module),
      cmocka_unit_test(snapshot_file_names_become_frame_text),
      cmocka_unit_test(without_libdw_live_addresses_are_module_and_offset),
  };
  if (argc > 1 && strcmp(argv[1], "--no-libdw") == 0) {
    assert_int_equal(em_symbols_dw_library("/nonexistent/libdw.so.1"), 0);
    return cmocka_run_group_tests_name("no-libdw", no_libdw, NULL, NULL);
  }
  return EM_RUN_UNIT_OR_LIVE(argc, argv, unit, live);
}
