"""Write-ahead end to end: the real agent at qos_data = 1, a real mosquitto with persistence,
a persistent QoS 1 subscriber, and the agent killed with SIGKILL while its last messages are
not acknowledged.

The broker is stopped (SIGSTOP: the TCP connection stays up, no PUBACK comes) while the agent
keeps publishing (ack_timeout is longer than the stop); the agent is then killed with SIGKILL
and the stopped broker is killed too before it read them, so the messages of the stop exist
only in the agent's spool. The broker is started again on its saved sessions, and a new agent
on the same spool replays them: the subscriber receives every sequence number of the killed
session (duplicates allowed, no gap), the replayed ones marked historical.

With write_ahead off the same run leaves the stop's messages lost (the second test says so,
as the comparison that makes the first one mean something).
"""

import signal
import time

from test_spool import Durable, figure, persistent_broker
from conftest import wait_for

QOS1 = "qos_data = 1\nack_timeout = 30s\n"


def run_kill_during_stop(stack, write_ahead):
    """Returns (subscriber, session, last seq seen before the stop, the second agent)."""
    stack.durables = []
    broker = persistent_broker(stack)
    spool = stack.tmp / "wal.spool"
    target = stack.target()
    keys = f"write_ahead = {'true' if write_ahead else 'false'}\n"
    t0 = time.time_ns()
    agent = stack.agent(broker.port, f"cmdline = {target.marker}", extra=QOS1, spool=spool,
                        spool_keys=keys)
    sub = Durable(broker.port, agent.device)
    birth = wait_for(lambda: next((b for b in sub.snapshot()[1] if b["time_ns"] >= t0), None),
                     10, "the birth")
    session = birth["session"]
    wait_for(lambda: len(sub.seqs(session)) >= 10, 10, "live data")
    time.sleep(1.5)  # the subscriber's session is in the broker's autosave (every second)
    broker.proc.send_signal(signal.SIGSTOP)
    # What the broker wrote to the subscriber's socket before it stopped is still on its way:
    # let it arrive, so that every later sequence number can only come from the replay.
    time.sleep(0.5)
    seen_before = max(sub.seqs(session))
    try:
        time.sleep(2)  # ~20 data messages sent, none acknowledged
        agent.proc.send_signal(signal.SIGKILL)
        agent.proc.wait(10)
    finally:
        # What the stopped broker had in its socket buffer dies with it: only the agent's
        # spool still holds those messages.
        broker.proc.send_signal(signal.SIGKILL)
        broker.proc.send_signal(signal.SIGCONT)
        broker.proc.wait(10)
    broker.start()
    second = stack.agent(broker.port, f"cmdline = {target.marker}", device=agent.device,
                         extra=QOS1, spool=spool, spool_keys=keys)
    return sub, session, seen_before, second


def test_kill_9_with_unacknowledged_messages_loses_no_sequence_number(stack):
    sub, session, seen_before, second = run_kill_during_stop(stack, write_ahead=True)
    # The stop's messages come back, replayed by the second process.
    wait_for(lambda: len([s for s in sub.seqs(session) if s > seen_before]) >= 10, 30,
             "the killed session's unacknowledged messages")
    assert "pending to replay" in second.log_text()
    seqs = sub.seqs(session)
    missing = sorted(set(range(seqs[0], seqs[-1] + 1)) - set(seqs))
    assert missing == [], f"{len(missing)} missing: {missing[:20]}"
    data, _ = sub.snapshot()
    after = [d for d in data if d["session"] == session and d["seq"] > seen_before]
    # Every message of the stop reached the subscriber only through the replay: historical.
    assert after and all(d.get("historical") for d in after), \
        [(d["seq"], d.get("historical")) for d in after][:10]
    # In order: the replay sends them by sequence number.
    replayed = [d["seq"] for d in after]
    assert replayed == sorted(replayed)
    # Each was measured while the ones before it waited for their PUBACK: spool.inflight
    # counts them (a gauge of held records), and none was evicted.
    birth = next(b for b in sub.snapshot()[1] if b["session"] == session)
    inflight = [figure(d, birth, "spool.inflight") for d in after]
    assert max(inflight) >= 5, inflight
    assert {figure(d, birth, "spool.evicted_inflight") for d in after} == {0}
    assert second.proc.poll() is None
    sub.close()


def test_without_write_ahead_the_same_kill_loses_the_unacknowledged(stack):
    sub, session, seen_before, second = run_kill_during_stop(stack, write_ahead=False)
    wait_for(lambda: "connected to" in second.log_text(), 10, "the second agent's session")
    time.sleep(2)  # replay would be done by now (32 messages a tick)
    assert [s for s in sub.seqs(session) if s > seen_before + 1] == []
    assert second.proc.poll() is None
    sub.close()
