"""The agent on a board it detects from a fixture tree (tests/fixtures/boards/<name>/, copied so
the test can change sensor files): the profile's PMU events and sensors land in the birth,
sensor figures in the data (missing ones absent, never 0), and the throttle and temp_max rules
raise the level with the cause in the reason.
"""

import shutil
import time

from conftest import ROOT, edgemon_proto, wait_for

FIXTURES = ROOT / "tests" / "fixtures" / "boards"


def agent_on(stack, board, extra=""):
    """An agent on a copy of the board fixture `board` (its sys_root), watching a target:
    (the copy, the target, the agent, the subscriber)."""
    tree = stack.tmp / f"root-{board}"
    shutil.copytree(FIXTURES / board, tree, symlinks=True)
    broker, target, agent, sub = stack.watching(
        extra=f"[agent]\nboard = auto\nsys_root = {tree}\n"
              "[degrade]\nwindow = 200ms\nenter_windows = 1\nleave_windows = 2\n" + extra)
    return tree, target, agent, sub


def test_orin_profile_events_and_sensors_reach_the_birth_and_data(stack):
    tree, _, agent, sub = agent_on(stack, "jetson-agx-orin")
    birth = sub.next("birth")
    assert birth["board"] == "jetson-agx-orin"
    names = {m["name"] for m in birth["metrics"]}
    # The profile's events after the generic ones; this VM has no such PMU: absent, with why.
    for event in ("l1d_cache_refill", "stall_backend"):
        assert f"pmu.{event}" in names
    absent = {m["name"]: m.get("absent_reason") for m in birth["metrics"]}
    assert absent["pmu.l1d_cache_refill"]
    assert "thermal.CPU-therm.temp" in names and "gpu.load" in names
    data = sub.next("data", pred=lambda d: edgemon_proto.values_by_name(d, birth)
                    .get("thermal.CPU-therm.temp") is not None)
    values = edgemon_proto.values_by_name(data, birth)
    assert abs(values["thermal.CPU-therm.temp"] - 45.531) < 1e-6
    assert values["pmu.l1d_cache_refill"] is None
    assert "board: jetson-agx-orin" in agent.log_text()
    # A temp_max WARN rule from the profile's [defaults] (85 C).
    assert any(b["id"] == "process.temp_max" and b["level"] == "WARN" for b in birth["budgets"])


def test_a_thermal_trip_throttles_and_the_reason_says_why(stack):
    tree, _, agent, sub = agent_on(stack, "jetson-agx-orin",
                                "[budget.process]\nthrottle = on\nthrottle_level = DEGRADED\n")
    birth = sub.next("birth")
    assert any(b["id"] == "process.throttle" for b in birth["budgets"])
    sub.next("data")
    # CPU-therm crosses its passive trip point (99 C).
    (tree / "sys/class/thermal/thermal_zone0/temp").write_text("101500\n")
    state = sub.next("state", timeout=15, pred=lambda m: m["level"] == "DEGRADED")
    assert state["rule"] == "process.throttle"
    assert "thermal trip" in state["reason"] and "CPU-therm" in state["reason"], state
    # Cooled down: the rule clears after its clean windows.
    (tree / "sys/class/thermal/thermal_zone0/temp").write_text("45000\n")
    back = sub.next("state", timeout=15, pred=lambda m: m["level"] == "NOMINAL")
    assert back["prev_level"] in ("WARN", "DEGRADED")


def test_a_sensor_file_that_disappears_is_absent_not_zero(stack):
    tree, _, agent, sub = agent_on(stack, "raspberry-pi-5")
    birth = sub.next("birth")
    temps = [m["name"] for m in birth["metrics"] if m["name"].startswith("thermal.")
             and m["name"].endswith(".temp")]
    assert temps
    zone = next(iter(sorted((tree / "sys/class/thermal").glob("thermal_zone*"))))
    sub.next("data", pred=lambda d: edgemon_proto.values_by_name(d, birth)[temps[0]] is not None)
    (zone / "temp").write_text("garbage\n")
    time.sleep(0.1)
    data = wait_for(lambda: (lambda d: d if edgemon_proto.values_by_name(d, birth)[temps[0]]
                             is None else None)(sub.next("data")), 15, "the figure to go absent")
    assert edgemon_proto.values_by_name(data, birth)[temps[0]] is None
    assert agent.proc.poll() is None
