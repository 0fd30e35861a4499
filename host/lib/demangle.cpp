// demangle.cpp - see demangle.h. The one C++ file of the host programs: the demangler lives in
// the C++ runtime.
#include "demangle.h"

#include <cxxabi.h>

#include <cstdlib>
#include <cstring>

namespace {

// The length of s without its trailing parameter list: the '(' that opens the last top-level
// parenthesised group ending the name (" const", "&" and "&&" after it included). A name that
// does not end in one (a variable, a "{lambda()#1}" in the middle) is kept whole.
size_t without_params(const char *s, size_t n) {
  size_t end = n;
  while (end > 0 && s[end - 1] != ')') {
    end--;
  }
  if (end == 0 || n - end > 10) { // " const &&" at most after the parameters.
    return n;
  }
  int depth = 0;
  for (size_t i = end; i > 0; i--) {
    char c = s[i - 1];
    if (c == ')') {
      depth++;
    } else if (c == '(') {
      depth--;
      if (depth == 0) {
        return i - 1 > 0 ? i - 1 : n;
      }
    }
  }
  return n;
}

} // namespace

extern "C" size_t em_demangle(const char *name, char *out, size_t cap) {
  if (!name || !out || cap == 0 || std::strncmp(name, "_Z", 2) != 0) {
    return 0;
  }
  int status = -1;
  char *d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (!d || status != 0) {
    std::free(d);
    return 0;
  }
  size_t n = without_params(d, std::strlen(d));
  if (n >= cap) {
    n = cap - 1;
    while (n > 0 && (static_cast<unsigned char>(d[n]) & 0xC0u) == 0x80u) {
      n--;
    }
  }
  std::memcpy(out, d, n);
  out[n] = '\0';
  std::free(d);
  return n;
}
