/*
 * device_api.c - the aggregator and broker plumbing of flight and profile (see device_api.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "device_api.h"

#include "cli.h"

#include <broker.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ID_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-"

bool em_cli_device_ok(const char *s) {
  return s && *s && strspn(s, ID_CHARS) == strlen(s) && strlen(s) <= EM_TOPIC_MAX_DEVICE;
}

int em_cli_aggregator_url(const char *cmd, const char **url) {
  if (!*url) {
    const char *env = getenv("EDGEMON_AGGREGATOR");
    *url = env && *env ? env : EM_CLI_DEFAULT_AGGREGATOR;
  }
  char err[256];
  if (em_http_get_check(*url, err, sizeof(err)) != EM_HTTP_GET_OK) {
    return em_cli_usage_error(cmd, "--aggregator: %s", err);
  }
  return EM_CLI_OK;
}

int em_cli_api_get(const char *cmd, const char *aggregator, double timeout_s, const char *path,
                   em_http_answer_t *a) {
  char err[512];
  int rc = em_http_get(aggregator, path, (int)(timeout_s * 1000), a, err, sizeof(err));
  if (rc != EM_HTTP_GET_OK) {
    em_cli_error(cmd, "aggregator %s: %s", aggregator, err);
    return rc == EM_HTTP_GET_BAD_URL ? EM_CLI_USAGE : EM_CLI_BROKER;
  }
  if (a->status != 200) {
    em_cli_error(cmd, "aggregator %s answered %d to %s: %.300s", aggregator, a->status, path,
                 a->body);
    int status = a->status;
    em_http_get_free(a);
    return status >= 500 ? EM_CLI_BROKER : EM_CLI_FAIL;
  }
  return EM_CLI_OK;
}

int em_cli_read_message_file(const char *cmd, const char *path, size_t max_bytes, const char *what,
                             uint8_t **buf, size_t *len) {
  *buf = NULL;
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) {
    em_cli_error(cmd, "cannot open %s: %s", path, strerror(errno));
    return EM_CLI_INPUT;
  }
  *buf = malloc(max_bytes + 1);
  *len = *buf ? fread(*buf, 1, max_bytes + 1, f) : 0;
  bool bad = ferror(f) != 0;
  fclose(f);
  if (!*buf || bad || *len == 0 || *len > max_bytes) {
    if (!*buf || bad) {
      em_cli_error(cmd, "%s: %s", path, !*buf ? "out of memory" : "read error");
    } else {
      em_cli_error(cmd, "%s: empty, or larger than %s can be", path, what);
    }
    free(*buf);
    *buf = NULL;
    return EM_CLI_INPUT;
  }
  return EM_CLI_OK;
}

int em_cli_send_cmd(const char *cmd, em_cli_conn_t *conn, const char *url, const char *device,
                    const em_msg_t *msg, const char *leaf, const char *what) {
  uint8_t buf[64];
  size_t len = 0;
  if (em_proto_encode(msg, buf, sizeof(buf), &len) != 0) {
    em_cli_error(cmd, "cannot encode cmd/%s", leaf);
    return EM_CLI_FAIL;
  }
  char client[64];
  snprintf(client, sizeof(client), "edgemon-cli-%s", cmd);
  em_broker_opts_t bo = em_cli_conn_opts(conn, client);
  em_broker_t *b = NULL;
  char err[512] = "";
  int rc = em_broker_connect_opts(&b, url, &bo, NULL, NULL, 5.0, err, sizeof(err));
  em_cli_conn_forget(conn);
  if (rc != 0) {
    em_cli_error(cmd, "%s", err[0] ? err : strerror(-rc));
    return EM_CLI_BROKER;
  }
  char topic[128];
  snprintf(topic, sizeof(topic), "edgemon/v1/%s/cmd/%s", device, leaf);
  rc = em_broker_publish(b, topic, buf, len, 1, false);
  if (rc == 0) {
    rc = em_broker_drain(b, 5.0);
  }
  em_broker_free(b);
  if (rc != 0) {
    em_cli_error(cmd, "the broker at %s did not take cmd/%s: %s", url, leaf, strerror(-rc));
    return EM_CLI_BROKER;
  }
  printf("asked %s for %s (%s)\n", device, what, topic);
  return EM_CLI_OK;
}
