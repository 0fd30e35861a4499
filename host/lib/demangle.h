/*
 * demangle.h - C++ symbol names as people read them, for what the host shows of a profile (a
 * table, a flame graph, folded stacks, pprof's function names). The agent sends the names as
 * the target's symbol tables hold them ("_ZN2at6native6conv2dERKNS_6TensorE..."), exact and
 * compact; the host turns an Itanium ABI name into "at::native::conv2d" with the C++ runtime's
 * own demangler (abi::__cxa_demangle: the one implementation that tracks the ABI), its
 * parameter list left out: a flame graph frame is a function, not an overload signature.
 *
 * Owns nothing; reentrant.
 */
#ifndef EDGEMON_HOST_DEMANGLE_H
#define EDGEMON_HOST_DEMANGLE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Writes the readable form of name into out (cap bytes, NUL-terminated, cut on a UTF-8
 * boundary when longer) and returns its length; 0 when name is not a mangled C++ name (it
 * does not start with "_Z", or the demangler refuses it) and out is left untouched.
 */
size_t em_demangle(const char *name, char *out, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* EDGEMON_HOST_DEMANGLE_H */
