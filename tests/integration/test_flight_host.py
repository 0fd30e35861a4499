"""Flight recordings on the host: edgemon-sim --flights publishes a synthetic recording on each
DEGRADED excursion (edgemon/v1/<device>/flight), a real edgemon-aggregator stores them in its
SQLite store and serves them (GET /api/devices/<id>/flights[/<key>]), and edgemon-cli flight
reads them back as a table, JSON or SVG.

Every expectation is computed here from the bytes the simulator published, decoded with cbor2
independently of the C codec: the recordings each device published, their CBOR byte for byte,
the slowest frames (spans sharing a frame id, total from first start to last end) with their
ids and durations, and the figures of the tick whose window holds a frame's end. Replays
(same device, session and number, historical or not) must be stored once; payloads that do not
decode must be counted and not stored; bad API parameters answer 400 naming the parameter."""

import functools
import json
import os
import re
import subprocess
import time
import xml.etree.ElementTree as ET
from collections import defaultdict

import cbor2
import pytest

import forensics
from conftest import broker_and_aggregator, free_port, mqtt_client, wait_for
from forensics import (Capture, by_device, check_refusals, check_replays, get_raw, key_of, metric,
                       simulate)
from test_flight import flight_agent, run_pipeline  # noqa: F401 (flight_agent: a fixture)

SIM = os.environ.get("EM_SIM")
CLI = os.environ.get("EM_CLI")
DEVICES = ["fl-0001", "fl-0002", "fl-0003"]
SVG = "{http://www.w3.org/2000/svg}"


def spans_of(m):
    """[(stage index, frame id, start ns, duration ns)] of a decoded recording (key 13)."""
    flat, out = m[13], []
    frame, start = 0, m[6]
    for i in range(0, len(flat), 4):
        stage, dframe, dstart, dur = flat[i:i + 4]
        frame += dframe
        start += dstart
        out.append((stage, frame, start, dur))
    return out


def ticks_of(m):
    """[(mono ns, {column: wire value})] of a decoded recording (key 12): counters carry their
    increase since the previous tick that carried them."""
    out, t = [], m[6]
    for dt, values in m[12]:
        t += dt
        out.append((t, values))
    return out


def measured(m):
    """Names of the columns (key 11) some tick has a number for: a counter needs two carried
    totals (its first carries no increase), any other kind one value."""
    out = []
    for c, (name, _, kind) in enumerate(m[11]):
        nums = [v[c] for _, v in ticks_of(m) if isinstance(v.get(c), (int, float))]
        if len(nums) >= (2 if kind == 1 else 1):
            out.append(name)
    return out


def slowest(m):
    """[(frame id, offset ns, total ns, end ns)] slowest first."""
    frames = defaultdict(list)
    for stage, frame, start, dur in spans_of(m):
        frames[frame].append((start, start + dur))
    rows = [(f, min(s for s, _ in v) - m[6], max(e for _, e in v) - min(s for s, _ in v),
             max(e for _, e in v)) for f, v in frames.items()]
    return sorted(rows, key=lambda r: (-r[2], r[0]))


def tick_at(m, t):
    """Index of the tick whose window (previous tick, tick] holds t, or None."""
    ticks = ticks_of(m)
    for i, (mono, _) in enumerate(ticks):
        if mono >= t:
            return i if i > 0 or mono - t < m[9] else None
    return None


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """(broker, aggregator, {device: [(cbor bytes, decoded map)]}) after a simulator run whose
    recordings the aggregator holds."""
    assert SIM and CLI, "EM_SIM and EM_CLI must name the binaries (run through ctest)"
    tmp = tmp_path_factory.mktemp("flight")
    with broker_and_aggregator(tmp) as (broker, agg):
        cap = Capture(broker.port, "flight")
        time.sleep(0.2)
        try:
            published = simulate(broker.port, 3, "fl", 5, "--flights")["flight"]
            wait_for(lambda: len(cap.got["flight"]) == published, 10,
                     "every recording at the subscriber")
            recordings = by_device(cap.got["flight"])
            assert set(recordings) == set(DEVICES), recordings.keys()

            def stored():
                return sum(len(json.loads(agg.get(f"/api/devices/{d}/flights")[1])
                                   .get("flights", [])) for d in DEVICES)
            wait_for(lambda: stored() == published, 10, "every recording in the aggregator")
            yield broker, agg, recordings
        finally:
            cap.stop()


api_list = functools.partial(forensics.api_list, kind="flights")
publish = functools.partial(forensics.publish, kind="flight")


def cli(*args, env=None, timeout=30):
    return subprocess.run([CLI, "flight", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_recordings_are_listed_per_device_newest_first(host):
    _, agg, pub = host
    for device, recs in pub.items():
        listed = api_list(agg, device)
        assert [e["key"] for e in listed] == [
            key_of(m) for _, m in sorted(recs, key=lambda r: r[1][2], reverse=True)]
        for e in listed:
            payload, m = next(r for r in recs if key_of(r[1]) == e["key"])
            assert (e["time_ns"], e["session"], e["number"]) == (m[2], m[3], m[4])
            assert e["cause"] == "escalation" and e["level"] == "DEGRADED"
            assert e["rule"] == m[5][3] and e["stage"] == m[5][4]
            assert (e["value"], e["bound"]) == (m[5][5], m[5][6])
            assert (e["ticks"], e["spans"]) == (len(m[12]), len(m[13]) // 4)
            assert e["bytes"] == len(payload) and e["historical"] is False
            assert e["url"] == f"/api/devices/{device}/flights/{e['key']}"
    one = api_list(agg, DEVICES[0], "?limit=1")
    assert len(one) == 1 and one[0]["key"] == api_list(agg, DEVICES[0])[0]["key"]
    newest = api_list(agg, DEVICES[0])[0]["time_ns"]
    assert api_list(agg, DEVICES[0], f"?since={newest + 1}") == []
    assert all(e["time_ns"] < newest for e in api_list(agg, DEVICES[0], f"?until={newest}"))


def test_cbor_is_what_was_published_and_json_matches_it(host):
    _, agg, pub = host
    for device, recs in pub.items():
        for payload, m in recs:
            status, ctype, body = get_raw(agg, f"/api/devices/{device}/flights/{key_of(m)}"
                                          "?format=cbor")
            assert (status, ctype, body) == (200, "application/cbor", payload)
            status, ctype, body = get_raw(agg, f"/api/devices/{device}/flights/{key_of(m)}")
            assert (status, ctype) == (200, "application/json")
            j = json.loads(body)
            assert (j["kind"], j["session"], j["number"]) == ("flight", m[3], m[4])
            assert j["stages"] == m[10]
            spans = spans_of(m)
            assert [(s["stage"], s["frame"], s["start_ns"], s["duration_ns"])
                    for s in j["spans"]] == [(m[10][a], b, c, d) for a, b, c, d in spans]
            assert [t["mono_ns"] for t in j["ticks"]] == [t for t, _ in ticks_of(m)]


def test_replays_are_stored_once_and_bad_payloads_counted_not_stored(host):
    broker, agg, pub = host
    device = DEVICES[1]
    payload, m = pub[device][0]
    bad_span = dict(m)
    bad_span[13] = [len(m[10]) + 5] + list(m[13][1:])  # a stage index past the table
    check_replays(broker, agg, device, payload, m, kind="flight", historical_key=15,
                  bad=[bad_span])


def big_recording(number, n_spans):
    """A recording of n_spans spans over 3 stages (one frame per 3 spans, 1 ms apart)."""
    spans, t0 = [], -5 * 10**9
    for i in range(n_spans):
        spans += [i % 3, 1 if i % 3 == 0 else 0, t0 if i == 0 else 1_000_000,
                  2_000_000 + (i * 7919) % 30_000_000]
    return {0: 1, 1: 5, 2: time.time_ns(), 3: 77, 4: number,
            5: {0: 1, 1: 0}, 6: 10**12, 7: 5 * 10**9, 8: 10**9, 9: 10**8,
            10: ["a", "b", "c"], 11: [["pmu.context-switches", "1", 1]],
            12: [[-5 * 10**9 + 10**8, {0: 10**6}]] + [[10**8, {0: 300}]] * 59, 13: spans}


def just_past_the_cap(number, cap=262144):
    """The smallest big_recording past cap bytes (bisection over its span count)."""
    lo, hi = 1, 40000
    while lo < hi:
        mid = (lo + hi) // 2
        if len(cbor2.dumps(big_recording(number, mid))) > cap:
            hi = mid
        else:
            lo = mid + 1
    return cbor2.dumps(big_recording(number, lo))


def test_largest_recording_round_trips_and_a_larger_one_is_refused(host):
    broker, agg, _ = host
    device = "fl-big"
    fits = cbor2.dumps(big_recording(0, 20000))
    assert 200_000 < len(fits) <= 262144
    # Past the flight cap by a few bytes: within the packet size the aggregator tells the broker
    # (cap + 1024), so it arrives and the aggregator refuses it. Far past it: the broker drops
    # it for this client (MQTT v5 maximum packet size) and the aggregator never sees it.
    too_big = just_past_the_cap(1)
    assert 262144 < len(too_big) < 262144 + 512
    far_too_big = cbor2.dumps(big_recording(2, 40000))
    assert len(far_too_big) > 262144 + 1024
    malformed = metric(agg, "edgemon_aggregator_malformed_total")
    publish(broker.port, device, far_too_big, too_big, fits)
    wait_for(lambda: agg.get(f"/api/devices/{device}/flights")[0] == 200 and
             api_list(agg, device), 10, "the large recording")
    assert [e["key"] for e in api_list(agg, device)] == ["77-0"]
    assert get_raw(agg, f"/api/devices/{device}/flights/77-0?format=cbor")[2] == fits
    assert metric(agg, "edgemon_aggregator_malformed_total") == malformed + 1
    r = cli("--aggregator", f"http://127.0.0.1:{agg.port}", "--device", device, "--top", "1")
    assert r.returncode == 0 and "of 6667 frames" in r.stdout, r.stdout + r.stderr


def test_api_refuses_bad_parameters_and_unknown_names(host):
    _, agg, pub = host
    device = DEVICES[0]
    key = key_of(pub[device][0][1])
    check_refusals(agg, device, key, kind="flights",
                   list_queries=[("?limit=0", "limit"), ("?limit=x", "limit"),
                                 ("?since=-1", "since"), ("?until=1e9", "until"),
                                 ("?since=5&until=5", "since"), ("?bogus=1", "bogus"),
                                 ("?limit=1&limit=2", "limit"),
                                 ("?since=99999999999999999999", "since")],
                   entry_queries=[("?format=xml", "format"), ("?x=1", "x"),
                                  ("?format=cbor&format=json", "format")])


def test_cli_table_names_the_slowest_frames_and_their_ticks(host):
    _, agg, pub = host
    device = DEVICES[2]
    _, m = max(pub[device], key=lambda r: r[1][2])
    r = cli("--aggregator", f"http://127.0.0.1:{agg.port}", "--device", device, "--top", "4")
    assert r.returncode == 0, r.stderr
    assert key_of(m) in r.stdout and "infer.p99" in r.stdout
    rows = re.findall(r"^ +(\d+) +([+-]\d+\.\d{3}) +(\d+\.\d{3}) ", r.stdout, re.M)
    expect = slowest(m)[:4]
    assert [(int(f), o, t) for f, o, t in rows] == [
        (f, f"{o / 1e6:+.3f}", f"{t / 1e6:.3f}") for f, o, t, _ in expect]
    ticks = ticks_of(m)
    tick_lines = re.findall(r"^ +tick ([+-]\d+\.\d{3}) ms: (.*)$", r.stdout, re.M)
    assert len(tick_lines) == 4
    csw = m[11].index(["pmu.context-switches", "1", 1])
    for (f, _, _, end), (at, figures) in zip(expect, tick_lines):
        i = tick_at(m, end)
        assert at == f"{(ticks[i][0] - m[6]) / 1e6:+.3f}"
        if i > 0 and csw in ticks[i][1]:
            assert f"pmu.context-switches +{ticks[i][1][csw]}," in figures


def test_cli_json_svg_at_and_file(host, tmp_path):
    _, agg, pub = host
    url = f"http://127.0.0.1:{agg.port}"
    device = DEVICES[1]
    r = cli("--device", device, "--json", env={"EDGEMON_AGGREGATOR": url})
    assert r.returncode == 0, r.stderr
    newest = api_list(agg, device)[0]["key"]
    assert r.stdout.rstrip("\n") == agg.get(f"/api/devices/{device}/flights/{newest}")[1]

    svg = tmp_path / "f.svg"
    r = cli("--aggregator", url, "--device", device, "--svg", str(svg))
    assert r.returncode == 0, r.stderr
    root = ET.parse(svg).getroot()
    _, m = next(x for x in pub[device] if key_of(x[1]) == newest)
    rects = [e for e in root.iter(f"{SVG}rect") if "span" in e.get("class", "").split()]
    assert len(rects) == len(m[13]) // 4
    assert any("over" in e.get("class") for e in rects)
    assert root.find(f".//{SVG}line[@id='trigger']") is not None
    assert not list(root.iter(f"{SVG}script"))

    # A recording two hours older than the rest: --at picks it by RFC 3339 time, the newest by
    # epoch seconds.
    older = dict(m)
    older[4], older[2] = 901, m[2] - 7200 * 10**9
    n = len(api_list(agg, device))
    publish(host[0].port, device, cbor2.dumps(older))
    wait_for(lambda: len(api_list(agg, device)) == n + 1, 10, "the older recording")
    old = min(api_list(agg, device), key=lambda e: e["time_ns"])
    assert old["number"] == 901
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(old["time_ns"] // 10**9 - 600))
    r = cli("--aggregator", url, "--device", device, "--at", when, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["number"] == old["number"], r.stderr
    r = cli("--aggregator", url, "--device", device, "--at", str(time.time() + 60), "--json")
    assert json.loads(r.stdout)["number"] == api_list(agg, device)[0]["number"]

    payload, m = pub[DEVICES[0]][0]
    f = tmp_path / "one.cbor"
    f.write_bytes(payload)
    dead = f"http://127.0.0.1:{free_port()}"
    r = cli("--file", str(f), "--top", "2", env={"EDGEMON_AGGREGATOR": dead})
    assert r.returncode == 0, r.stderr
    assert re.findall(r"^ +(\d+) +[+-]", r.stdout, re.M) == [str(x[0]) for x in slowest(m)[:2]]

    r = cli("--aggregator", url, "--device", DEVICES[0], "--list")
    assert r.returncode == 0 and all(e["key"] in r.stdout for e in api_list(agg, DEVICES[0]))


def test_cli_errors_have_their_exit_codes(host, tmp_path):
    _, agg, _ = host
    url = f"http://127.0.0.1:{agg.port}"
    r = cli("--aggregator", f"http://127.0.0.1:{free_port()}", "--device", DEVICES[0],
            "--timeout", "2")
    assert r.returncode == 3 and "cannot connect" in r.stderr, r.stderr
    for args in (["--aggregator", url], ["--device", "a", "--at", "yesterday"],
                 ["--device", "a", "--top", "0"], ["--file", "x", "--list"], ["--bogus"],
                 ["--device", "a", "--last", "--at", "0"], ["--aggregator", "ftp://x", "-d", "a"],
                 ["--device", "a/b"], ["--device", "a b"], ["--device", "a*"]):
        r = cli(*args)
        assert r.returncode == 2, (args, r.returncode, r.stderr)
    r = cli("--aggregator", url, "--device", "nobody")
    assert r.returncode == 1 and "no such device" in r.stderr
    bad = tmp_path / "bad.cbor"
    bad.write_bytes(b"\xa1\x00\x01")
    assert cli("--file", str(bad)).returncode == 4
    assert cli("--file", str(tmp_path / "missing.cbor")).returncode == 4


def test_tail_prints_a_line_per_recording_and_decode_reads_one(host, tmp_path):
    broker, agg, pub = host
    device = DEVICES[2]
    payload, m = pub[device][0]
    tail = subprocess.Popen([CLI, "tail", "--json", "--device", device, "--duration", "2",
                             "--broker", f"mqtt://127.0.0.1:{broker.port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.7)
    again = dict(m)
    again[4] = 950
    publish(broker.port, device, cbor2.dumps(again), b"\x00")
    out, err = tail.communicate(timeout=20)
    assert tail.returncode == 0, err
    lines = [json.loads(x) for x in out.splitlines()]
    flights = [x["flight"] for x in lines if "flight" in x]
    assert [(f["session"], f["number"], f["spans"], f["ticks"]) for f in flights] == [
        (m[3], 950, len(m[13]) // 4, len(m[12]))], out
    assert any(x.get("error") and x["topic"].endswith("/flight") for x in lines), out

    f = tmp_path / "rec.cbor"
    f.write_bytes(payload)
    r = subprocess.run([CLI, "decode", str(f)], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip("\n") == agg.get(f"/api/devices/{device}/flights/{key_of(m)}")[1]


def test_take_publishes_cmd_flight(host):
    broker, _, _ = host
    got = []
    c = mqtt_client(broker.port, client_id="flight-cmd-watch")
    c.on_message = lambda cl, u, msg: got.append((msg.topic, bytes(msg.payload)))
    c.subscribe("edgemon/v1/fl-0002/cmd/#", qos=1)
    time.sleep(0.2)
    r = subprocess.run([CLI, "flight", "--take", "--device", "fl-0002", "--broker",
                        f"mqtt://127.0.0.1:{broker.port}"], capture_output=True, text=True,
                       timeout=20)
    assert r.returncode == 0, r.stderr
    wait_for(lambda: got, 5, "cmd/flight")
    c.loop_stop()
    c.disconnect()
    topic, payload = got[0]
    m = cbor2.loads(payload)
    assert topic == "edgemon/v1/fl-0002/cmd/flight" and m[1] == 4 and m[4] == 2


def test_the_agents_recording_taken_from_the_cli_is_stored_and_shown(stack, flight_agent):
    """End to end with the real agent: `edgemon-cli flight --take` publishes cmd/flight, the
    agent records its pipeline's last seconds, the aggregator stores the recording as
    published, and the CLI's table names the frames computed here from its CBOR."""
    broker, agent, marker, _ = flight_agent(gap=0)
    agg = stack.aggregator(broker.port)
    url = f"http://127.0.0.1:{agg.port}"
    wait_for((stack.tmp / "run" / "spans.sock").exists, 5, "the span socket")
    proc = run_pipeline(stack, marker, [(400, False)])
    try:
        time.sleep(2.5)
        r = subprocess.run([CLI, "flight", "--take", "--device", agent.device, "--broker",
                            f"mqtt://127.0.0.1:{broker.port}"], capture_output=True, text=True,
                           timeout=20)
        assert r.returncode == 0, r.stderr
        listed = wait_for(lambda: agg.get(f"/api/devices/{agent.device}/flights")[0] == 200 and
                          json.loads(agg.get(f"/api/devices/{agent.device}/flights")[1])
                          ["flights"], 10, "the agent's recording in the aggregator")
    finally:
        proc.kill()
        proc.wait()
    assert len(listed) == 1 and listed[0]["cause"] == "command", listed
    _, ctype, payload = get_raw(agg, f"/api/devices/{agent.device}/flights/{listed[0]['key']}"
                                     "?format=cbor")
    m = cbor2.loads(payload)
    assert (m[3], m[4], len(payload)) == (listed[0]["session"], listed[0]["number"],
                                          listed[0]["bytes"])
    assert set(m[10]) == {"pre", "infer", "post"} and len(m[13]) // 4 > 300
    svg = stack.tmp / "agent.svg"
    r = cli("--aggregator", url, "--device", agent.device, "--top", "3", "--svg", str(svg))
    assert r.returncode == 0, r.stderr
    rows = re.findall(r"^ +(\d+) +([+-]\d+\.\d{3}) +(\d+\.\d{3}) ", r.stdout, re.M)
    assert [(int(f), o, t) for f, o, t in rows] == [
        (f, f"{o / 1e6:+.3f}", f"{t / 1e6:.3f}") for f, o, t, _ in slowest(m)[:3]], r.stdout

    # Only figures with a number are printed and drawn; the columns that never had one (the
    # hardware counters on a machine without them) are named once. Both kinds are present:
    # pmu.task-clock is a software event.
    names = [c[0] for c in m[11]]
    have = measured(m)
    missing = [n for n in names if n not in have]
    assert "pmu.task-clock" in have and "mem.rss" in have, have
    if missing:
        line = re.search(r"^not measured: (.*) \(no number in any tick", r.stdout, re.M)
        assert line and line.group(1).split(", ") == missing, r.stdout
    else:
        assert "not measured" not in r.stdout
    for figures in re.findall(r"^ +tick [+-]\d+\.\d{3} ms: (.*)$", r.stdout, re.M):
        shown = [f.split(" ")[0] for f in figures.split(", ")]
        assert shown and set(shown) <= set(have) and "null" not in figures, figures
    root = ET.parse(svg).getroot()
    assert len(list(root.iter(f"{SVG}polyline"))) == len(have)
    labels = [e.text for e in root.iter(f"{SVG}text") if e.get("class") == "label"]
    assert [n for n in names if n in labels] == have
    note = root.find(f".//{SVG}text[@id='not-measured']")
    assert (note.text.split(": ", 1)[1].split(", ") if note is not None else []) == missing
