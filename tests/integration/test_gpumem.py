"""The target's own GPU memory (gpu.mem.process) from a Jetson's nvmap clients file: the real
agent on a board fixture tree (copied, so the test can write the file) watching a real target
process whose pid the test puts in the file. The figure follows the file, its lines of other
pids do not count, a gpu_mem_cap rule raises the level when it grows past the cap, and a file
that stops parsing makes the figure absent, never 0. A board without nvmap (and without NVML
here) announces the figure absent with both reasons.
"""

import ctypes

from conftest import edgemon_proto, wait_for
from test_board_agent import agent_on  # an agent on a copy of a board fixture

CLIENTS = "sys/kernel/debug/nvmap/iovmm/clients"
KIB = 1024


def clients_text(rows, total_kib):
    """An nvmap iovmm clients file as L4T r35 prints it: rows of (process, pid, KiB)."""
    lines = ["%-18s %18s %8s %11s\n" % ("CLIENT", "PROCESS", "PID", "SIZE")]
    for process, pid, kib in rows:
        lines.append("%-18s %18s %8u %10uK\n" % ("user", process, pid, kib))
    lines.append("%-18s %18s %8s %10uK\n" % ("total", "", "", total_kib))
    return "".join(lines)


def gpu_value(sub, birth, pred, what, timeout=20):
    """The first data message whose gpu.mem.process satisfies pred; its value."""
    def check():
        values = edgemon_proto.values_by_name(sub.next("data", timeout=timeout), birth)
        value = values.get("gpu.mem.process", "missing")
        return (value,) if pred(value) else None
    return wait_for(check, timeout, what)[0]


def test_the_target_s_nvmap_clients_are_summed_and_a_cap_rule_fires(stack):
    tree, target, agent, sub = agent_on(
        stack, "jetson-agx-orin",
        "[budget.process]\ngpu_mem_cap = 1GiB\ngpu_mem_cap_level = DEGRADED\n")
    birth = sub.next("birth")
    metrics = {m["name"]: m for m in birth["metrics"]}
    assert metrics["gpu.mem.process"]["unit"] == "By"
    assert any(b["id"] == "process.gpu_mem_cap" and b["rule"] == "gpu_mem_cap"
               for b in birth["budgets"])
    pid = target.proc.pid
    # Two clients of the target and one of another process.
    (tree / CLIENTS).write_text(clients_text(
        [("Xorg", 1520, 38912), ("python3", pid, 262144), ("python3", pid, 4096)], 305152))
    value = gpu_value(sub, birth, lambda v: v == (262144 + 4096) * KIB,
                      "gpu.mem.process to read the target's two clients")
    assert value == 266240 * KIB
    assert "gpu memory: the target's from nvmap" in agent.log_text()
    # It grows past the 1 GiB cap: the rule enters.
    (tree / CLIENTS).write_text(clients_text(
        [("Xorg", 1520, 38912), ("python3", pid, 1310720)], 1349632))
    state = sub.next("state", timeout=20, pred=lambda m: m["level"] == "DEGRADED")
    assert state["rule"] == "process.gpu_mem_cap"
    gpu_value(sub, birth, lambda v: v == 1310720 * KIB, "the grown figure")
    # The file stops parsing: absent, not 0, and the agent says why once.
    (tree / CLIENTS).write_text("garbage\n")
    gpu_value(sub, birth, lambda v: v is None, "the figure to go absent")
    wait_for(lambda: "does not parse" in agent.log_text(), 10, "the reason in the log")
    assert agent.log_text().count("does not parse") == 1
    assert agent.proc.poll() is None


def nvml_loadable():
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        return True
    except OSError:
        return False


def test_a_board_without_a_source_announces_the_figure_absent_with_why(stack):
    tree, target, agent, sub = agent_on(stack, "raspberry-pi-5")
    birth = sub.next("birth")
    gpu = next(m for m in birth["metrics"] if m["name"] == "gpu.mem.process")
    if nvml_loadable():
        return  # This machine has NVML: the figure has a source; nothing absent to check.
    why = gpu.get("absent_reason") or ""
    assert "nvmap clients: No such file or directory" in why, why
    assert "NVML: libnvidia-ml.so.1 not loadable" in why, why
    data = sub.next("data")
    assert edgemon_proto.values_by_name(data, birth)["gpu.mem.process"] is None
    assert agent.log_text().count("no source: nvmap clients") == 1
