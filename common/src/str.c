/*
 * str.c - bounded string helpers (edgemon/common/str.h). Owns nothing; no global state.
 */
#define _POSIX_C_SOURCE 200809L
#include "edgemon/common/str.h"

#include <string.h>

bool em_str_copy(char *dst, size_t cap, const char *src) {
  if (dst == NULL || cap == 0) {
    return false;
  }
  if (src == NULL) {
    dst[0] = '\0';
    return false;
  }
  size_t n = strnlen(src, cap);
  if (n < cap) {
    memcpy(dst, src, n + 1);
    return true;
  }
  memcpy(dst, src, cap - 1);
  dst[cap - 1] = '\0';
  return false;
}

static bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

char *em_str_trim(char *s) {
  while (is_blank(*s)) {
    s++;
  }
  size_t n = strlen(s);
  while (n > 0 && is_blank(s[n - 1])) {
    s[--n] = '\0';
  }
  return s;
}

const char *em_str_quote(char *dst, size_t cap, const char *src, size_t max_chars) {
  size_t limit = cap - 4 < max_chars ? cap - 4 : max_chars;
  size_t n = 0;
  for (; n < limit && src[n] != '\0'; n++) {
    unsigned char c = (unsigned char)src[n];
    dst[n] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
  }
  if (src[n] != '\0') {
    memcpy(dst + n, "...", 3);
    n += 3;
  }
  dst[n] = '\0';
  return dst;
}
