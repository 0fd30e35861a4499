#!/usr/bin/env python3
"""bench_metrics_scrape.py - what one /metrics scrape of a fleet costs, text against protobuf.

Starts mosquitto on a free loopback port and edgemon-aggregator, feeds it with edgemon-sim
(--devices devices, 3 stages each, 1 Hz for 10 s at QoS 1), waits until it holds every
device, then fetches /metrics --fetches times per format, the two formats interleaved: plain
(text 0.0.4) and with the Accept header Prometheus 2.42 sends with native histograms on
(protobuf, classic + native histograms). Prints the body size and the median and fastest
whole GET (render under the registry lock, HTTP, reading the body) of each.

    bench_metrics_scrape.py [--build DIR] [--devices N] [--fetches N]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_aggregator import Aggregator, Broker, wait_for  # noqa: E402

PROMETHEUS_ACCEPT = ("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
                     "encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,*/*;q=0.2")


def fetch(url, accept):
    req = urllib.request.Request(url)
    if accept:
        req.add_header("Accept", accept)
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as r:
        body = r.read()
        ctype = r.headers["Content-Type"]
    return time.perf_counter() - t0, len(body), ctype


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build/bench", help="build directory (default build/bench)")
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--fetches", type=int, default=30, help="GETs per format (default 30)")
    ap.add_argument("--mosquitto", default="/usr/sbin/mosquitto")
    args = ap.parse_args()
    build = Path(args.build)
    sim_bin = build / "host/sim/edgemon-sim"
    agg_bin = build / "host/aggregator/edgemon-aggregator"
    for b in (sim_bin, agg_bin):
        if not os.access(b, os.X_OK):
            sys.exit(f"bench_metrics_scrape: {b} is missing (build it)")
    with tempfile.TemporaryDirectory(prefix="em-bench-scrape-") as tmpdir:
        tmp = Path(tmpdir)
        broker = Broker(args.mosquitto, tmp, 20)
        agg = Aggregator(str(agg_bin), broker.port, tmp)
        try:
            subprocess.run([str(sim_bin), "--broker", f"mqtt://127.0.0.1:{broker.port}",
                            "--devices", str(args.devices), "--rate", "1", "--duration", "10",
                            "--qos", "1", "--prefix", "bench"], check=True,
                           stderr=subprocess.DEVNULL)
            api = agg.url.replace("/metrics", "/api/devices")

            def all_devices():
                with urllib.request.urlopen(api, timeout=60) as r:
                    return len(json.loads(r.read())["devices"]) >= args.devices

            wait_for(all_devices, 60, "every device in the aggregator")
            times = {"text": [], "protobuf": []}
            sizes = {}
            for _ in range(args.fetches):
                for name, accept in (("text", None), ("protobuf", PROMETHEUS_ACCEPT)):
                    s, n, ctype = fetch(agg.url, accept)
                    times[name].append(s * 1000)
                    sizes[name] = (n, ctype)
        finally:
            agg.stop()
            broker.stop()
    print(f"{os.uname().nodename}, {os.cpu_count()} CPUs, {args.devices} devices x 3 stages, "
          f"{args.fetches} GETs per format, interleaved\n")
    print("| format | Content-Type | body bytes | GET median ms | GET min ms |")
    print("|---|---|---:|---:|---:|")
    for name in ("text", "protobuf"):
        n, ctype = sizes[name]
        print(f"| {name} | {ctype.split(';')[0]} | {n:,} | {statistics.median(times[name]):.1f} "
              f"| {min(times[name]):.1f} |")


if __name__ == "__main__":
    main()
