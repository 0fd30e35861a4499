"""A more_work verdict names the function whose share of the stage grew, from a real agent, a
real mosquitto, real perf_event_open sampling and the Python client.

A pipeline (the edgemon client, 15 frames a second, spans through the client's ring) is the
agent's target; its infer stage runs run_model(), a loop on the thread's CPU clock. Once the
target has been NOMINAL long enough the agent takes a baseline profile window on its own (the
log says so, with the stage it kept). Then the test tells the pipeline to call one more
function in infer, extra_postprocess(), another CPU loop: the median passes its bound, the
level rises, the verdict names more_work, and the flight recording of the escalation, published
once the escalation's profile window has resolved, lists extra_postprocess among the functions
of its more_work cause, with a positive growth in points. edgemon-cli flight prints it under
the cause, and tail under the recording's line. What is asserted is that the function is named, never how fast anything ran.
"""

import os
import re
import subprocess
import sys
import time

import pytest

from conftest import ROOT, edgemon_proto, wait_for
from test_flight import next_flight

FPS = 15
FAST_MS, EXTRA_MS = 12, 40

CONFIG = ("[profile]\nhz = 99\nseconds = 3\nmin_gap_seconds = 60\n"
          "[flight]\npre_seconds = 3\npost_seconds = 5\nmin_gap_seconds = 60\n"
          "[budget.infer]\np50 = 30ms\nlevel = DEGRADED\n"
          "[degrade]\nwindow = 500ms\nenter_windows = 2\nleave_windows = 1\n")

# Frame i at FPS: infer runs run_model (FAST_MS of this thread's CPU time), and once the file
# `go` exists extra_postprocess too (EXTRA_MS more). SCHED_FIFO where allowed, so that what else
# runs on a shared machine does not stretch the NOMINAL frames past the bound.
PIPELINE = """
import os, sys, time
sys.path.insert(0, {client!r})
import edgemon
# {marker}
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
except OSError:
    pass
def spin(ms):
    c0 = time.thread_time_ns()
    while time.thread_time_ns() - c0 < ms * 1000000:
        pass
def run_model():
    spin({fast})
def extra_postprocess():
    spin({extra})
c = edgemon.Client({sock!r})
i = 0
t0 = time.monotonic_ns()
while True:
    c.level()  # read every frame, as a pipeline does: a profile window is seen at once
    start = time.monotonic_ns()
    run_model()
    if os.path.exists({go!r}):
        extra_postprocess()
    c.record("infer", start, time.monotonic_ns() - start, frame=i)
    i += 1
    time.sleep(max(0.0, (t0 + i * {period_ns} - time.monotonic_ns()) / 1e9))
"""


def more_work(verdict):
    causes = [c for c in verdict["causes"] if c["cause"] == "more_work"]
    return causes[0] if causes else None


def start(stack):
    """The agent with its broker and subscriber, and the pipeline attached: (agent, broker,
    sub, go), `go` the file that makes infer call extra_postprocess."""
    broker = stack.broker()
    marker = f"edgemon-diagnose-functions-{time.monotonic_ns()}"
    (stack.tmp / "run").mkdir(exist_ok=True)
    agent = stack.agent(broker.port, f"cmdline = {marker}", extra=CONFIG)
    sub = stack.subscriber(broker.port, agent.device)
    sock = stack.tmp / "run" / "spans.sock"
    wait_for(sock.exists, 10, "the span socket")
    go = stack.tmp / "go"
    code = PIPELINE.format(client=str(ROOT / "firmware/client/python"), marker=marker,
                           sock=str(sock), fast=FAST_MS, extra=EXTRA_MS, go=str(go),
                           period_ns=1_000_000_000 // FPS)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL)
    stack.on_stop(lambda: (proc.kill(), proc.wait()))
    wait_for(lambda: "attached" in agent.log_text(), 10, "the agent to attach")
    return agent, broker, sub, go


def test_a_more_work_verdict_names_the_function_the_stage_newly_calls(stack):
    agent, broker, sub, go = start(stack)

    # The baseline: 10 s of NOMINAL after the attach, a 2 s window, its resolution.
    wait_for(lambda: "profile: baseline: " in agent.log_text(), 90, "a baseline profile")
    line = next(ln for ln in agent.log_text().splitlines() if "profile: baseline: " in ln)
    if "the busiest infer (" not in line:
        pytest.skip(f"the baseline holds too few samples of infer on this machine: {line}")
    assert "DEGRADED" not in agent.log_text(), "the level rose before the extra work"

    cli = os.environ.get("EM_CLI")
    assert cli, "EM_CLI must name the edgemon-cli binary (run through ctest)"
    tail_out = stack.tmp / "tail.txt"
    with open(tail_out, "w") as fh:
        tail = subprocess.Popen([cli, "tail", "--broker", f"mqtt://127.0.0.1:{broker.port}",
                                 "--device", agent.device, "--duration", "120"], stdout=fh,
                                stderr=subprocess.STDOUT)
    stack.on_stop(lambda: (tail.kill(), tail.wait()))
    go.write_text("")
    state = sub.next("state", timeout=30, pred=lambda m: m["level"] == "DEGRADED")
    v = state.get("verdict")
    assert v is not None and v["stage"] == "infer", state
    cause = more_work(v)
    if cause is None:
        pytest.skip(f"no more_work cause here (the target's CPU time not measured?): {v}")
    # The state message left before the profile: its verdict names no function yet.
    assert not cause.get("functions"), cause

    payload = next_flight(sub, timeout=60)
    rec = edgemon_proto.decode(payload)
    fv = rec.get("verdict")
    assert fv is not None and fv["stage"] == "infer", rec.get("verdict")
    fcause = more_work(fv)
    assert fcause is not None, fv
    names = [f["name"] for f in fcause.get("functions", [])]
    assert "extra_postprocess" in names, (names, agent.log_text()[-4000:])
    growth = {f["name"]: f["growth"] for f in fcause["functions"]}
    assert growth["extra_postprocess"] >= 3.0, growth
    growths = [f["growth"] for f in fcause["functions"]]
    assert growths == sorted(growths, reverse=True), growths
    assert "run_model" not in names  # its share fell: the stage spends less of it there
    log = agent.log_text()
    assert "names" in log and "whose share grew, first" in log

    # edgemon-cli flight prints the functions under the cause.
    path = stack.tmp / "recording.cbor"
    path.write_bytes(payload)
    out = subprocess.run([cli, "flight", "--file", str(path)], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    assert "extra_postprocess" in out.stdout, out.stdout
    # tail prints them under the recording's line.
    wait_for(lambda: re.search(r"infer more work: grew: .*extra_postprocess", tail_out.read_text()),
             20, "tail's line of the recording's functions")


def test_an_escalation_during_a_baseline_window_still_gets_its_profile(stack):
    # The extra work starts as the baseline window opens: the escalation comes while it samples
    # (it is dropped) or resolves (the escalation's window opens after it).
    agent, broker, sub, go = start(stack)
    from test_profile import Profiles
    profiles = Profiles(broker.port, agent.device)
    stack.on_stop(profiles.close)
    wait_for(lambda: "profile: baseline window: " in agent.log_text(), 90, "a baseline window")
    go.write_text("")
    sub.next("state", timeout=30, pred=lambda m: m["level"] == "DEGRADED")
    p = profiles.wait(1, timeout=60)
    assert p["trigger"]["cause"] == "escalation" and p["number"] == 0, p["trigger"]
    assert p["samples"] > 0
    log = agent.log_text()
    assert ("profile: baseline window dropped: the escalation's window comes first" in log
            or "sampling once the baseline window is resolved" in log
            or "profile: baseline: " in log), log[-3000:]
    # Exactly one profile: the baseline is never published.
    time.sleep(2)
    assert len(profiles.payloads) == 1
    payload = next_flight(sub, timeout=60)
    assert edgemon_proto.decode(payload)["number"] == 0
