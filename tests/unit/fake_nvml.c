/*
 * fake_nvml.c - a stand-in for libnvidia-ml.so.1 on machines without an NVIDIA GPU, for
 * tests/unit/test_gpumem.c: the few NVML entry points collect/gpumem.c calls, with NVML's
 * calling conventions (return codes, the in/out count of the processes call) and a fixed
 * table of compute processes on two devices.
 *
 * Built three times (tests/unit/CMakeLists.txt): FAKE_NVML_V3 exports the _v3, _v2 and
 * unversioned processes calls (libnvidia-ml.so.1 in its own directory, found through
 * LD_LIBRARY_PATH), FAKE_NVML_V2 only _v2 and the unversioned one, neither only the
 * unversioned one, which fills the shorter v1 entries.
 *
 * The environment changes what it answers, read at each call: EM_FAKE_NVML_INIT_ERROR=<code>
 * makes nvmlInit_v2 fail with that code, EM_FAKE_NVML_PROCS_ERROR=<code> makes every processes
 * call fail with it, EM_FAKE_NVML_PROCS_MANY=1 reports 1000 processes (more than any caller's
 * table). Owns nothing; not thread-safe (tests call it from one thread).
 */
#include <stdlib.h>
#include <string.h>

#define FAKE_SUCCESS           0
#define FAKE_UNINITIALIZED     1
#define FAKE_INVALID_ARGUMENT  2
#define FAKE_INSUFFICIENT_SIZE 7

typedef struct {
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
} fake_v2_t;

typedef struct {
  unsigned int pid;
  unsigned long long used_gpu_memory;
} fake_v1_t;

#define MIB (1024ULL * 1024ULL)

/* Device 0 and device 1's compute processes. ~0ULL: NVML_VALUE_NOT_AVAILABLE. */
static const fake_v2_t table[2][3] = {
    {{100, 1024 * MIB, 0xffffffffu, 0xffffffffu},
     {200, 512 * MIB, 0xffffffffu, 0xffffffffu},
     {101, ~0ULL, 0xffffffffu, 0xffffffffu}},
    {{101, 256 * MIB, 0xffffffffu, 0xffffffffu},
     {100, 128 * MIB, 0xffffffffu, 0xffffffffu},
     {300, 64 * MIB, 0xffffffffu, 0xffffffffu}},
};

static int initialised;
static int devices[2]; /* Handles point here. */

static int env_code(const char *name) {
  const char *v = getenv(name);
  return v ? atoi(v) : 0;
}

int nvmlInit_v2(void);
int nvmlShutdown(void);
int nvmlDeviceGetCount_v2(unsigned int *count);
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device);
int nvmlDeviceGetComputeRunningProcesses(void *device, unsigned int *count, fake_v1_t *infos);
#if defined(FAKE_NVML_V3) || defined(FAKE_NVML_V2)
int nvmlDeviceGetComputeRunningProcesses_v2(void *device, unsigned int *count, fake_v2_t *infos);
#endif
#ifdef FAKE_NVML_V3
int nvmlDeviceGetComputeRunningProcesses_v3(void *device, unsigned int *count, fake_v2_t *infos);
#endif

int nvmlInit_v2(void) {
  int code = env_code("EM_FAKE_NVML_INIT_ERROR");
  if (code) {
    return code;
  }
  initialised = 1;
  return FAKE_SUCCESS;
}

int nvmlShutdown(void) {
  if (!initialised) {
    return FAKE_UNINITIALIZED;
  }
  initialised = 0;
  return FAKE_SUCCESS;
}

int nvmlDeviceGetCount_v2(unsigned int *count) {
  if (!initialised) {
    return FAKE_UNINITIALIZED;
  }
  if (!count) {
    return FAKE_INVALID_ARGUMENT;
  }
  *count = 2;
  return FAKE_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
  if (!initialised) {
    return FAKE_UNINITIALIZED;
  }
  if (index >= 2 || !device) {
    return FAKE_INVALID_ARGUMENT;
  }
  *device = &devices[index];
  return FAKE_SUCCESS;
}

/* The device's row, or -1; the common checks of every processes call. */
static int row_of(void *device, const unsigned int *count) {
  if (!initialised) {
    return -FAKE_UNINITIALIZED;
  }
  if (!count) {
    return -FAKE_INVALID_ARGUMENT;
  }
  for (int d = 0; d < 2; d++) {
    if (device == &devices[d]) {
      return d;
    }
  }
  return -FAKE_INVALID_ARGUMENT;
}

/* NVML's contract: *count in is the room, out the processes there are; too little room is
 * INSUFFICIENT_SIZE with *count the number needed. */
static int answer(void *device, unsigned int *count, void *infos, size_t stride) {
  int d = row_of(device, count);
  if (d < 0) {
    return -d;
  }
  int code = env_code("EM_FAKE_NVML_PROCS_ERROR");
  if (code) {
    return code;
  }
  unsigned n = env_code("EM_FAKE_NVML_PROCS_MANY") ? 1000u : 3u;
  if (*count < n) {
    *count = n;
    return FAKE_INSUFFICIENT_SIZE;
  }
  *count = n;
  for (unsigned i = 0; i < n; i++) {
    memcpy((unsigned char *)infos + i * stride, &table[d][i % 3], stride);
  }
  return FAKE_SUCCESS;
}

int nvmlDeviceGetComputeRunningProcesses(void *device, unsigned int *count, fake_v1_t *infos) {
  return answer(device, count, infos, sizeof(fake_v1_t));
}

#if defined(FAKE_NVML_V3) || defined(FAKE_NVML_V2)
int nvmlDeviceGetComputeRunningProcesses_v2(void *device, unsigned int *count, fake_v2_t *infos) {
  return answer(device, count, infos, sizeof(fake_v2_t));
}
#endif

#ifdef FAKE_NVML_V3
int nvmlDeviceGetComputeRunningProcesses_v3(void *device, unsigned int *count, fake_v2_t *infos) {
  return answer(device, count, infos, sizeof(fake_v2_t));
}
#endif
