/*
 * bench_procfs.c - what each procfs read of a tick costs, and how smaps_rollup grows with the
 * target's resident memory (it walks the page tables, statm does not).
 *
 * For resident sizes from 16 MiB to 4 GiB (anonymous memory this process maps and touches),
 * times em_procfs_read_statm / _smaps / _meminfo / _psi through the agent's own reader on
 * this process, 7 rounds of N reads each, and prints min/median/max ns per read.
 *
 *   bench_procfs [--max-mib N] [--reads N]
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "procfs.h"
#include "bench_clock.h"

#define ROUNDS 7

typedef int (*read_fn)(em_procfs_t *p);
static int r_statm(em_procfs_t *p) {
  em_statm_t v;
  return em_procfs_read_statm(p, &v);
}
static int r_smaps(em_procfs_t *p) {
  em_smaps_t v;
  return em_procfs_read_smaps(p, &v);
}
static int r_meminfo(em_procfs_t *p) {
  em_meminfo_t v;
  return em_procfs_read_meminfo(p, &v);
}
static int r_psi(em_procfs_t *p) {
  em_psi_t v;
  return em_procfs_read_psi(p, EM_PSI_CPU, &v);
}

/* min/median/max ns per call of fn over ROUNDS rounds of n calls. */
static void time_reads(em_procfs_t *p, read_fn fn, int n, uint64_t out[3]) {
  uint64_t per[ROUNDS];
  for (int r = 0; r < ROUNDS; r++) {
    uint64_t t0 = bench_now_ns();
    for (int i = 0; i < n; i++) {
      if (fn(p) != 0) {
        fprintf(stderr, "bench_procfs: a read failed\n");
        exit(1);
      }
    }
    per[r] = (bench_now_ns() - t0) / (uint64_t)n;
  }
  qsort(per, ROUNDS, sizeof(per[0]), bench_cmp_u64);
  out[0] = per[0];
  out[1] = per[ROUNDS / 2];
  out[2] = per[ROUNDS - 1];
}

int main(int argc, char **argv) {
  size_t max_mib = 4096;
  int reads = 200;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--max-mib") == 0 && i + 1 < argc) {
      max_mib = strtoul(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--reads") == 0 && i + 1 < argc) {
      reads = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: bench_procfs [--max-mib N] [--reads N]\n");
      return strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  em_procfs_t *p = NULL;
  if (em_procfs_new(&p, "/proc", getpid()) != 0) {
    fprintf(stderr, "bench_procfs: cannot open /proc for this process\n");
    return 1;
  }
  static const struct {
    const char *name;
    read_fn fn;
  } files[] = {{"statm", r_statm},
               {"smaps_rollup", r_smaps},
               {"meminfo", r_meminfo},
               {"pressure/cpu", r_psi}};
  printf("%10s  %-13s %10s %10s %10s\n", "RSS MiB", "file", "min ns", "median ns", "max ns");
  size_t mapped = 0;
  for (size_t mib = 16; mib <= max_mib; mib *= 4) {
    size_t grow = (mib - mapped) << 20;
    char *mem = mmap(NULL, grow, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
      fprintf(stderr, "bench_procfs: cannot map %zu MiB\n", mib);
      break;
    }
    for (size_t off = 0; off < grow; off += 4096) {
      mem[off] = 1; /* Resident, one page at a time (no huge pages by default). */
    }
    mapped = mib;
    em_statm_t st;
    em_procfs_read_statm(p, &st);
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
      int n = f == 1 && mib >= 1024 ? (reads / 10 > 0 ? reads / 10 : 1) : reads;
      uint64_t t[3];
      time_reads(p, files[f].fn, n, t);
      printf("%10llu  %-13s %10llu %10llu %10llu\n", (unsigned long long)(st.rss_bytes >> 20),
             files[f].name, (unsigned long long)t[0], (unsigned long long)t[1],
             (unsigned long long)t[2]);
    }
  }
  em_procfs_free(p);
  return 0;
}
