/*
 * fuzz_pmu_read.c - libFuzzer harness for em_pmu_read(): what a read() of a perf fd returns
 * is the fuzz input.
 *
 * Input: byte 0 chooses the setup (bit 0: a kernel that refuses PERF_FORMAT_GROUP with
 * inherit, so every event reads alone; bit 1: a cgroup target on 1 + bits 2-3 CPUs; bits 4-5:
 * events - 1 of cycles, instructions, task-clock, context-switches; bits 6-7, for a process
 * target: its threads as list_threads answers: 0 the pid alone, 1 three threads with the pid
 * listed second, 2 five threads of which one exits before its open (ESRCH), 3 the listing
 * fails). Then each read() takes one length byte L and the next L bytes (fewer when the
 * input ends): L = 255 answers -ESRCH, L = 254 answers -EIO; a thread other than the pid
 * whose read says ESRCH or end of file is gone and is not read again. Up to 8 em_pmu_read()
 * calls.
 *
 * Checks: em_pmu_new counts the threads it should (em_pmu_threads); em_pmu_read returns 0 or
 * -ESRCH; every reading is either present with an empty reason and a running_ratio in
 * [0, 1], or absent with a value of 0 and a non-empty, terminated reason; every fd opened is
 * closed once by em_pmu_free (the one of the thread that exited too); nothing reads or writes
 * out of bounds (ASan).
 */
#define _GNU_SOURCE

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <linux/perf_event.h>

#include "log.h"
#include "pmu.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PID      4242
#define GONE_TID 4246 /* Exits between the listing and its open. */

typedef struct {
  const uint8_t *data;
  size_t size, pos;
  bool refuse_group;
  unsigned threads; /* Bits 6-7 of byte 0. */
  int next_fd;
  int open_fds;
} fake_t;

static int fake_open(void *ctx, struct perf_event_attr *attr, pid_t pid, int cpu, int group_fd,
                     unsigned long flags) {
  fake_t *f = ctx;
  (void)cpu;
  (void)group_fd;
  if (!(flags & PERF_FLAG_PID_CGROUP) && pid == GONE_TID) {
    return -ESRCH;
  }
  if (f->refuse_group && attr->inherit && (attr->read_format & PERF_FORMAT_GROUP)) {
    return -EINVAL;
  }
  f->open_fds++;
  return f->next_fd++;
}

static ssize_t fake_read(void *ctx, int fd, void *buf, size_t len) {
  fake_t *f = ctx;
  (void)fd;
  if (f->pos >= f->size) {
    return 0;
  }
  size_t want = f->data[f->pos++];
  if (want == 255) {
    return -ESRCH;
  }
  if (want == 254) {
    return -EIO;
  }
  size_t left = f->size - f->pos;
  size_t n = want < left ? want : left;
  if (n > len) {
    n = len;
  }
  memcpy(buf, f->data + f->pos, n);
  f->pos += n;
  return (ssize_t)n;
}

static int fake_close(void *ctx, int fd) {
  fake_t *f = ctx;
  (void)fd;
  f->open_fds--;
  return 0;
}

static int fake_list_threads(void *ctx, pid_t pid, pid_t *out, size_t cap) {
  static const pid_t three[] = {PID + 1, PID, PID + 2};
  static const pid_t five[] = {PID, PID + 1, PID + 2, PID + 3, GONE_TID};
  fake_t *f = ctx;
  const pid_t *list = NULL;
  size_t n = 0;
  if (pid != PID) {
    abort();
  }
  switch (f->threads) {
  case 0:
    list = &three[1];
    n = 1;
    break;
  case 1:
    list = three;
    n = 3;
    break;
  case 2:
    list = five;
    n = 5;
    break;
  default:
    return -EIO;
  }
  for (size_t t = 0; t < n && t < cap; t++) {
    out[t] = list[t];
  }
  return (int)n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) {
    return 0;
  }
  em_log_set_level(EM_LOG_ERROR); /* Absent events and failing reads log at info. */
  static const char *const names[] = {"cycles", "instructions", "task-clock", "context-switches"};
  uint8_t setup = data[0];
  size_t n = 1 + ((setup >> 4) & 3u);
  em_pmu_event_t ev[4];
  for (size_t i = 0; i < n; i++) {
    if (em_pmu_resolve(names[i], &ev[i]) != 0) {
      abort();
    }
  }
  fake_t f = {data, size, 1, (setup & 1u) != 0, setup >> 6, 100, 0};
  em_pmu_sys_t sys = {fake_open, fake_read, fake_close, fake_list_threads, &f};
  em_pmu_target_t target = {.pid = PID};
  static const size_t counted[] = {1, 3, 4, 1}; /* Threads opened, by bits 6-7. */
  size_t want_threads = counted[setup >> 6];
  if (setup & 2u) {
    target.pid = 0;
    target.cgroup = "/"; /* Any directory: the fake kernel does not look at it. */
    target.n_cpus = 1 + ((setup >> 2) & 3u);
    want_threads = 0;
  }
  em_pmu_t *p = NULL;
  if (em_pmu_new(&p, ev, n, &target, &sys) != 0 || em_pmu_threads(p) != want_threads) {
    abort();
  }
  em_pmu_reading_t r[4];
  for (int round = 0; round < 8 && f.pos < f.size; round++) {
    int rc = em_pmu_read(p, r, n);
    if (rc != 0 && rc != -ESRCH) {
      abort();
    }
    for (size_t i = 0; i < n; i++) {
      size_t len = strnlen(r[i].reason, sizeof(r[i].reason));
      if (len == sizeof(r[i].reason)) {
        abort();
      }
      if (r[i].present ? (len != 0 || !(r[i].running_ratio >= 0.0 && r[i].running_ratio <= 1.0))
                       : (len == 0 || r[i].value != 0)) {
        abort();
      }
    }
  }
  em_pmu_free(p);
  if (f.open_fds != 0) {
    abort();
  }
  return 0;
}
