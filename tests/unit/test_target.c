/*
 * test_target.c - the target lookup against procfs trees made by the test: exact comm match,
 * command-line substring, the oldest match winning, the agent never matching itself, pid
 * files (missing, garbage, stale, a FIFO or a directory), and start times behind a comm that holds
 * ") ".
 */
#define _XOPEN_SOURCE 700 /* POSIX 2008 plus XSI, for nftw() in tmp_tree.h */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <errno.h>

#include <cmocka.h>

#include "config.h"
#include "target.h"
#include "unit_fx.h"
#include "tmp_tree.h"

typedef struct {
  char root[64];
  em_config_t cfg;
} fixture_t;

static void write_file(const char *path, const char *data, size_t len) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, len, f), len);
  fclose(f);
}

/* Adds a process: comm, cmdline (NUL-separated, given with '|' for NUL) and a stat line
 * naming its parent. */
static void add_child(fixture_t *fx, long pid, long ppid, const char *comm, const char *cmdline,
                      unsigned long long start) {
  char path[256], buf[512];
  snprintf(path, sizeof(path), "%s/%ld", fx->root, pid);
  assert_int_equal(mkdir(path, 0755), 0);
  snprintf(path, sizeof(path), "%s/%ld/comm", fx->root, pid);
  snprintf(buf, sizeof(buf), "%s\n", comm);
  write_file(path, buf, strlen(buf));
  snprintf(path, sizeof(path), "%s/%ld/cmdline", fx->root, pid);
  size_t n = strlen(cmdline);
  memcpy(buf, cmdline, n + 1);
  for (size_t i = 0; i < n; i++) {
    buf[i] = buf[i] == '|' ? '\0' : buf[i];
  }
  write_file(path, buf, n ? n + 1 : 0);
  snprintf(path, sizeof(path), "%s/%ld/stat", fx->root, pid);
  snprintf(buf, sizeof(buf),
           "%ld (%s) S %ld %ld %ld 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 %llu 1000 50 "
           "18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n",
           pid, comm, ppid, pid, pid, start);
  write_file(path, buf, strlen(buf));
}

/* A process whose parent is init. */
static void add_proc(fixture_t *fx, long pid, const char *comm, const char *cmdline,
                     unsigned long long start) {
  add_child(fx, pid, 1, comm, cmdline, start);
}

static int setup(void **state) {
  fixture_t *fx = calloc(1, sizeof(*fx));
  assert_non_null(fx);
  snprintf(fx->root, sizeof(fx->root), "/tmp/em-target-XXXXXX");
  assert_non_null(mkdtemp(fx->root));
  em_config_defaults(&fx->cfg);
  snprintf(fx->cfg.proc_root, sizeof(fx->cfg.proc_root), "%s", fx->root);
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  fixture_t *fx = *state;
  assert_int_equal(em_tmp_tree_remove(fx->root), 0);
  free(fx);
  return 0;
}

static void set_target(fixture_t *fx, em_target_kind_t kind, const char *value) {
  fx->cfg.target.kind = kind;
  snprintf(fx->cfg.target.value, sizeof(fx->cfg.target.value), "%s", value);
}

/* em_target_find() of fx's target under its proc root: the pid, 0 or a negative errno. */
static pid_t find(const fixture_t *fx) {
  return em_target_find(&fx->cfg.target, fx->cfg.proc_root, NULL, 0);
}

/* fx's target must not be running now, for the reason `why` (all of it). */
static void expect_not_running(const fixture_t *fx, const char *why) {
  char got[128];
  assert_int_equal(em_target_find(&fx->cfg.target, fx->cfg.proc_root, got, sizeof(got)), 0);
  assert_string_equal(got, why);
}

static void comm_matches_exactly_and_oldest_wins(void **state) {
  fixture_t *fx = *state;
  add_proc(fx, 300, "python3", "python3|infer.py", 5000);
  add_proc(fx, 200, "python3", "python3|infer.py|--worker", 4000);
  add_proc(fx, 100, "python3.11", "python3.11|other.py", 10);
  set_target(fx, EM_TARGET_COMM, "python3");
  assert_int_equal(find(fx), 200);
  set_target(fx, EM_TARGET_COMM, "python");
  expect_not_running(fx, "no process matches");
}

static void cmdline_matches_a_substring_across_arguments(void **state) {
  fixture_t *fx = *state;
  add_proc(fx, 10, "python3", "python3|-m|detect|--model|yolo.onnx", 50);
  add_proc(fx, 11, "bash", "bash|-c|sleep 1", 40);
  add_proc(fx, 12, "kworker/0:1", "", 1); /* Kernel threads have an empty cmdline. */
  set_target(fx, EM_TARGET_CMDLINE, "detect --model");
  assert_int_equal(find(fx), 10);
  set_target(fx, EM_TARGET_CMDLINE, "yolo.onnx --x");
  assert_int_equal(find(fx), 0);
}

/* `su app -c "python3 loop.py --fps 50"` as pid su (started at su), its loop su + 1 and the
 * loop's forked worker su + 2; the target is the command line "loop.py --fps". */
static void add_su_loop(fixture_t *fx, long su) {
  add_child(fx, su, 1, "su", "su|app|-c|python3 loop.py --fps 50", (unsigned long long)su);
  add_child(fx, su + 1, su, "python3", "python3|loop.py|--fps|50", (unsigned long long)su + 1);
  add_child(fx, su + 2, su + 1, "python3", "python3|loop.py|--fps|50", (unsigned long long)su + 2);
  set_target(fx, EM_TARGET_CMDLINE, "loop.py --fps");
}

/* `su app -c "python3 loop.py --fps 50"`: su's command line holds the same words and it
 * started first, yet the loop it started (which writes the spans) is the target; the loop's
 * own forked worker runs the same program, so the loop, its parent, still wins over it. */
static void a_wrapper_never_wins_over_the_process_it_started(void **state) {
  fixture_t *fx = *state;
  add_su_loop(fx, 50);
  assert_int_equal(find(fx), 51);
  /* sudo -u app sh -c '...' puts two wrappers above it. */
  add_child(fx, 60, 1, "sudo", "sudo|-u|app|sh|-c|python3 loop.py --fps 5", 10);
  add_child(fx, 61, 60, "sh", "sh|-c|python3 loop.py --fps 5", 11);
  add_child(fx, 62, 61, "python3", "python3|loop.py|--fps|5", 12);
  assert_int_equal(find(fx), 62);
}

/* Writes <root>/<pid>/task/<pid>/children: the pids of its children, as the kernel lists them. */
static void set_children(fixture_t *fx, long pid, const char *list) {
  char path[256];
  snprintf(path, sizeof(path), "%s/%ld/task", fx->root, pid);
  assert_int_equal(mkdir(path, 0755), 0);
  snprintf(path, sizeof(path), "%s/%ld/task/%ld", fx->root, pid, pid);
  assert_int_equal(mkdir(path, 0755), 0);
  snprintf(path, sizeof(path), "%s/%ld/task/%ld/children", fx->root, pid, pid);
  write_file(path, list, strlen(list));
}

/* Attached to su before its shell or the loop existed: the child that matches and runs another
 * program is the successor; a forked worker running the same program is not. */
static void a_wrapper_found_first_names_its_successor(void **state) {
  fixture_t *fx = *state;
  add_su_loop(fx, 70);
  assert_int_equal(em_target_successor(&fx->cfg.target, fx->root, 70), 0); /* No list yet. */
  set_children(fx, 70, "71 ");
  assert_int_equal(em_target_successor(&fx->cfg.target, fx->root, 70), 71);
  set_children(fx, 71, "72 ");
  assert_int_equal(em_target_successor(&fx->cfg.target, fx->root, 71), 0);
  set_target(fx, EM_TARGET_PID, "");
  assert_int_equal(em_target_successor(&fx->cfg.target, fx->root, 70), 0);
}

static void the_agent_never_matches_itself(void **state) {
  fixture_t *fx = *state;
  add_proc(fx, (long)getpid(), "edgemon-agent", "edgemon-agent|--config|infer.ini", 1);
  add_proc(fx, 77, "python3", "python3|infer.py", 99);
  set_target(fx, EM_TARGET_CMDLINE, "infer");
  assert_int_equal(find(fx), 77);
}

static void pid_files_missing_garbage_or_stale_mean_not_running(void **state) {
  fixture_t *fx = *state;
  add_proc(fx, 4242, "python3", "python3|infer.py", 1);
  char pidfile[128], why[128];
  snprintf(pidfile, sizeof(pidfile), "%s/infer.pid", fx->root);
  set_target(fx, EM_TARGET_PIDFILE, pidfile);
  assert_int_equal(em_target_find(&fx->cfg.target, fx->cfg.proc_root, why, sizeof(why)), 0);
  assert_non_null(strstr(why, "pid file"));
  static const struct {
    const char *text;
    pid_t want;
  } rows[] = {
      {"4242\n", 4242}, {"  4242  \n", 4242}, {"4242", 4242},
      {"", 0},          {"abc\n", 0},         {"-5\n", 0},
      {"42x\n", 0},     {"4243\n", 0},        {"99999999999\n", 0},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    write_file(pidfile, rows[i].text, strlen(rows[i].text));
    if (em_target_find(&fx->cfg.target, fx->cfg.proc_root, why, sizeof(why)) != rows[i].want) {
      fail_msg("pid file '%s': want %d (%s)", rows[i].text, (int)rows[i].want, why);
    }
  }
  /* A FIFO (or a directory) in the pid file's place: refused at once, never read. */
  assert_int_equal(unlink(pidfile), 0);
  assert_int_equal(mkfifo(pidfile, 0600), 0);
  alarm(20); /* a blocking open() kills the test instead of hanging the run */
  expect_not_running(fx, "pid file: not a regular file (refused)");
  alarm(0);
  assert_int_equal(unlink(pidfile), 0);
  assert_int_equal(mkdir(pidfile, 0700), 0);
  expect_not_running(fx, "pid file: not a regular file (refused)");
}

static void pid_target_exists_or_waits(void **state) {
  fixture_t *fx = *state;
  add_proc(fx, 555, "python3", "python3", 1);
  fx->cfg.target.kind = EM_TARGET_PID;
  fx->cfg.target.pid = 555;
  assert_int_equal(find(fx), 555);
  fx->cfg.target.pid = 556;
  expect_not_running(fx, "pid 556 does not exist");
}

static void start_time_reads_past_a_comm_with_parentheses(void **state) {
  fixture_t *fx = *state;
  add_proc(fx, 31, "evil) S 1 2 (x", "x", 123456789);
  unsigned long long start = 0;
  assert_int_equal(em_target_start_time(fx->root, 31, &start), 0);
  assert_int_equal(start, 123456789);
  assert_int_equal(em_target_start_time(fx->root, 32, &start), -ENOENT);
}

static void lookups_that_cannot_work_say_so(void **state) {
  fixture_t *fx = *state;
  fx->cfg.target.kind = EM_TARGET_NONE;
  assert_true(find(fx) < 0);
  set_target(fx, EM_TARGET_COMM, "python3");
  snprintf(fx->cfg.proc_root, sizeof(fx->cfg.proc_root), "%s/missing", fx->root);
  assert_true(find(fx) < 0);
}

static void real_proc_finds_this_test_by_its_parent(void **state) {
  (void)state;
  em_config_t cfg;
  em_config_defaults(&cfg);
  cfg.target.kind = EM_TARGET_PID;
  cfg.target.pid = getppid();
  assert_int_equal(em_target_find(&cfg.target, cfg.proc_root, NULL, 0), getppid());
  unsigned long long mine = 0, parent = 0;
  assert_int_equal(em_target_start_time("/proc", getpid(), &mine), 0);
  assert_int_equal(em_target_start_time("/proc", getppid(), &parent), 0);
  assert_true(parent <= mine);
}

int main(int argc, char **argv) {
  const struct CMUnitTest unit[] = {
      EM_FX(comm_matches_exactly_and_oldest_wins),
      EM_FX(cmdline_matches_a_substring_across_arguments),
      EM_FX(a_wrapper_never_wins_over_the_process_it_started),
      EM_FX(a_wrapper_found_first_names_its_successor),
      EM_FX(the_agent_never_matches_itself),
      EM_FX(pid_files_missing_garbage_or_stale_mean_not_running),
      EM_FX(pid_target_exists_or_waits),
      EM_FX(start_time_reads_past_a_comm_with_parentheses),
      EM_FX(lookups_that_cannot_work_say_so),
  };
  /* The live kernel: this process and its parent in the real /proc. Run with --live, labelled
   * integration (CMakeLists.txt). */
  const struct CMUnitTest live[] = {
      cmocka_unit_test(real_proc_finds_this_test_by_its_parent),
  };
  return EM_RUN_UNIT_OR_LIVE(argc, argv, unit, live);
}
