#!/usr/bin/python3
"""bench_diagnose.py - the breach diagnosis measured like a classifier: each cause injected into
a real pipeline, and the cause the agent's verdict names first counted against it.

Each run is independent: a fresh mosquitto on a free loopback port, a fresh agent (flight
recorder on, a p50 rule on the pipeline's infer stage) and a fresh pipeline (the Python client,
25 frames a second, the infer stage a busy loop of --busy-ms of its own CPU time, pinned to the
machine's last CPU). The pipeline runs NOMINAL for --baseline-s (the engine needs NOMINAL budget windows before
the breach), then the cause is injected, and the run waits for the state message that raises
the level and reads its verdict (or records "no escalation" after --timeout-s). Clean runs
inject nothing: any cause they name is a false cause.

The causes and how each is injected:
  cpu_contention   --hogs busy processes pinned to the pipeline's CPU (os.sched_setaffinity)
  cpu_throttling   the pipeline in a child cgroup of the cpu controller (v1 here; v2 where it
                   has one) from its start, --quota-us per --period-us set on it at injection
                   (cpu.cfs_quota_us and cpu.cfs_period_us; v2 cpu.max). Only this cause puts
                   the pipeline in a cpu cgroup of its own: a group entity competes with the
                   hogs as one and hides the contention of the cpu_contention runs
  more_work        the stage's busy loop runs --more-work-ms instead of --busy-ms
  memory_pressure  the pipeline in a child memory cgroup limited to --mem-limit-mb; each frame
                   reads --mem-pages pages, at random (MADV_RANDOM, a stride), of a mapped file
                   twice that size (swap is off on the
                   machines this was written for: the file's pages are evicted and read back,
                   major faults on page cache, not anonymous memory)
  io               each frame appends --io-kb kB to a file and fsyncs it, --io-syncs times,
                   inside the stage. The file lies on a disk-backed file system: the run's
                   temporary directory when it is one (ext4 on the reference VM), else one made
                   under /var/tmp, because the agent's io evidence is the target's storage bytes
                   (/proc/<pid>/io write_bytes) and a write to tmpfs reaches no storage
  waiting          each frame takes a lock that another thread holds --hold-ms of every
                   --hold-ms + 2 ms
  frequency_cap    the agent reads a copy of tests/fixtures/boards/generic-x86_64 (sys_root);
                   the copy's cpufreq drops by --freq-divisor, and the stage's busy loop runs
                   that many times as long (the same work on slower cycles: simulated, there is
                   no cpufreq driver to cap on a VM); skipped when the fixture tree is absent
With --realtime the pipeline runs SCHED_FIFO (where allowed: root; a v1 cpu cgroup of its own
is given an RT runtime for it), and for a CPU cause (cpu_contention, cpu_throttling) SCHED_OTHER
from the injection on, so that the hogs and the quota act on it: the machine's other load then
does not delay the stage, so it neither raises the level before the injection nor adds real
contention to another cause (a longer CPU burst waits longer for a loaded CPU, and is rightly
named cpu_contention). Nice would not do: with autogroup a nice value counts only within its
session. tests/integration/test_diagnose_inject.py, the short form, runs with it.
The order of all runs is shuffled with --seed (printed). The confusion table (injected against
named first) and the false-cause rate are printed; --json writes them and every run's verdict.
Cgroups and child processes are removed on every path (also on Ctrl-C). Needs root for the
cgroups; a cause whose cgroup cannot be made is skipped with the reason. A benchmark: it
asserts nothing.

Usage: bench_diagnose.py --agent build/X/firmware/agent/edgemon-agent [--repeats 10]
         [--causes a,b] [--seed N] [--json FILE]
(run with the interpreter that has paho-mqtt and cbor2: /usr/bin/python3)
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(HERE))

import pytest  # noqa: E402  (the integration helpers fail a wait through it)
from bench_diagnose_hog import describe  # noqa: E402  (a verdict on one line)

CAUSES = ["cpu_contention", "cpu_throttling", "more_work", "memory_pressure", "io", "waiting",
          "frequency_cap"]
CLEAN = "clean"
FPS = 25
CGROUP = Path("/sys/fs/cgroup")
FIXTURE = ROOT / "tests" / "fixtures" / "boards" / "generic-x86_64"

CONFIG = ("[flight]\npre_seconds = 3\npost_seconds = 500ms\nmin_gap_seconds = 60\n"
          "[budget.infer]\np50 = {bound}ms\nlevel = DEGRADED\n"
          "[degrade]\nwindow = 500ms\nenter_windows = 2\nleave_windows = 1\n")

# The pipeline: frames at FPS; the infer stage a busy loop of BUSY ms of this thread's CPU time
# (times SCALE once the injection starts), plus the in-process injection MODE from then on.
# It starts injecting when the file GO exists (the bench creates it), and exits when its parent
# is gone.
PIPELINE = r"""
import mmap, os, sys, threading, time
sys.path.insert(0, {client!r})
import edgemon
# {marker}
os.sched_setaffinity(0, {{{cpu!r}}})
MODE, BUSY, SCALE, GO = {mode!r}, {busy!r}, {scale!r}, {go!r}
REALTIME = {realtime!r}
if REALTIME:
    try:  # the machine's other load must not delay the stage before the injection
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except OSError:
        pass
lock = threading.Lock()
if MODE == "waiting":
    def holder():
        while True:
            with lock:
                time.sleep({hold_ms!r} / 1e3)
            time.sleep(0.002)
    started = False
if MODE == "memory_pressure":
    fd = os.open({mem_file!r}, os.O_RDONLY)
    mem = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    mem.madvise(mmap.MADV_RANDOM)  # one page per fault: no readahead hides the misses
    pos = 0
if MODE == "io":
    out = os.open({io_file!r}, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    chunk = b"x" * ({io_kb!r} << 10)
c = edgemon.Client({sock!r})
ppid = os.getppid()
i, on = 0, False
t0 = time.monotonic_ns()
while os.getppid() == ppid:
    if not on and os.path.exists(GO):
        on = True
        if MODE == "waiting":
            threading.Thread(target=holder, daemon=True).start()
        if REALTIME and MODE in ("cpu_contention", "cpu_throttling"):  # on a normal task
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    start = time.monotonic_ns()
    c0 = time.thread_time_ns()
    busy = BUSY * (SCALE if on else 1.0)
    while time.thread_time_ns() - c0 < busy * 1e6:
        pass
    if on and MODE == "waiting":
        with lock:
            pass
    elif on and MODE == "memory_pressure":
        s = 0
        for _ in range({mem_pages!r}):
            s += mem[pos]
            pos = (pos + 4096 * 7919) % len(mem)
    elif on and MODE == "io":
        for _ in range({io_syncs!r}):
            os.write(out, chunk)
            os.fsync(out)
    c.record("infer", start, time.monotonic_ns() - start, frame=i)
    i += 1
    time.sleep(max(0.0, (t0 + i * {period_ns} - time.monotonic_ns()) / 1e9))
"""

HOG = "import os\nos.sched_setaffinity(0, {{{cpu!r}}})\nwhile True:\n    pass\n"


class Cgroup:
    """A child cgroup of one controller (v1) or of the v2 hierarchy, removed by remove().

    v1: a child of this process's cgroup in the controller's own hierarchy. v2: a child of the
    nearest cgroup, from this process's own up to the hierarchy's root, that hands the
    controller to its children or can be made to: a cgroup with processes of its own (this
    one's, usually) cannot, the root can. OSError (with every reason) when none can."""

    def __init__(self, controller, name):
        self.controller = controller
        self.path = None
        v1 = CGROUP / controller
        self.v2 = not (v1 / "tasks").exists()
        base = v2_parent(controller) if self.v2 else v1 / own_cgroup(controller).lstrip("/")
        path = base / name
        path.mkdir()
        self.path = path

    def set(self, key, value):
        (self.path / key).write_text(str(value))

    def remove(self):
        if self.path is None:
            return
        # Anything left in it (a pipeline that did not exit yet) goes back to the parent.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                self.path.rmdir()
                self.path = None
                return
            except OSError:
                for pid in (self.path / "cgroup.procs").read_text().split():
                    try:
                        (self.path.parent / "cgroup.procs").write_text(pid)
                    except OSError:
                        pass
                time.sleep(0.1)
        print(f"warning: could not remove {self.path}", file=sys.stderr)


def own_cgroup(controller):
    """This process's path in the controller's hierarchy ("" for v2's unified one)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        if controller in ctrls.split(",") or (controller == "" and ctrls == ""):
            return path
    return "/"


def v2_parent(controller):
    """The v2 cgroup to make a child of that gets controller (see Cgroup), or OSError. A
    controller it enables in a cgroup's subtree_control stays enabled there."""
    root = next((d for d in (CGROUP, CGROUP / "unified") if (d / "cgroup.controllers").exists()),
                None)
    if root is None:
        raise OSError(f"no {controller} controller in {CGROUP}: neither v1 nor v2 mounted")
    d = root / own_cgroup("").lstrip("/")
    why = []
    while True:
        try:
            if controller in (d / "cgroup.subtree_control").read_text().split():
                return d
            if controller in (d / "cgroup.controllers").read_text().split():
                (d / "cgroup.subtree_control").write_text(f"+{controller}")
                return d
            why.append(f"{d}: no {controller} controller")
        except OSError as e:  # EBUSY: processes of its own; EROFS, EACCES: not ours
            why.append(f"{d}: {e.strerror or e}")
        if d == root:
            raise OSError(f"no cgroup v2 {controller} controller to use: " + "; ".join(why))
        d = d.parent


def stop(proc):
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(10)


def fs_type(path):
    """The type of the file system that holds `path` (the longest mount point over it)."""
    path = os.path.realpath(path)
    best, kind = "", "?"
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) < 3:
                continue
            mnt = fields[1].replace("\\040", " ")
            under = path == mnt or path.startswith(mnt.rstrip("/") + "/")
            if under and len(mnt) > len(best):
                best, kind = mnt, fields[2]
    return kind


class Run:
    """One injected (or clean) run: its own broker, agent, pipeline, cgroups and files."""

    def __init__(self, args, cause, tmp):
        self.args, self.cause = args, cause
        self.tmp = Path(tempfile.mkdtemp(prefix=f"{cause}-", dir=tmp))
        self.io_dir = self.tmp
        if fs_type(self.tmp) in ("tmpfs", "ramfs"):  # no storage: write_bytes would not count
            self.io_dir = Path(tempfile.mkdtemp(prefix=f"edgemon-bench-{cause}-", dir="/var/tmp"))
        self.procs, self.cgroups, self.things = [], [], []
        self.cpu = sorted(os.sched_getaffinity(0))[-1]

    def cleanup(self):
        for p in reversed(self.procs):
            stop(p)
        for t in reversed(self.things):
            try:
                t.close() if hasattr(t, "close") else t.stop()
            except Exception:  # a broker or agent already gone
                pass
        for cg in reversed(self.cgroups):
            cg.remove()
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self.io_dir != self.tmp:
            shutil.rmtree(self.io_dir, ignore_errors=True)

    def execute(self):
        from conftest import Agent, Broker, Subscriber

        a, cause = self.args, self.cause
        name = f"edgemon-bench-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        cpu_cg = mem_cg = None
        if cause == "cpu_throttling":
            cpu_cg = Cgroup("cpu", name)
            self.cgroups.append(cpu_cg)
            if a.realtime and (cpu_cg.path / "cpu.rt_runtime_us").exists():
                try:  # v1 with RT group scheduling: none, and SCHED_FIFO is refused in it
                    cpu_cg.set("cpu.rt_runtime_us", 300000)
                except OSError:
                    pass
        if cause == "memory_pressure":
            mem_cg = Cgroup("memory", name)
            self.cgroups.append(mem_cg)
            mem_file = self.tmp / "working-set"
            with open(mem_file, "wb") as f:
                f.truncate(2 * a.mem_limit_mb << 20)
                block = os.urandom(1 << 20)
                for _ in range(2 * a.mem_limit_mb):
                    f.write(block)
                f.flush()
                os.fsync(f.fileno())
                # Out of the page cache, so that the pipeline's reads charge its own cgroup.
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            mem_cg.set("memory.max" if mem_cg.v2 else "memory.limit_in_bytes",
                       a.mem_limit_mb << 20)
        extra = CONFIG.format(bound=a.bound_ms)
        sys_root = None
        if cause == "frequency_cap":
            sys_root = self.tmp / "board"
            shutil.copytree(FIXTURE, sys_root)
        broker = Broker(self.tmp)
        self.things.append(broker)
        broker.start()
        marker = f"edgemon-bench-diagnose-{uuid.uuid4().hex[:12]}"
        env = None
        if sys_root:
            env = {"EDGEMON_BOARDS_DIR": str(ROOT / "boards")}
        agent = Agent(self.tmp, broker.port, f"cmdline = {marker}", extra=extra, env=env)
        text = agent.config.read_text().replace("sample_period = 100ms\n",
                                                "sample_period = 50ms\n")
        if sys_root:
            text = text.replace("[agent]\n", f"[agent]\nsys_root = {sys_root}\nboard = "
                                f"generic-x86_64\nsensors_period = 200ms\n", 1)
        agent.config.write_text(text)
        self.things.append(agent)
        sub = Subscriber(broker.port, agent.device)
        self.things.append(sub)
        agent.start()
        sub.next("birth", timeout=15)

        scale = 1.0
        if cause == "more_work":
            scale = a.more_work_ms / a.busy_ms
        elif cause == "frequency_cap":
            scale = a.freq_divisor
        go = self.tmp / "go"
        code = PIPELINE.format(
            client=str(ROOT / "firmware/client/python"), marker=marker, cpu=self.cpu,
            realtime=a.realtime,
            mode=cause, busy=float(a.busy_ms), scale=scale, go=str(go),
            mem_file=str(self.tmp / "working-set"), mem_pages=a.mem_pages,
            io_file=str(self.io_dir / "io-out"), io_kb=a.io_kb, hold_ms=a.hold_ms, io_syncs=a.io_syncs,
            sock=str(self.tmp / "run" / "spans.sock"), period_ns=1_000_000_000 // FPS)
        cgs = [cg for cg in (cpu_cg, mem_cg) if cg is not None]

        def enter():  # in the child, before exec: into the cgroups, so the agent reads them
            for cg in cgs:
                (cg.path / "cgroup.procs").write_text(str(os.getpid()))

        pipe = subprocess.Popen([sys.executable, "-c", code], preexec_fn=enter,
                                stdout=subprocess.DEVNULL)
        self.procs.append(pipe)
        t_start = time.monotonic()
        early = wait_state(sub, a.baseline_s)
        if early is not None:
            return outcome("escalated before the injection", early, t_start, pipe)
        # Inject.
        if cause == "cpu_contention":
            for _ in range(a.hogs):
                self.procs.append(subprocess.Popen([sys.executable, "-c",
                                                    HOG.format(cpu=self.cpu)]))
        elif cause == "cpu_throttling":
            if cpu_cg.v2:
                cpu_cg.set("cpu.max", f"{a.quota_us} {a.period_us}")
            else:
                cpu_cg.set("cpu.cfs_period_us", a.period_us)
                cpu_cg.set("cpu.cfs_quota_us", a.quota_us)
        elif cause == "frequency_cap":
            for cur in (sys_root / "sys/devices/system/cpu/cpufreq").glob("policy*/"
                                                                         "scaling_cur_freq"):
                cur.write_text(f"{int(int(cur.read_text()) / a.freq_divisor)}\n")
        go.touch()
        t_inject = time.monotonic()
        state = wait_state(sub, a.timeout_s)
        if state is None:
            return {"outcome": "no escalation", "verdict": None, "top": None,
                    "seconds_after_injection": None, "pipeline_ran": pipe.poll() is None}
        r = outcome("escalated", state, t_start, pipe)
        r["seconds_after_injection"] = round(time.monotonic() - t_inject, 2)
        return r


def wait_state(sub, seconds):
    """The first state message raising the level within seconds, or None."""
    try:
        return sub.next("state", timeout=seconds, pred=lambda m: m["level"] != "NOMINAL")
    except pytest.fail.Exception:
        return None


def outcome(what, state, t_start, pipe):
    """The run's result; rule_value: the statistic the rule judged (the state message's
    value), beside the verdict's breach_ns; pipeline_ran: the pipeline still ran at the end."""
    v = state.get("verdict")
    causes = (v or {}).get("causes") or []
    return {"outcome": what, "level": state["level"], "verdict": v,
            "rule_value": state.get("value"), "top": causes[0]["cause"] if causes else None,
            "seconds_after_start": round(time.monotonic() - t_start, 2),
            "pipeline_ran": pipe.poll() is None}


def table(runs, causes):
    """Rows: injected; columns: named first (none: no verdict cause or no escalation)."""
    named = sorted({r["top"] or "none" for r in runs if not r.get("skipped")})
    cols = [c for c in CAUSES + ["unexplained"] if c in named] + \
        [c for c in named if c not in CAUSES + ["unexplained", "none"]] + \
        (["none"] if "none" in named else [])
    counts = {}
    for r in runs:
        if r.get("skipped"):
            continue
        row = counts.setdefault(r["injected"], {})
        k = r["top"] or "none"
        row[k] = row.get(k, 0) + 1
    return cols, counts


def print_table(cols, counts, causes):
    w = max([len(c) for c in cols] + [5])
    print(f"{'injected / named first':<24}" + "".join(f"{c:>{w + 1}}" for c in cols) +
          f"{'first ok':>10}")
    for inj in causes:
        if inj not in counts:
            continue
        row = counts[inj]
        n = sum(row.values())
        ok = row.get(inj, 0) if inj != CLEAN else row.get("none", 0)
        print(f"{inj:<24}" + "".join(f"{row.get(c, 0):>{w + 1}}" for c in cols) +
              f"{f'{ok}/{n}':>10}")


def parser():
    """The options, with the defaults the long form runs with."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agent", required=True)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--clean", type=int, default=None, help="clean runs (default: --repeats)")
    ap.add_argument("--causes", default=",".join(CAUSES))
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--busy-ms", type=float, default=5.0)
    ap.add_argument("--bound-ms", type=int, default=14)
    ap.add_argument("--hold-ms", type=float, default=40.0)
    ap.add_argument("--freq-divisor", type=float, default=4.0)
    ap.add_argument("--baseline-s", type=float, default=4.5)
    ap.add_argument("--timeout-s", type=float, default=12.0)
    ap.add_argument("--hogs", type=int, default=4)
    ap.add_argument("--quota-us", type=int, default=1000)
    ap.add_argument("--period-us", type=int, default=10000)
    ap.add_argument("--more-work-ms", type=float, default=30.0)
    ap.add_argument("--mem-limit-mb", type=int, default=64)
    ap.add_argument("--mem-pages", type=int, default=400)
    ap.add_argument("--io-kb", type=int, default=64)
    ap.add_argument("--io-syncs", type=int, default=64)
    ap.add_argument("--realtime", action="store_true",
                    help="the pipeline SCHED_FIFO until a CPU cause is injected (root)")
    return ap


def main():
    args = parser().parse_args()
    os.environ["EM_AGENT"] = os.path.abspath(args.agent)
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    causes = [c for c in args.causes.split(",") if c]
    plan = [c for c in causes for _ in range(args.repeats)]
    plan += [CLEAN] * (args.repeats if args.clean is None else args.clean)
    random.Random(seed).shuffle(plan)
    load0 = os.getloadavg()
    print(f"seed {seed}; {len(plan)} runs; load average {load0[0]:.2f} {load0[1]:.2f} "
          f"{load0[2]:.2f}; {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}", flush=True)
    # Ctrl-C and SIGTERM both end the current run through its finally.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    runs, skip_why = [], {}
    if not FIXTURE.exists():
        skip_why["frequency_cap"] = f"no fixture tree {FIXTURE}"
    tmp = tempfile.mkdtemp(prefix="bench-diagnose-")
    try:
        for i, cause in enumerate(plan):
            if cause in skip_why:
                runs.append({"injected": cause, "skipped": skip_why[cause]})
                continue
            run = None
            try:
                run = Run(args, cause, tmp)
                r = run.execute()
            except OSError as e:
                if "cgroup" in str(e).lower() or e.errno in (1, 13):
                    skip_why[cause] = str(e)  # the next runs of it would fail alike
                r = {"outcome": f"error: {e}", "verdict": None, "top": None}
            except (Exception, pytest.fail.Exception) as e:  # no birth, a broker that died
                r = {"outcome": f"error: {e}", "verdict": None, "top": None}
            finally:
                if run is not None:
                    run.cleanup()
            r["injected"] = cause
            runs.append(r)
            print(f"run {i + 1:3d} {cause:<16} {r['outcome']}: top {r['top']}: "
                  f"{describe(r['verdict'])}", flush=True)
    except KeyboardInterrupt:
        print("interrupted: the table holds the runs so far", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load1 = os.getloadavg()
    order = causes + [CLEAN]
    cols, counts = table(runs, order)
    print()
    print_table(cols, counts, order)
    clean = [r for r in runs if r["injected"] == CLEAN and not r.get("skipped")]
    false = [r for r in clean if r["top"] is not None]
    rate = len(false) / len(clean) if clean else None
    print(f"\nfalse-cause rate (clean runs naming a cause): {len(false)}/{len(clean)}")
    for c, why in skip_why.items():
        print(f"skipped {c}: {why}")
    print(f"load average at the end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": seed, "args": vars(args), "load_start": load0, "load_end": load1,
                       "columns": cols, "confusion": counts, "false_cause_rate": rate,
                       "skipped": skip_why, "runs": runs}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
