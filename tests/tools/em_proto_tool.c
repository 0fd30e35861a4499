/*
 * em_proto_tool.c - test helper around the proto codec, used by the interop tests and to
 * regenerate the golden vectors.
 *
 *   em-proto-tool vectors DIR        write DIR/<name>.cbor and DIR/<name>.json for every row
 *                                    (messages, flight recordings, stack profiles)
 *   em-proto-tool decode < MSG.cbor  print the message (or recording, profile) as JSON, or the
 *                                    error and its offset
 *   em-proto-tool random SEED N DIR  write N random valid messages as DIR/rand-<i>.{cbor,json}:
 *                                    data, and every fourth a level change with a verdict
 *   em-proto-tool topics             print the device's topics (edgemon/proto.h's table), one
 *                                    "WHO SUFFIX KIND COMMAND" line each: WHO "agent" or "host"
 *                                    (who publishes), the message kind and command numbers
 *   em-proto-tool largest flight|profile [BYTES]
 *                                    write to stdout the largest valid recording or profile
 *                                    that fits in BYTES (default the kind's cap): the one
 *                                    em_flight_encode_fit() / em_profile_encode_fit() keep
 *
 * Exit status: 0 done, 1 the input did not decode, 2 usage or I/O error.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vectors.h"

static uint8_t buf[EM_FLIGHT_MAX_BYTES + 1];
static char json[16 * EM_FLIGHT_MAX_BYTES];

static int write_file(const char *dir, const char *stem, const char *ext, const void *data,
                      size_t len) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s.%s", dir, stem, ext);
  FILE *f = fopen(path, "wb");
  if (!f) {
    fprintf(stderr, "em-proto-tool: %s: %s\n", path, strerror(errno));
    return 2;
  }
  size_t n = fwrite(data, 1, len, f);
  if (fclose(f) != 0 || n != len) {
    fprintf(stderr, "em-proto-tool: %s: write failed\n", path);
    return 2;
  }
  return 0;
}

/* Writes DIR/<stem>.cbor (buf[0..len)) and DIR/<stem>.json (json[0..jlen) and a newline),
 * when the encoder and the printer that made them returned rc 0. */
static int write_pair(const char *dir, const char *stem, int rc, size_t len, size_t jlen) {
  if (rc) {
    fprintf(stderr, "em-proto-tool: %s: %s\n", stem, em_proto_strerror(rc));
    return 2;
  }
  json[jlen++] = '\n';
  rc = write_file(dir, stem, "cbor", buf, len);
  return rc ? rc : write_file(dir, stem, "json", json, jlen);
}

/*
 * EMIT(name, type, encode, to_json) defines name(dir, stem, value): encodes one value of `type`
 * with encode() and to_json() and writes its .cbor and .json.
 */
#define EMIT(name, type, encode, to_json)                                                          \
  static int name(const char *dir, const char *stem, const type *value) {                          \
    size_t len = 0, jlen = 0;                                                                      \
    int rc = encode(value, buf, sizeof(buf), &len);                                                \
    if (!rc) {                                                                                     \
      rc = to_json(value, json, sizeof(json) - 1, &jlen);                                          \
    }                                                                                              \
    return write_pair(dir, stem, rc, len, jlen);                                                   \
  }

EMIT(emit, em_msg_t, em_proto_encode, em_proto_to_json)
EMIT(emit_flight, em_flight_t, em_flight_encode, em_flight_to_json)
EMIT(emit_profile, em_profile_t, em_profile_encode, em_profile_to_json)

static int cmd_vectors(const char *dir) {
  size_t n;
  const em_vector_t *v = em_vectors(&n);
  int rc = 0;
  for (size_t i = 0; i < n && !rc; i++) {
    rc = emit(dir, v[i].name, &v[i].msg);
  }
  const em_flight_vector_t *fv = em_flight_vectors(&n);
  for (size_t i = 0; i < n && !rc; i++) {
    rc = emit_flight(dir, fv[i].name, &fv[i].flight);
  }
  const em_profile_vector_t *pv = em_profile_vectors(&n);
  for (size_t i = 0; i < n && !rc; i++) {
    rc = emit_profile(dir, pv[i].name, &pv[i].profile);
  }
  return rc;
}

/* Prints the decoder's error (exit 1) or, when it succeeded, the JSON the printer made (exit 0;
 * 2 when the printer failed). */
static int print_decoded(int rc, size_t off, int json_rc) {
  if (rc) {
    printf("{\"error\":\"%s\",\"code\":%d,\"offset\":%zu}\n", em_proto_strerror(rc), rc, off);
    return 1;
  }
  if (json_rc) {
    fprintf(stderr, "em-proto-tool: json: %s\n", em_proto_strerror(json_rc));
    return 2;
  }
  printf("%s\n", json);
  return 0;
}

/*
 * DECODE(name, type, decode, scratch_for, scratch_bytes, to_json) defines name(len): decodes
 * buf[0..len) as one `type` with decode() (scratch_for(len) bytes of a static scratch of
 * scratch_bytes) and prints its JSON or its error (print_decoded).
 */
#define DECODE(name, type, decode, scratch_for, scratch_bytes, to_json)                            \
  static int name(size_t len) {                                                                    \
    static uint8_t scratch[scratch_bytes];                                                         \
    type value;                                                                                    \
    size_t off = 0, jlen = 0;                                                                      \
    int rc = decode(buf, len, &value, scratch, scratch_for(len), &off);                            \
    return print_decoded(rc, off, rc ? 0 : to_json(&value, json, sizeof(json), &jlen));            \
  }

/* A flight recording (kind 5, which em_proto_decode refuses): its JSON, or its error. */
DECODE(decode_flight, em_flight_t, em_flight_decode, em_flight_scratch_bytes, EM_FLIGHT_SCRATCH_MAX,
       em_flight_to_json)

/* A stack profile (kind 6, which em_proto_decode refuses): its JSON, or its error. */
DECODE(decode_profile, em_profile_t, em_profile_decode, em_profile_scratch_bytes,
       10u * EM_PROFILE_MAX_BYTES + 256u, em_profile_to_json)

static int cmd_decode(void) {
  size_t len = fread(buf, 1, sizeof(buf), stdin);
  if (ferror(stdin)) {
    fprintf(stderr, "em-proto-tool: read error\n");
    return 2;
  }
  static uint8_t scratch[EM_PROTO_SCRATCH_MAX];
  em_msg_t m;
  size_t off = 0, jlen = 0;
  int rc = em_proto_decode(buf, len, &m, scratch, sizeof(scratch), &off);
  if (rc == EM_PROTO_EKIND || rc == EM_PROTO_ETOOBIG) {
    /* Kind 5, which em_proto_decode refuses (and which may be larger than other kinds): a
     * decode without scratch stops at the kind when it is another one. */
    em_flight_t f;
    if (em_flight_decode(buf, len, &f, NULL, 0, NULL) != EM_PROTO_EKIND) {
      return decode_flight(len);
    }
    em_profile_t p;
    if (em_profile_decode(buf, len, &p, NULL, 0, NULL) != EM_PROTO_EKIND) {
      return decode_profile(len);
    }
  }
  return print_decoded(rc, off, rc ? 0 : em_proto_to_json(&m, json, sizeof(json), &jlen));
}

/* xorshift64*: a small deterministic generator so a seed reproduces a failure. */
static uint64_t rng_state;
static uint64_t rnd(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * UINT64_C(2685821657736338717);
}
static uint64_t rnd_below(uint64_t n) {
  return n ? rnd() % n : 0;
}

static em_value_t rnd_value(void) {
  em_value_t v = {.type = (em_value_type_t)rnd_below(4)};
  switch (v.type) {
  case EM_VALUE_ABSENT:
    break;
  case EM_VALUE_UINT:
    v.as.u = rnd() >> rnd_below(64);
    break;
  case EM_VALUE_INT:
    v.as.i = -(int64_t)(rnd() >> (1 + rnd_below(63))) - 1;
    break;
  case EM_VALUE_FLOAT:
    v.as.f = (double)(int64_t)(rnd() >> 11) / (double)(1 + rnd_below(1000000)) *
             (rnd_below(2) ? 1.0 : -1.0);
    break;
  }
  return v;
}

static em_sample_t r_samples[64];
static em_stage_t r_stages[8];
static em_bucket_t r_buckets[8][32];
static char r_names[8][32];

/* A random valid data message: sorted unique aliases, consistent stage windows. */
static void rnd_data(em_msg_t *m) {
  em_data_t *d = &m->u.data;
  m->kind = EM_MSG_DATA;
  *d = (em_data_t){.head = {.time_ns = rnd(), .session = (uint32_t)rnd()},
                   .seq = (uint32_t)rnd(),
                   .window_ns = rnd_below(60000000000u),
                   .historical = rnd_below(2),
                   .level = (em_level_t)((int)rnd_below(5) - 1)};
  uint32_t alias = 0;
  d->n_samples = rnd_below(64);
  for (size_t i = 0; i < d->n_samples; i++) {
    alias += 1 + (uint32_t)rnd_below(1000);
    r_samples[i] = (em_sample_t){.alias = alias, .value = rnd_value()};
  }
  d->samples = r_samples;
  d->n_stages = rnd_below(8);
  for (size_t s = 0; s < d->n_stages; s++) {
    em_stage_t *st = &r_stages[s];
    snprintf(r_names[s], sizeof(r_names[s]), "stage-%u", (unsigned)s);
    *st = (em_stage_t){.name = r_names[s],
                       .scale = (int32_t)rnd_below(31) - 10,
                       .zero_count = rnd_below(3),
                       .buckets = r_buckets[s]};
    st->n_buckets = rnd_below(32);
    int32_t index = (int32_t)rnd_below(4000) - 2000;
    st->count = st->zero_count;
    for (size_t b = 0; b < st->n_buckets; b++) {
      r_buckets[s][b] = (em_bucket_t){.index = index, .count = 1 + rnd_below(100)};
      st->count += r_buckets[s][b].count;
      index += 1 + (int32_t)rnd_below(50);
    }
    if (st->count == 0) {
      continue;
    }
    uint64_t v[6];
    for (size_t k = 0; k < 6; k++) {
      v[k] = rnd_below(UINT64_C(1) << 40);
    }
    for (size_t a = 0; a < 6; a++) { /* sort: min <= p50 <= ... <= max */
      for (size_t b = a + 1; b < 6; b++) {
        if (v[b] < v[a]) {
          uint64_t t = v[a];
          v[a] = v[b];
          v[b] = t;
        }
      }
    }
    st->min_ns = v[0], st->p50_ns = v[1], st->p90_ns = v[2];
    st->p99_ns = v[3], st->p999_ns = v[4], st->max_ns = v[5];
    st->sum_ns = v[5] + rnd_below(UINT64_C(1) << 40);
  }
  d->stages = r_stages;
}

static em_proto_verdict_t r_verdict;
static char r_texts[EM_PROTO_VERDICT_MAX_CAUSES][3][EM_PROTO_VERDICT_MAX_EVIDENCE][24];

/* A random share in 0..1 at most `below`, in steps of 1/1000 (so ties happen). */
static double rnd_share(double below) {
  return (double)rnd_below((uint64_t)(below * 1000.0) + 1) / 1000.0;
}

/* A random valid level change carrying a random valid verdict: 0..8 causes in descending
 * share, any code (unknown ones too), 0..16 figures of any number type, 0..8 processes and
 * 0..8 functions. */
static void rnd_state(em_msg_t *m) {
  em_state_t *st = &m->u.state;
  m->kind = EM_MSG_STATE;
  *st = (em_state_t){.head = {.time_ns = rnd(), .session = (uint32_t)rnd()},
                     .level = (em_level_t)(1 + rnd_below(3)),
                     .prev_level = EM_LEVEL_NOMINAL,
                     .mono_ns = rnd(),
                     .stage = "infer",
                     .verdict = &r_verdict};
  em_proto_verdict_t *v = &r_verdict;
  *v = (em_proto_verdict_t){.stage = "infer",
                            .statistic = rnd_below(2) ? "p99" : "mean",
                            .baseline_ns = rnd() >> rnd_below(64),
                            .breach_ns = rnd() >> rnd_below(64),
                            .nominal_windows = (uint32_t)rnd_below(100),
                            .n_causes = rnd_below(EM_PROTO_VERDICT_MAX_CAUSES + 1)};
  double share = 1.0;
  for (size_t i = 0; i < v->n_causes; i++) {
    em_proto_verdict_cause_t *c = &v->causes[i];
    share = rnd_share(share);
    c->code = (uint32_t)rnd_below(10);
    c->share = share;
    c->n_evidence = rnd_below(EM_PROTO_VERDICT_MAX_EVIDENCE + 1);
    c->n_processes = rnd_below(EM_PROTO_VERDICT_MAX_PROCESSES + 1);
    c->n_functions = rnd_below(EM_PROTO_VERDICT_MAX_FUNCTIONS + 1);
    for (size_t j = 0; j < c->n_evidence; j++) {
      snprintf(r_texts[i][0][j], sizeof(r_texts[i][0][j]), "figure_%zu", j);
      c->evidence[j].name = r_texts[i][0][j];
      c->evidence[j].value = rnd_value();
      if (c->evidence[j].value.type == EM_VALUE_ABSENT) {
        c->evidence[j].value = (em_value_t){.type = EM_VALUE_UINT, .as.u = rnd_below(100)};
      }
    }
    for (size_t j = 0; j < c->n_processes; j++) {
      snprintf(r_texts[i][1][j], sizeof(r_texts[i][1][j]), "proc-%" PRIu64, rnd_below(1000));
      c->processes[j] = (em_proto_verdict_process_t){
          .pid = (uint32_t)rnd(), .comm = r_texts[i][1][j], .share = rnd_share(1.0)};
    }
    for (size_t j = 0; j < c->n_functions; j++) {
      snprintf(r_texts[i][2][j], sizeof(r_texts[i][2][j]), "fn_%zu", j);
      c->functions[j] = (em_proto_verdict_function_t){
          .name = r_texts[i][2][j], .growth = (double)((int64_t)rnd_below(20001) - 10000) / 100.0};
    }
  }
}

/* Random messages: data, and every fourth a level change with a verdict. */
static int cmd_random(const char *seed, const char *count, const char *dir) {
  rng_state = strtoull(seed, NULL, 10) * 2 + 1;
  long n = strtol(count, NULL, 10);
  for (long i = 0; i < n; i++) {
    em_msg_t m;
    if (i % 4 == 3) {
      rnd_state(&m);
    } else {
      rnd_data(&m);
    }
    char stem[32];
    snprintf(stem, sizeof(stem), "rand-%ld", i);
    int rc = emit(dir, stem, &m);
    if (rc) {
      return rc;
    }
  }
  return 0;
}

static int cmd_topics(void) {
  for (size_t i = 0; i < EM_PROTO_TOPICS; i++) {
    em_topic_t t;
    if (em_proto_topic(i, &t) != 0) {
      return 2;
    }
    printf("%s %s %d %d\n", t.from_host ? "host" : "agent", t.suffix, (int)t.kind, (int)t.command);
  }
  return 0;
}

/* Room for more of everything than a cap holds, so the fit is what cuts. */
#define BIG_STAGES 64u
#define BIG_FRAMES 4096u
#define BIG_DEPTH  24u
static char big_names[BIG_FRAMES][24];
static char big_stage_text[BIG_STAGES][16];
static const char *big_stage_names[BIG_STAGES];
static em_flight_span_t big_spans[EM_FLIGHT_MAX_SPANS];
static em_profile_frame_t big_frames[BIG_FRAMES];
static uint32_t big_chains[EM_PROFILE_MAX_STACKS][BIG_DEPTH];
static em_profile_stack_t big_stacks[EM_PROFILE_MAX_STACKS];

/* The largest flight recording or profile under cap bytes on stdout (exit 0), or 2. */
static int cmd_largest(const char *kind, const char *bytes) {
  char *end = NULL;
  unsigned long long cap = bytes ? strtoull(bytes, &end, 10) : EM_FLIGHT_MAX_BYTES;
  bool flight = strcmp(kind, "flight") == 0;
  if ((!flight && strcmp(kind, "profile") != 0) || (bytes && (*end || cap == 0)) ||
      cap > sizeof(buf) - 1) {
    fprintf(stderr, "em-proto-tool: largest flight|profile [1..%zu]\n", sizeof(buf) - 1);
    return 2;
  }
  for (size_t i = 0; i < BIG_STAGES; i++) {
    snprintf(big_stage_text[i], sizeof(big_stage_text[i]), "stage-%02zu", i);
    big_stage_names[i] = big_stage_text[i];
  }
  const uint64_t t0 = UINT64_C(1795262405000000000), mono = UINT64_C(123456789012345);
  size_t len = 0;
  int rc;
  if (flight) {
    for (size_t i = 0; i < EM_FLIGHT_MAX_SPANS; i++) { /* Irregular values: wide deltas. */
      big_spans[i] = (em_flight_span_t){.stage = (uint32_t)(i % BIG_STAGES),
                                        .frame_id = i * 7919u,
                                        .start_ns = mono + i * 1000003u,
                                        .duration_ns = 1000u + (i * 104729u) % 900000u};
    }
    em_flight_t f = {.head = {.time_ns = t0, .session = 7},
                     .trigger = {.cause = EM_FLIGHT_COMMAND,
                                 .level = EM_LEVEL_NOMINAL,
                                 .prev_level = EM_LEVEL_NONE,
                                 .reason = "cmd/flight"},
                     .trigger_mono_ns = mono + EM_FLIGHT_MAX_SPANS / 2 * 1000003u,
                     .pre_ns = UINT64_C(40000000000),
                     .post_ns = UINT64_C(40000000000),
                     .period_ns = 100000000u,
                     .stages = big_stage_names,
                     .n_stages = BIG_STAGES,
                     .spans = big_spans,
                     .n_spans = EM_FLIGHT_MAX_SPANS};
    rc = em_flight_encode_fit(&f, buf, (size_t)cap, &len);
  } else {
    for (size_t i = 0; i < BIG_FRAMES; i++) {
      snprintf(big_names[i], sizeof(big_names[i]), "fn_%04zu", i);
      big_frames[i] = (em_profile_frame_t){big_names[i], "libbig.so", EM_FRAME_NATIVE};
    }
    for (size_t s = 0; s < EM_PROFILE_MAX_STACKS; s++) {
      for (size_t d = 0; d < BIG_DEPTH; d++) {
        big_chains[s][d] = (uint32_t)((s * 31u + d * 131u) % BIG_FRAMES);
      }
      big_stacks[s] = (em_profile_stack_t){.frames = big_chains[s],
                                           .n_frames = BIG_DEPTH,
                                           .samples = EM_PROFILE_MAX_STACKS + 1u - s,
                                           .stage = (uint32_t)(s % BIG_STAGES)};
    }
    em_profile_t p = {.head = {.time_ns = t0, .session = 7},
                      .trigger = {.cause = EM_PROFILE_COMMAND,
                                  .level = EM_LEVEL_NOMINAL,
                                  .prev_level = EM_LEVEL_NONE,
                                  .reason = "cmd/profile"},
                      .start_mono_ns = mono,
                      .duration_ns = UINT64_C(60000000000),
                      .hz = 199,
                      .clock = "cpu-clock",
                      .samples = UINT64_C(1) << 40,
                      .stages = big_stage_names,
                      .n_stages = BIG_STAGES,
                      .frames = big_frames,
                      .n_frames = BIG_FRAMES,
                      .stacks = big_stacks,
                      .n_stacks = EM_PROFILE_MAX_STACKS};
    rc = em_profile_encode_fit(&p, buf, (size_t)cap, &len);
  }
  if (rc) {
    fprintf(stderr, "em-proto-tool: largest %s: %s\n", kind, em_proto_strerror(rc));
    return 2;
  }
  return fwrite(buf, 1, len, stdout) == len && fflush(stdout) == 0 ? 0 : 2;
}

static int usage(void) {
  fprintf(stderr, "usage: em-proto-tool vectors DIR\n"
                  "       em-proto-tool decode < MESSAGE.cbor\n"
                  "       em-proto-tool random SEED COUNT DIR\n"
                  "       em-proto-tool topics\n"
                  "       em-proto-tool largest flight|profile [BYTES]\n");
  return 2;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "vectors") == 0) {
    return cmd_vectors(argv[2]);
  }
  if (argc == 2 && strcmp(argv[1], "decode") == 0) {
    return cmd_decode();
  }
  if (argc == 5 && strcmp(argv[1], "random") == 0) {
    return cmd_random(argv[2], argv[3], argv[4]);
  }
  if (argc == 2 && strcmp(argv[1], "topics") == 0) {
    return cmd_topics();
  }
  if ((argc == 3 || argc == 4) && strcmp(argv[1], "largest") == 0) {
    return cmd_largest(argv[2], argc == 4 ? argv[3] : NULL);
  }
  return usage();
}
