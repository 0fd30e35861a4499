#!/usr/bin/python3
"""Aggregator soak: edgemon-aggregator with a file database under edgemon-sim's fleet load for
minutes, sampled every --sample-every seconds; checks that the WAL stays under its documented
bound, that /metrics answers 200 at every sample, and that the aggregator's RSS is flat after
the warm-up. tests/soak/README.md ("Aggregator soak") says what runs and what "flat" means.

Exit status: 0 pass, 1 a check failed (each reason printed), 2 bad usage or setup.
"""

import argparse
import csv
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from soaklib import conclude, free_port, wait_until

MOSQUITTO = os.environ.get("EM_MOSQUITTO", "/usr/sbin/mosquitto")
MIB = 1024 * 1024
# The bound host/aggregator/store/SCHEMA.md documents ("WAL bound").
WAL_BOUND_BYTES = 32 * MIB


def wait_for(pred, timeout, what):
    try:
        return wait_until(pred, timeout, what)
    except TimeoutError as e:
        raise SystemExit(f"setup: {e}")


def size_of(path):
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def metric(body, name):
    m = re.search(rf"^{re.escape(name)} (\S+)$", body, re.M)
    return float(m.group(1)) if m else None


def scrape(port):
    """(status, seconds, body) of GET /metrics."""
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            body = r.read().decode(errors="replace")
            return r.status, time.monotonic() - t0, body
    except urllib.error.HTTPError as e:
        return e.code, time.monotonic() - t0, ""
    except OSError:
        return 0, time.monotonic() - t0, ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aggregator", required=True)
    ap.add_argument("--sim", required=True)
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=10.0, help="data messages/s per device")
    ap.add_argument("--sample-every", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=120,
                    help="seconds before the RSS baseline (SQLite's page cache filling)")
    ap.add_argument("--wal-bound", type=int, default=WAL_BOUND_BYTES)
    ap.add_argument("--rss-ratio", type=float, default=1.10)
    ap.add_argument("--rss-slack-mib", type=float, default=8.0)
    ap.add_argument("--workdir")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    for exe in (a.aggregator, a.sim, MOSQUITTO):
        if not os.access(exe, os.X_OK):
            print(f"setup: {exe} is not an executable", file=sys.stderr)
            return 2
    if a.warmup >= a.seconds - 3 * a.sample_every:
        print("setup: --seconds must leave at least three samples after --warmup",
              file=sys.stderr)
        return 2

    work = Path(a.workdir or tempfile.mkdtemp(prefix="em-agg-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    procs = []
    failures = []
    try:
        port = free_port()
        conf = work / "mosquitto.conf"
        conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
                        "max_queued_messages 1000000\n")
        broker = subprocess.Popen([MOSQUITTO, "-c", str(conf)],
                                  stdout=open(work / "mosquitto.log", "wb"),
                                  stderr=subprocess.STDOUT)
        procs.append(broker)

        def listening():
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return True
            except OSError:
                return False

        wait_for(listening, 10, "mosquitto")
        db = work / "soak.db"
        wal = work / "soak.db-wal"
        agg_log = work / "aggregator.log"
        agg = subprocess.Popen([a.aggregator, "--broker", f"mqtt://127.0.0.1:{port}", "--db",
                                str(db), "--http", "127.0.0.1:0"],
                               stdout=open(agg_log, "wb"), stderr=subprocess.STDOUT)
        procs.append(agg)
        m = wait_for(lambda: re.search(r"serving on http://127\.0\.0\.1:(\d+)",
                                       agg_log.read_text(errors="replace")), 10, "HTTP port")
        http_port = int(m.group(1))
        wait_for(lambda: "mqtt: connected" in agg_log.read_text(errors="replace"), 10,
                 "the aggregator to connect")
        sim = subprocess.Popen([a.sim, "--broker", f"mqtt://127.0.0.1:{port}", "--devices",
                                str(a.devices), "--rate", str(a.rate), "--duration",
                                str(a.seconds + 5)],
                               stdout=open(work / "sim.log", "wb"), stderr=subprocess.STDOUT)
        procs.append(sim)

        samples = []
        wal_max = 0
        t0 = time.monotonic()
        next_sample = t0 + a.sample_every
        while time.monotonic() - t0 < a.seconds:
            for p, name in ((agg, "aggregator"), (sim, "edgemon-sim"), (broker, "mosquitto")):
                if p.poll() is not None:
                    failures.append(f"{name} exited with {p.returncode} during the soak")
            if failures:
                break
            wal_max = max(wal_max, size_of(wal))  # between samples too: once a second
            if time.monotonic() >= next_sample:
                status, took, body = scrape(http_port)
                samples.append({
                    "t_s": round(time.monotonic() - t0),
                    "db_bytes": size_of(db),
                    "wal_bytes": size_of(wal),
                    "rss_bytes": rss_bytes(agg.pid),
                    "metrics_status": status,
                    "metrics_ms": round(took * 1000, 1),
                    "metrics_bytes": len(body),
                    "received": metric(body, "edgemon_aggregator_received_total"),
                    "store_errors": metric(body, "edgemon_aggregator_store_errors_total"),
                    "ckpt_errors": metric(body, "edgemon_aggregator_checkpoint_errors_total"),
                    "wal_max_seen": metric(body, "edgemon_aggregator_wal_max_bytes"),
                })
                next_sample += a.sample_every
            time.sleep(1)

        with open(work / "samples.csv", "w", newline="") as f:
            if samples:
                w = csv.DictWriter(f, fieldnames=list(samples[0]))
                w.writeheader()
                w.writerows(samples)
        print(f"aggregator soak: {a.devices} devices x {a.rate:g} Hz for {a.seconds} s, "
              f"a sample every {a.sample_every} s (work dir {work})")
        print(f"{'t_s':>5} {'db_MiB':>8} {'wal_MiB':>8} {'rss_MiB':>8} {'/metrics':>8} "
              f"{'ms':>8} {'KiB':>8} {'received':>10}")
        for s in samples:
            print(f"{s['t_s']:>5} {s['db_bytes'] / MIB:>8.1f} {s['wal_bytes'] / MIB:>8.2f} "
                  f"{s['rss_bytes'] / MIB:>8.1f} {s['metrics_status']:>8} "
                  f"{s['metrics_ms']:>8.1f} {s['metrics_bytes'] / 1024:>8.0f} "
                  f"{int(s['received'] or 0):>10}")

        if not failures:
            failures += check(a, samples, wal_max)
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(10)
                    failures.append(f"{p.args[0]} did not stop within 30 s of SIGTERM")
    sim_log = work / "sim.log"
    if sim_log.exists():
        for line in sim_log.read_text(errors="replace").splitlines():
            if "published" in line or "achieved" in line:
                print(line)
    if len(procs) > 1 and procs[1].returncode not in (0, None):
        failures.append(f"the aggregator exited with {procs[1].returncode} on SIGTERM")
    failed = "FAIL:\n  " + "\n  ".join(failures) + f"\nlogs kept in {work}" if failures else ""
    return conclude(work, a.keep or a.workdir, failed, "PASS")


def check(a, samples, wal_max):
    """The soak's assertions; returns the failures."""
    bad = []
    if len(samples) < 3:
        return [f"only {len(samples)} samples"]
    seen_wal = max([wal_max] + [int(s["wal_max_seen"] or 0) for s in samples])
    print(f"WAL: largest file {wal_max / MIB:.2f} MiB (polled every 1 s), largest a checkpoint "
          f"saw {seen_wal / MIB:.2f} MiB; bound {a.wal_bound / MIB:.0f} MiB")
    if seen_wal >= a.wal_bound:
        bad.append(f"the WAL reached {seen_wal} bytes, not under the bound {a.wal_bound}")
    not_ok = [(s["t_s"], s["metrics_status"]) for s in samples if s["metrics_status"] != 200]
    if not_ok:
        bad.append(f"/metrics did not answer 200 at (t_s, status) {not_ok}")
    if samples[-1]["db_bytes"] <= samples[0]["db_bytes"]:
        bad.append("the database file did not grow: the WAL is not checkpointed into it")
    received = [s["received"] or 0 for s in samples]
    if received[-1] <= received[0]:
        bad.append("the aggregator received nothing during the soak")
    for key, what in (("store_errors", "failed store writes"), ("ckpt_errors",
                                                                 "failed checkpoints")):
        if any(s[key] for s in samples):
            bad.append(f"{what}: {max(s[key] or 0 for s in samples)}")
    # RSS flat: the largest RSS of the last third of the samples at most the first sample at
    # or after the warm-up times --rss-ratio, plus --rss-slack-mib.
    after = [s for s in samples if s["t_s"] >= a.warmup]
    base = after[0]["rss_bytes"]
    last_third = samples[len(samples) - max(1, len(samples) // 3):]
    top = max(s["rss_bytes"] for s in last_third)
    limit = base * a.rss_ratio + a.rss_slack_mib * MIB
    print(f"RSS: {base / MIB:.1f} MiB at t={after[0]['t_s']} s (after the {a.warmup} s "
          f"warm-up), max of the last third {top / MIB:.1f} MiB, limit {limit / MIB:.1f} MiB; "
          f"first sample {samples[0]['rss_bytes'] / MIB:.1f} MiB")
    lat = sorted(s["metrics_ms"] for s in samples)
    print(f"/metrics latency: median {lat[len(lat) // 2]:.1f} ms, max {lat[-1]:.1f} ms; "
          f"received {int(received[-1])} messages")
    if top > limit:
        bad.append(f"RSS not flat: {top} bytes in the last third > {limit:.0f}")
    return bad


if __name__ == "__main__":
    sys.exit(main())
