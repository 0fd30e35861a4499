/*
 * pb.c - a minimal protocol buffers writer (see pb.h).
 *
 * Why hand-written rather than libprotobuf-c. The aggregator writes one message family
 * (io.prometheus.client.MetricFamily, and later the remote-write WriteRequest) and reads none.
 * libprotobuf-c would need protoc-c at build time to generate C from the .proto files, a
 * generated-code directory to keep in step with upstream, and it encodes from a tree of
 * heap-allocated message structs that must be built first (one allocation per metric, label
 * and span) and then packed. The wire format a writer needs is four encodings (varint, zigzag,
 * little-endian fixed64, length-delimited), about 200 lines, writing straight from the
 * aggregator's own state into one reused buffer with a hard cap; a reader, where hostile bytes
 * arrive, would be a different matter. Field numbers live next to their .proto definitions in
 * the callers (prom_expo.c).
 *
 * Submessage lengths. A length-delimited field's length precedes its body and is a varint of
 * unknown size until the body is complete. em_pb_begin records where the body starts and
 * writes nothing; em_pb_end measures the body, moves it up by the varint's size and writes the
 * varint in the gap. Each level copies its body once; the messages here nest four deep.
 *
 * Growth. The buffer starts at EM_PB_MIN_CAP_BYTES and doubles, never past max_bytes: a write
 * that would pass max_bytes fails with -EOVERFLOW, an allocation failure with -ENOMEM; either
 * leaves the bytes already written intact and becomes the sticky error.
 *
 * Owns: one heap buffer per writer. Not thread-safe.
 */
#include "pb.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int em_pb_init(em_pb_t *pb, size_t max_bytes) {
  if (!pb || max_bytes == 0) {
    return -EINVAL;
  }
  memset(pb, 0, sizeof(*pb));
  pb->max_bytes = max_bytes;
  return 0;
}

void em_pb_deinit(em_pb_t *pb) {
  if (!pb) {
    return;
  }
  free(pb->data);
  memset(pb, 0, sizeof(*pb));
}

void em_pb_reset(em_pb_t *pb) {
  if (!pb) {
    return;
  }
  pb->len_bytes = 0;
  pb->err = 0;
  pb->depth = 0;
}

int em_pb_error(const em_pb_t *pb) {
  return pb ? pb->err : -EINVAL;
}

const uint8_t *em_pb_data(const em_pb_t *pb, size_t *len_bytes) {
  size_t len = pb && pb->data ? pb->len_bytes : 0;
  if (len_bytes) {
    *len_bytes = len;
  }
  return len > 0 ? pb->data : NULL;
}

size_t em_pb_varint_encode(uint8_t out[EM_PB_VARINT_MAX], uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    out[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  out[n++] = (uint8_t)v;
  return n;
}

uint64_t em_pb_zigzag(int64_t v) {
  /* (v << 1) ^ (v >> 63), written without shifting a negative value. */
  uint64_t u = (uint64_t)v;
  return (u << 1) ^ (v < 0 ? UINT64_MAX : 0);
}

/* Records err as the sticky error (the first one wins) and returns the sticky error. */
static int fail(em_pb_t *pb, int err) {
  if (pb->err == 0) {
    pb->err = err;
  }
  return pb->err;
}

/* Makes room for `more` bytes past len_bytes. Returns 0 or the (new) sticky error. */
static int reserve(em_pb_t *pb, size_t more) {
  if (more <= pb->cap_bytes - pb->len_bytes) {
    return 0;
  }
  if (more > pb->max_bytes - pb->len_bytes) {
    return fail(pb, -EOVERFLOW);
  }
  size_t need = pb->len_bytes + more;
  size_t cap = pb->cap_bytes > 0 ? pb->cap_bytes : EM_PB_MIN_CAP_BYTES;
  while (cap < need) {
    cap = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
  }
  if (cap > pb->max_bytes) {
    cap = pb->max_bytes;
  }
  uint8_t *data = realloc(pb->data, cap);
  if (!data) {
    return fail(pb, -ENOMEM);
  }
  pb->data = data;
  pb->cap_bytes = cap;
  return 0;
}

/* Appends n bytes (room reserved by the caller). */
static void put(em_pb_t *pb, const void *bytes, size_t n) {
  if (n > 0) {
    memcpy(pb->data + pb->len_bytes, bytes, n);
    pb->len_bytes += n;
  }
}

/* Common guard of the field writers: the sticky error, then the field number. */
static int check(em_pb_t *pb, uint32_t field) {
  if (pb->err != 0) {
    return pb->err;
  }
  if (field == 0 || field > EM_PB_MAX_FIELD) {
    return fail(pb, -EINVAL);
  }
  return 0;
}

/* Writes tag + varint v as one unit: all of it or nothing. */
static int tag_varint(em_pb_t *pb, uint32_t field, uint32_t wire, uint64_t v) {
  uint8_t buf[2 * EM_PB_VARINT_MAX];
  size_t n = em_pb_varint_encode(buf, (uint64_t)field << 3 | wire);
  n += em_pb_varint_encode(buf + n, v);
  int rc = reserve(pb, n);
  if (rc != 0) {
    return rc;
  }
  put(pb, buf, n);
  return 0;
}

int em_pb_uint(em_pb_t *pb, uint32_t field, uint64_t v) {
  if (!pb) {
    return -EINVAL;
  }
  int rc = check(pb, field);
  return rc != 0 ? rc : tag_varint(pb, field, EM_PB_WIRE_VARINT, v);
}

int em_pb_int(em_pb_t *pb, uint32_t field, int64_t v) {
  return em_pb_uint(pb, field, (uint64_t)v); /* negatives take ten bytes, as specified */
}

int em_pb_sint(em_pb_t *pb, uint32_t field, int64_t v) {
  return em_pb_uint(pb, field, em_pb_zigzag(v));
}

int em_pb_double(em_pb_t *pb, uint32_t field, double v) {
  if (!pb) {
    return -EINVAL;
  }
  int rc = check(pb, field);
  if (rc != 0) {
    return rc;
  }
  uint8_t buf[EM_PB_VARINT_MAX + 8];
  size_t n = em_pb_varint_encode(buf, (uint64_t)field << 3 | EM_PB_WIRE_FIXED64);
  uint64_t bits = 0;
  memcpy(&bits, &v, sizeof(bits));
  for (int k = 0; k < 8; k++) {
    buf[n++] = (uint8_t)(bits >> (8 * k));
  }
  rc = reserve(pb, n);
  if (rc != 0) {
    return rc;
  }
  put(pb, buf, n);
  return 0;
}

int em_pb_bytes(em_pb_t *pb, uint32_t field, const void *data, size_t len_bytes) {
  if (!pb) {
    return -EINVAL;
  }
  int rc = check(pb, field);
  if (rc != 0) {
    return rc;
  }
  if (!data && len_bytes > 0) {
    return fail(pb, -EINVAL);
  }
  uint8_t head[2 * EM_PB_VARINT_MAX];
  size_t n = em_pb_varint_encode(head, (uint64_t)field << 3 | EM_PB_WIRE_LEN);
  n += em_pb_varint_encode(head + n, (uint64_t)len_bytes);
  if (len_bytes > SIZE_MAX - n) {
    return fail(pb, -EOVERFLOW);
  }
  rc = reserve(pb, n + len_bytes);
  if (rc != 0) {
    return rc;
  }
  put(pb, head, n);
  put(pb, data, len_bytes);
  return 0;
}

int em_pb_string(em_pb_t *pb, uint32_t field, const char *s) {
  return em_pb_bytes(pb, field, s ? s : "", s ? strlen(s) : 0);
}

int em_pb_begin(em_pb_t *pb, uint32_t field) {
  if (!pb) {
    return -EINVAL;
  }
  if (pb->err != 0) {
    return pb->err;
  }
  if (field > EM_PB_MAX_FIELD) {
    return fail(pb, -EINVAL);
  }
  if (pb->depth >= EM_PB_MAX_DEPTH) {
    return fail(pb, -EOVERFLOW);
  }
  if (field != 0) {
    uint8_t buf[EM_PB_VARINT_MAX];
    size_t n = em_pb_varint_encode(buf, (uint64_t)field << 3 | EM_PB_WIRE_LEN);
    int rc = reserve(pb, n);
    if (rc != 0) {
      return rc;
    }
    put(pb, buf, n);
  }
  pb->start[pb->depth] = pb->len_bytes;
  pb->depth++;
  return 0;
}

int em_pb_end(em_pb_t *pb) {
  if (!pb) {
    return -EINVAL;
  }
  if (pb->err != 0) {
    return pb->err;
  }
  if (pb->depth == 0) {
    return fail(pb, -EINVAL);
  }
  size_t start = pb->start[pb->depth - 1];
  size_t body = pb->len_bytes - start;
  uint8_t buf[EM_PB_VARINT_MAX];
  size_t n = em_pb_varint_encode(buf, (uint64_t)body);
  int rc = reserve(pb, n);
  if (rc != 0) {
    return rc;
  }
  memmove(pb->data + start + n, pb->data + start, body);
  memcpy(pb->data + start, buf, n);
  pb->len_bytes += n;
  pb->depth--;
  return 0;
}
