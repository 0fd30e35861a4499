/*
 * symbols.c - see symbols.h. User addresses: dwfl_addrmodule then dwfl_module_addrname (the
 * ELF symbol table, .symtab or .dynsym). Kernel addresses: two passes over /proc/kallsyms with
 * the addresses ascending; pass one keeps, for each address, the highest symbol at or below it
 * (a symbol at `a` is a candidate for every address from the first one >= a on, so a
 * candidate per lower bound and a running maximum suffice: O(symbols log addresses), memory
 * O(addresses)); pass two takes those symbols' names.
 */
#define _GNU_SOURCE

#include "symbols.h"

#include <elfutils/libdwfl.h>
#include <errno.h>
#include <inttypes.h>
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

/* Separate debug information comes from this machine only: the build-id tree under
 * /usr/lib/debug, where Debian's -dbgsym packages put it. Not dwfl_standard_find_debuginfo: past
 * the local paths it asks debuginfod servers, which loads libcurl into the agent (with a
 * one-time OpenSSL allocation it never frees) and may reach the network in the middle of a
 * breach. */
static const Dwfl_Callbacks proc_callbacks = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = dwfl_build_id_find_debuginfo,
    .debuginfo_path = &debuginfo_path,
};

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
    dwfl_end(s->dwfl);
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
  const char *name = dwfl_module_addrinfo(m, addr, &off, &sym, NULL, NULL, NULL);
  if (!name) {
    return NULL;
  }
  int type = GELF_ST_TYPE(sym.st_info);
  return type == STT_FUNC || type == STT_GNU_IFUNC || type == STT_NOTYPE ? name : NULL;
}

/* The session for pid: kept from an earlier window when the pid is the same (its modules and
 * their symbol tables stay loaded), its module list refreshed from the live maps or, when
 * the process is gone, the snapshot. Returns NULL when neither can be reported. */
static Dwfl *session(em_symbols_t *s, pid_t pid, const char *maps, size_t maps_len) {
  if (s->dwfl && s->dwfl_pid != pid) {
    dwfl_end(s->dwfl);
    s->dwfl = NULL;
  }
  if (!s->dwfl) {
    s->dwfl = dwfl_begin(&proc_callbacks);
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
  dwfl_report_begin(s->dwfl);
  int rc = strcmp(s->proc_root, "/proc") == 0 ? dwfl_linux_proc_report(s->dwfl, pid) : -1;
  if (rc != 0 && maps && maps_len) {
    FILE *f = fmemopen((void *)maps, maps_len, "r");
    if (f) {
      rc = dwfl_linux_proc_maps_report(s->dwfl, f);
      fclose(f);
    }
  }
  dwfl_report_end(s->dwfl, NULL, NULL);
  return rc == 0 ? s->dwfl : NULL;
}

Dwfl *em_symbols_session(em_symbols_t *s, pid_t pid, const char *maps, size_t maps_len) {
  return s ? session(s, pid, maps, maps_len) : NULL;
}

size_t em_symbols_user(em_symbols_t *s, pid_t pid, const char *maps, size_t maps_len,
                       const uint64_t *addrs, size_t n, em_profile_frame_t *out) {
  Dwfl *d = session(s, pid, maps, maps_len);
  size_t unresolved = 0;
  for (size_t i = 0; i < n; i++) {
    Dwfl_Module *m = d ? dwfl_addrmodule(d, addrs[i]) : NULL;
    Dwarf_Addr start = 0, end = 0;
    const char *path = m ? dwfl_module_info(m, NULL, &start, &end, NULL, NULL, NULL, NULL) : NULL;
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
