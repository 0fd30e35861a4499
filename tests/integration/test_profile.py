"""The agent's stack profiler against real processes, real perf_event_open and a real mosquitto.

A Python pipeline (the edgemon client, a `pre` stage then an `infer` stage at 50 frames a
second, spans through the client's ring) is the agent's target; its pre stage runs
prep_pixels(), and from frame K its infer stage calls slow_checksum(), a pure-Python loop, which
raises the level. The profile published on edgemon/v1/<device>/profile, decoded with
proto/python/edgemon_proto.decode_profile, must name slow_checksum as a Python frame (from the
client's own sampling, merged by the agent in place of libpython's eval loop) in the stack with
the most samples, and as the Python function with the most samples; that stack's native frames
must reach the process's entry (DWARF unwinding through python3.11, built without frame
pointers) and hold no address outside every binary, and the interpreter's functions
slow_checksum's arithmetic runs in must stay under it. The samples in slow_checksum must carry
the stage `infer`, about a tenth of all samples the stage `pre` (the span of their thread at
their time), and no sample of infer may take prep_pixels' Python frames. A window on an idle
target (a Python process without the client) holds nearly no samples and says it has no
Python frames; a target that exits mid-window ends it early (a profile with a shorter
duration, the agent still running); a second trigger inside min_gap_seconds is counted in
profile.suppressed and not published (with unwind = fp, and a note saying so); cmd/profile
opens a window with the seconds it asks for. A pipeline of three ~1 ms stages in spans, each
calling its own function, profiled at 99 Hz for 4 s (cmd/profile), names each stage's function
in at least 60 % of its stages' samples (the client's span samples; 80 % measured, 5 % without
them), and never another stage's.
"""

import re
import subprocess
import sys
import threading
import time
import uuid

import cbor2

from conftest import ROOT, edgemon_proto, subscribed_client, wait_for

K = 50  # frames before the slowdown (1 s at 50 fps)

PROFILE = ("[profile]\nhz = 99\nseconds = {seconds}\nmin_gap_seconds = {gap}\nunwind = {unwind}\n"
           "[budget.infer]\np99 = 30ms\nlevel = DEGRADED\n"
           "[degrade]\nwindow = 200ms\nenter_windows = 1\nleave_windows = 1\n")

PIPELINE = """
import os, sys, time
sys.path.insert(0, {client!r})
import edgemon
# {marker}
def slow_checksum(n):
    s = 0
    for i in range(n):
        s = (s * 31 + i) & 0xffffffff
    return s
def prep_pixels(n):
    s = 0
    for i in range(n):
        s += i * i
    return s
c = edgemon.Client({sock!r}, state_path=os.path.join(os.path.dirname({sock!r}), "state"))
i = 0
t0 = time.monotonic_ns()
while True:
    start = time.monotonic_ns()
    c.level()  # read every frame, as a pipeline does: a change makes the client look at once
    prep_pixels(150000)
    mid = time.monotonic_ns()
    c.record("pre", start, mid - start, frame=i)
    if i >= {k}:
        slow_checksum(800000)
    c.record("infer", mid, time.monotonic_ns() - mid, frame=i)
    i += 1
    time.sleep(max(0.0, (t0 + i * 20000000 - time.monotonic_ns()) / 1e9))
"""

IDLE = "# {marker}\nimport time\ntime.sleep(120)\n"

# About 1 ms stages, each its own function, in spans, then a sleep: 100 frames a second.
SHORT_STAGES = """
import sys, time
sys.path.insert(0, {client!r})
import edgemon
# {marker}
def busy(ns):
    end = time.monotonic_ns() + ns
    s = 0
    while time.monotonic_ns() < end:
        s += 1
    return s
def decode_frame():
    return busy(1000000)
def run_model():
    return busy(1200000)
def draw_boxes():
    return busy(800000)
c = edgemon.Client({sock!r})
t0 = time.monotonic_ns()
i = 0
while True:
    with c.span("pre"):
        decode_frame()
    with c.span("infer"):
        run_model()
    with c.span("post"):
        draw_boxes()
    i += 1
    time.sleep(max(0.0, (t0 + i * 10000000 - time.monotonic_ns()) / 1e9))
"""


class Profiles:
    """Every payload published on edgemon/v1/<device>/profile."""

    def __init__(self, port, device):
        self.payloads = []
        self.lock = threading.Lock()
        self.client = subscribed_client(port, f"edgemon/v1/{device}/profile", self._on_message,
                                        "it-prof")
        self.device = device

    def _on_message(self, client, userdata, m):
        with self.lock:
            self.payloads.append(m.payload)

    def wait(self, n, timeout):
        wait_for(lambda: len(self.payloads) >= n, timeout, f"{n} profile message(s)")
        return edgemon_proto.decode_profile(self.payloads[n - 1])

    def command(self, seconds=None):
        cmd = {0: 1, 1: 4, 2: time.time_ns(), 4: 3}
        if seconds is not None:
            cmd[5] = seconds
        self.client.publish(f"edgemon/v1/{self.device}/cmd/profile", cbor2.dumps(cmd),
                            qos=1).wait_for_publish()

    def close(self):
        self.client.loop_stop()
        self.client.disconnect()


def start(stack, code, seconds=2, gap=0, unwind="dwarf"):
    """The target running `code`, and an agent watching it with a [profile] section; the
    target is killed and the profile subscriber closed when the test ends."""
    broker = stack.broker()
    marker = f"edgemon-profile-{uuid.uuid4().hex[:10]}"
    (stack.tmp / "run").mkdir(exist_ok=True)
    agent = stack.agent(broker.port, f"cmdline = {marker}",
                        extra=PROFILE.format(seconds=seconds, gap=gap, unwind=unwind))
    sock = stack.tmp / "run" / "spans.sock"
    wait_for(sock.exists, 10, "the span socket")
    proc = subprocess.Popen([sys.executable, "-c", code.format(
        client=str(ROOT / "firmware/client/python"), marker=marker, sock=str(sock), k=K)])
    sub = stack.subscriber(broker.port, agent.device)
    stack.on_stop(lambda: (proc.kill(), proc.wait()))
    birth = sub.next("birth", timeout=10, pred=lambda b: b.get("metrics"))
    wait_for(lambda: "attached" in agent.log_text(), 10, "the agent to attach")
    profiles = Profiles(broker.port, agent.device)
    stack.on_stop(profiles.close)
    return agent, proc, sub, birth, profiles


def frames_of(profile, stack):
    return [profile["frames"][i] for i in stack["frames"]]


def figure(sub, birth, name):
    return edgemon_proto.values_by_name(sub.next("data", timeout=5), birth).get(name)


def samples_by_stage(profile, function):
    """Samples whose innermost Python frame is `function`, by stage name (None: no stage)."""
    out = {}
    for st in profile["stacks"]:
        py = [f["name"] for f in frames_of(profile, st) if f["kind"] == "python"]
        if py and py[-1] == function:
            out[st["stage"]] = out.get(st["stage"], 0) + st["samples"]
    return out


def python_self_samples(profile):
    """Samples by the innermost Python function of each stack (its Python self samples)."""
    out = {}
    for st in profile["stacks"]:
        py = [f["name"] for f in frames_of(profile, st) if f["kind"] == "python"]
        if py:
            out[py[-1]] = out.get(py[-1], 0) + st["samples"]
    return out


def test_an_escalation_profiles_the_slow_python_function_from_the_clients_samples(stack):
    # 3 s: the client reads the request page on its once-a-second check, so it may start
    # sampling up to a second into the window.
    agent, proc, sub, birth, profiles = start(stack, PIPELINE, seconds=3, gap=60)
    assert birth["profiler"]["hz"] == 99 and birth["profiler"]["seconds"] == 3
    p = profiles.wait(1, timeout=20)
    assert p["trigger"]["cause"] == "escalation"
    assert p["hz"] == 99 and p["clock"] == "cpu-clock"
    assert 2.5e9 <= p["duration_ns"] <= 4e9
    # ~3 s of a busy thread at 99 Hz is ~300 samples of cpu-clock, which counts the target's
    # own CPU time: on a machine with a load of 25 it got 39. The floor says it sampled again
    # and again, not how much CPU the machine left the target.
    assert p["samples"] >= 20, p["samples"]
    top = p["stacks"][0]
    assert top["samples"] == max(s["samples"] for s in p["stacks"])
    frames = frames_of(p, top)
    py = [f for f in frames if f["kind"] == "python"]
    # The Python frames of the client's samples, in place of the interpreter's eval loop.
    assert [f["name"] for f in py][-2:] == ["<module>", "slow_checksum"], frames
    assert py[-1]["module"].startswith("<string>:"), py[-1]
    assert "_PyEval_EvalFrameDefault" not in [f["name"] for f in frames], frames
    by_self = python_self_samples(p)
    assert max(by_self, key=by_self.get) == "slow_checksum", by_self
    # python3.11 has no frame pointers: what frame-pointer unwinding read past it is no
    # return address, and is cut instead of shown as frames outside every binary.
    assert not [f for f in p["frames"] if f["kind"] == "unknown"], p["frames"]
    # DWARF unwinding goes through it to the process's entry: the native frames above the
    # interpreter stay above the Python frames spliced in place of its eval loop.
    first_py = next(i for i, f in enumerate(frames) if f["kind"] == "python")
    assert frames[0]["kind"] == "native", frames
    assert "Py_RunMain" in [f["name"] for f in frames[:first_py]], frames
    assert not any("frame pointers only" in n or "had no eval-loop frame" in n
                   for n in p["notes"]), p["notes"]
    # ... and the native frames slow_checksum called stay under it (CPython's own functions
    # doing its arithmetic: PyNumber_*, long objects, the allocator).
    under = []
    for st in p["stacks"]:
        fs = frames_of(p, st)
        py_at = [i for i, f in enumerate(fs) if f["kind"] == "python"]
        if py_at and fs[py_at[-1]]["name"] == "slow_checksum" and py_at[-1] + 1 < len(fs):
            under.append((st["samples"], fs[py_at[-1] + 1:]))
    assert sum(n for n, _ in under) >= 5, under
    assert all(f["kind"] in ("native", "kernel") for _, fs in under for f in fs), under
    assert any(f["module"] == "python3.11" for _, fs in under for f in fs), under
    assert not any("does not merge" in n or n.startswith("no Python frames")
                   for n in p["notes"]), p["notes"]
    # Each sample's stage is the span its thread was in: the ring names its writer thread.
    assert {"pre", "infer"} <= set(p["stages"]), p["stages"]
    assert not any(n.startswith("no stages") for n in p["notes"]), p["notes"]
    # The pipeline reads its level every frame: the escalation's new state record makes the
    # client read the profile page at once, so its sampling covers the window from the start.
    without = [int(m.group(1)) for n in p["notes"]
               for m in [re.match(r"(\d+) of \d+ samples without Python frames", n)] if m]
    assert not without or without[0] <= 0.2 * p["samples"], p["notes"]
    by_stage = {}
    for st in p["stacks"]:
        by_stage[st["stage"]] = by_stage.get(st["stage"], 0) + st["samples"]
    # pre runs ~10 ms of each ~90 ms frame, infer the rest.
    assert 3 <= by_stage.get("pre", 0) < by_stage.get("infer", 0) / 3, by_stage
    # A sample takes Python frames only from a Python sample taken in the same stage.
    slow = samples_by_stage(p, "slow_checksum")
    assert slow.get("infer", 0) >= 0.9 * sum(slow.values()), slow
    assert "infer" not in samples_by_stage(p, "prep_pixels"), p["stacks"]
    wait_for(lambda: figure(sub, birth, "profile.taken") == 1, 5, "profile.taken")


def test_a_second_trigger_inside_min_gap_is_counted_not_published(stack):
    agent, proc, sub, birth, profiles = start(stack, IDLE, seconds=1, gap=60, unwind="fp")
    profiles.command()
    p = profiles.wait(1, timeout=10)
    assert p["trigger"]["cause"] == "command"
    assert any(n.startswith("native frames by frame pointers only (unwind = fp)")
               for n in p["notes"]), p["notes"]
    profiles.command()
    wait_for(lambda: figure(sub, birth, "profile.suppressed") == 1, 5, "profile.suppressed")
    time.sleep(1.5)
    assert len(profiles.payloads) == 1
    assert figure(sub, birth, "profile.taken") == 1


def test_an_idle_target_gives_nearly_no_samples(stack):
    agent, proc, sub, birth, profiles = start(stack, IDLE, seconds=1)
    profiles.command(seconds=2)
    p = profiles.wait(1, timeout=10)
    assert p["trigger"]["cause"] == "command"
    assert 1.8e9 <= p["duration_ns"] <= 2.5e9  # the command's seconds, not [profile]'s
    assert p["samples"] <= 3, p["stacks"]
    assert p["lost"] == 0
    # A Python process without the edgemon client: nothing sampled its Python stacks.
    assert any(n.startswith("no Python frames: no client samples") for n in p["notes"])
    assert not any(f["kind"] == "python" for f in p["frames"])


def test_a_target_that_exits_mid_window_ends_it_early(stack):
    agent, proc, sub, birth, profiles = start(stack, PIPELINE, seconds=1)
    profiles.command(seconds=10)
    wait_for(lambda: "profile: cmd/profile" in agent.log_text(), 5, "the window to open")
    time.sleep(1.0)
    proc.kill()
    proc.wait()
    p = profiles.wait(1, timeout=10)
    assert 0.5e9 <= p["duration_ns"] <= 4e9, p["duration_ns"]
    # What was taken before the exit is published (how much depends on the target's CPU
    # time in that second, not a figure to assert here).
    assert p["samples"] > 0 and p["stacks"], p["samples"]
    assert agent.proc.poll() is None  # still running
    sub.next("data", timeout=5)


def test_a_pipeline_of_1ms_stages_names_each_stages_python_function(stack):
    # The agent samples at 99 Hz of the target's CPU time (about 3 ms of 10 ms a frame busy:
    # ~30 samples a second); the client's helper samples at 99 Hz and mostly between stages,
    # so without more a 1 ms stage seldom holds a Python sample. Each span of the window
    # records one (its block's first Python call), from the client's first check after the
    # window opens (within its first second of the 4): most samples in a stage name its
    # function.
    agent, proc, sub, birth, profiles = start(stack, SHORT_STAGES, seconds=1)
    profiles.command(seconds=4)
    p = profiles.wait(1, timeout=15)
    funcs = {"pre": "decode_frame", "infer": "run_model", "post": "draw_boxes"}
    staged = named = 0
    for st in p["stacks"]:
        if st["stage"] not in funcs:
            continue
        staged += st["samples"]
        py = [f["name"] for f in frames_of(p, st) if f["kind"] == "python"]
        # The stage's function, under the loop (<module>), over busy() it calls.
        if funcs[st["stage"]] in py and py[0] == "<module>":
            named += st["samples"]
    assert staged >= 40, (staged, p["samples"], p["notes"])
    assert named >= 0.6 * staged, (named, staged, p["notes"])
    assert not any(funcs[st["stage"]] != n for st in p["stacks"] if st["stage"] in funcs
                   for n in [f["name"] for f in frames_of(p, st) if f["kind"] == "python"]
                   if n in funcs.values()), "a stage's samples name another stage's function"
