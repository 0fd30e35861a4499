/*
 * symbols.c - see symbols.h. libdw: dlopen'd at the first resolve under a spin flag (no
 * pthread_once: before glibc 2.34 it lives in libpthread), every function of
 * EM_SYMBOLS_DW_FUNCTIONS looked up or none kept. User addresses: dwfl_addrmodule then
 * dwfl_module_addrinfo (the ELF symbol table, .symtab or .dynsym); without libdw, the maps
 * (live, else the snapshot) parsed into ascending ranges, each charged to its file's lowest
 * mapping as libdwfl's module start. Kernel addresses: two passes over /proc/kallsyms with
 * the addresses ascending; pass one keeps, for each address, the highest symbol at or below it
 * (a symbol at `a` is a candidate for every address from the first one >= a on, so a
 * candidate per lower bound and a running maximum suffice: O(symbols log addresses), memory
 * O(addresses)); pass two takes those symbols' names.
 */
#define _GNU_SOURCE

#include "symbols.h"

#include <dlfcn.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edgemon/proto.h"

struct em_symbols {
  char proc_root[256];
  Dwfl *dwfl;
  pid_t dwfl_pid;
  char *arena;
  size_t used;
};

static char *debuginfo_path;

/* The library, process-wide: dw_state 0 not tried, 1 loaded (dw valid), 2 refused (dw_why). */
static em_symbols_dw_t dw;
static atomic_int dw_state;
static atomic_flag dw_busy = ATOMIC_FLAG_INIT;
static char dw_file[256] = EM_SYMBOLS_LIBDW;
static char dw_why[300];

/* Separate debug information comes from this machine only: the build-id tree under
 * /usr/lib/debug, where Debian's -dbgsym packages put it. Not dwfl_standard_find_debuginfo: past
 * the local paths it asks debuginfod servers, which loads libcurl into the agent (with a
 * one-time OpenSSL allocation it never frees) and may reach the network in the middle of a
 * breach. Filled once libdw is loaded. */
static Dwfl_Callbacks proc_callbacks;

/* Opens dw_file and looks every function up: 1 and dw filled, or 2 and dw_why said. The handle
 * is kept (libdwfl's sessions point into it) when it loads, closed when it lacks a function. */
static int dw_load(void) {
  void *h = dlopen(dw_file, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(dw_why, sizeof(dw_why), "%s", e ? e : dw_file);
    return 2;
  }
  em_symbols_dw_t t;
  const char *missing = NULL;
  /* A data pointer to a function pointer by copy: ISO C has no cast between the two. */
#define EM_DW_LOOKUP(f)                                                                            \
  if (!missing) {                                                                                  \
    void *p = dlsym(h, #f);                                                                        \
    memcpy(&t.f, &p, sizeof(p));                                                                   \
    missing = p ? NULL : #f;                                                                       \
  }
  EM_SYMBOLS_DW_FUNCTIONS(EM_DW_LOOKUP)
#undef EM_DW_LOOKUP
  if (missing) {
    snprintf(dw_why, sizeof(dw_why), "%s: no function %s", dw_file, missing);
    dlclose(h);
    return 2;
  }
  dw = t;
  proc_callbacks = (Dwfl_Callbacks){
      .find_elf = dw.dwfl_linux_proc_find_elf,
      .find_debuginfo = dw.dwfl_build_id_find_debuginfo,
      .debuginfo_path = &debuginfo_path,
  };
  return 1;
}

const em_symbols_dw_t *em_symbols_dw(void) {
  int st = atomic_load_explicit(&dw_state, memory_order_acquire);
  if (st == 0) {
    while (atomic_flag_test_and_set_explicit(&dw_busy, memory_order_acquire)) {
    }
    st = atomic_load_explicit(&dw_state, memory_order_relaxed);
    if (st == 0) {
      st = dw_load();
      atomic_store_explicit(&dw_state, st, memory_order_release);
    }
    atomic_flag_clear_explicit(&dw_busy, memory_order_release);
  }
  return st == 1 ? &dw : NULL;
}

const char *em_symbols_dw_error(void) {
  return atomic_load_explicit(&dw_state, memory_order_acquire) == 2 ? dw_why : NULL;
}

int em_symbols_dw_library(const char *file) {
  if (!file || strlen(file) >= sizeof(dw_file)) {
    return -EINVAL;
  }
  int rc = -EALREADY;
  while (atomic_flag_test_and_set_explicit(&dw_busy, memory_order_acquire)) {
  }
  if (atomic_load_explicit(&dw_state, memory_order_relaxed) == 0) {
    snprintf(dw_file, sizeof(dw_file), "%s", file);
    rc = 0;
  }
  atomic_flag_clear_explicit(&dw_busy, memory_order_release);
  return rc;
}

int em_symbols_new(em_symbols_t **out, const char *proc_root) {
  if (!out || !proc_root || strlen(proc_root) >= 200) {
    return -EINVAL;
  }
  em_symbols_t *s = calloc(1, sizeof(*s));
  if (!s) {
    return -ENOMEM;
  }
  s->arena = malloc(EM_SYMBOLS_ARENA_BYTES);
  if (!s->arena) {
    free(s);
    return -ENOMEM;
  }
  snprintf(s->proc_root, sizeof(s->proc_root), "%s", proc_root);
  *out = s;
  return 0;
}

void em_symbols_free(em_symbols_t *s) {
  if (!s) {
    return;
  }
  if (s->dwfl) {
    dw.dwfl_end(s->dwfl); /* A session exists only once libdw is loaded. */
  }
  free(s->arena);
  free(s);
}

void em_symbols_begin(em_symbols_t *s) {
  s->used = 0;
}

/* A copy of text in the arena as frame-text: each byte that does not start a character
 * em_text_char() allows becomes '?' (symbol names come from whatever ELF file the target maps,
 * module names from its file names), cut at EM_PROFILE_MAX_FRAME_BYTES on a character
 * boundary. NULL when the arena is full or the text empty. */
static const char *keep(em_symbols_t *s, const char *text) {
  char buf[EM_PROFILE_MAX_FRAME_BYTES];
  size_t left = strlen(text), n = 0;
  const char *u = text;
  while (left > 0) {
    size_t len = em_text_char(u, left);
    if (n + (len ? len : 1) > sizeof(buf)) {
      break;
    }
    if (len) {
      memcpy(buf + n, u, len);
    } else {
      buf[n] = '?';
      len = 1;
    }
    n += len;
    u += len;
    left -= len;
  }
  if (n == 0 || EM_SYMBOLS_ARENA_BYTES - s->used < n + 1) {
    return NULL;
  }
  char *p = s->arena + s->used;
  memcpy(p, buf, n);
  p[n] = '\0';
  s->used += n + 1;
  return p;
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash && slash[1] ? slash + 1 : path;
}

static void hex_frame(em_symbols_t *s, uint64_t addr, const char *module, em_profile_frame_kind_t k,
                      em_profile_frame_t *out) {
  char text[32];
  snprintf(text, sizeof(text), "0x%" PRIx64, addr);
  const char *name = keep(s, text);
  *out = (em_profile_frame_t){.name = name ? name : "[unknown]", .module = module, .kind = k};
}

/* The name of the function symbol covering addr in m, or NULL: a data symbol (an object the
 * address falls in, as a frame-pointer walk through code built without frame pointers yields)
 * names no frame. */
static const char *code_symbol(Dwfl_Module *m, Dwarf_Addr addr) {
  GElf_Sym sym;
  GElf_Off off = 0;
  const char *name = dw.dwfl_module_addrinfo(m, addr, &off, &sym, NULL, NULL, NULL);
  if (!name) {
    return NULL;
  }
  int type = GELF_ST_TYPE(sym.st_info);
  return type == STT_FUNC || type == STT_GNU_IFUNC || type == STT_NOTYPE ? name : NULL;
}

/* The session for pid: kept from an earlier window when the pid is the same (its modules and
 * their symbol tables stay loaded), its module list refreshed from the live maps or, when
 * the process is gone, the snapshot. Returns NULL when neither can be reported, or libdw is not
 * there. */
static Dwfl *session(em_symbols_t *s, pid_t pid, const char *maps, size_t maps_len) {
  if (!em_symbols_dw()) {
    return NULL;
  }
  if (s->dwfl && s->dwfl_pid != pid) {
    dw.dwfl_end(s->dwfl);
    s->dwfl = NULL;
  }
  if (!s->dwfl) {
    s->dwfl = dw.dwfl_begin(&proc_callbacks);
    s->dwfl_pid = pid;
    if (!s->dwfl) {
      return NULL;
    }
  }
  /* dwfl_report_begin, not _begin_add: a module reported again with the same name and bounds
   * keeps its ELF and symbol table, one no longer mapped is dropped, and the address lookup
   * table is rebuilt. _begin_add kept every module of every earlier window (a library
   * unmapped since, or its range reused by another one) and an address table built on top of
   * the old one. */
  dw.dwfl_report_begin(s->dwfl);
  int rc = strcmp(s->proc_root, "/proc") == 0 ? dw.dwfl_linux_proc_report(s->dwfl, pid) : -1;
  if (rc != 0 && maps && maps_len) {
    FILE *f = fmemopen((void *)maps, maps_len, "r");
    if (f) {
      rc = dw.dwfl_linux_proc_maps_report(s->dwfl, f);
      fclose(f);
    }
  }
  dw.dwfl_report_end(s->dwfl, NULL, NULL);
  return rc == 0 ? s->dwfl : NULL;
}

Dwfl *em_symbols_session(em_symbols_t *s, pid_t pid, const char *maps, size_t maps_len) {
  return s ? session(s, pid, maps, maps_len) : NULL;
}

/* --- without libdw: the maps alone ------------------------------------------------------ */

#define LIVE_MAPS_MAX_BYTES (4u << 20) /* A live maps text longer than this: the snapshot. */

/* A file-backed mapping of a maps text: [start, end), its file's lowest mapping (base, as
 * libdwfl's module start) and its path (name_len bytes in the text). */
typedef struct {
  uint64_t start, end, base;
  const char *name;
  size_t name_len;
} range_t;

/* The live /proc/PID/maps under proc_root, malloc'd into *len bytes; NULL when it cannot be read
 * whole. */
static char *read_live_maps(const em_symbols_t *s, pid_t pid, size_t *len) {
  char path[300];
  snprintf(path, sizeof(path), "%s/%d/maps", s->proc_root, (int)pid);
  FILE *f = fopen(path, "re");
  size_t cap = 64u * 1024u, n = 0;
  char *buf = f ? malloc(cap) : NULL;
  while (buf) {
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap || cap >= LIVE_MAPS_MAX_BYTES) {
      break;
    }
    char *more = realloc(buf, cap * 2);
    if (!more) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = more;
    cap *= 2;
  }
  if (buf && (n == 0 || n == cap || ferror(f))) {
    free(buf);
    buf = NULL;
  }
  if (f) {
    fclose(f);
  }
  *len = n;
  return buf;
}

/* The file-backed mappings of text[0..len) (maps lines, ascending) into a malloc'd array, *n of
 * them; NULL when there is none or no memory. */
static range_t *parse_ranges(const char *text, size_t len, size_t *n) {
  size_t lines = 0;
  for (size_t i = 0; i < len; i++) {
    lines += text[i] == '\n';
  }
  range_t *r = calloc(lines + 1, sizeof(*r));
  *n = 0;
  for (const char *p = text, *end = text + len; r && p < end;) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *eol = nl ? nl : end;
    char line[600];
    size_t ll = (size_t)(eol - p) < sizeof(line) - 1 ? (size_t)(eol - p) : sizeof(line) - 1;
    memcpy(line, p, ll);
    line[ll] = '\0';
    unsigned long long a = 0, b = 0;
    int at = 0;
    if (sscanf(line, "%llx-%llx %*s %*s %*s %*s %n", &a, &b, &at) == 2 && at > 0 &&
        line[at] == '/' && a < b) {
      range_t *x = &r[(*n)++];
      *x = (range_t){.start = a, .end = b, .base = a, .name = p + at, .name_len = ll - (size_t)at};
      for (size_t k = *n - 1;
           k-- > 0;) { /* The nearest earlier mapping of the file has its base. */
        if (r[k].name_len == x->name_len && memcmp(r[k].name, x->name, x->name_len) == 0) {
          x->base = r[k].base;
          break;
        }
      }
    }
    p = eol + 1;
  }
  if (r && *n == 0) {
    free(r);
    r = NULL;
  }
  return r;
}

/* The range covering addr, or NULL (ranges ascend and do not overlap). */
static const range_t *find_range(const range_t *r, size_t n, uint64_t addr) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (r[mid].end <= addr) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo < n && r[lo].start <= addr ? &r[lo] : NULL;
}

/* em_symbols_user without libdw: each address in a file's mapping becomes "module+0xOFFSET"
 * (from the file's lowest mapping), any other its hex address. Every one is unresolved. */
static size_t user_from_maps(em_symbols_t *s, pid_t pid, const char *maps, size_t maps_len,
                             const uint64_t *addrs, size_t n, em_profile_frame_t *out) {
  size_t live_len = 0;
  char *live = strcmp(s->proc_root, "/proc") == 0 ? read_live_maps(s, pid, &live_len) : NULL;
  size_t n_ranges = 0;
  range_t *r = live ? parse_ranges(live, live_len, &n_ranges)
                    : (maps && maps_len ? parse_ranges(maps, maps_len, &n_ranges) : NULL);
  for (size_t i = 0; i < n; i++) {
    const range_t *x = r ? find_range(r, n_ranges, addrs[i]) : NULL;
    if (!x) {
      hex_frame(s, addrs[i], NULL, EM_FRAME_UNKNOWN, &out[i]);
      continue;
    }
    char path[600]; /* A line is cut at 599 bytes (parse_ranges). */
    snprintf(path, sizeof(path), "%.*s", (int)x->name_len, x->name);
    const char *module = keep(s, base_name(path));
    char text[EM_PROFILE_MAX_FRAME_BYTES + 1];
    snprintf(text, sizeof(text), "%.200s+0x%" PRIx64, module ? module : "?", addrs[i] - x->base);
    const char *name = keep(s, text);
    out[i] = (em_profile_frame_t){.name = name ? name : "[unknown]",
                                  .module = module,
                                  .kind = name && module ? EM_FRAME_NATIVE : EM_FRAME_UNKNOWN};
  }
  free(r);
  free(live);
  return n;
}

size_t em_symbols_user(em_symbols_t *s, pid_t pid, const char *maps, size_t maps_len,
                       const uint64_t *addrs, size_t n, em_profile_frame_t *out) {
  if (!em_symbols_dw()) {
    return user_from_maps(s, pid, maps, maps_len, addrs, n, out);
  }
  Dwfl *d = session(s, pid, maps, maps_len);
  size_t unresolved = 0;
  for (size_t i = 0; i < n; i++) {
    Dwfl_Module *m = d ? dw.dwfl_addrmodule(d, addrs[i]) : NULL;
    Dwarf_Addr start = 0, end = 0;
    const char *path =
        m ? dw.dwfl_module_info(m, NULL, &start, &end, NULL, NULL, NULL, NULL) : NULL;
    if (!m || addrs[i] < start || addrs[i] >= end) {
      hex_frame(s, addrs[i], NULL, EM_FRAME_UNKNOWN, &out[i]);
      unresolved++;
      continue;
    }
    const char *module = keep(s, base_name(path ? path : "?"));
    const char *sym = code_symbol(m, addrs[i]);
    char plain[EM_PROFILE_MAX_FRAME_BYTES + 1];
    const char *at = sym ? strchr(sym, '@') : NULL;
    if (at && at > sym) { /* "__libc_start_main@@GLIBC_2.34": the symbol version goes. */
      size_t len = (size_t)(at - sym);
      len = len > EM_PROFILE_MAX_FRAME_BYTES ? EM_PROFILE_MAX_FRAME_BYTES : len;
      snprintf(plain, sizeof(plain), "%.*s", (int)len, sym);
      sym = plain;
    }
    const char *name = sym ? keep(s, sym) : NULL;
    if (!name) {
      char text[EM_PROFILE_MAX_FRAME_BYTES + 1];
      snprintf(text, sizeof(text), "%.200s+0x%" PRIx64, module ? module : "?",
               (uint64_t)(addrs[i] - start));
      name = keep(s, text);
      unresolved++;
    }
    out[i] = (em_profile_frame_t){.name = name ? name : "[unknown]",
                                  .module = module,
                                  .kind = name && module ? EM_FRAME_NATIVE : EM_FRAME_UNKNOWN};
  }
  return unresolved;
}

/* The first index of addrs[0..n) whose address is >= a. */
static size_t lower_bound(const uint64_t *addrs, size_t n, uint64_t a) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (addrs[mid] < a) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

/* One kallsyms line: its address and name (in line), module or NULL. false: not a symbol. */
static bool kallsyms_line(char *line, uint64_t *addr, char **name, char **module) {
  char *type = NULL;
  char *end = NULL;
  unsigned long long a = strtoull(line, &end, 16);
  if (end == line || *end != ' ') {
    return false;
  }
  type = end + 1;
  if (!*type || type[1] != ' ') {
    return false;
  }
  *name = type + 2;
  size_t len = strcspn(*name, "\t\n");
  *module = NULL;
  if ((*name)[len] == '\t') {
    *module = *name + len + 1;
    (*module)[strcspn(*module, "\n")] = '\0';
  }
  (*name)[len] = '\0';
  *addr = a;
  return a != 0 && **name;
}

size_t em_symbols_kernel(em_symbols_t *s, const uint64_t *addrs, size_t n,
                         em_profile_frame_t *out) {
  const char *kmod = "[kernel.kallsyms]";
  uint64_t *best = n ? calloc(n, sizeof(*best)) : NULL;
  char path[300];
  snprintf(path, sizeof(path), "%s/kallsyms", s->proc_root);
  FILE *f = best ? fopen(path, "re") : NULL;
  char line[512];
  uint64_t a = 0;
  char *name = NULL, *module = NULL;
  if (f) {
    while (fgets(line, sizeof(line), f)) {
      if (kallsyms_line(line, &a, &name, &module)) {
        size_t i = lower_bound(addrs, n, a);
        if (i < n && a > best[i]) {
          best[i] = a;
        }
      }
    }
    for (size_t i = 1; i < n; i++) {
      best[i] = best[i] > best[i - 1] ? best[i] : best[i - 1];
    }
    for (size_t i = 0; i < n; i++) {
      out[i] = (em_profile_frame_t){.name = NULL, .module = kmod, .kind = EM_FRAME_KERNEL};
    }
    rewind(f);
    while (fgets(line, sizeof(line), f)) {
      if (!kallsyms_line(line, &a, &name, &module)) {
        continue;
      }
      /* Every address whose best symbol is this one: a run starting at lower_bound(a). */
      for (size_t i = lower_bound(addrs, n, a); i < n && best[i] == a; i++) {
        if (!out[i].name) {
          out[i].name = keep(s, name);
          if (module) {
            char m[64];
            snprintf(m, sizeof(m), "%.*s", (int)strcspn(module, "]") + 1, module);
            const char *kept = keep(s, m);
            out[i].module = kept ? kept : kmod;
          }
        }
      }
    }
    fclose(f);
  }
  size_t unresolved = 0;
  for (size_t i = 0; i < n; i++) {
    if (!f || !out[i].name) {
      hex_frame(s, addrs[i], kmod, EM_FRAME_KERNEL, &out[i]);
      unresolved++;
    }
  }
  free(best);
  return unresolved;
}
