/*
 * fuzz_symbols.c - libFuzzer harness for the native symbol resolver of the stack profiler
 * (firmware/agent/profile/symbols.c). What it reads is chosen by others: a profiled process
 * picks the file names in its maps, the ELF files it maps (a crafted one included) and so the
 * symbol names libdwfl finds, and the addresses its stacks hold; the kallsyms text is read
 * line by line by our own parser.
 *
 * Input: byte 0 the flags (bit 0: no kallsyms file; bit 1: no ELF file; bit 2: after the first
 * resolve, resolve with maps B and then with maps A again in the same em_symbols_t; bit 3: maps
 * B as another pid's, so the Dwfl session is replaced twice), then up to five sections split by
 * "@@@@": a kallsyms text, maps text A, maps text B, the addresses (8 bytes each, little-endian,
 * at most MAX_ADDRS) and, the rest of the input, an ELF blob. The kallsyms text goes to
 * <root>/kallsyms and the blob to <root>/lib.so, <root> being a temporary directory of this
 * process and the resolver's proc_root. In the maps texts "$E" becomes the blob's path and "$D"
 * "<root>/"; every other '/' becomes '_', so libdwfl opens no file outside <root> (a name it
 * cannot open still names its module).
 *
 * Each input gets a fresh em_symbols_t, so libdwfl's session of an earlier input (kept per
 * pid) hides nothing. Every address, sorted, is resolved as a user address with maps A and as
 * a kernel address (both resolvers get them all: the agent gives each its side of 2^63).
 *
 * Checks: every frame's name, and its module when it has one, is frame-text as the profile's
 * CDDL says (1..255 bytes of UTF-8 without control characters), so em_profile_encode accepts
 * the frames; user frames are native with a module or unknown without one, kernel frames kernel
 * with a module; equal addresses get equal frames; the unresolved count is at most n and at
 * least the frames outside every module; with bit 2, maps A after maps B gives exactly the
 * first resolve's frames (a refreshed or replaced session keeps nothing of B). Seeds:
 * tests/fuzz/corpus/symbols/.
 */
#define _GNU_SOURCE /* memmem() */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "symbols.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PID       4242
#define MAX_ADDRS 512u /* Names and modules of twice this many fit the arena. */
#define MAPS_CAP  (256u * 1024u)

static const char sep[] = "@@@@";

static char root[64];
static char elf_path[96];
static char kallsyms_path[96];
static uint64_t addrs[MAX_ADDRS];
static em_profile_frame_t user[MAX_ADDRS], again[MAX_ADDRS], kernel[MAX_ADDRS];
static char maps_a[MAPS_CAP], maps_b[MAPS_CAP];
static uint8_t encoded[EM_PROFILE_MAX_BYTES];
/* The first user resolve's strings, kept across em_symbols_begin. */
static char names[MAX_ADDRS][EM_PROFILE_MAX_FRAME_BYTES + 1];
static char modules[MAX_ADDRS][EM_PROFILE_MAX_FRAME_BYTES + 1];

static void check(int ok) {
  if (!ok) {
    abort();
  }
}

/*
 * Aborts unless em_profile_encode accepts f[0..n) as a profile's frame table, that is every name,
 * and every module there is, frame-text: NUL-terminated within 1..255 bytes of UTF-8 without
 * control characters. In tables of at most 256 frames, whose encoding stays far below
 * EM_PROFILE_MAX_BYTES.
 */
static void check_encodes(const em_profile_frame_t *f, size_t n) {
  for (size_t i = 0; i < n; i += 256) {
    em_profile_t p = {.head = {.time_ns = 1, .session = 1},
                      .trigger = {.cause = EM_PROFILE_COMMAND,
                                  .level = EM_LEVEL_NOMINAL,
                                  .prev_level = EM_LEVEL_NONE},
                      .hz = 99,
                      .clock = "cpu-clock",
                      .frames = f + i,
                      .n_frames = n - i < 256 ? n - i : 256};
    size_t len = 0;
    check(em_profile_encode(&p, encoded, sizeof encoded, &len) == 0);
  }
}

static bool same_text(const char *a, const char *b) {
  return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static bool same_frame(const em_profile_frame_t *a, const em_profile_frame_t *b) {
  return a->kind == b->kind && same_text(a->name, b->name) && same_text(a->module, b->module);
}

/* Checks one resolve's frames and returns how many have no module. */
static size_t check_frames(const em_profile_frame_t *f, size_t n, size_t unresolved, bool kern) {
  size_t outside = 0;
  check_encodes(f, n);
  for (size_t i = 0; i < n; i++) {
    if (kern) {
      check(f[i].kind == EM_FRAME_KERNEL && f[i].module != NULL);
    } else {
      check(f[i].module ? f[i].kind == EM_FRAME_NATIVE : f[i].kind == EM_FRAME_UNKNOWN);
    }
    outside += f[i].module ? 0 : 1;
    if (i > 0 && addrs[i] == addrs[i - 1]) {
      check(same_frame(&f[i], &f[i - 1]));
    }
  }
  check(outside <= unresolved && unresolved <= n);
  return outside;
}

/* Writes len bytes to path, or removes the file when data is NULL. */
static void put(const char *path, const uint8_t *data, size_t len) {
  if (!data) {
    check(unlink(path) == 0 || access(path, F_OK) != 0);
    return;
  }
  FILE *f = fopen(path, "wb");
  check(f != NULL);
  check(len == 0 || fwrite(data, 1, len, f) == len);
  check(fclose(f) == 0);
}

/* The maps text of in[0..len) into out (MAPS_CAP bytes, cut there): "$E" and "$D" expanded,
 * every other '/' made '_'. Returns its length. */
static size_t expand_maps(const uint8_t *in, size_t len, char *out) {
  size_t n = 0;
  for (size_t i = 0; i < len; i++) {
    const char *with = NULL;
    if (in[i] == '$' && i + 1 < len && (in[i + 1] == 'E' || in[i + 1] == 'D')) {
      with = in[i + 1] == 'E' ? elf_path : root;
      i++;
    }
    size_t w = with ? strlen(with) + (in[i] == 'D') : 1;
    if (MAPS_CAP - n < w) {
      break;
    }
    if (with) {
      memcpy(out + n, with, strlen(with));
      if (in[i] == 'D') {
        out[n + w - 1] = '/';
      }
    } else {
      out[n] = in[i] == '/' ? '_' : (char)in[i];
    }
    n += w;
  }
  return n;
}

/* At exit: the two files and the directory. */
static void cleanup(void) {
  (void)unlink(kallsyms_path);
  (void)unlink(elf_path);
  (void)rmdir(root);
}

static void setup(void) {
  snprintf(root, sizeof root, "/tmp/em-fuzz-symbols-XXXXXX");
  check(mkdtemp(root) != NULL);
  snprintf(elf_path, sizeof elf_path, "%s/lib.so", root);
  snprintf(kallsyms_path, sizeof kallsyms_path, "%s/kallsyms", root);
  em_symbols_t *s = NULL;
  char long_root[256];
  memset(long_root, 'a', sizeof long_root - 1);
  long_root[sizeof long_root - 1] = '\0';
  check(em_symbols_new(&s, long_root) == -EINVAL && s == NULL);
  atexit(cleanup);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (root[0] == '\0') {
    setup();
  }
  if (size < 1) {
    return 0;
  }
  uint8_t flags = data[0];
  const uint8_t *part[5] = {0};
  size_t part_len[5] = {0};
  const uint8_t *p = data + 1, *end = data + size;
  for (int k = 0; k < 5; k++) {
    const uint8_t *cut = k < 4 ? memmem(p, (size_t)(end - p), sep, 4) : NULL;
    part[k] = p;
    part_len[k] = (size_t)((cut ? cut : end) - p);
    if (!cut) {
      break;
    }
    p = cut + 4;
  }
  put(kallsyms_path, flags & 1u ? NULL : part[0], part_len[0]);
  put(elf_path, flags & 2u ? NULL : part[4] ? part[4] : (const uint8_t *)"", part_len[4]);
  size_t len_a = expand_maps(part[1], part_len[1], maps_a);
  size_t len_b = part[2] ? expand_maps(part[2], part_len[2], maps_b) : 0;
  size_t n = part[3] ? part_len[3] / 8 : 0;
  n = n < MAX_ADDRS ? n : MAX_ADDRS;
  for (size_t i = 0; i < n; i++) {
    uint64_t a = 0;
    for (int b = 7; b >= 0; b--) {
      a = (a << 8) | part[3][i * 8 + (size_t)b];
    }
    addrs[i] = a;
  }
  qsort(addrs, n, sizeof *addrs, cmp_u64);

  em_symbols_t *s = NULL;
  check(em_symbols_new(&s, root) == 0);
  em_symbols_begin(s);
  size_t unresolved = em_symbols_user(s, PID, maps_a, len_a, addrs, n, user);
  check_frames(user, n, unresolved, false);
  size_t k_unresolved = em_symbols_kernel(s, addrs, n, kernel);
  check_frames(kernel, n, k_unresolved, true);
  if (flags & 4u) {
    for (size_t i = 0; i < n; i++) {
      snprintf(names[i], sizeof names[i], "%s", user[i].name);
      snprintf(modules[i], sizeof modules[i], "%s", user[i].module ? user[i].module : "");
    }
    em_symbols_begin(s);
    pid_t pid_b = flags & 8u ? PID + 1 : PID;
    size_t b = em_symbols_user(s, pid_b, len_b ? maps_b : NULL, len_b, addrs, n, again);
    check_frames(again, n, b, false);
    em_symbols_begin(s);
    check(em_symbols_user(s, PID, maps_a, len_a, addrs, n, again) == unresolved);
    check_frames(again, n, unresolved, false);
    for (size_t i = 0; i < n; i++) {
      check(again[i].kind == user[i].kind && strcmp(again[i].name, names[i]) == 0 &&
            strcmp(again[i].module ? again[i].module : "", modules[i]) == 0);
    }
  }
  em_symbols_free(s);
  return 0;
}
