/*
 * test_common.c - the shared parsers of common/ (the headers of edgemon/common/): every typed value
 * parser with accepted and refused inputs and their boundaries, the bounded string copy and
 * quoting, the small-file reader's truncation, the credentials file with real files, modes
 * and owners, and the INI line reader's events and problems. Table-driven.
 */
#define _XOPEN_SOURCE 700 /* POSIX 2008 plus XSI, for nftw() in tmp_tree.h */

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "edgemon/common/credentials.h"
#include "edgemon/common/file.h"
#include "edgemon/common/ini.h"
#include "edgemon/common/parse.h"
#include "edgemon/common/rng.h"
#include "edgemon/common/str.h"
#include "broker_urls.h"
#include "tmp_tree.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- durations and sizes ------------------------------------------------------------------ */

/* A text, what a bare number counts in, and the status and value the parser must give. */
typedef struct {
  const char *text;
  uint64_t bare;
  em_parse_status_t st;
  uint64_t value;
} status_row_t;

/* Runs parse over rows: each gives its status, and its value when OK; a refusal leaves the
 * output as it was (`untouched`). */
static void expect_status_rows(em_parse_status_t (*parse)(const char *, uint64_t, uint64_t *),
                               const status_row_t *rows, size_t n, uint64_t untouched) {
  for (size_t i = 0; i < n; i++) {
    uint64_t v = untouched;
    em_parse_status_t st = parse(rows[i].text, rows[i].bare, &v);
    if (st != rows[i].st) {
      fail_msg("'%s': status %d, expected %d", rows[i].text, (int)st, (int)rows[i].st);
    }
    assert_int_equal(v, st == EM_PARSE_OK ? rows[i].value : untouched);
  }
}

static void duration_accepts_every_unit_and_refuses_the_rest(void **state) {
  (void)state;
  static const status_row_t rows[] = {
      {"250us", 0, EM_PARSE_OK, 250000ull},
      {"100ms", 0, EM_PARSE_OK, 100000000ull},
      {"1s", 0, EM_PARSE_OK, EM_NS_PER_S},
      {"5m", 0, EM_PARSE_OK, 5 * EM_NS_PER_MIN},
      {"12h", 0, EM_PARSE_OK, 12 * EM_NS_PER_H},
      {"7d", 0, EM_PARSE_OK, 7 * EM_NS_PER_DAY},
      {"1500000ns", 0, EM_PARSE_OK, 1500000ull},
      {"0ns", 0, EM_PARSE_OK, 0},
      {"007ms", 0, EM_PARSE_OK, 7000000ull},
      {"18446744073709551615ns", 0, EM_PARSE_OK, UINT64_MAX},
      {"18446744073709551616ns", 0, EM_PARSE_OVERFLOW, 0},
      {"18446744073709551s", 0, EM_PARSE_OVERFLOW, 0},
      {"213503d", 0, EM_PARSE_OK, 213503ull * EM_NS_PER_DAY},
      {"213504d", 0, EM_PARSE_OVERFLOW, 0},
      {"10", 0, EM_PARSE_NO_UNIT, 0},
      {"10", EM_NS_PER_S, EM_PARSE_OK, 10 * EM_NS_PER_S}, /* The aggregator's bare seconds. */
      {"0", EM_NS_PER_S, EM_PARSE_OK, 0},
      {"30s", EM_NS_PER_S, EM_PARSE_OK, 30 * EM_NS_PER_S},
      {"18446744073709551615", EM_NS_PER_S, EM_PARSE_OVERFLOW, 0},
      {"10xs", 0, EM_PARSE_BAD_UNIT, 0},
      {"10MS", 0, EM_PARSE_BAD_UNIT, 0},
      {"10 ms", 0, EM_PARSE_BAD_UNIT, 0},
      {"5ms ", 0, EM_PARSE_BAD_UNIT, 0},
      {"5msx", 0, EM_PARSE_BAD_UNIT, 0},
      {"1w", 0, EM_PARSE_BAD_UNIT, 0},
      {"-5ms", 0, EM_PARSE_NEGATIVE, 0},
      {"+5ms", 0, EM_PARSE_NOT_NUMBER, 0},
      {"1.5s", 0, EM_PARSE_NOT_NUMBER, 0},
      {".5s", 0, EM_PARSE_NOT_NUMBER, 0},
      {"ms", 0, EM_PARSE_NOT_NUMBER, 0},
      {"", 0, EM_PARSE_NOT_NUMBER, 0},
      {" 5ms", 0, EM_PARSE_NOT_NUMBER, 0},
  };
  expect_status_rows(em_parse_duration_status, rows, ARRAY_LEN(rows), 12345);
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) { /* The int form agrees. */
    uint64_t ns = 12345;
    assert_int_equal(em_parse_duration(rows[i].text, rows[i].bare, &ns),
                     rows[i].st == EM_PARSE_OK ? 0 : -EINVAL);
  }
  uint64_t ns = 0;
  assert_int_equal(em_parse_duration(NULL, 0, &ns), -EINVAL);
  assert_int_equal(em_parse_duration("1s", 0, NULL), -EINVAL);
}

static void size_accepts_binary_units(void **state) {
  (void)state;
  static const status_row_t rows[] = {
      {"512B", 0, EM_PARSE_OK, 512},
      {"64KiB", 0, EM_PARSE_OK, 64ull << 10},
      {"16MiB", 0, EM_PARSE_OK, 16ull << 20},
      {"1GiB", 0, EM_PARSE_OK, 1ull << 30},
      {"1048576", 1, EM_PARSE_OK, 1048576},
      {"1048576", 0, EM_PARSE_NO_UNIT, 0},
      {"2GB", 0, EM_PARSE_BAD_UNIT, 0},
      {"2kib", 0, EM_PARSE_BAD_UNIT, 0},
      {"1.5MiB", 0, EM_PARSE_NOT_NUMBER, 0},
      {"-1B", 0, EM_PARSE_NEGATIVE, 0},
      {"17179869184GiB", 0, EM_PARSE_OVERFLOW, 0},
      {"", 0, EM_PARSE_NOT_NUMBER, 0},
  };
  expect_status_rows(em_parse_size_status, rows, ARRAY_LEN(rows), 7);
}

/* ---- bool, integers, enums ---------------------------------------------------------------- */

static void bool_integer_and_enum_tables(void **state) {
  (void)state;
  static const struct {
    const char *text;
    int rc;
    bool v;
  } bools[] = {
      {"true", 0, true},     {"YES", 0, true},          {"On", 0, true},
      {"1", 0, true},        {"false", 0, false},       {"no", 0, false},
      {"OFF", 0, false},     {"0", 0, false},           {"", -EINVAL, false},
      {"2", -EINVAL, false}, {"truex", -EINVAL, false}, {" true", -EINVAL, false},
  };
  for (size_t i = 0; i < ARRAY_LEN(bools); i++) {
    bool v = !bools[i].v;
    int rc = em_parse_bool(bools[i].text, &v);
    if (rc != bools[i].rc) {
      fail_msg("bool '%s': rc %d", bools[i].text, rc);
    }
    if (rc == 0) {
      assert_int_equal(v, bools[i].v);
    }
  }

  static const struct {
    const char *text;
    uint64_t min, max;
    int rc;
    uint64_t v;
  } ints[] = {
      {"1", 1, 60000, 0, 1},
      {"60000", 1, 60000, 0, 60000},
      {"0", 1, 60000, -ERANGE, 0},
      {"60001", 1, 60000, -ERANGE, 0},
      {"18446744073709551615", 0, UINT64_MAX, 0, UINT64_MAX},
      {"18446744073709551616", 0, UINT64_MAX, -EINVAL, 0},
      {"-1", 0, 10, -EINVAL, 0},
      {"+1", 0, 10, -EINVAL, 0},
      {"1 ", 0, 10, -EINVAL, 0},
      {"0x10", 0, 100, -EINVAL, 0},
      {"", 0, 10, -EINVAL, 0},
  };
  for (size_t i = 0; i < ARRAY_LEN(ints); i++) {
    uint64_t v = 99;
    int rc = em_parse_u64(ints[i].text, ints[i].min, ints[i].max, &v);
    if (rc != ints[i].rc) {
      fail_msg("u64 '%s': rc %d, expected %d", ints[i].text, rc, ints[i].rc);
    }
    assert_int_equal(v, rc == 0 ? ints[i].v : 99);
  }

  static const em_parse_enum_t levels[] = {{"WARN", 1}, {"DEGRADED", 2}, {"CRITICAL", 3}};
  int v = 0;
  assert_int_equal(em_parse_enum("DEGRADED", levels, ARRAY_LEN(levels), false, &v), 0);
  assert_int_equal(v, 2);
  assert_int_equal(em_parse_enum("critical", levels, ARRAY_LEN(levels), false, &v), -EINVAL);
  assert_int_equal(v, 2);
  assert_int_equal(em_parse_enum("critical", levels, ARRAY_LEN(levels), true, &v), 0);
  assert_int_equal(v, 3);
  assert_int_equal(em_parse_enum("NOMINAL", levels, ARRAY_LEN(levels), true, &v), -EINVAL);
  assert_int_equal(em_parse_enum("", levels, ARRAY_LEN(levels), true, &v), -EINVAL);
  assert_int_equal(em_parse_enum(NULL, levels, ARRAY_LEN(levels), true, &v), -EINVAL);
}

/* ---- broker URLs -------------------------------------------------------------------------- */

static void mqtt_url_table(void **state) {
  (void)state;
  const em_test_broker_url_t *rows = em_test_broker_urls;
  for (size_t i = 0; i < ARRAY_LEN(em_test_broker_urls); i++) {
    em_mqtt_url_t u;
    memset(&u, 0x5a, sizeof(u));
    const char *why = NULL;
    int rc = em_parse_mqtt_url(rows[i].url, &u, &why);
    if (rc != rows[i].rc) {
      fail_msg("'%s': rc %d, expected %d (%s)", rows[i].url, rc, rows[i].rc, why ? why : "");
    }
    if (rc == 0) {
      assert_string_equal(u.host, rows[i].host);
      assert_int_equal(u.port, rows[i].port);
      assert_int_equal(u.tls, rows[i].tls);
    } else {
      assert_non_null(why);
      if (strncmp(why, rows[i].why, strlen(rows[i].why)) != 0) {
        fail_msg("'%s': reason '%s', expected '%s...'", rows[i].url, why, rows[i].why);
      }
      assert_int_equal(u.port, 0x5a5a); /* Untouched. */
    }
  }
  /* Host length: 255 bytes fit, 256 do not. */
  char url[300];
  memcpy(url, "mqtt://", 7);
  memset(url + 7, 'h', 255);
  url[7 + 255] = '\0';
  em_mqtt_url_t u;
  assert_int_equal(em_parse_mqtt_url(url, &u, NULL), 0);
  assert_int_equal(strlen(u.host), 255);
  url[7 + 255] = 'h';
  url[7 + 256] = '\0';
  const char *why = NULL;
  assert_int_equal(em_parse_mqtt_url(url, &u, &why), -EINVAL);
  assert_string_equal(why, "has a host name that is too long");
  assert_int_equal(em_parse_mqtt_url(NULL, &u, NULL), -EINVAL);
  assert_int_equal(em_parse_mqtt_url("mqtt://b", NULL, NULL), -EINVAL);
}

/* ---- strings ------------------------------------------------------------------------------ */

static void str_copy_reports_truncation(void **state) {
  (void)state;
  char buf[4];
  assert_true(em_str_copy(buf, sizeof(buf), "abc"));
  assert_string_equal(buf, "abc");
  assert_false(em_str_copy(buf, sizeof(buf), "abcd"));
  assert_string_equal(buf, "abc"); /* Cut, terminated. */
  assert_true(em_str_copy(buf, sizeof(buf), ""));
  assert_string_equal(buf, "");
  assert_false(em_str_copy(buf, 0, "a"));
  assert_false(em_str_copy(buf, sizeof(buf), NULL));
  assert_string_equal(buf, "");
  assert_false(em_str_copy(NULL, 4, "a"));

  char q[16];
  assert_string_equal(em_str_quote(q, sizeof(q), "a\tb\x7f\xc3", 48), "a?b??");
  assert_string_equal(em_str_quote(q, sizeof(q), "0123456789abcdefXYZ", 48), "0123456789ab...");
  assert_string_equal(em_str_quote(q, sizeof(q), "0123456789", 4), "0123...");
  assert_string_equal(em_str_quote(q, sizeof(q), "0123", 4), "0123");
}

/* ---- files -------------------------------------------------------------------------------- */

/* A fresh private directory under /tmp (path in dir, EM_TMP_TREE_ROOT_BYTES). */
static void make_dir(char *dir) {
  em_tmp_tree_make(dir, "em-test-common");
}

/* Writes len bytes of text to dir/name with `mode`; path in out. */
static void write_file(char *out, size_t cap, const char *dir, const char *name, const char *text,
                       size_t len, mode_t mode) {
  snprintf(out, cap, "%s/%s", dir, name);
  unlink(out);
  FILE *f = fopen(out, "w");
  assert_non_null(f);
  assert_int_equal(fwrite(text, 1, len, f), len);
  assert_int_equal(fclose(f), 0);
  assert_int_equal(chmod(out, mode), 0);
}

/* Removes dir and everything in it; fails the test when it is still there. */
static void remove_dir(const char *dir) {
  em_tmp_tree_remove(dir);
  assert_int_equal(access(dir, F_OK), -1);
}

static void read_small_reports_truncation(void **state) {
  (void)state;
  char dir[EM_TMP_TREE_ROOT_BYTES];
  char path[128];
  make_dir(dir);
  static const struct {
    size_t file_bytes;
    size_t cap;
    ssize_t got;
    bool truncated;
  } rows[] = {
      {0, 8, 0, false}, {7, 8, 7, false}, {8, 8, 7, true},           {9, 8, 7, true},
      {1, 1, 0, true},  {0, 1, 0, false}, {4096, 4097, 4096, false}, {4097, 4097, 4096, true},
  };
  char text[5000];
  for (size_t i = 0; i < sizeof(text); i++) {
    text[i] = (char)('a' + i % 26);
  }
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    write_file(path, sizeof(path), dir, "f", text, rows[i].file_bytes, 0600);
    char buf[5000];
    memset(buf, 'Z', sizeof(buf));
    bool truncated = !rows[i].truncated;
    ssize_t n = em_file_read_small(path, buf, rows[i].cap, &truncated);
    if (n != rows[i].got || truncated != rows[i].truncated) {
      fail_msg("row %zu: got %zd truncated %d", i, n, truncated);
    }
    assert_int_equal(buf[n], '\0');
    assert_memory_equal(buf, text, (size_t)n);
    assert_int_equal(buf[rows[i].cap], 'Z'); /* Nothing past cap. */
  }
  /* Binary content: the count says how many bytes are the file's. */
  write_file(path, sizeof(path), dir, "bin", "a\0b\0", 4, 0600);
  char buf[16];
  assert_int_equal(em_file_read_small(path, buf, sizeof(buf), NULL), 4);
  assert_memory_equal(buf, "a\0b\0", 5);
  /* Not there, a directory, a FIFO (O_NONBLOCK: never blocks), bad arguments. */
  snprintf(path, sizeof(path), "%s/missing", dir);
  assert_int_equal(em_file_read_small(path, buf, sizeof(buf), NULL), -ENOENT);
  assert_int_equal(em_file_read_small(dir, buf, sizeof(buf), NULL), -EINVAL);
  snprintf(path, sizeof(path), "%s/fifo", dir);
  assert_int_equal(mkfifo(path, 0600), 0);
  assert_int_equal(em_file_read_small(path, buf, sizeof(buf), NULL), -EINVAL);
  assert_int_equal(em_file_read_small(path, buf, 0, NULL), -EINVAL);
  assert_int_equal(em_file_read_small(NULL, buf, sizeof(buf), NULL), -EINVAL);
  remove_dir(dir);
}

/* A file put in place whole: whatever stood at <path>.tmp goes, the old file stays until the
 * rename, a failure leaves no temporary behind. */
static void file_begin_and_finish_replace_whole(void **state) {
  (void)state;
  char dir[EM_TMP_TREE_ROOT_BYTES];
  char path[128];
  char tmp[160];
  char buf[16];
  static char big[4200];
  make_dir(dir);
  write_file(path, sizeof(path), dir, "page", "old", 3, 0600);
  char planted[160];
  snprintf(planted, sizeof(planted), "%s.tmp", path);
  assert_int_equal(mkfifo(planted, 0600), 0); /* Opened without O_NONBLOCK, it would block. */
  mode_t was = umask(077);
  int fd = em_file_begin(path, 4096, tmp, sizeof(tmp));
  umask(was);
  assert_true(fd >= 0);
  assert_string_equal(tmp, planted);
  struct stat st;
  assert_int_equal(fstat(fd, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  assert_int_equal(st.st_mode & 0777, 0644); /* Whatever the umask: readers of other users. */
  assert_int_equal(st.st_size, 4096);
  assert_int_equal(em_file_read_small(path, buf, sizeof(buf), NULL), 3); /* Old one in place. */
  assert_int_equal(pwrite(fd, "new", 3, 0), 3);
  close(fd);
  assert_int_equal(em_file_finish(tmp, path, 0), 0);
  assert_int_equal(em_file_read_small(path, big, sizeof(big), NULL), 4096);
  assert_memory_equal(big, "new", 3);
  assert_int_equal(access(tmp, F_OK), -1);
  /* A failed write: the temporary goes, the file stays as it was, the error comes back. */
  fd = em_file_begin(path, 0, tmp, sizeof(tmp));
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(em_file_finish(tmp, path, -EIO), -EIO);
  assert_int_equal(access(tmp, F_OK), -1);
  assert_int_equal(em_file_read_small(path, big, sizeof(big), NULL), 4096);
  /* A path with no room for ".tmp", a missing directory, bad arguments. */
  assert_int_equal(em_file_begin(path, 0, tmp, strlen(path) + 4), -ENAMETOOLONG);
  snprintf(path, sizeof(path), "%s/missing/page", dir);
  assert_int_equal(em_file_begin(path, 0, tmp, sizeof(tmp)), -ENOENT);
  assert_int_equal(em_file_begin(NULL, 0, tmp, sizeof(tmp)), -EINVAL);
  remove_dir(dir);
}

/* ---- credentials -------------------------------------------------------------------------- */

typedef struct {
  char text[2048];
  int n;
} msgs_t;

static void collect_cred(void *ctx, int line, const char *msg) {
  msgs_t *m = ctx;
  size_t used = strlen(m->text);
  snprintf(m->text + used, sizeof(m->text) - used, "%d: %s\n", line, msg);
  m->n++;
}

static void credentials_text_table(void **state) {
  (void)state;
  static const struct {
    const char *text;
    int rc;
    const char *user;
    const char *pass;
    const char *msgs; /* Every message, "LINE: msg\n" each. */
  } rows[] = {
      {"username = jetson\npassword = s3cr=t\n", 0, "jetson", "s3cr=t", ""},
      {"# c\n; c\n\n  username=a  \r\n", 0, "a", "", ""},
      {"username = a b\npassword =  x y \n", 0, "a b", "x y", ""},
      {"username = a", 0, "a", "", ""},
      {"password = x\n", -EINVAL, "", "", "0: names no username; add a line 'username = NAME'\n"},
      {"", -EINVAL, "", "", "0: names no username; add a line 'username = NAME'\n"},
      {"username jetson\n", -EINVAL, "", "",
       "1: line 1: expected 'username = NAME' or 'password = SECRET'\n"},
      {"# c\nusername = a\nuser = b\n", -EINVAL, "", "",
       "3: line 3: unknown key 'user'; use username and password\n"},
      {"username = a\npassword = b\npassword = c\n", -EINVAL, "", "",
       "3: line 3: duplicate password (first on line 2)\n"},
      {"username = a\npassword =\n", -EINVAL, "", "", "2: line 2: password is empty\n"},
      {"username = a\nbad\nuser = x\nusername = b\n", -EINVAL, "", "",
       "2: line 2: expected 'username = NAME' or 'password = SECRET'\n"
       "3: line 3: unknown key 'user'; use username and password\n"
       "4: line 4: duplicate username (first on line 1)\n"},
  };
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    msgs_t m = {.n = 0};
    em_credentials_t c;
    memset(&c, 0x41, sizeof(c));
    int rc = em_credentials_parse(rows[i].text, strlen(rows[i].text), &c, collect_cred, &m);
    if (rc != rows[i].rc || strcmp(m.text, rows[i].msgs) != 0) {
      fail_msg("row %zu: rc %d, messages:\n%s", i, rc, m.text);
    }
    assert_string_equal(c.username, rows[i].user);
    assert_string_equal(c.password, rows[i].pass);
  }
  /* Boundaries: 127 bytes fit, 128 do not; a NUL byte; more than 4 KiB. */
  char text[5000];
  char v[200];
  memset(v, 'u', 127);
  v[127] = '\0';
  snprintf(text, sizeof(text), "username = %s\n", v);
  em_credentials_t c;
  assert_int_equal(em_credentials_parse(text, strlen(text), &c, NULL, NULL), 0);
  assert_int_equal(strlen(c.username), 127);
  snprintf(text, sizeof(text), "username = %su\n", v);
  msgs_t m = {.n = 0};
  assert_int_equal(em_credentials_parse(text, strlen(text), &c, collect_cred, &m), -EINVAL);
  assert_string_equal(m.text, "1: line 1: username is longer than 127 characters\n");
  assert_string_equal(c.username, "");
  assert_int_equal(em_credentials_parse("username = a\0b", 14, &c, NULL, NULL), -EINVAL);
  memset(text, '#', 4097);
  memcpy(text, "username = a\n", 13);
  assert_int_equal(em_credentials_parse(text, 4096, &c, NULL, NULL), 0);
  assert_int_equal(em_credentials_parse(text, 4097, &c, NULL, NULL), -EINVAL);
}

static void credentials_file_checks_mode_type_and_owner(void **state) {
  (void)state;
  char dir[EM_TMP_TREE_ROOT_BYTES];
  char path[128];
  make_dir(dir);
  static const char body[] = "username = dev-a\npassword = pw\n";
  static const struct {
    mode_t mode;
    int rc;
  } modes[] = {
      {0600, 0},      {0400, 0},      {0700, 0},      {0640, -EPERM}, {0604, -EPERM},
      {0620, -EPERM}, {0602, -EPERM}, {0610, -EPERM}, {0601, -EPERM}, {0644, -EPERM},
  };
  for (size_t i = 0; i < ARRAY_LEN(modes); i++) {
    write_file(path, sizeof(path), dir, "c.cred", body, strlen(body), modes[i].mode);
    msgs_t m = {.n = 0};
    em_credentials_t c;
    int rc = em_credentials_read(path, "the agent", &c, collect_cred, &m);
    if (rc != modes[i].rc) {
      fail_msg("mode %04o: rc %d (%s)", (unsigned)modes[i].mode, rc, m.text);
    }
    if (rc == 0) {
      assert_string_equal(c.username, "dev-a");
      assert_string_equal(c.password, "pw");
      assert_int_equal(m.n, 0);
    } else {
      char want[160];
      snprintf(want, sizeof(want),
               "0: is readable or writable by group or others (mode %04o); the agent refuses it: "
               "run chmod 600 on it\n",
               (unsigned)modes[i].mode);
      assert_string_equal(m.text, want);
      assert_string_equal(c.username, "");
      assert_null(strstr(m.text, "pw"));
    }
  }
  /* Owned by someone else: only root can make such a file; root's own or root-owned pass. */
  write_file(path, sizeof(path), dir, "c.cred", body, strlen(body), 0600);
  em_credentials_t c;
  msgs_t m = {.n = 0};
  if (geteuid() == 0) {
    assert_int_equal(chown(path, 4242, 4242), 0);
    assert_int_equal(em_credentials_read(path, NULL, &c, collect_cred, &m), -EPERM);
    assert_string_equal(m.text, "0: is owned by uid 4242, not by this program's user (uid 0) or "
                                "root; this program refuses it\n");
    assert_int_equal(chown(path, 0, 0), 0);
  }
  assert_int_equal(em_credentials_read(path, NULL, &c, NULL, NULL), 0);
  /* Not a regular file, missing, larger than 4 KiB, a bad line. */
  memset(&m, 0, sizeof(m));
  assert_int_equal(em_credentials_read(dir, NULL, &c, collect_cred, &m), -EPERM);
  assert_string_equal(m.text, "0: is not a regular file\n");
  snprintf(path, sizeof(path), "%s/fifo", dir);
  assert_int_equal(mkfifo(path, 0600), 0);
  assert_int_equal(em_credentials_read(path, NULL, &c, NULL, NULL), -EPERM);
  snprintf(path, sizeof(path), "%s/missing", dir);
  memset(&m, 0, sizeof(m));
  assert_int_equal(em_credentials_read(path, NULL, &c, collect_cred, &m), -ENOENT);
  assert_string_equal(m.text, "0: cannot be opened: No such file or directory\n");
  char big[4097];
  memset(big, '#', sizeof(big));
  memcpy(big, "username = a\n", 13);
  write_file(path, sizeof(path), dir, "big.cred", big, 4096, 0600);
  assert_int_equal(em_credentials_read(path, NULL, &c, NULL, NULL), 0);
  write_file(path, sizeof(path), dir, "big.cred", big, 4097, 0600);
  memset(&m, 0, sizeof(m));
  assert_int_equal(em_credentials_read(path, NULL, &c, collect_cred, &m), -EFBIG);
  assert_string_equal(m.text, "0: cannot be read: larger than 4 KiB\n");
  write_file(path, sizeof(path), dir, "bad.cred", "user = x\n", 9, 0600);
  assert_int_equal(em_credentials_read(path, NULL, &c, NULL, NULL), -EINVAL);
  assert_int_equal(em_credentials_read(NULL, NULL, &c, NULL, NULL), -EINVAL);
  assert_int_equal(em_credentials_read(path, NULL, NULL, NULL, NULL), -EINVAL);
  remove_dir(dir);
}

/* ---- INI ---------------------------------------------------------------------------------- */

typedef struct {
  char log[4096];
  int stop_at; /* A line whose event stops the read with 7; 0: never. */
} ini_log_t;

__attribute__((format(printf, 2, 3))) static void add(ini_log_t *l, const char *fmt, ...) {
  size_t used = strlen(l->log);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(l->log + used, sizeof(l->log) - used, fmt, ap);
  va_end(ap);
}

static int on_section(void *ctx, int line, const char *name) {
  ini_log_t *l = ctx;
  add(l, "%d S %s\n", line, name ? name : "(bad)");
  return line == l->stop_at ? 7 : 0;
}

static int on_pair(void *ctx, int line, const char *section, const char *name, const char *value) {
  ini_log_t *l = ctx;
  add(l, "%d P [%s] %s=%s\n", line, section ? section : "(bad)", name, value);
  return line == l->stop_at ? 7 : 0;
}

static int on_error(void *ctx, int line, em_ini_problem_t kind, const char *text, const char *msg) {
  ini_log_t *l = ctx;
  (void)text;
  add(l, "%d E%d %s\n", line, (int)kind, msg);
  return line == l->stop_at ? 7 : 0;
}

static void ini_reader_events_and_problems(void **state) {
  (void)state;
  static const struct {
    const char *text;
    size_t max_line;
    int rc;
    const char *log;
  } rows[] = {
      {"", 0, 0, ""},
      {"a = 1\n", 0, 0, "1 P [] a=1\n"},
      {"\xEF\xBB\xBF[agent]\nx=1", 0, 0, "1 S agent\n2 P [agent] x=1\n"},
      {"[ s ] ; c\n  k : v ; c\nk2 = v;not\n", 0, 0, "1 S s\n2 P [s] k=v\n3 P [s] k2=v;not\n"},
      {"; c\n# c\n\n[a]\nk =\n", 0, 0, "4 S a\n5 P [a] k=\n"},
      {"[a]\nk = x = y\nq = a#b\n", 0, 0, "1 S a\n2 P [a] k=x = y\n3 P [a] q=a#b\n"},
      {"[a]\r\nk = v\r\n", 0, 0, "1 S a\n2 P [a] k=v\n"},
      {"[a]\nverbose\n", 0, 0, "1 S a\n2 E2 expected 'key = value', got 'verbose'\n"},
      {"[a]\nk = 1\n  more\n", 0, 0,
       "1 S a\n2 P [a] k=1\n3 E2 expected 'key = value', got 'more'; a value cannot continue on "
       "an indented line\n"},
      {"[a]\n= v\n", 0, 0, "1 S a\n2 E3 missing key name before the '=' or ':'\n"},
      {"[agent\nk = v\n", 0, 0,
       "1 E4 section header '[agent' has no closing ']'\n1 S (bad)\n2 P [(bad)] k=v\n"},
      {"[a] x\nk = v\n", 0, 0, "1 E5 unexpected text after [a]\n1 S (bad)\n2 P [(bad)] k=v\n"},
      {"[a]\n12345678\n123456789\nk=v\n", 8, 0,
       "1 S a\n2 E2 expected 'key = value', got '12345678'\n3 E0 line is longer than 8 "
       "characters\n4 P [a] k=v\n"},
      {"[a]\nk\0=v\nj=w\n", 0, 0, "1 S a\n2 E1 line contains a NUL byte\n3 P [a] j=w\n"},
  };
  for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
    ini_log_t l = {.stop_at = 0};
    em_ini_reader_t r = {.file = "t.ini",
                         .max_line = rows[i].max_line,
                         .on_section = on_section,
                         .on_pair = on_pair,
                         .on_error = on_error};
    size_t len = strlen(rows[i].text);
    if (i == ARRAY_LEN(rows) - 1) {
      len = 13; /* The row with a NUL byte. */
    }
    int rc = em_ini_parse_text(rows[i].text, len, &r, &l);
    if (rc != rows[i].rc || strcmp(l.log, rows[i].log) != 0) {
      fail_msg("row %zu: rc %d, log:\n%s\nwant:\n%s", i, rc, l.log, rows[i].log);
    }
  }
  /* A callback stops the read; its value comes back. */
  ini_log_t l = {.stop_at = 2};
  em_ini_reader_t r = {.on_section = on_section, .on_pair = on_pair, .on_error = on_error};
  assert_int_equal(em_ini_parse_text("[a]\nbad\nk=v\n", 12, &r, &l), 7);
  assert_string_equal(l.log, "1 S a\n2 E2 expected 'key = value', got 'bad'\n");
  /* max_bytes ends the read with -EFBIG. */
  r.max_bytes = 8;
  memset(&l, 0, sizeof(l));
  assert_int_equal(em_ini_parse_text("[a]\nk = v\n", 10, &r, &l), -EFBIG);
  assert_string_equal(l.log, "1 S a\n");
  assert_int_equal(em_ini_parse_text(NULL, 1, &r, &l), -EINVAL);
  assert_int_equal(em_ini_parse_text("", 0, NULL, &l), -EINVAL);
  assert_int_equal(em_ini_parse_file(NULL, &r, &l), -EINVAL);
}

static void ini_reader_reads_files_and_reports_read_errors(void **state) {
  (void)state;
  char dir[EM_TMP_TREE_ROOT_BYTES];
  char path[128];
  make_dir(dir);
  write_file(path, sizeof(path), dir, "a.ini", "[s]\nk = v\n", 10, 0600);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  ini_log_t l = {.stop_at = 0};
  em_ini_reader_t r = {.on_section = on_section, .on_pair = on_pair, .on_error = on_error};
  assert_int_equal(em_ini_parse_file(f, &r, &l), 0);
  fclose(f);
  assert_string_equal(l.log, "1 S s\n2 P [s] k=v\n");
  /* A directory opens but cannot be read: -EISDIR. */
  f = fopen(dir, "r");
  assert_non_null(f);
  assert_int_equal(em_ini_parse_file(f, &r, &l), -EISDIR);
  fclose(f);
  remove_dir(dir);
}

/* ---- rng ---- */

/* splitmix64 from 0 gives the published reference outputs; xoshiro256** seeded with 42 gives
 * the stream an independent implementation computed, and a seed replays its stream. */
static void rng_streams_match_reference_and_replay(void **state) {
  (void)state;
  static const uint64_t splitmix_from_0[] = {
      UINT64_C(0xe220a8397b1dcdaf), UINT64_C(0x6e789e6aa1b965f4), UINT64_C(0x06c45d188009454f)};
  uint64_t x = 0;
  for (size_t i = 0; i < sizeof(splitmix_from_0) / sizeof(splitmix_from_0[0]); i++) {
    assert_int_equal(em_rng_splitmix64(&x), splitmix_from_0[i]);
  }
  static const uint64_t xoshiro_from_42[] = {
      UINT64_C(0x15780b2e0c2ec716), UINT64_C(0x6104d9866d113a7e), UINT64_C(0xae17533239e499a1)};
  em_rng_t a, b, other;
  em_rng_seed(&a, 42);
  em_rng_seed(&b, 42);
  em_rng_seed(&other, 43);
  for (size_t i = 0; i < sizeof(xoshiro_from_42) / sizeof(xoshiro_from_42[0]); i++) {
    assert_int_equal(em_rng_next(&a), xoshiro_from_42[i]);
  }
  bool differs = false;
  for (int i = 0; i < 3; i++) {
    uint64_t v = em_rng_next(&b);
    differs = differs || v != em_rng_next(&other);
  }
  assert_true(differs);
  for (int i = 0; i < 1000; i++) {
    assert_int_equal(em_rng_next(&a), em_rng_next(&b));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(duration_accepts_every_unit_and_refuses_the_rest),
      cmocka_unit_test(size_accepts_binary_units),
      cmocka_unit_test(bool_integer_and_enum_tables),
      cmocka_unit_test(mqtt_url_table),
      cmocka_unit_test(str_copy_reports_truncation),
      cmocka_unit_test(read_small_reports_truncation),
      cmocka_unit_test(file_begin_and_finish_replace_whole),
      cmocka_unit_test(credentials_text_table),
      cmocka_unit_test(credentials_file_checks_mode_type_and_owner),
      cmocka_unit_test(ini_reader_events_and_problems),
      cmocka_unit_test(ini_reader_reads_files_and_reports_read_errors),
      cmocka_unit_test(rng_streams_match_reference_and_replay),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
