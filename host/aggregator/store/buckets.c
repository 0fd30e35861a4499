/*
 * buckets.c - the store's bucket blob codec (see buckets.h; the layout is in SCHEMA.md,
 * "Bucket blob"). Bytes are assembled one by one, so the blob is little-endian on any host
 * and never read through a misaligned pointer.
 */
#include "buckets.h"

#include <errno.h>

size_t em_buckets_encode(uint8_t *out, const em_stage_t *w) {
  if (!w->buckets) {
    return 0;
  }
  size_t n = w->n_buckets < EM_PROTO_MAX_BUCKETS ? w->n_buckets : EM_PROTO_MAX_BUCKETS;
  for (size_t i = 0; i < n; i++) {
    uint8_t *p = out + i * EM_BUCKETS_RECORD_BYTES;
    uint32_t idx = (uint32_t)w->buckets[i].index;
    uint64_t cnt = w->buckets[i].count;
    for (int b = 0; b < 4; b++) {
      p[b] = (uint8_t)(idx >> (8 * b));
    }
    for (int b = 0; b < 8; b++) {
      p[4 + b] = (uint8_t)(cnt >> (8 * b));
    }
  }
  return n * EM_BUCKETS_RECORD_BYTES;
}

int em_buckets_decode(const uint8_t *blob, size_t len, const em_buckets_figures_t *fig,
                      em_bucket_t *storage, em_stage_t *out) {
  if (!fig || !storage || !out || (!blob && len > 0) || len % EM_BUCKETS_RECORD_BYTES != 0 ||
      len > EM_BUCKETS_BLOB_MAX || fig->count == 0 || fig->scale < EM_PROTO_MIN_SCALE ||
      fig->scale > EM_PROTO_MAX_SCALE) {
    return -EINVAL;
  }
  size_t n = len / EM_BUCKETS_RECORD_BYTES;
  uint64_t total = fig->zero_count;
  for (size_t i = 0; i < n; i++) {
    const uint8_t *p = blob + i * EM_BUCKETS_RECORD_BYTES;
    uint32_t idx = 0;
    uint64_t cnt = 0;
    for (int b = 0; b < 4; b++) {
      idx |= (uint32_t)p[b] << (8 * b);
    }
    for (int b = 0; b < 8; b++) {
      cnt |= (uint64_t)p[4 + b] << (8 * b);
    }
    int32_t index = idx <= INT32_MAX ? (int32_t)idx : -(int32_t)(~idx) - 1;
    if (cnt == 0 || (i > 0 && index <= storage[i - 1].index) || cnt > UINT64_MAX - total) {
      return -EINVAL;
    }
    total += cnt;
    storage[i] = (em_bucket_t){.index = index, .count = cnt};
  }
  if (total != fig->count) {
    return -EINVAL;
  }
  *out = (em_stage_t){.count = fig->count,
                      .sum_ns = fig->sum_ns,
                      .min_ns = fig->min_ns,
                      .max_ns = fig->max_ns,
                      .scale = fig->scale,
                      .zero_count = fig->zero_count,
                      .buckets = n > 0 ? storage : NULL,
                      .n_buckets = n};
  return 0;
}
