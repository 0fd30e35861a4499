/*
 * bench_c_client.c - what one span costs the inference thread with the header-only C client
 * (firmware/client/c/edgemon_client.h): on the span ring v2 path (the thread's ring, acked) and
 * on the datagram v1 path (one send() per span), median of rounds, in ns per span.
 *
 * The process plays the agent's registration side itself on a real AF_UNIX socket: it writes a
 * deadline page (proto's em_deadline_page_*, one hard deadline on "infer" that no span misses,
 * so the lookup is paid), receives the register datagram with the memfd and acks it. The
 * datagram path uses a second socket in a directory with no deadline page, drained by a
 * receiver thread so that sends are not refused. Measured, per span:
 *   ring span:     em_client_span_begin + em_client_span_end (two clock reads, one slot)
 *   ring record:   em_client_record with the caller's timestamps (one slot, no clock read)
 *   dgram span:    em_client_span_begin + em_client_span_end as datagrams v1
 *   clock pair:    two em_client_now_ns() (what begin/end read), for reference
 *
 *   bench_c_client [--rounds N] [--spans M]      (defaults: 15 rounds of 1,000,000 ring spans;
 *                                                  datagram rounds are M / 20 spans)
 */
#define _GNU_SOURCE

#include "edgemon_client.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "edgemon/ring.h"

#define MAX_ROUNDS 101

typedef struct {
  char dir[64];
  char path[EM_CLIENT_PATH_BYTES];
  int fd;
} sock_dir_t;

static int bind_in_new_dir(sock_dir_t *s) {
  struct sockaddr_un addr;
  snprintf(s->dir, sizeof(s->dir), "/tmp/em-bench-c-XXXXXX");
  if (mkdtemp(s->dir) == NULL) {
    return -1;
  }
  snprintf(s->path, sizeof(s->path), "%s/spans.sock", s->dir);
  s->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, s->path, strlen(s->path) + 1);
  if (s->fd < 0 || bind(s->fd, (const struct sockaddr *)&addr, sizeof(addr)) != 0) {
    return -1;
  }
  return 0;
}

static int write_deadline_page(const sock_dir_t *s) {
  static _Alignas(8) uint8_t page[EM_DEADLINE_PAGE_BYTES];
  em_deadline_t entry;
  char path[128];
  FILE *f;
  memset(&entry, 0, sizeof(entry));
  snprintf(entry.stage, sizeof(entry.stage), "infer");
  entry.deadline_ns = 3600ull * 1000000000ull;
  if (em_deadline_page_init(page, (uint32_t)getpid(), 1024) != 0 ||
      em_deadline_page_write(page, &entry, 1) != 0) {
    return -1;
  }
  snprintf(path, sizeof(path), "%s/deadlines", s->dir);
  f = fopen(path, "wb");
  if (f == NULL) {
    return -1;
  }
  if (fwrite(page, 1, sizeof(page), f) != sizeof(page)) {
    fclose(f);
    return -1;
  }
  return fclose(f);
}

/* Receives datagrams until the register: acks it (status 0). Keeps the memfd open. */
static int ack_register(const sock_dir_t *s) {
  for (int i = 0; i < 16; i++) {
    uint8_t buf[128];
    union {
      struct cmsghdr align;
      char bytes[CMSG_SPACE(sizeof(int))];
    } control;
    struct sockaddr_un from;
    struct iovec iov = {buf, sizeof(buf)};
    struct msghdr msg;
    em_ring_dgram_t d;
    ssize_t n;
    memset(&msg, 0, sizeof(msg));
    msg.msg_name = &from;
    msg.msg_namelen = sizeof(from);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.bytes;
    msg.msg_controllen = sizeof(control.bytes);
    n = recvmsg(s->fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) {
      return -1;
    }
    if (em_ring_dgram_unpack(buf, (size_t)n, &d) != 0 || d.kind != EM_DGRAM_RING_REGISTER) {
      continue;
    }
    memset(&d, 0, sizeof(d));
    d.kind = EM_DGRAM_RING_ACK;
    d.pid = (uint32_t)getpid();
    d.start = em_client__get_u64(buf + 8);
    d.ring_id = 1;
    if (em_ring_dgram_pack(&d, buf) != 0 ||
        sendto(s->fd, buf, EM_SPAN_DGRAM_BYTES, 0, (const struct sockaddr *)&from,
               msg.msg_namelen) != (ssize_t)EM_SPAN_DGRAM_BYTES) {
      return -1;
    }
    return 0;
  }
  return -1;
}

static void *drain_main(void *arg) {
  const sock_dir_t *s = (const sock_dir_t *)arg;
  uint8_t buf[128];
  while (recv(s->fd, buf, sizeof(buf), 0) > 0) {
  }
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a;
  double y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(v[0]), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

static double round_spans(em_client_t *c, long spans) {
  uint64_t t0 = em_client_now_ns();
  for (long i = 0; i < spans; i++) {
    em_client_span_t s = em_client_span_begin(c, "infer");
    (void)em_client_span_end(&s);
  }
  return (double)(em_client_now_ns() - t0) / (double)spans;
}

static double round_clock_pairs(long spans) {
  uint64_t t0 = em_client_now_ns();
  volatile uint64_t sink = 0;
  for (long i = 0; i < spans; i++) {
    sink += em_client_now_ns();
    sink += em_client_now_ns();
  }
  (void)sink;
  return (double)(em_client_now_ns() - t0) / (double)spans;
}

static double round_records(em_client_t *c, long spans) {
  uint64_t t0 = em_client_now_ns();
  for (long i = 0; i < spans; i++) {
    (void)em_client_record(c, "infer", t0 + (uint64_t)i, 100);
  }
  return (double)(em_client_now_ns() - t0) / (double)spans;
}

int main(int argc, char **argv) {
  int rounds = 15;
  long spans = 1000000;
  sock_dir_t ring_dir = {0};
  sock_dir_t dgram_dir = {0};
  em_client_t ring_client;
  em_client_t dgram_client;
  pthread_t drainer;
  double ring_span[MAX_ROUNDS];
  double ring_record[MAX_ROUNDS];
  double dgram_span[MAX_ROUNDS];
  double clock_pair[MAX_ROUNDS];
  uint64_t written_before;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--rounds") == 0) {
      rounds = atoi(argv[i + 1]);
    } else if (strcmp(argv[i], "--spans") == 0) {
      spans = atol(argv[i + 1]);
    }
  }
  if (rounds < 1 || rounds > MAX_ROUNDS || spans < 20) {
    fprintf(stderr, "usage: bench_c_client [--rounds 1..%d] [--spans >= 20]\n", MAX_ROUNDS);
    return 2;
  }
  if (bind_in_new_dir(&ring_dir) != 0 || write_deadline_page(&ring_dir) != 0 ||
      bind_in_new_dir(&dgram_dir) != 0) {
    perror("bench_c_client: setup");
    return 1;
  }

  /* Ring: the first span registers (and goes as a datagram); the ack makes the ring live. */
  em_client_open(&ring_client, ring_dir.path);
  (void)em_client_record(&ring_client, "infer", em_client_now_ns(), 1);
  if (ack_register(&ring_dir) != 0) {
    fprintf(stderr, "bench_c_client: no register datagram\n");
    return 1;
  }
  (void)em_client_record(&ring_client, "infer", em_client_now_ns(), 1);
  if (ring_client.ring_counters[EM_CLIENT_RING_ACCEPTED] != 1) {
    fprintf(stderr, "bench_c_client: the ring is not live\n");
    return 1;
  }
  written_before = ring_client.ring_counters[EM_CLIENT_RING_WRITTEN];
  for (int r = 0; r < rounds; r++) {
    ring_span[r] = round_spans(&ring_client, spans);
    ring_record[r] = round_records(&ring_client, spans);
    clock_pair[r] = round_clock_pairs(spans);
  }
  if (ring_client.ring_counters[EM_CLIENT_RING_WRITTEN] - written_before !=
      2ull * (uint64_t)rounds * (uint64_t)spans) {
    fprintf(stderr, "bench_c_client: spans left the ring path\n");
    return 1;
  }

  /* Datagrams v1: no deadline page beside this socket. */
  pthread_create(&drainer, NULL, drain_main, &dgram_dir);
  em_client_open(&dgram_client, dgram_dir.path);
  for (int r = 0; r < rounds; r++) {
    dgram_span[r] = round_spans(&dgram_client, spans / 20);
  }

  printf("bench_c_client: %d rounds; ring %ld spans/round, datagram %ld spans/round\n", rounds,
         spans, spans / 20);
  printf("ring span   (span_begin/end)  median %.1f ns/span\n", median(ring_span, rounds));
  printf("ring record (record, no clock) median %.1f ns/span\n", median(ring_record, rounds));
  printf("dgram span  (span_begin/end)  median %.1f ns/span (sent %llu, dropped %llu)\n",
         median(dgram_span, rounds), (unsigned long long)dgram_client.sent,
         (unsigned long long)em_client_dropped_total(&dgram_client));
  printf("two clock reads (em_client_now_ns x2) median %.1f ns: inside every span figure\n",
         median(clock_pair, rounds));

  em_client_close(&ring_client);
  em_client_close(&dgram_client);
  shutdown(dgram_dir.fd, SHUT_RDWR);
  close(dgram_dir.fd);
  close(ring_dir.fd);
  unlink(ring_dir.path);
  unlink(dgram_dir.path);
  {
    char path[128];
    snprintf(path, sizeof(path), "%s/deadlines", ring_dir.dir);
    unlink(path);
  }
  rmdir(ring_dir.dir);
  rmdir(dgram_dir.dir);
  return 0;
}
