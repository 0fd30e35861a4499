/*
 * device_api.h - what the commands that read a device's breach forensics (flight, profile)
 * share: the --aggregator URL's default and check, one GET of the aggregator's API with the
 * exit codes of cli.h, reading one message's CBOR from --file, the device id check, and
 * publishing a cmd message to the device over MQTT (--take).
 *
 * Owns, for one call: the HTTP answer (until em_http_get_free()), the file's bytes (the
 * caller frees them), the broker session of a publish. Messages name the calling command.
 */
#ifndef EM_CLI_DEVICE_API_H
#define EM_CLI_DEVICE_API_H

#include "http_get.h"
#include "live.h"

#include <edgemon/proto.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EM_CLI_DEFAULT_AGGREGATOR "http://127.0.0.1:9108"

/* Whether s is one device id (the schema's ident, at most EM_TOPIC_MAX_DEVICE bytes): it goes
 * into URLs and topics as it is. */
bool em_cli_device_ok(const char *s);

/* *url: the flag if given, else $EDGEMON_AGGREGATOR, else EM_CLI_DEFAULT_AGGREGATOR; checked.
 * Returns EM_CLI_OK, or EM_CLI_USAGE with the usage error printed. */
int em_cli_aggregator_url(const char *cmd, const char **url);

/* GETs path from the aggregator. Returns EM_CLI_OK with *a filled (status 200), or the exit
 * code with the reason printed (the API's own message for a 4xx or 5xx): EM_CLI_USAGE for a
 * bad URL, EM_CLI_BROKER unreachable or a 5xx, EM_CLI_FAIL a 4xx. */
int em_cli_api_get(const char *cmd, const char *aggregator, double timeout_s, const char *path,
                   em_http_answer_t *a);

/* Reads the file at path, 1..max_bytes long, into *buf (malloc'd, the caller frees it).
 * Returns EM_CLI_OK, or EM_CLI_INPUT with the reason printed (`what` names the content:
 * "a flight recording"). */
int em_cli_read_message_file(const char *cmd, const char *path, size_t max_bytes, const char *what,
                             uint8_t **buf, size_t *len);

/* Encodes the cmd message and publishes it (QoS 1) to edgemon/v1/<device>/cmd/<leaf> through
 * the broker at url, then forgets the credentials in conn, and prints "asked DEVICE for WHAT
 * (TOPIC)". Returns EM_CLI_OK, EM_CLI_FAIL (not encodable) or EM_CLI_BROKER, with the reason
 * printed. */
int em_cli_send_cmd(const char *cmd, em_cli_conn_t *conn, const char *url, const char *device,
                    const em_msg_t *msg, const char *leaf, const char *what);

#endif /* EM_CLI_DEVICE_API_H */
