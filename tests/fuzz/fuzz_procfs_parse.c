/*
 * fuzz_procfs_parse.c - libFuzzer harness for the four procfs parsers of
 * firmware/agent/collect/procfs.c (statm, smaps_rollup, meminfo, PSI).
 *
 * Any bytes: each parser returns 0 or -EINVAL without reading past `size` (libFuzzer's input
 * is a heap buffer of exactly that size, so AddressSanitizer sees an over-read); a refused text
 * leaves its record all zero; an accepted one ends with a newline, sets only known `have` bits
 * and at least one, gives 0 for every absent field, and its figures are whole pages (statm) or
 * whole KiB (smaps_rollup, meminfo) or finite non-negative percentages (PSI). statm parsed with
 * 4 KiB and 64 KiB pages agrees up to the factor 16. Seeds: tests/fixtures/procfs (recursive).
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "procfs.h"

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

static void fuzz_smaps(const char *text, size_t size) {
  em_smaps_t s;
  memset(&s, 0xa5, sizeof s);
  if (accepted(em_procfs_parse_smaps_rollup(text, size, &s), &s, sizeof s, text, size)) {
    check_have(s.have, EM_SMAPS_PSS | EM_SMAPS_ANON | EM_SMAPS_SWAP);
    check_kib(s.have, EM_SMAPS_PSS, s.pss_bytes);
    check_kib(s.have, EM_SMAPS_ANON, s.anon_bytes);
    check_kib(s.have, EM_SMAPS_SWAP, s.swap_bytes);
  }
}

static void fuzz_meminfo(const char *text, size_t size) {
  em_meminfo_t m;
  memset(&m, 0xa5, sizeof m);
  if (accepted(em_procfs_parse_meminfo(text, size, &m), &m, sizeof m, text, size)) {
    check_have(m.have, EM_MEMINFO_AVAILABLE | EM_MEMINFO_TOTAL);
    check_kib(m.have, EM_MEMINFO_AVAILABLE, m.available_bytes);
    check_kib(m.have, EM_MEMINFO_TOTAL, m.total_bytes);
  }
}

static void fuzz_psi(const char *text, size_t size) {
  em_psi_t p;
  memset(&p, 0xa5, sizeof p);
  if (accepted(em_procfs_parse_psi(text, size, &p), &p, sizeof p, text, size)) {
    check_have(p.have, EM_PSI_SOME | EM_PSI_FULL);
    check_percent(p.have, EM_PSI_SOME, p.some_avg10);
    check_percent(p.have, EM_PSI_FULL, p.full_avg10);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* libFuzzer passes a heap copy of exactly `size` bytes, so ASan sees any over-read. */
  const char *text = (const char *)data;
  fuzz_statm(text, size);
  fuzz_smaps(text, size);
  fuzz_meminfo(text, size);
  fuzz_psi(text, size);
  return 0;
}
