"""GPU spans: the GPU time of a span's block, from a pair of timing events never waited for.

`with edgemon.span("infer", gpu=True):` records a timing event on the current CUDA stream when
the block starts and another when it ends (torch.cuda.Event(enable_timing=True), or the event
class a Client was given). The CPU span goes out as always. The pair is kept pending in the
thread's pool, and each later GPU span of that thread (its enter and its exit), or poll(),
looks at the pending pairs, oldest first, with event.query(), which never waits: a pair whose
end event completed is resolved with start.elapsed_time(end) (ms) and sent as its own stage,
"<stage>.gpu", with the frame id of the span that recorded it and the CPU span's start as its
start. The first pair whose end has not completed ends the look (on one stream the events
complete in the order they were recorded). Nothing here synchronises: no synchronize(), no
event.synchronize(), no wait().

What the time means: the GPU time between the two events on the stream: the block's own GPU
work, from the moment the stream reached the start event (after the work queued before it)
until it reached the end event. The start anchor is the CPU span's start: the GPU cannot begin
the block's work earlier. The real start is later by however long the stream was busy with
earlier work, which the CPU side cannot see without waiting.

What it owns: per Client, a GpuTimer with counters and a threading.local holding each thread's
Pool: at most POOL_PAIRS event pairs, made on first use and reused, and a FIFO of the pending
ones. When a span finds every pair pending (the GPU is POOL_PAIRS spans behind), the oldest
pending pair is dropped, counted as 'dropped', and reused. A pair whose record() raised (an
event of another device than the current stream's, say) is not reused: a new one is made. A thread's pending pairs that no
later span of that thread looks at are never sent (poll() at the end of a loop sends the ones
that completed). Counters are plain ints updated without a lock, like the client's others.

torch is imported on the first gpu=True span only (resolve()), once per process. Without torch
or without a CUDA device, GPU spans are plain spans: one RuntimeWarning says why, once per
process, and a gpu=True span then costs one check.
"""

import collections
import threading

from ._wire import stage_bytes, warn_at_caller

POOL_PAIRS = 16  # event pairs per thread; the oldest pending pair is dropped past this
GPU_SUFFIX = ".gpu"

_resolved = None  # (factory, reason) once resolve() ran: the torch event factory or None
_resolve_lock = threading.Lock()


def torch_event_factory():
    """(make, None) when torch is importable and torch.cuda.is_available(): make() returns a
    torch.cuda.Event(enable_timing=True). Else (None, why GPU spans are off)."""
    try:
        import torch  # noqa: PLC0415 (lazily: torch takes seconds to import)
    except Exception as exc:  # ImportError, or a broken installation raising anything
        return None, "torch cannot be imported (%s: %s)" % (type(exc).__name__, exc)
    try:
        available = torch.cuda.is_available()
    except Exception as exc:
        return None, "torch.cuda.is_available() failed (%s: %s)" % (type(exc).__name__, exc)
    if not available:
        return None, "torch.cuda.is_available() is False (no CUDA device or driver)"
    event = torch.cuda.Event

    def make():
        return event(enable_timing=True)
    return make, None


def resolve():
    """The process's event factory for gpu=True spans, looked up once: (make, None), or
    (None, reason) after one RuntimeWarning at the caller saying why GPU spans are off."""
    global _resolved
    with _resolve_lock:
        if _resolved is None:
            _resolved = torch_event_factory()
            if _resolved[0] is None:
                warn_at_caller("edgemon: gpu=True spans time the CPU side only: " +
                               _resolved[1])
        return _resolved


def off_reason():
    """Why gpu=True spans are off in this process (after resolve() found no GPU), or None."""
    resolved = _resolved
    return None if resolved is None else resolved[1]


class Pool(object):
    """One thread's event pairs: `free` pairs ready to record, `pending` entries
    [start, end, stage_b, frame, start_ns] oldest first, `made` pairs made so far."""

    __slots__ = ("free", "pending", "made")

    def __init__(self):
        self.free = []
        self.pending = collections.deque()
        self.made = 0


class GpuTimer(object):
    """The GPU side of one Client's gpu=True spans (see the module's comment).

    make: a callable returning a timing event with record() (on the current stream), query()
        (True once completed, never waiting) and elapsed_time(end) (ms), as torch.cuda.Event.
    pairs: event pairs per thread.
    """

    __slots__ = ("make", "pairs", "tls", "counts", "names")

    def __init__(self, make, pairs=POOL_PAIRS):
        self.make = make
        self.pairs = pairs
        self.tls = threading.local()
        self.counts = {"recorded": 0, "resolved": 0, "dropped": 0, "failed": 0}
        self.names = {}  # stage bytes -> "<stage>.gpu" bytes (None when too long)

    def _pool(self):
        try:
            return self.tls.pool
        except AttributeError:
            pool = self.tls.pool = Pool()
            return pool

    def begin(self, client, stage_b):
        """A GPU span starts in this thread: resolve what completed, then record the start event
        of a pair. Returns (start, end, "<stage>.gpu" bytes) for end(), or None when nothing is
        measured (an invalid name, a name too long for ".gpu", an event call that failed).
        Never raises, never waits."""
        gpu_b = self.names.get(stage_b, False)
        if gpu_b is False:
            gpu_b = self._gpu_name(stage_b)
        if gpu_b is None:
            return None
        pool = self._pool()
        if pool.pending:
            self.poll(client, pool)
        if pool.free:
            start, end = pool.free.pop()
        elif pool.made < self.pairs:
            try:
                start, end = self.make(), self.make()
            except Exception:
                self.counts["failed"] += 1
                return None
            pool.made += 1
        else:  # every pair pending: the GPU is that far behind; the oldest is given up
            start, end = pool.pending.popleft()[:2]
            self.counts["dropped"] += 1
        try:
            start.record()
        except Exception:  # (another device than the pair's, say): the pair is made anew
            pool.made -= 1
            self.counts["failed"] += 1
            return None
        return (start, end, gpu_b)

    def end(self, client, entry, frame, start_ns):
        """The span that began `entry` ends: record its end event, queue it, and resolve what
        completed (the new pair included, when the GPU is idle). Never raises, never waits."""
        pool = self._pool()
        start, end, gpu_b = entry
        try:
            end.record()
        except Exception:
            pool.made -= 1
            self.counts["failed"] += 1
            return
        self.counts["recorded"] += 1
        pool.pending.append((start, end, gpu_b, frame, start_ns))
        self.poll(client, pool)

    def _gpu_name(self, stage_b):
        if stage_b is None:  # an invalid name, already warned about
            return None
        name = stage_bytes(stage_b.decode("ascii") + GPU_SUFFIX)  # warns once when too long
        if len(self.names) < 1024:
            self.names[stage_b] = name
        return name

    def poll(self, client, pool=None):
        """Sends every pending pair of this thread whose end event completed, oldest first,
        up to the first that has not. Returns how many were sent. Never waits."""
        if pool is None:
            pool = self._pool()
        pending = pool.pending
        sent = 0
        while pending:
            start, end, gpu_b, frame, start_ns = pending[0]
            try:
                if not end.query():
                    break
                ms = start.elapsed_time(end)
            except Exception:  # the start on another stream, still running; or a driver error
                try:
                    if not start.query():
                        break
                except Exception:
                    pass
                pending.popleft()
                pool.free.append((start, end))
                self.counts["failed"] += 1
                continue
            pending.popleft()
            pool.free.append((start, end))
            self.counts["resolved"] += 1
            sent += 1
            client.record(gpu_b, start_ns, max(0, int(round(ms * 1e6))), frame)
        return sent

    def pending(self):
        """Pairs pending in this thread."""
        return len(self._pool().pending)

    def stats(self):
        out = dict(self.counts)
        out["pending"] = self.pending()
        return out

    def reset_in_child(self):
        """After fork: the parent's events are not the child's (CUDA does not survive fork)."""
        self.tls = threading.local()
