/*
 * test_agg_api_alloc.c - the aggregator's JSON API and /metrics (host/aggregator/api/) with
 * each of their allocations failing in turn (alloc_sweep.h): the history's open, /api/fleet,
 * a device's history, /api/latency, /api/models, /api/cohort, the flight recordings' and stack
 * profiles' lists and entries (JSON and CBOR), and the text and protobuf expositions and the
 * JSON of /api/devices. An answer built while an allocation fails is the 500 of out of memory
 * (or, where the code absorbs the failure, the answer itself), nothing crashes or leaks (under
 * AddressSanitizer), and once nothing fails the same call answers byte for byte what it did
 * before any failure.
 *
 * The store is written once per test from the golden vectors (every message of one device, a
 * flight recording and a stack profile) in a temporary directory (store_query.h), and the
 * registry is fed the same messages. SQLite's own allocations are not seen.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "alloc_sweep.h"
#include "cohort.h"
#include "failing_alloc.h"
#include "forensic_api.h"
#include "history.h"
#include "metrics.h"
#include "store.h"
#include "store_query.h"
#include "vectors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEVICE "bench-01"             /* The device of the golden births. */
#define VEC_T0 1795262400000000000ull /* The golden vectors' time. */
#define NOW_NS (VEC_T0 + 1800ull * 1000000000ull)

typedef struct {
  store_fixture_t *f;
  em_registry_t *reg;
  em_history_t *h;
  char flight_key[32];
  char profile_key[32];
} api_fixture_t;

static void store_everything(api_fixture_t *a) {
  em_store_opts_t o = {
      .path = a->f->path, .batch_ms = 1000, .batch_rows = 1000, .rollup_manual = true};
  em_store_t *s = NULL;
  char err[512];
  if (em_store_open(&s, &o, NULL, err, sizeof(err)) != 0) {
    fail_msg("em_store_open: %s", err);
  }
  static uint8_t
      wire[EM_FLIGHT_MAX_BYTES > EM_PROFILE_MAX_BYTES ? EM_FLIGHT_MAX_BYTES : EM_PROFILE_MAX_BYTES];
  size_t n, len;
  const em_vector_t *v = em_vectors(&n);
  for (size_t i = 0; i < n; i++) {
    static const char *const topic_kind[] = {
        [EM_MSG_BIRTH] = "birth", [EM_MSG_DATA] = "data",     [EM_MSG_STATE] = "state",
        [EM_MSG_CMD] = "cmd",     [EM_MSG_STATUS] = "status",
    };
    if (v[i].msg.kind == EM_MSG_CMD || strcmp(v[i].name, "data_largest") == 0) {
      continue;
    }
    assert_int_equal(em_store_add(s, DEVICE, NULL, &v[i].msg, NOW_NS), 0);
    char topic[96];
    snprintf(topic, sizeof(topic), "edgemon/v1/" DEVICE "/%s", topic_kind[v[i].msg.kind]);
    assert_int_equal(em_proto_encode(&v[i].msg, wire, sizeof(wire), &len), 0);
    em_ingest_t in;
    (void)em_registry_ingest(a->reg, topic, wire, len, &in); /* Some are refused: other devices. */
  }
  const em_flight_t *fl = &em_flight_vectors(&n)[0].flight;
  assert_int_equal(em_flight_encode(fl, wire, sizeof(wire), &len), 0);
  assert_int_equal(em_store_add_flight(s, DEVICE, fl, wire, len, NOW_NS), 0);
  snprintf(a->flight_key, sizeof(a->flight_key), "%u-%u", (unsigned)fl->head.session,
           (unsigned)fl->number);
  const em_profile_t *pr = &em_profile_vectors(&n)[0].profile;
  assert_int_equal(em_profile_encode(pr, wire, sizeof(wire), &len), 0);
  assert_int_equal(em_store_add_profile(s, DEVICE, pr, wire, len, NOW_NS), 0);
  snprintf(a->profile_key, sizeof(a->profile_key), "%u-%u", (unsigned)pr->head.session,
           (unsigned)pr->number);
  assert_int_equal(em_store_close(s), 0);
  em_registry_lock(a->reg);
  assert_non_null(em_registry_find(a->reg, DEVICE));
  em_registry_unlock(a->reg);
}

static int setup(void **state) {
  api_fixture_t *a = calloc(1, sizeof(*a));
  assert_non_null(a);
  void *f = NULL;
  assert_int_equal(store_fixture_setup(&f), 0);
  a->f = f;
  assert_int_equal(em_registry_new(&a->reg, true), 0);
  store_everything(a);
  char err[256];
  assert_int_equal(em_history_open(&a->h, a->f->path, err, sizeof(err)), 0);
  *state = a;
  return 0;
}

static int teardown(void **state) {
  api_fixture_t *a = *state;
  em_failing_alloc_disarm();
  em_history_close(a->h);
  em_registry_free(a->reg);
  void *f = a->f;
  free(a);
  return store_fixture_teardown(&f);
}

/* --- the history's open ------------------------------------------------------------------ */

typedef struct {
  const char *path;
  em_history_t *h;
  char err[256];
  int fd_before;
} open_round_t;

static void open_before(void *ctx) {
  open_round_t *r = ctx;
  r->fd_before = alloc_sweep_lowest_free_fd();
  r->h = NULL;
  r->err[0] = '\0';
}

static int open_step(void *ctx) {
  open_round_t *r = ctx;
  return em_history_open(&r->h, r->path, r->err, sizeof(r->err));
}

static void open_refused(void *ctx, unsigned long k, int rc) {
  open_round_t *r = ctx;
  if (rc != -ENOMEM && rc != -EIO) {
    fail_msg("allocation %lu failing: em_history_open returned %d, want -ENOMEM or -EIO", k, rc);
  }
  assert_null(r->h);
  assert_true(r->err[0] != '\0');
  assert_int_equal(alloc_sweep_lowest_free_fd(), r->fd_before);
  assert_int_equal(open_step(r), 0);
  em_history_close(r->h);
}

static void open_passed(void *ctx, int rc) {
  open_round_t *r = ctx;
  assert_int_equal(rc, 0);
  em_history_close(r->h);
}

/* A failed open of the history's connections is -ENOMEM or -EIO with its text, no history and
 * no descriptor left open; the next open opens. */
static void history_open_fails_cleanly_when_any_allocation_fails(void **state) {
  api_fixture_t *a = *state;
  static const alloc_sweep_t sweep = {.what = "em_history_open",
                                      .before = open_before,
                                      .step = open_step,
                                      .refused = open_refused,
                                      .passed = open_passed};
  open_round_t r = {.path = a->f->path};
  assert_true(alloc_sweep(&sweep, &r) >= 1);
}

/* --- the answers ------------------------------------------------------------------------- */

/* The calls of the API the sweeps make. */
typedef enum {
  ROUTE_FLEET,
  ROUTE_HISTORY,
  ROUTE_LATENCY,
  ROUTE_MODELS,
  ROUTE_COHORT,
  ROUTE_FLIGHTS,
  ROUTE_PROFILES,
  ROUTE_FLIGHT,  /* One recording, in `format`. */
  ROUTE_PROFILE, /* One profile, in `format`. */
  ROUTE_METRICS, /* /metrics in `format` ("text" or "protobuf"). */
  ROUTE_DEVICES, /* /api/devices. */
} route_t;

/* One call and its parameters; the answer with nothing failing is a 200 with a body. */
typedef struct {
  const char *what;
  route_t route;
  em_query_kind_t kind; /* Of the parameters, for the routes of em_history_reply_t. */
  em_query_param_t params[2];
  size_t n_params;
  const char *format; /* ROUTE_FLIGHT, ROUTE_PROFILE, ROUTE_METRICS. */
} call_t;

/* One answer as the HTTP server would send it. */
typedef struct {
  unsigned status;
  char *body; /* malloc'd; NULL: none. */
  size_t len;
} answer_t;

static void answer_free(answer_t *x) {
  free(x->body);
  *x = (answer_t){0};
}

static bool answer_same(const answer_t *x, const answer_t *y) {
  return x->status == y->status && x->len == y->len &&
         (x->len == 0 || memcmp(x->body, y->body, x->len) == 0);
}

/* The answer of a /metrics renderer: the 500 when rendering failed (-ENOMEM), else 200. */
static answer_t metrics_answer(int rc, char *body, size_t len) {
  if (rc != 0) {
    assert_int_equal(rc, -ENOMEM);
    free(body);
    return (answer_t){.status = 500};
  }
  return (answer_t){.status = 200, .body = body, .len = len};
}

/* /metrics in c->format, or /api/devices. */
static answer_t ask_metrics(api_fixture_t *a, const call_t *c) {
  em_metrics_out_t m;
  em_text_t t = {0};
  bool protobuf = c->route == ROUTE_METRICS && strcmp(c->format, "protobuf") == 0;
  assert_int_equal(em_metrics_out_init(&m, EM_METRICS_PROTOBUF, 0), 0);
  em_registry_lock(a->reg);
  int rc = protobuf                    ? em_metrics_render_out(a->reg, &m)
           : c->route == ROUTE_METRICS ? em_metrics_render(a->reg, &t)
                                       : em_metrics_devices_json(a->reg, &t);
  em_registry_unlock(a->reg);
  char *body = NULL;
  size_t len = 0;
  if (protobuf && rc == 0) {
    rc = em_metrics_out_take(&m, &body, &len);
  } else if (!protobuf) {
    body = em_buf_take(&t, &len);
  }
  em_metrics_out_deinit(&m);
  return metrics_answer(rc, body, len);
}

/* A flight recording's or a stack profile's list or entry. */
static answer_t ask_forensic(api_fixture_t *a, const call_t *c) {
  bool flight = c->route == ROUTE_FLIGHTS || c->route == ROUTE_FLIGHT;
  em_forensic_kind_t kind = flight ? EM_FORENSIC_FLIGHT : EM_FORENSIC_PROFILE;
  em_forensic_reply_t r = {0};
  if (c->route == ROUTE_FLIGHTS || c->route == ROUTE_PROFILES) {
    em_forensic_api_list(a->h, kind, DEVICE, NULL, 0, &r);
  } else {
    const em_query_param_t p[] = {{"format", c->format}};
    em_forensic_api_get(a->h, kind, DEVICE, flight ? a->flight_key : a->profile_key, p, 1, &r);
  }
  return (answer_t){.status = r.status, .body = r.body, .len = r.len};
}

static answer_t ask(api_fixture_t *a, const call_t *c) {
  if (c->route >= ROUTE_METRICS) {
    return ask_metrics(a, c);
  }
  if (c->route >= ROUTE_FLIGHTS) {
    return ask_forensic(a, c);
  }
  em_query_t q;
  char err[256];
  if (em_query_parse(c->kind, c->params, c->n_params, NOW_NS, &q, err, sizeof(err)) != 0) {
    fail_msg("%s: em_query_parse: %s", c->what, err);
  }
  em_history_reply_t r = {0};
  switch (c->route) {
  case ROUTE_FLEET:
    em_history_fleet(a->h, a->reg, &q, NOW_NS, &r);
    break;
  case ROUTE_HISTORY:
    em_history_device(a->h, a->reg, DEVICE, &q, &r);
    break;
  case ROUTE_LATENCY:
    em_history_latency(a->h, &q, &r);
    break;
  case ROUTE_MODELS:
    em_cohort_models(a->reg, &q, &r);
    break;
  default:
    em_cohort_query(a->h, &q, &r);
    break;
  }
  return (answer_t){.status = r.status, .body = r.body, .len = r.len};
}

typedef struct {
  api_fixture_t *a;
  const call_t *call;
  answer_t want; /* With nothing failing. */
  answer_t got;
} answer_round_t;

static int answer_step(void *ctx) {
  answer_round_t *r = ctx;
  r->got = ask(r->a, r->call);
  return 0;
}

/* The answer again, with nothing failing, is the one of before any failure. */
static void answer_again(answer_round_t *r, unsigned long k) {
  answer_free(&r->got);
  answer_step(r);
  if (!answer_same(&r->got, &r->want)) {
    fail_msg("%s, after allocation %lu failed: another answer (%u, %zu bytes: %.*s)", r->call->what,
             k, r->got.status, r->got.len, (int)(r->got.len < 200 ? r->got.len : 200),
             r->got.body ? r->got.body : "");
  }
  answer_free(&r->got);
}

static void answer_refused(void *ctx, unsigned long k, int rc) {
  answer_round_t *r = ctx;
  (void)rc;
  if (r->got.status != 500 && !answer_same(&r->got, &r->want)) {
    fail_msg("%s, allocation %lu failing: status %u with %zu bytes, want 500 or the answer "
             "(%u, %zu bytes)",
             r->call->what, k, r->got.status, r->got.len, r->want.status, r->want.len);
  }
  answer_again(r, k);
}

static void answer_passed(void *ctx, int rc) {
  (void)rc;
  answer_again(ctx, 0);
}

/* Sweeps each call of calls[0..n); returns the allocations they make, all together. */
static unsigned long sweep_calls(api_fixture_t *a, const call_t *calls, size_t n) {
  static const alloc_sweep_t sweep = {
      .what = "answer", .step = answer_step, .refused = answer_refused, .passed = answer_passed};
  unsigned long made = 0;
  for (size_t i = 0; i < n; i++) {
    answer_round_t r = {.a = a, .call = &calls[i]};
    r.want = ask(a, &calls[i]);
    if (r.want.status != 200 || r.want.len == 0 || !r.want.body) {
      fail_msg("%s: status %u with %zu bytes, want 200 with a body", calls[i].what, r.want.status,
               r.want.len);
    }
    made += alloc_sweep(&sweep, &r);
    answer_free(&r.want);
  }
  return made;
}

#define SWEEP_CALLS(a, ...)                                                                        \
  sweep_calls((a), (const call_t[]){__VA_ARGS__},                                                  \
              sizeof((const call_t[]){__VA_ARGS__}) / sizeof(call_t))

/* Each JSON answer of the store and the registry, with each allocation failing: the 500 or
 * the answer, and the same answer once nothing fails. */
static void history_answers_fail_cleanly_when_any_allocation_fails(void **state) {
  unsigned long made =
      SWEEP_CALLS(*state, {.what = "/api/fleet", .route = ROUTE_FLEET, .kind = EM_QUERY_FLEET},
                  {.what = "/api/devices/" DEVICE "/history",
                   .route = ROUTE_HISTORY,
                   .kind = EM_QUERY_HISTORY,
                   .params = {{"range", "1h"}, {"points", "10"}},
                   .n_params = 2},
                  {.what = "/api/latency",
                   .route = ROUTE_LATENCY,
                   .kind = EM_QUERY_LATENCY,
                   .params = {{"range", "1h"}},
                   .n_params = 1},
                  {.what = "/api/models", .route = ROUTE_MODELS, .kind = EM_QUERY_MODELS},
                  {.what = "/api/cohort",
                   .route = ROUTE_COHORT,
                   .kind = EM_QUERY_COHORT,
                   .params = {{"select", "model=mobilenet_v3_small"}},
                   .n_params = 1});
  assert_true(made >= 5); /* Each of them allocates. */
}

/* The flight recordings' and stack profiles' lists and entries, the same way (the lists are
 * written through a stream of libc's, whose allocations are not seen). */
static void forensic_answers_fail_cleanly_when_any_allocation_fails(void **state) {
  unsigned long made =
      SWEEP_CALLS(*state, {.what = "flights list", .route = ROUTE_FLIGHTS},
                  {.what = "profiles list", .route = ROUTE_PROFILES},
                  {.what = "flight as JSON", .route = ROUTE_FLIGHT, .format = "json"},
                  {.what = "flight as CBOR", .route = ROUTE_FLIGHT, .format = "cbor"},
                  {.what = "profile as JSON", .route = ROUTE_PROFILE, .format = "json"},
                  {.what = "profile as CBOR", .route = ROUTE_PROFILE, .format = "cbor"});
  assert_true(made >= 4); /* Each entry allocates. */
}

/* /metrics in both formats and /api/devices: -ENOMEM (the 500) or the exposition, and the
 * same exposition once nothing fails. */
static void metrics_fail_cleanly_when_any_allocation_fails(void **state) {
  unsigned long made =
      SWEEP_CALLS(*state, {.what = "/metrics text", .route = ROUTE_METRICS, .format = "text"},
                  {.what = "/metrics protobuf", .route = ROUTE_METRICS, .format = "protobuf"},
                  {.what = "/api/devices", .route = ROUTE_DEVICES});
  assert_true(made >= 3);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(history_open_fails_cleanly_when_any_allocation_fails, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(history_answers_fail_cleanly_when_any_allocation_fails, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(forensic_answers_fail_cleanly_when_any_allocation_fails,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(metrics_fail_cleanly_when_any_allocation_fails, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
