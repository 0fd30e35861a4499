/*
 * board.h - board profiles (boards/<name>.ini) and board detection. A profile is data: the
 * strings that identify the board (device-tree model and compatible entries, CPU
 * implementer:part pairs from /proc/cpuinfo, DMI substrings), the PMU events to count, the
 * sensor paths to read and the defaults (sample period, thermal budget). em_board_load() parses
 * one profile through its schema (common/'s INI reader and schema.h: one row per key) into a
 * plain value; em_board_detect() reads the identifying files under a root directory ("/" on a
 * board, a fixture tree in tests), scores every profile in a directory and returns the best
 * one with the reasons, in words, why it won.
 *
 * Owns: nothing after a call returns; em_board_profile_t and em_board_detection_t are plain
 * values with fixed-size fields (no pointers), sized here, never grown. Every string argument
 * is borrowed for the call. Single-threaded; reads files synchronously (start-up and
 * `edgemon-agent --detect` only, never on the loop's hot path).
 *
 * Detection, strongest evidence first (docs/BOARDS.md):
 *   1. proc/device-tree/model contains one of the profile's `model` substrings, or
 *      proc/device-tree/compatible (a NUL-separated list, most specific first) holds one of
 *      its `compatible` entries;
 *   2. proc/cpuinfo has one of its `cpu_parts` ("CPU implementer" : "CPU part");
 *   3. sys/class/dmi/id/{sys_vendor,product_name,board_name} contains one of its `dmi`
 *      substrings;
 *   4. none of these: generic-<arch>, the arch from proc/cpuinfo, else from uname(2).
 * Any evidence of a stronger kind beats any amount of a weaker kind; within a kind, a longer
 * model substring, an earlier compatible entry and more matching CPU parts win; a remaining tie
 * goes to the name that sorts first, and the reasons say which profiles tied.
 */
#ifndef EDGEMON_AGENT_BOARD_H
#define EDGEMON_AGENT_BOARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EM_BOARD_MAX_NAME     64  /* Profile name: 1..63 bytes of [a-z0-9_.-]. */
#define EM_BOARD_MAX_TEXT     128 /* Description, a model or DMI substring, a compatible entry. */
#define EM_BOARD_MAX_MATCH    8   /* Entries of each of model, compatible, cpu_parts, dmi. */
#define EM_BOARD_MAX_EVENTS   16  /* [pmu] events (EM_CONFIG_MAX_EVENTS). */
#define EM_BOARD_MAX_EVENT    48  /* One event name (EM_CONFIG_MAX_EVENT_NAME). */
#define EM_BOARD_MAX_PATH     256 /* A sensor path or a comma list of thermal zone types. */
#define EM_BOARD_MAX_PROFILES 32  /* Profiles one directory may hold. */
#define EM_BOARD_MAX_REASONS  8
#define EM_BOARD_MAX_REASON   256
#define EM_BOARD_MAX_ERROR    320 /* "FILE:LINE: message" from em_board_load(). */

/* One "CPU implementer":"CPU part" pair, e.g. 0x41:0xd42 (Arm Cortex-A78AE). */
typedef struct {
  uint16_t implementer; /* 0x41 Arm, 0x4e NVIDIA, 0xc0 Ampere, ... */
  uint16_t part;
} em_board_cpu_part_t;

/* [sensors]: where sensors.c looks. Strings keep the profile's words:
 * "auto", "none", an absolute path (relative to the root the agent reads), or a list. */
typedef struct {
  uint64_t period_ns;                  /* How often sensors are read; default 1 s. */
  char thermal[EM_BOARD_MAX_PATH];     /* "auto", "none" or a comma list of zone types. */
  char cpufreq[EM_BOARD_MAX_PATH];     /* "auto" or "none". */
  char gpu_load[EM_BOARD_MAX_PATH];    /* Absolute path of a per-mille load file, or "none". */
  char gpu_devfreq[EM_BOARD_MAX_PATH]; /* Absolute devfreq directory, or "none". */
  char emc[EM_BOARD_MAX_PATH];         /* Absolute path (actmon file or devfreq dir), "none". */
  char power[EM_BOARD_MAX_PATH];       /* "hwmon:<name>", "iio:<name>" or "none". */
  bool nvml;                           /* Query NVML (libnvidia-ml.so.1) for discrete GPUs. */
} em_board_sensors_t;

/* One parsed profile. Absent [board] match keys leave their count 0. */
typedef struct {
  char name[EM_BOARD_MAX_NAME];        /* Equals the file name without ".ini". */
  char description[EM_BOARD_MAX_TEXT]; /* One line for people. */
  char arch[16];                       /* "aarch64" or "x86_64". */
  char model[EM_BOARD_MAX_MATCH][EM_BOARD_MAX_TEXT];
  size_t n_model;
  char compatible[EM_BOARD_MAX_MATCH][EM_BOARD_MAX_TEXT];
  size_t n_compatible;
  em_board_cpu_part_t cpu_parts[EM_BOARD_MAX_MATCH];
  size_t n_cpu_parts;
  char dmi[EM_BOARD_MAX_MATCH][EM_BOARD_MAX_TEXT];
  size_t n_dmi;
  char events[EM_BOARD_MAX_EVENTS][EM_BOARD_MAX_EVENT]; /* [pmu] events, in file order. */
  size_t n_events;
  em_board_sensors_t sensors;
  uint64_t sample_period_ns; /* [defaults] sample_period; default 100 ms. */
  bool has_temp_max;         /* [defaults] temp_max given. */
  int temp_max_c;            /* Degrees C; a WARN thermal budget unless the config says. */
} em_board_profile_t;

/* What em_board_detect() and em_board_resolve() chose, and why. */
typedef struct {
  em_board_profile_t profile;
  char arch[16]; /* The machine's arch as detected ("aarch64", "x86_64", or uname's word). */
  char reasons[EM_BOARD_MAX_REASONS][EM_BOARD_MAX_REASON]; /* Evidence, strongest first. */
  size_t n_reasons;
  char notes[EM_BOARD_MAX_REASONS][EM_BOARD_MAX_REASON]; /* Skipped profiles, ties. */
  size_t n_notes;
} em_board_detection_t;

/*
 * Parses the profile at `path` into *out (every key checked: unknown sections or keys,
 * duplicates, bad values, more than the limits above; `name` must equal the file's base name
 * without ".ini"). On failure *out is unspecified and, when `err` is not NULL, the first
 * problem is written there as "PATH:LINE: message".
 * Returns 0, -EINVAL (a problem in the file), or a negative errno from opening it.
 */
int em_board_load(const char *path, em_board_profile_t *out, char *err, size_t err_len);

/*
 * Lists the profile names in `dir` (the files named "<name>.ini", sorted, at most
 * EM_BOARD_MAX_PROFILES) into names[0..*n). Returns 0, -E2BIG when there are more (the first
 * EM_BOARD_MAX_PROFILES are listed), or a negative errno from opendir().
 */
int em_board_list(const char *dir, char names[][EM_BOARD_MAX_NAME], size_t max, size_t *n);

/*
 * Reads the identifying files under `root` and picks the best profile of `boards_dir` (see
 * the top of this file). Files that are absent, unreadable or full of junk count as no
 * evidence. Profiles that do not parse are skipped and named in out->notes.
 * Returns 0, -ENOENT when no profile matched and there is no generic-<arch> profile, or a
 * negative errno when `boards_dir` cannot be listed.
 */
int em_board_detect(const char *root, const char *boards_dir, em_board_detection_t *out);

/*
 * The config's [agent] board: "auto" detects (em_board_detect), "generic" is the
 * generic-<arch> profile of this machine, any other word names boards_dir/<word>.ini.
 * Returns 0; -ENOENT for a name with no profile (or no generic-<arch>); -EINVAL for a profile
 * that does not parse (the problem in out->notes[0]); a negative errno from the directory.
 */
int em_board_resolve(const char *board, const char *root, const char *boards_dir,
                     em_board_detection_t *out);

#endif /* EDGEMON_AGENT_BOARD_H */
