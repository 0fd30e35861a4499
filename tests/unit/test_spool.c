/*
 * test_spool.c - the agent's spool (firmware/agent/transport/spool.c) against real files in a
 * temporary directory: replay order and payload bytes, STATE before older DATA, recovery after a
 * clean close and after a crash (a child process that _exit()s without closing), many laps of the
 * ring with mixed sizes, eviction counts that survive a restart, torn and corrupt records,
 * garbage files, a FIFO, a symbolic link or a directory at the spool's path (refused, never
 * blocking, the link's target untouched), write errors (RLIMIT_FSIZE), size limits, and a torn
 * header slot.
 *
 * The tests know the on-disk format (firmware/SPOOL.md) only where they damage a file: record
 * offsets, the payload position inside a record, the generation field of a header slot.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "failing_alloc.h"
#include "spool.h"
#include "tmp_dir.h"
#include "unit_fx.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define CAP     EM_SPOOL_MIN_CAPACITY
#define MAX_LEN 4096u

typedef em_tmp_file_t fixture_t;

static int setup(void **state) {
  return em_tmp_file_setup(state, "em-spool-test", "spool");
}

static int teardown(void **state) {
  return em_tmp_file_teardown(state);
}

static em_spool_t *open_ok(const fixture_t *f, uint64_t cap, char *err, size_t err_cap) {
  em_spool_t *s = NULL;
  char local[512];
  if (err == NULL) {
    err = local;
    err_cap = sizeof(local);
  }
  int rc = em_spool_open(&s, f->path, cap, err, err_cap);
  if (rc != 0) {
    fail_msg("em_spool_open(%s): %d %s", f->path, rc, err);
  }
  assert_non_null(s);
  return s;
}

/* The payload of record `id`: its id in the first bytes, then a pattern from id. */
static void fill(uint8_t *buf, uint32_t id, size_t len) {
  for (size_t j = 0; j < len; j++) {
    buf[j] = (uint8_t)(id * 131u + j * 7u + 1u);
  }
  for (size_t j = 0; j < 4 && j < len; j++) {
    buf[j] = (uint8_t)(id >> (8 * j));
  }
}

static void append_ok(em_spool_t *s, em_spool_kind_t kind, uint32_t id, size_t len) {
  uint8_t buf[MAX_LEN];
  assert_true(len <= sizeof(buf));
  fill(buf, id, len);
  assert_int_equal(em_spool_append(s, kind, buf, len), 0);
}

/* Peeks, checks kind, length and every byte of record `id`, and pops it. */
static void expect_pop(em_spool_t *s, em_spool_kind_t kind, uint32_t id, size_t len) {
  uint8_t got[MAX_LEN];
  uint8_t want[MAX_LEN];
  em_spool_kind_t k = 0;
  int n = em_spool_peek(s, &k, got, sizeof(got));
  if (n != (int)len) {
    fail_msg("record %u: peek returned %d, want %zu", id, n, len);
  }
  assert_int_equal(k, kind);
  fill(want, id, len);
  assert_memory_equal(got, want, len);
  assert_int_equal(em_spool_pop(s), 0);
}

static void expect_empty(em_spool_t *s) {
  uint8_t buf[16];
  em_spool_kind_t k = 0;
  assert_int_equal(em_spool_peek(s, &k, buf, sizeof(buf)), 0);
  assert_int_equal(em_spool_pop(s), -ENOENT);
}

static em_spool_stats_t stats_of(const em_spool_t *s) {
  em_spool_stats_t st;
  em_spool_stats(s, &st);
  return st;
}

/*
 * A reopened spool's replay: to - from records pending, none corrupt; the state record
 * numbered `state` first, then the data records from..to-1 but that one, each of base + its
 * number bytes (as appended); then nothing.
 */
static void expect_replay(em_spool_t *s, uint32_t state, uint32_t from, uint32_t to, size_t base) {
  em_spool_stats_t st = stats_of(s);
  assert_int_equal(st.pending, to - from);
  assert_int_equal(st.corrupt, 0);
  expect_pop(s, EM_SPOOL_STATE, state, base + state);
  for (uint32_t i = from; i < to; i++) {
    if (i != state) {
      expect_pop(s, EM_SPOOL_DATA, i, base + i);
    }
  }
  expect_empty(s);
}

static uint64_t rec_bytes(uint64_t len) {
  return EM_SPOOL_RECORD_HEADER + ((len + 7u) & ~(uint64_t)7u);
}

/* Overwrites `len` bytes of the file at `off` with `byte`. */
static void scribble(const fixture_t *f, uint64_t off, size_t len, uint8_t byte) {
  uint8_t buf[512];
  assert_true(len <= sizeof(buf));
  memset(buf, byte, len);
  int fd = open(f->path, O_WRONLY);
  assert_true(fd >= 0);
  assert_int_equal(pwrite(fd, buf, len, (off_t)off), (ssize_t)len);
  close(fd);
}

static void spool_replays_in_order_with_payload_bytes(void **state) {
  static const size_t lens[] = {1, 7, 8, 9, 15, 16, 17, 100, 1000, 4096};
  const size_t n = sizeof(lens) / sizeof(lens[0]);
  fixture_t *f = *state;
  em_spool_t *s = open_ok(f, CAP, NULL, 0);
  for (size_t i = 0; i < n; i++) {
    append_ok(s, EM_SPOOL_DATA, (uint32_t)i, lens[i]);
  }
  em_spool_stats_t st = stats_of(s);
  assert_int_equal(st.pending, n);
  assert_int_equal(st.appended, n);
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; i++) {
    bytes += rec_bytes(lens[i]);
  }
  assert_int_equal(st.pending_bytes, bytes);
  for (size_t i = 0; i < n; i++) {
    expect_pop(s, EM_SPOOL_DATA, (uint32_t)i, lens[i]);
  }
  expect_empty(s);
  st = stats_of(s);
  assert_int_equal(st.pending, 0);
  assert_int_equal(st.pending_bytes, 0);
  assert_int_equal(st.replayed, n);
  assert_int_equal(st.corrupt, 0);
  em_spool_close(s);
}

static void spool_state_records_replay_before_older_data(void **state) {
  static const struct {
    em_spool_kind_t kind;
    uint32_t id;
  } in[] = {{EM_SPOOL_DATA, 0}, {EM_SPOOL_DATA, 1},  {EM_SPOOL_STATE, 2},
            {EM_SPOOL_DATA, 3}, {EM_SPOOL_STATE, 4}, {EM_SPOOL_DATA, 5}};
  static const uint32_t order[] = {2, 4, 0, 1, 3, 5};
  fixture_t *f = *state;
  em_spool_t *s = open_ok(f, CAP, NULL, 0);
  for (size_t i = 0; i < 6; i++) {
    append_ok(s, in[i].kind, in[i].id, 40 + in[i].id);
  }
  for (size_t i = 0; i < 2; i++) {
    expect_pop(s, EM_SPOOL_STATE, order[i], 40 + order[i]);
  }
  /* A STATE record appended while DATA is replaying goes first too. */
  expect_pop(s, EM_SPOOL_DATA, 0, 40);
  append_ok(s, EM_SPOOL_STATE, 6, 46);
  expect_pop(s, EM_SPOOL_STATE, 6, 46);
  for (size_t i = 3; i < 6; i++) {
    expect_pop(s, EM_SPOOL_DATA, order[i], 40 + order[i]);
  }
  expect_empty(s);
  em_spool_close(s);
}

/* Flight recordings (kind 3) and stack profiles (kind 4) replay in order with data, after
 * state, and keep their kind across a reopen (the index's flag and the record's kind byte). */
static void spool_flight_records_replay_with_data_and_keep_their_kind(void **state) {
  static const em_spool_kind_t kinds[] = {EM_SPOOL_DATA, EM_SPOOL_FLIGHT, EM_SPOOL_STATE,
                                          EM_SPOOL_DATA, EM_SPOOL_PROFILE};
  fixture_t *f = *state;
  em_spool_t *s = open_ok(f, CAP, NULL, 0);
  for (uint32_t i = 0; i < 5; i++) {
    append_ok(s, kinds[i], i, 3000 + i);
  }
  assert_int_equal(em_spool_append(s, (em_spool_kind_t)5, (const uint8_t *)"x", 1), -EINVAL);
  expect_pop(s, EM_SPOOL_STATE, 2, 3002);
  em_spool_close(s);
  s = open_ok(f, CAP, NULL, 0);
  expect_pop(s, EM_SPOOL_STATE, 2, 3002); /* Popped above `done`: again (at-least-once). */
  static const uint32_t order[] = {0, 1, 3, 4};
  for (size_t i = 0; i < 4; i++) {
    expect_pop(s, kinds[order[i]], order[i], 3000 + order[i]);
  }
  expect_empty(s);
  em_spool_close(s);
}

static void spool_reopen_after_close_replays_unpopped(void **state) {
  fixture_t *f = *state;
  em_spool_t *s = open_ok(f, CAP, NULL, 0);
  for (uint32_t i = 0; i < 10; i++) {
    append_ok(s, i == 7 ? EM_SPOOL_STATE : EM_SPOOL_DATA, i, 50 + i);
  }
  expect_pop(s, EM_SPOOL_STATE, 7, 57);
  for (uint32_t i = 0; i < 3; i++) {
    expect_pop(s, EM_SPOOL_DATA, i, 50 + i);
  }
  em_spool_close(s);

  char err[256];
  s = open_ok(f, CAP, err, sizeof(err));
  assert_string_equal(err, "");
  /* Record 7 was popped above `done` (3): it is replayed again (at-least-once). */
  expect_replay(s, 7, 3, 10, 50);
  /* Numbers are never reused: what comes next replays after a second reopen as well. */
  append_ok(s, EM_SPOOL_DATA, 10, 60);
  em_spool_close(s);
  s = open_ok(f, CAP, NULL, 0);
  assert_int_equal(stats_of(s).pending, 1);
  expect_pop(s, EM_SPOOL_DATA, 10, 60);
  expect_empty(s);
  em_spool_close(s);
}

/* In a child: opens, runs `steps`, and _exit()s without closing (the crash). */
static void crash_child(const fixture_t *f, void (*steps)(em_spool_t *)) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    em_spool_t *s = NULL;
    char err[256];
    if (em_spool_open(&s, f->path, CAP, err, sizeof(err)) != 0) {
      _exit(2);
    }
    steps(s);
    _exit(0);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

static void steps_append_sync_pop_append(em_spool_t *s) {
  for (uint32_t i = 0; i < 6; i++) {
    append_ok(s, EM_SPOOL_DATA, i, 300 + i);
  }
  expect_pop(s, EM_SPOOL_DATA, 0, 300);
  expect_pop(s, EM_SPOOL_DATA, 1, 301);
  assert_int_equal(em_spool_sync(s), 0);
  expect_pop(s, EM_SPOOL_DATA, 2, 302); /* Not synced: replayed again. */
  append_ok(s, EM_SPOOL_STATE, 6, 306);
  append_ok(s, EM_SPOOL_DATA, 7, 307);
}

static void spool_reopen_after_crash_recovers(void **state) {
  fixture_t *f = *state;
  crash_child(f, steps_append_sync_pop_append);
  em_spool_t *s = open_ok(f, CAP, NULL, 0);
  expect_replay(s, 6, 2, 8, 300);
  em_spool_close(s);
}

static void steps_pop_state_out_of_order(em_spool_t *s) {
  append_ok(s, EM_SPOOL_DATA, 0, 20);
  append_ok(s, EM_SPOOL_DATA, 1, 21);
  append_ok(s, EM_SPOOL_STATE, 2, 22);
  expect_pop(s, EM_SPOOL_STATE, 2, 22);
  assert_int_equal(em_spool_sync(s), 0);
}

static void spool_state_popped_out_of_order_replays_again_after_crash(void **state) {
  fixture_t *f = *state;
  crash_child(f, steps_pop_state_out_of_order);
  em_spool_t *s = open_ok(f, CAP, NULL, 0);
  assert_int_equal(stats_of(s).pending, 3);
  expect_pop(s, EM_SPOOL_STATE, 2, 22);
  expect_pop(s, EM_SPOOL_DATA, 0, 20);
  expect_pop(s, EM_SPOOL_DATA, 1, 21);
  expect_empty(s);
  em_spool_close(s);
}

/* Write-ahead: appends records 0..4 held in flight, acks 1, 3 and 4 (out of order), takes
 * nothing more, then crashes after a sync. */
static void held(em_spool_t *s, uint32_t id, uint64_t *number) {
  uint8_t buf[64];
  fill(buf, id, 40 + id);
  assert_int_equal(em_spool_append_held(s, EM_SPOOL_DATA, buf, 40 + id, number), 0);
}

static void steps_held_acked_out_of_order(em_spool_t *s) {
  uint64_t n[5];
  for (uint32_t i = 0; i < 5; i++) {
    held(s, i, &n[i]);
  }
  assert_int_equal(em_spool_ack(s, n[1]), 0);
  assert_int_equal(em_spool_ack(s, n[3]), 0);
  assert_int_equal(em_spool_ack(s, n[4]), 0);
  assert_int_equal(em_spool_ack(s, n[4]), -ENOENT); /* acked already */
  assert_int_equal(em_spool_sync(s), 0);
}

/* Held records are never peeked by this process; acks out of order leave `done` at the oldest
 * unacked one, so after a crash it is replayed, with everything after it (duplicates of what
 * was acked, never a gap). */
static void spool_held_records_replay_after_crash_from_oldest_unacked(void **state) {
  fixture_t *f = *state;
  em_spool_t *s = open_ok(f, CAP, NULL, 0);
  uint64_t n0 = 0;
  held(s, 0, &n0);
  em_spool_stats_t st = stats_of(s);
  assert_int_equal(st.inflight, 1);
  assert_int_equal(st.pending, 0);
  expect_empty(s); /* in flight: not replayed by the process that sent it */
  assert_int_equal(em_spool_ack(s, n0), 0);
  assert_int_equal(stats_of(s).inflight, 0);
  assert_int_equal(stats_of(s).acked, 1);
  em_spool_close(s);
  s = open_ok(f, CAP, NULL, 0);
  assert_int_equal(stats_of(s).pending, 0); /* acknowledged: gone after a restart */
  em_spool_close(s);

  crash_child(f, steps_held_acked_out_of_order);
  s = open_ok(f, CAP, NULL, 0);
  assert_int_equal(stats_of(s).pending, 5); /* 0 was unacked: 0..4 again, in order */
  for (uint32_t i = 0; i < 5; i++) {
    expect_pop(s, EM_SPOOL_DATA, i, 40 + i);
  }
  expect_empty(s);
  em_spool_close(s);
}

/* A held record released (its send was refused) is pending again, in number order; a taken
 * one (replayed with write-ahead) is held until acked. */
static void spool_release_and_take(void **state) {
  fixture_t *f = *state;
  em_spool_t *s = open_ok(f, CAP, NULL, 0);
  uint64_t n[3];
  for (uint32_t i = 0; i < 3; i++) {
    held(s, i, &n[i]);
  }
  assert_int_equal(em_spool_release(s, n[2]), 0);
  assert_int_equal(em_spool_release(s, n[0]), 0);
  assert_int_equal(em_spool_release(s, n[0]), -ENOENT);
  assert_int_equal(stats_of(s).pending, 2);
  assert_int_equal(stats_of(s).inflight, 1);
  uint8_t buf[64];
  em_spool_kind_t k;
  assert_int_equal(em_spool_peek(s, &k, buf, sizeof(buf)), 40); /* record 0 first */
  uint64_t taken = 99;
  assert_int_equal(em_spool_take(s, &taken), 0);
  assert_int_equal(taken, n[0]);
  assert_int_equal(em_spool_take(s, &taken), -ENOENT); /* nothing peeked */
  expect_pop(s, EM_SPOOL_DATA, 2, 42);
  expect_empty(s);
  assert_int_equal(stats_of(s).inflight, 2);
  assert_int_equal(em_spool_ack(s, n[0]), 0);
  assert_int_equal(em_spool_ack(s, n[1]), 0);
  assert_int_equal(stats_of(s).inflight, 0);
  assert_int_equal(em_spool_append_held(s, EM_SPOOL_DATA, buf, 8, NULL), -EINVAL);
  em_spool_close(s);
  s = open_ok(f, CAP, NULL, 0);
  assert_int_equal(stats_of(s).pending, 0);
  em_spool_close(s);
}

static size_t wrap_len(uint32_t id) {
  return 1 + (size_t)((id * 2654435761u) >> 7) % 3000u;
}

static void spool_wraps_many_laps_with_mixed_sizes(void **state) {
  fixture_t *f = *state;
  em_spool_t *s = open_ok(f, CAP, NULL, 0);
  uint32_t oldest = 0; /* Model: records oldest..next-1 are pending. */
  uint32_t next = 0;
  uint64_t bytes = 0;
  uint64_t appended_bytes = 0;
  for (int round = 0; round < 400; round++) {
    /* Fill to near three quarters of the ring, never evicting, then drain part of it. */
    while (bytes + rec_bytes(wrap_len(next)) + 3100 < CAP * 3 / 4) {
      append_ok(s, EM_SPOOL_DATA, next, wrap_len(next));
      bytes += rec_bytes(wrap_len(next));
      appended_bytes += rec_bytes(wrap_len(next));
      next++;
    }
    uint32_t drain = (next - oldest) / 2 + (uint32_t)round % 3;
    for (uint32_t i = 0; i < drain && oldest < next; i++) {
      expect_pop(s, EM_SPOOL_DATA, oldest, wrap_len(oldest));
      bytes -= rec_bytes(wrap_len(oldest));
      oldest++;
    }
    if (round % 37 == 0) {
      em_spool_close(s);
      s = open_ok(f, CAP, NULL, 0);
    }
    em_spool_stats_t st = stats_of(s);
    assert_int_equal(st.pending, next - oldest);
    assert_int_equal(st.pending_bytes, bytes);
    assert_int_equal(st.dropped, 0);
    assert_int_equal(st.corrupt, 0);
  }
  assert_true(appended_bytes > 50u * CAP);
  while (oldest < next) {
    expect_pop(s, EM_SPOOL_DATA, oldest, wrap_len(oldest));
    oldest++;
  }
  expect_empty(s);
  em_spool_close(s);
}

static void spool_eviction_counts_exact_drops_across_reopen(void **state) {
  fixture_t *f = *state;
  const size_t len = 1000; /* 1024 ring bytes: exactly 64 records fill the ring. */
  em_spool_t *s = open_ok(f, CAP, NULL, 0);
  for (uint32_t i = 0; i < 100; i++) {
    append_ok(s, EM_SPOOL_DATA, i, len);
  }
  em_spool_stats_t st = stats_of(s);
  assert_int_equal(st.pending, 64);
  assert_int_equal(st.dropped, 36);
  assert_int_equal(st.pending_bytes, CAP);
  em_spool_close(s);

  s = open_ok(f, CAP, NULL, 0);
  st = stats_of(s);
  assert_int_equal(st.dropped, 36);
  assert_int_equal(st.pending, 64);
  expect_pop(s, EM_SPOOL_DATA, 36, len);
  /* 2024 bytes at record 36's place: its space is free (popped), record 37 is evicted. */
  append_ok(s, EM_SPOOL_STATE, 100, 2000);
  st = stats_of(s);
  assert_int_equal(st.dropped, 37);
  assert_int_equal(st.pending, 63);
  expect_pop(s, EM_SPOOL_STATE, 100, 2000);
  for (uint32_t i = 38; i < 100; i++) {
    expect_pop(s, EM_SPOOL_DATA, i, len);
  }
  expect_empty(s);
  em_spool_close(s);

  s = open_ok(f, CAP, NULL, 0);
  assert_int_equal(stats_of(s).dropped, 37);
  assert_int_equal(stats_of(s).pending, 0);
  em_spool_close(s);
}

/* Five DATA records of 200 bytes (224 ring bytes each), closed. */
static void write_five(const fixture_t *f) {
  em_spool_t *s = open_ok(f, CAP, NULL, 0);
  for (uint32_t i = 0; i < 5; i++) {
    append_ok(s, EM_SPOOL_DATA, i, 200);
  }
  em_spool_close(s);
}

static void expect_five_but(const fixture_t *f, uint32_t lost) {
  em_spool_t *s = open_ok(f, CAP, NULL, 0);
  em_spool_stats_t st = stats_of(s);
  assert_int_equal(st.corrupt, 1);
  assert_int_equal(st.pending, 4);
  for (uint32_t i = 0; i < 5; i++) {
    if (i != lost) {
      expect_pop(s, EM_SPOOL_DATA, i, 200);
    }
  }
  expect_empty(s);
  /* The spool goes on: a new record lands after the damaged one and replays. */
  append_ok(s, EM_SPOOL_DATA, 5, 200);
  expect_pop(s, EM_SPOOL_DATA, 5, 200);
  em_spool_close(s);
}

static void spool_torn_last_record_is_skipped_and_counted(void **state) {
  fixture_t *f = *state;
  write_five(f);
  uint64_t last = EM_SPOOL_HEADER_BYTES + 4 * rec_bytes(200);
  scribble(f, last + EM_SPOOL_RECORD_HEADER + 120, 80, 0xa5); /* The tail never written. */
  expect_five_but(f, 4);
}

static void spool_corrupt_middle_record_is_skipped_and_counted(void **state) {
  fixture_t *f = *state;
  write_five(f);
  uint64_t mid = EM_SPOOL_HEADER_BYTES + 2 * rec_bytes(200);
  scribble(f, mid + EM_SPOOL_RECORD_HEADER + 57, 1, 0x00);
  expect_five_but(f, 2);
}

static void spool_corruption_after_open_fails_peek_once(void **state) {
  fixture_t *f = *state;
  write_five(f);
  em_spool_t *s = open_ok(f, CAP, NULL, 0);
  scribble(f, EM_SPOOL_HEADER_BYTES + EM_SPOOL_RECORD_HEADER + 3, 1, 0xee);
  uint8_t buf[256];
  em_spool_kind_t k = 0;
  assert_int_equal(em_spool_peek(s, &k, buf, sizeof(buf)), -EIO);
  assert_int_equal(em_spool_pop(s), -ENOENT);
  for (uint32_t i = 1; i < 5; i++) {
    expect_pop(s, EM_SPOOL_DATA, i, 200);
  }
  assert_int_equal(stats_of(s).corrupt, 1);
  em_spool_close(s);
}

static void spool_garbage_file_is_recreated(void **state) {
  fixture_t *f = *state;
  uint8_t junk[8192];
  srand(7);
  for (size_t i = 0; i < sizeof(junk); i++) {
    junk[i] = (uint8_t)rand();
  }
  int fd = open(f->path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  for (int i = 0; i < 12; i++) {
    assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
  }
  close(fd);
  char err[256];
  em_spool_t *s = open_ok(f, CAP, err, sizeof(err));
  assert_non_null(strstr(err, "not a spool"));
  assert_non_null(strstr(err, f->path));
  assert_int_equal(stats_of(s).pending, 0);
  append_ok(s, EM_SPOOL_DATA, 1, 33);
  expect_pop(s, EM_SPOOL_DATA, 1, 33);
  em_spool_close(s);

  struct stat st;
  assert_int_equal(stat(f->path, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  assert_int_equal(st.st_size, EM_SPOOL_HEADER_BYTES + CAP);
}

static void spool_short_file_is_recreated(void **state) {
  fixture_t *f = *state;
  write_five(f);
  assert_int_equal(truncate(f->path, EM_SPOOL_HEADER_BYTES + 1000), 0);
  char err[256];
  em_spool_t *s = open_ok(f, CAP, err, sizeof(err));
  assert_non_null(strstr(err, "shorter"));
  assert_int_equal(stats_of(s).pending, 0);
  append_ok(s, EM_SPOOL_DATA, 9, 10);
  em_spool_close(s);
  s = open_ok(f, CAP, err, sizeof(err));
  assert_string_equal(err, "");
  expect_pop(s, EM_SPOOL_DATA, 9, 10);
  em_spool_close(s);
}

/* A spool path others could write to: a FIFO (which must not block the open), a symbolic
 * link (whose target must not be overwritten) or a directory is refused with a message saying
 * what stands there, and nothing is created or changed. */
static void spool_refuses_what_is_no_regular_file(void **state) {
  fixture_t *f = *state;
  char victim[320];
  snprintf(victim, sizeof(victim), "%s/victim", f->dir);
  static const char precious[] = "not the agent's to overwrite\n";
  static const struct {
    enum { FIFO, LINK, DIRECTORY } kind;
    const char *says;
  } rows[] = {
      {FIFO, "a FIFO, not a regular file: refused"},
      {LINK, "a symbolic link, not a regular file: refused"},
      {DIRECTORY, "Is a directory"},
  };
  alarm(20); /* A blocking open() kills the test instead of hanging the run. */
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    int fd = open(victim, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, precious, sizeof(precious) - 1), (ssize_t)sizeof(precious) - 1);
    close(fd);
    switch (rows[i].kind) {
    case FIFO:
      assert_int_equal(mkfifo(f->path, 0600), 0);
      break;
    case LINK:
      assert_int_equal(symlink(victim, f->path), 0);
      break;
    case DIRECTORY:
      assert_int_equal(mkdir(f->path, 0700), 0);
      break;
    }
    em_spool_t *s = NULL;
    char err[512];
    int rc = em_spool_open(&s, f->path, CAP, err, sizeof(err));
    assert_true(rc < 0);
    assert_null(s);
    if (strstr(err, rows[i].says) == NULL || strstr(err, f->path) == NULL) {
      fail_msg("row %zu: '%s'", i, err);
    }
    struct stat st;
    assert_int_equal(stat(victim, &st), 0);
    assert_int_equal(st.st_size, (off_t)sizeof(precious) - 1);
    assert_int_equal(lstat(f->path, &st), 0); /* still what was planted */
    assert_true(rows[i].kind == FIFO   ? S_ISFIFO(st.st_mode)
                : rows[i].kind == LINK ? S_ISLNK(st.st_mode)
                                       : S_ISDIR(st.st_mode));
    assert_int_equal(rows[i].kind == DIRECTORY ? rmdir(f->path) : unlink(f->path), 0);
  }
  alarm(0);
  unlink(victim);
}

static void spool_write_error_is_reported_and_spool_stays_usable(void **state) {
  fixture_t *f = *state;
  em_spool_t *s = open_ok(f, CAP, NULL, 0);
  struct rlimit old;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
  void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
  struct rlimit low = {.rlim_cur = EM_SPOOL_HEADER_BYTES + 2048, .rlim_max = old.rlim_max};
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &low), 0);
  uint32_t stored = 0;
  int rc = 0;
  for (uint32_t i = 0; i < 20 && rc == 0; i++) {
    uint8_t buf[500];
    fill(buf, i, sizeof(buf));
    rc = em_spool_append(s, EM_SPOOL_DATA, buf, sizeof(buf));
    stored += rc == 0;
  }
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, was);
  assert_int_equal(rc, -EFBIG);
  assert_int_equal(stored, 3); /* 3 x 528 bytes fit below 2048; the fourth crosses it. */
  em_spool_stats_t st = stats_of(s);
  assert_int_equal(st.write_errors, 1);
  assert_int_equal(st.pending, stored);

  append_ok(s, EM_SPOOL_DATA, 100, 500);
  append_ok(s, EM_SPOOL_DATA, 101, 500);
  for (uint32_t i = 0; i < stored; i++) {
    expect_pop(s, EM_SPOOL_DATA, i, 500);
  }
  expect_pop(s, EM_SPOOL_DATA, 100, 500);
  append_ok(s, EM_SPOOL_DATA, 102, 500);
  em_spool_close(s);
  s = open_ok(f, CAP, NULL, 0);
  st = stats_of(s);
  assert_int_equal(st.pending, 2);
  assert_int_equal(st.corrupt, 0);
  expect_pop(s, EM_SPOOL_DATA, 101, 500);
  expect_pop(s, EM_SPOOL_DATA, 102, 500);
  em_spool_close(s);
}

static void spool_rejects_bad_sizes(void **state) {
  fixture_t *f = *state;
  em_spool_t *s = NULL;
  char err[256];
  assert_int_equal(em_spool_open(&s, f->path, EM_SPOOL_MIN_CAPACITY - 8, err, sizeof(err)),
                   -EINVAL);
  assert_null(s);
  assert_non_null(strstr(err, "capacity"));
  s = open_ok(f, CAP + 5, NULL, 0); /* Rounded down to CAP. */
  static uint8_t big[CAP];
  size_t fits = CAP - EM_SPOOL_RECORD_HEADER;
  assert_int_equal(em_spool_append(s, EM_SPOOL_DATA, big, fits + 1), -EMSGSIZE);
  assert_int_equal(em_spool_append(s, EM_SPOOL_DATA, big, 0), -EINVAL);
  assert_int_equal(em_spool_append(s, (em_spool_kind_t)7, big, 10), -EINVAL);
  assert_int_equal(stats_of(s).write_errors, 0);
  append_ok(s, EM_SPOOL_DATA, 1, 10);
  assert_int_equal(em_spool_append(s, EM_SPOOL_DATA, big, fits), 0); /* The whole ring. */
  em_spool_stats_t st = stats_of(s);
  assert_int_equal(st.dropped, 1);
  assert_int_equal(st.pending_bytes, CAP);
  em_spool_kind_t k = 0;
  assert_int_equal(em_spool_peek(s, &k, big, sizeof(big)), (int)fits);
  assert_int_equal(em_spool_pop(s), 0);
  em_spool_close(s);
}

static void spool_peek_with_small_buffer_is_enobufs(void **state) {
  fixture_t *f = *state;
  em_spool_t *s = open_ok(f, CAP, NULL, 0);
  assert_int_equal(em_spool_pop(s), -ENOENT);
  append_ok(s, EM_SPOOL_STATE, 3, 100);
  uint8_t buf[100];
  em_spool_kind_t k = 0;
  assert_int_equal(em_spool_peek(s, &k, buf, 99), -ENOBUFS);
  assert_int_equal(k, EM_SPOOL_STATE);
  assert_int_equal(em_spool_pop(s), -ENOENT);
  assert_int_equal(stats_of(s).pending, 1);
  expect_pop(s, EM_SPOOL_STATE, 3, 100);
  em_spool_close(s);
}

static uint64_t slot_gen(const fixture_t *f, int slot) {
  uint8_t b[8];
  int fd = open(f->path, O_RDONLY);
  assert_true(fd >= 0);
  assert_int_equal(pread(fd, b, sizeof(b), slot * 64 + 8), 8);
  close(fd);
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) {
    v = v << 8 | b[i];
  }
  return v;
}

static void spool_torn_header_slot_falls_back_to_older(void **state) {
  fixture_t *f = *state;
  em_spool_t *s = open_ok(f, CAP, NULL, 0);
  for (uint32_t i = 0; i < 3; i++) {
    append_ok(s, EM_SPOOL_DATA, i, 64);
  }
  expect_pop(s, EM_SPOOL_DATA, 0, 64);
  assert_int_equal(em_spool_sync(s), 0); /* done = 1 */
  expect_pop(s, EM_SPOOL_DATA, 1, 64);
  assert_int_equal(em_spool_sync(s), 0); /* done = 2, in the other slot */
  em_spool_close(s);

  int newest = slot_gen(f, 0) > slot_gen(f, 1) ? 0 : 1;
  scribble(f, (uint64_t)newest * 64 + 20, 30, 0x5a);
  char err[256];
  s = open_ok(f, CAP, err, sizeof(err));
  assert_string_equal(err, "");
  assert_int_equal(stats_of(s).pending, 2);
  expect_pop(s, EM_SPOOL_DATA, 1, 64); /* Replayed again: at-least-once. */
  expect_pop(s, EM_SPOOL_DATA, 2, 64);
  expect_empty(s);
  em_spool_close(s);

  /* Both slots garbage: not a spool. */
  scribble(f, 0, 128, 0x33);
  s = open_ok(f, CAP, err, sizeof(err));
  assert_non_null(strstr(err, "not a spool"));
  em_spool_close(s);
}

static void spool_capacity_change_recreates_only_when_empty(void **state) {
  fixture_t *f = *state;
  em_spool_t *s = open_ok(f, CAP, NULL, 0);
  append_ok(s, EM_SPOOL_DATA, 1, 10);
  em_spool_close(s);
  char err[256];
  s = open_ok(f, 2 * CAP, err, sizeof(err));
  assert_non_null(strstr(err, "keeps its capacity"));
  expect_pop(s, EM_SPOOL_DATA, 1, 10);
  em_spool_close(s);
  s = open_ok(f, 2 * CAP, err, sizeof(err));
  assert_non_null(strstr(err, "recreated"));
  em_spool_close(s);
  struct stat st;
  assert_int_equal(stat(f->path, &st), 0);
  assert_int_equal(st.st_size, EM_SPOOL_HEADER_BYTES + 2 * CAP);
}

/* The lowest free descriptor: it moves when a descriptor leaks. */
static int lowest_free_fd(void) {
  int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  assert_true(fd >= 0);
  close(fd);
  return fd;
}

/*
 * Opens the spool with allocation k failing, for every k until an open needs no more than
 * k - 1 allocations: each failure is -ENOMEM with "out of memory" in err, no spool, no
 * descriptor left open (and nothing leaked, under AddressSanitizer), and the file unchanged,
 * so the next open replays every record. `fresh` starts each round from no file (the create
 * path); otherwise from three records written at capacity `cap_before` (the read path, and
 * the recreate path when the capacity changes with nothing pending).
 */
static void open_fails_cleanly_at_each_allocation(const fixture_t *f, bool fresh,
                                                  uint64_t cap_before, bool popped) {
  unsigned long failed = 0;
  for (unsigned long k = 1;; k++) {
    unlink(f->path);
    if (!fresh) {
      em_spool_t *w = open_ok(f, cap_before, NULL, 0);
      for (uint32_t id = 1; id <= 3; id++) {
        append_ok(w, EM_SPOOL_DATA, id, 100 * id);
      }
      for (uint32_t id = 1; popped && id <= 3; id++) {
        expect_pop(w, EM_SPOOL_DATA, id, 100 * id);
      }
      em_spool_close(w);
    }
    int fd_before = lowest_free_fd();
    em_spool_t *s = (em_spool_t *)&s; /* Not NULL: a failed open must clear it. */
    char err[256];
    em_failing_alloc_arm(k, false);
    int rc = em_spool_open(&s, f->path, CAP, err, sizeof(err));
    em_failing_alloc_disarm();
    if (em_failing_alloc_refused() == 0) { /* The open needs fewer than k allocations. */
      assert_int_equal(rc, 0);
      em_spool_close(s);
      break;
    }
    failed++;
    if (rc != -ENOMEM) {
      fail_msg("allocation %lu failing: open returned %d (%s), want -ENOMEM", k, rc, err);
    }
    assert_null(s);
    assert_non_null(strstr(err, "out of memory"));
    assert_int_equal(lowest_free_fd(), fd_before);
    if (!fresh && !popped) {
      s = open_ok(f, cap_before, NULL, 0);
      for (uint32_t id = 1; id <= 3; id++) {
        expect_pop(s, EM_SPOOL_DATA, id, 100 * id);
      }
      expect_empty(s);
      em_spool_close(s);
    }
  }
  assert_true(failed >= (fresh ? 2u : 3u)); /* The spool, its index, and the scan window. */
}

static void spool_open_fails_cleanly_when_any_allocation_fails(void **state) {
  fixture_t *f = *state;
  open_fails_cleanly_at_each_allocation(f, true, CAP, false);
  open_fails_cleanly_at_each_allocation(f, false, CAP, false);
  open_fails_cleanly_at_each_allocation(f, false, 2 * CAP, true);
}

static int disarm_and_teardown(void **state) {
  em_failing_alloc_disarm();
  return teardown(state);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      EM_FX(spool_replays_in_order_with_payload_bytes),
      EM_FX(spool_state_records_replay_before_older_data),
      EM_FX(spool_flight_records_replay_with_data_and_keep_their_kind),
      EM_FX(spool_flight_records_replay_with_data_and_keep_their_kind),
      EM_FX(spool_reopen_after_close_replays_unpopped),
      EM_FX(spool_reopen_after_crash_recovers),
      EM_FX(spool_state_popped_out_of_order_replays_again_after_crash),
      EM_FX(spool_held_records_replay_after_crash_from_oldest_unacked),
      EM_FX(spool_release_and_take),
      EM_FX(spool_wraps_many_laps_with_mixed_sizes),
      EM_FX(spool_eviction_counts_exact_drops_across_reopen),
      EM_FX(spool_torn_last_record_is_skipped_and_counted),
      EM_FX(spool_corrupt_middle_record_is_skipped_and_counted),
      EM_FX(spool_corruption_after_open_fails_peek_once),
      EM_FX(spool_garbage_file_is_recreated),
      EM_FX(spool_short_file_is_recreated),
      EM_FX(spool_refuses_what_is_no_regular_file),
      EM_FX(spool_write_error_is_reported_and_spool_stays_usable),
      EM_FX(spool_rejects_bad_sizes),
      EM_FX(spool_peek_with_small_buffer_is_enobufs),
      EM_FX(spool_torn_header_slot_falls_back_to_older),
      EM_FX(spool_capacity_change_recreates_only_when_empty),
      cmocka_unit_test_setup_teardown(spool_open_fails_cleanly_when_any_allocation_fails, setup,
                                      disarm_and_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
