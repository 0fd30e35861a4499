/*
 * gpumem.h - the GPU memory the target itself holds (`gpu.mem.process`, bytes), from one of two
 * sources chosen once at start:
 *
 *   nvmap  Jetson (L4T r32, r35, r36): <root>/sys/kernel/debug/nvmap/iovmm/clients, one line
 *          per nvmap client ("user  python3  1234  123456K") under a "CLIENT PROCESS PID SIZE"
 *          header and above a "total" line; the lines of the target's pids are summed. A buffer
 *          shared between processes counts in full in each client that holds it, as the kernel
 *          says of this file. debugfs: root or CAP_SYS_ADMIN (the mount point is mode 0700).
 *   NVML   discrete GPUs and Thor: libnvidia-ml.so.1 by dlopen (no NVIDIA header, no link
 *          dependency): nvmlDeviceGetComputeRunningProcesses_v3 (else _v2, else the unversioned
 *          call) on every device, usedGpuMemory of the target's pids summed.
 *
 * Neither: the figure is absent, and em_gpumem_absent() says why (both sources' reasons).
 *
 * The target's pids: a process target and its descendants (each thread's `children` file,
 * breadth first, at most EM_GPUMEM_MAX_PIDS), or a cgroup target's `cgroup.procs`.
 *
 * Two layers, as procfs.h: em_gpumem_parse_nvmap() is a pure parser the fixture and fuzz tests
 * drive; em_gpumem_t reads. em_gpumem_read() may block (the NVML calls take the driver's locks,
 * the nvmap file its clients mutex): it runs on libuv's worker, never on the tick.
 *
 * Owns: the NVML library handle and its nvmlInit_v2 session, the read buffer (EM_GPUMEM_FILE_BYTES)
 * and the NVML process table, allocated in em_gpumem_new(); nothing per read. Threading: one
 * thread at a time (the worker while a read runs, the loop otherwise).
 */
#ifndef EDGEMON_AGENT_GPUMEM_H
#define EDGEMON_AGENT_GPUMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define EM_GPUMEM_MAX_PIDS 256 /* The target's pids summed (a process tree or a cgroup). */
#define EM_GPUMEM_FILE_BYTES                                                                       \
  65536                            /* The nvmap clients file (~60 bytes a client), cgroup.procs.   \
                                    */
#define EM_GPUMEM_LINE_MAX     512 /* A longer nvmap line refuses the file. */
#define EM_GPUMEM_NVML_GPUS    16  /* Devices queried. */
#define EM_GPUMEM_NVML_PROCS   256 /* Compute processes read per device. */
#define EM_GPUMEM_REASON_BYTES 256 /* em_gpumem_absent()'s text, NUL included. */
#define EM_GPUMEM_NVMAP_PATH   "/sys/kernel/debug/nvmap/iovmm/clients"

typedef enum {
  EM_GPUMEM_NONE = 0, /* No source: the figure is absent. */
  EM_GPUMEM_NVMAP,
  EM_GPUMEM_NVML,
} em_gpumem_source_t;

/* One nvmap clients file, summed for a set of pids. */
typedef struct {
  uint64_t bytes;       /* The matching clients' sizes. */
  size_t clients;       /* Client lines of the pids (0: the target holds no nvmap memory). */
  uint64_t total_bytes; /* The "total" line: every client's memory. */
} em_gpumem_nvmap_t;

/*
 * Parses text[0..len) as an nvmap iovmm clients file: its header line (CLIENT PROCESS PID
 * SIZE) first, client lines whose last two fields are the pid (decimal) and the size (decimal
 * with a K, M or G suffix, or bytes without one), blank lines, and one "total" line last. The
 * client lines whose pid is in pids[0..n_pids) are summed. Returns 0 and *out, or -EINVAL (no
 * header, a line longer than EM_GPUMEM_LINE_MAX, a field that does not parse, a size or sum
 * past 2^64, no total line: a file cut short would undercount) with *out zeroed.
 */
int em_gpumem_parse_nvmap(const char *text, size_t len, const pid_t *pids, size_t n_pids,
                          em_gpumem_nvmap_t *out);

typedef struct {
  const char *sys_root;  /* "/" or a fixture: the nvmap file is under <sys_root>/sys/kernel/. */
  const char *proc_root; /* "/proc" or a fixture: the target's children files. */
  const char *nvml_lib;  /* NULL: "libnvidia-ml.so.1" (tests name a stand-in). */
  bool no_nvml;          /* Do not try NVML (tests of the nvmap path alone). */
} em_gpumem_opts_t;

typedef struct em_gpumem em_gpumem_t;

/*
 * Chooses the source: the nvmap file when it opens, else NVML when the library loads, has the
 * entry points, initialises and lists a device. Neither is not an error: the source is NONE
 * and em_gpumem_absent() says why. Strings are copied. Returns 0 and *out, -EINVAL,
 * -ENAMETOOLONG (a root too long for a path), -ENOMEM.
 */
int em_gpumem_new(em_gpumem_t **out, const em_gpumem_opts_t *opts);

/* Shuts NVML down and unloads it, frees. NULL is a no-op. */
void em_gpumem_free(em_gpumem_t *g);

em_gpumem_source_t em_gpumem_source(const em_gpumem_t *g);

/* "nvmap", "NVML (nvmlDeviceGetComputeRunningProcesses_v3)" (or _v2, or the unversioned
 * call), or "none". Static. */
const char *em_gpumem_source_name(const em_gpumem_t *g);

/* Why the last em_gpumem_read() (or, before one, the source's choice) gave no value; NULL when
 * it gave one. Borrowed until the next read or free. */
const char *em_gpumem_absent(const em_gpumem_t *g);

/*
 * The target's pids: `pid` (> 0) and its descendants, or the pids of `cgroup` (a cgroup
 * directory; pid 0). At most `cap`; *n set. Returns 0, -ESRCH (the process is gone, or the
 * cgroup has no process), -ENOENT (no cgroup.procs), -EINVAL.
 */
int em_gpumem_pids(const em_gpumem_t *g, pid_t pid, const char *cgroup, pid_t *pids, size_t cap,
                   size_t *n);

/*
 * Reads the source and sums the memory of pids[0..n). Returns 0 and *bytes (0 when the target
 * holds none), or a negative errno with em_gpumem_absent() saying why: -ENODEV (no source),
 * -EACCES (the nvmap file: what to grant), -EFBIG (a file past EM_GPUMEM_FILE_BYTES), -EINVAL
 * (a file that does not parse), -EIO (an NVML error, its code in the reason), -ENOSPC (more
 * compute processes than EM_GPUMEM_NVML_PROCS on a device). May block: run it on a worker.
 */
int em_gpumem_read(em_gpumem_t *g, const pid_t *pids, size_t n, uint64_t *bytes);

#endif /* EDGEMON_AGENT_GPUMEM_H */
