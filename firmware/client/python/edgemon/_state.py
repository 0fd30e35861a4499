"""The agent's level on the client side: state page v1 and level push datagram v1.

proto/WIRE.md is the normative description. The agent publishes every level change twice:

- on the **state page**, a 256-byte file in its runtime directory that clients map read-only
  (`mmap`) and read with a seqlock: the authoritative current level, read with no system call;
- as a **level push datagram** (256 bytes) to every client that subscribed from a bound
  socket: a wake-up, so a client can wait for a change instead of polling.

StatePage owns one read-only mapping of the page, opened lazily on the first read. Its hot
path (`level()`) is one clock read (vDSO, no system call), one 4-byte load of the seqlock
counter from the mapping and, when the counter has not moved since the last read, the cached
level: no system call, no allocation. Once per second at most (the slow path) it stat()s the
path: a page that was missing is opened, a page replaced by a new agent (another inode: the
agent formats a new file and renames it into place) is re-mapped, a page that disappeared is
dropped (the level is then unknown: None).

Nothing here raises for an absent, short, garbled or busy page: the read returns None (or the
last consistent state of the same page when every try overlapped a write) and the failure is
counted in StatePage.counters. Nothing here blocks either: the page is opened with _page.py's
open_page() (O_NONBLOCK, a regular file only), so a FIFO, a link or a directory put in its
place is refused, counted ("refused"), warned about once, and read as an absent page.
"""

import collections
import math
import mmap
import os
import re
import struct
import socket
import time

from ._page import PageRefused, open_page, refusal
from ._paths import resolve_path

LEVEL_NAMES = ("NOMINAL", "WARN", "DEGRADED", "CRITICAL")

PAGE_BYTES = 256
PUSH_BYTES = 256
BODY_OFFSET = 16
SEQLOCK_TRIES = 64  # WIRE.md's bound on read attempts
RECHECK_INTERVAL_NS = 1000000000  # at most one stat()/open() of the page per second

PAGE_HEAD = struct.Struct("<4sHHII")   # magic "EMST", version, page_size, seq, agent_pid
PUSH_HEAD = struct.Struct("<2sBBIQ")   # magic "EM", version, kind 16, agent_pid, reserved
BODY = struct.Struct("<BBHIQQdd32s32s136s")
SEQ = struct.Struct("<I")
assert (PAGE_HEAD.size, PUSH_HEAD.size, BODY.size) == (16, 16, 240)

KIND_SUBSCRIBE = 3
KIND_UNSUBSCRIBE = 4
KIND_LEVEL_PUSH = 16

_STAGE_RE = re.compile(rb"[A-Za-z0-9_.:-]{1,31}")
_PRINTABLE_RE = re.compile(rb"[\x20-\x7e]*")

_monotonic_ns = time.monotonic_ns
_seq_from = SEQ.unpack_from

# What a level read returns beside the level: every field of the record, and where it came
# from. `seq` is the page's seqlock counter (None for a push, which has none); `value` and
# `bound` are None when the agent wrote NaN ("none").
State = collections.namedtuple("State", (
    "level", "prev_level", "changes", "since_mono_ns", "since_wall_ns", "value", "bound",
    "rule", "stage", "reason", "agent_pid", "seq"))

COUNTER_NAMES = ("opens", "absent", "invalid", "busy", "refused")


def _text(field, stage):
    """Decodes a NUL-padded text field; None when it breaks WIRE.md's rules (ESTRING)."""
    nul = field.find(b"\0")
    if nul < 0 or field.count(0, nul) != len(field) - nul:
        return None
    raw = field[:nul]
    if stage:
        if raw and _STAGE_RE.fullmatch(raw) is None:
            return None
    elif _PRINTABLE_RE.fullmatch(raw) is None:
        return None
    return raw.decode("ascii")


def decode_body(body, agent_pid, seq):
    """Decodes and validates a 240-byte state record body; a State, or None when invalid."""
    (level, prev, reserved, changes, mono, wall, value, bound, rule, stage,
     reason) = BODY.unpack(body)
    if level > 3 or prev > 3 or reserved != 0:
        return None  # ERANGE
    rule = _text(rule, False)
    stage = _text(stage, True)
    reason = _text(reason, False)
    if rule is None or stage is None or reason is None:
        return None  # ESTRING
    return State(LEVEL_NAMES[level], LEVEL_NAMES[prev], changes, mono, wall,
                 None if math.isnan(value) else value, None if math.isnan(bound) else bound,
                 rule, stage, reason, agent_pid, seq)


def decode_push(data):
    """Decodes a level push datagram v1; a State (seq None), or None when it is not a valid
    one (size, magic, version, kind, reserved, then the body's checks)."""
    if len(data) != PUSH_BYTES:
        return None
    magic, version, kind, agent_pid, reserved = PUSH_HEAD.unpack_from(data, 0)
    if magic != b"EM" or version != 1 or kind != KIND_LEVEL_PUSH or reserved != 0:
        return None
    return decode_body(bytes(data[BODY_OFFSET:]), agent_pid, None)


def _load_seq(buf):
    """The seqlock counter; a module function so tests can interpose on the reader's loads."""
    return _seq_from(buf, 8)[0]


def resolve_state_path(explicit=None, environ=None):
    """The state page path: the explicit argument, $EDGEMON_STATE_PAGE,
    $EDGEMON_RUNTIME_DIR/state, then the agent's default runtime dir + "/state"."""
    return resolve_path(explicit, "EDGEMON_STATE_PAGE", "state", environ)


class StatePage(object):
    """A read-only view of the agent's state page at `path` (None: resolve_state_path()).

    level() -> "NOMINAL" | "WARN" | "DEGRADED" | "CRITICAL" | None, state() -> State | None.
    clock: a monotonic ns clock, used only to pace the slow path (tests inject one).
    on_change: called (no argument) when a read finds a record it had not read before: the
    agent wrote a change. Only on that slow path; an exception from it is ignored.

    Threads: reads may come from any thread; they share the mapping and the cache (a reader
    that races another's cache update at worst reads the page once more). Fork: the child
    inherits the mapping, which stays valid.
    """

    __slots__ = ("path", "_clock", "_mm", "_key", "_next_check_ns", "_seq", "_state",
                 "counters", "on_change")

    def __init__(self, path=None, clock=None, on_change=None):
        self.path = resolve_state_path(path)
        self._clock = _monotonic_ns if clock is None else clock
        self._mm = None
        self._key = None  # (st_dev, st_ino) of the mapped file
        self._next_check_ns = 0
        self._seq = None  # seq of the cached state; None: nothing cached
        self._state = None
        self.counters = dict.fromkeys(COUNTER_NAMES, 0)
        self.on_change = on_change

    # -- hot path -------------------------------------------------------------------------

    def level(self):
        """The current level's name, or None (no agent, no page, a garbled page, or a page
        that never read consistently). No system call unless the once-per-second check is due.
        """
        state = self.state()
        return None if state is None else state.level

    def state(self):
        """Every field of the current record as a State, or None (see level())."""
        if self._clock() >= self._next_check_ns:
            self._recheck()
        mm = self._mm
        if mm is None:
            return None
        if _seq_from(mm, 8)[0] == self._seq:
            return self._state
        return self._read()

    # -- slow paths -----------------------------------------------------------------------

    def _read(self):
        """The seqlock read of WIRE.md on the mapped page; caches and returns the state. When
        every try overlaps a write, the last consistent state of this page (or None)."""
        mm = self._mm
        for _ in range(SEQLOCK_TRIES):
            s1 = _load_seq(mm)
            if s1 & 1:
                continue  # the agent is in the middle of a write
            body = mm[BODY_OFFSET:PAGE_BYTES]  # a copy; only the copy is decoded
            s2 = _load_seq(mm)
            if s1 != s2:
                continue  # a write overlapped the copy
            state = decode_body(body, PAGE_HEAD.unpack_from(mm, 0)[4], s1)
            if state is None:
                self.counters["invalid"] += 1
                return None
            self._state = state
            self._seq = s1
            if self.on_change is not None:
                try:
                    self.on_change()
                except Exception:  # never disturbs the reader
                    pass
            return state
        self.counters["busy"] += 1
        return self._state

    def _recheck(self):
        """At most once per RECHECK_INTERVAL_NS: (re)open the page when it appeared or was
        replaced, drop it when it went away."""
        self._next_check_ns = self._clock() + RECHECK_INTERVAL_NS
        try:
            st = os.stat(self.path)
        except (OSError, ValueError):
            self._drop()
            self.counters["absent"] += 1
            return
        if self._mm is not None and (st.st_dev, st.st_ino) == self._key:
            return
        self._drop()
        self._open()

    def _open(self):
        try:
            fd, st = open_page(self.path, "state page")
        except PageRefused:  # a FIFO, a link, a directory...: never opened or never kept
            self.counters["refused"] += 1
            return
        except (OSError, ValueError):
            self.counters["absent"] += 1
            return
        self.counters["opens"] += 1
        try:
            if st.st_size != PAGE_BYTES:  # ESIZE: checked before mapping (no SIGBUS later)
                self.counters["invalid"] += 1
                return
            mm = mmap.mmap(fd, PAGE_BYTES, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        except (OSError, ValueError):
            self.counters["invalid"] += 1
            return
        finally:
            os.close(fd)
        magic, version, size, _, _ = PAGE_HEAD.unpack_from(mm, 0)
        if magic != b"EMST" or version != 1 or size != PAGE_BYTES:
            mm.close()
            self.counters["invalid"] += 1
            return
        self._mm = mm
        self._key = (st.st_dev, st.st_ino)

    def _drop(self):
        mm, self._mm = self._mm, None
        self._key = None
        self._seq = None
        self._state = None
        # Not mm.close(): another thread may be reading it right now. The mapping goes away
        # with the last reference to it.
        del mm

    def close(self):
        """Unmaps the page. The next read maps it again (after the once-per-second pacing)."""
        self._drop()
        self._next_check_ns = 0

    def stats(self):
        """{'path': str, 'mapped': bool, 'opens': n, 'absent': n, 'invalid': n, 'busy': n,
        'refused': n, 'refused_reason': str or None}: 'refused' counts looks that found
        something other than a regular file at the path (a FIFO, a link...), treated as absent;
        'refused_reason' says what the last look found."""
        out = {"path": self.path, "mapped": self._mm is not None}
        out.update(self.counters)
        out["refused_reason"] = refusal(self.path)
        return out


_SPAN_HEAD = struct.Struct("<2sBBIQQQ32s")  # span datagram v1, for (un)subscribe


class Subscriber(object):
    """Level pushes from the agent at `agent_path` (its span socket), on an own socket.

    subscribe() creates an AF_UNIX SOCK_DGRAM socket, binds it to an autobound abstract
    address (Linux: bind('')), so the agent has a source address to send pushes back to, and
    sends a subscribe datagram (kind 3) from it. wait_change(timeout) receives the next valid
    push. unsubscribe() sends kind 4 and closes the socket. None of them raises; failures are
    counted in .counters ('send_failed', 'recv_failed', 'invalid', 'no_socket').

    Pushes are a wake-up: the state page stays the authoritative current level. A restarted
    agent has forgotten its subscribers; subscribe again (harmless when still subscribed).
    One thread at a time.
    """

    __slots__ = ("agent_path", "_sock", "_pid", "counters")

    def __init__(self, agent_path):
        self.agent_path = agent_path
        self._sock = None
        self._pid = os.getpid()
        self.counters = {"send_failed": 0, "recv_failed": 0, "invalid": 0, "no_socket": 0}

    @property
    def subscribed(self):
        """True while the push socket is open (subscribe() called, no unsubscribe())."""
        return self._sock is not None

    @property
    def address(self):
        """The push socket's own address (bytes: abstract, starting with NUL), or None."""
        sock = self._sock
        if sock is None:
            return None
        try:
            return sock.getsockname()
        except OSError:
            return None

    def _socket(self):
        if self._sock is None:
            try:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            except OSError:
                self.counters["no_socket"] += 1
                return None
            try:
                sock.bind("")  # Linux autobind: a unique abstract address
            except OSError:
                sock.close()
                self.counters["no_socket"] += 1
                return None
            self._sock = sock
        return self._sock

    def _send(self, sock, kind):
        data = _SPAN_HEAD.pack(b"EM", 1, kind, self._pid & 0xFFFFFFFF, 0, _monotonic_ns(), 0,
                               b"")
        try:
            sock.sendto(data, socket.MSG_DONTWAIT, self.agent_path)
            return True
        except (OSError, ValueError, TypeError):
            self.counters["send_failed"] += 1
            return False

    def subscribe(self):
        """Sends a subscribe datagram from the push socket (created on first use). True when
        the kernel took it; False when the agent is absent or the socket failed (counted)."""
        sock = self._socket()
        if sock is None:
            return False
        return self._send(sock, KIND_SUBSCRIBE)

    def wait_change(self, timeout=None):
        """The next level push as a State (seq None), or None when `timeout` seconds (None:
        no limit; 0: only what is queued) passed first. Subscribes first when not subscribed.
        Invalid datagrams are counted and skipped."""
        if self._sock is None:
            self.subscribe()
        sock = self._sock
        if sock is None:
            return None
        deadline = None if timeout is None else _monotonic_ns() + int(max(timeout, 0) * 1e9)
        while True:
            if deadline is None:
                remaining = None
            else:
                remaining = max(deadline - _monotonic_ns(), 0) / 1e9
            try:
                sock.settimeout(remaining)
                data = sock.recv(PUSH_BYTES + 1)  # one more: a longer datagram is invalid
            except (socket.timeout, BlockingIOError, InterruptedError):
                return None
            except (OSError, ValueError):
                self.counters["recv_failed"] += 1
                return None
            state = decode_push(data)
            if state is not None:
                return state
            self.counters["invalid"] += 1

    def unsubscribe(self):
        """Sends an unsubscribe datagram and closes the push socket. True when the kernel took
        the datagram; the socket is closed either way (the agent also drops a subscriber whose
        address is gone)."""
        sock, self._sock = self._sock, None
        if sock is None:
            return False
        try:
            return self._send(sock, KIND_UNSUBSCRIBE)
        finally:
            sock.close()

    def close(self):
        """Closes the push socket without telling the agent."""
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def _reset_in_child(self):
        """After fork: the child's copy of the socket is closed (the parent keeps receiving)."""
        self._pid = os.getpid()
        self.close()
        self.counters = dict.fromkeys(self.counters, 0)
