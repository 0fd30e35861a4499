/*
 * test_config.c - unit tests for the agent's configuration (firmware/agent/config.c).
 *
 * Table-driven: error_cases holds INI texts and the exact errors each must produce (file,
 * line and message, in order, and no others); valid_cases holds INI texts that must load
 * with no error and a function that checks the parsed values and defaults. Beside the tables:
 * the duration and broker parsers, the defaults, the example config in firmware/, a file with
 * many problems, a NUL byte, and files that cannot be read. INI texts go to mkstemp files
 * under /tmp, removed after each load.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker_urls.h"
#include "config.h"

#define EXAMPLE_INI EM_FIXTURES_DIR "/../../firmware/edgemon-agent.ini"

#define MAX_SEEN   64
#define MAX_EXPECT 8

/* Long values, built from literals: X<n> is n 'x' characters, P<n> an absolute path of n. */
#define X15  "xxxxxxxxxxxxxxx"
#define X16  "xxxxxxxxxxxxxxxx"
#define X64  X16 X16 X16 X16
#define X255 X64 X64 X64 X16 X16 X16 X15
#define P255 "/" X64 X64 X64 X16 X16 X16 "xxxxxxxxxxxxxx"
#define P256 P255 "x"
#define A64  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

/* Ends an INI text that tests something else, so "[target] needs one of ..." stays out. */
#define TARGET "[target]\npid = 1\n"

/* A stage section with its 8 rules on lines +3..+11 (miss_over on +9). */
#define STAGE8(n)                                                                                  \
  "[budget.s" n "]\nlevel = WARN\np50 = 1ms\np90 = 1ms\np99 = 1ms\np999 = 1ms\ndeadline = 1ms\n"   \
  "miss_ratio = 0.5\nmiss_over = 1ms\nstall = 1s\nmin_rate = 1\n"
#define STAGES64                                                                                   \
  STAGE8("0") STAGE8("1") STAGE8("2") STAGE8("3") STAGE8("4") STAGE8("5") STAGE8("6") STAGE8("7")

/* ---- helpers --------------------------------------------------------------------------- */

/* Errors the loader reported, each formatted as "FILE:LINE: message". */
typedef struct {
  size_t n;
  char lines[MAX_SEEN][1200];
} seen_t;

static void collect(void *ctx, const char *file, int line, const char *msg) {
  seen_t *seen = ctx;
  assert_non_null(file);
  assert_non_null(msg);
  assert_null(strchr(msg, '\n'));
  assert_true(line >= 0);
  if (seen->n < MAX_SEEN) {
    snprintf(seen->lines[seen->n], sizeof(seen->lines[0]), "%s:%d: %s", file, line, msg);
  }
  seen->n++;
}

/* Writes `len` bytes of `text` to a new file under /tmp; its path goes to path (32 bytes). */
static void write_temp(char path[32], const char *text, size_t len) {
  snprintf(path, 32, "/tmp/em-config-XXXXXX");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, len), (ssize_t)len);
  assert_int_equal(close(fd), 0);
}

/*
 * Loads `len` bytes of INI text through a temp file. Returns em_config_load's result; the
 * errors go to *seen, the temp file's path to path, and *n_errors must match what was seen.
 */
static int load_bytes(const char *text, size_t len, em_config_t *cfg, seen_t *seen, char path[32]) {
  write_temp(path, text, len);
  memset(seen, 0, sizeof(*seen));
  int n_errors = -1;
  int rc = em_config_load(path, cfg, collect, seen, &n_errors);
  unlink(path);
  assert_int_equal(n_errors, (int)seen->n);
  return rc;
}

static int load_text(const char *text, em_config_t *cfg, seen_t *seen, char path[32]) {
  return load_bytes(text, strlen(text), cfg, seen, path);
}

/*
 * True when `got` ("FILE:LINE: message") matches `expect` ("LINE: message") for `file`:
 * expect is split at '~' into pieces that must appear in order, the first right after
 * "FILE:"; a trailing '$' means the message ends there.
 */
static bool matches(const char *got, const char *file, const char *expect) {
  size_t flen = strlen(file);
  if (strncmp(got, file, flen) != 0 || got[flen] != ':') {
    return false;
  }
  const char *g = got + flen + 1;
  const char *e = expect;
  bool first = true;
  for (;;) {
    const char *tilde = strchr(e, '~');
    size_t plen = tilde != NULL ? (size_t)(tilde - e) : strlen(e);
    bool anchored_end = tilde == NULL && plen > 0 && e[plen - 1] == '$';
    if (anchored_end) {
      plen--;
    }
    char piece[1200];
    assert_true(plen < sizeof(piece));
    memcpy(piece, e, plen);
    piece[plen] = '\0';
    const char *at = first ? (strncmp(g, piece, plen) == 0 ? g : NULL) : strstr(g, piece);
    if (at == NULL) {
      return false;
    }
    g = at + plen;
    if (tilde == NULL) {
      return !anchored_end || *g == '\0';
    }
    e = tilde + 1;
    first = false;
  }
}

/* Fails with every error seen, so a wrong row is easy to read. */
static void fail_row(const char *row, const char *why, const seen_t *seen) {
  print_error("row '%s': %s; errors seen:\n", row, why);
  for (size_t i = 0; i < seen->n && i < MAX_SEEN; i++) {
    print_error("  %s\n", seen->lines[i]);
  }
  fail();
}

/* ---- every error path: INI text -> the errors it must produce -------------------------- */

typedef struct {
  const char *name;
  const char *ini;
  const char *expect[MAX_EXPECT]; /* "LINE: message" patterns (see matches()), in order. */
} error_case_t;

static const error_case_t error_cases[] = {
    /* [agent] */
    {"device_id with a slash",
     "[agent]\ndevice_id = jetson/07\n" TARGET,
     {"2: device_id 'jetson/07' may use only letters, digits and _ . : -$"}},
    {"device_id with a space",
     "[agent]\ndevice_id = jetson 07\n" TARGET,
     {"2: device_id 'jetson 07' may use only letters, digits and _ . : -$"}},
    {"device_id of 64 characters",
     "[agent]\ndevice_id = " A64 "\n" TARGET,
     {"2: device_id 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...' is longer than 63 "
      "characters$"}},
    {"sample_period without a unit",
     "[agent]\nsample_period = 10\n" TARGET,
     {"2: sample_period needs a unit, e.g. 100ms$"}},
    {"sample_period with an unknown unit",
     "[agent]\nsample_period = 10xs\n" TARGET,
     {"2: sample_period '10xs' has an unknown unit; use ns, us, ms, s, m, h or d$"}},
    {"sample_period with a space before the unit",
     "[agent]\nsample_period = 10 ms\n" TARGET,
     {"2: sample_period '10 ms' has an unknown unit~"}},
    {"sample_period negative",
     "[agent]\nsample_period = -5ms\n" TARGET,
     {"2: sample_period '-5ms' cannot be negative$"}},
    {"sample_period overflowing the number",
     "[agent]\nsample_period = 99999999999999999999s\n" TARGET,
     {"2: sample_period '99999999999999999999s' is too large$"}},
    {"sample_period overflowing the unit",
     "[agent]\nsample_period = 18446744073709551615s\n" TARGET,
     {"2: sample_period '18446744073709551615s' is too large$"}},
    {"sample_period with a fraction",
     "[agent]\nsample_period = 1.5s\n" TARGET,
     {"2: sample_period '1.5s' is not a duration; use a whole number and a unit, e.g. 100ms$"}},
    {"sample_period a word",
     "[agent]\nsample_period = fast\n" TARGET,
     {"2: sample_period 'fast' is not a duration~"}},
    {"sample_period zero",
     "[agent]\nsample_period = 0ms\n" TARGET,
     {"2: sample_period '0ms' is out of range 1ms..60s$"}},
    {"sample_period below 1ms",
     "[agent]\nsample_period = 999us\n" TARGET,
     {"2: sample_period '999us' is out of range 1ms..60s$"}},
    {"sample_period above 60s",
     "[agent]\nsample_period = 61s\n" TARGET,
     {"2: sample_period '61s' is out of range 1ms..60s$"}},
    {"smaps_period shorter than the default sample_period",
     "[agent]\nsmaps_period = 50ms\n" TARGET,
     {"2: smaps_period 50ms is shorter than sample_period 100ms; use 0 (off) or at least "
      "100ms$"}},
    {"smaps_period shorter than a sample_period set after it",
     "[agent]\nsmaps_period = 1s\nsample_period = 2s\n" TARGET,
     {"2: smaps_period 1s is shorter than sample_period 2s~"}},
    {"system_period shorter than sample_period",
     "[agent]\nsample_period = 2s\nsystem_period = 1s\n" TARGET,
     {"3: system_period 1s is shorter than sample_period 2s$"}},
    {"system_period without a unit",
     "[agent]\nsystem_period = 5\n" TARGET,
     {"2: system_period~needs a unit"}},
    {"smaps_period above 1h",
     "[agent]\nsmaps_period = 2h\n" TARGET,
     {"2: smaps_period '2h' is out of range 1ms..1h$"}},
    {"smaps_period a word",
     "[agent]\nsmaps_period = never\n" TARGET,
     {"2: smaps_period 'never' is not a duration~e.g. 5s$"}},
    {"runtime_dir relative",
     "[agent]\nruntime_dir = run/edgemon\n" TARGET,
     {"2: runtime_dir 'run/edgemon' must be an absolute path$"}},
    {"runtime_dir of 256 characters",
     "[agent]\nruntime_dir = " P256 "\n" TARGET,
     {"2: runtime_dir is longer than 255 characters$"}},
    {"board with a slash",
     "[agent]\nboard = jetson/orin\n" TARGET,
     {"2: board 'jetson/orin' may use only letters, digits and _ . : -$"}},
    {"board of 64 characters",
     "[agent]\nboard = " A64 "\n" TARGET,
     {"2: board '~' is longer than 63 characters$"}},
    {"proc_root relative",
     "[agent]\nproc_root = proc\n" TARGET,
     {"2: proc_root 'proc' must be an absolute path$"}},
    {"log_level unknown",
     "[agent]\nlog_level = verbose\n" TARGET,
     {"2: log_level 'verbose' must be one of error, warn, info, debug$"}},
    {"profile unwind unknown",
     "[profile]\nunwind = frames\n" TARGET,
     {"2: unwind 'frames' must be dwarf or fp$"}},

    /* [target] */
    {"pid zero", "[target]\npid = 0\n", {"2: pid '0' must be a number from 1 to 4194304$"}},
    {"pid above the kernel limit",
     "[target]\npid = 4194305\n",
     {"2: pid '4194305' must be a number from 1 to 4194304$"}},
    {"pid negative", "[target]\npid = -1\n", {"2: pid '-1' must be a number~"}},
    {"pid a word", "[target]\npid = abc\n", {"2: pid 'abc' must be a number~"}},
    {"pid with trailing text", "[target]\npid = 12x\n", {"2: pid '12x' must be a number~"}},
    {"pid overflowing", "[target]\npid = 99999999999999999999\n", {"2: pid '~' must be a number~"}},
    {"pid_file relative",
     "[target]\npid_file = run/inference.pid\n",
     {"2: pid_file 'run/inference.pid' must be an absolute path$"}},
    {"pid_file of 256 characters",
     "[target]\npid_file = " P256 "\n",
     {"2: pid_file is longer than 255 characters$"}},
    {"process_name of 16 characters",
     "[target]\nprocess_name = abcdefghijklmnop\n",
     {"2: process_name 'abcdefghijklmnop' is longer than 15 characters (the kernel's comm "
      "limit)$"}},
    {"cmdline of 256 characters",
     "[target]\ncmdline = " X255 "x\n",
     {"2: cmdline is longer than 255 characters$"}},
    {"cgroup relative",
     "[target]\ncgroup = inference.service\n",
     {"2: cgroup 'inference.service' must be an absolute path$"}},
    {"pid_file after pid",
     "[target]\npid = 1\npid_file = /run/x.pid\n",
     {"3: [target] pid_file conflicts with pid on line 2$"}},
    {"three target keys",
     "[target]\ncmdline = detect.py\n\n; comment\npid = 1\ncgroup = /sys/fs/cgroup/x\n",
     {"5: [target] pid conflicts with cmdline on line 2$",
      "6: [target] cgroup conflicts with cmdline on line 2$"}},
    {"target keys in two [target] sections",
     "[target]\nprocess_name = python3\n[agent]\n[target]\ncgroup = /sys/fs/cgroup/x\n",
     {"5: [target] cgroup conflicts with process_name on line 2$"}},
    {"no target",
     "[agent]\nboard = generic\n",
     {"0: [target] needs one of pid, pid_file, process_name, cmdline, cgroup$"}},
    {"empty file", "", {"0: [target] needs one of pid, pid_file, process_name, cmdline, cgroup$"}},
    {"empty [target] section",
     "[target]\n",
     {"0: [target] needs one of pid, pid_file, process_name, cmdline, cgroup$"}},

    /* [mqtt] */
    {"broker with TLS and no CA",
     "[mqtt]\nbroker = mqtts://broker:8883\n" TARGET,
     {"2: broker uses TLS (mqtts://) but [mqtt] sets neither tls_ca_file nor tls_ca_path, the "
      "CA that signed the broker's certificate$"}},
    {"broker with another scheme",
     "[mqtt]\nbroker = http://broker\n" TARGET,
     {"2: broker 'http://broker' must look like mqtt://HOST[:PORT] or mqtts://HOST[:PORT], e.g. "
      "mqtt://127.0.0.1:1883$"}},
    {"TLS keys with a plain mqtt:// broker",
     "[mqtt]\nbroker = mqtt://broker\ntls_ca_file = /etc/ca.crt\ntls_insecure = true\n" TARGET,
     {"3: tls_ca_file is set but the broker is not TLS; use broker = mqtts://HOST[:PORT], or "
      "remove tls_ca_file$",
      "4: tls_insecure is set but the broker is not TLS~"}},
    {"TLS keys with the default broker",
     "[mqtt]\ntls_cert_file = /etc/c.crt\ntls_key_file = /etc/c.key\n" TARGET,
     {"2: tls_cert_file is set but the broker is not TLS~",
      "3: tls_key_file is set but the broker is not TLS~"}},
    {"tls_cert_file without tls_key_file",
     "[mqtt]\nbroker = mqtts://b\ntls_ca_path = /\ntls_cert_file = /nonexistent/c.crt\n" TARGET,
     {"4: tls_cert_file and tls_key_file go together: set both for a client certificate, or "
      "neither$",
      "4: tls_cert_file '/nonexistent/c.crt' cannot be opened: No such file or directory$"}},
    {"tls_ca_file missing",
     "[mqtt]\nbroker = mqtts://b\ntls_ca_file = /nonexistent/ca.crt\n" TARGET,
     {"3: tls_ca_file '/nonexistent/ca.crt' cannot be opened: No such file or directory$"}},
    {"tls_ca_path not a directory",
     "[mqtt]\nbroker = mqtts://b\ntls_ca_path = /nonexistent/certs\n" TARGET,
     {"3: tls_ca_path '/nonexistent/certs' is not a directory$"}},
    {"tls_ca_file relative",
     "[mqtt]\nbroker = mqtts://b\ntls_ca_file = ca.crt\n" TARGET,
     {"3: tls_ca_file 'ca.crt' must be an absolute path$"}},
    {"tls_insecure not a boolean",
     "[mqtt]\nbroker = mqtts://b\ntls_ca_path = /\ntls_insecure = maybe\n" TARGET,
     {"4: tls_insecure 'maybe' must be true or false$"}},
    {"credentials_file missing",
     "[mqtt]\ncredentials_file = /nonexistent/mqtt.cred\n" TARGET,
     {"2: credentials_file '/nonexistent/mqtt.cred' cannot be opened: No such file or "
      "directory$"}},
    {"credentials_file a directory",
     "[mqtt]\ncredentials_file = /\n" TARGET,
     {"2: credentials_file '/' is not a regular file$"}},
    {"broker without a scheme",
     "[mqtt]\nbroker = 127.0.0.1:1883\n" TARGET,
     {"2: broker '127.0.0.1:1883' must look like mqtt://HOST[:PORT]~"}},
    {"broker without a host",
     "[mqtt]\nbroker = mqtt://\n" TARGET,
     {"2: broker 'mqtt://' has no host$"}},
    {"broker with only a port",
     "[mqtt]\nbroker = mqtt://:1883\n" TARGET,
     {"2: broker 'mqtt://:1883' has no host$"}},
    {"broker port zero",
     "[mqtt]\nbroker = mqtt://broker:0\n" TARGET,
     {"2: broker 'mqtt://broker:0' has a bad port; use 1..65535$"}},
    {"broker port above 65535",
     "[mqtt]\nbroker = mqtt://broker:65536\n" TARGET,
     {"2: broker 'mqtt://broker:65536' has a bad port~"}},
    {"broker port empty",
     "[mqtt]\nbroker = mqtt://broker:\n" TARGET,
     {"2: broker 'mqtt://broker:' has a bad port~"}},
    {"broker port not a number",
     "[mqtt]\nbroker = mqtt://broker:18x3\n" TARGET,
     {"2: broker 'mqtt://broker:18x3' has a bad port~"}},
    {"broker with a path",
     "[mqtt]\nbroker = mqtt://broker/edgemon\n" TARGET,
     {"2: broker 'mqtt://broker/edgemon' has an unexpected character after the host; use "
      "mqtt://HOST[:PORT]$"}},
    {"broker with credentials",
     "[mqtt]\nbroker = mqtt://user:secret@broker\n" TARGET,
     {"2: broker 'mqtt://user:secret@broker' has credentials; put them in [mqtt] credentials_file "
      "instead$"}},
    {"broker with an unclosed IPv6 literal",
     "[mqtt]\nbroker = mqtt://[::1:1883\n" TARGET,
     {"2: broker 'mqtt://[::1:1883' has a bad IPv6 address; write it as mqtt://[::1]:1883$"}},
    {"client_id with a space",
     "[mqtt]\nclient_id = edge mon\n" TARGET,
     {"2: client_id 'edge mon' may use only printable ascii without spaces$"}},
    {"client_id not ascii",
     "[mqtt]\nclient_id = caf\xc3\xa9\n" TARGET,
     {"2: client_id 'caf?\?' may use only printable ascii without spaces$"}},
    {"client_id of 65 characters",
     "[mqtt]\nclient_id = " A64 "a\n" TARGET,
     {"2: client_id '~' is longer than 64 characters$"}},
    {"socket_mode without owner write",
     "[spans]\nsocket_mode = 0440\n" TARGET,
     {"2: socket_mode '0440' must be octal permissions with owner read-write, e.g. 0660$"}},
    {"socket_mode not octal",
     "[spans]\nsocket_mode = 0680\n" TARGET,
     {"2: socket_mode '0680' must be octal~"}},
    {"socket relative",
     "[spans]\nsocket = spans.sock\n" TARGET,
     {"2: socket 'spans.sock' must be an absolute path$"}},
    {"socket_group unknown",
     "[spans]\nsocket_group = no-such-group-xyz\n" TARGET,
     {"2: socket_group: no group named 'no-such-group-xyz' on this system$"}},
    {"allow_uids unknown user and huge id",
     "[spans]\nallow_uids = 0, nobody-xyz, 99999999999\n" TARGET,
     {"2: allow_uids: no user named 'nobody-xyz' on this system$",
      "2: allow_uids: id 99999999999 is out of range$"}},
    {"max_stages 0",
     "[spans]\nmax_stages = 0\n" TARGET,
     {"2: max_stages '0' must be a whole number from 1 to 64$"}},
    {"max_stages 65", "[spans]\nmax_stages = 65\n" TARGET, {"2: max_stages '65' must be~"}},
    {"qos_data 2",
     "[mqtt]\nqos_data = 2\n" TARGET,
     {"2: qos_data '2' must be 0 or 1 (qos 2 is not supported)$"}},
    {"qos_data a word", "[mqtt]\nqos_data = once\n" TARGET, {"2: qos_data 'once' must be 0 or 1~"}},
    {"qos_state negative",
     "[mqtt]\nqos_state = -1\n" TARGET,
     {"2: qos_state '-1' must be 0 or 1~"}},
    {"keepalive below 5s",
     "[mqtt]\nkeepalive = 4s\n" TARGET,
     {"2: keepalive '4s' is out of range 5s..1h$"}},
    {"keepalive above 1h",
     "[mqtt]\nkeepalive = 61m\n" TARGET,
     {"2: keepalive '61m' is out of range 5s..1h$"}},
    {"keepalive not whole seconds",
     "[mqtt]\nkeepalive = 7500ms\n" TARGET,
     {"2: keepalive '7500ms' must be whole seconds, e.g. 30s$"}},
    {"keepalive without a unit",
     "[mqtt]\nkeepalive = 30\n" TARGET,
     {"2: keepalive needs a unit, e.g. 30s$"}},
    {"reconnect_min below 100ms",
     "[mqtt]\nreconnect_min = 50ms\n" TARGET,
     {"2: reconnect_min '50ms' is out of range 100ms..1h$"}},
    {"reconnect_max above 1h",
     "[mqtt]\nreconnect_max = 2h\n" TARGET,
     {"2: reconnect_max '2h' is out of range 100ms..1h$"}},
    {"reconnect_max below reconnect_min",
     "[mqtt]\nreconnect_min = 10s\nreconnect_max = 5s\n" TARGET,
     {"3: reconnect_max 5s is below reconnect_min 10s (line 2)$"}},

    /* [pmu] */
    {"events with a misspelt name",
     "[pmu]\nevents = cycles, cyclez\n" TARGET,
     {"2: unknown pmu event 'cyclez'; did you mean 'cycles'? valid: cycles, instructions, "
      "cache-references, cache-misses, branch-instructions, branch-misses, "
      "stalled-cycles-frontend, stalled-cycles-backend, ref-cycles, bus-cycles, task-clock, "
      "cpu-clock, context-switches, cpu-migrations, page-faults, minor-faults, major-faults$"}},
    {"events with an unknown name",
     "[pmu]\nevents = cycles, l3-misses\n" TARGET,
     {"2: unknown pmu event 'l3-misses'; valid: cycles, ~, major-faults$"}},
    {"events with an unclosed pmu/terms/",
     "[pmu]\nevents = cycles, armv8_pmuv3_0/event=0x11\n" TARGET,
     {"2: unknown pmu event 'armv8_pmuv3_0/event=0x11'; valid: cycles, ~, major-faults$"}},
    {"events with a kernel-style name in capitals",
     "[pmu]\nevents = L1D_CACHE_REFILL\n" TARGET,
     {"2: unknown pmu event 'L1D_CACHE_REFILL'; valid: cycles, ~, major-faults$"}},
    {"events with two unknown names",
     "[pmu]\nevents = foo instructions bar\n" TARGET,
     {"2: unknown pmu event 'foo'~", "2: unknown pmu event 'bar'~"}},
    {"events listing one twice",
     "[pmu]\nevents = cycles instructions,cycles\n" TARGET,
     {"2: pmu event 'cycles' is listed twice$"}},
    {"events listing 17",
     "[pmu]\nevents = cycles instructions cache-references cache-misses branch-instructions "
     "branch-misses stalled-cycles-frontend stalled-cycles-backend ref-cycles bus-cycles "
     "task-clock cpu-clock context-switches cpu-migrations page-faults minor-faults "
     "major-faults\n" TARGET,
     {"2: events lists more than 16 events$"}},
    {"events listing none",
     "[pmu]\nevents = , ,\n" TARGET,
     {"2: events lists no event; e.g. cycles, instructions$"}},

    /* Structure: sections, keys, values, lines. */
    {"unknown key close to a known one",
     "[agent]\nsample_perod = 100ms\n" TARGET,
     {"2: unknown key 'sample_perod' in [agent]; did you mean 'sample_period'?$"}},
    {"unknown key with a space",
     "[agent]\nsample period = 100ms\n" TARGET,
     {"2: unknown key 'sample period' in [agent]; did you mean 'sample_period'?$"}},
    {"unknown key far from any",
     "[agent]\ncolour = blue\n" TARGET,
     {"2: unknown key 'colour' in [agent]$"}},
    {"key of another section",
     "[agent]\nbroker = mqtt://broker\n" TARGET,
     {"2: unknown key 'broker' in [agent]; it belongs in [mqtt]$"}},
    {"unknown section close to a known one",
     "[agnet]\nsample_period = 1s\nbogus = 1\n" TARGET,
     {"1: unknown section [agnet]; did you mean [agent]?$"}},
    {"unknown section far from any",
     "[metrics]\nfoo = 1\n" TARGET,
     {"1: unknown section [metrics]; use [agent], [target], [mqtt], [pmu], [spans], [degrade], "
      "[budget.<stage>] or [budget.process]$"}},
    {"section names are lower case",
     "[Agent]\n" TARGET,
     {"1: unknown section [Agent]; did you mean [agent]?$"}},
    {"empty section name", "[]\n" TARGET, {"1: unknown section []; use [agent]~"}},
    {"known key outside any section",
     "board = generic\n" TARGET,
     {"1: key 'board' is outside any section; put it under [agent]$"}},
    {"unknown key outside any section",
     "; top\ncolour = blue\n" TARGET,
     {"2: key 'colour' is outside any section; start with a section, e.g. [agent]$"}},
    {"empty value",
     "[agent]\nsample_period =\n" TARGET,
     {"2: sample_period has an empty value; e.g. sample_period = 100ms$"}},
    {"value that is only a comment",
     "[target]\npid = ; later\n",
     {"2: pid has an empty value; e.g. pid = 1234$"}},
    {"duplicate key",
     "[agent]\nboard = a\nboard = b\n" TARGET,
     {"3: duplicate key 'board' in [agent] (first on line 2)$"}},
    {"duplicate key in a repeated section",
     "[agent]\nboard = a\n[mqtt]\n[agent]\nboard = b\n" TARGET,
     {"5: duplicate key 'board' in [agent] (first on line 2)$"}},
    {"duplicate target key",
     "[target]\npid = 1\npid = 2\n",
     {"3: duplicate key 'pid' in [target] (first on line 2)$"}},
    {"line without '='",
     "[agent]\nverbose\n" TARGET,
     {"2: expected 'key = value', got 'verbose'$"}},
    {"line whose '=' is inside a comment",
     "[agent]\nboard ; = x\n" TARGET,
     {"2: expected 'key = value', got 'board ; = x'$"}},
    {"indented line after a key is not a continuation",
     "[pmu]\nevents = cycles,\n    instructions\n" TARGET,
     {"3: expected 'key = value', got 'instructions'; a value cannot continue on an indented "
      "line$"}},
    {"value without a key",
     "[agent]\n= 5\n" TARGET,
     {"2: missing key name before the '=' or ':'$"}},
    {"section header without ']'",
     "[agent\nboard = x\n" TARGET,
     {"1: section header '[agent' has no closing ']'$"}},
    {"section header with text after it",
     "[agent] extra\n" TARGET,
     {"1: unexpected text after [agent]$"}},
    {"control character in a value",
     "[agent]\nboard = a\x01z\n" TARGET,
     {"2: board 'a?z' contains a control character$"}},
    {"inline comment without a space before ';'",
     "[mqtt]\nqos_data = 1;comment\n" TARGET,
     {"2: qos_data '1;comment' must be 0 or 1~"}},
    {"tab inside a value",
     "[target]\ncmdline = a\tb\n",
     {"2: cmdline 'a?b' contains a control character$"}},
    /* [degrade] */
    {"enter_windows 0",
     "[degrade]\nenter_windows = 0\n" TARGET,
     {"2: enter_windows '0' must be a whole number from 1 to 100$"}},
    {"enter_windows 101",
     "[degrade]\nenter_windows = 101\n" TARGET,
     {"2: enter_windows '101' must be a whole number from 1 to 100$"}},
    {"leave_windows 1001",
     "[degrade]\nleave_windows = 1001\n" TARGET,
     {"2: leave_windows '1001' must be a whole number from 1 to 1000$"}},
    {"leave_windows a word",
     "[degrade]\nleave_windows = five\n" TARGET,
     {"2: leave_windows 'five' must be a whole number~"}},
    {"degrade window without a unit",
     "[degrade]\nwindow = 1\n" TARGET,
     {"2: window needs a unit, e.g. 1s$"}},
    {"degrade window above 1h",
     "[degrade]\nwindow = 2h\n" TARGET,
     {"2: window '2h' is out of range 1ms..1h$"}},
    {"degrade window shorter than sample_period",
     "[agent]\nsample_period = 2s\n[degrade]\nwindow = 1s\n" TARGET,
     {"4: [degrade] window 1s is shorter than sample_period 2s$"}},
    {"hook relative",
     "[degrade]\nhook = on-level.sh\n" TARGET,
     {"2: hook 'on-level.sh' must be an absolute path$"}},
    {"spool size below 64KiB",
     "[spool]\nsize = 32KiB\n" TARGET,
     {"2: size '32KiB' is out of range 64KiB..1GiB$"}},
    {"spool size without a unit",
     "[spool]\nsize = 1000000\n" TARGET,
     {"2: size needs a unit (B, KiB, MiB or GiB), e.g. 16MiB$"}},
    {"spool replay_per_tick 0",
     "[spool]\nreplay_per_tick = 0\n" TARGET,
     {"2: replay_per_tick '0' must be a whole number from 1 to 10000$"}},
    {"flight max_bytes over a recording's limit",
     "[flight]\nmax_bytes = 512KiB\n" TARGET,
     {"2: max_bytes '512KiB' is out of range 4KiB..256KiB$"}},
    {"flight pre_seconds 0",
     "[flight]\npre_seconds = 0\n" TARGET,
     {"2: pre_seconds '0' is out of range 100ms..10m$"}},
    {"flight window of more ticks than a recording holds",
     "[agent]\nsample_period = 1ms\n[flight]\npre_seconds = 5\n" TARGET,
     {"4: [flight] pre_seconds + post_seconds (7s) is 7004 ticks of sample_period 1ms; a "
      "recording holds 4092 at most: shorten them or lengthen sample_period$"}},
    {"temp_max 0",
     "[budget.process]\nlevel = WARN\ntemp_max = 0\n" TARGET,
     {"3: temp_max '0' must be degrees C above 0 and at most 200, e.g. 85$"}},
    {"throttle off",
     "[budget.process]\nlevel = WARN\nthrottle = off\n" TARGET,
     {"3: throttle 'off' must be on (leave the key out for no rule)$"}},
    {"hook_timeout below 100ms",
     "[degrade]\nhook_timeout = 50ms\n" TARGET,
     {"2: hook_timeout '50ms' is out of range 100ms..10m$"}},
    {"duplicate key in [degrade]",
     "[degrade]\nenter_windows = 2\nenter_windows = 3\n" TARGET,
     {"3: duplicate key 'enter_windows' in [degrade] (first on line 2)$"}},

    /* [budget.<stage>] */
    {"budget without a stage",
     "[budget]\np99 = 40ms\n" TARGET,
     {"1: section [budget] names no stage; use [budget.<stage>], e.g. [budget.infer], or "
      "[budget.process]$"}},
    {"budget with an empty stage", "[budget.]\n" TARGET, {"1: section [budget.] names no stage~"}},
    {"stage name with a slash",
     "[budget.in/fer]\n" TARGET,
     {"1: stage name 'in/fer' may use only letters, digits and _ . : -$"}},
    {"stage name of 32 characters",
     "[budget." X16 X16 "]\n" TARGET,
     {"1: stage name '" X16 X16 "' is longer than 31 characters$"}},
    {"misspelt budget section",
     "[budjet.infer]\np99 = 40ms\n" TARGET,
     {"1: unknown section [budjet.infer]; did you mean [budget.infer]?$"}},
    {"percentile without a unit",
     "[budget.infer]\nlevel = WARN\np99 = 40\n" TARGET,
     {"3: p99 needs a unit, e.g. 40ms$"}},
    {"percentile zero",
     "[budget.infer]\nlevel = WARN\np50 = 0ms\n" TARGET,
     {"3: p50 '0ms' is out of range 1us..1h$"}},
    {"deadline a word",
     "[budget.infer]\nlevel = WARN\ndeadline = soon\n" TARGET,
     {"3: deadline 'soon' is not a duration; use a whole number and a unit, e.g. 100ms$"}},
    {"stall below 1ms",
     "[budget.infer]\nlevel = WARN\nstall = 500us\n" TARGET,
     {"3: stall '500us' is out of range 1ms..1h$"}},
    {"bad level name",
     "[budget.infer]\nlevel = SEVERE\np99 = 40ms\n" TARGET,
     {"2: level 'SEVERE' must be WARN, DEGRADED or CRITICAL$"}},
    {"level NOMINAL",
     "[budget.infer]\np99 = 40ms\np99_level = nominal\n" TARGET,
     {"3: p99_level 'nominal' is not allowed: a rule raises WARN, DEGRADED or CRITICAL$"}},
    {"rule without a level",
     "[budget.infer]\np99 = 40ms\n" TARGET,
     {"2: p99 names no level; add p99_level = DEGRADED, or level = DEGRADED for all of "
      "[budget.infer]$"}},
    {"rule level without the rule",
     "[budget.infer]\nlevel = WARN\np99 = 40ms\ndeadline_level = CRITICAL\n" TARGET,
     {"4: deadline_level is set but deadline is not$"}},
    {"miss_ratio 0",
     "[budget.infer]\nlevel = WARN\nmiss_ratio = 0\nmiss_over = 40ms\n" TARGET,
     {"3: miss_ratio '0' must be a number above 0 and below 1, e.g. 0.05$"}},
    {"miss_ratio 1",
     "[budget.infer]\nlevel = WARN\nmiss_ratio = 1\nmiss_over = 40ms\n" TARGET,
     {"3: miss_ratio '1' must be a number above 0 and below 1~"}},
    {"miss_ratio a percentage",
     "[budget.infer]\nlevel = WARN\nmiss_ratio = 5%\nmiss_over = 40ms\n" TARGET,
     {"3: miss_ratio '5%' must be a number~"}},
    {"miss_ratio without miss_over or deadline",
     "[budget.infer]\nlevel = WARN\nmiss_ratio = 0.05\n" TARGET,
     {"3: miss_ratio needs miss_over, the span length that counts as a miss, e.g. miss_over = "
      "40ms$"}},
    {"miss_over without miss_ratio",
     "[budget.infer]\nlevel = WARN\np99 = 40ms\nmiss_over = 40ms\n" TARGET,
     {"4: miss_over is used only with miss_ratio$"}},
    {"min_rate zero",
     "[budget.infer]\nlevel = WARN\nmin_rate = 0\n" TARGET,
     {"3: min_rate '0' must be a number above 0 and at most 1000000, e.g. 15$"}},
    {"min_rate negative",
     "[budget.infer]\nlevel = WARN\nmin_rate = -5\n" TARGET,
     {"3: min_rate '-5' must be a number~"}},
    {"flow of 9 stages",
     "[budget.pipe]\nlevel = WARN\nflow = a, b, c, d, e, f, g, h, i\nflow_deadline = "
     "100ms\n" TARGET,
     {"3: flow lists 9 stages; at most 8$"}},
    {"flow stage name with a space",
     "[budget.pipe]\nlevel = WARN\nflow = pre, in fer, post\nflow_deadline = 100ms\n" TARGET,
     {"3: flow stage name 'in fer' may use only letters, digits and _ . : -$"}},
    {"flow stage name with a slash",
     "[budget.pipe]\nlevel = WARN\nflow = pre, gpu/0\nflow_deadline = 100ms\n" TARGET,
     {"3: flow stage name 'gpu/0' may use only letters, digits and _ . : -$"}},
    {"flow stage name too long",
     "[budget.pipe]\nlevel = WARN\nflow = pre, abcdefghijklmnopqrstuvwxyz0123456\n"
     "flow_deadline = 100ms\n" TARGET,
     {"3: flow stage name 'abcdefghijklmnopqrstuvwxyz0123456' is longer than 31 characters$"}},
    {"flow stage twice",
     "[budget.pipe]\nlevel = WARN\nflow = pre, infer, pre\nflow_deadline = 100ms\n" TARGET,
     {"3: flow lists stage 'pre' twice$"}},
    {"flow empty stage",
     "[budget.pipe]\nlevel = WARN\nflow = pre,,post\nflow_deadline = 100ms\n" TARGET,
     {"3: flow has an empty stage name; list stages with commas, e.g. preprocess, infer, "
      "postprocess$"}},
    {"flow of one stage",
     "[budget.pipe]\nlevel = WARN\nflow = infer\nflow_deadline = 100ms\n" TARGET,
     {"3: flow needs at least 2 stages, in order, e.g. preprocess, infer, postprocess$"}},
    {"flow without flow_deadline",
     "[budget.pipe]\nlevel = WARN\nflow = pre, infer\n" TARGET,
     {"3: flow needs flow_deadline, the longest a frame may take from its first stage to its "
      "last, e.g. flow_deadline = 100ms$"}},
    {"flow_deadline without flow",
     "[budget.pipe]\nlevel = WARN\np99 = 40ms\nflow_deadline = 100ms\n" TARGET,
     {"4: flow_deadline is used only with flow, the stages a frame passes in order$"}},
    {"flow_deadline without a unit",
     "[budget.pipe]\nlevel = WARN\nflow = pre, infer\nflow_deadline = 100\n" TARGET,
     {"4: flow_deadline needs a unit, e.g. 100ms$"}},
    {"flow without a level",
     "[budget.pipe]\nflow = pre, infer\nflow_deadline = 100ms\n" TARGET,
     {"2: flow names no level; add flow_level = DEGRADED, or level = DEGRADED for all of "
      "[budget.pipe]$"}},
    {"stage section without a rule",
     "[budget.infer]\nlevel = WARN\n" TARGET,
     {"1: [budget.infer] sets no rule; e.g. p99 = 40ms$"}},
    {"unknown key in a stage section, close to one",
     "[budget.infer]\nlevel = WARN\np99 = 40ms\ndeadlin = 100ms\n" TARGET,
     {"4: unknown key 'deadlin' in [budget.infer]; did you mean 'deadline'?$"}},
    {"window belongs in [degrade]",
     "[budget.infer]\nlevel = WARN\np99 = 40ms\nwindow = 1s\n" TARGET,
     {"4: unknown key 'window' in [budget.infer]; it belongs in [degrade]$"}},
    {"process key in a stage section",
     "[budget.infer]\nlevel = WARN\nrss_cap = 2GiB\np99 = 1ms\n" TARGET,
     {"3: unknown key 'rss_cap' in [budget.infer]; it belongs in [budget.process]$"}},
    {"duplicate key in a repeated stage section",
     "[budget.infer]\nlevel = WARN\np99 = 40ms\n[budget.pre]\nlevel = WARN\np99 = 5ms\n"
     "[budget.infer]\np99 = 50ms\n" TARGET,
     {"8: duplicate key 'p99' in [budget.infer] (first on line 3)$"}},
    {"65 rules", STAGES64 STAGE8("8") TARGET, {"91: more than 64 budget rules in the file$"}},

    /* [budget.process] */
    {"stage key in [budget.process]",
     "[budget.process]\nlevel = WARN\nrss_cap = 1GiB\np99 = 40ms\n" TARGET,
     {"4: unknown key 'p99' in [budget.process]; it belongs in [budget.<stage>]$"}},
    {"rss_cap without a unit",
     "[budget.process]\nlevel = WARN\nrss_cap = 2048\n" TARGET,
     {"3: rss_cap needs a unit (B, KiB, MiB or GiB), e.g. 2GiB$"}},
    {"rss_cap in GB",
     "[budget.process]\nlevel = WARN\nrss_cap = 2GB\n" TARGET,
     {"3: rss_cap '2GB' has an unknown unit; use B, KiB, MiB or GiB$"}},
    {"rss_cap with a fraction",
     "[budget.process]\nlevel = WARN\nrss_cap = 1.5GiB\n" TARGET,
     {"3: rss_cap '1.5GiB' is not a size; use a whole number and a unit, e.g. 2GiB$"}},
    {"rss_cap below 1MiB",
     "[budget.process]\nlevel = WARN\nrss_cap = 512KiB\n" TARGET,
     {"3: rss_cap '512KiB' is out of range 1MiB..1024GiB$"}},
    {"rss_cap above 1024GiB",
     "[budget.process]\nlevel = WARN\nrss_cap = 1025GiB\n" TARGET,
     {"3: rss_cap '1025GiB' is out of range 1MiB..1024GiB$"}},
    {"rss_cap overflowing",
     "[budget.process]\nlevel = WARN\nrss_cap = 99999999999999999999B\n" TARGET,
     {"3: rss_cap '99999999999999999999B' is out of range~"}},
    {"rss_slope zero",
     "[budget.process]\nlevel = WARN\nrss_slope = 0\n" TARGET,
     {"3: rss_slope '0' must be a number above 0 and at most 1000000, e.g. 50$"}},
    {"rss_slope_horizon below 1m",
     "[budget.process]\nlevel = WARN\nrss_slope = 50\nrss_slope_horizon = 30s\n" TARGET,
     {"4: rss_slope_horizon '30s' is out of range 60s..24h$"}},
    {"rss_slope_horizon without rss_slope",
     "[budget.process]\nlevel = WARN\nrss_cap = 1GiB\nrss_slope_horizon = 30m\n" TARGET,
     {"4: rss_slope_horizon is used only with rss_slope$"}},
    {"psi above 100",
     "[budget.process]\nlevel = WARN\npsi_cpu_some = 150\n" TARGET,
     {"3: psi_cpu_some '150' must be a percentage above 0 and at most 100, e.g. 40$"}},
    {"psi zero",
     "[budget.process]\nlevel = WARN\npsi_io_full = 0\n" TARGET,
     {"3: psi_io_full '0' must be a percentage~"}},
    {"unknown psi key",
     "[budget.process]\nlevel = WARN\npsi_cpu_som = 10\n" TARGET,
     {"3: unknown key 'psi_cpu_som' in [budget.process]; did you mean 'psi_cpu_some'?$",
      "1: [budget.process] sets no rule; e.g. rss_cap = 2GiB$"}},
    {"process rule without a level",
     "[budget.process]\nrss_cap = 1GiB\n" TARGET,
     {"2: rss_cap names no level; add rss_cap_level = DEGRADED, or level = DEGRADED for all of "
      "[budget.process]$"}},
    {"duplicate key in a repeated [budget.process]",
     "[budget.process]\nlevel = WARN\n[budget.process]\nlevel = CRITICAL\nrss_cap = 1GiB\n" TARGET,
     {"4: duplicate key 'level' in [budget.process] (first on line 2)$"}},

    {"line of 1025 characters",
     "[agent]\n; " X255 X255 X255 X255 "xxx\n" TARGET,
     {"2: line is longer than 1024 characters$"}},
};

/* Each row of error_cases produces exactly its errors, in order, with the right lines. */
static void config_reports_each_error_with_its_line(void **state) {
  (void)state;
  for (size_t r = 0; r < sizeof(error_cases) / sizeof(error_cases[0]); r++) {
    const error_case_t *row = &error_cases[r];
    em_config_t cfg;
    seen_t seen;
    char path[32];
    int rc = load_text(row->ini, &cfg, &seen, path);
    size_t n_expect = 0;
    while (n_expect < MAX_EXPECT && row->expect[n_expect] != NULL) {
      n_expect++;
    }
    if (rc != -EINVAL) {
      fail_row(row->name, "em_config_load did not return -EINVAL", &seen);
    }
    if (seen.n != n_expect) {
      fail_row(row->name, "wrong number of errors", &seen);
    }
    for (size_t i = 0; i < n_expect; i++) {
      if (!matches(seen.lines[i], path, row->expect[i])) {
        print_error("expected %s:%s\n", path, row->expect[i]);
        fail_row(row->name, "error does not match", &seen);
      }
    }
  }
}

/* ---- valid files: INI text -> the values it must produce ------------------------------- */

typedef struct {
  const char *name;
  const char *ini;
  void (*check)(const em_config_t *cfg);
} valid_case_t;

/* Files that only name a target, and the target each must load. */
typedef struct {
  const char *name;
  const char *ini;
  em_target_spec_t want;
} target_case_t;

/* The target loaded is `want`: its kind, and its pid or its text. */
static void expect_target(const em_target_spec_t *got, const em_target_spec_t *want) {
  assert_int_equal(got->kind, want->kind);
  if (want->kind == EM_TARGET_PID) {
    assert_int_equal(got->pid, want->pid);
  } else {
    assert_string_equal(got->value, want->value);
  }
}

/* Everything but the target is the default. */
static void check_spans(const em_config_t *cfg) {
  assert_string_equal(cfg->span_socket, "/srv/em/s.sock");
  assert_int_equal(cfg->span_socket_mode, 0620);
  assert_int_equal(cfg->span_socket_gid, 0);
  assert_int_equal(cfg->n_allow_uids, 2);
  assert_int_equal(cfg->allow_uids[0], 0);
  assert_int_equal(cfg->allow_uids[1], 1000);
  assert_int_equal(cfg->n_allow_gids, 1);
  assert_int_equal(cfg->allow_gids[0], 0);
  assert_int_equal(cfg->max_stages, 8);
}

static void check_span_socket_follows_runtime_dir(const em_config_t *cfg) {
  assert_string_equal(cfg->span_socket, "/srv/run/spans.sock");
  assert_int_equal(cfg->span_socket_mode, 0660);
  assert_int_equal(cfg->span_socket_gid, -1);
  assert_int_equal(cfg->n_allow_uids, 0);
  assert_int_equal(cfg->max_stages, 32);
}

static void check_defaults_around_pid(const em_config_t *cfg) {
  em_config_t def;
  em_config_defaults(&def);
  assert_int_equal(cfg->target.kind, EM_TARGET_PID);
  assert_int_equal(cfg->target.pid, 42);
  assert_string_equal(cfg->target.value, "");
  assert_string_equal(cfg->device_id, def.device_id);
  assert_int_equal(cfg->sample_period_ns, 100000000ull);
  assert_int_equal(cfg->smaps_period_ns, 5000000000ull);
  assert_int_equal(cfg->system_period_ns, 1000000000ull);
  assert_string_equal(cfg->runtime_dir, def.runtime_dir);
  assert_string_equal(cfg->board, "auto");
  assert_string_equal(cfg->proc_root, "/proc");
  assert_int_equal(cfg->log_level, EM_LOG_INFO);
  assert_string_equal(cfg->broker_host, "127.0.0.1");
  assert_int_equal(cfg->broker_port, 1883);
  assert_string_equal(cfg->client_id, def.client_id);
  assert_int_equal(cfg->qos_data, 0);
  assert_int_equal(cfg->qos_state, 1);
  assert_int_equal(cfg->keepalive_s, 30);
  assert_int_equal(cfg->reconnect_min_ns, 500000000ull);
  assert_int_equal(cfg->reconnect_max_ns, 30000000000ull);
  assert_int_equal(cfg->n_events, def.n_events);
  assert_memory_equal(cfg->events, def.events, sizeof(cfg->events));
}

static void check_every_key(const em_config_t *cfg) {
  assert_string_equal(cfg->device_id, "orin-07");
  assert_int_equal(cfg->sample_period_ns, 250000000ull);
  assert_int_equal(cfg->smaps_period_ns, 2ull * 60 * 1000000000ull);
  assert_string_equal(cfg->runtime_dir, "/var/run/em");
  assert_string_equal(cfg->board, "jetson-orin-nano");
  assert_string_equal(cfg->proc_root, "/srv/fixtures/proc");
  assert_int_equal(cfg->log_level, EM_LOG_DEBUG);
  assert_int_equal(cfg->target.kind, EM_TARGET_PIDFILE);
  assert_string_equal(cfg->target.value, "/run/inference.pid");
  assert_string_equal(cfg->broker_host, "broker.lan");
  assert_int_equal(cfg->broker_port, 11883);
  assert_string_equal(cfg->client_id, "bench-7");
  assert_int_equal(cfg->qos_data, 1);
  assert_int_equal(cfg->qos_state, 0);
  assert_int_equal(cfg->keepalive_s, 3600);
  assert_int_equal(cfg->reconnect_min_ns, 1000000000ull);
  assert_int_equal(cfg->reconnect_max_ns, 1000000000ull);
  assert_int_equal(cfg->n_events, 3);
  assert_string_equal(cfg->events[0], "task-clock");
  assert_string_equal(cfg->events[1], "cycles");
  assert_string_equal(cfg->events[2], "major-faults");
  assert_string_equal(cfg->events[3], "");
}

static void check_smaps_off(const em_config_t *cfg) {
  assert_int_equal(cfg->smaps_period_ns, 0);
}

static void check_smaps_follows_sample(const em_config_t *cfg) {
  assert_int_equal(cfg->sample_period_ns, 10000000000ull);
  assert_int_equal(cfg->smaps_period_ns, 10000000000ull);
}

static void check_reconnect_max_follows_min(const em_config_t *cfg) {
  assert_int_equal(cfg->reconnect_min_ns, 60000000000ull);
  assert_int_equal(cfg->reconnect_max_ns, 60000000000ull);
}

static void check_reconnect_min_follows_max(const em_config_t *cfg) {
  assert_int_equal(cfg->reconnect_min_ns, 200000000ull);
  assert_int_equal(cfg->reconnect_max_ns, 200000000ull);
}

static void check_client_id_follows_device_id(const em_config_t *cfg) {
  assert_string_equal(cfg->device_id, "cam-02");
  assert_string_equal(cfg->client_id, "edgemon-cam-02");
}

static void check_broker_default_port(const em_config_t *cfg) {
  assert_string_equal(cfg->broker_host, "broker.example.org");
  assert_int_equal(cfg->broker_port, 1883);
}

static void check_broker_ipv6(const em_config_t *cfg) {
  assert_string_equal(cfg->broker_host, "::1");
  assert_int_equal(cfg->broker_port, 8883);
}

static void check_syntax_variants(const em_config_t *cfg) {
  assert_int_equal(cfg->target.kind, EM_TARGET_COMM);
  assert_string_equal(cfg->target.value, "python3");
  assert_string_equal(cfg->board, "rpi4");
  assert_int_equal(cfg->sample_period_ns, 50000000ull);
  assert_int_equal(cfg->qos_data, 1);
}

static void check_system_follows_sample(const em_config_t *cfg) {
  assert_int_equal(cfg->sample_period_ns, 5000000000ull);
  assert_int_equal(cfg->system_period_ns, 5000000000ull);
}

static void check_units(const em_config_t *cfg) {
  assert_int_equal(cfg->sample_period_ns, 1500000ull);
  assert_int_equal(cfg->smaps_period_ns, 2000000000ull);
  assert_int_equal(cfg->keepalive_s, 120);
  assert_int_equal(cfg->reconnect_min_ns, 250000000ull);
  assert_int_equal(cfg->reconnect_max_ns, 3600000000000ull);
}

static void check_sixteen_events(const em_config_t *cfg) {
  assert_int_equal(cfg->n_events, 16);
  assert_string_equal(cfg->events[0], "cycles");
  assert_string_equal(cfg->events[15], "minor-faults");
}

static void check_log_level_error(const em_config_t *cfg) {
  assert_int_equal(cfg->log_level, EM_LOG_ERROR);
}

static void check_limits(const em_config_t *cfg) {
  assert_int_equal(cfg->sample_period_ns, 60000000000ull);
  assert_int_equal(cfg->smaps_period_ns, 3600000000000ull);
  assert_int_equal(cfg->keepalive_s, 5);
  assert_int_equal(strlen(cfg->device_id), 63);
  assert_int_equal(strlen(cfg->client_id), 64);
}

/* [degrade] and [budget.*] left out: defaults, no rules. */
static void check_degrade_defaults(const em_config_t *cfg) {
  assert_int_equal(cfg->n_rules, 0);
  assert_int_equal(cfg->enter_windows, 3);
  assert_int_equal(cfg->leave_windows, 5);
  assert_int_equal(cfg->window_ns, 1000000000ull);
  assert_string_equal(cfg->hook, "");
  assert_int_equal(cfg->hook_timeout_ns, 5000000000ull);
}

static void check_degrade(const em_config_t *cfg) {
  assert_int_equal(cfg->enter_windows, 1);
  assert_int_equal(cfg->leave_windows, 1000);
  assert_int_equal(cfg->window_ns, 500000000ull);
  assert_string_equal(cfg->hook, "/usr/local/bin/on-level");
  assert_int_equal(cfg->hook_timeout_ns, 10ull * 60 * 1000000000ull);
}

static void check_spool_defaults(const em_config_t *cfg) {
  assert_string_equal(cfg->spool_path, "/var/lib/edgemon/spool");
  assert_int_equal(cfg->spool_bytes, 16ull << 20);
  assert_int_equal(cfg->spool_sync_ns, 5000000000ull);
  assert_int_equal(cfg->replay_per_tick, 32);
  assert_int_equal(cfg->ack_timeout_ns, 10000000000ull);
  assert_int_equal(cfg->sensors_period_ns, 0);
  assert_false(cfg->sample_period_set);
  assert_string_equal(cfg->sys_root, "/");
}

static void check_flight_defaults(const em_config_t *cfg) {
  assert_true(cfg->flight_enabled);
  assert_int_equal(cfg->flight_pre_ns, 10000000000ull);
  assert_int_equal(cfg->flight_post_ns, 2000000000ull);
  assert_int_equal(cfg->flight_max_spans, 16384);
  assert_int_equal(cfg->flight_max_bytes, 262144);
  assert_int_equal(cfg->flight_min_gap_ns, 30000000000ull);
}

static void check_flight(const em_config_t *cfg) {
  assert_false(cfg->flight_enabled);
  assert_int_equal(cfg->flight_pre_ns, 2000000000ull);
  assert_int_equal(cfg->flight_post_ns, 500000000ull);
  assert_int_equal(cfg->flight_max_spans, 4096);
  assert_int_equal(cfg->flight_max_bytes, 64ull << 10);
  assert_int_equal(cfg->flight_min_gap_ns, 0);
}

static void check_spool(const em_config_t *cfg) {
  assert_string_equal(cfg->spool_path, "/data/edgemon.spool");
  assert_int_equal(cfg->spool_bytes, 64ull << 10);
  assert_int_equal(cfg->spool_sync_ns, 250000000ull);
  assert_int_equal(cfg->replay_per_tick, 500);
}

static void check_sensors_period(const em_config_t *cfg) {
  assert_int_equal(cfg->sensors_period_ns, 250000000ull);
  assert_true(cfg->sample_period_set);
  assert_string_equal(cfg->sys_root, "/srv/board");
}

/* Kernel event names, raw codes and pmu/terms/ (its commas do not split the list). */
static void check_kernel_events(const em_config_t *cfg) {
  assert_int_equal(cfg->n_events, 4);
  assert_true(cfg->events_set);
  assert_string_equal(cfg->events[0], "cycles");
  assert_string_equal(cfg->events[1], "l1d_cache_refill");
  assert_string_equal(cfg->events[2], "r0011");
  assert_string_equal(cfg->events[3], "armv8_pmuv3_0/event=0x11,umask=0x2/");
}

static void check_spool_off(const em_config_t *cfg) {
  assert_string_equal(cfg->spool_path, "off");
  assert_int_equal(cfg->ack_timeout_ns, 0);
}

static void check_window_follows_sample(const em_config_t *cfg) {
  assert_int_equal(cfg->window_ns, 5000000000ull);
}

/* Bytes of a stage rule's union that its kind uses; fill_rule leaves the rest 0. */
static size_t stage_kind_bytes(const em_budget_rule_t *r) {
  switch (r->kind) {
  case EM_BUDGET_RULE_PERCENTILE:
    return sizeof(r->u.percentile);
  case EM_BUDGET_RULE_DEADLINE:
    return sizeof(r->u.deadline);
  case EM_BUDGET_RULE_MISS_RATIO:
    return sizeof(r->u.miss_ratio);
  case EM_BUDGET_RULE_ALIVE:
    return sizeof(r->u.alive);
  case EM_BUDGET_RULE_RATE:
    return sizeof(r->u.rate);
  default:
    fail_msg("rule %s is not a stage rule (kind %d)", r->id, (int)r->kind);
    return 0;
  }
}

/* The stage rules of "stage budget", in file order. */
static void check_stage_budget(const em_config_t *cfg) {
  assert_int_equal(cfg->n_rules, 9);
  const em_budget_rule_t *r = cfg->rules;
  assert_string_equal(r[0].id, "infer.p99");
  assert_string_equal(r[0].stage, "infer");
  assert_int_equal(r[0].kind, EM_BUDGET_RULE_PERCENTILE);
  assert_true(r[0].u.percentile.q == 0.99);
  assert_int_equal(r[0].u.percentile.bound_ns, 40000000ull);
  assert_int_equal(r[0].level, 2); /* EM_LEVEL_DEGRADED: the section's level. */
  assert_int_equal(cfg->rule_line[0], 2);
  assert_string_equal(r[1].id, "infer.deadline");
  assert_int_equal(r[1].kind, EM_BUDGET_RULE_DEADLINE);
  assert_int_equal(r[1].u.deadline.bound_ns, 100000000ull);
  assert_int_equal(r[1].level, 3); /* deadline_level = critical */
  assert_string_equal(r[2].id, "infer.miss_ratio");
  assert_int_equal(r[2].kind, EM_BUDGET_RULE_MISS_RATIO);
  assert_true(r[2].u.miss_ratio.max_ratio == 0.05);
  assert_int_equal(r[2].u.miss_ratio.bound_ns, 40000000ull);
  assert_string_equal(r[3].id, "infer.stall");
  assert_int_equal(r[3].kind, EM_BUDGET_RULE_ALIVE);
  assert_int_equal(r[3].u.alive.silence_ns, 500000000ull);
  assert_int_equal(r[3].level, 1); /* stall_level = WARN */
  assert_string_equal(r[4].id, "infer.min_rate");
  assert_int_equal(r[4].kind, EM_BUDGET_RULE_RATE);
  assert_true(r[4].u.rate.min_fps == 15.0);
  /* [budget.pre.gpu:0]: p50, p90, p999 and a miss_ratio whose bound is the deadline. */
  assert_string_equal(r[5].id, "pre.gpu:0.p50");
  assert_string_equal(r[5].stage, "pre.gpu:0");
  assert_true(r[5].u.percentile.q == 0.5);
  assert_int_equal(r[5].u.percentile.bound_ns, 250000ull);
  assert_int_equal(r[5].level, 1);
  assert_true(r[6].u.percentile.q == 0.999);
  assert_string_equal(r[7].id, "pre.gpu:0.deadline");
  assert_string_equal(r[8].id, "pre.gpu:0.miss_ratio");
  assert_int_equal(r[8].u.miss_ratio.bound_ns, 2000000ull);
  assert_true(r[8].u.miss_ratio.max_ratio == 0.5);
  assert_int_equal(r[8].level, 3);
  for (size_t i = 0; i < cfg->n_rules; i++) {
    /* No cap, no figure, nothing of another kind: the union is 0 past the kind's fields. */
    const unsigned char *u = (const unsigned char *)&r[i].u;
    for (size_t k = stage_kind_bytes(&r[i]); k < sizeof(r[i].u); k++) {
      assert_int_equal(u[k], 0);
    }
  }
}

/* temp_max and throttle: gauge rules on the sensor figures, with their own levels. */
static void check_sensor_budget(const em_config_t *cfg) {
  assert_int_equal(cfg->n_rules, 2);
  const em_budget_rule_t *t = &cfg->rules[0];
  assert_string_equal(t->id, "process.temp_max");
  assert_int_equal(t->kind, EM_BUDGET_RULE_GAUGE_MAX);
  assert_string_equal(t->u.gauge.figure, EM_CONFIG_FIGURE_TEMP);
  assert_true(t->u.gauge.max == 85.5);
  assert_int_equal(t->level, 1); /* WARN, the section's level */
  const em_budget_rule_t *h = &cfg->rules[1];
  assert_string_equal(h->id, "process.throttle");
  assert_int_equal(h->kind, EM_BUDGET_RULE_GAUGE_MAX);
  assert_string_equal(h->u.gauge.figure, EM_CONFIG_FIGURE_THROTTLED);
  assert_true(h->u.gauge.max == 0.5);
  assert_int_equal(h->level, 2); /* DEGRADED, throttle_level */
}

static void check_process_budget(const em_config_t *cfg) {
  assert_int_equal(cfg->n_rules, 7);
  const em_budget_rule_t *r = cfg->rules;
  assert_string_equal(r[0].id, "process.rss_cap");
  assert_string_equal(r[0].stage, "");
  assert_int_equal(r[0].kind, EM_BUDGET_RULE_RSS_CAP);
  assert_int_equal(r[0].u.rss_cap.cap_bytes, 2ull << 30);
  assert_int_equal(r[0].level, 3);
  assert_int_equal(cfg->rule_line[0], 3);
  assert_string_equal(r[1].id, "process.rss_slope");
  assert_int_equal(r[1].kind, EM_BUDGET_RULE_RSS_SLOPE);
  assert_true(r[1].u.rss_slope.max_mib_per_h == 50.0);
  assert_int_equal(r[1].u.rss_slope.horizon_ns, 30ull * 60 * 1000000000ull); /* The default. */
  assert_int_equal(r[1].level, 1);
  static const char *const figures[] = {"psi.cpu.some.avg10", "psi.memory.some.avg10",
                                        "psi.memory.full.avg10", "psi.io.some.avg10",
                                        "psi.io.full.avg10"};
  for (size_t i = 0; i < 5; i++) {
    assert_int_equal(r[2 + i].kind, EM_BUDGET_RULE_PSI);
    assert_string_equal(r[2 + i].u.gauge.figure, figures[i]);
    assert_int_equal(r[2 + i].level, 2);
  }
  assert_string_equal(r[2].id, "process.psi_cpu_some");
  assert_true(r[2].u.gauge.max == 40.0);
  assert_true(r[6].u.gauge.max == 100.0);
}

/* Rules of several sections come in file order; repeated sections merge. */
static void check_budget_file_order(const em_config_t *cfg) {
  assert_int_equal(cfg->n_rules, 4);
  assert_string_equal(cfg->rules[0].id, "b.p99");
  assert_string_equal(cfg->rules[1].id, "process.rss_cap");
  assert_int_equal(cfg->rules[1].u.rss_cap.cap_bytes, 1ull << 20);
  assert_string_equal(cfg->rules[2].id, "a.deadline");
  assert_string_equal(cfg->rules[3].id, "b.stall");
  assert_int_equal(cfg->rules[3].level, 3); /* [budget.b]'s level, given after the rule. */
  assert_string_equal(cfg->rules[3].stage, "b");
  assert_int_equal(cfg->rule_line[2], 6);
  assert_int_equal(cfg->rules[1].u.rss_slope.horizon_ns, 0);
}

static void check_64_rules(const em_config_t *cfg) {
  assert_int_equal(cfg->n_rules, 64);
  assert_string_equal(cfg->rules[0].id, "s0.p50");
  assert_string_equal(cfg->rules[63].id, "s7.min_rate");
  assert_int_equal(cfg->rule_line[63], 88);
}

/* Flow rules: the section name is the id's prefix; the stages are the flow's own. */
static void check_flow_budget(const em_config_t *cfg) {
  assert_int_equal(cfg->n_rules, 3);
  const em_budget_rule_t *r = cfg->rules;
  assert_string_equal(r[0].id, "pipeline.flow");
  assert_int_equal(r[0].kind, EM_BUDGET_RULE_FLOW);
  assert_int_equal(r[0].level, 3); /* CRITICAL */
  assert_int_equal(cfg->rule_line[0], 2);
  assert_int_equal(r[0].u.flow.n_stages, 3);
  assert_string_equal(r[0].u.flow.stages[0], "preprocess");
  assert_string_equal(r[0].u.flow.stages[1], "infer");
  assert_string_equal(r[0].u.flow.stages[2], "postprocess");
  assert_string_equal(r[0].stage, "preprocess");
  assert_int_equal(r[0].u.flow.deadline_ns, 100000000ull);
  assert_string_equal(r[1].id, "infer.p99");
  assert_string_equal(r[1].stage, "infer");
  assert_string_equal(r[2].id, "infer.flow");
  assert_int_equal(r[2].level, 1); /* WARN, from the section. */
  assert_int_equal(r[2].u.flow.n_stages, EM_BUDGET_FLOW_MAX_STAGES);
  assert_string_equal(r[2].u.flow.stages[0], "a");
  assert_string_equal(r[2].u.flow.stages[7], "gpu:0.h");
  assert_string_equal(r[2].stage, "a");
  assert_int_equal(r[2].u.flow.deadline_ns, 5000000ull);
}

static const valid_case_t valid_cases[] = {
    {"no budget: degrade defaults", TARGET, check_degrade_defaults},
    {"spool defaults", TARGET, check_spool_defaults},
    {"kernel, raw and pmu/terms/ events",
     "[pmu]\nevents = cycles, l1d_cache_refill r0011, armv8_pmuv3_0/event=0x11,umask=0x2/\n" TARGET,
     check_kernel_events},
    {"sensors period and sys_root",
     "[agent]\nsensors_period = 250ms\nsample_period = 100ms\nsys_root = /srv/board\n" TARGET,
     check_sensors_period},
    {"spool keys",
     "[spool]\npath = /data/edgemon.spool\nsize = 64KiB\nsync_interval = 250ms\n"
     "replay_per_tick = 500\n" TARGET,
     check_spool},
    {"spool off", "[spool]\npath = off\n[mqtt]\nack_timeout = off\n" TARGET, check_spool_off},
    {"flight defaults", TARGET, check_flight_defaults},
    {"flight keys",
     "[flight]\nenabled = false\npre_seconds = 2\npost_seconds = 500ms\nmax_spans = 4096\n"
     "max_bytes = 64KiB\nmin_gap_seconds = 0\n" TARGET,
     check_flight},
    {"degrade keys",
     "[degrade]\nenter_windows = 1\nleave_windows = 1000\nwindow = 500ms\n"
     "hook = /usr/local/bin/on-level\nhook_timeout = 10m\n" TARGET,
     check_degrade},
    {"default window follows a longer sample_period", "[agent]\nsample_period = 5s\n" TARGET,
     check_window_follows_sample},
    {"stage budget",
     "[budget.infer]\n"                      /* 1 */
     "p99 = 40ms        ; over the window\n" /* 2 */
     "deadline = 100ms\n"                    /* 3 */
     "deadline_level = critical\n"           /* 4 */
     "miss_ratio = 0.05\n"                   /* 5 */
     "miss_over = 40ms\n"                    /* 6 */
     "stall = 500ms\n"                       /* 7 */
     "stall_level = WARN\n"                  /* 8 */
     "min_rate = 15\n"                       /* 9 */
     "level = DEGRADED\n"                    /* 10 */
     "[budget.pre.gpu:0]\n"                  /* 11 */
     "level = Warn\n"
     "p50 = 250us\n"
     "p999 = 5ms\n"
     "deadline = 2ms\n"
     "miss_ratio = 0.5\n"
     "miss_ratio_level = CRITICAL\n" TARGET,
     check_stage_budget},
    {"process budget",
     "[budget.process]\n"
     "level = DEGRADED\n"
     "rss_cap = 2GiB\n"
     "rss_cap_level = CRITICAL\n"
     "rss_slope = 50\n"
     "rss_slope_level = WARN\n"
     "psi_cpu_some = 40\n"
     "psi_memory_some = 20.5\n"
     "psi_memory_full = 5\n"
     "psi_io_some = 40\n"
     "psi_io_full = 100\n" TARGET,
     check_process_budget},
    {"sensor budget",
     "[budget.process]\nlevel = WARN\ntemp_max = 85.5\nthrottle = on\n"
     "throttle_level = DEGRADED\n" TARGET,
     check_sensor_budget},
    {"budget rules in file order across sections",
     "[budget.b]\n"
     "p99 = 1ms\n"
     "[budget.process]\n"
     "rss_cap = 1MiB\n"
     "[budget.a]\n" /* 5: deadline on 6 */
     "deadline = 1ms\n"
     "level = WARN\n"
     "[budget.b]\n"
     "stall = 1s\n"
     "level = CRITICAL\n"
     "[budget.process]\n"
     "level = WARN\n" TARGET,
     check_budget_file_order},
    {"64 rules", STAGES64 TARGET, check_64_rules},
    {"flow budget",
     "[budget.pipeline]\n"                     /* 1 */
     "flow = preprocess, infer ,postprocess\n" /* 2 */
     "flow_deadline = 100ms\n"                 /* 3 */
     "flow_level = critical\n"                 /* 4 */
     "[budget.infer]\n"                        /* 5 */
     "level = WARN\n"                          /* 6 */
     "p99 = 40ms\n"                            /* 7 */
     "flow = a,b,c,d,e,f,g,gpu:0.h\n"          /* 8 */
     "flow_deadline = 5ms\n" TARGET,
     check_flow_budget},
    {"line of 1024 characters", "[target]\npid = 42\n; " X255 X255 X255 X255 "xx\n",
     check_defaults_around_pid},
    {"only a pid: everything else default", "[target]\npid = 42\n", check_defaults_around_pid},
    {"every key set",
     "[agent]\n"
     "device_id = orin-07\n"
     "sample_period = 250ms\n"
     "smaps_period = 2m\n"
     "runtime_dir = /var/run/em\n"
     "board = jetson-orin-nano\n"
     "proc_root = /srv/fixtures/proc\n"
     "log_level = debug\n"
     "[target]\n"
     "pid_file = /run/inference.pid\n"
     "[mqtt]\n"
     "broker = mqtt://broker.lan:11883\n"
     "client_id = bench-7\n"
     "qos_data = 1\n"
     "qos_state = 0\n"
     "keepalive = 1h\n"
     "reconnect_min = 1s\n"
     "reconnect_max = 1s\n"
     "[pmu]\n"
     "events = task-clock cycles,major-faults\n",
     check_every_key},
    {"smaps_period 0 is off", "[agent]\nsmaps_period = 0\n" TARGET, check_smaps_off},
    {"spans section",
     "[spans]\nsocket = /srv/em/s.sock\nsocket_mode = 0620\nsocket_group = root\n"
     "allow_uids = root 1000\nallow_gids = 0\nmax_stages = 8\n" TARGET,
     check_spans},
    {"span socket follows runtime_dir", "[agent]\nruntime_dir = /srv/run\n" TARGET,
     check_span_socket_follows_runtime_dir},
    {"smaps_period off is off", "[agent]\nsmaps_period = off\n" TARGET, check_smaps_off},
    {"default smaps_period follows a longer sample_period", "[agent]\nsample_period = 10s\n" TARGET,
     check_smaps_follows_sample},
    {"default system_period follows a longer sample_period", "[agent]\nsample_period = 5s\n" TARGET,
     check_system_follows_sample},
    {"default reconnect_max follows a longer reconnect_min", "[mqtt]\nreconnect_min = 1m\n" TARGET,
     check_reconnect_max_follows_min},
    {"default reconnect_min follows a shorter reconnect_max",
     "[mqtt]\nreconnect_max = 200ms\n" TARGET, check_reconnect_min_follows_max},
    {"default client_id follows device_id", "[agent]\ndevice_id = cam-02\n" TARGET,
     check_client_id_follows_device_id},
    {"broker without a port", "[mqtt]\nbroker = mqtt://broker.example.org\n" TARGET,
     check_broker_default_port},
    {"broker with an IPv6 literal", "[mqtt]\nbroker = mqtt://[::1]:8883\n" TARGET,
     check_broker_ipv6},
    {"BOM, CRLF, comments, indentation, ':' and inline comments",
     "\xEF\xBB\xBF; comment\r\n"
     "# another comment\r\n"
     "\r\n"
     "  [ agent ]   ; section comment\r\n"
     "\tboard: rpi4\r\n"
     "    sample_period = 50ms ; fast\r\n"
     "[target]\r\n"
     "process_name=python3\r\n"
     "[mqtt]\n"
     "qos_data = 1 ;a comment\n",
     check_syntax_variants},
    {"every duration unit",
     "[agent]\nsample_period = 1500us\nsmaps_period = 2000000000ns\n"
     "[mqtt]\nkeepalive = 2m\nreconnect_min = 250ms\nreconnect_max = 1h\n" TARGET,
     check_units},
    {"sixteen events",
     "[pmu]\nevents = cycles instructions cache-references cache-misses branch-instructions "
     "branch-misses stalled-cycles-frontend stalled-cycles-backend ref-cycles bus-cycles "
     "task-clock cpu-clock context-switches cpu-migrations page-faults minor-faults\n" TARGET,
     check_sixteen_events},
    {"log_level error", "[agent]\nlog_level = error\n" TARGET, check_log_level_error},
    {"values at their limits",
     "[agent]\nsample_period = 60s\nsmaps_period = 1h\ndevice_id = " X16 X16 X16 X15 "\n"
     "[mqtt]\nkeepalive = 5s\nclient_id = " A64 "\n" TARGET,
     check_limits},
};

static const target_case_t target_cases[] = {
    {"process_name of 15 characters",
     "[target]\nprocess_name = abcdefghijklmno\n",
     {EM_TARGET_COMM, 0, "abcdefghijklmno"}},
    {"cmdline of 255 characters (longer than libinih's line)",
     "[target]\ncmdline = " X255 "\n",
     {EM_TARGET_CMDLINE, 0, X255}},
    {"cmdline with spaces and an inline comment",
     "[target]\ncmdline =   python3 -m detect --model yolo.onnx   ; the detector\n",
     {EM_TARGET_CMDLINE, 0, "python3 -m detect --model yolo.onnx"}},
    {"pid_file of 255 characters", "[target]\npid_file = " P255 "\n", {EM_TARGET_PIDFILE, 0, P255}},
    {"cgroup",
     "[target]\ncgroup = /sys/fs/cgroup/system.slice/inference.service\n",
     {EM_TARGET_CGROUP, 0, "/sys/fs/cgroup/system.slice/inference.service"}},
    {"pid at the kernel limit", "[target]\npid = 4194304\n", {EM_TARGET_PID, 4194304, ""}},
};

/* ini loads into *cfg with no error; name says which row failed otherwise. */
static void load_valid(const char *name, const char *ini, em_config_t *cfg) {
  seen_t seen;
  char path[32];
  if (load_text(ini, cfg, &seen, path) != 0 || seen.n != 0) {
    fail_row(name, "a valid file was rejected", &seen);
  }
}

/* Each row of valid_cases loads with no error and the values its check expects; each row of
 * target_cases, the target it names. */
static void config_parses_valid_files(void **state) {
  (void)state;
  for (size_t r = 0; r < sizeof(valid_cases) / sizeof(valid_cases[0]); r++) {
    const valid_case_t *row = &valid_cases[r];
    em_config_t cfg;
    load_valid(row->name, row->ini, &cfg);
    row->check(&cfg);
  }
  for (size_t r = 0; r < sizeof(target_cases) / sizeof(target_cases[0]); r++) {
    em_config_t cfg;
    load_valid(target_cases[r].name, target_cases[r].ini, &cfg);
    expect_target(&cfg.target, &target_cases[r].want);
  }
}

/* A derived client_id ("edgemon-" + a 63-character device_id) is kept whole, past 64. */
static void config_default_client_id_is_not_truncated(void **state) {
  (void)state;
  em_config_t cfg;
  seen_t seen;
  char path[32];
  const char *ini = "[agent]\ndevice_id = " X16 X16 X16 X15 "\n" TARGET;
  assert_int_equal(load_text(ini, &cfg, &seen, path), 0);
  assert_string_equal(cfg.client_id, "edgemon-" X16 X16 X16 X15);
}

/* ---- the parsers on their own ---------------------------------------------------------- */

static void config_parses_durations(void **state) {
  (void)state;
  static const struct {
    const char *text;
    int rc;
    uint64_t ns;
  } rows[] = {
      {"250us", 0, 250000ull},
      {"100ms", 0, 100000000ull},
      {"1s", 0, 1000000000ull},
      {"2m", 0, 120000000000ull},
      {"1h", 0, 3600000000000ull},
      {"1500000ns", 0, 1500000ull},
      {"0ns", 0, 0},
      {"007ms", 0, 7000000ull},
      {"18446744073709551615ns", 0, UINT64_MAX},
      {"18446744073709551616ns", -EINVAL, 0},
      {"18446744073709551s", -EINVAL, 0},
      {"10", -EINVAL, 0},
      {"10xs", -EINVAL, 0},
      {"10MS", -EINVAL, 0},
      {"-5ms", -EINVAL, 0},
      {"+5ms", -EINVAL, 0},
      {"1.5s", -EINVAL, 0},
      {"ms", -EINVAL, 0},
      {"", -EINVAL, 0},
      {" 5ms", -EINVAL, 0},
      {"5ms ", -EINVAL, 0},
      {"5 ms", -EINVAL, 0},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    uint64_t ns = 12345;
    int rc = em_config_parse_duration(rows[i].text, &ns);
    if (rc != rows[i].rc) {
      fail_msg("'%s': rc %d, expected %d", rows[i].text, rc, rows[i].rc);
    }
    assert_int_equal(ns, rc == 0 ? rows[i].ns : 12345); /* Untouched on failure. */
  }
  uint64_t ns = 0;
  assert_int_equal(em_config_parse_duration(NULL, &ns), -EINVAL);
  assert_int_equal(em_config_parse_duration("1s", NULL), -EINVAL);
}

static void config_parses_broker_urls(void **state) {
  (void)state;
  const em_test_broker_url_t *rows = em_test_broker_urls;
  for (size_t i = 0; i < sizeof(em_test_broker_urls) / sizeof(rows[0]); i++) {
    char host[64] = "";
    uint16_t port = 0;
    int rc = em_config_parse_broker(rows[i].url, host, sizeof(host), &port);
    if (rc != rows[i].rc) {
      fail_msg("'%s': rc %d, expected %d", rows[i].url, rc, rows[i].rc);
    }
    if (rc == 0) {
      assert_string_equal(host, rows[i].host);
      assert_int_equal(port, rows[i].port);
    }
  }
  char small[4];
  uint16_t port = 0;
  assert_int_equal(em_config_parse_broker("mqtt://broker", small, sizeof(small), &port), -EINVAL);
  assert_int_equal(em_config_parse_broker("mqtt://abc", small, sizeof(small), &port), 0);
  assert_string_equal(small, "abc");
  assert_int_equal(em_config_parse_broker(NULL, small, sizeof(small), &port), -EINVAL);
}

/* ---- defaults, the example file, many problems, unreadable files ----------------------- */

static void config_defaults_are_documented_values(void **state) {
  (void)state;
  em_config_t cfg;
  memset(&cfg, 0xa5, sizeof(cfg));
  em_config_defaults(&cfg);
  size_t n = strlen(cfg.device_id);
  assert_true(n >= 1 && n <= 63);
  for (size_t i = 0; i < n; i++) {
    char c = cfg.device_id[i];
    assert_true((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                strchr("_.:-", c) != NULL);
  }
  char client_id[sizeof(cfg.client_id)];
  snprintf(client_id, sizeof(client_id), "edgemon-%s", cfg.device_id);
  assert_string_equal(cfg.client_id, client_id);
  if (geteuid() == 0) {
    assert_string_equal(cfg.runtime_dir, "/run/edgemon");
  } else {
    assert_true(cfg.runtime_dir[0] == '/');
    assert_non_null(strstr(cfg.runtime_dir, "edgemon"));
  }
  assert_int_equal(cfg.target.kind, EM_TARGET_NONE);
  assert_int_equal(cfg.target.pid, 0);
  assert_int_equal(cfg.sample_period_ns, 100000000ull);
  assert_int_equal(cfg.smaps_period_ns, 5000000000ull);
  assert_string_equal(cfg.board, "auto");
  assert_string_equal(cfg.proc_root, "/proc");
  assert_int_equal(cfg.log_level, EM_LOG_INFO);
  assert_string_equal(cfg.broker_host, "127.0.0.1");
  assert_int_equal(cfg.broker_port, 1883);
  assert_int_equal(cfg.qos_data, 0);
  assert_int_equal(cfg.qos_state, 1);
  assert_int_equal(cfg.keepalive_s, 30);
  assert_int_equal(cfg.reconnect_min_ns, 500000000ull);
  assert_int_equal(cfg.reconnect_max_ns, 30000000000ull);
  static const char *const events[] = {
      "cycles",        "instructions", "cache-references", "cache-misses",   "branch-instructions",
      "branch-misses", "task-clock",   "context-switches", "cpu-migrations", "page-faults"};
  assert_int_equal(cfg.n_events, 10);
  for (size_t i = 0; i < 10; i++) {
    assert_string_equal(cfg.events[i], events[i]);
  }
  for (size_t i = 10; i < EM_CONFIG_MAX_EVENTS; i++) {
    assert_string_equal(cfg.events[i], "");
  }
  em_config_defaults(NULL); /* Does nothing. */
}

/* Without root, runtime_dir comes from XDG_RUNTIME_DIR, else /tmp/edgemon-<uid>. */
static void config_runtime_dir_follows_xdg_without_root(void **state) {
  (void)state;
  if (geteuid() == 0) {
    skip(); /* Root always gets /run/edgemon (checked above). */
  }
  const char *old = getenv("XDG_RUNTIME_DIR");
  char saved[512] = "";
  if (old != NULL) {
    snprintf(saved, sizeof(saved), "%s", old);
  }
  em_config_t cfg;
  setenv("XDG_RUNTIME_DIR", "/run/user/1234", 1);
  em_config_defaults(&cfg);
  assert_string_equal(cfg.runtime_dir, "/run/user/1234/edgemon");
  unsetenv("XDG_RUNTIME_DIR");
  em_config_defaults(&cfg);
  char expect[64];
  snprintf(expect, sizeof(expect), "/tmp/edgemon-%lu", (unsigned long)geteuid());
  assert_string_equal(cfg.runtime_dir, expect);
  if (old != NULL) {
    setenv("XDG_RUNTIME_DIR", saved, 1);
  }
}

static void config_example_file_is_valid(void **state) {
  (void)state;
  em_config_t cfg;
  seen_t seen;
  memset(&seen, 0, sizeof(seen));
  int n_errors = -1;
  int rc = em_config_load(EXAMPLE_INI, &cfg, collect, &seen, &n_errors);
  if (rc != 0 || seen.n != 0) {
    fail_row(EXAMPLE_INI, "the example config has errors", &seen);
  }
  assert_int_equal(n_errors, 0);
  assert_int_equal(cfg.target.kind, EM_TARGET_CMDLINE);
  assert_int_equal(cfg.n_events, 10);
  assert_int_equal(cfg.n_rules, 8);
  assert_string_equal(cfg.rules[0].id, "infer.p99");
  assert_string_equal(cfg.rules[7].id, "process.psi_memory_some");
}

/* All problems of a file are reported, each on its own line, then the whole-file ones. */
static void config_reports_every_error_not_just_the_first(void **state) {
  (void)state;
  const char *ini = "; edgemon-agent.ini with many problems\n" /* 1 */
                    "[agent]\n"                                /* 2 */
                    "device_id = a/b\n"                        /* 3 */
                    "board = generic\n"                        /* 4 */
                    "smaps_period = 10ms\n"                    /* 5 */
                    "colour = blue\n"                          /* 6 */
                    "\n"                                       /* 7 */
                    "[mqtt]\n"                                 /* 8 */
                    "broker = ftp://broker\n"                  /* 9 */
                    "qos_data = 2\n"                           /* 10 */
                    "reconnect_min = 5s\n"                     /* 11 */
                    "reconnect_max = 1s\n"                     /* 12 */
                    "this line is wrong\n"                     /* 13 */
                    "[pmu]\n"                                  /* 14 */
                    "events = cycles cycles\n"                 /* 15 */
                    "[agent]\n"                                /* 16 */
                    "board = rpi4\n";                          /* 17 */
  em_config_t cfg;
  seen_t seen;
  char path[32];
  assert_int_equal(load_text(ini, &cfg, &seen, path), -EINVAL);
  static const char *const expect[] = {
      "3: device_id 'a/b' may use only letters, digits and _ . : -$",
      "6: unknown key 'colour' in [agent]$",
      "9: broker 'ftp://broker' must look like mqtt://HOST[:PORT] or mqtts://HOST[:PORT]~",
      "10: qos_data '2' must be 0 or 1~",
      "13: expected 'key = value', got 'this line is wrong'$",
      "15: pmu event 'cycles' is listed twice$",
      "17: duplicate key 'board' in [agent] (first on line 4)$",
      "0: [target] needs one of pid, pid_file, process_name, cmdline, cgroup$",
      "5: smaps_period 10ms is shorter than sample_period 100ms~",
      "12: reconnect_max 1s is below reconnect_min 5s (line 11)$",
  };
  if (seen.n != sizeof(expect) / sizeof(expect[0])) {
    fail_row("many problems", "wrong number of errors", &seen);
  }
  for (size_t i = 0; i < seen.n; i++) {
    if (!matches(seen.lines[i], path, expect[i])) {
      print_error("expected %s:%s\n", path, expect[i]);
      fail_row("many problems", "error does not match", &seen);
    }
  }
}

/* A NUL byte spoils only its own line; the lines around it still count. */
static void config_reports_nul_byte_on_its_line(void **state) {
  (void)state;
  static const char ini[] = "[agent]\nboard = a\0b\nsample_period = 5\n[target]\npid = 1\n";
  em_config_t cfg;
  seen_t seen;
  char path[32];
  assert_int_equal(load_bytes(ini, sizeof(ini) - 1, &cfg, &seen, path), -EINVAL);
  assert_int_equal(seen.n, 2);
  assert_true(matches(seen.lines[0], path, "2: line contains a NUL byte$"));
  assert_true(matches(seen.lines[1], path, "3: sample_period needs a unit, e.g. 100ms$"));
}

/* The last line needs no newline; line numbers do not drift over long files. */
static void config_counts_lines_over_long_files(void **state) {
  (void)state;
  static char ini[16384];
  size_t used = (size_t)snprintf(ini, sizeof(ini), "[agent]\n");
  for (int i = 0; i < 500; i++) {
    used += (size_t)snprintf(ini + used, sizeof(ini) - used, "; comment %d\n", i);
  }
  snprintf(ini + used, sizeof(ini) - used, "colour = blue\n[target]\npid = 7");
  em_config_t cfg;
  seen_t seen;
  char path[32];
  assert_int_equal(load_text(ini, &cfg, &seen, path), -EINVAL);
  assert_int_equal(seen.n, 1);
  assert_true(matches(seen.lines[0], path, "502: unknown key 'colour' in [agent]$"));
  assert_int_equal(cfg.target.pid, 7);
}

static void config_missing_file_is_enoent(void **state) {
  (void)state;
  em_config_t cfg;
  seen_t seen;
  memset(&seen, 0, sizeof(seen));
  int n_errors = -1;
  const char *path = "/tmp/em-config-does-not-exist/agent.ini";
  assert_int_equal(em_config_load(path, &cfg, collect, &seen, &n_errors), -ENOENT);
  assert_int_equal(n_errors, 1);
  assert_int_equal(seen.n, 1);
  assert_true(matches(seen.lines[0], path, "0: cannot open: ~"));
  assert_non_null(strstr(seen.lines[0], strerror(ENOENT)));
}

static void config_directory_is_a_read_error(void **state) {
  (void)state;
  em_config_t cfg;
  seen_t seen;
  memset(&seen, 0, sizeof(seen));
  int n_errors = -1;
  assert_int_equal(em_config_load("/tmp", &cfg, collect, &seen, &n_errors), -EISDIR);
  assert_int_equal(n_errors, 1);
  assert_true(matches(seen.lines[0], "/tmp", "0: cannot read: ~"));
}

/* Reading stops at 1 MiB: a device or a wrong file does not keep the loader busy. */
static void config_file_over_1mib_is_efbig(void **state) {
  (void)state;
  em_config_t cfg;
  seen_t seen;
  memset(&seen, 0, sizeof(seen));
  int n_errors = -1;
  assert_int_equal(em_config_load("/dev/zero", &cfg, collect, &seen, &n_errors), -EFBIG);
  assert_int_equal(n_errors, 1);
  assert_true(matches(seen.lines[0], "/dev/zero", "0: file is larger than 1024 KiB~"));
}

/* on_error and n_errors may be NULL; bad arguments are -EINVAL. */
static void config_load_works_without_callback(void **state) {
  (void)state;
  char path[32];
  const char *ini = "[agent]\nsample_period = 10\n";
  write_temp(path, ini, strlen(ini));
  em_config_t cfg;
  assert_int_equal(em_config_load(path, &cfg, NULL, NULL, NULL), -EINVAL);
  int n_errors = 0;
  assert_int_equal(em_config_load(path, &cfg, NULL, NULL, &n_errors), -EINVAL);
  assert_int_equal(n_errors, 2);
  unlink(path);
  assert_int_equal(em_config_load(NULL, &cfg, NULL, NULL, &n_errors), -EINVAL);
  assert_int_equal(n_errors, 0);
  assert_int_equal(em_config_load("/x", NULL, NULL, NULL, NULL), -EINVAL);
}

/* ---- [mqtt] TLS files and credentials_file: real files with real modes ------------------ */

/* A private directory for TLS and credentials files; its path goes to dir (64 bytes). */
static void make_secret_dir(char dir[64]) {
  snprintf(dir, 64, "/tmp/em-config-tls-XXXXXX");
  assert_non_null(mkdtemp(dir));
}

/* Writes text to dir/name with `mode`; the path goes to out (128 bytes). */
static void write_file(char out[128], const char *dir, const char *name, const char *text,
                       mode_t mode) {
  snprintf(out, 128, "%s/%s", dir, name);
  FILE *f = fopen(out, "w");
  assert_non_null(f);
  assert_int_equal(fputs(text, f) >= 0, 1);
  assert_int_equal(fclose(f), 0);
  assert_int_equal(chmod(out, mode), 0);
}

/* Loads an INI text expecting exactly the errors in expect (NULL-terminated, "LINE: msg"). */
static void expect_errors(const char *name, const char *ini, const char *const *expect) {
  em_config_t cfg;
  seen_t seen;
  char path[32];
  size_t n = 0;
  while (expect[n] != NULL) {
    n++;
  }
  int rc = load_text(ini, &cfg, &seen, path);
  if ((n == 0) != (rc == 0) || seen.n != n) {
    fail_row(name, "wrong number of errors", &seen);
  }
  for (size_t i = 0; i < n; i++) {
    if (!matches(seen.lines[i], path, expect[i])) {
      print_error("expected %s:%s\n", path, expect[i]);
      fail_row(name, "error does not match", &seen);
    }
  }
}

/* mqtts:// with a CA, a client certificate and a private key, plus credentials: all loaded. */
static void config_loads_tls_and_credentials_files(void **state) {
  (void)state;
  char dir[64];
  char ca[128], crt[128], key[128], cred[128];
  make_secret_dir(dir);
  write_file(ca, dir, "ca.crt", "-----BEGIN CERTIFICATE-----\n", 0644);
  write_file(crt, dir, "dev.crt", "-----BEGIN CERTIFICATE-----\n", 0644);
  write_file(key, dir, "dev.key", "-----BEGIN PRIVATE KEY-----\n", 0600);
  write_file(cred, dir, "mqtt.cred",
             "# board credentials\n\n  username = jetson-07  \r\npassword=p a=ss;word\n", 0600);
  char ini[1024];
  snprintf(ini, sizeof(ini),
           "[mqtt]\nbroker = mqtts://broker.lan\ntls_ca_file = %s\ntls_cert_file = %s\n"
           "tls_key_file = %s\ntls_insecure = yes\ncredentials_file = %s\n" TARGET,
           ca, crt, key, cred);
  em_config_t cfg;
  seen_t seen;
  char path[32];
  if (load_text(ini, &cfg, &seen, path) != 0) {
    fail_row("tls and credentials", "a valid file was rejected", &seen);
  }
  assert_true(cfg.tls);
  assert_string_equal(cfg.broker_host, "broker.lan");
  assert_int_equal(cfg.broker_port, 8883);
  assert_string_equal(cfg.tls_ca_file, ca);
  assert_string_equal(cfg.tls_ca_path, "");
  assert_string_equal(cfg.tls_cert_file, crt);
  assert_string_equal(cfg.tls_key_file, key);
  assert_true(cfg.tls_insecure);
  assert_string_equal(cfg.credentials_file, cred);
  assert_string_equal(cfg.username, "jetson-07");
  assert_string_equal(cfg.password, "p a=ss;word");

  /* Without TLS, credentials alone; a username without a password is fine. */
  write_file(cred, dir, "user-only.cred", "username = cam-02\n", 0400);
  snprintf(ini, sizeof(ini), "[mqtt]\ncredentials_file = %s\n" TARGET, cred);
  if (load_text(ini, &cfg, &seen, path) != 0) {
    fail_row("credentials without tls", "a valid file was rejected", &seen);
  }
  assert_false(cfg.tls);
  assert_int_equal(cfg.broker_port, 1883);
  assert_false(cfg.tls_insecure);
  assert_string_equal(cfg.username, "cam-02");
  assert_string_equal(cfg.password, "");

  char cmd[160];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

/* A key or credentials file that others may read or write, or that is not a regular file. */
static void config_refuses_secret_files_others_can_reach(void **state) {
  (void)state;
  char dir[64];
  char ca[128], crt[128], key[128], cred[128], fifo[128];
  make_secret_dir(dir);
  write_file(ca, dir, "ca.crt", "x\n", 0644);
  write_file(crt, dir, "dev.crt", "x\n", 0644);
  write_file(key, dir, "dev.key", "x\n", 0640);
  write_file(cred, dir, "mqtt.cred", "username = a\npassword = b\n", 0604);
  snprintf(fifo, sizeof(fifo), "%s/fifo.cred", dir);
  assert_int_equal(mkfifo(fifo, 0600), 0);

  char ini[1024];
  char e1[512], e2[512];
  snprintf(ini, sizeof(ini),
           "[mqtt]\nbroker = mqtts://b\ntls_ca_file = %s\ntls_cert_file = %s\n"
           "tls_key_file = %s\ncredentials_file = %s\n" TARGET,
           ca, crt, key, cred);
  snprintf(e1, sizeof(e1),
           "5: tls_key_file '%s' is readable or writable by group or others (mode 0640); the "
           "agent refuses it: run chmod 600 on it$",
           key);
  snprintf(e2, sizeof(e2),
           "6: credentials_file '%s' is readable or writable by group or others "
           "(mode 0604)~",
           cred);
  const char *const both[] = {e1, e2, NULL};
  expect_errors("group-readable key, other-readable credentials", ini, both);

  assert_int_equal(chmod(cred, 0620), 0); /* Writable by the group is as bad. */
  assert_int_equal(chmod(key, 0600), 0);
  snprintf(e2, sizeof(e2),
           "6: credentials_file '%s' is readable or writable by group or others "
           "(mode 0620)~",
           cred);
  const char *const writable[] = {e2, NULL};
  expect_errors("group-writable credentials", ini, writable);

  snprintf(ini, sizeof(ini), "[mqtt]\ncredentials_file = %s\n" TARGET, fifo);
  snprintf(e1, sizeof(e1), "2: credentials_file '%s' is not a regular file$", fifo);
  const char *const not_regular[] = {e1, NULL};
  expect_errors("credentials from a fifo", ini, not_regular);

  if (geteuid() == 0) { /* Owned by another user: only root can make that. */
    assert_int_equal(chmod(cred, 0600), 0);
    assert_int_equal(chown(cred, 4242, 0), 0);
    snprintf(ini, sizeof(ini), "[mqtt]\ncredentials_file = %s\n" TARGET, cred);
    snprintf(e1, sizeof(e1),
             "2: credentials_file '%s' is owned by uid 4242, not by the agent's user (uid 0) or "
             "root; the agent refuses it$",
             cred);
    const char *const owner[] = {e1, NULL};
    expect_errors("credentials owned by another user", ini, owner);
  }
  char cmd[160];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

/* Credentials files with bad lines: each problem named with the file's own line. */
static void config_reports_bad_credentials_lines(void **state) {
  (void)state;
  static const struct {
    const char *name;
    const char *text;
    const char *expect[4]; /* After "2: credentials_file '<path>' " */
  } rows[] = {
      {"no username", "password = x\n", {"names no username; add a line 'username = NAME'$"}},
      {"empty file", "", {"names no username~"}},
      {"no equals sign",
       "username jetson\n",
       {"line 1: expected 'username = NAME' or 'password = SECRET'$"}},
      {"unknown key",
       "# c\nusername = a\nuser = b\n",
       {"line 3: unknown key 'user'; use username and password$"}},
      {"duplicate password",
       "username = a\npassword = b\npassword = c\n",
       {"line 3: duplicate password (first on line 2)$"}},
      {"empty password", "username = a\npassword =\n", {"line 2: password is empty$"}},
      {"username too long",
       "username = " X64 X64 "\n",
       {"line 1: username is longer than 127 characters$"}},
  };
  char dir[64];
  make_secret_dir(dir);
  for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
    char cred[128];
    write_file(cred, dir, "mqtt.cred", rows[r].text, 0600);
    char ini[512];
    snprintf(ini, sizeof(ini), "[mqtt]\ncredentials_file = %s\n" TARGET, cred);
    char expect[4][512];
    const char *list[5] = {NULL};
    for (size_t i = 0; i < 4 && rows[r].expect[i] != NULL; i++) {
      snprintf(expect[i], sizeof(expect[i]), "2: credentials_file '%s' %s", cred,
               rows[r].expect[i]);
      list[i] = expect[i];
    }
    expect_errors(rows[r].name, ini, list);
  }
  char cmd[160];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(config_reports_each_error_with_its_line),
      cmocka_unit_test(config_parses_valid_files),
      cmocka_unit_test(config_default_client_id_is_not_truncated),
      cmocka_unit_test(config_parses_durations),
      cmocka_unit_test(config_parses_broker_urls),
      cmocka_unit_test(config_defaults_are_documented_values),
      cmocka_unit_test(config_runtime_dir_follows_xdg_without_root),
      cmocka_unit_test(config_example_file_is_valid),
      cmocka_unit_test(config_reports_every_error_not_just_the_first),
      cmocka_unit_test(config_reports_nul_byte_on_its_line),
      cmocka_unit_test(config_counts_lines_over_long_files),
      cmocka_unit_test(config_missing_file_is_enoent),
      cmocka_unit_test(config_directory_is_a_read_error),
      cmocka_unit_test(config_file_over_1mib_is_efbig),
      cmocka_unit_test(config_load_works_without_callback),
      cmocka_unit_test(config_loads_tls_and_credentials_files),
      cmocka_unit_test(config_refuses_secret_files_others_can_reach),
      cmocka_unit_test(config_reports_bad_credentials_lines),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
