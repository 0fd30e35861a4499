/*
 * json_read.c - a recursive-descent JSON reader, see json_read.h.
 *
 * One pass over the text; each value is built in place in its parent's item array (grown by
 * doubling). Strict: no comments, no trailing commas, no leading zeros, no control characters
 * in strings, nothing after the top-level value but whitespace. Depth and value count are
 * bounded; on any error everything built so far is freed.
 */
#define _POSIX_C_SOURCE 200809L
#include "json_read.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *s;
  size_t len, pos;
  size_t values;
  const char *why;
} reader_t;

static void value_free(em_json_t *v) {
  if (v->type == EM_JSON_STRING) {
    free(v->string);
  } else if (v->type == EM_JSON_ARRAY || v->type == EM_JSON_OBJECT) {
    for (size_t i = 0; i < v->n; i++) {
      value_free(&v->item[i]);
      if (v->key) {
        free(v->key[i]);
      }
    }
    free(v->item);
    free(v->key);
  }
}

void em_json_free(em_json_t *v) {
  if (v) {
    value_free(v);
    free(v);
  }
}

static void skip_ws(reader_t *r) {
  while (r->pos < r->len && (r->s[r->pos] == ' ' || r->s[r->pos] == '\t' || r->s[r->pos] == '\n' ||
                             r->s[r->pos] == '\r')) {
    r->pos++;
  }
}

static int bad(reader_t *r, const char *why) {
  r->why = why;
  return -EINVAL;
}

static int hex4(reader_t *r, unsigned *out) {
  if (r->len - r->pos < 4) {
    return bad(r, "short \\u escape");
  }
  unsigned v = 0;
  for (int k = 0; k < 4; k++) {
    char c = r->s[r->pos++];
    v <<= 4;
    if (c >= '0' && c <= '9') {
      v |= (unsigned)(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      v |= (unsigned)(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      v |= (unsigned)(c - 'A' + 10);
    } else {
      return bad(r, "bad \\u escape");
    }
  }
  *out = v;
  return 0;
}

static size_t put_utf8(char *o, unsigned cp) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xc0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xe0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  o[0] = (char)(0xf0 | (cp >> 18));
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
  o[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

/* A string at r->pos (on the opening quote) into a malloc'd buffer. */
static int read_string(reader_t *r, char **out) {
  r->pos++; /* the quote */
  size_t start = r->pos, end = start;
  while (end < r->len && r->s[end] != '"') {
    end += r->s[end] == '\\' ? 2 : 1;
  }
  if (end >= r->len) {
    return bad(r, "unterminated string");
  }
  char *buf = malloc(end - start + 1); /* unescaping never lengthens */
  if (!buf) {
    return -ENOMEM;
  }
  size_t o = 0;
  int rc = 0;
  while (rc == 0 && r->pos < end) {
    unsigned char c = (unsigned char)r->s[r->pos++];
    if (c < 0x20) {
      rc = bad(r, "control character in a string");
    } else if (c != '\\') {
      buf[o++] = (char)c;
    } else {
      char e = r->s[r->pos++];
      const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
      const char *hit = e ? strchr(from, e) : NULL;
      unsigned cp = 0, lo = 0;
      if (hit) {
        buf[o++] = to[hit - from];
      } else if (e != 'u') {
        rc = bad(r, "bad escape in a string");
      } else if ((rc = hex4(r, &cp)) == 0) {
        if (cp >= 0xd800 && cp <= 0xdbff) {
          if (r->pos + 1 < end && r->s[r->pos] == '\\' && r->s[r->pos + 1] == 'u') {
            r->pos += 2;
            rc = hex4(r, &lo);
          }
          if (rc == 0 && (lo < 0xdc00 || lo > 0xdfff)) {
            rc = bad(r, "unpaired surrogate");
          }
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        } else if (cp >= 0xdc00 && cp <= 0xdfff) {
          rc = bad(r, "unpaired surrogate");
        }
        if (rc == 0) {
          o += put_utf8(buf + o, cp);
        }
      }
    }
  }
  if (rc != 0) {
    free(buf);
    return rc;
  }
  buf[o] = '\0';
  r->pos = end + 1;
  *out = buf;
  return 0;
}

static int read_number(reader_t *r, double *out) {
  size_t p = r->pos;
  const char *s = r->s;
  if (p < r->len && s[p] == '-') {
    p++;
  }
  if (p >= r->len || s[p] < '0' || s[p] > '9') {
    return bad(r, "bad number");
  }
  if (s[p] == '0' && p + 1 < r->len && s[p + 1] >= '0' && s[p + 1] <= '9') {
    return bad(r, "leading zero in a number");
  }
  while (p < r->len && ((s[p] >= '0' && s[p] <= '9') || s[p] == '.' || s[p] == 'e' || s[p] == 'E' ||
                        s[p] == '+' || s[p] == '-')) {
    p++;
  }
  char buf[64];
  if (p - r->pos >= sizeof(buf)) {
    return bad(r, "number too long");
  }
  memcpy(buf, s + r->pos, p - r->pos);
  buf[p - r->pos] = '\0';
  char *end = NULL;
  double v = strtod(buf, &end);
  if (*end || !isfinite(v) || buf[strlen(buf) - 1] == '.' || strstr(buf, ".e") ||
      strstr(buf, ".E")) {
    return bad(r, "bad number");
  }
  r->pos = p;
  *out = v;
  return 0;
}

static int read_value(reader_t *r, em_json_t *v, int depth);

/* An array or object: items after '[' or '{' until `close`. */
static int read_items(reader_t *r, em_json_t *v, int depth, char close) {
  bool object = close == '}';
  size_t cap = 0;
  r->pos++;
  skip_ws(r);
  if (r->pos < r->len && r->s[r->pos] == close) {
    r->pos++;
    return 0;
  }
  for (;;) {
    if (v->n == cap) {
      cap = cap ? cap * 2 : 4;
      em_json_t *items = realloc(v->item, cap * sizeof(*items));
      if (!items) {
        return -ENOMEM;
      }
      v->item = items;
      if (object) {
        char **keys = realloc(v->key, cap * sizeof(*keys));
        if (!keys) {
          return -ENOMEM;
        }
        v->key = keys;
      }
    }
    skip_ws(r);
    if (object) {
      if (r->pos >= r->len || r->s[r->pos] != '"') {
        return bad(r, "expected a member name");
      }
      int rc = read_string(r, &v->key[v->n]);
      if (rc != 0) {
        return rc;
      }
      skip_ws(r);
      if (r->pos >= r->len || r->s[r->pos] != ':') {
        free(v->key[v->n]);
        return bad(r, "expected ':'");
      }
      r->pos++;
    }
    memset(&v->item[v->n], 0, sizeof(v->item[0]));
    int rc = read_value(r, &v->item[v->n], depth + 1);
    v->n++; /* counted even on error, so what it built is freed */
    if (rc != 0) {
      return rc;
    }
    skip_ws(r);
    if (r->pos < r->len && r->s[r->pos] == ',') {
      r->pos++;
      continue;
    }
    if (r->pos < r->len && r->s[r->pos] == close) {
      r->pos++;
      return 0;
    }
    return bad(r, object ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

static bool literal(reader_t *r, const char *word) {
  size_t n = strlen(word);
  if (r->len - r->pos >= n && memcmp(r->s + r->pos, word, n) == 0) {
    r->pos += n;
    return true;
  }
  return false;
}

static int read_value(reader_t *r, em_json_t *v, int depth) {
  if (depth > EM_JSON_MAX_DEPTH) {
    return bad(r, "nested too deeply");
  }
  if (++r->values > EM_JSON_MAX_VALUES) {
    return bad(r, "too many values");
  }
  skip_ws(r);
  if (r->pos >= r->len) {
    return bad(r, "unexpected end");
  }
  char c = r->s[r->pos];
  if (c == '{' || c == '[') {
    v->type = c == '{' ? EM_JSON_OBJECT : EM_JSON_ARRAY;
    return read_items(r, v, depth, c == '{' ? '}' : ']');
  }
  if (c == '"') {
    v->type = EM_JSON_STRING;
    int rc = read_string(r, &v->string);
    if (rc != 0) {
      v->type = EM_JSON_NULL;
    }
    return rc;
  }
  if (literal(r, "null")) {
    v->type = EM_JSON_NULL;
    return 0;
  }
  if (literal(r, "true") || literal(r, "false")) {
    v->type = EM_JSON_BOOL;
    v->boolean = r->s[r->pos - 1] == 'e' && r->s[r->pos - 2] == 'u';
    return 0;
  }
  v->type = EM_JSON_NUMBER;
  return read_number(r, &v->number);
}

int em_json_parse(const char *text, size_t len, em_json_t **out, char *err, size_t err_cap) {
  if (!text || !out) {
    return -EINVAL;
  }
  em_json_t *v = calloc(1, sizeof(*v));
  if (!v) {
    return -ENOMEM;
  }
  reader_t r = {.s = text, .len = len};
  int rc = read_value(&r, v, 1);
  if (rc == 0) {
    skip_ws(&r);
    if (r.pos != r.len) {
      rc = bad(&r, "text after the value");
    }
  }
  if (rc != 0) {
    if (err && err_cap) {
      snprintf(err, err_cap, "%s at byte %zu", rc == -ENOMEM ? "out of memory" : r.why, r.pos);
    }
    em_json_free(v);
    return rc;
  }
  *out = v;
  return 0;
}

const em_json_t *em_json_get(const em_json_t *v, const char *key) {
  if (!v || v->type != EM_JSON_OBJECT) {
    return NULL;
  }
  for (size_t i = 0; i < v->n; i++) {
    if (strcmp(v->key[i], key) == 0) {
      return &v->item[i];
    }
  }
  return NULL;
}

bool em_json_number(const em_json_t *obj, const char *key, double *out) {
  const em_json_t *m = em_json_get(obj, key);
  if (!m || m->type != EM_JSON_NUMBER) {
    return false;
  }
  *out = m->number;
  return true;
}

const char *em_json_string(const em_json_t *obj, const char *key) {
  const em_json_t *m = em_json_get(obj, key);
  return m && m->type == EM_JSON_STRING ? m->string : NULL;
}

const em_json_t *em_json_array(const em_json_t *obj, const char *key) {
  const em_json_t *m = em_json_get(obj, key);
  return m && m->type == EM_JSON_ARRAY ? m : NULL;
}
