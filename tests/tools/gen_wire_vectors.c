/*
 * gen_wire_vectors.c - writes the golden vectors of the board-local wire records into the
 * directory given as argv[1] (proto/vectors/wire in the repository): for each row below, a
 * <name>.bin made with the wire.h pack functions and a <name>.json holding the fields a decoder
 * must read back from it. tests/unit/test_wire.c checks the .bin files against the same rows
 * (wire_vectors.c); tests/interop/test_wire_vectors.py decodes them independently, from WIRE.md.
 *
 * The span ring v2 rows (ring.h) are a ring header, a whole ring with three slots written, the
 * three v2 datagrams and a deadline page with two entries, each made with the ring.h functions.
 * The model datagram v2 rows are made with em_model_dgram_pack(); profile_page (a request page
 * for window 3) with em_profile_page_pack(); pystacks (5 frame texts, one of them UTF-8, and 3
 * samples of 2 threads) with em_pystacks_pack().
 *
 * Usage: gen_wire_vectors OUTDIR. Exit status 0 when every file was written, 1 otherwise.
 * The output is deterministic: running it twice gives the same bytes.
 */
#include "edgemon/ring.h"
#include "edgemon/wire.h"
#include "wire_vectors.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *level_name(em_level_t level) {
  static const char *const names[] = {"NOMINAL", "WARN", "DEGRADED", "CRITICAL"};
  if (level < EM_LEVEL_NOMINAL || level > EM_LEVEL_CRITICAL) {
    return "NONE";
  }
  return names[level];
}

/* The name of a datagram kind, the v1 ones (wire.h) and the rings' (ring.h) alike. */
static const char *kind_name(unsigned kind) {
  static const char *const names[] = {
      [EM_DGRAM_SPAN] = "span",
      [EM_DGRAM_HEARTBEAT] = "heartbeat",
      [EM_DGRAM_SUBSCRIBE] = "subscribe",
      [EM_DGRAM_UNSUBSCRIBE] = "unsubscribe",
      [EM_DGRAM_LEVEL_PUSH] = "level_push",
      [EM_DGRAM_RING_REGISTER] = "ring_register",
      [EM_DGRAM_HARD_MISS] = "hard_miss",
      [EM_DGRAM_RING_ACK] = "ring_ack",
  };
  if (kind >= sizeof names / sizeof names[0] || names[kind] == NULL) {
    return "unknown";
  }
  return names[kind];
}

/* Writes s as a JSON string; wire text is printable ASCII, so only " and \ need escapes. */
static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s != '\0'; s++) {
    if (*s == '"' || *s == '\\') {
      fputc('\\', f);
    }
    fputc(*s, f);
  }
  fputc('"', f);
}

/* Writes v as the shortest decimal that reads back to the same double, or null for NaN. */
static void json_double(FILE *f, double v) {
  if (isnan(v)) {
    fputs("null", f);
    return;
  }
  char text[40];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(text, sizeof text, "%.*g", prec, v);
    if (strtod(text, NULL) == v) {
      break;
    }
  }
  fputs(text, f);
}

/* Opens dir/name.ext for writing; NULL (message on stderr) on failure. */
static FILE *open_out(const char *dir, const char *name, const char *ext) {
  char path[4096];
  int len = snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
  if (len < 0 || (size_t)len >= sizeof path) {
    fprintf(stderr, "gen_wire_vectors: path too long for %s\n", name);
    return NULL;
  }
  FILE *f = fopen(path, "wb");
  if (f == NULL) {
    perror(path);
  }
  return f;
}

/* Closes f. Returns 0, or -1 (message on stderr) when any write to it failed. */
static int close_out(FILE *f, const char *name) {
  int failed = ferror(f);
  if (fclose(f) != 0 || failed) {
    fprintf(stderr, "gen_wire_vectors: writing %s failed\n", name);
    return -1;
  }
  return 0;
}

static int write_bin(const char *dir, const char *name, const uint8_t *data, size_t n) {
  FILE *f = open_out(dir, name, "bin");
  if (f == NULL) {
    return -1;
  }
  fwrite(data, 1, n, f);
  return close_out(f, name);
}

/*
 * When the step that made the bytes succeeded (rc 0), writes dir/<name>.bin (n bytes of data)
 * and opens dir/<name>.json for the expected fields. Returns the open .json, or NULL (message
 * on stderr, naming `step` when rc is an error) when anything failed.
 */
static FILE *open_vector(const char *dir, const char *name, int rc, const char *step,
                         const uint8_t *data, size_t n) {
  if (rc != 0) {
    fprintf(stderr, "gen_wire_vectors: %s: %s failed (%d)\n", name, step, rc);
    return NULL;
  }
  if (write_bin(dir, name, data, n) != 0) {
    return NULL;
  }
  return open_out(dir, name, "json");
}

/* n zeroed bytes aligned for the pages' and rings' 8-byte fields (free()), or NULL. */
static uint8_t *zeroed(size_t n) {
  uint8_t *mem = aligned_alloc(8, n);
  if (mem == NULL) {
    perror("aligned_alloc");
    return NULL;
  }
  memset(mem, 0, n);
  return mem;
}

/* Writes the expected fields of a span row to dir/<name>.json. */
static int span_json(const char *dir, const em_wire_span_vector_t *row) {
  FILE *f = open_out(dir, row->name, "json");
  if (f == NULL) {
    return -1;
  }
  const em_span_t *s = &row->span;
  fprintf(f, "{\"kind\": \"%s\", \"pid\": %lu, \"frame_id\": %llu, \"start_ns\": %llu, ",
          kind_name(s->kind), (unsigned long)s->pid, (unsigned long long)s->frame_id,
          (unsigned long long)s->start_ns);
  fprintf(f, "\"duration_ns\": %llu, \"stage\": ", (unsigned long long)s->duration_ns);
  json_string(f, s->stage);
  fputs("}\n", f);
  return close_out(f, row->name);
}

/* Writes the expected fields of a push or page row to dir/<name>.json. */
static int state_json(const char *dir, const em_wire_state_vector_t *row, uint32_t seq) {
  FILE *f = open_out(dir, row->name, "json");
  if (f == NULL) {
    return -1;
  }
  const em_state_record_t *r = &row->rec;
  fprintf(f, "{\"kind\": \"%s\", \"level\": \"%s\", \"prev_level\": \"%s\", \"changes\": %lu, ",
          row->is_page ? "state_page" : "level_push", level_name(r->level),
          level_name(r->prev_level), (unsigned long)r->changes);
  fprintf(f, "\"since_mono_ns\": %llu, \"since_wall_ns\": %llu, \"value\": ",
          (unsigned long long)r->since_mono_ns, (unsigned long long)r->since_wall_ns);
  json_double(f, r->value);
  fputs(", \"bound\": ", f);
  json_double(f, r->bound);
  fputs(", \"rule\": ", f);
  json_string(f, r->rule);
  fputs(", \"stage\": ", f);
  json_string(f, r->stage);
  fputs(", \"reason\": ", f);
  json_string(f, r->reason);
  fprintf(f, ", \"agent_pid\": %lu", (unsigned long)row->agent_pid);
  if (row->is_page) {
    fprintf(f, ", \"seq\": %lu", (unsigned long)seq);
  }
  fputs("}\n", f);
  return close_out(f, row->name);
}

static int gen_span(const char *dir, const em_wire_span_vector_t *row) {
  uint8_t buf[EM_SPAN_DGRAM_BYTES];
  int rc = em_span_pack(&row->span, buf);
  if (rc != 0) {
    fprintf(stderr, "gen_wire_vectors: %s: pack failed (%d)\n", row->name, rc);
    return -1;
  }
  if (write_bin(dir, row->name, buf, sizeof buf) != 0) {
    return -1;
  }
  return span_json(dir, row);
}

/*
 * A push is one em_push_pack(). A page is em_state_page_init() with a NOMINAL record, then
 * one em_state_page_write() of the row, so its counter is 2.
 */
static int gen_state(const char *dir, const em_wire_state_vector_t *row) {
  uint8_t push[EM_PUSH_DGRAM_BYTES];
  uint32_t seq = 0;
  const uint8_t *bytes = push;
  size_t n = sizeof push;
  uint8_t *page = zeroed(EM_STATE_PAGE_BYTES);
  if (page == NULL) {
    return -1;
  }
  int rc;
  if (row->is_page) {
    em_state_record_t initial = {.level = EM_LEVEL_NOMINAL,
                                 .prev_level = EM_LEVEL_NOMINAL,
                                 .value = NAN,
                                 .bound = NAN,
                                 .reason = "agent started"};
    rc = em_state_page_init(page, row->agent_pid, &initial);
    if (rc == 0) {
      rc = em_state_page_write(page, &row->rec);
    }
    seq = 2;
    bytes = page;
    n = EM_STATE_PAGE_BYTES;
  } else {
    rc = em_push_pack(&row->rec, row->agent_pid, push);
  }
  int result = -1;
  if (rc != 0) {
    fprintf(stderr, "gen_wire_vectors: %s: pack failed (%d)\n", row->name, rc);
    goto out;
  }
  if (write_bin(dir, row->name, bytes, n) != 0) {
    goto out;
  }
  result = state_json(dir, row, seq);
out:
  free(page);
  return result;
}

/* ---- Span ring v2 rows ---- */

#define RING_PID        4242u
#define RING_TID        4243u
#define RING_START_TIME 987654u
#define AGENT_PID       777u

/* The three slots of the `ring_3_slots` vector, positions 0, 1 and 2. */
static const em_span_t ring_slot_rows[] = {
    {EM_DGRAM_SPAN, RING_PID, 1001, 123456789012345u, 8250000, "infer"},
    {EM_DGRAM_HEARTBEAT, RING_PID, 0, 123456800000000u, 0, "camera.rx"},
    {EM_DGRAM_SPAN, RING_PID, UINT64_MAX, UINT64_MAX, UINT64_MAX,
     "Stage_0123456789.abcdefghi:XY-z"},
};

typedef struct {
  const char *name;
  em_ring_dgram_t dgram;
} ring_dgram_row_t;

static const ring_dgram_row_t ring_dgram_rows[] = {
    {"ring_register", {.kind = EM_DGRAM_RING_REGISTER, .pid = RING_PID, .start = 3}},
    {"ring_hard_miss",
     {.kind = EM_DGRAM_HARD_MISS,
      .pid = RING_PID,
      .span = {EM_DGRAM_SPAN, RING_PID, 1002, 123456822000000u, 41000000, "infer"}}},
    {"ring_ack",
     {.kind = EM_DGRAM_RING_ACK, .pid = AGENT_PID, .start = 3, .status = 0, .ring_id = 1}},
    {"ring_ack_refused",
     {.kind = EM_DGRAM_RING_ACK, .pid = AGENT_PID, .start = 3, .status = -24, .ring_id = 0}},
};

static const em_deadline_t deadline_rows[] = {
    {"infer", 33000000u},
    {"camera.rx", 100000000u},
};

/* The header fields of a ring, as the Python decoder returns them. */
static void ring_header_json(FILE *f, const em_ring_header_t *h) {
  fprintf(f, "\"slot_count\": %lu, \"pid\": %lu, \"tid\": %lu, \"start_time\": %llu, ",
          (unsigned long)h->slot_count, (unsigned long)h->pid, (unsigned long)h->tid,
          (unsigned long long)h->start_time);
  fprintf(f, "\"head\": %llu, \"lost\": %llu, \"state\": \"%s\"", (unsigned long long)h->head,
          (unsigned long long)h->lost, h->state == EM_RING_STATE_CLOSED ? "closed" : "open");
}

static void span_fields_json(FILE *f, const em_span_t *s) {
  fprintf(f, "\"frame_id\": %llu, \"start_ns\": %llu, \"duration_ns\": %llu, \"stage\": ",
          (unsigned long long)s->frame_id, (unsigned long long)s->start_ns,
          (unsigned long long)s->duration_ns);
  json_string(f, s->stage);
}

/*
 * `ring_header`: the 128-byte header of a fresh default ring (1024 slots, head 0, open).
 * `ring_3_slots`: a whole 64-slot ring (4224 bytes) after three em_ring_write()s, head 3.
 */
static int gen_rings(const char *dir) {
  int result = -1;
  FILE *f = NULL;
  uint8_t *mem = zeroed(em_ring_bytes(EM_RING_DEFAULT_SLOTS));
  if (mem == NULL) {
    return -1;
  }
  em_ring_header_t h;
  int rc = em_ring_init(mem, EM_RING_DEFAULT_SLOTS, RING_PID, RING_TID, RING_START_TIME);
  if (rc == 0) {
    rc = em_ring_header_read(mem, em_ring_bytes(EM_RING_DEFAULT_SLOTS), &h);
  }
  f = open_vector(dir, "ring_header", rc, "init", mem, EM_RING_HEADER_BYTES);
  if (f == NULL) {
    goto out;
  }
  fputs("{\"kind\": \"ring_header\", ", f);
  ring_header_json(f, &h);
  fputs("}\n", f);
  if (close_out(f, "ring_header") != 0) {
    goto out;
  }

  const uint32_t slots = EM_RING_MIN_SLOTS;
  memset(mem, 0, em_ring_bytes(slots));
  uint64_t pos = 0;
  rc = em_ring_init(mem, slots, RING_PID, RING_TID, RING_START_TIME);
  for (size_t i = 0; rc == 0 && i < sizeof ring_slot_rows / sizeof ring_slot_rows[0]; i++) {
    rc = em_ring_write(mem, slots, &pos, &ring_slot_rows[i]);
  }
  if (rc == 0) {
    rc = em_ring_header_read(mem, em_ring_bytes(slots), &h);
  }
  f = open_vector(dir, "ring_3_slots", rc, "write", mem, em_ring_bytes(slots));
  if (f == NULL) {
    goto out;
  }
  fputs("{\"kind\": \"ring\", ", f);
  ring_header_json(f, &h);
  fputs(", \"slots\": [", f);
  for (size_t i = 0; i < sizeof ring_slot_rows / sizeof ring_slot_rows[0]; i++) {
    const em_span_t *s = &ring_slot_rows[i];
    fprintf(f, "%s{\"position\": %zu, \"seq\": %zu, \"kind\": \"%s\", ", i == 0 ? "" : ", ", i,
            i + 1, kind_name(s->kind));
    span_fields_json(f, s);
    fputs("}", f);
  }
  fputs("]}\n", f);
  result = close_out(f, "ring_3_slots");
out:
  free(mem);
  return result;
}

static int gen_ring_dgram(const char *dir, const ring_dgram_row_t *row) {
  uint8_t buf[EM_SPAN_DGRAM_BYTES];
  int rc = em_ring_dgram_pack(&row->dgram, buf);
  FILE *f = open_vector(dir, row->name, rc, "pack", buf, sizeof buf);
  if (f == NULL) {
    return -1;
  }
  const em_ring_dgram_t *d = &row->dgram;
  fprintf(f, "{\"kind\": \"%s\", \"pid\": %lu, ", kind_name(d->kind), (unsigned long)d->pid);
  switch (d->kind) {
  case EM_DGRAM_RING_REGISTER:
    fprintf(f, "\"start\": %llu", (unsigned long long)d->start);
    break;
  case EM_DGRAM_HARD_MISS:
    span_fields_json(f, &d->span);
    break;
  default:
    fprintf(f, "\"start\": %llu, \"status\": %lld, \"ring_id\": %llu", (unsigned long long)d->start,
            (long long)d->status, (unsigned long long)d->ring_id);
    break;
  }
  fputs("}\n", f);
  return close_out(f, row->name);
}

/* A model datagram row (wire_vectors.c): <name>.bin packed from it, <name>.json its pid,
 * generation, name, version and labels as [key, value] pairs. */
static int gen_model(const char *dir, const em_wire_model_vector_t *row) {
  uint8_t buf[EM_MODEL_DGRAM_BYTES];
  int rc = em_model_dgram_pack(&row->model, row->pid, row->generation, buf);
  FILE *f = open_vector(dir, row->name, rc, "pack", buf, sizeof buf);
  if (f == NULL) {
    return -1;
  }
  fprintf(f, "{\"kind\": \"model\", \"pid\": %lu, \"generation\": %lu, \"name\": ",
          (unsigned long)row->pid, (unsigned long)row->generation);
  json_string(f, row->model.name);
  fputs(", \"version\": ", f);
  json_string(f, row->model.version);
  fputs(", \"labels\": [", f);
  for (size_t i = 0; i < row->model.n_labels; i++) {
    fputs(i == 0 ? "[" : ", [", f);
    json_string(f, row->model.labels[i].key);
    fputs(", ", f);
    json_string(f, row->model.labels[i].value);
    fputs("]", f);
  }
  fputs("]}\n", f);
  return close_out(f, row->name);
}

/* `deadline_page`: em_deadline_page_init() then one write of two entries (seq 2). */
static int gen_deadline_page(const char *dir) {
  int result = -1;
  FILE *f = NULL;
  uint8_t *page = zeroed(EM_DEADLINE_PAGE_BYTES);
  if (page == NULL) {
    return -1;
  }
  const size_t n = sizeof deadline_rows / sizeof deadline_rows[0];
  int rc = em_deadline_page_init(page, AGENT_PID, EM_RING_DEFAULT_SLOTS);
  if (rc == 0) {
    rc = em_deadline_page_write(page, deadline_rows, n);
  }
  f = open_vector(dir, "deadline_page", rc, "write", page, EM_DEADLINE_PAGE_BYTES);
  if (f == NULL) {
    goto out;
  }
  fprintf(f, "{\"kind\": \"deadline_page\", \"seq\": 2, \"agent_pid\": %lu, \"ring_slots\": %lu, ",
          (unsigned long)AGENT_PID, (unsigned long)EM_RING_DEFAULT_SLOTS);
  fputs("\"entries\": [", f);
  for (size_t i = 0; i < n; i++) {
    fprintf(f, "%s{\"stage\": ", i == 0 ? "" : ", ");
    json_string(f, deadline_rows[i].stage);
    fprintf(f, ", \"deadline_ns\": %llu}", (unsigned long long)deadline_rows[i].deadline_ns);
  }
  fputs("]}\n", f);
  result = close_out(f, "deadline_page");
out:
  free(page);
  return result;
}

/* ---- Profile request page v1 and Python stacks datagram v2 ---- */

static int gen_profile_page(const char *dir) {
  const em_profile_page_t pg = {
      .window = 3, .hz = 99, .start_ns = 1000000000ull, .end_ns = 3000000000ull};
  uint8_t buf[EM_PROFILE_PAGE_BYTES];
  if (em_profile_page_pack(&pg, buf) != 0 || write_bin(dir, "profile_page", buf, sizeof buf)) {
    fprintf(stderr, "gen_wire_vectors: profile_page failed\n");
    return -1;
  }
  FILE *f = open_out(dir, "profile_page", "json");
  if (f == NULL) {
    return -1;
  }
  fprintf(f,
          "{\"kind\": \"profile_page\", \"window\": %lu, \"hz\": %lu, \"start_ns\": %llu, "
          "\"end_ns\": %llu}\n",
          (unsigned long)pg.window, (unsigned long)pg.hz, (unsigned long long)pg.start_ns,
          (unsigned long long)pg.end_ns);
  return close_out(f, "profile_page");
}

static const char *const pystacks_strings[] = {
    "<module> (/app/serve.py:40)", "main (/app/serve.py:31)", "Model.infer (/app/model.py:12)",
    "slow_checksum (/app/model.py:5)",
    "\xc3\xbc"
    "ber (/app/\xc3\xbc"
    ".py:1)"};

static int gen_pystacks(const char *dir) {
  const em_pysample_t samples[] = {
      {.tid = 4242, .time_ns = 1500000000ull, .depth = 4, .frames = {0, 1, 2, 3}},
      {.tid = 4242, .time_ns = 1510101010ull, .depth = 3, .frames = {0, 1, 2}},
      {.tid = 4250, .time_ns = 1520202020ull, .depth = 2, .frames = {0, 4}},
  };
  uint8_t buf[512];
  size_t len = 0;
  if (em_pystacks_pack(4242, 3, 7, pystacks_strings, 5, samples, 3, buf, sizeof buf, &len) != 0 ||
      write_bin(dir, "pystacks", buf, len)) {
    fprintf(stderr, "gen_wire_vectors: pystacks failed\n");
    return -1;
  }
  FILE *f = open_out(dir, "pystacks", "json");
  if (f == NULL) {
    return -1;
  }
  fputs("{\"kind\": \"pystacks\", \"pid\": 4242, \"window\": 3, \"samples_cut\": 7, \"strings\": [",
        f);
  for (size_t i = 0; i < 5; i++) {
    fputs(i ? ", " : "", f);
    json_string(f, pystacks_strings[i]);
  }
  fputs("], \"samples\": [", f);
  for (size_t i = 0; i < 3; i++) {
    fprintf(f, "%s{\"tid\": %lu, \"time_ns\": %llu, \"frames\": [", i ? ", " : "",
            (unsigned long)samples[i].tid, (unsigned long long)samples[i].time_ns);
    for (size_t k = 0; k < samples[i].depth; k++) {
      fprintf(f, "%s%u", k ? ", " : "", (unsigned)samples[i].frames[k]);
    }
    fputs("]}", f);
  }
  fputs("]}\n", f);
  return close_out(f, "pystacks");
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  const char *dir = argv[1];
  int failures = 0;
  for (size_t i = 0; i < em_wire_span_vector_count; i++) {
    failures += gen_span(dir, &em_wire_span_vectors[i]) != 0;
  }
  for (size_t i = 0; i < em_wire_state_vector_count; i++) {
    failures += gen_state(dir, &em_wire_state_vectors[i]) != 0;
  }
  failures += gen_rings(dir) != 0;
  for (size_t i = 0; i < sizeof ring_dgram_rows / sizeof ring_dgram_rows[0]; i++) {
    failures += gen_ring_dgram(dir, &ring_dgram_rows[i]) != 0;
  }
  failures += gen_deadline_page(dir) != 0;
  for (size_t i = 0; i < em_wire_model_vector_count; i++) {
    failures += gen_model(dir, &em_wire_model_vectors[i]) != 0;
  }
  failures += gen_profile_page(dir) != 0;
  failures += gen_pystacks(dir) != 0;
  return failures == 0 ? 0 : 1;
}
