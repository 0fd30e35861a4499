/*
 * broker_urls.h - the broker URLs every parser of them must agree on: em_parse_mqtt_url()
 * (common/), em_config_parse_broker() (the agent's config) and em_broker_parse_url() (host/lib)
 * all read "mqtt[s]://host[:port][/]" through the same rules, so one table serves their tests.
 *
 * Header-only data for cmocka tests: each row is a URL, the result expected (0 or -EINVAL), and
 * for an accepted URL its host, port and whether it asks for TLS; for a refused one, the start
 * of the reason em_parse_mqtt_url() gives. Owns nothing; every string is a literal.
 */
#ifndef EDGEMON_TESTS_UNIT_BROKER_URLS_H
#define EDGEMON_TESTS_UNIT_BROKER_URLS_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct {
  const char *url;
  int rc;           /* 0 or -EINVAL. */
  const char *host; /* Accepted URLs: the host, brackets removed. */
  uint16_t port;    /* Accepted URLs: the port, 1883 or 8883 when not given. */
  bool tls;         /* Accepted URLs: mqtts://. */
  const char *why;  /* Refused URLs: the start of the reason. */
} em_test_broker_url_t;

static const em_test_broker_url_t em_test_broker_urls[] = {
    {"mqtt://127.0.0.1:1883", 0, "127.0.0.1", 1883, false, NULL},
    {"mqtt://broker", 0, "broker", 1883, false, NULL},
    {"mqtt://localhost", 0, "localhost", 1883, false, NULL},
    {"mqtt://broker.lan:1", 0, "broker.lan", 1, false, NULL},
    {"mqtt://broker_1:65535", 0, "broker_1", 65535, false, NULL},
    {"mqtt://[::1]", 0, "::1", 1883, false, NULL},
    {"mqtt://[::1]:8883", 0, "::1", 8883, false, NULL},
    {"mqtt://[fe80::1]:8883", 0, "fe80::1", 8883, false, NULL},
    {"mqtts://broker", 0, "broker", 8883, true, NULL},
    {"mqtts://broker:18883", 0, "broker", 18883, true, NULL},
    {"mqtts://host", 0, "host", 8883, true, NULL},
    {"mqtts://host:8884", 0, "host", 8884, true, NULL},
    {"mqtts://[::1]", 0, "::1", 8883, true, NULL},
    /* One trailing '/' (the empty path) everywhere: after a host, a port, an IPv6 literal. */
    {"mqtt://broker/", 0, "broker", 1883, false, NULL},
    {"mqtt://broker:1883/", 0, "broker", 1883, false, NULL},
    {"mqtt://host:1/", 0, "host", 1, false, NULL},
    {"mqtts://[::1]:8884/", 0, "::1", 8884, true, NULL},
    {"mqtt://broker//", -EINVAL, NULL, 0, false, "has an unexpected character"},
    {"mqtt://broker:1883//", -EINVAL, NULL, 0, false, "has a bad port"},
    {"mqtt://broker/x", -EINVAL, NULL, 0, false, "has an unexpected character"},
    {"mqtt://broker:1883/path", -EINVAL, NULL, 0, false, "has a bad port"},
    {"mqtt://host:1883/path", -EINVAL, NULL, 0, false, "has a bad port"},
    {"mqtt://", -EINVAL, NULL, 0, false, "has no host"},
    {"mqtts://", -EINVAL, NULL, 0, false, "has no host"},
    {"mqtt:///", -EINVAL, NULL, 0, false, "has no host"},
    {"mqtt://:1883", -EINVAL, NULL, 0, false, "has no host"},
    {"mqtt://broker:", -EINVAL, NULL, 0, false, "has a bad port"},
    {"mqtt://broker:0", -EINVAL, NULL, 0, false, "has a bad port"},
    {"mqtt://broker:65536", -EINVAL, NULL, 0, false, "has a bad port"},
    {"mqtt://host:0", -EINVAL, NULL, 0, false, "has a bad port"},
    {"mqtt://host:65536", -EINVAL, NULL, 0, false, "has a bad port"},
    {"mqtt://broker:99999999999999999999", -EINVAL, NULL, 0, false, "has a bad port"},
    {"mqtt://broker:-1", -EINVAL, NULL, 0, false, "has a bad port"},
    {"mqtt://broker:18x3", -EINVAL, NULL, 0, false, "has a bad port"},
    {"mqtt://host:x", -EINVAL, NULL, 0, false, "has a bad port"},
    {"mqtt://user@broker", -EINVAL, NULL, 0, false, "has credentials"},
    {"mqtts://user:pw@broker", -EINVAL, NULL, 0, false, "has credentials"},
    {"mqtt://bro ker", -EINVAL, NULL, 0, false, "has an unexpected character"},
    {"mqtt://[::1", -EINVAL, NULL, 0, false, "has a bad IPv6"},
    {"mqtt://[]:1883", -EINVAL, NULL, 0, false, "has a bad IPv6"},
    {"mqtt://[::1]x", -EINVAL, NULL, 0, false, "has an unexpected character"},
    {"MQTT://broker", -EINVAL, NULL, 0, false, "must look like"},
    {"tcp://broker", -EINVAL, NULL, 0, false, "must look like"},
    {"tcp://host", -EINVAL, NULL, 0, false, "must look like"},
    {"broker:1883", -EINVAL, NULL, 0, false, "must look like"},
    {"", -EINVAL, NULL, 0, false, "must look like"},
};

#endif /* EDGEMON_TESTS_UNIT_BROKER_URLS_H */
