/*
 * profile_pprof.c - the pprof profile.proto writer (see profile_pprof.h).
 *
 * Field numbers from pprof's proto/profile.proto. Strings are interned into the string table
 * through an open-addressing hash of indices (FNV-1a), sized once for every string the
 * profile can name; the table itself is written last (a protobuf message's fields may come in
 * any order, and readers index the table after reading the whole message). Repeated integers
 * are written unpacked, which every protobuf reader accepts for packed fields too.
 */
#define _POSIX_C_SOURCE 200809L
#include "profile_pprof.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Profile */
#define P_SAMPLE_TYPE         1
#define P_SAMPLE              2
#define P_LOCATION            4
#define P_FUNCTION            5
#define P_STRING_TABLE        6
#define P_TIME_NANOS          9
#define P_DURATION_NANOS      10
#define P_PERIOD_TYPE         11
#define P_PERIOD              12
#define P_COMMENT             13
#define P_DEFAULT_SAMPLE_TYPE 14
/* ValueType */
#define VT_TYPE 1
#define VT_UNIT 2
/* Sample */
#define S_LOCATION_ID 1
#define S_VALUE       2
#define S_LABEL       3
/* Label */
#define L_KEY 1
#define L_STR 2
/* Location */
#define LOC_ID   1
#define LOC_LINE 4
/* Line */
#define LINE_FUNCTION_ID 1
#define LINE_LINE        2
/* Function */
#define F_ID          1
#define F_NAME        2
#define F_SYSTEM_NAME 3
#define F_FILENAME    4

#define MAX_COMMENTS (EM_PROFILE_MAX_NOTES + 3)
#define COMMENT_LEN  600

/* The string table: texts (borrowed, or in `own`) and their hash slots. */
typedef struct {
  const char **text;
  size_t n, cap;
  uint32_t *slot; /* Index + 1 into text; 0 empty. */
  size_t slots;   /* A power of two, at least twice cap. */
  char (*own)[COMMENT_LEN];
  size_t n_own;
  char *files; /* Python frames' file names, cut from "file.py:LINE", n_frames * 256 bytes. */
} strtab_t;

static uint64_t fnv(const char *s, size_t len) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < len; i++) {
    h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  }
  return h;
}

/* The index of s (NULL: ""), added when new; -1 when the table is full. */
static int64_t intern(strtab_t *t, const char *s) {
  s = s ? s : "";
  size_t len = strlen(s);
  size_t i = (size_t)fnv(s, len) & (t->slots - 1);
  while (t->slot[i] != 0) {
    if (strcmp(t->text[t->slot[i] - 1], s) == 0) {
      return (int64_t)t->slot[i] - 1;
    }
    i = (i + 1) & (t->slots - 1);
  }
  if (t->n == t->cap) {
    return -1;
  }
  t->text[t->n++] = s;
  t->slot[i] = (uint32_t)t->n;
  return (int64_t)t->n - 1;
}

/* A comment formatted into the table's own storage; its index, or -1. */
static int64_t intern_own(strtab_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int64_t intern_own(strtab_t *t, const char *fmt, ...) {
  if (t->n_own == MAX_COMMENTS) {
    return -1;
  }
  char *buf = t->own[t->n_own++];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, COMMENT_LEN, fmt, ap);
  va_end(ap);
  return intern(t, buf);
}

static int strtab_init(strtab_t *t, const em_profile_t *p) {
  memset(t, 0, sizeof(*t));
  t->cap = 16 + MAX_COMMENTS + p->n_stages + p->n_notes + 3 * p->n_frames;
  t->slots = 64;
  while (t->slots < 2 * t->cap) {
    t->slots *= 2;
  }
  t->text = malloc(t->cap * sizeof(*t->text));
  t->slot = calloc(t->slots, sizeof(*t->slot));
  t->own = malloc(MAX_COMMENTS * sizeof(*t->own));
  t->files = malloc(p->n_frames * 256 + 1);
  if (!t->text || !t->slot || !t->own || !t->files) {
    return -ENOMEM;
  }
  return intern(t, "") == 0 ? 0 : -ENOMEM;
}

static void strtab_free(strtab_t *t) {
  free(t->text);
  free(t->slot);
  free(t->own);
  free(t->files);
}

uint64_t em_profile_pprof_period_ns(uint32_t hz) {
  return hz == 0 ? 0 : (1000000000ull + hz / 2) / hz;
}

/* For "file.py:LINE": the line, with the file name copied into file (256 bytes); else 0. */
static int64_t split_line(const char *module, char *file) {
  const char *colon = module ? strrchr(module, ':') : NULL;
  if (!colon || colon == module || !colon[1] ||
      strspn(colon + 1, "0123456789") != strlen(colon + 1) || strlen(colon + 1) > 9) {
    return 0;
  }
  size_t n = (size_t)(colon - module);
  n = n > 255 ? 255 : n;
  memcpy(file, module, n);
  file[n] = '\0';
  return strtoll(colon + 1, NULL, 10);
}

static void value_type(em_pb_t *pb, uint32_t field, int64_t type, int64_t unit) {
  em_pb_begin(pb, field);
  em_pb_int(pb, VT_TYPE, type);
  em_pb_int(pb, VT_UNIT, unit);
  em_pb_end(pb);
}

/* Interns what the frames name and writes a Function and a Location per frame; system: the
 * names as the binaries hold them (the profile's own frames when NULL). */
static int frames(em_pb_t *pb, strtab_t *t, const em_profile_t *p,
                  const em_profile_frame_t *system) {
  for (size_t i = 0; i < p->n_frames; i++) {
    const em_profile_frame_t *f = &p->frames[i];
    char *file = t->files + i * 256;
    int64_t line = f->kind == EM_FRAME_PYTHON ? split_line(f->module, file) : 0;
    const char *filename = line > 0                     ? file
                           : f->module                  ? f->module
                           : f->kind == EM_FRAME_KERNEL ? "[kernel]"
                                                        : "";
    int64_t name = intern(t, f->name);
    int64_t sys = system ? intern(t, system[i].name) : name;
    int64_t fname = intern(t, filename);
    if (name < 0 || sys < 0 || fname < 0) {
      return -ENOMEM;
    }
    uint64_t id = (uint64_t)i + 1;
    em_pb_begin(pb, P_FUNCTION);
    em_pb_uint(pb, F_ID, id);
    em_pb_int(pb, F_NAME, name);
    em_pb_int(pb, F_SYSTEM_NAME, sys);
    em_pb_int(pb, F_FILENAME, fname);
    em_pb_end(pb);
    em_pb_begin(pb, P_LOCATION);
    em_pb_uint(pb, LOC_ID, id);
    em_pb_begin(pb, LOC_LINE);
    em_pb_uint(pb, LINE_FUNCTION_ID, id);
    if (line > 0) {
      em_pb_int(pb, LINE_LINE, line);
    }
    em_pb_end(pb);
    em_pb_end(pb);
  }
  return em_pb_error(pb);
}

static int samples(em_pb_t *pb, strtab_t *t, const em_profile_t *p, int64_t stage_key) {
  uint64_t period = em_profile_pprof_period_ns(p->hz);
  for (size_t i = 0; i < p->n_stacks; i++) {
    const em_profile_stack_t *s = &p->stacks[i];
    em_pb_begin(pb, P_SAMPLE);
    for (size_t k = s->n_frames; k > 0; k--) { /* Leaf first. */
      em_pb_uint(pb, S_LOCATION_ID, (uint64_t)s->frames[k - 1] + 1);
    }
    em_pb_int(pb, S_VALUE, (int64_t)s->samples);
    em_pb_int(pb, S_VALUE, (int64_t)(s->samples * period));
    em_pb_int(pb, S_VALUE, (int64_t)s->off_cpu_ns);
    if (s->stage < p->n_stages) {
      int64_t v = intern(t, p->stages[s->stage]);
      if (v < 0) {
        return -ENOMEM;
      }
      em_pb_begin(pb, S_LABEL);
      em_pb_int(pb, L_KEY, stage_key);
      em_pb_int(pb, L_STR, v);
      em_pb_end(pb);
    }
    em_pb_end(pb);
  }
  return em_pb_error(pb);
}

static int comments(em_pb_t *pb, strtab_t *t, const em_profile_t *p) {
  const em_profile_trigger_t *tr = &p->trigger;
  char from[48] = "";
  if (tr->cause == EM_PROFILE_ESCALATION && tr->prev_level != EM_LEVEL_NONE) {
    snprintf(from, sizeof(from), " from %s", em_level_name(tr->prev_level));
  }
  int64_t c[MAX_COMMENTS];
  size_t n = 0;
  c[n++] =
      intern_own(t, "edgemon profile #%u, trigger: %s, level %s%s%s%s%s%s%s%s", (unsigned)p->number,
                 em_profile_cause_name(tr->cause), em_level_name(tr->level), from,
                 tr->rule ? ", rule " : "", tr->rule ? tr->rule : "", tr->stage ? ", stage " : "",
                 tr->stage ? tr->stage : "", tr->reason ? ": " : "", tr->reason ? tr->reason : "");
  c[n++] =
      intern_own(t, "sampled %s at %u Hz: %llu samples, %llu lost%s", p->clock ? p->clock : "?",
                 (unsigned)p->hz, (unsigned long long)p->samples, (unsigned long long)p->lost,
                 p->historical ? " (replayed from the spool)" : "");
  for (size_t i = 0; i < p->n_notes && n < MAX_COMMENTS - 1; i++) {
    c[n++] = intern(t, p->notes[i]);
  }
  if (p->truncated.stacks_cut > 0 || p->truncated.samples_cut > 0) {
    c[n++] = intern_own(t, "truncated: %llu stacks with %llu samples left out by the size cap",
                        (unsigned long long)p->truncated.stacks_cut,
                        (unsigned long long)p->truncated.samples_cut);
  }
  for (size_t i = 0; i < n; i++) {
    if (c[i] < 0) {
      return -ENOMEM;
    }
    em_pb_int(pb, P_COMMENT, c[i]);
  }
  return em_pb_error(pb);
}

int em_profile_pprof(em_pb_t *pb, const em_profile_t *p, const em_profile_frame_t *system) {
  if (!pb || !p || (p->n_frames > 0 && !p->frames) || (p->n_stacks > 0 && !p->stacks)) {
    return -EINVAL;
  }
  strtab_t t;
  int rc = strtab_init(&t, p);
  if (rc != 0) {
    strtab_free(&t);
    return rc;
  }
  int64_t s_samples = intern(&t, "samples");
  int64_t s_count = intern(&t, "count");
  int64_t s_cpu = intern(&t, "cpu");
  int64_t s_ns = intern(&t, "nanoseconds");
  int64_t s_off = intern(&t, "off_cpu");
  int64_t s_stage = intern(&t, "stage");
  value_type(pb, P_SAMPLE_TYPE, s_samples, s_count);
  value_type(pb, P_SAMPLE_TYPE, s_cpu, s_ns);
  value_type(pb, P_SAMPLE_TYPE, s_off, s_ns);
  rc = frames(pb, &t, p, system);
  if (rc == 0) {
    rc = samples(pb, &t, p, s_stage);
  }
  if (rc == 0) {
    em_pb_int(pb, P_TIME_NANOS, (int64_t)p->head.time_ns);
    em_pb_int(pb, P_DURATION_NANOS, (int64_t)p->duration_ns);
    value_type(pb, P_PERIOD_TYPE, s_cpu, s_ns);
    em_pb_int(pb, P_PERIOD, (int64_t)em_profile_pprof_period_ns(p->hz));
    rc = comments(pb, &t, p);
  }
  if (rc == 0) {
    em_pb_int(pb, P_DEFAULT_SAMPLE_TYPE, s_cpu);
    for (size_t i = 0; i < t.n; i++) {
      em_pb_string(pb, P_STRING_TABLE, t.text[i]);
    }
    rc = em_pb_error(pb);
  }
  strtab_free(&t);
  return rc;
}
