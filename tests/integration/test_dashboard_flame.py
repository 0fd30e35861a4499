"""A stack profile's flame graphs in the dashboard (#/device/<id>/profile/<key>, host/web/
flame.js) in a real headless chromium (webdriver.py), served by a real edgemon-aggregator that
stored the profiles from a real mosquitto.

The profiles are written here as their devices would publish them (CBOR through python3-cbor2,
keys of proto/edgemon.cddl), so every share the page shows is known: BREACH has 190 on-CPU
samples, 120 of them in sgemm_kernel under infer, and 25 ms off-CPU in futex_wait (a stack with
no sample); BASELINE is the same device's earlier profile of the same stage (infer), and OTHER,
between the two, watched another stage, so the differential view must pick BASELINE, the
previous profile of the same stage. A native frame's name is markup: the page must show it as
text and never make an element of it.

The canvas is read back (getImageData): frames are drawn, a click on a frame zooms (what is drawn
changes, the frame fills the width), search paints the matches and says their share, hover says
a frame's samples and share, the stage filter keeps that stage's stacks, off-CPU time is a graph
of its own, and the differential view paints what grew red and what shrank blue. Clicks and
hovers are mouse events at the frame's place on the canvas, found through the frames the graph
says it drew (box.flameFrames()). Every test ends by checking that the page raised no error.

EM_DASHBOARD_SHOTS=DIR adds test_screenshot_flame: the differential flame graph at 1280x800 as
DIR/dashboard-flame.png (docs/img/ holds the committed one).
"""

import contextlib
import json
import os
import time
from pathlib import Path

import cbor2
import pytest

import webdriver
from conftest import broker_and_aggregator, publish_once, wait_for
from test_dashboard import COLLECT_ERRORS
from test_dashboard_verdict import errors

WHY_NOT = webdriver.available()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))
SHOTS = os.environ.get("EM_DASHBOARD_SHOTS")

DEVICE = "fl-0001"
SESSION = 4242
BASELINE, OTHER, BREACH = f"{SESSION}-0", f"{SESSION}-1", f"{SESSION}-2"
MARKUP = '<img src="x" onerror="window.__emInjected=1">'
# The frame table: (kind, name, module); kinds 0 native, 1 kernel, 2 python.
FRAMES = [(2, "main", "app.py:88"), (2, "run", "app.py:61"), (2, "infer", "pipeline.py:42"),
          (0, "sgemm_kernel", "libopenblas.so.0"), (0, "cv::resize", "libopencv_imgproc.so"),
          (0, MARKUP, "libhostile.so"), (1, "futex_wait", None), (1, "__schedule", None),
          (2, "postprocess", "pipeline.py:70")]
STAGES = ["preprocess", "infer", "postprocess"]
PRE, INFER, POST = 0, 1, 2
# Stacks: [samples, off-CPU ns, stage index or None, frame indices root first].
BASELINE_STACKS = [[60, 0, INFER, 0, 1, 2, 3], [30, 0, PRE, 0, 1, 4], [10, 0, None, 0, 1, 5]]
OTHER_STACKS = [[50, 0, POST, 0, 1, 8]]
BREACH_STACKS = [[120, 0, INFER, 0, 1, 2, 3], [40, 0, INFER, 0, 1, 5], [30, 0, PRE, 0, 1, 4],
                 [0, 25_000_000, INFER, 0, 1, 2, 6, 7]]
BREACH_SAMPLES = 190

# Per canvas of the selector's boxes: its size, the pixels painted, those within 40 of each
# colour asked (r, g, b), and a checksum of all pixels (what is drawn changed or not).
CANVAS = """
const [selector, colours] = arguments;
return [...document.querySelectorAll(selector)].map((box) => {
  const c = box.querySelector("canvas");
  if (!c || !c.width || !c.height) return {canvas: false};
  const px = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let painted = 0, sum = 0;
  const near = colours.map(() => 0);
  for (let i = 0; i < px.length; i += 4) {
    if (px[i + 3] === 0) continue;
    painted++;
    sum = (sum * 31 + px[i] * 7 + px[i + 1] * 3 + px[i + 2] + i) % 1000000007;
    colours.forEach((rgb, k) => {
      if (Math.abs(px[i] - rgb[0]) <= 40 && Math.abs(px[i + 1] - rgb[1]) <= 40 &&
          Math.abs(px[i + 2] - rgb[2]) <= 40) near[k]++;
    });
  }
  return {canvas: true, width: c.width, height: c.height, painted, sum, near};
});
"""

# The colour (r, g, b, a) of the canvas of box `arguments[0]` at CSS px (x, y).
PIXEL = """
const [selector, x, y] = arguments;
const c = document.querySelector(selector).querySelector("canvas");
const k = c.width / c.getBoundingClientRect().width;
return [...c.getContext("2d").getImageData(Math.floor(x * k), Math.floor(y * k), 1, 1).data];
"""

# Dispatches a mouse event of type arguments[1] at CSS px (x, y) of the canvas of box
# arguments[0] (relative to the canvas), as the pointer would.
MOUSE = """
const [selector, type, x, y, extra] = arguments;
const c = document.querySelector(selector).querySelector("canvas");
const r = c.getBoundingClientRect();
const ev = type === "wheel" ? WheelEvent : MouseEvent;
c.dispatchEvent(new ev(type, Object.assign({clientX: r.left + x, clientY: r.top + y,
  bubbles: true, cancelable: true, view: window}, extra || {})));
"""


def profile(number, t_ns, stacks, stage="infer", samples=None, session=SESSION):
    """One profile's CBOR: an escalation to DEGRADED on <stage>.p99, 2 s at 99 Hz."""
    flat = [x for f in FRAMES for x in f]
    return cbor2.dumps({
        0: 1, 1: 6, 2: t_ns, 3: session, 4: number,
        5: {0: 0, 1: 2, 2: 0, 3: f"{stage}.p99", 4: stage, 7: f"{stage} p99 over its budget"},
        6: 10**12 + number * 10**10, 7: 2 * 10**9, 8: 99, 9: "cpu-clock",
        10: samples if samples is not None else sum(s[0] for s in stacks), 11: 0,
        12: STAGES, 13: flat, 14: stacks,
        15: ["kernel frames: simulated for the dashboard's tests"]})


@pytest.fixture(scope="module")
def agg(tmp_path_factory):
    with broker_and_aggregator(tmp_path_factory.mktemp("flame")) as (broker, agg):
        now = time.time_ns()
        for doc in [profile(0, now - 180 * 10**9, BASELINE_STACKS),
                    profile(1, now - 120 * 10**9, OTHER_STACKS, stage="postprocess"),
                    profile(2, now - 60 * 10**9, BREACH_STACKS, samples=BREACH_SAMPLES)]:
            publish_once(broker.port, f"edgemon/v1/{DEVICE}/profile", doc)

        def stored():
            status, body = agg.get(f"/api/devices/{DEVICE}/profiles")
            return status == 200 and len(json.loads(body)["profiles"]) == 3
        wait_for(stored, 20, "the three profiles in the store")
        yield agg


@contextlib.contextmanager
def browser(tmp):
    """A headless chromium at 1280x800 with the page's error collector installed (its files in
    tmp), closed on the way out."""
    driver = webdriver.Driver(tmp / "chromedriver.log").start()
    try:
        session = driver.session(tmp / "profile")
        session.on_new_document(COLLECT_ERRORS)
        session.set_viewport(1280, 800)
        yield session
    finally:
        driver.stop()


@pytest.fixture(scope="module")
def page(agg, tmp_path_factory):
    with browser(tmp_path_factory.mktemp("flame-page")) as session:
        yield session


def frames(s, mode="cpu"):
    """The frames the graph `mode` drew: [{name, depth, x, y, w, h, value}] (CSS px)."""
    return s.execute("const b = document.querySelector(`[data-flame='${arguments[0]}']`);"
                     "return b && b.flameFrames ? b.flameFrames() : []", mode)


def frame(s, name, mode="cpu"):
    got = [f for f in frames(s, mode) if f["name"] == name]
    assert len(got) == 1, (name, frames(s, mode))
    return got[0]


def centre(f):
    return f["x"] + f["w"] / 2, f["y"] + f["h"] / 2


def spot(f):
    """A point of frame f that its label never covers: by its top right corner."""
    return f["x"] + f["w"] - 2, f["y"] + 2


def canvas(s, mode="cpu", colours=()):
    got = s.execute(CANVAS, f"[data-flame='{mode}']", [list(c) for c in colours])
    assert len(got) == 1 and got[0]["canvas"], got
    return got[0]


def open_from_device(s, agg, device, kind, key):
    """The device view of device, then the view of its document `key` (kind: "profile" or
    "flight") opened by the button in the document's row."""
    table, button = {"profile": ("profiles", "open-flame"),
                     "flight": ("flights", "open-timeline")}[kind]
    s.get(f"http://127.0.0.1:{agg.port}/ui/#/device/{device}")
    css = f"#{table} tr[data-key='{key}'] button.{button}"
    wait_for(lambda: s.execute("return !!document.querySelector(arguments[0])", css), 15,
             f"the row of {kind} {key} with its button")
    # Clicked inside the page, at once: a poll of the device view may replace the row.
    s.execute("document.querySelector(arguments[0]).click()", css)
    assert s.execute("return location.hash") == f"#/device/{device}/{kind}/{key}"


def open_breach(s, agg):
    """The breach's profile opened from its device view's button, its graph drawn."""
    open_from_device(s, agg, DEVICE, "profile", BREACH)
    wait_for(lambda: len(frames(s)) >= 6, 15, "the flame graph drawn")


def test_flame_graph_draws_every_frame_of_the_profile(agg, page):
    open_breach(page, agg)
    drawn = frames(page)
    names = {f["name"] for f in drawn}
    assert names == {"all", "main", "run", "infer", "sgemm_kernel", "cv::resize", MARKUP}, names
    width = frame(page, "all")["w"]
    # Widths are shares of the on-CPU samples; the off-CPU-only stack adds none.
    for name, samples in [("main", 190), ("infer", 120), ("sgemm_kernel", 120),
                          ("cv::resize", 30), (MARKUP, 40)]:
        f = frame(page, name)
        assert f["value"] == samples, f
        assert abs(f["w"] - width * samples / BREACH_SAMPLES) < 1.0, (f, width)
    # The root at the bottom, each child a row above its parent.
    assert frame(page, "sgemm_kernel")["y"] < frame(page, "infer")["y"] < frame(page, "run")["y"]
    assert canvas(page)["painted"] > 20000
    # Colours by kind: native orange (red 225), python green, as edgemon-cli profile --svg.
    r, g, b, _ = page.execute(PIXEL, "[data-flame='cpu']", *spot(frame(page, "sgemm_kernel")))
    assert r == 225 and b < 80, (r, g, b)
    r, g, b, _ = page.execute(PIXEL, "[data-flame='cpu']", *spot(frame(page, "infer")))
    assert g > r and g > b, (r, g, b)
    # The markup in a frame's name stays text: no element was made of it.
    assert page.execute("return document.querySelectorAll('main img').length") == 0
    assert page.execute("return window.__emInjected === undefined")
    # No recording of the same breach is stored: no button to its timeline.
    assert page.execute("return document.querySelector('.device-head button.open-timeline')") \
        is None
    page.execute(MOUSE, "[data-flame='cpu']", "mousemove", *centre(frame(page, MARKUP)))
    tip = page.execute("const t = document.querySelector(\"[data-flame='cpu'] .flame-tip\");"
                       "return !t.hidden && t.textContent")
    assert tip and MARKUP in tip, tip
    assert errors(page) == []


def test_click_zooms_into_a_frame_and_reset_zooms_out(agg, page):
    open_breach(page, agg)
    before = canvas(page)
    all_w = frame(page, "all")["w"]
    page.execute(MOUSE, "[data-flame='cpu']", "click", *centre(frame(page, "infer")))
    wait_for(lambda: page.execute(
        "return document.querySelector(\"[data-flame='cpu']\").dataset.zoom") == "infer", 5,
        "the zoom into infer")
    names = {f["name"] for f in frames(page)}
    # infer and its one child fill the width; its siblings are gone, its ancestors stay.
    assert names == {"all", "main", "run", "infer", "sgemm_kernel"}, names
    assert abs(frame(page, "sgemm_kernel")["w"] - all_w) < 1.0
    after = canvas(page)
    assert after["sum"] != before["sum"], (before, after)
    page.click("button[data-reset='cpu']")
    assert page.execute("return document.querySelector(\"[data-flame='cpu']\").dataset.zoom") \
        == "all"
    assert {f["name"] for f in frames(page)} >= {"cv::resize", MARKUP}
    assert canvas(page)["sum"] == before["sum"]
    assert errors(page) == []


def test_search_highlights_the_function_and_says_its_share(agg, page):
    open_breach(page, agg)
    purple = (196, 64, 230)
    assert canvas(page, colours=[purple])["near"][0] == 0
    page.type("input[name='flame-search']", "sgemm")
    share = wait_for(lambda: page.execute(
        "return document.getElementById('flame-found').dataset.share"), 5, "the search's share")
    assert float(share) == pytest.approx(120 / BREACH_SAMPLES, abs=1e-4), share
    found = page.execute("return document.getElementById('flame-found').textContent")
    assert "1 frame" in found and f"{100 * 120 / BREACH_SAMPLES:.1f}%" in found, found
    assert canvas(page, colours=[purple])["near"][0] > 1000
    r, g, b, _ = page.execute(PIXEL, "[data-flame='cpu']", *spot(frame(page, "sgemm_kernel")))
    assert (r, g, b) == purple, (r, g, b)
    assert errors(page) == []


def test_hover_says_samples_and_share(agg, page):
    open_breach(page, agg)
    page.execute(MOUSE, "[data-flame='cpu']", "mousemove", *centre(frame(page, "cv::resize")))
    tip = page.execute("const t = document.querySelector(\"[data-flame='cpu'] .flame-tip\");"
                       "return !t.hidden && t.textContent")
    assert tip and "cv::resize" in tip and "30 samples" in tip, tip
    assert f"{100 * 30 / BREACH_SAMPLES:.1f}% of the graph" in tip, tip
    assert errors(page) == []


def test_stage_filter_keeps_that_stages_stacks(agg, page):
    open_breach(page, agg)
    page.execute("const s = document.querySelector(\"select[name='stage']\");"
                 "s.value = 'preprocess'; s.dispatchEvent(new Event('change'));")
    wait_for(lambda: {f["name"] for f in frames(page)} == {"all", "main", "run", "cv::resize"},
             5, "the preprocess stacks alone")
    # The shares are of the stage's samples now: cv::resize is all of them.
    assert abs(frame(page, "cv::resize")["w"] - frame(page, "all")["w"]) < 1.0
    # No off-CPU time in that stage: said, not drawn.
    assert page.execute("return document.querySelector(\"[data-flame='off']\").hidden")
    note = page.execute("return document.querySelector(\"[data-card='off'] .flame-empty\")"
                        ".textContent")
    assert "No off-CPU time" in note and "preprocess" in note, note
    assert errors(page) == []


def test_off_cpu_time_is_a_graph_apart(agg, page):
    open_breach(page, agg)
    off = {f["name"]: f for f in frames(page, "off")}
    assert set(off) == {"all", "main", "run", "infer", "futex_wait", "__schedule"}, off
    assert off["__schedule"]["value"] == 25_000_000
    assert "futex_wait" not in {f["name"] for f in frames(page)}
    assert canvas(page, "off")["painted"] > 5000
    page.execute(MOUSE, "[data-flame='off']", "mousemove", *centre(off["__schedule"]))
    tip = page.execute("const t = document.querySelector(\"[data-flame='off'] .flame-tip\");"
                       "return !t.hidden && t.textContent")
    assert tip and "25.0 ms off-CPU" in tip and "100.0% of the graph" in tip, tip
    assert errors(page) == []


def test_differential_view_against_the_previous_profile_of_the_stage(agg, page):
    open_breach(page, agg)
    # The previous profile of the same stage (infer), not the newer one of postprocess.
    assert page.execute("return document.querySelector(\"select[name='baseline']\").value") \
        == BASELINE
    page.execute("const s = document.querySelector(\"select[name='colour']\");"
                 "s.value = 'diff'; s.dispatchEvent(new Event('change'));")
    wait_for(lambda: page.execute(
        "return document.getElementById('flame-legend').dataset.mode") == "diff", 10,
        "the differential colours")
    legend = page.execute("return document.getElementById('flame-legend').textContent")
    assert BASELINE in legend, legend

    def rgb(name):
        return page.execute(PIXEL, "[data-flame='cpu']", *spot(frame(page, name)))[:3]
    # sgemm_kernel 60% -> 63.2% and the markup frame 10% -> 21.1%: grew, red, the larger change
    # deeper; cv::resize 30% -> 15.8%: shrank, blue, the largest change (14.2 points) drawn.
    grew, more, shrank = rgb("sgemm_kernel"), rgb(MARKUP), rgb("cv::resize")
    assert grew[0] == 255 and grew[1] == grew[2] and grew[1] > 150, grew
    assert more[0] == 255 and more[1] == more[2] and more[1] < grew[1], more
    assert shrank[2] == 255 and shrank[0] == shrank[1] == 40, shrank
    page.execute(MOUSE, "[data-flame='cpu']", "mousemove", *centre(frame(page, "cv::resize")))
    tip = page.execute("return document.querySelector(\"[data-flame='cpu'] .flame-tip\")"
                       ".textContent")
    assert "baseline 30.0%" in tip and "change -14.2 pts" in tip, tip
    # The baseline has no off-CPU time: nothing to compare that graph with, said so.
    note = page.execute("return document.querySelector(\"[data-card='off'] .flame-note\")"
                        ".textContent")
    assert "no off-CPU time" in note, note
    r, g, b, _ = page.execute(PIXEL, "[data-flame='off']", *spot(frame(page, "futex_wait", "off")))
    assert b == 215 and r < b, (r, g, b)  # a kernel frame's blue, not a change's colour
    assert errors(page) == []


@pytest.mark.skipif(not SHOTS, reason="EM_DASHBOARD_SHOTS is not set")
def test_screenshot_flame(agg, page):
    open_breach(page, agg)
    page.execute("const s = document.querySelector(\"select[name='colour']\");"
                 "s.value = 'diff'; s.dispatchEvent(new Event('change'));")
    wait_for(lambda: page.execute(
        "return document.getElementById('flame-legend').dataset.mode") == "diff", 10,
        "the differential colours")
    page.execute(MOUSE, "[data-flame='cpu']", "mousemove", *centre(frame(page, "cv::resize")))
    Path(SHOTS).mkdir(parents=True, exist_ok=True)
    (Path(SHOTS) / "dashboard-flame.png").write_bytes(page.screenshot())
    assert errors(page) == []
