"""Faults end to end: the real agent under conditions it must survive without losing count.

Each test starts a real mosquitto, a busy target and the real agent (conftest `stack`), drives
a fault at it, and checks that the agent stays alive, keeps publishing, keeps its memory
bounded and accounts for every datagram. The helpers below are shared by the fault tests:

    start_agent(stack, extra)          broker + target + agent + subscriber; waits for the birth
    send_spans(path, count, stages)    a sender process using the Python client library
    vm_kib(pid, field)                 VmHWM / VmRSS of a process, in KiB
    Ledger                             sums data messages: stage counts, counters by name
"""

import json
import os
import subprocess
import sys
import time

from conftest import ROOT, edgemon_proto, wait_for

DROP_REASONS = ("malformed", "version", "size", "disallowed", "overflow")

# --- helpers ---------------------------------------------------------------------------------


def start_agent(stack, extra=""):
    """Broker, target, agent (with `extra` config) and a subscriber that saw the birth.
    Returns (broker, agent, subscriber, birth, span socket path)."""
    broker, target, agent, sub = stack.watching(extra=extra)
    birth = sub.next("birth")
    path = stack.tmp / "run" / "spans.sock"
    wait_for(path.exists, 5, "the span socket")
    return broker, agent, sub, birth, path


# Runs in its own process: `count` spans as fast as the client sends them, round-robin over the
# stages, then one JSON line with the client's own counters (Client.stats()).
SENDER = """
import json, sys, time
sys.path.insert(0, {lib!r})
import edgemon
c = edgemon.Client({path!r})
stages = {stages!r}
n = len(stages)
record = c.record
now = time.monotonic_ns
for i in range({count}):
    record(stages[i % n], now(), 1000000 + (i & 1023) * 1000, frame=i)
print(json.dumps({{"stats": c.stats(), "attempts": {count}}}))
"""


def send_spans(path, count, stages=("pre", "infer", "post"), timeout=120):
    """Sends `count` spans through firmware/client/python from a child process, without
    blocking (a full socket queue is a counted drop at the sender). Returns Client.stats():
    {'sent': n, 'dropped': {'no_agent', 'queue_full', 'invalid_stage', 'other'}, ...}."""
    code = SENDER.format(lib=str(ROOT / "firmware" / "client" / "python"), path=str(path),
                         stages=list(stages), count=count)
    # Datagrams v1, the path under test: no deadline page, so the client makes no rings.
    env = {**os.environ, "EDGEMON_DEADLINE_PAGE": str(path) + ".no-deadline-page"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=timeout, env=env)
    assert r.returncode == 0, f"the sender failed ({r.returncode}):\n{r.stderr}"
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return out["stats"]


def vm_kib(pid, field="VmHWM"):
    """A Vm* line of /proc/<pid>/status in KiB (VmHWM: the peak resident set)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


class Ledger:
    """Reads data messages of one agent and sums them: the stage windows' span counts (each
    data message carries the spans of its own window) and the latest value of every counter
    by name (counters are cumulative)."""

    def __init__(self, sub, birth):
        self.sub = sub
        self.birth = birth
        self.stage_counts = {}
        self.values = {}
        self.messages = 0

    def take(self, timeout=10):
        """Reads the next data message into the sums; returns its values by name."""
        d = self.sub.next("data", timeout=timeout)
        self.messages += 1
        for st in d["stages"]:
            self.stage_counts[st["name"]] = self.stage_counts.get(st["name"], 0) + st["count"]
        self.values = edgemon_proto.values_by_name(d, self.birth)
        return self.values

    @property
    def spans(self):
        return sum(self.stage_counts.values())

    @property
    def dropped(self):
        return sum(self.values.get(f"spans.dropped.{r}", 0) for r in DROP_REASONS)

    def settle(self, expect, quiet=10, timeout=30):
        """Reads data messages until spans + drops reach `expect`, or until the counters have
        not moved for `quiet` messages in a row (the agent has read everything it will), or
        `timeout` s. Returns the number of data messages read."""
        deadline = time.monotonic() + timeout
        still, last = 0, None
        while time.monotonic() < deadline:
            self.take(timeout=max(0.5, deadline - time.monotonic()))
            now = (self.spans, self.dropped, self.values.get("spans.received"))
            if self.spans + self.dropped == expect:
                return self.messages
            still = still + 1 if now == last else 0
            last = now
            if still >= quiet:
                return self.messages
        return self.messages


# --- a burst of 10^6 spans -------------------------------------------------------------------

BURST = 1_000_000

# The agent's peak resident set may grow by at most this much across the burst. Its span path
# allocates nothing per datagram (recvmmsg into fixed buffers, a fixed 10 KiB histogram per
# stage, allocated at start), so the growth measured here is 0-200 KiB: pages of buffers and
# of the libc heap first touched under load, plus log lines. 16 MiB is far above that and far
# below what a per-span allocation would cost (10^6 spans x even 16 bytes is 16 MB).
BURST_HWM_BOUND_KIB = 16 * 1024


def test_a_burst_of_a_million_spans_is_counted_exactly_and_memory_stays_bounded(stack):
    _, agent, sub, birth, path = start_agent(stack)
    ledger = Ledger(sub, birth)
    ledger.take()
    hwm_before = vm_kib(agent.proc.pid)

    stats = send_spans(path, BURST)
    sent_ok = stats["sent"]
    dropped_client = sum(stats["dropped"].values())
    assert sent_ok + dropped_client == BURST, stats
    # Only a full queue may refuse a datagram here: the agent was there the whole time.
    assert stats["dropped"]["no_agent"] == 0 and stats["dropped"]["other"] == 0, stats
    assert stats["dropped"]["invalid_stage"] == 0, stats
    assert sent_ok > 0, stats

    ledger.settle(sent_ok)
    assert agent.proc.poll() is None, f"the agent died:\n{agent.log_text()[-3000:]}"
    # Conservation: a unix datagram socket refuses a send (EAGAIN) rather than dropping a
    # queued datagram, so every datagram the kernel accepted reached the agent and was
    # counted, as a span in some stage window or as a drop by reason.
    assert ledger.spans + ledger.dropped == sent_ok, (
        f"sender handed {sent_ok} spans to the socket ({dropped_client} refused), agent "
        f"counted {ledger.spans} in stage windows + {ledger.dropped} dropped "
        f"(spans.received {ledger.values.get('spans.received')})")
    assert ledger.dropped == 0, ledger.values
    assert ledger.values["spans.received"] == sent_ok
    assert set(ledger.stage_counts) == {"pre", "infer", "post"}

    # Still alive and still publishing after the burst.
    before = ledger.messages
    for _ in range(3):
        ledger.take()
    assert ledger.messages == before + 3
    assert agent.proc.poll() is None

    growth = vm_kib(agent.proc.pid) - hwm_before
    assert growth < BURST_HWM_BOUND_KIB, (
        f"the agent's VmHWM grew by {growth} KiB across the burst (bound "
        f"{BURST_HWM_BOUND_KIB} KiB)")
    print(f"burst: {sent_ok} sent, {dropped_client} refused (EAGAIN), {ledger.spans} counted, "
          f"VmHWM {hwm_before} -> {hwm_before + growth} KiB")
