/*
 * credentials.c - the MQTT credentials file (edgemon/common/credentials.h): the ownership and
 * mode checks on the open fd (fstat, so the file checked is the file read), one bounded read,
 * then a line parser that reports every problem. Owns the fd for one call; the text is copied
 * into a stack buffer that is wiped before returning. No global state.
 */
#define _POSIX_C_SOURCE 200809L
#include "edgemon/common/credentials.h"

#include "edgemon/common/file.h"
#include "edgemon/common/str.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MSG_CAP   256
#define QUOTE_MAX 40

#if defined(__GNUC__) || defined(__clang__)
#define EM_PRINTF(fmt_arg, first_arg) __attribute__((format(printf, fmt_arg, first_arg)))
#else
#define EM_PRINTF(fmt_arg, first_arg)
#endif

EM_PRINTF(4, 5)
static void report(em_credentials_error_fn on_error, void *ctx, int line, const char *fmt, ...) {
  if (on_error == NULL) {
    return;
  }
  char msg[MSG_CAP];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  on_error(ctx, line, msg);
}

/* Parses the NUL-terminated buf (modified) into user/pass; returns the number of problems. */
static int parse_lines(char *buf, char *user, char *pass, em_credentials_error_fn on_error,
                       void *ctx) {
  int user_line = 0;
  int pass_line = 0;
  int problems = 0;
  int n = 0;
  for (char *p = buf; *p != '\0';) {
    char *nl = strchr(p, '\n');
    char *next = nl != NULL ? nl + 1 : p + strlen(p);
    if (nl != NULL) {
      *nl = '\0';
    }
    n++;
    char *text = em_str_trim(p);
    p = next;
    if (text[0] == '\0' || text[0] == '#' || text[0] == ';') {
      continue;
    }
    char *eq = strchr(text, '=');
    if (eq == NULL) {
      report(on_error, ctx, n, "line %d: expected 'username = NAME' or 'password = SECRET'", n);
      problems++;
      continue;
    }
    *eq = '\0';
    const char *name = em_str_trim(text);
    const char *value = em_str_trim(eq + 1);
    bool is_user = strcmp(name, "username") == 0;
    bool is_pass = strcmp(name, "password") == 0;
    int *seen_at = is_user ? &user_line : &pass_line;
    char q[QUOTE_MAX + 4];
    if (!is_user && !is_pass) {
      report(on_error, ctx, n, "line %d: unknown key '%s'; use username and password", n,
             em_str_quote(q, sizeof(q), name, QUOTE_MAX));
    } else if (*seen_at != 0) {
      report(on_error, ctx, n, "line %d: duplicate %s (first on line %d)", n, name, *seen_at);
    } else if (value[0] == '\0') {
      report(on_error, ctx, n, "line %d: %s is empty", n, name);
    } else if (strlen(value) >= EM_CREDENTIALS_MAX_SECRET) {
      report(on_error, ctx, n, "line %d: %s is longer than %u characters", n, name,
             EM_CREDENTIALS_MAX_SECRET - 1);
    } else {
      *seen_at = n;
      em_str_copy(is_user ? user : pass, EM_CREDENTIALS_MAX_SECRET, value);
      continue;
    }
    problems++;
  }
  if (problems == 0 && user_line == 0) {
    report(on_error, ctx, 0, "names no username; add a line 'username = NAME'");
    problems++;
  }
  return problems;
}

int em_credentials_parse(const char *text, size_t len, em_credentials_t *out,
                         em_credentials_error_fn on_error, void *ctx) {
  if (out == NULL) {
    return -EINVAL;
  }
  memset(out, 0, sizeof(*out));
  if (text == NULL && len > 0) {
    return -EINVAL;
  }
  if (len > EM_CREDENTIALS_MAX_BYTES) {
    report(on_error, ctx, 0, "cannot be read: larger than 4 KiB");
    return -EINVAL;
  }
  if (len > 0 && memchr(text, '\0', len) != NULL) {
    report(on_error, ctx, 0, "contains a NUL byte");
    return -EINVAL;
  }
  char buf[EM_CREDENTIALS_MAX_BYTES + 1];
  if (len > 0) {
    memcpy(buf, text, len);
  }
  buf[len] = '\0';
  em_credentials_t c;
  memset(&c, 0, sizeof(c));
  int problems = parse_lines(buf, c.username, c.password, on_error, ctx);
  if (problems == 0) {
    *out = c;
  }
  memset(buf, 0, sizeof(buf));
  memset(&c, 0, sizeof(c));
  return problems == 0 ? 0 : -EINVAL;
}

int em_credentials_check_fd(int fd, const char *who, em_credentials_error_fn on_error, void *ctx) {
  if (who == NULL) {
    who = "this program";
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    report(on_error, ctx, 0, "cannot be examined: %s", strerror(e));
    return -e;
  }
  if (!S_ISREG(st.st_mode)) {
    report(on_error, ctx, 0, "is not a regular file");
    return -EPERM;
  }
  if ((st.st_mode & 077) != 0) {
    report(on_error, ctx, 0,
           "is readable or writable by group or others (mode %04o); %s refuses it: run chmod 600 "
           "on it",
           (unsigned)(st.st_mode & 07777), who);
    return -EPERM;
  }
  if (st.st_uid != geteuid() && st.st_uid != 0) {
    report(on_error, ctx, 0,
           "is owned by uid %lu, not by %s's user (uid %lu) or root; %s refuses it",
           (unsigned long)st.st_uid, who, (unsigned long)geteuid(), who);
    return -EPERM;
  }
  return 0;
}

int em_credentials_read(const char *path, const char *who, em_credentials_t *out,
                        em_credentials_error_fn on_error, void *ctx) {
  if (out == NULL) {
    return -EINVAL;
  }
  memset(out, 0, sizeof(*out));
  if (path == NULL) {
    return -EINVAL;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    int e = errno;
    report(on_error, ctx, 0, "cannot be opened: %s", strerror(e));
    return -e;
  }
  int rc = em_credentials_check_fd(fd, who, on_error, ctx);
  char buf[EM_CREDENTIALS_MAX_BYTES + 1];
  bool truncated = false;
  ssize_t len = 0;
  if (rc == 0) {
    len = em_file_read_fd(fd, buf, sizeof(buf), &truncated);
    if (len < 0) {
      rc = (int)len;
      report(on_error, ctx, 0, "cannot be read: %s", strerror(-rc));
    } else if (truncated) {
      rc = -EFBIG;
      report(on_error, ctx, 0, "cannot be read: larger than 4 KiB");
    }
  }
  close(fd);
  if (rc == 0) {
    rc = em_credentials_parse(buf, (size_t)len, out, on_error, ctx);
  }
  memset(buf, 0, sizeof(buf));
  return rc;
}
