"""Tests of the Python client's level readers (firmware/client/python/edgemon/_state.py).

The test plays the agent: it formats state page v1 files and packs level push datagrams v1
itself, with struct, from proto/WIRE.md (independently of the client's own formats), and
writes the page through its own read-write mapping as the seqlock's writer. Checked: every
field of level()/state(); a write in progress (odd seq) retried and then read consistently;
a torn copy retried; a concurrent writer never yielding a mixed record; absent, short and
garbled pages returning None and counted, never raising; no system call on the fast path
(structurally: the open/stat/mmap functions are counted); re-opening paced to once per second
and following an agent restart (new file renamed into place); the path resolution; the C
golden page vector; subscribe / wait_change / unsubscribe against a real bound socket.

Run with: /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/client
"""

import json
import math
import mmap
import os
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from client_tests import SocketPeer, socket_peer  # first: puts the package on sys.path

import edgemon  # noqa: E402
import edgemon._state as state_module  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

VECTORS = ROOT / "proto" / "vectors" / "wire"
LEVELS = {"NOMINAL": 0, "WARN": 1, "DEGRADED": 2, "CRITICAL": 3}
NAN = float("nan")

# ---- The agent's side, from proto/WIRE.md ----

PAGE_HEAD = "<4sHHII"
BODY = "<BBHIQQdd32s32s136s"
PUSH = "<2sBBIQ" + BODY[1:]
SPAN = "<2sBBIQQQ32s"


def body(level="DEGRADED", prev="NOMINAL", changes=3, mono=5000000000123,
         wall=1718000000123456789, value=41.5, bound=33.0, rule="infer.p99", stage="infer",
         reason="p99 41.5 ms > 33 ms budget for 3 windows"):
    return (LEVELS[level], LEVELS[prev], 0, changes, mono, wall, value, bound, rule.encode(),
            stage.encode(), reason.encode())


def pack_page(seq=2, agent_pid=777, **fields):
    raw = struct.pack(PAGE_HEAD, b"EMST", 1, 256, seq, agent_pid) + struct.pack(
        BODY, *body(**fields))
    assert len(raw) == 256
    return raw


def pack_push(agent_pid=777, **fields):
    raw = struct.pack(PUSH, b"EM", 1, 16, agent_pid, 0, *body(**fields))
    assert len(raw) == 256
    return raw


class Agent:
    """The state page's writer: formats the file (temp + rename, as the agent does) and
    publishes records through a read-write shared mapping with the seqlock."""

    def __init__(self, path, agent_pid=777, **fields):
        self.path = str(path)
        self.format(agent_pid, **fields)

    def format(self, agent_pid=777, **fields):
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(pack_page(seq=0, agent_pid=agent_pid, **fields))
        os.rename(tmp, self.path)
        fd = os.open(self.path, os.O_RDWR)
        self.mm = mmap.mmap(fd, 256)
        os.close(fd)

    @property
    def seq(self):
        return struct.unpack_from("<I", self.mm, 8)[0]

    def set_seq(self, seq):
        struct.pack_into("<I", self.mm, 8, seq)

    def begin(self):
        self.set_seq(self.seq + 1)

    def end(self, **fields):
        self.mm[16:256] = struct.pack(BODY, *body(**fields))
        self.set_seq(self.seq + 1)

    def write(self, **fields):
        self.begin()
        self.end(**fields)


class FakeClock:
    """The monotonic clock a StatePage paces its slow path with."""

    def __init__(self):
        self.now = 10 ** 12

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += int(seconds * 1e9)


class SyscallCounter:
    """Counts the calls of every function of _state.py that reaches the file system."""

    def __init__(self, monkeypatch):
        self.calls = []
        for name in ("open", "stat", "fstat", "close"):
            monkeypatch.setattr(state_module.os, name, self._wrap(name, getattr(os, name)))
        monkeypatch.setattr(state_module.mmap, "mmap", self._wrap("mmap", mmap.mmap))

    def _wrap(self, name, func):
        def counted(*args, **kwargs):
            self.calls.append(name)
            return func(*args, **kwargs)
        return counted


@pytest.fixture
def page_path(tmp_path):
    return tmp_path / "state"


@pytest.fixture
def clock():
    return FakeClock()


# ---- Reading the page ----


def test_level_and_every_field(page_path):
    agent = Agent(page_path, agent_pid=4242)
    agent.write()
    page = edgemon.StatePage(page_path)
    assert page.level() == "DEGRADED"
    st = page.state()
    assert isinstance(st, edgemon.State)
    assert st._asdict() == {
        "level": "DEGRADED", "prev_level": "NOMINAL", "changes": 3,
        "since_mono_ns": 5000000000123, "since_wall_ns": 1718000000123456789, "value": 41.5,
        "bound": 33.0, "rule": "infer.p99", "stage": "infer",
        "reason": "p99 41.5 ms > 33 ms budget for 3 windows", "agent_pid": 4242, "seq": 2}
    assert page.stats()["opens"] == 1


def test_nan_is_none_and_empty_texts(page_path):
    agent = Agent(page_path)
    agent.write(level="NOMINAL", prev="WARN", value=NAN, bound=NAN, rule="", stage="",
                reason="")
    st = edgemon.StatePage(page_path).state()
    assert (st.level, st.prev_level, st.value, st.bound) == ("NOMINAL", "WARN", None, None)
    assert (st.rule, st.stage, st.reason) == ("", "", "")


def test_every_level_name_and_changes_seen_through_the_mapping(page_path):
    agent = Agent(page_path)
    page = edgemon.StatePage(page_path)
    for n, name in enumerate(["NOMINAL", "WARN", "DEGRADED", "CRITICAL", "NOMINAL"]):
        agent.write(level=name, changes=n)
        assert page.level() == name
        assert page.state().changes == n
        assert page.state().seq == 2 * (n + 1)
    assert page.stats()["opens"] == 1


def test_on_change_is_called_once_per_new_record_and_never_raises(page_path):
    agent = Agent(page_path)
    calls = []
    page = edgemon.StatePage(page_path, on_change=lambda: calls.append(1))
    agent.write(level="NOMINAL", changes=0)
    for _ in range(3):
        assert page.level() == "NOMINAL"
    assert len(calls) == 1  # the cached record: no call on the hot path
    agent.write(level="DEGRADED", changes=1)
    assert page.level() == "DEGRADED" and page.level() == "DEGRADED"
    assert len(calls) == 2

    def boom():
        raise RuntimeError("a callback that fails")
    page.on_change = boom
    agent.write(level="NOMINAL", changes=2)
    assert page.level() == "NOMINAL"  # its exception never reaches the reader


def test_a_level_change_makes_the_client_check_the_agent_at_its_next_span(tmp_path):
    page_path = str(tmp_path / "state")
    agent = Agent(page_path)
    agent.write(level="NOMINAL", changes=0)
    c = edgemon.Client(str(tmp_path / "spans.sock"), state_path=page_path)
    try:
        c.level()
        c._next_check_ns = 1 << 62  # as if the agent was checked a moment ago
        c.level()
        assert c._next_check_ns == 1 << 62  # no change: the check waits
        agent.write(level="DEGRADED", changes=1)
        assert c.level() == "DEGRADED"
        assert c._next_check_ns == 0  # due at the next span
    finally:
        c.close()


def test_golden_page_vector_from_the_c_writer(tmp_path):
    expected = json.loads((VECTORS / "page.json").read_text())
    path = tmp_path / "state"
    path.write_bytes((VECTORS / "page.bin").read_bytes())
    st = edgemon.StatePage(path).state()
    got = st._asdict()
    for key, want in expected.items():
        if key != "kind":
            assert got[key] == want, key


def test_write_in_progress_then_consistent(page_path):
    agent = Agent(page_path)
    agent.begin()  # odd: the agent is in the middle of its first write
    page = edgemon.StatePage(page_path)
    assert page.level() is None  # never consistent: no state yet
    assert page.state() is None
    assert page.stats()["busy"] == 2
    agent.end(level="CRITICAL")
    assert page.level() == "CRITICAL"
    assert page.state().seq == 2


def test_busy_returns_last_consistent_state(page_path):
    agent = Agent(page_path)
    agent.write(level="WARN", changes=1)
    page = edgemon.StatePage(page_path)
    assert page.state().changes == 1
    agent.begin()  # a write starts and stays in progress
    st = page.state()
    assert (st.level, st.changes, st.seq) == ("WARN", 1, 2)
    assert page.level() == "WARN"
    assert page.stats()["busy"] == 2
    agent.end(level="CRITICAL", changes=2)
    assert page.state().changes == 2 and page.level() == "CRITICAL"


def test_reader_retries_until_the_counter_is_even_and_stable(page_path, monkeypatch):
    agent = Agent(page_path)
    agent.write(level="DEGRADED")
    real = state_module._load_seq
    # odd, odd, a copy overlapped by a write (2 -> 4), then a stable 4.
    script = iter([3, 3, 2, 4, 4, 4])
    loads = []

    def scripted(mm):
        loads.append(real(mm))
        return next(script, real(mm))

    monkeypatch.setattr(state_module, "_load_seq", scripted)
    page = edgemon.StatePage(page_path)
    st = page.state()
    assert st is not None and st.level == "DEGRADED" and st.seq == 4
    assert len(loads) == 6  # 2 odd tries, 1 torn try (2 loads), 1 good try (2 loads)
    assert page.stats()["busy"] == 0


def test_bounded_retries_against_a_counter_that_stays_odd(page_path, monkeypatch):
    Agent(page_path).write()
    loads = []
    monkeypatch.setattr(state_module, "_load_seq", lambda mm: loads.append(1) or 5)
    page = edgemon.StatePage(page_path)
    assert page.state() is None
    assert len(loads) == 64
    assert page.stats()["busy"] == 1


def test_concurrent_writer_never_yields_a_mixed_record(page_path):
    agent = Agent(page_path)
    agent.write(changes=0, reason="n=0")
    stop = threading.Event()

    def writer():
        n = 0
        while not stop.is_set():
            n += 1
            agent.begin()
            rec = struct.pack(BODY, *body(changes=n, reason="n=%d" % n))
            agent.mm[16:120] = rec[:104]  # two halves: a reader can land between them
            agent.mm[120:256] = rec[104:]
            agent.set_seq(agent.seq + 1)

    thread = threading.Thread(target=writer)
    thread.start()
    page = edgemon.StatePage(page_path)
    seen = 0
    try:
        # Half a second of reads, and on a loaded machine longer, until one got a whole record
        # (every read may land on the writer mid-record while it holds the GIL).
        start = time.monotonic()
        while time.monotonic() < start + 0.5 or (seen == 0 and time.monotonic() < start + 30):
            st = page.state()
            if st is not None:
                assert st.reason == "n=%d" % st.changes
                seen += 1
    finally:
        stop.set()
        thread.join()
    assert seen > 0
    assert page.stats()["invalid"] == 0


@pytest.mark.parametrize("raw", [
    b"",
    b"EMST" + bytes(96),                                     # short
    pack_page() + b"\0",                                     # long
    b"XXXX" + pack_page()[4:],                               # magic
    pack_page()[:4] + struct.pack("<H", 2) + pack_page()[6:],  # version
    pack_page()[:6] + struct.pack("<H", 128) + pack_page()[8:],  # page_size
    bytes(256),
    os.urandom(256),
], ids=["empty", "short", "long", "magic", "version", "page_size", "zeros", "random"])
def test_not_a_page_is_none_and_counted(tmp_path, raw):
    path = tmp_path / "state"
    path.write_bytes(raw)
    page = edgemon.StatePage(path)
    assert page.level() is None
    assert page.state() is None
    assert page.stats()["invalid"] >= 1
    assert page.stats()["mapped"] is False


@pytest.mark.parametrize("offset,value", [
    (16, 4),          # level > 3
    (17, 9),          # prev_level > 3
    (18, 1),          # reserved
    (16 + 40 + 31, 0x41),  # rule without a NUL
    (16 + 40 + 20, 0x41),  # rule: a byte after the NUL padding
    (16 + 40 + 0, 0x07),   # rule: not printable
    (16 + 72 + 0, 0x20),   # stage: a space is not a stage name character
    (16 + 104 + 0, 0x80),  # reason: not printable
    (16 + 104 + 135, 0x41),  # reason without a NUL
])
def test_garbled_record_is_none_and_counted(page_path, offset, value):
    agent = Agent(page_path)
    agent.write()
    agent.mm[offset] = value
    page = edgemon.StatePage(page_path)
    assert page.level() is None
    assert page.state() is None
    assert page.stats()["invalid"] == 2


def test_absent_page_is_none_and_counted(tmp_path):
    page = edgemon.StatePage(tmp_path / "nope" / "state")
    assert page.level() is None and page.state() is None
    assert page.stats()["absent"] == 1  # the second read was not due for another look


# ---- No system call on the fast path; the slow path paced to once per second ----


def test_fast_path_makes_no_system_call(page_path, monkeypatch, clock):
    agent = Agent(page_path)
    agent.write(level="WARN")
    counter = SyscallCounter(monkeypatch)
    page = edgemon.StatePage(page_path, clock=clock)
    assert page.level() == "WARN"
    assert counter.calls == ["stat", "open", "fstat", "mmap", "close"]  # the lazy first open
    mapping = page._mm
    del counter.calls[:]
    for _ in range(100000):
        page.level()
    assert counter.calls == []
    agent.write(level="CRITICAL")  # a change is read from the mapping too
    assert page.level() == "CRITICAL" and page.state().level == "CRITICAL"
    assert counter.calls == []
    assert page._mm is mapping
    clock.advance(1.0)  # the once-per-second look at the path: one stat, no re-open
    assert page.level() == "CRITICAL"
    assert counter.calls == ["stat"]
    assert page._mm is mapping and page.stats()["opens"] == 1


def test_fast_path_uses_the_real_clock_only(page_path, monkeypatch):
    """With the real clock, 10^5 reads in well under a second make at most a couple of stat()s
    (structural: it counts them, it asserts no timing)."""
    Agent(page_path).write()
    counter = SyscallCounter(monkeypatch)
    page = edgemon.StatePage(page_path)
    start = time.monotonic()
    for _ in range(100000):
        assert page.level() == "DEGRADED"
    elapsed = time.monotonic() - start
    assert counter.calls.count("open") == 1
    assert counter.calls.count("stat") <= int(elapsed) + 2


def test_missing_page_is_looked_for_once_per_second(page_path, monkeypatch, clock):
    counter = SyscallCounter(monkeypatch)
    page = edgemon.StatePage(page_path, clock=clock)
    for _ in range(1000):
        assert page.level() is None
    assert counter.calls == ["stat"]
    Agent(page_path).write(level="WARN")  # the agent starts
    assert page.level() is None  # not due yet
    clock.advance(0.999)
    assert page.level() is None
    clock.advance(0.001)
    assert page.level() == "WARN"
    assert page.stats()["opens"] == 1


def test_agent_restart_and_exit_are_followed(page_path, clock):
    agent = Agent(page_path, agent_pid=100)
    agent.write(level="CRITICAL", changes=7)
    page = edgemon.StatePage(page_path, clock=clock)
    assert page.state().agent_pid == 100
    agent.format(agent_pid=200, level="NOMINAL", changes=0)  # a new agent, a new file
    assert page.state().agent_pid == 100  # until the next look at the path
    clock.advance(1)
    st = page.state()
    assert (st.agent_pid, st.level, st.changes, st.seq) == (200, "NOMINAL", 0, 0)
    assert page.stats()["opens"] == 2
    os.unlink(str(page_path))  # the agent went away and removed its page
    clock.advance(1)
    assert page.level() is None and page.state() is None
    assert page.stats()["mapped"] is False


# ---- Paths and the Client / module API ----


def test_state_path_resolution(monkeypatch, tmp_path):
    for var in ("EDGEMON_STATE_PAGE", "EDGEMON_RUNTIME_DIR", "XDG_RUNTIME_DIR"):
        monkeypatch.delenv(var, raising=False)
    from edgemon import _paths
    service = str(tmp_path / "run-edgemon")  # not this machine's: an agent may run here
    monkeypatch.setattr(_paths, "SERVICE_DIR", service)
    resolve = edgemon.resolve_state_path
    if os.geteuid() == 0:
        assert resolve() == service + "/state"
    else:
        assert resolve() == "/tmp/edgemon-%d/state" % os.geteuid()
        monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
        assert resolve() == "/run/user/1000/edgemon/state"
    monkeypatch.setenv("EDGEMON_RUNTIME_DIR", "/srv/em")
    assert resolve() == "/srv/em/state"
    monkeypatch.setenv("EDGEMON_STATE_PAGE", "/dev/shm/em-state")
    assert resolve() == "/dev/shm/em-state"
    assert resolve(tmp_path / "x") == str(tmp_path / "x")
    assert edgemon.Client(tmp_path / "s.sock").state_path == "/dev/shm/em-state"


def test_client_and_module_level(page_path, tmp_path):
    Agent(page_path).write(level="DEGRADED")
    with edgemon.Client(tmp_path / "absent.sock", state_path=page_path) as c:
        assert c.level() == "DEGRADED"
        assert c.state().rule == "infer.p99"
        assert c.state_stats()["opens"] == 1
    try:
        edgemon.configure(str(tmp_path / "absent.sock"), state_path=page_path)
        assert edgemon.level() == "DEGRADED"
        assert edgemon.state().stage == "infer"
    finally:
        edgemon.configure(str(tmp_path / "absent.sock"), state_path=tmp_path / "absent")
    assert edgemon.level() is None


# ---- Pushes ----


class FakeAgent(SocketPeer):
    """A bound socket playing the agent's span socket: receives (un)subscribe datagrams and
    sends level pushes back to their source address."""

    def recv_request(self):
        raw, addr = self.sock.recvfrom(4096)
        assert len(raw) == 64
        magic, version, kind, pid, _frame, _start, duration, stage = struct.unpack(SPAN, raw)
        assert (magic, version, duration, stage) == (b"EM", 1, 0, bytes(32))
        return kind, pid, addr

    def push(self, addr, raw):
        self.sock.sendto(raw, addr)


fake_agent = socket_peer(FakeAgent)


def test_subscribe_push_and_unsubscribe(fake_agent, tmp_path):
    with edgemon.Client(fake_agent.path, state_path=tmp_path / "state") as c:
        assert c.subscribe() is True
        kind, pid, addr = fake_agent.recv_request()
        assert (kind, pid) == (3, os.getpid())
        assert isinstance(addr, bytes) and addr.startswith(b"\0")  # autobound, abstract
        assert c.state_stats()["subscribed"] is True
        fake_agent.push(addr, pack_push(agent_pid=4321, level="CRITICAL", prev="DEGRADED",
                                        changes=9, value=NAN, bound=2e9, rule="pre.alive",
                                        stage="pre", reason="stall"))
        st = c.wait_change(5)
        assert st._asdict() == {
            "level": "CRITICAL", "prev_level": "DEGRADED", "changes": 9,
            "since_mono_ns": 5000000000123, "since_wall_ns": 1718000000123456789,
            "value": None, "bound": 2e9, "rule": "pre.alive", "stage": "pre",
            "reason": "stall", "agent_pid": 4321, "seq": None}
        assert c.wait_change(0.05) is None  # timeout
        assert c.wait_change(0) is None
        # Invalid datagrams are skipped and counted; the valid one after them is returned.
        fake_agent.push(addr, b"short")
        fake_agent.push(addr, pack_push()[:3] + b"\x11" + pack_push()[4:])  # kind 17
        fake_agent.push(addr, pack_push()[:16] + b"\x04" + pack_push()[17:])  # level 4
        fake_agent.push(addr, pack_push(level="WARN"))
        assert c.wait_change(5).level == "WARN"
        assert c.state_stats()["push"]["invalid"] == 3
        assert c.unsubscribe() is True
        kind, _pid, addr2 = fake_agent.recv_request()
        assert (kind, addr2) == (4, addr)
        assert c.state_stats()["subscribed"] is False


def test_golden_push_vector(fake_agent, tmp_path):
    expected = json.loads((VECTORS / "push.json").read_text())
    with edgemon.Client(fake_agent.path, state_path=tmp_path / "state") as c:
        c.subscribe()
        _kind, _pid, addr = fake_agent.recv_request()
        fake_agent.push(addr, (VECTORS / "push.bin").read_bytes())
        got = c.wait_change(5)._asdict()
    for key, want in expected.items():
        if key != "kind":
            assert got[key] == want, key


def test_wait_change_subscribes_first_and_module_level(fake_agent, tmp_path):
    try:
        edgemon.configure(fake_agent.path, state_path=tmp_path / "state")
        result = {}
        thread = threading.Thread(target=lambda: result.update(st=edgemon.wait_change(5)))
        thread.start()
        kind, _pid, addr = fake_agent.recv_request()
        assert kind == 3
        fake_agent.push(addr, pack_push(level="NOMINAL", prev="DEGRADED"))
        thread.join(10)
        assert result["st"].level == "NOMINAL" and result["st"].prev_level == "DEGRADED"
        assert edgemon.subscribe() is True  # again: harmless, same address
        assert fake_agent.recv_request()[2] == addr
        assert edgemon.unsubscribe() is True
        assert fake_agent.recv_request()[0] == 4
        assert edgemon.unsubscribe() is False  # not subscribed any more
    finally:
        edgemon.configure(str(tmp_path / "absent.sock"), state_path=tmp_path / "absent")


def test_subscribe_without_agent_never_raises(tmp_path):
    with edgemon.Client(tmp_path / "absent.sock", state_path=tmp_path / "state") as c:
        assert c.subscribe() is False
        assert c.wait_change(0.01) is None
        assert c.state_stats()["push"]["send_failed"] >= 1


def test_nan_handling_matches_wire_any_nan(page_path):
    agent = Agent(page_path)
    agent.write()
    struct.pack_into("<Q", agent.mm, 16 + 24, 0x7FF0000000000001)  # a signalling NaN
    agent.set_seq(agent.seq + 2)
    st = edgemon.StatePage(page_path).state()
    assert st.value is None and not math.isnan(st.bound)
