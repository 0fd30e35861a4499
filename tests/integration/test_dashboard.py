"""The fleet dashboard (/ui/) in a real headless chromium (Debian's, through chromedriver and
webdriver.py), against a real edgemon-aggregator fed by edgemon-sim over a real mosquitto.

Two simulated fleets share the broker: "line", two devices whose run has finished (line-0002
through excursions that published flight recordings and stack profiles), and "sim", ten devices
publishing for the whole module. One line device is forced into DEGRADED by a
retained state message (CBOR written with Debian's python3-cbor2, as the interop tests do),
which the fleet view must show within seconds through its 2 s polling, without reloading the
page. The device view must draw every chart (pixels read back from each canvas), list a metric
the simulator never sends as absent, and the fleet latency view must merge every device. Every
test ends by checking that the page raised no error: window errors, unhandled rejections and
console.error are collected from before the page's first script, and chromedriver's browser log
must hold no SEVERE entry.

EM_DASHBOARD_SHOTS=DIR adds test_screenshots: after a minute of data it saves the fleet view and
the view of a device that went through a simulated excursion, at 1280x800, as
DIR/dashboard-fleet.png and DIR/dashboard-device.png (docs/ holds the committed ones).
"""

import json
import os
import shlex
import subprocess
import time
import urllib.request
import uuid
from datetime import datetime, timezone
from pathlib import Path

import cbor2
import pytest

import webdriver
from conftest import Aggregator, Broker, free_port, publish_once, terminate, wait_for

SIM = os.environ.get("EM_SIM")
CLI = os.environ.get("EM_CLI")
WHY_NOT = webdriver.available()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))

LIVE = [f"sim-{i:04d}" for i in range(1, 11)]
LINE = ["line-0001", "line-0002"]
STAGES = {"preprocess", "infer", "postprocess"}
FORCED = "line-0001"
FORCED_REASON = "infer p99 140 ms > 40.0 ms for 3 windows"
PROFILED = "line-0002"  # the line device whose simulated excursions publish stack profiles
SHOTS = os.environ.get("EM_DASHBOARD_SHOTS")

# Installed before every document: what the page raises lands in window.__emErrors.
COLLECT_ERRORS = """
(() => {
  const errors = [];
  window.__emErrors = errors;
  window.addEventListener("error", (e) => {
    errors.push("error: " + (e.message || (e.target && (e.target.src || e.target.href)) || e));
  }, true);
  window.addEventListener("unhandledrejection", (e) => {
    errors.push("unhandledrejection: " + (e.reason && e.reason.message || e.reason));
  });
  const original = console.error;
  console.error = function (...args) {
    errors.push("console.error: " + args.map(String).join(" "));
    return original.apply(console, args);
  };
})();
"""

# Per canvas: its size, the pixels that are not transparent and those within 40 of the
# colour of arguments[1] (r, g, b), the p50 series' stroke.
CANVAS_PIXELS = """
const [selector, rgb] = arguments;
return [...document.querySelectorAll(selector)].map((box) => {
  const c = box.querySelector("canvas");
  if (!c) return {chart: box.dataset.chart, canvas: false};
  const px = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let painted = 0, colour = 0;
  for (let i = 0; i < px.length; i += 4) {
    if (px[i + 3] === 0) continue;
    painted++;
    if (Math.abs(px[i] - rgb[0]) <= 40 && Math.abs(px[i + 1] - rgb[1]) <= 40 &&
        Math.abs(px[i + 2] - rgb[2]) <= 40 && px[i + 3] > 128) colour++;
  }
  return {chart: box.dataset.chart, canvas: true, width: c.width, height: c.height,
          painted, colour};
});
"""
P50_RGB = [0x2F, 0x6F, 0xDE]


def sim_args(broker, devices, prefix, duration, seed, *extra):
    return [SIM, "--devices", str(devices), "--rate", "2", "--duration", str(duration),
            "--qos", "1", "--seed", str(seed), "--prefix", prefix,
            "--broker", f"mqtt://127.0.0.1:{broker.port}", *extra]


def devices_with_stages(agg):
    status, body = agg.get("/api/devices")
    assert status == 200, body
    return {d["device"] for d in json.loads(body)["devices"] if d["stages"]}


class Dashboard:
    def __init__(self, agg, session, broker):
        self.agg = agg
        self.s = session
        self.broker = broker
        self.base = f"http://127.0.0.1:{agg.port}/ui/"

    def rows(self):
        """{device id: data-level} of the fleet table's rows."""
        return self.s.execute(
            "return Object.fromEntries([...document.querySelectorAll('#fleet-table tr.device')]"
            ".map((r) => [r.dataset.id, r.dataset.level]))")

    def errors(self):
        """What the page raised, and the SEVERE entries of the browser's log."""
        page = self.s.execute("return window.__emErrors || ['no error collector']")
        log = self.s.browser_log() or []
        return page + [e["message"] for e in log if e.get("level") == "SEVERE"]

    def fleet(self):
        status, body = self.agg.get("/api/fleet")
        assert status == 200, body
        return json.loads(body)["devices"]


class LiveSim:
    """edgemon-sim publishing in the background until stop() (SIGTERM: it says goodbye)."""

    def __init__(self, args):
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self):
        terminate(self.proc, 15)


@pytest.fixture(scope="module")
def dash(tmp_path_factory):
    assert SIM, "EM_SIM must name the edgemon-sim binary (run through ctest)"
    tmp = tmp_path_factory.mktemp("dashboard")
    started = []

    def keep(thing):
        started.append(thing)
        return thing

    try:
        broker = keep(Broker(tmp, free_port()).start())
        agg = keep(Aggregator(tmp, broker.port).start())
        # PROFILED alone goes through DEGRADED excursions, each publishing a flight recording and
        # a stack profile; FORCED never does (its level is the forced state's alone).
        line = subprocess.run(sim_args(broker, len(LINE), "line", 3, 7, "--flights", "--profiles",
                                       "--excursion-mean", "1e6",
                                       "--degrade", f"{LINE.index(PROFILED) + 1}:0.3"),
                              capture_output=True, timeout=60)
        assert line.returncode == 0, line.stderr.decode(errors="replace")
        assert b" 0 stack profiles published" not in line.stderr, line.stderr
        keep(LiveSim(sim_args(broker, len(LIVE), "sim", 600, 11)))
        wait_for(lambda: devices_with_stages(agg) >= set(LIVE + LINE), 30,
                 "every simulated device's spans in the aggregator")
        session = keep(webdriver.Driver(tmp / "chromedriver.log").start()).session(
            tmp / "profile")
        session.on_new_document(COLLECT_ERRORS)
        session.set_viewport(1280, 800)
        dashboard = Dashboard(agg, session, broker)
        dashboard.started = time.monotonic()
        yield dashboard
    finally:
        for thing in reversed(started):
            thing.stop()


def publish_state(port, device, level, prev_level, reason):
    """A retained state message for device, as its agent would publish it."""
    levels = ["NOMINAL", "WARN", "DEGRADED", "CRITICAL"]
    msg = {0: 1, 1: 2, 2: time.time_ns(), 3: 1, 4: levels.index(level),
           5: levels.index(prev_level), 6: time.monotonic_ns(), 7: "infer.p99", 8: "infer",
           9: 140e6, 10: 40e6, 11: reason}
    publish_once(port, f"edgemon/v1/{device}/state", cbor2.dumps(msg), retain=True)


def test_fleet_view_lists_every_simulated_device(dash):
    dash.s.get(dash.base)
    rows = wait_for(lambda: (r := dash.rows()) and set(r) == set(LIVE + LINE) and r, 15,
                    "a row for every simulated device")
    assert set(rows.values()) <= {"NOMINAL", "WARN", "DEGRADED", "CRITICAL"}, rows
    # The badge says the row's level, and the summary counts every device.
    badges = dash.s.execute(
        "return [...document.querySelectorAll('#fleet-table tr.device')]"
        ".map((r) => [r.dataset.level, r.querySelector('.badge').textContent])")
    assert all(level == text for level, text in badges), badges
    summary = dash.s.execute("return document.getElementById('summary').textContent")
    assert summary.startswith(f"{len(LIVE + LINE)} devices"), summary
    assert dash.errors() == []


def test_forced_degraded_turns_its_row_without_a_reload(dash):
    if dash.s.execute("return location.hash") not in ("", "#/"):
        dash.s.get(dash.base)
    wait_for(lambda: FORCED in dash.rows(), 15, f"the row of {FORCED}")
    assert dash.rows()[FORCED] != "DEGRADED"
    marker = uuid.uuid4().hex
    dash.s.execute("window.__emMarker = arguments[0]", marker)

    publish_state(dash.broker.port, FORCED, "DEGRADED", "NOMINAL", FORCED_REASON)
    wait_for(lambda: dash.rows().get(FORCED) == "DEGRADED", 8,
             f"{FORCED}'s row to turn DEGRADED")
    row = dash.s.execute(
        "const r = document.querySelector(`tr[data-id='${arguments[0]}']`);"
        "return {cls: r.className, badge: getComputedStyle(r.querySelector('.badge'))"
        ".backgroundColor, text: r.textContent, marker: window.__emMarker}", FORCED)
    assert row["marker"] == marker, "the page was reloaded"
    assert "level-DEGRADED" in row["cls"].split(), row
    assert row["badge"] == "rgb(253, 126, 20)", row  # orange
    # The row shows the change and its reason once the store has it (next polls).
    wait_for(lambda: FORCED_REASON in dash.s.execute(
        "return document.querySelector(`tr[data-id='${arguments[0]}']`).textContent", FORCED),
        8, "the forced change's reason in the row")
    assert dash.errors() == []


def test_level_filter_and_sorting(dash):
    dash.s.get(dash.base)
    wait_for(lambda: len(dash.rows()) == len(LIVE + LINE), 15, "every row")
    if dash.rows()[FORCED] != "DEGRADED":
        publish_state(dash.broker.port, FORCED, "DEGRADED", "NOMINAL", FORCED_REASON)
    dash.s.click("input[name='level'][value='NOMINAL']")
    rows = wait_for(lambda: (r := dash.rows()) and "NOMINAL" not in r.values() and r, 8,
                    "the NOMINAL rows filtered out")
    assert rows.get(FORCED) == "DEGRADED", rows
    dash.s.click("input[name='level'][value='NOMINAL']")
    wait_for(lambda: len(dash.rows()) == len(LIVE + LINE), 8, "every row back")

    def table():
        """[(id, level)] in the table's order, read at once."""
        return dash.s.execute("return [...document.querySelectorAll('#fleet-table tr.device')]"
                              ".map((r) => [r.dataset.id, r.dataset.level])")

    def order():
        return [i for i, _ in table()]
    assert order() == sorted(LIVE + LINE)
    dash.s.click("th[data-sort='id']")  # the sorted column again: reversed
    assert order() == sorted(LIVE + LINE, reverse=True)
    dash.s.click("th[data-sort='level']")  # a figure: highest first
    levels = [level for _, level in table()]
    rank = ["NOMINAL", "WARN", "DEGRADED", "CRITICAL"]
    assert [rank.index(x) for x in levels] == sorted((rank.index(x) for x in levels),
                                                     reverse=True), levels
    dash.s.click("th[data-sort='id']")
    assert order() == sorted(LIVE + LINE)
    assert dash.errors() == []


def test_device_view_draws_its_charts(dash):
    device = LIVE[0]
    if dash.s.execute("return location.hash") not in ("", "#/"):
        dash.s.get(dash.base)
    wait_for(lambda: device in dash.rows(), 15, f"the row of {device}")
    dash.s.click(f"tr[data-id='{device}'] a")
    assert dash.s.execute("return location.hash") == f"#/device/{device}"
    dash.s.click("button[data-range='5m']")  # the fleet is seconds old: the shortest range

    def drawn():
        charts = dash.s.execute(CANVAS_PIXELS, "[data-chart^='stage:']", P50_RGB)
        return len(charts) == len(STAGES) and all(
            c["canvas"] and c["colour"] > 20 for c in charts) and charts
    charts = wait_for(drawn, 15, "a drawn latency chart per stage")
    assert {c["chart"] for c in charts} == {f"stage:{s}" for s in STAGES}
    for c in charts:
        assert c["width"] > 0 and c["height"] > 0 and c["painted"] > 1000, c

    metrics = dash.s.execute(CANVAS_PIXELS, "[data-chart^='metric:']", P50_RGB)
    names = {c["chart"] for c in metrics}
    assert "metric:mem.rss" in names, names
    for c in metrics:
        assert c["canvas"] and c["width"] > 0 and c["height"] > 0 and c["colour"] > 5, c
    # The simulator's birth declares the cache-miss ratio unsupported (as on a VM) and its data
    # never carries it: shown as absent, never charted as zeros.
    assert "metric:pmu.cache_miss_ratio" not in names
    absent = dash.s.execute(
        "const c = document.querySelector(\"[data-metric='pmu.cache_miss_ratio']\");"
        "return c && c.classList.contains('absent') && c.textContent")
    assert absent and "absent" in absent, absent
    slope = dash.s.execute("return document.getElementById('rss-slope').textContent")
    assert "/s" in slope and "–" not in slope, slope
    assert dash.errors() == []


def test_device_view_lists_the_forced_change(dash):
    dash.s.get(dash.base + f"#/device/{FORCED}")
    text = wait_for(lambda: dash.s.execute(
        "const t = document.getElementById('timeline'); return t && t.textContent"), 15,
        "the level timeline")
    assert FORCED_REASON in text and "infer.p99" in text and "140 ms" in text, text
    assert dash.errors() == []


def test_device_view_lists_its_flight_recordings(dash):
    """A flight recording (edgemon/v1/<device>/flight) shows in the device view with a link to
    its JSON, which the aggregator answers."""
    device = LINE[1]
    now = time.time_ns()
    rec = {0: 1, 1: 5, 2: now, 3: 77, 4: 0,
           5: {0: 0, 1: 2, 2: 0, 3: "infer.p99", 4: "infer", 5: 50_000_000, 6: 40_000_000},
           6: 10**12, 7: 2 * 10**9, 8: 10**9, 9: 10**8, 10: ["infer"],
           11: [["mem.rss", "By", 0]], 12: [[-10**8, {0: 150_000_000}]],
           13: [0, 5, -10**6, 45_000_000]}
    publish_once(dash.broker.port, f"edgemon/v1/{device}/flight", cbor2.dumps(rec))
    dash.s.get(dash.base + f"#/device/{device}")
    href = wait_for(lambda: dash.s.execute(
        "const a = document.querySelector('#flights tr[data-key=\"77-0\"] a');"
        "return a && a.getAttribute('href')"), 15, "the recording in the device view")
    assert href == f"/api/devices/{device}/flights/77-0"
    assert "infer.p99" in dash.s.execute("return document.getElementById('flights').textContent")
    status, body = dash.agg.get(href)
    assert status == 200 and json.loads(body)["number"] == 0, body
    assert dash.errors() == []


def get_bytes(agg, path):
    """(status, bytes) of GET http://127.0.0.1:<port><path> (Aggregator.get decodes text)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{agg.port}{path}", timeout=5) as r:
        return r.status, r.read()


def test_device_view_lists_its_stack_profiles(dash, tmp_path):
    """The stack profiles edgemon-sim --profiles published for PROFILED show in its device view
    beside the flight recordings: one row per profile the API lists, its fields, links to its
    JSON, its CBOR and its breach's flight recording, all of which the aggregator answers, and
    an edgemon-cli command that draws this very profile."""
    device = PROFILED

    def listed():
        status, body = dash.agg.get(f"/api/devices/{device}/profiles?limit=20")
        assert status == 200, body
        return json.loads(body)["profiles"]

    def shown():
        return dash.s.execute(
            "return [...document.querySelectorAll('#profiles tr.profile')].map((r) => ({"
            " key: r.dataset.key, flight: r.dataset.flight || null,"
            " cells: [...r.cells].map((c) => c.textContent),"
            " links: [...r.querySelectorAll('a')].map((a) => [a.textContent,"
            " a.getAttribute('href')])}))")
    wait_for(listed, 15, f"{device}'s stack profiles in the aggregator")
    dash.s.get(dash.base + f"#/device/{device}")
    profiles, rows = wait_for(lambda: (r := shown()) and (p := listed()) and
                              [x["key"] for x in r] == [x["key"] for x in p] and (p, r), 15,
                              "a row per stack profile the API lists, in its order")
    status, body = dash.agg.get(f"/api/devices/{device}/flights?limit=5000")
    assert status == 200, body
    flights = {f["key"]: f for f in json.loads(body)["flights"]}
    linked = 0
    for p, row in zip(profiles, rows):  # newest first, as the API lists them
        cells = row["cells"]
        assert row["key"] == p["key"] and row["flight"] == p["flight"], (row, p)
        assert cells[1] == p["cause"] and cells[2] == p["level"], (cells, p)
        assert cells[3] == (p["rule"] or "–"), (cells, p)
        assert cells[4].split(",")[0] == str(p["samples"]) and p["samples"] > 0, (cells, p)
        assert cells[5].split(",")[0] == str(p["stacks"]) and p["stacks"] > 0, (cells, p)
        assert cells[6].endswith(f" at {p['hz']} Hz"), (cells, p)
        url = f"/api/devices/{device}/profiles/{p['key']}"
        want = [["JSON", url], ["CBOR", url + "?format=cbor"]]
        if p["flight"]:
            want.append([p["flight"], f"/api/devices/{device}/flights/{p['flight']}"])
            assert cells[8] == p["flight"]
        else:
            assert cells[8] == "none"
        assert row["links"] == want, (row, p)
        status, body = dash.agg.get(url)
        assert status == 200 and json.loads(body)["number"] == p["number"], body
        status, cbor = get_bytes(dash.agg, url + "?format=cbor")
        assert status == 200 and len(cbor) == p["bytes"], (status, len(cbor), p)
        if p["flight"]:
            linked += 1
            status, body = dash.agg.get(want[2][1])
            assert status == 200 and json.loads(body)["number"] == flights[p["flight"]]["number"]
            assert flights[p["flight"]]["profile"] == p["key"], (flights[p["flight"]], p)
        # --at the profile's time to the millisecond, UTC (RFC 3339), which picks it.
        cmd = shlex.split(cells[9])
        assert cmd[:4] == ["edgemon-cli", "profile", "--device", device], cells
        assert cmd[4] == "--at" and cmd[6:] == ["--svg", f"profile-{p['key']}.svg"], cells
        at = datetime.strptime(cmd[5], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
        at_ns = (int(at.timestamp()) * 10**6 + at.microsecond) * 1000
        assert len(cmd[5]) == 24 and -1000 < p["time_ns"] - at_ns < 10**6 + 1000, (cmd[5], p)
    assert linked > 0  # the simulator publishes a recording and a profile at each excursion

    # The newest row's command, run as written against this aggregator, draws that profile.
    cmd = shlex.split(rows[0]["cells"][9])
    assert cmd[0] == "edgemon-cli"
    env = {**os.environ, "EDGEMON_AGGREGATOR": f"http://127.0.0.1:{dash.agg.port}"}
    r = subprocess.run([CLI, *cmd[1:]], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    drawn = (tmp_path / cmd[-1]).read_text()
    assert "<svg" in drawn and f"{device} {profiles[0]['key']}" in drawn, drawn[:300]
    assert dash.errors() == []


def test_fleet_latency_merges_every_device_and_filters_by_name(dash):
    dash.s.get(dash.base + "#/latency")
    dash.s.click("button[data-range='5m']")

    def stages():
        return dash.s.execute(
            "return Object.fromEntries([...document.querySelectorAll('[data-stage]')].map((s) =>"
            " [s.dataset.stage, s.querySelectorAll('table.devices tbody tr').length]))")
    got = wait_for(lambda: (s := stages()) and set(s) == STAGES and s, 15,
                   "a section per stage")
    assert all(n == len(LIVE + LINE) for n in got.values()), got
    charts = dash.s.execute(CANVAS_PIXELS, "[data-chart^='latency:']", P50_RGB)
    # The fleet is seconds old: a series may be one point (a dot), not a line.
    assert len(charts) == len(STAGES) and all(c["colour"] > 5 for c in charts), charts

    dash.s.type("input[name='name']", "line-*")
    wait_for(lambda: (s := stages()) and all(n == len(LINE) for n in s.values()), 10,
             "the latency tables filtered to line-*")
    assert dash.errors() == []


def test_api_errors_show_in_the_page(dash):
    dash.s.get(dash.base + "#/device/no-such-device")
    text = wait_for(lambda: dash.s.execute(
        "const e = document.getElementById('error'); return !e.hidden && e.textContent"), 10,
        "the error line")
    assert "no such device" in text, text
    assert dash.s.execute("return window.__emErrors") == []
    # The browser logs the 404 itself; nothing else.
    log = [e["message"] for e in dash.s.browser_log() or [] if e.get("level") == "SEVERE"]
    assert all("404" in m for m in log), log
    dash.s.get("about:blank")  # stops the view's polling of the missing device
    dash.s.browser_log()


@pytest.mark.skipif(not SHOTS, reason="EM_DASHBOARD_SHOTS is not set")
def test_screenshots(dash):
    """The fleet view, and the device view of a live device that went through a simulated
    DEGRADED excursion (its band shaded), at 1280x800, after a minute of data."""
    changed = wait_for(lambda: [d["id"] for d in dash.fleet()
                                if d["id"] in LIVE and d["last_change"]], 180,
                       "a simulated level excursion")
    if not any(d["id"] == FORCED and d["level"] == "DEGRADED" for d in dash.fleet()):
        publish_state(dash.broker.port, FORCED, "DEGRADED", "NOMINAL", FORCED_REASON)
    time.sleep(max(0, 60 - time.monotonic() + dash.started))
    Path(SHOTS).mkdir(parents=True, exist_ok=True)
    dash.s.get(dash.base)
    wait_for(lambda: dash.rows().get(FORCED) == "DEGRADED", 15, "the fleet table")
    time.sleep(1)
    (Path(SHOTS) / "dashboard-fleet.png").write_bytes(dash.s.screenshot())
    dash.s.get(dash.base + f"#/device/{changed[0]}")
    dash.s.click("button[data-range='5m']")
    wait_for(lambda: len(dash.s.execute(CANVAS_PIXELS, "[data-chart]", P50_RGB)) > 10, 15,
             "the device's charts")
    time.sleep(1)
    (Path(SHOTS) / "dashboard-device.png").write_bytes(dash.s.screenshot())
    assert dash.errors() == []
