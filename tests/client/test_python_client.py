"""Tests of the Python span client (firmware/client/python/edgemon) against a real socket.

Every test binds a real AF_UNIX SOCK_DGRAM receiver in its tmp_path, points the client at it,
and decodes what arrives with the decoder below, written from proto/WIRE.md (span datagram
v1) independently of the client's own struct format. They check every field, the context
manager and decorator forms, sync before the end timestamp, the frame id, and that the client
never raises nor blocks when the agent is absent, restarting or not reading: drops are counted
by reason, reconnects are attempted at most once per second, a forked child reconnects.

Run with: /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/client
"""

import asyncio
import errno
import os
import socket
import threading
import time
import uuid
import warnings

import pytest

from client_tests import SocketPeer, socket_peer  # first: puts the package on sys.path

import edgemon  # noqa: E402  (after the sys.path insert: runs without installation)
import edgemon._client as client_module  # noqa: E402

# ---- An independent decoder of span datagram v1, from proto/WIRE.md ----

DGRAM_BYTES = 64
KIND_SPAN = 1
KIND_HEARTBEAT = 2
STAGE_ALPHABET = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-")


def u(raw, offset, size):
    """Little-endian unsigned integer of `size` bytes at `offset`."""
    return int.from_bytes(raw[offset:offset + size], "little")


def decode_span(raw):
    """Decodes one datagram; asserts every validation rule of WIRE.md on the way."""
    assert len(raw) == DGRAM_BYTES, "ESIZE"
    assert raw[0] == 0x45 and raw[1] == 0x4D, "EMAGIC"
    assert raw[2] == 1, "EVERSION"
    kind = raw[3]
    assert kind in (1, 2, 3, 4), "EKIND"
    field = raw[32:64]
    nul = field.index(0)
    name, padding = field[:nul], field[nul:]
    assert padding == bytes(len(padding)), "ESTRING: non-zero byte after the NUL"
    if kind in (KIND_SPAN, KIND_HEARTBEAT):
        assert 1 <= len(name) <= 31 and set(name) <= STAGE_ALPHABET, "ESTRING: stage name"
    return {
        "kind": kind,
        "pid": u(raw, 4, 4),
        "frame": u(raw, 8, 8),
        "start_ns": u(raw, 16, 8),
        "duration_ns": u(raw, 24, 8),
        "stage": name.decode("ascii"),
    }


# ---- Fixtures ----


class Receiver(SocketPeer):
    """A bound AF_UNIX SOCK_DGRAM socket standing in for the agent's span socket."""

    def recv(self):
        """The next datagram, decoded (fails the test after 5 s without one)."""
        return decode_span(self.sock.recv(4096))

    def drain(self):
        """Every datagram queued now, decoded, without waiting."""
        got = []
        timeout = self.sock.gettimeout()
        self.sock.setblocking(False)  # a socket with a timeout would wait before recv
        try:
            while True:
                got.append(decode_span(self.sock.recv(4096)))
        except BlockingIOError:
            return got
        finally:
            self.sock.settimeout(timeout)

receiver = socket_peer(Receiver)


@pytest.fixture
def client(receiver):
    c = edgemon.Client(receiver.path)
    yield c
    c.close()


@pytest.fixture
def default_client_at(receiver):
    """The module-level API pointed at the receiver; put back on an absent path after."""
    edgemon.configure(receiver.path)
    edgemon.set_frame(0)
    yield edgemon.default_client()
    edgemon.configure(os.path.join(os.path.dirname(receiver.path), "absent.sock"))
    edgemon.set_frame(0)


class FakeClock:
    """Replaces the client's monotonic clock so reconnect pacing is tested without sleeping."""

    def __init__(self, monkeypatch):
        self.now = time.monotonic_ns()
        monkeypatch.setattr(client_module, "_monotonic_ns", self)

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += int(seconds * 1e9)


@pytest.fixture
def connect_calls(monkeypatch):
    """Counts connect() calls on AF_UNIX sockets the client makes (by path)."""
    calls = []
    real_socket = socket.socket

    class CountingSocket(real_socket):
        def connect(self, address):
            calls.append(address)
            return super().connect(address)

    monkeypatch.setattr(socket, "socket", CountingSocket)
    return calls


def drops(c):
    return c.stats()["dropped"]


# ---- Spans: every field ----


def test_span_context_manager_sends_one_datagram_with_every_field(client, receiver):
    client.set_frame(41)
    before = time.monotonic_ns()
    with client.span("infer"):
        time.sleep(0.002)
    after = time.monotonic_ns()
    got = receiver.recv()
    assert got["kind"] == KIND_SPAN
    assert got["pid"] == os.getpid()
    assert got["frame"] == 41
    assert got["stage"] == "infer"
    assert before <= got["start_ns"] <= got["start_ns"] + got["duration_ns"] <= after
    assert got["duration_ns"] >= 2000000
    assert receiver.drain() == []
    assert client.sent == 1 and client.dropped == 0
    assert client.stats() == {
        "sent": 1,
        "dropped": {"no_agent": 0, "queue_full": 0, "invalid_stage": 0, "other": 0},
        "socket_path": receiver.path,
        "connected": True,
    }


def test_span_frame_defaults_to_zero_then_current_then_explicit(client, receiver):
    with client.span("a"):
        pass
    client.set_frame(7)
    with client.span("b"):
        pass
    with client.span("c", frame=2**64 - 1):
        pass
    frames = [(d["stage"], d["frame"]) for d in (receiver.recv() for _ in range(3))]
    assert frames == [("a", 0), ("b", 7), ("c", 2**64 - 1)]
    assert client.frame == 7


def test_longest_stage_name_with_every_special_character_travels_intact(client, receiver):
    name = "Az09_.:-" + "x" * 23
    assert len(name) == 31
    with client.span(name):
        pass
    assert receiver.recv()["stage"] == name


def test_socket_path_from_edgemon_socket_environment(receiver, monkeypatch):
    monkeypatch.setenv("EDGEMON_SOCKET", receiver.path)
    c = edgemon.Client()
    try:
        assert c.socket_path == receiver.path
        with c.span("env"):
            pass
        got = receiver.recv()
        assert (got["kind"], got["stage"], got["pid"]) == (KIND_SPAN, "env", os.getpid())
    finally:
        c.close()


def test_explicit_socket_path_wins_over_environment(receiver, monkeypatch, tmp_path):
    monkeypatch.setenv("EDGEMON_SOCKET", str(tmp_path / "elsewhere.sock"))
    c = edgemon.Client(socket_path=receiver.path)
    try:
        c.record("explicit", 1, 2)
        assert receiver.recv()["stage"] == "explicit"
    finally:
        c.close()


def test_module_level_api_follows_edgemon_socket(default_client_at, receiver, monkeypatch):
    monkeypatch.setenv("EDGEMON_SOCKET", receiver.path)
    edgemon.configure()  # no path: resolved again from the environment
    assert edgemon.stats()["socket_path"] == receiver.path
    with edgemon.span("env.default"):
        pass
    assert receiver.recv()["stage"] == "env.default"


@pytest.mark.parametrize(
    "env, euid, expected",
    [
        ({"EDGEMON_SOCKET": "/s/x.sock", "EDGEMON_RUNTIME_DIR": "/r"}, 0, "/s/x.sock"),
        ({"EDGEMON_RUNTIME_DIR": "/r", "XDG_RUNTIME_DIR": "/run/user/5"}, 5, "/r/spans.sock"),
        ({"XDG_RUNTIME_DIR": "/run/user/0"}, 0, "/run/edgemon/spans.sock"),
        ({"XDG_RUNTIME_DIR": "/run/user/1000"}, 1000, "/run/user/1000/edgemon/spans.sock"),
        ({"XDG_RUNTIME_DIR": "relative"}, 1000, "/tmp/edgemon-1000/spans.sock"),
        ({}, 1000, "/tmp/edgemon-1000/spans.sock"),
        ({"EDGEMON_SOCKET": "", "EDGEMON_RUNTIME_DIR": ""}, 1000, "/tmp/edgemon-1000/spans.sock"),
    ],
)
def test_socket_path_resolution_order(env, euid, expected, monkeypatch, tmp_path):
    # The service's directory moves under tmp_path: an agent running on this machine as a
    # service (or one a test left behind) must not change what a user's client resolves.
    from edgemon import _paths
    service = str(tmp_path / "run-edgemon")
    monkeypatch.setattr(_paths, "SERVICE_DIR", service)
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    expected = expected.replace("/run/edgemon/", service + "/")
    assert edgemon.resolve_socket_path(None, env) == expected
    assert edgemon.resolve_socket_path("/explicit.sock", env) == "/explicit.sock"


def test_a_system_service_socket_is_found_with_no_setting(tmp_path, monkeypatch):
    """The agent as a system service binds <its RuntimeDirectory>/spans.sock; a user's client
    finds it there before its own per-user defaults, and only while that socket exists."""
    from edgemon import _paths
    service = tmp_path / "run-edgemon"
    service.mkdir()
    monkeypatch.setattr(_paths, "SERVICE_DIR", str(service))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    env = {"XDG_RUNTIME_DIR": "/run/user/1000"}
    assert edgemon.resolve_socket_path(None, env) == "/run/user/1000/edgemon/spans.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind(str(service / "spans.sock"))
        assert edgemon.resolve_socket_path(None, env) == str(service / "spans.sock")
        # A setting still wins over the service's directory.
        assert edgemon.resolve_socket_path(None, {"EDGEMON_RUNTIME_DIR": "/r"}) == "/r/spans.sock"


def test_span_as_decorator_sends_one_span_per_call(client, receiver):
    @client.span("decorated", frame=5)
    def work(x, y=1):
        """Docstring kept."""
        time.sleep(0.001)
        return x + y

    before = time.monotonic_ns()
    assert work(1, y=2) == 3
    assert work(10) == 11
    after = time.monotonic_ns()
    assert work.__name__ == "work" and work.__doc__ == "Docstring kept."
    for _ in range(2):
        got = receiver.recv()
        assert (got["kind"], got["stage"], got["frame"], got["pid"]) == (
            KIND_SPAN, "decorated", 5, os.getpid())
        assert before <= got["start_ns"] and got["start_ns"] + got["duration_ns"] <= after
        assert got["duration_ns"] >= 1000000
    assert client.sent == 2


def test_module_level_decorator_and_coroutine(default_client_at, receiver):
    @edgemon.span("mod.deco")
    def f():
        return "ok"

    @edgemon.span("mod.async")
    async def g():
        await asyncio.sleep(0.002)
        return "async ok"

    assert f() == "ok"
    assert asyncio.run(g()) == "async ok"
    first, second = receiver.recv(), receiver.recv()
    assert first["stage"] == "mod.deco"
    assert second["stage"] == "mod.async" and second["duration_ns"] >= 2000000


def test_exception_in_block_propagates_unchanged_and_span_is_sent(client, receiver):
    class Boom(Exception):
        pass

    err = Boom("inside")
    with pytest.raises(Boom) as caught:
        with client.span("failing"):
            raise err
    assert caught.value is err
    assert receiver.recv()["stage"] == "failing"

    @client.span("failing.deco")
    def fails():
        raise err

    with pytest.raises(Boom) as caught:
        fails()
    assert caught.value is err
    assert receiver.recv()["stage"] == "failing.deco"


def test_sync_is_called_before_the_end_timestamp(client, receiver):
    calls = []

    def sync():
        time.sleep(0.02)
        calls.append(time.monotonic_ns())

    with client.span("gpu", sync=sync):
        pass
    got = receiver.recv()
    assert len(calls) == 1
    assert got["duration_ns"] >= 20000000
    assert got["start_ns"] + got["duration_ns"] >= calls[0]


def test_client_wide_sync_applies_and_span_can_turn_it_off(receiver):
    calls = []
    c = edgemon.Client(receiver.path, sync=lambda: (time.sleep(0.02), calls.append(1)))
    try:
        with c.span("synced"):
            pass
        with c.span("unsynced", sync=False):
            pass
        synced, unsynced = receiver.recv(), receiver.recv()
        assert calls == [1]  # the client-wide sync ran for the first span only
        assert synced["duration_ns"] >= 20000000
        assert unsynced["stage"] == "unsynced"
    finally:
        c.close()


def test_configure_sync_reaches_spans_decorated_before(default_client_at, receiver):
    @edgemon.span("decorated.early")
    def step():
        return 1

    edgemon.configure(receiver.path, sync=lambda: time.sleep(0.02))
    assert step() == 1
    with edgemon.span("plain"):
        pass
    assert receiver.recv()["duration_ns"] >= 20000000
    assert receiver.recv()["duration_ns"] >= 20000000


def test_sync_error_propagates_after_sending_unless_the_block_raised(client, receiver):
    def bad_sync():
        raise RuntimeError("cuda error")

    with pytest.raises(RuntimeError, match="cuda error"):
        with client.span("sync.fails", sync=bad_sync):
            pass
    assert receiver.recv()["stage"] == "sync.fails"
    with pytest.raises(KeyError):  # the block's exception wins over sync's
        with client.span("both.fail", sync=bad_sync):
            raise KeyError("block")
    assert receiver.recv()["stage"] == "both.fail"


def test_record_sends_given_fields(client, receiver):
    client.record("camera.rx", 123456789, 987654321, frame=99)
    client.set_frame(3)
    client.record("camera.rx", 2**64 - 1, 0)
    assert receiver.recv() == {"kind": KIND_SPAN, "pid": os.getpid(), "frame": 99,
                               "start_ns": 123456789, "duration_ns": 987654321,
                               "stage": "camera.rx"}
    assert receiver.recv() == {"kind": KIND_SPAN, "pid": os.getpid(), "frame": 3,
                               "start_ns": 2**64 - 1, "duration_ns": 0, "stage": "camera.rx"}


def test_heartbeat_datagram_kind_and_fields(client, receiver):
    client.set_frame(12)
    before = time.monotonic_ns()
    client.heartbeat("watchdog")
    after = time.monotonic_ns()
    got = receiver.recv()
    assert got["kind"] == KIND_HEARTBEAT
    assert got["stage"] == "watchdog" and got["pid"] == os.getpid() and got["frame"] == 12
    assert before <= got["start_ns"] <= after
    assert got["duration_ns"] == 0


def test_module_level_functions_use_the_default_client(default_client_at, receiver):
    sent_before, dropped_before = edgemon.stats()["sent"], edgemon.dropped()
    edgemon.set_frame(8)
    with edgemon.span("m.span"):
        pass
    edgemon.record("m.record", 5, 6)
    edgemon.heartbeat("m.beat")
    edgemon.record("m.frame", 5, 6, frame=9)
    got = [receiver.recv() for _ in range(4)]
    assert [(g["kind"], g["stage"], g["frame"]) for g in got] == [
        (KIND_SPAN, "m.span", 8), (KIND_SPAN, "m.record", 8), (KIND_HEARTBEAT, "m.beat", 8),
        (KIND_SPAN, "m.frame", 9)]
    stats = edgemon.stats()
    assert stats["sent"] == sent_before + 4 and edgemon.dropped() == dropped_before
    assert stats["socket_path"] == receiver.path


# ---- The agent absent, restarting or slow ----


def test_absent_agent_never_raises_and_counts_no_agent(tmp_path):
    c = edgemon.Client(str(tmp_path / "nobody.sock"))
    try:
        with c.span("a"):
            pass
        c.record("a", 1, 2)
        c.heartbeat("a")
        assert c.sent == 0
        assert drops(c) == {"no_agent": 3, "queue_full": 0, "invalid_stage": 0, "other": 0}
        assert c.connected is False
    finally:
        c.close()


def test_absent_agent_reconnect_attempted_at_most_once_per_second(
        tmp_path, monkeypatch, connect_calls):
    clock = FakeClock(monkeypatch)
    path = str(tmp_path / "later.sock")
    c = edgemon.Client(path)
    try:
        assert connect_calls == [path]  # the constructor's attempt
        for _ in range(1000):
            c.record("a", 1, 2)
        clock.advance(0.999)
        c.record("a", 1, 2)
        assert len(connect_calls) == 1
        clock.advance(0.002)
        c.record("a", 1, 2)
        assert len(connect_calls) == 2
        assert drops(c)["no_agent"] == 1002 and c.sent == 0

        r = Receiver(path)  # the agent starts
        try:
            c.record("a", 1, 2)  # not due yet: still dropped, no connect
            assert len(connect_calls) == 2 and c.sent == 0
            clock.advance(1.0)
            c.record("found", 1, 2)
            assert len(connect_calls) == 3 and c.sent == 1 and c.connected
            assert r.recv()["stage"] == "found"
        finally:
            r.close()
    finally:
        c.close()


def test_absent_agent_found_in_real_time_without_faked_clock(tmp_path, connect_calls):
    path = str(tmp_path / "late.sock")
    c = edgemon.Client(path)
    r = None
    try:
        started = time.monotonic()
        while time.monotonic() - started < 0.3:
            c.record("a", 1, 2)
        elapsed = time.monotonic() - started
        assert len(connect_calls) <= 1 + int(elapsed) + 1
        r = Receiver(path)
        deadline = time.monotonic() + 5.0
        while c.sent == 0 and time.monotonic() < deadline:
            c.record("late", 1, 2)
            time.sleep(0.01)
        assert c.sent == 1
        assert r.recv()["stage"] == "late"
        assert len(connect_calls) <= 2 + int(time.monotonic() - started)
    finally:
        c.close()
        if r is not None:
            r.close()


def test_agent_restart_reconnects_and_resends_when_due(tmp_path, monkeypatch, connect_calls):
    clock = FakeClock(monkeypatch)
    path = str(tmp_path / "restart.sock")
    r = Receiver(path)
    c = edgemon.Client(path)
    try:
        c.record("before", 1, 2)
        assert r.recv()["stage"] == "before"
        r.close()  # the agent stops: its socket file goes away
        r = Receiver(path)  # and comes back at the same path
        clock.advance(1.5)
        c.record("after", 1, 2)  # old peer gone: reconnect (due) and resend, nothing lost
        assert r.recv()["stage"] == "after"
        assert c.sent == 2 and c.dropped == 0 and len(connect_calls) == 2

        r.close()
        r = Receiver(path)
        clock.advance(0.5)  # a restart less than a second after the last connect
        c.record("lost", 1, 2)
        assert drops(c)["no_agent"] == 1 and len(connect_calls) == 2
        clock.advance(0.6)
        c.record("back", 1, 2)
        assert r.recv()["stage"] == "back"
        assert c.sent == 3 and len(connect_calls) == 3
    finally:
        c.close()
        r.close()


def test_agent_gone_leaving_a_stale_socket_file(tmp_path):
    path = str(tmp_path / "stale.sock")
    r = Receiver(path)
    c = edgemon.Client(path)
    try:
        r.close(unlink=False)  # the file stays, nobody is bound: ECONNREFUSED
        for _ in range(3):
            with c.span("x"):
                pass
        assert c.sent == 0 and drops(c)["no_agent"] == 3
    finally:
        c.close()


def test_receiver_not_reading_never_blocks_and_counts_queue_full(client, receiver):
    attempted = 10000
    started = time.monotonic()
    for i in range(attempted):
        with client.span("burst", frame=i):
            pass
    elapsed = time.monotonic() - started
    assert elapsed < 10.0  # never blocked: a blocked send would hang here (typically ~20 ms)
    stats = client.stats()
    assert stats["dropped"]["queue_full"] > 0
    assert stats["dropped"]["no_agent"] == 0 and stats["dropped"]["other"] == 0
    assert stats["sent"] + client.dropped == attempted
    queued = receiver.drain()
    assert len(queued) == stats["sent"]
    assert all(d["stage"] == "burst" for d in queued)
    frames = [d["frame"] for d in queued]
    assert frames == sorted(frames) and frames[0] == 0
    client.record("after.burst", 1, 2)  # the queue drained: sends get through again
    assert receiver.recv()["stage"] == "after.burst"


@pytest.mark.parametrize(
    "make_name",
    [
        lambda tag: "",
        lambda tag: "x" * 32 + tag,
        lambda tag: "has space " + tag,
        lambda tag: "slash/" + tag,
        lambda tag: "newline." + tag + "\n",
        lambda tag: "\u00e9t\u00e9." + tag,
        lambda tag: ("nul\0" + tag),
        lambda tag: 42,
        lambda tag: None,
        lambda tag: ["unhashable", tag],
    ],
    ids=["empty", "32-bytes", "space", "slash", "trailing-newline", "non-ascii", "nul",
         "int", "none", "list"],
)
def test_invalid_stage_is_dropped_counted_and_warned_once(client, receiver, make_name):
    name = make_name(uuid.uuid4().hex[:8])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with client.span(name):
            pass
        with client.span(name):
            pass
        client.record(name, 1, 2)
        client.heartbeat(name)

        @client.span(name)
        def f():
            return 1

        assert f() == 1
    ours = [w for w in caught if "edgemon: stage name" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert ours[0].category is RuntimeWarning
    assert ours[0].filename == __file__  # points at the caller's line
    assert drops(client) == {"no_agent": 0, "queue_full": 0, "invalid_stage": 5, "other": 0}
    assert client.sent == 0
    assert receiver.drain() == []


def test_bad_numeric_fields_are_dropped_as_other_not_raised(client, receiver):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        client.record("ok", -1, 5)
        client.record("ok", 1, 2**64)
        client.record("ok", 1.5, 2)
        client.record("ok", 1, 2, frame="frame")
    assert drops(client)["other"] == 4 and client.sent == 0
    assert len([w for w in caught if "frame, start_ns or duration_ns" in str(w.message)]) == 1
    assert receiver.drain() == []


def test_unusable_socket_paths_never_raise(tmp_path):
    too_long = "/tmp/" + "x" * 200 + ".sock"
    stream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stream_path = str(tmp_path / "stream.sock")
    stream.bind(stream_path)
    stream.listen(1)
    try:
        for path in (too_long, stream_path, str(tmp_path)):
            c = edgemon.Client(path)
            try:
                with c.span("x"):
                    pass
                c.heartbeat("x")
                assert c.sent == 0 and c.dropped == 2
            finally:
                c.close()
    finally:
        stream.close()


def test_closed_client_drops_as_other(client, receiver):
    client.close()
    client.close()
    with client.span("closed"):
        pass
    client.record("closed", 1, 2)
    assert drops(client)["other"] == 2 and client.sent == 0
    assert receiver.drain() == []


def test_threads_share_a_client(client, receiver):
    threads_n, per_thread = 8, 200
    received = []
    stop = threading.Event()

    def drain():
        receiver.sock.settimeout(0.05)
        while True:
            try:
                received.append(decode_span(receiver.sock.recv(4096)))
            except socket.timeout:
                if stop.is_set():
                    received.extend(receiver.drain())
                    return

    def work(t):
        for i in range(per_thread):
            with client.span("t%d" % t, frame=t * 1000 + i):
                pass

    reader = threading.Thread(target=drain)
    reader.start()
    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads_n)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    reader.join()
    # Counters are best-effort under contention (documented); the datagrams are exact.
    assert 0 < len(received) <= threads_n * per_thread
    assert drops(client)["other"] == 0 and drops(client)["invalid_stage"] == 0
    for d in received:
        t = int(d["stage"][1:])
        assert t * 1000 <= d["frame"] < t * 1000 + per_thread
        assert d["pid"] == os.getpid()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_child_reconnects_with_its_own_pid(client, receiver):
    client.set_frame(77)
    with client.span("parent"):
        pass
    assert receiver.recv()["pid"] == os.getpid()
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running pytest's teardown
        code = 1
        try:
            before = client.stats()
            had_socket = client.connected
            with client.span("child"):
                pass
            after = client.stats()
            ok = (before["sent"] == 0 and not had_socket and after["sent"] == 1
                  and client.connect_attempts == 1 and client.frame == 77)
            os.write(wfd, b"ok" if ok else repr((before, had_socket, after)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(wfd)
    report = os.read(rfd, 4096)
    os.close(rfd)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert report == b"ok"
    got = receiver.recv()
    assert got["stage"] == "child" and got["pid"] == pid and got["frame"] == 77
    with client.span("parent.again"):  # the parent's socket is untouched by the child
        pass
    again = receiver.recv()
    assert again["stage"] == "parent.again" and again["pid"] == os.getpid()
    assert client.sent == 2


def test_send_errors_other_than_eagain_and_no_agent_count_as_other(client, receiver):
    def failing_send(data):
        raise OSError(errno.ENOBUFS, "No buffer space available")

    client._send = failing_send  # simulate the kernel refusing for another reason
    with client.span("x"):
        pass
    assert drops(client)["other"] == 1
