"""The dashboard API's queries of the store cannot starve /healthz and /metrics: a real mosquitto,
a real edgemon-aggregator serving a 7-day store of 64 devices (1-hour rollups of 3 stages, written
with sqlite3 in the layout of host/aggregator/store/SCHEMA.md, histograms drawn as
tests/bench/bench_dashboard_api.py draws them), and 50 clients, in two other processes, looping
over 7-day fleet latencies and 7-day device histories on kept-alive connections (a refused one
retries four times sooner than Retry-After asks) while this process times /healthz (a new
connection each time, as a load balancer does) and /metrics.

With one serving thread that ran every query, /healthz waited behind the queue of queries
(10 s at the median here). The API lane runs the queries on --api-workers threads with as many
more waiting and answers the rest 503 with Retry-After at once, so: /healthz and /metrics must
answer within 100 ms at the median; past the lane's room the clients must get 503 with a
Retry-After, as many as edgemon_aggregator_http_api_refused_total counts; the lane must never
hold more than its room; and every answer served under the load must be byte for byte the answer
given with no load, itself checked against the rows of the store (counts summed from
stage_rollups). A worker's answer goes out as soon as it is ready, not at the serving thread's
next tick."""

import contextlib
import http.client
import json
import multiprocessing
import random
import re
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter

from conftest import AGGREGATOR, ROOT, Aggregator, Broker, free_port, wait_for

sys.path.insert(0, str(ROOT / "tests" / "bench"))
from bench_dashboard_api import SCALE, STAGE_NS, histogram  # noqa: E402

S = 10**9
HOUR = 3600 * S
DEVICES = 64  # The fewest whose fleet latency a worker reads on two connections (history.c).
DAYS = 7
CLIENTS = 50
PROCESSES = 2
LOAD_S = 8.0
HISTORY_DEVICES = 8  # Devices whose histories the clients ask for, in turn.
PREFIX = "lane-"


def build_store(db, now_ns):
    """Adds DEVICES devices and DAYS days of 1-hour rollups of every stage of STAGE_NS up to the
    last whole hour to the store the aggregator created (the rollup watermarks there too);
    returns [from_ns, to_ns) of those days."""
    rng = random.Random(30)
    to_ns = now_ns // HOUR * HOUR
    from_ns = to_ns - DAYS * 24 * HOUR
    con = sqlite3.connect(db)
    try:
        con.execute("PRAGMA synchronous=OFF")
        names = [f"{PREFIX}{i:04d}" for i in range(1, DEVICES + 1)]
        con.executemany("INSERT INTO devices(name) VALUES (?)", [(n,) for n in names])
        con.executemany("INSERT OR IGNORE INTO stages(name) VALUES (?)",
                        [(s,) for s in STAGE_NS])
        devs = [r[0] for r in con.execute(
            "SELECT id FROM devices WHERE name LIKE ? ORDER BY name", (PREFIX + "%",))]
        stages = dict(con.execute("SELECT name, id FROM stages"))
        pools = {name: [histogram(rng, 36000 * rng.randint(1, 3), ns * rng.uniform(0.7, 1.6))
                        for _ in range(16)] for name, ns in STAGE_NS.items()}
        rows = ((3600, d, stages[name], t, *rng.choice(pools[name]))
                for t in range(from_ns, to_ns, HOUR) for d in devs for name in STAGE_NS)
        con.executemany(
            "INSERT INTO stage_rollups(step_s, device, stage, time_ns, count, sum_ns, min_ns, "
            f"max_ns, buckets, zero_count, scale) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, {SCALE})",
            rows)
        con.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                        [("rollup_1m_ns", to_ns), ("rollup_1h_ns", to_ns)])
        con.commit()
    finally:
        con.close()
    return from_ns, to_ns


def stored_counts(db, from_ns, to_ns):
    """{(device name, stage name): count} of the 1-hour rollups in [from_ns, to_ns)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {(d, s): c for d, s, c in con.execute(
            "SELECT d.name, s.name, SUM(r.count) FROM stage_rollups r "
            "JOIN devices d ON d.id = r.device JOIN stages s ON s.id = r.stage "
            "WHERE r.step_s = 3600 AND r.time_ns >= ? AND r.time_ns < ? GROUP BY 1, 2",
            (from_ns, to_ns))}
    finally:
        con.close()


def get(port, path, timeout=30):
    """(status, headers, body bytes, seconds) of one GET on a new connection."""
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        return r.status, dict(r.getheaders()), body, time.perf_counter() - t0
    finally:
        c.close()


def metric(text, name):
    m = re.search(rf"^{name} (\d+)$", text, re.M)
    assert m, f"{name} not in /metrics"
    return int(m.group(1))


def client(port, paths, want, until, out):
    """Loops over paths on one kept-alive connection until `until` (time.time()); adds what it
    got to out: status counts, and the paths of wrong answers."""
    got = Counter()
    conn = None
    i = 0
    while time.time() < until:
        path = paths[i % len(paths)]
        i += 1
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", path)
            r = conn.getresponse()
            body = r.read()
        except (OSError, http.client.HTTPException) as e:
            got[f"error {type(e).__name__}"] += 1
            conn = None
            continue
        got[r.status] += 1
        if r.status == 200:
            kind = "latency" if path.startswith("/api/latency") else "history"
            got[f"right {kind}" if body == want[path] else f"wrong {path}"] += 1
        elif r.status == 503:
            retry = r.getheader("Retry-After", "")
            error = json.loads(body).get("error", "")
            if error == "query took too long":  # Past the query's own deadline (history.h).
                got["deadline"] += 1
            else:
                got["busy" if retry.isdigit() and int(retry) >= 1 else
                    f"503 without Retry-After: {error}"] += 1
            time.sleep(0.25)  # A client in a hurry: four times sooner than Retry-After asks.
        if r.getheader("Connection", "").lower() == "close":
            conn.close()
            conn = None
    out.update(got)


def load_process(port, plan, want, until, q):
    """Runs one client thread per entry of plan (its paths) and puts the sum of their counts
    on q."""
    total = Counter()
    threads = [threading.Thread(target=client, args=(port, paths, want, until, total))
               for paths in plan]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    q.put(dict(total))


def test_health_and_metrics_stay_fast_under_50_clients_of_expensive_queries(tmp_path):
    with contextlib.ExitStack() as running:
        broker = Broker(tmp_path, free_port()).start()
        running.callback(broker.stop)
        # A first run creates the store's schema; the days of history are written while it
        # is stopped, as an aggregator would have left them (retention 0 keeps them all).
        agg = Aggregator(tmp_path, broker.port, extra_args=["--retention", "0"]).start()
        assert agg.stop() == 0, agg.log_text()[-3000:]
        agg.log_path.rename(tmp_path / "agg-first.log")  # The next run's port is in a new log.
        from_ns, to_ns = build_store(agg.db, time.time_ns())
        agg = Aggregator(tmp_path, broker.port, extra_args=["--retention", "0"]).start()
        running.callback(agg.stop)

        # The answers with no load, checked against the rows.
        counts = stored_counts(agg.db, from_ns, to_ns)
        assert len(counts) == DEVICES * len(STAGE_NS)
        rng = f"from={from_ns}&to={to_ns}"
        latency = f"/api/latency?{rng}&name={PREFIX}*"
        histories = [f"/api/devices/{PREFIX}{i:04d}/history?{rng}&points=200"
                     for i in range(1, HISTORY_DEVICES + 1)]
        want, took = {}, {}
        for path in [latency, *histories]:
            for _ in range(3):  # A machine short of cores may take past the 2 s deadline.
                status, _, body, took[path] = get(agg.port, path)
                if status != 503:
                    break
            assert status == 200, body[:300]
            want[path] = body
        # A worker's answer is sent as soon as it is ready, not at the serving thread's next
        # tick (250 ms): a history of one device takes a few ms.
        assert statistics.median(took[p] for p in histories) < 0.15, took
        fleet = json.loads(want[latency])
        assert fleet["source"] == "1h" and fleet["devices_matched"] == DEVICES
        for s in fleet["stages"]:
            assert s["fleet"]["count"] == sum(c for (_, st), c in counts.items()
                                              if st == s["stage"])
            assert {d["id"]: d["count"] for d in s["devices"]} == {
                d: c for (d, st), c in counts.items() if st == s["stage"]}
        for path in histories:
            h = json.loads(want[path])
            assert h["source"] == "1h"
            assert {s["stage"]: sum(c for c in s["count"] if c) for s in h["stages"]} == {
                st: c for (d, st), c in counts.items() if d == h["device"]}

        # 50 clients in two processes, half on the fleet latency, half on device histories.
        plan = [[latency] if i % 2 == 0 else histories[i // 2 % HISTORY_DEVICES:] +
                histories[:i // 2 % HISTORY_DEVICES] for i in range(CLIENTS)]
        ctx = multiprocessing.get_context("fork")
        q = ctx.Queue()
        until = time.time() + LOAD_S
        procs = [ctx.Process(target=load_process,
                             args=(agg.port, plan[k::PROCESSES], want, until, q))
                 for k in range(PROCESSES)]
        for p in procs:
            p.start()
        running.callback(lambda: [p.kill() for p in procs if p.is_alive()])
        time.sleep(0.5)  # Let the clients fill the lane.
        health, scrapes = [], []
        while time.time() < until - 0.2:
            status, _, body, took = get(agg.port, "/healthz")
            health.append((status, body, took))
            if len(health) % 5 == 0:
                status, _, body, took = get(agg.port, "/metrics")
                scrapes.append((status, took, body.decode()))
            time.sleep(0.02)
        got = Counter()
        for _ in procs:
            got.update(q.get(timeout=60))
        for p in procs:
            p.join(30)

        med = statistics.median(t for _, _, t in health)
        print(f"/healthz: {len(health)} probes, median {med * 1000:.2f} ms, max "
              f"{max(t for _, _, t in health) * 1000:.1f} ms; /metrics: {len(scrapes)} scrapes, "
              f"median {statistics.median(t for _, t, _ in scrapes) * 1000:.2f} ms; {dict(got)}")
        assert med < 0.1, (f"/healthz took {med * 1000:.0f} ms at the median over "
                           f"{len(health)} probes under the load ({dict(got)})")
        assert all(s == 200 and b.startswith(b"ok") for s, b, _ in health), health[:5]
        assert scrapes and all(s == 200 for s, _, _ in scrapes), [s[:2] for s in scrapes]
        med_scrape = statistics.median(t for _, t, _ in scrapes)
        assert med_scrape < 0.1, f"/metrics took {med_scrape * 1000:.0f} ms at the median"

        # Served answers are right; past the lane's room, 503 with Retry-After, counted. (On a
        # machine short of cores a query may also run past its 2 s deadline: a 503 too, the
        # one the API always gave, without Retry-After.)
        assert not [k for k in got if str(k).startswith(("wrong", "error", "503 without"))], got
        assert set(got) <= {200, 503, "right latency", "right history", "busy", "deadline"}, got
        assert got["right latency"] > 0 and got["right history"] > 0, got
        assert got["right latency"] + got["right history"] == got[200] and got["busy"] > 0, got
        assert got["busy"] + got["deadline"] == got[503], got
        status, _, body, _ = get(agg.port, "/metrics")
        text = body.decode()
        assert metric(text, "edgemon_aggregator_http_api_refused_total") == got["busy"]
        room = 2 * metric(text, "edgemon_aggregator_http_api_workers")
        in_flight = [metric(b, "edgemon_aggregator_http_api_in_flight") for _, _, b in scrapes]
        assert max(in_flight) <= room, (in_flight, room)
        wait_for(lambda: metric(get(agg.port, "/metrics")[2].decode(),
                                "edgemon_aggregator_http_api_in_flight") == 0, 10,
                 "the lane to empty")
        assert agg.stop() == 0, agg.log_text()[-3000:]


def test_api_workers_out_of_range_are_refused():
    for bad in ("0", "65", "many"):
        r = subprocess.run([AGGREGATOR, "--check", "--api-workers", bad], capture_output=True,
                           text=True, timeout=10)
        assert r.returncode == 2 and f"--api_workers '{bad}' wants 1 to 64" in r.stderr, r.stderr
