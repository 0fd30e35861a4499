"""Span ingest: datagrams into the real agent's socket, per-stage windows out in its data.

The datagrams are packed here from proto/WIRE.md (struct), independently of the clients.
"""

import os
import socket
import stat
import struct
import subprocess
import sys
import time

import pytest

from conftest import AGENT, ROOT, edgemon_proto, wait_for

SPAN = struct.Struct("<2sBBIQQQ32s")
KIND_SPAN, KIND_HEARTBEAT = 1, 2


def span(stage, duration_ns, frame=0, kind=KIND_SPAN, version=1, magic=b"EM"):
    return SPAN.pack(magic, version, kind, os.getpid(), frame, time.monotonic_ns(),
                     duration_ns, stage.encode())


def sender(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.connect(str(path))
    return s


def stages_total(sub, birth, want, timeout=10):
    """Sums the stage windows of data messages until every stage in `want` reached its count.
    Returns {stage: {"count", "buckets", "min", "max", ...}} over the windows seen."""
    totals = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        d = sub.next("data", timeout=max(0.1, deadline - time.monotonic()))
        for st in d["stages"]:
            t = totals.setdefault(st["name"], {"count": 0, "buckets": {}, "windows": []})
            t["count"] += st["count"]
            if st["count"]:
                t["windows"].append(st)
                for i, c in st["buckets"]:
                    t["buckets"][i] = t["buckets"].get(i, 0) + c
        if all(totals.get(k, {}).get("count", 0) >= n for k, n in want.items()):
            return totals, d
    pytest.fail(f"stages never reached {want}: {({k: v['count'] for k, v in totals.items()})}")


@pytest.fixture
def agent_with_spans(stack):
    broker, target, agent, sub = stack.watching(extra="[spans]\nmax_stages = 4\n")
    birth = sub.next("birth")
    sock_path = stack.tmp / "run" / "spans.sock"
    wait_for(sock_path.exists, 5, "the span socket")
    return agent, sub, birth, sock_path


def test_spans_appear_in_data_with_the_right_counts_per_stage(agent_with_spans):
    agent, sub, birth, path = agent_with_spans
    s = sender(path)
    plan = {"preprocess": (50, 2_000_000), "infer": (80, 20_000_000), "postprocess": (30, 500_000)}
    for stage, (n, dur) in plan.items():
        for i in range(n):
            s.send(span(stage, dur + i * 1000, frame=i))
            if i % 8 == 7:
                time.sleep(0.002)  # stay under the default queue of 10 datagrams
    totals, last = stages_total(sub, birth, {k: v[0] for k, v in plan.items()})
    for stage, (n, dur) in plan.items():
        t = totals[stage]
        assert t["count"] == n, (stage, t["count"])
        assert sum(t["buckets"].values()) == n
        lo, hi = dur, dur + (n - 1) * 1000
        for w in t["windows"]:
            assert lo <= w["min_ns"] <= w["p50_ns"] <= w["p99_ns"] <= w["max_ns"] <= hi
            assert w["scale"] == 6
    v = edgemon_proto.values_by_name(last, birth)
    assert v["spans.received"] >= sum(n for n, _ in plan.values())
    assert v["spans.stages"] == 3
    assert all(v[f"spans.dropped.{r}"] == 0 for r in
               ("malformed", "version", "size", "disallowed", "overflow"))


def test_bad_datagrams_are_counted_per_reason_and_the_agent_keeps_working(agent_with_spans):
    agent, sub, birth, path = agent_with_spans
    s = sender(path)
    bad = [
        span("infer", 1, magic=b"XX"),            # malformed
        span("in fer", 1),                        # malformed: bad stage name
        span("infer", 1, kind=9),                 # malformed: unknown kind
        span("infer", 1, version=2),              # version
        span("infer", 1, version=7),              # version
        span("infer", 1)[:40],                    # size: short
        span("infer", 1) + b"\0" * 100,           # size: oversized
        b"",                                      # size: empty
    ]
    for b in bad:
        s.send(b)
    for _ in range(5):
        s.send(span("ok", 1000))
    for name in ("a", "b", "c", "d"):             # 4 stages fill max_stages = 4 ("ok" is one)
        s.send(span(name, 1000))
    time.sleep(0.2)

    def drops():
        d = sub.next("data")
        v = edgemon_proto.values_by_name(d, birth)
        return v if v["spans.dropped.overflow"] >= 1 else None

    v = wait_for(drops, 10, "the drop counters")
    assert v["spans.dropped.malformed"] == 3
    assert v["spans.dropped.version"] == 2
    assert v["spans.dropped.size"] == 3
    assert v["spans.dropped.overflow"] == 1
    assert v["spans.dropped.disallowed"] == 0
    assert v["spans.stages"] == 4
    assert agent.proc.poll() is None


def test_heartbeats_create_a_stage_without_a_span(agent_with_spans):
    agent, sub, birth, path = agent_with_spans
    sender(path).send(span("camera", 0, kind=KIND_HEARTBEAT))
    d = sub.next("data", pred=lambda d: any(s["name"] == "camera" for s in d["stages"]))
    cam = next(s for s in d["stages"] if s["name"] == "camera")
    assert cam["count"] == 0


def test_senders_outside_the_allow_list_are_dropped(stack):
    broker = stack.broker()
    target = stack.target()
    other = os.getuid() + 4242
    agent = stack.agent(broker.port, f"cmdline = {target.marker}",
                        extra=f"[spans]\nallow_uids = {other}\n")
    sub = stack.subscriber(broker.port, agent.device)
    birth = sub.next("birth")
    path = stack.tmp / "run" / "spans.sock"
    wait_for(path.exists, 5, "the span socket")
    s = sender(path)
    for _ in range(3):
        s.send(span("infer", 1000))
    d = sub.next("data", pred=lambda d: edgemon_proto.values_by_name(d, birth)
                 ["spans.dropped.disallowed"] == 3)
    assert d["stages"] == []


def test_socket_file_mode_and_stale_file(stack):
    broker = stack.broker()
    target = stack.target()
    run = stack.tmp / "run"
    run.mkdir()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stale.bind(str(run / "spans.sock"))
    stale.close()  # a socket file nobody listens on, as a crashed agent leaves it
    agent = stack.agent(broker.port, f"cmdline = {target.marker}",
                        extra="[spans]\nsocket_mode = 0620\n")
    path = run / "spans.sock"
    wait_for(lambda: "attached" in agent.log_text(), 5, "the agent to start")
    assert stat.S_ISSOCK(path.stat().st_mode)
    assert stat.S_IMODE(path.stat().st_mode) == 0o620
    # A second agent on the same socket refuses to start rather than steal it.
    second = subprocess.run([AGENT, "--config", str(agent.config)], capture_output=True,
                            text=True, timeout=10)
    assert second.returncode == 1
    assert "spans.sock" in second.stderr and "in use" in second.stderr.lower()
    assert agent.stop() == 0
    assert not path.exists(), "a clean stop removes the socket file"


def test_the_python_client_against_the_real_agent(agent_with_spans):
    agent, sub, birth, path = agent_with_spans
    code = (
        "import sys, time\n"
        f"sys.path.insert(0, {str(ROOT / 'firmware/client/python')!r})\n"
        "import edgemon\n"
        f"c = edgemon.Client({str(path)!r})\n"
        "for i in range(40):\n"
        "    with c.span('infer', frame=i):\n"
        "        time.sleep(0.001)\n"
        "    c.record('post', time.monotonic_ns(), 250000, frame=i)\n"
        "    time.sleep(0.001)\n"
        "print(c.sent, c.dropped)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    totals, _ = stages_total(sub, birth, {"infer": 40, "post": 40})
    assert totals["infer"]["count"] == 40 and totals["post"]["count"] == 40
    for w in totals["infer"]["windows"]:
        assert w["min_ns"] >= 1_000_000  # each span wrapped a 1 ms sleep


def test_budgeted_stages_keep_their_slots_and_idle_stages_are_evicted(stack):
    broker, target, agent, sub = stack.watching(
        extra="[spans]\nmax_stages = 4\nstage_idle = 300ms\n"
              "[budget.infer]\ndeadline = 50ms\nlevel = DEGRADED\n"
              "[degrade]\nwindow = 200ms\nenter_windows = 1\n")
    birth = sub.next("birth")
    path = stack.tmp / "run" / "spans.sock"
    wait_for(path.exists, 5, "the span socket")
    s = sender(path)
    # Junk stage names before the pipeline starts: they once took every slot, so the budgeted
    # stage's spans were dropped as overflow and its deadline never judged.
    for i in range(20):
        s.send(span(f"junk{i}", 1000))
        if i % 8 == 7:
            time.sleep(0.002)
    time.sleep(0.1)
    for i in range(5):
        s.send(span("infer", 10_000_000, frame=i))
    totals, _ = stages_total(sub, birth, {"infer": 5})
    assert {k for k in totals if k.startswith("junk")} == {"junk0", "junk1", "junk2"}
    s.send(span("infer", 120_000_000, frame=9))  # over the deadline: judged
    d = sub.next("data", pred=lambda d: d.get("level") == "DEGRADED")
    v = edgemon_proto.values_by_name(d, birth)
    assert v["spans.dropped.overflow"] == 17
    assert v["spans.stages"] == 4
    assert v["spans.stages.evicted"] == 0

    # The junk goes quiet for longer than stage_idle: a new stage takes the slot of the one
    # seen longest ago, and the evicted one is gone from later data messages.
    time.sleep(0.5)
    for _ in range(3):
        s.send(span("post", 2_000_000))
        time.sleep(0.01)
    for _ in range(3):
        s.send(span("infer", 10_000_000))
        time.sleep(0.01)

    def evicted():
        d = sub.next("data")
        v = edgemon_proto.values_by_name(d, birth)
        return (d, v) if v["spans.stages.evicted"] >= 1 else None

    d, v = wait_for(evicted, 10, "an eviction")
    assert v["spans.stages.evicted"] == 1
    assert v["spans.stages"] == 4
    assert v["spans.dropped.overflow"] == 17
    later = sub.next("data")
    names = [st["name"] for st in later["stages"]]
    assert sorted(names) == ["infer", "junk1", "junk2", "post"], names
    assert "stage 'junk0'" in agent.log_text() and "gives its slot to 'post'" in agent.log_text()
    assert agent.proc.poll() is None
