/*
 * test_c_client_state.c - the level readers of the header-only C client
 * (firmware/client/c/edgemon_client.h): em_client_level / em_client_state on the state page,
 * em_client_subscribe / em_client_wait_change / em_client_unsubscribe for level pushes.
 *
 * The test plays the agent with proto's reference writer: it formats the page with
 * em_state_page_init in a temporary file, renames it into place, and publishes records with
 * em_state_page_write through its own read-write mapping; pushes are packed with em_push_pack
 * and sent from a bound socket standing in for the agent's span socket, which decodes the
 * client's (un)subscribe datagrams with em_span_unpack. Covered: every field; changes read
 * through the one mapping; a write in progress (odd seq) -> EBUSY or the last consistent
 * record, then the new one; absent, short and garbled pages; the slow path following a new
 * agent's page and its removal; no access to the path on the fast path; the default path;
 * subscribe from an autobound address, a push, a timeout, invalid datagrams skipped,
 * unsubscribe from the same address; no agent.
 */
#define _GNU_SOURCE /* mkdtemp, setenv under -std=c11. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include "edgemon/wire.h"
#include "edgemon_client.h"

#include "bound_socket.h"

/* ---- The agent's side ---- */

typedef struct {
  char dir[64];
  char page_path[128];
  char sock_path[128];
  uint8_t *page; /* the writer's read-write mapping */
  int sock;      /* the agent's span socket, -1 until agent_listen */
} agent_t;

static em_state_record_t record_of(em_level_t level, em_level_t prev, uint32_t changes) {
  em_state_record_t rec;
  memset(&rec, 0, sizeof(rec));
  rec.level = level;
  rec.prev_level = prev;
  rec.changes = changes;
  rec.since_mono_ns = 5000000000123ull;
  rec.since_wall_ns = 1718000000123456789ull;
  rec.value = 41.5;
  rec.bound = 33.0;
  snprintf(rec.rule, sizeof(rec.rule), "infer.p99");
  snprintf(rec.stage, sizeof(rec.stage), "infer");
  snprintf(rec.reason, sizeof(rec.reason), "p99 41.5 ms > 33 ms budget for %u windows",
           (unsigned)changes);
  return rec;
}

/* Formats a fresh page (temp file + rename, as the agent does) and maps it read-write. */
static void agent_format(agent_t *a, uint32_t agent_pid, const em_state_record_t *initial) {
  char tmp[160];
  int fd;
  void *map;
  snprintf(tmp, sizeof(tmp), "%s.tmp", a->page_path);
  fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, EM_STATE_PAGE_BYTES), 0);
  map = mmap(NULL, EM_STATE_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  assert_true(map != MAP_FAILED);
  close(fd);
  assert_int_equal(em_state_page_init((uint8_t *)map, agent_pid, initial), 0);
  assert_int_equal(rename(tmp, a->page_path), 0);
  if (a->page != NULL) {
    munmap(a->page, EM_STATE_PAGE_BYTES);
  }
  a->page = (uint8_t *)map;
}

static void agent_open(agent_t *a) {
  em_state_record_t rec = record_of(EM_LEVEL_NOMINAL, EM_LEVEL_NOMINAL, 0);
  memset(a, 0, sizeof(*a));
  a->sock = -1;
  snprintf(a->dir, sizeof(a->dir), "/tmp/em-c-state-XXXXXX");
  assert_non_null(mkdtemp(a->dir));
  snprintf(a->page_path, sizeof(a->page_path), "%s/state", a->dir);
  snprintf(a->sock_path, sizeof(a->sock_path), "%s/spans.sock", a->dir);
  agent_format(a, 4242, &rec);
}

static void agent_write(agent_t *a, const em_state_record_t *rec) {
  assert_int_equal(em_state_page_write(a->page, rec), 0);
}

static uint32_t agent_seq(const agent_t *a) {
  uint32_t seq;
  memcpy(&seq, a->page + 8, sizeof(seq));
  return seq;
}

static void agent_set_seq(agent_t *a, uint32_t seq) {
  memcpy(a->page + 8, &seq, sizeof(seq));
}

static void agent_listen(agent_t *a) {
  a->sock = bound_socket(a->sock_path, SOCK_DGRAM);
}

/* Receives one (un)subscribe datagram, checks it, returns its kind and source address. */
static em_dgram_kind_t agent_recv_request(const agent_t *a, struct sockaddr_un *from,
                                          socklen_t *from_len) {
  uint8_t buf[128];
  em_span_t span;
  ssize_t n;
  *from_len = (socklen_t)sizeof(*from);
  n = recvfrom(a->sock, buf, sizeof(buf), 0, (struct sockaddr *)from, from_len);
  assert_int_equal(n, EM_SPAN_DGRAM_BYTES);
  assert_int_equal(em_span_unpack(buf, (size_t)n, &span), 0);
  assert_int_equal(span.pid, (uint32_t)getpid());
  assert_string_equal(span.stage, "");
  return span.kind;
}

static void agent_push(const agent_t *a, const struct sockaddr_un *to, socklen_t to_len,
                       const uint8_t *buf, size_t len) {
  assert_int_equal(sendto(a->sock, buf, len, 0, (const struct sockaddr *)to, to_len), (ssize_t)len);
}

static void agent_close(agent_t *a) {
  if (a->page != NULL) {
    munmap(a->page, EM_STATE_PAGE_BYTES);
  }
  if (a->sock >= 0) {
    close(a->sock);
    unlink(a->sock_path);
  }
  unlink(a->page_path);
  rmdir(a->dir);
}

/* A client reading the agent's page; its span socket path is the agent's (maybe unbound). */
static void client_open_at(em_client_t *c, const agent_t *a) {
  assert_int_equal(em_client_open(c, a->sock_path), 0);
  assert_int_equal(em_client_set_state_path(c, a->page_path), 0);
}

static void assert_same_record(const em_client_state_t *got, const em_state_record_t *want) {
  assert_int_equal(got->level, (int)want->level);
  assert_int_equal(got->prev_level, (int)want->prev_level);
  assert_int_equal(got->changes, want->changes);
  assert_int_equal(got->since_mono_ns, want->since_mono_ns);
  assert_int_equal(got->since_wall_ns, want->since_wall_ns);
  if (isnan(want->value)) {
    assert_true(isnan(got->value));
  } else {
    assert_true(got->value == want->value);
  }
  if (isnan(want->bound)) {
    assert_true(isnan(got->bound));
  } else {
    assert_true(got->bound == want->bound);
  }
  assert_string_equal(got->rule, want->rule);
  assert_string_equal(got->stage, want->stage);
  assert_string_equal(got->reason, want->reason);
}

/* ---- The state page ---- */

static void level_and_every_field(void **state) {
  agent_t a;
  em_client_t c;
  em_client_state_t got;
  em_state_record_t rec = record_of(EM_LEVEL_DEGRADED, EM_LEVEL_NOMINAL, 3);
  (void)state;
  agent_open(&a);
  agent_write(&a, &rec);
  client_open_at(&c, &a);
  assert_int_equal(em_client_level(&c), EM_CLIENT_LEVEL_DEGRADED);
  assert_string_equal(em_client_level_name(em_client_level(&c)), "DEGRADED");
  assert_int_equal(em_client_state(&c, &got), 0);
  assert_same_record(&got, &rec);
  assert_int_equal(got.agent_pid, 4242);
  assert_int_equal(got.seq, 2);
  assert_int_equal(c.page_counters[EM_CLIENT_PAGE_OPENS], 1);

  rec = record_of(EM_LEVEL_NOMINAL, EM_LEVEL_WARN, 4);
  rec.value = NAN;
  rec.bound = NAN;
  rec.rule[0] = rec.stage[0] = rec.reason[0] = '\0';
  agent_write(&a, &rec);
  assert_int_equal(em_client_state(&c, &got), 0);
  assert_same_record(&got, &rec);
  assert_int_equal(got.seq, 4);
  assert_null(em_client_level_name(EM_CLIENT_LEVEL_UNKNOWN));
  em_client_close(&c);
  agent_close(&a);
}

static void changes_are_read_through_one_mapping_without_the_path(void **state) {
  agent_t a;
  em_client_t c;
  const uint8_t *mapping;
  char moved[160];
  (void)state;
  agent_open(&a);
  client_open_at(&c, &a);
  assert_int_equal(em_client_level(&c), EM_CLIENT_LEVEL_NOMINAL);
  mapping = c.page;
  assert_non_null(mapping);
  /* No look at the path before the once-per-second check is due: move the file away, and the
   * reads still come from the mapping (a read that touched the path would find nothing). */
  c.page_next_check_ns = UINT64_MAX;
  snprintf(moved, sizeof(moved), "%s.moved", a.page_path);
  assert_int_equal(rename(a.page_path, moved), 0);
  for (uint32_t n = 1; n <= 1000; n++) {
    em_state_record_t rec = record_of((em_level_t)(n % 4), (em_level_t)((n - 1) % 4), n);
    agent_write(&a, &rec);
    assert_int_equal(em_client_level(&c), (int)(n % 4));
  }
  for (int i = 0; i < 100000; i++) {
    assert_int_equal(em_client_level(&c), 1000 % 4);
  }
  assert_ptr_equal(c.page, mapping);
  assert_int_equal(c.page_counters[EM_CLIENT_PAGE_OPENS], 1);
  assert_int_equal(c.page_counters[EM_CLIENT_PAGE_ABSENT], 0);
  /* Once due, the slow path notices the page is gone: the level is unknown. */
  c.page_next_check_ns = 0;
  assert_int_equal(em_client_level(&c), EM_CLIENT_LEVEL_UNKNOWN);
  assert_null(c.page);
  assert_int_equal(rename(moved, a.page_path), 0);
  em_client_close(&c);
  agent_close(&a);
}

static void write_in_progress_is_retried_then_read(void **state) {
  agent_t a;
  em_client_t c, fresh;
  em_client_state_t got;
  em_state_record_t warn = record_of(EM_LEVEL_WARN, EM_LEVEL_NOMINAL, 1);
  em_state_record_t crit = record_of(EM_LEVEL_CRITICAL, EM_LEVEL_WARN, 2);
  uint32_t seq;
  (void)state;
  agent_open(&a);
  agent_write(&a, &warn);
  client_open_at(&c, &a);
  assert_int_equal(em_client_state(&c, &got), 0);
  assert_int_equal(got.seq, 2);

  seq = agent_seq(&a);
  agent_set_seq(&a, seq + 1); /* odd: a write in progress (the agent stopped mid-write) */
  /* A client with an earlier consistent read gets that one; the busy read is counted. */
  assert_int_equal(em_client_state(&c, &got), 0);
  assert_same_record(&got, &warn);
  assert_int_equal(got.seq, 2);
  assert_int_equal(em_client_level(&c), EM_CLIENT_LEVEL_WARN);
  assert_int_equal(c.page_counters[EM_CLIENT_PAGE_BUSY], 2);
  /* A client that never read it consistently gets EBUSY / unknown. */
  client_open_at(&fresh, &a);
  assert_int_equal(em_client_state(&fresh, &got), -EBUSY);
  assert_int_equal(em_client_level(&fresh), EM_CLIENT_LEVEL_UNKNOWN);
  assert_int_equal(fresh.page_counters[EM_CLIENT_PAGE_BUSY], 2);

  agent_set_seq(&a, seq); /* the write finishes: */
  agent_write(&a, &crit);
  assert_int_equal(em_client_state(&c, &got), 0);
  assert_same_record(&got, &crit);
  assert_int_equal(got.seq, 4);
  assert_int_equal(em_client_level(&fresh), EM_CLIENT_LEVEL_CRITICAL);
  em_client_close(&fresh);
  em_client_close(&c);
  agent_close(&a);
}

static void write_file(const char *path, const uint8_t *buf, size_t len) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  if (len > 0) {
    assert_int_equal(fwrite(buf, 1, len, f), len);
  }
  assert_int_equal(fclose(f), 0);
}

static void not_a_page_is_unknown_and_counted(void **state) {
  agent_t a;
  uint8_t good[EM_STATE_PAGE_BYTES];
  uint8_t buf[EM_STATE_PAGE_BYTES + 1];
  struct {
    size_t offset; /* byte to change, or SIZE_MAX for none */
    uint8_t value;
    size_t len;
  } cases[] = {
      {SIZE_MAX, 0, 0},                       /* empty */
      {SIZE_MAX, 0, 100},                     /* short */
      {SIZE_MAX, 0, EM_STATE_PAGE_BYTES + 1}, /* long */
      {0, 'X', EM_STATE_PAGE_BYTES},          /* magic */
      {4, 2, EM_STATE_PAGE_BYTES},            /* version */
      {7, 2, EM_STATE_PAGE_BYTES},            /* page_size 512 */
  };
  (void)state;
  agent_open(&a);
  memcpy(good, a.page, sizeof(good));
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    em_client_t c;
    em_client_state_t got;
    memset(buf, 0, sizeof(buf));
    memcpy(buf, good, sizeof(good));
    if (cases[i].offset != SIZE_MAX) {
      buf[cases[i].offset] = cases[i].value;
    }
    write_file(a.page_path, buf, cases[i].len);
    client_open_at(&c, &a);
    assert_int_equal(em_client_level(&c), EM_CLIENT_LEVEL_UNKNOWN);
    assert_int_equal(em_client_state(&c, &got), -ENOENT);
    assert_int_equal(c.page_counters[EM_CLIENT_PAGE_INVALID], 1);
    assert_null(c.page);
    em_client_close(&c);
  }
  agent_close(&a);
}

static void garbled_record_is_unknown_and_counted(void **state) {
  const size_t offsets[] = {16, 17, 18, 16 + 40 + 31, 16 + 40 + 20, 16 + 72, 16 + 104 + 135};
  const uint8_t values[] = {4, 9, 1, 'A', 'A', ' ', 'A'};
  (void)state;
  for (size_t i = 0; i < sizeof(offsets) / sizeof(offsets[0]); i++) {
    agent_t a;
    em_client_t c;
    em_client_state_t got;
    agent_open(&a);
    a.page[offsets[i]] = values[i];
    client_open_at(&c, &a);
    assert_int_equal(em_client_state(&c, &got), -EBADMSG);
    assert_int_equal(em_client_level(&c), EM_CLIENT_LEVEL_UNKNOWN);
    assert_int_equal(c.page_counters[EM_CLIENT_PAGE_INVALID], 2);
    em_client_close(&c);
    agent_close(&a);
  }
}

static void absent_page_is_looked_for_once_per_second(void **state) {
  em_client_t c;
  em_client_state_t got;
  (void)state;
  assert_int_equal(em_client_open(&c, "/nonexistent/spans.sock"), 0);
  assert_int_equal(em_client_set_state_path(&c, "/nonexistent/edgemon/state"), 0);
  for (int i = 0; i < 1000; i++) {
    assert_int_equal(em_client_level(&c), EM_CLIENT_LEVEL_UNKNOWN);
  }
  assert_int_equal(em_client_state(&c, &got), -ENOENT);
  assert_int_equal(c.page_counters[EM_CLIENT_PAGE_ABSENT], 1);
  assert_int_equal(em_client_state(NULL, &got), -EINVAL);
  assert_int_equal(em_client_level(NULL), EM_CLIENT_LEVEL_UNKNOWN);
  em_client_close(&c);
}

static void new_agent_page_is_followed(void **state) {
  agent_t a;
  em_client_t c;
  em_client_state_t got;
  em_state_record_t rec = record_of(EM_LEVEL_CRITICAL, EM_LEVEL_DEGRADED, 7);
  (void)state;
  agent_open(&a);
  agent_write(&a, &rec);
  client_open_at(&c, &a);
  assert_int_equal(em_client_state(&c, &got), 0);
  assert_int_equal(got.agent_pid, 4242);
  rec = record_of(EM_LEVEL_NOMINAL, EM_LEVEL_NOMINAL, 0);
  agent_format(&a, 5353, &rec); /* a new agent renames its new page into place */
  assert_int_equal(em_client_state(&c, &got), 0);
  assert_int_equal(got.agent_pid, 4242); /* not due yet: the old mapping */
  c.page_next_check_ns = 0;              /* the second has passed */
  assert_int_equal(em_client_state(&c, &got), 0);
  assert_int_equal(got.agent_pid, 5353);
  assert_int_equal(got.seq, 0);
  assert_same_record(&got, &rec);
  assert_int_equal(c.page_counters[EM_CLIENT_PAGE_OPENS], 2);
  em_client_close(&c);
  agent_close(&a);
}

static void default_state_path(void **state) {
  char buf[EM_CLIENT_STATE_PATH_BYTES];
  char want[64];
  (void)state;
  unsetenv("EDGEMON_STATE_PAGE");
  unsetenv("EDGEMON_RUNTIME_DIR");
  unsetenv("XDG_RUNTIME_DIR");
  assert_int_equal(em_client_default_state_path(buf, sizeof(buf)), 0);
  if (geteuid() == 0) {
    assert_string_equal(buf, "/run/edgemon/state");
  } else {
    snprintf(want, sizeof(want), "/tmp/edgemon-%lu/state", (unsigned long)geteuid());
    assert_string_equal(buf, want);
    setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
    assert_int_equal(em_client_default_state_path(buf, sizeof(buf)), 0);
    assert_string_equal(buf, "/run/user/1000/edgemon/state");
    unsetenv("XDG_RUNTIME_DIR");
  }
  setenv("EDGEMON_RUNTIME_DIR", "/srv/em", 1);
  assert_int_equal(em_client_default_state_path(buf, sizeof(buf)), 0);
  assert_string_equal(buf, "/srv/em/state");
  setenv("EDGEMON_STATE_PAGE", "/dev/shm/em-state", 1);
  assert_int_equal(em_client_default_state_path(buf, sizeof(buf)), 0);
  assert_string_equal(buf, "/dev/shm/em-state");
  {
    em_client_t c;
    assert_int_equal(em_client_open(&c, "/nonexistent/spans.sock"), 0);
    assert_string_equal(c.state_path, "/dev/shm/em-state");
    em_client_close(&c);
  }
  assert_int_equal(em_client_default_state_path(buf, 4), -ENAMETOOLONG);
  unsetenv("EDGEMON_STATE_PAGE");
  unsetenv("EDGEMON_RUNTIME_DIR");
}

/* ---- Pushes ---- */

static void subscribe_push_timeout_unsubscribe(void **state) {
  agent_t a;
  em_client_t c;
  em_client_state_t got;
  struct sockaddr_un from, from2;
  socklen_t from_len, from2_len;
  uint8_t push[EM_PUSH_DGRAM_BYTES];
  em_state_record_t rec = record_of(EM_LEVEL_CRITICAL, EM_LEVEL_DEGRADED, 9);
  (void)state;
  agent_open(&a);
  agent_listen(&a);
  client_open_at(&c, &a);
  assert_int_equal(em_client_subscribe(&c), 0);
  assert_int_equal(agent_recv_request(&a, &from, &from_len), EM_DGRAM_SUBSCRIBE);
  /* Autobound: an abstract address (a NUL, then the kernel's name). */
  assert_true(from_len > (socklen_t)sizeof(sa_family_t));
  assert_int_equal(from.sun_path[0], '\0');

  rec.value = NAN;
  assert_int_equal(em_push_pack(&rec, 31337, push), 0);
  agent_push(&a, &from, from_len, push, sizeof(push));
  memset(&got, 0xAA, sizeof(got));
  assert_int_equal(em_client_wait_change(&c, 5000, &got), 0);
  assert_same_record(&got, &rec);
  assert_int_equal(got.agent_pid, 31337);
  assert_int_equal(got.seq, 0);

  assert_int_equal(em_client_wait_change(&c, 50, &got), -ETIMEDOUT);
  assert_int_equal(em_client_wait_change(&c, 0, &got), -ETIMEDOUT);

  /* Invalid datagrams are skipped and counted; the valid one after them is returned. */
  agent_push(&a, &from, from_len, push, 100);
  push[3] = 17;
  agent_push(&a, &from, from_len, push, sizeof(push));
  push[3] = 16;
  push[16] = 4; /* level 4 */
  agent_push(&a, &from, from_len, push, sizeof(push));
  rec = record_of(EM_LEVEL_WARN, EM_LEVEL_CRITICAL, 10);
  assert_int_equal(em_push_pack(&rec, 31337, push), 0);
  agent_push(&a, &from, from_len, push, sizeof(push));
  assert_int_equal(em_client_wait_change(&c, 5000, &got), 0);
  assert_same_record(&got, &rec);
  assert_int_equal(c.push_invalid, 3);

  assert_int_equal(em_client_subscribe(&c), 0); /* again: the same address */
  assert_int_equal(agent_recv_request(&a, &from2, &from2_len), EM_DGRAM_SUBSCRIBE);
  assert_int_equal(from2_len, from_len);
  assert_memory_equal(&from2, &from, from_len);

  assert_int_equal(em_client_unsubscribe(&c), 0);
  assert_int_equal(agent_recv_request(&a, &from2, &from2_len), EM_DGRAM_UNSUBSCRIBE);
  assert_memory_equal(&from2, &from, from_len);
  assert_int_equal(c.sub_fd, -1);
  assert_int_equal(em_client_unsubscribe(&c), -ENOTCONN);
  em_client_close(&c);
  agent_close(&a);
}

static void wait_change_subscribes_first(void **state) {
  agent_t a;
  em_client_t c;
  em_client_state_t got;
  struct sockaddr_un from;
  socklen_t from_len;
  (void)state;
  agent_open(&a);
  agent_listen(&a);
  client_open_at(&c, &a);
  assert_int_equal(em_client_wait_change(&c, 0, &got), -ETIMEDOUT);
  assert_true(c.sub_fd >= 0);
  assert_int_equal(agent_recv_request(&a, &from, &from_len), EM_DGRAM_SUBSCRIBE);
  em_client_close(&c); /* closes the push socket too */
  assert_int_equal(c.sub_fd, -1);
  assert_int_equal(em_client_subscribe(&c), -EBADF);
  agent_close(&a);
}

static void no_agent_to_subscribe_to(void **state) {
  em_client_t c;
  em_client_state_t got;
  (void)state;
  assert_int_equal(em_client_open(&c, "/nonexistent/spans.sock"), 0);
  assert_int_equal(em_client_subscribe(&c), -ENOENT);
  assert_int_equal(em_client_wait_change(&c, 10, &got), -ETIMEDOUT);
  assert_int_equal(em_client_wait_change(NULL, 10, &got), -EINVAL);
  em_client_close(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(level_and_every_field),
      cmocka_unit_test(changes_are_read_through_one_mapping_without_the_path),
      cmocka_unit_test(write_in_progress_is_retried_then_read),
      cmocka_unit_test(not_a_page_is_unknown_and_counted),
      cmocka_unit_test(garbled_record_is_unknown_and_counted),
      cmocka_unit_test(absent_page_is_looked_for_once_per_second),
      cmocka_unit_test(new_agent_page_is_followed),
      cmocka_unit_test(default_state_path),
      cmocka_unit_test(subscribe_push_timeout_unsubscribe),
      cmocka_unit_test(wait_change_subscribes_first),
      cmocka_unit_test(no_agent_to_subscribe_to),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
