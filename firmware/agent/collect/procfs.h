/*
 * procfs.h - memory and pressure figures of the target and the system, from procfs:
 *   /proc/<pid>/statm         every tick: size, RSS, shared (pages -> bytes)
 *   /proc/<pid>/smaps_rollup  slower cadence (it walks the page tables): PSS, anon, swap
 *   /proc/meminfo             every tick: MemAvailable, MemTotal
 *   /proc/pressure/{cpu,memory,io}  every tick when present: some/full avg10 (percent)
 *   /proc/<pid>/io            every tick: the bytes the target caused to be read from and
 *                             written to storage (read_bytes, write_bytes), its read and write
 *                             calls (syscr, syscw)
 *
 * Two layers. Pure parsers take the text of one file and fill a struct; they are what the
 * fixture tests exercise, including truncated and garbage files. A reader (em_procfs_t) keeps
 * each file open and re-reads it with pread(fd, .., 0) into a fixed buffer, so a tick opens
 * nothing and allocates nothing. Every reader takes a procfs root ("/proc" on a board, a
 * fixture tree in tests).
 *
 * A figure the machine does not provide (no PSI before Linux 4.20, no smaps_rollup before
 * 4.14, "full" for cpu before 5.13) is absent, never 0: every struct has a `have` bitmask.
 * Owns: the open fds of an em_procfs_t. Threading: one thread at a time, with one exception:
 * em_procfs_read_smaps() has its own buffer and may run on a worker thread while the owner's
 * thread reads the other files, as long as nobody calls em_procfs_set_pid() or
 * em_procfs_free() until it returns. (smaps_rollup walks the target's page tables: about
 * 9.5 ms per GiB resident on the reference VM, too long to run on the agent's loop.)
 */
#ifndef EDGEMON_AGENT_PROCFS_H
#define EDGEMON_AGENT_PROCFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define EM_PROCFS_BUF_BYTES 8192 /* Largest file we parse (meminfo is ~1.5 KiB). */

/* statm of the target, in bytes. */
typedef struct {
  uint64_t size_bytes;   /* VmSize */
  uint64_t rss_bytes;    /* resident */
  uint64_t shared_bytes; /* resident file-backed and shmem */
} em_statm_t;

/* smaps_rollup of the target, in bytes. */
enum { EM_SMAPS_PSS = 1u << 0, EM_SMAPS_ANON = 1u << 1, EM_SMAPS_SWAP = 1u << 2 };
typedef struct {
  unsigned have; /* EM_SMAPS_* bits of the fields the file had. */
  uint64_t pss_bytes;
  uint64_t anon_bytes;
  uint64_t swap_bytes;
} em_smaps_t;

/* System memory, in bytes. */
enum { EM_MEMINFO_AVAILABLE = 1u << 0, EM_MEMINFO_TOTAL = 1u << 1 };
typedef struct {
  unsigned have;
  uint64_t available_bytes;
  uint64_t total_bytes;
} em_meminfo_t;

/* One PSI file: avg10 in percent. */
enum { EM_PSI_SOME = 1u << 0, EM_PSI_FULL = 1u << 1 };
typedef struct {
  unsigned have;
  double some_avg10; /* percent, 0..100 */
  double full_avg10;
} em_psi_t;

/* /proc/<pid>/io of the target: storage bytes and I/O calls, running totals since it started.
 * read_bytes and write_bytes count what reached the block layer (page cache hits and tmpfs
 * count nothing); syscr and syscw count read- and write-family calls of any file. */
enum {
  EM_PIDIO_READ_BYTES = 1u << 0,
  EM_PIDIO_WRITE_BYTES = 1u << 1,
  EM_PIDIO_SYSCR = 1u << 2,
  EM_PIDIO_SYSCW = 1u << 3,
};
typedef struct {
  unsigned have;        /* EM_PIDIO_* bits of the fields the file had. */
  uint64_t read_bytes;  /* bytes fetched from storage for the target */
  uint64_t write_bytes; /* bytes the target sent (dirtied) towards storage */
  uint64_t syscr;       /* read-family calls */
  uint64_t syscw;       /* write-family calls */
} em_pidio_t;

typedef enum { EM_PSI_CPU = 0, EM_PSI_MEMORY = 1, EM_PSI_IO = 2, EM_PSI_COUNT = 3 } em_psi_res_t;

/*
 * Parsers: `text` need not be NUL-terminated. Return 0, or -EINVAL for text that is not the
 * file's format (garbage, truncated mid-field, a number that overflows). A parser never reads
 * past text[len-1]. page_size is the system's page size in bytes.
 */
/*
 * Parses a decimal number of at least one digit at text[*pos], stopping at the first non-digit
 * or at len (the scanner of every parser here and of schedinfo.c). Advances *pos past the
 * digits. Returns 0, or -EINVAL when there is no digit or the value does not fit in uint64_t.
 */
int em_procfs_scan_u64(const char *text, size_t len, size_t *pos, uint64_t *out);

int em_procfs_parse_statm(const char *text, size_t len, uint64_t page_size, em_statm_t *out);
int em_procfs_parse_smaps_rollup(const char *text, size_t len, em_smaps_t *out);
int em_procfs_parse_meminfo(const char *text, size_t len, em_meminfo_t *out);
int em_procfs_parse_psi(const char *text, size_t len, em_psi_t *out);
/* /proc/<pid>/io: "key: <decimal>" lines; rchar, wchar and cancelled_write_bytes are skipped. */
int em_procfs_parse_pidio(const char *text, size_t len, em_pidio_t *out);

/* The reader of one target's and the system's files. Opaque. */
typedef struct em_procfs em_procfs_t;

/*
 * Opens the system files under `root` (meminfo; the pressure files when present) and, when pid > 0,
 * the target's statm and smaps_rollup. Returns 0 and *out, or a negative errno (-ENOMEM, or
 * -ENOENT when root/meminfo is missing). Missing PSI or smaps_rollup is not an error: those
 * figures are absent.
 */
int em_procfs_new(em_procfs_t **out, const char *root, pid_t pid);

/* Closes the target's files and opens those of `pid` (the target restarted). 0 or -errno. */
int em_procfs_set_pid(em_procfs_t *p, pid_t pid);

/* Closes every fd and frees. NULL is a no-op. */
void em_procfs_free(em_procfs_t *p);

/*
 * Reads statm; -ESRCH when the target is gone (its file reads fail), -EINVAL on a bad file.
 */
int em_procfs_read_statm(em_procfs_t *p, em_statm_t *out);
int em_procfs_read_smaps(em_procfs_t *p, em_smaps_t *out);
int em_procfs_read_meminfo(em_procfs_t *p, em_meminfo_t *out);

/*
 * Reads the target's /proc/<pid>/io: -ESRCH when there is no target or it is gone; the
 * negative errno that kept the file from opening (-EACCES: reading another user's io needs
 * ptrace read access, CAP_SYS_PTRACE; -ENOENT: a kernel without task I/O accounting) or from
 * being read; -EINVAL for a bad file.
 */
int em_procfs_read_pidio(em_procfs_t *p, em_pidio_t *out);

/* -ENOENT when this kernel has no PSI for `res`. */
int em_procfs_read_psi(em_procfs_t *p, em_psi_res_t res, em_psi_t *out);

/* True when the kernel has PSI (root/pressure/cpu opened). */
bool em_procfs_has_psi(const em_procfs_t *p);

#endif /* EDGEMON_AGENT_PROCFS_H */
