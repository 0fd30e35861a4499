/*
 * fake_libcuda.c - a stand-in for the CUDA driver (libcuda.so.1) on machines without a GPU,
 * built as libcuda.so.1 in a test directory of its own and found through LD_LIBRARY_PATH by
 * test_c_client_gpu, so that edgemon_client.h's dlopen("libcuda.so.1") loads it.
 *
 * It implements the driver entry points the header uses, with the driver's signatures reduced
 * to plain types (CUresult as int; CUcontext, CUevent, CUstream as pointers): cuInit,
 * cuCtxGetCurrent, cuEventCreate, cuEventRecord, cuEventQuery, cuEventElapsedTime and
 * cuEventDestroy_v2. Events complete only when the test says so (fake_cuda_complete), in the
 * order they were recorded, each at a GPU time the test gives, so elapsed times are exact. The
 * calls that would make the CPU wait for the GPU (cuEventSynchronize, cuStreamSynchronize,
 * cuCtxSynchronize) are here too, only to be counted: a test asserts that nothing called them.
 *
 * The test reaches the fake_cuda_* controls with dlopen("libcuda.so.1") + dlsym. State is
 * process-wide and unlocked: the tests drive it from one thread at a time.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fake_libcuda.h"

#define FAKE_SUCCESS         0
#define FAKE_INVALID_VALUE   1
#define FAKE_NO_DEVICE       100
#define FAKE_INVALID_CONTEXT 201
#define FAKE_INVALID_HANDLE  400
#define FAKE_NOT_READY       600
#define FAKE_MAX_QUEUE       1024

#define FAKE_EXPORT __attribute__((visibility("default")))

/* The driver's entry points as the header calls them, and the test's controls. */
FAKE_EXPORT int cuInit(unsigned int flags);
FAKE_EXPORT int cuCtxGetCurrent(void **ctx);
FAKE_EXPORT int cuEventCreate(void **event, unsigned int flags);
FAKE_EXPORT int cuEventRecord(void *event, void *stream);
FAKE_EXPORT int cuEventQuery(void *event);
FAKE_EXPORT int cuEventElapsedTime(float *ms, void *start, void *end);
FAKE_EXPORT int cuEventDestroy_v2(void *event);
FAKE_EXPORT int cuEventSynchronize(void *event);
FAKE_EXPORT int cuStreamSynchronize(void *stream);
FAKE_EXPORT int cuCtxSynchronize(void);
FAKE_EXPORT unsigned fake_cuda_complete(unsigned n, const float *times_ms);
FAKE_EXPORT unsigned fake_cuda_queued(void);
FAKE_EXPORT void fake_cuda_set_context(int id);
FAKE_EXPORT void fake_cuda_fail_records(int on);
FAKE_EXPORT void fake_cuda_counts(fake_cuda_counts_t *out);

/* One event: the context it was made in, and whether and when it completed. */
typedef struct {
  uint32_t magic; /* FAKE_EVENT_MAGIC while alive. */
  int ctx;        /* The context id current when it was made. */
  int recorded;   /* Recorded at least once. */
  int done;       /* Its last recording completed. */
  float t_ms;     /* The GPU time it completed at. */
  void *stream;   /* The stream of its last recording. */
} fake_event_t;

#define FAKE_EVENT_MAGIC 0x45564e54u

static fake_cuda_counts_t counts;
static int current_ctx = 1; /* 0: no current context. */
static int fail_records;
static fake_event_t *queue[FAKE_MAX_QUEUE]; /* Recorded, not completed: in record order. */
static unsigned queued;
static char ctx_storage[8]; /* Context handles are addresses inside it: ctx id n is +n. */

static int fake_alive(const fake_event_t *e) {
  return e != NULL && e->magic == FAKE_EVENT_MAGIC;
}

static void fake_unqueue(const fake_event_t *e) {
  for (unsigned i = 0; i < queued; i++) {
    if (queue[i] == e) {
      memmove(&queue[i], &queue[i + 1], (queued - i - 1) * sizeof(queue[0]));
      queued--;
      return;
    }
  }
}

/* ---- The driver's entry points ---- */

FAKE_EXPORT int cuInit(unsigned int flags) {
  const char *rc = getenv("FAKE_CUDA_INIT_RC"); /* 100: as with no device. */
  counts.inits++;
  if (flags != 0) {
    return FAKE_INVALID_VALUE;
  }
  return rc != NULL ? atoi(rc) : FAKE_SUCCESS;
}

FAKE_EXPORT int cuCtxGetCurrent(void **ctx) {
  if (ctx == NULL) {
    return FAKE_INVALID_VALUE;
  }
  *ctx = current_ctx != 0 ? (void *)&ctx_storage[current_ctx] : NULL;
  return FAKE_SUCCESS;
}

FAKE_EXPORT int cuEventCreate(void **event, unsigned int flags) {
  fake_event_t *e;
  if (event == NULL || flags != 0) { /* CU_EVENT_DEFAULT (0): timing enabled, no blocking. */
    return FAKE_INVALID_VALUE;
  }
  if (current_ctx == 0) {
    return FAKE_INVALID_CONTEXT;
  }
  e = calloc(1, sizeof(*e));
  if (e == NULL) {
    return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
  }
  e->magic = FAKE_EVENT_MAGIC;
  e->ctx = current_ctx;
  counts.created++;
  *event = e;
  return FAKE_SUCCESS;
}

FAKE_EXPORT int cuEventRecord(void *event, void *stream) {
  fake_event_t *e = event;
  if (!fake_alive(e)) {
    return FAKE_INVALID_HANDLE;
  }
  if (e->ctx != current_ctx) {
    return FAKE_INVALID_CONTEXT;
  }
  if (fail_records) {
    return 700; /* CUDA_ERROR_ILLEGAL_ADDRESS */
  }
  if (queued == FAKE_MAX_QUEUE) {
    return FAKE_INVALID_VALUE;
  }
  fake_unqueue(e); /* Recorded again before it completed: the new recording counts. */
  e->recorded = 1;
  e->done = 0;
  e->stream = stream;
  queue[queued++] = e;
  counts.records++;
  counts.last_stream = stream;
  return FAKE_SUCCESS;
}

FAKE_EXPORT int cuEventQuery(void *event) {
  const fake_event_t *e = event;
  counts.queries++;
  if (!fake_alive(e)) {
    return FAKE_INVALID_HANDLE;
  }
  return !e->recorded || e->done ? FAKE_SUCCESS : FAKE_NOT_READY;
}

FAKE_EXPORT int cuEventElapsedTime(float *ms, void *start, void *end) {
  const fake_event_t *a = start;
  const fake_event_t *b = end;
  counts.elapsed++;
  if (ms == NULL || !fake_alive(a) || !fake_alive(b) || !a->recorded || !b->recorded) {
    return FAKE_INVALID_HANDLE;
  }
  if (!a->done || !b->done) {
    return FAKE_NOT_READY;
  }
  *ms = b->t_ms - a->t_ms;
  return FAKE_SUCCESS;
}

FAKE_EXPORT int cuEventDestroy_v2(void *event) {
  fake_event_t *e = event;
  if (!fake_alive(e)) {
    return FAKE_INVALID_HANDLE;
  }
  fake_unqueue(e);
  e->magic = 0;
  free(e);
  counts.destroyed++;
  return FAKE_SUCCESS;
}

/* The calls that block the CPU until the GPU catches up: counted, never to be called. */
FAKE_EXPORT int cuEventSynchronize(void *event) {
  (void)event;
  counts.waits++;
  return FAKE_SUCCESS;
}
FAKE_EXPORT int cuStreamSynchronize(void *stream) {
  (void)stream;
  counts.waits++;
  return FAKE_SUCCESS;
}
FAKE_EXPORT int cuCtxSynchronize(void) {
  counts.waits++;
  return FAKE_SUCCESS;
}

/* ---- The test's controls ---- */

/* Completes the oldest `n` recorded events, at GPU times times_ms[0..n). Returns how many. */
FAKE_EXPORT unsigned fake_cuda_complete(unsigned n, const float *times_ms) {
  unsigned i;
  for (i = 0; i < n && queued != 0; i++) {
    fake_event_t *e = queue[0];
    e->done = 1;
    e->t_ms = times_ms[i];
    fake_unqueue(e);
  }
  return i;
}

/* Events recorded and not completed yet. */
FAKE_EXPORT unsigned fake_cuda_queued(void) {
  return queued;
}

/* The context current in every thread: an id 1..7, or 0 for none. */
FAKE_EXPORT void fake_cuda_set_context(int id) {
  current_ctx = id >= 0 && id < (int)sizeof(ctx_storage) ? id : 0;
}

/* cuEventRecord fails while `on`. */
FAKE_EXPORT void fake_cuda_fail_records(int on) {
  fail_records = on;
}

FAKE_EXPORT void fake_cuda_counts(fake_cuda_counts_t *out) {
  *out = counts;
}
