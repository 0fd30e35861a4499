/*
 * procfs.c - memory, pressure and storage I/O figures from procfs: the five file parsers and the
 * reader (em_procfs_t) that keeps the files open and re-reads them every tick.
 *
 * Parsers. Each is a pure function over (text, len): the text need not be NUL-terminated and
 * nothing past text[len - 1] is ever read (memchr and explicit bounds, no strto* family). Every
 * procfs file we read ends with a newline, so a text that does not is a truncated read and is
 * refused with -EINVAL, as is anything not in the file's format: a repeated field, a PSI line
 * that is not "some" or "full", a missing or other unit, a number that overflows uint64_t
 * (before or after the conversion to bytes).
 * Only the fields we report are checked strictly; other lines of meminfo, smaps_rollup and
 * <pid>/io are skipped, so a kernel that adds fields (or prints some without "kB", as
 * HugePages_Total) still parses. A parser zeroes *out first and leaves it zeroed on error, so a
 * failed parse never hands out half a record. The `have` bits name exactly the fields that were in
 * the text.
 *
 * Reader. em_procfs_new() makes the only allocation (one calloc of struct em_procfs, which holds
 * the read buffer) and opens the files with O_RDONLY | O_CLOEXEC; each read is one pread() at
 * offset 0 into that buffer (seq_file regenerates the text on a read at offset 0), so a tick
 * opens nothing and allocates nothing. Absent figures: pressure/<res> or <pid>/smaps_rollup
 * failing to open with ENOENT, or pressure/<res> opening but failing its first read (EOPNOTSUPP:
 * PSI off at boot on 4.20-5.5), leaves its fd at -1 and its reads answer -ENOENT; any other open
 * error (EACCES, EMFILE, ...) fails em_procfs_new or em_procfs_set_pid. <pid>/io is the
 * exception: it needs ptrace read access to the target, which statm does not, so any error
 * opening it is kept and answered by its reads, and the target's other figures stay. Target gone: a
 * statm or smaps_rollup read failing with ESRCH or ENOENT (the process was reaped), returning 0
 * bytes, or a statm with VmSize 0 (a zombie: the kernel prints all zeros once the address space
 * is gone) answers -ESRCH.
 *
 * Owns: the fds of each em_procfs_t (at most 7: meminfo, three PSI files, statm, smaps_rollup,
 * io)
 * and its one allocation. Single-threaded: a reader is used from the agent's loop only.
 */
#define _POSIX_C_SOURCE 200809L /* pread, O_CLOEXEC, sysconf under -std=c11. */

#include "procfs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* statm's fields: size resident shared text lib data dt, since Linux 2.6. */
#define STATM_FIELDS 7
/* Most digits after the point in a PSI average we accept (the kernel prints 2). */
#define PSI_FRAC_DIGITS 9

/* ---- Bounded text scanning ---- */

int em_procfs_scan_u64(const char *text, size_t len, size_t *pos, uint64_t *out) {
  size_t i = *pos;
  uint64_t v = 0;
  while (i < len && text[i] >= '0' && text[i] <= '9') {
    uint64_t digit = (uint64_t)(text[i] - '0');
    if (v > (UINT64_MAX - digit) / 10) {
      return -EINVAL;
    }
    v = v * 10 + digit;
    i++;
  }
  if (i == *pos) {
    return -EINVAL;
  }
  *pos = i;
  *out = v;
  return 0;
}

/*
 * Parses a fixed-point decimal "<digits>.<digits>" (the kernel's "%lu.%02lu") at text[*pos],
 * with 1 to PSI_FRAC_DIGITS digits after the point. Advances *pos. Returns 0, or -EINVAL.
 */
static int scan_fixed(const char *text, size_t len, size_t *pos, double *out) {
  size_t i = *pos;
  uint64_t whole = 0;
  if (em_procfs_scan_u64(text, len, &i, &whole) != 0) {
    return -EINVAL;
  }
  if (i >= len || text[i] != '.') {
    return -EINVAL;
  }
  i++;
  size_t frac_start = i;
  uint64_t frac = 0;
  uint64_t scale = 1;
  while (i < len && text[i] >= '0' && text[i] <= '9') {
    if (i - frac_start == PSI_FRAC_DIGITS) {
      return -EINVAL;
    }
    frac = frac * 10 + (uint64_t)(text[i] - '0');
    scale *= 10;
    i++;
  }
  if (i == frac_start) {
    return -EINVAL;
  }
  *pos = i;
  *out = (double)whole + (double)frac / (double)scale;
  return 0;
}

/* Consumes the literal `lit` at text[*pos] if it is there in full. Returns whether it was. */
static bool scan_lit(const char *text, size_t len, size_t *pos, const char *lit) {
  size_t n = strlen(lit);
  if (len - *pos < n || memcmp(text + *pos, lit, n) != 0) {
    return false;
  }
  *pos += n;
  return true;
}

/* a * b into *out; false when the product does not fit in uint64_t. */
static bool mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
  if (a != 0 && b > UINT64_MAX / a) {
    return false;
  }
  *out = a * b;
  return true;
}

/* A complete procfs text: not empty and ending with the newline of its last line. */
static bool is_complete(const char *text, size_t len) {
  return text != NULL && len > 0 && text[len - 1] == '\n';
}

/* ---- Parsers ---- */

int em_procfs_parse_statm(const char *text, size_t len, uint64_t page_size, em_statm_t *out) {
  if (out == NULL) {
    return -EINVAL;
  }
  memset(out, 0, sizeof *out);
  if (!is_complete(text, len) || page_size == 0) {
    return -EINVAL;
  }
  /* One line of exactly STATM_FIELDS numbers, one space apart; the newline is the last byte. */
  uint64_t pages[STATM_FIELDS];
  size_t pos = 0;
  for (size_t i = 0; i < STATM_FIELDS; i++) {
    if (em_procfs_scan_u64(text, len, &pos, &pages[i]) != 0) {
      return -EINVAL;
    }
    char want = i + 1 < STATM_FIELDS ? ' ' : '\n';
    if (pos >= len || text[pos] != want) {
      return -EINVAL;
    }
    pos++;
  }
  if (pos != len) {
    return -EINVAL;
  }
  em_statm_t v;
  if (!mul_u64(pages[0], page_size, &v.size_bytes) || !mul_u64(pages[1], page_size, &v.rss_bytes) ||
      !mul_u64(pages[2], page_size, &v.shared_bytes)) {
    return -EINVAL;
  }
  *out = v;
  return 0;
}

/* One "Key:   <n> kB" field of meminfo or smaps_rollup (or "key: <n>" of <pid>/io) that we
 * report. */
typedef struct {
  const char *key; /* Without the colon. */
  unsigned bit;    /* The `have` bit it sets. */
  uint64_t *dst;   /* Where its value goes, in bytes. */
} kb_field_t;

/*
 * Parses the value part of a "Key:" line, text[pos..eol) where text[eol] is the line's newline:
 * spaces, a decimal number, then with `in_kb` " kB" (the value is stored in bytes), and nothing
 * else. Returns 0, or -EINVAL (missing or other unit, overflow, trailing bytes).
 */
static int parse_kb_value(const char *text, size_t eol, size_t pos, bool in_kb, uint64_t *out) {
  while (pos < eol && text[pos] == ' ') {
    pos++;
  }
  uint64_t n = 0;
  if (em_procfs_scan_u64(text, eol, &pos, &n) != 0 ||
      (in_kb && !scan_lit(text, eol, &pos, " kB")) || pos != eol) {
    return -EINVAL;
  }
  if (!in_kb) {
    *out = n;
    return 0;
  }
  return mul_u64(n, 1024, out) ? 0 : -EINVAL;
}

/*
 * Walks the lines of a "Key: value" file (meminfo, smaps_rollup in kB; <pid>/io plain numbers
 * when `in_kb` is false) and parses the lines whose key (the bytes before the line's first ':')
 * is one of `fields`; other lines, such as smaps_rollup's "<range> ---p 00000000 00:00 0
 * [rollup]" header, are skipped. Sets *have to the bits of the fields found. Returns 0, or
 * -EINVAL when the text is incomplete, a field we report is malformed or repeated, or none of
 * them is there.
 */
static int parse_kb_lines(const char *text, size_t len, const kb_field_t *fields, size_t nfields,
                          bool in_kb, unsigned *have) {
  *have = 0;
  if (!is_complete(text, len)) {
    return -EINVAL;
  }
  size_t start = 0;
  while (start < len) {
    const char *nl = memchr(text + start, '\n', len - start);
    size_t eol = (size_t)(nl - text); /* Found: the text ends with a newline. */
    const char *colon = memchr(text + start, ':', eol - start);
    if (colon != NULL) {
      size_t key_len = (size_t)(colon - (text + start));
      for (size_t i = 0; i < nfields; i++) {
        const kb_field_t *f = &fields[i];
        if (strlen(f->key) != key_len || memcmp(text + start, f->key, key_len) != 0) {
          continue;
        }
        if ((*have & f->bit) != 0 ||
            parse_kb_value(text, eol, start + key_len + 1, in_kb, f->dst) != 0) {
          return -EINVAL;
        }
        *have |= f->bit;
        break;
      }
    }
    start = eol + 1;
  }
  return *have != 0 ? 0 : -EINVAL;
}

int em_procfs_parse_smaps_rollup(const char *text, size_t len, em_smaps_t *out) {
  if (out == NULL) {
    return -EINVAL;
  }
  memset(out, 0, sizeof *out);
  em_smaps_t v = {0};
  const kb_field_t fields[] = {
      {"Pss", EM_SMAPS_PSS, &v.pss_bytes},
      {"Anonymous", EM_SMAPS_ANON, &v.anon_bytes},
      {"Swap", EM_SMAPS_SWAP, &v.swap_bytes},
  };
  if (parse_kb_lines(text, len, fields, sizeof fields / sizeof fields[0], true, &v.have) != 0) {
    return -EINVAL;
  }
  *out = v;
  return 0;
}

int em_procfs_parse_meminfo(const char *text, size_t len, em_meminfo_t *out) {
  if (out == NULL) {
    return -EINVAL;
  }
  memset(out, 0, sizeof *out);
  em_meminfo_t v = {0};
  const kb_field_t fields[] = {
      {"MemAvailable", EM_MEMINFO_AVAILABLE, &v.available_bytes},
      {"MemTotal", EM_MEMINFO_TOTAL, &v.total_bytes},
  };
  if (parse_kb_lines(text, len, fields, sizeof fields / sizeof fields[0], true, &v.have) != 0) {
    return -EINVAL;
  }
  *out = v;
  return 0;
}

int em_procfs_parse_pidio(const char *text, size_t len, em_pidio_t *out) {
  if (out == NULL) {
    return -EINVAL;
  }
  memset(out, 0, sizeof *out);
  em_pidio_t v = {0};
  const kb_field_t fields[] = {
      {"read_bytes", EM_PIDIO_READ_BYTES, &v.read_bytes},
      {"write_bytes", EM_PIDIO_WRITE_BYTES, &v.write_bytes},
      {"syscr", EM_PIDIO_SYSCR, &v.syscr},
      {"syscw", EM_PIDIO_SYSCW, &v.syscw},
  };
  if (parse_kb_lines(text, len, fields, sizeof fields / sizeof fields[0], false, &v.have) != 0) {
    return -EINVAL;
  }
  *out = v;
  return 0;
}

/*
 * Parses one PSI line, text[start..eol) where text[eol] is its newline, in the kernel's format
 * "<some|full> avg10=%lu.%02lu avg60=%lu.%02lu avg300=%lu.%02lu total=%llu". Stores its kind
 * bit and avg10. Returns 0, or -EINVAL for any other line.
 */
static int parse_psi_line(const char *text, size_t start, size_t eol, unsigned *bit,
                          double *avg10) {
  size_t pos = start;
  if (scan_lit(text, eol, &pos, "some ")) {
    *bit = EM_PSI_SOME;
  } else if (scan_lit(text, eol, &pos, "full ")) {
    *bit = EM_PSI_FULL;
  } else {
    return -EINVAL;
  }
  double avg60 = 0;
  double avg300 = 0;
  uint64_t total = 0;
  if (!scan_lit(text, eol, &pos, "avg10=") || scan_fixed(text, eol, &pos, avg10) != 0 ||
      !scan_lit(text, eol, &pos, " avg60=") || scan_fixed(text, eol, &pos, &avg60) != 0 ||
      !scan_lit(text, eol, &pos, " avg300=") || scan_fixed(text, eol, &pos, &avg300) != 0 ||
      !scan_lit(text, eol, &pos, " total=") || em_procfs_scan_u64(text, eol, &pos, &total) != 0) {
    return -EINVAL;
  }
  return pos == eol ? 0 : -EINVAL;
}

int em_procfs_parse_psi(const char *text, size_t len, em_psi_t *out) {
  if (out == NULL) {
    return -EINVAL;
  }
  memset(out, 0, sizeof *out);
  if (!is_complete(text, len)) {
    return -EINVAL;
  }
  /* Every line is a "some" or a "full" line, each at most once (cpu has no "full" < 5.13). */
  em_psi_t v = {0};
  size_t start = 0;
  while (start < len) {
    const char *nl = memchr(text + start, '\n', len - start);
    size_t eol = (size_t)(nl - text);
    unsigned bit = 0;
    double avg10 = 0;
    if (parse_psi_line(text, start, eol, &bit, &avg10) != 0 || (v.have & bit) != 0) {
      return -EINVAL;
    }
    v.have |= bit;
    if (bit == EM_PSI_SOME) {
      v.some_avg10 = avg10;
    } else {
      v.full_avg10 = avg10;
    }
    start = eol + 1;
  }
  *out = v;
  return 0;
}

/* ---- Reader ---- */

struct em_procfs {
  uint64_t page_size_bytes;      /* sysconf(_SC_PAGESIZE), read once in em_procfs_new. */
  int meminfo_fd;                /* Always open. */
  int psi_fd[EM_PSI_COUNT];      /* -1 when the kernel has no PSI for that resource. */
  int statm_fd;                  /* -1 when there is no target. */
  int smaps_fd;                  /* -1 when there is no target or the kernel has no smaps_rollup. */
  int pidio_fd;                  /* <pid>/io; -1 when there is no target or it did not open... */
  int pidio_err;                 /* ...and then the negative errno of that open (0: no target). */
  char root[PATH_MAX];           /* The procfs root, NUL-terminated. */
  char buf[EM_PROCFS_BUF_BYTES]; /* Every read but smaps_rollup lands here. */
  char smaps_buf[EM_PROCFS_BUF_BYTES]; /* smaps_rollup's own, so it can be read on a worker
                                          thread while the loop reads the others. */
};

static const char *const psi_names[EM_PSI_COUNT] = {"pressure/cpu", "pressure/memory",
                                                    "pressure/io"};

/*
 * Opens <root>/<rel> (or <root>/<pid>/<rel> when pid > 0) read-only and close-on-exec. Returns 0
 * and *fd, -ENAMETOOLONG when the path does not fit in PATH_MAX, or -errno of open().
 */
static int open_file(const char *root, pid_t pid, const char *rel, int *fd) {
  char path[PATH_MAX];
  int n = pid > 0 ? snprintf(path, sizeof path, "%s/%ld/%s", root, (long)pid, rel)
                  : snprintf(path, sizeof path, "%s/%s", root, rel);
  if (n < 0 || (size_t)n >= sizeof path) {
    return -ENAMETOOLONG;
  }
  int f = -1;
  do {
    f = open(path, O_RDONLY | O_CLOEXEC);
  } while (f < 0 && errno == EINTR);
  if (f < 0) {
    return -errno;
  }
  *fd = f;
  return 0;
}

/* Closes *fd when it is open and marks it closed. */
static void close_fd(int *fd) {
  if (*fd >= 0) {
    close(*fd);
  }
  *fd = -1;
}

/*
 * Reads the whole of one open file into p->buf with pread at offset 0. Returns the byte count
 * (0 for an empty read), -errno of pread(), or -EINVAL when the file fills the buffer: it is
 * larger than any file we parse, and a cut text must not be parsed as a whole one.
 */
static ssize_t read_whole(int fd, char *buf, size_t cap) {
  ssize_t n = -1;
  do {
    n = pread(fd, buf, cap, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    return -errno;
  }
  if ((size_t)n >= cap) {
    return -EINVAL;
  }
  return n;
}

/*
 * Reads a file of the target: as read_whole, but ESRCH, ENOENT (the process is gone or was
 * reaped) and an empty read all answer -ESRCH.
 */
static ssize_t read_target(int fd, char *buf, size_t cap) {
  ssize_t n = read_whole(fd, buf, cap);
  if (n == 0 || n == -ESRCH || n == -ENOENT) {
    return -ESRCH;
  }
  return n;
}

int em_procfs_new(em_procfs_t **out, const char *root, pid_t pid) {
  if (out == NULL) {
    return -EINVAL;
  }
  *out = NULL;
  if (root == NULL || pid < 0) {
    return -EINVAL;
  }
  if (strlen(root) >= PATH_MAX) {
    return -ENAMETOOLONG;
  }
  long page_size = sysconf(_SC_PAGESIZE);
  if (page_size <= 0) {
    return -EINVAL;
  }
  em_procfs_t *p = calloc(1, sizeof *p);
  if (p == NULL) {
    return -ENOMEM;
  }
  p->page_size_bytes = (uint64_t)page_size;
  p->meminfo_fd = -1;
  p->statm_fd = -1;
  p->smaps_fd = -1;
  p->pidio_fd = -1;
  for (size_t i = 0; i < EM_PSI_COUNT; i++) {
    p->psi_fd[i] = -1;
  }
  memcpy(p->root, root, strlen(root) + 1);

  int rc = open_file(p->root, 0, "meminfo", &p->meminfo_fd);
  if (rc != 0) {
    goto fail;
  }
  for (size_t i = 0; i < EM_PSI_COUNT; i++) {
    rc = open_file(p->root, 0, psi_names[i], &p->psi_fd[i]);
    if (rc != 0 && rc != -ENOENT) {
      goto fail;
    }
    /* Kernels 4.20 to 5.5 create /proc/pressure even when PSI is off at boot (psi=0, or
     * CONFIG_PSI_DEFAULT_DISABLED without psi=1) and refuse every read with EOPNOTSUPP; since
     * 5.6 the files are not created then (ENOENT above). A file that opens but cannot be read
     * is absent like a missing one, never a figure that fails every tick. */
    if (p->psi_fd[i] >= 0 && read_whole(p->psi_fd[i], p->buf, sizeof p->buf) < 0) {
      close_fd(&p->psi_fd[i]);
    }
  }
  rc = em_procfs_set_pid(p, pid);
  if (rc != 0) {
    goto fail;
  }
  *out = p;
  return 0;

fail:
  em_procfs_free(p);
  return rc;
}

/*
 * Opens the new target's files before closing the old ones, so on failure the reader keeps its
 * previous target. pid 0 detaches (no target). Returns 0, -EINVAL for a negative pid, -ESRCH
 * when <root>/<pid>/statm does not exist, or -errno of open(). A missing smaps_rollup (ENOENT,
 * kernels before 4.14) is not an error.
 */
int em_procfs_set_pid(em_procfs_t *p, pid_t pid) {
  if (p == NULL || pid < 0) {
    return -EINVAL;
  }
  int statm_fd = -1;
  int smaps_fd = -1;
  int pidio_fd = -1;
  int pidio_err = 0;
  if (pid > 0) {
    int rc = open_file(p->root, pid, "statm", &statm_fd);
    if (rc != 0) {
      return rc == -ENOENT ? -ESRCH : rc;
    }
    rc = open_file(p->root, pid, "smaps_rollup", &smaps_fd);
    if (rc != 0 && rc != -ENOENT) {
      close_fd(&statm_fd);
      return rc;
    }
    pidio_err = open_file(p->root, pid, "io", &pidio_fd);
  }
  close_fd(&p->statm_fd);
  close_fd(&p->smaps_fd);
  close_fd(&p->pidio_fd);
  p->statm_fd = statm_fd;
  p->smaps_fd = smaps_fd;
  p->pidio_fd = pidio_fd;
  p->pidio_err = pidio_err;
  return 0;
}

void em_procfs_free(em_procfs_t *p) {
  if (p == NULL) {
    return;
  }
  close_fd(&p->meminfo_fd);
  close_fd(&p->statm_fd);
  close_fd(&p->smaps_fd);
  close_fd(&p->pidio_fd);
  for (size_t i = 0; i < EM_PSI_COUNT; i++) {
    close_fd(&p->psi_fd[i]);
  }
  free(p);
}

/*
 * -ESRCH when there is no target, the target is gone (read fails with ESRCH/ENOENT, reads 0
 * bytes) or is a zombie (VmSize 0); -EINVAL for a file not in statm's format; -errno of pread.
 */
int em_procfs_read_statm(em_procfs_t *p, em_statm_t *out) {
  if (p == NULL || out == NULL) {
    return -EINVAL;
  }
  memset(out, 0, sizeof *out);
  if (p->statm_fd < 0) {
    return -ESRCH;
  }
  ssize_t n = read_target(p->statm_fd, p->buf, sizeof p->buf);
  if (n < 0) {
    return (int)n;
  }
  int rc = em_procfs_parse_statm(p->buf, (size_t)n, p->page_size_bytes, out);
  if (rc != 0) {
    return rc;
  }
  if (out->size_bytes == 0) {
    memset(out, 0, sizeof *out);
    return -ESRCH;
  }
  return 0;
}

/*
 * -ESRCH when there is no target or it is gone; -ENOENT when the kernel has no smaps_rollup
 * (before 4.14: PSS, anon and swap are absent); -EINVAL for a bad file; -errno of pread.
 */
int em_procfs_read_smaps(em_procfs_t *p, em_smaps_t *out) {
  if (p == NULL || out == NULL) {
    return -EINVAL;
  }
  memset(out, 0, sizeof *out);
  if (p->statm_fd < 0) {
    return -ESRCH;
  }
  if (p->smaps_fd < 0) {
    return -ENOENT;
  }
  ssize_t n = read_target(p->smaps_fd, p->smaps_buf, sizeof p->smaps_buf);
  if (n < 0) {
    return (int)n;
  }
  return em_procfs_parse_smaps_rollup(p->smaps_buf, (size_t)n, out);
}

/* Read on the loop's thread into p->buf, like statm (smaps_rollup alone has its own buffer). */
int em_procfs_read_pidio(em_procfs_t *p, em_pidio_t *out) {
  if (p == NULL || out == NULL) {
    return -EINVAL;
  }
  memset(out, 0, sizeof *out);
  if (p->statm_fd < 0) {
    return -ESRCH;
  }
  if (p->pidio_fd < 0) {
    return p->pidio_err < 0 ? p->pidio_err : -ENOENT;
  }
  ssize_t n = read_target(p->pidio_fd, p->buf, sizeof p->buf);
  if (n < 0) {
    return (int)n;
  }
  return em_procfs_parse_pidio(p->buf, (size_t)n, out);
}

/* -EINVAL for a bad (or empty) file; -errno of pread. */
int em_procfs_read_meminfo(em_procfs_t *p, em_meminfo_t *out) {
  if (p == NULL || out == NULL) {
    return -EINVAL;
  }
  memset(out, 0, sizeof *out);
  ssize_t n = read_whole(p->meminfo_fd, p->buf, sizeof p->buf);
  if (n < 0) {
    return (int)n;
  }
  return em_procfs_parse_meminfo(p->buf, (size_t)n, out);
}

/* -EINVAL for a bad `res` or a bad file; -ENOENT when absent; -errno of pread. */
int em_procfs_read_psi(em_procfs_t *p, em_psi_res_t res, em_psi_t *out) {
  if (p == NULL || out == NULL || (unsigned)res >= EM_PSI_COUNT) {
    return -EINVAL;
  }
  memset(out, 0, sizeof *out);
  int fd = p->psi_fd[res];
  if (fd < 0) {
    return -ENOENT;
  }
  ssize_t n = read_whole(fd, p->buf, sizeof p->buf);
  if (n < 0) {
    return (int)n;
  }
  return em_procfs_parse_psi(p->buf, (size_t)n, out);
}

bool em_procfs_has_psi(const em_procfs_t *p) {
  return p != NULL && p->psi_fd[EM_PSI_CPU] >= 0;
}
