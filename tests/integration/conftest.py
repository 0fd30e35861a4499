"""Fixtures for the integration tests: a real mosquitto on a free loopback port, a real
edgemon-agent, a busy target process, and an MQTT subscriber (Debian's python3-paho-mqtt).

Every process a test starts is stopped at the end of the test, even when it fails.
"""

import contextlib
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


def signal_stop(proc, sig, timeout, failure):
    """Sends `sig` to proc (a Popen) when it still runs and waits `timeout` s for it to exit;
    when it does not, kills it and fails the test with `failure`. Returns its exit status."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            pytest.fail(failure)
    return proc.returncode


def terminate(proc, timeout=10):
    """Stops a subprocess.Popen with SIGTERM, and SIGKILL when it is still running `timeout` s
    later. Returns its exit status."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.returncode


def check_config(path):
    """`edgemon-agent --config path --check`: the CompletedProcess, its output as text."""
    assert AGENT, "EM_AGENT must name the edgemon-agent binary (run through ctest)"
    return subprocess.run([AGENT, "--config", str(path), "--check"], capture_output=True,
                          text=True, timeout=10)


@contextlib.contextmanager
def stopping():
    """A list to append started processes to; each is stopped, last first, on the way out."""
    started = []
    try:
        yield started
    finally:
        for thing in reversed(started):
            try:
                thing.stop()
            except Exception:
                pass


@contextlib.contextmanager
def broker_and_aggregator(tmp, **kw):
    """A broker and an aggregator on it (kw as for Aggregator), files in `tmp`: (broker, agg),
    both stopped on the way out."""
    broker = Broker(tmp).start()
    try:
        agg = Aggregator(tmp, broker.port, **kw).start()
        try:
            yield broker, agg
        finally:
            agg.stop()
    finally:
        broker.stop()


class Broker:
    def __init__(self, tmp_path, port=None):
        self.port = port or free_port()
        self.conf = tmp_path / f"mosquitto-{self.port}.conf"
        # max_queued_messages: mosquitto's default 1000 drops what a QoS 1 subscriber that
        # falls behind (or is away: the aggregator's persistent session) has not taken, 6.8-21.6 k
        # of a 100 k burst; tests queue at most 100 k (firmware/mosquitto/mosquitto-edgemon.conf).
        # persistence false: queues live in memory, a broker restart drops them.
        self.conf.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
            "max_queued_messages 100000\nmax_inflight_messages 20\n")
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
                 runtime_dir=None, env=None, spool=None, spool_keys="", preexec=None):
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
            # Each agent its own spool; [mqtt] stays last, as tests append keys to it.
            "[spool]\n"
            f"path = {spool or tmp_path / f'spool-{self.device}'}\n" + spool_keys +
            "[target]\n"
            f"{target_line}\n"
            "[mqtt]\n"
            f"broker = mqtt://127.0.0.1:{broker_port}\n"
            "keepalive = 5s\n"
            "reconnect_min = 100ms\n"
            "reconnect_max = 500ms\n" + extra)
        self.log_path = tmp_path / f"agent-{self.device}.log"
        self.env = env  # Extra environment variables (NOTIFY_SOCKET, ...).
        self.preexec = preexec  # Runs in the child before exec (resource limits).
        self.proc = None

    def start(self):
        self.log = open(self.log_path, "wb")
        env = {**os.environ, **self.env} if self.env else None
        self.proc = subprocess.Popen([AGENT, "--config", str(self.config)], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env,
                                     preexec_fn=self.preexec)
        return self

    def log_text(self):
        return self.log_path.read_text(errors="replace")

    def stop(self, sig=signal.SIGTERM):
        if self.proc is None:
            return None
        return signal_stop(self.proc, sig, 10, "agent did not stop within 10 s of the signal")


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
        if self.proc is None:
            return None
        return signal_stop(self.proc, sig, 15, "aggregator did not stop within 15 s of the signal")


PROMETHEUS = os.environ.get("EM_PROMETHEUS", "/usr/bin/prometheus")


class Prometheus:
    """Debian's Prometheus on a free loopback port, scraping `targets` (host:port strings) every
    second, its TSDB and log in the test's directory; extra_args such as
    --enable-feature=native-histograms."""

    def __init__(self, tmp_path, targets, extra_args=(), name="prometheus"):
        self.port = free_port()
        self.log_path = tmp_path / f"{name}.log"
        config = tmp_path / f"{name}.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: edgemon\n    static_configs:\n"
            f"      - targets: {list(targets)!r}\n")
        self.args = [PROMETHEUS, f"--config.file={config}",
                     f"--storage.tsdb.path={tmp_path / (name + '-tsdb')}",
                     f"--web.listen-address=127.0.0.1:{self.port}", *extra_args]
        self.proc = None

    def start(self):
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT)
        return self

    def api(self, path):
        """The parsed JSON of a successful GET of path, or None (not up yet, or an error)."""
        import json
        import urllib.request
        if self.proc.poll() is not None:
            pytest.fail(f"prometheus exited with {self.proc.returncode}: "
                        f"{self.log_path.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return json.loads(r.read())
        except (OSError, ValueError):  # URLError and HTTPError are OSErrors
            return None

    def query(self, expr):
        """The result list of an instant query, or None while it is empty or failing."""
        import urllib.parse
        got = self.api("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        if not got or got.get("status") != "success" or not got["data"]["result"]:
            return None
        return got["data"]["result"]

    def stop(self):
        return terminate(self.proc, 15) if self.proc else None


def subscribed_client(port, topics, on_message, prefix="it-sub"):
    """A paho client, its id `prefix` and a random suffix, subscribed at QoS 1 to `topics`
    with on_message as its callback, its network loop running."""
    client = mqtt.Client(client_id=f"{prefix}-{uuid.uuid4().hex[:8]}")
    client.on_message = on_message
    client.connect("127.0.0.1", port, keepalive=30)
    client.subscribe(topics, qos=1)
    client.loop_start()
    return client


class Subscriber:
    """Collects every message under edgemon/v1/<device>/ with its decoded form."""

    def __init__(self, port, device):
        self.messages = queue.Queue()
        self.seen = []
        self.client = subscribed_client(port, f"edgemon/v1/{device}/#", self._on_message)
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
def things():
    """A list for everything a test starts (brokers, agents, paho clients); stopped afterwards, even when the test fails."""
    started = []
    yield started
    for t in reversed(started):
        try:
            if hasattr(t, "loop_stop"):
                t.loop_stop()
                t.disconnect()
            else:
                t.stop()
        except Exception:
            pass


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

        def prometheus(self, targets, **kw):
            p = Prometheus(tmp_path, targets, **kw).start()
            started.append(p)
            return p

        def subscriber(self, port, device):
            s = Subscriber(port, device)
            started.append(s)
            return s

        def on_stop(self, fn):
            """Calls fn() when the test ends, in reverse order with what the stack started."""
            started.append(fn)

        def watching(self, **kw):
            """(broker, target, agent, subscriber): a broker, a busy target, an agent watching
            it by command line (kw as for Agent) and a subscriber to the agent's topics."""
            broker = self.broker()
            target = self.target()
            agent = self.agent(broker.port, f"cmdline = {target.marker}", **kw)
            return broker, target, agent, self.subscriber(broker.port, agent.device)

    yield Stack()
    for thing in reversed(started):
        try:
            if callable(thing):
                thing()
            elif isinstance(thing, Subscriber):
                thing.close()
            else:
                thing.stop()
        except Exception:
            pass


# ---- security helpers (TLS brokers, certificates, authenticated clients) -------------------

OPENSSL = os.environ.get("EM_OPENSSL", "openssl")
MOSQUITTO_PASSWD = os.environ.get("EM_MOSQUITTO_PASSWD", "/usr/bin/mosquitto_passwd")


class Pki:
    """A throw-away CA made with the openssl command line, and certificates it signs."""

    def __init__(self, directory, name="ca"):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca_key = self.dir / f"{name}.key"
        self.ca_crt = self.dir / f"{name}.crt"
        self._run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", self.ca_key,
                  "-out", self.ca_crt, "-days", "2", "-subj", f"/CN=edgemon test {name}")

    def _run(self, *args):
        r = subprocess.run([OPENSSL, *map(str, args)], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, f"openssl {args[0]} failed: {r.stderr}"

    def issue(self, cn, san=None):
        """(cert, key) for CN=cn, with subjectAltName `san` (e.g. "IP:127.0.0.1") if given.
        The key file has mode 0600."""
        key = self.dir / f"{cn}.key"
        csr = self.dir / f"{cn}.csr"
        crt = self.dir / f"{cn}.crt"
        self._run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
                  "-subj", f"/CN={cn}")
        ext = self.dir / f"{cn}.ext"
        ext.write_text(f"subjectAltName = {san}\n" if san else "basicConstraints = CA:FALSE\n")
        self._run("x509", "-req", "-in", csr, "-CA", self.ca_crt, "-CAkey", self.ca_key,
                  "-CAcreateserial", "-out", crt, "-days", "2", "-extfile", ext)
        os.chmod(key, 0o600)
        return crt, key


class ConfBroker(Broker):
    """mosquitto with the configuration text the test gives (listener lines included).
    self.port is the first listener's port; `log_text()` reads the broker's log. Run as
    root, mosquitto would drop to the mosquitto user before reading certificates, password
    and ACL files in pytest's 0700 directories: it is told to stay root ("user root")."""

    def __init__(self, tmp_path, conf_text, port):
        self.port = port
        self.conf = tmp_path / f"mosquitto-{self.port}.conf"
        self.conf.write_text(("user root\n" if os.geteuid() == 0 else "") + conf_text)
        self.log_path = tmp_path / f"mosquitto-{self.port}.log"
        self.log = open(self.log_path, "wb")
        self.proc = None

    def log_text(self):
        return self.log_path.read_text(errors="replace")


def make_password_file(path, users):
    """A mosquitto password_file made with mosquitto_passwd -b, for {user: password}."""
    path = Path(path)
    path.write_text("")
    for user, password in users.items():
        r = subprocess.run([MOSQUITTO_PASSWD, "-b", str(path), user, password],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
    return path


def publish_once(port, topic, payload, retain=False):
    """Publishes one message at QoS 1 from a client of its own, as an agent would, and waits
    (up to 10 s) until the broker has it."""
    client = mqtt.Client(client_id=f"it-pub-{uuid.uuid4().hex[:8]}")
    client.connect("127.0.0.1", port, keepalive=30)
    client.loop_start()
    try:
        client.publish(topic, payload, qos=1, retain=retain).wait_for_publish(10)
    finally:
        client.loop_stop()
        client.disconnect()


def mqtt_client(port, client_id=None, username=None, password=None, tls=None):
    """A connected paho client with its network loop running. tls = (ca, cert, key) or None.
    Fails the test when the broker does not accept the connection."""
    import ssl
    c = mqtt.Client(client_id=client_id or f"it-{uuid.uuid4().hex[:8]}")
    if username is not None:
        c.username_pw_set(username, password)
    if tls is not None:
        ca, cert, key = tls
        c.tls_set(ca_certs=str(ca), certfile=str(cert) if cert else None,
                  keyfile=str(key) if key else None, tls_version=ssl.PROTOCOL_TLS_CLIENT)
    connected = queue.Queue()
    c.on_connect = lambda client, userdata, flags, rc: connected.put(rc)
    c.connect("127.0.0.1", port, keepalive=30)
    c.loop_start()
    try:
        rc = connected.get(timeout=10)
    except queue.Empty:
        c.loop_stop()
        pytest.fail(f"mqtt client {username or ''} got no CONNACK within 10 s")
    if rc != 0:
        c.loop_stop()
        pytest.fail(f"broker refused mqtt client {username or ''}: {mqtt.connack_string(rc)}")
    return c
