/*
 * bench_alloc_trace.c - an LD_PRELOAD library for bench_idle_rss.py --allocs: it writes one
 * line per malloc or calloc of BENCH_ALLOC_MIN bytes or more (default 16384) to the file
 * BENCH_ALLOC_LOG names: "ADDRESS SIZE OBJECT OFFSET", where OBJECT and OFFSET name the caller
 * (the first return address outside the C library, so an opendir's buffer is charged to the
 * code that called opendir). The script then reads /proc/PID/pagemap over each block to count
 * its resident pages and asks addr2line for the caller's file and line. Frees are not traced:
 * a block freed since still shows what it once made resident in the heap.
 *
 * Not part of the agent: built by the script with cc -shared. Owns the log's file descriptor.
 * Thread-safe enough for the agent (one loop thread, one worker): each line is one write(2).
 */
#define _GNU_SOURCE

#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* glibc's own entry points: no dlsym (which may allocate) before the first allocation. */
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t a, size_t b);

static int log_fd = -1;
static size_t min_bytes = 16384;
static __thread int inside; /* A trace in progress: backtrace() may allocate. */

static void open_log(void) {
  const char *path = getenv("BENCH_ALLOC_LOG");
  const char *min = getenv("BENCH_ALLOC_MIN");
  if (min) {
    min_bytes = (size_t)strtoull(min, NULL, 10);
  }
  log_fd = path ? open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -2;
}

/* The first frame outside libc, as "object offset". */
static void caller(char *obj, size_t obj_len, unsigned long *off) {
  void *frames[12];
  int n = backtrace(frames, 12);
  snprintf(obj, obj_len, "?");
  *off = 0;
  for (int i = 2; i < n; i++) {
    Dl_info d;
    if (dladdr(frames[i], &d) && d.dli_fname && d.dli_fbase && !strstr(d.dli_fname, "libc.so")) {
      snprintf(obj, obj_len, "%s", d.dli_fname);
      *off = (unsigned long)((char *)frames[i] - (char *)d.dli_fbase);
      return;
    }
  }
}

static void trace(void *p, size_t n) {
  if (!p || n < 4096 || inside) {
    return;
  }
  inside = 1;
  if (log_fd == -1) {
    open_log(); /* Before the first comparison with min_bytes, which it sets. */
  }
  if (log_fd >= 0 && n >= min_bytes) {
    char obj[256], line[400];
    unsigned long off = 0;
    caller(obj, sizeof(obj), &off);
    int len = snprintf(line, sizeof(line), "%p %zu %s 0x%lx\n", p, n, obj, off);
    if (len > 0) {
      (void)!write(log_fd, line, (size_t)len);
    }
  }
  inside = 0;
}

void *malloc(size_t n) {
  void *p = __libc_malloc(n);
  trace(p, n);
  return p;
}

void *calloc(size_t a, size_t b) {
  void *p = __libc_calloc(a, b);
  trace(p, a * b);
  return p;
}
