#!/usr/bin/python3
"""bench_idle_rss.py - where an idle edgemon-agent's resident memory goes, beside collectd.

Starts a private mosquitto on a free 127.0.0.1 port (TLS off), a target that only sleeps
(`python3 -c 'import time; time.sleep(1e6)'` with a marker in its command line) and then, one
after the other, each monitor watching it:
  agent     edgemon-agent with [agent] device_id and runtime_dir (a temp dir), [target] pid
            and [mqtt] broker = mqtt://127.0.0.1:PORT; everything else by default;
  agent-window  with --after-window: the same agent, then one 2 s profiling window opened by
            cmd/profile, read --settle seconds after its profile arrived (libdw loaded);
  agent-before  the same for a second binary, --before (another build: the change's effect in
            the same run), when given;
  floor     tests/bench/bench_idle_floor.c, built here with cc against libuv and libmosquitto:
            a client driven the agent's way that publishes once a second and does nothing else,
            the floor under any agent with these libraries (skipped without cc);
  collectd  collectd 5.12 (Debian's collectd-core) at Interval 1 with bench_agent.py's
            configuration, the peer measurements': logfile, cpu, memory, processes
            (ProcessMatch on the marker) and mqtt (one <Publish> block to the same broker,
            QoS 0). Skipped when --collectd is not installed.
Each runs alone for --settle seconds (idle: the target does nothing, no profile window, no
recording), then the figures are read from /proc/PID:
  - smaps_rollup: Rss, Pss, Anonymous; status: RssAnon, RssFile, VmHWM, Threads;
  - smaps, mapping by mapping, summed by what backs it: each shared object by file name
    (its Rss and the Anonymous part of it: relocated and written pages), the executable,
    [heap], [stack], thread stacks (an anonymous mapping right above a PROT_NONE guard of its
    own, the way glibc maps a pthread stack), other anonymous mappings, the kernel's
    [vvar]/[vdso].
With --repeats N the monitors are started N times, interleaved, and each figure printed as the
median (min-max). --allocs runs the agent once more with tests/bench/bench_alloc_trace.c
preloaded (built here with cc): every malloc/calloc of 16 KiB or more, its resident pages from
/proc/PID/pagemap (present bit) and its caller's file:line (addr2line), so the anonymous
figures can be charged to the code that holds them. A benchmark, not a test: it asserts
nothing.

Usage: bench_idle_rss.py --agent build/X/firmware/agent/edgemon-agent [--before OTHER_AGENT]
       [--settle 10] [--repeats 3] [--collectd /usr/sbin/collectd] [--env NAME=VALUE ...]
       [--allocs]
"""

import argparse
import os
import platform
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

MARKER = "edgemon-idle-rss-target"
DEVICE = "idle-rss"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_agent  # noqa: E402  (its collectd configuration)


def stop(proc, timeout=5.0):
    bench_agent.stop_process(proc, timeout)


def first_line(cmd, pattern):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    for line in (r.stdout + r.stderr).splitlines():
        if re.search(pattern, line):
            return line.strip()
    return "?"


def kv_file(path):
    """'Name: value kB' lines as {name: int} (kB where the file says so)."""
    out = {}
    with open(path) as f:
        for line in f:
            name, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                out[name.strip()] = int(parts[0])
    return out


MAP_RE = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \d+\s*(.*)$")


def smaps_groups(pid, exe):
    """{group: [rss_kb, anonymous_kb]} from /proc/PID/smaps (see the module's text)."""
    groups = {}
    maps = []
    cur = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            m = MAP_RE.match(line)
            if m:
                cur = {"start": int(m.group(1), 16), "end": int(m.group(2), 16),
                       "perms": m.group(3), "path": m.group(4).strip(), "Rss": 0,
                       "Anonymous": 0}
                maps.append(cur)
                continue
            name, _, rest = line.partition(":")
            if cur is not None and name in ("Rss", "Anonymous"):
                cur[name] = int(rest.split()[0])
    exe_real = os.path.realpath(exe) if exe else None
    for i, mp in enumerate(maps):
        path = mp["path"]
        if path.startswith("[") or not path:
            if path in ("[heap]", "[stack]", "[vdso]", "[vvar]", "[vsyscall]"):
                group = "kernel [vvar]/[vdso]" if path != "[heap]" and path != "[stack]" \
                    else path
            elif path:
                group = path
            else:
                prev = maps[i - 1] if i else None
                guard = prev is not None and prev["end"] == mp["start"] and \
                    prev["perms"].startswith("---") and not prev["path"]
                size_kb = (mp["end"] - mp["start"]) // 1024
                if guard and size_kb >= 1024:
                    group = "thread stacks"
                elif mp["perms"].startswith("---"):
                    group = "anon guards"
                else:
                    group = "anon (other)"
        elif exe_real and os.path.realpath(path.replace(" (deleted)", "")) == exe_real:
            group = "executable"
        else:
            group = os.path.basename(path)
        g = groups.setdefault(group, [0, 0])
        g[0] += mp["Rss"]
        g[1] += mp["Anonymous"]
    return groups


def measure(pid, exe):
    roll = kv_file(f"/proc/{pid}/smaps_rollup")
    status = kv_file(f"/proc/{pid}/status")
    return {"Rss": roll.get("Rss", 0), "Pss": roll.get("Pss", 0),
            "RssAnon": status.get("RssAnon", 0), "RssFile": status.get("RssFile", 0),
            "VmHWM": status.get("VmHWM", 0), "Threads": status.get("Threads", 0),
            "groups": smaps_groups(pid, exe)}


class Bench:
    def __init__(self, args):
        self.a = args
        self.args = args  # the names bench_agent.Bench.collectd_config reads
        self.marker = MARKER
        self.tmp = tempfile.mkdtemp(prefix="em-idle-rss.")
        self.procs = []

    def close(self):
        for p in reversed(self.procs):
            stop(p)
        if self.a.keep:
            print(f"kept {self.tmp}", file=sys.stderr)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self):
        try:
            self.port, broker = bench_agent.start_broker(self.a.mosquitto, self.tmp)
        except bench_agent.BenchError:
            sys.exit("bench_idle_rss: mosquitto did not start")
        self.procs.append(broker)
        self.target = subprocess.Popen(
            ["/usr/bin/python3", "-c", "import time; time.sleep(1e6)", MARKER])
        self.procs.append(self.target)

    def build_floor(self):
        """bench_idle_floor.c built with cc and pkg-config; None when that fails."""
        out = os.path.join(self.tmp, "bench_idle_floor")
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libuv", "libmosquitto"],
                               capture_output=True, text=True)
        if flags.returncode != 0 or not shutil.which("cc"):
            return None
        r = subprocess.run(["cc", "-O2", "-o", out, os.path.join(HERE, "bench_idle_floor.c")]
                           + flags.stdout.split(), capture_output=True, text=True)
        return out if r.returncode == 0 else None

    def agent_cmd(self, n, binary):
        rundir = os.path.join(self.tmp, f"agent{n}.run")
        os.makedirs(rundir, exist_ok=True)
        path = os.path.join(self.tmp, f"agent{n}.ini")
        with open(path, "w") as f:
            f.write(f"[agent]\ndevice_id = {DEVICE}\nruntime_dir = {rundir}\n\n"
                    f"[target]\npid = {self.target.pid}\n\n"
                    f"[mqtt]\nbroker = mqtt://127.0.0.1:{self.port}\n")
        return [binary, "--config", path], binary

    # bench_agent.py's collectd configuration, the peers' (docs/BENCHMARKS.md): the same file
    # the CPU benchmark gives it, so the two compare the same collectd.
    collectd_config = bench_agent.Bench.collectd_config

    def collectd_cmd(self, n):
        try:
            path = self.collectd_config(1, f"collectd{n}")
        except bench_agent.BenchError as e:
            sys.exit(f"bench_idle_rss: {e}")
        return [self.a.collectd, "-f", "-C", path], self.a.collectd

    def allocs(self):
        """[(resident kB, size kB, caller)] of the agent's blocks of 16 KiB or more, largest
        resident first; None when the tracer cannot be built."""
        lib = os.path.join(self.tmp, "bench_alloc_trace.so")
        r = subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", lib,
                            os.path.join(HERE, "bench_alloc_trace.c")], capture_output=True)
        if r.returncode != 0:
            return None
        log = os.path.join(self.tmp, "allocs.log")
        cmd, exe = self.agent_cmd("-allocs", self.a.agent)
        env = dict(os.environ, LD_PRELOAD=lib, BENCH_ALLOC_LOG=log)
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        rows = []
        try:
            time.sleep(self.a.settle)
            with open(f"/proc/{p.pid}/pagemap", "rb") as pm, open(log) as f:
                for line in f:
                    addr, size, obj, off = line.split()
                    addr, size = int(addr, 16), int(size)
                    first, last = addr // 4096, (addr + size - 1) // 4096
                    pm.seek(first * 8)
                    data = pm.read((last - first + 1) * 8)
                    present = sum(1 for (v,) in struct.iter_unpack("<Q", data) if v >> 63)
                    rows.append((present * 4, size // 1024, obj, off))
        finally:
            stop(p)
        out = []
        for kb, size_kb, obj, off in sorted(rows, reverse=True):
            where = f"{os.path.basename(obj)}+{off}"
            if os.path.realpath(obj) == os.path.realpath(exe):
                a2l = subprocess.run(["addr2line", "-i", "-f", "-s", "-e", exe, off],
                                     capture_output=True, text=True).stdout.split("\n")
                where = " < ".join(f"{a2l[i]} {a2l[i + 1]}" for i in range(0, len(a2l) - 1, 2))
            out.append((kb, size_kb, where))
        return out

    def one_window(self):
        """A 2 s profiling window by cmd/profile (bench_agent.py's listener), waited for
        until its profile is published."""
        listener = bench_agent.ProfileListener(self.port, DEVICE)
        try:
            listener.command(2)
            deadline = time.monotonic() + 30
            while not listener.payloads:
                if time.monotonic() > deadline:
                    sys.exit("bench_idle_rss: no profile within 30 s of cmd/profile")
                time.sleep(0.1)
        finally:
            listener.close()

    def run_one(self, name, n):
        if name in ("agent", "agent-window"):
            cmd, exe = self.agent_cmd(n, self.a.agent)
        elif name == "agent-before":
            cmd, exe = self.agent_cmd(n, self.a.before)
        elif name == "floor":
            cmd, exe = [self.floor, "127.0.0.1", str(self.port)], self.floor
        else:
            cmd, exe = self.collectd_cmd(n)
        env = dict(os.environ)
        for kv in self.a.env:
            k, _, v = kv.partition("=")
            env[k] = v
        log = open(os.path.join(self.tmp, f"{name}{n}.log"), "w")
        p = subprocess.Popen(cmd, stdout=log, stderr=log, env=env)
        try:
            time.sleep(self.a.settle)
            if name == "agent-window":
                self.one_window()
                time.sleep(self.a.settle)
            if p.poll() is not None:
                sys.exit(f"bench_idle_rss: {name} exited ({p.returncode}); "
                         f"see {self.tmp}/{name}{n}.log (--keep)")
            return measure(p.pid, exe)
        finally:
            stop(p)
            log.close()


def med(values):
    return f"{statistics.median(values):.0f}" if len(values) == 1 else \
        f"{statistics.median(values):.0f} ({min(values)}-{max(values)})"


def report(name, runs):
    keys = ["Rss", "RssAnon", "RssFile", "Pss", "VmHWM", "Threads"]
    print(f"\n{name}: " + ", ".join(f"{k} {med([r[k] for r in runs])}"
                                    + ("" if k == "Threads" else " kB") for k in keys))
    names = set()
    for r in runs:
        names.update(r["groups"])
    rows = []
    for g in names:
        rss = [r["groups"].get(g, [0, 0])[0] for r in runs]
        anon = [r["groups"].get(g, [0, 0])[1] for r in runs]
        rows.append((statistics.median(rss), g, rss, anon))
    rows.sort(key=lambda t: (-t[0], t[1]))
    print(f"  {'mapping':<34} {'Rss kB':>16} {'of it Anonymous kB':>20}")
    for _, g, rss, anon in rows:
        if statistics.median(rss) == 0:
            continue
        print(f"  {g:<34} {med(rss):>16} {med(anon):>20}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--agent", required=True)
    p.add_argument("--before", help="a second edgemon-agent binary, measured the same way")
    p.add_argument("--mosquitto", default="/usr/sbin/mosquitto")
    p.add_argument("--collectd", default="/usr/sbin/collectd")
    p.add_argument("--collectd-plugins", default="/usr/lib/collectd")
    p.add_argument("--collectd-types", default="/usr/share/collectd/types.db")
    p.add_argument("--settle", type=float, default=10.0, help="seconds before reading")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--env", action="append", default=[],
                   help="NAME=VALUE for the agent's and collectd's environment")
    p.add_argument("--keep", action="store_true", help="keep the temp dir")
    p.add_argument("--after-window", action="store_true",
                   help="also the agent after one 2 s profiling window (cmd/profile; needs "
                   "paho-mqtt and cbor2), read --settle seconds after its profile")
    p.add_argument("--allocs", action="store_true",
                   help="also charge the agent's big blocks to their callers (see above)")
    a = p.parse_args()
    a.agent = os.path.abspath(a.agent)
    monitors = ["agent"] + (["agent-window"] if a.after_window else [])
    if a.before:
        a.before = os.path.abspath(a.before)
        monitors.insert(0, "agent-before")
    b = Bench(a)
    try:
        b.start()
        b.floor = b.build_floor()
        if b.floor:
            monitors.append("floor")
        if os.access(a.collectd, os.X_OK):
            monitors.append("collectd")
        cpu = first_line(["lscpu"], r"^Model name")
        print(f"machine: {platform.machine()}, {cpu.split(':', 1)[-1].strip()}, "
              f"{os.cpu_count()} CPUs, Linux {platform.release()}")
        peer = first_line([a.collectd, "-h"], r"^collectd \d") if "collectd" in monitors \
            else "not installed"
        print(f"agent: {a.agent}" + (f"; before: {a.before}" if a.before else "")
              + f"; broker: {first_line([a.mosquitto, '-h'], r'version')}; "
              f"collectd: {peer}")
        print(f"method: {a.repeats} rounds, monitors one at a time watching a sleeping python3, "
              f"TLS off, read after {a.settle:g} s; median (min-max) over rounds")
        runs = {m: [] for m in monitors}
        for n in range(a.repeats):
            order = monitors if n % 2 == 0 else list(reversed(monitors))
            for m in order:
                runs[m].append(b.run_one(m, n))
        for m in monitors:
            report(m, runs[m])
        if a.allocs:
            rows = b.allocs()
            if rows is None:
                print("\nallocs: bench_alloc_trace.c did not build")
            else:
                print(f"\nagent's blocks of 16 KiB or more, resident after {a.settle:g} s "
                      f"(resident kB / size kB, caller; total resident "
                      f"{sum(r[0] for r in rows)} kB):")
                for kb, size_kb, where in rows:
                    if kb:
                        print(f"  {kb:6d} / {size_kb:6d}  {where}")
    finally:
        b.close()


if __name__ == "__main__":
    main()
