#!/usr/bin/python3
"""The live demo behind scripts/demo.sh.

Starts a real mosquitto on a free loopback port, the sample inference loop, and
edgemon-agent watching it; subscribes to the device's topics and prints the decoded live
telemetry, one line per data message, for a bounded time (EM_DEMO_SECONDS, default 20) or
until Ctrl-C. Everything it started is stopped on the way out.

    demo.py BUILD_DIR
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import paho.mqtt.client as mqtt

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "proto" / "python"))
import edgemon_proto  # noqa: E402

BOLD, DIM, RESET = ("\033[1m", "\033[2m", "\033[0m") if sys.stdout.isatty() else ("", "", "")


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


def fmt(v, scale=1.0, digits=1):
    """A figure for the table; absent is '-', never 0."""
    if v is None:
        return "-"
    return f"{v / scale:.{digits}f}"


class Printer:
    def __init__(self, device):
        self.device = device
        self.birth = None
        self.prev = None
        self.rows = 0
        self.last_slow = {}

    def on_message(self, client, userdata, m):
        kind = m.topic.rsplit("/", 1)[-1]
        try:
            msg = edgemon_proto.decode(m.payload)
        except edgemon_proto.DecodeError as e:
            print(f"{m.topic}: undecodable payload: {e}")
            return
        if kind == "birth":
            self.birth = msg
            absent = [x["name"] for x in msg["metrics"] if "absent_reason" in x]
            print(f"{BOLD}birth{RESET} device {msg['device']}, agent {msg['agent_version']}, "
                  f"{len(msg['metrics'])} metrics, session {msg['session']:08x}")
            for x in msg["metrics"]:
                if "absent_reason" in x and x["name"].startswith("pmu."):
                    print(f"  {DIM}absent {x['name']}: {x['absent_reason']}{RESET}")
            if not absent:
                print("  every metric present")
        elif kind == "status":
            print(f"{BOLD}status{RESET} {'online' if msg['online'] else 'offline'}")
        elif kind == "state":
            if msg.get("rule") is None and msg["level"] == msg["prev_level"]:
                return  # the retained initial state
            what = msg.get("reason") or "clean windows"
            value, bound = msg.get("value"), msg.get("bound")
            figures = (f", {value / 1e6:.2f} ms against {bound / 1e6:.2f} ms"
                       if value is not None and bound is not None else "")
            print(f"{BOLD}==> level {msg['level']} (was {msg['prev_level']}): "
                  f"{what}{figures}{RESET}")
        elif kind == "data" and self.birth:
            self.data(msg)

    SLOW = ("mem.pss", "sys.mem.available", "psi.cpu.some.avg10")

    def data(self, d):
        v = edgemon_proto.values_by_name(d, self.birth)
        # Slower groups are sent only in the windows they were read: show the last reading.
        for name in self.SLOW:
            if name in v:
                self.last_slow[name] = v[name]
            else:
                v[name] = self.last_slow.get(name)
        prev = self.prev
        self.prev = (d, v)
        if prev is None:
            return
        pd, pv = prev
        window = (d["time_ns"] - pd["time_ns"]) / 1e9 or 1e-9

        def rate(name):
            a, b = pv.get(name), v.get(name)
            return None if a is None or b is None else (b - a) / window

        if self.rows % 15 == 0:
            print(f"{DIM}{'time':>8} {'seq':>5} {'pid':>7} {'cpu%':>6} {'ctxsw/s':>8} "
                  f"{'faults/s':>9} {'rss MiB':>8} {'pss MiB':>8} {'avail GiB':>9} "
                  f"{'psi cpu':>7} {'agent cpu%':>10}  stage spans p50/p99 ms{RESET}")
        self.rows += 1
        cpu = rate("pmu.task-clock")
        agent_cpu = rate("agent.cpu")
        print(f"{time.strftime('%H:%M:%S', time.localtime(d['time_ns'] / 1e9)):>8} "
              f"{d['seq']:>5} {fmt(v.get('target.pid'), digits=0):>7} "
              f"{fmt(None if cpu is None else cpu / 1e7):>6} "
              f"{fmt(rate('pmu.context-switches'), digits=0):>8} "
              f"{fmt(rate('pmu.page-faults'), digits=0):>9} "
              f"{fmt(v.get('mem.rss'), 2**20):>8} {fmt(v.get('mem.pss'), 2**20):>8} "
              f"{fmt(v.get('sys.mem.available'), 2**30, 2):>9} "
              f"{fmt(v.get('psi.cpu.some.avg10'), digits=2):>7} "
              f"{fmt(None if agent_cpu is None else agent_cpu / 1e7, digits=3):>10}"
              f"  {self.stages(d)}")

    @staticmethod
    def stages(d):
        """Per stage: spans in the window and p50/p99 in ms."""
        out = []
        for st in d["stages"]:
            if st["count"]:
                out.append(f"{st['name']} {st['count']}x {st['p50_ns'] / 1e6:.2f}/"
                           f"{st['p99_ns'] / 1e6:.2f}")
            else:
                out.append(f"{st['name']} -")
        return "  ".join(out)


def main():
    build = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build" / "normal")
    agent_bin = build / "firmware" / "agent" / "edgemon-agent"
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

        device = "demo-board"
        pidfile = work / "inference.pid"
        cfg = work / "agent.ini"
        cfg.write_text(
            f"[agent]\ndevice_id = {device}\nsample_period = 100ms\nsmaps_period = 1s\n"
            f"runtime_dir = {work}/run\n[target]\npid_file = {pidfile}\n"
            f"[mqtt]\nbroker = mqtt://127.0.0.1:{port}\n"
            # The budget the slow phase breaks: infer p99 over 5 ms in 2 windows of 500 ms.
            "[budget.infer]\np99 = 5ms\nlevel = DEGRADED\n"
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

        printer = Printer(device)
        client = mqtt.Client(client_id=f"edgemon-demo-tail-{os.getpid()}")
        client.on_message = printer.on_message
        client.connect("127.0.0.1", port)
        client.subscribe(f"edgemon/v1/{device}/#", qos=1)
        client.loop_start()
        print(f"{BOLD}==> live telemetry for {seconds:.0f} s (Ctrl-C stops early){RESET}")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if agent.poll() is not None:
                print(f"agent exited with {agent.returncode}:")
                print((work / "agent.log").read_text())
                return 1
            time.sleep(0.1)
        agent.send_signal(signal.SIGTERM)
        agent.wait(5)
        time.sleep(0.3)
        client.loop_stop()
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
