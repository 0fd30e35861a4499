"""Prometheus remote write 1.0 (host/lib/prom_rw.c, host/aggregator/remote.c) into a real
Prometheus (Debian's 2.42, --web.enable-remote-write-receiver --enable-feature=native-histograms)
and against small loopback HTTP servers that answer what each test needs.

em-prom-rw-tool merges the same generated stage windows as test_prom_native.py (known lognormal
latencies, one device much slower, one at scale 10 reduced to schema 8, zero-duration spans)
and pushes them with counters and gauges through remote.c. Prometheus must then hold every
native bucket, histogram_count and histogram_sum exactly, histogram_quantile per series and over
the fleet within the bucket of the exact quantile, and the samples exactly. The servers check
the protocol's headers, basic and bearer auth, that a 500 or a 429 is retried and the request
delivered once, that a 400 is dropped, counted and not sent again, that a batch is sealed at N
series, that every endpoint gets every request and a dead one holds back no other, and TLS: a server certificate from a CA given by file is trusted, one that no trusted CA
signed is refused (counted as a network failure, the request kept), unless insecure is set."""

import base64
import http.server
import os
import ssl
import subprocess
import threading

import pytest

from conftest import Pki, free_port, wait_for
from test_prom_native import (MAX_SCHEMA, METRIC, SAMPLES, SERIES, assert_exact_native,
                              assert_in_bucket, exact_quantile, generated)

TOOL = os.environ.get("EM_PROM_RW_TOOL")


def push(url, lines, *args):
    """Runs em-prom-rw-tool against url; returns its counters as a dict."""
    assert TOOL, "EM_PROM_RW_TOOL must name em-prom-rw-tool (run through ctest)"
    out = subprocess.run([TOOL, url, *args], input="\n".join(lines).encode(),
                         capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    stats = dict(line.split() for line in out.stdout.decode().splitlines())
    return {k: int(v) for k, v in stats.items()}


def by_series(result):
    return {(r["metric"]["device"], r["metric"].get("stage")): r for r in result}


@pytest.fixture
def written(stack):
    """A Prometheus with its remote-write receiver on, the generated series pushed into it;
    yields (values per series, query)."""
    values, lines = generated()
    prom = stack.prometheus([], extra_args=["--web.enable-remote-write-receiver",
                                            "--enable-feature=native-histograms"])
    wait_for(lambda: prom.api("/api/v1/status/buildinfo"), 30, "prometheus to answer")
    stats = push(f"http://127.0.0.1:{prom.port}/api/v1/write", lines + SAMPLES)
    assert stats["sent_histograms"] == len(SERIES), stats
    assert stats["sent_samples"] == len(SAMPLES), stats
    assert stats["dropped_requests"] == 0 and stats["queue_depth"] == 0, stats
    assert stats["last_success_unix_ms"] > 0, stats
    yield values, prom.query


def test_remote_write_stores_the_exact_native_buckets(written):
    values, query = written
    got = by_series(wait_for(lambda: query(METRIC), 30, "the native histogram series"))
    assert set(got) == set(values)
    for key, (scale, vals) in values.items():
        schema = min(scale, MAX_SCHEMA)
        assert "histogram" in got[key], f"{key} was not stored as a native histogram"
        assert_exact_native(got[key]["histogram"][1], vals, schema, key)


def test_remote_write_count_sum_quantiles_and_samples(written):
    values, query = written
    wait_for(lambda: query(METRIC), 30, "the native histogram series")
    counts = by_series(query(f"histogram_count({METRIC})"))
    sums = by_series(query(f"histogram_sum({METRIC})"))
    p99 = by_series(query(f"histogram_quantile(0.99, {METRIC})"))
    for key, (scale, vals) in values.items():
        assert float(counts[key]["value"][1]) == len(vals), key
        assert float(sums[key]["value"][1]) == float(sum(vals)), key
        assert_in_bucket(float(p99[key]["value"][1]), exact_quantile(vals, 0.99),
                         min(scale, MAX_SCHEMA), f"{key} p99")

    # The fleet's infer stage, the slow device included, merged by Prometheus at schema 6.
    infer = [v for (_, stage), (_, vals) in values.items() if stage == "infer" for v in vals]
    schema = min(scale for (_, stage), (scale, _) in values.items() if stage == "infer")
    got = query(f'histogram_quantile(0.99, sum by (stage) ({METRIC}{{stage="infer"}}))')
    assert got and len(got) == 1
    assert_in_bucket(float(got[0]["value"][1]), exact_quantile(infer, 0.99), schema, "fleet p99")

    counter = query("edgemon_test_messages_total")
    assert [float(r["value"][1]) for r in counter] == [12345.0]
    temps = {r["metric"]["device"]: float(r["value"][1])
             for r in query("edgemon_test_temperature_celsius")}
    assert temps == {"fast-1": -3.25, "slow-1": 71.5}


class Receiver(http.server.BaseHTTPRequestHandler):
    """Answers each POST with the next status of `script` (the last one repeats) and records
    the headers and body of every request."""
    script = [204]
    seen = []
    lock = threading.Lock()

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with Receiver.lock:
            Receiver.seen.append((dict(self.headers), body))
            status = Receiver.script[min(len(Receiver.seen), len(Receiver.script)) - 1]
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    """A loopback HTTP server; yields a function that sets its script and returns its URL."""
    Receiver.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def scripted(*statuses):
        Receiver.script = list(statuses)
        return f"http://127.0.0.1:{server.server_address[1]}/api/v1/write"

    try:
        yield scripted
    finally:
        server.shutdown()
        server.server_close()


def assert_protocol_headers(headers):
    h = {k.lower(): v for k, v in headers.items()}
    assert h["content-encoding"] == "snappy"
    assert h["content-type"] == "application/x-protobuf"
    assert h["x-prometheus-remote-write-version"] == "0.1.0"
    assert h["user-agent"] == "em-prom-rw-tool"
    return h


@pytest.mark.parametrize("first", [500, 503, 429])
def test_retryable_answer_is_retried_and_delivered_once(receiver, first):
    url = receiver(first, 204)
    stats = push(url, SAMPLES, "--bearer", "s3cret-token")
    assert stats["sent_requests"] == 1 and stats["sent_samples"] == len(SAMPLES), stats
    assert stats["retries"] == 1, stats
    assert stats["failed_429" if first == 429 else "failed_5xx"] == 1, stats
    assert stats["dropped_requests"] == 0 and stats["queue_depth"] == 0, stats
    assert len(Receiver.seen) == 2
    (h1, b1), (h2, b2) = Receiver.seen
    assert b1 == b2 and b1, "the retry must send the same request"
    for h in (h1, h2):
        assert assert_protocol_headers(h)["authorization"] == "Bearer s3cret-token"


def test_bad_request_is_dropped_counted_and_not_sent_again(receiver):
    url = receiver(400, 204)
    stats = push(url, SAMPLES)
    assert stats["failed_4xx"] == 1 and stats["retries"] == 0, stats
    assert stats["dropped_requests"] == 1 and stats["dropped_samples"] == len(SAMPLES), stats
    assert stats["sent_requests"] == 0 and stats["last_success_unix_ms"] == 0, stats
    assert len(Receiver.seen) == 1
    assert "authorization" not in {k.lower() for k in Receiver.seen[0][0]}


def test_basic_auth_header(receiver):
    url = receiver(204)
    stats = push(url, SAMPLES, "--basic", "edge:pa:ss")
    assert stats["sent_requests"] == 1, stats
    h = assert_protocol_headers(Receiver.seen[0][0])
    assert h["authorization"] == "Basic " + base64.b64encode(b"edge:pa:ss").decode()


def test_batches_are_sealed_at_n_series(receiver):
    url = receiver(204)
    stats = push(url, SAMPLES, "--batch", "2")
    assert stats["sent_requests"] == 2 and stats["sent_samples"] == len(SAMPLES), stats
    assert len(Receiver.seen) == 2


def test_every_endpoint_gets_every_request_and_a_dead_one_holds_back_no_other(receiver):
    url = receiver(204)
    stats = push(url, SAMPLES, "--also", url)
    assert stats["sent_requests"] == 1 and stats["ep1.sent_requests"] == 1, stats
    assert len(Receiver.seen) == 2 and Receiver.seen[0][1] == Receiver.seen[1][1]

    Receiver.seen = []
    dead = f"http://127.0.0.1:{free_port()}/api/v1/write"
    stats = push(dead, SAMPLES, "--also", url, "--wait-ms", "1500")
    assert stats["sent_requests"] == 0 and stats["failed_network"] >= 1, stats
    assert stats["queue_depth"] == 1 and stats["dropped_requests"] == 0, stats
    assert stats["ep1.sent_requests"] == 1, stats
    assert stats["ep1.sent_samples"] == len(SAMPLES), stats
    assert len(Receiver.seen) == 1


@pytest.fixture
def tls_receiver(tmp_path):
    """The receiver over TLS with a certificate for IP 127.0.0.1 from a throw-away CA; yields
    (url, the CA's certificate file)."""
    pki = Pki(tmp_path / "pki")
    crt, key = pki.issue("127.0.0.1", san="IP:127.0.0.1")
    Receiver.seen, Receiver.script = [], [204]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(crt), str(key))
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/api/v1/write", pki.ca_crt
    finally:
        server.shutdown()
        server.server_close()


def test_tls_with_the_ca_file_delivers(tls_receiver):
    url, ca = tls_receiver
    stats = push(url, SAMPLES, "--ca-file", str(ca))
    assert stats["sent_requests"] == 1 and stats["failed_network"] == 0, stats
    assert len(Receiver.seen) == 1
    assert_protocol_headers(Receiver.seen[0][0])


def test_tls_refuses_an_untrusted_certificate_unless_insecure(tls_receiver):
    url, _ = tls_receiver
    stats = push(url, SAMPLES, "--wait-ms", "1500")
    assert stats["sent_requests"] == 0 and stats["failed_network"] >= 1, stats
    assert stats["queue_depth"] == 1 and stats["dropped_requests"] == 0, stats
    assert Receiver.seen == []
    stats = push(url, SAMPLES, "--insecure")
    assert stats["sent_requests"] == 1, stats
    assert len(Receiver.seen) == 1
