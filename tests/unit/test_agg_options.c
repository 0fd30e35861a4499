/*
 * test_agg_options.c - edgemon-aggregator's options (host/aggregator/options.h) against each
 * other and against what people read: every [aggregator] row that is a flag is parsed from the
 * command line into the same config as its key from the file; --help names every flag with
 * its value's word and every key of the file, and no flag that is not an option;
 * docs/CONFIG.md's [aggregator] table names every key with its flag (or "file only") and no
 * other key, and its [remote_write] tables every key of those sections.
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

#include <cmocka.h>

#include "options.h"

#ifndef EM_FIXTURES_DIR
#error "EM_FIXTURES_DIR (absolute path of tests/fixtures) must be defined"
#endif

#define DOCS_FILE EM_FIXTURES_DIR "/../../docs/CONFIG.md"
#define TEXT_MAX  (512 * 1024)
#define MAX_ROWS  64

/* Reads a whole stream into a NUL-terminated heap buffer. */
static char *read_stream(FILE *f) {
  char *buf = malloc(TEXT_MAX);
  assert_non_null(buf);
  size_t n = fread(buf, 1, TEXT_MAX - 1, f);
  assert_true(n < TEXT_MAX - 1);
  buf[n] = '\0';
  return buf;
}

/* The text of --help. */
static char *help_text(void) {
  FILE *f = tmpfile();
  assert_non_null(f);
  em_agg_options_usage(f);
  rewind(f);
  char *text = read_stream(f);
  fclose(f);
  return text;
}

/* Every flag row: a flag without a value is a bool's; every row says what it is. */
static void every_row_is_documented_and_flags_take_their_type(void **state) {
  (void)state;
  size_t n = 0;
  const em_schema_key_t *rows = em_agg_options_schema(EM_AGG_SECTION, &n);
  assert_true(n > 0 && n <= EM_AGG_MAX_FLAGS);
  for (size_t i = 0; i < n; i++) {
    const em_schema_key_t *k = &rows[i];
    char flag[64];
    assert_non_null(k->doc);
    assert_non_null(k->example);
    if (em_schema_flag(k, flag, sizeof(flag)) == NULL) {
      assert_null(k->arg);
      continue;
    }
    assert_int_equal(k->arg == NULL, k->type == EM_SCHEMA_BOOL);
    assert_ptr_equal(em_schema_find_flag(rows, n, flag), k);
  }
}

/* A flag and its key of the file give the same config, from the row's example value; a bad
 * value is refused by both. */
static void each_flag_sets_what_its_key_sets(void **state) {
  (void)state;
  size_t n = 0;
  const em_schema_key_t *rows = em_agg_options_schema(EM_AGG_SECTION, &n);
  static em_agg_config_t by_flag;
  static em_agg_config_t by_key;
  static em_agg_config_t defaults;
  em_agg_options_defaults(&defaults);
  FILE *saved = stderr;
  stderr = tmpfile(); /* The refusals below, and the usage after an unknown flag. */
  assert_non_null(stderr);
  size_t flags = 0;
  for (size_t i = 0; i < n; i++) {
    const em_schema_key_t *k = &rows[i];
    char flag[64];
    if (em_schema_flag(k, flag, sizeof(flag)) == NULL) {
      continue;
    }
    flags++;
    /* A value other than the default where the row's example is the default. */
    const char *value = k->arg == NULL ? "true" : k->example;
    char *argv[] = {"edgemon-aggregator", flag, (char *)value, NULL};
    int argc = k->arg == NULL ? 2 : 3;
    em_agg_args_t args;
    assert_int_equal(em_agg_options_parse_args(argc, argv, "test", &args), EM_AGG_ARGS_RUN);
    em_agg_options_defaults(&by_flag);
    assert_int_equal(em_agg_options_apply_args(&args, &by_flag), 0);

    em_agg_options_defaults(&by_key);
    char msg[EM_SCHEMA_MSG_MAX];
    assert_null(em_agg_options_set(EM_AGG_SECTION, EM_AGG_SECTION, &by_key, k->name, value, msg,
                                   sizeof(msg)));
    if (memcmp(&by_flag, &by_key, sizeof(by_flag)) != 0) {
      fprintf(saved, "%s %s and %s = %s differ\n", flag, value, k->name, value);
      fail();
    }
    if (k->def == NULL || strcmp(k->def, value) != 0) {
      assert_memory_not_equal(&by_flag, &defaults, sizeof(defaults)); /* It did set something. */
    }
    if (k->arg != NULL) { /* A value no row takes: refused by the flag as by the key. */
      static char junk[EM_AGG_TEXT_MAX + 44];
      memset(junk, 'x', sizeof(junk) - 1);
      argv[2] = junk;
      assert_int_equal(em_agg_options_parse_args(argc, argv, "test", &args), EM_AGG_ARGS_RUN);
      assert_int_equal(em_agg_options_apply_args(&args, &by_flag), -EINVAL);
      assert_non_null(em_agg_options_set(EM_AGG_SECTION, EM_AGG_SECTION, &by_key, k->name, junk,
                                         msg, sizeof(msg)));
    }
  }
  assert_true(flags >= 20);
  char *argv[] = {"edgemon-aggregator", "--no-such-flag", NULL};
  em_agg_args_t args;
  assert_int_equal(em_agg_options_parse_args(2, argv, "test", &args), EM_AGG_ARGS_BAD);
  fclose(stderr);
  stderr = saved;
}

/* True when the option word `word` ("--share-group") is an option: a row's flag or one of the
 * options that are no key. */
static bool is_option(const em_schema_key_t *rows, size_t n, const char *word) {
  static const char *const others[] = {"--config", "--check", "--version", "--help"};
  for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
    if (strcmp(word, others[i]) == 0) {
      return true;
    }
  }
  return em_schema_find_flag(rows, n, word) != NULL;
}

/* --help names each flag with its value's word, each key of the file only, each key of the
 * remote write sections, and no "--word" that is no option. */
static void help_names_every_option_and_no_other(void **state) {
  (void)state;
  size_t n = 0;
  const em_schema_key_t *rows = em_agg_options_schema(EM_AGG_SECTION, &n);
  char *help = help_text();
  int problems = 0;
  for (size_t i = 0; i < n; i++) {
    char want[96];
    char flag[64];
    if (em_schema_flag(&rows[i], flag, sizeof(flag)) != NULL) {
      snprintf(want, sizeof(want), "  %s%s%s", flag, rows[i].arg ? " " : "",
               rows[i].arg ? rows[i].arg : "");
    } else {
      snprintf(want, sizeof(want), "  %s = ", rows[i].name);
    }
    if (strstr(help, want) == NULL) {
      print_error("--help lacks '%s'\n", want);
      problems++;
    }
  }
  static const char *const sections[] = {EM_AGG_SECTION_RW, EM_AGG_SECTION_ENDPOINT};
  for (size_t s = 0; s < 2; s++) {
    size_t m = 0;
    const em_schema_key_t *rw = em_agg_options_schema(sections[s], &m);
    assert_true(m > 0);
    for (size_t i = 0; i < m; i++) {
      if (strstr(help, rw[i].name) == NULL) {
        print_error("--help does not name [%s] %s\n", sections[s], rw[i].name);
        problems++;
      }
    }
  }
  for (const char *p = strstr(help, "--"); p != NULL; p = strstr(p + 2, "--")) {
    char word[64];
    size_t len = 2;
    while (len < sizeof(word) - 1 && (islower((unsigned char)p[len]) || p[len] == '-')) {
      len++;
    }
    memcpy(word, p, len);
    word[len] = '\0';
    if (!is_option(rows, n, word)) {
      print_error("--help names %s, which is no option\n", word);
      problems++;
    }
  }
  free(help);
  assert_int_equal(problems, 0);
}

/* The backquoted words of a table row's first cell ("| `a`, `b` | ..."), and its second cell. */
static size_t first_cell_words(const char *line, char words[][48], size_t max, char *second,
                               size_t cap) {
  const char *end = strchr(line + 1, '|');
  size_t n = 0;
  for (const char *p = strchr(line, '`'); p != NULL && p < end && n < max;) {
    const char *q = strchr(p + 1, '`');
    if (q == NULL || q > end) {
      break;
    }
    snprintf(words[n++], 48, "%.*s", (int)(q - p - 1), p + 1);
    p = strchr(q + 1, '`');
  }
  second[0] = '\0';
  if (end != NULL) {
    const char *next = strchr(end + 1, '|');
    if (next != NULL) {
      snprintf(second, cap, "%.*s", (int)(next - end - 1), end + 1);
    }
  }
  return n;
}

/*
 * The docs: under "## edgemon-aggregator: [aggregator]" a table row per key, its second cell
 * the flag with its value's word (or "file only"); under the remote write header, the tables
 * of [remote_write] and [remote_write.NAME] name every key of theirs.
 */
static void docs_list_every_key_with_its_flag(void **state) {
  (void)state;
  FILE *f = fopen(DOCS_FILE, "r");
  assert_non_null(f);
  char *docs = read_stream(f);
  fclose(f);
  static const char *const sections[] = {EM_AGG_SECTION, EM_AGG_SECTION_RW,
                                         EM_AGG_SECTION_ENDPOINT};
  static const char *const table_head[] = {"| `[aggregator]` key |", "| `[remote_write]` key |",
                                           "| `[remote_write.NAME]` key |"};
  int problems = 0;
  for (size_t s = 0; s < 3; s++) {
    size_t n = 0;
    const em_schema_key_t *rows = em_agg_options_schema(sections[s], &n);
    bool named[MAX_ROWS] = {false};
    const char *t = strstr(docs, table_head[s]);
    assert_non_null(t);
    t = strchr(t, '\n') + 1; /* The |---| line, then the rows up to the first non-row line. */
    for (t = strchr(t, '\n') + 1; *t == '|'; t = strchr(t, '\n') + 1) {
      char words[4][48];
      char second[128];
      size_t w = first_cell_words(t, words, 4, second, sizeof(second));
      for (size_t i = 0; i < w; i++) {
        const em_schema_key_t *k = em_schema_find(rows, n, sections[s], words[i]);
        if (k == NULL) {
          print_error("docs: [%s] %s is no key\n", sections[s], words[i]);
          problems++;
          continue;
        }
        named[k - rows] = true;
        if (s > 0) {
          continue;
        }
        char flag[64];
        char want[128];
        if (em_schema_flag(k, flag, sizeof(flag)) != NULL) {
          snprintf(want, sizeof(want), " `%s%s%s` ", flag, k->arg ? " " : "", k->arg ? k->arg : "");
        } else {
          snprintf(want, sizeof(want), " file only ");
        }
        if (strcmp(second, want) != 0) {
          print_error("docs: %s's flag cell is '%s', not '%s'\n", k->name, second, want);
          problems++;
        }
      }
    }
    for (size_t i = 0; i < n; i++) {
      if (!named[i]) {
        print_error("docs: the [%s] table does not name %s\n", sections[s], rows[i].name);
        problems++;
      }
    }
  }
  free(docs);
  assert_int_equal(problems, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_row_is_documented_and_flags_take_their_type),
      cmocka_unit_test(each_flag_sets_what_its_key_sets),
      cmocka_unit_test(help_names_every_option_and_no_other),
      cmocka_unit_test(docs_list_every_key_with_its_flag),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
