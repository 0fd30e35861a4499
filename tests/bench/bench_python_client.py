#!/usr/bin/python3
"""bench_python_client.py - what one span costs the Python inference process.

In one process, interleaved round by round (the cases run in turn within each round, so a
machine whose speed drifts over minutes affects every case alike), it times:

  span        `with edgemon.span("x"): pass`  (the module-level API, as users write it)
  record      `edgemon.record("x", start_ns, duration_ns)`
  span.nosend `with edgemon.span("x", None, None, client): pass` on a client whose send is a
              no-op C builtin: the client's own Python work, without the system call
  span.gpu    (with --gpu) `with edgemon.span("x", None, None, client, True): pass` on such a
              client: with torch and a CUDA device, the two timing events a GPU span records
              and the query that sends the "x.gpu" span of the one before (nothing queued on
              the stream between them); without, the one test that leaves it a plain span.
              Off by default: it imports torch into the process the other cases run in
  send        bare `sock.send(b)` of the same 64 bytes on a connected non-blocking AF_UNIX
              SOCK_DGRAM socket: the floor a datagram-per-span client cannot go below
  hist.time   prometheus_client `with Histogram.time(): pass`
  observe     prometheus_client `Histogram.observe(0.01)`
  clock.pair  `time.perf_counter_ns(); time.perf_counter_ns()`
  span.ring   `with edgemon.span("x", None, None, ring_client): pass` on a client whose thread
              writes to a span ring v2 registered with a real edgemon-agent (--agent), and
  record.ring `ring_client.record("x", start_ns, duration_ns)` likewise: no system call; the
              agent (beside a real mosquitto) drains the ring on its tick

Each case runs --number times per round, in chunks of 8 back-to-back copies of the statement
timed together with one perf_counter_ns() pair (about 1/8 of clock.pair per operation is
timing overhead, the same for every case); the figure is ns per operation, min / median / max
over --rounds rounds.

The receiving socket is drained by a separate process (multiprocessing). Before each chunk
of a sending case the sender waits, untimed, until the drainer has read everything sent so
far, so a chunk of 8 always finds room in the queue (net.unix.max_dgram_qlen is 10 by
default) and sends do not hit EAGAIN; the drainer spins on non-blocking reads meanwhile, so
these cases measure the send itself, not the wake-up of a sleeping reader. Any datagram that
did meet a full queue is reported (edgemon counts it as queue_full, the bare send its
BlockingIOError), and the drainer's count is checked against what was sent.

Two more cases time the pattern of a real pipeline, a few spans per frame, where the agent is
asleep in epoll_wait when a datagram arrives and the sender's send() has to wake it up:

  span.paced  one `with edgemon.span("x"): pass` every 200 us, each timed on its own
  send.paced  one bare `sock.send(b)` every 200 us, each timed on its own
  span.ring.paced  one ring span every 200 us, each timed on its own (with --agent)

For these the drainer blocks in recv_into; the figure per round is the median of --paced
individually timed operations (one perf_counter_ns() pair included); the sender spins between
them. With two or more CPUs the sender is pinned to CPU 0 and the drainer to CPU 1 (--no-pin
leaves both to the scheduler).

The ring cases run when an agent binary is found (--agent, default
build/normal/firmware/agent/edgemon-agent; --agent '' leaves them out).

Needs Debian's python3-prometheus-client (exits 2 with the apt-get line when it is missing).

Usage: /usr/bin/python3 tests/bench/bench_python_client.py [--rounds 7] [--number 20000]
                                                            [--paced 1000] [--no-pin]
                                                            [--agent PATH] [--gpu]
Results are written up in docs/BENCHMARKS.md ("clients: cost of a span in Python").
"""

import argparse
import multiprocessing
import os
import platform
import shutil
import socket
import statistics
import sys
import tempfile
import time
import timeit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "firmware", "client", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_agent  # noqa: E402  (cpu_model)
import edgemon  # noqa: E402

try:
    import prometheus_client
    from prometheus_client import CollectorRegistry, Histogram
except ImportError:
    print("bench_python_client: needs prometheus_client; install it with:\n"
          "  apt-get install -y python3-prometheus-client", file=sys.stderr)
    sys.exit(2)


CHUNK = 8  # operations timed together; below the default queue length of 10
STOP, WAKE = b"\x00", b"\x01"  # 1-byte control datagrams for the drainer


def drain(fd, pin_cpu, count, spin):
    """The separate receiving process. Counts 64-byte datagrams in `count` (shared memory).
    While spin.value is 1 it polls with non-blocking reads (never asleep, so a send wakes
    nobody); while 0 it blocks in recv_into like an agent asleep in epoll_wait. A WAKE
    datagram makes it look at spin again; STOP ends it."""
    if pin_cpu is not None:
        os.sched_setaffinity(0, {pin_cpu})
    sock = socket.socket(fileno=fd)
    sock.setblocking(True)
    buf = bytearray(128)
    recv_into = sock.recv_into
    dontwait = socket.MSG_DONTWAIT
    received = 0
    while True:
        if spin.value:
            try:
                n = recv_into(buf, 0, dontwait)
            except BlockingIOError:
                continue
        else:
            n = recv_into(buf)
        if n == 1:
            if buf[0] == STOP[0]:
                return
            continue  # WAKE
        received += 1
        count.value = received


def make_chunk(stmt, env):
    """A function running CHUNK copies of `stmt` back to back; returns their ns."""
    lines = stmt.splitlines()
    body = "".join("    %s\n" % line for _ in range(CHUNK) for line in lines)
    src = ("def chunk():\n    _chunk_t0 = _clock()\n" + body + "    return _clock() - _chunk_t0\n")
    namespace = dict(env, _clock=time.perf_counter_ns)
    exec(compile(src, "<chunk>", "exec"), namespace)
    return namespace["chunk"]


def wait_drained(count, target, timeout_s=5.0):
    """Waits (untimed) until the drainer has read `target` datagrams. False on timeout."""
    deadline = time.monotonic() + timeout_s
    while count.value < target:
        if time.monotonic() > deadline:
            return False
        os.sched_yield()
    return True


def time_paced(op, count, gap_ns=200000):
    """Median ns of `count` calls of op(), each timed alone, one every gap_ns (spinning)."""
    clock = time.perf_counter_ns
    samples = []
    for _ in range(count):
        t0 = clock()
        op()
        t1 = clock()
        samples.append(t1 - t0)
        while clock() - t1 < gap_ns:
            pass
    return statistics.median(samples)


def read_first_line(path):
    try:
        with open(path) as f:
            return f.readline().strip()
    except OSError:
        return "?"


class RingAgent(object):
    """A real mosquitto and edgemon-agent in tmp, for the ring cases: client() returns a
    Client whose calling thread's ring the agent has accepted (or exits 2 saying why)."""

    def __init__(self, agent, tmp):
        import subprocess
        self.procs = []
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        self.rundir = os.path.join(tmp, "agent.run")
        os.makedirs(self.rundir)
        conf = os.path.join(tmp, "agent.ini")
        with open(conf, "w") as f:
            f.write("[agent]\ndevice_id = bench-client\nsample_period = 100ms\n"
                    "runtime_dir = %s\n\n[target]\npid = %d\n\n[mqtt]\nbroker = mqtt://127.0.0.1:%d\n" % (
                        self.rundir, os.getpid(), port))
        log = open(os.path.join(tmp, "agent.log"), "w")
        self.procs.append(subprocess.Popen(["mosquitto", "-p", str(port)], stdout=log,
                                           stderr=subprocess.STDOUT))
        self.procs.append(subprocess.Popen([agent, "--config", conf], stdout=log,
                                           stderr=subprocess.STDOUT))
        self.log = log.name

    def client(self):
        sock = os.path.join(self.rundir, "spans.sock")
        deadline = time.monotonic() + 10
        while not (os.path.exists(sock) and os.path.exists(os.path.join(self.rundir,
                                                                        "deadlines"))):
            if time.monotonic() > deadline:
                sys.exit("bench_python_client: the agent did not start (see %s)" % self.log)
            time.sleep(0.05)
        client = edgemon.Client(sock)
        while client.ring_stats()["active"] == 0:
            if time.monotonic() > deadline:
                sys.exit("bench_python_client: the agent accepted no ring (%r; see %s)" % (
                    client.ring_stats(), self.log))
            client.record("x", 1000, 2000)
            time.sleep(0.01)
        return client

    def close(self):
        for proc in reversed(self.procs):
            proc.terminate()
            proc.wait(10)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    ap.add_argument("--number", type=int, default=20000,
                    help="operations per case per round (default 20000)")
    ap.add_argument("--paced", type=int, default=1000,
                    help="individually timed operations per paced case per round (default 1000)")
    ap.add_argument("--no-pin", action="store_true", help="do not pin sender and drainer")
    ap.add_argument("--gpu", action="store_true",
                    help="add the span.gpu case (imports torch; CUDA events when a GPU is there)")
    ap.add_argument("--agent", default=os.path.join(ROOT, "build", "normal", "firmware", "agent",
                                                    "edgemon-agent"),
                    help="edgemon-agent for the ring cases ('' to leave them out)")
    args = ap.parse_args()
    chunks = max(1, args.number // CHUNK)

    pin = not args.no_pin and len(os.sched_getaffinity(0)) >= 2
    if pin:
        os.sched_setaffinity(0, {0})

    tmp = tempfile.mkdtemp(prefix="em-bench-client-")
    path = os.path.join(tmp, "spans.sock")
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(path)
    ctx = multiprocessing.get_context("fork")
    count = ctx.RawValue("Q", 0)
    spin = ctx.RawValue("b", 1)
    drainer = ctx.Process(target=drain, args=(receiver.fileno(), 1 if pin else None, count, spin),
                          daemon=True)
    drainer.start()
    control = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # blocking: control datagrams
    control.connect(path)

    # The module-level API, pointed at the receiver, as an inference process would use it.
    client = edgemon.configure(path)
    # A client whose send is a no-op C builtin: the client's own work without the syscall.
    nosend = edgemon.Client(os.path.join(tmp, "absent.sock"))
    nosend._send = len  # private hook, benchmark only: len(data) returns at once
    # The same for gpu=True spans (--gpu); the first one, untimed, looks torch up (and warns
    # once when GPU spans are off).
    nosend_gpu = edgemon.Client(os.path.join(tmp, "absent.sock"))
    nosend_gpu._send = len
    if args.gpu:
        with edgemon.span("x", None, None, nosend_gpu, True):
            pass

    raw = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    raw.setblocking(False)
    raw.connect(path)
    payload = edgemon._client.SPAN_STRUCT.pack(b"EM", 1, 1, os.getpid(), 1, 2, 3, b"x")
    raw_attempts = [0]
    raw_eagain = [0]

    hist = Histogram("bench_stage_seconds", "bench", registry=CollectorRegistry())

    # The ring cases: a real broker and agent, and a client whose thread's ring it accepted.
    ring = RingAgent(args.agent, tmp) if args.agent and os.access(args.agent, os.X_OK) else None
    ring_client = ring.client() if ring else None

    def accepted():
        return client.sent + raw_attempts[0] - raw_eagain[0]

    env = {
        "span": edgemon.span,
        "record": edgemon.record,
        "nosend": nosend,
        "nosend_gpu": nosend_gpu,
        "send": raw.send,
        "payload": payload,
        "raw_eagain": raw_eagain,
        "hist_time": hist.time,
        "observe": hist.observe,
        "perf_counter_ns": time.perf_counter_ns,
        "ring_client": ring_client,
        "ring_record": ring_client.record if ring_client else None,
    }
    # name, statement, sends through: None, "edgemon" or "raw"
    cases = [
        ("span", "with span('x'):\n    pass", "edgemon"),
        ("record", "record('x', 1000, 2000)", "edgemon"),
        ("span.nosend", "with span('x', None, None, nosend):\n    pass", None),
        ("send", "try:\n    send(payload)\nexcept BlockingIOError:\n    raw_eagain[0] += 1",
         "raw"),
        ("hist.time", "with hist_time():\n    pass", None),
        ("observe", "observe(0.01)", None),
        ("clock.pair", "perf_counter_ns(); perf_counter_ns()", None),
    ]
    if args.gpu:
        cases.append(("span.gpu", "with span('x', None, None, nosend_gpu, True):\n    pass",
                      None))
    if ring_client is not None:
        cases += [
            ("span.ring", "with span('x', None, None, ring_client):\n    pass", None),
            ("record.ring", "ring_record('x', 1000, 2000)", None),
        ]
    chunk_fns = {name: make_chunk(stmt, env) for name, stmt, _ in cases}

    span = edgemon.span
    send = raw.send

    def paced_span():
        with span("x"):
            pass

    def paced_send():
        try:
            send(payload)
        except BlockingIOError:
            raw_eagain[0] += 1

    paced = [("span.paced", paced_span), ("send.paced", paced_send)]
    if ring_client is not None:
        def paced_ring():
            with span("x", None, None, ring_client):
                pass
        paced.append(("span.ring.paced", paced_ring))
    results = {name: [] for name in [c[0] for c in cases] + [p[0] for p in paced]}
    full = dict.fromkeys(results, 0)  # datagrams that met a full queue, per case
    fell_behind = [0]

    def full_so_far():
        return client.stats()["dropped"]["queue_full"] + raw_eagain[0]

    def run_case(name, sends, n_chunks):
        fn = chunk_fns[name]
        total = 0
        for _ in range(n_chunks):
            if sends is not None and not wait_drained(count, accepted()):
                fell_behind[0] += 1
            total += fn()
            if sends == "raw":
                raw_attempts[0] += CHUNK
        return total / (n_chunks * CHUNK)

    def run_paced(op):
        spin.value = 0  # the drainer blocks in recv_into from its next empty read on
        wait_drained(count, accepted())
        figure = time_paced(op, args.paced)
        if op is paced_send:
            raw_attempts[0] += args.paced
        spin.value = 1
        control.send(WAKE)
        return figure

    for name, _, sends in cases:  # warm-up: caches, connect, specialisation
        run_case(name, sends, min(chunks, 250))
    warm_queue_full = client.stats()["dropped"]["queue_full"]
    warm_raw_eagain = raw_eagain[0]

    started = time.monotonic()
    for _ in range(args.rounds):
        for name, _, sends in cases:
            before = full_so_far()
            results[name].append(run_case(name, sends, chunks))
            full[name] += full_so_far() - before
        for name, op in paced:
            before = full_so_far()
            figure = run_paced(op)
            results[name].append(figure)
            full[name] += full_so_far() - before
    elapsed = time.monotonic() - started

    # Everything sent has been read? Then stop the drainer.
    complete = wait_drained(count, accepted(), timeout_s=10.0)
    drained = count.value
    control.send(STOP)
    drainer.join(10)
    ring_written = ring_client.ring_stats()["written"] if ring_client else 0
    if ring:
        ring.close()
    stats = client.stats()

    measured_ops = args.rounds * chunks * CHUNK
    paced_ops = args.rounds * args.paced
    queue_full = stats["dropped"]["queue_full"] - warm_queue_full
    raw_full = raw_eagain[0] - warm_raw_eagain

    print("edgemon Python client: cost of one span (ns per operation)")
    print("  machine: %s, %d CPUs online, kernel %s" % (
        bench_agent.cpu_model(platform.processor() or "unknown"), os.cpu_count() or 0, platform.release()))
    print("  python %s, prometheus_client %s, net.unix.max_dgram_qlen %s" % (
        platform.python_version(), getattr(prometheus_client, "__version__", "0.16 (Debian)"),
        read_first_line("/proc/sys/net/unix/max_dgram_qlen")))
    print("  %d rounds x %d operations per case (chunks of %d), interleaved, %.1f s; "
          "sender %s, drainer %s" % (
              args.rounds, chunks * CHUNK, CHUNK, elapsed, "CPU 0" if pin else "unpinned",
              "CPU 1 (separate process)" if pin else "separate process"))
    print()
    print("  %-16s %8s %8s %8s   %s" % ("case", "min", "median", "max", "queue full (of ops)"))
    medians = {}
    for name in results:
        values = results[name]
        medians[name] = statistics.median(values)
        ops = args.rounds * (args.paced if name.endswith(".paced") else chunks * CHUNK)
        print("  %-16s %8.0f %8.0f %8.0f   %d of %d" % (
            name, min(values), medians[name], max(values), full[name], ops))
    print()
    print("  span / hist.time        %.2f" % (medians["span"] / medians["hist.time"]))
    print("  span / send             %.2f" % (medians["span"] / medians["send"]))
    print("  span - send             %.0f ns (the client's Python work around the system call)"
          % (medians["span"] - medians["send"]))
    print("  span.nosend / hist.time %.2f" % (medians["span.nosend"] / medians["hist.time"]))
    print("  record / observe        %.2f" % (medians["record"] / medians["observe"]))
    gpu = nosend_gpu.gpu_stats() if args.gpu else None
    if gpu is None:
        pass
    elif gpu["enabled"]:
        print("  span.gpu - span.nosend  %.0f ns (CUDA events on; resolved %d, dropped %d, "
              "failed %d)" % (medians["span.gpu"] - medians["span.nosend"], gpu["resolved"],
                              gpu["dropped"], gpu["failed"]))
    else:
        print("  span.gpu - span.nosend  %.0f ns (GPU spans off: %s)" % (
            medians["span.gpu"] - medians["span.nosend"], gpu["reason"]))
    print("  span.paced / send.paced %.2f" % (medians["span.paced"] / medians["send.paced"]))
    if ring_client is not None:
        print("  span.ring / hist.time   %.2f   (goal <= 0.6)" % (
            medians["span.ring"] / medians["hist.time"]))
        print("  record.ring / observe   %.2f   (goal <= 1)" % (
            medians["record.ring"] / medians["observe"]))
        print("  span.ring / span        %.2f   (the ring against the v1 datagram)" % (
            medians["span.ring"] / medians["span"]))
        print("  span.ring.paced / span.ring %.2f   (goal <= 1.2; paced figures include a whole "
              "clock pair, tight ones 1/8 of one)" % (
                  medians["span.ring.paced"] / medians["span.ring"]))
        print("  spans written to the ring: %d" % ring_written)
    print()
    print("  queue full (EAGAIN) in the measured rounds: edgemon %d of %d, bare send %d of %d" % (
        queue_full, 2 * measured_ops + paced_ops, raw_full, measured_ops + paced_ops))
    print("  other drops: %s" % {k: v for k, v in stats["dropped"].items() if k != "queue_full"})
    print("  chunks that started before the drainer caught up (5 s wait): %d" % fell_behind[0])
    print("  drainer read %d datagrams; the kernel accepted %d%s" % (
        drained, accepted(), "" if complete and drained == accepted() else "  (MISMATCH)"))

    nosend.close()
    nosend_gpu.close()
    raw.close()
    control.close()
    receiver.close()
    if ring_client is not None:
        ring_client.close()
    shutil.rmtree(tmp)
    return 0 if complete and drained == accepted() else 1


if __name__ == "__main__":
    sys.exit(main())
