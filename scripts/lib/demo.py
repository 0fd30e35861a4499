#!/usr/bin/python3
"""The live demo behind scripts/demo.sh.

Starts a real mosquitto on a free loopback port, edgemon-aggregator (history in SQLite,
Prometheus metrics on a free loopback port), the sample inference loop, and edgemon-agent
watching it, and shows the live telemetry with `edgemon-cli tail` (one line per
data message, level changes highlighted) for a bounded time (EM_DEMO_SECONDS, default 20) or
until Ctrl-C. With EM_DEMO_VIEW=top on a terminal it shows `edgemon-cli top` instead (full
screen, q quits early). Everything it started is stopped on the way out.

    demo.py BUILD_DIR
"""

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BOLD, RESET = ("\033[1m", "\033[0m") if sys.stdout.isatty() else ("", "")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"mosquitto exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("mosquitto did not start listening")


def http_get(url):
    import urllib.request
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode(errors="replace")
    except OSError as e:
        return None, str(e)


def wait_for_http(log_path, proc, timeout=10):
    """The aggregator's base URL, from the line it logs once it serves HTTP."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"edgemon-aggregator exited with {proc.returncode}:\n"
                             + log_path.read_text(errors="replace"))
        m = re.search(r"http: serving on (http://[0-9.]+:\d+)",
                      log_path.read_text(errors="replace"))
        if m:
            return m.group(1)
        time.sleep(0.05)
    raise SystemExit("edgemon-aggregator did not start serving HTTP")


def show_forensic(cli_bin, url, device, svg, command, drawn, absent, why):
    """Runs `edgemon-cli COMMAND` on the device's newest blob of that kind, drawn to svg, and
    says where the drawing (`drawn`) is or, with the exit status, that the blob (`absent`)
    was not shown and `why`."""
    print(f"{BOLD}==> edgemon-cli {command} --aggregator {url} --device {device} --top 5 "
          f"--svg {svg}{RESET}", flush=True)
    rc = subprocess.call([str(cli_bin), command, "--aggregator", url, "--device", device,
                          "--top", "5", "--svg", str(svg)])
    if rc == 0:
        print(f"{BOLD}==> {drawn}: {svg} (open it in a browser){RESET}")
    else:
        print(f"{BOLD}==> no {absent} shown (exit {rc}): {why}{RESET}")


def show_flight(cli_bin, url, device, svg):
    """The flight recording the slow phase's escalation made: its slowest frames, and a
    drawing of every span and counter around the breach."""
    show_forensic(cli_bin, url, device, svg, "flight", "the breach, drawn", "flight recording",
                  "the level did not rise in this run")


def show_profile(cli_bin, url, device, svg):
    """The stack profile the slow phase's escalation opened: where the inference process spent
    its time in the seconds after the breach, and a flame graph of it."""
    show_forensic(cli_bin, url, device, svg, "profile", "the breach's flame graph",
                  "stack profile", "the level did not rise in this run, or its sampling window "
                  "had not closed yet")


def main():
    build = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build" / "normal")
    agent_bin = build / "firmware" / "agent" / "edgemon-agent"
    cli_bin = build / "host" / "cli" / "edgemon-cli"
    agg_bin = build / "host" / "aggregator" / "edgemon-aggregator"
    seconds = float(os.environ.get("EM_DEMO_SECONDS", "20"))
    procs = []
    tmp = tempfile.TemporaryDirectory(prefix="edgemon-demo-")
    work = Path(tmp.name)

    def stop_all():
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()

    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        port = free_port()
        conf = work / "mosquitto.conf"
        conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
        broker = subprocess.Popen(["/usr/sbin/mosquitto", "-c", str(conf)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(broker)
        wait_listening(port, broker)
        print(f"{BOLD}==> mosquitto on 127.0.0.1:{port}{RESET}")

        agg_log = open(work / "aggregator.log", "wb")
        aggregator = subprocess.Popen([str(agg_bin), "--broker", f"mqtt://127.0.0.1:{port}",
                                       "--db", str(work / "edgemon.db"), "--http",
                                       "127.0.0.1:0"], stdout=agg_log, stderr=subprocess.STDOUT)
        procs.append(aggregator)
        metrics_url = wait_for_http(work / "aggregator.log", aggregator)
        print(f"{BOLD}==> edgemon-aggregator: fleet dashboard at {metrics_url}/ui/, "
              f"Prometheus metrics at {metrics_url}/metrics, devices at "
              f"{metrics_url}/api/devices (history: {work}/edgemon.db){RESET}")

        device = "demo-board"
        pidfile = work / "inference.pid"
        cfg = work / "agent.ini"
        cfg.write_text(
            f"[agent]\ndevice_id = {device}\nsample_period = 100ms\nsmaps_period = 1s\n"
            f"runtime_dir = {work}/run\n[spool]\npath = {work}/spool\n"
            f"[target]\npid_file = {pidfile}\n"
            f"[mqtt]\nbroker = mqtt://127.0.0.1:{port}\n"
            # The budget the slow phase breaks: infer's median over 5 ms in 2 windows of 500 ms
            # (a p99 of 10 frames is their slowest: one preempted frame on a loaded machine).
            "[budget.infer]\np50 = 5ms\nlevel = DEGRADED\n"
            "[degrade]\nwindow = 500ms\nenter_windows = 2\nleave_windows = 3\n")
        log = open(work / "agent.log", "wb")
        agent = subprocess.Popen([str(agent_bin), "--config", str(cfg)], stdout=log,
                                 stderr=subprocess.STDOUT)
        procs.append(agent)
        sock = work / "run" / "spans.sock"
        deadline = time.monotonic() + 5
        while not sock.exists() and time.monotonic() < deadline and agent.poll() is None:
            time.sleep(0.02)

        workload = subprocess.Popen([
            sys.executable, str(ROOT / "firmware/client/python/examples/sample_inference.py"),
            "--fps", "20", "--seconds", str(seconds + 10),
            # A heavy phase from 30% to 60% of the run: the level degrades, then recovers.
            "--slow-from", str(seconds * 0.3), "--slow-for", str(seconds * 0.3)],
            env={**os.environ, "EDGEMON_RUNTIME_DIR": str(work / "run")})
        procs.append(workload)
        pidfile.write_text(f"{workload.pid}\n")
        print(f"{BOLD}==> sample inference loop (pid {workload.pid}): preprocess, infer, "
              f"postprocess spans to {sock}{RESET}")
        print(f"{BOLD}==> edgemon-agent watching it, publishing to edgemon/v1/{device}/ "
              f"(log: {work}/agent.log){RESET}")

        view = "top" if os.environ.get("EM_DEMO_VIEW") == "top" and sys.stdout.isatty() else "tail"
        print(f"{BOLD}==> edgemon-cli {view} --broker mqtt://127.0.0.1:{port} --device {device} "
              f"for {seconds:.0f} s ({'q' if view == 'top' else 'Ctrl-C'} stops early){RESET}",
              flush=True)
        tail = subprocess.Popen([str(cli_bin), view, "--broker", f"mqtt://127.0.0.1:{port}",
                                 "--device", device, "--duration", str(seconds)])
        procs.append(tail)
        while tail.poll() is None:
            if agent.poll() is not None:
                print(f"agent exited with {agent.returncode}:")
                print((work / "agent.log").read_text())
                return 1
            time.sleep(0.1)
        status, body = http_get(metrics_url + "/api/devices")
        print(f"{BOLD}==> {metrics_url}/api/devices answered {status}: {body[:300]}{RESET}")
        show_flight(cli_bin, metrics_url, device, Path(build).resolve() / "demo-flight.svg")
        show_profile(cli_bin, metrics_url, device, Path(build).resolve() / "demo-profile.svg")
        agent.send_signal(signal.SIGTERM)
        agent.wait(5)
        print(f"{BOLD}==> agent stopped (exit {agent.returncode}); its log:{RESET}")
        print((work / "agent.log").read_text().rstrip())
        return 0
    except KeyboardInterrupt:
        print("\ninterrupted")
        return 130
    finally:
        stop_all()
        tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
