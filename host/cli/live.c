/*
 * live.c - the broker session and options shared by tail, status and record (see live.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "live.h"

#include "cli.h"
#include "view.h"

#include <errno.h>
#include <fnmatch.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

/* Characters that make --device a glob (or that MQTT gives a meaning in a topic filter). */
#define GLOB_CHARS "*?[\\+#"

int em_cli_conn_option(em_cli_conn_t *c, int code, const char *arg) {
  switch (code) {
  case EM_CLI_O_CAFILE:
    c->ca_file = arg;
    return EM_CLI_OK;
  case EM_CLI_O_CAPATH:
    c->ca_path = arg;
    return EM_CLI_OK;
  case EM_CLI_O_CERT:
    c->cert_file = arg;
    return EM_CLI_OK;
  case EM_CLI_O_KEY:
    c->key_file = arg;
    return EM_CLI_OK;
  case EM_CLI_O_CREDENTIALS:
    c->credentials_file = arg;
    return EM_CLI_OK;
  case EM_CLI_O_INSECURE:
    c->insecure = true;
    return EM_CLI_OK;
  default:
    return -1;
  }
}

em_broker_opts_t em_cli_conn_opts(const em_cli_conn_t *c, const char *client_prefix) {
  em_broker_opts_t o = {
      .client_prefix = client_prefix,
      .tls_ca_file = c->ca_file,
      .tls_ca_path = c->ca_path,
      .tls_cert_file = c->cert_file,
      .tls_key_file = c->key_file,
      .tls_insecure = c->insecure,
      .username = c->creds.username[0] ? c->creds.username : NULL,
      .password = c->creds.password[0] ? c->creds.password : NULL,
  };
  return o;
}

int em_cli_conn_check(em_cli_conn_t *c, const char *cmd, const char *url) {
  char err[512];
  em_broker_url_t u;
  if (em_broker_parse_url(url, &u, err, sizeof(err)) != 0) {
    return em_cli_usage_error(cmd, "%s", err);
  }
  if (c->credentials_file &&
      em_broker_read_credentials(c->credentials_file, &c->creds, err, sizeof(err)) != 0) {
    return em_cli_usage_error(cmd, "--credentials: %s", err);
  }
  em_broker_opts_t o = em_cli_conn_opts(c, NULL);
  if (em_broker_check_opts(&u, &o, err, sizeof(err)) != 0) {
    em_cli_conn_forget(c);
    return em_cli_usage_error(cmd, "%s", err);
  }
  return EM_CLI_OK;
}

void em_cli_conn_forget(em_cli_conn_t *c) {
  memset(&c->creds, 0, sizeof(c->creds));
}

int em_cli_live_option(em_cli_live_t *l, int c, const char *arg) {
  if (em_cli_conn_option(&l->conn, c, arg) == EM_CLI_OK) {
    return EM_CLI_OK;
  }
  switch (c) {
  case 'b':
    l->url = arg;
    return EM_CLI_OK;
  case 'd':
    l->device = arg;
    return EM_CLI_OK;
  case 'c':
    l->color = arg;
    return EM_CLI_OK;
  case 'n': {
    static const em_cli_number_t count = {.min = 1, .max = EM_CLI_MAX_COUNT, .whole = true};
    double n = 0;
    int rc = em_cli_number_option(l->cmd, "--count", arg, &count, &n);
    l->count = rc == EM_CLI_OK ? (uint64_t)n : l->count;
    return rc;
  }
  case 't': {
    static const em_cli_number_t duration = {
        .min = 0, .max = EM_CLI_MAX_SECONDS, .above_min = true, .duration = true};
    return em_cli_number_option(l->cmd, "--duration", arg, &duration, &l->duration_s);
  }
  default:
    return -1;
  }
}

int em_cli_live_next(em_cli_live_t *l, int argc, char **argv, const struct option *opts, int *c) {
  for (;;) {
    *c = getopt_long(argc, argv, "", opts, NULL);
    if (*c == -1) {
      return EM_CLI_OK;
    }
    int rc = em_cli_live_option(l, *c, optarg);
    if (rc < 0) {
      return EM_CLI_OK;
    }
    if (rc != EM_CLI_OK) {
      return rc;
    }
  }
}

int em_cli_live_check(em_cli_live_t *l, int argc, char **argv) {
  if (optind < argc) {
    return em_cli_usage_error(l->cmd, "unexpected argument '%s'", argv[optind]);
  }
  const char *color = l->color ? l->color : "auto";
  if (!em_view_set_color(color)) {
    return em_cli_usage_error(l->cmd, "--color wants auto, always or never, not '%s'", color);
  }
  const char *d = l->device;
  if (d && (!*d || strchr(d, '/') || strlen(d) > EM_TOPIC_MAX_DEVICE)) {
    return em_cli_usage_error(l->cmd, "--device wants a device id or glob, not '%s'", d);
  }
  l->url = em_cli_broker_url(l->url);
  em_broker_url_t parsed;
  char err[512];
  if (em_broker_parse_url(l->url, &parsed, err, sizeof(err)) != 0) {
    return em_cli_usage_error(l->cmd, "%s", err);
  }
  return em_cli_conn_check(&l->conn, l->cmd, l->url);
}

bool em_cli_live_wants(const em_cli_live_t *l, const char *id) {
  return !l->device || fnmatch(l->device, id, 0) == 0;
}

int em_cli_live_connect(em_cli_live_t *l, em_broker_msg_fn on_message, void *ctx) {
  char prefix[32];
  char err[512] = "";
  snprintf(prefix, sizeof(prefix), "edgemon-cli-%s", l->cmd);
  em_broker_opts_t opts = em_cli_conn_opts(&l->conn, prefix);
  int rc =
      em_broker_connect_opts(&l->broker, l->url, &opts, on_message, ctx, 5.0, err, sizeof(err));
  em_cli_conn_forget(&l->conn);
  if (rc != 0) {
    em_cli_error(l->cmd, "%s", err[0] ? err : strerror(-rc));
    return EM_CLI_BROKER;
  }
  l->deadline_ns = l->duration_s > 0 ? em_cli_mono_ns() + (uint64_t)(l->duration_s * 1e9) : 0;
  return EM_CLI_OK;
}

int em_cli_live_subscribe(em_cli_live_t *l, const char *kind) {
  char pattern[128];
  bool one = l->device && strpbrk(l->device, GLOB_CHARS) == NULL;
  snprintf(pattern, sizeof(pattern), "edgemon/v1/%s/%s", one ? l->device : "+", kind);
  int rc = em_broker_subscribe(l->broker, pattern);
  if (rc != 0) {
    em_cli_error(l->cmd, "cannot subscribe to %s: %s", pattern,
                 rc == -EPERM ? "refused by the broker" : strerror(-rc));
    return EM_CLI_BROKER;
  }
  return EM_CLI_OK;
}

bool em_cli_live_over(const em_cli_live_t *l) {
  return em_cli_stop || (l->deadline_ns && em_cli_mono_ns() >= l->deadline_ns);
}

int em_cli_live_step(em_cli_live_t *l, uint64_t max_ms) {
  uint64_t now = em_cli_mono_ns();
  if (l->deadline_ns) {
    uint64_t left_ms = l->deadline_ns > now ? (l->deadline_ns - now) / 1000000u + 1 : 0;
    max_ms = left_ms < max_ms ? left_ms : max_ms;
  }
  if (em_broker_run(l->broker, (int)(max_ms > 1000 ? 1000 : max_ms)) != 0) {
    em_cli_error(l->cmd, "lost the connection to the broker at %s", l->url);
    return EM_CLI_BROKER;
  }
  return EM_CLI_OK;
}

void em_cli_live_close(em_cli_live_t *l) {
  if (l->broker) {
    (void)em_broker_drain(l->broker, 1.0);
  }
  em_broker_free(l->broker);
  l->broker = NULL;
}
