#!/usr/bin/env python3
"""bench_aggregator.py - the aggregator's MQTT ingest against a bare subscriber, same broker,
same run (run it through scripts/bench-aggregator.sh, which builds what it needs).

Starts mosquitto on a free loopback port, edgemon-aggregator (unless --no-aggregator) and, per
step, bench_drain (a libmosquitto subscriber that only counts data messages) and edgemon-sim
with --devices devices at one rate. Steps go through --rates, then double the rate until the
bare subscriber gets less than 95% of what the simulator offered, or the simulator achieves
less than 95% of its schedule (the broker or the machine is saturated), or --max-rate.

Per step it reports:
  offered    data msgs/s the simulator achieved (its own summary; its schedule beside it)
  bare       data msgs/s bench_drain received
  agg        data msgs/s the aggregator ingested (edgemon_aggregator_ingested_total, less the
             births/statuses/states the simulator reports)
             Both rates divide by the same kind of window: from the simulator's first data
             message (it prints its data phase on CLOCK_MONOTONIC) to the later of its last one
             and the consumer's last one, so a consumer that falls behind scores lower. The
             aggregator is scraped only before and after a step (its /metrics page is megabytes
             at 1000 devices): its window ends with the last 100 ms in which it used 30 ms of
             CPU or more (/proc), i.e. when it has worked off its backlog.
  ratio      agg / bare
  stored     messages the aggregator ingested / messages the bare subscriber received, counts
             over the whole step (1.00: nothing lost, however long the backlog took)
  rows/s     edgemon_aggregator_store_rows_total over the same window
  CPU %      of one core, from /proc/<pid>/stat while the simulator runs (aggregator,
             mosquitto, simulator)
  RSS        aggregator VmRSS at the end of the step, and VmHWM (peak)
and prints a markdown table at the end.

--compare-remote-write runs each listed rate (no doubling) with the aggregator's remote write
off and on, to Debian's Prometheus as a receiver with native histograms, --repeats rounds with
the order flipping, after an unreported warm-up step; the table then says which mode each row
ran and adds the series written per second and the requests dropped.
"""

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s(pid):
    """utime + stime of pid, in seconds (fields 14 and 15 of /proc/PID/stat)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def mem_kb(pid, key):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.05)
    sys.exit(f"bench_aggregator: timed out after {timeout} s waiting for {what}")


def listening(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class Aggregator:
    def __init__(self, binary, broker_port, tmp, config=None):
        self.log_path = tmp / "aggregator.log"
        self.log = open(self.log_path, "wb")
        conf = ["--config", str(config)] if config else []
        self.proc = subprocess.Popen(
            [binary, *conf, "--broker", f"mqtt://127.0.0.1:{broker_port}", "--db",
             str(tmp / "agg.db"), "--http", "127.0.0.1:0"], stdout=self.log,
            stderr=subprocess.STDOUT)
        m = wait_for(self._serving, 20, "the aggregator's HTTP port")
        self.url = f"http://127.0.0.1:{m}/metrics"
        wait_for(lambda: "mqtt: connected" in self.log_path.read_text(errors="replace"), 20,
                 "the aggregator's MQTT session")

    def _serving(self):
        if self.proc.poll() is not None:
            sys.exit(f"bench_aggregator: the aggregator exited with {self.proc.returncode}:\n"
                     + self.log_path.read_text(errors="replace"))
        m = re.search(r"http: serving on http://[^:]+:(\d+)",
                      self.log_path.read_text(errors="replace"))
        return int(m.group(1)) if m else None

    def counters(self):
        text = urllib.request.urlopen(self.url, timeout=5).read().decode()
        out = {}
        # The counters as /metrics names them (with or without "messages_").
        for name in ("messages_ingested_total", "store_rows_total", "messages_received_total"):
            short = name.replace("messages_", "")
            m = re.search(rf"^edgemon_aggregator_(?:{name}|{short})(?:{{[^}}]*}})? (\d+)", text,
                          re.M)
            out[name] = int(m.group(1)) if m else 0
        # Remote write: what every endpoint was sent (absent without [remote_write]).
        for name in ("sent_samples_total", "sent_histograms_total", "dropped_requests_total"):
            out[name] = sum(int(v) for v in re.findall(
                rf"^edgemon_aggregator_remote_write_{name}{{[^}}]*}} (\d+)", text, re.M))
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def parse_sim(stderr):
    """(data, other published, achieved msg/s, scheduled msg/s, worst lag ms) from its summary."""
    m = re.search(r"(\d+) data, (\d+) birth, (\d+) state, (\d+) status published", stderr)
    r = re.search(r"data rate ([\d.]+) msg/s achieved of ([\d.]+) msg/s scheduled; worst lag behind "
                  r"schedule ([\d.]+) ms", stderr)
    if not m or not r:
        sys.exit(f"bench_aggregator: no summary from edgemon-sim:\n{stderr}")
    data, birth, state, status = (int(x) for x in m.groups())
    return (data, birth + state + status, float(r.group(1)), float(r.group(2)),
            float(r.group(3)))


def step(args, broker, agg, rate):
    drain = subprocess.Popen(
        [args.drain, "--port", str(broker.port), "--topic", "edgemon/v1/+/data", "--idle", "3",
         "--duration", str(args.seconds + 120)], stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)  # Let it subscribe before the first data message.
    before = agg.counters() if agg else None
    cpu0 = {k: cpu_s(p) for k, p in broker.pids(agg).items()}
    t0 = time.monotonic()
    sim = subprocess.Popen(
        [args.sim, "--broker", f"mqtt://127.0.0.1:{broker.port}", "--devices", str(args.devices),
         "--rate", str(rate), "--duration", str(args.seconds), "--prefix", "bench",
         "--seed", str(int(rate * 1000)), "--qos", str(args.qos)], stderr=subprocess.PIPE,
        text=True)
    sim_pid = sim.pid
    sim_cpu = 0.0
    # Nothing scrapes the aggregator while the simulator runs (a /metrics page of 1000 devices
    # is megabytes: scraping it would be a load of its own); /proc only.
    while sim.poll() is None:
        sim_cpu = cpu_s(sim_pid)
        agg_cpu_end = cpu_s(agg.proc.pid) if agg else 0.0
        time.sleep(0.1)
    t_sim_end = time.monotonic()
    mosq_cpu_end = cpu_s(broker.proc.pid)
    _, sim_err = sim.communicate(timeout=60)
    data, other, achieved, scheduled, lag_ms = parse_sim(sim_err)
    ph = re.search(r"data phase on CLOCK_MONOTONIC from (\d+) to (\d+) ns", sim_err)
    data_start_ns, data_end_ns = int(ph.group(1)), int(ph.group(2))
    sim_s = (data_end_ns - data_start_ns) / 1e9
    row = {"rate": rate, "offered": achieved, "scheduled": scheduled, "lag_ms": lag_ms,
           "sim_data": data, "sim_cpu": 100.0 * sim_cpu / max(sim_s, 1e-9),
           "mosq_cpu": 100.0 * (mosq_cpu_end - cpu0["mosquitto"]) / (t_sim_end - t0)}
    if agg:
        # Then watch its CPU time until it goes quiet (a backlog keeps it busy), and scrape
        # once: the last 100 ms in which it used 30 ms of CPU or more ends its window.
        last_move, prev = time.monotonic_ns(), cpu_s(agg.proc.pid)
        while time.monotonic_ns() - last_move < 2e9:
            time.sleep(0.1)
            c = cpu_s(agg.proc.pid)
            if c - prev >= 0.03:
                last_move = time.monotonic_ns()
            prev = c
        last_c = agg.counters()
        agg_n = last_c["messages_ingested_total"] - before["messages_ingested_total"] - other
        window = max((last_move - data_start_ns) / 1e9, sim_s)
        row.update({
            "agg_n": agg_n, "agg": agg_n / window,
            "rows": (last_c["store_rows_total"] - before["store_rows_total"]) / window,
            "agg_cpu": 100.0 * (agg_cpu_end - cpu0["aggregator"]) / (t_sim_end - t0),
            "rss_mb": mem_kb(agg.proc.pid, "VmRSS") / 1024.0,
            "hwm_mb": mem_kb(agg.proc.pid, "VmHWM") / 1024.0,
            "rw_written": (last_c["sent_samples_total"] - before["sent_samples_total"]
                           + last_c["sent_histograms_total"] - before["sent_histograms_total"]),
            "rw_dropped": last_c["dropped_requests_total"] - before["dropped_requests_total"],
            "rw_s": (time.monotonic_ns() - data_start_ns) / 1e9,
        })
    out, _ = drain.communicate(timeout=args.seconds + 150)
    m = re.search(r"total=(\d+) first_ns=(\d+) last_ns=(\d+)", out)
    bare_n, _, bare_last = (int(x) for x in m.groups())
    # Same window rule for both: from the simulator's first data message to the later of its
    # last one and the subscriber's last one.
    bare_window = max((bare_last - data_start_ns) / 1e9, sim_s)
    row.update({"bare_n": bare_n, "bare": bare_n / bare_window if bare_n else 0.0})
    if agg:
        row["ratio"] = row["agg"] / row["bare"] if row["bare"] else 0.0
    return row


class Broker:
    def __init__(self, binary, tmp, max_inflight):
        self.port = free_port()
        conf = tmp / "mosquitto.conf"
        # max_inflight_messages: QoS 1 messages sent to a client and not yet acknowledged (the
        # aggregator acknowledges a burst once it committed it: this bounds the burst).
        conf.write_text(f"listener {self.port} 127.0.0.1\nallow_anonymous true\n"
                        "persistence false\nmax_queued_messages 1000000\n"
                        f"max_inflight_messages {max_inflight}\n")
        self.log = open(tmp / "mosquitto.log", "wb")
        self.proc = subprocess.Popen([binary, "-c", str(conf)], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        wait_for(lambda: listening(self.port), 10, f"mosquitto on port {self.port}")

    def pids(self, agg):
        p = {"mosquitto": self.proc.pid}
        if agg:
            p["aggregator"] = agg.proc.pid
        return p

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def table(rows, with_agg):
    rw = any("remote_write" in r for r in rows)
    head = (["remote write"] if rw else []) + ["devices x Hz", "offered msg/s (sim)",
                                                "bare subscriber msg/s"]
    if with_agg:
        head += ["aggregator ingested msg/s", "agg / bare", "msgs stored / delivered",
                 "SQLite rows/s", "aggregator CPU %",
                 "aggregator RSS MiB (peak)"]
    head += ["mosquitto CPU %", "sim CPU %", "sim worst lag ms"]
    if rw:
        head += ["series written/s (samples + histograms)", "requests dropped"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = ([r["remote_write"]] if rw else []) + [
            f"{r['devices']} x {r['rate']:g}", f"{r['offered']:.0f} (of {r['scheduled']:.0f})",
            f"{r['bare']:.0f}"]
        if with_agg:
            stored = r["agg_n"] / r["bare_n"] if r["bare_n"] else 0.0
            cells += [f"{r['agg']:.0f}", f"{r['ratio']:.2f}", f"{stored:.3f}", f"{r['rows']:.0f}",
                      f"{r['agg_cpu']:.0f}", f"{r['rss_mb']:.1f} ({r['hwm_mb']:.1f})"]
        cells += [f"{r['mosq_cpu']:.0f}", f"{r['sim_cpu']:.0f}", f"{r['lag_ms']:.1f}"]
        if rw:
            cells += [f"{r['rw_written'] / r['rw_s']:.0f}" if r["remote_write"] != "off" else "-",
                      str(r["rw_dropped"]) if r["remote_write"] != "off" else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build/bench", help="build directory (default build/bench)")
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--rates", default="1,5,10", help="rates to run first, Hz per device")
    ap.add_argument("--max-rate", type=float, default=1000.0,
                    help="stop doubling past the listed rates here")
    ap.add_argument("--seconds", type=float, default=10.0, help="simulator run per step")
    ap.add_argument("--qos", type=int, choices=(0, 1), default=0,
                    help="QoS of the simulator's data messages (default 0)")
    ap.add_argument("--max-inflight", type=int, default=20,
                    help="the broker's max_inflight_messages (default 20, as the shipped config)")
    ap.add_argument("--no-aggregator", action="store_true",
                    help="only the simulator and the bare subscriber")
    ap.add_argument("--mosquitto", default="/usr/sbin/mosquitto")
    ap.add_argument("--compare-remote-write", action="store_true",
                    help="run each listed rate with remote write off and on (to a real "
                    "Prometheus receiver), --repeats rounds, order flipping each round")
    ap.add_argument("--remote-write-interval", default="5s",
                    help="[remote_write] interval with --compare-remote-write (default 5s)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--prometheus", default="/usr/bin/prometheus")
    args = ap.parse_args()
    build = Path(args.build)
    args.sim = str(build / "host/sim/edgemon-sim")
    args.drain = str(build / "tests/bench/bench_drain")
    agg_bin = build / "host/aggregator/edgemon-aggregator"
    for b in (args.sim, args.drain) + (() if args.no_aggregator else (str(agg_bin),)):
        if not os.access(b, os.X_OK):
            sys.exit(f"bench_aggregator: {b} is missing (build it, or pass --no-aggregator)")

    rates = [float(x) for x in args.rates.split(",")]
    rows = []
    if args.compare_remote_write:
        compare_remote_write(args, str(agg_bin), rates)
        return
    with tempfile.TemporaryDirectory(prefix="em-bench-agg-") as tmpdir:
        tmp = Path(tmpdir)
        broker = Broker(args.mosquitto, tmp, args.max_inflight)
        agg = None
        try:
            if not args.no_aggregator:
                agg = Aggregator(str(agg_bin), broker.port, tmp)
            i = 0
            while True:
                rate = rates[i] if i < len(rates) else rates[-1] * 2 ** (i - len(rates) + 1)
                if rate > args.max_rate:
                    break
                row = step(args, broker, agg, rate)
                row["devices"] = args.devices
                rows.append(row)
                print(f"bench_aggregator: {args.devices} x {rate:g} Hz: offered {row['offered']:.0f}"
                      f", bare {row['bare']:.0f} ({row['bare_n']} of {row['sim_data']} data messages)"
                      + (f", aggregator {row['agg']:.0f} ({row['agg_n']} data messages, ratio "
                         f"{row['ratio']:.2f})" if agg else "")
                      + " msg/s", file=sys.stderr, flush=True)
                saturated = (row["bare"] < 0.95 * row["offered"]
                             or row["offered"] < 0.95 * row["scheduled"])
                if i >= len(rates) - 1 and saturated:
                    break
                i += 1
        finally:
            if agg:
                agg.stop()
            broker.stop()
    print(f"\n{os.uname().nodename}, {os.cpu_count()} CPUs, {args.seconds:g} s per step, "
          f"{args.devices} devices, data at QoS {args.qos}, broker max_inflight_messages "
          f"{args.max_inflight}; data messages only in the msg/s columns\n")
    print(table(rows, agg is not None))


class Prometheus:
    """Debian's Prometheus as a remote-write receiver with native histograms, scraping
    nothing."""

    def __init__(self, binary, tmp):
        self.port = free_port()
        conf = tmp / "prometheus.yml"
        conf.write_text("global:\n  scrape_interval: 1h\n")
        self.log = open(tmp / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={conf}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--web.enable-remote-write-receiver",
             "--enable-feature=native-histograms"], stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(lambda: listening(self.port), 30, "prometheus")
        self.url = f"http://127.0.0.1:{self.port}/api/v1/write"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


def compare_remote_write(args, agg_bin, rates):
    """Each rate with remote write off and on, the same broker and receiver, --repeats rounds
    with the order flipping each round; one aggregator database (one client id) throughout."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="em-bench-agg-") as tmpdir:
        tmp = Path(tmpdir)
        broker = Broker(args.mosquitto, tmp, args.max_inflight)
        prom = Prometheus(args.prometheus, tmp)
        conf = tmp / "agg-rw.ini"
        conf.write_text(f"[remote_write]\ninterval = {args.remote_write_interval}\n"
                        f"[remote_write.prom]\nurl = {prom.url}\n")
        try:
            # Unreported warm-up: the first step of a database writes every device's birth
            # and names (tens of thousands of rows) and would load whichever mode ran first.
            agg = Aggregator(agg_bin, broker.port, tmp)
            try:
                step(args, broker, agg, rates[0])
            finally:
                agg.stop()
            for r in range(args.repeats):
                for rate in rates:
                    modes = ["off", "on"] if r % 2 == 0 else ["on", "off"]
                    for mode in modes:
                        agg = Aggregator(agg_bin, broker.port, tmp,
                                         conf if mode == "on" else None)
                        try:
                            row = step(args, broker, agg, rate)
                        finally:
                            agg.stop()
                        row.update({"devices": args.devices, "remote_write":
                                    "off" if mode == "off" else f"on, every {args.remote_write_interval}"})
                        rows.append(row)
                        print(f"bench_aggregator: round {r + 1} remote write {mode}: "
                              f"{args.devices} x {rate:g} Hz: aggregator {row['agg']:.0f} msg/s, "
                              f"ratio {row['ratio']:.2f}, CPU {row['agg_cpu']:.0f}%, series "
                              f"written {row['rw_written']}", file=sys.stderr, flush=True)
        finally:
            prom.stop()
            broker.stop()
    print(f"\n{os.uname().nodename}, {os.cpu_count()} CPUs, {args.seconds:g} s per step, "
          f"{args.devices} devices, data at QoS {args.qos}, broker max_inflight_messages "
          f"{args.max_inflight}, remote write to Prometheus "
          f"({args.prometheus}, native histograms) every {args.remote_write_interval}\n")
    print(table(rows, True))


if __name__ == "__main__":
    main()
