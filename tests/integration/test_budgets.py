"""Budgets end to end: spans into the real agent, the level out on every path - the state
page a client maps, the push datagram a subscriber receives, and the retained MQTT state.

The state page and push datagrams are read here with struct, from proto/WIRE.md.
"""

import math
import mmap
import os
import signal
import socket
import struct
import subprocess
import sys
import time

from conftest import ROOT, edgemon_proto, wait_for
from test_spans import sender, span

LEVELS = ["NOMINAL", "WARN", "DEGRADED", "CRITICAL"]
BODY = struct.Struct("<BBHIQQdd32s32s136s")  # the state record, WIRE.md
PAGE_HEAD = struct.Struct("<4sHHII")


def cstr(b):
    return b.split(b"\0", 1)[0].decode()


def read_page(path):
    """Seqlock read of the state page as a client does it; None until consistent."""
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 256, prot=mmap.PROT_READ)
    try:
        for _ in range(100):
            magic, version, size, seq1, pid = PAGE_HEAD.unpack_from(m, 0)
            assert (magic, version, size) == (b"EMST", 1, 256)
            if seq1 % 2:
                continue
            body = BODY.unpack_from(m, 16)
            if PAGE_HEAD.unpack_from(m, 0)[3] == seq1:
                return {"level": LEVELS[body[0]], "prev": LEVELS[body[1]], "changes": body[3],
                        "value": body[6], "bound": body[7], "rule": cstr(body[8]),
                        "stage": cstr(body[9]), "reason": cstr(body[10]), "seq": seq1,
                        "pid": pid}
    finally:
        m.close()
    return None


BUDGET = ("[budget.infer]\ndeadline = 50ms\nlevel = DEGRADED\n"
          "[degrade]\nwindow = 200ms\nenter_windows = 1\nleave_windows = 2\n")


def test_a_deadline_miss_degrades_at_once_and_clean_windows_recover(stack):
    broker, target, agent, sub = stack.watching(extra=BUDGET)
    birth = sub.next("birth")
    assert [b["id"] for b in birth["budgets"]] == ["infer.deadline"]
    assert birth["budgets"][0]["level"] == "DEGRADED"
    # The stage's anomaly score (EWMA z-score of its window p99) travels beside the level.
    assert "budget.infer.anomaly" in [m["name"] for m in birth["metrics"]]
    run = stack.tmp / "run"
    wait_for((run / "state").exists, 5, "the state page")
    page = read_page(run / "state")
    assert page["level"] == "NOMINAL" and page["changes"] == 0
    assert page["pid"] == agent.proc.pid

    # A subscriber: a bound (autobind) socket that told the agent it wants pushes.
    push = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    push.bind(b"")
    push.connect(str(run / "spans.sock"))
    push.send(span("", 0, kind=3))
    time.sleep(0.2)

    s = sender(run / "spans.sock")
    s.send(span("infer", 10_000_000))
    s.send(span("infer", 120_000_000, frame=7))  # over the 50 ms deadline
    got = wait_for(lambda: (read_page(run / "state") or {}).get("level") == "DEGRADED"
                   and read_page(run / "state"), 2, "the page to say DEGRADED")
    assert got["prev"] == "NOMINAL"
    assert got["rule"] == "infer.deadline" and got["stage"] == "infer"
    assert got["value"] == 120_000_000 and got["bound"] == 50_000_000
    assert got["changes"] == 1

    # The Python client sees it through the page too (edgemon.level(): no system call).
    code = (f"import sys; sys.path.insert(0, {str(ROOT / 'firmware/client/python')!r}); "
            "import edgemon; s = edgemon.state(); print(edgemon.level(), s.rule, s.changes)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "EDGEMON_RUNTIME_DIR": str(run)}, timeout=30)
    assert r.stdout.split() == ["DEGRADED", "infer.deadline", "1"], r.stderr

    push.settimeout(2)
    dgram = push.recv(512)
    assert len(dgram) == 256 and dgram[:4] == b"EM\x01\x10"
    body = BODY.unpack_from(dgram, 16)
    assert LEVELS[body[0]] == "DEGRADED" and cstr(body[8]) == "infer.deadline"

    state = sub.next("state", pred=lambda m: m["level"] == "DEGRADED")
    assert state["rule"] == "infer.deadline" and state["prev_level"] == "NOMINAL"
    assert state["value"] == 120_000_000.0 and state["bound"] == 50_000_000.0
    data = sub.next("data", pred=lambda d: d.get("level") == "DEGRADED")
    assert data["session"] == birth["session"]
    late = stack.subscriber(broker.port, agent.device)  # the retained state, for late joiners
    kept = late.next("state", pred=lambda m: m["_retain"])
    assert kept["level"] == "DEGRADED" and kept["rule"] == "infer.deadline"
    z = edgemon_proto.values_by_name(data, birth)["budget.infer.anomaly"]
    assert isinstance(z, float) and math.isfinite(z)

    # Spans within the deadline: the rule leaves after 2 clean windows, one level at a time.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        s.send(span("infer", 10_000_000))
        time.sleep(0.02)
        if read_page(run / "state")["level"] == "NOMINAL":
            break
    back = read_page(run / "state")
    assert back["level"] == "NOMINAL", back
    assert back["changes"] >= 2  # DEGRADED -> WARN -> NOMINAL
    assert sub.next("state", pred=lambda m: m["level"] == "NOMINAL")["prev_level"] == "WARN"
    assert "level DEGRADED (was NOMINAL)" in agent.log_text()
    # Every data message published across the changes decodes (a state message once
    # overwrote the data message being sent in the same tick).
    datas = [edgemon_proto.decode(p) for _, k, p, _ in sub.seen if k == "data"]
    assert len(datas) > 5
    assert all(d["kind"] == "data" for d in datas)

    assert agent.stop() == 0
    assert not (run / "state").exists(), "a clean stop removes the state page"


def test_stall_fires_on_silence_and_clears_on_the_next_heartbeat(stack):
    broker = stack.broker()
    target = stack.target()
    agent = stack.agent(broker.port, f"cmdline = {target.marker}",
                        extra="[budget.camera]\nstall = 300ms\nlevel = WARN\n"
                              "[degrade]\nwindow = 200ms\nenter_windows = 1\nleave_windows = 1\n")
    run = stack.tmp / "run"
    wait_for((run / "state").exists, 5, "the state page")
    s = sender(run / "spans.sock")
    s.send(span("camera", 0, kind=2))
    # Nothing for longer than the stall time: WARN, from the tick's timer.
    got = wait_for(lambda: (read_page(run / "state") or {}).get("level") == "WARN"
                   and read_page(run / "state"), 3, "the stall to fire")
    assert got["rule"] == "camera.stall" and got["reason"].endswith("stalled")
    s.send(span("camera", 0, kind=2))
    wait_for(lambda: read_page(run / "state")["level"] == "NOMINAL", 2, "the heartbeat to clear it")
    assert not math.isnan(got["bound"])


def test_the_hook_runs_with_the_change(stack):
    out = stack.tmp / "hook.out"
    hook = stack.tmp / "hook.sh"
    hook.write_text(f'#!/bin/sh\necho "$@" >> {out}\necho "$EDGEMON_RULE" >> {out}\n')
    hook.chmod(0o755)
    broker = stack.broker()
    target = stack.target()
    agent = stack.agent(broker.port, f"cmdline = {target.marker}",
                        extra=BUDGET + f"hook = {hook}\nhook_timeout = 2s\n")
    run = stack.tmp / "run"
    wait_for((run / "state").exists, 5, "the state page")
    sender(run / "spans.sock").send(span("infer", 120_000_000))
    lines = wait_for(lambda: out.exists() and len(out.read_text().splitlines()) >= 2
                     and out.read_text().splitlines(), 5, "the hook to run")
    assert lines[0].startswith("DEGRADED NOMINAL infer.deadline infer 120000000 50000000")
    assert lines[1] == "infer.deadline"
    assert agent.stop() == 0


def test_a_reload_raising_a_violated_rules_level_says_which_rule_and_why(stack):
    broker, target, agent, sub = stack.watching(
        extra=BUDGET.replace("leave_windows = 2", "leave_windows = 50"))
    sub.next("birth")
    run = stack.tmp / "run"
    wait_for((run / "state").exists, 5, "the state page")
    sender(run / "spans.sock").send(span("infer", 120_000_000))
    wait_for(lambda: (read_page(run / "state") or {}).get("level") == "DEGRADED", 5,
             "the miss to degrade")

    # Same rule, now at CRITICAL: it is still violated, so the reload raises the level. The
    # change must name that rule with its last figures (it once carried no rule, NaN, NaN).
    agent.config.write_text(agent.config.read_text().replace("level = DEGRADED",
                                                             "level = CRITICAL"))
    agent.proc.send_signal(signal.SIGHUP)
    got = wait_for(lambda: (read_page(run / "state") or {}).get("level") == "CRITICAL"
                   and read_page(run / "state"), 5, "the reload to raise the level")
    assert got["prev"] == "DEGRADED"
    assert got["rule"] == "infer.deadline" and got["stage"] == "infer"
    assert got["value"] == 120_000_000 and got["bound"] == 50_000_000
    assert got["reason"] == "infer.deadline: deadline miss"
    state = sub.next("state", pred=lambda m: m["level"] == "CRITICAL")
    assert state["rule"] == "infer.deadline" and state["stage"] == "infer"
    assert state["prev_level"] == "DEGRADED"
    assert math.isfinite(state["value"]) and state["value"] == 120_000_000.0
    assert math.isfinite(state["bound"]) and state["bound"] == 50_000_000.0
    log = agent.log_text()
    assert "level CRITICAL (was DEGRADED): infer.deadline: deadline miss" in log
    assert "value nan" not in log and "bound nan" not in log
    assert agent.stop() == 0


def subscriber_socket(run):
    """A push subscriber as the Python client makes one: autobound, connected to the agent."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(b"")
    s.connect(str(run / "spans.sock"))
    s.send(span("", 0, kind=3))
    return s


def test_subscribers_that_closed_free_their_slots_and_refusals_are_rate_limited(stack):
    broker, target, agent, sub = stack.watching(extra=BUDGET)
    birth = sub.next("birth")
    run = stack.tmp / "run"
    wait_for((run / "state").exists, 5, "the state page")

    # 300 clients subscribe and go away. They once kept all 32 slots until the next level
    # change, and a new subscriber was refused.
    for i in range(300):
        subscriber_socket(run).close()
        if i % 8 == 7:
            time.sleep(0.002)  # stay under the default queue of 10 datagrams
    time.sleep(0.3)
    legit = subscriber_socket(run)
    time.sleep(0.3)
    sender(run / "spans.sock").send(span("infer", 120_000_000))
    legit.settimeout(5)
    dgram = legit.recv(512)
    assert LEVELS[BODY.unpack_from(dgram, 16)[0]] == "DEGRADED"
    assert "refused" not in agent.log_text()

    # One process holds at most 8 subscribers; more requests from it are refused, counted,
    # and logged once (then as a count), not once each.
    live = [subscriber_socket(run) for _ in range(7)]
    extra = []
    for i in range(60):
        extra.append(subscriber_socket(run))
        if i % 8 == 7:
            time.sleep(0.002)
    d = sub.next("data", pred=lambda d: edgemon_proto.values_by_name(d, birth)
                 .get("push.subscribe_refused", 0) >= 60)
    v = edgemon_proto.values_by_name(d, birth)
    assert v["push.subscribe_refused"] == 60
    assert v["push.subscribers"] == 8
    assert v["push.subscribers_gone"] >= 300 - 8
    refusals = [ln for ln in agent.log_text().splitlines() if "subscribe from pid" in ln]
    assert len(refusals) == 1, refusals
    assert "holds 8 live subscribers" in refusals[0]
    for s in live + extra + [legit]:
        s.close()
    assert agent.proc.poll() is None
