"""Security of the agent's broker connection and of the board, against a real mosquitto.

- TLS: certificates made here with the openssl command line (a CA, a broker certificate for
  127.0.0.1/localhost, client certificates whose CN is the identity); a mosquitto TLS listener
  that requires a client certificate; the agent on mqtts:// publishes birth and data to a TLS
  subscriber; an agent that trusts another CA does not connect and says why.
- Username and password: a mosquitto password_file made with mosquitto_passwd; the agent's
  credentials_file (right, wrong, and readable by others: refused at start and by --check).
- ACL: the shipped firmware/mosquitto/edgemon.acl, used as is: device A cannot publish into
  device B's topics, while A's and B's own publishes are delivered.
- The span socket's uid allow-list with a second user (nobody), when the test runs as root.
"""

import os
import queue
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from conftest import (ROOT, Agent, ConfBroker, Pki, Target, check_config, edgemon_proto,
                      free_port, make_password_file, mqtt_client, wait_for)

ACL = ROOT / "firmware" / "mosquitto" / "edgemon.acl"
HOST_USER = "edgemon-host"  # The host-side identity in edgemon.acl.
NOBODY = 65534


class Inbox:
    """Messages a paho client receives, by topic, decoded on demand."""

    def __init__(self, client, pattern):
        self.client = client
        self.q = queue.Queue()
        client.on_message = lambda c, u, m: self.q.put((m.topic, m.payload))
        got = queue.Queue()
        client.on_subscribe = lambda c, u, mid, granted: got.put(granted)
        client.subscribe(pattern, qos=1)
        granted = got.get(timeout=10)
        assert granted[0] != 0x80, f"subscription to {pattern} refused"

    def next(self, topic, timeout=10):
        """The payload of the next message on `topic`; None when none came within timeout."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                t, payload = self.q.get(timeout=left)
            except queue.Empty:
                return None
            if t == topic:
                return payload


def start_agent(things, tmp_path, broker_url, extra, device=None, runtime_dir=None):
    """The agent with `broker = broker_url` and `extra` appended to its [mqtt] section."""
    target = Target().start()
    things.append(target)
    a = Agent(tmp_path, 1, f"cmdline = {target.marker}", extra=extra, device=device,
              runtime_dir=runtime_dir)
    text = a.config.read_text().replace("broker = mqtt://127.0.0.1:1\n", f"broker = {broker_url}\n")
    a.config.write_text(text)
    a.start()
    things.append(a)
    return a


def tls_broker(things, tmp_path, pki, extra=""):
    """mosquitto with one TLS listener requiring a client certificate (CN = username) and
    the shipped ACL."""
    crt, key = pki.issue("broker", san="IP:127.0.0.1,DNS:localhost")
    port = free_port()
    b = ConfBroker(tmp_path, (
        f"per_listener_settings false\nallow_anonymous false\npersistence false\n"
        f"acl_file {ACL}\n"
        f"listener {port} 127.0.0.1\n"
        f"cafile {pki.ca_crt}\ncertfile {crt}\nkeyfile {key}\ntls_version tlsv1.2\n"
        "require_certificate true\nuse_identity_as_username true\n" + extra), port)
    b.start()
    things.append(b)
    return b


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    return Pki(tmp_path_factory.mktemp("pki"))


def tls_agent(things, tmp_path, pki):
    """A TLS broker, the host's subscriber to a new device's topics on it and an agent for that
    device with its own certificate. Returns (broker, device, (host cert, host key), the
    subscriber's Inbox, agent)."""
    broker = tls_broker(things, tmp_path, pki)
    device = f"tls-{uuid.uuid4().hex[:8]}"
    dev_crt, dev_key = pki.issue(device)
    host_crt, host_key = pki.issue(HOST_USER)
    sub = mqtt_client(broker.port, tls=(pki.ca_crt, host_crt, host_key))
    things.append(sub)
    inbox = Inbox(sub, f"edgemon/v1/{device}/#")
    agent = start_agent(things, tmp_path, f"mqtts://127.0.0.1:{broker.port}",
                        f"tls_ca_file = {pki.ca_crt}\ntls_cert_file = {dev_crt}\n"
                        f"tls_key_file = {dev_key}\n", device=device)
    return broker, device, (host_crt, host_key), inbox, agent


def test_agent_publishes_birth_and_data_over_tls_with_a_client_certificate(things, tmp_path,
                                                                           pki):
    broker, device, (host_crt, host_key), inbox, agent = tls_agent(things, tmp_path, pki)
    birth = inbox.next(f"edgemon/v1/{device}/birth", timeout=15)
    assert birth is not None, agent.log_text()
    birth = edgemon_proto.decode(birth)
    assert birth["kind"] == "birth" and birth["device"] == device
    data = inbox.next(f"edgemon/v1/{device}/data", timeout=10)
    assert data is not None, agent.log_text()
    first = edgemon_proto.decode(data)["seq"]
    # Data keeps coming over TLS. A birth (the target attached) starts the sequence again, so
    # read on until a later number shows up rather than expecting the very next message.
    deadline = time.monotonic() + 10
    seqs = []
    while time.monotonic() < deadline and not any(n > first for n in seqs):
        more = inbox.next(f"edgemon/v1/{device}/data", timeout=max(0.1, deadline - time.monotonic()))
        if more is not None:
            seqs.append(edgemon_proto.decode(more)["seq"])
    assert any(n > first for n in seqs), (first, seqs, agent.log_text())
    assert f"connected to 127.0.0.1:{broker.port}" in agent.log_text()
    assert agent.stop() == 0


def test_agent_that_trusts_another_ca_does_not_connect_and_says_why(things, tmp_path, pki):
    broker = tls_broker(things, tmp_path, pki)
    other = Pki(tmp_path / "other", "other-ca")
    device = f"tls-{uuid.uuid4().hex[:8]}"
    dev_crt, dev_key = pki.issue(device)
    agent = start_agent(things, tmp_path, f"mqtts://127.0.0.1:{broker.port}",
                        f"tls_ca_file = {other.ca_crt}\ntls_cert_file = {dev_crt}\n"
                        f"tls_key_file = {dev_key}\n", device=device)
    wait_for(lambda: "TLS handshake failed" in agent.log_text(), 15, "the TLS failure in the log")
    time.sleep(1.5)  # several retries (reconnect_max = 500ms): logged once, not per retry
    log = agent.log_text()
    warn_lines = [ln for ln in log.splitlines()
                  if "TLS handshake failed" in ln and "unreachable" in ln]
    assert len(warn_lines) == 1, log
    assert "certificate verify failed" in warn_lines[0], warn_lines[0]
    assert "mqtt: connected" not in log
    assert agent.proc.poll() is None


@pytest.fixture
def password_broker(things, tmp_path):
    """mosquitto with a password_file (mosquitto_passwd -b), no anonymous clients, and the
    shipped ACL. Returns (broker, {user: password})."""
    users = {HOST_USER: "host-secret", "dev-a": "secret-a", "dev-b": "secret-b"}
    passwd = make_password_file(tmp_path / "passwd", users)
    port = free_port()
    b = ConfBroker(tmp_path, (
        f"per_listener_settings false\nallow_anonymous false\npersistence false\n"
        f"password_file {passwd}\nacl_file {ACL}\nlistener {port} 127.0.0.1\n"), port)
    b.start()
    things.append(b)
    return b, users


def host_inbox(things, broker, users, topics):
    """An Inbox of `topics` on the password broker, read as the host user (whom the shipped
    ACL lets read every device's topics)."""
    sub = mqtt_client(broker.port, username=HOST_USER, password=users[HOST_USER])
    things.append(sub)
    return Inbox(sub, topics)


def credentials(path, user, password, mode=0o600):
    path.write_text(f"# MQTT credentials of this board\nusername = {user}\n"
                    f"password = {password}\n")
    os.chmod(path, mode)
    return path


def test_credentials_file_right_password_connects(things, tmp_path, password_broker):
    broker, users = password_broker
    inbox = host_inbox(things, broker, users, "edgemon/v1/dev-a/#")
    cred = credentials(tmp_path / "a.cred", "dev-a", users["dev-a"])
    agent = start_agent(things, tmp_path, f"mqtt://127.0.0.1:{broker.port}",
                        f"credentials_file = {cred}\n", device="dev-a")
    assert inbox.next("edgemon/v1/dev-a/birth", timeout=15) is not None, agent.log_text()
    assert inbox.next("edgemon/v1/dev-a/data", timeout=10) is not None
    assert "secret-a" not in agent.log_text()


def test_credentials_file_wrong_password_is_refused_and_logged_once(things, tmp_path,
                                                                    password_broker):
    broker, users = password_broker
    inbox = host_inbox(things, broker, users, "edgemon/v1/dev-a/#")
    cred = credentials(tmp_path / "a.cred", "dev-a", "not-the-password")
    agent = start_agent(things, tmp_path, f"mqtt://127.0.0.1:{broker.port}",
                        f"credentials_file = {cred}\n", device="dev-a")
    wait_for(lambda: "refused the connection" in agent.log_text(), 15, "the refusal in the log")
    assert inbox.next("edgemon/v1/dev-a/birth", timeout=2) is None
    log = agent.log_text()
    refusals = [ln for ln in log.splitlines() if "refused the connection" in ln]
    assert len(refusals) == 1, log  # retried several times by now, logged once
    # "not authorised" (MQTT 3.1.1) or "Not authorized" (the MQTT v5 reason the agent gets).
    assert "not authori" in refusals[0].lower() or "password" in refusals[0].lower()
    assert "not-the-password" not in log
    assert agent.proc.poll() is None


def test_credentials_file_readable_by_others_is_refused_at_start_and_by_check(things, tmp_path,
                                                                             password_broker):
    broker, users = password_broker
    cred = credentials(tmp_path / "open.cred", "dev-a", users["dev-a"], mode=0o644)
    agent = start_agent(things, tmp_path, f"mqtt://127.0.0.1:{broker.port}",
                        f"credentials_file = {cred}\n", device="dev-a")
    assert agent.proc.wait(10) == 1
    log = agent.log_text()
    assert str(cred) in log and "group or others" in log, log
    r = check_config(agent.config)
    assert r.returncode == 1
    assert str(cred) in r.stderr and "group or others" in r.stderr and "0644" in r.stderr
    os.chmod(cred, 0o600)
    r = check_config(agent.config)
    assert r.returncode == 0, r.stderr


def test_acl_device_cannot_publish_into_another_devices_topics(things, tmp_path,
                                                              password_broker):
    broker, users = password_broker
    inbox = host_inbox(things, broker, users, "edgemon/v1/#")
    a = mqtt_client(broker.port, "edgemon-dev-a", "dev-a", users["dev-a"])
    b = mqtt_client(broker.port, "edgemon-dev-b", "dev-b", users["dev-b"])
    things.extend([a, b])
    # A's forgery first, then B's own message: when B's arrives, A's was processed before it.
    a.publish("edgemon/v1/dev-b/data", b"forged by a", qos=1).wait_for_publish()
    b.publish("edgemon/v1/dev-b/data", b"from b", qos=1).wait_for_publish()
    assert inbox.next("edgemon/v1/dev-b/data") == b"from b"
    a.publish("edgemon/v1/dev-a/data", b"from a", qos=1).wait_for_publish()
    assert inbox.next("edgemon/v1/dev-a/data") == b"from a"
    seen = []
    while not inbox.q.empty():
        seen.append(inbox.q.get_nowait())
    assert (("edgemon/v1/dev-b/data", b"forged by a")) not in seen
    # Commands: the host may write them, a device may not write another device's.
    cmds = Inbox(a, "edgemon/v1/dev-a/cmd/#")
    b.publish("edgemon/v1/dev-a/cmd/rebirth", b"from b", qos=1).wait_for_publish()
    inbox.client.publish("edgemon/v1/dev-a/cmd/rebirth", b"from host", qos=1).wait_for_publish()
    assert cmds.next("edgemon/v1/dev-a/cmd/rebirth") == b"from host"


# ---- the span socket's uid allow-list, with a second user ----------------------------------

SPAN = struct.Struct("<2sBBIQQQ32s")


def span(stage, duration_ns):
    return SPAN.pack(b"EM", 1, 1, os.getpid(), 0, time.monotonic_ns(), duration_ns,
                     stage.encode())


def send_as(uid, path, stage, n):
    """Sends n spans to the socket at `path` from a child process running as uid."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            s.connect(path)
            for _ in range(n):
                s.send(span(stage, 1000))
                time.sleep(0.001)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"sender as uid {uid} failed"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a sender as a second user "
                    "(uid 65534, nobody)")
def test_span_allow_list_counts_nobody_and_drops_root(things, tmp_path):
    broker_port = free_port()
    b = ConfBroker(tmp_path, f"listener {broker_port} 127.0.0.1\nallow_anonymous true\n"
                   "persistence false\n", broker_port)
    b.start()
    things.append(b)
    sub = mqtt_client(broker_port)
    things.append(sub)
    # pytest's tmp dirs are 0700: nobody could not reach a socket there.
    run = tempfile.mkdtemp(prefix="em-spans-")
    things.append(type("Rm", (), {"stop": lambda self: shutil.rmtree(run, True)})())
    os.chmod(run, 0o755)
    os.mkdir(os.path.join(run, "run"))
    sock = os.path.join(run, "spans.sock")
    device = f"uid-{uuid.uuid4().hex[:8]}"
    inbox = Inbox(sub, f"edgemon/v1/{device}/#")
    agent = start_agent(things, tmp_path, f"mqtt://127.0.0.1:{broker_port}",
                        f"[spans]\nsocket = {sock}\nsocket_mode = 0666\nallow_uids = {NOBODY}\n",
                        device=device, runtime_dir=os.path.join(run, "run"))
    birth = inbox.next(f"edgemon/v1/{device}/birth", timeout=15)
    assert birth is not None, agent.log_text()
    birth = edgemon_proto.decode(birth)
    wait_for(lambda: os.path.exists(sock), 5, "the span socket")
    send_as(NOBODY, sock, "infer", 7)
    send_as(0, sock, "root", 5)
    counted, dropped = 0, 0
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (counted < 7 or dropped < 5):
        payload = inbox.next(f"edgemon/v1/{device}/data", timeout=5)
        if payload is None:
            continue
        d = edgemon_proto.decode(payload)
        counted += sum(s["count"] for s in d["stages"] if s["name"] == "infer")
        assert all(s["name"] != "root" for s in d["stages"])
        dropped = edgemon_proto.values_by_name(d, birth)["spans.dropped.disallowed"]
    assert counted == 7
    assert dropped == 5


# ---- the host tools on a secured broker (edgemon-cli, edgemon-aggregator) -----------------

CLI = os.environ.get("EM_CLI")


def run_cli(*args, timeout=30):
    if not CLI:
        pytest.skip("EM_CLI (path of edgemon-cli) not set")
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def test_cli_status_over_tls_with_the_host_certificate_and_the_shipped_acl(things, tmp_path,
                                                                           pki):
    if not CLI:
        pytest.skip("EM_CLI (path of edgemon-cli) not set")
    broker, device, (host_crt, host_key), inbox, agent = tls_agent(things, tmp_path, pki)
    assert inbox.next(f"edgemon/v1/{device}/birth", timeout=15) is not None, agent.log_text()
    url = f"mqtts://127.0.0.1:{broker.port}"
    r = run_cli("status", "--broker", url, "--cafile", pki.ca_crt, "--cert", host_crt,
                "--key", host_key, "--json", "--wait", "0")
    assert r.returncode == 0, r.stderr
    import json
    rows = {d["device"]: d for d in json.loads(r.stdout)["devices"]}
    assert device in rows, r.stdout
    assert rows[device]["online"] is True
    # Without --cafile the system's CAs do not know the test CA: the handshake fails.
    r = run_cli("status", "--broker", url, "--cert", host_crt, "--key", host_key, "--wait", "0")
    assert r.returncode == 3, (r.returncode, r.stderr)
    assert "TLS" in r.stderr and url in r.stderr, r.stderr
    # TLS options with a plain URL, or a certificate without its key: usage errors.
    r = run_cli("status", "--broker", f"mqtt://127.0.0.1:{broker.port}", "--cafile", pki.ca_crt)
    assert r.returncode == 2 and "mqtts://" in r.stderr, r.stderr
    r = run_cli("status", "--broker", url, "--cafile", pki.ca_crt, "--cert", host_crt)
    assert r.returncode == 2 and "key" in r.stderr, r.stderr


def test_cli_credentials_right_wrong_and_readable_by_others(things, tmp_path, password_broker):
    if not CLI:
        pytest.skip("EM_CLI (path of edgemon-cli) not set")
    broker, users = password_broker
    url = f"mqtt://127.0.0.1:{broker.port}"
    good = credentials(tmp_path / "host.cred", HOST_USER, users[HOST_USER])
    r = run_cli("status", "--broker", url, "--credentials", good, "--wait", "0")
    assert r.returncode == 0, r.stderr
    bad = credentials(tmp_path / "bad.cred", HOST_USER, "not-the-password")
    r = run_cli("status", "--broker", url, "--credentials", bad, "--wait", "0")
    assert r.returncode == 3, r.stderr
    assert "not authorised" in r.stderr and "not-the-password" not in r.stderr, r.stderr
    r = run_cli("status", "--broker", url, "--wait", "0")
    assert r.returncode == 3 and "not authorised" in r.stderr, r.stderr
    open_cred = credentials(tmp_path / "open.cred", HOST_USER, users[HOST_USER], mode=0o644)
    r = run_cli("status", "--broker", url, "--credentials", open_cred, "--wait", "0")
    assert r.returncode == 2, r.stderr
    assert str(open_cred) in r.stderr and "group or others" in r.stderr, r.stderr
    garbled = tmp_path / "garbled.cred"
    garbled.write_text("# no username\npassword = x\n")
    os.chmod(garbled, 0o600)
    r = run_cli("status", "--broker", url, "--credentials", garbled, "--wait", "0")
    assert r.returncode == 2 and "no username" in r.stderr, r.stderr


def test_aggregator_with_a_credentials_file_ingests_the_agents_data(things, tmp_path,
                                                                    password_broker):
    if not os.environ.get("EM_AGGREGATOR"):
        pytest.skip("EM_AGGREGATOR (path of edgemon-aggregator) not set")
    from conftest import Aggregator
    import json
    import sqlite3
    broker, users = password_broker
    host_cred = credentials(tmp_path / "host.cred", HOST_USER, users[HOST_USER])
    ini = tmp_path / "agg.ini"
    ini.write_text(f"[aggregator]\ncredentials_file = {host_cred}\n")
    agg = Aggregator(tmp_path, broker.port, extra_args=("--config", str(ini)))
    agg.start()
    things.append(agg)
    dev_cred = credentials(tmp_path / "a.cred", "dev-a", users["dev-a"])
    agent = start_agent(things, tmp_path, f"mqtt://127.0.0.1:{broker.port}",
                        f"credentials_file = {dev_cred}\n", device="dev-a")

    def has_data():
        status, body = agg.get("/api/devices")
        if status != 200:
            return False
        devs = json.loads(body)
        devs = devs.get("devices", devs) if isinstance(devs, dict) else devs
        return any("dev-a" in json.dumps(d) for d in devs)

    wait_for(has_data, 20, "dev-a in the aggregator's /api/devices")

    def data_rows():
        con = sqlite3.connect(agg.db, timeout=5)
        try:
            return con.execute("SELECT count(*) FROM data d JOIN devices v ON v.id = d.device "
                               "WHERE v.name = 'dev-a'").fetchone()[0]
        finally:
            con.close()

    wait_for(lambda: data_rows() > 0, 20, "dev-a's data in the aggregator's SQLite")
    assert users[HOST_USER] not in agg.log_text()
    assert agg.stop() == 0
    assert agent.proc.poll() is None
    # --check reads the credentials file: a missing one is a configuration error.
    bad = credentials(tmp_path / "bad.cred", HOST_USER, "nope-nope")
    r = subprocess.run([os.environ["EM_AGGREGATOR"], "--broker", f"mqtt://127.0.0.1:1",
                        "--credentials-file", str(tmp_path / "missing.cred"), "--check"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "missing.cred" in r.stderr, r.stderr
    r = subprocess.run([os.environ["EM_AGGREGATOR"], "--broker", f"mqtt://127.0.0.1:1",
                        "--credentials-file", str(bad), "--check"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
