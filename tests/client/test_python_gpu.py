"""Tests of the Python client's GPU spans (`span(..., gpu=True)`, edgemon/_gpu.py), without a GPU.

FakeGpu below stands in for CUDA's timing events on a machine without a GPU: it is handed to
the client where torch.cuda.Event(enable_timing=True) would be (Client(gpu_event=...)), and
its events mirror torch's: record() (on the current stream), query() (True once completed,
never waiting), elapsed_time(end) (ms; raises while either is incomplete). They complete only
when the test says so, in the order they were recorded (one stream), each at a GPU time the
test gives. Their synchronize() and wait() only note that they were called: every test checks
that nothing ever waited.

The spans land in a real receiving socket (decoded with test_python_client's WIRE.md decoder)
or in a real span ring v2 registered with test_python_ring's peer.

Run with: /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/client
"""

import sys
import threading
import types
import warnings

import pytest

from client_tests import socket_peer  # first: puts the package on sys.path

import edgemon  # noqa: E402
from edgemon import _gpu, _pyprof  # noqa: E402
from test_python_client import Receiver  # noqa: E402  (beside this file)
from test_python_ring import Agent, write_deadline_page  # noqa: E402

receiver = socket_peer(Receiver)
agent = socket_peer(Agent)


class FakeGpu:
    """The test's side of the fake events: what was made, recorded, queried, waited for."""

    def __init__(self):
        self.made = 0
        self.queue = []  # recorded and not completed, in record order (one stream)
        self.queries = 0
        self.waits = []  # anything that would have blocked the CPU on the GPU
        self.fail_record = False

    def event(self):
        self.made += 1
        return FakeEvent(self)

    def complete(self, *times_ms):
        """Completes the oldest len(times_ms) recorded events, at those GPU times (ms)."""
        for t in times_ms:
            ev = self.queue.pop(0)
            ev.done_ms = t


class FakeEvent:
    """torch.cuda.Event's surface, for one FakeGpu."""

    def __init__(self, gpu):
        self.gpu = gpu
        self.done_ms = None
        self.recorded = False

    def record(self, stream=None):
        if self.gpu.fail_record:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        if self in self.gpu.queue:  # recorded again before it completed: the new one counts
            self.gpu.queue.remove(self)
        self.recorded = True
        self.done_ms = None
        self.gpu.queue.append(self)

    def query(self):
        self.gpu.queries += 1
        return self.done_ms is not None

    def elapsed_time(self, end):
        if self.done_ms is None or end.done_ms is None:
            raise RuntimeError("CUDA error: device not ready")
        return end.done_ms - self.done_ms

    def synchronize(self):
        self.gpu.waits.append("event.synchronize")

    def wait(self, stream=None):
        self.gpu.waits.append("event.wait")


@pytest.fixture
def gpu():
    return FakeGpu()


@pytest.fixture
def client(receiver, gpu):
    c = edgemon.Client(receiver.path, gpu_event=gpu.event)
    yield c
    c.close()
    assert gpu.waits == []  # nothing ever waited for the GPU


def spans_by_stage(got):
    out = {}
    for d in got:
        out.setdefault(d["stage"], []).append(d)
    return out


def test_gpu_time_lands_as_its_own_stage_with_the_recording_spans_frame_and_start(
        client, receiver, gpu):
    client.set_frame(41)
    with client.span("infer", gpu=True):
        assert [e.recorded for e in gpu.queue] == [True]  # the start event, inside the block
    client.set_frame(42)  # a new frame before the GPU finishes
    cpu = receiver.recv()
    assert (cpu["stage"], cpu["frame"]) == ("infer", 41)
    assert receiver.drain() == []  # the GPU has not finished: nothing sent, nothing waited
    assert client.gpu_stats()["pending"] == 1

    gpu.complete(100.0, 103.25)  # 3.25 ms of GPU time
    with client.span("post"):  # a plain span does not look at the GPU
        pass
    assert [d["stage"] for d in receiver.drain()] == ["post"]
    with client.span("infer", gpu=True):  # the next GPU span resolves the previous one
        pass
    got = spans_by_stage(receiver.drain())
    gpu_span = got["infer.gpu"][0]
    assert gpu_span["kind"] == 1 and gpu_span["frame"] == 41
    assert gpu_span["duration_ns"] == 3250000
    assert gpu_span["start_ns"] == cpu["start_ns"]  # anchored at the CPU span's start
    assert [d["frame"] for d in got["infer"]] == [42]
    stats = client.stats()["gpu"]
    assert stats == {"enabled": True, "recorded": 2, "resolved": 1, "dropped": 0, "failed": 0,
                     "pending": 1}


def test_a_pair_completed_by_the_end_of_its_span_is_sent_at_once(client, receiver, gpu):
    class Idle(FakeEvent):  # a GPU with nothing to do: events complete as they are recorded
        def record(self, stream=None):
            FakeEvent.record(self, stream)
            gpu.complete(7.0 + len(gpu.queue))

    client._gpu.make = lambda: Idle(gpu)
    with client.span("infer", gpu=True, frame=3):
        pass
    got = receiver.drain()
    assert [(d["stage"], d["frame"], d["duration_ns"]) for d in got] == [
        ("infer", 3, got[0]["duration_ns"]), ("infer.gpu", 3, 0)]
    assert client.gpu_stats()["pending"] == 0


def test_pending_pairs_resolve_oldest_first_up_to_the_first_incomplete(client, receiver, gpu):
    for frame in (1, 2, 3):
        with client.span("infer", gpu=True, frame=frame):
            pass
    receiver.drain()
    gpu.complete(0.0, 1.0, 5.0, 7.0)  # frames 1 and 2 done, 3 still running
    assert client.poll_gpu() == 2
    got = receiver.drain()
    assert [(d["stage"], d["frame"], d["duration_ns"]) for d in got] == [
        ("infer.gpu", 1, 1000000), ("infer.gpu", 2, 2000000)]
    assert client.poll_gpu() == 0 and receiver.drain() == []
    gpu.complete(10.0, 10.5)
    assert client.poll_gpu() == 1
    assert [(d["frame"], d["duration_ns"]) for d in receiver.drain()] == [(3, 500000)]
    assert client.gpu_stats()["pending"] == 0


def test_pool_drops_the_oldest_pending_pair_counts_it_and_reuses_events(client, receiver, gpu):
    pairs = _gpu.POOL_PAIRS
    for frame in range(1, pairs + 2):  # one more than the pool while the GPU is stalled
        with client.span("infer", gpu=True, frame=frame):
            pass
        receiver.drain()  # the socket queues 10 datagrams
    assert gpu.made == 2 * pairs  # never more events than the pool holds
    stats = client.gpu_stats()
    assert stats["dropped"] == 1 and stats["pending"] == pairs
    assert stats["recorded"] == pairs + 1
    got = []
    for i in range(pairs):  # each pair 1 ms, resolved in record order
        gpu.complete(2.0 * i, 2.0 * i + 1.0)
        assert client.poll_gpu() == 1
        got += receiver.drain()
    assert [d["frame"] for d in got] == list(range(2, pairs + 2))  # frame 1 was the oldest
    assert all(d["stage"] == "infer.gpu" and d["duration_ns"] == 1000000 for d in got)
    for frame in range(100, 140):  # a GPU that keeps up: the same events serve every span
        with client.span("infer", gpu=True, frame=frame):
            pass
        gpu.complete(0.0, 2.0)
        got += receiver.drain()
    client.poll_gpu()
    got += receiver.drain()
    assert gpu.made == 2 * pairs
    assert [d["frame"] for d in got if d["stage"] == "infer.gpu"][pairs:] == list(
        range(100, 140))
    assert client.gpu_stats()["dropped"] == 1
    assert client.stats()["dropped"]["queue_full"] == 0


def test_threads_keep_their_own_pending_pairs(client, receiver, gpu):
    def other_thread():
        with client.span("infer", gpu=True, frame=7):
            pass
    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    receiver.drain()
    gpu.complete(0.0, 4.0)
    assert client.poll_gpu() == 0  # this thread has none pending
    with client.span("infer", gpu=True, frame=8):
        pass
    assert [d["stage"] for d in receiver.drain()] == ["infer"]  # not the other thread's


def test_block_exception_propagates_and_the_pair_is_still_measured(client, receiver, gpu):
    with pytest.raises(KeyError):
        with client.span("infer", gpu=True, frame=5):
            raise KeyError("boom")
    gpu.complete(1.0, 2.5)
    assert client.poll_gpu() == 1
    got = receiver.drain()
    assert [(d["stage"], d["frame"]) for d in got] == [("infer", 5), ("infer.gpu", 5)]
    assert got[1]["duration_ns"] == 1500000


def test_decorator_form_measures_each_call(client, receiver, gpu):
    @client.span("infer", gpu=True)
    def infer(n):
        client.set_frame(n)
        return n * 2

    assert infer(1) == 2 and infer(2) == 4
    assert gpu.made == 4
    gpu.complete(0.0, 1.0, 1.0, 3.0)
    client.poll_gpu()
    got = [d for d in receiver.drain() if d["stage"] == "infer.gpu"]
    assert [(d["frame"], d["duration_ns"]) for d in got] == [(1, 1000000), (2, 2000000)]


def test_failing_event_counts_and_the_cpu_span_still_goes(client, receiver, gpu):
    gpu.fail_record = True
    with client.span("infer", gpu=True, frame=1):
        pass
    assert [d["stage"] for d in receiver.drain()] == ["infer"]
    assert client.gpu_stats()["failed"] == 1 and client.gpu_stats()["pending"] == 0
    made = gpu.made
    gpu.fail_record = False  # a pair whose record raised is made anew, not reused
    with client.span("infer", gpu=True, frame=2):
        pass
    assert gpu.made == made + 2
    gpu.complete(0.0, 1.0)
    assert client.poll_gpu() == 1
    assert [(d["stage"], d["frame"]) for d in receiver.drain()] == [("infer", 2),
                                                                    ("infer.gpu", 2)]


def test_stage_too_long_for_the_gpu_suffix_warns_and_times_the_cpu_only(client, receiver, gpu):
    name = "s" * 28  # valid, but "<name>.gpu" is 32 bytes
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with client.span(name, gpu=True):
            pass
    assert any(name + ".gpu" in str(w.message) for w in caught)
    assert [d["stage"] for d in receiver.drain()] == [name]
    assert gpu.made == 0


def test_gpu_stage_lands_in_a_live_ring_with_its_frame_and_duration(agent, tmp_path, gpu):
    write_deadline_page(tmp_path / "deadlines")
    c = edgemon.Client(agent.path, gpu_event=gpu.event)
    try:
        with c.span("pre"):  # the thread's first span registers its ring
            pass
        kind, reg = agent.recv()
        assert kind == "reg"
        agent.drain()
        agent.ack(reg)
        c.set_frame(77)
        with c.span("infer", gpu=True):
            pass
        c.set_frame(78)
        gpu.complete(20.0, 28.5)
        with c.span("infer", gpu=True):
            pass
        assert agent.drain() == []  # everything went to the ring
        slots = reg.slots(0, reg.header()["head"])
        cpu = [s for s in slots if s[4] == "infer"]
        gpu_slots = [s for s in slots if s[4] == "infer.gpu"]
        assert [s[1] for s in cpu] == [77, 78]
        assert gpu_slots == [(1, 77, cpu[0][2], 8500000, "infer.gpu")]
    finally:
        c.close()
    assert gpu.waits == []


def test_a_gpu_spans_exit_ends_a_profile_windows_hook_without_a_sample(
        client, tmp_path, gpu):
    # In a profile window each span's first Python call is sampled (_pyprof.py); a block that
    # calls none ends at the span's __exit__, which removes the hook with no sample. The GPU
    # span's __exit__ is another function: it must be known as a span's exit too.
    ps = _pyprof.PyStacks(str(tmp_path / "profile"), str(tmp_path / "s"), environ={})
    ps._spans_on = True  # as its helper sets while its window is open
    s = client.span("infer", gpu=True)
    s.__enter__()
    ps.span_started()
    assert sys.getprofile() is ps.hook
    s.__exit__(None, None, None)
    assert sys.getprofile() is None and ps._marks == []
    assert client.gpu_stats()["recorded"] == 1


# ---- Without CUDA: torch missing, or no device ----


@pytest.fixture
def fresh_resolve(monkeypatch):
    """Forgets the process's lookup of torch, so the test's sys.modules decides it."""
    monkeypatch.setattr(_gpu, "_resolved", None)


def test_without_torch_gpu_spans_are_plain_spans_and_say_so_once(
        receiver, monkeypatch, fresh_resolve):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a = edgemon.Client(receiver.path)
        b = edgemon.Client(receiver.path)
        try:
            for c in (a, b, a):
                s = c.span("infer", gpu=True)
                assert type(s) is edgemon.span  # nothing beyond the plain span
                with s:
                    pass
            assert a.poll_gpu() == 0
            stats = a.stats()["gpu"]
        finally:
            a.close()
            b.close()
    msgs = [str(w.message) for w in caught if "gpu=True" in str(w.message)]
    assert len(msgs) == 1 and "torch cannot be imported" in msgs[0]
    assert stats["enabled"] is False and "torch" in stats["reason"]
    assert [d["stage"] for d in receiver.drain()] == ["infer"] * 3


def test_torch_without_a_device_is_off_with_its_reason(receiver, monkeypatch, fresh_resolve):
    made = []
    cuda = types.SimpleNamespace(is_available=lambda: False,
                                 Event=lambda **kw: made.append(kw))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with edgemon.Client(receiver.path) as c:
            with c.span("infer", gpu=True):
                pass
            reason = c.gpu_stats()["reason"]
    assert "is_available() is False" in reason and made == []
    assert sum("gpu=True" in str(w.message) for w in caught) == 1


def test_torch_with_a_device_makes_timing_events_lazily(receiver, monkeypatch, fresh_resolve):
    fake = FakeGpu()
    kwargs = []

    def event(**kw):
        kwargs.append(kw)
        return fake.event()

    cuda = types.SimpleNamespace(is_available=lambda: True, Event=event)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    with edgemon.Client(receiver.path) as c:
        with c.span("plain"):
            pass
        assert _gpu._resolved is None  # torch is looked up on the first gpu=True span only
        with c.span("infer", gpu=True, frame=2):
            pass
        fake.complete(0.0, 0.75)
        assert c.poll_gpu() == 1
    assert kwargs == [{"enable_timing": True}] * 2
    got = receiver.drain()
    assert [(d["stage"], d["frame"]) for d in got] == [("plain", 0), ("infer", 2),
                                                       ("infer.gpu", 2)]
    assert got[2]["duration_ns"] == 750000 and fake.waits == []
