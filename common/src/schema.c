/*
 * schema.c - declarative config schemas (edgemon/common/schema.h): storing a value through its
 * row's type, defaults (given, or computed by a row's hook), lookups by key or command-line
 * flag, did-you-mean, the reload comparison and adoption, and documentation lines.
 * Owns nothing; no global state; nothing allocates.
 */
#define _POSIX_C_SOURCE 200809L
#include "edgemon/common/schema.h"

#include "edgemon/common/str.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define QUOTE_MAX        48 /* Longest value quoted in a message before "...". */
#define SUGGEST_DISTANCE 2  /* Did-you-mean: the largest edit distance suggested. */
#define WORD_MAX         48 /* Longer words get no suggestion (fixed rows below). */

#if defined(__GNUC__) || defined(__clang__)
#define EM_SCHEMA_PRINTF(fmt_arg, first_arg) __attribute__((format(printf, fmt_arg, first_arg)))
#else
#define EM_SCHEMA_PRINTF(fmt_arg, first_arg)
#endif

/* Writes a message into msg[0..cap) and returns -EINVAL, for `return fail(...)`. */
EM_SCHEMA_PRINTF(3, 4) static int fail(char *msg, size_t cap, const char *fmt, ...) {
  if (msg == NULL || cap == 0) {
    return -EINVAL;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, cap, fmt, ap);
  va_end(ap);
  return -EINVAL;
}

/* The value as a message quotes it: printable, cut after QUOTE_MAX characters. */
static const char *quote(char *out, size_t cap, const char *value) {
  return em_str_quote(out, cap, value, QUOTE_MAX);
}

/* A unit a value may be written in: `per` of the smallest unit make one, and it is used only
 * from `from` up ("90s", not "1m30s"). */
typedef struct {
  uint64_t per;
  const char *unit;
  uint64_t from;
} unit_t;

/* Writes v in the first of the n units (largest first) that it reaches and that divides it,
 * else in the smallest unit, `base`. Returns out. */
static const char *format_units(char *out, size_t cap, uint64_t v, const unit_t *units, size_t n,
                                const char *base) {
  for (size_t i = 0; i < n; i++) {
    if (v >= units[i].from && v % units[i].per == 0) {
      snprintf(out, cap, "%llu%s", (unsigned long long)(v / units[i].per), units[i].unit);
      return out;
    }
  }
  snprintf(out, cap, "%llu%s", (unsigned long long)v, base);
  return out;
}

const char *em_schema_format_duration(char *out, size_t cap, uint64_t ns) {
  static const unit_t units[] = {
      {EM_NS_PER_H, "h", EM_NS_PER_H},    {EM_NS_PER_MIN, "m", 2 * EM_NS_PER_MIN},
      {EM_NS_PER_S, "s", EM_NS_PER_S},    {EM_NS_PER_MS, "ms", EM_NS_PER_MS},
      {EM_NS_PER_US, "us", EM_NS_PER_US},
  };
  return format_units(out, cap, ns, units, sizeof(units) / sizeof(units[0]), "ns");
}

const char *em_schema_format_size(char *out, size_t cap, uint64_t bytes) {
  static const unit_t units[] = {{1ull << 30, "GiB", 1ull << 30},
                                 {1ull << 20, "MiB", 1ull << 20},
                                 {1ull << 10, "KiB", 1ull << 10}};
  return format_units(out, cap, bytes, units, sizeof(units) / sizeof(units[0]), "B");
}

static bool has_range(const em_schema_key_t *k) {
  return k->min != 0 || k->max != 0;
}

/* The largest value an unsigned field of `size` bytes holds (0 for a size it cannot be). */
static uint64_t field_max(size_t size) {
  switch (size) {
  case 1:
    return UINT8_MAX;
  case 2:
    return UINT16_MAX;
  case 4:
    return UINT32_MAX;
  case 8:
    return UINT64_MAX;
  default:
    return 0;
  }
}

/* Stores v into the unsigned field of `size` bytes at p; false when it does not fit. */
static bool store_uint(void *p, size_t size, uint64_t v) {
  if (v > field_max(size)) {
    return false;
  }
  uint8_t u8 = (uint8_t)v;
  uint16_t u16 = (uint16_t)v;
  uint32_t u32 = (uint32_t)v;
  switch (size) {
  case 1:
    memcpy(p, &u8, 1);
    return true;
  case 2:
    memcpy(p, &u16, 2);
    return true;
  case 4:
    memcpy(p, &u32, 4);
    return true;
  default:
    memcpy(p, &v, 8);
    return true;
  }
}

static bool is_id_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == ':' || c == '-';
}

/* The message of a row with `want`: "NAME 'VALUE' WANT" ("NAME WANT" for a secret). */
static int fail_want(const em_schema_key_t *k, const char *value, char *msg, size_t cap) {
  char q[QUOTE_MAX + 4];
  if (k->flags & EM_SCHEMA_SECRET) {
    return fail(msg, cap, "%s %s", k->name, k->want);
  }
  return fail(msg, cap, "%s '%s' %s", k->name, quote(q, sizeof(q), value), k->want);
}

static int set_duration(const em_schema_key_t *k, void *field, const char *value, char *msg,
                        size_t cap) {
  char q[QUOTE_MAX + 4];
  quote(q, sizeof(q), value);
  uint64_t ns = 0;
  bool off = ((k->flags & EM_SCHEMA_OFF) && strcmp(value, "off") == 0) ||
             ((k->flags & EM_SCHEMA_ZERO) && strcmp(value, "0") == 0);
  if (!off) {
    em_parse_status_t why = em_parse_duration_status(value, k->bare_unit, &ns);
    if (why != EM_PARSE_OK && k->want != NULL) {
      return fail_want(k, value, msg, cap);
    }
    switch (why) {
    case EM_PARSE_OK:
      break;
    case EM_PARSE_NO_UNIT:
      return fail(msg, cap, "%s needs a unit, e.g. %s", k->name, k->example);
    case EM_PARSE_BAD_UNIT:
      return fail(msg, cap, "%s '%s' has an unknown unit; use ns, us, ms, s, m, h or d", k->name,
                  q);
    case EM_PARSE_NEGATIVE:
      return fail(msg, cap, "%s '%s' cannot be negative", k->name, q);
    case EM_PARSE_OVERFLOW:
      return fail(msg, cap, "%s '%s' is too large", k->name, q);
    case EM_PARSE_NOT_NUMBER:
      return fail(msg, cap, "%s '%s' is not a duration; use a whole number and a unit, e.g. %s",
                  k->name, q, k->example);
    }
    if (has_range(k) && (ns < k->min || ns > k->max)) {
      if (k->want != NULL) {
        return fail_want(k, value, msg, cap);
      }
      char lo[32];
      char hi[32];
      return fail(msg, cap, "%s '%s' is out of range %s..%s", k->name, q,
                  em_schema_format_duration(lo, sizeof(lo), k->min),
                  em_schema_format_duration(hi, sizeof(hi), k->max));
    }
  }
  if (!(k->flags & EM_SCHEMA_SECONDS)) {
    return store_uint(field, k->size, ns) ? 0 : fail(msg, cap, "%s '%s' is too large", k->name, q);
  }
  if ((k->flags & EM_SCHEMA_WHOLE) && ns % EM_NS_PER_S != 0) {
    return fail(msg, cap, "%s '%s' must be whole seconds, e.g. %s", k->name, q, k->example);
  }
  return store_uint(field, k->size, ns / EM_NS_PER_S)
             ? 0
             : fail(msg, cap, "%s '%s' is too large", k->name, q);
}

static int set_size(const em_schema_key_t *k, void *field, const char *value, char *msg,
                    size_t cap) {
  char q[QUOTE_MAX + 4];
  quote(q, sizeof(q), value);
  char lo[32];
  char hi[32];
  uint64_t bytes = 0;
  em_parse_status_t why = em_parse_size_status(value, k->bare_unit, &bytes);
  if (why == EM_PARSE_OK && has_range(k) && (bytes < k->min || bytes > k->max)) {
    why = EM_PARSE_OVERFLOW; /* Reported as out of range below. */
  }
  if (why != EM_PARSE_OK && k->want != NULL) {
    return fail_want(k, value, msg, cap);
  }
  switch (why) {
  case EM_PARSE_OK:
    return store_uint(field, k->size, bytes) ? 0
                                             : fail(msg, cap, "%s '%s' is too large", k->name, q);
  case EM_PARSE_NO_UNIT:
    return fail(msg, cap, "%s needs a unit (B, KiB, MiB or GiB), e.g. %s", k->name, k->example);
  case EM_PARSE_BAD_UNIT:
    return fail(msg, cap, "%s '%s' has an unknown unit; use B, KiB, MiB or GiB", k->name, q);
  case EM_PARSE_OVERFLOW:
    if (has_range(k)) {
      return fail(msg, cap, "%s '%s' is out of range %s..%s", k->name, q,
                  em_schema_format_size(lo, sizeof(lo), k->min),
                  em_schema_format_size(hi, sizeof(hi), k->max));
    }
    return fail(msg, cap, "%s '%s' is too large", k->name, q);
  case EM_PARSE_NEGATIVE:
  case EM_PARSE_NOT_NUMBER:
    break;
  }
  return fail(msg, cap, "%s '%s' is not a size; use a whole number and a unit, e.g. %s", k->name, q,
              k->example);
}

static int set_int(const em_schema_key_t *k, void *field, const char *value, char *msg,
                   size_t cap) {
  uint64_t lo = has_range(k) ? k->min : 0;
  uint64_t hi = has_range(k) ? k->max : field_max(k->size);
  uint64_t v = 0;
  bool off = (k->flags & EM_SCHEMA_OFF) && strcmp(value, "off") == 0;
  if (!off && em_parse_u64(value, lo, hi, &v) != 0) {
    if (k->want != NULL) {
      return fail_want(k, value, msg, cap);
    }
    char q[QUOTE_MAX + 4];
    return fail(msg, cap, "%s '%s' must be a whole number from %llu to %llu", k->name,
                quote(q, sizeof(q), value), (unsigned long long)lo, (unsigned long long)hi);
  }
  return store_uint(field, k->size, v) ? 0 : fail(msg, cap, "%s: the field is too small", k->name);
}

static int set_bool(const em_schema_key_t *k, void *field, const char *value, char *msg,
                    size_t cap) {
  bool b = false;
  if (em_parse_bool(value, &b) != 0) {
    if (k->want != NULL) {
      return fail_want(k, value, msg, cap);
    }
    char q[QUOTE_MAX + 4];
    return fail(msg, cap, "%s '%s' must be true or false", k->name, quote(q, sizeof(q), value));
  }
  memcpy(field, &b, sizeof(b));
  return 0;
}

static int set_enum(const em_schema_key_t *k, void *field, const char *value, char *msg,
                    size_t cap) {
  int v = 0;
  if (em_parse_enum(value, k->choices, k->n_choices, false, &v) == 0 && v >= 0) {
    return store_uint(field, k->size, (uint64_t)v)
               ? 0
               : fail(msg, cap, "%s: the field is too small", k->name);
  }
  if (k->want != NULL) {
    return fail_want(k, value, msg, cap);
  }
  char names[256] = "";
  size_t used = 0;
  for (size_t i = 0; i < k->n_choices; i++) {
    int n =
        snprintf(names + used, sizeof(names) - used, "%s%s", i > 0 ? ", " : "", k->choices[i].name);
    if (n < 0 || (size_t)n >= sizeof(names) - used) {
      break;
    }
    used += (size_t)n;
  }
  char q[QUOTE_MAX + 4];
  return fail(msg, cap, "%s '%s' must be one of %s", k->name, quote(q, sizeof(q), value), names);
}

/* STRING, PATH, ID: text into char[size]. */
static int set_text(const em_schema_key_t *k, char *field, const char *value, char *msg,
                    size_t cap) {
  char q[QUOTE_MAX + 4];
  quote(q, sizeof(q), value);
  size_t len = strlen(value);
  size_t min_len = has_range(k) ? (size_t)k->min : 0;
  size_t max_len = has_range(k) && k->max < k->size ? (size_t)k->max : k->size - 1;
  bool off = (k->flags & EM_SCHEMA_OFF) && strcmp(value, "off") == 0;
  const char *why = NULL;
  if (k->type == EM_SCHEMA_PATH && !off && value[0] != '/') {
    why = "must be an absolute path";
  } else if (len > max_len) {
    why = "is too long";
  } else if (len < min_len) {
    why = "is too short";
  } else if (k->type == EM_SCHEMA_ID) {
    for (const char *p = value; *p != '\0' && why == NULL; p++) {
      if (!is_id_char(*p)) {
        why = "may use only letters, digits and _ . : -";
      }
    }
  } else {
    for (const char *p = value; *p != '\0' && why == NULL; p++) {
      unsigned char c = (unsigned char)*p;
      if (c < 0x20 || c == 0x7f) {
        why = "contains a control character";
      }
    }
  }
  if (why != NULL && k->want != NULL) {
    return fail_want(k, value, msg, cap);
  }
  if (why != NULL && strcmp(why, "is too long") == 0) {
    if (k->type == EM_SCHEMA_PATH || (k->flags & EM_SCHEMA_SECRET)) {
      return fail(msg, cap, "%s is longer than %zu characters", k->name, max_len);
    }
    return fail(msg, cap, "%s '%s' is longer than %zu characters", k->name, q, max_len);
  }
  if (why != NULL) {
    return (k->flags & EM_SCHEMA_SECRET) ? fail(msg, cap, "%s %s", k->name, why)
                                         : fail(msg, cap, "%s '%s' %s", k->name, q, why);
  }
  memcpy(field, value, len + 1);
  return 0;
}

int em_schema_set(const em_schema_key_t *k, void *obj, const char *value, char *msg, size_t cap) {
  if (msg != NULL && cap > 0) {
    msg[0] = '\0';
  }
  if (k == NULL || obj == NULL || value == NULL) {
    return -EINVAL;
  }
  if (k->offset == EM_SCHEMA_NO_FIELD || k->size == 0) {
    return fail(msg, cap, "%s has no field to store", k->name);
  }
  void *field = (char *)obj + k->offset;
  switch (k->type) {
  case EM_SCHEMA_DURATION:
    return set_duration(k, field, value, msg, cap);
  case EM_SCHEMA_SIZE:
    return set_size(k, field, value, msg, cap);
  case EM_SCHEMA_BOOL:
    return set_bool(k, field, value, msg, cap);
  case EM_SCHEMA_INT:
    return set_int(k, field, value, msg, cap);
  case EM_SCHEMA_ENUM:
    return set_enum(k, field, value, msg, cap);
  case EM_SCHEMA_STRING:
  case EM_SCHEMA_PATH:
  case EM_SCHEMA_ID:
    return set_text(k, field, value, msg, cap);
  case EM_SCHEMA_CUSTOM:
  case EM_SCHEMA_LIST:
    break;
  }
  return fail(msg, cap, "%s needs its own setter", k->name);
}

int em_schema_apply(const em_schema_key_t *k, void *obj, const char *value, void *ctx,
                    em_schema_report_fn report) {
  if (k == NULL || value == NULL) {
    return -EINVAL;
  }
  if (k->set != NULL) {
    return k->set(ctx, k, obj, value);
  }
  char msg[EM_SCHEMA_MSG_MAX];
  int rc = em_schema_set(k, obj, value, msg, sizeof(msg));
  if (rc != 0 && report != NULL) {
    report(ctx, msg);
  }
  return rc;
}

int em_schema_defaults(const em_schema_key_t *table, size_t n, void *obj, void *ctx,
                       const em_schema_key_t **bad) {
  if (bad != NULL) {
    *bad = NULL;
  }
  if (table == NULL || obj == NULL) {
    return -EINVAL;
  }
  int rc = 0;
  for (size_t i = 0; i < n; i++) {
    const em_schema_key_t *k = &table[i];
    if (k->def != NULL) {
      char msg[EM_SCHEMA_MSG_MAX];
      int set = k->set != NULL ? k->set(ctx, k, obj, k->def)
                               : em_schema_set(k, obj, k->def, msg, sizeof(msg));
      if (set != 0 && rc == 0) {
        rc = -EINVAL;
        if (bad != NULL) {
          *bad = k;
        }
      }
    }
    if (k->compute != NULL) {
      k->compute(k, obj);
    }
  }
  return rc;
}

const em_schema_key_t *em_schema_find(const em_schema_key_t *table, size_t n, const char *section,
                                      const char *name) {
  if (table == NULL || section == NULL || name == NULL) {
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    if (strcmp(table[i].section, section) == 0 && strcmp(table[i].name, name) == 0) {
      return &table[i];
    }
  }
  return NULL;
}

const em_schema_key_t *em_schema_find_any(const em_schema_key_t *table, size_t n,
                                          const char *name) {
  if (table == NULL || name == NULL) {
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    if (strcmp(table[i].name, name) == 0) {
      return &table[i];
    }
  }
  return NULL;
}

/* Levenshtein distance between a and b, or SIZE_MAX when either is longer than WORD_MAX. */
static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a);
  size_t lb = strlen(b);
  if (la > WORD_MAX || lb > WORD_MAX) {
    return SIZE_MAX;
  }
  size_t prev[WORD_MAX + 1];
  size_t cur[WORD_MAX + 1];
  for (size_t j = 0; j <= lb; j++) {
    prev[j] = j;
  }
  for (size_t i = 1; i <= la; i++) {
    cur[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t best = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      if (prev[j] + 1 < best) {
        best = prev[j] + 1;
      }
      if (cur[j - 1] + 1 < best) {
        best = cur[j - 1] + 1;
      }
      cur[j] = best;
    }
    memcpy(prev, cur, (lb + 1) * sizeof(prev[0]));
  }
  return prev[lb];
}

/* True when `candidate` is close enough to `word` to suggest, and closer than *best. */
static bool closer(const char *word, const char *candidate, size_t *best) {
  size_t d = edit_distance(word, candidate);
  if (d == 0 || d > SUGGEST_DISTANCE || d >= strlen(word) || d >= *best) {
    return false;
  }
  *best = d;
  return true;
}

const char *em_schema_closest(const char *word, const char *const *words, size_t n) {
  if (word == NULL || words == NULL) {
    return NULL;
  }
  size_t best = SIZE_MAX;
  const char *hint = NULL;
  for (size_t i = 0; i < n; i++) {
    if (words[i] != NULL && closer(word, words[i], &best)) {
      hint = words[i];
    }
  }
  return hint;
}

const char *em_schema_suggest(const em_schema_key_t *table, size_t n, const char *section,
                              const char *name) {
  if (table == NULL || section == NULL || name == NULL) {
    return NULL;
  }
  size_t best = SIZE_MAX;
  const char *hint = NULL;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(table[i].section, section) == 0 && closer(name, table[i].name, &best)) {
      hint = table[i].name;
    }
  }
  return hint;
}

/* True when row k's field holds the same value in a and b. */
static bool same_field(const em_schema_key_t *k, const void *a, const void *b) {
  if (k->same != NULL) {
    return k->same(a, b);
  }
  const char *fa = (const char *)a + k->offset;
  const char *fb = (const char *)b + k->offset;
  switch (k->type) {
  case EM_SCHEMA_STRING:
  case EM_SCHEMA_PATH:
  case EM_SCHEMA_ID:
    return strncmp(fa, fb, k->size) == 0;
  default:
    return memcmp(fa, fb, k->size) == 0;
  }
}

const em_schema_key_t *em_schema_first_change(const em_schema_key_t *table, size_t n, const void *a,
                                              const void *b) {
  if (table == NULL || a == NULL || b == NULL) {
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    const em_schema_key_t *k = &table[i];
    if (k->flags & EM_SCHEMA_RELOAD) {
      continue;
    }
    if (k->same == NULL && (k->offset == EM_SCHEMA_NO_FIELD || k->size == 0)) {
      continue;
    }
    if (!same_field(k, a, b)) {
      return k;
    }
  }
  return NULL;
}

unsigned em_schema_adopt(const em_schema_key_t *table, size_t n, void *running, const void *next) {
  if (table == NULL || running == NULL || next == NULL) {
    return 0;
  }
  unsigned due = 0;
  for (size_t i = 0; i < n; i++) {
    const em_schema_key_t *k = &table[i];
    bool has_field = k->offset != EM_SCHEMA_NO_FIELD && k->size > 0;
    if (!(k->flags & EM_SCHEMA_RELOAD) || (k->same == NULL && !has_field) ||
        same_field(k, running, next)) {
      continue;
    }
    if (k->copy != NULL) {
      k->copy(running, next);
    } else if (has_field) {
      memcpy((char *)running + k->offset, (const char *)next + k->offset, k->size);
    }
    due |= k->apply;
  }
  return due;
}

const char *em_schema_flag(const em_schema_key_t *k, char *buf, size_t cap) {
  if (k == NULL || buf == NULL || !(k->flags & EM_SCHEMA_FLAG)) {
    return NULL;
  }
  size_t len = strlen(k->name);
  if (cap < len + 3) {
    return NULL;
  }
  buf[0] = '-';
  buf[1] = '-';
  for (size_t i = 0; i <= len; i++) {
    buf[i + 2] = k->name[i] == '_' ? '-' : k->name[i];
  }
  return buf;
}

const em_schema_key_t *em_schema_find_flag(const em_schema_key_t *table, size_t n,
                                           const char *flag) {
  if (table == NULL || flag == NULL) {
    return NULL;
  }
  if (strncmp(flag, "--", 2) == 0) {
    flag += 2;
  }
  for (size_t i = 0; i < n; i++) {
    char buf[WORD_MAX + 4];
    if (em_schema_flag(&table[i], buf, sizeof(buf)) != NULL && strcmp(buf + 2, flag) == 0) {
      return &table[i];
    }
  }
  return NULL;
}

const char *em_schema_type_name(em_schema_type_t type) {
  switch (type) {
  case EM_SCHEMA_DURATION:
    return "duration";
  case EM_SCHEMA_SIZE:
    return "size";
  case EM_SCHEMA_BOOL:
    return "bool";
  case EM_SCHEMA_INT:
    return "int";
  case EM_SCHEMA_ENUM:
    return "enum";
  case EM_SCHEMA_STRING:
    return "string";
  case EM_SCHEMA_PATH:
    return "path";
  case EM_SCHEMA_ID:
    return "id";
  case EM_SCHEMA_LIST:
    return "list";
  case EM_SCHEMA_CUSTOM:
    break;
  }
  return "text";
}

int em_schema_describe(const em_schema_key_t *k, char *buf, size_t cap) {
  if (k == NULL || buf == NULL || cap == 0) {
    return -EINVAL;
  }
  char range[80] = "";
  char lo[32];
  char hi[32];
  if (has_range(k) && k->type == EM_SCHEMA_DURATION) {
    snprintf(range, sizeof(range), ", %s..%s", em_schema_format_duration(lo, sizeof(lo), k->min),
             em_schema_format_duration(hi, sizeof(hi), k->max));
  } else if (has_range(k) && k->type == EM_SCHEMA_SIZE) {
    snprintf(range, sizeof(range), ", %s..%s", em_schema_format_size(lo, sizeof(lo), k->min),
             em_schema_format_size(hi, sizeof(hi), k->max));
  } else if (has_range(k) && k->type == EM_SCHEMA_INT) {
    snprintf(range, sizeof(range), ", %llu..%llu", (unsigned long long)k->min,
             (unsigned long long)k->max);
  }
  return snprintf(buf, cap, "[%s] %s = %s (%s%s%s%s%s) %s", k->section, k->name,
                  k->example != NULL ? k->example : "", em_schema_type_name(k->type),
                  k->def != NULL ? ", default " : "", k->def != NULL ? k->def : "", range,
                  (k->flags & EM_SCHEMA_RELOAD) ? ", reloadable" : "",
                  k->doc != NULL ? k->doc : "");
}
