/*
 * fuzz_diag.c - libFuzzer harness for the CBOR diagnostic-notation printer (host/lib/diag.c),
 * which `edgemon-cli decode --diag` runs on any bytes it is given. Any input must return 0 or
 * an EM_DIAG_E* code with an error offset inside the input, never crash or read out of bounds.
 */
#include <diag.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *sink;
  if (!sink) {
    sink = fopen("/dev/null", "w");
    if (!sink) {
      abort();
    }
  }
  size_t off = 0;
  int rc = em_diag_print(data, size, sink, &off);
  bool diag_code = rc <= EM_DIAG_EMALFORMED && rc >= EM_DIAG_ETRAILING;
  if (rc != 0 && (!diag_code || off > size)) {
    abort(); /* Only the documented codes, and an offset inside the input. */
  }
  return 0;
}
