/*
 * test_cli_torture.c - edgemon-cli's reading commands run whole with each allocation failing in
 * turn, in the manner of curl's torture mode: edgemon-cli-alloc (the same program built with
 * failing_alloc.c and failing_alloc_env.c) runs each command once with nothing failing, then
 * once with its Nth allocation failing for N = 1, 2, ... until a run no longer reaches the Nth.
 * A run whose allocation failed exits with one of the program's error codes and a message on
 * standard error, or succeeds with the same output as the run where nothing failed (or another
 * one when it says on standard error that it went on out of memory); it never
 * dies of a signal, and under AddressSanitizer never reports an error or a leak (their exit
 * codes are set apart from the program's).
 *
 * The commands: decode of a message (JSON and diagnostic notation) and of a recording, compare
 * of two recordings (table and JSON), flight --file and profile --file in their text and JSON
 * forms and profile's folded lines; their inputs are the golden vectors, written in a
 * temporary directory.
 */
#define _XOPEN_SOURCE 700
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "vectors.h"

#include <errno.h>
#include <fcntl.h>
#include <recording.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef EM_CLI_ALLOC
#error "EM_CLI_ALLOC: the path of edgemon-cli-alloc"
#endif

/* Exit codes of the sanitizers in the runs, apart from the program's own (cli.h: 0 to 4). */
#define SANITIZER_OPTIONS "exitcode=90:detect_leaks=1"
#define LEAK_OPTIONS      "exitcode=91"
#define UB_OPTIONS        "exitcode=92:halt_on_error=1"
#define MAX_RUNS          5000ul

static char dir[64];

/* dir/name, in a static buffer of its own per slot. */
static const char *in_dir(int slot, const char *name) {
  static char paths[8][128];
  snprintf(paths[slot], sizeof(paths[slot]), "%s/%s", dir, name);
  return paths[slot];
}

/* The whole of a file as a malloc'd, NUL-terminated string; *len its bytes. */
static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  char *buf = NULL;
  size_t cap = 0;
  *len = 0;
  for (;;) {
    if (*len + 4096 + 1 > cap) {
      cap = cap ? cap * 2 : 8192;
      buf = realloc(buf, cap);
      assert_non_null(buf);
    }
    size_t got = fread(buf + *len, 1, 4096, f);
    *len += got;
    if (got == 0) {
      break;
    }
  }
  fclose(f);
  buf[*len] = '\0';
  return buf;
}

/* One run's result. */
typedef struct {
  int status; /* As waitpid() says. */
  char *out;  /* Standard output, malloc'd. */
  size_t out_len;
  char *err; /* Standard error, malloc'd. */
  size_t err_len;
  unsigned long seen, refused; /* Allocations counted and refused (failing_alloc_env.c). */
} run_t;

static void run_free(run_t *r) {
  free(r->out);
  free(r->err);
}

/* Runs edgemon-cli-alloc with args (NULL-terminated) and its allocation nth failing (0 none). */
static run_t run(char *const args[], unsigned long nth) {
  char nth_text[32];
  snprintf(nth_text, sizeof(nth_text), "%lu", nth);
  const char *out_path = in_dir(0, "stdout");
  const char *err_path = in_dir(1, "stderr");
  const char *report = in_dir(2, "report");
  unlink(report);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || err < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) {
      _exit(120);
    }
    setenv("EM_FAILING_ALLOC_NTH", nth_text, 1);
    setenv("EM_FAILING_ALLOC_REPORT", report, 1);
    setenv("ASAN_OPTIONS", SANITIZER_OPTIONS, 1);
    setenv("LSAN_OPTIONS", LEAK_OPTIONS, 1);
    setenv("UBSAN_OPTIONS", UB_OPTIONS, 1);
    setenv("NO_COLOR", "1", 1);
    char *argv[16] = {(char *)EM_CLI_ALLOC};
    for (size_t i = 0; args[i] && i + 2 < 16; i++) {
      argv[i + 1] = args[i];
    }
    execv(EM_CLI_ALLOC, argv);
    _exit(121);
  }
  run_t r = {0};
  assert_int_equal(waitpid(pid, &r.status, 0), pid);
  r.out = slurp(out_path, &r.out_len);
  r.err = slurp(err_path, &r.err_len);
  FILE *f = fopen(report, "r");
  if (f) {
    if (fscanf(f, "%lu %lu", &r.seen, &r.refused) != 2) {
      r.seen = r.refused = 0;
    }
    fclose(f);
  }
  return r;
}

/* The command's words, for messages. */
static const char *words(char *const args[]) {
  static char text[512];
  size_t n = 0;
  text[0] = '\0';
  for (size_t i = 0; args[i] && n < sizeof(text); i++) {
    n += (size_t)snprintf(text + n, sizeof(text) - n, "%s%s", i ? " " : "", args[i]);
  }
  return text;
}

/*
 * Runs the command with nothing failing (it must succeed with output), then with each of its
 * allocations failing in turn. Returns the allocations it made.
 */
static unsigned long torture(char *const args[]) {
  run_t want = run(args, 0);
  if (!WIFEXITED(want.status) || WEXITSTATUS(want.status) != 0 || want.out_len == 0) {
    fail_msg("%s: status %#x with nothing failing: %s", words(args), want.status, want.err);
  }
  unsigned long k = 1;
  for (; k <= MAX_RUNS; k++) {
    run_t got = run(args, k);
    if (!WIFEXITED(got.status)) {
      fail_msg("%s, allocation %lu failing: killed by signal %d: %s", words(args), k,
               WIFSIGNALED(got.status) ? WTERMSIG(got.status) : -1, got.err);
    }
    int code = WEXITSTATUS(got.status);
    if (code > 4) {
      fail_msg("%s, allocation %lu failing: exit %d: %s", words(args), k, code, got.err);
    }
    bool done = got.refused == 0;
    bool same = got.out_len == want.out_len && memcmp(got.out, want.out, want.out_len) == 0;
    /* A run may go on without what it could not allocate (decode's names of values) when it
     * says so. */
    if (code == 0 && !same && !strstr(got.err, "out of memory")) {
      fail_msg("%s, allocation %lu failing: succeeded with another output (%zu bytes, want "
               "%zu): %s",
               words(args), k, got.out_len, want.out_len, got.err);
    }
    if (code != 0 && got.err_len == 0) {
      fail_msg("%s, allocation %lu failing: exit %d without a word", words(args), k, code);
    }
    if (done && code != 0) {
      fail_msg("%s: exit %d with nothing failing (%lu allocations)", words(args), code, got.seen);
    }
    run_free(&got);
    if (done) {
      break;
    }
  }
  run_free(&want);
  assert_true(k <= MAX_RUNS);
  return k - 1;
}

/* --- inputs ------------------------------------------------------------------------------ */

static const em_msg_t *vector(const char *name) {
  size_t n;
  const em_vector_t *v = em_vectors(&n);
  for (size_t i = 0; i < n; i++) {
    if (strcmp(v[i].name, name) == 0) {
      return &v[i].msg;
    }
  }
  fail_msg("no vector %s", name);
  return NULL;
}

static void put_file(const char *path, const uint8_t *bytes, size_t len) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(bytes, 1, len, f), len);
  assert_int_equal(fclose(f), 0);
}

/* A recording of bench-01's birth and `windows` data messages, each window's latencies
 * scaled by `scale`. */
static void put_recording(const char *path, int windows, uint64_t scale) {
  static uint8_t wire[EM_PROTO_MAX_MESSAGE_BYTES];
  em_rec_writer_t *w = NULL;
  assert_int_equal(em_rec_writer_new(&w, path), 0);
  size_t len;
  const em_msg_t *birth = vector("birth_full");
  assert_int_equal(em_proto_encode(birth, wire, sizeof(wire), &len), 0);
  const char *topic = "edgemon/v1/bench-01/birth";
  em_rec_entry_t e = {birth->u.birth.head.time_ns, true, topic, strlen(topic), wire, len};
  assert_int_equal(em_rec_write(w, &e), 0);
  const em_msg_t *basic = vector("data_basic");
  em_stage_t stages[8];
  assert_true(basic->u.data.n_stages <= 8);
  for (int i = 0; i < windows; i++) {
    em_msg_t m = *basic;
    m.u.data.seq = (uint32_t)i + 1;
    m.u.data.head.time_ns += (uint64_t)i * m.u.data.window_ns;
    for (size_t s = 0; s < m.u.data.n_stages; s++) {
      stages[s] = basic->u.data.stages[s];
      stages[s].sum_ns = stages[s].sum_ns * scale + (uint64_t)i * 1000u;
    }
    m.u.data.stages = stages;
    assert_int_equal(em_proto_encode(&m, wire, sizeof(wire), &len), 0);
    topic = "edgemon/v1/bench-01/data";
    e = (em_rec_entry_t){m.u.data.head.time_ns, false, topic, strlen(topic), wire, len};
    assert_int_equal(em_rec_write(w, &e), 0);
  }
  assert_int_equal(em_rec_writer_free(w), 0);
}

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof(dir), "/tmp/em-cli-torture-XXXXXX");
  assert_non_null(mkdtemp(dir));
  static uint8_t
      wire[EM_FLIGHT_MAX_BYTES > EM_PROFILE_MAX_BYTES ? EM_FLIGHT_MAX_BYTES : EM_PROFILE_MAX_BYTES];
  size_t len, n;
  assert_int_equal(em_proto_encode(vector("data_basic"), wire, sizeof(wire), &len), 0);
  put_file(in_dir(3, "data.cbor"), wire, len);
  assert_int_equal(em_flight_encode(&em_flight_vectors(&n)[0].flight, wire, sizeof(wire), &len), 0);
  put_file(in_dir(3, "flight.cbor"), wire, len);
  assert_int_equal(em_profile_encode(&em_profile_vectors(&n)[0].profile, wire, sizeof(wire), &len),
                   0);
  put_file(in_dir(3, "profile.cbor"), wire, len);
  put_recording(in_dir(3, "a.rec"), 8, 1);
  put_recording(in_dir(3, "b.rec"), 8, 2);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  static const char *const files[] = {"data.cbor", "flight.cbor", "profile.cbor", "a.rec",
                                      "b.rec",     "stdout",      "stderr",       "report"};
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
    unlink(in_dir(3, files[i]));
  }
  rmdir(dir);
  return 0;
}

/* A path in the directory as an argument (slots 4 to 7 stay valid for one command). */
#define ARG(slot, name) ((char *)in_dir((slot), (name)))

/* decode of one message as JSON and as diagnostic notation, and of a recording. */
static void decode_fails_cleanly_when_any_allocation_fails(void **state) {
  (void)state;
  unsigned long made = 0;
  made += torture((char *const[]){"decode", ARG(4, "data.cbor"), "--json", NULL});
  made += torture((char *const[]){"decode", ARG(4, "data.cbor"), "--diag", NULL});
  made += torture((char *const[]){"decode", ARG(4, "a.rec"), NULL});
  assert_true(made >= 3);
}

/* compare of two recordings, as a table and as JSON. */
static void compare_fails_cleanly_when_any_allocation_fails(void **state) {
  (void)state;
  unsigned long made = 0;
  made += torture((char *const[]){"compare", ARG(4, "a.rec"), ARG(5, "a.rec"), NULL});
  made += torture((char *const[]){"compare", ARG(4, "a.rec"), ARG(5, "b.rec"), "--threshold", "500",
                                  "--json", NULL});
  assert_true(made >= 2);
}

/* flight --file and profile --file, text and JSON, and the folded stacks. */
static void forensic_files_fail_cleanly_when_any_allocation_fails(void **state) {
  (void)state;
  unsigned long made = 0;
  made += torture((char *const[]){"flight", "--file", ARG(4, "flight.cbor"), NULL});
  made += torture((char *const[]){"flight", "--file", ARG(4, "flight.cbor"), "--json", NULL});
  made += torture((char *const[]){"profile", "--file", ARG(4, "profile.cbor"), NULL});
  made += torture((char *const[]){"profile", "--file", ARG(4, "profile.cbor"), "--json", NULL});
  made += torture((char *const[]){"profile", "--file", ARG(4, "profile.cbor"), "--folded", NULL});
  assert_true(made >= 5);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(decode_fails_cleanly_when_any_allocation_fails),
      cmocka_unit_test(compare_fails_cleanly_when_any_allocation_fails),
      cmocka_unit_test(forensic_files_fail_cleanly_when_any_allocation_fails),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
