"""A flight recording's timeline in the dashboard (#/device/<id>/flight/<key>, host/web/
timeline.js), and the fleet latency view's own refresh, in a real headless chromium
(webdriver.py) against a real edgemon-aggregator fed over a real mosquitto.

The recording is written here as its device would publish it (CBOR through python3-cbor2, keys
of proto/edgemon.cddl), so every figure is known: 2 s before the trigger and 1 s after, a frame
every 50 ms with a preprocess and an infer span, frame SLOW's infer 90 ms (the slowest), ticks
every 100 ms with a counter and a gauge, a verdict naming io, and a reason that is markup (the
page must show it as text). The device's state messages put a WARN 1.5 s before the trigger and
the DEGRADED escalation at it: both are level changes within the window. A stack profile of
the same breach (test_dashboard_flame.py's, same session, cause and time) is linked to it: each
view opens the other.

The canvas is read back (getImageData): every span is drawn in its stage's lane, the wheel and
the zoom buttons change the time range drawn (and so the pixels), a drag pans, a click on a span
shows its frame (each stage's duration, the total) and the figures of the tick whose window
holds the frame's end, as edgemon-cli flight reads them. Clicks are mouse events at the span's
place on the canvas, found through the spans the timeline says it drew (box.timelineSpans()).

The fleet latency view must show a device that starts reporting after the view was opened,
without a reload (edgemon-sim publishes it meanwhile). Every test ends by checking that the page
raised no error.

EM_DASHBOARD_SHOTS=DIR adds test_screenshot_timeline: the view at 1280x1100 with the slowest
frame clicked, as DIR/dashboard-timeline.png (docs/img/ holds the committed one).
"""

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import cbor2
import pytest

from conftest import broker_and_aggregator, publish_once, wait_for
from test_dashboard_flame import (BREACH_STACKS, CANVAS, MOUSE, browser, frames as flame_frames,
                                  open_from_device, profile, webdriver)
from test_dashboard_verdict import errors

WHY_NOT = webdriver.available()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))
SHOTS = os.environ.get("EM_DASHBOARD_SHOTS")
SIM = os.environ.get("EM_SIM")

DEVICE = "tl-0001"
KEY = "515-0"
MS = 10**6
PRE, POST, PERIOD, EVERY = 2000 * MS, 1000 * MS, 100 * MS, 50 * MS
TRIGGER_MONO = 5 * 10**12
STAGES = ["preprocess", "infer"]
SLOW = 30  # the frame whose infer span is the slowest (90 ms)
MARKUP = '<img src="x" onerror="window.__emInjected=1"> infer p99 over budget'
COUNTER_STEP = 7  # context switches per tick


def frames():
    """[(frame id, start from the trigger, preprocess ns, infer ns)]: one every EVERY from -PRE
    to +POST."""
    out = []
    for i in range((PRE + POST) // EVERY):
        infer = 90 * MS if i == SLOW else (20 + i % 5) * MS
        out.append((i, -PRE + i * EVERY, 4 * MS, infer))
    return out


def spans():
    """Key 13: the spans as (stage, frame delta, start delta, duration), ascending start."""
    flat, prev_frame, prev_start = [], 0, None
    for fid, start, pre, infer in frames():
        for stage, t, d in [(0, start, pre), (1, start + pre, infer)]:
            flat += [stage, fid - prev_frame, t if prev_start is None else t - prev_start, d]
            prev_frame, prev_start = fid, t
    return flat


def ticks():
    """Key 12: a tick every PERIOD from -PRE + PERIOD to +POST; column 0 a counter (its first
    value the running total, then the increase), column 1 a gauge (RSS)."""
    out, prev = [], None
    for i, t in enumerate(range(-PRE + PERIOD, POST + 1, PERIOD)):
        out.append([t if prev is None else t - prev,
                    {0: 1000 if i == 0 else COUNTER_STEP + i, 1: 100 * 2**20 + i * 4096}])
        prev = t
    return out


def recording(t_ns):
    return cbor2.dumps({
        0: 1, 1: 5, 2: t_ns, 3: 515, 4: 0,
        5: {0: 0, 1: 2, 2: 1, 3: "infer.p99", 4: "infer", 5: 61 * MS, 6: 40 * MS, 7: MARKUP},
        6: TRIGGER_MONO, 7: PRE, 8: POST, 9: PERIOD, 10: STAGES,
        11: [["pmu.context-switches", "1", 1], ["mem.rss", "By", 0]],
        12: ticks(), 13: spans(),
        16: {0: "infer", 1: "p99", 2: 26 * MS, 3: 61 * MS, 4: 12,
             5: [{0: 4, 1: 0.7, 2: {"iowait_ms_per_frame": 12.5}},
                 {0: 7, 1: 0.3, 2: {"excess_ms": 5.0}}]}})


def state(t_ns, level, prev, seq):
    return cbor2.dumps({0: 1, 1: 2, 2: t_ns, 3: seq, 4: level, 5: prev, 6: TRIGGER_MONO,
                        7: "infer.p99", 8: "infer", 9: 61 * MS, 10: 40 * MS})


@pytest.fixture(scope="module")
def agg(tmp_path_factory):
    with broker_and_aggregator(tmp_path_factory.mktemp("timeline")) as (broker, agg):
        agg.broker = broker
        t = time.time_ns() - 30 * 10**9
        publish_once(broker.port, f"edgemon/v1/{DEVICE}/state", state(t - 1500 * MS, 1, 0, 1))
        publish_once(broker.port, f"edgemon/v1/{DEVICE}/state", state(t, 2, 1, 2))
        publish_once(broker.port, f"edgemon/v1/{DEVICE}/flight", recording(t))
        # The stack profile of the same breach (same session and cause, same time).
        publish_once(broker.port, f"edgemon/v1/{DEVICE}/profile",
                     profile(0, t, BREACH_STACKS, session=515))

        def stored():
            status, body = agg.get(f"/api/devices/{DEVICE}/flights")
            if status != 200 or [f["profile"] for f in json.loads(body)["flights"]] != [KEY]:
                return False
            status, body = agg.get(f"/api/devices/{DEVICE}/history?range=5m&points=10")
            return status == 200 and len(json.loads(body)["levels"]) == 2
        wait_for(stored, 20, "the recording, its profile and both level changes in the store")
        yield agg


@pytest.fixture(scope="module")
def page(agg, tmp_path_factory):
    with browser(tmp_path_factory.mktemp("timeline-page")) as session:
        yield session


BOX = "#flight-timeline"


def drawn(s):
    """The spans the timeline drew: [{frame, stage, t_ns, x, y, w, h}] (CSS px)."""
    return s.execute("const b = document.querySelector(arguments[0]);"
                     "return b && b.timelineSpans ? b.timelineSpans() : []", BOX)


def shown_range(s):
    return s.execute("const b = document.querySelector(arguments[0]);"
                     "return [Number(b.dataset.from), Number(b.dataset.to)]", BOX)


def canvas(s):
    got = s.execute(CANVAS, BOX, [[201, 42, 42]])  # spans over their budget are dark red
    assert len(got) == 1 and got[0]["canvas"], got
    return got[0]


def open_recording(s, agg):
    """The recording opened from its device view's button, its timeline drawn."""
    open_from_device(s, agg, DEVICE, "flight", KEY)
    wait_for(lambda: len(drawn(s)) > 0, 15, "the timeline drawn")


def test_timeline_draws_every_span_in_its_stages_lane(agg, page):
    open_recording(page, agg)
    spans = drawn(page)
    want = frames()
    assert len(spans) == 2 * len(want), len(spans)
    assert {(x["frame"], x["stage"]) for x in spans} == \
        {(f, st) for f, *_ in want for st in STAGES}
    lanes = {st: {round(x["y"] + x["h"]) for x in spans if x["stage"] == st} for st in STAGES}
    assert lanes["preprocess"] and lanes["infer"] and \
        max(lanes["preprocess"]) < min(lanes["infer"]), lanes
    # On one time axis: a later start is further right; the trigger (0) between.
    by = {(x["frame"], x["stage"]): x for x in spans}
    assert by[(0, "infer")]["x"] < by[(SLOW, "infer")]["x"] < by[(50, "infer")]["x"]
    # The slowest infer span is the tallest; only it passes the budget (40 ms): dark red.
    assert by[(SLOW, "infer")]["h"] == max(x["h"] for x in spans)
    c = canvas(page)
    assert c["painted"] > 50000 and c["near"][0] > 20, c
    assert errors(page) == []


def test_the_trigger_verdict_and_level_changes_are_on_top(agg, page):
    open_recording(page, agg)
    cause = page.execute("return document.querySelector('#flight-verdict .named-cause')"
                         ".textContent")
    assert cause == "io", cause
    verdict = page.execute("return document.getElementById('flight-verdict').textContent")
    assert "70%" in verdict and "iowait_ms_per_frame" in verdict, verdict
    trigger = page.execute("return document.getElementById('flight-trigger').textContent")
    assert "WARN → DEGRADED" in trigger and "infer.p99" in trigger and MARKUP in trigger, trigger
    assert "61.0 ms against 40.0 ms" in trigger, trigger
    assert page.execute("return document.querySelectorAll('main img').length") == 0
    assert page.execute("return window.__emInjected === undefined")
    levels = page.execute("return [...document.querySelectorAll('#flight-changes li')]"
                          ".map((li) => [li.dataset.level, li.textContent])")
    assert [lv for lv, _ in levels] == ["WARN", "DEGRADED"], levels
    assert levels[0][1].startswith("−1.50 s"), levels
    assert errors(page) == []


def test_wheel_and_buttons_zoom_and_a_drag_pans(agg, page):
    open_recording(page, agg)
    full = shown_range(page)
    assert full == [-PRE, POST], full
    before = canvas(page)
    n = len(drawn(page))
    width = page.execute("return document.querySelector(arguments[0] + ' canvas')"
                         ".getBoundingClientRect().width", BOX)
    for _ in range(4):  # wheel up over the middle of the axis: zoom in around it
        page.execute(MOUSE, BOX, "wheel", 150 + (width - 166) / 2, 60, {"deltaY": -100})
    lo, hi = shown_range(page)
    assert -PRE < lo < hi < POST and hi - lo < (PRE + POST) / 2, (lo, hi)
    assert len(drawn(page)) < n
    assert canvas(page)["sum"] != before["sum"]
    # A drag to the right shows earlier times, as wide.
    page.execute(MOUSE, BOX, "mousedown", 600, 60)
    page.execute("window.dispatchEvent(new MouseEvent('mousemove', {clientX: arguments[0],"
                 " clientY: 200, bubbles: true}))", 800)
    page.execute("window.dispatchEvent(new MouseEvent('mouseup', {bubbles: true}))")
    lo2, hi2 = shown_range(page)
    assert lo2 < lo and hi2 - lo2 == pytest.approx(hi - lo, rel=1e-6), (lo, hi, lo2, hi2)
    page.click("button[data-zoom='reset']")
    assert shown_range(page) == full
    assert canvas(page)["sum"] == before["sum"]
    page.click("button[data-zoom='in']")
    lo3, hi3 = shown_range(page)
    assert hi3 - lo3 == pytest.approx((PRE + POST) / 2, rel=1e-6), (lo3, hi3)
    page.click("button[data-zoom='out']")
    assert shown_range(page) == full
    assert errors(page) == []


def test_click_on_a_span_shows_its_frame_and_the_ticks_figures(agg, page):
    open_recording(page, agg)
    span = next(x for x in drawn(page) if x["frame"] == SLOW and x["stage"] == "infer")
    page.execute(MOUSE, BOX, "click", span["x"] + span["w"] / 2, span["y"] + span["h"] / 2)
    box = wait_for(lambda: page.execute(
        "const f = document.getElementById('flight-frame');"
        "return f && {frame: f.dataset.frame, text: f.textContent,"
        " stages: [...f.querySelectorAll('.frame-stages tr[data-stage]')].map((r) =>"
        "   [r.dataset.stage, r.cells[1].textContent]),"
        " figures: Object.fromEntries([...f.querySelectorAll('.frame-tick tr[data-column]')]"
        "   .map((r) => [r.dataset.column, r.cells[1].textContent]))}"), 5, "the frame's details")
    assert box["frame"] == str(SLOW), box
    assert box["stages"] == [["preprocess", "4.00 ms"], ["infer", "90.0 ms"]], box
    fid, start, pre, infer = frames()[SLOW]
    assert "Frame 30: 94.0 ms" in box["text"], box["text"]
    # The tick whose window (previous tick, tick] holds the frame's end.
    end = start + pre + infer
    tick_times = list(range(-PRE + PERIOD, POST + 1, PERIOD))
    i = next(k for k, t in enumerate(tick_times) if t >= end)
    assert box["figures"]["pmu.context-switches"] == f"{COUNTER_STEP + i} (increase)", box
    assert box["figures"]["mem.rss"] == f"{(100 * 2**20 + i * 4096) / 2**20:.1f} MiB", box
    assert errors(page) == []


def test_the_breachs_profile_and_recording_open_each_other(agg, page):
    open_recording(page, agg)
    page.execute("document.querySelector('.device-head button.open-flame').click()")
    assert page.execute("return location.hash") == f"#/device/{DEVICE}/profile/{KEY}"
    wait_for(lambda: len(flame_frames(page)) >= 6, 15, "the profile's flame graph")
    page.execute("document.querySelector('.device-head button.open-timeline').click()")
    assert page.execute("return location.hash") == f"#/device/{DEVICE}/flight/{KEY}"
    wait_for(lambda: len(drawn(page)) == 2 * len(frames()), 15, "the timeline")
    assert errors(page) == []


def test_fleet_latency_view_refreshes_without_a_reload(agg, page):
    assert SIM, "EM_SIM must name the edgemon-sim binary (run through ctest)"
    port = agg.broker.port

    def sim(prefix):
        r = subprocess.run([SIM, "--devices", "1", "--rate", "4", "--duration", "2", "--qos", "1",
                            "--seed", "3", "--prefix", prefix,
                            "--broker", f"mqtt://127.0.0.1:{port}"],
                           capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr.decode(errors="replace")

    def rows():
        return page.execute("return [...new Set([...document.querySelectorAll("
                            "'#app[data-view=latency] table.devices tbody tr')]"
                            ".map((r) => r.dataset.id))]")
    sim("early")
    page.get(f"http://127.0.0.1:{agg.port}/ui/#/latency")
    page.click("button[data-range='5m']")
    wait_for(lambda: "early-0001" in rows(), 20, "the first device in the latency view")
    marker = uuid.uuid4().hex
    page.execute("window.__emMarker = arguments[0]", marker)
    sim("late")
    wait_for(lambda: "late-0001" in rows(), 30, "the new device, without a reload")
    assert page.execute("return window.__emMarker") == marker, "the page was reloaded"
    assert page.execute("return location.hash") == "#/latency"
    assert errors(page) == []


@pytest.mark.skipif(not SHOTS, reason="EM_DASHBOARD_SHOTS is not set")
def test_screenshot_timeline(agg, page):
    open_recording(page, agg)
    span = next(x for x in drawn(page) if x["frame"] == SLOW and x["stage"] == "infer")
    page.execute(MOUSE, BOX, "click", span["x"] + span["w"] / 2, span["y"] + span["h"] / 2)
    wait_for(lambda: page.execute("return !!document.getElementById('flight-frame')"), 5,
             "the frame's details")
    page.set_viewport(1280, 1100)
    try:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        (Path(SHOTS) / "dashboard-timeline.png").write_bytes(page.screenshot())
    finally:
        page.set_viewport(1280, 800)
    assert errors(page) == []
