"""The client's half of the agent's stack profiles: Python frames for a profile window.

The agent samples the process's native stacks (perf_event_open) when it opens a profile window
and writes a profile request page (WIRE.md "Profile request page v1", the file "profile" in
its runtime directory). Python 3.11 has no perf trampoline, so native stacks show only the
interpreter's eval loop; this module supplies the Python side. On the client's agent check
(once a second, and at the first span after the client reads a new state record: an
escalation opens its window in the same tick that changes the level), PyStacks.check() reads
the page; when a window is open (start <= now < end) and
it is not the last one seen, it starts ONE daemon helper thread for that window only. The
helper samples sys._current_frames() at min(hz, 99) Hz until the window's end (skipping
itself), each sample (native thread id, time.monotonic_ns(), frames root first as indices into
a table of "function (file:line)" texts), then sends them once as a Python stacks datagram v2
(WIRE.md, kind 8) from its own socket to the span socket, and ends. Nothing runs while no
window is open.

Bounded: at most MAX_SAMPLES samples and MAX_STRINGS frame texts are kept per window (the rest
counted as cut); the datagram holds at most 65507 bytes, keeping the samples nearest the
window's middle. Standard library only. Set EDGEMON_PYTHON_STACKS=0 to turn the sampling off.

Short stages: the agent gives a native sample the Python frames of a Python sample of the same
thread taken in the same stage (span) within two periods. The helper alone seldom has one for a
stage of about 1 ms: it samples at 99 Hz, and it needs the GIL, which the stage's thread hands
over only after the switch interval (5 ms) or when it blocks, that is mostly between stages
(the demo's profile had Python frames in 3 of 33 samples). So while a window is open each span
records one sample in its own thread: span.__enter__ is swapped, for the window only, for one
that installs a one-shot profile hook (sys.setprofile) in the span's thread; the first Python
function the block calls (the stage's own: `with span("infer"): infer(x)`) fires it, and it
records the thread's stack at that time, that function included, and removes itself. When the
first call is the span's __exit__ (the block called no Python function) it removes itself
without a sample. A thread with a profile function of its own (cProfile) is left alone.

Cost and bounds: outside a window a span costs what it did (the plain __enter__; bench
span.nosend 652 ns before, 648 after). Inside one, a span whose block calls a function costs
about 3.4 us more (a frame walk; 4.5 against 1.1 us measured), one calling none 0.8 us more;
while installed (from the span's start to its first Python call) the hook also sees the
block's calls into C. At most MAX_MARKS span samples a window (the rest counted as cut). The
sample is the stack at the stage's first call: what the stage calls later is named by the
helper's samples, which stay the nearest for stages longer than a few ms. Rejected: sampling
from the helper at a higher rate, or waking it at span starts, depends on the scheduler and
the GIL handing it the CPU within the stage (it did for about one stage in five on a loaded
two-core machine); a trace or profile hook kept for the whole window slows every bytecode of
the thread two- to threefold, distorting the breach being profiled. Spans sent with record()
are timed after the fact: only the helper's samples serve them.
"""

import os
import socket
import struct
import sys
import threading
import time

from ._page import open_page

PAGE_NAME = "profile"
PAGE = struct.Struct("<4sHHIIQQ32s")
HEAD = struct.Struct("<2sBBIIIHHI8s")
SAMPLE_HEAD = struct.Struct("<IQH")
KIND_PYSTACKS = 8
VERSION = 2
MAX_BYTES = 65507
MAX_STRINGS = 4096
MAX_TEXT = 255
MAX_DEPTH = 256
MAX_SAMPLES = 20000
MAX_HZ = 99
MAX_MARKS = 4096  # span samples kept per window (the datagram holds about 2000 samples)

_windows_lock = threading.Lock()
_windows_open = 0  # helpers running, in every PyStacks of the process
_on_windows = None  # called with True when the first window opens, False when the last ends
_span_exit_codes = ()  # the codes of the spans' __exit__: a call of one ends the span, no sample
_installing = ()  # codes of the frames that install the hook: calls under them are not the block's


def set_window_hook(fn, exit_codes, enter_code):
    """fn(open) is called when the first helper of the process starts (True) and when the
    last one ends (False); _client swaps span.__enter__ with it. exit_codes: the code objects
    of the spans' __exit__ (plain and gpu=True), whose call removes the one-shot hook without
    a sample; enter_code: that
    of the window's span.__enter__, which installs it (a call under it, a finalizer the
    garbage collector runs there, is not the block's)."""
    global _on_windows, _span_exit_codes, _installing
    _on_windows = fn
    _span_exit_codes = tuple(exit_codes)
    _installing = (enter_code, PyStacks.span_started.__code__)


def _window_changed(step):
    global _windows_open
    with _windows_lock:
        _windows_open += step
        if _on_windows is not None and _windows_open == (1 if step > 0 else 0):
            _on_windows(step > 0)


def read_page(path):
    """The request page at path as (window, hz, start_ns, end_ns), or None when there is none
    or it is not a valid v1 page (the same checks as em_profile_page_unpack). Opened with
    _page.open_page(): a FIFO or anything but a regular file there is refused without
    blocking (warned about once) and read as no page."""
    try:
        fd, _ = open_page(path, "profile request page")
    except (OSError, ValueError):
        return None
    try:
        raw = os.read(fd, PAGE.size + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(raw) != PAGE.size:
        return None
    magic, version, size, window, hz, start, end, reserved = PAGE.unpack(raw)
    if (magic != b"EMPR" or version != 1 or size != PAGE.size or not 1 <= hz <= 1000
            or end < start or any(reserved)):
        return None
    return window, hz, start, end


# Python 3.11+ gives code objects their qualified name. Before (3.8 to 3.10: JetPack 5's 3.8,
# Debian 11's 3.9), frame_name() finds it as described there.
HAS_CO_QUALNAME = hasattr((lambda: None).__code__, "co_qualname")


def _class_qualname(code, globals_):
    """The __qualname__ of the function whose code is code in a class named in the module
    dictionary globals_ (a method, static or class method, or property getter of a class at
    the module's top level), or None. Reads only the module's dictionary and its classes'
    dictionaries, never the frame's locals (that would keep another thread's locals alive)."""
    try:
        values = list(globals_.values())  # one C call: a snapshot under the GIL
    except (AttributeError, RuntimeError):
        return None
    for cls in values:
        try:
            if not isinstance(cls, type):
                continue
            attr = cls.__dict__.get(code.co_name)
            for func in (attr, getattr(attr, "__func__", None), getattr(attr, "fget", None)):
                if func is not None and getattr(func, "__code__", None) is code:
                    return func.__qualname__
        except Exception:  # a proxy whose __class__ or attributes raise: not this one
            continue
    return None


def frame_name(frame, cache):
    """The function name for a frame's text: co_qualname (3.11+); before, the qualified name
    of the method when the code belongs to a class at the top level of its module, else
    co_name. cache maps code objects to names already found (one lookup per code object)."""
    return code_name(frame.f_code, frame.f_globals, cache)


def code_name(code, globals_, cache):
    """frame_name() of a frame running code with the module dictionary globals_."""
    if HAS_CO_QUALNAME:
        return code.co_qualname
    name = cache.get(code)
    if name is None:
        name = cache[code] = _class_qualname(code, globals_) or code.co_name
    return name


def frame_text(code, lineno, name=None):
    """ "function (file:line)" as at most 255 bytes of UTF-8 without control characters;
    the function is name, else the code object's co_qualname or co_name."""
    if name is None:
        name = getattr(code, "co_qualname", None) or code.co_name
    text = "%s (%s:%s)" % (name, code.co_filename, lineno)
    text = "".join("?" if ord(c) < 0x20 or ord(c) == 0x7F else c for c in text)
    raw = text.encode("utf-8", "replace")
    if len(raw) > MAX_TEXT:
        raw = raw[:MAX_TEXT]
        while raw and raw[-1] & 0xC0 == 0x80:  # a cut character's continuation bytes
            raw = raw[:-1]
        if raw and raw[-1] >= 0xC0:  # its lead byte
            raw = raw[:-1]
    return raw or b"?"


def pack(pid, window, strings, samples, cut, mid_ns):
    """The datagram: the samples nearest mid_ns that fit in MAX_BYTES (the others counted in
    samples_cut), in time order; strings not used by a kept sample are left out."""
    order = sorted(range(len(samples)), key=lambda i: abs(samples[i][1] - mid_ns))
    used = {}
    size = HEAD.size
    kept = []
    for i in order:
        frames = samples[i][2]
        new = [f for f in set(frames) if f not in used]
        need = SAMPLE_HEAD.size + 2 * len(frames) + sum(1 + len(strings[f]) for f in new)
        if size + need > MAX_BYTES:
            continue
        size += need
        for f in new:
            used[f] = None
        kept.append(i)
    cut += len(samples) - len(kept)
    kept.sort(key=lambda i: samples[i][1])
    index = {}
    table = []
    body = []
    for i in kept:
        tid, t, frames = samples[i]
        idx = []
        for f in frames:
            j = index.get(f)
            if j is None:
                j = index[f] = len(table)
                table.append(strings[f])
            idx.append(j)
        body.append(SAMPLE_HEAD.pack(tid, t, len(idx)) + struct.pack("<%dH" % len(idx), *idx))
    text = b"".join(bytes((len(s),)) + s for s in table)
    head = HEAD.pack(b"EM", VERSION, KIND_PYSTACKS, pid, window, min(cut, 0xFFFFFFFF),
                     len(table), len(kept), len(text), b"")
    return head + text + b"".join(body)


def after_fork_in_child():
    """The child has no helper: spans are the plain ones again (called by _client at fork)."""
    global _windows_lock, _windows_open
    _windows_lock = threading.Lock()  # a thread of the parent may have held it
    if _windows_open:
        _windows_open = 0
        if _on_windows is not None:
            _on_windows(False)


class PyStacks(object):
    """Starts the sampling helper for each new profile window; see the module docstring."""

    def __init__(self, page_path, socket_path, environ=None):
        env = os.environ if environ is None else environ
        self.enabled = env.get("EDGEMON_PYTHON_STACKS", "1") != "0"
        self.page_path = page_path
        self.socket_path = socket_path
        self._last = None  # (window, start_ns) of the last window sampled
        self._thread = None
        self._spans_on = False  # this helper counted in _windows_open
        self._marks_cut = 0  # spans past MAX_MARKS in the open window
        self._marks = []  # span samples of the open window: (tid, ns, [(code, line, globals)])
        self.hook = self._first_call  # one object, to tell whether it is installed
        self.counts = {"windows": 0, "samples": 0, "cut": 0, "sent": 0, "send_failed": 0,
                       "bytes": 0, "span_samples": 0}

    def span_started(self):
        """A span starts in this thread while a window is open: its first Python call records
        the stack (the hook), unless the thread has a profile function already."""
        if not self._spans_on or sys.getprofile() is not None:
            return  # another client's window, or a profiler of the application's
        if len(self._marks) < MAX_MARKS:
            sys.setprofile(self.hook)
        else:
            self._marks_cut += 1

    def reset_in_child(self):
        """After fork in the child: the parent's window and span samples are not its own."""
        self._spans_on = False
        self._marks = []

    def _first_call(self, frame, event, arg):
        """The one-shot profile hook: on the first Python call, the thread's stack, then gone
        (a call of span.__exit__: the block called no Python function, no sample). A call
        made while the client installs it (a finalizer run by the garbage collector there)
        is passed over."""
        if event != "call" or (frame.f_back is not None and frame.f_back.f_code in _installing):
            return
        sys.setprofile(None)
        if frame.f_code in _span_exit_codes:
            return
        now = time.monotonic_ns()
        stack = []
        while frame is not None and len(stack) < MAX_DEPTH:
            stack.append((frame.f_code, frame.f_lineno, frame.f_globals))
            frame = frame.f_back
        del frame
        self._marks.append((threading.get_native_id(), now, stack))

    def stats(self):
        out = dict(self.counts)
        out["enabled"] = self.enabled
        out["running"] = self._thread is not None and self._thread.is_alive()
        return out

    def check(self, now_ns):
        """Called on the client's agent check: one page read; a helper for a new open
        window. Never raises."""
        if not self.enabled:
            return
        page = read_page(self.page_path)
        if page is None:
            return
        window, hz, start, end = page
        key = (window, start)
        if key == self._last or not start <= now_ns < end:
            return
        if self._thread is not None and self._thread.is_alive():
            return  # the previous window's helper is still sending
        self._last = key
        self.counts["windows"] += 1
        self._thread = threading.Thread(target=self._run, args=(window, min(hz, MAX_HZ), start, end),
                                        name="edgemon-pystacks", daemon=True)
        self._thread.start()

    def _run(self, window, hz, start, end):
        self._marks = []
        self._marks_cut = 0
        self._spans_on = True
        _window_changed(1)
        try:
            self._sample_and_send(window, hz, start, end)
        except Exception:  # the helper never disturbs the application
            self.counts["send_failed"] += 1
        finally:
            self._spans_off()
            self._marks = []

    def _spans_off(self):
        if self._spans_on:
            self._spans_on = False
            _window_changed(-1)

    def _sample_and_send(self, window, hz, start, end):
        me = threading.get_ident()
        period = 1.0 / hz
        strings = []  # frame texts (bytes)
        ids = {}  # (code, lineno) -> string index
        names = {}  # code -> function name (Python < 3.11)
        samples = []  # (native tid, time ns, [string indices root first])
        cut = 0
        while True:
            now = time.monotonic_ns()
            if now >= end:
                break
            threads = threading._active  # ident -> Thread, for native ids
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                th = threads.get(ident)
                tid = getattr(th, "native_id", None) if th is not None else None
                if tid is None:
                    continue
                if len(samples) >= MAX_SAMPLES:
                    cut += 1
                    continue
                stack = []
                full = False
                while frame is not None and len(stack) < MAX_DEPTH:
                    key = (frame.f_code, frame.f_lineno)
                    i = ids.get(key)
                    if i is None:
                        if len(strings) >= MAX_STRINGS:
                            full = True
                            break
                        i = ids[key] = len(strings)
                        strings.append(frame_text(frame.f_code, frame.f_lineno,
                                                  frame_name(frame, names)))
                    stack.append(i)
                    frame = frame.f_back
                del frame
                if full or not stack:
                    cut += 1
                    continue
                stack.reverse()  # root first; past MAX_DEPTH the root side is what is missing
                samples.append((tid, now, stack))
            time.sleep(max(0.0, min(period, (end - time.monotonic_ns()) / 1e9)))
        self._spans_off()  # no more span samples: the spans are the plain ones again
        marks, self._marks = self._marks, []
        cut += self._marks_cut
        cut += self._add_marks(marks, samples, strings, ids, names)
        samples.sort(key=lambda s: s[1])
        self.counts["samples"] += len(samples)
        data = pack(os.getpid(), window, strings, samples, cut, (start + end) // 2)
        self.counts["cut"] += struct.unpack_from("<I", data, 12)[0]
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.settimeout(0.5)
            sock.sendto(data, self.socket_path)
            self.counts["sent"] += 1
            self.counts["bytes"] += len(data)
        except OSError:
            self.counts["send_failed"] += 1
        finally:
            sock.close()

    def _add_marks(self, marks, samples, strings, ids, names):
        """The span samples as samples (frame texts added to strings); returns how many were
        cut (no room for the sample or its frame texts)."""
        cut = 0
        self.counts["span_samples"] += len(marks)
        for tid, t, frames in marks:
            if len(samples) >= MAX_SAMPLES:
                cut += 1
                continue
            stack = []
            for code, line, globals_ in frames:
                i = ids.get((code, line))
                if i is None:
                    if len(strings) >= MAX_STRINGS:
                        break
                    i = ids[(code, line)] = len(strings)
                    strings.append(frame_text(code, line, code_name(code, globals_, names)))
                stack.append(i)
            if len(stack) != len(frames) or not stack:
                cut += 1
                continue
            stack.reverse()
            samples.append((tid, t, stack))
        return cut
