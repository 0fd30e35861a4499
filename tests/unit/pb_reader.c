/*
 * pb_reader.c - the tests' protocol buffers wire-format reader (see pb_reader.h).
 */
#include "pb_reader.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

uint64_t rd_varint(rd_t *r) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    assert_true(r->p < r->end);
    uint8_t b = *r->p++;
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      return v;
    }
  }
  fail_msg("varint too long");
  return 0;
}

int rd_next(rd_t *r, fld_t *f) {
  if (r->p == r->end) {
    return 0;
  }
  uint64_t tag = rd_varint(r);
  f->field = (uint32_t)(tag >> 3);
  f->wire = (uint32_t)(tag & 7);
  if (f->wire == 0) {
    f->u = rd_varint(r);
  } else if (f->wire == 1) {
    assert_true(r->end - r->p >= 8);
    f->u = 0;
    for (int k = 0; k < 8; k++) {
      f->u |= (uint64_t)r->p[k] << (8 * k);
    }
    r->p += 8;
  } else if (f->wire == 2) {
    uint64_t len = rd_varint(r);
    assert_true(len <= (uint64_t)(r->end - r->p));
    f->sub = (rd_t){r->p, r->p + len};
    r->p += len;
  } else {
    fail_msg("unexpected wire type %u", f->wire);
  }
  return 1;
}

double as_double(const fld_t *f) {
  assert_int_equal(f->wire, 1);
  double d;
  memcpy(&d, &f->u, sizeof(d));
  return d;
}

int64_t unzigzag(uint64_t u) {
  return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}

int str_is(const fld_t *f, const char *s) {
  return f->wire == 2 && (size_t)(f->sub.end - f->sub.p) == strlen(s) &&
         memcmp(f->sub.p, s, strlen(s)) == 0;
}

rd_t next_family(rd_t *stream) {
  uint64_t len = rd_varint(stream);
  assert_true(len <= (uint64_t)(stream->end - stream->p));
  rd_t mf = {stream->p, stream->p + len};
  stream->p += len;
  return mf;
}
