/*
 * bench_ingest.c - span datagrams per second: the agent's ingest (em_spans on a libuv loop:
 * recvmmsg batches, credentials, allow-list, unpack, per-stage histogram) against a bare
 * recvmmsg(64) receiver that only counts, in the same run, on the same kind of socket.
 *
 * A forked sender writes N span datagrams with blocking send(), so neither side loses any:
 * the rate is what the receiver drains. Each receiver runs ROUNDS times, interleaved; the
 * output is min/median/max datagrams per second and the median ratio. The socket queue
 * length is the machine's net.unix.max_dgram_qlen (printed); run it at 10 and at 512.
 *
 *   bench_ingest [--count N] [--rounds R]
 */
#define _GNU_SOURCE

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "spans.h"
#include "bench_clock.h"

#define BURST 32 /* Datagrams a client sends back to back in burst mode, then 1 ms of quiet. */

/*
 * Forks a sender that writes `count` span datagrams to `path` and exits. Blocking sends
 * (nothing lost), or with `burst` non-blocking ones as a client sends them: what meets a full
 * queue is dropped and the count of drops is the exit status / 1000 ... reported through a pipe.
 */
static pid_t start_sender(const char *path, long count, int report_fd) {
  pid_t pid = fork();
  if (pid != 0) {
    return pid;
  }
  int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    _exit(1);
  }
  static const char *stages[] = {"preprocess", "infer", "postprocess"};
  uint8_t dgram[EM_SPAN_DGRAM_BYTES];
  long dropped = 0;
  for (long i = 0; i < count; i++) {
    em_span_t s = {.kind = EM_DGRAM_SPAN,
                   .pid = (uint32_t)getpid(),
                   .frame_id = (uint64_t)i,
                   .start_ns = (uint64_t)i * 1000,
                   .duration_ns = 1000000 + (uint64_t)i % 7777};
    snprintf(s.stage, sizeof(s.stage), "%s", stages[i % 3]);
    if (em_span_pack(&s, dgram) != 0) {
      _exit(2);
    }
    if (report_fd >= 0 && i % BURST == 0 && i > 0) {
      usleep(1000); /* A frame's worth of quiet between bursts. */
    }
    ssize_t n = send(fd, dgram, sizeof(dgram), report_fd >= 0 ? MSG_DONTWAIT : 0);
    if (n != sizeof(dgram)) {
      if (report_fd < 0 || errno != EAGAIN) {
        _exit(2);
      }
      dropped++;
    }
  }
  if (report_fd >= 0 && write(report_fd, &dropped, sizeof(dropped)) != sizeof(dropped)) {
    _exit(3);
  }
  _exit(0);
}

/* The bare receiver: recvmmsg(64) and count. Returns datagrams per second. */
static double bare(const char *path, long count) {
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
  unlink(path);
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    perror("bind");
    exit(1);
  }
  enum { B = 64 };
  static uint8_t bufs[B][EM_SPAN_DGRAM_BYTES + 1];
  struct iovec iov[B];
  struct mmsghdr msgs[B];
  for (int i = 0; i < B; i++) {
    iov[i] = (struct iovec){.iov_base = bufs[i], .iov_len = sizeof(bufs[i])};
    msgs[i] = (struct mmsghdr){.msg_hdr = {.msg_iov = &iov[i], .msg_iovlen = 1}};
  }
  pid_t sender = start_sender(path, count, -1);
  long got = 0;
  uint64_t t0 = 0;
  while (got < count) {
    int n = recvmmsg(fd, msgs, B, MSG_WAITFORONE, NULL);
    if (n > 0) {
      if (got == 0) {
        t0 = bench_now_ns();
      }
      got += n;
    }
  }
  double rate = (double)(count - 1) / ((double)(bench_now_ns() - t0) / 1e9);
  waitpid(sender, NULL, 0);
  close(fd);
  unlink(path);
  return rate;
}

typedef struct {
  long count;
  long got;
  uint64_t t0, t1;
  uv_loop_t *loop;
} run_t;

static void on_span(void *ctx, const em_span_t *span, const struct ucred *who,
                    em_stage_stats_t *st) {
  (void)span, (void)who, (void)st;
  run_t *r = ctx;
  if (r->got++ == 0) {
    r->t0 = bench_now_ns();
  }
  if (r->got == r->count) {
    r->t1 = bench_now_ns();
    uv_stop(r->loop);
  }
}

static void on_closed(void *ctx) {
  (void)ctx;
}

/* Burst mode: stops the loop once the sender has exited (its datagrams are all queued). */
static void reap(uv_timer_t *t) {
  pid_t *sender = t->data;
  if (waitpid(*sender, NULL, WNOHANG) == *sender) {
    uv_stop(t->loop);
  }
}

/* The agent's ingest module on a libuv loop. Returns datagrams per second. */
static double agent(const char *path, long count, bool burst) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  run_t r = {.count = count, .loop = &loop};
  em_spans_opts_t o = {
      .path = path, .mode = 0600, .gid = -1, .max_stages = 32, .on_span = on_span, .ctx = &r};
  em_spans_t *s = NULL;
  int rc = em_spans_new(&s, &loop, &o);
  if (rc) {
    fprintf(stderr, "em_spans_new: %s\n", strerror(-rc));
    exit(1);
  }
  int fds[2] = {-1, -1};
  if (burst && pipe(fds) != 0) {
    perror("pipe");
    exit(1);
  }
  pid_t sender = start_sender(path, count, fds[1]);
  if (burst) {
    long dropped = 0;
    uv_timer_t reaper;
    uv_timer_init(&loop, &reaper);
    reaper.data = &sender;
    uv_timer_start(&reaper, reap, 5, 5);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_close((uv_handle_t *)&reaper, NULL);
    uv_run(&loop, UV_RUN_NOWAIT);
    if (read(fds[0], &dropped, sizeof(dropped)) != sizeof(dropped)) {
      dropped = -1;
    }
    close(fds[0]);
    close(fds[1]);
    r.t1 = (uint64_t)dropped; /* Burst mode: report the drops, not a rate. */
    r.t0 = em_spans_counts(s)->received;
  } else {
    uv_run(&loop, UV_RUN_DEFAULT);
    waitpid(sender, NULL, 0);
  }
  if (!burst && em_spans_counts(s)->received != (uint64_t)count) {
    fprintf(stderr, "agent: received %llu of %ld\n",
            (unsigned long long)em_spans_counts(s)->received, count);
  }
  em_spans_close(s, on_closed, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  em_spans_free(s);
  uv_loop_close(&loop);
  if (burst) {
    printf(
        "bursts of %d non-blocking sends, %ld in all: %llu dropped at the sender (EAGAIN, %.1f%%), "
        "%llu received\n",
        BURST, count, (unsigned long long)r.t1, 100.0 * (double)r.t1 / (double)count,
        (unsigned long long)r.t0);
    return 0;
  }
  return (double)(count - 1) / ((double)(r.t1 - r.t0) / 1e9);
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  long count = 1000000;
  int rounds = 5;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
      count = atol(argv[++i]);
    } else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      rounds = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: bench_ingest [--count N] [--rounds R]\n");
      return strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  if (rounds < 1 || rounds > 64 || count < 2) {
    fprintf(stderr, "bench_ingest: bad --count or --rounds\n");
    return 2;
  }
  char qlen[32] = "?";
  FILE *f = fopen("/proc/sys/net/unix/max_dgram_qlen", "r");
  if (f) {
    if (!fgets(qlen, sizeof(qlen), f)) {
      qlen[0] = '\0';
    }
    fclose(f);
    qlen[strcspn(qlen, "\n")] = '\0';
  }
  char path[64];
  snprintf(path, sizeof(path), "/tmp/em-bench-ingest-%d.sock", (int)getpid());
  double a[64], b[64];
  for (int r = 0; r < rounds; r++) {
    b[r] = bare(path, count);
    a[r] = agent(path, count, false);
  }
  qsort(a, (size_t)rounds, sizeof(double), cmp_d);
  qsort(b, (size_t)rounds, sizeof(double), cmp_d);
  printf("max_dgram_qlen %s, %ld datagrams x %d rounds, blocking sender in its own process\n", qlen,
         count, rounds);
  printf("%-34s %12s %12s %12s\n", "receiver", "min /s", "median /s", "max /s");
  printf("%-34s %12.0f %12.0f %12.0f\n", "bare recvmmsg(64), count only", b[0], b[rounds / 2],
         b[rounds - 1]);
  printf("%-34s %12.0f %12.0f %12.0f\n", "agent ingest (em_spans on libuv)", a[0], a[rounds / 2],
         a[rounds - 1]);
  printf("agent / bare (medians): %.2f\n", a[rounds / 2] / b[rounds / 2]);
  agent(path, 32000, true);
  return 0;
}
