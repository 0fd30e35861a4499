/*
 * test_profile.c - the stack profile codec (edgemon/profile.h): the golden vectors encode to
 * their files and decode back to the same JSON; every refusal has its own code in the encoder
 * and the decoder alike; the limits hold one past; encode_fit leaves out the stacks with the
 * fewest samples and counts them; the historical form decodes as historical; em_proto_decode
 * refuses kind 6; cmd/profile's seconds and the birth's profiler round-trip.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "edgemon/profile.h"
#include "vectors.h"

#define SCRATCH (10u * EM_PROFILE_MAX_BYTES + 256u)

static uint8_t buf[EM_PROFILE_MAX_BYTES + 64];
static uint8_t buf2[EM_PROFILE_MAX_BYTES + 64];
static uint8_t scratch[SCRATCH];
static char json[4 * EM_PROFILE_MAX_BYTES];

static em_profile_t basic(void) {
  size_t n;
  return em_profile_vectors(&n)[0].profile;
}

/* Encodes p and decodes it into *out: the decoder's code (the encoder must succeed). */
static int round_trip(const em_profile_t *p, em_profile_t *out, size_t *len) {
  assert_int_equal(em_profile_encode(p, buf, sizeof(buf), len), 0);
  return em_profile_decode(buf, *len, out, scratch, sizeof(scratch), NULL);
}

static void vectors_match_the_golden_files(void **state) {
  (void)state;
  size_t n, len, want_len, json_len, jlen;
  const em_profile_vector_t *v = em_profile_vectors(&n);
  assert_int_equal(n, 3);
  for (size_t i = 0; i < n; i++) {
    uint8_t *want = em_vector_file(EM_VECTORS_DIR, v[i].name, "cbor", &want_len);
    char *want_json = (char *)em_vector_file(EM_VECTORS_DIR, v[i].name, "json", &json_len);
    assert_non_null(want);
    assert_non_null(want_json);
    em_profile_t p;
    assert_int_equal(round_trip(&v[i].profile, &p, &len), 0);
    assert_int_equal(len, want_len);
    assert_memory_equal(buf, want, len);
    assert_int_equal(em_profile_to_json(&p, json, sizeof(json), &jlen), 0);
    assert_int_equal(jlen + 1, json_len); /* The file ends with a newline. */
    assert_memory_equal(json, want_json, jlen);
    free(want);
    free(want_json);
  }
}

static void decoded_fields_are_those_encoded(void **state) {
  (void)state;
  em_profile_t src = basic(), p;
  size_t len;
  assert_int_equal(round_trip(&src, &p, &len), 0);
  assert_int_equal(p.n_frames, 8);
  assert_string_equal(p.frames[5].name, "do_syscall_64");
  assert_null(p.frames[5].module);
  assert_int_equal(p.frames[5].kind, EM_FRAME_KERNEL);
  assert_int_equal(p.n_stacks, 5);
  assert_int_equal(p.stacks[2].n_frames, 6);
  assert_int_equal(p.stacks[2].frames[5], 5);
  assert_int_equal(p.stacks[2].stage, 0);
  assert_int_equal(p.stacks[4].stage, EM_PROFILE_NO_STAGE);
  assert_int_equal(p.stacks[4].off_cpu_ns, 48000000);
  assert_int_equal(p.trigger.prev_level, EM_LEVEL_NOMINAL);
  assert_string_equal(p.clock, "cpu-clock");
  assert_int_equal(p.n_notes, 2);
  assert_false(p.historical);
}

/* A broken copy of profile_basic: the encoder refuses it with `code`, and so does the decoder
 * when the same break is made in the bytes (where the encoder cannot write it). */
static void each_bad_profile_gets_its_own_code(void **state) {
  (void)state;
  static const uint32_t deep[EM_PROFILE_MAX_DEPTH + 1];
  size_t len;
  struct {
    const char *what;
    int code;
  } cases[] = {
      {"hz 0", EM_PROTO_ERANGE},
      {"hz 1001", EM_PROTO_ERANGE},
      {"clock cycles", EM_PROTO_ERANGE},
      {"clock not an ident", EM_PROTO_ESTRING},
      {"stage index past the table", EM_PROTO_ERANGE},
      {"frame index past the table", EM_PROTO_ERANGE},
      {"stacks ascending", EM_PROTO_EINCONSISTENT},
      {"stack of no frames", EM_PROTO_EINCONSISTENT},
      {"stack 257 deep", EM_PROTO_ELIMIT},
      {"no samples, no off-CPU", EM_PROTO_EINCONSISTENT},
      {"stage twice", EM_PROTO_EDUPLICATE},
      {"frame kind 4", EM_PROTO_ERANGE},
      {"empty frame name", EM_PROTO_ESTRING},
      {"cause 2", EM_PROTO_ERANGE},
      {"17 notes", EM_PROTO_ELIMIT},
      {"frames NULL", EM_PROTO_EINVAL},
  };
  static const char *const dup[] = {"infer", "infer"};
  static const char *const notes[EM_PROFILE_MAX_NOTES + 1] = {
      "a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a"};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    em_profile_t p = basic();
    em_profile_stack_t stacks[5];
    em_profile_frame_t frames[8];
    memcpy(stacks, p.stacks, sizeof(stacks));
    memcpy(frames, p.frames, sizeof(frames));
    p.stacks = stacks;
    p.frames = frames;
    switch (i) {
    case 0:
      p.hz = 0;
      break;
    case 1:
      p.hz = 1001;
      break;
    case 2:
      p.clock = "cycles";
      break;
    case 3:
      p.clock = "cpu clock";
      break;
    case 4:
      stacks[0].stage = 2;
      break;
    case 5:
      p.n_frames = 4;
      break; /* stack 0 uses frame 4 */
    case 6:
      stacks[1].samples = 413;
      break;
    case 7:
      stacks[0].n_frames = 0;
      break;
    case 8:
      stacks[0].frames = deep, stacks[0].n_frames = EM_PROFILE_MAX_DEPTH + 1;
      break;
    case 9:
      stacks[4].off_cpu_ns = 0;
      break;
    case 10:
      p.stages = dup;
      break;
    case 11:
      frames[7].kind = (em_profile_frame_kind_t)4;
      break;
    case 12:
      frames[7].name = "";
      break;
    case 13:
      p.trigger.cause = (em_profile_cause_t)2;
      break;
    case 14:
      p.notes = notes, p.n_notes = EM_PROFILE_MAX_NOTES + 1;
      break;
    default:
      p.frames = NULL;
      break;
    }
    int rc = em_profile_encode(&p, buf, sizeof(buf), &len);
    if (rc != cases[i].code) {
      fail_msg("%s: want %d, got %d", cases[i].what, cases[i].code, rc);
    }
    assert_int_equal(em_profile_to_json(&p, json, sizeof(json), &len), cases[i].code);
  }
}

/* The decoder's side of the same rules, on bytes patched where the encoder cannot write them. */
static void the_decoder_refuses_what_the_encoder_refuses(void **state) {
  (void)state;
  em_profile_t src = basic(), p;
  size_t len, off = 0;
  /* One stack, [412, 0, 1, 0, 1, 2, 3, 4]: found in the bytes and patched. */
  src.n_stacks = 1;
  assert_int_equal(em_profile_encode(&src, buf, sizeof(buf), &len), 0);
  static const uint8_t stack[] = {0x88, 0x19, 0x01, 0x9c, 0x00, 0x01, 0x00, 0x01, 0x02, 0x03, 0x04};
  uint8_t *at = NULL;
  for (size_t i = 0; i + sizeof(stack) <= len && !at; i++) {
    at = memcmp(buf + i, stack, sizeof(stack)) == 0 ? buf + i : NULL;
  }
  assert_non_null(at);
  at[5] = 0x02; /* stage 2 of 2 */
  assert_int_equal(em_profile_decode(buf, len, &p, scratch, sizeof(scratch), &off),
                   EM_PROTO_ERANGE);
  assert_int_equal(off, (size_t)(at + 5 - buf));
  at[5] = 0x01, at[10] = 0x08; /* frame 8 of 8 */
  assert_int_equal(em_profile_decode(buf, len, &p, scratch, sizeof(scratch), NULL),
                   EM_PROTO_ERANGE);
  at[10] = 0x04;
  assert_int_equal(em_profile_decode(buf, len, &p, scratch, sizeof(scratch), NULL), 0);
  /* Kind 6 is not a v1 message em_proto_decode reads; a profile decoder refuses kind 5. */
  assert_int_equal(em_profile_encode(&src, buf, sizeof(buf), &len), 0);
  em_msg_t m;
  static uint8_t msg_scratch[EM_PROTO_SCRATCH_MAX];
  assert_int_equal(em_proto_decode(buf, len, &m, msg_scratch, sizeof(msg_scratch), NULL),
                   EM_PROTO_EKIND);
  buf[4] = EM_MSG_FLIGHT;
  assert_int_equal(em_profile_decode(buf, len, &p, scratch, sizeof(scratch), NULL), EM_PROTO_EKIND);
  /* Every truncation of a valid profile is refused, never read past. */
  assert_int_equal(em_profile_encode(&src, buf, sizeof(buf), &len), 0);
  for (size_t cut = 0; cut < len; cut++) {
    assert_int_not_equal(em_profile_decode(buf, cut, &p, scratch, sizeof(scratch), NULL), 0);
  }
  /* Too little scratch is ESCRATCH, the bound is enough. */
  assert_int_equal(em_profile_decode(buf, len, &p, scratch, 64, NULL), EM_PROTO_ESCRATCH);
  assert_int_equal(em_profile_decode(buf, len, &p, scratch, em_profile_scratch_bytes(len), NULL),
                   0);
}

static void limits_hold_one_past(void **state) {
  (void)state;
  static em_profile_stack_t stacks[EM_PROFILE_MAX_STACKS + 1];
  static const uint32_t frame0[] = {0};
  em_profile_t p = basic(), q;
  size_t len;
  for (size_t i = 0; i <= EM_PROFILE_MAX_STACKS; i++) {
    stacks[i] = (em_profile_stack_t){frame0, 1, 1, 0, EM_PROFILE_NO_STAGE};
  }
  p.stacks = stacks;
  p.n_stacks = EM_PROFILE_MAX_STACKS;
  assert_int_equal(round_trip(&p, &q, &len), 0);
  assert_int_equal(q.n_stacks, EM_PROFILE_MAX_STACKS);
  p.n_stacks++;
  assert_int_equal(em_profile_encode(&p, buf, sizeof(buf), &len), EM_PROTO_ELIMIT);
  p.n_stacks = 1;
  p.hz = 1000;
  assert_int_equal(round_trip(&p, &q, &len), 0);
  assert_int_equal(q.hz, 1000);
  p.hz = 1;
  assert_int_equal(round_trip(&p, &q, &len), 0);
  static const uint32_t deep[EM_PROFILE_MAX_DEPTH];
  stacks[0].frames = deep, stacks[0].n_frames = EM_PROFILE_MAX_DEPTH;
  assert_int_equal(round_trip(&p, &q, &len), 0);
  assert_int_equal(q.stacks[0].n_frames, EM_PROFILE_MAX_DEPTH);
}

static void fit_leaves_out_the_fewest_samples_and_counts_them(void **state) {
  (void)state;
  em_profile_t p = basic(), q;
  size_t whole, len;
  assert_int_equal(em_profile_encode(&p, buf, sizeof(buf), &whole), 0);
  /* A cap that fits: nothing changes. */
  assert_int_equal(em_profile_encode_fit(&p, buf2, sizeof(buf2), &len), 0);
  assert_int_equal(len, whole);
  assert_int_equal(p.n_stacks, 5);
  /* Four bytes short: the last stack (0 samples, 48 ms off-CPU) goes, then the cut is said. */
  size_t cap = whole - 4;
  assert_int_equal(em_profile_encode_fit(&p, buf2, cap, &len), 0);
  assert_true(len <= cap);
  assert_int_equal(em_profile_decode(buf2, len, &q, scratch, sizeof(scratch), NULL), 0);
  assert_true(q.n_stacks < 5);
  assert_int_equal(q.n_stacks + q.truncated.stacks_cut, 5);
  uint64_t kept = 0;
  for (size_t i = 0; i < q.n_stacks; i++) {
    kept += q.stacks[i].samples;
  }
  assert_int_equal(kept + q.truncated.samples_cut, 412 + 37 + 21 + 3 + 0);
  assert_int_equal(q.stacks[0].samples, 412); /* The most sampled stays. */
  assert_int_equal(q.n_frames, 8);            /* Frames stay in the table. */
  /* A cap below the profile with no stacks: ENOSPACE with that size, p left alone. */
  em_profile_t r = basic();
  assert_int_equal(em_profile_encode_fit(&r, buf2, 40, &len), EM_PROTO_ENOSPACE);
  assert_true(len > 40);
  assert_int_equal(r.n_stacks, 5);
}

static void historical_form_decodes_as_historical(void **state) {
  (void)state;
  em_profile_t p = basic(), q;
  size_t len, len2, len3;
  assert_int_equal(em_profile_encode(&p, buf, sizeof(buf), &len), 0);
  assert_int_equal(em_profile_mark_historical(buf, len, buf2, sizeof(buf2), &len2), 0);
  assert_int_equal(len2, len + 2);
  assert_int_equal(em_profile_decode(buf2, len2, &q, scratch, sizeof(scratch), NULL), 0);
  assert_true(q.historical);
  p.historical = true;
  assert_int_equal(em_profile_encode(&p, buf, sizeof(buf), &len3), 0);
  assert_int_equal(len3, len2);
  assert_memory_equal(buf, buf2, len2); /* The same as encoding it historical. */
  buf[4] = EM_MSG_FLIGHT;               /* Not a profile's bytes. */
  assert_int_equal(em_profile_mark_historical(buf, len3, buf2, sizeof(buf2), &len2),
                   EM_PROTO_EMALFORMED);
}

static void cmd_profile_and_birth_profiler_round_trip(void **state) {
  (void)state;
  static uint8_t msg_scratch[EM_PROTO_SCRATCH_MAX];
  em_msg_t m = {.kind = EM_MSG_CMD, .u.cmd = {.command = EM_CMD_PROFILE, .seconds = 60}}, d;
  size_t len;
  assert_int_equal(em_proto_encode(&m, buf, sizeof(buf), &len), 0);
  assert_int_equal(em_proto_decode(buf, len, &d, msg_scratch, sizeof(msg_scratch), NULL), 0);
  assert_int_equal(d.u.cmd.command, EM_CMD_PROFILE);
  assert_int_equal(d.u.cmd.seconds, 60);
  m.u.cmd.seconds = 61;
  assert_int_equal(em_proto_encode(&m, buf, sizeof(buf), &len), EM_PROTO_ERANGE);
  m.u.cmd.seconds = 5, m.u.cmd.command = EM_CMD_FLIGHT;
  assert_int_equal(em_proto_encode(&m, buf, sizeof(buf), &len), EM_PROTO_EINCONSISTENT);
  /* The bytes of cmd/profile with seconds 5, command patched to flight: refused too. */
  m.u.cmd.command = EM_CMD_PROFILE;
  assert_int_equal(em_proto_encode(&m, buf, sizeof(buf), &len), 0);
  assert_int_equal(buf[len - 3], EM_CMD_PROFILE);
  buf[len - 3] = EM_CMD_FLIGHT;
  assert_int_equal(em_proto_decode(buf, len, &d, msg_scratch, sizeof(msg_scratch), NULL),
                   EM_PROTO_EINCONSISTENT);
  buf[len - 3] = EM_CMD_PROFILE, buf[len - 1] = 0;
  assert_int_equal(em_proto_decode(buf, len, &d, msg_scratch, sizeof(msg_scratch), NULL),
                   EM_PROTO_ERANGE);

  size_t n;
  const em_vector_t *v = em_vectors(&n);
  const em_msg_t *birth = NULL;
  for (size_t i = 0; i < n; i++) {
    birth = strcmp(v[i].name, "birth_profiler") == 0 ? &v[i].msg : birth;
  }
  assert_non_null(birth);
  assert_int_equal(em_proto_encode(birth, buf, sizeof(buf), &len), 0);
  assert_int_equal(em_proto_decode(buf, len, &d, msg_scratch, sizeof(msg_scratch), NULL), 0);
  assert_true(d.u.birth.profiler.on);
  assert_int_equal(d.u.birth.profiler.hz, 99);
  assert_int_equal(d.u.birth.profiler.min_gap_seconds, 60);
  assert_string_equal(em_msg_kind_name(EM_MSG_PROFILE), "profile");
  assert_string_equal(em_profile_frame_kind_name(EM_FRAME_PYTHON), "python");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(vectors_match_the_golden_files),
      cmocka_unit_test(decoded_fields_are_those_encoded),
      cmocka_unit_test(each_bad_profile_gets_its_own_code),
      cmocka_unit_test(the_decoder_refuses_what_the_encoder_refuses),
      cmocka_unit_test(limits_hold_one_past),
      cmocka_unit_test(fit_leaves_out_the_fewest_samples_and_counts_them),
      cmocka_unit_test(historical_form_decodes_as_historical),
      cmocka_unit_test(cmd_profile_and_birth_profiler_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
