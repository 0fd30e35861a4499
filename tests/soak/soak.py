#!/usr/bin/python3
"""Leak and memory soak of edgemon-agent under valgrind memcheck.

What it runs, all real processes on loopback:
  - mosquitto on a free port, killed (SIGKILL) and restarted on the same port every
    --restart-every s, so the agent loses its broker and reconnects again and again;
  - a target process (a Python loop, busy about half the time so the 2-core CI VM keeps
    a core for valgrind);
  - edgemon-agent under valgrind memcheck (full leak check), with a [budget.infer] deadline
    rule so the degradation path (rule evaluation, level changes, state page, retained state)
    runs all the time;
  - a sender process pushing spans through the real Python client (firmware/client/python) at
    --rate spans/s over three stages, with some infer spans over the deadline during one
    phase of every cycle, so the level goes DEGRADED and back to NOMINAL;
  - an MQTT subscriber (paho) counting the agent's data messages and the levels they carry.
The agent has a spool (store and forward) in the work directory, so each outage also runs the
spool's write, sync and replay paths under valgrind.

Every second it samples VmRSS of the valgrind process (valgrind runs the agent inside its own
process, so that pid's RSS is the agent's plus valgrind's: shadow memory, translated code;
the absolute figure is several times the agent's own, only its trend matters).

At the end it SIGTERMs the agent, waits for it to exit and checks:
  - valgrind's exit status is not 99 (--error-exitcode) and the agent's is 0;
  - the valgrind log says "ERROR SUMMARY: 0 errors" and reports no definite, indirect or
    possible leak ("definitely lost: 0 bytes" etc., or "no leaks are possible");
  - RSS is flat: the median of the last third of the samples is at most the median of the
    second third (the first third is warm-up: valgrind translating code as paths are first
    taken, the first reconnects) plus RSS_GROWTH_FRACTION and RSS_GROWTH_KIB;
  - the subscriber got data messages after every broker restart, and saw the level change.
Prints a summary and exits 0, or 1 with the reasons it failed (2: bad usage or setup).

Usage: tests/soak/soak.py --agent build/normal/firmware/agent/edgemon-agent [--seconds 300]
       [--restart-every 30] [--rate 3000] [--workdir DIR] [--keep]
Short form (CI): --seconds 45 --restart-every 15. See tests/soak/README.md.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "proto" / "python"))
import edgemon_proto  # noqa: E402
from soaklib import free_port  # noqa: E402

try:
    import paho.mqtt.client as mqtt
except ImportError:  # pragma: no cover - a setup problem, reported clearly
    sys.exit("soak: python3-paho-mqtt is not installed")

# RSS flatness: last-third median <= second-third median * (1 + fraction) + KiB.
RSS_GROWTH_FRACTION = 0.02
RSS_GROWTH_KIB = 512
VALGRIND_ERROR_EXIT = 99
# How long the agent may take to exit after SIGTERM: valgrind's leak check runs then.
STOP_TIMEOUT_S = 120
# memcheck keeps freed blocks in a quarantine (default 20 MB) so that a use after free is caught;
# while it fills, every malloc takes fresh memory and RSS grows with the volume the agent has
# freed (about 11 KB/s here: libmosquitto's per-message buffers), which looks like a leak and is
# valgrind's own. A small quarantine fills during warm-up and still catches a use shortly after
# the free.
FREELIST_VOL = 200000


def log(msg):
    print(f"soak: {msg}", flush=True)


class Broker:
    """mosquitto on one fixed port, restartable."""

    def __init__(self, binary, workdir, port):
        self.binary = binary
        self.port = port
        self.conf = workdir / "mosquitto.conf"
        self.conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\n"
                             "persistence false\nmax_queued_messages 100000\n")
        self.log = open(workdir / "mosquitto.log", "ab")
        self.proc = None

    def start(self, timeout=10):
        self.proc = subprocess.Popen([self.binary, "-c", str(self.conf)], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mosquitto exited with {self.proc.returncode} "
                                   f"(see {self.log.name})")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"mosquitto did not listen on port {self.port} within {timeout} s")

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class Subscriber:
    """Counts data messages (with the time each arrived) and the levels they carry. Subscribes
    again on every (re)connect, since the broker restarts with no memory."""

    def __init__(self, port, device):
        self.topic = f"edgemon/v1/{device}/#"
        self.lock = threading.Lock()
        self.data_times = []
        self.births = 0
        self.levels = {}
        self.historical = 0
        self.states = 0
        self.connects = 0
        self.client = mqtt.Client(client_id=f"soak-sub-{uuid.uuid4().hex[:8]}")
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.client.reconnect_delay_set(min_delay=1, max_delay=1)
        self.client.connect_async("127.0.0.1", port, keepalive=10)
        self.client.loop_start()

    def _on_connect(self, client, userdata, flags, rc):
        if rc == 0:
            self.connects += 1
            client.subscribe(self.topic, qos=1)

    def _on_message(self, client, userdata, m):
        kind = m.topic.rsplit("/", 1)[-1]
        now = time.monotonic()
        with self.lock:
            if kind == "data":
                self.data_times.append(now)
                try:
                    msg = edgemon_proto.decode(m.payload)
                    level = msg.get("level")
                    self.historical += bool(msg.get("historical"))
                except Exception:  # counted, not fatal: the codec has its own tests
                    level = "undecodable"
                self.levels[level] = self.levels.get(level, 0) + 1
            elif kind == "birth":
                self.births += 1
            elif kind == "state":
                self.states += 1

    def data_between(self, t0, t1):
        with self.lock:
            return sum(1 for t in self.data_times if t0 <= t < t1)

    def close(self):
        self.client.loop_stop()
        self.client.disconnect()


# The sender, in its own process: --rate spans/s in ~2 ms slices over three stages until
# --seconds have passed (or SIGTERM), then one JSON line of the client's counters. In the
# first third of every 6 s cycle, every 50th infer span takes 80 ms (over the 50 ms deadline).
SENDER = r"""
import json, signal, sys, time
sys.path.insert(0, sys.argv[1])
import edgemon
path, rate, seconds = sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
c = edgemon.Client(path)
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
stages = ("pre", "infer", "post")
start = time.monotonic()
n = 0
over = 0
while not stop:
    now = time.monotonic()
    if now - start >= seconds:
        break
    due = int((now - start) * rate)
    bad = ((now - start) % 6.0) < 2.0
    t = time.monotonic_ns()
    while n < due:
        stage = stages[n % 3]
        dur = 2000000 + (n & 255) * 10000
        if stage == "infer":
            if bad and (n // 3) % 50 == 0:
                dur = 80000000
                over += 1
            else:
                dur = 20000000 + (n & 255) * 10000
        c.record(stage, t, dur, frame=n // 3)
        n += 1
    time.sleep(0.002)  # small slices: 6 spans at 3000/s, under the default queue of 10
out = c.stats()
out["attempts"] = n
out["over_budget"] = over
print(json.dumps(out), flush=True)
"""

# The target: busy half the time (so the agent has a live process to sample) and asleep the
# other half (so valgrind keeps a core on a 2-core machine).
TARGET = "# edgemon-soak-target-{marker}\nimport time\nwhile True:\n" \
         "    t = time.monotonic()\n    while time.monotonic() - t < 0.01:\n" \
         "        sum(range(1000))\n    time.sleep(0.01)\n"


def agent_config(workdir, device, port, marker):
    return (
        "[agent]\n"
        f"device_id = {device}\n"
        "sample_period = 100ms\n"
        "smaps_period = 500ms\n"
        "system_period = 400ms\n"
        f"runtime_dir = {workdir / 'run'}\n"
        "log_level = info\n"
        "[spool]\n"
        f"path = {workdir / 'spool'}\n"
        "size = 64KiB\n"
        "sync_interval = 1s\n"
        "[target]\n"
        f"cmdline = edgemon-soak-target-{marker}\n"
        "[mqtt]\n"
        f"broker = mqtt://127.0.0.1:{port}\n"
        "keepalive = 5s\n"
        "reconnect_min = 100ms\n"
        "reconnect_max = 500ms\n"
        "[budget.infer]\n"
        "deadline = 50ms\n"
        "level = DEGRADED\n"
        "[degrade]\n"
        "window = 500ms\n"
        "enter_windows = 1\n"
        "leave_windows = 2\n")


def vm_rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


LEAK_KINDS = ("definitely lost", "indirectly lost", "possibly lost")


def read_valgrind_log(path):
    """(error count or None, {leak kind: bytes}, no_leaks_possible) from a memcheck log."""
    text = path.read_text(errors="replace") if path.exists() else ""
    m = re.findall(r"ERROR SUMMARY: ([\d,]+) errors", text)
    errors = int(m[-1].replace(",", "")) if m else None
    leaks = {}
    for kind in LEAK_KINDS:
        k = re.findall(kind + r": ([\d,]+) bytes", text)
        if k:
            leaks[kind] = int(k[-1].replace(",", ""))
    return errors, leaks, "no leaks are possible" in text


def median_kib(samples):
    return int(statistics.median(samples)) if samples else 0


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--agent", required=True, help="the edgemon-agent binary")
    p.add_argument("--seconds", type=float, default=300, help="how long to soak (default 300)")
    p.add_argument("--restart-every", type=float, default=30,
                   help="kill and restart the broker every this many s (default 30)")
    p.add_argument("--broker-down", type=float, default=1.0,
                   help="how long the broker stays down at each restart (default 1 s)")
    p.add_argument("--rate", type=float, default=3000, help="spans per second (default 3000)")
    p.add_argument("--valgrind", default="valgrind")
    p.add_argument("--freelist-vol", type=int, default=FREELIST_VOL,
                   help=f"memcheck's freed-block quarantine in bytes (default {FREELIST_VOL})")
    p.add_argument("--mosquitto", default=os.environ.get("EM_MOSQUITTO", "/usr/sbin/mosquitto"))
    p.add_argument("--suppressions", help="a valgrind suppressions file (none by default)")
    p.add_argument("--workdir", help="where logs go (default: a temporary directory)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    a = p.parse_args(argv)
    if a.seconds < 15 or a.restart_every < 5 or a.rate <= 0 or a.broker_down < 0:
        p.error("need --seconds >= 15, --restart-every >= 5, --rate > 0, --broker-down >= 0")
    if a.broker_down >= a.restart_every / 2:
        p.error("--broker-down must be under half of --restart-every")
    if not os.access(a.agent, os.X_OK):
        p.error(f"--agent {a.agent}: not an executable file")
    for tool in (a.valgrind, a.mosquitto):
        if not shutil.which(tool):
            p.error(f"{tool}: not found (install it: apt-get install valgrind / mosquitto)")
    if a.suppressions and not os.path.isfile(a.suppressions):
        p.error(f"--suppressions {a.suppressions}: no such file")
    return a


def run(a, workdir):
    port = free_port()
    device = f"soak-{uuid.uuid4().hex[:8]}"
    marker = uuid.uuid4().hex[:12]
    (workdir / "run").mkdir(exist_ok=True)
    config = workdir / "agent.ini"
    config.write_text(agent_config(workdir, device, port, marker))
    vg_log = workdir / "valgrind.log"
    procs = []
    failures = []
    broker = Broker(a.mosquitto, workdir, port)
    sub = None
    try:
        broker.start()
        target = subprocess.Popen([sys.executable, "-c", TARGET.format(marker=marker)])
        procs.append(target)
        sub = Subscriber(port, device)
        vg = [a.valgrind, "--tool=memcheck", "--leak-check=full",
              "--show-leak-kinds=definite,indirect,possible",
              "--errors-for-leak-kinds=definite,indirect",
              f"--error-exitcode={VALGRIND_ERROR_EXIT}", "--track-fds=no",
              f"--freelist-vol={a.freelist_vol}",
              f"--log-file={vg_log}"]
        if a.suppressions:
            vg.append(f"--suppressions={a.suppressions}")
        agent_log = open(workdir / "agent.log", "wb")
        agent = subprocess.Popen(vg + [a.agent, "--config", str(config)], stdout=agent_log,
                                 stderr=subprocess.STDOUT)
        procs.append(agent)
        sock = workdir / "run" / "spans.sock"
        deadline = time.monotonic() + 60
        while not sock.exists():
            if agent.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the agent did not open {sock} (exit {agent.poll()}); "
                                   f"see {workdir / 'agent.log'} and {vg_log}")
            time.sleep(0.1)
        log(f"agent pid {agent.pid} under valgrind, broker port {port}, device {device}, "
            f"{a.seconds:.0f} s, broker restart every {a.restart_every:.0f} s, "
            f"{a.rate:.0f} spans/s, logs in {workdir}")
        sender = subprocess.Popen(
            [sys.executable, "-c", SENDER, str(ROOT / "firmware" / "client" / "python"),
             str(sock), str(a.rate), str(a.seconds)], stdout=subprocess.PIPE, text=True)
        procs.append(sender)

        start = time.monotonic()
        rss = []  # (seconds since start, KiB)
        restarts = []  # monotonic time the broker was back
        next_restart = start + a.restart_every
        next_sample = start
        while True:
            now = time.monotonic()
            if now - start >= a.seconds:
                break
            if agent.poll() is not None:
                failures.append(f"the agent exited early with {agent.returncode}")
                break
            if now >= next_sample:
                kib = vm_rss_kib(agent.pid)
                if kib is not None:
                    rss.append((now - start, kib))
                next_sample += 1.0
            if now >= next_restart and now - start < a.seconds - a.restart_every / 2:
                broker.kill()
                time.sleep(a.broker_down)
                broker.start()
                restarts.append(time.monotonic())
                log(f"broker restarted ({len(restarts)}) at {time.monotonic() - start:.0f} s,"
                    f" RSS {rss[-1][1] if rss else '?'} KiB, data so far "
                    f"{len(sub.data_times)}")
                next_restart += a.restart_every
            time.sleep(0.05)
        end = time.monotonic()

        out, _ = sender.communicate(timeout=30)
        try:
            sent = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            sent = None
            failures.append(f"the sender printed no counters (exit {sender.returncode})")

        # Data after each restart: between the broker coming back and the next restart (or
        # the end), the subscriber must have received data messages again.
        bounds = restarts + [end]
        per_restart = [sub.data_between(bounds[i], bounds[i + 1]) for i in range(len(restarts))]
        for i, n in enumerate(per_restart):
            if n == 0:
                failures.append(f"no data message after broker restart {i + 1}")
        if not restarts:
            failures.append("the broker was never restarted (--seconds too short?)")
        data_before = sub.data_between(start - 3600, restarts[0] if restarts else end)
        if data_before == 0:
            failures.append("no data message before the first broker restart")
        if "DEGRADED" not in sub.levels or "NOMINAL" not in sub.levels:
            failures.append(f"the level never changed both ways: data levels {sub.levels}")

        log("stopping the agent (SIGTERM); valgrind's leak check runs now")
        agent.send_signal(signal.SIGTERM)
        try:
            rc = agent.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            rc = None
            failures.append(f"the agent did not exit within {STOP_TIMEOUT_S} s of SIGTERM")

        errors, leaks, no_leaks = read_valgrind_log(vg_log)
        if rc == VALGRIND_ERROR_EXIT:
            failures.append("valgrind exited with the error exit code 99 (errors or leaks)")
        elif rc != 0 and rc is not None:
            failures.append(f"the agent under valgrind exited with {rc}, not 0")
        if errors is None:
            failures.append(f"no ERROR SUMMARY in {vg_log}")
        elif errors != 0:
            failures.append(f"valgrind: ERROR SUMMARY: {errors} errors (see {vg_log})")
        if not no_leaks:
            for kind in LEAK_KINDS:
                if kind not in leaks:
                    failures.append(f"valgrind log has no '{kind}' line and no 'no leaks "
                                    "are possible'")
                elif leaks[kind] != 0:
                    failures.append(f"valgrind: {kind}: {leaks[kind]} bytes (see {vg_log})")

        # RSS flat after warm-up.
        kib = [k for _, k in rss]
        third = len(kib) // 3
        if third < 3:
            failures.append(f"too few RSS samples ({len(kib)})")
            mid = last = 0
        else:
            mid, last = median_kib(kib[third:2 * third]), median_kib(kib[2 * third:])
            bound = mid * (1 + RSS_GROWTH_FRACTION) + RSS_GROWTH_KIB
            if last > bound:
                failures.append(f"RSS grew: median of the last third {last} KiB > bound "
                                f"{bound:.0f} KiB (second third median {mid} KiB + "
                                f"{RSS_GROWTH_FRACTION:.0%} + {RSS_GROWTH_KIB} KiB)")

        print("soak summary:")
        print(f"  duration {end - start:.0f} s, broker restarts {len(restarts)}, subscriber "
              f"(re)connects {sub.connects}, births {sub.births}, state messages {sub.states}")
        print(f"  data messages {len(sub.data_times)} (before the first restart "
              f"{data_before}, after each restart {per_restart}), levels {sub.levels}, replayed from the spool "
              f"(historical) {sub.historical}")
        if sent:
            print(f"  spans: {sent['attempts']} attempted, {sent['sent']} sent, dropped "
                  f"{sent['dropped']}, {sent['over_budget']} over the infer deadline")
        if kib:
            print(f"  VmRSS of valgrind+agent (KiB): first {kib[0]}, min {min(kib)}, max "
                  f"{max(kib)}, last {kib[-1]}; medians: first third "
                  f"{median_kib(kib[:third])}, second {mid}, last {last} ({len(kib)} samples)")
        connects = (workdir / "agent.log").read_text(errors="replace").count("mqtt: connected")
        print(f"  agent log: {connects} MQTT connects")
        print(f"  valgrind: exit {rc}, ERROR SUMMARY {errors} errors, leaks "
              f"{'none possible' if no_leaks else leaks}")
        with open(workdir / "rss.csv", "w") as f:
            f.write("seconds,vmrss_kib\n")
            for t, k in rss:
                f.write(f"{t:.1f},{k}\n")
        return failures
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.kill()
                p.wait(10)
        broker.kill()
        if sub:
            sub.close()


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    tmp = None
    if a.workdir:
        workdir = Path(a.workdir).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.mkdtemp(prefix="edgemon-soak-")
        workdir = Path(tmp)
    try:
        failures = run(a, workdir)
    except RuntimeError as e:
        print(f"soak: setup failed: {e}", file=sys.stderr)
        return 2
    if failures:
        print("soak: FAIL", file=sys.stderr)
        for f in failures:
            print(f"  - {f}", file=sys.stderr)
        print(f"soak: logs kept in {workdir}", file=sys.stderr)
        return 1
    print("soak: PASS")
    if tmp and not a.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    elif tmp:
        print(f"soak: logs in {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
