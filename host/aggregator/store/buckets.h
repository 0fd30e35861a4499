/*
 * buckets.h - the bucket blob of the SQLite store (SCHEMA.md, "Bucket blob"): a stage window's
 * non-empty histogram buckets as 12-byte little-endian records (int32 index, uint64 count) in
 * ascending index order, no header. This module owns the codec: encoding an em_stage_t's
 * buckets into a blob, and decoding a blob with the row's scale, zero count, count, sum, min
 * and max back into an em_stage_t that em_histo_add_stage() (host/lib/histo.h) can merge. A
 * decoded blob is checked as strictly as a decoded message: a malformed one is refused, never
 * half-read.
 */
#ifndef EM_AGG_BUCKETS_H
#define EM_AGG_BUCKETS_H

#include <edgemon/proto.h>
#include <stddef.h>
#include <stdint.h>

#define EM_BUCKETS_RECORD_BYTES 12u
/* The largest blob: EM_PROTO_MAX_BUCKETS records. */
#define EM_BUCKETS_BLOB_MAX ((size_t)EM_PROTO_MAX_BUCKETS * EM_BUCKETS_RECORD_BYTES)

/* The columns of a stored window or rollup row that go with its blob. */
typedef struct {
  int32_t scale;       /* EM_PROTO_MIN_SCALE..EM_PROTO_MAX_SCALE */
  uint64_t zero_count; /* Spans of 0 ns. */
  uint64_t count;      /* Spans in all (>= 1). */
  uint64_t sum_ns;
  uint64_t min_ns;
  uint64_t max_ns;
} em_buckets_figures_t;

/* Writes w's buckets (at most EM_PROTO_MAX_BUCKETS) into out, which holds EM_BUCKETS_BLOB_MAX
 * bytes, and returns the blob's length in bytes (0 for a window without buckets). */
size_t em_buckets_encode(uint8_t *out, const em_stage_t *w);

/*
 * Decodes blob[0..len) (blob may be NULL when len is 0, as SQLite returns an empty blob) with
 * its row's figures into *out: out->buckets points into storage, which holds
 * EM_PROTO_MAX_BUCKETS buckets; out->name is NULL and the percentiles 0 (a blob does not carry
 * them). Returns 0, or -EINVAL for a malformed blob or figures: length not a multiple of 12,
 * more than EM_PROTO_MAX_BUCKETS buckets, count 0, a bucket count of 0, indexes not strictly
 * ascending, bucket counts + zero_count != count, scale out of range.
 */
int em_buckets_decode(const uint8_t *blob, size_t len, const em_buckets_figures_t *fig,
                      em_bucket_t *storage, em_stage_t *out);

#endif /* EM_AGG_BUCKETS_H */
