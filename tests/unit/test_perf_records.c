/*
 * test_perf_records.c - the perf ring record reader (profile/perf_records.h) and the stack
 * table fed by it (profile/stacks.h), with hand-built records: a sample with a call chain
 * (user and kernel contexts), one with user registers and a user stack copy, a lost record,
 * switch records, and truncated or garbled records that must be refused without reading past
 * them; the stack table's logged samples and off-CPU intervals, and a sample moved to another
 * chain (the DWARF unwinder's) with its thread's off-CPU time following it.
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
  uint8_t b[4096];
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

/* sample() into r, then parsed into p (asserts the parse succeeds). */
static void sample_parsed(rec_t *r, em_perf_rec_t *p, uint32_t tid, uint64_t time,
                          const uint64_t *chain, size_t n) {
  sample(r, tid, time, chain, n);
  assert_int_equal(em_perf_rec_parse(r->b, r->n, NULL, p), 0);
}

/* switch_rec() into r, then parsed into p (asserts the parse succeeds). */
static void switch_parsed(rec_t *r, em_perf_rec_t *p, uint32_t tid, uint64_t time, bool out) {
  switch_rec(r, tid, time, out);
  assert_int_equal(em_perf_rec_parse(r->b, r->n, NULL, p), 0);
}

/* A stack table of `max_stacks` entries of up to `max_addrs` addresses (asserts). */
static em_stacks_t *stacks_new(uint32_t max_stacks, uint32_t max_addrs) {
  em_stacks_t *s = NULL;
  assert_int_equal(em_stacks_new(&s, max_stacks, max_addrs), 0);
  return s;
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
  assert_int_equal(em_perf_rec_parse(r.b, r.n, NULL, &p), 0);
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
  assert_int_equal(em_perf_rec_parse(r.b, r.n, NULL, &p), 0);
  assert_int_equal(p.kind, EM_PERF_REC_LOST);
  assert_int_equal(p.lost, 42);
  assert_int_equal(p.tid, 8);
  switch_parsed(&r, &p, 9, 500, true);
  assert_int_equal(p.kind, EM_PERF_REC_SWITCH);
  assert_true(p.switch_out);
  assert_int_equal(p.time_ns, 500);
  header(&r, PERF_RECORD_MMAP2, 0); /* Other records: skipped by size. */
  u64(&r, 0);
  finish(&r);
  assert_int_equal(em_perf_rec_parse(r.b, r.n, NULL, &p), 0);
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
  assert_int_equal(em_perf_rec_parse(r.b, r.n, NULL, &p), -EBADMSG);
  /* Every shorter length of a good sample: refused (the size field disagrees). */
  sample(&r, 7, 1, CHAIN, 7);
  for (size_t len = 0; len < r.n; len++) {
    assert_int_equal(em_perf_rec_parse(r.b, len, NULL, &p), -EINVAL);
  }
  /* A header whose size says less than the fields of its type need. */
  header(&r, PERF_RECORD_SAMPLE, 0);
  u64(&r, 0);
  finish(&r);
  assert_int_equal(em_perf_rec_parse(r.b, r.n, NULL, &p), -EBADMSG);
  header(&r, PERF_RECORD_SWITCH, 0);
  finish(&r);
  assert_int_equal(em_perf_rec_parse(r.b, r.n, NULL, &p), -EBADMSG);
  /* A size below the header. */
  header(&r, PERF_RECORD_SAMPLE, 0);
  r.b[6] = 4;
  r.b[7] = 0;
  assert_int_equal(em_perf_rec_size(r.b, 8), 0);
}

static void equal_chains_fold_into_one_stack_root_first(void **state) {
  (void)state;
  em_stacks_t *s = stacks_new(4, 64);
  rec_t r;
  em_perf_rec_t p;
  sample_parsed(&r, &p, 7, 1, CHAIN, 7);
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
  em_stacks_t *s = stacks_new(2, 64);
  rec_t r;
  em_perf_rec_t p;
  for (uint64_t i = 0; i < 5; i++) {
    uint64_t chain[] = {(uint64_t)PERF_CONTEXT_USER, 0x1000 + i};
    sample_parsed(&r, &p, 7, i, chain, 2);
    assert_int_equal(em_stacks_add(s, &p), i < 2 ? 0 : -ENOSPC);
  }
  assert_int_equal(em_stacks_stats(s)->cut, 3);
  assert_int_equal(em_stacks_stats(s)->samples, 2);
  uint64_t empty[] = {(uint64_t)PERF_CONTEXT_USER};
  sample_parsed(&r, &p, 7, 9, empty, 1);
  assert_int_equal(em_stacks_add(s, &p), -ENODATA);
  em_stacks_reset(s);
  assert_int_equal(em_stacks_count(s), 0);
  em_stacks_free(s);
}

static void off_cpu_time_goes_to_the_last_stack_sampled(void **state) {
  (void)state;
  em_stacks_t *s = stacks_new(4, 64);
  rec_t r;
  em_perf_rec_t p;
  sample_parsed(&r, &p, 7, 1000, CHAIN, 7);
  assert_int_equal(em_stacks_add(s, &p), 0);
  switch_parsed(&r, &p, 7, 2000, true);
  em_stacks_switch(s, &p);
  switch_parsed(&r, &p, 7, 5000, false);
  em_stacks_switch(s, &p);
  assert_int_equal(em_stacks_get(s, 0).off_cpu_ns, 3000);
  /* Out again and never back in: charged up to the window's end. */
  switch_parsed(&r, &p, 7, 6000, true);
  em_stacks_switch(s, &p);
  em_stacks_close(s, 10000);
  assert_int_equal(em_stacks_get(s, 0).off_cpu_ns, 7000);
  em_stacks_free(s);
}

/* A sample with CHAIN, then abi, 3 registers (when abi), a stack copy of `size` bytes filled
 * with its offsets and dyn_size (when size). */
static void sample_user(rec_t *r, uint64_t abi, uint64_t size, uint64_t dyn) {
  header(r, PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER);
  u32(r, 100);
  u32(r, 7);
  u64(r, 1);
  u64(r, 7);
  for (size_t i = 0; i < 7; i++) {
    u64(r, CHAIN[i]);
  }
  u64(r, abi);
  if (abi) {
    u64(r, 0x1111);
    u64(r, 0x7ffc0000); /* A stack pointer. */
    u64(r, 0x401234);
  }
  u64(r, size);
  for (uint64_t i = 0; i < size; i++) {
    r->b[r->n++] = (uint8_t)i;
  }
  if (size) {
    u64(r, dyn);
  }
  finish(r);
}

static void user_registers_and_stack_are_read_and_bounded(void **state) {
  (void)state;
  const em_perf_layout_t layout = {.n_regs = 3, .stack = true};
  rec_t r;
  em_perf_rec_t p;
  sample_user(&r, PERF_SAMPLE_REGS_ABI_64, 256, 200);
  assert_int_equal(em_perf_rec_parse(r.b, r.n, &layout, &p), 0);
  assert_int_equal(p.n_chain, 7);
  assert_int_equal(p.n_regs, 3);
  assert_int_equal(em_perf_rec_reg(&p, 1), 0x7ffc0000);
  assert_int_equal(em_perf_rec_reg(&p, 3), 0); /* Past the registers. */
  assert_int_equal(p.stack_len, 200);          /* dyn_size: what the kernel could copy. */
  assert_int_equal(p.stack[199], 199);
  /* No user context (a sample in a kernel thread): abi 0, size 0, nothing to unwind. */
  sample_user(&r, PERF_SAMPLE_REGS_ABI_NONE, 0, 0);
  assert_int_equal(em_perf_rec_parse(r.b, r.n, &layout, &p), 0);
  assert_int_equal(p.n_regs, 0);
  assert_int_equal(p.stack_len, 0);
  assert_null(p.stack);
  /* dyn_size above the copy, a copy past the record, registers cut short: refused. */
  sample_user(&r, PERF_SAMPLE_REGS_ABI_64, 64, 65);
  assert_int_equal(em_perf_rec_parse(r.b, r.n, &layout, &p), -EBADMSG);
  sample_user(&r, PERF_SAMPLE_REGS_ABI_64, 64, 8);
  uint64_t huge = 1ull << 40;
  memcpy(r.b + r.n - 8 - 64 - 8, &huge, 8); /* The size field. */
  assert_int_equal(em_perf_rec_parse(r.b, r.n, &layout, &p), -EBADMSG);
  const em_perf_layout_t more_regs = {.n_regs = 64, .stack = true};
  sample_user(&r, PERF_SAMPLE_REGS_ABI_64, 8, 8);
  assert_int_equal(em_perf_rec_parse(r.b, r.n, &more_regs, &p), -EBADMSG);
  const em_perf_layout_t too_many = {.n_regs = 65, .stack = true};
  assert_int_equal(em_perf_rec_parse(r.b, r.n, &too_many, &p), -EINVAL);
  /* Every shorter length still refused. */
  sample_user(&r, PERF_SAMPLE_REGS_ABI_64, 32, 32);
  for (size_t len = 0; len < r.n; len++) {
    assert_int_not_equal(em_perf_rec_parse(r.b, len, &layout, &p), 0);
  }
}

typedef struct {
  uint32_t calls, last;
} seen_t;

static void on_sample(void *ctx, uint32_t log_index, const em_perf_rec_t *r) {
  seen_t *seen = ctx;
  (void)r;
  seen->calls++;
  seen->last = log_index;
}

static void a_rechained_sample_takes_its_thread_s_off_cpu_time_along(void **state) {
  (void)state;
  em_stacks_t *s = stacks_new(8, 256);
  assert_int_equal(em_stacks_log_alloc(s, 16), 0);
  seen_t seen = {0};
  em_stacks_on_sample(s, on_sample, &seen);
  rec_t r;
  em_perf_rec_t p;
  sample_parsed(&r, &p, 7, 1000, CHAIN, 7);
  assert_int_equal(em_stacks_add(s, &p), 0);
  assert_int_equal(seen.calls, 1);
  assert_int_equal(seen.last, 0);
  switch_parsed(&r, &p, 7, 2000, true);
  em_stacks_switch(s, &p);
  switch_parsed(&r, &p, 7, 2500, false);
  em_stacks_switch(s, &p);
  assert_int_equal(em_stacks_log_count(s), 2); /* The sample and its off-CPU interval. */
  em_stacks_log_entry_t off = em_stacks_log_get(s, 1);
  assert_int_equal(off.off_cpu_ns, 500);
  assert_int_equal(off.time_ns, 2000);
  assert_int_equal(off.from, 0);

  /* A deeper chain for the sample: a new stack with its kernel frames, the old one empty. */
  const uint64_t dwarf[] = {0x400100 - 1, 0x403000 - 1, 0x402000 - 1, 0x401000};
  assert_int_equal(em_stacks_rechain(s, 0, dwarf, 4), 0);
  assert_int_equal(em_stacks_rechain(s, 1, dwarf, 4), -EINVAL); /* An off-CPU entry. */
  assert_int_equal(em_stacks_rechain(s, 9, dwarf, 4), -EINVAL);
  em_stacks_rechain_off_cpu(s);
  assert_int_equal(em_stacks_count(s), 2);
  em_stacks_entry_t old = em_stacks_get(s, 0), now = em_stacks_get(s, 1);
  assert_int_equal(old.samples, 0);
  assert_int_equal(old.off_cpu_ns, 0);
  assert_int_equal(now.samples, 1);
  assert_int_equal(now.off_cpu_ns, 500);
  assert_int_equal(now.n_user, 4);
  assert_int_equal(now.n_kernel, 2);
  assert_int_equal(now.addrs[0], 0x400100 - 1);
  assert_int_equal(now.addrs[4], 0xffffffff81000020ull - 1);
  assert_int_equal(em_stacks_log_get(s, 0).stack, 1);
  assert_int_equal(em_stacks_log_get(s, 1).stack, 1);
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
      cmocka_unit_test(user_registers_and_stack_are_read_and_bounded),
      cmocka_unit_test(a_rechained_sample_takes_its_thread_s_off_cpu_time_along),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
