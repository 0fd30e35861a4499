/*
 * edgemon/common/parse.h - the typed value parsers every config reader of edgemon uses: the
 * agent's INI file, board profiles, the aggregator's [aggregator] section and the host tools'
 * command lines. One grammar per kind of value, so a value the agent accepts the host accepts
 * too, and the other way round.
 *
 *   duration   a whole number and a unit: ns, us, ms, s, m (minutes), h, d ("250us", "100ms",
 *              "5m", "7d"); no sign, no fraction, no blanks. A bare number takes the caller's
 *              bare unit (the aggregator's seconds) or is refused when the caller has none.
 *   size       a whole number and a unit: B, KiB, MiB, GiB; a bare number likewise.
 *   bool       true/yes/on/1 and false/no/off/0, in any case.
 *   integer    decimal digits only (no sign, no blanks) within [min, max].
 *   enum       one name of a caller's table, exactly or in any case.
 *   MQTT URL   mqtt://HOST[:PORT] (port 1883 by default) or mqtts://HOST[:PORT] (TLS, 8883);
 *              HOST is a name or IPv4 address of [A-Za-z0-9._-], or an IPv6 literal in brackets
 *              (mqtt://[::1]:1883), which comes out without them. One trailing '/' (the empty
 *              path) is accepted everywhere; any other path, a user@ part, or anything else after
 *              the port is refused.
 *
 * Nothing allocates; no global state. Every function leaves its out-parameters untouched when
 * it fails. The header compiles on its own, as C11 and as C++.
 */
#ifndef EDGEMON_COMMON_PARSE_H
#define EDGEMON_COMMON_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EM_NS_PER_US  1000ull
#define EM_NS_PER_MS  1000000ull
#define EM_NS_PER_S   1000000000ull
#define EM_NS_PER_MIN (60ull * EM_NS_PER_S)
#define EM_NS_PER_H   (3600ull * EM_NS_PER_S)
#define EM_NS_PER_DAY (24ull * EM_NS_PER_H)

/* Why a number with a unit (duration or size) was refused, for the caller's message. */
typedef enum {
  EM_PARSE_OK = 0,
  EM_PARSE_NOT_NUMBER, /* Does not start with a digit, or has a fraction: "abc", "1.5s", ".5s". */
  EM_PARSE_NEGATIVE,   /* Starts with '-'. */
  EM_PARSE_NO_UNIT,    /* Digits only, and the caller gave no bare unit. */
  EM_PARSE_BAD_UNIT,   /* Digits and something that is not a unit: "10xs", "10 ms", "10MS". */
  EM_PARSE_OVERFLOW,   /* More than a uint64_t holds once scaled. */
} em_parse_status_t;

/*
 * Parses a duration into *out_ns. bare_unit_ns is what a bare number counts in (0: a bare
 * number is EM_PARSE_NO_UNIT). Returns EM_PARSE_OK or the reason it was refused. `text` and
 * `out_ns` must not be NULL (EM_PARSE_NOT_NUMBER otherwise).
 */
em_parse_status_t em_parse_duration_status(const char *text, uint64_t bare_unit_ns,
                                           uint64_t *out_ns);

/* em_parse_duration_status() as an int: 0, or -EINVAL (also for NULL arguments). */
int em_parse_duration(const char *text, uint64_t bare_unit_ns, uint64_t *out_ns);

/* Parses a size (B, KiB, MiB, GiB) into *out_bytes; bare_unit_bytes as bare_unit_ns above. */
em_parse_status_t em_parse_size_status(const char *text, uint64_t bare_unit_bytes,
                                       uint64_t *out_bytes);

/* Parses true/yes/on/1 or false/no/off/0 (any case). Returns 0 or -EINVAL. */
int em_parse_bool(const char *text, bool *out);

/*
 * Parses a decimal whole number (digits only) within [min, max]. Returns 0, -EINVAL when it is
 * not one (or does not fit a uint64_t), -ERANGE when it is outside the range.
 */
int em_parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out);

/* One name of an enum table and the value it stands for. */
typedef struct {
  const char *name;
  int value;
} em_parse_enum_t;

/*
 * Looks `text` up in table[0..n): exactly, or in any case with `any_case`. Returns 0 with the
 * entry's value in *out, or -EINVAL.
 */
int em_parse_enum(const char *text, const em_parse_enum_t *table, size_t n, bool any_case,
                  int *out);

#define EM_MQTT_URL_MAX_HOST 255u /* Bytes of HOST, without the brackets of an IPv6 literal. */

typedef struct {
  char host[EM_MQTT_URL_MAX_HOST + 1]; /* NUL-terminated; an IPv6 literal without brackets. */
  uint16_t port;                       /* 1..65535. */
  bool tls;                            /* mqtts:// */
} em_mqtt_url_t;

/*
 * Parses a broker URL (the grammar at the top). Returns 0, or -EINVAL with *why (may be NULL)
 * pointing at a static phrase that completes "broker 'URL' ...", e.g. "has a bad port; use
 * 1..65535".
 */
int em_parse_mqtt_url(const char *url, em_mqtt_url_t *out, const char **why);

#ifdef __cplusplus
}
#endif

#endif /* EDGEMON_COMMON_PARSE_H */
