/*
 * sampler.c - see sampler.h. A thread slot holds its tid, fd and ring mapping. The ring is
 * read the way perf's own tools read it: data_head loaded with acquire order, records taken
 * from data_tail up to it (one that wraps the ring's end is copied into the bounce buffer
 * first), data_tail stored with release order so the kernel may reuse the space.
 */
#define _GNU_SOURCE

#include "sampler.h"

#include <dirent.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "perf_records.h"

#define BOUNCE_BYTES 65536u /* A record's size is a u16. */

typedef struct {
  pid_t tid;
  int fd;
  uint8_t *map;   /* 1 + pages pages, NULL: none. */
  uint32_t pages; /* Data pages: EM_SAMPLER_STACK_PAGES or EM_SAMPLER_RING_PAGES. */
} thread_slot_t;

struct em_sampler {
  char proc_root[256];
  size_t page;
  thread_slot_t *threads; /* EM_SAMPLER_MAX_THREADS */
  uint32_t n_threads;
  uint8_t *bounce;
  bool open;
  pid_t pid;
  DIR *task; /* The target's <proc_root>/PID/task while open, rewound on each scan. */
  struct perf_event_attr attr;
  em_perf_layout_t layout;
  uint32_t pages; /* Data pages new threads' rings get. */
  em_sampler_stats_t st;
};

int em_sampler_new(em_sampler_t **out, const char *proc_root) {
  if (!out || !proc_root || strlen(proc_root) >= 200) {
    return -EINVAL;
  }
  em_sampler_t *s = calloc(1, sizeof(*s));
  if (!s) {
    return -ENOMEM;
  }
  snprintf(s->proc_root, sizeof(s->proc_root), "%s", proc_root);
  s->page = (size_t)sysconf(_SC_PAGESIZE);
  s->threads = calloc(EM_SAMPLER_MAX_THREADS, sizeof(*s->threads));
  s->bounce = malloc(BOUNCE_BYTES);
  if (!s->threads || !s->bounce) {
    em_sampler_free(s);
    return -ENOMEM;
  }
  *out = s;
  return 0;
}

void em_sampler_free(em_sampler_t *s) {
  if (!s) {
    return;
  }
  if (s->open) {
    em_sampler_close(s, NULL);
  }
  free(s->threads);
  free(s->bounce);
  free(s);
}

static int perf_open(struct perf_event_attr *attr, pid_t tid) {
  long fd = syscall(SYS_perf_event_open, attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
  return fd < 0 ? -errno : (int)fd;
}

static size_t map_bytes(const em_sampler_t *s, uint32_t pages) {
  return (1 + pages) * s->page;
}

static uint32_t popcount64(uint64_t v) {
  uint32_t n = 0;
  for (; v; v &= v - 1) {
    n++;
  }
  return n;
}

/*
 * An event on tid. The first refusal of kernel frames (EACCES/EPERM) or of context-switch
 * records (EINVAL) changes s->attr for this and every later thread and is noted in the stats.
 */
static int open_thread(em_sampler_t *s, pid_t tid) {
  if (s->n_threads >= EM_SAMPLER_MAX_THREADS) {
    s->st.threads_over++;
    return -ENOSPC;
  }
  int fd = perf_open(&s->attr, tid);
  if ((fd == -EACCES || fd == -EPERM) && !s->attr.exclude_kernel) {
    s->attr.exclude_kernel = 1;
    s->st.kernel_refused = true;
    fd = perf_open(&s->attr, tid);
  }
  if (fd == -EINVAL && s->attr.sample_regs_user) {
    s->attr.sample_type &= ~(uint64_t)(PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER);
    s->attr.sample_regs_user = 0;
    s->attr.sample_stack_user = 0;
    s->layout = (em_perf_layout_t){0};
    s->pages = EM_SAMPLER_RING_PAGES;
    s->st.no_user_stacks = true;
    fd = perf_open(&s->attr, tid);
  }
  if (fd == -EINVAL && s->attr.context_switch) {
    s->attr.context_switch = 0;
    s->st.no_switch = true;
    fd = perf_open(&s->attr, tid);
  }
  if (fd < 0) {
    if (!s->st.open_errno) {
      s->st.open_errno = -fd;
    }
    if (fd != -ESRCH) { /* A thread that ended meanwhile is no failure. */
      s->st.threads_failed++;
    }
    return fd;
  }
  uint32_t pages = s->pages;
  void *map = mmap(NULL, map_bytes(s, pages), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED && pages > EM_SAMPLER_RING_PAGES && (errno == EPERM || errno == ENOMEM)) {
    pages = EM_SAMPLER_RING_PAGES; /* Over the locked-memory allowance: a smaller ring. */
    s->st.small_rings++;
    map = mmap(NULL, map_bytes(s, pages), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (map == MAP_FAILED) {
    int err = -errno;
    close(fd);
    s->st.threads_failed++;
    if (!s->st.open_errno) {
      s->st.open_errno = -err;
    }
    return err;
  }
  s->threads[s->n_threads++] = (thread_slot_t){.tid = tid, .fd = fd, .map = map, .pages = pages};
  s->st.threads++;
  return 0;
}

static bool have_thread(const em_sampler_t *s, pid_t tid) {
  for (uint32_t i = 0; i < s->n_threads; i++) {
    if (s->threads[i].tid == tid) {
      return true;
    }
  }
  return false;
}

/* Events on the target's threads that have none yet. Returns how many threads were listed. */
static int scan_threads(em_sampler_t *s) {
  rewinddir(s->task);
  int listed = 0;
  struct dirent *e;
  while ((e = readdir(s->task)) != NULL) {
    char *end = NULL;
    long tid = strtol(e->d_name, &end, 10);
    if (!end || *end || tid <= 0) {
      continue;
    }
    listed++;
    if (!have_thread(s, (pid_t)tid) && s->n_threads + s->st.threads_over < 100000u) {
      (void)open_thread(s, (pid_t)tid);
    }
  }
  return listed;
}

int em_sampler_open(em_sampler_t *s, pid_t pid, uint32_t hz, em_sampler_clock_t clock,
                    const em_sampler_user_t *user) {
  if (!s || s->open || pid <= 0 || hz == 0) {
    return -EINVAL;
  }
  memset(&s->st, 0, sizeof(s->st));
  s->pid = pid;
  s->n_threads = 0;
  memset(&s->attr, 0, sizeof(s->attr));
  s->attr.size = sizeof(s->attr);
  s->attr.type = PERF_TYPE_SOFTWARE;
  s->attr.config =
      clock == EM_SAMPLER_TASK_CLOCK ? PERF_COUNT_SW_TASK_CLOCK : PERF_COUNT_SW_CPU_CLOCK;
  s->attr.freq = 1;
  s->attr.sample_freq = hz;
  s->attr.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CALLCHAIN;
  s->attr.sample_id_all = 1;
  s->attr.context_switch = 1;
  s->attr.exclude_hv = 1;
  s->attr.use_clockid = 1;
  s->attr.clockid = CLOCK_MONOTONIC;
  s->layout = (em_perf_layout_t){0};
  s->pages = EM_SAMPLER_RING_PAGES;
  if (user && user->regs_mask && user->stack_bytes) {
    s->attr.sample_type |= PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
    s->attr.sample_regs_user = user->regs_mask;
    s->attr.sample_stack_user = user->stack_bytes;
    s->layout = (em_perf_layout_t){.n_regs = popcount64(user->regs_mask), .stack = true};
    s->pages = EM_SAMPLER_STACK_PAGES;
  }
  char path[300];
  snprintf(path, sizeof(path), "%s/%d/task", s->proc_root, (int)pid);
  s->task = opendir(path);
  if (!s->task) {
    return errno == ENOENT ? -ESRCH : -errno;
  }
  s->open = true;
  (void)scan_threads(s);
  if (s->n_threads == 0) {
    int rc = s->st.open_errno ? -s->st.open_errno : -ESRCH;
    closedir(s->task);
    s->task = NULL;
    s->open = false;
    return rc;
  }
  return 0;
}

/* Every record of one ring. A record the parser refuses ends this drain of the ring (the
 * rest up to data_head is skipped: sizes after a bad one cannot be trusted). */
static void drain_ring(em_sampler_t *s, thread_slot_t *t, em_stacks_t *stacks) {
  struct perf_event_mmap_page *meta = (struct perf_event_mmap_page *)t->map;
  uint8_t *data = t->map + s->page;
  uint64_t size = (uint64_t)t->pages * s->page;
  uint64_t head = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
  uint64_t tail = meta->data_tail;
  while (tail < head) {
    uint64_t avail = head - tail;
    uint64_t off = tail % size;
    uint8_t hdr[EM_PERF_HEADER_BYTES];
    for (size_t i = 0; i < sizeof(hdr) && i < avail; i++) {
      hdr[i] = data[(off + i) % size];
    }
    size_t len = avail >= sizeof(hdr) ? em_perf_rec_size(hdr, sizeof(hdr)) : 0;
    if (len == 0 || len > avail || len > size) {
      s->st.bad_records++;
      tail = head;
      break;
    }
    const uint8_t *rec = data + off;
    if (off + len > size) { /* Wraps: copy both parts. */
      size_t first = (size_t)(size - off);
      memcpy(s->bounce, data + off, first);
      memcpy(s->bounce + first, data, len - first);
      rec = s->bounce;
    }
    em_perf_rec_t r;
    if (em_perf_rec_parse(rec, len, &s->layout, &r) != 0) {
      s->st.bad_records++;
      tail = head;
      break;
    }
    if (r.kind == EM_PERF_REC_LOST) {
      s->st.lost += r.lost;
    } else if (stacks && r.kind == EM_PERF_REC_SAMPLE) {
      (void)em_stacks_add(stacks, &r);
    } else if (stacks && r.kind == EM_PERF_REC_SWITCH) {
      em_stacks_switch(stacks, &r);
    }
    tail += len;
  }
  __atomic_store_n(&meta->data_tail, tail, __ATOMIC_RELEASE);
}

void em_sampler_drain(em_sampler_t *s, em_stacks_t *stacks) {
  if (!s || !s->open) {
    return;
  }
  for (uint32_t i = 0; i < s->n_threads; i++) {
    drain_ring(s, &s->threads[i], stacks);
  }
  (void)scan_threads(s);
}

void em_sampler_close(em_sampler_t *s, em_stacks_t *stacks) {
  if (!s || !s->open) {
    return;
  }
  for (uint32_t i = 0; i < s->n_threads; i++) {
    (void)ioctl(s->threads[i].fd, PERF_EVENT_IOC_DISABLE, 0);
  }
  for (uint32_t i = 0; i < s->n_threads; i++) {
    thread_slot_t *t = &s->threads[i];
    drain_ring(s, t, stacks);
    munmap(t->map, map_bytes(s, t->pages));
    close(t->fd);
    *t = (thread_slot_t){.fd = -1};
  }
  s->n_threads = 0;
  closedir(s->task);
  s->task = NULL;
  s->open = false;
}

bool em_sampler_is_open(const em_sampler_t *s) {
  return s && s->open;
}

const em_sampler_stats_t *em_sampler_stats(const em_sampler_t *s) {
  return &s->st;
}
