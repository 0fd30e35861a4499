/*
 * cbor_head.c - CBOR item heads (cbor_head.h): the well-formedness rules of RFC 8949 for one
 * head, and its shortest encoding. Owns nothing, never allocates, reentrant.
 */
#include <string.h>

#include "cbor_head.h"
#include "edgemon/proto.h"

int em__head_read(const uint8_t *p, size_t left, em__head_t *h) {
  if (left == 0) {
    return EM_PROTO_ETRUNCATED;
  }
  unsigned major = p[0] >> 5;
  unsigned info = p[0] & 0x1fu;
  uint64_t arg = info;
  size_t n = 0;
  if (info == EM_CBOR_AI_INDEFINITE) {
    if (major == EM_CBOR_UINT || major == EM_CBOR_NEGINT || major == EM_CBOR_TAG) {
      return EM_PROTO_EMALFORMED; /* No indefinite form for integers and tags. */
    }
    arg = 0;
  } else if (info > EM_CBOR_AI_8BYTES) {
    return EM_PROTO_EMALFORMED; /* 28..30: reserved. */
  } else if (info >= EM_CBOR_AI_1BYTE) {
    n = (size_t)1 << (info - EM_CBOR_AI_1BYTE);
    if (left - 1 < n) {
      return EM_PROTO_ETRUNCATED;
    }
    arg = 0;
    for (size_t i = 1; i <= n; i++) {
      arg = (arg << 8) | p[i];
    }
    if (major == EM_CBOR_SIMPLE && info == EM_CBOR_AI_1BYTE && arg < 32) {
      return EM_PROTO_EMALFORMED; /* Simple values below 32 have only the one-byte form. */
    }
  }
  h->major = (uint8_t)major;
  h->info = (uint8_t)info;
  h->len = (uint8_t)(1 + n);
  h->arg = arg;
  return 0;
}

/* Writes the `bytes` low bytes of v (1, 2, 4 or 8) big-endian at out. */
static void put_be(uint8_t *out, unsigned bytes, uint64_t v) {
  switch (bytes) {
  case 8:
    out[0] = (uint8_t)(v >> 56);
    out[1] = (uint8_t)(v >> 48);
    out[2] = (uint8_t)(v >> 40);
    out[3] = (uint8_t)(v >> 32);
    out += 4;
    /* fall through */
  case 4:
    out[0] = (uint8_t)(v >> 24);
    out[1] = (uint8_t)(v >> 16);
    out += 2;
    /* fall through */
  case 2:
    out[0] = (uint8_t)(v >> 8);
    out += 1;
    /* fall through */
  default:
    out[0] = (uint8_t)v;
  }
}

size_t em__head_write_fixed(uint8_t out[EM_CBOR_HEAD_MAX], unsigned major, unsigned bytes,
                            uint64_t arg) {
  unsigned info = bytes == 1 ? 24u : bytes == 2 ? 25u : bytes == 4 ? 26u : 27u;
  out[0] = (uint8_t)((major << 5) | info);
  put_be(out + 1, bytes, arg);
  return 1 + bytes;
}

size_t em__head_write(uint8_t out[EM_CBOR_HEAD_MAX], unsigned major, uint64_t arg) {
  if (arg < EM_CBOR_AI_1BYTE) {
    out[0] = (uint8_t)((major << 5) | arg);
    return 1;
  }
  unsigned bytes = arg <= UINT8_MAX ? 1u : arg <= UINT16_MAX ? 2u : arg <= UINT32_MAX ? 4u : 8u;
  return em__head_write_fixed(out, major, bytes, arg);
}

/* binary16 to binary64 (IEEE 754): exact, since every binary16 value is a binary64 value. */
static double half_to_double(uint64_t half) {
  uint64_t sign = (half >> 15) & 1u;
  uint64_t exp = (half >> 10) & 0x1fu;
  uint64_t mant = half & 0x3ffu;
  if (exp == 0) {
    double v = (double)mant / 16777216.0; /* Subnormal or zero: mant * 2^-24. */
    return sign ? -v : v;
  }
  uint64_t bits = (sign << 63) | (mant << 42); /* 10 mantissa bits to the top of 52. */
  bits |= (exp == 0x1f ? UINT64_C(0x7ff) : exp - 15 + 1023) << 52;
  double v;
  memcpy(&v, &bits, sizeof(v));
  return v;
}

double em__head_float(const em__head_t *h) {
  if (h->info == EM_CBOR_FLOAT16) {
    return half_to_double(h->arg);
  }
  if (h->info == EM_CBOR_FLOAT32) {
    uint32_t bits = (uint32_t)h->arg;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return (double)f;
  }
  double v;
  memcpy(&v, &h->arg, sizeof(v));
  return v;
}
