/*
 * test_prom_rw.c - host/lib/prom_rw.c, the remote write 1.0 WriteRequest: the bytes are read
 * back with the independent wire-format reader (pb_reader.c) and checked field by field against
 * prompb/types.proto (labels with __name__ first and the rest sorted, a sample's value and
 * timestamp, a native histogram's count, sum, schema, zero bucket, spans, deltas and
 * timestamp); refused names, labels (UTF-8 values included) and histograms leave the request as it
 * was; a series past the cap is cut off whole and the writer stays usable; the snappy body
 * decompresses to the request.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <prom_rw.h>
#include <snappy-c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pb_reader.h"

#define MAX_SEEN 64

/* One TimeSeries as read back. */
typedef struct {
  char names[EM_PROM_RW_MAX_LABELS + 1][64], values[EM_PROM_RW_MAX_LABELS + 1][64];
  size_t n_labels, n_samples, n_histograms;
  double value;
  int64_t ts_ms;
  rd_t histogram; /* body of the last histogram */
} seen_t;

static void copy_str(char *dst, size_t cap, const rd_t *s) {
  size_t n = (size_t)(s->end - s->p);
  assert_true(n < cap);
  memcpy(dst, s->p, n);
  dst[n] = '\0';
}

static void read_series(rd_t ts, seen_t *out) {
  memset(out, 0, sizeof(*out));
  fld_t f;
  while (rd_next(&ts, &f)) {
    assert_int_equal(f.wire, 2);
    fld_t g;
    rd_t sub = f.sub;
    if (f.field == 1) {
      assert_true(out->n_labels <= EM_PROM_RW_MAX_LABELS);
      while (rd_next(&sub, &g)) {
        if (g.field == 1) {
          copy_str(out->names[out->n_labels], 64, &g.sub);
        } else {
          assert_int_equal(g.field, 2);
          copy_str(out->values[out->n_labels], 64, &g.sub);
        }
      }
      out->n_labels++;
    } else if (f.field == 2) {
      out->n_samples++;
      while (rd_next(&sub, &g)) {
        if (g.field == 1) {
          out->value = as_double(&g);
        } else {
          assert_int_equal(g.field, 2);
          assert_int_equal(g.wire, 0);
          out->ts_ms = (int64_t)g.u;
        }
      }
    } else {
      assert_int_equal(f.field, 4);
      out->n_histograms++;
      out->histogram = f.sub;
    }
  }
}

/* Every TimeSeries of the request w holds. */
static size_t read_request(const em_prom_rw_t *w, seen_t *seen) {
  size_t len = 0;
  const uint8_t *data = em_prom_rw_data(w, &len);
  rd_t r = {data, data + len};
  fld_t f;
  size_t n = 0;
  while (rd_next(&r, &f)) {
    assert_int_equal(f.field, 1);
    assert_int_equal(f.wire, 2);
    assert_true(n < MAX_SEEN);
    read_series(f.sub, &seen[n++]);
  }
  return n;
}

static seen_t seen[MAX_SEEN];

static void sample_has_sorted_labels_value_and_timestamp(void **state) {
  (void)state;
  em_prom_rw_t w;
  assert_int_equal(em_prom_rw_init(&w, 1 << 16), 0);
  const em_prom_rw_label_t labels[] = {
      {"stage", "infer"}, {"device", "sim-0001"}, {"a", NULL}, {"b", "caf\xc3\xa9"}};
  assert_int_equal(em_prom_rw_sample(&w, "edgemon_x_total", labels, 4, 42.5, 1700000000123LL), 0);
  assert_int_equal(em_prom_rw_sample(&w, "edgemon_up", NULL, 0, -1, -5), 0);
  assert_int_equal(w.n_series, 2);
  assert_int_equal(w.n_samples, 2);
  assert_int_equal(w.n_histograms, 0);

  assert_int_equal(read_request(&w, seen), 2);
  assert_int_equal(seen[0].n_labels, 5);
  const char *names[] = {"__name__", "a", "b", "device", "stage"};
  const char *values[] = {"edgemon_x_total", "", "caf\xc3\xa9", "sim-0001", "infer"};
  for (size_t k = 0; k < 5; k++) {
    assert_string_equal(seen[0].names[k], names[k]);
    assert_string_equal(seen[0].values[k], values[k]);
  }
  assert_int_equal(seen[0].n_samples, 1);
  assert_true(seen[0].value == 42.5);
  assert_int_equal(seen[0].ts_ms, 1700000000123LL);
  assert_int_equal(seen[1].n_labels, 1);
  assert_string_equal(seen[1].values[0], "edgemon_up");
  assert_true(seen[1].value == -1);
  assert_int_equal(seen[1].ts_ms, -5);
  em_prom_rw_deinit(&w);
}

static void histogram_fields_follow_types_proto(void **state) {
  (void)state;
  em_native_span_t spans[] = {{-3, 2}, {4, 1}};
  int64_t deltas[] = {3, -1, 4};
  em_native_t nh = {.schema = 3,
                    .zero_threshold = EM_NATIVE_ZERO_THRESHOLD,
                    .zero_count = 2,
                    .count = 2 + 3 + 2 + 6,
                    .sum_ns = 12345.0,
                    .spans = spans,
                    .n_spans = 2,
                    .deltas = deltas,
                    .n_deltas = 3};
  em_prom_rw_t w;
  assert_int_equal(em_prom_rw_init(&w, 1 << 16), 0);
  const em_prom_rw_label_t labels[] = {{"stage", "decode"}};
  assert_int_equal(em_prom_rw_histogram(&w, "edgemon_lat_nanoseconds", labels, 1, &nh, 77), 0);
  assert_int_equal(w.n_histograms, 1);
  assert_int_equal(read_request(&w, seen), 1);
  assert_int_equal(seen[0].n_samples, 0);
  assert_int_equal(seen[0].n_histograms, 1);
  assert_string_equal(seen[0].names[1], "stage");

  rd_t h = seen[0].histogram;
  fld_t f;
  size_t n_spans = 0, n_deltas = 0;
  unsigned fields = 0;
  while (rd_next(&h, &f)) {
    switch (f.field) {
    case 1: /* count_int */
      assert_int_equal(f.u, 13);
      break;
    case 3: /* sum */
      assert_true(as_double(&f) == 12345.0);
      break;
    case 4: /* schema, sint32 */
      assert_int_equal(unzigzag(f.u), 3);
      break;
    case 5: /* zero_threshold */
      assert_true(as_double(&f) == EM_NATIVE_ZERO_THRESHOLD);
      break;
    case 6: /* zero_count_int */
      assert_int_equal(f.u, 2);
      break;
    case 11: { /* positive_spans */
      rd_t s = f.sub;
      fld_t g;
      int32_t off = 0;
      uint32_t len = 0;
      while (rd_next(&s, &g)) {
        if (g.field == 1) {
          off = (int32_t)unzigzag(g.u);
        } else {
          len = (uint32_t)g.u;
        }
      }
      assert_true(n_spans < 2);
      assert_int_equal(off, spans[n_spans].offset);
      assert_int_equal(len, spans[n_spans].length);
      n_spans++;
      break;
    }
    case 12: /* positive_deltas, sint64 */
      assert_true(n_deltas < 3);
      assert_int_equal(f.wire, 0);
      assert_int_equal(unzigzag(f.u), deltas[n_deltas]);
      n_deltas++;
      break;
    case 15: /* timestamp */
      assert_int_equal(f.u, 77);
      break;
    default:
      fail_msg("unexpected histogram field %u", f.field);
    }
    fields |= 1u << f.field;
  }
  assert_int_equal(n_spans, 2);
  assert_int_equal(n_deltas, 3);
  assert_int_equal(fields, (1u << 1) | (1u << 3) | (1u << 4) | (1u << 5) | (1u << 6) | (1u << 11) |
                               (1u << 12) | (1u << 15));
  em_prom_rw_deinit(&w);
}

static void refused_input_leaves_the_request_as_it_was(void **state) {
  (void)state;
  em_prom_rw_t w;
  assert_int_equal(em_prom_rw_init(&w, 1 << 16), 0);
  assert_int_equal(em_prom_rw_sample(&w, "ok", NULL, 0, 1, 1), 0);
  size_t before = 0;
  em_prom_rw_data(&w, &before);

  const em_prom_rw_label_t dup[] = {{"a", "1"}, {"b", "2"}, {"a", "3"}};
  const em_prom_rw_label_t reserved[] = {{"__name__", "x"}};
  const em_prom_rw_label_t bad_name[] = {{"a-b", "1"}};
  const em_prom_rw_label_t digit_first[] = {{"1a", "1"}};
  const em_prom_rw_label_t null_name[] = {{NULL, "1"}};
  const em_prom_rw_label_t bad_utf8[] = {{"a", "\xc3\x28"}};
  const em_prom_rw_label_t overlong[] = {{"a", "\xc0\xaf"}};
  em_prom_rw_label_t many[EM_PROM_RW_MAX_LABELS + 1];
  char names[EM_PROM_RW_MAX_LABELS + 1][8];
  for (size_t k = 0; k <= EM_PROM_RW_MAX_LABELS; k++) {
    snprintf(names[k], sizeof(names[k]), "l%zu", k);
    many[k] = (em_prom_rw_label_t){names[k], "v"};
  }
  struct {
    const char *name;
    const em_prom_rw_label_t *labels;
    size_t n;
  } rows[] = {
      {NULL, NULL, 0},      {"", NULL, 0},
      {"1x", NULL, 0},      {"a b", NULL, 0},
      {"ok", dup, 3},       {"ok", reserved, 1},
      {"ok", bad_name, 1},  {"ok", digit_first, 1},
      {"ok", null_name, 1}, {"ok", many, EM_PROM_RW_MAX_LABELS + 1},
      {"ok", NULL, 1},      {"ok", bad_utf8, 1},
      {"ok", overlong, 1},
  };
  for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
    assert_int_equal(em_prom_rw_sample(&w, rows[k].name, rows[k].labels, rows[k].n, 1, 1), -EINVAL);
  }
  assert_int_equal(em_prom_rw_sample(&w, "ok:colon", many, EM_PROM_RW_MAX_LABELS, 1, 1), 0);
  size_t with_one = 0;
  em_prom_rw_data(&w, &with_one);
  assert_true(with_one > before);
  before = with_one;

  em_native_span_t spans[] = {{1, 2}};
  int64_t deltas[] = {3, -4}; /* second bucket -1 */
  int64_t good[] = {3, 1};
  em_native_t bad[5];
  for (size_t k = 0; k < 5; k++) {
    bad[k] = (em_native_t){
        .schema = 0, .count = 10, .spans = spans, .n_spans = 1, .deltas = good, .n_deltas = 2};
  }
  bad[0].deltas = deltas;
  bad[1].n_deltas = 1;
  bad[2].schema = 9;
  bad[3].schema = -5;
  bad[4].zero_count = 11;
  for (size_t k = 0; k < 5; k++) {
    assert_int_equal(em_prom_rw_histogram(&w, "h", NULL, 0, &bad[k], 1), -EINVAL);
  }
  assert_int_equal(em_prom_rw_histogram(&w, "h", NULL, 0, NULL, 1), -EINVAL);
  size_t after = 0;
  em_prom_rw_data(&w, &after);
  assert_int_equal(after, before);
  assert_int_equal(w.n_series, 2);
  assert_int_equal(read_request(&w, seen), 2);
  /* Each refused histogram differs from this accepted one in one field. */
  em_native_t fine = {
      .schema = 0, .count = 10, .spans = spans, .n_spans = 1, .deltas = good, .n_deltas = 2};
  assert_int_equal(em_prom_rw_histogram(&w, "h", NULL, 0, &fine, 1), 0);
  em_prom_rw_deinit(&w);
}

static void series_past_the_cap_is_cut_off_whole(void **state) {
  (void)state;
  em_prom_rw_t w;
  assert_int_equal(em_prom_rw_init(&w, 300), 0);
  const em_prom_rw_label_t labels[] = {{"device", "sim-0001"}, {"stage", "infer"}};
  int rc = 0;
  size_t ok = 0;
  while ((rc = em_prom_rw_sample(&w, "edgemon_some_metric", labels, 2, (double)ok, 1)) == 0) {
    ok++;
  }
  assert_int_equal(rc, -EOVERFLOW);
  assert_true(ok > 0);
  assert_int_equal(w.n_series, ok);
  assert_int_equal(em_pb_error(&w.pb), 0);
  assert_int_equal(read_request(&w, seen), ok);
  assert_true(seen[ok - 1].value == (double)(ok - 1));
  /* A smaller series still fits after the refusal: nothing sticky. */
  size_t len = 0;
  em_prom_rw_data(&w, &len);
  if (len + 20 <= 300) {
    assert_int_equal(em_prom_rw_sample(&w, "x", NULL, 0, 1, 1), 0);
  }
  em_prom_rw_reset(&w);
  assert_int_equal(w.n_series, 0);
  assert_int_equal(em_prom_rw_sample(&w, "edgemon_some_metric", labels, 2, 1, 1), 0);
  em_prom_rw_deinit(&w);
}

static void snappy_body_decompresses_to_the_request(void **state) {
  (void)state;
  em_prom_rw_t w;
  assert_int_equal(em_prom_rw_init(&w, 1 << 20), 0);
  const em_prom_rw_label_t labels[] = {{"device", "sim-0001"}, {"stage", "infer"}};
  for (int k = 0; k < 200; k++) {
    assert_int_equal(em_prom_rw_sample(&w, "edgemon_some_metric", labels, 2, k, 1000 + k), 0);
  }
  size_t len = 0;
  const uint8_t *data = em_prom_rw_data(&w, &len);
  uint8_t *z = NULL;
  size_t zlen = 0;
  assert_int_equal(em_prom_rw_compress(data, len, &z, &zlen), 0);
  assert_true(zlen < len / 2); /* repeated labels compress */
  size_t ulen = 0;
  assert_int_equal(snappy_uncompressed_length((const char *)z, zlen, &ulen), SNAPPY_OK);
  assert_int_equal(ulen, len);
  char *back = malloc(ulen);
  assert_non_null(back);
  assert_int_equal(snappy_uncompress((const char *)z, zlen, back, &ulen), SNAPPY_OK);
  assert_memory_equal(back, data, len);
  free(back);
  free(z);

  assert_int_equal(em_prom_rw_compress(NULL, 0, &z, &zlen), 0);
  assert_int_equal(snappy_uncompressed_length((const char *)z, zlen, &ulen), SNAPPY_OK);
  assert_int_equal(ulen, 0);
  free(z);
  assert_int_equal(em_prom_rw_compress(data, len, NULL, &zlen), -EINVAL);
  em_prom_rw_deinit(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sample_has_sorted_labels_value_and_timestamp),
      cmocka_unit_test(histogram_fields_follow_types_proto),
      cmocka_unit_test(refused_input_leaves_the_request_as_it_was),
      cmocka_unit_test(series_past_the_cap_is_cut_off_whole),
      cmocka_unit_test(snappy_body_decompresses_to_the_request),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
