#!/usr/bin/env python3
"""bench_dashboard_api.py - latency of the dashboard's JSON API on a 7-day store of a fleet.

Builds the store the aggregator would hold after a week of --devices devices x 3 stages at
10 Hz, in the formats of host/aggregator/store/SCHEMA.md: a first aggregator run fed by
edgemon-sim creates the schema and the devices, stages and metrics rows; then, with sqlite3,
1-hour rollups (stage_rollups, data_rollups) for the 7 days up to the hour watermark, 1-minute
rollups from there to the minute watermark (70 s before now, as the maintenance leaves it; for
the device whose history is fetched, sim-0001, minute rollups over the whole week) and
raw stage_windows and data rows at 10 Hz for the rest, the watermarks in meta. Bucket blobs are
drawn from a pool of valid histograms at scale 6 (tens of buckets a window, more a rollup).
Then a second aggregator serves the store while edgemon-sim keeps the fleet live (1 Hz), and
each endpoint is fetched --fetches times, the endpoints interleaved; prints the median and p99
of the whole GET and the body size.

    bench_dashboard_api.py [--build DIR] [--devices N] [--fetches N] [--page-size BYTES]

--page-size makes the store's empty file with that SQLite page size first (e.g. 4096, the size
of stores created before the aggregator chose 16 KiB pages); without it the aggregator chooses.
"""

import argparse
import json
import math
import os
import random
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_aggregator import Aggregator, Broker, wait_for  # noqa: E402

S = 10**9
MINUTE = 60 * S
HOUR = 3600 * S
SCALE = 6
STAGE_NS = {"preprocess": 400e3, "infer": 2.5e6, "postprocess": 150e3}


def histogram(rng, spans, center_ns):
    """(count, sum_ns, min_ns, max_ns, blob) of `spans` spans around center_ns at SCALE."""
    center = int(round(math.log2(center_ns) * 2 ** SCALE))
    width = max(4, min(120, int(spans ** 0.5) * 3))
    counts = {}
    for _ in range(min(spans, 400)):
        i = center + int(rng.gauss(0, width / 4))
        counts[i] = counts.get(i, 0) + 1
    # Scale the drawn shape up to `spans` (each bucket at least 1).
    drawn = sum(counts.values())
    buckets = sorted((i, max(1, c * spans // drawn)) for i, c in counts.items())
    count = sum(c for _, c in buckets)
    lo = 2 ** (buckets[0][0] / 2 ** SCALE)
    hi = 2 ** ((buckets[-1][0] + 1) / 2 ** SCALE)
    total = sum(c * 2 ** ((i + 0.5) / 2 ** SCALE) for i, c in buckets)
    blob = b"".join(struct.pack("<iQ", i, c) for i, c in buckets)
    return count, int(total), int(lo) + 1, int(hi), blob


def synthesize(db, devices, now, rng):
    """Fills db (schema and dictionaries already made by the aggregator); returns what it wrote."""
    con = sqlite3.connect(db)
    con.execute("PRAGMA synchronous=OFF")
    dev_ids = [r[0] for r in con.execute("SELECT id FROM devices ORDER BY name")][:devices]
    stages = dict(con.execute("SELECT name, id FROM stages"))
    metrics = [r[0] for r in con.execute("SELECT id FROM metrics ORDER BY id")][:8]
    wm_1m = (now - 70 * S) // MINUTE * MINUTE
    wm_1h = wm_1m // HOUR * HOUR
    start = wm_1h - 7 * 24 * HOUR
    pools = {}
    for step, spans in (("raw", 1), ("1m", 600), ("1h", 36000)):
        for name, ns in STAGE_NS.items():
            pools[(step, name)] = [histogram(rng, spans * rng.randint(1, 3), ns * rng.uniform(0.7,
                                                                                             1.6))
                                   for _ in range(32)]
    written = {"stage_rollups": 0, "data_rollups": 0, "stage_windows": 0, "data": 0}

    def rollup_rows(step_s, t0, t1, pool_key, devs=dev_ids):
        for t in range(t0, t1, step_s * S):
            for d in devs:
                for name, sid in stages.items():
                    c, sm, mn, mx, blob = rng.choice(pools[(pool_key, name)])
                    yield (step_s, d, sid, t, c, sm, mn, mx, SCALE, 0, blob)

    def data_rollup_rows(step_s, t0, t1, n, devs=dev_ids):
        for t in range(t0, t1, step_s * S):
            for d in devs:
                mean = {str(m): 64e6 + rng.random() * 1e6 for m in metrics}
                mx = {k: v * 1.01 for k, v in mean.items()}
                yield (step_s, d, t, n, json.dumps(mean), json.dumps(mx),
                       json.dumps({k: n for k in mean}))

    put_stage = ("INSERT OR REPLACE INTO stage_rollups(step_s, device, stage, time_ns, count, "
                 "sum_ns, min_ns, max_ns, scale, zero_count, buckets) VALUES "
                 "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
    put_data = ("INSERT OR REPLACE INTO data_rollups(step_s, device, time_ns, n, mean, max, counts)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)")
    for step_s, t0, t1, key, n in ((3600, start, wm_1h, "1h", 36000),
                                   (60, wm_1h, wm_1m, "1m", 600)):
        cur = con.executemany(put_stage, rollup_rows(step_s, t0, t1, key))
        written["stage_rollups"] += cur.rowcount
        cur = con.executemany(put_data, data_rollup_rows(step_s, t0, t1, n))
        written["data_rollups"] += cur.rowcount
    # Minute rollups under the hours too, for the device whose history is asked (the store
    # keeps them for every device; the history of one device reads only its own).
    cur = con.executemany(put_stage, rollup_rows(60, start, wm_1h, "1m", dev_ids[:1]))
    written["stage_rollups"] += cur.rowcount
    cur = con.executemany(put_data, data_rollup_rows(60, start, wm_1h, 600, dev_ids[:1]))
    written["data_rollups"] += cur.rowcount

    def raw_windows():
        for t in range(wm_1m, now, S // 10):
            for d in dev_ids:
                for name, sid in stages.items():
                    c, sm, mn, mx, blob = rng.choice(pools[("raw", name)])
                    q = [mn, mn, mx, mx]
                    yield (d, t, sid, S // 10, c, sm, mn, mx, *q, SCALE, 0, blob)

    def raw_data():
        for t in range(wm_1m, now, S // 10):
            for d in dev_ids:
                yield (d, t, json.dumps({str(m): 64e6 + rng.random() * 1e6 for m in metrics}))

    cur = con.executemany(
        "INSERT INTO stage_windows(device, time_ns, stage, window_ns, count, sum_ns, min_ns, "
        "max_ns, p50_ns, p90_ns, p99_ns, p999_ns, scale, zero_count, buckets) VALUES "
        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", raw_windows())
    written["stage_windows"] = cur.rowcount
    cur = con.executemany("INSERT INTO data(device, time_ns, vals) VALUES (?, ?, ?)", raw_data())
    written["data"] = cur.rowcount
    con.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                    [("rollup_1m_ns", wm_1m), ("rollup_1h_ns", wm_1h)])
    con.commit()
    con.close()
    return written


def fetch(url):
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            body = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        body = e.read()
        status = e.code
    return time.perf_counter() - t0, status, body


def options():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag, kind, default, text in (
            ("--build", str, "build/bench", "build directory"),
            ("--devices", int, 1000, "simulated devices"),
            ("--fetches", int, 30, "GETs per endpoint"),
            ("--mosquitto", str, "/usr/sbin/mosquitto", "broker binary"),
            ("--keep", str, None, "copy the synthesized store to this path"),
            ("--page-size", int, None, "create the store with this SQLite page size")):
        ap.add_argument(flag, type=kind, default=default, help=f"{text} (default {default})")
    return ap.parse_args()


def main():
    args = options()
    bins = {name: Path(args.build) / sub for name, sub in (
        ("sim", "host/sim/edgemon-sim"), ("aggregator", "host/aggregator/edgemon-aggregator"))}
    missing = [str(b) for b in bins.values() if not os.access(b, os.X_OK)]
    if missing:
        sys.exit(f"bench_dashboard_api: missing (build them): {', '.join(missing)}")
    sim_bin, agg_bin = bins["sim"], bins["aggregator"]
    rng = random.Random(7)
    with tempfile.TemporaryDirectory(prefix="em-bench-dashboard-") as tmpdir:
        tmp = Path(tmpdir)
        broker = Broker(args.mosquitto, tmp, 20)
        sim_args = [str(sim_bin), "--broker", f"mqtt://127.0.0.1:{broker.port}", "--devices",
                    str(args.devices), "--rate", "1", "--qos", "1"]
        agg = None
        live = None
        try:
            if args.page_size:  # An empty file with only its page size: the store's schema
                pre = sqlite3.connect(str(tmp / "agg.db"))  # is created at that size.
                pre.execute(f"PRAGMA page_size = {args.page_size}")
                pre.execute("VACUUM")
                pre.close()
            agg = Aggregator(str(agg_bin), broker.port, tmp)
            subprocess.run([*sim_args, "--duration", "3"], check=True, stderr=subprocess.DEVNULL)
            time.sleep(1)
            agg.stop()
            t0 = time.monotonic()
            written = synthesize(str(tmp / "agg.db"), args.devices, time.time_ns(), rng)
            built_s = time.monotonic() - t0
            db_bytes = os.path.getsize(tmp / "agg.db")
            con = sqlite3.connect(str(tmp / "agg.db"))
            page_bytes = con.execute("PRAGMA page_size").fetchone()[0]
            con.close()
            if args.keep:
                src = sqlite3.connect(str(tmp / "agg.db"))
                dst = sqlite3.connect(args.keep)
                src.backup(dst)
                dst.close()
                src.close()
            agg = Aggregator(str(agg_bin), broker.port, tmp)
            live = subprocess.Popen([*sim_args, "--duration", "600"], stderr=subprocess.DEVNULL)
            base = agg.url.replace("/metrics", "")

            def whole_fleet():
                _, status, body = fetch(base + "/api/fleet")
                return status == 200 and json.loads(body)["total"] >= args.devices

            wait_for(whole_fleet, 60, "every device in the aggregator's registry")
            paths = ["/api/latency?range=7d", "/api/devices/sim-0001/history?range=7d",
                     "/api/fleet", "/api/latency?range=1h",
                     "/api/devices/sim-0001/history?range=1h"]
            times = {p: [] for p in paths}
            info = {p: (0, "-") for p in paths}
            statuses = {p: {} for p in paths}
            for _ in range(args.fetches):
                for p in paths:
                    s, status, body = fetch(base + p)
                    times[p].append(s * 1000)
                    statuses[p][status] = statuses[p].get(status, 0) + 1
                    if status == 200:
                        info[p] = (len(body), json.loads(body).get("source", "registry"))
        finally:
            if live:
                live.terminate()
                live.wait()
            if agg:
                agg.stop()
            broker.stop()
    print(f"{os.uname().nodename}, {os.cpu_count()} CPUs, {args.devices} devices x 3 stages, "
          f"{page_bytes // 1024} KiB pages{'' if args.page_size else ' (as the aggregator made them)'}, "
          f"7-day store of {db_bytes / 2**20:.0f} MiB built in {built_s:.0f} s "
          f"({', '.join(f'{k} {v:,}' for k, v in written.items())} rows), "
          f"{args.fetches} GETs per endpoint, interleaved\n")
    print("| GET | answers | source | body bytes | median ms | p99 ms |")
    print("|---|---|---|---:|---:|---:|")
    for p in paths:
        t = sorted(times[p])
        p99 = t[min(len(t) - 1, int(0.99 * len(t)))]
        answers = ", ".join(f"{n} x {code}" for code, n in sorted(statuses[p].items()))
        print(f"| `{p}` | {answers} | {info[p][1]} | {info[p][0]:,} | "
              f"{statistics.median(t):.1f} | {p99:.1f} |")


if __name__ == "__main__":
    main()
