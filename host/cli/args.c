/*
 * args.c - the one parser every numeric option of edgemon-cli goes through (cli.h).
 *
 * A number on the command line is written one way only: decimal digits, optionally a '.' and
 * more digits, and for a duration an optional unit (ms, s, m, h). Everything else is refused
 * before any value is used: a sign, spaces, leading zeros ("010", octal to some tools), hex
 * ("0x10", which strtod() reads as 16), exponents ("1e3"), "inf" and "nan", trailing junk.
 * The form is checked by hand first; strtod() or strtoull() then only convert a prefix already
 * known to be plain decimal (the C locale is never changed, so '.' is the decimal point), and
 * the range is checked on the converted value (after the unit), so an overflow is "out of range".
 *
 * Owns nothing; no state.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The units a duration may carry and what one of each is in seconds. */
static const struct {
  const char *name;
  double seconds;
} units[] = {
    {"ms", 1e-3},
    {"s", 1.0},
    {"m", 60.0},
    {"h", 3600.0},
};

/*
 * Returns the length of the decimal prefix of s (digits, optionally '.' and digits), or 0 when
 * s does not start with one in the strict form: a first digit, no leading zero before another
 * digit, at least one digit after a '.'; `whole` refuses the '.'.
 */
static size_t decimal_prefix(const char *s, bool whole) {
  size_t n = 0;
  while (s[n] >= '0' && s[n] <= '9') {
    n++;
  }
  if (n == 0 || (n > 1 && s[0] == '0')) {
    return 0;
  }
  if (s[n] != '.') {
    return n;
  }
  if (whole) {
    return 0;
  }
  size_t frac = 0;
  while (s[n + 1 + frac] >= '0' && s[n + 1 + frac] <= '9') {
    frac++;
  }
  return frac == 0 ? 0 : n + 1 + frac;
}

int em_cli_parse_number(const char *s, const em_cli_number_t *spec, double *out) {
  if (!s || !spec || !out) {
    return -EINVAL;
  }
  size_t n = decimal_prefix(s, spec->whole);
  if (n == 0) {
    return -EINVAL;
  }
  double scale = 1.0;
  if (s[n] != '\0') {
    size_t i = 0;
    while (spec->duration && i < sizeof(units) / sizeof(units[0]) &&
           strcmp(s + n, units[i].name) != 0) {
      i++;
    }
    if (!spec->duration || i == sizeof(units) / sizeof(units[0])) {
      return -EINVAL;
    }
    scale = units[i].seconds;
  }
  /* The prefix is plain decimal, so the conversion stops exactly where it ends. */
  char *end = NULL;
  double v;
  errno = 0;
  if (spec->whole) {
    unsigned long long w = strtoull(s, &end, 10);
    /* Past 2^53 a double no longer holds every whole number: 2^53 + 1 would pass as 2^53. */
    v = errno == ERANGE || w > (1ull << 53) ? HUGE_VAL : (double)w;
  } else {
    v = strtod(s, &end) * scale;
  }
  if (end != s + n) {
    return -EINVAL;
  }
  if (!isfinite(v) || v < spec->min || v > spec->max || (spec->above_min && v == spec->min)) {
    return -ERANGE;
  }
  *out = v;
  return 0;
}

int em_cli_number_option(const char *cmd, const char *opt, const char *arg,
                         const em_cli_number_t *spec, double *out) {
  int rc = em_cli_parse_number(arg, spec, out);
  if (rc == 0) {
    return EM_CLI_OK;
  }
  const char *unit = spec->duration ? " s" : "";
  if (rc == -ERANGE) {
    return em_cli_usage_error(cmd, "%s: '%s' is out of range: %s %.15g%s, up to %.15g%s", opt, arg,
                              spec->above_min ? "more than" : "from", spec->min, unit, spec->max,
                              unit);
  }
  const char *form = spec->duration ? "a duration: decimal seconds (2, 0.5) or with a unit "
                                      "(500ms, 2s, 5m, 1h)"
                     : spec->whole  ? "a whole decimal number (like 5)"
                                    : "a decimal number (like 2 or 0.5)";
  return em_cli_usage_error(cmd, "%s: '%s' is not %s", opt, arg, form);
}

int em_cli_name_index(const char *arg, const char *const *names, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (strcmp(arg, names[i]) == 0) {
      return (int)i;
    }
  }
  return -1;
}

/* Days since 1970-01-01 of a proleptic Gregorian date. */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  unsigned yoe = (unsigned)(y - era * 400);
  unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + (int64_t)doe - 719468;
}

bool em_cli_parse_time(const char *s, uint64_t *ns) {
  static const em_cli_number_t epoch = {.min = 0, .max = 9.2e9};
  double secs;
  if (em_cli_parse_number(s, &epoch, &secs) == 0) {
    *ns = (uint64_t)(secs * 1e9 + 0.5);
    return true;
  }
  int y, mo, d, h, mi, sec, used = 0;
  if (sscanf(s, "%4d-%2d-%2d%*1[Tt ]%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &used) != 6 ||
      used != 19 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60 ||
      y < 1970) {
    return false;
  }
  const char *p = s + used;
  uint64_t frac = 0;
  if (*p == '.') {
    uint64_t scale = 100000000u;
    p++;
    if (*p < '0' || *p > '9') {
      return false;
    }
    for (; *p >= '0' && *p <= '9'; p++) {
      frac += (uint64_t)(*p - '0') * scale;
      scale /= 10;
    }
  }
  int64_t offset_s = 0;
  if (*p == 'Z' || *p == 'z') {
    p++;
  } else if (*p == '+' || *p == '-') {
    int oh, om, n2 = 0;
    if (sscanf(p + 1, "%2d:%2d%n", &oh, &om, &n2) != 2 || n2 != 5 || oh > 23 || om > 59) {
      return false;
    }
    offset_s = (int64_t)(oh * 3600 + om * 60) * (*p == '+' ? 1 : -1);
    p += 6;
  } else {
    return false;
  }
  if (*p) {
    return false;
  }
  int64_t t =
      days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + h * 3600 + mi * 60 + sec - offset_s;
  if (t < 0) {
    return false;
  }
  *ns = (uint64_t)t * 1000000000u + frac;
  return true;
}
