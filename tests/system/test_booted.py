"""Judges what tests/system/inside.sh recorded in a booted Debian system (scripts/lib/system.sh):
the README's board steps, the service as deployed (systemd as PID 1, user edgemon, the unit's
sandbox), the loop started by another user through su. The facts are in results.txt, the
device's every MQTT message in run.rec; flight recordings and profiles are decoded here with
this tree's edgemon-cli.

EM_SYSTEM_OUT is the out/ folder the system wrote; EM_CLI the host's edgemon-cli."""

import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from recordings import parse_recording  # noqa: E402

OUT = os.environ.get("EM_SYSTEM_OUT", "")
CLI = os.environ.get("EM_CLI", "")

pytestmark = pytest.mark.skipif(not OUT or not os.path.isdir(OUT),
                                reason="EM_SYSTEM_OUT: no booted system's results")


def _facts():
    facts = {}
    with open(os.path.join(OUT, "results.txt"), encoding="utf-8") as f:
        for line in f:
            key, _, value = line.rstrip("\n").partition("=")
            facts[key] = value
    return facts


@pytest.fixture(scope="module")
def facts():
    return _facts()


@pytest.fixture(scope="module")
def messages():
    """Every record of run.rec, decoded by edgemon-cli decode --json, with its payload."""
    path = os.path.join(OUT, "run.rec")
    with open(path, "rb") as f:
        records, error, _ = parse_recording(f.read())
    assert error in (None, "truncated"), error  # the recorder was stopped by a signal
    decoded = subprocess.run([CLI, "decode", "--json", path], capture_output=True, text=True,
                             check=False).stdout.splitlines()
    out = []
    for rec, line in zip(records, decoded):
        rec["json"] = json.loads(line)
        out.append(rec)
    return out


def _journal():
    with open(os.path.join(OUT, "agent.journal"), encoding="utf-8", errors="replace") as f:
        return f.read()


def _of_kind(messages, kind):
    return [m for m in messages if m["kind"] == kind and m["payload"]]


def test_the_system_ran_to_the_end(facts):
    assert facts.get("done") == "1", facts
    assert facts["paranoid_before"] == "3"  # Debian's kernel default: the case to handle


def test_readme_install_and_check(facts):
    assert facts["install_rc"] == "0", open(os.path.join(OUT, "apt-install.log")).read()[-2000:]
    assert facts["loop_shipped"] == "yes"
    assert facts["check_rc"] == "0", open(os.path.join(OUT, "check.log")).read()


def test_unit_ready_as_edgemon_under_its_sandbox(facts):
    assert facts["restart_rc"] == "0"
    assert facts["active"] == "active"
    assert facts["agent_user"] == "edgemon"
    capeff = int(facts["agent_capeff"], 16)
    assert capeff == (1 << 38) | (1 << 19), hex(capeff)  # CAP_PERFMON | CAP_SYS_PTRACE only


def test_service_and_client_meet_with_no_setting(facts):
    assert "spans.sock" in facts["runtime_dir_listing"].split()


def test_the_span_writer_is_the_target(facts):
    assert "su" in facts["loop_ancestors"].split(), facts  # started through su, as users do
    assert facts["attached_pid"] == facts["loop_pid"], facts
    if facts["sudo_installed"] == "yes":
        assert facts["sudo_attached_pid"] == facts["sudo_loop_pid"], facts


def test_counters_open_under_the_service(messages):
    data = [m["json"].get("message") or {} for m in _of_kind(messages, "data")]
    values = [d.get("values", {}) for d in data]
    assert any("pmu.task-clock" in v for v in values), values[-1:]


def test_spans_arrive_and_the_level_degrades_and_recovers(facts, messages):
    """The slow phase breaks a latency rule of infer (its spans came through the ring: a stall
    rule alone would say only that none came), the level rises, and later returns to NOMINAL;
    the loop read both through the state page."""
    states = [m["json"]["message"] for m in _of_kind(messages, "state")]
    breach = [i for i, s in enumerate(states)
              if s["level"] in ("DEGRADED", "CRITICAL") and
              s.get("rule", "").startswith("infer.") and s["rule"] != "infer.stall"]
    assert breach, [(s["level"], s.get("rule")) for s in states]
    after = [s["level"] for s in states[breach[0]:]]
    assert "NOMINAL" in after, after
    assert int(facts["loop_switched"]) >= 1 and int(facts["loop_back"]) >= 1


def test_breach_flight_and_profile_decode(messages, tmp_path):
    flights, profiles = _of_kind(messages, "flight"), _of_kind(messages, "profile")
    assert flights and profiles, sorted({m["kind"] for m in messages})
    flight = tmp_path / "flight.cbor"
    flight.write_bytes(flights[0]["payload"])
    shown = subprocess.run([CLI, "flight", "--file", str(flight)], capture_output=True,
                           text=True, check=False)
    assert shown.returncode == 0, shown.stderr
    assert "infer" in shown.stdout
    prof = tmp_path / "profile.cbor"
    prof.write_bytes(profiles[0]["payload"])
    folded = subprocess.run([CLI, "profile", "--file", str(prof), "--folded"],
                            capture_output=True, text=True, check=False)
    assert folded.returncode == 0, folded.stderr
    stacks = folded.stdout
    assert "sample_inference.py" in stacks or ";infer" in stacks, stacks[:2000]  # Python frames
    assert "_PyEval_EvalFrameDefault" in stacks or "Py_RunMain" in stacks, stacks[:2000]


def test_reload_applies_a_changed_budget(facts, messages):
    assert facts["reload_rc"] == "0"
    assert "budget rules" in facts["reload_log"], facts["reload_log"]


def test_watchdog_kills_and_restarts_a_stopped_agent(facts):
    assert int(facts["watchdog_restarts"]) >= 1
    assert int(facts["watchdog_restart_ms"]) < 40_000


def test_no_sequence_gap_across_the_watchdog_restart(messages):
    """Every data message of every agent session arrived (live or replayed from the spool):
    each session's sequence numbers run from 0 with no hole, the killed one's and its
    successor's alike."""
    sessions = {}
    for m in _of_kind(messages, "data"):
        msg = m["json"]["message"]
        sessions.setdefault(msg["session"], set()).add(msg["seq"])
    assert len(sessions) >= 2, sessions.keys()  # the watchdog's restart is a new session
    for session, seqs in sessions.items():
        assert seqs == set(range(max(seqs) + 1)), (session, sorted(set(range(max(seqs))) - seqs))


def test_stop_within_timeout(facts):
    assert 0 < int(facts["stop_ms"]) < int(facts["timeout_stop_s"]) * 1000


def test_aggregator_unit_stores_and_serves(facts):
    assert facts["aggregator_rc"] == "0"
    assert facts["aggregator_user"] not in ("root", ""), facts  # DynamicUser
    assert open(os.path.join(OUT, "healthz.code")).read() == "200"
    with open(os.path.join(OUT, "metrics.txt"), encoding="utf-8") as f:
        assert "edgemon_" in f.read()
    with open(os.path.join(OUT, "devices.json"), encoding="utf-8") as f:
        assert facts["device"] in f.read()


def test_purge_leaves_nothing(facts):
    assert facts["purge_rc"] == "0"
    assert facts["purge_left"] == ""


ARCH = os.environ.get("EM_SYSTEM_ARCH", "amd64")


@pytest.mark.skipif(ARCH != "arm64", reason="the Arm board's checks")
def test_arm64_board_on_jetpack5_baseline(facts):
    """Debian 11 arm64: JetPack 5's kernel (5.10) and glibc 2.31, the board from the device
    tree."""
    assert facts["machine"] == "aarch64"
    assert facts["kernel"].startswith("5.10."), facts["kernel"]
    with open(os.path.join(OUT, "detect.txt"), encoding="utf-8") as f:
        detect = f.read()
    # The emulated board's device tree names it linux,dummy-virt (qemu's virt machine), which no
    # profile in boards/ claims: the agent read it and fell back to the generic Arm profile.
    assert "model 'linux,dummy-virt'" in detect, detect
    assert detect.startswith("board: generic-arm64"), detect


@pytest.mark.skipif(ARCH != "arm64", reason="the Arm board's checks")
def test_arm64_pmu_counts_cycles_through_armv8_pmuv3(messages):
    """The emulated PMUv3 through the kernel's armv8_pmuv3 driver: cycles present and rising
    within a session; every counter the emulated PMU lacks is absent (null) in every message
    and its birth says why, never a 0."""
    data = [m["json"]["message"] for m in _of_kind(messages, "data")]
    rises = 0
    for a, b in zip(data, data[1:]):
        x, y = a["values"].get("pmu.cycles"), b["values"].get("pmu.cycles")
        if a["session"] == b["session"] and x is not None and y is not None and y > x:
            rises += 1
    assert rises >= 10, rises
    births = [m["json"]["message"] for m in _of_kind(messages, "birth")]
    last = births[-1]["metrics"]
    for metric in last:
        name = metric["name"]
        if not name.startswith("pmu.") or metric["kind"] != "counter":
            continue
        seen = [d["values"].get(name) for d in data if d["session"] == births[-1]["session"]]
        if all(v is None for v in seen):
            assert metric.get("absent_reason"), metric
