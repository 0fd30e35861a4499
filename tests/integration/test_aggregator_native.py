"""edgemon-aggregator's /metrics in protobuf with native histograms, scraped by a real Prometheus
(Debian's 2.42, --enable-feature=native-histograms), against the exact answer.

edgemon-sim publishes a fleet with a known, seeded latency distribution (one device six times
slower than the rest) and writes every span it published (--spans-file). Once the aggregator
holds every span, a Prometheus scrapes it (asking for protobuf, as it does with native
histograms on). Per stage, the fleet p99 that PromQL computes from the native histograms
(histogram_quantile over sum by (stage)) must lie in the bucket, at the agent's scale 6, that
holds the exact p99 of all the spans, as must the aggregator's own merged fleet p99 from
/api/devices; counts and sums are exact. The quantile is taken over the cumulative histograms,
not a rate: the exact answer is over every span since the start, which is what the cumulative
histogram holds, while a rate covers only the increase between the scrapes of its range (the
sim has finished before Prometheus starts, so a rate would be zero).

These fail if the negotiation is wrong (no native series in Prometheus: a text scrape carries
classic buckets only), if the native conversion is wrong (bucket index off by one, deltas,
schema: the quantile leaves the exact bucket, counts differ) and if the classic family or the
counters and gauges differ between the formats. A plain client still gets the text format."""

import json
import math
import os
import re
import subprocess
import urllib.request
from collections import defaultdict

import pytest

from conftest import Aggregator, Broker, Prometheus, free_port, stopping, wait_for

SIM = os.environ.get("EM_SIM")
SCALE = 6  # edgemon-sim's histogram scale: the schema of the native histograms
STAGES = ("preprocess", "infer", "postprocess")
DEVICES = 4
SLOW = (4, 6.0)  # device sim-0004 six times slower
NATIVE = "edgemon_stage_latency_nanoseconds"
TEXT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PROTO_TYPE = ("application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; "
              "encoding=delimited")


def otel_index(v, scale):
    """OpenTelemetry bucket of v > 0: base^i < v <= base^(i+1), base = 2^(2^-scale), exactly."""
    return (v ** (1 << scale) - 1).bit_length() - 1


def bucket_bounds(v, scale):
    """(lower, upper] of the bucket holding v, in ns."""
    i = otel_index(v, scale)
    return 2.0 ** (i / (1 << scale)), 2.0 ** ((i + 1) / (1 << scale))


def exact_quantile(values, q):
    """The value of rank ceil(q * n) (at least 1): the rank Prometheus and the aggregator use."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def assert_in_bucket(estimate, exact, what):
    lower, upper = bucket_bounds(exact, SCALE)
    assert lower < estimate <= upper * (1 + 1e-12), (
        f"{what}: {estimate} outside the bucket ({lower}, {upper}] of the exact {exact} ns")


def get(port, path, accept=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if accept:
        req.add_header("Accept", accept)
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.headers["Content-Type"], r.read()


def run_sim(tmp, broker, devices=DEVICES, slow=SLOW):
    spans_path = tmp / "spans.txt"
    sim = subprocess.run(
        [SIM, "--devices", str(devices), "--rate", "5", "--duration", "6", "--qos", "1",
         "--seed", "19", "--slow", f"{slow[0]}:{slow[1]}", "--spans-file", str(spans_path),
         "--broker", f"mqtt://127.0.0.1:{broker.port}"],
        capture_output=True, timeout=120)
    assert sim.returncode == 0, sim.stderr.decode(errors="replace")
    spans = defaultdict(list)
    for line in spans_path.read_text().splitlines():
        device, stage, ns = line.split()
        spans[(device, stage)].append(int(ns))
    assert {s for _, s in spans} == set(STAGES) and len({d for d, _ in spans}) == devices
    return dict(spans)


def counts(agg):
    """{(device, stage): count} the aggregator holds."""
    status, body = agg.get("/api/devices")
    assert status == 200
    return {(d["device"], s["name"]): s["count"]
            for d in json.loads(body)["devices"] for s in d["stages"]}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """(aggregator, prometheus, spans): a finished simulator run fully ingested by the
    aggregator, a Prometheus with native histograms scraping it, and {(device, stage): [ns]}
    of every span the simulator published."""

    assert SIM, "EM_SIM must name the edgemon-sim binary (run through ctest)"
    tmp = tmp_path_factory.mktemp("native")
    with stopping() as started:
        broker = Broker(tmp, free_port()).start()
        started.append(broker)
        agg = Aggregator(tmp, broker.port).start()
        started.append(agg)
        spans = run_sim(tmp, broker)
        wait_for(lambda: counts(agg) == {k: len(v) for k, v in spans.items()}, 60,
                 "every published span in the aggregator")
        prom = Prometheus(tmp, [f"127.0.0.1:{agg.port}"],
                          extra_args=["--enable-feature=native-histograms"]).start()
        started.append(prom)
        wait_for(lambda: prom.query(NATIVE), 60, "the native histograms in Prometheus")
        yield agg, prom, spans
        prom.stop()
        assert agg.stop() == 0, agg.log_text()[-3000:]  # a clean exit (sanitizers included)


def value(result):
    assert result and len(result) == 1, result
    return float(result[0]["value"][1])


def test_fleet_p99_from_native_histograms_is_the_exact_p99(fleet):
    agg, prom, spans = fleet
    status, body = agg.get("/api/devices")
    assert status == 200
    own = {s["name"]: s for s in json.loads(body)["fleet"]}
    slow = f"sim-{SLOW[0]:04d}"
    for stage in STAGES:
        values = [v for (d, s), vals in spans.items() if s == stage for v in vals]
        sel = f'{NATIVE}{{stage="{stage}"}}'
        assert value(prom.query(f"histogram_count(sum by (stage) ({sel}))")) == len(values)
        assert value(prom.query(f"histogram_sum(sum by (stage) ({sel}))")) == float(sum(values))
        exact = exact_quantile(values, 0.99)
        # The slow device's spans are the tail: without it the p99 would be far lower.
        fast = [v for (d, s), vals in spans.items() if s == stage and d != slow for v in vals]
        assert exact > 2 * exact_quantile(fast, 0.99), stage
        got = value(prom.query(f"histogram_quantile(0.99, sum by (stage) ({sel}))"))
        assert_in_bucket(got, exact, f"Prometheus fleet p99 of {stage}")
        assert own[stage]["count"] == len(values) and own[stage]["devices"] == DEVICES
        assert_in_bucket(own[stage]["p99_ns"], exact, f"aggregator fleet p99 of {stage}")
        for q in (0.5, 0.9):
            got = value(prom.query(f"histogram_quantile({q}, sum by (stage) ({sel}))"))
            assert_in_bucket(got, exact_quantile(values, q), f"fleet p{q * 100:g} of {stage}")


def test_each_device_native_histogram_matches_its_spans_and_the_aggregator(fleet):
    agg, prom, spans = fleet
    for (device, stage), values in spans.items():
        sel = f'{NATIVE}{{device="{device}",stage="{stage}"}}'
        assert value(prom.query(f"histogram_count({sel})")) == len(values)
        got = value(prom.query(f"histogram_quantile(0.99, {sel})"))
        exact = exact_quantile(values, 0.99)
        assert_in_bucket(got, exact, f"{device} {stage} p99")
    status, body = agg.get("/api/devices/sim-0001")
    infer = next(s for s in json.loads(body)["stages"] if s["name"] == "infer")
    assert_in_bucket(infer["p99_ns"], exact_quantile(spans[("sim-0001", "infer")], 0.99),
                     "aggregator sim-0001 infer p99")


def test_protobuf_scrape_keeps_the_classic_histogram_counters_and_gauges(fleet):
    agg, prom, spans = fleet
    # The classic histogram, in seconds, under its own name: count and cumulative buckets.
    sel = 'edgemon_stage_latency_seconds_count{device="sim-0001",stage="infer"}'
    assert value(prom.query(sel)) == len(spans[("sim-0001", "infer")])
    le = prom.query('edgemon_stage_latency_seconds_bucket{device="sim-0001",stage="infer",'
                    'le="+Inf"}')
    assert value(le) == len(spans[("sim-0001", "infer")])
    # No native histogram under the classic name, no classic buckets under the native one.
    assert prom.query(f"{NATIVE}_bucket") is None
    assert all("histogram" not in r for r in
               prom.query('edgemon_stage_latency_seconds_count') or [])
    # Counters and gauges as in the text a plain client gets.
    _, text = get(agg.port, "/metrics")
    for name in ("edgemon_device_data_messages_total", "edgemon_device_online",
                 "edgemon_device_last_seen_seconds", "edgemon_aggregator_devices"):
        want = {}
        for line in text.decode().splitlines():
            m = re.match(rf'^{name}(?:\{{device="([^"]*)"\}})? (\S+)$', line)
            if m:
                want[m.group(1)] = float(m.group(2))
        got = {r["metric"].get("device"): float(r["value"][1]) for r in prom.query(name) or []}
        assert want and got == want, name


def test_negotiation_protobuf_only_for_a_scraper_that_asks(fleet):
    agg, _, _ = fleet
    ctype, text = get(agg.port, "/metrics")
    assert ctype == TEXT_TYPE
    assert text.startswith(b"# HELP edgemon_device_online ")
    assert NATIVE.encode() not in text
    assert b"edgemon_stage_latency_seconds_bucket{" in text
    assert b"edgemon_aggregator_http_connections " in text
    for accept in ("text/plain;version=0.0.4;q=0.5,*/*;q=0.1", "application/json",
                   "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
                   "encoding=delimited;q=0"):
        ctype, body = get(agg.port, "/metrics", accept)
        assert ctype == TEXT_TYPE, accept
        assert body.startswith(b"# HELP "), accept
    # What Prometheus 2.42 sends with native histograms on.
    ctype, body = get(agg.port, "/metrics",
                      "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
                      "encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,*/*;q=0.2")
    assert ctype == PROTO_TYPE
    assert NATIVE.encode() in body and not body.startswith(b"#")
    assert b"edgemon_aggregator_http_connections" in body
