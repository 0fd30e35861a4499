"""The protobuf exposition of native histograms (host/lib/prom_expo.c, native.c) scraped by a
real Prometheus (Debian's 2.42, --enable-feature=native-histograms).

Known latencies are generated here, bucketed into stage windows with exact integer arithmetic
(OpenTelemetry bucket i at scale s holds (2^(i/2^s), 2^((i+1)/2^s)]), and fed to
em-prom-expo-tool, which merges the windows as the aggregator does and writes the delimited
MetricFamily stream; a loopback http.server serves it with the protobuf content type. Through
Prometheus's HTTP API the test then checks every native bucket (bounds and count), count and sum
exactly, and histogram_quantile per series and over the fleet against the exact quantiles of the
generated values, within the bucket at the schema used: wrong bucket indexes (the +1 between
OpenTelemetry and Prometheus) or wrong delta encoding fail it."""

import http.server
import math
import os
import random
import subprocess
import threading

import pytest

from conftest import wait_for

TOOL = os.environ.get("EM_PROM_EXPO_TOOL")
CONTENT_TYPE = ("application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; "
                "encoding=delimited")
METRIC = "edgemon_test_latency_nanoseconds"
WINDOW = 250  # values per stage window
MAX_SCHEMA = 8

# (device, stage, scale, median ns, log-sd, values, zeros): one slow device, one at scale 10
# (reduced to schema 8), one with 0 ns spans (the zero bucket).
SERIES = [
    ("fast-1", "infer", 6, 12e6, 0.25, 3000, 0),
    ("fast-2", "infer", 6, 12e6, 0.25, 3000, 3),
    ("slow-1", "infer", 10, 45e6, 0.40, 1500, 0),
    ("fast-1", "decode", 7, 2e5, 0.60, 2000, 0),
]


def otel_index(v, scale):
    """The OpenTelemetry bucket of v > 0 at scale >= 0: base^i < v <= base^(i+1), exactly:
    v <= 2^((i+1)/2^s) iff v^(2^s) <= 2^(i+1), so i + 1 = ceil(log2(v^(2^s)))."""
    return (v ** (1 << scale) - 1).bit_length() - 1


def prom_upper(idx, schema):
    """Upper bound of Prometheus bucket idx at schema: 2^(idx/2^schema)."""
    return 2.0 ** (idx / (1 << schema))


def generate(rng, median, sigma, n, zeros):
    values = [max(1, round(rng.lognormvariate(math.log(median), sigma))) for _ in range(n)]
    values[:zeros] = [0] * zeros
    rng.shuffle(values)
    return values


def window_lines(device, stage, scale, values):
    """The tool's window records for values, WINDOW values per window."""
    lines = []
    for k in range(0, len(values), WINDOW):
        chunk = values[k:k + WINDOW]
        buckets = {}
        for v in chunk:
            if v > 0:
                i = otel_index(v, scale)
                buckets[i] = buckets.get(i, 0) + 1
        lines.append(" ".join(
            ["window", METRIC, f"device={device},stage={stage}", str(scale),
             str(chunk.count(0)), str(sum(chunk)), str(min(chunk)), str(max(chunk))] +
            [f"{i}:{c}" for i, c in sorted(buckets.items())]))
    return lines


def expected_buckets(values, schema):
    """{Prometheus index: count} of the values > 0 at schema (idx = OpenTelemetry index + 1)."""
    got = {}
    for v in values:
        if v > 0:
            idx = otel_index(v, schema) + 1
            got[idx] = got.get(idx, 0) + 1
    return got


def exact_quantile(values, q):
    """The value of rank ceil(q * n), with the rank computed as Prometheus does (q * count in
    binary64), so both pick the same bucket."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def assert_in_bucket(estimate, exact, schema, what):
    """estimate lies in the Prometheus bucket (L, U] at schema that holds exact."""
    assert exact > 0, what
    idx = otel_index(exact, schema) + 1
    lower, upper = prom_upper(idx - 1, schema), prom_upper(idx, schema)
    assert lower < estimate <= upper * (1 + 1e-12), (
        f"{what}: {estimate} outside the bucket ({lower}, {upper}] of the exact {exact} at "
        f"schema {schema}")


def assert_exact_native(h, values, schema, what):
    """h (a native histogram of Prometheus's query API) holds exactly values: count, sum, the
    zero bucket and every bucket's bounds and count at schema."""
    assert int(h["count"]) == len(values), what
    assert float(h["sum"]) == float(sum(values)), what
    want = expected_buckets(values, schema)
    zero = values.count(0)
    seen = {}
    for _, lower, upper, count in h["buckets"]:
        lower, upper = float(lower), float(upper)
        if lower <= 0:
            assert upper < 1e-30 and int(count) == zero, (what, lower, upper, count)
            zero = None
            continue
        # Which bucket: upper bound 2^(idx/2^schema).
        idx = round(math.log2(upper) * (1 << schema))
        assert math.isclose(upper, prom_upper(idx, schema), rel_tol=1e-12), (what, upper)
        assert math.isclose(lower, prom_upper(idx - 1, schema), rel_tol=1e-12), (what, lower)
        seen[idx] = int(count)
    assert zero in (None, 0), f"{what}: zero bucket of {zero} missing"
    assert seen == want, f"{what}: buckets differ"


class Exposition(http.server.BaseHTTPRequestHandler):
    body = b""
    accepts = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        Exposition.accepts.append(self.headers.get("Accept", ""))
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


SAMPLES = ["counter edgemon_test_messages_total device=fast-1 12345",
           "gauge edgemon_test_temperature_celsius device=fast-1 -3.25",
           "gauge edgemon_test_temperature_celsius device=slow-1 71.5"]


def generated():
    """The values of every series of SERIES ({(device, stage): (scale, values)}) and the
    tool records of their stage windows."""
    rng = random.Random(19)
    values, lines = {}, []
    for device, stage, scale, median, sigma, n, zeros in SERIES:
        vals = generate(rng, median, sigma, n, zeros)
        values[(device, stage)] = (scale, vals)
        lines += window_lines(device, stage, scale, vals)
    return values, lines


@pytest.fixture
def data():
    """The generated values per series and the tool's exposition of them."""
    assert TOOL, "EM_PROM_EXPO_TOOL must name em-prom-expo-tool (run through ctest)"
    values, lines = generated()
    lines += SAMPLES
    out = subprocess.run([TOOL], input="\n".join(lines).encode(), capture_output=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    assert out.stdout, "empty exposition"
    return values, out.stdout


@pytest.fixture
def prometheus(data, stack):
    """A loopback server with the exposition and a Prometheus (native histograms on) scraping
    it every second, the scrape up; yields query(expr) -> the API's result list or None."""
    Exposition.body = data[1]
    Exposition.accepts = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Exposition)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        prom = stack.prometheus([f"127.0.0.1:{server.server_address[1]}"],
                                extra_args=["--enable-feature=native-histograms"])

        def scraped():
            got = prom.api("/api/v1/targets")
            active = got["data"]["activeTargets"] if got else []
            return active[0] if active and active[0]["health"] != "unknown" else None

        target = wait_for(scraped, 30, "prometheus to scrape the exposition")
        assert target["health"] == "up", target.get("lastError")
        yield prom.query
    finally:
        server.shutdown()
        server.server_close()


def by_series(result):
    return {(r["metric"]["device"], r["metric"]["stage"]): r for r in result}


def test_prometheus_stores_the_exact_native_buckets(data, prometheus):
    values = data[0]
    raw = wait_for(lambda: prometheus(METRIC), 30, "the native histogram series")
    assert any("application/vnd.google.protobuf" in a for a in Exposition.accepts)
    got = by_series(raw)
    assert set(got) == set(values)
    for key, (scale, vals) in values.items():
        schema = min(scale, MAX_SCHEMA)
        assert "histogram" in got[key], f"{key} was not ingested as a native histogram"
        assert_exact_native(got[key]["histogram"][1], vals, schema, key)


def test_count_sum_and_quantiles_match_the_generated_values(data, prometheus):
    values = data[0]
    wait_for(lambda: prometheus(METRIC), 30, "the native histogram series")
    counts = by_series(prometheus(f"histogram_count({METRIC})"))
    sums = by_series(prometheus(f"histogram_sum({METRIC})"))
    for key, (scale, vals) in values.items():
        assert float(counts[key]["value"][1]) == len(vals), key
        assert float(sums[key]["value"][1]) == float(sum(vals)), key
        for q in (0.5, 0.9, 0.99):
            got = by_series(prometheus(f"histogram_quantile({q}, {METRIC})"))
            assert_in_bucket(float(got[key]["value"][1]), exact_quantile(vals, q),
                             min(scale, MAX_SCHEMA), f"{key} p{q * 100:g}")

    # The fleet: the infer stage of every device, one much slower, merged by Prometheus (the
    # scale-10 device's schema 8 reduced to 6); the answer within a bucket at schema 6.
    infer = [v for (dev, stage), (_, vals) in values.items() if stage == "infer" for v in vals]
    schema = min(scale for (dev, stage), (scale, _) in values.items() if stage == "infer")
    for q in (0.5, 0.99):
        got = prometheus(f'histogram_quantile({q}, sum by (stage) ({METRIC}{{stage="infer"}}))')
        assert got and len(got) == 1
        assert_in_bucket(float(got[0]["value"][1]), exact_quantile(infer, q), schema,
                         f"fleet p{q * 100:g}")
    fleet_count = prometheus(f'histogram_count(sum({METRIC}{{stage="infer"}}))')
    assert float(fleet_count[0]["value"][1]) == len(infer)

    assert float(prometheus("edgemon_test_messages_total")[0]["value"][1]) == 12345
    temps = {r["metric"]["device"]: float(r["value"][1])
             for r in prometheus("edgemon_test_temperature_celsius")}
    assert temps == {"fast-1": -3.25, "slow-1": 71.5}
