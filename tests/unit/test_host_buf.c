/*
 * test_host_buf.c - host/lib/buf.c, the capped growable buffer: growth keeps every byte and the
 * NUL, the cap is hit exactly at max_bytes with one sticky error and nothing of the refused
 * write, reset and rewind clear it and keep the allocation, take hands the bytes over, and a failed
 * allocation (failing_alloc.h) is -ENOMEM with the bytes before it intact.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "buf.h"
#include "failing_alloc.h"

static void growth_keeps_every_byte_and_the_nul(void **state) {
  (void)state;
  em_buf_t b;
  em_buf_init(&b, 1u << 20);
  assert_null(b.data);
  char want[5000];
  for (size_t i = 0; i < sizeof(want); i++) {
    want[i] = (char)('a' + i % 26);
    assert_int_equal(em_buf_add(&b, &want[i], 1), 0);
  }
  assert_int_equal(b.len, sizeof(want));
  assert_true(b.cap > b.len);
  assert_memory_equal(b.data, want, sizeof(want));
  assert_int_equal(b.data[b.len], '\0');
  assert_int_equal(em_buf_printf(&b, "|%d|%s|", 42, "x"), 0);
  assert_string_equal(b.data + sizeof(want), "|42|x|");
  em_buf_free(&b);
  assert_null(b.data);
  assert_int_equal(b.len, 0);
  assert_int_equal(b.max_bytes, 1u << 20);
}

static void cap_is_hit_once_and_sticks(void **state) {
  (void)state;
  em_buf_t b;
  em_buf_init(&b, 10);
  assert_int_equal(em_buf_addstr(&b, "0123456"), 0);
  assert_int_equal(em_buf_addstr(&b, "789"), 0); /* Exactly max_bytes. */
  assert_int_equal(b.len, 10);
  assert_true(b.cap <= 11);
  assert_int_equal(em_buf_add(&b, "x", 1), -E2BIG);
  assert_int_equal(b.error, -E2BIG);
  assert_string_equal(b.data, "0123456789");       /* Nothing of the refused write. */
  assert_int_equal(em_buf_add(&b, "", 0), -E2BIG); /* Sticky, even for nothing. */
  assert_int_equal(em_buf_printf(&b, "%s", ""), -E2BIG);
  em_buf_free(&b);

  em_buf_init(&b, 10);
  assert_int_equal(em_buf_addstr(&b, "01234"), 0);
  assert_int_equal(em_buf_printf(&b, "%s", "abcdefgh"), -E2BIG); /* Would end past the cap. */
  assert_string_equal(b.data, "01234");
  assert_int_equal(em_buf_reserve(&b, 1), -E2BIG);
  em_buf_free(&b);

  em_buf_init(&b, 0); /* Room for nothing but the NUL. */
  assert_int_equal(em_buf_add(&b, "", 0), 0);
  assert_string_equal(b.data, "");
  assert_int_equal(em_buf_add(&b, "y", 1), -E2BIG);
  em_buf_free(&b);
}

static void reset_clears_the_error_and_keeps_the_allocation(void **state) {
  (void)state;
  em_buf_t b;
  em_buf_init(&b, 8);
  assert_int_equal(em_buf_addstr(&b, "abcdefgh"), 0);
  assert_int_equal(em_buf_addstr(&b, "i"), -E2BIG);
  char *before = b.data;
  size_t cap = b.cap;
  em_buf_reset(&b);
  assert_int_equal(b.error, 0);
  assert_int_equal(b.len, 0);
  assert_ptr_equal(b.data, before);
  assert_int_equal(b.cap, cap);
  assert_string_equal(b.data, "");
  assert_int_equal(em_buf_addstr(&b, "new"), 0);
  assert_string_equal(b.data, "new");

  assert_int_equal(em_buf_addstr(&b, "tail"), 0);
  b.max_bytes = 5; /* Lowered under len: writes refused, rewind makes room again. */
  assert_int_equal(em_buf_add(&b, "", 0), -E2BIG);
  em_buf_rewind(&b, 3);
  assert_int_equal(b.error, 0);
  assert_string_equal(b.data, "new");
  assert_int_equal(em_buf_addstr(&b, "!!"), 0);
  assert_int_equal(em_buf_addstr(&b, "?"), -E2BIG);
  em_buf_rewind(&b, 99); /* Past len: only the error goes. */
  assert_int_equal(b.error, 0);
  assert_string_equal(b.data, "new!!");
  em_buf_free(&b);
}

static void reserve_tail_commit_write_in_place(void **state) {
  (void)state;
  em_buf_t b;
  em_buf_init(&b, 100);
  assert_int_equal(em_buf_addstr(&b, "ab"), 0);
  assert_int_equal(em_buf_reserve(&b, 50), 0);
  assert_true(b.cap >= b.len + 51);
  memcpy(em_buf_tail(&b), "cdef", 4);
  em_buf_commit(&b, 4);
  assert_string_equal(b.data, "abcdef");
  size_t len = 0;
  char *p = em_buf_take(&b, &len);
  assert_int_equal(len, 6);
  assert_string_equal(p, "abcdef");
  assert_null(b.data);
  assert_int_equal(b.len, 0);
  assert_int_equal(b.max_bytes, 100);
  free(p);
  assert_null(em_buf_take(&b, NULL)); /* Nothing allocated. */
  em_buf_free(NULL);
}

static void failed_allocation_is_enomem_and_keeps_the_bytes(void **state) {
  (void)state;
  em_buf_t b;
  em_buf_init(&b, 1u << 20);
  em_failing_alloc_arm(1, false);
  assert_int_equal(em_buf_addstr(&b, "first"), -ENOMEM);
  em_failing_alloc_disarm();
  assert_null(b.data);
  assert_int_equal(b.error, -ENOMEM);
  em_buf_reset(&b);
  assert_int_equal(em_buf_addstr(&b, "kept"), 0);
  char big[1000];
  memset(big, 'z', sizeof(big));
  em_failing_alloc_arm(1, false); /* The growth past the first allocation fails. */
  assert_int_equal(em_buf_add(&b, big, sizeof(big)), -ENOMEM);
  assert_int_equal(em_failing_alloc_disarm(), 1);
  assert_string_equal(b.data, "kept");
  assert_int_equal(em_buf_add(&b, "x", 1), -ENOMEM); /* Sticky until reset. */
  em_buf_free(&b);
}

/* The doubling array: room when full, first_cap then doubling, and a failed growth leaves the
 * array and its cap as they were. */
static void grow_items_doubles_and_keeps_the_array_on_failure(void **state) {
  (void)state;
  uint32_t *v = NULL;
  size_t cap = 0;
  assert_int_equal(em_buf_grow_items(&v, &cap, 0, sizeof(*v), 4), 0);
  assert_non_null(v);
  assert_int_equal(cap, 4);
  for (size_t n = 0; n < 9; n++) {
    assert_int_equal(em_buf_grow_items(&v, &cap, n, sizeof(*v), 4), 0);
    assert_true(cap > n);
    v[n] = (uint32_t)(n * 7);
  }
  assert_int_equal(cap, 16);
  assert_int_equal(em_buf_grow_items(&v, &cap, 3, sizeof(*v), 4), 0); /* Room already. */
  assert_int_equal(cap, 16);
  uint32_t *before = v;
  em_failing_alloc_arm(1, false);
  assert_int_equal(em_buf_grow_items(&v, &cap, 16, sizeof(*v), 4), -ENOMEM);
  assert_int_equal(em_failing_alloc_disarm(), 1);
  assert_ptr_equal(v, before);
  assert_int_equal(cap, 16);
  for (size_t n = 0; n < 9; n++) {
    assert_int_equal(v[n], n * 7);
  }
  size_t huge = SIZE_MAX / 2;
  assert_int_equal(em_buf_grow_items(&v, &huge, huge, sizeof(*v), 4), -ENOMEM); /* Overflow. */
  assert_ptr_equal(v, before);
  free(v);
}

static const char *word_at(const void *words, size_t i) {
  return ((const char *const *)words)[i];
}

/* A sorted array's search: each name found at its index, each absent one placed where it
 * would keep the order (before the first, between two, after the last, in an empty array). */
static void find_name_finds_or_places_in_order(void **state) {
  (void)state;
  static const char *const words[] = {"beta", "delta", "gamma", "omega"};
  bool found = false;
  for (size_t i = 0; i < 4; i++) {
    assert_int_equal(em_buf_find_name(words, 4, word_at, words[i], &found), i);
    assert_true(found);
  }
  static const struct {
    const char *name;
    size_t at;
  } absent[] = {{"alpha", 0}, {"charlie", 1}, {"epsilon", 2}, {"gammaa", 3}, {"zeta", 4}};
  for (size_t i = 0; i < sizeof(absent) / sizeof(absent[0]); i++) {
    found = true;
    assert_int_equal(em_buf_find_name(words, 4, word_at, absent[i].name, &found), absent[i].at);
    assert_false(found);
  }
  found = true;
  assert_int_equal(em_buf_find_name(NULL, 0, word_at, "beta", &found), 0);
  assert_false(found);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(growth_keeps_every_byte_and_the_nul),
      cmocka_unit_test(cap_is_hit_once_and_sticks),
      cmocka_unit_test(reset_clears_the_error_and_keeps_the_allocation),
      cmocka_unit_test(reserve_tail_commit_write_in_place),
      cmocka_unit_test(failed_allocation_is_enomem_and_keeps_the_bytes),
      cmocka_unit_test(grow_items_doubles_and_keeps_the_array_on_failure),
      cmocka_unit_test(find_name_finds_or_places_in_order),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
