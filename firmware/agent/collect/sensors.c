/*
 * sensors.c - board sensors (see sensors.h for the figures and their units).
 *
 * Two tables are built once by em_sensors_new(): sources (one open sysfs file each, or fd -1
 * when the file the profile names is missing) and figures (what the agent publishes). A
 * figure is an operation on up to two sources: a scaled value, a ratio, a comparison (tripped,
 * capped) or a product (rail power), or an NVML query. em_sensors_read() first preads every
 * source once into its slot (int64 or absent) and then evaluates every figure, so a file used
 * by several figures (cpuinfo_max_freq) is read once per read.
 *
 * Discovery, per family (paths relative to the root):
 *   thermal  sys/class/thermal/thermal_zone<N>/{type,temp,trip_point_<K>_{type,temp}}
 *   cpufreq  sys/devices/system/cpu/cpufreq/policy<N>/{scaling_cur_freq,cpuinfo_max_freq,
 *            scaling_max_freq}
 *   gpu      load file: sys/devices/platform/gpu.0/load or ../17000000.ga10b/load (L4T 35+),
 *            sys/devices/gpu.0/load
 *            (L4T 32); devfreq: sys/class/devfreq/<name> with a known Tegra GPU name
 *   emc      sys/kernel/actmon_avg_activity/mc_all (L4T 32, readable by everyone) for the
 *            activity; the EMC rate from sys/kernel/debug/bpmp/debug/clk/emc/rate (L4T 35+)
 *            or sys/kernel/debug/clk/emc/clk_rate (L4T 32): debugfs, root only, so an
 *            unprivileged agent has no emc.freq and hence no emc.load; or a devfreq directory
 *   power    sys/class/hwmon/hwmon<N>/ with name "ina3221": in<C>_label, in<C>_input (mV),
 *            curr<C>_input (mA), curr<C>_crit_alarm (C = 1..3, label "NC" skipped);
 *            sys/bus/iio/devices/iio:device<N>/ with name "ina3221x": rail_name_<C>,
 *            in_voltage<C>_input (mV), in_current<C>_input (mA), in_power<C>_input (mW)
 *   nvml     libnvidia-ml.so.1 via dlopen: nvmlDeviceGetMemoryInfo, ..GetUtilizationRates
 *
 * Owns: sources' fds, the NVML library handle and session, both tables. Allocation happens only
 * in em_sensors_new(). Threading: one thread at a time.
 */
#define _POSIX_C_SOURCE 200809L
#include "sensors.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "edgemon/common/file.h"
#include "log.h"

#define MAX_SOURCES   (4 * EM_SENSORS_MAX_FIGURES)
#define MAX_ENTRIES   1024 /* thermal zones, policies, hwmon or iio devices scanned */
#define MAX_TRIPS     32
#define MAX_NVML_GPUS 16
#define READ_BYTES    63
#define PATH_BYTES    4096
#define KEY_BYTES     40

/* ---- NVML, declared here (no NVIDIA header): the few types and calls we use. ---- */

typedef int em_nvml_return_t; /* nvmlReturn_t; NVML_SUCCESS is 0 */
typedef struct em_nvml_device *em_nvml_device_t;
typedef struct {
  unsigned long long total; /* bytes */
  unsigned long long free;
  unsigned long long used;
} em_nvml_memory_t; /* nvmlMemory_t (v1) */
typedef struct {
  unsigned int gpu; /* percent of the last sample period the GPU was busy */
  unsigned int memory;
} em_nvml_utilization_t; /* nvmlUtilization_t */

typedef struct {
  void *lib;
  em_nvml_return_t (*init)(void);
  em_nvml_return_t (*get_count)(unsigned int *);
  em_nvml_return_t (*get_handle)(unsigned int, em_nvml_device_t *);
  em_nvml_return_t (*get_memory)(em_nvml_device_t, em_nvml_memory_t *);
  em_nvml_return_t (*get_util)(em_nvml_device_t, em_nvml_utilization_t *);
  em_nvml_return_t (*shutdown)(void);
  bool initialised;
  unsigned count;
  em_nvml_device_t dev[MAX_NVML_GPUS];
} nvml_t;

/* ---- Tables ---- */

typedef struct {
  int fd;    /* -1: missing at discovery, always absent */
  bool have; /* value valid for this read */
  int64_t value;
} source_t;

typedef enum {
  OP_VALUE,   /* a * scale */
  OP_RATIO,   /* a / b * scale (b > 0) */
  OP_GE,      /* a >= b */
  OP_LT,      /* a < b */
  OP_PRODUCT, /* a * b * scale */
  OP_NONZERO, /* a != 0 */
  OP_NVML_MEM,
  OP_NVML_UTIL,
} op_t;

typedef enum {
  ROLE_NONE,
  ROLE_TRIPPED, /* rel[0] = temp figure, rel[1] = trip figure */
  ROLE_CAPPED,  /* rel[0] = freq, rel[1] = max, rel[2] = cap */
  ROLE_ALARM,   /* file = alarm file name */
} role_t;

typedef enum { FAM_THERMAL, FAM_CPU, FAM_GPU, FAM_EMC, FAM_POWER, FAM_NVML } family_t;

typedef struct {
  em_sensor_figure_t pub;
  op_t op;
  role_t role;
  family_t family;
  int a, b; /* source indices, -1 none */
  double scale;
  unsigned nvml_dev;
  int rel[3];
  char key[KEY_BYTES];  /* zone type, policy, rail */
  char file[KEY_BYTES]; /* alarm file name */
} figure_t;

struct em_sensors {
  char root[PATH_BYTES];
  source_t *src;
  unsigned nsrc;
  figure_t *fig;
  unsigned nfig;
  bool full_warned;
  nvml_t nvml;
  uint64_t parse_errors;
  uint64_t read_errors;
};

/* ---- Parsers ---- */

static bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

int em_sensors_parse_int(const char *text, size_t len, int64_t *out) {
  if (text == NULL || out == NULL) {
    return -EINVAL;
  }
  size_t i = 0;
  while (i < len && (text[i] == ' ' || text[i] == '\t')) {
    i++;
  }
  bool neg = false;
  if (i < len && (text[i] == '-' || text[i] == '+')) {
    neg = text[i] == '-';
    i++;
  }
  size_t digits = 0;
  uint64_t v = 0;
  const uint64_t limit = neg ? (uint64_t)INT64_MAX + 1u : (uint64_t)INT64_MAX;
  while (i < len && text[i] >= '0' && text[i] <= '9') {
    uint64_t d = (uint64_t)(text[i] - '0');
    if (v > (limit - d) / 10u) {
      return -EINVAL;
    }
    v = v * 10u + d;
    digits++;
    i++;
  }
  if (digits == 0) {
    return -EINVAL;
  }
  while (i < len && is_blank(text[i])) {
    i++;
  }
  if (i != len) {
    return -EINVAL;
  }
  if (neg) {
    *out = v == (uint64_t)INT64_MAX + 1u ? INT64_MIN : -(int64_t)v;
  } else {
    *out = (int64_t)v;
  }
  return 0;
}

int em_sensors_parse_name(const char *text, size_t len, char *out, size_t cap) {
  if (text == NULL || out == NULL || cap == 0) {
    return -EINVAL;
  }
  size_t end = 0;
  while (end < len && text[end] != '\n') {
    if (text[end] == '\0') {
      return -EINVAL;
    }
    end++;
  }
  while (end > 0 && is_blank(text[end - 1])) {
    end--;
  }
  size_t start = 0;
  while (start < end && is_blank(text[start])) {
    start++;
  }
  if (start == end || end - start >= cap) {
    return -EINVAL;
  }
  for (size_t i = start; i < end; i++) {
    char c = text[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-';
    out[i - start] = ok ? c : '_';
  }
  out[end - start] = '\0';
  return 0;
}

/* ---- Paths and small files ---- */

/* root + "/" + formatted relative path into out. Returns 0 or -ENAMETOOLONG. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static int
path_of(const em_sensors_t *s, char out[PATH_BYTES], const char *fmt, ...) {
  int n = snprintf(out, PATH_BYTES, "%s/", s->root);
  if (n < 0 || n >= PATH_BYTES) {
    return -ENAMETOOLONG;
  }
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(out + n, PATH_BYTES - (size_t)n, fmt, ap);
  va_end(ap);
  if (m < 0 || m >= PATH_BYTES - n) {
    return -ENAMETOOLONG;
  }
  return 0;
}

static bool exists(const char *path, bool want_dir) {
  struct stat st;
  if (stat(path, &st) != 0) {
    return false;
  }
  return want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode);
}

/* A name file (zone type, rail label, chip name) sanitised. Returns 0 or negative. */
static int read_name(const char *path, char *out, size_t cap) {
  char buf[128];
  ssize_t n = em_file_read_small(path, buf, sizeof buf, NULL);
  if (n < 0) {
    return (int)n;
  }
  return em_sensors_parse_name(buf, (size_t)n, out, cap);
}

/* An integer file at discovery. Returns 0 or negative. */
static int read_int(const char *path, int64_t *out) {
  char buf[READ_BYTES + 1];
  ssize_t n = em_file_read_small(path, buf, sizeof buf, NULL);
  if (n < 0) {
    return (int)n;
  }
  return em_sensors_parse_int(buf, (size_t)n, out);
}

static int cmp_int(const void *x, const void *y) {
  int a = *(const int *)x;
  int b = *(const int *)y;
  return (a > b) - (a < b);
}

/* Numbers N of the entries "<prefix><N>" of directory `dir`, sorted. Returns how many. */
static unsigned list_numbered(const char *dir, const char *prefix, int *out, unsigned cap) {
  DIR *d = opendir(dir);
  if (d == NULL) {
    return 0;
  }
  size_t plen = strlen(prefix);
  unsigned n = 0;
  const struct dirent *e;
  while ((e = readdir(d)) != NULL && n < cap) {
    if (strncmp(e->d_name, prefix, plen) != 0) {
      continue;
    }
    const char *p = e->d_name + plen;
    char *end = NULL;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (*p < '0' || *p > '9' || *end != '\0' || errno != 0 || v > INT_MAX) {
      continue;
    }
    out[n++] = (int)v;
  }
  closedir(d);
  qsort(out, n, sizeof *out, cmp_int);
  return n;
}

/* ---- Table building ---- */

/* Adds a source for `path` (opened now; fd -1 when it cannot be). Returns its index or -1. */
static int add_source(em_sensors_t *s, const char *path) {
  if (s->nsrc >= MAX_SOURCES) {
    return -1;
  }
  source_t *src = &s->src[s->nsrc];
  src->fd = path == NULL ? -1 : open(path, O_RDONLY | O_CLOEXEC);
  if (src->fd < 0 && path != NULL) {
    EM_DEBUG("sensors: %s: %s (absent)", path, strerror(errno));
  }
  src->have = false;
  src->value = 0;
  return (int)s->nsrc++;
}

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 6, 7)))
#endif
static int
add_figure(em_sensors_t *s, family_t fam, const char *key, op_t op, const char *unit,
           const char *fmt, ...) {
  if (s->nfig >= EM_SENSORS_MAX_FIGURES) {
    if (!s->full_warned) {
      EM_WARN("sensors: more than %d figures, the rest are left out", EM_SENSORS_MAX_FIGURES);
      s->full_warned = true;
    }
    return -1;
  }
  figure_t *f = &s->fig[s->nfig];
  memset(f, 0, sizeof *f);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(f->pub.name, sizeof f->pub.name, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof f->pub.name) {
    EM_WARN("sensors: figure name too long, left out");
    return -1;
  }
  f->pub.unit = unit;
  f->op = op;
  f->family = fam;
  f->a = -1;
  f->b = -1;
  f->scale = 1.0;
  f->rel[0] = f->rel[1] = f->rel[2] = -1;
  snprintf(f->key, sizeof f->key, "%s", key);
  return (int)s->nfig++;
}

/* True when n more figures fit; warns once when they do not (then no files are opened for
 * them either, so a 256-CPU machine does not hold a thousand fds for figures left out). */
static bool room(em_sensors_t *s, unsigned n) {
  if (s->nfig + n <= EM_SENSORS_MAX_FIGURES) {
    return true;
  }
  if (!s->full_warned) {
    EM_WARN("sensors: more than %d figures, the rest are left out", EM_SENSORS_MAX_FIGURES);
    s->full_warned = true;
  }
  return false;
}

/* Makes `key` unique within its family by appending "_<n>". */
static void unique_key(const em_sensors_t *s, family_t fam, char *key, size_t cap, int n) {
  for (unsigned i = 0; i < s->nfig; i++) {
    if (s->fig[i].family == fam && strcmp(s->fig[i].key, key) == 0) {
      char tmp[KEY_BYTES];
      snprintf(tmp, sizeof tmp, "%.30s_%d", key, n);
      snprintf(key, cap, "%s", tmp);
      return;
    }
  }
}

/* A figure on one or two sources. Returns the figure index or -1. */
static int fig2(em_sensors_t *s, family_t fam, const char *key, op_t op, const char *unit,
                double scale, int a, int b, const char *suffix) {
  const char *prefix = fam == FAM_THERMAL ? "thermal"
                       : fam == FAM_CPU   ? "cpu"
                       : fam == FAM_GPU   ? "gpu"
                       : fam == FAM_EMC   ? "emc"
                       : fam == FAM_POWER ? "power"
                                          : "nvml";
  int i = key[0] == '\0' ? add_figure(s, fam, key, op, unit, "%s.%s", prefix, suffix)
                         : add_figure(s, fam, key, op, unit, "%s.%s.%s", prefix, key, suffix);
  if (i < 0) {
    return -1;
  }
  s->fig[i].a = a;
  s->fig[i].b = b;
  s->fig[i].scale = scale;
  return i;
}

/* A source for the file `name` in directory `dir`. */
static int src_at(em_sensors_t *s, const char *dir, const char *name) {
  char path[PATH_BYTES];
  int n = snprintf(path, sizeof path, "%s/%s", dir, name);
  if (n < 0 || (size_t)n >= sizeof path) {
    return add_source(s, NULL);
  }
  return add_source(s, path);
}

/* True when `type` is in the comma list `want` (NULL or "auto": everything). */
static bool wanted(const char *want, const char *type) {
  if (want == NULL || strcmp(want, "auto") == 0) {
    return true;
  }
  size_t tlen = strlen(type);
  const char *p = want;
  while (*p != '\0') {
    while (*p == ' ' || *p == ',') {
      p++;
    }
    size_t n = strcspn(p, ",");
    size_t m = n;
    while (m > 0 && p[m - 1] == ' ') {
      m--;
    }
    if (m == tlen && m > 0 && strncmp(p, type, m) == 0) {
      return true;
    }
    p += n;
  }
  return false;
}

static void discover_thermal(em_sensors_t *s, const char *want) {
  char dir[PATH_BYTES];
  char path[PATH_BYTES];
  int zones[MAX_ENTRIES];
  if (path_of(s, dir, "sys/class/thermal") != 0) {
    return;
  }
  unsigned nz = list_numbered(dir, "thermal_zone", zones, MAX_ENTRIES);
  for (unsigned z = 0; z < nz; z++) {
    char key[KEY_BYTES];
    if (path_of(s, path, "sys/class/thermal/thermal_zone%d/type", zones[z]) != 0 ||
        read_name(path, key, sizeof key - 8) != 0) {
      EM_DEBUG("sensors: thermal_zone%d has no readable type, skipped", zones[z]);
      continue;
    }
    if (!wanted(want, key)) {
      continue;
    }
    if (!room(s, 3)) {
      break;
    }
    unique_key(s, FAM_THERMAL, key, sizeof key, zones[z]);
    /* Lowest passive/hot trip; critical when the zone has neither. */
    int best = -1;
    int best_crit = -1;
    int64_t best_t = 0;
    int64_t crit_t = 0;
    for (int k = 0; k < MAX_TRIPS; k++) {
      char type[32];
      int64_t t;
      if (path_of(s, path, "sys/class/thermal/thermal_zone%d/trip_point_%d_type", zones[z], k) !=
              0 ||
          read_name(path, type, sizeof type) != 0) {
        break;
      }
      if (path_of(s, path, "sys/class/thermal/thermal_zone%d/trip_point_%d_temp", zones[z], k) !=
              0 ||
          read_int(path, &t) != 0 || t <= 0) {
        continue; /* unreadable, or disabled (x86_pkg_temp shows passive trips at 0) */
      }
      if ((strcmp(type, "passive") == 0 || strcmp(type, "hot") == 0) && (best < 0 || t < best_t)) {
        best = k;
        best_t = t;
      } else if (strcmp(type, "critical") == 0 && (best_crit < 0 || t < crit_t)) {
        best_crit = k;
        crit_t = t;
      }
    }
    if (best < 0) {
      best = best_crit;
    }
    int temp = -1;
    int trip = -1;
    if (path_of(s, path, "sys/class/thermal/thermal_zone%d/temp", zones[z]) == 0) {
      temp = add_source(s, path);
    }
    if (best >= 0 && path_of(s, path, "sys/class/thermal/thermal_zone%d/trip_point_%d_temp",
                             zones[z], best) == 0) {
      trip = add_source(s, path);
    }
    int ft = fig2(s, FAM_THERMAL, key, OP_VALUE, "Cel", 0.001, temp, -1, "temp");
    int fp = fig2(s, FAM_THERMAL, key, OP_VALUE, "Cel", 0.001, trip, -1, "trip");
    int fx = fig2(s, FAM_THERMAL, key, OP_GE, "1", 1.0, temp, trip, "tripped");
    if (fx >= 0) {
      s->fig[fx].role = ROLE_TRIPPED;
      s->fig[fx].rel[0] = ft;
      s->fig[fx].rel[1] = fp;
    }
  }
}

static void discover_cpufreq(em_sensors_t *s) {
  char dir[PATH_BYTES];
  int pol[MAX_ENTRIES];
  if (path_of(s, dir, "sys/devices/system/cpu/cpufreq") != 0) {
    return;
  }
  unsigned np = list_numbered(dir, "policy", pol, MAX_ENTRIES);
  for (unsigned p = 0; p < np && room(s, 5); p++) {
    char key[KEY_BYTES];
    char pdir[PATH_BYTES];
    snprintf(key, sizeof key, "policy%d", pol[p]);
    if (path_of(s, pdir, "sys/devices/system/cpu/cpufreq/policy%d", pol[p]) != 0) {
      continue;
    }
    int cur = src_at(s, pdir, "scaling_cur_freq");
    int max = src_at(s, pdir, "cpuinfo_max_freq");
    int cap = src_at(s, pdir, "scaling_max_freq");
    int ff = fig2(s, FAM_CPU, key, OP_VALUE, "Hz", 1000.0, cur, -1, "freq");
    int fm = fig2(s, FAM_CPU, key, OP_VALUE, "Hz", 1000.0, max, -1, "max");
    int fc = fig2(s, FAM_CPU, key, OP_VALUE, "Hz", 1000.0, cap, -1, "cap");
    fig2(s, FAM_CPU, key, OP_RATIO, "1", 1.0, cur, max, "throttle");
    int fx = fig2(s, FAM_CPU, key, OP_LT, "1", 1.0, cap, max, "capped");
    if (fx >= 0) {
      s->fig[fx].role = ROLE_CAPPED;
      s->fig[fx].rel[0] = ff;
      s->fig[fx].rel[1] = fm;
      s->fig[fx].rel[2] = fc;
    }
  }
}

/* Resolves a profile path option: NULL/"auto" -> the first of `probes` that exists (false when
 * none), "none" -> false, else the explicit path under the root (true even when missing). */
static bool resolve(const em_sensors_t *s, const char *opt, const char *const *probes,
                    bool want_dir, char out[PATH_BYTES]) {
  if (opt != NULL && strcmp(opt, "none") == 0) {
    return false;
  }
  if (opt != NULL && strcmp(opt, "auto") != 0) {
    return path_of(s, out, "%s", opt[0] == '/' ? opt + 1 : opt) == 0;
  }
  for (unsigned i = 0; probes[i] != NULL; i++) {
    if (path_of(s, out, "%s", probes[i]) == 0 && exists(out, want_dir)) {
      return true;
    }
  }
  return false;
}

static const char *const gpu_load_probes[] = {"sys/devices/platform/gpu.0/load",
                                              "sys/devices/platform/17000000.ga10b/load",
                                              "sys/devices/gpu.0/load", NULL};
static const char *const gpu_devfreq_probes[] = {
    "sys/class/devfreq/17000000.ga10b", "sys/class/devfreq/17000000.gv11b",
    "sys/class/devfreq/17000000.gp10b", "sys/class/devfreq/57000000.gpu", NULL};
static const char *const emc_activity_probes[] = {"sys/kernel/actmon_avg_activity/mc_all", NULL};
static const char *const emc_rate_probes[] = {"sys/kernel/debug/bpmp/debug/clk/emc/rate",
                                              "sys/kernel/debug/clk/emc/clk_rate", NULL};

static void discover_gpu(em_sensors_t *s, const em_sensors_opts_t *o) {
  char path[PATH_BYTES];
  if (resolve(s, o->gpu_load, gpu_load_probes, false, path)) {
    /* The Jetson load file is in per mille. */
    fig2(s, FAM_GPU, "", OP_VALUE, "%", 0.1, add_source(s, path), -1, "load");
  }
  if (resolve(s, o->gpu_devfreq, gpu_devfreq_probes, true, path)) {
    fig2(s, FAM_GPU, "", OP_VALUE, "Hz", 1.0, src_at(s, path, "cur_freq"), -1, "freq");
    fig2(s, FAM_GPU, "", OP_VALUE, "Hz", 1.0, src_at(s, path, "max_freq"), -1, "max");
  }
}

static void discover_emc(em_sensors_t *s, const em_sensors_opts_t *o) {
  char path[PATH_BYTES];
  char rate[PATH_BYTES];
  if (!resolve(s, o->emc, emc_activity_probes, false, path)) {
    /* No activity file: an EMC rate alone still gives emc.freq (root on L4T 35+). */
    if (o->emc != NULL && strcmp(o->emc, "none") == 0) {
      return;
    }
    if (!resolve(s, NULL, emc_rate_probes, false, rate)) {
      return;
    }
    fig2(s, FAM_EMC, "", OP_VALUE, "Hz", 1.0, add_source(s, rate), -1, "freq");
    fig2(s, FAM_EMC, "", OP_VALUE, "%", 1.0, -1, -1, "load");
    return;
  }
  if (exists(path, true)) { /* a devfreq directory */
    fig2(s, FAM_EMC, "", OP_VALUE, "Hz", 1.0, src_at(s, path, "cur_freq"), -1, "freq");
    fig2(s, FAM_EMC, "", OP_VALUE, "%", 1.0, -1, -1, "load");
    return;
  }
  /* actmon mc_all is the average activity in kHz; load = activity / EMC rate (as jtop). */
  int act = add_source(s, path);
  int r = resolve(s, NULL, emc_rate_probes, false, rate) ? add_source(s, rate) : -1;
  fig2(s, FAM_EMC, "", OP_VALUE, "Hz", 1.0, r, -1, "freq");
  fig2(s, FAM_EMC, "", OP_RATIO, "%", 1000.0 * 100.0, act, r, "load");
}

/* One rail: registers mv, ma, mw (and alarm when the file exists). */
static void add_rail(em_sensors_t *s, const char *label, int n, int mv, int ma, int mw,
                     const char *alarm_path, const char *alarm_file) {
  char key[KEY_BYTES];
  snprintf(key, sizeof key, "%s", label);
  unique_key(s, FAM_POWER, key, sizeof key, n);
  fig2(s, FAM_POWER, key, OP_VALUE, "mV", 1.0, mv, -1, "mv");
  fig2(s, FAM_POWER, key, OP_VALUE, "mA", 1.0, ma, -1, "ma");
  if (mw >= 0) {
    fig2(s, FAM_POWER, key, OP_VALUE, "mW", 1.0, mw, -1, "mw");
  } else {
    fig2(s, FAM_POWER, key, OP_PRODUCT, "mW", 0.001, mv, ma, "mw");
  }
  if (alarm_path != NULL && exists(alarm_path, false)) {
    int f = fig2(s, FAM_POWER, key, OP_NONZERO, "1", 1.0, add_source(s, alarm_path), -1, "alarm");
    if (f >= 0) {
      s->fig[f].role = ROLE_ALARM;
      snprintf(s->fig[f].file, sizeof s->fig[f].file, "%s", alarm_file);
    }
  }
}

static void discover_hwmon(em_sensors_t *s, const char *chip) {
  char dir[PATH_BYTES];
  char path[PATH_BYTES];
  int devs[MAX_ENTRIES];
  if (path_of(s, dir, "sys/class/hwmon") != 0) {
    return;
  }
  unsigned nd = list_numbered(dir, "hwmon", devs, MAX_ENTRIES);
  for (unsigned d = 0; d < nd; d++) {
    char name[KEY_BYTES];
    char adir[PATH_BYTES];
    /* New-style drivers keep attributes in hwmonN, old ones in hwmonN/device. */
    if (path_of(s, adir, "sys/class/hwmon/hwmon%d", devs[d]) != 0) {
      continue;
    }
    snprintf(path, sizeof path, "%.4000s/name", adir);
    if (read_name(path, name, sizeof name) != 0) {
      size_t l = strlen(adir);
      if (l + 8 >= sizeof adir) {
        continue;
      }
      memcpy(adir + l, "/device", 8);
      snprintf(path, sizeof path, "%.4000s/name", adir);
      if (read_name(path, name, sizeof name) != 0) {
        continue;
      }
    }
    if (strcmp(name, chip) != 0) {
      continue;
    }
    for (int c = 1; c <= 3; c++) {
      char label[KEY_BYTES];
      char file[32];
      char alarm[PATH_BYTES];
      snprintf(path, sizeof path, "%.4000s/in%d_label", adir, c);
      if (read_name(path, label, sizeof label - 8) != 0 || strcmp(label, "NC") == 0) {
        continue;
      }
      if (!room(s, 4)) {
        return;
      }
      char a[32];
      char b[32];
      snprintf(a, sizeof a, "in%d_input", c);
      snprintf(b, sizeof b, "curr%d_input", c);
      int mv = src_at(s, adir, a);
      int ma = src_at(s, adir, b);
      snprintf(file, sizeof file, "curr%d_crit_alarm", c);
      snprintf(alarm, sizeof alarm, "%.4000s/%s", adir, file);
      add_rail(s, label, devs[d], mv, ma, -1, alarm, file);
    }
  }
}

static void discover_iio(em_sensors_t *s, const char *chip) {
  char dir[PATH_BYTES];
  char path[PATH_BYTES];
  int devs[MAX_ENTRIES];
  if (path_of(s, dir, "sys/bus/iio/devices") != 0) {
    return;
  }
  unsigned nd = list_numbered(dir, "iio:device", devs, MAX_ENTRIES);
  for (unsigned d = 0; d < nd; d++) {
    char name[KEY_BYTES];
    char adir[PATH_BYTES];
    if (path_of(s, adir, "sys/bus/iio/devices/iio:device%d", devs[d]) != 0) {
      continue;
    }
    snprintf(path, sizeof path, "%.4000s/name", adir);
    if (read_name(path, name, sizeof name) != 0 || strcmp(name, chip) != 0) {
      continue;
    }
    for (int c = 0; c <= 2; c++) {
      char label[KEY_BYTES];
      char f[40];
      snprintf(path, sizeof path, "%.4000s/rail_name_%d", adir, c);
      if (read_name(path, label, sizeof label - 8) != 0 || strcmp(label, "NC") == 0) {
        continue;
      }
      if (!room(s, 3)) {
        return;
      }
      snprintf(f, sizeof f, "in_voltage%d_input", c);
      int mv = src_at(s, adir, f);
      snprintf(f, sizeof f, "in_current%d_input", c);
      int ma = src_at(s, adir, f);
      snprintf(path, sizeof path, "%.4000s/in_power%d_input", adir, c);
      int mw = exists(path, false) ? add_source(s, path) : -1;
      add_rail(s, label, devs[d], mv, ma, mw, NULL, NULL);
    }
  }
}

static int discover_power(em_sensors_t *s, const char *opt) {
  if (opt == NULL || strcmp(opt, "auto") == 0) {
    discover_hwmon(s, "ina3221");
    discover_iio(s, "ina3221x");
    return 0;
  }
  if (strcmp(opt, "none") == 0) {
    return 0;
  }
  if (strncmp(opt, "hwmon:", 6) == 0 && opt[6] != '\0') {
    discover_hwmon(s, opt + 6);
    return 0;
  }
  if (strncmp(opt, "iio:", 4) == 0 && opt[4] != '\0') {
    discover_iio(s, opt + 4);
    return 0;
  }
  EM_ERROR("sensors: power = %s: expected hwmon:<chip>, iio:<chip>, auto or none", opt);
  return -EINVAL;
}

/* dlsym into a function pointer without the object-to-function cast ISO C does not define. */
static bool sym(void *lib, const char *name, void *fp, size_t fp_bytes) {
  void *p = dlsym(lib, name);
  if (p == NULL || fp_bytes != sizeof p) {
    return false;
  }
  memcpy(fp, &p, sizeof p);
  return true;
}

static void discover_nvml(em_sensors_t *s, const char *lib) {
  nvml_t *n = &s->nvml;
  const char *name = lib != NULL ? lib : "libnvidia-ml.so.1";
  n->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (n->lib == NULL) {
    const char *err = dlerror();
    EM_INFO("sensors: NVML not available (%s): no nvml figures", err != NULL ? err : name);
    return;
  }
  bool ok = sym(n->lib, "nvmlInit_v2", &n->init, sizeof n->init) &&
            sym(n->lib, "nvmlDeviceGetCount_v2", &n->get_count, sizeof n->get_count) &&
            sym(n->lib, "nvmlDeviceGetHandleByIndex_v2", &n->get_handle, sizeof n->get_handle) &&
            sym(n->lib, "nvmlDeviceGetMemoryInfo", &n->get_memory, sizeof n->get_memory) &&
            sym(n->lib, "nvmlDeviceGetUtilizationRates", &n->get_util, sizeof n->get_util) &&
            sym(n->lib, "nvmlShutdown", &n->shutdown, sizeof n->shutdown);
  if (!ok) {
    EM_INFO("sensors: %s lacks an NVML entry point: no nvml figures", name);
    goto fail;
  }
  em_nvml_return_t rc = n->init();
  if (rc != 0) {
    EM_INFO("sensors: nvmlInit_v2 failed (NVML error %d): no nvml figures", rc);
    goto fail;
  }
  n->initialised = true;
  unsigned count = 0;
  rc = n->get_count(&count);
  if (rc != 0) {
    EM_INFO("sensors: nvmlDeviceGetCount_v2 failed (NVML error %d): no nvml figures", rc);
    return;
  }
  for (unsigned i = 0; i < count && n->count < MAX_NVML_GPUS && room(s, 2); i++) {
    em_nvml_device_t dev = NULL;
    if (n->get_handle(i, &dev) != 0) {
      continue;
    }
    unsigned slot = n->count++;
    n->dev[slot] = dev;
    char key[KEY_BYTES];
    snprintf(key, sizeof key, "%u", i);
    int a = fig2(s, FAM_NVML, key, OP_NVML_MEM, "By", 1.0, -1, -1, "mem_used");
    int b = fig2(s, FAM_NVML, key, OP_NVML_UTIL, "%", 1.0, -1, -1, "util");
    if (a >= 0) {
      s->fig[a].nvml_dev = slot;
    }
    if (b >= 0) {
      s->fig[b].nvml_dev = slot;
    }
  }
  EM_INFO("sensors: NVML: %u GPU(s)", n->count);
  return;
fail:
  dlclose(n->lib);
  n->lib = NULL;
}

/* ---- Public API ---- */

int em_sensors_new(em_sensors_t **out, const char *root, const em_sensors_opts_t *opts) {
  if (out == NULL || root == NULL) {
    return -EINVAL;
  }
  static const em_sensors_opts_t defaults = {0};
  const em_sensors_opts_t *o = opts != NULL ? opts : &defaults;
  unsigned fam = o->families != 0 ? o->families : (EM_SENSORS_ALL & ~(unsigned)EM_SENSORS_NVML);
  size_t rlen = strlen(root);
  while (rlen > 1 && root[rlen - 1] == '/') {
    rlen--;
  }
  if (rlen + 256 >= PATH_BYTES) {
    return -ENAMETOOLONG;
  }
  em_sensors_t *s = calloc(1, sizeof *s);
  if (s == NULL) {
    return -ENOMEM;
  }
  s->src = calloc(MAX_SOURCES, sizeof *s->src);
  s->fig = calloc(EM_SENSORS_MAX_FIGURES, sizeof *s->fig);
  if (s->src == NULL || s->fig == NULL) {
    em_sensors_free(s);
    return -ENOMEM;
  }
  /* "/" becomes "" so paths read "/sys/..." rather than "//sys/...". */
  memcpy(s->root, root, rlen);
  s->root[rlen == 1 && root[0] == '/' ? 0 : rlen] = '\0';

  if ((fam & EM_SENSORS_POWER) != 0 && o->power != NULL) {
    const char *p = o->power;
    bool known = strcmp(p, "auto") == 0 || strcmp(p, "none") == 0 ||
                 (strncmp(p, "hwmon:", 6) == 0 && p[6] != '\0') ||
                 (strncmp(p, "iio:", 4) == 0 && p[4] != '\0');
    if (!known) {
      EM_ERROR("sensors: power = %s: expected hwmon:<chip>, iio:<chip>, auto or none", p);
      em_sensors_free(s);
      return -EINVAL;
    }
  }
  if ((fam & EM_SENSORS_THERMAL) != 0) {
    discover_thermal(s, o->thermal);
  }
  if ((fam & EM_SENSORS_CPUFREQ) != 0) {
    discover_cpufreq(s);
  }
  if ((fam & EM_SENSORS_GPU) != 0) {
    discover_gpu(s, o);
  }
  if ((fam & EM_SENSORS_EMC) != 0) {
    discover_emc(s, o);
  }
  if ((fam & EM_SENSORS_POWER) != 0) {
    (void)discover_power(s, o->power);
  }
  if ((fam & EM_SENSORS_NVML) != 0) {
    discover_nvml(s, o->nvml_lib);
  }
  EM_DEBUG("sensors: %u figures from %u files under %s", s->nfig, s->nsrc,
           s->root[0] != '\0' ? s->root : "/");
  *out = s;
  return 0;
}

void em_sensors_free(em_sensors_t *s) {
  if (s == NULL) {
    return;
  }
  for (unsigned i = 0; s->src != NULL && i < s->nsrc; i++) {
    if (s->src[i].fd >= 0) {
      close(s->src[i].fd);
    }
  }
  if (s->nvml.lib != NULL) {
    if (s->nvml.initialised) {
      s->nvml.shutdown();
    }
    dlclose(s->nvml.lib);
  }
  free(s->src);
  free(s->fig);
  free(s);
}

unsigned em_sensors_count(const em_sensors_t *s) {
  return s != NULL ? s->nfig : 0;
}

const em_sensor_figure_t *em_sensors_figure(const em_sensors_t *s, unsigned i) {
  if (s == NULL || i >= s->nfig) {
    return NULL;
  }
  return &s->fig[i].pub;
}

int em_sensors_find(const em_sensors_t *s, const char *name) {
  if (s == NULL || name == NULL) {
    return -EINVAL;
  }
  for (unsigned i = 0; i < s->nfig; i++) {
    if (strcmp(s->fig[i].pub.name, name) == 0) {
      return (int)i;
    }
  }
  return -ENOENT;
}

void em_sensors_errors(const em_sensors_t *s, uint64_t *parse_errors, uint64_t *read_errors) {
  if (parse_errors != NULL) {
    *parse_errors = s != NULL ? s->parse_errors : 0;
  }
  if (read_errors != NULL) {
    *read_errors = s != NULL ? s->read_errors : 0;
  }
}

static const source_t *src_get(const em_sensors_t *s, int i) {
  if (i < 0 || !s->src[i].have) {
    return NULL;
  }
  return &s->src[i];
}

/* Evaluates figure f into *v. Returns true when present. */
static bool eval(em_sensors_t *s, const figure_t *f, double *v, em_sensors_reading_t *r) {
  const source_t *a = src_get(s, f->a);
  const source_t *b = src_get(s, f->b);
  switch (f->op) {
  case OP_VALUE:
    if (a == NULL) {
      return false;
    }
    *v = (double)a->value * f->scale;
    return true;
  case OP_RATIO:
    if (a == NULL || b == NULL || b->value <= 0) {
      return false;
    }
    *v = (double)a->value / (double)b->value * f->scale;
    return true;
  case OP_GE:
  case OP_LT:
    if (a == NULL || b == NULL) {
      return false;
    }
    *v = (f->op == OP_GE ? a->value >= b->value : a->value < b->value) ? 1.0 : 0.0;
    return true;
  case OP_NONZERO:
    if (a == NULL) {
      return false;
    }
    *v = a->value != 0 ? 1.0 : 0.0;
    return true;
  case OP_PRODUCT:
    if (a == NULL || b == NULL) {
      return false;
    }
    *v = (double)a->value * (double)b->value * f->scale;
    return true;
  case OP_NVML_MEM: {
    em_nvml_memory_t m;
    if (s->nvml.get_memory(s->nvml.dev[f->nvml_dev], &m) != 0) {
      r->read_errors++;
      return false;
    }
    *v = (double)m.used;
    return true;
  }
  case OP_NVML_UTIL: {
    em_nvml_utilization_t u;
    if (s->nvml.get_util(s->nvml.dev[f->nvml_dev], &u) != 0) {
      r->read_errors++;
      return false;
    }
    *v = (double)u.gpu;
    return true;
  }
  }
  return false;
}

int em_sensors_read(em_sensors_t *s, em_sensors_reading_t *r) {
  if (s == NULL || r == NULL) {
    return -EINVAL;
  }
  r->count = s->nfig;
  r->parse_errors = 0;
  r->read_errors = 0;
  for (unsigned i = 0; i < s->nsrc; i++) {
    source_t *src = &s->src[i];
    src->have = false;
    if (src->fd < 0) {
      continue;
    }
    char buf[READ_BYTES + 1];
    ssize_t n = pread(src->fd, buf, sizeof buf, 0);
    if (n < 0) {
      r->read_errors++;
      continue;
    }
    if (n > READ_BYTES || em_sensors_parse_int(buf, (size_t)n, &src->value) != 0) {
      r->parse_errors++;
      continue;
    }
    src->have = true;
  }
  for (unsigned i = 0; i < EM_SENSORS_MAX_FIGURES; i++) {
    double v = 0.0;
    r->present[i] = i < s->nfig && eval(s, &s->fig[i], &v, r);
    r->value[i] = r->present[i] ? v : 0.0;
  }
  s->parse_errors += r->parse_errors;
  s->read_errors += r->read_errors;
  return 0;
}

static bool on(const em_sensors_reading_t *r, int i) {
  return i >= 0 && (unsigned)i < r->count && r->present[i];
}

em_throttle_t em_sensors_throttle(const em_sensors_t *s, const em_sensors_reading_t *r, char *why,
                                  size_t cap) {
  if (why != NULL && cap > 0) {
    why[0] = '\0';
  }
  if (s == NULL || r == NULL) {
    return EM_THROTTLE_NONE;
  }
  static const role_t order[] = {ROLE_TRIPPED, ROLE_CAPPED, ROLE_ALARM};
  static const em_throttle_t cause[] = {EM_THROTTLE_THERMAL, EM_THROTTLE_FREQ_CAP,
                                        EM_THROTTLE_POWER};
  for (unsigned k = 0; k < 3; k++) {
    for (unsigned i = 0; i < s->nfig && i < r->count; i++) {
      const figure_t *f = &s->fig[i];
      if (f->role != order[k] || !r->present[i] || r->value[i] < 0.5) {
        continue;
      }
      if (why == NULL || cap == 0) {
        return cause[k];
      }
      if (f->role == ROLE_TRIPPED && on(r, f->rel[0]) && on(r, f->rel[1])) {
        snprintf(why, cap, "thermal trip %s at %.1f C (trip %.1f C)", f->key, r->value[f->rel[0]],
                 r->value[f->rel[1]]);
      } else if (f->role == ROLE_CAPPED && on(r, f->rel[0]) && on(r, f->rel[1]) &&
                 on(r, f->rel[2])) {
        snprintf(why, cap, "frequency cap %s %.0f/%.0f MHz (scaling_max_freq %.0f MHz)", f->key,
                 r->value[f->rel[0]] / 1e6, r->value[f->rel[1]] / 1e6, r->value[f->rel[2]] / 1e6);
      } else if (f->role == ROLE_ALARM) {
        snprintf(why, cap, "power limit %s (%s)", f->key, f->file);
      } else {
        snprintf(why, cap, "%s", f->pub.name);
      }
      return cause[k];
    }
  }
  return EM_THROTTLE_NONE;
}

/* Whether `name` is a zone's temperature figure: "thermal.<type>.temp". */
static bool is_zone_temp(const char *name) {
  size_t len = strlen(name);
  return strncmp(name, "thermal.", 8) == 0 && len > 5 && strcmp(name + len - 5, ".temp") == 0;
}

int em_sensors_hottest(const em_sensors_t *s, const em_sensors_reading_t *r, double *out_c) {
  if (s == NULL || r == NULL || out_c == NULL) {
    return -EINVAL;
  }
  bool have = false;
  double hottest = 0;
  for (unsigned i = 0; i < s->nfig && i < r->count; i++) {
    if (r->present[i] && is_zone_temp(s->fig[i].pub.name) && (!have || r->value[i] > hottest)) {
      hottest = r->value[i];
      have = true;
    }
  }
  if (!have) {
    return -ENOENT;
  }
  *out_c = hottest;
  return 0;
}
