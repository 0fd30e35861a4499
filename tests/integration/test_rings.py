"""Span rings v2 into the real agent: a writer packed here from proto/WIRE.md ("Span ring v2",
"Deadline page v1") with the standard library only (os.memfd_create, fcntl seals, mmap,
struct, SCM_RIGHTS), independently of the clients, against a real agent and mosquitto.

Run as a script (`test_rings.py writer SOCKET STAGE N`), this file is the writer process of
the exit-mid-burst test: it registers a ring, writes N spans as fast as it can and exits
without closing the ring.
"""

import array
import fcntl
import mmap
import os
import signal
import socket
import struct
import subprocess
import sys
import time

HEADER = struct.Struct("<4sHHHHIIIQQQI76x")
SLOT = struct.Struct("<IB3xQQQ32s")
DGRAM = struct.Struct("<2sBBIQQQ32s")
DEADLINES = struct.Struct("<4sHHIII44x")
KIND_SPAN, KIND_REGISTER, KIND_MISS, KIND_ACK = 1, 5, 6, 17
HEAD_OFF = 32


def start_time(pid="self"):
    """Field 22 of /proc/<pid>/stat."""
    stat = open(f"/proc/{pid}/stat").read()
    return int(stat[stat.rindex(")") + 2:].split()[19])


class Ring:
    """One ring of `slots` slots in a sealed memfd, written by this process."""

    def __init__(self, slots=1024, seal=True, pid=None, extra=0):
        self.slots = slots
        self.size = 128 + slots * 64
        self.fd = os.memfd_create("em-ring", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, self.size + extra)
        self.mem = mmap.mmap(self.fd, self.size + extra)
        HEADER.pack_into(self.mem, 0, b"EMRG", 2, 128, 64, 0, slots,
                         os.getpid() if pid is None else pid, 0, start_time(), 0, 0, 1)
        if seal:
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS,
                        fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        self.pos = 0

    def write(self, stage, duration_ns, frame=0):
        SLOT.pack_into(self.mem, 128 + (self.pos % self.slots) * 64, (self.pos + 1) & 0xFFFFFFFF,
                       KIND_SPAN, frame, time.monotonic_ns(), duration_ns, stage.encode())
        struct.pack_into("<Q", self.mem, HEAD_OFF, self.pos + 1)
        self.pos += 1


def register(path, ring_fd, start=0):
    """Sends a register with ring_fd from an autobound socket; returns (status, socket)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind("")  # autobind: the address the ack comes back to
    s.settimeout(5)
    reg = DGRAM.pack(b"EM", 2, KIND_REGISTER, os.getpid(), start, 0, 0, b"")
    s.sendmsg([reg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [ring_fd]))], 0,
              str(path))
    ack = s.recv(128)
    magic, version, kind, _pid, echoed, status, _ring_id, _ = DGRAM.unpack(ack)
    assert (magic, version, kind, echoed) == (b"EM", 2, KIND_ACK, start)
    return struct.unpack("<q", struct.pack("<Q", status))[0], s


def writer_main(path, stage, n):
    ring = Ring(slots=1024)
    status, _s = register(path, ring.fd)
    if status != 0:
        os._exit(3)
    print("registered", flush=True)
    for i in range(n):
        ring.write(stage, 1_000_000 + i, frame=i + 1)
    os._exit(0)  # no close: the agent learns of the exit from its pidfd


if __name__ == "__main__" and sys.argv[1:2] == ["writer"]:
    writer_main(sys.argv[2], sys.argv[3], int(sys.argv[4]))

import pytest  # noqa: E402  (the writer above needs only the standard library)

from conftest import AGENT, check_config, edgemon_proto, wait_for  # noqa: E402

EINVAL = -22  # -EINVAL
EPERM = -1


def start_agent(stack, extra=""):
    broker, target, agent, sub = stack.watching(extra=extra)
    birth = sub.next("birth")
    path = stack.tmp / "run" / "spans.sock"
    wait_for(path.exists, 5, "the span socket")
    return agent, sub, birth, path


def values_until(sub, birth, pred, timeout=10, what="the counters"):
    """Data values of the first data message satisfying pred, and the stage counts summed
    over every data message read until then."""
    counts = {}

    def step():
        d = sub.next("data")
        for st in d["stages"]:
            counts[st["name"]] = counts.get(st["name"], 0) + st["count"]
        v = edgemon_proto.values_by_name(d, birth)
        return v if pred(v, counts) else None

    return wait_for(step, timeout, what), counts


def test_ring_spans_are_counted_exactly_once(stack):
    agent, sub, birth, path = start_agent(stack)
    ring = Ring(slots=1024)
    status, _s = register(path, ring.fd)
    assert status == 0
    n = 700
    for i in range(n):
        ring.write("ringstage", 2_000_000 + i, frame=i + 1)
    v, counts = values_until(sub, birth, lambda v, c: c.get("ringstage", 0) >= n, what="spans")
    assert counts["ringstage"] == n
    assert v["spans.ring"] == n
    assert v["spans.datagram"] == 0
    assert v["rings.active"] == 1
    assert v["spans.ring_lost.overwritten"] == 0
    assert v["spans.ring_lost.bad_slot"] == 0
    # A few more windows: nothing is folded twice.
    v, more = values_until(sub, birth, lambda v, c: True)
    v, more2 = values_until(sub, birth, lambda v, c: True)
    assert more.get("ringstage", 0) == 0 and more2.get("ringstage", 0) == 0
    assert v["spans.ring"] == n
    assert agent.proc.poll() is None


def test_a_writer_that_exits_mid_burst_is_drained_and_every_span_accounted(stack):
    agent, sub, birth, path = start_agent(stack)
    n = 20000  # far more than the 1024 slots between two ticks: some are overwritten
    w = subprocess.run([sys.executable, __file__, "writer", str(path), "burst", str(n)],
                       capture_output=True, text=True, timeout=60)
    assert w.returncode == 0, w.stderr
    assert "registered" in w.stdout

    def accounted(v, c):
        lost = v["spans.ring_lost.overwritten"] + v["spans.ring_lost.bad_slot"]
        return v["rings.active"] == 0 and v["spans.ring"] + lost == n

    v, counts = values_until(sub, birth, accounted, what="the final drain")
    assert v["spans.ring"] == counts.get("burst", 0)
    assert v["spans.ring"] > 0  # the final drain reads what the ticks had not
    assert v["spans.ring_lost.bad_head"] == 0
    assert v["spans.ring_lost.skipped"] == 0
    assert "process exited" in agent.log_text()


def test_a_sender_outside_the_allow_lists_is_refused_and_counted(stack):
    other = 65534 if os.getuid() != 65534 else 65533
    agent, sub, birth, path = start_agent(stack, extra=f"[spans]\nallow_uids = {other}\n")
    ring = Ring()
    status, _s = register(path, ring.fd)
    assert status == EPERM
    v, _ = values_until(sub, birth, lambda v, c: v["rings.refused"] >= 1)
    assert v["rings.refused"] == 1
    assert v["rings.active"] == 0
    assert f"rings: register from pid {os.getpid()} refused: Operation not permitted" in \
        agent.log_text()


def test_refusals_name_the_broken_check(stack):
    agent, sub, birth, path = start_agent(stack)
    assert register(path, Ring(seal=False).fd)[0] == EINVAL           # unsealed
    assert register(path, Ring(extra=4096).fd)[0] == EINVAL           # size != header's
    assert register(path, Ring(pid=os.getpid() + 1).fd)[0] == EINVAL  # another pid
    v, _ = values_until(sub, birth, lambda v, c: v["rings.refused"] >= 3)
    assert v["rings.refused"] == 3 and v["rings.active"] == 0


def test_a_flood_of_descriptors_is_closed(stack):
    agent, sub, birth, path = start_agent(stack)
    fd_dir = f"/proc/{agent.proc.pid}/fd"
    before = min(len(os.listdir(fd_dir)) for _ in range(5))  # the loop opens procfs briefly
    memfd = os.memfd_create("em-flood", os.MFD_CLOEXEC)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.connect(str(path))
    span = DGRAM.pack(b"EM", 1, KIND_SPAN, os.getpid(), 1, time.monotonic_ns(), 1000, b"flood")
    n = 1000
    for _ in range(n):
        s.sendmsg([span], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [memfd]))])
    v, _ = values_until(sub, birth, lambda v, c: v["spans.fds_closed"] >= n)
    assert v["spans.fds_closed"] == n
    assert v["spans.datagram"] == n
    wait_for(lambda: len(os.listdir(fd_dir)) <= before, 5, "the agent's descriptors to settle")
    assert agent.proc.poll() is None


def read_deadlines(path):
    page = path.read_bytes()
    magic, version, count, seq, pid, ring_slots = DEADLINES.unpack_from(page, 0)
    assert (magic, version) == (b"EMDL", 1) and seq % 2 == 0
    entries = {}
    for i in range(count):
        stage, deadline = struct.unpack_from("<32sQ", page, 64 + 40 * i)
        entries[stage.rstrip(b"\0").decode()] = deadline
    return pid, ring_slots, entries


def test_the_deadline_page_lists_hard_deadlines_and_follows_a_reload(stack):
    agent, sub, birth, path = start_agent(
        stack, extra="[spans]\nring_slots = 256\n[budget.infer]\ndeadline = 50ms\n"
                     "level = DEGRADED\n[budget.pre]\ndeadline = 5ms\nlevel = WARN\n")
    page = stack.tmp / "run" / "deadlines"
    wait_for(page.exists, 5, "the deadline page")
    pid, slots, entries = read_deadlines(page)
    assert pid == agent.proc.pid and slots == 256
    assert entries == {"infer": 50_000_000, "pre": 5_000_000}
    inode = page.stat().st_ino
    agent.config.write_text(agent.config.read_text().replace("[budget.pre]\ndeadline = 5ms\nlevel = WARN\n", "")
                            .replace("ring_slots = 256", "ring_slots = 4096"))
    agent.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: read_deadlines(page)[2] == {"infer": 50_000_000}, 5, "the reload")
    assert read_deadlines(page)[1] == 4096
    assert page.stat().st_ino == inode  # the same page: clients keep their rings
    agent.stop()
    assert not page.exists()


def test_a_hard_miss_degrades_at_once_without_entering_the_window(stack):
    agent, sub, birth, path = start_agent(
        stack, extra="[budget.infer]\ndeadline = 50ms\nlevel = DEGRADED\n")
    ring = Ring()
    status, s = register(path, ring.fd)
    assert status == 0
    # The miss alone (its span not written to the ring): the level moves on the datagram...
    miss = DGRAM.pack(b"EM", 2, KIND_MISS, os.getpid(), 9, time.monotonic_ns(), 120_000_000,
                      b"infer")
    s.sendto(miss, str(path))
    state = sub.next("state", pred=lambda m: m["level"] == "DEGRADED")
    assert state["rule"] == "infer.deadline" and state["reason"].endswith("deadline miss")
    # ...and no window counts it: the ring carries the span.
    _, counts = values_until(sub, birth, lambda v, c: True)
    v, more = values_until(sub, birth, lambda v, c: True)
    assert counts.get("infer", 0) + more.get("infer", 0) == 0
    assert v["spans.ring"] == 0 and v["spans.datagram"] == 0
    ring.write("infer", 120_000_000, frame=9)
    v, counts = values_until(sub, birth, lambda v, c: v["spans.ring"] >= 1)
    v, more = values_until(sub, birth, lambda v, c: True)
    assert counts.get("infer", 0) + more.get("infer", 0) == 1
    assert v["spans.ring"] == 1


@pytest.mark.parametrize("keys,line", [
    ("ring_slots = 1000", "power of two"),   # not a power of two
    ("ring_slots = 32", "power of two"),     # below a ring's 64 slots
    ("ring_slots = 131072", "power of two"),  # above its 65536
    ("rings = 0", "whole number from 1 to 1024"),
    ("rings_per_process = 2000", "whole number from 1 to 1024"),
])
def test_bad_ring_keys_are_reported_with_their_line(tmp_path, keys, line):
    bad = tmp_path / "bad.ini"
    bad.write_text(f"[target]\npid = 1\n[spans]\n{keys}\n")
    r = check_config(bad)
    assert r.returncode == 1
    assert f"{bad}:4: " in r.stderr and line in r.stderr, r.stderr


def test_the_ring_keys_accept_the_ends_of_their_ranges(tmp_path):
    good = tmp_path / "good.ini"
    good.write_text("[target]\npid = 1\n[spans]\nrings = 1024\nrings_per_process = 1\n"
                    "ring_slots = 65536\n")
    r = check_config(good)
    assert r.returncode == 0, r.stderr
