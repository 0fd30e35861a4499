#!/usr/bin/python3
"""bench_span_pipeline.py - the design's case: a 100 fps pipeline with 3 spans per frame.

What the span path costs in the setting edgemon is built for, measured on both sides: the
agent (its CPU while it ingests the spans) and the inference process (its CPU per frame).

The pipeline is a separate /usr/bin/python3 process (this file run with --pipeline, with
PYTHONPATH=firmware/client/python). It runs --fps frames per second (default 100), paced by
absolute deadlines on time.monotonic (frame n is due at start + n * period; the process
sleeps until the next frame's deadline). Each frame reads edgemon.level() and runs three
stages (preprocess, infer, postprocess), each a busy Python loop of a fixed iteration count
calibrated once per run to take --stage-ms (default 0.5 ms) on the pipeline's CPU, so both
modes do exactly the same work:

  nospans  the three stages and edgemon.level(), no span;
  spans    edgemon.set_frame(n), then each stage inside `with edgemon.span(name):`.

A frame is late when its work ends after its deadline + one period. A pipeline more than
10 periods behind drops the frames it missed (counted as skipped) instead of running them
back to back.

The agent (<--build>/firmware/agent/edgemon-agent) watches the pipeline's pid at
sample_period = --period (default 100ms) and publishes to a private mosquitto on a free
127.0.0.1 port (tests/bench/bench_agent.py's broker and agent configuration: everything
else by default). The agent, the broker and this harness are pinned to --agent-cpu (0), the
pipeline to --pipeline-cpu (1); with a single CPU everything shares it.

Rounds: --rounds (3) x the two modes, interleaved (nospans, spans, nospans, spans, ...).
Each round starts a fresh pipeline and a fresh agent, waits --warmup seconds (3; the client
connects within 1 s of the agent's start) and then measures a --seconds (30) window:
  - agent CPU: utime+stime from /proc/PID/stat (10 ms clock ticks) over the window's wall
    time, % of one core; also 'sched': on-CPU ns from /proc/PID/task/*/schedstat.
  - pipeline CPU per frame: the pipeline's own utime+stime (and schedstat ns) over the
    frames it ran in the window.
  - agent wake-ups: voluntary context switches of the agent's threads per second
    (/proc/PID/task/*/status), i.e. how often it went to sleep and was woken;
  - pipeline preempted: the pipeline's involuntary context switches per second;
  - frames, frames late, frames skipped, spans the client sent (datagrams plus ring slots
    written) and dropped (its stats(), read every 100 frames, so these two are exact to 300
    spans).
  - spans the agent counted: the stage counts of the data messages it published during the
    window (a paho subscriber, python3-paho-mqtt + python3-cbor2; skipped with a note when
    either is missing).

Report: per mode the median and min..max over rounds, then
  agent CPU ratio = median agent CPU (spans) / median agent CPU (nospans)
  pipeline extra CPU per span = (median CPU per frame (spans) - (nospans)) / 3, in us.

Usage: /usr/bin/python3 tests/bench/bench_span_pipeline.py [--build build/normal]
           [--rounds 3] [--seconds 30] [--json FILE]
Needs mosquitto and a built edgemon-agent (Release or RelWithDebInfo). Results are written up
in docs/BENCHMARKS.md ("The design's case: a 100 fps pipeline with 3 spans per frame").
"""

import argparse
import json
import mmap
import os
import platform
import statistics
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"
STAGES = ("preprocess", "infer", "postprocess")
MODES = ("nospans", "spans")
# The pipeline's shared counters: frames, late, skipped, spans sent, spans dropped.
COUNTERS = struct.Struct("<5Q")
# --frame-times: frame n's work (edgemon.level() and the three stages) in microseconds, a
# little-endian uint32 at slot n % FRAME_TIMES_SLOTS, written before the frame is counted.
FRAME_TIMES_SLOTS = 65536
MAX_BEHIND_PERIODS = 10


def log(msg):
    print(f"bench_span_pipeline: {msg}", file=sys.stderr, flush=True)


# --- the pipeline process -----------------------------------------------------------------


def stage_work(iterations):
    """The stand-in for a stage: a busy loop of interpreted Python."""
    acc = 0
    for i in range(iterations):
        acc ^= i
    return acc


def calibrate(stage_ms):
    """Iterations of stage_work that take stage_ms on this CPU (best of several tries)."""
    probe = 20000
    best = None
    for _ in range(15):
        t0 = time.perf_counter()
        stage_work(probe)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return max(1, round(probe * stage_ms / 1000.0 / best))


def pipeline_main(mode, iterations, fps, counters_path, frame_times_path=None):
    """Runs frames until killed; publishes its counters in the mapped file counters_path and,
    with frame_times_path, each frame's work time in that file's ring (FRAME_TIMES_SLOTS)."""
    import edgemon

    with open(counters_path, "r+b") as f:
        counters = mmap.mmap(f.fileno(), COUNTERS.size)
    times = None
    if frame_times_path:
        with open(frame_times_path, "r+b") as f:
            times = mmap.mmap(f.fileno(), 4 * FRAME_TIMES_SLOTS)
        put_time = struct.Struct("<I").pack_into
    pack_into = COUNTERS.pack_into
    period = 1.0 / fps
    monotonic = time.monotonic
    level, span, set_frame, stats = edgemon.level, edgemon.span, edgemon.set_frame, edgemon.stats
    with_spans = mode == "spans"
    frames = late = skipped = sent = dropped = 0
    deadline = monotonic()
    while True:
        if times is not None:
            start = monotonic()
        level()
        if with_spans:
            set_frame(frames)
            with span("preprocess"):
                stage_work(iterations)
            with span("infer"):
                stage_work(iterations)
            with span("postprocess"):
                stage_work(iterations)
        else:
            stage_work(iterations)
            stage_work(iterations)
            stage_work(iterations)
        end = monotonic()
        if times is not None:
            put_time(times, 4 * (frames % FRAME_TIMES_SLOTS),
                     min(0xFFFFFFFF, int((end - start) * 1e6)))
        frames += 1
        if end > deadline + period:
            late += 1
        if with_spans and frames % 100 == 0:
            s = stats()
            # Datagrams plus the slots written to rings (stats() counts them apart).
            sent = s["sent"] + s.get("rings", {}).get("written", 0)
            dropped = sum(s["dropped"].values())
        deadline += period
        behind = end - deadline
        if behind > MAX_BEHIND_PERIODS * period:
            missed = int(behind / period)
            skipped += missed
            deadline += missed * period
        pack_into(counters, 0, frames, late, skipped, sent, dropped)
        wait = deadline - monotonic()
        if wait > 0:
            time.sleep(wait)


def read_frame_times(path, first, last):
    """Work times in us of frames first..last-1 from a --frame-times file (the most recent
    FRAME_TIMES_SLOTS of them at most)."""
    first = max(first, last - FRAME_TIMES_SLOTS)
    with open(path, "rb") as f:
        data = f.read(4 * FRAME_TIMES_SLOTS)
    vals = struct.unpack(f"<{FRAME_TIMES_SLOTS}I", data)
    return [vals[n % FRAME_TIMES_SLOTS] for n in range(first, last)]


def read_counters(path):
    """The pipeline's counters, read until two reads agree (the writer does not lock)."""
    with open(path, "rb") as f:
        prev = f.read(COUNTERS.size)
        for _ in range(100):
            f.seek(0)
            cur = f.read(COUNTERS.size)
            if cur == prev:
                break
            prev = cur
    return dict(zip(("frames", "late", "skipped", "sent", "dropped"), COUNTERS.unpack(cur)))


# --- the harness --------------------------------------------------------------------------


class SpanCounter:
    """Sums the stage-window counts of the agent's data messages (paho + edgemon_proto)."""

    def __init__(self, port, device):
        import paho.mqtt.client as mqtt

        sys.path.insert(0, os.path.join(REPO, "proto", "python"))
        import edgemon_proto

        self.decode = edgemon_proto.decode
        self.total = 0
        self.messages = 0
        self.errors = 0
        kw = {}
        if hasattr(mqtt, "CallbackAPIVersion"):  # paho 2.x
            kw["callback_api_version"] = mqtt.CallbackAPIVersion.VERSION1
        self.client = mqtt.Client(client_id=f"bench-spans-{os.getpid()}", **kw)
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port, keepalive=60)
        self.client.subscribe(f"edgemon/v1/{device}/data", qos=0)
        self.client.loop_start()

    def _on_message(self, client, userdata, m):
        try:
            msg = self.decode(m.payload)
        except ValueError:
            self.errors += 1
            return
        self.messages += 1
        self.total += sum(s.get("count", 0) for s in msg.get("stages", []))

    def snapshot(self):
        return self.total, self.messages

    def close(self):
        self.client.loop_stop()
        self.client.disconnect()


def ctx_switches(pid):
    """(voluntary, involuntary) context switches of every thread of pid (0, 0 when gone)."""
    vol = invol = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return 0, 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        vol += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches:"):
                        invol += int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return vol, invol


def build_info(build):
    """CMAKE_BUILD_TYPE and EDGEMON_SANITIZE from the build dir's CMakeCache.txt."""
    out = {"build_type": "?", "sanitize": "?"}
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("CMAKE_BUILD_TYPE:"):
                    out["build_type"] = line.split("=", 1)[1].strip() or "(none)"
                elif line.startswith("EDGEMON_SANITIZE:"):
                    out["sanitize"] = line.split("=", 1)[1].strip()
    except OSError:
        pass
    return out


def summarize(values):
    vs = sorted(values)
    return {"median": statistics.median(vs), "min": vs[0], "max": vs[-1]}


def spread_text(v, fmt):
    """A summarize() result as "median (min..max)", each with `fmt`; "-" for None."""
    if v is None:
        return "-"
    return f"{v['median']:{fmt}} ({v['min']:{fmt}}..{v['max']:{fmt}})"


def by_mode(results, modes):
    """(mode, the results of that mode's windows) for each of `modes` that has any."""
    for mode in modes:
        mr = [r for r in results if r["mode"] == mode]
        if mr:
            yield mode, mr


def make_bench_class(bench_agent):
    class PipelineBench(bench_agent.Bench):
        """bench_agent.Bench's broker, agent configuration and clean-up, with a pipeline as
        the target: self.target is the current round's pipeline process."""

        def __init__(self, args):
            super().__init__(args)
            self.ba = bench_agent
            self.spans = None
            self.iterations = args.iterations

        def start_span_counter(self):
            try:
                self.spans = SpanCounter(self.port, bench_agent.DEVICE_ID)
            except ImportError as e:
                log(f"spans counted by the agent: not measured ({e}; needs python3-paho-mqtt "
                    "and python3-cbor2)")
            except OSError as e:
                raise bench_agent.BenchError(f"paho could not connect to the broker: {e}")

        def calibrate(self):
            if self.iterations:
                return
            r = subprocess.run([PYTHON, os.path.abspath(__file__), "--calibrate",
                                "--stage-ms", repr(self.args.stage_ms)],
                               capture_output=True, text=True,
                               preexec_fn=bench_agent.pinned(self.cpu_target))
            if r.returncode != 0:
                raise bench_agent.BenchError(f"calibration failed: {r.stderr.strip()}")
            self.iterations = int(r.stdout.split()[0])
            log(f"calibrated: {self.iterations} iterations per stage = "
                f"{self.args.stage_ms:g} ms on CPU {self.cpu_target}")

        def start_pipeline(self, mode, name):
            counters = os.path.join(self.tmp, f"{name}.counters")
            with open(counters, "wb") as f:
                f.write(bytes(COUNTERS.size))
            env = {k: v for k, v in os.environ.items()
                   if k not in ("EDGEMON_SOCKET", "EDGEMON_STATE_PAGE", "PYTHONPATH")}
            env["PYTHONPATH"] = os.path.join(REPO, "firmware", "client", "python")
            # bench_agent.Bench.agent_config puts the agent's runtime_dir here.
            env["EDGEMON_RUNTIME_DIR"] = os.path.join(self.tmp, f"{name}.run")
            logf = open(os.path.join(self.tmp, f"{name}.pipeline.log"), "w")
            proc = subprocess.Popen(
                [PYTHON, os.path.abspath(__file__), "--pipeline", mode, "--iterations",
                 str(self.iterations), "--fps", repr(self.args.fps), "--counters", counters],
                env=env, stdout=logf, stderr=subprocess.STDOUT,
                preexec_fn=bench_agent.pinned(self.cpu_target))
            logf.close()
            return proc, counters

        def pipeline_cpu(self, pid):
            st = bench_agent.read_stat(pid)
            if st is None:
                raise bench_agent.BenchError("the pipeline exited")
            return st[1], bench_agent.schedstat_ns(pid), ctx_switches(pid)[1]

        def run_round(self, mode, rnd):
            a, ba = self.args, bench_agent
            name = f"{mode}-r{rnd}"
            pipeline, counters = self.start_pipeline(mode, name)
            self.target = pipeline
            agent = None
            logf = open(os.path.join(self.tmp, f"{name}.agent.log"), "w")
            try:
                agent = subprocess.Popen([a.agent, "-c", self.agent_config(a.period, name)],
                                         stdout=logf, stderr=subprocess.STDOUT,
                                         preexec_fn=ba.pinned(self.cpu_mon))
                time.sleep(a.warmup)
                for proc, what in ((agent, "the agent"), (pipeline, "the pipeline")):
                    if proc.poll() is not None:
                        raise ba.BenchError(f"{what} exited during the warm-up (status "
                                            f"{proc.returncode}); logs in {self.tmp}")
                s0 = self.spans.snapshot() if self.spans else None
                c0, a0, p0 = read_counters(counters), ba.tree_cpu(agent.pid), \
                    self.pipeline_cpu(pipeline.pid)
                w0 = ctx_switches(agent.pid)[0]
                t0 = time.monotonic()
                time.sleep(a.seconds)
                c1, a1, p1 = read_counters(counters), ba.tree_cpu(agent.pid), \
                    self.pipeline_cpu(pipeline.pid)
                w1 = ctx_switches(agent.pid)[0]
                t1 = time.monotonic()
                s1 = self.spans.snapshot() if self.spans else None
                for proc, what in ((agent, "the agent"), (pipeline, "the pipeline")):
                    if proc.poll() is not None:
                        raise ba.BenchError(f"{what} exited during the window (status "
                                            f"{proc.returncode}); logs in {self.tmp}")
            finally:
                if agent is not None:
                    ba.stop_process(agent)
                logf.close()
                ba.stop_process(pipeline)
            window = t1 - t0
            d = {k: c1[k] - c0[k] for k in c0}
            if d["frames"] <= 0:
                raise ba.BenchError(f"the pipeline ran no frame in the window ({mode})")
            agent_s = (a1[0] - a0[0]) / ba.CLK_TCK
            agent_sched_s = (a1[1] - a0[1]) / 1e9
            pipe_s = (p1[0] - p0[0]) / ba.CLK_TCK
            pipe_sched_s = (p1[1] - p0[1]) / 1e9
            rec = {
                "mode": mode, "round": rnd, "window_s": window,
                "agent_cpu_pct": 100.0 * agent_s / window,
                "agent_sched_cpu_pct": 100.0 * agent_sched_s / window,
                "pipeline_cpu_pct": 100.0 * pipe_s / window,
                "cpu_per_frame_us": 1e6 * pipe_s / d["frames"],
                "sched_per_frame_us": 1e6 * pipe_sched_s / d["frames"],
                "agent_wakeups_per_s": (w1 - w0) / window,
                "pipeline_preempted_per_s": (p1[2] - p0[2]) / window,
                "frames": d["frames"], "fps": d["frames"] / window,
                "late": d["late"], "skipped": d["skipped"],
                "spans_sent": d["sent"], "spans_dropped": d["dropped"],
                "spans_counted": (s1[0] - s0[0]) if self.spans else None,
                "data_messages": (s1[1] - s0[1]) if self.spans else None,
            }
            self.results.append(rec)
            counted = "-" if rec["spans_counted"] is None else rec["spans_counted"]
            log(f"round {rnd} {mode:7s}: agent {rec['agent_cpu_pct']:.3f}% "
                f"(sched {rec['agent_sched_cpu_pct']:.3f}%), pipeline "
                f"{rec['cpu_per_frame_us']:.0f} us/frame (sched {rec['sched_per_frame_us']:.0f}), "
                f"{rec['frames']} frames, {rec['late']} late, {rec['skipped']} skipped, "
                f"agent wake-ups {rec['agent_wakeups_per_s']:.0f}/s, pipeline preempted "
                f"{rec['pipeline_preempted_per_s']:.1f}/s, "
                f"spans sent {rec['spans_sent']} dropped {rec['spans_dropped']} "
                f"counted {counted}")
            return rec

        def run_rounds(self):
            n = self.args.rounds * len(MODES)
            log(f"{n} windows of {self.args.warmup:g}+{self.args.seconds:g} s "
                f"(~{n * (self.args.warmup + self.args.seconds + 1) / 60:.1f} min)")
            for rnd in range(1, self.args.rounds + 1):
                for mode in MODES:
                    self.run_round(mode, rnd)

        def close(self):
            if self.spans:
                self.spans.close()
            super().close()

    return PipelineBench


def machine_info(a):
    import bench_agent  # on sys.path by now: main() and bench_torch_pipeline.py put it there
    model = bench_agent.cpu_model()
    try:
        version = subprocess.run([a.agent, "--version"], capture_output=True, text=True,
                                 timeout=10).stdout.strip().splitlines()[0]
    except (OSError, subprocess.TimeoutExpired, IndexError):
        version = "?"
    py = subprocess.run([PYTHON, "-c", "import platform; print(platform.python_version())"],
                        capture_output=True, text=True).stdout.strip()
    return {"machine": f"{platform.machine()}, {model}, {os.cpu_count()} online CPUs, "
                       f"Linux {platform.release()}",
            "agent": version, "agent_path": a.agent, **build_info(a.build),
            "python": py}


def print_build(info, rest):
    """The report's first lines: the machine, and the agent and its build followed by `rest`."""
    print(f"machine: {info['machine']}")
    print(f"agent: {info['agent']} ({info['agent_path']}, CMAKE_BUILD_TYPE={info['build_type']}"
          + rest)


def report(bench, a, info):
    rs = bench.results
    print_build(info, f", EDGEMON_SANITIZE={info['sanitize']}); pipeline: python {info['python']}")
    print(f"pipeline: {a.fps:g} fps, 3 stages x {bench.iterations} iterations "
          f"(~{a.stage_ms:g} ms each), CPU {bench.cpu_target}; agent (sample_period "
          f"{round(a.period * 1000)}ms), broker and harness on CPU {bench.cpu_mon}")
    print(f"method: {a.rounds} rounds x {{nospans, spans}} interleaved, fresh agent and "
          f"pipeline per window: {a.warmup:g} s warm-up, {a.seconds:g} s window")
    print()
    print("| mode | agent CPU % of a core | agent sched CPU % | agent wake-ups/s "
          "| pipeline CPU us/frame | pipeline sched us/frame | pipeline preempted/s "
          "| frames/s | late | skipped | spans sent | dropped | spans counted by agent |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    summary = {}
    for mode, mr in by_mode(rs, MODES):
        s = {k: summarize([r[k] for r in mr])
             for k in ("agent_cpu_pct", "agent_sched_cpu_pct", "agent_wakeups_per_s",
                       "cpu_per_frame_us", "sched_per_frame_us", "pipeline_preempted_per_s",
                       "fps")}
        for k in ("late", "skipped", "spans_sent", "spans_dropped", "frames"):
            s[k] = sum(r[k] for r in mr)
        counted = [r["spans_counted"] for r in mr]
        s["spans_counted"] = None if None in counted else sum(counted)
        summary[mode] = s

        def mm(key, fmt):
            return spread_text(s[key], fmt)
        print(f"| {mode} | {mm('agent_cpu_pct', '.3f')} | {mm('agent_sched_cpu_pct', '.3f')} "
              f"| {mm('agent_wakeups_per_s', '.0f')} "
              f"| {mm('cpu_per_frame_us', '.1f')} | {mm('sched_per_frame_us', '.1f')} "
              f"| {mm('pipeline_preempted_per_s', '.1f')} "
              f"| {s['fps']['median']:.2f} | {s['late']} of {s['frames']} | {s['skipped']} "
              f"| {s['spans_sent']} | {s['spans_dropped']} "
              f"| {'-' if s['spans_counted'] is None else s['spans_counted']} |")
    print("(median (min..max) over rounds; late, skipped, sent, dropped and counted are totals "
          "over the rounds' windows)")
    head = {}
    if len(summary) == 2:
        sp, ns = summary["spans"], summary["nospans"]

        def ratio(key):
            den = ns[key]["median"]
            return sp[key]["median"] / den if den else None

        def per_span(key):
            return (sp[key]["median"] - ns[key]["median"]) / len(STAGES)

        head = {"agent_cpu_ratio": ratio("agent_cpu_pct"),
                "agent_sched_cpu_ratio": ratio("agent_sched_cpu_pct"),
                "extra_us_per_span": per_span("cpu_per_frame_us"),
                "extra_sched_us_per_span": per_span("sched_per_frame_us")}

        def fr(v):
            return "n/a" if v is None else f"{v:.2f}x"
        print()
        print(f"agent CPU spans/nospans (ratio of medians): {fr(head['agent_cpu_ratio'])} "
              f"(stat), {fr(head['agent_sched_cpu_ratio'])} (sched); goal <= 1.15x")
        print(f"pipeline extra CPU per span: {head['extra_us_per_span']:.2f} us (stat), "
              f"{head['extra_sched_us_per_span']:.2f} us (sched); goal < 1 us")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"info": info, "args": vars(a), "iterations": bench.iterations,
                       "cpus": {"agent": bench.cpu_mon, "pipeline": bench.cpu_target},
                       "rounds": rs, "summary": summary, "headline": head}, f, indent=1)
        log(f"results written to {a.json}")


# --- command line -------------------------------------------------------------------------


def positive(kind):
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}")
        if not v > 0:
            raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
        return v
    return parse


def add_harness_args(p, json_help):
    """The options of the pipeline benches' harness: the agent's period, the CPUs, --json
    (json_help), --keep and the broker binary."""
    p.add_argument("--period", type=positive(float), default=0.1, metavar="SECONDS",
                   help="the agent's sample_period, seconds (default 0.1)")
    p.add_argument("--agent-cpu", dest="monitor_cpu", type=int, default=0, metavar="N",
                   help="CPU of the agent, the broker and this harness (default 0)")
    p.add_argument("--pipeline-cpu", dest="target_cpu", type=int, default=1, metavar="N",
                   help="CPU of the pipeline (default 1)")
    p.add_argument("--json", metavar="FILE", help=json_help)
    p.add_argument("--keep", action="store_true", help="keep the temp dir (configs, logs)")
    p.add_argument("--mosquitto", default="/usr/sbin/mosquitto",
                   help="the broker binary (default /usr/sbin/mosquitto)")


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="bench_span_pipeline.py",
        description="The design's case: a Python pipeline at 100 frames per second with 3 "
                    "stages of ~0.5 ms, with spans (`with edgemon.span(stage)`) and without, "
                    "watched by edgemon-agent at a 100 ms sample period. Reports the agent's "
                    "CPU (ratio spans/nospans) and the pipeline's extra CPU per span. Needs "
                    "mosquitto and a built edgemon-agent; python3-paho-mqtt and "
                    "python3-cbor2 to count the spans the agent published (else skipped).")
    p.add_argument("--build", default=os.path.join(REPO, "build", "normal"),
                   help="build dir holding firmware/agent/edgemon-agent, a Release or "
                        "RelWithDebInfo build (default build/normal)")
    p.add_argument("--rounds", type=positive(int), default=3,
                   help="rounds; each runs both modes (default 3)")
    p.add_argument("--seconds", type=positive(float), default=30.0,
                   help="measured window per mode and round, seconds (default 30)")
    p.add_argument("--warmup", type=float, default=3.0,
                   help="seconds between the agent's start and the window (default 3, "
                        "at least 1.5: the client connects within 1 s)")
    p.add_argument("--fps", type=positive(float), default=100.0,
                   help="frames per second (default 100)")
    p.add_argument("--stage-ms", type=positive(float), default=0.5,
                   help="busy CPU work per stage, ms, calibrated once per run (default 0.5)")
    p.add_argument("--iterations", type=positive(int), default=None,
                   help="loop iterations per stage instead of calibrating (to compare runs "
                        "with the same work)")
    add_harness_args(p, json_help="also write every window and the summary as JSON")
    # Internal: the pipeline process and the calibration run of this same file.
    p.add_argument("--pipeline", choices=MODES, help=argparse.SUPPRESS)
    p.add_argument("--counters", help=argparse.SUPPRESS)
    p.add_argument("--frame-times", help=argparse.SUPPRESS)
    p.add_argument("--calibrate", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if not a.pipeline and not a.calibrate and a.warmup < 1.5:
        p.error("--warmup must be at least 1.5 s (the client connects within 1 s)")
    if a.pipeline and (not a.iterations or not a.counters):
        p.error("--pipeline needs --iterations and --counters")
    if a.period < 0.001 or a.period > 60:
        p.error("--period must be within 0.001..60 s")
    return a


def missing_cpus(pins, cpus):
    """What `missing` says of each (cpu, flag) of pins whose CPU is not among cpus (a sorted
    list of the CPUs this process may run on)."""
    return [f"{what} {cpu}: not an available CPU (have {cpus})" for cpu, what in pins
            if cpu not in cpus]


def exit_if_missing(prog, missing, label):
    """Prints each line of missing as "PROG: LABEL: line" to stderr and exits 2; returns when
    nothing is missing."""
    if missing:
        for m in missing:
            print(f"{prog}: {label}: {m}", file=sys.stderr)
        sys.exit(2)


def check(a, prog="bench_span_pipeline", missing=()):
    """Resolves a.agent in a.build and the CPUs; exits 2 with what is missing (plus the
    caller's own `missing` lines)."""
    a.build = os.path.abspath(a.build)
    a.agent = os.path.join(a.build, "firmware", "agent", "edgemon-agent")
    missing = list(missing)
    if not (os.path.isfile(a.agent) and os.access(a.agent, os.X_OK)):
        missing.append(f"no edgemon-agent in build dir {a.build} (looked for {a.agent}); "
                       "build it, e.g. cmake -S . -B build-bench -G Ninja "
                       "-DCMAKE_BUILD_TYPE=Release -DEDGEMON_TESTS=OFF && cmake --build "
                       "build-bench --target edgemon-agent, then pass --build build-bench")
    if not os.access(a.mosquitto, os.X_OK):
        missing.append(f"mosquitto ({a.mosquitto}): apt-get install mosquitto")
    if not os.access(PYTHON, os.X_OK):
        missing.append(f"{PYTHON}: the pipeline runs under the system Python")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print(f"{prog}: one CPU available ({cpus[0]}): no pinning, the agent and the pipeline "
              "share it", file=sys.stderr)
        a.monitor_cpu = a.target_cpu = cpus[0]
    else:
        missing += missing_cpus(((a.monitor_cpu, "--agent-cpu"), (a.target_cpu, "--pipeline-cpu")),
                                cpus)
    exit_if_missing(prog, missing, "error")
    info = build_info(a.build)
    if info["build_type"] not in ("Release", "RelWithDebInfo") or info["sanitize"] == "ON":
        print(f"{prog}: warning: {a.build} is CMAKE_BUILD_TYPE={info['build_type']}, "
              f"EDGEMON_SANITIZE={info['sanitize']}; the figures are meant for a Release or "
              "RelWithDebInfo build without sanitizers", file=sys.stderr)


def main(argv):
    a = parse_args(argv)
    if a.calibrate:
        print(calibrate(a.stage_ms))
        return 0
    if a.pipeline:
        pipeline_main(a.pipeline, a.iterations, a.fps, a.counters, a.frame_times)
        return 0
    check(a)
    sys.path.insert(0, HERE)
    import bench_agent

    os.sched_setaffinity(0, {a.monitor_cpu})  # the harness stays off the pipeline's CPU
    bench = make_bench_class(bench_agent)(a)

    def body():
        bench.calibrate()
        bench.start_broker()
        bench.start_span_counter()
        info = machine_info(a)
        bench.run_rounds()
        report(bench, a, info)

    return bench_agent.run_bench("bench_span_pipeline", bench, body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
