/*
 * file.c - the bounded small-file reader (edgemon/common/file.h). Owns the fd it opens, for
 * the length of one call. No global state.
 */
#define _POSIX_C_SOURCE 200809L
#include "edgemon/common/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

/* read() that retries EINTR; bytes or -errno. */
static ssize_t read_retry(int fd, void *buf, size_t len) {
  for (;;) {
    ssize_t r = read(fd, buf, len);
    if (r >= 0) {
      return r;
    }
    if (errno != EINTR) {
      return -errno;
    }
  }
}

ssize_t em_file_read_fd(int fd, char *buf, size_t cap, bool *truncated) {
  if (truncated != NULL) {
    *truncated = false;
  }
  if (buf == NULL || cap == 0) {
    return -EINVAL;
  }
  size_t n = 0;
  while (n < cap - 1) {
    ssize_t r = read_retry(fd, buf + n, cap - 1 - n);
    if (r < 0) {
      buf[n] = '\0';
      return r;
    }
    if (r == 0) {
      break;
    }
    n += (size_t)r;
  }
  buf[n] = '\0';
  if (n == cap - 1 && truncated != NULL) {
    char probe;
    ssize_t r = read_retry(fd, &probe, 1);
    if (r < 0) {
      return r;
    }
    *truncated = r > 0;
  }
  return (ssize_t)n;
}

ssize_t em_file_read_small(const char *path, char *buf, size_t cap, bool *truncated) {
  if (truncated != NULL) {
    *truncated = false;
  }
  if (path == NULL || buf == NULL || cap == 0) {
    return -EINVAL;
  }
  buf[0] = '\0';
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    return -errno;
  }
  struct stat st;
  ssize_t rc = 0;
  if (fstat(fd, &st) != 0) {
    rc = -errno;
  } else if (!S_ISREG(st.st_mode)) {
    rc = -EINVAL;
  } else {
    rc = em_file_read_fd(fd, buf, cap, truncated);
  }
  close(fd);
  return rc;
}

const char *em_file_kind(mode_t mode) {
  switch (mode & S_IFMT) {
  case S_IFREG:
    return "a regular file";
  case S_IFIFO:
    return "a FIFO";
  case S_IFLNK:
    return "a symbolic link";
  case S_IFDIR:
    return "a directory";
  case S_IFCHR:
    return "a character device";
  case S_IFBLK:
    return "a block device";
  case S_IFSOCK:
    return "a socket";
  default:
    return "a file of an unknown type";
  }
}

int em_file_begin(const char *path, size_t size, char *tmp, size_t tmp_cap) {
  if (path == NULL || tmp == NULL) {
    return -EINVAL;
  }
  int n = snprintf(tmp, tmp_cap, "%s.tmp", path);
  if (n < 0 || (size_t)n >= tmp_cap) {
    return -ENAMETOOLONG;
  }
  (void)unlink(tmp);
  int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) {
    return -errno;
  }
  if (fchmod(fd, 0644) != 0 || (size > 0 && ftruncate(fd, (off_t)size) != 0)) {
    int rc = -errno;
    close(fd);
    (void)unlink(tmp);
    return rc;
  }
  return fd;
}

int em_file_finish(const char *tmp, const char *path, int rc) {
  if (rc == 0 && rename(tmp, path) != 0) {
    rc = -errno;
  }
  if (rc != 0) {
    (void)unlink(tmp);
  }
  return rc;
}
