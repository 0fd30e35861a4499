"""The verdict on an escalation, from the real agent, a real mosquitto and the Python client.

A pipeline (the edgemon client, 25 frames a second) is the agent's target; its infer stage is
a busy loop on the CPU clock. From frame K the loop runs longer (more work per frame): the
median rises past its bound (a median, so that a loaded machine's stray slow frames do not
raise the level before), the level rises, and the state message (key 15) and the flight recording (key 16) carry the same
verdict, more_work first, its evidence the CPU time per frame before and during the breach.
With a CPU hog pinned to the target's CPU instead (both through os.sched_setaffinity), the
same stage gets slow without more work and the verdict names cpu_contention first. On a
shared 2-core machine the other load moves the stage's baseline past the hog case's tight bound
now and then (an escalation before the hog starts), so that case runs only with
EM_DIAGNOSE_HOG=1: tests/bench/bench_diagnose_hog.py runs it repeatedly and counts.

A cause needs its figures: more_work the target's CPU time (proc.cpu or pmu.task-clock),
cpu_contention the run-queue delay or the involuntary switches. Where this kernel or build
gives neither, the recording's columns say so and the test is skipped with the reason.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT, Agent, edgemon_proto
from test_flight import decode_flight, next_flight

FAST_MS, SLOW_MS = 3, 30
FPS = 25
K = 100  # 4 s of fast frames: the recorder's 3 s before the trigger hold NOMINAL windows

CONFIG = ("[flight]\npre_seconds = 3\npost_seconds = 500ms\nmin_gap_seconds = 60\n"
          "[budget.infer]\np50 = {bound}\nlevel = DEGRADED\n"
          "[degrade]\nwindow = 500ms\nenter_windows = 2\nleave_windows = 1\n")

# Frame i at FPS: infer a busy loop of `busy` ms of this thread's CPU time, recorded with its
# real CLOCK_MONOTONIC start and duration. PHASES: (frames, busy ms). CPU: pinned there when
# not None; else, with REALTIME, SCHED_FIFO where allowed, so that what else runs on a shared
# machine does not make the stage wait for a CPU (the more_work case measures the work alone).
PIPELINE = """
import os, sys, time
sys.path.insert(0, {client!r})
import edgemon
# {marker}
if {cpu!r} is not None:
    os.sched_setaffinity(0, {{{cpu!r}}})
elif {realtime!r}:
    try:  # the machine's other load must not make the stage wait for a CPU
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except OSError:
        pass
c = edgemon.Client({sock!r})
i = 0
t0 = time.monotonic_ns()
for n, busy in {phases!r}:
    for _ in range(n):
        start = time.monotonic_ns()
        c0 = time.thread_time_ns()
        while time.thread_time_ns() - c0 < busy * 1000000:
            pass
        c.record("infer", start, time.monotonic_ns() - start, frame=i)
        i += 1
        time.sleep(max(0.0, (t0 + i * {period_ns} - time.monotonic_ns()) / 1e9))
time.sleep(60)
"""

HOG = """
import os, time
os.sched_setaffinity(0, {{{cpu!r}}})
time.sleep({delay!r})
while True:
    pass
"""


def start(stack, bound):
    broker = stack.broker()
    marker = f"edgemon-diagnose-pipeline-{time.monotonic_ns()}"
    agent = Agent(stack.tmp, broker.port, f"cmdline = {marker}", extra=CONFIG.format(bound=bound))
    agent.config.write_text(agent.config.read_text().replace(
        "sample_period = 100ms\n", "sample_period = 50ms\n"))
    sub = stack.subscriber(broker.port, agent.device)
    stack.on_stop(agent.stop)
    agent.start()
    birth = sub.next("birth")
    # Before the target's first span its stage is not supervised yet and says so.
    anomaly = [m for m in birth["metrics"] if m["name"] == "budget.infer.anomaly"]
    assert anomaly and anomaly[0].get("absent_reason") == "the stage has not reported yet", anomaly
    return agent, marker, sub


def pipeline(stack, marker, phases, cpu=None, realtime=False):
    code = PIPELINE.format(client=str(ROOT / "firmware/client/python"), marker=marker,
                           sock=str(stack.tmp / "run" / "spans.sock"), phases=phases,
                           period_ns=1_000_000_000 // FPS, cpu=cpu, realtime=realtime)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL)
    stack.on_stop(lambda: (proc.kill(), proc.wait()))
    return proc


def verdicts(sub):
    """The escalation's state message verdict and its flight recording (with its verdict)."""
    state = sub.next("state", timeout=30, pred=lambda m: m["level"] == "DEGRADED")
    payload = next_flight(sub, timeout=15)
    return state, decode_flight(payload), edgemon_proto.decode(payload)


def has_figure(rec, *names):
    """True when some tick of the recording carries a number for one of names."""
    return any(isinstance(t["values"].get(n), (int, float)) for t in rec["ticks"] for n in names)


def check_verdict(state, flight, first):
    v = state.get("verdict")
    assert v is not None, f"the state message carries no verdict: {state}"
    assert flight.get("verdict") == v, "the recording carries the state message's verdict"
    assert v["stage"] == "infer" and v["statistic"] == "p50"
    assert v["nominal_windows"] >= 1, v
    assert v["breach_ns"] > v["baseline_ns"], v
    shares = [c["share"] for c in v["causes"]]
    assert shares == sorted(shares, reverse=True) and sum(shares) <= 1 + 1e-9, v
    assert v["causes"][0]["cause"] == first, v
    return v


def test_more_work_per_frame_is_named_first(stack):
    agent, marker, sub = start(stack, "15ms")
    pipeline(stack, marker, [(K, FAST_MS), (4 * FPS, SLOW_MS)], realtime=True)
    state, rec, flight = verdicts(sub)
    if not has_figure(rec, "proc.cpu", "pmu.task-clock"):
        pytest.skip("neither proc.cpu nor pmu.task-clock here: more_work cannot be measured")
    v = check_verdict(state, flight, "more_work")
    ev = v["causes"][0]["evidence"]
    assert ev["cpu_ms_per_frame"] > ev["baseline_cpu_ms_per_frame"] + (SLOW_MS - FAST_MS) / 2, ev
    assert "verdict on infer p50" in agent.log_text()


def save(v):
    """The verdict, for tests/bench/bench_diagnose_hog.py (EM_DIAGNOSE_OUT: a file)."""
    if os.environ.get("EM_DIAGNOSE_OUT"):
        with open(os.environ["EM_DIAGNOSE_OUT"], "w") as f:
            json.dump(v, f)


@pytest.mark.skipif(os.environ.get("EM_DIAGNOSE_HOG") != "1",
                    reason="flaky on a shared machine: tests/bench/bench_diagnose_hog.py runs it")
def test_a_cpu_hog_on_the_target_cpu_is_named_cpu_contention(stack):
    cpu = sorted(os.sched_getaffinity(0))[-1]
    agent, marker, sub = start(stack, "7ms")
    pipeline(stack, marker, [(K + 8 * FPS, 4)], cpu=cpu)
    hog = subprocess.Popen([sys.executable, "-c", HOG.format(cpu=cpu, delay=K / FPS)])
    stack.on_stop(lambda: (hog.kill(), hog.wait()))
    state, rec, flight = verdicts(sub)
    save(state.get("verdict"))
    if not has_figure(rec, "sched.runq_delay", "sched.ctxsw.involuntary"):
        pytest.skip("neither sched.runq_delay nor sched.ctxsw.involuntary here: "
                    "cpu_contention cannot be measured")
    v = check_verdict(state, flight, "cpu_contention")
    ev = v["causes"][0]["evidence"]
    if "runq_delay_ms_per_frame" in ev:
        assert ev["runq_delay_ms_per_frame"] > ev["baseline_runq_delay_ms_per_frame"], ev
