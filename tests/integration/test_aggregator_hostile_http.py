"""edgemon-aggregator's HTTP server against hostile clients on loopback: slowloris and idle
connections must not keep a normal client from /healthz and /metrics, a request head trickled
byte by byte is cut off at its deadline, and a flood of malformed requests leaves a bounded
number of libmicrohttpd lines on stderr with a count of what was held back.

Every attack runs from this process on 127.0.0.1, holds a bounded number of sockets for a
bounded time, and stops by itself; the waits below are hang guards, not timing assertions."""

import random
import re
import selectors
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import wait_for

# Together more than the server's whole connection table (http.c: HTTP_MAX_CONNS, 512), so
# the attack reaches its limit whatever RLIMIT_NOFILE allows.
SLOW_CONNS = 300    # partial request, then one header line every 1-4 s
IDLE_CONNS = 300    # connect, send nothing
ATTACK_S = 14       # how long the attack holds its connections
RECONNECT_S = 1.0   # a connection the server closed is reopened after this long
CLIENT_GUARD_S = 15 # a normal request must be answered within this (hang guard)
LOG_BURST = 20      # http.c: HTTP_LOG_BURST
LOG_REFILL_S = 6    # http.c: HTTP_LOG_REFILL_MS / 1000
HEAD_DEADLINE_S = 10  # http.c: HTTP_HEAD_DEADLINE_MS / 1000
MHD_LINE = "edgemon-aggregator: http: libmicrohttpd: "


class Attack:
    """One thread holding SLOW_CONNS slowloris and IDLE_CONNS idle connections to port, each
    reopened RECONNECT_S after the server closes it, until stop() or ATTACK_S have passed."""

    def __init__(self, port, slow=SLOW_CONNS, idle=IDLE_CONNS, duration=ATTACK_S):
        self.port = port
        self.kinds = ["slow"] * slow + ["idle"] * idle
        self.duration = duration
        self.closed_by_server = 0
        self.opened = 0
        self.ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._rng = random.Random(7)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "attack thread did not stop"

    def _open(self, sel, kind):
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=2)
        except OSError:
            return None
        s.setblocking(False)
        now = time.monotonic()
        state = {"kind": kind, "next": now + self._rng.uniform(1, 4), "n": 0}
        if kind == "slow":
            try:
                s.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            except OSError:
                pass
        sel.register(s, selectors.EVENT_READ, state)
        self.opened += 1
        return s

    def _run(self):
        sel = selectors.DefaultSelector()
        deadline = time.monotonic() + self.duration
        reopen = []  # (when, kind)
        try:
            for kind in self.kinds:
                if self._stop.is_set():
                    return
                self._open(sel, kind)
            self.ready.set()
            while not self._stop.is_set() and time.monotonic() < deadline:
                for key, _ in sel.select(timeout=0.2):
                    try:
                        data = key.fileobj.recv(4096)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if data:
                        continue  # an answer (e.g. 408): the server will close next
                    sel.unregister(key.fileobj)
                    key.fileobj.close()
                    self.closed_by_server += 1
                    reopen.append((time.monotonic() + RECONNECT_S, key.data["kind"]))
                now = time.monotonic()
                for key in list(sel.get_map().values()):
                    st = key.data
                    if st["kind"] == "slow" and now >= st["next"]:
                        st["n"] += 1
                        try:
                            key.fileobj.send(b"X-Slow-%d: %d\r\n" % (st["n"], st["n"]))
                        except OSError:
                            pass
                        st["next"] = now + self._rng.uniform(1, 4)
                due = [r for r in reopen if r[0] <= now]
                reopen = [r for r in reopen if r[0] > now]
                for _, kind in due:
                    self._open(sel, kind)
        finally:
            self.ready.set()
            for key in list(sel.get_map().values()):
                key.fileobj.close()
            sel.close()


def get(port, path, timeout=CLIENT_GUARD_S):
    """(status, body, seconds) of GET http://127.0.0.1:port/path; status None on a timeout or a
    refused/reset connection."""
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode(), time.monotonic() - t0
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), time.monotonic() - t0
    except (OSError, urllib.error.URLError) as e:
        return None, repr(e), time.monotonic() - t0


def metric(body, name):
    m = re.search(rf"^{name} (\S+)$", body, re.M)
    return float(m.group(1)) if m else None


def test_slowloris_and_idle_floods_leave_healthz_and_metrics_answered(stack):
    broker = stack.broker()
    agg = stack.aggregator(broker.port)
    answers = []
    with Attack(agg.port) as attack:
        assert attack.ready.wait(60), "attack did not open its connections"
        assert attack.opened >= SLOW_CONNS + IDLE_CONNS - 10, attack.opened
        # Rounds spread over the attack: while the first slow heads are young, and after their
        # deadline (when the attack has reopened what was closed).
        for _ in range(4):
            for path in ("/healthz", "/metrics"):
                status, body, took = get(agg.port, path)
                answers.append((path, status, took, body[:200] if status != 200 else ""))
            time.sleep(2)
        attack_closed = attack.closed_by_server
    assert all(a[1] == 200 for a in answers), answers
    print("normal client under attack (path, status, seconds):",
          [(p, s, round(t, 3)) for p, s, t, _ in answers])
    # The policy made room by closing attack connections, and says so.
    assert attack_closed > 0
    status, body, _ = get(agg.port, "/metrics")
    assert status == 200
    evicted = metric(body, "edgemon_aggregator_http_evicted_total")
    slow = metric(body, "edgemon_aggregator_http_slow_heads_total")
    assert evicted is not None and slow is not None, body[-2000:]
    assert evicted + slow > 0
    assert metric(body, "edgemon_aggregator_http_refused_total") == 0
    # Once the attack is gone every connection it left is closed again.
    wait_for(lambda: metric(get(agg.port, "/metrics")[1],
                            "edgemon_aggregator_http_connections") == 1,
             15, "the attack's connections to be closed")
    assert agg.stop() == 0


def test_request_head_trickled_byte_by_byte_is_cut_off_at_its_deadline(stack):
    broker = stack.broker()
    agg = stack.aggregator(broker.port)
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Trickle: " + b"a" * 200
    with socket.create_connection(("127.0.0.1", agg.port), timeout=2) as s:
        s.settimeout(0.5)
        t0 = time.monotonic()
        closed = False
        # A byte every 0.5 s is never idle for long, yet the head never ends: the server must
        # close it past its deadline. The guard is twice the deadline.
        for i in range(len(head)):
            if time.monotonic() - t0 > 2 * HEAD_DEADLINE_S:
                break
            try:
                s.send(head[i:i + 1])
                if s.recv(4096) == b"":
                    closed = True
                    break
            except socket.timeout:
                continue
            except OSError:
                closed = True
                break
    assert closed, "a request head trickled for 20 s was not cut off"
    status, body, _ = get(agg.port, "/metrics")
    assert status == 200
    assert metric(body, "edgemon_aggregator_http_slow_heads_total") >= 1
    assert agg.stop() == 0


MALFORMED = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nthis is no header\r\n\r\n"


def test_malformed_request_flood_writes_a_bounded_log_with_the_suppressed_count(stack):
    broker = stack.broker()
    agg = stack.aggregator(broker.port)
    n = 500
    t0 = time.monotonic()
    for _ in range(n):
        with socket.create_connection(("127.0.0.1", agg.port), timeout=5) as s:
            s.sendall(MALFORMED)
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
            assert reply.startswith(b"HTTP/1.1 400"), reply[:100]

    def mhd_lines():
        return [line for line in agg.log_text().splitlines() if line.startswith(MHD_LINE)]

    def suppressed(lines):
        return sum(int(m.group(1)) for line in lines
                   if (m := re.search(r"(\d+) more messages suppressed", line)))

    # The held-back count is written once a line may be written again.
    lines = wait_for(lambda: (ls := mhd_lines()) and suppressed(ls) > 0 and ls,
                     LOG_REFILL_S * 3, "the suppressed-messages line")
    elapsed = time.monotonic() - t0
    errors = [line for line in lines if "Error processing request" in line]
    assert len(lines) <= LOG_BURST + elapsed / LOG_REFILL_S + 1, (len(lines), elapsed)
    assert 0 < len(errors) <= LOG_BURST
    # Nothing is lost: written plus suppressed is every malformed request.
    assert len(errors) + suppressed(lines) == n, (len(errors), suppressed(lines))
    status, body, _ = get(agg.port, "/metrics")
    assert status == 200
    assert metric(body, "edgemon_aggregator_http_log_suppressed_total") == n - len(errors)
    assert agg.stop() == 0
