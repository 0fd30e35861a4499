/*
 * test_agg_query.c - the dashboard API's parameter parser (host/aggregator/api/query.c): defaults,
 * durations and their bounds, from/to, percent-decoding, level lists, the parameters each
 * endpoint accepts (the flight list's since, until and limit too), repeats, too many parameters,
 * and malformed numbers, each refusal with a message naming the parameter.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <query.h>

#define NOW   2000000000000000000ull
#define MIN_S 60000000000ull

static char err[256];

static int parse(em_query_kind_t kind, em_query_t *q, const char *k1, const char *v1,
                 const char *k2, const char *v2) {
  em_query_param_t p[2] = {{k1, v1}, {k2, v2}};
  size_t n = k2 ? 2 : k1 ? 1 : 0;
  err[0] = '\0';
  return em_query_parse(kind, p, n, NOW, q, err, sizeof(err));
}

/* Requests that must be refused, as "<F|H|L|R> <query string> -> <word the message names>"
 * (F fleet, H history, L latency, R flight recordings; the query string split at '&' and the
 * first '='). */
static const char *const refusals[] = {
    "L range=8d -> range",
    "L range=169h -> range",
    "L range=59s -> range",
    "L range=0m -> range",
    "L range=5 -> range",
    "L range=m -> range",
    "L range=5M -> range",
    "L range=-5m -> range",
    "L range=99999999999d -> range",
    "H from=2000&to=2000 -> from",
    "H from=0&to=604800000000001 -> to",
    "H from=1000 -> to",
    "H to=1000 -> from",
    "H range=1h&from=1 -> range",
    "H from=1e9&to=2e9 -> from",
    "H from=&to=2 -> from",
    "H from=9223372036854775808&to=1 -> from",
    "H points=9 -> points",
    "H points=2001 -> points",
    "H points=+20 -> points",
    "H points=20  -> points",
    "F limit=0 -> limit",
    "F limit=99999999999999999999 -> limit",
    "F level=BOGUS -> level",
    "F level=WARN, -> level",
    "F name=%zz -> name",
    "F name=a%00b -> name",
    "F name -> name",
    "L stage=0123456789012345678901234567890123 -> stage",
    "F points=10 -> points",
    "F range=1h -> range",
    "H stage=infer -> stage",
    "H limit=5 -> limit",
    "L points=10 -> points",
    "L bogus=1 -> bogus",
    "F limit=1&limit=2 -> limit",
    "R since=5&until=5 -> since",
    "R since=9&until=5 -> since",
    "R since=-1 -> since",
    "R until=1e9 -> until",
    "R until=9223372036854775808 -> until",
    "R limit=5001 -> limit",
    "R range=1h -> range",
    "R from=1&to=2 -> from",
    "H since=1 -> since",
};

/* Parses one refusals[] line and checks that it is refused with the parameter named. */
static void check_refusal(const char *line) {
  char buf[128];
  snprintf(buf, sizeof(buf), "%s", line);
  em_query_kind_t kind = buf[0] == 'F'   ? EM_QUERY_FLEET
                         : buf[0] == 'H' ? EM_QUERY_HISTORY
                         : buf[0] == 'R' ? EM_QUERY_FLIGHTS
                                         : EM_QUERY_LATENCY;
  char *arrow = strstr(buf, " -> ");
  assert_non_null(arrow);
  *arrow = '\0';
  const char *named = arrow + 4;
  em_query_param_t p[4];
  size_t n = 0;
  for (char *save = NULL, *kv = strtok_r(buf + 2, "&", &save); kv && n < 4;
       kv = strtok_r(NULL, "&", &save)) {
    char *eq = strchr(kv, '=');
    if (eq) {
      *eq = '\0';
    }
    p[n++] = (em_query_param_t){kv, eq ? eq + 1 : NULL};
  }
  em_query_t q;
  err[0] = '\0';
  assert_int_equal(em_query_parse(kind, p, n, NOW, &q, err, sizeof(err)), -EINVAL);
  if (!strstr(err, named)) {
    fail_msg("%s: '%s' does not name %s", line, err, named);
  }
}

static void defaults(void **state) {
  (void)state;
  em_query_t q;
  assert_int_equal(parse(EM_QUERY_HISTORY, &q, NULL, NULL, NULL, NULL), 0);
  assert_int_equal(q.to_ns, NOW);
  assert_int_equal(q.from_ns, NOW - 60 * MIN_S);
  assert_int_equal(q.points, 600);
  assert_int_equal(q.limit, 1000);
  assert_false(q.have_name);
  assert_int_equal(q.level_mask, 0);
}

static void durations(void **state) {
  (void)state;
  em_query_t q;
  assert_int_equal(parse(EM_QUERY_LATENCY, &q, "range", "7d", NULL, NULL), 0);
  assert_int_equal(NOW - q.from_ns, 7 * 24 * 60 * MIN_S);
  assert_int_equal(parse(EM_QUERY_LATENCY, &q, "range", "90s", NULL, NULL), 0);
  assert_int_equal(NOW - q.from_ns, 90000000000ull);
}

static void from_to(void **state) {
  (void)state;
  em_query_t q;
  assert_int_equal(parse(EM_QUERY_HISTORY, &q, "from", "1000", "to", "2000"), 0);
  assert_int_equal(q.from_ns, 1000);
  assert_int_equal(q.to_ns, 2000);
}

/* The flight list: since and until bound the trigger's time, [0, INT64_MAX) when absent; limit
 * defaults to EM_QUERY_FLIGHTS_DEFAULT. */
static void flights(void **state) {
  (void)state;
  em_query_t q;
  assert_int_equal(parse(EM_QUERY_FLIGHTS, &q, NULL, NULL, NULL, NULL), 0);
  assert_int_equal(q.from_ns, 0);
  assert_int_equal(q.to_ns, INT64_MAX);
  assert_int_equal(q.limit, EM_QUERY_FLIGHTS_DEFAULT);
  assert_int_equal(parse(EM_QUERY_FLIGHTS, &q, "since", "1000", "until", "1001"), 0);
  assert_int_equal(q.from_ns, 1000);
  assert_int_equal(q.to_ns, 1001);
  assert_int_equal(parse(EM_QUERY_FLIGHTS, &q, "limit", "1", NULL, NULL), 0);
  assert_int_equal(q.limit, 1);
}

static void numbers(void **state) {
  (void)state;
  em_query_t q;
  assert_int_equal(parse(EM_QUERY_HISTORY, &q, "points", "10", NULL, NULL), 0);
  assert_int_equal(q.points, 10);
  assert_int_equal(parse(EM_QUERY_FLEET, &q, "limit", "5000", NULL, NULL), 0);
  assert_int_equal(q.limit, 5000);
}

static void names_and_levels(void **state) {
  (void)state;
  em_query_t q;
  assert_int_equal(parse(EM_QUERY_FLEET, &q, "name", "sim-000%5B12%5D", "level", "warn,CRITICAL"),
                   0);
  assert_true(q.have_name);
  assert_string_equal(q.name, "sim-000[12]");
  assert_int_equal(q.level_mask, (1u << 1) | (1u << 3));
  assert_true(em_query_level_ok(q.level_mask, 3));
  assert_false(em_query_level_ok(q.level_mask, 0));
  assert_false(em_query_level_ok(q.level_mask, -1));
  assert_true(em_query_level_ok(0, -1));
  assert_int_equal(parse(EM_QUERY_FLEET, &q, "name", "a+b%2Bc", NULL, NULL), 0);
  assert_string_equal(q.name, "a b+c");
}

static void what_each_endpoint_takes(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++) {
    check_refusal(refusals[i]);
  }
  char longer[200];
  memset(longer, 'x', sizeof(longer) - 1);
  longer[sizeof(longer) - 1] = '\0';
  em_query_t lq;
  assert_int_equal(parse(EM_QUERY_FLEET, &lq, "name", longer, NULL, NULL), -EINVAL);
  assert_non_null(strstr(err, "name"));
  em_query_param_t many[EM_QUERY_MAX_PARAMS + 1];
  for (size_t i = 0; i < EM_QUERY_MAX_PARAMS + 1; i++) {
    many[i] = (em_query_param_t){"name", "x"};
  }
  em_query_t q;
  assert_int_equal(
      em_query_parse(EM_QUERY_FLEET, many, EM_QUERY_MAX_PARAMS + 1, NOW, &q, err, sizeof(err)),
      -EINVAL);
  assert_non_null(strstr(err, "parameters"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(defaults),         cmocka_unit_test(durations),
      cmocka_unit_test(from_to),          cmocka_unit_test(numbers),
      cmocka_unit_test(names_and_levels), cmocka_unit_test(what_each_endpoint_takes),
      cmocka_unit_test(flights),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
