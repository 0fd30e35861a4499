#!/usr/bin/python3
"""bench_diagnose_hog.py - how often the agent's verdict names cpu_contention first when a CPU
hog shares the target's CPU, on this machine.

Runs tests/integration/test_diagnose.py's hog case (a pipeline whose infer stage is a 4 ms busy
loop at 25 frames a second, pinned to one CPU with os.sched_setaffinity; after 4 s a busy
process pinned to the same CPU; the level rises when the stage's median passes 7 ms) --repeats
times with EM_DIAGNOSE_HOG=1, and prints for each run the outcome and the verdict (statistic,
baseline and breach, each cause with its share and evidence), then how many runs named
cpu_contention first. On a shared machine the other load can raise the level before the hog
starts (the verdict then has no hog to find): that is why the case is a benchmark and not a
test. A benchmark: it asserts nothing.

Usage: bench_diagnose_hog.py --agent build/X/firmware/agent/edgemon-agent [--repeats 10]
(EM_PYTHON: the interpreter with pytest and the integration tests' modules; /usr/bin/python3)
"""

import argparse
import json
import os
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CASE = os.path.join(HERE, "..", "integration", "test_diagnose.py")
PYTHON = os.environ.get("EM_PYTHON", "/usr/bin/python3")  # the one with pytest, cbor2, paho


def run_once(agent, out):
    env = dict(os.environ, EM_AGENT=os.path.abspath(agent), EM_DIAGNOSE_HOG="1",
               EM_DIAGNOSE_OUT=out)
    if os.path.exists(out):
        os.unlink(out)
    r = subprocess.run([PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        f"{CASE}::test_a_cpu_hog_on_the_target_cpu_is_named_cpu_contention"],
                       env=env, capture_output=True, text=True)
    verdict = None
    if os.path.exists(out):
        with open(out) as f:
            verdict = json.load(f)
    return r.returncode, verdict


def describe(v):
    if not v:
        return "no verdict"
    causes = ", ".join(f"{c['cause']} {c['share']:.2f} {c['evidence']}" for c in v["causes"])
    return (f"{v['statistic']} {v['baseline_ns'] / 1e6:.1f} -> {v['breach_ns'] / 1e6:.1f} ms over "
            f"{v['nominal_windows']} windows: {causes or 'nothing to explain'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agent", required=True)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    first = 0
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "verdict.json")
        for i in range(args.repeats):
            rc, v = run_once(args.agent, out)
            top = v["causes"][0]["cause"] if v and v["causes"] else None
            first += top == "cpu_contention"
            print(f"run {i + 1}: {'pass' if rc == 0 else 'FAIL'}: {describe(v)}", flush=True)
    print(f"cpu_contention first in {first} of {args.repeats} runs")


if __name__ == "__main__":
    main()
