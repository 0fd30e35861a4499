/*
 * verdict.c - the breach's verdict (edgemon/proto.h em_proto_verdict_t, verdict.h): why a stage got
 * slow, as a state message (key 15) and a flight recording (key 16) carry it. One place holds
 * the verdict's rules beyond its shape (V1..V4 in proto/edgemon.cddl): the decoder's rows and
 * readers refuse what em_proto_verdict_check() refuses, and the encoders run that check before
 * writing. Unknown cause codes are kept as read (a later version may name more causes) and
 * printed as "unknown". Owns nothing, never allocates (decoded verdicts live in the caller's
 * scratch), reentrant.
 */
#include <string.h>

#include "json_items.h"
#include "verdict.h"

static const char *const cause_names[] = {
    [EM_PROTO_CAUSE_CPU_CONTENTION] = "cpu_contention",
    [EM_PROTO_CAUSE_CPU_THROTTLING] = "cpu_throttling",
    [EM_PROTO_CAUSE_FREQUENCY_CAP] = "frequency_cap",
    [EM_PROTO_CAUSE_MEMORY_PRESSURE] = "memory_pressure",
    [EM_PROTO_CAUSE_IO] = "io",
    [EM_PROTO_CAUSE_WAITING] = "waiting",
    [EM_PROTO_CAUSE_MORE_WORK] = "more_work",
    [EM_PROTO_CAUSE_UNEXPLAINED] = "unexplained",
};

#define N_CAUSE_NAMES (sizeof(cause_names) / sizeof(cause_names[0]))

const char *em_proto_verdict_cause_name(uint32_t code) {
  return code < N_CAUSE_NAMES ? cause_names[code] : "unknown";
}

/* --- rows ----------------------------------------------------------------------------- */

static int field_share(em__dec_t *d, const em__field_t *f, void *base);
static int field_evidence(em__dec_t *d, const em__field_t *f, void *base);
static int field_processes(em__dec_t *d, const em__field_t *f, void *base);
static int field_functions(em__dec_t *d, const em__field_t *f, void *base);
static int field_causes(em__dec_t *d, const em__field_t *f, void *base);

static const em__field_t cause_rows[] = {
    EM__UINT(KW_CODE, em_proto_verdict_cause_t, code, 0, UINT32_MAX, REQ),
    EM__FN(KW_SHARE, em_proto_verdict_cause_t, share, field_share, NULL, REQ),
    EM__FN(KW_EVIDENCE, em_proto_verdict_cause_t, evidence, field_evidence, NULL, REQ),
    EM__FN(KW_PROCESSES, em_proto_verdict_cause_t, processes, field_processes, NULL, OPT),
    EM__FN(KW_FUNCTIONS, em_proto_verdict_cause_t, functions, field_functions, NULL, OPT)};
static const em__fields_t cause_fields = EM__TABLE(cause_rows);

static const em__field_t verdict_rows[] = {
    EM__STR(KV_STAGE, em_proto_verdict_t, stage, STR_IDENT, EM_PROTO_MAX_STAGE_BYTES, REQ),
    EM__STR(KV_STATISTIC, em_proto_verdict_t, statistic, STR_NAME, EM_PROTO_MAX_NAME_BYTES, REQ),
    EM__U64(KV_BASELINE, em_proto_verdict_t, baseline_ns, REQ),
    EM__U64(KV_BREACH, em_proto_verdict_t, breach_ns, REQ),
    EM__UINT(KV_WINDOWS, em_proto_verdict_t, nominal_windows, 0, UINT32_MAX, REQ),
    EM__FN(KV_CAUSES, em_proto_verdict_t, causes, field_causes, NULL, REQ)};
static const em__fields_t verdict_fields = EM__TABLE(verdict_rows);

/* --- checks (the encoders' side of V1..V4) -------------------------------------------- */

/* V2: a share is a finite number within 0..1. */
static bool share_ok(double share) {
  return share >= 0.0 && share <= 1.0; /* false for NaN too */
}

/* 0, or the code for text `s` that is not 1..EM_PROTO_MAX_TEXT_BYTES bytes of text. */
static int check_text(const char *s) {
  return em__check_cstr(s, STR_TEXT, EM_PROTO_MAX_TEXT_BYTES);
}

static int check_evidence(const em_proto_verdict_cause_t *c) {
  for (size_t i = 0; i < c->n_evidence; i++) {
    const em_proto_evidence_t *e = &c->evidence[i];
    int rc = em__check_cstr(e->name, STR_NAME, EM_PROTO_MAX_NAME_BYTES);
    if (rc) {
      return rc;
    }
    if (e->value.type == EM_VALUE_ABSENT) {
      return EM_PROTO_ETYPE;
    }
    rc = em__check_value(&e->value);
    if (rc) {
      return rc;
    }
    for (size_t j = 0; j < i; j++) {
      if (strcmp(c->evidence[j].name, e->name) == 0) {
        return EM_PROTO_EDUPLICATE;
      }
    }
  }
  return 0;
}

static int check_cause(const em_proto_verdict_cause_t *c) {
  if (c->n_evidence > EM_PROTO_VERDICT_MAX_EVIDENCE ||
      c->n_processes > EM_PROTO_VERDICT_MAX_PROCESSES ||
      c->n_functions > EM_PROTO_VERDICT_MAX_FUNCTIONS) {
    return EM_PROTO_ELIMIT;
  }
  if (!share_ok(c->share)) {
    return EM_PROTO_ERANGE;
  }
  int rc = check_evidence(c);
  for (size_t i = 0; i < c->n_processes && !rc; i++) {
    rc = check_text(c->processes[i].comm);
    if (!rc && !share_ok(c->processes[i].share)) {
      rc = EM_PROTO_ERANGE;
    }
  }
  for (size_t i = 0; i < c->n_functions && !rc; i++) {
    em_value_t growth = {.type = EM_VALUE_FLOAT, .as.f = c->functions[i].growth};
    rc = check_text(c->functions[i].name);
    if (!rc) {
      rc = em__check_value(&growth);
    }
  }
  return rc;
}

int em_proto_verdict_check(const em_proto_verdict_t *v) {
  if (!v) {
    return EM_PROTO_EINVAL;
  }
  int rc = em__check_strs(&verdict_fields, v);
  if (rc) {
    return rc;
  }
  if (v->n_causes > EM_PROTO_VERDICT_MAX_CAUSES) {
    return EM_PROTO_ELIMIT;
  }
  for (size_t i = 0; i < v->n_causes && !rc; i++) {
    rc = check_cause(&v->causes[i]);
    if (!rc && i > 0 && v->causes[i].share > v->causes[i - 1].share) {
      rc = EM_PROTO_EINCONSISTENT; /* V3: descending share. */
    }
  }
  return rc;
}

/* --- writer --------------------------------------------------------------------------- */

size_t em__verdict_entries(const em_proto_verdict_t *v) {
  return v ? 1u : 0u;
}

static void w_cause(em__writer_t *w, const em_proto_verdict_cause_t *c) {
  em__w_map(w, 3 + (c->n_processes ? 1 : 0) + (c->n_functions ? 1 : 0));
  em__kv_uint(w, KW_CODE, c->code);
  em__w_uint(w, KW_SHARE);
  em__w_float(w, c->share);
  em__w_uint(w, KW_EVIDENCE);
  em__w_map(w, c->n_evidence);
  for (size_t i = 0; i < c->n_evidence; i++) {
    em__w_str(w, c->evidence[i].name);
    em__w_value(w, &c->evidence[i].value);
  }
  if (c->n_processes) {
    em__w_uint(w, KW_PROCESSES);
    em__w_array(w, c->n_processes);
    for (size_t i = 0; i < c->n_processes; i++) {
      em__w_array(w, 3);
      em__w_uint(w, c->processes[i].pid);
      em__w_str(w, c->processes[i].comm);
      em__w_float(w, c->processes[i].share);
    }
  }
  if (c->n_functions) {
    em__w_uint(w, KW_FUNCTIONS);
    em__w_array(w, c->n_functions);
    for (size_t i = 0; i < c->n_functions; i++) {
      em__w_array(w, 2);
      em__w_str(w, c->functions[i].name);
      em__w_float(w, c->functions[i].growth);
    }
  }
}

void em__w_verdict(em__writer_t *w, unsigned key, const em_proto_verdict_t *v) {
  if (!v) {
    return;
  }
  em__w_uint(w, key);
  em__w_map(w, 6);
  em__kv_str(w, KV_STAGE, v->stage);
  em__kv_str(w, KV_STATISTIC, v->statistic);
  em__kv_uint(w, KV_BASELINE, v->baseline_ns);
  em__kv_uint(w, KV_BREACH, v->breach_ns);
  em__kv_uint(w, KV_WINDOWS, v->nominal_windows);
  em__w_uint(w, KV_CAUSES);
  em__w_array(w, v->n_causes);
  for (size_t i = 0; i < v->n_causes; i++) {
    w_cause(w, &v->causes[i]);
  }
}

/* --- reader --------------------------------------------------------------------------- */

/* A number as a double: ERANGE unless finite, and within 0..1 when `share`. */
static int read_number(em__dec_t *d, bool share, double *out) {
  em_value_t v;
  int rc = em__read_value(d, false, &v);
  if (rc) {
    return rc;
  }
  *out = v.type == EM_VALUE_UINT  ? (double)v.as.u
         : v.type == EM_VALUE_INT ? (double)v.as.i
                                  : v.as.f;
  return share && !share_ok(*out) ? EM_PROTO_ERANGE : 0;
}

static int field_share(em__dec_t *d, const em__field_t *f, void *base) {
  (void)f;
  return read_number(d, true, &((em_proto_verdict_cause_t *)base)->share);
}

/* V4: the evidence, a map of at most 16 figures keyed by unique names. */
static int field_evidence(em__dec_t *d, const em__field_t *f, void *base) {
  em_proto_verdict_cause_t *c = base;
  size_t at = d->pos;
  uint64_t n = 0;
  (void)f;
  int rc = em__open_container(d, T_MAP, EM_PROTO_VERDICT_MAX_EVIDENCE, &n);
  for (uint64_t i = 0; i < n && !rc; i++) {
    em_proto_evidence_t *e = &c->evidence[i];
    rc = em__read_str(d, STR_NAME, EM_PROTO_MAX_NAME_BYTES, &e->name);
    if (rc == EM_PROTO_ETYPE) {
      rc = EM_PROTO_EKEY;
    }
    for (uint64_t j = 0; j < i && !rc; j++) {
      if (strcmp(c->evidence[j].name, e->name) == 0) {
        rc = EM_PROTO_EDUPLICATE;
      }
    }
    if (!rc) {
      rc = em__read_value(d, false, &e->value);
    }
  }
  if (rc) {
    if (rc == EM_PROTO_EDUPLICATE) {
      d->item_pos = at;
    }
    return rc;
  }
  em__leave(d);
  c->n_evidence = (size_t)n;
  return 0;
}

/* Reads the items of tuple i of a cause's list (its array is open). */
typedef int (*tuple_fn)(em__dec_t *d, em_proto_verdict_cause_t *c, size_t i);

/*
 * A cause's list of at most `max` tuples, each an array of exactly `items` items (ETYPE
 * otherwise) read by `one`; their count into *n_out.
 */
static int read_tuples(em__dec_t *d, uint64_t max, uint64_t items, tuple_fn one,
                       em_proto_verdict_cause_t *c, size_t *n_out) {
  uint64_t n = 0, k = 0;
  int rc = em__open_container(d, T_ARRAY, max, &n);
  for (uint64_t i = 0; i < n && !rc; i++) {
    rc = em__open_container(d, T_ARRAY, UINT64_MAX, &k);
    if (!rc && k != items) {
      rc = EM_PROTO_ETYPE;
    }
    if (!rc) {
      rc = one(d, c, (size_t)i);
    }
    if (!rc) {
      em__leave(d);
    }
  }
  if (rc) {
    return rc;
  }
  em__leave(d);
  *n_out = (size_t)n;
  return 0;
}

/* [pid, comm, share] */
static int read_process(em__dec_t *d, em_proto_verdict_cause_t *c, size_t i) {
  em_proto_verdict_process_t *p = &c->processes[i];
  uint64_t pid = 0;
  int rc = em__read_uint(d, UINT32_MAX, &pid);
  p->pid = (uint32_t)pid;
  if (!rc) {
    rc = em__read_str(d, STR_TEXT, EM_PROTO_MAX_TEXT_BYTES, &p->comm);
  }
  return rc ? rc : read_number(d, true, &p->share);
}

/* [name, growth] */
static int read_function(em__dec_t *d, em_proto_verdict_cause_t *c, size_t i) {
  em_proto_verdict_function_t *fn = &c->functions[i];
  int rc = em__read_str(d, STR_TEXT, EM_PROTO_MAX_TEXT_BYTES, &fn->name);
  return rc ? rc : read_number(d, false, &fn->growth);
}

static int field_processes(em__dec_t *d, const em__field_t *f, void *base) {
  em_proto_verdict_cause_t *c = base;
  (void)f;
  return read_tuples(d, EM_PROTO_VERDICT_MAX_PROCESSES, 3, read_process, c, &c->n_processes);
}

static int field_functions(em__dec_t *d, const em__field_t *f, void *base) {
  em_proto_verdict_cause_t *c = base;
  (void)f;
  return read_tuples(d, EM_PROTO_VERDICT_MAX_FUNCTIONS, 2, read_function, c, &c->n_functions);
}

/* V1, V3: at most 8 causes, in descending share (EINCONSISTENT at the first out of order). */
static int field_causes(em__dec_t *d, const em__field_t *f, void *base) {
  em_proto_verdict_t *v = base;
  uint64_t n = 0;
  (void)f;
  int rc = em__open_container(d, T_ARRAY, EM_PROTO_VERDICT_MAX_CAUSES, &n);
  for (uint64_t i = 0; i < n && !rc; i++) {
    size_t at = d->pos;
    rc = em__read_map(d, &cause_fields, &v->causes[i], NULL);
    if (!rc && i > 0 && v->causes[i].share > v->causes[i - 1].share) {
      d->item_pos = at;
      rc = EM_PROTO_EINCONSISTENT;
    }
  }
  if (rc) {
    return rc;
  }
  em__leave(d);
  v->n_causes = (size_t)n;
  return 0;
}

int em__field_verdict(em__dec_t *d, const em__field_t *f, void *base) {
  em_proto_verdict_t *v = em__scratch_alloc(d, sizeof(*v));
  if (!v) {
    return EM_PROTO_ESCRATCH;
  }
  memset(v, 0, sizeof(*v));
  memcpy((unsigned char *)base + f->offset, &v, sizeof(v));
  return em__read_map(d, &verdict_fields, v, NULL);
}

/* --- JSON ----------------------------------------------------------------------------- */

static void jkv_double(em__jw_t *w, const char *name, double x) {
  em__jw_key(w, name);
  em_json_double(w, x);
}

static void j_process(em__jw_t *w, const void *cause, size_t i) {
  const em_proto_verdict_process_t *p = &((const em_proto_verdict_cause_t *)cause)->processes[i];
  em__jkv_u64(w, "pid", p->pid);
  em__jkv_str(w, "comm", p->comm);
  jkv_double(w, "share", p->share);
}

static void j_function(em__jw_t *w, const void *cause, size_t i) {
  const em_proto_verdict_function_t *fn = &((const em_proto_verdict_cause_t *)cause)->functions[i];
  em__jkv_str(w, "name", fn->name);
  jkv_double(w, "growth", fn->growth);
}

static void j_cause(em__jw_t *w, const void *verdict, size_t i) {
  const em_proto_verdict_cause_t *c = &((const em_proto_verdict_t *)verdict)->causes[i];
  em__jkv_str(w, "cause", em_proto_verdict_cause_name(c->code));
  if (c->code >= N_CAUSE_NAMES) {
    em__jkv_u64(w, "code", c->code);
  }
  jkv_double(w, "share", c->share);
  em__jw_key(w, "evidence");
  em__jw_open(w, '{');
  for (size_t j = 0; j < c->n_evidence; j++) {
    em__jkv_value(w, c->evidence[j].name, &c->evidence[j].value);
  }
  em__jw_close(w, '}');
  if (c->n_processes) {
    em__jw_objects(w, "processes", c, c->n_processes, j_process);
  }
  if (c->n_functions) {
    em__jw_objects(w, "functions", c, c->n_functions, j_function);
  }
}

void em__jw_verdict(em__jw_t *w, const em_proto_verdict_t *v) {
  if (!v) {
    return;
  }
  em__jw_key(w, "verdict");
  em__jw_open(w, '{');
  em__jkv_str(w, "stage", v->stage);
  em__jkv_str(w, "statistic", v->statistic);
  em__jkv_u64(w, "baseline_ns", v->baseline_ns);
  em__jkv_u64(w, "breach_ns", v->breach_ns);
  em__jkv_u64(w, "nominal_windows", v->nominal_windows);
  em__jw_objects(w, "causes", v, v->n_causes, j_cause);
  em__jw_close(w, '}');
}
