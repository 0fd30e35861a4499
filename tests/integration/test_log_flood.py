"""Log lines a peer can cause are rate limited: a real agent on a real mosquitto, flooded with
thousands of malformed commands, unknown commands, cmd/flight and cmd/profile requests it
does not act on, and Python stacks datagrams it refuses, writes the first line of each kind
and then, once its 10 s interval is over (not the 1.41 s a 32-bit product gave), one line
with the count of the others. Every request is accounted for: first lines plus the counts
are what was sent (less the one recording and the one window a request may start).
"""

import re
import socket
import time

import uuid

import cbor2
import paho.mqtt.client as mqtt

from conftest import wait_for

COMMANDS = 5000  # of each kind
DATAGRAMS = 5000
INTERVAL_S = 10


def cmd(command):
    return cbor2.dumps({0: 1, 1: 4, 2: time.time_ns(), 4: command})


def pystacks_datagram():
    """A datagram of a size only Python stacks have, with their header and a body the agent
    refuses (no window asked for these stacks)."""
    return b"EM\x02\x08" + bytes(600)


# kind: (the first line's words, the summary's words)
KINDS = {
    "malformed": ("ignoring a malformed command on cmd/rebirth", "malformed commands ignored"),
    "unknown": ("ignoring unknown command cmd/", "unknown commands ignored"),
    "flight": ("cmd/flight to", "triggers not recorded"),
    "profile": ("profile: cmd/profile", "triggers not sampled"),
    "pystacks": ("Python stacks from pid", "Python stacks datagrams refused"),
}


def first_lines(log, kind):
    return log.count(KINDS[kind][0])


def held(log, kind):
    """The counts of the summary lines of a kind."""
    pattern = rf"(\d+) more {re.escape(KINDS[kind][1])} in the last {INTERVAL_S} s"
    return [int(n) for n in re.findall(pattern, log)]


def test_a_flood_of_peer_input_logs_a_bounded_number_of_lines(stack):
    broker, _, agent, sub = stack.watching()
    sub.next("birth")
    sock_path = stack.tmp / "run" / "spans.sock"
    wait_for(sock_path.exists, 5, "the span socket")
    lines_before = agent.log_text().count("\n")
    prefix = f"edgemon/v1/{agent.device}/cmd"
    pub = mqtt.Client(client_id=f"it-flood-{uuid.uuid4().hex[:8]}")
    pub.connect("127.0.0.1", broker.port, keepalive=30)
    pub.loop_start()

    started = time.monotonic()
    sent = {"malformed": COMMANDS, "unknown": COMMANDS, "flight": COMMANDS, "profile": COMMANDS}
    for i in range(COMMANDS):
        pub.publish(f"{prefix}/rebirth", b"\xff\x00garbage", qos=1)
        pub.publish(f"{prefix}/bogus{i % 7}", cmd(1), qos=1)
        pub.publish(f"{prefix}/flight", cmd(2), qos=1)
        pub.publish(f"{prefix}/profile", cmd(3), qos=1)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    datagram = pystacks_datagram()
    for _ in range(DATAGRAMS):
        s.sendto(datagram, str(sock_path))
    s.close()
    pub.publish(f"{prefix}/rebirth", b"\xff", qos=1).wait_for_publish()
    sent["malformed"] += 1
    pub.loop_stop()
    pub.disconnect()

    def accounted():
        log = agent.log_text()
        return all(first_lines(log, k) + sum(held(log, k)) >= n - 1 for k, n in sent.items())

    wait_for(accounted, 60, "every command in a first line or a summary's count")
    wait_for(lambda: held(agent.log_text(), "pystacks"), 30, "the Python stacks summary")
    elapsed = time.monotonic() - started
    log = agent.log_text()
    assert agent.proc.poll() is None
    # The summaries come after the interval, not before it.
    assert elapsed >= INTERVAL_S - 1, elapsed
    for kind, n in sent.items():
        counts = held(log, kind)
        assert 1 <= first_lines(log, kind) <= 3, (kind, first_lines(log, kind))
        assert counts and max(counts) > 100, (kind, counts)
        assert n - 1 <= first_lines(log, kind) + sum(counts) <= n, (kind, counts)
    # Python stacks: some of a flood are dropped before the agent reads them (counted in
    # spans.dropped), the others are refused; one line, then their count.
    assert 1 <= first_lines(log, "pystacks") <= 3
    assert 0 < first_lines(log, "pystacks") + sum(held(log, "pystacks")) <= DATAGRAMS
    # 25,000 bad requests: a few dozen lines in all (the first of each kind, the summaries, and
    # the agent's own lines of these seconds at log_level debug).
    added = log.count("\n") - lines_before
    assert added < 400, added
