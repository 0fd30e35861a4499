/*
 * test_prom_expo.c - host/lib/prom_expo.c, the delimited MetricFamily exposition: the bytes
 * are read back with a small independent wire-format reader (pb_reader.c) and checked field by
 * field against io/prometheus/client/metrics.proto (counter, gauge, native histogram with its
 * schema, zero bucket, spans and deltas, classic buckets), refused names, labels and buckets
 * leave the output as it was, the size cap, and the Accept negotiation on the header
 * Prometheus 2.42 sends.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <prom_expo.h>
#include <string.h>

#include "pb_reader.h"

/* ---- Tests ---- */

static const em_prom_label_t DEV[] = {{"device", "sim-0001"}, {"stage", "infer"}};

static rd_t output(const em_prom_expo_t *e) {
  const uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(em_prom_expo_data(e, &data, &len), 0);
  return (rd_t){data, data + len};
}

static void counter_and_gauge_families(void **state) {
  (void)state;
  em_prom_expo_t e;
  assert_int_equal(em_prom_expo_init(&e, 1 << 16), 0);
  assert_int_equal(em_prom_expo_family_begin(&e, "edgemon_x_total", "Xs seen.", EM_PROM_COUNTER),
                   0);
  assert_int_equal(em_prom_expo_counter(&e, DEV, 2, 42), 0);
  assert_int_equal(em_prom_expo_counter(&e, NULL, 0, 7.5), 0);
  assert_int_equal(em_prom_expo_family_end(&e), 0);
  assert_int_equal(em_prom_expo_family_begin(&e, "edgemon:temp", NULL, EM_PROM_GAUGE), 0);
  assert_int_equal(em_prom_expo_gauge(&e, DEV, 1, -3.25), 0);
  assert_int_equal(em_prom_expo_family_end(&e), 0);

  rd_t stream = output(&e);
  rd_t mf = next_family(&stream);
  fld_t f;
  int metrics = 0;
  assert_true(rd_next(&mf, &f) && f.field == 1 && str_is(&f, "edgemon_x_total"));
  assert_true(rd_next(&mf, &f) && f.field == 2 && str_is(&f, "Xs seen."));
  assert_true(rd_next(&mf, &f) && f.field == 3 && f.wire == 0 && f.u == 0); /* COUNTER */
  while (rd_next(&mf, &f)) {
    assert_int_equal(f.field, 4);
    rd_t m = f.sub;
    fld_t g;
    int labels = 0;
    double value = NAN;
    while (rd_next(&m, &g)) {
      if (g.field == 1) { /* LabelPair */
        fld_t n, v;
        assert_true(rd_next(&g.sub, &n) && n.field == 1 && str_is(&n, DEV[labels].name));
        assert_true(rd_next(&g.sub, &v) && v.field == 2 && str_is(&v, DEV[labels].value));
        labels++;
      } else {
        assert_int_equal(g.field, 3); /* Counter */
        fld_t v;
        assert_true(rd_next(&g.sub, &v) && v.field == 1);
        value = as_double(&v);
      }
    }
    assert_int_equal(labels, metrics == 0 ? 2 : 0);
    assert_true(value == (metrics == 0 ? 42 : 7.5));
    metrics++;
  }
  assert_int_equal(metrics, 2);

  mf = next_family(&stream);
  assert_true(rd_next(&mf, &f) && str_is(&f, "edgemon:temp"));
  assert_true(rd_next(&mf, &f) && f.field == 3 && f.u == 1); /* GAUGE, no help */
  assert_true(rd_next(&mf, &f) && f.field == 4);
  fld_t g, v;
  assert_true(rd_next(&f.sub, &g) && g.field == 1);
  assert_true(rd_next(&f.sub, &g) && g.field == 2);
  assert_true(rd_next(&g.sub, &v) && as_double(&v) == -3.25);
  assert_false(rd_next(&mf, &f));
  assert_true(stream.p == stream.end);
  em_prom_expo_deinit(&e);
}

static void native_histogram_fields(void **state) {
  (void)state;
  em_native_span_t spans[] = {{-3, 2}, {5, 1}};
  int64_t deltas[] = {4, -1, 6};
  em_native_t nh = {.schema = 6,
                    .zero_threshold = EM_NATIVE_ZERO_THRESHOLD,
                    .zero_count = 2,
                    .count = 2 + 4 + 3 + 9,
                    .sum_ns = 123456789.0,
                    .spans = spans,
                    .n_spans = 2,
                    .deltas = deltas,
                    .n_deltas = 3};
  em_prom_bucket_t classic[] = {{0.01, 5}, {INFINITY, 18}};
  em_prom_expo_t e;
  assert_int_equal(em_prom_expo_init(&e, 1 << 16), 0);
  assert_int_equal(em_prom_expo_family_begin(&e, "lat_nanoseconds", "h", EM_PROM_HISTOGRAM), 0);
  assert_int_equal(em_prom_expo_native(&e, DEV, 2, &nh, classic, 2), 0);
  assert_int_equal(em_prom_expo_family_end(&e), 0);

  rd_t stream = output(&e);
  rd_t mf = next_family(&stream);
  fld_t f;
  rd_next(&mf, &f);
  rd_next(&mf, &f);
  assert_true(rd_next(&mf, &f) && f.field == 3 && f.u == 4); /* HISTOGRAM */
  assert_true(rd_next(&mf, &f) && f.field == 4);
  rd_t m = f.sub;
  fld_t g;
  rd_next(&m, &g);
  rd_next(&m, &g);
  assert_true(rd_next(&m, &g) && g.field == 7);
  rd_t h = g.sub;
  int seen_schema = 0, n_spans = 0, n_deltas = 0, n_buckets = 0;
  while (rd_next(&h, &f)) {
    switch (f.field) {
    case 1:
      assert_int_equal(f.u, nh.count);
      break;
    case 2:
      assert_true(as_double(&f) == nh.sum_ns);
      break;
    case 3: {
      fld_t c, u;
      assert_true(rd_next(&f.sub, &c) && c.field == 1);
      assert_true(rd_next(&f.sub, &u) && u.field == 2);
      assert_int_equal(c.u, classic[n_buckets].cumulative_count);
      assert_true(as_double(&u) == classic[n_buckets].upper_bound);
      n_buckets++;
      break;
    }
    case 5:
      assert_int_equal(unzigzag(f.u), 6);
      seen_schema = 1;
      break;
    case 6:
      assert_true(as_double(&f) == EM_NATIVE_ZERO_THRESHOLD);
      break;
    case 7:
      assert_int_equal(f.u, 2);
      break;
    case 12: {
      fld_t o, l;
      assert_true(rd_next(&f.sub, &o) && o.field == 1 && o.wire == 0);
      assert_true(rd_next(&f.sub, &l) && l.field == 2 && l.wire == 0);
      assert_int_equal(unzigzag(o.u), spans[n_spans].offset);
      assert_int_equal(l.u, spans[n_spans].length);
      n_spans++;
      break;
    }
    case 13:
      assert_int_equal(f.wire, 0); /* unpacked, one tag per delta */
      assert_int_equal(unzigzag(f.u), deltas[n_deltas]);
      n_deltas++;
      break;
    default:
      fail_msg("unexpected Histogram field %u", f.field);
    }
  }
  assert_true(seen_schema);
  assert_int_equal(n_spans, 2);
  assert_int_equal(n_deltas, 3);
  assert_int_equal(n_buckets, 2);
  em_prom_expo_deinit(&e);
}

static void refused_input_leaves_output_unchanged(void **state) {
  (void)state;
  em_prom_expo_t e;
  assert_int_equal(em_prom_expo_init(&e, 1 << 16), 0);
  assert_int_equal(em_prom_expo_family_begin(&e, "1bad", NULL, EM_PROM_GAUGE), -EINVAL);
  assert_int_equal(em_prom_expo_family_begin(&e, "bad-name", NULL, EM_PROM_GAUGE), -EINVAL);
  assert_int_equal(em_prom_expo_family_begin(&e, "", NULL, EM_PROM_GAUGE), -EINVAL);
  assert_int_equal(em_prom_expo_family_begin(&e, "ok", "\xff", EM_PROM_GAUGE), -EINVAL);
  assert_int_equal(em_prom_expo_family_begin(&e, "ok", NULL, (em_prom_type_t)2), -EINVAL);
  assert_int_equal(em_prom_expo_gauge(&e, NULL, 0, 1), -EINVAL); /* no family open */
  assert_int_equal(em_prom_expo_family_end(&e), -EINVAL);
  assert_int_equal(em_prom_expo_family_begin(&e, "g", NULL, EM_PROM_GAUGE), 0);
  size_t before = e.pb.len_bytes;

  static const em_prom_label_t bad[][2] = {
      {{"device", "a"}, {"device", "b"}},  /* duplicate */
      {{"__name__", "x"}, {"b", "c"}},     /* reserved */
      {{"a:b", "x"}, {"b", "c"}},          /* colon in a label name */
      {{"9a", "x"}, {"b", "c"}},           /* leading digit */
      {{"a", "\xc3\x28"}, {"b", "c"}},     /* invalid UTF-8 */
      {{"a", "\xed\xa0\x80"}, {"b", "c"}}, /* surrogate */
      {{"a", "\xc0\xaf"}, {"b", "c"}},     /* overlong */
      {{"a", NULL}, {"b", "c"}},
  };
  for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
    assert_int_equal(em_prom_expo_gauge(&e, bad[k], 2, 1), -EINVAL);
  }
  assert_int_equal(em_prom_expo_counter(&e, DEV, 2, 1), -EINVAL); /* type mismatch */
  assert_int_equal(em_prom_expo_gauge(&e, NULL, 3, 1), -EINVAL);
  assert_int_equal(em_prom_expo_gauge(&e, DEV, EM_PROM_EXPO_MAX_LABELS + 1, 1), -EINVAL);
  assert_int_equal(em_prom_expo_family_begin(&e, "h", NULL, EM_PROM_GAUGE), -EINVAL); /* open */
  const uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(em_prom_expo_data(&e, &data, &len), -EINVAL); /* family still open */
  assert_int_equal(e.pb.len_bytes, before);
  static const em_prom_label_t utf8[] = {{"a", "caf\xc3\xa9 \xf0\x9f\x98\x80"}};
  assert_int_equal(em_prom_expo_gauge(&e, utf8, 1, 1), 0); /* not sticky: goes on */
  assert_int_equal(em_prom_expo_family_end(&e), 0);

  /* Histograms: classic buckets out of order or above the count, inconsistent native. */
  assert_int_equal(em_prom_expo_family_begin(&e, "h", NULL, EM_PROM_HISTOGRAM), 0);
  before = e.pb.len_bytes;
  em_prom_bucket_t desc[] = {{2, 1}, {1, 2}};
  em_prom_bucket_t over[] = {{1, 1}, {2, 9}};
  em_prom_bucket_t nan[] = {{NAN, 1}};
  assert_int_equal(em_prom_expo_classic(&e, NULL, 0, 5, 1, desc, 2), -EINVAL);
  assert_int_equal(em_prom_expo_classic(&e, NULL, 0, 5, 1, over, 2), -EINVAL);
  assert_int_equal(em_prom_expo_classic(&e, NULL, 0, 5, 1, nan, 1), -EINVAL);
  assert_int_equal(em_prom_expo_classic(&e, NULL, 0, 5, 1, NULL, 2), -EINVAL);
  em_native_span_t spans[] = {{0, 2}};
  int64_t deltas[] = {3, -4}; /* second count -1 */
  em_native_t nh = {
      .schema = 3, .count = 3, .spans = spans, .n_spans = 1, .deltas = deltas, .n_deltas = 2};
  assert_int_equal(em_prom_expo_native(&e, NULL, 0, &nh, NULL, 0), -EINVAL);
  deltas[1] = 0; /* counts 3 3: 6 != 3 */
  assert_int_equal(em_prom_expo_native(&e, NULL, 0, &nh, NULL, 0), -EINVAL);
  deltas[1] = -3; /* counts 3 0 */
  nh.schema = 9;
  assert_int_equal(em_prom_expo_native(&e, NULL, 0, &nh, NULL, 0), -EINVAL);
  nh.schema = 3;
  nh.n_deltas = 1; /* spans cover 2 */
  assert_int_equal(em_prom_expo_native(&e, NULL, 0, &nh, NULL, 0), -EINVAL);
  nh.n_deltas = 2;
  assert_int_equal(em_prom_expo_native(&e, NULL, 0, NULL, NULL, 0), -EINVAL);
  assert_int_equal(e.pb.len_bytes, before);
  assert_int_equal(em_prom_expo_native(&e, NULL, 0, &nh, NULL, 0), 0);
  assert_int_equal(em_prom_expo_classic(&e, DEV, 1, 5, 1.5, over, 1), 0);
  assert_int_equal(em_prom_expo_family_end(&e), 0);
  assert_int_equal(em_prom_expo_data(&e, &data, &len), 0);
  em_prom_expo_deinit(&e);
}

static void cap_overflow_is_sticky(void **state) {
  (void)state;
  em_prom_expo_t e;
  assert_int_equal(em_prom_expo_init(&e, 64), 0);
  assert_int_equal(em_prom_expo_family_begin(&e, "g", NULL, EM_PROM_GAUGE), 0);
  int rc = 0;
  for (int k = 0; k < 10 && rc == 0; k++) {
    rc = em_prom_expo_gauge(&e, DEV, 2, k);
  }
  assert_int_equal(rc, -EOVERFLOW);
  assert_int_equal(em_prom_expo_family_end(&e), -EOVERFLOW);
  const uint8_t *data = (const uint8_t *)"x";
  size_t len = 1;
  assert_int_equal(em_prom_expo_data(&e, &data, &len), -EOVERFLOW);
  assert_null(data);
  assert_int_equal(len, 0);
  em_prom_expo_reset(&e);
  assert_int_equal(em_prom_expo_family_begin(&e, "g", NULL, EM_PROM_GAUGE), 0);
  assert_int_equal(em_prom_expo_gauge(&e, NULL, 0, 1), 0);
  assert_int_equal(em_prom_expo_family_end(&e), 0);
  assert_int_equal(em_prom_expo_data(&e, &data, &len), 0);
  assert_true(len > 0 && len <= 64);
  em_prom_expo_deinit(&e);
  em_prom_expo_deinit(NULL);
}

static void accept_negotiation(void **state) {
  (void)state;
  static const struct {
    const char *accept;
    int want;
  } rows[] = {
      /* Prometheus 2.42 with --enable-feature=native-histograms (scrape/scrape.go). */
      {"application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
       "encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,"
       "application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,"
       "*/*;q=0.1",
       1},
      /* Without the flag. */
      {"application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
       "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
       0},
      {EM_PROM_EXPO_CONTENT_TYPE, 1},
      {"Application/Vnd.Google.Protobuf; proto=\"io.prometheus.client.MetricFamily\"; "
       "encoding=\"delimited\"",
       1},
      {"application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily", 0},
      {"application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
       "encoding=text",
       0},
      {"application/vnd.google.protobuf;proto=other.Message;encoding=delimited", 0},
      {EM_PROM_EXPO_CONTENT_TYPE ";q=0", 0},
      {EM_PROM_EXPO_CONTENT_TYPE ";q=0.5, text/plain;q=1", 0},
      {"text/plain;q=0.4, " EM_PROM_EXPO_CONTENT_TYPE ";q=0.5", 1},
      {EM_PROM_EXPO_CONTENT_TYPE ";q=nonsense", 0},
      {"*/*", 0},
      {"", 0},
      {",,;;==", 0},
  };
  for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
    if (em_prom_expo_accepts(rows[k].accept) != rows[k].want) {
      fail_msg("row %zu: %s", k, rows[k].accept);
    }
  }
  assert_false(em_prom_expo_accepts(NULL));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(counter_and_gauge_families),
      cmocka_unit_test(native_histogram_fields),
      cmocka_unit_test(refused_input_leaves_output_unchanged),
      cmocka_unit_test(cap_overflow_is_sticky),
      cmocka_unit_test(accept_negotiation),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
