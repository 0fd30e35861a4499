/*
 * gpumem.c - see gpumem.h. The nvmap parser walks the text line by line without copying it;
 * the reader keeps one buffer for the files it reads (the nvmap clients file, a children file,
 * cgroup.procs) and one table for NVML's answer, both sized at em_gpumem_new().
 */
#define _POSIX_C_SOURCE 200809L

#include "gpumem.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "edgemon/common/file.h"

#define PATH_BYTES 4096

/* ---- NVML, declared here (no NVIDIA header): the types and calls this file uses. ---- */

typedef int nvml_return_t; /* nvmlReturn_t: NVML_SUCCESS 0. */
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_VALUE_NOT_AVAILABLE     (~0ULL) /* usedGpuMemory when the driver cannot say. */
typedef struct nvml_device *nvml_device_t;

/* nvmlProcessInfo_t as _v3 and _v2 fill it (nvmlProcessInfo_v2_t). */
typedef struct {
  unsigned int pid;
  unsigned long long used_gpu_memory; /* bytes */
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
} nvml_process_v2_t;

/* nvmlProcessInfo_v1_t: what the unversioned call fills. */
typedef struct {
  unsigned int pid;
  unsigned long long used_gpu_memory; /* bytes */
} nvml_process_v1_t;

typedef nvml_return_t (*nvml_processes_fn)(nvml_device_t, unsigned int *, void *);

typedef struct {
  void *lib;
  nvml_return_t (*init)(void);
  nvml_return_t (*shutdown)(void);
  nvml_processes_fn processes;
  const char *call; /* The processes call's name, for the reason and the log. */
  size_t stride;    /* Bytes of one process entry it fills. */
  unsigned count;
  nvml_device_t dev[EM_GPUMEM_NVML_GPUS];
} nvml_t;

struct em_gpumem {
  em_gpumem_source_t source;
  char nvmap_path[PATH_BYTES];
  char proc_root[PATH_BYTES];
  nvml_t nvml;
  char *buf;                        /* EM_GPUMEM_FILE_BYTES */
  unsigned char *procs;             /* EM_GPUMEM_NVML_PROCS entries of nvml.stride bytes */
  char why[EM_GPUMEM_REASON_BYTES]; /* "" when the last read gave a value. */
};

/* ---- the nvmap parser ------------------------------------------------------------------ */

static bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\r';
}

/* Splits line[0..len) into at most `cap` fields; returns how many there are (may exceed cap). */
static size_t fields(const char *line, size_t len, const char **start, size_t *flen, size_t cap) {
  size_t n = 0, i = 0;
  while (i < len) {
    while (i < len && is_blank(line[i])) {
      i++;
    }
    if (i == len) {
      break;
    }
    size_t s = i;
    while (i < len && !is_blank(line[i])) {
      i++;
    }
    if (n < cap) {
      start[n] = line + s;
      flen[n] = i - s;
    }
    n++;
  }
  return n;
}

/* A decimal of 1..20 digits into *out; false on anything else or past 2^64. */
static bool decimal(const char *s, size_t len, uint64_t *out) {
  uint64_t v = 0;
  if (len == 0 || len > 20) {
    return false;
  }
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9') {
      return false;
    }
    uint64_t d = (uint64_t)(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) {
      return false;
    }
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

/* A size: digits, then K, M or G (KiB, MiB, GiB as the kernel's K() shift), or bytes. */
static bool size_bytes(const char *s, size_t len, uint64_t *out) {
  unsigned shift = 0;
  if (len > 0) {
    char u = s[len - 1];
    shift = u == 'K' ? 10 : u == 'M' ? 20 : u == 'G' ? 30 : 0;
    len -= shift ? 1 : 0;
  }
  uint64_t v;
  if (!decimal(s, len, &v) || (shift && v > (UINT64_MAX >> shift))) {
    return false;
  }
  *out = v << shift;
  return true;
}

static bool word_is(const char *s, size_t len, const char *word) {
  return len == strlen(word) && memcmp(s, word, len) == 0;
}

static bool has_pid(const pid_t *pids, size_t n, uint64_t pid) {
  for (size_t i = 0; i < n; i++) {
    if (pids[i] > 0 && (uint64_t)pids[i] == pid) {
      return true;
    }
  }
  return false;
}

/* One line after the header: 1 total, 0 a client (summed when its pid is one of pids), -1 bad. */
static int nvmap_line(const char *line, size_t len, const pid_t *pids, size_t n_pids,
                      em_gpumem_nvmap_t *r) {
  const char *f[4];
  size_t fl[4];
  size_t n = fields(line, len, f, fl, 4);
  uint64_t size = 0, pid = 0;
  if (n == 2 && word_is(f[0], fl[0], "total")) {
    if (!size_bytes(f[1], fl[1], &size)) {
      return -1;
    }
    r->total_bytes = size;
    return 1;
  }
  /* CLIENT PROCESS PID SIZE: the client and process names may hold blanks, so the pid and
   * the size are read from the end. */
  const char *tail[2];
  size_t tl[2];
  size_t end = len;
  for (int k = 1; k >= 0; k--) {
    while (end > 0 && is_blank(line[end - 1])) {
      end--;
    }
    size_t s = end;
    while (s > 0 && !is_blank(line[s - 1])) {
      s--;
    }
    tail[k] = line + s;
    tl[k] = end - s;
    end = s;
  }
  if (n < 3 || !decimal(tail[0], tl[0], &pid) || !size_bytes(tail[1], tl[1], &size)) {
    return -1;
  }
  if (has_pid(pids, n_pids, pid)) {
    if (r->bytes > UINT64_MAX - size) {
      return -1;
    }
    r->bytes += size;
    r->clients++;
  }
  return 0;
}

int em_gpumem_parse_nvmap(const char *text, size_t len, const pid_t *pids, size_t n_pids,
                          em_gpumem_nvmap_t *out) {
  if (!out) {
    return -EINVAL;
  }
  memset(out, 0, sizeof(*out));
  if (!text || (n_pids && !pids)) {
    return -EINVAL;
  }
  em_gpumem_nvmap_t r = {0};
  bool header = false, total = false;
  size_t pos = 0;
  while (pos < len) {
    const char *nl = memchr(text + pos, '\n', len - pos);
    size_t line_len = nl ? (size_t)(nl - (text + pos)) : len - pos;
    const char *line = text + pos;
    pos += line_len + (nl ? 1 : 0);
    if (line_len > EM_GPUMEM_LINE_MAX || memchr(line, '\0', line_len)) {
      return -EINVAL;
    }
    const char *f[5];
    size_t fl[5];
    size_t n = fields(line, line_len, f, fl, 5);
    if (n == 0) {
      continue; /* Blank. */
    }
    if (total) {
      return -EINVAL; /* Nothing follows the total. */
    }
    if (!header) {
      header = n == 4 && word_is(f[0], fl[0], "CLIENT") && word_is(f[1], fl[1], "PROCESS") &&
               word_is(f[2], fl[2], "PID") && word_is(f[3], fl[3], "SIZE");
      if (!header) {
        return -EINVAL;
      }
      continue;
    }
    int rc = nvmap_line(line, line_len, pids, n_pids, &r);
    if (rc < 0) {
      return -EINVAL;
    }
    total = rc == 1;
  }
  if (!total) {
    return -EINVAL;
  }
  *out = r;
  return 0;
}

/* ---- the target's pids ------------------------------------------------------------------- */

/* Adds the pids listed in text[0..len) (blank- or newline-separated) not yet in pids. */
static void add_pids(const char *text, size_t len, pid_t *pids, size_t cap, size_t *n) {
  size_t i = 0;
  while (i < len && *n < cap) {
    while (i < len && (is_blank(text[i]) || text[i] == '\n')) {
      i++;
    }
    size_t s = i;
    while (i < len && !is_blank(text[i]) && text[i] != '\n') {
      i++;
    }
    uint64_t v;
    if (i > s && decimal(text + s, i - s, &v) && v > 0 && v <= INT32_MAX && !has_pid(pids, *n, v)) {
      pids[(*n)++] = (pid_t)v;
    }
  }
}

/* The children of every thread of `pid` into pids. */
static void add_children(const em_gpumem_t *g, pid_t pid, pid_t *pids, size_t cap, size_t *n) {
  char path[PATH_BYTES + 64];
  snprintf(path, sizeof(path), "%s/%d/task", g->proc_root, (int)pid);
  DIR *d = opendir(path);
  if (!d) {
    return;
  }
  struct dirent *e;
  while (*n < cap && (e = readdir(d)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') {
      continue;
    }
    char file[PATH_BYTES + 128];
    snprintf(file, sizeof(file), "%s/%d/task/%.20s/children", g->proc_root, (int)pid, e->d_name);
    char list[1024];
    ssize_t got = em_file_read_small(file, list, sizeof(list), NULL);
    if (got > 0) {
      add_pids(list, (size_t)got, pids, cap, n);
    }
  }
  closedir(d);
}

int em_gpumem_pids(const em_gpumem_t *g, pid_t pid, const char *cgroup, pid_t *pids, size_t cap,
                   size_t *n) {
  if (!g || !pids || !n || cap == 0 || (pid > 0) == (cgroup != NULL) || pid < 0) {
    return -EINVAL;
  }
  *n = 0;
  if (cgroup) {
    char path[PATH_BYTES + 32];
    snprintf(path, sizeof(path), "%s/cgroup.procs", cgroup);
    ssize_t got = em_file_read_small(path, g->buf, EM_GPUMEM_FILE_BYTES, NULL);
    if (got < 0) {
      return got == -ENOENT ? -ENOENT : (int)got;
    }
    add_pids(g->buf, (size_t)got, pids, cap, n);
    return *n ? 0 : -ESRCH;
  }
  char stat[PATH_BYTES + 32];
  snprintf(stat, sizeof(stat), "%s/%d", g->proc_root, (int)pid);
  if (access(stat, F_OK) != 0) {
    return -ESRCH;
  }
  pids[(*n)++] = pid;
  for (size_t k = 0; k < *n && *n < cap; k++) { /* Breadth first: pids grows behind k. */
    add_children(g, pids[k], pids, cap, n);
  }
  return 0;
}

/* ---- NVML ----------------------------------------------------------------------------- */

_Static_assert(sizeof(nvml_processes_fn) == sizeof(void *), "dlsym's answer fits a call");

/* Resolves names[0..n) into the function pointers at slots[0..n) (copied byte for byte: ISO C
 * has no cast from dlsym's object pointer to a function pointer). False at the first name the
 * library lacks. */
static bool resolve(void *lib, const char *const *names, void *const *slots, size_t n) {
  for (size_t i = 0; i < n; i++) {
    void *p = dlsym(lib, names[i]);
    if (!p) {
      return false;
    }
    memcpy(slots[i], &p, sizeof(p));
  }
  return true;
}

/* Loads NVML and lists its devices; on failure *why says what failed and nothing stays open. */
static bool open_nvml(em_gpumem_t *g, const char *lib, char *why, size_t cap) {
  nvml_t *v = &g->nvml;
  const char *name = lib ? lib : "libnvidia-ml.so.1";
  v->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!v->lib) {
    snprintf(why, cap, "NVML: %s not loadable", name);
    return false;
  }
  static const struct {
    const char *name;
    size_t stride;
  } calls[] = {
      {"nvmlDeviceGetComputeRunningProcesses_v3", sizeof(nvml_process_v2_t)},
      {"nvmlDeviceGetComputeRunningProcesses_v2", sizeof(nvml_process_v2_t)},
      {"nvmlDeviceGetComputeRunningProcesses", sizeof(nvml_process_v1_t)},
  };
  for (size_t k = 0; k < sizeof(calls) / sizeof(calls[0]) && !v->processes; k++) {
    if (resolve(v->lib, &calls[k].name, (void *const[]){&v->processes}, 1)) {
      v->call = calls[k].name;
      v->stride = calls[k].stride;
    }
  }
  nvml_return_t (*get_count)(unsigned int *) = NULL;
  nvml_return_t (*get_handle)(unsigned int, nvml_device_t *) = NULL;
  static const char *const names[] = {"nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetCount_v2",
                                      "nvmlDeviceGetHandleByIndex_v2"};
  void *const slots[] = {&v->init, &v->shutdown, &get_count, &get_handle};
  bool ok = v->processes && resolve(v->lib, names, slots, 4);
  if (!ok) {
    snprintf(why, cap, "NVML: %s lacks an entry point", name);
    goto fail;
  }
  nvml_return_t rc = v->init();
  if (rc != 0) {
    snprintf(why, cap, "NVML: nvmlInit_v2 failed (NVML error %d)", rc);
    goto fail;
  }
  unsigned count = 0;
  rc = get_count(&count);
  for (unsigned i = 0; rc == 0 && i < count && v->count < EM_GPUMEM_NVML_GPUS; i++) {
    if (get_handle(i, &v->dev[v->count]) == 0) {
      v->count++;
    }
  }
  if (v->count == 0) {
    snprintf(why, cap, "NVML: no device (NVML error %d, %u devices)", rc, count);
    v->shutdown();
    goto fail;
  }
  return true;
fail:
  dlclose(v->lib);
  memset(v, 0, sizeof(*v));
  return false;
}

static int read_nvml(em_gpumem_t *g, const pid_t *pids, size_t n, uint64_t *bytes) {
  nvml_t *v = &g->nvml;
  uint64_t sum = 0;
  for (unsigned d = 0; d < v->count; d++) {
    unsigned int count = EM_GPUMEM_NVML_PROCS;
    nvml_return_t rc = v->processes(v->dev[d], &count, g->procs);
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
      snprintf(g->why, sizeof(g->why), "NVML: more than %d compute processes on device %u",
               EM_GPUMEM_NVML_PROCS, d);
      return -ENOSPC;
    }
    if (rc != 0) {
      snprintf(g->why, sizeof(g->why), "NVML: %s on device %u failed (NVML error %d)", v->call, d,
               rc);
      return -EIO;
    }
    for (unsigned i = 0; i < count && i < EM_GPUMEM_NVML_PROCS; i++) {
      nvml_process_v1_t p; /* The v2 entry begins as the v1 one. */
      memcpy(&p, g->procs + (size_t)i * v->stride, sizeof(p));
      if (!has_pid(pids, n, p.pid) || p.used_gpu_memory == NVML_VALUE_NOT_AVAILABLE) {
        continue;
      }
      sum = sum > UINT64_MAX - p.used_gpu_memory ? UINT64_MAX : sum + p.used_gpu_memory;
    }
  }
  *bytes = sum;
  return 0;
}

/* ---- the reader ----------------------------------------------------------------------- */

int em_gpumem_new(em_gpumem_t **out, const em_gpumem_opts_t *o) {
  if (!out || !o || !o->sys_root || !o->proc_root || strlen(o->proc_root) >= PATH_BYTES) {
    return -EINVAL;
  }
  em_gpumem_t *g = calloc(1, sizeof(*g));
  char *buf = malloc(EM_GPUMEM_FILE_BYTES);
  unsigned char *procs = calloc(EM_GPUMEM_NVML_PROCS, sizeof(nvml_process_v2_t));
  int n = g ? snprintf(g->nvmap_path, sizeof(g->nvmap_path), "%s%s",
                       strcmp(o->sys_root, "/") == 0 ? "" : o->sys_root, EM_GPUMEM_NVMAP_PATH)
            : 0;
  int rc = !g || !buf || !procs                          ? -ENOMEM
           : n < 0 || (size_t)n >= sizeof(g->nvmap_path) ? -ENAMETOOLONG
                                                         : 0;
  if (rc) {
    free(g);
    free(buf);
    free(procs);
    return rc;
  }
  g->buf = buf;
  g->procs = procs;
  snprintf(g->proc_root, sizeof(g->proc_root), "%s", o->proc_root);
  char nvmap_why[120], nvml_why[120] = "NVML: not tried";
  int fd = open(g->nvmap_path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  int err = fd < 0 ? errno : 0;
  if (fd >= 0) {
    close(fd);
    g->source = EM_GPUMEM_NVMAP;
  } else if (err == EACCES || err == EPERM) {
    snprintf(nvmap_why, sizeof(nvmap_why), "nvmap clients: %s: needs root or CAP_SYS_ADMIN",
             strerror(err));
  } else {
    snprintf(nvmap_why, sizeof(nvmap_why), "nvmap clients: %s", strerror(err));
  }
  if (g->source == EM_GPUMEM_NONE && !o->no_nvml &&
      open_nvml(g, o->nvml_lib, nvml_why, sizeof(nvml_why))) {
    g->source = EM_GPUMEM_NVML;
  }
  if (g->source == EM_GPUMEM_NONE) {
    snprintf(g->why, sizeof(g->why), "no source: %s; %s", nvmap_why, nvml_why);
  }
  *out = g;
  return 0;
}

void em_gpumem_free(em_gpumem_t *g) {
  if (!g) {
    return;
  }
  if (g->nvml.lib) {
    g->nvml.shutdown();
    dlclose(g->nvml.lib);
  }
  free(g->buf);
  free(g->procs);
  free(g);
}

em_gpumem_source_t em_gpumem_source(const em_gpumem_t *g) {
  return g->source;
}

const char *em_gpumem_source_name(const em_gpumem_t *g) {
  switch (g->source) {
  case EM_GPUMEM_NVMAP:
    return "nvmap";
  case EM_GPUMEM_NVML:
    return g->nvml.call;
  case EM_GPUMEM_NONE:
    break;
  }
  return "none";
}

const char *em_gpumem_absent(const em_gpumem_t *g) {
  return g->why[0] ? g->why : NULL;
}

static int read_nvmap(em_gpumem_t *g, const pid_t *pids, size_t n, uint64_t *bytes) {
  bool truncated = false;
  ssize_t got = em_file_read_small(g->nvmap_path, g->buf, EM_GPUMEM_FILE_BYTES, &truncated);
  if (got == -EACCES || got == -EPERM) {
    snprintf(g->why, sizeof(g->why), "nvmap clients: %s: needs root or CAP_SYS_ADMIN",
             strerror((int)-got));
    return -EACCES;
  }
  if (got < 0) {
    snprintf(g->why, sizeof(g->why), "nvmap clients: %s", strerror((int)-got));
    return (int)got;
  }
  if (truncated) {
    snprintf(g->why, sizeof(g->why), "nvmap clients: larger than %d bytes",
             EM_GPUMEM_FILE_BYTES - 1);
    return -EFBIG;
  }
  em_gpumem_nvmap_t r;
  if (em_gpumem_parse_nvmap(g->buf, (size_t)got, pids, n, &r) != 0) {
    snprintf(g->why, sizeof(g->why), "nvmap clients: does not parse as CLIENT PROCESS PID SIZE");
    return -EINVAL;
  }
  *bytes = r.bytes;
  return 0;
}

int em_gpumem_read(em_gpumem_t *g, const pid_t *pids, size_t n, uint64_t *bytes) {
  if (!g || !bytes || (n && !pids)) {
    return -EINVAL;
  }
  *bytes = 0;
  int rc = -ENODEV;
  if (g->source == EM_GPUMEM_NVMAP) {
    g->why[0] = '\0';
    rc = read_nvmap(g, pids, n, bytes);
  } else if (g->source == EM_GPUMEM_NVML) {
    g->why[0] = '\0';
    rc = read_nvml(g, pids, n, bytes);
  }
  return rc;
}
