"""edgemon-aggregator's HTTP face with simulated fleet traffic: /metrics passes promtool and a
real Prometheus server scrapes it and computes a p99 from the stage histogram; the JSON API
lists the devices and names their values; status codes for unknown paths and methods."""

import json
import math
import os
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import free_port, terminate, wait_for

SIM = os.environ.get("EM_SIM")
PROMTOOL = os.environ.get("EM_PROMTOOL", "/usr/bin/promtool")
PROMETHEUS = os.environ.get("EM_PROMETHEUS", "/usr/bin/prometheus")
DEVICES = ["sim-0001", "sim-0002", "sim-0003"]


def request(port, path, method="GET", timeout=5):
    """(status, headers, body) of one request to 127.0.0.1:port."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


@pytest.fixture
def fleet(stack):
    """A broker, the aggregator and a simulator publishing for three devices, running until
    every device's data and sim-0001's infer stage have reached the aggregator."""
    assert SIM, "EM_SIM must name the edgemon-sim binary (run through ctest)"
    broker = stack.broker()
    agg = stack.aggregator(broker.port)
    log = open(stack.tmp / "sim.log", "wb")
    sim = subprocess.Popen([SIM, "--devices", str(len(DEVICES)), "--rate", "10", "--broker",
                            f"mqtt://127.0.0.1:{broker.port}", "--duration", "120"],
                           stdout=log, stderr=subprocess.STDOUT)

    def infer_seen():
        if sim.poll() is not None:
            pytest.fail(f"simulator exited with {sim.returncode}: "
                        f"{(stack.tmp / 'sim.log').read_text(errors='replace')}")
        status, body = agg.get("/api/devices/sim-0001")
        if status != 200:
            return False
        stages = {s["name"]: s for s in json.loads(body)["stages"]}
        if "infer" not in stages or stages["infer"]["count"] == 0:
            return False
        status, body = agg.get("/api/devices")
        fed = {d["device"] for d in json.loads(body)["devices"] if d["data_messages"] > 0}
        return status == 200 and set(DEVICES) <= fed

    try:
        wait_for(infer_seen, 20, "data of every simulated device in the aggregator")
        yield agg
    finally:
        terminate(sim)
        log.close()


def parse_exposition(text):
    """{(name, frozenset(labels)): value} of every sample line."""
    samples = {}
    line_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
    label_re = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = line_re.match(line)
        assert m, f"unparseable sample line: {line!r}"
        labels = frozenset(label_re.findall(m.group(2) or ""))
        samples[(m.group(1), labels)] = float(m.group(3))
    return samples


def test_metrics_pass_promtool_and_the_histogram_is_cumulative(fleet):
    status, headers, body = request(fleet.port, "/metrics")
    assert status == 200
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    check = subprocess.run([PROMTOOL, "check", "metrics"], input=body.encode(),
                           capture_output=True, timeout=30)
    report = (check.stdout + check.stderr).decode(errors="replace")
    assert check.returncode == 0, report
    assert report.strip() == "", report  # not even lint warnings

    samples = parse_exposition(body)
    base = {("device", "sim-0001"), ("stage", "infer")}
    buckets = sorted(
        ((float(dict(labels)["le"]), v) for (name, labels), v in samples.items()
         if name == "edgemon_stage_latency_seconds_bucket" and base <= labels),
        key=lambda b: b[0])
    assert len(buckets) >= 2 and buckets[-1][0] == math.inf
    counts = [v for _, v in buckets]
    assert counts == sorted(counts)  # cumulative
    count = samples[("edgemon_stage_latency_seconds_count", frozenset(base))]
    assert counts[-1] == count > 0
    total = samples[("edgemon_stage_latency_seconds_sum", frozenset(base))]
    assert 0 < total / count < 10  # mean latency in seconds
    for dev in DEVICES:
        assert samples[("edgemon_device_online", frozenset({("device", dev)}))] == 1
        assert samples[("edgemon_device_data_messages_total", frozenset({("device", dev)}))] > 0
        assert samples[("edgemon_rss_bytes", frozenset({("device", dev)}))] > 0


def test_prometheus_scrapes_the_aggregator_and_computes_a_p99(fleet, tmp_path):
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: edgemon\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{fleet.port}']\n")
    log = open(tmp_path / "prometheus.log", "wb")
    prom = subprocess.Popen([PROMETHEUS, f"--config.file={config}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)

    def api(path):
        if prom.poll() is not None:
            pytest.fail(f"prometheus exited with {prom.returncode}: "
                        f"{(tmp_path / 'prometheus.log').read_text(errors='replace')[-3000:]}")
        try:
            status, _, body = request(port, path, timeout=2)
        except OSError:
            return None
        return json.loads(body) if status == 200 else None

    def target_up():
        got = api("/api/v1/targets")
        if not got:
            return None
        active = got["data"]["activeTargets"]
        return active if active and all(t["health"] == "up" for t in active) else None

    def query(expr):
        got = api("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        if not got or got["status"] != "success" or not got["data"]["result"]:
            return None
        return [float(r["value"][1]) for r in got["data"]["result"]]

    try:
        wait_for(target_up, 30, "prometheus to scrape the aggregator")
        sel = 'edgemon_stage_latency_seconds_bucket{device="sim-0001",stage="infer"}'
        # Over the cumulative buckets, from the first scrape on.
        p99 = wait_for(lambda: query(f"histogram_quantile(0.99, {sel})"), 20,
                       "a p99 of sim-0001's infer stage")
        assert len(p99) == 1
        assert math.isfinite(p99[0]) and 0.001 < p99[0] < 10, p99  # sim: infer median 12 ms
        # Over a rate, once two scrapes saw the histogram grow.
        rated = wait_for(lambda: [v for v in query(f"histogram_quantile(0.99, rate({sel}[30s]))")
                                  or [] if math.isfinite(v)] or None,
                         30, "a p99 over the rate of the infer histogram")
        assert 0.001 < rated[0] < 10, rated
        up = query('up{job="edgemon"}')
        assert up == [1.0]
        devices = query("count(edgemon_device_info)")
        assert devices == [float(len(DEVICES))]
    finally:
        terminate(prom, 15)
        log.close()


def test_api_lists_devices_and_names_their_values(fleet):
    status, headers, body = request(fleet.port, "/api/devices")
    assert status == 200
    assert headers["Content-Type"] == "application/json"
    listed = {d["device"]: d for d in json.loads(body)["devices"]}
    assert set(DEVICES) <= set(listed)
    assert all("buckets" not in s for d in listed.values() for s in d["stages"])

    status, headers, body = request(fleet.port, "/api/devices/sim-0001")
    assert status == 200 and headers["Content-Type"] == "application/json"
    dev = json.loads(body)
    assert dev["device"] == "sim-0001"
    assert dev["board"] == "sim-generic"
    assert dev["online"] is True
    assert dev["level"] in ("NOMINAL", "WARN", "DEGRADED", "CRITICAL")
    assert isinstance(dev["values"]["mem.rss"], int) and dev["values"]["mem.rss"] > 0
    assert all(v is None or isinstance(v, (int, float)) for v in dev["values"].values())
    infer = next(s for s in dev["stages"] if s["name"] == "infer")
    assert infer["buckets"][-1]["le"] is None and infer["buckets"][-1]["count"] == infer["count"]
    assert dev["data_messages"] > 0

    # The id is percent-decoded: %2D is '-'.
    status, _, body = request(fleet.port, "/api/devices/sim%2D0001")
    assert status == 200 and json.loads(body)["device"] == "sim-0001"


STATUS_ROWS = [
    ("GET", "/healthz", 200),
    ("GET", "/nowhere", 404),
    ("GET", "/metrics/extra", 404),
    ("GET", "/api/devices/no-such-device", 404),
    ("GET", "/api/devices/", 404),
    ("GET", "/api/devices/%zz", 404),
    ("GET", "/api/devices/sim-0001%00x", 404),
    ("GET", "/api/devices/sim-0001%2Fx", 404),
    ("GET", "/api/devices/" + "x" * 200, 404),
    ("HEAD", "/metrics", 200),
    ("POST", "/metrics", 405),
    ("DELETE", "/api/devices/sim-0001", 405),
]


def test_status_codes_for_paths_and_methods(fleet):
    for method, path, want in STATUS_ROWS:
        status, headers, body = request(fleet.port, path, method=method)
        assert status == want, (method, path, body)
        if want == 405:
            assert headers["Allow"] == "GET, HEAD"
        if method == "HEAD":
            assert body == ""
            assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
        if path == "/healthz":
            assert body.startswith("ok\nforensics: flight ") and body.endswith(" evicted\n")
    assert fleet.proc.poll() is None
