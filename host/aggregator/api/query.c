/*
 * query.c - parsing and checking of the dashboard API's query parameters (see query.h).
 *
 * Every value is percent-decoded here ('+' is a space, as in a form); a malformed escape, a
 * decoded NUL or a value longer than its limit is rejected. Numbers are plain decimal digits
 * (no sign, no spaces, no exponent) and must fit. Each parameter may appear once.
 */
#define _POSIX_C_SOURCE 200809L
#include "query.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define NS_PER_S    1000000000ull
#define VALUE_BYTES 256u /* Longest decoded value looked at: longer is a 400. */

__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, cap, fmt, ap);
  va_end(ap);
  return -EINVAL;
}

static int hex(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  c = (char)(c | 0x20);
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Percent-decodes src into dst[0..cap). False for a bad escape, a NUL, or no room. */
static bool decode(const char *src, char *dst, size_t cap) {
  size_t n = 0;
  for (const char *p = src; *p; p++) {
    char c = *p;
    if (c == '+') {
      c = ' ';
    } else if (c == '%') {
      int hi = hex(p[1]);
      int lo = hi < 0 ? -1 : hex(p[2]);
      if (lo < 0) {
        return false;
      }
      c = (char)(hi << 4 | lo);
      p += 2;
      if (c == '\0') {
        return false;
      }
    }
    if (n + 1 >= cap) {
      return false;
    }
    dst[n++] = c;
  }
  dst[n] = '\0';
  return true;
}

/* Decimal digits only, at most 19 of them, into *v. */
static bool parse_u64(const char *s, uint64_t *v) {
  size_t len = strlen(s);
  if (len == 0 || len > 19) {
    return false;
  }
  uint64_t x = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9') {
      return false;
    }
    x = x * 10u + (uint64_t)(s[i] - '0');
  }
  *v = x;
  return true;
}

bool em_query_duration(const char *s, uint64_t *ns) {
  size_t len = strlen(s);
  if (len < 2 || len > 8) {
    return false;
  }
  uint64_t unit;
  switch (s[len - 1]) {
  case 's':
    unit = NS_PER_S;
    break;
  case 'm':
    unit = 60u * NS_PER_S;
    break;
  case 'h':
    unit = 3600u * NS_PER_S;
    break;
  case 'd':
    unit = 86400u * NS_PER_S;
    break;
  default:
    return false;
  }
  char digits[8];
  memcpy(digits, s, len - 1);
  digits[len - 1] = '\0';
  uint64_t v;
  if (!parse_u64(digits, &v)) {
    return false;
  }
  *ns = v * unit; /* At most 9999999 days: no overflow. */
  return true;
}

bool em_query_level_ok(unsigned mask, int level) {
  if (mask == 0) {
    return true;
  }
  return level >= 0 && level <= 3 && (mask & (1u << level)) != 0;
}

static int parse_levels(const char *v, unsigned *mask, char *err, size_t cap) {
  static const char *const names[] = {"NOMINAL", "WARN", "DEGRADED", "CRITICAL"};
  *mask = 0;
  const char *p = v;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    int found = -1;
    for (int i = 0; i < 4; i++) {
      if (strlen(names[i]) == len && strncasecmp(p, names[i], len) == 0) {
        found = i;
      }
    }
    if (found < 0) {
      return fail(err, cap,
                  "level: '%.*s' is not a level (NOMINAL, WARN, DEGRADED, CRITICAL, "
                  "comma-separated)",
                  (int)(len > 32 ? 32 : len), p);
    }
    *mask |= 1u << found;
    if (!comma) {
      return 0;
    }
    p = comma + 1;
  }
}

/* What each kind accepts. */
static bool accepts(em_query_kind_t kind, const char *key) {
  bool range = strcmp(key, "range") == 0 || strcmp(key, "from") == 0 || strcmp(key, "to") == 0;
  bool select = strcmp(key, "name") == 0 || strcmp(key, "level") == 0 || strcmp(key, "limit") == 0;
  switch (kind) {
  case EM_QUERY_FLEET:
    return select;
  case EM_QUERY_HISTORY:
    return range || strcmp(key, "points") == 0;
  case EM_QUERY_LATENCY:
    return range || select || strcmp(key, "stage") == 0;
  case EM_QUERY_FLIGHTS:
    return strcmp(key, "since") == 0 || strcmp(key, "until") == 0 || strcmp(key, "limit") == 0;
  case EM_QUERY_COHORT:
    return strcmp(key, "from") == 0 || strcmp(key, "to") == 0 || strcmp(key, "select") == 0 ||
           strcmp(key, "device") == 0 || strcmp(key, "unit") == 0;
  case EM_QUERY_MODELS:
    return strcmp(key, "model") == 0 || strcmp(key, "version") == 0;
  }
  return false;
}

int em_query_parse(em_query_kind_t kind, const em_query_param_t *params, size_t n, uint64_t now_ns,
                   em_query_t *out, char *err, size_t err_cap) {
  char dummy[1];
  if (!err || err_cap == 0) {
    err = dummy;
    err_cap = sizeof(dummy);
  }
  memset(out, 0, sizeof(*out));
  out->points = EM_QUERY_POINTS_DEFAULT;
  out->unit_s = EM_QUERY_UNIT_DEFAULT_S;
  out->limit = kind == EM_QUERY_FLIGHTS ? EM_QUERY_FLIGHTS_DEFAULT : EM_QUERY_LIMIT_DEFAULT;
  if (kind == EM_QUERY_FLIGHTS) {
    out->to_ns = (uint64_t)INT64_MAX;
  }
  if (n > EM_QUERY_MAX_PARAMS) {
    return fail(err, err_cap, "too many parameters (at most %u)", EM_QUERY_MAX_PARAMS);
  }
  bool have_range = false;
  bool have_from = false;
  bool have_to = false;
  uint64_t range_ns = EM_QUERY_DEFAULT_RANGE;
  uint64_t from = 0;
  uint64_t to = 0;
  for (size_t i = 0; i < n; i++) {
    char key[32];
    if (!decode(params[i].key, key, sizeof(key)) || !accepts(kind, key)) {
      return fail(err, err_cap, "unknown parameter '%.32s'", params[i].key);
    }
    for (size_t j = 0; j < i; j++) {
      char prev[32];
      if (decode(params[j].key, prev, sizeof(prev)) && strcmp(prev, key) == 0) {
        return fail(err, err_cap, "%s: given more than once", key);
      }
    }
    char v[VALUE_BYTES];
    if (!params[i].val || !decode(params[i].val, v, sizeof(v)) || v[0] == '\0') {
      return fail(err, err_cap, "%s: missing, malformed or too long a value", key);
    }
    uint64_t x = 0;
    if (strcmp(key, "range") == 0) {
      if (!em_query_duration(v, &range_ns)) {
        return fail(err, err_cap, "range: '%.32s' is not a duration (e.g. 15m, 6h, 7d)", v);
      }
      if (range_ns < EM_QUERY_MIN_RANGE_NS || range_ns > EM_QUERY_MAX_RANGE_NS) {
        return fail(err, err_cap, "range: '%.32s' is out of range (1m to 7d)", v);
      }
      have_range = true;
    } else if (strcmp(key, "since") == 0 || strcmp(key, "until") == 0) {
      if (!parse_u64(v, &x) || x > (uint64_t)INT64_MAX) {
        return fail(err, err_cap, "%s: '%.32s' is not a time in ns since the epoch", key, v);
      }
      if (key[0] == 's') {
        out->from_ns = x;
      } else {
        out->to_ns = x;
      }
    } else if (strcmp(key, "from") == 0 || strcmp(key, "to") == 0) {
      if (!parse_u64(v, &x) || x > (uint64_t)INT64_MAX) {
        return fail(err, err_cap, "%s: '%.32s' is not a time in ns since the epoch", key, v);
      }
      if (key[0] == 'f') {
        from = x;
        have_from = true;
      } else {
        to = x;
        have_to = true;
      }
    } else if (strcmp(key, "points") == 0) {
      if (!parse_u64(v, &x) || x < EM_QUERY_POINTS_MIN || x > EM_QUERY_POINTS_MAX) {
        return fail(err, err_cap, "points: '%.32s' is not a number from %u to %u", v,
                    EM_QUERY_POINTS_MIN, EM_QUERY_POINTS_MAX);
      }
      out->points = (unsigned)x;
    } else if (strcmp(key, "limit") == 0) {
      if (!parse_u64(v, &x) || x < 1 || x > EM_QUERY_LIMIT_MAX) {
        return fail(err, err_cap, "limit: '%.32s' is not a number from 1 to %u", v,
                    EM_QUERY_LIMIT_MAX);
      }
      out->limit = (unsigned)x;
    } else if (strcmp(key, "unit") == 0) {
      if (!parse_u64(v, &x) || x < EM_QUERY_UNIT_MIN_S || x > EM_QUERY_UNIT_MAX_S) {
        return fail(err, err_cap, "unit: '%.32s' is not a number of seconds from %u to %u", v,
                    EM_QUERY_UNIT_MIN_S, EM_QUERY_UNIT_MAX_S);
      }
      out->unit_s = (unsigned)x;
    } else if (strcmp(key, "model") == 0 || strcmp(key, "version") == 0) {
      bool is_model = key[0] == 'm';
      size_t max = is_model ? EM_PROTO_MAX_NAME_BYTES : EM_PROTO_MAX_MODEL_VERSION;
      if (strlen(v) > max) {
        return fail(err, err_cap, "%s: longer than %zu bytes", key, max);
      }
      memcpy(is_model ? out->model : out->version, v, strlen(v) + 1); /* fits: checked above */
      *(is_model ? &out->have_model : &out->have_version) = true;
    } else if (strcmp(key, "select") == 0) {
      memcpy(out->select, v, strlen(v) + 1); /* fits: VALUE_BYTES - 1 == EM_QUERY_SELECT_BYTES */
    } else if (strcmp(key, "name") == 0 || strcmp(key, "device") == 0) {
      if (strlen(v) > EM_QUERY_MAX_GLOB_BYTES) {
        return fail(err, err_cap, "%s: longer than %u bytes", key, EM_QUERY_MAX_GLOB_BYTES);
      }
      memcpy(out->name, v, strlen(v) + 1); /* fits: checked above */
      out->have_name = true;
    } else if (strcmp(key, "level") == 0) {
      int rc = parse_levels(v, &out->level_mask, err, err_cap);
      if (rc != 0) {
        return rc;
      }
    } else { /* stage */
      if (strlen(v) > EM_PROTO_MAX_STAGE_BYTES) {
        return fail(err, err_cap, "stage: longer than %u bytes", EM_PROTO_MAX_STAGE_BYTES);
      }
      memcpy(out->stage, v, strlen(v) + 1); /* fits: checked above */
      out->have_stage = true;
    }
  }
  if (kind == EM_QUERY_FLEET || kind == EM_QUERY_MODELS) {
    return 0;
  }
  if (kind == EM_QUERY_FLIGHTS) {
    return out->from_ns < out->to_ns ? 0 : fail(err, err_cap, "since: must be before until");
  }
  if (kind == EM_QUERY_COHORT) {
    if (out->select[0] == '\0') {
      return fail(err, err_cap, "select: required (e.g. select=version=1.5)");
    }
    out->to_ns = have_to ? to : now_ns;
    out->from_ns = have_from ? from : (out->to_ns > range_ns ? out->to_ns - range_ns : 0);
    if (out->from_ns >= out->to_ns) {
      return fail(err, err_cap, "from: must be before to");
    }
    if (out->to_ns - out->from_ns > EM_QUERY_MAX_RANGE_NS) {
      return fail(err, err_cap, "to: more than 7 days after from");
    }
    return 0;
  }
  if (have_range && (have_from || have_to)) {
    return fail(err, err_cap, "range: give either range or from and to, not both");
  }
  if (have_from != have_to) {
    return fail(err, err_cap, "%s: from and to go together", have_from ? "to" : "from");
  }
  if (have_from) {
    if (from >= to) {
      return fail(err, err_cap, "from: must be before to");
    }
    if (to - from > EM_QUERY_MAX_RANGE_NS) {
      return fail(err, err_cap, "to: more than 7 days after from");
    }
    out->from_ns = from;
    out->to_ns = to;
  } else {
    out->to_ns = now_ns;
    out->from_ns = now_ns > range_ns ? now_ns - range_ns : 0;
  }
  return 0;
}
