/*
 * gen_wire_vectors.c - writes the golden vectors of the board-local wire records into the
 * directory given as argv[1] (proto/vectors/wire in the repository): for each row below, a
 * <name>.bin made with the wire.h pack functions and a <name>.json holding the fields a decoder
 * must read back from it. tests/unit/test_wire.c checks the .bin files against its own copy of
 * these rows; tests/interop/test_wire_vectors.py decodes them independently, from WIRE.md.
 *
 * Usage: gen_wire_vectors OUTDIR. Exit status 0 when every file was written, 1 otherwise.
 * The output is deterministic: running it twice gives the same bytes.
 */
#include "edgemon/wire.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *name;
  em_span_t span;
} span_row_t;

typedef struct {
  const char *name;
  em_state_record_t rec;
  uint32_t agent_pid;
  int is_page; /* 0: level push datagram; 1: state page after one write (seq 2). */
} state_row_t;

static const span_row_t span_rows[] = {
    {"span", {EM_DGRAM_SPAN, 4242, 1001, 123456789012345u, 8250000, "infer"}},
    {"heartbeat", {EM_DGRAM_HEARTBEAT, 4242, 0, 123456800000000u, 0, "camera.rx"}},
    {"subscribe", {EM_DGRAM_SUBSCRIBE, 4242, 0, 123456900000000u, 0, ""}},
    {"unsubscribe", {EM_DGRAM_UNSUBSCRIBE, 4242, 0, 123457000000000u, 0, ""}},
    {"span_max_stage",
     {EM_DGRAM_SPAN, UINT32_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX,
      "Stage_0123456789.abcdefghi:XY-z"}},
};

static const state_row_t state_rows[] = {
    {"push",
     {EM_LEVEL_DEGRADED, EM_LEVEL_NOMINAL, 3, 5000000000123u, 1718000000123456789u, 41.5, 33.0,
      "infer.p99", "infer", "p99 41.5 ms > 33 ms budget for 3 windows"},
     777,
     0},
    {"push_recovered",
     {EM_LEVEL_NOMINAL, EM_LEVEL_WARN, 4, 9000000000000u, 1718000004000000000u, NAN, NAN, "", "",
      ""},
     777,
     0},
    {"push_max_fields",
     {EM_LEVEL_CRITICAL, EM_LEVEL_CRITICAL, UINT32_MAX, UINT64_MAX, UINT64_MAX, 1e-300, 0.1,
      " !\"#$%&'()*+,-./0123456789:;<=>", "Stage_0123456789.abcdefghi:XY-z",
      "?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~ "
      "the quick brown fox jumps over the lazy dog; printable ASCII 135 bytes"},
     UINT32_MAX,
     0},
    {"page",
     {EM_LEVEL_CRITICAL, EM_LEVEL_DEGRADED, 5, 7000000000000u, 1718000002000000000u, NAN,
      2000000000.0, "preprocess.alive", "preprocess",
      "stall: no span from stage preprocess for 2000 ms"},
     777,
     1},
};

static const char *level_name(em_level_t level) {
  static const char *const names[] = {"NOMINAL", "WARN", "DEGRADED", "CRITICAL"};
  if (level < EM_LEVEL_NOMINAL || level > EM_LEVEL_CRITICAL) {
    return "NONE";
  }
  return names[level];
}

static const char *kind_name(em_dgram_kind_t kind) {
  switch (kind) {
  case EM_DGRAM_SPAN:
    return "span";
  case EM_DGRAM_HEARTBEAT:
    return "heartbeat";
  case EM_DGRAM_SUBSCRIBE:
    return "subscribe";
  case EM_DGRAM_UNSUBSCRIBE:
    return "unsubscribe";
  case EM_DGRAM_LEVEL_PUSH:
    return "level_push";
  }
  return "unknown";
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

/* Writes the expected fields of a span row to dir/<name>.json. */
static int span_json(const char *dir, const span_row_t *row) {
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
static int state_json(const char *dir, const state_row_t *row, uint32_t seq) {
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

static int gen_span(const char *dir, const span_row_t *row) {
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
static int gen_state(const char *dir, const state_row_t *row) {
  uint8_t push[EM_PUSH_DGRAM_BYTES];
  uint32_t seq = 0;
  const uint8_t *bytes = push;
  size_t n = sizeof push;
  uint8_t *page = aligned_alloc(8, EM_STATE_PAGE_BYTES);
  if (page == NULL) {
    perror("aligned_alloc");
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

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  const char *dir = argv[1];
  int failures = 0;
  for (size_t i = 0; i < sizeof span_rows / sizeof span_rows[0]; i++) {
    failures += gen_span(dir, &span_rows[i]) != 0;
  }
  for (size_t i = 0; i < sizeof state_rows / sizeof state_rows[0]; i++) {
    failures += gen_state(dir, &state_rows[i]) != 0;
  }
  return failures == 0 ? 0 : 1;
}
