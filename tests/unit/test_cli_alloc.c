/*
 * test_cli_alloc.c - edgemon-cli's readers with each of their allocations failing in turn
 * (alloc_sweep.h): the strict JSON reader of the API's answers (host/cli/json_read.c), the
 * API's list of flight recordings and profiles (flight/flight_list.c), a flight recording's
 * line (decoded from its CBOR), frames and table (flight/), a stack profile's readable frames,
 * hottest order, functions, flame graph tree, folded lines and pprof bytes (profile/), and a
 * recording read back record by record (host/lib/recording.c). Each reader writes what it read
 * to a memory stream; a read while an allocation fails is -ENOMEM (or, where the reader absorbs
 * the failure, the same bytes), nothing crashes or leaks (under AddressSanitizer), and once
 * nothing fails the same read writes the same bytes as before any failure.
 *
 * The recordings and profiles are the golden vectors (tests/tools/vectors.h).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "alloc_sweep.h"
#include "failing_alloc.h"
#include "flight_frames.h"
#include "flight_list.h"
#include "flight_table.h"
#include "json_read.h"
#include "profile_pprof.h"
#include "profile_stacks.h"
#include "vectors.h"

#include <errno.h>
#include <inttypes.h>
#include <recording.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A list answer of the aggregator (forensic_api.c's layout), two entries. */
static const char list_json[] =
    "{\"device\":\"bench-01\",\"flights\":[{\"key\":\"7-2\",\"time_ns\":1795262405000000000,"
    "\"cause\":\"escalation\",\"level\":\"DEGRADED\",\"rule\":\"infer.p99\",\"ticks\":20,"
    "\"spans\":31,\"bytes\":2048,\"historical\":false,\"profile\":null},{\"key\":\"7-1\","
    "\"time_ns\":1795262400000000000,\"cause\":\"command\",\"level\":\"NOMINAL\",\"rule\":null,"
    "\"ticks\":3,\"spans\":0,\"bytes\":512,\"historical\":true,\"profile\":\"7-1\"}]}";

/* A cohort-like answer: nesting, escapes, a surrogate pair, numbers of every form. */
static const char cohort_json[] =
    "{\"select\":\"model=mobilenet\\u002c\\\"v3\\\"\",\"units\":[[1,2.5,-3e2],[],{}],"
    "\"stages\":[{\"name\":\"infer\\ud83d\\ude80\",\"p99_ns\":4.5e7,\"devices\":[\"a\",\"b\"],"
    "\"ok\":true,\"gone\":null}],\"levels\":{\"0\":12,\"3\":0.125}}";

/* What the readers read, made once. */
typedef struct {
  const em_flight_t *flight;
  uint8_t cbor[EM_FLIGHT_MAX_BYTES];
  size_t cbor_len;
  const em_profile_t *profile;
  char rec_path[64];
} inputs_t;

static inputs_t inputs;

/* A reader: reads its input and writes what it read to out. Returns 0 or its error. */
typedef int (*read_fn)(FILE *out);

/* --- JSON -------------------------------------------------------------------------------- */

/* Writes v as a canonical text: the types, numbers (%.17g), strings and keys. */
static void dump_json(FILE *out, const em_json_t *v) {
  switch (v->type) {
  case EM_JSON_NULL:
    fputs("null", out);
    break;
  case EM_JSON_BOOL:
    fputs(v->boolean ? "true" : "false", out);
    break;
  case EM_JSON_NUMBER:
    fprintf(out, "%.17g", v->number);
    break;
  case EM_JSON_STRING:
    fprintf(out, "'%s'", v->string);
    break;
  default:
    fputc(v->type == EM_JSON_ARRAY ? '[' : '{', out);
    for (size_t i = 0; i < v->n; i++) {
      if (v->type == EM_JSON_OBJECT) {
        fprintf(out, "'%s':", v->key[i]);
      }
      dump_json(out, &v->item[i]);
      fputc(',', out);
    }
    fputc(v->type == EM_JSON_ARRAY ? ']' : '}', out);
  }
}

static int read_json(FILE *out, const char *text) {
  em_json_t *v = NULL;
  char err[128] = "";
  int rc = em_json_parse(text, strlen(text), &v, err, sizeof(err));
  if (rc != 0) {
    assert_null(v);
    return rc;
  }
  dump_json(out, v);
  em_json_free(v);
  return 0;
}

static int read_list_json(FILE *out) {
  return read_json(out, list_json);
}

static int read_cohort_json(FILE *out) {
  return read_json(out, cohort_json);
}

static int read_api_list(FILE *out) {
  em_flight_list_t l = {0};
  int rc = em_api_list_parse(list_json, "flights", &l);
  for (size_t i = 0; rc == 0 && i < l.n; i++) {
    const em_flight_entry_t *e = &l.v[i];
    fprintf(out, "%s %" PRIu64 " %s %s %s %" PRIu64 " %" PRIu64 " %" PRIu64 " %d\n", e->key,
            e->time_ns, e->cause, e->level, e->rule, e->ticks, e->spans, e->bytes, e->historical);
  }
  em_flight_list_free(&l);
  return rc;
}

/* --- flight recordings ------------------------------------------------------------------- */

static int read_flight_lines(FILE *out) {
  size_t off = 0;
  int rc = em_flight_line(out, "bench-01", inputs.cbor, inputs.cbor_len, false, &off);
  return rc ? rc : em_flight_line(out, "bench-01", inputs.cbor, inputs.cbor_len, true, &off);
}

static int read_flight_frames(FILE *out) {
  em_frames_t fr = {0};
  int rc = em_flight_frames(inputs.flight, &fr);
  for (size_t i = 0; rc == 0 && i < fr.n; i++) {
    const em_frame_t *f = &fr.v[i];
    fprintf(out, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %zu:", f->frame_id, f->start_ns, f->total_ns,
            f->n_spans);
    for (size_t s = 0; s < inputs.flight->n_stages; s++) {
      fprintf(out, " %" PRIu64, f->stage_ns[s]);
    }
    fputc('\n', out);
  }
  em_flight_frames_free(&fr);
  return rc;
}

static int read_flight_table(FILE *out) {
  return em_flight_table(out, inputs.flight, "flight #1", 5);
}

/* --- stack profiles ---------------------------------------------------------------------- */

static int read_profile_readable(FILE *out) {
  em_profile_frame_t *frames = NULL;
  char *text = NULL;
  int rc = em_profile_readable(inputs.profile, &frames, &text);
  for (size_t i = 0; rc == 0 && i < inputs.profile->n_frames; i++) {
    fprintf(out, "%s|%s\n", frames[i].name, frames[i].module ? frames[i].module : "");
  }
  free(frames);
  free(text);
  return rc;
}

static int read_profile_hottest(FILE *out) {
  size_t *order = NULL;
  int rc = em_profile_hottest(inputs.profile, &order);
  for (size_t i = 0; rc == 0 && i < inputs.profile->n_stacks; i++) {
    fprintf(out, "%zu ", order[i]);
  }
  free(order);
  return rc;
}

static int read_profile_functions(FILE *out) {
  em_profile_func_t *f = NULL;
  size_t n = 0;
  int rc = em_profile_functions(inputs.profile, &f, &n);
  for (size_t i = 0; rc == 0 && i < n; i++) {
    fprintf(out, "%" PRIu32 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", f[i].frame, f[i].self,
            f[i].total, f[i].off_cpu_ns);
  }
  free(f);
  return rc;
}

static int read_profile_tree(FILE *out) {
  em_profile_tree_t t = {0};
  int rc = em_profile_tree(inputs.profile, &t);
  for (size_t i = 0; rc == 0 && i < t.n; i++) {
    const em_profile_node_t *v = &t.v[i];
    fprintf(out, "%" PRIu32 " %" PRIu32 " %" PRIu32 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
            v->frame, v->parent, v->depth, v->samples, v->self, v->x);
  }
  em_profile_tree_free(&t);
  return rc;
}

static int read_profile_folded(FILE *out) {
  return em_profile_folded(out, inputs.profile);
}

static int read_profile_pprof(FILE *out) {
  em_pb_t pb;
  assert_int_equal(em_pb_init(&pb, 1u << 20), 0);
  int rc = em_profile_pprof(&pb, inputs.profile, NULL);
  if (rc == 0) {
    size_t len = 0;
    const uint8_t *data = em_pb_data(&pb, &len);
    fwrite(data, 1, len, out);
  }
  em_pb_deinit(&pb);
  return rc;
}

/* --- recordings -------------------------------------------------------------------------- */

static int read_recording(FILE *out) {
  em_rec_reader_t *r = NULL;
  int rc = em_rec_reader_new(&r, inputs.rec_path);
  if (rc != 0) {
    assert_null(r);
    return rc;
  }
  em_rec_entry_t e;
  while ((rc = em_rec_read(r, &e)) == 1) {
    fprintf(out, "%" PRIu64 " %d %s %zu\n", e.recv_time_ns, e.retained, e.topic, e.payload_len);
    fwrite(e.payload, 1, e.payload_len, out);
  }
  em_rec_reader_free(r);
  return rc;
}

/* --- the sweep --------------------------------------------------------------------------- */

typedef struct {
  const char *what;
  read_fn read;
  unsigned long min_allocs; /* The allocations its read makes at the least. */
} reader_t;

typedef struct {
  const reader_t *reader;
  char *want; /* What the read wrote with nothing failing. */
  size_t want_len;
  char *got;
  size_t got_len;
  FILE *out;
} read_round_t;

static int read_step(void *ctx) {
  read_round_t *r = ctx;
  r->out = open_memstream(&r->got, &r->got_len);
  assert_non_null(r->out);
  return r->reader->read(r->out);
}

/* Closes the round's stream: true when it holds what the read wrote with nothing failing. */
static bool read_same(read_round_t *r) {
  fclose(r->out);
  bool same = r->got_len == r->want_len && memcmp(r->got, r->want, r->want_len) == 0;
  free(r->got);
  r->got = NULL;
  return same;
}

static void read_passed(void *ctx, int rc) {
  read_round_t *r = ctx;
  assert_int_equal(rc, 0);
  if (!read_same(r)) {
    fail_msg("%s: another read with nothing failing", r->reader->what);
  }
}

static void read_refused(void *ctx, unsigned long k, int rc) {
  read_round_t *r = ctx;
  bool same = read_same(r);
  if (rc != -ENOMEM && !(rc == 0 && same)) {
    fail_msg("%s, allocation %lu failing: %d, want -ENOMEM or the same read", r->reader->what, k,
             rc);
  }
  read_passed(r, read_step(r));
}

/* Every reader, and the allocations its read makes at the least: the JSON reader on a list and a
 * cohort-like answer, and the list's entries; a flight recording's line from its CBOR, its frames
 * and its table; a stack profile's readable frames, hottest order, functions, tree, folded lines
 * and pprof; a recording of every golden message read back (the reader and its buffer). */
static const reader_t readers[] = {{"list as JSON", read_list_json, 1},
                                   {"cohort as JSON", read_cohort_json, 1},
                                   {"list entries", read_api_list, 1},
                                   {"flight lines", read_flight_lines, 1},
                                   {"flight frames", read_flight_frames, 1},
                                   {"flight table", read_flight_table, 1},
                                   {"readable frames", read_profile_readable, 1},
                                   {"hottest", read_profile_hottest, 1},
                                   {"functions", read_profile_functions, 1},
                                   {"tree", read_profile_tree, 1},
                                   {"folded", read_profile_folded, 1},
                                   {"pprof", read_profile_pprof, 1},
                                   {"recording", read_recording, 2}};

/* Each reader reads once with nothing failing, then again with each of its allocations failing
 * in turn (read_refused), and makes at least its allocations. */
static void every_reader_fails_cleanly_when_any_allocation_fails(void **state) {
  static const alloc_sweep_t sweep = {
      .what = "read", .step = read_step, .refused = read_refused, .passed = read_passed};
  (void)state;
  for (size_t i = 0; i < sizeof(readers) / sizeof(readers[0]); i++) {
    read_round_t r = {.reader = &readers[i]};
    FILE *out = open_memstream(&r.want, &r.want_len);
    assert_non_null(out);
    assert_int_equal(readers[i].read(out), 0);
    fclose(out);
    if (r.want_len == 0) {
      fail_msg("%s: read nothing", readers[i].what);
    }
    unsigned long made = alloc_sweep(&sweep, &r);
    free(r.want);
    if (made < readers[i].min_allocs) {
      fail_msg("%s: %lu allocations, want at least %lu", readers[i].what, made,
               readers[i].min_allocs);
    }
  }
}

static int setup(void **state) {
  (void)state;
  size_t n;
  inputs.flight = &em_flight_vectors(&n)[0].flight;
  assert_int_equal(
      em_flight_encode(inputs.flight, inputs.cbor, sizeof(inputs.cbor), &inputs.cbor_len), 0);
  inputs.profile = &em_profile_vectors(&n)[0].profile;
  snprintf(inputs.rec_path, sizeof(inputs.rec_path), "/tmp/em-cli-alloc-XXXXXX");
  int fd = mkstemp(inputs.rec_path);
  assert_true(fd >= 0);
  close(fd);
  em_rec_writer_t *w = NULL;
  assert_int_equal(em_rec_writer_new(&w, inputs.rec_path), 0);
  const em_vector_t *v = em_vectors(&n);
  static uint8_t wire[EM_PROTO_MAX_MESSAGE_BYTES];
  for (size_t i = 0; i < n; i++) {
    size_t len = 0;
    assert_int_equal(em_proto_encode(&v[i].msg, wire, sizeof(wire), &len), 0);
    char topic[96];
    snprintf(topic, sizeof(topic), "edgemon/v1/bench-01/%s", v[i].name);
    em_rec_entry_t e = {1795262400000000000ull + i, i % 3 == 0, topic, strlen(topic), wire, len};
    assert_int_equal(em_rec_write(w, &e), 0);
  }
  assert_int_equal(em_rec_writer_free(w), 0);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  em_failing_alloc_disarm();
  unlink(inputs.rec_path);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_reader_fails_cleanly_when_any_allocation_fails),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
