/*
 * test_c_client.c - unit tests of the header-only C client (firmware/client/c/edgemon_client.h)
 * against a real AF_UNIX SOCK_DGRAM receiver bound in a temporary directory.
 *
 * Every datagram the client sends is decoded with em_span_unpack from proto's wire.h (the
 * reference decoder, independent of the header's own packing) and every field is checked.
 * Covered: spans, recorded spans, the EM_CLIENT_SPAN block, heartbeats, frame ids, the longest
 * stage name and largest integers; invalid stage names dropped and counted; an absent agent
 * counted as no_agent with connect() paced to once per second; an agent restart; a receiver
 * that does not read (sends never block, queue_full counted, sent + dropped == attempted);
 * the default socket path; open errors; close; a forked child reopening its own client.
 */
#define _GNU_SOURCE /* mkdtemp, fork, setenv under -std=c11. */

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
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "edgemon/wire.h"
/* The system service's directory, moved where the test may bind a socket. */
static char service_dir[64] = "/run/edgemon";
#define EM_CLIENT_SERVICE_DIR service_dir
#include "edgemon_client.h"

#include "bound_socket.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- A receiver standing in for the agent's span socket ---- */

typedef struct {
  char dir[64];
  char path[EM_CLIENT_PATH_BYTES];
  int fd;
} receiver_t;

static void receiver_bind(receiver_t *r) {
  r->fd = bound_socket(r->path, SOCK_DGRAM);
}

/* A fresh temporary directory and r->path = <it>/<name>; nothing bound yet (fd -1). */
static void receiver_place(receiver_t *r, const char *name) {
  snprintf(r->dir, sizeof(r->dir), "/tmp/em-c-client-XXXXXX");
  assert_non_null(mkdtemp(r->dir));
  snprintf(r->path, sizeof(r->path), "%s/%s", r->dir, name);
  r->fd = -1;
}

static void receiver_open(receiver_t *r) {
  receiver_place(r, "spans.sock");
  receiver_bind(r);
}

/* Stops the "agent": closes the socket and removes its file (unlink = 1) or leaves it stale. */
static void receiver_stop(receiver_t *r, int unlink_file) {
  if (r->fd >= 0) {
    close(r->fd);
    r->fd = -1;
  }
  if (unlink_file) {
    unlink(r->path);
  }
}

static void receiver_close(receiver_t *r) {
  receiver_stop(r, 1);
  rmdir(r->dir);
}

/* Receives one datagram and decodes it with the reference decoder; asserts it is valid. */
static void receiver_recv(const receiver_t *r, em_span_t *out) {
  uint8_t buf[256];
  ssize_t n = recv(r->fd, buf, sizeof(buf), 0);
  assert_int_equal(n, EM_SPAN_DGRAM_BYTES);
  assert_int_equal(em_span_unpack(buf, (size_t)n, out), 0);
}

/* Datagrams queued now, each decoded and checked; does not wait. */
static size_t receiver_drain(const receiver_t *r, const char *stage) {
  size_t count = 0;
  for (;;) {
    uint8_t buf[256];
    em_span_t span;
    ssize_t n = recv(r->fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0) {
      assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
      return count;
    }
    assert_int_equal(n, EM_SPAN_DGRAM_BYTES);
    assert_int_equal(em_span_unpack(buf, (size_t)n, &span), 0);
    if (stage != NULL) {
      assert_string_equal(span.stage, stage);
    }
    count++;
  }
}

static void assert_span(const em_span_t *got, em_dgram_kind_t kind, uint64_t frame_id,
                        const char *stage) {
  assert_int_equal(got->kind, kind);
  assert_int_equal(got->pid, (uint32_t)getpid());
  assert_true(got->frame_id == frame_id);
  assert_string_equal(got->stage, stage);
}

/* ---- The fixture of most tests: a receiver and a client opened on its path ---- */

typedef struct {
  receiver_t r;
  em_client_t c;
} pair_t;

static int pair_setup(void **state) {
  static pair_t pair;
  memset(&pair, 0, sizeof(pair));
  receiver_open(&pair.r);
  assert_int_equal(em_client_open(&pair.c, pair.r.path), 0);
  *state = &pair;
  return 0;
}

/* em_client_close() is idempotent, so a test may have closed the client itself. */
static int pair_teardown(void **state) {
  pair_t *p = *state;
  em_client_close(&p->c);
  receiver_close(&p->r);
  return 0;
}

/* ---- Tests ---- */

static void client_span_fields_decode_with_the_reference_decoder(void **state) {
  pair_t *p = *state;
  receiver_t *r = &p->r;
  em_client_t *c = &p->c;
  em_span_t got;
  assert_true(c->fd >= 0);

  /* A span timed with begin/end at frame 41: start and end inside the test's window. */
  em_client_set_frame(c, 41);
  uint64_t before = em_client_now_ns();
  em_client_span_t s = em_client_span_begin(c, "infer");
  usleep(2000);
  assert_int_equal(em_client_span_end(&s), 0);
  uint64_t after = em_client_now_ns();
  receiver_recv(r, &got);
  assert_span(&got, EM_DGRAM_SPAN, 41, "infer");
  assert_true(before <= got.start_ns);
  assert_true(got.start_ns + got.duration_ns <= after);
  assert_true(got.duration_ns >= 2000000);

  /* The block macro. */
  before = em_client_now_ns();
  EM_CLIENT_SPAN(c, "preprocess") {
    usleep(1000);
  }
  after = em_client_now_ns();
  receiver_recv(r, &got);
  assert_span(&got, EM_DGRAM_SPAN, 41, "preprocess");
  assert_true(before <= got.start_ns && got.start_ns + got.duration_ns <= after);
  assert_true(got.duration_ns >= 1000000);

  /* span_end_at, record (current frame) and record_frame (explicit frame). */
  em_client_set_frame(c, 42);
  uint64_t t0 = em_client_now_ns();
  assert_int_equal(em_client_span_end_at(c, "postprocess", t0), 0);
  receiver_recv(r, &got);
  assert_span(&got, EM_DGRAM_SPAN, 42, "postprocess");
  assert_true(got.start_ns == t0);
  assert_int_equal(em_client_record(c, "camera.rx", 123456789u, 987654321u), 0);
  receiver_recv(r, &got);
  assert_span(&got, EM_DGRAM_SPAN, 42, "camera.rx");
  assert_true(got.start_ns == 123456789u && got.duration_ns == 987654321u);
  assert_int_equal(em_client_record_frame(c, "camera.rx", 7, 1, 2), 0);
  receiver_recv(r, &got);
  assert_span(&got, EM_DGRAM_SPAN, 7, "camera.rx");

  /* Heartbeat: kind 2, now, no duration. */
  before = em_client_now_ns();
  assert_int_equal(em_client_heartbeat(c, "watchdog"), 0);
  after = em_client_now_ns();
  receiver_recv(r, &got);
  assert_span(&got, EM_DGRAM_HEARTBEAT, 42, "watchdog");
  assert_true(before <= got.start_ns && got.start_ns <= after);
  assert_true(got.duration_ns == 0);

  assert_true(c->sent == 6);
  assert_true(em_client_dropped_total(c) == 0);
  assert_int_equal(receiver_drain(r, NULL), 0);
}

static void client_longest_stage_and_largest_integers_travel_intact(void **state) {
  pair_t *p = *state;
  receiver_t *r = &p->r;
  em_client_t *c = &p->c;
  em_span_t got;
  const char *longest = "Az09_.:-xxxxxxxxxxxxxxxxxxxxxxx"; /* 31 bytes, every special */
  assert_int_equal(strlen(longest), 31);
  assert_int_equal(em_client_record_frame(c, longest, UINT64_MAX, UINT64_MAX, UINT64_MAX), 0);
  receiver_recv(r, &got);
  assert_span(&got, EM_DGRAM_SPAN, UINT64_MAX, longest);
  assert_true(got.start_ns == UINT64_MAX && got.duration_ns == UINT64_MAX);
}

static void client_invalid_stage_names_are_dropped_and_counted(void **state) {
  pair_t *p = *state;
  receiver_t *r = &p->r;
  em_client_t *c = &p->c;
  static const char *const invalid[] = {
      "",
      "has space",
      "slash/name",
      "tab\tname",
      "caf\xc3\xa9",
      "newline\n",
      "x234567890123456789012345678901x" /* 32 bytes */,
  };
  for (size_t i = 0; i < ARRAY_LEN(invalid); i++) {
    assert_false(em_client_stage_valid(invalid[i]));
    assert_int_equal(em_client_record(c, invalid[i], 1, 2), -EINVAL);
    assert_int_equal(em_client_heartbeat(c, invalid[i]), -EINVAL);
  }
  assert_int_equal(em_client_record(c, NULL, 1, 2), -EINVAL);
  EM_CLIENT_SPAN(c, "bad name") {}
  assert_true(c->dropped[EM_CLIENT_DROP_INVALID_STAGE] == 2 * ARRAY_LEN(invalid) + 2);
  assert_true(em_client_dropped_total(c) == c->dropped[EM_CLIENT_DROP_INVALID_STAGE]);
  assert_true(c->sent == 0);
  assert_int_equal(receiver_drain(r, NULL), 0);
  assert_true(em_client_stage_valid("a"));
}

static void client_absent_agent_counts_no_agent_and_paces_connects(void **state) {
  (void)state;
  receiver_t r = {0};
  em_client_t c;
  em_span_t got;
  receiver_place(&r, "spans.sock");

  assert_int_equal(em_client_open(&c, r.path), 0); /* absent: not an error */
  assert_true(c.fd < 0);
  assert_true(c.connect_attempts == 1);
  uint64_t opened = em_client_now_ns();
  assert_true(c.next_connect_ns >= opened + EM_CLIENT_RECONNECT_NS - 100000000u);
  for (int i = 0; i < 1000; i++) {
    int rc = em_client_record(&c, "x", 1, 2);
    assert_true(rc == -ENOTCONN || rc == -ENOENT);
    if (em_client_now_ns() < c.next_connect_ns) {
      assert_true(c.connect_attempts == 1); /* no connect() before the second is up */
    }
  }
  assert_true(c.connect_attempts <= 2);
  assert_true(c.dropped[EM_CLIENT_DROP_NO_AGENT] == 1000);
  assert_true(c.sent == 0);

  /* The agent appears; it is found at the next due attempt, not before. */
  receiver_bind(&r);
  c.next_connect_ns = em_client_now_ns() + EM_CLIENT_RECONNECT_NS; /* as if just tried */
  uint64_t attempts = c.connect_attempts;
  assert_int_equal(em_client_record(&c, "x", 1, 2), -ENOTCONN);
  assert_true(c.connect_attempts == attempts);
  c.next_connect_ns = 0; /* as if a second had passed */
  assert_int_equal(em_client_record(&c, "found", 1, 2), 0);
  assert_true(c.connect_attempts == attempts + 1);
  receiver_recv(&r, &got);
  assert_span(&got, EM_DGRAM_SPAN, 0, "found");
  em_client_close(&c);
  receiver_close(&r);
}

static void client_agent_restart_reconnects_when_due(void **state) {
  pair_t *p = *state;
  receiver_t *r = &p->r;
  em_client_t *c = &p->c;
  em_span_t got;
  assert_int_equal(em_client_record(c, "before", 1, 2), 0);
  receiver_recv(r, &got);

  /* Restart more than a second after the last connect: reconnect and resend, nothing lost. */
  receiver_stop(r, 1);
  receiver_bind(r);
  c->next_connect_ns = 0;
  assert_int_equal(em_client_record(c, "after", 1, 2), 0);
  receiver_recv(r, &got);
  assert_string_equal(got.stage, "after");
  assert_true(c->connect_attempts == 2);

  /* Restart within the second: that span is dropped as no_agent, the next due one gets in. */
  receiver_stop(r, 1);
  receiver_bind(r);
  c->next_connect_ns = em_client_now_ns() + EM_CLIENT_RECONNECT_NS; /* as if just connected */
  assert_int_equal(em_client_record(c, "lost", 1, 2), -ECONNREFUSED);
  assert_true(c->dropped[EM_CLIENT_DROP_NO_AGENT] == 1);
  c->next_connect_ns = 0;
  assert_int_equal(em_client_record(c, "back", 1, 2), 0);
  receiver_recv(r, &got);
  assert_string_equal(got.stage, "back");

  /* The agent dies and leaves its socket file: ECONNREFUSED, counted, never raised. */
  receiver_stop(r, 0);
  c->next_connect_ns = 0;
  assert_int_equal(em_client_record(c, "stale", 1, 2), -ECONNREFUSED);
  assert_int_equal(em_client_record(c, "stale", 1, 2), -ENOTCONN);
  assert_true(c->dropped[EM_CLIENT_DROP_NO_AGENT] == 3);
  assert_true(c->sent == 3);
}

static void client_full_queue_never_blocks_and_counts_queue_full(void **state) {
  pair_t *p = *state;
  receiver_t *r = &p->r;
  em_client_t *c = &p->c;
  enum { ATTEMPTED = 10000 };
  /* Nobody reads: the queue fills after net.unix.max_dgram_qlen datagrams. A blocking send
   * would hang here until ctest's timeout. */
  for (int i = 0; i < ATTEMPTED; i++) {
    int rc = em_client_record_frame(c, "burst", (uint64_t)i, 1, 2);
    assert_true(rc == 0 || rc == -EAGAIN);
  }
  assert_true(c->dropped[EM_CLIENT_DROP_QUEUE_FULL] > 0);
  assert_true(c->sent + em_client_dropped_total(c) == ATTEMPTED);
  assert_true(c->sent + c->dropped[EM_CLIENT_DROP_QUEUE_FULL] == ATTEMPTED);
  assert_true(receiver_drain(r, "burst") == c->sent);
  /* Drained: sends get through again. */
  assert_int_equal(em_client_record(c, "after.burst", 1, 2), 0);
}

/* A user's client finds the system service's socket in its directory with no setting, before
 * the per-user defaults, and only while that socket exists. Runs as a user other than root
 * (root always takes the service's directory): a child drops to nobody when the test is root. */
static void client_finds_the_system_service_with_no_setting(void **state) {
  (void)state;
  snprintf(service_dir, sizeof(service_dir), "/tmp/em-service-XXXXXX");
  assert_non_null(mkdtemp(service_dir));
  assert_int_equal(chmod(service_dir, 0755), 0); /* The edgemon group's view of /run/edgemon. */
  receiver_t r = {0};
  char sock[sizeof(service_dir) + 16], state_page[sizeof(service_dir) + 16];
  snprintf(sock, sizeof(sock), "%s/spans.sock", service_dir);
  snprintf(state_page, sizeof(state_page), "%s/state", service_dir);
  snprintf(r.path, sizeof(r.path), "%s", sock);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    if (geteuid() == 0 && setuid(65534) != 0) {
      _exit(2);
    }
    char out[EM_CLIENT_PATH_BYTES];
    unsetenv("EDGEMON_SOCKET");
    unsetenv("EDGEMON_RUNTIME_DIR");
    setenv("XDG_RUNTIME_DIR", "/run/user/65534", 1);
    if (em_client_default_path(out, sizeof(out)) != 0 ||
        strcmp(out, "/run/user/65534/edgemon/spans.sock") != 0) {
      _exit(3); /* No service socket: the per-user default. */
    }
    while (access(sock, F_OK) != 0) {
      usleep(1000); /* The parent binds it now. */
    }
    if (em_client_default_path(out, sizeof(out)) != 0 || strcmp(out, sock) != 0 ||
        em_client_default_state_path(out, sizeof(out)) != 0 || strcmp(out, state_page) != 0) {
      _exit(4);
    }
    _exit(0);
  }
  usleep(20000);
  receiver_bind(&r);
  int status = 0;
  assert_int_equal(waitpid(child, &status, 0), child);
  receiver_stop(&r, 1);
  rmdir(service_dir);
  snprintf(service_dir, sizeof(service_dir), "/run/edgemon");
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

static void client_default_path_follows_the_environment(void **state) {
  (void)state;
  char out[EM_CLIENT_PATH_BYTES];
  char expect[EM_CLIENT_PATH_BYTES];
  unsetenv("EDGEMON_SOCKET");
  unsetenv("EDGEMON_RUNTIME_DIR");
  unsetenv("XDG_RUNTIME_DIR");

  setenv("EDGEMON_SOCKET", "/s/x.sock", 1);
  setenv("EDGEMON_RUNTIME_DIR", "/r", 1);
  assert_int_equal(em_client_default_path(out, sizeof(out)), 0);
  assert_string_equal(out, "/s/x.sock");
  setenv("EDGEMON_SOCKET", "", 1); /* empty counts as unset */
  assert_int_equal(em_client_default_path(out, sizeof(out)), 0);
  assert_string_equal(out, "/r/spans.sock");
  unsetenv("EDGEMON_SOCKET");
  unsetenv("EDGEMON_RUNTIME_DIR");

  setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
  assert_int_equal(em_client_default_path(out, sizeof(out)), 0);
  if (geteuid() == 0) {
    assert_string_equal(out, "/run/edgemon/spans.sock");
  } else {
    assert_string_equal(out, "/run/user/1000/edgemon/spans.sock");
    setenv("XDG_RUNTIME_DIR", "relative", 1);
    assert_int_equal(em_client_default_path(out, sizeof(out)), 0);
    snprintf(expect, sizeof(expect), "/tmp/edgemon-%lu/spans.sock", (unsigned long)geteuid());
    assert_string_equal(out, expect);
  }
  unsetenv("XDG_RUNTIME_DIR");

  /* Too long for the buffer, or for a sockaddr_un. */
  setenv("EDGEMON_SOCKET", "/a/b.sock", 1);
  assert_int_equal(em_client_default_path(out, 5), -ENAMETOOLONG);
  char big[300];
  memset(big, 'x', sizeof(big) - 1);
  big[0] = '/';
  big[sizeof(big) - 1] = '\0';
  setenv("EDGEMON_SOCKET", big, 1);
  char huge[400];
  assert_int_equal(em_client_default_path(huge, sizeof(huge)), -ENAMETOOLONG);
  assert_int_equal(em_client_default_path(NULL, 10), -EINVAL);
  unsetenv("EDGEMON_SOCKET");
}

static void client_open_uses_edgemon_socket_when_given_no_path(void **state) {
  (void)state;
  receiver_t r = {0};
  em_client_t c;
  em_span_t got;
  receiver_open(&r);
  setenv("EDGEMON_SOCKET", r.path, 1);
  assert_int_equal(em_client_open(&c, NULL), 0);
  unsetenv("EDGEMON_SOCKET");
  assert_string_equal(c.path, r.path);
  assert_int_equal(em_client_record(&c, "env", 1, 2), 0);
  receiver_recv(&r, &got);
  assert_span(&got, EM_DGRAM_SPAN, 0, "env");
  em_client_close(&c);
  receiver_close(&r);
}

static void client_open_errors_leave_a_safe_client(void **state) {
  (void)state;
  em_client_t c;
  char too_long[200];
  memset(too_long, 'x', sizeof(too_long) - 1);
  too_long[0] = '/';
  too_long[sizeof(too_long) - 1] = '\0';
  assert_int_equal(em_client_open(NULL, "/x"), -EINVAL);
  assert_int_equal(em_client_open(&c, too_long), -ENAMETOOLONG);
  assert_int_equal(em_client_record(&c, "x", 1, 2), -EBADF);
  assert_int_equal(em_client_heartbeat(&c, "x"), -EBADF);
  assert_true(c.dropped[EM_CLIENT_DROP_OTHER] == 2);
  em_client_close(&c);
  em_client_close(NULL);
  assert_int_equal(em_client_record(NULL, "x", 1, 2), -EINVAL);
}

static void client_closed_drops_as_other(void **state) {
  pair_t *p = *state;
  receiver_t *r = &p->r;
  em_client_t *c = &p->c;
  em_client_close(c);
  em_client_close(c);
  assert_true(c->fd < 0);
  assert_int_equal(em_client_record(c, "closed", 1, 2), -EBADF);
  assert_true(c->dropped[EM_CLIENT_DROP_OTHER] == 1 && c->sent == 0);
  assert_int_equal(receiver_drain(r, NULL), 0);
}

static void client_wrong_socket_type_counts_other(void **state) {
  (void)state;
  receiver_t r = {0};
  em_client_t c;
  receiver_place(&r, "stream.sock");
  r.fd = bound_socket(r.path, SOCK_STREAM);
  assert_int_equal(listen(r.fd, 1), 0);
  assert_int_equal(em_client_open(&c, r.path), 0);
  assert_int_equal(em_client_record(&c, "x", 1, 2), -ENOTCONN); /* EPROTOTYPE at open */
  assert_true(c.dropped[EM_CLIENT_DROP_OTHER] == 1);
  em_client_close(&c);
  receiver_close(&r);
}

static void client_forked_child_reopens_with_its_own_pid(void **state) {
  pair_t *p = *state;
  receiver_t *r = &p->r;
  em_client_t *c = &p->c;
  em_span_t got;
  em_client_set_frame(c, 77);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    em_client_close(c); /* the child's copy of the descriptor */
    int ok = em_client_open(c, r->path) == 0;
    em_client_set_frame(c, 78);
    ok = ok && em_client_record(c, "child", 1, 2) == 0;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  receiver_recv(r, &got);
  assert_string_equal(got.stage, "child");
  assert_int_equal(got.pid, (uint32_t)pid);
  assert_true(got.frame_id == 78);
  assert_int_equal(em_client_record(c, "parent", 1, 2), 0); /* the parent's socket works */
  receiver_recv(r, &got);
  assert_span(&got, EM_DGRAM_SPAN, 77, "parent");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(client_span_fields_decode_with_the_reference_decoder,
                                      pair_setup, pair_teardown),
      cmocka_unit_test_setup_teardown(client_longest_stage_and_largest_integers_travel_intact,
                                      pair_setup, pair_teardown),
      cmocka_unit_test_setup_teardown(client_invalid_stage_names_are_dropped_and_counted,
                                      pair_setup, pair_teardown),
      cmocka_unit_test(client_absent_agent_counts_no_agent_and_paces_connects),
      cmocka_unit_test_setup_teardown(client_agent_restart_reconnects_when_due, pair_setup,
                                      pair_teardown),
      cmocka_unit_test_setup_teardown(client_full_queue_never_blocks_and_counts_queue_full,
                                      pair_setup, pair_teardown),
      cmocka_unit_test(client_finds_the_system_service_with_no_setting),
      cmocka_unit_test(client_default_path_follows_the_environment),
      cmocka_unit_test(client_open_uses_edgemon_socket_when_given_no_path),
      cmocka_unit_test(client_open_errors_leave_a_safe_client),
      cmocka_unit_test_setup_teardown(client_closed_drops_as_other, pair_setup, pair_teardown),
      cmocka_unit_test(client_wrong_socket_type_counts_other),
      cmocka_unit_test_setup_teardown(client_forked_child_reopens_with_its_own_pid, pair_setup,
                                      pair_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
