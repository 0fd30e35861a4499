/*
 * test_agg_store_alloc.c - the aggregator's store (host/aggregator/store/) with each of its
 * allocations failing in turn (alloc_sweep.h): opening a new and an existing store, the WAL
 * checkpointer's start, the ingest of every golden message (birth, data, state, status), of a
 * flight recording and of a stack profile, a rollup pass and the retention pass.
 * Each failure is a clean error (no crash, and no leak under AddressSanitizer), and once
 * nothing fails the store works: an open opens, a message added again is stored exactly as
 * when nothing failed, a pass run again rolls what it would have. SQLite's own allocations are
 * in its shared library and do not fail here.
 *
 * Rows are counted through an independent connection (store_query.h): only committed ones.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "alloc_sweep.h"
#include "checkpoint.h"
#include "failing_alloc.h"
#include "store.h"
#include "store_query.h"
#include "vectors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T0_NS 1700000000000000000ull /* "Now" of the passes. */
#define S_NS  1000000000ull

/* The tables whose rows an ingest or a pass writes, counted to compare two runs. */
static const char *const tables[] = {
    "devices",       "metrics",       "stages",       "models",  "data",    "stage_windows",
    "level_changes", "stage_rollups", "data_rollups", "flights", "profiles"};
#define N_TABLES (sizeof(tables) / sizeof(tables[0]))

typedef struct {
  int64_t n[N_TABLES];
} counts_t;

static counts_t count_rows(const char *path) {
  counts_t c;
  for (size_t i = 0; i < N_TABLES; i++) {
    char sql[64];
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s", tables[i]);
    c.n[i] = q_int(path, sql);
  }
  return c;
}

static void expect_counts(const char *what, unsigned long k, const counts_t *want,
                          const counts_t *got) {
  for (size_t i = 0; i < N_TABLES; i++) {
    if (want->n[i] != got->n[i]) {
      fail_msg("%s, allocation %lu failing, then again: %s holds %lld rows, want %lld", what, k,
               tables[i], (long long)got->n[i], (long long)want->n[i]);
    }
  }
}

static em_store_opts_t store_opts(const store_fixture_t *f) {
  return (em_store_opts_t){
      .path = f->path, .batch_ms = 1000, .batch_rows = 1000, .rollup_manual = true};
}

static em_store_t *open_ok(const store_fixture_t *f) {
  em_store_opts_t o = store_opts(f);
  em_store_t *s = NULL;
  char err[512];
  if (em_store_open(&s, &o, NULL, err, sizeof(err)) != 0) {
    fail_msg("em_store_open(%s): %s", f->path, err);
  }
  return s;
}

static void remove_store(const store_fixture_t *f) {
  static const char *const suffix[] = {"", "-wal", "-shm"};
  for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
    char p[400];
    snprintf(p, sizeof(p), "%s%s", f->path, suffix[i]);
    unlink(p);
  }
}

static void close_ok(em_store_t *s) {
  assert_int_equal(em_store_close(s), 0);
}

/* --- open -------------------------------------------------------------------------------- */

typedef struct {
  const store_fixture_t *f;
  bool fresh; /* Each round opens a new file; else the store one clean open left. */
  em_store_t *s;
  char err[512];
  int fd_before;
} open_round_t;

static void open_before(void *ctx) {
  open_round_t *r = ctx;
  remove_store(r->f);
  if (!r->fresh) {
    close_ok(open_ok(r->f));
  }
  r->fd_before = alloc_sweep_lowest_free_fd();
  r->s = (em_store_t *)&r->s; /* Not NULL: a failed open must clear it. */
  r->err[0] = '\0';
}

static int open_step(void *ctx) {
  open_round_t *r = ctx;
  em_store_opts_t o = store_opts(r->f);
  return em_store_open(&r->s, &o, NULL, r->err, sizeof(r->err));
}

static void open_refused(void *ctx, unsigned long k, int rc) {
  open_round_t *r = ctx;
  if (rc != -ENOMEM && rc != -EIO) {
    fail_msg("allocation %lu failing: open returned %d (%s), want -ENOMEM or -EIO", k, rc, r->err);
  }
  assert_null(r->s);
  assert_true(r->err[0] != '\0');
  assert_int_equal(alloc_sweep_lowest_free_fd(), r->fd_before);
  em_store_t *s = open_ok(r->f);
  close_ok(s);
}

static void open_passed(void *ctx, int rc) {
  open_round_t *r = ctx;
  assert_int_equal(rc, 0);
  close_ok(r->s);
}

/* A failed open is -ENOMEM or -EIO with its text, no store and no descriptor left open, for a
 * new file and for an existing store; the next open opens. */
static void store_open_fails_cleanly_when_any_allocation_fails(void **state) {
  static const alloc_sweep_t sweep = {.what = "em_store_open",
                                      .before = open_before,
                                      .step = open_step,
                                      .refused = open_refused,
                                      .passed = open_passed};
  for (int fresh = 1; fresh >= 0; fresh--) {
    open_round_t r = {.f = *state, .fresh = fresh};
    /* The store, its path copies and bucket blob, the checkpointer and its path, the rollups,
     * the forensic tables and the models. */
    assert_true(alloc_sweep(&sweep, &r) >= 8);
  }
}

/* --- the checkpointer -------------------------------------------------------------------- */

typedef struct {
  const store_fixture_t *f;
  em_ckpt_t *c;
  char err[256];
} ckpt_round_t;

static int ckpt_step(void *ctx) {
  ckpt_round_t *r = ctx;
  r->c = (em_ckpt_t *)&r->c;
  return em_ckpt_start(&r->c, r->f->path, 1000, 0, r->err, sizeof(r->err));
}

static void ckpt_refused(void *ctx, unsigned long k, int rc) {
  ckpt_round_t *r = ctx;
  if (rc != -ENOMEM) {
    fail_msg("allocation %lu failing: em_ckpt_start returned %d, want -ENOMEM", k, rc);
  }
  assert_null(r->c);
  assert_non_null(strstr(r->err, "out of memory"));
  assert_int_equal(ckpt_step(r), 0);
  em_ckpt_stop(r->c);
}

static void ckpt_passed(void *ctx, int rc) {
  ckpt_round_t *r = ctx;
  assert_int_equal(rc, 0);
  em_ckpt_stats_t st;
  em_ckpt_stats(r->c, &st);
  assert_int_equal(st.errors, 0);
  em_ckpt_stop(r->c);
}

/* The checkpointer's start fails with -ENOMEM and its text, and starts once nothing fails. */
static void checkpointer_start_fails_cleanly_when_any_allocation_fails(void **state) {
  const store_fixture_t *f = *state;
  close_ok(open_ok(f));
  static const alloc_sweep_t sweep = {
      .what = "em_ckpt_start", .step = ckpt_step, .refused = ckpt_refused, .passed = ckpt_passed};
  ckpt_round_t r = {.f = f};
  assert_true(alloc_sweep(&sweep, &r) >= 2); /* The checkpointer and its WAL path. */
}

/* --- ingest ------------------------------------------------------------------------------ */

/* What one ingest round adds: a message, or a flight recording or profile with its CBOR. */
typedef struct {
  const char *name;
  const em_msg_t *msg;
  const em_flight_t *flight;
  const em_profile_t *profile;
  uint8_t
      cbor[EM_FLIGHT_MAX_BYTES > EM_PROFILE_MAX_BYTES ? EM_FLIGHT_MAX_BYTES : EM_PROFILE_MAX_BYTES];
  size_t len;
} ingest_t;

typedef struct {
  const store_fixture_t *f;
  ingest_t *in;
  em_dict_t *dict;
  em_device_t *dev;
  em_store_t *s;
  counts_t want; /* After the ingest with nothing failing, committed. */
} ingest_round_t;

static int ingest(ingest_round_t *r) {
  const ingest_t *in = r->in;
  if (in->flight) {
    return em_store_add_flight(r->s, "dev-1", in->flight, in->cbor, in->len, T0_NS);
  }
  if (in->profile) {
    return em_store_add_profile(r->s, "dev-1", in->profile, in->cbor, in->len, T0_NS);
  }
  return em_store_add(r->s, "dev-1", r->dev, in->msg, T0_NS);
}

/* A new store. */
static void ingest_before(void *ctx) {
  ingest_round_t *r = ctx;
  remove_store(r->f);
  r->s = open_ok(r->f);
}

static int ingest_step(void *ctx) {
  return ingest(ctx);
}

static void ingest_again_and_count(ingest_round_t *r, const char *what, unsigned long k) {
  assert_int_equal(ingest(r), 0);
  assert_int_equal(em_store_flush(r->s), 0);
  counts_t got = count_rows(r->f->path);
  expect_counts(what, k, &r->want, &got);
  close_ok(r->s);
}

static void ingest_refused(void *ctx, unsigned long k, int rc) {
  ingest_round_t *r = ctx;
  if (rc != 0 && rc != -EAGAIN) {
    fail_msg("%s, allocation %lu failing: the add returned %d, want 0 or -EAGAIN", r->in->name, k,
             rc);
  }
  ingest_again_and_count(r, r->in->name, k);
}

static void ingest_passed(void *ctx, int rc) {
  ingest_round_t *r = ctx;
  assert_int_equal(rc, 0);
  assert_int_equal(em_store_flush(r->s), 0);
  counts_t got = count_rows(r->f->path);
  expect_counts(r->in->name, 0, &r->want, &got);
  close_ok(r->s);
}

/* Sweeps the ingest of `in` into a new store; returns the allocations it makes. */
static unsigned long sweep_ingest(const store_fixture_t *f, ingest_t *in) {
  static const alloc_sweep_t sweep = {.what = "ingest",
                                      .before = ingest_before,
                                      .step = ingest_step,
                                      .refused = ingest_refused,
                                      .passed = ingest_passed};
  ingest_round_t r = {.f = f, .in = in};
  assert_int_equal(em_dict_new(&r.dict), 0);
  r.dev = em_dict_device(r.dict, "dev-1", true);
  assert_non_null(r.dev);
  size_t n;
  const em_vector_t *v = em_vectors(&n);
  for (size_t i = 0; i < n; i++) {
    if (strcmp(v[i].name, "birth_full") == 0) {
      assert_int_equal(em_dict_set_birth(r.dev, &v[i].msg.u.birth), 0);
    }
  }
  /* What the ingest writes when nothing fails. */
  ingest_before(&r);
  assert_int_equal(ingest(&r), 0);
  assert_int_equal(em_store_flush(r.s), 0);
  r.want = count_rows(f->path);
  close_ok(r.s);
  unsigned long made = alloc_sweep(&sweep, &r);
  em_dict_free(r.dict);
  return made;
}

/*
 * Every golden message the store takes (birth, data, state, status), with each allocation of
 * its ingest failing: the add returns 0 (the store absorbed it: a name not cached) or -EAGAIN
 * (the caller is to deliver it again), and added again with nothing failing, the committed
 * rows are those of an ingest where nothing failed.
 */
static void store_ingest_of_each_message_fails_cleanly_when_any_allocation_fails(void **state) {
  size_t n;
  const em_vector_t *v = em_vectors(&n);
  unsigned long made = 0;
  ingest_t *in = calloc(1, sizeof(*in));
  assert_non_null(in);
  for (size_t i = 0; i < n; i++) {
    if (v[i].msg.kind == EM_MSG_CMD) {
      continue;
    }
    in->name = v[i].name;
    in->msg = &v[i].msg;
    made += sweep_ingest(*state, in);
  }
  free(in);
  assert_true(made > 0);
}

/* A flight recording and a stack profile, the same way. */
static void store_ingest_of_forensics_fails_cleanly_when_any_allocation_fails(void **state) {
  ingest_t *in = calloc(1, sizeof(*in));
  assert_non_null(in);
  size_t n;
  const em_flight_vector_t *fv = em_flight_vectors(&n);
  assert_true(n > 0);
  *in = (ingest_t){.name = fv[0].name, .flight = &fv[0].flight};
  assert_int_equal(em_flight_encode(in->flight, in->cbor, sizeof(in->cbor), &in->len), 0);
  sweep_ingest(*state, in);
  const em_profile_vector_t *pv = em_profile_vectors(&n);
  assert_true(n > 0);
  *in = (ingest_t){.name = pv[0].name, .profile = &pv[0].profile};
  assert_int_equal(em_profile_encode(in->profile, in->cbor, sizeof(in->cbor), &in->len), 0);
  sweep_ingest(*state, in);
  free(in);
}

/* --- the passes -------------------------------------------------------------------------- */

/* The data_basic vector of two devices, one message every 10 s for three minutes. */
static void add_minutes(em_store_t *s) {
  size_t n;
  const em_vector_t *v = em_vectors(&n);
  const em_msg_t *basic = NULL;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(v[i].name, "data_basic") == 0) {
      basic = &v[i].msg;
    }
  }
  assert_non_null(basic);
  uint32_t seq = 0;
  for (uint64_t t = 0; t < 180; t += 10) {
    for (int d = 0; d < 2; d++) {
      em_msg_t m = *basic;
      m.u.data.head.time_ns = T0_NS - 3600 * S_NS + t * S_NS;
      m.u.data.seq = ++seq;
      assert_int_equal(em_store_add(s, d ? "dev-b" : "dev-a", NULL, &m, T0_NS), 0);
    }
  }
  assert_int_equal(em_store_flush(s), 0);
}

typedef struct {
  const store_fixture_t *f;
  bool retain; /* em_store_retain() rather than em_store_rollup(). */
  em_store_t *s;
  counts_t want;
} pass_round_t;

static void pass_before(void *ctx) {
  pass_round_t *r = ctx;
  remove_store(r->f);
  r->s = open_ok(r->f);
  add_minutes(r->s);
}

static int pass_step(void *ctx) {
  pass_round_t *r = ctx;
  if (r->retain) {
    return em_store_retain(r->s, T0_NS);
  }
  em_rollup_report_t rep;
  int rc;
  do {
    rc = em_store_rollup(r->s, T0_NS, &rep);
  } while (rc == 0 && rep.more);
  return rc;
}

static void pass_passed(void *ctx, int rc) {
  pass_round_t *r = ctx;
  assert_int_equal(rc, 0);
  counts_t got = count_rows(r->f->path);
  expect_counts(r->retain ? "retain" : "rollup", 0, &r->want, &got);
  close_ok(r->s);
}

static void pass_refused(void *ctx, unsigned long k, int rc) {
  pass_round_t *r = ctx;
  if (rc != 0 && rc != -EIO) {
    fail_msg("allocation %lu failing: the pass returned %d, want 0 or -EIO", k, rc);
  }
  pass_passed(r, pass_step(r));
}

/* A rollup pass (until none is left) and a retention pass with each allocation failing:
 * 0 or -EIO, and run again the committed rollups are those of a pass where nothing failed. */
static void store_passes_fail_cleanly_when_any_allocation_fails(void **state) {
  static const alloc_sweep_t sweep = {.what = "pass",
                                      .before = pass_before,
                                      .step = pass_step,
                                      .refused = pass_refused,
                                      .passed = pass_passed};
  for (int retain = 0; retain < 2; retain++) {
    pass_round_t r = {.f = *state, .retain = retain};
    pass_before(&r);
    assert_int_equal(pass_step(&r), 0);
    r.want = count_rows(r.f->path);
    close_ok(r.s);
    assert_true(r.want.n[7] > 0 && r.want.n[8] > 0); /* Stage and data rollups. */
    assert_true(alloc_sweep(&sweep, &r) > 0);
  }
}

static int disarm_and_teardown(void **state) {
  em_failing_alloc_disarm();
  return store_fixture_teardown(state);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(store_open_fails_cleanly_when_any_allocation_fails,
                                      store_fixture_setup, disarm_and_teardown),
      cmocka_unit_test_setup_teardown(checkpointer_start_fails_cleanly_when_any_allocation_fails,
                                      store_fixture_setup, disarm_and_teardown),
      cmocka_unit_test_setup_teardown(
          store_ingest_of_each_message_fails_cleanly_when_any_allocation_fails, store_fixture_setup,
          disarm_and_teardown),
      cmocka_unit_test_setup_teardown(
          store_ingest_of_forensics_fails_cleanly_when_any_allocation_fails, store_fixture_setup,
          disarm_and_teardown),
      cmocka_unit_test_setup_teardown(store_passes_fail_cleanly_when_any_allocation_fails,
                                      store_fixture_setup, disarm_and_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
