/*
 * test_c_client_gpu.c - the header-only C client's GPU spans (firmware/client/c/edgemon_client.h:
 * em_client_gpu_span_begin/_end, em_client_gpu_poll, EM_CLIENT_GPU_SPAN) on a machine without
 * a GPU.
 *
 * The header dlopen()s "libcuda.so.1"; ctest points LD_LIBRARY_PATH at a directory holding
 * fake_libcuda.c built under that name (and EM_TEST_FAKE_CUDA at the file, for emulators that
 * set LD_LIBRARY_PATH themselves), a stand-in for the driver whose events complete only
 * when the test says so (fake_cuda_complete), at GPU times the test gives. The test reaches its
 * controls with dlopen + dlsym. The spans go to a real bound socket and are decoded with proto's
 * reference em_span_unpack. Covered: the CPU span at once and "<stage>.gpu" later, with the
 * recording span's frame id, its CPU start and the exact elapsed time; nothing waits (the fake
 * counts cuEventSynchronize, cuStreamSynchronize and cuCtxSynchronize: none called); pending
 * pairs resolved oldest first up to the first incomplete; the pool of EM_CLIENT_GPU_PAIRS pairs
 * drops the oldest, counts it and reuses its events; the stream given is the one recorded on;
 * a context change makes the events again; no current context, a failing record and a name too
 * long for ".gpu" leave the plain CPU span; close forgets the pending pairs; a thread has its
 * own pool, destroyed when it ends.
 *
 * The same executable runs in two more modes (EM_TEST_CUDA, set by ctest): "absent" with no
 * libcuda.so.1 to be found, and "nodevice" with the fake's cuInit failing as without a device:
 * GPU spans are the plain CPU spans there, and gpu_off says why.
 */
#define _GNU_SOURCE /* mkdtemp under -std=c11. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "edgemon/wire.h"
#include "edgemon_client.h"

#include "bound_socket.h"
#include "fake_libcuda.h"

/* ---- The fake driver's controls ---- */

static struct {
  fake_cuda_complete_fn complete;
  fake_cuda_queued_fn queued;
  fake_cuda_set_context_fn set_context;
  fake_cuda_fail_records_fn fail_records;
  fake_cuda_counts_fn counts;
} fake;

static void *fake_sym(void *lib, const char *name) {
  void *sym = dlsym(lib, name);
  if (sym == NULL) {
    fprintf(stderr, "libcuda.so.1 is not the test's fake (no %s): check LD_LIBRARY_PATH\n", name);
  }
  assert_non_null(sym);
  return sym;
}

/* Loads the fake and looks its controls up: "libcuda.so.1" through LD_LIBRARY_PATH, else the
 * file EM_TEST_FAKE_CUDA names (an emulator may set LD_LIBRARY_PATH itself). Either way the
 * header's dlopen("libcuda.so.1") then gets this library: the one of that soname loaded. */
static int fake_load(void) {
  const char *path = getenv("EM_TEST_FAKE_CUDA");
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL && path != NULL && path[0] != '\0') {
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }
  if (lib == NULL) {
    return -1;
  }
  void *sym;
  sym = fake_sym(lib, "fake_cuda_complete");
  memcpy(&fake.complete, &sym, sizeof(sym));
  sym = fake_sym(lib, "fake_cuda_queued");
  memcpy(&fake.queued, &sym, sizeof(sym));
  sym = fake_sym(lib, "fake_cuda_set_context");
  memcpy(&fake.set_context, &sym, sizeof(sym));
  sym = fake_sym(lib, "fake_cuda_fail_records");
  memcpy(&fake.fail_records, &sym, sizeof(sym));
  sym = fake_sym(lib, "fake_cuda_counts");
  memcpy(&fake.counts, &sym, sizeof(sym));
  return 0;
}

static fake_cuda_counts_t fake_counts(void) {
  fake_cuda_counts_t out;
  fake.counts(&out);
  return out;
}

/* Completes the oldest two recorded events (one pair) at GPU times a and b (ms). */
static void complete_pair(float a, float b) {
  const float t[2] = {a, b};
  assert_int_equal(fake.complete(2, t), 2);
}

/* ---- The receiver and the client ---- */

typedef struct {
  char dir[64];
  char path[EM_CLIENT_PATH_BYTES];
  int fd;
  em_client_t c;
} rig_t;

static rig_t rig;

static int rig_setup(void **state) {
  memset(&rig, 0, sizeof(rig));
  snprintf(rig.dir, sizeof(rig.dir), "/tmp/em-gpu-XXXXXX");
  assert_non_null(mkdtemp(rig.dir));
  snprintf(rig.path, sizeof(rig.path), "%s/spans.sock", rig.dir);
  rig.fd = bound_socket(rig.path, SOCK_DGRAM);
  assert_int_equal(em_client_open(&rig.c, rig.path), 0);
  if (fake.set_context != NULL) {
    fake.set_context(1);
    fake.fail_records(0);
  }
  *state = &rig;
  return 0;
}

static int rig_teardown(void **state) {
  (void)state;
  em_client_close(&rig.c);
  close(rig.fd);
  unlink(rig.path);
  rmdir(rig.dir);
  if (fake.counts != NULL) {
    assert_int_equal(fake_counts().waits, 0); /* Nothing ever waited for the GPU. */
  }
  return 0;
}

/* The next datagram, decoded; 0 when one came, -1 when none is queued (never waits). */
static int rig_next(em_span_t *out) {
  uint8_t buf[256];
  ssize_t n = recv(rig.fd, buf, sizeof(buf), MSG_DONTWAIT);
  if (n < 0) {
    assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
    return -1;
  }
  assert_int_equal(n, EM_SPAN_DGRAM_BYTES);
  assert_int_equal(em_span_unpack(buf, (size_t)n, out), 0);
  return 0;
}

static void expect_span(const char *stage, uint64_t frame_id, em_span_t *got) {
  assert_int_equal(rig_next(got), 0);
  assert_int_equal(got->kind, EM_DGRAM_SPAN);
  assert_string_equal(got->stage, stage);
  assert_true(got->frame_id == frame_id);
}

static void expect_none(void) {
  em_span_t got;
  assert_int_equal(rig_next(&got), -1);
}

/* One GPU span of `stage` at frame `frame_id` on the default stream, CPU span drained. */
static void gpu_span(const char *stage, uint64_t frame_id) {
  em_span_t got;
  em_client_set_frame(&rig.c, frame_id);
  em_client_gpu_span_t g = em_client_gpu_span_begin(&rig.c, stage, NULL);
  assert_int_equal(em_client_gpu_span_end(&g), 0);
  expect_span(stage, frame_id, &got);
}

/* ---- With the fake driver ---- */

static void gpu_time_lands_as_its_own_stage_with_the_recording_spans_frame_and_start(void **s) {
  (void)s;
  void *stream = (void *)(uintptr_t)0x5a00;
  em_span_t cpu, got;
  em_client_set_frame(&rig.c, 41);
  uint64_t before = em_client_now_ns();
  em_client_gpu_span_t g = em_client_gpu_span_begin(&rig.c, "infer", stream);
  assert_int_equal(g.pair >= 0, 1);
  assert_true(fake_counts().last_stream == stream); /* The start, on the stream given. */
  assert_int_equal(em_client_gpu_span_end(&g), 0);
  uint64_t after = em_client_now_ns();
  assert_true(fake_counts().last_stream == stream);
  em_client_set_frame(&rig.c, 42); /* A new frame before the GPU finishes. */
  expect_span("infer", 41, &cpu);
  assert_true(before <= cpu.start_ns && cpu.start_ns + cpu.duration_ns <= after);
  expect_none(); /* The GPU has not finished: nothing sent, nothing waited for. */
  assert_int_equal(em_client_gpu_pending(&rig.c), 1);
  assert_int_equal(em_client_gpu_poll(&rig.c), 0);

  complete_pair(100.0f, 103.25f);                        /* 3.25 ms of GPU time. */
  g = em_client_gpu_span_begin(&rig.c, "infer", stream); /* Resolves the first pair. */
  expect_span("infer.gpu", 41, &got);
  assert_true(got.start_ns == cpu.start_ns); /* Anchored at the CPU span's start. */
  assert_true(got.duration_ns == 3250000u);
  assert_int_equal(em_client_gpu_span_end(&g), 0);
  expect_span("infer", 42, &got);
  expect_none();
  assert_true(rig.c.gpu_counters[EM_CLIENT_GPU_RECORDED] == 2);
  assert_true(rig.c.gpu_counters[EM_CLIENT_GPU_RESOLVED] == 1);
  assert_true(rig.c.gpu_counters[EM_CLIENT_GPU_DROPPED] == 0);
  assert_true(rig.c.gpu_counters[EM_CLIENT_GPU_FAILED] == 0);
  assert_null(rig.c.gpu_off);
}

static void pending_pairs_resolve_oldest_first_up_to_the_first_incomplete(void **s) {
  (void)s;
  em_span_t got;
  for (uint64_t f = 1; f <= 3; f++) {
    gpu_span("infer", f);
  }
  const float t[4] = {0.0f, 1.0f, 5.0f, 7.0f}; /* Frames 1 and 2 done, 3 still running. */
  assert_int_equal(fake.complete(4, t), 4);
  assert_int_equal(em_client_gpu_poll(&rig.c), 2);
  expect_span("infer.gpu", 1, &got);
  assert_true(got.duration_ns == 1000000u);
  expect_span("infer.gpu", 2, &got);
  assert_true(got.duration_ns == 2000000u);
  expect_none();
  assert_int_equal(em_client_gpu_poll(&rig.c), 0);
  complete_pair(10.0f, 10.5f);
  assert_int_equal(em_client_gpu_poll(&rig.c), 1);
  expect_span("infer.gpu", 3, &got);
  assert_true(got.duration_ns == 500000u);
  assert_int_equal(em_client_gpu_pending(&rig.c), 0);
}

static void pool_drops_the_oldest_pending_pair_counts_it_and_reuses_its_events(void **s) {
  (void)s;
  em_span_t got;
  fake_cuda_counts_t at0 = fake_counts();
  for (uint64_t f = 1; f <= EM_CLIENT_GPU_PAIRS + 1; f++) { /* One more than the pool. */
    gpu_span("infer", f);
  }
  fake_cuda_counts_t at1 = fake_counts();
  assert_true(at1.created - at0.created <= 2u * EM_CLIENT_GPU_PAIRS);
  assert_true(at1.destroyed == at0.destroyed);
  assert_true(rig.c.gpu_counters[EM_CLIENT_GPU_DROPPED] == 1);
  assert_int_equal(em_client_gpu_pending(&rig.c), EM_CLIENT_GPU_PAIRS);
  /* The dropped pair's events were recorded again: 2 * PAIRS events still running. */
  assert_int_equal(fake.queued(), 2u * EM_CLIENT_GPU_PAIRS);
  for (uint64_t f = 2; f <= EM_CLIENT_GPU_PAIRS + 1; f++) { /* Frame 1 was given up. */
    complete_pair(0.0f, 1.0f);
    assert_int_equal(em_client_gpu_poll(&rig.c), 1);
    expect_span("infer.gpu", f, &got);
    assert_true(got.duration_ns == 1000000u);
  }
  for (uint64_t f = 100; f < 140; f++) { /* A GPU that keeps up: the same events serve. */
    gpu_span("infer", f);
    complete_pair(2.0f, 4.0f);
    assert_int_equal(em_client_gpu_poll(&rig.c), 1);
    expect_span("infer.gpu", f, &got);
    assert_true(got.duration_ns == 2000000u);
  }
  assert_true(fake_counts().created == at1.created);
  assert_true(rig.c.gpu_counters[EM_CLIENT_GPU_DROPPED] == 1);
  assert_true(rig.c.dropped[EM_CLIENT_DROP_QUEUE_FULL] == 0);
}

static void events_made_in_another_context_are_made_again(void **s) {
  (void)s;
  em_span_t got;
  gpu_span("infer", 1);
  complete_pair(0.0f, 1.0f);
  assert_int_equal(em_client_gpu_poll(&rig.c), 1);
  expect_span("infer.gpu", 1, &got);
  fake_cuda_counts_t at0 = fake_counts();
  fake.set_context(2);
  gpu_span("infer", 2);
  fake_cuda_counts_t at1 = fake_counts();
  assert_true(at1.destroyed - at0.destroyed == 2 && at1.created - at0.created == 2);
  complete_pair(3.0f, 9.0f);
  assert_int_equal(em_client_gpu_poll(&rig.c), 1);
  expect_span("infer.gpu", 2, &got);
  assert_true(got.duration_ns == 6000000u);
  assert_true(rig.c.gpu_counters[EM_CLIENT_GPU_FAILED] == 0);
}

static void no_current_context_failing_records_and_long_names_send_the_cpu_span_only(void **s) {
  (void)s;
  em_span_t got;
  fake.set_context(0);
  gpu_span("infer", 1);
  assert_non_null(rig.c.gpu_off);
  assert_non_null(strstr(rig.c.gpu_off, "context"));
  assert_int_equal(em_client_gpu_pending(&rig.c), 0);

  fake.set_context(1);
  fake.fail_records(1);
  gpu_span("infer", 2);
  assert_true(rig.c.gpu_counters[EM_CLIENT_GPU_FAILED] == 1);
  fake.fail_records(0);

  const char *name = "ssssssssssssssssssssssssssss"; /* 28 bytes: no room for ".gpu". */
  unsigned long records = fake_counts().records;
  gpu_span(name, 3);
  assert_true(fake_counts().records == records);
  assert_true(rig.c.gpu_counters[EM_CLIENT_GPU_FAILED] == 2);
  assert_int_equal(em_client_gpu_pending(&rig.c), 0);

  gpu_span("infer", 4); /* And back to measuring. */
  assert_null(rig.c.gpu_off);
  complete_pair(1.0f, 2.0f);
  assert_int_equal(em_client_gpu_poll(&rig.c), 1);
  expect_span("infer.gpu", 4, &got);
}

static void macro_times_the_block_and_its_gpu_work(void **s) {
  (void)s;
  em_span_t got;
  em_client_set_frame(&rig.c, 9);
  int ran = 0;
  EM_CLIENT_GPU_SPAN(&rig.c, "infer", NULL) {
    ran++;
  }
  assert_int_equal(ran, 1);
  expect_span("infer", 9, &got);
  complete_pair(0.0f, 0.5f);
  assert_int_equal(em_client_gpu_poll(&rig.c), 1);
  expect_span("infer.gpu", 9, &got);
  assert_true(got.duration_ns == 500000u);
}

static void close_forgets_pending_pairs_and_frees_the_pool_for_another_client(void **s) {
  (void)s;
  em_span_t got;
  gpu_span("infer", 1);
  em_client_t other;
  assert_int_equal(em_client_open(&other, rig.path), 0);
  em_client_gpu_span_t g = em_client_gpu_span_begin(&other, "other", NULL);
  assert_int_equal(g.pair, -1); /* This thread's pool is rig.c's. */
  assert_non_null(strstr(other.gpu_off, "another client"));
  assert_int_equal(em_client_gpu_span_end(&g), 0);
  expect_span("other", 0, &got);

  em_client_close(&rig.c);
  complete_pair(0.0f, 1.0f); /* rig.c's pair completes after its close: never sent. */
  g = em_client_gpu_span_begin(&other, "other", NULL); /* The pool is other's now. */
  assert_true(g.pair >= 0);
  assert_int_equal(em_client_gpu_span_end(&g), 0);
  expect_span("other", 0, &got);
  expect_none();
  complete_pair(0.0f, 1.0f);
  assert_int_equal(em_client_gpu_poll(&other), 1);
  expect_span("other.gpu", 0, &got);
  expect_none();
  em_client_close(&other);
  assert_int_equal(em_client_gpu_pending(&other), 0);
}

typedef struct {
  em_client_t *c;
  unsigned pending_at_end;
} thread_arg_t;

static void *thread_main(void *p) {
  thread_arg_t *a = p;
  em_client_t c;
  assert_int_equal(em_client_open(&c, rig.path), 0);
  em_client_gpu_span_t g = em_client_gpu_span_begin(&c, "worker", NULL);
  (void)em_client_gpu_span_end(&g);
  a->pending_at_end = em_client_gpu_pending(&c);
  /* Left pending: the thread's end destroys its pool's events. */
  em_client_close(&c);
  (void)a->c;
  return NULL;
}

static void a_thread_has_its_own_pool_destroyed_when_it_ends(void **s) {
  (void)s;
  em_span_t got;
  gpu_span("infer", 1); /* This thread's pair, pending. */
  fake_cuda_counts_t at0 = fake_counts();
  thread_arg_t arg = {&rig.c, 0};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, thread_main, &arg), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(arg.pending_at_end, 1);
  expect_span("worker", 0, &got);
  fake_cuda_counts_t at1 = fake_counts();
  assert_true(at1.created - at0.created == 2);
  assert_true(at1.destroyed - at0.destroyed == 2); /* Its events, when it ended. */
  complete_pair(0.0f, 2.0f);                       /* This thread's pair is still here. */
  assert_int_equal(em_client_gpu_poll(&rig.c), 1);
  expect_span("infer.gpu", 1, &got);
  assert_true(got.duration_ns == 2000000u);
}

/* ---- Without a GPU: no driver, or a driver without a device ---- */

static void without_a_gpu_gpu_spans_are_plain_cpu_spans(void **s) {
  (void)s;
  const char *mode = getenv("EM_TEST_CUDA");
  em_span_t got;
  for (uint64_t f = 1; f <= 3; f++) {
    gpu_span("infer", f);
    assert_int_equal(em_client_gpu_poll(&rig.c), 0);
    expect_none();
  }
  EM_CLIENT_GPU_SPAN(&rig.c, "post", NULL) {}
  expect_span("post", 3, &got);
  assert_non_null(rig.c.gpu_off);
  if (strcmp(mode, "absent") == 0) {
    assert_non_null(strstr(rig.c.gpu_off, "libcuda.so.1"));
  } else {
    assert_non_null(strstr(rig.c.gpu_off, "cuInit"));
    assert_true(fake_counts().created == 0 && fake_counts().inits == 1);
  }
  for (int i = 0; i < EM_CLIENT_GPU_COUNT; i++) {
    assert_true(rig.c.gpu_counters[i] == 0);
  }
  assert_int_equal(em_client_gpu_pending(&rig.c), 0);
}

int main(void) {
  const char *mode = getenv("EM_TEST_CUDA");
  if (mode == NULL || strcmp(mode, "fake") == 0) {
    if (fake_load() != 0) {
      fprintf(stderr,
              "test_c_client_gpu: no libcuda.so.1 (%s): set LD_LIBRARY_PATH to the "
              "fake's directory, or EM_TEST_FAKE_CUDA to the file\n",
              dlerror());
      return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            gpu_time_lands_as_its_own_stage_with_the_recording_spans_frame_and_start, rig_setup,
            rig_teardown),
        cmocka_unit_test_setup_teardown(
            pending_pairs_resolve_oldest_first_up_to_the_first_incomplete, rig_setup, rig_teardown),
        cmocka_unit_test_setup_teardown(
            pool_drops_the_oldest_pending_pair_counts_it_and_reuses_its_events, rig_setup,
            rig_teardown),
        cmocka_unit_test_setup_teardown(events_made_in_another_context_are_made_again, rig_setup,
                                        rig_teardown),
        cmocka_unit_test_setup_teardown(
            no_current_context_failing_records_and_long_names_send_the_cpu_span_only, rig_setup,
            rig_teardown),
        cmocka_unit_test_setup_teardown(macro_times_the_block_and_its_gpu_work, rig_setup,
                                        rig_teardown),
        cmocka_unit_test_setup_teardown(
            close_forgets_pending_pairs_and_frees_the_pool_for_another_client, rig_setup,
            rig_teardown),
        cmocka_unit_test_setup_teardown(a_thread_has_its_own_pool_destroyed_when_it_ends, rig_setup,
                                        rig_teardown),
    };
    return cmocka_run_group_tests_name("test_c_client_gpu", tests, NULL, NULL);
  }
  if (strcmp(mode, "absent") == 0) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib != NULL) { /* A real driver on this machine: the absent case cannot be made. */
      printf("test_c_client_gpu (absent) skipped: a libcuda.so.1 is installed here\n");
      return 77;
    }
  } else if (strcmp(mode, "nodevice") == 0) {
    if (fake_load() != 0) {
      fprintf(stderr, "test_c_client_gpu: no fake libcuda.so.1: %s\n", dlerror());
      return 1;
    }
  } else {
    fprintf(stderr, "test_c_client_gpu: EM_TEST_CUDA is fake, absent or nodevice\n");
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(without_a_gpu_gpu_spans_are_plain_cpu_spans, rig_setup,
                                      rig_teardown),
  };
  return cmocka_run_group_tests_name(mode, tests, NULL, NULL);
}
