/*
 * diag.h - CBOR diagnostic notation (RFC 8949 section 8) of any well-formed CBOR item.
 *
 * Used by `edgemon-cli decode --diag` to show exactly what is on the wire, including messages
 * the schema refuses. Integers print in decimal, byte strings as h'..', text strings quoted
 * with JSON escapes, floats with enough digits to round-trip (and NaN, Infinity, -Infinity),
 * simple values as false/true/null/undefined/simple(n), tags as N(item), indefinite-length
 * items with the _ marker. One line, no trailing newline.
 *
 * Owns nothing beyond the call. Reentrant.
 */
#ifndef EM_DIAG_H
#define EM_DIAG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Errors beside negative errno values. */
#define EM_DIAG_EMALFORMED (-3001) /* Not well-formed CBOR (*err_off says where). */
#define EM_DIAG_ETRUNCATED (-3002) /* Input ends inside an item (*err_off says where). */
#define EM_DIAG_EDEPTH     (-3003) /* Nesting deeper than EM_DIAG_MAX_DEPTH. */
#define EM_DIAG_ETRAILING  (-3004) /* Bytes after the first complete item. */

#define EM_DIAG_MAX_DEPTH 64u

/*
 * Writes the diagnostic notation of the single CBOR item in buf[0..len) to `out`. Returns 0,
 * or an EM_DIAG_E* code with *err_off (may be NULL) set to the byte offset of the problem;
 * on error `out` may hold a partial line. Never reads outside buf.
 */
int em_diag_print(const uint8_t *buf, size_t len, FILE *out, size_t *err_off);

/* Text for an EM_DIAG_E* code or a negative errno. Never NULL. */
const char *em_diag_strerror(int rc);

#endif /* EM_DIAG_H */
