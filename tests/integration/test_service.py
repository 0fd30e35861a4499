"""The agent as a systemd service: the shipped unit passes `systemd-analyze verify`, the
sd_notify protocol (READY=1 after the first sample, WATCHDOG=1 while ticks are on time,
RELOADING=1/READY=1 around SIGHUP, STOPPING=1) is spoken to a real NOTIFY_SOCKET, SIGHUP
reloads budgets and the target without losing the level or the connection, and SIGTERM ends
the process within its bound even when the broker never answers.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import time

import queue

import pytest

from conftest import AGENT, ROOT, edgemon_proto, wait_for
from test_spans import sender, span

UNIT = ROOT / "firmware/systemd/edgemon-agent.service"


def test_unit_passes_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    text = UNIT.read_text()
    assert "ExecStart=/usr/bin/edgemon-agent " in text
    for key in ("Type=notify", "WatchdogSec=", "Restart=on-failure", "RuntimeDirectory=",
                "ProtectSystem=strict", "NoNewPrivileges=yes", "CAP_PERFMON"):
        assert key in text, key
    # verify checks that ExecStart exists: point it at the binary under test, change nothing
    # else.
    unit = tmp_path / "edgemon-agent.service"
    agent = os.path.abspath(AGENT)
    unit.write_text(text.replace("/usr/bin/edgemon-agent", agent))
    r = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == "", r.stderr
    # And a unit with a mistake in it does not pass, so the check above means something.
    bad = tmp_path / "bad.service"
    bad.write_text(text.replace("/usr/bin/edgemon-agent", agent).replace(
        "Restart=on-failure", "Restart=sometimes"))
    r = subprocess.run([analyze, "verify", str(bad)], capture_output=True, text=True,
                       timeout=60)
    assert "restart specifier" in r.stderr, r.stderr


class Notify:
    """A NOTIFY_SOCKET as systemd offers it: a unix datagram socket that collects messages."""

    def __init__(self, tmp_path):
        self.path = tmp_path / "notify.sock"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(self.path))
        self.sock.settimeout(0.2)
        self.got = []  # (monotonic s, {key: value})

    def poll(self):
        try:
            while True:
                raw = self.sock.recv(4096).decode()
                fields = dict(line.split("=", 1) for line in raw.split("\n") if "=" in line)
                self.got.append((time.monotonic(), fields))
        except socket.timeout:
            pass
        return self.got

    def wait(self, key, value, timeout=10, after=0):
        def seen():
            self.poll()
            return next((f for t, f in self.got[after:] if f.get(key) == value), None)
        return wait_for(seen, timeout, f"{key}={value} on NOTIFY_SOCKET")


def notified_agent(stack, tmp_path):
    """(broker, Notify, agent): an agent watching a busy target, told by NOTIFY_SOCKET and
    WATCHDOG_USEC (400 ms) to notify a Notify socket as under systemd."""
    broker = stack.broker()
    target = stack.target()
    notify = Notify(tmp_path)
    agent = stack.agent(broker.port, f"cmdline = {target.marker}",
                        env={"NOTIFY_SOCKET": str(notify.path), "WATCHDOG_USEC": "400000"})
    return broker, notify, agent


def test_ready_after_the_first_sample_then_watchdog_pings(stack, tmp_path):
    broker, notify, agent = notified_agent(stack, tmp_path)
    ready = notify.wait("READY", "1")
    assert agent.device in ready["STATUS"]
    # READY=1 follows the first sample: a data message is on the broker by then.
    sub = stack.subscriber(broker.port, agent.device)
    sub.next("data")
    n = len(notify.got)
    wait_for(lambda: sum(1 for _, f in notify.poll()[n:] if f.get("WATCHDOG") == "1") >= 4,
             10, "4 watchdog pings")
    assert agent.stop() == 0
    notify.wait("STOPPING", "1", timeout=2)


def test_a_stopped_loop_stops_pinging(stack, tmp_path):
    broker, notify, agent = notified_agent(stack, tmp_path)
    notify.wait("WATCHDOG", "1")
    agent.proc.send_signal(signal.SIGSTOP)  # The loop is stuck: no tick runs at all.
    try:
        notify.poll()
        n = len(notify.got)
        time.sleep(1.5)
        assert [f for _, f in notify.poll()[n:] if f.get("WATCHDOG")] == []
    finally:
        agent.proc.send_signal(signal.SIGCONT)
    # Once ticks are on time again, the pings come back.
    notify.wait("WATCHDOG", "1", after=len(notify.got))


def pump(sub):
    """Moves what the subscriber has received into sub.seen without waiting."""
    while True:
        try:
            sub.seen.append(sub.messages.get_nowait())
        except queue.Empty:
            return


def decoded(sub, kind):
    pump(sub)
    return [edgemon_proto.decode(p) for _, k, p, _ in sub.seen if k == kind]


def budget(bound_ms):
    return (f"[budget.infer]\np99 = {bound_ms}ms\nlevel = DEGRADED\n"
            "[degrade]\nwindow = 200ms\nenter_windows = 1\nleave_windows = 2\n")


def test_sighup_reloads_budgets_keeping_level_and_connection(stack, tmp_path):
    broker = stack.broker()
    target = stack.target()
    notify = Notify(tmp_path)
    agent = stack.agent(broker.port, f"cmdline = {target.marker}", extra=budget(50),
                        env={"NOTIFY_SOCKET": str(notify.path)})
    sub = stack.subscriber(broker.port, agent.device)
    birth = sub.next("birth")
    assert birth["budgets"][0]["bound"] == 50_000_000
    s = sender(stack.tmp / "run" / "spans.sock")

    def feed(ms, level, timeout=10):
        """Sends spans of `ms` until a state message says `level`."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for _ in range(5):
                s.send(span("infer", ms * 1_000_000))
            if any(m["level"] == level for m in decoded(sub, "state")):
                return
            time.sleep(0.02)
        pytest.fail(f"no state {level} within {timeout} s")

    feed(80, "DEGRADED")
    statuses = len(decoded(sub, "status"))
    seq_before = max(d["seq"] for d in decoded(sub, "data"))

    # Loosen the bound to 100 ms and reload: same rule id, so its state (and the level) stays.
    text = agent.config.read_text().replace("p99 = 50ms", "p99 = 100ms")
    agent.config.write_text(text)
    agent.proc.send_signal(signal.SIGHUP)
    notify.wait("RELOADING", "1")
    notify.wait("READY", "1")
    again = sub.next("birth", pred=lambda b: b["budgets"][0]["bound"] == 100_000_000)
    assert again["session"] == birth["session"]
    assert "reload: 1 budget rules (1 kept their state), level DEGRADED" in agent.log_text()
    # Spans of 80 ms are now within budget: the level steps down through clean windows.
    feed(80, "NOMINAL")
    # The connection stayed up (no new status message) and data kept its sequence.
    assert len(decoded(sub, "status")) == statuses
    seqs = [d["seq"] for d in decoded(sub, "data") if d["seq"] > seq_before]
    assert seqs == list(range(seq_before + 1, seq_before + 1 + len(seqs)))
    assert agent.proc.poll() is None


def test_sighup_with_a_broken_config_keeps_the_running_one(stack):
    broker, target, agent, sub = stack.watching(extra=budget(50))
    sub.next("birth")
    agent.config.write_text(agent.config.read_text() + "[budget.infer]\np99 = fast\n")
    agent.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "the running config stays" in agent.log_text(), 10, "the reload refusal")
    assert re.search(r"agent-.*\.ini:\d+: ", agent.log_text()), agent.log_text()
    n = len(decoded(sub, "data"))
    wait_for(lambda: len(decoded(sub, "data")) > n + 3, 10, "data after the refused reload")
    assert agent.proc.poll() is None


def test_sighup_changes_the_target(stack):
    broker = stack.broker()
    first = stack.target()
    second = stack.target()
    agent = stack.agent(broker.port, f"cmdline = {first.marker}")
    sub = stack.subscriber(broker.port, agent.device)
    sub.next("birth")
    wait_for(lambda: f"attached to pid {first.pid}" in agent.log_text(), 10, "first attach")
    agent.config.write_text(agent.config.read_text().replace(first.marker, second.marker))
    agent.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: f"attached to pid {second.pid}" in agent.log_text(), 10,
             "the attach to the new target")
    assert f"pid {first.pid} is no longer the target" in agent.log_text()


def test_sigterm_exits_within_its_bound_when_the_broker_hangs(stack):
    broker, _, agent, sub = stack.watching()
    sub.next("data")
    broker.proc.send_signal(signal.SIGSTOP)  # Accepts nothing more, answers nothing.
    try:
        agent.proc.send_signal(signal.SIGTERM)
        code = agent.proc.wait(15)  # The agent's bound is 5 s; this only stops a hang.
    finally:
        broker.proc.send_signal(signal.SIGCONT)
    assert code in (0, 1)
    assert "stopping" in agent.log_text()
