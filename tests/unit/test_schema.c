/*
 * test_schema.c - common/'s declarative config schema (edgemon/common/schema.h), table-driven:
 * every row type stores accepted values into its field and refuses the rest with the message
 * the agent's config has always given; defaults fill from the rows (given or computed); lookups,
 * did-you-mean, the first non-reloadable change between two structs, a reload's adoption of the
 * changed reloadable rows with their apply steps, command-line flags, and documentation lines.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "edgemon/common/schema.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

typedef struct {
  uint64_t period_ns;
  uint64_t smaps_ns;
  uint32_t keepalive_s;
  uint64_t ttl_s;
  uint64_t spool_bytes;
  bool insecure;
  uint32_t rings;
  uint16_t port;
  int level;
  bool nvml;
  char name[16];
  char path[32];
  char spool[32];
  char text[8];
  char secret[16];
  int custom_calls;
} demo_t;

enum { LEVEL_ERROR = 0, LEVEL_WARN, LEVEL_INFO };
static const em_parse_enum_t levels[] = {
    {"error", LEVEL_ERROR}, {"warn", LEVEL_WARN}, {"info", LEVEL_INFO}};
static const em_parse_enum_t true_false[] = {{"true", 1}, {"false", 0}};

static int set_custom(void *ctx, const em_schema_key_t *k, void *obj, const char *value) {
  (void)ctx;
  (void)k;
  demo_t *d = obj;
  d->custom_calls++;
  return strcmp(value, "ok") == 0 ? 0 : -EINVAL;
}

static bool same_never(const void *a, const void *b) {
  (void)a;
  (void)b;
  return false;
}

#define F(field) offsetof(demo_t, field), sizeof(((demo_t *)0)->field)

static const em_schema_key_t demo[] = {
    {.section = "agent",
     .name = "sample_period",
     .type = EM_SCHEMA_DURATION,
     F(period_ns),
     .min = EM_NS_PER_MS,
     .max = 60 * EM_NS_PER_S,
     .def = "100ms",
     .example = "100ms",
     .doc = "How often the process is sampled."},
    {.section = "agent",
     .name = "smaps_period",
     .type = EM_SCHEMA_DURATION,
     F(smaps_ns),
     .min = EM_NS_PER_MS,
     .max = EM_NS_PER_H,
     .def = "5s",
     .flags = EM_SCHEMA_OFF | EM_SCHEMA_ZERO,
     .example = "5s"},
    {.section = "mqtt",
     .name = "keepalive",
     .type = EM_SCHEMA_DURATION,
     F(keepalive_s),
     .min = 5 * EM_NS_PER_S,
     .max = EM_NS_PER_H,
     .def = "30s",
     .flags = EM_SCHEMA_SECONDS | EM_SCHEMA_WHOLE,
     .example = "30s"},
    {.section = "agg",
     .name = "ttl",
     .type = EM_SCHEMA_DURATION,
     F(ttl_s),
     .bare_unit = EM_NS_PER_S,
     .def = "1d",
     .flags = EM_SCHEMA_SECONDS | EM_SCHEMA_RELOAD,
     .example = "24h",
     .want = "wants a duration such as 30m, 24h or 7d (0: never)"},
    {.section = "spool",
     .name = "size",
     .type = EM_SCHEMA_SIZE,
     F(spool_bytes),
     .min = 64ull << 10,
     .max = 1ull << 30,
     .def = "16MiB",
     .example = "16MiB"},
    {.section = "mqtt",
     .name = "tls_insecure",
     .type = EM_SCHEMA_BOOL,
     F(insecure),
     .def = "false",
     .example = "false"},
    {.section = "spans",
     .name = "rings",
     .type = EM_SCHEMA_INT,
     F(rings),
     .min = 1,
     .max = 1024,
     .def = "64",
     .example = "64",
     .flags = EM_SCHEMA_RELOAD},
    {.section = "spans",
     .name = "port",
     .type = EM_SCHEMA_INT,
     F(port),
     .def = "1883",
     .example = "1883"},
    {.section = "agent",
     .name = "log_level",
     .type = EM_SCHEMA_ENUM,
     F(level),
     .def = "info",
     .choices = levels,
     .n_choices = ARRAY_LEN(levels),
     .example = "info"},
    {.section = "sensors",
     .name = "nvml",
     .type = EM_SCHEMA_ENUM,
     F(nvml),
     .def = "false",
     .choices = true_false,
     .n_choices = 2,
     .want = "must be true or false",
     .example = "false"},
    {.section = "agent",
     .name = "device_id",
     .type = EM_SCHEMA_ID,
     F(name),
     .example = "jetson-07"},
    {.section = "agent",
     .name = "runtime_dir",
     .type = EM_SCHEMA_PATH,
     F(path),
     .def = "/run/edgemon",
     .example = "/run/edgemon"},
    {.section = "spool",
     .name = "path",
     .type = EM_SCHEMA_PATH,
     F(spool),
     .flags = EM_SCHEMA_OFF,
     .def = "off",
     .example = "/var/lib/edgemon/spool"},
    {.section = "agg",
     .name = "db",
     .type = EM_SCHEMA_STRING,
     F(text),
     .min = 1,
     .max = 7,
     .example = "e.db"},
    {.section = "mqtt",
     .name = "password",
     .type = EM_SCHEMA_STRING,
     F(secret),
     .flags = EM_SCHEMA_SECRET,
     .example = "x"},
    {.section = "target",
     .name = "pid",
     .type = EM_SCHEMA_CUSTOM,
     .offset = EM_SCHEMA_NO_FIELD,
     .set = set_custom,
     .def = "ok",
     .example = "1234",
     .flags = EM_SCHEMA_RELOAD},
    {.section = "pmu",
     .name = "events",
     .type = EM_SCHEMA_LIST,
     .offset = EM_SCHEMA_NO_FIELD,
     .set = set_custom,
     .same = same_never,
     .example = "cycles"},
};

/* Every row type: the stored field for accepted values, the exact message for refused ones. */
static void values_are_stored_or_refused_with_the_message(void **state) {
  (void)state;
  static const struct {
    const char *key;
    const char *value;
    const char *msg; /* NULL: accepted. */
  } rows[] = {
      {"sample_period", "250ms", NULL},
      {"sample_period", "10", "sample_period needs a unit, e.g. 100ms"},
      {"sample_period", "10xs",
       "sample_period '10xs' has an unknown unit; use ns, us, ms, s, m, h or d"},
      {"sample_period", "-1s", "sample_period '-1s' cannot be negative"},
      {"sample_period", "1.5s",
       "sample_period '1.5s' is not a duration; use a whole number and a unit, e.g. 100ms"},
      {"sample_period", "99999999999999999999ns",
       "sample_period '99999999999999999999ns' is too large"},
      {"sample_period", "999us", "sample_period '999us' is out of range 1ms..60s"},
      {"sample_period", "61s", "sample_period '61s' is out of range 1ms..60s"},
      {"smaps_period", "off", NULL},
      {"smaps_period", "0", NULL},
      {"smaps_period", "2h", "smaps_period '2h' is out of range 1ms..1h"},
      {"keepalive", "7500ms", "keepalive '7500ms' must be whole seconds, e.g. 30s"},
      {"keepalive", "4s", "keepalive '4s' is out of range 5s..1h"},
      {"keepalive", "2m", NULL},
      {"ttl", "3600", NULL},
      {"ttl", "soon", "ttl 'soon' wants a duration such as 30m, 24h or 7d (0: never)"},
      {"size", "32KiB", "size '32KiB' is out of range 64KiB..1GiB"},
      {"size", "2GiB", "size '2GiB' is out of range 64KiB..1GiB"},
      {"size", "16", "size needs a unit (B, KiB, MiB or GiB), e.g. 16MiB"},
      {"size", "16MB", "size '16MB' has an unknown unit; use B, KiB, MiB or GiB"},
      {"size", "lots", "size 'lots' is not a size; use a whole number and a unit, e.g. 16MiB"},
      {"size", "1MiB", NULL},
      {"tls_insecure", "maybe", "tls_insecure 'maybe' must be true or false"},
      {"tls_insecure", "yes", NULL},
      {"rings", "0", "rings '0' must be a whole number from 1 to 1024"},
      {"rings", "1025", "rings '1025' must be a whole number from 1 to 1024"},
      {"rings", "-1", "rings '-1' must be a whole number from 1 to 1024"},
      {"rings", "1024", NULL},
      {"port", "65536", "port '65536' must be a whole number from 0 to 65535"},
      {"port", "8883", NULL},
      {"log_level", "verbose", "log_level 'verbose' must be one of error, warn, info"},
      {"log_level", "INFO", "log_level 'INFO' must be one of error, warn, info"},
      {"log_level", "warn", NULL},
      {"nvml", "yes", "nvml 'yes' must be true or false"},
      {"nvml", "true", NULL},
      {"device_id", "a b", "device_id 'a b' may use only letters, digits and _ . : -"},
      {"device_id", "0123456789abcdef",
       "device_id '0123456789abcdef' is longer than 15 characters"},
      {"device_id", "jetson-07", NULL},
      {"runtime_dir", "run/edgemon", "runtime_dir 'run/edgemon' must be an absolute path"},
      {"runtime_dir", "/0123456789/0123456789/0123456789",
       "runtime_dir is longer than 31 characters"},
      {"runtime_dir", "/run/x", NULL},
      {"path", "off", NULL},
      {"path", "spool", "path 'spool' must be an absolute path"},
      {"db", "12345678", "db '12345678' is longer than 7 characters"},
      {"db", "", "db '' is too short"},
      {"password", "hunter2hunter2hunter2", "password is longer than 15 characters"},
  };
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    const em_schema_key_t *k = em_schema_find_any(demo, ARRAY_LEN(demo), rows[i].key);
    assert_non_null(k);
    demo_t d;
    memset(&d, 0x5a, sizeof(d));
    demo_t before = d;
    char msg[EM_SCHEMA_MSG_MAX];
    int rc = em_schema_set(k, &d, rows[i].value, msg, sizeof(msg));
    if (rows[i].msg == NULL) {
      if (rc != 0) {
        print_error("row %zu: %s = %s refused: %s\n", i, rows[i].key, rows[i].value, msg);
      }
      assert_int_equal(rc, 0);
      assert_memory_not_equal((char *)&d + k->offset, (char *)&before + k->offset, k->size);
    } else {
      if (rc == 0 || strcmp(msg, rows[i].msg) != 0) {
        print_error("row %zu: rc %d, '%s', want '%s'\n", i, rc, msg, rows[i].msg);
      }
      assert_int_equal(rc, -EINVAL);
      assert_string_equal(msg, rows[i].msg);
      assert_memory_equal(&d, &before, sizeof(d)); /* Untouched on failure. */
    }
  }
}

/* The stored values are the parsed ones, in the field's own width and unit. */
static void stored_values_have_the_field_unit(void **state) {
  (void)state;
  demo_t d;
  memset(&d, 0, sizeof(d));
  char msg[EM_SCHEMA_MSG_MAX];
  const size_t n = ARRAY_LEN(demo);
  assert_int_equal(em_schema_set(em_schema_find_any(demo, n, "keepalive"), &d, "2m", msg, 512), 0);
  assert_int_equal(d.keepalive_s, 120);
  assert_int_equal(em_schema_set(em_schema_find_any(demo, n, "ttl"), &d, "90", msg, 512), 0);
  assert_int_equal(d.ttl_s, 90);
  assert_int_equal(em_schema_set(em_schema_find_any(demo, n, "smaps_period"), &d, "2s", msg, 512),
                   0);
  assert_int_equal(d.smaps_ns, 2 * EM_NS_PER_S);
  assert_int_equal(em_schema_set(em_schema_find_any(demo, n, "smaps_period"), &d, "off", msg, 512),
                   0);
  assert_int_equal(d.smaps_ns, 0);
  assert_int_equal(em_schema_set(em_schema_find_any(demo, n, "port"), &d, "8883", msg, 512), 0);
  assert_int_equal(d.port, 8883);
  assert_int_equal(em_schema_set(em_schema_find_any(demo, n, "log_level"), &d, "warn", msg, 512),
                   0);
  assert_int_equal(d.level, LEVEL_WARN);
  assert_int_equal(em_schema_set(em_schema_find_any(demo, n, "size"), &d, "2MiB", msg, 512), 0);
  assert_int_equal(d.spool_bytes, 2u << 20);
  /* A custom row is not the generic setter's. */
  assert_int_equal(em_schema_set(em_schema_find_any(demo, n, "pid"), &d, "1", msg, 512), -EINVAL);
}

/* em_schema_apply: the row's own setter when it has one, else the generic one's message. */
static int n_reports;
static char last_report[EM_SCHEMA_MSG_MAX];
static void on_report(void *ctx, const char *msg) {
  (void)ctx;
  n_reports++;
  snprintf(last_report, sizeof(last_report), "%s", msg);
}

static void apply_calls_the_custom_setter_or_reports(void **state) {
  (void)state;
  demo_t d;
  memset(&d, 0, sizeof(d));
  const size_t n = ARRAY_LEN(demo);
  n_reports = 0;
  assert_int_equal(em_schema_apply(em_schema_find_any(demo, n, "pid"), &d, "ok", NULL, on_report),
                   0);
  assert_int_equal(d.custom_calls, 1);
  assert_int_equal(em_schema_apply(em_schema_find_any(demo, n, "rings"), &d, "0", NULL, on_report),
                   -EINVAL);
  assert_int_equal(n_reports, 1);
  assert_string_equal(last_report, "rings '0' must be a whole number from 1 to 1024");
  assert_int_equal(em_schema_apply(em_schema_find_any(demo, n, "rings"), &d, "8", NULL, on_report),
                   0);
  assert_int_equal(d.rings, 8);
  assert_int_equal(n_reports, 1);
}

/* Defaults fill every row that has one (through its own setter when it has one); a bad default
 * is named. */
static void defaults_fill_from_the_rows(void **state) {
  (void)state;
  demo_t d;
  memset(&d, 0, sizeof(d));
  assert_int_equal(em_schema_defaults(demo, ARRAY_LEN(demo), &d, NULL, NULL), 0);
  assert_int_equal(d.period_ns, 100 * EM_NS_PER_MS);
  assert_int_equal(d.smaps_ns, 5 * EM_NS_PER_S);
  assert_int_equal(d.keepalive_s, 30);
  assert_int_equal(d.ttl_s, 86400);
  assert_int_equal(d.spool_bytes, 16u << 20);
  assert_false(d.insecure);
  assert_int_equal(d.rings, 64);
  assert_int_equal(d.port, 1883);
  assert_int_equal(d.level, LEVEL_INFO);
  assert_string_equal(d.path, "/run/edgemon");
  assert_string_equal(d.spool, "off");
  assert_string_equal(d.name, "");     /* No default: the caller's. */
  assert_int_equal(d.custom_calls, 1); /* pid's default went through its setter. */

  em_schema_key_t bad[3] = {demo[0], demo[0], demo[2]};
  bad[1].def = "100";
  const em_schema_key_t *which = NULL;
  d.keepalive_s = 0;
  assert_int_equal(em_schema_defaults(bad, 3, &d, NULL, &which), -EINVAL);
  assert_ptr_equal(which, &bad[1]);
  assert_int_equal(d.keepalive_s, 30); /* The rows after a bad one are still filled. */
}

/* A computed default: runs after the row's given one, in table order, reading earlier rows. */
static void compute_rank(const em_schema_key_t *k, void *obj) {
  (void)k;
  demo_t *d = obj;
  snprintf(d->name, sizeof(d->name), "n-%u", (unsigned)d->rings);
}

static void computed_defaults_follow_earlier_rows(void **state) {
  (void)state;
  em_schema_key_t rows[] = {demo[6], demo[10]}; /* rings (64), device_id */
  rows[1].compute = compute_rank;
  demo_t d;
  memset(&d, 0, sizeof(d));
  assert_int_equal(em_schema_defaults(rows, 2, &d, NULL, NULL), 0);
  assert_string_equal(d.name, "n-64");
  rows[0].def = "8";
  assert_int_equal(em_schema_defaults(rows, 2, &d, NULL, NULL), 0);
  assert_string_equal(d.name, "n-8");
}

/* A reload copies each changed reloadable row (by its bytes or its own copy) and returns the
 * apply steps of the changed rows only; rows a reload cannot apply stay. */
static void copy_events(void *running, const void *next) {
  demo_t *r = running;
  const demo_t *n = next;
  r->custom_calls = n->custom_calls + 100;
}

static void adopt_copies_changed_reloadable_rows(void **state) {
  (void)state;
  em_schema_key_t rows[] = {demo[6], demo[0], demo[3], demo[16]}; /* rings, sample, ttl, events */
  rows[0].apply = 0x1;
  rows[2].apply = 0x2 | 0x4;
  rows[3].flags |= EM_SCHEMA_RELOAD;
  rows[3].apply = 0x8;
  rows[3].copy = copy_events;
  rows[3].same = NULL; /* No field and no comparison: skipped. */
  demo_t run;
  memset(&run, 0, sizeof(run));
  assert_int_equal(em_schema_defaults(demo, ARRAY_LEN(demo), &run, NULL, NULL), 0);
  demo_t next = run;
  assert_int_equal(em_schema_adopt(rows, 4, &run, &next), 0u);
  next.rings = 8;
  next.period_ns = 5; /* Not reloadable: stays. */
  assert_int_equal(em_schema_adopt(rows, 4, &run, &next), 0x1u);
  assert_int_equal(run.rings, 8);
  assert_int_equal(run.period_ns, 100 * EM_NS_PER_MS);
  assert_int_equal(em_schema_adopt(rows, 4, &run, &next), 0u); /* Nothing changed since. */
  next.ttl_s = 7;
  next.rings = 16;
  assert_int_equal(em_schema_adopt(rows, 4, &run, &next), 0x7u);
  assert_int_equal(run.ttl_s, 7);
  rows[3].same = same_never; /* Now compared: always differs, copied by its hook. */
  next.custom_calls = 1;
  assert_int_equal(em_schema_adopt(rows, 4, &run, &next), 0x8u);
  assert_int_equal(run.custom_calls, 101);
}

/* Flags: --name with '-' for '_', only for rows that say so, found either way. */
static void flags_are_derived_from_the_key(void **state) {
  (void)state;
  em_schema_key_t rows[] = {demo[5], demo[6], demo[0]}; /* tls_insecure, rings, sample_period */
  rows[0].flags |= EM_SCHEMA_FLAG;
  rows[2].flags |= EM_SCHEMA_FLAG;
  char buf[32];
  assert_string_equal(em_schema_flag(&rows[0], buf, sizeof(buf)), "--tls-insecure");
  assert_null(em_schema_flag(&rows[1], buf, sizeof(buf)));
  assert_null(em_schema_flag(&rows[2], buf, 8)); /* Too small. */
  assert_ptr_equal(em_schema_find_flag(rows, 3, "--sample-period"), &rows[2]);
  assert_ptr_equal(em_schema_find_flag(rows, 3, "tls-insecure"), &rows[0]);
  assert_null(em_schema_find_flag(rows, 3, "--rings"));
  assert_null(em_schema_find_flag(rows, 3, "--sample_period"));
}

/* Lookups by section and name, and the suggestions for misspelt keys and sections. */
static void lookups_and_suggestions(void **state) {
  (void)state;
  const size_t n = ARRAY_LEN(demo);
  assert_ptr_equal(em_schema_find(demo, n, "agent", "sample_period"), &demo[0]);
  assert_null(em_schema_find(demo, n, "mqtt", "sample_period"));
  assert_ptr_equal(em_schema_find_any(demo, n, "keepalive"), &demo[2]);
  assert_null(em_schema_find_any(demo, n, "nothing"));
  assert_string_equal(em_schema_suggest(demo, n, "agent", "sample_perod"), "sample_period");
  assert_string_equal(em_schema_suggest(demo, n, "agent", "sample period"), "sample_period");
  assert_null(em_schema_suggest(demo, n, "mqtt", "sample_perod")); /* Another section's. */
  assert_null(em_schema_suggest(demo, n, "agent", "colour"));
  assert_null(em_schema_suggest(demo, n, "agent", "sample_period")); /* Itself: no hint. */
  static const char *const sections[] = {"agent", "mqtt", "spans"};
  assert_string_equal(em_schema_closest("agnet", sections, 3), "agent");
  assert_string_equal(em_schema_closest("Agent", sections, 3), "agent");
  assert_null(em_schema_closest("ab", sections, 3)); /* Too short to guess. */
  assert_null(em_schema_closest("budget", sections, 3));
}

/* The first non-reloadable field that differs; reloadable rows and equal fields are skipped. */
static void first_change_skips_reloadable_rows(void **state) {
  (void)state;
  em_schema_key_t rows[] = {demo[6], demo[0], demo[10], demo[3]}; /* rings, sample, id, ttl */
  const size_t n = ARRAY_LEN(rows);
  demo_t a;
  memset(&a, 0, sizeof(a));
  assert_int_equal(em_schema_defaults(demo, ARRAY_LEN(demo), &a, NULL, NULL), 0);
  demo_t b = a;
  assert_null(em_schema_first_change(rows, n, &a, &b));
  b.rings = 8; /* Reloadable. */
  b.ttl_s = 1; /* Reloadable. */
  assert_null(em_schema_first_change(rows, n, &a, &b));
  memcpy(b.name, "x\0junk", 7);
  memcpy(a.name, "x\0other", 8); /* Bytes after the NUL do not count. */
  assert_null(em_schema_first_change(rows, n, &a, &b));
  b.name[0] = 'y';
  assert_ptr_equal(em_schema_first_change(rows, n, &a, &b), &rows[2]);
  b.period_ns++;
  assert_ptr_equal(em_schema_first_change(rows, n, &a, &b), &rows[1]);
  /* A row's own comparison wins; rows without a field or comparison are skipped. */
  em_schema_key_t custom[] = {demo[15], demo[16]};
  assert_ptr_equal(em_schema_first_change(custom, 2, &a, &a), &custom[1]);
}

/* Documentation lines name the section, key, type, default, range and reloadability. */
static void describe_names_everything(void **state) {
  (void)state;
  char line[512];
  em_schema_describe(&demo[0], line, sizeof(line));
  assert_string_equal(line, "[agent] sample_period = 100ms (duration, default 100ms, 1ms..60s) "
                            "How often the process is sampled.");
  em_schema_describe(&demo[6], line, sizeof(line));
  assert_string_equal(line, "[spans] rings = 64 (int, default 64, 1..1024, reloadable) ");
  em_schema_describe(&demo[4], line, sizeof(line));
  assert_non_null(strstr(line, "(size, default 16MiB, 64KiB..1GiB)"));
  assert_string_equal(em_schema_type_name(EM_SCHEMA_LIST), "list");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(values_are_stored_or_refused_with_the_message),
      cmocka_unit_test(stored_values_have_the_field_unit),
      cmocka_unit_test(apply_calls_the_custom_setter_or_reports),
      cmocka_unit_test(defaults_fill_from_the_rows),
      cmocka_unit_test(computed_defaults_follow_earlier_rows),
      cmocka_unit_test(adopt_copies_changed_reloadable_rows),
      cmocka_unit_test(flags_are_derived_from_the_key),
      cmocka_unit_test(lookups_and_suggestions),
      cmocka_unit_test(first_change_skips_reloadable_rows),
      cmocka_unit_test(describe_names_everything),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
