"""The verdict's named cause, short form: causes injected into a real pipeline (the Python
client, the real agent, a real mosquitto), the first cause of the escalation's verdict checked
against what was injected, and one clean run that must name none.

The runs are tests/bench/bench_diagnose.py's (its Run, with its long form's options and
--realtime): a 25 frames a second pipeline whose infer stage is a 5 ms busy loop, pinned to
the last CPU, NOMINAL for 4.5 s under a p50 = 14 ms rule, then:
  cpu_contention   four busy processes pinned to the pipeline's CPU
  cpu_throttling   the pipeline in a child cpu cgroup from its start (v1's cpu controller, or
                   a v2 cgroup that is handed the controller); at injection a quota of 1 ms
                   per 20 ms (cpu.cfs_quota_us; v2 cpu.max): half the long form's share, so that
                   the throttled time outweighs the contention a loaded machine adds once the
                   pipeline is a normal task again (see below)
  clean            nothing: no escalation, or one whose verdict names no cause
These two causes are the ones the long form names every time on a loaded 2-core machine; the
others (more_work, io, waiting, frequency_cap, memory_pressure) depend on what the machine's
other load does to the run-queue delay and to the whole system's I/O pressure, and are
measured by the long form only (docs/BENCHMARKS.md, "diagnosis").

The pipeline runs SCHED_FIFO where allowed (root) until the injection, then as a normal task
that the hogs and the quota act on; the clean run's stays SCHED_FIFO. The machine's other load
then does not delay the stage before the injection, nor in the clean run: a loaded machine is
real contention, and a clean run on it would rightly name cpu_contention. Where SCHED_FIFO is
refused and the level rises before the injection, the run says nothing of the verdict and is repeated, up to
ATTEMPTS times, then the case is skipped with what each attempt saw. cpu_throttling needs a cpu
cgroup this process may create (root; a v2 hierarchy that is writable): it is skipped with the
reason otherwise. Deadlines are generous (an agent built with ASan is slower); nothing is timed.
"""

import os
import sys
import tempfile

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "bench"))
import bench_diagnose as bench  # noqa: E402  (the runs, their pipeline and their cgroups)
from bench_diagnose_hog import describe  # noqa: E402  (a verdict on one line)

ATTEMPTS = 3
EARLY = "escalated before the injection"


def options(timeout_s):
    """The long form's options with --realtime and half its quota, waiting timeout_s for the
    escalation."""
    return bench.parser().parse_args(["--agent", os.environ.get("EM_AGENT", ""), "--realtime",
                                      "--period-us", "20000", "--timeout-s", str(timeout_s)])


def run(cause, timeout_s):
    """One run of cause (bench_diagnose's outcome), repeated while it escalated before the
    injection; skipped when every attempt did, or when its cgroup cannot be made."""
    seen = []
    for _ in range(ATTEMPTS):
        # A short directory: the agent's socket path must fit a sockaddr_un.
        with tempfile.TemporaryDirectory(prefix="em-inject-") as tmp:
            r = None
            try:
                r = bench.Run(options(timeout_s), cause, tmp)
                outcome = r.execute()
            except OSError as e:
                if "cgroup" in str(e).lower() or e.errno in (1, 13, 30):
                    pytest.skip(f"{cause}: no cpu cgroup to throttle the pipeline in: {e}")
                raise
            finally:
                if r is not None:
                    r.cleanup()
        if outcome["outcome"] != EARLY or cause == bench.CLEAN:
            return outcome
        seen.append(f"{outcome['seconds_after_start']} s: {describe(outcome['verdict'])}")
    pytest.skip(f"{cause}: the level rose before the injection in all {ATTEMPTS} attempts "
                f"(the machine's load): " + "; ".join(seen))


def check(outcome, cause):
    """The escalation's verdict names cause first; returns that cause's evidence."""
    print(f"{cause}: {outcome['outcome']} {outcome.get('seconds_after_injection')} s after the "
          f"injection: {describe(outcome['verdict'])}")
    assert outcome["outcome"] == "escalated", outcome
    assert outcome["pipeline_ran"], f"the pipeline failed: {outcome}"
    v = outcome["verdict"]
    assert v is not None, f"{cause}: the state message carries no verdict: {outcome}"
    assert v["stage"] == "infer" and v["statistic"] == "p50", v
    assert v["nominal_windows"] >= 1, describe(v)
    assert v["breach_ns"] > v["baseline_ns"], describe(v)
    assert outcome["top"] == cause, f"{cause} injected, named first: {describe(v)}"
    return v["causes"][0]["evidence"]


def test_hogs_on_the_pipelines_cpu_are_named_cpu_contention():
    ev = check(run("cpu_contention", 40), "cpu_contention")
    if "runq_delay_ms_per_frame" in ev:
        assert ev["runq_delay_ms_per_frame"] > ev["baseline_runq_delay_ms_per_frame"], ev
    else:
        assert ev["involuntary_switches_per_frame"] > \
            ev["baseline_involuntary_switches_per_frame"], ev


def test_a_cpu_quota_on_the_pipelines_cgroup_is_named_cpu_throttling():
    ev = check(run("cpu_throttling", 40), "cpu_throttling")
    assert ev["throttled_ms_per_frame"] > ev["baseline_throttled_ms_per_frame"], ev


def test_a_clean_run_names_no_cause():
    outcome = run(bench.CLEAN, 8)
    print(f"clean: {outcome['outcome']}: {describe(outcome['verdict'])}")
    assert outcome["pipeline_ran"], f"the pipeline failed: {outcome}"
    assert outcome["top"] is None, f"clean run, named first: {describe(outcome['verdict'])}"
