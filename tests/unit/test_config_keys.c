/*
 * test_config_keys.c - the agent's config schema (em_config_schema) against what people read
 * and what the agent does with it: docs/CONFIG.md and firmware/edgemon-agent.ini name every key
 * of the schema and no other; every default the rows document is what em_config_defaults()
 * gives (a file setting every key to its documented default loads to the same config); and
 * em_config_reload_conflict() names exactly the keys a reload cannot apply, and
 * em_config_adopt() copies exactly those it can, naming the steps each change makes due.
 *
 * The docs: a key is named by a backquoted word in the first cell of a table row under its
 * "## [section]" header. The example file: a key is named by a "key = value" line (commented
 * out or not) under its [section] header, or by a word of a comment there; a "key = value" line
 * must be a key of its section. [budget.NAME] sections other than [budget.process] are
 * "budget.<stage>".
 */
#define _POSIX_C_SOURCE 200809L

#include <ctype.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"

#ifndef EM_FIXTURES_DIR
#error "EM_FIXTURES_DIR (absolute path of tests/fixtures) must be defined"
#endif

#define DOCS_FILE    EM_FIXTURES_DIR "/../../docs/CONFIG.md"
#define EXAMPLE_FILE EM_FIXTURES_DIR "/../../firmware/edgemon-agent.ini"
#define TEXT_MAX     (256 * 1024)
#define MAX_KEYS     256

/* Reads a whole file into a NUL-terminated heap buffer. */
static char *read_text(const char *path) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char *buf = malloc(TEXT_MAX);
  assert_non_null(buf);
  size_t n = fread(buf, 1, TEXT_MAX - 1, f);
  assert_true(n < TEXT_MAX - 1);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* Where each row of the schema was named; problems found, printed at the end. */
typedef struct {
  const em_schema_key_t *rows;
  size_t n;
  bool named[MAX_KEYS];
  int problems;
} named_t;

__attribute__((format(printf, 2, 3))) static void problem(named_t *nm, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char msg[512];
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  print_error("%s\n", msg);
  nm->problems++;
}

/* Marks `word` as named in `section`; false when it is no key there. */
static bool mark(named_t *nm, const char *section, const char *word) {
  const em_schema_key_t *k = em_schema_find(nm->rows, nm->n, section, word);
  if (k == NULL) {
    return false;
  }
  nm->named[k - nm->rows] = true;
  return true;
}

/* The schema's section name of a header's text: "budget.infer" is "budget.<stage>". */
static void section_of(const char *header, char *out, size_t cap) {
  char text[64];
  size_t j = 0;
  for (size_t i = 0; header[i] != '\0' && header[i] != ']' && j + 1 < sizeof(text); i++) {
    if (strncmp(header + i, "&lt;", 4) == 0) {
      text[j++] = '<';
      i += 3;
    } else if (strncmp(header + i, "&gt;", 4) == 0) {
      text[j++] = '>';
      i += 3;
    } else {
      text[j++] = header[i];
    }
  }
  text[j] = '\0';
  if (strncmp(text, "budget.", 7) == 0 && strcmp(text, "budget.process") != 0) {
    snprintf(out, cap, "budget.<stage>");
  } else {
    snprintf(out, cap, "%s", text);
  }
}

static void check_all_named(named_t *nm, const char *file) {
  for (size_t i = 0; i < nm->n; i++) {
    if (!nm->named[i]) {
      problem(nm, "%s does not name [%s] %s", file, nm->rows[i].section, nm->rows[i].name);
    }
  }
}

static void docs_name_every_key_and_no_other(void **state) {
  (void)state;
  named_t nm = {0};
  nm.rows = em_config_schema(&nm.n);
  assert_true(nm.n > 0 && nm.n <= MAX_KEYS);
  char *text = read_text(DOCS_FILE);
  char section[64] = "";
  for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
    if (strncmp(line, "## ", 3) == 0) {
      section[0] = '\0';
      if (line[3] == '[') {
        section_of(line + 4, section, sizeof(section));
      }
      continue;
    }
    if (section[0] == '\0' || strncmp(line, "| `", 3) != 0) {
      continue;
    }
    /* The first cell: every backquoted word in it is a key of the section. */
    char *end = strstr(line + 1, " |");
    if (end != NULL) {
      *end = '\0';
    }
    for (char *p = strchr(line, '`'); p != NULL; p = strchr(p, '`')) {
      char *close = strchr(p + 1, '`');
      if (close == NULL) {
        break;
      }
      *close = '\0';
      if (!mark(&nm, section, p + 1)) {
        problem(&nm, "docs/CONFIG.md names `%s` in [%s], which is no key there", p + 1, section);
      }
      p = close + 1;
    }
  }
  free(text);
  check_all_named(&nm, "docs/CONFIG.md");
  assert_int_equal(nm.problems, 0);
}

static bool is_key_char(char c) {
  return islower((unsigned char)c) || isdigit((unsigned char)c) || c == '_';
}

static void example_names_every_key_and_no_other(void **state) {
  (void)state;
  named_t nm = {0};
  nm.rows = em_config_schema(&nm.n);
  char *text = read_text(EXAMPLE_FILE);
  char section[64] = "";
  for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
    if (line[0] == '[') {
      section_of(line + 1, section, sizeof(section));
      continue;
    }
    if (section[0] == '\0') {
      continue;
    }
    /* A "key = value" line, commented out or not. */
    const char *p = line;
    bool comment = *p == ';';
    if (comment) {
      p++;
    }
    while (*p == ' ' || *p == '\t') {
      p++;
    }
    size_t len = 0;
    while (is_key_char(p[len])) {
      len++;
    }
    const char *after = p + len;
    while (*after == ' ' || *after == '\t') {
      after++;
    }
    if (len > 0 && *after == '=') {
      char key[64];
      snprintf(key, sizeof(key), "%.*s", (int)len, p);
      if (!mark(&nm, section, key)) {
        problem(&nm, "edgemon-agent.ini sets '%s' in [%s], which is no key there", key, section);
      }
    }
    /* Words of a comment name keys too ("also p50, p90, p999"). */
    const char *c = strchr(line, ';');
    for (const char *w = c; w != NULL && *w != '\0';) {
      while (*w != '\0' && !is_key_char(*w)) {
        w++;
      }
      size_t wl = 0;
      while (is_key_char(w[wl])) {
        wl++;
      }
      if (wl > 0 && wl < 64) {
        char word[64];
        snprintf(word, sizeof(word), "%.*s", (int)wl, w);
        mark(&nm, section, word);
      }
      w += wl;
    }
  }
  free(text);
  check_all_named(&nm, "firmware/edgemon-agent.ini");
  assert_int_equal(nm.problems, 0);
}

/* Collects load errors for the message. */
static void on_error(void *ctx, const char *file, int line, const char *msg) {
  (void)ctx;
  print_error("%s:%d: %s\n", file, line, msg);
}

/*
 * A file that sets every key with a documented default to that default loads to the config
 * em_config_defaults() gives: the rows' defaults are the agent's.
 */
static void documented_defaults_are_the_defaults(void **state) {
  (void)state;
  size_t n = 0;
  const em_schema_key_t *rows = em_config_schema(&n);
  char path[] = "/tmp/edgemon-config-keys-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *f = fdopen(fd, "w");
  assert_non_null(f);
  const char *last = "";
  size_t n_defaults = 0;
  for (size_t i = 0; i < n; i++) {
    if (rows[i].def == NULL || strcmp(rows[i].name, "tls_insecure") == 0) {
      continue; /* tls_insecure goes only with an mqtts:// broker; its default is false. */
    }
    assert_null(strchr(rows[i].section, '<')); /* Budget keys have no default. */
    if (strcmp(rows[i].section, last) != 0) {
      fprintf(f, "[%s]\n", rows[i].section);
      last = rows[i].section;
    }
    fprintf(f, "%s = %s\n", rows[i].name, rows[i].def);
    n_defaults++;
  }
  fprintf(f, "[target]\npid = 1\n");
  fclose(f);
  assert_true(n_defaults >= 25);

  static em_config_t loaded;
  static em_config_t defaults;
  int n_errors = -1;
  int rc = em_config_load(path, &loaded, on_error, NULL, &n_errors);
  unlink(path);
  assert_int_equal(rc, 0);
  em_config_defaults(&defaults);
  /* What the file sets beyond the defaults: the target, and that these keys were given. */
  defaults.target = loaded.target;
  defaults.sample_period_set = true;
  defaults.events_set = true;
  defaults.span_socket[0] = '\0';
  loaded.span_socket[0] = '\0';
  assert_true(loaded.sample_period_set && loaded.events_set);
  char buf[80];
  const char *differs = em_config_reload_conflict(&defaults, &loaded, buf, sizeof(buf));
  if (differs != NULL) {
    print_error("%s differs from its documented default\n", differs);
  }
  assert_null(differs);
  /* Every row, reloadable or not: the same value in both. */
  static em_schema_key_t all[MAX_KEYS];
  assert_true(n <= MAX_KEYS);
  for (size_t i = 0; i < n; i++) {
    all[i] = rows[i];
    all[i].flags &= ~EM_SCHEMA_RELOAD;
  }
  const em_schema_key_t *k = em_schema_first_change(all, n, &defaults, &loaded);
  if (k != NULL) {
    print_error("[%s] %s differs from its documented default\n", k->section, k->name);
  }
  assert_null(k);
  assert_int_equal(defaults.ring_slots, 1024);
  assert_int_equal(defaults.span_socket_mode, 0660);
  assert_int_equal(defaults.broker_port, 1883);
  assert_int_equal(defaults.n_events, 10);
}

/* One key changed in a config: the field (its offset and size in em_config_t), the new value
 * (text for a string field, num for an unsigned one), and the name the reload check gives. */
typedef struct {
  size_t off;
  size_t size;
  const char *text;
  uint64_t num;
  const char *key;
} key_change_t;

#define CONFIG_FIELD(f) offsetof(em_config_t, f), sizeof(((em_config_t *)0)->f)

/* Writes row's value into its field of c. */
static void apply_change(em_config_t *c, const key_change_t *row) {
  unsigned char *p = (unsigned char *)c + row->off;
  if (row->text != NULL) {
    snprintf((char *)p, row->size, "%s", row->text);
    return;
  }
  uint16_t u16 = (uint16_t)row->num;
  uint32_t u32 = (uint32_t)row->num;
  switch (row->size) {
  case sizeof(u16):
    memcpy(p, &u16, sizeof(u16));
    break;
  case sizeof(u32):
    memcpy(p, &u32, sizeof(u32));
    break;
  case sizeof(row->num):
    memcpy(p, &row->num, sizeof(row->num));
    break;
  default:
    fail_msg("%s: a field of %zu bytes", row->key, row->size);
  }
}

/* The reload check: keys a reload applies pass; the first other one that changed is named. */
static void reload_conflict_follows_the_reloadable_flag(void **state) {
  (void)state;
  static em_config_t cur;
  static em_config_t next;
  em_config_defaults(&cur);
  next = cur;
  char buf[80];
  assert_null(em_config_reload_conflict(&cur, &next, buf, sizeof(buf)));
  /* Applied by a reload: budgets, degrade windows, stage_idle, ring_slots, target, log_level. */
  next.enter_windows = 9;
  next.leave_windows = 9;
  next.window_ns *= 2;
  next.stage_idle_ns *= 2;
  next.ring_slots = 4096;
  next.log_level = EM_LOG_DEBUG;
  next.target.kind = EM_TARGET_PID;
  next.target.pid = 42;
  next.n_rules = 1;
  assert_null(em_config_reload_conflict(&cur, &next, buf, sizeof(buf)));
  /* The keys the agent's hand-written list named, and the others a reload cannot apply, each
   * changed on top of the ones before. */
  static const key_change_t changes[] = {
      {CONFIG_FIELD(hook), "/bin/true", 0, "[degrade] hook"},
      {CONFIG_FIELD(rings), NULL, 1, "[spans] rings"},
      {CONFIG_FIELD(max_stages), NULL, 1, "[spans] max_stages"},
      {CONFIG_FIELD(span_socket), "/x.sock", 0, "[spans] socket"},
      {CONFIG_FIELD(n_events), NULL, 1, "[pmu] events"},
      {CONFIG_FIELD(keepalive_s), NULL, 5, "[mqtt] keepalive"},
      {CONFIG_FIELD(client_id), "other", 0, "[mqtt] client_id"},
      {CONFIG_FIELD(broker_port), NULL, 1884, "[mqtt] broker"},
      {CONFIG_FIELD(runtime_dir), "/elsewhere", 0, "[agent] runtime_dir"},
      {CONFIG_FIELD(sample_period_ns), NULL, 1, "[agent] sample_period"},
      {CONFIG_FIELD(device_id), "other", 0, "[agent] device_id"},
  };
  for (size_t i = 0; i < sizeof(changes) / sizeof(changes[0]); i++) {
    apply_change(&next, &changes[i]);
    assert_string_equal(em_config_reload_conflict(&cur, &next, buf, sizeof(buf)), changes[i].key);
  }
}

/* Every row a reload applies names the steps a change of it makes due; no other row does. */
static void every_reloadable_row_names_its_apply_steps(void **state) {
  (void)state;
  size_t n = 0;
  const em_schema_key_t *rows = em_config_schema(&n);
  int problems = 0;
  for (size_t i = 0; i < n; i++) {
    bool reload = (rows[i].flags & EM_SCHEMA_RELOAD) != 0;
    if (reload != (rows[i].apply != 0)) {
      print_error("[%s] %s: %s\n", rows[i].section, rows[i].name,
                  reload ? "reloadable but names no apply step" : "apply steps but not reloadable");
      problems++;
    }
    if (reload && rows[i].offset == EM_SCHEMA_NO_FIELD && rows[i].same == NULL) {
      print_error("[%s] %s: reloadable without a field or comparison: a reload cannot see it\n",
                  rows[i].section, rows[i].name);
      problems++;
    }
  }
  assert_int_equal(problems, 0);
}

/*
 * em_config_adopt() copies what a reload applies, by the rows, and says which steps are due:
 * nothing when nothing changed; each group for its keys; never a key a reload cannot apply.
 */
static void adopt_copies_reloadable_keys_and_returns_their_steps(void **state) {
  (void)state;
  static em_config_t run;
  static em_config_t next;
  em_config_defaults(&run);
  next = run;
  assert_int_equal(em_config_adopt(&run, &next), 0u);

  next.flight_min_gap_ns = 7 * 1000000000ull;
  assert_int_equal(em_config_adopt(&run, &next), EM_CONFIG_APPLY_FLIGHT_GAP);
  assert_int_equal(run.flight_min_gap_ns, next.flight_min_gap_ns);
  assert_int_equal(em_config_adopt(&run, &next), 0u); /* Applied once. */

  next.profile_min_gap_ns = 0;
  next.ring_slots = 4096;
  next.log_level = EM_LOG_DEBUG;
  assert_int_equal(em_config_adopt(&run, &next),
                   EM_CONFIG_APPLY_PROFILE_GAP | EM_CONFIG_APPLY_DEADLINES | EM_CONFIG_APPLY_LOG);
  assert_int_equal(run.profile_min_gap_ns, 0);
  assert_int_equal(run.ring_slots, 4096);
  assert_int_equal(run.log_level, EM_LOG_DEBUG);

  next.enter_windows = 9;
  next.leave_windows = 8;
  next.window_ns *= 2;
  next.stage_idle_ns *= 3;
  assert_int_equal(em_config_adopt(&run, &next), EM_CONFIG_APPLY_BUDGETS | EM_CONFIG_APPLY_STAGES);
  assert_int_equal(run.enter_windows, 9);
  assert_int_equal(run.leave_windows, 8);
  assert_int_equal(run.window_ns, next.window_ns);
  assert_int_equal(run.stage_idle_ns, next.stage_idle_ns);

  /* The rules and the target: several fields each, copied whole. */
  next.n_rules = 1;
  snprintf(next.rules[0].id, sizeof(next.rules[0].id), "infer.p99");
  next.rule_line[0] = 12;
  next.target.kind = EM_TARGET_COMM;
  snprintf(next.target.value, sizeof(next.target.value), "python3");
  assert_int_equal(em_config_adopt(&run, &next), EM_CONFIG_APPLY_BUDGETS | EM_CONFIG_APPLY_STAGES |
                                                     EM_CONFIG_APPLY_DEADLINES |
                                                     EM_CONFIG_APPLY_TARGET);
  assert_int_equal(run.n_rules, 1);
  assert_string_equal(run.rules[0].id, "infer.p99");
  assert_int_equal(run.rule_line[0], 12);
  assert_int_equal(run.target.kind, EM_TARGET_COMM);
  assert_string_equal(run.target.value, "python3");

  /* Keys a reload cannot apply stay as they run, and make no step due. */
  next.rings = 1;
  next.keepalive_s = 5;
  snprintf(next.hook, sizeof(next.hook), "/bin/true");
  assert_int_equal(em_config_adopt(&run, &next), 0u);
  assert_int_not_equal(run.rings, 1);
  assert_int_equal(run.keepalive_s, 30);
  assert_string_equal(run.hook, "");
  assert_memory_not_equal(&run, &next, sizeof(run));
}

/* ---- every budget section full: the rules counted from the schema ---------------------- */

/* Errors of a load, kept in order. */
typedef struct {
  int n;
  char lines[4][160];
} errors_t;

static void keep_error(void *ctx, const char *file, int line, const char *msg) {
  errors_t *e = ctx;
  (void)file;
  if (e->n < 4) {
    snprintf(e->lines[e->n], sizeof(e->lines[0]), "%d: %s", line, msg);
  }
  e->n++;
}

/* True when `row` is a rule of its section: the section has a "<name>_level" key. */
static bool is_rule(const em_schema_key_t *rows, size_t n, const em_schema_key_t *row) {
  char level[64];
  snprintf(level, sizeof(level), "%s_level", row->name);
  return em_schema_find(rows, n, row->section, level) != NULL;
}

/*
 * Writes every key of `section` (a schema section name) with its example value under the
 * header [header]; each rule's line number goes to rule_lines. *line is the file's last line.
 * Returns the header's line.
 */
static int write_section(FILE *f, const char *section, const char *header, int *line,
                         int *rule_lines, size_t *n_rules) {
  size_t n = 0;
  const em_schema_key_t *rows = em_config_schema(&n);
  fprintf(f, "[%s]\n", header);
  int header_line = ++(*line);
  for (size_t i = 0; i < n; i++) {
    if (strcmp(rows[i].section, section) != 0) {
      continue;
    }
    assert_non_null(rows[i].example);
    fprintf(f, "%s = %s\n", rows[i].name, rows[i].example);
    (*line)++;
    if (is_rule(rows, n, &rows[i])) {
      rule_lines[(*n_rules)++] = *line;
    }
  }
  return header_line;
}

/*
 * A file of n_stages [budget.<stage>] sections and [budget.process], each setting every key of
 * its section (so every rule it has): returns its path in path (32 bytes), the line of every
 * rule in rule_lines and their count in *n_rules. Returns the last stage header's line.
 */
static int write_every_rule(char path[32], size_t n_stages, int *rule_lines, size_t *n_rules) {
  snprintf(path, 32, "/tmp/edgemon-rules-XXXXXX");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *f = fdopen(fd, "w");
  assert_non_null(f);
  fprintf(f, "[target]\npid = 1\n");
  int line = 2;
  int last_stage = 0;
  *n_rules = 0;
  for (size_t s = 0; s < n_stages; s++) {
    char header[32];
    snprintf(header, sizeof(header), "budget.s%zu", s);
    last_stage = write_section(f, "budget.<stage>", header, &line, rule_lines, n_rules);
  }
  write_section(f, "budget.process", "budget.process", &line, rule_lines, n_rules);
  assert_int_equal(fclose(f), 0);
  return last_stage;
}

/* The rules a section of the schema has: its keys with a "<name>_level" key beside them. */
static size_t rules_of(const char *section) {
  size_t n = 0;
  const em_schema_key_t *rows = em_config_schema(&n);
  size_t rules = 0;
  for (size_t i = 0; i < n; i++) {
    rules += strcmp(rows[i].section, section) == 0 && is_rule(rows, n, &rows[i]);
  }
  return rules;
}

/*
 * The most budget sections a file may have (EM_CONFIG_MAX_RULES stages and the process), each
 * with every rule of its section: more rules than EM_CONFIG_MAX_RULES, so the file is refused
 * with one message on the first rule past the limit, and nothing else (the loader collects
 * every rule before counting them: none may be lost or written past its buffer). One stage
 * section more is refused on its header.
 */
static void every_rule_of_every_budget_section_is_refused_cleanly(void **state) {
  (void)state;
  size_t stage_rules = rules_of("budget.<stage>");
  size_t process_rules = rules_of("budget.process");
  assert_true(stage_rules >= 9 && process_rules >= 9);
  size_t all = EM_CONFIG_MAX_RULES * stage_rules + process_rules;
  int *rule_lines = calloc(all + stage_rules, sizeof(*rule_lines));
  assert_non_null(rule_lines);
  static em_config_t cfg;
  char path[32];
  char want[160];
  for (size_t extra = 0; extra <= 1; extra++) {
    size_t n_rules = 0;
    int last_stage = write_every_rule(path, EM_CONFIG_MAX_RULES + extra, rule_lines, &n_rules);
    assert_int_equal(n_rules, all + extra * stage_rules);
    errors_t e = {0};
    int n_errors = -1;
    int rc = em_config_load(path, &cfg, keep_error, &e, &n_errors);
    unlink(path);
    for (int i = 0; i < e.n && i < 4; i++) {
      print_message("%s\n", e.lines[i]);
    }
    assert_int_equal(rc, -EINVAL);
    assert_int_equal(n_errors, e.n);
    assert_int_equal(e.n, 1 + (int)extra);
    if (extra) {
      /* The header of the stage section past the limit: its keys are skipped quietly. */
      snprintf(want, sizeof(want), "%d: more than %d [budget.<stage>] sections", last_stage,
               EM_CONFIG_MAX_RULES);
      assert_string_equal(e.lines[0], want);
    }
    snprintf(want, sizeof(want), "%d: more than %d budget rules in the file",
             rule_lines[EM_CONFIG_MAX_RULES], EM_CONFIG_MAX_RULES);
    assert_string_equal(e.lines[extra], want);
  }
  free(rule_lines);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(docs_name_every_key_and_no_other),
      cmocka_unit_test(example_names_every_key_and_no_other),
      cmocka_unit_test(documented_defaults_are_the_defaults),
      cmocka_unit_test(reload_conflict_follows_the_reloadable_flag),
      cmocka_unit_test(every_reloadable_row_names_its_apply_steps),
      cmocka_unit_test(adopt_copies_reloadable_keys_and_returns_their_steps),
      cmocka_unit_test(every_rule_of_every_budget_section_is_refused_cleanly),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
