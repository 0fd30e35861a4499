/*
 * pb.h - a minimal protocol buffers writer: the wire format only (varint, zigzag sint, fixed64
 * double, length-delimited bytes and submessages), into one bounded growable buffer.
 *
 * Enough for the messages edgemon writes (io.prometheus.client.MetricFamily for the protobuf
 * exposition, see prom_expo.h). Writing only: nothing here parses untrusted bytes.
 *
 * Errors are sticky: the first failure (-ENOMEM, -EOVERFLOW, -EINVAL) is kept in the writer,
 * every later call returns it and writes nothing, so a caller may check once at the end
 * (em_pb_error) or after each call. em_pb_reset clears it.
 *
 * Caller-owned value (em_pb_init/em_pb_deinit); the writer owns its heap buffer. Not
 * thread-safe.
 */
#ifndef EM_PB_H
#define EM_PB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EM_PB_MAX_DEPTH     8           /* Nested open submessages (em_pb_begin). */
#define EM_PB_MAX_FIELD     0x1FFFFFFFu /* Largest field number the wire format allows. */
#define EM_PB_VARINT_MAX    10          /* Bytes of the longest varint (a 64-bit value). */
#define EM_PB_MIN_CAP_BYTES 256         /* First allocation. */

/* Wire types (the low 3 bits of a tag). */
#define EM_PB_WIRE_VARINT  0
#define EM_PB_WIRE_FIXED64 1
#define EM_PB_WIRE_LEN     2

typedef struct {
  uint8_t *data;                 /* Heap, cap_bytes long; NULL before the first write. */
  size_t len_bytes;              /* Bytes written. */
  size_t cap_bytes;              /* Bytes allocated. */
  size_t max_bytes;              /* Hard cap on len_bytes (and on cap_bytes). */
  int err;                       /* First error, sticky; 0 when none. */
  size_t depth;                  /* Open submessages. */
  size_t start[EM_PB_MAX_DEPTH]; /* Where each open submessage's body starts. */
} em_pb_t;

/* Empties pb with a cap of max_bytes (at least 1). Allocates nothing yet. Returns 0 or
 * -EINVAL. */
int em_pb_init(em_pb_t *pb, size_t max_bytes);

/* Frees the buffer. pb may be NULL. pb is empty (and must be init'ed again) afterwards. */
void em_pb_deinit(em_pb_t *pb);

/* Forgets what was written and the sticky error; keeps the buffer for reuse. */
void em_pb_reset(em_pb_t *pb);

/* The sticky error (0, -ENOMEM, -EOVERFLOW or -EINVAL). */
int em_pb_error(const em_pb_t *pb);

/* The bytes written so far (borrowed; valid until the next write, reset or deinit) and their
 * count in *len_bytes. NULL with *len_bytes 0 when nothing was written. */
const uint8_t *em_pb_data(const em_pb_t *pb, size_t *len_bytes);

/* Encodes v as a varint into out (EM_PB_VARINT_MAX bytes); returns the bytes used (1..10). */
size_t em_pb_varint_encode(uint8_t out[EM_PB_VARINT_MAX], uint64_t v);

/* The zigzag mapping of sint32/sint64: 0, -1, 1, -2, ... to 0, 1, 2, 3, ... */
uint64_t em_pb_zigzag(int64_t v);

/*
 * Field writers. Each writes the tag (field << 3 | wire type) then the value. field must be in
 * 1..EM_PB_MAX_FIELD. Every one returns 0, -EINVAL (field out of range, NULL data with a
 * length), -EOVERFLOW (the buffer would pass max_bytes), -ENOMEM, or the sticky error. On
 * failure nothing of the field stays in the buffer.
 */
int em_pb_uint(em_pb_t *pb, uint32_t field, uint64_t v); /* uint32/uint64/enum/bool */
int em_pb_int(em_pb_t *pb, uint32_t field, int64_t v);   /* int32/int64 (two's complement) */
int em_pb_sint(em_pb_t *pb, uint32_t field, int64_t v);  /* sint32/sint64 (zigzag) */
int em_pb_double(em_pb_t *pb, uint32_t field, double v); /* double (fixed64, little-endian) */
int em_pb_bytes(em_pb_t *pb, uint32_t field, const void *data, size_t len_bytes);
int em_pb_string(em_pb_t *pb, uint32_t field, const char *s); /* NUL-terminated; NULL: "" */

/*
 * Opens a length-delimited submessage as field `field`, or, with field 0, a bare varint
 * length prefix (the framing of a delimited stream of messages). Fields written until the
 * matching em_pb_end form its body. The length is written by em_pb_end, which moves the body
 * up by the size of the length varint (a submessage costs one copy of its body per level).
 * Returns 0, -EINVAL (field out of range), -EOVERFLOW (more than EM_PB_MAX_DEPTH open), or the
 * sticky error.
 */
int em_pb_begin(em_pb_t *pb, uint32_t field);

/* Closes the innermost open submessage. Returns 0, -EINVAL (none open), -EOVERFLOW,
 * -ENOMEM, or the sticky error. */
int em_pb_end(em_pb_t *pb);

#ifdef __cplusplus
}
#endif

#endif /* EM_PB_H */
