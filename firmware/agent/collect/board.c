/*
 * board.c - board profiles and board detection (board.h says what and why; docs/BOARDS.md
 * lists every file read and where its contents come from).
 *
 * Owns: nothing past a call. A profile is read with common/'s INI line reader
 * (edgemon/common/ini.h), which names the line of every problem, reads an indented line as a
 * key (never a continuation of the previous value) and refuses lines longer than
 * PROFILE_MAX_LINE instead of cutting them. The first problem stops the load: a profile is a
 * file we ship, not one people edit daily, so one clear message is enough. Durations and
 * small files go through common/ too (parse.h, file.h).
 *
 * Detection reads small files with O_NONBLOCK (a FIFO planted in a fixture or a root cannot
 * block the agent) and only regular files, each into a fixed buffer; proc/cpuinfo is read line
 * by line with a bounded line buffer and a bounded number of lines, so no input can make it
 * allocate or loop without end. Bytes outside printable ASCII are shown as '?' in reasons.
 */
#define _POSIX_C_SOURCE 200809L

#include "board.h"

#include "edgemon/common/file.h"
#include "edgemon/common/ini.h"
#include "edgemon/common/parse.h"
#include "edgemon/common/schema.h"
#include "edgemon/common/str.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#define PROFILE_MAX_LINE 510 /* Longest profile line, without its newline. */
#define CPUINFO_LINE     512 /* The proc/cpuinfo line buffer. */
#define NS_PER_MS        EM_NS_PER_MS
#define NS_PER_S         EM_NS_PER_S
#define MAX_COMPAT       16     /* Entries of proc/device-tree/compatible looked at. */
#define MAX_PARTS        16     /* Distinct CPU parts of proc/cpuinfo looked at. */
#define MAX_CPUINFO      200000 /* Lines of proc/cpuinfo read at most. */
#define MODEL_BYTES      256
#define COMPAT_BYTES     2048
#define DMI_BYTES        128
#define QUOTE_BYTES      96 /* A value quoted in a reason, '?' for junk. */

/* ---- Small helpers ---------------------------------------------------------------------- */

/* Quotes `src` for a reason: printable ASCII kept, anything else '?', long text cut with "...". */
static const char *quote(char *dst, size_t size, const char *src) {
  return em_str_quote(dst, size, src, size - 4);
}

/* ---- Profile parsing --------------------------------------------------------------------- */

typedef enum { SEC_NONE, SEC_BOARD, SEC_PMU, SEC_SENSORS, SEC_DEFAULTS } section_t;

typedef struct {
  em_board_profile_t *p;
  const char *path;
  int line;
  section_t section;
  char *err;
  size_t err_len;
  bool failed;
  unsigned long seen; /* Bit per row of keys (its index): duplicates are an error. */
} load_t;

typedef em_schema_key_t key_def_t; /* A key's row (edgemon/common/schema.h). */

static const char *const section_names[] = {"", "board", "pmu", "sensors", "defaults"};

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static void
fail(load_t *ld, const char *fmt, ...) {
  if (ld->failed) {
    return;
  }
  ld->failed = true;
  if (!ld->err || ld->err_len == 0) {
    return;
  }
  char msg[EM_BOARD_MAX_ERROR];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (ld->line > 0) {
    snprintf(ld->err, ld->err_len, "%s:%d: %s", ld->path, ld->line, msg);
  } else {
    snprintf(ld->err, ld->err_len, "%s: %s", ld->path, msg);
  }
}

static bool is_word_char(char c) {
  return isalnum((unsigned char)c) || c == '_' || c == '.' || c == '-';
}

/* 1..size-1 bytes of [A-Za-z0-9_.-] (extra: characters also allowed). */
static bool is_word(const char *s, size_t size, const char *extra) {
  size_t n = strlen(s);
  if (n == 0 || n >= size) {
    return false;
  }
  for (const char *c = s; *c; c++) {
    if (!is_word_char(*c) && !(extra && strchr(extra, *c))) {
      return false;
    }
  }
  return true;
}

static bool is_printable(const char *s) {
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c < 0x20 || *c >= 0x7f) {
      return false;
    }
  }
  return true;
}

/*
 * Splits a comma list in place into items (blanks around each trimmed). Each must pass
 * check(item) and fit `item_size`; at most `max`. Returns the count, or -1 after fail().
 */
typedef bool (*item_check_t)(const char *item, size_t item_size);

static int split_list(load_t *ld, const char *key, char *value, char *items, size_t item_size,
                      size_t max, item_check_t check, bool blank_separated) {
  size_t n = 0;
  char *save = NULL;
  if (value[strlen(value) - 1] == ',') {
    fail(ld, "%s: empty entry after the last comma", key);
    return -1;
  }
  /* Device-tree compatible entries hold commas themselves ("nvidia,tegra234"): that list is
   * separated by blanks, each entry may end with a comma ("a,b, c,d"). */
  const char *seps = blank_separated ? " \t" : ",";
  for (char *tok = strtok_r(value, seps, &save); tok; tok = strtok_r(NULL, seps, &save)) {
    size_t tl = strlen(tok);
    if (blank_separated && tl > 0 && tok[tl - 1] == ',') {
      tok[tl - 1] = '\0';
    }
    char *item = em_str_trim(tok);
    if (item[0] == '\0') {
      fail(ld, "%s: empty entry in the list", key);
      return -1;
    }
    if (n == max) {
      fail(ld, "%s: more than %zu entries", key, max);
      return -1;
    }
    if (strlen(item) >= item_size || !check(item, item_size)) {
      char q[QUOTE_BYTES];
      fail(ld, "%s: bad entry '%s'", key, quote(q, sizeof(q), item));
      return -1;
    }
    memcpy(items + n * item_size, item, strlen(item) + 1);
    n++;
  }
  if (n == 0) {
    fail(ld, "%s: empty list", key);
    return -1;
  }
  return (int)n;
}

static bool check_text(const char *s, size_t size) {
  return s[0] != '\0' && strlen(s) < size && is_printable(s);
}

static bool check_compatible(const char *s, size_t size) {
  return is_word(s, size, ",+");
}

/* A perf name ("cycles"), a kernel PMU event ("l1d_cache_refill"), "pmu/name/" or "r0011". */
static bool check_event(const char *s, size_t size) {
  if (!is_word(s, size, "/=:")) {
    return false;
  }
  const char *slash = strchr(s, '/');
  if (!slash) {
    return true;
  }
  const char *second = strchr(slash + 1, '/');
  return slash != s && second && second != slash + 1 && second[1] == '\0';
}

static bool check_zone_type(const char *s, size_t size) {
  return is_word(s, size, NULL);
}

/* "0x41:0xd42": implementer (8 bits) and part (12 bits), both hex with 0x. */
static bool parse_cpu_part(const char *s, em_board_cpu_part_t *out) {
  unsigned long v[2];
  const char *p = s;
  for (int i = 0; i < 2; i++) {
    if (strncmp(p, "0x", 2) != 0 || !isxdigit((unsigned char)p[2])) {
      return false;
    }
    char *end = NULL;
    errno = 0;
    v[i] = strtoul(p, &end, 16);
    if (errno || end - p > 6) {
      return false;
    }
    p = end;
    if (i == 0 && *p++ != ':') {
      return false;
    }
  }
  if (*p != '\0' || v[0] > 0xff || v[1] > 0xfff) {
    return false;
  }
  out->implementer = (uint16_t)v[0];
  out->part = (uint16_t)v[1];
  return true;
}

static bool check_cpu_part(const char *s, size_t size) {
  em_board_cpu_part_t unused;
  (void)size;
  return parse_cpu_part(s, &unused);
}

/* "none" or an absolute path without blanks and without "..". */
static bool check_path_value(const char *s) {
  if (strcmp(s, "none") == 0) {
    return true;
  }
  if (s[0] != '/' || strlen(s) >= EM_BOARD_MAX_PATH || strstr(s, "..")) {
    return false;
  }
  for (const char *c = s; *c; c++) {
    if (!is_word_char(*c) && *c != '/' && *c != ':' && *c != '+') {
      return false;
    }
  }
  return true;
}

/*
 * The rows' own setters (em_schema_set_fn): each checks one key's value and stores it in the
 * profile (obj), or fails the load (ctx, a load_t) with its message. A list's value is split in
 * a copy (LIST_COPY), never in the reader's line.
 */
#define LIST_COPY(buf, value)                                                                      \
  char buf[PROFILE_MAX_LINE + 1];                                                                  \
  em_str_copy(buf, sizeof(buf), value)

/* The field of row k in the profile. */
static char *field_of(const key_def_t *k, void *obj) {
  return (char *)obj + k->offset;
}

static int set_name(void *ctx, const key_def_t *k, void *obj, const char *value) {
  char q[QUOTE_BYTES];
  if (!is_word(value, k->size, NULL)) {
    fail(ctx, "name '%s' must be 1..%d characters of [A-Za-z0-9_.-]", quote(q, sizeof(q), value),
         EM_BOARD_MAX_NAME - 1);
    return -EINVAL;
  }
  em_str_copy(field_of(k, obj), k->size, value);
  return 0;
}

static int set_description(void *ctx, const key_def_t *k, void *obj, const char *value) {
  if (!check_text(value, k->size)) {
    fail(ctx, "description must be 1..%zu printable characters", k->size - 1);
    return -EINVAL;
  }
  em_str_copy(field_of(k, obj), k->size, value);
  return 0;
}

/* arch, cpufreq: one of the row's choices, stored as its word. */
static int set_word(void *ctx, const key_def_t *k, void *obj, const char *value) {
  char q[QUOTE_BYTES];
  for (size_t i = 0; i < k->n_choices; i++) {
    if (strcmp(value, k->choices[i].name) == 0) {
      em_str_copy(field_of(k, obj), k->size, value);
      return 0;
    }
  }
  fail(ctx, "%s '%s' %s", k->name, quote(q, sizeof(q), value), k->want);
  return -EINVAL;
}

/* model, compatible, dmi: lists of text; the count follows the row's field. */
static int set_text_list(void *ctx, const key_def_t *k, void *obj, const char *value) {
  em_board_profile_t *p = obj;
  LIST_COPY(buf, value);
  char(*dst)[EM_BOARD_MAX_TEXT] = (char(*)[EM_BOARD_MAX_TEXT])(void *)field_of(k, obj);
  size_t *n = dst == p->model ? &p->n_model : dst == p->compatible ? &p->n_compatible : &p->n_dmi;
  item_check_t check = dst == p->compatible ? check_compatible : check_text;
  int got = split_list(ctx, k->name, buf, &dst[0][0], EM_BOARD_MAX_TEXT, EM_BOARD_MAX_MATCH, check,
                       check == check_compatible);
  if (got < 0) {
    return -EINVAL;
  }
  *n = (size_t)got;
  return 0;
}

static int set_cpu_parts(void *ctx, const key_def_t *k, void *obj, const char *value) {
  em_board_profile_t *p = obj;
  LIST_COPY(buf, value);
  char parts[EM_BOARD_MAX_MATCH][16];
  int got = split_list(ctx, k->name, buf, &parts[0][0], sizeof(parts[0]), EM_BOARD_MAX_MATCH,
                       check_cpu_part, false);
  for (int i = 0; i < got; i++) {
    parse_cpu_part(parts[i], &p->cpu_parts[i]);
  }
  p->n_cpu_parts = got > 0 ? (size_t)got : 0;
  return got > 0 ? 0 : -EINVAL;
}

static int set_events(void *ctx, const key_def_t *k, void *obj, const char *value) {
  em_board_profile_t *p = obj;
  LIST_COPY(buf, value);
  int got = split_list(ctx, k->name, buf, &p->events[0][0], EM_BOARD_MAX_EVENT, EM_BOARD_MAX_EVENTS,
                       check_event, false);
  p->n_events = got > 0 ? (size_t)got : 0;
  return got > 0 ? 0 : -EINVAL;
}

/* thermal: auto, none, or a list of thermal zone types kept as written. */
static int set_thermal(void *ctx, const key_def_t *k, void *obj, const char *value) {
  if (strcmp(value, "auto") == 0 || strcmp(value, "none") == 0) {
    em_str_copy(field_of(k, obj), k->size, value);
    return 0;
  }
  if (strlen(value) >= k->size) {
    fail(ctx, "thermal: longer than %zu characters", k->size - 1);
    return -EINVAL;
  }
  LIST_COPY(buf, value);
  char zones[EM_BOARD_MAX_MATCH * 2][EM_BOARD_MAX_NAME];
  if (split_list(ctx, k->name, buf, &zones[0][0], EM_BOARD_MAX_NAME, EM_BOARD_MAX_MATCH * 2,
                 check_zone_type, false) <= 0) {
    return -EINVAL;
  }
  em_str_copy(field_of(k, obj), k->size, value);
  return 0;
}

/* gpu_load, gpu_devfreq, emc: none or an absolute path. */
static int set_sensor_path(void *ctx, const key_def_t *k, void *obj, const char *value) {
  char q[QUOTE_BYTES];
  if (!check_path_value(value)) {
    fail(ctx, "%s '%s' must be none or an absolute path", k->name, quote(q, sizeof(q), value));
    return -EINVAL;
  }
  em_str_copy(field_of(k, obj), k->size, value);
  return 0;
}

static int set_power(void *ctx, const key_def_t *k, void *obj, const char *value) {
  char q[QUOTE_BYTES];
  const char *colon = strchr(value, ':');
  bool ok = strcmp(value, "none") == 0;
  if (!ok && colon) {
    size_t kind = (size_t)(colon - value);
    ok = ((kind == 5 && strncmp(value, "hwmon", 5) == 0) ||
          (kind == 3 && strncmp(value, "iio", 3) == 0)) &&
         is_word(colon + 1, EM_BOARD_MAX_NAME, NULL);
  }
  if (!ok) {
    fail(ctx, "power '%s' must be none, hwmon:<name> or iio:<name>", quote(q, sizeof(q), value));
    return -EINVAL;
  }
  em_str_copy(field_of(k, obj), k->size, value);
  return 0;
}
#undef LIST_COPY

static const em_parse_enum_t true_false[] = {{"true", 1}, {"false", 0}};
static const em_parse_enum_t arches[] = {{"aarch64", 0}, {"x86_64", 1}};
static const em_parse_enum_t auto_none[] = {{"auto", 0}, {"none", 1}};

/*
 * Every key of a profile, one row each: rows without `set` are stored by their type
 * (common/schema.h), the others by their own setter above; defaults come from the rows.
 * docs/BOARDS.md documents them.
 */
#define FIELD(f)                                                                                   \
  .offset = offsetof(em_board_profile_t, f), .size = sizeof(((em_board_profile_t *)0)->f)
#define NO_FIELD .offset = EM_SCHEMA_NO_FIELD, .size = 0
#define KEY(sec, nm, ty, ...)                                                                      \
  { .section = sec, .name = nm, .type = ty, __VA_ARGS__ }
static const key_def_t keys[] = {
    KEY("board", "name", EM_SCHEMA_ID, FIELD(name), .set = set_name, .example = "rpi4",
        .doc = "The file's name without .ini"),
    KEY("board", "description", EM_SCHEMA_STRING, FIELD(description), .set = set_description,
        .example = "Raspberry Pi 4 Model B", .doc = "One line for people"),
    KEY("board", "arch", EM_SCHEMA_CUSTOM, FIELD(arch), .set = set_word, .choices = arches,
        .n_choices = 2, .want = "must be aarch64 or x86_64", .example = "aarch64",
        .doc = "aarch64 or x86_64"),
    KEY("board", "model", EM_SCHEMA_LIST, FIELD(model), .set = set_text_list,
        .example = "Raspberry Pi 4", .doc = "proc/device-tree/model substrings"),
    KEY("board", "compatible", EM_SCHEMA_LIST, FIELD(compatible), .set = set_text_list,
        .example = "brcm,bcm2711", .doc = "proc/device-tree/compatible entries, blank-separated"),
    KEY("board", "cpu_parts", EM_SCHEMA_LIST, NO_FIELD, .set = set_cpu_parts,
        .example = "0x41:0xd08", .doc = "CPU implementer:part pairs"),
    KEY("board", "dmi", EM_SCHEMA_LIST, FIELD(dmi), .set = set_text_list, .example = "QEMU",
        .doc = "DMI vendor, product or board name substrings"),
    KEY("pmu", "events", EM_SCHEMA_LIST, NO_FIELD, .set = set_events,
        .example = "cycles, instructions", .doc = "PMU events counted on this board"),
    KEY("sensors", "period", EM_SCHEMA_DURATION, FIELD(sensors.period_ns), .min = 10 * NS_PER_MS,
        .max = 3600 * NS_PER_S, .def = "1s", .want = "must be a duration from 10ms to 60m, e.g. 1s",
        .example = "1s", .doc = "How often sensors are read"),
    KEY("sensors", "thermal", EM_SCHEMA_LIST, FIELD(sensors.thermal), .set = set_thermal,
        .def = "auto", .example = "auto", .doc = "auto, none or thermal zone types"),
    KEY("sensors", "cpufreq", EM_SCHEMA_CUSTOM, FIELD(sensors.cpufreq), .set = set_word,
        .choices = auto_none, .n_choices = 2, .want = "must be auto or none", .def = "auto",
        .example = "auto", .doc = "auto or none"),
    KEY("sensors", "gpu_load", EM_SCHEMA_PATH, FIELD(sensors.gpu_load), .set = set_sensor_path,
        .def = "none", .example = "/sys/devices/gpu.0/load",
        .doc = "A per-mille load file, or none"),
    KEY("sensors", "gpu_devfreq", EM_SCHEMA_PATH, FIELD(sensors.gpu_devfreq),
        .set = set_sensor_path, .def = "none", .example = "/sys/class/devfreq/17000000.gpu",
        .doc = "The GPU's devfreq directory, or none"),
    KEY("sensors", "emc", EM_SCHEMA_PATH, FIELD(sensors.emc), .set = set_sensor_path, .def = "none",
        .example = "/sys/kernel/actmon_avg_activity/mc_all",
        .doc = "Memory controller activity file or devfreq directory, or none"),
    KEY("sensors", "power", EM_SCHEMA_CUSTOM, FIELD(sensors.power), .set = set_power, .def = "none",
        .example = "hwmon:ina3221", .doc = "hwmon:<name>, iio:<name> or none"),
    KEY("sensors", "nvml", EM_SCHEMA_ENUM, FIELD(sensors.nvml), .def = "false",
        .choices = true_false, .n_choices = 2, .want = "must be true or false", .example = "false",
        .doc = "Query NVML for discrete GPUs"),
    KEY("defaults", "sample_period", EM_SCHEMA_DURATION, FIELD(sample_period_ns), .min = NS_PER_MS,
        .max = 60 * NS_PER_S, .def = "100ms",
        .want = "must be a duration from 1ms to 60s, e.g. 100ms", .example = "100ms",
        .doc = "The agent's sample_period unless its config says"),
    KEY("defaults", "temp_max", EM_SCHEMA_INT, FIELD(temp_max_c), .min = 1, .max = 150,
        .want = "must be whole degrees C from 1 to 150", .example = "85",
        .doc = "A WARN thermal budget unless the config says"),
};
#undef KEY
#undef FIELD
#undef NO_FIELD
#define N_KEYS (sizeof(keys) / sizeof(keys[0]))
_Static_assert(N_KEYS <= sizeof(unsigned long) * 8, "load_t.seen has a bit per row");

/* Whether row `name` of `section` was given in the file. */
static bool seen(const load_t *ld, const char *section, const char *name) {
  const key_def_t *k = em_schema_find(keys, N_KEYS, section, name);
  return k != NULL && (ld->seen & (1ul << (k - keys))) != 0;
}

/* A message of the schema (em_schema_apply) as the load's problem. */
static void fail_msg(void *ctx, const char *msg) {
  fail(ctx, "%s", msg);
}

/* The INI reader's callbacks (edgemon/common/ini.h); the first problem stops the read. */
static int on_section(void *user, int line, const char *name) {
  load_t *ld = user;
  ld->line = line;
  ld->section = SEC_NONE;
  for (size_t i = 1; name != NULL && i < sizeof(section_names) / sizeof(section_names[0]); i++) {
    if (strcmp(name, section_names[i]) == 0) {
      ld->section = (section_t)i;
    }
  }
  if (ld->section == SEC_NONE) {
    char q[QUOTE_BYTES];
    const char *hint = name != NULL ? em_schema_closest(name, section_names + 1, 4) : NULL;
    fail(ld, "unknown section '[%s]' (board, pmu, sensors or defaults)%s%s%s",
         quote(q, sizeof(q), name != NULL ? name : ""), hint ? "; did you mean [" : "",
         hint ? hint : "", hint ? "]?" : "");
    return 1;
  }
  return 0;
}

static int on_pair(void *user, int line, const char *section, const char *name, const char *value) {
  load_t *ld = user;
  (void)section; /* Tracked in load_t by on_section. */
  ld->line = line;
  char q[QUOTE_BYTES];
  if (ld->section == SEC_NONE) {
    fail(ld, "key '%s' is outside any section", quote(q, sizeof(q), name));
    return 1;
  }
  const key_def_t *k = em_schema_find(keys, N_KEYS, section_names[ld->section], name);
  if (k == NULL) {
    const char *hint = em_schema_suggest(keys, N_KEYS, section_names[ld->section], name);
    fail(ld, "unknown key '%s' in [%s]%s%s%s", quote(q, sizeof(q), name),
         section_names[ld->section], hint ? "; did you mean '" : "", hint ? hint : "",
         hint ? "'?" : "");
    return 1;
  }
  unsigned long bit = 1ul << (k - keys);
  if (ld->seen & bit) {
    fail(ld, "duplicate key '%s' in [%s]", name, section_names[ld->section]);
    return 1;
  }
  ld->seen |= bit;
  if (value[0] == '\0') {
    fail(ld, "%s has no value", name);
    return 1;
  }
  em_schema_apply(k, ld->p, value, ld, fail_msg);
  return ld->failed ? 1 : 0;
}

static int on_error(void *user, int line, em_ini_problem_t kind, const char *text,
                    const char *msg) {
  load_t *ld = user;
  ld->line = line;
  char q[QUOTE_BYTES];
  if (kind == EM_INI_NOT_PAIR) {
    fail(ld, "'%s' is not key = value", quote(q, sizeof(q), text));
  } else {
    fail(ld, "%s", msg);
  }
  return 1;
}

/* Every row's default (the load reports a bad one: a table mistake). */
static void profile_defaults(load_t *ld) {
  memset(ld->p, 0, sizeof(*ld->p));
  (void)em_schema_defaults(keys, N_KEYS, ld->p, ld, NULL);
}

int em_board_load(const char *path, em_board_profile_t *out, char *err, size_t err_len) {
  if (!path || !out) {
    return -EINVAL;
  }
  if (err && err_len > 0) {
    err[0] = '\0';
  }
  load_t ld = {.p = out, .path = path, .err = err, .err_len = err_len};
  profile_defaults(&ld);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    int e = errno;
    fail(&ld, "cannot open: %s", strerror(e));
    return -e;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    fail(&ld, "not a regular file");
    return -EINVAL;
  }
  FILE *f = fdopen(fd, "r");
  if (!f) {
    int e = errno;
    close(fd);
    fail(&ld, "cannot read: %s", strerror(e));
    return -e;
  }
  const em_ini_reader_t reader = {.file = path,
                                  .max_line = PROFILE_MAX_LINE,
                                  .on_section = on_section,
                                  .on_pair = on_pair,
                                  .on_error = on_error};
  int rc = em_ini_parse_file(f, &reader, &ld);
  fclose(f);
  if (!ld.failed && rc < 0) {
    ld.line = 0;
    fail(&ld, "read error: %s", strerror(-rc));
  }
  ld.line = 0;
  out->has_temp_max = seen(&ld, "defaults", "temp_max");
  static const char *const required[] = {"name", "description", "arch"};
  for (size_t i = 0; i < sizeof(required) / sizeof(required[0]) && !ld.failed; i++) {
    if (!seen(&ld, "board", required[i])) {
      fail(&ld, "[board] %s is missing", required[i]);
    }
  }
  if (!ld.failed) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(out->name);
    if (strncmp(base, out->name, n) != 0 || strcmp(base + n, ".ini") != 0) {
      fail(&ld, "name '%s' does not match the file name '%s'", out->name, base);
    }
  }
  return ld.failed ? -EINVAL : 0;
}

/* ---- Listing ------------------------------------------------------------------------------ */

static int cmp_names(const void *a, const void *b) {
  return strcmp(a, b);
}

int em_board_list(const char *dir, char names[][EM_BOARD_MAX_NAME], size_t max, size_t *n) {
  if (!dir || !names || !n) {
    return -EINVAL;
  }
  *n = 0;
  DIR *d = opendir(dir);
  if (!d) {
    return -errno;
  }
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (e->d_name[0] == '.' || len <= 4 || strcmp(e->d_name + len - 4, ".ini") != 0) {
      continue;
    }
    if (len - 4 >= EM_BOARD_MAX_NAME) {
      continue; /* Cannot be a valid profile name; em_board_load would refuse it. */
    }
    if (*n == max) {
      rc = -E2BIG;
      break;
    }
    memcpy(names[*n], e->d_name, len - 4);
    names[*n][len - 4] = '\0';
    (*n)++;
  }
  closedir(d);
  qsort(names, *n, sizeof(names[0]), cmp_names);
  return rc;
}

/* ---- Evidence ----------------------------------------------------------------------------- */

typedef struct {
  em_board_cpu_part_t id;
  unsigned count; /* CPUs that report it. */
} part_count_t;

typedef struct {
  char model[MODEL_BYTES];
  bool has_model;
  char compat[MAX_COMPAT][EM_BOARD_MAX_TEXT];
  size_t n_compat;
  part_count_t parts[MAX_PARTS];
  size_t n_parts;
  char dmi[3][DMI_BYTES];
  bool has_dmi[3];
  char arch[16];
  char arch_why[EM_BOARD_MAX_REASON / 2];
  bool arch_from_cpuinfo;
} evidence_t;

static const char *const dmi_files[3] = {"sys_vendor", "product_name", "board_name"};

/* root + "/" + rel, without doubling the slash; false when it does not fit. */
static bool join(char *dst, size_t size, const char *root, const char *rel) {
  size_t rl = strlen(root);
  const char *sep = (rl > 0 && root[rl - 1] == '/') ? "" : "/";
  int n = snprintf(dst, size, "%s%s%s", root, sep, rel);
  return n > 0 && (size_t)n < size;
}

/* Opens root/rel read-only when it is a regular file (proc/cpuinfo, read line by line); -errno
 * otherwise. */
static int open_regular(const char *root, const char *rel) {
  char path[4096];
  if (!join(path, sizeof(path), root, rel)) {
    return -ENAMETOOLONG;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    return -errno;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return -EINVAL;
  }
  return fd;
}

/* Reads at most size-1 bytes of root/rel (a regular file) into buf, NUL-terminated; returns the
 * bytes or -errno (edgemon/common/file.h). */
static ssize_t read_small(const char *root, const char *rel, char *buf, size_t size) {
  char path[4096];
  if (!join(path, sizeof(path), root, rel)) {
    return -ENAMETOOLONG;
  }
  return em_file_read_small(path, buf, size, NULL);
}

/* A one-line file (model, DMI): up to the first NUL or newline, trailing blanks cut. */
static bool read_line_file(const char *root, const char *rel, char *buf, size_t size) {
  if (read_small(root, rel, buf, size) < 0) {
    return false;
  }
  buf[strcspn(buf, "\n")] = '\0';
  char *t = em_str_trim(buf);
  memmove(buf, t, strlen(t) + 1);
  return buf[0] != '\0';
}

static void read_compatible(const char *root, evidence_t *ev) {
  char buf[COMPAT_BYTES];
  ssize_t n = read_small(root, "proc/device-tree/compatible", buf, sizeof(buf));
  for (ssize_t i = 0; i < n && ev->n_compat < MAX_COMPAT;) {
    const char *entry = buf + i;
    size_t len = strnlen(entry, (size_t)(n - i));
    if (len > 0 && len < EM_BOARD_MAX_TEXT) {
      memcpy(ev->compat[ev->n_compat], entry, len);
      ev->compat[ev->n_compat][len] = '\0';
      ev->n_compat++;
    }
    i += (ssize_t)len + 1;
  }
}

/* The number after "key<blanks>:" in a cpuinfo line, or false. */
static bool cpuinfo_value(const char *line, const char *key, const char **value) {
  size_t kl = strlen(key);
  if (strncmp(line, key, kl) != 0) {
    return false;
  }
  const char *p = line + kl;
  while (*p == ' ' || *p == '\t') {
    p++;
  }
  if (*p != ':') {
    return false;
  }
  p++;
  while (*p == ' ' || *p == '\t') {
    p++;
  }
  *value = p;
  return true;
}

static bool parse_hex_field(const char *v, unsigned long max, unsigned long *out) {
  char *end = NULL;
  errno = 0;
  unsigned long x = strtoul(v, &end, 0);
  if (errno || end == v || x > max) {
    return false;
  }
  while (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r') {
    end++;
  }
  if (*end != '\0') {
    return false;
  }
  *out = x;
  return true;
}

static void count_part(evidence_t *ev, unsigned long impl, unsigned long part) {
  for (size_t i = 0; i < ev->n_parts; i++) {
    if (ev->parts[i].id.implementer == impl && ev->parts[i].id.part == part) {
      ev->parts[i].count++;
      return;
    }
  }
  if (ev->n_parts < MAX_PARTS) {
    ev->parts[ev->n_parts].id.implementer = (uint16_t)impl;
    ev->parts[ev->n_parts].id.part = (uint16_t)part;
    ev->parts[ev->n_parts].count = 1;
    ev->n_parts++;
  }
}

/* CPU parts and the arch from proc/cpuinfo (arm64: "CPU architecture: 8"; x86: "flags ... lm"). */
static void read_cpuinfo(const char *root, evidence_t *ev) {
  int fd = open_regular(root, "proc/cpuinfo");
  if (fd < 0) {
    return;
  }
  FILE *f = fdopen(fd, "r");
  if (!f) {
    close(fd);
    return;
  }
  char line[CPUINFO_LINE];
  bool partial = false; /* The previous fgets stopped inside a long line. */
  bool have_impl = false, arm = false, x86 = false, x86_lm = false;
  unsigned long impl = 0;
  for (long n = 0; n < MAX_CPUINFO && fgets(line, sizeof(line), f); n++) {
    bool starts = !partial;
    size_t len = strlen(line);
    partial = len > 0 && line[len - 1] != '\n';
    if (!starts) {
      if (x86 && strstr(line, " lm ")) {
        x86_lm = true; /* flags lines run past the buffer on x86. */
      }
      continue;
    }
    const char *v;
    unsigned long x;
    if (cpuinfo_value(line, "CPU implementer", &v) && parse_hex_field(v, 0xff, &x)) {
      impl = x;
      have_impl = true;
    } else if (cpuinfo_value(line, "CPU part", &v) && parse_hex_field(v, 0xfff, &x)) {
      if (have_impl) {
        count_part(ev, impl, x);
      }
    } else if (cpuinfo_value(line, "CPU architecture", &v)) {
      arm = arm || strncmp(v, "8", 1) == 0 || strncmp(v, "AArch64", 7) == 0;
    } else if (cpuinfo_value(line, "vendor_id", &v)) {
      x86 = true;
    } else if (cpuinfo_value(line, "flags", &v)) {
      x86_lm = x86_lm || strstr(line, " lm ") != NULL || strstr(line, " lm\n") != NULL;
    }
  }
  fclose(f);
  if (arm) {
    em_str_copy(ev->arch, sizeof(ev->arch), "aarch64");
    em_str_copy(ev->arch_why, sizeof(ev->arch_why), "proc/cpuinfo 'CPU architecture: 8'");
    ev->arch_from_cpuinfo = true;
  } else if (x86 && x86_lm) {
    em_str_copy(ev->arch, sizeof(ev->arch), "x86_64");
    em_str_copy(ev->arch_why, sizeof(ev->arch_why), "proc/cpuinfo 'vendor_id' and flag 'lm'");
    ev->arch_from_cpuinfo = true;
  }
}

static void gather(const char *root, evidence_t *ev) {
  memset(ev, 0, sizeof(*ev));
  ev->has_model = read_line_file(root, "proc/device-tree/model", ev->model, sizeof(ev->model));
  read_compatible(root, ev);
  read_cpuinfo(root, ev);
  for (int i = 0; i < 3; i++) {
    char rel[64];
    snprintf(rel, sizeof(rel), "sys/class/dmi/id/%s", dmi_files[i]);
    ev->has_dmi[i] = read_line_file(root, rel, ev->dmi[i], sizeof(ev->dmi[i]));
  }
  if (ev->arch[0] == '\0') {
    struct utsname u;
    if (uname(&u) == 0) {
      em_str_copy(ev->arch, sizeof(ev->arch), u.machine);
    }
    snprintf(ev->arch_why, sizeof(ev->arch_why), "uname (proc/cpuinfo under %s tells nothing)",
             root);
  }
}

/* ---- Scoring ------------------------------------------------------------------------------ */

#define SCORE_MODEL  4000000l /* + 1000 per byte of the longest matching substring */
#define SCORE_COMPAT 2000000l /* + 1000 per place before the end of the first 64 entries */
#define SCORE_CPU    10000l   /* per profile part present */
#define SCORE_DMI    100l     /* per profile substring present */

typedef struct {
  long score;
  char reasons[EM_BOARD_MAX_REASONS][EM_BOARD_MAX_REASON];
  size_t n_reasons;
} score_t;

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static void
add_reason(score_t *s, const char *fmt, ...) {
  if (s->n_reasons == EM_BOARD_MAX_REASONS) {
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->reasons[s->n_reasons], EM_BOARD_MAX_REASON, fmt, ap);
  va_end(ap);
  s->n_reasons++;
}

static void score_profile(const em_board_profile_t *p, const evidence_t *ev, score_t *s) {
  char q1[QUOTE_BYTES], q2[QUOTE_BYTES];
  memset(s, 0, sizeof(*s));
  size_t best_len = 0, best_i = 0;
  for (size_t i = 0; ev->has_model && i < p->n_model; i++) {
    if (strstr(ev->model, p->model[i]) && strlen(p->model[i]) > best_len) {
      best_len = strlen(p->model[i]);
      best_i = i;
    }
  }
  if (best_len > 0) {
    s->score += SCORE_MODEL + 1000l * (long)best_len;
    add_reason(s, "model '%s' contains '%s'", quote(q1, sizeof(q1), ev->model), p->model[best_i]);
  }
  for (size_t e = 0; e < ev->n_compat; e++) {
    size_t i = 0;
    while (i < p->n_compatible && strcmp(ev->compat[e], p->compatible[i]) != 0) {
      i++;
    }
    if (i < p->n_compatible) {
      s->score += SCORE_COMPAT + 1000l * (long)(64 - e);
      add_reason(s, "compatible '%s' (entry %zu of %zu)", quote(q1, sizeof(q1), ev->compat[e]),
                 e + 1, ev->n_compat);
      break; /* The most specific entry counts. */
    }
  }
  for (size_t i = 0; i < p->n_cpu_parts; i++) {
    for (size_t k = 0; k < ev->n_parts; k++) {
      if (ev->parts[k].id.implementer == p->cpu_parts[i].implementer &&
          ev->parts[k].id.part == p->cpu_parts[i].part) {
        s->score += SCORE_CPU;
        add_reason(s, "CPU part 0x%02x:0x%03x x%u", ev->parts[k].id.implementer,
                   ev->parts[k].id.part, ev->parts[k].count);
      }
    }
  }
  for (size_t i = 0; i < p->n_dmi; i++) {
    for (int f = 0; f < 3; f++) {
      if (ev->has_dmi[f] && strstr(ev->dmi[f], p->dmi[i])) {
        s->score += SCORE_DMI;
        add_reason(s, "DMI %s '%s' contains '%s'", dmi_files[f], quote(q1, sizeof(q1), ev->dmi[f]),
                   quote(q2, sizeof(q2), p->dmi[i]));
        break;
      }
    }
  }
}

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static void
add_note(em_board_detection_t *out, const char *fmt, ...) {
  if (out->n_notes == EM_BOARD_MAX_REASONS) {
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out->notes[out->n_notes], EM_BOARD_MAX_REASON, fmt, ap);
  va_end(ap);
  out->n_notes++;
}

static void add_out_reason(em_board_detection_t *out, const char *text) {
  if (out->n_reasons < EM_BOARD_MAX_REASONS) {
    em_str_copy(out->reasons[out->n_reasons++], EM_BOARD_MAX_REASON, text);
  }
}

/* Loads boards_dir/<name>.ini; a failure becomes a note. */
static int load_named(const char *boards_dir, const char *name, em_board_profile_t *p,
                      em_board_detection_t *out) {
  char path[4096];
  char err[EM_BOARD_MAX_ERROR];
  int n = snprintf(path, sizeof(path), "%s/%s.ini", boards_dir, name);
  if (n < 0 || (size_t)n >= sizeof(path)) {
    add_note(out, "%s/%s.ini: path too long", boards_dir, name);
    return -ENAMETOOLONG;
  }
  int rc = em_board_load(path, p, err, sizeof(err));
  if (rc) {
    add_note(out, "%s", err);
  }
  return rc;
}

/* The evidence nobody matched, said once, so that --detect shows what it saw. */
static void describe_unmatched(const evidence_t *ev, em_board_detection_t *out) {
  char q[QUOTE_BYTES];
  char line[EM_BOARD_MAX_REASON];
  if (ev->has_model) {
    snprintf(line, sizeof(line), "model '%s' matches no profile", quote(q, sizeof(q), ev->model));
    add_out_reason(out, line);
  }
  if (ev->n_parts > 0) {
    int o = snprintf(line, sizeof(line), "CPU parts");
    for (size_t i = 0; i < ev->n_parts && o > 0 && (size_t)o < sizeof(line); i++) {
      o += snprintf(line + o, sizeof(line) - (size_t)o, " 0x%02x:0x%03x x%u",
                    ev->parts[i].id.implementer, ev->parts[i].id.part, ev->parts[i].count);
    }
    if (o > 0 && (size_t)o + 20 < sizeof(line)) {
      snprintf(line + o, sizeof(line) - (size_t)o, " match no profile");
    }
    add_out_reason(out, line);
  }
  for (int f = 0; f < 3; f++) {
    if (ev->has_dmi[f]) {
      snprintf(line, sizeof(line), "DMI %s '%s' matches no profile", dmi_files[f],
               quote(q, sizeof(q), ev->dmi[f]));
      add_out_reason(out, line);
      break;
    }
  }
}

/* generic-* with ev->arch. Returns 0 or -ENOENT. */
static int pick_generic(const char *boards_dir, char names[][EM_BOARD_MAX_NAME], size_t n,
                        const evidence_t *ev, em_board_detection_t *out) {
  static em_board_profile_t p; /* Large; start-up and --detect only, single-threaded. */
  for (size_t i = 0; i < n; i++) {
    if (strncmp(names[i], "generic-", 8) != 0) {
      continue;
    }
    if (load_named(boards_dir, names[i], &p, out) == 0 && strcmp(p.arch, ev->arch) == 0) {
      out->profile = p;
      char line[EM_BOARD_MAX_REASON];
      snprintf(line, sizeof(line), "generic profile for arch %s (arch from %s)", ev->arch,
               ev->arch_why);
      add_out_reason(out, line);
      return 0;
    }
  }
  add_note(out, "no generic-* profile in %s has arch %s", boards_dir, ev->arch);
  return -ENOENT;
}

int em_board_detect(const char *root, const char *boards_dir, em_board_detection_t *out) {
  if (!root || !boards_dir || !out) {
    return -EINVAL;
  }
  static evidence_t ev;
  static em_board_profile_t cand;
  static score_t best, cur;
  static char names[EM_BOARD_MAX_PROFILES][EM_BOARD_MAX_NAME];
  memset(out, 0, sizeof(*out));
  size_t n = 0;
  int rc = em_board_list(boards_dir, names, EM_BOARD_MAX_PROFILES, &n);
  if (rc == -E2BIG) {
    add_note(out, "%s holds more than %d profiles; the first %d by name are used", boards_dir,
             EM_BOARD_MAX_PROFILES, EM_BOARD_MAX_PROFILES);
  } else if (rc) {
    return rc;
  }
  gather(root, &ev);
  em_str_copy(out->arch, sizeof(out->arch), ev.arch);

  memset(&best, 0, sizeof(best));
  char tied[EM_BOARD_MAX_REASON] = "";
  for (size_t i = 0; i < n; i++) {
    if (load_named(boards_dir, names[i], &cand, out) != 0) {
      continue;
    }
    if (ev.arch_from_cpuinfo && strcmp(cand.arch, ev.arch) != 0) {
      continue; /* An x86 machine is never a Jetson, whatever its files say. */
    }
    score_profile(&cand, &ev, &cur);
    if (cur.score == 0) {
      continue;
    }
    if (cur.score > best.score) {
      best = cur;
      out->profile = cand;
      tied[0] = '\0';
    } else if (cur.score == best.score) {
      size_t len = strlen(tied);
      snprintf(tied + len, sizeof(tied) - len, "%s%s", len ? ", " : "", cand.name);
    }
  }
  if (best.score == 0) {
    describe_unmatched(&ev, out);
    return pick_generic(boards_dir, names, n, &ev, out);
  }
  for (size_t i = 0; i < best.n_reasons; i++) {
    add_out_reason(out, best.reasons[i]);
  }
  if (tied[0] != '\0') {
    add_note(out, "as strong a match: %s (the first name in sort order wins)", tied);
  }
  return 0;
}

int em_board_resolve(const char *board, const char *root, const char *boards_dir,
                     em_board_detection_t *out) {
  if (!board || !root || !boards_dir || !out) {
    return -EINVAL;
  }
  if (strcmp(board, "auto") == 0) {
    return em_board_detect(root, boards_dir, out);
  }
  memset(out, 0, sizeof(*out));
  static char names[EM_BOARD_MAX_PROFILES][EM_BOARD_MAX_NAME];
  size_t n = 0;
  int rc = em_board_list(boards_dir, names, EM_BOARD_MAX_PROFILES, &n);
  if (rc && rc != -E2BIG) {
    return rc;
  }
  if (strcmp(board, "generic") == 0) {
    static evidence_t ev;
    gather(root, &ev);
    em_str_copy(out->arch, sizeof(out->arch), ev.arch);
    return pick_generic(boards_dir, names, n, &ev, out);
  }
  if (!is_word(board, EM_BOARD_MAX_NAME, NULL)) {
    return -ENOENT;
  }
  size_t i = 0;
  while (i < n && strcmp(names[i], board) != 0) {
    i++;
  }
  if (i == n) {
    return -ENOENT;
  }
  static em_board_profile_t p;
  if (load_named(boards_dir, board, &p, out) != 0) {
    return -EINVAL;
  }
  out->profile = p;
  em_str_copy(out->arch, sizeof(out->arch), p.arch);
  char line[EM_BOARD_MAX_REASON];
  snprintf(line, sizeof(line), "named in the config: board = %s", board);
  add_out_reason(out, line);
  return 0;
}
