/*
 * diag.c - CBOR diagnostic notation (RFC 8949 section 8, with the extended notation of
 * section 8.1 for indefinite-length items) of one well-formed CBOR item.
 *
 * A hand-written reader over the bytes, not proto's decoder: the notation must show the
 * encoding as it is (indefinite lengths, chunk structure, half-precision floats, simple
 * values), which a decoder that normalises or refuses items would hide. The reader is iterative:
 * open arrays, maps, tags and indefinite-length strings live on a fixed stack of EM_DIAG_MAX_DEPTH
 * frames inside em_diag_print(), so hostile nesting costs a bounded amount of memory and no
 * recursion.
 *
 * Every read is checked against the end of the input before it happens; a length taken from
 * the input is compared with the bytes left, never added to a position first. Each item
 * consumes at least one byte, so the walk is linear in the input even when a header claims
 * 2^64 elements.
 *
 * Error offsets (*err_off):
 *   EM_DIAG_ETRUNCATED  the start of the item that runs past the end (its initial byte), or the
 *                       input length when a container still expects an item there
 *   EM_DIAG_EMALFORMED  the initial byte of the offending item (reserved additional information
 *                       28..30, a break outside an indefinite-length item, a chunk of the wrong
 *                       type, a two-byte simple value below 32), or the first byte of an invalid
 *                       UTF-8 sequence inside a text string
 *   EM_DIAG_EDEPTH      the initial byte of the item that would open one level too many
 *   EM_DIAG_ETRAILING   the first byte after the complete item
 *
 * Floats print as the shortest decimal that reads back as the same double, laid out the way
 * RFC 8949 Appendix A shows them (JavaScript's number-to-string layout, with ".0" added to
 * integral mantissas): 1.0, 100000.0, 1.0e+300, 5.960464477539063e-8, 0.00006103515625.
 *
 * Owns nothing beyond the call; no global state, reentrant.
 */
#define _POSIX_C_SOURCE 200809L
#include "diag.h"

#include <edgemon/json_write.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* What an open frame is. */
enum frame_kind {
  FRAME_ARRAY,
  FRAME_MAP,
  FRAME_TAG,
  FRAME_CHUNKS, /* Indefinite-length byte or text string: definite chunks of one major type. */
};

typedef struct {
  enum frame_kind kind;
  bool indefinite;
  uint8_t chunk_major; /* FRAME_CHUNKS: 2 or 3. */
  uint64_t left;       /* Definite: elements (arrays), pairs (maps) or items (tags) still due. */
  uint64_t done;       /* Items completed inside this frame (a map counts keys and values). */
} frame_t;

/* One decoded item head. */
typedef struct {
  uint8_t major; /* 0..7 */
  uint8_t ai;    /* Additional information 0..31. */
  uint64_t arg;  /* The argument (count, length, value, raw float bits). */
  size_t size;   /* Bytes of the head. */
} head_t;

/* Reads the head at buf[pos..len). Returns 0, EM_DIAG_ETRUNCATED or EM_DIAG_EMALFORMED. */
static int read_head(const uint8_t *buf, size_t len, size_t pos, head_t *h) {
  if (pos >= len) {
    return EM_DIAG_ETRUNCATED;
  }
  h->major = (uint8_t)(buf[pos] >> 5);
  h->ai = (uint8_t)(buf[pos] & 0x1f);
  h->arg = 0;
  h->size = 1;
  if (h->ai < 24) {
    h->arg = h->ai;
    return 0;
  }
  if (h->ai >= 28 && h->ai <= 30) {
    return EM_DIAG_EMALFORMED;
  }
  if (h->ai == 31) {
    /* Indefinite length (2..5) or break (7); nothing for integers and tags. */
    if (h->major == 0 || h->major == 1 || h->major == 6) {
      return EM_DIAG_EMALFORMED;
    }
    return 0;
  }
  size_t n = (size_t)1 << (h->ai - 24);
  if (len - pos - 1 < n) {
    return EM_DIAG_ETRUNCATED;
  }
  for (size_t i = 0; i < n; i++) {
    h->arg = (h->arg << 8) | buf[pos + 1 + i];
  }
  h->size = 1 + n;
  return 0;
}

/* IEEE 754 binary16 to double; every half value is exact in a double. */
static double half_to_double(uint16_t bits) {
  int exp = (bits >> 10) & 0x1f;
  int mant = bits & 0x3ff;
  double v;
  if (exp == 0) {
    v = ldexp(mant, -24);
  } else if (exp == 31) {
    v = mant == 0 ? INFINITY : NAN;
  } else {
    v = ldexp(mant + 1024, exp - 25);
  }
  return (bits & 0x8000) ? -v : v;
}

/* True when the decimal digits[0..k) * 10^(e10 - k + 1) reads back as exactly v. */
static bool reads_back(const char *digits, size_t k, long e10, double v) {
  char s[48];
  snprintf(s, sizeof(s), "%c.%.*se%ld", digits[0], (int)(k - 1), digits + 1, e10);
  return strtod(s, NULL) == v;
}

/*
 * The shortest digit string d1..dk (no trailing zeros) with v == d1.d2..dk * 10^e10 after
 * reading back. For each length, printf's correctly rounded digits come first; when they do
 * not read back, the neighbours one unit up and down in the last place are tried too (2^-24
 * needs that: its 16-digit form rounds half-even to ...062, but only ...063 reads back,
 * because doubles below a power of two are twice as dense). 17 digits always read back.
 */
static size_t shortest_digits(double v, char digits[static 24], long *e10) {
  char sci[40];
  size_t k = 0;
  for (int prec = 0; prec <= 16; prec++) {
    snprintf(sci, sizeof(sci), "%.*e", prec, v);
    const char *p = sci;
    k = 0;
    for (; *p && *p != 'e'; p++) {
      if (*p >= '0' && *p <= '9' && k < 23) {
        digits[k++] = *p;
      }
    }
    *e10 = *p == 'e' ? strtol(p + 1, NULL, 10) : 0;
    if (reads_back(digits, k, *e10, v)) {
      break;
    }
    char up[24], down[24];
    memcpy(up, digits, k);
    memcpy(down, digits, k);
    size_t i = k;
    while (i > 0 && up[i - 1] == '9') {
      up[--i] = '0';
    }
    long up_e10 = *e10;
    if (i == 0) {
      up[0] = '1'; /* 9.99 -> 10.0: one more decade, same length. */
      up_e10++;
    } else {
      up[i - 1]++;
    }
    if (reads_back(up, k, up_e10, v)) {
      memcpy(digits, up, k);
      *e10 = up_e10;
      break;
    }
    i = k;
    while (i > 0 && down[i - 1] == '0') {
      down[--i] = '9';
    }
    /* 1.000 would become 0.999: a shorter length already covered that decade; skip. */
    if (i == 0 || (i == 1 && down[0] == '1')) {
      continue;
    }
    down[i - 1]--;
    if (reads_back(down, k, *e10, v)) {
      memcpy(digits, down, k);
      break;
    }
  }
  while (k > 1 && digits[k - 1] == '0') {
    k--;
  }
  digits[k] = '\0';
  return k;
}

/*
 * Writes a finite, non-zero, positive double as RFC 8949 Appendix A does: the shortest digit
 * string d1..dk that reads back as v, with the decimal point n places from the left
 * (v = 0.d1..dk * 10^n), laid out as ECMAScript's Number::toString does, and ".0" added
 * where the mantissa would have no point.
 */
static void put_positive_double(double v, FILE *out) {
  char digits[24];
  long e10 = 0;
  size_t k = shortest_digits(v, digits, &e10);
  long n = e10 + 1;
  long kk = (long)k;

  if (kk <= n && n <= 21) {
    /* Integral: digits, zeros, ".0". */
    fputs(digits, out);
    for (long i = kk; i < n; i++) {
      fputc('0', out);
    }
    fputs(".0", out);
  } else if (0 < n && n <= 21) {
    fprintf(out, "%.*s.%s", (int)n, digits, digits + n);
  } else if (-6 < n && n <= 0) {
    fputs("0.", out);
    for (long i = 0; i < -n; i++) {
      fputc('0', out);
    }
    fputs(digits, out);
  } else {
    fputc(digits[0], out);
    fputc('.', out);
    fputs(k > 1 ? digits + 1 : "0", out);
    fprintf(out, "e%c%ld", n - 1 < 0 ? '-' : '+', labs(n - 1));
  }
}

static void put_double(double v, FILE *out) {
  if (isnan(v)) {
    fputs("NaN", out);
  } else if (isinf(v)) {
    fputs(v < 0 ? "-Infinity" : "Infinity", out);
  } else if (v == 0) {
    fputs(signbit(v) ? "-0.0" : "0.0", out);
  } else {
    if (v < 0) {
      fputc('-', out);
    }
    put_positive_double(fabs(v), out);
  }
}

/* Writes s[0..n) as a JSON string. Returns 0, or EM_DIAG_EMALFORMED with *bad set to the index
 * of the first byte of an invalid UTF-8 sequence (RFC 3629: overlong forms, surrogates and code
 * points past U+10FFFF; nothing of the string written then). */
static int put_text(const uint8_t *s, size_t n, FILE *out, size_t *bad) {
  for (size_t i = 0; i < n;) {
    size_t l = em_json_utf8_len(s + i, n - i);
    if (l == 0) {
      *bad = i;
      return EM_DIAG_EMALFORMED;
    }
    i += l;
  }
  fputc('"', out);
  em_json_escape((const char *)s, n, EM_JSON_ESC_SHORT | EM_JSON_ESC_DEL, em_json_file_sink, out);
  fputc('"', out);
  return 0;
}

static void put_bytes(const uint8_t *s, size_t n, FILE *out) {
  static const char hex[] = "0123456789abcdef";
  fputs("h'", out);
  for (size_t i = 0; i < n; i++) {
    fputc(hex[s[i] >> 4], out);
    fputc(hex[s[i] & 0xf], out);
  }
  fputc('\'', out);
}

/* Closes the innermost frame: writes its closing bracket. */
static void put_close(const frame_t *f, FILE *out) {
  switch (f->kind) {
  case FRAME_ARRAY:
    fputc(']', out);
    break;
  case FRAME_MAP:
    fputc('}', out);
    break;
  case FRAME_TAG:
    fputc(')', out);
    break;
  case FRAME_CHUNKS:
    if (f->done == 0) {
      /* No chunks: RFC 8949 section 8.1 writes ''_ and ""_ since (_ ) names no type. */
      fputs(f->chunk_major == 2 ? "''_" : "\"\"_", out);
    } else {
      fputc(')', out);
    }
    break;
  }
}

/* Records that one item inside the innermost frame is complete. */
static void item_done(frame_t *f) {
  f->done++;
  if (f->indefinite) {
    return;
  }
  if (f->kind != FRAME_MAP || f->done % 2 == 0) {
    f->left--;
  }
}

int em_diag_print(const uint8_t *buf, size_t len, FILE *out, size_t *err_off) {
  size_t dummy;
  if (!err_off) {
    err_off = &dummy;
  }
  *err_off = 0;
  if ((!buf && len > 0) || !out) {
    return -EINVAL;
  }

  frame_t stack[EM_DIAG_MAX_DEPTH];
  size_t depth = 0;
  size_t pos = 0;
  int rc = 0;

  for (;;) {
    /* Close every definite frame whose items are all there. */
    while (depth > 0 && !stack[depth - 1].indefinite && stack[depth - 1].left == 0) {
      put_close(&stack[depth - 1], out);
      depth--;
      if (depth == 0) {
        goto complete;
      }
      item_done(&stack[depth - 1]);
    }

    frame_t *top = depth > 0 ? &stack[depth - 1] : NULL;
    head_t h;
    rc = read_head(buf, len, pos, &h);
    if (rc != 0) {
      *err_off = pos;
      goto done;
    }

    if (h.major == 7 && h.ai == 31) {
      /* Break: ends the innermost indefinite-length item, and nothing else. */
      if (!top || !top->indefinite || (top->kind == FRAME_MAP && top->done % 2 == 1)) {
        rc = EM_DIAG_EMALFORMED;
        *err_off = pos;
        goto done;
      }
      pos += h.size;
      put_close(top, out);
      depth--;
      if (depth == 0) {
        goto complete;
      }
      item_done(&stack[depth - 1]);
      continue;
    }

    if (top && top->kind == FRAME_CHUNKS && (h.major != top->chunk_major || h.ai == 31)) {
      rc = EM_DIAG_EMALFORMED;
      *err_off = pos;
      goto done;
    }

    /* The separator before this item. */
    if (top && top->done > 0) {
      fputs(top->kind == FRAME_MAP && top->done % 2 == 1 ? ": " : ", ", out);
    } else if (top && top->kind == FRAME_CHUNKS) {
      fputs("(_ ", out);
    }

    bool opens = (h.major == 4 || h.major == 5 || h.major == 6) ||
                 ((h.major == 2 || h.major == 3) && h.ai == 31);
    if (opens) {
      if (depth == EM_DIAG_MAX_DEPTH) {
        rc = EM_DIAG_EDEPTH;
        *err_off = pos;
        goto done;
      }
      frame_t *f = &stack[depth++];
      f->indefinite = h.ai == 31;
      f->left = h.arg;
      f->done = 0;
      f->chunk_major = h.major;
      switch (h.major) {
      case 2:
      case 3:
        f->kind = FRAME_CHUNKS;
        break;
      case 4:
        f->kind = FRAME_ARRAY;
        fputs(f->indefinite ? "[_ " : "[", out);
        break;
      case 5:
        f->kind = FRAME_MAP;
        fputs(f->indefinite ? "{_ " : "{", out);
        break;
      default:
        f->kind = FRAME_TAG;
        f->left = 1;
        fprintf(out, "%" PRIu64 "(", h.arg);
        break;
      }
      pos += h.size;
      continue;
    }

    /* A complete item. */
    switch (h.major) {
    case 0:
      fprintf(out, "%" PRIu64, h.arg);
      break;
    case 1:
      if (h.arg == UINT64_MAX) {
        fputs("-18446744073709551616", out);
      } else {
        fprintf(out, "-%" PRIu64, h.arg + 1);
      }
      break;
    case 2:
    case 3: {
      if (h.arg > len - pos - h.size) {
        rc = EM_DIAG_ETRUNCATED;
        *err_off = pos;
        goto done;
      }
      const uint8_t *s = buf + pos + h.size;
      if (h.major == 2) {
        put_bytes(s, (size_t)h.arg, out);
      } else {
        size_t bad = 0;
        rc = put_text(s, (size_t)h.arg, out, &bad);
        if (rc != 0) {
          *err_off = pos + h.size + bad;
          goto done;
        }
      }
      pos += (size_t)h.arg;
      break;
    }
    default: /* 7: simple values and floats. */
      if (h.ai == 24 && h.arg < 32) {
        rc = EM_DIAG_EMALFORMED; /* Two-byte form of a one-byte simple value. */
        *err_off = pos;
        goto done;
      }
      if (h.ai == 25) {
        put_double(half_to_double((uint16_t)h.arg), out);
      } else if (h.ai == 26) {
        uint32_t bits = (uint32_t)h.arg;
        float f;
        memcpy(&f, &bits, sizeof(f));
        put_double((double)f, out);
      } else if (h.ai == 27) {
        double d;
        memcpy(&d, &h.arg, sizeof(d));
        put_double(d, out);
      } else if (h.arg == 20) {
        fputs("false", out);
      } else if (h.arg == 21) {
        fputs("true", out);
      } else if (h.arg == 22) {
        fputs("null", out);
      } else if (h.arg == 23) {
        fputs("undefined", out);
      } else {
        fprintf(out, "simple(%" PRIu64 ")", h.arg);
      }
      break;
    }
    pos += h.size;
    if (depth == 0) {
      goto complete;
    }
    item_done(&stack[depth - 1]);
  }

complete:
  if (pos != len) {
    rc = EM_DIAG_ETRAILING;
    *err_off = pos;
    goto done;
  }
  rc = 0;
done:
  if (rc == 0 && ferror(out)) {
    rc = -EIO;
  }
  return rc;
}

const char *em_diag_strerror(int rc) {
  switch (rc) {
  case 0:
    return "success";
  case EM_DIAG_EMALFORMED:
    return "not well-formed CBOR";
  case EM_DIAG_ETRUNCATED:
    return "CBOR item truncated";
  case EM_DIAG_EDEPTH:
    return "CBOR items nested too deep";
  case EM_DIAG_ETRAILING:
    return "trailing bytes after the CBOR item";
  default:
    if (rc < 0 && rc > -4096) {
      return strerror(-rc);
    }
    return "unknown error";
  }
}
