/*
 * em_proto_tool.c - test helper around the proto codec, used by the interop tests and to
 * regenerate the golden vectors.
 *
 *   em-proto-tool vectors DIR        write DIR/<name>.cbor and DIR/<name>.json for every row
 *                                    (messages, flight recordings, stack profiles)
 *   em-proto-tool decode < MSG.cbor  print the message (or recording, profile) as JSON, or the
 *                                    error and its offset
 *   em-proto-tool random SEED N DIR  write N random valid messages as DIR/rand-<i>.{cbor,json}
 *
 * Exit status: 0 done, 1 the input did not decode, 2 usage or I/O error.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
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

/* Encodes one message and writes its .cbor and .json. */
static int emit(const char *dir, const char *stem, const em_msg_t *m) {
  size_t len = 0, jlen = 0;
  int rc = em_proto_encode(m, buf, sizeof(buf), &len);
  if (!rc) {
    rc = em_proto_to_json(m, json, sizeof(json) - 1, &jlen);
  }
  return write_pair(dir, stem, rc, len, jlen);
}

/* Encodes one flight recording and writes its .cbor and .json. */
static int emit_flight(const char *dir, const char *stem, const em_flight_t *f) {
  size_t len = 0, jlen = 0;
  int rc = em_flight_encode(f, buf, sizeof(buf), &len);
  if (!rc) {
    rc = em_flight_to_json(f, json, sizeof(json) - 1, &jlen);
  }
  return write_pair(dir, stem, rc, len, jlen);
}

/* Encodes one stack profile and writes its .cbor and .json. */
static int emit_profile(const char *dir, const char *stem, const em_profile_t *p) {
  size_t len = 0, jlen = 0;
  int rc = em_profile_encode(p, buf, sizeof(buf), &len);
  if (!rc) {
    rc = em_profile_to_json(p, json, sizeof(json) - 1, &jlen);
  }
  return write_pair(dir, stem, rc, len, jlen);
}

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

/* A flight recording (kind 5, which em_proto_decode refuses): its JSON, or its error. */
static int decode_flight(size_t len) {
  static uint8_t scratch[12u * EM_FLIGHT_MAX_BYTES + 256u];
  em_flight_t f;
  size_t off = 0, jlen = 0;
  int rc = em_flight_decode(buf, len, &f, scratch, em_flight_scratch_bytes(len), &off);
  return print_decoded(rc, off, rc ? 0 : em_flight_to_json(&f, json, sizeof(json), &jlen));
}

/* A stack profile (kind 6, which em_proto_decode refuses): its JSON, or its error. */
static int decode_profile(size_t len) {
  static uint8_t scratch[10u * EM_PROFILE_MAX_BYTES + 256u];
  em_profile_t p;
  size_t off = 0, jlen = 0;
  int rc = em_profile_decode(buf, len, &p, scratch, em_profile_scratch_bytes(len), &off);
  return print_decoded(rc, off, rc ? 0 : em_profile_to_json(&p, json, sizeof(json), &jlen));
}

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

static int cmd_random(const char *seed, const char *count, const char *dir) {
  rng_state = strtoull(seed, NULL, 10) * 2 + 1;
  long n = strtol(count, NULL, 10);
  for (long i = 0; i < n; i++) {
    em_msg_t m;
    rnd_data(&m);
    char stem[32];
    snprintf(stem, sizeof(stem), "rand-%ld", i);
    int rc = emit(dir, stem, &m);
    if (rc) {
      return rc;
    }
  }
  return 0;
}

static int usage(void) {
  fprintf(stderr, "usage: em-proto-tool vectors DIR\n"
                  "       em-proto-tool decode < MESSAGE.cbor\n"
                  "       em-proto-tool random SEED COUNT DIR\n");
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
  return usage();
}
