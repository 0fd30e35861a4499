/*
 * test_c_client_pages.c - the header-only C client (firmware/client/c/edgemon_client.h) against
 * what whoever can write the runtime directory may put where the agent's pages should be: a
 * FIFO, a symbolic link (to a FIFO, or to a valid page), a directory, a socket and, when the
 * test may make one, a character device, each in place of the state page and of the deadline
 * page.
 *
 * A plain open() of a FIFO waits for a writer: the call under test runs in a forked child that
 * reports its result through a pipe, and the parent gives it PROMPT_MS. A child still in the
 * call then is killed and the test fails ("blocked"), so a regression fails instead of hanging
 * the run. Checked: em_client_level() is UNKNOWN and em_client_record() goes on as with no
 * page (no mapping, no agent generation, a datagram), each refusal counted with its reason
 * kept; a valid page renamed over the refused file is then read as usual.
 */
#define _GNU_SOURCE /* mkdtemp, mknod, makedev under -std=c11. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "edgemon/ring.h"
#include "edgemon/wire.h"
#include "edgemon_client.h"

#include "bound_socket.h"

#define PROMPT_MS 5000 /* A call still running after this blocked (a page check takes ~0 ms). */

/* What can stand at a page's path. */
typedef enum { FIFO, LINK_TO_FIFO, LINK_TO_PAGE, DIRECTORY, SOCKET, CHAR_DEVICE } kind_t;

static const struct {
  kind_t kind;
  const char *name;
  const char *reason; /* what the client must say it found */
} kinds[] = {
    {FIFO, "fifo", "a FIFO, not a regular file"},
    {LINK_TO_FIFO, "link to a fifo", "a symbolic link, not a regular file"},
    {LINK_TO_PAGE, "link to a valid page", "a symbolic link, not a regular file"},
    {DIRECTORY, "directory", "a directory, not a regular file"},
    {SOCKET, "socket", "a socket, not a regular file"},
    {CHAR_DEVICE, "character device", "a character device, not a regular file"},
};

typedef struct {
  char dir[64];
  char sock_path[128]; /* nobody listens: the spans go nowhere */
  char state_path[128];
  char deadline_path[128];
  int bound; /* the socket a SOCKET row binds, or -1 */
} runtime_t;

static void runtime_open(runtime_t *rt) {
  memset(rt, 0, sizeof(*rt));
  rt->bound = -1;
  unsetenv("EDGEMON_DEADLINE_PAGE");
  unsetenv("EDGEMON_STATE_PAGE");
  snprintf(rt->dir, sizeof(rt->dir), "/tmp/em-c-pages-XXXXXX");
  assert_non_null(mkdtemp(rt->dir));
  snprintf(rt->sock_path, sizeof(rt->sock_path), "%s/spans.sock", rt->dir);
  snprintf(rt->state_path, sizeof(rt->state_path), "%s/state", rt->dir);
  snprintf(rt->deadline_path, sizeof(rt->deadline_path), "%s/deadlines", rt->dir);
}

static void runtime_close(runtime_t *rt) {
  char cmd[128];
  if (rt->bound >= 0) {
    close(rt->bound);
  }
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", rt->dir);
  assert_int_equal(system(cmd), 0);
}

/* Writes `len` bytes to path through a temporary file renamed into place, as the agent does. */
static void put_file(const runtime_t *rt, const char *path, const uint8_t *buf, size_t len) {
  char tmp[160];
  FILE *f;
  snprintf(tmp, sizeof(tmp), "%s/.tmp", rt->dir);
  f = fopen(tmp, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(buf, 1, len, f), len);
  assert_int_equal(fclose(f), 0);
  assert_int_equal(rename(tmp, path), 0);
}

static void put_state_page(const runtime_t *rt, const char *path) {
  static _Alignas(8) uint8_t page[EM_STATE_PAGE_BYTES];
  em_state_record_t rec;
  memset(&rec, 0, sizeof(rec));
  rec.level = EM_LEVEL_DEGRADED;
  rec.prev_level = EM_LEVEL_NOMINAL;
  rec.changes = 1;
  assert_int_equal(em_state_page_init(page, 4242, &rec), 0);
  put_file(rt, path, page, sizeof(page));
}

static void put_deadline_page(const runtime_t *rt, const char *path) {
  static _Alignas(8) uint8_t page[EM_DEADLINE_PAGE_BYTES];
  em_deadline_t none[1];
  memset(none, 0, sizeof(none));
  assert_int_equal(em_deadline_page_init(page, 4242, 64), 0);
  assert_int_equal(em_deadline_page_write(page, none, 0), 0);
  put_file(rt, path, page, sizeof(page));
}

/* Puts a `kind` at path. Returns 0, or -1 when the test may not make one (no CAP_MKNOD). */
static int plant(runtime_t *rt, const char *path, kind_t kind, int state_page) {
  char target[160];
  switch (kind) {
  case FIFO:
    assert_int_equal(mkfifo(path, 0644), 0);
    return 0;
  case LINK_TO_FIFO:
    snprintf(target, sizeof(target), "%s/elsewhere.fifo", rt->dir);
    assert_int_equal(mkfifo(target, 0644), 0);
    assert_int_equal(symlink(target, path), 0);
    return 0;
  case LINK_TO_PAGE:
    snprintf(target, sizeof(target), "%s/elsewhere.page", rt->dir);
    if (state_page) {
      put_state_page(rt, target);
    } else {
      put_deadline_page(rt, target);
    }
    assert_int_equal(symlink(target, path), 0);
    return 0;
  case DIRECTORY:
    assert_int_equal(mkdir(path, 0755), 0);
    return 0;
  case SOCKET:
    rt->bound = bound_socket(path, SOCK_DGRAM);
    return 0;
  case CHAR_DEVICE: /* /dev/null's numbers: opening it would not block, but it is no page */
    return mknod(path, S_IFCHR | 0644, makedev(1, 3)) == 0 ? 0 : -1;
  }
  return -1;
}

/* What the child saw, sent back through the pipe. */
typedef struct {
  int level;
  int record_rc;
  int mapped;
  uint64_t agent_gen;
  uint64_t refused;
  uint64_t absent;
  uint64_t sent_or_dropped;
  char reason[64];
} seen_t;

typedef void (*probe_t)(const runtime_t *rt, seen_t *out);

/* The state page: one em_client_level(). */
static void probe_level(const runtime_t *rt, seen_t *out) {
  em_client_t c;
  if (em_client_open(&c, rt->sock_path) != 0 || em_client_set_state_path(&c, rt->state_path)) {
    return;
  }
  out->level = em_client_level(&c);
  out->mapped = c.page != NULL;
  out->refused = c.page_counters[EM_CLIENT_PAGE_REFUSED];
  out->absent = c.page_counters[EM_CLIENT_PAGE_ABSENT];
  snprintf(out->reason, sizeof(out->reason), "%s", c.page_refused ? c.page_refused : "");
  em_client_close(&c);
}

/* The deadline page: one em_client_record(), whose first span makes the agent check. */
static void probe_record(const runtime_t *rt, seen_t *out) {
  em_client_t c;
  uint64_t now;
  if (em_client_open(&c, rt->sock_path) != 0) {
    return;
  }
  now = em_client_now_ns();
  out->record_rc = em_client_record(&c, "infer", now - 1000, 1000);
  out->mapped = c.dl_page != NULL;
  out->agent_gen = c.agent_gen;
  out->refused = c.dl_refusals;
  out->sent_or_dropped = c.sent + em_client_dropped_total(&c);
  snprintf(out->reason, sizeof(out->reason), "%s", c.dl_refused ? c.dl_refused : "");
  em_client_close(&c);
}

/* Runs probe in a child; fails the test when it has not answered within PROMPT_MS. */
static seen_t run_bounded(const runtime_t *rt, probe_t probe, const char *what) {
  int fds[2];
  seen_t seen;
  pid_t pid;
  struct pollfd pfd;
  int status = 0;
  memset(&seen, 0, sizeof(seen));
  assert_int_equal(pipe(fds), 0);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    seen_t mine;
    memset(&mine, 0, sizeof(mine));
    mine.level = -2; /* not set: the open failed */
    close(fds[0]);
    probe(rt, &mine);
    _exit(write(fds[1], &mine, sizeof(mine)) == (ssize_t)sizeof(mine) ? 0 : 1);
  }
  close(fds[1]);
  pfd.fd = fds[0];
  pfd.events = POLLIN;
  pfd.revents = 0;
  if (poll(&pfd, 1, PROMPT_MS) != 1) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    close(fds[0]);
    fail_msg("%s: still blocked after %d ms", what, PROMPT_MS);
  }
  assert_int_equal(read(fds[0], &seen, sizeof(seen)), (ssize_t)sizeof(seen));
  close(fds[0]);
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return seen;
}

/* Each kind in place of the state page (state_page 1) or of the deadline page (0). */
static void each_kind_is_refused_promptly(int state_page) {
  const char *page = state_page ? "state page" : "deadline page";
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
    runtime_t rt;
    seen_t seen;
    int as_absent;
    runtime_open(&rt);
    if (plant(&rt, state_page ? rt.state_path : rt.deadline_path, kinds[i].kind, state_page)) {
      print_message("%s: no %s here (cannot mknod): skipped\n", page, kinds[i].name);
      runtime_close(&rt);
      continue;
    }
    seen = run_bounded(&rt, state_page ? probe_level : probe_record, kinds[i].name);
    /* As with no page: level unknown; or no agent and the span sent as a datagram (nobody
     * listens: dropped). */
    as_absent = state_page ? seen.level == EM_CLIENT_LEVEL_UNKNOWN && seen.absent == 0
                           : seen.agent_gen == 0 && seen.sent_or_dropped == 1;
    if (!as_absent || seen.mapped || seen.refused != 1 || strcmp(seen.reason, kinds[i].reason)) {
      fail_msg("%s as a %s: level %d, mapped %d, agent_gen %llu, refused %llu, absent %llu, "
               "spans %llu, '%s'",
               page, kinds[i].name, seen.level, seen.mapped, (unsigned long long)seen.agent_gen,
               (unsigned long long)seen.refused, (unsigned long long)seen.absent,
               (unsigned long long)seen.sent_or_dropped, seen.reason);
    }
    runtime_close(&rt);
  }
}

static void state_page_that_is_no_regular_file_is_absent_and_never_blocks(void **state) {
  (void)state;
  each_kind_is_refused_promptly(1);
}

static void deadline_page_that_is_no_regular_file_is_absent_and_never_blocks(void **state) {
  (void)state;
  each_kind_is_refused_promptly(0);
}

/* A FIFO replaced by a real page (a new agent renaming its page into place): read as usual,
 * the reason cleared; in this process, since nothing blocks any more. */
static void refused_then_real_pages_are_read(void **state) {
  runtime_t rt;
  em_client_t c;
  (void)state;
  runtime_open(&rt);
  assert_int_equal(mkfifo(rt.state_path, 0644), 0);
  assert_int_equal(mkfifo(rt.deadline_path, 0644), 0);
  (void)run_bounded(&rt, probe_level, "fifo state page"); /* first: a regression fails here */
  (void)run_bounded(&rt, probe_record, "fifo deadline page");
  assert_int_equal(em_client_open(&c, rt.sock_path), 0);
  assert_int_equal(em_client_set_state_path(&c, rt.state_path), 0);
  assert_int_equal(em_client_level(&c), EM_CLIENT_LEVEL_UNKNOWN);
  assert_string_equal(c.page_refused, "a FIFO, not a regular file");
  (void)em_client_record(&c, "infer", em_client_now_ns(), 1);
  assert_null(c.dl_page);
  assert_string_equal(c.dl_refused, "a FIFO, not a regular file");
  put_state_page(&rt, rt.state_path);
  put_deadline_page(&rt, rt.deadline_path);
  c.page_next_check_ns = 0; /* the second has passed */
  c.dl_next_check_ns = 0;
  assert_int_equal(em_client_level(&c), EM_CLIENT_LEVEL_DEGRADED);
  assert_null(c.page_refused);
  assert_int_equal(c.page_counters[EM_CLIENT_PAGE_REFUSED], 1);
  (void)em_client_record(&c, "infer", em_client_now_ns(), 1);
  assert_non_null(c.dl_page);
  assert_null(c.dl_refused);
  assert_int_equal(c.agent_gen, 1);
  assert_int_equal(c.dl_refusals, 1);
  em_client_close(&c);
  runtime_close(&rt);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(state_page_that_is_no_regular_file_is_absent_and_never_blocks),
      cmocka_unit_test(deadline_page_that_is_no_regular_file_is_absent_and_never_blocks),
      cmocka_unit_test(refused_then_real_pages_are_read),
  };
  signal(SIGPIPE, SIG_IGN);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
