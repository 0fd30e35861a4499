#!/usr/bin/python3
"""bench_torch_pipeline.py - the real case: what watching a PyTorch pipeline costs.

The pipeline is the example users copy, firmware/client/python/examples/torch_inference.py:
torchvision's mobilenet_v3_small (random weights) on one thread under torch.inference_mode(),
30 fps, three stages. It runs three ways, interleaved round by round:

  alone    the pipeline with no agent and no spans (it still reads edgemon.level());
  nospans  the agent watches it (sample_period --period, 100ms), no spans;
  spans    the agent watches it and each stage is in `with edgemon.span()` (through the
           client's ring).

Each window is a fresh pipeline (and agent): the pipeline loads the model, warms up for
--warmup seconds, then measures --seconds and prints its own figures (torch_inference.py
--report): frame time from the frame's deadline to the end of its last stage (p50, p99, max),
late frames (ending after the next frame's deadline) and its CPU per frame. Over the same
window this harness reads the agent's CPU from /proc/PID/stat (10 ms ticks) and
/proc/PID/task/*/schedstat (on-CPU ns). The pipeline runs on --pipeline-cpu (1), the agent,
the broker (a private mosquitto on a free 127.0.0.1 port, tests/bench/bench_agent.py's) and
this harness on --agent-cpu (0).

Report: per mode the median and min..max over rounds of each figure, late frames per round,
and the agent CPU ratio spans/nospans (ratio of medians; the goal is at most 1.15x). Lateness
is "detectable" only when a mode's frame p99 lies outside the other modes' spread.

Usage: /usr/bin/python3 tests/bench/bench_torch_pipeline.py [--build build-bench]
           [--rounds 3] [--seconds 30] [--json FILE]
Needs mosquitto, python3-torch and python3-torchvision, and a built edgemon-agent (Release).
Results are written up in docs/BENCHMARKS.md ("The real case: a PyTorch pipeline").
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"
EXAMPLE = os.path.join(REPO, "firmware", "client", "python", "examples", "torch_inference.py")
MODES = ("alone", "nospans", "spans")
sys.path.insert(0, HERE)
import bench_agent  # noqa: E402
from bench_span_pipeline import check as span_pipeline_check  # noqa: E402
from bench_span_pipeline import (add_harness_args, by_mode, machine_info,  # noqa: E402
                                  positive, print_build, spread_text)
from bench_span_pipeline import summarize as spread  # noqa: E402


def log(msg):
    print(f"bench_torch_pipeline: {msg}", file=sys.stderr, flush=True)


class TorchBench(bench_agent.Bench):
    """bench_agent.Bench's broker, agent configuration and clean-up; self.target is the
    current window's pipeline."""

    def run_window(self, mode, rnd):
        a, ba = self.args, bench_agent
        name = f"{mode}-r{rnd}"
        run_dir = os.path.join(self.tmp, f"{name}.run")
        os.makedirs(run_dir, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEMON_")}
        env["EDGEMON_RUNTIME_DIR"] = run_dir  # bench_agent.Bench.agent_config's runtime_dir
        cmd = [PYTHON, EXAMPLE, "--fps", repr(a.fps), "--warmup", repr(a.warmup),
               "--seconds", repr(a.seconds), "--report"]
        if mode != "spans":
            cmd.append("--no-spans")
        errf = open(os.path.join(self.tmp, f"{name}.pipeline.log"), "w")
        pipe = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=errf, text=True,
                                preexec_fn=ba.pinned(self.cpu_target))
        self.target = pipe
        agent = None
        agent_log = open(os.path.join(self.tmp, f"{name}.agent.log"), "w")
        try:
            if mode != "alone":
                agent = subprocess.Popen([a.agent, "-c", self.agent_config(a.period, name)],
                                         stdout=agent_log, stderr=subprocess.STDOUT,
                                         preexec_fn=ba.pinned(self.cpu_mon))
            line = pipe.stdout.readline()
            if line.strip() != "edgemon-example: window start":
                raise ba.BenchError(f"the pipeline did not start its window ({mode}); "
                                    f"log: {errf.name}")
            a0, t0 = (ba.tree_cpu(agent.pid) if agent else None), time.monotonic()
            line = pipe.stdout.readline()
            a1, t1 = (ba.tree_cpu(agent.pid) if agent else None), time.monotonic()
            if agent is not None and agent.poll() is not None:
                raise ba.BenchError(f"the agent exited during the window; log: "
                                    f"{agent_log.name}")
            try:
                rep = json.loads(line)
            except ValueError:
                raise ba.BenchError(f"no report from the pipeline ({mode}); log: {errf.name}")
        finally:
            if agent is not None:
                ba.stop_process(agent)
            agent_log.close()
            ba.stop_process(pipe)
            errf.close()
        window = t1 - t0
        rec = {"mode": mode, "round": rnd, "window_s": window, "frames": rep["frames"],
               "late": rep["late"], "p50_ms": rep["frame_ms"]["p50"],
               "p99_ms": rep["frame_ms"]["p99"], "max_ms": rep["frame_ms"]["max"],
               "cpu_ms_per_frame": rep["cpu_ms_per_frame"],
               "agent_cpu_pct": None, "agent_sched_cpu_pct": None, "ring_spans": None}
        if agent is not None:
            rec["agent_cpu_pct"] = 100.0 * (a1[0] - a0[0]) / ba.CLK_TCK / window
            rec["agent_sched_cpu_pct"] = 100.0 * (a1[1] - a0[1]) / 1e9 / window
        if rep.get("client"):
            rec["ring_spans"] = rep["client"].get("rings", {}).get("written")
            rec["spans_dropped"] = sum(rep["client"]["dropped"].values())
        self.results.append(rec)
        agent_txt = "-" if agent is None else \
            f"{rec['agent_cpu_pct']:.3f}% (sched {rec['agent_sched_cpu_pct']:.3f}%)"
        log(f"round {rnd} {mode:7s}: frames {rec['frames']}, p50 {rec['p50_ms']:.2f} ms, "
            f"p99 {rec['p99_ms']:.2f} ms, max {rec['max_ms']:.2f} ms, late {rec['late']}, "
            f"{rec['cpu_ms_per_frame']:.2f} ms CPU/frame, agent {agent_txt}")
        return rec

    def run_rounds(self):
        a = self.args
        minutes = a.rounds * len(MODES) * (a.warmup + a.seconds + 5) / 60
        log(f"{a.rounds} rounds x {len(MODES)} modes, each a model load + {a.warmup:g} s "
            f"warm-up + {a.seconds:g} s window (~{minutes:.1f} min)")
        for rnd in range(1, a.rounds + 1):
            for mode in MODES:
                self.run_window(mode, rnd)


def report(bench, a, info):
    rs = bench.results
    print_build(info, f"); python {info['python']}, torch {info['torch']}, "
                f"torchvision {info['torchvision']}")
    print(f"pipeline: torch_inference.py, mobilenet_v3_small, 1 thread, {a.fps:g} fps, "
          f"CPU {bench.cpu_target}; agent (sample_period {round(a.period * 1000)}ms), broker "
          f"and harness on CPU {bench.cpu_mon}")
    print(f"method: {a.rounds} rounds x {{{', '.join(MODES)}}} interleaved, a fresh pipeline "
          f"(and agent) per window: model load + {a.warmup:g} s warm-up, {a.seconds:g} s window")
    print()
    print("| mode | frame p50 ms | frame p99 ms | frame max ms | late frames per round "
          "| pipeline CPU ms/frame | agent CPU % of a core | agent sched CPU % |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    summary = {}
    for mode, mr in by_mode(rs, MODES):
        s = {k: spread([r[k] for r in mr]) for k in ("p50_ms", "p99_ms", "max_ms",
                                                      "cpu_ms_per_frame")}
        for k in ("agent_cpu_pct", "agent_sched_cpu_pct"):
            vals = [r[k] for r in mr if r[k] is not None]
            s[k] = spread(vals) if vals else None
        s["late"] = [r["late"] for r in mr]
        s["frames"] = [r["frames"] for r in mr]
        summary[mode] = s

        mm = spread_text
        late = ", ".join(f"{x} of {f}" for x, f in zip(s["late"], s["frames"]))
        print(f"| {mode} | {mm(s['p50_ms'], '.2f')} | {mm(s['p99_ms'], '.2f')} "
              f"| {mm(s['max_ms'], '.2f')} | {late} | {mm(s['cpu_ms_per_frame'], '.2f')} "
              f"| {mm(s['agent_cpu_pct'], '.3f')} | {mm(s['agent_sched_cpu_pct'], '.3f')} |")
    print("(median (min..max) over rounds)")
    head = {}
    if "spans" in summary and "nospans" in summary and summary["nospans"]["agent_cpu_pct"]:
        sp, ns = summary["spans"], summary["nospans"]

        def ratio(key):
            den = ns[key]["median"]
            return sp[key]["median"] / den if den else None
        head = {"agent_cpu_ratio": ratio("agent_cpu_pct"),
                "agent_sched_cpu_ratio": ratio("agent_sched_cpu_pct"),
                "extra_cpu_us_per_frame": 1000.0 * (sp["cpu_ms_per_frame"]["median"] -
                                                    ns["cpu_ms_per_frame"]["median"])}
        fr = {k: ("n/a" if v is None else f"{v:.2f}x") for k, v in head.items()
              if k.endswith("ratio")}
        print()
        print(f"agent CPU spans/nospans (ratio of medians): {fr['agent_cpu_ratio']} (stat), "
              f"{fr['agent_sched_cpu_ratio']} (sched); goal <= 1.15x")
        print(f"pipeline CPU per frame, spans - nospans: {head['extra_cpu_us_per_frame']:.0f} us "
              "(medians)")
        lo = min(summary[m]["p99_ms"]["min"] for m in summary)
        hi = max(summary[m]["p99_ms"]["max"] for m in summary)
        outside = [m for m in summary
                   if all(summary[m]["p99_ms"]["median"] > summary[o]["p99_ms"]["max"]
                          for o in summary if o != m)]
        print(f"frame p99 across all windows: {lo:.2f}..{hi:.2f} ms; mode whose median p99 "
              f"lies above every other mode's spread: {', '.join(outside) or 'none'}")
        head["p99_above_spread"] = outside
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"info": info, "args": vars(a), "rounds": rs, "summary": summary,
                       "headline": head}, f, indent=1)
        log(f"results written to {a.json}")


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="bench_torch_pipeline.py",
        description="The real case: torch_inference.py (mobilenet_v3_small, one thread, "
                    "30 fps, 3 stages) alone, watched by edgemon-agent without spans, and "
                    "watched with spans, interleaved. Reports frame p50/p99/max, late frames, "
                    "the pipeline's CPU per frame and the agent's CPU. Needs mosquitto, "
                    "python3-torch, python3-torchvision and a built edgemon-agent.")
    p.add_argument("--build", default=os.path.join(REPO, "build-bench"),
                   help="build dir holding firmware/agent/edgemon-agent, Release "
                        "(default build-bench)")
    p.add_argument("--rounds", type=positive(int), default=3, help="rounds (default 3)")
    p.add_argument("--seconds", type=positive(float), default=30.0,
                   help="measured window per mode and round, seconds (default 30)")
    p.add_argument("--warmup", type=float, default=3.0,
                   help="seconds between the model's load and the window (default 3; the "
                        "client registers its ring within 1 s)")
    p.add_argument("--fps", type=positive(float), default=30.0, help="frames per second (30)")
    add_harness_args(p, json_help="also write every window and the summary")
    a = p.parse_args(argv)
    if a.warmup < 1.5:
        p.error("--warmup must be at least 1.5 s (the client registers within 1 s)")
    if not 0.001 <= a.period <= 60:
        p.error("--period must be within 0.001..60 s")
    return a


def check(a):
    """bench_span_pipeline's checks plus torch; exits 2 with what is missing."""
    r = subprocess.run([PYTHON, "-c", "import torch, torchvision; print(torch.__version__, "
                        "torchvision.__version__)"], capture_output=True, text=True)
    missing = []
    if r.returncode != 0:
        missing.append("torch: apt-get install python3-torch python3-torchvision")
    else:
        a.torch_versions = r.stdout.split()
    span_pipeline_check(a, "bench_torch_pipeline", missing)


def main(argv):
    a = parse_args(argv)
    check(a)
    os.sched_setaffinity(0, {a.monitor_cpu})  # the harness stays off the pipeline's CPU
    bench = TorchBench(a)

    def body():
        bench.start_broker()
        info = machine_info(a)
        info["torch"], info["torchvision"] = a.torch_versions
        bench.run_rounds()
        report(bench, a, info)

    return bench_agent.run_bench("bench_torch_pipeline", bench, body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
