#!/usr/bin/python3
"""bench_agent.py - what edgemon-agent costs beside collectd doing the same work.

Starts a private mosquitto on a free 127.0.0.1 port and a target pinned to CPU 1, with a
unique marker in its command line. --target picks it:
  pipeline  (default) the product's own case: tests/bench/bench_span_pipeline.py's pipeline
            at 100 fps with 3 stages of ~0.5 ms, each in `with edgemon.span()`, reading
            edgemon.level() every frame. The agent takes its spans (through the client's
            ring); collectd, which has no span input, watches the same process. The agent
            windows share one runtime dir, so the pipeline's client registers again with each
            new agent (within a second).
  busy      a busy Python loop (`while True: pass`): the process-watching work alone. Then, for each
interval, it runs edgemon-agent watching the target's pid and collectd watching the same
process (cpu, memory, processes with ProcessMatch on the marker, mqtt write to the same
broker; the peer configuration docs/BENCHMARKS.md gives). Each monitor runs alone, pinned to
CPU 0, for a warm-up and then a measured window. Monitors and intervals are interleaved
round by round, and the order of the two monitors flips each round.

Per window it measures:
  - CPU: utime+stime of the monitor's process tree from /proc/<pid>/stat (every live
    descendant, plus cutime+cstime of reaped children), over the window. The same figure is
    also taken from /proc/<pid>/task/*/schedstat (on-CPU ns, no 10 ms clock-tick
    quantisation) because the agent's figures are only a few ticks per minute.
  - peak RSS (VmHWM), RssAnon/RssFile and Pss (smaps_rollup) at the end of the window, and
    the thread count (Threads:).
  - what it published: a raw-socket MQTT 3.1.1 subscriber (stdlib only) on '#' counts the
    PUBLISH packets and their payload and wire bytes under the monitor's topic prefix.

Then it runs the agent under `valgrind --tool=callgrind` for two run lengths at each
callgrind interval, counts the data messages each run published, and reports
(Ir_long - Ir_short) / (ticks_long - ticks_short): user-space instructions per tick with the
start-up and shutdown cost cancelled. Callgrind counts no kernel instructions.

--compare-write-ahead runs, instead of the agent and collectd, the agent twice at qos_data = 1
with a spool: once with [spool] write_ahead = true and once with false, interleaved the same
way (no collectd, no callgrind): the cost of write-ahead in the same run.

--compare-flight likewise runs the agent twice, with [flight] enabled = true (the flight
recorder's rings filled every tick and every span; no budget rule, so no recording is taken:
the steady state) and enabled = false, interleaved: the recorder's cost in the same run
(docs/BENCHMARKS.md, "agent: flight recorder cost"; use --intervals 100ms).

--compare-profile measures a stack profiling window against perf record on the pipeline target
(docs/BENCHMARKS.md, "agent: stack profile cost"; the first interval, use --intervals 100ms).
Each round (the order of the three agents flips each round, and that of the window and perf
conditions inside the second one):
  off     the agent with [profile] enabled = false, a --seconds window;
  idle    the agent with [profile] enabled = true (hz 99, min_gap_seconds 0), no window
          open, a --seconds window; its RSS is taken at the end, before any window;
  window  the same agent, windows opened back to back by cmd/profile (a CBOR cmd message
          {0: 1, 1: 4, 2: time_ns, 4: 3, 5: --profile-window} published with paho on
          edgemon/v1/<device>/cmd/profile, the next one as soon as the previous profile is
          published) until --seconds of window time: the agent's CPU from each command to
          its window's end ('sampling') and on to the profile's arrival ('after': the
          client's Python stacks awaited, libdwfl resolution on libuv's worker, encoding,
          publish); the pipeline's frames and CPU only while each window is open, so the
          Python client's own sampler thread (99 Hz, edgemon/_pyprof.py) is in the
          pipeline's CPU; the agent's RSS after the last window ([profile] unwind = dwarf,
          the default: each sample copies 8 KiB of user stack, unwound after the window);
  window-fp  the same windows from a third agent with unwind = fp (frame pointers only);
  perf-dwarf `perf record -e cpu-clock -F 99 --call-graph dwarf,8192 -p PID`, as perf below;
  perf    `perf record -e cpu-clock -F 99 -g -p PID` on the pipeline for --seconds (SIGINT
          ends it; the agent of the idle condition keeps running, no window open): perf's
          CPU while it records and in all (wait4's rusage: start-up, the recording, writing
          and build-id processing at exit), the pipeline's frames and CPU while it records.
The pipeline writes each frame's work time (edgemon.level() and the three stages) to a ring
(bench_span_pipeline.py --frame-times), from which each condition's frame p50/p99/max come.
Needs /usr/bin/python3 with paho-mqtt and cbor2, and perf.

Usage: /usr/bin/python3 tests/bench/bench_agent.py [--seconds 60] [--repeats 3] ...
Run it through scripts/bench-agent.sh, which installs the tools and builds the agent.
Results are written up in docs/BENCHMARKS.md ("agent: cost beside collectd").
"""

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from bench_span_pipeline import FRAME_TIMES_SLOTS, exit_if_missing, missing_cpus, read_frame_times

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLK_TCK = os.sysconf("SC_CLK_TCK")
DEVICE_ID = "edgemon-bench"
COLLECTD_HOST = "edgemon-bench-collectd"
COLLECTD_PLUGINS = ("logfile", "cpu", "memory", "processes", "mqtt")
PROFILE_CONDITIONS = ("off", "idle", "window", "window-fp", "perf", "perf-dwarf")


class BenchError(Exception):
    pass


def log(msg):
    print(f"bench_agent: {msg}", file=sys.stderr, flush=True)


# --- durations ----------------------------------------------------------------------------


def parse_duration(text):
    """'100ms', '10ms', '1s', '0.5s' -> seconds (float)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration (like 100ms or 1s): {text!r}")
    value = float(m.group(1)) / (1000.0 if m.group(2) == "ms" else 1.0)
    if not 0.001 <= value <= 60:
        raise argparse.ArgumentTypeError(f"duration out of range 1ms..60s: {text!r}")
    return value


def fmt_interval(seconds):
    ms = seconds * 1000
    if ms >= 1000 and abs(ms % 1000) < 1e-9:
        return f"{int(ms // 1000)} s"
    return f"{ms:g} ms"


def agent_period(seconds):
    return f"{round(seconds * 1000)}ms"


# --- /proc --------------------------------------------------------------------------------


def read_stat(pid):
    """(ppid, utime+stime, cutime+cstime) in clock ticks, or None when the pid is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    rest = data[data.rindex(")") + 2:].split()
    # rest[0] is field 3 (state): ppid is field 4, utime..cstime are fields 14..17.
    return int(rest[1]), int(rest[11]) + int(rest[12]), int(rest[13]) + int(rest[14])


def descendants(root):
    """root and every live descendant (one scan of /proc)."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = read_stat(int(name))
        if st:
            children.setdefault(st[0], []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def schedstat_ns(pid):
    """On-CPU ns of every thread of pid (sum of /proc/pid/task/*/schedstat field 1)."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            pass
    return total


def tree_cpu(root):
    """(clock ticks, on-CPU ns) of root's process tree."""
    ticks = ns = 0
    for pid in descendants(root):
        st = read_stat(pid)
        if st is None:
            continue
        ticks += st[1] + (st[2] if pid == root else 0)
        ns += schedstat_ns(pid)
    return ticks, ns


def status_fields(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem"):
                    out[key] = int(value.split()[0])  # kB
                elif key == "Threads":
                    out[key] = int(value)
    except FileNotFoundError:
        pass
    return out


def cpu_times(cpus):
    """{cpu: (busy, steal, total)} in clock ticks from /proc/stat, for the listed CPUs."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if not line.startswith("cpu") or line.startswith("cpu "):
                continue
            name, *vals = line.split()
            cpu = int(name[3:])
            if cpu in cpus:
                v = [int(x) for x in vals[:8]]  # user nice system idle iowait irq softirq steal
                total = sum(v)
                out[cpu] = (total - v[3] - v[4] - v[7], v[7], total)
    return out


def pss_kb(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (FileNotFoundError, PermissionError):
        pass
    return None


def tree_memory(root):
    """Summed over the tree: VmHWM, RssAnon, RssFile, Pss (kB), Threads."""
    tot = {"VmHWM": 0, "RssAnon": 0, "RssFile": 0, "Pss": 0, "Threads": 0}
    for pid in descendants(root):
        s = status_fields(pid)
        for key in ("VmHWM", "RssAnon", "RssFile", "Threads"):
            tot[key] += s.get(key, 0)
        tot["Pss"] += pss_kb(pid) or 0
    return tot


# --- a stdlib MQTT 3.1.1 subscriber -------------------------------------------------------


def _mqtt_str(s):
    b = s.encode()
    return struct.pack("!H", len(b)) + b


def _mqtt_packet(first, body):
    n, rl = len(body), bytearray()
    while True:
        byte, n = n % 128, n // 128
        rl.append(byte | (0x80 if n else 0))
        if not n:
            break
    return bytes([first]) + bytes(rl) + body


class Subscriber:
    """Subscribes to '#' (QoS 0, clean session, no keepalive) and counts, per topic prefix,
    the PUBLISH packets received: messages, payload bytes, wire bytes (whole packet)."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        body = (_mqtt_str("MQTT") + bytes([4, 0x02]) + struct.pack("!H", 0) +
                _mqtt_str(f"bench-sub-{os.getpid()}"))
        self.sock.sendall(_mqtt_packet(0x10, body))
        self.buf = bytearray()
        ptype, body = self._read_packet()
        if ptype != 2 or len(body) < 2 or body[1] != 0:
            raise BenchError(f"mqtt subscriber: no CONNACK accepted (type {ptype}, {body!r})")
        self.sock.sendall(_mqtt_packet(0x82, struct.pack("!H", 1) + _mqtt_str("#") + b"\x00"))
        ptype, body = self._read_packet()
        if ptype != 9 or body[-1:] == b"\x80":
            raise BenchError("mqtt subscriber: SUBSCRIBE to '#' refused")
        self.sock.settimeout(None)
        self.lock = threading.Lock()
        self.counts = {}  # prefix -> [msgs, payload bytes, wire bytes]
        self.live_topics = {}  # topic -> msgs (for the record of what was published)
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _recv_exact(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("broker closed the connection")
            self.buf += chunk
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def _read_packet(self):
        first = self._recv_exact(1)[0]
        mult, length, hdr = 1, 0, 1
        while True:
            b = self._recv_exact(1)[0]
            hdr += 1
            length += (b & 0x7F) * mult
            mult *= 128
            if not b & 0x80:
                break
        body = self._recv_exact(length)
        self._last_wire = hdr + length
        return first >> 4, body if (first >> 4) != 3 else (first, body)

    def _run(self):
        try:
            while True:
                ptype, rest = self._read_packet()
                if ptype != 3:
                    continue
                first, body = rest
                if first & 0x01:  # retained (sent on subscribe): not live traffic
                    continue
                tlen = struct.unpack("!H", body[:2])[0]
                topic = body[2:2 + tlen].decode("utf-8", "replace")
                qos = (first >> 1) & 3
                payload = len(body) - 2 - tlen - (2 if qos else 0)
                prefix = "/".join(topic.split("/")[:2])
                with self.lock:
                    c = self.counts.setdefault(prefix, [0, 0, 0])
                    c[0] += 1
                    c[1] += payload
                    c[2] += self._last_wire
                    self.live_topics[topic] = self.live_topics.get(topic, 0) + 1
        except (OSError, EOFError) as e:
            self.error = str(e)

    def snapshot(self, prefix):
        with self.lock:
            return tuple(self.counts.get(prefix, (0, 0, 0)))

    def topic_count(self, topic):
        with self.lock:
            return self.live_topics.get(topic, 0)

    def close(self):
        try:
            self.sock.sendall(b"\xe0\x00")
            self.sock.close()
        except OSError:
            pass


class ProfileListener:
    """--compare-profile: a paho client that sends cmd/profile and keeps every payload
    published on edgemon/v1/<device>/profile."""

    def __init__(self, port, device):
        import cbor2
        import paho.mqtt.client as mqtt
        self.cbor2, self.device = cbor2, device
        self.payloads = []
        cid = f"bench-prof-{os.getpid()}"
        try:
            self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION1, client_id=cid)
        except AttributeError:  # paho-mqtt 1.x
            self.client = mqtt.Client(client_id=cid)
        subscribed = threading.Event()
        self.client.on_message = lambda c, u, m: self.payloads.append(m.payload)
        self.client.on_subscribe = lambda *args: subscribed.set()
        self.client.connect("127.0.0.1", port, keepalive=60)
        self.client.subscribe(f"edgemon/v1/{device}/profile", qos=1)
        self.client.loop_start()
        if not subscribed.wait(10):
            raise BenchError("paho: no SUBACK for the profile topic")
        sys.path.insert(0, os.path.join(REPO, "proto", "python"))
        try:
            import edgemon_proto
            self.proto = edgemon_proto
        except ImportError:
            self.proto = None

    def command(self, seconds):
        cmd = {0: 1, 1: 4, 2: time.time_ns(), 4: 3, 5: int(seconds)}
        self.client.publish(f"edgemon/v1/{self.device}/cmd/profile", self.cbor2.dumps(cmd),
                            qos=1).wait_for_publish()

    def decode(self, payload):
        if not self.proto:
            return None
        try:
            return self.proto.decode_profile(payload)
        except Exception as e:  # a bench, not the decoder's test: say it and go on
            log(f"note: a profile did not decode: {e}")
            return None

    def close(self):
        self.client.loop_stop()
        self.client.disconnect()


# --- processes ----------------------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def broker_conf(directory, port):
    """Writes <directory>/mosquitto.conf for a private broker on 127.0.0.1:<port> (anonymous,
    nothing persisted or logged); returns its path."""
    conf = os.path.join(directory, "mosquitto.conf")
    with open(conf, "w") as f:
        f.write(f"listener {port} 127.0.0.1\nallow_anonymous true\n"
                "persistence false\nlog_dest none\n")
    return conf


def cpu_model(unknown="?"):
    """The CPU's model name from /proc/cpuinfo, or `unknown`."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return unknown


def start_broker(mosquitto, directory, stderr=subprocess.DEVNULL, preexec_fn=None):
    """A private mosquitto (broker_conf() in `directory`) on a free port, waited for until it
    takes a connection. Returns (port, process); raises BenchError, the process stopped, when
    it exits or does not listen within 10 s."""
    port = free_port()
    proc = subprocess.Popen([mosquitto, "-c", broker_conf(directory, port)],
                            stdout=subprocess.DEVNULL, stderr=stderr, preexec_fn=preexec_fn)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return port, proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop_process(proc)
                raise BenchError(f"mosquitto did not start; see {directory}/mosquitto.log")
            time.sleep(0.05)


def pinned(cpu):
    def fn():
        os.sched_setaffinity(0, {cpu})
    return fn


def stop_process(proc, timeout=10.0):
    """SIGTERM, then SIGKILL after `timeout`; returns the exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


class Bench:
    def __init__(self, args):
        self.args = args
        self.tmp = tempfile.mkdtemp(prefix="edgemon-bench-agent-")
        self.procs = []
        self.results = []  # one dict per window
        self.marker = f"edgemon-bench-target-{uuid.uuid4().hex[:12]}"
        self.cpu_mon, self.cpu_target = args.monitor_cpu, args.target_cpu
        self.monitors = (["agent-wal", "agent-nowal"] if args.compare_write_ahead
                         else ["agent-flight", "agent-noflight"] if args.compare_flight
                         else list(PROFILE_CONDITIONS) if args.compare_profile
                         else ["agent", "collectd"])

    # -- setup

    def start_broker(self):
        self.port, self.broker = start_broker(
            self.args.mosquitto, self.tmp,
            stderr=open(os.path.join(self.tmp, "mosquitto.log"), "w"),
            preexec_fn=pinned(self.cpu_mon))
        self.procs.append(self.broker)
        self.sub = Subscriber(self.port)

    def start_target(self):
        if self.args.target == "busy":
            cmd = ["/usr/bin/python3", "-c", "while True: pass", self.marker]
            env = None
        else:
            cmd, env = self.pipeline_command()
        self.target = subprocess.Popen(cmd, env=env, preexec_fn=pinned(self.cpu_target))
        self.procs.append(self.target)
        time.sleep(0.2)
        if self.target.poll() is not None:
            raise BenchError(f"the {self.args.target} target exited at once")

    def pipeline_command(self):
        """bench_span_pipeline.py's pipeline with spans: calibrated here, its counters file
        named after the marker (collectd's ProcessMatch), its client pointed at the agents'
        shared runtime dir."""
        script = os.path.join(REPO, "tests", "bench", "bench_span_pipeline.py")
        r = subprocess.run(["/usr/bin/python3", script, "--calibrate", "--stage-ms", "0.5"],
                           capture_output=True, text=True, preexec_fn=pinned(self.cpu_target))
        if r.returncode != 0:
            raise BenchError(f"pipeline calibration failed: {r.stderr.strip()}")
        self.iterations = int(r.stdout.split()[0])
        self.counters = os.path.join(self.tmp, f"{self.marker}.counters")
        with open(self.counters, "wb") as f:
            f.write(bytes(40))
        self.runtime_dir = os.path.join(self.tmp, "agent.run")
        os.makedirs(self.runtime_dir, exist_ok=True)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("EDGEMON_") and k != "PYTHONPATH"}
        env["PYTHONPATH"] = os.path.join(REPO, "firmware", "client", "python")
        env["EDGEMON_RUNTIME_DIR"] = self.runtime_dir
        log(f"pipeline target: 100 fps, 3 spans per frame, {self.iterations} iterations "
            "per stage (~0.5 ms)")
        cmd = ["/usr/bin/python3", script, "--pipeline", "spans", "--iterations",
               str(self.iterations), "--fps", "100", "--counters", self.counters]
        if self.args.compare_profile:
            self.frame_times = os.path.join(self.tmp, f"{self.marker}.frames")
            with open(self.frame_times, "wb") as f:
                f.write(bytes(4 * FRAME_TIMES_SLOTS))
            cmd += ["--frame-times", self.frame_times]
        return cmd, env

    def pipeline_counters(self):
        """(frames, late, spans sent) of the pipeline target so far, or None."""
        if self.args.target != "pipeline":
            return None
        with open(self.counters, "rb") as f:
            frames, late, _skipped, sent, _dropped = struct.unpack("<5Q", f.read(40))
        return frames, late, sent

    def close(self):
        if getattr(self, "profiles", None):
            self.profiles.close()
        if hasattr(self, "sub"):
            self.sub.close()
        for p in reversed(self.procs):
            stop_process(p, 5)
        if not self.args.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)
        else:
            log(f"kept {self.tmp}")

    # -- monitor configurations

    def agent_config(self, interval, name, write_ahead=None, flight=None, profile=None,
                     unwind="dwarf"):
        """write_ahead True/False: qos_data = 1 and a spool of the window's own with
        [spool] write_ahead set so; flight True/False: [flight] enabled set so; profile
        True: [profile] at 99 Hz with min_gap_seconds = 0 (windows back to back; the other
        keys at their defaults, so the fixed allocation is the default one), False:
        [profile] enabled = false; None: the agent's defaults."""
        path = os.path.join(self.tmp, f"{name}.ini")
        rundir = getattr(self, "runtime_dir", None) or os.path.join(self.tmp, f"{name}.run")
        os.makedirs(rundir, exist_ok=True)
        spool = qos = ""
        if write_ahead is not None:
            spool = (f"[spool]\npath = {os.path.join(self.tmp, name + '.spool')}\n"
                     f"write_ahead = {'true' if write_ahead else 'false'}\n\n")
            qos = "qos_data = 1\n"
        if flight is not None:
            spool += f"[flight]\nenabled = {'true' if flight else 'false'}\n\n"
        if profile is not None:
            spool += ("[profile]\nenabled = true\nhz = 99\nclock = cpu-clock\n"
                      f"min_gap_seconds = 0\nunwind = {unwind}\n\n" if profile
                      else "[profile]\nenabled = false\n\n")
        with open(path, "w") as f:
            f.write(f"[agent]\ndevice_id = {DEVICE_ID}\nsample_period = {agent_period(interval)}\n"
                    f"runtime_dir = {rundir}\n\n[target]\npid = {self.target.pid}\n\n{spool}"
                    f"[mqtt]\nbroker = mqtt://127.0.0.1:{self.port}\n{qos}")
        return path

    def collectd_config(self, interval, name):
        path = os.path.join(self.tmp, f"{name}.conf")
        base = os.path.join(self.tmp, f"{name}.base")
        os.makedirs(base, exist_ok=True)
        with open(path, "w") as f:
            f.write(f"""# collectd for the edgemon agent benchmark: the agent's work, nothing else
Hostname "{COLLECTD_HOST}"
FQDNLookup false
BaseDir "{base}"
PIDFile "{base}/collectd.pid"
PluginDir "{self.args.collectd_plugins}"
TypesDB "{self.args.collectd_types}"
AutoLoadPlugin false
Interval {interval:g}

LoadPlugin logfile
<Plugin logfile>
  LogLevel info
  File STDERR
  Timestamp true
</Plugin>

LoadPlugin cpu
LoadPlugin memory
LoadPlugin processes
<Plugin processes>
  ProcessMatch "target" "{self.marker}"
</Plugin>

LoadPlugin mqtt
<Plugin mqtt>
  <Publish "bench">
    Host "127.0.0.1"
    Port {self.port}
    ClientId "collectd-bench"
    Prefix "collectd"
    QoS 0
    StoreRates true
    Retain false
  </Publish>
</Plugin>
""")
        chk = subprocess.run([self.args.collectd, "-t", "-C", path], capture_output=True,
                             text=True)
        if chk.returncode != 0:
            raise BenchError(f"collectd -t -C {path} failed:\n{chk.stdout}{chk.stderr}")
        return path

    # -- one measured window

    def run_window(self, monitor, interval, rnd):
        name = f"{monitor}-{agent_period(interval)}-r{rnd}"
        if monitor.startswith("agent"):
            wal = {"agent-wal": True, "agent-nowal": False}.get(monitor)
            flight = {"agent-flight": True, "agent-noflight": False}.get(monitor)
            cmd = [self.args.agent, "-c", self.agent_config(interval, name, wal, flight)]
            prefix = "edgemon/v1"
        else:
            cmd = [self.args.collectd, "-f", "-C", self.collectd_config(interval, name)]
            prefix = f"collectd/{COLLECTD_HOST}"
        logf = open(os.path.join(self.tmp, f"{name}.log"), "w")
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT,
                                preexec_fn=pinned(self.cpu_mon))
        try:
            time.sleep(self.args.warmup)
            if proc.poll() is not None:
                raise BenchError(f"{monitor} exited during the warm-up (status "
                                 f"{proc.returncode}); log: {logf.name}")
            cpus = (self.cpu_mon, self.cpu_target)
            s0, p0 = cpu_times(cpus), self.pipeline_counters()
            m0, c0, t0 = self.sub.snapshot(prefix), tree_cpu(proc.pid), time.monotonic()
            time.sleep(self.args.seconds)
            m1, c1, t1 = self.sub.snapshot(prefix), tree_cpu(proc.pid), time.monotonic()
            s1, p1 = cpu_times(cpus), self.pipeline_counters()
            if proc.poll() is not None:
                raise BenchError(f"{monitor} exited during the window (status "
                                 f"{proc.returncode}); log: {logf.name}")
            mem = tree_memory(proc.pid)
        finally:
            rc = stop_process(proc)
            logf.close()
        if self.sub.error:
            raise BenchError(f"mqtt subscriber: {self.sub.error}")
        window = t1 - t0
        cpu_s = (c1[0] - c0[0]) / CLK_TCK
        cpu_ns_s = (c1[1] - c0[1]) / 1e9
        rec = {
            "monitor": monitor, "interval_s": interval, "round": rnd, "window_s": window,
            "cpu_s": cpu_s, "cpu_pct": 100.0 * cpu_s / window,
            "cpu_s_per_min": cpu_s * 60.0 / window,
            "sched_cpu_s": cpu_ns_s, "sched_cpu_pct": 100.0 * cpu_ns_s / window,
            "sched_cpu_s_per_min": cpu_ns_s * 60.0 / window,
            "vmhwm_kb": mem["VmHWM"], "rss_anon_kb": mem["RssAnon"],
            "rss_file_kb": mem["RssFile"], "pss_kb": mem["Pss"], "threads": mem["Threads"],
            "msgs_per_s": (m1[0] - m0[0]) / window,
            "payload_bytes_per_s": (m1[1] - m0[1]) / window,
            "wire_bytes_per_s": (m1[2] - m0[2]) / window,
            "exit_status": rc,
        }
        if p0 is not None:
            rec["target_frames"], rec["target_late"], rec["target_spans"] = (
                p1[i] - p0[i] for i in range(3))
        for cpu, key in ((self.cpu_mon, "mon"), (self.cpu_target, "target")):
            if cpu in s0 and cpu in s1:
                total = (s1[cpu][2] - s0[cpu][2]) or 1
                rec[f"cpu_{key}_busy_pct"] = 100.0 * (s1[cpu][0] - s0[cpu][0]) / total
                rec[f"cpu_{key}_steal_pct"] = 100.0 * (s1[cpu][1] - s0[cpu][1]) / total
        if rc not in (0, -signal.SIGTERM):
            log(f"note: {monitor} exited with status {rc} after SIGTERM; log: {logf.name}")
        self.results.append(rec)
        log(f"round {rnd} {monitor:8s} {fmt_interval(interval):>6s}: "
            f"cpu {rec['cpu_pct']:.3f}% (sched {rec['sched_cpu_pct']:.4f}%), "
            f"hwm {mem['VmHWM'] / 1024:.2f} MiB, {mem['Threads']} thr, "
            f"{rec['msgs_per_s']:.1f} msg/s, {rec['payload_bytes_per_s']:.0f} B/s"
            + (f"; pipeline {rec['target_frames']} frames, {rec['target_late']} late, "
               f"{rec['target_spans']} spans" if "target_frames" in rec else ""))
        return rec

    def run_windows(self):
        order = list(self.monitors)
        total = self.args.repeats * len(self.args.intervals) * 2
        log(f"{total} windows of {self.args.warmup:g}+{self.args.seconds:g} s "
            f"(~{total * (self.args.warmup + self.args.seconds + 1) / 60:.1f} min)")
        for rnd in range(1, self.args.repeats + 1):
            for interval in self.args.intervals:
                for monitor in order:
                    self.run_window(monitor, interval, rnd)
            order.reverse()

    # -- --compare-profile

    def pipeline_snapshot(self):
        """(monotonic time, frames, late, on-CPU ns) of the pipeline target."""
        frames, late, _sent = self.pipeline_counters()
        return time.monotonic(), frames, late, tree_cpu(self.target.pid)[1]

    def pipeline_span(self, acc, p0, p1):
        """Adds the pipeline's frames between two snapshots to the accumulator acc."""
        acc["wall_s"] += p1[0] - p0[0]
        acc["frames"] += p1[1] - p0[1]
        acc["late"] += p1[2] - p0[2]
        acc["cpu_ns"] += p1[3] - p0[3]
        acc["times_us"] += read_frame_times(self.frame_times, p0[1], p1[1])

    def profile_record(self, cond, rnd, pipe, **fields):
        times = sorted(pipe.pop("times_us"))
        rec = {"monitor": cond, "round": rnd, **fields, **pipe}
        rec["pipe_cpu_pct"] = 100.0 * pipe["cpu_ns"] / 1e9 / pipe["wall_s"]
        rec["pipe_cpu_us_per_frame"] = pipe["cpu_ns"] / 1e3 / max(1, pipe["frames"])
        if times:
            rec["frame_p50_ms"] = times[len(times) // 2] / 1000.0
            rec["frame_p99_ms"] = times[min(len(times) - 1, int(0.99 * len(times)))] / 1000.0
            rec["frame_max_ms"] = times[-1] / 1000.0
        self.results.append(rec)
        log(f"round {rnd} {cond:6s}: tool cpu {rec.get('tool_pct', float('nan')):.3f}% "
            f"(with after {rec.get('tool_total_pct', float('nan')):.3f}%); pipeline "
            f"{rec['frames']} frames, {rec['late']} late, p99 "
            f"{rec.get('frame_p99_ms', float('nan')):.3f} ms, cpu {rec['pipe_cpu_pct']:.2f}%")
        return rec

    @staticmethod
    def new_pipe_acc():
        return {"wall_s": 0.0, "frames": 0, "late": 0, "cpu_ns": 0, "times_us": []}

    def start_profile_agent(self, rnd, enabled, unwind="dwarf"):
        interval = self.args.intervals[0]
        name = f"agent-profile-{'on' if enabled else 'off'}-{unwind}-r{rnd}"
        cmd = [self.args.agent, "-c",
               self.agent_config(interval, name, profile=enabled, unwind=unwind)]
        logf = open(os.path.join(self.tmp, f"{name}.log"), "w")
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT,
                                preexec_fn=pinned(self.cpu_mon))
        time.sleep(self.args.warmup)
        if proc.poll() is not None:
            stop_process(proc)
            raise BenchError(f"the agent exited during the warm-up (status {proc.returncode}); "
                             f"log: {logf.name}")
        if enabled:
            with open(logf.name, errors="replace") as f:
                m = re.search(r"profiler on: .*?(\d+) bytes", f.read())
            if not m:
                stop_process(proc)
                raise BenchError(f"no 'profiler on: ... bytes' in {logf.name}")
            self.profiler_bytes[unwind] = int(m.group(1))
        return proc, logf

    def measure_agent_idle(self, cond, rnd, proc):
        """A --seconds window of the agent with no profiling window open."""
        pipe = self.new_pipe_acc()
        a0, p0 = tree_cpu(proc.pid)[1], self.pipeline_snapshot()
        time.sleep(self.args.seconds)
        a1, p1 = tree_cpu(proc.pid)[1], self.pipeline_snapshot()
        if proc.poll() is not None:
            raise BenchError(f"the agent exited during the {cond} window")
        self.pipeline_span(pipe, p0, p1)
        mem = tree_memory(proc.pid)
        wall = p1[0] - p0[0]
        cpu_s = (a1 - a0) / 1e9
        return self.profile_record(
            cond, rnd, pipe, tool_cpu_s=cpu_s, tool_wall_s=wall, tool_pct=100 * cpu_s / wall,
            tool_total_pct=100 * cpu_s / wall, vmhwm_kb=mem["VmHWM"],
            rss_kb=mem["RssAnon"] + mem["RssFile"], rss_anon_kb=mem["RssAnon"],
            pss_kb=mem["Pss"], threads=mem["Threads"])

    def measure_agent_windows(self, rnd, proc, logf, cond="window"):
        """Windows of --profile-window s opened back to back until --seconds of window time."""
        win = self.args.profile_window
        n = max(1, round(self.args.seconds / win))
        pipe = self.new_pipe_acc()
        during = after = wall_during = 0.0
        after_each, samples, py_windows, dur_ns = [], 0, 0, 0
        for i in range(n):
            got = len(self.profiles.payloads)
            a0, p0 = tree_cpu(proc.pid)[1], self.pipeline_snapshot()
            self.profiles.command(win)
            time.sleep(max(0.0, p0[0] + win - time.monotonic()))
            a1, p1 = tree_cpu(proc.pid)[1], self.pipeline_snapshot()
            deadline = time.monotonic() + win + 30
            while len(self.profiles.payloads) <= got:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise BenchError(f"round {rnd} window {i + 1}: no profile published "
                                     f"within {win + 30:g} s of cmd/profile; log: {logf.name}")
                time.sleep(0.002)
            a2, t2 = tree_cpu(proc.pid)[1], time.monotonic()
            self.pipeline_span(pipe, p0, p1)
            during += (a1 - a0) / 1e9
            after += (a2 - a1) / 1e9
            after_each.append(round((a2 - a1) / 1e6, 2))
            wall_during += p1[0] - p0[0]
            prof = self.profiles.decode(self.profiles.payloads[got])
            if prof:
                samples += prof["samples"]
                dur_ns += prof["duration_ns"]
                py_windows += any(f["kind"] == "python" for f in prof["frames"])
            log(f"round {rnd} window {i + 1}/{n}: agent {1e3 * (a1 - a0) / 1e9:.1f} ms CPU "
                f"sampling, {1e3 * (a2 - a1) / 1e9:.1f} ms after ({t2 - p1[0]:.2f} s to the "
                f"profile)" + (f"; {prof['samples']} samples" if prof else ""))
        mem = tree_memory(proc.pid)
        return self.profile_record(
            cond, rnd, pipe, tool_cpu_s=during, tool_after_cpu_s=after,
            tool_wall_s=wall_during, tool_pct=100 * during / wall_during,
            tool_total_pct=100 * (during + after) / wall_during, windows=n,
            after_ms_each=after_each, samples=samples,
            samples_per_s=samples / (dur_ns / 1e9) if dur_ns else None,
            python_windows=py_windows, vmhwm_kb=mem["VmHWM"],
            rss_kb=mem["RssAnon"] + mem["RssFile"], rss_anon_kb=mem["RssAnon"],
            pss_kb=mem["Pss"], threads=mem["Threads"])

    def measure_perf(self, rnd, dwarf=False):
        """perf record -e cpu-clock -F 99 -g (--call-graph dwarf,8192 with dwarf) -p PID on the
        pipeline for --seconds."""
        cond = "perf-dwarf" if dwarf else "perf"
        data = os.path.join(self.tmp, f"{cond}-r{rnd}.data")
        logf = open(os.path.join(self.tmp, f"{cond}-r{rnd}.log"), "w")
        pipe = self.new_pipe_acc()
        graph = ["--call-graph", "dwarf,8192"] if dwarf else ["-g"]
        proc = subprocess.Popen([self.args.perf, "record", "-e", "cpu-clock", "-F", "99", *graph,
                                 "-p", str(self.target.pid), "-o", data],
                                stdout=logf, stderr=subprocess.STDOUT,
                                preexec_fn=pinned(self.cpu_mon))
        p0 = self.pipeline_snapshot()
        time.sleep(self.args.seconds)
        c1, p1 = tree_cpu(proc.pid)[1], self.pipeline_snapshot()
        if proc.poll() is not None:
            raise BenchError(f"perf record exited early (status {proc.returncode}); "
                             f"log: {logf.name}")
        proc.send_signal(signal.SIGINT)
        _pid, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        logf.close()
        self.pipeline_span(pipe, p0, p1)
        with open(logf.name, errors="replace") as f:
            text = f.read()
        m = re.search(r"\((\d+) samples\)", text)
        total = ru.ru_utime + ru.ru_stime
        wall = p1[0] - p0[0]
        return self.profile_record(
            cond, rnd, pipe, tool_cpu_s=c1 / 1e9, tool_after_cpu_s=total - c1 / 1e9,
            tool_wall_s=wall, tool_pct=100 * c1 / 1e9 / wall, tool_total_pct=100 * total / wall,
            samples=int(m.group(1)) if m else None,
            samples_per_s=int(m.group(1)) / wall if m else None,
            perf_data_bytes=os.path.getsize(data) if os.path.exists(data) else None,
            vmhwm_kb=ru.ru_maxrss, exit_status=proc.returncode)

    def run_profile_rounds(self):
        self.profiles = ProfileListener(self.port, DEVICE_ID)
        a = self.args
        self.profiler_bytes = {}
        log(f"{a.repeats} rounds of 6 conditions of {a.seconds:g} s "
            f"(~{a.repeats * (6 * (a.seconds + 3) + 3 * a.warmup) / 60:.1f} min)")
        for rnd in range(1, a.repeats + 1):
            off_first = rnd % 2 == 1
            for part in (("off", "on", "fp") if off_first else ("fp", "on", "off")):
                proc, logf = self.start_profile_agent(rnd, part != "off",
                                                      "fp" if part == "fp" else "dwarf")
                try:
                    if part == "off":
                        self.measure_agent_idle("off", rnd, proc)
                        continue
                    if part == "fp":
                        self.measure_agent_windows(rnd, proc, logf, "window-fp")
                        continue
                    self.measure_agent_idle("idle", rnd, proc)
                    steps = [lambda: self.measure_agent_windows(rnd, proc, logf),
                             lambda: self.measure_perf(rnd),
                             lambda: self.measure_perf(rnd, dwarf=True)]
                    for step in (steps if off_first else steps[::-1]):
                        step()
                finally:
                    stop_process(proc)
                    logf.close()

    def report_profile(self):
        a = self.args
        info = self.machine()
        print(f"machine: {info['machine']}")
        print(f"agent: {info['agent']} ({a.agent}); broker: {info['mosquitto']}; "
              f"perf: {info['perf']}")
        print(f"target: pipeline, 100 fps x 3 stages of {self.iterations} iterations (~0.5 ms) "
              f"each in edgemon.span(), edgemon.level() every frame, on CPU {self.cpu_target}; "
              f"agent, perf, broker and harness on CPU {self.cpu_mon}")
        print(f"agent: sample_period {agent_period(a.intervals[0])}; [profile] hz = 99, "
              f"clock = cpu-clock, min_gap_seconds = 0; profiler on: "
              f"{getattr(self, 'profiler_bytes', '?')} bytes by unwind (its log)")
        print(f"method: {a.repeats} rounds; per round the agent with [profile] enabled = false "
              f"('off', {a.seconds:g} s) and with it on ('idle' {a.seconds:g} s, then 'window': "
              f"{max(1, round(a.seconds / a.profile_window))} cmd/profile windows of "
              f"{a.profile_window:g} s back to back with unwind = dwarf, 'perf': perf record -e "
              f"cpu-clock -F 99 -g -p PIPELINE and 'perf-dwarf': the same with --call-graph "
              f"dwarf,8192, each {a.seconds:g} s beside the idle agent), and a third agent with "
              f"unwind = fp for 'window-fp'; {a.warmup:g} s warm-up per agent; medians over "
              "rounds")
        print("CPU: on-CPU ns (/proc/PID/task/*/schedstat) of the agent; perf: the same while "
              "it records, wait4's rusage in all")
        print()
        names = {"off": "agent, [profile] enabled = false", "idle": "agent, profiler on, no window",
                 "window": "agent, window open (99 Hz, unwind = dwarf)",
                 "window-fp": "agent, window open (99 Hz, unwind = fp)",
                 "perf": "perf record -F 99 -g",
                 "perf-dwarf": "perf record -F 99 --call-graph dwarf,8192"}
        med = {}
        for cond in PROFILE_CONDITIONS:
            rs = [r for r in self.results if r["monitor"] == cond]
            if not rs:
                continue
            row = {}
            for k in ("tool_pct", "tool_total_pct", "tool_cpu_s", "tool_after_cpu_s", "vmhwm_kb",
                      "rss_kb", "rss_anon_kb", "pss_kb", "frame_p50_ms", "frame_p99_ms",
                      "frame_max_ms", "pipe_cpu_pct", "pipe_cpu_us_per_frame",
                      "samples_per_s", "tool_wall_s"):
                vals = [r[k] for r in rs if r.get(k) is not None]
                if vals:
                    row[k] = statistics.median(vals)
                    row[k + "_range"] = (min(vals), max(vals))
            row["frames"] = sum(r["frames"] for r in rs)
            row["late"] = sum(r["late"] for r in rs)
            med[cond] = row
        self.profile_medians = med

        def f(row, key, fmt, rng=False):
            if key not in row:
                return "-"
            out = format(row[key], fmt)
            if rng:
                lo, hi = row[key + "_range"]
                out = f"{format(lo, fmt)} / {out} / {format(hi, fmt)}"
            return out

        print("| condition | CPU % of a core, sampling (min / median / max) | CPU % with what "
              "follows (resolution; perf's exit) | samples/s | peak RSS kB | RSS kB "
              "| RssAnon kB | Pss kB |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for cond, row in med.items():
            print(f"| {names[cond]} | {f(row, 'tool_pct', '.3f', True)} "
                  f"| {f(row, 'tool_total_pct', '.3f')} | {f(row, 'samples_per_s', '.1f')} "
                  f"| {f(row, 'vmhwm_kb', '.0f')} | {f(row, 'rss_kb', '.0f')} "
                  f"| {f(row, 'rss_anon_kb', '.0f')} | {f(row, 'pss_kb', '.0f')} |")
        print()
        print("| condition | pipeline frame p50 ms | frame p99 ms (min / median / max) "
              "| frame max ms | pipeline CPU % of a core | pipeline CPU µs per frame "
              "| frames | late |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for cond, row in med.items():
            print(f"| {names[cond]} | {f(row, 'frame_p50_ms', '.3f')} "
                  f"| {f(row, 'frame_p99_ms', '.3f', True)} | {f(row, 'frame_max_ms', '.3f')} "
                  f"| {f(row, 'pipe_cpu_pct', '.2f')} | {f(row, 'pipe_cpu_us_per_frame', '.1f')} "
                  f"| {row['frames']} | {row['late']} |")
        print()
        print("per round:")
        for r in self.results:
            extra = ""
            if r["monitor"] in ("window", "window-fp"):
                extra = (f"; CPU after each window (ms): {r['after_ms_each']}; windows with "
                         f"Python frames {r['python_windows']} of {r['windows']}")
            if r["monitor"] in ("perf", "perf-dwarf"):
                extra = (f"; perf.data {r.get('perf_data_bytes')} bytes, {r.get('samples')} "
                         f"samples, exit {r.get('exit_status')}")
            print(f"  round {r['round']} {r['monitor']:10s}: CPU {r['tool_pct']:.3f}% "
                  f"({r['tool_total_pct']:.3f}% with what follows), pipeline p99 "
                  f"{r.get('frame_p99_ms', float('nan')):.3f} ms, CPU "
                  f"{r['pipe_cpu_pct']:.2f}%{extra}")
        w, pf, idle, off = (med.get(k, {}) for k in ("window", "perf", "idle", "off"))
        wfp, pfd = med.get("window-fp", {}), med.get("perf-dwarf", {})

        def ratio(x, y, key, fmt=".2f"):
            return format(x[key] / y[key], fmt) if key in x and y.get(key) else "n/a"

        def diff(x, y, key, fmt="+.2f"):
            return format(x[key] - y[key], fmt) if key in x and key in y else "n/a"
        print()
        print("ratios (of medians, same run):")
        print(f"  CPU, agent window (dwarf) / perf record --call-graph dwarf: sampling "
              f"{ratio(w, pfd, 'tool_pct')}, with what follows {ratio(w, pfd, 'tool_total_pct')}")
        print(f"  CPU, agent window (fp) / perf record -g: sampling {ratio(wfp, pf, 'tool_pct')}, "
              f"with what follows {ratio(wfp, pf, 'tool_total_pct')}")
        print(f"  CPU, agent window dwarf / fp: sampling {ratio(w, wfp, 'tool_pct')}, with what "
              f"follows {ratio(w, wfp, 'tool_total_pct')}")
        print(f"  pipeline frame p99, window / idle {ratio(w, idle, 'frame_p99_ms', '.3f')}, "
              f"window-fp / idle {ratio(wfp, idle, 'frame_p99_ms', '.3f')}, perf / idle "
              f"{ratio(pf, idle, 'frame_p99_ms', '.3f')}, perf-dwarf / idle "
              f"{ratio(pfd, idle, 'frame_p99_ms', '.3f')}")
        print(f"  pipeline CPU % of a core, window - idle {diff(w, idle, 'pipe_cpu_pct')}, "
              f"perf - idle {diff(pf, idle, 'pipe_cpu_pct')}; µs per frame, window - idle "
              f"{diff(w, idle, 'pipe_cpu_us_per_frame', '+.1f')}, perf - idle "
              f"{diff(pf, idle, 'pipe_cpu_us_per_frame', '+.1f')}")
        print(f"  agent idle CPU, profiler on / off {ratio(idle, off, 'tool_pct')}; RSS on / off "
              f"{ratio(idle, off, 'rss_kb', '.3f')} ({diff(idle, off, 'rss_kb', '+.0f')} kB), "
              f"RssAnon {diff(idle, off, 'rss_anon_kb', '+.0f')} kB; after the windows: "
              f"RssAnon {diff(w, off, 'rss_anon_kb', '+.0f')} kB, peak RSS "
              f"{diff(w, off, 'vmhwm_kb', '+.0f')} kB over off")
        if a.json:
            with open(a.json, "w") as fh:
                json.dump({"info": info, "args": {k: v for k, v in vars(a).items()},
                           "windows": self.results, "medians": med}, fh, indent=1)
            log(f"raw results written to {a.json}")

    # -- callgrind

    def callgrind_run(self, interval, seconds, tag):
        name = f"callgrind-{agent_period(interval)}-{tag}"
        out = os.path.join(self.tmp, f"{name}.out")
        topic = f"edgemon/v1/{DEVICE_ID}/data"
        before = self.sub.topic_count(topic)
        cmd = [self.args.valgrind, "--tool=callgrind", f"--callgrind-out-file={out}",
               self.args.agent, "-c", self.agent_config(interval, name)]
        logf = open(os.path.join(self.tmp, f"{name}.log"), "w")
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT,
                                preexec_fn=pinned(self.cpu_mon))
        time.sleep(seconds)
        if proc.poll() is not None:
            raise BenchError(f"the agent under callgrind exited early; log: {logf.name}")
        stop_process(proc, 30)
        logf.close()
        time.sleep(0.3)  # let the last data message reach the subscriber
        ticks = self.sub.topic_count(topic) - before
        ir = None
        with open(out) as f:
            for line in f:
                if line.startswith("totals:") or (ir is None and line.startswith("summary:")):
                    ir = int(line.split()[1])
        if ir is None:
            raise BenchError(f"no totals/summary line in {out}")
        return {"ir": ir, "ticks": ticks, "seconds": seconds, "out": out}

    def per_function(self, out_file):
        """Exclusive Ir per function (callgrind_annotate), {name: Ir}."""
        if not self.args.callgrind_annotate:
            return {}
        res = subprocess.run([self.args.callgrind_annotate, "--inclusive=no",
                              "--threshold=100", out_file], capture_output=True, text=True)
        funcs = {}
        for line in res.stdout.splitlines():
            m = re.match(r"\s*([0-9,]+)\s+(?:\([^)]*\)\s+)?(\S.*)$", line)
            if m and ":" in m.group(2):
                fn = m.group(2).strip()
                fn = re.sub(r"\s*\[[^\]]*\]$", "", fn)
                funcs[fn] = funcs.get(fn, 0) + int(m.group(1).replace(",", ""))
        return funcs

    def run_callgrind(self):
        self.callgrind = []
        for interval in self.args.callgrind_intervals:
            short = self.callgrind_run(interval, self.args.callgrind_short, "short")
            long_ = self.callgrind_run(interval, self.args.callgrind_long, "long")
            dt = long_["ticks"] - short["ticks"]
            if dt <= 0:
                raise BenchError(f"callgrind at {fmt_interval(interval)}: the long run "
                                 f"published no more ticks than the short one")
            per_tick = (long_["ir"] - short["ir"]) / dt
            expected = (long_["seconds"] - short["seconds"]) / interval
            rec = {"interval_s": interval, "short": short, "long": long_,
                   "ir_per_tick": per_tick, "startup_ir": short["ir"] - per_tick * short["ticks"],
                   "tick_rate": dt / (long_["seconds"] - short["seconds"]),
                   "kept_up": dt / expected}
            f_long, f_short = self.per_function(long_["out"]), self.per_function(short["out"])
            rec["top"] = sorted(((v - f_short.get(k, 0)) / dt, k) for k, v in f_long.items())
            rec["top"] = [(round(v), k) for v, k in reversed(rec["top"][-self.args.top:])]
            self.callgrind.append(rec)
            log(f"callgrind {fmt_interval(interval)}: {short['ticks']} and {long_['ticks']} "
                f"ticks, {short['ir']} and {long_['ir']} Ir -> {per_tick:.0f} Ir/tick")

    # -- report

    def machine(self):
        model = cpu_model()
        def first_line(cmd, pattern=None):
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                return "?"
            for line in (r.stdout + r.stderr).splitlines():
                if pattern is None or re.search(pattern, line):
                    return line.strip()
            return "?"
        return {
            "machine": f"{platform.machine()}, {model}, {os.cpu_count()} online CPUs, "
                       f"Linux {platform.release()}",
            "agent": first_line([self.args.agent, "--version"]),
            "collectd": first_line([self.args.collectd, "-h"], r"^collectd \d"),
            "mosquitto": first_line([self.args.mosquitto, "-h"], r"version"),
            "valgrind": first_line([self.args.valgrind, "--version"])
            if self.args.valgrind else "-",
            "perf": first_line([self.args.perf, "--version"])
            if getattr(self.args, "compare_profile", False) else "-",
        }

    def report(self):
        a = self.args
        info = self.machine()
        print(f"machine: {info['machine']}")
        two_agents = a.compare_write_ahead or a.compare_flight
        peer = "" if two_agents else f"collectd: {info['collectd']}; "
        print(f"agent: {info['agent']} ({a.agent}); {peer}"
              f"broker: {info['mosquitto']}; {info['valgrind']}")
        if a.target == "busy":
            what = "busy Python loop"
        else:
            what = (f"pipeline, 100 fps x 3 stages of {self.iterations} iterations (~0.5 ms) "
                    "each in edgemon.span(), edgemon.level() every frame")
        print(f"target: {what} on CPU {self.cpu_target}; monitor, broker and "
              f"subscriber on CPU {self.cpu_mon}")
        if a.compare_write_ahead:
            print("monitors: edgemon-agent at qos_data = 1 with a spool, [spool] write_ahead = "
                  "true and false")
        if a.compare_flight:
            print("monitors: edgemon-agent with [flight] enabled = true and false (defaults "
                  "otherwise; no budget rule, so no recording is taken)")
        print(f"method: {a.repeats} rounds x {len(a.intervals)} intervals x 2 monitors, each "
              f"alone: {a.warmup:g} s warm-up, {a.seconds:g} s window; monitor order flips "
              "each round")
        print("CPU: utime+stime of the process tree (/proc/PID/stat, 10 ms ticks); 'sched' = "
              "on-CPU ns from /proc/PID/task/*/schedstat")
        print()
        hdr = ("| monitor | interval | CPU % of a core min / median / max | CPU s/min median "
               "| sched CPU % median | peak RSS MiB | threads | msgs/s | payload B/s "
               "| wire B/s |")
        print(hdr)
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        med = {}
        for interval in a.intervals:
            for monitor in self.monitors:
                rs = [r for r in self.results
                      if r["monitor"] == monitor and r["interval_s"] == interval]
                if not rs:
                    continue
                def m(key):
                    return statistics.median(r[key] for r in rs)
                cpu = sorted(r["cpu_pct"] for r in rs)
                row = {k: m(k) for k in ("cpu_pct", "cpu_s_per_min", "sched_cpu_pct",
                                         "sched_cpu_s_per_min", "vmhwm_kb", "rss_anon_kb",
                                         "rss_file_kb", "pss_kb", "msgs_per_s",
                                         "payload_bytes_per_s", "wire_bytes_per_s")}
                for k in ("cpu_mon_busy_pct", "cpu_mon_steal_pct", "cpu_target_busy_pct"):
                    if all(k in r for r in rs):
                        row[k] = m(k)
                row["threads"] = max(r["threads"] for r in rs)
                med[(monitor, interval)] = row
                name = MONITOR_NAMES[monitor]
                print(f"| {name} | {fmt_interval(interval)} "
                      f"| {cpu[0]:.3f} / {row['cpu_pct']:.3f} / {cpu[-1]:.3f} "
                      f"| {row['cpu_s_per_min']:.3f} | {row['sched_cpu_pct']:.4f} "
                      f"| {row['vmhwm_kb'] / 1024:.2f} | {row['threads']} "
                      f"| {row['msgs_per_s']:.2f} | {row['payload_bytes_per_s']:.0f} "
                      f"| {row['wire_bytes_per_s']:.0f} |")
        print()
        print("| monitor | interval | peak RSS kB | RssAnon kB | RssFile kB | Pss kB "
              "| msgs per interval | payload B/msg | sched CPU s/min | sched CPU µs per interval "
              f"| CPU {self.cpu_mon} busy % (all) | CPU {self.cpu_mon} steal % "
              f"| CPU {self.cpu_target} busy % |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for (monitor, interval), row in med.items():
            per_msg = (row["payload_bytes_per_s"] / row["msgs_per_s"]) if row["msgs_per_s"] else 0
            us_int = 1e6 * row["sched_cpu_pct"] / 100 * interval
            name = MONITOR_NAMES[monitor]
            print(f"| {name} | {fmt_interval(interval)} | {row['vmhwm_kb']:.0f} "
                  f"| {row['rss_anon_kb']:.0f} | {row['rss_file_kb']:.0f} | {row['pss_kb']:.0f} "
                  f"| {row['msgs_per_s'] * interval:.3f} | {per_msg:.0f} "
                  f"| {row['sched_cpu_s_per_min']:.4f} | {us_int:.1f} "
                  f"| {row.get('cpu_mon_busy_pct', float('nan')):.1f} "
                  f"| {row.get('cpu_mon_steal_pct', float('nan')):.2f} "
                  f"| {row.get('cpu_target_busy_pct', float('nan')):.1f} |")
        if a.target == "pipeline":
            print()
            print("the pipeline during the windows (totals over rounds): frames, late frames, "
                  "spans it sent")
            for (monitor, interval) in med:
                rs = [r for r in self.results
                      if r["monitor"] == monitor and r["interval_s"] == interval]
                name = MONITOR_NAMES[monitor]
                print(f"  {name:13s} {fmt_interval(interval):>6s}: "
                      f"{sum(r['target_frames'] for r in rs)} frames, "
                      f"{sum(r['target_late'] for r in rs)} late, "
                      f"{sum(r['target_spans'] for r in rs)} spans")
        print()
        first, second = self.monitors
        print(f"headline, {MONITOR_NAMES[first]} / {MONITOR_NAMES[second]} "
              "(ratio of medians, same run):")
        for interval in a.intervals:
            ag, cd = med.get((first, interval)), med.get((second, interval))
            if not ag or not cd:
                continue
            def ratio(x, y):
                return f"{x / y:.3f}" if y else "n/a"
            print(f"  {fmt_interval(interval):>6s}: CPU {ratio(ag['cpu_pct'], cd['cpu_pct'])} "
                  f"(stat), {ratio(ag['sched_cpu_pct'], cd['sched_cpu_pct'])} (sched); "
                  f"peak RSS {ratio(ag['vmhwm_kb'], cd['vmhwm_kb'])}; "
                  f"Pss {ratio(ag['pss_kb'], cd['pss_kb'])}")
        if getattr(self, "callgrind", None):
            print()
            print(f"instructions per tick (callgrind, user space only; runs of "
                  f"{a.callgrind_short:g} s and {a.callgrind_long:g} s, "
                  "(Ir_long - Ir_short) / (ticks_long - ticks_short)):")
            for c in self.callgrind:
                print(f"  {fmt_interval(c['interval_s']):>6s}: {c['ir_per_tick']:.0f} Ir/tick "
                      f"(ticks {c['short']['ticks']} / {c['long']['ticks']}, Ir "
                      f"{c['short']['ir']} / {c['long']['ir']}; start-up + stop ~"
                      f"{c['startup_ir'] / 1e6:.2f} M Ir; under callgrind it ticked "
                      f"{c['tick_rate']:.1f}/s = {100 * c['kept_up']:.0f}% of the period)")
            if self.callgrind[0]["top"]:
                c = self.callgrind[0]
                print(f"  top functions per tick at {fmt_interval(c['interval_s'])} "
                      "(exclusive Ir, long minus short run):")
                for v, k in c["top"]:
                    print(f"    {v:>8d}  {k}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"info": info, "args": {k: v for k, v in vars(a).items()},
                           "windows": self.results,
                           "callgrind": getattr(self, "callgrind", [])}, f, indent=1)
            log(f"raw results written to {a.json}")


# --- command line -------------------------------------------------------------------------


MONITOR_NAMES = {"agent": "edgemon-agent", "collectd": "collectd",
                 "agent-wal": "agent write_ahead", "agent-nowal": "agent no write_ahead",
                 "agent-flight": "agent flight on", "agent-noflight": "agent flight off"}


def default_agent():
    for rel in ("build-bench/firmware/agent/edgemon-agent",
                "build/normal/firmware/agent/edgemon-agent"):
        path = os.path.join(REPO, rel)
        if os.access(path, os.X_OK):
            return path
    return os.path.join(REPO, "build-bench/firmware/agent/edgemon-agent")


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="bench_agent.py",
        description="edgemon-agent's CPU, RSS, threads and MQTT traffic beside collectd doing "
                    "the same work (same target, interval and broker), plus user-space "
                    "instructions per tick under callgrind. Needs mosquitto, collectd "
                    "(Debian collectd-core) and valgrind; scripts/bench-agent.sh installs "
                    "them and builds the agent.")
    p.add_argument("--target", choices=("pipeline", "busy"), default="pipeline",
                   help="what the monitors watch: the 100 fps x 3-span pipeline (default) "
                        "or a busy loop")
    p.add_argument("--agent", default=default_agent(),
                   help="edgemon-agent binary (default: build-bench/..., else build/normal/...)")
    p.add_argument("--seconds", type=float, default=60.0,
                   help="measured window per monitor and interval (default 60)")
    p.add_argument("--warmup", type=float, default=5.0, help="warm-up before each window (5)")
    p.add_argument("--repeats", type=int, default=3, help="rounds (default 3)")
    p.add_argument("--intervals", default="100ms,10ms,1s",
                   help="comma-separated intervals (default 100ms,10ms,1s)")
    p.add_argument("--callgrind-intervals", default="100ms,10ms",
                   help="intervals for the callgrind runs (default 100ms,10ms; '' = none)")
    p.add_argument("--callgrind-short", type=float, default=5.0,
                   help="short callgrind run, seconds (default 5)")
    p.add_argument("--callgrind-long", type=float, default=15.0,
                   help="long callgrind run, seconds (default 15)")
    p.add_argument("--no-callgrind", action="store_true", help="skip the callgrind runs")
    p.add_argument("--compare-write-ahead", action="store_true",
                   help="the agent at qos_data = 1 with [spool] write_ahead = true and false "
                        "instead of the agent and collectd (no callgrind)")
    p.add_argument("--compare-flight", action="store_true",
                   help="the agent with [flight] enabled = true and false instead of the agent "
                        "and collectd (no callgrind)")
    p.add_argument("--compare-profile", action="store_true",
                   help="the agent with no profiling window, during back-to-back cmd/profile "
                        "windows at 99 Hz, and perf record -F 99 -g on the same pipeline "
                        "(no collectd, no callgrind; the first of --intervals)")
    p.add_argument("--profile-window", type=float, default=5.0,
                   help="--compare-profile: seconds of each cmd/profile window (default 5)")
    p.add_argument("--perf", default=shutil.which("perf") or "/usr/bin/perf",
                   help="--compare-profile: the perf binary")
    p.add_argument("--top", type=int, default=12, help="functions listed per tick (12)")
    p.add_argument("--monitor-cpu", type=int, default=0, help="CPU of the monitors (0)")
    p.add_argument("--target-cpu", type=int, default=1, help="CPU of the busy target (1)")
    p.add_argument("--json", metavar="FILE", help="also write every window's figures as JSON")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (configs, logs)")
    p.add_argument("--mosquitto", default="/usr/sbin/mosquitto")
    p.add_argument("--collectd", default="/usr/sbin/collectd")
    p.add_argument("--collectd-plugins", default="/usr/lib/collectd")
    p.add_argument("--collectd-types", default="/usr/share/collectd/types.db")
    p.add_argument("--valgrind", default=shutil.which("valgrind") or "/usr/bin/valgrind")
    a = p.parse_args(argv)
    try:
        a.intervals = [parse_duration(x) for x in a.intervals.split(",") if x.strip()]
        a.callgrind_intervals = [parse_duration(x) for x in a.callgrind_intervals.split(",")
                                 if x.strip()]
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    if a.compare_write_ahead + a.compare_flight + a.compare_profile > 1:
        p.error("--compare-write-ahead, --compare-flight and --compare-profile are different "
                "runs")
    if a.compare_profile and a.target != "pipeline":
        p.error("--compare-profile watches the pipeline target")
    if a.compare_profile and not (1 <= a.profile_window <= 30 and a.profile_window % 1 == 0):
        p.error("--profile-window must be whole seconds, 1..30 (the default max_seconds)")
    if a.no_callgrind or a.compare_write_ahead or a.compare_flight or a.compare_profile:
        a.callgrind_intervals = []
    if a.seconds <= 0 or a.warmup < 0 or a.repeats < 1:
        p.error("--seconds must be > 0, --warmup >= 0, --repeats >= 1")
    if a.callgrind_intervals and a.callgrind_long <= a.callgrind_short:
        p.error("--callgrind-long must be longer than --callgrind-short")
    return a


def check_tools(a):
    missing = []
    def need(path, what):
        if not (path and os.path.isfile(path) and os.access(path, os.X_OK)):
            missing.append(f"{what} ({path or 'not found'})")
    need(a.agent, "edgemon-agent: build it (scripts/bench-agent.sh) or pass --agent PATH")
    need(a.mosquitto, "mosquitto: apt-get install mosquitto")
    if a.compare_profile:
        need(a.perf, "perf: apt-get install linux-perf")
        for mod in ("paho.mqtt.client", "cbor2"):
            try:
                __import__(mod)
            except ImportError:
                missing.append(f"python module {mod}: apt-get install python3-paho-mqtt "
                               "python3-cbor2")
    elif not a.compare_write_ahead and not a.compare_flight:
        need(a.collectd, "collectd: apt-get install collectd-core")
        for plugin in COLLECTD_PLUGINS:
            so = os.path.join(a.collectd_plugins, f"{plugin}.so")
            if not os.path.isfile(so):
                missing.append(f"collectd plugin {so}: apt-get install collectd-core")
        if not os.path.isfile(a.collectd_types):
            missing.append(f"collectd types.db {a.collectd_types}: apt-get install collectd-core")
    a.callgrind_annotate = None
    if a.callgrind_intervals:
        need(a.valgrind, "valgrind: apt-get install valgrind (or --no-callgrind)")
        a.callgrind_annotate = shutil.which("callgrind_annotate")
    else:
        a.valgrind = None
    missing += missing_cpus(((a.monitor_cpu, "--monitor-cpu"), (a.target_cpu, "--target-cpu")),
                            sorted(os.sched_getaffinity(0)))
    exit_if_missing("bench_agent", missing, "missing")


def run_bench(prog, bench, body):
    """Runs body() with bench's processes and temp dir cleaned up afterwards; an exit status.
    A BenchError keeps the temp dir (its logs) and is printed as prog's error."""
    try:
        body()
    except BenchError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        bench.args.keep = True
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    finally:
        bench.close()
    return 0


def main(argv):
    a = parse_args(argv)
    a.agent = os.path.abspath(a.agent)
    check_tools(a)
    os.sched_setaffinity(0, {a.monitor_cpu})  # the harness and its subscriber stay off the target
    bench = Bench(a)

    def body():
        bench.start_broker()
        bench.start_target()
        if a.compare_profile:
            bench.run_profile_rounds()
            bench.report_profile()
            return
        bench.run_windows()
        if a.callgrind_intervals:
            bench.run_callgrind()
        bench.report()

    return run_bench("bench_agent", bench, body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
