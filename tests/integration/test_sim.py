"""edgemon-sim against a real mosquitto, read back with paho and the independent Python decoder
(proto/python/edgemon_proto.py): retained births and statuses, data that decodes with
consecutive seqs per device and self-consistent stage windows, and the exit codes for bad
flags and an unreachable broker."""

import math
import os
import queue
import signal
import subprocess
import uuid

import paho.mqtt.client as mqtt
import pytest

from conftest import edgemon_proto, free_port, wait_for

SIM = os.environ.get("EM_SIM")
STAGES = ["preprocess", "infer", "postprocess"]


def need_sim():
    if not SIM:
        pytest.skip("EM_SIM must name the edgemon-sim binary (run through ctest)")


class Collector:
    """Every message under edgemon/v1/<prefix>-*/, in arrival order."""

    def __init__(self, port, prefix):
        self.q = queue.Queue()
        self.got = []
        self.prefix = prefix
        self.client = mqtt.Client(client_id=f"it-sim-{uuid.uuid4().hex[:8]}")
        self.client.on_message = lambda c, u, m: self.q.put((m.topic, m.payload, m.retain))
        subscribed = queue.Queue()
        self.client.on_subscribe = lambda c, u, mid, granted: subscribed.put(granted)
        self.client.connect("127.0.0.1", port, keepalive=30)
        self.client.loop_start()
        self.client.subscribe("edgemon/v1/#", qos=1)
        subscribed.get(timeout=10)

    def pump(self):
        while True:
            try:
                topic, payload, retain = self.q.get_nowait()
            except queue.Empty:
                return self.got
            device, kind = topic.split("/")[2], topic.split("/", 3)[3]
            if device.startswith(self.prefix + "-"):
                self.got.append((device, kind, edgemon_proto.decode(payload), retain))

    def of(self, kind):
        return [(d, m, r) for d, k, m, r in self.pump() if k == kind]

    def close(self):
        self.client.loop_stop()
        self.client.disconnect()


def sim_collector(stack, letter):
    """(broker, prefix, Collector): a broker and a collector, closed when the test ends, of
    what the simulated devices <prefix>-NNNN publish on it; prefix is `letter` and six random
    hex digits. Skips the test without EM_SIM."""
    need_sim()
    broker = stack.broker()
    prefix = f"{letter}{uuid.uuid4().hex[:6]}"
    live = Collector(broker.port, prefix)
    stack.on_stop(live.close)
    return broker, prefix, live


def run_sim(port, *args, timeout=60):
    return subprocess.run([SIM, "--broker", f"mqtt://127.0.0.1:{port}", *args],
                          capture_output=True, text=True, timeout=timeout)


def bucket_index(v, scale=6):
    """OpenTelemetry's exponential bucket of v > 0: base^i < v <= base^(i+1)."""
    return math.ceil(math.log2(v) * 2 ** scale) - 1


def check_stage(st):
    assert st["name"] in STAGES
    if st["count"] == 0:
        return
    assert st["scale"] == 6
    buckets = st["buckets"]
    assert st["zero_count"] + sum(c for _, c in buckets) == st["count"]
    assert all(c >= 1 for _, c in buckets)
    assert [i for i, _ in buckets] == sorted({i for i, _ in buckets})
    assert (st["min_ns"] <= st["p50_ns"] <= st["p90_ns"] <= st["p99_ns"] <= st["p999_ns"]
            <= st["max_ns"] <= st["sum_ns"])
    assert st["min_ns"] * st["count"] <= st["sum_ns"] <= st["max_ns"] * st["count"]
    # The extremes land in the first and last non-empty buckets, computed independently here.
    assert bucket_index(st["min_ns"]) == buckets[0][0]
    assert bucket_index(st["max_ns"]) == buckets[-1][0]


def test_sim_publishes_births_data_and_offline_status(stack):
    broker, prefix, live = sim_collector(stack, "s")

    r = run_sim(broker.port, "--devices", "3", "--rate", "10", "--duration", "2",
                "--prefix", prefix, "--seed", "7")
    assert r.returncode == 0, r.stderr
    assert "published" in r.stderr and "worst lag" in r.stderr
    devices = [f"{prefix}-{i:04d}" for i in (1, 2, 3)]
    wait_for(lambda: len([m for _, m, _ in live.of("status") if not m["online"]]) == 3, 10,
             "3 offline statuses on the live subscriber")

    births = {d: m for d, m, _ in live.of("birth")}
    assert sorted(births) == devices
    data = [(d, m) for d, m, _ in live.of("data")]
    assert data, "no data message"
    per_device = {d: [m for dd, m in data if dd == d] for d in devices}
    for d, msgs in per_device.items():
        # 2 s at 10 Hz: about 20 each; loose bounds, the count is not a timing assertion.
        assert len(msgs) >= 10, (d, len(msgs))
        assert [m["seq"] for m in msgs] == list(range(len(msgs))), d
        birth = births[d]
        aliases = {str(m["alias"]): m for m in birth["metrics"]}
        for m in msgs:
            assert m["session"] == birth["session"]
            assert m["window_ns"] == 100_000_000
            assert m["level"] in ("NOMINAL", "DEGRADED")
            assert set(m["values"]) <= set(aliases)
            for alias, v in m["values"].items():
                if "absent_reason" in aliases[alias]:
                    assert v is None, aliases[alias]["name"]
                else:
                    assert isinstance(v, (int, float)), aliases[alias]["name"]
            assert [s["name"] for s in m["stages"]] == STAGES
            for st in m["stages"]:
                check_stage(st)
        named = edgemon_proto.values_by_name(msgs[-1], birth)
        assert 0.5 < named["pmu.ipc"] < 2.0
        assert named["mem.rss"] > 0
        assert named["spans.received"] >= sum(s["count"] for s in msgs[-1]["stages"])

    # A subscriber that arrives afterwards gets what the broker retained.
    late = Collector(broker.port, prefix)
    stack.on_stop(late.close)
    wait_for(lambda: len(late.of("birth")) == 3 and len(late.of("status")) == 3, 10,
             "retained births and statuses")
    for d, m, retained in late.of("birth"):
        assert retained
        assert m["device"] == d
        assert 15 <= len(m["metrics"]) <= 40
        assert len({x["alias"] for x in m["metrics"]}) == len(m["metrics"])
        names = {x["name"] for x in m["metrics"]}
        assert {"mem.rss", "pmu.ipc", "psi.cpu.some.avg10", "spans.received"} <= names
        assert any("absent_reason" in x for x in m["metrics"])
        assert {x["kind"] for x in m["metrics"]} >= {"gauge", "counter"}
        budget = [b for b in m["budgets"] if b["stage"] == "infer"]
        assert budget and budget[0]["rule"] == "percentile"
    for d, m, retained in late.of("status"):
        assert retained and m["online"] is False


def test_sim_escalations_carry_a_verdict(stack):
    """Each simulated escalation's state message carries the breach's verdict (key 15), valid by
    the independent decoder's rules V1-V4: the budget stage's p99 from its baseline to the
    state's measured value, causes in descending share adding up to at most 1, each with
    evidence; a recovery carries none. Seeds give different first causes."""
    broker, prefix, live = sim_collector(stack, "v")
    r = run_sim(broker.port, "--devices", "4", "--rate", "5", "--duration", "6", "--prefix",
                prefix, "--seed", "3", "--excursion-mean", "1e6", "--degrade", "1-4:0.2")
    assert r.returncode == 0, r.stderr
    wait_for(lambda: len([m for _, m, _ in live.of("status") if not m["online"]]) == 4, 10,
             "4 offline statuses on the live subscriber")
    states = [m for _, m, _ in live.of("state")]
    ups = [m for m in states if m["level"] == "DEGRADED"]
    downs = [m for m in states if m["level"] == "NOMINAL"]
    assert len(ups) >= 4 and downs, states
    for m in ups:
        v = m["verdict"]
        assert v["stage"] == m["stage"] == "infer" and v["statistic"] == "p99", m
        assert v["breach_ns"] == m["value"] > v["baseline_ns"] > 0, m
        shares = [c["share"] for c in v["causes"]]
        assert len(shares) == 3 and sum(shares) <= 1.0 + 1e-9, v
        assert all(c["evidence"] for c in v["causes"]), v
        assert "unexplained" in {c["cause"] for c in v["causes"]}, v
    assert all("verdict" not in m for m in downs), downs
    assert len({m["verdict"]["causes"][0]["cause"] for m in ups}) >= 2 or len(ups) < 6, ups


def test_sim_stops_on_sigterm_and_says_offline(stack):
    broker, prefix, live = sim_collector(stack, "t")
    p = subprocess.Popen([SIM, "--broker", f"mqtt://127.0.0.1:{broker.port}", "--devices", "2",
                          "--rate", "20", "--prefix", prefix, "--stages", "a,b"],
                         stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(live.of("data")) >= 4, 10, "data from the simulator")
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    wait_for(lambda: len([m for _, m, _ in live.of("status") if not m["online"]]) == 2, 10,
             "offline statuses")
    for _, m, _ in live.of("data"):
        assert [s["name"] for s in m["stages"]] == ["a", "b"]


@pytest.mark.parametrize("args", [
    [],
    ["--devices", "3"],
    ["--devices", "0", "--rate", "10"],
    ["--devices", "3", "--rate", "fast"],
    ["--devices", "3", "--rate", "-1"],
    ["--devices", "3", "--rate", "10", "--qos", "2"],
    ["--devices", "3", "--rate", "10", "--stages", "a,,b"],
    ["--devices", "3", "--rate", "10", "--stages", "a b"],
    ["--devices", "3", "--rate", "10", "--prefix", "a/b"],
    ["--devices", "3", "--rate", "10", "--duration", "0"],
    ["--devices", "3", "--rate", "10", "--broker", "http://x"],
    ["--devices", "3", "--rate", "10", "--bogus"],
    ["--devices"],
])
def test_sim_bad_flags_exit_2_with_usage(args):
    need_sim()
    r = subprocess.run([SIM, *args], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2, (args, r.stderr)
    assert r.stderr.startswith("edgemon-sim: ")
    assert "usage: edgemon-sim" in r.stderr
    assert r.stdout == ""


def test_sim_help_is_truthful():
    need_sim()
    r = subprocess.run([SIM, "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0
    for flag in ("--devices", "--rate", "--broker", "--duration", "--prefix", "--seed",
                 "--stages", "--qos"):
        assert flag in r.stdout


def test_sim_unreachable_broker_exits_3():
    need_sim()
    port = free_port()  # Nothing listens there.
    r = run_sim(port, "--devices", "2", "--rate", "10", "--duration", "1", timeout=30)
    assert r.returncode == 3, r.stderr
    assert "cannot reach the broker" in r.stderr and str(port) in r.stderr
