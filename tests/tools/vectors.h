/*
 * vectors.h - the golden vector rows: each a message struct (or a flight recording) and the file
 * name its encoding and JSON have under proto/vectors/. Shared by the generator (em-vectors) and
 * the unit tests, so the committed files, the encoder and the decoder are checked against the same
 * rows.
 */
#ifndef EDGEMON_TEST_VECTORS_H
#define EDGEMON_TEST_VECTORS_H

#include <stddef.h>
#include <stdint.h>

#include "edgemon/flight.h"
#include "edgemon/profile.h"
#include "edgemon/proto.h"

/* Initializers of em_value_t. */
#define U(x)                                                                                       \
  { .type = EM_VALUE_UINT, .as.u = (x) }
#define I(x)                                                                                       \
  { .type = EM_VALUE_INT, .as.i = (x) }
#define F(x)                                                                                       \
  { .type = EM_VALUE_FLOAT, .as.f = (x) }
#define ABSENT                                                                                     \
  { .type = EM_VALUE_ABSENT }

typedef struct {
  const char *name; /* File stem: proto/vectors/<name>.cbor and .json */
  const char *what; /* One line on what the vector covers. */
  em_msg_t msg;
} em_vector_t;

/* The rows, built on first call (the largest-message row fills static arrays). */
const em_vector_t *em_vectors(size_t *count);

/*
 * DIR/<stem>.<ext> in a malloc'd buffer with a NUL after its *len bytes, or NULL (errno set)
 * when it cannot be read.
 */
uint8_t *em_vector_file(const char *dir, const char *stem, const char *ext, size_t *len);

/* A flight recording's row (edgemon/flight.h): proto/vectors/<name>.cbor and .json. */
typedef struct {
  const char *name;
  const char *what;
  em_flight_t flight;
} em_flight_vector_t;

/* The flight recordings' rows (flight_vectors.c). */
const em_flight_vector_t *em_flight_vectors(size_t *count);

/* The verdict flight_verdict and state_verdict carry (flight_vectors.c). */
extern const em_proto_verdict_t em_vector_verdict;

/* A stack profile's row (edgemon/profile.h): proto/vectors/<name>.cbor and .json. */
typedef struct {
  const char *name;
  const char *what;
  em_profile_t profile;
} em_profile_vector_t;

/* The stack profiles' rows (profile_vectors.c). */
const em_profile_vector_t *em_profile_vectors(size_t *count);

#endif /* EDGEMON_TEST_VECTORS_H */
