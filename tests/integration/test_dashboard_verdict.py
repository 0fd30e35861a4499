"""The breach's verdict (why a stage got slow: state key 15, flight key 16) through the host side:
edgemon-sim's simulated escalations carry one in their state message and flight recording, a
real edgemon-aggregator stores it with the level change (level_changes.verdict) and the
recording (its CBOR, and the top cause in the list's columns), its API answers it, and the
dashboard shows it in a real headless chromium (webdriver.py), against a real mosquitto.

The verdict of a level change comes back through the store's JSON column, the recording's
through its CBOR decoded at the request: the simulator gives an excursion's state and recording
the same verdict, so the two must be equal. A verdict encoded here with python3-cbor2 (not
edgemon's encoder) must come back with proto's names, and the fleet lists each device's last
change with its verdict's top cause only. A state message whose level is its previous level
and names no model (published here as an agent does at start, CBOR through python3-cbor2) is
the level announced at start: the API lists it as it came, the page says "agent started" in the
device's timeline and in the fleet's row of a device that announced nothing else.
A 503 with Retry-After is provoked inside the page (its fetch answers one history request so,
as the API's full lane would): the page must ask again after the given second and show no
error."""

import json
import os
import subprocess
import time

import cbor2
import pytest

import webdriver
from conftest import Aggregator, Broker, free_port, publish_once, wait_for
from test_dashboard import COLLECT_ERRORS

SIM = os.environ.get("EM_SIM")
WHY_NOT = webdriver.available()
DEVICE = "vd-0001"
STARTED = "vd-start"  # a device whose agent only announced its level at start
FORCED = "vd-forced"  # a device whose one change is an escalation with the verdict below
# FORCED's verdict as CBOR keys (proto/edgemon.cddl, "verdict"), and as the API must name it.
FORCED_VERDICT = {0: "infer", 1: "p99", 2: 26_000_000, 3: 61_200_000, 4: 12,
                  5: [{0: 4, 1: 0.7, 2: {"iowait_ms_per_frame": 12.5, "read_mib_per_s": 80}},
                      {0: 7, 1: 0.3, 2: {"excess_ms": 5.0}}]}
FORCED_JSON = {"stage": "infer", "statistic": "p99", "baseline_ns": 26_000_000,
               "breach_ns": 61_200_000, "nominal_windows": 12,
               "causes": [{"cause": "io", "share": 0.7,
                           "evidence": {"iowait_ms_per_frame": 12.5, "read_mib_per_s": 80}},
                          {"cause": "unexplained", "share": 0.3, "evidence": {"excess_ms": 5.0}}]}
CAUSES = {"cpu_contention", "cpu_throttling", "frequency_cap", "memory_pressure", "io",
          "waiting", "more_work", "unexplained"}

# Installed before every document after test_dashboard's error collector (window.__emErrors):
# with ?busy503 in the page's URL, its first history request is answered 503 with
# Retry-After: 1 (window.__em503 keeps when each history request was made).
BUSY_503 = """
(() => {
  if (!new URLSearchParams(location.search).has("busy503")) return;
  const asked = [];
  window.__em503 = asked;
  const realFetch = window.fetch.bind(window);
  window.fetch = (url, opts) => {
    if (String(url).includes("/history")) {
      asked.push(performance.now());
      if (asked.length === 1) {
        return Promise.resolve(new Response('{"error":"busy"}', {
          status: 503, headers: {"Retry-After": "1", "Content-Type": "application/json"}}));
      }
    }
    return realFetch(url, opts);
  };
})();
"""


def publish_state(port, device, msg):
    publish_once(port, f"edgemon/v1/{device}/state", cbor2.dumps(msg))


def publish_start(port, device):
    """The state an agent publishes at start: its level (NOMINAL), the same as key 5, no key 14."""
    publish_state(port, device, {0: 1, 1: 2, 2: time.time_ns() - 60 * 10**9, 3: 99, 4: 0, 5: 0,
                                 6: time.monotonic_ns()})


def publish_escalation(port, device):
    """NOMINAL -> DEGRADED on infer.p99 with FORCED_VERDICT (key 15)."""
    publish_state(port, device, {0: 1, 1: 2, 2: time.time_ns() - 30 * 10**9, 3: 98, 4: 2, 5: 0,
                                 6: time.monotonic_ns(), 7: "infer.p99", 8: "infer",
                                 9: 61_200_000, 10: 40_000_000, 15: FORCED_VERDICT})


def get_json(agg, path):
    status, body = agg.get(path)
    assert status == 200, (path, status, body)
    return json.loads(body)


def history(agg):
    return get_json(agg, f"/api/devices/{DEVICE}/history?range=15m&points=60")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    assert SIM, "EM_SIM must name the edgemon-sim binary (run through ctest)"
    tmp = tmp_path_factory.mktemp("verdict")
    started = []
    try:
        broker = Broker(tmp, free_port()).start()
        started.append(broker)
        agg = Aggregator(tmp, broker.port).start()
        started.append(agg)
        publish_start(broker.port, DEVICE)
        publish_start(broker.port, STARTED)
        publish_escalation(broker.port, FORCED)
        sim = subprocess.run(
            [SIM, "--devices", "1", "--rate", "2", "--duration", "6", "--qos", "1", "--seed", "5",
             "--prefix", "vd", "--broker", f"mqtt://127.0.0.1:{broker.port}", "--flights",
             "--excursion-mean", "1e6", "--degrade", "1:0.3"],
            capture_output=True, timeout=60)
        assert sim.returncode == 0, sim.stderr.decode(errors="replace")
        wait_for(lambda: (h := history(agg)) and any(c["verdict"] for c in h["levels"]) and
                 get_json(agg, f"/api/devices/{DEVICE}/flights")["flights"], 20,
                 "the simulated escalations and recordings in the store")
        yield broker, agg
    finally:
        for thing in reversed(started):
            thing.stop()


def test_history_lists_each_escalation_with_its_verdict(stack):
    _, agg = stack
    h = history(agg)
    ups = [c for c in h["levels"] if c["level"] == "DEGRADED"]
    assert ups, h["levels"]
    for c in ups:
        v = c["verdict"]
        assert v and v["stage"] == c["stage"] == "infer" and v["statistic"] == "p99", c
        assert v["breach_ns"] > v["baseline_ns"] > 0 and v["nominal_windows"] == 12, v
        shares = [x["share"] for x in v["causes"]]
        assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 1.0 + 1e-9, v
        assert {x["cause"] for x in v["causes"]} <= CAUSES, v
        assert all(x["evidence"] for x in v["causes"]), v
    # A recovery carries none; the start is listed as it came, without one.
    assert all(c["verdict"] is None for c in h["levels"] if c["level"] == "NOMINAL")
    starts = [c for c in h["levels"] if c["level"] == c["prev_level"]]
    assert len(starts) == 1 and starts[0]["level"] == "NOMINAL" and starts[0]["rule"] is None
    # The latest breach: the newest change with a verdict.
    assert h["latest_verdict"] == ups[-1], (h["latest_verdict"], ups[-1])


def test_flight_list_names_the_top_cause_of_the_recordings_verdict(stack):
    _, agg = stack
    h = history(agg)
    by_time = {c["time_ns"]: c["verdict"] for c in h["levels"] if c["verdict"]}
    flights = get_json(agg, f"/api/devices/{DEVICE}/flights")["flights"]
    assert flights
    for f in flights:
        entry = get_json(agg, f["url"])
        v = entry["verdict"]  # proto's printer, from the CBOR as published
        assert f["top_cause"] == v["causes"][0]["cause"], (f, v)
        assert f["top_share"] == v["causes"][0]["share"], (f, v)
        # The same excursion's state message carried the same verdict, stored as JSON text.
        assert by_time.get(f["time_ns"]) == v, (f["time_ns"], sorted(by_time))


@pytest.fixture(scope="module")
def page(stack, tmp_path_factory):
    if WHY_NOT is not None:
        pytest.skip(str(WHY_NOT))
    tmp = tmp_path_factory.mktemp("verdict-page")
    driver = webdriver.Driver(tmp / "chromedriver.log").start()
    try:
        session = driver.session(tmp / "profile")
        session.on_new_document(COLLECT_ERRORS)
        session.on_new_document(BUSY_503)
        session.set_viewport(1280, 800)
        yield session
    finally:
        driver.stop()


def errors(session):
    got = session.execute("return window.__emErrors || ['no error collector']")
    log = session.browser_log() or []
    return got + [e["message"] for e in log if e.get("level") == "SEVERE"]


def open_device(session, agg, search=""):
    session.get(f"http://127.0.0.1:{agg.port}/ui/{search}#/device/{DEVICE}")
    return wait_for(lambda: session.execute(
        "const t = document.getElementById('timeline'); return t && t.textContent"), 15,
        "the level timeline")


def test_device_view_explains_each_escalation_and_the_latest_on_top(stack, page):
    _, agg = stack
    h = history(agg)
    open_device(page, agg)
    rows = wait_for(lambda: page.execute(
        "return [...document.querySelectorAll('#timeline tr.verdict-row')].map((r) => "
        "[...r.querySelectorAll('li.cause')].map((c) => [c.dataset.cause, c.textContent]))"),
        15, "a verdict under each escalation")
    ups = [c for c in h["levels"] if c["verdict"]]
    assert len(rows) == len(ups), (rows, ups)
    for causes, change in zip(rows, ups):
        shown = [x for x in change["verdict"]["causes"] if x["share"] > 0][:3]
        assert [c for c, _ in causes] == [x["cause"] for x in shown], (causes, shown)
        for (_, text), x in zip(causes, shown):
            assert f"{round(x['share'] * 100)}%" in text, (text, x)
            assert next(iter(x["evidence"])) in text, (text, x)  # its first figure's name
    top = page.execute(
        "const v = document.getElementById('latest-verdict');"
        "return v && [v.textContent, v.querySelector('li.cause').dataset.cause]")
    latest = h["latest_verdict"]["verdict"]
    assert top and top[1] == latest["causes"][0]["cause"], (top, latest)
    assert "Latest breach" in top[0] and "infer p99" in top[0], top
    # The recordings' list has the cause column: each recording's top cause and share.
    cells = page.execute("return [...document.querySelectorAll('#flights td.top-cause')]"
                         ".map((td) => td.textContent)")
    flights = get_json(agg, f"/api/devices/{DEVICE}/flights?limit=20")["flights"]
    assert cells == [f"{f['top_cause']} {round(f['top_share'] * 100)}%" for f in flights], cells
    assert errors(page) == []


def test_agent_start_is_no_nominal_to_nominal_change(stack, page):
    _, agg = stack
    text = open_device(page, agg)
    start = page.execute("const r = document.querySelector('#timeline tr.start');"
                         "return r && r.textContent")
    assert start and "agent started (NOMINAL)" in start, start
    assert "NOMINAL → NOMINAL" not in text, text
    assert errors(page) == []


def test_fleet_names_the_last_changes_top_cause(stack):
    _, agg = stack
    h = history(agg)
    devices = {d["id"]: d for d in get_json(agg, "/api/fleet")["devices"]}
    last = devices[DEVICE]["last_change"]
    assert last["time_ns"] == h["levels"][-1]["time_ns"], (last, h["levels"][-1])
    v = h["levels"][-1]["verdict"]
    want = {"cause": v["causes"][0]["cause"], "share": v["causes"][0]["share"]} if v else None
    assert last["top_cause"] == want and "verdict" not in last, last
    assert devices[STARTED]["last_change"]["top_cause"] is None
    assert devices[FORCED]["last_change"]["top_cause"] == {"cause": "io", "share": 0.7}


def test_a_verdict_encoded_elsewhere_comes_back_named(stack):
    """A state's verdict encoded here (python3-cbor2, not edgemon's encoder) is stored and
    answered with proto's names: cause code 4 is "io"."""
    _, agg = stack
    h = get_json(agg, f"/api/devices/{FORCED}/history?range=15m&points=60")
    assert [c["verdict"] for c in h["levels"]] == [FORCED_JSON], h["levels"]
    assert h["latest_verdict"]["verdict"] == FORCED_JSON


def test_fleet_row_of_a_started_agent_says_so(stack, page):
    _, agg = stack
    page.get(f"http://127.0.0.1:{agg.port}/ui/#/")
    text = wait_for(lambda: page.execute(
        "const r = document.querySelector(`tr[data-id='${arguments[0]}'] td.change`);"
        "return r && r.textContent", STARTED), 15, f"the last change in the row of {STARTED}")
    assert "agent started (NOMINAL)" in text and "→" not in text, text
    forced = page.execute(
        "const r = document.querySelector(`tr[data-id='${arguments[0]}'] td.change`);"
        "return r && r.textContent", FORCED)
    assert "NOMINAL → DEGRADED" in forced and "cause: io 70%" in forced, forced
    assert errors(page) == []


def test_history_answered_503_with_retry_after_is_asked_again(stack, page):
    _, agg = stack
    open_device(page, agg, "?busy503")
    asked = page.execute("return window.__em503")
    assert len(asked) >= 2, asked
    # Asked again after Retry-After's second, not at the view's next poll (15 s for 1h).
    assert 950 <= asked[1] - asked[0] < 5000, asked
    assert page.execute("return document.getElementById('error').hidden"), page.execute(
        "return document.getElementById('error').textContent")
    assert errors(page) == []
