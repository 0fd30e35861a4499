"""Store and forward end to end: the real agent, a real mosquitto that goes away, and the
spool file on disk.

- The broker stopped for 30 s and started again: a subscriber sees every sequence number of
  the session, the ones from the outage replayed with `historical` and their original times.
- The broker away past the spool's capacity: the agent publishes the exact number of records
  it dropped (`spool.dropped`), and that is exactly the number of sequence numbers missing.
- The agent killed with SIGKILL while the broker is away, then started again: the new agent
  replays what the old one spooled.
- The spool's file cannot grow (RLIMIT_FSIZE, as a full disk): the agent logs the error once,
  counts what it could not keep (`spool.lost`), keeps running and keeps publishing live data.

The subscriber keeps a persistent session (clean_session false, QoS 1) on a broker with
persistence, and the agent publishes data at QoS 1, so a message the broker accepted reaches
the subscriber even across the broker's restart: a missing sequence number is the agent's.
"""

import os
import resource
import signal
import subprocess
import threading
import time
import uuid

import paho.mqtt.client as mqtt

from conftest import AGENT, Agent, edgemon_proto, free_port, wait_for
from test_spans import sender, span


class Durable:
    """A subscriber with a persistent session: what the broker stores for it survives the
    broker's restart and its own reconnects. Collects decoded data messages."""

    def __init__(self, port, device):
        self.data = []
        self.births = []
        self.lock = threading.Lock()
        self.client = mqtt.Client(client_id=f"durable-{uuid.uuid4().hex[:8]}",
                                  clean_session=False)
        self.client.reconnect_delay_set(1, 2)
        self.client.on_message = self._on_message
        self.client.on_connect = lambda c, u, f, rc: c.subscribe(f"edgemon/v1/{device}/#", 1)
        self.client.connect("127.0.0.1", port, keepalive=5)
        self.client.loop_start()

    def _on_message(self, client, userdata, m):
        kind = m.topic.rsplit("/", 1)[-1]
        if kind not in ("data", "birth"):
            return
        msg = edgemon_proto.decode(m.payload)
        with self.lock:
            (self.data if kind == "data" else self.births).append(msg)

    def seqs(self, session):
        with self.lock:
            return sorted({d["seq"] for d in self.data if d["session"] == session})

    def snapshot(self):
        with self.lock:
            return list(self.data), list(self.births)

    def close(self):
        self.client.loop_stop()
        self.client.disconnect()


def persistent_broker(stack):
    """mosquitto that saves its sessions (so the subscriber's survives a restart)."""
    broker = stack.broker(start=False)
    store = stack.tmp / f"mosq-{broker.port}"
    store.mkdir()
    # As root, mosquitto drops to its own user, which cannot write into pytest's directory.
    user = "user root\n" if os.geteuid() == 0 else ""
    broker.conf.write_text(broker.conf.read_text() + f"persistence true\n"
                           f"persistence_location {store}/\nautosave_interval 1\n" + user)
    return broker.start()


def figure(data, birth, name):
    return edgemon_proto.values_by_name(data, birth).get(name)


def last_figure(sub, session, name, since_ns=0):
    """`name` in the newest live data message of the session measured after since_ns (None
    before there is one)."""
    data, births = sub.snapshot()
    birth = next(b for b in reversed(births) if b["session"] == session)
    live = [d for d in data if d["session"] == session and not d.get("historical")
            and d["time_ns"] >= since_ns]
    return figure(max(live, key=lambda d: d["seq"]), birth, name) if live else None


def start(stack, broker, target=None, **kw):
    target = target or stack.target()
    stack.last_target = target
    t0 = time.time_ns()
    agent = stack.agent(broker.port, f"cmdline = {target.marker}", extra="qos_data = 1\n", **kw)
    sub = Durable(broker.port, agent.device)
    stack.durables.append(sub)
    # This agent's birth (a retained one of an earlier agent of the device may come first).
    birth = wait_for(lambda: next((b for b in sub.snapshot()[1] if b["time_ns"] >= t0), None),
                     10, "the birth")
    session = birth["session"]
    wait_for(lambda: len(sub.seqs(session)) >= 5, 10, "live data")
    return agent, sub, session


def outage(broker, seconds):
    broker.stop()  # SIGTERM: mosquitto saves its sessions, then exits.
    t0 = time.time_ns()
    time.sleep(seconds)
    broker.start()
    return t0


def test_broker_away_30s_then_every_sequence_number_arrives(stack):
    stack.durables = []
    broker = persistent_broker(stack)
    agent, sub, session = start(stack, broker)
    t0 = outage(broker, 30)
    t1 = time.time_ns()
    # Live data after the outage says the replay is done: nothing pending.
    wait_for(lambda: last_figure(sub, session, "spool.pending", t1) == 0, 30,
             "the replay to finish")
    assert last_figure(sub, session, "spool.replayed", t1) >= 250
    n = max(sub.seqs(session))
    seqs = sub.seqs(session)
    missing = sorted(set(range(seqs[0], n + 1)) - set(seqs))
    assert missing == [], f"{len(missing)} missing: {missing[:20]}"
    data, _ = sub.snapshot()
    replayed = [d for d in data if d.get("historical")]
    # About 10 Hz for 30 s went to the spool, each with the time it was measured.
    assert len(replayed) >= 250
    assert all(t0 - 2_000_000_000 <= d["time_ns"] <= t1 + 2_000_000_000 for d in replayed)
    assert last_figure(sub, session, "spool.dropped") == 0
    assert last_figure(sub, session, "spool.lost") == 0
    assert agent.proc.poll() is None
    sub.close()


def feed_spans(path, stop):
    """Spans of many lengths in three stages until stop is set."""
    s = sender(path)
    i = 0
    while not stop.is_set():
        for stage in ("pre", "infer", "post"):
            s.send(span(stage, 1_000_000 + (i * 7919) % 50_000_000))
        i += 1
        time.sleep(0.002)
    s.close()


def test_broker_away_past_capacity_publishes_the_exact_drop_count(stack):
    stack.durables = []
    broker = persistent_broker(stack)
    agent, sub, session = start(stack, broker, spool_keys="size = 64KiB\n")
    # Spans in three stages make each data message carry histograms (~1 KiB): 20 s of them is
    # ~200 messages, and 64 KiB holds about 60.
    stop = threading.Event()
    feeder = threading.Thread(target=feed_spans, args=(stack.tmp / "run" / "spans.sock", stop))
    feeder.start()
    try:
        outage(broker, 20)
    finally:
        stop.set()
        feeder.join()
    t1 = time.time_ns()
    wait_for(lambda: last_figure(sub, session, "spool.pending", t1) == 0, 30, "the replay")
    dropped = last_figure(sub, session, "spool.dropped", t1)
    seqs = sub.seqs(session)
    missing = (max(seqs) - seqs[0] + 1) - len(seqs)
    assert dropped > 0
    assert missing == dropped, f"{missing} sequence numbers missing, {dropped} reported dropped"
    assert last_figure(sub, session, "spool.lost") == 0
    assert "spool:" in agent.log_text()
    sub.close()


def test_agent_killed_while_the_broker_is_away_replays_after_restart(stack):
    stack.durables = []
    broker = persistent_broker(stack)
    spool = stack.tmp / "shared.spool"
    agent, sub, session = start(stack, broker, spool=spool)
    seen_before = max(sub.seqs(session))
    broker.stop()
    time.sleep(4)  # ~40 data messages into the spool.
    agent.proc.send_signal(signal.SIGKILL)
    agent.proc.wait(10)
    broker.start()
    # The same device and spool, a new process: a new session.
    second = stack.agent(broker.port, f"cmdline = {stack.last_target.marker}",
                         device=agent.device, spool=spool, extra="qos_data = 1\n")
    wait_for(lambda: len(sub.seqs(session)) >= 30 + len([s for s in sub.seqs(session)
                                                          if s <= seen_before]),
             30, "the old session's spooled data")
    old = [s for s in sub.seqs(session) if s > seen_before]
    # Contiguous up to the last one spooled; a message in flight when the broker went away
    # can be missing at the start (the killed process took it with it).
    assert old == list(range(old[0], old[-1] + 1))
    assert old[0] - seen_before <= 20
    data, _ = sub.snapshot()
    assert all(d.get("historical") for d in data if d["session"] == session
               and d["seq"] in old[1:])
    assert "pending to replay" in second.log_text()
    sub.close()


def test_spool_that_cannot_grow_is_logged_and_the_agent_keeps_running(stack):
    stack.durables = []
    broker = persistent_broker(stack)
    spool = stack.tmp / "small.spool"
    # Make the spool file first, then run the agent with a file size limit below its end,
    # as a disk that filled up: appends past 8 KiB (4 KiB into the ring) fail with EFBIG.
    first, sub, session = start(stack, broker, spool=spool)
    assert first.stop() == 0
    sub.close()
    limit = 8 * 1024

    def cap():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    stack.durables = []
    agent, sub, session = start(stack, broker, spool=spool, preexec=cap,
                                device=first.device)
    outage(broker, 6)
    t1 = time.time_ns()
    wait_for(lambda: (last_figure(sub, session, "spool.lost", t1) or 0) > 0, 30,
             "spool.lost after the outage")
    assert agent.proc.poll() is None
    log = agent.log_text()
    # Logged once per episode, not per lost message: a smaller message (a state change) may
    # still fit and end the episode ("appending again"), and the next large one opens another.
    failures = log.count("spool: cannot append")
    assert 1 <= failures <= log.count("spool: appending again") + 1, log
    assert failures <= 5, log
    assert "File too large" in log
    assert last_figure(sub, session, "spool.write_errors") > 0
    n = len(sub.seqs(session))
    wait_for(lambda: len(sub.seqs(session)) > n + 5, 10, "live data after the outage")
    sub.close()


def test_broker_that_stops_acknowledging_is_treated_as_away(stack):
    """A broker that hangs (SIGSTOP: the TCP connection stays up, no PUBACK comes): after
    ack_timeout the agent drops the session and spools; once the broker runs again, every
    sequence number arrives."""
    stack.durables = []
    broker = persistent_broker(stack)
    target = stack.target()
    t0 = time.time_ns()
    agent = stack.agent(broker.port, f"cmdline = {target.marker}",
                        extra="qos_data = 1\nack_timeout = 2s\n")
    sub = Durable(broker.port, agent.device)
    birth = wait_for(lambda: next((b for b in sub.snapshot()[1] if b["time_ns"] >= t0), None),
                     10, "the birth")
    session = birth["session"]
    wait_for(lambda: len(sub.seqs(session)) >= 5, 10, "live data")
    broker.proc.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: "no PUBACK within 2000 ms" in agent.log_text(), 15,
                 "the agent to give up on the silent broker")
        time.sleep(3)
    finally:
        broker.proc.send_signal(signal.SIGCONT)
    t1 = time.time_ns()
    wait_for(lambda: last_figure(sub, session, "spool.pending", t1) == 0, 40, "the replay")
    assert last_figure(sub, session, "spool.replayed", t1) > 0
    seqs = sub.seqs(session)
    missing = sorted(set(range(seqs[0], seqs[-1] + 1)) - set(seqs))
    assert missing == [], f"{len(missing)} missing: {missing[:20]}"
    assert agent.proc.poll() is None
    sub.close()


def test_a_log_file_past_the_file_size_limit_does_not_kill_the_agent(stack, tmp_path):
    """RLIMIT_FSIZE applies to every file the agent writes, its log too (stdout a file on a
    full disk): a write past it must fail with EFBIG, not raise SIGXFSZ, whose default action
    kills the process, from the first line the agent prints (here `--check`'s)."""
    agent = Agent(tmp_path, free_port(), "pid = 1")
    log = tmp_path / "full.log"
    log.write_bytes(b"x" * 16384)
    limit = 8 * 1024

    def cap():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    with open(log, "ab") as out:
        rc = subprocess.run([AGENT, "--check", "--config", str(agent.config)], stdout=out,
                            stderr=subprocess.STDOUT, preexec_fn=cap, timeout=30).returncode
    assert rc == 0, f"exit {rc} (-{int(signal.SIGXFSZ)}: killed by SIGXFSZ)"
    assert log.stat().st_size == 16384  # Nothing could be written, and nothing was.
