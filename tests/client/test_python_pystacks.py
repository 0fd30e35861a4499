"""Tests of the Python client's sampling for the agent's stack profiles
(firmware/client/python/edgemon/_pyprof.py).

The profile request page is written by the tests per WIRE.md "Profile request page v1"; the
Python stacks datagram the helper thread sends is received on a real AF_UNIX SOCK_DGRAM socket
and decoded with struct from WIRE.md "Python stacks datagram v2", independently of the client.

Run with: /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/client
"""

import os
import socket
import struct
import sys
import threading
import time

import client_tests  # noqa: F401  (first: puts the package on sys.path)

import edgemon  # noqa: E402
from edgemon import _pyprof  # noqa: E402

PAGE = struct.Struct("<4sHHIIQQ32s")
HEAD = struct.Struct("<2sBBIIIHHI8s")
SAMPLE = struct.Struct("<IQH")


def write_page(path, window, hz, start_ns, end_ns):
    path.write_bytes(PAGE.pack(b"EMPR", 1, 64, window, hz, start_ns, end_ns, b""))


def decode(buf):
    """The datagram as (header fields, strings, samples), every length checked."""
    magic, ver, kind, pid, window, cut, n_str, n_smp, str_bytes, res = HEAD.unpack_from(buf)
    assert (magic, ver, kind, res) == (b"EM", 2, 8, bytes(8))
    off, strings = HEAD.size, []
    for _ in range(n_str):
        n = buf[off]
        strings.append(buf[off + 1:off + 1 + n].decode("utf-8"))
        off += 1 + n
    assert off == HEAD.size + str_bytes
    samples = []
    for _ in range(n_smp):
        tid, t, depth = SAMPLE.unpack_from(buf, off)
        off += SAMPLE.size
        frames = struct.unpack_from("<%dH" % depth, buf, off)
        off += 2 * depth
        assert all(f < n_str for f in frames)
        samples.append((tid, t, [strings[f] for f in frames]))
    assert off == len(buf) <= 65507
    return {"pid": pid, "window": window, "cut": cut}, samples


def busy_spin(stop):
    while not stop.is_set():
        sum(range(1000))


def test_a_new_open_window_is_sampled_once_and_sent_as_one_datagram(tmp_path):
    sock_path = str(tmp_path / "spans.sock")
    agent = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    agent.bind(sock_path)
    agent.settimeout(5)
    stop = threading.Event()
    worker = threading.Thread(target=busy_spin, args=(stop,), name="busy")
    worker.start()
    try:
        page = tmp_path / "profile"
        ps = _pyprof.PyStacks(str(page), sock_path, environ={})
        now = time.monotonic_ns()
        ps.check(now)  # no page: nothing runs
        assert ps._thread is None
        write_page(page, 4, 500, now - 1000, now + 300_000_000)
        ps.check(time.monotonic_ns())
        first = ps._thread
        assert first is not None and first.name == "edgemon-pystacks"
        ps.check(time.monotonic_ns())  # the same window: no second helper
        assert ps._thread is first
        data = agent.recv(65536)
        head, samples = decode(data)
        assert head["window"] == 4 and head["cut"] == 0
        tids = {tid for tid, _, _ in samples}
        assert worker.native_id in tids and threading.get_native_id() in tids
        assert first.native_id not in tids  # the helper never samples itself
        busy = [frames for tid, _, frames in samples if tid == worker.native_id]
        # min(500, 99) Hz for 0.3 s: about 30 samples of the busy thread, never more than the
        # rate allows; fewer on a loaded machine (the helper needs the GIL and a CPU), so the
        # floor only says it sampled the thread again and again, not how often (a benchmark's).
        assert 3 <= len(busy) <= 40, len(busy)
        # The thread is inside busy_spin, or in the Event.is_set it calls: its innermost frame
        # of this file is busy_spin, with its file and line.
        for frames in busy:
            ours = [f for f in frames if "test_python_pystacks.py" in f]
            assert ours and ours[-1].startswith("busy_spin (") and ours[-1].endswith(")"), frames
            assert frames.index(ours[-1]) >= len(frames) - 2, frames
        assert all(t1 <= t2 for (_, t1, _), (_, t2, _) in zip(samples, samples[1:]))
        first.join(2)
        assert ps.stats()["sent"] == 1 and ps.stats()["windows"] == 1
        assert not ps.stats()["running"]
        # A closed window (now past its end) starts nothing.
        write_page(page, 5, 99, now - 2000, now - 1000)
        ps.check(time.monotonic_ns())
        assert ps._thread is first and ps.stats()["windows"] == 1
    finally:
        stop.set()
        worker.join()
        agent.close()


def test_sampling_off_or_a_bad_page_starts_nothing(tmp_path):
    page = tmp_path / "profile"
    now = time.monotonic_ns()
    write_page(page, 1, 99, now, now + 10**9)
    off = _pyprof.PyStacks(str(page), str(tmp_path / "s"), environ={"EDGEMON_PYTHON_STACKS": "0"})
    off.check(now + 1)
    assert off._thread is None and not off.stats()["enabled"]
    page.write_bytes(PAGE.pack(b"EMPR", 1, 64, 1, 0, now, now + 10**9, b""))  # hz 0
    on = _pyprof.PyStacks(str(page), str(tmp_path / "s"), environ={})
    on.check(now + 1)
    assert on._thread is None
    page.write_bytes(b"EMPR")  # short
    on.check(now + 1)
    assert on._thread is None


def test_a_datagram_that_would_not_fit_keeps_the_samples_nearest_the_middle():
    strings = [("f%d (/app/m.py:%d)" % (i, i)).encode() for i in range(300)]
    # 2000 samples 1 ms apart, each 200 frames deep: ~414 bytes each, far over 65507 in all.
    samples = [(7, 1_000_000 * i, [(i + k) % 300 for k in range(200)]) for i in range(2000)]
    data = _pyprof.pack(42, 9, strings, samples, 3, 1_000_000 * 1000)
    head, got = decode(data)
    assert len(data) <= 65507
    kept = [t // 1_000_000 for _, t, _ in got]
    assert head["cut"] == 3 + 2000 - len(kept) and len(kept) > 100
    # The kept ones are a run around sample 1000, in time order.
    assert kept == list(range(kept[0], kept[0] + len(kept)))
    assert kept[0] <= 1000 <= kept[-1]
    assert abs((kept[0] + kept[-1]) / 2 - 1000) <= 1


def test_frame_texts_are_bounded_utf8_without_control_characters():
    code = compile("def f():\n pass\n", "/app/\u00fc\n" + "x" * 300 + ".py", "exec").co_consts[0]
    raw = _pyprof.frame_text(code, 2)
    assert len(raw) <= 255
    text = raw.decode("utf-8")  # cut at a character boundary
    assert text.startswith("f (/app/\u00fc?x")
    assert not any(ord(c) < 0x20 for c in text)


class Spinner(object):
    def spin(self, stop):
        while not stop.is_set():
            sum(range(1000))

    @staticmethod
    def here():
        return sys._getframe()

    @classmethod
    def here_cls(cls):
        return sys._getframe()

    @property
    def here_prop(self):
        return sys._getframe()


class SubSpinner(Spinner):
    pass


def here_outer():
    def inner():
        return sys._getframe()
    return inner()


def test_frame_names_without_co_qualname_are_found_from_the_module_classes(monkeypatch):
    # Python < 3.11 (JetPack 5's 3.8) has no co_qualname: the helper finds a method's class.
    monkeypatch.setattr(_pyprof, "HAS_CO_QUALNAME", False)
    names = {}
    sub = SubSpinner()
    assert _pyprof.frame_name(sub.here_prop, names) == "Spinner.here_prop"  # the defining class
    assert _pyprof.frame_name(SubSpinner.here(), names) == "Spinner.here"
    assert _pyprof.frame_name(SubSpinner.here_cls(), names) == "Spinner.here_cls"
    assert _pyprof.frame_name(sys._getframe(), names) == (
        "test_frame_names_without_co_qualname_are_found_from_the_module_classes")
    # A nested function's class-free qualified name is not in any dictionary: co_name.
    assert _pyprof.frame_name(here_outer(), names) == "inner"
    # One lookup per code object: a cached name is used as it is.
    frame = Spinner.here()
    names[frame.f_code] = "cached"
    assert _pyprof.frame_name(frame, names) == "cached"
    # A module dictionary with a class whose attributes raise is passed over, not fatal.
    class Hostile(type):
        @property
        def __dict__(cls):
            raise RuntimeError("no")
    bad = {"__name__": "m", "H": Hostile("H", (), {}), "S": Spinner}
    assert _pyprof._class_qualname(Spinner.here.__code__, bad) == "Spinner.here"


def test_the_sampler_sends_qualified_method_names_without_co_qualname(tmp_path, monkeypatch):
    monkeypatch.setattr(_pyprof, "HAS_CO_QUALNAME", False)
    sock_path = str(tmp_path / "spans.sock")
    agent = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    agent.bind(sock_path)
    agent.settimeout(5)
    stop = threading.Event()
    worker = threading.Thread(target=SubSpinner().spin, args=(stop,), name="spinner")
    worker.start()
    try:
        page = tmp_path / "profile"
        now = time.monotonic_ns()
        write_page(page, 6, 99, now - 1000, now + 150_000_000)
        ps = _pyprof.PyStacks(str(page), sock_path, environ={})
        ps.check(time.monotonic_ns())
        _, samples = decode(agent.recv(65536))
        # The spinner's innermost frame in this file (a sample may find it in Event.is_set).
        spins = [[f for f in frames if "test_python_pystacks.py" in f][-1]
                 for tid, _, frames in samples if tid == worker.native_id]
        assert spins and all(f.startswith("Spinner.spin (") for f in spins), spins[:3]
        ps._thread.join(2)
    finally:
        stop.set()
        worker.join()
        agent.close()



def stage_work(until_ns):
    """A stage's own function: about a millisecond of pure-Python work."""
    s = 0
    while time.monotonic_ns() < until_ns:
        s += 1
    return s


def short_stage_pipeline(client, stop, calls):
    """A 100 fps loop of one ~1 ms stage (stage_work, in `with client.span`) and a sleep, as
    the demo's inference loop: the thread holds the GIL only inside the stage. calls gets
    (span start, span end) of every stage."""
    while not stop.is_set():
        t0 = time.monotonic_ns()
        with client.span("infer"):
            stage_work(time.monotonic_ns() + 1_000_000)
        calls.append((t0, time.monotonic_ns()))
        time.sleep(0.009)


def test_a_window_samples_inside_short_stages_and_a_span_outside_one_is_unchanged(tmp_path):
    # The page's 99 Hz (the agent's default) gives the helper one sample per 10 ms, mostly in
    # the pipeline's sleep; each span of the window adds one sample of its own thread, taken
    # when the block calls stage_work.
    sock_path = str(tmp_path / "spans.sock")
    agent = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    agent.bind(sock_path)
    agent.settimeout(5)
    client = edgemon.Client(sock_path, state_path=str(tmp_path / "state"))
    plain = (edgemon.span.__enter__, edgemon.span.__exit__)
    stop = threading.Event()
    calls = []
    worker = threading.Thread(target=short_stage_pipeline, args=(client, stop, calls))
    worker.start()
    try:
        time.sleep(0.1)
        assert (edgemon.span.__enter__, edgemon.span.__exit__) == plain  # no window
        assert sys.getprofile() is None
        now = time.monotonic_ns()
        write_page(tmp_path / "profile", 3, 99, now - 1000, now + 1_000_000_000)
        client._pyprof.check(time.monotonic_ns())
        helper = client._pyprof._thread
        assert helper is not None
        time.sleep(0.2)
        assert edgemon.span.__enter__ is not plain[0]  # the window's: one sample per span
        while True:
            data = agent.recv(65536)
            if len(data) > 4 and data[3] == _pyprof.KIND_PYSTACKS:
                break
        helper.join(2)
        stop.set()
        worker.join()
        head, samples = decode(data)
        assert head["window"] == 3 and head["cut"] == 0
        mine = [(t, frames) for tid, t, frames in samples if tid == worker.native_id]
        assert all(t1 <= t2 for (_, t1, _), (_, t2, _) in zip(samples, samples[1:]))
        in_window = [(a, b) for a, b in calls if now + 100_000_000 <= a and b <= now + 900_000_000]
        named, missed = 0, []
        for a, b in in_window:
            hit = any(a <= t <= b and frames[-1].startswith("stage_work (")
                      and frames[-2].startswith("short_stage_pipeline (") for t, frames in mine)
            named += hit
            if not hit:
                missed.append([(t - a, frames[-2:]) for t, frames in mine if a - 2e6 <= t <= b + 2e6])
        # About 80 stages in the window's middle 0.8 s (fewer on a loaded machine): every one
        # holds a sample of its thread named stage_work, under the loop that called it.
        assert len(in_window) >= 20, len(in_window)
        assert named == len(in_window), (named, len(in_window), missed[:3])
        assert client._pyprof.stats()["span_samples"] >= len(in_window)
        # Once the window has ended, spans are the plain ones again and no hook is left.
        assert (edgemon.span.__enter__, edgemon.span.__exit__) == plain
        with client.span("after"):
            stage_work(0)
        assert client._pyprof.stats()["span_samples"] < len(calls)
    finally:
        stop.set()
        worker.join()
        client.close()
        agent.close()


def test_a_span_sample_leaves_an_installed_profiler_alone_and_its_hook_goes_at_exit(tmp_path):
    ps = _pyprof.PyStacks(str(tmp_path / "profile"), str(tmp_path / "s"), environ={})
    seen = []

    def profiler(frame, event, arg):
        seen.append(event)

    ps.span_started()  # no window of this client (another one's opened the spans): nothing
    assert sys.getprofile() is None
    ps._spans_on = True  # as its helper sets while its window is open
    sys.setprofile(profiler)
    try:
        ps.span_started()
        assert sys.getprofile() is profiler  # cProfile and the like keep theirs
    finally:
        sys.setprofile(None)
    client = edgemon.Client(str(tmp_path / "s"))
    s = edgemon.span("x", client=client)
    s.__enter__()
    ps.span_started()
    assert sys.getprofile() is ps.hook
    len(seen)  # a call into C: no sample
    s.__exit__(None, None, None)  # the block called no Python function: gone without a sample
    assert sys.getprofile() is None and ps._marks == []
    ps.span_started()
    stage_work(0)
    assert sys.getprofile() is None  # gone after the first call
    (tid, t, frames), = ps._marks
    assert tid == threading.get_native_id() and frames[0][0] is stage_work.__code__
    assert frames[1][0] is test_a_span_sample_leaves_an_installed_profiler_alone_and_its_hook_goes_at_exit.__code__
    client.close()


def test_a_child_forked_in_a_window_has_the_plain_spans(tmp_path):
    plain = edgemon.span.__enter__
    client = edgemon.Client(str(tmp_path / "s"))
    _pyprof._window_changed(1)  # as a helper does when its window opens
    try:
        assert edgemon.span.__enter__ is not plain
        pid = os.fork()
        if pid == 0:  # the child: no helper, so no window and no span samples
            os._exit(0 if edgemon.span.__enter__ is plain and _pyprof._windows_open == 0 else 1)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        assert edgemon.span.__enter__ is not plain  # the parent's window goes on
    finally:
        _pyprof._window_changed(-1)
        client.close()
    assert edgemon.span.__enter__ is plain
