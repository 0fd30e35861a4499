/*
 * forensic_api.c - the forensic blobs' JSON API (see forensic_api.h).
 *
 * A kind is data (kinds[] below): its table, its wording, how its stored CBOR becomes JSON, and
 * its summary fields in list order, each named as its column and its JSON member and written by
 * its type. A list reads those columns through the kind's (device, time_ns) index, newest
 * first, at most `limit` rows, with the link to the other kind's blob as a correlated subquery
 * over the other table's (device, session, number) index: the nearest in time wins (then the
 * lower number), found as the least distance * 2^32 + number (a distance is below 2^30 ns, so
 * this fits in 63 bits; SQLite does not let a subquery's ORDER BY name the outer row). A blob is
 * answered from its stored CBOR, decoded again for the JSON (the store keeps only what decoded, so
 * a failure there is a 500). Bodies are written with open_memstream(): a list is at most
 * EM_QUERY_LIMIT_MAX short objects, a blob's JSON what its to_json says it needs.
 */
#define _POSIX_C_SOURCE 200809L
#include "forensic_api.h"

#include <edgemon/flight.h>
#include <edgemon/json_write.h>
#include <edgemon/profile.h>
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CT_JSON "application/json"
#define CT_CBOR "application/cbor"

static void fail(em_forensic_reply_t *out, unsigned status, const char *msg) {
  em_history_reply_t r = {0, NULL, 0};
  em_history_error(&r, status, msg);
  *out = (em_forensic_reply_t){r.status, r.body, r.len, CT_JSON};
}

/* The store's id of `device`, or -1 when it has none (or the read failed: *rc says). */
static int64_t device_id(sqlite3 *db, const char *device, int *rc) {
  sqlite3_stmt *st = NULL;
  int64_t id = -1;
  *rc = sqlite3_prepare_v2(db, "SELECT id FROM devices WHERE name = ?1", -1, &st, NULL);
  if (*rc == SQLITE_OK) {
    sqlite3_bind_text(st, 1, device, -1, SQLITE_STATIC);
    *rc = sqlite3_step(st);
    if (*rc == SQLITE_ROW) {
      id = sqlite3_column_int64(st, 0);
      *rc = SQLITE_OK;
    } else if (*rc == SQLITE_DONE) {
      *rc = SQLITE_OK;
    }
  }
  sqlite3_finalize(st);
  return id;
}

/* The statement `sql` prepared, with ?1 bound to the store's id of `device`; NULL when there
 * is none, with *out holding the reply: 404 for an unknown device, `interrupted` for a lookup
 * the store interrupted, 500 for any other failed read. The caller finalizes it. */
static sqlite3_stmt *device_query(sqlite3 *db, const char *device, const char *sql,
                                  unsigned interrupted, em_forensic_reply_t *out) {
  int rc;
  int64_t dev = device_id(db, device, &rc);
  if (rc != SQLITE_OK) {
    fail(out, rc == SQLITE_INTERRUPT ? interrupted : 500, "reading the store failed");
    return NULL;
  }
  if (dev < 0) {
    fail(out, 404, "no such device");
    return NULL;
  }
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
    sqlite3_finalize(st);
    fail(out, 500, "reading the store failed");
    return NULL;
  }
  sqlite3_bind_int64(st, 1, dev);
  return st;
}

/* A JSON string, or null for NULL. */
static void put_str(FILE *f, const char *s) {
  if (!s) {
    fputs("null", f);
    return;
  }
  fputc('"', f);
  em_json_escape(s, strlen(s), 0, em_json_file_sink, f);
  fputc('"', f);
}

static const char *col_text(sqlite3_stmt *st, int i) {
  return (const char *)sqlite3_column_text(st, i);
}

static void put_level(FILE *f, sqlite3_stmt *st, int i) {
  if (sqlite3_column_type(st, i) == SQLITE_NULL) {
    fputs("null", f);
  } else {
    put_str(f, em_level_name((em_level_t)sqlite3_column_int(st, i)));
  }
}

static void put_real(FILE *f, sqlite3_stmt *st, int i) {
  double v = sqlite3_column_double(st, i);
  if (sqlite3_column_type(st, i) == SQLITE_NULL || !isfinite(v)) {
    fputs("null", f);
  } else {
    fprintf(f, "%.17g", v);
  }
}

static long long col_i(sqlite3_stmt *st, int i) {
  return (long long)sqlite3_column_int64(st, i);
}

/* A summary field of a list entry: its column and JSON name, and how it is written. */
typedef struct {
  const char *name;
  char type; /* 'l' level, 's' text, 'r' real, 'i' integer, 'b' boolean; '{' opens "truncated"
                (no column), '}' closes it. */
} field_t;

typedef struct {
  const char *name; /* Table, path segment and list array. */
  const char *what; /* "recording", "profile": for messages. */
  const char *link; /* The member naming the other kind's blob: "profile", "flight". */
  em_forensic_kind_t other;
  const char *(*cause_name)(int cause);
  const field_t *fields; /* In list order, ending with {NULL, 0}. */
} kind_t;

static const char *flight_cause(int cause) {
  return em_flight_cause_name((em_flight_cause_t)cause);
}

static const char *profile_cause(int cause) {
  return em_profile_cause_name((em_profile_cause_t)cause);
}

static const field_t flight_fields[] = {
    {"level", 'l'},     {"prev_level", 'l'}, {"rule", 's'},
    {"stage", 's'},     {"value", 'r'},      {"bound", 'r'},
    {"reason", 's'},    {"pre_ns", 'i'},     {"post_ns", 'i'},
    {"period_ns", 'i'}, {"stages", 'i'},     {"columns", 'i'},
    {"ticks", 'i'},     {"spans", 'i'},      {"truncated", '{'},
    {"spans_cut", 'i'}, {"ticks_cut", 'i'},  {"spans_overwritten", 'i'},
    {NULL, '}'},        {"historical", 'b'}, {"bytes", 'i'},
    {"top_cause", 's'}, {"top_share", 'r'},  {NULL, 0}};

static const field_t profile_fields[] = {
    {"level", 'l'},       {"prev_level", 'l'},  {"rule", 's'},
    {"stage", 's'},       {"reason", 's'},      {"start_mono_ns", 'i'},
    {"duration_ns", 'i'}, {"hz", 'i'},          {"clock", 's'},
    {"samples", 'i'},     {"lost", 'i'},        {"stages", 'i'},
    {"frames", 'i'},      {"stacks", 'i'},      {"truncated", '{'},
    {"stacks_cut", 'i'},  {"samples_cut", 'i'}, {NULL, '}'},
    {"historical", 'b'},  {"bytes", 'i'},       {NULL, 0}};

static const kind_t kinds[EM_FORENSIC_KINDS] = {
    [EM_FORENSIC_FLIGHT] = {"flights", "recording", "profile", EM_FORENSIC_PROFILE, flight_cause,
                            flight_fields},
    [EM_FORENSIC_PROFILE] = {"profiles", "profile", "flight", EM_FORENSIC_FLIGHT, profile_cause,
                             profile_fields},
};

const char *em_forensic_api_name(em_forensic_kind_t kind) {
  return kind < EM_FORENSIC_KINDS ? kinds[kind].name : "unknown";
}

_Static_assert(EM_FORENSIC_LINK_NS < (1ull << 31), "distance * 2^32 + number must fit in 63 bits");

/* Columns of a list row before the kind's fields. */
enum { COL_SESSION, COL_NUMBER, COL_TIME, COL_RECV, COL_CAUSE, COL_LINK, COL_FIELDS };

/* The list's SELECT for kind k into sql[0..cap). Returns false when it does not fit. */
static bool list_sql(const kind_t *k, char *sql, size_t cap) {
  const char *other = kinds[k->other].name;
  size_t n = (size_t)snprintf(
      sql, cap,
      "SELECT session, number, time_ns, recv_ns, cause, t.session || '-' || ((SELECT"
      " min(abs(o.time_ns - t.time_ns) * 4294967296 + o.number) FROM %s o WHERE"
      " o.device = t.device AND o.session = t.session AND o.cause = t.cause"
      " AND o.time_ns >= t.time_ns - %llu AND o.time_ns <= t.time_ns + %llu) %% 4294967296)",
      other, (unsigned long long)EM_FORENSIC_LINK_NS, (unsigned long long)EM_FORENSIC_LINK_NS);
  for (const field_t *f = k->fields; n < cap && (f->name || f->type); f++) {
    if (f->type != '{' && f->type != '}') {
      n += (size_t)snprintf(sql + n, cap - n, ", %s", f->name);
    }
  }
  if (n < cap) {
    n += (size_t)snprintf(sql + n, cap - n,
                          " FROM %s t WHERE device = ?1 AND time_ns >= ?2 AND time_ns < ?3"
                          " ORDER BY time_ns DESC, id DESC LIMIT ?4",
                          k->name);
  }
  return n < cap;
}

/* One list entry. Path-safe device id for the "url" field: ids are [A-Za-z0-9_.:-], nothing to
 * escape. */
static void put_row(FILE *f, const kind_t *k, sqlite3_stmt *st, const char *device) {
  long long session = col_i(st, COL_SESSION);
  long long number = col_i(st, COL_NUMBER);
  fprintf(f, "{\"key\":\"%lld-%lld\",\"session\":%lld,\"number\":%lld", session, number, session,
          number);
  fprintf(f, ",\"time_ns\":%lld,\"recv_ns\":%lld", col_i(st, COL_TIME), col_i(st, COL_RECV));
  fputs(",\"cause\":", f);
  put_str(f, k->cause_name(sqlite3_column_int(st, COL_CAUSE)));
  int col = COL_FIELDS;
  bool first = false; /* The first member of an object just opened. */
  for (const field_t *fl = k->fields; fl->name || fl->type; fl++) {
    if (fl->type == '}') {
      fputc('}', f);
      continue;
    }
    fprintf(f, "%s\"%s\":", first ? "" : ",", fl->name);
    first = fl->type == '{';
    switch (fl->type) {
    case '{':
      fputc('{', f);
      continue;
    case 'l':
      put_level(f, st, col);
      break;
    case 's':
      put_str(f, col_text(st, col));
      break;
    case 'r':
      put_real(f, st, col);
      break;
    case 'b':
      fputs(sqlite3_column_int(st, col) ? "true" : "false", f);
      break;
    default:
      fprintf(f, "%lld", col_i(st, col));
      break;
    }
    col++;
  }
  fprintf(f, ",\"%s\":", k->link);
  put_str(f, col_text(st, COL_LINK));
  fprintf(f, ",\"url\":\"/api/devices/%s/%s/%lld-%lld\"}", device, k->name, session, number);
}

/* Closes the memstream f (which writes *buf and *len) and hands its body over as a 200 answer,
 * or fails with 500. */
static void reply_stream(em_forensic_reply_t *out, FILE *f, char **buf, size_t *len, bool ok) {
  if (fclose(f) != 0 || !ok || !*buf) {
    free(*buf);
    fail(out, 500, ok ? "out of memory" : "reading the store failed");
    return;
  }
  *out = (em_forensic_reply_t){200, *buf, *len, CT_JSON};
}

void em_forensic_api_list(em_history_t *h, em_forensic_kind_t kind, const char *device,
                          const em_query_param_t *params, size_t n, em_forensic_reply_t *out) {
  char err[200];
  char sql[1024];
  const kind_t *k = kind < EM_FORENSIC_KINDS ? &kinds[kind] : NULL;
  if (!k || !list_sql(k, sql, sizeof(sql))) {
    fail(out, 500, "no such kind");
    return;
  }
  em_query_t q;
  if (em_query_parse(EM_QUERY_FLIGHTS, params, n, 0, &q, err, sizeof(err)) != 0) {
    fail(out, 400, err);
    return;
  }
  sqlite3_stmt *st = device_query(em_history_reader(h), device, sql, 503, out);
  if (!st) {
    return;
  }
  sqlite3_bind_int64(st, 2, (sqlite3_int64)q.from_ns);
  sqlite3_bind_int64(st, 3, (sqlite3_int64)q.to_ns);
  sqlite3_bind_int(st, 4, (int)q.limit);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) {
    sqlite3_finalize(st);
    fail(out, 500, "out of memory");
    return;
  }
  fputs("{\"device\":", f);
  put_str(f, device);
  fprintf(f, ",\"%s\":[", k->name);
  size_t rows = 0;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (rows++ > 0) {
      fputc(',', f);
    }
    put_row(f, k, st, device);
  }
  fputs("]}", f);
  sqlite3_finalize(st);
  if (rc == SQLITE_INTERRUPT) {
    fclose(f);
    free(buf);
    fail(out, 503, "query took too long");
    return;
  }
  reply_stream(out, f, &buf, &len, rc == SQLITE_DONE);
}

/* "<session>-<number>", each plain decimal digits within uint32. */
static bool parse_key(const char *key, uint32_t *session, uint32_t *number) {
  uint64_t v[2] = {0, 0};
  const char *p = key;
  for (int part = 0; part < 2; part++) {
    const char *start = p;
    while (*p >= '0' && *p <= '9' && p - start < 10) {
      v[part] = v[part] * 10u + (uint64_t)(*p - '0');
      p++;
    }
    if (p == start || v[part] > UINT32_MAX || *p != (part == 0 ? '-' : '\0')) {
      return false;
    }
    p++;
  }
  *session = (uint32_t)v[0];
  *number = (uint32_t)v[1];
  return true;
}

/* format=json or format=cbor; *cbor says which. Returns false with a message in err. */
static bool parse_format(const em_query_param_t *params, size_t n, bool *cbor, char *err,
                         size_t cap) {
  *cbor = false;
  bool seen = false;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(params[i].key, "format") != 0) {
      snprintf(err, cap, "unknown parameter '%.32s'", params[i].key);
      return false;
    }
    if (seen) {
      snprintf(err, cap, "format: given more than once");
      return false;
    }
    seen = true;
    const char *v = params[i].val ? params[i].val : "";
    if (strcmp(v, "cbor") == 0) {
      *cbor = true;
    } else if (strcmp(v, "json") != 0) {
      snprintf(err, cap, "format: '%.32s' is neither json nor cbor", v);
      return false;
    }
  }
  return true;
}

/* The JSON of a stored blob of kind `kind` into out (200), or a 500. */
static void reply_json(em_forensic_reply_t *out, em_forensic_kind_t kind, const uint8_t *cbor,
                       size_t len) {
  bool flight = kind == EM_FORENSIC_FLIGHT;
  union {
    em_flight_t f;
    em_profile_t p;
  } m;
  size_t scratch_len = flight ? em_flight_scratch_bytes(len) : em_profile_scratch_bytes(len);
  void *scratch = malloc(scratch_len);
  int rc = !scratch ? -ENOMEM
           : flight ? em_flight_decode(cbor, len, &m.f, scratch, scratch_len, NULL)
                    : em_profile_decode(cbor, len, &m.p, scratch, scratch_len, NULL);
  if (rc != 0) {
    free(scratch);
    fail(out, 500, scratch ? "the stored blob does not decode" : "out of memory");
    return;
  }
  size_t need = 0;
  char *json = NULL;
  char probe[1];
  rc = flight ? em_flight_to_json(&m.f, probe, sizeof(probe), &need)
              : em_profile_to_json(&m.p, probe, sizeof(probe), &need);
  if (rc == 0 || rc == EM_PROTO_ENOSPACE) {
    json = malloc(need + 1);
    rc = !json    ? -ENOMEM
         : flight ? em_flight_to_json(&m.f, json, need + 1, &need)
                  : em_profile_to_json(&m.p, json, need + 1, &need);
  }
  free(scratch);
  if (rc != 0) {
    free(json);
    fail(out, 500, "the blob's JSON could not be written");
    return;
  }
  *out = (em_forensic_reply_t){200, json, need, CT_JSON};
}

void em_forensic_api_get(em_history_t *h, em_forensic_kind_t kind, const char *device,
                         const char *key, const em_query_param_t *params, size_t n,
                         em_forensic_reply_t *out) {
  char err[200];
  if (kind >= EM_FORENSIC_KINDS) {
    fail(out, 500, "no such kind");
    return;
  }
  const kind_t *k = &kinds[kind];
  bool want_cbor;
  if (!parse_format(params, n, &want_cbor, err, sizeof(err))) {
    fail(out, 400, err);
    return;
  }
  char sql[128];
  snprintf(sql, sizeof(sql),
           "SELECT cbor FROM %s WHERE device = ?1 AND session = ?2 AND number = ?3", k->name);
  sqlite3_stmt *st = device_query(em_history_reader(h), device, sql, 500, out);
  if (!st) {
    return;
  }
  uint32_t session;
  uint32_t number;
  if (!parse_key(key, &session, &number)) {
    sqlite3_finalize(st);
    snprintf(err, sizeof(err), "no such %s (a key is <session>-<number>)", k->what);
    fail(out, 404, err);
    return;
  }
  sqlite3_bind_int64(st, 2, session);
  sqlite3_bind_int64(st, 3, number);
  int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    sqlite3_finalize(st);
    snprintf(err, sizeof(err), "no such %s", k->what);
    fail(out, rc == SQLITE_DONE ? 404 : 500, rc == SQLITE_DONE ? err : "reading the store failed");
    return;
  }
  const uint8_t *blob = sqlite3_column_blob(st, 0);
  size_t len = (size_t)sqlite3_column_bytes(st, 0);
  if (!blob || len == 0) {
    sqlite3_finalize(st);
    fail(out, 500, "the stored blob is empty");
    return;
  }
  if (want_cbor) {
    char *copy = malloc(len);
    if (!copy) {
      sqlite3_finalize(st);
      fail(out, 500, "out of memory");
      return;
    }
    memcpy(copy, blob, len);
    *out = (em_forensic_reply_t){200, copy, len, CT_CBOR};
  } else {
    reply_json(out, kind, blob, len);
  }
  sqlite3_finalize(st);
}
