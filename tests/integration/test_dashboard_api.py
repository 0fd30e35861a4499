"""The dashboard's JSON API of edgemon-aggregator (/api/fleet, /api/devices/<id>/history,
/api/latency) against a real mosquitto, a real aggregator and its SQLite store, fed by
edgemon-sim (one device six times slower than the rest).

The exact answers are computed here from the raw rows in SQLite: every stage window's bucket
blob decoded and merged the way SCHEMA.md describes (every window at the smallest scale, counts
added per index), then the quantile taken as host/lib/histo.c takes it (nearest rank, log-linear
inside the bucket, clamped to [min, max]). The API's percentiles must equal those, per history
point and for the fleet: an average of per-window percentiles, a point holding the wrong
windows, or a device left out of the fleet would not. Bad parameters must get 400 with a JSON
message naming the parameter; an unknown device 404."""

import contextlib
import json
import math
import sqlite3
import struct
import time
import urllib.parse
from collections import defaultdict

import pytest

from conftest import Aggregator, Broker, free_port, wait_for
from test_aggregator_native import DEVICES, SLOW, STAGES, counts, run_sim

LEVELS = {"NOMINAL", "WARN", "DEGRADED", "CRITICAL", None}


class Merged:
    """Windows merged exactly: what em_histo does with em_histo_add_stage."""

    def __init__(self):
        self.windows = []

    def add(self, count, mn, mx, scale, zero, blob):
        self.windows.append((count, mn, mx, scale, zero,
                             [(i, c) for i, c in struct.iter_unpack("<iQ", blob)]))

    @property
    def count(self):
        return sum(w[0] for w in self.windows)

    def quantile(self, q):
        scale = min(w[3] for w in self.windows)
        buckets = defaultdict(int)
        for _, _, _, s, _, bs in self.windows:
            for i, c in bs:
                buckets[i >> (s - scale)] += c
        n = self.count
        zero = sum(w[4] for w in self.windows)
        lo = min(w[1] for w in self.windows)
        hi = max(w[2] for w in self.windows)
        r = q * n
        if not r > 1.0:
            rank = 1
        elif r >= n:
            rank = n
        else:
            whole = math.floor(r)
            rank = int(whole) if r - whole <= r * 2.0 ** -50 else int(whole) + 1
        seen = zero
        if seen >= rank:
            return float(max(lo, 0))
        for i in sorted(buckets):
            c = buckets[i]
            if seen + c >= rank:
                frac = ((rank - seen) - 0.5) / c
                v = 2.0 ** math.ldexp(i + frac, -scale)
                return float(min(max(v, lo), hi))
            seen += c
        return float(hi)


def raw_windows(db):
    """[(device name, stage name, time_ns, count, min, max, scale, zero, blob)] of the store."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(
            "SELECT d.name, s.name, w.time_ns, w.count, w.min_ns, w.max_ns, w.scale, "
            "w.zero_count, w.buckets FROM stage_windows w JOIN devices d ON d.id = w.device "
            "JOIN stages s ON s.id = w.stage").fetchall()
    finally:
        con.close()


def get_json(agg, path):
    status, body = agg.get(path, timeout=10)
    return status, json.loads(body)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """(aggregator, spans): a simulator run fully ingested and committed."""
    tmp = tmp_path_factory.mktemp("dashboard")
    with contextlib.ExitStack() as running:
        broker = Broker(tmp, free_port()).start()
        running.callback(broker.stop)
        agg = Aggregator(tmp, broker.port).start()
        running.callback(agg.stop)
        spans = run_sim(tmp, broker)
        want = {k: len(v) for k, v in spans.items()}
        wait_for(lambda: counts(agg) == want, 60, "every published span in the aggregator")

        def stored():
            got = defaultdict(int)
            for d, s, _, c, *_ in raw_windows(agg.db):
                got[(d, s)] += c
            return dict(got) == want
        wait_for(stored, 30, "every span's window committed to SQLite")
        yield agg, spans
        assert agg.stop() == 0, agg.log_text()[-3000:]


def test_fleet_lists_every_device_and_the_slow_one_is_worst(fleet):
    agg, spans = fleet
    status, body = get_json(agg, "/api/fleet")
    assert status == 200, body
    assert body["total"] == DEVICES and body["truncated"] is False
    assert abs(body["now_ns"] - time.time_ns()) < 60e9
    ids = [d["id"] for d in body["devices"]]
    assert ids == sorted(ids) == [f"sim-{i:04d}" for i in range(1, DEVICES + 1)]
    for d in body["devices"]:
        assert d["level"] in LEVELS and d["online"] in (True, False, None)
        assert isinstance(d["last_seen_ns"], int) and d["board"] and d["agent_version"]
        w = d["worst_stage"]
        assert w["stage"] in STAGES and w["p99_ns"] > 0
        assert (w["budget_ns"] is None) == (w["ratio"] is None)
        assert d["last_change"] is None or d["last_change"]["level"] in LEVELS
    worst = max(body["devices"], key=lambda d: d["worst_stage"]["p99_ns"])
    assert worst["id"] == f"sim-{SLOW[0]:04d}"
    # Filters and the limit.
    status, body = get_json(agg, "/api/fleet?name=sim-000%5B12%5D&limit=1")
    assert status == 200 and body["total"] == 2 and body["truncated"] is True
    assert [d["id"] for d in body["devices"]] == ["sim-0001"]
    status, body = get_json(agg, "/api/fleet?level=nominal,warn,degraded,critical")
    assert status == 200 and body["total"] == sum(
        1 for d in get_json(agg, "/api/fleet")[1]["devices"] if d["level"])


def test_history_points_are_exact_merges_of_the_raw_windows(fleet):
    agg, spans = fleet
    rows = raw_windows(agg.db)
    for device in ("sim-0001", f"sim-{SLOW[0]:04d}"):
        status, h = get_json(agg, f"/api/devices/{device}/history?range=15m&points=300")
        assert status == 200, h
        assert h["device"] == device and h["source"] == "raw"
        step = h["step_ns"]
        assert h["to_ns"] - h["from_ns"] == 15 * 60 * 10**9 and step == 5 * 10**9
        assert {s["stage"] for s in h["stages"]} == set(STAGES)
        for s in h["stages"]:
            n = len(s["t"])
            assert n <= 300 and all(len(s[k]) == n for k in ("count", "p50_ns", "p99_ns",
                                                             "max_ns"))
            assert sum(s["count"]) == len(spans[(device, s["stage"])])
            per_point = defaultdict(Merged)
            for d, st, t, c, mn, mx, sc, z, blob in rows:
                if d == device and st == s["stage"]:
                    per_point[t // step * step].add(c, mn, mx, sc, z, blob)
            for i, t in enumerate(s["t"]):
                m = per_point.get(t)
                if m is None:
                    assert s["count"][i] == 0 and s["p99_ns"][i] is None
                    continue
                assert s["count"][i] == m.count
                assert s["p50_ns"][i] == pytest.approx(m.quantile(0.5), rel=1e-9)
                assert s["p99_ns"][i] == pytest.approx(m.quantile(0.99), rel=1e-9)
                assert s["max_ns"][i] == max(w[2] for w in m.windows)
        names = {m["name"] for m in h["metrics"]}
        assert "mem.rss" in names and len(names) <= 64
        rss = next(m for m in h["metrics"] if m["name"] == "mem.rss")
        assert any(v is not None and v >= 64e6 for v in rss["mean"])
        assert all(a is None or b >= a for a, b in zip(rss["mean"], rss["max"]))
        assert h["rss_slope_bytes_per_s"] is None or isinstance(h["rss_slope_bytes_per_s"],
                                                                (int, float))
        assert h["level_at_from"] in LEVELS and h["levels_truncated"] is False
        assert all(c["level"] in LEVELS for c in h["levels"])


def test_latency_fleet_percentiles_equal_the_merge_of_every_device(fleet):
    agg, spans = fleet
    status, body = get_json(agg, "/api/latency?range=15m")
    assert status == 200, body
    assert body["devices_matched"] == DEVICES and body["truncated"] is False
    assert body["data_to_ns"] == body["to_ns"]  # a few devices: the raw rows past the rollups
    rows = raw_windows(agg.db)
    slow = f"sim-{SLOW[0]:04d}"
    assert {s["stage"] for s in body["stages"]} == set(STAGES)
    for s in body["stages"]:
        m = Merged()
        for d, st, t, c, mn, mx, sc, z, blob in rows:
            if st == s["stage"]:
                m.add(c, mn, mx, sc, z, blob)
        f = s["fleet"]
        assert f["count"] == m.count == sum(len(v) for (d, st), v in spans.items()
                                            if st == s["stage"])
        for key, q in (("p50_ns", 0.5), ("p90_ns", 0.9), ("p99_ns", 0.99), ("p999_ns", 0.999)):
            assert f[key] == pytest.approx(m.quantile(q), rel=1e-9), (s["stage"], key)
        assert f["max_ns"] == max(w[2] for w in m.windows)
        assert len(s["series"]["t"]) <= 300 and len(s["series"]["p99_ns"]) == len(
            s["series"]["t"])
        devs = {d["id"]: d for d in s["devices"]}
        assert len(devs) == DEVICES and sum(d["count"] for d in devs.values()) == f["count"]
        assert max(devs.values(), key=lambda d: d["p99_ns"])["id"] == slow
    # Filters: a glob, a stage, a limit that lists fewer than it merges.
    status, body = get_json(agg, "/api/latency?range=15m&name=sim-000%5B12%5D&stage=infer")
    assert status == 200 and body["devices_matched"] == 2
    assert [s["stage"] for s in body["stages"]] == ["infer"]
    assert {d["id"] for d in body["stages"][0]["devices"]} == {"sim-0001", "sim-0002"}
    status, body = get_json(agg, "/api/latency?range=15m&limit=1&stage=infer")
    assert status == 200 and body["truncated"] is True and body["devices_matched"] == DEVICES
    infer = body["stages"][0]
    assert len(infer["devices"]) == 1 and infer["fleet"]["count"] == sum(
        len(v) for (d, st), v in spans.items() if st == "infer")
    status, body = get_json(agg, "/api/latency?range=15m&stage=nosuch")
    assert status == 200 and body["stages"] == []


@pytest.mark.parametrize("path,param", [
    ("/api/latency?range=8d", "range"),
    ("/api/latency?range=30s", "range"),
    ("/api/latency?range=1x", "range"),
    ("/api/devices/sim-0001/history?from=2000&to=1000", "from"),
    ("/api/devices/sim-0001/history?from=0&to=700000000000000", "to"),
    ("/api/devices/sim-0001/history?from=1000", "to"),
    ("/api/devices/sim-0001/history?range=1h&from=1&to=2", "range"),
    ("/api/devices/sim-0001/history?points=0", "points"),
    ("/api/devices/sim-0001/history?points=99999", "points"),
    ("/api/devices/sim-0001/history?points=12x", "points"),
    ("/api/devices/sim-0001/history?points=-5", "points"),
    ("/api/devices/sim-0001/history?from=1e9&to=2e9", "from"),
    ("/api/devices/sim-0001/history?from=99999999999999999999&to=1", "from"),
    ("/api/fleet?limit=0", "limit"),
    ("/api/fleet?limit=5001", "limit"),
    ("/api/fleet?level=BOGUS", "level"),
    ("/api/fleet?level=WARN,", "level"),
    ("/api/fleet?bogus=1", "bogus"),
    ("/api/fleet?limit=1&limit=2", "limit"),
    ("/api/fleet?name=" + "x" * 200, "name"),
    ("/api/fleet?name", "name"),
    ("/api/fleet?name=%zz", "name"),
    ("/api/latency?stage=" + "s" * 40, "stage"),
    ("/api/latency?points=10", "points"),
    ("/api/devices/sim-0001/history?limit=5", "limit"),
    ("/api/fleet?" + "&".join(f"p{i}=1" for i in range(40)), "parameter"),
])
def test_bad_parameters_get_400_naming_the_parameter(fleet, path, param):
    agg, _ = fleet
    status, body = get_json(agg, path)
    assert status == 400, (path, body)
    assert set(body) == {"error"} and param in body["error"], (path, body)


def test_unknown_device_is_404(fleet):
    agg, _ = fleet
    for dev in ("sim-9999", urllib.parse.quote("a/b", safe=""), "%00", "x" * 100):
        status, body = get_json(agg, f"/api/devices/{dev}/history?range=1h")
        assert status == 404 and body == {"error": "no such device"}, (dev, body)
    # The aggregator is still serving.
    assert agg.get("/api/fleet")[0] == 200


def rollup_watermark(db):
    """meta rollup_1m_ns of the store, or None before the first rollup run (or before v5)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'rollup_1m_ns'").fetchone()
        return int(row[0]) if row else None
    finally:
        con.close()


def test_minute_rollups_answer_as_the_raw_rows_do(fleet):
    """Once the aggregator's maintenance (every 60 s) has rolled the simulator's minutes, a
    10-minute range at 10 points is answered from the 1-minute rollups, and every point, the
    fleet percentiles and the per-device figures equal the merge of the raw windows."""
    agg, spans = fleet
    rows = raw_windows(agg.db)
    last = max(r[2] for r in rows)
    minute = 60 * 10**9
    to = (last // minute + 1) * minute
    frm = to - 10 * minute
    wait_for(lambda: (rollup_watermark(agg.db) or 0) >= to, 150,
             "the maintenance to roll up the simulator's minutes")
    status, h = get_json(agg, f"/api/devices/sim-0001/history?from={frm}&to={to}&points=10")
    assert status == 200, h
    assert h["source"] == "1m" and h["step_ns"] == minute
    for s in h["stages"]:
        per_minute = defaultdict(Merged)
        for d, st, t, c, mn, mx, sc, z, blob in rows:
            if d == "sim-0001" and st == s["stage"]:
                per_minute[t // minute * minute].add(c, mn, mx, sc, z, blob)
        assert sum(s["count"]) == len(spans[("sim-0001", s["stage"])])
        for i, t in enumerate(s["t"]):
            m = per_minute.get(t)
            assert s["count"][i] == (m.count if m else 0)
            if m:
                assert s["p50_ns"][i] == pytest.approx(m.quantile(0.5), rel=1e-9)
                assert s["p99_ns"][i] == pytest.approx(m.quantile(0.99), rel=1e-9)
                assert s["max_ns"][i] == max(w[2] for w in m.windows)
    con = sqlite3.connect(f"file:{agg.db}?mode=ro", uri=True)
    raw_rss = con.execute(
        "SELECT s.time_ns, s.value FROM samples s JOIN devices d ON d.id = s.device JOIN metrics m"
        " ON m.id = s.metric WHERE d.name = 'sim-0001' AND m.name = 'mem.rss'").fetchall()
    con.close()
    by_minute = defaultdict(list)
    for t, v in raw_rss:
        by_minute[t // minute * minute].append(v)
    rss = next(m for m in h["metrics"] if m["name"] == "mem.rss")
    assert by_minute and all(
        (rss["mean"][i] is None) == (t not in by_minute) for i, t in enumerate(rss["t"]))
    for i, t in enumerate(rss["t"]):
        if t in by_minute:
            assert rss["mean"][i] == pytest.approx(sum(by_minute[t]) / len(by_minute[t]),
                                                   rel=1e-9)
            assert rss["max"][i] == max(by_minute[t])
    status, body = get_json(agg, f"/api/latency?from={frm}&to={to}")
    assert status == 200 and body["source"] == "1m", body
    for s in body["stages"]:
        m = Merged()
        per_device = defaultdict(Merged)
        for d, st, t, c, mn, mx, sc, z, blob in rows:
            if st == s["stage"]:
                m.add(c, mn, mx, sc, z, blob)
                per_device[d].add(c, mn, mx, sc, z, blob)
        assert s["fleet"]["count"] == m.count
        for key, q in (("p50_ns", 0.5), ("p99_ns", 0.99), ("p999_ns", 0.999)):
            assert s["fleet"][key] == pytest.approx(m.quantile(q), rel=1e-9), (s["stage"], key)
        for d in s["devices"]:
            assert d["count"] == per_device[d["id"]].count
            assert d["p99_ns"] == pytest.approx(per_device[d["id"]].quantile(0.99), rel=1e-9)
