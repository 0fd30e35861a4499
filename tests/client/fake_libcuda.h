/*
 * fake_libcuda.h - what test_c_client_gpu shares with fake_libcuda.c, the stand-in for the CUDA
 * driver (libcuda.so.1) on machines without a GPU: the counters it keeps and its controls,
 * which the test looks up with dlsym in the library edgemon_client.h loaded.
 */
#ifndef EDGEMON_TESTS_CLIENT_FAKE_LIBCUDA_H
#define EDGEMON_TESTS_CLIENT_FAKE_LIBCUDA_H

/* Calls made and events made/destroyed; waits counts cuEventSynchronize, cuStreamSynchronize
 * and cuCtxSynchronize, which nothing may call. last_stream: the last cuEventRecord's stream. */
typedef struct {
  unsigned long inits, created, destroyed, records, queries, elapsed, waits;
  void *last_stream;
} fake_cuda_counts_t;

typedef unsigned (*fake_cuda_complete_fn)(unsigned n, const float *times_ms);
typedef unsigned (*fake_cuda_queued_fn)(void);
typedef void (*fake_cuda_set_context_fn)(int id);
typedef void (*fake_cuda_fail_records_fn)(int on);
typedef void (*fake_cuda_counts_fn)(fake_cuda_counts_t *out);

#endif
