"""The agent's flight recorder against a real mosquitto and a real client pipeline.

A Python pipeline (the edgemon client, 3 stages at 100 frames a second) is the agent's target;
its infer stage slows from frame K, which raises the level. The recording published on
edgemon/v1/<device>/flight, decoded with cbor2 as proto/edgemon.cddl says ("flight": deltas
added back here, independently of the C codec), must hold the spans of the frames before and
after K with their frame ids and durations, the ticks of the same seconds with their figures
(the slower cadences only on the ticks that read them), and the post-trigger part; a second
escalation inside min_gap_seconds is counted in flight.suppressed and not published; with the
broker away during the breach the recording comes later from the spool, marked historical;
cmd/flight takes one on demand; a recording over max_bytes keeps the spans nearest the trigger
and says how many it left out (and flight.cut counts them); and with [flight] enabled = false
there is no recorder at all.

Short windows keep it quick: sample_period 50 ms, pre_seconds 2, post_seconds 500ms.
"""

import subprocess
import sys
import time

import cbor2
import pytest

from conftest import ROOT, Agent, edgemon_proto, wait_for
from test_spool import Durable, persistent_broker

PERIOD_NS = 50_000_000
PRE_NS = 2_000_000_000
POST_NS = 500_000_000
FAST_NS, SLOW_NS = 5_000_000, 50_000_000  # infer durations before and from frame K
K = 230  # frames before the slowdown (2.3 s at 100 fps: more than pre_seconds)

FLIGHT = ("[flight]\npre_seconds = 2\npost_seconds = 500ms\nmin_gap_seconds = {gap}\n{keys}"
          "[budget.infer]\np99 = 20ms\nlevel = DEGRADED\n"
          "[degrade]\nwindow = 200ms\nenter_windows = 1\nleave_windows = 1\n")

# The pipeline: frame i at 100 fps; pre 1 ms, infer FAST_NS or SLOW_NS by PHASES, post 1 ms,
# recorded with their real CLOCK_MONOTONIC starts (the agent's clock). PHASES: (frames, slow).
PIPELINE = """
import sys, time
sys.path.insert(0, {client!r})
import edgemon
# {marker}
c = edgemon.Client({sock!r})
phases = {phases!r}
i = 0
t0 = time.monotonic_ns()
for n, slow in phases:
    for _ in range(n):
        start = time.monotonic_ns()
        infer = {slow_ns} if slow else {fast_ns}
        c.record("pre", start, 1000000, frame=i)
        c.record("infer", start + 1000000, infer, frame=i)
        c.record("post", start + 1000000 + infer, 1000000, frame=i)
        i += 1
        time.sleep(max(0.0, (t0 + i * 10000000 - time.monotonic_ns()) / 1e9))
print(c.sent, c.dropped, flush=True)
time.sleep(60)
"""


def run_pipeline(stack, marker, phases):
    """Starts the pipeline (the agent's target, by `marker` in its command line)."""
    code = PIPELINE.format(client=str(ROOT / "firmware/client/python"), marker=marker,
                           sock=str(stack.tmp / "run" / "spans.sock"), phases=phases,
                           slow_ns=SLOW_NS, fast_ns=FAST_NS)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL)
    return proc


def decode_flight(payload):
    """A flight recording (CDDL "flight") with every delta added back: a dict of the header,
    trigger, stages, columns, ticks [{"mono_ns", "values": {name: value}}] and spans
    [{"stage", "frame", "start_ns", "duration_ns"}]."""
    raw = cbor2.loads(payload)
    assert raw[0] == 1 and raw[1] == 5, raw.get(1)
    trig_mono = raw[6]
    stages, columns = raw[10], raw[11]
    assert len(set(stages)) == len(stages)
    ticks, t, totals = [], None, {}
    for i, (dt, values) in enumerate(raw[12]):
        t = trig_mono + dt if i == 0 else t + dt
        assert i == 0 or dt >= 0
        named = {}
        for col, v in values.items():
            name, _unit, kind = columns[col]
            if kind == 1 and v is not None:  # counter: the increase since the last carrier
                v = totals[col] = totals.get(col, 0) + v
            named[name] = v
        ticks.append({"mono_ns": t, "values": named})
    flat = raw[13]
    assert len(flat) % 4 == 0
    spans, frame, start = [], 0, None
    for i in range(0, len(flat), 4):
        stage, dframe, dstart, duration = flat[i:i + 4]
        frame += dframe
        start = trig_mono + dstart if i == 0 else start + dstart
        assert i == 0 or dstart >= 0
        spans.append({"stage": stages[stage], "frame": frame, "start_ns": start,
                      "duration_ns": duration})
    trig = raw[5]
    return {"time_ns": raw[2], "session": raw[3], "number": raw[4],
            "cause": ["escalation", "command"][trig[0]], "level": trig[1],
            "prev_level": trig.get(2), "rule": trig.get(3), "stage": trig.get(4),
            "trigger_mono_ns": trig_mono, "pre_ns": raw[7], "post_ns": raw[8],
            "period_ns": raw[9], "ticks": ticks, "spans": spans, "truncated": raw.get(14, {}),
            "historical": raw.get(15, False), "raw": raw}


def same_in_edgemon_proto(payload, rec):
    """proto/python/edgemon_proto.py's reading (where it reads recordings) agrees with ours."""
    if not hasattr(edgemon_proto, "decode_flight"):
        return
    theirs = edgemon_proto.decode_flight(payload)
    assert [(s["frame"], s["start_ns"], s["duration_ns"]) for s in theirs["spans"]] == \
        [(s["frame"], s["start_ns"], s["duration_ns"]) for s in rec["spans"]]
    assert [t["mono_ns"] for t in theirs["ticks"]] == [t["mono_ns"] for t in rec["ticks"]]


def next_flight(sub, timeout):
    """The next flight message's payload on the subscriber (others are kept in sub.seen)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            item = sub.messages.get(timeout=max(0.05, deadline - time.monotonic()))
        except Exception:
            continue
        sub.seen.append(item)
        topic, kind, payload, retain = item
        if topic == f"edgemon/v1/{sub.device}/flight":  # not cmd/flight
            assert not retain, "a flight recording is never retained"
            return payload
    pytest.fail(f"no flight message within {timeout} s")


def last_values(sub, birth, name, timeout=5):
    """The value of `name` in the next data message."""
    d = sub.next("data", timeout=timeout)
    return edgemon_proto.values_by_name(d, birth).get(name, "missing")


class Flights(Durable):
    """test_spool's subscriber with a persistent session (QoS 1), so what the broker accepted
    for it survives the broker's restart, keeping the flight payloads of one device."""

    def __init__(self, port, device):
        self.payloads = []
        self.topic = f"edgemon/v1/{device}/flight"
        super().__init__(port, device)

    def _on_message(self, client, userdata, m):
        if m.topic == self.topic:
            assert not m.retain
            with self.lock:
                self.payloads.append(m.payload)

    def wait(self, n, timeout):
        """The n-th flight payload (1-based), once it came."""
        wait_for(lambda: len(self.payloads) >= n, timeout, f"flight recording {n}")
        with self.lock:
            return self.payloads[n - 1]


@pytest.fixture
def flight_agent(stack, request):
    """make(gap, broker=None, keys=""): a broker (a new one unless given), an agent with a 50 ms
    period and the [flight] (min_gap_seconds = gap, then `keys`), budget and [degrade] sections
    whose target is the pipeline of `marker`, and a subscriber started before it."""

    def make(gap, broker=None, keys=""):
        broker = broker or stack.broker()
        marker = f"edgemon-flight-pipeline-{time.monotonic_ns()}"
        agent = Agent(stack.tmp, broker.port, f"cmdline = {marker}", extra=FLIGHT.format(gap=gap, keys=keys))
        agent.config.write_text(agent.config.read_text().replace(
            "sample_period = 100ms\n", "sample_period = 50ms\n"))
        sub = stack.subscriber(broker.port, agent.device)
        request.addfinalizer(agent.stop)
        agent.start()
        return broker, agent, marker, sub

    return make


def check_recording(rec, k_frames, n_slow):
    """The recording of a slowdown of frames k_frames .. k_frames + n_slow - 1: window, spans
    and their durations, ticks and their figures, the post-trigger part."""
    trig = rec["trigger_mono_ns"]
    lo, hi = trig - PRE_NS, trig + POST_NS
    assert rec["pre_ns"] == PRE_NS and rec["post_ns"] == POST_NS
    assert rec["period_ns"] == PERIOD_NS
    assert rec["cause"] == "escalation" and rec["level"] == 2 and rec["prev_level"] == 0
    assert rec["rule"] == "infer.p99" and rec["stage"] == "infer"
    assert rec["truncated"] == {}, rec["truncated"]

    spans = rec["spans"]
    assert spans, "no spans"
    starts = [s["start_ns"] for s in spans]
    assert starts == sorted(starts)
    assert lo <= starts[0] and starts[-1] <= hi
    by_stage = {}
    for s in spans:
        by_stage.setdefault(s["stage"], []).append(s)
    assert set(by_stage) == {"pre", "infer", "post"}
    infer = by_stage["infer"]
    frames = [s["frame"] for s in infer]
    # Every frame of the window, none missing, and both sides of K.
    assert frames == list(range(frames[0], frames[-1] + 1)), frames
    assert frames[0] < k_frames <= frames[-1]
    for s in infer:
        want = SLOW_NS if k_frames <= s["frame"] < k_frames + n_slow else FAST_NS
        assert s["duration_ns"] == want, s
    for s in by_stage["pre"] + by_stage["post"]:
        assert s["duration_ns"] == 1_000_000
    # Roughly the 2.5 s window at 100 fps (edges: the first and last frames may straddle it).
    assert 200 <= len(infer) <= 260, len(infer)
    # The post-trigger part: spans and ticks after the trigger, up to its end.
    assert any(s["start_ns"] > trig + POST_NS - 150_000_000 for s in spans)

    ticks = rec["ticks"]
    times = [t["mono_ns"] for t in ticks]
    assert times == sorted(times) and lo <= times[0] and times[-1] <= hi
    assert 45 <= len(ticks) <= 52, len(ticks)  # 2.5 s of 50 ms ticks
    assert times[0] < trig - PRE_NS + 2 * PERIOD_NS and times[-1] > trig + POST_NS - 2 * PERIOD_NS
    # The target's memory on every tick; MemAvailable (system_period 400 ms) only on the ticks
    # that read it; no tick carries the agent's own figures.
    assert all(isinstance(t["values"].get("mem.rss"), int) for t in ticks)
    with_avail = [t for t in ticks if "sys.mem.available" in t["values"]]
    assert 4 <= len(with_avail) <= 9, len(with_avail)
    assert all("agent.cpu" not in t["values"] for t in ticks)
    names = set().union(*(t["values"] for t in ticks))
    assert any(n.startswith("pmu.") for n in names)
    return infer


def test_a_slowdown_is_recorded_once_with_the_frames_around_it(stack, flight_agent):
    broker, agent, marker, sub = flight_agent(gap=30)
    birth = sub.next("birth")
    fr = cbor2.loads(birth["_raw"])[10]
    assert fr[0] == PRE_NS and fr[1] == POST_NS
    assert fr[2] == (PRE_NS + POST_NS) // PERIOD_NS + 4 and fr[3] == 16384
    assert fr[4] > 16384 * 32 + 262144
    wait_for((stack.tmp / "run" / "spans.sock").exists, 5, "the span socket")
    # Slow from K for 0.6 s, fast 0.8 s (the level steps down), slow again 0.5 s: the second
    # escalation comes within min_gap_seconds.
    phases = [(K, False), (60, True), (80, False), (50, True), (100, False)]
    proc = run_pipeline(stack, marker, phases)
    try:
        payload = next_flight(sub, timeout=45)
        rec = decode_flight(payload)
        assert rec["number"] == 0 and not rec["historical"]
        assert rec["session"] == birth["session"]
        check_recording(rec, K, 60)
        same_in_edgemon_proto(payload, rec)
        # The second escalation: counted, not published.
        wait_for(lambda: (last_values(sub, birth, "flight.suppressed") or 0) >= 1, 30,
                 "flight.suppressed")
        assert last_values(sub, birth, "flight.recordings") == 1
        assert not [k for _, k, _, _ in sub.seen if k == "flight"][1:]
        while not sub.messages.empty():
            assert sub.messages.get()[1] != "flight"
        assert "not recorded: within [flight] min_gap_seconds" in agent.log_text()
    finally:
        proc.kill()
        proc.wait()


def test_a_recording_made_while_the_broker_is_away_comes_from_the_spool(stack, flight_agent):
    broker = persistent_broker(stack)
    broker, agent, marker, sub = flight_agent(gap=0, broker=broker)
    sub.next("birth")
    flights = Flights(broker.port, agent.device)
    wait_for((stack.tmp / "run" / "spans.sock").exists, 5, "the span socket")
    proc = run_pipeline(stack, marker, [(K, False), (60, True), (300, False)])
    try:
        time.sleep(K / 100 - 0.8)
        broker.stop()  # SIGTERM: mosquitto saves the subscriber's session, then exits.
        wait_for(lambda: "flight: recording 0:" in agent.log_text(), 30, "the recording")
        assert not flights.payloads
        broker.start()  # Same port: the agent reconnects and replays its spool.
        payload = flights.wait(1, timeout=45)
        rec = decode_flight(payload)
        same_in_edgemon_proto(payload, rec)
        assert rec["historical"] is True and rec["number"] == 0
        check_recording(rec, K, 60)
        # cmd/flight: one more, on demand (min_gap_seconds 0), with the level then.
        flights.client.publish(f"edgemon/v1/{agent.device}/cmd/flight",
                               cbor2.dumps({0: 1, 1: 4, 2: time.time_ns(), 4: 2}),
                               qos=1).wait_for_publish()
        rec = decode_flight(flights.wait(2, timeout=30))
        assert rec["cause"] == "command" and rec["number"] == 1 and not rec["historical"]
        assert rec["prev_level"] is None and rec["spans"]
    finally:
        flights.close()
        proc.kill()
        proc.wait()


def test_a_recording_over_max_bytes_keeps_what_is_nearest_the_trigger(stack, flight_agent):
    broker, agent, marker, sub = flight_agent(gap=0, keys="max_bytes = 4KiB\n")
    birth = sub.next("birth")
    wait_for((stack.tmp / "run" / "spans.sock").exists, 5, "the span socket")
    proc = run_pipeline(stack, marker, [(600, False)])
    try:
        time.sleep(2.5)
        sent_ns = time.monotonic_ns()
        sub.publish(f"edgemon/v1/{agent.device}/cmd/flight",
                    cbor2.dumps({0: 1, 1: 4, 2: time.time_ns(), 4: 2}))
        payload = next_flight(sub, timeout=30)
        assert len(payload) <= 4096
        rec = decode_flight(payload)
        same_in_edgemon_proto(payload, rec)
        trig = rec["trigger_mono_ns"]
        assert sent_ns <= trig < sent_ns + 1_000_000_000
        cut = rec["truncated"]
        assert cut.get(0, 0) > 0 and cut.get(2, 0) == 0, cut  # spans cut for the cap
        # What is kept is nearest the trigger: about 2.5 s of ~750 spans did not fit in 4 KiB.
        spans = rec["spans"]
        assert 0 < len(spans) < 500
        far_kept = max(abs(s["start_ns"] - trig) for s in spans)
        assert far_kept < 1_000_000_000
        frames = sorted({s["frame"] for s in spans if s["stage"] == "infer"})
        assert frames == list(range(frames[0], frames[-1] + 1))
        wait_for(lambda: (last_values(sub, birth, "flight.cut") or 0) ==
                 cut.get(0, 0) + cut.get(1, 0), 5, "flight.cut")
    finally:
        proc.kill()
        proc.wait()


def test_with_the_recorder_off_there_is_none(stack):
    broker, target, agent, sub = stack.watching(spool_keys="[flight]\nenabled = false\n")
    birth = sub.next("birth")
    assert 10 not in cbor2.loads(birth["_raw"])
    defs = {m["name"]: m for m in birth["metrics"]}
    assert "enabled = false" in defs["flight.recordings"]["absent_reason"]
    assert last_values(sub, birth, "flight.recordings") is None
    sub.publish(f"edgemon/v1/{agent.device}/cmd/flight",
                cbor2.dumps({0: 1, 1: 4, 2: time.time_ns(), 4: 2}))
    wait_for(lambda: "cmd/flight ignored: the flight recorder is off" in agent.log_text(), 5,
             "the refusal")
    assert "flight: recorder on" not in agent.log_text()
