/*
 * test_agg_profiles.c - stack profiles in the aggregator's store (host/aggregator/store/forensics.c
 * through em_store_add_profile()) and their list (forensic_api.c) against a real SQLite
 * database in a temporary directory: the row's summary columns and its CBOR as given, a replay
 * (same device, session and number, live or historical) stored once and counted as a
 * duplicate, retention by the profile's time, the per-device byte bound keeping the newest
 * (the checks the flight recordings' test runs too, forensic_store.h), a version 7 store
 * migrated at open, and the link between a flight recording and a profile of the same session
 * and cause within 1 s, both ways. Rows are read through an independent connection
 * (store_query.h), so only committed rows count.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "forensic_api.h"
#include "forensic_store.h"
#include "history.h"
#include "vectors.h"

#include <edgemon/flight.h>
#include <edgemon/profile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static em_store_t *open_store(const store_fixture_t *f) {
  return forensic_store_open(f, FORENSIC_PROFILES, 0, 0);
}

/* A profile and its encoding. */
typedef struct {
  uint8_t buf[4096];
  size_t len;
  em_profile_t p;
} prof_t;

/* The vectors' profile_basic (an escalation: 2 stages, 8 frames, 5 stacks) or profile_command
 * as session-number at time_ns, with 4 stacks and 10 samples cut, encoded into r->buf. */
static void make(prof_t *r, uint32_t session, uint32_t number, uint64_t time_ns,
                 em_profile_cause_t cause) {
  size_t n = 0;
  const em_profile_vector_t *row = &em_profile_vectors(&n)[cause == EM_PROFILE_ESCALATION ? 0 : 1];
  assert_int_equal(row->profile.trigger.cause, cause);
  memset(r, 0, sizeof(*r));
  r->p = row->profile;
  r->p.head = (em_msg_head_t){.time_ns = time_ns, .session = session};
  r->p.number = number;
  r->p.truncated.stacks_cut = 4;
  r->p.truncated.samples_cut = 10;
  assert_int_equal(em_profile_encode(&r->p, r->buf, sizeof(r->buf), &r->len), 0);
}

static void add(em_store_t *s, const char *device, const prof_t *r) {
  assert_int_equal(em_store_add_profile(s, device, &r->p, r->buf, r->len, T0_NS), 0);
}

/* The sample profile 42-0 of the shared checks (forensic_kind_t.add); the spool's replay
 * through em_profile_mark_historical(), as the agent's spool makes it. */
static void add_sample(em_store_t *s, const char *device, forensic_entry_t *e) {
  prof_t r;
  make(&r, e->session, e->number, e->time_ns, EM_PROFILE_ESCALATION);
  if (e->historical) {
    assert_int_equal(em_profile_mark_historical(r.buf, r.len, e->cbor, sizeof(e->cbor), &e->len),
                     0);
  } else {
    memcpy(e->cbor, r.buf, r.len);
    e->len = r.len;
  }
  assert_int_equal(em_store_add_profile(s, device, &r.p, e->cbor, e->len, forensic_recv_ns(e)), 0);
}

static const forensic_kind_t profiles = {
    .table = FORENSIC_PROFILES,
    .add = add_sample,
    .summary = "e.cause = 0 AND e.level = 2 AND e.prev_level = 0 AND e.rule = 'infer.p99' AND "
               "e.stage = 'infer' AND e.reason = 'infer p99 52.0 ms > 40.0 ms for 3 windows' AND "
               "e.start_mono_ns = 123456789012345 AND e.duration_ns = 5000000000 AND e.hz = 99 "
               "AND e.clock = 'cpu-clock' AND e.samples = 480 AND e.lost = 2 AND e.stages = 2 "
               "AND e.frames = 8 AND e.stacks = 5 AND e.stacks_cut = 4 AND e.samples_cut = 10",
    .user_version = 11,
};

/* A version 7 store (no profiles table) opens as version 10 with its rows kept and takes
 * profiles. */
static void profiles_version_7_store_migrates_at_open(void **state) {
  store_fixture_t *f = *state;
  assert_int_equal(em_store_close(open_store(f)), 0);
  q_exec(f->path, "DROP TABLE profiles;INSERT INTO devices(id, name) "
                  "VALUES(1, 'dev-1');PRAGMA user_version=7");
  assert_int_equal(q_int(f->path, "SELECT count(*) FROM sqlite_master WHERE name = 'profiles'"), 0);
  em_store_t *s = open_store(f);
  assert_int_equal(q_int(f->path, "PRAGMA user_version"), 11);
  prof_t r;
  make(&r, 42, 0, T0_NS, EM_PROFILE_ESCALATION);
  add(s, "dev-1", &r);
  assert_int_equal(em_store_close(s), 0);
  assert_int_equal(q_int(f->path, "SELECT count(*) FROM profiles WHERE device = 1"), 1);
  assert_int_equal(q_int(f->path, "SELECT count(*) FROM sqlite_master WHERE name IN "
                                  "('profiles_device_session_number', 'profiles_device_time')"),
                   2);
}

/* The vectors' flight_basic (an escalation) or flight_command as session-number at time_ns. */
static void add_flight(em_store_t *s, uint32_t session, uint32_t number, uint64_t time_ns,
                       em_flight_cause_t cause) {
  size_t n = 0;
  const em_flight_vector_t *row = &em_flight_vectors(&n)[cause == EM_FLIGHT_ESCALATION ? 0 : 1];
  assert_int_equal(row->flight.trigger.cause, cause);
  em_flight_t fl = row->flight;
  fl.head = (em_msg_head_t){.time_ns = time_ns, .session = session};
  fl.number = number;
  uint8_t buf[1024];
  size_t len = 0;
  assert_int_equal(em_flight_encode(&fl, buf, sizeof(buf), &len), 0);
  assert_int_equal(em_store_add_flight(s, "dev-1", &fl, buf, len, T0_NS), 0);
}

/* The list of kind's blobs of dev-1 (a JSON text the caller frees). */
static char *list(const store_fixture_t *f, em_forensic_kind_t kind) {
  em_history_t *h = NULL;
  char err[256];
  assert_int_equal(em_history_open(&h, f->path, err, sizeof(err)), 0);
  em_forensic_reply_t r = {0, NULL, 0, NULL};
  em_forensic_api_list(h, kind, "dev-1", NULL, 0, &r);
  em_history_close(h);
  assert_int_equal(r.status, 200);
  assert_non_null(r.body);
  return r.body;
}

/* The text of the entry whose key is `key` in a list body, up to the next entry. */
static const char *entry(const char *body, const char *key, char *out, size_t cap) {
  char pat[64];
  snprintf(pat, sizeof(pat), "{\"key\":\"%s\"", key);
  const char *p = strstr(body, pat);
  assert_non_null(p);
  const char *end = strstr(p + 1, "{\"key\":");
  size_t n = end ? (size_t)(end - p) : strlen(p);
  snprintf(out, cap, "%.*s", (int)n, p);
  return out;
}

/* Linked: same device, session and cause, times within 1 s (the nearest wins). Not linked:
 * 1.5 s apart, another cause, another session. */
static void profiles_link_flights_of_the_same_event_both_ways(void **state) {
  store_fixture_t *f = *state;
  em_store_t *s = open_store(f);
  prof_t p[5];
  make(&p[0], 42, 0, T0_NS + S_NS / 2, EM_PROFILE_ESCALATION);         /* 0.5 s after 42-0 */
  make(&p[1], 42, 1, T0_NS + S_NS / 4, EM_PROFILE_ESCALATION);         /* nearer to 42-0 */
  make(&p[2], 42, 2, T0_NS + 10 * S_NS + S_NS, EM_PROFILE_ESCALATION); /* exactly 1 s */
  make(&p[3], 42, 3, T0_NS + 20 * S_NS, EM_PROFILE_COMMAND);           /* other cause */
  make(&p[4], 43, 0, T0_NS + 30 * S_NS, EM_PROFILE_ESCALATION);        /* other session */
  for (int i = 0; i < 5; i++) {
    add(s, "dev-1", &p[i]);
  }
  add_flight(s, 42, 0, T0_NS, EM_FLIGHT_ESCALATION);
  add_flight(s, 42, 1, T0_NS + 10 * S_NS, EM_FLIGHT_ESCALATION);
  add_flight(s, 42, 2, T0_NS + 20 * S_NS, EM_FLIGHT_ESCALATION);
  add_flight(s, 42, 3, T0_NS + 30 * S_NS, EM_FLIGHT_ESCALATION);
  add_flight(s, 42, 4, T0_NS + 40 * S_NS + S_NS + S_NS / 2, EM_FLIGHT_COMMAND);
  assert_int_equal(em_store_close(s), 0);

  char e[2048];
  char *fl = list(f, EM_FORENSIC_FLIGHT);
  assert_non_null(strstr(entry(fl, "42-0", e, sizeof(e)), "\"profile\":\"42-1\","));
  assert_non_null(strstr(entry(fl, "42-1", e, sizeof(e)), "\"profile\":\"42-2\","));
  assert_non_null(strstr(entry(fl, "42-2", e, sizeof(e)), "\"profile\":null,"));
  assert_non_null(strstr(entry(fl, "42-3", e, sizeof(e)), "\"profile\":null,"));
  assert_non_null(strstr(entry(fl, "42-4", e, sizeof(e)), "\"profile\":null,"));
  free(fl);
  char *pr = list(f, EM_FORENSIC_PROFILE);
  assert_non_null(strstr(pr, "{\"device\":\"dev-1\",\"profiles\":[{\"key\":\"43-0\""));
  assert_non_null(strstr(entry(pr, "42-0", e, sizeof(e)), "\"flight\":\"42-0\","));
  assert_non_null(strstr(entry(pr, "42-1", e, sizeof(e)), "\"flight\":\"42-0\","));
  assert_non_null(strstr(entry(pr, "42-2", e, sizeof(e)), "\"flight\":\"42-1\","));
  assert_non_null(strstr(entry(pr, "42-3", e, sizeof(e)), "\"flight\":null,"));
  assert_non_null(strstr(entry(pr, "43-0", e, sizeof(e)), "\"flight\":null,"));
  assert_non_null(
      strstr(entry(pr, "42-0", e, sizeof(e)),
             "\"truncated\":{\"stacks_cut\":4,\"samples_cut\":10},\"historical\":false"));
  assert_non_null(
      strstr(entry(pr, "42-0", e, sizeof(e)), "\"url\":\"/api/devices/dev-1/profiles/42-0\"}"));
  free(pr);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      FORENSIC_STORE_TESTS(profiles),
      cmocka_unit_test_setup_teardown(profiles_version_7_store_migrates_at_open,
                                      store_fixture_setup, store_fixture_teardown),
      cmocka_unit_test_setup_teardown(profiles_link_flights_of_the_same_event_both_ways,
                                      store_fixture_setup, store_fixture_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
