/*
 * fuzz_gpumem.c - libFuzzer harness for the nvmap clients parser of
 * firmware/agent/collect/gpumem.c.
 *
 * Any bytes, parsed three times: for no pid, for the pids 1 and 42, and for those and 1234:
 * each answer is 0 or -EINVAL and the same for all three (which pids are asked for never
 * decides whether the text parses); a refused text leaves its record all zero; an accepted one
 * has the same total each time, no bytes without a client line, none at all for no pid, and
 * a sum and a count that do not shrink when a pid is added. libFuzzer's input is a heap buffer
 * of exactly `size` bytes, so AddressSanitizer sees an over-read. Seeds: tests/fuzz/corpus/
 * gpumem (the board fixtures' files and variants).
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "gpumem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok) {
  if (!ok) {
    abort();
  }
}

static int parse(const char *text, size_t size, const pid_t *pids, size_t n, em_gpumem_nvmap_t *r) {
  memset(r, 0xa5, sizeof(*r));
  int rc = em_gpumem_parse_nvmap(text, size, pids, n, r);
  check(rc == 0 || rc == -EINVAL);
  if (rc != 0) {
    check(r->bytes == 0 && r->clients == 0 && r->total_bytes == 0);
  }
  check(r->clients != 0 || r->bytes == 0);
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  static const pid_t pids[] = {1, 42, 1234};
  em_gpumem_nvmap_t none, two, three;
  int rc_none = parse(text, size, NULL, 0, &none);
  int rc_two = parse(text, size, pids, 2, &two);
  int rc_three = parse(text, size, pids, 3, &three);
  check(rc_none == rc_two && rc_two == rc_three);
  if (rc_none != 0) {
    return 0;
  }
  check(none.bytes == 0 && none.clients == 0);
  check(none.total_bytes == two.total_bytes && two.total_bytes == three.total_bytes);
  check(three.bytes >= two.bytes && three.clients >= two.clients);
  return 0;
}
