/*
 * parse.c - the typed value parsers of edgemon/common/parse.h: durations, sizes, booleans,
 * whole numbers in a range, enum names and MQTT broker URLs. Each is a small hand-written
 * scanner over a NUL-terminated string: no strtoull (it takes signs and blanks the grammar
 * refuses), no locale, no allocation, no global state. Out-parameters change only on success.
 */
#define _POSIX_C_SOURCE 200809L
#include "edgemon/common/parse.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

typedef struct {
  const char *unit;
  uint64_t scale;
} unit_t;

static bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

/*
 * A whole number followed by one unit of units[0..n) (or nothing, counted in bare_unit when
 * that is not 0), scaled into *out.
 */
static em_parse_status_t parse_scaled(const char *text, const unit_t *units, size_t n,
                                      uint64_t bare_unit, uint64_t *out) {
  if (text == NULL || out == NULL) {
    return EM_PARSE_NOT_NUMBER;
  }
  if (text[0] == '-') {
    return EM_PARSE_NEGATIVE;
  }
  if (!is_digit(text[0])) {
    return EM_PARSE_NOT_NUMBER;
  }
  uint64_t v = 0;
  bool overflow = false;
  const char *p = text;
  for (; is_digit(*p); p++) {
    uint64_t d = (uint64_t)(*p - '0');
    if (v > (UINT64_MAX - d) / 10) {
      overflow = true;
    } else {
      v = v * 10 + d;
    }
  }
  if (*p == '.') {
    return EM_PARSE_NOT_NUMBER;
  }
  uint64_t scale = 0;
  if (*p == '\0') {
    if (bare_unit == 0) {
      return EM_PARSE_NO_UNIT;
    }
    scale = bare_unit;
  }
  for (size_t i = 0; i < n && scale == 0; i++) {
    if (strcmp(p, units[i].unit) == 0) {
      scale = units[i].scale;
    }
  }
  if (scale == 0) {
    return EM_PARSE_BAD_UNIT;
  }
  if (overflow || v > UINT64_MAX / scale) {
    return EM_PARSE_OVERFLOW;
  }
  *out = v * scale;
  return EM_PARSE_OK;
}

em_parse_status_t em_parse_duration_status(const char *text, uint64_t bare_unit_ns,
                                           uint64_t *out_ns) {
  static const unit_t units[] = {
      {"ns", 1},
      {"us", EM_NS_PER_US},
      {"ms", EM_NS_PER_MS},
      {"s", EM_NS_PER_S},
      {"m", EM_NS_PER_MIN},
      {"h", EM_NS_PER_H},
      {"d", EM_NS_PER_DAY},
  };
  return parse_scaled(text, units, sizeof(units) / sizeof(units[0]), bare_unit_ns, out_ns);
}

int em_parse_duration(const char *text, uint64_t bare_unit_ns, uint64_t *out_ns) {
  return em_parse_duration_status(text, bare_unit_ns, out_ns) == EM_PARSE_OK ? 0 : -EINVAL;
}

em_parse_status_t em_parse_size_status(const char *text, uint64_t bare_unit_bytes,
                                       uint64_t *out_bytes) {
  static const unit_t units[] = {
      {"B", 1}, {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}};
  return parse_scaled(text, units, sizeof(units) / sizeof(units[0]), bare_unit_bytes, out_bytes);
}

int em_parse_bool(const char *text, bool *out) {
  static const char *const yes[] = {"true", "yes", "on", "1"};
  static const char *const no[] = {"false", "no", "off", "0"};
  if (text == NULL || out == NULL) {
    return -EINVAL;
  }
  for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
    if (strcasecmp(text, yes[i]) == 0) {
      *out = true;
      return 0;
    }
    if (strcasecmp(text, no[i]) == 0) {
      *out = false;
      return 0;
    }
  }
  return -EINVAL;
}

int em_parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out) {
  if (text == NULL || out == NULL || !is_digit(text[0])) {
    return -EINVAL;
  }
  uint64_t v = 0;
  for (const char *p = text; *p != '\0'; p++) {
    if (!is_digit(*p)) {
      return -EINVAL;
    }
    uint64_t d = (uint64_t)(*p - '0');
    if (v > (UINT64_MAX - d) / 10) {
      return -EINVAL;
    }
    v = v * 10 + d;
  }
  if (v < min || v > max) {
    return -ERANGE;
  }
  *out = v;
  return 0;
}

int em_parse_enum(const char *text, const em_parse_enum_t *table, size_t n, bool any_case,
                  int *out) {
  if (text == NULL || table == NULL || out == NULL) {
    return -EINVAL;
  }
  for (size_t i = 0; i < n; i++) {
    bool same = any_case ? strcasecmp(text, table[i].name) == 0 : strcmp(text, table[i].name) == 0;
    if (same) {
      *out = table[i].value;
      return 0;
    }
  }
  return -EINVAL;
}

/* A character of a host name or IPv4 address. */
static bool is_host_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || is_digit(c) || c == '.' || c == '-' ||
         c == '_';
}

/* A character inside the brackets of an IPv6 literal. */
static bool is_ipv6_char(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' || c == '.';
}

/* The URL grammar of the header; NULL on success, else why not. */
static const char *parse_url(const char *url, em_mqtt_url_t *out) {
  static const char plain[] = "mqtt://";
  static const char secure[] = "mqtts://";
  bool tls = false;
  const char *h = NULL;
  if (strncmp(url, plain, sizeof(plain) - 1) == 0) {
    h = url + sizeof(plain) - 1;
  } else if (strncmp(url, secure, sizeof(secure) - 1) == 0) {
    h = url + sizeof(secure) - 1;
    tls = true;
  } else {
    return "must look like mqtt://HOST[:PORT] or mqtts://HOST[:PORT], e.g. "
           "mqtt://127.0.0.1:1883";
  }
  const char *end = h;
  const char *next = NULL;
  if (*h == '[') {
    h++;
    end = h;
    while (is_ipv6_char(*end)) {
      end++;
    }
    if (*end != ']' || end == h) {
      return "has a bad IPv6 address; write it as mqtt://[::1]:1883";
    }
    next = end + 1;
  } else {
    while (is_host_char(*end)) {
      end++;
    }
    next = end;
  }
  if (end == h) {
    return "has no host";
  }
  if (strchr(next, '@') != NULL) {
    return "has credentials; put them in [mqtt] credentials_file instead";
  }
  uint64_t port = tls ? 8883 : 1883;
  if (*next == ':') {
    const char *p = next + 1;
    port = 0;
    for (; is_digit(*p) && port <= 65535; p++) {
      port = port * 10 + (uint64_t)(*p - '0');
    }
    if (p == next + 1 || port < 1 || port > 65535 || (*p != '\0' && strcmp(p, "/") != 0)) {
      return "has a bad port; use 1..65535";
    }
  } else if (*next != '\0' && strcmp(next, "/") != 0) {
    return "has an unexpected character after the host; use mqtt://HOST[:PORT]";
  }
  size_t len = (size_t)(end - h);
  if (len > EM_MQTT_URL_MAX_HOST) {
    return "has a host name that is too long";
  }
  memcpy(out->host, h, len);
  out->host[len] = '\0';
  out->port = (uint16_t)port;
  out->tls = tls;
  return NULL;
}

int em_parse_mqtt_url(const char *url, em_mqtt_url_t *out, const char **why) {
  const char *reason = "is missing";
  if (url != NULL && out != NULL) {
    em_mqtt_url_t u;
    reason = parse_url(url, &u);
    if (reason == NULL) {
      *out = u;
      return 0;
    }
  }
  if (why != NULL) {
    *why = reason;
  }
  return -EINVAL;
}
