/*
 * wire_vectors.c - the rows of the board-local wire golden vectors (wire_vectors.h): the span
 * datagrams, the level-state records and the model datagrams behind proto/vectors/wire, and the
 * reader of those files. Holds no state.
 */
#include "wire_vectors.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vectors.h"

const em_wire_span_vector_t em_wire_span_vectors[] = {
    {"span", {EM_DGRAM_SPAN, 4242, 1001, 123456789012345u, 8250000, "infer"}},
    {"heartbeat", {EM_DGRAM_HEARTBEAT, 4242, 0, 123456800000000u, 0, "camera.rx"}},
    {"subscribe", {EM_DGRAM_SUBSCRIBE, 4242, 0, 123456900000000u, 0, ""}},
    {"unsubscribe", {EM_DGRAM_UNSUBSCRIBE, 4242, 0, 123457000000000u, 0, ""}},
    {"span_max_stage",
     {EM_DGRAM_SPAN, UINT32_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX,
      "Stage_0123456789.abcdefghi:XY-z"}},
};

const size_t em_wire_span_vector_count =
    sizeof(em_wire_span_vectors) / sizeof(em_wire_span_vectors[0]);

const em_wire_state_vector_t em_wire_state_vectors[] = {
    {"push",
     {EM_LEVEL_DEGRADED, EM_LEVEL_NOMINAL, 3, 5000000000123u, 1718000000123456789u, 41.5, 33.0,
      "infer.p99", "infer", "p99 41.5 ms > 33 ms budget for 3 windows"},
     777,
     false},
    {"push_recovered",
     {EM_LEVEL_NOMINAL, EM_LEVEL_WARN, 4, 9000000000000u, 1718000004000000000u, NAN, NAN, "", "",
      ""},
     777,
     false},
    {"push_max_fields",
     {EM_LEVEL_CRITICAL, EM_LEVEL_CRITICAL, UINT32_MAX, UINT64_MAX, UINT64_MAX, 1e-300, 0.1,
      " !\"#$%&'()*+,-./0123456789:;<=>", "Stage_0123456789.abcdefghi:XY-z",
      "?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~ "
      "the quick brown fox jumps over the lazy dog; printable ASCII 135 bytes"},
     UINT32_MAX,
     false},
    {"page",
     {EM_LEVEL_CRITICAL, EM_LEVEL_DEGRADED, 5, 7000000000000u, 1718000002000000000u, NAN,
      2000000000.0, "preprocess.alive", "preprocess",
      "stall: no span from stage preprocess for 2000 ms"},
     777,
     true},
};

const size_t em_wire_state_vector_count =
    sizeof(em_wire_state_vectors) / sizeof(em_wire_state_vectors[0]);

/* Model datagram v2 rows: two labels, none, and every field at its longest. */
static const em_label_t model_labels_full[] = {{"site", "lab-3"}, {"variant", "full"}};
static const em_label_t model_labels_max[] = {
    {"A_key_15_bytes_", "value of 31 printable bytes !~ "},
    {"a1", "1"},
    {"b", " "},
    {"c", "~"},
    {"d", "x"},
    {"e", "y"},
    {"f", "z"},
    {"zzzzzzzzzzzzzzz", "0123456789012345678901234567890"},
};

const em_wire_model_vector_t em_wire_model_vectors[] = {
    {"model", {"mobilenet_v3_small", "1.4", model_labels_full, 2}, 4242, 1},
    {"model_no_labels", {"resnet18", "2024-05-01", NULL, 0}, 4242, 7},
    {"model_max_fields",
     {" !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^",
      "`abcdefghijklmnopqrstuvwxyz{|}~", model_labels_max, 8},
     UINT32_MAX,
     UINT32_MAX},
};

const size_t em_wire_model_vector_count =
    sizeof(em_wire_model_vectors) / sizeof(em_wire_model_vectors[0]);

int em_wire_vector_read(const char *dir, const char *name, uint8_t *buf, size_t cap, size_t *len) {
  char wire_dir[1024];
  int n = snprintf(wire_dir, sizeof(wire_dir), "%s/wire", dir);
  if (n < 0 || (size_t)n >= sizeof(wire_dir)) {
    return -ENAMETOOLONG;
  }
  size_t got = 0;
  errno = 0;
  uint8_t *bytes = em_vector_file(wire_dir, name, "bin", &got);
  if (bytes == NULL) {
    return errno != 0 ? -errno : -EIO;
  }
  if (got > cap) {
    free(bytes);
    return -EFBIG;
  }
  memcpy(buf, bytes, got);
  free(bytes);
  *len = got;
  return 0;
}
