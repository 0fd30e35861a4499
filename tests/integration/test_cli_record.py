"""edgemon-cli record and replay against real mosquitto brokers and a real agent.

Recordings are read and written here by a Python implementation of the framing in
host/RECORDING.md, independent of host/lib/recording.c, so the two check each other.

Run through ctest (label integration), which sets EM_CLI, EM_AGENT and EM_PROTO_TOOL.
"""

import os
import signal
import subprocess
import threading
import time
import uuid

import paho.mqtt.client as mqtt
import pytest

from conftest import edgemon_proto, free_port, wait_for
import recordings
from recordings import HEADER, crc32c, parse_recording

CLI = os.environ.get("EM_CLI")


def encode_record(t_ns, topic, payload, retained=False):
    return recordings.encode_record(topic, payload, t_ns, retained)


def test_python_framing_matches_the_documented_check_value():
    assert crc32c(b"123456789") == 0xE3069283


# ---- helpers -------------------------------------------------------------------------------

def cli(*args, timeout=30):
    assert CLI, "EM_CLI must name the edgemon-cli binary (run through ctest)"
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


class Listener:
    """A paho subscriber that keeps everything it gets, in order, and can sync with the
    broker (a marker of its own comes back after everything published before it)."""

    def __init__(self, port, pattern="#"):
        self.got = []
        self.lock = threading.Lock()
        self.marker_topic = f"it-sync/{uuid.uuid4().hex[:8]}"
        self.client = mqtt.Client(client_id=f"it-rec-{uuid.uuid4().hex[:8]}")
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port, keepalive=30)
        self.client.subscribe([(pattern, 1), (self.marker_topic, 1)])
        self.client.loop_start()
        self.sync()

    def _on_message(self, client, userdata, m):
        with self.lock:
            self.got.append((m.topic, bytes(m.payload), bool(m.retain)))

    def sync(self, timeout=10):
        token = uuid.uuid4().hex.encode()
        self.client.publish(self.marker_topic, token, qos=1).wait_for_publish()
        wait_for(lambda: any(p == token for _, p, _ in self.messages(markers=True)), timeout,
                 "the sync marker to come back")

    def messages(self, markers=False):
        with self.lock:
            return [m for m in self.got if markers or m[0] != self.marker_topic]

    def close(self):
        self.client.loop_stop()
        self.client.disconnect()


@pytest.fixture
def listeners():
    made = []

    def make(port, pattern="#"):
        lst = Listener(port, pattern)
        made.append(lst)
        return lst

    yield make
    for lst in made:
        lst.close()


@pytest.fixture
def live(stack):
    """A broker with an agent publishing (every 100 ms) about a busy target."""
    broker = stack.broker()
    target = stack.target()
    agent = stack.agent(broker.port, f"cmdline = {target.marker}")
    wait_for(lambda: "attached to pid" in agent.log_text(), 10, "the agent to attach")
    return broker, agent


def record(broker, agent, path, *extra, timeout=30):
    r = cli("record", "--broker", f"mqtt://127.0.0.1:{broker.port}", "--device", agent.device,
            "--out", path, *extra, timeout=timeout)
    assert r.returncode == 0, r.stderr
    records, err, _ = parse_recording(path.read_bytes())
    assert err is None, err
    return records, r.stderr


def write_recording(path, records, cut=None):
    data = HEADER + b"".join(encode_record(*r) for r in records)
    path.write_bytes(data[:cut] if cut is not None else data)
    return data


# ---- record --------------------------------------------------------------------------------

def test_record_for_a_duration_keeps_the_retained_birth_and_every_data_message(stack, live,
                                                                               tmp_path):
    broker, agent = live
    path = tmp_path / "live.emrec"
    records, stderr = record(broker, agent, path, "--duration", "3")
    births = [r for r in records if r["kind"] == "birth"]
    datas = [r for r in records if r["kind"] == "data"]
    assert births and births[0]["retained"], [(r["kind"], r["retained"]) for r in records]
    assert all(r["topic"].startswith(f"edgemon/v1/{agent.device}/") for r in records)
    birth = edgemon_proto.decode(births[-1]["payload"])
    session = [edgemon_proto.decode(r["payload"]) for r in datas]
    session = [d for d in session if d["session"] == birth["session"]]
    assert len(session) >= 10, len(session)  # 3 s at 100 ms, with slack for start-up.
    # Every number of the session, none twice; live messages in order. A message spooled
    # before the first CONNACK is replayed (historical) after a live one: docs/RELIABILITY.md.
    seqs = sorted(d["seq"] for d in session)
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
    live = [d["seq"] for d in session if not d.get("historical")]
    assert live == sorted(live), live
    assert not any(r["retained"] for r in datas)
    now_ns = time.time_ns()
    assert all(now_ns - 60e9 < r["t"] <= now_ns for r in records)  # CLOCK_REALTIME stamps.
    assert "recorded" in stderr and "1 device" in stderr, stderr
    assert f"{path.stat().st_size} bytes" in stderr, stderr


def test_record_count_stops_after_n_data_messages(stack, live, tmp_path):
    broker, agent = live
    path = tmp_path / "count.emrec"
    records, _ = record(broker, agent, path, "--count", "5")
    assert len([r for r in records if r["kind"] == "data"]) == 5
    assert records[-1]["kind"] == "data"


def test_record_glob_filters_devices(stack, live, tmp_path):
    broker, agent = live
    path = tmp_path / "glob.emrec"
    r = cli("record", "--broker", f"mqtt://127.0.0.1:{broker.port}", "--device", "nomatch-*",
            "--out", path, "--duration", "1.5")
    assert r.returncode == 0, r.stderr
    assert parse_recording(path.read_bytes()) == ([], None, 8)
    records, _ = record(broker, agent, path, "--device", agent.device[:4] + "*", "--count", "2")
    assert {r["topic"].split("/")[2] for r in records} == {agent.device}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_stopped_or_killed_recorder_leaves_a_usable_recording(stack, live, tmp_path, sig):
    broker, agent = live
    path = tmp_path / "signal.emrec"
    proc = subprocess.Popen([CLI, "record", "--broker", f"mqtt://127.0.0.1:{broker.port}",
                             "--out", str(path)], stderr=subprocess.PIPE, text=True)
    try:
        # Flushed every second: after 2.5 s the file holds at least the first second.
        wait_for(lambda: path.exists() and path.stat().st_size > 8, 10, "records on disk")
        time.sleep(1.5)
        proc.send_signal(sig)
        rc = proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    stderr = proc.stderr.read()
    records, err, _ = parse_recording(path.read_bytes())
    assert any(r["kind"] == "data" for r in records)
    if sig == signal.SIGKILL:
        assert err in (None, "truncated"), err
    else:
        assert rc == 0, stderr
        assert err is None and "recorded" in stderr, stderr


def test_record_to_a_file_that_cannot_be_created_exits_4(stack):
    broker = stack.broker()
    r = cli("record", "--broker", f"mqtt://127.0.0.1:{broker.port}", "--out",
            stack.tmp / "no" / "such" / "dir.emrec", "--duration", "1")
    assert r.returncode == 4, r.stderr
    assert "cannot create" in r.stderr and "dir.emrec" in r.stderr, r.stderr


# ---- replay --------------------------------------------------------------------------------

def test_replay_to_a_fresh_broker_is_byte_identical_and_keeps_retained(stack, live, tmp_path,
                                                                      listeners):
    broker, agent = live
    path = tmp_path / "replay.emrec"
    records, _ = record(broker, agent, path, "--duration", "2")
    agent.stop()
    fresh = stack.broker()
    sub = listeners(fresh.port, f"edgemon/v1/{agent.device}/#")
    r = cli("replay", path, "--broker", f"mqtt://127.0.0.1:{fresh.port}", "--rate", "0")
    assert r.returncode == 0, r.stderr
    assert f"published {len(records)} message" in r.stderr, r.stderr
    sub.sync()
    got = sub.messages()
    want_data = [r["payload"] for r in records if r["kind"] == "data"]
    assert len(want_data) >= 5
    assert [p for t, p, _ in got if t.endswith("/data")] == want_data
    assert [(t, p) for t, p, _ in got] == [(r["topic"], r["payload"]) for r in records]
    # The birth is retained on the fresh broker: a subscriber that comes later gets it.
    late = listeners(fresh.port, f"edgemon/v1/{agent.device}/birth")
    births = [r["payload"] for r in records if r["kind"] == "birth"]
    retained = [(p, ret) for _, p, ret in late.messages()]
    assert retained == [(births[-1], True)], retained
    # Data is not retained.
    late_data = listeners(fresh.port, f"edgemon/v1/{agent.device}/data")
    assert late_data.messages() == []


def test_replay_at_rate_1_keeps_the_recorded_pace(stack, tmp_path, listeners):
    broker = stack.broker()
    sub = listeners(broker.port)
    t0 = 1_700_000_000_000_000_000
    records = [(t0 + i * 250_000_000, "edgemon/v1/pace/data", bytes([i])) for i in range(5)]
    path = tmp_path / "pace.emrec"
    write_recording(path, records)
    start = time.monotonic()
    r = cli("replay", path, "--broker", f"mqtt://127.0.0.1:{broker.port}")
    took = time.monotonic() - start
    assert r.returncode == 0, r.stderr
    assert took >= 0.8, took  # The records span 1 s; a lower bound, not a timing promise.
    sub.sync()
    assert [p for _, p, _ in sub.messages()] == [bytes([i]) for i in range(5)]


# Time stamps a recording may hold: a jump of about 2^64 ns forwards, steps backwards, 0.
U64_MAX = 2**64 - 1
JUMPS = [1_700_000_000_000_000_000, U64_MAX, 5, U64_MAX, 0, 1]


@pytest.mark.parametrize("rate", ["1", "0.5", "0.000001", "1000000"])
def test_replay_cuts_huge_and_backward_time_jumps_to_max_gap(stack, tmp_path, listeners, rate):
    broker = stack.broker()
    sub = listeners(broker.port)
    path = tmp_path / "jumps.emrec"
    write_recording(path, [(t, "edgemon/v1/jump/data", bytes([i])) for i, t in enumerate(JUMPS)])
    r = cli("replay", path, "--broker", f"mqtt://127.0.0.1:{broker.port}", "--rate", rate,
            "--max-gap", "50ms")
    assert r.returncode == 0, r.stderr
    assert "runtime error" not in r.stderr, r.stderr  # UBSan, in the sanitizer build.
    # The two forward jumps are cut; the steps back and the 1 ns gap are not.
    assert "2 gap(s) longer than --max-gap 0.05 s were cut to it" in r.stderr, r.stderr
    assert f"published {len(JUMPS)} message" in r.stderr, r.stderr
    sub.sync()
    assert [p for _, p, _ in sub.messages()] == [bytes([i]) for i in range(len(JUMPS))]


def test_replay_at_the_recorded_pace_waits_at_most_max_gap_on_a_2_to_the_64_jump(stack, tmp_path,
                                                                              listeners):
    """The default pace and --max-gap: the jump is named on stderr and waited for 60 s at most
    (here interrupted with SIGINT), where it used to convert 1.8e19 ns to an integer."""
    broker = stack.broker()
    sub = listeners(broker.port)
    path = tmp_path / "jump.emrec"
    write_recording(path, [(0, "edgemon/v1/jump/data", b"first"),
                           (U64_MAX, "edgemon/v1/jump/data", b"second")])
    proc = subprocess.Popen([CLI, "replay", str(path), "--broker",
                             f"mqtt://127.0.0.1:{broker.port}"], stderr=subprocess.PIPE,
                            text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        wait_for(lambda: any("--max-gap" in ln for ln in lines) or proc.poll() is not None, 20,
                 "replay to report the jump")
        assert proc.poll() is None, "".join(lines)
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    reader.join(10)
    err = "".join(lines)
    assert rc == 0, err
    assert "runtime error" not in err, err
    assert f"{path}: the record at byte offset 53 comes 18446744073.710 s after" in err, err
    assert "waiting 60 s (--max-gap) instead" in err, err
    sub.sync()
    assert [p for _, p, _ in sub.messages()] == [b"first"]


@pytest.mark.parametrize("damage", ["truncated", "crc"])
def test_damaged_recording_publishes_the_prefix_and_exits_4(stack, tmp_path, listeners,
                                                            damage):
    broker = stack.broker()
    sub = listeners(broker.port)
    t0 = 1_700_000_000_000_000_000
    records = [(t0 + i, "edgemon/v1/dmg/data", b"payload-%d" % i) for i in range(5)]
    path = tmp_path / "damaged.emrec"
    data = write_recording(path, records)
    offsets = [r["offset"] for r in parse_recording(data)[0]]
    if damage == "truncated":
        path.write_bytes(data[:offsets[3] + 10])
    else:
        bad = bytearray(data)
        bad[offsets[3] + 20] ^= 0x01  # A bit in the topic: only the CRC notices.
        path.write_bytes(bytes(bad))
    r = cli("replay", path, "--broker", f"mqtt://127.0.0.1:{broker.port}", "--rate", "0")
    assert r.returncode == 4, r.stderr
    assert str(path) in r.stderr and f"offset {offsets[3]}" in r.stderr, r.stderr
    assert ("truncated" if damage == "truncated" else "checksum") in r.stderr, r.stderr
    sub.sync()
    assert [p for _, p, _ in sub.messages()] == [b"payload-0", b"payload-1", b"payload-2"]


@pytest.mark.parametrize("content", [b"", b"hello, this is not a recording\n",
                                     b"EMREC\x00\x02\x00" + encode_record(1, "a/data", b"x")])
def test_foreign_file_exits_4_and_publishes_nothing(stack, tmp_path, listeners, content):
    broker = stack.broker()
    sub = listeners(broker.port)
    path = tmp_path / "foreign.bin"
    path.write_bytes(content)
    r = cli("replay", path, "--broker", f"mqtt://127.0.0.1:{broker.port}", "--rate", "0")
    assert r.returncode == 4, r.stderr
    assert str(path) in r.stderr and "recording" in r.stderr, r.stderr
    sub.sync()
    assert sub.messages() == []


def test_missing_recording_exits_4(tmp_path):
    r = cli("replay", tmp_path / "nope.emrec", "--broker", "mqtt://127.0.0.1:1")
    assert r.returncode == 4, r.stderr
    assert "nope.emrec" in r.stderr and "No such file" in r.stderr, r.stderr


def test_unreachable_broker_exits_3(tmp_path):
    port = free_port()
    path = tmp_path / "ok.emrec"
    write_recording(path, [(1, "edgemon/v1/x/data", b"x")])
    for args in (["record", "--out", tmp_path / "out.emrec"], ["replay", path]):
        r = cli(*args, "--broker", f"mqtt://127.0.0.1:{port}")
        assert r.returncode == 3, r.stderr
        assert f"127.0.0.1:{port}" in r.stderr and "refused" in r.stderr.lower(), r.stderr


@pytest.mark.parametrize("args", [
    ["record"],
    ["record", "--out"],
    ["record", "--out", "x.emrec", "--count", "0"],
    ["record", "--out", "x.emrec", "--duration", "soon"],
    ["record", "--out", "x.emrec", "--device", "a/b"],
    ["record", "--out", "x.emrec", "--bogus"],
    ["record", "--out", "x.emrec", "extra"],
    ["record", "--out", "x.emrec", "--broker", "http://host"],
    ["replay"],
    ["replay", "a.emrec", "b.emrec"],
    ["replay", "a.emrec", "--rate", "-1"],
    ["replay", "a.emrec", "--rate", "fast"],
    ["replay", "a.emrec", "--max-gap", "-1"],
    ["replay", "a.emrec", "--bogus"],
])
def test_bad_arguments_exit_2_with_a_reason(args, tmp_path):
    r = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=10, cwd=tmp_path)
    assert r.returncode == 2, (args, r.stderr)
    assert f"edgemon-cli {args[0]}:" in r.stderr and "--help" in r.stderr, r.stderr
    assert not (tmp_path / "x.emrec").exists()


@pytest.mark.parametrize("cmd", ["record", "replay"])
def test_help_prints_usage_to_stdout(cmd):
    r = cli(cmd, "--help")
    assert r.returncode == 0
    assert r.stdout.startswith(f"usage: edgemon-cli {cmd}")
    assert "RECORDING.md" in r.stdout
