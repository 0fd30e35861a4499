"""edgemon-cli top under tmux, against a real mosquitto and edgemon-sim.

top runs inside a detached tmux session of a fixed size on a private tmux socket; the test
types keys with send-keys and reads the screen with capture-pane (-e when it looks at
colours). The simulator publishes births and data for a few devices; a level change with its
verdict, and bytes no terminal should see, are published by the test. Every wait is a poll of
the screen with a generous deadline: nothing here asserts how fast top draws.
"""

import os
import re
import shlex
import subprocess
import time
import uuid
from pathlib import Path

import cbor2
import paho.mqtt.client as mqtt
import pytest

import edgemon_proto
from conftest import ROOT, publish_once, terminate, wait_for

CLI = os.environ.get("EM_CLI")
SIM = os.environ.get("EM_SIM")
TMUX = os.environ.get("EM_TMUX", "/usr/bin/tmux")
VECTORS = ROOT / "proto" / "vectors"
WAIT_S = 20
BLOCKS = "▁▂▃▄▅▆▇█"


def need_tools():
    if not CLI or not SIM:
        pytest.skip("EM_CLI and EM_SIM must name edgemon-cli and edgemon-sim (run through ctest)")
    if not os.access(TMUX, os.X_OK):
        pytest.skip(f"{TMUX} is not installed")


class Tmux:
    """A tmux server of its own (-L) running one session; killed by stop()."""

    def __init__(self, tmp, cols=120, rows=40):
        self.socket = f"em-top-{uuid.uuid4().hex[:10]}"
        self.conf = tmp / "tmux.conf"
        self.conf.write_text("set -g status off\n")
        self.cols, self.rows = cols, rows

    def tmux(self, *args, check=True):
        env = dict(os.environ, LANG="C.UTF-8", LC_ALL="C.UTF-8")
        return subprocess.run([TMUX, "-u", "-L", self.socket, "-f", str(self.conf), *args],
                              capture_output=True, text=True, timeout=30, check=check, env=env)

    def start(self, argv, env):
        """Runs argv (with env's variables set) in the session's shell, then says how it
        exited and waits, so that the screen it left can be read."""
        line = " ".join(["env", *(f"{k}={shlex.quote(v)}" for k, v in env.items()),
                         *map(shlex.quote, argv)])
        self.tmux("new-session", "-d", "-s", "top", "-x", str(self.cols), "-y", str(self.rows),
                  f"{line}; echo \"top exited $?\"; exec sleep 600")
        return self

    def screen(self, colors=False):
        return self.tmux("capture-pane", "-p", *(["-e"] if colors else []), "-t", "top").stdout

    def lines(self):
        return self.screen().splitlines()

    def keys(self, *keys):
        self.tmux("send-keys", "-t", "top", *keys)

    def show(self, fmt):
        return self.tmux("display-message", "-p", "-t", "top", fmt).stdout.strip()

    def wait(self, pred, what, timeout=WAIT_S):
        """Polls the screen until pred(text) holds; fails with the last screen."""
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if pred(text):
                return text
            time.sleep(0.2)
        pytest.fail(f"timed out after {timeout} s waiting for {what}; screen:\n{text}")

    def stop(self):
        self.tmux("kill-server", check=False)


class Watch:
    """A paho subscriber to the simulated devices' births and data, decoded: what top was
    sent, data values by metric name."""

    def __init__(self, port, prefix):
        self.prefix = prefix
        self.births = {}
        self.data = []
        self.client = mqtt.Client(client_id=f"it-top-{uuid.uuid4().hex[:8]}")
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port)
        self.client.subscribe("edgemon/v1/+/#", qos=1)
        self.client.loop_start()

    def _on_message(self, client, userdata, m):
        device, kind = m.topic.split("/")[2], m.topic.split("/", 3)[3]
        if not device.startswith(self.prefix) or kind not in ("birth", "data"):
            return
        try:
            msg = edgemon_proto.decode(m.payload)
        except edgemon_proto.DecodeError:
            return
        if kind == "birth":
            self.births[device] = msg
        elif device in self.births:
            msg["named"] = edgemon_proto.values_by_name(msg, self.births[device])
            self.data.append((device, msg))

    def stop(self):
        self.client.loop_stop()
        self.client.disconnect()


def ms(ns):
    """A duration as edgemon-cli writes it (view.c em_view_ms): three significant digits."""
    v = ns / 1e6
    return f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:.0f}"


def start_bench(stack, degrade=()):
    """A broker, edgemon-sim publishing three devices (no DEGRADED excursion but those the
    --degrade rules in `degrade` ask for), and a subscriber to their births and data."""
    need_tools()
    broker = stack.broker()
    prefix = f"top{uuid.uuid4().hex[:6]}"
    log = open(stack.tmp / "sim.log", "wb")
    sim = subprocess.Popen([SIM, "--devices", "3", "--rate", "4", "--broker",
                            f"mqtt://127.0.0.1:{broker.port}", "--prefix", prefix,
                            "--excursion-mean", "1000000", "--duration", "300",
                            *(a for rule in degrade for a in ("--degrade", rule))],
                           stdout=log, stderr=subprocess.STDOUT)
    stack.on_stop(log.close)
    stack.on_stop(lambda: terminate(sim))
    watch = Watch(broker.port, prefix)
    stack.on_stop(watch.stop)
    return broker, prefix, watch


@pytest.fixture
def bench(stack):
    """start_bench with no excursions: levels stay NOMINAL."""
    return start_bench(stack)


@pytest.fixture
def degrading(stack):
    """start_bench with an excursion of device 1 every 3 s on average, none of the others."""
    return start_bench(stack, ["1:3"])


def top(stack, broker, prefix, env=None, cols=120, rows=40):
    """edgemon-cli top on the simulated devices inside tmux; UTF-8 unless env says."""
    t = Tmux(stack.tmp, cols, rows)
    stack.on_stop(t.stop)
    env = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", **(env or {})}
    return t.start([CLI, "top", "--broker", f"mqtt://127.0.0.1:{broker.port}", "--device",
                    f"{prefix}-*"], env)


def title(text):
    return text.splitlines()[0] if text else ""


def shown(text, prefix):
    """The number (1..3) of the simulated device the title names, or None."""
    m = re.search(rf"{prefix}-000(\d) \((\d)/3\)", title(text))
    return int(m.group(1)) if m and m.group(1) == m.group(2) else None


def spark(text, stage):
    """What follows the stage's budget share: its sparkline and span count."""
    row = stage_row(text, stage)
    return row[2].split("%", 1)[-1] if row else ""


def stage_row(text, stage):
    """The stage's row: (p50, p99, rest of the row)."""
    m = re.search(rf"^{stage} +(\S+) +(\S+) +(.*)$", text, re.M)
    return m.groups() if m else None


def state(reason):
    """The golden state_verdict message (DEGRADED from NOMINAL, rule infer.p99, its verdict)
    with the time now and another reason."""
    raw = cbor2.loads((VECTORS / "state_verdict.cbor").read_bytes())
    raw[2] = time.time_ns()
    raw[11] = reason
    return cbor2.dumps(raw)


def test_top_shows_the_device_its_stages_and_the_cause_of_a_level_change(stack, degrading):
    broker, prefix, watch = degrading
    t = top(stack, broker, prefix)
    t.wait(lambda s: shown(s, prefix), "a device")
    while shown(t.screen(), prefix) != 1:  # to the device that degrades
        k = shown(t.screen(), prefix)
        t.keys("n")
        t.wait(lambda s: shown(s, prefix) not in (None, k), "the next device")
    text = t.wait(lambda s: shown(s, prefix) == 1 and stage_row(s, "infer")
                  and re.search(r"^postprocess +\d", s, re.M), "the device's stages")
    first = f"{prefix}-0001"
    # The figures are those the simulator sent: infer's p50 and p99 of one of its windows,
    # IPC as sent, and proc.cpu, which the simulator does not send, as '-' (never 0).
    p50, p99, rest = stage_row(text, "infer")

    def sent():  # what the subscriber has decoded so far (its thread may be a message behind)
        return [(ms(s["p50_ns"]), ms(s["p99_ns"])) for dev, d in list(watch.data)
                if dev == first for s in d["stages"] if s["name"] == "infer" and s["count"]]
    wait_for(lambda: (p50, p99) in sent(), WAIT_S, f"infer {p50}/{p99} among the data sent")
    assert rest.startswith("p99<=40.0"), rest
    assert re.search(r"\[[█▏▎▍▌▋▊▉ ]+\] +\d+%", rest), rest
    figures = re.search(r"^CPU (\S+)  IPC (\S+)  RSS (\d+\.\d) MiB", text, re.M)
    assert figures and figures.group(1) == "-", text
    assert figures.group(2) != "-" and float(figures.group(2)) > 0
    wait_for(lambda: figures.group(2) in {f"{d['named']['pmu.ipc']:.2f}"
                                          for dev, d in list(watch.data) if dev == first},
             WAIT_S, f"IPC {figures.group(2)} among the data sent")
    # A minute's sparkline fills in, one block a second.
    t.wait(lambda s: re.search(rf"[{BLOCKS}]{{3,}}", spark(s, "infer")),
           "three seconds of infer's sparkline")

    # A level change and its cause at the top, with the verdict's head and first cause.
    text = t.wait(lambda s: "LEVEL DEGRADED" in s, "a level change")
    level = next(ln for ln in text.splitlines() if ln.startswith("LEVEL "))
    assert re.search(r"since \d\d:\d\d:\d\d\.\d{3} from NOMINAL  rule infer\.p99  "
                     r"infer \d+(\.\d+)? ms, bound 40\.0 ms", level), level
    assert "CAUSE p99 over its budget (simulated)" in text, text
    assert re.search(r"^ +infer p99 \S+ ms against 26\.0 ms over \d+ NOMINAL windows", text, re.M)
    assert re.search(r"^ +1\. [a-z ]+ +\d+%", text, re.M), text

    # On a terminal, without NO_COLOR, the level is coloured.
    assert re.search(r"LEVEL \x1b\[[0-9;]*m", t.screen(colors=True)), t.screen(colors=True)

    # On device 2, which the simulator does not degrade: a reason with bytes a terminal must
    # not see as such (a bidi override, a wide glyph), and a payload full of escapes.
    quiet = f"{prefix}-0002"
    t.keys("n")
    t.wait(lambda s: shown(s, prefix) == 2, "device 2")
    publish_once(broker.port, f"edgemon/v1/{quiet}/state", state("slow \u202e全 frames"))
    text = t.wait(lambda s: "CAUSE slow \\xe2\\x80\\xae\\xe5\\x85\\xa8 frames" in s,
                  "the reason, escaped")
    assert "\u202e" not in text and "全" not in text
    assert "infer p99 61.2 ms against 26.0 ms over 12 NOMINAL windows (+35.2 ms):" in text
    assert re.search(r"1\. cpu contention +81%", text), text
    publish_once(broker.port, f"edgemon/v1/{quiet}/data", b"\x1b[2J\x1b]0;pwned\x07\x9b31m")
    text = t.wait(lambda s: "! 1 message(s) from this device did not decode" in s,
                  "the undecodable message")
    assert "pwned" not in text and quiet in title(text)
    assert t.show("#{pane_title}") != "pwned"


def test_top_keys_switch_device_pause_resize_and_quit_cleanly(stack, bench):
    broker, prefix, watch = bench
    t = top(stack, broker, prefix)
    k = shown(t.wait(lambda s: shown(s, prefix) and stage_row(s, "infer"),
                     "three devices, one shown"), prefix)
    after = k % 3 + 1
    t.keys("n")
    t.wait(lambda s: shown(s, prefix) == after, f"the next device ({after} after {k})")
    t.keys("p")
    t.wait(lambda s: shown(s, prefix) == k, "the previous device")
    before = (k + 1) % 3 + 1
    t.keys("Left")
    t.wait(lambda s: shown(s, prefix) == before, f"the device before {k}, wrapping")
    # The list: every device, the shown one marked; Up to the first and Enter picks it.
    t.keys("l")
    listed = t.wait(lambda s: "DEVICE" in s and f"> {prefix}-000{before}" in s, "the list")
    assert all(f"{prefix}-000{i}" in listed for i in (1, 2, 3))
    t.keys("Up", "Up", "Up", "Enter")
    t.wait(lambda s: shown(s, prefix) == 1 and stage_row(s, "infer"),
           "the device picked from the list")
    # Sorting: by name, then by p99 (the simulator's infer is the slowest, postprocess the
    # fastest by far); the arrival order put preprocess first.
    for key, order in (("name", ["infer", "postprocess", "preprocess"]),
                       ("p99", ["infer", "preprocess", "postprocess"])):
        t.keys("s")
        text = t.wait(lambda s: f"sort: {key}" in s, f"the sort by {key}")
        rows = [m.group(1) for m in re.finditer(r"^(preprocess|infer|postprocess) ", text, re.M)]
        assert rows == order, text

    # Pause: the screen stops changing while data keeps coming; Space again resumes.
    t.keys("Space")
    frozen = t.wait(lambda s: "PAUSED" in s, "the pause")
    seen = len(watch.data)
    deadline = time.monotonic() + WAIT_S
    while len(watch.data) < seen + 12 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(watch.data) >= seen + 12, "the simulator stopped publishing"
    time.sleep(1.5)  # at least one refresh period past the last of them
    assert t.screen() == frozen
    t.keys("Space")
    t.wait(lambda s: "PAUSED" not in s and s != frozen, "the screen moving again")

    # A smaller window: redrawn at its width, the title's clock at the new right edge, the
    # keys on its last row, no line longer than it; the sparkline no longer fits.
    wide = t.screen()
    assert "p99, last" in wide
    t.tmux("resize-window", "-t", "top", "-x", "72", "-y", "24")
    small = t.wait(lambda s: re.search(r"\d\d:\d\d:\d\d$", s.splitlines()[0])
                   and len(s.splitlines()[0]) == 72, "the frame at 72 columns")
    lines = small.splitlines()
    assert len(lines) <= 24 and all(len(ln) <= 72 for ln in lines)
    assert "p99, last" not in small and stage_row(small, "infer")
    t.wait(lambda s: len(s.splitlines()) == 24 and s.splitlines()[-1].startswith(" q quit"),
           "the keys on the last row")

    # q: the shell's screen back (not the alternate one), the cursor shown, exit 0.
    t.keys("q")
    t.wait(lambda s: "top exited 0" in s, "top to exit")
    assert t.show("#{alternate_on}") == "0"
    assert t.show("#{cursor_flag}") == "1"
    assert "edgemon top" not in t.screen()


def test_top_puts_the_terminal_back_on_ctrl_c_sigterm_and_a_lost_broker(stack, bench):
    """And without colour (NO_COLOR) or UTF-8 (LANG=C): ASCII, no escapes."""
    broker, prefix, watch = bench
    t = top(stack, broker, prefix, env={"NO_COLOR": "1", "LANG": "C", "LC_ALL": "C"})
    text = t.wait(lambda s: re.search(r"[_.\-:=+*#]{3,}", spark(s, "infer")),
                  "infer's row with an ASCII sparkline")
    # ASCII only: the bar of '|', no block character anywhere; no escape at all (NO_COLOR).
    assert re.search(r"\[\|+ *\] +\d+%", stage_row(text, "infer")[2]), text
    assert not any(ch in text for ch in BLOCKS + "▏▎▍▌▋▊▉")
    assert "\x1b" not in t.screen(colors=True), repr(t.screen(colors=True))
    t.keys("C-c")
    t.wait(lambda s: "top exited 0" in s, "top to exit on Ctrl-C")
    assert t.show("#{alternate_on}") == "0"

    # SIGTERM from elsewhere: the terminal is put back just the same.
    t2 = top(stack, broker, prefix)
    t2.wait(lambda s: stage_row(s, "infer"), "top's second run")
    shell = int(t2.show("#{pane_pid}"))
    children = (f"/proc/{shell}/task/{shell}/children")
    pid = int(open(children).read().split()[0])
    os.kill(pid, 15)
    t2.wait(lambda s: "top exited 0" in s, "top to exit on SIGTERM")
    assert t2.show("#{alternate_on}") == "0"
    assert t2.show("#{cursor_flag}") == "1"

    # The broker goes away: the terminal is put back, then the reason, exit 3.
    t3 = top(stack, broker, prefix)
    t3.wait(lambda s: stage_row(s, "infer"), "top's third run")
    broker.stop()
    text = t3.wait(lambda s: "top exited 3" in s, "top to exit when the broker is gone")
    assert "edgemon-cli top: lost the connection to the broker" in text, text
    assert "edgemon top" not in text
    assert t3.show("#{alternate_on}") == "0"


def test_top_refuses_when_stdout_is_not_a_terminal():
    need_tools()
    r = subprocess.run([CLI, "top", "--broker", "mqtt://127.0.0.1:1"], capture_output=True,
                       text=True, timeout=30, input="")
    assert r.returncode == 4, r
    assert "edgemon-cli top: stdout is not a terminal" in r.stderr
    assert r.stdout == ""
    assert "\x1b" not in r.stderr


def test_the_demo_shows_top_full_screen_with_its_slow_phase(stack):
    """scripts/demo.sh's view with EM_DEMO_VIEW=top: the demo's own broker, aggregator, agent
    and inference loop, and top on the tmux terminal showing demo-board, its stages, and the
    level its slow phase raises; the demo ends by itself and exits 0."""
    need_tools()
    agent = os.environ.get("EM_AGENT")
    if not agent:
        pytest.skip("EM_AGENT must name edgemon-agent (run through ctest)")
    build = Path(CLI).resolve().parents[2]  # demo.py finds the three programs under it
    assert (build / "firmware" / "agent" / "edgemon-agent").resolve() == Path(agent).resolve()
    t = Tmux(stack.tmp, 120, 40)
    stack.on_stop(t.stop)
    t.start(["/usr/bin/python3", str(ROOT / "scripts" / "lib" / "demo.py"), str(build)],
            {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "EM_DEMO_VIEW": "top",
             "EM_DEMO_SECONDS": "14"})
    text = t.wait(lambda s: title(s).startswith("edgemon top") and "demo-board" in title(s)
                  and re.search(r"^infer\s+\d", s, re.M), "top on the demo's device", 60)
    assert re.search(r"^preprocess\s", text, re.M) and re.search(r"^postprocess\s", text, re.M)
    # The slow phase (from 30% to 60% of the run) breaks infer's median budget.
    t.wait(lambda s: "LEVEL DEGRADED" in s, "the slow phase's level", 60)
    # top stops at the demo's end; the demo then shows the breach and stops what it started.
    done = t.wait(lambda s: re.search(r"top exited \d+", s), "the demo to end", 120)
    assert "top exited 0" in done, done
