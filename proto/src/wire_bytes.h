/*
 * wire_bytes.h - internal to proto/src: the byte-level pieces the board-local records share
 * (wire.c: datagram v1, push, state page; ring.c: ring v2, v2 datagrams, deadline page):
 * little-endian field access, the heads every datagram, page and ring opens with, the
 * NUL-padded text field rules of WIRE.md, and the relaxed byte-wide copies a seqlock needs. Not
 * a public header.
 */
#ifndef EDGEMON_PROTO_WIRE_BYTES_H
#define EDGEMON_PROTO_WIRE_BYTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "edgemon/proto.h"
#include "edgemon/wire.h"

/* Which bytes a NUL-padded text field may hold before its NUL. */
typedef enum {
  TEXT_PRINTABLE,      /* 0x20..0x7e, possibly none. */
  TEXT_STAGE_OR_EMPTY, /* Empty, or a valid stage name. */
  TEXT_STAGE,          /* A valid stage name (1..31 bytes). */
} text_rule_t;

/* ---- Little-endian field access ---- */

static inline void put_le16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)(v & 0xffu);
  p[1] = (uint8_t)(v >> 8);
}

static inline void put_le32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v & 0xffu);
  p[1] = (uint8_t)((v >> 8) & 0xffu);
  p[2] = (uint8_t)((v >> 16) & 0xffu);
  p[3] = (uint8_t)(v >> 24);
}

static inline void put_le64(uint8_t *p, uint64_t v) {
  put_le32(p, (uint32_t)(v & 0xffffffffu));
  put_le32(p + 4, (uint32_t)(v >> 32));
}

static inline uint16_t get_le16(const uint8_t *p) {
  return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t get_le32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline uint64_t get_le64(const uint8_t *p) {
  return (uint64_t)get_le32(p) | ((uint64_t)get_le32(p + 4) << 32);
}

/* Writes the IEEE-754 binary64 bit pattern of v, little-endian; NaN payloads are kept. */
static inline void put_f64(uint8_t *p, double v) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  put_le64(p, bits);
}

static inline double get_f64(const uint8_t *p) {
  uint64_t bits = get_le64(p);
  double v;
  memcpy(&v, &bits, sizeof v);
  return v;
}

/* ---- Heads ---- */

/* Any kind: the caller checks it (check_dgram_head). */
#define ANY_KIND (-1)

/* Every datagram WIRE.md defines opens with the magic "EM", its version and its kind. */
enum { DGRAM_OFF_MAGIC0 = 0, DGRAM_OFF_MAGIC1 = 1, DGRAM_OFF_VERSION = 2, DGRAM_OFF_KIND = 3 };

static inline void put_dgram_head(uint8_t *out, uint8_t version, uint8_t kind) {
  out[DGRAM_OFF_MAGIC0] = EM_WIRE_MAGIC0;
  out[DGRAM_OFF_MAGIC1] = EM_WIRE_MAGIC1;
  out[DGRAM_OFF_VERSION] = version;
  out[DGRAM_OFF_KIND] = kind;
}

/*
 * The first checks of every received datagram, in WIRE.md's order: buf and out given (EINVAL),
 * len within min_len..max_len (ESIZE), the magic (EMAGIC), `version` (EVERSION) and, unless
 * ANY_KIND, `kind` (EKIND).
 */
static inline int check_dgram_head(const uint8_t *buf, const void *out, size_t len, size_t min_len,
                                   size_t max_len, uint8_t version, int kind) {
  if (buf == NULL || out == NULL) {
    return EM_PROTO_EINVAL;
  }
  if (len < min_len || len > max_len) {
    return EM_PROTO_ESIZE;
  }
  if (buf[DGRAM_OFF_MAGIC0] != EM_WIRE_MAGIC0 || buf[DGRAM_OFF_MAGIC1] != EM_WIRE_MAGIC1) {
    return EM_PROTO_EMAGIC;
  }
  if (buf[DGRAM_OFF_VERSION] != version) {
    return EM_PROTO_EVERSION;
  }
  return kind != ANY_KIND && buf[DGRAM_OFF_KIND] != kind ? EM_PROTO_EKIND : 0;
}

/* A page's or ring's head: its magic at 0 (EMAGIC), then its little-endian u16 version at
 * version_off (EVERSION). */
static inline int check_page_head(const uint8_t *p, const uint8_t *magic, size_t magic_len,
                                  size_t version_off, uint16_t version) {
  if (memcmp(p, magic, magic_len) != 0) {
    return EM_PROTO_EMAGIC;
  }
  return get_le16(p + version_off) != version ? EM_PROTO_EVERSION : 0;
}

/* ---- Text fields ---- */

/* Bit c of this table is set when byte c may appear in a stage name: [A-Za-z0-9_.:-]. */
static const uint64_t stage_chars[4] = {
    0x07ff600000000000ull, /* '-' '.' '0'-'9' ':' */
    0x07fffffe87fffffeull, /* 'A'-'Z' '_' 'a'-'z' */
    0,
    0,
};

static inline bool is_stage_char(unsigned char c) {
  return (stage_chars[c >> 6] >> (c & 63u)) & 1u;
}

static inline bool is_printable(unsigned char c) {
  return c >= 0x20 && c <= 0x7e;
}

/* Index of the first NUL in s[0..cap), or cap when there is none. Reads nothing past it. */
static inline size_t bounded_len(const unsigned char *s, size_t cap) {
  size_t n = 0;
  while (n < cap && s[n] != 0) {
    n++;
  }
  return n;
}

/*
 * Checks the text before the NUL of a field of `cap` bytes against `rule`. The text must end
 * with a NUL inside the field (so at most cap - 1 bytes). Returns 0 or EM_PROTO_ESTRING.
 * Bytes after the NUL are not looked at here (see check_padding()).
 */
static inline int check_text(const unsigned char *s, size_t cap, text_rule_t rule) {
  size_t n = bounded_len(s, cap);
  if (n == cap) {
    return EM_PROTO_ESTRING;
  }
  if (n == 0) {
    return rule == TEXT_STAGE ? EM_PROTO_ESTRING : 0;
  }
  for (size_t i = 0; i < n; i++) {
    bool ok = rule == TEXT_PRINTABLE ? is_printable(s[i]) : is_stage_char(s[i]);
    if (!ok) {
      return EM_PROTO_ESTRING;
    }
  }
  return 0;
}

/* Returns EM_PROTO_ESTRING unless every byte of field[from..cap) is 0. */
static inline int check_padding(const uint8_t *field, size_t from, size_t cap) {
  for (size_t i = from; i < cap; i++) {
    if (field[i] != 0) {
      return EM_PROTO_ESTRING;
    }
  }
  return 0;
}

/*
 * Validates a received text field of `cap` bytes (text, NUL, zero padding) and copies it,
 * padding included, into out[0..cap). Returns 0 or EM_PROTO_ESTRING (out untouched then).
 */
static inline int unpack_text(const uint8_t *field, size_t cap, text_rule_t rule, char *out) {
  int rc = check_text(field, cap, rule);
  if (rc != 0) {
    return rc;
  }
  rc = check_padding(field, bounded_len(field, cap), cap);
  if (rc != 0) {
    return rc;
  }
  memcpy(out, field, cap);
  return 0;
}

/* Writes the (already validated) NUL-terminated s into field[0..cap), NUL-padded. */
static inline void pack_text(uint8_t *field, size_t cap, const char *s) {
  size_t n = bounded_len((const unsigned char *)s, cap);
  memcpy(field, s, n);
  memset(field + n, 0, cap - n);
}

/* Copies n bytes into shared memory, one relaxed atomic byte store each (no data race with a
 * reader copying the same bytes; compiles to plain byte moves). */
static inline void store_bytes_relaxed(uint8_t *dst, const uint8_t *src, size_t n) {
  for (size_t i = 0; i < n; i++) {
    __atomic_store_n(&dst[i], src[i], __ATOMIC_RELAXED);
  }
}

/* Copies n bytes out of shared memory, one relaxed atomic byte load each. */
static inline void load_bytes_relaxed(uint8_t *dst, const uint8_t *src, size_t n) {
  for (size_t i = 0; i < n; i++) {
    dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
  }
}

/* The same for an 8-byte-aligned src and n a multiple of 8, one relaxed 8-byte load per word:
 * an eighth of the loads (the ring drain copies its slots this way). */
static inline void load_words_relaxed(uint8_t *dst, const uint8_t *src, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    uint64_t w = __atomic_load_n((const uint64_t *)(const void *)(src + i), __ATOMIC_RELAXED);
    memcpy(dst + i, &w, sizeof w);
  }
}

#endif /* EDGEMON_PROTO_WIRE_BYTES_H */
