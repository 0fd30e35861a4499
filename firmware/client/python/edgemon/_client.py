"""The span client: spans to edgemon-agent, in a per-thread ring or as unix datagrams.

What it owns: one AF_UNIX SOCK_DGRAM socket per Client, connected to the agent's span socket
and set non-blocking, a few counters, and, when the agent writes a deadline page (span ring
v2), one ring per writer thread (_ring.py), kept in a threading.local. No thread, no queue.

Rings (WIRE.md "Span ring v2"): while a valid deadline page exists, a thread's first span
creates its ring and registers it; from the ack on, a span is one pack_into of the slot and one
of the head (and a kind-6 datagram when it is over its stage's hard deadline). At most once a
second, on a span's end timestamp, the page is stat()ed: a new inode is a new agent, and every
ring registers again at its head. A thread without a live ring (no page, registration pending,
refused or unanswered) sends datagrams v1, as below.

The hot path (`with span(...)`, `record`, `heartbeat`) is: read the clock, pack 64 bytes with a
precompiled struct.Struct, call the connected socket's send. Everything that can go wrong is
handled on a slow path that counts the lost datagram and returns; the client never raises into
the inference loop and never blocks it:

    state          what a send does                              leaves to
    connected      sock.send(): one non-blocking syscall           -
                   EAGAIN (agent slow, queue full): count           connected
                     queue_full
                   ECONNREFUSED/ENOENT/ENOTCONN/... (agent gone       unconnected, or connected
                     or restarted): reconnect at once if the last     again and resent
                     attempt is >= 1 s old and resend, else count
                     no_agent
    unconnected    if >= 1 s since the last connect attempt: try     connected
                   connect(); else count no_agent (one clock read)   unconnected
    closed         count other                                       -

`Client._send` is the state: it is the socket's bound `send` when connected and a method of the
client otherwise, so the hot path has no state test at all.

Threads: any number of threads may share a Client. A datagram is one send() syscall, which the
kernel delivers whole or not at all, so spans from different threads never interleave.
(Re)connecting takes a lock without waiting (a thread that finds it taken drops its datagram
as no_agent instead of blocking). The counters are plain integer attributes updated without a
lock: under heavy contention from several threads an increment can be lost, so treat them as
diagnostics, not as an exact ledger. The current frame (set_frame) is one value per Client,
shared by all threads: a pipeline whose threads work on different frames passes frame=.

Model identity (set_model, WIRE.md "Model identity"): the call is validated here (a bad label
is dropped and counted, a bad name or version drops the call and is counted), packed into one
512-byte model datagram and sent on the connected socket at once. The client keeps the
datagram: the once-a-second agent check on the span path (the same one that finds a new agent
from the deadline page's inode and re-registers the rings) sends it again when the last send
failed (queue full, no agent yet) and whenever a new agent appeared, so a restarted agent
learns the identity without the application calling set_model again.

GPU spans (span(..., gpu=True), _gpu.py): the span is a _gpu_span, whose enter and exit also
record a pair of timing events from the client's GpuTimer around the plain span's clock reads;
the pairs of a thread are resolved by its later GPU spans without waiting, and sent through
record() as "<stage>.gpu". The plain span's path does not change: gpu is tested once, in the
constructor.

Fork: os.register_at_fork resets every live Client in the child (new pid in the datagrams, a
new lock, counters at zero, the inherited socket closed, the parent's rings forgotten and never
written); the child connects its own socket and makes its own rings on its first spans. A
profile window of the parent is not the child's: its spans are the plain ones (_pyprof.py).
"""

import errno
import functools
import inspect
import os
import socket
import struct
import threading
import time
import weakref

from . import _gpu, _pyprof, _ring
from ._page import refusal
from ._paths import resolve_socket_path
from ._state import StatePage, Subscriber
from ._wire import KIND_HARD_MISS, KIND_HEARTBEAT, KIND_SPAN, MAGIC, RING_VERSION, SPAN_STRUCT
from ._wire import STAGE_CACHE, VERSION
from ._wire import check_model, pack_model, stage_bytes, warn_at_caller

# Cached at import so the hot path does module-global lookups only.
assert (MAGIC, VERSION, KIND_SPAN) == (b"EM", 1, 1)  # spelled as literals on the hot path
_monotonic_ns = time.monotonic_ns
_pack = SPAN_STRUCT.pack
_pack_slot = _ring.SLOT_STRUCT.pack_into
_pack_head = _ring.HEAD_STRUCT.pack_into
_StructError = struct.error

# At most one connect attempt per this many ns while the agent is away.
RECONNECT_INTERVAL_NS = 1000000000

DROP_REASONS = ("no_agent", "queue_full", "invalid_stage", "other")

# errno values that mean "nobody is listening at the socket path": the agent is not running,
# is restarting (its socket file was unlinked and bound again), or died and left a stale file.
_NO_AGENT_ERRNOS = frozenset(
    (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTCONN, errno.ECONNRESET, errno.EPIPE,
     errno.ENOTDIR)
)

def resolve_deadline_path(explicit, socket_path, environ=None):
    """The deadline page: the explicit path, then $EDGEMON_DEADLINE_PAGE, then the file
    "deadlines" beside the span socket (both live in the agent's runtime directory)."""
    if explicit:
        return os.fspath(explicit)
    env = os.environ if environ is None else environ
    path = env.get("EDGEMON_DEADLINE_PAGE", "")
    if path:
        return path
    return os.path.join(os.path.dirname(socket_path), _ring.DEADLINE_NAME)


# Every Client alive in this process, so the child of a fork can reset them.
_clients = weakref.WeakSet()


def _check_soon(client):
    """The state page's on_change for client (held weakly: the page lives in the client): the
    next span runs _check_agent, so the profile request page the agent writes on an escalation
    is read within a frame, not up to a second later."""
    ref = weakref.ref(client)

    def check_soon():
        c = ref()
        if c is not None:
            c._next_check_ns = 0
    return check_soon


class Client(object):
    """A connection to edgemon-agent's span socket.

    socket_path: the agent's span socket; None resolves it as _paths.resolve_socket_path does
        ($EDGEMON_SOCKET, $EDGEMON_RUNTIME_DIR/spans.sock, then the agent's defaults).
    sync: a callable invoked at the end of every span before its end timestamp is taken
        (torch.cuda.synchronize: GPU work is asynchronous, so without it a span measures only
        the time to queue the work). A span's own sync= overrides it; sync=False turns it off
        for that span.

    state_path: the agent's state page (see _state.py); None resolves it.
    deadline_path: the agent's deadline page; None: $EDGEMON_DEADLINE_PAGE, then "deadlines"
        beside the span socket. Rings are used only while it holds a valid page.
    gpu_event: what span(..., gpu=True) times the GPU with: a callable returning a timing
        event with record() (on the current stream), query() (True once completed; never
        waits) and elapsed_time(end_event) (ms), as torch.cuda.Event(enable_timing=True).
        None: that, when torch is importable and torch.cuda.is_available() (looked up on the
        first gpu=True span); otherwise gpu=True spans time the CPU side only (_gpu.py).

    The constructor tries to connect once and never raises: an agent that is not there yet is
    found by a later span (at most one connect attempt per second).
    """

    __slots__ = (
        "socket_path", "_sync", "_frame", "_pid", "_send", "_sock", "_lock", "_closed",
        "_next_connect_ns", "_unconnected_reason", "_attempts", "_queue_full", "_dropped",
        "_warned_fields", "connect_attempts", "_page", "_subscriber", "_deadline_arg",
        "_dpage", "_rings_on", "_hard", "_tls", "_rings", "_next_check_ns", "_agent_gen",
        "_ring_sink", "_ring_counts", "_check_lock", "_model", "_model_counts",
        "_model_pending", "_warned_model", "_pyprof", "_gpu", "__weakref__",
    )

    def __init__(self, socket_path=None, sync=None, state_path=None, deadline_path=None,
                 gpu_event=None):
        self.socket_path = resolve_socket_path(socket_path)
        # None: looked up on the first gpu=True span; False: off; else the GpuTimer.
        self._gpu = None if gpu_event is None else _gpu.GpuTimer(gpu_event)
        self._deadline_arg = deadline_path
        self._pyprof = _pyprof.PyStacks(
            os.environ.get("EDGEMON_PROFILE_PAGE", "")
            or os.path.join(os.path.dirname(self.socket_path), _pyprof.PAGE_NAME),
            self.socket_path)
        self._init_rings()
        # Maps nothing until the first level()/state(); a new record (a level change, which opens
        # a profile window on an escalation) makes the next span look at the profile page.
        self._page = StatePage(state_path, on_change=_check_soon(self))
        self._subscriber = Subscriber(self.socket_path)
        self._sync = sync
        self._frame = 0
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._sock = None
        self._closed = False
        self._next_connect_ns = 0
        self._unconnected_reason = "no_agent"
        self._attempts = 0  # datagrams handed to the client; sent = attempts - dropped
        # Drops by reason. queue_full, the one a busy agent causes in bursts, is a plain int
        # counted inline on the hot path; the rarer reasons live in a dict.
        self._queue_full = 0
        self._dropped = {"no_agent": 0, "invalid_stage": 0, "other": 0}
        self._warned_fields = False
        self.connect_attempts = 0  # connect() calls made, for diagnostics and tests
        self._send = self._send_unconnected
        self._model = None  # (name, version, {labels}, generation, datagram) of the last call
        self._model_pending = False  # the datagram still has to reach an agent
        self._model_counts = {"calls": 0, "sent": 0, "send_failed": 0, "invalid_model": 0,
                              "invalid_label": 0, "labels_over_limit": 0}
        self._warned_model = False
        _clients.add(self)
        self._connect(_monotonic_ns())

    # -- public API -----------------------------------------------------------------------

    def span(self, stage, sync=None, frame=None, gpu=False):
        """A context manager (and decorator) timing one stage; see edgemon.span."""
        return span(stage, sync, frame, self, gpu)

    def poll_gpu(self):
        """Sends the GPU time of this thread's gpu=True spans whose events completed, without
        waiting for the others (a later span of the thread does the same). Returns how many
        were sent; 0 when GPU spans are off or none was used."""
        timer = self._gpu
        return timer.poll(self) if timer else 0

    def gpu_stats(self):
        """None before the first gpu=True span; then {'enabled': True, 'recorded', 'resolved',
        'dropped', 'failed', 'pending'} (pending: this thread's), or {'enabled': False,
        'reason': why} when GPU spans are off."""
        timer = self._gpu
        if timer is None:
            return None
        if not timer:
            return {"enabled": False, "reason": _gpu.off_reason()}
        out = timer.stats()
        out["enabled"] = True
        return out

    def _gpu_timer(self):
        """The first gpu=True span of this client: its GpuTimer, or False when GPU spans are off
        (torch or a CUDA device missing: said once per process, see _gpu.resolve)."""
        timer = self._gpu
        if timer is None:
            make = _gpu.resolve()[0]
            timer = self._gpu = False if make is None else _gpu.GpuTimer(make)
        return timer

    def record(self, stage, start_ns, duration_ns, frame=None):
        """Sends a span measured by the caller: monotonic start and duration in ns."""
        try:
            stage_b = STAGE_CACHE[stage]
        except (KeyError, TypeError):
            stage_b = stage_bytes(stage)
        try:
            end = start_ns + duration_ns
            due = end >= self._next_check_ns
        except TypeError:  # not numbers: the datagram path counts the span as other
            end, due = 0, False
        if self._rings_on or due:
            # The ring hot path (span.__exit__ has the same): one slot, then the head. The
            # caller's end time stands in for a clock read in the once-a-second check.
            try:
                ring = self._tls.ring
                if ring.live and end < self._next_check_ns:
                    p = ring.pos
                    buf = ring.buf
                    _pack_slot(buf, 128 + (p & ring.mask) * 64, (p + 1) & 0xFFFFFFFF, 1,
                               self._frame if frame is None else frame, start_ns, duration_ns,
                               stage_b)
                    p += 1
                    ring.pos = p
                    _pack_head(buf, 32, p)
                    if stage_b in self._hard and duration_ns > self._hard[stage_b]:
                        self._hard_miss(self._frame if frame is None else frame, start_ns,
                                        duration_ns, stage_b)
                    return
            except (AttributeError, _StructError, TypeError, ValueError):
                pass  # no ring yet in this thread, or a bad field: the slow path sorts it out
            if self._ring_write(1, self._frame if frame is None else frame, start_ns,
                                duration_ns, stage_b, end):
                return
        # The datagram (v1 agent, or no ring): a system call follows, one more call is noise.
        self._send_datagram(1, 1, stage_b, self._frame if frame is None else frame, start_ns,
                            duration_ns)

    def heartbeat(self, stage, frame=None):
        """Tells the agent `stage` is alive (for stall rules), with no duration."""
        try:
            stage_b = STAGE_CACHE[stage]
        except (KeyError, TypeError):
            stage_b = stage_bytes(stage)
        self._emit(KIND_HEARTBEAT, stage_b, frame, _monotonic_ns(), 0)

    def set_model(self, name, version, /, **labels):
        """Names the model this process runs, for the agent to carry in its birth, data and
        state messages; see edgemon.set_model. Returns True when the identity was accepted
        (it is then sent now, or again later), False when the call was dropped. Never raises."""
        counts = self._model_counts
        counts["calls"] += 1
        try:
            name_b, version_b, pairs, bad, over = check_model(name, version, labels)
        except Exception:  # an object whose str/bytes machinery misbehaves
            name_b, version_b, pairs, bad, over = None, None, [], 0, 0
        counts["invalid_label"] += bad
        counts["labels_over_limit"] += over
        if name_b is None or version_b is None:
            counts["invalid_model"] += 1
            self._warn_model("a model name (1..63) and version (1..31) of printable ASCII; "
                             "this set_model call is dropped (counted as invalid_model)")
            return False
        if bad or over:
            self._warn_model("label keys of [A-Za-z_][A-Za-z0-9_]* (1..15 bytes, not __...), "
                             "values of 1..31 printable ASCII, 8 labels at most; the others "
                             "are dropped (counted as invalid_label / labels_over_limit)")
        generation = (self._model[3] + 1) if self._model else 1
        data = pack_model(self._pid, generation, name_b, version_b, pairs)
        self._model = (name_b.decode(), version_b.decode(),
                       {k.decode(): v.decode() for k, v in pairs}, generation, data)
        self._model_pending = True
        self._send_model()
        return True

    @property
    def model(self):
        """The last identity set_model accepted: (name, version, {labels}), or None."""
        m = self._model
        return None if m is None else (m[0], m[1], dict(m[2]))

    def set_frame(self, frame_id):
        """Sets the frame id the next spans carry when they are not given frame= (u64)."""
        self._frame = frame_id

    @property
    def frame(self):
        """The current frame id."""
        return self._frame

    @property
    def sent(self):
        """Datagrams the kernel accepted (handed to the agent's socket queue)."""
        return self._attempts - self.dropped

    @property
    def dropped(self):
        """Datagrams lost on this side, all reasons together."""
        return self._queue_full + sum(self._dropped.values())

    @property
    def connected(self):
        """True while the client holds a socket connected to the agent."""
        return self._sock is not None and not self._closed

    def stats(self):
        """{'sent': n, 'dropped': {'no_agent': n, 'queue_full': n, 'invalid_stage': n,
        'other': n}, 'socket_path': str, 'connected': bool}, plus 'rings' (ring_stats())
        once an agent's deadline page was seen, 'model' (model_stats()) once set_model
        was called, 'python_stacks' once a profile window was sampled ({'windows',
        'samples', 'cut', 'sent', 'send_failed', 'bytes', 'enabled', 'running'}), 'gpu'
        (gpu_stats()) once a gpu=True span was made, and 'refused_pages' ({path: reason})
        while a FIFO, a link or anything but a regular file stands where the state, deadline
        or profile request page should be (read as absent).
        'sent' counts datagrams (v1 spans, heartbeats and kind-6 hard misses); spans written
        to rings are rings['written']."""
        dropped = {"no_agent": self._dropped["no_agent"], "queue_full": self._queue_full,
                   "invalid_stage": self._dropped["invalid_stage"],
                   "other": self._dropped["other"]}
        out = {
            "sent": self._attempts - sum(dropped.values()),
            "dropped": dropped,
            "socket_path": self.socket_path,
            "connected": self.connected,
        }
        if self._agent_gen:  # a deadline page was seen: rings are in play
            out["rings"] = self.ring_stats()
        if self._model_counts["calls"]:  # set_model was called: its counters
            out["model"] = self.model_stats()
        if self._pyprof.counts["windows"]:  # a profile window was sampled
            out["python_stacks"] = self._pyprof.stats()
        if self._gpu is not None:  # a gpu=True span was made
            out["gpu"] = self.gpu_stats()
        refused = {}
        for path in (self._page.path, self._dpage.path, self._pyprof.page_path):
            reason = refusal(path)
            if reason is not None:
                refused[path] = reason
        if refused:  # something other than a regular file stands where a page should be
            out["refused_pages"] = refused
        return out

    def model_stats(self):
        """{'calls', 'sent', 'send_failed', 'pending', 'invalid_model', 'invalid_label',
        'labels_over_limit'}: set_model calls, model datagrams the kernel accepted, sends that
        failed (each sent again later), whether the current identity still has to reach an
        agent, and what validation dropped."""
        out = dict(self._model_counts)
        out["pending"] = self._model_pending
        return out

    def close(self):
        """Closes the socket. Later spans are dropped (counted as other). Idempotent."""
        self._closed = True
        self._send = self._send_closed
        self._close_rings()
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        self._subscriber.close()
        self._page.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()

    def __repr__(self):
        return "<edgemon.Client %s %s sent=%d dropped=%d>" % (
            self.socket_path, "connected" if self.connected else "unconnected",
            self.sent, self.dropped)

    # -- the agent's level: state page and pushes (see _state.py) --------------------------

    def level(self):
        """The agent's current level: "NOMINAL", "WARN", "DEGRADED", "CRITICAL", or None (no
        agent, no page, or a garbled one). Read from the mapped state page, no system call."""
        return self._page.level()

    def state(self):
        """Every field of the state page's record as an edgemon.State, or None."""
        return self._page.state()

    @property
    def state_path(self):
        """The state page path this client reads."""
        return self._page.path

    def subscribe(self):
        """Asks the agent for level pushes (to an autobound socket of this client). True when
        the subscribe datagram was sent."""
        return self._subscriber.subscribe()

    def wait_change(self, timeout=None):
        """Waits up to `timeout` s (None: forever) for the next level push; an edgemon.State
        (seq None) or None on timeout. Subscribes first when not subscribed."""
        return self._subscriber.wait_change(timeout)

    def unsubscribe(self):
        """Stops the pushes and closes the push socket. True when the agent was told."""
        return self._subscriber.unsubscribe()

    def state_stats(self):
        """Counters of the level readers: {'path', 'mapped', 'opens', 'absent', 'invalid',
        'busy', 'subscribed', 'push': {'send_failed', 'recv_failed', 'invalid',
        'no_socket'}}."""
        out = self._page.stats()
        out["subscribed"] = self._subscriber.subscribed
        out["push"] = dict(self._subscriber.counters)
        return out

    # -- slow paths: never on the way of a datagram that gets through ---------------------

    def _connect(self, now_ns):
        """Tries to connect a fresh socket. Returns True when connected (self._send is then the
        socket's send). Called at most once per RECONNECT_INTERVAL_NS; never blocks, never
        raises."""
        if self._closed or not self._lock.acquire(False):
            return False
        try:
            if self._sock is not None:  # another thread got there first
                return True
            self._next_connect_ns = now_ns + RECONNECT_INTERVAL_NS
            self.connect_attempts += 1
            try:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            except OSError:
                self._unconnected_reason = "other"
                return False
            try:
                sock.setblocking(False)
                sock.connect(self.socket_path)
            except OSError as exc:
                sock.close()
                self._unconnected_reason = (
                    "no_agent" if exc.errno in _NO_AGENT_ERRNOS else "other")
                return False
            self._sock = sock
            self._send = sock.send
            return True
        finally:
            self._lock.release()

    def _disconnect(self):
        """Forgets the socket after the agent went away; the next sends reconnect."""
        self._send = self._send_unconnected
        sock, self._sock = self._sock, None
        if sock is not None:
            # A thread that loaded sock.send just before this gets EBADF: counted as other.
            sock.close()

    def _send_unconnected(self, data):
        """self._send while there is no socket: connect if due, else drop."""
        if self._closed:
            self._dropped["other"] += 1
            return
        now = _monotonic_ns()
        if now < self._next_connect_ns or not self._connect(now):
            self._dropped[self._unconnected_reason] += 1
            return
        try:
            self._sock.send(data)
        except OSError as exc:
            self._count_send_error(exc)
        except AttributeError:  # closed by another thread in between
            self._dropped["other"] += 1

    def _send_closed(self, data):
        self._dropped["other"] += 1

    def _send_failed(self, exc, data):
        """A send on the connected socket failed with `exc`: count it, or reconnect and resend
        once when the agent restarted (its socket was bound again at the same path)."""
        if exc.errno in _NO_AGENT_ERRNOS and not self._closed:
            self._disconnect()
            now = _monotonic_ns()
            if now >= self._next_connect_ns and self._connect(now):
                try:
                    self._sock.send(data)
                    return
                except OSError as exc2:
                    exc = exc2
                except AttributeError:
                    self._dropped["other"] += 1
                    return
        self._count_send_error(exc)

    def _count_send_error(self, exc):
        code = exc.errno
        if code == errno.EAGAIN or code == errno.EWOULDBLOCK:
            self._queue_full += 1
        elif code in _NO_AGENT_ERRNOS:
            self._dropped["no_agent"] += 1
            if self._sock is not None:
                self._disconnect()
        else:
            self._dropped["other"] += 1

    def _emit(self, kind, stage_b, frame, start_ns, duration_ns):
        """Packs and sends one datagram (stage already encoded, None when invalid). The slow-path
        twin of the inlined ring code in record() and span.__exit__; heartbeat() uses it as is."""
        if self._ring_write(kind, self._frame if frame is None else frame, start_ns,
                            duration_ns, stage_b, _monotonic_ns()):
            return
        self._send_datagram(VERSION, kind, stage_b, self._frame if frame is None else frame,
                            start_ns, duration_ns)

    def _send_datagram(self, version, kind, stage_b, frame, start_ns, duration_ns):
        """Packs and sends one 64-byte datagram, counting what goes wrong. record() and
        span.__exit__ send theirs here when no ring takes the span."""
        data = None
        try:
            data = _pack(MAGIC, version, kind, self._pid, frame, start_ns, duration_ns, stage_b)
            self._send(data)
        except BlockingIOError:  # EAGAIN: the agent's queue is full
            self._queue_full += 1
        except OSError as exc:
            self._send_failed(exc, data)
        except _StructError:
            self._pack_failed(stage_b)
        self._attempts += 1

    # -- span rings v2 (see _ring.py): slow paths, at most once a second or once a thread --

    def _init_rings(self):
        """No ring yet; the deadline page is looked at on the first span."""
        self._dpage = _ring.DeadlinePage(resolve_deadline_path(self._deadline_arg,
                                                               self.socket_path))
        self._rings_on = False  # True while a valid deadline page says a v2 agent runs
        self._hard = {}  # stage bytes -> hard deadline ns, from the deadline page
        self._tls = threading.local()  # .ring: this thread's _ring.Ring
        self._rings = weakref.WeakSet()  # every ring of this process, for the agent check
        self._next_check_ns = 0
        self._check_lock = threading.Lock()  # one thread checks the page; others go on
        self._agent_gen = 0  # +1 on every new deadline page inode (a new agent)
        self._ring_sink = [0]  # spans written to rings that were closed since
        self._ring_counts = {"registrations": 0, "accepted": 0, "refused": 0,
                             "unanswered": 0, "unsent": 0, "agent_restart": 0,
                             "hard_miss": 0}

    def _warn_model(self, what):
        if not self._warned_model:
            self._warned_model = True
            warn_at_caller("edgemon: set_model takes " + what)

    def _send_model(self):
        """Sends the model datagram on the connected socket (connecting first when there is
        none). On failure it stays pending: _check_agent sends it again a second later."""
        model = self._model
        if model is None or self._closed:
            return
        for attempt in (1, 2):  # a second try on a fresh socket when the agent restarted
            if self._sock is None and not self._connect(_monotonic_ns()):
                self._model_counts["send_failed"] += 1
                return
            try:
                self._sock.send(model[4])
                break
            except OSError as exc:
                if exc.errno not in _NO_AGENT_ERRNOS or attempt == 2:
                    self._model_counts["send_failed"] += 1
                    return
                self._disconnect()
            except AttributeError:  # closed by another thread in between
                return
        self._model_counts["sent"] += 1
        if self._model is model:
            self._model_pending = False

    def _check_agent(self, now_ns):
        """At most once a second (the hot path calls it when now_ns passes _next_check_ns):
        stat the deadline page; a new inode is a new agent, whose rings register again."""
        # The real clock, not now_ns: record() passes the caller's end time.
        if self._closed or not self._check_lock.acquire(False):
            return
        try:
            self._next_check_ns = _monotonic_ns() + _ring.CHECK_INTERVAL_NS
            changed = self._dpage.check()
        except Exception:  # a garbled page never reaches the inference loop
            return
        finally:
            self._check_lock.release()
        self._hard = self._dpage.deadlines
        rings = list(self._rings)
        if changed:
            self._agent_gen += 1
            for ring in rings:
                if ring.live:  # spans since the last check may never be drained: lost
                    self._ring_counts["agent_restart"] += ring.pos - ring.checkpoint
                ring.live = False
            if self._model is not None:  # a new agent: it has to learn the identity
                self._model_pending = True
        else:
            for ring in rings:
                ring.checkpoint = ring.pos
        self._rings_on = self._dpage.inode is not None
        if self._model_pending:
            self._send_model()
        try:  # the profile request page: a helper thread samples Python stacks for a window
            self._pyprof.check(_monotonic_ns())
        except Exception:
            pass

    def _thread_ring(self, now_ns):
        """This thread's first span since rings are on: make its ring (a dummy one when the
        memfd cannot be made: the thread stays on datagrams)."""
        ring = _ring.Ring.create(self._dpage.slots, self._ring_sink) or _ring.Ring()
        self._tls.ring = ring
        if ring.buf is not None:
            self._rings.add(ring)
        return ring

    def _ring_slow(self, ring, now_ns):
        """A ring that is not live: poll for the ack while pending, register when the agent
        changed since it last tried or a second after a register that could not be sent (the
        agent's queue was full, say: it never saw it). True when the ring is live now."""
        if ring.buf is None or self._closed:
            return False
        counts = self._ring_counts
        if ring.mode is _ring.PENDING:
            mode = ring.poll_ack(now_ns)
            if mode is not _ring.PENDING:
                counts["accepted" if mode is _ring.LIVE else mode] += 1
        elif ring.gen != self._agent_gen or (ring.mode is _ring.UNSENT and
                                             _monotonic_ns() >= ring.retry_ns):
            ring.gen = self._agent_gen
            counts["registrations"] += 1
            if not ring.register(self.socket_path, now_ns):
                counts["unsent"] += 1  # the real clock: record() passes the caller's end time
                ring.retry_ns = _monotonic_ns() + _ring.ACK_TIMEOUT_NS
        return ring.live

    def _ring_write(self, kind, frame, start_ns, duration_ns, stage_b, now_ns):
        """The ring side of _emit: True when the span went to this thread's ring (and, over
        its hard deadline, also out as a kind-6 datagram)."""
        if now_ns >= self._next_check_ns:
            self._check_agent(now_ns)
        if not self._rings_on:
            return False
        try:
            ring = self._tls.ring
        except AttributeError:
            ring = self._thread_ring(now_ns)
        if not ring.live and not self._ring_slow(ring, now_ns):
            return False
        try:
            ring.write(kind, frame, start_ns, duration_ns, stage_b)
        except _StructError:
            self._pack_failed(stage_b)
            self._attempts += 1
            return True
        except (TypeError, ValueError):  # the ring was closed under this thread
            return False
        if kind == KIND_SPAN and stage_b in self._hard and duration_ns > self._hard[stage_b]:
            self._hard_miss(frame, start_ns, duration_ns, stage_b)
        return True

    def _hard_miss(self, frame, start_ns, duration_ns, stage_b):
        """A span already in the ring, over its stage's hard deadline: also a kind-6 datagram
        (version 2), so the agent escalates at once."""
        self._ring_counts["hard_miss"] += 1
        self._send_datagram(RING_VERSION, KIND_HARD_MISS, stage_b, frame, start_ns,
                            duration_ns)

    def ring_stats(self):
        """{'active', 'written', 'registrations', 'accepted', 'refused', 'unanswered',
        'unsent', 'hard_miss', 'lost': {'agent_restart'}}: rings of this process."""
        rings = list(self._rings)
        counts = dict(self._ring_counts)
        lost = {"agent_restart": counts.pop("agent_restart")}
        counts["active"] = sum(1 for ring in rings if ring.live)
        counts["written"] = self._ring_sink[0] + sum(ring.pos for ring in rings)
        counts["lost"] = lost
        return counts

    def _close_rings(self):
        for ring in list(self._rings):
            ring.close()
        self._rings_on = False
        self._dpage.close()

    def _pack_failed(self, stage_b):
        """struct refused the record: an invalid stage name (already warned about), or a
        frame / start / duration that is not an integer in 0..2**64-1."""
        if stage_b is None:
            self._dropped["invalid_stage"] += 1
            return
        self._dropped["other"] += 1
        if not self._warned_fields:
            self._warned_fields = True
            warn_at_caller(
                "edgemon: a span's frame, start_ns or duration_ns is not an integer in "
                "0..2**64-1; such spans are dropped (counted as other)")

    def _reset_in_child(self):
        """After fork, in the child: a new identity, a new lock, no socket, counters at 0."""
        self._pid = os.getpid()
        self._lock = threading.Lock()
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()  # the child's copy of the descriptor only
        self._attempts = 0
        self._queue_full = 0
        self._dropped = {"no_agent": 0, "invalid_stage": 0, "other": 0}
        self.connect_attempts = 0
        self._next_connect_ns = 0
        self._subscriber._reset_in_child()
        for ring in list(self._rings):
            ring.forget()  # the parent's rings: never written by the child
        self._init_rings()  # the child makes its own on its first span
        if self._gpu:
            self._gpu.reset_in_child()
        if not self._closed:
            self._send = self._send_unconnected

    def _reconfigure(self, socket_path, sync, state_path):
        with self._lock:
            self.socket_path = resolve_socket_path(socket_path)
            self._subscriber.close()
            self._subscriber = Subscriber(self.socket_path)
            self._page.close()
            self._page = StatePage(state_path, on_change=_check_soon(self))
            self._close_rings()
            self._init_rings()
            self._sync = sync
            self._closed = False
            sock, self._sock = self._sock, None
            if sock is not None:
                sock.close()
            self._send = self._send_unconnected
            self._next_connect_ns = 0
        self._connect(_monotonic_ns())


class span(object):
    """Times one stage: `with edgemon.span("infer"):` or `@edgemon.span("infer")`.

    stage: 1..31 bytes of [A-Za-z0-9_.:-]. An invalid name never raises: its spans are dropped
        and counted (invalid_stage), with one warning per name.
    sync: called when the block ends, before the end timestamp is taken (e.g.
        torch.cuda.synchronize). None: the client's sync; False: none.
    frame: the frame id to send; None: the client's current frame when the span ends.
    client: the Client to send through; None: the module's default client.
    gpu: True also measures the block's GPU time without waiting for it: a pair of CUDA
        timing events on the current stream, sent as the stage "<stage>.gpu" (same frame id,
        the CPU span's start) by a later span of the same thread once they completed
        (_gpu.py). Without torch or a CUDA device it is a plain span (one warning says why).

    One datagram is sent when the block exits, also when it exits by an exception, which then
    propagates unchanged. An instance may be entered again after it exited, but not from two
    threads or recursively at once; the decorator makes a fresh span per call, so decorated
    functions are safe to call from several threads and recursively.
    """

    # Kept minimal on purpose: the cost of `with span(...)` is the product figure.
    __slots__ = ("_client", "_stage", "_sync", "_frame", "_t0", "_gpu")

    def __init__(self, stage, sync=None, frame=None, client=None, gpu=False):
        if client is None:
            client = _default or default_client()
        self._client = client
        try:
            self._stage = STAGE_CACHE[stage]
        except (KeyError, TypeError):
            self._stage = stage_bytes(stage)
        self._sync = sync  # None: the client's, looked up when the span ends
        self._frame = frame
        if gpu:  # the plain span pays this test only
            timer = client._gpu
            if timer is None:
                timer = client._gpu_timer()
            if timer:
                self.__class__ = _gpu_span

    def __enter__(self):
        self._t0 = _monotonic_ns()
        return self

    def _enter_in_window(self):
        """__enter__ while a profile window is open (_pyprof swaps it in, and back when the
        window ends): the same, and the block's first Python call records the thread's stack
        (_pyprof.py, "Short stages")."""
        self._t0 = _monotonic_ns()
        self._client._pyprof.span_started()
        return self

    def __exit__(self, exc_type, exc, tb):
        client = self._client
        sync = client._sync if self._sync is None else self._sync
        if sync:
            return self._exit_after_sync(sync, exc_type)
        end = _monotonic_ns()
        frame = self._frame
        t0 = self._t0
        if client._rings_on or end >= client._next_check_ns:
            # The ring hot path: one slot, then the head, no system call (WIRE.md "Writing").
            try:
                ring = client._tls.ring
                if ring.live and end < client._next_check_ns:
                    p = ring.pos
                    buf = ring.buf
                    stage = self._stage
                    _pack_slot(buf, 128 + (p & ring.mask) * 64, (p + 1) & 0xFFFFFFFF, 1,
                               client._frame if frame is None else frame, t0, end - t0, stage)
                    p += 1
                    ring.pos = p
                    _pack_head(buf, 32, p)
                    if stage in client._hard and end - t0 > client._hard[stage]:
                        client._hard_miss(client._frame if frame is None else frame, t0,
                                          end - t0, stage)
                    return
            except (AttributeError, _StructError, TypeError, ValueError):
                pass  # no ring yet in this thread, or a bad field: the slow path sorts it out
            if client._ring_write(1, client._frame if frame is None else frame, t0, end - t0,
                                  self._stage, end):
                return
        client._send_datagram(1, 1, self._stage, client._frame if frame is None else frame, t0,
                              end - t0)
        # Returns None: an exception raised in the block propagates unchanged.

    def _exit_after_sync(self, sync, exc_type):
        """__exit__ with a sync callable. If sync raises, the span is still sent; its
        exception propagates unless the block itself raised (that one wins, unchanged)."""
        try:
            sync()
        except BaseException:
            self._send_now(_monotonic_ns())
            if exc_type is None:
                raise
            return False
        self._send_now(_monotonic_ns())
        return False

    def _send_now(self, end):
        client = self._client
        client._emit(KIND_SPAN, self._stage, self._frame, self._t0, end - self._t0)

    def __call__(self, func):
        """Decorator form: each call of `func` runs in a fresh span with the same settings."""
        client, stage_b, sync, frame = self._client, self._stage, self._sync, self._frame
        cls = type(self)  # span, or _gpu_span for gpu=True with a GPU

        def make():
            s = _new_span(cls)
            s._client = client
            s._stage = stage_b
            s._sync = sync
            s._frame = frame
            return s

        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def timed_async(*args, **kwargs):
                with make():
                    return await func(*args, **kwargs)
            return timed_async

        @functools.wraps(func)
        def timed(*args, **kwargs):
            with make():
                return func(*args, **kwargs)
        return timed

    def __repr__(self):
        return "<edgemon.span %r>" % (self._stage,)


_new_span = object.__new__


class _gpu_span(span):
    """span(..., gpu=True) on a client with a GPU timer: the CPU span as always, plus a pair
    of timing events around the block, resolved later into "<stage>.gpu" (_gpu.py). The
    events are recorded outside the CPU span's clock reads, so its duration is the plain one."""

    __slots__ = ()

    def __enter__(self):
        client = self._client
        self._gpu = client._gpu.begin(client, self._stage)
        return span.__enter__(self)  # looked up now: a profile window swaps it

    def __exit__(self, exc_type, exc, tb):
        entry = self._gpu
        if entry is None:  # nothing recorded: the name, or an event call that failed
            return span.__exit__(self, exc_type, exc, tb)
        self._gpu = None
        client = self._client
        frame = client._frame if self._frame is None else self._frame
        try:
            return span.__exit__(self, exc_type, exc, tb)
        finally:
            client._gpu.end(client, entry, frame, self._t0)


# -- the module's default client ------------------------------------------------------------

_default = None
_default_lock = threading.Lock()


_span_enter = span.__enter__


def _on_profile_windows(open_):
    """_pyprof's window hook: spans record a Python stack only while a window is open."""
    span.__enter__ = span._enter_in_window if open_ else _span_enter


_pyprof.set_window_hook(_on_profile_windows,
                        (span.__exit__.__code__, _gpu_span.__exit__.__code__),
                        span._enter_in_window.__code__)


def default_client():
    """The process-wide Client behind the module-level functions, created on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Client()
        return _default


def configure(socket_path=None, sync=None, state_path=None):
    """Points the default client at `socket_path` and its state page at `state_path` (None:
    resolve them again from the environment), and sets its sync callable. Returns the default
    client. Spans already decorated keep working: they use the same client object. A
    subscription of the default client ends (its push socket is closed)."""
    client = _default or default_client()
    client._reconfigure(socket_path, sync, state_path)
    return client


def level():
    """The agent's current level ("NOMINAL", "WARN", "DEGRADED", "CRITICAL") from the state
    page, or None when there is no agent or page. No system call on the way."""
    return (_default or default_client())._page.level()


def state():
    """Every field of the agent's current state record (an edgemon.State), or None."""
    return (_default or default_client())._page.state()


def subscribe():
    """Asks the agent to push every level change to the default client; True when sent."""
    return (_default or default_client())._subscriber.subscribe()


def wait_change(timeout=None):
    """The next level push (an edgemon.State, seq None), or None after `timeout` seconds."""
    return (_default or default_client())._subscriber.wait_change(timeout)


def unsubscribe():
    """Stops the default client's level pushes; True when the agent was told."""
    return (_default or default_client())._subscriber.unsubscribe()


def record(stage, start_ns, duration_ns, frame=None):
    """Sends a span measured by the caller (time.monotonic_ns() start, duration in ns)."""
    (_default or default_client()).record(stage, start_ns, duration_ns, frame)


def heartbeat(stage, frame=None):
    """Tells the agent `stage` is alive (stall rules) without timing anything."""
    (_default or default_client()).heartbeat(stage, frame)


def set_model(name, version, /, **labels):
    """Names the model the process runs: `name` (1..63 printable ASCII bytes), `version`
    (1..31) and up to 8 labels (keys [A-Za-z_][A-Za-z0-9_]* of 1..15 bytes, not starting with
    "__"; values 1..31 printable ASCII), e.g. set_model("mobilenet_v3_small", "1.4",
    variant="light"). The agent carries it in its birth, data and state messages; a call that
    changes it shows at once as a state message. A bad label is dropped, a bad name or version
    drops the call; both are counted (stats()['model']) and never raise. Returns True when the
    identity was accepted. It is sent again when the send failed and after an agent restart."""
    return (_default or default_client()).set_model(name, version, **labels)


def poll_gpu():
    """Sends the GPU time of the calling thread's gpu=True spans whose events completed (the
    default client's), without waiting; a later span of the thread does the same. Returns how
    many were sent."""
    return (_default or default_client()).poll_gpu()


def set_frame(frame_id):
    """Sets the default client's current frame id (sent by spans not given frame=)."""
    (_default or default_client())._frame = frame_id


def dropped():
    """Datagrams the default client dropped, all reasons together."""
    return (_default or default_client()).dropped


def stats():
    """The default client's counters: see Client.stats."""
    return (_default or default_client()).stats()


def _after_fork_in_child():
    global _default_lock
    _default_lock = threading.Lock()  # a thread of the parent may have held it
    _pyprof.after_fork_in_child()
    for client in list(_clients):
        client._pyprof.reset_in_child()
        client._reset_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
