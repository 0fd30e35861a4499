/*
 * edgemon/common/file.h - the bounded small-file reader: a config file, a credentials file, a
 * pid file, /proc/<pid>/stat, a sysfs attribute. The file is opened read-only with O_NONBLOCK
 * (a FIFO planted where a file should be cannot block the caller) and O_NOCTTY, only a regular
 * file is read, and at most cap - 1 bytes go into the caller's buffer, NUL-terminated; whether
 * the file held more is reported, never silently cut. em_file_kind() names what stands where
 * a regular file was wanted, for the message that refuses it. em_file_begin() and
 * em_file_finish() put a file in place whole: written as "<path>.tmp" beside it, then renamed
 * over it, so a reader opens the old file or the new one, never half of one.
 *
 * Nothing allocates; the fd is open only during the call. Thread-safe (no global state).
 * The header compiles on its own, as C11 and as C++.
 */
#ifndef EDGEMON_COMMON_FILE_H
#define EDGEMON_COMMON_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Reads what is left of the open `fd` into buf[0..cap - 1) and NUL-terminates it (the bytes
 * may hold NULs of their own: the count says how many are the file's). *truncated (may be
 * NULL) is set to whether the file had more than cap - 1 bytes. Retries EINTR. Returns the
 * byte count, or -errno of read() (-EINVAL for cap 0 or a NULL buffer). Does not close fd.
 */
ssize_t em_file_read_fd(int fd, char *buf, size_t cap, bool *truncated);

/*
 * Opens `path`, refuses anything but a regular file (-EINVAL), and reads it as
 * em_file_read_fd(). Returns the byte count, or -errno (of open(), fstat() or read()).
 */
ssize_t em_file_read_small(const char *path, char *buf, size_t cap, bool *truncated);

/*
 * What a file of st_mode `mode` is, in words, for a message that refuses it: "a FIFO",
 * "a symbolic link", "a directory", "a character device", "a block device", "a socket",
 * "a regular file", or "a file of an unknown type". A static string.
 */
const char *em_file_kind(mode_t mode);

/*
 * Starts a file that replaces `path` whole: removes whatever stands at "<path>.tmp" (a FIFO,
 * a link, a stale file) and creates it anew, read-write, mode 0644 whatever the umask, with
 * O_EXCL, O_NOFOLLOW and O_NONBLOCK (nothing planted there can block the caller or redirect
 * the write), then sizes it to `size` bytes when size > 0. The temporary path is written to
 * tmp[0..tmp_cap). Returns the fd, or -errno (-ENAMETOOLONG when the path does not fit).
 */
int em_file_begin(const char *path, size_t size, char *tmp, size_t tmp_cap);

/*
 * Ends em_file_begin(): with rc == 0, renames tmp over path (the caller has written and, for a
 * mapping, may keep the fd); otherwise, or when the rename fails, removes tmp. Returns rc, or
 * -errno of rename().
 */
int em_file_finish(const char *tmp, const char *path, int rc);

#ifdef __cplusplus
}
#endif

#endif /* EDGEMON_COMMON_FILE_H */
