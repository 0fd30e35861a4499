/*
 * pmu_events.c - resolves perf event strings against <root>/sys/bus/event_source/devices.
 *
 * The order of the lookups is perf's: a raw code "r<hex>" first, then "pmu/terms/", then a
 * generic name (through em_pmu_resolve() of pmu.c, the one table of generic names), then a
 * kernel event name searched in every CPU PMU. Term lists (from an event string or an
 * events/<name> file) are parsed into a bounded array and applied one by one, each through
 * the PMU's format/<term> file; a later term overrides the bits of an earlier one, so an
 * alias followed by "umask=..." works as in perf.
 *
 * Every file is read whole into a stack buffer of EM_PMU_EVENTS_FILE_BYTES (larger is
 * malformed), opened O_NONBLOCK and required to be a regular file, so a FIFO or a device in
 * a garbage tree cannot hang the caller. Names are checked ([A-Za-z0-9_-], bounded) before
 * they become path components, so "../" cannot walk out of the tree.
 *
 * em_pmu_events_event() turns a configured name into the em_pmu_event_t that em_pmu_new()
 * opens (generic table first, then the resolution above, entries folded into parts), and a
 * name nothing resolves into an event with EM_PMU_EVENTS_ABSENT_TYPE, so the counter is absent
 * with its reason instead of stopping the agent's start.
 *
 * Owns nothing between calls; no global state; single-threaded.
 */
#define _POSIX_C_SOURCE 200809L

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <linux/perf_event.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "edgemon/common/file.h"
#include "log.h"
#include "pmu.h"
#include "pmu_events.h"

#define DEVICES_DIR     "sys/bus/event_source/devices"
#define PATH_BYTES      1024
#define MAX_PMUS        64  /* PMU directories looked at for a bare event name. */
#define MAX_TERMS       16  /* Terms in one list. */
#define MAX_EVENT_BYTES 256 /* Longest event string accepted, with the NUL. */

/* One "name[=value]" of a term list. */
typedef struct {
  char name[EM_PMU_EVENTS_NAME_BYTES];
  bool has_value; /* false: a bare term. */
  bool question;  /* "name=?": a parameter left to the user. */
  uint64_t value;
} term_t;

/* A PMU directory's identity. */
typedef struct {
  char name[EM_PMU_EVENTS_NAME_BYTES];
  char dir[PATH_BYTES]; /* <root>/sys/bus/event_source/devices/<name> */
  uint32_t type;
  bool any_cpu;
  em_pmu_events_cpus_t cpus;
} pmu_t;

/* ---- small helpers ---------------------------------------------------------------------- */

/* Formats the error message, replacing control characters so it stays one printable line. */
__attribute__((format(printf, 2, 3))) static void set_error(em_pmu_events_t *out, const char *fmt,
                                                            ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out->error, sizeof(out->error), fmt, ap);
  va_end(ap);
  for (char *p = out->error; *p != '\0'; p++) {
    unsigned char c = (unsigned char)*p;
    if (c < 0x20 || c == 0x7f) {
      *p = '?';
    }
  }
}

/* A name that may become a path component: 1..63 of [A-Za-z0-9_-]. */
static bool valid_name(const char *s, size_t len) {
  if (len == 0 || len >= EM_PMU_EVENTS_NAME_BYTES) {
    return false;
  }
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!isalnum(c) && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

/* Builds "a/b" into buf. Returns 0 or -ENAMETOOLONG. */
static int join(char *buf, size_t cap, const char *a, const char *b) {
  int n = snprintf(buf, cap, "%s/%s", a, b);
  if (n < 0 || (size_t)n >= cap) {
    return -ENAMETOOLONG;
  }
  return 0;
}

/*
 * Reads a whole small regular file into buf (NUL-terminated, trailing white space removed)
 * with the common bounded reader. Returns 0, -errno of open/read, -EFBIG when it does not
 * fit, -EINVAL for a NUL byte or a file that is not regular.
 */
static int read_small(const char *path, char *buf, size_t cap) {
  bool truncated = false;
  ssize_t n = em_file_read_small(path, buf, cap, &truncated);
  if (n < 0) {
    return (int)n;
  }
  if (truncated) {
    return -EFBIG;
  }
  size_t len = (size_t)n;
  if (memchr(buf, '\0', len) != NULL) {
    return -EINVAL;
  }
  while (len > 0 && isspace((unsigned char)buf[len - 1])) {
    len--;
  }
  buf[len] = '\0';
  return 0;
}

/* Parses a decimal or 0x-hex unsigned number filling [s, s+len). Returns 0 or -EINVAL. */
static int parse_u64(const char *s, size_t len, uint64_t *out) {
  unsigned base = 10;
  if (len > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s += 2;
    len -= 2;
  }
  if (len == 0) {
    return -EINVAL;
  }
  uint64_t v = 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    unsigned d;
    if (isdigit(c)) {
      d = (unsigned)(c - '0');
    } else if (base == 16 && isxdigit(c)) {
      d = (unsigned)(tolower(c) - 'a' + 10);
    } else {
      return -EINVAL;
    }
    if (v > (UINT64_MAX - d) / base) {
      return -EINVAL;
    }
    v = v * base + d;
  }
  *out = v;
  return 0;
}

/* ---- format, cpus ------------------------------------------------------------------------ */

/*
 * Parses a sysfs range list ("0-3,8,10-11", optional trailing white space) and sets bit n of
 * bits[] (64 to a word, lowest first) for each number n listed. Every number must be below
 * `limit`; bits[] holds at least `limit` bits and is only ORed into. Returns 0, or -EINVAL
 * (empty, malformed, a number >= limit, a range running backwards).
 */
static int parse_range_list(const char *text, unsigned long limit, uint64_t *bits) {
  const char *p = text;
  for (;;) {
    char *end;
    if (!isdigit((unsigned char)*p)) {
      return -EINVAL;
    }
    errno = 0;
    unsigned long lo = strtoul(p, &end, 10);
    unsigned long hi = lo;
    if (errno != 0 || lo >= limit) {
      return -EINVAL;
    }
    p = end;
    if (*p == '-') {
      p++;
      if (!isdigit((unsigned char)*p)) {
        return -EINVAL;
      }
      errno = 0;
      hi = strtoul(p, &end, 10);
      if (errno != 0 || hi >= limit || hi < lo) {
        return -EINVAL;
      }
      p = end;
    }
    for (unsigned long n = lo; n <= hi; n++) {
      bits[n / 64] |= UINT64_C(1) << (n % 64);
    }
    if (*p == ',') {
      p++;
      continue;
    }
    break;
  }
  while (isspace((unsigned char)*p)) {
    p++;
  }
  if (*p != '\0') {
    return -EINVAL;
  }
  return 0;
}

int em_pmu_events_parse_format(const char *text, em_pmu_events_format_t *out) {
  if (text == NULL || out == NULL) {
    return -EINVAL;
  }
  const char *colon = strchr(text, ':');
  if (colon == NULL) {
    return -EINVAL;
  }
  size_t wlen = (size_t)(colon - text);
  int word;
  if (wlen == 6 && strncmp(text, "config", 6) == 0) {
    word = 0;
  } else if (wlen == 7 && strncmp(text, "config1", 7) == 0) {
    word = 1;
  } else if (wlen == 7 && strncmp(text, "config2", 7) == 0) {
    word = 2;
  } else {
    return -EINVAL;
  }
  uint64_t mask = 0;
  int rc = parse_range_list(colon + 1, 64, &mask);
  if (rc != 0) {
    return rc;
  }
  out->word = word;
  out->mask = mask;
  return 0;
}

int em_pmu_events_encode(const em_pmu_events_format_t *fmt, uint64_t value, uint64_t config[3]) {
  if (fmt == NULL || config == NULL || fmt->word < 0 || fmt->word > 2 || fmt->mask == 0) {
    return -EINVAL;
  }
  uint64_t deposit = 0;
  uint64_t v = value;
  for (unsigned b = 0; b < 64; b++) {
    if ((fmt->mask & (UINT64_C(1) << b)) == 0) {
      continue;
    }
    if ((v & 1) != 0) {
      deposit |= UINT64_C(1) << b;
    }
    v >>= 1;
  }
  if (v != 0) {
    return -ERANGE;
  }
  config[fmt->word] = (config[fmt->word] & ~fmt->mask) | deposit;
  return 0;
}

int em_pmu_events_parse_cpus(const char *text, em_pmu_events_cpus_t *out) {
  if (text == NULL || out == NULL) {
    return -EINVAL;
  }
  em_pmu_events_cpus_t set;
  memset(&set, 0, sizeof(set));
  int rc = parse_range_list(text, EM_PMU_EVENTS_MAX_CPUS, set.bits);
  if (rc != 0) {
    return rc;
  }
  *out = set;
  return 0;
}

bool em_pmu_events_cpu_isset(const em_pmu_events_cpus_t *set, unsigned cpu) {
  if (set == NULL || cpu >= EM_PMU_EVENTS_MAX_CPUS) {
    return false;
  }
  return (set->bits[cpu / 64] & (UINT64_C(1) << (cpu % 64))) != 0;
}

unsigned em_pmu_events_cpu_count(const em_pmu_events_cpus_t *set) {
  unsigned n = 0;
  if (set == NULL) {
    return 0;
  }
  for (size_t w = 0; w < sizeof(set->bits) / sizeof(set->bits[0]); w++) {
    for (uint64_t x = set->bits[w]; x != 0; x &= x - 1) {
      n++;
    }
  }
  return n;
}

/* ---- terms ------------------------------------------------------------------------------- */

/*
 * Parses "a=1,b=0x2,c,d=?" into terms[] (at most MAX_TERMS). Spaces around terms are
 * allowed. Returns the count, or -EINVAL with a reason in why[].
 */
static int parse_terms(const char *text, term_t *terms, char *why, size_t why_len) {
  size_t n = 0;
  const char *p = text;
  for (;;) {
    while (*p == ' ' || *p == '\t') {
      p++;
    }
    const char *end = p + strcspn(p, ",");
    const char *stop = end;
    while (stop > p && (stop[-1] == ' ' || stop[-1] == '\t')) {
      stop--;
    }
    if (stop == p) {
      snprintf(why, why_len, "empty term");
      return -EINVAL;
    }
    if (n == MAX_TERMS) {
      snprintf(why, why_len, "more than %d terms", MAX_TERMS);
      return -EINVAL;
    }
    const char *eq = memchr(p, '=', (size_t)(stop - p));
    size_t nlen = (size_t)((eq != NULL ? eq : stop) - p);
    if (!valid_name(p, nlen)) {
      snprintf(why, why_len, "bad term name '%.*s'", (int)(nlen > 64 ? 64 : nlen), p);
      return -EINVAL;
    }
    term_t *t = &terms[n];
    memset(t, 0, sizeof(*t));
    memcpy(t->name, p, nlen);
    t->name[nlen] = '\0';
    if (eq != NULL) {
      const char *v = eq + 1;
      size_t vlen = (size_t)(stop - v);
      t->has_value = true;
      if (vlen == 1 && v[0] == '?') {
        t->question = true;
      } else if (parse_u64(v, vlen, &t->value) != 0) {
        snprintf(why, why_len, "bad value '%.*s' for '%s'", (int)(vlen > 64 ? 64 : vlen), v,
                 t->name);
        return -EINVAL;
      }
    }
    n++;
    if (*end == '\0') {
      break;
    }
    p = end + 1;
  }
  return (int)n;
}

/* Sets out->error for a file that cannot be read, and returns an errno for the caller. */
static int file_error(em_pmu_events_t *out, const char *path, int rc, const char *content) {
  if (rc == -ENOENT) {
    set_error(out, "missing file %s", path);
    return -EINVAL;
  }
  if (rc == -EFBIG) {
    set_error(out, "malformed file %s: larger than %d bytes", path, EM_PMU_EVENTS_FILE_BYTES - 1);
    return -EINVAL;
  }
  if (content != NULL) {
    set_error(out, "malformed file %s: '%.80s'", path, content);
    return -EINVAL;
  }
  set_error(out, "cannot read %s: %s", path, strerror(-rc));
  return rc == -EINVAL ? -EINVAL : rc;
}

/*
 * Applies one valued term to config[] through the PMU's format/<name> file, or directly for
 * config/config1/config2. Returns 0, -EINVAL or -ERANGE with out->error set.
 */
static int apply_value(const pmu_t *pmu, const term_t *t, const char *origin, uint64_t config[3],
                       em_pmu_events_t *out) {
  if (t->question) {
    set_error(out, "%s: term '%s=?' needs a value that edgemon cannot supply", origin, t->name);
    return -EINVAL;
  }
  static const char *const words[] = {"config", "config1", "config2"};
  for (int w = 0; w < 3; w++) {
    if (strcmp(t->name, words[w]) == 0) {
      config[w] = t->value;
      return 0;
    }
  }
  char path[PATH_BYTES];
  char sub[EM_PMU_EVENTS_NAME_BYTES + 8];
  snprintf(sub, sizeof(sub), "format/%s", t->name);
  if (join(path, sizeof(path), pmu->dir, sub) != 0) {
    set_error(out, "path too long under %s", pmu->dir);
    return -EINVAL;
  }
  char text[EM_PMU_EVENTS_FILE_BYTES];
  int rc = read_small(path, text, sizeof(text));
  if (rc == -ENOENT) {
    set_error(out, "%s: PMU %s has no format '%s' (missing %s)", origin, pmu->name, t->name, path);
    return -EINVAL;
  }
  if (rc != 0) {
    return file_error(out, path, rc, NULL);
  }
  em_pmu_events_format_t fmt;
  if (em_pmu_events_parse_format(text, &fmt) != 0) {
    return file_error(out, path, -EINVAL, text);
  }
  if (em_pmu_events_encode(&fmt, t->value, config) != 0) {
    unsigned width = 0;
    for (uint64_t x = fmt.mask; x != 0; x &= x - 1) {
      width++;
    }
    set_error(out, "%s: value 0x%" PRIx64 " too wide for '%s' (%u bits: %s)", origin, t->value,
              t->name, width, text);
    return -ERANGE;
  }
  return 0;
}

/* Reads events/<name> of pmu into text. Returns 0, -ENOENT (no such event), or an error
   with out->error set. */
static int read_alias(const pmu_t *pmu, const char *name, char *text, size_t cap, char *path,
                      em_pmu_events_t *out) {
  char sub[EM_PMU_EVENTS_NAME_BYTES + 8];
  snprintf(sub, sizeof(sub), "events/%s", name);
  if (join(path, PATH_BYTES, pmu->dir, sub) != 0) {
    set_error(out, "path too long under %s", pmu->dir);
    return -EINVAL;
  }
  int rc = read_small(path, text, cap);
  if (rc == -ENOENT) {
    return -ENOENT;
  }
  if (rc != 0) {
    return file_error(out, path, rc, NULL);
  }
  return 0;
}

/*
 * Applies a term list. With aliases allowed (terms from an event string), a bare term that
 * names events/<term> applies that file's terms; any other bare term is a format flag set
 * to 1. Terms from a file (aliases not allowed) never expand further.
 */
static int apply_terms(const pmu_t *pmu, const char *text, const char *origin, bool aliases,
                       uint64_t config[3], em_pmu_events_t *out) {
  term_t terms[MAX_TERMS];
  char why[128];
  int n = parse_terms(text, terms, why, sizeof(why));
  if (n < 0) {
    if (aliases) {
      set_error(out, "%s: %s", origin, why);
    } else {
      set_error(out, "malformed file %s: %s", origin, why);
    }
    return -EINVAL;
  }
  for (int i = 0; i < n; i++) {
    const term_t *t = &terms[i];
    int rc;
    if (t->has_value) {
      rc = apply_value(pmu, t, origin, config, out);
    } else {
      char alias[EM_PMU_EVENTS_FILE_BYTES];
      char path[PATH_BYTES];
      rc = aliases ? read_alias(pmu, t->name, alias, sizeof(alias), path, out) : -ENOENT;
      if (rc == 0) {
        rc = apply_terms(pmu, alias, path, false, config, out);
      } else if (rc == -ENOENT) {
        term_t flag = *t;
        flag.has_value = true;
        flag.value = 1;
        rc = apply_value(pmu, &flag, origin, config, out);
      }
    }
    if (rc != 0) {
      return rc;
    }
  }
  return 0;
}

/* ---- PMU directories ----------------------------------------------------------------------- */

/*
 * Loads a PMU's type and CPUs. Returns 0, -ENOENT (no such PMU directory: out->error not
 * set), or -EINVAL with out->error naming the file.
 */
static int load_pmu(const char *root, const char *name, pmu_t *pmu, em_pmu_events_t *out) {
  memset(pmu, 0, sizeof(*pmu));
  snprintf(pmu->name, sizeof(pmu->name), "%s", name);
  char devices[PATH_BYTES];
  if (join(devices, sizeof(devices), root, DEVICES_DIR) != 0 ||
      join(pmu->dir, sizeof(pmu->dir), devices, name) != 0) {
    set_error(out, "path too long: %s", root);
    return -EINVAL;
  }
  struct stat st;
  if (stat(pmu->dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    return -ENOENT;
  }
  char path[PATH_BYTES];
  char text[EM_PMU_EVENTS_FILE_BYTES];
  if (join(path, sizeof(path), pmu->dir, "type") != 0) {
    set_error(out, "path too long: %s", pmu->dir);
    return -EINVAL;
  }
  int rc = read_small(path, text, sizeof(text));
  if (rc != 0) {
    return file_error(out, path, rc, NULL);
  }
  uint64_t type;
  if (parse_u64(text, strlen(text), &type) != 0 || type > UINT32_MAX) {
    return file_error(out, path, -EINVAL, text);
  }
  pmu->type = (uint32_t)type;
  pmu->any_cpu = true;
  static const char *const cpu_files[] = {"cpus", "cpumask"};
  for (size_t i = 0; i < 2; i++) {
    if (join(path, sizeof(path), pmu->dir, cpu_files[i]) != 0) {
      set_error(out, "path too long: %s", pmu->dir);
      return -EINVAL;
    }
    rc = read_small(path, text, sizeof(text));
    if (rc == -ENOENT) {
      continue;
    }
    if (rc != 0) {
      return file_error(out, path, rc, NULL);
    }
    if (em_pmu_events_parse_cpus(text, &pmu->cpus) != 0) {
      return file_error(out, path, -EINVAL, text);
    }
    pmu->any_cpu = false;
    break;
  }
  return 0;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(a, b);
}

/*
 * Lists the CPU PMUs (named "cpu", or with a "cpus" file) under the devices directory, sorted
 * by name. Returns the count (at most MAX_PMUS), or -ENOENT/-errno with out->error set.
 */
static int list_cpu_pmus(const char *root, char (*names)[EM_PMU_EVENTS_NAME_BYTES],
                         em_pmu_events_t *out) {
  char devices[PATH_BYTES];
  if (join(devices, sizeof(devices), root, DEVICES_DIR) != 0) {
    set_error(out, "path too long: %s", root);
    return -EINVAL;
  }
  DIR *d = opendir(devices);
  if (d == NULL) {
    int err = errno;
    set_error(out, "cannot list PMUs in %s: %s", devices, strerror(err));
    return -err;
  }
  size_t n = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL && n < MAX_PMUS) {
    size_t len = strlen(de->d_name);
    if (!valid_name(de->d_name, len)) {
      continue;
    }
    char dir[PATH_BYTES];
    char cpus[PATH_BYTES];
    struct stat st;
    if (join(dir, sizeof(dir), devices, de->d_name) != 0 ||
        join(cpus, sizeof(cpus), dir, "cpus") != 0) {
      continue;
    }
    if (strcmp(de->d_name, "cpu") != 0 && stat(cpus, &st) != 0) {
      continue;
    }
    memcpy(names[n], de->d_name, len + 1);
    n++;
  }
  closedir(d);
  qsort(names, n, sizeof(names[0]), cmp_names);
  return (int)n;
}

/* ---- resolution ---------------------------------------------------------------------------- */

static em_pmu_events_entry_t *add_entry(em_pmu_events_t *out) {
  em_pmu_events_entry_t *e = &out->e[out->n++];
  memset(e, 0, sizeof(*e));
  e->any_cpu = true;
  return e;
}

static void fill_from_pmu(em_pmu_events_entry_t *e, const pmu_t *pmu, const uint64_t config[3]) {
  snprintf(e->pmu, sizeof(e->pmu), "%s", pmu->name);
  e->type = pmu->type;
  e->config = config[0];
  e->config1 = config[1];
  e->config2 = config[2];
  e->any_cpu = pmu->any_cpu;
  e->cpus = pmu->cpus;
}

/* "r" followed by 1..16 hex digits. */
static bool is_raw(const char *s, uint64_t *config) {
  size_t len = strlen(s);
  if (len < 2 || len > 17 || s[0] != 'r') {
    return false;
  }
  for (size_t i = 1; i < len; i++) {
    if (!isxdigit((unsigned char)s[i])) {
      return false;
    }
  }
  char hex[20] = "0x";
  memcpy(hex + 2, s + 1, len);
  return parse_u64(hex, len + 1, config) == 0;
}

/* "pmu/terms/" */
static int resolve_pmu_terms(const char *root, const char *event, em_pmu_events_t *out) {
  const char *slash = strchr(event, '/');
  size_t nlen = (size_t)(slash - event);
  if (!valid_name(event, nlen)) {
    set_error(out, "bad PMU name in '%s'", event);
    return -EINVAL;
  }
  const char *body = slash + 1;
  const char *close = strchr(body, '/');
  if (close == NULL) {
    set_error(out, "'%s': missing the closing '/'", event);
    return -EINVAL;
  }
  if (close[1] != '\0') {
    set_error(out, "'%s': modifiers after the closing '/' are not supported", event);
    return -EINVAL;
  }
  if (close == body) {
    set_error(out, "'%s': no event or terms between the slashes", event);
    return -EINVAL;
  }
  char name[EM_PMU_EVENTS_NAME_BYTES];
  memcpy(name, event, nlen);
  name[nlen] = '\0';
  char terms[MAX_EVENT_BYTES];
  size_t tlen = (size_t)(close - body);
  memcpy(terms, body, tlen);
  terms[tlen] = '\0';
  for (char *p = terms; *p != '\0'; p++) {
    *p = (char)tolower((unsigned char)*p);
  }
  pmu_t pmu;
  int rc = load_pmu(root, name, &pmu, out);
  if (rc == -ENOENT) {
    set_error(out, "'%s': no PMU '%s' in %s/%s", event, name, root, DEVICES_DIR);
    return -ENOENT;
  }
  if (rc != 0) {
    return rc;
  }
  uint64_t config[3] = {0, 0, 0};
  rc = apply_terms(&pmu, terms, event, true, config, out);
  if (rc != 0) {
    return rc;
  }
  fill_from_pmu(add_entry(out), &pmu, config);
  return 0;
}

/* A kernel event name, in every CPU PMU that has it. */
static int resolve_bare(const char *root, const char *event, em_pmu_events_t *out) {
  size_t len = strlen(event);
  if (!valid_name(event, len)) {
    set_error(out,
              "'%s' is not an event name (letters, digits, '_' and '-', at most %d), a raw "
              "code r<hex> or pmu/terms/",
              event, EM_PMU_EVENTS_NAME_BYTES - 1);
    return -EINVAL;
  }
  char name[EM_PMU_EVENTS_NAME_BYTES];
  for (size_t i = 0; i <= len; i++) {
    name[i] = (char)tolower((unsigned char)event[i]);
  }
  char names[MAX_PMUS][EM_PMU_EVENTS_NAME_BYTES];
  int n = list_cpu_pmus(root, names, out);
  if (n < 0) {
    return n;
  }
  for (int i = 0; i < n; i++) {
    pmu_t pmu;
    int rc = load_pmu(root, names[i], &pmu, out);
    if (rc == -ENOENT) {
      continue;
    }
    if (rc != 0) {
      return rc;
    }
    char text[EM_PMU_EVENTS_FILE_BYTES];
    char path[PATH_BYTES];
    rc = read_alias(&pmu, name, text, sizeof(text), path, out);
    if (rc == -ENOENT) {
      continue;
    }
    if (rc != 0) {
      return rc;
    }
    uint64_t config[3] = {0, 0, 0};
    rc = apply_terms(&pmu, text, path, false, config, out);
    if (rc != 0) {
      return rc;
    }
    if (out->n == EM_PMU_EVENTS_MAX_ENTRIES) {
      set_error(out, "'%s' is in more than %d PMUs", event, EM_PMU_EVENTS_MAX_ENTRIES);
      return -E2BIG;
    }
    fill_from_pmu(add_entry(out), &pmu, config);
  }
  if (out->n > 0) {
    return 0;
  }
  char list[256] = "";
  size_t used = 0;
  for (int i = 0; i < n && used < sizeof(list); i++) {
    int w = snprintf(list + used, sizeof(list) - used, "%s%s", i > 0 ? ", " : "", names[i]);
    if (w < 0) {
      break;
    }
    used += (size_t)w;
  }
  if (n == 0) {
    set_error(out, "unknown event '%s': not raw, not generic, and no CPU PMU in %s/%s", event, root,
              DEVICES_DIR);
  } else {
    set_error(out,
              "unknown event '%s': not raw, not generic, not in events/ of CPU PMUs %s (%s/%s)",
              event, list, root, DEVICES_DIR);
  }
  return -ENOENT;
}

int em_pmu_events_resolve(const char *root, const char *event, em_pmu_events_t *out) {
  if (out == NULL) {
    return -EINVAL;
  }
  memset(out, 0, sizeof(*out));
  if (root == NULL || event == NULL) {
    set_error(out, "no root or no event");
    return -EINVAL;
  }
  size_t len = strnlen(event, MAX_EVENT_BYTES);
  if (len == 0) {
    set_error(out, "empty event name");
    return -EINVAL;
  }
  if (len == MAX_EVENT_BYTES) {
    set_error(out, "event string longer than %d characters", MAX_EVENT_BYTES - 1);
    return -EINVAL;
  }
  uint64_t raw;
  if (is_raw(event, &raw)) {
    em_pmu_events_entry_t *e = add_entry(out);
    e->type = PERF_TYPE_RAW;
    e->config = raw;
    return 0;
  }
  int rc;
  if (strchr(event, '/') != NULL) {
    rc = resolve_pmu_terms(root, event, out);
  } else {
    em_pmu_event_t generic;
    if (em_pmu_resolve(event, &generic) == 0) {
      em_pmu_events_entry_t *e = add_entry(out);
      e->type = generic.type;
      e->config = generic.config;
      return 0;
    }
    rc = resolve_bare(root, event, out);
  }
  if (rc != 0) {
    out->n = 0;
    if (out->error[0] == '\0') {
      set_error(out, "'%s': %s", event, strerror(-rc));
    }
  }
  return rc;
}

/*
 * Folds the entries of a sysfs resolution into `out` (zeroed first): the first entry is the
 * event's own type/config/CPUs, the others its parts. Two entries with one type (a broken
 * sysfs: em_pmu_new() takes a type once) keep the first; the others are logged and left out.
 */
static void fold_entries(const char *name, const em_pmu_events_t *r, em_pmu_event_t *out) {
  memset(out, 0, sizeof(*out));
  snprintf(out->name, sizeof(out->name), "%s", name);
  for (size_t k = 0; k < r->n && k < EM_PMU_MAX_PARTS; k++) {
    const em_pmu_events_entry_t *e = &r->e[k];
    bool dup = k > 0 && e->type == out->type;
    for (size_t j = 0; j < out->n_parts && !dup; j++) {
      dup = out->parts[j].type == e->type;
    }
    if (dup) {
      em_log(EM_LOG_WARN, "pmu: event '%s': PMU %s repeats type %u; not counted there", name,
             e->pmu, (unsigned)e->type);
      continue;
    }
    em_pmu_part_t part = {
        .type = e->type, .config = e->config, .config1 = e->config1, .config2 = e->config2};
    for (unsigned cpu = 0; !e->any_cpu && cpu < EM_PMU_MAX_CPUS; cpu++) {
      if (em_pmu_events_cpu_isset(&e->cpus, cpu)) {
        em_pmu_cpus_add(&part.cpus, cpu);
      }
    }
    if (k == 0) {
      out->type = part.type;
      out->config = part.config;
      out->config1 = part.config1;
      out->config2 = part.config2;
      out->cpus = part.cpus;
    } else {
      out->parts[out->n_parts++] = part;
    }
  }
}

int em_pmu_events_event(const char *root, const char *name, em_pmu_event_t *out) {
  if (out == NULL) {
    return -EINVAL;
  }
  if (name == NULL) {
    memset(out, 0, sizeof(*out));
    out->type = EM_PMU_EVENTS_ABSENT_TYPE;
    return -EINVAL;
  }
  if (em_pmu_resolve(name, out) == 0) {
    return 0;
  }
  em_pmu_events_t r;
  int rc = em_pmu_events_resolve(root, name, &r);
  if (rc == 0) {
    fold_entries(name, &r, out);
    return 0;
  }
  em_log(EM_LOG_ERROR, "pmu: %s", r.error);
  memset(out, 0, sizeof(*out));
  snprintf(out->name, sizeof(out->name), "%s", name);
  out->type = EM_PMU_EVENTS_ABSENT_TYPE;
  return rc;
}
