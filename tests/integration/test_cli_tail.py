"""edgemon-cli tail and status against a real mosquitto and real agents.

Spans are sent to the agent as span datagrams packed here from proto/WIRE.md; what the CLI
prints is parsed back (NDJSON) or checked for layout under a real pseudo-terminal.
"""

import fcntl
import json
import os
import pty
import re
import select
import socket
import struct
import subprocess
import termios
import threading
import time

import pytest

from conftest import ROOT, wait_for

CLI = os.environ.get("EM_CLI")
SPAN = struct.Struct("<2sBBIQQQ32s")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
BUDGET = ("[budget.infer]\np99 = 4ms\nlevel = DEGRADED\n"
          "[degrade]\nwindow = 300ms\nenter_windows = 1\nleave_windows = 1\n")


def cli(*args, timeout=30, env=None, **kw):
    assert CLI, "EM_CLI must name the edgemon-cli binary (run through ctest)"
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout,
                          env=env, **kw)


class Spans:
    """Sends `pre` and `infer` spans to an agent from a thread, `slow_ns` being infer's
    duration (changeable while it runs)."""

    def __init__(self, path, slow_ns=2_000_000):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        wait_for(lambda: os.path.exists(path), 10, "the agent's span socket")
        self.sock.connect(str(path))
        self.slow_ns = slow_ns
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        frame = 0
        while not self.stop.is_set():
            frame += 1
            now = time.monotonic_ns()
            for stage, dur in (("pre", 1_000_000), ("infer", self.slow_ns)):
                try:
                    self.sock.send(SPAN.pack(b"EM", 1, 1, os.getpid(), frame, now, dur,
                                             stage.encode()))
                except OSError:
                    pass
            time.sleep(0.005)

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def board(stack):
    """A broker, a target, an agent with an infer budget, and spans flowing into it."""
    broker = stack.broker()
    target = stack.target()
    agent = stack.agent(broker.port, f"cmdline = {target.marker}", extra=BUDGET)
    spans = Spans(stack.tmp / "run" / "spans.sock")
    yield broker, agent, spans
    spans.close()


def url(broker):
    return f"mqtt://127.0.0.1:{broker.port}"


def test_tail_json_is_one_decoded_object_per_message_with_metric_names(board):
    broker, agent, spans = board
    r = cli("tail", "--broker", url(broker), "--device", agent.device, "--json", "--count", "6")
    assert r.returncode == 0, r.stderr
    objs = [json.loads(line) for line in r.stdout.splitlines()]
    assert all(o["device"] == agent.device for o in objs)
    kinds = [o["message"]["kind"] for o in objs]
    assert "birth" in kinds and "status" in kinds
    data = [o["message"] for o in objs if o["message"]["kind"] == "data"]
    assert data, kinds
    for d in data:
        names = set(d["values"])
        assert "mem.rss" in names and "target.up" in names
        assert not any(k.isdigit() for k in names), names  # names, never aliases
        assert d["values"]["mem.rss"] > 0
    # Absent counters are null, never 0 (hardware events do not exist in this VM; where they
    # do, they are numbers).
    assert all(d["values"]["pmu.cycles"] is None or d["values"]["pmu.cycles"] > 0 for d in data)
    stages = {s["name"]: s for d in data for s in d["stages"] if s["count"]}
    assert {"pre", "infer"} <= set(stages)
    # --count counts data and state messages only.
    assert sum(k in ("data", "state") for k in kinds) == 6


def read_pty(argv, env, want_lines, timeout=30, cols=220):
    """Runs argv with stdout on a pseudo-terminal `cols` wide; returns its output once it
    printed `want_lines` lines (or exited)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
    proc = subprocess.Popen(argv, stdout=slave, stderr=subprocess.PIPE, env=env)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while out.count(b"\n") < want_lines and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
    finally:
        proc.terminate()
        proc.wait(10)
        os.close(master)
    return out.decode(errors="replace").replace("\r\n", "\n")


def column_starts(header):
    return {m.group(0): m.start() for m in re.finditer(r"\S+", header)}


def check_alignment(lines):
    header = lines[0]
    cols = column_starts(header)
    data = [ln for ln in lines[1:] if re.match(r"\d\d:\d\d:\d\d\.\d{3} ", ln) and " n=" in ln]
    assert len(data) >= 2, lines
    for ln in data:
        # Left-aligned columns start under their header; right-aligned ones end under it.
        assert ln[cols["DEVICE"] - 1] == " " and ln[cols["DEVICE"]] != " ", ln
        assert ln[cols["LEVEL"] - 1] == " " and ln[cols["LEVEL"]] != " ", ln
        for name in ("IPC", "MISS%", "RSS_MiB", "PSI_CPU", "PSI_MEM"):
            end = cols[name] + len(name)
            assert ln[end - 1] != " " and ln[end] == " ", (name, ln)
        assert ln.index("pre ") > cols["PSI_MEM"] + len("PSI_MEM"), ln
    return data


def test_tail_human_columns_align_and_colour_only_on_a_terminal(board):
    broker, agent, spans = board
    env = dict(os.environ)
    env.pop("NO_COLOR", None)
    argv = [CLI, "tail", "--broker", url(broker), "--device", agent.device]
    out = read_pty(argv, env, want_lines=10)
    assert "\x1b[" in out, out  # colour on a terminal
    lines = ANSI.sub("", out).splitlines()
    assert lines[0].split()[:3] == ["TIME", "DEVICE", "LEVEL"]
    data = check_alignment(lines)
    for ln in data:
        assert agent.device in ln
        assert re.search(r"infer \d+\.\d+/\d+\.\d+/\d+\.\d+ ms n=\d+ budget p99", ln), ln
        # No hardware counters in this VM: IPC and cache misses are '-', never 0.
        fields = ln.split()
        assert fields[3] in ("-",) or float(fields[3]) > 0

    # NO_COLOR on a terminal: plain.
    out = read_pty(argv, dict(env, NO_COLOR="1"), want_lines=10)
    assert "\x1b[" not in out
    check_alignment(out.splitlines())

    # A pipe: plain; --color always forces it on.
    r = cli("tail", "--broker", url(broker), "--device", agent.device, "--count", "3", env=env)
    assert r.returncode == 0 and "\x1b[" not in r.stdout
    check_alignment(r.stdout.splitlines())
    r = cli("tail", "--broker", url(broker), "--device", agent.device, "--count", "3",
            "--color", "always", env=env)
    assert r.returncode == 0 and "\x1b[" in r.stdout


def test_tail_prints_a_level_change_as_its_own_line_with_the_rule(board):
    broker, agent, spans = board
    proc = subprocess.Popen([CLI, "tail", "--broker", url(broker), "--device", agent.device,
                             "--duration", "20"], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        spans.slow_ns = 9_000_000  # infer p99 9 ms against a 4 ms budget
        line = wait_for(lambda: next((ln for ln in iter(proc.stdout.readline, "")
                                      if "DEGRADED <- NOMINAL" in ln), None), 20,
                        "a DEGRADED line from tail")
    finally:
        proc.terminate()
        proc.wait(10)
    assert agent.device in line and "rule infer.p99" in line


def test_tail_asks_for_a_rebirth_when_data_comes_without_a_birth(board, stack):
    broker, agent, spans = board
    # Remove the retained birth: the next data has no dictionary on the broker. Only once the
    # birth is on the broker (the agent logs "connected" before it publishes the birth, and a
    # birth published after the clear would be retained again).
    watch = stack.subscriber(broker.port, agent.device)
    watch.next("birth", timeout=15)
    watch.next("data", timeout=15)  # past start-up: no birth comes unasked after this
    import paho.mqtt.client as mqtt
    c = mqtt.Client(client_id="it-clear")
    c.connect("127.0.0.1", broker.port)
    c.loop_start()
    c.publish(f"edgemon/v1/{agent.device}/birth", b"", qos=1, retain=True).wait_for_publish()
    c.loop_stop()
    c.disconnect()
    r = cli("tail", "--broker", url(broker), "--device", agent.device, "--json", "--count", "8")
    assert r.returncode == 0, r.stderr
    objs = [json.loads(line) for line in r.stdout.splitlines()]
    kinds = [o["message"]["kind"] for o in objs if "message" in o]
    first_data = kinds.index("data")
    assert "birth" not in kinds[:first_data]
    assert "birth" in kinds[first_data:], kinds  # the agent answered the request
    after = kinds.index("birth", first_data)
    named = [o["message"] for o in objs[after:] if o.get("message", {}).get("kind") == "data"]
    assert named and "mem.rss" in named[-1]["values"]
    unnamed = objs[first_data]["message"]["values"]
    assert all(k.isdigit() for k in unnamed)  # aliases until the birth is known
    assert "rebirth requested" in agent.log_text()


def test_tail_counts_malformed_messages_and_goes_on(stack):
    broker = stack.broker()
    import paho.mqtt.client as mqtt
    c = mqtt.Client(client_id="it-bad")
    c.connect("127.0.0.1", broker.port)
    c.loop_start()
    proc = subprocess.Popen([CLI, "tail", "--broker", url(broker), "--device", "fake-*",
                             "--json", "--count", "1"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    c.publish("edgemon/v1/fake-1/data", b"\xff\x00garbage", qos=1).wait_for_publish()
    c.publish("edgemon/v1/fake-1/data", bytes.fromhex("a1"), qos=1).wait_for_publish()
    c.publish("edgemon/v1/other/data", b"\xff", qos=1).wait_for_publish()  # filtered out
    state = (ROOT / "proto" / "vectors" / "state_degraded.cbor").read_bytes()
    c.publish("edgemon/v1/fake-1/state", state, qos=1).wait_for_publish()
    out, err = proc.communicate(timeout=20)
    c.loop_stop()
    c.disconnect()
    assert proc.returncode == 0, err
    objs = [json.loads(line) for line in out.splitlines()]
    errors = [o for o in objs if "error" in o]
    assert len(errors) == 2
    assert all(o["device"] == "fake-1" and isinstance(o["offset"], int) for o in errors)
    assert errors[1]["error"] == "message truncated"
    assert objs[-1]["message"]["level"] == "DEGRADED"
    assert "2 message(s) did not decode" in err


def test_status_shows_one_row_per_device_from_retained_messages(stack):
    broker = stack.broker()
    target = stack.target()
    for name in ("st-a", "st-b"):
        stack.agent(broker.port, f"cmdline = {target.marker}", device=name,
                    runtime_dir=stack.tmp / name)
    sub = stack.subscriber(broker.port, "+")
    for _ in range(2):
        sub.next("birth")
    import paho.mqtt.client as mqtt
    c = mqtt.Client(client_id="it-gone")
    c.connect("127.0.0.1", broker.port)
    c.loop_start()
    offline = (ROOT / "proto" / "vectors" / "status_offline.cbor").read_bytes()
    c.publish("edgemon/v1/st-gone/status", offline, qos=1, retain=True).wait_for_publish()
    c.loop_stop()
    c.disconnect()

    r = cli("status", "--broker", url(broker), "--json", "--wait", "0.5")
    assert r.returncode == 0, r.stderr
    devs = {d["device"]: d for d in json.loads(r.stdout)["devices"]}
    assert set(devs) == {"st-a", "st-b", "st-gone"}
    for name in ("st-a", "st-b"):
        d = devs[name]
        assert d["online"] is True and d["level"] == "NOMINAL"
        assert d["agent_version"].startswith("0.") and d["board"]
        assert 0 <= d["last_seen_age_s"] < 5
    gone = devs["st-gone"]
    assert gone["online"] is False and gone["agent_version"] is None and gone["level"] is None

    r = cli("status", "--broker", url(broker), "--device", "st-*", "--wait", "0")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    cols = column_starts(lines[0])
    assert [ln.split()[0] for ln in lines[1:]] == ["st-a", "st-b", "st-gone"]
    for ln in lines[1:]:
        for name in ("ONLINE", "LEVEL", "AGENT", "BOARD", "LAST_SEEN"):
            assert ln[cols[name] - 1] == " " and ln[cols[name]] != " ", (name, ln)
    assert lines[3].split()[1:3] == ["no", "-"]


@pytest.mark.parametrize("cmd", ["tail", "status"])
def test_unreachable_broker_is_a_clear_error_with_exit_3(cmd):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        r = cli(cmd, "--broker", f"mqtt://127.0.0.1:{port}")
    assert r.returncode == 3
    assert f"127.0.0.1:{port}" in r.stderr and "refused" in r.stderr.lower()


@pytest.mark.parametrize("args", [
    ["tail", "--bogus"], ["tail", "--count", "0"], ["tail", "--count", "x"],
    ["tail", "--duration", "-1"], ["tail", "--color", "sometimes"], ["tail", "extra"],
    ["tail", "--broker", "tcp://127.0.0.1"], ["tail", "--device", "a/b"],
    ["status", "--wait", "x"], ["status", "--nope"], ["frobnicate"], [],
])
def test_bad_arguments_print_usage_and_exit_2(args):
    r = cli(*args)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert "usage" in r.stderr.lower() or "--help" in r.stderr


def test_help_tells_the_truth():
    r = cli("--help")
    assert r.returncode == 0
    for cmd in ("tail", "status", "decode", "record", "replay", "compare"):
        assert cmd in r.stdout
        h = cli(cmd, "--help")
        assert h.returncode == 0 and h.stdout.startswith(f"usage: edgemon-cli {cmd}")
