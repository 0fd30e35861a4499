/*
 * sensors.h - board sensors read on a slower cadence than the tick: thermal zones and their
 * trip points, CPU frequency per cpufreq policy against its maximum (the throttling signal),
 * the Jetson GPU (load file and devfreq), the EMC (memory controller), INA3221 power rails
 * (hwmon on JetPack 5+, iio on JetPack 4) and, on discrete NVIDIA GPUs, NVML (memory used and
 * utilisation) through libnvidia-ml.so.1 loaded with dlopen() at run time (no build
 * dependency, no NVIDIA header).
 *
 * em_sensors_new() discovers once what exists under a root directory ("/" on a board, a
 * fixture tree in tests) and fixes the list of figures: their names and units never change
 * afterwards, so the agent puts them in its metric dictionary at start. em_sensors_read()
 * fills a caller-owned em_sensors_reading_t: one value per figure, or absent. A sensor that
 * is missing is absent, never 0; a file whose text is not a number is absent and counted as a
 * parse error; a file that fails to read (-EIO, -ENODATA, -EAGAIN from a sensor that is
 * asleep, a device gone) is absent and counted as a read error.
 *
 * Figure names (the <type>, <policyN>, <rail> parts are sanitised to [A-Za-z0-9_-], a
 * duplicate gets "_<n>" appended with n the zone / device number):
 *   thermal.<type>.temp      Cel   temperature (millidegree files converted)
 *   thermal.<type>.trip      Cel   lowest passive or hot trip point, critical when neither
 *                                  (trips at or below 0 C are disabled ones: ignored)
 *   thermal.<type>.tripped   1     1 when temp >= trip, else 0
 *   cpu.<policyN>.freq       Hz    scaling_cur_freq
 *   cpu.<policyN>.max        Hz    cpuinfo_max_freq (what the silicon can do)
 *   cpu.<policyN>.cap        Hz    scaling_max_freq (what the governor / nvpmodel allows)
 *   cpu.<policyN>.throttle   1     freq / max, 0..1
 *   cpu.<policyN>.capped     1     1 when cap < max (a frequency cap), else 0
 *   gpu.load                 %     Jetson GPU load file (per mille -> percent)
 *   gpu.freq, gpu.max        Hz    GPU devfreq cur_freq, max_freq
 *   emc.freq                 Hz    EMC clock (devfreq cur_freq, or a debugfs rate file)
 *   emc.load                 %     actmon mc_all activity against emc.freq
 *   power.<rail>.mv, .ma, .mw mV, mA, mW  INA3221 rail; mw = mv * ma / 1000 (or in_power)
 *   power.<rail>.alarm       1     hwmon currN_crit_alarm, 1 when set (hwmon only)
 *   nvml.<i>.mem_used        By    NVML device memory used
 *   nvml.<i>.util            %     NVML GPU utilisation
 *
 * Cost: one read is one pread() of at most 64 bytes per open file (43 files, 63 figures on
 * the AGX Orin fixture: about 30 us per read on the x86 reference VM against fixture files)
 * and, with NVML, two driver calls per GPU; no open(), no allocation, no sleeping. On a board
 * some attributes cost more because the driver asks the hardware on each read: an INA3221
 * value is an I2C transfer (order of 0.1-0.3 ms at 400 kHz), a Tegra thermal zone may be a
 * BPMP call; so a read on a Jetson can take a few milliseconds, which is why sensors run on
 * their own period ([sensors] period, 1 s) and not on every tick.
 * Owns: the open fds of its files, the dlopen() handle of NVML and its nvmlInit_v2() session,
 * the figure table (allocated once in em_sensors_new()). Threading: one thread at a time.
 */
#ifndef EDGEMON_AGENT_SENSORS_H
#define EDGEMON_AGENT_SENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EM_SENSORS_MAX_FIGURES 256 /* Discovery stops adding figures past this, with a warning. */
#define EM_SENSORS_NAME_BYTES  64  /* Figure name including the NUL. */

/* Families, for em_sensors_opts_t.families. */
enum {
  EM_SENSORS_THERMAL = 1u << 0,
  EM_SENSORS_CPUFREQ = 1u << 1,
  EM_SENSORS_GPU = 1u << 2,
  EM_SENSORS_EMC = 1u << 3,
  EM_SENSORS_POWER = 1u << 4,
  EM_SENSORS_NVML = 1u << 5,
  EM_SENSORS_ALL = 0x3fu,
};

/*
 * Options, mirroring a board profile's [sensors] keys. All strings are borrowed for the call
 * of em_sensors_new() only. A path is taken under the root (a leading '/' is allowed);
 * NULL or "auto" probes the known places; "none" turns that sensor off. An explicit path that
 * does not exist still yields its figures, always absent (the profile said it is there).
 */
typedef struct {
  unsigned families;       /* EM_SENSORS_* bits; 0 means EM_SENSORS_ALL without NVML. */
  const char *thermal;     /* "auto"/NULL: every zone; or a comma list of zone types. */
  const char *gpu_load;    /* Jetson GPU load file (per mille). */
  const char *gpu_devfreq; /* GPU devfreq directory (cur_freq, max_freq). */
  const char *emc;         /* actmon mc_all file, or a devfreq directory. */
  const char *power;       /* "hwmon:ina3221", "iio:ina3221x", "none", NULL/"auto": both. */
  const char *nvml_lib;    /* NULL: "libnvidia-ml.so.1". For tests. */
} em_sensors_opts_t;

/* Description of one figure. */
typedef struct {
  char name[EM_SENSORS_NAME_BYTES];
  const char *unit; /* UCUM: "Cel", "Hz", "%", "1", "mV", "mA", "mW", "By". Static string. */
} em_sensor_figure_t;

/* One read: value[i] is meaningful only when present[i]. Caller-owned, no pointers inside. */
typedef struct {
  unsigned count; /* == em_sensors_count() */
  bool present[EM_SENSORS_MAX_FIGURES];
  double value[EM_SENSORS_MAX_FIGURES];
  uint64_t parse_errors; /* Files with text that is not a number, this read. */
  uint64_t read_errors;  /* Files that failed to read, this read. */
} em_sensors_reading_t;

typedef struct em_sensors em_sensors_t;

/*
 * Discovers the sensors under `root` (copied) and opens their files. *out is set only on
 * success. opts may be NULL (all families but NVML, everything auto). Returns 0, -EINVAL (NULL
 * out or root, an unknown `power` value), -ENOMEM, -ENAMETOOLONG (root too long). Finding
 * nothing is not an error: the object then has no figures. NVML requested but unavailable
 * (no library, a symbol missing, nvmlInit_v2 failing) is not an error either: its figures are
 * left out and that is logged once at info.
 */
int em_sensors_new(em_sensors_t **out, const char *root, const em_sensors_opts_t *opts);

/* Closes every fd, shuts NVML down and dlclose()s it. NULL is a no-op. */
void em_sensors_free(em_sensors_t *s);

/* The number of figures, fixed after em_sensors_new(). */
unsigned em_sensors_count(const em_sensors_t *s);

/* Figure i (< count), borrowed until em_sensors_free(); NULL when out of range. */
const em_sensor_figure_t *em_sensors_figure(const em_sensors_t *s, unsigned i);

/* Index of the figure with this name, or -ENOENT. */
int em_sensors_find(const em_sensors_t *s, const char *name);

/* Reads every figure into *r (overwritten entirely). Returns 0 or -EINVAL (NULL argument).
 * Cumulative error counts are kept in the object (em_sensors_errors()). */
int em_sensors_read(em_sensors_t *s, em_sensors_reading_t *r);

/* Parse and read errors since em_sensors_new(). */
void em_sensors_errors(const em_sensors_t *s, uint64_t *parse_errors, uint64_t *read_errors);

/* Throttle causes, in the order em_sensors_throttle() checks them. */
typedef enum {
  EM_THROTTLE_NONE = 0,
  EM_THROTTLE_THERMAL = 1,  /* A zone at or above its trip point. */
  EM_THROTTLE_FREQ_CAP = 2, /* A policy's scaling_max_freq below cpuinfo_max_freq. */
  EM_THROTTLE_POWER = 3,    /* An INA3221 critical alarm. */
} em_throttle_t;

/*
 * Says whether reading r (from s) shows the board throttled, and why: the first cause in the
 * order thermal trip, frequency cap, power limit. `why` (cap bytes, may be NULL when cap is 0)
 * gets a NUL-terminated line, truncated to fit, e.g.
 *   "thermal trip CPU-therm at 99.5 C (trip 99.0 C)"
 *   "frequency cap policy0 1190/2201 MHz (scaling_max_freq 1190 MHz)"
 *   "power limit VDD_GPU_SOC (curr1_crit_alarm)"
 * and "" when not throttled. Absent figures never count as a cause.
 */
em_throttle_t em_sensors_throttle(const em_sensors_t *s, const em_sensors_reading_t *r, char *why,
                                  size_t cap);

/*
 * The hottest thermal zone of reading r (from s): the largest present "thermal.<type>.temp"
 * figure, in degrees C (trip points and tripped flags do not count; an absent zone is skipped).
 * This is the figure the [budget.process] temp_max rule judges. Returns 0 and *out_c, -ENOENT
 * when no zone temperature is present (none found, or none readable this time), or -EINVAL (a
 * NULL argument).
 */
int em_sensors_hottest(const em_sensors_t *s, const em_sensors_reading_t *r, double *out_c);

/*
 * The value parser every sysfs reader uses, exposed for the fuzzer and tests: `text` (len
 * bytes, need not be NUL-terminated) holds one decimal integer, optional leading '-' or '+',
 * optional surrounding blanks and one trailing newline. Returns 0 and *out, or -EINVAL
 * (empty, garbage, overflow of int64).
 */
int em_sensors_parse_int(const char *text, size_t len, int64_t *out);

/* The parser of a line-of-text file (zone type, rail label): copies the first line, without
 * its newline and trailing blanks, sanitised to [A-Za-z0-9_-] (others become '_'), into out
 * (cap bytes). Returns 0, or -EINVAL for empty text, a NUL byte, or a name too long for cap. */
int em_sensors_parse_name(const char *text, size_t len, char *out, size_t cap);

#endif /* EDGEMON_AGENT_SENSORS_H */
