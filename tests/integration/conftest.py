"""Fixtures for the integration tests: a real mosquitto on a free loopback port, a real
edgemon-agent, a busy target process, and an MQTT subscriber (Debian's python3-paho-mqtt).

Every process a test starts is stopped at the end of the test, even when it fails.
"""

import os
import queue
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "proto" / "python"))
import edgemon_proto  # noqa: E402

AGENT = os.environ.get("EM_AGENT")
MOSQUITTO = os.environ.get("EM_MOSQUITTO", "/usr/sbin/mosquitto")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout, what):
    """Polls pred() until it returns something truthy; fails the test after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.02)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


class Broker:
    def __init__(self, tmp_path, port=None):
        self.port = port or free_port()
        self.conf = tmp_path / f"mosquitto-{self.port}.conf"
        self.conf.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
            "max_queued_messages 100000\n")
        self.log = open(tmp_path / f"mosquitto-{self.port}.log", "wb")
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([MOSQUITTO, "-c", str(self.conf)], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        wait_for(self._listening, 10, f"mosquitto on port {self.port}")
        return self

    def _listening(self):
        if self.proc.poll() is not None:
            pytest.fail(f"mosquitto exited with {self.proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


class Target:
    """A busy Python loop with a unique marker in its command line."""

    def __init__(self, marker=None):
        self.marker = marker or f"edgemon-test-target-{uuid.uuid4().hex[:12]}"
        self.proc = None

    def start(self):
        code = f"# {self.marker}\nwhile True:\n    sum(range(1000))\n"
        self.proc = subprocess.Popen([sys.executable, "-c", code])
        return self

    @property
    def pid(self):
        return self.proc.pid

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class Agent:
    def __init__(self, tmp_path, broker_port, target_line, extra="", device=None,
                 runtime_dir=None):
        assert AGENT, "EM_AGENT must name the edgemon-agent binary (run through ctest)"
        self.device = device or f"it-{uuid.uuid4().hex[:8]}"
        self.config = tmp_path / f"agent-{self.device}.ini"
        self.config.write_text(
            "[agent]\n"
            f"device_id = {self.device}\n"
            "sample_period = 100ms\n"
            "smaps_period = 500ms\n"
            "system_period = 400ms\n"
            f"runtime_dir = {runtime_dir or tmp_path / 'run'}\n"
            "log_level = debug\n"
            "[target]\n"
            f"{target_line}\n"
            "[mqtt]\n"
            f"broker = mqtt://127.0.0.1:{broker_port}\n"
            "keepalive = 5s\n"
            "reconnect_min = 100ms\n"
            "reconnect_max = 500ms\n" + extra)
        self.log_path = tmp_path / f"agent-{self.device}.log"
        self.proc = None

    def start(self):
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([AGENT, "--config", str(self.config)], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        return self

    def log_text(self):
        return self.log_path.read_text(errors="replace")

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                return self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                pytest.fail("agent did not stop within 10 s of the signal")
        return self.proc.returncode if self.proc else None


AGGREGATOR = os.environ.get("EM_AGGREGATOR")


class Aggregator:
    """edgemon-aggregator with its database and HTTP port in the test's directory."""

    def __init__(self, tmp_path, broker_port, name="agg", extra_args=()):
        assert AGGREGATOR, "EM_AGGREGATOR must name the edgemon-aggregator binary"
        self.db = tmp_path / f"{name}.db"
        self.log_path = tmp_path / f"{name}.log"
        self.args = [AGGREGATOR, "--broker", f"mqtt://127.0.0.1:{broker_port}", "--db",
                     str(self.db), "--http", "127.0.0.1:0", "--batch-ms", "100", *extra_args]
        self.proc = None
        self.port = None

    def start(self):
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT)
        import re
        m = wait_for(lambda: self._alive() and re.search(
            r"http: serving on http://127\.0\.0\.1:(\d+)", self.log_text()), 10,
            "the aggregator's HTTP port")
        self.port = int(m.group(1))
        wait_for(lambda: "mqtt: connected" in self.log_text(), 10, "the aggregator to connect")
        return self

    def _alive(self):
        if self.proc.poll() is not None:
            pytest.fail(f"aggregator exited with {self.proc.returncode}:\n{self.log_text()}")
        return True

    def log_text(self):
        return self.log_path.read_text(errors="replace")

    def get(self, path, timeout=5):
        """(status, body) of GET http://127.0.0.1:<port><path>."""
        import urllib.error
        import urllib.request
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}",
                                        timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                pytest.fail("aggregator did not stop within 15 s of the signal")
        return self.proc.returncode if self.proc else None


class Subscriber:
    """Collects every message under edgemon/v1/<device>/ with its decoded form."""

    def __init__(self, port, device):
        self.messages = queue.Queue()
        self.seen = []
        self.client = mqtt.Client(client_id=f"it-sub-{uuid.uuid4().hex[:8]}")
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port, keepalive=30)
        self.client.subscribe(f"edgemon/v1/{device}/#", qos=1)
        self.client.loop_start()
        self.device = device

    def _on_message(self, client, userdata, m):
        kind = m.topic.rsplit("/", 1)[-1]
        self.messages.put((m.topic, kind, m.payload, m.retain))

    def next(self, kind, timeout=10, pred=None):
        """The next message of `kind` (birth, data, state, status) that satisfies pred."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no {kind} message within {timeout} s "
                            f"(saw {[k for _, k, _, _ in self.seen][-20:]})")
            try:
                item = self.messages.get(timeout=left)
            except queue.Empty:
                continue
            self.seen.append(item)
            topic, k, payload, retain = item
            if k != kind:
                continue
            msg = edgemon_proto.decode(payload)
            msg["_retain"] = retain
            msg["_raw"] = payload
            if pred is None or pred(msg):
                return msg

    def publish(self, topic, payload):
        self.client.publish(topic, payload, qos=1).wait_for_publish()

    def close(self):
        self.client.loop_stop()
        self.client.disconnect()


@pytest.fixture
def stack(tmp_path):
    """Starts what a test asks for and stops all of it afterwards."""
    started = []

    class Stack:
        tmp = tmp_path

        def broker(self, port=None, start=True):
            b = Broker(tmp_path, port)
            started.append(b)
            return b.start() if start else b

        def target(self, marker=None):
            t = Target(marker).start()
            started.append(t)
            return t

        def agent(self, broker_port, target_line, **kw):
            a = Agent(tmp_path, broker_port, target_line, **kw).start()
            started.append(a)
            return a

        def aggregator(self, broker_port, **kw):
            a = Aggregator(tmp_path, broker_port, **kw).start()
            started.append(a)
            return a

        def subscriber(self, port, device):
            s = Subscriber(port, device)
            started.append(s)
            return s

    yield Stack()
    for thing in reversed(started):
        try:
            thing.close() if isinstance(thing, Subscriber) else thing.stop()
        except Exception:
            pass
