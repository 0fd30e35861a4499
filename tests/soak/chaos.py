#!/usr/bin/env python3
"""The end-to-end chaos run: three agents with real targets sending spans, a broker, the
aggregator, and every fault the fleet meets, in turn and overlapping; then the accounting of
every sequence number of every session in the aggregator's SQLite.

Run it through chaos.sh, which makes the network namespace this needs (the link faults are
nftables rules that only exist inside it). What runs, the faults and the accounting are in
tests/soak/README.md ("Chaos run").

    chaos.py --agent BIN --aggregator BIN [--cycles N | --minutes M] [--workdir DIR] [--keep]

Exit status: 0 pass (0 unexplained gaps, integrity ok, no process ended unasked), 1 a check
failed (each reason printed), 2 bad usage or setup.
"""

import argparse
import os
import re
import resource
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from soaklib import conclude, free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "firmware" / "client" / "python" / "examples" / "sample_inference.py"
MOSQUITTO = os.environ.get("EM_MOSQUITTO", "/usr/sbin/mosquitto")
NFT = shutil.which("nft") or "/usr/sbin/nft"
ACK_TIMEOUT_S = 2

failures = []


def log(msg):
    print(f"chaos: [{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def check(ok, what):
    if not ok:
        failures.append(what)
        log(f"FAILED: {what}")
    return ok


class Proc:
    """A process the run owns: started, killed and started again only by the run. Any other
    end is a failure (`expect_alive`)."""

    def __init__(self, name, work):
        self.name = name
        self.log_path = work / f"{name}.log"
        self.proc = None
        self.lives = 0

    def argv(self):
        raise NotImplementedError

    def start(self, preexec=None, env=None, log_path=None):
        with open(log_path or self.log_path, "ab") as out:
            self.proc = subprocess.Popen(self.argv(), stdout=out, stderr=subprocess.STDOUT,
                                         preexec_fn=preexec, env=env)
        self.lives += 1
        return self

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def expect_alive(self):
        return check(self.alive(), f"{self.name} ended on its own "
                     f"(exit {self.proc.returncode if self.proc else None}; {self.log_path})")

    def kill(self, sig=signal.SIGKILL):
        self.expect_alive()
        if self.alive():
            self.proc.send_signal(sig)
            self.proc.wait(20)

    def stop(self):
        """SIGTERM; returns the exit status (a clean stop is 0)."""
        if not self.alive():
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            return "hung on SIGTERM"


class Broker(Proc):
    def __init__(self, work, port):
        super().__init__("mosquitto", work)
        self.port = port
        store = work / "mosquitto-store"
        store.mkdir(exist_ok=True)
        self.conf = work / "mosquitto.conf"
        # As the shipped config (firmware/mosquitto/mosquitto-edgemon.conf): a deep queue for
        # the aggregator's persistent session, kept on disk. Saved every second here, so a
        # SIGKILL loses at most what the broker took in its last second and had not delivered.
        user = "user root\n" if os.geteuid() == 0 else ""
        self.conf.write_text(
            f"listener {port}\nallow_anonymous true\nmax_queued_messages 1000000\n"
            "max_inflight_messages 20\npersistence true\n"
            f"persistence_location {store}/\nautosave_interval 1\n{user}")

    def argv(self):
        return [MOSQUITTO, "-c", str(self.conf)]

    def start(self, preexec=None, env=None):
        super().start()
        wait_until(self._listening, 15, "mosquitto listening")
        return self

    def _listening(self):
        if not self.alive():
            raise RuntimeError(f"mosquitto exited: {self.log_path}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False


class Target(Proc):
    """The sample inference loop (real spans through the Python client's ring), its pid in a
    file the agent follows (`[target] pid_file`), so a restarted target is found again."""

    def __init__(self, work, name, runtime_dir, fps):
        super().__init__(f"target-{name}", work)
        self.runtime_dir = runtime_dir
        self.pid_file = work / f"target-{name}.pid"
        self.fps = fps

    def argv(self):
        return [sys.executable, str(SAMPLE), "--fps", str(self.fps), "--slow-every", "97"]

    def start(self, preexec=None, env=None):
        super().start(env={**os.environ, "EDGEMON_RUNTIME_DIR": str(self.runtime_dir)})
        tmp = self.pid_file.with_suffix(".tmp")
        tmp.write_text(f"{self.proc.pid}\n")
        tmp.replace(self.pid_file)
        return self


BUDGETS = [
    "[budget.infer]\np99 = 40ms\nlevel = WARN\n",
    "[budget.infer]\np99 = 1ms\nlevel = WARN\n",  # Breached: WARN until the next SIGHUP.
]


class Agent(Proc):
    """edgemon-agent at qos_data = 1 with write-ahead, reaching the broker at its own loopback
    address (127.0.0.<octet>), so that one agent's link can be cut on its own."""

    def __init__(self, work, name, octet, port, spool_size, period, target):
        super().__init__(f"agent-{name}", work)
        self.period = period
        self.device = f"chaos-{name}"
        self.octet = octet
        self.port = port
        self.spool = work / f"spool-{name}"
        self.spool_size = spool_size
        self.target = target
        self.config = work / f"agent-{name}.ini"
        self.budget = 0
        self.write_config()

    def write_config(self):
        self.config.write_text(
            "[agent]\n"
            f"device_id = {self.device}\n"
            f"sample_period = {self.period}\nsmaps_period = 1s\nsystem_period = 1s\n"
            f"runtime_dir = {self.target.runtime_dir}\n"
            "[target]\n"
            f"pid_file = {self.target.pid_file}\n"
            + BUDGETS[self.budget] +
            "[spool]\n"
            f"path = {self.spool}\nsize = {self.spool_size}\nsync_interval = 200ms\n"
            "write_ahead = true\n"
            "[mqtt]\n"
            f"broker = mqtt://127.0.0.{self.octet}:{self.port}\n"
            f"qos_data = 1\nack_timeout = {ACK_TIMEOUT_S}s\nkeepalive = 5s\n"
            "reconnect_min = 100ms\nreconnect_max = 1s\n")

    def argv(self):
        return [os.environ["EM_AGENT"], "--config", str(self.config)]

    def reload_with_new_budgets(self):
        self.budget = 1 - self.budget
        self.write_config()
        self.kill(signal.SIGHUP)

    def kill(self, sig=signal.SIGKILL):
        if sig == signal.SIGHUP:
            self.expect_alive()
            if self.alive():
                self.proc.send_signal(sig)
            return
        super().kill(sig)


class Aggregator(Proc):
    def __init__(self, work, port):
        super().__init__("aggregator", work)
        self.db = work / "fleet.db"
        self.port = port
        self.http = None
        self.duplicates = 0  # Counted by the lives before this one.
        self.life_duplicates = 0

    def argv(self):
        return [os.environ["EM_AGGREGATOR"], "--broker", f"mqtt://127.0.0.1:{self.port}",
                "--db", str(self.db), "--http", "127.0.0.1:0", "--device-ttl", "1h"]

    def start(self, preexec=None, env=None):
        self.duplicates += self.life_duplicates
        self.life_duplicates = 0
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        super().start()

        def port():
            if not self.alive():
                raise RuntimeError(f"the aggregator exited: {self.log_path}")
            text = self.log_path.read_bytes()[offset:].decode(errors="replace")
            m = re.search(r"http: serving on http://127\.0\.0\.1:(\d+)", text)
            return m and int(m.group(1))

        self.http = wait_until(port, 15, "the aggregator's HTTP port")
        return self

    def poll_duplicates(self):
        """Reads edgemon_aggregator_duplicates_total of the running life (a SIGKILL loses
        only the count since the last poll, never a row)."""
        if not self.alive():
            return
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return
        m = re.search(r"^edgemon_aggregator_duplicates_total (\d+)", text, re.M)
        if m:
            self.life_duplicates = int(m.group(1))


class Link:
    """nftables rules in the run's own network namespace: drop every packet between one
    agent's broker address and the broker's port, both ways, silently."""

    def __init__(self, port):
        self.port = port
        nft("add table inet chaos")
        nft("add chain inet chaos out { type filter hook output priority 0 ; }")

    def cut(self, octet):
        addr = f"127.0.0.{octet}"
        nft(f"add rule inet chaos out ip daddr {addr} tcp dport {self.port} drop")
        nft(f"add rule inet chaos out ip saddr {addr} tcp sport {self.port} drop")

    def heal(self):
        nft("flush chain inet chaos out")


def nft(args):
    subprocess.run([NFT] + args.split(), check=True, capture_output=True, text=True)


class Run:
    def __init__(self, work):
        self.work = work
        port = free_port()
        self.broker = Broker(work, port)
        self.targets = {}
        self.agents = {}
        # a: the link cut and the kill -9 (4 MiB spool); b: the spool that cannot grow;
        # c: a 64 KiB spool that a long broker outage overruns (drops, counted), at 20 data
        # messages a second.
        for name, octet, size, period, fps in (("a", 11, "4MiB", "100ms", 30),
                                               ("b", 12, "4MiB", "100ms", 25),
                                               ("c", 13, "64KiB", "50ms", 20)):
            rd = work / f"run-{name}"
            rd.mkdir(mode=0o700)
            t = Target(work, name, rd, fps)
            self.targets[name] = t
            self.agents[name] = Agent(work, name, octet, port, size, period, t)
        self.aggregator = Aggregator(work, port)
        self.link = Link(port)
        self.faults = 0

    def everyone(self):
        return [self.broker, self.aggregator, *self.targets.values(), *self.agents.values()]

    def start(self):
        self.broker.start()
        self.aggregator.start()
        for name, t in self.targets.items():
            t.start()
            self.agents[name].start()
        wait_until(lambda: self.stored_devices() == 3, 30, "data from the three agents")
        # The broker keeps the aggregator's session (and so queues for it while it is away)
        # across a SIGKILL only once it has saved it: a broker killed before its first save
        # comes back without the session, and what the agents send before the aggregator
        # subscribes again is not kept for it (docs/RELIABILITY.md).
        saves = self.broker.log_path.read_text().count("Saving in-memory database")
        wait_until(lambda: self.broker.log_path.read_text().count("Saving in-memory database")
                   > saves, 15, "the broker's first save with the aggregator's session")

    def stored_devices(self):
        try:
            with sqlite3.connect(f"file:{self.aggregator.db}?mode=ro", uri=True) as db:
                return db.execute("SELECT count(DISTINCT device) FROM data").fetchone()[0]
        except sqlite3.Error:
            return 0

    def pause(self, seconds):
        """Sleeps, watching that nothing ended on its own and reading the duplicate count."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.aggregator.poll_duplicates()
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))

    def fault(self, what):
        self.faults += 1
        log(what)
        for p in self.everyone():
            p.expect_alive()

    def cycle(self, n):
        b, a, agents, targets = self.broker, self.aggregator, self.agents, self.targets
        self.fault(f"cycle {n}: broker SIGKILL, down 2 s")
        b.kill()
        self.pause(2)
        b.start()
        self.pause(6)
        self.fault("agent a SIGKILL, started again after 1 s")
        agents["a"].kill()
        self.pause(1)
        agents["a"].start()
        self.pause(5)
        self.fault("target b restarted (a new process, the same pid file)")
        targets["b"].kill()
        targets["b"].start()
        self.pause(5)
        self.fault("aggregator SIGKILL, down 3 s")
        a.kill()
        self.pause(3)
        a.start()
        self.pause(5)
        self.fault("agent a: SIGHUP with new budgets")
        agents["a"].reload_with_new_budgets()
        self.pause(5)
        self.fault("agent b restarted on a spool that cannot grow (RLIMIT_FSIZE), "
                   f"then the broker stops acknowledging (SIGSTOP) for {ACK_TIMEOUT_S + 3} s")
        agents["b"].kill(signal.SIGTERM)
        def cap():  # Appends past 8 KiB (4 KiB into the ring) fail with EFBIG, as on a full disk.
            limit = 8 * 1024
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        # Its log goes to a file of its own: the limit applies to every file it writes.
        agents["b"].start(preexec=cap, log_path=self.work / f"agent-b-capped-{n}.log")
        self.pause(3)
        b.proc.send_signal(signal.SIGSTOP)
        self.pause(ACK_TIMEOUT_S + 3)
        b.proc.send_signal(signal.SIGCONT)
        self.pause(4)
        agents["b"].kill(signal.SIGTERM)
        agents["b"].start()
        self.pause(4)
        self.fault(f"agent a's link drops every packet for {ACK_TIMEOUT_S + 6} s; inside it, "
                   "agent a SIGKILL and restart, broker SIGKILL and restart")
        self.link.cut(agents["a"].octet)
        self.pause(ACK_TIMEOUT_S + 1)
        agents["a"].kill()
        agents["a"].start()
        self.pause(1)
        b.kill()
        self.pause(1)
        b.start()
        self.pause(3)
        self.link.heal()
        self.pause(6)
        self.fault("broker SIGKILL, down 12 s (agent c's 64 KiB spool overruns)")
        b.kill()
        self.pause(12)
        b.start()
        self.pause(8)

    def drain(self):
        """Waits until each agent's newest data message says its spool has nothing left to
        replay."""
        log("faults over: waiting for the spools to drain")
        wait_until(lambda: self.pending() == [0, 0, 0], 180, "every spool to drain")

    def pending(self):
        """spool.pending in the newest stored data message of each device."""
        try:
            with sqlite3.connect(f"file:{self.aggregator.db}?mode=ro", uri=True) as db:
                key = db.execute("SELECT id FROM metrics WHERE name = 'spool.pending'").fetchone()
                return [r[0] for r in db.execute(
                    "SELECT json_extract(vals, ?1) FROM data d WHERE time_ns = "
                    "(SELECT max(time_ns) FROM data e WHERE e.device = d.device "
                    " AND e.seq IS NOT NULL) ORDER BY device", (f'$."{key[0]}"',))]
        except (sqlite3.Error, TypeError):
            return None

    def query_counts(self):
        try:
            with sqlite3.connect(f"file:{self.aggregator.db}?mode=ro", uri=True) as db:
                return db.execute("SELECT device, session, count(*) FROM data "
                                  "WHERE seq IS NOT NULL GROUP BY 1, 2").fetchall()
        except sqlite3.Error:
            return None

    def stop(self):
        for name, agent in self.agents.items():
            agent.expect_alive()
            check(agent.stop() == 0, f"agent {name} did not stop cleanly on SIGTERM")

        def settled():  # What the agents sent before they stopped, stored.
            rows = self.query_counts()
            self.pause(2)
            return rows and rows == self.query_counts()

        wait_until(settled, 60, "the stored rows to settle")
        self.aggregator.poll_duplicates()
        self.aggregator.expect_alive()
        check(self.aggregator.stop() == 0, "the aggregator did not stop cleanly on SIGTERM")
        for t in self.targets.values():
            t.expect_alive()
            t.kill()
        self.broker.expect_alive()
        self.broker.stop()


# What an agent logs for each message it publishes that is not a data message, and the rows
# the store keeps for one: a level change (a state message with a reason), a flight recording, a
# stack profile. The spool evicts and counts these like data messages.
LOGGED_KINDS = (
    (re.compile(r"^\w+: level \w+ \(was \w+\)", re.M),
     "SELECT count(*) FROM level_changes l JOIN devices v ON v.id = l.device"
     " WHERE v.name = ?1 AND coalesce(l.reason, '') != ''"),
    (re.compile(r"^info: flight: recording \d+: ", re.M),
     "SELECT count(*) FROM flights f JOIN devices v ON v.id = f.device WHERE v.name = ?1"),
    (re.compile(r"^info: profile: window \d+: ", re.M),
     "SELECT count(*) FROM profiles p JOIN devices v ON v.id = p.device WHERE v.name = ?1"),
)


def others_missing(db, device, logs):
    """Messages other than data the agent's logs say it published and the store lacks, summed
    over the kinds (never below 0 for a kind: a replayed one may be stored twice)."""
    text = "".join(p.read_text(errors="replace") for p in logs)
    return sum(max(0, len(rx.findall(text)) - db.execute(q, (device,)).fetchone()[0])
               for rx, q in LOGGED_KINDS)


def account(db_path, duplicates, work):
    """The accounting table; returns the number of unexplained gaps (missing sequence numbers
    not counted by the agent as dropped or lost). The spool counts every message it evicts, of
    any kind, so the level changes, flight recordings and profiles an agent logged and the
    store lacks are part of what its counted drops explain."""
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    check(db.execute("PRAGMA integrity_check").fetchone()[0] == "ok", "PRAGMA integrity_check")
    ids = dict(db.execute("SELECT name, id FROM metrics"))
    dropped_key = f'$."{ids.get("spool.dropped", -1)}"'
    lost_key = f'$."{ids.get("spool.lost", -1)}"'
    rows = db.execute(
        "SELECT v.name, d.session, count(*), max(d.seq), "
        " max(json_extract(d.vals, ?1)), max(json_extract(d.vals, ?2))"
        " FROM data d JOIN devices v ON v.id = d.device WHERE d.seq IS NOT NULL"
        " GROUP BY 1, 2 ORDER BY 1, min(d.time_ns)", (dropped_key, lost_key)).fetchall()
    table = {}
    for device, session, stored, last, dropped, lost in rows:
        t = table.setdefault(device, {"sessions": 0, "sent": 0, "stored": 0, "dropped": 0,
                                      "lost": 0})
        t["sessions"] += 1
        t["sent"] += last + 1  # A session numbers its data messages from 0.
        t["stored"] += stored
        t["dropped"] = max(t["dropped"], int(dropped or 0))  # The spool's count, for life.
        t["lost"] += int(lost or 0)  # A process's own count.
    header = ("device", "sessions", "sent", "stored", "duplicates", "others missing",
              "counted drops", "unexplained gaps")
    print("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    unexplained = 0
    for device, t in sorted(table.items()):
        name = device.removeprefix("chaos-")
        t["others"] = others_missing(db, device, sorted(work.glob(f"agent-{name}*.log")))
        gaps = t["sent"] - t["stored"]
        counted = t["dropped"] + t["lost"]
        bad = gaps + t["others"] - counted
        unexplained += abs(bad)
        print(f"| {device} | {t['sessions']} | {t['sent']} | {t['stored']} | - | "
              f"{t['others']} | {counted} ({t['dropped']} dropped, {t['lost']} lost) | {bad} |")
    print(f"| all | {sum(t['sessions'] for t in table.values())} | "
          f"{sum(t['sent'] for t in table.values())} | "
          f"{sum(t['stored'] for t in table.values())} | {duplicates} | "
          f"{sum(t['others'] for t in table.values())} | "
          f"{sum(t['dropped'] + t['lost'] for t in table.values())} | {unexplained} |\n")
    check(len(table) == 3, f"3 devices stored, found {len(table)}")
    return unexplained


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agent", required=True)
    ap.add_argument("--aggregator", required=True)
    ap.add_argument("--cycles", type=int, default=1, help="fault cycles (about 100 s each)")
    ap.add_argument("--minutes", type=float, default=0,
                    help="run cycles until this many minutes have passed (over --cycles)")
    ap.add_argument("--workdir", help="keep everything here (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory on success")
    args = ap.parse_args()
    os.environ["EM_AGENT"] = os.path.abspath(args.agent)
    os.environ["EM_AGGREGATOR"] = os.path.abspath(args.aggregator)
    for path in (args.agent, args.aggregator, MOSQUITTO, NFT):
        if not os.access(path, os.X_OK):
            print(f"chaos: {path}: not an executable", file=sys.stderr)
            return 2
    work = Path(args.workdir or tempfile.mkdtemp(prefix="edgemon-chaos-"))
    work.mkdir(parents=True, exist_ok=True)
    log(f"work directory {work}")
    run = Run(work)
    t0 = time.monotonic()
    try:
        run.start()
        n = 0
        while n < args.cycles or time.monotonic() - t0 < args.minutes * 60:
            n += 1
            run.cycle(n)
        run.link.heal()
        run.drain()
        run.stop()
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:  # TimeoutError too
        check(False, f"the run could not go on: {e}")
        for p in run.everyone():
            if p.alive():
                p.proc.kill()
        print(f"chaos: logs kept in {work}")
        return 1
    minutes = (time.monotonic() - t0) / 60
    log(f"{n} cycle(s), {run.faults} faults in {minutes:.1f} min; accounting:")
    unexplained = account(run.aggregator.db, run.aggregator.duplicates +
                          run.aggregator.life_duplicates, work)
    check(unexplained == 0, f"{unexplained} unexplained gap(s)")
    failed = f"chaos: FAILED ({len(failures)} check(s)); logs kept in {work}" if failures else ""
    return conclude(work, args.keep or args.workdir, failed, "chaos: passed")


if __name__ == "__main__":
    sys.exit(main())
