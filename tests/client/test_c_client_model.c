/*
 * test_c_client_model.c - em_client_set_model of the header-only C client against a real unix
 * socket in the agent's place: what it sends is read back with proto's reference unpacker
 * (em_model_dgram_unpack) and compared with the golden vector; bad labels and names are dropped
 * and counted; a send that fails is sent again by the agent check on the span path.
 */
#define _GNU_SOURCE /* mkdtemp under -std=c11. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "edgemon/wire.h"
#include "edgemon_client.h"

typedef struct {
  char dir[40];
  char path[100];
  int fd; /* The agent's side: a bound datagram socket, or -1. */
} peer_t;

static void peer_bind(peer_t *p) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", p->path);
  p->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  assert_true(p->fd >= 0);
  assert_int_equal(bind(p->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
}

static int setup(void **state) {
  peer_t *p = calloc(1, sizeof(*p));
  snprintf(p->dir, sizeof(p->dir), "/tmp/em-model-XXXXXX");
  assert_non_null(mkdtemp(p->dir));
  snprintf(p->path, sizeof(p->path), "%s/spans.sock", p->dir);
  p->fd = -1;
  *state = p;
  return 0;
}

static int teardown(void **state) {
  peer_t *p = *state;
  if (p->fd >= 0) {
    close(p->fd);
  }
  unlink(p->path);
  rmdir(p->dir);
  free(p);
  return 0;
}

/* The next datagram of the peer, into buf; its length, or -1 when none is queued. */
static ssize_t peer_recv(peer_t *p, uint8_t *buf, size_t cap) {
  return recv(p->fd, buf, cap, MSG_DONTWAIT);
}

static void sends_the_documented_datagram_sorted_and_valid(void **state) {
  peer_t *p = *state;
  peer_bind(p);
  em_client_t c;
  assert_int_equal(em_client_open(&c, p->path), 0);
  const em_client_label_t labels[] = {{"variant", "full"}, {"site", "lab-3"}};
  assert_int_equal(em_client_set_model(&c, "mobilenet_v3_small", "1.4", labels, 2), 0);
  uint8_t got[EM_MODEL_DGRAM_BYTES + 1];
  assert_int_equal(peer_recv(p, got, sizeof(got)), EM_MODEL_DGRAM_BYTES);
  em_model_dgram_t d;
  assert_int_equal(em_model_dgram_unpack(got, EM_MODEL_DGRAM_BYTES, &d), 0);
  assert_int_equal(d.pid, (uint32_t)getpid());
  /* The golden vector, but for the pid: byte for byte what proto's packer writes. */
  char vec[512];
  snprintf(vec, sizeof(vec), "%s/wire/model.bin", EM_VECTORS_DIR);
  FILE *f = fopen(vec, "rb");
  assert_non_null(f);
  uint8_t want[EM_MODEL_DGRAM_BYTES];
  assert_int_equal(fread(want, 1, sizeof(want), f), sizeof(want));
  fclose(f);
  memcpy(want + 4, got + 4, 4);
  assert_memory_equal(got, want, EM_MODEL_DGRAM_BYTES);
  assert_int_equal(c.model_counters[EM_CLIENT_MODEL_SENT], 1);
  assert_int_equal(c.model_pending, 0);
  em_client_close(&c);
}

static void bad_labels_are_dropped_and_bad_names_drop_the_call(void **state) {
  peer_t *p = *state;
  peer_bind(p);
  em_client_t c;
  assert_int_equal(em_client_open(&c, p->path), 0);
  const em_client_label_t labels[] = {
      {"bad-key", "x"}, {"1st", "x"},    {"__x", "x"}, {"abcdefghijklmnop", "x"},
      {"empty", ""},    {"tab", "a\tb"}, {NULL, "x"},  {"site", NULL},
      {"a", "1"},       {"a", "2"},      {"b", "1"},   {"c", "1"},
      {"d", "1"},       {"e", "1"},      {"f", "1"},   {"g", "1"},
      {"h", "1"},       {"i", "1"}};
  assert_int_equal(em_client_set_model(&c, "m", "1", labels, sizeof(labels) / sizeof(labels[0])),
                   0);
  /* 8 invalid, "a" twice (1 more invalid), a..h kept, "i" past the 8th. */
  assert_int_equal(c.model_counters[EM_CLIENT_MODEL_INVALID_LABEL], 9);
  assert_int_equal(c.model_counters[EM_CLIENT_MODEL_LABELS_OVER_LIMIT], 1);
  uint8_t got[EM_MODEL_DGRAM_BYTES];
  assert_int_equal(peer_recv(p, got, sizeof(got)), EM_MODEL_DGRAM_BYTES);
  em_model_dgram_t d;
  assert_int_equal(em_model_dgram_unpack(got, sizeof(got), &d), 0);
  assert_int_equal(d.n_labels, 8);
  assert_string_equal(d.labels[0].key, "a");
  assert_string_equal(d.labels[0].value, "1");
  assert_string_equal(d.labels[7].key, "h");

  char long_name[65];
  memset(long_name, 'n', 64);
  long_name[64] = '\0';
  assert_int_equal(em_client_set_model(&c, long_name, "1", NULL, 0), -EINVAL);
  assert_int_equal(em_client_set_model(&c, "", "1", NULL, 0), -EINVAL);
  assert_int_equal(em_client_set_model(&c, "m", "tab\there", NULL, 0), -EINVAL);
  assert_int_equal(em_client_set_model(&c, NULL, NULL, NULL, 0), -EINVAL);
  assert_int_equal(c.model_counters[EM_CLIENT_MODEL_INVALID_MODEL], 4);
  assert_int_equal(c.model_counters[EM_CLIENT_MODEL_CALLS], 5);
  assert_int_equal(peer_recv(p, got, sizeof(got)), -1); /* nothing more was sent */
  em_client_close(&c);
  assert_int_equal(em_client_set_model(&c, "m", "1", NULL, 0), -EINVAL); /* closed */
}

static void a_failed_send_is_sent_again_by_the_agent_check(void **state) {
  peer_t *p = *state;
  em_client_t c;
  assert_int_equal(em_client_open(&c, p->path), 0); /* no agent yet */
  assert_int_equal(em_client_set_model(&c, "resnet18", "2", NULL, 0), 0);
  assert_int_equal(c.model_counters[EM_CLIENT_MODEL_SEND_FAILED], 1);
  assert_int_equal(c.model_pending, 1);
  peer_bind(p);           /* the agent comes up */
  c.dl_next_check_ns = 0; /* the check is due (it runs at most once a second) */
  c.next_connect_ns = 0;
  (void)em_client_record(&c, "infer", em_client_now_ns(), 1000);
  uint8_t got[EM_MODEL_DGRAM_BYTES + 1];
  int models = 0;
  ssize_t n;
  while ((n = peer_recv(p, got, sizeof(got))) >= 0) {
    if (n == (ssize_t)EM_MODEL_DGRAM_BYTES) {
      em_model_dgram_t d;
      assert_int_equal(em_model_dgram_unpack(got, (size_t)n, &d), 0);
      assert_string_equal(d.name, "resnet18");
      models++;
    }
  }
  assert_int_equal(models, 1);
  assert_int_equal(c.model_pending, 0);
  assert_int_equal(c.model_counters[EM_CLIENT_MODEL_SENT], 1);
  em_client_close(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(sends_the_documented_datagram_sorted_and_valid, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(bad_labels_are_dropped_and_bad_names_drop_the_call, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_failed_send_is_sent_again_by_the_agent_check, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
