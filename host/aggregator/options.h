/*
 * options.h - edgemon-aggregator's options: the config file's [aggregator], [remote_write] and
 * [remote_write.NAME] keys and the command-line flags, all from one schema
 * (edgemon/common/schema.h). Every [aggregator] row that is also a flag says so (EM_SCHEMA_FLAG:
 * --name with '-' for '_') and names its value's word (`arg`); the flags, their parsing, the
 * usage text of --help and the file's keys all come from those rows, so adding an option is
 * adding a row (and its line in docs/CONFIG.md, which test_agg_options checks).
 *
 * Owns: nothing past a call; em_agg_config_t is a plain value. Messages go to stderr, as
 * "FILE:LINE: ..." for the file and "edgemon-aggregator: --KEY 'VALUE' ..." for a flag.
 * Single-threaded (main's thread, before anything starts).
 */
#ifndef EDGEMON_AGG_OPTIONS_H
#define EDGEMON_AGG_OPTIONS_H

#include <broker.h>

#include "edgemon/common/credentials.h"
#include "edgemon/common/schema.h"
#include "remote.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define EM_AGG_TEXT_MAX    256 /* Paths, URLs, HOST:PORT, NUL included. */
#define EM_AGG_RW_NAME_MAX 64  /* NAME of [remote_write.NAME], NUL included. */
#define EM_AGG_RW_SECRET_MAX                                                                       \
  4096                      /* A password or bearer token read from its file, NUL included.        \
                             */
#define EM_AGG_MAX_FLAGS 64 /* Rows of [aggregator] at most (each may be a flag). */

/* Sections of the schema, as em_agg_options_schema() takes them. */
#define EM_AGG_SECTION          "aggregator"
#define EM_AGG_SECTION_RW       "remote_write"
#define EM_AGG_SECTION_ENDPOINT "remote_write.<name>"

/* One [remote_write.NAME] section: an endpoint. */
typedef struct {
  char name[EM_AGG_RW_NAME_MAX];
  int line; /* Of its section header, for messages. */
  char url[EM_AGG_TEXT_MAX];
  char ca_file[EM_AGG_TEXT_MAX];
  bool insecure;
  char username[EM_CREDENTIALS_MAX_SECRET];
  char password_file[EM_AGG_TEXT_MAX];
  char bearer_token_file[EM_AGG_TEXT_MAX];
  uint64_t timeout_ns;
  uint64_t queue_requests;
  char password[EM_AGG_RW_SECRET_MAX];     /* Read from password_file once the config is known. */
  char bearer_token[EM_AGG_RW_SECRET_MAX]; /* Read from bearer_token_file. */
} em_agg_endpoint_t;

typedef struct {
  char broker[EM_AGG_TEXT_MAX];
  char share_group[64];
  char client_id[64];
  char db[EM_AGG_TEXT_MAX];
  char http[EM_AGG_TEXT_MAX];
  uint64_t batch_ms;
  uint64_t batch_rows;
  uint64_t retention_s;
  uint64_t downsample_after_s;
  uint64_t downsample_step_s;
  uint64_t device_ttl_s;      /* Forget a device silent for this long; 0 never. */
  uint64_t metrics_max_bytes; /* Cap of the /metrics text. */
  uint64_t flight_max_bytes;  /* Flight recordings' bytes kept per device. */
  uint64_t profile_max_bytes; /* Stack profiles' bytes kept per device. */
  uint64_t api_workers;       /* Store queries of the HTTP API that run at once. */
  /* Flight recordings' and stack profiles' bytes kept of all devices together. */
  uint64_t flight_total_max_bytes;
  uint64_t profile_total_max_bytes;
  char tls_ca_file[EM_AGG_TEXT_MAX];
  char tls_ca_path[EM_AGG_TEXT_MAX];
  char tls_cert_file[EM_AGG_TEXT_MAX];
  char tls_key_file[EM_AGG_TEXT_MAX];
  bool tls_insecure;
  char credentials_file[EM_AGG_TEXT_MAX];
  em_broker_credentials_t creds; /* Read from credentials_file once the options are known. */
  /* [remote_write]: the shared knobs, and its endpoints in the order of their sections. */
  int rw_line; /* Line of the first [remote_write] key or header; 0: none. */
  uint64_t rw_interval_ns;
  char rw_label[64]; /* The aggregator label's value; "": the client id. */
  uint64_t rw_batch_series;
  uint64_t rw_max_request_bytes;
  uint64_t rw_backoff_min_ns;
  uint64_t rw_backoff_max_ns;
  uint64_t rw_drain_ns;
  em_agg_endpoint_t rw[EM_REMOTE_MAX_ENDPOINTS];
  size_t n_rw;
} em_agg_config_t;

/* The command line: what main() does besides the options the flags set. */
typedef struct {
  const char *config;                  /* --config FILE; NULL: none. Borrowed from argv. */
  bool check;                          /* --check */
  const char *value[EM_AGG_MAX_FLAGS]; /* Per [aggregator] row: its flag's value, NULL: not
                                          given ("true" for a flag without a value). */
} em_agg_args_t;

/* What em_agg_options_parse_args() found. */
typedef enum {
  EM_AGG_ARGS_RUN = 0, /* Go on: read the file, then em_agg_options_apply_args(). */
  EM_AGG_ARGS_DONE,    /* --help or --version was printed: exit 0. */
  EM_AGG_ARGS_BAD,     /* A problem was printed (and the usage): exit 2. */
} em_agg_args_result_t;

/*
 * The rows of `section` (EM_AGG_SECTION, EM_AGG_SECTION_RW or EM_AGG_SECTION_ENDPOINT), *n of
 * them; NULL for another section. Static, never freed.
 */
const em_schema_key_t *em_agg_options_schema(const char *section, size_t *n);

/* Every default of [aggregator] and [remote_write] (no endpoint). */
void em_agg_options_defaults(em_agg_config_t *c);

/* Every default of a [remote_write.NAME] endpoint. */
void em_agg_options_endpoint_defaults(em_agg_endpoint_t *e);

/*
 * Stores `value` of `key` of `section` (as em_agg_options_schema() names it) into obj (an
 * em_agg_config_t, or an em_agg_endpoint_t for EM_AGG_SECTION_ENDPOINT). `shown` is the
 * section as messages name it. Returns NULL, or what is wrong with the value (the caller prints
 * "KEY 'VALUE' " before it), or that the key is unknown (with a suggestion); msg[0..cap) may
 * hold the text.
 */
const char *em_agg_options_set(const char *section, const char *shown, void *obj, const char *key,
                               const char *value, char *msg, size_t cap);

/*
 * Reads argv (getopt_long: --config, --check, --version, --help and every row's flag) into
 * *args; prints --help's text or "edgemon-aggregator VERSION" to stdout, or a problem and the
 * usage to stderr.
 */
em_agg_args_result_t em_agg_options_parse_args(int argc, char **argv, const char *version,
                                               em_agg_args_t *args);

/*
 * Applies the flags' values over c (after the file: flags win), in the rows' order. Returns 0,
 * or -EINVAL after printing "edgemon-aggregator: --KEY 'VALUE' WHY" (the key's own spelling,
 * "--batch_ms") for the first bad one.
 */
int em_agg_options_apply_args(const em_agg_args_t *args, em_agg_config_t *c);

/* Writes the usage text (--help) to out: generated from the rows. */
void em_agg_options_usage(FILE *out);

#endif /* EDGEMON_AGG_OPTIONS_H */
