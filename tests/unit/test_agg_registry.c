/*
 * test_agg_registry.c - the aggregator's registry (host/aggregator/registry.c): naming,
 * stage accumulation, loss from sequence gaps with wrap-around, rebirth requests, bad input,
 * topics and payloads that must agree (every kind on every other kind's topic), forgetting
 * devices after the TTL, and flight recordings.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <registry.h>

#include "vectors.h"

static uint8_t wire[4096];

/* Encodes msg and ingests it on `topic`. */
static int feed_on(em_registry_t *r, const char *topic, const em_msg_t *msg, em_ingest_t *in) {
  size_t len = 0;
  assert_int_equal(em_proto_encode(msg, wire, sizeof(wire), &len), 0);
  return em_registry_ingest(r, topic, wire, len, in);
}

/* Encodes msg (a birth made the device's own) and ingests it on edgemon/v1/<device>/<kind>. */
static int feed(em_registry_t *r, const char *device, const em_msg_t *msg, em_ingest_t *in) {
  em_msg_t own = *msg;
  if (own.kind == EM_MSG_BIRTH) {
    own.u.birth.device = device;
  }
  char topic[128];
  snprintf(topic, sizeof(topic), "edgemon/v1/%s/%s", device, em_msg_kind_name(msg->kind));
  return feed_on(r, topic, &own, in);
}

static const em_metric_def_t metrics[] = {
    {.alias = 0, .name = "mem.rss", .unit = "By", .kind = EM_METRIC_GAUGE},
    {.alias = 1, .name = "pmu.ipc", .unit = "1", .kind = EM_METRIC_GAUGE},
};

static em_msg_t birth(uint32_t session) {
  em_msg_t m = {.kind = EM_MSG_BIRTH};
  m.u.birth = (em_birth_t){.head = {.time_ns = 1, .session = session},
                           .device = "d",
                           .agent_version = "t",
                           .board = "b",
                           .period_ns = 100000000,
                           .metrics = metrics,
                           .n_metrics = 2};
  return m;
}

static const em_bucket_t buckets[] = {{1000, 3}, {1001, 1}};

static em_msg_t data(uint32_t session, uint32_t seq) {
  static em_sample_t samples[2];
  static em_stage_t stage;
  samples[0] = (em_sample_t){.alias = 0, .value = {.type = EM_VALUE_UINT, .as.u = 4096}};
  samples[1] = (em_sample_t){.alias = 1, .value = {.type = EM_VALUE_ABSENT}};
  stage = (em_stage_t){.name = "infer",
                       .count = 4,
                       .sum_ns = 200000,
                       .min_ns = 49000,
                       .max_ns = 52000,
                       .p50_ns = 50000,
                       .p90_ns = 51000,
                       .p99_ns = 52000,
                       .p999_ns = 52000,
                       .scale = 6,
                       .buckets = buckets,
                       .n_buckets = 2};
  em_msg_t m = {.kind = EM_MSG_DATA};
  m.u.data = (em_data_t){.head = {.time_ns = 1000 + seq, .session = session},
                         .seq = seq,
                         .window_ns = 100000000,
                         .level = EM_LEVEL_NONE,
                         .samples = samples,
                         .n_samples = 2,
                         .stages = &stage,
                         .n_stages = 1};
  return m;
}

static void registry_names_values_and_accumulates_stages(void **state) {
  (void)state;
  em_registry_t *r = NULL;
  assert_int_equal(em_registry_new(&r, true), 0);
  em_ingest_t in;
  em_msg_t m = birth(7);
  assert_int_equal(feed(r, "dev-a", &m, &in), 0);
  for (uint32_t seq = 0; seq < 3; seq++) {
    m = data(7, seq);
    assert_int_equal(feed(r, "dev-a", &m, &in), 0);
    assert_false(in.needs_rebirth);
  }
  em_agg_device_t *d = em_registry_find(r, "dev-a");
  assert_non_null(d);
  assert_int_equal(d->data_msgs, 3);
  assert_int_equal(d->n_values, 2);
  assert_int_equal(d->values[0].type, EM_VALUE_UINT);
  assert_int_equal(d->values[0].as.u, 4096);
  assert_int_equal(d->values[1].type, EM_VALUE_ABSENT); /* null stays absent, not 0 */
  assert_string_equal(em_dict_name(d->dev, 0), "mem.rss");
  assert_int_equal(d->n_stages, 1);
  assert_string_equal(d->stages[0].name, "infer");
  assert_int_equal(em_histo_count(d->stages[0].total), 12);
  assert_int_equal(d->stages[0].windows, 3);
  assert_int_equal(d->stages[0].last.p99_ns, 52000);
  assert_int_equal(d->lost, 0);
  assert_int_equal(r->stats.ingested, 4);
  em_registry_free(r);
}

static void registry_counts_loss_across_the_wrap_and_resets_per_session(void **state) {
  (void)state;
  em_registry_t *r = NULL;
  assert_int_equal(em_registry_new(&r, true), 0);
  em_ingest_t in;
  em_msg_t m = birth(1);
  feed(r, "dev", &m, &in);
  const struct {
    uint32_t session, seq, lost_now;
    uint64_t lost, duplicates;
  } steps[] = {
      {1, 0xFFFFFFFDu, 0, 0, 0},                  /* first seen: nothing known before it */
      {1, 0xFFFFFFFEu, 0, 0, 0}, {1, 1, 2, 2, 0}, /* FFFFFFFF and 0 missing across the wrap */
      {1, 1, 0, 2, 1},                            /* repeated */
      {1, 0, 0, 2, 2},                            /* behind: reordered */
      {1, 5, 3, 5, 2},                            /* 2, 3, 4 missing */
      {2, 100, 0, 5, 2},                          /* new session: starts afresh */
      {2, 101, 0, 5, 2},
  };
  for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
    m = data(steps[i].session, steps[i].seq);
    assert_int_equal(feed(r, "dev", &m, &in), 0);
    em_agg_device_t *d = em_registry_find(r, "dev");
    assert_int_equal(in.lost_now, steps[i].lost_now);
    assert_int_equal(d->lost, steps[i].lost);
    assert_int_equal(d->duplicates, steps[i].duplicates);
  }
  em_registry_free(r);
}

static void registry_without_loss_tracking_counts_none(void **state) {
  (void)state;
  em_registry_t *r = NULL;
  assert_int_equal(em_registry_new(&r, false), 0);
  em_ingest_t in;
  em_msg_t m = data(1, 0);
  feed(r, "dev", &m, &in);
  m = data(1, 10);
  feed(r, "dev", &m, &in);
  assert_int_equal(em_registry_find(r, "dev")->lost, 0);
  em_registry_free(r);
}

static void registry_asks_for_a_rebirth_once_per_session(void **state) {
  (void)state;
  em_registry_t *r = NULL;
  assert_int_equal(em_registry_new(&r, true), 0);
  em_ingest_t in;
  em_msg_t m = data(9, 0);
  feed(r, "dev", &m, &in);
  assert_true(in.needs_rebirth);
  m = data(9, 1);
  feed(r, "dev", &m, &in);
  assert_false(in.needs_rebirth);
  m = birth(9);
  feed(r, "dev", &m, &in);
  m = data(9, 2);
  feed(r, "dev", &m, &in);
  assert_false(in.needs_rebirth);
  assert_string_equal(em_dict_name(em_registry_find(r, "dev")->dev, 1), "pmu.ipc");
  m = data(10, 0); /* the agent restarted; its new birth has not arrived */
  feed(r, "dev", &m, &in);
  assert_true(in.needs_rebirth);
  assert_int_equal(r->stats.unknown_birth, 3);
  em_registry_free(r);
}

static void registry_counts_bad_input_and_ignores_commands(void **state) {
  (void)state;
  em_registry_t *r = NULL;
  assert_int_equal(em_registry_new(&r, true), 0);
  em_ingest_t in;
  const uint8_t junk[] = {0xff, 0x00, 0x13};
  assert_int_equal(em_registry_ingest(r, "edgemon/v1/dev/data", junk, sizeof(junk), &in),
                   EM_PROTO_EMALFORMED);
  assert_null(in.agg);
  assert_int_equal(em_registry_ingest(r, "other/topic", junk, sizeof(junk), &in), -EINVAL);
  assert_int_equal(em_registry_ingest(r, "edgemon/v1/dev/cmd/rebirth", junk, sizeof(junk), &in), 0);
  assert_null(in.agg);
  assert_int_equal(em_registry_ingest(r, "edgemon/v1/dev/birth", NULL, 0, &in), 0);
  assert_null(in.agg);
  assert_int_equal(r->stats.received, 4);
  assert_int_equal(r->stats.malformed, 1);
  assert_int_equal(r->stats.rejected[EM_AGG_REJECT_TOPIC], 1);
  assert_int_equal(r->stats.ingested, 0);
  assert_int_equal(r->n_devices, 0);
  em_registry_free(r);
}

static void registry_keeps_devices_sorted(void **state) {
  (void)state;
  em_registry_t *r = NULL;
  assert_int_equal(em_registry_new(&r, true), 0);
  em_ingest_t in;
  const char *ids[] = {"m", "c", "x", "a", "c"};
  for (size_t i = 0; i < 5; i++) {
    em_msg_t m = data(1, (uint32_t)i);
    assert_int_equal(feed(r, ids[i], &m, &in), 0);
  }
  assert_int_equal(r->n_devices, 4);
  const char *want[] = {"a", "c", "m", "x"};
  for (size_t i = 0; i < 4; i++) {
    assert_string_equal(r->devices[i]->dev->id, want[i]);
  }
  em_registry_free(r);
  em_registry_free(NULL);
}

/* A topic is exactly edgemon/v1/<device>/<kind>; anything else registers nothing. */
static void registry_rejects_topics_that_are_not_exactly_device_and_kind(void **state) {
  (void)state;
  em_registry_t *r = NULL;
  assert_int_equal(em_registry_new(&r, true), 0);
  static const char *const bad[] = {
      "edgemon/v1/a/b/data",      /* an extra level: once registered device a */
      "edgemon/v1/x/birth/",      /* a trailing slash: once registered device x */
      "edgemon/v1/x/data/extra",  /* a level after the kind */
      "edgemon/v1/x/bogus",       /* not a kind */
      "edgemon/v1/x/",            /* no kind */
      "edgemon/v1//data",         /* no device */
      "edgemon/v1/bad id/data",   /* a space is not in a device id */
      "edgemon/v1/\xc3\xa9/data", /* nor is a non-ASCII letter */
      "edgemon/v2/x/data",        /* another version */
      "edgemon/v1/x",             /* too short */
      "edgemon/v1/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/data", /* 64 */
  };
  em_ingest_t in;
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    em_msg_t m = i % 2 ? data(1, 0) : birth(1);
    if (m.kind == EM_MSG_BIRTH) {
      m.u.birth.device = "a";
    }
    assert_int_equal(feed_on(r, bad[i], &m, &in), -EINVAL);
    assert_null(in.agg);
    assert_string_equal(in.reject, "topic");
  }
  assert_int_equal(r->n_devices, 0);
  assert_int_equal(r->stats.rejected[EM_AGG_REJECT_TOPIC], sizeof(bad) / sizeof(bad[0]));
  assert_int_equal(r->stats.ingested, 0);
  /* The longest id allowed, and every character the schema allows, are taken. */
  em_msg_t m = data(1, 0);
  assert_int_equal(
      feed_on(r, "edgemon/v1/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/data",
              &m, &in),
      0);
  assert_int_equal(feed_on(r, "edgemon/v1/Az09_.:-/data", &m, &in), 0);
  assert_int_equal(r->n_devices, 2);
  em_registry_free(r);
}

/* The topic is the identity: a birth naming another device, or a payload of another kind than
 * the topic's, is rejected, counted by reason, and registers nothing. */
static void registry_rejects_payloads_that_disagree_with_the_topic(void **state) {
  (void)state;
  em_registry_t *r = NULL;
  assert_int_equal(em_registry_new(&r, true), 0);
  em_ingest_t in;
  em_msg_t m = birth(1);
  m.u.birth.device = "other";
  assert_int_equal(feed_on(r, "edgemon/v1/mism/birth", &m, &in), -EPERM);
  assert_string_equal(in.reject, "device_mismatch");
  m = data(1, 0);
  assert_int_equal(feed_on(r, "edgemon/v1/mism/state", &m, &in), -EINVAL);
  assert_string_equal(in.reject, "kind_mismatch");
  m = birth(1);
  m.u.birth.device = "mism";
  assert_int_equal(feed_on(r, "edgemon/v1/mism/data", &m, &in), -EINVAL);
  assert_null(in.agg);
  assert_int_equal(r->n_devices, 0);
  assert_null(em_registry_find(r, "other"));
  assert_int_equal(r->stats.rejected[EM_AGG_REJECT_DEVICE_MISMATCH], 1);
  assert_int_equal(r->stats.rejected[EM_AGG_REJECT_KIND_MISMATCH], 2);
  assert_int_equal(r->stats.ingested, 0);
  /* Its own birth on its own topic is taken. */
  assert_int_equal(feed_on(r, "edgemon/v1/mism/birth", &m, &in), 0);
  assert_non_null(in.agg);
  assert_true(em_registry_find(r, "mism")->dev->have_birth);
  em_registry_free(r);
}

/* Devices not heard from for the TTL are forgotten (freed whole: ASan checks), the others kept;
 * a forgotten device that speaks again is a new record. */
static void registry_forgets_devices_past_the_ttl(void **state) {
  (void)state;
  em_registry_t *r = NULL;
  assert_int_equal(em_registry_new(&r, true), 0);
  em_ingest_t in;
  const char *ids[] = {"old-1", "fresh", "old-2"};
  for (size_t i = 0; i < 3; i++) {
    em_msg_t m = birth(1);
    assert_int_equal(feed(r, ids[i], &m, &in), 0);
    m = data(1, 0);
    assert_int_equal(feed(r, ids[i], &m, &in), 0);
  }
  uint64_t now = em_registry_find(r, "fresh")->heard_mono_ns;
  assert_true(now > 0);
  const uint64_t ttl = 60ull * 1000000000u;
  em_registry_find(r, "old-1")->heard_mono_ns = now - ttl - 1;
  em_registry_find(r, "old-2")->heard_mono_ns = now - 2 * ttl;
  assert_int_equal(em_registry_expire(r, now, 0), 0); /* TTL 0: never. */
  assert_int_equal(em_registry_expire(r, now, ttl), 2);
  assert_int_equal(r->n_devices, 1);
  assert_null(em_registry_find(r, "old-1"));
  assert_null(em_registry_find(r, "old-2"));
  assert_non_null(em_registry_find(r, "fresh"));
  assert_int_equal(r->stats.expired, 2);
  assert_int_equal(em_registry_expire(r, now, ttl), 0);
  em_msg_t m = data(1, 1);
  assert_int_equal(feed(r, "old-1", &m, &in), 0);
  em_agg_device_t *back = em_registry_find(r, "old-1");
  assert_non_null(back);
  assert_int_equal(back->data_msgs, 1);
  assert_false(back->dev->have_birth);
  assert_string_equal(r->devices[0]->dev->id, "fresh");
  assert_string_equal(r->devices[1]->dev->id, "old-1");
  em_registry_free(r);
}

/* A flight recording of session 9 commanded at the device's monotonic time window_ns, of one
 * stage "infer" holding spans[0..n) (borrowed), with window_ns before and after the trigger. */
static em_flight_t flight(const em_flight_span_t *spans, size_t n, uint64_t window_ns) {
  static const char *const stages[] = {"infer"};
  return (em_flight_t){.head = {.time_ns = 1700000000000000000ull, .session = 9},
                       .trigger = {.cause = EM_FLIGHT_COMMAND,
                                   .level = EM_LEVEL_NOMINAL,
                                   .prev_level = EM_LEVEL_NONE},
                       .trigger_mono_ns = 5 * window_ns,
                       .pre_ns = window_ns,
                       .post_ns = window_ns,
                       .period_ns = 100,
                       .stages = stages,
                       .n_stages = 1,
                       .spans = spans,
                       .n_spans = n};
}

/* A flight recording on edgemon/v1/<device>/flight is decoded with em_flight_decode() for the
 * store and counted on its device; one that does not decode (junk, another kind, a span
 * naming no stage) is counted as malformed and reaches no device. */
static void registry_decodes_flight_recordings(void **state) {
  (void)state;
  em_registry_t *r = NULL;
  assert_int_equal(em_registry_new(&r, true), 0);
  static const em_flight_span_t spans[] = {
      {.stage = 0, .frame_id = 3, .start_ns = 5000, .duration_ns = 700}};
  em_flight_t f = flight(spans, 1, 1000);
  f.number = 4;
  size_t len = 0;
  assert_int_equal(em_flight_encode(&f, wire, sizeof(wire), &len), 0);
  em_ingest_t in;
  assert_int_equal(em_registry_ingest(r, "edgemon/v1/fl/flight", wire, len, &in), 0);
  assert_int_equal(in.msg.kind, EM_MSG_FLIGHT);
  assert_int_equal(in.flight.number, 4);
  assert_int_equal(in.flight.head.session, 9);
  assert_int_equal(in.flight.n_spans, 1);
  assert_int_equal(in.flight.spans[0].frame_id, 3);
  assert_non_null(in.agg);
  assert_int_equal(in.agg->flights, 1);

  const uint8_t junk[] = {0xa2, 0x00, 0x01};
  assert_int_not_equal(em_registry_ingest(r, "edgemon/v1/fl/flight", junk, sizeof(junk), &in), 0);
  assert_null(in.agg);
  em_msg_t m = data(1, 0); /* A data message on the flight topic: valid, of another kind. */
  assert_int_equal(feed_on(r, "edgemon/v1/fl/flight", &m, &in), -EINVAL);
  assert_string_equal(in.reject, "kind_mismatch");
  assert_null(in.agg);
  assert_int_equal(r->stats.malformed, 1);
  assert_int_equal(r->stats.rejected[EM_AGG_REJECT_KIND_MISMATCH], 1);
  assert_int_equal(r->stats.ingested, 1);
  assert_int_equal(r->n_devices, 1);
  assert_int_equal(em_registry_find(r, "fl")->flights, 1);
  em_registry_free(r);
}

/* Every kind's golden vector (proto/vectors/) on the topic of every other kind a device
 * publishes is a kind mismatch, never malformed, and reaches no device: the payload is valid,
 * only not the topic's. A flight recording past the largest data message (64 KiB) is one too. A
 * payload that is no valid message of the kind it names (a truncated flight recording on a data
 * topic) is malformed. */
static void registry_counts_every_kind_on_another_kinds_topic_as_a_mismatch(void **state) {
  (void)state;
  static uint8_t big[EM_FLIGHT_MAX_BYTES];
  static const em_msg_kind_t topics[] = {EM_MSG_BIRTH,  EM_MSG_DATA,   EM_MSG_STATE,
                                         EM_MSG_STATUS, EM_MSG_FLIGHT, EM_MSG_PROFILE};
  struct {
    em_msg_kind_t kind;
    uint8_t *cbor;
    size_t len;
  } payloads[] = {{.kind = EM_MSG_BIRTH},   {.kind = EM_MSG_DATA},  {.kind = EM_MSG_STATE},
                  {.kind = EM_MSG_STATUS},  {.kind = EM_MSG_CMD},   {.kind = EM_MSG_FLIGHT},
                  {.kind = EM_MSG_PROFILE}, {.kind = EM_MSG_FLIGHT}};
  const size_t n_payloads = sizeof(payloads) / sizeof(payloads[0]);
  size_t n_vectors = 0;
  const em_vector_t *v = em_vectors(&n_vectors);
  for (size_t i = 0; i < n_payloads - 3; i++) {
    size_t j = 0;
    while (j < n_vectors && v[j].msg.kind != payloads[i].kind) {
      j++;
    }
    assert_true(j < n_vectors);
    payloads[i].cbor = em_vector_file(EM_VECTORS_DIR, v[j].name, "cbor", &payloads[i].len);
  }
  size_t n = 0;
  payloads[n_payloads - 3].cbor = em_vector_file(EM_VECTORS_DIR, em_flight_vectors(&n)[0].name,
                                                 "cbor", &payloads[n_payloads - 3].len);
  payloads[n_payloads - 2].cbor = em_vector_file(EM_VECTORS_DIR, em_profile_vectors(&n)[0].name,
                                                 "cbor", &payloads[n_payloads - 2].len);
  /* 9000 spans: about 100 KiB, more than any data message may be. */
  static em_flight_span_t spans[9000];
  for (size_t i = 0; i < sizeof(spans) / sizeof(spans[0]); i++) {
    spans[i] = (em_flight_span_t){
        .stage = 0, .frame_id = i, .start_ns = 1000000 + i * 1000, .duration_ns = 500 + i % 97};
  }
  em_flight_t f = flight(spans, sizeof(spans) / sizeof(spans[0]), 5000000);
  size_t big_len = 0;
  assert_int_equal(em_flight_encode(&f, big, sizeof(big), &big_len), 0);
  assert_true(big_len > EM_PROTO_MAX_MESSAGE_BYTES);
  payloads[n_payloads - 1].cbor = big;
  payloads[n_payloads - 1].len = big_len;

  em_registry_t *r = NULL;
  assert_int_equal(em_registry_new(&r, true), 0);
  em_ingest_t in;
  uint64_t mismatches = 0;
  for (size_t t = 0; t < sizeof(topics) / sizeof(topics[0]); t++) {
    char topic[64];
    snprintf(topic, sizeof(topic), "edgemon/v1/mism/%s", em_msg_kind_name(topics[t]));
    for (size_t p = 0; p < n_payloads; p++) {
      assert_non_null(payloads[p].cbor);
      if (payloads[p].kind == topics[t]) {
        continue;
      }
      assert_int_equal(em_registry_ingest(r, topic, payloads[p].cbor, payloads[p].len, &in),
                       -EINVAL);
      assert_string_equal(in.reject, "kind_mismatch");
      assert_null(in.agg);
      mismatches++;
    }
  }
  assert_int_equal(r->stats.rejected[EM_AGG_REJECT_KIND_MISMATCH], mismatches);
  assert_int_equal(r->stats.malformed, 0);
  assert_int_equal(r->stats.ingested, 0);
  assert_int_equal(r->n_devices, 0);
  /* Each payload on its own topic is taken (the birth names its own device). */
  assert_int_equal(em_registry_ingest(r, "edgemon/v1/mism/flight", big, big_len, &in), 0);
  assert_int_equal(in.flight.n_spans, f.n_spans);
  /* Half a flight recording on a data topic names the flight kind and does not decode. */
  assert_int_not_equal(em_registry_ingest(r, "edgemon/v1/mism/data", big, big_len / 2, &in), 0);
  assert_null(in.reject);
  assert_int_equal(r->stats.malformed, 1);
  assert_int_equal(r->stats.rejected[EM_AGG_REJECT_KIND_MISMATCH], mismatches);
  for (size_t p = 0; p + 1 < n_payloads; p++) {
    free(payloads[p].cbor);
  }
  em_registry_free(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(registry_names_values_and_accumulates_stages),
      cmocka_unit_test(registry_counts_loss_across_the_wrap_and_resets_per_session),
      cmocka_unit_test(registry_without_loss_tracking_counts_none),
      cmocka_unit_test(registry_asks_for_a_rebirth_once_per_session),
      cmocka_unit_test(registry_counts_bad_input_and_ignores_commands),
      cmocka_unit_test(registry_keeps_devices_sorted),
      cmocka_unit_test(registry_rejects_topics_that_are_not_exactly_device_and_kind),
      cmocka_unit_test(registry_rejects_payloads_that_disagree_with_the_topic),
      cmocka_unit_test(registry_forgets_devices_past_the_ttl),
      cmocka_unit_test(registry_decodes_flight_recordings),
      cmocka_unit_test(registry_counts_every_kind_on_another_kinds_topic_as_a_mismatch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
