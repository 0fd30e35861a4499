/*
 * edgemon/common/file.h - the bounded small-file reader: a config file, a credentials file, a
 * pid file, /proc/<pid>/stat, a sysfs attribute. The file is opened read-only with O_NONBLOCK
 * (a FIFO planted where a file should be cannot block the caller) and O_NOCTTY, only a regular
 * file is read, and at most cap - 1 bytes go into the caller's buffer, NUL-terminated; whether
 * the file held more is reported, never silently cut. em_file_kind() names what stands where
 * a regular file was wanted, for the message that refuses it.
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

#ifdef __cplusplus
}
#endif

#endif /* EDGEMON_COMMON_FILE_H */
