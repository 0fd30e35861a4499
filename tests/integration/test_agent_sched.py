"""edgemon-agent's scheduling evidence of a real busy target, over a real mosquitto.

The birth announces the scheduling figures (counters, with their units), and the data messages
carry them: the busy target's proc.cpu grows by about its share of a core, its context switch
counts never go backwards, and each figure the machine cannot give is absent with a reason in
the birth rather than 0. Run through ctest (label integration), which sets EM_AGENT.
"""

from conftest import edgemon_proto

FIGURES = {
    "sched.runq_delay": "ns",
    "sched.ctxsw.voluntary": "1",
    "sched.ctxsw.involuntary": "1",
    "proc.cpu": "ns",
    "mem.major_faults": "1",
    "cgroup.cpu.throttled": "ns",
    "cgroup.cpu.nr_throttled": "1",
}


def names(birth):
    return {m["name"]: m for m in birth["metrics"]}


def attached_values(sub, birth, n):
    """The figures by name of the next n data messages of birth's session with the target up,
    in the session's order (seq): a message the broker was slow to take comes from the spool,
    after newer ones."""
    values = []
    while len(values) < n:
        d = sub.next("data")
        v = edgemon_proto.values_by_name(d, birth)
        if d["session"] == birth["session"] and v.get("target.up") == 1:
            values.append((d["seq"], v))
    return [v for _, v in sorted(values, key=lambda sv: sv[0])]


def test_busy_target_has_growing_cpu_time_and_scheduling_counters(stack):
    _, target, agent, sub = stack.watching()
    birth = sub.next("birth", pred=lambda m: "absent_reason" not in names(m)["pmu.task-clock"])
    metrics = names(birth)
    for name, unit in FIGURES.items():
        assert metrics[name]["unit"] == unit, name
        assert metrics[name]["kind"] in ("COUNTER", 1, "counter"), metrics[name]
    values = attached_values(sub, birth, 25)
    cpu = [v["proc.cpu"] for v in values]
    assert all(isinstance(c, int) for c in cpu), cpu
    assert cpu == sorted(cpu), cpu
    # 25 windows of 100 ms of a busy loop: well over 0.3 s of CPU even on a shared VM.
    assert cpu[-1] - cpu[0] > 300_000_000, cpu
    for name in FIGURES:
        seen = [v.get(name) for v in values]
        if "absent_reason" in metrics[name]:
            assert all(s is None for s in seen), (name, seen)
            continue
        counts = [s for s in seen if s is not None]
        assert counts, name
        assert counts == sorted(counts), (name, counts)
    # This machine has schedstat and a v1 cpu controller: the figures that prove it are here.
    assert values[-1].get("sched.ctxsw.involuntary") is not None
    if "absent_reason" not in metrics["sched.runq_delay"]:
        assert values[-1]["sched.runq_delay"] > 0


def test_target_sharing_its_cpu_with_a_hog_is_seen_contended(stack):
    """A hog pinned to the target's CPU: the runq delay grows by a large share of the time and
    the agent says it scans who else ran on the faster cadence."""
    import os
    import subprocess
    import sys

    from conftest import wait_for

    _, target, agent, sub = stack.watching()
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(target.pid, {cpu})
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    stack.on_stop(lambda: (hog.kill(), hog.wait(10)))
    os.sched_setaffinity(hog.pid, {cpu})
    birth = sub.next("birth", pred=lambda m: "absent_reason" not in names(m)["pmu.task-clock"])
    if "absent_reason" in names(birth)["sched.runq_delay"]:
        return  # A kernel without schedstat: nothing to judge contention by.
    wait_for(lambda: "target contended" in agent.log_text(), 15, "the agent to see contention")
    values = attached_values(sub, birth, 25)
    runq = [v["sched.runq_delay"] for v in values]
    # 2.5 s of sharing one CPU: the target waited for it a good part of that time.
    assert runq[-1] - runq[0] > 300_000_000, runq
