/*
 * flight_list.h - the aggregator's list of a device's flight recordings
 * (GET /api/devices/<id>/flights, host/README.md), or of its profiles (.../profiles), read
 * back by edgemon-cli flight and profile: the fields the commands use of each entry, picked
 * out of the answer's JSON. The answer's layout is the aggregator's own (forensic_api.c): an
 * object per entry, each beginning with "key", strings escaped, so a field name can only match
 * as a field. forensic_cmd.c prints it (--list).
 *
 * Owns the entry array em_api_list_parse() allocates (em_flight_list_free()).
 */
#ifndef EM_CLI_FLIGHT_LIST_H
#define EM_CLI_FLIGHT_LIST_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  char key[32]; /* "<session>-<number>" */
  uint64_t time_ns;
  char cause[16];
  char level[16];
  char rule[64];
  uint64_t ticks;
  uint64_t spans;
  uint64_t bytes;
  uint64_t samples; /* A profile's samples; 0 in a list of recordings. */
  uint64_t stacks;  /* A profile's stacks; 0 in a list of recordings. */
  int historical;
} em_flight_entry_t;

typedef struct {
  em_flight_entry_t *v; /* In the answer's order: newest first. */
  size_t n;
} em_flight_list_t;

/* Parses a list answer of the API ({"<array>":[{"key":"...",...},...]}): array "flights"
 * (GET /api/devices/<id>/flights) or "profiles" (.../profiles). Returns 0, -EINVAL when it is
 * not one, -ENOMEM. */
int em_api_list_parse(const char *json, const char *array, em_flight_list_t *out);
void em_flight_list_free(em_flight_list_t *l);

/* The entry whose time is nearest t_ns (the newer on a tie), or NULL for an empty list. */
const em_flight_entry_t *em_flight_list_nearest(const em_flight_list_t *l, uint64_t t_ns);

#endif /* EM_CLI_FLIGHT_LIST_H */
