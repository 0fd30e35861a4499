/*
 * flight_api.c - the flight recordings' JSON API (see flight_api.h).
 *
 * The list reads the flights table's summary columns through flights_device_time, newest
 * first, at most `limit` rows; a recording is answered from its stored CBOR, decoded again with
 * em_flight_decode() for the JSON (the store keeps only what decoded, so a failure there is a
 * 500). Bodies are written with open_memstream(): a list is at most EM_QUERY_LIMIT_MAX short
 * objects, a recording's JSON what em_flight_to_json() says it needs.
 */
#define _POSIX_C_SOURCE 200809L
#include "flight_api.h"

#include <edgemon/flight.h>
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CT_JSON "application/json"
#define CT_CBOR "application/cbor"

static void fail(em_flight_reply_t *out, unsigned status, const char *msg) {
  em_history_reply_t r = {0, NULL, 0};
  em_history_error(&r, status, msg);
  *out = (em_flight_reply_t){r.status, r.body, r.len, CT_JSON};
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

/* A JSON string, or null for NULL. */
static void put_str(FILE *f, const char *s) {
  if (!s) {
    fputs("null", f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      fprintf(f, "\\%c", c);
    } else if (c < 0x20) {
      fprintf(f, "\\u%04x", c);
    } else {
      fputc(c, f);
    }
  }
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

/* Path-safe device id for the "url" field: ids are [A-Za-z0-9_.:-], nothing to escape. */
static void put_row(FILE *f, sqlite3_stmt *st, const char *device) {
  long long session = col_i(st, 0);
  long long number = col_i(st, 1);
  fprintf(f, "{\"key\":\"%lld-%lld\",\"session\":%lld,\"number\":%lld", session, number, session,
          number);
  fprintf(f, ",\"time_ns\":%lld,\"recv_ns\":%lld", col_i(st, 2), col_i(st, 3));
  fputs(",\"cause\":", f);
  put_str(f, em_flight_cause_name((em_flight_cause_t)sqlite3_column_int(st, 4)));
  /* Columns 5 to 11 in their JSON form. */
  static const struct {
    const char *name;
    char kind; /* 'l' level, 's' text, 'r' real */
  } fields[] = {{"level", 'l'}, {"prev_level", 'l'}, {"rule", 's'},  {"stage", 's'},
                {"value", 'r'}, {"bound", 'r'},      {"reason", 's'}};
  for (int i = 0; i < 7; i++) {
    fprintf(f, ",\"%s\":", fields[i].name);
    if (fields[i].kind == 'l') {
      put_level(f, st, 5 + i);
    } else if (fields[i].kind == 's') {
      put_str(f, col_text(st, 5 + i));
    } else {
      put_real(f, st, 5 + i);
    }
  }
  static const char *const counts[] = {"pre_ns",  "post_ns", "period_ns", "stages",
                                       "columns", "ticks",   "spans"};
  for (int i = 0; i < 7; i++) {
    fprintf(f, ",\"%s\":%lld", counts[i], col_i(st, 12 + i));
  }
  fprintf(f,
          ",\"truncated\":{\"spans_cut\":%lld,\"ticks_cut\":%lld"
          ",\"spans_overwritten\":%lld}",
          col_i(st, 19), col_i(st, 20), col_i(st, 21));
  fprintf(f, ",\"historical\":%s,\"bytes\":%lld", sqlite3_column_int(st, 22) ? "true" : "false",
          col_i(st, 23));
  fprintf(f, ",\"url\":\"/api/devices/%s/flights/%lld-%lld\"}", device, session, number);
}

/* Closes the memstream f (which writes *buf and *len) and hands its body over as a 200 answer,
 * or fails with 500. */
static void reply_stream(em_flight_reply_t *out, FILE *f, char **buf, size_t *len, bool ok) {
  if (fclose(f) != 0 || !ok || !*buf) {
    free(*buf);
    fail(out, 500, ok ? "out of memory" : "reading the store failed");
    return;
  }
  *out = (em_flight_reply_t){200, *buf, *len, CT_JSON};
}

void em_flight_api_list(em_history_t *h, const char *device, const em_query_param_t *params,
                        size_t n, em_flight_reply_t *out) {
  char err[200];
  em_query_t q;
  if (em_query_parse(EM_QUERY_FLIGHTS, params, n, 0, &q, err, sizeof(err)) != 0) {
    fail(out, 400, err);
    return;
  }
  sqlite3 *db = em_history_reader(h);
  int rc;
  int64_t dev = device_id(db, device, &rc);
  if (rc != SQLITE_OK) {
    fail(out, rc == SQLITE_INTERRUPT ? 503 : 500, "reading the store failed");
    return;
  }
  if (dev < 0) {
    fail(out, 404, "no such device");
    return;
  }
  sqlite3_stmt *st = NULL;
  rc = sqlite3_prepare_v2(
      db,
      "SELECT session, number, time_ns, recv_ns, cause, level, prev_level, rule, stage, value,"
      " bound, reason, pre_ns, post_ns, period_ns, stages, columns, ticks, spans, spans_cut,"
      " ticks_cut, spans_overwritten, historical, bytes FROM flights"
      " WHERE device = ?1 AND time_ns >= ?2 AND time_ns < ?3"
      " ORDER BY time_ns DESC, id DESC LIMIT ?4",
      -1, &st, NULL);
  if (rc != SQLITE_OK) {
    fail(out, 500, "reading the store failed");
    return;
  }
  sqlite3_bind_int64(st, 1, dev);
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
  fputs(",\"flights\":[", f);
  size_t rows = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (rows++ > 0) {
      fputc(',', f);
    }
    put_row(f, st, device);
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

/* The JSON of a stored recording into out (200), or a 500. */
static void reply_json(em_flight_reply_t *out, const uint8_t *cbor, size_t len) {
  em_flight_t fl;
  size_t scratch_len = em_flight_scratch_bytes(len);
  void *scratch = malloc(scratch_len);
  if (!scratch || em_flight_decode(cbor, len, &fl, scratch, scratch_len, NULL) != 0) {
    free(scratch);
    fail(out, 500, scratch ? "the stored recording does not decode" : "out of memory");
    return;
  }
  size_t need = 0;
  char *json = NULL;
  char probe[1];
  int rc = em_flight_to_json(&fl, probe, sizeof(probe), &need);
  if (rc == 0 || rc == EM_PROTO_ENOSPACE) {
    json = malloc(need + 1);
    rc = json ? em_flight_to_json(&fl, json, need + 1, &need) : -ENOMEM;
  }
  free(scratch);
  if (rc != 0) {
    free(json);
    fail(out, 500, "the recording's JSON could not be written");
    return;
  }
  *out = (em_flight_reply_t){200, json, need, CT_JSON};
}

void em_flight_api_get(em_history_t *h, const char *device, const char *key,
                       const em_query_param_t *params, size_t n, em_flight_reply_t *out) {
  char err[200];
  bool want_cbor;
  if (!parse_format(params, n, &want_cbor, err, sizeof(err))) {
    fail(out, 400, err);
    return;
  }
  uint32_t session;
  uint32_t number;
  sqlite3 *db = em_history_reader(h);
  int rc;
  int64_t dev = device_id(db, device, &rc);
  if (rc != SQLITE_OK) {
    fail(out, 500, "reading the store failed");
    return;
  }
  if (dev < 0) {
    fail(out, 404, "no such device");
    return;
  }
  if (!parse_key(key, &session, &number)) {
    fail(out, 404, "no such recording (a key is <session>-<number>)");
    return;
  }
  sqlite3_stmt *st = NULL;
  rc = sqlite3_prepare_v2(
      db, "SELECT cbor FROM flights WHERE device = ?1 AND session = ?2 AND number = ?3", -1, &st,
      NULL);
  if (rc != SQLITE_OK) {
    fail(out, 500, "reading the store failed");
    return;
  }
  sqlite3_bind_int64(st, 1, dev);
  sqlite3_bind_int64(st, 2, session);
  sqlite3_bind_int64(st, 3, number);
  rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    sqlite3_finalize(st);
    fail(out, rc == SQLITE_DONE ? 404 : 500,
         rc == SQLITE_DONE ? "no such recording" : "reading the store failed");
    return;
  }
  const uint8_t *blob = sqlite3_column_blob(st, 0);
  size_t len = (size_t)sqlite3_column_bytes(st, 0);
  if (!blob || len == 0) {
    sqlite3_finalize(st);
    fail(out, 500, "the stored recording is empty");
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
    *out = (em_flight_reply_t){200, copy, len, CT_CBOR};
  } else {
    reply_json(out, blob, len);
  }
  sqlite3_finalize(st);
}
