/*
 * signals.c - see signals.h.
 */
#define _POSIX_C_SOURCE 200809L

#include "signals.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
  struct sockaddr_un addr;
  socklen_t len;
} subscriber_t;

struct em_signals {
  char path[256];
  int fd;
  uint8_t *page; /* EM_STATE_PAGE_BYTES, MAP_SHARED. */
  uint32_t agent_pid;
  em_signals_send_fn send;
  void *send_ctx;
  subscriber_t subs[EM_SIGNALS_MAX_SUBSCRIBERS];
  size_t n_subs;
  em_signals_stats_t stats;
};

/* Creates "<path>.tmp" of one page, formats it, maps it and renames it to path. */
static int create_page(em_signals_t *s, const em_state_record_t *initial) {
  char tmp[sizeof(s->path) + 8];
  snprintf(tmp, sizeof(tmp), "%s.tmp", s->path);
  unlink(tmp);
  s->fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (s->fd < 0) {
    return -errno;
  }
  int rc = 0;
  if (fchmod(s->fd, 0644) != 0 || ftruncate(s->fd, EM_STATE_PAGE_BYTES) != 0) {
    rc = -errno;
  }
  if (!rc) {
    void *m = mmap(NULL, EM_STATE_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
    if (m == MAP_FAILED) {
      rc = -errno;
    } else {
      s->page = m;
    }
  }
  if (!rc) {
    rc = em_state_page_init(s->page, s->agent_pid, initial);
  }
  if (!rc && rename(tmp, s->path) != 0) {
    rc = -errno;
  }
  if (rc) {
    unlink(tmp);
  }
  return rc;
}

int em_signals_new(em_signals_t **out, const char *page_path, uint32_t agent_pid,
                   const em_state_record_t *initial, em_signals_send_fn send, void *send_ctx) {
  if (!out || !page_path || !initial || !send ||
      strlen(page_path) >= sizeof(((em_signals_t *)0)->path)) {
    return -EINVAL;
  }
  em_signals_t *s = calloc(1, sizeof(*s));
  if (!s) {
    return -ENOMEM;
  }
  snprintf(s->path, sizeof(s->path), "%s", page_path);
  s->fd = -1;
  s->agent_pid = agent_pid;
  s->send = send;
  s->send_ctx = send_ctx;
  int rc = create_page(s, initial);
  if (rc) {
    em_signals_free(s, false);
    return rc;
  }
  *out = s;
  return 0;
}

int em_signals_publish(em_signals_t *s, const em_state_record_t *rec) {
  uint8_t push[EM_PUSH_DGRAM_BYTES];
  int rc = em_push_pack(rec, s->agent_pid, push);
  if (!rc) {
    rc = em_state_page_write(s->page, rec);
  }
  if (rc) {
    return rc;
  }
  for (size_t i = 0; i < s->n_subs;) {
    int src = s->send(s->send_ctx, &s->subs[i].addr, s->subs[i].len, push, sizeof(push));
    if (src == -ECONNREFUSED || src == -ENOENT || src == -ENOTCONN) {
      s->subs[i] = s->subs[--s->n_subs]; /* Gone: drop it, look at the one moved here. */
      s->stats.dropped++;
      continue;
    }
    if (src == -EAGAIN || src == -EWOULDBLOCK) {
      s->stats.push_full++;
    } else if (src == 0) {
      s->stats.pushes++;
    }
    i++;
  }
  return 0;
}

static bool same_addr(const subscriber_t *a, const struct sockaddr_un *addr, socklen_t len) {
  return a->len == len && memcmp(&a->addr, addr, (size_t)len) == 0;
}

int em_signals_subscribe(em_signals_t *s, bool subscribe, const struct sockaddr_un *addr,
                         socklen_t len) {
  if (!addr || len <= (socklen_t)sizeof(sa_family_t) || len > (socklen_t)sizeof(*addr)) {
    s->stats.refused += subscribe;
    return -EINVAL; /* Unnamed: the client did not bind, so nothing can reach it. */
  }
  for (size_t i = 0; i < s->n_subs; i++) {
    if (same_addr(&s->subs[i], addr, len)) {
      if (!subscribe) {
        s->subs[i] = s->subs[--s->n_subs];
      }
      return 0;
    }
  }
  if (!subscribe) {
    return 0;
  }
  if (s->n_subs == EM_SIGNALS_MAX_SUBSCRIBERS) {
    s->stats.refused++;
    return -ENOSPC;
  }
  subscriber_t *n = &s->subs[s->n_subs++];
  memset(n, 0, sizeof(*n));
  memcpy(&n->addr, addr, (size_t)len);
  n->len = len;
  return 0;
}

size_t em_signals_subscribers(const em_signals_t *s) {
  return s->n_subs;
}

const em_signals_stats_t *em_signals_stats(const em_signals_t *s) {
  return &s->stats;
}

void em_signals_free(em_signals_t *s, bool remove_page) {
  if (!s) {
    return;
  }
  if (s->page) {
    munmap(s->page, EM_STATE_PAGE_BYTES);
  }
  if (s->fd >= 0) {
    close(s->fd);
  }
  if (remove_page && s->page) {
    unlink(s->path);
  }
  free(s);
}
