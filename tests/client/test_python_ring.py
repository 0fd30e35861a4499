"""Tests of the Python client's span rings v2 (firmware/client/python/edgemon/_ring.py).

The peer is a real AF_UNIX SOCK_DGRAM socket bound at the client's socket path that speaks
the agent's side of WIRE.md "Span ring v2": it receives the register datagram with
SCM_RIGHTS + SO_PASSCRED, checks the memfd's seals and size, maps it read-only, decodes the
header and slots with struct from WIRE.md's tables, and answers with a kind-17 ack (or not at
all, as a v1-only agent). The deadline page is written by the tests per "Deadline page v1".

Run with: /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/client
"""

import array
import fcntl
import mmap
import os
import socket
import struct
import threading
import time

import pytest

from client_tests import SocketPeer, socket_peer  # first: puts the package on sys.path

import edgemon  # noqa: E402
from test_python_client import FakeClock  # noqa: E402  (beside this file)

# ---- WIRE.md, written out independently of the client ----

DGRAM = struct.Struct("<2sBBIQQQ32s")
ACK = struct.Struct("<2sBBIQqQ32s")
RING_HEADER = struct.Struct("<4sHHHHIIIQQQI76x")
SLOT = struct.Struct("<IB3xQQQ32s")
PAGE_HEAD = struct.Struct("<4sHHIII44x")
PAGE_ENTRY = struct.Struct("<32sQ")
PAGE_BYTES = 2624
UCRED = struct.Struct("3i")
WAIT_S = 5.0


def write_deadline_page(path, entries=(), ring_slots=64, seq=2, replace=True):
    """Formats a deadline page v1; replace=True renames a fresh file into place (a new inode:
    a new agent), False rewrites the same file in place (same agent, seq moved)."""
    page = bytearray(PAGE_BYTES)
    PAGE_HEAD.pack_into(page, 0, b"EMDL", 1, len(entries), seq, 4242, ring_slots)
    for i, (stage, deadline_ns) in enumerate(entries):
        PAGE_ENTRY.pack_into(page, 64 + 40 * i, stage, deadline_ns)
    if replace:
        tmp = str(path) + ".tmp"
        with open(tmp, "wb") as f:
            f.write(page)
        os.rename(tmp, path)
    else:
        with open(path, "r+b") as f:
            f.write(page)


def process_start_time(pid):
    with open("/proc/%d/stat" % pid, "rb") as f:
        stat = f.read()
    return int(stat[stat.rindex(b")") + 2:].split()[19])


class Registration:
    """One register datagram as the agent sees it: fields, credentials, the mapped ring."""

    def __init__(self, raw, fd, creds, addr):
        magic, version, kind, pid, start, r1, r2, tail = DGRAM.unpack(raw)
        assert (magic, version, kind) == (b"EM", 2, 5)
        assert (r1, r2, tail) == (0, 0, bytes(32))
        self.pid, self.start, self.creds, self.addr, self.fd = pid, start, creds, addr, fd
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        assert seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_SEAL
        assert seals & fcntl.F_SEAL_GROW
        size = os.fstat(fd).st_size
        self.map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        head = self.header()
        assert size == 128 + head["slot_count"] * 64
        self.inode = os.fstat(fd).st_ino

    def header(self):
        (magic, version, header_size, slot_size, reserved, slot_count, pid, tid, start_time,
         head, lost, state) = RING_HEADER.unpack_from(self.map, 0)
        assert (magic, version, header_size, slot_size, reserved) == (b"EMRG", 2, 128, 64, 0)
        assert bytes(self.map[52:128]) == bytes(76)
        assert slot_count & (slot_count - 1) == 0 and 64 <= slot_count <= 65536
        return {"slot_count": slot_count, "pid": pid, "tid": tid, "start_time": start_time,
                "head": head, "lost": lost, "state": state}

    def slots(self, first, last):
        """Decodes positions [first, last) and checks each against WIRE.md's slot rules."""
        count = self.header()["slot_count"]
        out = []
        for q in range(first, last):
            raw = bytes(self.map[128 + (q % count) * 64:128 + (q % count + 1) * 64])
            seq, kind, frame, start_ns, duration_ns, stage = SLOT.unpack(raw)
            assert seq == (q + 1) % 2**32 and kind in (1, 2) and raw[5:8] == bytes(3)
            name = stage.rstrip(b"\0")
            assert stage == name + bytes(32 - len(name))
            out.append((kind, frame, start_ns, duration_ns, name.decode()))
        return out

    def close(self):
        self.map.close()
        os.close(self.fd)


class Agent(SocketPeer):
    """The agent's side of the span socket, for one test."""

    def __init__(self, path):
        super().__init__(path, WAIT_S)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.regs = []

    def recv(self, timeout=WAIT_S):
        """('v1', fields) for a v1 datagram, ('v2', fields) for kinds 6, or ('reg', Registration);
        None on timeout."""
        self.sock.settimeout(timeout)
        try:
            raw, anc, _flags, addr = self.sock.recvmsg(
                128, socket.CMSG_SPACE(4 * 4) + socket.CMSG_SPACE(UCRED.size))
        except socket.timeout:
            return None
        fds, creds = [], None
        for level, ctype, data in anc:
            if level == socket.SOL_SOCKET and ctype == socket.SCM_RIGHTS:
                fds.extend(array.array("i", data[:len(data) - len(data) % 4]))
            elif level == socket.SOL_SOCKET and ctype == socket.SCM_CREDENTIALS:
                creds = UCRED.unpack(data[:UCRED.size])
        assert len(raw) == 64
        if raw[2] == 2 and raw[3] == 5:
            assert len(fds) == 1
            reg = Registration(raw, fds[0], creds, addr)
            self.regs.append(reg)
            return ("reg", reg)
        assert fds == []
        magic, version, kind, pid, frame, start_ns, duration_ns, stage = DGRAM.unpack(raw)
        assert magic == b"EM" and version in (1, 2)
        fields = {"kind": kind, "pid": pid, "frame": frame, "start_ns": start_ns,
                  "duration_ns": duration_ns, "stage": stage.rstrip(b"\0").decode()}
        return ("v%d" % version, fields)

    def drain(self):
        out = []
        while True:
            got = self.recv(timeout=0.05)
            if got is None:
                return out
            out.append(got)

    def ack(self, reg, status=0, start=None):
        self.sock.sendto(ACK.pack(b"EM", 2, 17, os.getpid(),
                                  reg.start if start is None else start, status, 7, bytes(32)),
                         reg.addr)

    def close(self):
        for reg in self.regs:
            reg.close()
        super().close(unlink=False)


agent = socket_peer(Agent)


@pytest.fixture
def page(tmp_path):
    path = tmp_path / "deadlines"
    write_deadline_page(path)
    return path


@pytest.fixture
def client(agent, page):
    c = edgemon.Client(agent.path)
    yield c
    c.close()


def register_first_span(client, agent, stage="pre"):
    """The thread's first span: a register datagram, then the span itself as v1."""
    with client.span(stage):
        pass
    kind, reg = agent.recv()
    assert kind == "reg"
    kind, got = agent.recv()
    assert kind == "v1" and got["stage"] == stage
    return reg


# ---- Registration and the ring's bytes ----


def test_ring_bytes_match_wire_and_spans_move_to_the_ring_after_the_ack(client, agent):
    client.set_frame(9)
    reg = register_first_span(client, agent)
    assert reg.pid == os.getpid() and reg.creds[0] == os.getpid() and reg.start == 0
    assert isinstance(reg.addr, bytes) and reg.addr.startswith(b"\0")  # autobound
    assert reg.header() == {"slot_count": 64, "pid": os.getpid(),
                            "tid": threading.get_native_id(),
                            "start_time": process_start_time(os.getpid()),
                            "head": 0, "lost": 0, "state": 1}
    with client.span("pre"):  # still pending: one more v1 datagram
        pass
    assert agent.recv()[0] == "v1"
    assert client.stats()["rings"]["active"] == 0

    agent.ack(reg)
    before = time.monotonic_ns()
    for frame in range(1, 101):  # more than the 64 slots: overwrite-oldest, in order
        with client.span("infer", frame=frame):
            pass
    after = time.monotonic_ns()
    assert agent.drain() == []  # no datagram once the ring is live
    assert reg.header()["head"] == 100
    slots = reg.slots(36, 100)
    assert [s[1] for s in slots] == list(range(37, 101))
    for kind, _frame, start_ns, duration_ns, stage in slots:
        assert kind == 1 and stage == "infer"
        assert before <= start_ns <= start_ns + duration_ns <= after
    # The exact bytes of the last slot, from WIRE.md's table.
    last = bytes(reg.map[128 + (99 % 64) * 64:128 + (99 % 64 + 1) * 64])
    _, _, _, start_ns, duration_ns, _ = SLOT.unpack(last)
    assert last == ((100).to_bytes(4, "little") + b"\x01\0\0\0" + (100).to_bytes(8, "little")
                    + start_ns.to_bytes(8, "little") + duration_ns.to_bytes(8, "little")
                    + b"infer" + bytes(27))
    client.record("camera.rx", 1000, 250, frame=5)
    client.heartbeat("watchdog")
    assert reg.slots(100, 102)[0] == (1, 5, 1000, 250, "camera.rx")
    assert reg.slots(101, 102)[0][0] == 2 and reg.slots(101, 102)[0][4] == "watchdog"
    rings = client.stats()["rings"]
    assert rings["active"] == 1 and rings["written"] == 102 and rings["accepted"] == 1
    assert client.sent == 2  # only the two spans before the ack were datagrams


def test_v1_only_peer_no_ack_stays_on_datagrams_and_loses_nothing(client, agent, monkeypatch):
    clock = FakeClock(monkeypatch)
    reg = register_first_span(client, agent)
    clock.advance(0.5)
    with client.span("a"):
        pass
    assert agent.recv()[0] == "v1"
    clock.advance(0.6)  # over the second: unanswered
    got = []
    for frame in range(20):  # read as they come: a unix socket queues only a few datagrams
        with client.span("b", frame=frame):
            pass
        got.append(agent.recv())
    assert [g[1]["frame"] for g in got] == list(range(20))
    assert all(g[0] == "v1" for g in got) and agent.drain() == []
    with pytest.raises(ConnectionRefusedError):  # too late: the client closed its socket
        agent.ack(reg)
    clock.advance(5)
    with client.span("c"):
        pass
    assert agent.recv()[0] == "v1" and agent.drain() == []  # no new registration either
    assert reg.header()["head"] == 0
    rings = client.stats()["rings"]
    assert rings["unanswered"] == 1 and rings["registrations"] == 1 and rings["active"] == 0
    assert client.sent == 23 and client.dropped == 0


def test_unsent_register_is_sent_again_a_second_later(page, tmp_path, monkeypatch):
    """The agent's socket is not there at the first span: the register cannot be sent, so no
    agent saw it; once the socket is bound, it goes out again after a second, never before."""
    clock = FakeClock(monkeypatch)
    c = edgemon.Client(str(tmp_path / "spans.sock"))
    agent = None
    try:
        c.record("infer", 10, 20)
        assert c.stats()["rings"]["unsent"] == 1
        agent = Agent(tmp_path / "spans.sock")
        clock.advance(0.5)
        c.record("infer", 10, 20, frame=1)
        assert [g[0] for g in agent.drain()] in (["v1"], [])  # no register within the second
        clock.advance(0.6)
        c.record("infer", 10, 20, frame=2)
        kind, reg = agent.recv()
        assert kind == "reg" and reg.start == 0
        assert agent.recv()[0] == "v1"
        agent.ack(reg)
        for frame in range(3, 8):
            c.record("infer", 10, 20, frame=frame)
        assert agent.drain() == []
        assert [s[1] for s in reg.slots(0, 5)] == list(range(3, 8))
        rings = c.stats()["rings"]
        assert rings["unsent"] == 1 and rings["registrations"] == 2 and rings["accepted"] == 1
    finally:
        c.close()
        if agent is not None:
            agent.close()


def test_negative_ack_keeps_datagrams(client, agent):
    reg = register_first_span(client, agent)
    agent.ack(reg, status=-1)  # -EPERM
    for frame in range(5):
        client.record("infer", 10, 20, frame=frame)
    got = agent.drain()
    assert [(g[0], g[1]["frame"]) for g in got] == [("v1", f) for f in range(5)]
    assert reg.header()["head"] == 0
    assert client.stats()["rings"]["refused"] == 1


def test_ack_with_another_start_is_not_taken(client, agent):
    reg = register_first_span(client, agent)
    agent.ack(reg, start=77)
    client.record("infer", 10, 20)
    assert agent.recv()[0] == "v1"
    assert client.stats()["rings"]["active"] == 0


def test_no_deadline_page_means_no_registration(agent):
    c = edgemon.Client(agent.path)  # no "deadlines" beside the socket: a v1 agent
    try:
        with c.span("infer"):
            pass
        got = agent.drain()
        assert [g[0] for g in got] == ["v1"]
        assert "rings" not in c.stats()
    finally:
        c.close()


# ---- Hard deadlines ----


def test_hard_miss_is_also_a_kind_6_datagram(agent, tmp_path):
    write_deadline_page(tmp_path / "deadlines", [(b"infer", 1000000)])
    c = edgemon.Client(agent.path)
    try:
        reg = register_first_span(c, agent)
        agent.ack(reg)
        now = time.monotonic_ns()
        c.record("infer", now, 999999, frame=1)  # under: ring only
        c.record("infer", now, 1000000, frame=2)  # at: not over
        c.record("other", now, 5000000, frame=3)  # no deadline for this stage
        c.record("infer", now, 1000001, frame=4)  # over: ring and kind 6
        with c.span("infer", frame=5):
            time.sleep(0.002)  # over by the span's own clock
        got = agent.drain()
        assert [(g[0], g[1]["kind"], g[1]["frame"]) for g in got] == [("v2", 6, 4), ("v2", 6, 5)]
        assert got[0][1] == {"kind": 6, "pid": os.getpid(), "frame": 4, "start_ns": now,
                             "duration_ns": 1000001, "stage": "infer"}
        assert [s[1] for s in reg.slots(0, 5)] == [1, 2, 3, 4, 5]
        assert c.stats()["rings"]["hard_miss"] == 2
    finally:
        c.close()


def test_deadline_entries_reread_when_seq_moves(agent, tmp_path, monkeypatch):
    clock = FakeClock(monkeypatch)
    path = tmp_path / "deadlines"
    write_deadline_page(path, [], seq=2)
    c = edgemon.Client(agent.path)
    try:
        reg = register_first_span(c, agent)
        agent.ack(reg)
        write_deadline_page(path, [(b"infer", 10)], seq=4, replace=False)  # same agent
        clock.advance(1.1)
        with c.span("infer"):
            clock.advance(0.001)
        got = agent.drain()
        assert [(g[0], g[1]["kind"]) for g in got] == [("v2", 6)]
        assert reg.header()["head"] == 1 and c.stats()["rings"]["registrations"] == 1
    finally:
        c.close()


# ---- Threads, thread exit, fork ----


def test_four_writer_threads_own_rings_and_every_span_is_accounted_for(client, agent):
    spans_per_thread = 300
    stop = threading.Event()
    received = {"v1": 0}

    def play_agent():
        while not stop.is_set():
            got = agent.recv(timeout=0.05)
            if got is None:
                continue
            if got[0] == "reg":
                agent.ack(got[1])
            else:
                received["v1"] += 1

    peer = threading.Thread(target=play_agent)
    peer.start()
    tids = []

    def writer():
        tids.append(threading.get_native_id())
        for frame in range(spans_per_thread):
            with client.span("w", frame=frame):
                pass
            if frame < 50:
                time.sleep(0.001)  # leave the peer time to ack while spans still come

    writers = [threading.Thread(target=writer) for _ in range(4)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    time.sleep(0.2)
    stop.set()
    peer.join()
    regs = agent.regs
    assert len(regs) == 4
    assert sorted(r.header()["tid"] for r in regs) == sorted(tids)
    in_rings = sum(r.header()["head"] for r in regs)
    assert in_rings > 0
    assert in_rings + received["v1"] == 4 * spans_per_thread
    for r in regs:  # each ring holds its thread's spans in order (frames ascend)
        head = r.header()["head"]
        frames = [s[1] for s in r.slots(max(0, head - 64), head)]
        assert frames == sorted(frames)
    # The threads ended: their thread-locals were released and each ring says closed.
    deadline = time.monotonic() + WAIT_S
    while any(r.header()["state"] != 2 for r in regs) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [r.header()["state"] for r in regs] == [2, 2, 2, 2]
    rings = client.stats()["rings"]
    assert rings["written"] == in_rings and rings["accepted"] == 4


def test_fork_child_registers_its_own_ring_and_leaves_the_parents_alone(client, agent):
    parent_reg = register_first_span(client, agent)
    agent.ack(parent_reg)
    for frame in range(3):
        with client.span("parent", frame=frame):
            pass
    assert parent_reg.header()["head"] == 3
    pid = os.fork()
    if pid == 0:  # the child: spans until its own ring is live, then 10 more
        code = 1
        try:
            end = time.monotonic() + WAIT_S
            while client.ring_stats()["active"] == 0 and time.monotonic() < end:
                with client.span("child"):
                    pass
                time.sleep(0.005)
            before = client.ring_stats()["written"]
            for frame in range(10):
                with client.span("child", frame=100 + frame):
                    pass
            code = 0 if client.ring_stats()["written"] == before + 10 else 2
        finally:
            os._exit(code)
    child_reg = None
    while child_reg is None:
        got = agent.recv()
        assert got is not None
        if got[0] == "reg":
            child_reg = got[1]
    assert child_reg.pid == pid and child_reg.creds[0] == pid and child_reg.start == 0
    assert child_reg.inode != parent_reg.inode
    assert child_reg.header()["pid"] == pid
    agent.ack(child_reg)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    head = child_reg.header()["head"]
    assert head in (10, 11)  # the span that found the ack went to the ring too
    assert [s[1] for s in child_reg.slots(head - 10, head)] == list(range(100, 110))
    header = parent_reg.header()
    assert header["head"] == 3 and header["state"] == 1  # untouched by the child
    assert [s[4] for s in parent_reg.slots(0, 3)] == ["parent"] * 3
    with client.span("parent", frame=3):  # the parent's ring still works
        pass
    assert parent_reg.header()["head"] == 4


# ---- A new agent: the deadline page's inode changes ----


def test_new_agent_reregisters_at_the_current_head_and_counts_agent_restart(
        client, agent, page, monkeypatch):
    clock = FakeClock(monkeypatch)
    reg = register_first_span(client, agent)
    agent.ack(reg)
    for frame in range(3):
        with client.span("s", frame=frame):
            pass
    clock.advance(1.1)
    for frame in range(3, 5):  # the check at the first one sees the same agent: checkpoint 3
        with client.span("s", frame=frame):
            pass
    assert reg.header()["head"] == 5
    write_deadline_page(page)  # renamed into place: a new inode, a new agent
    clock.advance(1.1)
    with client.span("s", frame=5):  # the check sees it: register again, this one is v1
        pass
    kind, reg2 = agent.recv()
    assert kind == "reg" and reg2.start == 5 and reg2.inode == reg.inode
    kind, got = agent.recv()
    assert kind == "v1" and got["frame"] == 5
    assert client.stats()["rings"]["lost"] == {"agent_restart": 2}
    agent.ack(reg2)
    with client.span("s", frame=6):
        pass
    assert agent.drain() == []
    assert reg2.header()["head"] == 6 and reg2.slots(5, 6)[0][1] == 6
    rings = client.stats()["rings"]
    assert rings["registrations"] == 2 and rings["accepted"] == 2 and rings["written"] == 6


def test_garbled_deadline_page_means_datagrams(agent, tmp_path):
    (tmp_path / "deadlines").write_bytes(b"EMDL" + bytes(100))
    c = edgemon.Client(agent.path)
    try:
        with c.span("infer"):
            pass
        assert [g[0] for g in agent.drain()] == ["v1"]
    finally:
        c.close()


def test_client_close_marks_rings_closed(client, agent):
    reg = register_first_span(client, agent)
    agent.ack(reg)
    client.record("x", 1, 2)
    client.close()
    assert reg.header()["state"] == 2 and reg.header()["head"] == 1
    client.record("x", 1, 2)  # closed: dropped as other, no raise
    assert client.stats()["dropped"]["other"] == 1
