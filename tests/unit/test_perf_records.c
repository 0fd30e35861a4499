/*
 * test_perf_records.c - the perf ring record reader (profile/perf_records.h) and the stack
 * table fed by it (profile/stacks.h), with hand-built records: a sample with a call chain
 * (user and kernel contexts), a lost record, switch records, and truncated or garbled records
 * that must be refused without reading past them.
 */
#include <errno.h>
#include <linux/perf_event.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "perf_records.h"
#include "stacks.h"

typedef struct {
  uint8_t b[1024];
  size_t n;
} rec_t;

static void put(rec_t *r, const void *p, size_t n) {
  memcpy(r->b + r->n, p, n);
  r->n += n;
}

static void u32(rec_t *r, uint32_t v) {
  put(r, &v, 4);
}

static void u64(rec_t *r, uint64_t v) {
  put(r, &v, 8);
}

/* Header with the size patched in by finish(). */
static void header(rec_t *r, uint32_t type, uint16_t misc) {
  r->n = 0;
  u32(r, type);
  put(r, &misc, 2);
  uint16_t zero = 0;
  put(r, &zero, 2);
}

static void finish(rec_t *r) {
  uint16_t size = (uint16_t)r->n;
  memcpy(r->b + 6, &size, 2);
}

/* A sample of tid at time with chain[0..n) as the kernel writes it (leaf first). */
static void sample(rec_t *r, uint32_t tid, uint64_t time, const uint64_t *chain, size_t n) {
  header(r, PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER);
  u32(r, 100);
  u32(r, tid);
  u64(r, time);
  u64(r, n);
  for (size_t i = 0; i < n; i++) {
    u64(r, chain[i]);
  }
  finish(r);
}

static void switch_rec(rec_t *r, uint32_t tid, uint64_t time, bool out) {
  header(r, PERF_RECORD_SWITCH, out ? PERF_RECORD_MISC_SWITCH_OUT : 0);
  u32(r, 100);
  u32(r, tid);
  u64(r, time);
  finish(r);
}

static const uint64_t CHAIN[] = {(uint64_t)PERF_CONTEXT_KERNEL,
                                 0xffffffff81000010ull,
                                 0xffffffff81000020ull,
                                 (uint64_t)PERF_CONTEXT_USER,
                                 0x401000,
                                 0x402000,
                                 0x403000};

static void sample_with_callchain_is_read_whole(void **state) {
  (void)state;
  rec_t r;
  sample(&r, 7, 123456789, CHAIN, 7);
  em_perf_rec_t p;
  assert_int_equal(em_perf_rec_size(r.b, r.n), r.n);
  assert_int_equal(em_perf_rec_parse(r.b, r.n, &p), 0);
  assert_int_equal(p.kind, EM_PERF_REC_SAMPLE);
  assert_int_equal(p.pid, 100);
  assert_int_equal(p.tid, 7);
  assert_int_equal(p.time_ns, 123456789);
  assert_int_equal(p.n_chain, 7);
  assert_int_equal(em_perf_rec_ip(&p, 4), 0x401000);
}

static void lost_and_switch_records_carry_their_fields(void **state) {
  (void)state;
  rec_t r;
  header(&r, PERF_RECORD_LOST, 0);
  u64(&r, 1);
  u64(&r, 42);
  u32(&r, 100);
  u32(&r, 8);
  u64(&r, 99);
  finish(&r);
  em_perf_rec_t p;
  assert_int_equal(em_perf_rec_parse(r.b, r.n, &p), 0);
  assert_int_equal(p.kind, EM_PERF_REC_LOST);
  assert_int_equal(p.lost, 42);
  assert_int_equal(p.tid, 8);
  switch_rec(&r, 9, 500, true);
  assert_int_equal(em_perf_rec_parse(r.b, r.n, &p), 0);
  assert_int_equal(p.kind, EM_PERF_REC_SWITCH);
  assert_true(p.switch_out);
  assert_int_equal(p.time_ns, 500);
  header(&r, PERF_RECORD_MMAP2, 0); /* Other records: skipped by size. */
  u64(&r, 0);
  finish(&r);
  assert_int_equal(em_perf_rec_parse(r.b, r.n, &p), 0);
  assert_int_equal(p.kind, EM_PERF_REC_OTHER);
}

static void truncated_and_garbled_records_are_refused(void **state) {
  (void)state;
  rec_t r;
  em_perf_rec_t p;
  sample(&r, 7, 1, CHAIN, 7);
  /* A chain count past the record's size. */
  uint64_t big = 1000;
  memcpy(r.b + 24, &big, 8);
  assert_int_equal(em_perf_rec_parse(r.b, r.n, &p), -EBADMSG);
  /* Every shorter length of a good sample: refused (the size field disagrees). */
  sample(&r, 7, 1, CHAIN, 7);
  for (size_t len = 0; len < r.n; len++) {
    assert_int_equal(em_perf_rec_parse(r.b, len, &p), -EINVAL);
  }
  /* A header whose size says less than the fields of its type need. */
  header(&r, PERF_RECORD_SAMPLE, 0);
  u64(&r, 0);
  finish(&r);
  assert_int_equal(em_perf_rec_parse(r.b, r.n, &p), -EBADMSG);
  header(&r, PERF_RECORD_SWITCH, 0);
  finish(&r);
  assert_int_equal(em_perf_rec_parse(r.b, r.n, &p), -EBADMSG);
  /* A size below the header. */
  header(&r, PERF_RECORD_SAMPLE, 0);
  r.b[6] = 4;
  r.b[7] = 0;
  assert_int_equal(em_perf_rec_size(r.b, 8), 0);
}

static void equal_chains_fold_into_one_stack_root_first(void **state) {
  (void)state;
  em_stacks_t *s = NULL;
  assert_int_equal(em_stacks_new(&s, 4, 64), 0);
  rec_t r;
  em_perf_rec_t p;
  sample(&r, 7, 1, CHAIN, 7);
  assert_int_equal(em_perf_rec_parse(r.b, r.n, &p), 0);
  assert_int_equal(em_stacks_add(s, &p), 0);
  assert_int_equal(em_stacks_add(s, &p), 0);
  assert_int_equal(em_stacks_count(s), 1);
  em_stacks_entry_t e = em_stacks_get(s, 0);
  assert_int_equal(e.samples, 2);
  assert_int_equal(e.n_user, 3);
  assert_int_equal(e.n_kernel, 2);
  /* Root first: user root (a return address, minus 1) ... user leaf (exact), then kernel. */
  assert_int_equal(e.addrs[0], 0x403000 - 1);
  assert_int_equal(e.addrs[2], 0x401000);
  assert_int_equal(e.addrs[3], 0xffffffff81000020ull - 1);
  assert_int_equal(e.addrs[4], 0xffffffff81000010ull);
  em_stacks_free(s);
}

static void a_full_table_cuts_and_counts(void **state) {
  (void)state;
  em_stacks_t *s = NULL;
  assert_int_equal(em_stacks_new(&s, 2, 64), 0);
  rec_t r;
  em_perf_rec_t p;
  for (uint64_t i = 0; i < 5; i++) {
    uint64_t chain[] = {(uint64_t)PERF_CONTEXT_USER, 0x1000 + i};
    sample(&r, 7, i, chain, 2);
    assert_int_equal(em_perf_rec_parse(r.b, r.n, &p), 0);
    assert_int_equal(em_stacks_add(s, &p), i < 2 ? 0 : -ENOSPC);
  }
  assert_int_equal(em_stacks_stats(s)->cut, 3);
  assert_int_equal(em_stacks_stats(s)->samples, 2);
  uint64_t empty[] = {(uint64_t)PERF_CONTEXT_USER};
  sample(&r, 7, 9, empty, 1);
  assert_int_equal(em_perf_rec_parse(r.b, r.n, &p), 0);
  assert_int_equal(em_stacks_add(s, &p), -ENODATA);
  em_stacks_reset(s);
  assert_int_equal(em_stacks_count(s), 0);
  em_stacks_free(s);
}

static void off_cpu_time_goes_to_the_last_stack_sampled(void **state) {
  (void)state;
  em_stacks_t *s = NULL;
  assert_int_equal(em_stacks_new(&s, 4, 64), 0);
  rec_t r;
  em_perf_rec_t p;
  sample(&r, 7, 1000, CHAIN, 7);
  assert_int_equal(em_perf_rec_parse(r.b, r.n, &p), 0);
  assert_int_equal(em_stacks_add(s, &p), 0);
  switch_rec(&r, 7, 2000, true);
  assert_int_equal(em_perf_rec_parse(r.b, r.n, &p), 0);
  em_stacks_switch(s, &p);
  switch_rec(&r, 7, 5000, false);
  assert_int_equal(em_perf_rec_parse(r.b, r.n, &p), 0);
  em_stacks_switch(s, &p);
  assert_int_equal(em_stacks_get(s, 0).off_cpu_ns, 3000);
  /* Out again and never back in: charged up to the window's end. */
  switch_rec(&r, 7, 6000, true);
  assert_int_equal(em_perf_rec_parse(r.b, r.n, &p), 0);
  em_stacks_switch(s, &p);
  em_stacks_close(s, 10000);
  assert_int_equal(em_stacks_get(s, 0).off_cpu_ns, 7000);
  em_stacks_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sample_with_callchain_is_read_whole),
      cmocka_unit_test(lost_and_switch_records_carry_their_fields),
      cmocka_unit_test(truncated_and_garbled_records_are_refused),
      cmocka_unit_test(equal_chains_fold_into_one_stack_root_first),
      cmocka_unit_test(a_full_table_cuts_and_counts),
      cmocka_unit_test(off_cpu_time_goes_to_the_last_stack_sampled),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
