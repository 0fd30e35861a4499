"""Span ring v2 on the client side: the per-thread ring and the agent's deadline page.

proto/WIRE.md ("Span ring v2", "Deadline page v1") is the normative description. What this
module owns:

- Ring: one writer thread's ring. A sealed memfd of 128 + slot_count * 64 bytes, mapped
  read-write, its header (magic "EMRG", version 2, state 1 open / 2 closed), its writer
  position, and the autobound non-blocking socket its register datagram (kind 5, version 2,
  the memfd in SCM_RIGHTS) goes out of and its ack (kind 17) comes back to. The ring goes
  through: pending (register sent, spans still go as v1 datagrams, one non-blocking recv per
  span looks for the ack) -> live (ack status 0: spans go to the ring), or -> refused (negative
  status) / unanswered (no ack within ACK_TIMEOUT_NS: an older, v1-only agent). Refused and
  unanswered rings register again only when the agent changes (the deadline page's inode);
  an unsent one (the register could not be sent, so the agent never saw it) a second later.
- DeadlinePage: the agent's deadline page, read at most once a second: its inode (a new inode
  is a new agent), its suggested ring_slots, and the hard deadlines (stage bytes -> ns), read
  with the page's seqlock. It is opened with _page.open_page(): a FIFO, a link or anything
  but a regular file at its path is refused without blocking (counted in `refused`, warned
  about once) and the client goes on as with no page (datagrams v1).

The hot path (in _client.py) writes a slot with one pack_into and the head with another; every
other method here is a slow path that never raises into the caller and never blocks.
"""

import array
import fcntl
import mmap
import os
import socket
import struct
import threading

from ._page import PageRefused, open_page
from ._wire import KIND_REGISTER, KIND_RING_ACK, SPAN_STRUCT
from ._wire import RING_VERSION as DGRAM_VERSION

HEADER_BYTES = 128
SLOT_BYTES = 64
HEADER_STRUCT = struct.Struct("<4sHHHHIIIQQQI76x")
SLOT_STRUCT = struct.Struct("<IB3xQQQ32s")
HEAD_STRUCT = struct.Struct("<Q")
STATE_STRUCT = struct.Struct("<I")
assert HEADER_STRUCT.size == HEADER_BYTES and SLOT_STRUCT.size == SLOT_BYTES
HEAD_OFFSET = 32
LOST_OFFSET = 40
STATE_OFFSET = 48
RING_MAGIC = b"EMRG"
RING_VERSION = 2
STATE_OPEN = 1
STATE_CLOSED = 2
DEFAULT_SLOTS = 1024
MIN_SLOTS = 64
MAX_SLOTS = 65536

# Ring datagrams v2: the same 64-byte layout as span datagram v1.
DGRAM_STRUCT = SPAN_STRUCT
ACK_STRUCT = struct.Struct("<2sBBIQqQ32s")  # status is a signed i64
KIND_ACK = KIND_RING_ACK
ACK_TIMEOUT_NS = 1000000000

# Deadline page v1.
DEADLINE_PAGE_BYTES = 2624
DEADLINE_HEAD_STRUCT = struct.Struct("<4sHHIII44x")
DEADLINE_ENTRY_STRUCT = struct.Struct("<32sQ")
assert DEADLINE_HEAD_STRUCT.size == 64 and DEADLINE_ENTRY_STRUCT.size == 40
DEADLINE_MAGIC = b"EMDL"
DEADLINE_VERSION = 1
DEADLINE_MAX_ENTRIES = 64
DEADLINE_NAME = "deadlines"
SEQLOCK_TRIES = 8
CHECK_INTERVAL_NS = 1000000000

_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
_STAGE_ALPHABET = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-")

# Ring states (Ring.mode).
PENDING = "pending"
LIVE = "live"
REFUSED = "refused"
UNANSWERED = "unanswered"
UNSENT = "unsent"  # not registered, or the register could not be sent (sent again 1 s later)

_start_time = {}  # pid -> field 22 of /proc/<pid>/stat, read once per process


def process_start_time():
    """This process's start time in clock ticks after boot (/proc/self/stat field 22), or 0."""
    pid = os.getpid()
    cached = _start_time.get(pid)
    if cached is not None:
        return cached
    value = 0
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        # Field 2 (comm) may hold spaces and parentheses: split after the last ')'.
        value = int(stat[stat.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        pass
    _start_time.clear()
    _start_time[pid] = value
    return value


def slots_from_page(suggested):
    """The slot count for a new ring: the page's suggestion when valid, else DEFAULT_SLOTS."""
    if (isinstance(suggested, int) and MIN_SLOTS <= suggested <= MAX_SLOTS
            and suggested & (suggested - 1) == 0):
        return suggested
    return DEFAULT_SLOTS


class Ring(object):
    """One writer thread's ring; see the module docstring. Created by Ring.create, which
    returns None (never raises) when the memfd cannot be made, sealed or mapped."""

    __slots__ = ("buf", "pos", "mask", "slot_count", "fd", "sock", "mode", "live", "pid",
                 "deadline_ns", "retry_ns", "checkpoint", "start", "gen", "sink", "__weakref__")

    def __init__(self):
        self.buf = None
        self.fd = -1
        self.pos = self.checkpoint = self.start = self.deadline_ns = self.retry_ns = 0
        self.slot_count = self.mask = 0
        self.sock = None
        self.mode = UNSENT
        self.live = False
        self.pid = -1
        self.gen = -1  # the agent generation (Client._agent_gen) it last registered with
        self.sink = None  # a one-element list the ring adds its written spans to on close

    @classmethod
    def create(cls, slot_count, sink):
        fd = -1
        try:
            fd = os.memfd_create("edgemon-ring", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            size = HEADER_BYTES + slot_count * SLOT_BYTES
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
            buf = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except (OSError, ValueError, AttributeError):
            if fd >= 0:
                os.close(fd)
            return None
        ring = cls()
        ring.buf = buf
        ring.fd = fd
        ring.slot_count = slot_count
        ring.mask = slot_count - 1
        ring.pid = os.getpid()
        ring.sink = sink
        HEADER_STRUCT.pack_into(buf, 0, RING_MAGIC, RING_VERSION, HEADER_BYTES, SLOT_BYTES, 0,
                                slot_count, ring.pid, threading.get_native_id(),
                                process_start_time(), 0, 0, STATE_OPEN)
        return ring

    def register(self, socket_path, now_ns):
        """Sends the register datagram (start = the current head) with the memfd from a fresh
        autobound non-blocking socket; the ring is then pending, or unsent on failure (the
        agent never saw it: the client sends it again from retry_ns on, a second later)."""
        self._close_socket()
        self.live = False
        self.start = self.pos
        data = DGRAM_STRUCT.pack(b"EM", DGRAM_VERSION, KIND_REGISTER, self.pid, self.pos, 0, 0,
                                 b"")
        sock = None
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            sock.setblocking(False)
            sock.bind("")  # autobind: the abstract address the ack comes back to
            sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                   array.array("i", [self.fd]))], 0, socket_path)
        except (OSError, TypeError, ValueError):
            if sock is not None:
                sock.close()
            self.mode = UNSENT
            return False
        self.sock = sock
        self.mode = PENDING
        self.deadline_ns = now_ns + ACK_TIMEOUT_NS
        return True

    def poll_ack(self, now_ns):
        """While pending: one non-blocking recv. Returns the new mode (PENDING while nothing
        came and the second is not over)."""
        try:
            while True:
                data = self.sock.recv(128)
                if len(data) != ACK_STRUCT.size:
                    continue  # not an ack: ignored
                magic, version, kind, _agent_pid, start, status, _ring_id, tail = \
                    ACK_STRUCT.unpack(data)
                if (magic, version, kind) != (b"EM", DGRAM_VERSION, KIND_ACK) or \
                        start != self.start:
                    continue
                self._close_socket()
                self.mode = LIVE if status == 0 else REFUSED
                self.checkpoint = self.pos
                self.live = status == 0
                return self.mode
        except (BlockingIOError, InterruptedError):
            pass
        except (OSError, AttributeError):
            self._close_socket()
            self.mode = UNANSWERED
            return self.mode
        if now_ns >= self.deadline_ns:
            self._close_socket()
            self.mode = UNANSWERED
        return self.mode

    def write(self, kind, frame, start_ns, duration_ns, stage_b):
        """The slow-path twin of the inlined hot path: one slot, then the head."""
        p = self.pos
        SLOT_STRUCT.pack_into(self.buf, HEADER_BYTES + (p & self.mask) * SLOT_BYTES,
                              (p + 1) & 0xFFFFFFFF, kind, frame, start_ns, duration_ns, stage_b)
        p += 1
        self.pos = p
        HEAD_STRUCT.pack_into(self.buf, HEAD_OFFSET, p)

    def _close_socket(self):
        sock, self.sock = self.sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def forget(self):
        """In a forked child: drop this (the parent's) ring without writing to it."""
        self.mode = UNSENT
        self.live = False
        self.pid = -1
        self.sink = None
        self._close_socket()

    def close(self):
        """Marks the ring closed (state 2) when this process owns it, unmaps it, closes the
        memfd. Idempotent; never raises."""
        buf, self.buf = getattr(self, "buf", None), None
        self.mode = UNSENT
        self.live = False
        sink, self.sink = self.sink, None
        try:
            if sink is not None and buf is not None:
                sink[0] += self.pos
            self._close_socket()
            if buf is not None:
                if self.pid == os.getpid():
                    STATE_STRUCT.pack_into(buf, STATE_OFFSET, STATE_CLOSED)
                buf.close()
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
        except (OSError, ValueError, TypeError, AttributeError):
            pass

    def __del__(self):  # the owning thread's threading.local let go of it: the thread ended
        self.close()


def _valid_stage(field):
    nul = field.find(0)
    if nul < 1 or field[nul:] != bytes(len(field) - nul):
        return None
    name = field[:nul]
    if not set(name) <= _STAGE_ALPHABET:
        return None
    return name


class DeadlinePage(object):
    """The agent's deadline page at `path`: checked (stat) by the caller at most once a
    second. `inode` is None while there is no valid page."""

    __slots__ = ("path", "inode", "slots", "deadlines", "_mm", "_seq", "invalid", "refused")

    def __init__(self, path):
        self.path = path
        self.inode = None
        self.slots = DEFAULT_SLOTS
        self.deadlines = {}
        self._mm = None
        self._seq = None
        self.invalid = 0
        self.refused = 0  # looks that found no regular file there (_page.py): no page

    def check(self):
        """stat()s the page; re-maps it on a new inode and re-reads its entries when seq moved.
        Returns True when the inode changed (a new agent, or the page appeared or went)."""
        try:
            st = os.stat(self.path)
            inode = (st.st_dev, st.st_ino)
        except OSError:
            inode = None
        if inode != self.inode:
            self._unmap()
            if inode is not None and not self._map():
                inode = None
            changed = inode != self.inode
            self.inode = inode
            if inode is None:
                self.deadlines = {}
            return changed
        if self._mm is not None:
            self._read()
        return False

    def _map(self):
        try:
            fd, st = open_page(self.path, "deadline page")
        except PageRefused:  # a FIFO, a link, a directory...: as if there were no page
            self.refused += 1
            return False
        except (OSError, ValueError):
            return False
        try:
            if st.st_size < DEADLINE_PAGE_BYTES:
                self.invalid += 1
                return False
            self._mm = mmap.mmap(fd, DEADLINE_PAGE_BYTES, mmap.MAP_SHARED, mmap.PROT_READ)
        except (OSError, ValueError):
            return False
        finally:
            os.close(fd)
        self._seq = None
        if not self._read():
            self._unmap()
            return False
        return True

    def _unmap(self):
        mm, self._mm = self._mm, None
        if mm is not None:
            mm.close()

    def _read(self):
        """The seqlock read; keeps the last good entries when every try overlaps a write.
        Returns False when the page is not a deadline page v1."""
        mm = self._mm
        for _ in range(SEQLOCK_TRIES):
            s1 = struct.unpack_from("<I", mm, 8)[0]
            if s1 == self._seq:
                return True
            if s1 & 1:
                continue
            copy = mm[:DEADLINE_PAGE_BYTES]
            if struct.unpack_from("<I", mm, 8)[0] != s1:
                continue
            magic, version, count, _seq, _pid, slots = DEADLINE_HEAD_STRUCT.unpack_from(copy, 0)
            if magic != DEADLINE_MAGIC or version != DEADLINE_VERSION or \
                    count > DEADLINE_MAX_ENTRIES:
                self.invalid += 1
                return False
            deadlines = {}
            for i in range(count):
                field, deadline_ns = DEADLINE_ENTRY_STRUCT.unpack_from(copy, 64 + 40 * i)
                name = _valid_stage(field)
                if name is None:
                    self.invalid += 1
                    continue
                if deadline_ns > 0:
                    deadlines[name] = deadline_ns
            self.deadlines = deadlines
            self.slots = slots_from_page(slots)
            self._seq = s1
            return True
        return True  # busy: the previous entries stay

    def close(self):
        self._unmap()
        self.inode = None
        self.deadlines = {}
