"""The PyTorch example users copy (firmware/client/python/examples/torch_inference.py) against
the real agent and mosquitto: its three stages reach the agent through a ring, a budget it
cannot keep degrades it, and it answers by shrinking its frames.

Needs Debian 12's python3-torch and python3-torchvision (scripts/test.sh installs them).
"""

import json
import os
import subprocess
import sys

from conftest import wait_for
from test_rings import values_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "firmware", "client", "python", "examples", "torch_inference.py")
STAGES = ("preprocess", "infer", "postprocess")


def start_example(stack, *args):
    env = {k: v for k, v in os.environ.items()
           if k not in ("EDGEMON_SOCKET", "EDGEMON_STATE_PAGE", "EDGEMON_DEADLINE_PAGE")}
    env["EDGEMON_RUNTIME_DIR"] = str(stack.tmp / "run")
    log = open(stack.tmp / "example.log", "w")
    proc = subprocess.Popen([sys.executable, EXAMPLE, *args], env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    return proc, stack.tmp / "example.log"


def stop(proc):
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


def test_torch_example_spans_reach_the_agent_through_a_ring(stack):
    broker = stack.broker()
    proc, log = start_example(stack, "--fps", "20")
    try:
        agent = stack.agent(broker.port, f"pid = {proc.pid}")
        sub = stack.subscriber(broker.port, agent.device)
        birth = sub.next("birth")

        def three_stages(v, counts):
            return v["rings.active"] >= 1 and all(counts.get(s, 0) >= 20 for s in STAGES)

        v, counts = values_until(sub, birth, three_stages, timeout=60,
                                 what="20 spans of each stage from the example's ring")
        assert v["spans.ring"] > 0
        assert v["spans.ring_lost.bad_slot"] == 0
        assert v["spans.ring_lost.overwritten"] == 0
        # One frame, one span per stage: the counts move together (a window may split a frame).
        assert max(counts[s] for s in STAGES) - min(counts[s] for s in STAGES) <= 3
        d = sub.next("data", pred=lambda d: any(s["name"] == "infer" and s["count"] > 0
                                                 for s in d["stages"]))
        infer = next(s for s in d["stages"] if s["name"] == "infer")
        assert infer["p50_ns"] > 1_000_000  # a real model: milliseconds, not microseconds
        assert proc.poll() is None, log.read_text()
    finally:
        stop(proc)
    assert "Traceback" not in log.read_text()


def test_torch_example_degrades_on_a_budget_it_cannot_keep(stack):
    broker = stack.broker()
    proc, log = start_example(stack, "--fps", "20")
    try:
        # No real model infers in 100 us: the p99 rule breaks in the first window.
        agent = stack.agent(broker.port, f"pid = {proc.pid}",
                            extra="[budget.infer]\np99 = 100us\nlevel = DEGRADED\n"
                                  "[degrade]\nwindow = 500ms\nenter_windows = 1\n"
                                  "leave_windows = 2\n")
        sub = stack.subscriber(broker.port, agent.device)
        sub.next("birth")
        state = sub.next("state", timeout=60, pred=lambda m: m.get("level") == "DEGRADED")
        assert state["rule"] == "infer.p99" and state["stage"] == "infer"
        wait_for(lambda: "level DEGRADED: frames of 160 px" in log.read_text(), 15,
                 "the example switching to its light frames")
        assert proc.poll() is None, log.read_text()
    finally:
        stop(proc)


def test_torch_example_report_without_an_agent(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEMON_")}
    env["EDGEMON_RUNTIME_DIR"] = str(tmp_path)  # no agent there
    r = subprocess.run([sys.executable, EXAMPLE, "--fps", "20", "--seconds", "2", "--report"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "edgemon-example: window start"
    rep = json.loads(lines[-1])
    # Paced at 20 fps for 2 s: never more than 41 frames; how many fewer is the machine's speed.
    assert 1 <= rep["frames"] <= 41
    assert 0 < rep["frame_ms"]["p50"] <= rep["frame_ms"]["p99"] <= rep["frame_ms"]["max"]
    assert rep["cpu_ms_per_frame"] > 0
    # Spans with no agent: counted as undeliverable, never raised.
    assert rep["client"]["dropped"]["no_agent"] > 0
    assert rep["client"]["dropped"]["other"] == 0


def test_torch_example_rejects_bad_arguments():
    r = subprocess.run([sys.executable, EXAMPLE, "--fps", "0"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2
    assert "--fps must be positive" in r.stderr
