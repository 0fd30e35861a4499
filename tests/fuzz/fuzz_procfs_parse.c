/*
 * fuzz_procfs_parse.c - libFuzzer harness for the five procfs parsers of
 * firmware/agent/collect/procfs.c (statm, smaps_rollup, meminfo, PSI, <pid>/io).
 *
 * Any bytes: each parser returns 0 or -EINVAL without reading past `size` (libFuzzer's input
 * is a heap buffer of exactly that size, so AddressSanitizer sees an over-read); a refused text
 * leaves its record all zero; an accepted one ends with a newline, sets only known `have` bits
 * and at least one, gives 0 for every absent field, and its figures are whole pages (statm) or
 * whole KiB (smaps_rollup, meminfo) or finite non-negative percentages (PSI); <pid>/io's
 * counts are 0 unless their bit is set. statm parsed with
 * 4 KiB and 64 KiB pages agrees up to the factor 16. The scheduling parsers of
 * collect/schedinfo.c (stat, schedstat, status, cgroup, cpu.stat, a PSI total) take the same
 * bytes: 0 or -EINVAL, a refused record zero (stat: processor -1), an accepted text ending
 * with its newline, a stat comm NUL-terminated, cgroup paths absolute and NUL-terminated, a
 * throttled_usec in whole microseconds. Seeds: tests/fixtures/procfs and tests/fixtures/sched
 * (recursive).
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "procfs.h"
#include "schedinfo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts unless the `bytes` bytes at p are all zero. */
static void check_zero(const void *p, size_t bytes) {
  const unsigned char *b = p;
  for (size_t i = 0; i < bytes; i++) {
    if (b[i] != 0) {
      abort();
    }
  }
}

static void check(int ok) {
  if (!ok) {
    abort();
  }
}

/*
 * A parser's answer `rc` for text[0..size) into the record at rec (`bytes` bytes): 0 or
 * -EINVAL; refused, the record is all zero; accepted, the text ends with a newline. True when
 * accepted.
 */
static bool accepted(int rc, const void *rec, size_t bytes, const char *text, size_t size) {
  check(rc == 0 || rc == -EINVAL);
  if (rc != 0) {
    check_zero(rec, bytes);
    return false;
  }
  check(size > 0 && text[size - 1] == '\n');
  return true;
}

static void fuzz_statm(const char *text, size_t size) {
  em_statm_t small;
  em_statm_t large;
  memset(&small, 0xa5, sizeof small);
  memset(&large, 0xa5, sizeof large);
  int rc = em_procfs_parse_statm(text, size, 4096, &small);
  int rc_large = em_procfs_parse_statm(text, size, 65536, &large);
  check(rc == 0 || rc == -EINVAL);
  check(rc_large == 0 || rc_large == -EINVAL);
  if (rc != 0) {
    check_zero(&small, sizeof small);
    check(rc_large == -EINVAL); /* 16 times more bytes cannot fit when 4 KiB pages overflow. */
    return;
  }
  check(size > 0 && text[size - 1] == '\n');
  check(small.size_bytes % 4096 == 0 && small.rss_bytes % 4096 == 0);
  check(small.shared_bytes % 4096 == 0);
  if (rc_large == 0) {
    check(large.size_bytes == small.size_bytes * 16 && large.rss_bytes == small.rss_bytes * 16);
    check(large.shared_bytes == small.shared_bytes * 16);
  } else {
    check_zero(&large, sizeof large);
  }
}

/* A set of `have` bits that names one known field at least and nothing else. */
static void check_have(unsigned have, unsigned known) {
  check(have != 0 && (have & ~known) == 0);
}

/* A byte count in whole KiB, zero unless its `bit` is in `have`. */
static void check_kib(unsigned have, unsigned bit, uint64_t bytes) {
  check(bytes % 1024 == 0 && ((have & bit) != 0 || bytes == 0));
}

/* A finite non-negative percentage, zero unless its `bit` is in `have`. */
static void check_percent(unsigned have, unsigned bit, double pct) {
  check(isfinite(pct) && pct >= 0.0 && ((have & bit) != 0 || pct == 0.0));
}

/* The records of the parsers that say which figures they found (`have`). */
typedef union {
  em_smaps_t smaps;
  em_meminfo_t meminfo;
  em_psi_t psi;
} record_t;

/* One figure of a record: the `have` bit that covers it, where it is, and what it holds. */
typedef struct {
  unsigned bit;
  size_t offset;
  bool percent; /* A double percentage; otherwise a uint64_t byte count in whole KiB. */
} figure_t;

/* What each parser's record holds: its size, its known `have` bits, where `have` is and the
 * figures (n of them). */
static const struct {
  size_t size;
  unsigned known;
  size_t have;
  figure_t figures[3];
  size_t n;
} records[] = {
    {sizeof(em_smaps_t),
     EM_SMAPS_PSS | EM_SMAPS_ANON | EM_SMAPS_SWAP,
     offsetof(em_smaps_t, have),
     {{EM_SMAPS_PSS, offsetof(em_smaps_t, pss_bytes), false},
      {EM_SMAPS_ANON, offsetof(em_smaps_t, anon_bytes), false},
      {EM_SMAPS_SWAP, offsetof(em_smaps_t, swap_bytes), false}},
     3},
    {sizeof(em_meminfo_t),
     EM_MEMINFO_AVAILABLE | EM_MEMINFO_TOTAL,
     offsetof(em_meminfo_t, have),
     {{EM_MEMINFO_AVAILABLE, offsetof(em_meminfo_t, available_bytes), false},
      {EM_MEMINFO_TOTAL, offsetof(em_meminfo_t, total_bytes), false}},
     2},
    {sizeof(em_psi_t),
     EM_PSI_SOME | EM_PSI_FULL,
     offsetof(em_psi_t, have),
     {{EM_PSI_SOME, offsetof(em_psi_t, some_avg10), true},
      {EM_PSI_FULL, offsetof(em_psi_t, full_avg10), true}},
     2},
};

/* smaps_rollup (k = 0), meminfo (1) and PSI (2): refused, or every figure as its bit says. */
static void fuzz_record(size_t k, const char *text, size_t size) {
  record_t r;
  memset(&r, 0xa5, sizeof r);
  int rc = k == 0   ? em_procfs_parse_smaps_rollup(text, size, &r.smaps)
           : k == 1 ? em_procfs_parse_meminfo(text, size, &r.meminfo)
                    : em_procfs_parse_psi(text, size, &r.psi);
  if (!accepted(rc, &r, records[k].size, text, size)) {
    return;
  }
  const unsigned char *base = (const unsigned char *)&r;
  unsigned have;
  memcpy(&have, base + records[k].have, sizeof have);
  check_have(have, records[k].known);
  for (size_t i = 0; i < records[k].n; i++) {
    const figure_t *f = &records[k].figures[i];
    if (f->percent) {
      double pct;
      memcpy(&pct, base + f->offset, sizeof pct);
      check_percent(have, f->bit, pct);
    } else {
      uint64_t bytes;
      memcpy(&bytes, base + f->offset, sizeof bytes);
      check_kib(have, f->bit, bytes);
    }
  }
}

/* <pid>/io: refused zero; accepted with known bits only, an absent count 0. */
static void fuzz_pidio(const char *text, size_t size) {
  em_pidio_t io;
  memset(&io, 0xa5, sizeof io);
  int rc = em_procfs_parse_pidio(text, size, &io);
  if (!accepted(rc, &io, sizeof io, text, size)) {
    return;
  }
  check_have(io.have, EM_PIDIO_READ_BYTES | EM_PIDIO_WRITE_BYTES | EM_PIDIO_SYSCR | EM_PIDIO_SYSCW);
  check((io.have & EM_PIDIO_READ_BYTES) || io.read_bytes == 0);
  check((io.have & EM_PIDIO_WRITE_BYTES) || io.write_bytes == 0);
  check((io.have & EM_PIDIO_SYSCR) || io.syscr == 0);
  check((io.have & EM_PIDIO_SYSCW) || io.syscw == 0);
}

/* The scheduling evidence's parsers over the same bytes. */
static void fuzz_schedinfo(const char *text, size_t size) {
  em_schedinfo_stat_t st;
  memset(&st, 0xa5, sizeof st);
  int rc = em_schedinfo_parse_stat(text, size, &st);
  check(rc == 0 || rc == -EINVAL);
  check(memchr(st.comm, '\0', sizeof st.comm) != NULL);
  if (rc != 0) {
    check(st.processor == -1 && st.utime_ticks == 0 && st.majflt == 0 && st.starttime == 0);
  } else {
    check(size > 0 && text[size - 1] == '\n' && st.processor >= -1);
  }
  uint64_t wait = 1, slices = 1;
  rc = em_schedinfo_parse_schedstat(text, size, &wait, &slices);
  check(rc == 0 || (rc == -EINVAL && wait == 0 && slices == 0));
  unsigned have = 1;
  uint64_t vol = 1, invol = 1;
  rc = em_schedinfo_parse_status(text, size, &have, &vol, &invol);
  check(rc == 0 || rc == -EINVAL);
  check(have == 0 || have == EM_SCHEDINFO_CTXSW);
  check(have != 0 || (vol == 0 && invol == 0));
  em_schedinfo_cgroup_t cg;
  memset(&cg, 0xa5, sizeof cg);
  rc = em_schedinfo_parse_cgroup(text, size, &cg);
  if (!accepted(rc, &cg, sizeof cg, text, size)) {
    return;
  }
  check(memchr(cg.v1_path, '\0', sizeof cg.v1_path) && memchr(cg.v2_path, '\0', sizeof cg.v2_path));
  check(cg.v1_path[0] == '\0' || cg.v1_path[0] == '/');
  check(cg.v2_path[0] == '\0' || cg.v2_path[0] == '/');
}

/* cpu.stat and a PSI file's total: refused zero, accepted with known bits only. */
static void fuzz_cgroup_files(const char *text, size_t size) {
  em_schedinfo_cpu_stat_t cs;
  memset(&cs, 0xa5, sizeof cs);
  int rc = em_schedinfo_parse_cpu_stat(text, size, &cs);
  if (accepted(rc, &cs, sizeof cs, text, size)) {
    check((cs.have & ~(unsigned)(EM_SCHEDINFO_THROTTLED | EM_SCHEDINFO_NR_THROTTLED)) == 0);
    check((cs.have & EM_SCHEDINFO_THROTTLED) || cs.throttled_ns == 0);
  }
  bool have = true;
  uint64_t ns = 1;
  rc = em_schedinfo_parse_pressure_total(text, size, &have, &ns);
  check(rc == 0 || (rc == -EINVAL && !have && ns == 0));
  check(have || ns == 0);
  check(ns % 1000 == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* libFuzzer passes a heap copy of exactly `size` bytes, so ASan sees any over-read. */
  const char *text = (const char *)data;
  fuzz_statm(text, size);
  for (size_t k = 0; k < sizeof(records) / sizeof(records[0]); k++) {
    fuzz_record(k, text, size);
  }
  fuzz_pidio(text, size);
  fuzz_schedinfo(text, size);
  fuzz_cgroup_files(text, size);
  return 0;
}
